"""Frame-once storage: per-env rings of frame slots, and the stacked observations read back.

Shapes: ``N`` envs, ``S`` stack depth, ``(H, W)`` a frame, ``C`` slots in all, ``R = C // N``
slots per env ring, ``M`` stacks read at once.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

__all__ = ["FrameRings", "RingWrite"]


def _rows_equal(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``(k, L) uint8, (k, L) uint8 -> (k,) bool``: row ``i`` of ``a`` equals row ``i`` of ``b``.
    Compared 8 bytes at a time where the rows allow it (84·84 = 882·8)."""
    if a.shape[1] % 8 == 0:
        try:
            a, b = a.view(np.uint64), b.view(np.uint64)
        except ValueError:  # a row layout that cannot be reinterpreted: compare bytes
            pass
    return (a == b).all(axis=1)


def _ragged(lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(n,) int -> (row, k)``, both ``(lengths.sum(),) int64``: ``k`` runs over
    ``0..lengths[row]-1`` for each row in turn."""
    row = np.repeat(np.arange(lengths.size), lengths)
    k = np.arange(row.size) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    return row, k


class RingWrite(NamedTuple):
    """Where one `FrameRings.write` put N envs' transitions (every field ``(N,) int64`` but
    ``stale``)::

        slots       slot of each transition (its obs' newest frame)
        next_local  ring position of its next_obs' newest frame
        oldest      first ring position its obs reads
        cut         positions below this one are overwritten now
        stale       (M,) slots overwritten by this write, or whose stacks reach back into
                    overwritten ones: no transition there can be read any more
    """

    slots: np.ndarray
    next_local: np.ndarray
    oldest: np.ndarray
    cut: np.ndarray
    stale: np.ndarray


class FrameRings:
    """N per-env rings of frame slots; each frame of a FrameStack stream is stored once.

    Consecutive stacked observations share ``S - 1`` frames. ``capacity`` counts slots; `start`
    fixes ``N`` and splits them into N rings of ``R = capacity // N`` slots (slot ``i·R + j`` is
    position ``j`` of env ``i``'s ring; the ``capacity % N`` left over are unused). Per slot:
    ``frame (H, W) uint8``, the newest frame of an observation, and ``start bool``, a segment
    (episode) starts here: older stack positions repeat this frame, as FrameStack's reset does.
    An observation is the stack of a slot's frame with the ``S - 1`` before it, each position
    clamped to the slot's segment start, rebuilt by one fancy index over ``(M, S)`` slots.

    **One slot per transition.** Each `write` stores the newest frame of ``next_obs``; the next
    write's ``obs`` continues from that slot when it equals the previous ``next_obs`` (checked
    exactly, 8 bytes at a time) and no episode ended. With SAME_STEP autoreset ``next_obs`` of an
    ended env is ``info["final_obs"]``, so the final frame gets a slot of its own, which is never
    a transition, and the next ``obs`` (the new episode's first) starts a new segment: one slot if
    all its frames are equal (FrameStack's reset), else all ``S``. One env's ring, ``S = 4``, an
    episode ending (``f3`` is the final frame) and the next starting::

        slot           j    j+1  j+2  j+3  j+4  j+5
        frame          f0   f1   f2   f3   g0   g1
        start          1    .    .    .    1    .
        transition     t0   t1   t2   -    u0   (next one)
        obs of t0 = f0 f0 f0 f0    next_obs of t2 (terminal) = f0 f1 f2 f3
        obs of u0 = g0 g0 g0 g0    next_obs of u0            = g0 g0 g0 g1

    Data that does not follow FrameStack's shift (``obs`` not continuing the previous
    ``next_obs``, or ``next_obs[:-1] != obs[1:]``, e.g. random arrays) is stored exactly too: the
    stack that does not continue is written whole as a new segment (up to ``2·S`` slots per
    transition), so the stacks read back are always those written.

    Args:
        capacity: slots ``C``, at least ``N · 2·S`` (checked by `start`).
        obs_shape: ``(S, H, W)``, stack first.
    """

    def __init__(self, capacity: int, obs_shape: tuple[int, ...]):
        self.capacity = int(capacity)
        self.obs_shape = tuple(obs_shape)
        self.stack = s = self.obs_shape[0]
        self._frame_size = int(np.prod(self.obs_shape[1:]))
        self._frames = np.zeros((self.capacity, *self.obs_shape[1:]), dtype=np.uint8)
        self._start = np.zeros(self.capacity, dtype=bool)
        self._window = np.arange(1 - s, 1)  # stack positions, oldest first, relative to the newest
        self._reach_one = np.arange(s)[None, :]
        self.n_envs: int | None = None

    @staticmethod
    def bytes_per_slot(obs_shape: Any) -> int:
        """Bytes a slot takes here: its ``(H, W) uint8`` frame and the start flag."""
        return int(np.prod(tuple(obs_shape)[1:])) + 1

    @property
    def nbytes(self) -> int:
        """Bytes of the frames, the start flags and the per-env state (after `start`)."""
        extra = self._last_next_obs.nbytes if self.n_envs is not None else 0
        return self._frames.nbytes + self._start.nbytes + extra

    @property
    def frames(self) -> np.ndarray:
        """``(C, H, W) uint8`` read-only view of every slot's frame."""
        view = self._frames.view()
        view.flags.writeable = False
        return view

    @property
    def ring(self) -> int:
        """Slots R per env ring (0 before `start`)."""
        return self._ring if self.n_envs is not None else 0

    @property
    def written(self) -> np.ndarray:
        """``(N,) int64`` slots each env's ring has written ever (monotonic: position ``p`` is
        ring slot ``p % R``)."""
        return self._written.copy()

    def start(self, n: int) -> None:
        """Split the slots into ``n`` rings. Raises ValueError if a ring would hold fewer than
        ``2·S`` slots (what one write may take per env)."""
        ring = self.capacity // n
        need = 2 * self.stack
        if ring < need:
            raise ValueError(f"capacity {self.capacity} split over {n} envs leaves {ring} slots per env; "
                             f"with S={self.stack} each env needs at least {need} (2·S): use capacity >= "
                             f"{n * need} (about one slot per transition is stored)")
        self.n_envs, self._ring = n, ring
        self.env_base = np.arange(n, dtype=np.int64) * ring  # first slot of each env's ring
        # Positions count slots written per env ever; position p is overwritten once written > p + R.
        self._written = np.zeros(n, dtype=np.int64)
        self._segment = np.zeros(n, dtype=np.int64)  # position of the latest segment start
        self._has_prev = np.zeros(n, dtype=bool)
        self._prev_done = np.zeros(n, dtype=bool)
        self._last_next_obs = np.zeros((n, *self.obs_shape), dtype=np.uint8)

    def _segment_length(self, flat: np.ndarray) -> np.ndarray:
        """``(k, S·H·W) uint8 -> (k,) int64``: slots a stack needs as a new segment, 1 when all
        its frames equal the newest (FrameStack's reset), else S."""
        f = self._frame_size
        same = _rows_equal(flat[:, :-f], np.tile(flat[:, -f:], self.stack - 1))
        return np.where(same, 1, self.stack)

    def _lengths(self, obs: np.ndarray, next_obs: np.ndarray, envs: Any) -> tuple[np.ndarray, ...]:
        """``(cont, shift, obs_len, next_len)``, each ``(N,)``: obs continues env i's last frame
        (it equals the last next_obs and no episode ended); next_obs is obs shifted by one new
        frame (FrameStack); the slots each stack takes (0 for a continuing obs, 1 for a shift).
        ``envs``: the envs of the rows (a slice or an index array)."""
        n, f = obs.shape[0], self._frame_size
        flat_obs, flat_next = obs.reshape(n, -1), next_obs.reshape(n, -1)
        cont = self._has_prev[envs] & ~self._prev_done[envs]
        if cont.any():
            cont &= _rows_equal(flat_obs, self._last_next_obs[envs].reshape(n, -1))
        shift = _rows_equal(flat_next[:, :-f], flat_obs[:, f:])
        obs_len = np.zeros(n, dtype=np.int64)
        if not cont.all():
            obs_len[~cont] = self._segment_length(flat_obs[~cont])
        next_len = np.ones(n, dtype=np.int64)
        if not shift.all():
            next_len[~shift] = self._segment_length(flat_next[~shift])
        return cont, shift, obs_len, next_len

    def _stale(self, length: np.ndarray, envs: Any) -> np.ndarray:
        """Slots the next ``length`` writes per env of ``envs`` overwrite, and the S - 1 after them
        whose stacks reach back into them (only once the ring has wrapped: before, they are empty)."""
        written, ring, base = self._written[envs], self._ring, self.env_base[envs]
        reach = length + self.stack - 1
        if not (written + reach > ring).any():
            return np.zeros(0, dtype=np.int64)
        if (length == 1).all():  # FrameStack steady state: a (N, S) block
            return (base[:, None] + (written[:, None] + self._reach_one) % ring).reshape(-1)
        row, k = _ragged(reach)
        return base[row] + (written[row] + k) % ring

    def write(self, obs: np.ndarray, next_obs: np.ndarray, done: np.ndarray, envs: Any = None) -> RingWrite:
        """Store one step of N envs: ``obs, next_obs (N, S, H, W) uint8``, ``done (N,) bool``
        (the step ended env i's episode: its next obs starts a new segment). Call `start` first.

        ``envs``: ``(k,) int64`` distinct envs whose rings the ``k`` rows go to (every env in order
        when None); the `RingWrite` fields are then per row."""
        envs = slice(None) if envs is None else envs
        s, ring, base, written = self.stack, self._ring, self.env_base[envs], self._written[envs]
        cont, shift, obs_len, next_len = self._lengths(obs, next_obs, envs)
        length = obs_len + next_len
        position = np.where(cont, written - 1, written + obs_len - 1)  # of the transition's slot
        next_local = (written + length - 1) % ring
        # The oldest position its observation reads: S - 1 back, or its segment's start.
        oldest = np.maximum(position - (s - 1), np.where(cont, self._segment[envs], written))
        stale = self._stale(length, envs)

        if cont.all() and shift.all():  # FrameStack steady state: one frame per env
            self._frames[base + next_local] = next_obs[:, -1]
            self._start[base + next_local] = False
        else:
            row, k = _ragged(length)
            dst = base[row] + (written[row] + k) % ring
            first = obs_len[row]
            from_obs = k < first
            # stack position of the frame written at k: the last obs_len frames of obs, then the
            # last next_len frames of next_obs
            pos = np.where(from_obs, s - first + k, s - next_len[row] + k - first)
            self._frames[dst[from_obs]] = obs[row[from_obs], pos[from_obs]]
            self._frames[dst[~from_obs]] = next_obs[row[~from_obs], pos[~from_obs]]
            self._start[dst] = ((k == 0) & (first > 0)) | ((k == first) & ~shift[row])

        self._segment[envs] = np.where(shift, np.where(cont, self._segment[envs], written), written + obs_len)
        self._last_next_obs[envs] = next_obs
        self._prev_done[envs] = done
        self._has_prev[envs] = True
        after = written + length  # (``written`` may be a view of ``_written``: computed first)
        self._written[envs] = after
        return RingWrite(slots=base + position % ring, next_local=next_local, oldest=oldest,
                         cut=after - ring, stale=stale)

    def _stack_slots(self, base: np.ndarray, local: np.ndarray) -> np.ndarray:
        """``(M,) env ring starts, (M,) ring positions -> (M, S) int64`` slots of the stacked
        observation whose newest frame is at ``local``, oldest first. Positions before the
        segment start repeat the start's frame."""
        ring = self._ring
        window = local[:, None] + self._window
        if self.stack > 1:
            starts = self._start[base[:, None] + window % ring]
            # the latest segment start in the window (the window's oldest position when none)
            first = np.where(starts, self._window, self._window[0]).max(axis=1)
            window = local[:, None] + np.maximum(self._window, first[:, None])
        return base[:, None] + window % ring

    def stack_slots(self, slots: np.ndarray, offsets: np.ndarray) -> np.ndarray:
        """``(B,) int64 slots, (B,) int offsets -> (2B, S) int64``: the frame slots of the stacks
        whose newest frames are at ``slots`` (rows ``:B``, the obs) and ``offsets`` ring positions
        later (rows ``B:``, the next_obs), oldest first. Indexing `frames` with them gives the
        ``(2B, S, H, W) uint8`` stacks."""
        ring = self._ring
        base = slots - slots % ring
        local = slots - base
        next_local = (local + offsets) % ring
        return self._stack_slots(np.concatenate([base, base]), np.concatenate([local, next_local]))

    def slots_since(self, written: np.ndarray) -> np.ndarray:
        """``(N,) int64`` counts of an earlier `written` ``-> (M,) int64``: every slot written
        since then, each env's in write order (at most its whole ring, once it has wrapped)."""
        count = np.minimum(self._written - np.asarray(written, dtype=np.int64), self._ring)
        row, k = _ragged(count)
        return self.env_base[row] + (self._written[row] - count[row] + k) % self._ring
