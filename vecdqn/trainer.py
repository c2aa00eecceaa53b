"""The training loop: collect → store → learn → log → checkpoint.

Shape legend: ``N`` envs, ``S`` stacked frames, ``A`` actions.

One iteration of `Trainer.run` overlaps the env workers and the learner::

    main process:  act ─ step_async ─┬─ update × k ───────────┬─ step_wait ─ store ─ act ─ ...
                                     │                        │
    env workers:                     └─ emulate 4 frames × N ─┘

Who waits where:

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
every ``train_frequency`` agent steps once ``learning_starts`` transitions are stored; the
target network is synced every ``target_update_frequency`` agent steps.

Robustness: checkpoints are written atomically every ``checkpoint_every`` agent steps and at
the end; the first SIGINT/SIGTERM finishes the current step, checkpoints and exits 130/143 (a
second one exits at once); a crashed or hung env worker, or a non-finite loss, stops the run
with a message naming the cause, after keeping the last good checkpoint.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import pickle
import random
import signal
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

import vecdqn
from vecdqn import checkpoint
from vecdqn.agent import DQNAgent, select_device
from vecdqn.config import FIXED_ON_RESUME, Config, default_torch_threads, option_flag
from vecdqn.evaluation import evaluate, resolve_checkpoint, video_for_tensorboard
from vecdqn.metrics import MetricsLogger
from vecdqn.replay import PrioritizedReplayBuffer
from vecdqn.schedules import PiecewiseLinear
from vecdqn.vector import make_vector_env
from vecdqn.wrappers import check_env_options, make_env

CHECKPOINT_FORMAT = "vecdqn-checkpoint-1"


class ConfigError(ValueError):
    """A setting that cannot work, found before any env worker starts."""


class NonFiniteError(RuntimeError):
    """The loss or the Q-values became NaN or infinite."""


class WorkerError(RuntimeError):
    """An env worker raised, died or did not answer in time."""


class Interrupted(Exception):
    """The run was stopped by SIGINT or SIGTERM after writing a checkpoint."""

    def __init__(self, signum: int, checkpoint_path: Path | None):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.checkpoint_path = checkpoint_path

    @property
    def exit_code(self) -> int:
        return 128 + self.signum  # 130 for SIGINT, 143 for SIGTERM (shell convention)


def wrapper_options(config: Config) -> dict[str, Any]:
    """The `make_atari_env` keyword arguments of a config."""
    return dict(
        noop_max=config.noop_max,
        frame_skip=config.frame_skip,
        screen_size=config.screen_size,
        frame_stack=config.frame_stack,
        episodic_life=config.episodic_life,
        fire_reset=config.fire_reset,
        repeat_action_probability=config.repeat_action_probability,
        max_episode_frames=config.max_episode_frames,
    )


def run_name(config: Config, now: float | None = None) -> str:
    """``<env_id>__<seed>__<unix time>`` with ``/`` in the env id replaced by ``-``."""
    if config.run_name:
        return config.run_name
    stamp = int(now if now is not None else time.time())
    return f"{config.env_id.replace('/', '-')}__{config.seed}__{stamp}"


def available_memory_bytes() -> int | None:
    """Memory available to new allocations (``MemAvailable`` of /proc/meminfo), or None."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def preflight(config: Config, *, resuming: bool = False) -> None:
    """Every check that needs no env worker: values, env id, log folder, replay memory.

    Raises:
        ConfigError: one line naming the bad value and what to change.
    """
    try:
        config.validate()
        check_env_options(config.env_id, **wrapper_options(config))
        select_device(config.device)
    except ValueError as err:
        raise ConfigError(str(err)) from None
    try:
        # One env in this process, before any worker: catches envs whose observations the
        # pipeline cannot use (e.g. CartPole's vector) with the wrapper's own message.
        env = make_env(config.env_id, **wrapper_options(config))
    except ValueError as err:
        raise ConfigError(
            f"--env-id {config.env_id} cannot be used: {err}. vecdqn trains on envs with image observations, "
            "such as ALE games ('ALE/Breakout-v5') or 'vecdqn/Catch-v0'"
        ) from None
    try:
        # ...and one reset, which plays the no-ops and FIRE: options that cannot start a game
        # (e.g. a --frame-skip so long that FIRE's one agent step ends the game) fail here.
        env.reset(seed=config.seed)
    except Exception as err:  # whatever the env raises (gymnasium's own errors included)
        raise ConfigError(
            f"--env-id {config.env_id} cannot start a game with these options ({type(err).__name__}: {err}); "
            f"check --frame-skip {config.frame_skip} (frames per agent step), --noop-max {config.noop_max} and "
            f"--max-episode-frames {config.max_episode_frames}"
        ) from None
    finally:
        env.close()
    log_dir = Path(config.log_dir)
    if not resuming and config.run_name and (log_dir / config.run_name / "config.json").exists():
        raise ConfigError(
            f"--run-name {config.run_name}: {log_dir / config.run_name} already holds a run; continue it with "
            f"--resume {log_dir / config.run_name} or choose another --run-name"
        )
    try:
        log_dir.mkdir(parents=True, exist_ok=True)
        probe = log_dir / f".write-test-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as err:
        raise ConfigError(
            f"--log-dir {config.log_dir} is not writable ({err.strerror}); choose a folder you can write"
        ) from None
    _check_worker_limits(config.num_envs)
    need = PrioritizedReplayBuffer.bytes_needed(
        config.buffer_size, (config.frame_stack, config.screen_size, config.screen_size)
    )
    workers = config.num_envs * _WORKER_BYTES
    free = available_memory_bytes()
    if free is not None and need + workers > free:
        raise ConfigError(
            f"--buffer-size {config.buffer_size} needs {need / 2**30:.1f} GiB for the replay and --num-envs "
            f"{config.num_envs} about {workers / 2**30:.1f} GiB for the env workers, but only {free / 2**30:.1f} GiB "
            f"are free; use a smaller --buffer-size or fewer --num-envs"
        )


