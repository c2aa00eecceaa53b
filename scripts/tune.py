#!/usr/bin/env python
"""Tune train.py's options with Optuna: each trial is an ordinary run under <log-dir>/<study>/.

    python scripts/tune.py --study-name catch --n-trials 8 \\
        --space learning_rate=1e-4:3e-3:log --space n_step=1:3 \\
        -- --preset catch --total-steps 6000 --eval-every 1500

The options after ``--`` are train.py's, fixed for every trial; each ``--space NAME=SPEC`` varies
one more (``LOW:HIGH``, ``LOW:HIGH:log`` or ``A,B,...``; see `vecdqn.tuning.space`). The objective
is the run's own periodic evaluation return (``--objective train``: the mean return of its last
100 training games), reported at each evaluation so that the pruner stops hopeless trials early.
The study is kept in SQLite (``<log-dir>/<study>/study.db``) or any SQLAlchemy URL (``--storage``;
printed with its password hidden): the same command again continues it, with the same fixed
options, objective and kinds of dimensions. Several tuners may run one study at once, on one
machine or several; with ``--sampler-seed S`` trial n samples with a seed drawn from (S, n), so
they do not repeat each other's values. A trial whose tuner was killed outright is marked failed
when the study is next opened on the same host (elsewhere: by Optuna's heartbeat, 3 minutes after
its last beat). At the end: a table of the best trials and the train.py command line that
reproduces the best one.

Exit codes: 0 done; 1 every trial of this invocation failed; 2 bad input (one line on stderr,
before any trial starts, nothing left behind), optuna missing; 130/143 stopped by SIGINT/SIGTERM
(the running trial checkpoints, exits and is marked failed; the same command continues the study).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path

# Run from a source checkout without installing: make the package importable.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from vecdqn.cli import (  # noqa: E402
    OneLineErrorParser,
    UsageError,
    duration,
    error_line,
    exit_code,
    finite_number,
    whole_number,
)
from vecdqn.tuning import StudyError, require_optuna  # noqa: E402
from vecdqn.tuning.space import Dimension, SpaceError, parse_space, read_space_file  # noqa: E402

PROG = "tune.py"


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineErrorParser(
        prog=PROG, allow_abbrev=False, formatter_class=argparse.RawDescriptionHelpFormatter,
        usage=f"{PROG} [options] --space NAME=SPEC [--space ...] -- [train.py options]",
        description="Tune train.py's options with Optuna. Each trial is an ordinary run under "
        "<log-dir>/<study>/trial_<number> (TensorBoard, checkpoints); the options after -- are train.py's and are "
        "the same for every trial.",
        epilog="search space: NAME=LOW:HIGH (a range, ends included; for an integer option whole numbers in the "
        "digits 0-9, as train.py takes them: n_step=1:1000, not 1:1e3), "
        "NAME=LOW:HIGH:log (log scale, LOW > 0), NAME=A,B,... (choices; true,false for on/off options). NAME is "
        "a train.py option (learning_rate, --learning-rate).\n\nexample:\n  python scripts/tune.py --study-name "
        "catch --n-trials 8 --space learning_rate=1e-4:3e-3:log --space n_step=1:3 \\\n"
        "      -- --preset catch --total-steps 6000 --eval-every 1500",
    )
    parser.add_argument("--space", action="append", default=[], metavar="NAME=SPEC",
                        help="one dimension of the search space (repeat for more): LOW:HIGH, LOW:HIGH:log or "
                        "A,B,...; an integer option's numbers are whole numbers as train.py takes them (1000, not "
                        "1e3 or 1000.0)")
    parser.add_argument("--space-file", metavar="FILE",
                        help="more dimensions, one NAME=SPEC per line ('#' starts a comment)")
    parser.add_argument("--objective", choices=("eval", "train"), default="eval",
                        help="eval: mean return of the run's periodic evaluation (the last one at the end; needs "
                        "--eval-every); train: mean raw return of its last 100 training games (default: eval)")
    parser.add_argument("--n-trials", type=whole_number, default=20, metavar="N",
                        help="trials to run in this invocation (default: 20)")
    parser.add_argument("--timeout", type=duration, default=None, metavar="SECONDS",
                        help="start no trial after this many seconds (a running one finishes; default: none)")
    parser.add_argument("--study-name", default="", metavar="NAME",
                        help="the study (default: tune-<env id>); the same name continues it")
    parser.add_argument("--storage", default="", metavar="URL",
                        help="SQLAlchemy URL of the study's database, e.g. postgresql://host/db to share a study "
                        "between machines (default: sqlite:///<log-dir>/<study>/study.db)")
    parser.add_argument("--pruner", choices=("median", "threshold", "none"), default="median",
                        help="median: stop a trial whose best value so far is below the median of earlier trials at "
                        "the same agent step; threshold: stop one below --prune-below; none (default: median)")
    parser.add_argument("--pruner-startup-trials", type=whole_number, default=5, metavar="N",
                        help="trials that finish before the median pruner stops any (default: 5)")
    parser.add_argument("--pruner-warmup-steps", type=whole_number, default=0, metavar="STEPS",
                        help="agent steps of each trial before it can be stopped (default: 0)")
    parser.add_argument("--prune-below", type=finite_number, default=None, metavar="VALUE",
                        help="--pruner threshold: stop a trial whose value is below this")
    parser.add_argument("--sampler-seed", type=whole_number, default=None, metavar="SEED",
                        help="seed of the TPE sampler; trial n samples with a seed drawn from (SEED, n), so tuners "
                        "running one study together draw differently (default: none, i.e. random)")
    parser.add_argument("--top", type=whole_number, default=5, metavar="N", help="rows of the final table (default: 5)")
    return parser


def split_argv(argv: list[str]) -> tuple[list[str], list[str]]:
    """tune.py's own arguments and train.py's (those after the first ``--``)."""
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1:]
    return argv, []


def check_args(args: argparse.Namespace) -> None:
    """Refuse bad values of tune.py's own options."""
    if args.n_trials < 1:
        raise UsageError(f"--n-trials {args.n_trials} must be at least 1")
    if args.timeout is not None and not args.timeout > 0:
        raise UsageError(f"--timeout {args.timeout} must be a positive number of seconds")
    for name in ("pruner_startup_trials", "pruner_warmup_steps"):
        if getattr(args, name) < 0:
            raise UsageError(f"--{name.replace('_', '-')} {getattr(args, name)} must be >= 0")
    if args.top < 1:
        raise UsageError(f"--top {args.top} must be at least 1")
    if args.sampler_seed is not None and args.sampler_seed < 0:
        raise UsageError(f"--sampler-seed {args.sampler_seed} must be >= 0")
    if (args.pruner == "threshold") != (args.prune_below is not None):
        raise UsageError("--prune-below goes with --pruner threshold, and --pruner threshold needs --prune-below")
    if args.study_name and ("/" in args.study_name or args.study_name in (".", "..")):
        raise UsageError(f"--study-name {args.study_name!r} must be a plain folder name (no '/')")
    if len(args.study_name.encode()) > 255:  # the study's folder under --log-dir
        raise UsageError(f"--study-name of {len(args.study_name.encode())} bytes is too long for a folder name; use "
                         "at most 255 bytes")


