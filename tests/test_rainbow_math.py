"""Rainbow's math against hand-computed numbers: C51's projection, noisy layers, the network, the loss,
the defaults.

Support used by the hand computations unless stated: 5 atoms on [-2, 2], z = (-2, -1, 0, 1, 2),
Δz = 1, so b = (T̂z - v_min) / Δz = T̂z + 2.
"""

import ast
import inspect
import math
from dataclasses import fields
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from vecdqn.config import Config
from vecdqn.dqn import double_dqn_target, td_loss
from vecdqn.model import QNetwork
from vecdqn.rainbow import (
    FRAMES_PER_AGENT_STEP,
    RAINBOW_DEFAULTS,
    NoisyLinear,
    RainbowNetwork,
    categorical_projection,
    categorical_support,
    rainbow_loss,
    sample_losses,
)
from vecdqn.staging import DeviceBatch

ROOT = Path(__file__).resolve().parents[1]
SMALL = {"screen_size": 36, "hidden_size": 8}  # the smallest screen the Nature torso takes: a 1×1×64 feature map


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny tensors: one torch thread, restored afterwards."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def t(values, dtype=torch.float32):
    return torch.tensor(values, dtype=dtype)


def project(next_probs, reward, discount, support=None):
    """One row through `categorical_projection`, as a list."""
    support = categorical_support(5, -2.0, 2.0) if support is None else support
    return categorical_projection(t([next_probs]), t([reward]), t([discount]), support)[0].tolist()


# -- categorical_projection -------------------------------------------------------------------------------------

def test_projection_splits_mass_between_neighbouring_atoms():
    # p = (.1, .2, .3, .4, 0), R = 0.5, discount = 0.5:
    # T̂z = 0.5 + 0.5 z = (-0.5, 0, 0.5, 1, 1.5), b = (1.5, 2, 2.5, 3, 3.5)
    #   atom j=0, p .1 at b 1.5 -> atom 1 gets .05, atom 2 gets .05
    #   atom j=1, p .2 at b 2   -> atom 2 gets .2 (lands on an atom)
    #   atom j=2, p .3 at b 2.5 -> atom 2 gets .15, atom 3 gets .15
    #   atom j=3, p .4 at b 3   -> atom 3 gets .4 (lands on an atom)
    #   atom j=4, p 0           -> nothing
    # m = (0, .05, .05+.2+.15, .15+.4, 0) = (0, .05, .4, .55, 0)
    assert project([0.1, 0.2, 0.3, 0.4, 0.0], 0.5, 0.5) == pytest.approx([0.0, 0.05, 0.4, 0.55, 0.0], abs=1e-6)


def test_projection_onto_whole_atoms_keeps_all_the_mass():
    # l == u: R = 1, discount = 1 shifts every atom by exactly one (b = 1, 2, 3, 4, 5 -> clamped to 4):
    # m = (0, .1, .2, .3, .4 + 0)
    assert project([0.1, 0.2, 0.3, 0.4, 0.0], 1.0, 1.0) == pytest.approx([0.0, 0.1, 0.2, 0.3, 0.4], abs=1e-6)
    # all the mass on z = 0, R = 1, discount = 0.5: T̂z = 1, b = 3 exactly: Algorithm 1 with u = ⌈b⌉ = l would give
    # atom 3 a share of (u - b) + (b - l) = 0 and lose it; here all of it goes to atom 3
    assert project([0.0, 0.0, 1.0, 0.0, 0.0], 1.0, 0.5) == pytest.approx([0.0, 0.0, 0.0, 1.0, 0.0], abs=1e-7)
    # the bounds themselves: R = 2 (b = 4 = K - 1, the last atom) and R = -2 (b = 0) after a termination
    assert project([0.2, 0.2, 0.2, 0.2, 0.2], 2.0, 0.0) == [0.0, 0.0, 0.0, 0.0, 1.0]
    assert project([0.2, 0.2, 0.2, 0.2, 0.2], -2.0, 0.0) == [1.0, 0.0, 0.0, 0.0, 0.0]