# Resident memory of one env worker process, measured ~48 MiB for an ALE game (most of it shared
# with the parent when forked); counted in full so that spawned workers fit too.
_WORKER_BYTES = 50 * 2**20
# File descriptors the parent holds per env worker (its pipe end, the process sentinel, slack).
_FDS_PER_WORKER = 4


def _check_worker_limits(num_envs: int) -> None:
    """Refuse more env workers than the process's open-file limit can hold (each worker needs a
    pipe), instead of failing halfway through starting them."""
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (ImportError, OSError, ValueError):  # no such limit on this platform
        return
    if soft != resource.RLIM_INFINITY and num_envs * _FDS_PER_WORKER + 64 > soft:
        raise ConfigError(
            f"--num-envs {num_envs} needs about {num_envs * _FDS_PER_WORKER + 64} open files but this process may "
            f"open {soft} (ulimit -n); use at most {(soft - 64) // _FDS_PER_WORKER} envs or raise the limit"
        )


class Trainer:
    """Trains one DQN agent as `Config` says.

    Args:
        config: the run's configuration.
        progress: show the tqdm bar.
        resume_state: a checkpoint dict (see `checkpoint.load`) to continue from; its run folder
            is reused and its global step continues.
        handle_signals: install the SIGINT/SIGTERM handlers (main thread only).

    Raises:
        ConfigError: on a bad configuration, before any env worker starts.
    """

    def __init__(
        self,
        config: Config,
        *,
        progress: bool = True,
        resume_state: dict[str, Any] | None = None,
        resume_dir: str | os.PathLike[str] | None = None,
        handle_signals: bool = True,
    ):
        preflight(config, resuming=resume_state is not None)
        self.config = config
        self.progress = progress
        self.resume_state = resume_state
        self.handle_signals = handle_signals
        self.device = select_device(config.device)
        self.run_dir = Path(resume_dir) if resume_dir is not None else Path(config.log_dir) / run_name(config)
        self.step = 0
        self.updates = 0
        self.logger: MetricsLogger | None = None
        self._signal: int | None = None
        self._previous_handlers: dict[int, Any] = {}

    @classmethod
    def from_checkpoint(cls, path: str | os.PathLike[str], overrides: dict[str, Any] | None = None,
                        **kwargs: Any) -> Trainer:
        """A trainer that continues the run of a checkpoint (a file or a run folder).

        ``overrides`` replace saved settings (e.g. a longer ``total_steps``).

        Raises:
            checkpoint.CheckpointError: naming the file, if it is missing, corrupt or truncated.
        """
        file = resolve_checkpoint(path)
        state = checkpoint.load(file, required=("config", "agent", "step", "format"))
        saved = state["config"]
        overrides = overrides or {}
        for name in ("log_dir", "run_name"):
            if name in overrides:
                raise ConfigError(
                    f"{option_flag(name)} {overrides[name]} cannot be given with --resume: the run continues in its "
                    f"own folder {file.parent.parent}"
                )
        for name in FIXED_ON_RESUME:
            if name in overrides and overrides[name] != saved.get(name):
                flag = option_flag(name)
                raise ConfigError(
                    f"{flag} {overrides[name]} differs from the run's {saved.get(name)}; {flag} cannot change "
                    "on --resume (start a new run instead)"
                )
        config = Config.from_dict({**saved, **overrides})
        if config.total_steps <= int(state["step"]):
            raise ConfigError(
                f"--total-steps {config.total_steps} is not beyond the checkpoint's agent step {state['step']}; "
                "give a larger --total-steps to continue"
            )
        return cls(config, resume_state=state, resume_dir=file.parent.parent, **kwargs)

    # -- set-up ----------------------------------------------------------------------------------
    def _schedules(self) -> None:
        c = self.config
        self.epsilon = PiecewiseLinear(
            [(0, c.epsilon_start), (c.epsilon_decay_steps, c.epsilon_end)] if c.epsilon_decay_steps > 0
            else [(0, c.epsilon_end)]
        )
        # Beta anneals over a fixed number of steps, not over total_steps, so a run continued with
        # a larger --total-steps keeps its schedules (exact resume).
        if c.per:
            self.beta = PiecewiseLinear([(0, c.per_beta_start), (c.per_beta_steps, c.per_beta_end)])
        else:
            self.beta = PiecewiseLinear([(0, 0.0)])
        self.learning_rate = PiecewiseLinear([(0, c.learning_rate)])

    def _seed(self) -> None:
        seed = self.config.seed
        random.seed(seed)
        np.random.seed(seed % 2**32)
        torch.manual_seed(seed)

    def _make_envs(self):
        c = self.config
        # Workers ignore SIGINT/SIGTERM (the disposition is inherited): a Ctrl-C reaches the
        # whole process group, and the main process, not each worker, decides how to stop.
        old = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            return make_vector_env(c.env_id, c.num_envs, **wrapper_options(c))
        finally:
            for s, handler in old.items():
                signal.signal(s, handler)

    def _on_signal(self, signum: int, frame: Any) -> None:
        if self._signal is not None:
            # Second signal: stop now. The finally-blocks still close the workers.
            raise KeyboardInterrupt
        self._signal = signum
        if self.logger is not None:
            self.logger.write(f"{signal.Signals(signum).name}: finishing this step and writing a checkpoint "
                              "(send it again to stop at once)")

    def _install_signal_handlers(self) -> None:
        if not self.handle_signals:
            return
        for s in (signal.SIGINT, signal.SIGTERM):
            self._previous_handlers[s] = signal.signal(s, self._on_signal)

    def _restore_signal_handlers(self) -> None:
        for s, handler in self._previous_handlers.items():
            signal.signal(s, handler)
        self._previous_handlers.clear()

    # -- the loop ----------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        """Train until ``total_steps`` agent steps.

        Returns:
            a summary: ``run_dir``, ``steps``, ``updates``, ``episodes``, ``mean_return`` (raw, last
            100 games), ``sps`` (agent steps per second of this process), ``learning_sps`` (the same,
            counted from the first update on), ``checkpoint``.

        Raises:
            Interrupted: after SIGINT/SIGTERM, once the checkpoint is written.
            WorkerError: an env worker raised, died or hung (a checkpoint is written first).
            NonFiniteError: NaN/inf loss or Q-values (the last finite checkpoint is kept).
        """
        c = self.config
        torch.set_num_threads(c.torch_threads or default_torch_threads(c.num_envs, device_type=self.device.type))
        self._seed()
        self._schedules()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        # On resume too: the file then shows the settings the run continues with (e.g. a longer
        # --total-steps).
        (self.run_dir / "config.json").write_text(c.to_json())

        # Envs first: forked workers then do not inherit the replay's memory or torch's threads.
        self.envs = envs = self._make_envs()
        self._install_signal_handlers()
        try:
            obs_shape = envs.single_observation_space.shape
            n_actions = int(envs.single_action_space.n)
            self.buffer = PrioritizedReplayBuffer(
                c.buffer_size, obs_shape, alpha=c.per_alpha if c.per else 0.0, eps=c.per_eps, seed=c.seed,
                n_step=c.n_step, gamma=c.gamma,
            )
            self.agent = DQNAgent(
                n_actions, obs_shape, self.device, learning_rate=c.learning_rate, adam_eps=c.adam_eps,
                max_grad_norm=c.max_grad_norm, double=c.double, dueling=c.dueling,
                hidden_size=c.hidden_size, seed=c.seed + 1, compile=c.compile,
            )
            start = self._restore() if self.resume_state is not None else {}
            self.logger = MetricsLogger(
                str(self.run_dir), c.to_dict(), c.total_steps, initial_step=self.step, progress=self.progress,
                episode_history=(self.resume_state or {}).get("episode_history"),
                episodes=(self.resume_state or {}).get("episodes", 0),
            )
            if self.resume_state is not None:
                self.logger.write(f"resumed {self.run_dir} at agent step {self.step}")
                if "replay" not in start:
                    self.logger.write(
                        "no saved replay: refilling the buffer for --learning-starts "
                        f"{c.learning_starts} agent steps before learning resumes"
                    )
            return self._loop(envs, start)
        except WorkerError:
            _force_close(envs)
            # The envs cannot be snapshotted any more; a resume from this checkpoint restarts the
            # games but keeps the networks, optimizer, counters and schedules.
            self.worker_checkpoint = self.save_checkpoint("latest.pt")
            raise
        except BaseException:
            _force_close(envs)
            raise
        finally:
            self._restore_signal_handlers()
            if not envs.closed:
                envs.close()
            if self.logger is not None:
                self.logger.close()

    def _step_wait(self, envs):
        try:
            return envs.step_wait(timeout=self.config.worker_timeout)
        except multiprocessing.TimeoutError:
            # The workers that have not answered are those whose pipe holds no reply.
            hung = [i for i, pipe in enumerate(envs.parent_pipes) if pipe is not None and not pipe.poll(0)]
            which = "env " + ", ".join(map(str, hung)) if hung else "an env worker"
            raise WorkerError(
                f"{which} did not answer within --worker-timeout {self.config.worker_timeout} s "
                f"at agent step {self.step}"
            ) from None
        except Exception as err:  # the worker's own exception, re-raised by gymnasium, or a dead pipe
            raise WorkerError(
                f"{_failed_workers(envs)} failed at agent step {self.step}: {type(err).__name__}: {err}"
            ) from err

    def _loop(self, envs, start: dict[str, Any]) -> dict[str, Any]:
        c = self.config
        agent, buffer, logger = self.agent, self.buffer, self.logger
        n = c.num_envs
        start_step = self.step
        start_time = time.perf_counter()
        if start and "obs" in start:
            obs, actions = start["obs"], start["actions"]
        else:
            try:
                obs, _ = envs.reset(seed=c.seed if self.step == 0 else c.seed + self.step)
            except Exception as err:  # a worker's exception, re-raised by gymnasium
                raise WorkerError(f"{_failed_workers(envs)} failed to reset: {type(err).__name__}: {err}") from err
            actions = agent.act(obs, self.epsilon(self.step))
        # Updates are due every train_frequency agent steps from learn_from on; update_offset is
        # the update count at learn_from (non-zero after a resume that had to refill the replay).
        self.learn_from = start.get("learn_from", c.learning_starts)
        self.update_offset = start.get("update_offset", 0)
        self.next_sync = start.get("next_sync", c.learning_starts + c.target_update_frequency)
        next_log = self.step + c.log_every
        next_checkpoint = self.step + c.checkpoint_every if c.checkpoint_every else math.inf
        next_eval = (self.step // c.eval_every + 1) * c.eval_every if c.eval_every else math.inf
        loss_sum = q_sum = 0.0
        loss_count = 0
        last_checkpoint = None
        learning_clock = None  # (time, step) of the first vector step with updates

        while self.step < c.total_steps:
            envs.step_async(actions)

            # Learn while the workers emulate (see the module docstring).
            if self.step >= self.learn_from and len(buffer) >= c.batch_size:
                due = (self.step + n - self.learn_from) // c.train_frequency + 1 - (self.updates - self.update_offset)
                beta = self.beta(self.step)
                for _ in range(max(due, 0)):
                    metrics = self._update(beta)
                    loss_sum += metrics["td_loss"]
                    q_sum += metrics["q_values"]
                    loss_count += 1
                while self.step + n >= self.next_sync:
                    agent.sync_target()
                    self.next_sync += c.target_update_frequency

            next_obs, rewards, terminated, truncated, infos = self._step_wait(envs)
            self.step += n
            if learning_clock is None and self.updates > self.update_offset:
                learning_clock = (time.perf_counter(), self.step)

            # With SAME_STEP autoreset, next_obs[i] of an ended env is already the next episode's
            # first observation; the transition must end in the true last one, final_obs[i].
            stored_next = next_obs
            if (terminated | truncated).any():
                stored_next = next_obs.copy()
                for i in np.flatnonzero(infos["_final_obs"]):
                    stored_next[i] = infos["final_obs"][i]
                self._record_episodes(infos)
            # Sign clipping (Mnih et al. 2015) happens before the n-step sum, as in Rainbow.
            stored_rewards = np.sign(rewards) if c.clip_rewards else rewards
            buffer.add(obs, actions, stored_rewards, stored_next, terminated, truncated)

            obs = next_obs
            actions = agent.act(obs, self.epsilon(self.step))

            if self.step >= next_log or self.step >= c.total_steps:
                next_log += c.log_every
                values = {
                    "charts/epsilon": self.epsilon(self.step),
                    "charts/beta": self.beta(self.step),
                    "charts/learning_rate": self.learning_rate(self.step),
                    "replay/size": len(buffer),
                    "replay/priority_max": float(buffer.max_priority),
                }
                if loss_count:
                    values["losses/td_loss"] = loss_sum / loss_count
                    values["losses/q_values"] = q_sum / loss_count
                    loss_sum = q_sum = 0.0
                    loss_count = 0
                logger.scalars(self.step, values)
                logger.sps(self.step)
            logger.progress(self.step)

            if self.step >= next_eval:
                next_eval += c.eval_every
                self._evaluate()
            if self._signal is not None:
                path = self.save_checkpoint("latest.pt", envs=envs, obs=obs, actions=actions)
                raise Interrupted(self._signal, path)
            if self.step >= next_checkpoint and self.step < c.total_steps:
                next_checkpoint += c.checkpoint_every
                last_checkpoint = self.save_checkpoint("latest.pt", envs=envs, obs=obs, actions=actions)

        now = time.perf_counter()
        elapsed = now - start_time
        learning_sps = ((self.step - learning_clock[1]) / max(now - learning_clock[0], 1e-9)
                        if learning_clock is not None and self.step > learning_clock[1] else float("nan"))
        last_checkpoint = self.save_checkpoint("latest.pt", envs=envs, obs=obs, actions=actions)
        final = self.save_checkpoint("final.pt")
        return {
            "run_dir": str(self.run_dir),
            "steps": self.step,
            "updates": self.updates,
            "episodes": logger.episodes,
            "mean_return": logger.mean_return,
            "sps": (self.step - start_step) / max(elapsed, 1e-9),
            "learning_sps": learning_sps,
            "checkpoint": str(final),
            "latest": str(last_checkpoint),
        }

    def _evaluate(self) -> None:
        """Greedy-ish whole games in a separate, non-vectorized env (training envs untouched);
        logs ``eval/return_mean``, ``eval/return_std``, ``eval/hns`` and ``eval/video``."""
        c = self.config
        result = evaluate(
            self.agent.online, c, episodes=c.eval_episodes, epsilon=c.eval_epsilon,
            seed=c.seed + 1_000_003 + self.step, device=self.device, record=True, record_max_frames=1_200,
        )
        stats = result.stats
        values = {"eval/return_mean": stats["mean"], "eval/return_std": stats["std"]}
        if result.hns is not None:
            values["eval/hns"] = result.hns
        self.logger.scalars(self.step, values)
        if result.frames is not None and len(result.frames):
            # One frame per agent step (stride = frame skip), played back in real time.
            stride = c.frame_skip if result.length_unit == "frames" else 1
            clip = video_for_tensorboard(result.frames, max_frames=300, scale=0.5, stride=stride)
            self.logger.video("eval/video", clip, self.step, fps=60 / stride if stride > 1 else 15)
        self.logger.write(
            f"eval at agent step {self.step}: return {stats['mean']:.2f} ± {stats['std']:.2f} over "
            f"{stats['episodes']} games" + (f", human-normalized {result.hns:.3f}" if result.hns is not None else "")
        )

    def _update(self, beta: float) -> dict[str, float]:
        c = self.config
        batch = self.buffer.sample(c.batch_size, beta)
        metrics, td_errors = self.agent.update(batch)
        if not (math.isfinite(metrics["td_loss"]) and math.isfinite(metrics["q_values"])):
            raise NonFiniteError(
                f"non-finite loss ({metrics['td_loss']}) or mean Q ({metrics['q_values']}) at agent step "
                f"{self.step}, update {self.updates}; a too high --learning-rate ({c.learning_rate}) is the "
                "usual cause: lower it and resume from the last checkpoint"
            )
        if c.per:
            self.buffer.update_priorities(batch.indices, td_errors)
        self.updates += 1
        return metrics

    def _record_episodes(self, infos: dict[str, Any]) -> None:
        """Log the whole games that ended in this vector step.

        A game normally ends on a step (its statistics are in ``final_info``); rarely it ends
        inside a reset (the life-loss continuation's no-op or FIRE reaches the frame cap), and
        the wrappers then put its statistics in the reset's info, the top-level ``info``.
        """
        for source in (infos.get("final_info", {}), infos):
            stats = source.get("episode")
            if stats is None:
                continue
            for i in np.flatnonzero(source["_episode"]):
                self.logger.episode(self.step, float(stats["r"][i]), float(stats["l"][i]))

    # -- checkpoints -------------------------------------------------------------------------------
    def save_checkpoint(self, name: str = "latest.pt", *, envs=None, obs: np.ndarray | None = None,
                        actions: np.ndarray | None = None) -> Path:
        """Write ``<run_dir>/checkpoints/<name>`` atomically; returns its path.

        Holds the networks, optimizer, counters, schedule positions, every RNG state, the config
        and the episode-statistics queue. With ``envs``, ``obs`` and ``actions`` it also holds the
        envs' emulator and wrapper states, so a resume continues the very same games; with
        ``--save-replay`` the replay buffer goes to ``<name>.replay`` beside it.
        """
        state: dict[str, Any] = {
            "format": CHECKPOINT_FORMAT,
            "vecdqn_version": vecdqn.__version__,
            "config": self.config.to_dict(),
            "step": self.step,
            "updates": self.updates,
            "agent": self.agent.state_dict(),
            "n_actions": self.agent.n_actions,
            "obs_shape": self.agent.obs_shape,
            "learn_from": getattr(self, "learn_from", self.config.learning_starts),
            "update_offset": getattr(self, "update_offset", 0),
            "next_sync": getattr(self, "next_sync", None),
            "episode_history": list(zip(self.logger.returns, self.logger.lengths, strict=True)) if self.logger else [],
            "episodes": self.logger.episodes if self.logger else (self.resume_state or {}).get("episodes", 0),
            "rng": {
                "python": random.getstate(),
                "numpy_global": np.random.get_state(),
                "torch": torch.get_rng_state(),
            },
        }
        if envs is not None and obs is not None:
            env_states = _get_env_states(envs)
            if env_states is not None:
                state["envs"] = env_states
                state["obs"] = obs
                state["actions"] = actions
        folder = self.run_dir / "checkpoints"
        if self.config.save_replay and envs is not None:
            replay_path = folder / (name + ".replay")
            checkpoint.save_atomic(self.buffer, replay_path,
                                   dump=lambda obj, f: pickle.dump(obj, f, protocol=pickle.HIGHEST_PROTOCOL))
            state["replay_file"] = replay_path.name
        return checkpoint.save_atomic(state, folder / name)

    def _restore(self) -> dict[str, Any]:
        """Load the resume state into the agent, counters, RNGs, replay and envs."""
        state = self.resume_state
        assert state is not None
        self.agent.load_state_dict(state["agent"])
        self.step = int(state["step"])
        self.updates = int(state["updates"])
        rng = state["rng"]
        random.setstate(rng["python"])
        np.random.set_state(rng["numpy_global"])
        torch.set_rng_state(rng["torch"])
        start: dict[str, Any] = {"learn_from": state["learn_from"], "update_offset": state.get("update_offset", 0)}
        if state.get("next_sync") is not None:
            start["next_sync"] = state["next_sync"]
        replay_file = state.get("replay_file")
        if replay_file:
            path = self.run_dir / "checkpoints" / replay_file
            try:
                with open(path, "rb") as f:
                    self.buffer = pickle.load(f)
            except (OSError, pickle.UnpicklingError, EOFError, ValueError) as err:
                raise checkpoint.CheckpointError(f"replay file {path} is corrupt or missing ({err})") from None
            start["replay"] = True
        else:
            # Learning restarts once learning_starts fresh transitions are stored.
            start["learn_from"] = self.step + self.config.learning_starts
            start["update_offset"] = self.updates
            start["next_sync"] = start["learn_from"] + self.config.target_update_frequency
        if "envs" in state and _set_env_states(self.envs, state["envs"]):
            start["obs"] = state["obs"]
            start["actions"] = state["actions"]
        return start


def _force_close(envs) -> None:
    """Stop every worker now. The workers ignore SIGTERM (see `Trainer._make_envs`), so
    gymnasium's ``close(terminate=True)`` alone would wait for a hung one forever: SIGKILL first."""
    for process in envs.processes:
        if process.is_alive():
            process.kill()
    envs.close(terminate=True)


def _failed_workers(envs) -> str:
    """Name the failed env workers: gymnasium drops the pipe of a worker that raised; a killed
    worker shows as a dead process."""
    failed = [i for i, pipe in enumerate(envs.parent_pipes) if pipe is None]
    failed += [i for i, p in enumerate(envs.processes) if not p.is_alive() and i not in failed]
    if not failed:
        return "an env worker"
    return "env " + ", ".join(str(i) for i in sorted(failed))


def _get_env_states(envs) -> list[Any] | None:
    try:
        return list(envs.get_attr("snapshot"))
    except Exception:  # envs without snapshot support: resume restarts the games
        return None


def _set_env_states(envs, states: list[Any]) -> bool:
    try:
        envs.set_attr("snapshot", states)
        return True
    except Exception:
        return False


def train(config: Config, **kwargs: Any) -> dict[str, Any]:
    """Convenience: ``Trainer(config, **kwargs).run()``."""
    return Trainer(config, **kwargs).run()


def main(argv: list[str] | None = None) -> int:
    """Command-line entry (``scripts/train.py``): parse, train, map failures to exit codes.

    Exit codes: 0 done; 2 bad input (one line on stderr, nothing started); 130/143 stopped by
    SIGINT/SIGTERM after a checkpoint; 1 a worker failure or non-finite loss (message on stderr).
    """
    from vecdqn.config import build_parser, explicit_options, parse_args

    argv = sys.argv[1:] if argv is None else argv
    config = parse_args(argv)
    try:
        if config.resume:
            given = explicit_options(build_parser(), argv) - {"resume"}
            overrides = {k: getattr(config, k) for k in given}
            trainer = Trainer.from_checkpoint(config.resume, overrides)
        else:
            trainer = Trainer(config)
    except (ConfigError, checkpoint.CheckpointError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    try:
        summary = trainer.run()
    except Interrupted as stop:
        print(f"\nstopped by {signal.Signals(stop.signum).name} at agent step {trainer.step}; checkpoint: "
              f"{stop.checkpoint_path}\nresume with: python scripts/train.py --resume {trainer.run_dir}",
              file=sys.stderr)
        return stop.exit_code
    except KeyboardInterrupt:
        latest = trainer.run_dir / "checkpoints" / "latest.pt"
        where = f"the last checkpoint is {latest}" if latest.exists() else "no checkpoint was written yet"
        print(f"\nstopped at once at agent step {trainer.step}; {where}", file=sys.stderr)
        return 130
    except (WorkerError, NonFiniteError) as err:
        kept = trainer.run_dir / "checkpoints" / "latest.pt"
        print(f"error: {err}\nlast checkpoint: {kept if kept.exists() else 'none written yet'}", file=sys.stderr)
        return 1
    print(
        f"done: {summary['steps']} agent steps, {summary['updates']} updates, {summary['episodes']} games, "
        f"mean return (last 100) {summary['mean_return']:.2f}, {summary['sps']:.0f} agent steps/s\n"
        f"run folder: {summary['run_dir']}\ncheckpoint: {summary['checkpoint']}"
    )
    return 0
