"""The fast paths give the results of the straightforward ones: padding skipped, cached decoding, GPU settings."""

import copy
import math

import pytest
import torch

from conftest import TINY, pretrain_args, run_main, small_gpt
from dataset import CharCorruptionDataset, NameDataset
from factgpt.readout.decoding import greedy_decode_cached, predict_places
from factgpt.table.world import build_world
from factgpt.training.batching import bucket_rows, padded_rows
from factgpt.training.step import forward_passes, real_lengths
from model import VARIANTS, KVCache
from trainer import Trainer, TrainerConfig
from utils import sample, set_seed

SIZES = dict(n_layer=3, n_embd=32, bottleneck_dim=16)


@pytest.fixture(scope="module")
def world():
    files = build_world(n_train=120, n_dev=40, n_test=10, n_places=20, seed=3)
    pre = CharCorruptionDataset(files["wiki.txt"], 128)
    return files, pre, NameDataset(pre, files["birth_places_train.tsv"])


def batches_and_models(variant, world, rows):
    """For the pretraining and the finetuning data: (dataset, a fresh model without dropout, x, y of `rows` rows)."""
    _, pre, names = world
    for dataset in (pre, names):
        model = small_gpt(pre.vocab_size, 128, variant, seed=0, **SIZES).eval()  # eval: no dropout, same arithmetic
        x, y = map(torch.stack, zip(*[dataset[i] for i in range(rows)]))
        yield dataset, model, x, y


def whole_batch_loss_and_gradients(model, x, y):
    """The straightforward way: the batch in one forward pass, at the block size, through the model's own loss."""
    model = copy.deepcopy(model)
    _, loss = model(x, y)
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in model.parameters()]


def step_loss_and_gradients(model, dataset, x, y, passes=None, **settings):
    """
    Trainer.train_step's loss and gradients on the batch (with the clipping's limit out of
    reach: untouched); with `passes`, the step's forward passes must have those inputs.
    """
    model = copy.deepcopy(model)
    inputs = []
    model.register_forward_pre_hook(lambda _, args: inputs.append(args[0].clone()))
    trainer = Trainer(model, dataset, None, TrainerConfig(device="cpu", grad_norm_clip=math.inf, **settings))
    _, loss = trainer.train_step(x, y)
    if passes is not None:
        assert len(inputs) == len(passes) and all(torch.equal(i, xp) for i, (xp, _) in zip(inputs, passes))
    return loss, [p.grad.clone() for p in model.parameters()]


def assert_same_loss_and_gradients(model, first, second):
    """Two ways to pass a batch through the model, as (loss, gradients), give one loss and one gradient."""
    (first_loss, first_grads), (second_loss, second_grads) = first, second
    assert torch.allclose(first_loss, second_loss, atol=1e-6)
    for (name, _), g_first, g_second in zip(model.named_parameters(), first_grads, second_grads):
        assert torch.allclose(g_first, g_second, atol=1e-6), name


@pytest.mark.parametrize("variant", VARIANTS)
def test_cutting_padding_keeps_loss_and_gradients(variant, world):
    for dataset, model, x, y in batches_and_models(variant, world, 16):
        n = int(real_lengths(y).max())
        assert n < 127
        [(xp, yp)] = forward_passes(x, y, 16)  # what a step on the CPU (16 rows a pass) trains on: the batch cut
        assert torch.equal(xp, x[:, :n]) and torch.equal(yp, y[:, :n])
        whole = whole_batch_loss_and_gradients(model, x, y)
        padded = step_loss_and_gradients(model, dataset, x, y, [(x, y)], full_padding=True)
        cut = step_loss_and_gradients(model, dataset, x, y, [(xp, yp)])
        assert_same_loss_and_gradients(model, whole, padded)
        assert_same_loss_and_gradients(model, padded, cut)


def source_rows(x, y, pieces):
    """The batch row each row of the pieces (x, y, ...) came from; each piece must be cut to its longest real target."""
    seen = []
    for xp, yp, *_ in pieces:
        n = xp.size(1)
        assert n == int(real_lengths(yp).max())
        for row_x, row_y in zip(xp, yp):
            match = [
                i
                for i in range(len(y))
                if torch.equal(x[i, :n], row_x)
                and torch.equal(y[i, :n], row_y)
                and not y[i, n:].any()
                and i not in seen
            ]
            assert match, "every row is a batch row with only pad targets cut"
            seen.append(match[0])
    return seen


def test_length_buckets_hold_every_example_once_and_cut_only_padding(world):
    _, pre, _ = world
    x, y = map(torch.stack, zip(*[pre[i % len(pre)] for i in range(300)]))
    batches = [(x[rows, :n], y[rows, :n]) for rows, n in bucket_rows(real_lengths(y), 64)]
    assert [len(b[0]) for b in batches][-1] == 300 - 4 * 64 and all(len(b[0]) == 64 for b in batches[:-1])
    assert len(source_rows(x, y, batches)) == 300


