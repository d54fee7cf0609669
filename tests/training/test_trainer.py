"""The shared training loop: optimizer groups, the token-counted schedule, logging and learning."""

import dataclasses
import itertools
import math

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from torch.utils.tensorboard import SummaryWriter

from conftest import lab_module
from dataset import CharCorruptionDataset, NameDataset
from factgpt.common.errors import RunError
from factgpt.pipeline import trainings
from factgpt.settings.recipes import HANDOUT
from factgpt.table.world import build_world
from factgpt.training import checkpoint
from factgpt.training.step import lr_multiplier, parameter_groups
from model import GPT, VARIANTS, GPTConfig, variant_config
from trainer import Trainer, TrainerConfig
from utils import set_seed


def test_trainer_config_defaults_and_kwargs():
    config = TrainerConfig(max_epochs=3, learning_rate=1e-3, anything="kept")
    assert (config.max_epochs, config.learning_rate, config.anything) == (3, 1e-3, "kept")
    assert config.betas == (0.9, 0.95) and config.grad_norm_clip == 1.0 and config.weight_decay == 0.1
    assert config.writer is None and config.ckpt_path is None and config.num_workers == 0


def test_lr_multiplier_warms_up_then_follows_the_unclamped_cosine():
    warmup, final = 1000, 11000
    assert lr_multiplier(0, warmup, final) == 0
    assert lr_multiplier(500, warmup, final) == pytest.approx(0.5)
    assert lr_multiplier(1000, warmup, final) == pytest.approx(1.0)
    assert lr_multiplier(6000, warmup, final) == pytest.approx(0.5)  # cosine midpoint
    assert lr_multiplier(3500, warmup, final) == pytest.approx(0.5 * (1 + math.cos(math.pi / 4)))
    assert lr_multiplier(11000, warmup, final) == pytest.approx(0.1)
    assert lr_multiplier(16000, warmup, final) == pytest.approx(0.5), "the course's cosine rises again"
    assert lr_multiplier(21000, warmup, final) == pytest.approx(1.0), "back at the peak at progress 2"
    assert lr_multiplier(16000, warmup, final, clamped=True) == pytest.approx(0.1), "clamped: stays at 10%"


def course_decayed(variant):
    """The parameters the course's trainer decays, written out: all but the biases."""
    block = ["ln1.weight", "ln2.weight", "mlp.0.weight", "mlp.2.weight", "attn.value.weight", "attn.proj.weight"]
    block += (
        ["attn.w1.weight", "attn.w2", "attn.b2"]
        if variant == "synthesizer"
        else ["attn.key.weight", "attn.query.weight"]
    )
    blocks = ["blocks.0", "blocks.1", "blocks.2"] if variant != "perceiver" else ["down_block", "blocks.0", "up_block"]
    names = {f"{b}.{n}" for b in blocks for n in block}
    return (
        names
        | {"tok_emb.weight", "ln_f.weight", "head.weight"}
        | ({"pos_emb"} if variant != "rope" else set())
        | ({"down_block.C"} if variant == "perceiver" else set())
    )


@pytest.mark.parametrize("variant", VARIANTS)
def test_weight_decay_groups_follow_the_course_rule(variant):
    """Every parameter but the biases is decayed: embeddings, LayerNorm gains, C, w2 and b2 included."""
    model = GPT(variant_config(variant, 20, 16, n_layer=3, n_head=2, n_embd=8, bottleneck_dim=4))
    decay, no_decay = parameter_groups(model, 0.1)
    names = {id(p): n for n, p in model.named_parameters()}
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert {names[id(p)] for p in decay["params"]} == course_decayed(variant)
    assert {names[id(p)] for p in no_decay["params"]} == {n for n in names.values() if n.endswith(".bias")}
    assert TrainerConfig().decay_groups == HANDOUT.decay_groups == "course"
    with pytest.raises(RunError, match="decay_groups"):  # every run's settings come from a Recipe, which checks them
        dataclasses.replace(HANDOUT, decay_groups="nanogpt")


