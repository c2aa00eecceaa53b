"""Wrapper tests, three ways: a scripted fake ALE whose screen, rewards and lives are
known per frame; the real ALE frame counter; equality with gymnasium's AtariPreprocessing on ROMs.
"""

from __future__ import annotations

from collections import deque

import cv2
import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation, RecordEpisodeStatistics
from hypothesis import given, settings
from hypothesis import strategies as st

from vecdqn.envs import ale_direct, make_env
from vecdqn.envs.wrappers import (
    EpisodicLife,
    FireReset,
    FrameStack,
    GrayscaleResize,
    MaxAndSkip,
    NoopReset,
)

SCREEN = (210, 160)
# A per-pixel pattern so that the max of two frames differs from both frames somewhere.
_PATTERN = (np.add.outer(np.arange(SCREEN[0]) * 7, np.arange(SCREEN[1]) * 13) % 256).astype(
    np.int64
)


def fake_screen(frame: int, game: int = 0) -> np.ndarray:
    """The fake ALE's screen after ``frame`` frames of game number ``game``: (210, 160) uint8."""
    return ((_PATTERN + 97 * frame + 59 * game) % 256).astype(np.uint8)


class FakeAle(gym.Env):
    """A scripted ALE-like env: one frame per step, everything known per frame.

    - screen after frame ``f`` of game ``g``: ``fake_screen(f, g)`` (``f = 0`` at reset);
    - reward of frame ``f``: ``f`` (so sums identify exactly which frames were played);
    - lives: ``lives`` at reset, one fewer at each frame in ``life_loss_frames``;
    - the game is over (terminated) at ``game_over_frame``, truncated at ``max_frames``.

    ``log`` records ``(game, frame, action)`` for every step, ``games`` counts real resets.
    """

    metadata = {"render_modes": []}

    def __init__(
        self,
        *,
        lives: int = 3,
        life_loss_frames: tuple[int, ...] = (),
        game_over_frame: int = 10_000,
        max_frames: int | None = None,
        actions: tuple[str, ...] = ("NOOP", "FIRE", "RIGHT", "LEFT"),
    ):
        self.observation_space = spaces.Box(0, 255, SCREEN, dtype=np.uint8)
        self.action_space = spaces.Discrete(len(actions))
        self.start_lives = lives
        self.life_loss_frames = life_loss_frames
        self.game_over_frame = game_over_frame
        self.max_frames = max_frames
        self.actions = list(actions)
        self.games = 0
        self.frame = 0
        self.lives = lives
        self.log: list[tuple[int, int, int]] = []
        # One screen buffer reused every step, as an emulator would: wrappers must copy.
        self._screen = np.zeros(SCREEN, dtype=np.uint8)

    def get_action_meanings(self) -> list[str]:
        return self.actions

    def _info(self) -> dict:
        return {"lives": self.lives, "episode_frame_number": self.frame}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.games += 1
        self.frame = 0
        self.lives = self.start_lives
        self._screen[:] = fake_screen(0, self.games)
        return self._screen, self._info()

    def step(self, action):
        self.frame += 1
        self.log.append((self.games, self.frame, int(action)))
        if self.frame in self.life_loss_frames:
            self.lives -= 1
        self._screen[:] = fake_screen(self.frame, self.games)
        terminated = self.frame >= self.game_over_frame
        truncated = self.max_frames is not None and self.frame >= self.max_frames
        return self._screen, float(self.frame), terminated, truncated, self._info()


def pooled(f: int, game: int = 1) -> np.ndarray:
    """max(screen f-1, screen f): the observation of a step whose last two frames are f-1, f."""
    return np.maximum(fake_screen(f - 1, game), fake_screen(f, game))


def frames_of_game(fake: FakeAle, game: int) -> list[tuple[int, int]]:
    return [(frame, action) for g, frame, action in fake.log if g == game]


# ---------------------------------------------------------------------------------------------
# MaxAndSkip on the fake ALE


