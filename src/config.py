"""
The settings of the experiment in one place: the block size, the named recipes (every
training setting, the handout's by default) and RunConfig, what one pretrain, finetune
or evaluate run is given (pipeline.py runs it). run.py, the research scripts in
experiments/ and the tests build their runs from here.
"""

import dataclasses
import math
from typing import Optional

from dataset import longest_shift
from trainer import DECAY_GROUPS, LR_SCHEDULES, PRECISIONS

BLOCK_SIZE = 128
BOTTLENECK_DIM = 32  # the perceiver's latent length m: the course's command-line default
HANDOUT_BOTTLENECK_DIM = 64  # the m the handout's perceiver commands pass (run.sh, the benchmark)
LENGTH_GROUPING_POOL = 16  # with group_by_length, pretraining batches per pool of examples grouped by length
CUDA_NUM_WORKERS = 4  # DataLoader workers with CUDA (none on the CPU)
# the model's parts finetuning can leave frozen: the embeddings, every block's attention, MLP and
# LayerNorms (ln1, ln2 and the final ln_f), the output head
FREEZABLE = ("tok_emb", "pos_emb", "attn", "mlp", "ln", "head")
HELD_OUT_SEED = 0  # which documents held_out_fraction holds out, and their span corruptions


@dataclasses.dataclass(frozen=True)
class Recipe:
    """
    Training settings; the defaults are the handout's. Any field can be set from the
    command line (run.py --dropout 0, --group_by_length, --no-group_by_length) or in
    code (dataclasses.replace).

    The learning rate warms up over warmup_tokens, then follows the course's cosine
    (floored at 10% of its peak, rising again after its half period; trainer.py) whose
    half period is decay_epochs epochs of the pretraining corpus (block_size tokens per
    document; of corpus and pairs when pretraining mixes pairs in), in finetuning too.

    With shifted_epochs > 0, pretraining ends with a second stage that goes on from the
    first stage's params with a fresh optimizer: shifted_epochs epochs at the peak rate
    shifted_lr (warmed up again, the cosine's half period the stage's length) on examples
    that start after 0..shifted_max_shift pads. The first stage keys each biography's facts
    to its name at position 0; the questions ask for them with the name at position 10
    (docs/cpu-recipe.md).
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
    n_layer: int = 4
    n_head: int = 8
    n_embd: int = 256
    max_shift: int = 0  # pretraining examples start after 0..max_shift pads (not the course's data)
    shifted_epochs: int = 0  # pretraining's closing stage on shifted examples: none in the handout's
    shifted_lr: float = 6e-4  # its peak: a tenth of pretrain_lr, the cosine's floor
    shifted_max_shift: int = 13  # up to the name's position in the questions (10), and a little past
    finetune_frozen: str = ""  # parts finetuning leaves as they are, e.g. "mlp" or "mlp,tok_emb" (FREEZABLE)
    finetune_lm_weight: float = 0.0  # GPT-1's auxiliary loss: finetuning adds this times the LM loss on the question
    held_out_fraction: float = 0.0  # pretraining holds this part of the documents out, scoring them every epoch
    # departures from the course's optimisation (the defaults reproduce it; docs/optimisation.md)
    decay_groups: str = "course"  # course: decay all but biases and LayerNorm gains; matmul: Linear weights only
    lr_schedule: str = "course"  # course: the cosine rises again after decay_epochs; clamped: it stays at 10%
    precision: str = "fp32"  # fp32, tf32 (TF32 matmuls on CUDA), bf16 or fp16 (autocast)
    group_by_length: bool = False  # pretraining batches from pools grouped by length (other examples share a step)
    corrupt_by_epoch: bool = False  # draw an epoch's span corruptions at once (same distribution, other draws)
    # speed switches that change nothing but the time (docs/speed.md)
    full_padding: bool = False  # train on rows padded to the block size, not batches cut after their last target
    compile: bool = False  # torch.compile the model for training
    sequential_decoding: bool = False  # evaluate one question at a time without a KV cache

    def __post_init__(self):
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if field.type in (int, float) and not (isinstance(value, (int, float)) and math.isfinite(value)):
                raise ValueError(f"{field.name} must be a finite number, got {value!r}")
        positive = [f.name for f in dataclasses.fields(self) if f.type in (int, float)]
        may_be_zero = ("dropout", "weight_decay", "max_shift", "shifted_epochs", "warmup_tokens")
        may_be_zero += ("finetune_lm_weight", "held_out_fraction")
        for name in positive:
            value = getattr(self, name)
            if value < 0 or (value == 0 and name not in may_be_zero):
                raise ValueError(f"{name} must be {'at least 0' if name in may_be_zero else 'positive'}, got {value}")
        for name in ("dropout", "held_out_fraction"):
            if getattr(self, name) >= 1:
                raise ValueError(f"{name} must be below 1, got {getattr(self, name)}")
        for name in ("max_shift", "shifted_max_shift"):
            if getattr(self, name) > longest_shift(BLOCK_SIZE):
                raise ValueError(f"{name} must be at most {longest_shift(BLOCK_SIZE)}, got {getattr(self, name)}")
        unknown = set(self.frozen_parts()) - set(FREEZABLE)
        if unknown:
            raise ValueError(f"finetune_frozen: {', '.join(sorted(unknown))} is not one of {', '.join(FREEZABLE)}")
        for name, choices in (("decay_groups", DECAY_GROUPS), ("lr_schedule", LR_SCHEDULES), ("precision", PRECISIONS)):
            if getattr(self, name) not in choices:
                raise ValueError(f"{name} must be one of {', '.join(choices)}, got {getattr(self, name)!r}")

    def frozen_parts(self):
        """The model's parts that finetuning leaves as they are (finetune_frozen's list)."""
        return [part for part in self.finetune_frozen.split(",") if part]

    def final_tokens(self, examples_per_epoch):
        """The cosine's half period in tokens: decay_epochs epochs of block_size tokens per example."""
        return self.decay_epochs * examples_per_epoch * BLOCK_SIZE

    def with_settings(self, settings):
        """
        This recipe with `settings`, [(name, text)] as the command line gives them
        (run.py --dropout 0), put in; ValueError naming the setting when a name or value is wrong.
        """
        fields = {f.name: f.type for f in dataclasses.fields(self)}
        changes = {}
        for name, text in settings:
            if name not in fields:
                raise ValueError(f"--{name}: not a setting of a recipe ({', '.join(fields)})")
            changes[name] = parse_value(fields[name], text, f"--{name} {text}")
        try:
            return dataclasses.replace(self, **changes)
        except ValueError as e:
            raise ValueError(f"--{e}") from None


