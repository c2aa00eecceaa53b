"""`ReplayBase`: proportional prioritization, the half of a replay buffer that is not storage:
the priorities, their updates, the stratified sum-tree draw and the importance-sampling weights.

Shapes: ``B`` batch size / length of an index batch, ``C`` capacity (slots).

Source: Schaul, Quan, Antonoglou, Silver 2016, "Prioritized Experience Replay" (ICLR): eq. 1
``P(i) = p_i^α / Σ_k p_k^α`` with proportional priorities ``p_i = |δ_i| + ε`` (section 3.3); new
transitions get the largest priority seen so far (Alg. 1, line 6); sampling from ``B`` equal
segments of the total (Appendix B.2.1); importance-sampling weights
``w_i = (N·P(i))^-β / max_j w_j`` (section 3.4 and Alg. 1, line 10).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from vecdqn.replay.checks import check_indices, check_int
from vecdqn.replay.sum_tree import PriorityIndex, SumTree, last_wins

__all__ = ["ReplayBase"]


class ReplayBase:
    """The configuration, priorities and draw shared by `vecdqn.replay.PrioritizedReplayBuffer`
    and `vecdqn.benchmarks.stacked_replay.StackedReplayBuffer`. A subclass stores the transitions
    (``add``, giving each new one `new_priority` through `priority_index`) and reads a drawn batch
    back (``sample``, ``transitions``).

    Raises:
        ValueError: ``capacity < 1``, a bad ``obs_shape``, ``alpha < 0``, ``eps <= 0``, ``gamma``
            outside [0, 1], ``n_step < 1``.
    """

    def __init__(self, capacity: int, obs_shape: Any, alpha: float, eps: float, seed: Any,
                 n_step: int, gamma: float):
        self._capacity = check_int("capacity", capacity, 1)
        try:
            shape = tuple(int(d) for d in obs_shape)
        except TypeError:
            raise ValueError(f"obs_shape must be a tuple of ints like (4, 84, 84), got {obs_shape!r}") from None
        if not shape or min(shape) < 1:
            raise ValueError(f"obs_shape must be a non-empty tuple of positive ints, got {obs_shape!r}")
        self._obs_shape = shape
        alpha, eps, gamma = float(alpha), float(eps), float(gamma)
        if not (np.isfinite(alpha) and alpha >= 0):
            raise ValueError(f"alpha must be >= 0 (0 samples uniformly), got {alpha}")
        if not (np.isfinite(eps) and eps > 0):
            raise ValueError(f"eps must be > 0 so that every stored transition keeps a positive "
                             f"priority, got {eps}")
        if not 0.0 <= gamma <= 1.0:
            raise ValueError(f"gamma must be in [0, 1], got {gamma}")
        self._alpha, self._eps, self._gamma = alpha, eps, gamma
        self._n_step = check_int("n_step", n_step, 1)
        self._rng = np.random.default_rng(seed)
        self._index = PriorityIndex(self._capacity)
        self._max_priority = 1.0  # in |δ| + ε units; Schaul et al. start at 1 (Alg. 1, line 6)

    # read-only configuration
    capacity = property(lambda self: self._capacity, doc="Capacity C.")
    obs_shape = property(lambda self: self._obs_shape, doc="(S, H, W) of one observation.")
    alpha = property(lambda self: self._alpha, doc="Priority exponent α.")
    eps = property(lambda self: self._eps, doc="Priority offset ε.")
    n_step = property(lambda self: self._n_step, doc="Steps n in each return.")
    gamma = property(lambda self: self._gamma, doc="Discount γ.")

    @property
    def max_priority(self) -> float:
        """Largest priority ``|δ| + ε`` seen so far (1.0 until an update exceeds it); new
        transitions get ``max_priority ** alpha`` in the tree."""
        return self._max_priority

    @property
    def new_priority(self) -> float:
        """Tree value ``max_priority ** alpha`` (at least the smallest positive float64) that a
        new transition gets (Schaul et al. 2016, Alg. 1, line 6)."""
        return max(self._max_priority ** self._alpha, np.finfo(np.float64).tiny)

    @property
    def tree(self) -> SumTree:
        """The `SumTree` of ``p^α`` per slot (0: no sampleable transition), for inspection;
        change priorities through `update_priorities`."""
        return self._index.tree

    @property
    def priority_index(self) -> PriorityIndex:
        """The priorities' structure (`PriorityIndex`), for the subclasses' ``add``; change
        priorities through `update_priorities`."""
        return self._index

    def __len__(self) -> int:
        """Number of sampleable transitions."""
        return self._index.count

    def draw(self, batch_size: int, beta: float = 0.4) -> tuple[np.ndarray, np.ndarray]:
        """Which transitions a prioritized batch holds, and their weights: ``-> (indices (B,)
        int64, weights (B,) float32)`` with ``B = batch_size``; the subclass's ``sample`` reads them.

        Stratified (Schaul et al. 2016, Appendix B.2.1): the total priority is cut into ``B``
        equal segments and one prefix sum is drawn uniformly in each (`SumTree.find` maps it to a
        slot), so transition ``i`` is drawn with probability ``P(i) = p_i^α / Σ_k p_k^α`` per
        segment overall (eq. 1). Repeats are possible.

        Importance weights ``w_i = (N·P(i))^-β / max_j (N·P(j))^-β`` (section 3.4, Alg. 1 line 10)
        with ``N = len(self)`` and the max over **every sampleable transition in the buffer** (the
        one of least probability), not over the batch: ``weights <= 1``, 1 only for the buffer's
        least likely transitions. Computed as ``(p_i^α / min_j p_j^α)^-β``: ``N`` and the total
        cancel.

        Args:
            batch_size: ``B``, 1 <= B <= len(self).
            beta: importance-sampling exponent β in [0, 1] (0: no correction, 1: full).

        Raises:
            ValueError: ``batch_size`` is not an int in ``[1, len(self)]``; ``beta`` outside [0, 1].
        """
        batch = check_int("batch_size", batch_size, 1)
        available = len(self)
        if batch > available:
            raise ValueError(f"batch_size {batch} is larger than the {available} sampleable "
                             f"transitions in the buffer; add more transitions before sampling "
                             f"or sample a smaller batch")
        beta = float(beta)
        if not 0.0 <= beta <= 1.0:
            raise ValueError(f"beta must be in [0, 1], got {beta}")
        total = self._index.total
        prefix = (np.arange(batch) + self._rng.random(batch)) * (total / batch)
        indices = self._index.tree.find(prefix)
        priorities = self._index.get(indices)
        weights = (priorities / self._index.min_positive) ** -beta
        return indices, weights.astype(np.float32)

    def update_priorities(self, indices: Any, td_errors: Any) -> None:
        """Set the priorities of ``indices`` (``(B,) int``) from ``td_errors`` (``(B,) float``).

        The new priority is ``p = |δ| + ε``, stored as ``p^α`` in the tree; ``max_priority`` grows
        to the largest ``p``. A repeated index (a transition sampled twice) keeps the last value.
        Indices that are not sampleable now (overwritten since they were sampled) are skipped, so
        an update can never make an empty slot sampleable.

        Raises:
            ReplayIndexError: an index outside ``[0, capacity)``.
            ValueError: non-integer indices; ``td_errors`` of another shape or not finite.
        """
        shape = np.shape(indices)
        idx = check_indices(indices, self._capacity)
        td = np.asarray(td_errors, dtype=np.float64)
        if td.shape != shape:
            raise ValueError(f"td_errors has shape {td.shape} but indices has shape {shape}; pass "
                             f"one TD error per index")
        td = td.reshape(-1)
        if td.size == 0:
            return
        if not np.isfinite(td).all():
            raise ValueError(f"td_errors must be finite, got {td[~np.isfinite(td)][0]} (a diverging "
                             f"loss?)")
        idx, priority = last_wins(idx, np.abs(td) + self._eps)
        live = self._index.get(idx) > 0
        if not live.all():
            idx, priority = idx[live], priority[live]
            if idx.size == 0:
                return
        values = np.maximum(priority ** self._alpha, np.finfo(np.float64).tiny)
        if not np.isfinite(values).all():
            raise ValueError(f"priority ** alpha overflows for td error {np.abs(td).max()} and "
                             f"alpha {self._alpha}")
        self._max_priority = max(self._max_priority, float(priority.max()))
        self._index.set(idx, values)

    def priorities(self, indices: Any) -> np.ndarray:
        """Tree values ``p^α`` at ``indices``: ``(B,) int -> (B,) float64`` (0: not sampleable)."""
        return self._index.get(check_indices(indices, self._capacity))

    def sampleable(self, indices: Any) -> np.ndarray:
        """``indices`` (``(B,) int``) as ``(B,) int64`` slots that each hold a sampleable
        transition: the check of the subclasses' ``transitions``.

        Raises:
            ReplayIndexError: an index outside ``[0, capacity)``.
            ValueError: an index that holds no sampleable transition.
        """
        idx = check_indices(indices, self._capacity)
        empty = self._index.get(idx) == 0
        if empty.any():
            raise ValueError(f"slot {idx[empty][0]} holds no sampleable transition")
        return idx