def test_max_and_skip_sums_rewards_and_pools_last_two_frames():
    fake = FakeAle()
    env = MaxAndSkip(fake, skip=4)
    obs, _ = env.reset(seed=0)
    np.testing.assert_array_equal(obs, fake_screen(0, 1))
    obs, reward, terminated, truncated, info = env.step(2)
    np.testing.assert_array_equal(obs, pooled(4))  # frames 3 and 4, not 1 or 2
    assert not np.array_equal(obs, fake_screen(4, 1))  # the max is a real max here
    assert reward == 1 + 2 + 3 + 4
    assert (terminated, truncated, info["episode_frame_number"]) == (False, False, 4)
    first = obs
    obs, reward, *_ = env.step(3)
    np.testing.assert_array_equal(obs, pooled(8))
    assert reward == 5 + 6 + 7 + 8
    np.testing.assert_array_equal(first, pooled(4))  # an earlier observation is not overwritten
    assert [a for _, _, a in fake.log] == [2] * 4 + [3] * 4


@pytest.mark.parametrize("end", ["terminated", "truncated"])
@pytest.mark.parametrize("last_frame", [5, 6, 7, 8])
def test_max_and_skip_episode_end_inside_skip(end, last_frame):
    kwargs = {"game_over_frame": last_frame} if end == "terminated" else {"max_frames": last_frame}
    fake = FakeAle(**kwargs)
    env = MaxAndSkip(fake, skip=4)
    env.reset(seed=0)
    env.step(0)
    obs, reward, terminated, truncated, _ = env.step(0)
    assert (terminated, truncated) == (end == "terminated", end == "truncated")
    assert reward == sum(range(5, last_frame + 1))
    assert fake.frame == last_frame  # stopped early: no frame played past the end
    # The max of the frames of THIS call only; one frame produced -> that frame.
    expected = fake_screen(5, 1) if last_frame == 5 else pooled(last_frame)
    np.testing.assert_array_equal(obs, expected)


@settings(max_examples=60, deadline=None)
@given(
    skip=st.integers(1, 6),
    game_over=st.integers(1, 25),
    actions=st.lists(st.integers(0, 3), min_size=1, max_size=8),
)
def test_max_and_skip_matches_naive_oracle(skip, game_over, actions):
    env = MaxAndSkip(FakeAle(game_over_frame=game_over), skip=skip)
    env.reset(seed=0)
    frame = 0
    for action in actions:
        played = list(range(frame + 1, min(frame + skip, game_over) + 1))
        frame = played[-1]
        obs, reward, terminated, _, _ = env.step(action)
        screens = [fake_screen(f, 1) for f in played[-2:]]
        np.testing.assert_array_equal(obs, np.maximum.reduce(screens))
        assert reward == sum(played)
        assert terminated == (frame >= game_over)
        if terminated:
            break


def test_max_and_skip_rejects_bad_skip():
    with pytest.raises(ValueError, match="skip=0"):
        MaxAndSkip(FakeAle(), skip=0)


# ---------------------------------------------------------------------------------------------
# EpisodicLife (over MaxAndSkip and RecordEpisodeStatistics, as in make_env)


def life_env(**fake_kwargs) -> tuple[FakeAle, gym.Env]:
    fake = FakeAle(**fake_kwargs)
    return fake, EpisodicLife(MaxAndSkip(RecordEpisodeStatistics(fake), skip=4))


def test_life_loss_terminates_and_reset_continues_the_same_game():
    fake, env = life_env(lives=3, life_loss_frames=(10, 21), game_over_frame=30)
    _, info = env.reset(seed=0)
    assert info["lives"] == 3
    for _ in range(2):  # frames 1..8
        assert env.step(2)[2] is False
    obs, _, terminated, truncated, info = env.step(2)  # frames 9..12, life lost at 10
    assert (terminated, truncated, info["lives"]) == (True, False, 2)
    assert "episode" not in info  # a life is not a game

    obs, info = env.reset()
    assert fake.games == 1  # no real reset
    assert info["lives"] == 2
    assert frames_of_game(fake, 1)[-4:] == [(13, 0), (14, 0), (15, 0), (16, 0)]  # one no-op step
    np.testing.assert_array_equal(obs, pooled(16))

    env.step(2)  # 17..20
    terminated = env.step(2)[2]  # 21..24, life lost at 21
    assert terminated
    env.reset()  # no-op 25..28
    assert fake.games == 1
    obs, reward, terminated, truncated, info = env.step(2)  # 29..30, game over at 30
    assert (terminated, truncated, info["lives"], reward) == (True, False, 1, 29 + 30)
    # The whole game's return and length, every frame counted (no-ops included).
    assert info["episode"]["r"] == sum(range(1, 31))
    assert info["episode"]["l"] == 30

    obs, info = env.reset()
    assert fake.games == 2  # the game was over: real reset
    assert info["lives"] == 3
    np.testing.assert_array_equal(obs, fake_screen(0, 2))


