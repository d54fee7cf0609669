"""The course's 2024 name for model.py: the same classes, imported from there."""

from model import GPT, Block, GPTConfig, KVCache, variant_config  # noqa: F401
