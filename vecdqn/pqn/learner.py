"""`PQNLearner`: PQN behind the seam every learner offers the training core (`vecdqn.learners.Learner`).

Shape legend: ``T`` rollout steps (``--rollout-steps``), ``N`` envs, ``S`` stacked frames,
``H×W`` a frame, ``A`` actions.

What a vector step does here (the core calls these; the vector-env collector in this order)::

    learn(state, k, report)  once the rollout holds T vector steps: its λ-returns, then
                             --epochs passes of --minibatches minibatch updates; a new rollout
    store(transitions)       row t of the rollout; the Q-values of the ended episodes' final
                             observations (a forward pass of those rows only)
    act(next_obs, step)      one forward pass of N observations: ε-greedy actions, and the
                             values max_a Q(s_{t+1}, a) that complete row t's targets

One forward pass per vector step thus serves both the actions and the targets (as CleanRL's
``pqn_atari_envpool.py`` keeps the acting Q-values rather than recompute them). The rollout's
targets use the network as it acted; its update runs while the envs emulate the next step, so
that step's actions were chosen one update earlier (a one-step policy lag).

With ``overlap_update`` the update of rollout k runs on a second thread while the envs collect
rollout k+1 with a copy of the network (``acting``), synced when the next rollout is full::

    main thread:    collect k ─ learn: sync, submit k ─ collect k+1 ──── learn: wait k, sync, submit k+1
    update thread:                         └─ epochs on rollout k ─┘

Rollout k+1 is then collected and bootstrapped with the weights before update k (a one-rollout
policy lag, which Q-learning tolerates: its targets are the max over actions, not the behaviour
policy's). Every wait and sync falls at a fixed point of the run, so it stays a function of its
seed.

Checkpoints hold the rollout so far (a few MB, and the acting copy), so a run resumes exactly at
any agent step.
"""

from __future__ import annotations

import copy
import math
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np
import torch

from vecdqn.acting import epsilon_greedy
from vecdqn.config import Config
from vecdqn.learners import POLICY_KEY
from vecdqn.model import QNetwork
from vecdqn.pqn.agent import PQNAgent
from vecdqn.pqn.returns import lambda_returns
from vecdqn.schedules import Schedules
from vecdqn.train_state import TrainState

__all__ = ["PQNLearner"]

# The rollout's fields: name -> dtype (each (T, N), obs (T, N, S, H, W)).
ROLLOUT = {"obs": np.uint8, "actions": np.int64, "rewards": np.float32, "terminated": np.bool_,
           "truncated": np.bool_, "next_q_max": np.float32}


