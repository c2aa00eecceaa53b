"""The baselines the sections measure against, kept apart from the code they measure.

* `LoopPriorityIndex`: the textbook per-item sum tree and min tree, the anchor of ``--replay``.
* `SingleEnvLoop`: the textbook one-env DQN loop, the anchor of ``--train``.
"""

from __future__ import annotations

import os

import numpy as np

from vecdqn.benchmarks.harness import ENV_ID

__all__ = ["LoopPriorityIndex", "SingleEnvLoop"]


class LoopPriorityIndex:
    """The anchor of ``--replay`` (impl ``python_loop``): the textbook per-item sum tree and min
    tree (as in OpenAI baselines' segment trees), one Python loop iteration per tree level per
    item. It has `vecdqn.replay.PriorityIndex`'s interface (``get``, ``set``, ``find``, ``total``,
    ``min_positive``, ``leaves``, ``load``), so the two are timed on the same operations. Updates
    propagate the change up the path; ``set`` writes in order, so a repeated index keeps its last
    value.

    Args:
        priorities: ``(C,) float64 >= 0``, the initial priorities (``load``).
    """

    def __init__(self, priorities: np.ndarray):
        self.capacity = priorities.size
        self.n_leaves = 1 << max(1, (self.capacity - 1).bit_length())
        self.sum = np.zeros(2 * self.n_leaves)
        self.min = np.full(2 * self.n_leaves, np.inf)
        self.load(priorities)

    def load(self, priorities: np.ndarray) -> None:  # set-up only, not timed: vectorized
        p = self.n_leaves
        self.sum[p: p + self.capacity] = priorities
        self.min[p: p + self.capacity] = np.where(priorities > 0, priorities, np.inf)
        level = p
        while level > 1:
            self.sum[level // 2: level] = self.sum[level: 2 * level: 2] + self.sum[level + 1: 2 * level: 2]
            self.min[level // 2: level] = np.minimum(self.min[level: 2 * level: 2], self.min[level + 1: 2 * level: 2])
            level //= 2
        self.count = int(np.count_nonzero(priorities))

    def leaves(self) -> np.ndarray:
        return self.sum[self.n_leaves: self.n_leaves + self.capacity]

    @property
    def total(self) -> float:
        return float(self.sum[1])

    @property
    def min_positive(self) -> float:
        return float(self.min[1])

    def get(self, idx: np.ndarray) -> np.ndarray:
        return np.array([self.sum[i + self.n_leaves] for i in idx.tolist()])

    def set(self, idx: np.ndarray, values: np.ndarray) -> None:
        tree, mins, p = self.sum, self.min, self.n_leaves
        for i, value in zip(idx.tolist(), values.tolist(), strict=True):
            node = i + p
            self.count += int(value > 0) - int(tree[node] > 0)
            delta = value - tree[node]
            while node >= 1:
                tree[node] += delta
                node //= 2
            node = i + p
            mins[node] = value if value > 0 else np.inf
            node //= 2
            while node >= 1:
                mins[node] = min(mins[2 * node], mins[2 * node + 1])
                node //= 2

    def find(self, prefix_sums: np.ndarray) -> np.ndarray:
        tree, p = self.sum, self.n_leaves
        out = np.empty(prefix_sums.size, dtype=np.int64)
        for j, v in enumerate(prefix_sums.tolist()):
            node = 1
            while node < p:
                left = 2 * node
                if v < tree[left] or tree[left + 1] <= 0:
                    node = left
                else:
                    v -= tree[left]
                    node = left + 1
            out[j] = node - p
        return out


class SingleEnvLoop:
    """The peer baseline (impl ``single_env_loop``): the textbook one-env DQN loop in the style of
    CleanRL's ``dqn_atari.py`` — step one env, choose its action with a forward pass, store the
    transition in a uniform replay of stacked observations, and every 4 agent steps take one
    batch-32 Nature-DQN update (no double, no dueling, 1-step). Same wrappers, same network torso.
    Torch uses every core (the library default), as such a script does."""

    def __init__(self, learning_starts: int, capacity: int = 10_000, seed: int = 0):
        import torch

        from vecdqn.envs import make_env
        from vecdqn.model import QNetwork

        torch.set_num_threads(os.cpu_count() or 1)
        torch.manual_seed(seed)
        self.env = make_env(ENV_ID)
        self.q = QNetwork(int(self.env.action_space.n), dueling=False)
        self.target = QNetwork(int(self.env.action_space.n), dueling=False)
        self.target.load_state_dict(self.q.state_dict())
        self.optimizer = torch.optim.Adam(self.q.parameters(), lr=1e-4)
        self.obs = np.zeros((capacity, 4, 84, 84), np.uint8)
        self.next_obs = np.zeros_like(self.obs)
        self.actions = np.zeros(capacity, np.int64)
        self.rewards = np.zeros(capacity, np.float32)
        self.dones = np.zeros(capacity, np.float32)
        self.capacity, self.size, self.learning_starts = capacity, 0, learning_starts
        self.rng = np.random.default_rng(seed)
        self.state, _ = self.env.reset(seed=seed)

    def run(self, steps: int, epsilon: float = 0.1) -> None:
        import torch
        import torch.nn.functional as F

        for _ in range(steps):
            if self.rng.random() < epsilon:
                action = int(self.rng.integers(self.env.action_space.n))
            else:
                with torch.no_grad():
                    action = int(self.q(torch.from_numpy(self.state[None])).argmax(1).item())
            next_state, reward, terminated, truncated, _ = self.env.step(action)
            i = self.size % self.capacity
            self.obs[i], self.next_obs[i], self.actions[i] = self.state, next_state, action
            self.rewards[i], self.dones[i] = np.sign(reward), float(terminated)
            self.size += 1
            self.state = self.env.reset()[0] if terminated or truncated else next_state
            if self.size > self.learning_starts and self.size % 4 == 0:
                idx = self.rng.integers(min(self.size, self.capacity), size=32)
                obs, next_obs = torch.from_numpy(self.obs[idx]), torch.from_numpy(self.next_obs[idx])
                with torch.no_grad():
                    target = torch.from_numpy(self.rewards[idx]) + 0.99 * self.target(next_obs).max(1).values * (
                        1 - torch.from_numpy(self.dones[idx]))
                q = self.q(obs).gather(1, torch.from_numpy(self.actions[idx])[:, None]).squeeze(1)
                loss = F.huber_loss(q, target)
                self.optimizer.zero_grad()
                loss.backward()
                self.optimizer.step()
            if self.size % 1000 == 0:
                self.target.load_state_dict(self.q.state_dict())
