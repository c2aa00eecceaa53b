"""Tests of vecdqn.replay against naive oracles (STYLE.md, convention 8).

* `SumTree` against an O(n) array on random operation streams, duplicates, extreme priorities;
* sampling frequencies against ``p^α / Σ p^α`` (chi-square), weights against the closed form;
* the frame-efficient buffer against `StackedReplayBuffer` on FrameStack-like streams;
* n-step returns against a slow Python reference;
* ``obs = step`` fills that check no stack mixes envs or episodes across wrap-around.
"""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vecdqn import replay
from vecdqn.replay import (
    PrioritizedReplayBuffer,
    ReplayIndexError,
    ReplaySample,
    StackedReplayBuffer,
    SumTree,
)

BUFFERS = [StackedReplayBuffer, PrioritizedReplayBuffer]
FAST = settings(max_examples=60, deadline=None)


def chi2_critical(dof: int, z: float = 3.72) -> float:
    """Upper quantile of chi-square(dof) at the normal quantile z (3.72: p = 1e-4), by the
    Wilson-Hilferty approximation (no SciPy in the test dependencies)."""
    h = 2.0 / (9.0 * dof)
    return dof * (1.0 - h + z * math.sqrt(h)) ** 3


K = replay._BRANCH


def make_tree(capacity: int, top: int = replay._TOP_NODES) -> SumTree:
    """A `SumTree` whose top level has at most ``top`` nodes: with ``top=1`` even a tree of a few
    leaves has K-ary levels all the way up (the layout is fixed at construction)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(replay, "_TOP_NODES", top)
        return SumTree(capacity)


def internal_nodes_are_sums(tree: SumTree) -> bool:
    """Each level's running sums are 0 then the in-order running sums of the K values below
    (leaves, or the last running sums of the level below), close to NumPy's pairwise sums too;
    the top's running sums end in the total; padding leaves are 0."""
    values = tree._leaves
    ok = not values[tree.capacity:].any()
    for prefix in tree._prefix:
        children = values.reshape(-1, K)  # (nodes, K); the level's padding nodes (rows) have none
        rows = len(children)
        ok &= not prefix[:, 0].any() and not prefix[rows:].any()
        ok &= np.array_equal(prefix[:rows, 1:], np.cumsum(children, axis=1))
        ok &= np.allclose(prefix[:rows, -1], children.sum(axis=1), rtol=1e-12, atol=0)
        values = prefix[:, -1]
    cumsum = tree._top_cumsum
    ok &= cumsum[0] == 0 and np.array_equal(cumsum[1:], np.cumsum(values)) and tree.total == cumsum[-1]
    return bool(ok and np.isclose(tree.total, values.sum(), rtol=1e-12, atol=0))


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
    top = draw(st.sampled_from([1, 2 * K, replay._TOP_NODES]))
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
        assert internal_nodes_are_sums(tree)
        assert tree.total == pytest.approx(naive.sum(), rel=1e-12, abs=1e-300)
        if naive.sum() > 0:
            check_find(tree, naive, np.array(fractions) * tree.total)


@FAST
@given((st.integers(1, 40) | st.integers(2000, 3000)).flatmap(lambda n: st.tuples(
    st.just(n), st.lists(st.integers(0, n - 1), min_size=1, max_size=60),
    st.lists(st.floats(0, 10), min_size=60, max_size=60))), st.sampled_from([1, replay._TOP_NODES]))