def parse_value(kind, text, where):
    """`text` as a value of the type `kind` (int, float, bool or str)."""
    try:
        if kind is bool:
            return {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}[text.lower()]
        return kind(text)
    except (KeyError, ValueError):
        raise ValueError(f"{where}: {text!r} is not a{'n' if kind is int else ''} {kind.__name__}") from None


HANDOUT = Recipe()
RECIPES = {
    "handout": HANDOUT,
    # A CPU schedule (docs/cpu-recipe.md): a narrower model, small grouped batches and no dropout,
    # decayed over its 420 epochs (about an hour and a half of pretraining on 2 cores), then 20
    # epochs of shifted examples at a tenth of the peak rate (about 5 minutes), and a gentler
    # finetuning than the handout's (lr 2e-4): 20.2% of dev for vanilla with seed 0, 16.4% with seed 1.
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


@dataclasses.dataclass
class RunConfig:
    """
    One pretrain, finetune or evaluate run: its inputs and outputs, the recipe, and the
    run's controls. Model sizes left None are the params' own (from their facts) or the
    recipe's; epochs and batch size left None are the recipe's for the function.
    """

    function: str  # "pretrain", "finetune" or "evaluate"
    variant: str  # "vanilla", "perceiver", "synthesizer" or "rope"
    pretrain_corpus_path: str  # its characters are the vocabulary, in every function
    reading_params_path: Optional[str] = None
    writing_params_path: Optional[str] = None
    finetune_corpus_path: Optional[str] = None
    eval_corpus_path: Optional[str] = None
    outputs_path: Optional[str] = None
    details_path: Optional[str] = None  # evaluate: a line of JSON per answer with its confidence (pipeline.evaluate)
    mix_corpus_path: Optional[str] = None  # pretrain: question<TAB>place pairs mixed into every epoch
    recipe: Recipe = HANDOUT
    recipe_name: str = "handout"
    n_layer: Optional[int] = None
    n_head: Optional[int] = None
    n_embd: Optional[int] = None
    bottleneck_dim: Optional[int] = None
    max_epochs: Optional[int] = None
    batch_size: Optional[int] = None
    seed: int = 0
    device: str = "auto"
    num_workers: Optional[int] = None  # DataLoader workers (None: CUDA_NUM_WORKERS with CUDA, else 0)
    resume: bool = False
    checkpoint_minutes: Optional[float] = None
    keep_checkpoint: bool = False
    tb_expt_name: str = "run"
    tensorboard_root: str = "expt"  # relative to the working directory
    command: str = ""  # the command line, recorded in the params' facts

    INPUTS = (
        "pretrain_corpus_path",
        "reading_params_path",
        "finetune_corpus_path",
        "eval_corpus_path",
        "mix_corpus_path",
    )
    OUTPUTS = ("writing_params_path", "outputs_path", "details_path")
    REQUIRED = {
        "pretrain": ("writing_params_path",),
        "finetune": ("writing_params_path", "finetune_corpus_path"),
        "evaluate": ("reading_params_path", "eval_corpus_path", "outputs_path"),
    }
