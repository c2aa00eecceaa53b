"""The learner's math on hand-computed numbers, and the agent's behaviour."""

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from vecdqn.dqn.agent import DQNAgent, double_dqn_target, td_loss
from vecdqn.model import QNetwork
from vecdqn.replay import PrioritizedReplayBuffer
from vecdqn.staging import DeviceBatch, stage


def test_double_dqn_target_hand_computed():
    rewards = torch.tensor([1.0, 0.0, 0.5])
    # Second sample terminated (discount 0); third truncated: still bootstraps with gamma^n.
    discounts = torch.tensor([0.99, 0.0, 0.99**3])
    next_q_online = torch.tensor([[2.0, 1.0], [3.0, 1.0], [0.0, 5.0]])
    next_q_target = torch.tensor([[10.0, 20.0], [30.0, 40.0], [7.0, 4.0]])

    double = double_dqn_target(rewards, discounts, next_q_online, next_q_target, double=True)
    # argmax online = [0, 0, 1] -> target values [10, 30, 4]
    expected = torch.tensor([1.0 + 0.99 * 10.0, 0.0, 0.5 + 0.99**3 * 4.0])
    torch.testing.assert_close(double, expected)

    nature = double_dqn_target(rewards, discounts, next_q_online, next_q_target, double=False)
    # max target = [20, 40, 7]
    torch.testing.assert_close(nature, torch.tensor([1.0 + 0.99 * 20.0, 0.0, 0.5 + 0.99**3 * 7.0]))


def test_td_loss_is_importance_weighted_huber():
    q_taken = torch.zeros(3, requires_grad=True)
    targets = torch.tensor([0.5, 2.0, -3.0])
    weights = torch.tensor([1.0, 0.5, 2.0])
    loss, td = td_loss(q_taken, targets, weights)
    # huber(0.5) = 0.125; huber(2) = 1.5; huber(-3) = 2.5 -> weighted 0.125, 0.75, 5.0
    assert loss.item() == pytest.approx((0.125 + 0.75 + 5.0) / 3)
    torch.testing.assert_close(td, targets)
    loss.backward()
    # d/dq of w*huber(y-q)/B: -w*clip(y-q, -1, 1)/B
    torch.testing.assert_close(q_taken.grad, torch.tensor([-0.5, -0.5, 2.0]) / 3)


@pytest.mark.parametrize("dueling", [True, False])
def test_qnetwork_shapes(dueling):
    net = QNetwork(6, dueling=dueling)
    obs = torch.randint(0, 256, (5, 4, 84, 84), dtype=torch.uint8)
    q = net(obs)
    assert q.shape == (5, 6) and q.dtype == torch.float32
    with pytest.raises(ValueError, match="n_actions=0"):
        QNetwork(0)


def test_orthogonal_init_gives_every_layer_orthogonal_rows_of_norm_sqrt_2_and_zero_biases():
    """CleanRL's PQN initialisation, the output layers included; the default stays PyTorch's."""
    torch.manual_seed(0)
    net = QNetwork(6, 4, 44, layer_norm=True, init="orthogonal")
    layers = [m for m in net.modules() if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear))]
    assert len(layers) == 3 + 4  # the torso's convolutions, two layers in each dueling stream
    for layer in layers:
        w = layer.weight.detach().flatten(1)
        small = w if w.shape[0] <= w.shape[1] else w.T  # orthonormal along the shorter side
        torch.testing.assert_close(small @ small.T, 2.0 * torch.eye(small.shape[0]), atol=1e-4, rtol=0)
        assert not layer.bias.any()
    torch.manual_seed(0)
    plain = QNetwork(6, 4, 44, layer_norm=True)
    assert plain.value[0].bias.any()
    with pytest.raises(ValueError, match="init='xavier' is not one of torch, orthogonal"):
        QNetwork(6, init="xavier")


def test_dueling_head_mean_advantage_is_zero():
    torch.manual_seed(0)
    net = QNetwork(4, dueling=True)
    obs = torch.randint(0, 256, (3, 4, 84, 84), dtype=torch.uint8)
    x = net.torso(obs.float() / 255)
    value = net.value(x).squeeze(1)
    torch.testing.assert_close(net(obs).mean(dim=1), value)


def _agent(**kwargs):
    torch.manual_seed(0)
    return DQNAgent(3, (4, 84, 84), torch.device("cpu"), seed=0, hidden_size=32, **kwargs)


def test_act_greedy_and_random():
    agent = _agent()
    obs = np.random.default_rng(0).integers(0, 256, (16, 4, 84, 84), dtype=np.uint8)
    greedy = agent.act(obs, epsilon=0.0)
    with torch.no_grad():
        expected = agent.online(torch.from_numpy(obs)).argmax(1).numpy()
    np.testing.assert_array_equal(greedy, expected)
    assert greedy.dtype == np.int64 and greedy.shape == (16,)

    many = np.concatenate([agent.act(obs, epsilon=1.0) for _ in range(200)])
    counts = np.bincount(many, minlength=3) / many.size
    np.testing.assert_allclose(counts, 1 / 3, atol=0.03)


