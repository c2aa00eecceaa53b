"""Tests of the replay buffers against naive oracles: sampling frequencies against
``p^α / Σ p^α`` (chi-square), weights against the closed form, the frame-once buffer against
`StackedReplayBuffer` on FrameStack-like streams, and ``obs = step`` fills that check no stack
mixes envs or episodes across wrap-around.
"""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest
from replay_streams import FrameStackStream, decode, filled, tiny_stream

from vecdqn.benchmarks.stacked_replay import StackedReplayBuffer
from vecdqn.replay import (
    PrioritizedReplayBuffer,
    ReplayIndexError,
    ReplaySample,
)

BUFFERS = [StackedReplayBuffer, PrioritizedReplayBuffer]


def chi2_critical(dof: int, z: float = 3.72) -> float:
    """Upper quantile of chi-square(dof) at the normal quantile z (3.72: p = 1e-4), by the
    Wilson-Hilferty approximation (no SciPy in the test dependencies)."""
    h = 2.0 / (9.0 * dof)
    return dof * (1.0 - h + z * math.sqrt(h)) ** 3


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


# -- frame-efficient storage ------------------------------------------------------------------


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
    assert small.slots_written.tolist() == [31, 31]  # the reset frame + 30 next frames


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

    package = pathlib.Path(vecdqn.replay.__file__).parent
    for path in sorted(package.glob("*.py")):
        tree = ast.parse(path.read_text())
        names = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
        names |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
        outside = {name for name in names if not name.startswith("vecdqn.replay.")}
        assert outside <= {"numpy", "__future__", "dataclasses", "typing"}, (path.name, outside)


def test_public_frames_view():
    stream = FrameStackStream(n_envs=2, stack=4, seed=1, p_end=0.0)
    buffer = PrioritizedReplayBuffer(2 * 50, (4, 2, 3), seed=0)
    for _ in range(10):
        buffer.add(*stream.step())
    frames = buffer.frames
    assert frames.shape == (100, 2, 3) and frames.dtype == np.uint8 and not frames.flags.writeable
    obs, *rest = stream.step()
    slots = buffer.add(obs, *rest)
    np.testing.assert_array_equal(frames[slots], obs[:, -1])  # a transition's slot holds obs' newest frame
    with pytest.raises(ValueError, match="read-only"):
        frames[0] = 1


