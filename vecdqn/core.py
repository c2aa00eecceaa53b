"""The training core: the run loop of one run, for any learner and any collector.

A collector (`vecdqn.collector.Collector`) owns where transitions come from; a learner
(`vecdqn.learners.Learner`) owns acting and learning; the core owns everything else, once::

    TrainingCore.run(collector):
        collector.start()
        until total_steps:
            collector.collect()  ──► core.act(obs)       the learner's actions for the envs
                                 ├─► core.store(...)     the transitions, into the learner
                                 ├─► core.learn(k)       the learner's updates due for k new
                                 │                       agent steps (metrics checked and logged)
                                 ├─► core.games(...)     whole games to TensorBoard
                                 └─► core.advance(k)     the agent-step count
            log ─ on_step ─ sync, evaluate ─ stop request ─ sync, periodic checkpoint
        core.learn(0)                                   what is due with no agent step to come
        final checkpoints, summary
    (a failed env worker or actor: a checkpoint, then the error)

Counts are agent steps summed over envs or actors (see `vecdqn.train_state`); every counter
lives in one `TrainState`, saved whole by the checkpoint. Signals: `vecdqn.signals`.
"""

from __future__ import annotations

import dataclasses
import os
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from vecdqn import checkpoint
from vecdqn.collector import Collector, CollectorPort
from vecdqn.config import Config
from vecdqn.envs import WorkerError
from vecdqn.evaluation import evaluate_and_log
from vecdqn.learners import Learner, learner_spec, make_learner
from vecdqn.metrics import MetricsLogger
from vecdqn.preflight import preflight
from vecdqn.resume import Resumed
from vecdqn.run_dir import claim
from vecdqn.signals import Interrupted, StopSignals
from vecdqn.staging import announce_amp
from vecdqn.train_state import TrainState

__all__ = ["TrainingCore"]


