"""
.params files: a model's plain state_dict (what the course's code writes and reads), the
metadata written beside it as <params>.json, and the one check that a file fits a model.
"""

import contextlib
import json
import os
import re

import torch

from factgpt.common.distributed import launch_rank
from factgpt.common.errors import RunError, short_reason
from factgpt.common.files import atomic_write, set_aside
from model import GPT, VARIANTS, variant_config


def save_params(model, path):
    """Save the model's plain state_dict, atomically."""
    atomic_write(path, lambda f: torch.save(model.state_dict(), f))


def save_params_with_metadata(model, path, metadata):
    """
    Save the params, then their metadata, the old removed first: a crash leaves none, never another
    run's.
    """
    with contextlib.suppress(FileNotFoundError):
        os.remove(metadata_path(path))
    save_params(model, path)
    write_metadata(path, metadata)


def read_state_dict(path):
    """A state_dict from a file, loaded with weights_only=True so that the file cannot run code."""
    state = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ValueError(f"it holds a {type(state).__name__} that is not a state_dict of tensors")
    return state


def key_layout(keys):
    """
    A GPT state_dict's keys with the block numbers as N, the masks left out: its variant's, whatever
    its sizes.
    """
    return {
        re.sub(r"^blocks\.\d+\.", "blocks.N.", key) for key in keys if not key.endswith(".mask")
    }


def params_variant(state, wanted=None):
    """
    The variant whose models (a tiny one of each) have the keys of `state`, `wanted` first. They are
    built on the CPU with the random state put back after: the meta device's initialisation imports
    TorchDynamo, which slows the start of every run that reads params.
    """
    layout = key_layout(state)
    outside_blocks = {key for key in layout if not key.startswith("blocks.")}
    for variant in sorted(VARIANTS, key=lambda name: name != wanted):
        with torch.random.fork_rng(devices=[]):
            tiny = GPT(
                variant_config(variant, 3, 4, n_layer=3, n_head=2, n_embd=4, bottleneck_dim=2)
            )
        theirs = key_layout(tiny.state_dict())
        # a perceiver of two layers has no inner blocks
        if layout == theirs or (layout == outside_blocks and outside_blocks < theirs):
            return variant
    return None


def params_architecture(state, wanted=None):
    """
    What a GPT state_dict says of its model: variant, n_layer, n_embd, vocab_size and block_size,
    and where the weights depend on them, bottleneck_dim and n_head. KeyError if it is not a GPT's.
    """
    vocab_size, n_embd = state["tok_emb.weight"].shape
    blocks = {key.split(".")[1] for key in state if key.startswith("blocks.")}
    found = dict(
        variant=params_variant(state, wanted),
        n_layer=len(blocks),
        n_embd=n_embd,
        vocab_size=vocab_size,
    )
    if found["variant"] is None:
        raise KeyError("no variant has these keys")
    if "pos_emb" in state:
        found["block_size"] = state["pos_emb"].shape[1]
    else:  # rope's positions are its rotary table (block_size, head_dim / 2, 2)
        rope_cache = state["blocks.0.attn.rope_cache"]
        found.update(block_size=rope_cache.shape[0], n_head=n_embd // (2 * rope_cache.shape[1]))
    if "down_block.C" in state:
        found.update(n_layer=len(blocks) + 2, bottleneck_dim=state["down_block.C"].shape[1])
    if "blocks.0.attn.w2" in state:
        found["n_head"] = n_embd // state["blocks.0.attn.w2"].shape[0]
    return found


def load_params(model, path_or_state):
    """
    Load a state_dict (a path, or the dict) into `model`; masks are not learned, so any masks, or
    none, load.
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
    Load the params at `path` into `model`, a GPT of `variant` over `corpus_path`'s vocabulary, or
    raise RunError saying why they do not fit and which flags would; `purpose` ("finetune",
    "evaluate") words it.
    """
    try:
        state = read_state_dict(path)
    except FileNotFoundError:
        raise RunError(f"params file {path} does not exist") from None
    except Exception as e:
        raise RunError(
            f"params file {path} cannot be read (truncated, or not a params file?): "
            f"{short_reason(e)}"
        ) from None
    try:
        found = params_architecture(state, variant)
    except (KeyError, IndexError, ValueError):
        raise RunError(f"params file {path} does not hold a GPT of this project") from None
    config = model.config
    trained_m = found.get("bottleneck_dim")
    if found["variant"] != variant or (
        trained_m is not None and trained_m != config.bottleneck_dim
    ):
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
        raise RunError(
            f"params file {path} holds a model of another size: {purpose} it with {' '.join(sizes)}"
        )
    if found["vocab_size"] != config.vocab_size:
        raise RunError(
            f"params file {path} has a vocabulary of {found['vocab_size']} characters "
            f"but the pretraining corpus {corpus_path} gives {config.vocab_size}: "
            "pass the corpus it was pretrained on"
        )
    if found["block_size"] != config.block_size:
        raise RunError(
            f"params file {path} has block size {found['block_size']}, "
            f"this code {config.block_size}"
        )
    try:
        load_params(model, state)
    except (ValueError, RuntimeError) as e:
        raise RunError(
            f"params file {path} does not fit a {variant} model of this size: {short_reason(e)}"
        ) from None


def check_vocabulary(path, metadata, vocabulary, corpus_path):
    """
    Params whose metadata names another vocabulary than corpus_path's read every character as
    another: refused.
    """
    if metadata is None or metadata.get("vocabulary", vocabulary) == vocabulary:
        return
    theirs, ours = set(metadata["vocabulary"]), set(vocabulary)
    raise RunError(
        f"params file {path} was pretrained on a corpus with another vocabulary than {corpus_path} "
        f"({len(theirs - ours)} characters only there, {len(ours - theirs)} only here): "
        "pass the corpus it was pretrained on"
    )


def metadata_path(params_path):
    return params_path + ".json"


def write_metadata(params_path, metadata):
    """Write what a params file is (variant, sizes, vocabulary, recipe, command) beside it."""
    text = json.dumps(metadata, indent=1, ensure_ascii=False) + "\n"
    atomic_write(metadata_path(params_path), lambda f: f.write(text.encode("utf-8")))


def read_metadata(params_path):
    """
    The metadata beside a params file, or None where there is none (params of the course's code,
    say) or it cannot be read: then it is set aside (files.set_aside), and the run goes by its
    command line alone.
    """
    path = metadata_path(params_path)
    if not os.path.exists(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            metadata = json.load(f)
        if not isinstance(metadata, dict):
            raise ValueError("not a JSON object")
    except (OSError, ValueError) as e:
        why = f"(what {params_path} is) cannot be read ({short_reason(e)})"
        set_aside(path, why, "going by the command line alone", launch_rank() == 0)
        return None
    return metadata
