"""Atari preprocessing as gymnasium wrappers, and ``make_env`` / ``make_atari_env`` to compose them.

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
GrayscaleResize and FrameStack.
"""

from __future__ import annotations

import dataclasses
import difflib
import time
from collections.abc import Callable
from typing import Any, SupportsFloat

import ale_py
import cv2
import gymnasium as gym
import numpy as np
from gymnasium import spaces

from vecdqn.config import EnvOptions
from vecdqn.env_state import get_env_state, set_env_state

__all__ = [
    "EnvOptions",
    "EpisodicLife",
    "FireReset",
    "FrameStack",
    "GrayscaleResize",
    "MaxAndSkip",
    "NoopReset",
    "get_env_state",
    "make_atari_env",
    "make_env",
    "set_env_state",
]

# The ALE's own entry point; envs registered with it get the Atari-only wrappers.
_ALE_ENTRY_POINT = "ale_py.env:AtariEnv"
# The stats key gymnasium's RecordEpisodeStatistics writes into `info` when a game ends.
_EPISODE_KEY = "episode"


def _check_int(name: str, value: Any, minimum: int, hint: str) -> None:
    """Raise ``ValueError`` unless ``value`` is an int (not bool) ``>= minimum``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name}={value!r} is invalid; {hint}")


def _carry_episode_stats(step_info: dict[str, Any], reset_info: dict[str, Any]) -> None:
    """Keep a finished game's statistics when a reset-time step ended it.

    A game can end inside ``reset()`` (the continuing no-op of ``EpisodicLife``, the FIRE of
    ``FireReset``), after the agent played it. RecordEpisodeStatistics then put the game's
    return and length into that hidden step's ``info``; copying it into the reset's ``info``
    keeps that game in the logs instead of silently dropping it.
    """
    if _EPISODE_KEY in step_info:
        reset_info[_EPISODE_KEY] = step_info[_EPISODE_KEY]


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
            meanings = _action_meanings(env)
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
        info.pop(_EPISODE_KEY, None)
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
    goes through ``self.env.step``; ``direct=False`` forces that.

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
        self._direct = _direct_ale(env) if direct else None
        self._checked = False  # the first step goes through the layers (their own checks)

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
            _record_frames(stats, total_reward, produced, terminated or truncated, info)
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


# Wrappers that pass `step` through unchanged, so MaxAndSkip may talk to the ALE under them.
_PASS_THROUGH = (NoopReset, gym.wrappers.common.OrderEnforcing, gym.wrappers.common.PassiveEnvChecker)
# RecordEpisodeStatistics' state that MaxAndSkip's direct path keeps up to date.
_STATS_FIELDS = ("episode_returns", "episode_lengths", "episode_count", "episode_start_time", "time_queue",
                 "return_queue", "length_queue")


def _direct_ale(env: gym.Env) -> tuple[ale_py.ALEInterface, Any, gym.wrappers.RecordEpisodeStatistics | None] | None:
    """``(ale, action_set, stats)`` when every layer of ``env`` only passes steps through (at most one
    RecordEpisodeStatistics, ``stats``) down to a one-frame grayscale ALE env; else None."""
    stats = None
    layer = env
    while isinstance(layer, gym.Wrapper):
        if type(layer) is gym.wrappers.RecordEpisodeStatistics and stats is None:
            stats = layer
        elif type(layer) not in _PASS_THROUGH:
            return None
        layer = layer.env
    if stats is not None and (
        getattr(stats, "_stats_key", None) != _EPISODE_KEY or not all(hasattr(stats, f) for f in _STATS_FIELDS)
    ):
        return None
    base = layer
    if not (
        isinstance(base, ale_py.AtariEnv)
        and getattr(base, "_frameskip", None) == 1
        and getattr(base, "_obs_type", None) == "grayscale"
        and getattr(base, "continuous", True) is False
        and getattr(base, "sound_obs", True) is False
    ):
        return None
    return base.ale, base._action_set, stats


def _record_frames(
    stats: gym.wrappers.RecordEpisodeStatistics, reward: float, frames: int, ended: bool, info: dict[str, Any]
) -> None:
    """What ``stats.step`` would have recorded for ``frames`` frames worth ``reward`` in all (the
    rewards are integers, so their sum is exact in any order), the last of which ``ended`` the
    game: gymnasium's RecordEpisodeStatistics, whose state this updates, has no call for it."""
    stats.episode_returns += reward
    stats.episode_lengths += frames
    if ended:
        seconds = round(time.perf_counter() - stats.episode_start_time, 6)
        info[_EPISODE_KEY] = {"r": stats.episode_returns, "l": stats.episode_lengths, "t": seconds}
        stats.time_queue.append(seconds)
        stats.return_queue.append(stats.episode_returns)
        stats.length_queue.append(stats.episode_lengths)
        stats.episode_count += 1
        stats.episode_start_time = time.perf_counter()


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
        meanings = _action_meanings(env)
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


def _action_meanings(env: gym.Env) -> list[str] | None:
    """The env's action meanings (ALE: ``get_action_meanings()``), or None if it has none."""
    getter = getattr(env.unwrapped, "get_action_meanings", None)
    return list(getter()) if callable(getter) else None


def _register_envs() -> None:
    """Register the ALE's and vecdqn's env ids (idempotent, cheap after the first call).

    Also keeps only the ALE's errors on stderr: its banner, printed by every emulator that
    loads a ROM, would otherwise precede each one-line error message and repeat once per worker.
    """
    gym.register_envs(ale_py)
    ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)
    import vecdqn.catch  # noqa: F401  (registers vecdqn/Catch-v0)