class TrainingCore(CollectorPort):
    """The training core of one run, for any learner and collector (see the module docstring).

    Args:
        config: the run's configuration.
        run_dir: the run folder (event files, ``config.json``, ``checkpoints/``).
        progress: show the tqdm bar.
        resume: the run to continue (`vecdqn.resume.resume`), or None for a new one.
        handle_signals: install the SIGINT/SIGTERM handlers while `stop` is entered.
        on_step: called with no arguments after each collect (after its logging).

    Attributes: ``state`` (the `TrainState`), ``device``, ``stop`` (`StopSignals`), ``learner``
    (from `set_up` on), ``failure_checkpoint`` (the checkpoint written when a worker failed, else
    None).

    Raises:
        ConfigError: on a bad configuration, before any env worker starts (`preflight`).
    """

    def __init__(self, config: Config, run_dir: Path, *, progress: bool = True, resume: Resumed | None = None,
                 handle_signals: bool = True, on_step: Callable[[], None] | None = None):
        self.device = preflight(config, resuming=resume is not None)
        # "auto" resolved here, so config.json keeps the mode; its line is said after the run's first
        self._amp_said: list[str] = []
        config.amp = announce_amp(self.device, config.amp, say=self._amp_said.append)
        self.config, self.run_dir, self.progress = config, Path(run_dir), progress
        self.resume, self.on_step = resume, on_step
        self.state = resume.state if resume is not None else TrainState.new(config)
        self.learner: Learner | None = None
        self.failure_checkpoint: Path | None = None
        self.stop = StopSignals(handle_signals, say=self.say)
        self.logger: MetricsLogger | None = None
        self._lock: int | None = None  # the run folder's lock (`vecdqn.run_dir.claim`)
        self._clock: dict[str, Any] = {}

    # -- set-up --------------------------------------------------------------------------------------
    def start(self, threads: int) -> None:
        """Torch threads, the seeds, the run folder (this process's: `vecdqn.run_dir.claim`) and its
        ``config.json``.

        Raises:
            ConfigError: the run folder is another process's, or (a new run) already holds a run.
        """
        c = self.config
        self.run_dir, self._lock = claim(self.run_dir, new=self.resume is None, chosen=bool(c.run_name))
        torch.set_num_threads(threads)
        random.seed(c.seed)
        np.random.seed(c.seed % 2**32)
        torch.manual_seed(c.seed)
        checkpoint.remove_stale(self.run_dir / "checkpoints")
        # On resume too: the file then shows the settings the run continues with.
        (self.run_dir / "config.json").write_text(c.to_json())

    def set_up(self, obs_shape: tuple[int, ...], n_actions: int) -> dict[str, Any] | None:
        """The learner for observations ``obs_shape`` (``(S, H, W)``) and ``n_actions``, the resumed
        run's state loaded into it, then the logger.

        Returns:
            on resume, the checkpoint's env state (``{"snapshots", "obs", "actions"}``) if it has
            one, for the collector to continue the same games; else None.
        """
        c, r = self.config, self.resume
        self.learner = make_learner(c, self.device, obs_shape, n_actions)
        if r is not None:
            self.learner.restore(r.learner)
            if r.replay is not None:
                self.learner.restore_replay(r.replay)
            checkpoint.set_rng_states(r.rng)
        self.learner.start()
        s = self.state
        threads = torch.get_num_threads()  # the run's first lines, then its bar
        self.say(f"{self.run_dir}: {c.env_id}, {c.total_steps:,} agent steps; learner on {self.device.type} "
                 f"({threads} torch thread{'' if threads == 1 else 's'})")
        for line in self._amp_said:
            self.say(line)
        self.logger = MetricsLogger(str(self.run_dir), c.to_dict(), c.total_steps, initial_step=s.step,
                                     progress=self.progress)
        if not c.actors and c.total_steps % c.num_envs:
            self.say(f"--total-steps {c.total_steps:,} is not a multiple of --num-envs {c.num_envs}: the run ends at "
                     f"agent step {-(-c.total_steps // c.num_envs) * c.num_envs:,}, the first vector step to reach it")
        if r is None:
            return None
        self.say(f"resumed {self.run_dir} at agent step {s.step}")
        if s.learn_from > s.step:
            self.say(f"{r.note}: refilling the buffer for --learning-starts {c.learning_starts} agent steps "
                     f"before learning {'resumes' if s.updates else 'starts'}")
        return r.envs

    # -- the run -----------------------------------------------------------------------------------------
    def run(self, collector: Collector) -> dict[str, Any]:
        """Train from ``collector`` until ``total_steps`` agent steps (see the module docstring).

        Returns:
            a summary: ``run_dir``, ``steps``, ``updates``, ``episodes``, ``mean_return`` (raw, last
            100 games), ``sps`` (agent steps per second of this process), ``learning_sps`` (the same,
            counted from the first update on), ``checkpoint``, ``latest``.

        A first SIGINT/SIGTERM during the vector step that reaches ``total_steps``, or after it
        (while the final checkpoints are written), stops nothing: the run finishes, and the signal is
        left in ``stop.signum`` for the caller to report.

        Raises:
            Interrupted: after SIGINT/SIGTERM, once the checkpoint is written.
            WorkerError: an env worker or actor failed (``failure_checkpoint`` is written first).
            NonFiniteError: NaN/inf loss or Q-values (the last finite checkpoint is kept).
        """
        c, s = self.config, self.state
        self._clock = {"start": (time.perf_counter(), s.step), "learning": None}
        try:
            collector.start()
            if self.stop.signum is not None:  # stopped while starting (e.g. during Ray's start)
                raise Interrupted(self.stop.signum, self.save_checkpoint("latest.pt", collector))
            while s.step < c.total_steps:
                collector.collect()
                self._after_collect(collector)
            with self.stop.finishing():  # nothing left to stop: a signal now is the caller's to report
                self.learn(0)  # what is due with no agent step to come: PQN's last full rollout
                latest = self.save_checkpoint("latest.pt", collector)
                if c.keep_checkpoints and s.next_checkpoint <= s.step:  # as a longer run would keep it
                    s.next_checkpoint += c.checkpoint_every
                    self.save_checkpoint(f"step_{s.step:09d}.pt")
                final = self.save_checkpoint("final.pt")
        except WorkerError:
            # The envs cannot be snapshotted any more; a resume from this checkpoint restarts the
            # games but keeps the networks, optimizer, counters and schedules.
            self.failure_checkpoint = self.save_checkpoint("latest.pt")
            raise
        return self._summary(latest, final)

    def _after_collect(self, collector: Collector) -> None:
        """Log, evaluate, honour a stop request and checkpoint, each when due."""
        c, s = self.config, self.state
        if self._clock["learning"] is None and s.updates > s.update_offset:
            self._clock["learning"] = (time.perf_counter(), s.step)
            self.logger.learning_started(s.step)
        self._log(collector)
        if self.on_step is not None:
            self.on_step()
        if s.step >= s.next_eval:
            s.next_eval += c.eval_every
            self.learner.sync()
            evaluate_and_log(self.learner.network, c, s.step, self.device, self.logger)
        if self.stop.signum is not None and s.step < c.total_steps:  # at the end: the run finishes (final.pt)
            raise Interrupted(self.stop.signum, self.save_checkpoint("latest.pt", collector))
        if s.next_checkpoint <= s.step < c.total_steps:
            s.next_checkpoint += c.checkpoint_every
            self.save_checkpoint("latest.pt", collector)
            if c.keep_checkpoints:
                self.save_checkpoint(f"step_{s.step:09d}.pt")

    def _log(self, collector: Collector) -> None:
        """Scalars every ``log_every`` agent steps (and at the end); the bar every collect."""
        c, s = self.config, self.state
        if s.step >= s.next_log or s.step >= c.total_steps:
            s.next_log += c.log_every
            self.logger.scalars(s.step, {**self.learner.scalars(s.step), **collector.scalars(), **s.take_losses()})
            self.logger.sps(s.step)
        self.logger.progress(s.step, s.mean_return, s.episodes)

    def _summary(self, latest: Path, final: Path) -> dict[str, Any]:
        now, s = time.perf_counter(), self.state
        (t0, step0), learning = self._clock["start"], self._clock["learning"]
        learning_sps = ((s.step - learning[1]) / max(now - learning[0], 1e-9)
                        if learning is not None and s.step > learning[1] else float("nan"))
        return {
            "run_dir": str(self.run_dir), "steps": s.step, "updates": s.updates, "episodes": s.episodes,
            "mean_return": s.mean_return, "sps": (s.step - step0) / max(now - t0, 1e-9),
            "learning_sps": learning_sps, "checkpoint": str(final), "latest": str(latest),
        }

    # -- checkpoints -------------------------------------------------------------------------------------
    def save_checkpoint(self, name: str = "latest.pt", collector: Collector | None = None) -> Path:
        """Write ``<run_dir>/checkpoints/<name>`` atomically; returns its path.

        Holds the learner's state (networks, optimizer, its generator), the whole `TrainState`,
        every RNG state and the config. With ``collector`` it also holds its `Collector.snapshot`
        (the envs' emulator and wrapper states, so a resume continues the very same games) and,
        with ``--save-replay``, the learner's replay, saved beside it as one unit (see
        `checkpoint.save_training`).

        Raises:
            checkpoint.CheckpointError: the file could not be written (the previous one is kept).
            WorkerError: ``collector``'s envs cannot be snapshotted.
        """
        envs = collector.snapshot() if collector is not None else None
        learner, c = self.learner, self.config
        learner.sync()
        keep_replay = c.save_replay and collector is not None and learner_spec(c.algo).keeps_replay
        return checkpoint.save_training(
            self.run_dir / "checkpoints" / name,
            config=c.to_dict(), train_state=dataclasses.asdict(self.state),
            agent=learner.state_dict(), n_actions=learner.n_actions, obs_shape=learner.obs_shape,
            envs=envs, replay=learner.replay() if keep_replay else None,
        )

    def close(self) -> None:
        """Close the logger and the learner (whichever were set up), and let go of the run folder."""
        if self.logger is not None:
            self.logger.close()
        if self.learner is not None:
            self.learner.close()
        if self._lock is not None:
            os.close(self._lock)  # releases the folder's lock
            self._lock = None
