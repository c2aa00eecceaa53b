"""Faults a user meets: a worker killed between steps or raising, a checkpoint and its replay out of step,
TensorBoard after a resume, games hidden by shared steps, abbreviated flags, crafted checkpoints,
a full disk, the env id's sticky actions and the warm-up's ETA, options given with --resume, and a
signal at a run's end."""

import dataclasses
import json
import os
import pickle
import re
import shlex
import signal
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import numpy as np
import psutil
import pytest
import torch
from helpers import catch_config
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from vecdqn import checkpoint, cli, preflight, safe_pickle
from vecdqn.checkpoint import CheckpointError
from vecdqn.config import Config
from vecdqn.curves import read_run
from vecdqn.envs import WorkerError, make_env
from vecdqn.envs.state import set_env_state
from vecdqn.metrics import MetricsLogger
from vecdqn.preflight import ConfigError
from vecdqn.resume import resume
from vecdqn.signals import StopSignals
from vecdqn.tracking import board_rows
from vecdqn.train_state import TrainState
from vecdqn.trainer import Trainer

ROOT = Path(__file__).resolve().parents[1]


def live_children() -> list[psutil.Process]:
    return [p for p in psutil.Process().children(recursive=True)
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


def parameters(path: Path) -> dict[str, torch.Tensor]:
    return checkpoint.load(path)["agent"]["online"]


def run_in_subprocess(code: str, tmp_path: Path) -> subprocess.CompletedProcess:
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(code))
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'tests'}"}
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env)


# 1. A worker killed while the main process is between two vector steps --------------------------
def test_worker_killed_between_steps_is_named_and_checkpointed(tmp_path):
    killed = []

    def kill_after_logging(trainer):
        if trainer.core.state.step >= 400 and not killed:
            worker = trainer.envs.envs.processes[1]
            worker.kill()  # SIGKILL after its reply was read: the next call is step_async
            worker.join(10)
            killed.append(trainer.core.state.step)

    trainer = Trainer(catch_config(tmp_path, total_steps=4_000, run_name="run"), progress=False,
                      handle_signals=False, on_step=kill_after_logging)
    with pytest.raises(WorkerError, match=r"^env 1 \(vecdqn/Catch-v0\) failed at agent step \d+"):
        trainer.run()
    assert killed and checkpoint.load(trainer.core.failure_checkpoint)["train_state"]["step"] >= killed[0]
    assert trainer.envs.closed and not live_children()


def console_lines(stderr: str) -> list[str]:
    """The non-empty lines of a run's stderr, the progress bar's redraws (``\\r``) as lines."""
    return [line.strip() for line in stderr.replace("\r", "\n").splitlines() if line.strip()]


@pytest.mark.parametrize("envs_per_worker", [1, 2])
def test_an_env_that_raises_is_one_line_on_the_console_and_its_traceback_in_error_log(tmp_path, envs_per_worker):
    """train.py with an env whose worker raises: exit code 1 and one line naming the env (and with
    batched workers its worker), the env id and the exception, with the checkpoint and the log (it
    was gymnasium's 37 lines in red); the worker's traceback is in the run folder's error.log."""
    from helpers import RAISING_CATCH_ID

    named = RAISING_CATCH_ID if envs_per_worker == 1 else f"worker 1 of envs 2-3, {RAISING_CATCH_ID}"

    failed = run_in_subprocess(f"""
        import sys
        from helpers import RAISING_CATCH_ID, register_test_envs
        from vecdqn.cli import main

        register_test_envs()  # env 3 of 4 is seeded 7 + 3 = 10: it raises on its 50th step
        sys.exit(main(["--preset", "catch", "--env-id", RAISING_CATCH_ID, "--num-envs", "4", "--seed", "7",
                       "--buffer-size", "2000", "--learning-starts", "100", "--hidden-size", "32",
                       "--total-steps", "4000", "--log-dir", {str(tmp_path)!r}, "--run-name", "run",
                       "--envs-per-worker", "{envs_per_worker}"]))
    """, tmp_path)
    run = tmp_path / "run"
    assert failed.returncode == 1, failed.stderr[-3000:]
    assert "\x1b" not in failed.stderr and "Traceback" not in failed.stderr
    lines = console_lines(failed.stderr)
    assert re.fullmatch(
        rf"train\.py: error: env 3 \({re.escape(named)}\) failed at agent step \d+: RuntimeError: "
        rf"emulator exploded on step 50; last checkpoint: {re.escape(str(run / 'checkpoints' / 'latest.pt'))}; "
        rf"traceback in {re.escape(str(run / 'error.log'))}", lines[-1]), lines[-3:]
    assert sum("emulator exploded" in line for line in lines) == 1
    log = (run / "error.log").read_text()
    assert "WorkerError: env 3" in log  # the main process's traceback, then the worker's:
    worker = r'helpers\.py", line \d+, in step\n(?:.*\n){1,3}RuntimeError: emulator exploded on step 50'
    assert re.search(worker, log), log
    assert checkpoint.load(run / "checkpoints" / "latest.pt")["train_state"]["step"] > 0


# 2. A checkpoint and its saved replay out of step --------------------------------------------------
@pytest.mark.slow  # over 15 s: kept out of CI's 10 minutes (python -m pytest -m slow)
def test_a_kill_between_the_replay_and_the_checkpoint_never_pairs_them(tmp_path):
    """Killed after the step-800 replay is written but before the step-800 checkpoint replaces
    the step-400 one: the resume uses the step-400 pair and matches an uninterrupted run."""
    overrides = dict(total_steps=1_200, checkpoint_every=400, save_replay=True, run_name="run")
    died = run_in_subprocess(f"""
        import os
        from vecdqn import checkpoint
        from vecdqn.trainer import Trainer
        from helpers import catch_config
        real = checkpoint.save_atomic
        def dying(obj, path, dump=None):
            if str(path).endswith("latest.pt") and obj["train_state"]["step"] >= 800:
                os._exit(9)  # killed between the two writes
            return real(obj, path, dump)
        checkpoint.save_atomic = dying
        Trainer(catch_config({str(tmp_path / 'b')!r}, **{overrides!r}), progress=False).run()
    """, tmp_path)
    assert died.returncode == 9, died.stderr[-2000:]
    folder = tmp_path / "b" / "run" / "checkpoints"
    assert len(list(folder.glob("latest.pt.*.replay"))) == 2  # step 400's and the orphan of step 800
    assert checkpoint.load(folder / "latest.pt")["train_state"]["step"] == 400

    straight = Trainer(catch_config(tmp_path / "a", **overrides), progress=False).run()
    resumed = Trainer.from_checkpoint(folder.parent, {"total_steps": 1_200}, progress=False)
    summary = resumed.run()
    assert summary["steps"] == 1_200 and summary["updates"] == straight["updates"]
    a, b = parameters(Path(straight["latest"])), parameters(folder / "latest.pt")
    for name in a:
        assert torch.equal(a[name], b[name]), name
    # The orphan and any temporaries were removed; one replay belongs to the one checkpoint.
    assert [p.name for p in folder.glob(".*.tmp")] == []
    (replay,) = folder.glob("latest.pt.*.replay")
    assert checkpoint.load(folder / "latest.pt")["replay_file"] == replay.name


