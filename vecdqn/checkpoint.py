"""Checkpoint files: written atomically, found from a run folder, read back as a policy.

Writing goes to a temporary file in the same folder, fsynced, then renamed: a reader never sees
a half-written checkpoint, either the old file or the new one. A run folder's checkpoints are
``<run>/checkpoints/latest.pt`` (saved periodically) and ``<run>/checkpoints/final.pt`` (at the
end of the run). `load_policy` rebuilds the online Q-network of a checkpoint for evaluation.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import torch

from vecdqn.config import Config
from vecdqn.model import QNetwork

__all__ = ["CheckpointError", "Policy", "load", "load_policy", "resolve_checkpoint", "save_atomic"]


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


def resolve_checkpoint(path: str | os.PathLike[str]) -> Path:
    """A checkpoint file; for a run folder ``checkpoints/latest.pt`` if present, else ``final.pt``.

    Raises:
        CheckpointError: if the path does not exist or the folder holds neither file.
    """
    path = Path(path)
    if path.is_dir():
        for name in ("latest.pt", "final.pt"):
            candidate = path / "checkpoints" / name
            if candidate.is_file():
                return candidate
        raise CheckpointError(
            f"run folder {path} has no checkpoints/latest.pt or checkpoints/final.pt; pass a "
            "checkpoint file or a run folder that finished or saved a checkpoint"
        )
    if not path.exists():
        raise CheckpointError(f"checkpoint {path} does not exist")
    return path


@dataclass
class Policy:
    """A Q-network loaded from a checkpoint, with what came with it.

    Attributes:
        network: ``(B, S, 84, 84) uint8 -> (B, A) float32`` on ``device``, in eval mode.
        config: the training run's `Config` (env id and preprocessing).
        path: the checkpoint file read (for a run folder, the file `resolve_checkpoint` chose).
        step: the agent step the checkpoint was saved at (agent steps summed over all envs), or
            None if the checkpoint does not say.
        device: where ``network`` lives.
    """

    network: QNetwork
    config: Config
    path: Path
    step: int | None
    device: torch.device


def load_policy(path: str | os.PathLike[str], device: torch.device | str = "cpu") -> Policy:
    """Load the online Q-network of a vecdqn checkpoint (file or run folder) onto ``device``.

    The network is rebuilt from the saved ``n_actions``, ``obs_shape`` and the config's
    ``dueling`` and ``hidden_size``, then given the weights ``agent["online"]``; it is in eval mode.

    Raises:
        CheckpointError: missing, corrupt or foreign checkpoint, or weights that do not fit the
            network the checkpoint describes.
    """
    file = resolve_checkpoint(path)
    state = load(file, required=("config", "agent", "n_actions", "obs_shape"))
    try:
        config = Config.from_dict(state["config"])
        network = _network(state, config)
    except (KeyError, TypeError, ValueError, RuntimeError) as err:
        # RuntimeError: load_state_dict's missing/unexpected keys or size mismatches.
        first_line = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise CheckpointError(
            f"checkpoint {file} does not hold a loadable Q-network "
            f"({type(err).__name__}: {first_line})"
        ) from None
    device = torch.device(device)
    network.to(device).eval()
    step = state.get("step")
    return Policy(network, config, file, int(step) if step is not None else None, device)


def _network(state: dict[str, Any], config: Config) -> QNetwork:
    """The online Q-network of a loaded checkpoint, on the CPU.

    Raises:
        KeyError, TypeError, ValueError, RuntimeError: the saved shapes or weights do not make a
            network (`load_policy` reports them as one `CheckpointError`).
    """
    obs_shape = tuple(int(x) for x in state["obs_shape"])
    if len(obs_shape) != 3 or obs_shape[1] != obs_shape[2]:
        raise ValueError(f"obs_shape {obs_shape} is not (S, size, size)")
    network = QNetwork(
        int(state["n_actions"]),
        in_channels=obs_shape[0],
        screen_size=obs_shape[1],
        dueling=config.dueling,
        hidden_size=config.hidden_size,
    )
    network.load_state_dict(state["agent"]["online"])
    return network
