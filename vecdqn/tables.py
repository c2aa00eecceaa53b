"""Markdown tables of runs, one per setting, in the shape of ``docs/results.md``.

A setting is the runs that differ only in their seed (`vecdqn.curves.seed_groups`). Each gets a
line naming it and its runs, then a table with one row per agent step: every step at which any of
its seeds was evaluated (``eval/return_mean``, from the run or its ``checkpoint-evals/``), or, for a
setting without evaluations, every ``every`` agent steps and each seed's last step. Per seed the
row gives the minutes at which the seed reached the step, its training return (mean of the last
`RunCurves.window` games), and its evaluation (a seed evaluated at other steps only has no cells on
the row; a seed never evaluated, beside seeds that were, has its minutes and training return on
every row up to its last step); two more columns give the mean and the range
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

A suite (`suite_table`) is one run per game, e.g. the seven games of Mnih et al. 2013 each
trained with ``--preset atari-pqn`` for 10M agent steps, its kept checkpoints evaluated by
``scripts/evaluate.py RUN --every-checkpoint``. It is one table with a row per run (`SuiteRow`)
and these columns, each one number:

- game: the ALE game (``BeamRider``) of the run's env id; the env id for a game outside the 57
  of `vecdqn.scores.HUMAN_RANDOM_SCORES`; the folder's name for a run without ``config.json``.
- last greedy, at agent step, minutes: the evaluation (``eval/return_mean``, the mean score of
  whole games) at the largest agent step evaluated, and when (agent steps, minutes of training).
- best greedy, at agent step, minutes: the highest evaluation (the earliest of equal ones).
- last / best: the last evaluation as a percentage of the best (of raw scores; n/a where the best
  is not positive, as a ratio of scores of two signs says nothing).
- trained to: the run's last logged agent step; training: the mean return of its last
  `RunCurves.window` training games there (epsilon-greedy, 0.01 at the end of ``atari-pqn``):
  the kind of score CleanRL publishes.
- HNS last, HNS best: the human-normalized score of the last and of the best evaluation,
  ``(score − random) / (human − random)`` as a percentage (`vecdqn.scores.human_normalized_score`).
- 10M anchor, anchor source, kind: the game's published score at 10M agent steps,
  ``value ± spread`` (`vecdqn.scores.anchor`: CleanRL PQN, else CleanRL DQN, else the RL Zoo's
  DQN), who published it, and its kind: ``T`` a training return, ``E`` an evaluation of a
  trained model (a note below the table says so).
- ≥ anchor (like with like): ``yes`` where the run's score of the anchor's kind is at least the
  anchor's value (for ``T`` its training mean, for ``E`` its best evaluation), else ``no``.
- Nature DQN 50M: Mnih et al. 2015's score after 50M agent steps (`vecdqn.scores.nature_dqn`),
  the nearest longer budget.

``not evaluated`` in the greedy columns (and ``—`` in those computed from them) for a run with no
evaluation; ``n/a`` where a game has no reference score or no published one. Below the table: the
median HNS over the runs of the last and of the best evaluation, and notes naming each source.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from vecdqn.curves import (
    Crossing,
    RunCurves,
    best_point,
    first_reaching,
    last_point,
    report,
    round_steps,
    seed_groups,
)
from vecdqn.scores import (
    EVALUATION,
    SCORE_SOURCE,
    TRAINING,
    PublishedScore,
    anchor,
    game_name,
    human_normalized_score,
    nature_dqn,
)

__all__ = ["SuiteRow", "markdown", "median_hns", "setting_table", "signed", "suite_rows", "suite_table"]

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
    float64``, NaN where the seed has no value (no evaluation at that step, or past its last).

    Rows of evaluations give a seed with evaluations its values at its own evaluations only; a
    seed without any (trained with ``--eval-every 0`` and not evaluated since) its minutes and
    training return at every row up to its last step, as its table alone gives them."""
    if evaluated and len(run.evals.steps):
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


# --- a suite of games: one row per run ----------------------------------------------------------------------

NOT_EVALUATED = "not evaluated"
NOT_APPLICABLE = "n/a"
# The kind of a published score, abbreviated in its column and spelled out below the table.
KINDS = {
    TRAINING: ("T", "training return: the raw whole-game returns of the games played while training "
                    "(epsilon 0.01 by then), the mean of each seed's last games; like the training column"),
    EVALUATION: ("E", "evaluation: games played by a trained model after training, epsilon-greedy at a small "
                      "epsilon (each source's in vecdqn/scores.py); like the greedy columns"),
}


