"""Config, its command line, presets, validation messages and the schedules."""

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from vecdqn.cli import (
    OPTION_TYPES,
    OneLineErrorParser,
    UsageError,
    build_parser,
    check_options_apply,
    main,
    parse_args,
    parse_config,
)
from vecdqn.config import MAX_COUNT, MAX_SECONDS, Config, check_options_used, option_flag
from vecdqn.envs import check_family_options
from vecdqn.presets import PRESETS
from vecdqn.schedules import PiecewiseLinear
from vecdqn.staging import default_torch_threads

ROOT = Path(__file__).resolve().parents[1]


def test_every_field_is_an_option_with_help():
    help_text = build_parser().format_help()
    for f in dataclasses.fields(Config):
        flag = "--" + f.name.replace("_", "-")
        assert flag in help_text, flag
        assert f.metadata["help"], f.name
    assert "agent steps" in help_text
    assert "--no-dueling" in help_text and "--no-double" in help_text and "--no-per" in help_text


def test_defaults_are_the_full_scale_breakout_run():
    c = parse_args([])
    assert c.env_id == "BreakoutNoFrameskip-v4"
    assert c.num_envs == 8 and c.total_steps == 10_000_000
    assert c.double and c.dueling and c.per


def test_cli_overrides_and_ablations():
    c = parse_args(["--total-steps", "5000", "--learning-starts", "1000", "--no-dueling", "--no-per",
                    "--n-step", "1", "--gamma=0.9"])
    assert (c.total_steps, c.dueling, c.per, c.n_step, c.gamma) == (5000, False, False, 1, 0.9)


