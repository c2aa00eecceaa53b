"""Weights & Biases tracking of a run (``--track``): what TensorBoard holds, at the same agent steps.

`vecdqn.metrics.MetricsLogger` hands every scalar and evaluation video it writes to TensorBoard
to the run's `Tracker` as well, which logs them with W&B's own step set to the agent step: one
W&B history row per agent step, holding every tag written at that step (the videos as W&B images
of TensorBoard's animated GIFs). The run's resolved configuration goes to
``wandb.init(config=...)``.

Every part of a run (a first process and each ``--resume``) is the same W&B run: the run id is
kept in the run folder (`RUN_ID_FILE`) and passed back with ``resume="allow"``. A process killed
hard (SIGKILL, out of memory) loses what wandb had not yet written, while the run's event files
keep what TensorBoard flushed; so the event files are what a part sends for the steps its own
process did not log:

- Online, values go to W&B as the run goes. A resumed part first sends, from the event files,
  what TensorBoard shows after the last step W&B's server holds (``run.starting_step - 1``) up to
  the checkpoint's step, then goes on from the step after the checkpoint's, as TensorBoard does.
  Where the server already holds steps after the checkpoint's (sent by a process killed later),
  it keeps those values: W&B takes one value per step.
- Offline (``WANDB_MODE=offline``, written under ``WANDB_DIR``, default ``./wandb``, for a later
  ``wandb sync``; no account or network needed), a part sends nothing while it runs and, when it
  finishes, sends what the event files hold after the last step an earlier part sent
  (`STEP_FILE`). A killed part so leaves no rows that the next part sends again.

wandb is an optional dependency (``pip install -e ".[track]"``): importing this module does not
import it; `require_wandb` says what to install.
"""

from __future__ import annotations

import math
import os
import secrets
import string
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from vecdqn.extras import require

__all__ = ["PROJECT_FORBIDDEN", "PROJECT_MAX_LENGTH", "RUN_ID_FILE", "STEP_FILE", "WANDB_MISSING", "Tracker",
           "check_wandb_names", "require_wandb", "start"]

WANDB_MISSING = 'the wandb package is not installed; --track needs it: pip install -e ".[track]"'

# The run folder's file holding the W&B run id, so that --resume continues the same W&B run.
RUN_ID_FILE = "wandb_run_id"
# The run folder's file holding the last agent step a cleanly finished part sent to the W&B run.
STEP_FILE = "wandb_step"

# W&B's rule for project names (wandb.sdk.wandb_settings.Settings.validate_project, wandb 0.31);
# entities and groups have none on the client side.
PROJECT_FORBIDDEN = "/\\#?%:"
PROJECT_MAX_LENGTH = 128


def require_wandb() -> None:
    """Raise ``ImportError(WANDB_MISSING)`` when wandb cannot be imported (checked without
    importing it: the check runs before any env worker starts)."""
    require("wandb", WANDB_MISSING)


def check_wandb_names(config: Mapping[str, Any]) -> None:
    """Refuse a ``wandb_project`` that W&B refuses, before anything starts (without importing wandb).
    ``wandb_entity`` and ``wandb_group`` pass: W&B's client has no rule for them.

    Raises:
        ValueError: one line naming ``--wandb-project``, its value and what W&B allows: at most
            `PROJECT_MAX_LENGTH` characters, none of `PROJECT_FORBIDDEN`.
    """
    project = config.get("wandb_project") or ""
    found = "".join(sorted({c for c in project if c in PROJECT_FORBIDDEN}, key=PROJECT_FORBIDDEN.index))
    if found:
        hint = ""
        if found == "/" and project.count("/") == 1 and all(project.split("/")):
            entity, name = project.split("/")
            hint = f"; for project {name} of entity {entity}, give --wandb-entity {entity} --wandb-project {name}"
        raise ValueError(f"--wandb-project {project}: a W&B project name may not contain any of "
                         f"{' '.join(PROJECT_FORBIDDEN)} (found {' '.join(found)}){hint}")
    if len(project) > PROJECT_MAX_LENGTH:
        raise ValueError(f"--wandb-project {project[:20]}... ({len(project)} characters): a W&B project name has at "
                         f"most {PROJECT_MAX_LENGTH} characters")


def run_id(run_dir: str | os.PathLike[str]) -> str | None:
    """The W&B run id kept in ``run_dir`` (None when the run was never tracked)."""
    path = Path(run_dir) / RUN_ID_FILE
    if not path.is_file():
        return None
    return path.read_text().strip() or None


def sent_step(run_dir: str | os.PathLike[str]) -> int:
    """The last agent step a cleanly finished part of the run sent to its W&B run (-1: none)."""
    path = Path(run_dir) / STEP_FILE
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return -1


def new_run_id() -> str:
    """A fresh W&B run id: 8 random lowercase letters and digits (W&B's own form)."""
    return "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(8))


class _Gif(bytes):
    """An animated GIF's bytes, logged as a W&B image."""


