"""Resume in one place: a checkpoint and the options given now become the run to continue.

`resume` reads the checkpoint file once and returns a `Resumed`: the configuration the run
continues with (the saved one, with the options given on resume put over it, checked against
the option rules of `vecdqn.config`), its `TrainState` (logs, evaluations and checkpoints at the
next multiples of their periods; without a saved replay, learning waits for ``learning_starts``
fresh transitions), and what the learner and the envs restore from.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vecdqn import checkpoint
from vecdqn.config import Config, check_options_used, option_flag, options_with
from vecdqn.envs import check_family_options
from vecdqn.learners import learner_spec
from vecdqn.preflight import ConfigError
from vecdqn.train_state import TrainState

__all__ = ["Resumed", "resume"]


@dataclass
class Resumed:
    """A run to continue (see `resume`).

    Attributes:
        config: the configuration it continues with.
        state: its counters, ready to continue (`TrainState.resumed`).
        learner: the learner's saved state (networks, optimizer, its generator).
        rng: the global generators' states (Python, NumPy, torch).
        envs: the envs' saved state (``{"snapshots", "obs", "actions"}``) to continue the same
            games, or None.
        replay: the saved replay buffer it continues with, or None.
        note: why no saved replay is reused ("" when one is).
        run_dir: the run folder it continues in.
        path: the checkpoint file read.
    """

    config: Config
    state: TrainState
    learner: dict[str, Any]
    rng: dict[str, Any]
    envs: dict[str, Any] | None
    replay: Any
    note: str
    run_dir: Path
    path: Path


def resume(path: str | os.PathLike[str], overrides: dict[str, Any] | None = None) -> Resumed:
    """The run of a checkpoint (a file, or a run folder for its latest), continued with ``overrides``.

    ``overrides`` replace saved settings (e.g. a longer ``total_steps``); what an option implies
    is replaced with it (`Config.from_saved`). A saved replay is reused unless the run continues
    with ``--actors`` (whose replay refills).

    Raises:
        checkpoint.CheckpointError: naming the file, if it (or its replay file) is missing, corrupt
            or truncated.
        ConfigError: an override the run would not use (`vecdqn.config.check_options_used`,
            `vecdqn.envs.check_family_options`), or one that cannot apply to it: ``--log-dir``/``--run-name`` (the
            run keeps its folder), an option fixed on resume (`options_with("fixed_on_resume")`)
            given another value, or a ``total_steps`` not beyond the checkpoint's step; a checkpoint
            file older than the run's latest (resuming there would overwrite the later checkpoints), or
            one outside a run folder's ``checkpoints/`` (the run would go on in whatever folder holds it).
    """
    file = checkpoint.resolve_checkpoint(path)
    saved = checkpoint.load_training(file)  # first: a file that is no checkpoint is the mistake to name
    if file.parent.name != "checkpoints":
        raise ConfigError(f"--resume {file} is not in a run folder's checkpoints/, and the run would go on in "
                          f"{file.parent.parent}; to continue from it, give it a run folder of its own: mkdir -p "
                          f"NEW/checkpoints && cp {shlex.quote(str(file))} NEW/checkpoints/latest.pt, then "
                          "--resume NEW")
    run_dir = file.parent.parent
    _check_latest(file, int(saved["train_state"]["step"]))
    config = _continued_config(saved, dict(overrides or {}), run_dir)
    if not learner_spec(config.algo).keeps_replay:
        replay, note = None, ""
    elif config.actors:
        replay, note = None, "a saved replay is not reused with --actors"
    else:
        replay, note = checkpoint.load_replay(saved)
    state = TrainState(**saved["train_state"]).resumed(config, with_replay=replay is not None)
    return Resumed(config=config, state=state, learner=saved["agent"], rng=saved["rng"], envs=saved.get("envs"),
                   replay=replay, note=note or "", run_dir=run_dir, path=file)


def _check_latest(file: Path, step: int) -> None:
    """Refuse a checkpoint ``file`` at agent ``step`` that the run folder's own ``latest.pt``,
    ``final.pt`` or a kept ``step_*.pt`` has gone beyond: the resumed run would overwrite them, and
    its curves would take back what the run had logged."""
    kept = {path.name: kept_step for kept_step, path in checkpoint.kept_checkpoints(file.parent.parent)}
    for name in ("latest.pt", "final.pt", *sorted(kept, reverse=True)):
        other = file.parent / name
        if other == file or not other.is_file():
            continue
        later = kept[name] if name in kept else int(checkpoint.load_training(other)["train_state"]["step"])
        if later > step:
            raise ConfigError(f"--resume {file} is at agent step {step:,}, but the run went on to {later:,} "
                              f"(checkpoints/{name}), which resuming there would overwrite; to go on from step "
                              f"{step:,}, copy the run folder, remove the copy's later checkpoints (latest.pt, "
                              "final.pt and those of later steps) and resume the copy")


def _continued_config(saved: dict[str, Any], overrides: dict[str, Any], run_dir: Path) -> Config:
    """The saved configuration with ``overrides`` put over it (see `resume` for the errors)."""
    values = saved["config"]
    given = set(overrides)
    try:  # first: an option the run would not use is the mistake to name
        check_options_used(given, Config.from_saved(values, {k: v for k, v in overrides.items() if k == "actors"}),
                           resuming=True)
        check_family_options(given, values.get("env_id", ""))
    except ValueError as err:
        raise ConfigError(str(err)) from None
    for name in ("log_dir", "run_name"):
        if name in overrides:
            raise ConfigError(f"{option_flag(name)} {overrides[name]} cannot be given with --resume: the run "
                              f"continues in its own folder {run_dir}")
    for name in options_with("fixed_on_resume"):
        if name not in overrides:
            continue
        # Compared as the run uses them: a saved unset --layer-norm is the learner's default.
        was = _as_used(Config.from_saved(values, {}), name)
        if _as_used(Config.from_saved(values, {name: overrides[name]}), name) != was:
            flag = option_flag(name)
            raise ConfigError(f"{flag} {overrides[name]} differs from the run's {was}; {flag} cannot "
                              "change on --resume (start a new run instead)")
    if overrides.get("actors", values.get("actors")) and "save_replay" not in overrides:
        overrides = {**overrides, "save_replay": False}  # refused with --actors: the replay refills
    config = Config.from_saved(values, overrides)
    step = int(saved["train_state"]["step"])
    if config.total_steps <= step:
        raise ConfigError(f"--total-steps {config.total_steps} is not beyond the checkpoint's agent step {step}; "
                          "give a larger --total-steps to continue")
    return config


def _as_used(config: Config, name: str) -> Any:
    """The value of option ``name`` as ``config``'s run uses it (an unset ``layer_norm`` resolved)."""
    return config.uses_layer_norm if name == "layer_norm" else getattr(config, name)