def test_a_replay_of_another_checkpoint_is_not_used(tmp_path):
    config = catch_config(tmp_path, total_steps=300, save_replay=True, run_name="run")
    Trainer(config, progress=False).run()
    folder = tmp_path / "run" / "checkpoints"
    state = checkpoint.load_training(folder / "latest.pt")
    assert checkpoint.load_replay(state)[0] is not None
    state["replay_token"] = "someone-else"
    buffer, reason = checkpoint.load_replay(state)
    assert buffer is None and "belongs to another checkpoint" in reason


def test_a_replay_file_changed_on_disk_is_refused_by_its_crc(tmp_path):
    config = catch_config(tmp_path, total_steps=300, save_replay=True, run_name="run")
    Trainer(config, progress=False).run()
    folder = tmp_path / "run" / "checkpoints"
    state = checkpoint.load_training(folder / "latest.pt")
    assert isinstance(state["replay_crc32"], int)
    (replay,) = folder.glob("latest.pt.*.replay")
    data = bytearray(replay.read_bytes())
    data[len(data) // 2] ^= 0x01  # one bit inside the stored frames: the pickle itself still loads
    replay.write_bytes(bytes(data))
    with pytest.raises(checkpoint.CheckpointError, match=r"is damaged: its CRC-32 is [0-9a-f]{8}, the checkpoint "
                                                         r"recorded [0-9a-f]{8}"):
        checkpoint.load_replay(state)
    with pytest.raises(checkpoint.CheckpointError, match="CRC-32"):
        Trainer.from_checkpoint(tmp_path / "run", {"total_steps": 400}, progress=False)
    # A checkpoint of an earlier version recorded no CRC: its replay loads as before.
    del state["replay_crc32"]
    assert checkpoint.load_replay(state)[0] is not None


# 3. TensorBoard after a resume from an older checkpoint --------------------------------------------
def test_resumed_run_has_one_value_per_step_in_tensorboard(tmp_path, capfd):
    killed = run_in_subprocess(f"""
        import os
        from vecdqn.trainer import Trainer
        from helpers import catch_config
        def log_then_die(trainer):  # called after each vector step's logging
            if trainer.core.state.step >= 1_000:
                trainer.core.flush_logs()
                os._exit(9)  # killed hard at step 1,000; the last checkpoint is step 800
        Trainer(catch_config({str(tmp_path)!r}, total_steps=2_000, checkpoint_every=400, run_name="run"),
                progress=False, on_step=log_then_die).run()
    """, tmp_path)
    assert killed.returncode == 9, killed.stderr[-2000:]
    Trainer.from_checkpoint(tmp_path / "run", {"total_steps": 1_200}, progress=False).run()
    acc = EventAccumulator(str(tmp_path / "run"), size_guidance={"scalars": 0})
    acc.Reload()
    for tag in ("charts/epsilon", "replay/size", "losses/td_loss", "charts/episodic_return"):
        steps = [e.step for e in acc.Scalars(tag)]
        assert steps and max(Counter(steps).values()) == 1, (tag, sorted(steps))
    assert 900 in [e.step for e in acc.Scalars("charts/epsilon")]
    # vecdqn's own readers (plot.py and evaluate.py's minutes, the W&B mirror) drop the same events
    # without TensorBoard's "out of order event.step ... TensorFlow restart" warning.
    capfd.readouterr()
    curves = read_run(tmp_path / "run")
    rows, _ = board_rows(tmp_path / "run", after=0, upto=1_200)
    assert 900 in rows and curves.clock.steps.max() == 1_200
    assert "out of order" not in capfd.readouterr().err


# 4. Every game visible in TensorBoard --------------------------------------------------------------
def test_games_ending_on_one_vector_step_get_their_own_agent_steps(tmp_path):
    # Catch games all last 9 agent steps: the 4 envs end theirs on the same vector step.
    summary = Trainer(catch_config(tmp_path, num_envs=4, total_steps=400, run_name="run"), progress=False).run()
    acc = EventAccumulator(str(tmp_path / "run"), size_guidance={"scalars": 0})
    acc.Reload()
    steps = [e.step for e in acc.Scalars("charts/episodic_return")]
    assert len(steps) == summary["episodes"] == len(set(steps)) > 4
    assert sorted(steps)[:4] == [33, 34, 35, 36]  # the 9th vector step ends at agent step 36 (env i: 33 + i)


# 5. Abbreviated flags -----------------------------------------------------------------------------
def test_abbreviated_flags_are_refused(tmp_path):
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "train.py"), "--preset", "catch", "--total",
                             "2000", "--log-dir", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "--total" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not list(tmp_path.iterdir())