def test_mass_beyond_the_support_lands_on_its_bounds():
    # R = 10 > v_max: every T̂z_j = 10 + .99 z_j >= 8.02 is clamped to v_max = 2 -> the last atom
    assert project([0.1, 0.2, 0.3, 0.4, 0.0], 10.0, 0.99) == [0.0, 0.0, 0.0, 0.0, 1.0]
    assert project([0.1, 0.2, 0.3, 0.4, 0.0], -10.0, 0.99) == [1.0, 0.0, 0.0, 0.0, 0.0]
    # R = 1.5, discount 1: T̂z = (-0.5, 0.5, 1.5, 2.5 -> 2, 3.5 -> 2): atom 4 gets .5·.3 + .4 + .0 from the clamped two
    #   j=0 (.1) at b 1.5 -> .05, .05 to atoms 1, 2;  j=1 (.2) at b 2.5 -> .1, .1 to atoms 2, 3
    #   j=2 (.3) at b 3.5 -> .15, .15 to atoms 3, 4;  j=3 (.4) clamped to b 4 -> .4 to atom 4
    assert project([0.1, 0.2, 0.3, 0.4, 0.0], 1.5, 1.0) == pytest.approx([0.0, 0.05, 0.15, 0.25, 0.55], abs=1e-6)


def test_a_terminal_transition_puts_all_the_mass_around_the_reward():
    # discount 0: T̂z_j = R for every j, whatever the next distribution
    # R = 0.3: b = 2.3 -> atom 2 gets 0.7, atom 3 gets 0.3
    assert project([0.1, 0.2, 0.3, 0.4, 0.0], 0.3, 0.0) == pytest.approx([0.0, 0.0, 0.7, 0.3, 0.0], abs=1e-6)
    assert project([0.0, 0.0, 0.0, 0.0, 1.0], 0.3, 0.0) == pytest.approx([0.0, 0.0, 0.7, 0.3, 0.0], abs=1e-6)
    # R = -1.25: b = 0.75 -> atom 0 gets 0.25, atom 1 gets 0.75
    assert project([0.5, 0.0, 0.0, 0.0, 0.5], -1.25, 0.0) == pytest.approx([0.25, 0.75, 0.0, 0.0, 0.0], abs=1e-6)


def test_a_truncated_transition_bootstraps():
    # a truncation keeps discount = γ^n = 0.99^3 = 0.970299; next distribution all on z = 2, R = 0:
    # T̂z = 1.940598, b = 3.940598 -> atom 3 gets 0.059402, atom 4 gets 0.940598
    gamma_n = 0.99**3
    truncated = project([0.0, 0.0, 0.0, 0.0, 1.0], 0.0, gamma_n)
    assert truncated == pytest.approx([0.0, 0.0, 0.0, 0.059402, 0.940598], abs=1e-6)
    # the same transition terminated (discount 0) would put everything on z = 0
    assert project([0.0, 0.0, 0.0, 0.0, 1.0], 0.0, 0.0) == [0.0, 0.0, 1.0, 0.0, 0.0]


def test_rows_are_projected_independently_and_without_gradient():
    support = categorical_support(5, -2.0, 2.0)
    probs = t([[0.1, 0.2, 0.3, 0.4, 0.0], [0.0, 0.0, 0.0, 0.0, 1.0], [0.1, 0.2, 0.3, 0.4, 0.0]]).requires_grad_()
    target = categorical_projection(probs, t([0.5, 0.0, 0.3]), t([0.5, 0.99**3, 0.0]), support)
    assert target.shape == (3, 5) and target.dtype == torch.float32 and not target.requires_grad
    expected = [[0.0, 0.05, 0.4, 0.55, 0.0], [0.0, 0.0, 0.0, 0.059402, 0.940598], [0.0, 0.0, 0.7, 0.3, 0.0]]
    np.testing.assert_allclose(target.numpy(), expected, atol=1e-6)


def eq7(next_probs: np.ndarray, rewards: np.ndarray, discounts: np.ndarray, support: np.ndarray) -> np.ndarray:
    """Bellemare et al. 2017, Eq. 7 as written, in float64:
    m_i = Σ_j [1 - |clamp(R + d z_j) - z_i| / Δz]_0^1 p_j."""
    delta = (support[-1] - support[0]) / (len(support) - 1)
    tz = np.clip(rewards[:, None] + discounts[:, None] * support[None, :], support[0], support[-1])  # (B, K_j)
    weights = np.clip(1.0 - np.abs(tz[:, :, None] - support[None, None, :]) / delta, 0.0, 1.0)  # (B, K_j, K_i)
    return np.einsum("bj,bji->bi", next_probs, weights)


