"""``make_vector_env``: N preprocessed envs (games) in worker processes, and `WorkerGuard`.

Shape legend: ``N`` envs, ``K`` envs per worker process, ``S`` stacked frames (4), ``84`` the
screen size.

With ``envs_per_worker=1`` each env has a process of its own (gymnasium's own worker); with K > 1
each of N / K worker processes steps K envs (`vecdqn.envs.batched`), with the same results per
env, bit for bit.

``AsyncVectorEnv`` with shared memory and ``AutoresetMode.SAME_STEP``: on a step where env ``i``
ends (termination, life loss included, or truncation), the returned ``obs[i]`` is already the
first observation of its next episode, ``info["final_obs"][i]`` the last observation of the
ended one and ``info["final_info"]`` the ended step's info (``"episode"`` when a whole game
ended). The transition to store is ``(obs, action, reward, final_obs, terminated)``.
"""

from __future__ import annotations

import functools
import multiprocessing
import signal
import traceback
import warnings
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AsyncVectorEnv, AutoresetMode

from vecdqn.envs.batched import BatchedVectorEnv, worker_splits
from vecdqn.envs.make import check_env_options, make_env
from vecdqn.envs.options import EnvOptions
from vecdqn.values import check_int

__all__ = ["WorkerError", "WorkerGuard", "make_vector_env"]


class WorkerError(RuntimeError):
    """An env worker raised, died or did not answer in time.

    Its message is one line (which env, of which env id, at which agent step, the exception);
    ``details`` holds what goes with it in a log, such as the failed worker's traceback ("" when
    there is none).
    """

    def __init__(self, message: str, details: str = ""):
        super().__init__(message)
        self.details = details


# gymnasium's AsyncVectorEnv echoes a failed worker's traceback in red as UserWarnings before it
# re-raises the error (`WorkerGuard` reports it itself, in one line; the traceback travels with
# the exception, see `_KeepTraceback`).
GYMNASIUM_ECHO = (r"(\x1b\[[0-9;]*m)?ERROR: (Received the following error from Worker|Traceback \(most recent call "
                  r"last\)|Raising the last exception back to the main process)")


