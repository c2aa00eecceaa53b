"""Rainbow (``--algo rainbow``) behind the training core: one record, its own network wherever a
policy is needed, noisy exploration, exact resume. Its math is tested in test_rainbow_math.py, its
learning in test_learning.py."""

from __future__ import annotations

import torch
from helpers import catch_config

from vecdqn import checkpoint
from vecdqn.cli import parse_args
from vecdqn.learners import learner_spec, make_learner
from vecdqn.rainbow import RainbowAgent, RainbowNetwork
from vecdqn.trainer import Trainer

SMALL = {"algo": "rainbow", "atoms": 11, "v_min": -2.0, "v_max": 2.0, "n_step": 3}


def test_the_record_builds_its_network_and_the_command_line_its_defaults(tmp_path):
    """Table 1's warm-up of 80K frames (20,000 agent steps) is the new run's default, under a
    preset's value and the option given; the policy network is the distributional one."""
    assert parse_args(["--algo", "rainbow", "--log-dir", str(tmp_path)]).learning_starts == 20_000
    assert parse_args(["--log-dir", str(tmp_path)]).learning_starts == 80_000  # DQN's stays
    given = parse_args(["--algo", "rainbow", "--learning-starts", "5000", "--log-dir", str(tmp_path)])
    assert given.learning_starts == 5_000
    pong = parse_args(["--preset", "pong-rainbow", "--log-dir", str(tmp_path)])
    assert pong.learning_starts == 10_000
    # pong's Adam, not Table 1's (6.25e-5, 1.5e-4), which left seed 1 at -21 for an hour (docs/rainbow.md)
    assert (pong.algo, pong.learning_rate, pong.adam_eps, pong.atoms, pong.noisy) == ("rainbow", 1e-4, 1e-8, 51, True)
    config = catch_config(tmp_path, **SMALL)
    net = learner_spec("rainbow").build_network(config, 3)
    assert isinstance(net, RainbowNetwork) and (net.atoms, net.noisy) == (11, True)
    assert net(torch.zeros(5, 4, 44, 44, dtype=torch.uint8)).shape == (5, 3)


def test_noisy_layers_explore_in_place_of_epsilon(tmp_path):
    noisy = make_learner(catch_config(tmp_path, **SMALL), torch.device("cpu"), (4, 44, 44), 3)
    plain = make_learner(catch_config(tmp_path, **SMALL, noisy=False), torch.device("cpu"), (4, 44, 44), 3)
    assert isinstance(noisy.agent, RainbowAgent) and noisy.agent.explores and not plain.agent.explores
    assert noisy.epsilon(0) == 0.0 and plain.epsilon(0) == 1.0
    # Each action selection draws new noise: one forward of the same frames picks other values.
    obs = torch.randint(0, 255, (64, 4, 44, 44), dtype=torch.uint8).numpy()
    before = noisy.agent.online.state_dict()["advantage.2.epsilon_out"].clone()
    noisy.act(obs, 0)
    assert not torch.equal(noisy.agent.online.state_dict()["advantage.2.epsilon_out"], before)


def test_a_rainbow_run_checkpoints_its_policy_and_resumes_bit_for_bit(tmp_path):
    """Catch, 600 agent steps straight == 300, then resumed with its replay for 300 more: the same
    weights, noise, target network and games; the checkpoint's policy is the record's network, in
    eval mode (the noisy layers' mean weights)."""
    def agent(run_dir):
        return checkpoint.load(run_dir / "checkpoints" / "latest.pt")["agent"]

    straight = Trainer(catch_config(tmp_path / "a", **SMALL, total_steps=600, run_name="run"), progress=False).run()
    Trainer(catch_config(tmp_path / "b", **SMALL, total_steps=300, run_name="run", save_replay=True),
            progress=False).run()
    resumed = Trainer.from_checkpoint(tmp_path / "b" / "run", {"total_steps": 600}, progress=False).run()
    assert (resumed["steps"], resumed["episodes"], resumed["updates"]) == (
        600, straight["episodes"], straight["updates"])
    a, b = agent(tmp_path / "a" / "run"), agent(tmp_path / "b" / "run")
    for part in ("online", "target"):
        assert a[part].keys() == b[part].keys() and all(torch.equal(a[part][k], b[part][k]) for k in a[part])
    assert torch.equal(a["noise"], b["noise"])
    policy = checkpoint.load_policy(tmp_path / "a" / "run")
    assert isinstance(policy.network, RainbowNetwork) and not policy.network.training
    assert policy.config.algo == "rainbow" and policy.step == 600
