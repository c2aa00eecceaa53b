"""PQN behind the training core (``--algo pqn``): the rollout's targets, the options it refuses,
exact resume, the run folder and evaluation of its checkpoints."""

import numpy as np
import pytest
import torch
from helpers import catch_config, forward_view_lambda_returns
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from vecdqn import checkpoint, cli
from vecdqn.pqn import PQNLearner
from vecdqn.train_state import TrainState
from vecdqn.trainer import Trainer

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
    (["--algo", "pqn", "--buffer-size", "1000"], "--buffer-size only applies with --algo dqn"),
    (["--algo", "pqn", "--per-alpha", "0.6", "--batch-size", "64"], "--per-alpha, --batch-size only apply"),
    (["--rollout-steps", "8"], "--rollout-steps only applies with --algo pqn"),
    (["--algo", "pqn", "--actors", "1"], "--actors only applies with --algo dqn"),
    (["--algo", "pqn", "--num-envs", "3", "--rollout-steps", "5", "--minibatches", "4"],
     "--minibatches 4 does not divide a rollout"),
    (["--algo", "sarsa"], "--algo 'sarsa' is unknown"),
])
def test_options_the_learner_would_not_use_are_refused(tmp_path, args, named, capsys):
    code = cli.main(["--preset", "catch", "--log-dir", str(tmp_path), *args])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and named in err, err
    assert not any(tmp_path.iterdir())


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


def test_a_pqn_run_logs_its_own_tags_and_its_checkpoint_evaluates(tmp_path, capsys):
    config = pqn_config(tmp_path, run_name="run", log_every=160)
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


def test_the_overlapped_update_is_a_function_of_the_seed_and_resumes_exactly(tmp_path):
    """--overlap-update: the update of each rollout on a second thread, the acting copy synced at
    fixed points. Two runs agree bit for bit, and so does one resumed from a mid-run checkpoint;
    it is a different run from the sequential one (the actions lag one rollout)."""
    runs = []
    for name in ("a", "b"):
        trainer = Trainer(pqn_config(tmp_path / name, run_name="run", overlap_update=True), progress=False,
                          handle_signals=False)
        trainer.run()
        runs.append(trainer.core.learner.network.state_dict())
    Trainer(pqn_config(tmp_path / "c", run_name="run", overlap_update=True, total_steps=400, checkpoint_every=200),
            progress=False, handle_signals=False).run()
    resumed = Trainer.from_checkpoint(tmp_path / "c" / "run", {"total_steps": 640}, progress=False,
                                      handle_signals=False)
    resumed.run()
    runs.append(resumed.core.learner.network.state_dict())
    sequential = Trainer(pqn_config(tmp_path / "d", run_name="run"), progress=False, handle_signals=False)
    sequential.run()
    for other in runs[1:]:
        assert all(torch.equal(runs[0][k], other[k]) for k in runs[0])
    plain = sequential.core.learner.network.state_dict()
    assert not all(torch.equal(runs[0][k], plain[k]) for k in plain)


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
