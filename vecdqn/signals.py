"""SIGINT and SIGTERM: a run's request to stop after its current step, and the handlers'
install and uninstall that the training core and the tuner share.

The shell's convention for the exit codes: 128 + the signal's number (130 for SIGINT, 143 for
SIGTERM).

How a script's process ends (`exit_process`): once it has reported, a signal stops nothing and
gets one line; the interpreter's teardown, where CPython would put the default handlers back (a
Ctrl-C there killed the process with exit code 130 and no word), never runs.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn

__all__ = ["Handlers", "Interrupted", "StopSignals", "as_ctrl_c", "exit_process", "exit_signals", "exiting_line"]

_exit_code: int | None = None  # the code `exit_process` ends the process with, once it is called


def _interrupted_in_one_line(kind: type[BaseException], value: BaseException, tb: Any) -> None:
    """``sys.excepthook`` of vecdqn's scripts: a Ctrl-C that no handler caught (while the imports
    run, before a script installs its own) is one line, not a traceback; anything else as before.
    The interpreter then ends the process by SIGINT, as for any uncaught KeyboardInterrupt."""
    if issubclass(kind, KeyboardInterrupt):
        print(f"{Path(sys.argv[0]).name}: interrupted", file=sys.stderr, flush=True)
    else:
        _previous_excepthook(kind, value, tb)


# Installed on the first import of vecdqn (its __init__ imports this module first), for scripts/*.py only.
_previous_excepthook = sys.excepthook
if sys.argv and sys.argv[0] and Path(sys.argv[0]).resolve().parent == Path(__file__).resolve().parents[1] / "scripts":
    sys.excepthook = _interrupted_in_one_line


class Handlers:
    """``on_signal(signum, frame)`` as the handler of SIGINT and SIGTERM between `install` and
    `uninstall` (or inside ``with``), the previous handlers put back after. Main thread only."""

    def __init__(self, on_signal: Callable[[int, Any], None]):
        self.on_signal = on_signal
        self._previous: dict[int, Any] = {}

    def install(self) -> None:
        for s in (signal.SIGINT, signal.SIGTERM):
            self._previous[s] = signal.signal(s, self.on_signal)

    def uninstall(self) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler)
        self._previous.clear()

    def __enter__(self) -> Handlers:
        self.install()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.uninstall()


@contextlib.contextmanager
def as_ctrl_c() -> Iterator[list[int]]:
    """Inside, SIGINT and SIGTERM raise ``KeyboardInterrupt`` (a SIGINT too where the process was
    started with it ignored, as a shell's ``&`` does); yields the list the signals received are
    appended to. For a script with nothing to save when it is stopped."""
    received: list[int] = []

    def on_signal(signum: int, frame: Any) -> None:
        received.append(signum)
        raise KeyboardInterrupt

    with Handlers(on_signal):
        yield received


class Interrupted(Exception):
    """The run was stopped by SIGINT or SIGTERM after writing a checkpoint."""

    def __init__(self, signum: int, checkpoint_path: Path | None):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.checkpoint_path = checkpoint_path

    @property
    def exit_code(self) -> int:
        return 128 + self.signum  # 130 for SIGINT, 143 for SIGTERM (shell convention)


class StopSignals:
    """SIGINT/SIGTERM as a request to stop after the current step (a second one stops at once).

    ``with StopSignals(enabled, say) as stop:`` installs the handlers (main thread only) and puts
    the previous ones back on exit; ``stop.signum`` is the first signal received, or None.
    Inside ``with stop.held():`` a second signal is recorded too, not raised. Inside ``with
    stop.finishing():`` (a run's end: its final checkpoints, then the close of its workers and
    writers) the first signal is recorded without a word, for the caller to report once the
    close is done; a second one still stops at once.
    """

    def __init__(self, enabled: bool = True, say: Callable[[str], Any] | None = None):
        self.enabled = enabled
        self.say = say
        self.signum: int | None = None
        self._handlers = Handlers(self._on_signal)
        self._held = False
        self._finishing = False

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """No KeyboardInterrupt inside: for a call that must not be cut halfway, such as starting
        Ray (its half-started processes would outlive the run); the run stops after it."""
        self._held = True
        try:
            yield
        finally:
            self._held = False

    @contextlib.contextmanager
    def finishing(self) -> Iterator[None]:
        """The end of a run, where there is nothing left to stop early: a first signal is only
        recorded in `signum` (its "finishing this step" line would be false here), and the
        caller reports it after the close; a second one still raises KeyboardInterrupt."""
        self._finishing = True
        try:
            yield
        finally:
            self._finishing = False

    def install(self) -> StopSignals:
        """Install the handlers (if enabled); returns self."""
        if self.enabled:
            self._handlers.install()
        return self

    def uninstall(self) -> None:
        """Put the previous handlers back."""
        self._handlers.uninstall()

    def __enter__(self) -> StopSignals:
        return self.install()

    def __exit__(self, *exc: Any) -> None:
        self.uninstall()

    def _on_signal(self, signum: int, frame: Any) -> None:
        if self.signum is not None:
            if self._held:
                return
            raise KeyboardInterrupt  # second signal: stop now; finally-blocks still close the workers
        self.signum = signum
        if self.say is not None and not self._finishing:
            self.say(f"{signal.Signals(signum).name}: finishing this step and writing a checkpoint "
                     "(send it again to stop at once)")


def exiting_line(prog: str, signum: int) -> str:
    """The one line for a signal that came once the script had done its work:
    ``<prog>: <SIGNAL> while exiting; nothing was stopped``."""
    return f"{prog}: {signal.Signals(signum).name} while exiting; nothing was stopped"


def exit_signals(code: int, prog: str) -> None:
    """From here on a SIGINT or SIGTERM stops nothing: it prints one line on stderr,
    ``<prog>: <SIGNAL> while exiting; nothing was stopped``, and ends the process at once with
    ``code``. For a script that has done its work and is only exiting."""

    def on_signal(signum: int, frame: Any) -> None:
        try:
            print(exiting_line(prog, signum), file=sys.stderr, flush=True)
        finally:
            os._exit(code)

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, on_signal)


def exit_process(code: int, prog: str) -> NoReturn:
    """End a script's process with ``code``, from its ``__main__`` once it has reported.

    The interpreter's exit work that matters (non-daemon threads joined, then the atexit callbacks:
    multiprocessing's child reaping, logging's and W&B's flush, Ray's shutdown) runs as usual, under
    `exit_signals`: a SIGINT or SIGTERM there gets its one line and the same ``code``. The last
    atexit callback, registered when vecdqn is first imported (so before any library's), then ends
    the process with ``os._exit(code)``: the teardown after it frees memory only, as every file and
    worker is closed by then, and a signal in it would meet the default handlers."""
    global _exit_code
    exit_signals(code, prog)
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    _exit_code = code
    sys.exit(code)


@atexit.register
def _end_before_teardown() -> None:
    """The last atexit callback: after `exit_process`, end the process before the teardown."""
    if _exit_code is None:
        return
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream: nothing left to tell
            pass
    os._exit(_exit_code)
