"""Checkpoint files: atomic writes, safe loads, the training checkpoint as one unit, and the
policy a checkpoint holds.

* **Atomic.** Every file is written to a temporary file in the same folder, fsynced and renamed:
  a reader sees the old file or the new one, never half of one.
* **Safe to load.** A checkpoint is read with ``torch.load(weights_only=True)`` (tensors and
  plain containers only) and a saved replay with `vecdqn.safe_pickle` (an allowlist of NumPy
  and vecdqn types): a crafted file cannot run code; it is refused with `CheckpointError`.
* **One unit.** With ``--save-replay`` the replay goes to a file of its own whose name and token
  the checkpoint records; it is written first, the checkpoint that names it replaces the old one,
  and only then is the previous replay file removed. A crash at any moment leaves a complete
  pair, and a replay that does not belong to the checkpoint is never combined with it.
* **Found from a run folder.** A run's checkpoints are ``<run>/checkpoints/latest.pt`` (saved
  periodically), ``<run>/checkpoints/final.pt`` (at the end) and, with ``--keep-checkpoints``,
  ``<run>/checkpoints/step_<agent step>.pt`` (`kept_checkpoints`); `load_policy` rebuilds the
  online Q-network of any of them for evaluation. Each records when it was saved (``saved_at``).
"""

from __future__ import annotations

import os
import pickle
import random
import shutil
import time
import uuid
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np
import torch

import vecdqn
from vecdqn import safe_pickle
from vecdqn.config import Config
from vecdqn.learners import POLICY_KEY, learner_spec

__all__ = [
    "BEST", "CHECKPOINT_FORMAT", "CheckpointError", "Policy", "keep_best", "kept_checkpoints", "load", "load_policy",
    "load_replay", "load_training", "remove_stale", "resolve_checkpoint", "save_atomic", "save_training", "saved_any",
    "held_run",
]

CHECKPOINT_FORMAT = "vecdqn-checkpoint-2"
# A run's best kept checkpoint by greedy evaluation (``evaluate.py --every-checkpoint --keep-best``),
# relative to the run folder.
BEST = Path("checkpoints") / "best.pt"


class CheckpointError(Exception):
    """A checkpoint file is missing, truncated or not a vecdqn checkpoint."""


