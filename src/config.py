"""
The settings of the experiment in one place: the block size, the model sizes and the
named training recipes. The defaults are the handout's; the command line, the benchmark
and the checkpoint's run identity read them from here.
"""

import dataclasses

BLOCK_SIZE = 128
BOTTLENECK_DIM = 32  # the perceiver's latent length m
LENGTH_GROUPING_POOL = 16  # with --group_by_length, pretraining batches per pool of examples grouped by length


@dataclasses.dataclass(frozen=True)
class Recipe:
    """
    Training settings; the defaults are the handout's. The learning rate warms up over
    warmup_tokens, then follows the course's cosine (floored at 10% of its peak, rising
    again after its half period; trainer.py) whose half period is decay_epochs epochs of
    the pretraining corpus (block_size tokens per document; with --mix_corpus_path, of
    corpus and pairs), in finetuning too.

    With shifted_epochs > 0, pretraining ends with a second stage that goes on from the
    first stage's params with a fresh optimizer, as `run.py pretrain --reading_params_path`
    would: shifted_epochs epochs at the peak rate shifted_lr (warmed up again, the cosine's
    half period the stage's length) on examples that start after 0..shifted_max_shift pads
    (--max_shift). The first stage keys each biography's facts to its name at position 0;
    the questions ask for them with the name at position 10 (README: "Pretraining on a CPU").
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
    weight_decay: float = 0.1
    group_by_length: bool = False  # pretraining batches from pools grouped by length (not the course's batching)
    shifted_epochs: int = 0  # pretraining's closing stage on shifted examples: none in the handout's
    shifted_lr: float = 6e-4  # its peak: a tenth of pretrain_lr, the cosine's floor
    shifted_max_shift: int = 13
    n_layer: int = 4
    n_head: int = 8
    n_embd: int = 256

    def final_tokens(self, examples_per_epoch):
        """The cosine's half period in tokens: decay_epochs epochs of block_size tokens per example."""
        return self.decay_epochs * examples_per_epoch * BLOCK_SIZE

    def model_sizes(self):
        """The model's size flags (bottleneck_dim is the perceiver's)."""
        return dict(n_layer=self.n_layer, n_head=self.n_head, n_embd=self.n_embd, bottleneck_dim=BOTTLENECK_DIM)


HANDOUT = Recipe()
MODEL = dict(n_layer=HANDOUT.n_layer, n_head=HANDOUT.n_head, n_embd=HANDOUT.n_embd)  # the handout's model
# --recipe: named recipes. Flags given on the command line (--pretrain_lr, --max_epochs,
# --batch_size, --dropout, ...) win over them.
RECIPES = {
    "handout": HANDOUT,
    # A CPU schedule (README: "Pretraining on a CPU"): a narrower model, small grouped batches and
    # no dropout, decayed over its 420 epochs (about an hour and a half of pretraining on 2 cores),
    # then 20 epochs of shifted examples at a tenth of the peak rate (about 5 minutes), and a gentler
    # finetuning than the handout's (lr 2e-4): 20.2% of dev for vanilla (15.6% without the shifted stage).
    "cpu": dataclasses.replace(
        HANDOUT,
        pretrain_epochs=420,
        pretrain_batch_size=32,
        pretrain_lr=3e-3,
        dropout=0.0,
        warmup_tokens=127 * 2937,  # one epoch of wiki.txt
        decay_epochs=420,
        group_by_length=True,
        shifted_epochs=20,
        shifted_lr=3e-4,
        finetune_lr=2e-4,
        n_head=4,
        n_embd=128,
    ),
}
