"""A copy of the replay's frames on a torch device, so that a sample is an index gather there.

Shape legend: ``C`` frame slots, ``H×W`` frame, ``B`` batch, ``S`` stacked frames, ``M`` slots
written by one ``add``.

`PrioritizedReplayBuffer` stays the one owner of the replay: its sum tree, n-step windows and
frame rings stay NumPy on the host, and it decides which frame slots a batch reads
(`PrioritizedReplayBuffer.sample_slots`). `DeviceFrames` keeps a ``(C, H, W) uint8`` tensor
equal to the buffer's `frames`, brought up to date after each ``add`` by copying the ``M`` slots
that add wrote (``N`` per vector step with FrameStack data); `DeviceFrames.batch` then builds
the observations with one ``index_select`` on the device. Same transitions, same frames as
`PrioritizedReplayBuffer.sample` for the same seed; only the copy of ``2·B·S`` frames moves from
host memory to the device (on an H200 a million slots, 7 GB, fit many times over).

On ``cpu`` the very same path runs (a second copy of the frames in host memory): that is how it
is tested without a GPU.
"""

from __future__ import annotations

import numpy as np
import torch

from vecdqn.replay import PrioritizedReplayBuffer, ReplaySlots
from vecdqn.staging import FIELD_DTYPES, DeviceBatch, to_device

__all__ = ["DeviceFrames"]

# Slots copied per transfer when the whole storage is copied (64 MiB of 84×84 frames).
CHUNK_SLOTS = 8192


class DeviceFrames:
    """A torch copy of ``buffer.frames`` on ``device``, and batches gathered from it.

    Args:
        buffer: the replay; the copy starts equal to its frames (all of them: a resumed replay
            arrives whole) and follows its adds through `sync`.
        device: any torch device.

    ``frames``: ``(C, H, W) uint8`` on ``device``.
    """

    def __init__(self, buffer: PrioritizedReplayBuffer, device: torch.device | str):
        self.buffer = buffer
        self.device = torch.device(device)
        host = buffer.frames
        self.frames = torch.empty(host.shape, dtype=torch.uint8, device=self.device)
        for start in range(0, host.shape[0], CHUNK_SLOTS):
            chunk = np.array(host[start:start + CHUNK_SLOTS])  # a writable copy for torch
            self.frames[start:start + chunk.shape[0]].copy_(torch.from_numpy(chunk))
        written = buffer.slots_written
        self._written = None if written is None else written.copy()

    def sync(self) -> int:
        """Copy the frames the buffer has written since the last sync; returns how many
        (``M``). Call after each ``buffer.add``."""
        now = self.buffer.slots_written
        if now is None:
            return 0
        before = self._written if self._written is not None else np.zeros_like(now)
        slots = self.buffer.frame_slots_since(before)
        if slots.size:
            index = to_device(slots, self.device)
            self.frames.index_copy_(0, index, to_device(self.buffer.frames[slots], self.device))
        self._written = now
        return int(slots.size)

    def batch(self, sample: ReplaySlots, device: torch.device) -> DeviceBatch:
        """The `DeviceBatch` of ``sample`` on the learner's ``device`` (any thread; on CUDA the
        work is queued, not waited for): its ``(2B·S,)`` slots copied here (`staging.to_device`)
        and gathered in one ``index_select``, ``(2B, S, H, W) uint8`` split into obs and
        next_obs; the per-transition fields staged onto ``device``."""
        b = sample.obs_slots.shape[0]
        slots = to_device(np.concatenate([sample.obs_slots, sample.next_obs_slots]).reshape(-1), self.device, np.int64)
        frames = self.frames.index_select(0, slots).view(2 * b, -1, *self.frames.shape[1:])
        frames = frames.to(device)  # no copy when the learner is on this device
        rest = {name: to_device(getattr(sample, name), device, np_dtype)
                for name, (_, np_dtype) in list(FIELD_DTYPES.items())[2:]}
        return DeviceBatch(obs=frames[:b], next_obs=frames[b:], **rest)