def test_preset_sets_defaults_but_explicit_options_win():
    c = parse_args(["--preset", "catch", "--batch-size", "64"])
    assert c.env_id == PRESETS["catch"]["env_id"]
    assert c.learning_rate == PRESETS["catch"]["learning_rate"]
    assert c.batch_size == 64


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--num-envs", "0"], "--num-envs 0 must be a positive integer"),
        (["--batch-size", "512", "--buffer-size", "256"], "--batch-size 512 is larger than --buffer-size 256"),
        (["--learning-starts", "10"], "--learning-starts 10 is below --batch-size 32"),
        (["--total-steps", "100", "--learning-starts", "1000"], "--learning-starts 1000 is above --total-steps 100"),
        (["--gamma", "1.5"], "--gamma 1.5 must be in [0, 1]"),
        (["--preset", "nope"], "--preset 'nope' is unknown"),
        (["--seed", "-1"], "--seed -1 must be in [0, 2**32)"),
        # no-op starts beyond the frame cap once hung a run before its first line
        (["--noop-max", "100000000"], "--noop-max 100000000 is invalid; use at most 107,999 no-op frames"),
        (["--noop-max", "2000", "--max-episode-frames", "1000"], "--noop-max 2000 is invalid; use at most 999 no-op "
                                                                 "frames (fewer than the game's frame cap, "
                                                                 "--max-episode-frames 1000; DQN uses 30)"),
        # the command line has no None: the advice offered one
        (["--max-episode-frames", "0"], "--max-episode-frames 0 is invalid; use a positive number of frames (108_000 "
                                        "= 30 minutes)\n"),
        (["--n-step", "100000"], "--n-step 100000 is too long"),
        (["--buffer-size", "64", "--batch-size", "8", "--learning-starts", "8", "--n-step", "3"],
         "leaves 8 slots per env"),  # 8 envs: each ring must hold 2 stacks and an n-step window
        (["--run-name", "../escape"], "--run-name '../escape' must be a plain folder name"),
        (["--run-name", "  "], "--run-name '  ' must be a plain folder name"),
        (["--run-name", "a\nb"], "--run-name 'a\\nb' must be a plain folder name (no '/', no control character"),
        (["--per-alpha", "-1"], "--per-alpha -1.0 must be a finite number >= 0"),
        (["--max-grad-norm", "-1"], "--max-grad-norm -1.0 must be a finite number >= 0"),
        (["--torch-threads", "100000"], "--torch-threads 100000 must be a finite number in [0, 1024]"),
        (["--torch-threads", "-1"], "--torch-threads -1 must be a finite number in [0, 1024]"),
        (["--overlap-forward", "--compile"], "--overlap-forward cannot be combined with --compile"),
        (["--total-steps", "abc"], "invalid int value: 'abc'"),  # argparse's own error, in one line
        # Python's int reads Arabic-Indic digits as 12; an option takes the digits 0-9 only
        (["--seed", "١٢"], "argument --seed: invalid int value: '١٢' (a whole number in the digits 0-9"),
        (["--total-steps", "1e26"], "argument --total-steps: invalid int value: '1e26'"),
        (["--total-steps", "1" + "0" * 26], "argument --total-steps: 100000000000000000000000000 is above 10**12, "
                                             "the largest count an option takes"),
        (["--gamma", "inf"], "argument --gamma: invalid float value: 'inf' (a finite number"),
    ],
)
def test_bad_values_exit_2_with_one_line(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        parse_args(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert message in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("name", [name for name, kind in OPTION_TYPES.items() if kind == "float"])
def test_every_decimal_option_refuses_values_that_are_not_finite(name):
    """inf, -inf, nan (and 1e400, which a float reads as inf) are refused as the command line is
    read, naming the option, for either learner and before any other check."""
    for text in ("inf", "-inf", "nan", "1e400", "-Infinity"):
        with pytest.raises(UsageError, match=rf"^argument {option_flag(name)}: invalid float value: '{text}' \(a "
                                             r"finite number, e\.g\. 0\.5 or 1e-4; not inf or nan\)"):
            parse_config([f"{option_flag(name)}={text}"])  # with "=": argparse takes "-inf" alone for a flag


def test_whole_numbers_take_ascii_digits_and_counts_stop_at_10_12():
    """The digits 0-9 with a sign and _ between digits, as the help says; no count above 10**12,
    on the command line or through `Config`."""
    config, _ = parse_config(["--total-steps", "1_000_000_000_000", "--seed", "+12", "--n-step", " 3"])
    assert (config.total_steps, config.seed, config.n_step) == (MAX_COUNT, 12, 3)
    for text in ("١٢", "１２", "12.0", "1e3", "1__0", "0x10"):  # Arabic-Indic and fullwidth digits among them
        with pytest.raises(UsageError, match=f"^argument --seed: invalid int value: '{text}'"):
            parse_config(["--seed", text])
    with pytest.raises(UsageError, match=r"^argument --total-steps: 1000000000001 is above 10\*\*12"):
        parse_config(["--total-steps", str(MAX_COUNT + 1)])
    with pytest.raises(ValueError, match=r"^--buffer-size 10000000000000 is above 10\*\*12"):
        Config(buffer_size=10**13).validate()
    # a duration (--worker-timeout) stops at 10**8 seconds, on the command line and through `Config`
    assert parse_config(["--worker-timeout", "1e8"])[0].worker_timeout == MAX_SECONDS
    with pytest.raises(UsageError, match=r"^argument --worker-timeout: 1e14 seconds is above 10\*\*8 \(over 3 years\)"):
        parse_config(["--worker-timeout", "1e14"])
    with pytest.raises(ValueError, match=r"^--worker-timeout 1000000000.0 seconds is above 10\*\*8"):
        Config(worker_timeout=1e9).validate()
    assert "digits 0-9" in build_parser().description and "10**12" in build_parser().description


def _script_parsers():
    """``(script, its parser)`` for each of the five scripts (each loaded from its file)."""
    import importlib.util

    yield "train.py", build_parser()
    for name in ("evaluate", "plot", "tune", "benchmark"):
        spec = importlib.util.spec_from_file_location(f"vecdqn_{name}_script_types", ROOT / "scripts" / f"{name}.py")
        script = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(script)
        yield f"{name}.py", script.build_parser()


def test_every_count_and_duration_of_every_script_takes_the_shared_types_and_limits():
    """No script reads a number with Python's own int or float: each count takes
    `vecdqn.cli.whole_number` (at most 10**12), each decimal `finite_number` and each duration
    (seconds, a timeout) `duration` (at most 10**8 s), so that one rule holds for every script."""
    from vecdqn.cli import duration, finite_number, whole_number

    for script, parser in _script_parsers():
        for action in parser._actions:  # noqa: SLF001 - argparse has no public list
            flag = next(iter(action.option_strings), action.dest)
            assert action.type not in (int, float), (script, flag)
            if any(word in action.dest for word in ("seconds", "timeout")):
                assert action.type is duration, (script, flag)
            if action.type is whole_number:
                with pytest.raises(UsageError, match=rf"^argument {flag}: 1000000000001 is above 10\*\*12, the "
                                                     "largest count an option takes"):
                    parser.parse_args([flag, str(MAX_COUNT + 1)])
            elif action.type is duration:
                with pytest.raises(UsageError, match=rf"^argument {flag}: 1e14 seconds is above 10\*\*8 \(over 3 "
                                                     r"years\), the longest duration an option takes"):
                    parser.parse_args([flag, "1e14"])
            else:
                assert action.type in (None, str, Path, finite_number), (script, flag, action.type)


def test_atari_only_options_are_refused_for_catch_and_kept_for_ale_games():
    """An Atari-only option given for Catch would be ignored: refused, naming it and the env."""
    with pytest.raises(UsageError, match=r"--frame-skip, --episodic-life do not apply to --env-id vecdqn/Catch-v0, "
                                         r"an env of the Catch family, which takes only --frame-stack, --screen-size"):
        parse_config(["--preset", "catch", "--frame-skip", "2", "--no-episodic-life"])
    with pytest.raises(UsageError, match="--max-episode-frames does not apply to --env-id vecdqn/Catch-v0"):
        parse_config(["--env-id", "vecdqn/Catch-v0", "--max-episode-frames", "90"])
    # What Catch uses, the Atari defaults it ignores, and Atari-only options for an ALE game pass.
    config, given = parse_config(["--preset", "catch", "--screen-size", "50", "--frame-stack", "2"])
    check_options_apply(given, config)
    check_family_options(parse_config(["--preset", "catch"])[1], "vecdqn/Catch-v0")
    for env_id in ("BreakoutNoFrameskip-v4", "ALE/Pong-v5"):
        check_family_options({"frame_skip", "noop_max", "fire_reset"}, env_id)
    check_family_options({"frame_skip"}, "NoSuchGame-v0")  # left to the preflight, which names close ids


def test_an_atari_only_value_for_catch_is_refused_before_any_worker_starts(tmp_path):
    """Through the library too: a Config whose Atari-only option is set away from its default for
    Catch is refused by the preflight (one line naming it), not silently ignored."""
    from helpers import catch_config

    from vecdqn.preflight import ConfigError
    from vecdqn.trainer import Trainer

    with pytest.raises(ConfigError, match=r"frame_skip=2: vecdqn/Catch-v0 is an env of the Catch family"):
        Trainer(catch_config(tmp_path, frame_skip=2), progress=False)
    assert not any(tmp_path.iterdir())


def test_train_script_help_lists_units_and_defaults():
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "train.py"), "--help"],
                         capture_output=True, text=True, check=True).stdout
    assert "--total-steps" in out and "(default: 10000000)" in out
    assert "frames" in out and "agent steps" in out


