"""PQN: Peng's Q(λ) returns against hand-worked numbers and a forward-view oracle, the LayerNorm
Q-network, and the learner's updates (small screens to stay fast)."""

from __future__ import annotations

import ast
import copy
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import forward_view_lambda_returns
from torch import nn

from vecdqn.model import QNetwork
from vecdqn.pqn import PQNAgent, lambda_returns

F32 = torch.float32


def _returns(rewards, q, term=None, trunc=None, gamma=0.9, lam=0.5):
    """`lambda_returns` of one env given as lists (T,), as a list."""
    rewards = torch.tensor(rewards, dtype=F32).unsqueeze(1)
    q = torch.tensor(q, dtype=F32).unsqueeze(1)
    term = torch.zeros_like(rewards, dtype=torch.bool) if term is None else torch.tensor(term).unsqueeze(1)
    trunc = torch.zeros_like(rewards, dtype=torch.bool) if trunc is None else torch.tensor(trunc).unsqueeze(1)
    return lambda_returns(rewards, term, trunc, q, gamma, lam).squeeze(1).tolist()


def test_pqn_math_imports_only_torch_numpy_the_model_and_staging():
    """The learner's math stands alone: no config, envs, replay, training core or trainer (the
    registry only for the checkpoint key of the policy, `vecdqn.learners.POLICY_KEY`)."""
    for module in ("returns", "agent"):
        tree = ast.parse((Path(__file__).resolve().parents[1] / "vecdqn" / "pqn" / f"{module}.py").read_text())
        names = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
        names |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
        outside = {n for n in names if n.split(".")[0] not in sys.stdlib_module_names}
        assert outside <= {"torch", "numpy", "vecdqn.model", "vecdqn.staging", "vecdqn.learners"}, (module, outside)


# -- lambda_returns: hand-worked values -----------------------------------------------------------
def test_lambda_zero_is_one_step_q_learning():
    rewards = torch.tensor([[1.0, -1.0], [0.5, 0.0], [2.0, 1.0], [0.0, 3.0]])
    q = torch.tensor([[10.0, 4.0], [20.0, 5.0], [30.0, 6.0], [40.0, 7.0]])
    term = torch.tensor([[False, False], [True, False], [False, False], [False, True]])
    trunc = torch.tensor([[False, True], [False, False], [True, False], [False, False]])
    g = lambda_returns(rewards, term, trunc, q, gamma=0.9, lam=0.0)
    torch.testing.assert_close(g, rewards + 0.9 * (~term).float() * q)
    assert g.dtype == F32 and g.shape == (4, 2)


def test_lambda_one_is_the_monte_carlo_return_bootstrapped_at_the_rollout_end():
    # 1 + 0.9·2 + 0.81·3 + 0.729·30 = 27.1; only the last step's next_q_max counts
    g = _returns([1.0, 2.0, 3.0], [10.0, 20.0, 30.0], lam=1.0)
    np.testing.assert_allclose(g, [27.1, 29.0, 30.0], rtol=1e-6)


def test_intermediate_lambda_by_hand():
    # γ = 0.9, λ = 0.5:
    # G_2 = 2 + 0.9·10                       = 11
    # G_1 = 0 + 0.9·(0.5·11 + 0.5·6)         = 7.65
    # G_0 = 1 + 0.9·(0.5·7.65 + 0.5·4)       = 6.2425
    g = _returns([1.0, 0.0, 2.0], [4.0, 6.0, 10.0], gamma=0.9, lam=0.5)
    np.testing.assert_allclose(g, [6.2425, 7.65, 11.0], rtol=1e-6)


def test_termination_mid_rollout_stops_the_recursion_without_bootstrapping():
    # step 1 terminates: G_1 = r_1 = 2 (its next_q_max of 20 is not used)
    g = _returns([1.0, 2.0, 3.0], [10.0, 20.0, 30.0], term=[False, True, False], lam=1.0)
    np.testing.assert_allclose(g, [1.0 + 0.9 * 2.0, 2.0, 30.0], rtol=1e-6)
    # λ = 0.5: G_0 = 1 + 0.9·(0.5·2 + 0.5·10) = 6.4
    g = _returns([1.0, 2.0, 3.0], [10.0, 20.0, 30.0], term=[False, True, False], lam=0.5)
    np.testing.assert_allclose(g, [6.4, 2.0, 30.0], rtol=1e-6)


