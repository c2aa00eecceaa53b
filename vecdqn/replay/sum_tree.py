"""The sum tree of the replay's priorities and the min tree beside it (`PriorityIndex`).

Shapes: ``B`` is the length of an index batch, ``C`` the number of leaves (priorities),
``K = BRANCH`` the children per node.

Source: Schaul et al. 2016, "Prioritized Experience Replay" (ICLR), Appendix B.2.1: a sum tree
samples proportionally to priority in O(log C) per draw; the minimum priority normalizes the
importance weights (section 3.4).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from vecdqn.replay.checks import check_indices, check_int

__all__ = ["BRANCH", "BRANCH_BITS", "TOP_NODES", "PriorityIndex", "SumTree", "last_wins"]

# The tree is K-ary, K = 2**BRANCH_BITS children per node, from the leaves up to a top level of at
# most TOP_NODES nodes, which `find` searches with one `searchsorted`. At DQN's batch sizes a
# batched tree operation pays NumPy's per-call overhead once per level, which outweighs its
# arithmetic, so fewer, wider levels win: 2**20 leaves make two 16-ary levels under a top of 4096
# nodes, where a binary tree has 20 levels. (Wider nodes cost more at B = 512, where the per-row
# work on (B, K) blocks, np.cumsum above all, starts to count.)
# Running sums come from np.cumsum, not from a product with a triangular matrix of ones: BLAS may
# run such a product multi-threaded and stall a busy machine, and it sums in an order NumPy does
# not promise, while `find` relies on in-order running sums (see `SumTree`).
BRANCH_BITS = 4
BRANCH = 1 << BRANCH_BITS
TOP_NODES = 4096


def last_wins(idx: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Drop all but the last occurrence of each index: ``(B,) int64, (B,) -> (sorted unique idx,
    their values)``.

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


def _level_sizes(capacity: int) -> list[int]:
    """Nodes per level, leaves first, up to the first level of at most `TOP_NODES` nodes (the
    top). Every level below the top is padded with zero nodes to a multiple of K; the level above
    it has one node per K of them."""
    sizes = [capacity]
    while sizes[-1] > TOP_NODES:
        sizes[-1] = -(-sizes[-1] // BRANCH) * BRANCH
        sizes.append(sizes[-1] // BRANCH)
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


def _first_mismatch(got: np.ndarray, expected: np.ndarray) -> int | None:
    """Row of the first difference between two arrays of equal shape (None when equal)."""
    rows = np.flatnonzero((got != expected).reshape(len(got), -1).any(axis=1))
    return int(rows[0]) if rows.size else None


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
    from the children (in order) on every update, never adjusted by deltas, so rounding cannot
    drift, and a child of zero mass repeats its predecessor's running sum exactly, so it can never
    be the first to exceed a prefix sum: `find` never returns an empty leaf. `check_valid` verifies
    all of this.

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
        self._capacity = check_int("capacity", capacity, 1)
        self._sizes = _level_sizes(self._capacity)
        self._nodes = np.zeros(self._storage(self._sizes), dtype=np.float64)
        self._build_views()

    @staticmethod
    def _storage(sizes: list[int]) -> int:
        """float64 entries of a tree with these level sizes."""
        return sizes[0] + sum(n * (BRANCH + 1) for n in sizes[1:]) + sizes[-1] + 1

    def _build_views(self) -> None:
        sizes = self._sizes
        parts = _split(self._nodes, [sizes[0], *(n * (BRANCH + 1) for n in sizes[1:]), sizes[-1] + 1])
        self._leaves, self._top_cumsum = parts[0], parts[-1]
        # bottom up: the (n, K + 1) running sums of each level, and the (n, K) children they sum
        self._prefix = [part.reshape(-1, BRANCH + 1) for part in parts[1:-1]]
        values = [self._leaves, *(prefix[:, -1] for prefix in self._prefix)]  # of each level
        self._children = [level.reshape(-1, BRANCH) for level in values[:-1]]
        self._top = values[-1]

    def _update(self, idx: np.ndarray) -> None:
        """Recompute the running sums above leaves ``idx`` (``(B,) int64``), bottom up."""
        node = idx
        for children, prefix in zip(self._children, self._prefix, strict=True):
            node = node >> BRANCH_BITS
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
        idx = check_indices(indices, self._capacity)
        values = self._leaves[idx]
        return float(values[0]) if shape == () else values.reshape(shape)

    def __setitem__(self, indices: Any, priorities: Any) -> None:
        """Set ``tree[indices] = priorities`` (``(...,) int``, float64 broadcast to the same shape).

        A repeated index: the last value wins.

        Raises:
            ReplayIndexError: an index outside ``[0, capacity)``.
            ValueError: non-integer indices, priorities that are negative, NaN or infinite, or
                that do not broadcast to the indices' shape.
        """
        shape = np.shape(indices)
        idx = check_indices(indices, self._capacity)
        try:
            values = np.broadcast_to(np.asarray(priorities, dtype=np.float64), shape).reshape(-1)
        except ValueError:
            raise ValueError(f"priorities of shape {np.shape(priorities)} do not match indices of "
                             f"shape {shape}") from None
        bad = ~np.isfinite(values) | (values < 0)
        if bad.any():
            raise ValueError(f"priorities must be finite and >= 0, got {values[bad][0]}")
        if idx.size:
            idx, values = last_wins(idx, values)
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
        np.maximum(v, 0.0, out=v)  # (np.clip costs more)
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
                k[past] = BRANCH - 1 - grows[:, ::-1].argmax(axis=1)
            v -= sums[rows, k]
            node <<= BRANCH_BITS
            node += k
        return node.reshape(shape)

    def check_valid(self) -> None:
        """Verify every invariant of the layout (O(capacity); for tests and debugging).

        Leaves are finite and >= 0, padding leaves 0; at each level, row ``j`` is 0 then exactly
        the in-order running sums (``np.cumsum``) of node ``j``'s K children, and padding rows are
        0; ``top_cumsum`` is 0 then the running sums of the top's nodes, its last entry `total`.
        Exact equality holds because running sums are recomputed in order, never adjusted.

        Raises:
            AssertionError: naming the first broken invariant (level, node, values).
        """
        leaves = self._leaves
        bad_leaves = leaves[~np.isfinite(leaves) | (leaves < 0)]
        if bad_leaves.size:
            raise AssertionError(f"SumTree leaves must be finite and >= 0, got {bad_leaves[:3].tolist()}")
        if leaves[self._capacity:].any():
            raise AssertionError(f"SumTree padding leaves (from {self._capacity} on) must be 0")
        for level, (children, prefix) in enumerate(zip(self._children, self._prefix, strict=True), 1):
            rows = len(children)
            expected = np.concatenate([np.zeros((rows, 1)), _prefix_sums(children)], axis=1)
            bad = _first_mismatch(prefix[:rows], expected)
            if bad is not None:
                raise AssertionError(f"SumTree level {level}, node {bad}: running sums {prefix[bad].tolist()} "
                                     f"are not 0 and the in-order sums of its children {expected[bad].tolist()}")
            if prefix[rows:].any():
                raise AssertionError(f"SumTree level {level}: padding rows (from {rows} on) must be 0")
        expected = np.concatenate([[0.0], np.cumsum(self._top)])
        bad = _first_mismatch(self._top_cumsum, expected)
        if bad is not None:
            raise AssertionError(f"SumTree top: running sum {bad} is {self._top_cumsum[bad]!r}, the in-order "
                                 f"sum of the top's nodes is {expected[bad]!r}")


class PriorityIndex:
    """The replay buffers' priorities: a `SumTree` plus the count and the minimum of the positive
    priorities, all updated together. A slot with priority 0 holds no sampleable transition.

    The minimum feeds the importance-weight normalization. It is kept in a min tree of the sum
    tree's shape above the leaves (float64, one node per node of the sum tree's levels up to the
    top): each node of the first level holds the minimum positive priority of its K leaves (inf:
    none), each node above the minimum of its K children; an update recomputes the touched paths
    like the sum tree's, and `min_positive` is the minimum of the top (at most 4096 nodes).

    Interface: ``get``, ``set``, ``find``, ``total``, ``min_positive``, ``count``, ``leaves``,
    ``load`` and ``nbytes`` (`ReplayBase.draw` descends `tree` itself: `SumTree.find`).

    Args:
        capacity: number of slots ``C``, >= 1.
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
            [level.reshape(-1, BRANCH) for level in self._min_levels[:-1]]
        # where min_positive looks: the top of the min tree, or the leaves of a tree with no levels
        self._min_top = self._min_levels[-1] if self._min_levels else self.tree._leaves

    def __getstate__(self) -> dict[str, Any]:
        return {"tree": self.tree, "_mins": self._mins, "count": self.count}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._build_views()

    @property
    def nbytes(self) -> int:
        """Bytes of the sum tree and the min tree."""
        return self.tree._nodes.nbytes + self._mins.nbytes

    @staticmethod
    def bytes_needed(capacity: int) -> int:
        """``nbytes`` of a `PriorityIndex` of ``capacity`` leaves."""
        sizes = _level_sizes(capacity)
        return 8 * (SumTree._storage(sizes) + sum(sizes[1:]))

    @property
    def total(self) -> float:
        """Sum of all priorities."""
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
        """``(B,) float64 -> (B,) int64``: `SumTree.find`."""
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
        """Set ``(B,) int64`` unique, in-range slots to ``(B,) float64`` priorities >= 0 (see
        `last_wins` for batches with repeats)."""
        if idx.size == 0:
            return
        leaves = self.tree._leaves
        self.count += np.count_nonzero(values) - np.count_nonzero(leaves[idx])
        leaves[idx] = values
        self.tree._update(idx)
        node, reduce = idx, _positive_minima
        for children, level in zip(self._min_children, self._min_levels, strict=True):
            node = node >> BRANCH_BITS
            _refresh(level, children, node, reduce)
            reduce = _minima

    def check_valid(self) -> None:
        """Verify the sum tree (`SumTree.check_valid`), every node of the min tree against its
        children (padding nodes inf) and the count of positive priorities.

        Raises:
            AssertionError: naming the first broken invariant.
        """
        self.tree.check_valid()
        reduce = _positive_minima
        for level, (children, mins) in enumerate(zip(self._min_children, self._min_levels, strict=True), 1):
            rows = len(children)
            expected = reduce(children)
            bad = _first_mismatch(mins[:rows], expected)
            if bad is not None:
                raise AssertionError(f"min tree level {level}, node {bad}: {mins[bad]!r} is not the minimum "
                                     f"{expected[bad]!r} of its children")
            if not np.isposinf(mins[rows:]).all():
                raise AssertionError(f"min tree level {level}: padding nodes (from {rows} on) must be inf")
            reduce = _minima
        count = int(np.count_nonzero(self.leaves()))
        if self.count != count:
            raise AssertionError(f"PriorityIndex count is {self.count} but {count} priorities are positive")