@settings(max_examples=80, deadline=None)
@given(data=st.data())
def test_projection_conserves_mass_and_equals_eq7(data):
    b, k = data.draw(st.integers(1, 5), label="B"), data.draw(st.integers(2, 11), label="K")
    v_min = data.draw(st.floats(-20.0, 5.0), label="v_min")
    v_max = v_min + data.draw(st.floats(0.5, 30.0), label="width")
    support = categorical_support(k, v_min, v_max)
    raw = np.array(data.draw(st.lists(st.floats(0.0, 1.0), min_size=b * k, max_size=b * k)), np.float32)
    raw = raw.reshape(b, k) + np.float32(1e-3)
    probs = (raw / raw.sum(axis=1, keepdims=True)).astype(np.float32)
    # rewards off and on the grid (a whole number of atoms: the l == u case), discounts in [0, 1] and at 0 and 1
    delta = (v_max - v_min) / (k - 1)
    reward = st.one_of(st.floats(-50.0, 50.0), st.integers(-k, k).map(lambda i: i * delta))
    rewards = np.array(data.draw(st.lists(reward, min_size=b, max_size=b)), np.float32)
    discounts = np.array(data.draw(st.lists(st.one_of(st.floats(0.0, 1.0), st.sampled_from([0.0, 1.0])),
                                            min_size=b, max_size=b)), np.float32)
    target = categorical_projection(torch.from_numpy(probs), torch.from_numpy(rewards), torch.from_numpy(discounts),
                                    support).numpy()
    np.testing.assert_allclose(target.sum(axis=1), 1.0, atol=1e-5)
    assert (target >= 0).all()
    z = support.numpy().astype(np.float64)
    # float32 rounding of T̂z (relative 1e-7 of the support's scale) moves a share by that over Δz
    scale = max(1.0, abs(v_min), abs(v_max))
    tol = 1e-5 + 1e-6 * scale / delta
    np.testing.assert_allclose(target, eq7(probs.astype(np.float64), rewards.astype(np.float64),
                                           discounts.astype(np.float64), z), atol=tol)
    # linear interpolation between neighbours keeps the mean of the clamped atoms
    clamped = np.clip(rewards[:, None] + discounts[:, None] * z[None, :], z[0], z[-1])
    np.testing.assert_allclose(target @ z, (probs * clamped).sum(axis=1), atol=k * tol * scale)


@pytest.mark.parametrize("change, message", [
    (lambda a: {**a, "next_probs": a["next_probs"].double()}, "next_probs has dtype torch.float64"),
    (lambda a: {**a, "rewards": a["rewards"][:1]}, "rewards has shape (1,)"),
    (lambda a: {**a, "discounts": a["discounts"].view(2, 1)}, "discounts has shape (2, 1)"),
    (lambda a: {**a, "support": a["support"][:4]}, "support has shape (4,)"),
    (lambda a: {**a, "rewards": [0.0, 1.0]}, "rewards is a list"),
    (lambda a: {**a, "next_probs": torch.ones(2, 1), "support": torch.zeros(1)}, "K >= 2"),
])
def test_projection_rejects_wrong_inputs(change, message):
    args = {"next_probs": torch.full((2, 5), 0.2), "rewards": torch.zeros(2), "discounts": torch.zeros(2),
            "support": categorical_support(5, -2.0, 2.0)}
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        categorical_projection(**change(args))


def test_support_is_evenly_spaced_and_checked():
    assert categorical_support(5, -2.0, 2.0).tolist() == [-2.0, -1.0, 0.0, 1.0, 2.0]
    support = categorical_support(51, -10.0, 10.0)
    assert support.dtype == torch.float32 and support[0] == -10.0 and support[-1] == 10.0
    np.testing.assert_allclose(support.diff().numpy(), 0.4, atol=1e-6)
    with pytest.raises(ValueError, match="at least 2 atoms"):
        categorical_support(1, -10.0, 10.0)
    with pytest.raises(ValueError, match="not below"):
        categorical_support(51, 10.0, -10.0)


# -- NoisyLinear ------------------------------------------------------------------------------------------------

