"""PQN behind the training core (``--algo pqn``): the rollout's targets, the options it refuses,
exact resume, the run folder and evaluation of its checkpoints."""

import dataclasses
import importlib.util
import io
import signal
import subprocess
import sys
import threading
import tracemalloc
from pathlib import Path

import gymnasium as gym
import numpy as np
import psutil
import pytest
import torch
from helpers import TRAIN_ENV, TRAIN_SCRIPT, RaisingCatch, catch_config, forward_view_lambda_returns, signal_training
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from vecdqn import checkpoint, cli, preflight
from vecdqn.collector import NonFiniteError
from vecdqn.envs import WorkerError
from vecdqn.pqn import PQNLearner
from vecdqn.pqn.agent import PQNAgent
from vecdqn.signals import Interrupted
from vecdqn.train_state import TrainState
from vecdqn.trainer import Trainer

ROOT = Path(__file__).resolve().parents[1]
SHAPE = (4, 44, 44)


def pqn_config(tmp_path, **overrides):
    values = {"algo": "pqn", "num_envs": 4, "rollout_steps": 8, "epochs": 2, "minibatches": 4,
              "learning_rate": 5e-4, "epsilon_decay_steps": 400, "total_steps": 640, **overrides}
    return catch_config(tmp_path, **values)


def test_one_forward_pass_completes_a_row_and_ended_envs_bootstrap_from_their_final_obs(tmp_path):
    """Row t's ``next_q_max`` is max_a Q(s_{t+1}): from the next `act` for envs that go on, from the
    final observation (never the next episode's first) for envs whose episode ended."""
    config = pqn_config(tmp_path, num_envs=3)
    learner = PQNLearner(config, torch.device("cpu"), SHAPE, 3)
    learner.start()
    rng = np.random.default_rng(0)
    obs, final, reset = (rng.integers(0, 256, (3, *SHAPE), dtype=np.uint8) for _ in range(3))
    learner.act(obs, 0)
    terminated, truncated = np.array([False, True, False]), np.array([False, False, True])
    stored_next = np.where((terminated | truncated)[:, None, None, None], final, reset)
    learner.store(obs, np.array([0, 1, 2]), np.array([0.0, 1.0, -1.0], np.float32), stored_next, terminated,
                  truncated)
    learner.act(reset, 3)  # the observations the envs act in next: ended envs' first ones
    q_final = learner.agent.q_values(final).max(dim=1).values.numpy()
    q_reset = learner.agent.q_values(reset).max(dim=1).values.numpy()
    row = learner.rollout["next_q_max"][0]
    close = {"rel": 1e-4, "abs": 1e-6}  # a batch of another size rounds in other places
    assert row[0] == pytest.approx(q_reset[0], **close) and row[1] == pytest.approx(q_final[1], **close)
    assert row[2] == pytest.approx(q_final[2], **close) and row[2] != pytest.approx(q_reset[2], **close)


def test_learn_waits_for_a_full_rollout_then_counts_its_updates(tmp_path):
    config = pqn_config(tmp_path, num_envs=2, rollout_steps=2, minibatches=2)
    learner = PQNLearner(config, torch.device("cpu"), SHAPE, 3)
    learner.start()
    state, reports = TrainState(), []
    obs = np.zeros((2, *SHAPE), np.uint8)
    flags = np.zeros(2, bool)
    for t in range(2):
        learner.act(obs, t)
        learner.learn(state, 2, reports.append)
        assert not reports
        learner.store(obs, np.zeros(2, np.int64), np.ones(2, np.float32), obs, flags, flags)
    learner.learn(state, 2, reports.append)  # row 1's targets still wait for the next act
    assert not reports
    learner.act(obs, 4)
    learner.learn(state, 2, reports.append)
    assert len(reports) == 1 and state.updates == 2 * 2 and learner.t == 0
    assert set(learner.scalars(4)) >= {"charts/learning_rate", "pqn/lambda_return_mean", "pqn/update_seconds",
                                        "pqn/rollout_sps"}


