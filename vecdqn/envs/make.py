"""Preprocessed envs from options: the env-id registry, ``make_env`` and ``make_atari_env``.

`make_env` composes `vecdqn.wrappers`' wrappers around ``gym.make``'s env in the order given in
that module's docstring (the DQN preprocessing for ALE ids; only RecordEpisodeStatistics,
GrayscaleResize and FrameStack for other ids such as ``vecdqn/Catch-v0``), from one validated
`vecdqn.config.EnvOptions`. The registry part names which ids exist (with close matches for a
typo) and which are ALE games, without building an env.

Shape: observations ``(S, screen_size, screen_size) uint8`` (``S`` = ``frame_stack``).
Units: ``noop_max`` and ``max_episode_frames`` count emulator frames; one agent step is
``frame_skip`` frames.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Callable
from typing import Any

import ale_py
import gymnasium as gym

from vecdqn.config import EnvOptions
from vecdqn.wrappers import (
    EpisodicLife,
    FireReset,
    FrameStack,
    GrayscaleResize,
    MaxAndSkip,
    NoopReset,
    action_meanings,
)

__all__ = ["check_env_id", "check_env_options", "env_options", "is_ale_env_id", "make_atari_env", "make_env"]

# The ALE's own entry point; envs registered with it get the Atari-only wrappers.
ALE_ENTRY_POINT = "ale_py.env:AtariEnv"


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
    return gym.spec(env_id).entry_point == ALE_ENTRY_POINT


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
        if o.fire_reset and "FIRE" in (action_meanings(env) or []):
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
