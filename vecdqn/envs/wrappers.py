"""Atari preprocessing as gymnasium wrappers (`vecdqn.envs.make_env` composes them from options).

The preprocessing is DQN's (Mnih et al. 2015, Nature, "Methods"): repeat each action over
``skip`` frames, max-pool the last two raw frames (sprite flicker), grayscale, resize to 84 x 84,
stack the last 4 observations; with the evaluation details of Machado et al. 2018 (JAIR):
random no-op starts, sticky actions as an option, episodes capped at 108,000 frames.

Shape legend (one env, no batch axis):

- ``H, W``: raw screen, 210 x 160 for the ALE; ``C = 3`` for RGB screens.
- ``S``: frames in the stack (4); ``84``: ``screen_size``.

Units: a *frame* is one emulator frame (one ``ale.act``); an *agent step* is one ``step()`` of
the outer env, ``frame_skip`` frames. Rewards stay raw (unclipped) here; the learner clips them.

Wrapper order, innermost first::

    AtariEnv(obs_type="grayscale", frameskip=1)   (H, W) uint8, one frame per step
    RecordEpisodeStatistics                       whole game's raw return, length in frames
    NoopReset(30)                                 random start (frames of NOOP)
    MaxAndSkip(4)                                 (H, W) uint8, one agent step per step
    EpisodicLife                                  terminated on life loss
    FireReset                                     FIRE after each reset (games with FIRE)
    GrayscaleResize(84)                           (84, 84) uint8
    FrameStack(4)                                 (4, 84, 84) uint8, oldest first

For non-ALE envs (e.g. ``vecdqn/Catch-v0``) ``make_env`` keeps only RecordEpisodeStatistics,
GrayscaleResize and FrameStack (see `vecdqn.envs.family`).
"""

from __future__ import annotations

from typing import Any, SupportsFloat

import cv2
import gymnasium as gym
import numpy as np
from gymnasium import spaces

from vecdqn.envs.ale_direct import EPISODE_KEY, direct_ale, record_frames
from vecdqn.envs.state import get_env_state, set_env_state
from vecdqn.values import check_int

__all__ = [
    "EpisodicLife",
    "FireReset",
    "FrameStack",
    "GrayscaleResize",
    "MaxAndSkip",
    "NoopReset",
    "action_meanings",
]


def _check_int(name: str, value: Any, minimum: int, hint: str) -> None:
    """`check_int` with ``"name=value"`` as the wrappers' keyword arguments spell it."""
    check_int(f"{name}={value!r}", value, minimum, hint)


def _carry_episode_stats(step_info: dict[str, Any], reset_info: dict[str, Any]) -> None:
    """Keep a finished game's statistics when a reset-time step ended it.

    A game can end inside ``reset()`` (the continuing no-op of ``EpisodicLife``, the FIRE of
    ``FireReset``), after the agent played it. RecordEpisodeStatistics then put the game's
    return and length into that hidden step's ``info``; copying it into the reset's ``info``
    keeps that game in the logs instead of silently dropping it.
    """
    if EPISODE_KEY in step_info:
        reset_info[EPISODE_KEY] = step_info[EPISODE_KEY]


class NoopReset(gym.Wrapper):
    """Random no-op starts: after a real reset, take ``1..noop_max`` NOOP frames.

    The count is drawn uniformly from ``env.unwrapped.np_random`` (so it follows
    ``reset(seed=...)``); ``noop_max=0`` takes none. This wrapper sits *below* MaxAndSkip, so
    each no-op is one frame. If a no-op ends the game, the game is reset (without the seed,
    which would replay the same game) and the remaining no-ops continue.

    Sources: Mnih et al. 2015, Methods ("up to 30 no-op actions"); Machado et al. 2018, Sec. 5.

    Raises:
        ValueError: ``noop_max < 0``, or ``noop_max > 0`` and action 0 is not ``NOOP``.
    """

    def __init__(self, env: gym.Env, noop_max: int = 30):
        super().__init__(env)
        _check_int("noop_max", noop_max, 0, "use 0 (no no-op starts) or a positive count")
        if noop_max > 0:
            meanings = action_meanings(env)
            if meanings is not None and meanings[0] != "NOOP":
                raise ValueError(
                    f"NoopReset needs action 0 to be NOOP, but this env's actions are "
                    f"{meanings}; use noop_max=0"
                )
        self.noop_max = int(noop_max)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        if self.noop_max == 0:
            return obs, info
        noops = int(self.env.unwrapped.np_random.integers(1, self.noop_max + 1))
        for _ in range(noops):
            obs, _, terminated, truncated, step_info = self.env.step(0)
            info.update(step_info)
            if terminated or truncated:
                # Only reachable with absurdly small frame limits; the agent never saw that
                # game, so its statistics are not kept.
                obs, info = self.env.reset(options=options)
        info.pop(EPISODE_KEY, None)
        return obs, info


