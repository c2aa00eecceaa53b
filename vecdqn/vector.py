"""``make_vector_env``: N preprocessed envs, each in its own process.

Shape legend: ``N`` envs, ``S`` stacked frames (4), ``84`` the screen size.

``AsyncVectorEnv`` with shared memory and ``AutoresetMode.SAME_STEP``: on a step where env ``i``
ends (termination, life loss included, or truncation), the returned ``obs[i]`` is already the
first observation of its next episode, ``info["final_obs"][i]`` the last observation of the
ended one and ``info["final_info"]`` the ended step's info (``"episode"`` when a whole game
ended). The transition to store is ``(obs, action, reward, final_obs, terminated)``.
"""

from __future__ import annotations

import functools
import inspect
import multiprocessing
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AsyncVectorEnv, AutoresetMode

from vecdqn.wrappers import check_env_options, make_env

__all__ = ["make_vector_env"]


def _make_worker_env(env_id: str, options: dict[str, Any]) -> gym.Env:
    """The thunk each worker runs: registers the env ids in *this* process, then makes the env.

    With the ``spawn`` and ``forkserver`` start methods the worker starts from a fresh
    interpreter, so registrations made in the parent (``gym.register_envs(ale_py)``, the
    import of ``vecdqn`` that registers Catch) do not exist there.
    """
    import ale_py
    import cv2

    import vecdqn  # noqa: F401  (registers vecdqn/Catch-v0)

    gym.register_envs(ale_py)
    # One worker is one core's worth of work: OpenCV's own thread pool (as many threads as
    # cores, in every worker) would only add contention for the resize of one small frame.
    cv2.setNumThreads(1)
    return make_env(env_id, **options)


def make_vector_env(
    env_id: str,
    num_envs: int,
    *,
    context: str | None = None,
    **wrapper_options: Any,
) -> AsyncVectorEnv:
    """``num_envs`` copies of ``make_env(env_id, **wrapper_options)`` in worker processes.

    Observations ``(N, S, 84, 84) uint8`` in shared memory; actions ``(N,) int64``; rewards
    ``(N,) float64`` raw; ``terminated``/``truncated`` ``(N,) bool``. ``reset(seed=s)`` seeds
    env ``i`` with ``s + i``. Each step of N envs is N agent steps.

    Args:
        env_id: a registered id, e.g. ``"ALE/Breakout-v5"`` or ``"vecdqn/Catch-v0"``.
        num_envs: number of envs (worker processes), at least 1.
        context: multiprocessing start method (``"fork"``, ``"spawn"``, ``"forkserver"``);
            None: the platform default.
        **wrapper_options: keyword options of ``vecdqn.wrappers.make_env``.

    Raises:
        ValueError: ``num_envs < 1``, an unknown start method, env id or option, or an invalid
            option value; all checked before any worker process starts.
    """
    if isinstance(num_envs, bool) or not isinstance(num_envs, (int, np.integer)) or num_envs < 1:
        raise ValueError(f"num_envs={num_envs!r} is invalid; use at least 1 env")
    methods = multiprocessing.get_all_start_methods()
    if context is not None and context not in methods:
        raise ValueError(f"context={context!r} is not a start method here; use one of {methods}")
    allowed = [
        name
        for name, p in inspect.signature(make_env).parameters.items()
        if p.kind is inspect.Parameter.KEYWORD_ONLY
    ]
    unknown = sorted(set(wrapper_options) - set(allowed))
    if unknown:
        raise ValueError(f"unknown env option(s) {unknown}; make_env accepts {allowed}")
    check_env_options(env_id, **wrapper_options)

    thunk = functools.partial(_make_worker_env, env_id, dict(wrapper_options))
    return AsyncVectorEnv(
        [thunk] * num_envs,
        shared_memory=True,
        context=context,
        autoreset_mode=AutoresetMode.SAME_STEP,
    )
