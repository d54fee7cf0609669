"""Sampling, scoring, seeding and file helpers shared by the CLI, the trainer and the tests."""

import os
import random
import re
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F

from dataset import MASK_CHAR, corpus_lines, known_characters
from files import atomic_write
from model import KVCache

DATA_DIR = Path(__file__).resolve().parent.parent / "data"


def set_seed(seed):
    """Seed Python's and PyTorch's generators (every device)."""
    random.seed(seed)
    torch.manual_seed(seed)


def rank_and_world_size():
    """(this process's rank, number of processes) under torch.distributed; (0, 1) otherwise."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def pick_device(name="auto"):
    """torch.device for "cuda", "mps", "cpu", or "auto" (the first of those that is available); a torch.device as is."""
    if isinstance(name, torch.device):
        return name
    available = {"cuda": torch.cuda.is_available(), "mps": torch.backends.mps.is_available(), "cpu": True}
    if name == "auto":
        name = next(device for device, ok in available.items() if ok)
    elif not available[name]:
        raise RuntimeError(f"device {name} is not available on this machine (try --device auto)")
    return torch.device(name)


def top_k_logits(logits, k):
    """Keep the k largest logits of every row; the rest become -inf."""
    v, _ = torch.topk(logits, k)
    return logits.masked_fill(logits < v[:, [-1]], float("-inf"))


@torch.no_grad()
def sample(model, x, steps, temperature=1.0, sample=False, top_k=None):
    """
    Extend every row of x (B, T) by `steps` tokens, feeding each prediction back in.

    Greedy (the most likely token) unless sample=True, which draws from the
    softmax of logits/temperature, optionally restricted to the top_k tokens.
    The model conditions on at most block_size-1 tokens, the length it was trained
    on. Returns (B, T + steps); the model's train/eval mode is left as it was.
    """
    context = model.get_block_size() - 1
    was_training = model.training
    model.eval()
    for _ in range(steps):
        logits, _ = model(x[:, -context:])
        logits = logits[:, -1, :] / temperature
        if top_k is not None:
            logits = top_k_logits(logits, top_k)
        if sample:
            ix = torch.multinomial(F.softmax(logits, dim=-1), num_samples=1)
        else:
            ix = logits.argmax(dim=-1, keepdim=True)
        x = torch.cat((x, ix), dim=1)
    model.train(was_training)
    return x


def evaluate_places(filepath, predicted_places):
    """
    Score predictions against the places of a "question<TAB>place" file.

    Returns (total, correct): the number of questions and of exact matches, or
    (0, 0) when the file holds questions without answers.
    """
    with open(filepath, encoding="utf-8") as f:
        rows = [line.split("\t") for line in corpus_lines(f.read())]
    if not rows or len(rows[0]) < 2:
        return 0, 0
    if len(rows) != len(predicted_places):
        raise ValueError(f"{filepath} has {len(rows)} questions but {len(predicted_places)} predictions were given")
    correct = sum(row[1] == predicted for row, predicted in zip(rows, predicted_places))
    return len(rows), correct


def score_line(total, correct):
    """The course's score line, the percentage rounded to two decimals (3.6%, not 3.5999999999999996%)."""
    return f"Correct: {correct} out of {total}: {round(correct / total * 100, 2)}%"


def resolve_data_path(path):
    """A bare data file name that is not in the current directory is looked up in the repository's data/."""
    if path is not None and not os.path.exists(path) and os.path.dirname(path) == "":
        candidate = DATA_DIR / path
        if candidate.exists():
            return str(candidate)
    return path


def save_params(model, path):
    """Save the model's plain state_dict, atomically."""
    atomic_write(path, lambda f: torch.save(model.state_dict(), f))


def short_reason(error):
    """An exception's message cut to its first sentence, for one-line error reports."""
    text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return text.split(". ")[0]


def read_state_dict(path):
    """A state_dict from a file, loaded with weights_only=True so that the file cannot run code."""
    state = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ValueError(f"it holds a {type(state).__name__} that is not a state_dict of tensors")
    return state


def params_architecture(state):
    """
    What a GPT state_dict says about the model it came from: variant, n_layer, n_embd,
    vocab_size, block_size, and bottleneck_dim (perceiver) or n_head (synthesizer; the
    other variants' weights do not depend on the number of heads). KeyError if not a GPT's.
    """
    vocab_size, n_embd = state["tok_emb.weight"].shape
    blocks = {key.split(".")[1] for key in state if key.startswith("blocks.")}
    found = dict(n_layer=len(blocks), n_embd=n_embd, vocab_size=vocab_size, block_size=state["pos_emb"].shape[1])
    if "down_block.C" in state:
        return dict(found, variant="perceiver", n_layer=len(blocks) + 2, bottleneck_dim=state["down_block.C"].shape[1])
    if "blocks.0.attn.w2" in state:
        return dict(found, variant="synthesizer", n_head=n_embd // state["blocks.0.attn.w2"].shape[0])
    return dict(found, variant="vanilla")


def load_params(model, path_or_state):
    """
    Load a state_dict saved by save_params, or by the course's code (or the dict itself), into `model`.

    Causal-mask buffers are not learned, so the model keeps its own: files whose
    masks have another size or none at all (older layouts) load too.
    """
    state = path_or_state if isinstance(path_or_state, dict) else read_state_dict(path_or_state)
    state = {k: v for k, v in state.items() if not k.endswith(".mask")}
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [k for k in missing if not k.endswith(".mask")]
    if missing or unexpected:
        raise ValueError(f"missing keys {missing[:3]}, unexpected keys {unexpected[:3]}")
    return model


@torch.no_grad()
def greedy_decode_cached(model, x, steps, stop_id):
    """
    Greedy continuation of x (B, T) with a KVCache: the prefix is read once and every
    step feeds only the new token. Stops early once every row has produced stop_id.
    Returns the generated ids (B, <= steps). Needs T + steps - 1 <= block_size - 1,
    so that `sample` would never have slid its window; then the tokens are the same.
    """
    cache = KVCache()
    logits, _ = model(x, cache=cache)
    generated, done = [], torch.zeros(x.size(0), dtype=torch.bool, device=x.device)
    for step in range(steps):
        next_ids = logits[:, -1, :].argmax(dim=-1)
        generated.append(next_ids)
        done |= next_ids == stop_id
        if step == steps - 1 or bool(done.all()):
            break
        logits, _ = model(next_ids[:, None], cache=cache)
    return torch.stack(generated, dim=1)


def greedy_completions(model, prompts, stoi, itos, device, steps, stop_char=None, batch_size=256, sequential=False):
    """
    Greedy continuations of text prompts, `steps` characters each (rows may stop
    early once every row of their batch has written stop_char).

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
