"""The learner's loop over a filled replay (rows of ``--learner``): where an update's time goes,
and how much of it prefetching hides.

Candidates, each in ms per update, run interleaved (the `harness` method):

* ``sample_only``: `LearnerPipeline.draw`, sample a batch and put it on the device (on CUDA: the
  copies queued, not waited for);
* ``update_only``: `DQNAgent.update` on a batch already on the device;
* ``loop_sync``: `LearnerPipeline.update` without prefetch (sample, update, priorities in turn);
* ``loop_prefetch``: the same with prefetch (the next sample during the update).

Each row's ``ratio`` is its time over ``max(sample_only, update_only)`` of the same round, median
over rounds: a loop that hid all of the shorter part would score 1, the synchronous loop scores
``sum / max``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np

from vecdqn.benchmarks.harness import Row

__all__ = ["filled_buffer", "loop_rows", "ms_per_update", "options_note"]

N_ENVS = 8


def options_note(args: argparse.Namespace) -> str:
    """``", compile, amp bf16, replay on cuda"`` for the options given (empty for none)."""
    parts = ["compile"] if args.compile else []
    parts += [f"amp {args.amp}"] if args.amp != "off" else []
    parts += [f"replay on {args.replay_device}"] if getattr(args, "replay_device", "") else []
    return "".join(f", {p}" for p in parts)


def filled_buffer(capacity: int, seed: int = 0):
    """A `PrioritizedReplayBuffer` of ``capacity`` slots (alpha 0.5, n = 3) filled by 8 envs of
    random ``(4, 84, 84) uint8`` observations in FrameStack's shift (one new frame per env and
    step), its priorities spread by one update from exponential TD errors."""
    from vecdqn.replay import PrioritizedReplayBuffer

    buffer = PrioritizedReplayBuffer(capacity, (4, 84, 84), alpha=0.5, seed=seed, n_step=3)
    rng = np.random.default_rng(seed)
    obs = rng.integers(0, 256, (N_ENVS, 4, 84, 84), dtype=np.uint8)
    zeros = np.zeros(N_ENVS)
    for _ in range(capacity // N_ENVS):
        next_obs = np.concatenate([obs[:, 1:], rng.integers(0, 256, (N_ENVS, 1, 84, 84), dtype=np.uint8)], axis=1)
        buffer.add(obs, zeros.astype(np.int64), zeros, next_obs, zeros.astype(bool))
        obs = next_obs
    live = np.flatnonzero(buffer.priorities(np.arange(buffer.capacity)) > 0)
    buffer.update_priorities(live, rng.exponential(size=live.size))
    return buffer


def ms_per_update(call: Callable[[], object], seconds: float, finish: Callable[[], object] | None = None) -> float:
    """Wall-clock ms per ``call()`` over at least ``seconds`` (and 3 calls) after one warm-up
    call; ``finish()`` (waiting for outstanding work) is inside the timing."""
    call()
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds or count < 3:
        call()
        count += 1
    if finish is not None:
        finish()
    return (time.perf_counter() - start) / count * 1e3


def _candidates(args: argparse.Namespace, batch: int, device: str, seconds: float) -> dict[str, Callable[[], float]]:
    import torch

    from vecdqn.dqn.agent import DQNAgent
    from vecdqn.dqn.device_replay import DeviceFrames
    from vecdqn.dqn.pipeline import LearnerPipeline
    from vecdqn.staging import stage

    buffer = filled_buffer(args.loop_capacity)
    agent = DQNAgent(4, (4, 84, 84), torch.device(device), seed=0, compile=args.compile, amp=args.amp)
    frames = DeviceFrames(buffer, args.replay_device) if args.replay_device else None
    sync = LearnerPipeline(buffer, agent, batch, frames=frames)
    prefetch = LearnerPipeline(buffer, agent, batch, frames=frames, prefetch=True)
    staged = stage(buffer.sample(batch, 0.5), agent.device)
    for _ in range(3 if args.compile else 0):  # record the graphs outside the timing
        agent.update(staged)

    def finish_prefetch() -> None:
        prefetch.flush()
        prefetch.drain()  # no draw may run while another candidate samples

    return {
        "sample_only": lambda: ms_per_update(lambda: sync.draw(0.5), seconds),
        "update_only": lambda: ms_per_update(lambda: agent.update(staged), seconds),
        "loop_sync": lambda: ms_per_update(lambda: sync.update(0.5), seconds),
        "loop_prefetch": lambda: ms_per_update(lambda: prefetch.update(0.5), seconds, finish_prefetch),
    }


def loop_rows(args: argparse.Namespace, batch: int, device: str, threads: int, seconds: float) -> list[Row]:
    """The four candidates' rows at batch size ``batch``, medians over ``--repeats`` rounds."""
    print(f"timing the learner loop at batch {batch} on {device} over {args.loop_capacity} replay slots ...",
          flush=True)
    candidates = _candidates(args, batch, device, seconds)
    values: dict[str, list[float]] = {name: [] for name in candidates}
    for _ in range(args.repeats):
        for name, run in candidates.items():
            values[name].append(run())
    bound = [max(s, u) for s, u in zip(values["sample_only"], values["update_only"], strict=True)]
    total = [s + u for s, u in zip(values["sample_only"], values["update_only"], strict=True)]
    saved = [a - b for a, b in zip(values["loop_sync"], values["loop_prefetch"], strict=True)]
    notes = {
        "loop_sync": f"{statistics.median(v / t for v, t in zip(values['loop_sync'], total, strict=True)):.3f} "
                     "of sample + update",
        "loop_prefetch": f"{statistics.median(saved):.2f} ms/update less than loop_sync (sample_only: "
                         f"{statistics.median(values['sample_only']):.2f})",
    }
    return [{"bench": "learner", "op": "loop", "impl": name, "batch_size": batch, "capacity": args.loop_capacity,
             "value": statistics.median(v), "unit": "ms/update",
             "ratio": statistics.median(x / m for x, m in zip(v, bound, strict=True)),
             "anchor": "max(sample, update)",
             "note": f"{device}, {threads} torch thread(s){options_note(args)}"
                     + (f"; {notes[name]}" if name in notes else "")}
            for name, v in values.items()]