def test_update_fits_a_fixed_batch_and_target_sync():
    agent = _agent(learning_rate=1e-3)
    rng = np.random.default_rng(1)
    batch = SimpleNamespace(
        obs=rng.integers(0, 256, (8, 4, 84, 84), dtype=np.uint8),
        next_obs=rng.integers(0, 256, (8, 4, 84, 84), dtype=np.uint8),
        actions=rng.integers(0, 3, 8),
        rewards=rng.choice([-1.0, 1.0], 8).astype(np.float32),
        discounts=np.zeros(8, np.float32),  # terminal: targets are the rewards, a fixed regression
        weights=np.ones(8, np.float32),
    )
    staged = stage(batch, agent.device)
    first, td = agent.update(staged)
    assert td.shape == (8,) and td.dtype == np.float32
    for _ in range(50):
        last, td = agent.update(staged)
    assert last["td_loss"] < 0.1 * first["td_loss"]
    assert np.abs(td).max() < 0.5

    obs = torch.from_numpy(batch.obs)
    assert not torch.equal(agent.online(obs), agent.target(obs))
    agent.sync_target()
    torch.testing.assert_close(agent.online(obs), agent.target(obs))


def test_update_takes_only_a_device_batch():
    """One type crosses into the learner: a replay sample (NumPy) is refused, naming what to do."""
    agent = _agent()
    buffer = PrioritizedReplayBuffer(64, (4, 84, 84), seed=0)
    rng = np.random.default_rng(0)
    for _ in range(20):
        obs = rng.integers(0, 256, (2, 4, 84, 84), dtype=np.uint8)
        buffer.add(obs, np.zeros(2, np.int64), np.ones(2), obs, np.zeros(2, bool))
    sample = buffer.sample(8, 0.4)
    for call in (agent.update, agent.update_async):
        with pytest.raises(TypeError, match=r"takes a vecdqn\.staging\.DeviceBatch, not a ReplaySample; convert host "
                                            r"arrays with vecdqn\.staging\.stage\(batch, agent\.device\)"):
            call(sample)
    metrics, td = agent.update(stage(sample, agent.device))  # the one conversion
    assert np.isfinite(metrics["td_loss"]) and td.shape == (8,)


def test_update_refuses_a_batch_on_another_device():
    agent = _agent()
    batch = DeviceBatch(*(torch.empty(shape, dtype=dtype, device="meta") for shape, dtype in [
        ((8, 4, 84, 84), torch.uint8), ((8, 4, 84, 84), torch.uint8), ((8,), torch.int64),
        ((8,), torch.float32), ((8,), torch.float32), ((8,), torch.float32)]))
    with pytest.raises(ValueError, match="the batch is on meta but the learner on cpu"):
        agent.update(batch)


@pytest.mark.parametrize("amp", ["off", "bf16"])
@pytest.mark.parametrize("double", [True, False])
def test_overlap_forward_is_bit_for_bit_the_same_update(amp, double):
    """The next-observation passes on a second thread change nothing: TD errors, metrics and
    every weight after several updates equal the single-thread agent's exactly."""
    rng = np.random.default_rng(3)
    host = SimpleNamespace(
        obs=rng.integers(0, 256, (16, 4, 84, 84), dtype=np.uint8),
        next_obs=rng.integers(0, 256, (16, 4, 84, 84), dtype=np.uint8),
        actions=rng.integers(0, 3, 16), rewards=rng.normal(size=16).astype(np.float32),
        discounts=np.full(16, 0.9, np.float32), weights=rng.random(16).astype(np.float32),
    )
    overlapped = _agent(amp=amp, double=double, overlap_forward=True, learning_rate=1e-3)
    plain = _agent(amp=amp, double=double, learning_rate=1e-3)
    # A target network unlike the online one, so that the online argmax and the target's max
    # differ and each pass's result shows in the TD errors.
    torch.manual_seed(7)
    other = QNetwork(3, hidden_size=32).state_dict()
    overlapped.target.load_state_dict(other), plain.target.load_state_dict(other)
    staged = stage(host, plain.device)
    for step in range(5):
        (m1, td1), (m2, td2) = overlapped.update(staged), plain.update(staged)
        np.testing.assert_array_equal(td1, td2)
        assert m1 == m2
        if step == 2:
            overlapped.sync_target(), plain.sync_target()
    assert overlapped._next_pool is not None  # the second thread did run the passes
    for a, b in zip(overlapped.online.parameters(), plain.online.parameters(), strict=True):
        assert torch.equal(a, b)


def test_overlap_forward_refuses_compile():
    with pytest.raises(ValueError, match="overlap_forward=True cannot be combined with compile=True"):
        _agent(overlap_forward=True, compile=True)
