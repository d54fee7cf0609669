"""
Reading answers out of a model: greedy completions with a KV cache, answers to
"Where was X born?" questions, and how many birthplaces a model recalls from the corpus.
"""

import re

import torch

from dataset import MASK_CHAR, known_characters
from model import KVCache
from utils import sample


@torch.no_grad()
def greedy_decode_cached(model, x, steps, stop_id):
    """
    Greedy continuation of x (B, T) with a KVCache: the prefix is read once and every
    step feeds only the new token of the rows still going; a row that has produced
    stop_id leaves the batch, and the rest of its output is stop_id.
    Returns the generated ids (B, <= steps). Needs T + steps - 1 <= block_size - 1,
    so that `sample` would never have slid its window; then the tokens are the same.
    """
    cache = KVCache()
    logits, _ = model(x, cache=cache)
    generated = torch.full((x.size(0), steps), stop_id, dtype=torch.long, device=x.device)
    going = torch.arange(x.size(0), device=x.device)  # the rows still decoding, in cache order
    for step in range(steps):
        next_ids = logits[:, -1, :].argmax(dim=-1)
        generated[going, step] = next_ids
        if step == steps - 1:
            break
        unfinished = next_ids != stop_id
        still_going = int(unfinished.sum())
        if still_going == 0:
            return generated[:, : step + 1]
        if still_going < len(going):
            going, next_ids = going[unfinished], next_ids[unfinished]
            cache.keep_rows(unfinished)
        logits, _ = model(next_ids[:, None], cache=cache)
    return generated


def greedy_completions(model, prompts, stoi, itos, device, steps, stop_char=None, batch_size=256, sequential=False):
    """
    Greedy continuations of text prompts, `steps` characters each (with the cache, a
    row that has written stop_char stops there; the rest of it is stop_char).

    Prompts of equal length are decoded together with a KV cache, which gives the
    characters of one-at-a-time `sample` calls (sequential=True) in a fraction of the time.
    """
    stop_id = stoi[stop_char] if stop_char is not None else -1
    encoded = [[stoi[c] for c in prompt] for prompt in prompts]
    context = model.get_block_size() - 1
    was_training = model.training
    model.eval()
    if sequential:
        batches = [[i] for i in range(len(encoded))]
    else:
        by_length = {}
        for i, ids in enumerate(encoded):
            by_length.setdefault(len(ids), []).append(i)
        batches = [rows[j : j + batch_size] for rows in by_length.values() for j in range(0, len(rows), batch_size)]
    generated = [None] * len(encoded)
    for rows in batches:
        x = torch.tensor([encoded[i] for i in rows], dtype=torch.long, device=device)
        if sequential or x.size(1) + steps - 1 > context:
            out = sample(model, x, steps)[:, x.size(1) :]
        else:
            out = greedy_decode_cached(model, x, steps, stop_id)
        for i, ids in zip(rows, out.tolist()):
            generated[i] = "".join(itos[i] for i in ids)
    model.train(was_training)
    return generated


def predict_places(model, questions, stoi, itos, device, steps=32, batch_size=256, sequential=False):
    """
    Answer "Where was X born?" questions with greedy decoding.

    Each question is followed by MASK; the answer is the text the model writes
    between that MASK and the next one (everything written if it never closes it),
    up to a line break if it writes one: the vocabulary holds the corpus's newline,
    and a place never contains one, so every answer fits on one line of a predictions file.
    """
    prompts = [question + MASK_CHAR for question in questions]
    answers = greedy_completions(model, prompts, stoi, itos, device, steps, MASK_CHAR, batch_size, sequential)
    return [re.split("[\r\n]", answer.split(MASK_CHAR)[0])[0] for answer in answers]


def birthplace_recall(model, documents, pairs, stoi, itos, device, prompt=None):
    """
    How much of the pairs' birthplaces the model has memorised from the corpus.

    pairs: (question, place) from a "Where was X born?" file. For each person whose
    document (the corpus line that starts with their name) names the place within
    the first block_size-1 characters, the model continues the document from just
    before the place; it recalls the place if its greedy continuation starts with it.
    prompt(name, document_before_place) -> text gives the model other text to continue
    (e.g. the name alone in a fixed sentence) to ask where the memorised fact is keyed;
    the people probed are the same, the prompt's characters outside the vocabulary are
    dropped, and a prompt left empty raises ValueError.
    Returns (recalled, probed): probed counts the people that could be probed.
    """
    context = model.get_block_size() - 1
    by_first_word = {}
    for document in documents:
        by_first_word.setdefault(document.split(" ")[0], []).append(document)
    prompts, places = [], []
    for question, place in pairs:
        name = question.removeprefix("Where was ").removesuffix(" born?")
        candidates = by_first_word.get(name.split(" ")[0], [])
        document = next((d for d in candidates if d.startswith(name + ".")), "")
        at = document.find(place)
        if 0 < at and at + len(place) <= context and all(c in stoi for c in document[: at + len(place)]):
            text = document[:at] if prompt is None else known_characters(prompt(name, document[:at]), stoi)[0]
            if not text:
                raise ValueError(f"the prompt for {name} has no characters of the vocabulary")
            prompts.append(text)
            places.append(place)
    if not prompts:
        return 0, 0
    steps = max(len(place) for place in places)
    completions = greedy_completions(model, prompts, stoi, itos, device, steps)
    return sum(c.startswith(place) for c, place in zip(completions, places)), len(prompts)