class PQNLearner:
    """PQN's rollout, Q(λ) returns and epochs of one run (Gallici et al. 2025, Algorithm 1).

    Args:
        config: the run's configuration (``rollout_steps``, ``q_lambda``, ``epochs``,
            ``minibatches``, ``gamma``, the ε and learning-rate schedules, the network's shape).
        device: the learner's device.
        obs_shape: ``(S, H, W)`` of one observation.
        n_actions: ``A``.

    Attributes: ``agent`` (`PQNAgent`: the network, RAdam), ``schedules``, ``t`` (rows of the
    rollout filled so far).
    """

    def __init__(self, config: Config, device: torch.device, obs_shape: tuple[int, ...], n_actions: int):
        c = self.config = config
        self.schedules = Schedules.from_config(c)
        self.agent = PQNAgent(n_actions, obs_shape, device, learning_rate=self.schedules.learning_rate(0),
                              max_grad_norm=c.max_grad_norm, amp=c.amp, seed=c.seed + 1,
                              build=lambda: QNetwork.from_config(c, n_actions, obs_shape))
        self.shuffle = np.random.default_rng(c.seed + 2)  # the minibatches' shuffles
        t, n = c.rollout_steps, c.num_envs
        self.rollout = {name: np.zeros((t, n, *obs_shape) if name == "obs" else (t, n), dtype=dtype)
                        for name, dtype in ROLLOUT.items()}
        self.t = 0
        self._open: np.ndarray | None = None  # (N,) bool: row t-1's targets still to complete by `act`
        self._scalars: dict[str, float] = {}
        self._collect_start = time.perf_counter()
        # --overlap-update: the network that acts while `agent.online` trains, the rollout being
        # learned from, the thread and the update in flight (with its returns' mean and start).
        self.acting: torch.nn.Module | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._pending: tuple[Future, float, float] | None = None
        self._stop = threading.Event()  # set by `close`: the update in flight ends before its next step
        # A finished update's metrics, returns' mean and seconds until `learn` delivers them (`_finish`).
        self._held: dict[str, Any] | None = None
        # Where a finished update's metrics go (the core's check for non-finite values, then its
        # log): set by `learn`, called by `_finish`.
        self._report: Callable[[dict[str, float]], None] | None = None
        if c.overlap_update:
            self.acting = copy.deepcopy(self.agent.online).requires_grad_(False)
            self._learning = {name: np.zeros_like(array) for name, array in self.rollout.items()}
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="vecdqn-pqn-update")

    @property
    def network(self) -> torch.nn.Module:
        """The Q-network, ``(B, S, H, W) uint8 -> (B, A) float32``.

        Raises:
            RuntimeError: an update is in flight (``overlap_update``): call `sync` first.
        """
        self._check_synced("network")
        return self.agent.online

    @property
    def n_actions(self) -> int:
        return self.agent.n_actions

    @property
    def obs_shape(self) -> tuple[int, ...]:
        return self.agent.obs_shape

    def restore(self, saved: dict[str, Any]) -> None:
        """Load a checkpoint's `state_dict` (network, RAdam, generators, the rollout so far, the last
        learned rollout's scalars)."""
        self.agent.load_state_dict(saved)
        self._scalars = dict(saved.get("scalars", {}))
        self._held = saved.get("held")
        if self.acting is not None:
            self.acting.load_state_dict(saved.get("acting", saved[POLICY_KEY]))
        self.shuffle.bit_generator.state = saved["shuffle"]
        self.t = int(saved["t"])
        for name in ROLLOUT:
            self.rollout[name][...] = saved["rollout"][name].numpy()

    def start(self) -> None:
        """Nothing to start: the rollout fills from the first vector step."""
        self._collect_start = time.perf_counter()

    def new_games(self) -> str | None:
        """The envs start new games: a new run, or a resume whose checkpoint cannot continue the
        saved games (a kept ``step_*.pt`` or a failed worker's checkpoint holds no env state). The
        rollout so far then ends at its last row as at a truncation: each env's last saved step
        bootstraps from its stored ``max_a Q(s_{t+1}, a)`` (complete in every checkpoint: the
        `act` after a `store` completes it), and no Q(λ) return runs from one game into another.

        Returns:
            the line that says so, or None when the rollout holds no row yet.
        """
        if self.t == 0:
            return None
        self.rollout["truncated"][self.t - 1] = True
        return (f"the checkpoint holds no env state, so new games start: the saved rollout's {self.t} row"
                f"{'' if self.t == 1 else 's'} end there, each env's last one bootstrapping from its stored "
                "next value (as at a truncation)")

    # -- acting -------------------------------------------------------------------------------------
    def epsilon(self, step: int) -> float:
        """The exploration rate at agent step ``step`` (its schedule)."""
        return self.schedules.epsilon(step)

    def act(self, obs: np.ndarray, step: int) -> np.ndarray:
        """``(N, S, H, W) uint8 -> (N,) int64`` ε-greedy actions at agent step ``step``, from one
        forward pass; when ``obs`` follow a stored step, its ``max_a Q(obs, a)`` complete that
        step's targets (where the step did not end an episode)."""
        q = self.agent.q_values(obs, self.acting)
        if self._open is not None:
            values = q.max(dim=1).values.cpu().numpy()
            self.rollout["next_q_max"][self.t - 1, self._open] = values[self._open]
            self._open = None
        return epsilon_greedy(self.agent.rng, self.schedules.epsilon(step), self.agent.n_actions, obs.shape[0],
                              lambda: q.argmax(dim=1).cpu().numpy())

    # -- learning -----------------------------------------------------------------------------------
    def store(self, obs: np.ndarray, actions: np.ndarray, rewards: np.ndarray, next_obs: np.ndarray,
              terminated: np.ndarray, truncated: np.ndarray) -> np.ndarray:
        """Row ``t`` of the rollout: ``obs (N, S, H, W) uint8``, ``actions (N,) int64``, ``rewards
        (N,)`` (clipped for learning), ``next_obs`` (the final observations where a step ended an
        episode; `vecdqn.acting.stored_next_obs`), ``terminated``/``truncated (N,) bool``. The ended
        envs' ``max_a Q(final_obs, a)`` are computed here; the others come with the next `act`.
        Returns the row's ``(N,) int64`` positions ``t·N + i`` in the rollout.

        Raises:
            RuntimeError: the rollout is full (`learn` did not run).
        """
        if self.t >= self.config.rollout_steps:
            raise RuntimeError("PQNLearner.store takes one vector step into a rollout with room; the rollout "
                               f"holds {self.t} of {self.config.rollout_steps} rows")
        r, t, n = self.rollout, self.t, obs.shape[0]
        r["obs"][t], r["actions"][t], r["rewards"][t] = obs, actions, rewards
        r["terminated"][t], r["truncated"][t] = terminated, truncated
        ended = terminated | truncated
        if ended.any():
            final_q = self.agent.q_values(next_obs[ended], self.acting)
            r["next_q_max"][t, ended] = final_q.max(dim=1).values.cpu().numpy()
        self._open = ~ended
        self.t += 1
        return t * n + np.arange(n, dtype=np.int64)

    def learn(self, state: TrainState, agent_steps: int, report: Callable[[dict[str, float]], None]) -> None:
        """Once the rollout holds ``T`` complete vector steps: its `lambda_returns`, then
        ``epochs × minibatches`` updates (counted in ``state.updates``; their mean metrics to
        ``report``), and a new rollout. Otherwise nothing. With ``overlap_update`` the updates run
        on the update thread (the previous rollout's are waited for first, their metrics reported
        and the acting copy synced).

        Raises:
            NonFiniteError: from ``report``, for an update whose loss or mean Q-value is NaN or
                infinite; with ``overlap_update`` from the next `learn` or `sync` (before an
                evaluation or a checkpoint), whichever waits for that update first.
        """
        c = self.config
        self._report = report
        if self.t < c.rollout_steps or self._open is not None:
            return
        collected = time.perf_counter()
        r = self.rollout
        returns = lambda_returns(torch.from_numpy(r["rewards"]), torch.from_numpy(r["terminated"]),
                                 torch.from_numpy(r["truncated"]), torch.from_numpy(r["next_q_max"]),
                                 c.gamma, c.q_lambda)
        # The previous rollout's update (in flight with overlap_update) ends at its own rate: RAdam
        # reads the rate at every step, so it may change only once that update is done.
        self._finish()
        self.agent.set_learning_rate(self.schedules.learning_rate(state.step))
        state.updates += c.epochs * c.minibatches
        self.t = 0
        rollout_sps = c.rollout_steps * c.num_envs / max(collected - self._collect_start, 1e-9)
        if self._executor is None:
            report(self._update(r, returns))
            self._note(float(returns.mean()), collected, rollout_sps)
            return
        self.acting.load_state_dict(self.agent.online.state_dict())
        self.rollout, self._learning = self._learning, self.rollout  # the next rollout fills the other
        self._pending = (self._executor.submit(self._update, self._learning, returns), float(returns.mean()),
                         collected)
        self._scalars["pqn/rollout_sps"] = rollout_sps
        self._collect_start = time.perf_counter()

    def _update(self, rollout: dict[str, np.ndarray], returns: torch.Tensor) -> dict[str, float]:
        """The epochs of one rollout (`PQNAgent.update`); its mean metrics."""
        return self.agent.update(rollout["obs"], rollout["actions"], returns, epochs=self.config.epochs,
                                 minibatches=self.config.minibatches, generator=self.shuffle, stop=self._stop)

    def _note(self, return_mean: float, started: float, rollout_sps: float | None = None) -> None:
        """The last learned rollout's scalars; the next rollout's collection starts now."""
        done = time.perf_counter()
        self._scalars.update({"pqn/lambda_return_mean": return_mean, "pqn/update_seconds": done - started})
        if rollout_sps is not None:
            self._scalars["pqn/rollout_sps"] = rollout_sps
            self._collect_start = done

    def sync(self) -> None:
        """Wait for the update in flight (``overlap_update``; nothing otherwise), so that `network`
        and `state_dict` show it. Its metrics wait for the next `learn` (see `_finish`).

        Raises:
            NonFiniteError: from the ``report`` of the last `learn`, for a non-finite update.
        """
        self._finish(deliver=False)

    def _check_synced(self, what: str) -> None:
        if self._pending is not None:
            raise RuntimeError(f"PQNLearner.{what} read while an update is in flight; call sync() first")

    def _finish(self, deliver: bool = True) -> None:
        """Wait for the update in flight (if any), whoever waits: the next `learn` or `sync` (an
        evaluation's, a checkpoint's). Its metrics (to ``report``) and scalars are
        delivered by `learn` alone (``deliver``), so the logs are the same wherever evaluations,
        checkpoints or a resume fall; until then they are held, and a checkpoint keeps them. A
        non-finite update is reported at once, whoever waits: it stops the run before its weights
        are evaluated, saved or synced to the acting copy."""
        if self._pending is not None:
            future, return_mean, started = self._pending
            self._pending = None
            metrics = future.result()
            self._held = {"metrics": metrics, "return_mean": return_mean, "seconds": time.perf_counter() - started}
            deliver = deliver or not all(math.isfinite(value) for value in metrics.values())
        if deliver and self._held is not None:
            held, self._held = self._held, None
            self._scalars.update({"pqn/lambda_return_mean": held["return_mean"],
                                  "pqn/update_seconds": held["seconds"]})
            self._report(held["metrics"])

    def scalars(self, step: int) -> dict[str, float]:
        """``charts/learning_rate`` and, once a rollout was learned from, the last one's
        ``pqn/lambda_return_mean``, ``pqn/update_seconds`` (its epochs, in seconds) and
        ``pqn/rollout_sps`` (agent steps per second while it was collected)."""
        return {"charts/learning_rate": self.schedules.learning_rate(step), **self._scalars}

    # -- checkpoints --------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The agent's state (``online``, ``optimizer``, ``rng``: network, RAdam, ε generator), the
        acting copy (``overlap_update``), the shuffle generator,
        the rollout so far (as tensors) and the last learned rollout's `scalars` (a resumed run
        logs them as an uninterrupted one would), with the metrics of an update done but not yet
        delivered (``overlap_update``; see `_finish`). After `sync`.

        Raises:
            RuntimeError: an update is in flight: call `sync` first.
        """
        self._check_synced("state_dict")
        acting = {} if self.acting is None else {"acting": self.acting.state_dict()}
        return {**self.agent.state_dict(), **acting, "shuffle": self.shuffle.bit_generator.state, "t": self.t,
                "rollout": {name: torch.from_numpy(array.copy()) for name, array in self.rollout.items()},
                "scalars": dict(self._scalars), "held": self._held}

    def close(self) -> None:
        """Stop the update thread (``overlap_update``) without waiting for the rest of an update in
        flight: it ends before its next gradient step and is dropped. Every checkpoint has waited
        for the update it holds, so only a run stopped at once (a second signal) or failing drops
        one; the network is then left as that update's last step made it."""
        if self._executor is not None:
            self._stop.set()
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._pending = None