@pytest.mark.parametrize(("args", "named"), [
    (["--algo", "pqn", "--buffer-size", "1000"], "--buffer-size only applies with --algo dqn or --algo rainbow"),
    (["--algo", "pqn", "--per-alpha", "0.6", "--batch-size", "64"], "--per-alpha, --batch-size only apply"),
    (["--rollout-steps", "8"], "--rollout-steps only applies with --algo pqn"),
    (["--algo", "pqn", "--actors", "1"], "--actors only applies with --algo dqn"),
    (["--algo", "pqn", "--num-envs", "3", "--rollout-steps", "5", "--minibatches", "4"],
     "--minibatches 4 does not divide a rollout"),
    (["--algo", "sarsa"], "--algo 'sarsa' is unknown"),
    (["--algo", "pqn", "--epochs", "101"], "--epochs 101 is more than 100 passes over each rollout; use 1 to 100"),
    # A preset belongs to one learner: its values for the other would be dropped unseen.
    (["--preset", "catch", "--algo", "pqn"], "--algo pqn does not fit --preset catch, a preset for --algo dqn"),
    (["--preset", "catch-pqn", "--algo", "dqn"], "use one of ['catch', 'labml', 'pong'], or no preset"),
    (["--algo", "rainbow", "--rollout-steps", "8"], "--rollout-steps only applies with --algo pqn"),
    (["--algo", "rainbow", "--actors", "1"], "--actors only applies with --algo dqn"),
    (["--algo", "rainbow", "--atoms", "0"], "--atoms 0 must be 1 (no distribution) to 1001"),
    (["--algo", "rainbow", "--v-min", "1", "--v-max", "1"], "--v-min 1 must be below --v-max 1"),
    (["--algo", "rainbow", "--layer-norm"], "--layer-norm is not offered with --algo rainbow"),
    (["--algo", "dqn", "--atoms", "11"], "--atoms only applies with --algo rainbow"),
])
def test_options_the_learner_would_not_use_are_refused(tmp_path, args, named, capsys):
    code = cli.main(["--env-id", "vecdqn/Catch-v0", "--screen-size", "44", "--log-dir", str(tmp_path), *args])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and named in err, err
    assert not any(tmp_path.iterdir())


def test_a_resumed_pqn_run_keeps_its_rollout_length(tmp_path, capsys):
    """The saved rollout fixes T: another --rollout-steps on --resume is one line and exit 2, with
    config.json untouched; --epochs may change."""
    Trainer(pqn_config(tmp_path, run_name="run", total_steps=200), progress=False, handle_signals=False).run()
    run = tmp_path / "run"
    before = (run / "config.json").read_text()
    assert cli.main(["--resume", str(run), "--rollout-steps", "16", "--total-steps", "400"]) == 2
    assert capsys.readouterr().err == ("train.py: error: --rollout-steps 16 differs from the run's 8; --rollout-steps "
                                       "cannot change on --resume (start a new run instead)\n")
    assert (run / "config.json").read_text() == before
    assert Trainer.from_checkpoint(run, {"epochs": 3, "total_steps": 400}, progress=False,
                                   handle_signals=False).run()["steps"] == 400


def test_a_resumed_pqn_run_continues_bit_for_bit(tmp_path):
    """Checkpoints fall inside a rollout here (every 200 agent steps, rollouts of 32): the rollout
    so far is saved with them, so 400 + 240 agent steps give the network of 640 straight."""
    straight = Trainer(pqn_config(tmp_path / "a", run_name="run"), progress=False, handle_signals=False)
    straight.run()
    Trainer(pqn_config(tmp_path / "b", run_name="run", total_steps=400, checkpoint_every=200), progress=False,
            handle_signals=False).run()
    resumed = Trainer.from_checkpoint(tmp_path / "b" / "run", {"total_steps": 640}, progress=False,
                                      handle_signals=False)
    summary = resumed.run()
    assert summary["steps"] == 640 and summary["updates"] == straight.core.state.updates > 0
    a, b = straight.core.learner.network.state_dict(), resumed.core.learner.network.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert straight.core.state.episode_history == resumed.core.state.episode_history


