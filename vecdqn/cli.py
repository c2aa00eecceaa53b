"""The command lines: ``scripts/train.py``'s parser generated from `Config`, its presets help,
and what every script shares, a parser whose errors are one line and one mapping of outcomes to
exit codes.

Exit codes of every script (``train.py``, ``evaluate.py``, ``plot.py``, ``benchmark.py``): 0 done;
2 bad input, reported as one line ``<script>: error: <what is wrong and what is allowed>`` on
stderr before anything starts; 130 interrupted (Ctrl-C). ``train.py`` adds 143 (SIGTERM) and 1
(a worker failure or a non-finite loss during the run: one line, the traceback in the run
folder's ``error.log``); a signal that comes after its run finished stops nothing (0 and one line,
see `main`).

The training stack is imported inside `main` only: ``evaluate.py`` and ``plot.py`` use this
module's parser and exit codes without loading it.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import shlex
import signal
import sys
import tempfile
import textwrap
from collections.abc import Callable, Iterable
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from vecdqn.config import MAX_COUNT, MAX_SECONDS, Config, check_options_used, option_flag, options_with
from vecdqn.learners import LEARNERS, learner_spec, learners_using
from vecdqn.presets import PRESET_SOURCES, PRESETS, check_preset
from vecdqn.schedules import SCHEDULE_SHORTHANDS, replaced_options
from vecdqn.signals import as_ctrl_c, exiting_line

if TYPE_CHECKING:
    from vecdqn.trainer import TrainerBase

__all__ = [
    "OneLineErrorParser", "UsageError", "build_parser", "check_options_apply",
    "check_output_path", "error_line", "exit_code", "OPTION_TYPES", "option_flags",
    "explicit_options", "finite_number", "main", "parse_args", "parse_config", "preset_values", "presets_help",
    "duration", "whole_number",
]

PROG = "train.py"


class UsageError(ValueError):
    """Bad command-line input; its message is one line naming the value and what is allowed.
    Reported as `error_line`, exit code 2."""


class OneLineErrorParser(argparse.ArgumentParser):
    """An argparse parser whose errors raise `UsageError` with one line and a pointer to
    ``--help`` (argparse's own would print the whole usage of ~50 options and exit)."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see {self.prog} --help)")

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        """argparse's, with a negative number given as a long option's value (``--v-min -1e3``,
        ``--v-min -inf``) kept with its option: argparse reads only ``-5`` and ``-0.5`` as numbers
        and reported "expected one argument" for the others. Tokens after ``--`` are left alone."""
        args = list(sys.argv[1:] if args is None else args)
        end = args.index("--") if "--" in args else len(args)
        for i in reversed(range(end - 1)):
            if args[i].startswith("--") and "=" not in args[i] and _negative_number(args[i + 1]):
                args[i:i + 2] = [f"{args[i]}={args[i + 1]}"]
        return super().parse_known_args(args, namespace)


def _negative_number(text: str) -> bool:
    """Whether ``text`` is ``-`` and a number Python's float reads (``-1e3``, ``-inf``)."""
    if not text.startswith("-") or text.startswith("--"):
        return False
    try:
        float(text)
    except ValueError:
        return False
    return True


def whole_number(text: str) -> int:
    """An integer option's value (argparse's ``type`` for every count, size and seed of every
    script): ASCII digits 0-9 with an optional sign and ``_`` between digits (``10_000_000``), as
    Python writes an integer, from -10**12 to 10**12 (`vecdqn.config.MAX_COUNT`). Not ``1e7``, and
    not the digits of other scripts that Python's ``int`` also reads (``int("١٢")`` is 12).

    Raises:
        argparse.ArgumentTypeError: anything else; argparse reports it as one line naming the option.

    >>> whole_number("10_000_000"), whole_number("-3")
    (10000000, -3)
    """
    try:
        value = int(text) if text.isascii() else None
    except ValueError:
        value = None
    if value is None:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r} (a whole number in the digits 0-9, with an "
                                         "optional sign and _ between digits, e.g. 10_000_000; not 1e7)")
    if abs(value) > MAX_COUNT:
        raise argparse.ArgumentTypeError(f"{value} is above 10**12, the largest count an option takes" if value > 0
                                         else f"{value} is below -10**12, the smallest whole number an option takes")
    return value


