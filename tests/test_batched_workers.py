"""Batched env workers (K envs per worker process): bit for bit what a process per env gives, per
game; snapshots that move between any K; the split rule; failures that name the env and worker."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from vecdqn.acting import ended_games
from vecdqn.config import Config
from vecdqn.envs import WorkerError, WorkerGuard, make_vector_env
from vecdqn.envs.batched import BatchedVectorEnv

NUM_ENVS, SEED = 8, 11


def play(env_id: str, envs_per_worker: int, vector_steps: int, **options) -> list:
    """Every step's observations, rewards, flags, final observations and ended games, under one
    fixed sequence of random actions."""
    envs = make_vector_env(env_id, NUM_ENVS, envs_per_worker=envs_per_worker, **options)
    try:
        assert (envs_per_worker > 1) == isinstance(envs, BatchedVectorEnv)
        actions = np.random.default_rng(3).integers(envs.single_action_space.n, size=(vector_steps, NUM_ENVS))
        obs, info = envs.reset(seed=SEED)
        record = [(obs.copy(), ended_games(info, 0))]
        for t, a in enumerate(actions):
            obs, rewards, terminated, truncated, info = envs.step(a)
            ended = np.flatnonzero(terminated | truncated)
            final = [info["final_obs"][i].copy() for i in ended]
            assert ended.tolist() == np.flatnonzero(info.get("_final_obs", np.zeros(NUM_ENVS, bool))).tolist()
            record.append((obs.copy(), rewards.copy(), terminated.copy(), truncated.copy(), final,
                           ended_games(info, (t + 1) * NUM_ENVS)))
        return record
    finally:
        envs.close()


@pytest.mark.parametrize("env_id", ["ALE/Pong-v5", "ALE/Breakout-v5"])
def test_batched_workers_give_every_game_bit_for_bit_what_a_process_per_env_gives(env_id):
    """2,000 agent steps (250 vector steps of 8 envs) of each game, sticky actions (v5's 0.25), no-op and FIRE
    resets, life loss, and truncation every 400 frames (so whole games end and reset): K = 2
    and 4 (N / 2) reproduce K = 1 in every observation, reward, flag, final observation and
    episode statistic."""
    options = dict(max_episode_frames=400)
    reference = play(env_id, 1, 250, **options)
    ends = sum(len(step[4]) for step in reference[1:])
    games = sum(len(step[-1]) for step in reference[1:])
    assert ends >= NUM_ENVS and games >= NUM_ENVS, (ends, games)  # the test sees episode and game ends
    for k in (2, NUM_ENVS // 2):
        batched = play(env_id, k, len(reference) - 1, **options)
        for t, (want, got) in enumerate(zip(reference, batched, strict=True)):
            for a, b in zip(want, got, strict=True):
                if isinstance(a, list):
                    assert len(a) == len(b), (k, t)
                    for x, y in zip(a, b, strict=True):
                        np.testing.assert_array_equal(np.asarray(x), np.asarray(y), err_msg=f"K={k} step {t}")
                else:
                    np.testing.assert_array_equal(a, b, err_msg=f"K={k} step {t}")


def test_snapshots_move_between_any_envs_per_worker():
    """Games snapshotted from 4 envs per worker continue exactly in 2 per worker and in 1."""
    actions = np.random.default_rng(0).integers(4, size=(60, 4))
    source = make_vector_env("ALE/Breakout-v5", 4, envs_per_worker=4)
    try:
        source.reset(seed=SEED)
        for a in actions[:30]:
            source.step(a)
        snapshots = list(source.get_attr("snapshot"))
        assert len(snapshots) == 4 and len(set(snapshots)) == 4
        expected = [source.step(a)[0].copy() for a in actions[30:]]
    finally:
        source.close()
    for k in (2, 1):
        target = make_vector_env("ALE/Breakout-v5", 4, envs_per_worker=k)
        try:
            target.reset(seed=0)
            target.set_attr("snapshot", snapshots)
            for a, want in zip(actions[30:], expected, strict=True):
                np.testing.assert_array_equal(target.step(a)[0], want)
        finally:
            target.close()


@pytest.mark.parametrize(("num_envs", "cores", "k"), [(64, 2, 32), (8, 2, 4), (128, 16, 8), (8, 16, 1), (7, 2, 1),
                                                    (6, 4, 1), (12, 4, 3), (1, 2, 1)])
def test_the_default_split_is_the_fewest_workers_with_one_per_core(num_envs, cores, k):
    assert Config(num_envs=num_envs).envs_per_worker_on(cores) == k
    assert Config(num_envs=num_envs, envs_per_worker=num_envs).envs_per_worker_on(cores) == num_envs


@pytest.mark.parametrize("bad", [3, 5, -1])
def test_envs_per_worker_must_divide_the_envs(bad):
    with pytest.raises(ValueError, match=rf"--envs-per-worker {bad} must divide --num-envs 8; use 0 \(auto\) or "
                                         r"one of \[1, 2, 4, 8\]"):
        Config(num_envs=8, envs_per_worker=bad).validate()
    with pytest.raises(ValueError, match=r"use a divisor of num_envs=8: \[1, 2, 4, 8\]|does not divide"):
        make_vector_env("ALE/Pong-v5", 8, envs_per_worker=bad)


def test_a_raising_game_is_named_with_its_worker():
    """Game 3 of 4 (worker 1 of 2 envs each) raises on its 50th step: the error names env 3 and
    worker 1, with the game's traceback as details."""
    from helpers import RAISING_CATCH_ID, register_test_envs

    register_test_envs()  # the env seeded 10 raises on its 50th step: env 3 with seed 7
    guard = WorkerGuard(make_vector_env(RAISING_CATCH_ID, 4, envs_per_worker=2), 30.0, RAISING_CATCH_ID)
    try:
        guard.reset(seed=7, step=0)
        with pytest.raises(WorkerError) as failure:
            for t in range(60):
                guard.step_async(np.zeros(4, dtype=np.int64), t * 4)
                guard.step_wait(t * 4)
        message = str(failure.value)
        assert message.startswith(f"env 3 (worker 1 of envs 2-3, {RAISING_CATCH_ID}) failed at agent step 196: "
                                  "RuntimeError: emulator exploded on step 50"), message
        assert "emulator exploded" in failure.value.details and "helpers.py" in failure.value.details
    finally:
        guard.force_close()


def test_a_killed_worker_names_its_envs():
    guard = WorkerGuard(make_vector_env("vecdqn/Catch-v0", 4, envs_per_worker=2), 30.0, "vecdqn/Catch-v0")
    try:
        guard.reset(seed=0, step=0)
        guard.envs.processes[1].kill()
        guard.envs.processes[1].join(10)
        with pytest.raises(WorkerError, match=r"^envs 2-3 \(worker 1, vecdqn/Catch-v0\) failed at agent step 4"):
            guard.step_async(np.zeros(4, dtype=np.int64), 4)
            guard.step_wait(4)
    finally:
        guard.force_close()


@pytest.mark.parametrize("envs_per_worker", [1, 2])
def test_closing_with_a_step_pending_awaits_it_without_a_warning(envs_per_worker):
    # As after a stop signal that comes while the workers step: close() waits for the step and
    # drops it, saying nothing (gymnasium would print "Calling `close` while waiting ...").
    guard = WorkerGuard(make_vector_env("vecdqn/Catch-v0", 4, envs_per_worker=envs_per_worker), 30.0,
                        "vecdqn/Catch-v0")
    try:
        guard.reset(seed=0, step=0)
        guard.step_async(np.zeros(4, dtype=np.int64), 0)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            guard.close()
        assert guard.closed
        assert [str(w.message) for w in caught if "close" in str(w.message)] == []
    finally:
        guard.force_close()


def test_dqn_learns_the_same_weights_with_any_envs_per_worker_and_resumes_across_them(tmp_path):
    """Catch with 4 envs: 600 agent steps with a process per env == 300 steps with 2 envs per
    worker, then resumed for 300 more with all 4 in one worker (same seed, CPU)."""
    import torch
    from helpers import catch_config

    from vecdqn import checkpoint
    from vecdqn.trainer import Trainer

    def weights(run_dir):
        return checkpoint.load(run_dir / "checkpoints" / "latest.pt")["agent"]["online"]

    straight = Trainer(catch_config(tmp_path / "a", num_envs=4, envs_per_worker=1, total_steps=600, run_name="run"),
                       progress=False).run()
    Trainer(catch_config(tmp_path / "b", num_envs=4, envs_per_worker=2, total_steps=300, run_name="run",
                         save_replay=True), progress=False).run()
    resumed = Trainer.from_checkpoint(tmp_path / "b" / "run", {"total_steps": 600, "envs_per_worker": 4},
                                      progress=False).run()
    assert (resumed["steps"], resumed["episodes"], resumed["mean_return"]) == (
        600, straight["episodes"], straight["mean_return"])
    a, b = weights(tmp_path / "a" / "run"), weights(tmp_path / "b" / "run")
    assert a.keys() == b.keys() and all(torch.equal(a[name], b[name]) for name in a)
