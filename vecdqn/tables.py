"""Markdown tables of runs, one per setting, in the shape of ``docs/results.md``.

A setting is the runs that differ only in their seed (`vecdqn.curves.seed_groups`). Each gets a
line naming it and its runs, then a table with one row per agent step: every step at which any of
its seeds was evaluated (``eval/return_mean``, from the run or its ``checkpoint-evals/``), or, for a
setting without evaluations, every ``every`` agent steps and each seed's last step. Per seed the
row gives the minutes at which the seed reached the step, its training return (mean of the last
`RunCurves.window` games), and its evaluation; two more columns give the mean and the range
(min to max) over the seeds of the evaluation (of the training return where there is no
evaluation), on the rows where every seed has a value. With a threshold, a second table gives per
seed the first agent step and minute at which the evaluation (or, without evaluations, the
training return over a full window of games) reaches it; in the first table that seed's first
evaluation at or above it is bold.

Minutes are those of `vecdqn.curves`: of training, since the run's first event less the pauses
between a stop and its resume. An evaluation of a kept
checkpoint stands at the minute the checkpoint was saved; an evaluation during training at the
minute it was logged, once its games were played.

Numbers: agent steps with thousands separators (``325,000``); minutes with one decimal; returns
signed, with the minus sign ``−`` (U+2212) and none on a value that rounds to zero, the training
return with two decimals and the evaluation with one; ``—`` where there is no value.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import numpy as np

from vecdqn.curves import Crossing, RunCurves, first_reaching, report, round_steps, seed_groups

__all__ = ["markdown", "setting_table", "signed"]

MINUS = "\N{MINUS SIGN}"
NONE = "\N{EM DASH}"
# Rows of a table without evaluations when --every is not given: about this many.
ROWS = 10


def signed(value: float, digits: int) -> str:
    """``value`` with ``digits`` decimals and its sign: ``+0.8``, ``−20.42``; ``0.0`` without a
    sign where it rounds to zero; ``—`` for NaN."""
    if math.isnan(value):
        return NONE
    text = f"{abs(value):.{digits}f}"
    if float(text) == 0:
        return text
    return ("+" if value > 0 else MINUS) + text


def _minutes(value: float) -> str:
    return NONE if math.isnan(value) else f"{value:.1f}"


def _row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    return [_row(header), "|" + "---|" * len(header), *(_row(r) for r in rows)]


def _names(runs: Sequence[RunCurves]) -> list[str]:
    """Each run's column name: ``seed N``, or its folder's name where the seeds do not tell the
    runs apart (a run without a config, two runs of one seed)."""
    seeds = [None if run.config is None else run.config.get("seed") for run in runs]
    if None not in seeds and len(set(seeds)) == len(seeds):
        return [f"seed {seed}" for seed in seeds]
    return [run.path.name for run in runs]


def _heading(runs: Sequence[RunCurves], label: str, names: Sequence[str]) -> str:
    config = runs[0].config or {}
    algo = f", algo {config['algo']}" if config.get("algo") else ""
    seeds = all(name.startswith("seed ") for name in names)
    count = f"{len(runs)} seeds" if len(runs) > 1 and seeds else f"{len(runs)} run" + "s" * (len(runs) > 1)
    members = ", ".join(f"{name} `{run.path}`" if name != run.path.name else f"`{run.path}`"
                        for name, run in zip(names, runs))
    return (f"**{label}**{algo}, {count}: {members}; training: mean return of the last {runs[0].window} games.")


def _steps(runs: Sequence[RunCurves], every: int | None) -> tuple[np.ndarray, bool]:
    """The table's agent steps, and whether they are evaluations."""
    if any(len(run.evals.steps) for run in runs):
        return functools.reduce(np.union1d, [run.evals.steps for run in runs]).astype(np.int64), True
    every = every or round_steps(max(run.last_step for run in runs) / ROWS)
    rows = [report(run, every)["steps"] for run in runs]
    return functools.reduce(np.union1d, rows).astype(np.int64), False


def _columns(run: RunCurves, steps: np.ndarray, evaluated: bool) -> tuple[np.ndarray, ...]:
    """One seed's ``minutes``, ``training`` and ``evaluation`` at ``steps (K,)``, each ``(K,)
    float64``, NaN where the seed has no value (no evaluation at that step, or past its last)."""
    if evaluated:
        has = np.isin(steps, run.evals.steps)
        at = np.searchsorted(run.evals.steps, steps[has])
        minutes, evaluation = np.full(len(steps), np.nan), np.full(len(steps), np.nan)
        minutes[has], evaluation[has] = run.evals.minutes[at], run.evals.values[at]
    else:
        has = steps <= run.last_step
        minutes, evaluation = np.where(has, run.minutes_at(steps), np.nan), np.full(len(steps), np.nan)
    return minutes, np.where(has, run.train_return_at(steps), np.nan), evaluation