def test_continuing_noop_that_ends_the_game_resets_for_real():
    fake, env = life_env(lives=1, life_loss_frames=(10,), game_over_frame=14)
    env.reset(seed=0)
    env.step(1)
    env.step(1)
    _, _, terminated, _, info = env.step(1)  # 9..12: the last life is lost at 10
    assert terminated and info["lives"] == 0
    obs, info = env.reset()  # the no-op plays 13, 14: game over
    assert fake.games == 2
    assert frames_of_game(fake, 1)[-2:] == [(13, 0), (14, 0)]
    assert info["lives"] == 1
    np.testing.assert_array_equal(obs, fake_screen(0, 2))
    # The ended game's statistics are not dropped: carried in the reset's info.
    assert info["episode"]["r"] == sum(range(1, 15))
    assert info["episode"]["l"] == 14


@pytest.mark.parametrize("life_lost_too", [False, True])
def test_truncation_ends_the_game_and_is_not_termination(life_lost_too):
    losses = (11,) if life_lost_too else ()
    fake, env = life_env(lives=3, life_loss_frames=losses, max_frames=12)
    env.reset(seed=0)
    env.step(0)
    env.step(0)
    _, _, terminated, truncated, info = env.step(0)  # frames 9..12: truncated at 12
    assert truncated
    assert terminated is life_lost_too  # truncation alone never becomes termination
    assert info["episode"]["l"] == 12
    env.reset()
    assert fake.games == 2  # truncation ends the game: the reset is real


def test_seeded_reset_is_always_real():
    fake, env = life_env(lives=3, life_loss_frames=(2,))
    env.reset(seed=0)
    assert env.step(0)[2]  # life lost
    env.reset(seed=1)
    assert fake.games == 2


# ---------------------------------------------------------------------------------------------
# NoopReset, FireReset, FrameStack, GrayscaleResize on the fake ALE


def test_noop_reset_draws_count_from_env_np_random():
    for seed in range(5):
        fake = FakeAle()
        env = NoopReset(fake, noop_max=30)
        obs, info = env.reset(seed=seed)
        oracle = FakeAle()
        oracle.reset(seed=seed)
        expected = int(oracle.np_random.integers(1, 31))
        assert [action for _, _, action in fake.log] == [0] * expected
        assert info["episode_frame_number"] == expected
        np.testing.assert_array_equal(obs, fake_screen(expected, 1))


def test_noop_reset_zero_takes_no_step():
    fake = FakeAle()
    env = NoopReset(fake, noop_max=0)
    env.reset(seed=0)
    assert fake.log == []


def test_noop_that_ends_the_game_resets_again():
    seed = next(s for s in range(100) if _noop_count(s) >= 3)
    fake = FakeAle(game_over_frame=2)
    env = NoopReset(fake, noop_max=30)
    env.reset(seed=seed)
    assert fake.games >= 2
    assert fake.frame < 2  # the game returned is running


def _noop_count(seed: int) -> int:
    fake = FakeAle()
    fake.reset(seed=seed)
    return int(fake.np_random.integers(1, 31))


def test_noop_reset_rejects_bad_arguments():
    with pytest.raises(ValueError, match="noop_max=-1"):
        NoopReset(FakeAle(), noop_max=-1)
    with pytest.raises(ValueError, match="NOOP"):
        NoopReset(FakeAle(actions=("FIRE", "NOOP")), noop_max=30)


def test_fire_reset_presses_fire_after_every_reset():
    fake = FakeAle(lives=3, life_loss_frames=(10,))
    env = FireReset(EpisodicLife(MaxAndSkip(fake, skip=4)))
    env.reset(seed=0)
    assert frames_of_game(fake, 1) == [(f, 1) for f in range(1, 5)]  # FIRE for one agent step
    env.step(2)
    assert env.step(2)[2]  # 9..12: life lost
    env.reset()  # continue: one no-op step, then FIRE again (Breakout serves on FIRE)
    assert [a for _, a in frames_of_game(fake, 1)[12:]] == [0] * 4 + [1] * 4


