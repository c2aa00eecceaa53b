"""`DistributedTrainer`: the learner of ``--actors N`` (Ape-X, Horgan et al. 2018).

One iteration of the learner, with the actors playing in their own processes all along::

    learner:  take finished blocks ─ file each into the replay ─ its updates ─ publish weights ─ log
                     ▲                                                          │ (every
    actors:   play T steps ─ block ─ play T steps ─ block ─ ...   ◄─────────────┘  --weight-sync-every)

Counts mean what they mean in `vecdqn.trainer.Trainer`: ``step`` counts the agent steps of
every actor that reached the replay; one update is due every ``train_frequency`` of them from
``learning_starts`` on (`updates_due`, a block of ``T·K`` agent steps playing the part of a
vector step), the target syncs every ``target_update_frequency``; β and the learning rate
follow their schedules in agent steps. The actors' epsilons are fixed (`apex_epsilons`); the
``--epsilon-*`` schedule is not used. If the learner is slower than the actors, the replay
ratio still holds: the actors wait (see `vecdqn.distributed.pool`, "Backpressure").

TensorBoard: ``charts/episodic_return`` and ``charts/episodic_length`` hold every actor's
games (each at the agent step it reached the replay); ``charts/episodic_return/actor_<i>`` the
games of actor ``i`` alone; ``distributed/actor_restarts``, ``distributed/weights_version``
(the updates the published weights have seen) and ``distributed/blocks_dropped``.

Checkpoints hold the networks, optimizer, counters and RNGs (no env snapshots, no replay): a
``--resume`` starts the actors on fresh games and refills ``learning_starts`` agent steps.
"""

from __future__ import annotations

import os
import time
from typing import Any

import ray

from vecdqn.config import Config, default_torch_threads
from vecdqn.distributed import require_ray
from vecdqn.distributed.blocks import Block, BlockIngest
from vecdqn.distributed.pool import ActorPool, start_ray
from vecdqn.envs import make_env
from vecdqn.preflight import ConfigError
from vecdqn.trainer import Interrupted, Trainer, target_syncs_due, updates_due

__all__ = ["DistributedTrainer"]


def learner_threads(config: Config, device_type: str, cpu_count: int | None = None) -> int:
    """Torch threads of the learner: `default_torch_threads`, less one core per actor when the
    actors run on this machine (a local Ray instance): idle-spinning torch threads that lose
    their cores to the actors slow every update several-fold."""
    cores = cpu_count if cpu_count is not None else (os.cpu_count() or 1)
    local = 0 if config.ray_address else config.actors
    return max(1, default_torch_threads(local, cores, device_type) - (local if device_type == "cpu" else 0))


