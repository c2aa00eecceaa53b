"""`FrameTap`: a wrapper around the base env that sees every raw frame of the real game.

Placed directly around ``gym.make``'s env through ``make_env``'s ``base_wrapper`` hook, under
RecordEpisodeStatistics, NoopReset, MaxAndSkip and FireReset. ``MaxAndSkip`` steps its inner env
once per emulator frame, so the tap sees each one, no-ops and FIRE presses included::

    one agent step, frame_skip=4:   MaxAndSkip.step(a)
                                      └─► FrameTap.step(a) ×4   (fewer if the game ends first)
                                            frames += 4, score += the 4 raw rewards

Evaluation reads a game's length (frames) and score (sum of raw rewards) from it, and records
the game in colour (``(H, W, 3) uint8``, native size) through its ``on_frame`` callback.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

__all__ = ["FrameTap"]


class FrameTap(gym.Wrapper):
    """Sits directly around the base env: counts frames, sums raw rewards, captures RGB screens.

    Installed through ``make_env(..., base_wrapper=...)``, below RecordEpisodeStatistics and the
    no-op/skip/FIRE wrappers, so it sees each emulator frame, including the no-ops and the FIRE
    of a reset. A reset of the base env starts a new count (a reset-time step that ended a game
    discards that game, and so does the count).

    Attributes:
        frames: base-env steps (emulator frames for the ALE) since the last base reset.
        score: sum of the raw rewards of those frames: the game's score.

    Args:
        env: the base env (``gym.make`` result).
        on_frame: if given, called with ``(H, W, 3) uint8`` RGB for the reset screen and after each
            frame, and with ``None`` first on each reset (a new episode starts). The RGB comes from
            ``ale.getScreenRGB()`` for ALE games (the env's observations are grayscale),
            else from ``render()`` if the env renders ``rgb_array``, else from the observation if it
            is an RGB frame (Catch's observation is its rendering).

    Raises:
        ValueError: ``on_frame`` is given but the env offers no RGB frame.
    """

    def __init__(self, env: gym.Env, on_frame: Callable[[np.ndarray | None], None] | None = None):
        super().__init__(env)
        self.frames = 0
        self.score = 0.0
        self.on_frame = on_frame
        self._screen = _rgb_source(env) if on_frame is not None else None

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        obs, info = self.env.reset(seed=seed, options=options)
        self.frames = 0
        self.score = 0.0
        if self.on_frame is not None:
            self.on_frame(None)
            self.on_frame(self._screen(obs))
        return obs, info

    def step(self, action: Any):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.frames += 1
        self.score += float(reward)
        if self.on_frame is not None:
            self.on_frame(self._screen(obs))
        return obs, reward, terminated, truncated, info


def _rgb_source(env: gym.Env) -> Callable[[Any], np.ndarray]:
    """A function ``obs -> (H, W, 3) uint8`` giving the env's current screen in colour."""
    ale = getattr(env.unwrapped, "ale", None)
    if ale is not None:
        return lambda obs: ale.getScreenRGB()
    if getattr(env, "render_mode", None) == "rgb_array":
        return lambda obs: np.asarray(env.render(), dtype=np.uint8)
    space = env.observation_space
    if (
        isinstance(space, gym.spaces.Box)
        and space.dtype == np.uint8
        and len(space.shape) == 3
        and space.shape[2] == 3
    ):
        return lambda obs: np.array(obs, dtype=np.uint8, copy=True)
    raise ValueError(
        f"cannot record {env.spec.id if env.spec else env}: it is not an ALE game, does not render "
        "rgb_array and its observations are not RGB frames; evaluate without a video"
    )
