"""
.params files: a model's plain state_dict (what the course's code writes and reads), the
facts written beside it as <params>.json, and the one check that a file fits a model.
"""

import contextlib
import json
import os

import torch

from errors import RunError, short_reason
from files import atomic_write


def save_params(model, path):
    """Save the model's plain state_dict, atomically."""
    atomic_write(path, lambda f: torch.save(model.state_dict(), f))


def save_params_with_facts(model, path, facts):
    """
    Save the params and then their facts; the old facts go first, so that a crash in
    between leaves params without facts, never params with another run's facts.
    """
    with contextlib.suppress(FileNotFoundError):
        os.remove(facts_path(path))
    save_params(model, path)
    write_facts(path, facts)


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
    found = dict(n_layer=len(blocks), n_embd=n_embd, vocab_size=vocab_size)
    if "pos_emb" not in state:  # rope's positions are its rotary table (block_size, head_dim / 2, 2)
        rope_cache = state["blocks.0.attn.rope_cache"]
        head_dim = 2 * rope_cache.shape[1]
        return dict(found, variant="rope", n_head=n_embd // head_dim, block_size=rope_cache.shape[0])
    found["block_size"] = state["pos_emb"].shape[1]
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


def load_fitting_params(model, path, variant, corpus_path, purpose):
    """
    Load the params at `path` into `model` (a GPT of `variant` over the vocabulary of
    `corpus_path`), or raise RunError saying in one line why they do not fit it and
    which flags would; `purpose` ("finetune", "evaluate") words the advice.
    """
    try:
        state = read_state_dict(path)
    except FileNotFoundError:
        raise RunError(f"params file {path} does not exist") from None
    except Exception as e:
        raise RunError(
            f"params file {path} cannot be read (truncated, or not a params file?): {short_reason(e)}"
        ) from None
    try:
        found = params_architecture(state)
    except (KeyError, IndexError, ValueError):
        raise RunError(f"params file {path} does not hold a GPT of this project") from None
    config = model.config
    trained_m = found.get("bottleneck_dim")
    if found["variant"] != variant or (trained_m is not None and trained_m != config.bottleneck_dim):
        m = f" with bottleneck_dim {trained_m}" if trained_m else ""
        flag = f" and --bottleneck_dim {trained_m}" if trained_m else ""
        raise RunError(
            f"params file {path} was trained as {found['variant']}{m}: "
            f"{purpose} it with the {found['variant']} variant{flag}"
        )
    sizes = [
        f"--{key} {found[key]}"
        for key in ("n_layer", "n_head", "n_embd")
        if key in found and found[key] != getattr(config, key)
    ]
    if sizes:
        raise RunError(f"params file {path} holds a model of another size: {purpose} it with {' '.join(sizes)}")
    if found["vocab_size"] != config.vocab_size:
        raise RunError(
            f"params file {path} has a vocabulary of {found['vocab_size']} characters but the pretraining "
            f"corpus {corpus_path} gives {config.vocab_size}: pass the corpus it was pretrained on"
        )
    if found["block_size"] != config.block_size:
        raise RunError(f"params file {path} has block size {found['block_size']}, this code {config.block_size}")
    try:
        load_params(model, state)
    except (ValueError, RuntimeError) as e:
        raise RunError(f"params file {path} does not fit a {variant} model of this size: {short_reason(e)}") from None


def check_vocabulary(path, facts, vocabulary, corpus_path):
    """Params whose facts name another vocabulary than corpus_path's would read every character as another: refused."""
    if facts is None or facts.get("vocabulary", vocabulary) == vocabulary:
        return
    theirs, ours = set(facts["vocabulary"]), set(vocabulary)
    raise RunError(
        f"params file {path} was pretrained on a corpus with another vocabulary than {corpus_path} "
        f"({len(theirs - ours)} characters only there, {len(ours - theirs)} only here): "
        "pass the corpus it was pretrained on"
    )


def facts_path(params_path):
    return params_path + ".json"


def write_facts(params_path, facts):
    """Write what a params file is (variant, sizes, vocabulary, recipe, command) beside it."""
    text = json.dumps(facts, indent=1, ensure_ascii=False) + "\n"
    atomic_write(facts_path(params_path), lambda f: f.write(text.encode("utf-8")))


def read_facts(params_path):
    """The facts beside a params file, or None where there are none (params of the course's code, say)."""
    path = facts_path(params_path)
    if not os.path.exists(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            facts = json.load(f)
        if not isinstance(facts, dict):
            raise ValueError("not a JSON object")
    except (OSError, ValueError) as e:
        raise RunError(
            f"{path} (what {params_path} is) cannot be read: {short_reason(e)}; "
            "delete it to go by the command line alone"
        ) from None
    return facts