# 6. Checkpoints that can run code -------------------------------------------------------------------
class RunsCode:
    """Unpickling this calls os.system: what a crafted file would do."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def test_a_checkpoint_carrying_a_pickled_callable_is_refused(tmp_path):
    marker = tmp_path / "ran"
    path = tmp_path / "evil.pt"
    torch.save({"format": checkpoint.CHECKPOINT_FORMAT, "config": {}, "agent": RunsCode(marker)}, path)
    with pytest.raises(CheckpointError, match="refuses to load it"):
        checkpoint.load(path)
    assert not marker.exists()


def test_a_file_that_is_no_checkpoint_is_called_that_not_code(tmp_path):
    """A README passed by mistake is not a checkpoint; it is not "a file that can run code"."""
    path = tmp_path / "README.md"
    path.write_text("# vecdqn\n\nA Deep Q-Network trainer.\n")
    with pytest.raises(CheckpointError, match=r"README\.md is not a PyTorch checkpoint archive") as caught:
        checkpoint.load(path)
    assert "run code" not in str(caught.value)


def test_a_replay_file_carrying_a_pickled_callable_is_refused(tmp_path):
    marker = tmp_path / "ran"
    (tmp_path / "latest.pt.abc.replay").write_bytes(pickle.dumps({"token": "abc", "buffer": RunsCode(marker)}))
    state = {"path": str(tmp_path / "latest.pt"), "replay_file": "latest.pt.abc.replay", "replay_token": "abc"}
    with pytest.raises(CheckpointError, match="refusing to load posix.system"):
        checkpoint.load_replay(state)
    assert not marker.exists()


def test_an_env_snapshot_carrying_a_pickled_callable_is_refused(tmp_path):
    marker = tmp_path / "ran"
    env = make_env("vecdqn/Catch-v0")
    with pytest.raises(safe_pickle.UnsafePickleError):
        set_env_state(env, pickle.dumps(RunsCode(marker)))
    assert not marker.exists()


def test_checkpoints_load_with_weights_only(tmp_path):
    Trainer(catch_config(tmp_path, total_steps=200, run_name="run", save_replay=True), progress=False).run()
    state = torch.load(tmp_path / "run" / "checkpoints" / "latest.pt", weights_only=True)
    assert state["train_state"]["step"] == 200 and len(state["envs"]["snapshots"]) == 2


# 7. A full disk ---------------------------------------------------------------------------------------
def test_preflight_refuses_a_log_dir_without_room(tmp_path, monkeypatch):
    monkeypatch.setattr(preflight.shutil, "disk_usage", lambda path: type("U", (), {"free": 30 * 2**20})())
    with pytest.raises(preflight.ConfigError, match=r"--log-dir .* has 30 MiB free.*--save-replay"):
        preflight.preflight(catch_config(tmp_path, buffer_size=20_000, save_replay=True))


def _full_disk(*args, **kwargs):
    raise OSError(28, "No space left on device")


def test_a_full_disk_under_the_event_writer_is_one_log_write_error(tmp_path, monkeypatch):
    """TensorBoard's writer thread dies on the error (its traceback was printed) and hands it to the
    writer's next call (an OSError traceback); the logger raises it once, as LogWriteError, a
    CheckpointError as train.py reports them."""
    import threading

    from tensorboard.summary.writer.record_writer import RecordWriter

    from vecdqn.metrics import LogWriteError

    printed = []
    monkeypatch.setattr(threading, "excepthook", printed.append)  # the hook that would print the traceback
    logger, at_close, in_finally = (MetricsLogger(str(tmp_path / name), {}, 1_000, progress=False) for name in "abc")
    for each in (logger, at_close, in_finally):
        each.scalars(10, {"eval/return_mean": 1.0})  # written at once: nothing left to write
    monkeypatch.setattr(RecordWriter, "write", _full_disk)
    monkeypatch.setattr(RecordWriter, "flush", _full_disk)
    said = (rf"^could not write TensorBoard's event file in {re.escape(str(tmp_path / 'a'))} \(\[Errno 28\] No space "
            r"left on device; [\d.]+ MiB free there\): the run stops; its checkpoints are kept$")
    with pytest.raises(LogWriteError, match=said):
        for step in range(20, 2_000, 10):  # the error comes back at the call after the thread died
            logger.scalars(step, {"charts/SPS": 1.0, "eval/return_mean": 0.0})
    assert isinstance(LogWriteError(), CheckpointError)
    logger.close()  # reported already: the close says nothing more
    assert printed == []
    # Seen first by the close (its flush, at the run's end): raised there, unless another error is
    # ending the run.
    with pytest.raises(LogWriteError, match="No space left on device"):
        at_close.close()
    with pytest.raises(WorkerError, match="the first error"):
        try:
            raise WorkerError("the first error")
        finally:
            in_finally.close()
    assert printed == []


def test_a_disk_full_under_tensorboard_ends_the_run_in_one_line_with_the_checkpoint_kept(tmp_path):
    """A 16 MiB tmpfs as --log-dir filled after the first checkpoint: exit code 1 after a writer-thread
    traceback, a checkpoint traceback and an OSError traceback from the event writer's flush."""
    code = f"""
        import runpy, sys
        from tensorboard.summary.writer.record_writer import RecordWriter
        from vecdqn.core import TrainingCore

        def full(*args, **kwargs):
            raise OSError(28, "No space left on device")

        save = TrainingCore.save_checkpoint

        def fill_the_disk_after(self, name="latest.pt", collector=None):
            path = save(self, name, collector)
            RecordWriter.write = RecordWriter.flush = full
            return path

        TrainingCore.save_checkpoint = fill_the_disk_after
        sys.argv = ["train.py", "--preset", "catch", "--num-envs", "2", "--total-steps", "2000", "--buffer-size",
                    "2000", "--learning-starts", "100", "--hidden-size", "32", "--checkpoint-every", "200",
                    "--log-every", "100", "--log-dir", {str(tmp_path)!r}, "--run-name", "run"]
        runpy.run_path({str(ROOT / "scripts" / "train.py")!r}, run_name="__main__")
    """
    result = run_in_subprocess(code, tmp_path)
    latest = tmp_path / "run" / "checkpoints" / "latest.pt"
    assert result.returncode == 1, result.stderr[-3000:]
    lines = [line for line in re.split(r"[\r\n]", result.stderr) if line.strip() and "step/s" not in line]  # no bar
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert lines[0].startswith(f"train.py: error: could not write TensorBoard's event file in {tmp_path / 'run'} "
                               "([Errno 28] No space left on device") and f"last checkpoint: {latest}" in lines[0]
    assert checkpoint.load_training(latest)["train_state"]["step"] == 200