@contextlib.contextmanager
def removed_if_refused(folder: Path) -> Iterator[None]:
    """Remove ``folder`` and the parents of it that did not exist before the block, if the block
    raises and they are still empty: refused input leaves no folder behind."""
    new = [p for p in (folder, *folder.parents) if not p.exists()]  # deepest first
    try:
        yield
    except BaseException:
        for path in new:
            try:
                path.rmdir()
            except FileNotFoundError:  # never made
                continue
            except OSError:  # not empty (or not ours to remove): keep it and its parents
                break
        raise


def main(argv: list[str] | None = None) -> int:
    """Command-line entry; see the module docstring for the exit codes."""
    from vecdqn.preflight import ConfigError
    from vecdqn.tuning.train_command import CommandError

    return exit_code(PROG, lambda: _tune(sys.argv[1:] if argv is None else list(argv)),
                     bad_input=(SpaceError, CommandError, ConfigError, StudyError))


def _tune(argv: list[str]) -> int:
    """`main`'s body: tune.py's own options and the space first (no Optuna or torch needed for them)."""
    own, train_options = split_argv(argv)
    args = build_parser().parse_args(own)
    check_args(args)
    try:
        require_optuna()
    except ImportError as err:
        raise UsageError(str(err)) from None
    specs = list(args.space) + (read_space_file(args.space_file) if args.space_file else [])
    return tune(args, parse_space(specs), train_options)


