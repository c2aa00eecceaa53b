"""`PrioritizedReplayBuffer`: the trainer's replay: proportional prioritized sampling
(`ReplayBase`) over frame-once storage (`FrameRings`) with n-step returns (`NStepAccumulator`).

Shapes: ``N`` envs per ``add``, ``(S, H, W)`` one observation (``(4, 84, 84) uint8`` on Atari),
``B`` batch size, ``C`` capacity in frame slots.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from vecdqn.replay.checks import check_batch, check_int
from vecdqn.replay.frames import FrameRings
from vecdqn.replay.nstep import NStepAccumulator, discount_table
from vecdqn.replay.proportional import ReplayBase
from vecdqn.replay.sample import ReplaySample, ReplaySlots
from vecdqn.replay.sum_tree import PriorityIndex, last_wins

__all__ = ["PrioritizedReplayBuffer"]


def _uint_for(largest: int) -> type:
    """The smallest unsigned dtype that holds ``largest``."""
    for dtype in (np.uint8, np.uint16, np.uint32):
        if largest <= np.iinfo(dtype).max:
            return dtype
    return np.uint64


class PrioritizedReplayBuffer(ReplayBase):
    """Frame-efficient proportional prioritized replay with n-step returns.

    Interface: ``add`` N envs' transitions per vector step, ``sample(B, beta)`` a
    `ReplaySample`, ``update_priorities(indices, td_errors)``, ``len`` = sampleable transitions.
    Which transitions a batch holds and their weights: `draw`; priorities: `update_priorities`.

    **Storage** (`FrameRings`: each frame stored once, in N per-env rings of ``R = capacity // N``
    slots; the first ``add`` fixes ``N``). ``capacity`` counts *slots*. Per slot::

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
                                      the min tree (see `SumTree`, `PriorityIndex`)

    = ``H·W + 9`` bytes, + about 17.6 for the priorities (the tree pads ``capacity`` to a multiple
    of 16) = 7,083 bytes for an 84×84 frame. With FrameStack data a transition takes one slot,
    plus one per episode (its final frame); other data is stored exactly too, at up to ``2·S``
    slots per transition.

    **n-step returns** (`NStepAccumulator`; Sutton & Barto 2018, 7.1; n = 3 in Rainbow)::

        return   = Σ_{k<h} γ^k r_{t+k}
        discount = γ^h · (1 - terminated)          next_obs = the observation after step t+h-1

    with ``h = n``, or fewer when the episode ends inside the window. A transition becomes
    sampleable (gets a priority) when its window is complete: ``n - 1`` steps later, or at once
    when its episode ends (a 5-step episode with ``n = 3`` gives 5 transitions, horizons 3, 3, 3,
    2, 1). Its ``rewards`` field is the return.

    **Never sampled**: slots with priority 0, which are those that are not transitions (final
    frames, the older frames of a whole-stack segment), transitions whose window is incomplete,
    and the slots the write cursor has just overwritten or whose stack history it has cut (the
    ``S - 1`` after the written ones): each ``add`` zeroes them. So ``len(buffer)`` is at most
    ``N·(R - S - n + 1)`` (per env, the newest frame, the ``n - 1`` pending windows and the
    ``S - 1`` cut stacks are not), and one less per episode. (In a ring so small that a pending
    window's first frames are overwritten before the window completes, that transition is
    dropped; with FrameStack data this takes rings of under ``n_step + S`` slots.)

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
        c, s, n = self.capacity, self.obs_shape[0], self.n_step
        self._rings = FrameRings(c, self.obs_shape)
        self._actions = np.zeros(c, dtype=np.uint8)
        self._returns = np.zeros(c, dtype=np.float32)
        self._horizon = np.zeros(c, dtype=_uint_for(n))
        self._terminated = np.zeros(c, dtype=bool)
        # A window of n transitions spans at most n adds of at most 2·S slots each.
        self._next_offset = np.zeros(c, dtype=_uint_for(2 * s * n))
        self._discounts = discount_table(self.gamma, n)
        self._nstep: NStepAccumulator | None = None  # made by the first add, which fixes N

    @classmethod
    def bytes_needed(cls, capacity: int, obs_shape: Any, *, n_step: int = 1) -> int:
        """Bytes of storage and priorities a buffer of ``capacity`` slots allocates (the per-env
        state added by the first ``add``, ``2·N·S·H·W`` bytes or so, aside)."""
        capacity = check_int("capacity", capacity, 1)
        shape = tuple(int(d) for d in obs_shape)
        s = shape[0]
        per_slot = FrameRings.bytes_per_slot(shape) + 1 + 4 + 1 + np.dtype(_uint_for(n_step)).itemsize + \
            np.dtype(_uint_for(2 * s * n_step)).itemsize
        return capacity * per_slot + PriorityIndex.bytes_needed(capacity)

    @property
    def nbytes(self) -> int:
        """Bytes held by the storage arrays, the priorities and the per-env state."""
        arrays = [self._actions, self._returns, self._horizon, self._terminated, self._next_offset]
        queues = self._nstep.nbytes if self._nstep is not None else 0
        return sum(a.nbytes for a in arrays) + self._rings.nbytes + queues + self.priority_index.nbytes

    @property
    def n_envs(self) -> int | None:
        """N, fixed by the first ``add`` (None before)."""
        return self._rings.n_envs

    @property
    def frames(self) -> np.ndarray:
        """``(C, H, W) uint8`` read-only view of every slot's stored frame (the raw storage)."""
        return self._rings.frames

    @property
    def slots_written(self) -> np.ndarray | None:
        """``(N,) int64`` frame slots each env has written since the start (one per transition
        with FrameStack data, plus one per episode), or None before the first ``add``."""
        return self._rings.written if self.n_envs is not None else None

    def start_envs(self, n_envs: int) -> None:
        """Fix N before the first ``add`` (which otherwise fixes it): needed when the first adds
        bring only some envs' transitions (``add(..., envs=...)``).

        Raises:
            ValueError: N already fixed to another value, or a capacity too small for N envs.
        """
        n_envs = check_int("n_envs", n_envs, 1)
        if self._nstep is not None:
            if n_envs != self.n_envs:
                raise ValueError(f"this buffer already stores {self.n_envs} envs, not {n_envs}")
            return
        self._rings.start(n_envs)
        self._nstep = NStepAccumulator(n_envs, self.n_step, self.gamma)

    def add(self, obs: Any, actions: Any, rewards: Any, next_obs: Any, terminated: Any,
            truncated: Any = None, *, envs: Any = None) -> np.ndarray:
        """Store one vector step: N transitions ``(obs, actions, rewards, next_obs, terminated,
        truncated)``, one per env, in env order.

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
            envs: ``(k,) int`` distinct env indices in ``[0, N)`` when this step brings only
                those envs' transitions (each array above then has ``k`` rows, in this order;
                fix N first with `start_envs`); each env's own transitions must still arrive in
                order. None: all N envs.

        Returns:
            ``(N,) int64`` slots of the N new transitions; each becomes sampleable (with the
            current max priority) once its n-step window is complete.

        Raises:
            ValueError: shapes or dtypes that do not match ``obs_shape`` and each other, an ``N``
                other than the first ``add``'s, or a capacity too small for N envs.
        """
        obs, actions, rewards, next_obs, terminated, truncated = check_batch(
            self.obs_shape, obs, actions, rewards, next_obs, terminated, truncated)
        n = obs.shape[0]
        if envs is not None:
            envs = self._check_envs(envs, n)
        elif self._nstep is None:
            self.start_envs(n)
        elif n != self.n_envs:
            raise ValueError(f"add() got {n} envs but this buffer stores {self.n_envs}; N is fixed by "
                             f"the first add()")
        done = terminated | truncated
        write = self._rings.write(obs, next_obs, done, envs)
        slots = write.slots
        if self._actions.dtype == np.uint8 and (actions.min() < 0 or actions.max() > 255):
            self._actions = self._actions.astype(np.int64)  # once, for action spaces beyond uint8
        self._actions[slots] = actions

        windows = self._nstep.push(slots, rewards, write.oldest, terminated, truncated, envs)
        # In a small ring a window can outlive its first frames: drop it.
        intact = windows.oldest >= write.cut[windows.env]
        if not intact.all():
            windows = windows.select(intact)
        ready = windows.slots
        if ready.size:
            base, ring = slots[windows.env] - slots[windows.env] % self._rings.ring, self._rings.ring
            self._returns[ready] = windows.returns
            self._horizon[ready] = windows.horizon
            self._terminated[ready] = windows.terminated
            self._next_offset[ready] = (write.next_local[windows.env] - (ready - base)) % ring

        # Zero the stale slots that held transitions, then give complete windows the max priority
        # (last wins: a slot both stale and ready is ready).
        stale = write.stale[self.priority_index.get(write.stale) > 0]
        self.priority_index.set(*last_wins(
            np.concatenate([stale, ready]),
            np.concatenate([np.zeros(stale.size), np.full(ready.size, self.new_priority)])))
        return slots

    def _check_envs(self, envs: Any, rows: int) -> np.ndarray:
        """``envs`` as ``(rows,) int64`` distinct indices in ``[0, N)``; raises ValueError."""
        if self._nstep is None:
            raise ValueError("add(envs=...) needs N fixed first: call start_envs(N)")
        idx = np.asarray(envs)
        if idx.shape != (rows,) or not np.issubdtype(idx.dtype, np.integer):
            raise ValueError(f"envs must be {rows} integer env indices (one per row), got {envs!r}")
        if idx.min() < 0 or idx.max() >= self.n_envs or np.unique(idx).size != rows:
            raise ValueError(f"envs {idx.tolist()} must be distinct env indices in [0, {self.n_envs})")
        return idx.astype(np.int64)

    def sample(self, batch_size: int, beta: float = 0.4) -> ReplaySample:
        """A prioritized batch of ``B = batch_size`` transitions: ``-> ReplaySample``.

        The slots and their importance weights come from `draw` (stratified sum-tree draw,
        ``P(i) = p_i^α / Σ_k p_k^α``, ``w_i = (N·P(i))^-β / max_j w_j``: Schaul et al. 2016, eq. 1
        and section 3.4); `_gather` reads their n-step returns and stacked frames.

        Args:
            batch_size: ``B``, 1 <= B <= len(self).
            beta: importance-sampling exponent β in [0, 1] (0: no correction, 1: full).

        Raises:
            ValueError: ``batch_size`` is not an int in ``[1, len(self)]``; ``beta`` outside [0, 1].
        """
        return self._gather(*self.draw(batch_size, beta)).with_frames(self._rings.frames)

    def sample_slots(self, batch_size: int, beta: float = 0.4) -> ReplaySlots:
        """The batch `sample` would draw (same generator, same draws: for one seed the same
        transitions), as `ReplaySlots`: ``(B, S) int64`` frame slots of obs and next_obs instead
        of their ``(B, S, H, W) uint8`` frames, for a reader with its own copy of `frames`.

        Raises:
            ValueError: as `sample`.
        """
        return self._gather(*self.draw(batch_size, beta))

    def transitions(self, indices: Any) -> ReplaySample:
        """The stored transitions at ``indices`` (``(B,) int``) without sampling; weights are 1.

        Raises:
            ReplayIndexError: an index outside ``[0, capacity)``.
            ValueError: an index that holds no sampleable transition.
        """
        idx = self.sampleable(indices)
        return self._gather(idx, np.ones(idx.size, dtype=np.float32)).with_frames(self._rings.frames)

    def _gather(self, indices: np.ndarray, weights: np.ndarray) -> ReplaySlots:
        """The n-step transitions at ``indices`` (``(B,) int64``, sampleable) with ``weights``
        (``(B,) float32``): returns, discounts ``γ^h · (1 - terminated)`` (`discount_table`) and
        the frame slots of obs and of the bootstrap next_obs (`FrameRings.stack_slots`)."""
        stacked = self._rings.stack_slots(indices, self._next_offset[indices])
        terminated = self._terminated[indices]
        return ReplaySlots(
            obs_slots=stacked[:indices.size],
            next_obs_slots=stacked[indices.size:],
            actions=self._actions[indices].astype(np.int64),
            rewards=self._returns[indices],
            terminated=terminated,
            weights=weights,
            indices=indices,
            discounts=self._discounts[terminated.view(np.uint8), self._horizon[indices]],
        )

    def frame_slots_since(self, written: Any) -> np.ndarray:
        """``(N,) int`` counts of an earlier `slots_written` ``-> (M,) int64``: the frame slots
        written since then (each env's at most once per ring), for keeping a copy of `frames` up
        to date. Raises ValueError before the first ``add``."""
        if self.n_envs is None:
            raise ValueError("frame_slots_since() needs a buffer that has been added to")
        return self._rings.slots_since(written)