@pytest.mark.parametrize("corrupt_by_epoch", [False, True])
def test_bucketing_halves_pretraining_arithmetic(world, corrupt_by_epoch):
    """An epoch of pretraining computes at most 60% of the padded arithmetic (token positions), every example once."""
    _, pre, _ = world
    set_seed(0)
    model = small_gpt(pre.vocab_size, 128, **SIZES)
    config = TrainerConfig(
        max_epochs=1, batch_size=32, group_by_length=True, device="cpu", corrupt_by_epoch=corrupt_by_epoch
    )
    trainer = Trainer(model, pre, None, config)
    positions, examples = 0, 0
    for x, y in trainer.batches.epoch(0):
        positions += sum(xp.numel() for xp, _ in forward_passes(x, y, trainer.micro_batch_size))
        examples += len(y)
    assert examples == len(pre)
    assert positions <= 0.6 * len(pre) * 127


@pytest.mark.parametrize("variant", VARIANTS)
def test_forward_passes_keep_the_batch_loss_and_gradients(variant, world):
    """Rows sorted by length in passes of 8, each cut to its own longest row: the same batch, loss and gradient."""
    for dataset, model, x, y in batches_and_models(variant, world, 40):
        passes = forward_passes(x, y, 8)  # what a step with micro_batch_size=8 trains on
        assert len(passes) == 5 and sum(int((yp != 0).sum()) for _, yp in passes) == int((y != 0).sum())
        assert sorted(source_rows(x, y, passes)) == list(range(len(y)))
        cut = int(real_lengths(y).max())
        assert sum(xp.numel() for xp, _ in passes) < len(y) * cut  # less than the batch cut as a whole
        whole = whole_batch_loss_and_gradients(model, x, y)
        step = step_loss_and_gradients(model, dataset, x, y, passes, micro_batch_size=8)
        assert_same_loss_and_gradients(model, whole, step)


@pytest.fixture(scope="module")
def trained(world):
    """A small model of each variant, pretrained and finetuned briefly on the world, so answers vary."""
    files, pre, names = world
    models = {}
    for variant in VARIANTS:
        set_seed(0)
        model = small_gpt(pre.vocab_size, 128, variant, **SIZES)
        for dataset, epochs in [(pre, 3), (names, 6)]:
            Trainer(
                model, dataset, None, TrainerConfig(max_epochs=epochs, batch_size=32, learning_rate=3e-3, device="cpu")
            ).train()
        models[variant] = model.eval()
    return models


@pytest.mark.slow
@pytest.mark.parametrize("variant", VARIANTS)
def test_batched_cached_decoding_answers_like_one_at_a_time(variant, world, trained):
    files, pre, _ = world
    questions = [line.split("\t")[0] for line in files["birth_dev.tsv"].splitlines()]
    questions.append("Where was " + "Zed " * 21 + "born?")  # too long for the cache: slides like sample()
    model = trained[variant]
    batched = predict_places(model, questions, pre, "cpu", batch_size=7)
    one_by_one = predict_places(model, questions, pre, "cpu", sequential=True)
    assert batched == one_by_one
    assert len(set(batched)) > 1, "a trivial model would not test much"


@pytest.mark.parametrize("variant", VARIANTS)
def test_cached_decoding_stops_each_row_at_its_stop_token(variant):
    """A row that has written the stop token leaves its batch, the rest of it being that token; the others go on."""
    model = small_gpt(30, 48, variant, seed=0, **SIZES).eval()
    x, steps = torch.randint(0, 30, (8, 10)), 20
    alone = sample(model, x, steps)[:, 10:]  # greedy, one full pass per step, no stop

    def first_steps(token):
        return [int((row == token).nonzero()[0]) if (row == token).any() else steps for row in alone]

    stop_id = max(range(30), key=lambda token: len(set(first_steps(token))))
    assert len(set(first_steps(stop_id)) - {steps}) > 1, "rows must stop at different steps"
    expected = alone.clone()
    for row, first in enumerate(first_steps(stop_id)):
        expected[row, first:] = stop_id
    decoded = greedy_decode_cached(model, x, steps, stop_id).ids
    assert torch.equal(decoded, expected[:, : decoded.size(1)])
    assert (expected[:, decoded.size(1) :] == stop_id).all()


