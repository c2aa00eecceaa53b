"""make_vector_env: same-step autoreset, final observations, seeding, start methods, validation."""

from __future__ import annotations

import multiprocessing

import numpy as np
import pytest

from vecdqn.envs import make_env, make_vector_env

OPTIONS = {"max_episode_frames": 200}  # games truncated every 200 frames: many episode ends
SEED = 5


def test_final_obs_and_reset_obs_match_single_envs():
    num_envs, steps = 2, 120
    rng = np.random.default_rng(0)
    envs = make_vector_env("ALE/Breakout-v5", num_envs, **OPTIONS)
    try:
        actions = rng.integers(envs.single_action_space.n, size=(steps, num_envs))
        first_obs, _ = envs.reset(seed=SEED)
        assert first_obs.shape == (num_envs, 4, 84, 84) and first_obs.dtype == np.uint8
        records = []  # (obs, ended, final_obs, final_info) per step
        for t in range(steps):
            obs, _, terminated, truncated, info = envs.step(actions[t])
            ended = terminated | truncated
            records.append((obs.copy(), ended, info.get("final_obs"), info.get("final_info")))
    finally:
        envs.close()

    ends_seen = games_seen = 0
    for i in range(num_envs):
        single = make_env("ALE/Breakout-v5", **OPTIONS)
        obs, _ = single.reset(seed=SEED + i)  # env i is seeded seed + i
        np.testing.assert_array_equal(first_obs[i], obs)
        for t in range(steps):
            obs, _, terminated, truncated, single_info = single.step(int(actions[t, i]))
            vec_obs, ended, final_obs, final_info = records[t]
            assert ended[i] == (terminated or truncated)
            if ended[i]:
                ends_seen += 1
                assert final_obs is not None and final_obs[i] is not None
                # final_obs is the ended episode's last observation, as the single env saw it
                np.testing.assert_array_equal(final_obs[i], obs)
                assert final_info["lives"][i] == single_info["lives"]
                # a whole game's statistics arrive in final_info, and only when a game ended
                assert final_info.get("_episode", np.zeros(num_envs, bool))[i] == (
                    "episode" in single_info
                )
                if "episode" in single_info:
                    games_seen += 1
                    assert final_info["episode"]["r"][i] == single_info["episode"]["r"]
                    assert final_info["episode"]["l"][i] == single_info["episode"]["l"]
                obs, _ = single.reset()
                # the returned observation is the next episode's first: four equal frames
                for slot in vec_obs[i][1:]:
                    np.testing.assert_array_equal(slot, vec_obs[i][0])
            np.testing.assert_array_equal(vec_obs[i], obs)
    assert ends_seen >= 4 and games_seen >= 2


def test_env_i_is_seeded_seed_plus_i():
    envs = make_vector_env("ALE/Pong-v5", 2, noop_max=30)
    try:
        obs, info = envs.reset(seed=SEED)
    finally:
        envs.close()
    for i in range(2):
        single_obs, single_info = make_env("ALE/Pong-v5", noop_max=30).reset(seed=SEED + i)
        np.testing.assert_array_equal(obs[i], single_obs)
        assert info["episode_frame_number"][i] == single_info["episode_frame_number"]
    # Not vacuous: the two envs got different seeds, hence different no-op starts.
    assert info["episode_frame_number"][0] != info["episode_frame_number"][1]


@pytest.mark.skipif("spawn" not in multiprocessing.get_all_start_methods(), reason="no spawn")
def test_spawn_start_method_works():
    envs = make_vector_env("ALE/Breakout-v5", 2, context="spawn", noop_max=0)
    try:
        obs, _ = envs.reset(seed=0)
        obs, reward, terminated, truncated, _ = envs.step(np.array([1, 2]))
        assert obs.shape == (2, 4, 84, 84) and reward.shape == (2,)
    finally:
        envs.close()


def test_catch_vector_env():
    envs = make_vector_env("vecdqn/Catch-v0", 2)
    try:
        envs.reset(seed=0)
        for _ in range(9):
            obs, reward, terminated, truncated, info = envs.step(np.array([1, 1]))
        assert terminated.all() and set(reward) <= {-1.0, 1.0}
        assert info["final_obs"][0].shape == (4, 84, 84)
        np.testing.assert_array_equal(info["final_info"]["episode"]["l"], [9, 9])
    finally:
        envs.close()


@pytest.mark.parametrize(
    ("args", "kwargs", "match"),
    [
        (("ALE/Breakout-v5", 0), {}, "num_envs=0"),
        (("ALE/Breakout-v5", 2.0), {}, "num_envs=2.0"),
        (("ALE/Breakot-v5", 2), {}, "ALE/Breakout-v5"),
        (("ALE/Breakout-v5", 2), {"frame_skip": 0}, "frame_skip=0"),
        (("ALE/Breakout-v5", 2), {"frameskip": 4}, "frameskip"),
        (("ALE/Breakout-v5", 2), {"context": "teleport"}, "teleport"),
    ],
)
def test_validation_before_any_worker_starts(args, kwargs, match):
    before = set(multiprocessing.active_children())
    with pytest.raises(ValueError, match=match):
        make_vector_env(*args, **kwargs)
    assert set(multiprocessing.active_children()) == before