@pytest.mark.parametrize("variant", VARIANTS)
def test_matmul_decay_groups_decay_only_linear_weights(variant):
    model = GPT(variant_config(variant, 20, 16, n_layer=3, n_head=2, n_embd=8, bottleneck_dim=4))
    decay, no_decay = parameter_groups(model, 0.1, "matmul")
    names = {id(p): n for n, p in model.named_parameters()}
    linear_weights = {f"{n}.weight" for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    assert {names[id(p)] for p in decay["params"]} == linear_weights
    # everything else, the embeddings, the LayerNorms and every bias, is not decayed
    assert {names[id(p)] for p in no_decay["params"]} == set(names.values()) - linear_weights
    assert "tok_emb.weight" in names.values() and "ln_f.weight" in names.values()


def test_the_course_groups_shrink_the_layernorm_gains():
    """
    Why the decay groups matter: the course's groups decay the LayerNorm gains (their name,
    ln1.weight, lacks "LayerNorm.weight"), which shrinks the attention scores; on the handout's
    recipe the Linear-only groups, which leave the gains alone, stayed on the loss plateau
    (docs/optimisation.md). On a generated world at a raised learning rate, two runs identical
    but for the groups: every block's gain in front of attention ends below the other's. Over
    80 steps, the decay alone takes a gain to about exp(-80 * 3e-2 * 0.1) = 0.79 of where it was;
    measured over seeds 0-7 with one thread and 0-3 with two, each block's ratio of the two runs'
    gains was 0.77-0.83 (the loss gap and the attention scores are not robust), so the test asks
    for the gains alone.
    """
    pre = CharCorruptionDataset(build_world(n_train=128, n_dev=10, n_test=10)["wiki.txt"], 128)
    gains = {}
    for groups in ["course", "matmul"]:
        set_seed(0)
        model = GPT(GPTConfig(pre.vocab_size, pre.block_size, n_layer=2, n_head=4, n_embd=64))
        config = TrainerConfig(
            max_epochs=8,
            batch_size=16,
            learning_rate=3e-2,
            lr_decay=True,
            warmup_tokens=512 * 20,
            final_tokens=200 * len(pre) * 128,
            data_seed=0,
            device="cpu",
            decay_groups=groups,
        )
        Trainer(model, pre, None, config).train()
        gains[groups] = [block.ln1.weight.mean().item() for block in model.blocks]
    assert all(c < 0.9 * m for c, m in zip(gains["course"], gains["matmul"])), gains


class ScalarLog:
    """A TensorBoard-like writer that keeps the scalars it is given."""

    def __init__(self):
        self.scalars = {}

    def add_scalar(self, tag, value, step):
        self.scalars.setdefault(tag, []).append(value)


def course_learning_rates(batch_rows, tokens_per_row, peak, warmup_tokens, final_tokens):
    """The course trainer's rate for each step: set after every step from all the tokens seen, pad included."""
    lr, tokens, rates = peak, 0, []
    for rows in batch_rows:
        rates.append(lr)
        tokens += rows * tokens_per_row
        if tokens < warmup_tokens:
            mult = tokens / max(1, warmup_tokens)
        else:
            progress = (tokens - warmup_tokens) / max(1, final_tokens - warmup_tokens)
            mult = max(0.1, 0.5 * (1.0 + math.cos(math.pi * progress)))
        lr = peak * mult
    return rates


@pytest.mark.parametrize("schedule", ["course", "clamped"])
def test_learning_rate_per_step_matches_the_course_across_two_decays(schedule, tiny_world):
    """A real run past final_tokens twice: every step's rate is the course's (or, clamped, held at 10%)."""
    pre = CharCorruptionDataset(open(tiny_world["wiki.txt"], encoding="utf-8").read(), 16)
    n, batch_size, epochs = len(pre), 32, 9  # 84 documents: batches of 32, 32, 20
    final_tokens = 3 * n * 15  # the cosine first reaches 10% after 3 epochs, the peak again after 6
    log = ScalarLog()
    torch.manual_seed(0)
    model = GPT(GPTConfig(pre.vocab_size, 16, n_layer=1, n_head=1, n_embd=8))
    config = TrainerConfig(
        max_epochs=epochs,
        batch_size=batch_size,
        learning_rate=6e-3,
        lr_decay=True,
        warmup_tokens=40 * 15,
        final_tokens=final_tokens,
        lr_schedule=schedule,
        writer=log,
        device="cpu",
        log_every=1,  # the rate is logged with the loss
    )
    Trainer(model, pre, None, config).train()
    rows = ([batch_size] * (n // batch_size) + [n % batch_size]) * epochs
    expected = course_learning_rates(rows, 15, 6e-3, 40 * 15, final_tokens)
    if schedule == "clamped":
        tokens = [0] + list(itertools.accumulate(r * 15 for r in rows))[:-1]
        expected = [e if t < final_tokens else 6e-4 for e, t in zip(expected, tokens)]
    assert log.scalars["train/lr"] == pytest.approx(expected, rel=1e-6)
    assert expected[0] == 6e-3 and min(expected) == pytest.approx(6e-4)
    if schedule == "course":
        assert max(expected[len(expected) // 2 :]) > 5.9e-3, "the course's rate comes back to its peak"


@pytest.fixture
def names(tiny_world):
    wiki = open(tiny_world["wiki.txt"], encoding="utf-8").read()
    pre = CharCorruptionDataset(wiki, 64)
    return pre, NameDataset(pre, open(tiny_world["train.tsv"], encoding="utf-8").read())


def test_training_lowers_the_loss_and_logs_to_tensorboard(names, tmp_path):
    pre, ds = names
    torch.manual_seed(0)
    model = GPT(GPTConfig(pre.vocab_size, pre.block_size, n_layer=2, n_head=2, n_embd=32))
    writer = SummaryWriter(log_dir=str(tmp_path / "tb"))
    config = TrainerConfig(
        max_epochs=6,
        batch_size=16,
        learning_rate=3e-3,
        lr_decay=True,
        warmup_tokens=16 * 63 * 2,
        final_tokens=len(ds) * 63 * 5,
        writer=writer,
        ckpt_path=str(tmp_path / "ckpt.params"),
        device="cpu",
        log_every=1,
    )
    trainer = Trainer(model, ds, None, config)
    trainer.train()
    writer.close()
    assert len(trainer.epoch_losses) == 6
    assert trainer.epoch_losses[-1] < 0.8 * trainer.epoch_losses[0]
    steps_per_epoch = math.ceil(len(ds) / 16)
    assert trainer.step == 6 * steps_per_epoch

    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    assert {"train/loss", "train/lr"} <= set(events.Tags()["scalars"])
    lrs = [e.value for e in events.Scalars("train/lr")]
    assert len(lrs) == trainer.step
    # the schedule counts tokens, including the short last batch of every epoch
    rows = ([16] * (steps_per_epoch - 1) + [len(ds) - 16 * (steps_per_epoch - 1)]) * 6
    assert lrs == pytest.approx(
        course_learning_rates(rows, 63, 3e-3, config.warmup_tokens, config.final_tokens), rel=1e-5
    )

    saved = torch.load(tmp_path / "ckpt.params", weights_only=True)
    assert all(torch.equal(saved[k], v) for k, v in model.state_dict().items())


dispatches = lab_module("dispatches")


class HostReadSteps(dispatches.DispatchCount):
    """The trainer's step count at every operator the host waits for (on a GPU, a sync)."""

    def __init__(self, trainer):
        super().__init__()
        self.trainer, self.steps = trainer, []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket.__name__ in dispatches.HOST_READS:
            self.steps.append(self.trainer.step)
        return super().__torch_dispatch__(func, types, args, kwargs)


@pytest.mark.parametrize("fixed_shapes, precision", [(True, "fp32"), (True, "fp16"), (False, "fp32")])
def test_with_fixed_shapes_the_host_reads_nothing_between_logging_steps(names, fixed_shapes, precision):
    """
    fixed_shapes (CUDA's way): the loss, the non-finite check and the rate stay on the device
    between logging steps, and the epoch's data is drawn at its start; so the host waits only at
    steps that log (every 3rd) or end an epoch (every 5th). So does fp16's GradScaler, whose
    skipped steps the fused AdamW decides on the device: the step can be captured. Cut batches
    need their lengths every step.
    """
    pre, ds = names
    torch.manual_seed(0)
    model = GPT(GPTConfig(pre.vocab_size, pre.block_size, n_layer=1, n_head=2, n_embd=16))
    batch_size = len(ds) // 5 + 1
    settings = dict(device="cpu", fixed_shapes=fixed_shapes, precision=precision)
    trainer = Trainer(model, ds, None, TrainerConfig(max_epochs=2, batch_size=batch_size, log_every=3, **settings))
    assert len(trainer.batches) == 5 and trainer.scaler.is_enabled() == (precision == "fp16")
    with HostReadSteps(trainer) as reads:
        trainer.train()
    waited = set(reads.steps)
    if fixed_shapes:
        assert waited and waited <= {0, 3, 5, 6, 9, 10}, sorted(waited)
    else:
        assert set(range(1, 10)) <= waited


def test_every_epochs_mean_loss_is_logged_even_in_short_runs(names):
    """Runs of fewer than log_every steps still log a loss: every epoch's mean, as train/epoch_loss."""
    pre, ds = names
    log = ScalarLog()
    model = GPT(GPTConfig(pre.vocab_size, pre.block_size, n_layer=1, n_head=2, n_embd=16))
    trainer = Trainer(model, ds, None, TrainerConfig(max_epochs=2, batch_size=32, writer=log, device="cpu"))
    trainer.train()
    assert trainer.step < trainer.config.log_every and "train/loss" not in log.scalars
    assert log.scalars["train/epoch_loss"] == trainer.epoch_losses and len(trainer.epoch_losses) == 2


def test_test_dataset_loss_is_reported(names, tmp_path):
    pre, ds = names
    model = GPT(GPTConfig(pre.vocab_size, pre.block_size, n_layer=2, n_head=2, n_embd=16))
    writer = SummaryWriter(log_dir=str(tmp_path))
    trainer = Trainer(model, ds, ds, TrainerConfig(max_epochs=2, batch_size=32, device="cpu", writer=writer))
    trainer.train()
    writer.close()
    events = EventAccumulator(str(tmp_path))
    events.Reload()
    reported = [e.value for e in events.Scalars("test/loss")]
    assert len(reported) == 2 and reported[-1] == pytest.approx(trainer.evaluate_loss(ds))
    assert model.training, "evaluating the loss leaves the model's mode as it was"


def test_a_new_recipe_field_reaches_the_trainer_and_the_checkpoint(tiny_world, tmp_path, monkeypatch):
    """
    A field added to (a copy of) Recipe, said to be read by the Trainer, is in the TrainerConfig of a
    real run under its own name, and in its checkpoint's identity.
    """
    from factgpt import pipeline
    from factgpt.settings.recipe import setting
    from factgpt.settings.run_config import RunConfig

    field = setting(7, trainer="training")
    extended = dataclasses.make_dataclass(
        "Extended", [("new_setting", int, field)], bases=(type(HANDOUT),), frozen=True
    )
    seen = []

    class Recording(Trainer):
        def train(self):
            seen.append(self.config.new_setting)
            super().train()

    monkeypatch.setattr(trainings, "Trainer", Recording)
    recipe = extended(n_layer=2, n_head=2, n_embd=16, pretrain_epochs=1, pretrain_batch_size=16, new_setting=9)
    params = str(tmp_path / "p.params")
    cfg = RunConfig("pretrain", "vanilla", tiny_world["wiki.txt"], writing_params_path=params, recipe=recipe)
    pipeline.pretrain(dataclasses.replace(cfg, device="cpu", num_workers=0, keep_checkpoint=True))
    assert seen == [9]
    assert torch.load(params + ".ckpt", weights_only=True)["run_identity"]["new_setting"] == 9


def test_trainer_config_declares_every_recipe_field_the_trainer_reads_with_the_handouts_value():
    """A reader of TrainerConfig sees every setting the Trainer reads; the course's own keep the course's defaults."""
    read_by_trainer = [f for f in dataclasses.fields(HANDOUT) if f.metadata["trainer"]]
    course = {"weight_decay": 0.1, "warmup_tokens": 375e6}
    assert read_by_trainer and {f.name for f in read_by_trainer} >= set(course)
    for f in read_by_trainer:
        assert f.name in vars(TrainerConfig), f.name
        assert getattr(TrainerConfig, f.name) == course.get(f.name, f.default), f.name


def test_a_trainer_goes_on_from_another_trainers_state_dict():
    """Two epochs, or one and then one more by a fresh Trainer given the first one's state_dict: the same params."""
    corpus = CharCorruptionDataset(build_world(n_train=40, n_dev=5, n_test=5)["wiki.txt"], 128)

    def trainer(epochs, seed=0):
        set_seed(seed)  # the second Trainer's model and generators start elsewhere: its state_dict puts them back
        model = GPT(GPTConfig(corpus.vocab_size, 128, n_layer=2, n_head=2, n_embd=16))
        config = TrainerConfig(max_epochs=epochs, batch_size=16, learning_rate=1e-3, lr_decay=True, device="cpu")
        return Trainer(model, corpus, None, config)

    whole = trainer(2)
    whole.train()
    first = trainer(1)
    first.train()
    state = checkpoint.trainer_state(first)  # the random generators as they are now, before the next model draws
    second = trainer(2, seed=1)
    checkpoint.restore(second, state)
    second.train()
    assert second.step == whole.step and second.epoch_losses == whole.epoch_losses
    for name, value in whole.model.state_dict().items():
        assert torch.equal(second.model.state_dict()[name], value), name
