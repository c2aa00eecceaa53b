"""TensorBoard logging, episode statistics and the progress bar: the one place metrics are written.

The logger only writes: it is given every value it shows. The run's own numbers (the game count,
the recent returns) live in `vecdqn.train_state.TrainState`, saved by the checkpoint.

Tags: ``charts/episodic_return`` and ``charts/episodic_length`` (whole games, raw
score, length in emulator frames), ``charts/epsilon``, ``charts/beta``, ``charts/learning_rate``,
``charts/SPS`` (agent steps per second), ``losses/td_loss``, ``losses/q_values``,
``replay/size``, ``replay/priority_max``. Every scalar's global step is the agent step.

With ``--track`` every scalar and video written here also goes to the run's Weights & Biases
run, at the same agent step (`vecdqn.tracking.Tracker`), started here right before the writer is
created.

A full disk: TensorBoard's writer writes in a thread of its own, which dies on the error and hands
it to the writer's next call; the logger turns it into one `LogWriteError` there (a
`vecdqn.checkpoint.CheckpointError`, so train.py ends the run in one line naming the last
checkpoint, which is kept), and the dying thread's traceback is not printed.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
from tensorboard.compat.proto.event_pb2 import Event, SessionLog
from tensorboard.compat.proto.summary_pb2 import Summary
from tensorboard.summary.writer.event_file_writer import EventFileWriter
from tensorboard.summary.writer.record_writer import RecordWriter
from torch.utils.tensorboard import SummaryWriter
from torch.utils.tensorboard.summary import hparams
from tqdm import tqdm

from vecdqn import tracking
from vecdqn.checkpoint import CheckpointError
from vecdqn.curves import CHECKPOINT_EVALS, checkpoint_evals, event_files
from vecdqn.video import encode_gif


class LogWriteError(CheckpointError):
    """The run's TensorBoard event file could not be written (e.g. the disk is full). A
    `vecdqn.checkpoint.CheckpointError`: train.py ends the run as for a checkpoint that could not be
    written, with one line naming the last checkpoint (kept) and exit code 1."""


# "before": the threading.excepthook that `_quiet_writer_threads` last replaced
_HOOKS: dict[str, Callable[[threading.ExceptHookArgs], object]] = {}


def _quiet_writer_threads(args: threading.ExceptHookArgs) -> None:
    """``threading.excepthook`` that prints nothing for an ``OSError`` of a TensorBoard event
    writer's thread: the writer raises it again at its next call, where `MetricsLogger` reports it
    in one line. Any other exception goes to the hook this one replaced."""
    if isinstance(args.exc_value, OSError) and type(args.thread).__module__ == EventFileWriter.__module__:
        return
    _HOOKS.get("before", threading.__excepthook__)(args)


def _install_quiet_writer_threads() -> None:
    """Make `_quiet_writer_threads` the ``threading.excepthook``, over the one in place, unless it
    is already (a hook set since, e.g. by a test runner, is kept behind it)."""
    if threading.excepthook is not _quiet_writer_threads:
        _HOOKS["before"], threading.excepthook = threading.excepthook, _quiet_writer_threads


class MetricsLogger:
    """Writes scalars to TensorBoard and shows a tqdm bar (agent steps, steps/s, ETA, return).
    It keeps no run state: what it shows of the games, it is given.

    Args:
        run_dir: the run's folder; event files go directly into it.
        config: the run's resolved configuration, written once as text and as hparams; with
            ``track`` set, the run is also sent to Weights & Biases (`vecdqn.tracking.start`).
        total_steps: length of the run in agent steps (the bar's total).
        initial_step: agent step the run starts at (non-zero on resume).
        progress: show the progress bar.

    Raises:
        LogWriteError: from any call, once: the event file could not be written (e.g. the disk is
            full); `close` still closes what it holds.
    """

    def __init__(
        self,
        run_dir: str,
        config: Mapping[str, Any],
        total_steps: int,
        *,
        initial_step: int = 0,
        progress: bool = True,
    ):
        # --track: on resume, the W&B run first takes what it lacks from the event files as they
        # are, before this run's writer supersedes the steps after the checkpoint's.
        self.tracking = tracking.start(run_dir, config, resume_step=initial_step) if config.get("track") else None
        self.run_dir, self._failed = run_dir, False
        _install_quiet_writer_threads()
        try:
            with self._writing():
                # On resume, events a killed process wrote after the checkpoint's step are dropped, so
                # every curve has one value per step (the resumed run writes those steps again).
                self.writer = SummaryWriter(run_dir, purge_step=initial_step + 1 if initial_step else None)
                if initial_step == 0:
                    self._write_config(config)
        except LogWriteError:
            if self.tracking is not None:
                self.tracking.finish()
            raise
        self._total_steps = total_steps
        self._show = progress
        self._last_time = time.perf_counter()
        self._last_step = initial_step
        self._step = initial_step
        self._phase = "warm-up"  # shown until the first update
        # Redraw at most every 0.5 s on a terminal; in a log file (no TTY) every 30 s, so the file
        # stays readable. One bar from start to end: its rate is smoothed (an exponential moving
        # average), so the ETA follows the learner's rate soon after the warm-up ends.
        interactive = sys.stderr.isatty()
        self.bar = tqdm(total=total_steps, initial=initial_step, unit="step", dynamic_ncols=interactive,
                        ncols=None if interactive else 100, disable=not progress, smoothing=0.05,
                        mininterval=0.5 if interactive else 30.0)
        self.bar.set_postfix_str(self._phase, refresh=False)

    def learning_started(self, step: int) -> None:
        """The learner's first update happened: the bar drops its "warm-up" mark (the same bar
        goes on)."""
        self._phase = ""
        self.progress(step)

    def _write_config(self, config: Mapping[str, Any]) -> None:
        table = "|option|value|\n|-|-|\n" + "\n".join(f"|{k}|{v}|" for k, v in config.items())
        self.writer.add_text("config", table, 0)
        self.writer.add_text("config_json", "```\n" + json.dumps(dict(config), indent=2) + "\n```", 0)
        clean = {k: v for k, v in config.items() if isinstance(v, (bool, int, float, str))}
        for summary in hparams(clean, {"charts/episodic_return": 0.0}):
            self.writer.file_writer.add_summary(summary)

    def episode(self, step: int, episodic_return: float, length: float) -> None:
        """Write one finished game at its own agent step: raw return and length in emulator
        frames (``charts/episodic_return``, ``charts/episodic_length``)."""
        self._write(step, {"charts/episodic_return": episodic_return, "charts/episodic_length": length})

    def scalars(self, step: int, values: Mapping[str, float]) -> None:
        """Write ``{tag: value}`` at agent step ``step``.

        Evaluation results (``eval/*`` tags) are flushed to disk at once rather than up to the
        writer's two minutes later: they are rare, and what a watcher acts on (``scripts/tune.py``
        reports each one to its pruner while the run goes on).
        """
        self._write(step, values)
        if any(tag.startswith("eval/") for tag in values):
            self.flush()

    def _write(self, step: int, values: Mapping[str, float]) -> None:
        """Every scalar goes through here: to TensorBoard and, with ``--track``, to W&B."""
        with self._writing():
            for tag, value in values.items():
                self.writer.add_scalar(tag, value, step)
        if self.tracking is not None:
            self.tracking.scalars(step, values)

    def video(self, tag: str, clip: np.ndarray, step: int, fps: float = 15.0) -> None:
        """Write a clip as an animated GIF (`vecdqn.video.encode_gif`), the encoding TensorBoard's
        video view expects.

        Args:
            clip: ``(1, T, 3, H, W) uint8`` RGB frames (the layout of ``add_video``, as
                `vecdqn.video.video_for_tensorboard` makes it).
            fps: playback frames per second.
        """
        frames = np.asarray(clip, dtype=np.uint8)[0].transpose(0, 2, 3, 1)
        _, h, w, _ = frames.shape
        gif = encode_gif(frames, fps)
        image = Summary.Image(height=h, width=w, colorspace=3, encoded_image_string=gif)
        with self._writing():
            self.writer.file_writer.add_summary(Summary(value=[Summary.Value(tag=tag, image=image)]), step)
        if self.tracking is not None:
            self.tracking.image(tag, gif, step)

    def sps(self, step: int) -> float:
        """Agent steps per second since the previous call; writes ``charts/SPS``."""
        now = time.perf_counter()
        rate = (step - self._last_step) / max(now - self._last_time, 1e-9)
        self._last_time, self._last_step = now, step
        self._write(step, {"charts/SPS": rate})
        return rate

    def progress(self, step: int, mean_return: float = math.nan, games: int = 0) -> None:
        """Advance the bar to ``step``; once there are ``games`` (whole games so far), its
        postfix shows them and ``mean_return``, the recent mean raw return. With ``--track``, the
        values of the steps before ``step`` go to W&B (`vecdqn.tracking.Tracker.reached`): nothing
        is written at those steps afterwards."""
        if self.tracking is not None:
            self.tracking.reached(step)
        if games:
            self.bar.set_postfix(ret=f"{mean_return:.2f}", games=games, refresh=False)
            if self._phase:
                self.bar.postfix += f", {self._phase}"
        else:  # long games (Enduro's run ~3,000 agent steps each): learning, no game ended yet
            self.bar.set_postfix_str(self._phase or "games=0", refresh=False)
        self.bar.update(step - self._step)
        self._step = step

    def flush(self) -> None:
        """Write what the event file holds in memory to disk now."""
        with self._writing():
            self.writer.flush()

    def write(self, message: str) -> None:
        """Print a line without breaking the bar."""
        tqdm.write(message)

    def close(self) -> None:
        """Close the bar, the event file and the W&B run.

        Raises:
            LogWriteError: the event file's last events could not be written, unless that was
                reported already or another exception is ending the run (this called from a
                ``finally``), which it would hide.
        """
        self.bar.close()
        ending = sys.exc_info()[1] is not None
        try:
            with self._writing():
                self.writer.close()  # flushes first
        except LogWriteError:
            if not ending:
                raise
        finally:
            if self.tracking is not None:
                self.tracking.finish()
                self.tracking = None

    @contextlib.contextmanager
    def _writing(self) -> Iterator[None]:
        """Around each call of the event writer: its ``OSError`` (its thread's failed write, raised
        again by its next call) becomes `LogWriteError` naming the folder and its free space, the
        first time; later, once reported, it is dropped (the run is ending)."""
        try:
            yield
        except OSError as err:
            if self._failed:
                return
            self._failed = True
            try:
                free = f"; {shutil.disk_usage(self.run_dir).free / 2**20:.1f} MiB free there"
            except OSError:
                free = ""
            said = str(err).splitlines()[0] if str(err) else type(err).__name__
            raise LogWriteError(f"could not write TensorBoard's event file in {self.run_dir} ({said}{free}): the "
                                "run stops; its checkpoints are kept") from err


class EvaluationRunning(OSError):
    """Another `EvalLog` holds the same run folder's checkpoint evaluations."""


class EvalLog:
    """Evaluations of a run's kept checkpoints, written as the run's own periodic evaluations
    would have been: ``eval/return_mean``, ``eval/return_std`` and ``eval/hns`` at each
    checkpoint's agent step, stamped with the time the checkpoint was saved, so TensorBoard and
    `vecdqn.curves` (``scripts/plot.py``) place them on the run's clock.

    They go to the run folder's subfolder `vecdqn.curves.CHECKPOINT_EVALS`, which TensorBoard
    shows as a run of its own (``runs/<run>/checkpoint-evals``): the run's own event files are
    never touched, so a reader following them while the run trains (TensorBoard, ``scripts/tune.py``)
    goes on following them.

    Whole or not at all: `add` only gathers results; `save` writes them at once, merged with the
    earlier saved ones (this evaluation's steps replace theirs, their other steps stay), into a
    temporary file renamed into the subfolder as its newest event file. Each file starts with
    TensorBoard's restart marker at step 0: a reader of the folder (TensorBoard, fresh or showing
    it already) drops the points of the files before it, so it shows one value per step. The
    previous file is kept (a reader may be on it), older ones are removed. Closed without `save`
    (an interrupted evaluation), it leaves the earlier results as they were.

    One at a time: from creation to `close` it holds an exclusive lock on the subfolder's
    ``.lock`` file (which holds its process id).

    Args:
        run_dir: the run folder (holding the run's event files).

    Raises:
        EvaluationRunning: another `EvalLog` (of any process) holds the lock.
    """

    def __init__(self, run_dir: str | os.PathLike[str]):
        self.run_dir = Path(run_dir)
        self.folder = self.run_dir / CHECKPOINT_EVALS
        self.folder.mkdir(exist_ok=True)
        self._lock: int | None = os.open(self.folder / ".lock", os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(self._lock, 32).decode(errors="replace").strip() or "?"
            self.close()
            raise EvaluationRunning(f"{self.folder} is being written by another evaluation (process {holder}); "
                                    "wait for it to end, then evaluate again") from None
        os.ftruncate(self._lock, 0)
        os.write(self._lock, f"{os.getpid()}\n".encode())
        self._points: dict[int, tuple[float, dict[str, float]]] = {}

    def add(self, step: int, values: Mapping[str, float], wall_time: float) -> None:
        """Gather ``{tag: value}`` at agent step ``step`` and Unix time ``wall_time`` (seconds)
        for `save`."""
        self._points[step] = (wall_time, dict(values))

    def save(self) -> Path:
        """Write the gathered results merged with the saved ones (see the class docstring);
        returns the new event file."""
        points = {}
        for tag, events in checkpoint_evals(self.run_dir).items():
            for e in events:
                points.setdefault(e.step, (e.wall_time, {}))[1][tag] = e.value
        points |= self._points
        old = event_files(self.folder)
        # A name after the old ones': TensorBoard reads a folder's event files in name order.
        stamps = [f.name.split(".")[3:4] for f in old]  # events.out.tfevents.<time>...
        stamp = max([time.time_ns(), *(int(t[0]) + 1 for t in stamps if t and t[0].isdigit())])
        path = self.folder / f"events.out.tfevents.{stamp}.checkpoint-evals"
        temporary = self.folder / f".tmp-{os.getpid()}"  # no "tfevents" in its name: readers skip it
        try:
            with open(temporary, "wb") as f:
                records = RecordWriter(f)
                for event in self._events(points):
                    records.write(event.SerializeToString())
                f.flush()
                os.fsync(f.fileno())
            os.replace(temporary, path)
        finally:
            temporary.unlink(missing_ok=True)
        # The previous file stays: a reader that is on it (TensorBoard, between two reloads) cannot
        # move on to the next from a deleted one. Its points go when the reader reaches this file.
        for stale in old[:-1]:
            stale.unlink(missing_ok=True)
        return path

    def _events(self, points: Mapping[int, tuple[float, Mapping[str, float]]]) -> list[Event]:
        """The file's events: its version and a restart at step 0, stamped with the run's first
        event's time (TensorBoard's relative time then matches the run's), then one per step."""
        first = min((wall for wall, _ in points.values()), default=time.time())
        runs_own = event_files(self.run_dir)
        if runs_own:
            head = next(iter(EventFileLoader(str(runs_own[0])).Load()), None)
            if head is not None:
                first = min(first, head.wall_time)
        events = [Event(wall_time=first, file_version="brain.Event:2"),
                  Event(wall_time=first, step=0, session_log=SessionLog(status=SessionLog.START))]
        for step in sorted(points):
            wall, values = points[step]
            summary = Summary(value=[Summary.Value(tag=tag, simple_value=value) for tag, value in values.items()])
            events.append(Event(wall_time=wall, step=step, summary=summary))
        return events

    def close(self) -> None:
        """Release the lock; results not saved are dropped."""
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None

    def __enter__(self) -> EvalLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
