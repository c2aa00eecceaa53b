"""Catch (bsuite) rendered as an Atari-sized frame: rules, seeding, rendering, preprocessing."""

from __future__ import annotations

import cv2
import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import vecdqn  # noqa: F401  (registers vecdqn/Catch-v0)
from vecdqn.envs import make_env
from vecdqn.envs.catch import CELL_HEIGHT, CELL_WIDTH, COLUMNS, ROWS, Catch


def play(env: Catch, policy) -> tuple[list[float], list[bool]]:
    rewards, terminations = [], []
    terminated = False
    while not terminated:
        _, reward, terminated, truncated, _ = env.step(policy(env))
        assert truncated is False
        rewards.append(reward)
        terminations.append(terminated)
    return rewards, terminations


def follow_ball(env: Catch) -> int:
    return 1 + int(np.sign(env.ball_column - env.paddle_column))


def test_catch_scores_plus_one_in_nine_steps():
    env = Catch()
    for seed in range(10):
        env.reset(seed=seed)
        assert env.paddle_column == COLUMNS // 2 and env.ball_row == 0
        rewards, terminations = play(env, follow_ball)
        assert rewards == [0.0] * 8 + [1.0]
        assert terminations == [False] * 8 + [True]
        assert env.ball_row == ROWS - 1


def test_miss_scores_minus_one():
    env = Catch()
    seed = next(s for s in range(100) if _ball_column(s) != COLUMNS // 2)
    env.reset(seed=seed)
    rewards, _ = play(env, lambda e: 1)  # stay in the middle
    assert rewards == [0.0] * 8 + [-1.0]


def test_paddle_stops_at_the_walls():
    env = Catch()
    env.reset(seed=0)
    for _ in range(5):
        env.step(0)
    assert env.paddle_column == 0
    env.reset(seed=0)
    for _ in range(5):
        env.step(2)
    assert env.paddle_column == COLUMNS - 1


def _ball_column(seed: int) -> int:
    env = Catch()
    env.reset(seed=seed)
    return env.ball_column


def test_seeding_is_deterministic():
    def columns(seed):
        env = Catch()
        env.reset(seed=seed)
        out = [env.ball_column]
        for _ in range(20):
            env.reset()
            out.append(env.ball_column)
        return out

    assert columns(3) == columns(3)
    assert columns(3) != columns(4)
    assert set(columns(5)) == set(range(COLUMNS))  # every column occurs


def test_observation_and_render():
    env = Catch(render_mode="rgb_array")
    obs, _ = env.reset(seed=0)
    assert obs.shape == (210, 160, 3) and obs.dtype == np.uint8
    assert env.observation_space.contains(obs)
    np.testing.assert_array_equal(env.render(), obs)
    # Exactly the two blocks are lit.
    lit = obs.any(axis=2)
    assert lit.sum() == 2 * CELL_HEIGHT * CELL_WIDTH
    assert lit[0, env.ball_column * CELL_WIDTH]
    assert lit[(ROWS - 1) * CELL_HEIGHT, env.paddle_column * CELL_WIDTH]
    with pytest.raises(ValueError, match="render_mode"):
        Catch(render_mode="human")


def test_passes_gymnasium_env_checker():
    check_env(gym.make("vecdqn/Catch-v0").unwrapped, skip_render_check=False)


def test_step_after_end_raises():
    env = Catch()
    env.reset(seed=0)
    play(env, follow_ball)
    with pytest.raises(RuntimeError, match="reset"):
        env.step(1)


def test_make_env_preprocesses_catch_and_blocks_survive_resize():
    env = make_env("vecdqn/Catch-v0")
    obs, _ = env.reset(seed=2)
    assert obs.shape == (4, 84, 84) and obs.dtype == np.uint8
    for slot in obs[1:]:
        np.testing.assert_array_equal(slot, obs[0])
    catch = env.unwrapped
    assert isinstance(catch, Catch)
    obs, *_ = env.step(0)
    frame = obs[-1]
    expected = cv2.resize(
        cv2.cvtColor(catch._frame(), cv2.COLOR_RGB2GRAY), (84, 84), interpolation=cv2.INTER_AREA
    )
    np.testing.assert_array_equal(frame, expected)
    # The centre pixel of the ball's and the paddle's cells are bright; the background black.
    scale_y, scale_x = 84 / ROWS, 84 / COLUMNS

    def centre(row, column):
        return frame[int((row + 0.5) * scale_y), int((column + 0.5) * scale_x)]

    assert centre(catch.ball_row, catch.ball_column) == 255
    assert centre(ROWS - 1, catch.paddle_column) > 200
    assert (frame > 0).sum() < 0.1 * frame.size
    # Episode statistics come from RecordEpisodeStatistics, in env steps.
    terminated, info = False, {}
    while not terminated:
        _, _, terminated, _, info = env.step(1)
    assert info["episode"]["l"] == 9 and info["episode"]["r"] in (-1.0, 1.0)


def test_registered_on_import():
    assert "vecdqn/Catch-v0" in gym.registry