def is_ale_env_id(env_id: str) -> bool:
    """Whether ``env_id`` is registered with the ALE's ``AtariEnv`` entry point."""
    _register_envs()
    return gym.spec(env_id).entry_point == _ALE_ENTRY_POINT


def check_env_id(env_id: str) -> None:
    """Raise ``ValueError`` unless ``env_id`` is registered (naming close matches)."""
    if not isinstance(env_id, str):
        raise ValueError(f"env_id={env_id!r} is invalid; use a registered id such as 'ALE/Breakout-v5'")
    _register_envs()
    if env_id not in gym.registry:
        close = difflib.get_close_matches(env_id, list(gym.registry), n=5, cutoff=0.6)
        hint = f"did you mean one of {close}?" if close else "see gymnasium.registry for ids"
        raise ValueError(f"unknown env id {env_id!r}; {hint}")


def env_options(options: EnvOptions | None = None, **option_kwargs: Any) -> EnvOptions:
    """One validated `EnvOptions` from either an instance or its keyword fields (not both).

    Raises:
        ValueError: an unknown option name (naming the allowed ones), both forms given, or an
            invalid value.
    """
    if options is not None and option_kwargs:
        raise ValueError(f"give env options either as EnvOptions or as keywords, not both ({sorted(option_kwargs)})")
    if options is None:
        allowed = [f.name for f in dataclasses.fields(EnvOptions)]
        unknown = sorted(set(option_kwargs) - set(allowed))
        if unknown:
            raise ValueError(f"unknown env option(s) {unknown}; make_env accepts {allowed}")
        options = EnvOptions(**option_kwargs)
    options.validate()
    return options


def check_env_options(env_id: str, options: EnvOptions | None = None, **option_kwargs: Any) -> EnvOptions:
    """Validate an env id and its options without creating an env; returns the options.

    Raises:
        ValueError: an unknown id (with close matches), an unknown option or an invalid value.
    """
    check_env_id(env_id)
    return env_options(options, **option_kwargs)


def make_env(
    env_id: str,
    options: EnvOptions | None = None,
    *,
    base_wrapper: Callable[[gym.Env], gym.Env] | None = None,
    **option_kwargs: Any,
) -> gym.Env:
    """Make one preprocessed env: observations ``(frame_stack, screen_size, screen_size) uint8``.

    ALE ids (e.g. ``"ALE/Breakout-v5"``) get the full DQN preprocessing in the module
    docstring's order. Other ids (e.g. ``"vecdqn/Catch-v0"``) get RecordEpisodeStatistics,
    GrayscaleResize and FrameStack only; the Atari-only options are ignored for them.

    Args:
        env_id: a registered gymnasium id.
        options: the preprocessing options (`vecdqn.config.EnvOptions`: units and defaults
            there), or give them as keywords instead, with the same names:
            ``make_env("ALE/Pong-v5", frame_skip=4, noop_max=30)``. Briefly:
            ``noop_max`` most no-op *frames* after a real reset (count drawn from 1..noop_max;
            0: none); ``frame_skip`` frames per agent step (last two max-pooled);
            ``screen_size`` side of the square observation in pixels; ``frame_stack``
            observations stacked, oldest first; ``episodic_life`` a lost life ends the
            episode (not the game); ``fire_reset`` FIRE after each reset where the game has
            it; ``repeat_action_probability`` sticky actions per frame (None: the env id's
            own default, 0.0 for ``*NoFrameskip-v4``, 0.25 for ``ALE/*-v5``);
            ``max_episode_frames`` frames per *game* before truncation (108,000 = 27,000
            agent steps at ``frame_skip=4`` = 30 minutes; None: no cap).
        base_wrapper: if given, applied directly around the base env (``gym.make``'s result),
            under RecordEpisodeStatistics: the wrapper it returns sees every raw frame (one
            ``step`` per frame, no-ops and FIRE included). Evaluation uses it to record the real
            game in colour. It must not change spaces, rewards or episode ends.

    Returns:
        the wrapped env; ``info["episode"]`` (``"r"`` raw return, ``"l"`` length in frames
        for ALE games, in env steps for others) is set on the step that ends a whole game.

    Raises:
        ValueError: an unknown id (with close matches), an unknown option or an invalid value.
    """
    o = check_env_options(env_id, options, **option_kwargs)
    if is_ale_env_id(env_id):
        sticky = {} if o.repeat_action_probability is None else {
            "repeat_action_probability": float(o.repeat_action_probability)}
        env = gym.make(
            env_id,
            obs_type="grayscale",
            frameskip=1,
            # The ALE reads 0 as "no cap"; ALE/*-v5 ids would otherwise default to 108,000.
            max_num_frames_per_episode=0 if o.max_episode_frames is None else int(o.max_episode_frames),
            **sticky,
        )
        if base_wrapper is not None:
            env = base_wrapper(env)
        # Under the life-loss wrapper, and under the skip so its length counts frames.
        env = gym.wrappers.RecordEpisodeStatistics(env)
        if o.noop_max > 0:
            env = NoopReset(env, noop_max=o.noop_max)
        env = MaxAndSkip(env, skip=o.frame_skip)
        if o.episodic_life:
            env = EpisodicLife(env)
        if o.fire_reset and "FIRE" in (_action_meanings(env) or []):
            env = FireReset(env)
    else:
        env = gym.make(env_id)
        if base_wrapper is not None:
            env = base_wrapper(env)
        env = gym.wrappers.RecordEpisodeStatistics(env)
    env = GrayscaleResize(env, screen_size=o.screen_size)
    env = FrameStack(env, num_stack=o.frame_stack)
    return env


#: The historical name; the same function (it also makes non-ALE envs such as Catch).
make_atari_env = make_env