def finite_number(text: str) -> float:
    """A decimal option's value (argparse's ``type`` for them in every script): a finite number in
    ASCII (``0.5``, ``1e-4``, ``-2``); ``inf``, ``nan`` and numbers too large for a float
    (``1e400``) are refused, as are digits of other scripts. Durations take `duration`.

    Raises:
        argparse.ArgumentTypeError: anything else; argparse reports it as one line naming the option.

    >>> finite_number("1e-4"), finite_number("-2")
    (0.0001, -2.0)
    """
    if text.isascii():
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if math.isfinite(value):
            return value
    raise argparse.ArgumentTypeError(f"invalid float value: {text!r} (a finite number, e.g. 0.5 or 1e-4; not inf "
                                     "or nan)")


def duration(text: str) -> float:
    """A duration option's value in seconds (argparse's ``type`` for every duration of every
    script): a `finite_number` from 0 to 10**8 (`vecdqn.config.MAX_SECONDS`, over 3 years).

    Raises:
        argparse.ArgumentTypeError: anything else; argparse reports it as one line naming the option.

    >>> duration("40"), duration("1.5e3")
    (40.0, 1500.0)
    """
    value = finite_number(text)
    if not 0 <= value <= MAX_SECONDS:
        raise argparse.ArgumentTypeError(f"{text} seconds is above 10**8 (over 3 years), the longest duration an "
                                         "option takes" if value > 0 else f"{text} seconds is below 0")
    return value


def error_line(prog: str, err: BaseException) -> str:
    """``"<prog>: error: <message>"``: the first line of ``err``'s message (a library's message,
    e.g. torch's, may span several), or its type's name where it has none."""
    message = str(err).strip()
    return f"{prog}: error: {message.splitlines()[0] if message else type(err).__name__}"


def exit_code(prog: str, body: Callable[[], int | None], bad_input: tuple[type[BaseException], ...] = (),
              stop_on_signals: bool = False) -> int:
    """Run a script's ``body`` and map its outcome to the exit code every script uses; with
    ``stop_on_signals`` SIGINT and SIGTERM stop it as Ctrl-C does (`vecdqn.signals.as_ctrl_c`).

    Returns:
        ``body``'s own code (None: 0); 2 for a `UsageError` or one of ``bad_input`` (the script's
        errors for input it cannot use, e.g. a corrupt checkpoint), printed as `error_line`;
        130 for Ctrl-C (143 for SIGTERM), printed as ``<prog>: interrupted``; 141 (SIGPIPE's) when
        stdout's reader has gone, printing nothing.
    """
    with as_ctrl_c() if stop_on_signals else contextlib.nullcontext([]) as received:
        try:
            code = body()
        except BrokenPipeError:  # stdout's reader left (`| head`): stop quietly, as a shell tool does
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the exit's flush must not fail
            return 141  # 128 + SIGPIPE, as a shell reports a tool its pipe closed
        except (UsageError, *bad_input) as err:
            print(error_line(prog, err), file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            print(f"{prog}: interrupted", file=sys.stderr)
            return 128 + received[-1] if received else 130
    return 0 if code is None else code


def fail(prog: str, err: BaseException) -> NoReturn:
    """Print `error_line` to stderr and exit with code 2 (for helpers that exit, as argparse's do)."""
    print(error_line(prog, err), file=sys.stderr)
    raise SystemExit(2)


def check_output_path(flag: str, path: os.PathLike[str] | str) -> None:
    """Refuse an output file that could not be written, before any work is done: the folder must
    exist and take a new file (tried by creating and removing an empty one there, which also
    catches folders such as ``/proc`` that report themselves writable), and an existing file must
    be writable.

    Raises:
        UsageError: one line naming ``flag``, the path and what to do instead.
    """
    path = Path(path)
    if path.parent.exists() and not path.parent.is_dir():
        raise UsageError(f"{flag} {path}: {path.parent} is a file, not a folder")
    if not path.parent.is_dir():
        raise UsageError(f"{flag} {path}: folder {path.parent} does not exist; create it first")
    if path.is_dir():
        raise UsageError(f"{flag} {path} is a folder; give a file name")
    try:
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=".write-test-"):
            pass
    except OSError:
        raise UsageError(f"{flag} {path} is not writable: no file can be created in {path.parent}; "
                         "choose a path you can write") from None
    if path.exists() and not os.access(path, os.W_OK):
        raise UsageError(f"{flag} {path} is not writable; choose a path you can write")


# -- train.py's options, generated from Config ------------------------------------------------------


def option_flags(name: str, value: Any) -> list[str]:
    """``train.py``'s arguments for ``name = value``: ``["--n-step", "3"]``, ``["--no-double"]``
    (an on/off option is a ``--name``/``--no-name`` pair).

    Floats are written with ``repr`` so that the command line reproduces the value exactly.
    """
    flag = option_flag(name)
    if isinstance(value, bool):
        return [flag] if value else ["--no-" + flag[2:]]
    return [flag, repr(value) if isinstance(value, float) else str(value)]


