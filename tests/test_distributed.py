"""``--actors N``: Ape-X actors on Ray feeding the learner's one prioritized replay.

The exactness test runs the actors in this process (no Ray); the others start one local Ray
instance for the module (about 10 s on 2 cores) and run the real learner on Catch.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from helpers import catch_config
from replay_streams import reference_transitions

from vecdqn import cli
from vecdqn.distributed.actor import Actor, apex_epsilons
from vecdqn.distributed.blocks import BlockIngest
from vecdqn.replay import PrioritizedReplayBuffer


def test_apex_epsilons_follow_horgan_et_al():
    assert apex_epsilons(1) == [0.4]
    eps = apex_epsilons(8, 0.4, 7.0)
    assert eps[0] == pytest.approx(0.4) and eps[-1] == pytest.approx(0.4 ** 8)
    assert all(a > b for a, b in zip(eps, eps[1:]))


def record(actor: Actor, log: list) -> None:
    """Record every transition the actor's envs produce: (obs, action, reward, next_obs with the
    ended episode's final obs, terminated, truncated), per vector step."""
    envs, step_async, step_wait = actor.envs, actor.envs.step_async, actor.envs.step_wait

    def async_(actions, step):
        log.append([actor.obs.copy(), np.array(actions)])
        step_async(actions, step)

    def wait(step):
        next_obs, rewards, terminated, truncated, infos = step_wait(step)
        stored = next_obs.copy()
        for i in np.flatnonzero(terminated | truncated):
            stored[i] = infos["final_obs"][i]
        log[-1] += [np.sign(rewards), stored, terminated.copy(), truncated.copy()]
        return next_obs, rewards, terminated, truncated, infos

    envs.step_async, envs.step_wait = async_, wait


def env_sequences(buffer: PrioritizedReplayBuffer, env: int) -> list:
    """The sampleable transitions of one env's ring, oldest first (the ring does not wrap here)."""
    ring = buffer.capacity // buffer.n_envs
    slots = env * ring + np.arange(ring)
    slots = slots[buffer.priorities(slots) > 0]
    got = buffer.transitions(slots)
    return [(got.obs[i], got.actions[i], got.rewards[i], got.next_obs[i], got.discounts[i]) for i in range(len(slots))]


def test_blocks_reach_the_replay_exactly(tmp_path):
    """Two actors x 2 envs, actor 1 restarted midway: every transition in the replay has the
    stacks, action, n-step return and discount of what the actor's envs produced, with the
    restarted stream cut by a truncation; the actors' priorities replace the max priority."""
    c = catch_config(tmp_path, actors=2, actor_envs=2, n_step=3, gamma=0.9)
    shape = (4, c.screen_size, c.screen_size)
    buffer = PrioritizedReplayBuffer(4_000, shape, n_step=3, gamma=0.9, seed=0)
    ingest = BlockIngest(buffer, actors=2, actor_envs=2)
    logs = {0: [[]], 1: [[]]}  # actor -> one log per process
    actors = [Actor(i, c, eps, 100 * i, 3, shape) for i, eps in enumerate(apex_epsilons(2))]
    try:
        for a in actors:
            record(a, logs[a.actor_id][-1])
        for round_ in range(4):
            if round_ == 2:  # a new process for actor 1: fresh games, a first block again
                actors[1].close()
                actors[1] = Actor(1, c, 0.5, 999, 3, shape)
                logs[1].append([])
                record(actors[1], logs[1][-1])
            for a in actors:
                assert ingest.ingest(a.collect(10))
    finally:
        for a in actors:
            a.close()
    for a in (0, 1):
        ingest.end_stream(a)  # the held steps, as truncations
    for a, processes in logs.items():
        for k in range(2):
            expected = []
            for log in processes:
                steps = [tuple(x[k:k + 1] for x in step) for step in log]
                steps[-1] = (*steps[-1][:5], np.ones(1, dtype=bool))  # each process's stream ends truncated
                ref = reference_transitions(steps, 3, 0.9)
                expected += [ref[(0, t)] for t in range(len(steps))]
            got = env_sequences(buffer, a * 2 + k)
            assert len(got) == len(expected) == sum(len(log) for log in processes)
            for (obs, action, ret, next_obs, disc), (e_obs, e_action, e_ret, e_next, _, e_disc) in zip(got, expected):
                np.testing.assert_array_equal(obs, e_obs)
                np.testing.assert_array_equal(next_obs, e_next)
                assert action == e_action and ret == pytest.approx(e_ret, abs=1e-5)
                assert disc == pytest.approx(e_disc, rel=1e-6)
    priorities = buffer.priorities(np.arange(buffer.capacity))
    assert len(np.unique(priorities[priorities > 0])) > 10  # |δ| + ε from the actors, not one max