def test_duplicate_indices_last_value_wins(case, top):
    capacity, indices, values = case
    values = np.array(values[: len(indices)])
    tree = make_tree(capacity, top)
    tree[np.array(indices)] = values
    last = {i: v for i, v in zip(indices, values, strict=True)}
    for i in range(capacity):
        assert tree[i] == last.get(i, 0.0)
    assert internal_nodes_are_sums(tree)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 3000) | st.integers(4097, 70000), st.floats(0.0, 1.0), st.integers(0, 2**32 - 1),
       st.sampled_from([1, replay._TOP_NODES]))
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
    # zeros; the sums, minima and count must equal those rebuilt from the leaves.
    rng = np.random.default_rng(capacity)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(replay, "_TOP_NODES", top)
        index, rebuilt = replay._PriorityIndex(capacity), replay._PriorityIndex(capacity)
    for size in (1, 7, 600, 3, 2000):
        idx = np.unique(rng.integers(0, capacity, size))
        values = rng.exponential(size=idx.size) * (rng.random(idx.size) < 0.8)
        index.set(idx, values)
        rebuilt.load(index.leaves().copy())
        np.testing.assert_array_equal(index.tree._nodes, rebuilt.tree._nodes)
        np.testing.assert_array_equal(index._mins, rebuilt._mins)
        assert internal_nodes_are_sums(index.tree)
        leaves = index.leaves()
        assert index.count == np.count_nonzero(leaves)
        assert index.min_positive == (leaves[leaves > 0].min() if leaves.any() else np.inf)
    copy = pickle.loads(pickle.dumps(index))
    np.testing.assert_array_equal(copy.tree._nodes, index.tree._nodes)
    assert copy.min_positive == index.min_positive and copy.count == index.count


def test_pickles_of_the_binary_tree_still_load():
    # Saved replays (--save-replay) from before the K-ary tree: a binary heap, node 1 the root,
    # leaf i at node 2**depth + i, and per-block minima.
    capacity, depth = 5, 3
    heap = np.zeros(2 << depth)
    heap[8:13] = [1.0, 0.0, 3.0, 0.5, 0.0]
    old_tree = SumTree.__new__(SumTree)
    old_tree.__setstate__({"_capacity": capacity, "_depth": depth, "_nodes": heap})
    assert old_tree[np.arange(5)].tolist() == [1.0, 0.0, 3.0, 0.5, 0.0] and old_tree.total == 4.5
    assert internal_nodes_are_sums(old_tree) and old_tree.find([1.5, 4.2]).tolist() == [2, 3]
    index = replay._PriorityIndex.__new__(replay._PriorityIndex)
    index.__setstate__({"tree": old_tree, "_block_min": np.array([0.5]), "count": 3})
    assert index.min_positive == 0.5 and index.count == 3 and index.total == 4.5


# -- prioritized sampling ------------------------------------------------------------------------


def tiny_stream(n_envs: int, steps: int, obs_shape=(2, 3), seed: int = 0):
    """Random transitions for tests that do not look at observations."""
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        yield (rng.integers(0, 256, (n_envs, *obs_shape), dtype=np.uint8), rng.integers(0, 6, n_envs),
               rng.normal(size=n_envs), rng.integers(0, 256, (n_envs, *obs_shape), dtype=np.uint8),
               rng.random(n_envs) < 0.1, rng.random(n_envs) < 0.05)


def filled(cls, capacity=256, n_envs=4, steps=5, alpha=0.6, seed=0, **kwargs):
    buffer = cls(capacity, (2, 3), alpha=alpha, seed=seed, **kwargs)
    slots = [buffer.add(*t) for t in tiny_stream(n_envs, steps, seed=seed)]
    return buffer, np.concatenate(slots)


@pytest.mark.parametrize("cls", BUFFERS)
def test_sampling_frequencies_match_priorities(cls):
    buffer, slots = filled(cls, n_envs=4, steps=5, alpha=0.7)
    rng = np.random.default_rng(1)
    td = rng.exponential(size=slots.size) * (rng.random(slots.size) < 0.8)
    buffer.update_priorities(slots, td)
    expected = (np.abs(td) + buffer.eps) ** 0.7
    expected /= expected.sum()
    draws, batch = 5000, 16
    counts = np.zeros(buffer.capacity)
    for _ in range(draws):
        np.add.at(counts, buffer.sample(batch, 0.5).indices, 1)
    observed = counts[slots]
    assert observed.sum() == draws * batch, "sampled a slot that holds no transition"
    chi2 = (((observed - draws * batch * expected) ** 2) / (draws * batch * expected)).sum()
    assert chi2 < chi2_critical(slots.size - 1), chi2


