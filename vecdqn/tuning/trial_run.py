"""One trial as an ordinary ``train.py`` run in a child process, followed through its event file.

The child is ``train.py`` itself (``vecdqn.cli.main``) with the trial's command line, so a trial's
run folder is like any other (TensorBoard events, ``config.json``, checkpoints): ``plot.py``,
``evaluate.py`` and ``--resume`` work on it. Its console output goes to ``train.log`` in its run
folder.

Stopping: the child runs in its own process group, so a Ctrl-C at the terminal reaches the tuner
only, and the tuner forwards exactly one SIGINT (`TrialProcess.interrupt`): the child finishes its
step, checkpoints and exits 130, as ``train.py`` does on Ctrl-C. A second signal forwarded means
"stop at once". The child also SIGINTs itself if the tuner dies without a chance to forward
anything (`child_main`), so no trial outlives its tuner. `TrialProcess.close` waits for it
and, past a grace period, kills its whole process group (the env workers included).

Following: `EventFollower` re-reads the run folder's event file with TensorBoard's own
``EventAccumulator`` (incrementally). `vecdqn.metrics.MetricsLogger` flushes ``eval/*`` scalars
as soon as they are written, so each periodic evaluation is on disk when it happens, together
with every game that ended before it.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import IO, Any

import numpy as np
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import vecdqn

# The tags read and the training objective's trailing window: those of scripts/plot.py's curves.
from vecdqn.curves import EVAL_TAG, TRAIN_TAG, WINDOW, event_files, quiet_tensorboard

__all__ = ["EVAL_TAG", "TRAIN_TAG", "EventFollower", "TrialProcess"]


# The child: train.py's entry point behind a watch on the tuner (see `child_main`); importable
# wherever the tuner's vecdqn is (PYTHONPATH is set in `TrialProcess.start`).
_CHILD = "from vecdqn.tuning.trial_run import child_main; child_main()"
# The tuner's pid, as the child's parent; the child's watch compares its parent with it.
_TUNER_PID = "VECDQN_TUNER_PID"
# An error line as the scripts print it (`vecdqn.cli.error_line`): "train.py: error: <message>".
ERROR_LINE = re.compile(r"(?:[\w.-]+: )?error: ")


def child_main() -> None:
    """Run ``train.py`` (``vecdqn.cli.main``) with ``sys.argv[1:]``, and SIGINT this process once
    if the tuner that started it goes away without a word (SIGKILL, a crash): the run then
    checkpoints and exits as on Ctrl-C instead of running on unwatched.

    Why a watching thread rather than Linux's ``PR_SET_PDEATHSIG``: the kernel sends that signal
    again each time the child is handed to another thread of the dying tuner, and train.py reads
    a second SIGINT as "stop at once, no checkpoint".
    """
    import threading
    import time

    from vecdqn.cli import PROG, main
    from vecdqn.signals import exit_process

    tuner = int(os.environ.pop(_TUNER_PID, "0")) or os.getppid()

    def watch() -> None:
        while os.getppid() == tuner:
            time.sleep(1.0)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=watch, name="tuner-watch", daemon=True).start()
    exit_process(main(sys.argv[1:]), PROG)  # as scripts/train.py ends


class TrialProcess:
    """``train.py`` with ``argv``, its output in ``log_path``.

    Args:
        argv: the trial's ``train.py`` arguments.
        log_path: file for the child's stdout and stderr (its folder must exist).
        grace_s: seconds `close` waits after a stop request before killing the process group.
    """

    def __init__(self, argv: list[str], log_path: Path, grace_s: float = 300.0):
        self.argv = argv
        self.log_path = log_path
        self.grace_s = grace_s
        self.proc: subprocess.Popen[bytes] | None = None
        self.signals_sent = 0
        self._log: IO[bytes] | None = None

    def start(self) -> TrialProcess:
        """Start the child in a process group of its own; returns self."""
        package_root = str(Path(vecdqn.__file__).resolve().parents[1])
        env = {**os.environ, "PYTHONUNBUFFERED": "1", _TUNER_PID: str(os.getpid()),
               "PYTHONPATH": os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH")) if p)}
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in close()
        self.proc = subprocess.Popen([sys.executable, "-c", _CHILD, *self.argv], stdin=subprocess.DEVNULL,
                                     stdout=self._log, stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True)
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None, "not started"
        return self.proc.pid

    def poll(self) -> int | None:
        """The exit code, or None while it runs."""
        return None if self.proc is None else self.proc.poll()

    def interrupt(self, signum: int = signal.SIGINT) -> None:
        """Send ``signum`` to the child (the first: checkpoint and exit; a second: stop at once).
        Does nothing before `start` or after the child exited."""
        if self.proc is not None and self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signum)
            self.signals_sent += 1

    def wait(self, timeout: float | None = None) -> int | None:
        """Wait up to ``timeout`` seconds; the exit code, or None if it still runs."""
        if self.proc is None:
            return None
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def close(self) -> int | None:
        """Make sure nothing of the trial is left: ask a running child to stop (checkpoint), wait
        up to ``grace_s``, then kill its process group; close the log. Returns the exit code."""
        code = None
        if self.proc is not None:
            if self.poll() is None and self.signals_sent == 0:
                self.interrupt()
            code = self.wait(self.grace_s)
            if code is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(self.pid, signal.SIGKILL)
                code = self.wait(30)
        if self._log is not None:
            self._log.close()
            self._log = None
        return code

    def error_line(self) -> str:
        """The child's error message: its last ``train.py: error: ...`` line (`ERROR_LINE`: any
        ``<program>: error:`` or a bare ``error:``), else its last non-empty line (a traceback's)."""
        try:
            lines = [ln.strip() for ln in self.log_path.read_text(errors="replace").splitlines() if ln.strip()]
        except OSError:
            return ""
        errors = [ln for ln in lines if ERROR_LINE.match(ln)]
        return (errors or lines or [""])[-1]


class EventFollower:
    """Reads a growing run folder's evaluations and training games.

    Args:
        run_dir: the trial's run folder.
        objective: ``"eval"`` (the periodic evaluation's mean return) or ``"train"`` (the mean
            raw return of the last 100 training games at that step).
    """

    def __init__(self, run_dir: Path, objective: str):
        if objective not in ("eval", "train"):
            raise ValueError(f"objective {objective!r} is not 'eval' or 'train'")
        self.run_dir = run_dir
        self.objective = objective
        self._accumulator: EventAccumulator | None = None
        self._reported = 0  # evaluations already returned by `new_values`

    def _reload(self) -> EventAccumulator | None:
        if self._accumulator is None:
            if not (self.run_dir.is_dir() and event_files(self.run_dir)):
                return None
            # Keep every scalar (the trailing mean needs the games); images (videos) are not read.
            self._accumulator = EventAccumulator(str(self.run_dir), size_guidance={"scalars": 0, "images": 1})
        with quiet_tensorboard():
            self._accumulator.Reload()
        return self._accumulator

    def _events(self, tag: str) -> list[Any]:
        acc = self._accumulator
        return acc.Scalars(tag) if acc is not None and tag in acc.Tags()["scalars"] else []

    def new_values(self) -> list[tuple[int, float]]:
        """``(agent step, objective value)`` at each evaluation written since the last call."""
        if self._reload() is None:
            return []
        evals = self._events(EVAL_TAG)
        fresh, self._reported = evals[self._reported:], len(evals)
        if not fresh:
            return []
        if self.objective == "eval":
            return [(int(e.step), float(e.value)) for e in fresh]
        games = self._events(TRAIN_TAG)
        steps = np.array([g.step for g in games], dtype=np.int64)
        values = np.array([g.value for g in games], dtype=np.float64)
        out = []
        for e in fresh:
            upto = values[steps <= e.step][-WINDOW:]
            if len(upto):
                out.append((int(e.step), float(upto.mean())))
        return out

    def final_value(self) -> float | None:
        """The objective at the end of a finished run: the last evaluation's mean return, or the
        mean raw return of the last 100 training games (None if there is none)."""
        self._reload()
        if self.objective == "eval":
            evals = self._events(EVAL_TAG)
            return float(evals[-1].value) if evals else None
        games = self._events(TRAIN_TAG)[-WINDOW:]
        return float(np.mean([g.value for g in games])) if games else None
