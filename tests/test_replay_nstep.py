"""Tests of the n-step accumulator alone, and of the buffer's n-step transitions against a slow
reference (the definition, one env and one step at a time)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from replay_streams import (
    FrameStackStream,
    check_against_reference,
    fill_and_record,
    make_steps,
    reference_transitions,
    streams,
)

from vecdqn.replay import NStepAccumulator, PrioritizedReplayBuffer
from vecdqn.replay.nstep import discount_table

# -- the accumulator alone ---------------------------------------------------------------------------


def naive_windows(rewards, ends, n_step, gamma):
    """One env's windows by the definition: ``{t: (return, horizon, terminated, completed at)}``
    for steps ``t`` with ``ends[t]`` in (None, "terminated", "truncated")."""
    out = {}
    for t in range(len(rewards)):
        ret, k = 0.0, 0
        while t + k < len(rewards):
            ret += gamma ** k * rewards[t + k]
            k += 1
            if ends[t + k - 1] or k == n_step:
                out[t] = (ret, k, ends[t + k - 1] == "terminated", t + k - 1)
                break
    return out


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 3), st.integers(1, 5), st.integers(1, 30), st.integers(0, 2**31))
def test_accumulator_matches_the_definition(n_envs, n_step, steps, seed):
    rng = np.random.default_rng(seed)
    gamma = 0.9
    acc = NStepAccumulator(n_envs, n_step, gamma)
    rewards = rng.normal(size=(steps, n_envs))
    kind = rng.choice(np.array([None, "terminated", "truncated"], dtype=object), size=(steps, n_envs),
                      p=[0.8, 0.1, 0.1])
    got = {}
    for t in range(steps):
        slots = np.arange(n_envs) * 1000 + t  # the slot names its env and step
        terminated = np.array([k == "terminated" for k in kind[t]])
        truncated = np.array([k == "truncated" for k in kind[t]])
        w = acc.push(slots, rewards[t], slots + 7, terminated, truncated)
        assert np.array_equal(w.oldest, w.slots + 7) and np.array_equal(w.env, w.slots // 1000)
        assert (np.diff(w.env) >= 0).all() and (1 <= w.horizon).all() and (w.horizon <= n_step).all()
        for env, slot, ret, h, term in zip(w.env, w.slots, w.returns, w.horizon, w.terminated, strict=True):
            got[(int(env), int(slot) % 1000)] = (ret, int(h), bool(term), t)
        assert (acc.pending < n_step).all()
    expected = {(env, t): value for env in range(n_envs)
                for t, value in naive_windows(list(rewards[:, env]), list(kind[:, env]), n_step, gamma).items()}
    assert got.keys() == expected.keys()
    for key, (ret, h, term, at) in expected.items():
        assert got[key][1:] == (h, term, at), key
        assert got[key][0] == pytest.approx(ret, rel=1e-12, abs=1e-12), key


def test_accumulator_five_step_episode_and_queue_state():
    acc = NStepAccumulator(n_envs=1, n_step=3, gamma=0.5)
    assert acc.nbytes == 3 * (8 + 8 + 8)
    completed = []
    for t in range(5):
        w = acc.push([10 + t], [1.0 + t], [t], [t == 4], [False])
        completed.append(w.slots.tolist())
        assert acc.pending.tolist() == ([min(t + 1, 2)] if t < 4 else [0])
        if t == 4:
            assert w.horizon.tolist() == [3, 2, 1] and w.terminated.all()
            np.testing.assert_allclose(w.returns, [3 + 0.5 * 4 + 0.25 * 5, 4 + 0.5 * 5, 5])
    assert completed == [[], [], [10], [11], [12, 13, 14]]
    # a truncation empties the queue the same way but does not mark the windows terminated
    w = acc.push([20], [1.0], [0], [False], [True])
    assert w.slots.tolist() == [20] and not w.terminated.any() and w.horizon.tolist() == [1]


def test_accumulator_one_step_and_errors():
    acc = NStepAccumulator(n_envs=2, n_step=1, gamma=0.99)
    w = acc.push([3, 4], [1.5, -2.0], [0, 0], [False, True], [False, False])
    assert w.slots.tolist() == [3, 4] and w.returns.tolist() == [1.5, -2.0] and w.horizon.tolist() == [1, 1]
    assert w.terminated.tolist() == [False, True] and acc.pending.tolist() == [0, 0]
    assert w.select(np.array([False, True])).slots.tolist() == [4]
    for kwargs, match in [({"n_envs": 0}, "n_envs"), ({"n_step": 0}, "n_step"), ({"gamma": 1.5}, "gamma")]:
        with pytest.raises(ValueError, match=match):
            NStepAccumulator(**({"n_envs": 1, "n_step": 3, "gamma": 0.9} | kwargs))


def test_discount_table():
    table = discount_table(0.5, 3)
    assert table.dtype == np.float32 and table.shape == (2, 4)
    assert table[0].tolist() == [1.0, 0.5, 0.25, 0.125] and not table[1].any()


# -- the buffer's n-step transitions ------------------------------------------------------------------


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