@pytest.mark.parametrize("cls", BUFFERS)
def test_weights_match_the_closed_form(cls):
    buffer, slots = filled(cls, n_envs=4, steps=6, alpha=0.6)
    td = np.linspace(0.0, 3.0, slots.size)
    buffer.update_priorities(slots, td)
    p_alpha = (td + buffer.eps) ** 0.6
    prob = p_alpha / p_alpha.sum()
    n = len(buffer)
    assert n == slots.size
    for beta in (0.0, 0.4, 1.0):
        batch = buffer.sample(16, beta)
        where = np.searchsorted(slots, batch.indices) if np.all(np.diff(slots) > 0) else \
            np.array([np.flatnonzero(slots == i)[0] for i in batch.indices])
        w = (n * prob[where]) ** -beta / ((n * prob.min()) ** -beta)
        np.testing.assert_allclose(batch.weights, w, rtol=1e-6)
        assert batch.weights.dtype == np.float32 and batch.weights.max() <= 1.0


@pytest.mark.parametrize("cls", BUFFERS)
def test_new_transitions_get_the_max_priority(cls):
    buffer, slots = filled(cls, n_envs=2, steps=3, alpha=0.5)
    assert buffer.max_priority == 1.0
    np.testing.assert_array_equal(buffer.priorities(slots), 1.0)
    buffer.update_priorities(slots[:2], [3.0, -7.0])
    assert buffer.max_priority == pytest.approx(7.0 + buffer.eps)
    new = buffer.add(*next(tiny_stream(2, 1, seed=5)))
    np.testing.assert_allclose(buffer.priorities(new), (7.0 + buffer.eps) ** 0.5)
    np.testing.assert_allclose(buffer.tree[new], (7.0 + buffer.eps) ** 0.5)
    buffer.update_priorities(slots[:2], [0.0, 0.0])  # smaller priorities do not lower the max
    assert buffer.max_priority == pytest.approx(7.0 + buffer.eps)


@pytest.mark.parametrize("cls", BUFFERS)
def test_partly_filled_buffer_never_samples_an_empty_slot(cls):
    buffer, slots = filled(cls, capacity=4096, n_envs=4, steps=3)
    buffer.update_priorities(slots, np.geomspace(1e-8, 1e8, slots.size))
    for _ in range(300):
        batch = buffer.sample(len(buffer), 1.0)
        assert np.isin(batch.indices, slots).all()
    # A slot sampled, then overwritten, stays unsampleable even if its old TD error comes back.
    assert len(buffer) == slots.size


@pytest.mark.parametrize("cls", BUFFERS)
def test_sample_fields_dtypes_and_three_access_styles(cls):
    buffer, _ = filled(cls, n_envs=3, steps=4)
    batch = buffer.sample(8, 0.4)
    assert isinstance(batch, ReplaySample)
    shapes = {"obs": ((8, 2, 3), np.uint8), "actions": ((8,), np.int64), "rewards": ((8,), np.float32),
              "next_obs": ((8, 2, 3), np.uint8), "terminated": ((8,), np.bool_),
              "weights": ((8,), np.float32), "indices": ((8,), np.int64), "discounts": ((8,), np.float32)}
    for name, (shape, dtype) in shapes.items():
        assert getattr(batch, name).shape == shape and getattr(batch, name).dtype == dtype, name
        assert batch[name] is getattr(batch, name)
    obs, actions, rewards, next_obs, terminated, weights, indices = batch
    assert obs is batch.obs and indices is batch.indices and batch[6] is indices
    assert len(tuple(batch)) == 7 and "discounts" in batch.keys()
    np.testing.assert_array_equal(batch.discounts, np.where(batch.terminated, 0.0, np.float32(0.99)))
    with pytest.raises(KeyError):
        batch["truncated"]
    with pytest.raises(dataclasses_frozen_error()):
        batch.obs = None


def dataclasses_frozen_error():
    import dataclasses
    return dataclasses.FrozenInstanceError


