"""`DistributedTrainer`: the learner of ``--actors N`` (Ape-X, Horgan et al. 2018), the
`BlockCollector` feeding the same `vecdqn.core.TrainingCore` as the single-process trainer.

One iteration of the learner, with the actors playing in their own processes all along::

    learner:  take finished blocks ─ file each into the replay ─ its updates ─ publish weights ─ log
                     ▲                                                          │ (every
    actors:   play T steps ─ block ─ play T steps ─ block ─ ...   ◄─────────────┘  --weight-sync-every)

Counts mean what they mean in `vecdqn.trainer.Trainer`: ``step`` counts the agent steps of
every actor that reached the replay; one update is due every ``train_frequency`` of them from
``learning_starts`` on (`updates_due`, a block of ``T·K`` agent steps playing the part of a
vector step), the target syncs every ``target_update_frequency``; β and the learning rate
follow their schedules in agent steps. The actors' epsilons are fixed (`apex_epsilons`; the
``--epsilon-*`` options are refused with ``--actors``). If the learner is slower than the actors,
the replay ratio still holds: the actors wait (see `vecdqn.distributed.pool`, "Backpressure").
Evaluations, checkpoints and the end of the run fall exactly on their agent step when it is a
multiple of ``--actor-envs``: the block that crosses one is split there (`Block.split`), so
``--total-steps`` is exact; blocks beyond it are left unread.

TensorBoard: ``charts/episodic_return`` and ``charts/episodic_length`` hold every actor's
games (each at the agent step it reached the replay); ``charts/episodic_return/actor_<i>`` the
games of actor ``i`` alone; ``distributed/actor_restarts``, ``distributed/weights_version``
(the updates the published weights have seen) and ``distributed/blocks_dropped``.

Checkpoints hold the networks, optimizer, counters and RNGs (no env snapshots, no replay): a
``--resume`` starts the actors on fresh games and refills ``learning_starts`` agent steps (a
replay saved by a single-process run is not reused: its open n-step windows belong to other
games). An actor whose env fails stops the run with one line naming it, after a checkpoint.
"""

from __future__ import annotations

import collections
import math
import os
from typing import Any

import ray

from vecdqn.config import Config
from vecdqn.core import TrainingCore
from vecdqn.distributed import require_ray
from vecdqn.distributed.blocks import Block, BlockIngest
from vecdqn.distributed.pool import ActorPool, start_ray
from vecdqn.envs import make_env
from vecdqn.preflight import ConfigError, ray_address
from vecdqn.staging import default_torch_threads
from vecdqn.trainer import TrainerBase

__all__ = ["BlockCollector", "DistributedTrainer", "learner_threads"]


def learner_threads(config: Config, device_type: str, cpu_count: int | None = None) -> int:
    """Torch threads of the learner: `default_torch_threads`, less one core per actor when the
    actors run on this machine (a local Ray instance): idle-spinning torch threads that lose
    their cores to the actors slow every update several-fold."""
    cores = cpu_count if cpu_count is not None else (os.cpu_count() or 1)
    local = 0 if ray_address(config.ray_address)[0] else config.actors
    return max(1, default_torch_threads(local, cores, device_type) - (local if device_type == "cpu" else 0))


class BlockCollector:
    """The Ape-X collector: each `collect` files the blocks the actors finished into the core,
    each followed by the updates and target syncs due for its ``T·K`` agent steps (a block plays
    the part of a vector step); the weights are published every ``weight_sync_every`` updates.

    Args:
        core: the `TrainingCore` it feeds (set up).
        pool: the actors.
        ingest: files blocks into the learner's replay.
    """

    def __init__(self, core: TrainingCore, pool: ActorPool, ingest: BlockIngest):
        self.core, self.pool, self.ingest = core, pool, ingest
        self.published_at = 0  # updates when the weights were last published
        self.pending: collections.deque[Block] = collections.deque()  # taken, not filed yet

    def start(self) -> None:
        """Tell the learner its games are new (`TrainingCore.new_games`: the actors always start
        fresh games, also after a resume), publish the first weights and ask every actor for
        blocks."""
        self.core.new_games()
        self.publish()
        self.pool.fill()

    def publish(self) -> None:
        """Put the online network's weights where the actors' next requests find them."""
        self.published_at = self.core.state.updates
        self.pool.publish(self.published_at, self.core.policy_weights())

    def collect(self) -> None:
        """File the finished blocks (taken when none is pending, waiting up to 1 s for one), each
        with its updates, up to the core's `TrainingCore.next_boundary`: a block that crosses it
        is split there (whole rows of K agent steps) and its rest filed by the next collect, so
        evaluations, checkpoints and the end of the run fall on their agent step. Blocks beyond
        ``total_steps`` are left unread."""
        core, s = self.core, self.core.state
        if not self.pending:
            self.pending.extend(self.pool.take(timeout=1.0))
        while self.pending and s.step < core.next_boundary:
            block = self.pending.popleft()
            left = core.next_boundary - s.step
            if left < block.agent_steps:
                block, rest = block.split(math.ceil(left / block.actions.shape[1]))
                self.pending.appendleft(rest)
            self.file(block)

    def file(self, block: Block) -> None:
        """One block: into the replay, its games into TensorBoard, then the updates and target
        syncs due for its agent steps, the count, and the weights if due."""
        core, s = self.core, self.core.state
        if not self.ingest.ingest(block):
            return
        k = block.actions.shape[1]
        games = [(s.step + t * k + env + 1, episodic_return, length)
                 for t, env, episodic_return, length in block.episodes]
        core.games(games)
        for step, episodic_return, _ in games:
            core.log(step, {f"charts/episodic_return/actor_{block.actor}": episodic_return})
        core.learn(block.agent_steps)
        core.advance(block.agent_steps)
        if s.updates - self.published_at >= core.config.weight_sync_every:
            self.publish()

    def snapshot(self) -> None:
        """None: the actors' games are not kept (a resume starts fresh ones)."""
        return None

    def scalars(self) -> dict[str, float]:
        """``distributed/actor_restarts``, ``distributed/weights_version`` (updates the published
        weights have seen), ``distributed/blocks_dropped``."""
        return {"distributed/actor_restarts": self.pool.restarts, "distributed/weights_version": self.pool.version,
                "distributed/blocks_dropped": self.ingest.dropped_blocks}


