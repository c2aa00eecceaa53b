#!/usr/bin/env python
"""Draw the learning curves of training runs and print them as a table.

    python scripts/plot.py runs/BreakoutNoFrameskip-v4__1__1700000000 runs/BreakoutNoFrameskip-v4__2__1700000100 \\
        -o breakout.png

The figure is a 2×2 grid: training return (mean of the last 100 games) and evaluation return
(``eval/return_mean``, one marker per evaluation) against agent steps (left) and against
wall-clock minutes since each run's first event (right); when no run has an evaluation, only
the training row (1×2). Runs that differ only in their seed
share a colour and a legend label (env id, preset, and the options that tell experiments of one
game apart); each seed of a setting has its own line style and marker, so no two runs are drawn
alike (up to 40 seeds per setting, any number of settings), and the legend names each run's
setting and seed. For each run a table goes to stdout: agent steps, minutes, training return
and evaluation return at each evaluation, or every ``--every`` agent steps for a run without
evaluations. Without ``-o`` only the tables are printed (no matplotlib needed).

Exit codes: 0 done; 2 bad input or matplotlib missing (one line on stderr); 130 interrupted.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

# Run from a source checkout without installing: make the package importable.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from vecdqn.cli import OneLineErrorParser, UsageError, check_output_path, exit_code  # noqa: E402
from vecdqn.curves import WINDOW, RunCurves, RunError, read_run, report, seed_groups  # noqa: E402

PROG = "plot.py"
MISSING_MATPLOTLIB = '-o needs matplotlib: pip install -e ".[plot]" (without -o only the tables are printed)'
# Within a setting's colour, each seed gets one (line style, marker) pair: 4 x 10 pairs, so up to
# 40 seeds of one setting are drawn apart (markers too, since dotted and dashed lines of many
# seeds are hard to tell apart alone).
LINE_STYLES = ("-", "--", ":", "-.")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">")
MAX_SEEDS = len(LINE_STYLES) * len(MARKERS)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineErrorParser(
        prog=PROG,
        allow_abbrev=False,
        description="Plot the training and evaluation return of vecdqn runs against agent steps and "
        "wall-clock minutes, and print each run's curve as a table. Runs that differ only in their "
        "seed are grouped: they share a colour and a label; each seed has its own line style and marker, "
        "marked 'seed N' in the legend (no mean or min/max band: every seed stays visible).",
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
        type=int,
        default=WINDOW,
        metavar="GAMES",
        help=f"training return: mean of this many most recent games (default: {WINDOW})",
    )
    parser.add_argument(
        "--every",
        type=int,
        default=None,
        metavar="STEPS",
        help="table rows every this many agent steps, for runs without evaluations (default: a round "
        "number giving about 10 rows); runs with evaluations get one row per evaluation",
    )
    return parser


def check_args(args: argparse.Namespace) -> None:
    """Refuse bad values and an output that could not be written, before any run is read."""
    if args.window < 1:
        raise UsageError(f"--window {args.window} must be at least 1 game")
    if args.every is not None and args.every < 1:
        raise UsageError(f"--every {args.every} must be a positive number of agent steps")
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


def line_labels(runs: list[RunCurves]) -> tuple[list[int], list[str]]:
    """Each run's group (its colour) and legend label: the group's label and ``seed N``."""
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
    return group, labels


def seed_styles(group: list[int]) -> list[tuple[str, str]]:
    """Each run's ``(line style, marker)``: the n-th run of a group (a setting) gets the n-th pair
    of `LINE_STYLES` x `MARKERS`, so runs of one group never share one; groups differ in colour.

    Raises:
        UsageError: a group has more than `MAX_SEEDS` runs (they could not all be told apart).
    """
    styles = []
    for i, g in enumerate(group):
        nth = group[:i].count(g)
        if nth >= MAX_SEEDS:
            raise UsageError(f"{group.count(g)} runs of one setting cannot be told apart in one figure; plot at "
                             f"most {MAX_SEEDS} seeds per setting (the tables have no limit)")
        styles.append((LINE_STYLES[nth % len(LINE_STYLES)], MARKERS[nth // len(LINE_STYLES)]))
    return styles


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


def figure(runs: list[RunCurves], group: list[int], labels: list[str]) -> Any:
    """The 2×2 figure: rows training / evaluation return, columns agent steps / minutes; when
    no run has an evaluation, only the training row (1×2), so no panel is left empty.

    Args:
        runs: the runs, one line each.
        group: each run's group (`line_labels`): its colour; the runs of a group differ in line
            style and marker (`seed_styles`).
        labels: each run's legend label.

    Returns:
        the matplotlib figure; the legend, outside the axes, has one entry per run.

    Raises:
        UsageError: matplotlib is missing, or a group has more runs than can be told apart.
    """
    plt = load_pyplot()
    from matplotlib.ticker import EngFormatter

    styles = seed_styles(group)
    colours = group_colours(max(group) + 1)
    columns = 1 + (len(runs) - 1) // 36  # about 36 entries fit beside 8 inches of axes
    rows = 2 if any(len(run.evals.steps) for run in runs) else 1
    fig, axes = plt.subplots(rows, 2, figsize=(12 + 3.5 * columns, 4 * rows), sharex="col", sharey="row",
                             layout="constrained", squeeze=False)
    for run, g, (linestyle, marker), label in zip(runs, group, styles, labels):
        style = {"color": colours[g], "linestyle": linestyle, "marker": marker}
        # Markers about every tenth of the axes' diagonal on the dense training curves.
        axes[0, 0].plot(run.train.steps, run.train.values, label=label, markevery=0.1, **style)
        axes[0, 1].plot(run.train.minutes, run.train.values, markevery=0.1, **style)
        if rows == 2:
            axes[1, 0].plot(run.evals.steps, run.evals.values, **style)
            axes[1, 1].plot(run.evals.minutes, run.evals.values, **style)
    axes[0, 0].set_ylabel(f"training return\n(mean of the last {runs[0].window} games)")
    if rows == 2:
        axes[1, 0].set_ylabel("evaluation return\n(mean over the evaluation's games)")
    axes[-1, 0].set_xlabel("agent steps")
    axes[-1, 0].xaxis.set_major_formatter(EngFormatter())
    axes[-1, 1].set_xlabel("wall-clock minutes since the run's first event")
    for ax in axes.flat:
        ax.grid(alpha=0.3)
    fig.legend(loc="outside right upper", fontsize="small", ncols=columns,
               title="colour: setting; line and marker: seed", title_fontsize="small")
    return fig


def draw(runs: list[RunCurves], group: list[int], labels: list[str], path: Path) -> None:
    """Write `figure` to the PNG ``path``."""
    fig = figure(runs, group, labels)
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
    group, labels = line_labels(runs)
    if args.output is not None:
        seed_styles(group)  # refuse runs that could not be told apart before printing anything
    print("\n\n".join(format_table(run, label, args.every) for run, label in zip(runs, labels)), flush=True)
    if args.output is not None:
        draw(runs, group, labels, Path(args.output))
        print(f"wrote {args.output}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
