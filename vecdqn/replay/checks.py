"""Argument checks shared by the replay modules, and the replay's index error.

Every check raises a `ValueError` (or `ReplayIndexError`, which is one) that names the bad value
and, where there is one, the fix.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["ReplayIndexError", "check_batch", "check_flags", "check_indices", "check_int"]


class ReplayIndexError(IndexError, ValueError):
    """An index outside the tree or the buffer. Both an `IndexError` (it is one) and a
    `ValueError` (the replay's errors for bad arguments), like NumPy's ``AxisError``."""


def check_int(name: str, value: Any, minimum: int) -> int:
    """``value`` as a Python int, which must be an integer (not a bool) ``>= minimum``.

    Raises:
        ValueError: not an integer, or below ``minimum``.
    """
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def check_indices(indices: Any, limit: int, name: str = "indices") -> np.ndarray:
    """``indices`` (any shape, integer) as a flat ``(B,) int64`` array, every entry in ``[0, limit)``.

    Raises:
        ReplayIndexError: an entry outside ``[0, limit)``.
        ValueError: entries that are not integers.
    """
    idx = np.asarray(indices)
    if idx.size == 0:
        return np.zeros(0, dtype=np.int64)
    if idx.dtype == np.bool_ or not np.issubdtype(idx.dtype, np.integer):
        raise ValueError(f"{name} must be integers, got dtype {idx.dtype}")
    flat = idx.astype(np.int64, copy=False).reshape(-1)
    lo, hi = flat.min(), flat.max()
    if lo < 0 or hi >= limit:
        bad = lo if lo < 0 else hi
        raise ReplayIndexError(f"{name} contains {bad}, outside [0, {limit}); pass slot indices "
                               f"returned by add() or sample()")
    return flat


def check_flags(name: str, value: Any, n: int) -> np.ndarray:
    """``(N,) bool`` (or 0/1 integers) -> ``(N,) bool``.

    Raises:
        ValueError: another shape, or values other than bool or 0/1.
    """
    flags = np.asarray(value)
    if flags.shape != (n,):
        raise ValueError(f"{name} has shape {flags.shape}; expected ({n},), one per env")
    if flags.dtype == np.bool_:
        return flags
    if np.issubdtype(flags.dtype, np.integer) and np.isin(flags, (0, 1)).all():
        return flags.astype(bool)
    raise ValueError(f"{name} must be bool (or 0/1), got dtype {flags.dtype}")


def check_batch(obs_shape: tuple[int, ...], obs: Any, actions: Any, rewards: Any, next_obs: Any,
                terminated: Any, truncated: Any) -> tuple[np.ndarray, ...]:
    """Validate one ``add`` batch; a single env's unbatched transition gets an ``N = 1`` axis.

    Returns:
        ``(obs, actions, rewards, next_obs, terminated, truncated)``: ``obs`` and ``next_obs``
        ``(N, S, H, W) uint8``, ``actions (N,)`` integers, ``rewards (N,) float64``, the flags
        ``(N,) bool`` (``truncated`` all False when None).

    Raises:
        ValueError: shapes or dtypes that do not match ``obs_shape`` and each other, non-integer
            actions, rewards that are not finite real numbers.
    """
    obs = np.asarray(obs)
    next_obs = np.asarray(next_obs)
    if obs.shape == obs_shape:  # one env, no batch axis
        obs, next_obs = obs[None], next_obs[None]
        actions, rewards = np.reshape(actions, 1), np.reshape(rewards, 1)
        terminated = np.reshape(terminated, 1)
        truncated = None if truncated is None else np.reshape(truncated, 1)
    if obs.ndim != len(obs_shape) + 1 or obs.shape[1:] != obs_shape:
        raise ValueError(f"obs has shape {obs.shape}; expected (N, {', '.join(map(str, obs_shape))}) "
                         f"for obs_shape {obs_shape}")
    if next_obs.shape != obs.shape:
        raise ValueError(f"next_obs has shape {next_obs.shape}; expected {obs.shape} like obs")
    for name, array in (("obs", obs), ("next_obs", next_obs)):
        if array.dtype != np.uint8:
            raise ValueError(f"{name} has dtype {array.dtype}; expected uint8 pixels")
    n = obs.shape[0]
    actions = np.asarray(actions)
    if actions.shape != (n,):
        raise ValueError(f"actions has shape {actions.shape}; expected ({n},), one per env")
    if actions.dtype == np.bool_ or not np.issubdtype(actions.dtype, np.integer):
        raise ValueError(f"actions must be integers (discrete actions), got dtype {actions.dtype}")
    rewards = np.asarray(rewards)
    if rewards.shape != (n,):
        raise ValueError(f"rewards has shape {rewards.shape}; expected ({n},), one per env")
    if not (np.issubdtype(rewards.dtype, np.floating) or np.issubdtype(rewards.dtype, np.integer)):
        raise ValueError(f"rewards must be real numbers, got dtype {rewards.dtype}")
    rewards = rewards.astype(np.float64)
    if not np.isfinite(rewards).all():
        raise ValueError(f"rewards must be finite, got {rewards}")
    terminated = check_flags("terminated", terminated, n)
    truncated = np.zeros(n, dtype=bool) if truncated is None else check_flags("truncated", truncated, n)
    return obs, actions, rewards, next_obs, terminated, truncated