@dataclass
class SuiteRow:
    """One run of a suite and the numbers of its row (module docstring).

    Attributes:
        run: the run's curves.
        game: the name its row shows (``BeamRider``; the env id or folder name where there is none).
        env_id: the run's env id, or None for a run without ``config.json``.
        last: its evaluation at the largest evaluated agent step; None without evaluations.
        best: its highest evaluation (the earliest of equal ones); None without evaluations.
        trained: its last logged agent step.
        training: the mean return of its last `RunCurves.window` games at ``trained``; NaN before
            its first game.
        hns_last, hns_best: the human-normalized score of ``last`` and ``best`` (a fraction: 1 is
            the human score); None without evaluations or reference scores.
        anchor: the game's published 10M-step score (`vecdqn.scores.anchor`), or None.
        nature: the game's Nature DQN score at 50M agent steps, or None.
    """

    run: RunCurves
    game: str
    env_id: str | None
    last: Crossing | None
    best: Crossing | None
    trained: int
    training: float
    hns_last: float | None
    hns_best: float | None
    anchor: PublishedScore | None
    nature: PublishedScore | None

    @property
    def last_of_best(self) -> float | None:
        """The last evaluation as a percentage of the best; None without evaluations or where the
        best is not positive."""
        if self.last is None or self.best is None or self.best.value <= 0:
            return None
        return 100.0 * self.last.value / self.best.value

    @property
    def reaches_anchor(self) -> bool | None:
        """Whether the run's score of the anchor's kind (the training mean beside a training return,
        the best evaluation beside an evaluation) is at least the anchor's value; None without either."""
        if self.anchor is None:
            return None
        if self.anchor.kind == TRAINING:
            return None if math.isnan(self.training) else self.training >= self.anchor.value
        return None if self.best is None else self.best.value >= self.anchor.value


def _game(run: RunCurves) -> tuple[str, str | None]:
    """The run's shown game name and its env id (module docstring, column "game")."""
    env_id = None if run.config is None else run.config.get("env_id")
    if not isinstance(env_id, str):
        return run.path.name, None
    game = game_name(env_id)
    if game is None:
        return env_id, env_id
    return "".join(part.capitalize() for part in game.split("_")), env_id  # "beam_rider" -> "BeamRider"


def _hns(env_id: str | None, point: Crossing | None) -> float | None:
    return None if env_id is None or point is None else human_normalized_score(env_id, point.value)


def suite_rows(runs: Sequence[RunCurves]) -> list[SuiteRow]:
    """Each run's `SuiteRow`, in the order given."""
    rows = []
    for run in runs:
        name, env_id = _game(run)
        last, best = last_point(run.evals), best_point(run.evals)
        trained = run.last_step
        training = float(run.train_return_at(np.array([trained]))[0])
        rows.append(SuiteRow(run, name, env_id, last, best, trained, training, _hns(env_id, last), _hns(env_id, best),
                             None if env_id is None else anchor(env_id),
                             None if env_id is None else nature_dqn(env_id)))
    return rows


def _score(value: float, digits: int) -> str:
    """A score with thousands separators and ``−`` for a negative one: ``5,753.0``, ``−20.4``."""
    text = f"{abs(value):,.{digits}f}"
    return MINUS + text if value < 0 and float(text.replace(",", "")) != 0 else text


def _published_score(score: PublishedScore | None) -> str:
    """``value ± spread`` with the digits its source printed, or n/a."""
    if score is None:
        return NOT_APPLICABLE
    return f"{score.value:,.15g} ± {score.spread:,.15g}"


def _percent(value: float | None, missing: str) -> str:
    return missing if value is None else _score(value, 1) + "%"


def _point_cells(point: Crossing | None) -> list[str]:
    """Score, agent step and minutes of an evaluation; ``not evaluated`` and ``—`` for none."""
    if point is None:
        return [NOT_EVALUATED, NONE, NONE]
    return [_score(point.value, 1), f"{point.step:,}", _minutes(point.minutes)]