def tune(args: argparse.Namespace, dims: list[Dimension], train_options: list[str]) -> int:
    """Check the fixed options and the space against train.py, open the study, run the trials,
    print the table and the best command line.

    Raises:
        UsageError, CommandError, ConfigError, StudyError: bad input, before any trial starts.
    """
    # Optuna, torch and the env: imported after the cheap checks.
    import optuna

    from vecdqn.preflight import preflight
    from vecdqn.tuning.storage import shown_url
    from vecdqn.tuning.study import (
        OBJECTIVE_LABELS,
        StudyInterrupted,
        TrialFailed,
        TrialRunner,
        check_space,
        fail_orphaned_trials,
        make_pruner,
        open_study,
        results_table,
    )
    from vecdqn.tuning.train_command import TrainCommand

    command = TrainCommand.parse(train_options)
    config = command.config
    if args.objective == "eval" and not 0 < config.eval_every <= config.total_steps:
        raise UsageError(f"--objective eval needs periodic evaluations, but --eval-every is {config.eval_every} "
                         f"with --total-steps {config.total_steps}; give train.py an --eval-every of at most "
                         "--total-steps after --, or use --objective train")
    command.check_space(dims)
    name = args.study_name or "tune-" + config.env_id.replace("/", "-")
    study_dir = Path(config.log_dir) / name
    storage = args.storage or f"sqlite:///{study_dir / 'study.db'}"
    optuna.logging.set_verbosity(optuna.logging.ERROR)  # one line per event is printed below instead
    pruner = make_pruner(args.pruner, args.pruner_startup_trials, args.pruner_warmup_steps, args.prune_below)
    with removed_if_refused(study_dir):
        preflight(config)  # the env starts, the log folder is writable, --track's package is there, ...
        if not args.storage:  # the default SQLite file's folder
            _make_folder(study_dir)
        study = open_study(name, storage, pruner, seed=args.sampler_seed, objective=args.objective,
                           train_options=train_options)
        check_space(study, dims)
        _make_folder(study_dir)
    for number, owner in fail_orphaned_trials(study):
        print(f"trial {number}: marked failed: its tuner (pid {owner['pid']} on {owner['host']}) is gone", flush=True)
    extra = {"wandb_group": name} if config.track and not config.wandb_group else {}
    runner = TrialRunner(command, dims, args.objective, study_dir, say=lambda line: print(line, flush=True),
                         extra=extra)
    before = len(study.trials)
    print(f"study {name} ({shown_url(storage)}): {before} trials so far; running {args.n_trials} more"
          + (f" for at most {args.timeout:g} s" if args.timeout else ""), flush=True)
    runner.install()
    try:
        study.optimize(runner, n_trials=args.n_trials, timeout=args.timeout, catch=(TrialFailed,))
    except (StudyInterrupted, KeyboardInterrupt) as stop:
        print(f"{PROG}: stopped; a trial that was running checkpointed its run and is marked failed. Continue the "
              "study with the same command.", file=sys.stderr)
        return stop.exit_code if isinstance(stop, StudyInterrupted) else 130
    finally:
        runner.uninstall()
    print("\n" + results_table(study, dims, args.top))
    finished = [t for t in study.trials[before:] if t.state != optuna.trial.TrialState.FAIL]
    try:
        best = study.best_trial
    except ValueError:  # no finished trial yet
        best = None
    if best is not None:
        label = OBJECTIVE_LABELS[args.objective]
        print(f"\nbest: trial {best.number} ({label} {best.value:.4g}); reproduce it with:\n"
              f"  {best.user_attrs['command']}")
    if not finished:
        print(error_line(PROG, RuntimeError("every trial of this invocation failed; see their train.log")),
              file=sys.stderr)
        return 1
    return 0


def _make_folder(folder: Path) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UsageError(f"cannot make the study folder {folder}: {err.strerror}") from None


if __name__ == "__main__":
    sys.exit(main())
