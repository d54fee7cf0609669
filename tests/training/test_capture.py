"""
The captured step (capture.py, Recipe.captured_step): on the CPU the same code runs uncaptured
and trains as the plain step does, bit for bit, and torch.compile compiles it once however the
learning rate moves; the default captures it on one CUDA process alone; on a GPU (skipped
without one) the CUDA graph replays the eager step.
"""

import random

import pytest
import torch
import torch._dynamo

from conftest import corpus_of, small_gpt
from factgpt.settings.recipe import Recipe
from factgpt.training import capture, checkpoint
from factgpt.training.capture import capture_mode
from model import VARIANTS
from trainer import Trainer, TrainerConfig

cuda_only = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.fixture(scope="module")
def corpus(tiny_world):
    return corpus_of(tiny_world["wiki.txt"], 64)


def trainer_of(corpus, device="cpu", dropout=0.1, epochs=3, variant="vanilla", checkpoints=None, **settings):
    """A small model's pretraining Trainer with a schedule that moves the rate every step."""
    random.seed(0)  # the span corruptions' draws
    model = small_gpt(corpus.vocab_size, 64, variant, seed=0, n_layer=1, dropout=dropout)
    schedule = dict(learning_rate=3e-3, lr_decay=True, warmup_tokens=500, final_tokens=5000)
    config = TrainerConfig(max_epochs=epochs, batch_size=8, device=device, data_seed=0, **schedule, **settings)
    return Trainer(model, corpus, None, config, checkpoints=checkpoints)


def params_of(trainer):
    return torch.cat([p.detach().flatten().cpu() for p in trainer.model.parameters()])


@pytest.mark.parametrize("way", ["cuda_graph", "compiled"])
def test_off_cuda_the_captured_steps_code_trains_as_the_plain_step(corpus, way):
    """The rate in a tensor and AdamW's capturable state, run uncaptured: the plain step's params, bit for bit."""
    plain = trainer_of(corpus, fixed_shapes=True)
    plain.train()
    captured = trainer_of(corpus, captured_step=way)
    assert torch.is_tensor(captured.optimizer.param_groups[0]["lr"])
    captured.train()
    assert captured.epoch_losses == plain.epoch_losses
    assert torch.equal(params_of(captured), params_of(plain))


@pytest.mark.parametrize("captured_step", ["compiled", "off"])
def test_the_step_compiles_once_while_the_learning_rate_moves(corpus, captured_step):
    """
    torch.compile of the step (forward, backward, clipping, AdamW): with the rate in a tensor,
    its graphs are compiled at the first step and never again, and it trains as the eager step
    does; with the rate a float (captured_step off) every new rate compiles anew. The graphs
    break where PyTorch's optimizer breaks them on purpose: fullgraph=True cannot hold AdamW.step.
    """
    eager = trainer_of(corpus, fixed_shapes=True, captured_step=captured_step)
    eager.train()
    trainer = trainer_of(corpus, fixed_shapes=True, captured_step=captured_step)
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    trainer.captured_gradient_step = torch.compile(trainer.gradient_step, backend="eager")
    graphs = []
    step = trainer.train_step

    def counted_step(x, y):
        out = step(x, y)
        graphs.append(torch._dynamo.utils.counters["stats"]["unique_graphs"])
        return out

    trainer.train_step = counted_step
    trainer.train()
    rates = {float(g["lr"]) for g in trainer.optimizer.param_groups}
    assert len(graphs) == trainer.step > 10 and rates != {3e-3}
    if captured_step == "compiled":
        assert graphs[-1] == graphs[0] > 0, graphs
    else:
        assert graphs[-1] > graphs[0], graphs
    assert torch.equal(params_of(trainer), params_of(eager))


def test_the_fused_graphs_step_compiles_once_and_trains_as_the_eager_one(corpus, monkeypatch):
    """
    captured_step "fused_graph" compiles the step with inductor (on CUDA, then captured in one
    graph): off CUDA it runs compiled, once for every rate the schedule moves through, its
    losses within 1e-3 of the eager step's. Traced as on a GPU, without Inductor's C++ build
    (test_the_captured_step_trains_as_the_eager_one compiles it with inductor on a GPU).
    """
    compile_ = torch.compile
    monkeypatch.setattr(torch, "compile", lambda step, **kw: compile_(step, backend="aot_eager", **kw))
    eager = trainer_of(corpus, dropout=0.0, epochs=2, fixed_shapes=True, captured_step="off")
    eager.train()
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    fused = trainer_of(corpus, dropout=0.0, epochs=2, captured_step="fused_graph")
    fused.train()
    rates = {float(g["lr"]) for g in fused.optimizer.param_groups}
    assert fused.step > 10 and rates != {3e-3}
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] > 0
    assert not torch._dynamo.utils.counters["recompiles"], dict(torch._dynamo.utils.counters["recompiles"])
    assert fused.epoch_losses == pytest.approx(eager.epoch_losses, rel=1e-3)


