"""
The Recipe: every setting of the experiment, a field each, and its pretraining Stages. The named
recipes are in recipes.py; what one run is given besides is run_config.RunConfig.
"""

import dataclasses
from typing import Optional

from dataset import longest_shift
from factgpt.common.errors import RunError
from factgpt.corpus.reading import BLOCK_SIZE
from factgpt.settings.fields import (
    TRAINING_KINDS,
    check_fields,
    parse_value,
    setting,
    text_name,
    value_type,
)

# the model's parts finetuning can leave frozen: the embeddings, every block's attention, MLP and
# LayerNorms (ln1, ln2 and the final ln_f), the output head
FREEZABLE = ("tok_emb", "pos_emb", "attn", "mlp", "ln", "head")
# what a stage trains on; text: the corpus as plain text (corpus.views.PlainText)
STAGE_DATA = ("corpus", "pairs", "corpus+pairs", "text", "text+pairs")
# the ways of replaying a CUDA step (training/capture.py): the choices of Recipe.captured_step
CAPTURED_STEPS = ("auto", "off", "cuda_graph", "compiled", "fused_graph")
# the training each function runs: a field whose `training` names the other is not read by it
TRAININGS = dict(zip(("pretrain", "finetune"), TRAINING_KINDS))


@dataclasses.dataclass(frozen=True)
class Stage:
    """
    One stage of pretraining: what it trains on, for how long, at what peak rate, on examples
    shifted how far. What it leaves None is the recipe's (the Recipe field whose `stage` names it).
    Each stage starts a fresh optimizer from the params the stage before left. The fields the
    course's Trainer reads (trainer=True) have its names; as text (run.py --pretrain_stages) a
    stage reads `corpus+pairs epochs=20 lr=0.0003`, each field by its `text` name, else its own.
    """

    # corpus (span corruption), text (plain text), pairs, or one of the two +pairs
    data: str = "corpus+pairs"
    # how many epochs
    max_epochs: Optional[int] = dataclasses.field(
        default=None, metadata=dict(text="epochs", trainer=True)
    )
    # the peak learning rate
    learning_rate: Optional[float] = dataclasses.field(
        default=None, metadata=dict(text="lr", trainer=True)
    )
    # 0..max_shift pads
    max_shift: Optional[int] = dataclasses.field(default=None, metadata={"at_least_zero": True})
    decay_epochs: Optional[int] = None  # the cosine's half period in epochs
    pair_copies: int = 1  # the pairs' copies in each epoch (their share of the stage's examples)
    # the share of the biographies
    documents: float = dataclasses.field(default=1.0, metadata={"at_most": 1})
    full_names: Optional[bool] = None  # its biographies name their person in full
    # examples per step
    batch_size: Optional[int] = dataclasses.field(default=None, metadata=dict(trainer=True))

    def __str__(self):
        fields = dataclasses.fields(self)[1:]
        given = [
            f"{text_name(f)}={getattr(self, f.name)}"
            for f in fields
            if getattr(self, f.name) != f.default
        ]
        return " ".join([self.data, *given])

    def trainer_settings(self):
        """The fields the course's Trainer reads, under its names (TrainerConfig's)."""
        fields = dataclasses.fields(self)
        return {f.name: getattr(self, f.name) for f in fields if f.metadata.get("trainer")}

    @property
    def uses_pairs(self):
        """Whether it trains on --mix_corpus_path's question<TAB>place pairs."""
        return "pairs" in self.data

    @property
    def reads_corpus(self):
        """
        Whether it trains on the pretraining corpus: span-corrupted ("corpus") or as plain text
        ("text").
        """
        return self.data != "pairs"

    @property
    def plain_text(self):
        """Whether it reads the corpus as plain next-character prediction (views.PlainText)."""
        return self.data.startswith("text")

    @classmethod
    def parse(cls, text):
        """A Stage from its text: the data, then NAME=VALUE for the fields it sets."""
        data, *assignments = text.split()
        fields = {text_name(f): f for f in dataclasses.fields(cls)[1:]}
        values = {}
        for assignment in assignments:
            name, _, value = assignment.partition("=")
            if name not in fields:
                raise RunError(f"stage {text!r}: {name!r} is not one of {', '.join(fields)}")
            kind = value_type(fields[name].type)
            values[fields[name].name] = parse_value(kind, value, f"stage {text!r}: {name}")
        return cls(data, **values)

    def check(self, where):
        """
        RunError, starting with `where`, for unknown data, a shifted text stage or a number out of
        its range.
        """
        if self.data not in STAGE_DATA:
            raise RunError(
                f"{where}: its data must be one of {', '.join(STAGE_DATA)}, got {self.data!r}"
            )
        if self.plain_text and self.max_shift:
            raise RunError(
                f"{where}: max_shift pads span corruptions; a text stage has none, "
                "so it needs max_shift=0"
            )
        if not 0 <= self.max_shift <= longest_shift(BLOCK_SIZE):
            raise RunError(
                f"{where}: max_shift must be in 0..{longest_shift(BLOCK_SIZE)}, "
                f"got {self.max_shift}"
            )
        check_fields(self, f"{where}: ")