@pytest.mark.parametrize(("algo", "overlap"), [("dqn", False), ("pqn", False), ("pqn", True)])
def test_a_resumed_run_logs_the_losses_and_scalars_of_an_uninterrupted_one(tmp_path, algo, overlap):
    """Stopped at agent step 408 (a checkpoint with the envs, the replay with DQN) and resumed: the
    log at 416 holds the losses of the updates since the log at 312, all before the stop, and PQN's
    scalars of the rollout learned at 384; every later log matches the uninterrupted run too."""
    values = {"log_every": 104, "total_steps": 640}
    if algo == "pqn":
        config = pqn_config(tmp_path / "a", run_name="run", overlap_update=overlap, **values)
    else:
        config = catch_config(tmp_path / "a", run_name="run", num_envs=4, save_replay=True, **values)
    Trainer(config, progress=False, handle_signals=False).run()

    def stop_at_408(trainer):
        if trainer.core.state.step >= 408:
            trainer.core.stop.signum = signal.SIGINT

    stopped = dataclasses.replace(config, log_dir=str(tmp_path / "b"))
    with pytest.raises(Interrupted):
        Trainer(stopped, progress=False, handle_signals=False, on_step=stop_at_408).run()
    Trainer.from_checkpoint(tmp_path / "b" / "run", progress=False, handle_signals=False).run()
    tags = ["losses/td_loss", "losses/q_values"] + (["pqn/lambda_return_mean"] if algo == "pqn" else [])
    logged = []
    for run in (tmp_path / "a" / "run", tmp_path / "b" / "run"):
        acc = EventAccumulator(str(run), size_guidance={"scalars": 0})
        acc.Reload()
        logged.append({tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in tags})
    assert all(416 in [step for step, _ in points] for points in logged[0].values())
    assert logged[1] == logged[0]


@pytest.mark.parametrize("overlap", [False, True])
def test_the_preflight_counts_pqn_s_rollouts_and_its_checkpoint(tmp_path, overlap):
    """The memory check counts every rollout the learner allocates (two with --overlap-update: one
    learned from, one filling), and the disk check's checkpoint the rollout it carries."""
    config = pqn_config(tmp_path, run_name="run", rollout_steps=64, total_steps=320, overlap_update=overlap)
    tracemalloc.start()  # NumPy reports its arrays' buffers to it, in a domain of their own
    try:
        learner = PQNLearner(config, torch.device("cpu"), SHAPE, 3)
        arrays = tracemalloc.take_snapshot().filter_traces([tracemalloc.DomainFilter(True, np.lib.tracemalloc_domain)])
    finally:
        tracemalloc.stop()
    allocated = sum(stat.size for stat in arrays.statistics("filename"))
    assert allocated > 1.9e6 * (2 if overlap else 1)  # 64 x 4 stacks of 4 x 44 x 44 bytes: ~1.9 MB a rollout
    assert allocated <= preflight.replay_bytes(config) < 1.1 * allocated
    learner.close()
    summary = Trainer(config, progress=False, handle_signals=False).run()
    buffer = io.BytesIO()
    torch.save(checkpoint.load_training(summary["latest"])["agent"]["rollout"], buffer)
    carried = len(buffer.getvalue())
    one_row = dataclasses.replace(config, rollout_steps=1)
    counted = preflight.checkpoint_bytes(config, 3) - preflight.checkpoint_bytes(one_row, 3)
    assert carried * 63 / 64 <= counted < 1.1 * carried