def test_truncation_mid_rollout_stops_the_recursion_but_bootstraps_from_the_final_obs():
    # step 1 is cut by a time limit: G_1 = 2 + 0.9·20 = 20 (20 = max Q of the final observation)
    g = _returns([1.0, 2.0, 3.0], [10.0, 20.0, 30.0], trunc=[False, True, False], lam=1.0)
    np.testing.assert_allclose(g, [1.0 + 0.9 * 20.0, 20.0, 30.0], rtol=1e-6)


def test_a_step_both_terminated_and_truncated_does_not_bootstrap():
    g = _returns([1.0, 2.0], [10.0, 20.0], term=[True, False], trunc=[True, False], lam=1.0)
    np.testing.assert_allclose(g, [1.0, 2.0 + 0.9 * 20.0], rtol=1e-6)


def test_the_next_episode_does_not_leak_into_the_earlier_one():
    base = dict(term=[False, True, False, False], gamma=0.9, lam=0.7)
    g = _returns([1.0, 2.0, 3.0, 4.0], [10.0, 20.0, 30.0, 40.0], **base)
    # the next episode (steps 2, 3) gets other rewards and values; step 1's own next_q_max too,
    # which a termination ignores
    other = _returns([1.0, 2.0, -50.0, 99.0], [10.0, -7.0, -30.0, 400.0], **base)
    assert other[:2] == g[:2]
    assert other[2:] != g[2:]
    for trunc in ([False, True, False, False], [False, False, True, False]):
        g = _returns([1.0, 2.0, 3.0, 4.0], [10.0, 20.0, 30.0, 40.0], trunc=trunc)
        end = trunc.index(True)
        other = _returns([1.0, 2.0, 3.0, 4.0][: end + 1] + [-5.0] * (3 - end),
                         [10.0, 20.0, 30.0, 40.0][: end + 1] + [77.0] * (3 - end), trunc=trunc)
        assert other[: end + 1] == g[: end + 1]


def test_a_one_step_rollout_bootstraps_at_once():
    np.testing.assert_allclose(_returns([1.0], [10.0]), [10.0], rtol=1e-6)
    np.testing.assert_allclose(_returns([1.0], [10.0], term=[True]), [1.0], rtol=1e-6)


def test_envs_are_independent_and_match_theforward_view_lambda_returns():
    gen = torch.Generator().manual_seed(0)
    t_len, n_envs = 7, 5
    rewards = torch.randn(t_len, n_envs, generator=gen)
    q = torch.randn(t_len, n_envs, generator=gen) * 5
    term = torch.rand(t_len, n_envs, generator=gen) < 0.2
    trunc = torch.rand(t_len, n_envs, generator=gen) < 0.15
    for lam in (0.0, 0.3, 0.65, 1.0):
        g = lambda_returns(rewards, term, trunc, q, 0.97, lam)
        expected = forward_view_lambda_returns(rewards, term, trunc, q, 0.97, lam)
        np.testing.assert_allclose(g.numpy(), expected, rtol=1e-5, atol=1e-5)
        for n in range(n_envs):
            col = slice(n, n + 1)
            alone = lambda_returns(rewards[:, col], term[:, col], trunc[:, col], q[:, col], 0.97, lam)
            torch.testing.assert_close(alone, g[:, col], rtol=0, atol=0)


def test_lambda_returns_rejects_bad_inputs():
    r, q = torch.zeros(3, 2), torch.zeros(3, 2)
    b = torch.zeros(3, 2, dtype=torch.bool)
    with pytest.raises(ValueError, match="gamma=1.5"):
        lambda_returns(r, b, b, q, 1.5, 0.5)
    with pytest.raises(ValueError, match="lam=-0.1"):
        lambda_returns(r, b, b, q, 0.99, -0.1)
    with pytest.raises(ValueError, match=r"next_q_max has shape \(3, 1\)"):
        lambda_returns(r, b, b, torch.zeros(3, 1), 0.99, 0.5)
    with pytest.raises(ValueError, match=r"rewards has shape \(3,\)"):
        lambda_returns(torch.zeros(3), b[:, 0], b[:, 0], torch.zeros(3), 0.99, 0.5)
    with pytest.raises(ValueError, match="rewards has dtype torch.float64"):
        lambda_returns(r.double(), b, b, q, 0.99, 0.5)
    with pytest.raises(ValueError, match="terminated has dtype torch.float32"):
        lambda_returns(r, b.float(), b, q, 0.99, 0.5)
    with pytest.raises(ValueError, match="truncated is a ndarray"):
        lambda_returns(r, b, b.numpy(), q, 0.99, 0.5)


