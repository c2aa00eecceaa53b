"""``--actors N``: Ape-X actors on Ray feeding the learner's one prioritized replay.

The exactness test runs the actors in this process (no Ray); the others start one local Ray
instance for the module (about 10 s on 2 cores) and run the real learner on Catch.
"""

from __future__ import annotations

import contextlib
import os
import re
import resource
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import psutil
import pytest
from helpers import ReplayOnly, catch_config
from replay_streams import reference_transitions

from vecdqn import checkpoint, cli, preflight
from vecdqn.distributed.actor import Actor, apex_epsilons
from vecdqn.distributed.blocks import BlockIngest
from vecdqn.replay import PrioritizedReplayBuffer
from vecdqn.trainer import Trainer

TRAIN = str(Path(__file__).resolve().parents[1] / "scripts" / "train.py")


def test_apex_epsilons_follow_horgan_et_al():
    assert apex_epsilons(1) == [0.4]
    eps = apex_epsilons(8, 0.4, 7.0)
    assert eps[0] == pytest.approx(0.4) and eps[-1] == pytest.approx(0.4 ** 8)
    assert all(a > b for a, b in zip(eps, eps[1:]))


def record(actor: Actor, log: list) -> None:
    """Record every transition the actor's envs produce: (obs, action, reward, next_obs with the
    ended episode's final obs, terminated, truncated), per vector step."""
    envs, step_async, step_wait = actor.envs, actor.envs.step_async, actor.envs.step_wait

    def async_(actions, step):
        log.append([actor.obs.copy(), np.array(actions)])
        step_async(actions, step)

    def wait(step):
        next_obs, rewards, terminated, truncated, infos = step_wait(step)
        stored = next_obs.copy()
        for i in np.flatnonzero(terminated | truncated):
            stored[i] = infos["final_obs"][i]
        log[-1] += [np.sign(rewards), stored, terminated.copy(), truncated.copy()]
        return next_obs, rewards, terminated, truncated, infos

    envs.step_async, envs.step_wait = async_, wait


def env_sequences(buffer: PrioritizedReplayBuffer, env: int) -> list:
    """The sampleable transitions of one env's ring, oldest first (the ring does not wrap here)."""
    ring = buffer.capacity // buffer.n_envs
    slots = env * ring + np.arange(ring)
    slots = slots[buffer.priorities(slots) > 0]
    got = buffer.transitions(slots)
    return [(got.obs[i], got.actions[i], got.rewards[i], got.next_obs[i], got.discounts[i]) for i in range(len(slots))]


def test_blocks_reach_the_replay_exactly(tmp_path):
    """Two actors x 2 envs, actor 1 restarted midway: every transition in the replay has the
    stacks, action, n-step return and discount of what the actor's envs produced, with the
    restarted stream cut by a truncation; the actors' priorities replace the max priority."""
    c = catch_config(tmp_path, actors=2, actor_envs=2, n_step=3, gamma=0.9)
    shape = (4, c.screen_size, c.screen_size)
    buffer = PrioritizedReplayBuffer(4_000, shape, n_step=3, gamma=0.9, seed=0)
    ingest = BlockIngest(ReplayOnly(buffer), actors=2, actor_envs=2)
    logs = {0: [[]], 1: [[]]}  # actor -> one log per process
    actors = [Actor(i, c, eps, 100 * i, 3, shape) for i, eps in enumerate(apex_epsilons(2))]
    try:
        for a in actors:
            record(a, logs[a.actor_id][-1])
        for round_ in range(4):
            if round_ == 2:  # a new process for actor 1: fresh games, a first block again
                actors[1].close()
                actors[1] = Actor(1, c, 0.5, 999, 3, shape)
                logs[1].append([])
                record(actors[1], logs[1][-1])
            for a in actors:
                assert ingest.ingest(a.collect(10))
    finally:
        for a in actors:
            a.close()
    for a in (0, 1):
        ingest.end_stream(a)  # the held steps, as truncations
    for a, processes in logs.items():
        for k in range(2):
            expected = []
            for log in processes:
                steps = [tuple(x[k:k + 1] for x in step) for step in log]
                steps[-1] = (*steps[-1][:5], np.ones(1, dtype=bool))  # each process's stream ends truncated
                ref = reference_transitions(steps, 3, 0.9)
                expected += [ref[(0, t)] for t in range(len(steps))]
            got = env_sequences(buffer, a * 2 + k)
            assert len(got) == len(expected) == sum(len(log) for log in processes)
            for (obs, action, ret, next_obs, disc), (e_obs, e_action, e_ret, e_next, _, e_disc) in zip(got, expected):
                np.testing.assert_array_equal(obs, e_obs)
                np.testing.assert_array_equal(next_obs, e_next)
                assert action == e_action and ret == pytest.approx(e_ret, abs=1e-5)
                assert disc == pytest.approx(e_disc, rel=1e-6)
    priorities = buffer.priorities(np.arange(buffer.capacity))
    assert len(np.unique(priorities[priorities > 0])) > 10  # |δ| + ε from the actors, not one max


