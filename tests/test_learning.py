"""Does it learn? The unchanged trainer solves pixel Catch on a CPU; a broken learner does not.

Catch (bsuite-style, vecdqn/Catch-v0) goes through the same path as an Atari run:
GrayscaleResize + FrameStack wrappers, AsyncVectorEnv workers, prioritized replay, the
double-DQN learner and TensorBoard. Random play scores about -0.6.
"""

from dataclasses import replace

import numpy as np
import pytest
import torch

import vecdqn.dqn.agent
from vecdqn.cli import parse_args
from vecdqn.envs import make_env
from vecdqn.evaluation import evaluate
from vecdqn.trainer import Trainer


def preset(tmp_path, *extra):
    return parse_args(["--preset", "catch", "--log-dir", str(tmp_path), "--seed", "1", *extra])


def learned(trainer, episodes=100):
    """What having learned Catch means: the greedy policy catches the ball (mean return >= 0.8)
    *and* the Q-values are returns Catch can pay. Every game pays exactly +1 or -1, so the best
    Q-value of a start state must lie in [-1, 1] (up to function-approximation error); a learner
    that bootstraps through terminations (a classic bug) still plays well but predicts ~2.

    Returns ``(ok, mean_return, mean_start_q)``.
    """
    result = evaluate(trainer.core.learner.agent.online, trainer.config, episodes=episodes, epsilon=0.0, seed=12345,
                      device="cpu")
    assert len(result.returns) == episodes
    env = make_env("vecdqn/Catch-v0", screen_size=trainer.config.screen_size)
    starts = np.stack([env.reset(seed=1000 + i)[0] for i in range(20)])
    network = trainer.core.learner.agent.online
    network.eval()  # as evaluation plays (noisy layers: their mean weights)
    with torch.no_grad():
        start_q = network(torch.from_numpy(starts)).max(dim=1).values.mean().item()
    network.train()
    mean_return = float(np.mean(result.returns))
    return mean_return >= 0.8 and abs(start_q) <= 1.25, mean_return, start_q


# The preset's first 6,000 of its 20,000 agent steps: its greedy policy catches every ball from
# ~4,000 on (seed 1, checkpoints every 1,000 evaluated as `learned` does), while the training games,
# still at epsilon ~0.4, average well below 0.8; so `learned` (greedy) is the bar, in 30% of the run.
LEARNING_STEPS = 6_000


def test_catch_preset_learns(tmp_path):
    trainer = Trainer(replace(preset(tmp_path), total_steps=LEARNING_STEPS), progress=False, handle_signals=False)
    summary = trainer.run()
    assert summary["steps"] == LEARNING_STEPS
    ok, mean_return, start_q = learned(trainer)
    assert ok, (mean_return, start_q)


# The fault-injection runs (here and for PQN and Rainbow below) are slow-marked: each repeats a
# learning test's whole run, and together they would take CI near its 10 minutes.
@pytest.fixture(params=[pytest.param("flipped_target_sign", marks=pytest.mark.slow),
                        pytest.param("ignored_termination", marks=pytest.mark.slow)])
def broken_learner(request, monkeypatch):
    """Inject a fault into the TD target that the learning test must catch."""
    correct = vecdqn.dqn.agent.double_dqn_target

    def flipped(rewards, discounts, next_q_online, next_q_target, double=True):
        return -correct(rewards, discounts, next_q_online, next_q_target, double)

    def ignores_termination(rewards, discounts, next_q_online, next_q_target, double=True):
        # Every transition bootstraps, as if `terminated` were always False (gamma of the preset).
        return correct(rewards, torch.full_like(discounts, 0.99), next_q_online, next_q_target, double)

    fault = {"flipped_target_sign": flipped, "ignored_termination": ignores_termination}[request.param]
    monkeypatch.setattr(vecdqn.dqn.agent, "double_dqn_target", fault)
    return request.param


# How long each faulty learner runs. A flipped sign fails at once; a learner that ignores
# terminations still plays well and shows itself only in its Q-values, which reach ~2 late in the
# run: it runs the preset's first 12,000 agent steps, where the correct learner passes too.
FAULT_STEPS = {"flipped_target_sign": LEARNING_STEPS, "ignored_termination": 12_000}