def test_the_default_captures_the_step_on_one_cuda_process_alone(corpus, monkeypatch):
    """captured_step "auto": a CUDA graph on one CUDA process where the step can be captured, else the plain step."""
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    assert Recipe().captured_step == "auto" and Recipe(precision="fp16").precision == "fp16"
    assert capture_mode(TrainerConfig(), cuda) == capture_mode(TrainerConfig(precision="tf32"), cuda) == "cuda_graph"
    for settings in (dict(precision="fp16"), dict(compile=True), dict(captured_step="off")):
        assert capture_mode(TrainerConfig(**settings), cuda) == "off", settings
    assert capture_mode(TrainerConfig(), cpu) == capture_mode(TrainerConfig(), torch.device("mps")) == "off"
    assert capture_mode(TrainerConfig(captured_step="compiled"), cpu) == "compiled", "asked for: captured() warns"
    plain = trainer_of(corpus)
    assert plain.batches.cut and plain.captured_gradient_step == plain.gradient_step
    assert not torch.is_tensor(plain.optimizer.param_groups[0]["lr"])
    monkeypatch.setattr(capture, "rank_and_world_size", lambda: (0, 2))
    assert capture_mode(TrainerConfig(), cuda) == "off", "torchrun's ranks step uncaptured"


def test_a_captured_step_has_batches_of_one_shape(corpus):
    assert Recipe(captured_step="cuda_graph", precision="fp16").precision == "fp16", "fp16 is captured when asked"
    trainer = trainer_of(corpus, captured_step="cuda_graph")
    shapes = {tuple(x.shape) for x, _ in trainer.batches.epoch(0)}
    assert len(corpus) % 8 and shapes == {(8, 63)}, "the short last batch grown to the batch size, at full width"


def streams_made(monkeypatch):
    """The CUDA streams made from now on, in a list that torch.cuda.Stream fills."""
    made, stream = [], torch.cuda.Stream

    def counted(*args, **kwargs):
        made.append(stream(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(torch.cuda, "Stream", counted)
    return made


CAPTURED_WAYS = [("auto", variant, "fp32") for variant in VARIANTS] + [
    ("compiled", "vanilla", "fp32"),
    ("fused_graph", "vanilla", "fp32"),
    ("cuda_graph", "vanilla", "fp16"),
]


@cuda_only
@pytest.mark.parametrize("way, variant, precision", CAPTURED_WAYS)
def test_the_captured_step_trains_as_the_eager_one(corpus, way, variant, precision, monkeypatch):
    """
    Without dropout (whose draws a graph makes anew): the replayed CUDA graph (the default on
    CUDA) trains as eager steps do, bit for bit, for every variant and for fp16 with its
    GradScaler; its warm-up steps share one side stream. The compiled steps (inductor's
    kernels) train within 1e-3 of the eager one.
    """
    settings = dict(dropout=0.0, variant=variant, precision=precision)
    eager = trainer_of(corpus, "cuda", fixed_shapes=True, captured_step="off", **settings)
    eager.train()
    streams = streams_made(monkeypatch)
    captured = trainer_of(corpus, "cuda", captured_step=way, **settings)
    captured.train()
    if way in ("compiled", "fused_graph"):
        assert captured.epoch_losses == pytest.approx(eager.epoch_losses, rel=1e-3)
        return
    assert captured.captured_gradient_step.graph is not None, "captured after its warm-up steps"
    assert len([s for s in streams if s is not torch.cuda.graph.default_capture_stream]) == 1, "one side stream"
    assert captured.epoch_losses == eager.epoch_losses
    assert torch.equal(params_of(captured), params_of(eager))


@cuda_only
def test_a_resumed_run_captures_its_step_after_the_restore(corpus, tmp_path):
    """Stopped after an epoch and resumed: the graph is captured from the restored state and ends as the whole run."""
    path = str(tmp_path / "c.ckpt")
    settings = dict(dropout=0.0, captured_step="cuda_graph")
    whole = trainer_of(corpus, "cuda", **settings)
    whole.train()
    trainer_of(corpus, "cuda", epochs=1, checkpoints=checkpoint.Checkpoints(path), **settings).train()
    kept = checkpoint.Checkpoints(path, resume_from=checkpoint.read(path))
    resumed = trainer_of(corpus, "cuda", checkpoints=kept, **settings)
    resumed.train()
    assert resumed.captured_gradient_step.graph is not None and resumed.step == whole.step
    assert resumed.epoch_losses == whole.epoch_losses
    assert torch.equal(params_of(resumed), params_of(whole))