def test_torch_threads_rule():
    assert default_torch_threads(8, cpu_count=2) == 2  # CPU learner: it is the bottleneck
    assert default_torch_threads(8, cpu_count=2, device_type="cuda") == 1
    assert default_torch_threads(8, cpu_count=16, device_type="cuda") == 4
    assert default_torch_threads(15, cpu_count=16, device_type="cuda") == 1


def test_piecewise_linear():
    s = PiecewiseLinear([(0, 1.0), (100, 0.1), (200, 0.0)])
    assert s(-5) == 1.0 and s(0) == 1.0 and s(200) == 0.0 and s(10**9) == 0.0
    assert s(50) == pytest.approx(0.55) and s(150) == pytest.approx(0.05)
    assert PiecewiseLinear([(3, 2.5)])(0) == 2.5
    with pytest.raises(ValueError, match="increase strictly"):
        PiecewiseLinear([(0, 1.0), (0, 2.0)])
    with pytest.raises(ValueError, match="at least one"):
        PiecewiseLinear([])


@pytest.mark.parametrize(("args", "named"), [
    (["--algo", "rainbow", "--epsilon-end", "0.05"], "--epsilon-end would have no effect: the noisy layers explore"),
    (["--algo", "rainbow", "--epsilon-start", "0.5", "--epsilon-decay-steps", "9"],
     "--epsilon-start, --epsilon-decay-steps would have no effect: the noisy layers explore"),
    (["--algo", "rainbow", "--epsilon-schedule", "0:1,10:0.1"], "--epsilon-schedule would have no effect"),
    (["--algo", "rainbow", "--atoms", "1", "--v-min", "-5"], "--v-min would have no effect: --atoms 1 learns"),
    (["--algo", "rainbow", "--no-noisy", "--noisy-sigma", "0.1"], "--noisy-sigma would have no effect: --no-noisy"),
    (["--eval-every", "0", "--eval-episodes", "3"], "--eval-episodes would have no effect: --eval-every 0 turns"),
    (["--wandb-project", "mine"], "--wandb-project would have no effect: they name the Weights & Biases run of "
                                  "--track, which is off"),
    (["--no-per", "--per-alpha", "0.7"], "--per-alpha would have no effect: --no-per samples the replay uniformly"),
    (["--algo", "rainbow", "--no-per", "--per-beta-start", "0.2", "--per-eps", "1e-5"],
     "--per-beta-start, --per-eps would have no effect: --no-per samples the replay uniformly"),
    (["--checkpoint-every", "0", "--keep-checkpoints"],
     "--keep-checkpoints would have no effect: --checkpoint-every writes no periodic checkpoint in --total-steps"),
    (["--total-steps", "2000", "--checkpoint-every", "5000", "--keep-checkpoints"], "--keep-checkpoints would have no"),
    (["--total-steps", "2000", "--eval-every", "5000"], "--eval-every would have no effect: no evaluation falls in "
                                                        "--total-steps; drop it"),
    (["--epsilon-decay-steps", "0", "--epsilon-start", "0.5"],
     "--epsilon-start would have no effect: --epsilon-decay-steps 0 acts at --epsilon-end from agent step 0"),
])
def test_options_the_run_would_not_read_are_refused_in_one_line(tmp_path, args, named, capsys):
    """An option whose setting the run's other options switch off (epsilon under noisy exploration,
    a support with --atoms 1, ...) was accepted and silently ignored."""
    code = main(["--env-id", "vecdqn/Catch-v0", "--screen-size", "44", "--log-dir", str(tmp_path), *args])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and named in err, err
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("args", [
    ["--algo", "rainbow", "--no-noisy", "--epsilon-end", "0.05"],
    ["--algo", "rainbow", "--atoms", "21", "--v-min", "-5", "--v-max", "5", "--noisy-sigma", "0.1"],
    ["--eval-every", "500", "--eval-episodes", "3"],
    ["--per-alpha", "0.7", "--per-beta-start", "0.2"],
    ["--algo", "rainbow", "--per-eps", "1e-5"],
    ["--checkpoint-every", "100", "--keep-checkpoints"],
    ["--epsilon-decay-steps", "0", "--epsilon-end", "0.2"],
    ["--epsilon-decay-steps", "9", "--epsilon-start", "0.5"],
])
def test_the_same_options_are_taken_where_the_run_reads_them(tmp_path, args):
    config, given = parse_config(["--env-id", "vecdqn/Catch-v0", "--log-dir", str(tmp_path), *args])
    check_options_used(given, config)  # no error


def test_a_negative_number_in_any_notation_is_an_options_value(tmp_path):
    """argparse reads only -5 and -0.5 as numbers: --v-min -1e3 gave "expected one argument", and
    --v-min -inf the same instead of the finite-number message."""
    config = parse_args(["--algo", "rainbow", "--v-min", "-1e3", "--v-max", "1e3", "--log-dir", str(tmp_path)])
    assert (config.v_min, config.v_max) == (-1000.0, 1000.0)
    with pytest.raises(UsageError, match=r"argument --v-min: invalid float value: '-inf' \(a finite number"):
        parse_config(["--algo", "rainbow", "--v-min", "-inf"])
    # after "--" the tokens are another command's (tune.py's train.py options): left as given
    parser = OneLineErrorParser(prog="p")
    parser.add_argument("--x", type=float)
    parser.add_argument("rest", nargs="*")
    assert parser.parse_args(["--x", "-1e3", "--", "--y", "-1e3"]).rest == ["--y", "-1e3"]
