"""The single-process trainer: a vector env of N worker processes feeding the training core.

`Trainer` runs a `VectorCollector` (this module) into a `vecdqn.core.TrainingCore`, whose learner
acts and learns and which logs, evaluates and checkpoints; the Ape-X block loop of ``--actors`` is
the other collector of the same core (`vecdqn.distributed.learner`).

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
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from vecdqn.acting import ended_games, learner_rewards, stored_next_obs
from vecdqn.config import Config
from vecdqn.core import TrainingCore
from vecdqn.envs import WorkerGuard
from vecdqn.resume import Resumed, resume
from vecdqn.run_dir import run_name
from vecdqn.staging import default_torch_threads

__all__ = ["Trainer", "TrainerBase", "VectorCollector"]


class VectorCollector:
    """The vector-env collector: each `collect` is one overlapped vector step of N envs (see the
    module docstring), its N transitions handed to the core.

    Args:
        core: the `TrainingCore` it feeds (set up).
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
        seeded ``seed + i``, or ``seed + step + i`` after a resume) and tell the learner
        (`TrainingCore.new_games`), and choose the first actions."""
        c, s, saved = self.core.config, self.core.state, self.saved
        if saved is not None and self.envs.restore(saved["snapshots"], s.step):
            self.obs, self.actions = saved["obs"], saved["actions"]
            return
        self.obs, _ = self.envs.reset(seed=c.seed if s.step == 0 else c.seed + s.step, step=s.step)
        self.core.new_games()
        self.actions = self.core.act(self.obs)

    def collect(self) -> None:
        """Send the actions, run what the learner has due while the workers emulate, wait for the
        vector step, hand over its N transitions, record ended games, choose the next actions."""
        core, c, s = self.core, self.core.config, self.core.state
        n = c.num_envs
        self.envs.step_async(self.actions, s.step)
        core.learn(n)
        next_obs, rewards, terminated, truncated, infos = self.envs.step_wait(s.step)
        # Each game at its own env's agent step (see `ended_games`), so none hides another.
        core.games(ended_games(infos, s.step + 1))
        core.store(self.obs, self.actions, learner_rewards(rewards, c.clip_rewards),
                   stored_next_obs(next_obs, terminated, truncated, infos), terminated, truncated)
        core.advance(n)
        self.obs, self.actions = next_obs, core.act(next_obs)

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
        return {"charts/epsilon": self.core.epsilon()}


class TrainerBase:
    """What every trainer is: one `TrainingCore` (``core``: its ``run_dir``, ``state``, ``learner``,
    ``stop``) and a collector that its ``run`` builds.

    Args:
        config: the run's configuration (with ``resume``: its ``config``, which this must be).
        progress: show the tqdm bar.
        resume: the run to continue (`vecdqn.resume.resume`): its folder is reused and its
            agent step continues; None starts a new run in ``<log_dir>/<run_name>``.
        handle_signals: install the SIGINT/SIGTERM handlers (main thread only).
        on_step: called with the trainer after each collect (after its logging), e.g. to watch
            resources or to stop a test at a chosen moment.

    Raises:
        ConfigError: on a bad configuration, before any env worker starts.
    """

    def __init__(self, config: Config, *, progress: bool = True, resume: Resumed | None = None,
                 handle_signals: bool = True, on_step: Callable[[Any], None] | None = None):
        run_dir = resume.run_dir if resume is not None else Path(config.log_dir) / run_name(config)
        self.core = TrainingCore(config, run_dir, progress=progress, resume=resume, handle_signals=handle_signals,
                                 on_step=None if on_step is None else lambda: on_step(self))
        self.config = config

    @classmethod
    def from_checkpoint(cls, path: str | os.PathLike[str], overrides: dict[str, Any] | None = None,
                        **kwargs: Any) -> Any:
        """A trainer that continues the run of a checkpoint (a file or a run folder), with
        ``overrides`` put over its saved settings (see `vecdqn.resume.resume`).

        Raises:
            ConfigError: an override that cannot apply to this run.
            checkpoint.CheckpointError: naming the file, if it is missing, corrupt or truncated.
        """
        resumed = resume(path, overrides)
        return cls(resumed.config, resume=resumed, **kwargs)

    def run(self) -> dict[str, Any]:
        """Train until ``total_steps`` agent steps (each trainer's own collector)."""
        raise NotImplementedError


class Trainer(TrainerBase):
    """Trains one learner as `Config` says, with ``num_envs`` env workers (`VectorCollector`).

    Args: as `TrainerBase`. ``envs`` is the `WorkerGuard` once running.

    Raises:
        ConfigError: on a bad configuration, before any env worker starts.
    """

    envs: WorkerGuard | None = None

    def run(self) -> dict[str, Any]:
        """Train until ``total_steps`` agent steps; returns `TrainingCore.run`'s summary.

        The SIGINT/SIGTERM handlers stay installed until the env workers and the writers are
        closed: a first signal after the loop (during the final checkpoints or the close) stops
        nothing and is left in ``core.stop.signum``, with the summary returned as usual.

        Raises:
            Interrupted: after SIGINT/SIGTERM, once the checkpoint is written.
            WorkerError: an env worker raised, died or hung (a checkpoint is written first).
            NonFiniteError: NaN/inf loss or Q-values (the last finite checkpoint is kept).
        """
        c, core = self.config, self.core
        core.start(c.torch_threads or default_torch_threads(c.num_envs, device_type=core.device.type))
        # Envs first: forked workers then do not inherit the replay's memory or torch's threads.
        self.envs = envs = WorkerGuard.start(c.env_id, c.num_envs, c.env_options(), c.worker_timeout,
                                             c.envs_per_worker_on(os.cpu_count() or 1))
        with core.stop:  # installed until the workers and writers are closed: a signal then is recorded
            try:
                saved = core.set_up(envs.single_observation_space.shape, int(envs.single_action_space.n))
                return core.run(VectorCollector(core, envs, saved))
            except BaseException:
                with core.stop.finishing():
                    envs.force_close()
                raise
            finally:
                with core.stop.finishing():
                    envs.close()
                    core.close()
