"""The training core: counts, logging, evaluation, checkpoints, signals and failures, for any
learner and any collector.

Shape legend: ``N`` transitions per store (one per env), ``S`` stacked frames, ``H×W`` a frame,
``A`` actions.

Two collectors feed one `TrainingCore`: the vector-env loop (`vecdqn.trainer.VectorCollector`)
and the Ape-X block loop (`vecdqn.distributed.learner.BlockCollector`). A collector owns where
transitions come from; a `Learner` owns acting and learning (DQN: replay, pipeline and target
network, `vecdqn.dqn`; PQN: rollout, Q(λ) returns and epochs, `vecdqn.pqn`); the core owns
everything else, once::

    TrainingCore.run(collector):
        collector.start()
        until total_steps:
            collector.collect()  ──► core.act(obs)       the learner's actions for the envs
                                 ├─► core.store(...)     the transitions, into the learner
                                 ├─► core.learn(k)       the learner's updates due for k new
                                 │                       agent steps (metrics checked and logged)
                                 ├─► core.games(...)     whole games to TensorBoard
                                 └─► core.advance(k)     the agent-step count
            log ─ on_step ─ evaluate ─ stop request ─ periodic checkpoint
        final checkpoints, summary
    (a failed env worker or actor: a checkpoint, then the error)

Counts are agent steps summed over envs or actors (see `vecdqn.train_state`); every counter
lives in one `TrainState`, saved whole by the checkpoint.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import random
import signal
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch

from vecdqn import checkpoint
from vecdqn.config import Config
from vecdqn.dqn import DQNLearner
from vecdqn.envs import WorkerError, env_family
from vecdqn.evaluation import evaluate, periodic_eval_seed
from vecdqn.metrics import MetricsLogger
from vecdqn.pqn import PQNLearner
from vecdqn.preflight import preflight
from vecdqn.resume import Resumed
from vecdqn.run_dir import claim
from vecdqn.train_state import TrainState
from vecdqn.video import video_for_tensorboard

__all__ = ["Collector", "Interrupted", "Learner", "NonFiniteError", "StopSignals", "TrainingCore", "evaluate_and_log",
           "make_learner"]


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
    Inside ``with stop.held():`` a second signal is recorded too, not raised.
    """

    def __init__(self, enabled: bool = True, say: Callable[[str], Any] | None = None):
        self.enabled = enabled
        self.say = say
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}
        self._held = False

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """No KeyboardInterrupt inside: for a call that must not be cut halfway, such as starting
        Ray (its half-started processes would outlive the run); the run stops after it."""
        self._held = True
        try:
            yield
        finally:
            self._held = False

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
            if self._held:
                return
            raise KeyboardInterrupt  # second signal: stop now; finally-blocks still close the workers
        self.signum = signum
        if self.say is not None:
            self.say(f"{signal.Signals(signum).name}: finishing this step and writing a checkpoint "
                     "(send it again to stop at once)")


class Learner(Protocol):
    """What the core asks of a learner (DQN: `vecdqn.dqn.DQNLearner`). Counts live in the
    core's `TrainState`, which `learn` reads and updates (``updates``, the target's clock)."""

    network: torch.nn.Module  # the greedy policy's Q-network: (B, S, H, W) uint8 -> (B, A) float32
    n_actions: int
    obs_shape: tuple[int, ...]

    def restore(self, saved: dict[str, Any], replay: Any) -> None:
        """Load a checkpoint's `state_dict` (and a saved replay, where the learner keeps one)."""

    def start(self) -> None:
        """Ready to act and learn (after any `restore`)."""

    def new_games(self) -> str | None:
        """The collector starts new games (after `start`, before the first `act`): a new run, or a
        resume that cannot continue the saved games; what the learner holds of old games must not
        continue into the new ones. Returns a line for the console, or None."""

    def epsilon(self, step: int) -> float:
        """The exploration rate of its actions at agent step ``step``."""

    def act(self, obs: np.ndarray, step: int) -> np.ndarray:
        """``(N, S, H, W) uint8 -> (N,) int64`` actions at agent step ``step``."""

    def store(self, *transitions: Any, envs: Any = None) -> np.ndarray:
        """Take ``obs, actions, rewards (for learning), next_obs, terminated, truncated`` of N envs."""

    def learn(self, state: TrainState, agent_steps: int, report: Callable[[dict[str, float]], None]) -> None:
        """Learn what is due for ``agent_steps`` more agent steps; each update's metrics to ``report``."""

    def scalars(self, step: int) -> dict[str, float]:
        """Its own TensorBoard scalars at agent step ``step``."""

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint keeps of it (networks, optimizer, generators)."""

    def replay(self) -> Any:
        """What ``--save-replay`` saves beside a checkpoint (None: nothing)."""

    def close(self) -> None:
        """Stop its threads."""


def make_learner(config: Config, device: torch.device, obs_shape: tuple[int, ...], n_actions: int) -> Learner:
    """The run's learner (``--algo``) for observations ``(S, H, W)`` and ``A`` actions."""
    learner = {"dqn": DQNLearner, "pqn": PQNLearner}[config.algo]
    return learner(config, device, obs_shape, n_actions)


