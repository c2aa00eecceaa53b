"""Batched env workers: each worker process of gymnasium's `AsyncVectorEnv` steps K games.

Shape legend: ``N`` games (envs), ``W`` worker processes, ``K = N / W`` games per worker,
``S`` stacked frames, ``H×W`` a frame.

One process per game (gymnasium's default worker) pays, for every game and every agent step, a
pipe round trip, a process wake-up and a pickled info dict, and puts N processes on a few cores.
Here a worker holds K games, each with its own wrapper chain (`vecdqn.envs.make_env`) and its own
seed, and per vector step::

    main process   ── actions (K,) ──►  worker w: for each of its K games j:
                                            step (and on an episode's end: reset, SAME_STEP)
                                            write obs into shared memory row w·K + j
                   ◄── rewards (K,), flags (K,), infos of the games that ended ──

so one vector step of N games costs W round trips, not N. The observations are written once,
straight into the shared-memory block of the `AsyncVectorEnv` (``(W, K, S, H, W)``, the same
bytes as ``(N, S, H, W)``); a step's info carries only what the trainer reads (``info_keys``,
default ``("episode",)``), plus ``final_obs``/``final_info`` of the games that ended.

Everything per game is as with one process per game (`vecdqn.envs.make_vector_env` with
``envs_per_worker=1``), bit for bit: SAME_STEP autoreset, ``final_obs`` and ``final_info``,
whole-game episode statistics, life loss, truncation, no-op and FIRE resets, sticky actions;
game ``i`` is seeded ``seed + i``. `AsyncVectorEnv` stays the process engine: this module gives
it the worker (``worker=``) and the K games as one env of each worker (`GameBatch`), and
`BatchedVectorEnv` presents the W workers as a vector env of N games.
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

__all__ = ["TRAINER_INFO_KEYS", "BatchedVectorEnv", "GameBatch", "worker_splits"]

# The info keys the trainer reads from a step (`vecdqn.acting.ended_games`): a game's statistics.
TRAINER_INFO_KEYS = ("episode",)


def worker_splits(num_envs: int) -> list[int]:
    """The games-per-worker counts ``K`` that split ``num_envs`` games evenly (its divisors).

    >>> worker_splits(12)
    [1, 2, 3, 4, 6, 12]
    """
    return [k for k in range(1, num_envs + 1) if num_envs % k == 0]


class GameBatch:
    """The K games of one worker: game ``first + j`` is ``make_game()``'s ``j``-th env.

    Only the first game is made on construction (its spaces are the batch's; the main process
    makes one `GameBatch` just to read them); `start` makes the others, in the worker.

    Spaces: observations ``(K, S, H, W)`` uint8 (the game's space batched), actions
    ``MultiDiscrete([A] * K)``.

    Args:
        make_game: builds one game's env (called K times in the worker).
        first: the index of this batch's first game among all N.
        count: K.
        workers: W, the number of batches (the shared-memory block holds W × K observations).
        info_keys: the info keys passed back per game (None: all of them).
    """

    def __init__(self, make_game: Callable[[], gym.Env], first: int, count: int, workers: int,
                 info_keys: Sequence[str] | None):
        self.make_game, self.first, self.count, self.workers = make_game, first, count, workers
        self.info_keys = None if info_keys is None else frozenset(info_keys)
        self.games = [make_game()]
        self.current: int | None = None  # the game being stepped (named if it raises)
        self.single_observation_space = self.games[0].observation_space
        self.observation_space = batch_space(self.single_observation_space, count)
        self.action_space = batch_space(self.games[0].action_space, count)
        self.metadata = self.games[0].metadata
        self.render_mode = self.games[0].render_mode

    def start(self) -> None:
        """Make the other K − 1 games (once; later calls do nothing)."""
        if len(self.games) < self.count:
            self.games += [self.make_game() for _ in range(self.count - len(self.games))]

    def close(self) -> None:
        for game in self.games:
            game.close()

    def step(self, actions: Sequence[int], rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, list]:
        """Step each game with its action, resetting the games that end (SAME_STEP autoreset),
        and write each game's next observation into ``rows[j]``.

        Args:
            actions: ``(K,)`` one action per game.
            rows: ``(K, S, H, W) uint8``, written in place (the shared-memory rows).

        Returns:
            ``(rewards (K,) float64, terminated (K,) bool, truncated (K,) bool, infos)``, ``infos``
            a list of ``(j, info)`` for the games whose kept info is not empty; a game that ended
            has ``final_obs`` (its episode's last observation) and ``final_info`` there, and
            ``rows[j]`` holds its next episode's first observation.
        """
        rewards = np.zeros(self.count, dtype=np.float64)
        terminated = np.zeros(self.count, dtype=np.bool_)
        truncated = np.zeros(self.count, dtype=np.bool_)
        infos = _GameInfos()
        for j, env in enumerate(self.games):
            self.current = self.first + j
            obs, rewards[j], terminated[j], truncated[j], info = env.step(actions[j])
            if terminated[j] or truncated[j]:
                reset_obs, reset_info = env.reset()
                info = {"final_info": self.kept(info), "final_obs": obs, **self.kept(reset_info)}
                obs = reset_obs
            else:
                info = self.kept(info)
            rows[j] = obs
            if info:
                infos.append((j, info))
        self.current = None
        return rewards, terminated, truncated, infos

    def reset(self, seeds: Sequence[int | None], options: dict[str, Any] | None, rows: np.ndarray) -> list:
        """Reset each game with its seed, writing its first observation into ``rows[j]``;
        returns the non-empty kept infos as ``[(j, info), ...]``."""
        infos = _GameInfos()
        for j, env in enumerate(self.games):
            self.current = self.first + j
            rows[j], info = env.reset(seed=seeds[j], options=options)
            if info := self.kept(info):
                infos.append((j, info))
        self.current = None
        return infos

    def call(self, name: str, args: tuple, kwargs: dict[str, Any]) -> list[Any]:
        """Each game's ``name`` (through its wrappers), called with the arguments if callable."""
        results = []
        for j, env in enumerate(self.games):
            self.current = self.first + j
            attr = env.get_wrapper_attr(name)
            results.append(attr(*args, **kwargs) if callable(attr) else attr)
        self.current = None
        return results

    def set_attr(self, name: str, values: Sequence[Any]) -> None:
        """Set ``name`` (through the wrappers) to ``values[j]`` in game ``j``."""
        for j, env in enumerate(self.games):
            self.current = self.first + j
            env.set_wrapper_attr(name, values[j])
        self.current = None


    def kept(self, info: dict[str, Any]) -> dict[str, Any]:
        """``info`` less the keys nobody reads (`info_keys`)."""
        if self.info_keys is None:
            return info
        return {k: v for k, v in info.items() if k in self.info_keys}


class _GameInfos(list):
    """``[(j, info), ...]``: one worker's non-empty per-game infos of a step, j its game's index
    in the worker. A list subclass so that gymnasium's info batching keeps it whole (as an object)."""


def _batched_worker(index: int, env_fn: Callable[[], GameBatch], pipe: Any, parent_pipe: Any,
                    shared_memory: Any, error_queue: Any, autoreset_mode: AutoresetMode,
                    semaphore: Any) -> None:
    """The worker process of `BatchedVectorEnv` (gymnasium's ``worker=`` signature): the commands
    of gymnasium's own worker, each applied to the K games in turn (SAME_STEP autoreset only).

    A game's exception goes back as gymnasium's worker sends it, carrying ``game`` (the failing
    game's index among all N), ``worker`` and ``worker_traceback``.
    """
    assert autoreset_mode == AutoresetMode.SAME_STEP, autoreset_mode
    parent_pipe.close()
    if hasattr(os, "SCHED_BATCH"):
        os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
    batch: GameBatch | None = None
    try:
        batch = env_fn()
        space = batch.observation_space
        rows = np.frombuffer(shared_memory.get_obj(), dtype=space.dtype).reshape(
            (batch.workers, *space.shape))[index]
        while True:
            command, data = pipe.recv()
            if command in ("reset", "step", "_call", "_setattr"):
                # The other K - 1 games are made at the first command that needs them, not before the
                # start-up's space check: the main process ignores Ctrl-C until that check is answered.
                batch.start()
            if command == "step":
                rewards, terminated, truncated, infos = batch.step(data, rows)
                pipe.send(((None, rewards, terminated, truncated, {"games": infos} if infos else {}), True))
            elif command == "reset":
                seeds = data["seed"] if isinstance(data["seed"], list) else [data["seed"]] * batch.count
                infos = batch.reset(seeds, data["options"], rows)
                pipe.send(((None, {"games": infos} if infos else {}), True))
            elif command == "_call":
                pipe.send((batch.call(*data), True))
            elif command == "_setattr":
                batch.set_attr(*data)
                pipe.send((None, True))
            elif command == "_check_spaces":
                _, observation_space, action_space = data
                pipe.send(((observation_space == batch.observation_space, action_space == batch.action_space), True))
            elif command == "close":
                pipe.send((None, True))
                break
            else:
                raise RuntimeError(f"batched env worker: unknown command {command!r}")
    except (KeyboardInterrupt, Exception) as err:
        error_type, _, _ = sys.exc_info()
        trace = traceback.format_exc()
        err.game = None if batch is None else batch.current  # type: ignore[attr-defined]
        err.worker = index  # type: ignore[attr-defined]
        err.worker_traceback = trace  # type: ignore[attr-defined]
        error_queue.put((index, error_type, err, trace))
        pipe.send((None, False))
    finally:
        if batch is not None:
            batch.close()


class BatchedVectorEnv(VectorEnv):
    """N games in W worker processes of K games each, as a vector env of N games.

    Observations ``(N, S, H, W) uint8`` (a view of the shared-memory block, or a copy with
    ``copy=True``), actions ``(N,) int64``, rewards ``(N,) float64`` raw, flags ``(N,) bool``,
    infos batched over the N games as gymnasium batches them. ``reset(seed=s)`` seeds game ``i``
    with ``s + i``. ``get_attr``/``set_attr`` take and give one value per game.

    Attributes:
        engine: the `AsyncVectorEnv` of the W workers (its ``processes``, ``parent_pipes``).
        envs_per_worker: K.

    Args:
        make_game: builds one game's env (in the worker).
        num_envs: N.
        envs_per_worker: K, a divisor of N.
        context: the multiprocessing start method (None: the platform default).
        copy: return a copy of the observations (else a view that the next step overwrites).
        info_keys: the info keys each game passes back (None: all), besides ``final_obs`` and
            ``final_info`` (itself reduced to these keys) of the games that ended.

    Raises:
        ValueError: ``envs_per_worker`` does not divide ``num_envs``.
    """

    def __init__(self, make_game: Callable[[], gym.Env], num_envs: int, envs_per_worker: int, *,
                 context: str | None = None, copy: bool = True,
                 info_keys: Sequence[str] | None = TRAINER_INFO_KEYS):
        if num_envs % envs_per_worker:
            raise ValueError(f"envs_per_worker={envs_per_worker} does not divide num_envs={num_envs}; use one "
                             f"of {worker_splits(num_envs)}")
        self.num_envs, self.envs_per_worker, self.copy = num_envs, envs_per_worker, copy
        workers = num_envs // envs_per_worker
        thunks = [_BatchThunk(make_game, w * envs_per_worker, envs_per_worker, workers, info_keys)
                  for w in range(workers)]
        self.engine = AsyncVectorEnv(thunks, shared_memory=True, copy=False, context=context,
                                     worker=_batched_worker, autoreset_mode=AutoresetMode.SAME_STEP)
        batch_obs = self.engine.single_observation_space
        self.single_observation_space = gym.spaces.Box(batch_obs.low[0], batch_obs.high[0], dtype=batch_obs.dtype)
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.single_action_space = gym.spaces.Discrete(int(self.engine.single_action_space.nvec[0]))
        self.action_space = batch_space(self.single_action_space, num_envs)
        self.metadata = self.engine.metadata
        self.render_mode = self.engine.render_mode
        self.observations = self.engine.observations.reshape(num_envs, *self.single_observation_space.shape)

    @property
    def processes(self) -> list[Any]:
        return self.engine.processes

    @property
    def parent_pipes(self) -> list[Any]:
        return self.engine.parent_pipes

    def games_of(self, worker: int) -> range:
        """The indices of worker ``worker``'s games."""
        return range(worker * self.envs_per_worker, (worker + 1) * self.envs_per_worker)

    def _per_worker(self, values: Sequence[Any]) -> list[list[Any]]:
        """N per-game values as W lists of K, one per worker."""
        return [list(values[g.start:g.stop]) for g in map(self.games_of, range(len(self.processes)))]

    def _observations(self) -> np.ndarray:
        return self.observations.copy() if self.copy else self.observations

    def _game_infos(self, worker_infos: dict[str, Any]) -> dict[str, Any]:
        """The workers' per-game infos batched over the N games."""
        infos: dict[str, Any] = {}
        for w in np.flatnonzero(worker_infos.get("_games", ())):
            for j, info in worker_infos["games"][w]:
                infos = self._add_info(infos, info, w * self.envs_per_worker + j)
        return infos

    def reset(self, *, seed: int | list[int | None] | None = None,
              options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        """Reset every game; ``seed`` an int ``s`` (game ``i`` gets ``s + i``), N seeds, or None."""
        seeds = [seed + i for i in range(self.num_envs)] if isinstance(seed, int) else seed
        if seeds is not None and len(seeds) != self.num_envs:
            raise ValueError(f"{len(seeds)} seeds given for {self.num_envs} envs")
        _, infos = self.engine.reset(seed=None if seeds is None else self._per_worker(seeds), options=options)
        return self._observations(), self._game_infos(infos)

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        self.step_async(actions)
        return self.step_wait()

    def step_async(self, actions: np.ndarray) -> None:
        """Send ``(N,)`` actions, K to each worker; returns at once."""
        self.engine.step_async(np.asarray(actions).reshape(len(self.processes), self.envs_per_worker))

    def step_wait(self, timeout: float | None = None
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """The step's ``(N, S, H, W)`` observations, ``(N,)`` rewards, terminated, truncated, infos.

        Raises:
            multiprocessing.TimeoutError: a worker did not answer within ``timeout`` seconds.
            Exception: a game's own, re-raised as gymnasium re-raises it.
        """
        _, rewards, terminated, truncated, infos = self.engine.step_wait(timeout)
        return (self._observations(), rewards.reshape(-1), terminated.reshape(-1), truncated.reshape(-1),
                self._game_infos(infos))

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Call (or read) ``name`` on every game: N results."""
        return tuple(result for batch in self.engine.call(name, *args, **kwargs) for result in batch)

    def get_attr(self, name: str) -> tuple[Any, ...]:
        return self.call(name)

    def set_attr(self, name: str, values: list[Any] | tuple[Any, ...] | object) -> None:
        """Set ``name`` on every game: one value for all, or one per game."""
        if not isinstance(values, (list, tuple)):
            values = [values] * self.num_envs
        if len(values) != self.num_envs:
            raise ValueError(f"{len(values)} values given for {self.num_envs} envs")
        self.engine.set_attr(name, self._per_worker(values))

    def close_extras(self, **kwargs: Any) -> None:
        self.engine.close(**kwargs)


class _BatchThunk:
    """Builds one worker's `GameBatch` (picklable, for the ``spawn`` start method)."""

    def __init__(self, make_game: Callable[[], gym.Env], first: int, count: int, workers: int,
                 info_keys: Sequence[str] | None):
        self.args = (make_game, first, count, workers, None if info_keys is None else tuple(info_keys))

    def __call__(self) -> GameBatch:
        return GameBatch(*self.args)
