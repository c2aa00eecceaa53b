"""`StackedReplayBuffer`: prioritized replay of whole stacked observations, the simple reference
that the frame-once buffer is tested and benchmarked against.

Shapes: ``N`` transitions per ``add``, ``(S, H, W)`` one observation, ``C`` capacity.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from vecdqn.replay.checks import check_batch
from vecdqn.replay.nstep import discount_table
from vecdqn.replay.proportional import ReplayBase
from vecdqn.replay.sample import ReplaySample

__all__ = ["StackedReplayBuffer"]


class StackedReplayBuffer(ReplayBase):
    """Proportional prioritized replay that stores whole stacked observations.

    Simple and obviously correct: one ring of ``C`` transitions, each with its own copy of
    ``obs`` and ``next_obs`` (``2·S·H·W`` bytes, 56 KiB for Atari). It is the reference that
    `PrioritizedReplayBuffer` is tested and benchmarked against; train with that one.

    Same interface as `PrioritizedReplayBuffer` with ``n_step=1`` only; ``capacity`` counts
    transitions and ``len`` is the number stored.

    Raises:
        ValueError: ``capacity < 1``, a bad ``obs_shape``, ``alpha < 0``, ``eps <= 0``, ``gamma``
            outside [0, 1], or ``n_step != 1``.
    """

    def __init__(self, capacity: int, obs_shape: Any, alpha: float = 0.6, eps: float = 1e-6,
                 seed: Any = None, *, n_step: int = 1, gamma: float = 0.99):
        super().__init__(capacity, obs_shape, alpha, eps, seed, n_step, gamma)
        if self.n_step != 1:
            raise ValueError(f"StackedReplayBuffer supports n_step=1 only, got {n_step}; use "
                             f"PrioritizedReplayBuffer for n-step returns")
        c = self.capacity
        self._obs = np.zeros((c, *self.obs_shape), dtype=np.uint8)
        self._next_obs = np.zeros((c, *self.obs_shape), dtype=np.uint8)
        self._actions = np.zeros(c, dtype=np.int64)
        self._rewards = np.zeros(c, dtype=np.float32)
        self._terminated = np.zeros(c, dtype=bool)
        self._cursor = 0
        self._discounts = discount_table(self.gamma, 1)

    @property
    def nbytes(self) -> int:
        """Bytes held by the storage arrays and the priorities."""
        arrays = (self._obs, self._next_obs, self._actions, self._rewards, self._terminated)
        return sum(a.nbytes for a in arrays) + self.priority_index.nbytes

    def add(self, obs: Any, actions: Any, rewards: Any, next_obs: Any, terminated: Any,
            truncated: Any = None) -> np.ndarray:
        """Store N transitions ``(obs, actions, rewards, next_obs, terminated)``.

        Args:
            obs, next_obs: ``(N, S, H, W) uint8``; ``next_obs[i]`` is env i's true next
                observation (``info["final_obs"][i]`` at an episode end).
            actions: ``(N,) int``. rewards: ``(N,) float``.
            terminated, truncated: ``(N,) bool`` (truncated is accepted for interface parity; a
                truncated transition bootstraps like any non-terminal one).

        Returns:
            ``(N,) int64`` slots of the new transitions (each gets the current max priority).

        Raises:
            ValueError: shapes or dtypes that do not match ``obs_shape`` and each other, or more
                envs than the capacity.
        """
        obs, actions, rewards, next_obs, terminated, _ = check_batch(
            self.obs_shape, obs, actions, rewards, next_obs, terminated, truncated)
        n = obs.shape[0]
        if n > self.capacity:
            raise ValueError(f"add() got {n} transitions but the capacity is {self.capacity}")
        slots = (self._cursor + np.arange(n)) % self.capacity
        self._obs[slots] = obs
        self._next_obs[slots] = next_obs
        self._actions[slots] = actions
        self._rewards[slots] = rewards
        self._terminated[slots] = terminated
        self._cursor = (self._cursor + n) % self.capacity
        order = np.sort(slots)
        self.priority_index.set(order, np.full(n, self.new_priority))
        return slots

    def sample(self, batch_size: int, beta: float = 0.4) -> ReplaySample:
        """A prioritized batch of ``B = batch_size`` transitions, drawn by `draw`, as
        `vecdqn.replay.PrioritizedReplayBuffer.sample`. Raises ValueError as `draw`."""
        return self._gather(*self.draw(batch_size, beta))

    def transitions(self, indices: Any) -> ReplaySample:
        """The stored transitions at ``indices`` (``(B,) int``) without sampling; weights are 1.

        Raises:
            ReplayIndexError: an index outside ``[0, capacity)``.
            ValueError: an index that holds no sampleable transition.
        """
        idx = self.sampleable(indices)
        return self._gather(idx, np.ones(idx.size, dtype=np.float32))

    def _gather(self, indices: np.ndarray, weights: np.ndarray) -> ReplaySample:
        terminated = self._terminated[indices]
        return ReplaySample(
            obs=self._obs[indices], actions=self._actions[indices], rewards=self._rewards[indices],
            next_obs=self._next_obs[indices], terminated=terminated, weights=weights,
            indices=indices, discounts=self._discounts[terminated.view(np.uint8), 1],
        )
