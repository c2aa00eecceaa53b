"""``--update``: the cost of one learner update (`DQNAgent.update`, dueling double DQN) at a
preset's network size, for each combination of torch threads, ``--amp`` and ``--compile``.

This is the number a CPU run waits for: with one update per agent step it bounds the agent
steps per second. Every variant is timed in each round (see `harness.interleaved`), so the
``ratio`` column compares them on the same machine state; the anchor is the first variant
(the first thread count, fp32, eager). ``--overlap-forward`` variants (``overlap``) run the
next-observation passes on a second thread (see `vecdqn.dqn.agent`); they are not combined with
``--compile``, which the trainer refuses with it (lists that leave no variant, ``--update-compile
on --update-overlap on``, are refused before anything runs).
"""

from __future__ import annotations

import argparse
import itertools
import time
from collections.abc import Callable

import numpy as np

from vecdqn.benchmarks.harness import Row, check_counts, check_durations, interleaved
from vecdqn.benchmarks.learner import random_batch
from vecdqn.cli import duration, whole_number

__all__ = ["QUICK", "add_arguments", "check_arguments", "run", "update_timer", "variants"]

# --quick: one short timing per variant (the numbers mean little)
QUICK = {"update_seconds": 0.1, "update_threads": [1], "update_amp": ["off"], "update_compile": ["off"],
         "update_overlap": ["off"]}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("--update section")
    group.add_argument("--update", action="store_true",
                       help="time one learner update at a preset's network size, per threads x amp x compile")
    from vecdqn.presets import PRESETS
    from vecdqn.staging import AMP_DTYPES

    group.add_argument("--update-preset", default="pong", choices=list(PRESETS),
                       help="preset whose env (for the number of actions), screen size, hidden size and batch "
                            "size give the network and batch (default pong)")
    group.add_argument("--update-threads", type=whole_number, nargs="+", default=[1, 2],
                       help="torch intra-op thread counts (default 1 2)")
    group.add_argument("--update-amp", nargs="+", choices=list(AMP_DTYPES), default=list(AMP_DTYPES),
                       help="autocast variants (default off bf16)")
    group.add_argument("--update-compile", nargs="+", choices=["off", "on"], default=["off", "on"],
                       help="torch.compile variants (default off on)")
    group.add_argument("--update-overlap", nargs="+", choices=["off", "on"], default=["off"],
                       help="--overlap-forward variants (default off; 'off on' times both; never with compile)")
    group.add_argument("--update-batch-sizes", type=whole_number, nargs="+", default=None, metavar="B",
                       help="batch sizes to time, in transitions per update (default: the preset's); the note gives "
                            "ms per sampled transition, to compare a batch of 2B every 2 agent steps with B "
                            "every agent step")
    group.add_argument("--update-seconds", type=duration, default=3.0,
                       help="seconds each variant is timed for in each round (default 3)")


def check_arguments(args: argparse.Namespace) -> None:
    """Raise ``ValueError`` (one line, naming the flag) for a thread count below 1 or above
    `vecdqn.staging.MAX_TORCH_THREADS`, a batch size below 1, an ``--update-seconds`` of 0, or
    variants that leave none to time (``--update-compile on`` with ``--update-overlap on``), before
    any variant is built."""
    check_counts(args, "update_threads", "update_batch_sizes")
    check_durations(args, "update_seconds")
    from vecdqn.staging import MAX_TORCH_THREADS

    if max(args.update_threads) > MAX_TORCH_THREADS:
        raise ValueError(f"--update-threads {' '.join(map(str, args.update_threads))}: each must be <= "
                         f"{MAX_TORCH_THREADS}")
    if not variants(args, [1]):  # none at any batch size
        raise ValueError(f"--update-compile {' '.join(args.update_compile)} with --update-overlap "
                         f"{' '.join(args.update_overlap)} leaves no variant to time: overlap is never combined with "
                         "compile (the trainer refuses --overlap-forward with --compile); add off to one of them")


