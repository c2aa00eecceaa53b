"""--track: Weights & Biases at TensorBoard's agent steps, offline (no network, no account).

The W&B run is read back from its local transaction log (``run-<id>.wandb``: a LevelDB-style log
of protobuf records) and compared with the TensorBoard event files of the same run.
"""

from __future__ import annotations

import importlib.machinery
import json
import os
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from vecdqn import cli
from vecdqn.tracking import RUN_ID_FILE

ROOT = Path(__file__).resolve().parents[1]
TRAIN = str(ROOT / "scripts" / "train.py")

# A Catch run of a few seconds with two evaluations (so a video too) and a checkpoint at the end.
CATCH = ["--preset", "catch", "--num-envs", "2", "--buffer-size", "2000", "--learning-starts", "100",
         "--hidden-size", "32", "--log-every", "100", "--eval-every", "300", "--eval-episodes", "2"]


def test_track_without_wandb_exits_2_with_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "wandb", None)  # what `import wandb` does without the package
    code = cli.main([*CATCH, "--total-steps", "600", "--track", "--log-dir", str(tmp_path)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and 'pip install -e ".[track]"' in err
    assert not any(tmp_path.iterdir())  # checked before any worker or run folder


def read_wandb_log(path: Path) -> list:
    """The records of a ``.wandb`` file: a 7-byte header, then 32 KiB blocks of records (crc32
    uint32, length uint16, type uint8: 1 full, 2 first, 3 middle, 4 last; data), zero-padded."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    records, pending, i = [], b"", 7
    while i + 7 <= len(data):
        if 32768 - i % 32768 < 7:  # block trailer
            i += 32768 - i % 32768
            continue
        _, length, kind = struct.unpack("<IHB", data[i:i + 7])
        if kind == 0:  # padding
            i += 32768 - i % 32768
            continue
        chunk, i = data[i + 7:i + 7 + length], i + 7 + length
        pending = chunk if kind in (1, 2) else pending + chunk
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
    return records


def wandb_history(records: list) -> list[dict]:
    """Each history row of the run as ``{key: value}`` (``/``-joined nested keys)."""
    rows = []
    for record in records:
        kind = record.WhichOneof("record_type")
        items = None
        if kind == "history":
            items = record.history.item
        elif kind == "request" and record.request.WhichOneof("request_type") == "partial_history":
            items = record.request.partial_history.item
        if items is not None:
            rows.append({(item.key or "/".join(item.nested_key)): json.loads(item.value_json) for item in items})
    return rows


def wandb_config(records: list) -> dict:
    config = {}
    for record in records:
        if record.WhichOneof("record_type") == "config":
            for item in record.config.update:
                config[item.key or "/".join(item.nested_key)] = json.loads(item.value_json)
        if record.WhichOneof("record_type") == "run" and record.run.config.update:
            for item in record.run.config.update:
                config[item.key or "/".join(item.nested_key)] = json.loads(item.value_json)
    return config


def tensorboard_scalars(run_dir: Path, after: int = -1) -> dict[str, dict[int, float]]:
    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: {e.step: e.value for e in acc.Scalars(tag) if e.step > after} for tag in acc.Tags()["scalars"]}


def synced_scalars(rows: list[dict], tags: set[str]) -> dict[str, dict[int, float]]:
    out: dict[str, dict[int, float]] = {}
    for row in rows:
        for key, value in row.items():
            if key in tags:
                out.setdefault(key, {})[row["_step"]] = value
    return out


def offline_run(wandb_dir: Path, run_id: str, nth: int = 0) -> Path:
    runs = sorted((wandb_dir / "wandb").glob(f"offline-run-*-{run_id}"))
    assert len(runs) > nth, sorted(p.name for p in (wandb_dir / "wandb").iterdir())
    return runs[nth]


def run_train(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, TRAIN, *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONUNBUFFERED": "1", **env})


def test_offline_track_mirrors_tensorboard_and_resumes_the_same_run(tmp_path):
    pytest.importorskip("wandb")
    wandb_dir = tmp_path / "wandb-files"
    wandb_dir.mkdir()
    env = {"WANDB_MODE": "offline", "WANDB_DIR": str(wandb_dir), "WANDB_SILENT": "true",
           "WANDB_CONFIG_DIR": str(tmp_path / "wandb-config"), "WANDB_CACHE_DIR": str(tmp_path / "wandb-cache")}
    done = run_train(*CATCH, "--total-steps", "600", "--track", "--wandb-project", "vecdqn-test",
                     "--wandb-group", "tests", "--log-dir", str(tmp_path / "runs"), "--run-name", "tracked", env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    run_dir = tmp_path / "runs" / "tracked"
    run_id = (run_dir / RUN_ID_FILE).read_text().strip()
    first = offline_run(wandb_dir, run_id)
    records = read_wandb_log(first / f"run-{run_id}.wandb")

    # The run: its name, project and group; the resolved configuration.
    (run,) = [r.run for r in records if r.WhichOneof("record_type") == "run"][:1]
    assert (run.run_id, run.display_name, run.project, run.run_group) == (run_id, "tracked", "vecdqn-test", "tests")
    config = wandb_config(records)
    saved = json.loads((run_dir / "config.json").read_text())
    for key in ("env_id", "total_steps", "learning_rate", "eval_every", "track"):
        assert config[key] == saved[key], key

    # Every TensorBoard scalar under the same tag, at the same agent steps, with the same value.
    board = tensorboard_scalars(run_dir)
    rows = wandb_history(records)
    synced = synced_scalars(rows, set(board))
    assert set(synced) == set(board)
    for tag, points in board.items():
        assert synced[tag] == pytest.approx(points), tag
    assert sorted(board["eval/return_mean"]) == [300, 600]
    # The evaluation videos (TensorBoard's animated GIFs) at their agent steps, as W&B images.
    videos = [row for row in rows if "eval/video/_type" in row]
    assert [row["_step"] for row in videos] == [300, 600]
    assert all(row["eval/video/_type"] == "image-file" and row["eval/video/format"] == "gif" for row in videos)
    for row in videos:
        assert (first / "files" / row["eval/video/path"]).read_bytes()[:6] == b"GIF89a"
    # One row per agent step, in step order.
    steps = [row["_step"] for row in rows]
    assert steps == sorted(set(steps))

    # Resume: the same W&B run id, a second local part holding the steps after the checkpoint.
    done = run_train("--resume", str(run_dir), "--total-steps", "900", env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (run_dir / RUN_ID_FILE).read_text().strip() == run_id
    second = offline_run(wandb_dir, run_id, nth=1)
    records = read_wandb_log(second / f"run-{run_id}.wandb")
    assert [r.run.run_id for r in records if r.WhichOneof("record_type") == "run"][0] == run_id
    board = tensorboard_scalars(run_dir, after=600)
    rows = wandb_history(records)
    synced = synced_scalars(rows, set(board))
    assert board["eval/return_mean"].keys() == {900}
    assert min(row["_step"] for row in rows) > 600  # the first part's steps are not sent again
    for tag, points in board.items():
        if points:
            assert synced.get(tag, {}) == pytest.approx(points), tag
    assert wandb_config(records)["total_steps"] == 900


def test_a_tracked_pqn_run_mirrors_its_own_tags(tmp_path):
    """--algo pqn --track: W&B holds every TensorBoard scalar of the run, PQN's own tags included."""
    pytest.importorskip("wandb")
    env = wandb_env(tmp_path)
    done = run_train("--preset", "catch-pqn", "--total-steps", "1024", "--log-every", "256", "--eval-every", "512",
                     "--eval-episodes", "2", "--track", "--wandb-project", "vecdqn-test", "--log-dir",
                     str(tmp_path / "runs"), "--run-name", "pqn", env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    run_dir = tmp_path / "runs" / "pqn"
    run_id = (run_dir / RUN_ID_FILE).read_text().strip()
    records = read_wandb_log(offline_run(tmp_path / "wandb-files", run_id) / f"run-{run_id}.wandb")
    assert wandb_config(records)["algo"] == "pqn"
    board = tensorboard_scalars(run_dir)
    assert {"pqn/lambda_return_mean", "pqn/update_seconds", "pqn/rollout_sps", "eval/return_mean"} <= set(board)
    synced = synced_scalars(wandb_history(records), set(board))
    assert set(synced) == set(board)
    for tag, points in board.items():
        assert synced[tag] == pytest.approx(points), tag


def wandb_env(tmp_path: Path) -> dict[str, str]:
    """Offline W&B, every file of it under ``tmp_path``."""
    wandb_dir = tmp_path / "wandb-files"
    wandb_dir.mkdir(exist_ok=True)
    return {"WANDB_MODE": "offline", "WANDB_DIR": str(wandb_dir), "WANDB_SILENT": "true",
            "WANDB_CONFIG_DIR": str(tmp_path / "wandb-config"), "WANDB_CACHE_DIR": str(tmp_path / "wandb-cache")}


@pytest.mark.slow  # over 15 s: kept out of CI's 10 minutes (python -m pytest -m slow)
def test_a_hard_killed_tracked_run_loses_no_history(tmp_path):
    """Killed (no clean exit) at agent step 1,000 with the last checkpoint at 800, then resumed to
    1,600: the W&B run holds every point TensorBoard shows, the killed part's included, once per
    agent step."""
    pytest.importorskip("wandb")
    env = wandb_env(tmp_path)
    killed = subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
        import os
        from vecdqn.trainer import Trainer
        from helpers import catch_config
        def log_then_die(trainer):  # called after each vector step's logging
            if trainer.core.state.step >= 1_000:
                trainer.core.flush_logs()
                os._exit(9)  # killed hard at step 1,000; the last checkpoint is step 800
        Trainer(catch_config({str(tmp_path)!r}, total_steps=2_000, checkpoint_every=400, run_name="run", track=True,
                             wandb_project="vecdqn-test", eval_every=300, eval_episodes=2),
                progress=False, on_step=log_then_die).run()
    """)], capture_output=True, text=True, timeout=300,
        env={**os.environ, **env, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'tests'}"})
    assert killed.returncode == 9, killed.stderr[-3000:]
    run_dir = tmp_path / "run"
    done = run_train("--resume", str(run_dir), "--total-steps", "1600", env=env)
    assert done.returncode == 0, done.stderr[-3000:]

    run_id = (run_dir / RUN_ID_FILE).read_text().strip()
    parts = sorted((tmp_path / "wandb-files" / "wandb").glob(f"offline-run-*-{run_id}"))
    assert len(parts) == 2
    assert wandb_history(read_wandb_log(parts[0] / f"run-{run_id}.wandb")) == []  # the killed part: nothing
    rows = wandb_history(read_wandb_log(parts[1] / f"run-{run_id}.wandb"))
    steps = [row["_step"] for row in rows]
    assert steps == sorted(set(steps))  # one row per agent step
    board = tensorboard_scalars(run_dir)
    assert len(board["charts/epsilon"]) == 16 and min(board["charts/epsilon"]) == 100
    synced = synced_scalars(rows, set(board))
    assert set(synced) == set(board)
    for tag, points in board.items():
        assert synced[tag] == pytest.approx(points), tag
    # The killed part's evaluation videos too (300, 600; its 900 is superseded by the resumed part's).
    assert tensorboard_images(run_dir, "eval/video") == [300, 600, 900, 1_200, 1_500]
    assert [row["_step"] for row in rows if "eval/video/_type" in row] == [300, 600, 900, 1_200, 1_500]


def tensorboard_images(run_dir: Path, tag: str) -> list[int]:
    acc = EventAccumulator(str(run_dir), size_guidance={"images": 0})
    acc.Reload()
    return [e.step for e in acc.Images(tag)]


class FakeRun:
    """What `tracking.start` uses of a ``wandb.Run``, resumed online from W&B's server."""

    def __init__(self, starting_step: int):
        self.resumed, self.starting_step, self.offline = starting_step > 0, starting_step, False
        self.logged: list[tuple[int, dict]] = []
        self.finished = False

    def log(self, data: dict, step: int, commit: bool) -> None:
        self.logged.append((step, data))

    def finish(self) -> None:
        self.finished = True


@pytest.mark.parametrize("server_step", [500, 1_000])
def test_online_resume_sends_what_the_server_lacks_and_no_step_twice(tmp_path, monkeypatch, server_step):
    """Online, W&B's server says where the run stands: the resumed part sends the event files'
    points after it, up to the checkpoint's step (800), then its own after the checkpoint's; the
    steps the server holds past the checkpoint (a killed process's 801-1,000) are not sent again."""
    pytest.importorskip("wandb")
    from torch.utils.tensorboard import SummaryWriter

    from vecdqn import tracking

    run_dir = tmp_path / "run"
    writer = SummaryWriter(str(run_dir))
    for step in range(100, 1_001, 100):  # the killed process's points, to 1,000
        writer.add_scalar("charts/epsilon", step / 1000, step)
    writer.close()
    (run_dir / RUN_ID_FILE).write_text("abcd1234\n")
    fake = FakeRun(starting_step=server_step + 1)
    module = type(sys)("wandb")
    module.__spec__ = importlib.machinery.ModuleSpec("wandb", None)  # found by `tracking.require_wandb`
    module.init = lambda **kwargs: fake
    monkeypatch.setitem(sys.modules, "wandb", module)
    tracker = tracking.start(run_dir, {"wandb_project": "p"}, resume_step=800)
    assert [step for step, _ in fake.logged] == (list(range(600, 801, 100)) if server_step == 500 else [])
    for step in (900, 1_000, 1_100, 1_200):  # the resumed process's own points
        tracker.scalars(step, {"charts/epsilon": -step})
        tracker.reached(step)
    tracker.finish()
    sent = [step for step, _ in fake.logged]
    assert sent == sorted(set(sent)) and sent[-2:] == [1_100, 1_200] and fake.finished
    assert [data["charts/epsilon"] for step, data in fake.logged if step > 800] == (
        [-900, -1_000, -1_100, -1_200] if server_step == 500 else [-1_100, -1_200])
    assert (run_dir / tracking.STEP_FILE).read_text() == "1200\n"


@pytest.mark.parametrize("project, found", [("myteam/catch", "/"), pytest.param("a" * 129, "129 characters", id="129"),
                                            ("run:1", ":"), ("what?#", "(found # ?)")])
def test_a_project_name_wandb_refuses_is_one_line_before_anything_starts(tmp_path, capsys, project, found):
    pytest.importorskip("wandb")
    logs = tmp_path / "runs"
    code = cli.main([*CATCH, "--total-steps", "600", "--track", "--wandb-project", project, "--log-dir", str(logs),
                     "--run-name", "run_a"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.splitlines()) == 1, err
    assert err.startswith(f"train.py: error: --wandb-project {project[:20]}") and found in err, err
    assert not logs.exists()  # no run folder to block the corrected command


def test_a_project_name_with_an_entity_says_how_to_give_both(capsys):
    pytest.importorskip("wandb")
    assert cli.main([*CATCH, "--track", "--wandb-project", "myteam/catch"]) == 2
    assert capsys.readouterr().err.strip().endswith("give --wandb-entity myteam --wandb-project catch")


@pytest.mark.parametrize("project", ["vecdqn", pytest.param("a" * 128, id="128"), pytest.param("a" * 129, id="129"),
                                     "team/p", "back\\slash", "hash#", "q?",
                                     "per%cent", "co:lon", "dots.and-dashes_ok", "spaces are fine", "ünïcödé"])
def test_the_project_name_rule_is_wandbs_own(project):
    """`check_wandb_names` refuses exactly what the installed wandb's settings refuse."""
    wandb = pytest.importorskip("wandb")
    from vecdqn.tracking import check_wandb_names

    try:
        wandb.Settings(project=project)
        refused_by_wandb = False
    except Exception:
        refused_by_wandb = True
    try:
        check_wandb_names({"wandb_project": project})
        refused = False
    except ValueError:
        refused = True
    assert refused == refused_by_wandb
