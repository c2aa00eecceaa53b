"""End-to-end runs of scripts/train.py: the smoke run, exit codes, bad input."""

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

ROOT = Path(__file__).resolve().parents[1]
TRAIN = str(ROOT / "scripts" / "train.py")

DESIGN_TAGS = [
    "charts/episodic_return", "charts/episodic_length", "charts/epsilon", "charts/beta",
    "charts/learning_rate", "charts/SPS", "losses/td_loss", "losses/q_values", "replay/size",
    "replay/priority_max",
]


def run_train(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.run([sys.executable, TRAIN, *args], capture_output=True, text=True, timeout=timeout, env=env)


def scalars(run_dir: Path) -> dict[str, list[float]]:
    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [e.value for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_smoke_run_on_breakout(tmp_path):
    """~2,000 agent steps, 2 envs, small buffer: exits 0, logs every documented tag, no NaN."""
    result = run_train(
        "--total-steps", "2000", "--num-envs", "2", "--buffer-size", "2000", "--learning-starts", "400",
        "--log-every", "400", "--log-dir", str(tmp_path), "--seed", "3",
        # Short games so whole-game statistics appear within the run.
        "--max-episode-frames", "1500",
        "--eval-every", "1000", "--eval-episodes", "1",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (run_dir,) = tmp_path.iterdir()
    assert run_dir.name.startswith("BreakoutNoFrameskip-v4__3__")
    values = scalars(run_dir)
    for tag in DESIGN_TAGS:
        assert tag in values, f"{tag} missing from {sorted(values)}"
        assert all(math.isfinite(v) for v in values[tag]), tag
    assert max(values["replay/size"]) > 1000
    # Periodic evaluation: scalars at agent steps 1000 and 2000, and a video of one game.
    assert len(values["eval/return_mean"]) == 2 and "eval/return_std" in values and "eval/hns" in values
    acc = EventAccumulator(str(run_dir), size_guidance={"images": 0})
    acc.Reload()
    assert "eval/video" in acc.Tags()["images"]
    video = acc.Images("eval/video")[0]
    assert video.encoded_image_string[:6] == b"GIF89a" and video.width == 80 and video.height == 105
    texts = acc.Tags()["tensors"]
    assert any(tag.startswith("config") for tag in texts)
    assert (run_dir / "checkpoints" / "final.pt").exists()
    assert (run_dir / "config.json").exists()
    assert "agent steps/s" in result.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (["--env-id", "BreakoutNoFrameskp-v4"], "BreakoutNoFrameskip-v4"),
        (["--num-envs", "0"], "--num-envs 0"),
        (["--total-steps", "-5"], "--total-steps -5"),
        (["--batch-size", "64", "--buffer-size", "32"], "--batch-size 64 is larger than --buffer-size 32"),
        (["--learning-starts", "8"], "--learning-starts 8 is below --batch-size 32"),
        (["--total-steps", "1000", "--learning-starts", "5000"], "--learning-starts 5000 is above --total-steps 1000"),
        (["--buffer-size", str(10**10)], "GiB"),
        (["--num-envs", "100000"], "--num-envs 100000"),  # open-file limit or memory, before any worker
    ],
)
def test_bad_input_exits_2_with_one_line(args, message, tmp_path):
    result = run_train(*args, "--log-dir", str(tmp_path), timeout=60)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert message in lines[0]
    assert "Traceback" not in result.stderr
    assert not any(tmp_path.iterdir()), "nothing may be written for a bad input"


def test_unwritable_log_dir_exits_2(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    result = run_train("--log-dir", str(blocker / "runs"), timeout=60)
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1
    assert "--log-dir" in result.stderr and "not writable" in result.stderr


def test_corrupt_checkpoint_on_resume_exits_2(tmp_path):
    ckpt = tmp_path / "run" / "checkpoints" / "latest.pt"
    ckpt.parent.mkdir(parents=True)
    ckpt.write_bytes(b"PK\x03\x04 this is not a whole checkpoint")
    before = ckpt.read_bytes()
    result = run_train("--resume", str(tmp_path / "run"), timeout=60)
    assert result.returncode == 2, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert str(ckpt) in result.stderr and "corrupt or truncated" in result.stderr
    assert ckpt.read_bytes() == before


@pytest.mark.parametrize(
    "args, message",
    [
        (["--env-id", "vecdqn/Catch-v0", "--screen-size", "10"], "--screen-size 10 is too small"),
        (["--env-id", "CartPole-v1"], "--env-id CartPole-v1"),
        (["--device", "cuda:abc"], "--device 'cuda:abc' is not one of auto, cpu, cuda, cuda:N, mps"),
        (["--per-alpha", "nan"], "argument --per-alpha: invalid float value: 'nan'"),
        # valid alone, but FIRE's one agent step of 100,000 frames ends every game it starts
        (["--frame-skip", "100000", "--total-steps", "100", "--learning-starts", "50"], "--frame-skip 100000"),
        # an Atari-only option that Catch would ignore
        (["--preset", "catch", "--noop-max", "5"], "--noop-max does not apply to --env-id vecdqn/Catch-v0"),
        # a new PQN run learns after each rollout: one shorter than a rollout would learn nothing
        (["--preset", "catch-pqn", "--total-steps", "100"], "--total-steps 100 ends the run before its first "
         "update, which comes after one rollout of --rollout-steps 16 x --num-envs 8 = 128 agent steps; use at "
         "least 128"),
        # the suggestions are ids vecdqn trains on (ALE games as <Game>NoFrameskip-v4, Catch), not every
        # registered id
        (["--env-id", "Seaquest"], "unknown env id 'Seaquest'; did you mean SeaquestNoFrameskip-v4?"),
        (["--env-id", "Gopherr-v5"], "unknown env id 'Gopherr-v5'; did you mean GopherNoFrameskip-v4?"),
    ],
)
def test_more_bad_input_exits_2(args, message, tmp_path):
    result = run_train(*args, "--log-dir", str(tmp_path), timeout=60)
    assert result.returncode == 2, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and message in result.stderr
    assert not any(tmp_path.iterdir())


def test_existing_run_name_is_not_overwritten(tmp_path):
    run = tmp_path / "mine"
    run.mkdir()
    (run / "config.json").write_text("{}")
    result = run_train("--preset", "catch", "--log-dir", str(tmp_path), "--run-name", "mine", timeout=60)
    # no checkpoint in it: nothing to resume, so the advice is another name
    assert result.returncode == 2 and "holds a run that stopped before its first checkpoint" in result.stderr
    assert (run / "config.json").read_text() == "{}"
    (run / "checkpoints").mkdir()
    (run / "checkpoints" / "latest.pt").write_bytes(b"")
    result = run_train("--preset", "catch", "--log-dir", str(tmp_path), "--run-name", "mine", timeout=60)
    assert result.returncode == 2 and f"already holds a run; continue it with --resume {run}" in result.stderr
    assert (run / "config.json").read_text() == "{}"