def test_an_open_files_limit_too_low_for_one_worker_says_how_far_to_raise_it(tmp_path, monkeypatch):
    """With ``ulimit -n 40`` the message said "use at most -6 env workers"."""
    import resource

    config = catch_config(tmp_path, num_envs=16, envs_per_worker=1)
    monkeypatch.setattr(resource, "getrlimit", lambda which: (40, 40))
    with pytest.raises(ConfigError) as error:
        preflight.check_worker_limits(config)
    message = str(error.value)
    assert "open-files limit is 40 (ulimit -n), too low for even one env worker; raise it by 88: ulimit -n 128" \
        in message and "at most" not in message and "\n" not in message
    monkeypatch.setattr(resource, "getrlimit", lambda which: (100, 100))  # room for 9 workers of the 16
    with pytest.raises(ConfigError, match=r"may open 100 \(ulimit -n\); use at most 9 env workers or raise the "
                                          r"limit: ulimit -n 128$"):
        preflight.check_worker_limits(config)


def test_disk_full_during_a_checkpoint_keeps_the_previous_pair(tmp_path, monkeypatch):
    trainer = Trainer(catch_config(tmp_path, total_steps=1_000, checkpoint_every=200, save_replay=True,
                                   run_name="run"), progress=False, handle_signals=False)
    real_save = torch.save

    def full_disk(obj, f, *args, **kwargs):
        if isinstance(obj, dict) and obj.get("train_state", {}).get("step", 0) >= 400:
            raise RuntimeError("[enforce fail at inline_container.cc:664] . unexpected pos 4544 vs 4432")
        return real_save(obj, f, *args, **kwargs)

    monkeypatch.setattr(torch, "save", full_disk)
    with pytest.raises(CheckpointError, match=r"could not write .*latest.pt .*MiB free.*previous checkpoint is kept"):
        trainer.run()
    folder = tmp_path / "run" / "checkpoints"
    state = checkpoint.load_training(folder / "latest.pt")
    assert state["train_state"]["step"] == 200 and checkpoint.load_replay(state)[0] is not None
    assert [p.name for p in folder.iterdir() if p.name.endswith(".tmp")] == []
    assert len(list(folder.glob("*.replay"))) == 1
    assert not live_children()


# 8. Smaller things ------------------------------------------------------------------------------------
@pytest.mark.parametrize("env_id, sticky", [("ALE/Breakout-v5", 0.25), ("BreakoutNoFrameskip-v4", 0.0)])
def test_sticky_actions_default_to_the_env_ids_own(env_id, sticky):
    env = make_env(env_id)
    assert env.unwrapped.ale.getFloat("repeat_action_probability") == sticky


def test_one_bar_from_start_to_end_with_the_warm_up_marked(tmp_path, capsys):
    """One bar for the whole run, as tqdm users expect: the warm-up is a mark in its postfix, not a
    bar of its own, and the count it draws never goes back or starts again."""
    logger = MetricsLogger(str(tmp_path), {}, 1_000, initial_step=40, progress=True)  # a resumed run
    bar = logger.bar
    logger.progress(96, mean_return=0.5, games=3)
    assert "warm-up" in bar.postfix
    logger.learning_started(100)
    logger.progress(164, mean_return=0.5, games=4)
    assert logger.bar is bar and "warm-up" not in bar.postfix and bar.n == 164
    logger.close()
    drawn = [line for line in capsys.readouterr().err.replace("\r", "\n").splitlines() if "/1000" in line]
    counts = [int(line.split("/1000")[0].split()[-1]) for line in drawn]
    assert counts[0] == 40 and counts[-1] == 164 and counts == sorted(counts), counts


