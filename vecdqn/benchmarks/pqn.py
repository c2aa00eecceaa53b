"""``--pqn``: PQN end to end against the env pipeline alone, at the same number of envs.

Impls: ``env_only`` (the anchor: `vecdqn.envs.make_vector_env` on Pong at the ``pong-pqn``
preset's preprocessing, 44 px, uniformly random actions) and ``pqn`` (the real trainer with the
``pong-pqn`` preset, agent steps/s counted from its first update), both with ``--pqn-envs`` envs
(default: the preset's). The ratio is the share of the pipeline's rate that the learner leaves:
1 would be a learner that costs nothing.
"""

from __future__ import annotations

import argparse
import os
import tempfile

import numpy as np

from vecdqn.benchmarks.env import env_steps_per_second
from vecdqn.benchmarks.harness import Row, check_train_options, interleaved
from vecdqn.cli import whole_number
from vecdqn.presets import PRESETS

__all__ = ["PONG_ID", "QUICK", "add_arguments", "check_arguments", "run"]

PONG_ID = "PongNoFrameskip-v4"

# --quick: the smallest sizes, for a smoke run (the numbers mean little)
QUICK = {"pqn_envs": 8, "pqn_steps": 1024}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("--pqn section")
    group.add_argument("--pqn", action="store_true", help="benchmark PQN end to end against the env pipeline alone")
    group.add_argument("--pqn-envs", type=whole_number, default=PRESETS["pong-pqn"]["num_envs"],
                       help="envs of both rows; the preset's rollout length stays (default: the pong-pqn "
                            "preset's, %(default)s)")
    group.add_argument("--pqn-steps", type=whole_number, default=40_000,
                       help="agent steps of each measured PQN run and env-only block (default 40000: ten "
                            "rollouts of the preset's 128 envs x 32 steps)")
    group.add_argument("--pqn-options", default="",
                       help="more train.py options for the PQN runs, e.g. '--amp bf16 --epochs 4' (default none)")


def check_arguments(args: argparse.Namespace) -> None:
    """Raise ``ValueError`` (one line) for ``--pqn-envs`` below 1, ``--pqn-options`` that
    ``train.py`` refuses, or ``--pqn-steps`` shorter than two rollouts (the rate is counted from
    the first update, which ends the first rollout)."""
    if args.pqn_envs < 1:
        raise ValueError(f"--pqn-envs {args.pqn_envs} must be >= 1")
    words = check_train_options("--pqn-options", args.pqn_options, "pong-pqn")
    rollout_steps = _config(args, os.devnull, words).rollout_steps
    rollout = rollout_steps * args.pqn_envs
    if args.pqn_steps < 2 * rollout:
        raise ValueError(f"--pqn-steps {args.pqn_steps} is shorter than two rollouts of --rollout-steps "
                         f"{rollout_steps} x --pqn-envs {args.pqn_envs} = {rollout} agent steps, and the rate is "
                         f"counted from the first update; use at least {2 * rollout}")


def pqn_sps(args: argparse.Namespace) -> float:
    """Agent steps/s of ``train.py --preset pong-pqn`` with ``--pqn-envs`` envs, from its first update."""
    from vecdqn.trainer import Trainer

    with tempfile.TemporaryDirectory() as log_dir:
        return Trainer(_config(args, log_dir), progress=False, handle_signals=False).run()["learning_sps"]


def _config(args: argparse.Namespace, log_dir: str, words: list[str] | None = None):
    """The `pong-pqn` run's `Config` with ``--pqn-envs`` envs and ``--pqn-options`` (``words``: the
    options already split)."""
    import shlex

    from vecdqn.cli import parse_config

    words = shlex.split(args.pqn_options) if words is None else words
    return parse_config(["--preset", "pong-pqn", "--num-envs", str(args.pqn_envs), "--total-steps",
                         str(args.pqn_steps), "--log-dir", log_dir, "--checkpoint-every", "0", "--no-keep-checkpoints",
                         *words], validate=False)[0]


def env_only_sps(args: argparse.Namespace) -> float:
    """Agent steps/s of the same vector env (Pong, 44 px, ``--pqn-envs`` envs) under random actions."""
    from vecdqn.envs import make_vector_env

    k = _config(args, os.devnull).envs_per_worker_on(os.cpu_count() or 1)  # as the PQN run splits them
    envs = make_vector_env(PONG_ID, args.pqn_envs, screen_size=PRESETS["pong-pqn"]["screen_size"], envs_per_worker=k)
    try:
        envs.reset(seed=0)
        return env_steps_per_second(envs, args.pqn_envs, args.pqn_steps, np.random.default_rng(1))
    finally:
        envs.close()


def run(args: argparse.Namespace) -> list[Row]:
    """The section's rows: ``env_only`` and ``pqn`` at ``--pqn-envs`` envs."""
    print(f"timing PQN end to end and the env pipeline alone with {args.pqn_envs} envs ({args.pqn_steps} agent "
          "steps each) ...", flush=True)
    result = interleaved(args.repeats, {"env_only": lambda: env_only_sps(args), "pqn": lambda: pqn_sps(args)},
                         anchor="env_only")
    rows = [{"bench": "pqn", "impl": name, "num_envs": args.pqn_envs, "value": value, "unit": "steps/s",
             "ratio": ratio, "anchor": "env_only", "note": args.pqn_options or None}
            for name, (value, ratio) in result.items()]
    print()
    return rows
