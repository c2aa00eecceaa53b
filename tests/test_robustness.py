"""Runs that survive: exact resume, signals, crashed workers, non-finite losses."""

import json
import signal
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import psutil
import pytest
import torch
from helpers import RaisingCatch, catch_config, signal_training
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from vecdqn import checkpoint
from vecdqn.collector import NonFiniteError
from vecdqn.envs import WorkerError
from vecdqn.preflight import ConfigError
from vecdqn.trainer import Trainer

ROOT = Path(__file__).resolve().parents[1]


def parameters(run_dir: Path) -> dict[str, torch.Tensor]:
    state = checkpoint.load(run_dir / "checkpoints" / "latest.pt")
    return {**{f"online.{k}": v for k, v in state["agent"]["online"].items()},
            **{f"target.{k}": v for k, v in state["agent"]["target"].items()}}


@pytest.mark.parametrize("prefetch", [False, True], ids=["synchronous", "prefetch"])
def test_resume_with_saved_replay_matches_an_uninterrupted_run(tmp_path, prefetch):
    """600 agent steps straight == 300 steps, checkpoint, resume for 300 more (same seed, CPU).
    With prefetch the checkpoint also holds the last update's TD errors, not yet written back, and
    the batch drawn for the next update; the resume writes and learns them where the straight run does."""
    straight = Trainer(catch_config(tmp_path / "a", total_steps=600, run_name="run", prefetch=prefetch),
                       progress=False).run()

    first = catch_config(tmp_path / "b", total_steps=300, run_name="run", save_replay=True, prefetch=prefetch)
    Trainer(first, progress=False).run()
    run_dir = tmp_path / "b" / "run"
    held = checkpoint.load(run_dir / "checkpoints" / "latest.pt")["agent"].get("pipeline")
    if prefetch:
        assert held["pending"]["td_errors"].shape == (32,) and held["next"]["batch"]["obs"].dtype == torch.uint8
    else:
        assert held is None
    resumed = Trainer.from_checkpoint(run_dir, {"total_steps": 600}, progress=False).run()
    assert resumed["steps"] == 600 and resumed["updates"] == straight["updates"]
    assert resumed["episodes"] == straight["episodes"]  # the game count continues across the resume
    assert resumed["mean_return"] == straight["mean_return"]  # and so does the history of returns

    a, b = parameters(Path(straight["run_dir"])), parameters(run_dir)
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name


def test_resume_without_replay_refills_first(tmp_path):
    Trainer(catch_config(tmp_path, total_steps=200, run_name="run"), progress=False).run()
    trainer = Trainer.from_checkpoint(tmp_path / "run", {"total_steps": 400}, progress=False)
    summary = trainer.run()
    assert summary["steps"] == 400
    # Learning waited for learning_starts (100) fresh transitions after the resume at step 200.
    assert trainer.core.state.learn_from == 300
    assert json.loads((tmp_path / "run" / "config.json").read_text())["total_steps"] == 400


def test_a_run_resumed_between_checkpoints_keeps_the_uninterrupted_runs_checkpoint_and_log_steps(tmp_path):
    """Stopped at agent step 250 (as by Ctrl-C, between periodic checkpoints) and resumed: the
    kept checkpoints and the logged steps are those of a run that was never stopped."""
    options = dict(checkpoint_every=200, keep_checkpoints=True, log_every=100, run_name="run")
    Trainer(catch_config(tmp_path / "a", total_steps=600, **options), progress=False).run()
    Trainer(catch_config(tmp_path / "b", total_steps=250, **options), progress=False).run()
    Trainer.from_checkpoint(tmp_path / "b" / "run", {"total_steps": 600}, progress=False).run()

    def kept(root):
        return [step for step, _ in checkpoint.kept_checkpoints(root / "run")]

    def logged(root):
        acc = EventAccumulator(str(root / "run"), size_guidance={"scalars": 0})
        acc.Reload()
        return [e.step for e in acc.Scalars("charts/epsilon")]

    assert kept(tmp_path / "a") == kept(tmp_path / "b") == [200, 400, 600]  # the end too: a longer run keeps it
    assert logged(tmp_path / "a") == [100, 200, 300, 400, 500, 600]
    assert logged(tmp_path / "b") == [100, 200, 250, 300, 400, 500, 600]  # + the stop's own log


@pytest.mark.parametrize("option", ["log_dir", "run_name"])
def test_resume_refuses_to_move_the_run(tmp_path, option):
    Trainer(catch_config(tmp_path, total_steps=200, run_name="run"), progress=False).run()
    with pytest.raises(ConfigError, match="cannot be given with --resume"):
        Trainer.from_checkpoint(tmp_path / "run", {"total_steps": 400, option: "elsewhere"}, progress=False)