def test_eval_mode_is_the_mean_linear_layer():
    layer = NoisyLinear(6, 4)
    x = torch.randn(3, 6)
    layer.eval()
    assert torch.equal(layer(x), F.linear(x, layer.weight_mu, layer.bias_mu))
    layer.reset_noise()
    assert torch.equal(layer(x), F.linear(x, layer.weight_mu, layer.bias_mu))
    layer.train()
    assert not torch.allclose(layer(x), F.linear(x, layer.weight_mu, layer.bias_mu))


def test_noise_is_held_until_reset_noise_draws_new_noise():
    layer = NoisyLinear(6, 4)
    x = torch.randn(3, 6)
    first = layer(x)
    assert torch.equal(layer(x), first)  # the same sample for every call until a reset
    layer.reset_noise()
    assert not torch.allclose(layer(x), first)


def test_factorised_noise_has_one_factor_per_input_and_output():
    layer = NoisyLinear(5, 3, sigma_0=0.5)
    layer.reset_noise(torch.Generator().manual_seed(7))
    draws = torch.Generator().manual_seed(7)
    eps_in, eps_out = torch.randn(5, generator=draws), torch.randn(3, generator=draws)  # inputs first, then outputs
    f = lambda e: torch.sign(e) * torch.sqrt(torch.abs(e))  # noqa: E731 - f(x) = sgn(x) √|x|
    assert layer.epsilon_in.shape == (5,) and layer.epsilon_out.shape == (3,)
    assert torch.equal(layer.epsilon_in, f(eps_in)) and torch.equal(layer.epsilon_out, f(eps_out))
    assert layer.weight_epsilon().shape == (3, 5)
    assert torch.equal(layer.weight_epsilon(), f(eps_out)[:, None] * f(eps_in)[None, :])  # ε_{j,i} = f(ε_j) f(ε_i)
    # f inverted: sgn(f) · f² gives back the normal draws; f shrinks |ε| > 1 and grows |ε| < 1 (f(4) = 2, f(1/4) = 1/2)
    torch.testing.assert_close(layer.epsilon_in.sign() * layer.epsilon_in**2, eps_in)
    # Eq. 9 with these factors
    x = torch.randn(2, 5)
    weight = layer.weight_mu + layer.weight_sigma * torch.outer(layer.epsilon_out, layer.epsilon_in)
    bias = layer.bias_mu + layer.bias_sigma * layer.epsilon_out
    torch.testing.assert_close(layer(x), x @ weight.T + bias)


def test_initialisation_ranges():
    p, q = 100, 200
    layer = NoisyLinear(p, q, sigma_0=0.5)
    bound = 1 / math.sqrt(p)
    for mu in (layer.weight_mu, layer.bias_mu):
        assert mu.abs().max() <= bound
    assert layer.weight_mu.max() > 0.95 * bound and layer.weight_mu.min() < -0.95 * bound  # spread over U[-b, b]
    assert abs(layer.weight_mu.mean().item()) < 0.05 * bound
    assert torch.all(layer.weight_sigma == 0.5 / math.sqrt(p)) and torch.all(layer.bias_sigma == 0.5 / math.sqrt(p))
    assert layer.weight_mu.shape == layer.weight_sigma.shape == (q, p)


def test_noise_is_reproducible_and_kept_in_checkpoints():
    a, b = NoisyLinear(4, 3), NoisyLinear(4, 3)
    b.load_state_dict(a.state_dict())
    a.reset_noise(torch.Generator().manual_seed(3))
    b.reset_noise(torch.Generator().manual_seed(3))
    x = torch.randn(2, 4)
    assert torch.equal(a(x), b(x))
    assert {"epsilon_in", "epsilon_out"} <= set(a.state_dict())
    c = NoisyLinear(4, 3)
    c.load_state_dict(a.state_dict())  # the noise travels with the weights
    assert torch.equal(c(x), a(x))
    b.reset_noise(torch.Generator().manual_seed(4))
    assert not torch.equal(a(x), b(x))


def test_sigma_learns_in_train_mode_only():
    layer = NoisyLinear(4, 3)
    layer(torch.randn(2, 4)).sum().backward()
    assert layer.weight_sigma.grad is not None and layer.weight_sigma.grad.abs().sum() > 0
    layer.zero_grad(set_to_none=True)
    layer.eval()
    layer(torch.randn(2, 4)).sum().backward()
    assert layer.weight_sigma.grad is None and layer.weight_mu.grad is not None