def test_a_pqn_run_logs_its_own_tags_and_its_checkpoint_evaluates(tmp_path, capsys):
    config = pqn_config(tmp_path, run_name="run", log_every=160, eval_every=320, eval_episodes=2)
    summary = Trainer(config, progress=False, handle_signals=False).run()
    acc = EventAccumulator(str(tmp_path / "run"), size_guidance={"scalars": 0})
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert {"pqn/lambda_return_mean", "pqn/update_seconds", "pqn/rollout_sps", "losses/td_loss",
            "charts/epsilon", "charts/learning_rate", "charts/episodic_return"} <= tags
    assert not any(tag.startswith("replay/") or tag == "charts/beta" for tag in tags)
    saved = checkpoint.load_training(summary["checkpoint"])
    assert saved["config"]["algo"] == "pqn" and "rollout" in saved["agent"]
    policy = checkpoint.load_policy(summary["checkpoint"])
    assert any(isinstance(m, torch.nn.LayerNorm) for m in policy.network.modules())
    # scripts/plot.py reads it as any run: its evaluations at their agent steps, the learner named.
    spec = importlib.util.spec_from_file_location("plot_script", ROOT / "scripts" / "plot.py")
    plot = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(plot)
    capsys.readouterr()
    assert plot.main([str(tmp_path / "run"), "--markdown"]) == 0
    out = capsys.readouterr().out
    assert ", algo pqn, 1 run: seed 7 " in out.splitlines()[0]
    evaluations = {e.step: e.value for e in acc.Scalars("eval/return_mean")}
    assert sorted(evaluations) == [320, 640]
    for step, value in evaluations.items():
        shown = "0.0" if value == 0 else f"{value:+.1f}".replace("-", "\u2212")  # plot.py's signs
        assert any(line.startswith(f"| {step} | ") and f" | {shown} |" in line for line in out.splitlines()), out


def test_the_overlapped_update_is_a_function_of_the_seed_and_resumes_exactly(tmp_path):
    """--overlap-update: the update of each rollout on a second thread, the acting copy synced at
    fixed points. Two runs agree bit for bit, and so does one resumed from a mid-run checkpoint,
    also under a learning-rate schedule; it is a different run from the sequential one (the
    actions lag one rollout)."""
    runs, schedule = [], {"learning_rate_schedule": "0:1e-3,640:1e-5"}
    for name in ("a", "b"):
        trainer = Trainer(pqn_config(tmp_path / name, run_name="run", overlap_update=True, **schedule),
                          progress=False, handle_signals=False)
        trainer.run()
        runs.append(trainer.core.learner.network.state_dict())
    Trainer(pqn_config(tmp_path / "c", run_name="run", overlap_update=True, total_steps=400, checkpoint_every=200,
                       **schedule), progress=False, handle_signals=False).run()
    resumed = Trainer.from_checkpoint(tmp_path / "c" / "run", {"total_steps": 640}, progress=False,
                                      handle_signals=False)
    resumed.run()
    runs.append(resumed.core.learner.network.state_dict())
    sequential = Trainer(pqn_config(tmp_path / "d", run_name="run", **schedule), progress=False, handle_signals=False)
    sequential.run()
    for other in runs[1:]:
        assert all(torch.equal(runs[0][k], other[k]) for k in runs[0])
    plain = sequential.core.learner.network.state_dict()
    assert not all(torch.equal(runs[0][k], plain[k]) for k in plain)


@pytest.mark.parametrize("overlap", [False, True])
def test_each_rollouts_update_runs_at_its_own_learning_rate(tmp_path, monkeypatch, overlap):
    """Rollout k (32 agent steps: 8 vector steps of 4 envs) is learned from at agent step 32·(k+1),
    so all of its steps take the schedule's rate there. With --overlap-update each update here
    waits until the next rollout is full and the main thread waits for it: the rate the next
    rollout's learning sets must not reach the update still in flight."""
    import vecdqn.pqn.learner

    finishing, rates, update, finish = threading.Event(), [], PQNAgent.update, PQNLearner._finish

    def late_update(self, *args, **kwargs):
        if overlap:
            assert finishing.wait(timeout=60)
            finishing.clear()
        rates.append(self.learning_rate)
        return update(self, *args, **kwargs)

    def signalled_finish(self, *args, **kwargs):
        if self._pending is not None:
            finishing.set()
        finish(self, *args, **kwargs)

    monkeypatch.setattr(PQNAgent, "update", late_update)
    monkeypatch.setattr(vecdqn.pqn.learner.PQNLearner, "_finish", signalled_finish)
    config = pqn_config(tmp_path, overlap_update=overlap, total_steps=320, learning_rate_schedule="0:1e-3,320:1e-5")
    trainer = Trainer(config, progress=False, handle_signals=False)
    trainer.run()
    schedule = trainer.core.learner.schedules.learning_rate
    # 10 rollouts, the last one learned from at the run's end (agent step 320)
    assert len(rates) == 10 and rates == [schedule(32 * (k + 1)) for k in range(10)]