class MaxAndSkip(gym.Wrapper):
    """Repeat the action ``skip`` frames, sum the raw rewards, max-pool the last two frames.

    The pixel-wise max over the last two frames of the step removes the flicker of sprites
    that the Atari draws only every other frame (Mnih et al. 2015, Methods). The loop stops
    early on termination or truncation; the observation is then the max of the last two frames
    *of this call* (just that frame if the first frame ended the episode), never a stale frame
    of an earlier call. ``info`` is the last frame's (``lives``, frame counters, and
    RecordEpisodeStatistics' ``"episode"`` when the game ended).

    Timing, ``skip=4`` (``a_t`` is repeated; ``x`` = raw frame, ``o`` = observation)::

        frame        f1   f2   f3   f4 | f5   f6   f7   f8 | ...
        action       a_t  a_t  a_t  a_t| a_t+1 ...         |
        reward       r1 + r2 + r3 + r4 | r5 + r6 + r7 + r8 |
        pooled                 x3 v x4 |           x7 v x8 |      (v = pixel-wise max)
        observation            o_t+1   |           o_t+2   |

        episode ends at f6:  o = x5 v x6 (f7, f8 are never played)
        episode ends at f5:  o = x5

    **Direct path.** When every layer between this wrapper and the ALE env only passes steps
    through (NoopReset, gymnasium's RecordEpisodeStatistics, OrderEnforcing and
    PassiveEnvChecker: `make_env`'s chain), each frame is one ``ale.act`` and one
    ``getScreenGrayscale`` straight into the two-frame buffer, and this wrapper does the
    RecordEpisodeStatistics bookkeeping for the skipped layers (return, length in frames, and
    ``info["episode"]`` when the game ends); ``info`` has the ALE env's keys (``lives``,
    ``episode_frame_number``, ``frame_number``) of the last frame. Same observations, rewards,
    flags and info as stepping the layers frame by frame (tested on Breakout and Pong, game overs
    and truncations included); it skips the Python layers' per-frame overhead. The first step
    after construction, and every step of any other chain (e.g. evaluation's frame recorder),
    goes through ``self.env.step``; ``direct=False`` forces that. `direct_path` says which one is
    in use. The ALE and gymnasium internals this relies on are listed, and checked, in
    `vecdqn.envs.ale_direct`.

    Every frame's screen is fetched, not only the two pooled ones: any frame can be the one
    before a game over, whose max needs it, and the ALE cannot render a past frame (a state
    snapshot per step costs more than the two fetches it saves).
    Observations: ``(H, W)`` or ``(H, W, C)`` uint8, the env's own shape.

    Raises:
        ValueError: ``skip < 1``.
    """

    def __init__(self, env: gym.Env, skip: int = 4, *, direct: bool = True):
        super().__init__(env)
        _check_int("skip", skip, 1, "use 1 (no frame skipping) or more frames per agent step")
        self.skip = int(skip)
        space = env.observation_space
        if not isinstance(space, spaces.Box):
            raise ValueError(f"MaxAndSkip needs a Box observation space, got {space}")
        # Two preallocated frames: the env may reuse its screen buffer between steps, so the
        # previous frame is copied out before the next step overwrites it.
        self._frames = np.zeros((2, *space.shape), dtype=space.dtype)
        self._direct = direct_ale(env, pass_through=(NoopReset,)) if direct else None
        self._checked = False  # the first step goes through the layers (their own checks)

    @property
    def direct_path(self) -> bool:
        """Whether steps after the first go straight to the ALE (see the class docstring)."""
        return self._direct is not None

    def step(self, action: Any) -> tuple[np.ndarray, SupportsFloat, bool, bool, dict[str, Any]]:
        if self._direct is not None and self._checked:
            return self._direct_step(action)
        result = self._layered_step(action)
        self._checked = True
        return result

    def _direct_step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        ale, action_set, stats = self._direct
        act, fetch = ale.act, ale.getScreenGrayscale
        ale_action = action_set[action]  # as AtariEnv.step maps it
        frames = self._frames
        total_reward = 0.0
        produced = 0
        for _ in range(self.skip):
            total_reward += act(ale_action, 1.0)
            fetch(frames[produced & 1])
            produced += 1
            if ale.game_over():  # termination or truncation
                break
        terminated = ale.game_over(with_truncation=False)
        truncated = ale.game_truncated()
        info = {"lives": ale.lives(), "episode_frame_number": ale.getEpisodeFrameNumber(),
                "frame_number": ale.getFrameNumber()}
        if stats is not None:
            record_frames(stats, total_reward, produced, terminated or truncated, info)
        return self._pool(produced), total_reward, terminated, truncated, info

    def _layered_step(self, action: Any) -> tuple[np.ndarray, SupportsFloat, bool, bool, dict[str, Any]]:
        total_reward = 0.0
        terminated = truncated = False
        info: dict[str, Any] = {}
        frames = self._frames
        produced = 0
        for _ in range(self.skip):
            obs, reward, terminated, truncated, info = self.env.step(action)
            total_reward += float(reward)
            frames[produced & 1] = obs
            produced += 1
            if terminated or truncated:
                break
        return self._pool(produced), total_reward, terminated, truncated, info

    def _pool(self, produced: int) -> np.ndarray:
        """The observation of a step that played ``produced`` frames: the max of its last two, or
        its only one. A fresh array: callers (and FrameStack) may keep references."""
        frames = self._frames
        return frames[0].copy() if produced == 1 else np.maximum(frames[0], frames[1])


