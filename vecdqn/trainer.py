"""The single-process trainer: a vector env of N worker processes feeding the training core.

`Trainer` runs a `VectorCollector` (this module) into a `vecdqn.core.TrainingCore`, which
stores, learns, logs, evaluates and checkpoints; the Ape-X block loop of ``--actors`` is the
other collector of the same core (`vecdqn.distributed.learner`).

Shape legend: ``N`` envs, ``S`` stacked frames, ``A`` actions.

One iteration of `Trainer` overlaps the env workers and the learner::

    main process:  act ─ step_async ─┬─ update × k ───────────┬─ step_wait ─ store ─ act ─ ...
                                     │                        │
    env workers:                     └─ emulate 4 frames × N ─┘

* the learner never waits for the envs while it has updates due: ``step_async`` returns at
  once and the ``k`` updates due for this vector step run while the workers emulate;
* the main process waits in ``step_wait`` only for the workers still emulating when the
  updates are done (before ``learning_starts`` that is the whole step);
* the workers wait (idle) only while the main process stores the N transitions and selects
  the next N actions in one forward pass.

The updates of an iteration sample from the transitions stored up to the previous vector step,
one step older than a strictly sequential loop would use; with a replay of ≥ 10⁴ transitions
that difference is immaterial, and it is what lets both sides run at once.

Counts are agent steps summed over envs: one vector step adds N to ``step``; an update is due
every ``train_frequency`` agent steps once ``learning_starts`` transitions are stored
(`updates_due`); the target network is synced every ``target_update_frequency`` agent steps
(`target_syncs_due`). Every counter lives in one `TrainState`, saved whole by the checkpoint.
The run stops at the first vector step that reaches ``total_steps`` (exact when it is a
multiple of N).

Robustness: checkpoints are written atomically every ``checkpoint_every`` agent steps and at
the end; the first SIGINT/SIGTERM finishes the current step, checkpoints and exits 130/143 (a
second one exits at once); a crashed or hung env worker, or a non-finite loss, stops the run
with a message naming the cause, after keeping the last good checkpoint.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from vecdqn import checkpoint
from vecdqn.config import FIXED_ON_RESUME, Config, default_torch_threads, option_flag
from vecdqn.core import Interrupted, NonFiniteError, TrainingCore
from vecdqn.preflight import ConfigError
from vecdqn.train_state import TrainState, target_syncs_due, updates_due
from vecdqn.vector import WorkerError, WorkerGuard, ended_games

__all__ = [
    "ConfigError", "Interrupted", "NonFiniteError", "TrainState", "Trainer", "TrainerBase",
    "VectorCollector", "WorkerError", "resumed_config", "run_name", "target_syncs_due", "train",
    "updates_due",
]


def run_name(config: Config, now: float | None = None) -> str:
    """``<env_id>__<seed>__<unix time>`` with ``/`` in the env id replaced by ``-``."""
    if config.run_name:
        return config.run_name
    stamp = int(now if now is not None else time.time())
    return f"{config.env_id.replace('/', '-')}__{config.seed}__{stamp}"


def resumed_config(state: dict[str, Any], overrides: dict[str, Any], run_dir: Path) -> Config:
    """The configuration a checkpoint's run continues with: the saved one, updated with
    ``overrides`` (e.g. a longer ``total_steps``).

    A saved ``save_replay`` is dropped when the run continues with ``--actors`` (a distributed
    run refills its replay; see `TrainingCore.set_up`).

    Raises:
        ConfigError: an override that cannot apply to this run (one that moves the run folder or
            changes the networks', envs' or replay's shape), or a ``total_steps`` not beyond the
            checkpoint's step.
    """
    saved = state["config"]
    for name in ("log_dir", "run_name"):
        if name in overrides:
            raise ConfigError(f"{option_flag(name)} {overrides[name]} cannot be given with --resume: the run "
                              f"continues in its own folder {run_dir}")
    for name in FIXED_ON_RESUME:
        if name in overrides and overrides[name] != saved.get(name):
            flag = option_flag(name)
            raise ConfigError(f"{flag} {overrides[name]} differs from the run's {saved.get(name)}; {flag} cannot "
                              "change on --resume (start a new run instead)")
    if overrides.get("actors", saved.get("actors")) and "save_replay" not in overrides:
        overrides = {**overrides, "save_replay": False}  # refused with --actors: the replay refills
    config = Config.from_saved(saved, overrides)
    step = int(state["train_state"]["step"])
    if config.total_steps <= step:
        raise ConfigError(f"--total-steps {config.total_steps} is not beyond the checkpoint's agent step {step}; "
                          "give a larger --total-steps to continue")
    return config


class VectorCollector:
    """The vector-env collector: each `collect` is one overlapped vector step of N envs (see the
    module docstring), its N transitions stored in the core.

    Args:
        core: the `TrainingCore` it feeds (set up: agent, replay, logger).
        envs: the started env workers.
        saved: a checkpoint's env state (``{"snapshots", "obs", "actions"}``) to continue its
            games, or None to start new ones.
    """

    def __init__(self, core: TrainingCore, envs: WorkerGuard, saved: dict[str, Any] | None = None):
        self.core, self.envs, self.saved = core, envs, saved
        self.obs: np.ndarray | None = None      # (N, S, H, W) uint8 the next actions act in
        self.actions: np.ndarray | None = None  # (N,) int64 chosen for them

    def start(self) -> None:
        """Continue the saved games if the envs can be put back into them, else reset (env ``i``
        seeded ``seed + i``, or ``seed + step + i`` after a resume), and choose the first actions."""
        c, s, saved = self.core.config, self.core.state, self.saved
        if saved is not None and self.envs.restore(saved["snapshots"], s.step):
            self.obs, self.actions = saved["obs"], saved["actions"]
            return
        self.obs, _ = self.envs.reset(seed=c.seed if s.step == 0 else c.seed + s.step, step=s.step)
        self.actions = self.core.agent.act(self.obs, self.core.schedules.epsilon(s.step))

    def collect(self) -> None:
        """Send the actions, run the updates due while the workers emulate, wait for the vector
        step, store its N transitions, record ended games, choose the next actions."""
        core, c, s = self.core, self.core.config, self.core.state
        n = c.num_envs
        self.envs.step_async(self.actions, s.step)
        core.learn(n)
        next_obs, rewards, terminated, truncated, infos = self.envs.step_wait(s.step)
        # With SAME_STEP autoreset, next_obs[i] of an ended env is already the next episode's
        # first observation; the transition must end in the true last one, final_obs[i].
        stored_next = next_obs
        if (terminated | truncated).any():
            stored_next = next_obs.copy()
            for i in np.flatnonzero(infos["_final_obs"]):
                stored_next[i] = infos["final_obs"][i]
        # Each game at its own env's agent step (see `ended_games`), so none hides another.
        core.games(ended_games(infos, s.step + 1))
        # Sign clipping (Mnih et al. 2015) happens before the n-step sum, as in Rainbow.
        core.store(self.obs, self.actions, np.sign(rewards) if c.clip_rewards else rewards, stored_next,
                   terminated, truncated)
        core.advance(n)
        self.obs, self.actions = next_obs, core.agent.act(next_obs, core.schedules.epsilon(s.step))

    def snapshot(self) -> dict[str, Any] | None:
        """The envs' states with the obs and actions of the next step (None if the envs cannot
        be snapshotted).

        Raises:
            WorkerError: an env worker is gone.
        """
        snapshots = self.envs.snapshots(self.core.state.step)
        return None if snapshots is None else {"snapshots": snapshots, "obs": self.obs, "actions": self.actions}

    def scalars(self) -> dict[str, float]:
        """``charts/epsilon``: the exploration rate the envs play with now."""
        return {"charts/epsilon": self.core.schedules.epsilon(self.core.state.step)}


class TrainerBase:
    """What every trainer is: one `TrainingCore` (``core``) and a collector that its ``run``
    builds. Gives the run folder, `from_checkpoint` and the core's parts by name.

    Args:
        config: the run's configuration.
        progress: show the tqdm bar.
        resume_state: a checkpoint dict (see `checkpoint.load_training`) to continue from; its run
            folder is reused and its global step continues.
        resume_dir: the run folder of ``resume_state``.
        handle_signals: install the SIGINT/SIGTERM handlers (main thread only).
        on_step: called with the trainer after each collect (after its logging), e.g. to watch
            resources or to stop a test at a chosen moment.

    Raises:
        ConfigError: on a bad configuration, before any env worker starts.
    """

    def __init__(self, config: Config, *, progress: bool = True, resume_state: dict[str, Any] | None = None,
                 resume_dir: str | os.PathLike[str] | None = None, handle_signals: bool = True,
                 on_step: Callable[[Any], None] | None = None):
        run_dir = Path(resume_dir) if resume_dir is not None else Path(config.log_dir) / run_name(config)
        self.core = TrainingCore(config, run_dir, progress=progress, resume_state=resume_state,
                                 handle_signals=handle_signals,
                                 on_step=None if on_step is None else lambda: on_step(self))
        self.config, self.run_dir = config, run_dir

    @classmethod
    def from_checkpoint(cls, path: str | os.PathLike[str], overrides: dict[str, Any] | None = None,
                        **kwargs: Any) -> Any:
        """A trainer that continues the run of a checkpoint (a file or a run folder).

        ``overrides`` replace saved settings (e.g. a longer ``total_steps``); options that fix
        the networks', envs' or replay's shape cannot change.

        Raises:
            ConfigError: an override that cannot apply to this run.
            checkpoint.CheckpointError: naming the file, if it is missing, corrupt or truncated.
        """
        file = checkpoint.resolve_checkpoint(path)
        state = checkpoint.load_training(file)
        config = resumed_config(state, overrides or {}, run_dir=file.parent.parent)
        return cls(config, resume_state=state, resume_dir=file.parent.parent, **kwargs)

    # The core's parts, for callers and tests.
    step = property(lambda self: self.core.state.step, doc="Agent steps summed over envs so far.")
    state = property(lambda self: self.core.state, doc="The run's `TrainState`.")
    stop = property(lambda self: self.core.stop, doc="The `StopSignals` of the run.")
    agent = property(lambda self: self.core.agent, doc="The `DQNAgent` (once running).")
    buffer = property(lambda self: self.core.buffer, doc="The replay (once running).")
    pipeline = property(lambda self: self.core.pipeline, doc="The `LearnerPipeline` (once running).")
    logger = property(lambda self: self.core.logger, doc="The `MetricsLogger` (once running).")
    worker_checkpoint = property(lambda self: self.core.failure_checkpoint,
                                 doc="The checkpoint written when a worker or actor failed, else None.")

    def run(self) -> dict[str, Any]:
        """Train until ``total_steps`` agent steps (each trainer's own collector)."""
        raise NotImplementedError

    def save_checkpoint(self, name: str = "latest.pt") -> Path:
        """Write ``<run_dir>/checkpoints/<name>`` (networks, optimizer, counters, RNGs; see
        `TrainingCore.save_checkpoint`); returns its path."""
        return self.core.save_checkpoint(name)


class Trainer(TrainerBase):
    """Trains one DQN agent as `Config` says, with ``num_envs`` env workers (`VectorCollector`).

    Args: as `TrainerBase`. ``envs`` is the `WorkerGuard` once running.

    Raises:
        ConfigError: on a bad configuration, before any env worker starts.
    """

    envs: WorkerGuard | None = None

    def run(self) -> dict[str, Any]:
        """Train until ``total_steps`` agent steps; returns `TrainingCore.run`'s summary.

        Raises:
            Interrupted: after SIGINT/SIGTERM, once the checkpoint is written.
            WorkerError: an env worker raised, died or hung (a checkpoint is written first).
            NonFiniteError: NaN/inf loss or Q-values (the last finite checkpoint is kept).
        """
        c, core = self.config, self.core
        core.start(c.torch_threads or default_torch_threads(c.num_envs, device_type=core.device.type))
        # Envs first: forked workers then do not inherit the replay's memory or torch's threads.
        self.envs = envs = WorkerGuard.start(c.env_id, c.num_envs, c.env_options(), c.worker_timeout)
        try:
            with core.stop:
                saved = core.set_up(envs.single_observation_space.shape, int(envs.single_action_space.n))
                return core.run(VectorCollector(core, envs, saved))
        except BaseException:
            envs.force_close()
            raise
        finally:
            envs.close()
            core.close()


def train(config: Config, **kwargs: Any) -> dict[str, Any]:
    """Convenience: ``Trainer(config, **kwargs).run()``."""
    return Trainer(config, **kwargs).run()
