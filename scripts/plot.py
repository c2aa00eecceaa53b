#!/usr/bin/env python
"""Draw the learning curves of training runs and print them as tables.

    python scripts/plot.py runs/pong_s1 runs/pong_s2 -o pong.png
    python scripts/plot.py runs/pong_s1 runs/pong_s2 --markdown --threshold 18
    python scripts/plot.py --suite runs/beamrider-pqn_s1 runs/breakout-pqn_s1 runs/pong-pqn_s1 -o suite.png

Runs that differ only in their seed are one setting (env id, preset, and the options that tell
experiments of one game apart name it). The figure is a 2×2 grid: training return (mean of the
last 100 games) and evaluation return (``eval/return_mean``, one marker per evaluation) against
agent steps (left) and against minutes of training (right: wall-clock since each run's first
event, less the pauses between a stop and its ``--resume``); when no
run has an evaluation, only the training row (1×2). Each setting has one colour and one legend
entry: a setting of one run is its line; a setting of several seeds is their mean line over a
shaded band from their minimum to their maximum (`vecdqn.curves.Band`), each seed faint behind
it. The band lies on the agent steps where every seed has a value (the evaluations all seeds
share; the training curve from the first step at which every seed has finished a game to the
last step every seed logged) and is drawn against the seeds' mean minute at each of those steps.

On stdout, for each run a table: agent steps, minutes, training return and evaluation return at
each evaluation, or every ``--every`` agent steps for a run without evaluations. With
``--markdown``, instead, one Markdown table per setting with a column group per seed and the
mean and range over the seeds, as ``docs/results.md`` shows them (`vecdqn.tables`). Without
``-o`` only the tables are printed (no matplotlib needed).

With ``--suite``, the runs are one per game (e.g. the seven games of Mnih et al. 2013, each
trained with ``--preset atari-pqn`` and its kept checkpoints evaluated by ``scripts/evaluate.py
RUN --every-checkpoint``): one Markdown table with a row per run giving its last and best greedy
evaluation (score, agent step, minutes of training), the last as a percentage of the best, the
training return (mean of the last 100 games) at its last agent step, the human-normalized score
of its last and best evaluation, the game's published score at 10M agent steps (CleanRL PQN,
else CleanRL DQN, else the RL Zoo's DQN; `vecdqn.scores.anchor`), whether the best evaluation
reaches it, and Nature DQN's score at 50M agent steps; then the median human-normalized score
over the games and notes naming the sources (`vecdqn.tables.suite_table`). With ``-o``, one
panel per game: training return and evaluations against agent steps, the 10M-step anchor as a
dashed line.

An event file read only up to a damaged record (cut short, or failing its CRC-32 check; TensorBoard's
reader stops there) is named in one warning line on stderr; the tables and figure are of what
comes before the damage. A run whose event files hold no readable event is refused.

Exit codes: 0 done; 2 bad input or matplotlib missing (one line on stderr); 130 interrupted.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

# Run from a source checkout without installing: make the package importable.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from vecdqn.cli import (  # noqa: E402
    OneLineErrorParser,
    UsageError,
    check_output_path,
    exit_code,
    finite_number,
    whole_number,
)
from vecdqn.curves import (  # noqa: E402
    WINDOW,
    Band,
    RunCurves,
    RunError,
    eval_band,
    read_run,
    report,
    seed_groups,
    train_band,
)
from vecdqn.tables import SuiteRow, markdown, suite_rows, suite_table  # noqa: E402

PROG = "plot.py"
MISSING_MATPLOTLIB = '-o needs matplotlib: pip install -e ".[plot]" (without -o only the tables are printed)'
# The seeds behind a band: thin and faint, so the band and its mean line stay in front.
FAINT = {"alpha": 0.35, "linewidth": 0.7}
BAND_ALPHA = 0.2


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineErrorParser(
        prog=PROG,
        allow_abbrev=False,
        description="Plot the training and evaluation return of vecdqn runs against agent steps and "
        "minutes of training, and print each run's curve as a table (or, with --markdown, each setting's "
        "as a Markdown table). Runs that differ only in their seed are one setting: one colour and one "
        "legend entry, drawn as the seeds' mean line over a shaded band from their minimum to their "
        "maximum, each seed faint behind it. Seeds are aggregated only at the agent steps where every "
        "seed has a value: the evaluation steps all of them share (a step that only some seeds were "
        "evaluated at is left out of the band and of the mean and range columns), and the training "
        "curve from the first step at which every seed has finished a game to the last step every "
        "seed logged; against minutes, at the seeds' mean minute of each such step. Minutes are of "
        "training: wall-clock since the run's first event (its event log opening, seconds after the "
        "command started), less the pauses of a run stopped and resumed (from the last event before a "
        "stop to the resumed command's first); an "
        "evaluation of a kept checkpoint (scripts/evaluate.py --every-checkpoint) stands at the minute "
        "the checkpoint was saved, an evaluation during training at the minute it was logged, after "
        "its games.",
    )
    parser.add_argument("runs", nargs="+", metavar="RUN", help="a run folder made by scripts/train.py (runs/<name>)")
    parser.add_argument(
        "-o",
        "--output",
        metavar="FILE.png",
        default=None,
        help="write the figure (2x2; 1x2 without evaluations) to this PNG (needs matplotlib: "
        "pip install -e \".[plot]\"); without it only the tables are printed",
    )
    parser.add_argument(
        "--window",
        type=whole_number,
        default=WINDOW,
        metavar="GAMES",
        help=f"training return: mean of this many most recent games (default: {WINDOW})",
    )
    parser.add_argument(
        "--every",
        type=whole_number,
        default=None,
        metavar="STEPS",
        help="table rows every this many agent steps, for runs without evaluations (default: a round "
        "number giving about 10 rows); runs with evaluations get one row per evaluation",
    )
    parser.add_argument(
        "--markdown",
        action="store_true",
        help="print one Markdown table per setting instead of one plain table per run: a line naming "
        "the setting (env id, preset, algo, the options that tell it apart) and its runs; a row per "
        "agent step at which any seed was evaluated (without evaluations: every --every agent steps "
        "and each seed's last); per seed minutes, training return and evaluation (— where it has "
        "none; a seed never evaluated beside seeds that were: its minutes and training return on every row up to its "
        "last step); the mean and range (min to max) over the seeds of the evaluation (of the training "
        "return without evaluations) where every seed has a value",
    )
    parser.add_argument(
        "--threshold",
        type=finite_number,
        default=None,
        metavar="RETURN",
        help="with --markdown: a second table per setting giving, per seed, the first agent step and "
        "minute at which its evaluation reaches at least RETURN (e.g. 18 for Pong; that evaluation is "
        "bold in the first table) and its best evaluation; for settings without evaluations, the "
        "training return, counted only once a full --window of games is in its mean",
    )
    parser.add_argument(
        "--suite",
        action="store_true",
        help="the runs are one per game (e.g. the seven of Mnih et al. 2013 trained with --preset atari-pqn, their "
        "checkpoints evaluated by scripts/evaluate.py RUN --every-checkpoint): print one Markdown table with a row "
        "per game: its last and best greedy evaluation (score, agent step, minutes), the last as a percentage of "
        "the best, the training return of its last --window games at its last step, the human-normalized score "
        "of its last and best evaluation, the game's published 10M-step score (CleanRL PQN, else CleanRL DQN, "
        "else the RL Zoo's DQN) with its source and kind, whether the best evaluation reaches it, and Nature "
        "DQN's 50M-step score; then the median human-normalized score over the games and the sources. With -o, "
        "one panel per game",
    )
    return parser


def check_args(args: argparse.Namespace) -> None:
    """Refuse bad values and an output that could not be written, before any run is read."""
    if args.window < 1:
        raise UsageError(f"--window {args.window} must be at least 1 game")
    if args.every is not None and args.every < 1:
        raise UsageError(f"--every {args.every} must be a positive number of agent steps")
    if args.suite:
        for option, given in (("--markdown", args.markdown), ("--threshold", args.threshold is not None),
                              ("--every", args.every is not None)):
            if given:
                raise UsageError(f"--suite makes one table of its own: leave out {option} (it is for the per-run "
                                 "tables)")
    if args.threshold is not None and not args.markdown:
        raise UsageError(f"--threshold {args.threshold:g} goes with --markdown (it adds a table to each setting's)")
    if args.threshold is not None and not math.isfinite(args.threshold):
        raise UsageError(f"--threshold {args.threshold:g} must be a finite return")
    seen = set()
    for run in args.runs:
        if Path(run).resolve() in seen:
            raise UsageError(f"RUN {run} is given twice")
        seen.add(Path(run).resolve())
    if args.output is None:
        return
    path = Path(args.output)
    if path.suffix.lower() != ".png":
        raise UsageError(f"-o {path} must end in .png (the figure is written as PNG)")
    check_output_path("-o", path)


def load_pyplot() -> ModuleType:
    """matplotlib's pyplot on the file-only Agg backend (no display needed).

    Raises:
        UsageError: matplotlib is not installed (it is the optional ``plot`` extra).
    """
    try:
        import matplotlib
    except ImportError:
        raise UsageError(MISSING_MATPLOTLIB) from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def run_labels(runs: list[RunCurves]) -> list[str]:
    """Each run's name in the plain tables: its setting's label and ``seed N`` (and its folder's
    name where two runs of one setting share a seed)."""
    configs = [run.config for run in runs]
    group, group_labels = seed_groups(configs, [run.path.name for run in runs])
    seeds = [None if c is None else c.get("seed") for c in configs]
    labels = []
    for i, run in enumerate(runs):
        if seeds[i] is None:
            labels.append(group_labels[group[i]])
            continue
        label = f"{group_labels[group[i]]}, seed {seeds[i]}"
        twins = sum(1 for j in range(len(runs)) if group[j] == group[i] and seeds[j] == seeds[i])
        labels.append(label + (f" ({run.path.name})" if twins > 1 else ""))
    return labels


def legend_labels(runs: list[RunCurves]) -> tuple[list[int], list[str]]:
    """Each run's setting (its colour) and each setting's legend label: the setting's label and
    ``seed N`` for a setting of one run, ``seeds 1, 2, 3: mean, min to max`` for several."""
    configs = [run.config for run in runs]
    group, group_labels = seed_groups(configs, [run.path.name for run in runs])
    labels = []
    for g, label in enumerate(group_labels):
        seeds = [None if c is None else c.get("seed") for c, h in zip(configs, group) if h == g]
        if len(seeds) == 1:
            labels.append(label + ("" if seeds[0] is None else f", seed {seeds[0]}"))
            continue
        named = f"seeds {', '.join(map(str, seeds))}" if len(set(seeds)) == len(seeds) else f"{len(seeds)} runs"
        labels.append(f"{label}, {named}: mean, min to max")
    return group, labels


def group_colours(count: int) -> list[Any]:
    """``count`` distinct colours, one per group: matplotlib's tab10 (its default cycle) up to 10,
    tab20 up to 20, then evenly spaced along the turbo colour map (never repeated)."""
    from matplotlib import colormaps

    if count <= 10:
        return list(colormaps["tab10"].colors[:count])
    if count <= 20:
        return list(colormaps["tab20"].colors[:count])
    return [colormaps["turbo"](x) for x in (0.05 + 0.9 * k / (count - 1) for k in range(count))]


def _number(value: float, digits: int = 2) -> str:
    return "-" if math.isnan(value) else f"{value:.{digits}f}"


def format_table(run: RunCurves, label: str, every: int | None) -> str:
    """A run's curve as plain text: a header line, then one row per evaluation (or every
    ``every`` agent steps)."""
    rows = report(run, every)
    header = ("agent steps", "minutes", f"train return (last {run.window})", "eval return")
    cells = [
        (str(int(s)), _number(m, 1), _number(t), _number(e))
        for s, m, t, e in zip(rows["steps"], rows["minutes"], rows["train_return"], rows["eval_return"])
    ]
    widths = [max(len(row[k]) for row in [header, *cells]) for k in range(len(header))]
    lines = [f"{run.path}: {label}; {len(run.games.steps)} games, agent step {run.last_step}"]
    lines += ["  ".join(cell.rjust(w) for cell, w in zip(row, widths)) for row in [header, *cells]]
    if not cells:
        lines.append("(no scalars logged yet)")
    return "\n".join(lines)


def _draw_band(axes: Sequence[Any], band: Band, colour: Any, marker: str | None) -> None:
    """A band on one row of panels: its mean line over the min-max shade, against agent steps
    (``axes[0]``) and the seeds' mean minutes (``axes[1]``)."""
    for ax, x in zip(axes, (band.steps, band.minutes)):
        ax.fill_between(x, band.low, band.high, color=colour, alpha=BAND_ALPHA, linewidth=0)
        ax.plot(x, band.mean, color=colour, marker=marker, markersize=4)


