"""Evaluation: the CLI end to end on a real ROM, its video, bad inputs, and the library on Catch."""

from __future__ import annotations

import ast
import importlib.util
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest
from helpers import catch_config
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from torch.utils.tensorboard import SummaryWriter

from vecdqn import checkpoint, metrics
from vecdqn.checkpoint import load_policy
from vecdqn.config import Config
from vecdqn.curves import CHECKPOINT_EVALS, checkpoint_evals, event_files, read_run
from vecdqn.evaluation import evaluate, periodic_eval_seed
from vecdqn.model import QNetwork
from vecdqn.presets import PRESETS
from vecdqn.trainer import Trainer

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "evaluate.py"


def _run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )


def _script():
    """scripts/evaluate.py as a module, for in-process calls of ``main``. Loaded from its path: a
    plain "import evaluate" could find another package of that name."""
    spec = importlib.util.spec_from_file_location("vecdqn_evaluate_script", SCRIPT)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script


def _table(stdout: str) -> dict[str, str]:
    """The printed ``name  value`` lines as a dict."""
    rows = {}
    for line in stdout.splitlines():
        name, _, value = re.split(r"(\s{2,})", line.strip(), maxsplit=1)
        rows[name] = value
    return rows


def test_evaluation_imports_no_trainer():
    tree = ast.parse((ROOT / "vecdqn" / "evaluation.py").read_text())
    imported = {
        node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module
    }
    imported |= {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    assert not {name for name in imported if name.startswith("vecdqn.trainer")}


# -- the command line on a real ROM ------------------------------------------------------------


@pytest.fixture(scope="module")
def breakout_run(tmp_path_factory, save_fresh_checkpoint):
    """scripts/evaluate.py on a fresh Breakout network: 2 games capped at 2000 frames."""
    run_dir = tmp_path_factory.mktemp("run")
    save_fresh_checkpoint(run_dir / "checkpoints" / "final.pt", "BreakoutNoFrameskip-v4", 4)
    video, report = run_dir / "best.mp4", run_dir / "scores.json"
    proc = _run(
        str(run_dir),
        "--episodes",
        "2",
        "--max-episode-frames",
        "2000",
        "--seed",
        "3",
        "--video",
        str(video),
        "--json",
        str(report),
        "--device",
        "cpu",
    )
    assert proc.returncode == 0, proc.stderr
    return proc, json.loads(report.read_text()), video


def test_cli_prints_every_field_and_the_json_holds_the_same_numbers(breakout_run):
    proc, data, _ = breakout_run
    rows = _table(proc.stdout)
    for name in [
        "checkpoint",
        "env",
        "episodes",
        "mean ± std",
        "median",
        "min",
        "max",
        "human-normalized",
        "scores",
    ]:
        assert name in rows, (name, proc.stdout)
    assert rows["checkpoint"].endswith("final.pt (agent step 1234)")
    assert "breakout" in rows["env"]
    assert int(rows["episodes"]) == data["episodes"] == 2
    mean, std = (float(x) for x in rows["mean ± std"].split(" ± "))
    assert mean == pytest.approx(data["mean"], abs=0.005)
    assert std == pytest.approx(data["std"], abs=0.005)
    for name in ["median", "min", "max"]:
        assert float(rows[name]) == pytest.approx(data[name], abs=0.005)
    assert float(rows["human-normalized"].split()[0]) == pytest.approx(data["hns"], abs=5e-5)

    # The JSON is self-consistent: statistics of its own per-game scores, HNS of their mean.
    returns = np.array(data["returns"])
    assert returns.shape == (2,)
    assert data["mean"] == pytest.approx(returns.mean())
    assert data["std"] == pytest.approx(returns.std())
    assert data["median"] == pytest.approx(np.median(returns))
    assert (data["min"], data["max"]) == (returns.min(), returns.max())
    assert data["hns"] == pytest.approx((returns.mean() - 1.7) / (30.5 - 1.7))
    assert (data["random_score"], data["human_score"]) == (1.7, 30.5)
    # Whole games, capped in frames: a game ends no later than the cap.
    assert all(0 < length <= 2000 for length in data["lengths"])
    assert all(
        t == (length == 2000) for t, length in zip(data["truncated"], data["lengths"], strict=True)
    )
    assert data["game"] == "breakout" and data["epsilon"] == 0.001 and data["seed"] == 3
    # Trained with FIRE after each life loss, so evaluated with it (the default: "as in training").
    assert data["fire_on_life_loss"] is True


def test_video_holds_every_raw_frame_of_the_best_game_at_native_size(breakout_run):
    _, data, video = breakout_run
    capture = cv2.VideoCapture(str(video))
    try:
        assert capture.isOpened()
        assert capture.get(cv2.CAP_PROP_FPS) == pytest.approx(60.0)
        frames = 0
        while True:
            ok, frame = capture.read()
            if not ok:
                break
            assert frame.shape == (210, 160, 3)
            frames += 1
    finally:
        capture.release()
    # The reset screen, then one frame per emulator frame of the best game.
    assert frames == data["lengths"][data["best_episode"]] + 1
    assert not list(video.parent.glob(".*.tmp.mp4")), "temporary videos left behind"


# -- bad inputs ------------------------------------------------------------------------------------


def _assert_one_line_exit_2(proc: subprocess.CompletedProcess, *words: str) -> None:
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    for word in words:
        assert word in lines[0], lines[0]


def test_missing_checkpoint_exits_2_with_one_line(tmp_path):
    _assert_one_line_exit_2(_run(str(tmp_path / "nope.pt")), "does not exist")
    # A run folder without checkpoints.
    _assert_one_line_exit_2(_run(str(tmp_path)), "latest.pt")


def test_corrupt_checkpoint_exits_2_with_one_line(tmp_path, save_fresh_checkpoint):
    good = save_fresh_checkpoint(tmp_path / "good.pt", "BreakoutNoFrameskip-v4", 4)
    bad = tmp_path / "bad.pt"
    bad.write_bytes(good.read_bytes()[:500])  # truncated
    _assert_one_line_exit_2(_run(str(bad)), "corrupt")


def test_a_config_that_does_not_fit_its_network_exits_2_before_play(tmp_path, capsys):
    """A Catch-preset network (44 px, 128 units) saved with a config that says 84 px: one line
    naming both shapes, exit 2, no game played (it was a RuntimeError traceback from the first
    forward pass, mat1 and mat2 shapes 1x3136 and 256x128)."""
    config = Config(**{**PRESETS["catch"], "screen_size": 84})
    network = QNetwork(3, screen_size=44, hidden_size=128)
    path = checkpoint.save_atomic({
        "format": checkpoint.CHECKPOINT_FORMAT, "config": config.to_dict(), "train_state": {"step": 10},
        "agent": {"online": network.state_dict()}, "n_actions": 3, "obs_shape": (4, 44, 44),
    }, tmp_path / "c.pt")
    assert _script().main([str(path), "--episodes", "1"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == (
        f"evaluate.py: error: checkpoint {path} holds a network for (4, 44, 44) observations, but its config makes "
        "(4, 84, 84) ones (frame_stack 4, screen_size 84); its config and network do not belong together\n")
    # The library too refuses such a pair before playing, with a ValueError naming the shapes.
    with pytest.raises(ValueError, match=r"cannot take a \(4, 84, 84\) observation of vecdqn/Catch-v0 \(mat1"):
        evaluate(network, config, episodes=1, epsilon=0.0, seed=0, device="cpu")


def _resave(path: Path, **changes: object) -> Path:
    """Re-save a checkpoint with some of its keys changed (a later vecdqn's format, say)."""
    return checkpoint.save_atomic({**checkpoint.load(path), **changes}, path)


def test_a_checkpoint_of_a_format_this_vecdqn_does_not_read_is_refused_before_play(tmp_path, capsys,
                                                                                   save_fresh_checkpoint):
    """As train.py --resume refuses it: one line naming the file, its format and the one read (it
    was played without a word)."""
    path = _resave(save_fresh_checkpoint(tmp_path / "c.pt", "vecdqn/Catch-v0", 3), format=999)
    assert _script().main([str(path), "--episodes", "1"]) == 2
    assert capsys.readouterr() == ("", f"evaluate.py: error: checkpoint {path} has format 999, written by no vecdqn "
                                       f"version; this version reads {checkpoint.CHECKPOINT_FORMAT!r}: evaluate it "
                                       "with the version that wrote it\n")


def test_every_checkpoint_refuses_a_kept_checkpoint_of_another_format_before_any_game(evaluated_catch_run, tmp_path,
                                                                                     capsys):
    run_dir = _copy(evaluated_catch_run[0], tmp_path)
    kept = dict(checkpoint.kept_checkpoints(run_dir))
    _resave(kept[400], format="vecdqn-checkpoint-999")
    assert _script().main([str(run_dir), "--every-checkpoint", "--episodes", "1"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1, err
    assert f"checkpoint {kept[400]} has format 'vecdqn-checkpoint-999', written by a newer vecdqn; " in err
    assert not (run_dir / CHECKPOINT_EVALS).exists()


@pytest.mark.parametrize(
    ("args", "word"),
    [
        (["--episodes", "0"], "--episodes"),
        (["--epsilon", "1.5"], "--epsilon"),
        (["--max-episode-frames", "0"], "--max-episode-frames"),
        (["--noop-max", "-1"], "--noop-max"),
        (["--noop-max", "100000000"], "use at most 107,999 no-op frames"),
        (["--video", "best.avi"], ".mp4"),
        (["--episodes", "many"], "--episodes"),
        (["--json", "."], "is a folder"),  # refused before any game is played
        (["--json", "no/such/folder/x.json"], "does not exist"),
        (["--seed", "-1"], "--seed -1"),
        (["--torch-threads", "-1"], "--torch-threads -1 must be in [0, 1024]"),
    ],
)
def test_bad_options_exit_2_with_one_line(tmp_path, capsys, save_fresh_checkpoint, args, word):
    # In-process: the subprocess tests above show no traceback escapes main.
    path = save_fresh_checkpoint(tmp_path / "c.pt", "BreakoutNoFrameskip-v4", 4)
    assert _script().main([str(path), *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and word in err[0], err


@pytest.mark.parametrize("args, line", [
    (["--max-episode-frames", "2000", "--noop-max", "5000"], "--noop-max 5000 is invalid; use at most 1,999 no-op "
                                                             "frames (fewer than the game's frame cap, "
                                                             "--max-episode-frames 2000; DQN uses 30)"),
    (["--max-episode-frames", "20"], "--noop-max 30 is invalid; use at most 19 no-op frames (fewer than the game's "
                                     "frame cap, --max-episode-frames 20; DQN uses 30)"),  # the default's
])
def test_noop_starts_as_long_as_the_frame_cap_are_refused_naming_both_flags(tmp_path, capsys, save_fresh_checkpoint,
                                                                            args, line):
    """As train.py names them, not as the env's fields (it said noop_max=5000), before any game."""
    path = save_fresh_checkpoint(tmp_path / "c.pt", "BreakoutNoFrameskip-v4", 4)
    assert _script().main([str(path), "--episodes", "1", *args]) == 2
    assert capsys.readouterr() == ("", f"evaluate.py: error: {line}\n")


def test_a_short_frame_cap_is_no_error_for_an_env_without_noop_starts(tmp_path, save_fresh_checkpoint):
    path = save_fresh_checkpoint(tmp_path / "c.pt", "vecdqn/Catch-v0", 3)
    assert _script().main([str(path), "--episodes", "1", "--max-episode-frames", "20"]) == 0


@pytest.mark.parametrize("args", [["--epi", "3"], ["--vid", "x.mp4"], ["--fire", "--episodes", "1"]])
def test_abbreviated_options_are_refused_with_one_line(tmp_path, capsys, save_fresh_checkpoint, args):
    """``--epi`` is not taken for ``--episodes``: a flag added later could make it mean another."""
    path = save_fresh_checkpoint(tmp_path / "c.pt", "BreakoutNoFrameskip-v4", 4)
    assert _script().main([str(path), *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("evaluate.py: error: unrecognized arguments"), err
    assert args[0] in err[0]


def test_the_games_are_played_on_the_threads_asked_one_by_default(tmp_path, monkeypatch, save_fresh_checkpoint):
    """One Pong game took 110 s on torch's default threads of a busy 2-core machine, 13 s on one."""
    import torch

    script = _script()
    path = save_fresh_checkpoint(tmp_path / "c.pt", "vecdqn/Catch-v0", 3, hidden_size=32)
    seen, play = [], script.evaluate
    monkeypatch.setattr(script, "evaluate", lambda *a, **k: (seen.append(torch.get_num_threads()), play(*a, **k))[1])
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        assert script.main([str(path), "--episodes", "1"]) == 0
        assert script.main([str(path), "--episodes", "1", "--torch-threads", "3"]) == 0
    finally:
        torch.set_num_threads(before)
    assert seen == [1, 3]


def test_a_bar_counts_the_games_where_stderr_is_a_terminal(tmp_path, capsys, monkeypatch, save_fresh_checkpoint):
    """evaluate.py printed nothing while it played (minutes for 30 Atari games); in a pipe or a log
    file it still prints nothing but its results."""
    script = _script()
    path = save_fresh_checkpoint(tmp_path / "c.pt", "vecdqn/Catch-v0", 3, hidden_size=32)
    bars, make = [], script.games_bar
    monkeypatch.setattr(script, "games_bar", lambda total: bars.append(make(total)) or bars[-1])
    assert script.main([str(path), "--episodes", "3"]) == 0
    out, err = capsys.readouterr()
    assert err == "" and bars[0].n == 0 and "scores" in out  # a disabled bar counts nothing
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert script.main([str(path), "--episodes", "3"]) == 0
    out, err = capsys.readouterr()
    assert bars[1].n == bars[1].total == 3
    assert "games:   0%| " in err and "scores" in out and "0/3" not in out  # the table alone on stdout


@pytest.mark.parametrize(("args", "said"), [
    (["--noop-max", "30"], "--noop-max does not apply"),
    (["--fire-on-life-loss"], "--fire-on-life-loss does not apply"),
    (["--noop-max=5", "--no-fire-on-life-loss"], "--noop-max, --no-fire-on-life-loss do not apply"),
    (["--every-checkpoint", "--noop-max", "0"], "--noop-max does not apply"),
])
def test_ale_only_options_are_refused_for_catch_before_any_game(tmp_path, capsys, monkeypatch, save_fresh_checkpoint,
                                                                args, said):
    """They were accepted and ignored; train.py refuses options its env would not use."""
    script = _script()
    save_fresh_checkpoint(tmp_path / "checkpoints" / "step_000000100.pt", "vecdqn/Catch-v0", 3, hidden_size=32)
    path = save_fresh_checkpoint(tmp_path / "checkpoints" / "latest.pt", "vecdqn/Catch-v0", 3, hidden_size=32)
    monkeypatch.setattr(script, "evaluate", lambda *a, **k: pytest.fail("a game was played"))
    target = tmp_path if "--every-checkpoint" in args else path
    assert script.main([str(target), *args]) == 2
    out, err = capsys.readouterr()
    them = "them" if "do not" in said else "it"
    assert out == "" and err == (f"evaluate.py: error: {said} to vecdqn/Catch-v0, the checkpoint's env, of the Catch "
                                 f"family, which has no no-op starts or lives: drop {them}\n")


# -- the library on a non-ALE env ------------------------------------------------------------


def test_catch_evaluates_records_rgb_frames_and_has_no_reference(tmp_path, save_fresh_checkpoint):
    path = save_fresh_checkpoint(
        tmp_path / "checkpoints" / "latest.pt", "vecdqn/Catch-v0", 3, hidden_size=32
    )
    policy = load_policy(tmp_path)  # a run folder: checkpoints/latest.pt
    network, config = policy.network, policy.config
    result = evaluate(
        network,
        config,
        episodes=4,
        epsilon=0.5,
        seed=7,
        device="cpu",
        record=True,
        video_path=tmp_path / "catch.mp4",
    )
    assert path.exists()
    assert set(result.returns) <= {-1.0, 1.0}
    assert list(result.lengths) == [9] * 4 and result.length_unit == "env steps"
    assert not result.truncated.any()
    assert result.hns is None and result.to_dict()["hns"] is None
    # Best episode: the reset frame and one per step, RGB at the env's native size.
    assert result.frames.shape == (10, 210, 160, 3) and result.frames.dtype == np.uint8
    assert result.returns[result.best_episode] == result.returns.max()
    capture = cv2.VideoCapture(str(tmp_path / "catch.mp4"))
    assert capture.get(cv2.CAP_PROP_FRAME_COUNT) == 10
    capture.release()
    # Same seed, same games.
    again = evaluate(network, config, episodes=4, epsilon=0.5, seed=7, device="cpu")
    np.testing.assert_array_equal(again.returns, result.returns)
    assert again.frames is None


def test_json_never_overwrites_a_file_that_is_not_json(tmp_path, capsys, save_fresh_checkpoint):
    """``--json`` pointed at the checkpoint itself (or any non-JSON file) is refused before playing;
    an earlier JSON report may be replaced."""
    script = _script()
    path = save_fresh_checkpoint(tmp_path / "c.pt", "BreakoutNoFrameskip-v4", 4)
    before = path.read_bytes()
    assert script.main([str(path), "--json", str(path)]) == 2
    assert "not a JSON file" in capsys.readouterr().err
    assert path.read_bytes() == before
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert script.main([str(path), "--json", str(blocker / "out.json")]) == 2
    assert "is a file, not a folder" in capsys.readouterr().err


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc, a folder that takes no new files")
def test_video_into_a_folder_that_takes_no_files_is_one_line_naming_it(tmp_path, capsys, save_fresh_checkpoint):
    """The error names the path given, before any game is played (not a temporary file after)."""
    path = save_fresh_checkpoint(tmp_path / "c.pt", "BreakoutNoFrameskip-v4", 4)
    assert _script().main([str(path), "--video", "/proc/x.mp4", "--episodes", "1"]) == 2
    assert capsys.readouterr().err == ("evaluate.py: error: --video /proc/x.mp4 is not writable: no file can be "
                                       "created in /proc; choose a path you can write\n")


# -- evaluating a run's kept checkpoints afterwards ------------------------------------------------
def test_kept_checkpoints_are_the_step_files_in_step_order(tmp_path):
    folder = tmp_path / "run" / "checkpoints"
    folder.mkdir(parents=True)
    for name in ("step_000001000.pt", "step_000000200.pt", "latest.pt", "step_best.pt", "final.pt", "step_\u00b2.pt"):
        (folder / name).write_bytes(b"")
    assert checkpoint.kept_checkpoints(tmp_path / "run") == [
        (200, folder / "step_000000200.pt"), (1000, folder / "step_000001000.pt")]
    assert checkpoint.kept_checkpoints(tmp_path) == []  # a folder without checkpoints/
    with pytest.raises(checkpoint.CheckpointError, match="not a run folder"):
        checkpoint.kept_checkpoints(folder / "latest.pt")


def test_a_checkpoint_without_its_save_time_is_dated_by_its_file(tmp_path, save_fresh_checkpoint):
    path = save_fresh_checkpoint(tmp_path / "old.pt", "vecdqn/Catch-v0", 3)  # written without saved_at
    os.utime(path, (1_700_000_000, 1_700_000_000))
    assert load_policy(path).saved_at == 1_700_000_000


@pytest.fixture(scope="module")
def evaluated_catch_run(tmp_path_factory):
    """A Catch run that evaluated itself and kept a checkpoint at the same steps."""
    # A kept checkpoint at 200, 400 and 600; the end (700) writes final.pt, not a kept one.
    config = catch_config(tmp_path_factory.mktemp("runs"), total_steps=700, eval_every=200, eval_episodes=4,
                          checkpoint_every=200, keep_checkpoints=True, run_name="run")
    Trainer(config, progress=False).run()
    return Path(config.log_dir) / "run", config


def _rows(stdout: str) -> dict[int, float]:
    """``{agent step: mean}`` from the printed table of --every-checkpoint."""
    rows = {}
    for line in stdout.split("\n\n")[0].splitlines()[1:]:  # the table, before the best and last lines
        step, _date, _time, mean, *_ = line.split()
        rows[int(step.replace(",", ""))] = float(mean)
    return rows


def test_every_checkpoint_plays_the_games_of_the_runs_own_evaluations(evaluated_catch_run, capsys):
    run_dir, config = evaluated_catch_run
    own = read_run(run_dir).evals
    assert list(own.steps) == [200, 400, 600]
    args = [str(run_dir), "--every-checkpoint", "--episodes", "4", "--epsilon", str(config.eval_epsilon)]
    assert _script().main(args) == 0
    printed = _rows(capsys.readouterr().out)
    assert list(printed) == [200, 400, 600]
    # Same weights and the same seed per step: the very scores the run logged.
    np.testing.assert_allclose(list(printed.values()), own.values, atol=0.005)

    # Into the run's TensorBoard, on the run's clock: one series, stamped with the save times.
    again = read_run(run_dir).evals
    np.testing.assert_allclose(again.values, own.values)
    saved = [load_policy(path).saved_at for _, path in checkpoint.kept_checkpoints(run_dir)]
    np.testing.assert_allclose(np.diff(again.minutes) * 60, np.diff(saved), atol=1e-3)
    assert again.minutes[0] >= 0

    # A second evaluation replaces the first one's results instead of adding a second series.
    assert _script().main([*args, "--seed", "123"]) == 0
    replaced = _rows(capsys.readouterr().out)
    np.testing.assert_allclose(read_run(run_dir).evals.values, list(replaced.values()), atol=0.005)


def test_keep_best_copies_the_best_evaluated_checkpoint_and_names_the_last(evaluated_catch_run, tmp_path,
                                                                          capsys):
    run_dir = _copy(evaluated_catch_run[0], tmp_path)
    assert _script().main([str(run_dir), "--every-checkpoint", "--episodes", "4", "--keep-best"]) == 0
    out = capsys.readouterr().out
    printed = _rows(out)
    best_step = max(printed, key=lambda step: (printed[step], -step))  # the earliest of equal maxima
    summary = out.split("\n\n")[1].splitlines()
    assert summary[0].startswith(f"best: agent step {best_step:,} (")
    assert f"mean {printed[best_step]:.2f} (of 3 evaluated checkpoints)" in summary[0]
    assert summary[1].startswith("last: agent step 600 (") and f"mean {printed[600]:.2f}" in summary[1]
    best = run_dir / checkpoint.BEST
    source = dict(checkpoint.kept_checkpoints(run_dir))[best_step]
    assert summary[2] == f"kept: {best} (a copy of checkpoints/{source.name})"
    assert best.read_bytes() == source.read_bytes()
    assert load_policy(best).step == best_step

    # Evaluated again with only the last checkpoint: the best is still chosen over every evaluation so far.
    assert _script().main([str(run_dir), "--every-checkpoint", "--episodes", "4", "--steps", "600", "--seed", "5",
                           "--keep-best"]) == 0
    again = capsys.readouterr().out
    merged = printed | _rows(again)
    best_step = max(merged, key=lambda step: (merged[step], -step))
    assert again.split("\n\n")[1].startswith(f"best: agent step {best_step:,} (")
    assert load_policy(best).step == best_step


def test_best_and_last_say_when_the_evaluations_they_compare_were_played_differently(evaluated_catch_run, tmp_path,
                                                                                   capsys):
    run_dir = _copy(evaluated_catch_run[0], tmp_path)
    assert _script().main([str(run_dir), "--every-checkpoint", "--episodes", "4"]) == 0
    assert "note:" not in capsys.readouterr().out
    logged = checkpoint_evals(run_dir)
    assert [e.value for e in logged["protocol/episodes"]] == [4.0, 4.0, 4.0]
    assert [e.step for e in logged["protocol/epsilon"]] == [200, 400, 600]
    assert _script().main([str(run_dir), "--every-checkpoint", "--episodes", "2", "--steps", "400:400"]) == 0
    out = capsys.readouterr().out
    assert "note: best and last compare evaluations played with different settings (2 with episodes 4; 1 with " \
           "episodes 2)" in out, out
    assert _script().main([str(run_dir), "--every-checkpoint", "--episodes", "4", "--steps", "400:400"]) == 0
    assert "note:" not in capsys.readouterr().out  # the same settings again throughout


def test_without_keep_best_no_copy_is_written_and_the_option_needs_every_checkpoint(evaluated_catch_run, tmp_path,
                                                                                   capsys):
    run_dir = _copy(evaluated_catch_run[0], tmp_path)
    assert _script().main([str(run_dir), "--every-checkpoint", "--episodes", "1", "--steps", "200"]) == 0
    assert "--keep-best copies it to" in capsys.readouterr().out
    assert not (run_dir / checkpoint.BEST).exists()
    assert _script().main([str(run_dir), "--keep-best"]) == 2
    assert "add --every-checkpoint" in capsys.readouterr().err


def test_every_checkpoint_writes_the_json_list(evaluated_catch_run, tmp_path):
    run_dir, _ = evaluated_catch_run
    report = tmp_path / "evals.json"
    proc = _run(str(run_dir), "--every-checkpoint", "--episodes", "1", "--json", str(report))
    assert proc.returncode == 0, proc.stderr
    records = json.loads(report.read_text())
    assert [r["checkpoint_step"] for r in records] == [200, 400, 600]
    assert [r["seed"] for r in records] == [periodic_eval_seed(7, step) for step in (200, 400, 600)]


@pytest.mark.parametrize("steps, want", [("400:", [400, 600]), ("::400", [400]), ("200:600:400", [200, 600]),
                                         (":400", [200, 400]), ("600", [600]),
                                         # Whole numbers as every count takes them: a sign, _ between digits.
                                         ("2_00::4_00", [200, 600]), ("+200:+4_00", [200, 400])])
def test_steps_selects_among_the_kept_checkpoints(evaluated_catch_run, tmp_path, capsys, steps, want):
    run_dir = _copy(evaluated_catch_run[0], tmp_path)
    assert _script().main([str(run_dir), "--every-checkpoint", "--episodes", "1", "--steps", steps]) == 0
    assert list(_rows(capsys.readouterr().out)) == want
    assert sorted(_evals(run_dir / CHECKPOINT_EVALS)) == want


def test_steps_counts_a_checkpoint_kept_past_its_multiple_as_that_multiple(tmp_path, capsys):
    # 3 envs step 3 agent steps at a time: the checkpoints for 200, 400 and 600 are kept at 201, 402 and 600.
    config = catch_config(tmp_path, num_envs=3, total_steps=700, checkpoint_every=200, keep_checkpoints=True,
                          run_name="run")
    Trainer(config, progress=False).run()
    capsys.readouterr()
    run_dir = Path(config.log_dir) / "run"
    assert [step for step, _ in checkpoint.kept_checkpoints(run_dir)] == [201, 402, 600]
    outs = []
    for steps, want in [("::400", [402]), ("200:600:400", [201, 600]), ("400:", [402, 600]), (":200", [201])]:
        assert _script().main([str(run_dir), "--every-checkpoint", "--episodes", "1", "--steps", steps]) == 0
        outs.append(capsys.readouterr().out)
        assert list(_rows(outs[-1])) == want, steps
    assert "(of 1 evaluated checkpoint)" in outs[0] and "(of 3 evaluated checkpoints)" in outs[-1]


@pytest.mark.parametrize("args, word", [
    (["--steps", "400:"], "add --every-checkpoint"),
    (["--every-checkpoint", "--steps", "4e5:"], "--steps '4e5:': FIRST: invalid int value: '4e5' (a whole number"),
    (["--every-checkpoint", "--steps", "1:2:3:4"], "not FIRST:LAST:EVERY"),
    (["--every-checkpoint", "--steps=-200:"], "--steps '-200:': FIRST -200 is below 0"),
    (["--every-checkpoint", "--steps", ":1__0"], "--steps ':1__0': LAST: invalid int value: '1__0'"),
    (["--every-checkpoint", "--steps", "\u00b2:"], "--steps '\u00b2:': FIRST: invalid int value"),
    (["--every-checkpoint", "--steps", "600:200"], "LAST 200 is before FIRST 600"),
    (["--every-checkpoint", "--steps", "::0"], "EVERY must be at least 1"),
    (["--every-checkpoint", "--steps", "700:"], "selects none of the 3 kept checkpoints"),
])
def test_bad_steps_exit_2_with_one_line_before_any_game(evaluated_catch_run, tmp_path, capsys, args, word):
    run_dir = _copy(evaluated_catch_run[0], tmp_path)
    assert _script().main([str(run_dir), "--episodes", "1", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and word in err, err
    assert not (run_dir / CHECKPOINT_EVALS).exists()


@pytest.mark.parametrize("extra, word", [(["--video", "best.mp4"], "--video"), ([], "kept no checkpoints")])
def test_every_checkpoint_refuses_what_it_cannot_do_with_one_line(tmp_path, capsys, save_fresh_checkpoint,
                                                                  extra, word):
    save_fresh_checkpoint(tmp_path / "run" / "checkpoints" / "latest.pt", "vecdqn/Catch-v0", 3)
    assert _script().main([str(tmp_path / "run"), "--every-checkpoint", *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and word in err, err
    assert not list((tmp_path / "run").glob("*tfevents*"))


def test_every_checkpoint_takes_a_run_folder_not_a_file(tmp_path, capsys, save_fresh_checkpoint):
    path = save_fresh_checkpoint(tmp_path / "step_000000100.pt", "vecdqn/Catch-v0", 3)
    assert _script().main([str(path), "--every-checkpoint"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "run folder" in err, err


def _copy(run_dir: Path, tmp_path: Path) -> Path:
    """The evaluated Catch run as it was trained (no checkpoint evaluations), for one test alone."""
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy, ignore=shutil.ignore_patterns(CHECKPOINT_EVALS))
    return copy


def _evals(folder: Path) -> dict[int, list[float]]:
    """``{step: [eval/return_mean values]}`` of a folder's event files, as TensorBoard reads them."""
    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    acc.Reload()
    out: dict[int, list[float]] = {}
    for e in acc.Scalars("eval/return_mean") if "eval/return_mean" in acc.Tags()["scalars"] else []:
        out.setdefault(e.step, []).append(e.value)
    return out


def _interrupt_on_play(script, monkeypatch, calls: int) -> None:
    """Ctrl-C during the ``calls``-th checkpoint's games."""
    play, played = script._play, []

    def interrupted(*args, **kwargs):
        played.append(1)
        if len(played) == calls:
            raise KeyboardInterrupt
        return play(*args, **kwargs)

    monkeypatch.setattr(script, "_play", interrupted)


def test_an_interrupted_evaluation_writes_nothing_and_keeps_the_earlier_results(evaluated_catch_run, tmp_path,
                                                                                  capsys, monkeypatch):
    run_dir = _copy(evaluated_catch_run[0], tmp_path)
    args = [str(run_dir), "--every-checkpoint", "--episodes", "2"]
    # Interrupted on its second checkpoint, a first evaluation writes no results.
    script = _script()
    _interrupt_on_play(script, monkeypatch, calls=2)
    assert script.main(args) == 130
    assert "left as it was" in capsys.readouterr().err
    assert not event_files(run_dir / CHECKPOINT_EVALS)

    assert _script().main(args) == 0
    complete = _rows(capsys.readouterr().out)
    assert list(complete) == [200, 400, 600]
    # A re-evaluation interrupted after its first row leaves the complete results whole.
    script = _script()
    _interrupt_on_play(script, monkeypatch, calls=2)
    assert script.main([*args, "--seed", "123"]) == 130
    assert len(_rows(capsys.readouterr().out)) == 1
    assert _evals(run_dir / CHECKPOINT_EVALS) == {step: [pytest.approx(v, abs=0.005)] for step, v in complete.items()}
    np.testing.assert_allclose(read_run(run_dir).evals.values, list(complete.values()), atol=0.005)


@pytest.mark.parametrize(("signum", "inherited", "code"), [(signal.SIGTERM, signal.SIG_DFL, 143),
                                                          (signal.SIGINT, signal.SIG_IGN, 130)])
def test_a_signal_stops_an_evaluation_as_ctrl_c_does(evaluated_catch_run, tmp_path, capsys, monkeypatch, signum,
                                                      inherited, code):
    """SIGTERM killed it without a word; SIGINT was ignored where a shell had started it in the
    background (``&`` leaves SIGINT ignored). Both now stop it as Ctrl-C: the one line, the
    results left as they were, 128 + the signal."""
    run_dir = _copy(evaluated_catch_run[0], tmp_path)
    script = _script()
    play = script._play

    def signalled(*args, **kwargs):
        signal.raise_signal(signum)
        return play(*args, **kwargs)

    monkeypatch.setattr(script, "_play", signalled)
    previous = signal.signal(signum, inherited)
    try:
        assert script.main([str(run_dir), "--every-checkpoint", "--episodes", "2"]) == code
        assert signal.getsignal(signum) == inherited  # put back
    finally:
        signal.signal(signum, previous)
    assert "left as it was" in capsys.readouterr().err
    assert not event_files(run_dir / CHECKPOINT_EVALS)


def test_a_later_evaluation_replaces_its_steps_and_keeps_the_others(evaluated_catch_run, tmp_path, capsys, caplog):
    """Merged with the earlier results: one value per step, also for a TensorBoard that showed
    the earlier ones (the new file starts with a restart marker)."""
    run_dir = _copy(evaluated_catch_run[0], tmp_path)
    args = [str(run_dir), "--every-checkpoint", "--episodes", "2"]
    assert _script().main(args) == 0
    first = _rows(capsys.readouterr().out)
    live = EventAccumulator(str(run_dir / CHECKPOINT_EVALS), size_guidance={"scalars": 0})
    live.Reload()
    (run_dir / "checkpoints" / "step_000000400.pt").unlink()
    assert _script().main([*args, "--seed", "123"]) == 0
    second = _rows(capsys.readouterr().out)
    assert list(second) == [200, 600]
    with caplog.at_level(logging.WARNING, logger="tensorboard"):
        read_run(run_dir)  # two files, the second opening with a restart marker: no purge warning
    assert not caplog.records, [r.getMessage() for r in caplog.records]
    want = {200: second[200], 400: first[400], 600: second[600]}
    assert _evals(run_dir / CHECKPOINT_EVALS) == {step: [pytest.approx(v, abs=0.005)] for step, v in want.items()}
    live.Reload()
    assert {e.step: e.value for e in live.Scalars("eval/return_mean")} == pytest.approx(want, abs=0.005)
    assert sorted(e.step for e in live.Scalars("eval/return_mean")) == [200, 400, 600]
    # The previous file stays for a reader on it; older ones go.
    assert len(event_files(run_dir / CHECKPOINT_EVALS)) == 2
    assert _script().main([*args, "--seed", "5"]) == 0
    third = _rows(capsys.readouterr().out)
    assert len(event_files(run_dir / CHECKPOINT_EVALS)) == 2
    want |= third
    assert _evals(run_dir / CHECKPOINT_EVALS) == {step: [pytest.approx(v, abs=0.005)] for step, v in want.items()}


def test_a_second_evaluation_of_a_run_at_the_same_time_is_refused(evaluated_catch_run, tmp_path, capsys):
    run_dir = _copy(evaluated_catch_run[0], tmp_path)
    args = [str(run_dir), "--every-checkpoint", "--episodes", "2"]
    first = metrics.EvalLog(run_dir)  # an evaluation under way
    try:
        assert _script().main(args) == 2
        out, err = capsys.readouterr()
        assert out == "" and len(err.splitlines()) == 1, err
        assert err.startswith(f"evaluate.py: error: {run_dir / CHECKPOINT_EVALS} is being written by another "
                              f"evaluation (process {os.getpid()})"), err
    finally:
        first.close()
    assert not event_files(run_dir / CHECKPOINT_EVALS)
    assert _script().main(args) == 0  # once the first is done


def test_evaluating_a_run_that_trains_leaves_its_event_stream_to_its_readers(evaluated_catch_run, tmp_path):
    """A reader following the training's event file (TensorBoard, tune.py's follower) goes on
    following it: the results go to a subfolder, a TensorBoard run of its own."""
    run_dir = _copy(evaluated_catch_run[0], tmp_path)
    training = SummaryWriter(str(run_dir))  # the run, still training
    try:
        training.add_scalar("charts/epsilon", 0.5, 1_000)
        training.flush()
        live = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
        live.Reload()
        before = {path.name: path.stat().st_size for path in event_files(run_dir)}
        assert _script().main([str(run_dir), "--every-checkpoint", "--episodes", "2"]) == 0
        assert {path.name: path.stat().st_size for path in event_files(run_dir)} == before
        training.add_scalar("charts/epsilon", 0.25, 2_000)
        training.flush()
        live.Reload()
        assert [e.step for e in live.Scalars("charts/epsilon")][-2:] == [1_000, 2_000]
    finally:
        training.close()
    assert sorted(_evals(run_dir / CHECKPOINT_EVALS)) == [200, 400, 600]


@pytest.mark.parametrize("args, kind", [(["--epsilon", "nan"], "float"), (["--epsilon=-inf"], "float"),
                                        (["--seed", "\u0661\u0662"], "int"), (["--episodes", "1e3"], "int")])
def test_numbers_must_be_finite_and_in_ascii_digits(tmp_path, capsys, args, kind):
    assert _script().main([str(tmp_path), *args]) == 2
    err = capsys.readouterr().err
    option = args[0].split("=")[0]
    assert err.startswith(f"evaluate.py: error: argument {option}: invalid {kind} value: ") and err.count("\n") == 1


@pytest.mark.parametrize("args, message", [
    (["--episodes", "1000000000001"], "argument --episodes: 1000000000001 is above 10**12, the largest count an "
                                      "option takes"),
    (["--max-episode-frames", "1" + "0" * 20], "argument --max-episode-frames: 100000000000000000000 is above 10**12"),
    (["--every-checkpoint", "--steps", "0:1000000000001"], "--steps '0:1000000000001': LAST: 1000000000001 is "
                                                           "above 10**12, the largest count an option takes"),
])
def test_counts_above_10_12_exit_2_with_one_line_naming_the_limit(tmp_path, capsys, args, message):
    """Every count stops where train.py's do (`vecdqn.cli.whole_number`), before any checkpoint is read."""
    assert _script().main([str(tmp_path), *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("evaluate.py: error: ") and err.count("\n") == 1 and message in err, err
