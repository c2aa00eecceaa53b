"""The learner's fast path: replay frames on a torch device, prefetched batches, the fused
forward, bf16 autocast and CUDA graphs, and their options.

Device-parametrized tests run on ``cpu`` everywhere and on ``cuda`` where there is one (the
very same torch code; only the device differs).
"""

import copy

import numpy as np
import pytest
import torch
from helpers import catch_config
from replay_streams import make_steps

from vecdqn.cli import main
from vecdqn.dqn.agent import DQNAgent
from vecdqn.dqn.device_replay import DeviceFrames
from vecdqn.dqn.pipeline import LearnerPipeline
from vecdqn.replay import PrioritizedReplayBuffer
from vecdqn.staging import DeviceBatch, check_amp, on_device, stage
from vecdqn.trainer import Trainer

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA"))]
CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA")
SHAPE = (4, 36, 36)  # the smallest frames the Nature torso takes: cheap updates


def pixel_steps(n_envs, n_steps, seed=0):
    """FrameStack-like add batches of ``SHAPE`` frames, with episode ends and, now and then, data
    that does not follow FrameStack's shift (the rings then write whole stacks)."""
    # Each 2×3 frame blown up to 36×36 and xor-ed with a fixed pattern: equal frames stay equal,
    # so FrameStack's shifts still match.
    pattern = np.arange(36 * 36).astype(np.uint8).reshape(36, 36)
    scale = lambda x: np.kron(x, np.ones((1, 1, 18, 12), dtype=np.uint8)) ^ pattern  # noqa: E731
    for obs, actions, rewards, next_obs, term, trunc in make_steps(n_envs, 4, n_steps, "mixed", seed, 0.1):
        yield scale(obs), actions % 3, rewards, scale(next_obs), term, trunc


def fill(buffer, n_envs=3, n_steps=60, seed=0, frames=None):
    for step in pixel_steps(n_envs, n_steps, seed):
        buffer.add(*step)
        if frames is not None:
            frames.sync()
    return buffer


def make_buffer(capacity=120, alpha=0.6, seed=1):
    return PrioritizedReplayBuffer(capacity, SHAPE, alpha=alpha, seed=seed, n_step=3, gamma=0.9)


def make_agent(device="cpu", **kwargs):
    torch.manual_seed(0)
    return DQNAgent(3, SHAPE, torch.device(device), seed=0, hidden_size=16, learning_rate=1e-3, **kwargs)


# -- replay frames on a device --------------------------------------------------------------------
def test_sample_slots_draws_what_sample_draws():
    a = fill(make_buffer(), n_steps=90)  # 90 steps over 40-slot rings: wrapped twice
    b = copy.deepcopy(a)
    for beta in (0.4, 1.0):
        sample, slots = a.sample(8, beta), b.sample_slots(8, beta)
        expected = slots.with_frames(b.frames)
        for name in sample.keys():
            np.testing.assert_array_equal(getattr(sample, name), getattr(expected, name), err_msg=name)
        assert slots.obs_slots.shape == slots.next_obs_slots.shape == (8, 4)


@pytest.mark.parametrize("device", DEVICES)
def test_device_frames_follow_every_add(device):
    buffer = fill(make_buffer(), n_steps=10)
    frames = DeviceFrames(buffer, device)  # made mid-run (as on resume): copies everything
    fill(buffer, n_steps=80, seed=3, frames=frames)  # wraps the rings, whole-stack writes too
    np.testing.assert_array_equal(frames.frames.cpu().numpy(), buffer.frames)


@pytest.mark.parametrize("device", DEVICES)
def test_device_gather_returns_the_host_batch(device):
    host = fill(make_buffer(), n_steps=70)
    mirrored = copy.deepcopy(host)
    frames = DeviceFrames(mirrored, device)
    for _ in range(3):
        sample = host.sample(16, 0.5)
        batch = frames.batch(mirrored.sample_slots(16, 0.5), torch.device(device))
        assert batch.obs.device.type == device and batch.obs.dtype == torch.uint8
        np.testing.assert_array_equal(batch.obs.cpu().numpy(), sample.obs)
        np.testing.assert_array_equal(batch.next_obs.cpu().numpy(), sample.next_obs)
        for name in ("actions", "rewards", "discounts", "weights"):
            np.testing.assert_array_equal(getattr(batch, name).cpu().numpy(), getattr(sample, name), err_msg=name)


# -- prefetch -------------------------------------------------------------------------------------
def record_draws(buffer):
    """Make ``buffer`` log the indices of every batch it draws; returns the log."""
    log = []
    for name in ("sample", "sample_slots"):
        method = getattr(buffer, name)

        def spy(*args, _method=method, **kwargs):
            batch = _method(*args, **kwargs)
            log.append(batch.indices.copy())
            return batch

        setattr(buffer, name, spy)
    return log