def test_fire_that_ends_the_episode_resets_again():
    fake = FakeAle(lives=3, life_loss_frames=(3,))
    env = FireReset(EpisodicLife(MaxAndSkip(fake, skip=4)))
    _, info = env.reset(seed=0)
    # FIRE lost a life (frames 1..4), so: no-op step 5..8 and FIRE again 9..12.
    assert [a for _, a in frames_of_game(fake, 1)] == [1] * 4 + [0] * 4 + [1] * 4
    assert info["lives"] == 2


def test_fire_reset_needs_fire():
    with pytest.raises(ValueError, match="FIRE"):
        FireReset(FakeAle(actions=("NOOP", "UP", "DOWN")))


def test_frame_stack_fills_with_first_frame_and_shifts_oldest_first():
    env = FrameStack(GrayscaleResize(MaxAndSkip(FakeAle(), skip=1), 84), 4)
    assert env.observation_space == spaces.Box(0, 255, (4, 84, 84), np.uint8)
    obs, _ = env.reset(seed=0)
    small = [cv2.resize(fake_screen(f, 1), (84, 84), interpolation=cv2.INTER_AREA)
             for f in range(6)]
    assert obs.shape == (4, 84, 84) and obs.dtype == np.uint8
    for slot in obs:
        np.testing.assert_array_equal(slot, small[0])
    kept = [obs]
    for f in range(1, 6):
        obs = env.step(0)[0]
        kept.append(obs)
        expected = [small[max(k, 0)] for k in range(f - 3, f + 1)]
        np.testing.assert_array_equal(obs, np.stack(expected))
    # Returned stacks are copies: the first one still holds the reset frame.
    np.testing.assert_array_equal(kept[0][3], small[0])


class _RgbEnv(gym.Env):
    observation_space = spaces.Box(0, 255, (210, 160, 3), dtype=np.uint8)
    action_space = spaces.Discrete(2)

    def __init__(self):
        self.frame = np.random.default_rng(0).integers(0, 256, (210, 160, 3), dtype=np.uint8)

    def reset(self, *, seed=None, options=None):
        return self.frame, {}

    def step(self, action):
        return self.frame, 0.0, False, False, {}


def test_grayscale_resize_converts_rgb_then_resizes_with_inter_area():
    env = GrayscaleResize(_RgbEnv(), 84)
    obs, _ = env.reset()
    gray = cv2.cvtColor(env.unwrapped.frame, cv2.COLOR_RGB2GRAY)
    np.testing.assert_array_equal(obs, cv2.resize(gray, (84, 84), interpolation=cv2.INTER_AREA))
    assert env.observation_space == spaces.Box(0, 255, (84, 84), np.uint8)
    with pytest.raises(ValueError, match="screen_size=0"):
        GrayscaleResize(_RgbEnv(), 0)


# ---------------------------------------------------------------------------------------------
# Real ROMs


def _raw_env(env_id: str, max_frames: int) -> gym.Env:
    return gym.make(
        env_id,
        obs_type="grayscale",
        frameskip=1,
        repeat_action_probability=0.0,
        max_num_frames_per_episode=max_frames,
    )


def _resize(screen: np.ndarray) -> np.ndarray:
    return cv2.resize(screen, (84, 84), interpolation=cv2.INTER_AREA)


class _RawOracle:
    """Skip and pool computed by hand on a raw frameskip=1 env: the ground truth per step."""

    def __init__(self, env_id: str, max_frames: int):
        self.env = _raw_env(env_id, max_frames)
        self.stack: deque[np.ndarray] = deque(maxlen=4)

    def reset(self, seed=None) -> np.ndarray:
        screen, _ = self.env.reset(seed=seed)
        self.stack.extend([_resize(screen)] * 4)
        return np.stack(self.stack)

    def step(self, action):
        screens, total = [], 0.0
        for _ in range(4):
            screen, reward, terminated, truncated, _ = self.env.step(action)
            screens.append(screen)
            total += reward
            if terminated or truncated:
                break
        self.stack.append(_resize(np.maximum.reduce(screens[-2:])))
        return np.stack(self.stack), total, terminated, truncated