@pytest.mark.parametrize("cls", BUFFERS)
def test_errors_name_the_bad_value(cls):
    for kwargs, match in [({"capacity": 0}, "capacity"), ({"alpha": -0.1}, "alpha"),
                          ({"eps": 0.0}, "eps"), ({"gamma": 1.5}, "gamma"),
                          ({"obs_shape": ()}, "obs_shape"), ({"capacity": 3.0}, "capacity")]:
        args = {"capacity": 64, "obs_shape": (2, 3)} | kwargs
        with pytest.raises(ValueError, match=match):
            cls(**args)
    buffer, _ = filled(cls, n_envs=2, steps=2)
    with pytest.raises(ValueError, match="batch_size 5 is larger than the 4"):
        buffer.sample(5, 0.4)
    with pytest.raises(ValueError, match="beta"):
        buffer.sample(2, 1.5)
    obs, actions, rewards, next_obs, term, trunc = next(tiny_stream(2, 1))
    with pytest.raises(ValueError, match="dtype float32"):
        buffer.add(obs.astype(np.float32), actions, rewards, next_obs, term)
    with pytest.raises(ValueError, match=r"obs has shape \(2, 3, 3\)"):
        buffer.add(np.zeros((2, 3, 3), np.uint8), actions, rewards, next_obs, term)
    with pytest.raises(ValueError, match="next_obs"):
        buffer.add(obs, actions, rewards, next_obs[:1], term)
    with pytest.raises(ValueError, match="actions"):
        buffer.add(obs, actions[:1], rewards, next_obs, term)
    with pytest.raises(ValueError, match="actions must be integers"):
        buffer.add(obs, actions + 0.5, rewards, next_obs, term)
    with pytest.raises(ValueError, match="terminated"):
        buffer.add(obs, actions, rewards, next_obs, np.array([0.5, 0.2]))
    with pytest.raises(ValueError, match="rewards must be finite"):
        buffer.add(obs, actions, np.array([np.nan, 0]), next_obs, term)
    with pytest.raises(ValueError, match="td_errors has shape"):
        buffer.update_priorities([0, 1], [1.0])
    with pytest.raises(ReplayIndexError):
        buffer.update_priorities([buffer.capacity], [1.0])
    with pytest.raises(ValueError, match="finite"):
        buffer.update_priorities([0], [np.inf])


@pytest.mark.parametrize("cls", BUFFERS)
def test_single_env_transition_without_batch_axis_and_pickle(cls):
    buffer = cls(64, (2, 3), seed=3)
    obs, actions, rewards, next_obs, term, trunc = next(tiny_stream(1, 1))
    slots = buffer.add(obs[0], int(actions[0]), float(rewards[0]), next_obs[0], bool(term[0]))
    assert slots.shape == (1,) and len(buffer) == 1
    copy = pickle.loads(pickle.dumps(buffer))
    a, b = buffer.sample(1, 0.4), copy.sample(1, 0.4)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)
    np.testing.assert_array_equal(a.obs[0], obs[0])


# -- frame-efficient storage: streams and references ---------------------------------------------


