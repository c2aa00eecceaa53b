"""The Ape-X actor: plays K envs with its own epsilon and a CPU copy of the network, computes
n-step transitions and their initial priorities, and ships them in blocks, each frame once.

Shape legend: ``T`` vector steps per block, ``K`` envs of this actor, ``S`` stacked frames,
``H×W`` a frame, ``A`` actions, ``n`` steps of a return.

Source: Horgan et al. 2018, "Distributed Prioritized Experience Replay" (ICLR): actor ``i`` of
``N`` explores with ``ε_i = ε^(1 + α·i/(N−1))``, ε = 0.4, α = 7 (section 4.1), and gives its
transitions initial priorities ``|δ|`` computed with its own copy of the network (Algorithm 1,
line 9), so the learner's replay does not start every transition at the max priority.

`Actor` is a plain class; ``vecdqn.distributed.pool`` runs it as a Ray actor (one process each).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import torch

from vecdqn.acting import epsilon_greedy, learner_rewards, stored_next_obs
from vecdqn.config import Config
from vecdqn.distributed.blocks import Block
from vecdqn.envs import WorkerGuard
from vecdqn.learners import learner_spec
from vecdqn.replay import NStepAccumulator

__all__ = ["Actor", "apex_epsilons", "restarted"]


def apex_epsilons(actors: int, epsilon: float = 0.4, alpha: float = 7.0) -> list[float]:
    """``ε_i = ε^(1 + α·i/(N−1))`` for ``i = 0..N−1`` (Horgan et al. 2018, section 4.1); ``[ε]``
    for one actor.

    >>> [round(e, 4) for e in apex_epsilons(3)]
    [0.4, 0.0162, 0.0007]
    """
    if actors == 1:
        return [float(epsilon)]
    return [float(epsilon ** (1 + alpha * i / (actors - 1))) for i in range(actors)]


def restarted() -> bool:
    """True in a Ray actor that Ray restarted after its process died (False outside Ray)."""
    try:
        import ray

        return bool(ray.is_initialized() and ray.get_runtime_context().was_current_actor_reconstructed)
    except (ImportError, RuntimeError):
        return False


class Actor:
    """One actor: ``K`` envs of `make_vector_env` (through `WorkerGuard`), fixed ``epsilon``.

    Args:
        actor_id: ``i``, its index among the actors (tags and the replay's env rings use it).
        config: the run's configuration (env, network shape, ``n_step``, ``gamma``,
            ``clip_rewards``, ``per_eps`` aside: the learner adds ε to the shipped ``|δ|``).
        epsilon: its exploration rate (`apex_epsilons`).
        seed: env ``k`` is seeded ``seed + k`` on the first reset (a restarted actor adds its
            process id, so it does not replay its predecessor's games).
        n_actions, obs_shape: ``A`` and ``(S, H, W)``.

    Raises:
        ValueError: from `make_vector_env` on bad env options.
    """

    def __init__(self, actor_id: int, config: Config, epsilon: float, seed: int, n_actions: int,
                 obs_shape: tuple[int, int, int]):
        torch.set_num_threads(1)  # an actor's forward pass is K observations: one core is plenty
        c = self.config = config
        self.actor_id, self.epsilon = actor_id, float(epsilon)
        if restarted():
            seed = (seed + os.getpid() * c.actor_envs) % 2**31
        self.net = learner_spec(c.algo).build_network(c, n_actions, obs_shape)
        self.net.requires_grad_(False)
        self.weights_version = -1  # -1: its own random init, until the learner's first weights
        self.rng = np.random.default_rng(seed + 7_919 * (actor_id + 1))
        self.envs = WorkerGuard.start(c.env_id, c.actor_envs, c.env_options(), c.worker_timeout)
        k, n = c.actor_envs, c.n_step
        self.obs, _ = self.envs.reset(seed=seed, step=0)
        self.q = self._q_values(self.obs)
        self.nstep = NStepAccumulator(k, n, c.gamma)
        self.q_taken = np.zeros((k, n), dtype=np.float32)  # Q(s_u, a_u) of the last n steps, by u % n
        self.vector_step = 0  # vector steps played by this process
        self.first_block = True

    def pid(self) -> int:
        """The process id (tests kill it to check restarts)."""
        return os.getpid()

    def _q_values(self, obs: np.ndarray) -> np.ndarray:
        """``(M, S, H, W) uint8 -> (M, A) float32`` with the current weights."""
        with torch.no_grad():
            return self.net(torch.from_numpy(obs)).numpy()

    def _load(self, version: int, weights: list[Any] | None) -> None:
        """Load the learner's weights ``{name: ndarray}`` (in Ray's object store: ``weights[0]``
        is its reference, wrapped in a list so Ray does not fetch it for every call) when newer."""
        if weights is None or version <= self.weights_version:
            return
        import ray

        state = ray.get(weights[0])
        self.net.load_state_dict({name: torch.from_numpy(np.array(value)) for name, value in state.items()})
        self.weights_version = version

    def collect(self, steps: int, version: int = -1, weights: list[Any] | None = None) -> Block:
        """Play ``steps`` vector steps (``steps·K`` agent steps) and return them as a `Block`.

        First loads weights ``version`` if newer than its own (see `_load`).
        """
        self._load(version, weights)
        c, k, n = self.config, self.config.actor_envs, self.config.n_step
        rows = np.arange(k)
        block = Block.empty(self.actor_id, steps, k, n, self.obs.shape[1:], first_u=self.vector_step)
        block.weights_version, block.epsilon = self.weights_version, self.epsilon
        if self.first_block:
            block.first_obs = self.obs.copy()
            self.first_block = False
        resets = []
        for t in range(steps):
            u = self.vector_step
            actions = epsilon_greedy(self.rng, self.epsilon, self.q.shape[1], k, self.q.argmax(axis=1))
            self.q_taken[:, u % n] = self.q[rows, actions]
            self.envs.step_async(actions, u * k)
            next_obs, rewards, terminated, truncated, infos = self.envs.step_wait(u * k)
            done = terminated | truncated
            stored_next = stored_next_obs(next_obs, terminated, truncated, infos)
            if done.any():
                resets.append(next_obs[done])
            q_all = self._q_values(np.concatenate([next_obs, stored_next[done]]))
            value = q_all[:k].max(axis=1)
            value[done] = q_all[k:].max(axis=1)
            self._priorities(block, t, u, learner_rewards(rewards, c.clip_rewards), terminated, truncated, value)
            block.record(t, stored_next[:, -1], actions, rewards, terminated, truncated)
            block.add_episodes(t, infos)
            self.obs, self.q = next_obs, q_all[:k]
            self.vector_step += 1
        if resets:
            block.reset_obs = np.concatenate(resets)
        return block

    def _priorities(self, block: Block, t: int, u: int, rewards: np.ndarray, terminated: np.ndarray,
                    truncated: np.ndarray, value: np.ndarray) -> None:
        """Push step ``u`` into the n-step windows; each window it completes gets its initial
        priority ``|δ| = |R + γ^h (1 − terminated) max_a Q(s', a) − Q(s, a)|`` with this actor's
        network (Horgan et al. 2018, Algorithm 1; the learner adds ε), written to
        ``block.priorities[t, k, u − start]``."""
        k, n = self.config.actor_envs, self.config.n_step
        windows = self.nstep.push(u * k + np.arange(k), rewards, np.zeros(k, dtype=np.int64), terminated, truncated)
        if windows.env.size == 0:
            return
        start = windows.slots // k
        discount = self.config.gamma ** windows.horizon * (1.0 - windows.terminated)
        delta = windows.returns + discount * value[windows.env] - self.q_taken[windows.env, start % n]
        block.priorities[t, windows.env, u - start] = np.abs(delta)

    def close(self) -> None:
        """Stop its env workers."""
        self.envs.close()
