"""The loop's arithmetic as pure functions, checked against a step-by-step simulation."""

import math

import numpy as np
import pytest
from helpers import catch_config
from hypothesis import given
from hypothesis import strategies as st

from vecdqn import checkpoint
from vecdqn.config import Config
from vecdqn.metrics import MetricsLogger
from vecdqn.presets import PRESETS
from vecdqn.train_state import GAME_HISTORY, TrainState, target_syncs_due, updates_due
from vecdqn.trainer import Trainer


def simulate_updates(num_envs: int, learn_from: int, train_frequency: int, vector_steps: int) -> list[int]:
    """Updates per vector step when one update is due at each agent step s >= learn_from with
    (s - learn_from) % train_frequency == 0, counting agent steps one by one up to step + N."""
    out, done = [], 0
    for k in range(vector_steps):
        step = k * num_envs
        if step < learn_from:
            out.append(0)
            continue
        due = sum(1 for s in range(learn_from, step + num_envs + 1) if (s - learn_from) % train_frequency == 0)
        out.append(due - done)
        done = due
    return out


@given(num_envs=st.integers(1, 9), learn_from=st.integers(0, 60), train_frequency=st.integers(1, 7))
def test_updates_due_matches_a_step_by_step_count(num_envs, learn_from, train_frequency):
    expected = simulate_updates(num_envs, learn_from, train_frequency, 40)
    done, got = 0, []
    for k in range(40):
        due = updates_due(k * num_envs, num_envs, learn_from, train_frequency, done)
        got.append(due)
        done += due
    assert got == expected


def test_updates_due_is_zero_before_learning_starts():
    assert updates_due(0, 8, 80_000, 4, 0) == 0
    assert updates_due(79_992, 8, 80_000, 4, 0) == 0
    assert updates_due(80_000, 8, 80_000, 4, 0) == 3  # due at agent steps 80,000, 80,004 and 80,008
    assert updates_due(80_008, 8, 80_000, 4, 3) == 2  # 80,012 and 80,016


@given(num_envs=st.integers(1, 9), first=st.integers(0, 100), period=st.integers(1, 50))
def test_target_syncs_fire_once_per_period(num_envs, first, period):
    next_sync, total = first, 0
    for k in range(100):
        syncs, next_sync = target_syncs_due(k * num_envs, num_envs, next_sync, period)
        total += syncs
    end = 99 * num_envs + num_envs  # the last vector step reaches this agent step
    expected = 0 if end < first else (end - first) // period + 1
    assert total == expected and next_sync > end


def test_train_state_clocks_on_a_fresh_run():
    c = Config(**{**PRESETS["catch"], "eval_every": 3_000, "checkpoint_every": 0})
    s = TrainState.new(c)
    assert (s.step, s.updates, s.learn_from) == (0, 0, c.learning_starts)
    assert s.next_sync == c.learning_starts + c.target_update_frequency
    assert s.next_eval == 3_000 and s.next_checkpoint == math.inf and s.next_log == c.log_every


@pytest.mark.parametrize("with_replay", [True, False])
def test_train_state_resumed(with_replay):
    c = Config(**{**PRESETS["catch"], "eval_every": 3_000, "checkpoint_every": 500})
    saved = TrainState(step=4_100, updates=700, learn_from=1_000, next_sync=4_500, episodes=42)
    s = saved.resumed(c, with_replay=with_replay)
    assert s.step == 4_100 and s.updates == 700 and s.episodes == 42
    # The next multiples of the periods: the agent steps an uninterrupted run logs, evaluates and
    # checkpoints at.
    assert s.next_eval == 6_000 and s.next_checkpoint == 4_500 and s.next_log == 5_000
    if with_replay:  # learning continues where it was
        assert (s.learn_from, s.update_offset, s.next_sync) == (1_000, 0, 4_500)
    else:  # learning waits for learning_starts fresh transitions
        assert (s.learn_from, s.update_offset) == (4_100 + c.learning_starts, 700)
        assert s.next_sync == s.learn_from + c.target_update_frequency
    assert saved.step == 4_100 and saved.learn_from == 1_000  # the saved state is not changed


# -- the games: run state in TrainState, not in the logger -------------------------------------------
def test_record_game_counts_every_game_and_keeps_the_last_hundred():
    s = TrainState()
    assert math.isnan(s.mean_return)
    for k in range(150):
        s.record_game(k, 9 * k)
    assert s.episodes == 150 and len(s.episode_history) == GAME_HISTORY == 100
    assert s.episode_history[0] == (50.0, 450.0) and s.episode_history[-1] == (149.0, 1341.0)
    assert s.mean_return == pytest.approx(99.5)


def test_metrics_logger_holds_no_run_state(tmp_path):
    """The logger is given what it shows; writing a game changes none of its attributes."""
    logger = MetricsLogger(str(tmp_path), {}, 1_000, progress=False)
    before = dict(vars(logger))
    logger.episode(36, 1.0, 36)
    logger.progress(40, 1.0, 1)
    assert {name: value for name, value in vars(logger).items() if name != "_step"} == {
        name: value for name, value in before.items() if name != "_step"}
    assert not {"episodes", "returns", "lengths", "mean_return", "episode_history"} & set(dir(logger))
    logger.close()


def test_resume_restores_the_game_count_and_history_from_the_train_state(tmp_path):
    Trainer(catch_config(tmp_path, total_steps=300, run_name="run"), progress=False).run()
    state = checkpoint.load_training(tmp_path / "run" / "checkpoints" / "latest.pt")
    saved = state["train_state"]
    assert saved["episodes"] > 10 and len(saved["episode_history"]) == min(saved["episodes"], GAME_HISTORY)
    trainer = Trainer.from_checkpoint(tmp_path / "run", {"total_steps": 600}, progress=False)
    trainer.core.set_up(tuple(state["obs_shape"]), state["n_actions"])  # what Trainer.run does once envs are up
    try:
        assert trainer.core.state.episodes == saved["episodes"]
        history = trainer.core.state.episode_history
        assert [tuple(game) for game in history] == [tuple(g) for g in saved["episode_history"]]
        assert trainer.core.state.mean_return == pytest.approx(np.mean([r for r, _ in saved["episode_history"]]))
    finally:
        trainer.core.close()
