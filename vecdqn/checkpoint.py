"""Atomic checkpoint files: written to a temporary file in the same folder, fsynced, renamed.

A reader never sees a half-written checkpoint: either the old file or the new one.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import torch


class CheckpointError(Exception):
    """A checkpoint file is missing, truncated or not a vecdqn checkpoint."""


def save_atomic(obj: Any, path: str | os.PathLike[str], dump: Callable[[Any, IO[bytes]], None] = torch.save) -> Path:
    """Write ``obj`` to ``path`` atomically (tmp file + fsync + rename) with ``dump(obj, file)``
    (``torch.save`` by default; e.g. a pickle dump for the replay buffer). Returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            dump(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    # fsync the folder so the rename itself survives a power loss.
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return path


def load(path: str | os.PathLike[str], *, required: tuple[str, ...] = ("config",)) -> dict[str, Any]:
    """Load a checkpoint written by `save_atomic` onto the CPU.

    Raises:
        CheckpointError: naming the file, if it does not exist, cannot be unpickled (corrupt or
            truncated) or lacks one of the ``required`` keys.
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist")
    try:
        state = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as err:  # torch raises several types for a damaged zip/pickle
        raise CheckpointError(f"checkpoint {path} is corrupt or truncated ({type(err).__name__}: {err})") from None
    if not isinstance(state, dict) or any(key not in state for key in required):
        raise CheckpointError(f"checkpoint {path} is not a vecdqn checkpoint (missing {list(required)})")
    return state