def test_noisy_linear_rejects_bad_arguments():
    with pytest.raises(ValueError, match="sigma_0=-0.1"):
        NoisyLinear(4, 3, sigma_0=-0.1)
    with pytest.raises(ValueError, match="in_features=0"):
        NoisyLinear(0, 3)


# -- RainbowNetwork ---------------------------------------------------------------------------------------------

def obs(batch: int = 2, side: int = 36) -> torch.Tensor:
    return torch.randint(0, 256, (batch, 4, side, side), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("dueling", [True, False])
@pytest.mark.parametrize("noisy", [True, False])
def test_output_shapes_and_probabilities(dueling, noisy):
    net = RainbowNetwork(3, atoms=51, dueling=dueling, noisy=noisy, **SMALL)
    logits = net.logits(net.scale(obs()))
    assert logits.shape == (2, 3, 51) and logits.dtype == torch.float32
    torch.testing.assert_close(F.softmax(logits, dim=-1).sum(-1), torch.ones(2, 3))
    q = net.q_values(obs())
    assert q.shape == (2, 3) and q.dtype == torch.float32
    assert (q.abs() <= 10.0 + 1e-5).all()  # an expectation over atoms in [-10, 10]
    net1 = RainbowNetwork(3, atoms=1, dueling=dueling, noisy=noisy, **SMALL)
    logits1 = net1.logits(net1.scale(obs()))
    assert net1.support is None and logits1.shape == (2, 3, 1)
    assert torch.equal(net1.q_values(obs()), logits1.squeeze(-1))


def test_full_size_defaults():
    net = RainbowNetwork(6)
    assert (net.atoms, net.dueling, net.noisy) == (51, True, True)
    assert net.logits(net.scale(obs(2, 84))).shape == (2, 6, 51) and net.q_values(obs(2, 84)).shape == (2, 6)


def test_q_values_are_the_expectation_over_atoms():
    # support (-1, 0, 1); output layers zeroed, value bias (0, 0, ln 3), advantages 0:
    # p ∝ (1, 1, 3) = (.2, .2, .6) for every action, Q = -.2 + 0 + .6 = 0.4
    net = RainbowNetwork(2, atoms=3, v_min=-1.0, v_max=1.0, noisy=False, **SMALL)
    with torch.no_grad():
        for stream in (net.value, net.advantage):
            stream[2].weight.zero_()
            stream[2].bias.zero_()
        net.value[2].bias.copy_(t([0.0, 0.0, math.log(3.0)]))
    probabilities = F.softmax(net.logits(net.scale(obs())), -1).detach().numpy()
    np.testing.assert_allclose(probabilities, np.full((2, 2, 3), [0.2, 0.2, 0.6]), atol=1e-6)
    torch.testing.assert_close(net.q_values(obs()), torch.full((2, 2), 0.4))


@pytest.mark.parametrize("noisy", [True, False])
def test_dueling_subtracts_the_mean_advantage_per_atom(noisy):
    net = RainbowNetwork(3, atoms=4, noisy=noisy, **SMALL)
    x = net.scale(obs())
    features = net.torso(x)
    logits = net.logits(x)
    # the mean over actions of the logits is the value stream, atom by atom
    torch.testing.assert_close(logits.mean(dim=1), net.value(features))
    # adding c_k to every action's advantage at atom k changes nothing
    out = net.advantage[2]
    with torch.no_grad():
        bias = out.bias_mu if noisy else out.bias
        bias += t([1.0, -2.0, 3.0, 0.5]).repeat(3)  # the advantage output is laid out (A, K)
    torch.testing.assert_close(net.logits(x), logits)


def test_noisy_false_has_no_noise():
    net = RainbowNetwork(3, atoms=5, noisy=False, **SMALL)
    assert not any(isinstance(m, NoisyLinear) for m in net.modules())
    assert [name for name, _ in net.named_buffers()] == ["support"] and "support" not in net.state_dict()
    before = net.logits(net.scale(obs()))
    net.reset_noise()
    assert torch.equal(net.logits(net.scale(obs())), before)


def test_noisy_network_resamples_in_train_mode_and_not_in_eval_mode():
    net = RainbowNetwork(3, atoms=5, **SMALL)
    assert sum(isinstance(m, NoisyLinear) for m in net.modules()) == 4  # two layers per stream
    assert {"value.0.epsilon_in", "advantage.2.epsilon_out"} <= set(net.state_dict())
    before = net.logits(net.scale(obs()))
    net.reset_noise(torch.Generator().manual_seed(1))
    after = net.logits(net.scale(obs()))
    assert not torch.allclose(after, before)
    twin = RainbowNetwork(3, atoms=5, **SMALL)
    twin.load_state_dict(net.state_dict())
    assert torch.equal(twin.logits(twin.scale(obs())), after)
    twin.reset_noise(torch.Generator().manual_seed(1))  # the same seed draws the same noise
    assert torch.equal(twin.logits(twin.scale(obs())), after)
    net.eval()
    mean = net.logits(net.scale(obs()))
    net.reset_noise()
    assert torch.equal(net.logits(net.scale(obs())), mean)


def test_torso_is_the_q_networks():
    net = RainbowNetwork(3, **SMALL)
    qnet = QNetwork(3, screen_size=36, hidden_size=8)
    torso = {k: v for k, v in qnet.state_dict().items() if k.startswith("torso.")}
    assert {k: v.shape for k, v in torso.items()} == {k: v.shape for k, v in net.state_dict().items()
                                                      if k.startswith("torso.")}
    net.load_state_dict(torso, strict=False)
    x = net.scale(obs())
    assert torch.equal(net.torso(x), qnet.torso(x))


def test_network_rejects_bad_arguments():
    with pytest.raises(ValueError, match="atoms=0"):
        RainbowNetwork(3, atoms=0, **SMALL)
    with pytest.raises(ValueError, match="n_actions=0"):
        RainbowNetwork(0, **SMALL)
    with pytest.raises(ValueError, match="not below"):
        RainbowNetwork(3, atoms=5, v_min=1.0, v_max=1.0, **SMALL)


# -- the loss ---------------------------------------------------------------------------------------------------

def log(values):
    return torch.log(t(values))  # log 0 = -inf: softmax gives it probability 0


# Two actions, three atoms on (-1, 0, 1). Online distributions at s: action 0 (.2, .3, .5), action 1 (.6, .3, .1).
# At s' the networks disagree: the online network prefers action 0 (Q = 1 > -1); the target network puts
# action 0 all on z = -1 and action 1 all on z = +1, so it would prefer action 1.
SUPPORT3 = t([-1.0, 0.0, 1.0])
ONLINE_S = torch.stack([log([[0.2, 0.3, 0.5], [0.6, 0.3, 0.1]])] * 2)  # (B=2, A=2, K=3)
NEXT_Q_ONLINE = t([[1.0, -1.0], [1.0, -1.0]])
TARGET_S2 = torch.stack([log([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])] * 2)


def test_cross_entropy_by_hand_with_the_double_q_choice():
    # row 0: action 1 taken, R = 0.25, discount 0.5.
    #   double: a* = argmax online = 0 -> target distribution all on z = -1: T̂z = 0.25 - 0.5 = -0.25, b = 0.75
    #     m = (.25, .75, 0); loss = -(.25 ln .6 + .75 ln .3) = 1.0306868
    #   not double: a* = argmax target = 1 -> all on z = +1: T̂z = 0.75, b = 1.75, m = (0, .25, .75)
    #     loss = -(.25 ln .3 + .75 ln .1) = 2.0279320
    # row 1: action 0 taken, R = 0.5, terminated (discount 0): T̂z = 0.5, b = 1.5, m = (0, .5, .5)
    #     loss = -(.5 ln .3 + .5 ln .5) = 0.9485600, whichever a*
    args = (ONLINE_S, t([1, 0], torch.int64), t([0.25, 0.5]), t([0.5, 0.0]), NEXT_Q_ONLINE, TARGET_S2, SUPPORT3)
    losses, priorities = sample_losses(*args, double=True)
    expected = [-(0.25 * math.log(0.6) + 0.75 * math.log(0.3)), -(0.5 * math.log(0.3) + 0.5 * math.log(0.5))]
    assert losses.tolist() == pytest.approx(expected, abs=1e-6) and expected[0] == pytest.approx(1.0306868)
    assert torch.equal(priorities, losses) and not priorities.requires_grad
    losses, _ = sample_losses(*args, double=False)
    assert losses.tolist() == pytest.approx([2.0279320, 0.9485600], abs=1e-6)
    # C51's own choice needs no online values
    assert sample_losses(*args[:4], None, *args[5:], double=False)[0].tolist() == pytest.approx([2.0279320, 0.94856],
                                                                                               abs=1e-6)


def test_the_loss_differentiates_the_online_logits_only():
    logits = ONLINE_S.clone().requires_grad_()
    target = TARGET_S2.clone().requires_grad_()
    losses, _ = sample_losses(logits, t([1, 0], torch.int64), t([0.25, 0.5]), t([0.5, 0.0]), NEXT_Q_ONLINE,
                              target, SUPPORT3)
    losses.sum().backward()
    assert target.grad is None
    # d(-Σ m log softmax(l)) / dl = softmax(l) - m, at the taken action only: row 0, action 1, m = (.25, .75, 0)
    torch.testing.assert_close(logits.grad[0, 1], t([0.6 - 0.25, 0.3 - 0.75, 0.1]))
    assert torch.equal(logits.grad[0, 0], torch.zeros(3))


@pytest.mark.parametrize("double", [True, False])
def test_one_atom_is_double_dqns_huber_loss(double):
    g = torch.Generator().manual_seed(5)
    b, a = 6, 4
    q, next_q_online, next_q_target = (torch.randn(b, a, generator=g) * 3 for _ in range(3))
    actions = torch.randint(0, a, (b,), generator=g)
    rewards, weights = torch.randn(b, generator=g), torch.rand(b, generator=g)
    discounts = t([0.97, 0.0, 0.97, 0.5, 0.0, 0.97])
    losses, priorities = sample_losses(q.unsqueeze(2), actions, rewards, discounts, next_q_online,
                                       next_q_target.unsqueeze(2), None, double)
    targets = double_dqn_target(rewards, discounts, next_q_online, next_q_target, double)
    loss, td_errors = td_loss(q.gather(1, actions.unsqueeze(1)).squeeze(1), targets, weights)
    torch.testing.assert_close((weights * losses).mean(), loss)
    torch.testing.assert_close(priorities, td_errors)


def batch_of(side: int = 36, b: int = 4, seed: int = 0) -> DeviceBatch:
    g = torch.Generator().manual_seed(seed)
    frames = lambda: torch.randint(0, 256, (b, 4, side, side), dtype=torch.uint8, generator=g)  # noqa: E731
    return DeviceBatch(frames(), frames(), torch.randint(0, 3, (b,), generator=g), torch.randn(b, generator=g),
                       t([0.97, 0.0, 0.97, 0.5])[:b], torch.rand(b, generator=g) + 0.1)


@pytest.mark.parametrize("atoms", [5, 1])
def test_rainbow_loss_runs_the_networks_and_weights_the_samples(atoms):
    online = RainbowNetwork(3, atoms=atoms, v_min=-2.0, v_max=2.0, **SMALL)
    target = RainbowNetwork(3, atoms=atoms, v_min=-2.0, v_max=2.0, **SMALL)
    target.requires_grad_(False)
    batch = batch_of()
    noise = {k: v.clone() for k, v in online.state_dict().items() if "epsilon" in k}
    loss, priorities = rainbow_loss(online, target, batch)
    assert loss.shape == () and priorities.shape == (4,) and not priorities.requires_grad
    # the same numbers from the network outputs, by hand
    with torch.no_grad():
        next_q_online = online.q_values(batch.next_obs)
        next_target = target.logits(target.scale(batch.next_obs))
    logits = online.logits(online.scale(batch.obs))
    losses, expected_priorities = sample_losses(logits, batch.actions, batch.rewards, batch.discounts,
                                                next_q_online, next_target, online.support)
    torch.testing.assert_close(loss, (batch.weights * losses).mean())
    torch.testing.assert_close(priorities, expected_priorities)
    if atoms == 1:  # double DQN on the same outputs
        dqn_loss, td_errors = td_loss(online.q_values(batch.obs).gather(1, batch.actions.unsqueeze(1)).squeeze(1),
                                      double_dqn_target(batch.rewards, batch.discounts, next_q_online,
                                                        next_target.squeeze(2)), batch.weights)
        torch.testing.assert_close(loss, dqn_loss)
        torch.testing.assert_close(priorities, td_errors)
    loss.backward()
    assert online.advantage[2].weight_mu.grad is not None and online.torso[0].weight.grad is not None
    assert all(p.grad is None for p in target.parameters())
    assert all(torch.equal(online.state_dict()[k], v) for k, v in noise.items())  # the loss draws no noise


def test_rainbow_loss_rejects_mismatched_networks_and_missing_inputs():
    with pytest.raises(ValueError, match="51 atoms"):
        rainbow_loss(RainbowNetwork(3, **SMALL), RainbowNetwork(3, atoms=5, **SMALL), batch_of())
    with pytest.raises(ValueError, match="next_q_online is a NoneType"):
        sample_losses(ONLINE_S, t([1, 0], torch.int64), t([0.0, 0.0]), t([0.0, 0.0]), None, TARGET_S2, SUPPORT3)
    with pytest.raises(ValueError, match="actions has dtype torch.int32"):
        sample_losses(ONLINE_S, t([1, 0], torch.int32), t([0.0, 0.0]), t([0.0, 0.0]), NEXT_Q_ONLINE, TARGET_S2,
                      SUPPORT3)
    with pytest.raises(ValueError, match="support is a NoneType"):
        sample_losses(ONLINE_S, t([1, 0], torch.int64), t([0.0, 0.0]), t([0.0, 0.0]), NEXT_Q_ONLINE, TARGET_S2, None)


# -- defaults and layering --------------------------------------------------------------------------------------

def test_defaults_are_table_1_in_agent_steps():
    assert FRAMES_PER_AGENT_STEP == 4
    assert dict(RAINBOW_DEFAULTS) == {
        "atoms": 51, "v_min": -10.0, "v_max": 10.0, "sigma_0": 0.5, "epsilon_start": 0.0, "epsilon_end": 0.0,
        "n_step": 3, "learning_rate": 6.25e-5, "adam_eps": 1.5e-4, "per_alpha": 0.5, "per_beta_start": 0.4,
        "per_beta_end": 1.0, "target_update_frequency": 8_000, "learning_starts": 20_000, "gamma": 0.99}
    with pytest.raises(TypeError):
        RAINBOW_DEFAULTS["atoms"] = 1  # read-only
    own = {"atoms", "v_min", "v_max", "sigma_0"}
    assert set(RAINBOW_DEFAULTS) - own <= {f.name for f in fields(Config)}  # the other keys are Config's fields
    signature = inspect.signature(RainbowNetwork).parameters
    assert {name: signature[name].default for name in own} == {name: RAINBOW_DEFAULTS[name] for name in own}


def test_the_rainbow_package_imports_only_what_it_may():
    # the registry's POLICY_KEY is the one name of the seam an agent needs (as DQN's agent)
    forbidden = ("vecdqn.dqn", "vecdqn.pqn", "vecdqn.envs", "vecdqn.trainer", "vecdqn.core", "vecdqn.config",
                 "gymnasium", "ale_py", "cv2")
    for path in sorted((ROOT / "vecdqn" / "rainbow").glob("*.py")):
        names = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module:
                names.add(node.module)
        bad = {n for n in names for f in forbidden if n == f or n.startswith(f + ".")}
        assert not bad, f"{path.name} imports {sorted(bad)}"
        if path.stem == "defaults":
            assert names <= {"__future__", "types"}, names  # plain data: no torch


def test_rainbow_loss_wants_one_weight_per_transition():
    batch = batch_of()._replace(weights=torch.ones(3))
    with pytest.raises(ValueError, match=r"weights has shape \(3,\); it must be \(4,\)"):
        rainbow_loss(RainbowNetwork(3, atoms=5, **SMALL), RainbowNetwork(3, atoms=5, **SMALL), batch)


def test_the_network_acts_as_every_policy_network_does():
    """``forward`` is the Q-values, ``(B, A) float32``, as evaluation and the actors take them; the
    distributions come from ``logits``; `channels_last` changes the memory order, not the values."""
    net = RainbowNetwork(4, atoms=11, v_min=-1.0, v_max=1.0, **SMALL).eval()
    o = obs(3)
    q = net(o)
    assert q.shape == (3, 4) and q.dtype == torch.float32
    torch.testing.assert_close(q, net.expected_q(net.logits(net.scale(o))))
    torch.testing.assert_close(net.channels_last()(o), q)
