"""Weights & Biases tracking of a run (``--track``), built on wandb's own TensorBoard sync.

Nothing here logs a scalar. `start` calls ``wandb.init(sync_tensorboard=True)`` before the run's
`SummaryWriter` exists (`vecdqn.metrics.MetricsLogger` calls it right before creating the
writer); wandb patches TensorBoard's event-file writer and reads back every event the run writes,
so W&B shows the same tags at the same steps (agent steps, as ``global_step``) as TensorBoard,
the evaluation videos included (TensorBoard's animated GIFs become W&B images), with no second
logging path to keep in sync. The run's resolved configuration goes to ``wandb.init(config=...)``.

A resumed run continues the same W&B run: the run id is kept in the run folder
(`RUN_ID_FILE`) and passed back with ``resume="allow"``. ``WANDB_MODE=offline`` writes the run
under ``WANDB_DIR`` (default ``./wandb``) for a later ``wandb sync``; no account or network needed.

wandb is an optional dependency (``pip install -e ".[track]"``): importing this module does not
import it; `require_wandb` says what to install.
"""

from __future__ import annotations

import os
import secrets
import string
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from vecdqn.extras import require

__all__ = ["RUN_ID_FILE", "WANDB_MISSING", "require_wandb", "start"]

WANDB_MISSING = 'the wandb package is not installed; --track needs it: pip install -e ".[track]"'

# The run folder's file holding the W&B run id, so that --resume continues the same W&B run.
RUN_ID_FILE = "wandb_run_id"


def require_wandb() -> None:
    """Raise ``ImportError(WANDB_MISSING)`` when wandb cannot be imported (checked without
    importing it: the check runs before any env worker starts)."""
    require("wandb", WANDB_MISSING)


def run_id(run_dir: str | os.PathLike[str]) -> str | None:
    """The W&B run id kept in ``run_dir`` (None when the run was never tracked)."""
    path = Path(run_dir) / RUN_ID_FILE
    if not path.is_file():
        return None
    return path.read_text().strip() or None


def new_run_id() -> str:
    """A fresh W&B run id: 8 random lowercase letters and digits (W&B's own form)."""
    return "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(8))


def start(run_dir: str | os.PathLike[str], config: Mapping[str, Any]) -> Any:
    """Start (or, for a run folder that holds a run id, resume) the W&B run of ``run_dir``.

    Must be called before the run's `SummaryWriter` is created: ``sync_tensorboard`` patches
    TensorBoard's writer class, so only writers created afterwards are followed.

    Args:
        run_dir: the run folder (it exists); the run id is read from or written to it.
        config: the run's resolved configuration (``wandb_project``, ``wandb_entity`` and
            ``wandb_group`` name the W&B project, entity and group; empty: W&B's defaults).

    Returns:
        the ``wandb.Run``; its ``finish()`` is called once the run's writer has closed (wandb
        reads the last events first), and its ``id`` stays the same across resumes.

    Raises:
        ImportError: wandb is not installed (`WANDB_MISSING`).
    """
    require_wandb()
    import wandb

    folder = Path(run_dir)
    known = run_id(folder)
    if known is None:
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
        sync_tensorboard=True,
    )
    return run