def test_closing_does_not_wait_for_the_update_in_flight(tmp_path):
    """A second Ctrl-C stops a run at once: closing an --overlap-update learner ends the update on
    the update thread before its next gradient step, rather than after its 100 × 16 of them."""
    config = pqn_config(tmp_path, num_envs=4, rollout_steps=8, epochs=100, minibatches=16, overlap_update=True)
    learner = PQNLearner(config, torch.device("cpu"), SHAPE, 3)
    learner.start()
    obs = np.random.default_rng(0).integers(0, 256, (4, *SHAPE), dtype=np.uint8)
    flags = np.zeros(4, bool)
    for t in range(8):
        learner.act(obs, 4 * t)
        learner.store(obs, np.zeros(4, np.int64), np.ones(4, np.float32), obs, flags, flags)
    learner.act(obs, 32)
    learner.learn(TrainState(step=32), 4, lambda metrics: None)
    assert learner.t == 0  # the rollout went to the update thread
    learner.close()
    steps = [int(state["step"]) for state in learner.agent.optimizer.state.values()]
    assert max(steps, default=0) < 100 * 16


@pytest.mark.parametrize("overlap", [False, True])
def test_bootstrapping_across_rollouts_over_a_whole_run(tmp_path, monkeypatch, overlap):
    """Episodes longer than a rollout (Catch: 9 agent steps; rollouts of 4): over a whole run,
    every step that did not end an episode bootstraps from the next observation of its env, also
    where that observation is the first row of the next rollout, and every rollout's returns are
    the Q(λ) forward view of its own rows. The network is held fixed (its updates are recorded, not
    taken), so every Q-value can be asked again afterwards."""
    learned = []

    def record(self, rollout, returns):
        learned.append(({name: array.copy() for name, array in rollout.items()}, returns.numpy().copy()))
        return {"td_loss": 0.0, "q_values": 0.0, "grad_norm": 0.0}

    monkeypatch.setattr(PQNLearner, "_update", record)
    config = pqn_config(tmp_path, num_envs=2, rollout_steps=4, minibatches=2, total_steps=200,
                        overlap_update=overlap)
    trainer = Trainer(config, progress=False, handle_signals=False)
    trainer.run()
    assert len(learned) >= 20
    agent = trainer.core.learner.agent
    rows = {name: np.concatenate([r[name] for r, _ in learned]) for name in learned[0][0]}
    ended = rows["terminated"] | rows["truncated"]
    steps, n_envs = rows["rewards"].shape
    asked = agent.q_values(rows["obs"].reshape(steps * n_envs, *SHAPE)).max(dim=1).values.numpy()
    asked = asked.reshape(steps, n_envs)
    going_on = ~ended[:-1]
    assert going_on.sum() > 100 and ended.sum() >= 10
    crossing = going_on & ((np.arange(steps - 1) % 4) == 3)[:, None]  # last row of a rollout, episode goes on
    assert crossing.sum() >= 10
    np.testing.assert_allclose(rows["next_q_max"][:-1][going_on], asked[1:][going_on], rtol=1e-4, atol=1e-6)
    # An ended step bootstraps from its final observation, not from the next episode's first.
    assert not np.allclose(rows["next_q_max"][:-1][ended[:-1]], asked[1:][ended[:-1]], rtol=1e-4, atol=1e-6)
    for rollout, returns in learned:
        fields = (torch.from_numpy(rollout[name]) for name in ("rewards", "terminated", "truncated", "next_q_max"))
        expected = forward_view_lambda_returns(*fields, config.gamma, config.q_lambda)
        np.testing.assert_allclose(returns, expected, rtol=1e-5, atol=1e-6)