def figure(runs: list[RunCurves], group: list[int], labels: list[str]) -> Any:
    """The 2×2 figure: rows training / evaluation return, columns agent steps / minutes; when
    no run has an evaluation, only the training row (1×2), so no panel is left empty.

    Args:
        runs: the runs.
        group: each run's setting (`legend_labels`): its colour. A setting of one run is drawn as
            its line; one of several as `_draw_band` of their `train_band` and `eval_band`, each
            run a faint line behind it.
        labels: each setting's legend label.

    Returns:
        the matplotlib figure; the legend, outside the axes, has one entry per setting (a line,
        over a shade for a band).

    Raises:
        UsageError: matplotlib is missing.
    """
    plt = load_pyplot()
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    from matplotlib.ticker import EngFormatter

    colours = group_colours(len(labels))
    columns = 1 + (len(labels) - 1) // 36  # about 36 entries fit beside 8 inches of axes
    rows = 2 if any(len(run.evals.steps) for run in runs) else 1
    fig, axes = plt.subplots(rows, 2, figsize=(12 + 3.5 * columns, 4 * rows), sharex="col", sharey="row",
                             layout="constrained", squeeze=False)
    handles = []
    for g, colour in enumerate(colours):
        members = [run for run, h in zip(runs, group) if h == g]
        alone = len(members) == 1
        style = {"color": colour} if alone else {"color": colour, **FAINT}
        for run in members:
            axes[0, 0].plot(run.train.steps, run.train.values, **style)
            axes[0, 1].plot(run.train.minutes, run.train.values, **style)
            if rows == 2:
                axes[1, 0].plot(run.evals.steps, run.evals.values, marker="o" if alone else ".", **style)
                axes[1, 1].plot(run.evals.minutes, run.evals.values, marker="o" if alone else ".", **style)
        line = Line2D([], [], color=colour)
        if alone:
            handles.append(line)
            continue
        _draw_band(axes[0], train_band(members), colour, None)
        if rows == 2:
            _draw_band(axes[1], eval_band(members), colour, "o")
        handles.append((Patch(color=colour, alpha=BAND_ALPHA, linewidth=0), line))
    axes[0, 0].set_ylabel(f"training return\n(mean of the last {runs[0].window} games)")
    if rows == 2:
        axes[1, 0].set_ylabel("evaluation return\n(mean over the evaluation's games)")
    axes[-1, 0].set_xlabel("agent steps")
    axes[-1, 0].xaxis.set_major_formatter(EngFormatter())
    axes[-1, 1].set_xlabel("minutes of training (wall clock less pauses)\n(bands: the seeds' mean minute)")
    for ax in axes.flat:
        ax.grid(alpha=0.3)
    fig.legend(handles, labels, loc="outside right upper", fontsize="small", ncols=columns,
               title="colour: setting; line: mean of its seeds,\nshade: their min to max, faint: each seed",
               title_fontsize="small")
    return fig


