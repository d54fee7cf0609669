"""
Reading answers out of a model: greedy completions, answers to "Where was X born?", and birthplaces
recalled.
"""

import dataclasses
import math
import re
from typing import Optional

import torch

from dataset import MASK_CHAR, encoded
from factgpt.common.questions import biographies, name_of
from model import KVCache
from utils import eval_mode, sample


@dataclasses.dataclass
class Decoded:
    """
    What greedy decoding wrote: ids (B, S) and each one's log-probability, 0 after a row's stop.
    With top_k, top_ids and top_probs (B, S, k) hold every step's k likeliest ids, the chosen one
    first, and their probabilities.
    """

    ids: torch.Tensor
    logprobs: torch.Tensor
    top_ids: Optional[torch.Tensor] = None
    top_probs: Optional[torch.Tensor] = None


@torch.no_grad()
def greedy_decode_cached(model, x, steps, stop_id, top_k=0, noise=None):
    """
    Greedy continuation of x (B, T) by up to `steps` ids with a KVCache, as a Decoded; a row that
    writes stop_id leaves the batch, and the rest of it is stop_id. Needs T + steps <= block_size,
    where `sample` never slides its window and writes the same ids. With `noise` (B, steps, V)
    added to the logits before each argmax, the ids are draws instead (gumbel_noise).
    """
    cache = KVCache()
    logits, _ = model(x, cache=cache)
    rows = x.size(0)
    generated = torch.full((rows, steps), stop_id, dtype=torch.long, device=x.device)
    logprobs = torch.zeros(rows, steps, device=x.device)
    top_ids = torch.zeros(rows, steps, top_k, dtype=torch.long, device=x.device) if top_k else None
    top_probs = torch.zeros(rows, steps, top_k, device=x.device) if top_k else None
    going = torch.arange(rows, device=x.device)  # the rows still decoding, in cache order
    for step in range(steps):
        last = logits[:, -1, :]
        next_ids = (last if noise is None else last.float() + noise[going, step]).argmax(dim=-1)
        generated[going, step] = next_ids
        step_logprobs = last.float().log_softmax(dim=-1)
        logprobs[going, step] = step_logprobs.gather(1, next_ids[:, None])[:, 0]
        if top_k:  # the chosen id first (argmax's choice among ties), then the likeliest others
            others = step_logprobs.scatter(1, next_ids[:, None], -math.inf).topk(top_k - 1, dim=-1)
            top_ids[going, step] = torch.cat((next_ids[:, None], others.indices), dim=1)
            top_probs[going, step] = torch.cat(
                (logprobs[going, step, None], others.values), dim=1
            ).exp()
        if step == steps - 1:
            break
        unfinished = next_ids != stop_id
        still_going = int(unfinished.sum())
        if still_going == 0:
            return Decoded(
                *(
                    t[:, : step + 1] if t is not None else None
                    for t in (generated, logprobs, top_ids, top_probs)
                )
            )
        if still_going < len(going):
            going, next_ids = going[unfinished], next_ids[unfinished]
            cache.keep_rows(unfinished)
        logits, _ = model(next_ids[:, None], cache=cache)
    return Decoded(generated, logprobs, top_ids, top_probs)


@torch.no_grad()
def read_logprobs(model, x, generated):
    """
    The log-probabilities (B, S) that the model gives `generated` (B, S) after x (B, T), in one
    forward pass; NaN where the text does not fit in the block, since there `sample` slid its
    window.
    """
    context = model.get_block_size() - 1
    steps, fits = generated.size(1), x.size(1) + generated.size(1) - 1
    if fits > context:
        return torch.full(generated.shape, float("nan"))
    text = torch.cat((x, generated), dim=1)[:, :-1]
    logits, _ = model(text)
    return logits[:, -steps:].float().log_softmax(dim=-1).gather(2, generated[:, :, None])[:, :, 0]


def length_batches(prompt_ids, batch_size):
    """The indices of the prompts in batches of at most batch_size, each of one length."""
    by_length = {}
    for i, ids in enumerate(prompt_ids):
        by_length.setdefault(len(ids), []).append(i)
    return [
        rows[j : j + batch_size]
        for rows in by_length.values()
        for j in range(0, len(rows), batch_size)
    ]


def greedy_completions(
    model,
    prompts,
    corpus,
    device,
    steps,
    stop_char=None,
    batch_size=256,
    sequential=False,
    scored=False,
):
    """
    Greedy continuations of text prompts, `steps` characters each; with scored=True, each paired
    with its characters' log-probabilities. Prompts of equal length are decoded together with a KV
    cache, a row stopping at stop_char; sequential=True decodes each alone with `sample`, which
    writes the same.
    """
    stop_id = corpus.stoi[stop_char] if stop_char is not None else -1
    prompt_ids = [encoded(prompt, corpus.stoi) for prompt in prompts]
    context = model.get_block_size() - 1
    with eval_mode(model):
        if sequential:
            batches = [[i] for i in range(len(prompt_ids))]
        else:
            batches = length_batches(prompt_ids, batch_size)
        generated = [None] * len(prompt_ids)
        for rows in batches:
            x = torch.tensor([prompt_ids[i] for i in rows], dtype=torch.long, device=device)
            if sequential or x.size(1) + steps - 1 > context:
                out = sample(model, x, steps)[:, x.size(1) :]
                logprobs = read_logprobs(model, x, out) if scored else None
            else:
                decoded = greedy_decode_cached(model, x, steps, stop_id)
                out, logprobs = decoded.ids, decoded.logprobs
            for row, (i, ids) in enumerate(zip(rows, out.tolist())):
                text = "".join(corpus.itos[i] for i in ids)
                generated[i] = (text, logprobs[row].tolist()) if scored else text
    return generated