def test_missing_ray_exits_2_with_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "ray", None)  # what `import ray` does without the package
    code = cli.main(["--preset", "catch", "--actors", "2", "--log-dir", str(tmp_path)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and 'pip install -e ".[ray]"' in err
    assert not any(tmp_path.iterdir())  # nothing started


@pytest.mark.parametrize("args", [["--actors", "-1"], ["--actors", "2", "--save-replay"],
                                  ["--actors", "2", "--actor-envs", "0"], ["--apex-epsilon", "1.5"]])
def test_bad_distributed_options_exit_2(tmp_path, args, capsys):
    assert cli.main(["--preset", "catch", "--log-dir", str(tmp_path), *args]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


# -- with Ray ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def local_ray():
    ray = pytest.importorskip("ray")
    from vecdqn.distributed.pool import start_ray

    assert start_ray("", actors=4)
    yield ray
    ray.shutdown()


def tags(run_dir: str) -> dict[str, list[float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(run_dir, size_guidance={"scalars": 0})
    events.Reload()
    return {tag: [e.value for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def distributed(tmp_path: Path, **overrides):
    from vecdqn.distributed.learner import DistributedTrainer

    values = dict(actors=2, actor_envs=2, total_steps=480, learning_starts=100, weight_sync_every=4,
                  actor_block_steps=8, checkpoint_every=0, log_every=64)
    config = catch_config(tmp_path, **{**values, **overrides})
    return DistributedTrainer(config, progress=False, handle_signals=False)


def test_two_actors_feed_one_replay(tmp_path, local_ray):
    trainer = distributed(tmp_path)
    summary = trainer.run()
    assert summary["steps"] == 480 and summary["updates"] > 50 and summary["actor_restarts"] == 0
    written = trainer.buffer.slots_written
    assert written.shape == (4,) and (written > 16).all()  # every env of both actors (2+ blocks each)
    assert all(v > 0 for v in trainer.pool.versions)  # both played with published weights
    scalars = tags(summary["run_dir"])
    assert scalars["charts/episodic_return/actor_0"] and scalars["charts/episodic_return/actor_1"]
    assert len(scalars["charts/episodic_return"]) == summary["episodes"]
    assert scalars["distributed/weights_version"][-1] > 0


def test_killed_actor_is_restarted_and_the_run_finishes(tmp_path, local_ray):
    trainer = distributed(tmp_path, total_steps=1_200)
    result = {}
    thread = threading.Thread(target=lambda: result.update(trainer.run()), daemon=True)
    thread.start()
    deadline = time.monotonic() + 180  # generous: a shared machine can be slow to start actors
    while (trainer.pool is None or trainer.step < 200) and time.monotonic() < deadline and thread.is_alive():
        time.sleep(0.1)
    os.kill(trainer.pool.pids()[1], signal.SIGKILL)
    thread.join(timeout=600)
    if thread.is_alive():  # stop it before failing: a run left going would outlive the Ray fixture
        trainer.stop.signum = signal.SIGTERM
        thread.join(timeout=120)
        pytest.fail("the run did not finish within 10 minutes of the actor's restart")
    assert result["steps"] == 1_200 and result["actor_restarts"] == 1
    assert tags(result["run_dir"])["distributed/actor_restarts"][-1] == 1


@pytest.mark.slow
def test_catch_preset_learns_with_two_actors(tmp_path):
    """``--preset catch --actors 2`` passes the single-process learning test's bounds: greedy
    return >= 0.8 over 100 games and start-state Q-values within Catch's returns."""
    pytest.importorskip("ray")
    from test_learning import learned

    from vecdqn.cli import parse_args
    from vecdqn.distributed.learner import DistributedTrainer

    config = parse_args(["--preset", "catch", "--actors", "2", "--log-dir", str(tmp_path), "--seed", "1"])
    trainer = DistributedTrainer(config, progress=False, handle_signals=False)
    summary = trainer.run()
    assert summary["steps"] >= 20_000
    ok, mean_return, start_q = learned(trainer)
    assert ok, (mean_return, start_q)
