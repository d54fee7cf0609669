"""
The CUDA branches, on a GPU only (skipped without one), with the default step (a CUDA graph,
but with fp16 or torch.compile: capture.capture_mode): each precision with its GradScaler,
torch.compile, DataLoader workers with pinned memory and an exact resume, the checkpoint's
RNG of the training GPU, and the KV-cache decoding against the CPU's.
"""

import pytest
import torch

from conftest import corpus_of, small_gpt
from dataset import NameDataset
from factgpt.readout.decoding import predict_answers
from factgpt.training import checkpoint
from trainer import Trainer, TrainerConfig
from utils import set_seed

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.fixture(scope="module")
def data(tiny_world):
    pre = corpus_of(tiny_world["wiki.txt"], 64)
    with open(tiny_world["train.tsv"], encoding="utf-8") as f:
        return pre, NameDataset(pre, f.read())


def small_model(vocab_size):
    """Without dropout, whose draws differ between eager and compiled code."""
    set_seed(0)
    return small_gpt(vocab_size, 64, n_embd=32, dropout=0)


def trained(dataset, vocab_size, epochs=2, **settings):
    model = small_model(vocab_size)
    trainer = Trainer(model, dataset, None, TrainerConfig(max_epochs=epochs, batch_size=16, device="cuda", **settings))
    trainer.train()
    return trainer


@pytest.mark.parametrize("precision", ["fp32", "tf32", "bf16", "fp16"])
def test_each_precision_trains_on_cuda(precision, data):
    trainer = trained(data[0], data[0].vocab_size, precision=precision)
    assert all(torch.isfinite(torch.tensor(trainer.epoch_losses))) and trainer.epoch_losses[1] < trainer.epoch_losses[0]
    assert trainer.scaler.is_enabled() == (precision == "fp16")


def test_compile_trains_like_eager_on_cuda(data):
    pre = data[0]
    eager, compiled = trained(pre, pre.vocab_size), trained(pre, pre.vocab_size, compile=True)
    assert compiled.epoch_losses == pytest.approx(eager.epoch_losses, rel=1e-3)


def test_workers_with_pinned_memory_resume_exactly_on_cuda(data, tmp_path):
    """A run stopped mid-epoch and resumed with two workers: the uninterrupted run's steps and losses."""
    pre = data[0]
    settings = dict(max_epochs=3, batch_size=16, device="cuda", num_workers=2, data_seed=1, lr_decay=True)
    settings.update(warmup_tokens=100, final_tokens=10_000)
    path = str(tmp_path / "c.ckpt")
    whole = Trainer(small_model(pre.vocab_size), pre, None, TrainerConfig(**settings))
    whole.train()

    every_step = checkpoint.Checkpoints(path, checkpoint_minutes=1e-9)
    first = Trainer(small_model(pre.vocab_size), pre, None, TrainerConfig(**settings), checkpoints=every_step)
    save = first.save_checkpoint

    def save_then_stop():
        save()
        if first.step == 8:
            raise KeyboardInterrupt

    first.save_checkpoint = save_then_stop
    with pytest.raises(KeyboardInterrupt):
        first.train()
    saved = checkpoint.read(path)
    assert saved["cuda_random"].dim() == 1  # the training GPU's generator alone
    kept = checkpoint.Checkpoints(path, resume_from=saved)
    resumed = Trainer(small_model(pre.vocab_size), pre, None, TrainerConfig(**settings), checkpoints=kept)
    resumed.train()
    assert resumed.step == whole.step and resumed.epoch_losses == pytest.approx(whole.epoch_losses, rel=1e-5)


def test_cached_decoding_on_cuda_answers_as_on_the_cpu(data):
    pre, names = data
    trainer = trained(names, pre.vocab_size, epochs=3)
    questions = [question for question, _ in names.data[:20]]
    model = trainer.model.eval()
    on_gpu = predict_answers(model, questions, pre, torch.device("cuda"))
    on_cpu = predict_answers(model.cpu(), questions, pre, torch.device("cpu"))
    assert [a.text for a in on_gpu] == [a.text for a in on_cpu]