@pytest.mark.parametrize("variant", VARIANTS)
def test_kv_cache_gives_the_full_forward_also_for_the_rows_it_keeps(variant):
    """Token by token with a cache is the full forward; rows dropped from the cache leave the others unchanged."""
    model = small_gpt(30, 48, variant, seed=0, **SIZES).eval()
    x = torch.randint(0, 30, (3, 40))
    full, _ = model(x)
    cache = KVCache()
    pieces = [model(x[:, :9], cache=cache)[0]] + [model(x[:, t : t + 1], cache=cache)[0] for t in range(9, 20)]
    assert torch.allclose(torch.cat(pieces, dim=1), full[:, :20], atol=1e-5)
    cache.keep_rows(torch.tensor([0, 2]))  # as decoding does when row 1 has answered
    rest = [model(x[[0, 2], t : t + 1], cache=cache)[0] for t in range(20, 40)]
    assert torch.allclose(torch.cat(rest, dim=1), full[[0, 2], 20:], atol=1e-5)
    assert cache.length == 40


def gpu_path_training(world, **settings):
    """Two epochs of a one-block model on the names, 4 passes a step: its epoch losses and the model."""
    _, pre, names = world
    one_block = {**SIZES, "n_layer": 1}  # each block is traced again under compile
    # no dropout: its draws follow the padded shapes, which full_padding changes
    model = small_gpt(pre.vocab_size, 128, seed=0, dropout=0.0, **one_block)
    config = dict(max_epochs=2, batch_size=64, learning_rate=1e-3, device="cpu", micro_batch_size=16, data_seed=0)
    trainer = Trainer(model, names, None, TrainerConfig(**config, **settings))
    trainer.train()
    return trainer.epoch_losses, model


@pytest.fixture(scope="module")
def fp32_losses(world):
    """The plain step's epoch losses: what every GPU path's should come near."""
    return gpu_path_training(world)[0]


@pytest.mark.parametrize(
    "settings, tolerance",
    [
        (dict(precision="bf16"), 0.05),  # bf16's 8-bit mantissa: a few percent of the loss
        (dict(precision="fp16"), 0.01),  # with a GradScaler
        (dict(fused_adamw=False, log_every=1), 1e-4),  # the plain AdamW, as on MPS
        (dict(compile=True), 1e-4),
        (dict(full_padding=True, num_workers=1), 0.01),  # a pass of whole rows: its sums in another order
    ],
)
def test_gpu_path_settings_train_on_cpu_as_fp32_does(settings, tolerance, world, fp32_losses, monkeypatch):
    """Each GPU path trains on the CPU too, its epoch losses within its arithmetic's tolerance of the plain step's."""
    # trace with TorchDynamo and AOTAutograd as on a GPU, but skip Inductor's C++ build, which takes minutes here
    compile_ = torch.compile
    monkeypatch.setattr(torch, "compile", lambda model, **kw: compile_(model, backend="aot_eager", **kw))
    losses, model = gpu_path_training(world, **settings)
    assert losses == pytest.approx(fp32_losses, rel=tolerance)
    if "precision" in settings:  # autocast really ran: another arithmetic, other losses
        assert losses != fp32_losses
    assert losses[1] < losses[0] and fp32_losses[1] < fp32_losses[0]  # both learn
    _, pre, _ = world
    assert list(model.state_dict()) == list(small_gpt(pre.vocab_size, 128, **{**SIZES, "n_layer": 1}).state_dict())


@pytest.mark.parametrize("variant", VARIANTS)
def test_a_short_batch_grown_to_the_full_shape_keeps_loss_and_gradients(variant, world):
    """fixed_shapes: a short batch with rows of pads added (no targets) trains as the batch cut to its length."""
    for dataset, model, x, y in batches_and_models(variant, world, 11):
        fx, fy = padded_rows(x, y, 16)
        assert fx.shape == fy.shape == (16, x.size(1))
        fixed = step_loss_and_gradients(model, dataset, fx, fy, [(fx, fy)], fixed_shapes=True)
        cut = step_loss_and_gradients(model, dataset, x, y)
        assert_same_loss_and_gradients(model, fixed, cut)


def test_an_epoch_of_the_cpu_recipe_trains_alike_with_fixed_shapes(tiny_world, tmp_path):
    """
    One epoch of the cpu recipe (length-grouped batches) with --fixed_shapes, CUDA's batches of
    one shape, trains on the same batches as without: params within float noise, where
    ungrouped batches of the same shape end far from them.
    """

    def trained(name, *flags):
        path = tmp_path / f"{name}.params"
        args = [*pretrain_args("vanilla", tiny_world["wiki.txt"], path), "--recipe", "cpu", "--pretrain_epochs", "1"]
        assert run_main(*args, "--pretrain_stages", "corpus", *TINY, *flags) == 0
        return torch.load(path, weights_only=True)

    cut, fixed = trained("cut"), trained("fixed", "--fixed_shapes")
    ungrouped = trained("ungrouped", "--fixed_shapes", "--no-group_by_length")

    def mean_difference(state):
        return sum(float((state[k] - cut[k]).abs().sum()) for k in cut) / sum(v.numel() for v in cut.values())

    assert mean_difference(fixed) < 1e-6 and mean_difference(ungrouped) > 5e-5
