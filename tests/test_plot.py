"""Learning curves read from event files (vecdqn/curves.py), seeds aggregated to bands, the
Markdown tables of vecdqn/tables.py, and scripts/plot.py's figure, tables and errors.

The runs here are event files written with the trainer's own writer (SummaryWriter) and the
checkpoint evaluations' (EvalLog) at known steps, wall times and values, so every curve point and
table cell is checked against a hand computation.
"""

import dataclasses
import importlib.util
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from torch.utils.tensorboard import SummaryWriter

from vecdqn.config import Config
from vecdqn.curves import (
    EVAL_TAG,
    TRAIN_TAG,
    RunCurves,
    Scalars,
    eval_band,
    pauses,
    read_run,
    report,
    seed_groups,
    trailing_mean,
    train_band,
    training_minutes,
)
from vecdqn.metrics import EvalLog
from vecdqn.scores import HUMAN_RANDOM_SCORES, PUBLISHED_SCORES
from vecdqn.tables import markdown, signed, suite_rows, suite_table

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "plot.py"
T0 = 1_700_000_000.0  # wall time of each run's first event (the event file opening), in seconds
CONFIG = {"env_id": "vecdqn/Catch-v0", "preset": "catch", "n_step": 1, "total_steps": 10_000, "log_dir": "runs"}
MISSING = 'plot.py: error: -o needs matplotlib: pip install -e ".[plot]" (without -o only the tables are printed)\n'


