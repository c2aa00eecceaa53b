"""The counters of a training run and the arithmetic of its clocks, as pure functions.

Units are agent steps summed over envs (one vector step of N envs is N agent steps), except
``updates`` (gradient updates) and ``episodes`` (whole games).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from vecdqn.config import Config
from vecdqn.learners import learner_spec

__all__ = ["GAME_HISTORY", "TrainState", "target_syncs_due", "updates_due"]

# whole games whose (return, length) a run keeps: the window of its mean return
GAME_HISTORY = 100


def updates_due(step: int, num_envs: int, learn_from: int, train_frequency: int, updates_since: int) -> int:
    """Gradient updates to run during the vector step that takes the count from ``step`` to
    ``step + num_envs`` agent steps: one per ``train_frequency`` agent steps from ``learn_from``
    on (the first in the vector step that starts at ``learn_from``), less the ``updates_since``
    already done since then.

    >>> updates_due(96, 4, 100, 4, 0), updates_due(100, 4, 100, 4, 0), updates_due(104, 8, 100, 4, 2)
    (0, 2, 2)
    """
    if step < learn_from:
        return 0
    return max((step + num_envs - learn_from) // train_frequency + 1 - updates_since, 0)


def target_syncs_due(step: int, num_envs: int, next_sync: int, period: int) -> tuple[int, int]:
    """``(syncs, next_sync)``: how many hard target syncs fall into the vector step that ends at
    agent step ``step + num_envs``, and the agent step of the sync after them.

    >>> target_syncs_due(96, 8, 100, 500), target_syncs_due(0, 8, 100, 500)
    ((1, 600), (0, 100))
    """
    syncs = 0
    while step + num_envs >= next_sync:
        syncs += 1
        next_sync += period
    return syncs, next_sync


def next_multiple(step: int, period: int) -> float:
    """The first multiple of ``period`` after agent step ``step`` (``inf`` for period 0: never):
    where a fresh or resumed run next logs, evaluates or checkpoints."""
    return (step // period + 1) * period if period else math.inf


@dataclass
class TrainState:
    """Every counter of a run, created once and saved whole in the checkpoint.

    Units are agent steps summed over envs, except ``updates`` (gradient updates) and
    ``episodes`` (whole games). ``episode_history`` holds the raw return and the length (emulator
    frames for ALE games) of the last `GAME_HISTORY` games, oldest first; `record_game` adds one.
    ``loss_sums``/``loss_count`` hold the updates' losses since the last log (`add_losses`,
    `take_losses`).
    """

    step: int = 0
    updates: int = 0
    learn_from: int = 0          # agent step of the first update (later after a resume without replay)
    update_offset: int = 0       # updates done before learn_from
    next_sync: int = 0           # agent step of the next target sync
    next_log: int = 0
    next_eval: float = math.inf
    next_checkpoint: float = math.inf
    episodes: int = 0
    episode_history: list[tuple[float, float]] = field(default_factory=list)  # last 100 (return, length)
    # The updates' losses/* since the last log, summed, and how many: a resume logs the same means.
    loss_sums: dict[str, float] = field(default_factory=dict)
    loss_count: int = 0

    @classmethod
    def new(cls, c: Config) -> TrainState:
        learn_from = learner_spec(c.algo).learns_from(c)  # DQN: after --learning-starts; PQN: at once
        return cls(
            learn_from=learn_from, next_sync=learn_from + c.target_update_frequency,
            next_log=next_multiple(0, c.log_every), next_eval=next_multiple(0, c.eval_every),
            next_checkpoint=next_multiple(0, c.checkpoint_every),
        )

    def record_game(self, episodic_return: float, length: float) -> None:
        """Count one finished game and keep its raw return and length in ``episode_history``."""
        self.episodes += 1
        self.episode_history.append((float(episodic_return), float(length)))
        del self.episode_history[:-GAME_HISTORY]

    def add_losses(self, metrics: dict[str, float]) -> None:
        """Count one update's ``td_loss`` and ``q_values`` towards the next `take_losses`."""
        for name in ("td_loss", "q_values"):
            self.loss_sums[f"losses/{name}"] = self.loss_sums.get(f"losses/{name}", 0.0) + metrics[name]
        self.loss_count += 1

    def take_losses(self) -> dict[str, float]:
        """``{"losses/td_loss", "losses/q_values"}``: the means over the updates since the last
        call (``{}`` when there was none), and a fresh start.

        >>> s = TrainState()
        >>> s.add_losses({"td_loss": 1.0, "q_values": 2.0}); s.add_losses({"td_loss": 3.0, "q_values": 0.0})
        >>> s.take_losses(), s.take_losses()
        ({'losses/td_loss': 2.0, 'losses/q_values': 1.0}, {})
        """
        means = {tag: total / self.loss_count for tag, total in self.loss_sums.items()} if self.loss_count else {}
        self.loss_sums, self.loss_count = {}, 0
        return means

    @property
    def mean_return(self) -> float:
        """Mean raw return of the games in ``episode_history`` (NaN before the first).

        >>> s = TrainState(); s.record_game(1, 9); s.record_game(-1, 9); s.record_game(1, 9); s.mean_return
        0.3333333333333333
        """
        history = self.episode_history
        return sum(r for r, _ in history) / len(history) if history else math.nan

    def resumed(self, c: Config, *, with_replay: bool) -> TrainState:
        """This state, continued under ``c``: logs, evaluations and checkpoints come at the next
        multiples of ``c``'s periods, the agent steps an uninterrupted run uses (so a resumed run
        keeps the same ``step_<N>.pt`` files); without a saved replay, a learner that keeps one
        (`vecdqn.learners.LearnerSpec.keeps_replay`) waits as long as a new run would before it
        learns again (DQN: ``learning_starts`` fresh transitions); PQN learns on."""
        state = dataclasses.replace(
            self, next_log=next_multiple(self.step, c.log_every), next_eval=next_multiple(self.step, c.eval_every),
            next_checkpoint=next_multiple(self.step, c.checkpoint_every),
        )
        spec = learner_spec(c.algo)
        if not with_replay and spec.keeps_replay:
            state.learn_from = self.step + spec.learns_from(c)
            state.update_offset = self.updates
            state.next_sync = state.learn_from + c.target_update_frequency
        return state