def test_a_block_split_in_two_files_as_the_whole_block(tmp_path):
    """`Block.split` (the learner cuts a block at an evaluation, a checkpoint or the end of the
    run): its two parts, filed one after the other, leave the replay exactly as the whole block
    does, games and resets on either side of the cut included (Catch games last 9 steps)."""
    c = catch_config(tmp_path, actors=1, actor_envs=2, n_step=3, gamma=0.9)
    shape = (4, c.screen_size, c.screen_size)
    actor = Actor(0, c, 0.5, 3, 3, shape)
    try:
        blocks = [actor.collect(12) for _ in range(3)]  # episode ends at rows 8; 5; 2 (and 11)
    finally:
        actor.close()
    whole, parts = (PrioritizedReplayBuffer(2_000, shape, n_step=3, gamma=0.9, seed=0) for _ in range(2))
    whole_ingest, parts_ingest = BlockIngest(ReplayOnly(whole), 1, 2), BlockIngest(ReplayOnly(parts), 1, 2)
    for block in blocks:
        assert whole_ingest.ingest(block)
        head, rest = block.split(5)
        assert head.agent_steps == 10 and rest.agent_steps == 14 and rest.first_obs is None
        assert head.episodes + [(t + 5, *game) for t, *game in rest.episodes] == block.episodes
        assert parts_ingest.ingest(head) and parts_ingest.ingest(rest)
    assert sum(len(b.episodes) for b in blocks) >= 6
    np.testing.assert_array_equal(whole.slots_written, parts.slots_written)
    np.testing.assert_array_equal(whole.frames, parts.frames)
    every = np.arange(whole.capacity)
    np.testing.assert_array_equal(whole.priorities(every), parts.priorities(every))


def test_the_block_collector_tells_the_learner_its_games_are_new_before_the_first_block():
    """The seam (`vecdqn.learners`): ``new_games`` whenever a collector starts new games; the
    Ape-X actors always do, so before the first weights go out."""
    from types import SimpleNamespace

    from vecdqn.distributed.learner import BlockCollector

    calls = []
    core = SimpleNamespace(state=SimpleNamespace(updates=0), new_games=lambda: calls.append("new_games"),
                           policy_weights=lambda: {})
    pool = SimpleNamespace(publish=lambda at, weights: calls.append("publish"), fill=lambda: calls.append("fill"))
    BlockCollector(core, pool, ingest=None).start()
    assert calls == ["new_games", "publish", "fill"]


