"""``--actors``: agent steps/s reaching the replay, and learner updates/s, with 1, 2 and 4 Ray
actors (`vecdqn.distributed`) on Catch, next to the single-process trainer (the anchor).

Each impl is a real training run of ``--actors-steps`` agent steps after
``--actors-learning-starts``, timed from its first update (``learning_sps`` of the summary);
updates/s is the measured update count over the same time. One local Ray instance serves every
distributed run (its ~10 s start is not timed; each run's actors start within it). Needs the
ray extra; without it `check_arguments` refuses the section (benchmark.py: one line, exit code 2,
before any section runs).
"""

from __future__ import annotations

import argparse
import tempfile
import time

from vecdqn.benchmarks.harness import Row, interleaved
from vecdqn.cli import whole_number

__all__ = ["QUICK", "actor_counts", "add_arguments", "check_arguments", "run"]

# --quick: the smallest sizes, for a smoke run (the numbers mean little)
QUICK = {"actors_steps": 512, "actors_learning_starts": 256, "actors_counts": "1,2"}

ENV = "vecdqn/Catch-v0"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("--actors section")
    group.add_argument("--actors", action="store_true", help="benchmark distributed actors feeding the learner")
    group.add_argument("--actors-steps", type=whole_number, default=4096,
                       help="agent steps measured after learning starts (default 4096)")
    group.add_argument("--actors-learning-starts", type=whole_number, default=1024,
                       help="agent steps collected before the measured part (default 1024)")
    group.add_argument("--actors-counts", default="1,2,4", help="actor counts to compare (default 1,2,4)")
    group.add_argument("--actors-envs", type=whole_number, default=2,
                       help="envs per actor, and of the trainer (default 2)")


def actor_counts(text: str) -> list[int]:
    """``--actors-counts`` (``"1,2,4"``) as actor counts, each read as every count is
    (`vecdqn.cli.whole_number`).

    Raises:
        ValueError: one line naming the flag: a part that is not a whole number from 1 to 10**12.
    """
    try:
        counts = [whole_number(part.strip()) for part in str(text).split(",")]
    except argparse.ArgumentTypeError as err:
        raise ValueError(f"--actors-counts {text}: {err}") from None
    if min(counts) < 1:
        raise ValueError(f"--actors-counts {text}: each must be >= 1")
    return counts


def check_arguments(args: argparse.Namespace) -> None:
    """Raise ``ImportError`` (one line: what to install, `vecdqn.distributed.RAY_MISSING`) where
    Ray is not installed, or ``ValueError`` (one line) for ``--actors-counts`` that `actor_counts`
    refuses."""
    from vecdqn.distributed import require_ray

    require_ray()
    actor_counts(args.actors_counts)


def _flags(args: argparse.Namespace, log_dir: str, actors: int) -> list[str]:
    """The command line of one run: ``--actors-envs`` envs per actor, or for the trainer."""
    envs = ["--actors", str(actors), "--actor-envs", str(args.actors_envs)] if actors else [
        "--num-envs", str(args.actors_envs)]
    return ["--preset", "catch", "--log-dir", log_dir, "--total-steps",
            str(args.actors_learning_starts + args.actors_steps), "--learning-starts", str(args.actors_learning_starts),
            "--log-every", "100000", *envs]


def measure(args: argparse.Namespace, actors: int) -> tuple[float, float]:
    """``(agent steps/s, updates/s)`` of one run from its first update on (0 actors: `Trainer`)."""
    from vecdqn.cli import parse_args
    from vecdqn.trainer import Trainer

    with tempfile.TemporaryDirectory() as log_dir:
        config = parse_args(_flags(args, log_dir, actors))
        if actors:
            from vecdqn.distributed.learner import DistributedTrainer

            trainer = DistributedTrainer(config, progress=False, handle_signals=False)
        else:
            trainer = Trainer(config, progress=False, handle_signals=False)
        start = time.perf_counter()
        summary = trainer.run()
        elapsed = time.perf_counter() - start
    sps = summary["learning_sps"]
    learning_steps = summary["steps"] - config.learning_starts
    seconds = learning_steps / sps if sps > 0 else elapsed
    return sps, summary["updates"] / seconds


def run(args: argparse.Namespace) -> list[Row]:
    """The section's rows: one per actor count and the single-process trainer, each with its
    agent steps/s (ratio to the trainer) and updates/s. Needs Ray (`check_arguments`)."""
    import ray

    from vecdqn.distributed.pool import start_ray

    counts = actor_counts(args.actors_counts)
    print(f"timing {ENV} with 0 (trainer), {', '.join(map(str, counts))} actors x {args.actors_envs} envs "
          f"({args.actors_steps} agent steps after {args.actors_learning_starts}) ...", flush=True)
    owns = start_ray("", max(counts))
    updates: dict[str, list[float]] = {}

    def candidate(name: str, actors: int):
        def call() -> float:
            sps, ups = measure(args, actors)
            updates.setdefault(name, []).append(ups)
            return sps
        return call

    try:
        candidates = {"trainer": candidate("trainer", 0),
                      **{f"actors_{n}": candidate(f"actors_{n}", n) for n in counts}}
        result = interleaved(args.repeats, candidates, anchor="trainer")
    finally:
        if owns:
            ray.shutdown()
    rows: list[Row] = []
    for name, (value, ratio) in result.items():
        envs = args.actors_envs * (int(name.split("_")[1]) if name != "trainer" else 1)
        ups = sorted(updates[name])[len(updates[name]) // 2]
        rows.append({"bench": "actors", "impl": name, "num_envs": envs, "value": value, "unit": "steps/s",
                     "ratio": ratio, "anchor": "trainer", "note": f"{ups:.1f} updates/s", "updates_per_s": ups})
    print()
    return rows