def draw(runs: list[RunCurves], group: list[int], labels: list[str], path: Path) -> None:
    """Write `figure` to the PNG ``path``."""
    fig = figure(runs, group, labels)
    fig.savefig(path, dpi=100)
    load_pyplot().close(fig)


def check_suite(runs: list[RunCurves]) -> None:
    """Refuse two runs of one game in a suite: its median is over games, one run each."""
    seen: dict[str, RunCurves] = {}
    for row in suite_rows(runs):
        if row.env_id is None:
            continue
        if row.game in seen:
            raise UsageError(f"--suite takes one run per game: {seen[row.game].path} and {row.run.path} are both "
                             f"{row.game}; pass one of them")
        seen[row.game] = row.run


def suite_figure(rows: list[SuiteRow]) -> Any:
    """One panel per run of a suite, titled by its game: the training return (mean of the last
    `RunCurves.window` games) and the greedy evaluations against agent steps, the game's
    10M-step anchor (`vecdqn.scores.anchor`) as a dashed line; four panels a row.

    Raises:
        UsageError: matplotlib is missing.
    """
    plt = load_pyplot()
    from matplotlib.ticker import EngFormatter

    columns = min(4, len(rows))
    lines = -(-len(rows) // columns)
    fig, axes = plt.subplots(lines, columns, figsize=(4 * columns, 3.2 * lines), layout="constrained",
                             squeeze=False)
    for ax in axes.flat[len(rows):]:
        fig.delaxes(ax)
    for ax, row in zip(axes.flat, rows):
        run = row.run
        ax.plot(run.train.steps, run.train.values, color="C0", label=f"training (last {run.window} games)")
        if len(run.evals.steps):
            ax.plot(run.evals.steps, run.evals.values, color="C1", marker="o", markersize=3, label="greedy evaluation")
        if row.anchor is not None:
            ax.axhline(row.anchor.value, color="0.3", linestyle="--", linewidth=1,
                       label=f"{row.anchor.name} at 10M ({row.anchor.kind})")
        ax.set_title(row.game)
        ax.xaxis.set_major_formatter(EngFormatter())
        ax.set_xlabel("agent steps")
        ax.grid(alpha=0.3)
        ax.legend(fontsize="x-small")
    for ax in axes[:, 0]:
        ax.set_ylabel("return")
    return fig


def draw_suite(rows: list[SuiteRow], path: Path) -> None:
    """Write `suite_figure` to the PNG ``path``."""
    fig = suite_figure(rows)
    fig.savefig(path, dpi=100)
    load_pyplot().close(fig)


def main(argv: list[str] | None = None) -> int:
    """Exit codes: 0 done; 2 bad input or matplotlib missing for ``-o`` (one line on stderr);
    130 interrupted."""
    return exit_code(PROG, lambda: _plot(argv), bad_input=(RunError, OSError))


def _plot(argv: list[str] | None) -> None:
    args = build_parser().parse_args(argv)
    check_args(args)
    if args.output is not None:
        load_pyplot()  # fail before reading the runs, which can take a while
    runs = [read_run(folder, args.window) for folder in args.runs]
    for line in (line for run in runs for line in run.damaged):
        print(f"{PROG}: warning: {line}", file=sys.stderr)
    if args.suite:
        check_suite(runs)
        print(suite_table(runs), flush=True)
        if args.output is not None:
            draw_suite(suite_rows(runs), Path(args.output))
            print(f"wrote {args.output}", file=sys.stderr)
        return
    if args.markdown:
        print(markdown(runs, args.every, args.threshold), flush=True)
    else:
        print("\n\n".join(format_table(run, label, args.every) for run, label in zip(runs, run_labels(runs))),
              flush=True)
    if args.output is not None:
        draw(runs, *legend_labels(runs), Path(args.output))
        print(f"wrote {args.output}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
