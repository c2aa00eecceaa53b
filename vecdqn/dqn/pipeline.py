"""The learner's loop over the replay: sample → stage on the device → update → priorities back.

Shape legend: ``B`` batch, ``S`` stacked frames, ``H×W`` frame.

**Synchronous** (``prefetch=False``, exact): each update samples its batch, waits for its TD
errors and writes its priorities before the next samples. A run is then a function of its seed
alone, and a resume from a checkpoint continues it bit for bit on the CPU.

**Prefetch** (``prefetch=True``): a background thread samples batch ``k+1`` and puts it on the
device (on CUDA: queues its copy, through pinned memory, behind update ``k``) while update ``k``
runs; update ``k``'s TD errors are read when update ``k+1`` is started, and its priorities are
written then. So a batch is drawn from priorities one update late, as in Ape-X's learner, whose
priorities arrive later still (Horgan et al. 2018, "Distributed Prioritized Experience Replay",
ICLR)::

    main thread:   update k ────────────────┬─ write prio k-1 ─ update k+1 ───────── ...
    sample thread:   └─ sample k+1, stage ──┘                    └─ sample k+2 ─ ...

The order of every operation on the replay is fixed (priorities ``k-1`` are written, then batch
``k+1`` is drawn, then the next ``add`` waits for that draw), so a prefetch run is as
deterministic as a synchronous one; it is a different run, not a racy one. On CUDA update ``k``
is queued before priorities ``k-1`` are written, so the device never waits for the host; on the
CPU the update occupies the main thread, so the draw is started first. With uniform replay
(``per=False``) priorities do not steer sampling and both modes draw the same batches.

Every batch reaches the agent the same way: `draw` returns it as a `DeviceBatch` on the learner's
device, from either source (`PrioritizedReplayBuffer.sample` through `staging.stage`, or a
`DeviceFrames` gather), in either mode. A draw is over before the next ``add`` (`store` waits for
it), so a gather from `DeviceFrames` reads its frames before they are overwritten (on CUDA: it is
queued on the same stream before the copy that overwrites them).

The batch prefetched at the end of one vector step's updates is drawn before that step's
transitions are stored: like the overlapped trainer's updates (see `vecdqn.trainer`), it is one
vector step older, and its beta is the previous step's.

A checkpoint keeps what prefetch holds between updates (`settle`, then `state_dict`): the last
update's TD errors and metrics, not yet written back, and the batch already drawn for the next
update. A run resumed with its replay (``--save-replay``) writes and learns them where the
uninterrupted run would, so a prefetch run, too, resumes bit for bit on the CPU.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np
import torch

from vecdqn.dqn.agent import DQNAgent
from vecdqn.dqn.device_replay import DeviceFrames
from vecdqn.replay import PrioritizedReplayBuffer
from vecdqn.staging import DeviceBatch, PendingUpdate, stage

__all__ = ["LearnerPipeline"]

Draw = tuple[np.ndarray, DeviceBatch]  # (indices (B,) int64, the batch on the learner's device)


class _Finished:
    """An update whose results are on the host already (`LearnerPipeline.settle`, or loaded from
    a checkpoint): `PendingUpdate`'s ``result`` without the wait."""

    def __init__(self, metrics: dict[str, float], td_errors: np.ndarray):
        self.metrics, self.td_errors = metrics, td_errors

    def result(self) -> tuple[dict[str, float], np.ndarray]:
        return self.metrics, self.td_errors


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
        self._cuda = agent.device.type == "cuda"
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="vecdqn-sample") if prefetch else None
        self._drawing: Future[Draw] | None = None  # the next batch being drawn
        self._next: Draw | None = None  # the next batch, drawn
        # indices and results of the last update, written back when the next one starts (prefetch)
        self._pending: tuple[np.ndarray, PendingUpdate | _Finished] | None = None

    # -- the sample thread's part (in prefetch mode) -------------------------------------------------
    def draw(self, beta: float) -> Draw:
        """Sample a batch and put it on the learner's device (any thread; on CUDA the copies are
        queued, not waited for). Returns ``(indices (B,) int64, the DeviceBatch)``."""
        if self.frames is not None:
            slots = self.buffer.sample_slots(self.batch_size, beta)
            return slots.indices, self.frames.batch(slots, self.agent.device)
        sample = self.buffer.sample(self.batch_size, beta)
        return sample.indices, stage(sample, self.agent.device)

    # -- the loop --------------------------------------------------------------------------------
    def update(self, beta: float) -> dict[str, float] | None:
        """One update with importance exponent ``beta``.

        Returns:
            ``{"td_loss", "q_values", "grad_norm"}`` of this update (synchronous), or of the
            previous one (prefetch; None for the first). Priorities are written only from finite
            TD errors; the caller checks the metrics for NaN.
        """
        if not self.prefetch:
            indices, batch = self.draw(beta)
            metrics, td_errors = self.agent.update(batch)
            self._write(indices, td_errors)
            return metrics
        indices, batch = self._take(beta)
        if self._cuda:  # queue update k first: the device works while the host writes back
            pending = self.agent.update_async(batch)
            metrics = self.flush()
            self._drawing = self._executor.submit(self.draw, beta)
        else:  # the update holds this thread: start the next draw before it
            metrics = self.flush()
            self._drawing = self._executor.submit(self.draw, beta)
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

    def set_priorities(self, slots: np.ndarray, td_errors: np.ndarray) -> None:
        """``buffer.update_priorities(slots, td_errors)`` once no draw is running (priorities that
        arrive with transitions, such as an Ape-X actor's initial ones)."""
        self.drain()
        self.buffer.update_priorities(slots, td_errors)

    def drain(self) -> None:
        """Wait for the draw in progress and keep its batch for the next update."""
        if self._drawing is not None:
            self._next, self._drawing = self._drawing.result(), None

    def settle(self) -> None:
        """Wait for the draw in progress and for the last update's results, without writing them
        back: the replay and what prefetch holds are then what `state_dict` saves, and the order
        of every operation on the replay is unchanged (before a checkpoint or an evaluation)."""
        self.drain()
        if self._pending is not None:
            indices, pending = self._pending
            self._pending = (indices, _Finished(*pending.result()))

    def state_dict(self) -> dict[str, Any]:
        """What prefetch holds between updates, as CPU tensors (after `settle`): ``pending``, the
        last update's ``indices (B,) int64``, ``td_errors (B,) float32`` and ``metrics``, and
        ``next``, the drawn batch's ``indices`` and `DeviceBatch` fields; each None when there is
        none (always, without prefetch).

        Raises:
            RuntimeError: a draw or an update is still in flight (call `settle` first).
        """
        if self._drawing is not None or (self._pending is not None and not isinstance(self._pending[1], _Finished)):
            raise RuntimeError("LearnerPipeline.state_dict called with a draw or update in flight; call settle() first")
        pending = next_ = None
        if self._pending is not None:
            indices, done = self._pending
            pending = {"indices": torch.from_numpy(np.asarray(indices, np.int64)),
                       "td_errors": torch.from_numpy(np.asarray(done.td_errors, np.float32)),
                       "metrics": dict(done.metrics)}
        if self._next is not None:
            indices, batch = self._next
            next_ = {"indices": torch.from_numpy(np.asarray(indices, np.int64)),
                     "batch": {name: tensor.cpu() for name, tensor in batch._asdict().items()}}
        return {"pending": pending, "next": next_}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from `state_dict` over the replay it was saved with. Without prefetch the saved
        TD errors are written back at once and the drawn batch is dropped (a synchronous run draws
        its own)."""
        pending, next_ = state.get("pending"), state.get("next")
        if pending is not None:
            indices, td_errors = pending["indices"].numpy(), pending["td_errors"].numpy()
            if self.prefetch:
                self._pending = (indices, _Finished(dict(pending["metrics"]), td_errors))
            else:
                self._write(indices, td_errors)
        if next_ is not None and self.prefetch:
            batch = DeviceBatch(**{name: tensor.to(self.agent.device) for name, tensor in next_["batch"].items()})
            self._next = (next_["indices"].numpy(), batch)

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