def _row_cells(row: SuiteRow) -> list[str]:
    evaluated = row.best is not None
    no_hns = NONE if not evaluated else NOT_APPLICABLE  # not evaluated, or no reference scores
    hns = [_percent(None if h is None else 100.0 * h, no_hns) for h in (row.hns_last, row.hns_best)]
    ratio = _percent(row.last_of_best, NOT_APPLICABLE) if evaluated else NONE
    if row.anchor is None:
        reaches = NOT_APPLICABLE
    else:
        reaches = NONE if row.reaches_anchor is None else ("yes" if row.reaches_anchor else "no")
    return [
        row.game,
        *_point_cells(row.last),
        *_point_cells(row.best),
        ratio,
        f"{row.trained:,}",
        NONE if math.isnan(row.training) else _score(row.training, 2),
        *hns,
        _published_score(row.anchor),
        NOT_APPLICABLE if row.anchor is None else row.anchor.name,
        NOT_APPLICABLE if row.anchor is None else KINDS[row.anchor.kind][0],
        reaches,
        _published_score(row.nature),
    ]


def median_hns(rows: Sequence[SuiteRow]) -> tuple[float | None, float | None, int]:
    """The median over ``rows`` of the HNS of the last and of the best evaluation (fractions),
    over the rows that have both (evaluated, with reference scores), and how many those are;
    ``(None, None, 0)`` where none has."""
    counted = [row for row in rows if row.hns_last is not None and row.hns_best is not None]
    if not counted:
        return None, None, 0
    return (float(np.median([row.hns_last for row in counted])),
            float(np.median([row.hns_best for row in counted])), len(counted))


def _median_line(rows: Sequence[SuiteRow]) -> str:
    last, best, count = median_hns(rows)
    left = [f"{row.game} ({NOT_EVALUATED if row.best is None else 'no reference scores'})"
            for row in rows if row.hns_last is None]
    out = f"; not counted: {', '.join(left)}" if left else ""
    if count == 0:
        return (f"Median human-normalized score: {NOT_APPLICABLE} (no evaluated run of a game with reference "
                f"scores){out}.")
    games = f"{count} game" + "s" * (count > 1)
    return (f"Median human-normalized score over {games}: last greedy {_percent(100.0 * last, '')}, "
            f"best greedy {_percent(100.0 * best, '')}{out}.")


def _notes(rows: Sequence[SuiteRow]) -> list[str]:
    """The notes below the table: what HNS and each kind shown is, and each published source shown
    with its budget and what its ``±`` is over."""
    notes = [f"- HNS: (score − random) / (human − random), as a percentage (Mnih et al. 2015, caption of Fig. 3); "
             f"random and human scores: {SCORE_SOURCE}."]
    # The anchors first, then the longer-budget figures.
    shown = [score for column in ("anchor", "nature") for row in rows if (score := getattr(row, column)) is not None]
    for kind in (TRAINING, EVALUATION):
        if any(score.kind == kind for score in shown):
            notes.append(f"- {KINDS[kind][0]}: {KINDS[kind][1]}.")
    names = list(dict.fromkeys(score.name for score in shown))
    for name in names:
        games = [(row.game, score) for row in rows for score in (row.anchor, row.nature)
                 if score is not None and score.name == name]
        first = games[0][1]
        spreads = list(dict.fromkeys(score.spread_of for _, score in games))
        over = spreads[0] if len(spreads) == 1 else "; ".join(f"{game}: {score.spread_of}" for game, score in games)
        notes.append(f"- {name}: {first.source}; {first.agent_steps:,} agent steps; ± standard deviation over {over}.")
    return notes


def suite_table(runs: Sequence[RunCurves]) -> str:
    """A suite's block (module docstring): a line naming the runs, the table with a row per run,
    the median HNS line and the notes.

    Args:
        runs: one run per game, in row order; the median counts each row once.
    """
    if not runs:
        raise ValueError("a suite needs at least one run")
    rows = suite_rows(runs)
    header = ["game", "last greedy", "at agent step", "minutes", "best greedy", "at agent step", "minutes",
              "last / best", "trained to (agent step)", f"training (last {runs[0].window} games)", "HNS last",
              "HNS best", "10M anchor", "anchor source", "kind", "≥ anchor (like with like)", "Nature DQN 50M"]
    members = ", ".join(f"{row.game} `{row.run.path}`" for row in rows)
    heading = (f"**Suite of {len(rows)} run" + "s" * (len(rows) > 1) + f"**: {members}; greedy: the evaluations of "
               f"each run's kept checkpoints (eval/return_mean, the mean score of whole games); training: the mean "
               f"return of the last {runs[0].window} training games at the run's last agent step; minutes: of "
               f"training (wall clock less the pauses between a stop and its resume).")
    return "\n".join([heading, "", *_table(header, [_row_cells(row) for row in rows]), "", _median_line(rows), "",
                      *_notes(rows)])