def test_a_resume_without_env_state_never_pairs_rows_of_two_games(tmp_path, monkeypatch, capsys):
    """A kept step_*.pt holds the rollout so far (7 of 8 rows here) but not the envs' state: the
    resumed run starts new games, so the saved rows must end where the saved games stop. Over the
    rollouts learned after the resume, every row that did not end a game bootstraps from the next
    row's observation (the network is held fixed: updates are recorded, not taken), and the run
    says so in one line."""
    config = pqn_config(tmp_path, run_name="run", num_envs=2, rollout_steps=8, minibatches=2, total_steps=40,
                        checkpoint_every=14, keep_checkpoints=True)
    Trainer(config, progress=False, handle_signals=False).run()
    kept = tmp_path / "run" / "checkpoints" / "step_000000014.pt"
    saved = checkpoint.load_training(kept)
    assert saved.get("envs") is None and saved["agent"]["t"] == 7

    learned = []

    def record(self, rollout, returns):
        learned.append({name: array.copy() for name, array in rollout.items()})
        return {"td_loss": 0.0, "q_values": 0.0, "grad_norm": 0.0}

    monkeypatch.setattr(PQNLearner, "_update", record)
    capsys.readouterr()
    for later in ("latest.pt", "final.pt", "step_000000028.pt"):  # a resume would overwrite them: refused
        (kept.parent / later).unlink()
    resumed = Trainer.from_checkpoint(kept, {"total_steps": 50}, progress=False, handle_signals=False)
    resumed.run()
    out = capsys.readouterr()
    lines = [line for line in (out.out + out.err).splitlines() if "holds no env state" in line]
    assert lines == ["the checkpoint holds no env state, so new games start: the saved rollout's 7 rows end "
                     "there, each env's last one bootstrapping from its stored next value (as at a truncation)"]
    assert len(learned) == 3  # learned at agent steps 16, 32 and 48
    rows = {name: np.concatenate([r[name] for r in learned]) for name in learned[0]}
    np.testing.assert_array_equal(rows["obs"][:7], saved["agent"]["rollout"]["obs"][:7].numpy())
    ended = rows["terminated"] | rows["truncated"]
    assert ended[6].all()  # the saved games' last rows
    steps, n_envs = rows["rewards"].shape
    agent = resumed.core.learner.agent
    asked = agent.q_values(rows["obs"].reshape(steps * n_envs, *SHAPE)).max(dim=1).values.numpy()
    going_on = ~ended[:-1]
    np.testing.assert_allclose(rows["next_q_max"][:-1][going_on], asked.reshape(steps, n_envs)[1:][going_on],
                               rtol=1e-4, atol=1e-6)


# -- what a DQN run survives, a PQN run survives ---------------------------------------------------


@pytest.mark.parametrize("overlap", [False, True])
def test_a_non_finite_update_stops_the_run_before_its_weights_are_saved(tmp_path, monkeypatch, overlap):
    """The 16th rollout's returns are NaN, so its update turns the network to NaN. The run stops
    with NonFiniteError and the last checkpoint on disk is finite, also with --overlap-update.
    Rollouts are 32 agent steps (8 vector steps of 4 envs); a rollout is learned from at the
    vector step after its last (that step's first forward pass completes its targets), so the
    16th at agent step 512 -> 516. A checkpoint falls every 130 agent steps, at 520 among them:
    with --overlap-update the 16th update is still on the update thread then, and the checkpoint
    waits for it."""
    import vecdqn.pqn.learner

    correct, calls = vecdqn.pqn.learner.lambda_returns, []

    def diverging(*args):
        calls.append(1)
        returns = correct(*args)
        return returns.fill_(float("nan")) if len(calls) >= 16 else returns

    monkeypatch.setattr(vecdqn.pqn.learner, "lambda_returns", diverging)
    config = pqn_config(tmp_path, run_name="run", total_steps=1_024, checkpoint_every=130, overlap_update=overlap)
    trainer = Trainer(config, progress=False, handle_signals=False)
    with pytest.raises(NonFiniteError, match="learning-rate"):
        trainer.run()
    saved = checkpoint.load_training(tmp_path / "run" / "checkpoints" / "latest.pt")
    assert saved["train_state"]["step"] == 392  # the checkpoint before the 16th rollout's update
    for name in ("online", "acting") if overlap else ("online",):
        assert all(torch.isfinite(tensor).all() for tensor in saved["agent"][name].values()), name
    assert trainer.envs.closed


