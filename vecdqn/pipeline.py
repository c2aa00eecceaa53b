"""The learner's loop over the replay: sample → stage on the device → update → priorities back.

Shape legend: ``B`` batch, ``S`` stacked frames, ``H×W`` frame.

**Synchronous** (``prefetch=False``, exact): each update samples its batch, waits for its TD
errors and writes its priorities before the next samples. A run is then a function of its seed
alone, and a resume from a checkpoint continues it bit for bit on the CPU.

**Prefetch** (``prefetch=True``): a background thread samples batch ``k+1`` (and copies it into
pinned memory on CUDA) while update ``k`` runs; update ``k``'s TD errors are read when update
``k+1`` is started, and its priorities are written then. So a batch is drawn from priorities
one update late, as in Ape-X's learner, whose priorities arrive later still (Horgan et al. 2018,
"Distributed Prioritized Experience Replay", ICLR)::

    main thread:   update k ────────────────┬─ write prio k-1 ─ update k+1 ───────── ...
    sample thread:   └─ sample k+1, stage ──┘                    └─ sample k+2 ─ ...

The order of every operation on the replay is fixed (priorities ``k-1`` are written, then batch
``k+1`` is drawn, then the next ``add`` waits for that draw), so a prefetch run is as
deterministic as a synchronous one; it is a different run, not a racy one. On CUDA update ``k``
is queued before priorities ``k-1`` are written, so the device never waits for the host; on the
CPU the update occupies the main thread, so the draw is started first. With uniform replay
(``per=False``) priorities do not steer sampling and both modes draw the same batches.

The batch prefetched at the end of one vector step's updates is drawn before that step's
transitions are stored: like the overlapped trainer's updates (see `vecdqn.trainer`), it is one
vector step older, and its beta is the previous step's.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np

from vecdqn.agent import DQNAgent
from vecdqn.device_replay import DeviceFrames
from vecdqn.replay import PrioritizedReplayBuffer
from vecdqn.staging import FIELD_DTYPES, DeviceBatch, PendingUpdate, pinned

__all__ = ["LearnerPipeline"]

Draw = tuple[np.ndarray, Any]  # (indices (B,) int64, the batch staged on the host)


class LearnerPipeline:
    """Samples batches, runs updates and writes priorities back, in one of the two modes above.

    Args:
        buffer: the replay (its ``add`` goes through `store`).
        agent: the learner.
        batch_size: ``B``.
        per: write priorities back (False for uniform replay).
        prefetch: sample on a background thread, priorities one update late (see the module).
        frames: a `DeviceFrames` copy of ``buffer``'s frames to gather batches from (None: the
            host path, `PrioritizedReplayBuffer.sample`).
    """

    def __init__(self, buffer: PrioritizedReplayBuffer, agent: DQNAgent, batch_size: int, *, per: bool = True,
                 prefetch: bool = False, frames: DeviceFrames | None = None):
        self.buffer, self.agent, self.batch_size, self.per = buffer, agent, batch_size, per
        self.prefetch, self.frames = prefetch, frames
        self._pin = agent.device.type == "cuda"
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="vecdqn-sample") if prefetch else None
        self._next: Future[Draw] | Draw | None = None  # the next batch: being drawn, or drawn
        self._pending: tuple[np.ndarray, PendingUpdate] | None = None  # indices and results of the last update

    # -- host side (the sample thread in prefetch mode) ---------------------------------------------
    def draw(self, beta: float) -> Draw:
        """Sample a batch and stage it on the host (pinned tensors on CUDA): what the sample thread
        does. Returns ``(indices (B,) int64, the staged batch)``."""
        if self.frames is not None:
            sample = self.buffer.sample_slots(self.batch_size, beta)
            return sample.indices, self.frames.stage(sample)
        sample = self.buffer.sample(self.batch_size, beta)
        if not self._pin:
            return sample.indices, sample
        return sample.indices, DeviceBatch(**{name: pinned(getattr(sample, name), np_dtype)
                                              for name, (_, np_dtype) in FIELD_DTYPES.items()})

    def _to_device(self, staged: Any) -> DeviceBatch:
        """The staged batch as a `DeviceBatch` on the learner's device (main thread)."""
        if isinstance(staged, dict):  # slots and fields from `DeviceFrames.stage`
            return self.frames.batch(staged, self.agent.device)
        if isinstance(staged, DeviceBatch) and staged.obs.device == self.agent.device:  # gathered by `drain`
            return staged
        return self.agent.stage(staged)  # a ReplaySample, or pinned tensors

    # -- the loop --------------------------------------------------------------------------------
    def update(self, beta: float) -> dict[str, float] | None:
        """One update with importance exponent ``beta``.

        Returns:
            ``{"td_loss", "q_values", "grad_norm"}`` of this update (synchronous), or of the
            previous one (prefetch; None for the first). Priorities are written only from finite
            TD errors; the caller checks the metrics for NaN.
        """
        if not self.prefetch:
            indices, staged = self.draw(beta)
            metrics, td_errors = self.agent.update_async(self._to_device(staged)).result()
            self._write(indices, td_errors)
            return metrics
        indices, staged = self._take(beta)
        batch = self._to_device(staged)
        if self._pin:  # queue update k first: the device works while the host writes back
            pending = self.agent.update_async(batch)
            metrics = self.flush()
            self._next = self._executor.submit(self.draw, beta)
        else:  # the update holds this thread: start the next draw before it
            metrics = self.flush()
            self._next = self._executor.submit(self.draw, beta)
            pending = self.agent.update_async(batch)
        self._pending = (indices, pending)
        return metrics

    def flush(self) -> dict[str, float] | None:
        """Read the last update's results and write its priorities; its metrics (None if none
        is outstanding)."""
        if self._pending is None:
            return None
        indices, pending = self._pending
        self._pending = None
        metrics, td_errors = pending.result()
        self._write(indices, td_errors)
        return metrics

    def store(self, *transitions: Any, envs: Any = None) -> np.ndarray:
        """``buffer.add(*transitions, envs=envs)`` once no draw is running, then the device copy of
        the frames brought up to date; returns what ``add`` returns. Every ``add`` of a run goes
        through here: an ``add`` beside it would race a prefetch draw and leave the copy stale."""
        self.drain()
        slots = self.buffer.add(*transitions, envs=envs)
        if self.frames is not None:
            self.frames.sync()
        return slots

    def drain(self) -> None:
        """Wait for the draw in progress and keep its batch for the next update; with
        `DeviceFrames` also gather its frames now, before an ``add`` overwrites any."""
        if isinstance(self._next, Future):
            indices, staged = self._next.result()
            self._next = (indices, self._to_device(staged) if self.frames is not None else staged)

    def close(self) -> None:
        """Stop the sample thread once the draw in progress is done (its result, or error, is
        dropped: close runs on the way out, also after another error)."""
        if self._executor is not None:
            self._executor.shutdown(wait=True)

    def _take(self, beta: float) -> Draw:
        """The prefetched batch, or one drawn now if none is."""
        self.drain()
        drawn = self._next if self._next is not None else self.draw(beta)
        self._next = None
        return drawn

    def _write(self, indices: np.ndarray, td_errors: np.ndarray) -> None:
        if self.per and np.isfinite(td_errors).all():
            self.buffer.update_priorities(indices, td_errors)