def _crossing(run: RunCurves, threshold: float, evaluated: bool) -> tuple[Crossing | None, Crossing | None]:
    """``(first point at or above threshold, best point)`` of the seed's evaluations, or of its
    training return over full windows of games; ``(None, None)`` where it has no such points."""
    curve, skip = (run.evals, 0) if evaluated else (run.train, run.window - 1)
    if len(curve.values) <= skip:
        return None, None
    best = skip + int(np.argmax(curve.values[skip:]))
    return (first_reaching(curve, threshold, skip),
            Crossing(int(curve.steps[best]), float(curve.minutes[best]), float(curve.values[best])))


def _threshold_table(runs: Sequence[RunCurves], names: Sequence[str], threshold: float, evaluated: bool) -> list[str]:
    what, digits = ("evaluation", 1) if evaluated else (f"training (full {runs[0].window} games)", 2)
    level = f"{threshold:+g}".replace("-", MINUS) if threshold else "0"
    header = ["run", f"{what} ≥ {level}: first agent step", "minutes",
              "evaluation" if evaluated else "game", f"best {what.split(' ')[0]} (agent step)"]
    rows = []
    for name, run in zip(names, runs):
        first, best = _crossing(run, threshold, evaluated)
        cells = [name, NONE, NONE, NONE]
        if first is not None:
            value = signed(first.value, digits) if evaluated else \
                f"{int(np.searchsorted(run.games.steps, first.step)) + 1:,}"
            cells[1:] = [f"{first.step:,}", _minutes(first.minutes), value]
        cells.append(NONE if best is None else f"{signed(best.value, digits)} ({best.step:,})")
        rows.append(cells)
    return _table(header, rows)


def setting_table(runs: Sequence[RunCurves], label: str, every: int | None = None,
                  threshold: float | None = None) -> str:
    """One setting's block (module docstring): its heading line, its table, and with
    ``threshold`` the table of when each seed reached it.

    Args:
        runs: the seeds of one setting, in column order.
        label: the setting's name (`vecdqn.curves.seed_groups`).
        every: agent steps between rows where no seed has an evaluation (default: a round number
            giving about `ROWS` rows); ignored where any has one.
        threshold: a return to report reaching (e.g. 18 for Pong), or None.
    """
    names = _names(runs)
    steps, evaluated = _steps(runs, every)
    columns = [_columns(run, steps, evaluated) for run in runs]
    header = ["agent steps"]
    for name in names:
        header += [f"{name}: minutes", "training", "evaluation"] if evaluated else [f"{name}: minutes", "training"]
    aggregated = np.stack([c[2] if evaluated else c[1] for c in columns])  # (R, K)
    complete = ~np.isnan(aggregated).any(axis=0)
    digits = 1 if evaluated else 2
    if len(runs) > 1:
        header += [f"{'evaluation' if evaluated else 'training'}: mean", "range"]
    firsts = [_crossing(run, threshold, evaluated)[0] if threshold is not None and evaluated else None
              for run in runs]
    rows = []
    for k, step in enumerate(steps):
        cells = [f"{int(step):,}"]
        for (minutes, training, evaluation), first in zip(columns, firsts):
            cells += [_minutes(minutes[k]), signed(training[k], 2)]
            if evaluated:
                value = signed(evaluation[k], 1)
                cells.append(f"**{value}**" if first is not None and first.step == step else value)
        if len(runs) > 1 and complete[k]:
            values = aggregated[:, k]
            low, high = signed(values.min(), digits), signed(values.max(), digits)
            cells += [signed(values.mean(), digits), f"{low} to {high}"]
        elif len(runs) > 1:
            cells += [NONE, NONE]
        rows.append(cells)
    lines = [_heading(runs, label, names), "", *_table(header, rows)]
    if threshold is not None:
        lines += ["", *_threshold_table(runs, names, threshold, evaluated)]
    return "\n".join(lines)


def markdown(runs: Sequence[RunCurves], every: int | None = None, threshold: float | None = None) -> str:
    """Every setting's block (`setting_table`) in order of its first run, separated by a blank line."""
    group, labels = seed_groups([run.config for run in runs], [run.path.name for run in runs])
    blocks = []
    for g, label in enumerate(labels):
        members = [run for run, h in zip(runs, group) if h == g]
        blocks.append(setting_table(members, label, every, threshold))
    return "\n\n".join(blocks)