class FrameStackStream:
    """N fake envs behind FrameStack(S) and SAME_STEP autoreset.

    Frame pixels encode ``(env, episode, t)`` (t = frames since the episode's reset frame) plus
    noise, so a stack tells where each of its frames came from. ``step()`` returns one ``add``
    batch: ``next_obs[i]`` of an ended env is its final observation and the following ``obs[i]``
    the new episode's reset stack, every slot holding the first frame.
    """

    def __init__(self, n_envs=3, stack=4, seed=0, p_end=0.08, pad_zero=False):
        self.n, self.s, self.p_end, self.pad_zero = n_envs, stack, p_end, pad_zero
        self.rng = np.random.default_rng(seed)
        self.episode = np.zeros(n_envs, dtype=np.int64)
        self.t = np.zeros(n_envs, dtype=np.int64)
        self.stacks = np.stack([self._reset_stack(i) for i in range(n_envs)])

    def frame(self, env, episode, t):
        return np.array([env, episode % 256, t // 256, t % 256, self.rng.integers(256),
                         (env * 7 + episode * 3 + t) % 256], dtype=np.uint8).reshape(2, 3)

    def _reset_stack(self, i):
        first = self.frame(i, self.episode[i], 0)
        stack = np.repeat(first[None], self.s, axis=0)
        if self.pad_zero:  # FrameStack with zero padding: not a repeated frame
            stack[:-1] = 0
        return stack

    @staticmethod
    def action(env, episode, t):
        return (env + 3 * episode + 5 * t) % 7

    @staticmethod
    def reward(env, episode, t):
        return float((env * 13 + episode * 5 + t * 3) % 11) - 5.0

    def step(self):
        obs = self.stacks.copy()
        actions = np.array([self.action(i, self.episode[i], self.t[i]) for i in range(self.n)])
        rewards = np.array([self.reward(i, self.episode[i], self.t[i]) for i in range(self.n)])
        self.t += 1
        next_obs = np.concatenate([obs[:, 1:], np.stack(
            [self.frame(i, self.episode[i], self.t[i]) for i in range(self.n)])[:, None]], axis=1)
        ends = self.rng.random(self.n) < self.p_end
        terminated = ends & (self.rng.random(self.n) < 0.6)
        truncated = ends & ~terminated
        self.stacks = next_obs.copy()
        for i in np.flatnonzero(ends):
            self.episode[i] += 1
            self.t[i] = 0
            self.stacks[i] = self._reset_stack(i)
        return obs, actions, rewards, next_obs, terminated, truncated


def reference_transitions(steps, n_step, gamma):
    """The n-step transitions of a stream, by the definition, one env and one step at a time.

    ``steps``: the ``add`` batches. Returns ``{(env, t): (obs, action, return, next_obs,
    terminated, discount)}`` for every step whose window is complete.
    """
    n_envs = len(steps[0][0])
    out = {}
    for env in range(n_envs):
        seq = [tuple(x[env] for x in step) for step in steps]  # (obs, a, r, next, term, trunc)
        for t in range(len(seq)):
            ret, disc, k = 0.0, None, 0
            while k < n_step:
                if t + k >= len(seq):
                    break
                obs_k, a_k, r_k, next_k, term_k, trunc_k = seq[t + k]
                ret += gamma ** k * float(r_k)
                k += 1
                if term_k:
                    disc, terminated = 0.0, True
                    break
                if trunc_k:
                    disc, terminated = gamma ** k, False
                    break
                if k == n_step:
                    disc, terminated = gamma ** k, False
            if disc is None:  # the window runs past the stream's end: not complete yet
                continue
            out[(env, t)] = (seq[t][0], seq[t][1], ret, next_k, terminated, disc)
    return out


def fill_and_record(buffer, steps):
    """Add the batches; return {slot: (env, t)} of the latest transition written to each slot."""
    owner = {}
    for t, step in enumerate(steps):
        for env, slot in enumerate(buffer.add(*step)):
            owner[int(slot)] = (env, t)
    return owner


def check_against_reference(buffer, steps, owner, expected, *, exact_set):
    slots = np.flatnonzero(buffer.priorities(np.arange(buffer.capacity)) > 0)
    assert len(buffer) == slots.size
    if exact_set:
        assert sorted(owner[s] for s in slots) == sorted(expected)
    if slots.size == 0:
        return
    got = buffer.transitions(slots)
    for row, slot in enumerate(slots):
        key = owner[int(slot)]
        assert key in expected, f"slot {slot} holds {key}, whose window is not complete"
        obs, action, ret, next_obs, terminated, disc = expected[key]
        np.testing.assert_array_equal(got.obs[row], obs, err_msg=str(key))
        np.testing.assert_array_equal(got.next_obs[row], next_obs, err_msg=str(key))
        assert got.actions[row] == action and got.terminated[row] == terminated, key
        assert got.rewards[row] == pytest.approx(ret, rel=1e-6, abs=1e-5), key
        assert got.discounts[row] == pytest.approx(disc, rel=1e-6), key


