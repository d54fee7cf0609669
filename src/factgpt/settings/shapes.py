"""
The rules a model's shape must keep, variant by variant: a new attention variant's size rule goes
here (its class goes to attention.py, its name to model.VARIANTS and model.SELF_ATTENTION).
"""

from factgpt.common.errors import RunError
from factgpt.corpus.reading import BLOCK_SIZE


def check_model(recipe, variant):
    """RunError where the recipe's sizes do not make a model of the variant."""
    if recipe.n_embd % recipe.n_head:
        raise RunError(f"--n_embd {recipe.n_embd} must be a multiple of --n_head {recipe.n_head}")
    if variant == "rope" and recipe.n_embd // recipe.n_head % 2:
        raise RunError(
            f"rope rotates pairs of dimensions: --n_embd {recipe.n_embd} / "
            f"--n_head {recipe.n_head} must be an even head dimension"
        )
    if variant == "perceiver" and recipe.n_layer < 2:
        raise RunError(
            "the perceiver needs --n_layer 2 or more (a down- and an up-projection block)"
        )
    if variant == "perceiver" and recipe.bottleneck_dim > BLOCK_SIZE:
        raise RunError(
            f"--bottleneck_dim {recipe.bottleneck_dim} is more than the block size {BLOCK_SIZE}: "
            "the perceiver's latents cannot outnumber the positions"
        )