@pytest.mark.parametrize("signum, code, envs", [(signal.SIGINT, 130, ["--num-envs", "2"]),
                                               (signal.SIGTERM, 143, ["--num-envs", "2"]),
                                               (signal.SIGINT, 130, ["--num-envs", "4", "--envs-per-worker", "2"])])
def test_signal_checkpoints_and_exits_cleanly(tmp_path, signum, code, envs):
    returncode, err, children = signal_training(
        ["--preset", "catch", *envs, "--total-steps", "1000000", "--log-dir", str(tmp_path), "--run-name",
         "run", "--learning-starts", "100"], signum, workers=2, settle=3)  # let it train a little
    assert returncode == code, err[-2000:]
    ckpt = tmp_path / "run" / "checkpoints" / "latest.pt"
    state = checkpoint.load(ckpt)
    assert state["train_state"]["step"] > 0
    assert str(ckpt) in err and "--resume" in err
    gone, alive = psutil.wait_procs(children, timeout=10)
    assert not alive, f"worker processes left behind: {alive}"


# gymnasium's AsyncVectorEnv reports a failing worker (and a close during a pending step) as
# coloured UserWarnings; here the failure is deliberate and asserted below, so they are not shown.
@pytest.mark.filterwarnings("ignore::UserWarning:gymnasium.vector.async_vector_env")
def test_worker_exception_stops_the_run_naming_the_env(tmp_path):
    gym.register("vecdqn-test/CrashingCatch-v0", entry_point=RaisingCatch, kwargs={"raise_seed": 8})
    config = catch_config(tmp_path, env_id="vecdqn-test/CrashingCatch-v0", total_steps=2_000, run_name="run")
    trainer = Trainer(config, progress=False, handle_signals=False)
    start = time.time()
    message = (r"^env 1 \(vecdqn-test/CrashingCatch-v0\) failed at agent step \d+: RuntimeError: emulator exploded "
               r"on step 50$")
    with pytest.raises(WorkerError, match=message) as failure:
        trainer.run()
    assert "in step" in failure.value.details and "RuntimeError: emulator exploded" in failure.value.details
    assert time.time() - start < 30
    assert trainer.envs.closed
    assert checkpoint.load(trainer.core.failure_checkpoint)["train_state"]["step"] > 0
    assert not [p for p in psutil.Process().children(recursive=True) if p.is_running()
                and p.status() != psutil.STATUS_ZOMBIE]


class HangingCatch(RaisingCatch):
    """Catch whose env seeded 8 stops answering on its 50th step."""

    def step(self, action):
        if self.steps_taken == 49 and self.first_seed == 8:
            time.sleep(3600)
        return super().step(action)


@pytest.mark.parametrize(("envs_per_worker", "named"), [(1, r"env 1 \("), (2, r"envs 0-1 \(worker 0, ")])
def test_hung_worker_times_out(tmp_path, envs_per_worker, named):
    if "vecdqn-test/HangingCatch-v0" not in gym.registry:
        gym.register("vecdqn-test/HangingCatch-v0", entry_point=HangingCatch)
    config = catch_config(tmp_path, env_id="vecdqn-test/HangingCatch-v0", total_steps=2_000, run_name="run",
                          worker_timeout=2.0, envs_per_worker=envs_per_worker)
    trainer = Trainer(config, progress=False, handle_signals=False)
    start = time.time()
    hung = rf"^{named}vecdqn-test/HangingCatch-v0\) did not answer within --worker-timeout 2.0 s"
    with pytest.raises(WorkerError, match=hung):
        trainer.run()
    assert time.time() - start < 30
    assert checkpoint.load(trainer.core.failure_checkpoint)["train_state"]["step"] > 0
    time.sleep(0.5)
    assert not [p for p in psutil.Process().children(recursive=True)
                if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


# gymnasium's AsyncVectorEnv reports a failing worker (and a close during a pending step) as
# coloured UserWarnings; here the failure is deliberate and asserted below, so they are not shown.
@pytest.mark.filterwarnings("ignore::UserWarning:gymnasium.vector.async_vector_env")
def test_non_finite_loss_stops_and_keeps_the_last_finite_checkpoint(tmp_path):
    config = catch_config(tmp_path, total_steps=1_000, run_name="run", checkpoint_every=200)

    def poison(trainer):  # after a vector step: the next update sees NaN weights
        if trainer.core.state.step >= 500:
            with torch.no_grad():
                next(trainer.core.learner.agent.online.parameters()).fill_(float("nan"))

    trainer = Trainer(config, progress=False, handle_signals=False, on_step=poison)
    with pytest.raises(NonFiniteError, match="learning-rate"):
        trainer.run()
    state = checkpoint.load(tmp_path / "run" / "checkpoints" / "latest.pt")
    assert 0 < state["train_state"]["step"] < 500 + config.num_envs
    for tensor in state["agent"]["online"].values():
        assert torch.isfinite(tensor).all()
    assert np.isfinite(trainer.core.state.step)
