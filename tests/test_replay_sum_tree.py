"""Tests of `SumTree` and `PriorityIndex` against an O(n) array: random operation streams,
duplicate indices, extreme priorities; `check_valid` after every change, and catching a
corrupted tree.
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vecdqn.replay import PriorityIndex, ReplayIndexError, SumTree, last_wins
from vecdqn.replay import sum_tree as sum_tree_module
from vecdqn.replay.sum_tree import BRANCH, TOP_NODES

FAST = settings(max_examples=60, deadline=None)
K = BRANCH


def make_tree(capacity: int, top: int = TOP_NODES) -> SumTree:
    """A `SumTree` whose top level has at most ``top`` nodes: with ``top=1`` even a tree of a few
    leaves has K-ary levels all the way up (the layout is fixed at construction)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sum_tree_module, "TOP_NODES", top)
        return SumTree(capacity)


def check_find(tree: SumTree, p: np.ndarray, prefix: np.ndarray) -> None:
    """find(prefix) returns positive leaves whose cumulative interval holds the prefix sum (up
    to rounding of the sums)."""
    leaves = tree.find(prefix)
    assert leaves.dtype == np.int64 and leaves.shape == prefix.shape
    assert (leaves >= 0).all() and (leaves < p.size).all()
    assert (p[leaves] > 0).all(), "find returned an empty leaf"
    cum = np.concatenate([[0.0], np.cumsum(p)])
    total = cum[-1]
    v = np.clip(prefix, 0, np.nextafter(total, 0))  # find clamps into [0, total)
    slack = 1e-9 * total
    assert (cum[leaves] <= v + slack).all() and (v < cum[leaves + 1] + slack).all()


# -- SumTree -------------------------------------------------------------------------------------


@st.composite
def tree_operations(draw):
    # Trees of at most `top` leaves are searched whole; above, K-ary levels run. Padding edges:
    # 1, K, K + 1, K^2 + 1 leaves with top = 1 (K-ary up to one node), and around 4096 (the top).
    top = draw(st.sampled_from([1, 2 * K, TOP_NODES]))
    capacity = draw(st.integers(1, 70) | st.sampled_from([1, K, K + 1, K * K, K * K + 1])
                    | st.integers(4090, 4200))
    index = st.integers(0, capacity - 1)
    value = st.floats(0.0, 1e3, allow_nan=False) | st.sampled_from([0.0, 1.0, 1e-300])
    ops = draw(st.lists(st.tuples(st.lists(index, min_size=1, max_size=12),
                                  st.lists(value, min_size=12, max_size=12)), max_size=12))
    return capacity, top, ops


@FAST
@given(tree_operations(), st.lists(st.floats(-1.0, 2.0), min_size=1, max_size=20))
def test_sum_tree_matches_naive_array(case, fractions):
    capacity, top, ops = case
    tree, naive = make_tree(capacity, top), np.zeros(capacity)
    for indices, values in ops:
        values = values[: len(indices)]
        tree[indices] = values
        for i, v in zip(indices, values, strict=True):  # sequential: the last write wins
            naive[i] = v
        assert np.array_equal(tree[np.arange(capacity)], naive)
        tree.check_valid()
        assert tree.total == pytest.approx(naive.sum(), rel=1e-12, abs=1e-300)
        if naive.sum() > 0:
            check_find(tree, naive, np.array(fractions) * tree.total)


@FAST
@given((st.integers(1, 40) | st.integers(2000, 3000)).flatmap(lambda n: st.tuples(
    st.just(n), st.lists(st.integers(0, n - 1), min_size=1, max_size=60),
    st.lists(st.floats(0, 10), min_size=60, max_size=60))), st.sampled_from([1, TOP_NODES]))
def test_duplicate_indices_last_value_wins(case, top):
    capacity, indices, values = case
    values = np.array(values[: len(indices)])
    tree = make_tree(capacity, top)
    tree[np.array(indices)] = values
    last = {i: v for i, v in zip(indices, values, strict=True)}
    for i in range(capacity):
        assert tree[i] == last.get(i, 0.0)
    tree.check_valid()


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 3000) | st.integers(4097, 70000), st.floats(0.0, 1.0), st.integers(0, 2**32 - 1),
       st.sampled_from([1, TOP_NODES]))
