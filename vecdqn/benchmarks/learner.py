"""``--learner``: `DQNAgent.update` calls per second (dueling double DQN, random batches of
``(B, 4, 84, 84) uint8`` observations) on the chosen device, at each batch size; then the
learner's loop over a filled replay (`vecdqn.benchmarks.loop`): sample alone, update alone, and
`LearnerPipeline` synchronous and with prefetch, in ms per update."""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

from vecdqn.benchmarks.harness import Row, check_counts, check_durations
from vecdqn.benchmarks.loop import loop_rows, options_note
from vecdqn.cli import duration, whole_number

__all__ = ["QUICK", "add_arguments", "check_arguments", "check_devices", "learner_updates_per_second", "random_batch",
           "run", "torch_threads"]

# --quick: the smallest sizes, for a smoke run (the numbers mean little)
QUICK = {"learner_batches": [8], "loop_batches": [8], "loop_capacity": 2048, "learner_seconds": 0.1}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from vecdqn.staging import AMP_DTYPES

    group = parser.add_argument_group("--learner section")
    group.add_argument("--learner", action="store_true", help="benchmark DQNAgent.update")
    group.add_argument("--learner-batches", type=whole_number, nargs="+", default=[32, 256],
                       help="batch sizes (default 32 256)")
    group.add_argument("--device", default="auto", help="learner device: auto, cpu, cuda (default auto)")
    group.add_argument("--torch-threads", type=whole_number, default=0,
                       help="torch intra-op threads (0: the trainer's rule for --num-envs; default 0)")
    group.add_argument("--num-envs", type=whole_number, default=8,
                       help="envs of the --train runs and of the thread rule (default 8)")
    group.add_argument("--compile", action="store_true",
                       help="build the agents with compile=True (CUDA graphs on CUDA; default off)")
    group.add_argument("--amp", default="off", choices=list(AMP_DTYPES), help="autocast of the agents (default off)")
    group.add_argument("--replay-device", default="",
                       help="device of the frames' copy in the loop rows and in an extra --train row (default none)")
    group.add_argument("--learner-seconds", type=duration, default=3.0,
                       help="seconds each learner row is timed for (default 3; --quick: 0.1)")
    group.add_argument("--loop-batches", type=whole_number, nargs="*", default=[32],
                       help="batch sizes of the learner-loop rows; none to skip them (default 32)")
    group.add_argument("--loop-capacity", type=whole_number, default=2**15,
                       help="replay slots filled for the learner-loop rows (default 2^15)")


def check_devices(args: argparse.Namespace) -> None:
    """Raise ``ValueError`` (one line) for a ``--device`` or ``--replay-device`` this machine lacks
    (`vecdqn.staging.select_device`) or ``--torch-threads`` below 0."""
    from vecdqn.staging import select_device

    select_device(args.device, "--device")
    if args.replay_device:
        select_device(args.replay_device, "--replay-device")
    check_counts(args, "torch_threads", least=0)


def check_arguments(args: argparse.Namespace) -> None:
    """Raise ``ValueError`` (one line, naming the flag) for a batch size, env count or capacity
    below 1, a ``--learner-seconds`` of 0, or a device this machine lacks (`check_devices`)."""
    check_counts(args, "learner_batches", "num_envs", "loop_batches", "loop_capacity")
    check_durations(args, "learner_seconds")
    check_devices(args)


def torch_threads(args: argparse.Namespace) -> int:
    """``--torch-threads``, or the trainer's rule for ``--num-envs`` on ``--device`` when it is 0."""
    from vecdqn.staging import default_torch_threads, select_device

    return args.torch_threads or default_torch_threads(args.num_envs, device_type=select_device(args.device).type)


def random_batch(batch: int, rng: np.random.Generator, *, screen_size: int = 84, n_actions: int = 4,
                 gamma: float = 0.99):
    """A batch with the fields `DQNAgent.update` reads: ``obs, next_obs (B, 4, H, H) uint8``
    (``H = screen_size``), ``actions (B,) int64`` in ``0..n_actions-1``, ``rewards``,
    ``discounts`` (``gamma**3``), ``weights (B,) float32``."""
    from types import SimpleNamespace

    shape = (batch, 4, screen_size, screen_size)
    return SimpleNamespace(
        obs=rng.integers(0, 256, shape, dtype=np.uint8), next_obs=rng.integers(0, 256, shape, dtype=np.uint8),
        actions=rng.integers(0, n_actions, batch), rewards=rng.normal(size=batch).astype(np.float32),
        discounts=np.full(batch, gamma**3, np.float32), weights=np.ones(batch, np.float32),
    )


def learner_updates_per_second(batch: int, device: str, threads: int, *, dueling=True, double=True,
                               seconds: float = 3.0, compile: bool = False, amp: str = "off") -> float:
    """Updates per second over at least ``seconds`` of wall-clock time (and 3 updates), after
    warm-up updates (3 with ``compile``, for the graphs to be recorded), with ``threads`` torch
    intra-op threads."""
    import torch

    from vecdqn.dqn.agent import DQNAgent
    from vecdqn.staging import select_device, stage

    torch.set_num_threads(threads)
    agent = DQNAgent(4, (4, 84, 84), select_device(device), dueling=dueling, double=double, seed=0,
                     compile=compile, amp=amp)
    data = random_batch(batch, np.random.default_rng(0))
    for _ in range(3 if compile else 1):
        agent.update(stage(data, agent.device))
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds or count < 3:  # the host→device copy is timed too
        agent.update(stage(data, agent.device))
        count += 1
    return count / (time.perf_counter() - start)


def run(args: argparse.Namespace) -> list[Row]:
    """The section's rows: one per batch size, the median over ``--repeats`` measurements."""
    import torch

    from vecdqn.staging import select_device

    device = str(select_device(args.device))
    threads = torch_threads(args)
    seconds = args.learner_seconds
    rows: list[Row] = []
    for batch in args.learner_batches:
        print(f"timing DQNAgent.update at batch {batch} on {device} with {threads} thread(s) ...", flush=True)
        values = [learner_updates_per_second(batch, device, threads, seconds=seconds, compile=args.compile,
                                             amp=args.amp) for _ in range(args.repeats)]
        rows.append({"bench": "learner", "impl": "vecdqn", "batch_size": batch, "value": statistics.median(values),
                     "unit": "updates/s", "ratio": None, "anchor": None,
                     "note": f"{device}, {threads} torch thread(s), dueling double DQN{options_note(args)}"})
    for batch in args.loop_batches:
        rows += loop_rows(args, batch, device, threads, seconds)
    torch.set_num_threads(os.cpu_count() or 1)
    print()
    return rows
