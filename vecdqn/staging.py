"""The learner's device: choosing it, the ``--amp`` modes it can run (and what ``--amp auto``
resolves to there), moving a batch onto it as the one typed batch the learner takes
(`DeviceBatch`), and an update's results on their way back.

Shape legend: ``B`` batch, ``S`` stacked frames, ``H×W`` frame.

Host arrays reach the device through `to_device` (one array) or `stage` (a whole batch): on CUDA
through pinned (page-locked) memory with ``non_blocking=True`` copies, and an update's results
come back the same way, behind a CUDA event that `PendingUpdate.result` waits on. The host then
never waits for the device except where it reads a result. On the CPU the tensors share the
arrays' memory (a copy only where the dtype changes).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import torch

__all__ = ["AMP_DTYPES", "AMP_NAMES", "BF16_CPU_FLAGS", "DEVICE_NAMES", "FIELD_DTYPES", "MAX_TORCH_THREADS",
           "DeviceBatch", "PendingUpdate", "ScheduledLearningRate", "adam", "amp_dtype", "announce_amp", "check_amp",
           "cpu_flags", "default_torch_threads", "gradient_step", "native_bf16_flag", "on_device", "pinned",
           "resolve_amp", "select_device", "stage", "to_device"]

# The --amp modes and the autocast dtype each one means (None: full fp32)
AMP_DTYPES: dict[str, torch.dtype | None] = {"off": None, "bf16": torch.bfloat16}
# What --amp takes: a mode, or "auto" (`resolve_amp` picks the mode for the device)
AMP_NAMES = (*AMP_DTYPES, "auto")
# x86 CPU flags (Linux /proc/cpuinfo) of a CPU that computes bf16 natively. Without one, PyTorch
# emulates bf16 and an update costs more than in fp32 (2.6x on an Intel Xeon without them;
# docs/installation.md#troubleshooting), so "auto" keeps fp32 there.
BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")
# what --device and --replay-device take
DEVICE_NAMES = "auto, cpu, cuda, cuda:N, mps"


def select_device(name: str = "auto", option: str = "--device") -> torch.device:
    """The device a name means: ``cuda`` when available for ``"auto"``, else ``cpu``; ``cpu``,
    ``cuda``, ``cuda:N`` or ``mps`` as given, once checked that this machine has it. The one
    check of a device name; ``option`` is the flag errors name.

    Raises:
        ValueError: one line naming the value and what to use instead.
    """
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    kind, colon, index = name.partition(":")
    if kind not in ("cpu", "cuda", "mps") or (colon and not (kind == "cuda" and index.isascii() and index.isdigit())):
        raise ValueError(f"{option} {name!r} is not one of {DEVICE_NAMES}")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"{option} {name} was asked for but CUDA is not available; use {option} cpu or auto")
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise ValueError(f"{option} {name}: there are only {torch.cuda.device_count()} CUDA devices")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"{option} {name} was asked for but MPS is not available; use {option} cpu or auto")
    return device


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


def pinned(array: Any, dtype: type | None = None) -> torch.Tensor:
    """A host array as a CPU tensor of NumPy ``dtype`` (None: its own) in pinned memory (a copy):
    the source of an asynchronous host→device copy. Safe from any thread; the caching host
    allocator does not hand the block out again before the copies that read it are done."""
    return torch.from_numpy(np.ascontiguousarray(array, dtype=dtype)).pin_memory()


def to_device(array: Any, device: torch.device, dtype: type | None = None) -> torch.Tensor:
    """A host array as a tensor on ``device``, NumPy ``dtype`` (None: its own; ``uint8`` frames
    stay ``uint8`` until the network scales them). Pinned and asynchronous on CUDA; on the CPU
    the tensor shares the array's memory when it is contiguous and of that dtype already."""
    if device.type == "cuda":
        return pinned(array, dtype).to(device, non_blocking=True)
    return torch.from_numpy(np.ascontiguousarray(array, dtype=dtype)).to(device)


