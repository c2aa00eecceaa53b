"""``--soak``: a long Catch run that watches memory and open files for leaks.

After the replay is full (its memory then stops growing by design), every ``--soak-every``
agent steps the run samples the resident memory (RSS) of the trainer process plus its env
workers, and the open file descriptors of the same processes. A leak in the workers, the
TensorBoard writer, the checkpoints or the evaluation videos shows as RSS that keeps growing or
descriptors that keep counting up. Rows: one per sample, ``value`` the RSS in MiB, ``note`` the
descriptors; the last row's ``ratio`` is the largest RSS over the first.
"""

from __future__ import annotations

import argparse
import re
import tempfile
from dataclasses import dataclass, field

from vecdqn.benchmarks.harness import Row, check_counts
from vecdqn.cli import whole_number

__all__ = ["LEARNING_STARTS", "QUICK", "Sampler", "SoakSample", "add_arguments", "check_arguments", "flags",
           "least_buffer", "run", "soak"]

# --quick: a short run (the numbers mean little)
QUICK = {"soak_steps": 4_000, "soak_every": 1_000, "soak_buffer": 1_000}

# The agent step of the run's first update.
LEARNING_STARTS = 1_000


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("--soak section")
    group.add_argument("--soak", action="store_true", help="a long Catch run, sampling RSS and open files")
    group.add_argument("--soak-steps", type=whole_number, default=200_000,
                       help="agent steps of the run (default 200000)")
    group.add_argument("--soak-every", type=whole_number, default=10_000,
                       help="sample every this many agent steps once the replay is full (default 10000)")
    group.add_argument("--soak-buffer", type=whole_number, default=10_000, help="replay capacity (default 10000)")


def check_arguments(args: argparse.Namespace) -> None:
    """Raise ``ValueError`` (one line, naming the flag) for ``--soak-every`` below 1, a
    ``--soak-buffer`` below what the run's replay needs (`least_buffer`), or ``--soak-steps`` that
    end before the first sample (at twice ``--soak-buffer``) or before learning starts; checked in
    benchmark.py's options, before the run's train config is built."""
    check_counts(args, "soak_every")
    steps, buffer = args.soak_steps, args.soak_buffer
    least, why = least_buffer()
    if buffer < least:
        raise ValueError(f"--soak-buffer {buffer} must be >= {least}: the soak run's replay holds {why}")
    if steps < max(2 * buffer, LEARNING_STARTS):
        raise ValueError(f"--soak-steps {steps} must be >= {max(2 * buffer, LEARNING_STARTS)}: the run learns from "
                         f"agent step {LEARNING_STARTS} and samples from agent step {2 * buffer}, twice --soak-buffer "
                         f"{buffer} (the replay is then full)")
    from vecdqn.cli import parse_config

    try:  # anything else train.py would refuse (nothing, while the checks above match its own), in one line
        parse_config(flags(steps, buffer, "runs"))
    except ValueError as err:  # its pointer to train.py's --help goes: the line ends with benchmark.py's
        said = re.sub(r" [(]see [^ ]+ --help[)]$", "", str(err))
        raise ValueError(f"--soak-steps {steps} --soak-buffer {buffer}: the soak run cannot start: {said}") from None


def least_buffer() -> tuple[int, str]:
    """``(the least --soak-buffer, what it holds)``: one batch, and on each env's ring two frame
    stacks and an n-step return (`vecdqn.learners`' rule for ``--buffer-size``)."""
    from vecdqn.cli import parse_config

    config, _ = parse_config(flags(LEARNING_STARTS, 10**6, "runs"), validate=False)
    envs, _ = config.env_workers()
    ring = 2 * config.frame_stack + config.n_step
    return (max(config.batch_size, envs * ring),
            f"a batch of {config.batch_size} transitions and {ring} slots for each of its {envs} envs")


def flags(steps: int, buffer_size: int, log_dir: str) -> list[str]:
    """``train.py``'s options for the soak run: Catch for ``steps`` agent steps with a replay of
    ``buffer_size`` (see `soak`); an evaluation and a checkpoint every 20,000 agent steps, at the
    end of a shorter run."""
    every = str(min(20_000, steps))
    return [
        "--preset", "catch", "--total-steps", str(steps), "--buffer-size", str(buffer_size),
        "--learning-starts", str(LEARNING_STARTS), "--train-frequency", "16", "--hidden-size", "32",
        "--eval-every", every, "--eval-episodes", "2", "--checkpoint-every", every, "--log-every", "5000",
        "--log-dir", log_dir, "--run-name", "soak",
    ]


@dataclass
class SoakSample:
    """One sample: agent step, RSS in bytes and open descriptors of the trainer and its workers."""

    step: int
    rss: int
    fds: int
    processes: int


@dataclass
class Sampler:
    """Takes a `SoakSample` every ``every`` agent steps from agent step ``start`` on."""

    every: int
    start: int
    samples: list[SoakSample] = field(default_factory=list)

    def maybe_sample(self, step: int) -> None:
        if step < self.start or (self.samples and step < self.samples[-1].step + self.every):
            return
        import psutil

        main = psutil.Process()
        processes = [main, *main.children(recursive=True)]
        rss = fds = 0
        for p in processes:
            try:
                rss += p.memory_info().rss
                fds += p.num_fds()
            except psutil.NoSuchProcess:
                continue
        self.samples.append(SoakSample(step, rss, fds, len(processes)))


def soak(steps: int, every: int, buffer_size: int, log_dir: str) -> list[SoakSample]:
    """Train Catch for ``steps`` agent steps (4 envs, evaluation with a video and a checkpoint
    every 20,000 steps) and sample from the first step at which the replay is full.

    The learner is kept light (one small update every 16 agent steps): the point is the
    pipeline's memory and files over many steps, not learning.
    """
    from vecdqn.cli import parse_args
    from vecdqn.trainer import Trainer

    config = parse_args(flags(steps, buffer_size, log_dir))
    # The replay holds buffer_size frame slots: full after about that many agent steps.
    sampler = Sampler(every, start=2 * buffer_size)
    Trainer(config, progress=False, handle_signals=False,
            on_step=lambda trainer: sampler.maybe_sample(trainer.core.state.step)).run()
    return sampler.samples


def run(args: argparse.Namespace) -> list[Row]:
    with tempfile.TemporaryDirectory() as log_dir:
        samples = soak(args.soak_steps, args.soak_every, args.soak_buffer, log_dir)
    first = samples[0].rss
    rows = []
    for s in samples:
        rows.append({"bench": "soak", "impl": "vecdqn", "op": f"step {s.step}", "value": round(s.rss / 2**20, 1),
                     "unit": "MiB RSS", "ratio": round(s.rss / first, 4),
                     "note": f"{s.fds} open files in {s.processes} processes"})
    return rows
