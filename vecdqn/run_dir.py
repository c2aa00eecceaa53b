"""The run folder: its default name, making it one process's for as long as that lives, and its
``error.log``."""

from __future__ import annotations

import fcntl
import os
import time
import traceback
from pathlib import Path

from vecdqn.checkpoint import held_run
from vecdqn.config import Config
from vecdqn.preflight import ConfigError

__all__ = ["claim", "run_name", "write_error_log"]


def run_name(config: Config, now: float | None = None) -> str:
    """``--run-name``, or ``<env_id>__<seed>__<unix time>`` with ``/`` in the env id replaced by ``-``."""
    if config.run_name:
        return config.run_name
    stamp = int(now if now is not None else time.time())
    return f"{config.env_id.replace('/', '-')}__{config.seed}__{stamp}"


def claim(run_dir: Path, *, new: bool, chosen: bool) -> tuple[Path, int]:
    """Make ``run_dir`` this process's: an exclusive lock (``flock``) on the folder, which the
    kernel releases however the process ends. A new run whose name was not chosen (no ``--run-name``)
    and whose folder is taken (a run started in the same second) moves to ``<name>-2``,
    ``<name>-3``, ...

    Args:
        run_dir: the run folder (made if missing).
        new: a new run, whose folder must hold none yet (else a resumed one).
        chosen: its name was given (``--run-name``, or the folder of ``--resume``).

    Returns:
        ``(the run folder, the lock's file descriptor)``: keep it open while the run lasts.

    Raises:
        ConfigError: the folder is another process's, or (a new run) already holds a run.
    """
    base, suffix = Path(run_dir), 1
    while True:
        folder = base if suffix == 1 else base.with_name(f"{base.name}-{suffix}")
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(folder, os.O_RDONLY)  # the folder itself is locked: no file of its own left behind
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            why = held_run(folder) if new else ""
            then = "continue it with --resume" if why == "already holds a run" else f"remove {folder}"
        except BlockingIOError:
            why, then = "is in use by another process", "wait for that process to end"
        if not why:
            return folder, fd
        os.close(fd)
        if chosen or not new:
            flag = "--run-name" if new else "--resume"
            then += " or choose another --run-name" if new else ""
            raise ConfigError(f"{flag} {folder}: the run folder {why}; {then}")
        suffix += 1


def write_error_log(run_dir: Path, err: BaseException, step: int) -> Path | None:
    """Append ``err``'s traceback, and its ``details`` (a `vecdqn.envs.WorkerError`'s worker or
    actor traceback), to ``<run_dir>/error.log``, under a line giving the time and the agent
    ``step``: the console shows one line, the log the rest.

    Returns:
        the file's path; None when it could not be written (no run folder yet, a full disk).
    """
    details = getattr(err, "details", "")
    text = "".join(traceback.format_exception(err)) + (f"\n{details.rstrip()}\n" if details else "")
    path = Path(run_dir) / "error.log"
    try:
        with open(path, "a") as log:
            log.write(f"== {time.strftime('%Y-%m-%d %H:%M:%S')}, agent step {step}: {type(err).__name__}\n{text}\n")
    except OSError:
        return None
    return path