def save_atomic(obj: Any, path: str | os.PathLike[str],
                dump: Callable[[Any, IO[bytes]], None] | None = None) -> Path:
    """Write ``obj`` to ``path`` atomically (tmp file + fsync + rename) with ``dump(obj, file)``
    (``torch.save`` by default; e.g. a pickle dump for the replay buffer). Returns the path. The
    file gets the permissions any new file gets here (0666 less the umask: 0644 by default), not the
    private 0600 of a ``tempfile.mkstemp`` file.

    Raises:
        CheckpointError: the file could not be written (e.g. the disk is full), naming it and the
            free space; the temporary file is removed and an older ``path`` is left as it was.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # Created like any new file (mode 0666, which the kernel reduces by the umask), not with
    # tempfile.mkstemp's private 0600; O_EXCL and a random name keep concurrent writers apart.
    tmp = path.parent / f".{path.name}.{uuid.uuid4().hex}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            (dump or torch.save)(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except Exception as err:
        if os.path.exists(tmp):
            os.unlink(tmp)
        # A full disk surfaces as OSError from the file, or as torch's RuntimeError from its
        # zip writer: name the file and the space left instead of a long C++ traceback.
        free = shutil.disk_usage(path.parent).free
        raise CheckpointError(
            f"could not write {path} ({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}); "
            f"{free / 2**20:.1f} MiB free in {path.parent}; the previous checkpoint is kept"
        ) from err
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
        CheckpointError: naming the file, if it does not exist, is not a zip archive as
            ``torch.save`` writes (another kind of file, or a damaged one), has a record whose
            CRC-32 does not match its bytes (a bit changed on disk), cannot be unpickled (corrupt or
            truncated) or lacks one of the ``required`` keys.
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist")
    if not zipfile.is_zipfile(path):  # torch.save's format; a text file would read as a hostile pickle
        raise CheckpointError(f"checkpoint {path} is not a PyTorch checkpoint archive (corrupt or truncated, or "
                              "another kind of file)")
    damaged = _failed_crc(path)
    if damaged is not None:
        raise CheckpointError(f"checkpoint {path} is damaged: its record {damaged} fails its CRC-32 check (changed "
                              "on disk or in a copy); resume or evaluate from another checkpoint")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        if "Weights only load failed" in str(err):
            culprit = next((line.strip() for line in str(err).splitlines() if "GLOBAL" in line or "global" in line),
                           "an object that is not a tensor or plain data")
            raise CheckpointError(
                f"checkpoint {path} holds more than tensors and plain data ({culprit}); vecdqn refuses to load it "
                "because such a file can run code"
            ) from None
        raise CheckpointError(f"checkpoint {path} is corrupt or truncated ({type(err).__name__}: {err})") from None
    except Exception as err:  # torch raises several types for a damaged zip/pickle
        raise CheckpointError(f"checkpoint {path} is corrupt or truncated ({type(err).__name__}: {err})") from None
    if not isinstance(state, dict) or any(key not in state for key in required):
        raise CheckpointError(f"checkpoint {path} is not a vecdqn checkpoint (missing {list(required)})")
    return state


def _failed_crc(path: Path) -> str | None:
    """The first record of the archive whose bytes do not match the CRC-32 that ``torch.save``
    stored beside them (``torch.load`` does not check them), or None where all match."""
    try:
        with zipfile.ZipFile(path) as archive:
            return archive.testzip()
    except (zipfile.BadZipFile, OSError, EOFError) as err:  # a damaged directory or header
        return f"directory ({type(err).__name__}: {err})"
    except Exception as err:  # zlib errors and the like, for a record that does not even inflate
        return f"data ({type(err).__name__}: {err})"


def saved_any(run_dir: str | os.PathLike[str]) -> bool:
    """Whether the run folder holds a checkpoint of any name (``checkpoints/*.pt``)."""
    return any(Path(run_dir, "checkpoints").glob("*.pt"))


def held_run(run_dir: str | os.PathLike[str]) -> str:
    """What a new run would find in ``run_dir``, as the end of a sentence about the folder: ``""``
    (no run: its ``config.json`` is missing), ``"already holds a run"`` (one to resume), or
    ``"holds a run that stopped before its first checkpoint (nothing to resume)"``."""
    if not Path(run_dir, "config.json").exists():
        return ""
    if saved_any(run_dir):
        return "already holds a run"
    return "holds a run that stopped before its first checkpoint (nothing to resume)"


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
        if (path / "config.json").is_file() and not saved_any(path):
            raise CheckpointError(f"run folder {path} stopped before its first checkpoint: there is nothing to "
                                  f"resume; start a new run (remove {path} to use its name again)")
        raise CheckpointError(
            f"run folder {path} has no checkpoints/latest.pt or checkpoints/final.pt; pass a "
            "checkpoint file or a run folder that finished or saved a checkpoint"
        )
    if not path.exists():
        raise CheckpointError(f"checkpoint {path} does not exist")
    return path


@dataclass
class Policy:
    """The network a checkpoint's learner acts with, loaded, with what came with it.

    Attributes:
        network: ``(B, S, H, W) uint8 -> (B, A) float32`` values (the greedy action their argmax) on
            ``device``, in eval mode.
        config: the training run's `Config` (env id and preprocessing).
        path: the checkpoint file read (for a run folder, the file `resolve_checkpoint` chose).
        step: the agent step the checkpoint was saved at (agent steps summed over all envs), or
            None if the checkpoint does not say.
        device: where ``network`` lives.
        saved_at: when the training run wrote the checkpoint, Unix time in seconds (checkpoints
            of older versions do not say: then the file's modification time).
    """

    network: torch.nn.Module
    config: Config
    path: Path
    step: int | None
    device: torch.device
    saved_at: float | None = None


def load_policy(path: str | os.PathLike[str], device: torch.device | str = "cpu") -> Policy:
    """Load the policy network of a vecdqn checkpoint (file or run folder) onto ``device``.

    The network its learner acts with (`vecdqn.learners.LearnerSpec.build_network`) is rebuilt
    from the saved ``n_actions``, ``obs_shape`` and the config, then given the weights under
    `vecdqn.learners.POLICY_KEY` of the saved ``agent``; it is in eval mode.

    Raises:
        CheckpointError: missing, corrupt or foreign checkpoint, weights that do not fit the
            network the checkpoint describes, or a network for other observations than the
            saved config's envs make (``frame_stack``, ``screen_size``), which play would
            otherwise meet as a shape error in the first forward pass; a newer or foreign format.
    """
    file = resolve_checkpoint(path)
    state = load(file, required=("config", "agent", "n_actions", "obs_shape"))
    if "format" in state and _format_age(state["format"]) not in (-1, 0):  # an older one's policy may load
        _refuse_format(file, state["format"], "evaluate it with the version that wrote it")
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
    shape = tuple(int(x) for x in state["obs_shape"])
    made = (config.frame_stack, config.screen_size, config.screen_size)
    if shape != made:
        raise CheckpointError(
            f"checkpoint {file} holds a network for {shape} observations, but its config makes {made} ones "
            f"(frame_stack {config.frame_stack}, screen_size {config.screen_size}); its config and network do "
            "not belong together"
        )
    device = torch.device(device)
    network.to(device).eval()
    step = state.get("train_state", {}).get("step")
    saved_at = float(state["saved_at"]) if "saved_at" in state else file.stat().st_mtime
    return Policy(network, config, file, int(step) if step is not None else None, device, saved_at)


def kept_checkpoints(run_dir: str | os.PathLike[str]) -> list[tuple[int, Path]]:
    """A run's kept periodic checkpoints (``--keep-checkpoints``), in step order.

    Returns:
        ``[(agent step, path)]`` of ``<run_dir>/checkpoints/step_<agent step>.pt``; empty if the
        run kept none.

    Raises:
        CheckpointError: ``run_dir`` is not a folder.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise CheckpointError(f"{run_dir} is not a run folder")
    kept = []
    for path in (run_dir / "checkpoints").glob("step_*.pt"):
        digits = path.stem.removeprefix("step_")
        if digits.isascii() and digits.isdigit():  # int() refuses "²"
            kept.append((int(digits), path))
    return sorted(kept)


def keep_best(run_dir: str | os.PathLike[str], step: int) -> Path:
    """Copy the run's kept checkpoint of agent step ``step`` (`kept_checkpoints`) to `BEST` in
    ``run_dir``, atomically (an earlier ``best.pt`` stays whole until the new one is written).
    Returns the kept checkpoint copied.

    Raises:
        CheckpointError: the run kept no checkpoint at ``step``, or the copy could not be written.
    """
    source = dict(kept_checkpoints(run_dir)).get(step)
    if source is None:
        raise CheckpointError(f"{run_dir} kept no checkpoint at agent step {step:,} (checkpoints/step_<agent "
                              "step>.pt); it may have been removed since it was evaluated")

    def copy(_: Any, out: IO[bytes]) -> None:
        with open(source, "rb") as f:
            shutil.copyfileobj(f, out)

    save_atomic(None, Path(run_dir) / BEST, dump=copy)
    return source


def _network(state: dict[str, Any], config: Config) -> torch.nn.Module:
    """The network a loaded checkpoint's learner acts with (`LearnerSpec.build_network`), with its
    policy weights, on the CPU.

    Raises:
        KeyError, TypeError, ValueError, RuntimeError: the saved shapes or weights do not make a
            network (`load_policy` reports them as one `CheckpointError`).
    """
    network = learner_spec(config.algo).build_network(config, int(state["n_actions"]), state["obs_shape"])
    network.load_state_dict(state["agent"][POLICY_KEY])
    return network


# -- the training checkpoint ---------------------------------------------------------------------
def rng_states() -> dict[str, Any]:
    """The global random generators' states (Python, NumPy's legacy global, torch) as plain data
    and tensors (loadable with ``weights_only=True``)."""
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    return {
        "python": random.getstate(),
        "numpy_global": [kind, torch.from_numpy(keys.astype(np.int64)), int(pos), int(has_gauss), float(cached)],
        "torch": torch.get_rng_state(),
    }


def set_rng_states(states: dict[str, Any]) -> None:
    """Restore `rng_states`."""
    random.setstate(_tuples(states["python"]))
    kind, keys, pos, has_gauss, cached = states["numpy_global"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(states["torch"])


class _Crc32Writer:
    """Forwards ``write`` to a binary file while keeping the CRC-32 (zlib's) of all bytes written."""

    def __init__(self) -> None:
        self.crc = 0
        self._file: IO[bytes] | None = None

    def to(self, file: IO[bytes]) -> _Crc32Writer:
        self._file, self.crc = file, 0
        return self

    def write(self, data: Any) -> int:
        self.crc = zlib.crc32(data, self.crc)
        return self._file.write(data)


def _file_crc32(path: Path, chunk: int = 1 << 24) -> int:
    """The CRC-32 (zlib's) of a file's bytes, read in 16 MiB chunks."""
    crc = 0
    with open(path, "rb") as f:
        while block := f.read(chunk):
            crc = zlib.crc32(block, crc)
    return crc


def _tuples(value: Any) -> Any:
    """Lists back to the tuples `random.setstate` expects."""
    return tuple(_tuples(v) for v in value) if isinstance(value, (list, tuple)) else value


def save_training(path: str | os.PathLike[str], *, replay: Any = None, envs: dict[str, Any] | None = None,
                  **state: Any) -> Path:
    """Write a training checkpoint (and, with ``replay``, its replay file) as one unit.

    Args:
        path: the checkpoint file, e.g. ``<run>/checkpoints/latest.pt``.
        replay: the replay buffer, or None; saved to ``<name>.<token>.replay`` first.
        envs: ``{"snapshots": [bytes] * N, "obs": (N, S, H, W) uint8, "actions": (N,) int64}``
            to continue the same games, or None.
        **state: the rest (``config``, ``train_state``, ``agent``, ...): tensors and plain data.

    Returns:
        the checkpoint's path.

    Raises:
        CheckpointError: a file could not be written (e.g. the disk is full); the previous
            checkpoint and its replay are kept, temporaries removed.
    """
    path = Path(path)
    state = {"format": CHECKPOINT_FORMAT, "vecdqn_version": vecdqn.__version__, "saved_at": time.time(), **state,
             "rng": rng_states()}
    if envs is not None:
        state["envs"] = {"snapshots": list(envs["snapshots"]), "obs": torch.from_numpy(np.array(envs["obs"])),
                         "actions": torch.from_numpy(np.array(envs["actions"]))}
    if replay is not None:
        token = uuid.uuid4().hex[:12]
        replay_path = path.with_name(f"{path.name}.{token}.replay")
        writer = _Crc32Writer()
        save_atomic({"token": token, "buffer": replay}, replay_path,
                    dump=lambda obj, f: pickle.dump(obj, writer.to(f), protocol=pickle.HIGHEST_PROTOCOL))
        state["replay_file"], state["replay_token"], state["replay_crc32"] = replay_path.name, token, writer.crc
    try:
        save_atomic(state, path)
    except CheckpointError:
        if replay is not None:
            replay_path.unlink(missing_ok=True)
        raise
    for old in path.parent.glob(f"{path.name}.*.replay"):
        if old.name != state.get("replay_file"):
            old.unlink(missing_ok=True)
    return path


def _format_age(name: Any) -> int | None:
    """-1, 0, 1: ``name`` older, equal, newer than `CHECKPOINT_FORMAT` (``vecdqn-checkpoint-<N>``); None: foreign."""
    prefix, _, number = str(name).rpartition("-")
    ours = int(CHECKPOINT_FORMAT.rpartition("-")[2])
    theirs = int(number) if number.isascii() and number.isdecimal() else -1  # int("²") would raise
    if prefix != CHECKPOINT_FORMAT.rpartition("-")[0] or theirs < 0:
        return None
    return (theirs > ours) - (theirs < ours)


def _refuse_format(path: Any, name: Any, advice: str) -> None:
    who = {-1: "an older vecdqn", 1: "a newer vecdqn", None: "no vecdqn version"}[_format_age(name)]
    raise CheckpointError(f"checkpoint {path} has format {name!r}, written by {who}; this version reads "
                          f"{CHECKPOINT_FORMAT!r}: {advice}")


def load_training(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Load a training checkpoint written by `save_training` (see `load` for the errors).

    Raises:
        CheckpointError: also for a checkpoint of another format than `CHECKPOINT_FORMAT` (older,
            newer or of no vecdqn), which this version cannot continue.
    """
    state = load(path, required=("config", "format"))
    if _format_age(state["format"]) != 0:
        _refuse_format(path, state["format"], "start a new run (or resume it with the version that wrote it)")
    for key in ("train_state", "agent", "rng"):
        if key not in state:
            raise CheckpointError(f"checkpoint {path} is not a training checkpoint (missing {key!r})")
    if "envs" in state:
        state["envs"] = {**state["envs"], "obs": state["envs"]["obs"].numpy(),
                         "actions": state["envs"]["actions"].numpy()}
    state["path"] = str(path)
    return state


def load_replay(state: dict[str, Any]) -> tuple[Any, str | None]:
    """The replay buffer saved with a checkpoint from `load_training`.

    Returns:
        ``(buffer, None)``, or ``(None, reason)`` when the checkpoint has no replay or its replay
        file is missing or belongs to another checkpoint (never combined with it).

    Raises:
        CheckpointError: the replay file fails the CRC-32 its checkpoint recorded (a bit changed on
            disk: frames would load wrong without any other sign), is corrupt, truncated or holds
            disallowed objects.
    """
    name = state.get("replay_file")
    if not name:
        return None, "no saved replay"
    path = Path(state["path"]).parent / name
    if not path.is_file():
        return None, f"its replay file {path} is missing"
    expected = state.get("replay_crc32")  # absent in checkpoints of earlier versions
    if expected is not None:
        try:
            found = _file_crc32(path)
        except OSError as err:
            raise CheckpointError(f"replay file {path} could not be read ({type(err).__name__}: {err})") from None
        if found != expected:
            raise CheckpointError(
                f"replay file {path} is damaged: its CRC-32 is {found:08x}, the checkpoint recorded {expected:08x} "
                "(changed on disk or in a copy); resume from another checkpoint, or remove the file to resume with a "
                "replay that refills (the run is then no longer exact)"
            )
    try:
        with open(path, "rb") as f:
            saved = safe_pickle.load(f)
    except safe_pickle.UnsafePickleError as err:
        raise CheckpointError(f"replay file {path}: {err}") from None
    except (OSError, pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError) as err:
        raise CheckpointError(f"replay file {path} is corrupt or truncated ({type(err).__name__}: {err})") from None
    if not isinstance(saved, dict) or saved.get("token") != state.get("replay_token"):
        return None, f"the replay file {path} belongs to another checkpoint"
    return saved["buffer"], None


def remove_stale(folder: str | os.PathLike[str]) -> list[Path]:
    """Remove what an interrupted save left in a checkpoint folder: temporaries (``.*.tmp``) and
    replay files that no checkpoint there names. Returns the removed paths."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    named = set()
    for file in folder.glob("*.pt"):
        try:
            named.add(load(file).get("replay_file"))
        except CheckpointError:
            continue
    stale = [p for p in folder.glob(".*.tmp")] + [p for p in folder.glob("*.replay") if p.name not in named]
    for p in stale:
        p.unlink(missing_ok=True)
    return stale
