"""The Optuna study: its storage and pruner, the objective that runs one trial, the results.

A trial samples one value per dimension, runs ``train.py`` with them as an ordinary run
(``<log-dir>/<study>/trial_<number>``, see `vecdqn.tuning.trial_run`), reports the objective at
each periodic evaluation (``trial.report(value, agent step)``) and stops the run (SIGINT:
checkpoint, exit) as soon as the pruner says so. The objective is the mean return of the run's own
periodic evaluation (the last one for a finished run), or, with ``objective="train"``, the mean raw
return of the last 100 training games.

The study lives in a database (SQLite by default, any SQLAlchemy URL), so a second invocation
with the same name continues it, and several tuners, on one machine or several, can run it
together: opening a SQLite study is serialized (`vecdqn.tuning.storage.opening_lock`), and each
trial's sampler seed is drawn from the study's seed and the trial's number (`SeededTPESampler`),
so tuners given one ``--sampler-seed`` do not sample the same values.

Trial states stay consistent when the tuner is stopped: a Ctrl-C (or SIGTERM) is forwarded to the
running trial, which checkpoints and exits; the trial is then marked failed (its run can be
resumed by hand) and the tuner exits 130 (143). A tuner killed outright leaves its trial "running"
in the database (its run checkpoints and exits by itself, see
`vecdqn.tuning.trial_run.child_main`). Each trial records its tuner (`vecdqn.tuning.liveness`), so
the next tuner that opens the study on the same host marks the trial failed if that tuner is gone
(`fail_orphaned_trials`); a trial of a tuner on another host is marked failed by Optuna's
heartbeat, ``GRACE_S`` after its last beat.
"""

from __future__ import annotations

import math
import random
import signal
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import TrialState

from vecdqn.signals import Handlers
from vecdqn.tuning import StudyError, liveness
from vecdqn.tuning.space import Dimension
from vecdqn.tuning.storage import hide_passwords, is_opening_race, opening_lock, shown_url, sqlite_folder
from vecdqn.tuning.train_command import TrainCommand
from vecdqn.tuning.trial_run import EventFollower, TrialProcess

__all__ = ["SeededTPESampler", "StudyError", "StudyInterrupted", "TrialFailed", "TrialRunner", "check_space",
           "fail_orphaned_trials", "make_pruner", "open_study", "results_table", "trial_seed"]

# Seconds between heartbeats of a running trial, and after which a silent one counts as dead
# (a tuner killed outright; see the module docstring).
HEARTBEAT_S = 60
GRACE_S = 180
# Tries at opening a study whose tables another tuner is creating at the same moment (a server
# database; SQLite ones take turns under `opening_lock`), with a doubling pause from OPEN_PAUSE_S.
OPEN_TRIES = 6
OPEN_PAUSE_S = 0.1

OBJECTIVE_LABELS = {"eval": "eval return", "train": "training return (last 100 games)"}


class TrialFailed(Exception):
    """A trial's run ended without a result (train.py failed); the study goes on."""