@pytest.mark.parametrize(
    ("env_id", "max_frames"),
    # 401 / 402 / 403 frames: the episode is truncated after 1, 2 or 3 frames of a skip.
    [("ALE/Breakout-v5", 401), ("ALE/Pong-v5", 402), ("ALE/Breakout-v5", 403)],
)
def test_matches_gymnasium_atari_preprocessing(env_id, max_frames):
    ours = make_env(
        env_id, noop_max=0, fire_reset=False, episodic_life=False, max_episode_frames=max_frames,
        repeat_action_probability=0.0,  # as the reference's raw env (v5 ids default to 0.25)
    )
    reference = FrameStackObservation(
        AtariPreprocessing(
            _raw_env(env_id, max_frames),
            noop_max=0,
            frame_skip=4,
            screen_size=84,
            terminal_on_life_loss=False,
            grayscale_obs=True,
        ),
        4,
    )
    oracle = _RawOracle(env_id, max_frames)
    rng = np.random.default_rng(1)
    obs, _ = ours.reset(seed=7)
    np.testing.assert_array_equal(obs, reference.reset(seed=7)[0])
    np.testing.assert_array_equal(obs, oracle.reset(seed=7))
    ends = stale = 0
    for _ in range(600):
        action = int(rng.integers(ours.action_space.n))
        obs, reward, terminated, truncated, _ = ours.step(action)
        ref_obs, ref_reward, ref_terminated, ref_truncated, _ = reference.step(action)
        oracle_obs, *oracle_rest = oracle.step(action)
        assert (reward, terminated, truncated) == (ref_reward, ref_terminated, ref_truncated)
        assert [reward, terminated, truncated] == oracle_rest
        np.testing.assert_array_equal(obs, oracle_obs)
        if terminated or truncated:
            # gymnasium's newest frame is stale on the ending step; the three before are not.
            np.testing.assert_array_equal(obs[:3], ref_obs[:3])
            stale += not np.array_equal(obs[3], ref_obs[3])
            ends += 1
            obs, _ = ours.reset()
            np.testing.assert_array_equal(obs, reference.reset()[0])
            np.testing.assert_array_equal(obs, oracle.reset())
        else:
            np.testing.assert_array_equal(obs, ref_obs)
    assert ends >= 2
    assert stale >= 1  # the ending steps did exercise the stale-frame difference


def _layer(env: gym.Env, kind: type) -> gym.Wrapper:
    while not isinstance(env, kind):
        env = env.env
    return env


@pytest.mark.parametrize(
    ("env_id", "options", "expected"),
    [
        # life losses and game overs (mid-skip ones included)
        ("ALE/Breakout-v5", {}, {"terminated", "game"}),
        # life losses and 701-frame truncations (ending 1 frame into a skip)
        ("ALE/Breakout-v5", dict(max_episode_frames=701), {"terminated", "truncated", "game"}),
        # sticky actions; truncations 3 frames into a skip (Pong has no lives)
        ("ALE/Pong-v5", dict(max_episode_frames=1503, repeat_action_probability=0.25, episodic_life=False),
         {"truncated", "game"}),
    ],
)
def test_max_and_skip_direct_path_equals_stepping_the_layers(env_id, options, expected):
    """MaxAndSkip's direct ALE path gives what frame-by-frame stepping through NoopReset,
    RecordEpisodeStatistics and gymnasium's checkers gives: observations, rewards, flags, info
    (the game's statistics included) and the statistics' queues."""
    direct, layered = make_env(env_id, **options), make_env(env_id, **options)
    _layer(layered, MaxAndSkip)._direct = None
    assert _layer(direct, MaxAndSkip).direct_path
    rng = np.random.default_rng(5)
    assert np.array_equal(direct.reset(seed=9)[0], layered.reset(seed=9)[0])
    ends = {"terminated": 0, "truncated": 0, "game": 0}
    for _ in range(1500):
        action = int(rng.integers(direct.action_space.n))
        obs, reward, terminated, truncated, info = direct.step(action)
        ref_obs, ref_reward, ref_terminated, ref_truncated, ref_info = layered.step(action)
        np.testing.assert_array_equal(obs, ref_obs)
        assert (reward, terminated, truncated) == (ref_reward, ref_terminated, ref_truncated)
        assert type(reward) is type(ref_reward)
        game, ref_game = info.pop("episode", None), ref_info.pop("episode", None)
        assert info == ref_info
        assert (game is None) == (ref_game is None)
        if game is not None:
            assert (game["r"], game["l"]) == (ref_game["r"], ref_game["l"])
            ends["game"] += 1
        if terminated or truncated:
            ends["terminated"] += terminated
            ends["truncated"] += truncated
            obs, info = direct.reset()
            ref_obs, ref_info = layered.reset()
            np.testing.assert_array_equal(obs, ref_obs)
            assert info.keys() == ref_info.keys()
    assert {kind for kind, count in ends.items() if count} >= expected, ends
    stats, ref_stats = _layer(direct, RecordEpisodeStatistics), _layer(layered, RecordEpisodeStatistics)
    assert list(stats.return_queue) == list(ref_stats.return_queue)
    assert list(stats.length_queue) == list(ref_stats.length_queue)
    assert stats.episode_count == ref_stats.episode_count