def test_find_never_returns_an_empty_leaf_with_extreme_priorities(capacity, fill, seed, top):
    rng = np.random.default_rng(seed)
    filled = max(1, int(capacity * fill))
    p = np.zeros(capacity)
    p[:filled] = 10.0 ** rng.uniform(-8, 8, filled)  # 16 orders of magnitude
    p[:filled][rng.random(filled) < 0.3] = 0.0  # holes inside the filled part
    p[rng.integers(filled)] = 1e-8
    tree = make_tree(capacity, top)
    tree[np.arange(capacity)] = p
    total = tree.total
    edges = np.array([0.0, -1.0, total, total * (1 + 1e-15), np.nextafter(total, 0), 2 * total,
                      np.inf, -np.inf, 1e-300])
    prefix = np.concatenate([edges, rng.uniform(0, total, 2000), total - rng.uniform(0, 1e-6, 50) * total])
    check_find(tree, p, prefix)
    # A prefix sum falling exactly on the boundary after the tiniest leaf.
    check_find(tree, p, np.cumsum(p))


def test_sum_tree_basics_and_errors():
    tree = SumTree(5)
    tree[[0, 2, 2]] = [1.0, 5.0, 3.0]
    assert tree.total == 4.0 and tree[2] == 3.0 and tree[1] == 0.0
    assert tree.find([0.0, 0.999, 1.0, 3.999]).tolist() == [0, 0, 2, 2]
    assert tree.find(2.5).shape == ()
    tree[4] = 2.0
    assert tree[[4, 0]].tolist() == [2.0, 1.0] and len(tree) == 5
    assert pickle.loads(pickle.dumps(tree)).find([5.5]).tolist() == [4]
    for bad in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match="capacity"):
            SumTree(bad)
    with pytest.raises(ReplayIndexError, match="5"):
        tree[5] = 1.0
    with pytest.raises(IndexError):
        tree[[-1]]
    with pytest.raises(ValueError, match="finite and >= 0"):
        tree[1] = -1.0
    with pytest.raises(ValueError, match="finite"):
        tree[1] = np.nan
    with pytest.raises(ValueError, match="integers"):
        tree[[1.5]] = 1.0
    with pytest.raises(ValueError, match="do not match"):
        tree[[1, 2]] = [1.0, 2.0, 3.0]
    with pytest.raises(ValueError, match="all 0"):
        SumTree(3).find([0.0])
    with pytest.raises(ValueError, match="NaN"):
        tree.find([1.0, np.nan])


def test_find_takes_the_last_positive_child_when_v_rounds_past_the_sums():
    # Rounding can leave a remainder at or above a node's last running sum; simulate it by
    # raising the total of a tree whose top is one node (K-ary levels all the way up) above the
    # sum of the leaves: prefix sums near the total then run past the last positive child at
    # every level, and must still land on a positive leaf.
    capacity = K * K + 3
    tree = make_tree(capacity, top=1)
    p = np.zeros(capacity)
    p[[0, 5, K + 1, K * K - 2]] = [1.0, 2.0, 3.0, 4.0]  # the last leaves and the padding stay 0
    tree[np.arange(capacity)] = p
    tree._top_cumsum[-1] *= 1.5
    assert tree.find([tree.total, 10.0 + 1e-9, 12.0]).tolist() == [K * K - 2] * 3
    assert tree.find([0.0, 2.5, 5.5]).tolist() == [0, 5, K + 1]