def _load_plot():
    spec = importlib.util.spec_from_file_location("plot_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


plot = _load_plot()


def write_events(folder: Path, opened: float, scalars: dict[str, list[tuple[int, float, float]]]) -> None:
    """One event file opened at wall time ``opened``; ``scalars[tag]`` is ``(step, value, wall_time)`` rows."""
    folder.mkdir(parents=True, exist_ok=True)
    real_time = time.time
    # The file's name (files are read in name order) and its first event take the opening time.
    time.time = lambda: opened
    try:
        writer = SummaryWriter(str(folder))
    finally:
        time.time = real_time
    for tag, rows in scalars.items():
        for step, value, wall_time in rows:
            writer.add_scalar(tag, value, step, walltime=wall_time)
    writer.close()


def game_rows(seed: int, games: int = 250) -> list[tuple[int, float, float]]:
    """Game i finishes at agent step 40 (i + 1), 30 + 3 i seconds after the run opened."""
    returns = np.random.default_rng(seed).integers(-5, 20, size=games)
    return [(40 * (i + 1), float(r), T0 + 30 + 3 * i) for i, r in enumerate(returns)]


def eval_rows(seed: int) -> list[tuple[int, float, float]]:
    """Evaluations every 2000 agent steps, each 12 minutes after the previous."""
    return [(2000 * k, 10.0 * k + seed, T0 + 720 * k) for k in range(1, 6)]


def make_run(folder: Path, seed: int, evaluations: bool = True, **config) -> Path:
    scalars = {TRAIN_TAG: game_rows(seed), "charts/SPS": [(s, 500.0, T0 + s / 10) for s in range(1000, 10_001, 1000)]}
    if evaluations:
        scalars[EVAL_TAG] = eval_rows(seed)
    write_events(folder, T0, scalars)
    (folder / "config.json").write_text(json.dumps({**CONFIG, "seed": seed, "run_name": folder.name, **config}))
    return folder


@pytest.fixture(scope="module")
def two_seeds(tmp_path_factory) -> list[Path]:
    """Two seeds of one experiment in one folder; read-only for the tests that share them."""
    runs = tmp_path_factory.mktemp("runs")
    return [make_run(runs / "catch__1", 1), make_run(runs / "catch__2", 2)]


# --- vecdqn/curves.py ----------------------------------------------------------------------------------------


def test_trailing_mean_by_hand():
    np.testing.assert_allclose(trailing_mean(np.array([1.0, 2, 3, 4, 5]), window=3), [1, 1.5, 2, 3, 4])
    np.testing.assert_allclose(trailing_mean(np.array([4.0, 0, 2]), window=100), [4, 2, 2])
    assert trailing_mean(np.array([]), window=100).shape == (0,)
    with pytest.raises(ValueError, match="window 0"):
        trailing_mean(np.array([1.0]), window=0)


def test_read_run_gives_every_game_the_last_100_mean_and_minutes_from_wall_time(two_seeds):
    run = read_run(two_seeds[0])
    rows = game_rows(1)
    returns = [r for _, r, _ in rows]
    assert run.games.steps.dtype == np.int64 and run.games.steps.tolist() == [s for s, _, _ in rows]
    assert run.games.values.tolist() == returns
    for i in [0, 1, 50, 98, 99, 100, 101, 249]:
        last = returns[max(0, i - 99) : i + 1]
        assert run.train.values[i] == pytest.approx(sum(last) / len(last))
        assert run.games.minutes[i] == pytest.approx((30 + 3 * i) / 60)
    assert run.evals.steps.tolist() == [2000, 4000, 6000, 8000, 10_000]
    assert run.evals.values.tolist() == [11.0, 21.0, 31.0, 41.0, 51.0]
    np.testing.assert_allclose(run.evals.minutes, [12, 24, 36, 48, 60])
    assert run.config["seed"] == 1 and run.last_step == 10_000


def test_values_at_steps_between_games(two_seeds):
    run = read_run(two_seeds[0], window=10)
    returns = [r for _, r, _ in game_rows(1)]
    # Step 39: no game yet; step 439: games 0..9 finished (at steps 40..400); 440: games 1..10.
    got = run.train_return_at(np.array([39, 439, 440]))
    assert np.isnan(got[0])
    assert got[1:].tolist() == pytest.approx([np.mean(returns[0:10]), np.mean(returns[1:11])])
    # The clock is every scalar event: game i at step 40 (i + 1), 30 + 3 i s; SPS at 1000 at 100 s.
    # Step 1500 lies between games 36 and 37; at step 1000 the later of game 24 and SPS counts.
    got = run.minutes_at(np.array([1500, 1520, 1000]))
    assert got.tolist() == pytest.approx([(30 + 3 * 36.5) / 60, (30 + 3 * 37) / 60, max(100, 30 + 3 * 24) / 60])


def test_a_resumed_run_drops_the_events_after_its_checkpoint(tmp_path):
    folder = tmp_path / "resumed"
    # Logged up to step 100, stopped, resumed from a checkpoint before step 60.
    write_events(folder, T0, {TRAIN_TAG: [(s, 1.0, T0 + s) for s in range(10, 101, 10)]})
    write_events(folder, T0 + 5000, {TRAIN_TAG: [(s, 2.0, T0 + 5000 + s) for s in range(60, 151, 10)]})
    run = read_run(folder)
    assert run.games.steps.tolist() == list(range(10, 51, 10)) + list(range(60, 151, 10))
    assert run.games.values.tolist() == [1.0] * 5 + [2.0] * 10
    assert run.games.minutes[0] == pytest.approx(10 / 60)  # from the first file's opening
    # The pause, from the first file's last event (T0 + 100) to the second's opening (T0 + 5000),
    # is not training time: step 60 of the second file is at 100 + 60 s, not 5060 s.
    assert run.games.minutes[5:].tolist() == pytest.approx([(100 + s) / 60 for s in range(60, 151, 10)])
    assert run.minutes_at(np.array([150])).tolist() == pytest.approx([250 / 60])
    assert run.config is None


def test_pauses_are_the_gaps_between_event_files():
    # Three invocations: 0-100 s, a second from 400 s, a third overlapping the second (no pause).
    paused = pauses([(0.0, 100.0), (400.0, 700.0), (650.0, 900.0), (1000.0, 1100.0)])
    assert paused.tolist() == [[100.0, 400.0], [900.0, 1000.0]]
    assert pauses([(5.0, 9.0)]).shape == (0, 2)
    # A time inside a pause counts the pause only up to it.
    minutes = training_minutes(np.array([50.0, 250.0, 500.0, 1050.0]), 0.0, paused)
    assert (minutes * 60).tolist() == pytest.approx([50.0, 100.0, 200.0, 1050.0 - 300.0 - 100.0])


def test_report_rows_at_evaluations_or_every_n_steps(two_seeds, tmp_path):
    run = read_run(two_seeds[0])
    table = report(run)
    assert table["steps"].tolist() == [2000, 4000, 6000, 8000, 10_000]
    np.testing.assert_allclose(table["minutes"], [12, 24, 36, 48, 60])
    assert table["eval_return"].tolist() == [11.0, 21.0, 31.0, 41.0, 51.0]
    returns = [r for _, r, _ in game_rows(1)]
    assert table["train_return"][0] == pytest.approx(np.mean(returns[0:50]))  # game 49 ends at step 2000
    assert table["train_return"][4] == pytest.approx(np.mean(returns[150:250]))

    plain = read_run(make_run(tmp_path / "plain", 3, evaluations=False))
    table = report(plain)
    assert table["steps"].tolist() == list(range(1000, 10_001, 1000))  # 10 rows by default
    assert np.isnan(table["eval_return"]).all()
    assert report(plain, every=3000)["steps"].tolist() == [3000, 6000, 9000, 10_000]  # and the last step


def test_seeds_are_grouped_and_experiments_named_by_what_differs():
    base = {**CONFIG, "log_dir": "runs"}
    configs = [
        {**base, "seed": 1, "run_name": "a", "total_steps": 10_000},
        {**base, "seed": 2, "run_name": "b", "total_steps": 20_000, "device": "cuda"},
        {**base, "seed": 1, "run_name": "c", "n_step": 3},
        {**base, "env_id": "BreakoutNoFrameskip-v4", "preset": "", "seed": 1},
        None,
    ]
    group, labels = seed_groups(configs, ["a", "b", "c", "d", "e"])
    assert group == [0, 0, 1, 2, 3]
    assert labels == [
        "vecdqn/Catch-v0 (preset catch) n_step=1",
        "vecdqn/Catch-v0 (preset catch) n_step=3",
        "BreakoutNoFrameskip-v4",
        "e",
    ]


def test_labels_show_as_many_differing_options_as_it_takes_to_tell_groups_apart():
    """Four options differ; the first three in name order (a, b, c) do not tell groups 0 and 1 apart."""
    configs = [{**CONFIG, "a": 1, "b": 1, "c": 1, "d": d, "seed": 1} for d in (1, 2)]
    configs.append({**CONFIG, "a": 2, "b": 2, "c": 2, "d": 1, "seed": 1})
    _, labels = seed_groups(configs, ["x", "y", "z"])
    base = "vecdqn/Catch-v0 (preset catch)"
    assert labels == [f"{base} a=1 b=1 c=1 d=1", f"{base} a=1 b=1 c=1 d=2", f"{base} a=2 b=2 c=2 d=1"]
    five = [{**CONFIG, "a": k, "b": k, "c": k, "d": k, "e": k, "seed": 1} for k in (1, 2)]
    assert seed_groups(five, ["x", "y"])[1] == [f"{base} a=1 b=1 c=1 ...", f"{base} a=2 b=2 c=2 ..."]


def _curves(name: str, **config) -> RunCurves:
    """A run's curves in memory: three games, two evaluations (values by hand, no event files)."""
    steps, minutes = np.array([40, 80, 120]), np.array([1.0, 2.0, 3.0])
    games = Scalars(steps, minutes, np.array([1.0, 2.0, 3.0]))
    evals = Scalars(np.array([60, 120]), np.array([1.5, 3.0]), np.array([1.0, 2.0]))
    return RunCurves(Path(name), {**CONFIG, **config}, games, games, evals, games, window=100)


def test_twelve_settings_of_six_seeds_are_twelve_bands():
    """72 runs: each setting one colour (all twelve different), one band and one mean line per
    panel over its six faint seeds, and one legend entry naming the setting and its seeds."""
    pytest.importorskip("matplotlib")
    from matplotlib.collections import PolyCollection
    from matplotlib.colors import to_hex

    rates = [1e-4 * (k + 1) for k in range(12)]
    runs = [_curves(f"lr{k}_s{seed}", learning_rate=rate, seed=seed) for k, rate in enumerate(rates)
            for seed in range(1, 7)]
    group, labels = plot.legend_labels(runs)
    assert group == [k for k in range(12) for _ in range(6)]
    fig = plot.figure(runs, group, labels)
    try:
        for ax in fig.axes:
            lines = ax.get_lines()
            assert len(lines) == 12 * 7  # per setting: six faint seeds, then the mean
            assert [line.get_alpha() for line in lines] == ([plot.FAINT["alpha"]] * 6 + [None]) * 12
            assert len([c for c in ax.collections if isinstance(c, PolyCollection)]) == 12
            colours = [to_hex(line.get_color()) for line in lines]
            assert len(set(colours)) == 12 and all(colours[i] == colours[i - i % 7] for i in range(84))
        (legend,) = fig.legends
        texts = [t.get_text() for t in legend.get_texts()]
        assert texts == labels
        seeds = "seeds 1, 2, 3, 4, 5, 6: mean, min to max"
        assert texts == [f"vecdqn/Catch-v0 (preset catch) learning_rate={rate}, {seeds}" for rate in rates]
    finally:
        plot.load_pyplot().close(fig)


def test_runs_without_evaluations_get_no_evaluation_panels():
    """Without any evaluation the figure is the training row alone (no empty panels); one run
    with evaluations brings the evaluation row back for all."""
    pytest.importorskip("matplotlib")
    none = Scalars(np.array([], dtype=np.int64), np.array([]), np.array([]))
    bare = _curves("a", seed=1)
    bare = dataclasses.replace(bare, evals=none)
    # One run: its line; two seeds: two faint lines and their mean.
    for runs, panels, lines in (([bare], 2, 1), ([bare, _curves("b", seed=2)], 4, 3)):
        fig = plot.figure(runs, *plot.legend_labels(runs))
        try:
            assert len(fig.axes) == panels
            assert all(len(ax.get_lines()) == lines for ax in fig.axes[:2])
            assert fig.axes[-2].get_xlabel() == "agent steps"
        finally:
            plot.load_pyplot().close(fig)


def test_tables_without_output_need_no_figure(two_seeds, capsys):
    assert plot.main([str(p) for p in two_seeds]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    first, second = out.split("\n\n")
    title, header, *rows = first.splitlines()
    assert title == f"{two_seeds[0]}: vecdqn/Catch-v0 (preset catch), seed 1; 250 games, agent step 10000"
    assert header.split("  ") == ["agent steps", "minutes", "train return (last 100)", "eval return"]
    returns = [r for _, r, _ in game_rows(1)]
    assert rows[0].split() == ["2000", "12.0", f"{np.mean(returns[0:50]):.2f}", "11.00"]
    assert len(rows) == 5
    assert "seed 2" in second.splitlines()[0]


def test_png_is_written(two_seeds, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    other = make_run(tmp_path / "nstep3", 1, evaluations=False, n_step=3)
    png = tmp_path / "curves.png"
    assert plot.main([*map(str, two_seeds), str(other), "-o", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert capsys.readouterr().err == f"wrote {png}\n"


def test_tables_need_no_matplotlib(two_seeds, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` now raises ImportError
    assert plot.main([str(two_seeds[0])]) == 0
    assert capsys.readouterr().out.startswith(f"{two_seeds[0]}: ")
    assert plot.main([str(two_seeds[0]), "-o", str(tmp_path / "curves.png")]) == 2
    assert capsys.readouterr() == ("", MISSING)


def test_missing_matplotlib_is_one_line(two_seeds, tmp_path):
    png = tmp_path / "curves.png"
    block = (  # None in sys.modules makes `import matplotlib` raise ImportError
        "import runpy, sys; sys.modules['matplotlib'] = None; "
        f"sys.argv = ['scripts/plot.py', {str(two_seeds[0])!r}, '-o', {str(png)!r}]; "
        f"runpy.run_path({str(SCRIPT)!r}, run_name='__main__')"
    )
    done = subprocess.run([sys.executable, "-c", block], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr == MISSING
    assert done.stdout == "" and not png.exists()


@pytest.mark.parametrize(
    "args, message",
    [
        (["{tmp}/missing"], "does not exist"),
        (["{tmp}/a_file"], "is a file, not a run folder"),
        (["{tmp}/empty"], "is not a run folder: it holds no TensorBoard event files"),
        (["{runs}"], "holds runs, not event files: pass its run folders (catch__1, catch__2)"),
        (["{run}", "{run}"], "is given twice"),
        (["{run}", "-o", "{tmp}/curves.pdf"], "must end in .png"),
        (["{run}", "-o", "{tmp}/nowhere/curves.png"], "does not exist; create it first"),
        (["{run}", "-o", "{tmp}/a_file/curves.png"], "is a file, not a folder"),
        (["{run}", "-o", "{tmp}/empty.png"], "is a folder; give a file name"),
        (["{run}", "--window", "0"], "--window 0 must be at least 1 game"),
        (["{run}", "--every", "-5"], "--every -5 must be a positive number"),
        (["{run}", "--threshold", "18"], "--threshold 18 goes with --markdown"),
        (["{run}", "--markdown", "--threshold", "nan"], "argument --threshold: invalid float value: 'nan'"),
        (["{run}", "--out", "x.png"], "unrecognized arguments: --out x.png (see plot.py --help)"),
        ([], "the following arguments are required: RUN (see plot.py --help)"),
    ],
)
def test_bad_input_is_one_line(two_seeds, tmp_path, capsys, args, message):
    (tmp_path / "a_file").write_text("not a run")
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty.png").mkdir()
    argv = [a.format(tmp=tmp_path, run=two_seeds[0], runs=two_seeds[0].parent) for a in args]
    assert plot.main(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("plot.py: error: ") and err.count("\n") == 1 and message in err


def test_broken_config_is_one_line(tmp_path, capsys):
    run = make_run(tmp_path / "broken", 1)
    (run / "config.json").write_text("{not json")
    assert plot.main([str(run)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"plot.py: error: {run / 'config.json'} is not readable JSON") and err.count("\n") == 1


def test_event_files_of_random_bytes_are_called_unreadable_not_empty(tmp_path, capsys):
    run = make_run(tmp_path / "random", 1)
    (events,) = run.glob("*tfevents*")
    events.write_bytes(np.random.default_rng(0).bytes(4096))
    assert plot.main([str(run)]) == 2
    assert capsys.readouterr() == ("", f"plot.py: error: {events} is unreadable: its first record fails its CRC-32 "
                                       "check (a corrupt file, or not a TensorBoard event file)\n")
    events.write_bytes(b"")  # a live run's file before its first write: no events yet, as before
    assert plot.main([str(run)]) == 2
    assert capsys.readouterr().err == f"plot.py: error: {run}: its event files hold no events yet\n"


@pytest.mark.parametrize("damage, what", [("cut", "is cut short in a record"),
                                          ("flip", "has a record that fails its CRC-32 check")])
def test_a_damaged_event_file_is_read_up_to_the_damage_with_one_warning(tmp_path, capsys, damage, what):
    """TensorBoard's reader stops at a truncated or corrupt record without a word; plot.py names
    the file and reads on up to the damage (a live run's last record may be half-written)."""
    run = make_run(tmp_path / "damaged", 1)
    (events,) = run.glob("*tfevents*")
    data = bytearray(events.read_bytes())
    size = len(data) // 2
    if damage == "cut":
        events.write_bytes(data[:size])
    else:
        data[size] ^= 0xFF
        events.write_bytes(bytes(data))
    assert plot.main([str(run), "--every", "1000"]) == 0
    out, err = capsys.readouterr()
    match = re.fullmatch(rf"plot\.py: warning: {re.escape(str(events))} {what} at byte ([\d,]+) of "
                         rf"{len(data) if damage == 'flip' else size:,}: read up to the damage \((\d+) events\)\n", err)
    assert match, err
    at = int(match[1].replace(",", ""))
    assert size - 100 < at <= size  # the record the damage is in, a few dozen bytes long
    games = read_run(run).games
    assert 0 < len(games.steps) < 250 and out.startswith(f"{run}: ") and f"; {len(games.steps)} games," in out
    assert read_run(run).damaged == [err.removeprefix("plot.py: warning: ").strip()]


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc, a folder that takes no new files")
def test_unwritable_output_folder_is_one_line_before_any_run_is_read(two_seeds, capsys):
    """/proc reports itself writable to root, yet no file can be created in it: refused up front,
    not after the tables are printed."""
    assert plot.main([str(two_seeds[0]), "-o", "/proc/curves.png"]) == 2
    assert capsys.readouterr() == ("", "plot.py: error: -o /proc/curves.png is not writable: no file can be created "
                                       "in /proc; choose a path you can write\n")


# --- seeds of one setting: bands and Markdown tables --------------------------------------------------------
#
# Two seeds of one setting (n_step 1), with checkpoint evaluations at different steps, and one
# run of another (n_step 3) without any; each plays 30 games, game i ending at agent step
# 100 (i + 1). With --window 2 every training return is the mean of two games.
#
#   run       game i's return   game i's time        checkpoint evaluations (step: return @ saved)
#   s1        -21 + i           6 (i + 1) s          1000: -20 @ 66 s, 2000: +19 @ 126 s
#   s2        -21 + 2 i         12 (i + 1) s         1000: -21 @ 126 s, 2000: +5 @ 246 s, 3000: +18 @ 366 s
#   nstep3    i % 3             6 (i + 1) s          none
#
# So at step 1000 (games 8 and 9 the last two): s1 trains at (-13 - 12) / 2 = -12.5, s2 at
# (-5 - 3) / 2 = -4, nstep3 at (2 + 0) / 2 = 1; at 2000 (games 18, 19): -2.5, +16, +0.5; at 3000
# (games 28, 29): s2 +36, nstep3 +1.5.

SEEDS_EVALS = {1: {1000: (-20.0, 66), 2000: (19.0, 126)}, 2: {1000: (-21.0, 126), 2000: (5.0, 246), 3000: (18.0, 366)}}


def make_setting_run(folder: Path, seed: int, returns: list[float], seconds_per_game: float,
                     evaluations: dict[int, tuple[float, float]], n_step: int, **options) -> Path:
    """A run as scripts/train.py and scripts/evaluate.py --every-checkpoint leave it: event files,
    ``config.json`` (`Config.to_json`, a Catch run unless ``options`` say otherwise) and
    ``checkpoint-evals/`` (`EvalLog`)."""
    rows = [(100 * (i + 1), r, T0 + seconds_per_game * (i + 1)) for i, r in enumerate(returns)]
    write_events(folder, T0, {TRAIN_TAG: rows})
    options = {"env_id": "vecdqn/Catch-v0", "preset": "catch", **options}
    config = Config(seed=seed, n_step=n_step, run_name=folder.name, **options)
    (folder / "config.json").write_text(config.to_json())
    if evaluations:
        with EvalLog(folder) as log:
            for step, (value, seconds) in evaluations.items():
                log.add(step, {EVAL_TAG: value, "eval/return_std": 0.0}, wall_time=T0 + seconds)
            log.save()
    return folder


@pytest.fixture(scope="module")
def settings(tmp_path_factory) -> list[Path]:
    """s1 and s2 (two seeds of one setting), then nstep3 (another); see the table above."""
    runs = tmp_path_factory.mktemp("settings")
    return [
        make_setting_run(runs / "s1", 1, [-21.0 + i for i in range(30)], 6, SEEDS_EVALS[1], n_step=1),
        make_setting_run(runs / "s2", 2, [-21.0 + 2 * i for i in range(30)], 12, SEEDS_EVALS[2], n_step=1),
        make_setting_run(runs / "nstep3", 1, [float(i % 3) for i in range(30)], 6, {}, n_step=3),
    ]


def test_signed_numbers_use_a_minus_sign_and_no_sign_on_zero():
    assert [signed(x, 1) for x in (0.8, -20.42, 20.56, -0.04, 0.0)] == ["+0.8", "−20.4", "+20.6", "0.0", "0.0"]
    assert signed(-12.5, 2) == "−12.50" and signed(float("nan"), 2) == "—"


def test_bands_aggregate_where_every_seed_has_a_value(settings):
    runs = [read_run(path, window=2) for path in settings[:2]]
    band = eval_band(runs)  # step 3000: s2 alone, left out
    assert band.steps.tolist() == [1000, 2000]
    assert band.mean.tolist() == [-20.5, 12.0] and band.low.tolist() == [-21.0, 5.0]
    assert band.high.tolist() == [-20.0, 19.0]
    np.testing.assert_allclose(band.minutes, [(1.1 + 2.1) / 2, (2.1 + 4.1) / 2])
    band = train_band(runs)  # both from their first game (step 100) to their last step (3000)
    assert band.steps.tolist() == list(range(100, 3001, 100))
    k = band.steps.tolist().index(1000)
    assert (band.mean[k], band.low[k], band.high[k]) == (-8.25, -12.5, -4.0)
    # The run's clock at a step is the latest event there: the checkpoint's save, after the game.
    assert band.minutes[k] == pytest.approx((1.1 + 2.1) / 2)
    assert band.mean[0] == (-21.0 - 21.0) / 2  # one game each at step 100


def test_markdown_tables_by_hand(settings, capsys):
    s1, s2, nstep3 = settings
    assert plot.main([*map(str, settings), "--markdown", "--window", "2", "--every", "1000",
                      "--threshold", "18"]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    assert out.split("\n\n") == [
        f"**vecdqn/Catch-v0 (preset catch) n_step=1**, algo dqn, 2 seeds: seed 1 `{s1}`, seed 2 `{s2}`; "
        "training: mean return of the last 2 games.",
        "| agent steps | seed 1: minutes | training | evaluation | seed 2: minutes | training | evaluation "
        "| evaluation: mean | range |\n"
        "|---|---|---|---|---|---|---|---|---|\n"
        "| 1,000 | 1.1 | −12.50 | −20.0 | 2.1 | −4.00 | −21.0 | −20.5 | −21.0 to −20.0 |\n"
        "| 2,000 | 2.1 | −2.50 | **+19.0** | 4.1 | +16.00 | +5.0 | +12.0 | +5.0 to +19.0 |\n"
        "| 3,000 | — | — | — | 6.1 | +36.00 | **+18.0** | — | — |",
        "| run | evaluation ≥ +18: first agent step | minutes | evaluation | best evaluation (agent step) |\n"
        "|---|---|---|---|---|\n"
        "| seed 1 | 2,000 | 2.1 | +19.0 | +19.0 (2,000) |\n"
        "| seed 2 | 3,000 | 6.1 | +18.0 | +18.0 (3,000) |",
        f"**vecdqn/Catch-v0 (preset catch) n_step=3**, algo dqn, 1 run: seed 1 `{nstep3}`; "
        "training: mean return of the last 2 games.",
        "| agent steps | seed 1: minutes | training |\n"
        "|---|---|---|\n"
        "| 1,000 | 1.0 | +1.00 |\n"
        "| 2,000 | 2.0 | +0.50 |\n"
        "| 3,000 | 3.0 | +1.50 |",
        # Never 18; the best mean of two games, +1.50, first over games 1 and 2 (counting from 0).
        "| run | training (full 2 games) ≥ +18: first agent step | minutes | game | best training (agent step) |\n"
        "|---|---|---|---|---|\n"
        "| seed 1 | — | — | — | +1.50 (300) |\n",
    ]


def test_a_seed_never_evaluated_beside_one_that_was_has_its_training_columns_filled(settings, tmp_path):
    """Rows at the other seed's evaluations give the seed without any its minutes and training
    return there, as its own table does (they were "—": looked up at its evaluations only)."""
    never = make_setting_run(tmp_path / "never", 3, [float(i % 3) for i in range(30)], 6, {}, n_step=1)
    runs = [read_run(settings[0], window=2), read_run(never, window=2)]
    alone = markdown(runs[1:], every=1000).splitlines()
    assert alone[4:6] == ["| 1,000 | 1.0 | +1.00 |", "| 2,000 | 2.0 | +0.50 |"]
    lines = markdown(runs, threshold=18).splitlines()
    assert lines[0].startswith("**vecdqn/Catch-v0 (preset catch)**, algo dqn, 2 seeds: seed 1 ")
    assert lines[4:6] == [
        "| 1,000 | 1.1 | −12.50 | −20.0 | 1.0 | +1.00 | — | — | — |",
        "| 2,000 | 2.1 | −2.50 | **+19.0** | 2.0 | +0.50 | — | — | — |",
    ]
    assert lines[-1] == "| seed 3 | — | — | — | — |"  # no evaluation reaches 18: it has none


def test_training_threshold_counts_full_windows_only(settings):
    """Game 0 alone scores 0: a threshold of 0 is reached once two games are in, at game 2 (step
    200, 12 s; games counted from 1); 1.5 first by games 2 and 3 (step 300, 18 s)."""
    run = read_run(settings[2], window=2)
    table = markdown([run], every=1000, threshold=1.5).split("\n\n")[-1]
    assert table.splitlines()[-1] == "| seed 1 | 300 | 0.3 | 3 | +1.50 (300) |"
    table = markdown([run], every=1000, threshold=0).split("\n\n")[-1]
    assert table.splitlines()[0].startswith("| run | training (full 2 games) ≥ 0: first agent step |")
    assert table.splitlines()[-1] == "| seed 1 | 200 | 0.2 | 2 | +1.50 (300) |"


def test_training_rows_of_several_seeds_aggregate_the_training_return(settings, tmp_path):
    """Without evaluations the mean and range are of the training return; a seed that stopped
    earlier has no cells past its last step, and its last step is a row."""
    short = make_setting_run(tmp_path / "nstep3_s2", 2, [2.0 * (i % 3) for i in range(25)], 12, {}, n_step=3)
    runs = [read_run(settings[2], window=2), read_run(short, window=2)]
    lines = markdown(runs, every=1000).splitlines()
    assert lines[0].startswith("**vecdqn/Catch-v0 (preset catch)**, algo dqn, 2 seeds: seed 1 ")
    assert lines[2] == ("| agent steps | seed 1: minutes | training | seed 2: minutes | training | training: mean "
                        "| range |")
    # Seed 2 scores twice what seed 1 does, at half its speed, and stops after 25 games.
    assert lines[4:] == [
        "| 1,000 | 1.0 | +1.00 | 2.0 | +2.00 | +1.50 | +1.00 to +2.00 |",
        "| 2,000 | 2.0 | +0.50 | 4.0 | +1.00 | +0.75 | +0.50 to +1.00 |",
        "| 2,500 | 2.5 | +1.00 | 5.0 | +2.00 | +1.50 | +1.00 to +2.00 |",  # seed 2's last step: games 23, 24
        "| 3,000 | 3.0 | +1.50 | — | — | — | — |",
    ]


def test_band_figure_is_written(settings, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    from matplotlib.collections import PolyCollection

    runs = [read_run(path, window=2) for path in settings]
    group, labels = plot.legend_labels(runs)
    assert group == [0, 0, 1]
    assert labels == ["vecdqn/Catch-v0 (preset catch) n_step=1, seeds 1, 2: mean, min to max",
                      "vecdqn/Catch-v0 (preset catch) n_step=3, seed 1"]
    fig = plot.figure(runs, group, labels)
    try:
        by_steps, by_minutes = fig.axes[2:]  # the evaluation row
        assert len([c for c in by_steps.collections if isinstance(c, PolyCollection)]) == 1
        mean = by_steps.get_lines()[2]  # after the two seeds' faint lines
        assert mean.get_xdata().tolist() == [1000, 2000] and mean.get_ydata().tolist() == [-20.5, 12.0]
        np.testing.assert_allclose(by_minutes.get_lines()[2].get_xdata(), [1.6, 3.1])
    finally:
        plot.load_pyplot().close(fig)
    png = tmp_path / "bands.png"
    assert plot.main([*map(str, settings), "--markdown", "-o", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    out, err = capsys.readouterr()
    assert out.startswith("**vecdqn/Catch-v0 (preset catch) n_step=1**") and err == f"wrote {png}\n"


@pytest.mark.parametrize("args, kind", [(["--threshold", "nan"], "float"), (["--threshold", "inf"], "float"),
                                        (["--every", "\u0661\u0662"], "int"), (["--window", "1e2"], "int")])
def test_numbers_must_be_finite_and_in_ascii_digits(tmp_path, capsys, args, kind):
    assert plot.main([str(tmp_path), *args]) == 2
    err = capsys.readouterr().err
    option = args[0].split("=")[0]
    assert err.startswith(f"plot.py: error: argument {option}: invalid {kind} value: ") and err.count("\n") == 1


# --- --suite: one run per game ------------------------------------------------------------------------------
#
# Three games trained with atari-pqn, 30 games each, game i ending at agent step 100 (i + 1); with
# --window 10 the training return at the last step (3000) is the mean of games 20..29.
#
#   run        game i's return   game i's time    checkpoint evaluations (step: return @ saved)
#   breakout   10 i              6 (i + 1) s      1000: 300 @ 66 s, 2000: 410 @ 126 s, 3000: 350 @ 186 s
#   pong       -21 + i           12 (i + 1) s     1000: -20 @ 126 s, 2000: 15 @ 246 s, 3000: 15 @ 366 s
#   seaquest   100 i             6 (i + 1) s      none
#
# Breakout's best is at 2000 and its last at 3000; Pong's best ties its last, and the earlier
# (2000) is the best. Breakout and Pong have CleanRL PQN figures (the preferred anchor); Seaquest
# has none from CleanRL, so its anchor is the RL Zoo's DQN.

SUITE = {
    "breakout": ("BreakoutNoFrameskip-v4", [20.0 * i for i in range(30)], 6,
                 {1000: (300.0, 66), 2000: (410.0, 126), 3000: (350.0, 186)}),
    "pong": ("PongNoFrameskip-v4", [-21.0 + i for i in range(30)], 12,
             {1000: (-20.0, 126), 2000: (15.0, 246), 3000: (15.0, 366)}),
    "seaquest": ("SeaquestNoFrameskip-v4", [100.0 * i for i in range(30)], 6, {}),
}
PQN = {"preset": "atari-pqn", "algo": "pqn"}


@pytest.fixture(scope="module")
def suite(tmp_path_factory) -> list[Path]:
    """The three runs of the table above, in its order."""
    runs = tmp_path_factory.mktemp("suite")
    return [make_setting_run(runs / f"{game}-pqn_s1", 1, returns, seconds, evaluations, 1, env_id=env_id, **PQN)
            for game, (env_id, returns, seconds, evaluations) in SUITE.items()]


def _hns(game: str, score: float) -> float:
    random_score, human_score = HUMAN_RANDOM_SCORES[game]
    return 100 * (score - random_score) / (human_score - random_score)


def _suite_cells(text: str) -> tuple[list[str], list[list[str]], list[str]]:
    """The header, the rows' cells and the lines after the table of a --suite output."""
    lines = text.rstrip("\n").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| game |"))
    end = next(i for i in range(start, len(lines)) if not lines[i].startswith("|"))
    header, _, *rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[start:end]]
    return header, rows, lines[end:]


def test_suite_table_by_hand(suite, capsys):
    assert plot.main(["--suite", *map(str, suite), "--window", "10"]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    assert out.startswith(f"**Suite of 3 runs**: Breakout `{suite[0]}`, Pong `{suite[1]}`, Seaquest `{suite[2]}`; ")
    header, rows, after = _suite_cells(out)
    assert header == ["game", "last greedy", "at agent step", "minutes", "best greedy", "at agent step", "minutes",
                      "last / best", "trained to (agent step)", "training (last 10 games)", "HNS last", "HNS best",
                      "10M anchor", "anchor source", "kind", "≥ anchor (like with like)", "Nature DQN 50M"]
    breakout, pong, seaquest = rows
    training = [np.mean(SUITE[game][1][20:30]) for game in SUITE]
    # Breakout: last 350 at step 3000 (saved at 186 s), best 410 at 2000 (126 s); CleanRL's 384.85 is
    # a training return: beside the training mean (490 ≥ 384.85), not the greedy best.
    assert breakout == ["Breakout", "350.0", "3,000", "3.1", "410.0", "2,000", "2.1", f"{100 * 350 / 410:.1f}%",
                        "3,000", f"{training[0]:.2f}", f"{_hns('breakout', 350):,.1f}%",
                        f"{_hns('breakout', 410):,.1f}%", "384.85 ± 12.39", "CleanRL PQN", "T", "yes",
                        "401.2 ± 26.9"]
    # Pong: 15 twice; the best is the earlier (2000, 246 s), the last at 3000 (366 s); training 3.5 < 20.49.
    assert pong == ["Pong", "15.0", "3,000", "6.1", "15.0", "2,000", "4.1", "100.0%", "3,000",
                    f"{training[1]:.2f}", f"{_hns('pong', 15):.1f}%", f"{_hns('pong', 15):.1f}%", "20.49 ± 0.11",
                    "CleanRL PQN", "T", "no", "18.9 ± 1.3"]
    # Seaquest: never evaluated; no CleanRL figure, so the RL Zoo's evaluation is its anchor.
    assert seaquest == ["Seaquest", "not evaluated", "—", "—", "not evaluated", "—", "—", "—", "3,000",
                        f"{training[2]:,.2f}", "—", "—", "2,000.29 ± 606.644", "RL Zoo DQN", "E", "—",
                        "5,286 ± 1,310"]
    median_last = np.median([_hns("breakout", 350), _hns("pong", 15)])
    median_best = np.median([_hns("breakout", 410), _hns("pong", 15)])
    assert after[1] == (f"Median human-normalized score over 2 games: last greedy {median_last:.1f}%, "
                        f"best greedy {median_best:.1f}%; not counted: Seaquest (not evaluated).")
    notes = [line.split(":")[0] for line in after[3:]]
    assert notes == ["- HNS", "- T", "- E", "- CleanRL PQN", "- RL Zoo DQN", "- Nature DQN"]
    sources = {score.name: score.source for scores in PUBLISHED_SCORES.values() for score in scores}
    for line, name in zip(after[6:], ["CleanRL PQN", "RL Zoo DQN", "Nature DQN"]):
        assert line.startswith(f"- {name}: {sources[name]}; ")
    assert after[-1].endswith("± standard deviation over the evaluation games (as read: the table does not say).")
    assert "± standard deviation over the 69 evaluation games of one run." in after[-2]


def test_suite_of_games_without_references(tmp_path):
    """A Catch run has no reference scores and no published ones (n/a); a run without config.json
    is named by its folder; a best that is not positive gives no last/best percentage; the median
    counts the one game with reference scores."""
    catch = make_setting_run(tmp_path / "catch", 1, [1.0] * 5, 6, {100: (0.5, 30)}, 1)
    bare = tmp_path / "bare"
    write_events(bare, T0, {TRAIN_TAG: [(100, 2.0, T0 + 6)], EVAL_TAG: [(100, 3.0, T0 + 12)]})
    pong = make_setting_run(tmp_path / "pong", 1, [-21.0] * 5, 6, {100: (-18.0, 30), 200: (-19.0, 60)}, 1,
                            env_id="PongNoFrameskip-v4", **PQN)
    runs = [read_run(path) for path in (catch, bare, pong)]
    header, rows, after = _suite_cells(suite_table(runs))
    na = ["n/a", "n/a", "n/a", "n/a", "n/a", "n/a"]  # HNS last, best; anchor, source, kind; ≥ anchor
    assert rows[0][:8] == ["vecdqn/Catch-v0", "0.5", "100", "0.5", "0.5", "100", "0.5", "100.0%"]
    assert rows[0][10:] == [*na, "n/a"]
    assert rows[1][:8] == ["bare", "3.0", "100", "0.2", "3.0", "100", "0.2", "100.0%"]
    assert rows[1][9] == "2.00" and rows[1][10:] == [*na, "n/a"]
    assert rows[2][:8] == ["Pong", "−19.0", "200", "1.0", "−18.0", "100", "0.5", "n/a"]
    assert rows[2][10:12] == [f"{_hns('pong', -19):.1f}%", f"{_hns('pong', -18):.1f}%"]
    assert rows[2][12:] == ["20.49 ± 0.11", "CleanRL PQN", "T", "no", "18.9 ± 1.3"]
    assert after[1] == (f"Median human-normalized score over 1 game: last greedy {_hns('pong', -19):.1f}%, best "
                        f"greedy {_hns('pong', -18):.1f}%; not counted: vecdqn/Catch-v0 (no reference scores), "
                        "bare (no reference scores).")
    _, _, after = _suite_cells(suite_table(runs[:2]))
    assert after[1].startswith("Median human-normalized score: n/a (no evaluated run of a game with reference ")
    assert [line.split(":")[0] for line in after[3:]] == ["- HNS"]  # no published score shown


def test_suite_figure_has_a_panel_per_game(suite, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    rows = suite_rows([read_run(path, window=10) for path in suite])
    fig = plot.suite_figure(rows)
    try:
        assert len(fig.axes) == 3  # one row of three: no empty panel
        assert [ax.get_title() for ax in fig.axes] == ["Breakout", "Pong", "Seaquest"]
        breakout, pong, seaquest = fig.axes
        train, evals, anchor = breakout.get_lines()
        assert train.get_xdata().tolist() == [100 * (i + 1) for i in range(30)]
        assert train.get_ydata()[-1] == pytest.approx(np.mean(SUITE["breakout"][1][20:]))
        assert evals.get_xdata().tolist() == [1000, 2000, 3000] and evals.get_ydata().tolist() == [300, 410, 350]
        assert anchor.get_linestyle() == "--" and list(anchor.get_ydata()) == [384.85, 384.85]
        assert len(pong.get_lines()) == 3
        train, anchor = seaquest.get_lines()  # not evaluated: no evaluation line
        assert list(anchor.get_ydata()) == [2000.29, 2000.29]
        assert all(ax.get_xlabel() == "agent steps" for ax in fig.axes)
    finally:
        plot.load_pyplot().close(fig)
    png = tmp_path / "suite.png"
    assert plot.main(["--suite", *map(str, suite), "-o", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    out, err = capsys.readouterr()
    assert out.startswith("**Suite of 3 runs**") and err == f"wrote {png}\n"


def test_suite_figure_wraps_after_four_panels(suite):
    pytest.importorskip("matplotlib")
    rows = suite_rows([read_run(path) for path in suite])
    fig = plot.suite_figure(rows * 2)  # six panels: 4 + 2, the two empty places removed
    try:
        assert len(fig.axes) == 6
        assert [ax.get_subplotspec().rowspan.start for ax in fig.axes] == [0, 0, 0, 0, 1, 1]
    finally:
        plot.load_pyplot().close(fig)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--suite", "{run}", "--markdown"], "--suite makes one table of its own: leave out --markdown"),
        (["--suite", "{run}", "--every", "5"], "--suite makes one table of its own: leave out --every"),
        (["--suite", "{run}", "--markdown", "--threshold", "3"], "leave out --markdown"),
        (["--suite", "{tmp}/empty"], "is not a run folder: it holds no TensorBoard event files"),
        (["--suite", "{runs}"], "holds runs, not event files"),
        (["--suite", "{run}", "{twin}"], "--suite takes one run per game: {run} and {twin} are both Breakout; "
                                         "pass one of them"),
    ],
)
def test_suite_bad_input_is_one_line(suite, tmp_path, capsys, args, message):
    (tmp_path / "empty").mkdir()
    twin = make_setting_run(tmp_path / "breakout-pqn_s2", 2, [1.0], 6, {}, 1, env_id="ALE/Breakout-v5", **PQN)
    names = {"tmp": tmp_path, "run": suite[0], "runs": suite[0].parent, "twin": twin}
    assert plot.main([a.format(**names) for a in args]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("plot.py: error: ") and err.count("\n") == 1 and message.format(**names) in err


def test_a_reader_that_leaves_early_stops_a_script_quietly():
    """`plot.py ... | head` ended in "plot.py: error: [Errno 32] Broken pipe" and exit 2, as if the
    input were bad: a script whose stdout reader has gone now exits 141 (as a shell tool) and says
    nothing. The body writes far more than a pipe holds, so the write after the reader left fails."""
    code = ("import sys; from vecdqn.cli import exit_code\n"
            "sys.exit(exit_code('x.py', lambda: [print('row', i) for i in range(10**6)] and None))")
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    assert child.stdout.readline() == b"row 0\n"
    child.stdout.close()
    assert child.wait(timeout=60) == 141
    assert child.stderr.read() == b""
