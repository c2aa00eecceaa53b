"""n-step returns: the per-env accumulator of pending transitions and the discount table.

Shapes: ``N`` envs pushed together, ``n`` the steps in a return, ``M`` the transitions whose
window completes at one push.

Sources: Sutton & Barto 2018, "Reinforcement Learning: An Introduction", 2nd ed., section 7.1:
the n-step return ``G = Σ_{k<n} γ^k r_{t+k} + γ^n V(s_{t+n})``; Hessel et al. 2018, "Rainbow"
(AAAI): n = 3 with prioritized replay on Atari.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from vecdqn.replay.checks import check_int

__all__ = ["NStepAccumulator", "NStepWindows", "discount_table"]


def discount_table(gamma: float, n_step: int) -> np.ndarray:
    """``(2, n + 1) float32``: ``table[terminated, h] = γ^h · (1 - terminated)``, the discount of
    the bootstrap value after an ``h``-step return (float32: the learner's dtype). Truncation
    never zeroes it: only a termination does."""
    powers = np.array([gamma ** h for h in range(n_step + 1)], dtype=np.float32)
    return np.stack([powers, np.zeros_like(powers)])


class NStepWindows(NamedTuple):
    """The ``M`` transitions whose n-step window completed at one `NStepAccumulator.push`, in
    env order, oldest first within an env. Every field is ``(M,)``::

        env         int64     env index (the row of the push, when it pushed a subset)
        slots       int64     the slot pushed with the transition, unchanged
        oldest      int64     the position pushed with it, unchanged
        returns     float64   Σ_{k<h} γ^k r_{t+k}
        horizon     int64     h: n, or fewer when the episode ended inside the window
        terminated  bool      the window ended in a termination (no bootstrap)
    """

    env: np.ndarray
    slots: np.ndarray
    oldest: np.ndarray
    returns: np.ndarray
    horizon: np.ndarray
    terminated: np.ndarray

    def select(self, keep: np.ndarray) -> NStepWindows:
        """The windows where ``keep`` (``(M,) bool``) is True."""
        return NStepWindows(*(field[keep] for field in self))


class NStepAccumulator:
    """Per-env queues of the transitions whose n-step return is not complete yet.

    Each `push` appends one step per env, vectorized over the envs. A transition's window is
    complete when it holds ``n`` steps (then it leaves its queue from the front), or, for every
    transition queued in an env, when that env's episode ends (terminated or truncated: the queue
    empties). So no step of an episode is dropped: a 5-step episode with ``n = 3`` gives 5
    windows, horizons 3, 3, 3, 2, 1. At a termination the discount is 0; at a truncation the
    return stops and bootstraps from the final observation with ``γ^h`` (`discount_table`)::

        return   = Σ_{k<h} γ^k r_{t+k}
        discount = γ^h · (1 - terminated)          bootstrap from the observation after step t+h-1

    Each queued transition carries a slot and a position (the buffer's: where its data lies, and
    the first ring position its observation reads) that come back unchanged in `NStepWindows`.

    Usage::

        >>> acc = NStepAccumulator(n_envs=1, n_step=2, gamma=0.5)
        >>> acc.push([7], [1.0], [0], [False], [False]).slots.size    # 1 of 2 steps: pending
        0
        >>> w = acc.push([8], [2.0], [1], [True], [False])            # the episode ends
        >>> w.slots.tolist(), w.returns.tolist(), w.horizon.tolist()
        ([7, 8], [2.0, 2.0], [2, 1])

    Args:
        n_envs: N, >= 1. n_step: n, >= 1. gamma: discount γ in [0, 1].

    Raises:
        ValueError: ``n_envs`` or ``n_step`` not an integer >= 1, ``gamma`` outside [0, 1].
    """

    def __init__(self, n_envs: int, n_step: int, gamma: float):
        self.n_envs = check_int("n_envs", n_envs, 1)
        self.n_step = n = check_int("n_step", n_step, 1)
        self.gamma = float(gamma)
        if not 0.0 <= self.gamma <= 1.0:
            raise ValueError(f"gamma must be in [0, 1], got {gamma}")
        shape = (self.n_envs, n)
        self._slot = np.zeros(shape, dtype=np.int64)  # pending windows, oldest first
        self._reward = np.zeros(shape, dtype=np.float64)
        self._oldest = np.zeros(shape, dtype=np.int64)
        self._len = np.zeros(self.n_envs, dtype=np.int64)
        self._positions = np.arange(n)[None, :]
        # return_matrix[p, k] = γ^(k-p) for k >= p: the return from queue position p is row p
        # times the queued rewards.
        lag = np.arange(n)[None, :] - np.arange(n)[:, None]
        self._return_matrix = np.where(lag >= 0, self.gamma ** np.maximum(lag, 0), 0.0)

    @property
    def nbytes(self) -> int:
        """Bytes of the queues."""
        return self._slot.nbytes + self._reward.nbytes + self._oldest.nbytes

    @property
    def pending(self) -> np.ndarray:
        """``(N,) int64``: transitions waiting in each env's queue (at most ``n - 1``)."""
        return self._len.copy()

    def push(self, slots, rewards, oldest, terminated, truncated, envs=None) -> NStepWindows:
        """Append one step per env and return the windows it completes.

        Args:
            slots: ``(N,) int64`` where each env's new transition is stored.
            rewards: ``(N,) float64`` its reward r_t.
            oldest: ``(N,) int64`` the first ring position its observation reads.
            terminated, truncated: ``(N,) bool``: the step ended env i's episode.
            envs: ``(k,) int64`` distinct envs the ``k`` rows belong to, when the step is only
                theirs (every arg above is then ``(k,)``); None: all N envs, in order.

        Returns:
            `NStepWindows` of the complete windows (``M`` of them, possibly none); their ``env``
            is the row of this push (the env itself when ``envs`` is None).
        """
        envs = np.arange(self.n_envs) if envs is None else np.asarray(envs, dtype=np.int64)
        queued = self._len[envs]
        self._slot[envs, queued] = slots
        self._reward[envs, queued] = rewards
        self._oldest[envs, queued] = oldest
        queued = queued + 1
        terminated = np.asarray(terminated, dtype=bool)
        done = terminated | np.asarray(truncated, dtype=bool)
        live = self._positions < queued[:, None]
        full = ~done & (queued == self.n_step)
        complete = (done[:, None] & live) | (full[:, None] & (self._positions == 0))
        row, pos = np.nonzero(complete)
        env = envs[row]
        returns = np.zeros(0)
        if row.size:
            returns = (np.where(live, self._reward[envs], 0.0) @ self._return_matrix.T)[row, pos]
        windows = NStepWindows(env=row, slots=self._slot[env, pos], oldest=self._oldest[env, pos],
                               returns=returns, horizon=queued[row] - pos, terminated=terminated[row])
        if full.any():  # the complete window leaves from the front
            for queue in (self._slot, self._reward, self._oldest):
                queue[envs[full], :-1] = queue[envs[full], 1:]
        self._len[envs] = np.where(done, 0, np.where(full, queued - 1, queued))
        return windows
