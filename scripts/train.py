#!/usr/bin/env python
"""Train a DQN agent on an Atari game: ``python scripts/train.py --help`` lists every option.

Example (a short CPU run)::

    python scripts/train.py --total-steps 50000 --num-envs 4 --buffer-size 50000 --learning-starts 5000
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run from a source checkout without installing: make the package importable.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from vecdqn.config import parse_args  # noqa: E402
from vecdqn.trainer import Trainer  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    config = parse_args(argv)
    summary = Trainer(config).run()
    print(
        f"done: {summary['steps']} agent steps, {summary['updates']} updates, {summary['episodes']} games, "
        f"mean return (last 100) {summary['mean_return']:.2f}, {summary['sps']:.0f} agent steps/s\n"
        f"run folder: {summary['run_dir']}\ncheckpoint: {summary['checkpoint']}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