def stage(batch: Any, device: torch.device) -> DeviceBatch:
    """A host batch as the `DeviceBatch` on ``device`` that `DQNAgent.update` takes: the one
    conversion into that type from NumPy (any thread; on CUDA the copies are queued, not waited for).

    Args:
        batch: an object with the `DeviceBatch` fields as NumPy arrays (a `ReplaySample`):
            ``obs, next_obs (B, S, H, W) uint8``, ``actions (B,) int``, ``rewards, discounts,
            weights (B,) float``; each is converted to its `FIELD_DTYPES` dtype.
    """
    return DeviceBatch(**{name: to_device(getattr(batch, name), device, np_dtype)
                          for name, (_, np_dtype) in FIELD_DTYPES.items()})


def on_device(tensor: torch.Tensor, device: torch.device) -> bool:
    """Whether ``tensor`` lives on ``device`` (``cuda`` without an index: any CUDA device)."""
    return tensor.device.type == device.type and device.index in (None, tensor.device.index)


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


def adam(params: Any, **kwargs: Any) -> torch.optim.Adam:
    """Adam with its fused kernel where this torch has one for the device (PyTorch >= 2.4 on the
    CPU): one pass over the parameters instead of ~10 elementwise ops per tensor. Same
    arithmetic, so results agree to rounding. ``kwargs``: Adam's (``lr``, ``eps``)."""
    params = list(params)
    try:
        return torch.optim.Adam(params, fused=True, **kwargs)
    except (RuntimeError, TypeError, ValueError):  # no fused kernel for this device or version
        return torch.optim.Adam(params, foreach=True, **kwargs)


def gradient_step(optimizer: torch.optim.Optimizer, parameters: Any, max_grad_norm: float, loss: torch.Tensor,
                  td_errors: torch.Tensor, q_mean: torch.Tensor) -> PendingUpdate:
    """The backward half of an update: ``loss``'s gradient, clipped to a global norm of
    ``max_grad_norm`` (0: not clipped), one ``optimizer`` step over ``parameters``; returns the
    update's results as one `PendingUpdate` (one device→host transfer): ``td_errors (B,) float32``
    (the new priorities), the loss, ``q_mean`` and the gradient norm before clipping."""
    parameters = list(parameters)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if max_grad_norm > 0:
        grad_norm = torch.nn.utils.clip_grad_norm_(parameters, max_grad_norm)
    else:
        grad_norm = torch.zeros((), device=loss.device)
    optimizer.step()
    return PendingUpdate(torch.cat([td_errors, torch.stack([loss.detach(), q_mean, grad_norm.detach().float()])]))


class ScheduledLearningRate:
    """For an agent with an ``optimizer``: its learning rate, read and set in every parameter group
    (the learner's schedule, `vecdqn.schedules`, sets it before the steps it applies to)."""

    optimizer: torch.optim.Optimizer

    @property
    def learning_rate(self) -> float:
        """The optimizer's learning rate now (what its next step uses)."""
        return float(self.optimizer.param_groups[0]["lr"])

    def set_learning_rate(self, lr: float) -> None:
        """Set the optimizer's learning rate for its next steps."""
        for group in self.optimizer.param_groups:
            group["lr"] = lr


def amp_dtype(amp: str) -> torch.dtype | None:
    """The autocast dtype of an ``--amp`` mode (None for ``off``): the one check of an ``--amp``
    name. ``auto`` is a name but not a mode: it depends on the device (`resolve_amp`).

    Raises:
        ValueError: an unknown value, or ``auto``.
    """
    if amp == "auto":
        raise ValueError("--amp auto depends on the device; resolve it first (vecdqn.staging.resolve_amp)")
    if amp not in AMP_DTYPES:
        raise ValueError(f"--amp {amp!r} is not one of {', '.join(AMP_NAMES)}")
    return AMP_DTYPES[amp]


def check_amp(device: torch.device, amp: str) -> torch.dtype | None:
    """``amp_dtype`` of ``amp`` (``auto`` resolved for ``device`` first, `resolve_amp`), after
    checking that ``device`` can autocast to it: bf16 needs a CUDA device with bf16 support
    (compute capability 8.0 and later) or the CPU.

    Raises:
        ValueError: one line naming the device and what to use instead.
    """
    amp = resolve_amp(device, amp)
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


