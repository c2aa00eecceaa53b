"""MaxAndSkip's direct path to the emulator: the one place that relies on ALE and gymnasium internals.

`vecdqn.envs.wrappers.MaxAndSkip` plays its ``skip`` frames straight on the ALE (one ``ale.act`` and
one ``getScreenGrayscale`` per frame) when every layer between it and the ALE env only passes
steps through, as in `vecdqn.envs.make_env`'s chain; this skips four Python layers per frame.
It then does what those layers would have done. That needs these internals, none of them
public API (checked with ale-py 0.12 and gymnasium 1.x):

- ale_py ``AtariEnv`` attributes (`ATARI_ENV_ATTRIBUTES`): ``ale`` (the ``ALEInterface``),
  ``_action_set`` (action index -> ALE action, as ``AtariEnv.step`` maps it), and ``_frameskip``,
  ``_obs_type``, ``continuous``, ``sound_obs``, which must say that one step is one grayscale
  frame with discrete actions and no sound;
- ``ALEInterface`` methods (`ALE_METHODS`), called as ``AtariEnv.step`` calls them:
  ``act(action, strength)``, ``getScreenGrayscale(out)``, ``game_over(with_truncation=...)``,
  ``game_truncated()``, ``lives()``, ``getEpisodeFrameNumber()``, ``getFrameNumber()``;
- gymnasium's ``OrderEnforcing`` and ``PassiveEnvChecker`` (`GYM_PASS_THROUGH`, the layers
  ``gym.make`` adds), which pass steps through unchanged after the first;
- the state of gymnasium's ``RecordEpisodeStatistics`` (`STATS_FIELDS` and ``_stats_key``),
  updated by `record_frames` as its ``step`` would.

If an installed version lacks one, `direct_ale` finds the chain ineligible and MaxAndSkip steps
through the layers: the same results, only slower. So that this cannot happen unnoticed,
`missing_internals` names whatever is missing and ``tests/test_wrappers.py`` fails on it, and on
any difference between the two paths (observations, rewards, flags, info, statistics).
"""

from __future__ import annotations

import time
from typing import Any, NamedTuple

import ale_py
import gymnasium as gym

__all__ = [
    "ALE_METHODS", "ATARI_ENV_ATTRIBUTES", "EPISODE_KEY", "GYM_PASS_THROUGH", "STATS_FIELDS", "DirectAle",
    "direct_ale", "missing_internals", "record_frames",
]

# The stats key gymnasium's RecordEpisodeStatistics writes into `info` when a game ends (its default).
EPISODE_KEY = "episode"
ATARI_ENV_ATTRIBUTES = ("ale", "_action_set", "_frameskip", "_obs_type", "continuous", "sound_obs")
ALE_METHODS = ("act", "getScreenGrayscale", "game_over", "game_truncated", "lives", "getEpisodeFrameNumber",
               "getFrameNumber")
STATS_FIELDS = ("episode_returns", "episode_lengths", "episode_count", "episode_start_time", "time_queue",
                "return_queue", "length_queue")
_GYM_PASS_THROUGH_NAMES = ("OrderEnforcing", "PassiveEnvChecker")
# Looked up, not imported by name: a gymnasium without them only turns the direct path off.
GYM_PASS_THROUGH: tuple[type, ...] = tuple(
    kind for name in _GYM_PASS_THROUGH_NAMES
    if isinstance(kind := getattr(getattr(gym.wrappers, "common", None), name, None), type)
)


class DirectAle(NamedTuple):
    """What the direct path talks to: the emulator, the env's action set, and the
    RecordEpisodeStatistics layer it keeps up to date (None when the chain has none)."""

    ale: ale_py.ALEInterface
    action_set: Any
    stats: gym.wrappers.RecordEpisodeStatistics | None


def direct_ale(env: gym.Env, pass_through: tuple[type, ...] = ()) -> DirectAle | None:
    """The emulator under ``env`` when every layer of ``env`` only passes steps through (gymnasium's
    `GYM_PASS_THROUGH`, the types in ``pass_through``, and at most one RecordEpisodeStatistics)
    down to a one-frame, grayscale, discrete-action ALE env; else None.

    ``pass_through``: the caller's own wrapper types whose ``step`` calls the layer below
    unchanged (`vecdqn.envs.wrappers.NoopReset`).
    """
    stats = None
    layer = env
    while isinstance(layer, gym.Wrapper):
        if type(layer) is gym.wrappers.RecordEpisodeStatistics and stats is None:
            stats = layer
        elif type(layer) not in (*GYM_PASS_THROUGH, *pass_through):
            return None
        layer = layer.env
    if stats is not None and (
        getattr(stats, "_stats_key", None) != EPISODE_KEY or not all(hasattr(stats, f) for f in STATS_FIELDS)
    ):
        return None
    base = layer
    if not (
        isinstance(base, ale_py.AtariEnv)
        and all(hasattr(base, name) for name in ATARI_ENV_ATTRIBUTES)
        and all(callable(getattr(base.ale, name, None)) for name in ALE_METHODS)
        and base._frameskip == 1
        and base._obs_type == "grayscale"
        and base.continuous is False
        and base.sound_obs is False
    ):
        return None
    return DirectAle(base.ale, base._action_set, stats)


def record_frames(
    stats: gym.wrappers.RecordEpisodeStatistics, reward: float, frames: int, ended: bool, info: dict[str, Any]
) -> None:
    """What ``stats.step`` would have recorded for ``frames`` frames worth ``reward`` in all (the
    rewards are integers, so their sum is exact in any order), the last of which ``ended`` the
    game: gymnasium's RecordEpisodeStatistics, whose state this updates, has no call for it."""
    stats.episode_returns += reward
    stats.episode_lengths += frames
    if ended:
        seconds = round(time.perf_counter() - stats.episode_start_time, 6)
        info[EPISODE_KEY] = {"r": stats.episode_returns, "l": stats.episode_lengths, "t": seconds}
        stats.time_queue.append(seconds)
        stats.return_queue.append(stats.episode_returns)
        stats.length_queue.append(stats.episode_lengths)
        stats.episode_count += 1
        stats.episode_start_time = time.perf_counter()


def missing_internals() -> list[str]:
    """The internals listed in the module docstring that the installed ale_py and gymnasium lack,
    by name (empty: `direct_ale` can take its path). Builds one Pong emulator; plays nothing."""
    found = {kind.__name__ for kind in GYM_PASS_THROUGH}
    missing = [f"gymnasium.wrappers.common.{name}" for name in _GYM_PASS_THROUGH_NAMES if name not in found]
    missing += [f"ale_py.ALEInterface.{name}" for name in ALE_METHODS
                if not callable(getattr(ale_py.ALEInterface, name, None))]
    env = ale_py.AtariEnv(game="pong", obs_type="grayscale", frameskip=1)
    try:
        missing += [f"ale_py.AtariEnv.{name}" for name in ATARI_ENV_ATTRIBUTES if not hasattr(env, name)]
        if hasattr(env, "_action_set") and len(env._action_set) != env.action_space.n:
            missing.append("ale_py.AtariEnv._action_set (one ALE action per action index)")
        stats = gym.wrappers.RecordEpisodeStatistics(env)
        missing += [f"gymnasium.wrappers.RecordEpisodeStatistics.{name}" for name in STATS_FIELDS
                    if not hasattr(stats, name)]
        if getattr(stats, "_stats_key", None) != EPISODE_KEY:
            missing.append(f"gymnasium.wrappers.RecordEpisodeStatistics._stats_key == {EPISODE_KEY!r}")
    finally:
        env.close()
    return missing