class DistributedTrainer(Trainer):
    """Trains one DQN agent from ``config.actors`` Ray actors (see the module docstring).

    Args: as `Trainer`. ``config.ray_address`` empty starts (and at the end stops) a local Ray
    instance on 127.0.0.1; in a process where Ray is already initialized that instance is used.

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
        self.ingest: BlockIngest | None = None
        self._published_at = 0  # updates when the weights were last published

    def run(self) -> dict[str, Any]:
        """Train until ``total_steps`` agent steps of all actors reached the replay; returns the
        summary of `Trainer.run`, plus ``actor_restarts``.

        Raises:
            Interrupted: after SIGINT/SIGTERM, once the checkpoint is written (actors, and a
                local Ray instance, are stopped either way).
            NonFiniteError: as `Trainer.run`.
            ray.exceptions.RayTaskError: an actor's env failed.
        """
        c = self.config
        self._start_run(c.torch_threads or learner_threads(c, self.device.type))
        probe = make_env(c.env_id, c.env_options())
        obs_shape, n_actions = probe.observation_space.shape, int(probe.action_space.n)
        probe.close()
        self.stop.install()
        owns_ray = start_ray(c.ray_address, c.actors)
        try:
            self._set_up_learner(obs_shape, n_actions)
            if self.resume_state is not None:
                self._restore(None)
            self._start_pipeline()
            self._start_logger()
            self.ingest = BlockIngest(self.buffer, c.actors, c.actor_envs, clip_rewards=c.clip_rewards,
                                      prioritize=c.per)
            self.pool = ActorPool(c, n_actions, obs_shape, seed=c.seed + self.state.step,
                                  on_restart=self.ingest.end_stream, log=self.logger.write)
            self.logger.write(f"{c.actors} actors x {c.actor_envs} envs, epsilons "
                              + ", ".join(f"{e:.3g}" for e in self.pool.epsilons))
            return self._loop_blocks()
        finally:
            self.stop.uninstall()
            if self.pool is not None:
                self.pool.close()
            if owns_ray:
                ray.shutdown()
            if self.logger is not None:
                self.logger.close()

    def _loop_blocks(self) -> dict[str, Any]:
        """Until ``total_steps``: take finished blocks, file and learn from each, log, evaluate,
        checkpoint; publish the weights every ``weight_sync_every`` updates."""
        c, s = self.config, self.state
        clock = {"start": (time.perf_counter(), s.step), "learning": None}
        self._published_at = s.updates
        self.pool.publish(s.updates, self.agent.online.state_dict())
        self.pool.fill()
        while s.step < c.total_steps:
            for block in self.pool.take(timeout=1.0):
                if s.step >= c.total_steps:  # blocks beyond the run's length are left unread
                    break
                self._file(block)
            if clock["learning"] is None and s.updates > s.update_offset:
                clock["learning"] = (time.perf_counter(), s.step)
                self.logger.learning_started(s.step)
            self._log()
            if s.step >= s.next_eval:
                s.next_eval += c.eval_every
                self._evaluate()
            if self.stop.signum is not None:
                raise Interrupted(self.stop.signum, self.save_checkpoint("latest.pt"))
            if s.next_checkpoint <= s.step < c.total_steps:
                s.next_checkpoint += c.checkpoint_every
                self.save_checkpoint("latest.pt")
                if c.keep_checkpoints:
                    self.save_checkpoint(f"step_{s.step:09d}.pt")
        latest = self.save_checkpoint("latest.pt")
        summary = self._summary(clock, latest, self.save_checkpoint("final.pt"))
        return {**summary, "actor_restarts": self.pool.restarts}

    def _file(self, block: Block) -> None:
        """One block: into the replay, its games into TensorBoard, then the updates and target
        syncs due for its ``T·K`` agent steps (as `Trainer._learn` for a vector step)."""
        c, s = self.config, self.state
        if not self.ingest.ingest(block):
            return
        k = block.actions.shape[1]
        for t, env, episodic_return, length in block.episodes:
            step = s.step + t * k + env + 1
            self.logger.episode(step, episodic_return, length)
            self.logger.scalars(step, {f"charts/episodic_return/actor_{block.actor}": episodic_return})
        s.episodes = self.logger.episodes
        n = block.agent_steps
        if s.step >= s.learn_from and len(self.buffer) >= c.batch_size:
            due = updates_due(s.step, n, s.learn_from, c.train_frequency, s.updates - s.update_offset)
            if due:
                self.agent.set_learning_rate(self.schedules.learning_rate(s.step))
                beta = self.schedules.beta(s.step)
                for _ in range(due):
                    metrics = self._update(beta)
                    if metrics:  # with --prefetch the first update's metrics arrive with the next one
                        self.logger.losses(metrics)
            syncs, s.next_sync = target_syncs_due(s.step, n, s.next_sync, c.target_update_frequency)
            if syncs:
                self.agent.sync_target()
        s.step += n
        if s.updates - self._published_at >= c.weight_sync_every:
            self._published_at = s.updates
            self.pool.publish(s.updates, self.agent.online.state_dict())

    def _log(self) -> None:
        """`Trainer._log`, plus the ``distributed/`` scalars when the scalars are due."""
        c, s = self.config, self.state
        due = s.step >= s.next_log or s.step >= c.total_steps
        super()._log()
        if due:
            self.logger.scalars(s.step, {"distributed/actor_restarts": self.pool.restarts,
                                         "distributed/weights_version": self.pool.version,
                                         "distributed/blocks_dropped": self.ingest.dropped_blocks})