# -- QNetwork(layer_norm=True) --------------------------------------------------------------------
# The plain network's state_dict keys: checkpoints saved before layer_norm existed load into it.
PLAIN_KEYS = ["torso.0.weight", "torso.0.bias", "torso.2.weight", "torso.2.bias", "torso.4.weight", "torso.4.bias",
              "value.0.weight", "value.0.bias", "value.2.weight", "value.2.bias",
              "advantage.0.weight", "advantage.0.bias", "advantage.2.weight", "advantage.2.bias"]


def test_layer_norm_off_keeps_the_plain_network():
    net = QNetwork(4)
    assert list(net.state_dict()) == PLAIN_KEYS
    assert list(QNetwork(4, layer_norm=False).state_dict()) == PLAIN_KEYS
    assert not any(isinstance(m, nn.LayerNorm) for m in net.modules())


@pytest.mark.parametrize("dueling", [True, False])
def test_layer_norm_after_every_conv_and_hidden_linear(dueling):
    torch.manual_seed(0)
    net = QNetwork(5, screen_size=84, dueling=dueling, hidden_size=64, layer_norm=True)
    obs = torch.randint(0, 256, (3, 4, 84, 84), dtype=torch.uint8)
    q = net(obs)
    assert q.shape == (3, 5) and q.dtype == F32
    heads = [net.value, net.advantage] if dueling else [net.head]
    for seq in [net.torso, *heads]:
        layers = list(seq)
        for i, layer in enumerate(layers):
            if isinstance(layer, nn.ReLU):  # every hidden ReLU reads a LayerNorm of the layer before
                assert isinstance(layers[i - 1], nn.LayerNorm) and isinstance(layers[i - 2], (nn.Conv2d, nn.Linear))
        assert not isinstance(layers[-1], nn.LayerNorm)
    norms = [m for m in net.torso if isinstance(m, nn.LayerNorm)]
    # over each conv's whole feature map (C, H', W')
    assert [tuple(m.normalized_shape) for m in norms] == [(32, 20, 20), (64, 9, 9), (64, 7, 7)]
    assert all(tuple(h[1].normalized_shape) == (64,) for h in heads)
    # at initialization (unit scale, zero shift) each sample's feature map has mean 0, variance 1
    seen = []
    hook = norms[0].register_forward_hook(lambda m, i, out: seen.append(out))
    net(obs)
    hook.remove()
    flat = seen[0].flatten(1)
    torch.testing.assert_close(flat.mean(1), torch.zeros(3), atol=1e-5, rtol=0)
    torch.testing.assert_close(flat.var(1, unbiased=False), torch.ones(3), atol=1e-3, rtol=0)


def test_layer_norm_channels_last_gives_the_same_q_values():
    torch.manual_seed(1)
    net = QNetwork(4, screen_size=44, hidden_size=32, layer_norm=True)
    # non-zero affine parameters, so a mix-up of (C, H, W) positions would show
    with torch.no_grad():
        for m in net.modules():
            if isinstance(m, nn.LayerNorm):
                m.weight.uniform_(0.5, 1.5), m.bias.uniform_(-0.2, 0.2)
    obs = torch.randint(0, 256, (6, 4, 44, 44), dtype=torch.uint8)
    expected = net(obs)
    fast = copy.deepcopy(net).channels_last()
    torch.testing.assert_close(fast(obs), expected, rtol=1e-5, atol=1e-5)


# -- PQNAgent -------------------------------------------------------------------------------------
SHAPE = (4, 36, 36)
T, N, A = 4, 4, 3


def _learner(seed=0, **kwargs) -> PQNAgent:
    torch.manual_seed(seed)
    kwargs = {"learning_rate": 1e-3, **kwargs}
    return PQNAgent(A, SHAPE, torch.device("cpu"), hidden_size=32, seed=seed, **kwargs)


def _rollout(seed=0):
    rng = np.random.default_rng(seed)
    obs = rng.integers(0, 256, (T, N, *SHAPE), dtype=np.uint8)
    actions = rng.integers(0, A, (T, N))
    returns = torch.from_numpy(rng.normal(size=(T, N)).astype(np.float32))
    return obs, actions, returns


