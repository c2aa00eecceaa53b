"""Prioritized experience replay: a vectorized sum tree and two replay buffers.

Shape legend (every docstring below uses it)::

    N      envs stepped together; one ``add`` stores one transition per env (N is fixed by the
           first ``add`` of a `PrioritizedReplayBuffer`)
    B      batch size of ``sample`` / length of an index batch
    S      frame-stack depth, ``obs_shape[0]`` (4 for Atari)
    H, W   frame height and width (84, 84); ``obs_shape == (S, H, W)``
    C      capacity: transitions of a `StackedReplayBuffer`, frame *slots* of a
           `PrioritizedReplayBuffer` (see there)

Sources:

* Schaul, Quan, Antonoglou, Silver 2016, "Prioritized Experience Replay" (ICLR): eq. 1
  ``P(i) = p_i^α / Σ_k p_k^α`` with proportional priorities ``p_i = |δ_i| + ε``; new transitions
  get the largest priority seen so far (Alg. 1, line 6); sampling from ``B`` equal segments of the
  total (Appendix B.2.1); importance-sampling weights ``w_i = (N·P(i))^-β / max_j w_j`` (section
  3.4 and Alg. 1, line 10).
* Sutton & Barto 2018, "Reinforcement Learning: An Introduction", 2nd ed., section 7.1: the
  n-step return ``G = Σ_{k<n} γ^k r_{t+k} + γ^n V(s_{t+n})``.
* Hessel et al. 2018, "Rainbow" (AAAI): n = 3 steps with prioritized replay on Atari.

Public names: `SumTree`, `ReplaySample`, `StackedReplayBuffer` (stores whole stacked
observations; simple, the reference for tests and benchmarks), `PrioritizedReplayBuffer`
(frame-efficient, n-step; what the trainer uses), `ReplayIndexError`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

__all__ = [
    "PrioritizedReplayBuffer",
    "ReplayIndexError",
    "ReplaySample",
    "StackedReplayBuffer",
    "SumTree",
]

# The sum tree is K-ary, K = 2**_BRANCH_BITS children per node, from the leaves up to a top level
# of at most _TOP_NODES nodes. At the batch sizes DQN uses, a batched tree operation costs
# NumPy's per-call overhead (1-2 µs a call) once per level, more than its arithmetic: a binary
# tree over 2**20 leaves has 20 levels; this one has two 16-ary levels under a top of 4096 nodes,
# which `find` searches with one `searchsorted`. (K = 32 costs about the same at B = 32 but more
# at B = 512, where the per-row work on (B, K) blocks, np.cumsum above all, starts to count.)
# Running sums come from np.cumsum, not from a product with a triangular matrix of ones: that is
# faster per call, but OpenBLAS goes multi-threaded above ~1M multiply-adds (B >= 1024 at K = 32)
# and then took 7.7 ms instead of ~30 µs on a busy 2-core machine; it also sums in an order NumPy
# does not promise, and `find` relies on in-order running sums (see `SumTree`).
_BRANCH_BITS = 4
_BRANCH = 1 << _BRANCH_BITS
_TOP_NODES = 4096


class ReplayIndexError(IndexError, ValueError):
    """An index outside the tree or the buffer. Both an `IndexError` (it is one) and a
    `ValueError` (the replay's errors for bad arguments), like NumPy's ``AxisError``."""


# -- argument checks ---------------------------------------------------------------------------


def _check_int(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def _check_indices(indices: Any, limit: int, name: str = "indices") -> np.ndarray:
    """``indices`` (any shape, integer) as a flat ``int64`` array, every entry in ``[0, limit)``."""
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


def _last_wins(idx: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Drop all but the last occurrence of each index: ``(sorted unique idx, their values)``.

    A stable sort keeps equal indices in their original order, so the last of each run of equal
    sorted indices is the last occurrence. (NumPy does not promise which value a fancy assignment
    with repeated indices keeps.)
    """
    if idx.size <= 1:
        return idx, values
    order = np.argsort(idx, kind="stable")
    sorted_idx = idx[order]
    keep = np.empty(idx.size, dtype=bool)
    keep[-1] = True
    np.not_equal(sorted_idx[1:], sorted_idx[:-1], out=keep[:-1])
    return sorted_idx[keep], values[order][keep]


# -- sum tree ------------------------------------------------------------------------------------


def _level_sizes(capacity: int) -> list[int]:
    """Nodes per level, leaves first, up to the first level of at most `_TOP_NODES` nodes (the
    top). Every level below the top is padded with zero nodes to a multiple of K; the level above
    it has one node per K of them."""
    sizes = [capacity]
    while sizes[-1] > _TOP_NODES:
        sizes[-1] = -(-sizes[-1] // _BRANCH) * _BRANCH
        sizes.append(sizes[-1] // _BRANCH)
    return sizes


def _split(array: np.ndarray, sizes: list[int]) -> list[np.ndarray]:
    """Consecutive views of ``array`` of the given sizes."""
    ends = np.cumsum(sizes).tolist()
    return [array[end - size: end] for size, end in zip(sizes, ends, strict=True)]


def _positive_minima(children: np.ndarray) -> np.ndarray:
    """``(m, K) -> (m,)``: minimum of each row's positive entries (inf for none): empty slots
    (priority 0) do not count towards the importance-weight normalization."""
    return children.min(axis=1, initial=np.inf, where=children > 0)


def _minima(children: np.ndarray) -> np.ndarray:
    return children.min(axis=1)


def _refresh(out: np.ndarray, children: np.ndarray, nodes: np.ndarray, reduce: Any) -> None:
    """Set ``out[nodes] = reduce(children[nodes])`` for ``(n, K)`` children, ``(B,) int64`` nodes
    (a repeated node, two changed siblings, is recomputed twice to the same value: cheaper than
    deduplicating), and ``out`` of ``n`` rows or more (padding rows are left alone)."""
    if len(children) <= nodes.size:  # a level no larger than the batch: all of it, in one call
        out[: len(children)] = reduce(children)
    else:
        out[nodes] = reduce(children[nodes])  # (np.take would first copy a strided `children` whole)


def _prefix_sums(children: np.ndarray) -> np.ndarray:
    """``(m, K) -> (m, K)``: running sums along each row, added in order, so a child of zero mass
    repeats its predecessor's sum exactly (``x + 0.0 == x``)."""
    return np.cumsum(children, axis=1)


class SumTree:
    """A 16-ary prefix-sum tree over ``capacity`` non-negative float64 priorities, vectorized.

    Layout, one float64 array: the leaves (priorities), then per level above them, bottom up,
    ``prefix (n, K + 1)``: row ``j`` is 0 and the running sums of the K children of node ``j``
    (leaves ``jK .. jK + K - 1``, or nodes of the level below), so its last column is node
    ``j``'s value, which the level above reads as one of its children. Levels go up to the first
    of at most 4096 nodes, the top; last, ``top_cumsum (T + 1,)``: 0 and the running sums of the
    top's nodes, whose last entry is the total. Every level below the top is padded with zero
    nodes to a multiple of K = 16. 2**20 leaves make prefix levels of 2**16 and 2**12 rows of 17
    (the top is the second: 4096 nodes), 17.06 bytes per leaf in all; a tree of at most 4096 leaves
    is its leaves and ``top_cumsum``.

    Because each node stores its children's running sums, `find` needs no arithmetic but the
    remainder: per level it gathers ``(B, K + 1)`` rows and compares. Running sums are recomputed
    from the children (`_prefix_sums`, in order) on every update, never adjusted by deltas, so
    rounding cannot drift, and a child of zero mass repeats its predecessor's running sum exactly,
    so it can never be the first to exceed a prefix sum: `find` never returns an empty leaf.

    Usage (repeated index: the last value wins)::

        >>> tree = SumTree(5)
        >>> tree[[0, 2, 2]] = [1.0, 5.0, 3.0]
        >>> tree.total
        4.0
        >>> tree.find([0.5, 1.5, 3.99])
        array([0, 2, 2])

    Args:
        capacity: number of leaves, >= 1 (need not be a power of K).

    Raises:
        ValueError: ``capacity`` is not an integer >= 1.
    """

    def __init__(self, capacity: int):
        self._capacity = _check_int("capacity", capacity, 1)
        self._sizes = _level_sizes(self._capacity)
        self._nodes = np.zeros(self._storage(self._sizes), dtype=np.float64)
        self._build_views()

    @staticmethod
    def _storage(sizes: list[int]) -> int:
        """float64 entries of a tree with these level sizes."""
        return sizes[0] + sum(n * (_BRANCH + 1) for n in sizes[1:]) + sizes[-1] + 1

    def _build_views(self) -> None:
        sizes = self._sizes
        parts = _split(self._nodes, [sizes[0], *(n * (_BRANCH + 1) for n in sizes[1:]), sizes[-1] + 1])
        self._leaves, self._top_cumsum = parts[0], parts[-1]
        # bottom up: the (n, K + 1) running sums of each level, and the (n, K) children they sum
        self._prefix = [part.reshape(-1, _BRANCH + 1) for part in parts[1:-1]]
        values = [self._leaves, *(prefix[:, -1] for prefix in self._prefix)]  # of each level
        self._children = [level.reshape(-1, _BRANCH) for level in values[:-1]]
        self._top = values[-1]

    def _update(self, idx: np.ndarray) -> None:
        """Recompute the running sums above leaves ``idx`` (``(B,) int64``), bottom up."""
        node = idx
        for children, prefix in zip(self._children, self._prefix, strict=True):
            node = node >> _BRANCH_BITS
            _refresh(prefix[:, 1:], children, node, _prefix_sums)
        np.add.accumulate(self._top, out=self._top_cumsum[1:])

    def _rebuild(self) -> None:
        """Recompute every running sum from the leaves, in O(capacity)."""
        for children, prefix in zip(self._children, self._prefix, strict=True):
            prefix[: len(children), 1:] = _prefix_sums(children)  # (padding rows stay 0)
        np.add.accumulate(self._top, out=self._top_cumsum[1:])

    def __getstate__(self) -> dict[str, Any]:
        # The views would be pickled as copies and lose their link to _nodes: rebuild them.
        return {"_capacity": self._capacity, "_sizes": self._sizes, "_nodes": self._nodes}

    def __setstate__(self, state: dict[str, Any]) -> None:
        if "_depth" in state:  # pickled by the binary tree (before the K-ary one): keep its leaves
            leaves = state["_nodes"][1 << state["_depth"]:][: state["_capacity"]]
            self.__init__(state["_capacity"])
            self._leaves[: leaves.size] = leaves
            self._rebuild()
            return
        self.__dict__.update(state)
        self._build_views()

    @property
    def capacity(self) -> int:
        """Number of leaves (priorities)."""
        return self._capacity

    def __len__(self) -> int:
        return self._capacity

    def __repr__(self) -> str:
        return f"SumTree(capacity={self._capacity}, total={self.total!r})"

    @property
    def total(self) -> float:
        """Sum of all priorities (the root), a float."""
        return float(self._nodes[-1])

    def __getitem__(self, indices: Any) -> Any:
        """Priorities at ``indices``: ``int -> float``, ``(...,) int -> (...,) float64``.

        Raises:
            ReplayIndexError: an index outside ``[0, capacity)``.
            ValueError: non-integer indices.
        """
        shape = np.shape(indices)
        idx = _check_indices(indices, self._capacity)
        values = self._leaves[idx]
        return float(values[0]) if shape == () else values.reshape(shape)

    def __setitem__(self, indices: Any, priorities: Any) -> None:
        """Set ``tree[indices] = priorities`` (``(...,) int``, float64 broadcast to the same shape).

        Vectorized over the batch; for a repeated index the last value wins, and every ancestor
        is recomputed from its children.

        Raises:
            ReplayIndexError: an index outside ``[0, capacity)``.
            ValueError: non-integer indices, priorities that are negative, NaN or infinite, or
                that do not broadcast to the indices' shape.
        """
        shape = np.shape(indices)
        idx = _check_indices(indices, self._capacity)
        try:
            values = np.broadcast_to(np.asarray(priorities, dtype=np.float64), shape).reshape(-1)
        except ValueError:
            raise ValueError(f"priorities of shape {np.shape(priorities)} do not match indices of "
                             f"shape {shape}") from None
        bad = ~np.isfinite(values) | (values < 0)
        if bad.any():
            raise ValueError(f"priorities must be finite and >= 0, got {values[bad][0]}")
        if idx.size:
            idx, values = _last_wins(idx, values)
            self._leaves[idx] = values
            self._update(idx)

    def find(self, prefix_sums: Any) -> np.ndarray:
        """Leaf index per prefix sum: ``(...,) float -> (...,) int64``.

        Leaf ``i`` is returned for a prefix sum ``v`` with ``sum(p[:i]) <= v < sum(p[:i + 1])``.
        Whatever float rounding does, the leaf returned has a positive priority (so it is never a
        padding leaf or an unfilled one): ``v`` is clamped into ``[0, total)``; at each level the
        descent takes the first node whose running sum exceeds what remains of ``v`` (which has
        positive mass: see the class docstring), or, when the remainder has rounded up to or past
        a node's last running sum, that node's last child of positive mass.

        Cost: one `searchsorted` over the top, then per level below (two for 2**20 leaves) a
        gather of ``(B, K + 1)`` running sums, one comparison and one ``argmax``.

        Raises:
            ValueError: the tree is empty (total 0), or a prefix sum is NaN.
        """
        v = np.array(prefix_sums, dtype=np.float64)  # a copy: modified below
        shape = v.shape
        v = v.reshape(-1)
        cumsum = self._top_cumsum
        total = cumsum[-1]
        if not total > 0:
            raise ValueError("find() on a sum tree whose priorities are all 0; set a positive "
                             "priority first")
        if np.isnan(v).any():
            raise ValueError("find() got a NaN prefix sum")
        np.maximum(v, 0.0, out=v)  # (np.clip costs twice as much)
        np.minimum(v, np.nextafter(total, 0.0), out=v)
        node = np.searchsorted(cumsum, v, side="right") - 1  # cumsum[node] <= v < cumsum[node + 1]
        v -= cumsum[node]

        rows = np.arange(v.size)
        remainder = v[:, None]  # a view: follows v
        for prefix in reversed(self._prefix):  # top level first
            sums = np.take(prefix, node, axis=0)  # (B, K + 1) running sums of node's children
            hit = sums[:, 1:] > remainder
            k = hit.argmax(axis=1)  # the first child whose running sum exceeds v
            if not hit[:, -1].all():  # v rounded up to or past the node's value
                past = ~hit[:, -1]
                grows = sums[past, 1:] > sums[past, :-1]  # children of positive mass
                k[past] = _BRANCH - 1 - grows[:, ::-1].argmax(axis=1)
            v -= sums[rows, k]
            node <<= _BRANCH_BITS
            node += k
        return node.reshape(shape)


class _PriorityIndex:
    """The replay buffers' priorities: a `SumTree` plus the count and the minimum of the positive
    priorities, all updated together. A slot with priority 0 holds no sampleable transition.

    The minimum feeds the importance-weight normalization. It is kept in a min tree of the sum
    tree's shape above the leaves (float64, one node per node of the sum tree's levels up to the
    top): each node of the first level holds the minimum positive priority of its K leaves (inf:
    none), each node above the minimum of its K children; an update recomputes the touched paths
    like the sum tree's, and `min_positive` is the minimum of the top (at most 4096 nodes).
    """

    def __init__(self, capacity: int):
        self.tree = SumTree(capacity)
        self._mins = np.full(sum(self.tree._sizes[1:]), np.inf)
        self.count = 0
        self._build_views()

    def _build_views(self) -> None:
        self._min_levels = _split(self._mins, self.tree._sizes[1:])  # bottom up
        # the children of each min level: the leaves (positive ones count), then the level below
        self._min_children = self.tree._children[:1] + \
            [level.reshape(-1, _BRANCH) for level in self._min_levels[:-1]]
        # where min_positive looks: the top of the min tree, or the leaves of a tree with no levels
        self._min_top = self._min_levels[-1] if self._min_levels else self.tree._leaves

    def __getstate__(self) -> dict[str, Any]:
        return {"tree": self.tree, "_mins": self._mins, "count": self.count}

    def __setstate__(self, state: dict[str, Any]) -> None:
        if "_block_min" in state:  # pickled with per-block minima (before the min tree): rebuild
            self.__init__(state["tree"].capacity)
            self.load(state["tree"]._leaves[: self.tree.capacity])
            return
        self.__dict__.update(state)
        self._build_views()

    @property
    def nbytes(self) -> int:
        """Bytes of the sum tree and the min tree."""
        return self.tree._nodes.nbytes + self._mins.nbytes

    @staticmethod
    def bytes_needed(capacity: int) -> int:
        """``nbytes`` of a `_PriorityIndex` of ``capacity`` leaves."""
        sizes = _level_sizes(capacity)
        return 8 * (SumTree._storage(sizes) + sum(sizes[1:]))

    @property
    def total(self) -> float:
        return self.tree.total

    @property
    def min_positive(self) -> float:
        """The smallest positive priority (inf when there is none)."""
        top = self._min_top
        return float(top.min(initial=np.inf, where=top > 0))

    def get(self, idx: np.ndarray) -> np.ndarray:
        """``(B,) int64`` in range -> ``(B,) float64`` priorities (a copy)."""
        return self.tree._leaves[idx]

    def find(self, prefix_sums: np.ndarray) -> np.ndarray:
        return self.tree.find(prefix_sums)

    def leaves(self) -> np.ndarray:
        """``(C,) float64`` view of all priorities."""
        return self.tree._leaves[: self.tree.capacity]

    def load(self, priorities: np.ndarray) -> None:
        """Replace every priority (``(C,) float64``, >= 0) and rebuild the sum tree, the min tree
        and the count in O(C)."""
        self.leaves()[:] = priorities
        self.tree._rebuild()
        reduce = _positive_minima
        for children, level in zip(self._min_children, self._min_levels, strict=True):
            level[: len(children)] = reduce(children)
            reduce = _minima
        self.count = int(np.count_nonzero(priorities))

    def set(self, idx: np.ndarray, values: np.ndarray) -> None:
        """Set ``(B,) int64`` unique, in-range slots to ``(B,) float64`` priorities >= 0."""
        if idx.size == 0:
            return
        leaves = self.tree._leaves
        self.count += np.count_nonzero(values) - np.count_nonzero(leaves[idx])
        leaves[idx] = values
        self.tree._update(idx)
        node, reduce = idx, _positive_minima
        for children, level in zip(self._min_children, self._min_levels, strict=True):
            node = node >> _BRANCH_BITS
            _refresh(level, children, node, reduce)
            reduce = _minima


# -- the sample ------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, eq=False)
class ReplaySample:
    """One sampled batch, NumPy arrays on the host.

    Fields (``B`` = batch size)::

        obs         (B, S, H, W) uint8    observation s_t
        actions     (B,) int64            action a_t
        rewards     (B,) float32          n-step return Σ_{k<h} γ^k r_{t+k} (r_t for n_step=1)
        next_obs    (B, S, H, W) uint8    bootstrap observation s_{t+h}
        terminated  (B,) bool             the return was cut by a termination (no bootstrap)
        weights     (B,) float32          importance-sampling weights, max over the buffer = 1
        indices     (B,) int64            slots, for `update_priorities`
        discounts   (B,) float32          γ^h · (1 - terminated), h = steps in the return

    Three ways to read it: attributes (``batch.obs``), keys (``batch["obs"]``), and unpacking of
    the first seven fields in the order above::

        obs, actions, rewards, next_obs, terminated, weights, indices = buffer.sample(32, 0.4)

    ``discounts`` is an attribute and a key but not part of the unpacking: the seven-tuple is the
    common shape of a prioritized-replay sample (OpenAI baselines and its descendants), so code
    written for it keeps working, and with ``n_step=1`` the discount is just ``γ·(1-terminated)``.
    With ``n_step > 1`` use ``discounts``: the horizon differs between transitions.
    """

    obs: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    next_obs: np.ndarray
    terminated: np.ndarray
    weights: np.ndarray
    indices: np.ndarray
    discounts: np.ndarray

    _fields = ("obs", "actions", "rewards", "next_obs", "terminated", "weights", "indices")

    def __iter__(self):
        return iter(tuple(getattr(self, name) for name in self._fields))

    def __getitem__(self, key: str | int) -> np.ndarray:
        """``batch["obs"]`` (any field, ``"discounts"`` included) or ``batch[0]`` (the seven)."""
        if isinstance(key, str):
            if key not in self.keys():
                raise KeyError(f"{key!r} is not a ReplaySample field; fields: {self.keys()}")
            return getattr(self, key)
        return getattr(self, self._fields[key])

    def keys(self) -> tuple[str, ...]:
        """All eight field names."""
        return (*self._fields, "discounts")

    def as_dict(self) -> dict[str, np.ndarray]:
        return {name: getattr(self, name) for name in self.keys()}


# -- shared buffer machinery ---------------------------------------------------------------------


def _check_flags(name: str, value: Any, n: int) -> np.ndarray:
    flags = np.asarray(value)
    if flags.shape != (n,):
        raise ValueError(f"{name} has shape {flags.shape}; expected ({n},), one per env")
    if flags.dtype == np.bool_:
        return flags
    if np.issubdtype(flags.dtype, np.integer) and np.isin(flags, (0, 1)).all():
        return flags.astype(bool)
    raise ValueError(f"{name} must be bool (or 0/1), got dtype {flags.dtype}")


def _check_batch(obs_shape: tuple[int, ...], obs: Any, actions: Any, rewards: Any, next_obs: Any,
                 terminated: Any, truncated: Any) -> tuple[np.ndarray, ...]:
    """Validate one ``add`` batch; a single env's unbatched transition gets an ``N = 1`` axis."""
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
    terminated = _check_flags("terminated", terminated, n)
    truncated = np.zeros(n, dtype=bool) if truncated is None else _check_flags("truncated", truncated, n)
    return obs, actions, rewards, next_obs, terminated, truncated


class _ReplayBase:
    """Priorities, sampling and weights shared by both buffers. Subclasses store the data
    (``add``) and read it back (``_fetch``)."""

    def __init__(self, capacity: int, obs_shape: Any, alpha: float, eps: float, seed: Any,
                 n_step: int, gamma: float):
        self._capacity = _check_int("capacity", capacity, 1)
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
        self._n_step = _check_int("n_step", n_step, 1)
        self._rng = np.random.default_rng(seed)
        self._index = _PriorityIndex(self._capacity)
        self._max_priority = 1.0  # in |δ| + ε units; Schaul et al. start at 1 (Alg. 1, line 6)
        # discount_table[terminated, h] = γ^h · (1 - terminated), as float32 (the learner's dtype)
        powers = np.array([gamma ** h for h in range(self._n_step + 1)], dtype=np.float32)
        self._discount_table = np.stack([powers, np.zeros_like(powers)])

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
    def tree(self) -> SumTree:
        """The `SumTree` of ``p^α`` per slot (0: no sampleable transition), for inspection;
        change priorities through `update_priorities`."""
        return self._index.tree

    def __len__(self) -> int:
        """Number of sampleable transitions."""
        return self._index.count

    def _new_priority(self) -> float:
        return max(self._max_priority ** self._alpha, np.finfo(np.float64).tiny)

    def sample(self, batch_size: int, beta: float = 0.4) -> ReplaySample:
        """A prioritized batch: ``-> ReplaySample`` with ``B = batch_size`` rows.

        Stratified (Schaul et al. 2016, Appendix B.2.1): the total priority is cut into ``B``
        equal segments and one prefix sum is drawn uniformly in each, so one batch covers the
        whole distribution; transition ``i`` is drawn with probability
        ``P(i) = p_i^α / Σ_k p_k^α`` per segment overall (eq. 1). Repeats are possible.

        Importance weights ``w_i = (N·P(i))^-β / max_j (N·P(j))^-β`` with ``N = len(self)`` and
        the max over **every sampleable transition in the buffer** (the one of least
        probability), as in Alg. 1 line 10, not over the batch. So ``weights <= 1``, with 1 only
        for the buffer's least likely transitions; computed as ``(p_i^α / min_j p_j^α)^-β``, in
        which ``N`` and the total cancel.

        Args:
            batch_size: ``B``, 1 <= B <= len(self).
            beta: importance-sampling exponent β in [0, 1] (0: no correction, 1: full).

        Raises:
            ValueError: ``batch_size`` is not an int in ``[1, len(self)]``; ``beta`` outside [0, 1].
        """
        batch = _check_int("batch_size", batch_size, 1)
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
        indices = self._index.find(prefix)
        priorities = self._index.get(indices)
        weights = (priorities / self._index.min_positive) ** -beta
        return self._fetch(indices, weights.astype(np.float32))

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
        idx = _check_indices(indices, self._capacity)
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
        idx, priority = _last_wins(idx, np.abs(td) + self._eps)
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
        return self._index.get(_check_indices(indices, self._capacity))

    def transitions(self, indices: Any) -> ReplaySample:
        """The stored transitions at ``indices`` (``(B,) int``) without sampling; weights are 1.

        Raises:
            ReplayIndexError: an index outside ``[0, capacity)``.
            ValueError: an index that holds no sampleable transition.
        """
        idx = _check_indices(indices, self._capacity)
        empty = self._index.get(idx) == 0
        if empty.any():
            raise ValueError(f"slot {idx[empty][0]} holds no sampleable transition")
        return self._fetch(idx, np.ones(idx.size, dtype=np.float32))

    def _fetch(self, indices: np.ndarray, weights: np.ndarray) -> ReplaySample:
        raise NotImplementedError


# -- stacked storage -------------------------------------------------------------------------------


class StackedReplayBuffer(_ReplayBase):
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
        if self._n_step != 1:
            raise ValueError(f"StackedReplayBuffer supports n_step=1 only, got {n_step}; use "
                             f"PrioritizedReplayBuffer for n-step returns")
        c = self._capacity
        self._obs = np.zeros((c, *self._obs_shape), dtype=np.uint8)
        self._next_obs = np.zeros((c, *self._obs_shape), dtype=np.uint8)
        self._actions = np.zeros(c, dtype=np.int64)
        self._rewards = np.zeros(c, dtype=np.float32)
        self._terminated = np.zeros(c, dtype=bool)
        self._cursor = 0

    @property
    def nbytes(self) -> int:
        """Bytes held by the storage arrays and the priorities."""
        arrays = (self._obs, self._next_obs, self._actions, self._rewards, self._terminated)
        return sum(a.nbytes for a in arrays) + self._index.nbytes

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
        obs, actions, rewards, next_obs, terminated, _ = _check_batch(
            self._obs_shape, obs, actions, rewards, next_obs, terminated, truncated)
        n = obs.shape[0]
        if n > self._capacity:
            raise ValueError(f"add() got {n} transitions but the capacity is {self._capacity}")
        slots = (self._cursor + np.arange(n)) % self._capacity
        self._obs[slots] = obs
        self._next_obs[slots] = next_obs
        self._actions[slots] = actions
        self._rewards[slots] = rewards
        self._terminated[slots] = terminated
        self._cursor = (self._cursor + n) % self._capacity
        order = np.sort(slots)
        self._index.set(order, np.full(n, self._new_priority()))
        return slots

    def _fetch(self, indices: np.ndarray, weights: np.ndarray) -> ReplaySample:
        terminated = self._terminated[indices]
        return ReplaySample(
            obs=self._obs[indices], actions=self._actions[indices], rewards=self._rewards[indices],
            next_obs=self._next_obs[indices], terminated=terminated, weights=weights,
            indices=indices, discounts=self._discount_table[terminated.view(np.uint8), 1],
        )


# -- frame-efficient storage -----------------------------------------------------------------------


def _rows_equal(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``(k, L) uint8, (k, L) uint8 -> (k,) bool``: row ``i`` of ``a`` equals row ``i`` of ``b``.
    Compared 8 bytes at a time where the rows allow it (84·84 = 882·8)."""
    if a.shape[1] % 8 == 0:
        try:
            a, b = a.view(np.uint64), b.view(np.uint64)
        except ValueError:  # a row layout that cannot be reinterpreted: compare bytes
            pass
    return (a == b).all(axis=1)


def _ragged(lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(n,) int -> (row, k)``, both ``(lengths.sum(),) int64``: ``k`` runs over
    ``0..lengths[row]-1`` for each row in turn."""
    row = np.repeat(np.arange(lengths.size), lengths)
    k = np.arange(row.size) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    return row, k


def _uint_for(largest: int) -> type:
    for dtype in (np.uint8, np.uint16, np.uint32):
        if largest <= np.iinfo(dtype).max:
            return dtype
    return np.uint64


class PrioritizedReplayBuffer(_ReplayBase):
    """Frame-efficient proportional prioritized replay with n-step returns.

    Interface: ``add`` N envs' transitions per vector step, ``sample(B, beta)`` a
    `ReplaySample`, ``update_priorities(indices, td_errors)``, ``len`` = sampleable transitions.
    Prioritization, sampling and weights are documented on `sample` and `update_priorities`.

    **Storage.** Consecutive stacked observations share ``S - 1`` frames, so each frame is
    stored once, in slots. ``capacity`` counts *slots*; the first ``add`` fixes ``N`` and splits
    them into N per-env rings of ``R = capacity // N`` slots (slot ``i·R + j`` is position ``j``
    of env ``i``'s ring; the ``capacity % N`` left over are unused). Per slot::

        frame        (H, W) uint8     the newest frame of an observation
        start        bool             a segment (episode) starts here: older stack positions
                                      repeat this frame, as FrameStack's reset does
        action       uint8            of the transition from this slot's observation (int64 once
                                      an action outside 0..255 is stored)
        return       float32          its n-step return
        horizon      uint8            steps h in that return (< n only at an episode end)
        terminated   bool             the return ended in a termination
        next_offset  uint8            slots from here to the bootstrap observation's newest frame
        priority     ~17.6 bytes      float64 leaf of the sum tree, its running sum in the level
                                      above (float64), its share of the levels above that and of
                                      the min tree (see `SumTree`, `_PriorityIndex`)

    = ``H·W + 9`` bytes, + about 17.6 for the priorities (the tree pads ``capacity`` to a multiple
    of 16) = 7,083 bytes for an 84×84 frame. An observation is the stack of a slot's
    frame with the ``S - 1`` before it, each position clamped to the slot's segment start; it is
    rebuilt at sample time by one fancy index over ``(B, S)`` slot numbers, for ``obs`` and
    ``next_obs`` alike.

    **One slot per transition.** Each ``add`` writes the newest frame of ``next_obs``; the next
    ``add``'s transition starts from that slot when its ``obs`` equals the previous ``next_obs``
    (checked exactly, 8 bytes at a time) and no episode ended. With SAME_STEP autoreset the
    caller passes ``info["final_obs"]`` as ``next_obs`` of an ended env, so the final frame gets
    a slot of its own, which is never a transition, and the next ``obs`` (the new episode's first)
    starts a new segment: one slot if all its frames are equal (FrameStack's reset), else all
    ``S``. One env's ring, ``S = 4``, an episode ending (``f3`` is the final frame) and the next
    starting::

        slot           j    j+1  j+2  j+3  j+4  j+5
        frame          f0   f1   f2   f3   g0   g1
        start          1    .    .    .    1    .
        transition     t0   t1   t2   -    u0   (next one)
        obs of t0 = f0 f0 f0 f0    next_obs of t2 (terminal) = f0 f1 f2 f3
        obs of u0 = g0 g0 g0 g0    next_obs of u0            = g0 g0 g0 g1

    Data that does not follow FrameStack's shift (``obs`` not continuing the previous
    ``next_obs``, or ``next_obs[:-1] != obs[1:]``, e.g. random arrays) is stored exactly too: the
    stack that does not continue is written whole as a new segment (up to ``2·S`` slots per
    transition), so ``sample`` always returns the observations that were added.

    **n-step returns** (Sutton & Barto 2018, 7.1; n = 3 in Rainbow, Hessel et al. 2018)::

        return   = Σ_{k<h} γ^k r_{t+k}
        discount = γ^h · (1 - terminated)          next_obs = the observation after step t+h-1

    with ``h = n``, or fewer when the episode ends inside the window: at a termination the
    discount is 0; at a truncation the return stops and bootstraps from the final observation
    with ``γ^h``. A transition becomes sampleable (gets a priority) when its window is complete:
    ``n - 1`` steps later, or at once when its episode ends, so no step of an episode is dropped
    (a 5-step episode with ``n = 3`` gives 5 transitions, horizons 3, 3, 3, 2, 1). Its
    ``rewards`` field is the return; the raw rewards of a pending window wait in a small per-env
    queue.

    **Never sampled**: slots with priority 0, which are those that are not transitions (final
    frames, the older frames of a whole-stack segment), transitions whose window is incomplete,
    and the slots the write cursor has just overwritten or whose stack history it has cut (the
    ``S - 1`` after the written ones): each ``add`` zeroes them. So ``len(buffer)`` is the number
    of sampleable transitions: at most ``N·(R - S - n + 1)`` (per env, the newest frame, the
    ``n - 1`` pending windows and the ``S - 1`` cut stacks are not), and one less per episode. (In
    a ring so small that a pending window's first frames are overwritten before the window
    completes, that transition is dropped; with FrameStack data this takes rings of under
    ``n_step + S`` slots.)

    Args:
        capacity: slots ``C`` (frames), at least ``N · 2·S``; about one per transition with
            FrameStack data (plus one per episode).
        obs_shape: ``(S, H, W)``, stack first, as FrameStack produces.
        alpha: priority exponent α >= 0 (0: uniform sampling). eps: priority offset ε > 0.
        seed: seed of the sampling generator (``np.random.default_rng(seed)``).
        n_step: steps n in each return, >= 1. gamma: discount γ in [0, 1].

    Raises:
        ValueError: ``capacity < 1``, a bad ``obs_shape``, ``alpha < 0``, ``eps <= 0``, ``gamma``
            outside [0, 1], ``n_step < 1``; and from ``add``, a capacity too small for N envs.
    """

    def __init__(self, capacity: int, obs_shape: Any, alpha: float = 0.6, eps: float = 1e-6,
                 seed: Any = None, *, n_step: int = 1, gamma: float = 0.99):
        super().__init__(capacity, obs_shape, alpha, eps, seed, n_step, gamma)
        c, s, n = self._capacity, self._obs_shape[0], self._n_step
        self._stack = s
        self._frame_shape = self._obs_shape[1:]
        self._frame_size = int(np.prod(self._frame_shape))
        self._frames = np.zeros((c, *self._frame_shape), dtype=np.uint8)
        self._start = np.zeros(c, dtype=bool)
        self._actions = np.zeros(c, dtype=np.uint8)
        self._returns = np.zeros(c, dtype=np.float32)
        self._horizon = np.zeros(c, dtype=_uint_for(n))
        self._terminated = np.zeros(c, dtype=bool)
        # A window of n transitions spans at most n adds of at most 2·S slots each.
        self._next_offset = np.zeros(c, dtype=_uint_for(2 * s * n))
        self._window = np.arange(1 - s, 1)  # stack positions, oldest first, relative to the newest
        self._reach_one = np.arange(s)[None, :]
        self._positions = np.arange(n)[None, :]
        # return_matrix[p, k] = γ^(k-p) for k >= p: the return from queue position p is row p
        # times the queued rewards.
        lag = np.arange(n)[None, :] - np.arange(n)[:, None]
        self._return_matrix = np.where(lag >= 0, self._gamma ** np.maximum(lag, 0), 0.0)
        self._n_envs: int | None = None

    @classmethod
    def bytes_needed(cls, capacity: int, obs_shape: Any, *, n_step: int = 1) -> int:
        """Bytes of storage and priorities a buffer of ``capacity`` slots allocates (the per-env
        state added by the first ``add``, ``2·N·S·H·W`` bytes or so, aside)."""
        capacity = _check_int("capacity", capacity, 1)
        shape = tuple(int(d) for d in obs_shape)
        s, frame = shape[0], int(np.prod(shape[1:]))
        per_slot = frame + 1 + 1 + 4 + 1 + np.dtype(_uint_for(n_step)).itemsize + \
            np.dtype(_uint_for(2 * s * n_step)).itemsize
        return capacity * per_slot + _PriorityIndex.bytes_needed(capacity)

    @property
    def nbytes(self) -> int:
        """Bytes held by the storage arrays, the priorities and the per-env state."""
        arrays = [self._frames, self._start, self._actions, self._returns, self._horizon,
                  self._terminated, self._next_offset]
        if self._n_envs is not None:
            arrays += [self._last_next_obs, self._queue_slot, self._queue_reward, self._queue_oldest]
        return sum(a.nbytes for a in arrays) + self._index.nbytes

    @property
    def n_envs(self) -> int | None:
        """N, fixed by the first ``add`` (None before)."""
        return self._n_envs

    def _start_envs(self, n: int) -> None:
        ring = self._capacity // n
        # One add writes at most 2·S slots per env (obs and next_obs both as new segments); they
        # must not overwrite each other. (Windows whose frames a small ring overwrites before they
        # complete are dropped, see add.)
        need = 2 * self._stack
        if ring < need:
            raise ValueError(f"capacity {self._capacity} split over {n} envs leaves {ring} slots per env; "
                             f"with S={self._stack} each env needs at least {need} (2·S): use capacity >= "
                             f"{n * need} (about one slot per transition is stored)")
        self._n_envs, self._ring = n, ring
        self._env_base = np.arange(n, dtype=np.int64) * ring
        # Positions below count slots written per env ever (monotonic: position p is ring slot
        # p % R); an old position p is overwritten once written > p + R.
        self._written = np.zeros(n, dtype=np.int64)
        self._pending = np.zeros(n, dtype=np.int64)  # ring position of the last next_obs' frame
        self._segment = np.zeros(n, dtype=np.int64)  # position of the latest segment start
        self._has_prev = np.zeros(n, dtype=bool)
        self._prev_done = np.zeros(n, dtype=bool)
        self._last_next_obs = np.zeros((n, *self._obs_shape), dtype=np.uint8)
        self._queue_slot = np.zeros((n, self._n_step), dtype=np.int64)  # pending windows, oldest first
        self._queue_reward = np.zeros((n, self._n_step), dtype=np.float64)
        self._queue_oldest = np.zeros((n, self._n_step), dtype=np.int64)  # first position each needs
        self._queue_len = np.zeros(n, dtype=np.int64)

    def _segment_length(self, flat: np.ndarray) -> np.ndarray:
        """``(k, S·H·W) uint8 -> (k,) int64``: slots a stack needs as a new segment, 1 when all
        its frames equal the newest (FrameStack's reset), else S."""
        f = self._frame_size
        same = _rows_equal(flat[:, :-f], np.tile(flat[:, -f:], self._stack - 1))
        return np.where(same, 1, self._stack)

    def add(self, obs: Any, actions: Any, rewards: Any, next_obs: Any, terminated: Any,
            truncated: Any = None) -> np.ndarray:
        """Store one vector step: N transitions ``(obs, actions, rewards, next_obs, terminated,
        truncated)``, one per env, in env order. One vectorized write for all envs.

        Args:
            obs: ``(N, S, H, W) uint8`` observations the actions were taken in.
            actions: ``(N,) int``. rewards: ``(N,) float`` (raw or clipped, as the learner wants
                them in the return).
            next_obs: ``(N, S, H, W) uint8``; for an env whose episode ended at this step, the
                ended episode's true last observation (SAME_STEP autoreset's
                ``info["final_obs"][i]``), not the reset observation.
            terminated, truncated: ``(N,) bool``; truncated defaults to all False. The next
                ``add``'s ``obs[i]`` after either is taken as a new episode's first observation.
            (A single env's transition may also be passed without the ``N`` axis.)

        Returns:
            ``(N,) int64`` slots of the N new transitions; each becomes sampleable (with the
            current max priority) once its n-step window is complete.

        Raises:
            ValueError: shapes or dtypes that do not match ``obs_shape`` and each other, an ``N``
                other than the first ``add``'s, or a capacity too small for N envs.
        """
        obs, actions, rewards, next_obs, terminated, truncated = _check_batch(
            self._obs_shape, obs, actions, rewards, next_obs, terminated, truncated)
        n = obs.shape[0]
        if self._n_envs is None:
            self._start_envs(n)
        elif n != self._n_envs:
            raise ValueError(f"add() got {n} envs but this buffer stores {self._n_envs}; N is fixed by "
                             f"the first add()")
        s, f, ring, base = self._stack, self._frame_size, self._ring, self._env_base
        flat_obs, flat_next = obs.reshape(n, -1), next_obs.reshape(n, -1)

        # Which stacks need writing? obs continues env i's last frame when it equals the last
        # next_obs and no episode ended; next_obs needs one new frame when it is obs shifted by
        # one (FrameStack), else it is written whole as a new segment.
        cont = self._has_prev & ~self._prev_done
        if cont.any():
            cont &= _rows_equal(flat_obs, self._last_next_obs.reshape(n, -1))
        shift = _rows_equal(flat_next[:, :-f], flat_obs[:, f:])
        obs_len = np.zeros(n, dtype=np.int64)
        if not cont.all():
            obs_len[~cont] = self._segment_length(flat_obs[~cont])
        next_len = np.ones(n, dtype=np.int64)
        if not shift.all():
            next_len[~shift] = self._segment_length(flat_next[~shift])
        length = obs_len + next_len
        written = self._written
        position = np.where(cont, written - 1, written + obs_len - 1)  # of the transition's slot
        local = position % ring
        next_local = (written + length - 1) % ring
        slots = base + local
        # The oldest position its observation reads: S - 1 back, or its segment's start.
        oldest = np.maximum(position - (s - 1), np.where(cont, self._segment, written))
        self._segment = np.where(shift, np.where(cont, self._segment, written), written + obs_len)

        # Slots about to be overwritten, and the S - 1 after them whose stacks reach back into
        # them, stop being sampleable (only once the ring has wrapped: before, they are empty).
        reach = length + s - 1
        if (written + reach > ring).any():
            if (length == 1).all():  # FrameStack steady state: a (N, S) block
                stale = (base[:, None] + (written[:, None] + self._reach_one) % ring).reshape(-1)
            else:
                row, k = _ragged(reach)
                stale = base[row] + (written[row] + k) % ring
            stale = stale[self._index.get(stale) > 0]
        else:
            stale = np.zeros(0, dtype=np.int64)

        if cont.all() and shift.all():  # FrameStack steady state: one frame per env
            self._frames[base + next_local] = next_obs[:, -1]
            self._start[base + next_local] = False
        else:
            row, k = _ragged(length)
            dst = base[row] + (written[row] + k) % ring
            first = obs_len[row]
            from_obs = k < first
            # stack position of the frame written at k: the last obs_len frames of obs, then the
            # last next_len frames of next_obs
            pos = np.where(from_obs, s - first + k, s - next_len[row] + k - first)
            self._frames[dst[from_obs]] = obs[row[from_obs], pos[from_obs]]
            self._frames[dst[~from_obs]] = next_obs[row[~from_obs], pos[~from_obs]]
            self._start[dst] = ((k == 0) & (first > 0)) | ((k == first) & ~shift[row])

        if self._actions.dtype == np.uint8 and (actions.min() < 0 or actions.max() > 255):
            self._actions = self._actions.astype(np.int64)  # once, for action spaces beyond uint8
        self._actions[slots] = actions

        # n-step windows: this step joins each env's queue of pending transitions; a window is
        # complete when it holds n steps, or, for every queued transition, when the episode ends.
        envs = np.arange(n)
        queued = self._queue_len
        self._queue_slot[envs, queued] = slots
        self._queue_reward[envs, queued] = rewards
        self._queue_oldest[envs, queued] = oldest
        queued = queued + 1
        done = terminated | truncated
        live = self._positions < queued[:, None]
        full = ~done & (queued == self._n_step)
        complete = (done[:, None] & live) | (full[:, None] & (self._positions == 0))
        env_c, pos_c = np.nonzero(complete)
        # In a small ring a window can outlive its first frames: drop it (this add has overwritten
        # every position below written + length - R).
        intact = self._queue_oldest[env_c, pos_c] >= (written + length - ring)[env_c]
        if not intact.all():
            env_c, pos_c = env_c[intact], pos_c[intact]
        ready = self._queue_slot[env_c, pos_c]
        if ready.size:
            returns = np.where(live, self._queue_reward, 0.0) @ self._return_matrix.T
            self._returns[ready] = returns[env_c, pos_c]
            self._horizon[ready] = queued[env_c] - pos_c
            self._terminated[ready] = terminated[env_c]
            self._next_offset[ready] = (next_local[env_c] - (ready - base[env_c])) % ring
        if full.any():  # the complete window leaves from the front
            self._queue_slot[full, :-1] = self._queue_slot[full, 1:]
            self._queue_reward[full, :-1] = self._queue_reward[full, 1:]
            self._queue_oldest[full, :-1] = self._queue_oldest[full, 1:]
        self._queue_len = np.where(done, 0, np.where(full, queued - 1, queued))

        # Zero the stale slots, then give complete windows the max priority (last wins).
        self._index.set(*_last_wins(
            np.concatenate([stale, ready]),
            np.concatenate([np.zeros(stale.size), np.full(ready.size, self._new_priority())])))

        self._last_next_obs[...] = next_obs
        self._pending = next_local
        self._prev_done = done
        self._has_prev[:] = True
        self._written = written + length
        return slots

    def _stack_slots(self, base: np.ndarray, local: np.ndarray) -> np.ndarray:
        """``(M,) env ring starts, (M,) ring positions -> (M, S) int64`` slots of the stacked
        observation whose newest frame is at ``local``, oldest first. Positions before the
        segment start repeat the start's frame."""
        ring = self._ring
        window = local[:, None] + self._window
        if self._stack > 1:
            starts = self._start[base[:, None] + window % ring]
            # the latest segment start in the window (the window's oldest position when none)
            first = np.where(starts, self._window, self._window[0]).max(axis=1)
            window = local[:, None] + np.maximum(self._window, first[:, None])
        return base[:, None] + window % ring

    def _fetch(self, indices: np.ndarray, weights: np.ndarray) -> ReplaySample:
        b = indices.size
        base = indices - indices % self._ring
        local = indices - base
        next_local = (local + self._next_offset[indices]) % self._ring
        stacks = self._stack_slots(np.concatenate([base, base]), np.concatenate([local, next_local]))
        # One gather for obs and next_obs, (2B, S, H, W); each half is C-contiguous. The copy of
        # 2·B·S random frames is most of sample()'s time, and no layout makes it smaller.
        frames = self._frames[stacks]
        terminated = self._terminated[indices]
        return ReplaySample(
            obs=frames[:b],
            actions=self._actions[indices].astype(np.int64),
            rewards=self._returns[indices],
            next_obs=frames[b:],
            terminated=terminated,
            weights=weights,
            indices=indices,
            discounts=self._discount_table[terminated.view(np.uint8), self._horizon[indices]],
        )
