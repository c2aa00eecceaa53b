"""`EnvOptions`: the preprocessing options of one env. Standard library only, so `vecdqn.config`
mirrors these fields without loading an emulator.

Units: ``noop_max`` and ``max_episode_frames`` count emulator frames; one agent step is
``frame_skip`` frames.
"""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from vecdqn.values import check_int

__all__ = ["MAX_SCREEN_SIZE", "EnvOptions"]

# Largest observation side accepted, in pixels: several times an ALE screen (210 x 160). Each game
# holds a few stacks of side**2 bytes, so far larger sides only exhaust the memory.
MAX_SCREEN_SIZE = 1024


def _f(default: Any, help: str) -> Any:  # noqa: A002 - "help" mirrors argparse
    return field(default=default, metadata={"help": help})


@dataclass(frozen=True)
class EnvOptions:
    """The preprocessing options of one env: what `vecdqn.envs.make_env` builds from.

    Units: ``noop_max`` and ``max_episode_frames`` count emulator frames; one agent step is
    ``frame_skip`` frames. Which options an env uses is its family's (`vecdqn.envs.env_family`):
    all of them for ALE games, only ``screen_size`` and ``frame_stack`` for other envs.
    """

    noop_max: int = _f(30, "at most this many no-op frames at the start of each game (0: none; below the frame cap)")
    frame_skip: int = _f(4, "emulator frames per agent step (action repeat; max over the last two)")
    frame_stack: int = _f(4, "frames stacked into one observation")
    screen_size: int = _f(84, "observation height and width in pixels (at most 1024)")
    episodic_life: bool = _f(True, "treat a lost life as the end of an episode for the learner")
    fire_reset: bool = _f(True, "press FIRE after each reset in games that have it")
    repeat_action_probability: float | None = _f(
        None, "sticky-action probability per frame (Machado et al. 2018 use 0.25); unset: the env id's own "
        "default (0.0 for *NoFrameskip-v4 ids, 0.25 for ALE/*-v5 ids)")
    max_episode_frames: int | None = _f(108_000, "truncate a game after this many emulator frames (frames, "
                                                 "not agent steps)")

    def validate(self, name: Callable[[str], str] | None = None) -> None:
        """Check every value's type and range.

        Args:
            name: how an error names an option (default ``"frame_skip=0"`` style; the CLI passes
                `vecdqn.config.option_flag` for ``"--frame-skip 0"``).

        Raises:
            ValueError: naming the option, its value and what is allowed.
        """
        def said(option: str, value: Any) -> str:
            return f"{name(option)} {value}" if name else f"{option}={value!r}"

        for option, minimum, hint in [
            ("noop_max", 0, "use 0 (no no-op starts) or a positive count of frames"),
            ("frame_skip", 1, "use 1 (no frame skipping) or more frames per step"),
            ("screen_size", 1, "use a positive side length in pixels, e.g. 84"),
            ("frame_stack", 1, "use 1 (no stacking) or more frames, e.g. 4"),
        ]:
            check_int(said(option, getattr(self, option)), getattr(self, option), minimum, hint)
        if self.screen_size > MAX_SCREEN_SIZE:
            raise ValueError(f"{said('screen_size', self.screen_size)} is invalid; use at most {MAX_SCREEN_SIZE} "
                             "pixels (ALE screens are 210 x 160; DQN uses 84)")
        for option in ("episodic_life", "fire_reset"):
            value = getattr(self, option)
            if type(value).__name__ not in ("bool", "bool_"):
                raise ValueError(f"{said(option, value)} is invalid; use True or False")
        p = self.repeat_action_probability
        if p is not None and (isinstance(p, bool) or not isinstance(p, numbers.Real) or not 0.0 <= p <= 1.0):
            raise ValueError(f"{said('repeat_action_probability', p)} is invalid; use a probability in [0, 1] "
                             "(0.25 as in Machado et al. 2018, 0.0 for deterministic emulation) or leave it unset "
                             "for the env id's default")
        frames = self.max_episode_frames
        if frames is not None:
            check_int(said("max_episode_frames", frames), frames, 1, "use a positive number of frames (108_000 = "
                      "30 minutes)" + ("" if name else " or None for no cap"))
        # No-op starts are frames of the game: at most the cap's, and 30 minutes' where there is none.
        noop_limit = (frames if frames is not None else 108_000) - 1
        if self.noop_max > noop_limit:
            cap = f"the game's frame cap, {said('max_episode_frames', frames)}" if frames else "30 minutes of frames"
            raise ValueError(f"{said('noop_max', self.noop_max)} is invalid; use at most {noop_limit:,} no-op frames "
                             f"(fewer than {cap}; DQN uses 30)")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
