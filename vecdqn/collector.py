"""Both sides of the seam between the training core and a collector (a source of transitions:
the vector-env loop `vecdqn.trainer.VectorCollector`, the Ape-X block loop
`vecdqn.distributed.learner.BlockCollector`): what the core asks of a collector (`Collector`), and
what the core offers it (`CollectorPort`, the verbs `vecdqn.core.TrainingCore` inherits).

Shape legend: ``N`` transitions per store (one per env), ``S`` stacked frames, ``H×W`` a frame,
``A`` actions.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any, Protocol

import numpy as np
import torch

from vecdqn.config import Config
from vecdqn.learners import Learner
from vecdqn.train_state import TrainState

__all__ = ["Collector", "CollectorPort", "NonFiniteError"]


class NonFiniteError(RuntimeError):
    """The loss or the Q-values became NaN or infinite."""


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


class CollectorPort:
    """What the training core offers its collector: the learner's actions, the store, the
    updates due, the games and the agent-step count, all on one `TrainState`.

    Attributes (set by `vecdqn.core.TrainingCore`): ``config``, ``state`` (the `TrainState`),
    ``learner`` (a `vecdqn.learners.Learner`), ``logger`` (a `vecdqn.metrics.MetricsLogger`).
    """

    config: Config
    state: TrainState
    learner: Learner | None
    logger: Any

    def say(self, message: str) -> None:
        """One line to the console (through the bar, once the logger runs)."""
        if self.logger is not None:
            self.logger.write(message)
        else:
            print(message, flush=True)

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
        learner filed them in (``envs`` only for a `vecdqn.learners.ReplayLearner`)."""
        if envs is None:
            return self.learner.store(*transitions)
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
            self.logger.episode(step, episodic_return, length)

    def log(self, step: int, values: dict[str, float]) -> None:
        """Write scalars ``{tag: value}`` at agent step ``step`` (a collector's own, per game)."""
        self.logger.scalars(step, values)

    def flush_logs(self) -> None:
        """Write what the event files hold in memory to disk now."""
        self.logger.flush()

    def advance(self, agent_steps: int) -> None:
        """Count ``agent_steps`` more agent steps (after their `learn` and `store`)."""
        self.state.step += agent_steps

    def policy_weights(self) -> dict[str, torch.Tensor]:
        """The greedy policy's network weights now (``state_dict``), e.g. for remote actors."""
        self.learner.sync()
        return self.learner.network.state_dict()

    @property
    def next_boundary(self) -> float:
        """The agent step at which the core next acts after a collect: the next evaluation or
        periodic checkpoint, or the end of the run (inf: none). A collector that can stop its
        transitions there (the block collector) does, so these happen at that very step."""
        s = self.state
        return min(self.config.total_steps, s.next_eval, s.next_checkpoint)
