"""``add(..., envs=...)``: a step that brings only some envs' transitions (the distributed
learner's actors arrive one at a time) stores exactly what one ``add`` of all envs stores."""

import numpy as np
import pytest
from hypothesis import given, settings
from replay_streams import make_steps, streams

from vecdqn.replay import PrioritizedReplayBuffer


@settings(max_examples=60, deadline=None)
@given(streams())
def test_adds_of_env_subsets_equal_one_add_of_all(case):
    n_envs, stack, n_step, n_steps, kind, seed, p_end, extra = case
    steps = make_steps(n_envs, stack, n_steps, kind, seed, p_end)
    capacity = n_envs * (2 * stack + n_step + extra)
    whole = PrioritizedReplayBuffer(capacity, (stack, 2, 3), n_step=n_step, gamma=0.9, seed=0)
    parts = PrioritizedReplayBuffer(capacity, (stack, 2, 3), n_step=n_step, gamma=0.9, seed=0)
    parts.start_envs(n_envs)
    rng = np.random.default_rng(seed)
    for step in steps:
        slots = whole.add(*step)
        order = rng.permutation(n_envs)
        for subset in np.array_split(order, rng.integers(1, n_envs + 1)):
            got = parts.add(*(x[subset] for x in step), envs=subset)
            np.testing.assert_array_equal(got, slots[subset])
    every = np.arange(capacity)
    np.testing.assert_array_equal(parts.priorities(every), whole.priorities(every))
    np.testing.assert_array_equal(parts.frames, whole.frames)
    live = np.flatnonzero(whole.priorities(every) > 0)
    if live.size:
        a, b = whole.transitions(live), parts.transitions(live)
        for name in ("obs", "actions", "rewards", "next_obs", "discounts", "terminated"):
            np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)


def test_env_subsets_are_checked():
    buffer = PrioritizedReplayBuffer(64, (2, 2, 3))
    step = (np.zeros((1, 2, 2, 3), np.uint8), [0], [0.0], np.zeros((1, 2, 2, 3), np.uint8), [False])
    with pytest.raises(ValueError, match="start_envs"):
        buffer.add(*step, envs=[0])
    buffer.start_envs(2)
    with pytest.raises(ValueError, match=r"distinct env indices in \[0, 2\)"):
        buffer.add(*step, envs=[2])
    with pytest.raises(ValueError, match="already stores 2 envs"):
        buffer.start_envs(3)