# Each `Config` field's value type on the command line: "int", "float", "bool" or "str" (an
# optional field's type without its "| None").
OPTION_TYPES = {f.name: (f.type if isinstance(f.type, str) else f.type.__name__).removesuffix(" | None")
                for f in fields(Config)}


def presets_help() -> str:
    """Each preset's source and values, for ``--help``."""
    lines = ["presets (explicit options override their values):"]
    for name, values in PRESETS.items():
        lines.append(textwrap.fill(f"{name}: {PRESET_SOURCES.get(name, '')}", 100, initial_indent="  ",
                                   subsequent_indent="    "))
        flags = [(option_flag(k) if v else "--no-" + option_flag(k)[2:]) if isinstance(v, bool)
                 else f"{option_flag(k)} {v}" for k, v in values.items()]
        lines.append(textwrap.fill(", ".join(flags), 100,
                                   initial_indent="    ", subsequent_indent="    ", break_on_hyphens=False))
    return "\n".join(lines)


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Defaults after each option; the epilog (the presets) printed as written."""


def build_parser() -> OneLineErrorParser:
    """The command line of ``scripts/train.py``, one option per `Config` field."""
    learners = [textwrap.fill(f"--algo {name}{' (the default)' if name == Config.algo else ''}: {spec.summary}", 100,
                              initial_indent="  ", subsequent_indent="    ") for name, spec in LEARNERS.items()]
    rules = ("All counts are agent steps summed over envs (1 agent step = frame-skip emulator frames) unless the "
             "option says frames. Whole numbers are written in the digits 0-9 (an optional sign, _ between digits: "
             "10_000_000, not 1e7) and no count exceeds 10**12; decimal numbers must be finite (not inf or nan), and "
             "a duration in seconds is at most 10**8 (over 3 years).")
    # allow_abbrev: a prefix such as --total for --total-steps would be parsed but not seen by
    # `explicit_options`, so a preset or a resume would silently override it: refuse prefixes.
    head = "Train a Q-learning agent on an Atari game, with one of these learners:"
    parser = OneLineErrorParser(prog=PROG, description="\n".join([head, *learners, textwrap.fill(rules, 100)]),
                                formatter_class=_HelpFormatter, epilog=presets_help(), allow_abbrev=False)
    # The options every learner uses in one group, then a group per learner (or learners) for the
    # options their records name as their own.
    # Ape-X's options (those only --actors N reads) in a group of their own.
    groups = {(): parser.add_argument_group("options of every run (any --algo)")}
    for name, spec in LEARNERS.items():
        groups[(name,)] = parser.add_argument_group(f"--algo {name} options ({spec.summary})")
    actors_only = set(options_with("actors_only"))
    groups[("actors",)] = parser.add_argument_group(
        f"Ape-X options (read only with {option_flag('actors')} N; see its learner's group)")
    for f in fields(Config):
        users = ("actors",) if f.name in actors_only else tuple(learners_using(f.name))
        if users not in groups:
            groups[users] = parser.add_argument_group(f"options of {' and '.join(f'--algo {u}' for u in users)}")
        group = groups[users]
        # A learner's own default (`vecdqn.learners.LearnerSpec.defaults`) beside Config's.
        own = "".join(f"; {spec.defaults[f.name]} with --algo {name}" for name, spec in LEARNERS.items()
                      if f.name in spec.defaults)
        kwargs: dict[str, Any] = {"help": f.metadata["help"] + own, "default": f.default}
        type_name = OPTION_TYPES[f.name]
        if type_name == "bool":
            kwargs["action"] = argparse.BooleanOptionalAction  # --name / --no-name, as `option_flags` spells them
        else:
            kwargs["type"] = duration if f.metadata["unit"] == "seconds" else {
                "int": whole_number, "float": finite_number, "str": str}[type_name]
            kwargs["metavar"] = type_name.upper()
        group.add_argument(option_flag(f.name), dest=f.name, **kwargs)
    return parser


def explicit_options(parser: argparse.ArgumentParser, argv: Iterable[str]) -> set[str]:
    """Names of the options that appear on the command line (so presets and a resumed run's saved
    values do not override them)."""
    flag_to_dest = {}
    for action in parser._actions:  # noqa: SLF001 - argparse has no public mapping
        for flag in action.option_strings:
            flag_to_dest[flag] = action.dest
    given = set()
    for token in argv:
        flag = token.split("=", 1)[0]
        if flag in flag_to_dest:
            given.add(flag_to_dest[flag])
    return given


def check_options_apply(given: set[str], config: Config) -> None:
    """Refuse options given explicitly (``given``: `Config` field names) that ``config``'s run
    would not use (`vecdqn.config.check_options_used`; for its env, `vecdqn.envs.check_family_options`),
    rather than drop them silently. An unknown env id is left to the preflight, which names close
    matches.

    Raises:
        UsageError: one line naming the options and what to do instead.
    """
    from vecdqn.envs import check_family_options

    try:
        check_options_used(given, config)
        check_family_options(given, config.env_id)
    except ValueError as err:
        raise UsageError(str(err)) from None


def preset_values(preset: str, given: set[str]) -> dict[str, Any]:
    """The values a preset sets, less those the command line replaces (`replaced_options`): an
    explicit option wins, an explicit two-point shorthand (e.g. ``--epsilon-end``) also drops the
    preset's schedule of that quantity (``epsilon_schedule``), and an explicit schedule the
    preset's shorthand values."""
    skip = replaced_options(given)
    for schedule, shorthand in SCHEDULE_SHORTHANDS.items():
        if schedule in given:
            skip.update(shorthand)
    return {key: value for key, value in PRESETS[preset].items() if key not in skip}


