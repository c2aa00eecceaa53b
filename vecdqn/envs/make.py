"""Preprocessed envs from options: ``make_env``.

`make_env` builds an env id's base env through its family's maker (`vecdqn.envs.family`: the DQN
preprocessing of `vecdqn.envs.wrappers` for ALE ids; only RecordEpisodeStatistics for other ids
such as ``vecdqn/Catch-v0``), then resizes and stacks its frames, from one validated
`vecdqn.envs.EnvOptions`.

Shape: observations ``(S, screen_size, screen_size) uint8`` (``S`` = ``frame_stack``).
Units: ``noop_max`` and ``max_episode_frames`` count emulator frames; one agent step is
``frame_skip`` frames.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import gymnasium as gym

from vecdqn.envs.family import env_family
from vecdqn.envs.options import EnvOptions
from vecdqn.envs.wrappers import FrameStack, GrayscaleResize

__all__ = ["check_env_options", "env_options", "make_env"]


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
        ValueError: an unknown id (with close matches), an unknown option, an invalid value, or an
            option its family does not use (`EnvFamily.options`) set away from its default.
    """
    o = env_options(options, **option_kwargs)
    family = env_family(env_id)
    changed = [f.name for f in dataclasses.fields(EnvOptions) if getattr(o, f.name) != f.default]
    unused = family.unused(changed)
    if unused:
        raise ValueError(f"{', '.join(f'{n}={getattr(o, n)!r}' for n in unused)}: {env_id} is an env of the "
                         f"{family.name} family, which takes only {', '.join(sorted(family.options))}; leave "
                         f"{'it' if len(unused) == 1 else 'them'} at the default")
    return o


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
    GrayscaleResize and FrameStack only, and take only ``screen_size`` and ``frame_stack``
    (`vecdqn.envs.env_family`): another option set away from its default is refused.

    Args:
        env_id: a registered gymnasium id.
        options: the preprocessing options (`vecdqn.envs.EnvOptions`: units and defaults
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
    env = env_family(env_id).make(env_id, o, base_wrapper)
    env = GrayscaleResize(env, screen_size=o.screen_size)
    return FrameStack(env, num_stack=o.frame_stack)