@pytest.mark.parametrize("capacity, top", [(1, 1), (K + 1, 1), (K * K + 1, 1), (5000, 2 * K), (70000, 4096)])
def test_priority_index_updates_equal_a_rebuild(capacity, top):
    # Batches smaller and larger than a level (the whole-level path), duplicates across calls,
    # zeros; the sums, minima and count must equal those rebuilt from the leaves (check_valid).
    rng = np.random.default_rng(capacity)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sum_tree_module, "TOP_NODES", top)
        index, rebuilt = PriorityIndex(capacity), PriorityIndex(capacity)
        assert index.nbytes == PriorityIndex.bytes_needed(capacity)
    for size in (1, 7, 600, 3, 2000):
        idx = np.unique(rng.integers(0, capacity, size))
        values = rng.exponential(size=idx.size) * (rng.random(idx.size) < 0.8)
        index.set(idx, values)
        index.check_valid()
        rebuilt.load(index.leaves().copy())
        rebuilt.check_valid()
        assert (index.total, index.min_positive, index.count) == (rebuilt.total, rebuilt.min_positive, rebuilt.count)
        leaves = index.leaves()
        assert index.count == np.count_nonzero(leaves)
        assert index.min_positive == (leaves[leaves > 0].min() if leaves.any() else np.inf)
    copy = pickle.loads(pickle.dumps(index))
    copy.check_valid()
    np.testing.assert_array_equal(copy.leaves(), index.leaves())
    assert copy.min_positive == index.min_positive and copy.count == index.count and copy.total == index.total
    idx = np.unique(rng.integers(0, capacity, 5))
    copy.set(idx, np.ones(idx.size))  # the copy's views follow its own storage
    copy.check_valid()


def test_last_wins_keeps_the_last_value_of_each_index():
    idx, values = last_wins(np.array([5, 1, 5, 3, 1, 5]), np.array([0.0, 1.0, 2.0, 3.0, 4.0, 5.0]))
    assert idx.tolist() == [1, 3, 5] and values.tolist() == [4.0, 3.0, 5.0]
    idx, values = last_wins(np.array([2]), np.array([7.0]))
    assert idx.tolist() == [2] and values.tolist() == [7.0]


# -- check_valid catches a corrupted tree --------------------------------------------------------


def valid_tree() -> SumTree:
    """A tree with two K-ary levels above the leaves (top = 1 node), every invariant holding."""
    capacity = K * K + 3
    tree = make_tree(capacity, top=1)
    tree[np.arange(capacity)] = np.random.default_rng(0).exponential(size=capacity)
    tree.check_valid()
    return tree


@pytest.mark.parametrize("corrupt, message", [
    (lambda t: t._leaves.__setitem__(5, t._leaves[5] + 1.0), r"level 1, node 0: running sums"),
    (lambda t: t._leaves.__setitem__(K + 2, -1.0), r"finite and >= 0"),
    (lambda t: t._leaves.__setitem__(-1, 1.0), r"padding leaves"),
    (lambda t: t._prefix[1].__setitem__((0, 3), 0.5), r"level 2, node 0"),
    (lambda t: t._prefix[0].__setitem__((0, 0), 0.5), r"level 1, node 0"),
    (lambda t: t._prefix[0].__setitem__((-1, 4), 0.5), r"level 1: padding rows"),
    (lambda t: t._top_cumsum.__setitem__(-1, t._top_cumsum[-1] * 1.5), r"top: running sum 1"),
])
def test_check_valid_catches_a_corrupted_sum_tree(corrupt, message):
    tree = valid_tree()
    corrupt(tree)
    with pytest.raises(AssertionError, match=message):
        tree.check_valid()


def test_check_valid_catches_a_corrupted_min_tree_and_count():
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sum_tree_module, "TOP_NODES", 1)
        index = PriorityIndex(K * K + 3)
    index.set(np.arange(0, K * K, 7), np.arange(1.0, 1.0 + len(range(0, K * K, 7))))
    index.check_valid()
    index._min_levels[0][2] = 0.25
    with pytest.raises(AssertionError, match="min tree level 1, node 2"):
        index.check_valid()
    index.load(index.leaves().copy())
    index.check_valid()
    index.count += 1
    with pytest.raises(AssertionError, match="count"):
        index.check_valid()
    index.load(index.leaves().copy())
    index.tree._leaves[0] = 2.0  # a leaf changed behind the index's back: the sums break first
    with pytest.raises(AssertionError, match="SumTree level 1"):
        index.check_valid()