def variants(args: argparse.Namespace, batch_sizes: list[int]) -> list[tuple[int, int, str, bool, bool]]:
    """``(batch, threads, amp, compile, overlap)`` of each variant to time, in order: every
    combination of ``batch_sizes`` and the ``--update-*`` lists but compile with overlap."""
    return [(batch, threads, amp, compiled == "on", overlap == "on") for batch, threads, amp, compiled, overlap in
            itertools.product(batch_sizes, args.update_threads, args.update_amp, args.update_compile,
                              args.update_overlap) if not (compiled == "on" and overlap == "on")]


def update_timer(n_actions: int, screen_size: int, hidden_size: int, batch: int, threads: int, amp: str,
                 compile: bool, seconds: float, overlap: bool = False) -> Callable[[], float]:
    """A candidate for `harness.interleaved`: builds the agent and one staged random batch
    (``(B, 4, H, H) uint8`` frames) on first call, warms it up (compiling, if asked), then on
    every call returns the mean milliseconds per update over at least ``seconds``."""
    import torch

    from vecdqn.dqn.agent import DQNAgent
    from vecdqn.staging import stage

    state: dict = {}

    def measure() -> float:
        torch.set_num_threads(threads)
        if not state:
            agent = DQNAgent(n_actions, (4, screen_size, screen_size), torch.device("cpu"), hidden_size=hidden_size,
                             seed=0, compile=compile, amp=amp, overlap_forward=overlap)
            data = random_batch(batch, np.random.default_rng(0), screen_size=screen_size, n_actions=n_actions,
                                gamma=0.98)
            state["agent"], state["batch"] = agent, stage(data, agent.device)
            for _ in range(10):  # compile (if asked) and settle the allocator outside the timing
                agent.update(state["batch"])
        agent, staged = state["agent"], state["batch"]
        count, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds or count < 3:
            agent.update(staged)
            count += 1
        return (time.perf_counter() - start) / count * 1e3

    return measure


def run(args: argparse.Namespace) -> list[Row]:
    """One row per variant: median ms per update over ``--repeats`` rounds, and its ratio to
    the first variant."""
    import torch

    from vecdqn.config import Config
    from vecdqn.preflight import check_env_starts
    from vecdqn.presets import PRESETS

    config = Config(**PRESETS[args.update_preset])
    batch_sizes = args.update_batch_sizes or [config.batch_size]
    n_actions = check_env_starts(config)
    seconds = args.update_seconds
    timers, batch_of = {}, {}
    for batch, threads, amp, compiled, overlap in variants(args, batch_sizes):
        name = f"{threads} thread{'s' if threads > 1 else ''}, {'bf16' if amp == 'bf16' else 'fp32'}" + (
            ", compile" if compiled else "") + (", overlap" if overlap else "") + (
            f", batch {batch}" if len(batch_sizes) > 1 else "")
        timers[name], batch_of[name] = update_timer(n_actions, config.screen_size, config.hidden_size, batch,
                                                    threads, amp, compiled, seconds, overlap), batch
    print(f"timing DQNAgent.update for --preset {args.update_preset} ({config.screen_size} px, "
          f"{config.hidden_size} hidden, {n_actions} actions, batch {', '.join(map(str, batch_sizes))}): "
          f"{len(timers)} variants x {args.repeats} rounds ...", flush=True)
    anchor = next(iter(timers))
    results = interleaved(args.repeats, timers, anchor)
    torch.set_num_threads(max(args.update_threads))
    return [{"bench": "update", "op": name, "impl": "vecdqn", "batch_size": batch_of[name], "value": value,
             "unit": "ms/update", "ratio": ratio, "anchor": anchor,
             "note": f"--preset {args.update_preset}: {config.screen_size} px, {config.hidden_size} hidden, cpu; "
                     f"{value / batch_of[name]:.3f} ms per sampled transition"}
            for name, (value, ratio) in results.items()]
