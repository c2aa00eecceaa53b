"""The Ray side of the learner: a local or joined Ray instance (`start_ray`) and the actors with
their bounded queue of block requests (`ActorPool`).

**Backpressure.** Each actor has at most ``in_flight`` block requests outstanding (2 by
default: one it plays, one queued behind it, so it never waits for the learner's round trip).
A finished block waits in Ray's object store until the learner takes it; the learner asks an
actor for a new block only after taking one of its finished ones. So when the learner falls
behind, the actors stop (idle) after ``in_flight`` blocks each: nothing is dropped, and the
object store holds at most ``A · in_flight`` blocks (``A·in_flight·T·K`` frames).

**Restarts.** Actors are created with ``max_restarts=-1``: when an actor's process dies (killed,
out of memory), Ray starts a new one from the same constructor arguments (fresh games). Its
outstanding requests fail with ``RayActorError``; the pool logs one line, counts the restart
(``restarts``, once per death), drops that actor's other requests, tells the learner
(``on_restart``) and asks the new process for blocks (requests that fail while it restarts
are retried every 0.5 s without counting again).

**Failures.** An actor whose env raises (its process lives on) stops the run as a failed env
worker stops the single-process trainer: `take` raises one `WorkerError` line naming the actor,
its env, the env id and the exception (the tracebacks are its ``details``), and the learner
writes a checkpoint before it stops.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import re
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import IO, Any

import ray
from ray.exceptions import AuthenticationError, RayActorError, RayTaskError

from vecdqn.config import Config
from vecdqn.distributed.actor import Actor, apex_epsilons
from vecdqn.distributed.blocks import Block
from vecdqn.envs import WorkerError
from vecdqn.preflight import ConfigError, ray_address, said_ray_address

__all__ = ["ActorPool", "start_ray"]


def start_ray(address: str, actors: int) -> bool:
    """Connect to Ray: ``address`` (``"auto"`` or ``host:port``), or else the ``RAY_ADDRESS``
    environment variable (set on the nodes of a Ray cluster), joins a running instance, which
    keeps its own resources; with neither, a local instance starts, listening on 127.0.0.1 only,
    without the dashboard, with at least one CPU per actor (actors oversubscribe a small machine
    rather than wait to be scheduled).

    Call it inside the ``try`` whose ``finally`` calls ``ray.shutdown()``, with a Ctrl-C held for
    after the start (`vecdqn.signals.StopSignals.held`): a start cut halfway leaves processes that
    nothing stops. SIGINT is blocked while Ray starts its processes, which inherit that: a Ctrl-C
    reaches a terminal's whole process group, and this process, not each of Ray's, decides how to
    stop (``ray.shutdown()`` stops them), as the env workers ignore it (`vecdqn.envs.WorkerGuard.start`).

    Returns:
        True when this call connected (the caller calls ``ray.shutdown()`` at the end, which
        also stops a local instance); False when Ray was already initialized in this process.

    Raises:
        ConfigError: no instance answers at ``address`` or ``RAY_ADDRESS``, or it refuses this
            process's authentication token (one line naming it and what to do, Ray's own retry
            warnings kept off the terminal; `vecdqn.preflight.check_ray_address` finds most
            unanswered addresses before anything starts).
    """
    if ray.is_initialized():
        return False
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        if ray_address(address)[0]:
            # Ray refuses num_cpus/num_gpus when it joins: the instance was sized when it started.
            with _stderr_kept() as kept:
                try:
                    ray.init(address=address or None, log_to_driver=False, logging_level=logging.WARNING)
                except (ConnectionError, AuthenticationError) as err:
                    kept.seek(0)
                    raise _join_error(address, err, kept.read().decode(errors="replace")) from None
        else:
            ray.init(_node_ip_address="127.0.0.1", include_dashboard=False,
                     num_cpus=max(os.cpu_count() or 1, actors), log_to_driver=False, logging_level=logging.WARNING)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    return True


@contextlib.contextmanager
def _stderr_kept() -> Iterator[IO[bytes]]:
    """File descriptor 2 into a temporary file for the block, where Ray's C++ core writes its
    warnings while it retries a connection (~20 lines in 20 s when the instance refuses this
    process's authentication token): written back to stderr after the block, dropped if it
    raises (its one line says what went wrong)."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as kept:
        os.dup2(kept.fileno(), 2)
        try:
            yield kept
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
        kept.seek(0)  # only when the block did not raise
        written = kept.read()
        if written:
            os.write(2, written)


def _join_error(address: str, err: Exception, stderr: str) -> ConfigError:
    """The one line for a Ray instance that could not be joined (``stderr``: what Ray wrote while
    it tried): a refused authentication token, or none answering."""
    said, env = said_ray_address(address), ray_address(address)[1] == "RAY_ADDRESS"
    if isinstance(err, AuthenticationError) or "InvalidAuthToken" in stderr or "Unauthenticated" in stderr:
        return ConfigError(
            f"{said}: the Ray instance there runs with token authentication and refused this process's token "
            "(missing or not its own); give its token as RAY_AUTH_TOKEN, in ~/.ray/auth_token or in the file "
            f"RAY_AUTH_TOKEN_PATH names, or {'unset RAY_ADDRESS' if env else 'leave --ray-address out'} to let "
            "the run start its own")
    return ConfigError(f"{said}: {first_line(err)}; start that Ray instance, give a running one's address with "
                       "--ray-address, or leave both out to let the run start its own")


ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")


def first_line(err: BaseException) -> str:
    """The first line of an error's message, of the actor's own exception for a `RayTaskError`
    (whose message is the remote traceback, with terminal colour codes), without escape codes."""
    cause = getattr(err, "cause", None)
    if isinstance(err, RayTaskError) and isinstance(cause, BaseException):
        err = cause
    text = ANSI_ESCAPE.sub("", str(err)).strip()
    return text.splitlines()[0] if text else type(err).__name__


def actor_failure(actor: int, err: RayTaskError | RayActorError) -> WorkerError:
    """A `WorkerError` for an actor whose task or constructor raised: one line naming the actor
    and the exception (an env's `WorkerError` already names the env, its id and its exception);
    its ``details`` the actor's traceback without colour codes, then an env worker's own."""
    text = ANSI_ESCAPE.sub("", str(err)).strip()
    cause = getattr(err, "cause", None)
    if isinstance(err, RayTaskError) and isinstance(cause, BaseException):
        said = first_line(cause)
        line = said if isinstance(cause, WorkerError) else f"{type(cause).__name__}: {said}"
        worker = cause.details if isinstance(cause, WorkerError) else ""
    else:
        # A constructor's error reaches the learner as the text of the actor's traceback only:
        # its last "Type: message" line names the exception.
        raised = re.findall(r"^([A-Za-z_][\w.]*): (.+)$", text, re.M)
        line, worker = first_line(err), ""
        if raised:
            kind, message = raised[-1]
            kind = kind.rsplit(".", 1)[-1]
            line = message if kind == "WorkerError" else f"{kind}: {message}"
    details = f"In actor {actor}'s process:\n{text}" + (f"\n{worker}" if worker else "")
    return WorkerError(f"actor {actor}: {line}", details)


class ActorPool:
    """``A`` Ray actors (`Actor`, one process each) and their outstanding block requests.

    Args:
        config: the run's configuration (``actors``, ``actor_envs``, ``apex_epsilon``,
            ``apex_alpha``, ``actor_block_steps``).
        n_actions, obs_shape: ``A`` actions and ``(S, H, W)``.
        seed: actor ``i``'s env ``k`` is seeded ``seed + i·K + k``.
        on_restart: called with an actor's index when its process died.
        log: prints one line.
        in_flight: block requests outstanding per actor (see the module's "Backpressure").
    """

    def __init__(self, config: Config, n_actions: int, obs_shape: tuple[int, int, int], seed: int, *,
                 on_restart: Callable[[int], None] = lambda actor: None, log: Callable[[str], None] = print,
                 in_flight: int = 2):
        c = self.config = config
        remote = ray.remote(Actor).options(num_cpus=1, max_restarts=-1, max_task_retries=0)
        self.epsilons = apex_epsilons(c.actors, c.apex_epsilon, c.apex_alpha)
        self.handles = [remote.remote(i, c, eps, seed + i * c.actor_envs, n_actions, obs_shape)
                        for i, eps in enumerate(self.epsilons)]
        self.on_restart, self.log, self.in_flight = on_restart, log, in_flight
        self.requests: list[collections.deque[Any]] = [collections.deque() for _ in self.handles]
        self.restarts = 0
        self.restarting: set[int] = set()  # actors whose new process has not delivered a block yet
        self._retry_at = [0.0] * len(self.handles)  # monotonic time before which a restarting actor is not asked
        self.version, self.weights = -1, None
        self.versions = [-1] * len(self.handles)  # weights version of each actor's latest block

    def publish(self, version: int, state_dict: dict[str, Any]) -> None:
        """Put the weights (``{name: tensor}``) into the object store once, as NumPy arrays that
        every actor on a node reads without a copy; the next requests carry their reference."""
        self.weights = [ray.put({name: value.detach().cpu().numpy() for name, value in state_dict.items()})]
        self.version = version

    def fill(self) -> None:
        """Top every actor up to ``in_flight`` outstanding requests."""
        steps, now = self.config.actor_block_steps, time.monotonic()
        for handle, queue, retry_at in zip(self.handles, self.requests, self._retry_at):
            while len(queue) < self.in_flight and now >= retry_at:
                queue.append(handle.collect.remote(steps, self.version, self.weights))

    def take(self, timeout: float) -> list[Block]:
        """The finished blocks at the head of each actor's queue, in each actor's order, waiting
        up to ``timeout`` seconds for the first; then tops the queues up again (`fill`).

        Raises:
            WorkerError: an actor's ``collect`` raised (e.g. its env worker failed), one line
                naming the actor and the cause (`actor_failure`).
        """
        heads = [queue[0] for queue in self.requests if queue]
        if not heads:
            self.fill()
            return []
        ready, _ = ray.wait(heads, num_returns=1, timeout=timeout)
        if not ready:
            return []
        blocks = []
        for actor, queue in enumerate(self.requests):
            while queue:
                finished, _ = ray.wait([queue[0]], timeout=0)
                if not finished:
                    break
                try:
                    block = ray.get(queue.popleft())
                except RayActorError as err:
                    self._restarted(actor, err)
                    break
                except RayTaskError as err:
                    raise actor_failure(actor, err) from None
                self.restarting.discard(actor)
                self.versions[actor] = block.weights_version
                blocks.append(block)
        self.fill()
        return blocks

    def _restarted(self, actor: int, err: RayActorError) -> None:
        """One line, one count per death; the dead process's other requests are dropped (they
        fail too), and requests that fail while Ray restarts it are retried every 0.5 s."""
        self.requests[actor].clear()
        self._retry_at[actor] = time.monotonic() + 0.5
        if actor in self.restarting:
            return
        self.restarting.add(actor)
        self.restarts += 1
        self.log(f"actor {actor} died ({type(err).__name__}: {first_line(err)[:160]}); Ray restarts it with fresh "
                 f"games (restart {self.restarts} of this run)")
        self.on_restart(actor)

    def pids(self, timeout: float = 30.0) -> list[int]:
        """Each actor's process id (waiting, up to ``timeout`` seconds, for each to have started)."""
        return ray.get([handle.pid.remote() for handle in self.handles], timeout=timeout)

    def wait_started(self, timeout: float) -> None:
        """Wait until every actor has started (its envs made and reset), so that no actor's games
        reach the replay before another's could: a run's first blocks then come from all actors,
        however slowly a cold machine starts their processes.

        Raises:
            WorkerError: naming the actors that did not start within ``timeout`` seconds, or the
                actor that raised while starting and its error (`actor_failure`).
        """
        refs = [handle.pid.remote() for handle in self.handles]
        ready, waiting = ray.wait(refs, num_returns=len(refs), timeout=timeout)
        if waiting:
            late = ", ".join(str(refs.index(ref)) for ref in waiting)
            raise WorkerError(f"actor {late} of {len(refs)} did not start within {timeout:.0f} s (its env workers "
                              f"for {self.config.env_id}); see the run's log for Ray's messages")
        for actor, ref in enumerate(refs):
            try:
                ray.get(ref)
            except (RayActorError, RayTaskError) as err:
                raise actor_failure(actor, err) from None

    def close(self, timeout: float = 10.0) -> None:
        """Stop the actors' env workers politely (up to ``timeout`` seconds), then the actors.

        The outstanding requests are read before they are dropped, errors included: Ray prints
        an error that nobody read, when its last reference goes, as a remote traceback in colour
        on stderr ("Unhandled error"), e.g. the queued request of an actor whose env failed."""
        requests = [request for queue in self.requests for request in queue]
        for request in requests:
            try:
                ray.cancel(request, force=False)
            except Exception:  # noqa: BLE001 - already finished, or its actor is gone
                pass
        try:
            # An actor runs its calls in order: once its close has run, its requests are done.
            ray.get([handle.close.remote() for handle in self.handles], timeout=timeout)
        except Exception:  # noqa: BLE001 - a dead or hung actor: killed below either way
            pass
        done, _ = ray.wait(requests, num_returns=len(requests), timeout=0) if requests else ([], [])
        for request in done:
            try:
                ray.get(request, timeout=0)
            except Exception:  # noqa: BLE001 - read so that Ray does not print it; the run has its error
                pass
        for queue in self.requests:
            queue.clear()
        for handle in self.handles:
            ray.kill(handle, no_restart=True)

