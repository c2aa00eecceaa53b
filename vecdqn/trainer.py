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
every ``train_frequency`` agent steps after ``learning_starts``; the target network is synced
every ``target_update_frequency`` agent steps.
"""

from __future__ import annotations

import math
import random
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

import vecdqn
from vecdqn import checkpoint
from vecdqn.agent import DQNAgent, select_device
from vecdqn.config import Config, default_torch_threads
from vecdqn.metrics import MetricsLogger
from vecdqn.replay import PrioritizedReplayBuffer
from vecdqn.schedules import PiecewiseLinear
from vecdqn.vector import make_vector_env


class NonFiniteError(RuntimeError):
    """The loss or the Q-values became NaN or infinite."""


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


class Trainer:
    """Trains one DQN agent as `Config` says.

    Args:
        config: a validated configuration (`Config.validate` is called again here).
        progress: show the tqdm bar.

    Raises:
        ValueError: on a bad configuration, before any env worker starts.
    """

    def __init__(self, config: Config, *, progress: bool = True):
        config.validate()
        self.config = config
        self.progress = progress
        self.device = select_device(config.device)
        self.run_dir = Path(config.log_dir) / run_name(config)
        self.step = 0
        self.updates = 0
        self.envs = None
        self.logger: MetricsLogger | None = None

    # -- schedules -------------------------------------------------------------------------------
    def _schedules(self) -> None:
        c = self.config
        self.epsilon = PiecewiseLinear(
            [(0, c.epsilon_start), (c.epsilon_decay_steps, c.epsilon_end)] if c.epsilon_decay_steps > 0
            else [(0, c.epsilon_end)]
        )
        if c.per and c.total_steps > c.learning_starts:
            self.beta = PiecewiseLinear([(c.learning_starts, c.per_beta_start), (c.total_steps, c.per_beta_end)])
        else:
            self.beta = PiecewiseLinear([(0, c.per_beta_start if c.per else 0.0)])
        self.learning_rate = PiecewiseLinear([(0, c.learning_rate)])

    def _seed(self) -> None:
        seed = self.config.seed
        random.seed(seed)
        np.random.seed(seed % 2**32)
        torch.manual_seed(seed)

    # -- the loop ----------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        """Train for ``total_steps`` agent steps.

        Returns:
            a summary: ``run_dir``, ``steps``, ``updates``, ``episodes``, ``mean_return`` (raw, last
            100 games), ``sps`` (agent steps per second over the whole run), ``checkpoint``.
        """
        c = self.config
        torch.set_num_threads(c.torch_threads or default_torch_threads(c.num_envs))
        self._seed()
        self._schedules()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / "config.json").write_text(c.to_json())

        # Envs first: forked workers then do not inherit the replay's memory or torch's threads.
        self.envs = envs = make_vector_env(c.env_id, c.num_envs, **wrapper_options(c))
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
            self.logger = MetricsLogger(str(self.run_dir), c.to_dict(), c.total_steps, progress=self.progress)
            summary = self._loop(envs)
        finally:
            envs.close()
            if self.logger is not None:
                self.logger.close()
        return summary

    def _loop(self, envs) -> dict[str, Any]:
        c = self.config
        agent, buffer, logger = self.agent, self.buffer, self.logger
        n = c.num_envs
        start_time = time.perf_counter()
        obs, _ = envs.reset(seed=c.seed)
        actions = agent.act(obs, self.epsilon(self.step))
        next_sync = c.learning_starts + c.target_update_frequency
        next_log = self.step + c.log_every
        loss_sum = q_sum = 0.0
        loss_count = 0

        while self.step < c.total_steps:
            envs.step_async(actions)

            # Learn while the workers emulate (see the module docstring).
            if self.step >= c.learning_starts and len(buffer) >= c.batch_size:
                due = (self.step + n - c.learning_starts) // c.train_frequency + 1 - self.updates
                beta = self.beta(self.step)
                for _ in range(max(due, 0)):
                    metrics = self._update(beta)
                    loss_sum += metrics["td_loss"]
                    q_sum += metrics["q_values"]
                    loss_count += 1
                while self.step + n >= next_sync:
                    agent.sync_target()
                    next_sync += c.target_update_frequency

            next_obs, rewards, terminated, truncated, infos = envs.step_wait()
            self.step += n

            # With SAME_STEP autoreset, next_obs[i] of an ended env is already the next episode's
            # first observation; the transition must end in the true last one, final_obs[i].
            stored_next = next_obs
            ended = terminated | truncated
            if ended.any():
                stored_next = next_obs.copy()
                for i in np.flatnonzero(infos["_final_obs"]):
                    stored_next[i] = infos["final_obs"][i]
                self._record_episodes(infos)
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

        elapsed = time.perf_counter() - start_time
        final = self.save_checkpoint("final.pt")
        return {
            "run_dir": str(self.run_dir),
            "steps": self.step,
            "updates": self.updates,
            "episodes": logger.episodes,
            "mean_return": logger.mean_return,
            "sps": self.step / max(elapsed, 1e-9),
            "checkpoint": str(final),
        }

    def _update(self, beta: float) -> dict[str, float]:
        c = self.config
        batch = self.buffer.sample(c.batch_size, beta)
        metrics, td_errors = self.agent.update(batch)
        if not (math.isfinite(metrics["td_loss"]) and math.isfinite(metrics["q_values"])):
            raise NonFiniteError(
                f"non-finite loss {metrics['td_loss']} / mean Q {metrics['q_values']} at agent step "
                f"{self.step}, update {self.updates}; the learning rate ({c.learning_rate}) is the usual "
                "cause: lower --learning-rate"
            )
        if c.per:
            self.buffer.update_priorities(batch.indices, td_errors)
        self.updates += 1
        return metrics

    def _record_episodes(self, infos: dict[str, Any]) -> None:
        final_info = infos.get("final_info", {})
        stats = final_info.get("episode")
        if stats is None:
            return
        for i in np.flatnonzero(final_info["_episode"]):
            self.logger.episode(self.step, float(stats["r"][i]), float(stats["l"][i]))

    # -- checkpoints -------------------------------------------------------------------------------
    def save_checkpoint(self, name: str = "latest.pt") -> Path:
        """Write ``<run_dir>/checkpoints/<name>`` atomically; returns its path."""
        state = {
            "format": "vecdqn-checkpoint-1",
            "vecdqn_version": vecdqn.__version__,
            "config": self.config.to_dict(),
            "step": self.step,
            "updates": self.updates,
            "agent": self.agent.state_dict(),
            "n_actions": self.agent.n_actions,
            "obs_shape": self.agent.obs_shape,
        }
        return checkpoint.save_atomic(state, self.run_dir / "checkpoints" / name)


def train(config: Config, **kwargs: Any) -> dict[str, Any]:
    """Convenience: ``Trainer(config, **kwargs).run()``."""
    return Trainer(config, **kwargs).run()


