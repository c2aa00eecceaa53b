"""The DQN learner: prioritized replay, the double-DQN agent and its target network, and the
pipeline between them, behind the interface every learner offers the training core. A learner
whose record names another agent (`vecdqn.learners.LearnerSpec.agent`) learns from the same
replay and pipeline with that agent.

Shape legend: ``N`` transitions per store (one per env), ``S`` stacked frames, ``H×W`` a frame,
``A`` actions.

What a vector step does here (the core calls these; the seam: `vecdqn.learners.Learner`)::

    act(obs, step)          ε-greedy over the online network (ε from its schedule)
    learn(state, k, report) the updates due for k agent steps (one every train_frequency from
                            learn_from on, `updates_due`), then the target syncs due
    store(transitions)      into the replay, through the pipeline (device frames, prefetch)

Sources: Mnih et al. 2015 (DQN, target network), van Hasselt et al. 2016 (double DQN), Wang et
al. 2016 (dueling head), Schaul et al. 2016 (prioritized replay), Hessel et al. 2018 (n-step).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from vecdqn.config import Config
from vecdqn.dqn.agent import DQNAgent
from vecdqn.dqn.device_replay import DeviceFrames
from vecdqn.dqn.pipeline import LearnerPipeline
from vecdqn.learners import learner_spec
from vecdqn.model import QNetwork
from vecdqn.replay import PrioritizedReplayBuffer
from vecdqn.schedules import Schedules
from vecdqn.staging import select_device
from vecdqn.train_state import TrainState, target_syncs_due, updates_due

__all__ = ["DQNLearner"]


class DQNLearner:
    """Replay, agent and pipeline of one DQN run.

    Args:
        config: the run's configuration.
        device: the learner's device (chosen once, by the core).
        obs_shape: ``(S, H, W)`` of one observation.
        n_actions: ``A``.

    Attributes: ``buffer`` (`PrioritizedReplayBuffer`), ``agent`` (`DQNAgent`), ``pipeline``
    (`LearnerPipeline`, from `start` on), ``schedules`` (ε, β, learning rate over agent steps).
    """

    def __init__(self, config: Config, device: torch.device, obs_shape: tuple[int, ...], n_actions: int):
        c = self.config = config
        self.schedules = Schedules.from_config(c)
        self.buffer = PrioritizedReplayBuffer(
            c.buffer_size, obs_shape, alpha=c.per_alpha if c.per else 0.0, eps=c.per_eps, seed=c.seed,
            n_step=c.n_step, gamma=c.gamma,
        )
        self.agent = self.build_agent(device, obs_shape, n_actions)
        self.pipeline: LearnerPipeline | None = None
        self._saved_pipeline: dict[str, Any] | None = None  # a checkpoint's prefetch state, for `start`
        self._replay_restored = False

    def build_agent(self, device: torch.device, obs_shape: tuple[int, ...], n_actions: int) -> Any:
        """The run's agent: the one its learner's record names (`vecdqn.learners.LearnerSpec.agent`,
        built by its ``from_config``), else DQN's."""
        c = self.config
        spec = learner_spec(c.algo)
        if spec.agent is not None:
            return spec.load_agent().from_config(c, device, obs_shape, n_actions, self.schedules.learning_rate(0))
        return DQNAgent(
            n_actions, obs_shape, device, learning_rate=self.schedules.learning_rate(0),
            adam_eps=c.adam_eps, max_grad_norm=c.max_grad_norm, double=c.double, seed=c.seed + 1,
            compile=c.compile, amp=c.amp,
            overlap_forward=c.overlap_forward, build=lambda: QNetwork.from_config(c, n_actions, obs_shape),
        )

    @property
    def network(self) -> torch.nn.Module:
        """The online Q-network: ``(B, S, H, W) uint8 -> (B, A) float32`` (evaluation, actors)."""
        return self.agent.online

    @property
    def n_actions(self) -> int:
        return self.agent.n_actions

    @property
    def obs_shape(self) -> tuple[int, ...]:
        return self.agent.obs_shape

    @property
    def n_step(self) -> int:
        """The replay's n of its n-step returns."""
        return self.buffer.n_step

    def restore(self, saved: dict[str, Any]) -> None:
        """Load a checkpoint's learner state (`state_dict`); what prefetch held is taken up by
        `start` if the replay it belongs to is restored too (`restore_replay`)."""
        self.agent.load_state_dict(saved)
        self._saved_pipeline = saved.get("pipeline")

    def restore_replay(self, replay: PrioritizedReplayBuffer) -> None:
        """Continue with a saved replay (before `start`, which builds the pipeline over it)."""
        self.buffer = replay
        self._replay_restored = True

    def start_envs(self, count: int) -> None:
        """The replay takes ``count`` env streams (`PrioritizedReplayBuffer.start_envs`), e.g. the
        Ape-X actors' envs."""
        self.buffer.start_envs(count)

    def start(self) -> None:
        """Build the pipeline (after `restore`, which may replace the buffer)."""
        c = self.config
        prefetch = self.agent.device.type == "cuda" if c.prefetch is None else c.prefetch
        frames = DeviceFrames(self.buffer, select_device(c.replay_device)) if c.replay_device else None
        self.pipeline = LearnerPipeline(self.buffer, self.agent, c.batch_size, per=c.per, prefetch=prefetch,
                                        frames=frames)
        if self._saved_pipeline is not None and self._replay_restored:
            self.pipeline.load_state_dict(self._saved_pipeline)
        self._saved_pipeline = None

    def new_games(self) -> None:
        """Nothing to end: a checkpoint without the envs' state (a kept ``step_*.pt``, a failed
        worker's) holds no replay either, so a run resumed from it refills an empty replay."""
        return None

    # -- acting -------------------------------------------------------------------------------------
    def epsilon(self, step: int) -> float:
        """The exploration rate at agent step ``step``: its schedule's, or 0 for an agent whose
        network explores by itself (``explores``: noisy layers)."""
        return 0.0 if getattr(self.agent, "explores", False) else self.schedules.epsilon(step)

    def act(self, obs: np.ndarray, step: int) -> np.ndarray:
        """``(N, S, H, W) uint8 -> (N,) int64`` ε-greedy actions at agent step ``step``."""
        return self.agent.act(obs, self.epsilon(step))

    # -- learning -----------------------------------------------------------------------------------
    def store(self, *transitions: Any, envs: Any = None) -> np.ndarray:
        """Add transitions (`PrioritizedReplayBuffer.add`'s arguments: ``obs, actions, rewards
        (clipped), next_obs, terminated, truncated``) the one way that keeps the pipeline
        consistent (`LearnerPipeline.store`). Returns the ``(N,) int64`` slots."""
        return self.pipeline.store(*transitions, envs=envs)

    def set_priorities(self, slots: np.ndarray, td_errors: np.ndarray) -> None:
        """Priorities ``|δ| + ε`` for ``(M,)`` slots, through the pipeline (after any draw)."""
        self.pipeline.set_priorities(slots, td_errors)

    def learn(self, state: TrainState, agent_steps: int, report: Callable[[dict[str, float]], None]) -> None:
        """The updates due for the ``agent_steps`` agent steps after ``state.step``, then the
        target syncs due (`updates_due`, `target_syncs_due`); none before ``state.learn_from`` or
        before the replay holds one batch. Counts each update in ``state.updates`` and hands its
        metrics (``td_loss``, ``q_values``, ``grad_norm``) to ``report`` (with prefetch, the
        previous update's)."""
        c, s = self.config, state
        if s.step < s.learn_from or len(self.buffer) < c.batch_size:
            return
        self.agent.set_learning_rate(self.schedules.learning_rate(s.step))
        beta = self.schedules.beta(s.step)
        for _ in range(updates_due(s.step, agent_steps, s.learn_from, c.train_frequency, s.updates - s.update_offset)):
            metrics = self.pipeline.update(beta)
            if metrics:  # prefetch: the first update's results come with the second
                report(metrics)
            s.updates += 1
        syncs, s.next_sync = target_syncs_due(s.step, agent_steps, s.next_sync, c.target_update_frequency)
        if syncs:
            self.agent.sync_target()

    def sync(self) -> None:
        """Wait for the prefetch thread's draw and the last update's results (prefetch; nothing
        is in flight otherwise), leaving them for the next `learn` to write back and report, where
        a run without this wait would."""
        if self.pipeline is not None:
            self.pipeline.settle()

    def scalars(self, step: int) -> dict[str, float]:
        """``charts/beta``, ``charts/learning_rate`` (the schedule's at ``step``: what an update at
        ``step`` uses, also before updates resume), ``replay/size``, ``replay/priority_max``."""
        return {
            "charts/beta": self.schedules.beta(step),
            "charts/learning_rate": self.schedules.learning_rate(step),
            "replay/size": len(self.buffer),
            "replay/priority_max": float(self.buffer.max_priority),
        }

    # -- checkpoints --------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Networks, optimizer and the exploration generator (`DQNAgent.state_dict`) and, with
        prefetch, what the pipeline holds between updates (``pipeline``:
        `LearnerPipeline.state_dict`). After `sync`."""
        state = self.agent.state_dict()
        if self.pipeline is not None and self.pipeline.prefetch:
            state["pipeline"] = self.pipeline.state_dict()
        return state

    def replay(self) -> PrioritizedReplayBuffer:
        """The replay, for a checkpoint with ``--save-replay``."""
        return self.buffer

    def close(self) -> None:
        """Stop the pipeline's sample thread."""
        if self.pipeline is not None:
            self.pipeline.close()