class Tracker:
    """Logs a run's TensorBoard data to its W&B run, one history row per agent step.

    Online, values are gathered per step and sent in step order once the run has passed that step
    (`reached`): one step's row is written from several places (games, scalars, an evaluation)
    before the run moves on. Offline, nothing is sent while the run goes on: `finish` sends what
    the run's event files hold, so that a part of the run killed hard leaves no rows in its W&B
    files that the next part would send again. W&B takes no step twice, nor one below the last it
    took: values at steps up to `sent` are dropped.

    Args:
        run: the ``wandb.Run``.
        run_dir: the run folder, holding the event files; `finish` writes `STEP_FILE` there.
        held: the W&B run already holds every point up to this agent step (-1: none).

    Attributes:
        sent: the last agent step the W&B run holds.
        live: whether values are sent as the run goes (online), else when it finishes (offline).
    """

    def __init__(self, run: Any, run_dir: str | os.PathLike[str], held: int):
        self.run, self.run_dir, self.sent = run, Path(run_dir), held
        self.live = not run.offline
        self._rows: dict[int, dict[str, Any]] = {}

    def scalars(self, step: int, values: Mapping[str, float]) -> None:
        """Add ``{tag: value}`` to the row of agent step ``step``."""
        if self.live and step > self.sent:
            self._rows.setdefault(step, {}).update(values)

    def image(self, tag: str, gif: bytes, step: int) -> None:
        """Add an animated GIF (its file's bytes) to the row of agent step ``step``."""
        if self.live and step > self.sent:
            self._rows.setdefault(step, {})[tag] = _Gif(gif)

    def reached(self, step: int) -> None:
        """The run is at agent step ``step``: send the rows of the steps before it."""
        for done in sorted(s for s in self._rows if s < step):
            self._send(done, self._rows.pop(done))

    def backfill(self, upto: float) -> int:
        """Send what TensorBoard shows of the run's event files (scalars and images, each step's
        row stamped with its events' time) at the steps after `sent` up to ``upto``; returns the
        number of rows sent."""
        rows, times = board_rows(self.run_dir, after=self.sent, upto=upto)
        for step in sorted(rows):
            self._send(step, rows[step], times[step])
        return len(rows)

    def finish(self) -> None:
        """Send every row left (offline: everything the event files hold after `sent`; call it
        once the run's writer is closed), finish the W&B run and record the last step sent
        (`STEP_FILE`)."""
        if self.live:
            for step in sorted(self._rows):
                self._send(step, self._rows.pop(step))
        else:
            self.backfill(math.inf)
        self.run.finish()
        (self.run_dir / STEP_FILE).write_text(f"{self.sent}\n")

    def _send(self, step: int, row: dict[str, Any], wall_time: float | None = None) -> None:
        if step <= self.sent or not row:
            return
        with tempfile.TemporaryDirectory(prefix="vecdqn-gif-") as folder:
            data = {tag: self._media(value, Path(folder) / f"{i}.gif") if isinstance(value, _Gif) else value
                    for i, (tag, value) in enumerate(row.items())}
            if wall_time is not None:
                data["_timestamp"] = wall_time
            # wandb copies a logged image's file into the run before log() returns.
            self.run.log(data, step=step, commit=True)
        self.sent = step

    @staticmethod
    def _media(gif: bytes, path: Path) -> Any:
        import wandb

        path.write_bytes(gif)
        return wandb.Image(str(path))


def board_rows(run_dir: str | os.PathLike[str], *, after: int, upto: float) -> tuple[dict[int, dict], dict[int, float]]:
    """What TensorBoard shows of the event files directly in ``run_dir`` at agent steps in
    ``(after, upto]``: ``{step: {tag: float value or GIF bytes}}`` and ``{step: latest event time
    (Unix seconds)}``. Events a resumed run superseded are left out, as TensorBoard leaves them out."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from vecdqn.curves import quiet_tensorboard

    rows: dict[int, dict[str, Any]] = {}
    times: dict[int, float] = {}
    if upto <= after or not Path(run_dir).is_dir():
        return rows, times
    accumulator = EventAccumulator(str(run_dir), size_guidance={"scalars": 0, "images": 0})
    with quiet_tensorboard():
        accumulator.Reload()
    tags = accumulator.Tags()
    events = [(tag, e, e.value) for tag in tags["scalars"] for e in accumulator.Scalars(tag)]
    events += [(tag, e, _Gif(e.encoded_image_string)) for tag in tags["images"] for e in accumulator.Images(tag)]
    for tag, event, value in events:
        if after < event.step <= upto:
            rows.setdefault(event.step, {})[tag] = value
            times[event.step] = max(times.get(event.step, 0.0), event.wall_time)
    return rows, times


def start(run_dir: str | os.PathLike[str], config: Mapping[str, Any], *, resume_step: int = 0) -> Tracker:
    """Start (or, for a run folder that holds a run id, resume) the W&B run of ``run_dir``.

    Online, a resumed run first sends what TensorBoard shows of the run's event files after the
    last step the W&B run holds, up to ``resume_step`` (see the module docstring).

    Args:
        run_dir: the run folder (it exists); the run id is read from or written to it.
        config: the run's resolved configuration (``wandb_project``, ``wandb_entity`` and
            ``wandb_group`` name the W&B project, entity and group; empty: W&B's defaults).
        resume_step: the agent step the run continues from (0: a new run).

    Returns:
        the run's `Tracker`; its ``run.id`` stays the same across resumes.

    Raises:
        ImportError: wandb is not installed (`WANDB_MISSING`).
    """
    require_wandb()
    import wandb

    folder = Path(run_dir)
    known = run_id(folder)
    new = known is None
    if new:
        known = new_run_id()
        (folder / RUN_ID_FILE).write_text(known + "\n")
    run = wandb.init(
        project=config.get("wandb_project") or None,
        entity=config.get("wandb_entity") or None,
        group=config.get("wandb_group") or None,
        name=folder.name,
        config=dict(config),
        id=known,
        resume="allow",
    )
    # Online, W&B's server says where the run stands (its steps are agent steps); offline, only
    # a part that finished cleanly is known to have written its steps.
    if run.resumed:
        held = run.starting_step - 1
    else:
        held = -1 if new else sent_step(folder)
    tracker = Tracker(run, folder, held)
    if tracker.live:
        tracker.backfill(resume_step)
    return tracker