@st.composite
def streams(draw):
    n_envs = draw(st.integers(1, 3))
    stack = draw(st.integers(1, 4))
    n_step = draw(st.integers(1, 4))
    n_steps = draw(st.integers(1, 40))
    kind = draw(st.sampled_from(["framestack", "framestack-zero-pad", "random", "mixed"]))
    seed = draw(st.integers(0, 2**31))
    p_end = draw(st.sampled_from([0.0, 0.1, 0.4]))
    extra = draw(st.sampled_from([400]) | st.integers(0, 12))  # 0..12: rings that wrap, tiny ones
    return n_envs, stack, n_step, n_steps, kind, seed, p_end, extra


def make_steps(n_envs, stack, n_steps, kind, seed, p_end):
    rng = np.random.default_rng(seed)
    stream = FrameStackStream(n_envs, stack, seed, p_end, pad_zero=kind == "framestack-zero-pad")
    steps = []
    for _ in range(n_steps):
        obs, actions, rewards, next_obs, term, trunc = stream.step()
        if kind == "random" or (kind == "mixed" and rng.random() < 0.3):
            obs = rng.integers(0, 256, obs.shape, dtype=np.uint8)
            next_obs = rng.integers(0, 256, obs.shape, dtype=np.uint8)
            if kind == "mixed" and rng.random() < 0.5:  # next_obs a shift of obs but obs breaks off
                next_obs[:, :-1] = obs[:, 1:]
        rewards = rng.normal(size=n_envs) if kind != "framestack" else rewards
        steps.append((obs, actions, rewards, next_obs, term, trunc))
    return steps


@settings(max_examples=80, deadline=None)
@given(streams())
def test_n_step_transitions_match_the_reference(case):
    n_envs, stack, n_step, n_steps, kind, seed, p_end, extra = case
    gamma = 0.9
    steps = make_steps(n_envs, stack, n_steps, kind, seed, p_end)
    ring = 2 * stack + extra
    buffer = PrioritizedReplayBuffer(ring * n_envs, (stack, 2, 3), seed=seed, n_step=n_step, gamma=gamma)
    owner = fill_and_record(buffer, steps)
    expected = reference_transitions(steps, n_step, gamma)
    # without wrap-around, exactly the complete windows are sampleable
    check_against_reference(buffer, steps, owner, expected, exact_set=extra == 400)


def test_five_step_episode_with_three_step_returns():
    gamma = 0.5
    for end in ("terminated", "truncated"):
        stream = FrameStackStream(n_envs=1, stack=4, p_end=0.0)
        buffer = PrioritizedReplayBuffer(64, (4, 2, 3), n_step=3, gamma=gamma)
        slots = []
        for t in range(5):
            obs, actions, _, next_obs, term, trunc = stream.step()
            flags = {"terminated": np.array([t == 4 and end == "terminated"]),
                     "truncated": np.array([t == 4 and end == "truncated"])}
            slots.append(buffer.add(obs, actions, np.array([1.0 + t]), next_obs, **flags)[0])
            assert len(buffer) == (max(0, t - 1) if t < 4 else 5)
        batch = buffer.transitions(slots)
        r = [1.0, 2.0, 3.0, 4.0, 5.0]
        expected_returns = [r[0] + gamma * r[1] + gamma**2 * r[2], r[1] + gamma * r[2] + gamma**2 * r[3],
                            r[2] + gamma * r[3] + gamma**2 * r[4], r[3] + gamma * r[4], r[4]]
        np.testing.assert_allclose(batch.rewards, expected_returns)
        if end == "terminated":
            np.testing.assert_allclose(batch.discounts, [gamma**3, gamma**3, 0, 0, 0])
            assert batch.terminated.tolist() == [False, False, True, True, True]
        else:
            np.testing.assert_allclose(batch.discounts, [gamma**3, gamma**3, gamma**3, gamma**2, gamma])
            assert not batch.terminated.any()
        # every bootstrap observation ends in the frame 3 steps on, or the final frame
        assert [int(x[-1, 0, 2]) * 256 + int(x[-1, 1, 0]) for x in batch.next_obs] == [3, 4, 5, 5, 5]