def test_broken_learner_does_not_learn(tmp_path, broken_learner):
    """The run of `test_catch_preset_learns` with a wrong TD target does not learn."""
    config = replace(preset(tmp_path), total_steps=FAULT_STEPS[broken_learner])
    trainer = Trainer(config, progress=False, handle_signals=False)
    trainer.run()
    ok, mean_return, start_q = learned(trainer, episodes=50)
    assert not ok, (broken_learner, mean_return, start_q)


@pytest.mark.slow
def test_catch_preset_learns_with_compile(tmp_path):
    """``--compile`` (torch.compile of the online network) is offered because the same learning
    test passes with it. Slow (compilation on CPU needs a C++ compiler and ~1-2 min): not in CI."""
    trainer = Trainer(preset(tmp_path, "--compile"), progress=False, handle_signals=False)
    assert trainer.config.compile
    summary = trainer.run()
    assert summary["mean_return"] >= 0.8, summary
    ok, mean_return, start_q = learned(trainer)
    assert ok, (mean_return, start_q)


def pqn_preset(tmp_path, *extra):
    return parse_args(["--preset", "catch-pqn", "--log-dir", str(tmp_path), "--seed", "1", *extra])


# The catch-pqn preset's first 8,000 of its 12,000 agent steps: epsilon reaches 0.01 at 5,000 and
# the greedy policy catches every ball from ~6,000 on (seed 1, checkpoints every 1,000).
PQN_LEARNING_STEPS = 8_000


def test_catch_pqn_preset_learns(tmp_path):
    """PQN (``--algo pqn``) through the same path: the same bar for having learned."""
    trainer = Trainer(replace(pqn_preset(tmp_path), total_steps=PQN_LEARNING_STEPS), progress=False,
                      handle_signals=False)
    summary = trainer.run()
    assert summary["mean_return"] >= 0.8, summary
    ok, mean_return, start_q = learned(trainer)
    assert ok, (mean_return, start_q)


@pytest.mark.slow
def test_pqn_with_a_flipped_return_sign_does_not_learn(tmp_path, monkeypatch):
    """The fault-injection teeth of the PQN test: λ-returns of the wrong sign must fail it."""
    import vecdqn.pqn.learner

    correct = vecdqn.pqn.learner.lambda_returns
    monkeypatch.setattr(vecdqn.pqn.learner, "lambda_returns", lambda *args: -correct(*args))
    trainer = Trainer(replace(pqn_preset(tmp_path), total_steps=PQN_LEARNING_STEPS), progress=False,
                      handle_signals=False)
    trainer.run()
    ok, mean_return, start_q = learned(trainer, episodes=50)
    assert not ok, (mean_return, start_q)


def rainbow_preset(tmp_path, *extra):
    return parse_args(["--preset", "catch-rainbow", "--log-dir", str(tmp_path), "--seed", "1", *extra])


# The catch-rainbow preset's first 10,000 of its 20,000 agent steps: seed 1's greedy policy (20 games
# every 2,000 agent steps) catches every ball from 8,000 on; with --no-noisy (ε-greedy) from 6,000.
RAINBOW_LEARNING_STEPS = 10_000


def test_catch_rainbow_preset_learns(tmp_path):
    """Rainbow (``--algo rainbow``: C51 distributions, noisy nets, on DQN's replay) through the same
    path: the same bar for having learned."""
    trainer = Trainer(replace(rainbow_preset(tmp_path), total_steps=RAINBOW_LEARNING_STEPS), progress=False,
                      handle_signals=False)
    trainer.run()
    ok, mean_return, start_q = learned(trainer)
    assert ok, (mean_return, start_q)


@pytest.mark.slow
def test_rainbow_with_a_mirrored_target_does_not_learn(tmp_path, monkeypatch):
    """The fault-injection teeth of the Rainbow test: the projected target of −(r + γ Z'), the
    next distribution mirrored on the symmetric support and the reward negated, must fail it."""
    import vecdqn.rainbow.loss

    correct = vecdqn.rainbow.loss.categorical_projection

    def mirrored(next_probs, rewards, discounts, support):
        return correct(next_probs.flip(-1), -rewards, discounts, support)

    monkeypatch.setattr(vecdqn.rainbow.loss, "categorical_projection", mirrored)
    trainer = Trainer(replace(rainbow_preset(tmp_path), total_steps=RAINBOW_LEARNING_STEPS), progress=False,
                      handle_signals=False)
    trainer.run()
    ok, mean_return, start_q = learned(trainer, episodes=50)
    assert not ok, (mean_return, start_q)
