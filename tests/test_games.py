"""Per-game env semantics on real ROMs, for what Pong and Breakout do not have: games without
lives (Enduro), FIRE after a reset and after a lost life (BeamRider), a game cut by the frame cap
(Seaquest's submarine waits at the surface forever), and 18 actions (Seaquest).

Each test plays the real game through `make_env` or `make_vector_env`, the pipeline a training
run uses; the ROMs ship with ale-py.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from vecdqn.config import Config
from vecdqn.envs import make_env, make_vector_env
from vecdqn.envs.wrappers import EpisodicLife, FireReset
from vecdqn.model import QNetwork
from vecdqn.pqn import lambda_returns

SEVEN = ["BeamRider", "Breakout", "Enduro", "Pong", "Qbert", "Seaquest", "SpaceInvaders"]


class ActionLog(gym.Wrapper):
    """Records every action the base env (one frame per step) receives."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.actions: list[int] = []

    def step(self, action):
        self.actions.append(int(action))
        return self.env.step(action)


def _logged(env_id: str, **options) -> tuple[gym.Env, ActionLog]:
    logs: list[ActionLog] = []

    def log(env: gym.Env) -> ActionLog:
        logs.append(ActionLog(env))
        return logs[-1]

    env = make_env(env_id, base_wrapper=log, **options)
    return env, logs[0]


def _wrappers(env: gym.Env) -> list[type]:
    types = []
    while isinstance(env, gym.Wrapper):
        types.append(type(env))
        env = env.env
    return types


@pytest.mark.parametrize("game", SEVEN)
def test_each_of_the_seven_games_makes_its_pipeline(game):
    """The default chain on every game of Mnih et al. 2013: life loss and FIRE wrappers present
    (all seven games have a FIRE action), observations of the configured shape."""
    env = make_env(f"{game}NoFrameskip-v4", screen_size=64)
    chain = _wrappers(env)
    assert EpisodicLife in chain and FireReset in chain
    obs, info = env.reset(seed=0)
    assert obs.shape == (4, 64, 64) and obs.dtype == np.uint8
    assert info["lives"] == env.unwrapped.ale.lives()


def test_a_game_without_lives_ends_only_at_its_game_over():
    """Enduro reports 0 lives from start to end: with life loss as termination switched on, no
    step before the game's end is a termination, and the whole game is one episode."""
    env = make_env("EnduroNoFrameskip-v4", episodic_life=True)
    env.reset(seed=0)
    assert env.unwrapped.ale.lives() == 0
    rng = np.random.default_rng(0)
    steps = 0
    while True:
        _, _, terminated, truncated, info = env.step(int(rng.integers(env.action_space.n)))
        steps += 1
        assert info["lives"] == 0
        if terminated or truncated:
            break
        assert steps < 10_000, "a random Enduro game did not end in 10,000 agent steps"
    assert terminated and not truncated  # the end of the first day without enough cars passed
    assert env.unwrapped.ale.game_over()
    # The whole game in frames: FIRE and the no-op start, then 4 frames per agent step.
    assert info["episode"]["l"] == info["episode_frame_number"] >= 4 * steps + 4
    env.reset()
    assert env.unwrapped.ale.getEpisodeFrameNumber() < 4 * steps  # a real reset: a new game


def test_fire_is_pressed_after_the_reset_and_after_each_lost_life():
    """BeamRider under the training chain: FIRE (one agent step, 4 frames) follows the no-op start
    of a new game, and follows the one no-op agent step that continues the game after a life is
    lost, in the same game (no real reset)."""
    env, log = _logged("BeamRiderNoFrameskip-v4", noop_max=0)
    fire = env.unwrapped.get_action_meanings().index("FIRE")
    env.reset(seed=0)
    assert log.actions == [fire] * 4
    lives = env.unwrapped.ale.lives()
    for _ in range(5_000):
        _, _, terminated, truncated, info = env.step(0)
        if terminated:
            break
    else:
        pytest.fail("a no-op BeamRider player did not lose a life")
    assert not truncated and info["lives"] == lives - 1 and not env.unwrapped.ale.game_over()
    frames = env.unwrapped.ale.getEpisodeFrameNumber()
    del log.actions[:]
    env.reset()
    assert log.actions == [0] * 4 + [fire] * 4  # the continuing no-op, then FIRE
    assert env.unwrapped.ale.getEpisodeFrameNumber() == frames + 8  # the same game goes on


