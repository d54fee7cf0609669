"""
The settings of the experiment in one place: the block size, the model sizes and the
named training recipes. The defaults are the handout's; the command line, the benchmark
and the checkpoint's run identity read them from here.
"""

import dataclasses

BLOCK_SIZE = 128
MODEL = dict(n_layer=4, n_head=8, n_embd=256)
SIZE_DEFAULTS = dict(MODEL, bottleneck_dim=32)  # the model-size flags: what a params file's facts can supply
LENGTH_GROUPING_POOL = 16  # with --group_by_length, pretraining batches per pool of examples grouped by length


@dataclasses.dataclass(frozen=True)
class Recipe:
    """
    Training settings; the defaults are the handout's. The learning rate warms up over
    warmup_tokens, then follows the course's cosine (floored at 10% of its peak, rising
    again after its half period; trainer.py) whose half period is decay_epochs epochs of
    the pretraining corpus (block_size tokens per document; with --mix_corpus_path, of
    corpus and pairs), in finetuning too.
    """

    pretrain_epochs: int = 650
    pretrain_batch_size: int = 128
    pretrain_lr: float = 6e-3
    finetune_epochs_from_scratch: int = 75
    finetune_epochs_from_pretrained: int = 10
    finetune_batch_size: int = 256
    finetune_lr: float = 6e-4
    dropout: float = 0.1
    warmup_tokens: int = 512 * 20
    decay_epochs: int = 200

    def final_tokens(self, examples_per_epoch):
        """The cosine's half period in tokens: decay_epochs epochs of block_size tokens per example."""
        return self.decay_epochs * examples_per_epoch * BLOCK_SIZE


HANDOUT = Recipe()
# --recipe: named recipes. Flags given on the command line (--pretrain_lr, --max_epochs,
# --batch_size, --dropout, ...) win over them.
RECIPES = {
    "handout": HANDOUT,
    # A short CPU schedule, chosen with the earlier optimisation (README: "Pretraining on a CPU").
    "cpu": dataclasses.replace(
        HANDOUT,
        pretrain_epochs=90,
        pretrain_batch_size=32,
        pretrain_lr=1e-3,
        dropout=0.0,
        warmup_tokens=127 * 2937,
        decay_epochs=90,
    ),
}