def test_the_direct_paths_internals_are_all_there():
    """MaxAndSkip's direct path relies on ALE and gymnasium internals (listed in
    vecdqn/ale_direct.py). An installed version without one would quietly turn it off and make
    every run slower: this names what is missing instead."""
    assert ale_direct.missing_internals() == []
    for env_id in ("ALE/Breakout-v5", "PongNoFrameskip-v4"):
        assert _layer(make_env(env_id), MaxAndSkip).direct_path, env_id


def test_a_missing_internal_is_named_and_turns_the_direct_path_off(monkeypatch):
    """As with an ale_py whose AtariEnv lost an attribute the direct path reads."""
    monkeypatch.setattr(ale_direct, "ATARI_ENV_ATTRIBUTES", (*ale_direct.ATARI_ENV_ATTRIBUTES, "_gone"))
    assert ale_direct.missing_internals() == ["ale_py.AtariEnv._gone"]
    assert not _layer(make_env("ALE/Breakout-v5"), MaxAndSkip).direct_path


def test_max_and_skip_steps_the_layers_under_any_other_wrapper():
    """A wrapper MaxAndSkip does not know (here one that counts frames, as evaluation's recorder
    does) sees every frame: the direct path is off."""

    class CountFrames(gym.Wrapper):
        frames = 0

        def step(self, action):
            self.frames += 1
            return self.env.step(action)

    env = make_env("ALE/Breakout-v5", base_wrapper=CountFrames, noop_max=0, fire_reset=False)
    assert not _layer(env, MaxAndSkip).direct_path
    env.reset(seed=0)
    for _ in range(10):
        env.step(0)
    assert _layer(env, CountFrames).frames == 40


def _ale(env: gym.Env):
    return env.unwrapped.ale


def test_frame_counter_advances_by_skip_per_agent_step():
    env = make_env("ALE/Breakout-v5", frame_skip=4)
    env.reset(seed=3)
    rng = np.random.default_rng(3)
    checked = 0
    for _ in range(300):
        before = (_ale(env).getEpisodeFrameNumber(), _ale(env).getFrameNumber())
        _, _, terminated, truncated, info = env.step(int(rng.integers(env.action_space.n)))
        after = (_ale(env).getEpisodeFrameNumber(), _ale(env).getFrameNumber())
        if terminated or truncated:
            if info["lives"] == 0:  # a game ended mid-skip; the counters may stop early
                env.reset()
                continue
        assert after == (before[0] + 4, before[1] + 4)
        assert info["episode_frame_number"] == after[0]
        checked += 1
        if terminated or truncated:
            env.reset()
    assert checked > 250


def test_episode_statistics_report_the_whole_game_on_breakout():
    env = make_env("ALE/Breakout-v5")
    env.reset(seed=11)
    rng = np.random.default_rng(11)
    total, life_losses = 0.0, 0
    for _ in range(20_000):
        _, reward, terminated, truncated, info = env.step(int(rng.integers(env.action_space.n)))
        total += reward
        if "episode" in info:
            break
        if terminated:
            life_losses += 1
            assert info["lives"] > 0
            env.reset()
    else:
        pytest.fail("the game did not end")
    assert terminated and info["lives"] == 0
    assert life_losses == 4  # 5 lives: 4 life-loss episodes, then the game over
    assert info["episode"]["r"] == total  # not one life's return
    assert info["episode"]["l"] == info["episode_frame_number"]  # frames of the whole game