def parse_stages(text):
    """The stages of run.py's --pretrain_stages: Stage texts separated by ';'."""
    return tuple(Stage.parse(part) for part in text.split(";") if part.strip())


@dataclasses.dataclass(frozen=True)
class Recipe:
    """
    Every training setting, with the handout's as defaults. A new setting is one field here:
    run.py's flag, the checkpoint's identity, the params' metadata and the Trainer's setting
    follow from the field. The learning rate's schedule is the course's (training/step.py).
    """

    n_layer: int = setting(4, size=True, help="Transformer blocks")
    n_head: int = setting(8, size=True, help="attention heads per block")
    n_embd: int = setting(256, size=True, help="width of every block")
    bottleneck_dim: int = setting(
        32, size=True, help="the perceiver's latent length m (the handout's commands pass 64)"
    )
    dropout: float = setting(
        0.1, at_least_zero=True, below=1, help="on the embeddings, the attention and the residuals"
    )
    pretrain_epochs: int = setting(
        650,
        stage="max_epochs",
        help="a stage's epochs, where it gives none",
        training="pretraining",
    )
    pretrain_batch_size: int = setting(
        128,
        stage="batch_size",
        help="examples per pretraining step, where a stage gives none",
        training="pretraining",
    )
    pretrain_lr: float = setting(
        6e-3,
        stage="learning_rate",
        help="a stage's peak learning rate, where it gives none",
        training="pretraining",
    )
    max_shift: int = setting(
        0,
        at_least_zero=True,
        stage="max_shift",
        help="examples start after 0..max_shift pads",
        training="pretraining",
    )
    pretrain_stages: tuple = setting(
        (Stage(),),
        help="pretraining, stage by stage (Stage; as text, split at ';')",
        training="pretraining",
    )
    full_names: bool = setting(
        False,
        stage="full_names",
        help="the biographies name their person in full (corpus/views.py)",
        training="pretraining",
    )
    clause_dropout: float = setting(
        0.0,
        at_least_zero=True,
        below=1,
        help="each example leaves each clause out this often",
        training="pretraining",
    )
    held_out_fraction: float = setting(
        0.0,
        at_least_zero=True,
        below=1,
        help="a share of documents held out of pretraining",
        training="pretraining",
    )
    finetune_epochs_from_scratch: int = setting(
        75, help="finetuning epochs without pretrained params", training="finetuning"
    )
    finetune_epochs_from_pretrained: int = setting(
        10, help="finetuning epochs from pretrained params", training="finetuning"
    )
    finetune_batch_size: int = setting(
        256, help="examples per finetuning step", training="finetuning"
    )
    finetune_lr: float = setting(
        6e-4, help="finetuning's peak learning rate", training="finetuning"
    )
    finetune_lr_from_scratch: Optional[float] = setting(
        help="the peak rate without pretrained params (None: finetune_lr)", training="finetuning"
    )
    finetune_frozen: str = setting(
        "",
        help='parts finetuning leaves as they are, e.g. "mlp" or "mlp,tok_emb" (FREEZABLE)',
        training="finetuning",
    )
    finetune_lm_weight: float = setting(
        0.0,
        at_least_zero=True,
        trainer=True,
        training="finetuning",
        help="GPT-1's auxiliary loss weight",
    )
    finetune_people: str = setting(
        choices=("all", "biography", "name"),
        help="all, or only the people the params recall",
        training="finetuning",
    )
    finetune_lora_rank: int = setting(
        0,
        at_least_zero=True,
        help="from params: train rank-r adapters of the Linear weights",
        training="finetuning",
    )
    warmup_tokens: int = setting(
        512 * 20, at_least_zero=True, trainer=True, help="the rate's linear warmup (tokens)"
    )
    decay_epochs: int = setting(
        200, stage="decay_epochs", help="the cosine's half period, in epochs"
    )
    weight_decay: float = setting(
        0.1, at_least_zero=True, trainer=True, help="AdamW's, on what decay_groups names"
    )
    decay_groups: str = setting(
        choices=("course", "matmul"), trainer=True, help="matmul: Linear weights only"
    )
    lr_schedule: str = setting(
        choices=("course", "clamped"), trainer=True, help="clamped: no rise again"
    )
    precision: str = setting(
        choices=("fp32", "tf32", "bf16", "fp16"), trainer=True, help="bf16, fp16: autocast"
    )
    group_by_length: bool = setting(
        False, trainer=True, training="pretraining", help="batches from pools grouped by length"
    )
    corrupt_by_epoch: bool = setting(
        False,
        trainer=True,
        training="pretraining",
        help="an epoch's span corruptions drawn at once",
    )
    full_padding: bool = setting(
        False, trainer=True, help="rows padded to the block, not cut after their targets"
    )
    fixed_shapes: bool = setting(
        False, trainer=True, help="every batch one shape (CUDA graphs), grown with pad rows"
    )
    compile: bool = setting(
        False, trainer=True, help="torch.compile the model for training (speed)"
    )
    captured_step: str = setting(
        choices=CAPTURED_STEPS, trainer=True, help="how a CUDA step is replayed"
    )
    sequential_decoding: bool = setting(
        False, help="evaluate one question at a time without a KV cache (speed)"
    )
    readout: str = setting(choices=("question", "frames"), reading=True, help="how evaluate asks")
    readout_frames: int = setting(
        4, reading=True, help="frames readout: how many frames write candidate places"
    )
    readout_choice: str = setting(
        choices=("learned", "summed"), reading=True, help="fitted on training people, or the sum"
    )
    readout_biography: int = setting(
        0, at_least_zero=True, reading=True, help="frames: N places its own biography names"
    )
    readout_samples: int = setting(
        0, at_least_zero=True, reading=True, help="frames: N biographies sampled, their places too"
    )
    # of 0.5 and 0.8, the one that answered more of the tuning split (docs/readout.md)
    readout_temperature: float = setting(
        0.5, reading=True, help="frames: the sampled biographies' temperature"
    )

    def __post_init__(self):
        check_fields(self)
        if not self.pretrain_stages:
            raise RunError("pretrain_stages must hold at least one stage")
        if self.clause_dropout and self.corrupt_by_epoch:
            raise RunError(
                "clause_dropout draws a view per example: it cannot go with corrupt_by_epoch"
            )
        if self.corrupt_by_epoch and any(stage.plain_text for stage in self.pretrain_stages):
            raise RunError(
                "corrupt_by_epoch draws span corruptions: it cannot go with a text stage"
            )
        for number, stage in enumerate(self.stages(), 1):
            stage.check(f"pretraining stage {number} ({stage})")
        unknown = set(self.frozen_parts()) - set(FREEZABLE)
        if unknown:
            raise RunError(
                f"finetune_frozen: {', '.join(sorted(unknown))} is not one of "
                f"{', '.join(FREEZABLE)}"
            )

    def stages(self):
        """The pretraining stages, what they leave None filled in from the recipe."""
        own = {
            f.metadata["stage"]: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if f.metadata["stage"]
        }
        return [
            dataclasses.replace(
                stage, **{k: v for k, v in own.items() if getattr(stage, k) is None}
            )
            for stage in self.pretrain_stages
        ]

    def finetuning(self, pretrained):
        """Finetuning as a stage on the pairs: from pretrained params, or from scratch."""
        if pretrained:
            epochs, lr = self.finetune_epochs_from_pretrained, self.finetune_lr
        else:
            epochs, lr = self.finetune_epochs_from_scratch, self.finetune_lr_from_scratch
        return Stage(
            "pairs",
            max_epochs=epochs,
            learning_rate=self.finetune_lr if lr is None else lr,
            max_shift=0,
            decay_epochs=self.decay_epochs,
            batch_size=self.finetune_batch_size,
        )

    def trains_on_pairs(self):
        """
        Whether a pretraining stage reads the pairs: those of --mix_corpus_path, where it is given.
        """
        return any(stage.uses_pairs for stage in self.pretrain_stages)

    def training_settings(self, function):
        """
        The fields a training of `function` ("pretrain" or "finetune") reads, by name, the stages
        as text: its checkpoint's identity, and what its output in the table follows from.
        """
        reads = (None, TRAININGS[function])
        settings = {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if not f.metadata["reading"] and f.metadata["training"] in reads
        }
        if "pretrain_stages" in settings:
            settings["pretrain_stages"] = "; ".join(map(str, self.pretrain_stages))
        return settings

    def reading_settings(self):
        """The fields only evaluate reads, by name: a kept readout's settings."""
        return {
            f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.metadata["reading"]
        }

    @classmethod
    def trainer_defaults(cls):
        """Every field the Trainer reads, at its default: TrainerConfig's defaults of them."""
        return {f.name: f.default for f in dataclasses.fields(cls) if f.metadata["trainer"]}

    def trainer_settings(self, pretraining):
        """
        The fields the Trainer reads, by name; those of the other kind of training at their defaults
        (off).
        """
        kind = TRAININGS["pretrain" if pretraining else "finetune"]
        return {
            f.name: getattr(self, f.name) if f.metadata["training"] in (None, kind) else f.default
            for f in dataclasses.fields(self)
            if f.metadata["trainer"]
        }

    def frozen_parts(self):
        """The model's parts that finetuning leaves as they are (finetune_frozen's list)."""
        return [part for part in self.finetune_frozen.split(",") if part]

    def sizes(self, variant):
        """
        The model's sizes as a params file's metadata records them (bottleneck_dim for the perceiver
        only).
        """
        sizes = {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if f.metadata.get("size")
        }
        if variant != "perceiver":
            del sizes["bottleneck_dim"]
        return sizes