def test_missing_ray_exits_2_with_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "ray", None)  # what `import ray` does without the package
    code = cli.main(["--preset", "catch", "--actors", "2", "--log-dir", str(tmp_path)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and 'pip install -e ".[ray]"' in err
    assert not any(tmp_path.iterdir())  # nothing started


@pytest.mark.parametrize("args", [["--actors", "-1"], ["--actors", "2", "--save-replay"],
                                  ["--actors", "2", "--actor-envs", "0"], ["--actors", "2", "--apex-epsilon", "1.5"]])
def test_bad_distributed_options_exit_2(tmp_path, args, capsys):
    assert cli.main(["--preset", "catch", "--log-dir", str(tmp_path), *args]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


@pytest.mark.parametrize("args, named", [
    (["--actors", "2", "--epsilon-schedule", "0:0.9"], "--epsilon-schedule"),
    (["--actors", "2", "--epsilon-start", "0.5", "--epsilon-decay-steps", "10"],
     "--epsilon-start, --epsilon-decay-steps"),
    (["--actors", "2", "--num-envs", "3200"], "--num-envs"),
    (["--actor-envs", "3"], "--actor-envs"),
    (["--apex-epsilon", "0.3", "--ray-address", "auto"], "--ray-address, --apex-epsilon"),
])
def test_options_a_run_would_not_use_are_refused(tmp_path, args, named, capsys):
    """Finding 7: the ε options and --num-envs with --actors (Ape-X actors play their own fixed
    ε and envs), and the actor options without it: one line naming them, exit 2, nothing started."""
    assert cli.main(["--preset", "catch", "--log-dir", str(tmp_path), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"train.py: error: {named} ")
    assert not any(tmp_path.iterdir())


def test_options_a_resumed_run_would_not_use_are_refused(tmp_path, capsys):
    Trainer(catch_config(tmp_path, total_steps=40, learning_starts=32, run_name="run"), progress=False,
            handle_signals=False).run()
    code = cli.main(["--resume", str(tmp_path / "run"), "--actors", "1", "--epsilon-end", "0.2"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert err.startswith("train.py: error: --epsilon-end cannot be used with --actors 1")


def test_preflight_counts_the_actors_env_workers(tmp_path, monkeypatch):
    """Finding 8: --actors A --actor-envs K starts A·K env workers (--num-envs is not used)."""
    monkeypatch.setattr(preflight, "available_memory_bytes", lambda: 64 * 2**30)
    config = catch_config(tmp_path, buffer_size=40_000, num_envs=2, actors=400, actor_envs=8)
    with pytest.raises(preflight.ConfigError, match=r"^--actors 400 x --actor-envs 8 needs about 12864 open files"):
        with monkeypatch.context() as m:
            m.setattr(resource, "getrlimit", lambda which: (4_096, 4_096))
            preflight.preflight(config)
    with pytest.raises(preflight.ConfigError, match=r"--actors 400 x --actor-envs 8 about 156.3 GiB for 3200 env"):
        preflight.preflight(config)
    preflight.preflight(catch_config(tmp_path, buffer_size=40_000, num_envs=2, actors=4, actor_envs=8))


@contextlib.contextmanager
def closed_port() -> Iterator[int]:
    """A local TCP port that refuses connections (bound, not listening) while the block lasts."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


def test_a_ray_address_where_nothing_answers_is_refused_naming_where_it_came_from(tmp_path, monkeypatch):
    """The address check of the preflight: ``--ray-address``, or ``RAY_ADDRESS`` replacing an empty
    or ``auto`` one as in ``ray.init``; ``auto`` is the address ``ray start --head`` recorded."""
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))
    with closed_port() as port:
        address = f"127.0.0.1:{port}"
        with pytest.raises(preflight.ConfigError, match=rf"^--ray-address {address}: no Ray instance answers at "
                           rf"{address} \(Connection refused\); start the cluster \('ray start --head'\)"):
            preflight.check_ray_address(catch_config(tmp_path, actors=1, ray_address=address))
        monkeypatch.setenv("RAY_ADDRESS", address)
        assert preflight.ray_address("") == preflight.ray_address("auto") == (address, "RAY_ADDRESS")
        assert preflight.ray_address("10.0.0.5:6379") == ("10.0.0.5:6379", "--ray-address")  # the option wins
        monkeypatch.setenv("RAY_ADDRESS", "auto")
        preflight.check_ray_address(catch_config(tmp_path, actors=1))  # nothing recorded: Ray looks for one itself
        record = tmp_path / "ray" / "ray_current_cluster"
        record.parent.mkdir()
        record.write_text(address + "\n")
        with pytest.raises(preflight.ConfigError, match=rf"^RAY_ADDRESS=auto: no Ray instance answers at {address} "
                           rf"\(the instance recorded in {re.escape(str(record))}\) \(Connection refused\); "
                           "unset RAY_ADDRESS"):
            preflight.check_ray_address(catch_config(tmp_path, actors=1))
    monkeypatch.setenv("RAY_ADDRESS", "head-node")
    with pytest.raises(preflight.ConfigError, match=r"^RAY_ADDRESS=head-node: 'head-node' is not host:port; unset"):
        preflight.check_ray_address(catch_config(tmp_path, actors=1))


def test_a_ray_instance_that_refuses_the_run_is_one_line_and_leaves_no_run_folder(tmp_path, monkeypatch):
    """What the preflight cannot see (``auto`` with no instance recorded, a port that is not
    Ray's): Ray's ConnectionError becomes one line naming the address, and the run folder is
    claimed only once Ray is up."""
    ray = pytest.importorskip("ray")
    from vecdqn.distributed.learner import DistributedTrainer

    def refuse(**kwargs):
        raise ConnectionError("Could not find any running Ray instance. Please specify the one to connect to.")

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path / "no-ray"))  # no instance recorded
    monkeypatch.setattr(ray, "init", refuse)
    trainer = DistributedTrainer(catch_config(tmp_path, actors=1, ray_address="auto", run_name="run"),
                                 progress=False, handle_signals=False)
    with pytest.raises(preflight.ConfigError, match=r"^--ray-address auto: Could not find any running Ray instance\. "
                       r"Please specify the one to connect to\.; start that Ray instance"):
        trainer.run()
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("given", ["RAY_ADDRESS", "--ray-address"])
def test_a_ray_instance_that_refuses_the_token_is_named_in_one_line_without_ray_s_warnings(
        monkeypatch, capfd, given):
    """An instance with token authentication, joined without its token: Ray's core retries for
    ~20 s, writing a warning a second to file descriptor 2, then raises ConnectionError. The run
    says it is the token, and how to give it; Ray's lines stay off the terminal."""
    ray = pytest.importorskip("ray")
    from vecdqn.distributed.pool import start_ray

    def refuse(**kwargs):
        for _ in range(3):
            os.write(2, b"[2026-12-04 18:36:19,299 W 21039 21039] gcs_client.cc:210: Failed to get cluster ID from "
                        b"GCS server: Unauthenticated: RPC error: InvalidAuthToken: Authentication token is missing "
                        b"or incorrect\n")
        raise ConnectionError("Failed to connect to Ray cluster at 127.0.0.1:6391")

    monkeypatch.setattr(ray, "init", refuse)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    if given == "RAY_ADDRESS":
        monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:6391")
        address, said, instead = "", "RAY_ADDRESS=127.0.0.1:6391", "unset RAY_ADDRESS"
    else:
        monkeypatch.delenv("RAY_ADDRESS", raising=False)
        address, said, instead = "127.0.0.1:6391", "--ray-address 127.0.0.1:6391", "leave --ray-address out"
    with pytest.raises(preflight.ConfigError) as err:
        start_ray(address, 1)
    assert str(err.value) == (
        f"{said}: the Ray instance there runs with token authentication and refused this process's token (missing "
        "or not its own); give its token as RAY_AUTH_TOKEN, in ~/.ray/auth_token or in the file RAY_AUTH_TOKEN_PATH "
        f"names, or {instead} to let the run start its own")
    out, stderr = capfd.readouterr()
    assert "InvalidAuthToken" not in out + stderr


def test_what_ray_writes_while_it_joins_reaches_stderr_when_it_joins(monkeypatch, capfd):
    ray = pytest.importorskip("ray")
    from vecdqn.distributed.pool import start_ray

    monkeypatch.setattr(ray, "init", lambda **kwargs: os.write(2, b"a warning of Ray's\n"))
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert start_ray("127.0.0.1:6391", 1)
    assert capfd.readouterr().err == "a warning of Ray's\n"


def test_ray_address_where_nothing_answers_exits_2_in_one_line_leaving_no_process(tmp_path):
    """Finding 2: RAY_ADDRESS exported (as in a cluster user's shell) to a Ray instance that is not
    there, and --actors without --ray-address: one line naming RAY_ADDRESS and what to do, exit 2,
    before any Ray process or env worker starts (it was Ray's ConnectionError traceback, exit 1)."""
    pytest.importorskip("ray")
    with closed_port() as port:
        start = time.monotonic()
        command = [sys.executable, TRAIN, "--preset", "catch", "--actors", "1", "--log-dir", str(tmp_path)]
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True, env={**os.environ, "RAY_ADDRESS": f"127.0.0.1:{port}"})
        _, err = proc.communicate(timeout=120)
    assert proc.returncode == 2, err[-3000:]
    assert time.monotonic() - start < 60  # the interpreter and torch's import; the refused connection is at once
    assert err.startswith(f"train.py: error: RAY_ADDRESS=127.0.0.1:{port}: no Ray instance answers at ") and \
        err.count("\n") == 1 and "unset RAY_ADDRESS" in err, err
    assert not any(tmp_path.iterdir()) and not session_processes(proc.pid)


# -- with Ray ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def local_ray():
    """One local Ray instance for the module, whose workers also know the test envs (helpers)."""
    ray = pytest.importorskip("ray")
    tests = Path(__file__).resolve().parent
    path = os.pathsep.join(p for p in (str(tests.parent), str(tests), os.environ.get("PYTHONPATH", "")) if p)
    ray.init(_node_ip_address="127.0.0.1", include_dashboard=False, num_cpus=4, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": path}, "worker_process_setup_hook": "helpers.register_test_envs"})
    yield ray
    ray.shutdown()


def tags(run_dir: str) -> dict[str, list[float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(run_dir, size_guidance={"scalars": 0})
    events.Reload()
    return {tag: [e.value for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def distributed(tmp_path: Path, **overrides):
    from vecdqn.distributed.learner import DistributedTrainer

    values = dict(actors=2, actor_envs=2, total_steps=480, learning_starts=100, weight_sync_every=4,
                  actor_block_steps=8, checkpoint_every=0, log_every=64)
    config = catch_config(tmp_path, **{**values, **overrides})
    return DistributedTrainer(config, progress=False, handle_signals=False)


def test_two_actors_feed_one_replay(tmp_path, local_ray):
    trainer = distributed(tmp_path)
    summary = trainer.run()
    assert summary["steps"] == 480 and summary["updates"] > 50 and summary["actor_restarts"] == 0
    written = trainer.core.learner.buffer.slots_written
    assert written.shape == (4,) and (written > 16).all()  # every env of both actors (2+ blocks each)
    assert all(v > 0 for v in trainer.pool.versions)  # both played with published weights
    scalars = tags(summary["run_dir"])
    assert scalars["charts/episodic_return/actor_0"] and scalars["charts/episodic_return/actor_1"]
    assert len(scalars["charts/episodic_return"]) == summary["episodes"]
    assert scalars["distributed/weights_version"][-1] > 0


@pytest.mark.slow  # over 15 s: kept out of CI's 10 minutes (python -m pytest -m slow)
def test_killed_actor_is_restarted_and_the_run_finishes(tmp_path, local_ray):
    trainer = distributed(tmp_path, total_steps=1_200)
    result = {}
    thread = threading.Thread(target=lambda: result.update(trainer.run()), daemon=True)
    thread.start()
    deadline = time.monotonic() + 180  # generous: a shared machine can be slow to start actors
    while (trainer.pool is None or trainer.core.state.step < 200) and time.monotonic() < deadline and thread.is_alive():
        time.sleep(0.1)
    os.kill(trainer.pool.pids()[1], signal.SIGKILL)
    thread.join(timeout=600)
    if thread.is_alive():  # stop it before failing: a run left going would outlive the Ray fixture
        trainer.core.stop.signum = signal.SIGTERM
        thread.join(timeout=120)
        pytest.fail("the run did not finish within 10 minutes of the actor's restart")
    assert result["steps"] == 1_200 and result["actor_restarts"] == 1
    assert tags(result["run_dir"])["distributed/actor_restarts"][-1] == 1


def test_an_actor_whose_env_raises_stops_the_run_in_one_line(tmp_path, local_ray):
    """Finding 3, from the command line: a checkpoint, then exit code 1 and on stderr one line
    naming the actor, its env, the env id and the exception, without colour codes (it was Ray's
    15-line remote traceback in colour); the actor's and the env worker's tracebacks are in the
    run folder's error.log. The run joins the module's Ray instance (RAY_ADDRESS), its actors
    registering the test envs as the fixture's workers do."""
    from helpers import RAISING_CATCH_ID

    tests = Path(__file__).resolve().parent
    path = os.pathsep.join((str(tests.parent), str(tests)))
    script = tmp_path / "train_raising.py"
    script.write_text(textwrap.dedent(f"""
        import sys

        import ray
        from helpers import RAISING_CATCH_ID, register_test_envs
        from vecdqn.cli import main

        register_test_envs()  # actor 1's env 1 is seeded 7 + 1 x 2 + 1 = 10: it raises on its 50th step
        init = ray.init
        ray.init = lambda **kwargs: init(**kwargs, runtime_env={{
            "env_vars": {{"PYTHONPATH": {path!r}}}, "worker_process_setup_hook": "helpers.register_test_envs"}})
        sys.exit(main(["--preset", "catch", "--env-id", RAISING_CATCH_ID, "--actors", "2", "--actor-envs", "2",
                       "--seed", "7", "--buffer-size", "2000", "--learning-starts", "100", "--hidden-size", "32",
                       "--actor-block-steps", "8", "--weight-sync-every", "4", "--total-steps", "4000",
                       "--log-dir", {str(tmp_path)!r}, "--run-name", "run"]))
    """))
    address = local_ray.get_runtime_context().gcs_address
    failed = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                            env={**os.environ, "PYTHONPATH": path, "RAY_ADDRESS": address})
    run = tmp_path / "run"
    assert failed.returncode == 1, failed.stderr[-3000:]
    assert "\x1b" not in failed.stderr and "Traceback" not in failed.stderr, failed.stderr[-3000:]
    lines = [line.strip() for line in failed.stderr.replace("\r", "\n").splitlines() if line.strip()]
    assert re.fullmatch(
        rf"train\.py: error: actor 1: env 1 \({re.escape(RAISING_CATCH_ID)}\) failed at agent step \d+: "
        rf"RuntimeError: emulator exploded on step 50; last checkpoint: "
        rf"{re.escape(str(run / 'checkpoints' / 'latest.pt'))}; traceback in {re.escape(str(run / 'error.log'))}",
        lines[-1]), lines[-3:]
    assert sum("emulator exploded" in line for line in lines) == 1, lines
    log = (run / "error.log").read_text()
    assert "ray::Actor.collect()" in log  # the actor's traceback, then its env worker's:
    assert re.search(r'helpers\.py", line \d+, in step\n(?:.*\n){1,3}RuntimeError: emulator exploded on step 50',
                     log), log
    assert 0 < checkpoint.load(run / "checkpoints" / "latest.pt")["train_state"]["step"] < 4_000


def scalar_steps(run_dir: str, tag: str) -> list[int]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(run_dir, size_guidance={"scalars": 0})
    events.Reload()
    return [e.step for e in events.Scalars(tag)]


def test_evaluations_fall_on_their_steps_and_the_run_ends_at_total_steps(tmp_path, local_ray):
    """The run that died at its first evaluation; and --total-steps 750 is exact although a block
    holds 16 agent steps (the block that crosses a boundary is split there)."""
    trainer = distributed(tmp_path, total_steps=750, eval_every=250, eval_episodes=2)
    summary = trainer.run()
    assert summary["steps"] == 750
    assert checkpoint.load(summary["checkpoint"])["train_state"]["step"] == 750
    assert scalar_steps(summary["run_dir"], "eval/return_mean") == [250, 500, 750]


def test_the_device_copy_of_the_frames_follows_the_actors_blocks(tmp_path, local_ray):
    """Finding 1: with --replay-device every block reaches the device copy of the frames that
    batches are gathered from (it stayed all zeros)."""
    trainer = distributed(tmp_path, replay_device="cpu")
    assert trainer.run()["updates"] > 50
    frames = trainer.core.learner.pipeline.frames.frames.numpy()
    assert trainer.core.learner.buffer.frames.any() and np.array_equal(frames, trainer.core.learner.buffer.frames)


def test_prefetch_never_adds_to_the_replay_while_a_draw_runs(tmp_path, local_ray, monkeypatch):
    """Finding 2: with --prefetch the blocks are stored only once the background draw is done."""
    from vecdqn.dqn.pipeline import LearnerPipeline

    drawing, counts = threading.Event(), {"draws": 0, "adds": 0, "overlaps": 0}
    real_draw, real_add = LearnerPipeline.draw, PrioritizedReplayBuffer.add

    def slow_draw(self, beta):
        drawing.set()
        try:
            time.sleep(0.02)  # as long as a batch-512 draw: an add beside it cannot slip through
            return real_draw(self, beta)
        finally:
            counts["draws"] += 1
            drawing.clear()

    def watched_add(self, *args, **kwargs):
        counts["adds"] += 1
        counts["overlaps"] += drawing.is_set()
        return real_add(self, *args, **kwargs)

    monkeypatch.setattr(LearnerPipeline, "draw", slow_draw)
    monkeypatch.setattr(PrioritizedReplayBuffer, "add", watched_add)
    trainer = distributed(tmp_path, prefetch=True)
    trainer.run()
    assert trainer.core.learner.pipeline.prefetch and counts["draws"] > 50 and counts["adds"] > 100
    assert counts["overlaps"] == 0


@pytest.mark.parametrize("actor_envs, overrides", [(1, {"save_replay": False}), (2, {"save_replay": False}), (1, {})],
                         ids=["other-layout", "same-layout", "save-replay-inherited"])
def test_resume_with_actors_refills_a_new_replay(tmp_path, local_ray, actor_envs, overrides):
    """Finding 6: a single-process run saved with --save-replay (2 envs), resumed with --actors: a
    new replay refills for --learning-starts agent steps, whatever the actors' layout (the saved
    one held other games' open n-step windows, and with another env count could not be used at
    all); the saved --save-replay, which --actors refuses, is dropped rather than refused."""
    from vecdqn.distributed.learner import DistributedTrainer

    Trainer(catch_config(tmp_path, total_steps=300, save_replay=True, run_name="run"), progress=False,
            handle_signals=False).run()
    overrides = {"actors": 1, "actor_envs": actor_envs, "total_steps": 500, **overrides}
    trainer = DistributedTrainer.from_checkpoint(tmp_path / "run", overrides, progress=False, handle_signals=False)
    summary = trainer.run()
    assert summary["steps"] == 500 and summary["updates"] > trainer.core.state.update_offset
    assert trainer.core.state.learn_from == 300 + 100 and trainer.core.learner.buffer.n_envs == actor_envs
    assert not trainer.config.save_replay


def test_ray_address_joins_the_running_instance(tmp_path, local_ray):
    """Finding 5: with RAY_ADDRESS exported (as on a Ray cluster's nodes) the run joins that
    instance instead of passing it a CPU count (which Ray refuses)."""
    address = local_ray.get_runtime_context().gcs_address
    result = subprocess.run(
        [sys.executable, TRAIN, "--preset", "catch", "--actors", "1", "--total-steps", "256", "--learning-starts",
         "128", "--log-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=300, env={**os.environ, "RAY_ADDRESS": address})
    assert result.returncode == 0, result.stderr[-3000:]
    assert "done: 256 agent steps" in result.stdout


def test_signals_held_while_ray_starts_only_stop_the_run_after():
    """Two Ctrl-C's while Ray starts must not cut the start halfway: both are recorded, the run
    stops after it; outside ``held`` a second one stops at once."""
    from vecdqn.signals import StopSignals

    with StopSignals() as stop:
        with stop.held():
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)
        assert stop.signum == signal.SIGINT
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)


def session_processes(session: int) -> list[psutil.Process]:
    """The live processes of one session (a terminal's, here a subprocess's own)."""
    found = []
    for process in psutil.process_iter():
        try:
            if os.getsid(process.pid) == session and process.status() != psutil.STATUS_ZOMBIE:
                found.append(process)
        except (OSError, psutil.Error):
            continue
    return found


@pytest.mark.slow  # over 15 s: kept out of CI's 10 minutes (python -m pytest -m slow)
def test_ctrl_c_while_ray_starts_leaves_no_ray_process(tmp_path):
    """Finding 4: two Ctrl-C's (SIGINT to the whole process group, as a terminal sends it) while
    Ray starts: the run stops with a checkpoint once Ray is up and no Ray process of its own lives
    on (a start cut halfway left its dashboard and runtime-env agents running)."""
    pytest.importorskip("ray")
    proc = subprocess.Popen([sys.executable, TRAIN, "--preset", "catch", "--actors", "1", "--log-dir", str(tmp_path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not any("gcs_server" in p.name() for p in session_processes(proc.pid)):
            time.sleep(0.05)
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        os.killpg(proc.pid, signal.SIGINT)
        time.sleep(0.3)
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    # Held while Ray started, the signals stop the run once it is up: a checkpoint, then a clean exit.
    assert proc.returncode == 130 and "stopped by SIGINT at agent step 0; checkpoint: " in err, err[-3000:]
    deadline = time.monotonic() + 30
    while session_processes(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not session_processes(proc.pid)


@pytest.mark.slow
def test_catch_preset_learns_with_two_actors(tmp_path):
    """``--preset catch --actors 2`` passes the single-process learning test's bounds: greedy
    return >= 0.8 over 100 games and start-state Q-values within Catch's returns."""
    pytest.importorskip("ray")
    from test_learning import learned

    from vecdqn.cli import parse_args
    from vecdqn.distributed.learner import DistributedTrainer

    config = parse_args(["--preset", "catch", "--actors", "2", "--log-dir", str(tmp_path), "--seed", "1"])
    trainer = DistributedTrainer(config, progress=False, handle_signals=False)
    summary = trainer.run()
    assert summary["steps"] >= 20_000
    ok, mean_return, start_q = learned(trainer)
    assert ok, (mean_return, start_q)