class EpisodicLife(gym.Wrapper):
    """Life loss as the end of an episode, without resetting the game.

    ``step`` returns ``terminated=True`` when ``info["lives"]`` decreases (or the game is over);
    ``reset`` resets the game only when it is really over (termination or truncation of the
    game, e.g. the 108,000-frame cap) or when a seed is given. Otherwise it continues the same
    game with one no-op agent step; if that no-op ends the game, it does a real reset.
    Truncation is passed on as truncation, never turned into termination.

    Value estimation improves when losing a life is terminal (Mnih et al. 2015, Methods);
    Machado et al. 2018 (Sec. 3.3) note that it uses game-specific information. The game's
    whole return is still reported by the RecordEpisodeStatistics below this wrapper.

    ``info["lives"]`` (from the ALE) is required and passed on.
    """

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.lives = 0
        # True until the first reset, and whenever the underlying game has ended.
        self.game_over = True

    def _lives(self, info: dict[str, Any]) -> int:
        """Lives left: ``info["lives"]`` (ALE envs put it there), else ``ale.lives()``."""
        if "lives" in info:
            return int(info["lives"])
        ale = getattr(self.env.unwrapped, "ale", None)
        if ale is None:
            raise ValueError(
                "EpisodicLife needs info['lives'] or an ALE interface (env.unwrapped.ale); "
                "use episodic_life=False for envs without lives"
            )
        return int(ale.lives())

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.game_over = bool(terminated or truncated)
        lives = self._lives(info)
        if lives < self.lives:
            terminated = True
        self.lives = lives
        return obs, reward, terminated, truncated, info

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        if self.game_over or seed is not None:
            obs, info = self.env.reset(seed=seed, options=options)
        else:
            # Continue the same game: one no-op agent step moves past the life-loss frame.
            obs, _, terminated, truncated, info = self.env.step(0)
            if terminated or truncated:
                step_info = info
                obs, info = self.env.reset(options=options)
                _carry_episode_stats(step_info, info)
        self.game_over = False
        self.lives = self._lives(info)
        return obs, info


class FireReset(gym.Wrapper):
    """Press FIRE after every reset, for games that wait for FIRE to start (Breakout).

    Under EpisodicLife this runs after every life loss too, which is when Breakout waits for
    FIRE to serve a new ball. If FIRE itself ends the episode, the env is reset (without the
    seed) and FIRE pressed again, at most ``max_attempts`` times.

    The classic baselines wrapper also takes action 2 after FIRE; that action means something
    different in each game (RIGHT in Breakout, UP in others) and no source gives a reason for
    it, so it is not taken here.

    Raises:
        ValueError: the env's action meanings have no ``FIRE``.
        RuntimeError: FIRE ended the episode ``max_attempts`` times in a row.
    """

    max_attempts = 10

    def __init__(self, env: gym.Env):
        super().__init__(env)
        meanings = action_meanings(env)
        if meanings is None or "FIRE" not in meanings:
            raise ValueError(
                f"FireReset needs a FIRE action, but this env's actions are {meanings}; "
                "use fire_reset=False"
            )
        self.fire_action = meanings.index("FIRE")

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        for _ in range(self.max_attempts):
            obs, _, terminated, truncated, step_info = self.env.step(self.fire_action)
            if not (terminated or truncated):
                info.update(step_info)
                return obs, info
            obs, info = self.env.reset(options=options)
            _carry_episode_stats(step_info, info)
        raise RuntimeError(f"FIRE ended the episode {self.max_attempts} times in a row")


