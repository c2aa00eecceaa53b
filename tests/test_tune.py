"""scripts/tune.py: the search space and its checks, a small Catch study, pruning, resuming, Ctrl-C.

The studies here are tiny (Catch, 2 envs, 2,000 agent steps, an evaluation every 500) so that
the whole file runs in about a minute; what they check is the tuner, not the values it finds.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from vecdqn import checkpoint
from vecdqn.tuning.space import SpaceError, option_flags, parse_dimension, parse_space

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "tune.py"

# A Catch run of a few seconds with four evaluations.
TRAIN = ["--preset", "catch", "--num-envs", "2", "--total-steps", "2000", "--buffer-size", "2000",
         "--learning-starts", "100", "--hidden-size", "32", "--log-every", "100", "--eval-every", "500",
         "--eval-episodes", "2", "--epsilon-decay-steps", "1000"]
SPACE = ["--space", "learning_rate=1e-4:3e-3:log", "--space", "n_step=1:3"]


def load_script():
    spec = importlib.util.spec_from_file_location("tune_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_tune(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"})


def processes_using(path: Path) -> list[psutil.Process]:
    """Processes whose command line mentions ``path`` (a trial's run or the study folder)."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if any(str(path) in part for part in proc.info["cmdline"] or []):
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return found


# -- the search space ------------------------------------------------------------------------


def test_space_grammar():
    lr = parse_dimension("learning_rate=1e-4:3e-3:log")
    assert (lr.kind, lr.low, lr.high, lr.log) == ("float", 1e-4, 3e-3, True)
    n = parse_dimension("--n-step=1:3")
    assert (n.name, n.kind, n.low, n.high, n.log) == ("n_step", "int", 1, 3, False)
    assert parse_dimension("batch-size=32,64").choices == (32, 64)
    assert parse_dimension("double=true,false").choices == (True, False)
    assert parse_dimension("amp=off,bf16").choices == ("off", "bf16")
    assert option_flags("double", False) == ["--no-double"]
    assert option_flags("learning_rate", 0.000123456789) == ["--learning-rate", "0.000123456789"]


@pytest.mark.parametrize("spec, message", [
    ("lerning_rate=1e-4:3e-3", "'lerning_rate' is not an option of train.py; did you mean learning_rate?"),
    ("learning_rate=3e-3:1e-4", "the range 3e-3:1e-4 is empty"),
    ("n_step=2:2", "the range 2:2 is empty"),
    ("learning_rate=0:1e-3:log", "a log scale needs a low end above zero, not 0"),
    ("gamma=-0.5:0.9:log", "a log scale needs a low end above zero, not -0.5"),
    ("n_step=1.5:3", "'1.5' is not a whole number, and --n-step takes whole numbers"),
    # an integer option's numbers as train.py reads them: 1e3 is refused there too, naming what to write
    ("n_step=1:1e3", "'1e3' is not a whole number, and --n-step takes whole numbers, written in the digits 0-9 as "
                     "train.py reads them: 1000, not 1e3"),
    ("batch_size=32,64.0", "'64.0' is not a whole number, and --batch-size takes whole numbers"),
    ("n_step=1:1000000000001", "--space n_step=1:1000000000001: 1000000000001 is above 10**12, the largest count"),
    ("double=0:1", "--double is an on/off option; give choices"),
    ("run_name=a,b", "--run-name cannot vary between trials"),
    ("learning_rate", "expected NAME=LOW:HIGH"),
    ("learning_rate=1e-4:3e-3:sqrt", "expected a range LOW:HIGH or LOW:HIGH:log"),
    ("learning_rate=abc:1", "'abc' is not a number"),
])
def test_bad_dimension_is_one_line(spec, message):
    with pytest.raises(SpaceError, match=None) as err:
        parse_dimension(spec)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_an_option_given_twice_is_refused():
    with pytest.raises(SpaceError, match="--n-step is already in the space"):
        parse_space(["n_step=1:3", "n-step=1,2"])


@pytest.mark.parametrize("args, message", [
    (["--space", "lerning_rate=1e-4:3e-3"], "'lerning_rate' is not an option of train.py"),
    (["--space", "learning_rate=3e-3:1e-4"], "the range 3e-3:1e-4 is empty"),
    (["--space", "learning_rate=0:3e-3:log"], "a log scale needs a low end above zero"),
    ([], "no search space"),
    (["--space", "n_step=1:3", "--n-trials", "0"], "--n-trials 0 must be at least 1"),
    (["--space", "n_step=1:3", "--n-trials", "٣"], "argument --n-trials: invalid int value: '٣'"),
    (["--space", "n_step=1:3", "--n-trials", "1000000000001"],
     "argument --n-trials: 1000000000001 is above 10**12, the largest count an option takes"),
    (["--space", "n_step=1:3", "--timeout", "1e14"],
     "argument --timeout: 1e14 seconds is above 10**8 (over 3 years), the longest duration an option takes"),
    (["--space", "n_step=1:1e3"], "--space n_step=1:1e3: '1e3' is not a whole number"),
    (["--space", "n_step=1:3", "--timeout", "inf"], "argument --timeout: invalid float value: 'inf'"),
    (["--space", "n_step=1:3", "--pruner", "threshold", "--prune-below", "nan"],
     "argument --prune-below: invalid float value: 'nan'"),
    (["--space", "n_step=١:٣"], "'١' is not a number in the digits 0-9"),
    (["--space", "n_step=1:3", "--pruner", "threshold"], "--pruner threshold needs --prune-below"),
    (["--space", "n_step=1:3", "--study-name", "s" * 300],
     "--study-name of 300 bytes is too long for a folder name; use at most 255 bytes"),
    # Checked with train.py's own parser against the fixed options:
    (["--space", "batch_size=16:4096"], "its high end does not work with the fixed options: --batch-size 4096 is "
                                        "larger than --buffer-size 2000"),
    (["--space", "learning_rate=-1:1"], "its low end does not work with the fixed options: --learning-rate -1.0"),
    (["--space", "total_steps=1000,4000"], "--total-steps is also a fixed option after --"),
    (["--space", "n_step=1:3", "--", "--no-such-option"], "unrecognized arguments: --no-such-option"),
    (["--space", "n_step=1:3", "--", "--run-name", "x"], "--run-name cannot be a fixed option"),
    (["--space", "n_step=1:3", "--", "--preset", "catch"], "--objective eval needs periodic evaluations"),
    # A dimension the fixed options' learner would not use, either way round:
    (["--space", "n_step=1:3", "--", "--preset", "catch-pqn", "--eval-every", "500"],
     "--n-step only applies with --algo dqn or --algo rainbow"),
    (["--space", "q_lambda=0.3:0.9"], "--q-lambda only applies with --algo pqn"),
    # Each value inside a small integer range, not only its ends: 3, 5, 6 and 7 do not divide 128.
    (["--space", "minibatches=1:8", "--", "--preset", "catch-pqn", "--eval-every", "500"],
     "--space minibatches=1:8: 4 of its values do not work with the fixed options (3: --minibatches 3 does not "
     "divide a rollout of --rollout-steps 16 x --num-envs 8 = 128 transitions; use a divisor of 128); give the "
     "values that do as choices: minibatches=1,2,4,8"),
    # W&B refuses these project names; every trial would fail at its start.
    (["--space", "n_step=1:3", "--n-trials", "1", "--", *TRAIN, "--track", "--wandb-project", "myteam/catch"],
     "--wandb-project myteam/catch: a W&B project name may not contain any of / \\ # ? % : (found /); for "
     "project catch of entity myteam, give --wandb-entity myteam --wandb-project catch"),
    (["--space", "n_step=1:3", "--n-trials", "1", "--", *TRAIN, "--track", "--wandb-project", "p" * 129],
     "(129 characters): a W&B project name has at most 128 characters"),
    # Storage URLs that cannot be opened: the password never printed, no study folder left.
    (["--space", "n_step=1:3", "--storage", "postgresql://vecdqn:s3cret@127.0.0.1:1/db"],
     "--storage postgresql://vecdqn:***@127.0.0.1:1/db: cannot open it"),
    (["--space", "n_step=1:3", "--storage", "mysql://vecdqn:s3cret@127.0.0.1:1/db"],
     "--storage mysql://vecdqn:***@127.0.0.1:1/db: cannot open it"),
    (["--space", "n_step=1:3", "--storage", "postgres//vecdqn:s3cret@127.0.0.1:1/db"],
     "--storage postgres//vecdqn:***@"),
])
def test_bad_input_exits_2_with_one_line_before_any_trial(tmp_path, capsys, args, message):
    tune = load_script()
    if "--" not in args:
        args = [*args, "--", *TRAIN]
    args = [*args, "--log-dir", str(tmp_path / "runs")]
    assert tune.main(args) == 2
    out, err = capsys.readouterr()
    assert err.startswith("tune.py: error: ") and len(err.strip().splitlines()) == 1, err
    assert message in err and "s3cret" not in out + err
    # Nothing started and nothing left behind: no log folder, study folder, database or run.
    assert not (tmp_path / "runs").exists()


def test_a_study_name_too_long_for_a_folder_is_one_line_also_where_the_log_dir_exists(tmp_path, capsys):
    """An existing --log-dir makes the study folder's name reach the file system (a traceback
    once): the name is refused before any folder is looked at."""
    (tmp_path / "runs").mkdir()
    args = ["--space", "n_step=1:3", "--study-name", "s" * 300, "--", *TRAIN, "--log-dir", str(tmp_path / "runs")]
    assert load_script().main(args) == 2
    err = capsys.readouterr().err
    assert err == "tune.py: error: --study-name of 300 bytes is too long for a folder name; use at most 255 bytes\n"
    assert not any((tmp_path / "runs").iterdir())


def test_space_file(tmp_path, capsys):
    space = tmp_path / "space.txt"
    space.write_text("# learning rates\nlearning_rate=1e-4:3e-3:log  # the main one\n\nn_step=1:0\n")
    tune = load_script()
    assert tune.main(["--space-file", str(space), "--", *TRAIN, "--log-dir", str(tmp_path / "runs")]) == 2
    assert "--space n_step=1:0: the range 1:0 is empty" in capsys.readouterr().err


def test_missing_optuna_is_one_line(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "optuna", None)  # what `import optuna` does without the package
    tune = load_script()
    assert tune.main([*SPACE, "--", *TRAIN]) == 2
    assert capsys.readouterr().err == 'tune.py: error: the optuna package is not installed; scripts/tune.py needs ' \
                                      'it: pip install -e ".[tune]"\n'


# -- following a run -------------------------------------------------------------------------


def test_event_follower_reads_each_evaluation_as_it_is_written(tmp_path):
    """Both objectives from a growing event file: the evaluation's mean return, or the mean of the
    last 100 training games up to the evaluation's step."""
    from torch.utils.tensorboard import SummaryWriter

    from vecdqn.tuning.trial_run import EventFollower

    evals, trains = EventFollower(tmp_path, "eval"), EventFollower(tmp_path, "train")
    assert evals.new_values() == [] and evals.final_value() is None  # no event file yet
    writer = SummaryWriter(str(tmp_path))
    for step in range(1, 151):  # game i returns i
        writer.add_scalar("charts/episodic_return", float(step), step)
    writer.add_scalar("eval/return_mean", 0.5, 150)
    writer.flush()
    assert evals.new_values() == [(150, 0.5)]
    assert trains.new_values() == [(150, pytest.approx(sum(range(51, 151)) / 100))]
    assert evals.new_values() == [] and trains.new_values() == []  # each evaluation once
    for step in range(151, 201):
        writer.add_scalar("charts/episodic_return", 0.0, step)
    writer.add_scalar("eval/return_mean", -0.25, 200)
    writer.close()
    assert evals.new_values() == [(200, -0.25)] and evals.final_value() == -0.25
    assert trains.final_value() == pytest.approx(sum(range(101, 151)) / 100)


def test_a_failed_trial_is_reported_with_train_py_s_error_line(tmp_path):
    """train.py's own error line (``train.py: error: ...``) is the cause, not the line after it."""
    from vecdqn.tuning.trial_run import TrialProcess

    cause = ("train.py: error: non-finite loss (nan) or mean Q (nan) at agent step 1200; a too high "
             "--learning-rate is the usual cause: lower it and resume from the last checkpoint")
    log = tmp_path / "train.log"
    log.write_text("run folder: runs/catch/trial_0000\nstep 1000 | 410 agent steps/s\n"
                   f"{cause}\nlast checkpoint: none written yet\n")
    assert TrialProcess([], log).error_line() == cause
    log.write_text("Traceback (most recent call last):\n  File \"x.py\", line 1\nRuntimeError: CUDA error\n")
    assert TrialProcess([], log).error_line() == "RuntimeError: CUDA error"  # no error line: the last line


def test_storage_urls_are_shown_without_their_password():
    pytest.importorskip("optuna")
    from vecdqn.tuning.storage import hide_passwords, shown_url

    assert shown_url("postgresql://vecdqn:s3cret@db.example:5432/studies") == \
        "postgresql://vecdqn:***@db.example:5432/studies"
    assert shown_url("mysql+pymysql://root:p%40ss@host/db?charset=utf8") == "mysql+pymysql://root:***@host/db?charset=utf8"
    assert shown_url("postgresql://host/db?user=me&password=s3cret") == "postgresql://host/db?password=***&user=me"
    assert shown_url("sqlite:////tmp/runs/catch/study.db") == "sqlite:////tmp/runs/catch/study.db"
    assert shown_url("postgres//vecdqn:s3cret@host/db") == "postgres//vecdqn:***@host/db"  # not even a URL
    assert hide_passwords("(psycopg2.OperationalError) connection to postgresql://u:s3cret@h/db failed") == \
        "(psycopg2.OperationalError) connection to postgresql://u:***@h/db failed"


# -- studies ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """A 3-trial Catch study with the median pruner after one finished trial."""
    pytest.importorskip("optuna")
    runs = tmp_path_factory.mktemp("tune") / "runs"
    done = run_tune("--study-name", "catch", "--n-trials", "3", "--pruner-startup-trials", "1", "--sampler-seed", "3",
                    *SPACE, "--", *TRAIN, "--log-dir", str(runs))
    return runs, done


def load_trials(runs: Path):
    import optuna

    return optuna.load_study(study_name="catch", storage=f"sqlite:///{runs / 'catch' / 'study.db'}").get_trials()


def median_pruner_says(earlier, trial, step: int) -> bool:
    """What Optuna's MedianPruner (one startup trial) decides for ``trial`` once it has reported up to
    ``step``, given the trials that ended before it."""
    import optuna

    reference = optuna.create_study(direction="maximize")
    for t in earlier:
        reference.add_trial(t)
    partial = optuna.trial.FrozenTrial(
        number=trial.number, state=optuna.trial.TrialState.RUNNING, value=None, datetime_start=trial.datetime_start,
        datetime_complete=None, params=trial.params, distributions=trial.distributions, user_attrs={},
        system_attrs={}, intermediate_values={s: v for s, v in trial.intermediate_values.items() if s <= step},
        trial_id=trial._trial_id,
    )
    return optuna.pruners.MedianPruner(n_startup_trials=1).prune(reference, partial)


@pytest.mark.slow  # over 15 s: kept out of CI's 10 minutes (python -m pytest -m slow)
def test_study_completes_and_follows_its_pruner(study):
    import optuna

    runs, done = study
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    trials = load_trials(runs)
    assert len(trials) == 3
    states = {t.state for t in trials}
    assert states <= {optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED}
    assert trials[0].state == optuna.trial.TrialState.COMPLETE  # the startup trial is never pruned
    for t in trials:
        # Each trial reported its evaluations at their agent steps, and is an ordinary run.
        steps = sorted(t.intermediate_values)
        assert steps and all(s % 500 == 0 for s in steps), steps
        run_dir = Path(t.user_attrs["run_dir"])
        assert run_dir == runs / "catch" / f"trial_{t.number:04d}"
        assert (run_dir / "config.json").exists() and any("tfevents" in p.name for p in run_dir.iterdir())
        saved = checkpoint.load(run_dir / "checkpoints" / "latest.pt")
        assert saved["config"]["learning_rate"] == t.params["learning_rate"]
        assert saved["config"]["n_step"] == t.params["n_step"]
        # The pruner's decisions, step by step, are what Optuna's MedianPruner says.
        earlier = [e for e in trials if e.number < t.number]
        says = [median_pruner_says(earlier, t, s) for s in steps]
        if t.state == optuna.trial.TrialState.PRUNED:
            assert says[-1] and not any(says[:-1]), (t.number, says)
            assert t.user_attrs["pruned_at_step"] == steps[-1]
            assert saved["train_state"]["step"] < 2000  # stopped early, checkpointed
        else:
            assert not any(says), (t.number, says)
            assert steps[-1] == 2000 and t.value == t.intermediate_values[2000]
            assert (run_dir / "checkpoints" / "final.pt").exists()
    # The table of the best trials and the command that reproduces the best.
    best = max((t for t in trials if t.state == optuna.trial.TrialState.COMPLETE), key=lambda t: t.value)
    assert "| trial | eval return | learning_rate | n_step | run folder |" in done.stdout
    command = done.stdout.split("reproduce it with:\n")[1].strip()
    assert command == best.user_attrs["command"]
    assert command.startswith("python scripts/train.py --preset catch ")
    assert f"--learning-rate {best.params['learning_rate']!r} --n-step {best.params['n_step']}" in command
    # Nothing left behind: no process, no temporary file.
    assert not processes_using(runs)
    leftovers = [p for p in runs.rglob("*") if p.is_file() and (".tmp" in p.name or p.name.startswith("."))]
    assert not leftovers


def test_a_pqn_study_tunes_pqn_options(tmp_path):
    """--algo pqn through the tuner: PQN's own options as dimensions, and every trial a PQN run
    that reports its evaluations and stores the sampled values."""
    pytest.importorskip("optuna")
    import optuna

    runs = tmp_path / "runs"
    done = run_tune("--study-name", "pqn", "--n-trials", "2", "--pruner", "none", "--sampler-seed", "1",
                    "--space", "q_lambda=0.3:0.9", "--space", "epochs=1:4", "--", "--preset", "catch-pqn",
                    "--total-steps", "1024", "--eval-every", "512", "--eval-episodes", "2", "--log-dir", str(runs))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    trials = optuna.load_study(study_name="pqn", storage=f"sqlite:///{runs / 'pqn' / 'study.db'}").get_trials()
    assert [t.state for t in trials] == [optuna.trial.TrialState.COMPLETE] * 2
    for t in trials:
        assert sorted(t.intermediate_values) == [512, 1024] and t.value == t.intermediate_values[1024]
        saved = checkpoint.load(Path(t.user_attrs["run_dir"]) / "checkpoints" / "final.pt")
        assert saved["config"]["algo"] == "pqn" and saved["train_state"]["step"] == 1024
        assert (saved["config"]["q_lambda"], saved["config"]["epochs"]) == (t.params["q_lambda"], t.params["epochs"])
    command = done.stdout.split("reproduce it with:\n")[1].strip()
    assert command.startswith("python scripts/train.py --preset catch-pqn ") and "--q-lambda" in command


@pytest.mark.slow  # over 15 s: kept out of CI's 10 minutes (python -m pytest -m slow)
def test_second_invocation_continues_the_study_and_prunes(study):
    """The same study again, one more trial, with a pruner that stops every trial at its first
    evaluation (Catch returns are at most 1)."""
    import optuna

    runs, _ = study
    done = run_tune("--study-name", "catch", "--n-trials", "1", "--pruner", "threshold", "--prune-below", "2",
                    *SPACE, "--", *TRAIN, "--log-dir", str(runs))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "study catch" in done.stdout and "3 trials so far" in done.stdout
    trials = load_trials(runs)
    assert len(trials) == 4
    last = trials[-1]
    assert last.state == optuna.trial.TrialState.PRUNED
    assert list(last.intermediate_values) == [500] and last.user_attrs["pruned_at_step"] == 500
    saved = checkpoint.load(runs / "catch" / "trial_0003" / "checkpoints" / "latest.pt")
    assert 500 <= saved["train_state"]["step"] < 2000
    assert not processes_using(runs)


@pytest.mark.slow  # over 15 s: kept out of CI's 10 minutes (python -m pytest -m slow)
def test_other_fixed_options_do_not_continue_a_study(study):
    runs, _ = study
    done = run_tune("--study-name", "catch", *SPACE, "--", *TRAIN, "--seed", "2", "--log-dir", str(runs))
    assert done.returncode == 2 and "was run with the train.py options" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("space, message", [
    (["--space", "learning_rate=1e-4:3e-3", "--space", "n_step=1:3"],
     "--space learning_rate=1e-4:3e-3: study 'catch' samples learning_rate=0.0001:0.003:log (a log-scale range), "
     "and Optuna cannot continue it as a linear range; give --space learning_rate=0.0001:0.003:log to continue the "
     "study (a range's ends may move), or another --study-name to start a new study"),
    (["--space", "learning_rate=1e-4:3e-3:log", "--space", "n_step=1,2,3"],
     "--space n_step=1,2,3: study 'catch' samples n_step=1:3 (a linear integer range), and Optuna cannot continue it "
     "as choices; give --space n_step=1:3 to continue"),
])
@pytest.mark.slow  # over 15 s: kept out of CI's 10 minutes (python -m pytest -m slow)
def test_a_changed_space_does_not_continue_a_study(study, capsys, space, message):
    """A dimension that Optuna cannot continue is refused before any trial, the study untouched."""
    runs, _ = study
    before = [(t.number, t.state, t.params) for t in load_trials(runs)]
    tune = load_script()
    assert tune.main(["--study-name", "catch", *space, "--", *TRAIN, "--log-dir", str(runs)]) == 2
    out, err = capsys.readouterr()
    assert err.startswith("tune.py: error: ") and len(err.strip().splitlines()) == 1, err
    assert message in err, err
    assert out == "" and [(t.number, t.state, t.params) for t in load_trials(runs)] == before


# Opens a study and samples one trial at the same moment as its siblings (each waits for the file "go").
OPEN_AT_ONCE = """
import json, sys, time
from pathlib import Path
import optuna
from vecdqn.tuning.space import parse_space
from vecdqn.tuning.study import make_pruner, open_study
folder, url, index = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
dims = parse_space(["learning_rate=1e-5:1e-2:log", "gamma=0.9:0.999"])
(folder / f"ready_{index}").touch()
while not (folder / "go").exists():
    time.sleep(0.002)
study = open_study("parallel", url, make_pruner("none"), seed=1, objective="eval", train_options=["--preset", "catch"])
trial = study.ask()
params = {d.name: d.suggest(trial) for d in dims}
study.tell(trial, 0.0)
print(json.dumps({"number": trial.number, **params}))
"""


def test_tuners_opening_one_new_sqlite_study_at_once_all_work_and_sample_different_values(tmp_path):
    """Six processes create or load one new SQLite study at the same moment, all with sampler
    seed 1: each opens it, and each samples its own values."""
    pytest.importorskip("optuna")
    url = f"sqlite:///{tmp_path / 'study.db'}"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    procs = [subprocess.Popen([sys.executable, "-c", OPEN_AT_ONCE, str(tmp_path), url, str(i)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(6)]
    try:
        deadline = time.time() + 120
        while time.time() < deadline and len(list(tmp_path.glob("ready_*"))) < len(procs):
            time.sleep(0.05)
        (tmp_path / "go").touch()
        results = [proc.communicate(timeout=120) for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    failed = [err.strip().splitlines()[-1] for proc, (_, err) in zip(procs, results) if proc.returncode != 0]
    assert not failed, failed
    import json

    samples = [json.loads(out) for out, _ in results]
    assert sorted(s["number"] for s in samples) == list(range(6))
    values = {(s["learning_rate"], s["gamma"]) for s in samples}
    assert len(values) == 6, samples  # one seed, six trial numbers, six different draws


@pytest.mark.filterwarnings("ignore:Heartbeat of storage:UserWarning")  # trials asked by hand here
def test_only_trials_whose_tuner_is_gone_are_marked_failed(tmp_path):
    """Running trials of a live tuner, of another host and of no recorded tuner are left to run (or
    to Optuna's heartbeat); those of a tuner that has ended, or whose pid now belongs to another
    process, are marked failed."""
    optuna = pytest.importorskip("optuna")
    from vecdqn.tuning import liveness
    from vecdqn.tuning.study import fail_orphaned_trials, make_pruner, open_study

    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    me = liveness.identity()
    owners = [me, {**me, "pid": ended.pid}, {**me, "started": "0"}, {**me, "host": me["host"] + "-elsewhere"}, None]
    assert [liveness.is_gone(owner) for owner in owners] == [False, True, True, None, None]
    study = open_study("orphans", f"sqlite:///{tmp_path / 'study.db'}", make_pruner("none"), objective="eval",
                       train_options=[])
    for owner in owners:
        trial = study.ask()
        if owner is not None:
            trial.set_user_attr("tuner", owner)
    assert [number for number, _ in fail_orphaned_trials(study)] == [1, 2]
    running, failed = optuna.trial.TrialState.RUNNING, optuna.trial.TrialState.FAIL
    assert [t.state for t in study.get_trials()] == [running, failed, failed, running, running]


@pytest.mark.slow  # over 15 s: kept out of CI's 10 minutes (python -m pytest -m slow)
def test_ctrl_c_checkpoints_the_trial_and_marks_it_failed(tmp_path):
    """SIGINT to the tuner: its trial's run checkpoints and exits, the trial is marked failed, the
    tuner exits 130, nothing is left running, and the same command continues the study."""
    optuna = pytest.importorskip("optuna")
    runs = tmp_path / "runs"
    args = [str(SCRIPT), "--study-name", "catch", "--n-trials", "2", *SPACE, "--",
            *TRAIN, "--total-steps", "1000000", "--log-dir", str(runs)]
    tuner = subprocess.Popen([sys.executable, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        run_dir = runs / "catch" / "trial_0000"
        deadline = time.time() + 120
        while time.time() < deadline and not (run_dir.is_dir() and any("tfevents" in p.name
                                                                       for p in run_dir.iterdir())):
            time.sleep(0.5)
        time.sleep(2)  # let it train a little
        tuner.send_signal(signal.SIGINT)
        out, err = tuner.communicate(timeout=120)
    finally:
        if tuner.poll() is None:
            tuner.kill()
    assert tuner.returncode == 130, out[-2000:] + err[-2000:]
    assert "Continue the study with the same command" in err
    (trial,) = optuna.load_study(study_name="catch", storage=f"sqlite:///{runs / 'catch' / 'study.db'}").get_trials()
    assert trial.state == optuna.trial.TrialState.FAIL
    saved = checkpoint.load(run_dir / "checkpoints" / "latest.pt")
    assert saved["train_state"]["step"] > 0
    assert "stopped by SIGINT" in (run_dir / "train.log").read_text()
    assert not processes_using(runs)


@pytest.mark.slow  # over 15 s: kept out of CI's 10 minutes (python -m pytest -m slow)
def test_a_killed_tuner_takes_its_trial_down_and_the_next_run_marks_it_failed(tmp_path):
    """SIGKILL to the tuner (no chance to forward anything): the trial's run notices, checkpoints
    and exits as on Ctrl-C; no process is left; the same command again marks the trial failed (its
    tuner is gone), long before Optuna's heartbeat would."""
    optuna = pytest.importorskip("optuna")
    runs = tmp_path / "runs"
    tuner = subprocess.Popen([sys.executable, str(SCRIPT), "--study-name", "catch", "--n-trials", "2", *SPACE, "--",
                              *TRAIN, "--total-steps", "1000000", "--log-dir", str(runs)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    run_dir = runs / "catch" / "trial_0000"
    deadline = time.time() + 120
    while time.time() < deadline and not (run_dir.is_dir() and any("tfevents" in p.name for p in run_dir.iterdir())):
        time.sleep(0.5)
    time.sleep(2)
    trial_processes = psutil.Process(tuner.pid).children(recursive=True)
    assert trial_processes, "the trial did not start"
    tuner.kill()
    tuner.wait()
    gone, alive = psutil.wait_procs(trial_processes, timeout=60)
    assert not alive, f"left behind: {alive}"
    log = (run_dir / "train.log").read_text()
    assert "stopped by SIGINT" in log, log[-2000:]
    assert checkpoint.load(run_dir / "checkpoints" / "latest.pt")["train_state"]["step"] > 0
    # The same command again: the killed tuner's trial is marked failed before the next trial starts
    # (that one pruned at its first evaluation, to keep this short).
    again = run_tune("--study-name", "catch", "--n-trials", "1", "--pruner", "threshold", "--prune-below", "2", *SPACE,
                     "--", *TRAIN, "--total-steps", "1000000", "--log-dir", str(runs))
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    assert f"trial 0: marked failed: its tuner (pid {tuner.pid} on {socket.gethostname()}) is gone" in again.stdout
    trials = optuna.load_study(study_name="catch", storage=f"sqlite:///{runs / 'catch' / 'study.db'}").get_trials()
    assert [t.state for t in trials] == [optuna.trial.TrialState.FAIL, optuna.trial.TrialState.PRUNED]
    assert not processes_using(runs)