def preset_algo(preset: str) -> str:
    """The learner (``--algo``) preset ``preset`` is for: its own ``algo``, else Config's default."""
    return PRESETS[preset].get("algo", Config.__dataclass_fields__["algo"].default)


def parse_config(argv: list[str] | None = None, *, validate: bool = True) -> tuple[Config, set[str]]:
    """Parse ``scripts/train.py``'s command line: ``(config, the names of the options given)``.

    A new run starts from `Config`'s defaults, replaced by its learner's own
    (`vecdqn.learners.LearnerSpec.defaults`), then by the values of a ``--preset``, then by the
    options given. With ``--resume`` the config is not validated here: the saved configuration,
    updated with the options given, is checked when the run is loaded. ``validate=False`` leaves
    `Config.validate` to the caller (train.py's run checks it once, in `vecdqn.preflight.preflight`).

    Raises:
        UsageError: a malformed option, both forms of one schedule, an unknown preset, an empty ``--resume``, a
            ``--preset`` with ``--resume`` or with another learner's ``--algo``, or (without ``--resume``) an option
            the run would not use (`check_options_apply`) or (with ``validate``) a value `Config.validate` refuses.
    """
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    values = vars(parser.parse_args(argv))
    given = explicit_options(parser, argv)
    for schedule, shorthand in SCHEDULE_SHORTHANDS.items():
        both = sorted(option_flag(name) for name in given.intersection(shorthand))
        if schedule in given and both:
            raise UsageError(f"{option_flag(schedule)} and {', '.join(both)} set the same schedule; give one form "
                             "only")
    if "resume" in given and not values["resume"].strip():  # "" would start a new run of the defaults
        raise UsageError(f"--resume {values['resume']!r} names no run; give a run folder or a checkpoint file")
    preset = values["preset"]
    if preset:
        try:
            check_preset(preset)
        except ValueError as err:
            raise UsageError(str(err)) from None
    if preset and values["resume"]:
        raise UsageError(f"--preset {preset} cannot be given with --resume: the run continues with its saved "
                         "values; give the options to change one by one (e.g. --total-steps)")
    if preset:
        own = preset_algo(preset)
        if "algo" in given and values["algo"] in LEARNERS and values["algo"] != own:
            fitting = sorted(name for name in PRESETS if preset_algo(name) == values["algo"])
            raise UsageError(f"--algo {values['algo']} does not fit --preset {preset}, a preset for --algo {own} "
                             f"(its options for {own} would not be used); use one of {fitting}, or no preset")
    if not values["resume"]:  # the learner's own defaults, under the preset's values and the options given
        algo = preset_algo(preset) if preset and "algo" not in given else values["algo"]
        if algo in LEARNERS:
            values.update({k: v for k, v in learner_spec(algo).defaults.items() if k not in given})
    if preset:
        values.update(preset_values(preset, given))
    config = Config(**values)
    if not config.resume:
        check_options_apply(given, config)
        if validate:
            try:
                config.validate()
            except ValueError as err:
                raise UsageError(str(err)) from None
    return config, given


def parse_args(argv: list[str] | None = None) -> Config:
    """`parse_config`'s config; on bad input prints one line to stderr and exits with code 2."""
    try:
        return parse_config(argv)[0]
    except UsageError as err:
        fail(PROG, err)


