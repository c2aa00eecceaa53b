"""Micro-benchmarks of vecdqn's hot paths, one module a section; ``scripts/benchmark.py`` is the
command line over them.

Sections: `env` (env pipelines), `replay` (the replay buffers), `learner` (`DQNAgent.update`),
`train` (end-to-end training), `pqn` (PQN end to end against its env pipeline), `actors`
(distributed actors feeding the learner), `soak` (a long run watched for leaks), `update` (one
update at a preset's network size, per threads x amp x compile), `estimate` (a preset's agent
steps/s on this machine and the minutes to its published result). Each has
``add_arguments(parser)`` (its flags, the section's own ``--<name>`` among them),
``run(args) -> list[Row]`` and ``QUICK``, the sizes of ``--quick``. `option_sections` says which
sections read each option: its own section's, and those of `SHARED`.
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

__all__ = ["QUICK", "SECTIONS", "SHARED", "Row", "option_sections", "run_sections", "sections_said"]

# name -> its module, in the order sections run
SECTIONS = {
    "env": env, "replay": replay, "learner": learner, "train": train, "pqn": pqn, "actors": actors, "soak": soak,
    "update": update, "estimate": estimate,
}

# --quick: every section's smallest sizes, and one round
QUICK = {"repeats": 1, **env.QUICK, **replay.QUICK, **learner.QUICK, **train.QUICK, **pqn.QUICK, **actors.QUICK,
         **soak.QUICK, **update.QUICK, **estimate.QUICK}

# Options that sections other than their own read (their argparse names -> those sections), and
# ``--repeats``, which is no section's own: every section but soak and estimate (one run each).
SHARED: dict[str, tuple[str, ...]] = {
    "repeats": ("env", "replay", "learner", "train", "pqn", "actors", "update"),
    "env_id": ("estimate",), "env_steps": ("train",),
    "num_envs": ("train",), "device": ("train",), "torch_threads": ("train",), "replay_device": ("train",),
}


def option_sections() -> dict[str, tuple[str, ...]]:
    """``{option's argparse name: the sections that read it}``, in `SECTIONS` order: each section's
    own options (those its ``add_arguments`` adds) and `SHARED`. An option missing here (``--json``,
    ``--quick``) applies to every section."""
    owners: dict[str, list[str]] = {dest: list(names) for dest, names in SHARED.items()}
    for name, module in SECTIONS.items():
        parser = argparse.ArgumentParser(add_help=False)
        module.add_arguments(parser)
        for dest in vars(parser.parse_args([])):
            owners.setdefault(dest, []).append(name)
    return {dest: tuple(sorted(names, key=list(SECTIONS).index)) for dest, names in owners.items()}


def sections_said(names: list[str] | tuple[str, ...]) -> str:
    """The sections' flags as a phrase: ``"--env"``, ``"--learner and --train"``, ``"--env, --replay and --pqn"``."""
    flags = [f"--{name}" for name in names]
    return flags[0] if len(flags) == 1 else f"{', '.join(flags[:-1])} and {flags[-1]}"


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
