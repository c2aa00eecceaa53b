"""Transition streams and n-step references shared by the replay tests.

`FrameStackStream` fakes N envs behind FrameStack and SAME_STEP autoreset, with frames that
encode where they came from; `reference_transitions` is the n-step definition, one env and one
step at a time, that the buffer is checked against.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import strategies as st


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


def decode(frame):
    """(env, episode, t) of a FrameStackStream frame."""
    return int(frame[0, 0]), int(frame[0, 1]), int(frame[0, 2]) * 256 + int(frame[1, 0])

