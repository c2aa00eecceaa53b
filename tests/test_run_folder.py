"""A run owns its folder; kept checkpoints and logged values do not depend on where a run was
stopped and resumed."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import catch_config

from vecdqn import checkpoint, cli
from vecdqn.preflight import ConfigError, check_log_dir
from vecdqn.run_dir import claim
from vecdqn.trainer import Trainer

ROOT = Path(__file__).resolve().parents[1]


def test_a_run_folder_is_one_process_s_and_an_unchosen_name_moves_aside(tmp_path):
    folder, fd = claim(tmp_path / "run", new=True, chosen=True)
    assert folder == tmp_path / "run"
    with pytest.raises(ConfigError, match=r"--run-name .*run: the run folder is in use by another process"):
        claim(tmp_path / "run", new=True, chosen=True)
    with pytest.raises(ConfigError, match="--resume .*run: the run folder is in use by another process"):
        claim(tmp_path / "run", new=False, chosen=True)
    # Two runs without --run-name in the same second: the second gets its own folder.
    other, fd2 = claim(tmp_path / "run", new=True, chosen=False)
    assert other == tmp_path / "run-2"
    (tmp_path / "run-2" / "config.json").write_text("{}")
    os.close(fd2)  # that run ended; its folder holds a run
    third, _ = claim(tmp_path / "run", new=True, chosen=False)
    assert third == tmp_path / "run-3"
    with pytest.raises(ConfigError, match="holds a run that stopped before its first checkpoint .* remove "):
        claim(tmp_path / "run-2", new=True, chosen=True)
    (tmp_path / "run-2" / "checkpoints").mkdir()
    (tmp_path / "run-2" / "checkpoints" / "latest.pt").write_bytes(b"")
    with pytest.raises(ConfigError, match="already holds a run; continue it with --resume"):
        claim(tmp_path / "run-2", new=True, chosen=True)
    os.close(fd)


def test_a_live_run_before_its_first_checkpoint_is_named_as_in_use_not_as_one_to_remove(tmp_path):
    """Checked before any worker starts: a run that trains there now wrote its config.json but no
    checkpoint yet, and the advice must not be to remove its folder."""
    config = catch_config(tmp_path, run_name="run")
    folder, fd = claim(tmp_path / "run", new=True, chosen=True)
    (folder / "config.json").write_text(config.to_json())
    try:
        with pytest.raises(ConfigError, match=r"^--run-name run: .*run is in use by another process") as err:
            check_log_dir(config, resuming=False)
        assert "remove" not in str(err.value) and len(str(err.value).splitlines()) == 1
    finally:
        os.close(fd)
    with pytest.raises(ConfigError, match="holds a run that stopped before its first checkpoint"):
        check_log_dir(config, resuming=False)  # its process ended: now the folder is one to remove


@pytest.mark.slow  # over 15 s: kept out of CI's 10 minutes (python -m pytest -m slow)
def test_the_same_run_name_started_twice_at_once_is_refused_in_one_line(tmp_path):
    """The first run holds its folder; the second, started meanwhile, exits 2 and leaves the
    first's folder as it was."""
    args = [sys.executable, str(ROOT / "scripts" / "train.py"), "--preset", "catch", "--total-steps", "3000",
            "--num-envs", "2", "--learning-starts", "100", "--log-dir", str(tmp_path), "--run-name", "run"]
    first = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(600):  # wait until the first holds the folder
            if (tmp_path / "run" / "config.json").exists():
                break
            subprocess.run(["sleep", "0.1"])
        second = subprocess.run(args, capture_output=True, text=True, timeout=120)
    finally:
        first.wait(timeout=300)
    assert second.returncode == 2, second.stderr
    assert len(second.stderr.strip().splitlines()) == 1 and "is in use by another process" in second.stderr
    assert first.returncode == 0, first.stderr[-2000:]
    assert len(list((tmp_path / "run").glob("events.out.tfevents.*"))) == 1


@pytest.mark.parametrize(("run_name", "message"), [
    ("x" * 300, "--run-name of 300 bytes is too long"),
    ("a_file", "is a file, not a run folder"),
])
def test_run_names_the_file_system_refuses_are_refused_in_one_line(tmp_path, run_name, message, capsys):
    (tmp_path / "a_file").write_text("not a run")
    code = cli.main(["--preset", "catch", "--log-dir", str(tmp_path), "--run-name", run_name])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and message in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file"]


def test_extending_a_finished_run_keeps_the_checkpoints_a_straight_run_keeps(tmp_path):
    options = dict(checkpoint_every=200, keep_checkpoints=True, learning_starts=100)
    Trainer(catch_config(tmp_path / "a", run_name="run", total_steps=1_200, **options), progress=False,
            handle_signals=False).run()
    Trainer(catch_config(tmp_path / "b", run_name="run", total_steps=600, **options), progress=False,
            handle_signals=False).run()
    Trainer.from_checkpoint(tmp_path / "b" / "run", {"total_steps": 1_200}, progress=False,
                            handle_signals=False).run()
    kept = [[step for step, _ in checkpoint.kept_checkpoints(tmp_path / run / "run")] for run in ("a", "b")]
    assert kept[0] == kept[1] == [200, 400, 600, 800, 1000, 1200]


def test_the_logged_learning_rate_is_the_schedule_s_before_updates_resume(tmp_path):
    """A resume without a saved replay refills it before learning: meanwhile charts/learning_rate
    is the schedule's value at each step, not the restored optimizer's last one."""
    schedule = "0:0.001,1000:0.0001"
    Trainer(catch_config(tmp_path, run_name="run", total_steps=400, learning_rate_schedule=schedule),
            progress=False, handle_signals=False).run()
    trainer = Trainer.from_checkpoint(tmp_path / "run", {"total_steps": 1_000}, progress=False,
                                      handle_signals=False)
    trainer.run()
    learner = trainer.core.learner
    assert learner.scalars(700)["charts/learning_rate"] == pytest.approx(0.001 - 0.7 * 0.0009)
