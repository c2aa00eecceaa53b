"""The training loop: collect → store → learn → log → evaluate → checkpoint.

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

Robustness: checkpoints are written atomically every ``checkpoint_every`` agent steps and at
the end; the first SIGINT/SIGTERM finishes the current step, checkpoints and exits 130/143 (a
second one exits at once); a crashed or hung env worker, or a non-finite loss, stops the run
with a message naming the cause, after keeping the last good checkpoint.
"""

from __future__ import annotations

import dataclasses
import math
import os
import random
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from vecdqn import checkpoint
from vecdqn.agent import DQNAgent, select_device
from vecdqn.config import FIXED_ON_RESUME, Config, default_torch_threads, option_flag
from vecdqn.device_replay import DeviceFrames
from vecdqn.evaluation import evaluate
from vecdqn.metrics import MetricsLogger
from vecdqn.pipeline import LearnerPipeline
from vecdqn.preflight import ConfigError, preflight
from vecdqn.replay import PrioritizedReplayBuffer
from vecdqn.schedules import Schedules
from vecdqn.train_state import TrainState, target_syncs_due, updates_due
from vecdqn.vector import WorkerError, WorkerGuard, ended_games
from vecdqn.video import video_for_tensorboard

__all__ = [
    "ConfigError", "Interrupted", "NonFiniteError", "TrainState", "Trainer", "WorkerError", "run_name",
    "target_syncs_due", "train", "updates_due",
]