def gumbel_noise(seed, steps, vocab_size, temperature, banned=()):
    """
    Noise (steps, V) whose sum with a row's logits has its argmax drawn from softmax(logits /
    temperature), never a `banned` id: temperature times Gumbel noise, from a generator of its own.
    Temperature 0 leaves the argmax greedy.
    """
    noise = torch.zeros(steps, vocab_size)
    if temperature:
        uniform = torch.rand(steps, vocab_size, generator=torch.Generator().manual_seed(seed))
        noise = -temperature * torch.log(-torch.log(uniform))
    noise[:, list(banned)] = -math.inf
    return noise


@torch.no_grad()
def sampled_completions(model, prompts, seeds, corpus, device, steps, temperature, banned=(),
                        batch_size=256):  # fmt: skip
    """
    A continuation drawn at `temperature` after each prompt, `steps` characters or up to the
    block's end, never a `banned` character. Each row's draws come from its own seed, so that its
    text does not depend on the prompts decoded beside it.
    """
    prompt_ids = [encoded(prompt, corpus.stoi) for prompt in prompts]
    banned_ids = [corpus.stoi[c] for c in banned if c in corpus.stoi]
    written = [None] * len(prompts)
    with eval_mode(model):
        for rows in length_batches(prompt_ids, batch_size):
            x = torch.tensor([prompt_ids[i] for i in rows], dtype=torch.long, device=device)
            steps_here = min(steps, model.get_block_size() - x.size(1))
            noise = torch.stack([
                gumbel_noise(seeds[i], steps_here, corpus.vocab_size, temperature, banned_ids)
                for i in rows
            ]).to(device)  # fmt: skip
            ids = greedy_decode_cached(model, x, steps_here, -1, noise=noise).ids
            for i, row in zip(rows, ids.tolist()):
                written[i] = "".join(corpus.itos[c] for c in row)
    return written


@dataclasses.dataclass
class Answer:
    """
    One answer and how sure the model was of it; NaN scores where the answer could not be read in
    one block.
    """

    text: str
    # log-probabilities summed over its characters and the one that ended it (MASK or a line break)
    logprob: float
    min_prob: float  # the lowest of those characters' probabilities
    closed: bool  # the model wrote the closing MASK, not a line break, nor ran out of steps


def answer_of(completion, logprobs=None):
    """
    The Answer in a completion of a question+MASK prompt (see predict_places); NaN scores without
    logprobs.
    """
    end = re.search(f"[{MASK_CHAR}\r\n]", completion)
    scored = [math.nan] if logprobs is None else logprobs[: end.end()] if end else logprobs
    return Answer(
        text=completion[: end.start()] if end else completion,
        logprob=sum(scored),
        min_prob=math.exp(min(scored)) if scored else 1.0,
        closed=bool(end) and end.group() == MASK_CHAR,
    )


def predict_answers(
    model, questions, corpus, device, steps=32, batch_size=256, sequential=False, scored=True
):
    """
    An Answer to each "Where was X born?" question: what the model writes after it and a MASK, up to
    the next MASK or a line break (no place has one, so an answer fits on a line). With
    sequential=True, scoring costs a forward pass per question; scored=False leaves it out.
    """
    prompts = [question + MASK_CHAR for question in questions]
    completions = greedy_completions(
        model, prompts, corpus, device, steps, MASK_CHAR, batch_size, sequential, scored=scored
    )
    return [
        answer_of(*completion) if scored else answer_of(completion) for completion in completions
    ]


def predict_places(model, questions, corpus, device, steps=32, batch_size=256, sequential=False):
    """The texts of predict_answers' answers."""
    answers = predict_answers(
        model, questions, corpus, device, steps, batch_size, sequential, scored=False
    )
    return [answer.text for answer in answers]


def recalled_places(model, corpus, pairs, device, prompt=None):
    """
    Per (question, place) pair, whether the model recalls the birthplace from the corpus, or None
    where the person could not be probed: the model continues the biography (questions.biographies)
    from just before the place, which must lie in its first block_size-1 characters, and recalls it
    if it writes it next. prompt(name, document_before_place) -> text gives the model other text to
    continue, to ask where the fact is keyed; its characters outside the vocabulary are dropped, and
    a prompt left empty raises ValueError.
    """
    context = model.get_block_size() - 1
    names = []
    for question, _ in pairs:
        try:
            names.append(name_of(question))
        except ValueError:  # a question the vocabulary could not spell whole is not probed
            names.append(None)
    bios = biographies(corpus.data, [name for name in names if name is not None])
    prompts, places, probed = [], [], []
    for name, (_, place) in zip(names, pairs):
        document = f"{name}. {bios[name]}" if name in bios else ""
        at = document.find(place)
        can_probe = (
            0 < at
            and at + len(place) <= context
            and all(c in corpus.stoi for c in document[: at + len(place)])
        )
        if can_probe:
            text = (
                document[:at]
                if prompt is None
                else "".join(c for c in prompt(name, document[:at]) if c in corpus.stoi)
            )
            if not text:
                raise ValueError(f"the prompt for {name} has no characters of the vocabulary")
            prompts.append(text)
            places.append(place)
        probed.append(can_probe)
    if not prompts:
        return [None] * len(pairs)
    completions = greedy_completions(
        model, prompts, corpus, device, max(len(place) for place in places)
    )
    recalled = iter(completion.startswith(place) for completion, place in zip(completions, places))
    return [next(recalled) if can_probe else None for can_probe in probed]
