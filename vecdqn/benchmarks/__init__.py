"""Micro-benchmarks of vecdqn's hot paths, one module a section; ``scripts/benchmark.py`` is the
command line over them.

Sections: `env` (env pipelines), `replay` (the replay buffers), `learner` (`DQNAgent.update`),
`train` (end-to-end training), `pqn` (PQN end to end against its env pipeline), `actors`
(distributed actors feeding the learner), `soak` (a long run watched for leaks), `update` (one
update at a preset's network size, per threads x amp x compile), `estimate` (a preset's agent
steps/s on this machine and the minutes to its published result). Each has
``add_arguments(parser)`` (its flags, the section's own ``--<name>`` among them),
``run(args) -> list[Row]`` and ``QUICK``, the sizes of ``--quick``.
`loop` holds the learner-loop rows of `learner`; `harness` what the sections share; `baselines`
the reference implementations they measure against.

Method: every measured row is the median over ``--repeats`` rounds; within a round the
implementations run one after another (interleaved), so a slow spell of a shared machine hits
all of them, and each row's ``ratio`` is the median of its per-round ``value / anchor value``
(for times, below 1 is faster than the anchor). Timings are wall-clock ``time.perf_counter``
means over a block of calls, after one untimed warm-up call.

Output: a printed table and, with ``--json PATH``, a list of rows
``{"bench", "impl", "batch_size", "value", "unit", "ratio", ...}`` (extra keys: ``op``,
``capacity``, ``anchor``, ``num_envs``, ``note``, ``bound``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from vecdqn.benchmarks import actors, env, estimate, learner, pqn, replay, soak, train, update
from vecdqn.benchmarks.harness import Row, print_table, write_json

__all__ = ["QUICK", "SECTIONS", "Row", "run_sections"]

# name -> its module, in the order sections run
SECTIONS = {
    "env": env, "replay": replay, "learner": learner, "train": train, "pqn": pqn, "actors": actors, "soak": soak,
    "update": update, "estimate": estimate,
}

# --quick: every section's smallest sizes, and one round
QUICK = {"repeats": 1, **env.QUICK, **replay.QUICK, **learner.QUICK, **train.QUICK, **pqn.QUICK, **actors.QUICK,
         **soak.QUICK, **update.QUICK, **estimate.QUICK}


def run_sections(args: argparse.Namespace, names: list[str], json_path: Path | None = None) -> list[Row]:
    """Run the named sections in turn, print the table of all their rows and, with
    ``json_path``, write the rows there as JSON; return the rows."""
    rows: list[Row] = []
    for name in names:
        rows += SECTIONS[name].run(args)
    print_table(rows)
    if json_path is not None:
        write_json(rows, json_path)
    return rows
