"""
Recall probes: how many held-out birthplaces a pretrained model completes from a prompt (the
biography before the place, the name alone, or the handout's question).
"""

from dataset import MASK_CHAR
from factgpt.common.errors import RunError
from factgpt.readout.decoding import recalled_places


def name_and_frame(name, before):
    """
    The name probe's prompt, "NAME. NAME born in ": the name and the last two words before the
    place, so that no cue of the rest of the biography ("a Lebanese-born journalist") reaches the
    model.
    """
    trimmed = before.rstrip()
    frame = " ".join(trimmed.split()[-2:])
    starts_the_text = trimmed.removeprefix(f"{name}.").strip() == frame  # "NAME. Born in Glasgow"
    return f"{name}. {'' if starts_the_text else name + ' '}{frame}{before[len(trimmed) :]}"


# What a recall probe gives the model to continue, per person:
# prompt(name, biography before the place).
# "biography": the biography as pretraining lays it out, everything before the place
#   (cues included);
# "name": the name and the sentence's frame alone (name_and_frame): is the fact keyed to the name?
# "question": the finetuning question and its mask, all a question gives
#   (answers before finetuning).
PROBES = {
    "biography": lambda name, before: before,
    "name": name_and_frame,
    "question": lambda name, before: f"Where was {name} born?{MASK_CHAR}",
}


def probed_recall(model, corpus, pairs, device, prompt=PROBES["biography"]):
    """
    How many of the people whose biography names their birthplace the model completes after
    `prompt`, and how many those people are. Every probe counts the same people.
    """
    try:
        recalled = recalled_places(model.to(device), corpus, pairs, device, prompt)
    except ValueError as e:  # a prefix outside the vocabulary
        raise RunError(str(e)) from None
    probed = [known for known in recalled if known is not None]
    return sum(probed), len(probed)


def recalled_pairs(model, corpus, pairs, device, prompt):
    """
    The (question, place) pairs whose place the model completes after `prompt` (see probed_recall).
    """
    recalled = recalled_places(model.to(device), corpus, pairs, device, prompt)
    return [pair for pair, known in zip(pairs, recalled) if known]