# -- train.py ---------------------------------------------------------------------------------------


def trainer_class(actors: int) -> type[TrainerBase]:
    """`Trainer` for ``--actors 0``, else the distributed trainer.

    Raises:
        UsageError: ``actors > 0`` and Ray is not installed (one line: what to install).
    """
    from vecdqn.trainer import Trainer

    if actors <= 0:
        return Trainer
    from vecdqn.distributed import require_ray
    try:
        require_ray()
    except ImportError as err:
        raise UsageError(str(err)) from None
    from vecdqn.distributed.learner import DistributedTrainer

    return DistributedTrainer


def main(argv: list[str] | None = None) -> int:
    """Command-line entry (``scripts/train.py``).

    Exit codes: 0 done; 2 bad input, ``--actors`` without Ray installed or a Ray instance to join
    where none answers (one line on stderr, nothing started); 130/143 stopped by SIGINT/SIGTERM
    after a checkpoint; 1 a worker or actor failure, a non-finite loss or a checkpoint that could
    not be written (one line on stderr naming what failed and the last checkpoint; the traceback
    in the run folder's ``error.log``). A first SIGINT/SIGTERM during the step that reaches
    ``--total-steps`` or after it (final checkpoints, closing workers and writers, this report)
    stops nothing: the run ends as done, exit code 0, and one line on stderr, ``train.py: SIGINT
    while exiting; nothing was stopped``, says so (`vecdqn.signals.exit_process` covers the
    process's exit after that).
    """
    from vecdqn import checkpoint
    from vecdqn.preflight import ConfigError

    return exit_code(PROG, lambda: _train(argv), bad_input=(ConfigError, checkpoint.CheckpointError))


def _train(argv: list[str] | None) -> int:
    """`main`'s body: parse, build the trainer (bad input raises), run it (outcomes as exit codes)."""
    from vecdqn import checkpoint
    from vecdqn.collector import NonFiniteError
    from vecdqn.envs import WorkerError
    from vecdqn.run_dir import write_error_log
    from vecdqn.signals import Interrupted

    config, given = parse_config(argv, validate=False)  # the trainer's preflight validates it
    if config.resume:
        from vecdqn.resume import resume

        resumed = resume(config.resume, {k: getattr(config, k) for k in given - {"resume"}})
        trainer = trainer_class(resumed.config.actors)(resumed.config, resume=resumed)
    else:
        trainer = trainer_class(config.actors)(config)
    try:
        summary = trainer.run()
    except Interrupted as stop:
        again = shlex.join(["python", "scripts/train.py", "--resume", str(trainer.core.run_dir)])
        print(f"stopped by {signal.Signals(stop.signum).name} at agent step {trainer.core.state.step}; checkpoint: "
              f"{stop.checkpoint_path}\nresume with: {again}", file=sys.stderr)
        return stop.exit_code
    except KeyboardInterrupt:
        latest = trainer.core.run_dir / "checkpoints" / "latest.pt"
        where = f"the last checkpoint is {latest}" if latest.exists() else "no checkpoint was written yet"
        print(f"stopped at once at agent step {trainer.core.state.step}; {where}", file=sys.stderr)
        return 130
    except (WorkerError, NonFiniteError, checkpoint.CheckpointError) as err:
        # One line: what failed, the checkpoint to resume from, where the traceback went.
        kept = trainer.core.run_dir / "checkpoints" / "latest.pt"
        log = write_error_log(trainer.core.run_dir, err, trainer.core.state.step)
        print(f"{error_line(PROG, err)}; last checkpoint: {kept if kept.exists() else 'none written yet'}"
              + (f"; traceback in {log}" if log is not None else ""), file=sys.stderr)
        return 1
    signals = trainer.core.stop
    with signals, signals.finishing():  # a signal while this reports is one that came after the run finished
        learning = summary["learning_sps"]  # NaN when no update ran
        print(
            f"done: {summary['steps']} agent steps, {summary['updates']} updates, {summary['episodes']} games, "
            + (f"mean return (last 100) {summary['mean_return']:.2f}, " if summary["episodes"] else "")
            + f"{summary['sps']:.0f} agent steps/s"
            + (f" ({learning:.0f} while learning)" if math.isfinite(learning) else "") + "\n"
            f"run folder: {summary['run_dir']}\ncheckpoint: {summary['checkpoint']}", flush=True
        )
        if signals.signum is not None:
            print(exiting_line(PROG, signals.signum), file=sys.stderr)
    return 0