def test_fire_reset_only_where_the_game_has_fire():
    def chain(env):
        types = []
        while isinstance(env, gym.Wrapper):
            types.append(type(env))
            env = env.env
        return types

    breakout = chain(make_env("ALE/Breakout-v5"))
    assert breakout[:6] == [FrameStack, GrayscaleResize, FireReset, EpisodicLife, MaxAndSkip,
                            NoopReset]
    assert RecordEpisodeStatistics in breakout
    freeway = chain(make_env("ALE/Freeway-v5"))
    assert FireReset not in freeway and EpisodicLife in freeway
    no_fire = chain(make_env("ALE/Breakout-v5", fire_reset=False))
    assert FireReset not in no_fire


def test_fire_reset_serves_the_ball_in_breakout():
    # Without FIRE, Breakout waits: a no-op policy never loses a life.
    for fire_reset, expect_life_loss in [(True, True), (False, False)]:
        env = make_env("ALE/Breakout-v5", fire_reset=fire_reset, noop_max=0)
        env.reset(seed=0)
        lost = any(env.step(0)[2] for _ in range(150))
        assert lost is expect_life_loss


def test_observation_space_and_dtype():
    env = make_env("ALE/Pong-v5")
    assert env.observation_space == spaces.Box(0, 255, (4, 84, 84), np.uint8)
    obs, _ = env.reset(seed=0)
    assert obs.shape == (4, 84, 84) and obs.dtype == np.uint8
    assert env.observation_space.contains(obs)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"env_id": "ALE/Breakot-v5"}, "ALE/Breakout-v5"),
        ({"env_id": "ALE/Breakout-v5", "frame_skip": 0}, "frame_skip=0"),
        ({"env_id": "ALE/Breakout-v5", "noop_max": -1}, "noop_max=-1"),
        ({"env_id": "ALE/Breakout-v5", "screen_size": 0}, "screen_size=0"),
        ({"env_id": "ALE/Breakout-v5", "frame_stack": 0}, "frame_stack=0"),
        ({"env_id": "ALE/Breakout-v5", "repeat_action_probability": 1.5}, r"\[0, 1\]"),
        ({"env_id": "ALE/Breakout-v5", "max_episode_frames": 0}, "max_episode_frames=0"),
        ({"env_id": "ALE/Breakout-v5", "episodic_life": "yes"}, "episodic_life"),
    ],
)
def test_make_env_validates_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        make_env(**kwargs)


def test_sticky_actions_reach_the_ale():
    env = make_env("ALE/Breakout-v5", repeat_action_probability=0.25)
    assert _ale(env).getFloat("repeat_action_probability") == 0.25


def test_episodic_life_needs_lives():
    env = EpisodicLife(GrayscaleResize(_RgbEnv(), 84))
    with pytest.raises(ValueError, match="lives"):
        env.reset()


@pytest.mark.parametrize("env_id", ["BreakoutNoFrameskip-v4", "vecdqn/Catch-v0"])
def test_env_state_restores_the_same_future(env_id):
    """A snapshot restored into a fresh env replays identical steps (exact resume)."""
    from vecdqn.envs.state import get_env_state, set_env_state

    rng = np.random.default_rng(0)
    cap = {"max_episode_frames": 3000} if env_id.startswith("Breakout") else {}  # the ALE's frame cap
    env = make_env(env_id, **cap)
    env.reset(seed=1)
    for _ in range(120):
        *_, terminated, truncated, _ = env.step(rng.integers(env.action_space.n))
        if terminated or truncated:
            env.reset()
    state = get_env_state(env)
    actions = rng.integers(env.action_space.n, size=300)

    def play(e):
        out = []
        for a in actions:
            obs, reward, terminated, truncated, info = e.step(a)
            out.append((obs, reward, terminated, truncated, info.get("lives"), info.get("episode", {}).get("r")))
            if terminated or truncated:
                out.append((e.reset()[0],))
        return out

    expected = play(env)
    other = make_env(env_id, **cap)
    other.reset(seed=99)
    set_env_state(other, state)
    got = play(other)
    assert len(got) == len(expected)
    assert sum(len(row) == 1 for row in expected) >= 1, "the replayed stretch should cross an episode end"
    for row_a, row_b in zip(expected, got):
        for a, b in zip(row_a, row_b):
            if isinstance(a, np.ndarray):
                np.testing.assert_array_equal(a, b)
            else:
                assert a == b