class StudyInterrupted(Exception):
    """The tuner was stopped by a signal while a trial ran; that trial is marked failed."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


def make_pruner(kind: str, startup_trials: int = 5, warmup_steps: int = 0,
                prune_below: float | None = None) -> optuna.pruners.BasePruner:
    """The pruner that decides, at each reported evaluation, whether a trial stops.

    Args:
        kind: ``"median"`` (stop a trial whose best value so far is below the median of earlier
            trials' values at the same agent step), ``"threshold"`` (stop one whose value is
            below ``prune_below``) or ``"none"``.
        startup_trials: trials that finish unpruned before the median pruner starts.
        warmup_steps: agent steps of each trial before any pruning.
        prune_below: the threshold pruner's lower bound (objective units).

    Raises:
        StudyError: an unknown kind, or ``"threshold"`` without ``prune_below``.
    """
    if kind == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=startup_trials, n_warmup_steps=warmup_steps)
    if kind == "threshold":
        if prune_below is None:
            raise StudyError("--pruner threshold needs --prune-below VALUE")
        return optuna.pruners.ThresholdPruner(lower=prune_below, n_warmup_steps=warmup_steps)
    if kind == "none":
        return optuna.pruners.NopPruner()
    raise StudyError(f"--pruner {kind!r} is not one of median, threshold, none")


def trial_seed(seed: int, number: int) -> int:
    """The sampler's seed for trial ``number`` of a study seeded with ``seed`` (>= 0): a 32-bit
    draw of NumPy's ``SeedSequence((seed, number))``, so nearby seeds and numbers do not give
    related streams."""
    return int(np.random.SeedSequence((seed, number)).generate_state(1)[0])


class SeededTPESampler(optuna.samplers.BaseSampler):
    """Optuna's TPE sampler with its random state seeded afresh for each trial:
    ``trial_seed(seed, trial number)``.

    Why per trial: the storage hands out each trial number once, so tuners that run one study
    together with one seed still draw differently; seeding each tuner once (say, with the seed
    plus the trials so far) gives two tuners started together the same stream and the same
    trials. One tuner alone samples the same values for the same seed and the same history.

    Args:
        seed: the study's seed (``--sampler-seed``), >= 0.
    """

    def __init__(self, seed: int):
        self.seed = seed
        self.tpe = optuna.samplers.TPESampler(seed=trial_seed(seed, 0))  # replaced at each trial's start

    def before_trial(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        self.tpe = optuna.samplers.TPESampler(seed=trial_seed(self.seed, trial.number))
        self.tpe.before_trial(study, trial)

    def infer_relative_search_space(self, study: optuna.Study,
                                    trial: optuna.trial.FrozenTrial) -> dict[str, BaseDistribution]:
        return self.tpe.infer_relative_search_space(study, trial)

    def sample_relative(self, study: optuna.Study, trial: optuna.trial.FrozenTrial,
                        search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        return self.tpe.sample_relative(study, trial, search_space)

    def sample_independent(self, study: optuna.Study, trial: optuna.trial.FrozenTrial, param_name: str,
                           param_distribution: BaseDistribution) -> Any:
        return self.tpe.sample_independent(study, trial, param_name, param_distribution)

    def after_trial(self, study: optuna.Study, trial: optuna.trial.FrozenTrial, state: TrialState,
                    values: Any) -> None:
        self.tpe.after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        self.tpe.reseed_rng()


def open_study(name: str, storage_url: str, pruner: optuna.pruners.BasePruner, *, seed: int | None = None,
               objective: str, train_options: list[str]) -> optuna.Study:
    """Create the study, or load it if the storage holds one of that name.

    A loaded study must have been run with the same objective and fixed ``train.py`` options:
    trials of different budgets or objectives are not comparable. Nothing is written to a study
    that is refused. Tuners may open one study at the same moment: a SQLite one under
    `opening_lock`, any one with up to ``OPEN_TRIES`` tries when another tuner is creating its
    tables (`is_opening_race`).

    Args:
        seed: the sampler's seed (`SeededTPESampler`: each trial's is drawn from it and the trial's
            number); None: unseeded.

    Raises:
        StudyError: the storage cannot be opened (the URL shown without its password), or the study
            was run with another objective or other fixed options.
    """
    for attempt in range(OPEN_TRIES):
        try:
            with opening_lock(sqlite_folder(storage_url)):
                study, created = _create_or_load(name, storage_url, pruner, seed)
                if created:
                    study.set_user_attr("objective", objective)
                    study.set_user_attr("train_options", list(train_options))
            break
        except Exception as err:  # SQLAlchemy's and the driver's errors alike
            if attempt + 1 < OPEN_TRIES and is_opening_race(err):
                time.sleep(OPEN_PAUSE_S * 2**attempt * (1 + random.random()))
                continue
            first = str(err).strip().splitlines()[0] if str(err).strip() else ""
            raise StudyError(f"--storage {shown_url(storage_url)}: cannot open it ({type(err).__name__}: "
                             f"{hide_passwords(first)})") from None
    if created:
        return study
    saved = study.user_attrs
    if saved.get("objective") != objective:
        raise StudyError(f"study {name!r} optimizes the {saved.get('objective')} objective, not {objective}; give "
                         f"--objective {saved.get('objective')} to continue it, or another --study-name")
    if saved.get("train_options") != list(train_options):
        raise StudyError(f"study {name!r} was run with the train.py options {' '.join(saved['train_options'])!r}, "
                         "not these; give the same options after -- to continue it, or another --study-name")
    return study


def _create_or_load(name: str, storage_url: str, pruner: optuna.pruners.BasePruner,
                    seed: int | None) -> tuple[optuna.Study, bool]:
    """The study and whether this call made it (a new study has no user attributes yet)."""
    with warnings.catch_warnings():  # the heartbeat is marked experimental; it has been there since Optuna 2.9
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        storage = optuna.storages.RDBStorage(storage_url, heartbeat_interval=HEARTBEAT_S, grace_period=GRACE_S)
    sampler = optuna.samplers.TPESampler() if seed is None else SeededTPESampler(seed)
    study = optuna.create_study(study_name=name, storage=storage, direction="maximize", pruner=pruner,
                                sampler=sampler, load_if_exists=True)
    return study, not study.user_attrs


def _distribution(dim: Dimension) -> BaseDistribution:
    """What ``dim.suggest`` asks Optuna for."""
    if dim.kind == "int":
        return IntDistribution(int(dim.low), int(dim.high), log=dim.log)
    if dim.kind == "float":
        return FloatDistribution(float(dim.low), float(dim.high), log=dim.log)
    return CategoricalDistribution(list(dim.choices))


def _spec(dist: BaseDistribution) -> str:
    """A distribution as a ``--space`` value: ``1:3``, ``0.0001:0.003:log``, ``true,false``."""
    if isinstance(dist, CategoricalDistribution):
        return ",".join(str(c).lower() if isinstance(c, bool) else str(c) for c in dist.choices)
    assert isinstance(dist, (IntDistribution, FloatDistribution))
    return f"{dist.low}:{dist.high}" + (":log" if dist.log else "")


def _kind(dist: BaseDistribution) -> str:
    if isinstance(dist, CategoricalDistribution):
        return "choices"
    assert isinstance(dist, (IntDistribution, FloatDistribution))
    return f"a {'log-scale' if dist.log else 'linear'} {'integer ' if isinstance(dist, IntDistribution) else ''}range"


def check_space(study: optuna.Study, dims: list[Dimension]) -> None:
    """Refuse a dimension that Optuna cannot continue in this study: each must be sampled as the
    study's trials sampled it, the same kind (range or choices), the same scale (log or linear),
    and, for choices, the same ones in the same order; a range's ends may move. (Optuna itself
    would fail the first trial that samples it.)

    Raises:
        StudyError: naming the dimension, the study's distribution and how to continue the study
            or start a new one.
    """
    trials = study.get_trials(deepcopy=False)
    for dim in dims:
        old = next((t.distributions[dim.name] for t in trials if dim.name in t.distributions), None)
        if old is None:
            continue
        new = _distribution(dim)
        try:  # Optuna's own rule, the one its storage applies to each sampled value
            optuna.distributions.check_distribution_compatibility(old, new)
        except ValueError:
            as_new = "other choices" if isinstance(old, CategoricalDistribution) and _kind(new) == "choices" \
                else _kind(new)
            moves = " (a range's ends may move)" if not isinstance(old, CategoricalDistribution) else ""
            raise StudyError(
                f"--space {dim.spec}: study {study.study_name!r} samples {dim.name}={_spec(old)} ({_kind(old)}), and "
                f"Optuna cannot continue it as {as_new}; give --space {dim.name}={_spec(old)} to continue the "
                f"study{moves}, or another --study-name to start a new study") from None


def fail_orphaned_trials(study: optuna.Study) -> list[tuple[int, dict[str, Any]]]:
    """Mark failed each running trial whose tuner has ended on this host (`liveness.is_gone`): a
    tuner killed outright. Trials of tuners elsewhere are left to Optuna's heartbeat.

    Returns:
        ``(trial number, its tuner's identity)`` for each trial marked failed.
    """
    failed = []
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        owner = trial.user_attrs.get("tuner")
        if liveness.is_gone(owner):
            # skip_if_finished: another tuner may have marked it first.
            study.tell(trial.number, state=TrialState.FAIL, skip_if_finished=True)
            failed.append((trial.number, owner))
    return failed


class TrialRunner:
    """The objective: one trial as one ``train.py`` run; also the tuner's SIGINT/SIGTERM handler.

    Args:
        command: the study's fixed ``train.py`` options.
        dims: the search space.
        objective: ``"eval"`` or ``"train"`` (see the module docstring).
        study_dir: the folder of the trials' run folders.
        say: prints one line of progress.
        extra: ``train.py`` options every trial gets besides its parameters (e.g. a W&B group).
        poll_s: seconds between reads of the running trial's event file.
        grace_s: seconds a stopped trial may take to checkpoint and exit before it is killed.
    """

    def __init__(self, command: TrainCommand, dims: list[Dimension], objective: str, study_dir: Path,
                 say: Callable[[str], None], *, extra: dict[str, Any] | None = None, poll_s: float = 0.5,
                 grace_s: float = 300.0):
        self.command = command
        self.dims = dims
        self.objective = objective
        self.study_dir = study_dir
        self.say = say
        self.extra = extra or {}
        self.poll_s = poll_s
        self.grace_s = grace_s
        self.signum: int | None = None
        self.current: TrialProcess | None = None
        self._handlers = Handlers(self._on_signal)

    # -- signals -----------------------------------------------------------------------------------
    def install(self) -> None:
        """Handle SIGINT/SIGTERM: forward them to a running trial, else stop at once."""
        self._handlers.install()

    def uninstall(self) -> None:
        self._handlers.uninstall()

    def _on_signal(self, signum: int, frame: Any) -> None:
        if self.signum is None:
            self.signum = signum
        if self.current is not None:
            # The first signal asks the trial to checkpoint and exit; a second one stops it at once.
            # The objective sees `signum` and ends the trial (marked failed) once the child exits.
            self.current.interrupt(signum)
            return
        raise KeyboardInterrupt  # between trials: nothing runs that needs to end first

    # -- the objective ---------------------------------------------------------------------------
    def __call__(self, trial: optuna.Trial) -> float:
        """Run one trial; returns its objective value.

        Raises:
            optuna.TrialPruned: the pruner stopped it (its run is checkpointed).
            TrialFailed: its run failed (train.py's last error line is the message).
            StudyInterrupted: the tuner was stopped meanwhile.
        """
        if self.signum is not None:
            raise StudyInterrupted(self.signum)
        trial.set_user_attr("tuner", liveness.identity())  # see fail_orphaned_trials
        params = {dim.name: dim.suggest(trial) for dim in self.dims}
        name = f"trial_{trial.number:04d}"
        run_dir = self.study_dir / name
        trial.set_user_attr("run_dir", str(run_dir))
        trial.set_user_attr("command", self.command.reproduce(params))
        run_dir.mkdir(parents=True, exist_ok=True)
        shown = " ".join(f"{k}={_short(v)}" for k, v in params.items())
        self.say(f"trial {trial.number}: {shown} -> {run_dir}")
        argv = self.command.argv(params, log_dir=str(self.study_dir), run_name=name, **self.extra)
        proc = TrialProcess(argv, run_dir / "train.log", grace_s=self.grace_s)
        started = time.monotonic()
        self.current = proc
        try:
            proc.start()
            follower = EventFollower(run_dir, self.objective)
            code = self._follow(trial, proc, follower)
        finally:
            self.current = None
            proc.close()
        minutes = (time.monotonic() - started) / 60
        value = follower.final_value() if code == 0 else None
        if value is None:
            why = (f"train.py exited with code {code} after {minutes:.1f} min: {proc.error_line()}" if code != 0 else
                   f"its run logged no {OBJECTIVE_LABELS[self.objective]}")
            self.say(f"trial {trial.number}: failed: {why} (see {run_dir / 'train.log'})")
            raise TrialFailed(why)
        self.say(f"trial {trial.number}: done in {minutes:.1f} min, {OBJECTIVE_LABELS[self.objective]} {value:.4g}")
        return value

    def _follow(self, trial: optuna.Trial, proc: TrialProcess, follower: EventFollower) -> int:
        """Report each evaluation until the run exits; prune or stop it on the way.

        Returns:
            the run's exit code.
        """
        label = OBJECTIVE_LABELS[self.objective]
        while True:
            code = proc.poll()
            for step, value in follower.new_values():
                trial.report(value, step)
                line = f"trial {trial.number}: {label} {value:.4g} at agent step {step:,}"
                # A run that has exited is complete: its last values are reported, not pruned.
                if code is None and self.signum is None and trial.should_prune():
                    self.say(line + f"; pruned ({type(trial.study.pruner).__name__})")
                    trial.set_user_attr("pruned_at_step", step)
                    proc.interrupt()
                    proc.wait(self.grace_s)
                    raise optuna.TrialPruned(f"{label} {value:.4g} at agent step {step}")
                self.say(line)
            if self.signum is not None:
                if proc.signals_sent == 0:  # the signal came before the child was started
                    proc.interrupt(self.signum)
                self.say(f"trial {trial.number}: stopping its run ({signal.Signals(self.signum).name}); it "
                         "checkpoints and exits")
                proc.wait(self.grace_s)
                raise StudyInterrupted(self.signum)
            if code is not None:
                return code
            time.sleep(self.poll_s)


def _short(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def results_table(study: optuna.Study, dims: list[Dimension], top: int = 5) -> str:
    """A Markdown table of the ``top`` best finished trials (highest value first), with one
    column per dimension of this space, and a line counting the trials by state."""
    trials = study.get_trials(deepcopy=False)
    counts: dict[str, int] = {}
    for t in trials:
        counts[t.state.name.lower()] = counts.get(t.state.name.lower(), 0) + 1
    label = OBJECTIVE_LABELS.get(study.user_attrs.get("objective", "eval"), "value")
    summary = f"study {study.study_name}: {len(trials)} trials (" + ", ".join(
        f"{n} {state}" for state, n in sorted(counts.items())) + ")"
    done = sorted((t for t in trials if t.state == optuna.trial.TrialState.COMPLETE and t.value is not None
                   and math.isfinite(t.value)), key=lambda t: (-t.value, t.number))[:top]
    if not done:
        return summary + "; none finished yet"
    names = [d.name for d in dims]
    head = ["trial", label, *names, "run folder"]
    rows = [[str(t.number), f"{t.value:.4g}", *(_short(t.params[n]) if n in t.params else "·" for n in names),
             t.user_attrs.get("run_dir", "")] for t in done]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return summary + "\n\n" + "\n".join(lines)
