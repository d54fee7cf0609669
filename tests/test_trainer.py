"""The shared training loop: optimizer groups, the token-counted schedule, logging and learning."""

import math

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from torch.utils.tensorboard import SummaryWriter

from dataset import CharCorruptionDataset, NameDataset
from model import GPT, GPTConfig
from trainer import Trainer, TrainerConfig, lr_multiplier, parameter_groups


def test_trainer_config_defaults_and_kwargs():
    config = TrainerConfig(max_epochs=3, learning_rate=1e-3, anything="kept")
    assert (config.max_epochs, config.learning_rate, config.anything) == (3, 1e-3, "kept")
    assert config.betas == (0.9, 0.95) and config.grad_norm_clip == 1.0 and config.weight_decay == 0.1
    assert config.writer is None and config.ckpt_path is None and config.num_workers == 0


def test_lr_multiplier_warms_up_then_decays_to_a_tenth():
    warmup, final = 1000, 11000
    assert lr_multiplier(0, warmup, final) == 0
    assert lr_multiplier(500, warmup, final) == pytest.approx(0.5)
    assert lr_multiplier(1000, warmup, final) == pytest.approx(1.0)
    assert lr_multiplier(6000, warmup, final) == pytest.approx(0.5)  # cosine midpoint
    assert lr_multiplier(3500, warmup, final) == pytest.approx(0.5 * (1 + math.cos(math.pi / 4)))
    assert lr_multiplier(11000, warmup, final) == pytest.approx(0.1)
    assert lr_multiplier(25000, warmup, final) == pytest.approx(0.1), "stays at 10% after final_tokens"


@pytest.mark.parametrize("variant", ["vanilla", "perceiver", "synthesizer"])
def test_weight_decay_only_on_matmul_weights(variant):
    config = GPTConfig(20, 16, n_layer=3, n_head=2, n_embd=8, perceiver=variant == "perceiver",
                       bottleneck_dim=4, synthesizer=variant == "synthesizer")
    model = GPT(config)
    decay, no_decay = parameter_groups(model, 0.1)
    names = {id(p): n for n, p in model.named_parameters()}
    decayed = {names[id(p)] for p in decay["params"]}
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    linear_weights = {f"{n}.weight" for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    synth = {n for n in names.values() if n.endswith("attn.w2")}
    assert decayed == linear_weights | synth
    assert {"tok_emb.weight", "pos_emb", "ln_f.weight"} <= {names[id(p)] for p in no_decay["params"]}
    assert len(decay["params"]) + len(no_decay["params"]) == len(list(model.parameters()))


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
    config = TrainerConfig(max_epochs=6, batch_size=16, learning_rate=3e-3, lr_decay=True,
                           warmup_tokens=16 * 63 * 2, final_tokens=len(ds) * 63 * 5,
                           writer=writer, ckpt_path=str(tmp_path / "ckpt.params"), device="cpu")
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
    tokens, expected = 0, []
    for step in range(trainer.step):
        tokens += (16 if (step + 1) % steps_per_epoch else len(ds) - 16 * (steps_per_epoch - 1)) * 63
        expected.append(3e-3 * lr_multiplier(tokens, config.warmup_tokens, config.final_tokens))
    assert lrs == pytest.approx(expected, rel=1e-5)
    assert lrs[-1] == pytest.approx(3e-4)

    saved = torch.load(tmp_path / "ckpt.params", weights_only=True)
    assert all(torch.equal(saved[k], v) for k, v in model.state_dict().items())


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
