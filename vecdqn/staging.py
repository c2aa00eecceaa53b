"""What crosses between the host and the learner's device: a batch staged on the device, an
update's results on their way back, and which mixed precision a device can run.

Shape legend: ``B`` batch, ``S`` stacked frames, ``H×W`` frame.

On CUDA every transfer is asynchronous: host arrays go through pinned (page-locked) memory with
``non_blocking=True`` copies, and an update's results come back the same way, behind a CUDA
event that `PendingUpdate.result` waits on. The host then never waits for the device except
where it reads a result.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import torch

__all__ = ["AMP_DTYPES", "FIELD_DTYPES", "DeviceBatch", "PendingUpdate", "amp_dtype", "check_amp", "pinned"]

# --amp values and the autocast dtype each one means (None: full fp32)
AMP_DTYPES: dict[str, torch.dtype | None] = {"off": None, "bf16": torch.bfloat16}


class DeviceBatch(NamedTuple):
    """A replay batch as tensors on the learner's device::

        obs, next_obs   (B, S, H, W) uint8    scaled to [0, 1] by the network
        actions         (B,) int64
        rewards         (B,) float32          n-step returns (clipped if clipping is on)
        discounts       (B,) float32          γ^h · (1 − terminated)
        weights         (B,) float32          importance-sampling weights
    """

    obs: torch.Tensor
    next_obs: torch.Tensor
    actions: torch.Tensor
    rewards: torch.Tensor
    discounts: torch.Tensor
    weights: torch.Tensor


# (torch dtype, NumPy dtype) of each `DeviceBatch` field
FIELD_DTYPES: dict[str, tuple[torch.dtype, type]] = {
    "obs": (torch.uint8, np.uint8), "next_obs": (torch.uint8, np.uint8), "actions": (torch.int64, np.int64),
    "rewards": (torch.float32, np.float32), "discounts": (torch.float32, np.float32),
    "weights": (torch.float32, np.float32),
}


def pinned(array: Any, dtype: type) -> torch.Tensor:
    """A host array as a CPU tensor of NumPy ``dtype`` in pinned memory (a copy): the source of
    an asynchronous host→device copy. Safe from any thread; the caching host allocator does not
    hand the block out again before the copies that read it are done."""
    return torch.from_numpy(np.ascontiguousarray(array, dtype=dtype)).pin_memory()


class PendingUpdate:
    """An update's results on their way to the host: the ``(B + 3,) float32`` vector of TD
    errors, loss, mean Q and gradient norm, copied asynchronously into pinned memory on CUDA.

    `result` waits for that copy only (not for later work on the device), so a caller that asks
    one update later finds it done.
    """

    def __init__(self, packed: torch.Tensor):
        self._batch = packed.shape[0] - 3
        self._event = None
        if packed.device.type == "cuda":
            self._host = torch.empty(packed.shape, dtype=packed.dtype, pin_memory=True)
            self._host.copy_(packed, non_blocking=True)
            self._event = torch.cuda.Event()
            self._event.record()
        else:
            self._host = packed.detach().to("cpu")

    def result(self) -> tuple[dict[str, float], np.ndarray]:
        """``(metrics, td_errors)``: ``{"td_loss", "q_values", "grad_norm"}`` as floats and the
        ``(B,) float32`` TD errors ``y − Q(s, a)`` as a NumPy array."""
        if self._event is not None:
            self._event.synchronize()
        packed, b = self._host.numpy(), self._batch
        metrics = {"td_loss": float(packed[b]), "q_values": float(packed[b + 1]), "grad_norm": float(packed[b + 2])}
        return metrics, packed[:b]


def amp_dtype(amp: str) -> torch.dtype | None:
    """The autocast dtype of an ``--amp`` value (None for ``off``).

    Raises:
        ValueError: an unknown value.
    """
    if amp not in AMP_DTYPES:
        raise ValueError(f"--amp {amp!r} is unknown; use one of {', '.join(AMP_DTYPES)}")
    return AMP_DTYPES[amp]


def check_amp(device: torch.device, amp: str) -> torch.dtype | None:
    """``amp_dtype(amp)``, after checking that ``device`` can autocast to it: bf16 needs a CUDA
    device with bf16 support (compute capability 8.0 and later) or the CPU.

    Raises:
        ValueError: one line naming the device and what to use instead.
    """
    dtype = amp_dtype(amp)
    if dtype is None:
        return None
    if device.type == "cuda":
        if not torch.cuda.is_bf16_supported():
            raise ValueError(f"--amp {amp}: {torch.cuda.get_device_name(device)} cannot compute in bf16; "
                             "use --amp off")
    elif device.type != "cpu":
        raise ValueError(f"--amp {amp} is not offered on --device {device}; use --amp off, or a CPU or CUDA device")
    return dtype
