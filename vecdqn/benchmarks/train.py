"""``--train``: end-to-end agent steps/s of the real trainer once learning has started, against
the textbook one-env loop (`vecdqn.benchmarks.baselines.SingleEnvLoop`, the anchor).

Impls: ``vecdqn`` (the trainer's defaults), ``vecdqn_plain`` (the trainer as plain DQN:
`PLAIN_DQN`, the baseline's algorithm) and ``single_env_loop``. Beside them, what bounds a
pipeline: ``env_only`` (the vector env alone) and ``learner_only_*`` (`DQNAgent.update` alone at
batch 32); each trainer row's note compares it with ``min(env-only, learner-only × 4)``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

from vecdqn.benchmarks.baselines import SingleEnvLoop
from vecdqn.benchmarks.env import env_steps_per_second
from vecdqn.benchmarks.harness import ENV_ID, Row, check_counts, interleaved
from vecdqn.benchmarks.learner import check_devices, learner_updates_per_second, torch_threads
from vecdqn.cli import whole_number

__all__ = ["PLAIN_DQN", "QUICK", "add_arguments", "check_arguments", "run", "single_loop_sps",
           "trainer_learning_sps"]

# --quick: the smallest sizes, for a smoke run (the numbers mean little)
QUICK = {"train_steps": 64, "train_learning_starts": 64, "num_envs": 2}

# The trainer configured as the single-env loop's algorithm: 1-step DQN, uniform replay, no
# dueling, one batch-32 update every 4 agent steps.
PLAIN_DQN = ["--no-dueling", "--no-double", "--no-per", "--n-step", "1", "--train-frequency", "4", "--batch-size", "32"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("--train section")
    group.add_argument("--train", action="store_true", help="benchmark end-to-end training")
    group.add_argument("--train-steps", type=whole_number, default=2000,
                       help="agent steps measured after learning starts (default 2000)")
    group.add_argument("--train-learning-starts", type=whole_number, default=2000,
                       help="agent steps collected before the measured part (default 2000)")


def check_arguments(args: argparse.Namespace) -> None:
    """Raise ``ValueError`` (one line, naming the flag) for ``--train-steps``, ``--num-envs`` or
    ``--env-steps`` below 1, ``--train-learning-starts`` below 0, or a device this machine lacks."""
    check_counts(args, "train_steps", "num_envs", "env_steps")
    check_counts(args, "train_learning_starts", least=0)
    check_devices(args)


def trainer_learning_sps(args: argparse.Namespace, extra: list[str]) -> float:
    """Agent steps/s of the real trainer, counted from its first update (``extra``: more
    trainer flags)."""
    import tempfile

    from vecdqn.cli import parse_args
    from vecdqn.trainer import Trainer

    with tempfile.TemporaryDirectory() as log_dir:
        config = parse_args([
            "--num-envs", str(args.num_envs), "--total-steps", str(args.train_learning_starts + args.train_steps),
            "--learning-starts", str(args.train_learning_starts), "--buffer-size", "20000", "--log-dir", log_dir,
            "--eval-every", "0", "--checkpoint-every", "0", "--log-every", "1000",
            "--torch-threads", str(torch_threads(args)), *extra,
        ])
        summary = Trainer(config, progress=False, handle_signals=False).run()
    return summary["learning_sps"]


def single_loop_sps(args: argparse.Namespace) -> float:
    """Agent steps/s of `SingleEnvLoop` over ``--train-steps`` after ``--train-learning-starts``."""
    loop = SingleEnvLoop(args.train_learning_starts)
    loop.run(args.train_learning_starts)
    start = time.perf_counter()
    loop.run(args.train_steps)
    return args.train_steps / (time.perf_counter() - start)


def _bounds(args: argparse.Namespace, threads: int) -> tuple[dict[str, float], float]:
    """``({impl: learner-only updates/s at batch 32}, env-only agent steps/s)``, medians over
    ``--repeats``."""
    from vecdqn.envs import make_vector_env

    seconds = 0.1 if args.quick else 2.0
    learner = {name: statistics.median(learner_updates_per_second(32, args.device, threads, dueling=d, double=d,
                                                                   seconds=seconds) for _ in range(args.repeats))
               for name, d in (("vecdqn", True), ("vecdqn_plain", False))}
    from vecdqn.config import Config

    k = Config(num_envs=args.num_envs).envs_per_worker_on(os.cpu_count() or 1)  # as the trainer splits them
    envs = make_vector_env(ENV_ID, args.num_envs, envs_per_worker=k)
    try:
        envs.reset(seed=0)
        rng = np.random.default_rng(1)
        env_only = statistics.median(env_steps_per_second(envs, args.num_envs, args.env_steps, rng)
                                     for _ in range(args.repeats))
    finally:
        envs.close()
    return learner, env_only


def run(args: argparse.Namespace) -> list[Row]:
    """The section's rows: the three impls, then env-only and learner-only."""
    rows: list[Row] = []
    print(f"timing end-to-end training with {args.num_envs} envs ({args.train_steps} agent steps after "
          f"{args.train_learning_starts}) ...", flush=True)
    candidates = {
        "vecdqn": lambda: trainer_learning_sps(args, []),
        "vecdqn_plain": lambda: trainer_learning_sps(args, PLAIN_DQN),
        "single_env_loop": lambda: single_loop_sps(args),
    }
    if args.replay_device:  # the defaults with the frames' copy on that device
        candidates[f"vecdqn_replay_{args.replay_device}"] = lambda: trainer_learning_sps(
            args, ["--replay-device", args.replay_device])
    result = interleaved(args.repeats, candidates, anchor="single_env_loop")
    threads = torch_threads(args)
    learner, env_only = _bounds(args, threads)
    for name, (value, ratio) in result.items():
        row = {"bench": "train", "impl": name, "num_envs": 1 if name == "single_env_loop" else args.num_envs,
               "value": value, "unit": "steps/s", "ratio": ratio, "anchor": "single_env_loop"}
        learner_name = "vecdqn" if name.startswith("vecdqn_replay_") else name
        if learner_name in learner:
            rate = learner[learner_name]
            bound = min(env_only, rate * 4)
            row["note"] = (f"env-only {env_only:,.0f} steps/s, learner-only {rate:.1f} updates/s x 4 = "
                           f"{rate * 4:.0f} steps/s; {value / bound:.2f} of min")
            row["bound"] = bound
        rows.append(row)
    rows.append({"bench": "train", "impl": "env_only", "num_envs": args.num_envs, "value": env_only,
                 "unit": "steps/s", "ratio": None, "anchor": None})
    for name, value in learner.items():
        rows.append({"bench": "train", "impl": f"learner_only_{name}", "batch_size": 32, "value": value,
                     "unit": "updates/s", "ratio": None, "anchor": None, "note": f"{threads} torch thread(s)"})
    print()
    return rows