def test_frame_efficient_buffer_equals_stacked_buffer_across_wrap_arounds():
    n_envs, stack = 4, 4
    stream = FrameStackStream(n_envs, stack, seed=7, p_end=0.06)
    frames = PrioritizedReplayBuffer(4 * 50, (stack, 2, 3), alpha=0.6, seed=1)
    stacked = StackedReplayBuffer(4 * 700, (stack, 2, 3), alpha=0.6, seed=1)
    twin = {}
    for step in range(600):  # 600 steps = 12+ laps of each env's 50-slot ring
        batch = stream.step()
        for f_slot, s_slot in zip(frames.add(*batch), stacked.add(*batch), strict=True):
            twin[int(f_slot)] = int(s_slot)
        if step % 37 == 0 or step > 590:
            live = np.flatnonzero(frames.priorities(np.arange(frames.capacity)) > 0)
            if step > 60:  # full: all but the slots near each cursor and the final frames
                assert live.size >= 0.8 * frames.capacity - n_envs * (stack - 1)
            a = frames.transitions(live)
            b = stacked.transitions([twin[s] for s in live])
            for name in ("obs", "actions", "rewards", "next_obs", "terminated", "discounts"):
                np.testing.assert_array_equal(a[name], b[name], err_msg=f"{name} at step {step}")
    # With equal priorities and seeds, both buffers draw the same transitions too.
    a, b = frames.sample(64, 0.4), stacked.sample(64, 0.4)
    assert a.obs.shape == b.obs.shape == (64, stack, 2, 3)


def decode(frame):
    """(env, episode, t) of a FrameStackStream frame."""
    return int(frame[0, 0]), int(frame[0, 1]), int(frame[0, 2]) * 256 + int(frame[1, 0])


@pytest.mark.parametrize("n_step", [1, 3])
def test_stacks_never_mix_envs_or_episodes_across_wrap_around(n_step):
    stack, n_envs = 4, 5
    stream = FrameStackStream(n_envs, stack, seed=3, p_end=0.05)
    buffer = PrioritizedReplayBuffer(n_envs * 64, (stack, 2, 3), seed=0, n_step=n_step, gamma=0.9)
    for step in range(900):
        buffer.add(*stream.step())
        if step < 20 or step % 50:
            continue
        batch = buffer.sample(min(len(buffer), 256), 0.5)
        for obs, action, next_obs, disc, term in zip(batch.obs, batch.actions, batch.next_obs,
                                                     batch.discounts, batch.terminated, strict=True):
            env, episode, t = decode(obs[-1])
            # obs: frames t-3..t of one env and episode, clamped at the episode's first frame
            assert [decode(f) for f in obs] == [(env, episode, max(0, t - k)) for k in (3, 2, 1, 0)]
            assert action == stream.action(env, episode, t)
            env2, episode2, t2 = decode(next_obs[-1])
            h = t2 - t
            assert (env2, episode2) == (env, episode) and 1 <= h <= n_step
            assert [decode(f) for f in next_obs] == [(env, episode, max(0, t2 - k)) for k in (3, 2, 1, 0)]
            assert disc == pytest.approx(0.0 if term else 0.9 ** h)
            assert h == n_step or disc != pytest.approx(0.9 ** n_step) or term


def test_random_arrays_round_trip_exactly():
    rng = np.random.default_rng(11)
    buffer = PrioritizedReplayBuffer(3 * 40, (4, 2, 3), seed=0)
    for _ in range(25):  # each step writes 2·S slots per env: wraps the 40-slot rings 5 times
        obs = rng.integers(0, 256, (3, 4, 2, 3), dtype=np.uint8)
        next_obs = rng.integers(0, 256, (3, 4, 2, 3), dtype=np.uint8)
        term = rng.random(3) < 0.2
        slots = buffer.add(obs, rng.integers(0, 300, 3), rng.normal(size=3), next_obs, term)
        got = buffer.transitions(slots)
        np.testing.assert_array_equal(got.obs, obs)
        np.testing.assert_array_equal(got.next_obs, next_obs)
        np.testing.assert_array_equal(got.terminated, term)
    assert got.actions.dtype == np.int64