def cpu_flags(cpuinfo: str = "/proc/cpuinfo") -> frozenset[str]:
    """The flags of the first CPU listed in ``cpuinfo`` (Linux's ``flags : ...`` line); empty
    where the file is missing or has no such line (macOS, Windows)."""
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as file:
            for line in file:
                key, colon, value = line.partition(":")
                if colon and key.strip() == "flags":
                    return frozenset(value.split())
    except OSError:
        pass
    return frozenset()


def native_bf16_flag() -> str | None:
    """The first of `BF16_CPU_FLAGS` this CPU has (`cpu_flags`), or None: bf16 is then emulated."""
    flags = cpu_flags()
    return next((flag for flag in BF16_CPU_FLAGS if flag in flags), None)


def _auto_amp(device: torch.device) -> tuple[str, str]:
    """``(mode, why)``: what ``--amp auto`` means on ``device``, and the reason in a few words."""
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        if torch.cuda.is_bf16_supported():
            return "bf16", f"{name} computes in bf16"
        return "off", f"{name} cannot compute in bf16"
    if device.type == "cpu":
        flag = native_bf16_flag()
        if flag is not None:
            return "bf16", f"this CPU computes bf16 natively ({flag})"
        return "off", f"this CPU has no native bf16 ({' or '.join(BF16_CPU_FLAGS)}), where bf16 is slower than fp32"
    return "off", f"bf16 autocast is not offered on {device.type}"


def resolve_amp(device: torch.device, amp: str) -> str:
    """The ``--amp`` mode to run on ``device``: ``amp`` itself when it is a mode (``off``,
    ``bf16``); for ``auto``, ``bf16`` on a CUDA device that computes in bf16 or on a CPU with
    native bf16 (Linux's ``/proc/cpuinfo`` lists ``avx512_bf16`` or ``amx_bf16``), else ``off``
    (fp32). The mode is not checked against the device here (`check_amp` does).

    Raises:
        ValueError: an unknown value.
    """
    if amp != "auto":
        amp_dtype(amp)  # the name check
        return amp
    return _auto_amp(device)[0]


def announce_amp(device: torch.device, amp: str, say: Callable[[str], None] = print) -> str:
    """`resolve_amp`, with one line to ``say`` that names the mode the run computes in (and, for
    ``auto``, why): the trainer calls it once at the start and saves the returned mode in the
    run's configuration, so ``config.json`` shows what ran and a resume keeps it.

    >>> announce_amp(torch.device("cpu"), "off")
    --amp off: fp32
    'off'
    """
    mode = resolve_amp(device, amp)
    line = f"--amp {amp}: {'bf16 autocast, fp32 weights and loss' if mode == 'bf16' else 'fp32'}"
    say(f"{line}; {_auto_amp(device)[1]}" if amp == "auto" else line)
    return mode


# The most torch intra-op threads any option may ask for (--torch-threads, evaluate.py's, the
# benchmarks'): far above any machine's cores, far below what the OS refuses to start.
MAX_TORCH_THREADS = 1024


def default_torch_threads(num_envs: int, cpu_count: int | None = None, device_type: str = "cpu") -> int:
    """Intra-op threads for the learner so it does not fight the env workers for cores.

    Rule: a learner on the CPU takes every core; a learner on a GPU takes the cores the env
    workers leave free (at least one, at most four: it only feeds the GPU).

    Why: on the CPU the learner is the bottleneck by far (an update costs several times the
    workers' CPU for one vector step, and `Trainer` overlaps the two), so it gets every core
    where the machine is otherwise idle; on a busy machine threads that wait for each other
    stall (Catch on 2 cores beside one busy core: 39 agent steps/s on two threads, 368 on one;
    docs/presets.md, ``catch``), which is why the presets for small machines set one. On a GPU
    the workers are expected to be busy all the time (an env-bound run), so they get the cores
    (an expectation: not measured on a GPU).
    """
    cores = cpu_count if cpu_count is not None else (os.cpu_count() or 1)
    if device_type == "cpu":
        return max(1, cores)
    return max(1, min(4, cores - num_envs))