class GrayscaleResize(gym.ObservationWrapper):
    """``(H, W) uint8`` or ``(H, W, 3) uint8`` RGB -> ``(size, size) uint8``.

    RGB frames are converted with ``cv2.COLOR_RGB2GRAY`` first; the resize is ``cv2.INTER_AREA``,
    as in gymnasium's ``AtariPreprocessing`` (Mnih et al. 2015 used bilinear scaling of the
    luminance; area averaging keeps thin sprites such as Breakout's ball from vanishing).

    Raises:
        ValueError: ``screen_size < 1`` or an observation space that is not a 2-D or
            ``(H, W, 3)`` uint8 Box.
    """

    def __init__(self, env: gym.Env, screen_size: int = 84):
        super().__init__(env)
        _check_int("screen_size", screen_size, 1, "use a positive side length in pixels")
        space = env.observation_space
        if (
            not isinstance(space, spaces.Box)
            or space.dtype != np.uint8
            or not (len(space.shape) == 2 or (len(space.shape) == 3 and space.shape[2] == 3))
        ):
            raise ValueError(
                f"GrayscaleResize needs (H, W) or (H, W, 3) uint8 frames, got {space}"
            )
        self.screen_size = int(screen_size)
        self._rgb = len(space.shape) == 3
        self.observation_space = spaces.Box(
            0, 255, (self.screen_size, self.screen_size), dtype=np.uint8
        )

    def observation(self, observation: np.ndarray) -> np.ndarray:
        if self._rgb:
            observation = cv2.cvtColor(observation, cv2.COLOR_RGB2GRAY)
        return cv2.resize(
            observation, (self.screen_size, self.screen_size), interpolation=cv2.INTER_AREA
        )


class FrameStack(gym.Wrapper):
    """Stack the last ``num_stack`` observations: ``(h, w) uint8 -> (S, h, w) uint8``.

    Oldest first, newest last (``obs[-1]`` is the current frame). On reset every slot holds the
    first frame, so no slot ever shows a previous episode. The stack lives in one preallocated
    array that is shifted in place; each call returns a fresh copy, so callers may keep
    references. Mnih et al. 2015, Methods: the Q-network sees the 4 most recent frames.

    Raises:
        ValueError: ``num_stack < 1``.
    """

    def __init__(self, env: gym.Env, num_stack: int = 4):
        super().__init__(env)
        _check_int("num_stack", num_stack, 1, "use 1 (no stacking) or more frames")
        space = env.observation_space
        if not isinstance(space, spaces.Box):
            raise ValueError(f"FrameStack needs a Box observation space, got {space}")
        self.num_stack = int(num_stack)
        self._stack = np.zeros((self.num_stack, *space.shape), dtype=space.dtype)
        self.observation_space = spaces.Box(
            low=np.broadcast_to(space.low, self._stack.shape).copy(),
            high=np.broadcast_to(space.high, self._stack.shape).copy(),
            dtype=space.dtype,
        )

    @property
    def snapshot(self) -> bytes:
        """The whole env's state (emulator, RNGs, every wrapper), see `get_env_state`.

        A property so that ``AsyncVectorEnv.get_attr("snapshot")`` / ``set_attr("snapshot",
        states)`` save and restore every worker's env, one state per env.
        """
        return get_env_state(self)

    @snapshot.setter
    def snapshot(self, state: bytes) -> None:
        set_env_state(self, state)

    def step(self, action: Any) -> tuple[np.ndarray, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._stack[:-1] = self._stack[1:]  # numpy buffers overlapping copies
        self._stack[-1] = obs
        return self._stack.copy(), reward, terminated, truncated, info

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        self._stack[:] = obs
        return self._stack.copy(), info


def action_meanings(env: gym.Env) -> list[str] | None:
    """The env's action meanings (ALE: ``get_action_meanings()``), or None if it has none."""
    getter = getattr(env.unwrapped, "get_action_meanings", None)
    return list(getter()) if callable(getter) else None