def test_the_bar_drops_warm_up_when_learning_starts_before_any_game_ends_and_comes_after_the_first_line(
        tmp_path, capsys):
    """Enduro's games last ~3,000 agent steps: 128 envs learn for 400,000 agent steps before one ends.
    The run's first line (stdout) names its folder before the bar (stderr) is drawn."""
    logger = MetricsLogger(str(tmp_path), {}, 1_000, progress=True)
    logger.learning_started(100)
    logger.progress(200, games=0)
    assert "warm-up" not in logger.bar.postfix and "games=0" in logger.bar.postfix
    logger.close()
    capsys.readouterr()
    config = catch_config(tmp_path, total_steps=200, run_name="run")
    with capsys.disabled():  # one stream, as `train.py ... 2>&1 | tee log` sees it
        out = subprocess.run([sys.executable, str(ROOT / "scripts" / "train.py"), "--preset", "catch",
                              "--total-steps", "200", "--learning-starts", "100", "--log-dir", str(tmp_path),
                              "--run-name", "run"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert out.returncode == 0, out.stdout
    assert out.stdout.lstrip("\r").startswith(f"{tmp_path / 'run'}: {config.env_id}"), out.stdout[:300]


def test_replay_loads_with_numpy_state_intact(tmp_path):
    Trainer(catch_config(tmp_path, total_steps=300, save_replay=True, run_name="run"), progress=False).run()
    state = checkpoint.load_training(tmp_path / "run" / "checkpoints" / "latest.pt")
    buffer, _ = checkpoint.load_replay(state)
    assert len(buffer) > 0 and isinstance(buffer.sample(8).obs, np.ndarray)


# 9. Options given with --resume replace the saved ones -----------------------------------------------
def test_a_shorthand_given_on_resume_replaces_the_saved_schedule():
    saved = Config(epsilon_schedule="0:1.0,1000:0.1", learning_rate_schedule="0:1e-3,1000:1e-4").to_dict()
    config = Config.from_saved(saved, {"epsilon_end": 0.5, "epsilon_decay_steps": 1})
    assert config.epsilon_schedule == "" and config.schedule_points("epsilon") == [(0, 1.0), (1, 0.5)]
    assert config.schedule_points("learning_rate") == [(0, 1e-3), (1000, 1e-4)]  # not given: kept
    config = Config.from_saved(saved, {"learning_rate": 3e-4})
    assert config.learning_rate_schedule == "" and config.schedule_points("learning_rate") == [(0, 3e-4)]
    assert config.epsilon_schedule == saved["epsilon_schedule"]
    # The reverse: a schedule given over a run of two-point options wins over them.
    assert Config.from_saved(Config().to_dict(), {"epsilon_schedule": "0:0.3"}).schedule_points("epsilon") == [(0, 0.3)]


def test_resume_with_two_point_options_switches_a_scheduled_run_to_them(tmp_path):
    """The run started with --epsilon-schedule and --learning-rate-schedule; resumed with
    --epsilon-end 0.5 --epsilon-decay-steps 1 --learning-rate 3e-4 it logs those values (it kept
    following the saved schedules: epsilon ~0.9995)."""
    Trainer(catch_config(tmp_path, total_steps=300, run_name="run", epsilon_schedule="0:1.0,1000000:0.0",
                         learning_rate_schedule="0:1e-3,1000000:1e-4"), progress=False).run()
    run = tmp_path / "run"
    assert cli.main(["--resume", str(run), "--total-steps", "600", "--epsilon-end", "0.5", "--epsilon-decay-steps",
                     "1", "--learning-rate", "3e-4"]) == 0
    acc = EventAccumulator(str(run), size_guidance={"scalars": 0})
    acc.Reload()
    epsilon = {e.step: e.value for e in acc.Scalars("charts/epsilon")}
    learning_rate = {e.step: e.value for e in acc.Scalars("charts/learning_rate")}
    assert [epsilon[s] for s in (400, 500, 600)] == pytest.approx([0.5] * 3)
    # The logged rate is the optimizer's, set before each update; updates restart at step 400,
    # once the replay has refilled --learning-starts (100) agent steps.
    assert [learning_rate[s] for s in (500, 600)] == pytest.approx([3e-4] * 2)
    saved = json.loads((run / "config.json").read_text())
    assert (saved["epsilon_schedule"], saved["learning_rate_schedule"], saved["epsilon_end"]) == ("", "", 0.5)


def test_a_preset_given_on_resume_is_refused_in_one_line(tmp_path, capsys):
    """It was recorded in config.json (preset: pong) while every value stayed Catch's."""
    Trainer(catch_config(tmp_path, total_steps=200, run_name="run", preset="catch"), progress=False).run()
    run = tmp_path / "run"
    before = (run / "config.json").read_text()
    assert cli.main(["--resume", str(run), "--preset", "pong", "--total-steps", "400"]) == 2
    assert capsys.readouterr().err == (
        "train.py: error: --preset pong cannot be given with --resume: the run continues with its saved values; "
        "give the options to change one by one (e.g. --total-steps)\n")
    assert (run / "config.json").read_text() == before
    # Through the library, another preset than the run's is refused like any option the run cannot follow.
    with pytest.raises(ConfigError, match="--preset pong differs from the run's catch; --preset cannot change"):
        Trainer.from_checkpoint(run, {"preset": "pong", "total_steps": 400}, progress=False)


def test_a_signal_at_a_runs_end_is_recorded_without_a_word_and_a_second_still_stops_at_once():
    """Inside `StopSignals.finishing` (final checkpoints, the close of workers and writers) the first
    signal has nothing left to stop: recorded, not said ("finishing this step" would be false)."""
    said = []
    with StopSignals(say=said.append) as stop:
        with stop.finishing():
            signal.raise_signal(signal.SIGINT)
            assert stop.signum == signal.SIGINT and said == []
            with pytest.raises(KeyboardInterrupt):
                signal.raise_signal(signal.SIGTERM)
        assert stop.signum == signal.SIGINT
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


# Where one SIGINT lands in train.py once its run has reached --total-steps: during the vector step
# that reaches it, while the final checkpoint is written, while the env workers close, while
# TensorBoard's writer closes, and while the interpreter exits (the last atexit callback; the
# teardown after it, where CPython has put the default handlers back).
SIGNAL_AT_THE_END = """
    import atexit, runpy, signal, sys
    from vecdqn.core import TrainingCore
    from vecdqn.envs import WorkerGuard
    from vecdqn.metrics import MetricsLogger
    from vecdqn.trainer import VectorCollector

    def interrupted(original, name=None):
        def call(self, *args, **kwargs):
            if name is None or args[:1] == (name,):
                signal.raise_signal(signal.SIGINT)  # handled before it returns
            return original(self, *args, **kwargs)
        return call

    where = {where!r}
    if where == "last step":  # lands while the envs step to --total-steps
        collect = VectorCollector.collect
        def last(self):
            collect(self)
            if self.core.state.step >= self.core.config.total_steps:
                signal.raise_signal(signal.SIGINT)
        VectorCollector.collect = last
    elif where == "exit":
        atexit.register(signal.raise_signal, signal.SIGINT)  # the last callback to run
    elif where == "teardown":  # after the atexit callbacks: the interpreter clears its modules
        class Probe:
            def __del__(self):
                signal.raise_signal(signal.SIGINT)
        sys.modules["teardown_probe"] = type(sys)("teardown_probe")
        sys.modules["teardown_probe"].probe = Probe()
    elif where == "final checkpoint":
        TrainingCore.save_checkpoint = interrupted(TrainingCore.save_checkpoint, "final.pt")
    else:
        cls = WorkerGuard if where == "workers" else MetricsLogger
        cls.close = interrupted(cls.close)
    sys.argv = [{script!r}, *{args!r}]
    runpy.run_path({script!r}, run_name="__main__")
"""


@pytest.mark.parametrize("where", ["last step", "final checkpoint", "workers", "writers", "exit", "teardown"])
def test_one_sigint_after_the_final_checkpoint_ends_the_run_one_way(tmp_path, where):
    """A run that reached --total-steps stops nothing on one Ctrl-C, wherever it lands: exit code 0,
    one line on stderr saying so, no traceback, final.pt kept, no worker left. It used to exit 0
    with "Exception ignored ... KeyboardInterrupt", 130 with the second signal's "stopped at once",
    or 0 without a word, depending on the moment; in the interpreter's teardown it killed the
    process (exit code 130, no word): the process now ends before that teardown."""
    args = ["--preset", "catch", "--num-envs", "2", "--total-steps", "200", "--learning-starts", "100",
            "--buffer-size", "2000", "--hidden-size", "32", "--eval-every", "0", "--log-dir", str(tmp_path),
            "--run-name", "run"]
    result = run_in_subprocess(SIGNAL_AT_THE_END.format(where=where, script=str(ROOT / "scripts" / "train.py"),
                                                        args=args), tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "done: 200 agent steps" in result.stdout
    noted = [line for line in result.stderr.splitlines() if "SIGINT" in line]
    if where == "teardown":
        assert noted == [], result.stderr  # the teardown, and its signal, never come
    else:  # the same line wherever it lands
        assert noted == ["train.py: SIGINT while exiting; nothing was stopped"], result.stderr
    for sign in ("Traceback", "Exception ignored", "KeyboardInterrupt", "stopped at once"):
        assert sign not in result.stdout + result.stderr, result.stderr[-3000:]
    assert ("finishing this step" in result.stdout) == (where == "last step")  # said as the signal landed
    assert checkpoint.load(tmp_path / "run" / "checkpoints" / "final.pt")["train_state"]["step"] == 200
    # the env workers are forks of the script: none lives on
    left = [p for p in psutil.process_iter(["cmdline"]) if str(tmp_path / "script.py") in (p.info["cmdline"] or [])]
    assert not left, left


def test_another_learners_option_given_on_resume_is_refused_with_advice_that_can_be_followed(tmp_path, capsys):
    """On resume --algo is fixed: "drop it or change --algo" named a change the next command would
    refuse. A new run may still change --algo."""
    config = catch_config(tmp_path, algo="pqn", rollout_steps=8, minibatches=2)
    checkpoint.save_training(tmp_path / "run" / "checkpoints" / "latest.pt", config=config.to_dict(),
                             train_state=dataclasses.asdict(TrainState.new(config)), agent={})
    assert cli.main(["--resume", str(tmp_path / "run"), "--n-step", "3", "--total-steps", "400"]) == 2
    assert capsys.readouterr().err == (
        "train.py: error: --n-step only applies with --algo dqn or --algo rainbow, and the run being resumed uses "
        "--algo pqn, which is fixed on resume: drop --n-step\n")
    assert cli.main(["--preset", "catch-pqn", "--n-step", "3", "--buffer-size", "500"]) == 2
    assert capsys.readouterr().err == (
        "train.py: error: --buffer-size, --n-step only apply with --algo dqn or --algo rainbow; --algo pqn would "
        "ignore them: drop them or change --algo\n")


@pytest.mark.parametrize(("algo", "default"), [("dqn", False), ("pqn", True)])
def test_resume_accepts_the_runs_own_layer_norm_and_refuses_the_other(tmp_path, algo, default):
    """--layer-norm is fixed on resume, its saved value unset (each learner's default): restating
    what the run uses is no change; the other value is refused, naming what the run uses."""
    pqn = {"algo": "pqn", "rollout_steps": 8, "minibatches": 2} if algo == "pqn" else {}
    config = catch_config(tmp_path, run_name="run", total_steps=200, **pqn)
    Trainer(config, progress=False, handle_signals=False).run()
    run = tmp_path / "run"
    assert json.loads((run / "config.json").read_text())["layer_norm"] is None
    assert resume(run, {"layer_norm": default, "total_steps": 400}).config.uses_layer_norm is default
    flag = "--layer-norm" if default else "--no-layer-norm"
    assert cli.main(["--resume", str(run), flag, "--total-steps", "400"]) == 0
    with pytest.raises(ConfigError, match=f"^--layer-norm {not default} differs from the run's {default}; "
                                          "--layer-norm cannot change on --resume"):
        resume(run, {"layer_norm": not default, "total_steps": 600})


def test_resume_refuses_another_init_and_keeps_the_saved_one(tmp_path, capsys):
    """--init chooses the initial weights, which a resumed run has already replaced: another value
    would only make config.json lie about how the run began, so it is refused in one line."""
    Trainer(catch_config(tmp_path, run_name="run", total_steps=200), progress=False, handle_signals=False).run()
    run = tmp_path / "run"
    before = (run / "config.json").read_text()
    assert cli.main(["--resume", str(run), "--init", "orthogonal", "--total-steps", "400"]) == 2
    assert capsys.readouterr().err == ("train.py: error: --init orthogonal differs from the run's torch; --init "
                                       "cannot change on --resume (start a new run instead)\n")
    assert (run / "config.json").read_text() == before
    assert cli.main(["--resume", str(run), "--init", "torch", "--total-steps", "400"]) == 0
    assert json.loads((run / "config.json").read_text())["init"] == "torch"


def test_resume_refuses_another_seed(tmp_path, capsys):
    """The generators go on from their saved states, so another --seed on resume changed nothing but
    config.json (and plot.py's grouping), which then named a seed the run never had."""
    Trainer(catch_config(tmp_path, run_name="run", total_steps=200), progress=False, handle_signals=False).run()
    run = tmp_path / "run"
    before = (run / "config.json").read_text()
    assert cli.main(["--resume", str(run), "--seed", "8", "--total-steps", "400"]) == 2  # catch_config's seed is 7
    assert capsys.readouterr().err == ("train.py: error: --seed 8 differs from the run's 7; --seed cannot change on "
                                       "--resume (start a new run instead)\n")
    assert (run / "config.json").read_text() == before


def test_a_run_stopped_before_its_first_checkpoint_says_what_to_do_with_its_folder(tmp_path, capsys):
    """A run that failed before its first checkpoint (a NaN at update 1, a second Ctrl-C) left a
    folder that --run-name called "a run; continue it with --resume", and --resume then refused:
    both now say there is nothing to resume and how to use the name again."""
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.json").write_text("{}")
    assert cli.main(["--preset", "catch", "--log-dir", str(tmp_path), "--run-name", "run"]) == 2
    assert capsys.readouterr().err == (f"train.py: error: --run-name run: {run} holds a run that stopped before its "
                                       f"first checkpoint (nothing to resume); remove {run} or choose another "
                                       "--run-name\n")
    assert cli.main(["--resume", str(run)]) == 2
    assert capsys.readouterr().err == (f"train.py: error: run folder {run} stopped before its first checkpoint: "
                                       f"there is nothing to resume; start a new run (remove {run} to use its name "
                                       "again)\n")


def test_resuming_from_a_checkpoint_the_run_has_gone_beyond_is_refused(tmp_path, capsys):
    """--resume run/checkpoints/step_000000200.pt of a run that went on to 400 overwrote its final.pt,
    latest.pt and later kept checkpoints without a word; the copy the message describes resumes."""
    import shutil

    config = catch_config(tmp_path, run_name="run", total_steps=400, checkpoint_every=200, keep_checkpoints=True)
    Trainer(config, progress=False, handle_signals=False).run()
    run = tmp_path / "run"
    early = run / "checkpoints" / "step_000000200.pt"
    before = {path.name: path.read_bytes() for path in (run / "checkpoints").iterdir()}
    assert cli.main(["--resume", str(early), "--total-steps", "600"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"train.py: error: --resume {early} is at agent step 200, but the run went on to 400 "
                          "(checkpoints/latest.pt), which resuming there would overwrite; ") and err.count("\n") == 1
    assert {path.name: path.read_bytes() for path in (run / "checkpoints").iterdir()} == before
    copy = tmp_path / "copy"
    shutil.copytree(run, copy)
    for name in ("latest.pt", "final.pt", "step_000000400.pt"):
        (copy / "checkpoints" / name).unlink()
    assert cli.main(["--resume", str(copy / "checkpoints" / "step_000000200.pt"), "--total-steps", "600"]) == 0


def test_a_checkpoint_outside_a_run_folder_is_refused_and_the_advice_resumes(tmp_path, capsys):
    """--resume models/best.pt (a checkpoint copied out of its run) went on in models/'s parent:
    config.json, event files and checkpoints/ written into a folder that held no run, and a second
    loose file there overwrote the first one's latest.pt. Refused; the folder the message describes
    resumes."""
    import shutil

    Trainer(catch_config(tmp_path, run_name="run", total_steps=200), progress=False, handle_signals=False).run()
    loose = tmp_path / "demo" / "models" / "best.pt"
    loose.parent.mkdir(parents=True)
    shutil.copy(tmp_path / "run" / "checkpoints" / "final.pt", loose)
    assert cli.main(["--resume", str(loose), "--total-steps", "400"]) == 2
    err = capsys.readouterr().err
    assert err == (f"train.py: error: --resume {loose} is not in a run folder's checkpoints/, and the run would go on "
                   f"in {tmp_path / 'demo'}; to continue from it, give it a run folder of its own: mkdir -p "
                   f"NEW/checkpoints && cp {loose} NEW/checkpoints/latest.pt, then --resume NEW\n")
    assert sorted(p.name for p in (tmp_path / "demo").iterdir()) == ["models"]
    # a file that is no checkpoint is named as such, not given advice to copy it
    assert cli.main(["--resume", str(tmp_path / "run" / "config.json")]) == 2
    assert "is not a PyTorch checkpoint archive" in capsys.readouterr().err
    new = tmp_path / "new"
    (new / "checkpoints").mkdir(parents=True)
    shutil.copy(loose, new / "checkpoints" / "latest.pt")
    assert cli.main(["--resume", str(new), "--total-steps", "400"]) == 0
    assert checkpoint.load_training(new / "checkpoints" / "final.pt")["train_state"]["step"] == 400


@pytest.mark.parametrize("log_dir", ["", " "])
def test_an_empty_log_dir_is_refused_and_writes_nothing(tmp_path, monkeypatch, capsys, log_dir):
    """--log-dir '' wrote the run folder into the shell's current folder."""
    monkeypatch.chdir(tmp_path)
    assert cli.main(["--preset", "catch", "--log-dir", log_dir]) == 2
    assert capsys.readouterr().err == (f"train.py: error: --log-dir {log_dir!r} names no folder; give one (default: "
                                       "runs; . for this folder)\n")
    assert not any(tmp_path.iterdir())


def test_an_empty_resume_is_refused_and_starts_nothing(tmp_path, monkeypatch, capsys):
    """``--resume ""`` used to start a new run of the defaults (Breakout, 10M agent steps) in ./runs."""
    monkeypatch.chdir(tmp_path)
    assert cli.main(["--resume", ""]) == 2
    err = capsys.readouterr().err
    assert err == "train.py: error: --resume '' names no run; give a run folder or a checkpoint file\n"
    assert not (tmp_path / "runs").exists()


def test_the_resume_command_printed_on_a_stop_pastes_into_a_shell(tmp_path, monkeypatch, capsys):
    """A --log-dir with a space gave "resume with: ... --resume /tmp/my runs/r", which a shell splits."""
    from vecdqn.signals import Interrupted

    def stopped(self):
        raise Interrupted(signal.SIGINT, self.core.run_dir / "checkpoints" / "latest.pt")

    monkeypatch.setattr(Trainer, "run", stopped)
    log_dir = tmp_path / "my runs"
    assert cli.main(["--preset", "catch", "--log-dir", str(log_dir), "--run-name", "r"]) == 130
    line = capsys.readouterr().err.splitlines()[-1]
    assert line.startswith("resume with: ")
    assert shlex.split(line.removeprefix("resume with: ")) == ["python", "scripts/train.py", "--resume",
                                                                 str(log_dir / "r")]


def test_a_new_run_checks_its_options_once(tmp_path, monkeypatch, capsys):
    """train.py checks that every option given applies, and validates the values, once each
    before the run starts (the run is stopped at its start here)."""
    calls = Counter()
    validate, options_apply = Config.validate, cli.check_options_apply

    def counted_validate(self):
        calls["validate"] += 1
        return validate(self)

    def counted_options_apply(given, config):
        calls["check_options_apply"] += 1
        return options_apply(given, config)

    def stopped(self):
        raise KeyboardInterrupt

    monkeypatch.setattr(Config, "validate", counted_validate)
    monkeypatch.setattr(cli, "check_options_apply", counted_options_apply)
    monkeypatch.setattr(Trainer, "run", stopped)
    assert cli.main(["--preset", "catch", "--num-envs", "2", "--log-dir", str(tmp_path), "--run-name", "run"]) == 130
    assert calls == {"validate": 1, "check_options_apply": 1}
    # A bad value is still refused in one line, by the preflight.
    assert cli.main(["--preset", "catch", "--batch-size", "0", "--log-dir", str(tmp_path)]) == 2
    assert capsys.readouterr().err.endswith("train.py: error: --batch-size 0 must be a positive integer (>= 1)\n")


def test_memory_is_checked_before_any_env_is_made(tmp_path, monkeypatch):
    """A screen too large for the memory is refused by the memory check, before preflight makes
    its trial env: that env alone, at a side of 100,000 pixels, used to exhaust the machine."""
    def no_env(*args, **kwargs):
        raise AssertionError("preflight made an env before checking the memory")

    monkeypatch.setattr(preflight, "make_env", no_env)
    monkeypatch.setattr(preflight, "available_memory_bytes", lambda: 2**30)
    config = catch_config(tmp_path, screen_size=1000)  # 2,000 frame slots of 1000 x 1000 bytes
    with pytest.raises(ConfigError, match=r"^the replay of --buffer-size 2000 needs 1\.\d GiB and --num-envs 2 about "
                                          r"0\.\d GiB for 2 env workers, but only 1\.0 GiB are free"):
        preflight.preflight(config)


@pytest.mark.parametrize(("options", "advice"), [
    # the games are what is too large: shrinking a 0.0 GiB replay or using 1 worker does not help
    (dict(num_envs=4096, envs_per_worker=2048, buffer_size=2000), "play fewer games than --num-envs 4096$"),
    # the replay is: fewer games do not help
    (dict(screen_size=1000, buffer_size=2000), r"shrink the replay of --buffer-size 2000$"),
    # each alone would fit, not both
    (dict(screen_size=700, num_envs=32, envs_per_worker=16, buffer_size=1500),
     r"shrink the replay of --buffer-size 1500 or play fewer games than --num-envs 32$"),
    # one worker process of 64 games in place of 64 would
    (dict(num_envs=64, envs_per_worker=1, buffer_size=1000), r"step more games per worker process"),
])
def test_the_memory_refusal_names_the_remedies_that_make_room(tmp_path, monkeypatch, options, advice):
    """--num-envs 4096 was told to "shrink the replay ... or use fewer env workers": neither helped."""
    monkeypatch.setattr(preflight, "available_memory_bytes", lambda: 2**30)
    with pytest.raises(ConfigError, match=advice):
        preflight.check_memory(catch_config(tmp_path, **options))


def test_a_network_too_large_for_any_checkpoint_names_hidden_size(tmp_path, monkeypatch):
    """--hidden-size 1000000000 was blamed on the disk: "free some space" (7.5 TiB of it)."""
    monkeypatch.setattr(preflight.shutil, "disk_usage", lambda path: type("U", (), {"free": 70_000 * 2**20})())
    with pytest.raises(ConfigError, match=r"^--hidden-size 1000000000 makes a checkpoint's networks and optimizer "
                                          r"state about [\d,]+ MiB, .* 70,000 MiB free in --log-dir; use a smaller "
                                          r"--hidden-size"):
        preflight.check_disk(catch_config(tmp_path, hidden_size=10**9), n_actions=3)


def test_an_observation_side_beyond_the_limit_is_refused_in_one_line(capsys):
    assert cli.main(["--preset", "catch", "--screen-size", "100000"]) == 2
    assert capsys.readouterr().err == ("train.py: error: --screen-size 100000 is invalid; use at most 1024 pixels "
                                       "(ALE screens are 210 x 160; DQN uses 84)\n")


@pytest.mark.parametrize("env_id", ["vecdqn/Catch-v0", "BreakoutNoFrameskip-v4"])
def test_the_disk_check_bounds_an_envs_snapshot(env_id):
    """preflight's disk check counts SNAPSHOT_BYTES per env in each checkpoint: a real snapshot
    fits (Catch's used to take ~3x the bound)."""
    from vecdqn.envs.state import get_env_state

    env = make_env(env_id)
    try:
        env.reset(seed=0)
        env.step(0)
        assert len(get_env_state(env)) <= preflight.SNAPSHOT_BYTES
    finally:
        env.close()


def test_a_replay_file_of_an_earlier_version_loads_its_moved_classes():
    """Replay files name the buffer's class where it lived when they were written."""
    from vecdqn.replay.prioritized import PrioritizedReplayBuffer
    from vecdqn.replay.proportional import ReplayBase

    assert safe_pickle.loads(b"cvecdqn.replay.buffer\nPrioritizedReplayBuffer\n.") is PrioritizedReplayBuffer
    assert safe_pickle.loads(b"cvecdqn.replay.prioritized\nReplayBase\n.") is ReplayBase


@pytest.mark.parametrize("data", [b"cvecdqn.no_such_module\nThing\n.", b"cvecdqn.replay.prioritized\nNoSuchClass\n."])
def test_a_file_naming_a_class_this_version_lacks_is_one_error(tmp_path, data):
    with pytest.raises(pickle.UnpicklingError, match="which this version of vecdqn does not have"):
        safe_pickle.loads(data)
    (tmp_path / "latest.pt.abc.replay").write_bytes(data)
    state = {"path": str(tmp_path / "latest.pt"), "replay_file": "latest.pt.abc.replay", "replay_token": "abc"}
    with pytest.raises(CheckpointError, match="which this version of vecdqn does not have"):
        checkpoint.load_replay(state)


@pytest.mark.parametrize("script, one_line", [("scripts/train.py", True), ("elsewhere/mine.py", False)])
def test_a_ctrl_c_before_a_script_handles_signals_is_one_line(script, one_line):
    """A Ctrl-C in a script's first seconds (while torch and gymnasium import) printed a traceback;
    from vecdqn's import on it is one line, for vecdqn's scripts only (a program importing vecdqn
    keeps its own hook)."""
    root = Path(__file__).resolve().parents[1]
    code = f"import sys; sys.argv[0] = {str(root / script)!r}; import vecdqn; raise KeyboardInterrupt"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=root)
    assert proc.returncode == -signal.SIGINT  # the interpreter's own exit for an uncaught Ctrl-C
    if one_line:
        assert proc.stderr == "train.py: interrupted\n"
    else:
        assert "Traceback" in proc.stderr and proc.stderr.rstrip().endswith("KeyboardInterrupt")
