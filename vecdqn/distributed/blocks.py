"""What actors ship (`Block`, each new frame once) and how the learner files it into its one
prioritized replay (`BlockIngest`).

Shape legend: ``T`` vector steps in a block, ``K`` envs per actor, ``A`` actors, ``S`` stacked
frames, ``H×W`` a frame, ``n`` steps of a return, ``R`` episode starts in a block.

Why frames once: a stacked observation repeats ``S − 1`` frames of the previous one, and the
object store is the bottleneck on the way to the replay, so a block carries each step's newest
frame (``(T, K, H, W)``, 7 KB per agent step on Atari) and whole stacks only where a stream
starts (an actor's first block, and each reset). The learner rebuilds the stacks exactly.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from vecdqn.acting import ended_games, learner_rewards

if TYPE_CHECKING:
    from vecdqn.learners import ReplayLearner

__all__ = ["Block", "BlockIngest"]


# The fields of a `Block` with one row per vector step.
ROW_FIELDS = ("frames", "actions", "rewards", "terminated", "truncated", "priorities")


@dataclass
class Block:
    """``T`` vector steps of one actor's ``K`` envs.

    Fields::

        actor            int                   the actor's index a
        first_u          int                   the actor's vector step of row 0 (counts from its
                                               process start)
        frames           (T, K, H, W) uint8    newest frame of each step's next obs (of the ended
                                               episode's last obs where the step ended one)
        actions          (T, K) int64
        rewards          (T, K) float32        raw (the learner clips)
        terminated       (T, K) bool           life loss included, as the learner's target wants
        truncated        (T, K) bool
        priorities       (T, K, n) float32     |δ| of the window starting j steps before step t
                                               that completes at step t, at [t, k, j]; NaN: none
        first_obs        (K, S, H, W) uint8    the obs row 0 acts in; only in the first block of an
                                               actor process (fresh games), else None
        reset_obs        (R, S, H, W) uint8    first obs of each new episode, in (t, k) order of
                                               the steps that ended one; None when R = 0
        episodes         [(t, k, return, length in frames)] whole games that ended
        weights_version  int                   the learner's weights it played with (-1: initial)
        epsilon          float                 its exploration rate
    """

    actor: int
    first_u: int
    frames: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    priorities: np.ndarray
    first_obs: np.ndarray | None = None
    reset_obs: np.ndarray | None = None
    episodes: list[tuple[int, int, float, float]] = field(default_factory=list)
    weights_version: int = -1
    epsilon: float = 0.0

    @classmethod
    def empty(cls, actor: int, steps: int, envs: int, n_step: int, obs_shape: tuple[int, ...],
              first_u: int) -> Block:
        """A block of ``steps`` rows to fill with `record`; ``obs_shape`` is ``(S, H, W)``."""
        shape = (steps, envs)
        return cls(actor=actor, first_u=first_u, frames=np.zeros((*shape, *obs_shape[1:]), dtype=np.uint8),
                   actions=np.zeros(shape, dtype=np.int64), rewards=np.zeros(shape, dtype=np.float32),
                   terminated=np.zeros(shape, dtype=bool), truncated=np.zeros(shape, dtype=bool),
                   priorities=np.full((*shape, n_step), np.nan, dtype=np.float32))

    @property
    def agent_steps(self) -> int:
        """``T·K``."""
        return self.actions.size

    @property
    def nbytes(self) -> int:
        """Bytes of its arrays (what crosses the object store, pickling aside)."""
        arrays = [self.frames, self.actions, self.rewards, self.terminated, self.truncated, self.priorities,
                  self.first_obs, self.reset_obs]
        return sum(a.nbytes for a in arrays if a is not None)

    def split(self, steps: int) -> tuple[Block, Block]:
        """``(its first steps rows, the rest)`` as two blocks of the same actor process, for
        ``0 < steps < T``: the rest continues the first's stream (no ``first_obs``; its rows and
        games counted from 0). The learner files the first up to an evaluation, a checkpoint or
        the end of the run, and the rest after it."""
        cut = int((self.terminated[:steps] | self.truncated[:steps]).sum())  # episode starts in the first part

        def part(rows: slice, resets: slice, **fields: Any) -> Block:
            reset_obs = None if self.reset_obs is None else self.reset_obs[resets]
            return dataclasses.replace(self, **{name: getattr(self, name)[rows] for name in ROW_FIELDS},
                                       reset_obs=reset_obs if reset_obs is not None and len(reset_obs) else None,
                                       **fields)

        head = part(slice(None, steps), slice(None, cut), episodes=[game for game in self.episodes if game[0] < steps])
        rest = part(slice(steps, None), slice(cut, None), first_u=self.first_u + steps, first_obs=None,
                    episodes=[(t - steps, k, r, n) for t, k, r, n in self.episodes if t >= steps])
        return head, rest

    def record(self, t: int, frames: np.ndarray, actions: np.ndarray, rewards: np.ndarray,
               terminated: np.ndarray, truncated: np.ndarray) -> None:
        """Row ``t``: ``frames (K, H, W) uint8`` and ``(K,)`` actions, raw rewards and flags."""
        self.frames[t], self.actions[t], self.rewards[t] = frames, actions, rewards
        self.terminated[t], self.truncated[t] = terminated, truncated

    def add_episodes(self, t: int, infos: dict[str, Any]) -> None:
        """The whole games that ended at row ``t`` (`vecdqn.acting.ended_games`)."""
        self.episodes += [(t, k, episodic_return, length) for k, episodic_return, length in ended_games(infos, 0)]


class _Step(NamedTuple):
    """One vector step of an actor, whole stacks: ``obs, next_obs (K, S, H, W) uint8``,
    ``actions, rewards, terminated, truncated (K,)``, ``priorities (K, n)``, its step ``u``."""

    obs: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    next_obs: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    priorities: np.ndarray
    u: int


class BlockIngest:
    """Files blocks of ``A`` actors × ``K`` envs into one DQN learner's replay: actor a's
    env k is the replay's env ``a·K + k``, with its own ring, so stacking and n-step returns are
    exactly those of a single-process run over the same games.

    Each actor's last step is held back until its next block shows how its stream continues:
    when the actor was restarted (its next block brings ``first_obs``), the held step is added as
    a truncation, so no n-step window spans two processes' games. Initial priorities ``|δ|``
    from the actor replace the max priority as each window completes (the replay adds its ε:
    ``p = |δ| + ε``, Horgan et al. 2018). Transitions and priorities reach the replay the way every
    replay write does, through the learner's replay seam (`vecdqn.learners.ReplayLearner`:
    ``store`` with ``envs``, ``set_priorities``).

    Args:
        learner: a learner with a replay (DQN), started (its replay's N is fixed here to ``A·K``).
        actors, actor_envs: ``A`` and ``K``.
        clip_rewards: store ``sign(reward)`` (Mnih et al. 2015).
        prioritize: use the actors' priorities (off for uniform replay).

    Raises:
        ValueError: a replay whose N is already another.
    """

    def __init__(self, learner: ReplayLearner, actors: int, actor_envs: int, *, clip_rewards: bool = True,
                 prioritize: bool = True):
        self.learner, self.actors, self.k = learner, actors, actor_envs
        self.clip_rewards, self.prioritize = clip_rewards, prioritize
        self.n_step = learner.n_step
        learner.start_envs(actors * actor_envs)
        self._obs: dict[int, np.ndarray] = {}  # actor -> (K, S, H, W) obs its next step acts in
        self._held: dict[int, _Step] = {}
        self._slot_of = np.zeros((actors * actor_envs, self.n_step), dtype=np.int64)  # [env, u % n]
        self.dropped_blocks = 0

    def envs_of(self, actor: int) -> np.ndarray:
        """``(K,) int64`` replay envs of ``actor``."""
        return actor * self.k + np.arange(self.k)

    def ingest(self, block: Block) -> bool:
        """Add a block's transitions (all but its last step, held back); False when it was
        dropped: a block continuing a stream this learner never saw the start of."""
        a = block.actor
        if block.first_obs is not None:
            self.end_stream(a)
            self._obs[a] = block.first_obs
        elif a not in self._obs:
            self.dropped_blocks += 1
            return False
        for step in self._steps(block):
            if a in self._held:
                self._add(a, self._held[a])
            self._held[a] = step
        return True

    def end_stream(self, actor: int) -> None:
        """Add ``actor``'s held step as a truncation (its process is gone, or the run ends): its
        pending n-step windows complete and bootstrap from their last observation."""
        held = self._held.pop(actor, None)
        if held is not None:
            self._add(actor, held._replace(truncated=np.ones_like(held.truncated)))
        self._obs.pop(actor, None)

    def _steps(self, block: Block) -> list[_Step]:
        """The block's rows as whole stacks, rebuilt from the frames."""
        a, steps = block.actor, []
        obs, resets = self._obs[a], 0
        for t in range(block.actions.shape[0]):
            next_obs = np.concatenate([obs[:, 1:], block.frames[t][:, None]], axis=1)
            term, trunc = block.terminated[t], block.truncated[t]
            steps.append(_Step(obs, block.actions[t], block.rewards[t], next_obs, term, trunc, block.priorities[t],
                               block.first_u + t))
            obs = next_obs
            done = np.flatnonzero(term | trunc)
            if done.size:
                obs = next_obs.copy()
                obs[done] = block.reset_obs[resets:resets + done.size]
                resets += done.size
        self._obs[a] = obs
        return steps

    def _add(self, actor: int, step: _Step) -> None:
        envs, n = self.envs_of(actor), self.n_step
        slots = self.learner.store(step.obs, step.actions, learner_rewards(step.rewards, self.clip_rewards),
                                   step.next_obs, step.terminated, step.truncated, envs=envs)
        self._slot_of[envs, step.u % n] = slots
        if self.prioritize:  # right after the store, in this thread: no draw runs until the next update
            k, j = np.nonzero(np.isfinite(step.priorities))
            if k.size:
                self.learner.set_priorities(self._slot_of[envs[k], (step.u - j) % n], step.priorities[k, j])