class Collector(Protocol):
    """A source of transitions for `TrainingCore.run`.

    ``collect`` brings the next transitions (a vector step, or the blocks that arrived): it
    acts with `TrainingCore.act`, stores them with `TrainingCore.store`, runs
    `TrainingCore.learn` for their ``k`` agent steps,
    records finished games with `TrainingCore.games` and counts them with
    `TrainingCore.advance`. It stops at `TrainingCore.next_boundary` if it can, else after at
    most one of its vector steps beyond it.
    """

    def start(self) -> None:
        """Ready to collect: first observations and actions, or the first requests."""

    def collect(self) -> None:
        """Bring, store and learn from the next transitions (see the class)."""

    def snapshot(self) -> dict[str, Any] | None:
        """What a checkpoint keeps of the envs to continue the same games (see
        `checkpoint.save_training`'s ``envs``), or None.

        Raises:
            WorkerError: an env worker is gone.
        """

    def scalars(self) -> dict[str, float]:
        """The collector's own scalars, written with the core's every ``log_every`` agent steps."""


class TrainingCore:
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
        self.config, self.run_dir, self.progress = config, Path(run_dir), progress
        self.resume, self.on_step = resume, on_step
        self.state = resume.state if resume is not None else TrainState.new(config)
        self.learner: Learner | None = None
        self.failure_checkpoint: Path | None = None
        self.stop = StopSignals(handle_signals, say=self.say)
        self._logger: MetricsLogger | None = None
        self._lock: int | None = None  # the run folder's lock (`vecdqn.run_dir.claim`)
        self._clock: dict[str, Any] = {}

    def say(self, message: str) -> None:
        """One line to the console (through the bar, once the logger runs)."""
        if self._logger is not None:
            self._logger.write(message)
        else:
            print(message, flush=True)

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
            self.learner.restore(r.learner, r.replay)
            checkpoint.set_rng_states(r.rng)
        self.learner.start()
        s = self.state
        self._logger = MetricsLogger(str(self.run_dir), c.to_dict(), c.total_steps, initial_step=s.step,
                                     progress=self.progress)
        threads = torch.get_num_threads()
        self.say(f"{self.run_dir}: {c.env_id}, {c.total_steps:,} agent steps; learner on {self.device.type} "
                 f"({threads} torch thread{'' if threads == 1 else 's'})")
        if r is None:
            return None
        self.say(f"resumed {self.run_dir} at agent step {s.step}")
        if s.learn_from > s.step:
            self.say(f"{r.note}: refilling the buffer for --learning-starts {c.learning_starts} agent steps "
                     f"before learning {'resumes' if s.updates else 'starts'}")
        return r.envs

    # -- what collectors call --------------------------------------------------------------------------
    def new_games(self) -> None:
        """The collector starts new games rather than continuing saved ones (a new run, or a resume
        from a checkpoint without the envs' state): the learner ends what it holds of the old
        games (`Learner.new_games`), and the console gets its line."""
        line = self.learner.new_games()
        if line:
            self.say(line)

    def act(self, obs: np.ndarray) -> np.ndarray:
        """The learner's ``(N,) int64`` actions for ``(N, S, H, W) uint8`` observations, now."""
        return self.learner.act(obs, self.state.step)

    def epsilon(self) -> float:
        """The exploration rate the learner acts with now."""
        return self.learner.epsilon(self.state.step)

    def store(self, *transitions: Any, envs: Any = None) -> np.ndarray:
        """Hand transitions to the learner: ``obs (N, S, H, W) uint8, actions (N,) int64, rewards
        (N,) float (for learning: clipped, `vecdqn.acting.learner_rewards`), next_obs (N, S, H, W)
        uint8 (`vecdqn.acting.stored_next_obs`), terminated, truncated (N,) bool``; ``envs``: which
        of the learner's env streams they continue (None: all, in order). Returns the slots the
        learner filed them in."""
        return self.learner.store(*transitions, envs=envs)

    def learn(self, agent_steps: int) -> None:
        """What the learner has due for the ``agent_steps`` agent steps after ``state.step``.

        Raises:
            NonFiniteError: an update's loss or mean Q-value is NaN or infinite.
        """
        self.learner.learn(self.state, agent_steps, self._report)

    def _report(self, metrics: dict[str, float]) -> None:
        """One update's metrics: checked, then kept for the next log."""
        if not (math.isfinite(metrics["td_loss"]) and math.isfinite(metrics["q_values"])):
            raise NonFiniteError(
                f"non-finite loss ({metrics['td_loss']}) or mean Q ({metrics['q_values']}) at agent step "
                f"{self.state.step}, update {self.state.updates}; a too high --learning-rate is the usual "
                "cause: lower it and resume from the last checkpoint"
            )
        self.state.add_losses(metrics)

    def games(self, games: Iterable[tuple[int, float, float]]) -> None:
        """Record whole games ``(agent step, raw return, length)`` (length in the env family's
        unit) in the `TrainState` and write them to TensorBoard."""
        for step, episodic_return, length in games:
            self.state.record_game(episodic_return, length)
            self._logger.episode(step, episodic_return, length)

    def log(self, step: int, values: dict[str, float]) -> None:
        """Write scalars ``{tag: value}`` at agent step ``step`` (a collector's own, per game)."""
        self._logger.scalars(step, values)

    def flush_logs(self) -> None:
        """Write what the event files hold in memory to disk now."""
        self._logger.writer.flush()

    def advance(self, agent_steps: int) -> None:
        """Count ``agent_steps`` more agent steps (after their `learn` and `store`)."""
        self.state.step += agent_steps

    def policy_weights(self) -> dict[str, torch.Tensor]:
        """The greedy policy's network weights now (``state_dict``), e.g. for remote actors."""
        return self.learner.network.state_dict()

    @property
    def next_boundary(self) -> float:
        """The agent step at which the core next acts after a collect: the next evaluation or
        periodic checkpoint, or the end of the run (inf: none). A collector that can stop its
        transitions there (the block collector) does, so these happen at that very step."""
        s = self.state
        return min(self.config.total_steps, s.next_eval, s.next_checkpoint)

    # -- the run -----------------------------------------------------------------------------------------
    def run(self, collector: Collector) -> dict[str, Any]:
        """Train from ``collector`` until ``total_steps`` agent steps (see the module docstring).

        Returns:
            a summary: ``run_dir``, ``steps``, ``updates``, ``episodes``, ``mean_return`` (raw, last
            100 games), ``sps`` (agent steps per second of this process), ``learning_sps`` (the same,
            counted from the first update on), ``checkpoint``, ``latest``.

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
            latest = self.save_checkpoint("latest.pt", collector)
            if c.keep_checkpoints and s.next_checkpoint <= s.step:  # as a longer run would keep it
                s.next_checkpoint += c.checkpoint_every
                self.save_checkpoint(f"step_{s.step:09d}.pt")
        except WorkerError:
            # The envs cannot be snapshotted any more; a resume from this checkpoint restarts the
            # games but keeps the networks, optimizer, counters and schedules.
            self.failure_checkpoint = self.save_checkpoint("latest.pt")
            raise
        return self._summary(latest, self.save_checkpoint("final.pt"))

    def _after_collect(self, collector: Collector) -> None:
        """Log, evaluate, honour a stop request and checkpoint, each when due."""
        c, s = self.config, self.state
        if self._clock["learning"] is None and s.updates > s.update_offset:
            self._clock["learning"] = (time.perf_counter(), s.step)
            self._logger.learning_started(s.step)
        self._log(collector)
        if self.on_step is not None:
            self.on_step()
        if s.step >= s.next_eval:
            s.next_eval += c.eval_every
            evaluate_and_log(self.learner.network, c, s.step, self.device, self._logger)
        if self.stop.signum is not None:
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
            self._logger.scalars(s.step, {**self.learner.scalars(s.step), **collector.scalars(), **s.take_losses()})
            self._logger.sps(s.step)
        self._logger.progress(s.step, s.mean_return, s.episodes)

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
        learner = self.learner
        agent = learner.state_dict()  # first: it may report an update in flight into the state
        return checkpoint.save_training(
            self.run_dir / "checkpoints" / name,
            config=self.config.to_dict(), train_state=dataclasses.asdict(self.state),
            agent=agent, n_actions=learner.n_actions, obs_shape=learner.obs_shape,
            envs=envs, replay=learner.replay() if self.config.save_replay and collector is not None else None,
        )

    def close(self) -> None:
        """Close the logger and the learner (whichever were set up), and let go of the run folder."""
        if self._logger is not None:
            self._logger.close()
        if self.learner is not None:
            self.learner.close()
        if self._lock is not None:
            os.close(self._lock)  # releases the folder's lock
            self._lock = None


def evaluate_and_log(network: torch.nn.Module, c: Config, step: int, device: torch.device,
                     logger: MetricsLogger) -> None:
    """The periodic evaluation: whole games in a separate, non-vectorized env (training envs
    untouched); logs ``eval/return_mean``, ``eval/return_std``, ``eval/hns`` and ``eval/video``."""
    result = evaluate(network, c, episodes=c.eval_episodes, epsilon=c.eval_epsilon,
                      seed=periodic_eval_seed(c.seed, step), device=device, record=True, record_max_frames=1_200)
    stats = result.stats
    logger.scalars(step, result.scalars)
    if result.frames is not None and len(result.frames):
        # One frame per agent step (stride = frames per agent step), played back in real time.
        family = env_family(c.env_id)
        stride = family.frames_per_step(c.env_options())
        clip = video_for_tensorboard(result.frames, max_frames=300, scale=0.5, stride=stride)
        logger.video("eval/video", clip, step, fps=(family.fps or 15.0) / stride)
    logger.write(
        f"eval at agent step {step}: return {stats['mean']:.2f} ± {stats['std']:.2f} over {stats['episodes']} "
        "games" + (f", human-normalized {result.hns:.3f}" if result.hns is not None else "")
    )
