"""Piecewise schedules as options (epsilon, beta, learning rate) and the labml preset."""

import json

import pytest
import torch
from helpers import catch_config
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from vecdqn.cli import parse_args
from vecdqn.config import Config
from vecdqn.schedules import Schedules, parse_pairs
from vecdqn.trainer import Trainer

# The labml experiment in agent steps (see the README's preset table).
LABML = {
    "env_id": "BreakoutNoFrameskip-v4", "num_envs": 8, "total_steps": 32_000_000, "buffer_size": 16_384,
    "per_alpha": 0.6, "per_eps": 1e-6, "learning_starts": 16_384, "train_frequency": 4, "batch_size": 32,
    "target_update_frequency": 8_000, "epsilon_schedule": "0:1.0,800000:0.1,16000000:0.01",
    "per_beta_start": 0.4, "per_beta_end": 1.0, "per_beta_steps": 32_000_000, "learning_rate": 1e-4,
    "adam_eps": 1e-8, "max_grad_norm": 0.5, "gamma": 0.99, "n_step": 1, "clip_rewards": False,
    "dueling": True, "double": True, "per": True,
}


def test_labml_preset_resolves_to_the_experiments_values(tmp_path):
    config = parse_args(["--preset", "labml", "--log-dir", str(tmp_path)])
    (tmp_path / "config.json").write_text(config.to_json())  # what a run writes into its folder
    saved = json.loads((tmp_path / "config.json").read_text())
    assert {key: saved[key] for key in LABML} == LABML
    s = Schedules.from_config(config)
    assert [s.epsilon(t) for t in (0, 800_000, 16_000_000, 40_000_000)] == [1.0, 0.1, 0.01, 0.01]
    assert s.beta(0) == 0.4 and s.beta(16_000_000) == pytest.approx(0.7) and s.beta(32_000_000) == 1.0
    assert s.learning_rate(0) == s.learning_rate(10**9) == 1e-4


def test_schedule_values_at_between_and_after_points():
    c = Config(epsilon_schedule="0:1.0,800000:0.1,16000000:0.01", per_beta_schedule="100:0.4,300:1.0",
               learning_rate_schedule="0:1e-3,1000:1e-4")
    s = Schedules.from_config(c)
    assert s.epsilon(400_000) == pytest.approx(0.55)
    assert s.epsilon(8_400_000) == pytest.approx(0.055)
    assert s.epsilon(10**9) == 0.01
    assert (s.beta(0), s.beta(100), s.beta(200), s.beta(300), s.beta(301)) == pytest.approx((0.4, 0.4, 0.7, 1.0, 1.0))
    assert s.learning_rate(500) == pytest.approx(5.5e-4) and s.learning_rate(5_000) == 1e-4


def test_two_point_options_are_a_two_point_schedule():
    c = Config(epsilon_start=0.9, epsilon_end=0.1, epsilon_decay_steps=100, per_beta_start=0.5, per_beta_steps=10)
    assert c.schedule_points("epsilon") == [(0, 0.9), (100, 0.1)]
    assert c.schedule_points("per_beta") == [(0, 0.5), (10, 1.0)]
    assert c.schedule_points("learning_rate") == [(0, c.learning_rate)]
    assert Config(per=False).schedule_points("per_beta") == [(0, 0.0)]


@pytest.mark.parametrize("argv, message", [
    (["--epsilon-schedule", "0:1.0,100:0.1", "--epsilon-end", "0.05"], "--epsilon-schedule and --epsilon-end"),
    (["--learning-rate-schedule", "0:1e-3", "--learning-rate", "1e-4"], "--learning-rate-schedule and"),
    (["--per-beta-schedule", "0:0.4", "--per-beta-steps", "10"], "--per-beta-schedule and --per-beta-steps"),
    (["--epsilon-schedule", "0:1.0,100"], "'100' is not a 'step:value' pair"),
    (["--epsilon-schedule", "0:1.0,١٠٠:0.1"], "'١٠٠:0.1' is not a 'step:value' pair"),  # digits 0-9 only
    (["--epsilon-schedule", "100:1.0,50:0.1"], "must increase strictly"),
    (["--epsilon-schedule", "0:1.5"], "must be in [0, 1]"),
    (["--learning-rate-schedule", "0:0"], "must be positive"),
    (["--per-beta-schedule=-5:0.4"], "negative"),
])
def test_bad_schedules_are_one_line_errors(argv, message, capsys):
    with pytest.raises(SystemExit) as stop:
        parse_args(argv)
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_an_explicit_shorthand_drops_the_presets_schedule():
    c = parse_args(["--preset", "labml", "--epsilon-end", "0.05"])
    assert c.epsilon_schedule == "" and c.schedule_points("epsilon")[-1] == (250_000, 0.05)


def test_parse_pairs():
    assert parse_pairs("0:1, 10:0.5") == [(0, 1.0), (10, 0.5)]
    with pytest.raises(ValueError, match="finite"):
        parse_pairs("0:nan")


def test_training_logs_and_applies_the_scheduled_values(tmp_path):
    config = catch_config(tmp_path, total_steps=600, run_name="run", log_every=100,
                          learning_rate_schedule="0:1e-3,400:1e-4", epsilon_schedule="0:1.0,200:0.5,400:0.05",
                          per_beta_schedule="0:0.4,600:1.0")
    trainer = Trainer(config, progress=False)
    trainer.run()
    acc = EventAccumulator(str(tmp_path / "run"), size_guidance={"scalars": 0})
    acc.Reload()
    eps = {e.step: e.value for e in acc.Scalars("charts/epsilon")}
    beta = {e.step: e.value for e in acc.Scalars("charts/beta")}
    lr = {e.step: e.value for e in acc.Scalars("charts/learning_rate")}
    assert eps[100] == pytest.approx(0.75) and eps[300] == pytest.approx(0.275) and eps[600] == pytest.approx(0.05)
    assert beta[300] == pytest.approx(0.7)
    # The schedule's value at the logged step (the optimizer's is set before each vector step's updates).
    assert lr[200] == pytest.approx(1e-3 - 0.9e-3 * 200 / 400, rel=1e-5)
    assert lr[600] == pytest.approx(1e-4)
    assert trainer.core.learner.agent.optimizer.param_groups[0]["lr"] == pytest.approx(1e-4)
    assert torch.isfinite(next(trainer.core.learner.agent.online.parameters())).all()