def run_pipeline(buffer, *, prefetch, frames_device=None, updates=12, store_every=4, device="cpu"):
    """``updates`` updates, with a vector step stored after every ``store_every``; returns the
    drawn indices and the online network's parameters."""
    log = record_draws(buffer)
    agent = make_agent(device)
    frames = DeviceFrames(buffer, frames_device) if frames_device else None
    pipeline = LearnerPipeline(buffer, agent, 8, prefetch=prefetch, frames=frames)
    more = pixel_steps(3, updates // store_every + 1, seed=5)
    for k in range(updates):
        pipeline.update(0.5)
        if k % store_every == store_every - 1:
            pipeline.store(*next(more))
    pipeline.flush()
    pipeline.close()
    return np.stack(log), [p.detach().cpu().clone() for p in agent.online.parameters()]


def test_prefetch_with_uniform_replay_draws_the_synchronous_batches():
    """Priorities do not steer uniform sampling (alpha 0): both modes draw the same batches.
    (Not across a store: the batch prefetched before it was drawn from the buffer without it.)"""
    base = fill(make_buffer(alpha=0.0), n_steps=60)
    sync, _ = run_pipeline(copy.deepcopy(base), prefetch=False, store_every=100)
    prefetched, _ = run_pipeline(copy.deepcopy(base), prefetch=True, store_every=100)
    assert len(prefetched) == len(sync) + 1  # the batch drawn ahead for a 13th update
    np.testing.assert_array_equal(prefetched[:-1], sync)


def test_prefetch_draws_from_priorities_one_update_late():
    """With prioritized replay, prefetch mode is the sequential loop in which batch k+1 is drawn
    after the priorities of update k-1 are written and before those of update k."""
    base = fill(make_buffer(), n_steps=60)
    prefetched, params = run_pipeline(copy.deepcopy(base), prefetch=True, updates=6, store_every=100)

    buffer, agent = copy.deepcopy(base), make_agent()
    batches, late, drawn = [buffer.sample(8, 0.5)], None, []
    for k in range(6):
        if late is not None:
            buffer.update_priorities(*late)
        batches.append(buffer.sample(8, 0.5))
        _, td_errors = agent.update(stage(batches[k], agent.device))
        late = (batches[k].indices, td_errors)
        drawn.append(batches[k].indices)
    np.testing.assert_array_equal(prefetched[:6], np.stack(drawn))
    for got, want in zip(params, agent.online.parameters(), strict=True):
        torch.testing.assert_close(got, want.detach(), rtol=0, atol=0)


@pytest.mark.parametrize("device", DEVICES)
def test_device_frames_pipeline_is_the_host_pipeline(device):
    """Same seed, same draws, same updates whether batches are copied on the host or gathered
    from the device copy, with stores between updates and prefetch on."""
    base = fill(make_buffer(), n_steps=60)
    host, host_params = run_pipeline(copy.deepcopy(base), prefetch=True, device=device)
    gathered, gathered_params = run_pipeline(copy.deepcopy(base), prefetch=True, frames_device=device,
                                             device=device)
    np.testing.assert_array_equal(gathered, host)
    assert len(host) == 13
    tolerance = {} if device == "cpu" else {"rtol": 1e-4, "atol": 1e-5}  # cuDNN may reorder sums
    for got, want in zip(gathered_params, host_params, strict=True):
        torch.testing.assert_close(got, want, **(tolerance or {"rtol": 0, "atol": 0}))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("prefetch", [False, True], ids=["sync", "prefetch"])
@pytest.mark.parametrize("gather", [False, True], ids=["host-replay", "device-frames"])
def test_every_batch_source_yields_a_device_batch_on_the_agents_device(device, prefetch, gather):
    """The replay pipeline, the device-frames path and the prefetch path all hand the agent one
    type, already on its device (the agent refuses anything else)."""
    buffer = fill(make_buffer(), n_steps=60)
    agent = make_agent(device)
    frames = DeviceFrames(buffer, device) if gather else None
    pipeline = LearnerPipeline(buffer, agent, 8, prefetch=prefetch, frames=frames)
    seen = []
    update_async = agent.update_async

    def spy(batch):
        seen.append(batch)
        return update_async(batch)

    agent.update_async = spy
    indices, drawn = pipeline.draw(0.5)
    more = pixel_steps(3, 3, seed=5)
    for k in range(6):
        pipeline.update(0.5)
        if k % 2:
            pipeline.store(*next(more))
    pipeline.flush()
    pipeline.close()
    assert len(seen) == 6 and indices.shape == (8,)
    for batch in [drawn, *seen]:
        assert type(batch) is DeviceBatch
        assert all(on_device(t, agent.device) for t in batch), [t.device for t in batch]
        assert batch.obs.shape == (8, *SHAPE) and batch.obs.dtype == torch.uint8


# -- the update ------------------------------------------------------------------------------------
def random_batch(rng, b=8, device="cpu"):
    """A random `DeviceBatch` of ``b`` transitions on ``device``."""
    from types import SimpleNamespace

    host = SimpleNamespace(obs=rng.integers(0, 256, (b, *SHAPE), dtype=np.uint8),
                           next_obs=rng.integers(0, 256, (b, *SHAPE), dtype=np.uint8),
                           actions=rng.integers(0, 3, b), rewards=rng.normal(size=b).astype(np.float32),
                           discounts=np.full(b, 0.9, np.float32), weights=rng.random(b).astype(np.float32))
    return stage(host, torch.device(device))


@pytest.mark.parametrize("device", DEVICES)
def test_fused_forward_is_the_separate_forwards(device):
    batch = random_batch(np.random.default_rng(0), device=device)
    fused, separate = make_agent(device, fuse_forward=True), make_agent(device, fuse_forward=False)
    for _ in range(3):
        (m1, td1), (m2, td2) = fused.update(batch), separate.update(batch)
        np.testing.assert_allclose(td1, td2, rtol=1e-4, atol=1e-5)
        assert m1["td_loss"] == pytest.approx(m2["td_loss"], rel=1e-4)


@pytest.mark.parametrize("device", DEVICES)
def test_bf16_autocast_keeps_fp32_weights_and_loss(device):
    batch = random_batch(np.random.default_rng(1), device=device)
    agent, reference = make_agent(device, amp="bf16"), make_agent(device)
    (metrics, td), (ref_metrics, ref_td) = agent.update(batch), reference.update(batch)
    assert td.dtype == np.float32 and all(p.dtype == torch.float32 for p in agent.online.parameters())
    assert metrics["td_loss"] == pytest.approx(ref_metrics["td_loss"], rel=0.05)  # bf16: ~3 digits
    np.testing.assert_allclose(td, ref_td, rtol=0.05, atol=0.05)


def test_amp_refused_where_the_device_cannot():
    with pytest.raises(ValueError, match=r"^--amp bf16 is not offered on --device meta; use --amp off"):
        check_amp(torch.device("meta"), "bf16")
    with pytest.raises(ValueError, match=r"^--amp 'fp8' is not one of off, bf16, auto$"):
        check_amp(torch.device("cpu"), "fp8")
    assert check_amp(torch.device("cpu"), "off") is None


@CUDA
@pytest.mark.parametrize("amp", ["off", "bf16"])
def test_cuda_graph_update_matches_eager(amp):
    """``--compile`` on CUDA (forward and backward as CUDA graphs) computes the eager update."""
    batch = random_batch(np.random.default_rng(2), b=32, device="cuda")
    graphed, eager = make_agent("cuda", compile=True, amp=amp), make_agent("cuda", amp=amp)
    assert graphed.cuda_graphs
    for _ in range(4):
        (m1, td1), (m2, td2) = graphed.update(batch), eager.update(batch)
    tolerance = 1e-3 if amp == "off" else 0.05
    np.testing.assert_allclose(td1, td2, rtol=tolerance, atol=tolerance)
    assert m1["td_loss"] == pytest.approx(m2["td_loss"], rel=tolerance)


# -- the trainer and its options -------------------------------------------------------------------
@pytest.mark.parametrize("device", DEVICES)
def test_trainer_runs_with_prefetch_and_device_frames(tmp_path, device):
    """A short Catch run on the fast path: on CUDA every option at once (CUDA graphs, bf16)."""
    options = {"compile": True, "amp": "bf16"} if device == "cuda" else {}
    config = catch_config(tmp_path, total_steps=300, run_name="run", prefetch=True, replay_device=device,
                          device=device, **options)
    trainer = Trainer(config, progress=False, handle_signals=False)
    summary = trainer.run()
    learner = trainer.core.learner
    assert summary["updates"] == 51 and learner.pipeline.prefetch and learner.pipeline.frames is not None
    np.testing.assert_array_equal(learner.pipeline.frames.frames.cpu().numpy(), learner.buffer.frames)


@pytest.mark.parametrize("argv, message", [
    (["--amp", "fp8"], "--amp 'fp8' is not one of off, bf16"),
    (["--replay-device", "tpu"], "--replay-device 'tpu' is not one of"),
    (["--prefetch=yes"], "ignored explicit argument"),
])
def test_bad_options_exit_2_with_one_line(argv, message, capsys):
    assert main(["--preset", "catch", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is present")
def test_replay_device_cuda_refused_without_cuda(tmp_path, capsys):
    assert main(["--preset", "catch", "--log-dir", str(tmp_path), "--replay-device", "cuda"]) == 2
    err = capsys.readouterr().err
    assert err == ("train.py: error: --replay-device cuda was asked for but CUDA is not available; use "
                   "--replay-device cpu or auto\n")


# -- does it still learn? ------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("options", [["--prefetch"], ["--amp", "bf16"], ["--prefetch", "--replay-device", "cpu"]],
                         ids=["prefetch", "bf16", "prefetch-device-frames"])
def test_catch_preset_learns_on_the_fast_path(tmp_path, options):
    """The Catch learning test of test_learning.py with priorities one update late, with bf16
    autocast (on the CPU), and with batches gathered from a device copy of the frames. Slow: the
    CPU run takes minutes."""
    from test_learning import learned, preset

    trainer = Trainer(preset(tmp_path, *options), progress=False, handle_signals=False)
    summary = trainer.run()
    assert summary["mean_return"] >= 0.8, summary
    ok, mean_return, start_q = learned(trainer)
    assert ok, (mean_return, start_q)
