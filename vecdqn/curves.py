"""Learning curves of training runs, read from their TensorBoard event files into NumPy arrays.

A run folder (``runs/<name>/``, made by ``scripts/train.py``) holds the event files that
`vecdqn.metrics.MetricsLogger` writes, ``config.json``, and, once ``scripts/evaluate.py
--every-checkpoint`` evaluated its kept checkpoints, their results in the subfolder
`CHECKPOINT_EVALS` (`vecdqn.metrics.EvalLog`). The curves come from two tags:
``charts/episodic_return`` (one scalar per finished game, at the agent step it finished) and
``eval/return_mean`` (one per periodic evaluation); the steps and times of every scalar tag make
the run's clock (when it passed which step). Seeds of one setting (`seed_groups`) aggregate to a
`Band`: their mean, minimum and maximum at the agent steps where every seed has a value. Drawing
is left to ``scripts/plot.py``, Markdown tables to `vecdqn.tables`.

Shape legend: ``G`` games finished, ``V`` evaluations, ``T`` scalar events of any tag (the
run's clock), ``K`` query steps, ``R`` runs (the seeds of one setting).

Units: steps are agent steps summed over envs (1 agent step = frame-skip emulator frames);
times are minutes of training: wall-clock minutes since the run's first event (the one written
when its log opened), less the pauses of a run stopped and resumed later. A pause runs from the
last event of one event file (one invocation of ``scripts/train.py``) to the first event of the
next, so the time between a stop and its ``--resume`` is not counted, nor the seconds the resumed
command takes to open its log.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.compat.tensorflow_stub import errors, pywrap_tensorflow

from vecdqn.config import options_with

TRAIN_TAG = "charts/episodic_return"
EVAL_TAG = "eval/return_mean"
# The run folder's subfolder of checkpoint evaluations: a TensorBoard run of its own.
CHECKPOINT_EVALS = "checkpoint-evals"
# The window of the training curve; MetricsLogger's progress bar uses the same 100 games.
WINDOW = 100

# Options that change neither what is learned nor how it is logged per agent step (their rule
# "not_experiment"): runs that differ only in these and the seed are seeds of one experiment.
# total_steps only cuts the curve short (every schedule is in absolute agent steps) and a resume
# may raise it.
NOT_EXPERIMENT = frozenset(options_with("not_experiment"))


class RunError(ValueError):
    """A folder that is not a readable run; the message names the folder and what is wrong."""


@dataclass
class Scalars:
    """One tag's events in step order: ``steps (n,) int64`` agent steps, ``minutes (n,) float64``,
    ``values (n,) float64``."""

    steps: np.ndarray
    minutes: np.ndarray
    values: np.ndarray


@dataclass
class RunCurves:
    """The curves of one run.

    Attributes:
        path: the run folder.
        config: its ``config.json`` as a dict, or None where the folder has none.
        games: ``G`` finished games: raw return of each game (``values``).
        train: ``G`` points: mean raw return of the last `window` games at each game's step.
        evals: ``V`` evaluations: mean return of each periodic evaluation.
        clock: ``T`` events of every scalar tag, for the time at which the run passed a step.
        window: games in the training curve's trailing mean.
        damaged: a line per event file read only up to a damaged record, naming it and where.
    """

    path: Path
    config: dict[str, Any] | None
    games: Scalars
    train: Scalars
    evals: Scalars
    clock: Scalars
    window: int
    damaged: list[str] = field(default_factory=list)

    @property
    def last_step(self) -> int:
        """The largest agent step the run has logged (0 if none)."""
        return int(self.clock.steps[-1]) if len(self.clock.steps) else 0

    def train_return_at(self, steps: np.ndarray) -> np.ndarray:
        """Training return (mean of the last `window` games finished at or before each step).

        ``steps (K,) int`` agent steps -> ``(K,) float64``; NaN before the first game.
        """
        index = np.searchsorted(self.games.steps, np.asarray(steps), side="right") - 1
        out = np.full(index.shape, np.nan)
        out[index >= 0] = self.train.values[index[index >= 0]]
        return out

    def minutes_at(self, steps: np.ndarray) -> np.ndarray:
        """Minutes of training at which the run reached each step, interpolated between its events
        (the first or last event's time outside them).

        ``steps (K,) int`` agent steps -> ``(K,) float64`` minutes; NaN if the run logged nothing.
        """
        if not len(self.clock.steps):
            return np.full(np.shape(steps), np.nan)
        # Several tags share a step; the latest of their times is when the run had passed it.
        unique, first = np.unique(self.clock.steps, return_index=True)
        latest = np.maximum.reduceat(self.clock.minutes, first)
        return np.interp(np.asarray(steps, dtype=np.float64), unique, latest)


def trailing_mean(values: np.ndarray, window: int = WINDOW) -> np.ndarray:
    """Mean of each element and the ``window - 1`` before it (fewer at the start).

    ``values (G,) float`` -> ``(G,) float64``: element ``i`` is ``values[max(0, i-window+1):i+1].mean()``.
    """
    if window < 1:
        raise ValueError(f"window {window} must be at least 1 game")
    values = np.asarray(values, dtype=np.float64)
    # Differences of running sums: O(G), and exact for game scores (integers, sums below 2**53).
    sums = np.concatenate([[0.0], np.cumsum(values)])
    end = np.arange(1, len(values) + 1)
    start = np.maximum(end - window, 0)
    return (sums[end] - sums[start]) / (end - start)


def event_files(folder: Path) -> list[Path]:
    """The TensorBoard event files directly in ``folder``, sorted by name (i.e. by creation time)."""
    return sorted(p for p in folder.iterdir() if p.is_file() and "tfevents" in p.name)


def check_run_folder(folder: Path) -> None:
    """Raise `RunError` unless ``folder`` holds event files directly (as a run folder does)."""
    if not folder.exists():
        raise RunError(f"{folder} does not exist")
    if not folder.is_dir():
        raise RunError(f"{folder} is a file, not a run folder")
    if event_files(folder):
        return
    runs = sorted(p.name for p in folder.iterdir() if p.is_dir() and event_files(p))
    if runs:
        shown = ", ".join(runs[:3]) + (", ..." if len(runs) > 3 else "")
        raise RunError(f"{folder} holds runs, not event files: pass its run folders ({shown}), e.g. {folder}/*")
    raise RunError(f"{folder} is not a run folder: it holds no TensorBoard event files (scripts/train.py "
                   "writes them)")


def checkpoint_evals(folder: Path) -> dict[str, list[Any]]:
    """The scalar events of ``folder``'s `CHECKPOINT_EVALS` subfolder, ``{tag: [event]}`` in step
    order, as TensorBoard shows them ({} when there is none)."""
    evals = Path(folder) / CHECKPOINT_EVALS
    if not (evals.is_dir() and event_files(evals)):
        return {}
    accumulator = EventAccumulator(str(evals), size_guidance={"scalars": 0})
    # Each evaluation's file opens with TensorBoard's restart marker, so that the results it
    # repeats replace the earlier file's; the accumulator warns of the purge the marker asks for.
    with quiet_tensorboard():
        accumulator.Reload()
    return {tag: sorted(accumulator.Scalars(tag), key=lambda e: e.step) for tag in accumulator.Tags()["scalars"]}


@contextlib.contextmanager
def quiet_tensorboard():
    """TensorBoard's logger at ERROR for the duration. Its warning "Detected out of order event.step
    likely caused by a TensorFlow restart" is expected for a resumed run (whose restart marker drops
    what the stopped process logged after its checkpoint) and for checkpoint evaluations."""
    logger = logging.getLogger("tensorboard")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def _in_step_order(events: Sequence[Any]) -> list[Any]:
    """Drop what a resume superseded; the rest is in step order.

    A run resumed from a checkpoint at step S opens a new event file and logs the steps after S
    again, while the old file still holds what it logged after S before it stopped. Files are
    read in creation order, so a tag's step going back marks a resume: the earlier events at or
    after the new step are dropped (TensorBoard's own rule for out-of-order steps). Games the old
    file logged between S and the first new event cannot be told apart and stay.
    """
    kept: list[Any] = []
    for event in events:
        if kept and event.step < kept[-1].step:
            while kept and kept[-1].step >= event.step:
                kept.pop()
        kept.append(event)
    return kept


def pauses(spans: Sequence[tuple[float, float]]) -> np.ndarray:
    """The pauses of a run from the time spans of its event files.

    ``spans``: ``(first, last)`` wall time (Unix seconds) of each event file's events. A file that
    opens after every earlier file's last event starts a pause at that last event; files that
    overlap in time (two writers at once) make no pause. Returns ``(P, 2) float64`` rows of
    ``(start, end)`` wall times, in time order.
    """
    out: list[tuple[float, float]] = []
    end = None
    for first, last in sorted(spans):
        if end is not None and first > end:
            out.append((end, first))
        end = last if end is None else max(end, last)
    return np.array(out, dtype=np.float64).reshape(-1, 2)


def training_minutes(wall_times: np.ndarray, origin: float, paused: np.ndarray) -> np.ndarray:
    """Minutes of training at each wall time: since ``origin``, less the part of each pause before it.

    ``wall_times (n,)`` Unix seconds, ``origin`` Unix seconds, ``paused (P, 2)`` from `pauses` ->
    ``(n,) float64`` minutes.
    """
    wall = np.asarray(wall_times, dtype=np.float64).reshape(-1)
    within = np.clip(wall[:, None] - paused[:, 0], 0.0, paused[:, 1] - paused[:, 0]).sum(axis=1)
    return (wall - origin - within) / 60.0


def _read_event_file(path: Path) -> tuple[list[float], int | None, bool]:
    """An event file read as TensorBoard's reader (no TensorFlow) reads it, which stops silently at a
    damaged record: its events' wall times up to there, the record's byte offset (None: no damage),
    and whether it is cut short (the file ends in it, as a live run's may) or fails its CRC-32 check."""
    reader, times, offset = pywrap_tensorflow.PyRecordReader_New(str(path)), [], 0
    with reader.file_handle:
        while True:
            try:
                reader.GetNext()
            except errors.OutOfRangeError:  # the end, after a whole record
                return times, None, False
            except errors.DataLossError as err:
                return times, offset, "truncated" in str(err)
            offset += len(reader.record()) + 16  # the length (8 bytes) and its CRC (4), the event and its CRC (4)
            times.append(Event.FromString(reader.record()).wall_time)


def _scalars(events: Sequence[Any], origin: float, paused: np.ndarray) -> Scalars:
    return Scalars(
        steps=np.array([e.step for e in events], dtype=np.int64),
        minutes=training_minutes(np.array([e.wall_time for e in events], dtype=np.float64), origin, paused),
        values=np.array([e.value for e in events], dtype=np.float64),
    )


def read_config(folder: Path) -> dict[str, Any] | None:
    """The run's ``config.json`` as a dict; None if the folder has none. `RunError` if unreadable."""
    path = folder / "config.json"
    if not path.is_file():
        return None
    try:
        config = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise RunError(f"{path} is not readable JSON: {err}") from err
    if not isinstance(config, dict):
        raise RunError(f"{path} holds a JSON {type(config).__name__}, not the object scripts/train.py writes")
    return config


def read_run(folder: str | Path, window: int = WINDOW) -> RunCurves:
    """Read a run folder's curves; every scalar event is kept (no subsampling).

    Args:
        folder: the run folder, holding event files directly; the evaluations in its
            `CHECKPOINT_EVALS` subfolder replace the run's own at the same steps.
        window: games in the training curve's trailing mean.

    Raises:
        RunError: the folder does not exist, holds no event files, or they hold no events (naming
            a file whose first record fails its CRC-32 check). Other damage is only reported
            (`RunCurves.damaged`): a live run's last record may be half-written.
    """
    folder = Path(folder)
    check_run_folder(folder)
    config = read_config(folder)
    accumulator = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    with quiet_tensorboard():
        accumulator.Reload()
    files = {path: _read_event_file(path) for path in event_files(folder)}
    try:
        origin = accumulator.FirstEventTimestamp()
    except ValueError as err:
        for path in (path for path, (_, at, cut) in files.items() if at == 0 and not cut):
            raise RunError(f"{path} is unreadable: its first record fails its CRC-32 check (a corrupt file, or "
                           "not a TensorBoard event file)") from err
        raise RunError(f"{folder}: its event files hold no events yet") from err
    paused = pauses([(min(times), max(times)) for times, _, _ in files.values() if times])
    by_tag = {tag: _in_step_order(accumulator.Scalars(tag)) for tag in accumulator.Tags()["scalars"]}
    for tag, events in checkpoint_evals(folder).items():  # a checkpoint's evaluation stands for the run's own
        merged = {e.step: e for e in by_tag.get(tag, [])} | {e.step: e for e in events}
        by_tag[tag] = [merged[step] for step in sorted(merged)]
    games = _scalars(by_tag.get(TRAIN_TAG, []), origin, paused)
    every_event = sorted((e for events in by_tag.values() for e in events), key=lambda e: (e.step, e.wall_time))
    return RunCurves(
        path=folder,
        config=config,
        games=games,
        train=Scalars(games.steps, games.minutes, trailing_mean(games.values, window)),
        evals=_scalars(by_tag.get(EVAL_TAG, []), origin, paused),
        clock=_scalars(every_event, origin, paused),
        window=window,
        damaged=[f"{path} {'is cut short in a record' if cut else 'has a record that fails its CRC-32 check'} at "
                 f"byte {at:,} of {path.stat().st_size:,}: read up to the damage ({len(times)} events)"
                 for path, (times, at, cut) in files.items() if at is not None],
    )


def round_steps(at_least: float) -> int:
    """The smallest of 1, 2, 5, 10, 20, 50, ... agent steps that is at least ``at_least``."""
    if at_least <= 1:
        return 1
    power = 10 ** math.floor(math.log10(at_least))
    return next(m * power for m in (1, 2, 5, 10) if m * power >= at_least)


def report(run: RunCurves, every: int | None = None, rows: int = 10) -> dict[str, np.ndarray]:
    """The run's table: one row per evaluation, or, for a run without any, one row every
    ``every`` agent steps (default: a round number giving about ``rows`` rows) and one at its
    last step.

    Returns:
        ``steps (K,) int64`` agent steps, ``minutes (K,) float64``, ``train_return (K,) float64``
        (mean of the last `window` games at that step; NaN before the first game) and
        ``eval_return (K,) float64`` (NaN on rows that are not evaluations).
    """
    if len(run.evals.steps):
        steps = run.evals.steps
        minutes = run.evals.minutes
        eval_return = run.evals.values
    else:
        last = run.last_step
        every = every or round_steps(last / rows)
        steps = np.arange(every, last + 1, every, dtype=np.int64)
        if last > 0 and (not len(steps) or steps[-1] != last):
            steps = np.append(steps, np.int64(last))
        minutes = run.minutes_at(steps)
        eval_return = np.full(len(steps), np.nan)
    return {"steps": steps, "minutes": minutes, "train_return": run.train_return_at(steps),
            "eval_return": eval_return}


def _base_label(config: Mapping[str, Any]) -> str:
    preset = config.get("preset")
    return str(config.get("env_id", "?")) + (f" (preset {preset})" if preset else "")


def _experiment(config: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in config.items() if k not in NOT_EXPERIMENT}


def seed_groups(configs: Sequence[Mapping[str, Any] | None], names: Sequence[str]) -> tuple[list[int], list[str]]:
    """Group runs that differ only in their seed (and in `NOT_EXPERIMENT` options), and name each group.

    Args:
        configs: each run's config; None where a run has none (it is then a group of its own).
        names: each run's folder name, the label of a run without a config.

    Returns:
        ``group``: one index per run, groups numbered in order of first appearance; ``labels``:
        one per group, all different: the env id, `` (preset NAME)`` if any, and where groups
        would share that label the options in which they differ, e.g.
        ``vecdqn/Catch-v0 (preset catch) n_step=3`` (the first three in name order, more where
        three do not tell two groups apart, and ``...`` for any left out).
    """
    keys: list[str] = []
    group: list[int] = []
    members: list[int] = []  # first run of each group
    for i, config in enumerate(configs):
        key = json.dumps(_experiment(config), sort_keys=True, default=str) if config is not None else f"\0{i}"
        if key not in keys:
            keys.append(key)
            members.append(i)
        group.append(keys.index(key))
    labels = [names[i] for i in members]
    rivals: dict[str, list[int]] = {}  # base label -> the groups (with a config) that share it
    for g, i in enumerate(members):
        if (config := configs[i]) is not None:
            rivals.setdefault(_base_label(config), []).append(g)
    for base, groups in rivals.items():
        for g, label in zip(groups, _distinct_labels(base, [_experiment(configs[members[g]]) for g in groups])):
            labels[g] = label
    return group, labels


def _distinct_labels(base: str, experiments: list[dict[str, Any]]) -> list[str]:
    """Labels for groups that share ``base``: the options in which they differ, the first three
    in name order, or as many more as it takes for no two labels to be equal."""
    differ = sorted(k for k in set().union(*experiments)
                    if len({json.dumps(e.get(k), default=str) for e in experiments}) > 1)
    shown = min(3, len(differ))
    while True:
        labels = [" ".join([base, *(f"{k}={e.get(k)}" for k in differ[:shown])]) for e in experiments]
        if len(set(labels)) == len(labels) or shown == len(differ):
            break
        shown += 1
    return [label + (" ..." if shown < len(differ) else "") for label in labels]


@dataclass
class Band:
    """The seeds of one setting at the agent steps where every seed has a value.

    Attributes:
        steps: ``(K,) int64`` agent steps, increasing.
        minutes: ``(K,) float64`` the mean over the seeds of the minute each reached the step.
        mean, low, high: ``(K,) float64`` mean, minimum and maximum over the seeds.
    """

    steps: np.ndarray
    minutes: np.ndarray
    mean: np.ndarray
    low: np.ndarray
    high: np.ndarray


def _band(steps: np.ndarray, minutes: np.ndarray, values: np.ndarray) -> Band:
    """``steps (K,)``, ``minutes (R, K)``, ``values (R, K)`` -> their `Band` over the ``R`` seeds."""
    if not len(steps):
        empty = np.array([], dtype=np.float64)
        return Band(np.array([], dtype=np.int64), empty, empty, empty, empty)
    return Band(steps.astype(np.int64), minutes.mean(axis=0), values.mean(axis=0), values.min(axis=0),
                values.max(axis=0))


def eval_band(runs: Sequence[RunCurves]) -> Band:
    """The evaluation return of ``runs`` (seeds of one setting) at the agent steps at which every
    one of them was evaluated; steps that only some seeds have are left out (empty if none is
    shared)."""
    if not runs:
        raise ValueError("a band needs at least one run")
    common = functools.reduce(np.intersect1d, [run.evals.steps for run in runs])
    at = [np.searchsorted(run.evals.steps, common) for run in runs]
    return _band(common, np.stack([run.evals.minutes[i] for run, i in zip(runs, at)]),
                 np.stack([run.evals.values[i] for run, i in zip(runs, at)]))


def train_band(runs: Sequence[RunCurves]) -> Band:
    """The training return of ``runs`` (seeds of one setting) from the step at which every seed
    has finished a game to the last step every seed has logged, at each step at which any of
    them finished one (each seed's value there: the mean of its last `window` games so far)."""
    if not runs:
        raise ValueError("a band needs at least one run")
    if any(not len(run.games.steps) for run in runs):
        return _band(np.array([], dtype=np.int64), np.empty((len(runs), 0)), np.empty((len(runs), 0)))
    start = max(int(run.games.steps[0]) for run in runs)
    end = min(run.last_step for run in runs)
    steps = functools.reduce(np.union1d, [run.games.steps for run in runs])
    steps = steps[(steps >= start) & (steps <= end)]
    return _band(steps, np.stack([run.minutes_at(steps) for run in runs]),
                 np.stack([run.train_return_at(steps) for run in runs]))


@dataclass
class Crossing:
    """A point of a curve (where it first reaches a threshold, its best, its last): ``step``
    (agent step), ``minutes`` (of training) and ``value``."""

    step: int
    minutes: float
    value: float


def first_reaching(curve: Scalars, threshold: float, skip: int = 0) -> Crossing | None:
    """The first point of ``curve``, after its first ``skip``, whose value is at least
    ``threshold``; None if there is none."""
    reached = np.flatnonzero(curve.values[skip:] >= threshold)
    if not len(reached):
        return None
    i = skip + int(reached[0])
    return Crossing(int(curve.steps[i]), float(curve.minutes[i]), float(curve.values[i]))


def best_point(curve: Scalars) -> Crossing | None:
    """The point of ``curve`` with the highest value, the earliest of equal ones (NaN values
    ignored); None if it has none."""
    finite = np.flatnonzero(~np.isnan(curve.values))
    if not len(finite):
        return None
    i = int(finite[np.argmax(curve.values[finite])])  # argmax: the first of the maxima
    return Crossing(int(curve.steps[i]), float(curve.minutes[i]), float(curve.values[i]))


def last_point(curve: Scalars) -> Crossing | None:
    """The point of ``curve`` at its largest agent step; None if it has none."""
    if not len(curve.steps):
        return None
    return Crossing(int(curve.steps[-1]), float(curve.minutes[-1]), float(curve.values[-1]))