class NonFiniteError(RuntimeError):
    """The loss or the Q-values became NaN or infinite."""


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
    """

    def __init__(self, enabled: bool = True, say: Any = None):
        self.enabled = enabled
        self.say = say
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}

    def install(self) -> StopSignals:
        """Install the handlers (if enabled); returns self."""
        if self.enabled:
            for s in (signal.SIGINT, signal.SIGTERM):
                self._previous[s] = signal.signal(s, self._on_signal)
        return self

    def uninstall(self) -> None:
        """Put the previous handlers back."""
        for s, handler in self._previous.items():
            signal.signal(s, handler)
        self._previous.clear()

    def __enter__(self) -> StopSignals:
        return self.install()

    def __exit__(self, *exc: Any) -> None:
        self.uninstall()

    def _on_signal(self, signum: int, frame: Any) -> None:
        if self.signum is not None:
            raise KeyboardInterrupt  # second signal: stop now; finally-blocks still close the workers
        self.signum = signum
        if self.say is not None:
            self.say(f"{signal.Signals(signum).name}: finishing this step and writing a checkpoint "
                     "(send it again to stop at once)")


def run_name(config: Config, now: float | None = None) -> str:
    """``<env_id>__<seed>__<unix time>`` with ``/`` in the env id replaced by ``-``."""
    if config.run_name:
        return config.run_name
    stamp = int(now if now is not None else time.time())
    return f"{config.env_id.replace('/', '-')}__{config.seed}__{stamp}"


class Trainer:
    """Trains one DQN agent as `Config` says.

    Args:
        config: the run's configuration.
        progress: show the tqdm bar.
        resume_state: a checkpoint dict (see `checkpoint.load`) to continue from; its run folder
            is reused and its global step continues.
        resume_dir: the run folder of ``resume_state``.
        handle_signals: install the SIGINT/SIGTERM handlers (main thread only).
        on_step: called with the trainer after each vector step (after its logging), e.g. to
            watch resources or to stop a test at a chosen moment.

    Raises:
        ConfigError: on a bad configuration, before any env worker starts.
    """

    def __init__(self, config: Config, *, progress: bool = True, resume_state: dict[str, Any] | None = None,
                 resume_dir: str | os.PathLike[str] | None = None, handle_signals: bool = True,
                 on_step: Callable[[Trainer], None] | None = None):
        preflight(config, resuming=resume_state is not None)
        self.config = config
        self.progress = progress
        self.resume_state = resume_state
        self.device = select_device(config.device)
        self.run_dir = Path(resume_dir) if resume_dir is not None else Path(config.log_dir) / run_name(config)
        self.state = TrainState.new(config)
        self.schedules = Schedules.from_config(config)
        self.envs: WorkerGuard | None = None
        self.logger: MetricsLogger | None = None
        self.pipeline: LearnerPipeline | None = None
        self.worker_checkpoint: Path | None = None
        self.replay_note = "no saved replay"
        self.on_step = on_step
        self.stop = StopSignals(handle_signals, say=lambda message: self.logger and self.logger.write(message))

    @property
    def step(self) -> int:
        """Agent steps summed over envs so far."""
        return self.state.step

    @classmethod
    def from_checkpoint(cls, path: str | os.PathLike[str], overrides: dict[str, Any] | None = None,
                        **kwargs: Any) -> Trainer:
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

    # -- the run ---------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        """Train until ``total_steps`` agent steps.

        Returns:
            a summary: ``run_dir``, ``steps``, ``updates``, ``episodes``, ``mean_return`` (raw, last
            100 games), ``sps`` (agent steps per second of this process), ``learning_sps`` (the same,
            counted from the first update on), ``checkpoint``, ``latest``.

        Raises:
            Interrupted: after SIGINT/SIGTERM, once the checkpoint is written.
            WorkerError: an env worker raised, died or hung (a checkpoint is written first).
            NonFiniteError: NaN/inf loss or Q-values (the last finite checkpoint is kept).
        """
        c = self.config
        self._start_run(c.torch_threads or default_torch_threads(c.num_envs, device_type=self.device.type))
        # Envs first: forked workers then do not inherit the replay's memory or torch's threads.
        self.envs = envs = WorkerGuard.start(c.env_id, c.num_envs, c.env_options(), c.worker_timeout)
        try:
            with self.stop:
                obs, actions = self._set_up(envs)
                return self._loop(envs, obs, actions)
        except WorkerError:
            envs.force_close()
            # The envs cannot be snapshotted any more; a resume from this checkpoint restarts the
            # games but keeps the networks, optimizer, counters and schedules.
            self.worker_checkpoint = self.save_checkpoint("latest.pt")
            raise
        except BaseException:
            envs.force_close()
            raise
        finally:
            envs.close()
            if self.logger is not None:
                self.logger.close()
            if self.pipeline is not None:
                self.pipeline.close()

    def _start_run(self, threads: int) -> None:
        """Torch threads, the seeds, the run folder and its ``config.json``."""
        c = self.config
        torch.set_num_threads(threads)
        random.seed(c.seed)
        np.random.seed(c.seed % 2**32)
        torch.manual_seed(c.seed)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        checkpoint.remove_stale(self.run_dir / "checkpoints")
        # On resume too: the file then shows the settings the run continues with.
        (self.run_dir / "config.json").write_text(c.to_json())

    def _set_up(self, envs: WorkerGuard) -> tuple[np.ndarray, np.ndarray]:
        """Replay, agent, the resume state and the logger; returns the first obs and actions."""
        c = self.config
        self._set_up_learner(envs.single_observation_space.shape, int(envs.single_action_space.n))
        start = self._restore(envs) if self.resume_state is not None else None
        self._start_pipeline()
        self._start_logger()
        if start is not None:
            return start
        s = self.state
        obs, _ = envs.reset(seed=c.seed if s.step == 0 else c.seed + s.step, step=s.step)
        return obs, self.agent.act(obs, self.schedules.epsilon(s.step))

    def _set_up_learner(self, obs_shape: tuple[int, ...], n_actions: int) -> None:
        """The replay and the agent for observations ``obs_shape`` (``(S, H, W)``) and ``n_actions``."""
        c = self.config
        self.buffer = PrioritizedReplayBuffer(
            c.buffer_size, obs_shape, alpha=c.per_alpha if c.per else 0.0, eps=c.per_eps, seed=c.seed,
            n_step=c.n_step, gamma=c.gamma,
        )
        self.agent = DQNAgent(
            n_actions, obs_shape, self.device, learning_rate=self.schedules.learning_rate(0),
            adam_eps=c.adam_eps, max_grad_norm=c.max_grad_norm, double=c.double, dueling=c.dueling,
            hidden_size=c.hidden_size, seed=c.seed + 1, compile=c.compile, amp=c.amp,
        )

    def _start_pipeline(self) -> None:
        """The learner pipeline, built after a restore (which may replace the buffer); see
        `LearnerPipeline` for its synchronous and prefetching modes."""
        c = self.config
        prefetch = self.device.type == "cuda" if c.prefetch is None else c.prefetch
        frames = DeviceFrames(self.buffer, select_device(c.replay_device)) if c.replay_device else None
        self.pipeline = LearnerPipeline(self.buffer, self.agent, c.batch_size, per=c.per, prefetch=prefetch,
                                        frames=frames)

    def _start_logger(self) -> None:
        """The `MetricsLogger`, continuing the counts of a resumed run (and saying so)."""
        c, s = self.config, self.state
        self.logger = MetricsLogger(str(self.run_dir), c.to_dict(), c.total_steps, initial_step=s.step,
                                    progress=self.progress, episode_history=s.episode_history, episodes=s.episodes)
        if self.resume_state is not None:
            self.logger.write(f"resumed {self.run_dir} at agent step {s.step}")
            if s.learn_from > s.step:
                self.logger.write(f"{self.replay_note}: refilling the buffer for --learning-starts {c.learning_starts} "
                                  "agent steps before learning resumes")

    def _loop(self, envs: WorkerGuard, obs: np.ndarray, actions: np.ndarray) -> dict[str, Any]:
        """Until ``total_steps``: send the actions, learn while the workers emulate, store the
        transitions, choose the next actions, then log, evaluate and checkpoint when due."""
        c, s = self.config, self.state
        clock = {"start": (time.perf_counter(), s.step), "learning": None}
        while s.step < c.total_steps:
            envs.step_async(actions, s.step)
            self._learn()
            next_obs = self._collect(envs, obs, actions)
            if clock["learning"] is None and s.updates > s.update_offset:
                clock["learning"] = (time.perf_counter(), s.step)
                self.logger.learning_started(s.step)
            obs, actions = next_obs, self.agent.act(next_obs, self.schedules.epsilon(s.step))
            self._log()
            if self.on_step is not None:
                self.on_step(self)
            if s.step >= s.next_eval:
                s.next_eval += c.eval_every
                evaluate_and_log(self.agent.online, c, s.step, self.device, self.logger)
            if self.stop.signum is not None:
                raise Interrupted(self.stop.signum, self.save_checkpoint("latest.pt", envs=envs, obs=obs,
                                                                         actions=actions))
            if s.next_checkpoint <= s.step < c.total_steps:
                s.next_checkpoint += c.checkpoint_every
                self.save_checkpoint("latest.pt", envs=envs, obs=obs, actions=actions)
                if c.keep_checkpoints:
                    self.save_checkpoint(f"step_{s.step:09d}.pt")
        latest = self.save_checkpoint("latest.pt", envs=envs, obs=obs, actions=actions)
        return self._summary(clock, latest, self.save_checkpoint("final.pt"))

    def _learn(self) -> None:
        """The updates due for this vector step, then the target syncs due (see `updates_due`)."""
        c, s = self.config, self.state
        if s.step < s.learn_from or len(self.buffer) < c.batch_size:
            return
        self.agent.set_learning_rate(self.schedules.learning_rate(s.step))
        beta = self.schedules.beta(s.step)
        for _ in range(updates_due(s.step, c.num_envs, s.learn_from, c.train_frequency, s.updates - s.update_offset)):
            metrics = self._update(beta)
            if metrics:  # with --prefetch the first update's metrics arrive with the next one
                self.logger.losses(metrics)
        syncs, s.next_sync = target_syncs_due(s.step, c.num_envs, s.next_sync, c.target_update_frequency)
        if syncs:
            self.agent.sync_target()

    def _update(self, beta: float) -> dict[str, float]:
        """One sampled batch, one gradient step, its priorities written back (with --prefetch:
        the previous update's metrics and priorities; see `LearnerPipeline`)."""
        metrics = self.pipeline.update(beta) or {}  # prefetch: the first update's results come with the second
        if metrics and not (math.isfinite(metrics["td_loss"]) and math.isfinite(metrics["q_values"])):
            raise NonFiniteError(
                f"non-finite loss ({metrics['td_loss']}) or mean Q ({metrics['q_values']}) at agent step "
                f"{self.state.step}, update {self.state.updates}; a too high --learning-rate is the usual cause: "
                "lower it and resume from the last checkpoint"
            )
        self.state.updates += 1
        return metrics

    def _collect(self, envs: WorkerGuard, obs: np.ndarray, actions: np.ndarray) -> np.ndarray:
        """Wait for the vector step, store its N transitions, record ended games; returns the
        next ``(N, S, H, W) uint8`` observations."""
        c, s = self.config, self.state
        next_obs, rewards, terminated, truncated, infos = envs.step_wait(s.step)
        s.step += c.num_envs
        # With SAME_STEP autoreset, next_obs[i] of an ended env is already the next episode's
        # first observation; the transition must end in the true last one, final_obs[i].
        stored_next = next_obs
        if (terminated | truncated).any():
            stored_next = next_obs.copy()
            for i in np.flatnonzero(infos["_final_obs"]):
                stored_next[i] = infos["final_obs"][i]
        # Each game at its own env's agent step (see `ended_games`), so none hides another.
        for step, episodic_return, length in ended_games(infos, s.step - c.num_envs + 1):
            self.logger.episode(step, episodic_return, length)
        s.episodes = self.logger.episodes
        # Sign clipping (Mnih et al. 2015) happens before the n-step sum, as in Rainbow.
        self.pipeline.store(obs, actions, np.sign(rewards) if c.clip_rewards else rewards, stored_next,
                            terminated, truncated)
        return next_obs

    def _log(self) -> None:
        """Scalars every ``log_every`` agent steps (and at the end); the bar every step."""
        c, s = self.config, self.state
        if s.step >= s.next_log or s.step >= c.total_steps:
            s.next_log += c.log_every
            self.logger.scalars(s.step, {
                "charts/epsilon": self.schedules.epsilon(s.step),
                "charts/beta": self.schedules.beta(s.step),
                "charts/learning_rate": self.agent.learning_rate,
                "replay/size": len(self.buffer),
                "replay/priority_max": float(self.buffer.max_priority),
            })
            self.logger.flush_losses(s.step)
            self.logger.sps(s.step)
        self.logger.progress(s.step)

    def _summary(self, clock: dict[str, Any], latest: Path, final: Path) -> dict[str, Any]:
        now, s = time.perf_counter(), self.state
        (t0, step0), learning = clock["start"], clock["learning"]
        learning_sps = ((s.step - learning[1]) / max(now - learning[0], 1e-9)
                        if learning is not None and s.step > learning[1] else float("nan"))
        return {
            "run_dir": str(self.run_dir), "steps": s.step, "updates": s.updates, "episodes": s.episodes,
            "mean_return": self.logger.mean_return, "sps": (s.step - step0) / max(now - t0, 1e-9),
            "learning_sps": learning_sps, "checkpoint": str(final), "latest": str(latest),
        }

    # -- checkpoints -------------------------------------------------------------------------------
    def save_checkpoint(self, name: str = "latest.pt", *, envs: WorkerGuard | None = None,
                        obs: np.ndarray | None = None, actions: np.ndarray | None = None) -> Path:
        """Write ``<run_dir>/checkpoints/<name>`` atomically; returns its path.

        Holds the networks, optimizer, the whole `TrainState`, every RNG state and the config.
        With ``envs``, ``obs`` and ``actions`` it also holds the envs' emulator and wrapper
        states, so a resume continues the very same games; with ``--save-replay`` the replay
        buffer is saved beside it as one unit (see `checkpoint.save_training`).
        """
        if self.logger is not None:
            self.state.episode_history = list(zip(self.logger.returns, self.logger.lengths, strict=True))
            self.state.episodes = self.logger.episodes
        snapshots = envs.snapshots(self.state.step) if envs is not None and obs is not None else None
        return checkpoint.save_training(
            self.run_dir / "checkpoints" / name,
            config=self.config.to_dict(), train_state=dataclasses.asdict(self.state),
            agent=self.agent.state_dict(), n_actions=self.agent.n_actions, obs_shape=self.agent.obs_shape,
            envs=None if snapshots is None else {"snapshots": snapshots, "obs": obs, "actions": actions},
            replay=self.buffer if self.config.save_replay and envs is not None else None,
        )

    def _restore(self, envs: WorkerGuard | None) -> tuple[np.ndarray, np.ndarray] | None:
        """Load the resume state into the agent, the `TrainState`, the RNGs, replay and envs (if
        given); returns the saved obs and actions if the envs are back in their saved games."""
        state = self.resume_state
        self.agent.load_state_dict(state["agent"])
        checkpoint.set_rng_states(state["rng"])
        replay, self.replay_note = checkpoint.load_replay(state)
        if replay is not None:
            self.buffer = replay
        self.state = TrainState(**state["train_state"]).resumed(self.config, with_replay=replay is not None)
        saved_envs = state.get("envs")
        if saved_envs is not None and envs is not None and envs.restore(saved_envs["snapshots"], self.state.step):
            return saved_envs["obs"], saved_envs["actions"]
        return None


def resumed_config(state: dict[str, Any], overrides: dict[str, Any], run_dir: Path) -> Config:
    """The configuration a checkpoint's run continues with: the saved one, updated with
    ``overrides`` (e.g. a longer ``total_steps``).

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
    config = Config.from_saved(saved, overrides)
    step = int(state["train_state"]["step"])
    if config.total_steps <= step:
        raise ConfigError(f"--total-steps {config.total_steps} is not beyond the checkpoint's agent step {step}; "
                          "give a larger --total-steps to continue")
    return config


def evaluate_and_log(network: torch.nn.Module, c: Config, step: int, device: torch.device,
                     logger: MetricsLogger) -> None:
    """The periodic evaluation: whole games in a separate, non-vectorized env (training envs
    untouched); logs ``eval/return_mean``, ``eval/return_std``, ``eval/hns`` and ``eval/video``."""
    result = evaluate(network, c, episodes=c.eval_episodes, epsilon=c.eval_epsilon, seed=c.seed + 1_000_003 + step,
                      device=device, record=True, record_max_frames=1_200)
    stats = result.stats
    values = {"eval/return_mean": stats["mean"], "eval/return_std": stats["std"]}
    if result.hns is not None:
        values["eval/hns"] = result.hns
    logger.scalars(step, values)
    if result.frames is not None and len(result.frames):
        # One frame per agent step (stride = frame skip), played back in real time.
        stride = c.frame_skip if result.length_unit == "frames" else 1
        clip = video_for_tensorboard(result.frames, max_frames=300, scale=0.5, stride=stride)
        logger.video("eval/video", clip, step, fps=60 / stride if stride > 1 else 15)
    logger.write(
        f"eval at agent step {step}: return {stats['mean']:.2f} ± {stats['std']:.2f} over {stats['episodes']} "
        "games" + (f", human-normalized {result.hns:.3f}" if result.hns is not None else "")
    )


def train(config: Config, **kwargs: Any) -> dict[str, Any]:
    """Convenience: ``Trainer(config, **kwargs).run()``."""
    return Trainer(config, **kwargs).run()