class _KeepTraceback(gym.Wrapper):
    """The outermost wrapper in an env worker: an exception raised by ``reset`` or ``step``
    carries the worker's traceback (``worker_traceback``) back to the main process, which only
    gets the pickled exception from gymnasium."""

    def reset(self, **kwargs: Any) -> Any:
        return self._traced(self.env.reset, **kwargs)

    def step(self, action: Any) -> Any:
        return self._traced(self.env.step, action)

    @staticmethod
    def _traced(call: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return call(*args, **kwargs)
        except Exception as err:
            err.worker_traceback = traceback.format_exc()  # type: ignore[attr-defined]
            raise


def _make_worker_env(env_id: str, options: EnvOptions) -> gym.Env:
    """The thunk each worker runs: registers the env ids in *this* process, then makes the env.

    With the ``spawn`` and ``forkserver`` start methods the worker starts from a fresh
    interpreter, so registrations made in the parent (``gym.register_envs(ale_py)``, the
    import of ``vecdqn`` that registers Catch) do not exist there.
    """
    import cv2

    from vecdqn.envs.family import register_envs

    register_envs()  # the ALE's ids and vecdqn/Catch-v0
    # One worker is one core's worth of work: OpenCV's own thread pool (as many threads as
    # cores, in every worker) would only add contention for the resize of one small frame.
    cv2.setNumThreads(1)
    return _KeepTraceback(make_env(env_id, options))


def _make_game(env_id: str, options: EnvOptions) -> gym.Env:
    """One game of a batched worker (`vecdqn.envs.batched`): as `_make_worker_env`, without the
    traceback wrapper (the batched worker attaches the traceback and the game itself)."""
    return _make_worker_env(env_id, options).env


def make_vector_env(
    env_id: str,
    num_envs: int,
    *,
    context: str | None = None,
    options: EnvOptions | None = None,
    envs_per_worker: int = 1,
    **wrapper_options: Any,
) -> AsyncVectorEnv | BatchedVectorEnv:
    """``num_envs`` copies of ``make_env(env_id, options)`` in worker processes.

    Observations ``(N, S, 84, 84) uint8`` in shared memory; actions ``(N,) int64``; rewards
    ``(N,) float64`` raw; ``terminated``/``truncated`` ``(N,) bool``. ``reset(seed=s)`` seeds
    env ``i`` with ``s + i``. Each step of N envs is N agent steps.

    Args:
        env_id: a registered id, e.g. ``"ALE/Breakout-v5"`` or ``"vecdqn/Catch-v0"``.
        num_envs: number of envs (games), at least 1.
        context: multiprocessing start method (``"fork"``, ``"spawn"``, ``"forkserver"``);
            None: the platform default.
        options: the env options (`vecdqn.envs.EnvOptions`), or give them as keywords
            (``**wrapper_options``, the same names), not both.
        envs_per_worker: K, envs stepped by each worker process, a divisor of ``num_envs``.
            1: gymnasium's `AsyncVectorEnv` with a process per env, its infos whole. K > 1: a
            `vecdqn.envs.batched.BatchedVectorEnv` of N / K processes, whose step infos hold
            only ``episode``, ``final_obs`` and ``final_info`` (the same observations, rewards,
            flags, final observations and episode statistics as K = 1).

    Raises:
        ValueError: ``num_envs < 1``, ``envs_per_worker`` not a divisor of it, an unknown start
            method, env id or option, or an invalid option value; all checked before any worker
            process starts.
    """
    check_int(f"num_envs={num_envs!r}", num_envs, 1, "use at least 1 env")
    check_int(f"envs_per_worker={envs_per_worker!r}", envs_per_worker, 1, f"use a divisor of num_envs={num_envs}: "
              f"{worker_splits(num_envs)}")
    methods = multiprocessing.get_all_start_methods()
    if context is not None and context not in methods:
        raise ValueError(f"context={context!r} is not a start method here; use one of {methods}")
    options = check_env_options(env_id, options, **wrapper_options)
    if envs_per_worker > 1:
        make_game = functools.partial(_make_game, env_id, options)
        return BatchedVectorEnv(make_game, num_envs, envs_per_worker, context=context)
    thunk = functools.partial(_make_worker_env, env_id, options)
    return AsyncVectorEnv(
        [thunk] * num_envs,
        shared_memory=True,
        context=context,
        autoreset_mode=AutoresetMode.SAME_STEP,
    )


class WorkerGuard:
    """An ``AsyncVectorEnv`` whose every call turns a worker's failure into one `WorkerError`.

    A worker can raise, be killed or hang at any moment, also while the main process is busy
    elsewhere: the next call into the vector env (``reset``, ``step_async``, ``step_wait``,
    the snapshot ``get_attr``/``set_attr``) then raises `WorkerError` naming the failed env(s),
    the env id and the agent step, whatever gymnasium raised (a worker's exception,
    ``BrokenPipeError``, ``EOFError``, a timeout); a worker's traceback is its ``details``.
    gymnasium's own coloured echo of that traceback on stderr is filtered out (`GYMNASIUM_ECHO`,
    a warnings filter of the whole process, added by each guard).

    Args:
        envs: the vector env (`make_vector_env`'s result).
        timeout: seconds a worker may take to answer a step or reset.
        env_id: the envs' id, named in the errors.
    """

    def __init__(self, envs: AsyncVectorEnv, timeout: float, env_id: str = ""):
        self.envs = envs
        self.timeout = timeout
        self.env_id = env_id
        warnings.filterwarnings("ignore", message=GYMNASIUM_ECHO, category=UserWarning)

    @classmethod
    def start(cls, env_id: str, num_envs: int, options: EnvOptions, timeout: float,
              envs_per_worker: int = 1) -> WorkerGuard:
        """Start the workers (`make_vector_env`, ``envs_per_worker`` envs each) ignoring
        SIGINT/SIGTERM (the disposition is inherited): a Ctrl-C reaches the whole process group,
        and the main process, not each worker, decides how to stop."""
        old = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            envs = make_vector_env(env_id, num_envs, options=options, envs_per_worker=envs_per_worker)
            return cls(envs, timeout, env_id)
        finally:
            for s, handler in old.items():
                signal.signal(s, handler)

    @property
    def single_observation_space(self) -> gym.Space:
        return self.envs.single_observation_space

    @property
    def single_action_space(self) -> gym.Space:
        return self.envs.single_action_space

    @property
    def closed(self) -> bool:
        return self.envs.closed

    def failed_workers(self, game: int | None = None) -> str:
        """Name the failed env workers, their envs and the env id: gymnasium drops the pipe of a
        worker that raised; a killed worker shows as a dead process. ``game``: the env that
        raised, when the worker said which."""
        failed = {i for i, pipe in enumerate(self.envs.parent_pipes) if pipe is None}
        failed |= {i for i, p in enumerate(self.envs.processes) if not p.is_alive()}
        return self._named(sorted(failed), game)

    def _named(self, workers: list[int], game: int | None = None) -> str:
        """With a process per env ``"env 3 (ALE/Pong-v5)"``; with K envs per worker the env that
        failed and its worker, ``"env 5 (worker 1 of envs 4-7, ALE/Pong-v5)"``, or where no env
        said so, the worker's envs, ``"envs 4-7 (worker 1, ALE/Pong-v5)"``."""
        k = getattr(self.envs, "envs_per_worker", 1)
        named = [self.env_id] if self.env_id else []
        if k == 1 or not workers:
            envs = workers or ([] if game is None else [game])
            which = "env " + ", ".join(map(str, envs)) if envs else "an env worker"
        elif game is not None:
            which = f"env {game}"
            named.insert(0, ", ".join(f"worker {w} of envs {w * k}-{(w + 1) * k - 1}" for w in workers))
        else:
            which = "envs " + ", ".join(f"{w * k}-{(w + 1) * k - 1}" for w in workers)
            named.insert(0, ("workers " if len(workers) > 1 else "worker ") + ", ".join(map(str, workers)))
        return f"{which} ({', '.join(named)})" if named else which

    def _failure(self, step: int, err: BaseException, doing: str = "") -> WorkerError:
        """One line naming the env(s) and the exception; the worker's traceback as ``details``.
        gymnasium re-raises a worker's exception as ``type(e)(e)``: ``e``, unpickled, carries it."""
        doing = f" ({doing})" if doing else ""
        original = err.args[0] if err.args and isinstance(err.args[0], BaseException) else err
        message = str(err).strip()
        message = message.splitlines()[0] if message else ""
        trace = getattr(original, "worker_traceback", "")
        which = self.failed_workers(getattr(original, "game", None))
        return WorkerError(f"{which} failed at agent step {step}{doing}: {type(err).__name__}: "
                           f"{message}", f"In the env worker's process:\n{trace}" if trace else "")

    def reset(self, seed: int, step: int) -> tuple[np.ndarray, dict[str, Any]]:
        """``reset(seed=seed)``: env ``i`` gets ``seed + i``. Returns ``(N, S, 84, 84) uint8`` obs."""
        try:
            return self.envs.reset(seed=seed)
        except Exception as err:
            raise self._failure(step, err, "reset") from err

    def step_async(self, actions: np.ndarray, step: int) -> None:
        """Send ``(N,) int64`` actions; returns at once while the workers emulate."""
        try:
            self.envs.step_async(actions)
        except Exception as err:  # a dead worker's pipe: BrokenPipeError, EOFError
            raise self._failure(step, err, "sending actions") from err

    def step_wait(self, step: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """The results of `step_async`: obs, rewards, terminated, truncated, infos."""
        try:
            return self.envs.step_wait(timeout=self.timeout)
        except multiprocessing.TimeoutError:
            # The workers that have not answered are those whose pipe holds no reply.
            hung = [i for i, pipe in enumerate(self.envs.parent_pipes) if pipe is not None and not pipe.poll(0)]
            which = self._named(hung)
            raise WorkerError(f"{which} did not answer within --worker-timeout {self.timeout} s "
                              f"at agent step {step}") from None
        except Exception as err:  # the worker's own exception, re-raised by gymnasium, or a dead pipe
            raise self._failure(step, err) from err

    def _check_alive(self, what: str, step: int) -> None:
        """``get_attr``/``set_attr`` wait without a timeout: refuse first if a worker is gone."""
        if any(pipe is None for pipe in self.envs.parent_pipes) or not all(
            p.is_alive() for p in self.envs.processes
        ):
            raise WorkerError(f"{self.failed_workers()} is not running ({what} at agent step {step})")

    def snapshots(self, step: int) -> list[Any] | None:
        """Each env's snapshot (emulator, RNGs, wrapper state), or None for envs without one."""
        self._check_alive("snapshotting the envs", step)
        try:
            return list(self.envs.get_attr("snapshot"))
        except AttributeError:
            return None
        except Exception as err:
            raise self._failure(step, err, "snapshot") from err

    def restore(self, snapshots: list[Any], step: int) -> bool:
        """Put each env back into its snapshot; False if the envs cannot be restored."""
        self._check_alive("restoring the envs", step)
        try:
            self.envs.set_attr("snapshot", snapshots)
            return True
        except (AttributeError, TypeError, ValueError):
            return False
        except Exception as err:
            raise self._failure(step, err, "restore") from err

    def close(self) -> None:
        """Close the workers normally (each finishes its current call; a step still pending, as
        after a stop signal, is awaited and its result dropped without gymnasium's warning)."""
        if not self.envs.closed:
            try:
                with warnings.catch_warnings():
                    warnings.filterwarnings("ignore", message=".*Calling `close` while waiting for a pending call")
                    self.envs.close()
            except Exception:  # a dead worker's pipe: nothing left to close politely
                self.force_close()

    def force_close(self) -> None:
        """Stop every worker now. The workers ignore SIGTERM (see `start`), so gymnasium's
        ``close(terminate=True)`` alone would wait for a hung one forever: SIGKILL first."""
        for process in self.envs.processes:
            if process.is_alive():
                process.kill()
        if not self.envs.closed:
            self.envs.close(terminate=True)