def test_without_fire_reset_nothing_presses_fire():
    env, log = _logged("BeamRiderNoFrameskip-v4", noop_max=0, fire_reset=False)
    assert FireReset not in _wrappers(env)
    env.reset(seed=0)
    for _ in range(50):
        env.step(0)
    assert log.actions == [0] * 200


def test_the_frame_cap_truncates_the_game_and_the_target_bootstraps_there():
    """Seaquest's submarine never loses a life at the surface, so a no-op game runs until the
    frame cap: the step that reaches it is truncated, not terminated, in the vector env a run
    uses; its final observation comes in ``final_obs``; the next game starts anew. PQN's λ-return
    then bootstraps from the final observation's value at that step."""
    cap = 400  # frames; training's default is 108,000 (27,000 agent steps), the same ALE setting
    envs = make_vector_env("SeaquestNoFrameskip-v4", 2, max_episode_frames=cap, noop_max=0, fire_reset=False)
    try:
        obs, _ = envs.reset(seed=3)
        flags = []
        for _ in range(cap // 4):  # no FIRE, no no-ops: the cap's last frame is the 100th agent step's
            obs, rewards, terminated, truncated, info = envs.step(np.zeros(2, dtype=np.int64))
            flags.append((terminated.copy(), truncated.copy()))
        assert truncated.all() and not terminated.any()
        assert not any(t.any() or u.any() for t, u in flags[:-1])  # nothing ended before the cap
        final = info["final_info"]
        assert list(final["episode"]["l"]) == [cap, cap] and list(final["lives"]) == [4, 4]  # lives left
        assert info["final_obs"][0].shape == (4, 84, 84)
        assert not np.array_equal(info["final_obs"][0][-1], obs[0][-1])  # obs: the next game's first frame
        assert list(info["episode_frame_number"]) == [0, 0]
    finally:
        envs.close()
    terminated = torch.tensor([[t[0] for t, _ in flags]]).T
    truncated = torch.tensor([[u[0] for _, u in flags]]).T
    rewards = torch.zeros(len(flags), 1)
    next_q_max = torch.full((len(flags), 1), 2.0)
    returns = lambda_returns(rewards, terminated, truncated, next_q_max, gamma=0.9, lam=0.5)
    assert returns[-1, 0].item() == pytest.approx(0.9 * 2.0)  # bootstrapped: not 0, as a game over gives


def test_an_eighteen_action_game_reaches_every_action():
    """Seaquest has the ALE's full 18 actions: the vector env, the Q-network and the base env see
    all of them (the last, DOWNLEFTFIRE, included)."""
    env, log = _logged("SeaquestNoFrameskip-v4", noop_max=0, fire_reset=False)
    assert env.action_space == gym.spaces.Discrete(18)
    meanings = env.unwrapped.get_action_meanings()
    assert len(meanings) == 18 and meanings[17] == "DOWNLEFTFIRE"
    env.reset(seed=0)
    for action in range(18):
        env.step(action)
    assert log.actions == [a for a in range(18) for _ in range(4)]
    envs = make_vector_env("SeaquestNoFrameskip-v4", 2, screen_size=44)
    try:
        assert envs.single_action_space == gym.spaces.Discrete(18)
        obs, _ = envs.reset(seed=0)
        envs.step(np.array([17, 9]))
    finally:
        envs.close()
    config = Config(env_id="SeaquestNoFrameskip-v4", screen_size=44, hidden_size=32)
    network = QNetwork.from_config(config, n_actions=18)
    assert network(torch.from_numpy(obs)).shape == (2, 18)