class DistributedTrainer(TrainerBase):
    """Trains one DQN agent from ``config.actors`` Ray actors (see the module docstring).

    Args: as `vecdqn.trainer.TrainerBase`. ``config.ray_address`` (or ``RAY_ADDRESS``) empty
    starts (and at the end stops) a local Ray instance on 127.0.0.1; in a process where Ray is
    already initialized that instance is used. ``pool`` is the `ActorPool` once running.

    Raises:
        ImportError: Ray is not installed (`vecdqn.distributed.RAY_MISSING`).
        ConfigError: ``config.actors < 1`` or a bad configuration, before anything starts.
    """

    def __init__(self, config: Config, **kwargs: Any):
        require_ray()
        if config.actors < 1:
            raise ConfigError(f"--actors {config.actors}: the distributed trainer needs at least one actor")
        super().__init__(config, **kwargs)
        self.pool: ActorPool | None = None

    def run(self) -> dict[str, Any]:
        """Train until ``total_steps`` agent steps of all actors reached the replay; returns the
        summary of `TrainingCore.run`, plus ``actor_restarts``.

        Raises:
            Interrupted: after SIGINT/SIGTERM, once the checkpoint is written (actors, and a
                local Ray instance, are stopped either way).
            WorkerError: an actor's env failed (one line naming the actor, its env, the env id
                and the exception; the tracebacks are its ``details``; a checkpoint is written
                first).
            ConfigError: the Ray instance to join (``--ray-address``, ``RAY_ADDRESS``) did not
                answer.
            NonFiniteError: as `vecdqn.trainer.Trainer.run`.

        Signals at the run's end: as `vecdqn.trainer.Trainer.run`.
        """
        c, core = self.config, self.core
        probe = make_env(c.env_id, c.env_options())
        obs_shape, n_actions = probe.observation_space.shape, int(probe.action_space.n)
        probe.close()
        joined = ray.is_initialized()  # a caller's instance: used, not shut down
        with core.stop:  # installed until the actors, Ray and the writers are closed (see `Trainer.run`)
            try:
                with core.stop.held():  # a Ctrl-C stops the run once Ray is up, not Ray halfway
                    start_ray(c.ray_address, c.actors)
                # The run folder is claimed once Ray is up: a cluster that refuses this run leaves none.
                core.start(c.torch_threads or learner_threads(c, core.device.type))
                core.set_up(obs_shape, n_actions)
                ingest = BlockIngest(core.learner, c.actors, c.actor_envs, clip_rewards=c.clip_rewards,
                                     prioritize=c.per)
                self.pool = ActorPool(c, n_actions, obs_shape, seed=c.seed + core.state.step,
                                      on_restart=ingest.end_stream, log=core.say)
                self.pool.wait_started(timeout=max(120.0, c.worker_timeout))
                core.say(f"{c.actors} actors x {c.actor_envs} envs, epsilons "
                         + ", ".join(f"{e:.3g}" for e in self.pool.epsilons))
                summary = core.run(BlockCollector(core, self.pool, ingest))
                return {**summary, "actor_restarts": self.pool.restarts}
            finally:
                with core.stop.finishing():
                    if self.pool is not None:
                        self.pool.close()
                    if not joined:
                        ray.shutdown()
                    core.close()
