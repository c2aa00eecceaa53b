"""The benchmark package and its command line, at the smallest sizes: the timing helpers on
trivial functions, the table and the JSON rows, one-line command-line errors, and each
section's ``--quick`` run (the numbers themselves are not checked)."""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import signal
import sys
from pathlib import Path

import pytest

from vecdqn.benchmarks import QUICK, SECTIONS, option_sections
from vecdqn.benchmarks.harness import COLUMNS, format_table, interleaved, time_block, write_json

ROOT = Path(__file__).resolve().parents[1]


def load_cli():
    spec = importlib.util.spec_from_file_location("vecdqn_benchmark_script", ROOT / "scripts" / "benchmark.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script


def test_time_block_warms_up_once_then_times_the_calls():
    calls = []
    seconds = time_block(lambda: calls.append(1), 5)
    assert len(calls) == 6 and seconds >= 0


def test_interleaved_runs_rounds_in_turn_with_medians_and_ratios():
    order = []

    def candidate(name, values):
        it = iter(values)
        return lambda: (order.append(name), next(it))[1]

    result = interleaved(3, {"anchor": candidate("anchor", [2.0, 4.0, 10.0]),
                             "other": candidate("other", [1.0, 4.0, 30.0])}, anchor="anchor")
    assert order == ["anchor", "other"] * 3  # interleaved, not one candidate's rounds in a row
    assert result["anchor"] == (4.0, 1.0)
    assert result["other"] == (4.0, 1.0)  # medians of [1, 4, 30] and of the ratios [0.5, 1, 3]
    with pytest.raises(KeyError):
        interleaved(1, {"a": lambda: 1.0}, anchor="b")


def test_table_and_json(tmp_path):
    rows = [{"bench": "replay", "op": "add", "impl": "vecdqn", "capacity": 2**20, "batch_size": 8,
             "value": 12345.6, "unit": "us/call", "ratio": 0.51234, "anchor": "python_loop", "extra": 1},
            {"bench": "env", "impl": "gymnasium", "num_envs": 20000, "value": 0.5, "unit": "steps/s"}]
    lines = format_table(rows).splitlines()
    assert lines[0].split() == COLUMNS and len(lines) == 3
    assert lines[1].split() == ["replay", "add", "vecdqn", "-", "2^20", "8", "12,346", "us/call", "0.512",
                                "python_loop", "-"]
    assert lines[2].split()[3] == "20,000" and "extra" not in lines[0]
    path = tmp_path / "rows.json"
    write_json(rows, path)
    assert json.loads(path.read_text()) == rows


@pytest.mark.parametrize("argv, message", [
    (["--replay", "--bogus"], "unrecognized arguments: --bogus"),
    (["--rep"], "unrecognized arguments: --rep"),  # no abbreviations
    ([], "choose at least one section: --env, --replay, --learner, --train"),
    (["--replay", "--repeats", "0"], "--repeats 0 must be >= 1"),
    (["--replay", "--replay-envs", "x"], "invalid int value"),
    (["--replay", "--replay-envs", "٨"], "argument --replay-envs: invalid int value: '٨'"),
    # a finite number of seconds: inf would run the whole preset, nan was refused only by accident
    (["--estimate", "--preset", "catch", "--estimate-seconds", "inf"],
     "argument --estimate-seconds: invalid float value: 'inf' (a finite number"),
    (["--estimate", "--estimate-seconds", "nan"], "argument --estimate-seconds: invalid float value: 'nan'"),
    (["--learner", "--learner-seconds", "inf"], "argument --learner-seconds: invalid float value: 'inf'"),
    (["--update", "--update-seconds=-inf"], "argument --update-seconds: invalid float value: '-inf'"),
    # counts and durations stop where train.py's do (the shared argparse types): these ran for ever or
    # ended in numpy's "Maximum allowed dimension exceeded"
    (["--env", "--env-steps", "1" + "0" * 20],
     "argument --env-steps: 100000000000000000000 is above 10**12, the largest count an option takes"),
    (["--replay", "--replay-capacity", "1000000000001"], "argument --replay-capacity: 1000000000001 is above 10**12"),
    (["--estimate", "--preset", "catch", "--estimate-seconds", "1e14"],
     "argument --estimate-seconds: 1e14 seconds is above 10**8 (over 3 years), the longest duration an option takes"),
    (["--learner", "--learner-seconds", "-1"], "argument --learner-seconds: -1 seconds is below 0"),
    (["--actors", "--actors-counts", "1,1e3"], "--actors-counts 1,1e3: invalid int value: '1e3'"),
    (["--actors", "--actors-counts", "1,0"], "--actors-counts 1,0: each must be >= 1"),
    (["--replay", "--json"], "expected one argument"),
    # checked before any section runs: this ran the whole section, then ended in a PermissionError traceback
    (["--replay", "--quick", "--json", "/sys/x.json"], "--json /sys/x.json is not writable"),
    (["--replay", "--quick", "--json", "/nonexistent-folder/x.json"], "folder /nonexistent-folder does not exist"),
    (["--update", "--update-preset", "nope"], "argument --update-preset: invalid choice: 'nope'"),
    (["--update", "--update-batch-sizes", "32", "0"], "--update-batch-sizes 32 0: each must be >= 1"),
    (["--pqn", "--pqn-envs", "0"], "--pqn-envs 0 must be >= 1"),
    # each section's flags are checked before any section runs: these used to hang or end in tracebacks
    (["--env", "--env-screen-size", "0"], "--env-screen-size 0 is invalid; use a positive side length"),
    (["--env", "--env-screen-size", "5000"], "--env-screen-size 5000 is invalid; use at most 1024 pixels"),
    (["--env", "--env-id", "Nope-v4"], "unknown env id 'Nope-v4'"),
    (["--env", "--env-id", "Seaquest"], "unknown env id 'Seaquest'; did you mean SeaquestNoFrameskip-v4?"),
    (["--env", "--env-id", "vecdqn/Catch-v0"], "--env-id vecdqn/Catch-v0 is not an ALE game"),
    (["--env", "--env-nums", "8", "0"], "--env-nums 8 0: each must be >= 1"),
    (["--estimate", "--preset", "catch", "--estimate-options", "--preset pong"],
     "--estimate-options '--preset pong': --preset cannot be given there; the section runs --preset catch"),
    (["--estimate", "--estimate-options", "--bogus 1"], "--estimate-options '--bogus 1': unrecognized arguments"),
    (["--estimate", "--estimate-options", "--amp 'bf16"], "--estimate-options \"--amp 'bf16\": No closing quotation"),
    (["--pqn", "--pqn-steps", "512"], "--pqn-steps 512 is shorter than two rollouts of --rollout-steps 32 x "
                                      "--pqn-envs 128 = 4096 agent steps"),
    (["--pqn", "--pqn-options=--resume=runs/x"], "--pqn-options '--resume=runs/x': --resume cannot be given"),
    # the replay, learner, soak and train sections' sizes and devices: these ran into numpy's or torch's errors
    (["--replay", "--replay-batches", "32", "0"], "--replay-batches 32 0: each must be >= 1"),
    (["--replay", "--replay-capacity", "0"], "--replay-capacity 0 must be >= 1"),
    (["--learner", "--learner-seconds", "0"], "--learner-seconds 0 must be > 0"),
    (["--learner", "--device", "gpu"], "--device 'gpu' is not one of auto, cpu, cuda"),
    (["--learner", "--loop-capacity", "0"], "--loop-capacity 0 must be >= 1"),
    (["--learner", "--torch-threads", "-1"], "--torch-threads -1 must be >= 0"),
    (["--update", "--update-threads", "1", "0"], "--update-threads 1 0: each must be >= 1"),
    (["--update", "--update-threads", "5000"], "--update-threads 5000: each must be <= 1024"),
    (["--soak", "--soak-every", "0"], "--soak-every 0 must be >= 1"),
    (["--train", "--train-steps", "0"], "--train-steps 0 must be >= 1"),
    (["--train", "--train-learning-starts", "-1"], "--train-learning-starts -1 must be >= 0"),
    (["--train", "--replay-device", "nope"], "--replay-device 'nope' is not one of auto, cpu, cuda"),
    # overlap is never with compile: this pair left no variant and ended in a StopIteration traceback
    (["--update", "--update-compile", "on", "--update-overlap", "on"],
     "--update-compile on with --update-overlap on leaves no variant to time: overlap is never combined with "
     "compile (the trainer refuses --overlap-forward with --compile); add off to one of them"),
    # the soak run's sizes in benchmark.py's own options: these answered "train.py: error: --batch-size ..."
    (["--soak", "--soak-buffer", "1"], "--soak-buffer 1 must be >= 36: the soak run's replay holds a batch of 32 "
                                       "transitions and 9 slots for each of its 4 envs"),
    (["--soak", "--soak-buffer", "0"], "--soak-buffer 0 must be >= 36"),
    (["--soak", "--soak-steps", "500", "--soak-buffer", "100"],
     "--soak-steps 500 must be >= 1000: the run learns from agent step 1000"),
    # no sample was ever taken: the run ended in an IndexError after all its steps
    (["--soak", "--soak-steps", "15000"], "--soak-steps 15000 must be >= 20000: the run learns from agent step 1000 "
                                          "and samples from agent step 20000, twice --soak-buffer 10000"),
    # an option of a section not chosen: these were ignored without a word
    (["--update", "--preset", "catch"],
     "--preset does not apply to --update; only --estimate uses it; --update has its own --update-preset"),
    (["--update", "--env-nums", "8"], "--env-nums does not apply to --update; only --env uses it"),
    (["--update", "--replay", "--num-envs", "3"],
     "--num-envs does not apply to --replay and --update; only --learner and --train use it"),
    (["--estimate", "--repeats", "3"], "--repeats does not apply to --estimate; only --env, --replay, --learner, "
                                       "--train, --pqn, --actors and --update use it"),
    (["--train", "--amp", "bf16"], "--amp does not apply to --train; only --learner uses it"),
    (["--soak", "--quick", "--update-batch-sizes", "0"],
     "--update-batch-sizes does not apply to --soak; only --update uses it"),
])
def test_command_line_errors_are_one_line(capsys, no_runs, argv, message):
    cli = load_cli()
    with pytest.raises(SystemExit) as exit_info:
        cli.main(argv)
    out, err = capsys.readouterr()
    assert exit_info.value.code == 2 and not no_runs and out == ""
    assert err.count("\n") == 1 and message in err and err.rstrip().endswith("(see benchmark.py --help)")


@pytest.fixture
def no_runs(monkeypatch) -> list[str]:
    """Every section's ``run`` replaced by one that records its name (in the list returned): a
    command line that must be refused then runs nothing, even where the check is missing."""
    ran: list[str] = []
    for name, module in SECTIONS.items():
        monkeypatch.setattr(module, "run", lambda args, name=name: ran.append(name) or [])
    return ran


def test_actors_without_ray_is_one_line_before_anything_runs(monkeypatch, capsys, no_runs):
    """Without the ray extra --actors printed a line, ran no rows and ended in a TypeError from the
    table; it is now refused as train.py --actors is: what to install, exit code 2, nothing run."""
    monkeypatch.setitem(sys.modules, "ray", None)  # what `import ray` does without the package
    cli = load_cli()
    for argv in (["--actors", "--quick"], ["--replay", "--actors", "--quick"]):  # nor a section before it
        with pytest.raises(SystemExit) as exit_info:
            cli.main(argv)
        out, err = capsys.readouterr()
        assert exit_info.value.code == 2 and out == "" and not no_runs
        assert err == ('benchmark.py: error: the ray package is not installed; --actors needs it: '
                       'pip install -e ".[ray]"\n')


def test_table_of_no_rows_is_its_header():
    assert format_table([]).split() == COLUMNS


SECONDS = sorted((dest, sections[0]) for dest, sections in option_sections().items() if dest.endswith("_seconds"))


@pytest.mark.parametrize("dest, section", SECONDS)
@pytest.mark.parametrize("value, message", [("0", "{flag} 0 must be > 0"),
                                            ("-1", "argument {flag}: -1 seconds is below 0"),
                                            ("inf", "argument {flag}: invalid float value: 'inf'"),
                                            ("nan", "argument {flag}: invalid float value: 'nan'")])
def test_every_duration_must_be_positive_and_finite(capsys, no_runs, dest, section, value, message):
    """--update-seconds 0 used to be accepted (and time each variant for at least 3 updates) where
    --learner-seconds 0 was refused: every ``--*-seconds`` now refuses 0, below 0, inf and nan alike."""
    flag = "--" + dest.replace("_", "-")
    with pytest.raises(SystemExit) as exit_info:
        load_cli().main([f"--{section}", flag, value])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and not no_runs
    assert err.count("\n") == 1 and err.startswith(f"benchmark.py: error: {message.format(flag=flag)}")


def test_every_section_has_a_duration_option():
    assert [dest for dest, _ in SECONDS] == ["estimate_seconds", "learner_seconds", "update_seconds"]


def test_options_belong_to_the_sections_that_read_them():
    """`option_sections` is the table the command line checks options against: every ``args.X`` a
    section's module reads is an option of that section (or ``--quick`` or ``--json``, which apply
    to all), so that no option a section uses is refused with it."""
    owners = option_sections()
    readers = {name: [name] for name in SECTIONS} | {"loop": ["learner"]}
    for module, sections in readers.items():
        source = (ROOT / "vecdqn" / "benchmarks" / f"{module}.py").read_text()
        for dest in set(re.findall(r"\bargs\.(\w+)", source)) - {"quick", "json"}:
            assert set(sections) <= set(owners[dest]), (module, dest)
    # the options other sections read as well: train's devices and envs, estimate's game
    cli = load_cli()
    cli.check_options_used({"num_envs", "device", "torch_threads", "replay_device", "env_steps", "repeats"}, ["train"])
    cli.check_options_used({"env_id", "estimate_seconds", "json", "quick"}, ["estimate"])
    with pytest.raises(ValueError, match="--env-id does not apply to --learner; only --env and --estimate use it"):
        cli.check_options_used({"env_id"}, ["learner"])


def test_update_variants_never_combine_compile_with_overlap():
    from vecdqn.benchmarks.update import variants

    args = argparse.Namespace(update_threads=[1, 2], update_amp=["off"], update_compile=["off", "on"],
                              update_overlap=["off", "on"])
    assert variants(args, [32]) == [(32, 1, "off", False, False), (32, 1, "off", False, True),
                                    (32, 1, "off", True, False), (32, 2, "off", False, False),
                                    (32, 2, "off", False, True), (32, 2, "off", True, False)]
    args.update_compile = args.update_overlap = ["on"]
    assert variants(args, [32]) == []


def test_the_least_soak_buffer_is_what_train_py_accepts():
    """`soak.least_buffer` mirrors train.py's rule for --buffer-size: the soak run's config is
    accepted at that capacity and refused one below it."""
    from vecdqn.benchmarks.soak import LEARNING_STARTS, flags, least_buffer
    from vecdqn.cli import UsageError, parse_config

    least, _ = least_buffer()
    parse_config(flags(LEARNING_STARTS, least, "runs"))
    with pytest.raises((UsageError, ValueError), match="--buffer-size"):
        parse_config(flags(LEARNING_STARTS, least - 1, "runs"))
    load_cli().parse_args(["--soak", "--soak-buffer", str(least), "--soak-steps", str(LEARNING_STARTS)])


def test_learner_seconds_given_with_quick_still_apply(monkeypatch, capsys):
    """--quick timed each learner row for 0.1 s whatever --learner-seconds said; an explicit flag
    wins over --quick, as for every other flag."""
    from vecdqn.benchmarks import learner

    seconds = []
    monkeypatch.setattr(learner, "learner_updates_per_second", lambda *a, **kw: seconds.append(kw["seconds"]) or 1.0)
    cli = load_cli()
    cli.main(["--learner", "--quick", "--learner-seconds", "0.5", "--loop-batches"])
    cli.main(["--learner", "--quick", "--loop-batches"])
    assert seconds == [0.5, 0.1]


@pytest.mark.parametrize("signum, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_stops_a_benchmark_in_one_line(capsys, monkeypatch, signum, code):
    """SIGTERM killed it without a word and Ctrl-C ended in a traceback; both now stop it with one
    line and 128 + the signal, also where SIGINT was inherited ignored (a shell's ``&``)."""
    cli = load_cli()
    monkeypatch.setattr(SECTIONS["replay"], "run", lambda args: signal.raise_signal(signum) or [])
    previous = signal.signal(signum, signal.SIG_IGN)
    try:
        assert cli.run(["--replay", "--quick"]) == code
        assert signal.getsignal(signum) == signal.SIG_IGN  # put back
    finally:
        signal.signal(signum, previous)
    out, err = capsys.readouterr()
    assert err == "benchmark.py: interrupted\n" and out == ""


def test_quick_sizes_pass_their_sections_checks():
    """--quick's sizes are a run each section can measure (PQN's used to end before its first
    update and print nan agent steps/s)."""
    args, chosen = load_cli().parse_args(["--quick", *(f"--{name}" for name in SECTIONS)])
    assert chosen == list(SECTIONS) and args.pqn_steps >= 2 * 32 * args.pqn_envs


def test_quick_sets_small_defaults_that_explicit_flags_override():
    cli = load_cli()
    args, chosen = cli.parse_args(["--replay", "--env", "--quick", "--replay-envs", "3"])
    assert chosen == ["env", "replay"]
    assert args.replay_envs == 3 and args.replay_capacity == QUICK["replay_capacity"] and args.repeats == 1
    args, _ = cli.parse_args(["--replay"])
    assert args.replay_capacity == 2**20 and args.repeats == 5 and not args.quick


def run_quick(capsys, tmp_path, section: str, *extra: str) -> list[dict]:
    """Run one section with --quick (and ``extra`` flags) through the command line; check the
    table and the JSON."""
    path = tmp_path / "bench.json"
    rows = load_cli().main([f"--{section}", "--quick", "--json", str(path), *extra])
    out = capsys.readouterr().out
    assert rows and json.loads(path.read_text()) == rows
    # rss_buffer, the RSS growth while the buffer fills, is 0 or less where this long-lived test
    # process reuses memory that earlier tests freed; every other value is positive.
    assert all(row["bench"] == section and row["unit"] for row in rows)
    assert all(row["value"] > 0 for row in rows if row.get("op") != "rss_buffer")
    table = out[out.index("bench "):].splitlines()
    assert table[0].split() == COLUMNS and len(table) == 1 + len(rows)
    assert "target" not in out
    return rows


def test_quick_replay_section(capsys, tmp_path):
    rows = run_quick(capsys, tmp_path, "replay")
    ops = {(row["op"], row["impl"]) for row in rows}
    for impl in ("vecdqn", "stacked"):
        assert ("add", impl) in ops and ("sample+update", impl) in ops
    assert {("sample+update", "copy_floor"), ("priorities", "vecdqn"), ("priorities", "python_loop"),
            ("memory", "stacked"), ("rss", "vecdqn")} <= ops
    assert all(row["ratio"] == 1.0 for row in rows if row["impl"] == row["anchor"] and row["op"] != "memory")


def test_quick_learner_section(capsys, tmp_path):
    rows = run_quick(capsys, tmp_path, "learner")
    updates = [row for row in rows if row.get("op") != "loop"]
    assert [row["batch_size"] for row in updates] == QUICK["learner_batches"]
    assert all(row["unit"] == "updates/s" for row in updates)
    loop = [row for row in rows if row.get("op") == "loop"]
    assert [row["impl"] for row in loop] == ["sample_only", "update_only", "loop_sync", "loop_prefetch"]
    assert all(row["unit"] == "ms/update" and row["batch_size"] == QUICK["loop_batches"][0] for row in loop)


def test_quick_env_section(capsys, tmp_path):
    rows = run_quick(capsys, tmp_path, "env")
    assert [row["impl"] for row in rows] == ["ale_vector", "vecdqn", "vecdqn_batched", "gymnasium", "plain_loop",
                                             "emulator_ceiling"]
    assert rows[0]["ratio"] == 1.0 and all(row["anchor"] == "ale_vector" for row in rows[:5])
    assert rows[2]["note"].startswith("K=2 envs per worker") and all(row["value"] > 0 for row in rows)


def test_quick_pqn_section(capsys, tmp_path):
    rows = run_quick(capsys, tmp_path, "pqn", "--pqn-envs", "2")
    assert [row["impl"] for row in rows] == ["env_only", "pqn"]
    assert all(row["num_envs"] == 2 and row["unit"] == "steps/s" and row["value"] > 0 for row in rows)
    assert rows[0]["ratio"] == 1.0 and rows[1]["ratio"] == pytest.approx(rows[1]["value"] / rows[0]["value"], abs=2e-3)


@pytest.mark.slow
def test_quick_train_section(capsys, tmp_path):
    rows = run_quick(capsys, tmp_path, "train")
    assert [row["impl"] for row in rows] == ["vecdqn", "vecdqn_plain", "single_env_loop", "env_only",
                                            "learner_only_vecdqn", "learner_only_vecdqn_plain"]
    assert all("bound" in row for row in rows[:2])


def test_every_section_has_flags_a_runner_and_quick_sizes():
    for name, module in SECTIONS.items():
        assert callable(module.add_arguments) and callable(module.run) and isinstance(module.QUICK, dict), name


def test_quick_update_section(capsys, tmp_path):
    rows = run_quick(capsys, tmp_path, "update", "--update-preset", "catch", "--update-threads", "1", "2")
    assert [row["op"] for row in rows] == ["1 thread, fp32", "2 threads, fp32"]
    assert all(row["unit"] == "ms/update" and row["value"] > 0 and row["batch_size"] == 32 for row in rows)
    assert rows[0]["ratio"] == 1.0 and rows[1]["anchor"] == "1 thread, fp32"
    assert "44 px, 128 hidden" in rows[0]["note"]


def test_quick_update_section_over_batch_sizes(capsys, tmp_path):
    rows = run_quick(capsys, tmp_path, "update", "--update-preset", "catch", "--update-batch-sizes", "16", "64")
    assert [(row["op"], row["batch_size"]) for row in rows] == [("1 thread, fp32, batch 16", 16),
                                                                ("1 thread, fp32, batch 64", 64)]
    per_transition = float(rows[1]["note"].split("; ")[1].split()[0])
    assert per_transition == pytest.approx(rows[1]["value"] / 64, abs=1e-3)


def test_env_section_needs_the_ale_vector_env(monkeypatch):
    """ale-py before 0.11 has no AtariVectorEnv, the section's anchor: one line before any env."""
    import argparse

    import ale_py

    from vecdqn.benchmarks import env

    monkeypatch.delattr(ale_py, "AtariVectorEnv")
    args = argparse.Namespace(env_nums=[8], env_steps=100, env_ks=None, env_screen_size=84, env_id=None)
    with pytest.raises(ValueError, match=r"--env needs ale-py >= 0.11, whose AtariVectorEnv is the section's anchor"):
        env.check_arguments(args)