def test_q_values_shapes_and_errors():
    learner = _learner()
    obs = np.random.default_rng(0).integers(0, 256, (5, *SHAPE), dtype=np.uint8)
    q = learner.q_values(obs)
    assert q.shape == (5, A) and q.dtype == F32 and not q.requires_grad
    torch.testing.assert_close(learner.q_values(torch.from_numpy(obs)), q, rtol=0, atol=0)
    with pytest.raises(ValueError, match=r"must be \(M, 4, 36, 36\) uint8"):
        learner.q_values(obs[:, :3])
    with pytest.raises(ValueError, match="uint8"):
        learner.q_values(obs.astype(np.float32))
    assert isinstance(learner.online.torso[1], nn.LayerNorm)  # on by default


def test_update_lowers_the_loss_on_a_fixed_rollout():
    learner = _learner()
    obs, actions, returns = _rollout()
    losses = [learner.update(obs, actions, returns, epochs=2, minibatches=2, generator=np.random.default_rng(0))
              for _ in range(8)]
    first, last = losses[0], losses[-1]
    assert set(first) == {"td_loss", "q_values", "grad_norm"} and all(isinstance(v, float) for v in first.values())
    assert last["td_loss"] < 0.5 * first["td_loss"], [m["td_loss"] for m in losses]
    assert first["grad_norm"] > 0


def test_update_is_deterministic_given_its_seeds():
    obs, actions, returns = _rollout()
    runs = []
    for _ in range(2):
        learner, gen = _learner(), np.random.default_rng(3)
        metrics = [learner.update(obs, actions, returns, epochs=2, minibatches=4, generator=gen) for _ in range(2)]
        runs.append((metrics, learner.online.state_dict()))
    assert runs[0][0] == runs[1][0]
    for key, value in runs[0][1].items():
        assert torch.equal(value, runs[1][1][key]), key


def test_state_dict_round_trip_gives_the_same_next_update():
    obs, actions, returns = _rollout()
    learner, gen = _learner(), np.random.default_rng(5)
    learner.update(obs, actions, returns, epochs=1, minibatches=2, generator=gen)
    learner.set_learning_rate(5e-4)
    saved, gen_state = copy.deepcopy(learner.state_dict()), copy.deepcopy(gen.bit_generator.state)
    expected = learner.update(obs, actions, returns, epochs=2, minibatches=2, generator=gen)
    expected_draws = learner.rng.random(8)

    resumed = _learner(seed=9)  # other initial weights and ε-greedy seed, all overwritten
    resumed.load_state_dict(saved)
    gen = np.random.default_rng()
    gen.bit_generator.state = gen_state
    assert resumed.learning_rate == 5e-4
    assert resumed.update(obs, actions, returns, epochs=2, minibatches=2, generator=gen) == expected
    for key, value in learner.online.state_dict().items():
        assert torch.equal(value, resumed.online.state_dict()[key]), key
    np.testing.assert_array_equal(resumed.rng.random(8), expected_draws)  # the ε-greedy generator too


def test_update_without_a_clip_still_reports_the_norm_and_bf16_runs():
    obs, actions, returns = _rollout()
    metrics = _learner(max_grad_norm=0.0).update(obs, actions, returns, epochs=1, minibatches=1,
                                                 generator=np.random.default_rng(0))
    assert metrics["grad_norm"] > 0
    metrics = _learner(amp="bf16").update(obs, actions, returns, epochs=1, minibatches=2,
                                          generator=np.random.default_rng(0))
    assert all(np.isfinite(v) for v in metrics.values())


def test_update_rejects_bad_inputs():
    learner = _learner()
    obs, actions, returns = _rollout()
    gen = np.random.default_rng(0)
    with pytest.raises(ValueError, match="divides T·N"):
        learner.update(obs, actions, returns, epochs=1, minibatches=3, generator=gen)
    with pytest.raises(ValueError, match="epochs=0"):
        learner.update(obs, actions, returns, epochs=0, minibatches=2, generator=gen)
    out_of_range = np.zeros((T, N), np.int64)
    out_of_range[1, 2] = A
    with pytest.raises(ValueError, match=r"actions span \[0, 3\]; they must lie in \[0, 3\)"):
        learner.update(obs, out_of_range, returns, epochs=1, minibatches=2, generator=gen)
    with pytest.raises(ValueError, match="actions is"):
        learner.update(obs, actions.astype(np.int32), returns, epochs=1, minibatches=2, generator=gen)
    with pytest.raises(ValueError, match="returns is"):
        learner.update(obs, actions, returns[:, :2], epochs=1, minibatches=2, generator=gen)
    with pytest.raises(ValueError, match=r"must be \(T, N, 4, 36, 36\) uint8"):
        learner.update(obs[0], actions, returns, epochs=1, minibatches=2, generator=gen)