# gymnasium's AsyncVectorEnv reports the failing worker as a coloured UserWarning; the failure is
# deliberate here and asserted below.
@pytest.mark.filterwarnings("ignore::UserWarning:gymnasium.vector.async_vector_env")
def test_an_env_that_raises_stops_a_pqn_run_naming_the_env(tmp_path):
    gym.register("vecdqn-test/CrashingCatchPQN-v0", entry_point=RaisingCatch, kwargs={"raise_seed": 9})
    config = pqn_config(tmp_path, env_id="vecdqn-test/CrashingCatchPQN-v0", run_name="run", total_steps=2_000,
                        envs_per_worker=1,
                        overlap_update=True)
    trainer = Trainer(config, progress=False, handle_signals=False)
    message = (r"^env 2 \(vecdqn-test/CrashingCatchPQN-v0\) failed at agent step \d+: RuntimeError: emulator "
               r"exploded on step 50$")
    with pytest.raises(WorkerError, match=message):
        trainer.run()
    assert trainer.envs.closed
    assert checkpoint.load(trainer.core.failure_checkpoint)["train_state"]["step"] > 0
    assert not [p for p in psutil.Process().children(recursive=True)
                if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


@pytest.mark.parametrize("signum, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signalled_pqn_run_checkpoints_exits_and_resumes(tmp_path, signum, code):
    """scripts/train.py --preset catch-pqn --overlap-update, signalled while it trains: exit code
    128 + the signal, a checkpoint, no worker left; ``--resume`` then runs it to its end."""
    returncode, err, children = signal_training(
        ["--preset", "catch-pqn", "--overlap-update", "--log-dir", str(tmp_path), "--run-name", "run",
         "--total-steps", "1000000", "--envs-per-worker", "1"],
        signum, workers=8, settle=4)  # let it learn from a few rollouts
    assert returncode == code, err[-2000:]
    latest = tmp_path / "run" / "checkpoints" / "latest.pt"
    step = checkpoint.load(latest)["train_state"]["step"]
    assert step > 0 and str(latest) in err and "--resume" in err
    _, alive = psutil.wait_procs(children, timeout=10)
    assert not alive, f"worker processes left behind: {alive}"

    done = subprocess.run([sys.executable, str(TRAIN_SCRIPT), "--resume", str(tmp_path / "run"), "--total-steps",
                           str(step + 256)], capture_output=True, text=True, timeout=120, env=TRAIN_ENV)
    assert done.returncode == 0, done.stderr[-2000:]
    assert checkpoint.load(latest)["train_state"]["step"] == step + 256


@pytest.mark.parametrize("overlap", [False, True])
def test_a_run_learns_from_its_last_rollout_before_its_final_checkpoint(tmp_path, overlap):
    """640 agent steps are 20 rollouts of 32 (8 vector steps of 4 envs): 20 x 2 epochs x 4
    minibatches = 160 updates. The last rollout used to be collected and never learned from (152)."""
    trainer = Trainer(pqn_config(tmp_path, run_name="run", overlap_update=overlap), progress=False,
                      handle_signals=False)
    assert trainer.run()["updates"] == 160
    saved = checkpoint.load(tmp_path / "run" / "checkpoints" / "final.pt")
    assert saved["train_state"]["updates"] == 160 and saved["agent"]["t"] == 0


def test_a_dqn_run_has_nothing_left_to_learn_at_its_end(tmp_path):
    """The run's end asks every learner for what is due with no agent step to come: DQN's updates
    come with their agent steps, so it has none (its runs are as before)."""
    seen = []
    trainer = Trainer(catch_config(tmp_path, run_name="run", total_steps=400), progress=False, handle_signals=False,
                      on_step=lambda t: seen.append(t.core.state.updates))
    assert trainer.run()["updates"] == seen[-1] > 0