def test_capacity_counts_slots_and_memory_per_transition():
    need = PrioritizedReplayBuffer.bytes_needed(2**20, (4, 84, 84))
    assert need / 2**20 <= 7300
    buffer = PrioritizedReplayBuffer(2**20, (4, 84, 84))  # np.zeros: pages are not touched
    assert buffer.nbytes == need
    # FrameStack data costs one slot per transition, plus one per episode (its final frame).
    stream = FrameStackStream(n_envs=2, stack=4, seed=0, p_end=0.0)
    small = PrioritizedReplayBuffer(2 * 100, (4, 2, 3))
    for _ in range(30):
        small.add(*stream.step())
    assert small._written.tolist() == [31, 31]  # the reset frame + 30 next frames


def test_frame_buffer_errors():
    buffer = PrioritizedReplayBuffer(2 * 7 + 1, (4, 2, 3), n_step=3)
    stream = FrameStackStream(n_envs=2, stack=4)
    with pytest.raises(ValueError, match=r"leaves 7 slots per env.* at least 8 .*capacity >= 16"):
        buffer.add(*stream.step())
    buffer = PrioritizedReplayBuffer(100, (4, 2, 3))
    buffer.add(*stream.step())
    with pytest.raises(ValueError, match="N is fixed"):
        buffer.add(*FrameStackStream(n_envs=3, stack=4).step())
    with pytest.raises(ValueError, match="n_step"):
        StackedReplayBuffer(100, (4, 2, 3), n_step=3)
    with pytest.raises(ValueError, match="holds no sampleable transition"):
        buffer.transitions([99])


def test_stale_priority_updates_are_skipped_and_pickle_resumes_identically():
    stream = FrameStackStream(n_envs=2, stack=4, seed=2, p_end=0.1)
    buffer = PrioritizedReplayBuffer(2 * 40, (4, 2, 3), seed=5, n_step=3)
    for _ in range(30):
        buffer.add(*stream.step())
    old = buffer.sample(16, 0.4)
    for _ in range(60):  # overwrite everything
        buffer.add(*stream.step())
    stale = buffer.priorities(old.indices) == 0
    buffer.update_priorities(old.indices, np.full(16, 100.0))
    assert (buffer.priorities(old.indices)[stale] == 0).all()
    copy = pickle.loads(pickle.dumps(buffer))
    batch = stream.step()
    buffer.add(*batch)
    copy.add(*batch)
    for x, y in zip(buffer.sample(16, 0.4), copy.sample(16, 0.4), strict=True):
        np.testing.assert_array_equal(x, y)


def test_replay_imports_only_numpy():
    import ast
    import pathlib

    import vecdqn.replay

    tree = ast.parse(pathlib.Path(vecdqn.replay.__file__).read_text())
    names = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
             for alias in node.names}
    names |= {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert names <= {"numpy", "__future__", "dataclasses", "typing"}, names


def test_small_rings_keep_framestack_transitions_and_drop_only_broken_windows():
    # 8 slots per env, S = 4, n = 3: FrameStack data needs n + S slots per window, so all fit.
    stream = FrameStackStream(n_envs=2, stack=4, seed=4, p_end=0.0)
    buffer = PrioritizedReplayBuffer(2 * 8, (4, 2, 3), seed=0, n_step=3, gamma=0.9)
    steps = [stream.step() for _ in range(40)]
    owner = fill_and_record(buffer, steps)
    check_against_reference(buffer, steps, owner, reference_transitions(steps, 3, 0.9), exact_set=False)
    # per env: all but the newest frame, the n - 1 pending windows, the S - 1 whose history was cut
    assert len(buffer) == 2 * (8 - 1 - 2 - 3)
    # Random data writes 2·S slots per step: a 3-step window cannot survive in 8 slots.
    rng = np.random.default_rng(0)
    for obs, actions, rewards, _, term, trunc in steps:
        buffer.add(rng.integers(0, 256, obs.shape, dtype=np.uint8), actions, rewards,
                   rng.integers(0, 256, obs.shape, dtype=np.uint8), term, trunc)
    assert len(buffer) == 0
