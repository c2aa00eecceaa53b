"""``scripts/benchmark.py --estimate``: the published results it reads agree with the README's
results table and their source pages, the minutes follow from the rate, and a ``--quick`` run
measures a rate through the command line."""

from __future__ import annotations

import importlib.util
import math
import re
from pathlib import Path

import pytest
from test_docs import anchors, github_slug

from vecdqn.benchmarks.estimate import PUBLISHED, expected_minutes
from vecdqn.presets import PRESETS

ROOT = Path(__file__).resolve().parents[1]


def load_cli():
    spec = importlib.util.spec_from_file_location("vecdqn_benchmark_script_estimate", ROOT / "scripts" / "benchmark.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script


def section(page: Path, heading: str) -> str:
    """The text of ``page`` under the heading whose anchor is ``heading``, to the next heading of
    the same or a higher level."""
    lines, found, level = page.read_text().splitlines(), [], None
    seen: dict[str, int] = {}
    for line in lines:
        match = re.match(r"(#{1,6})\s+(.*)", line)
        if match:
            slug = github_slug(match.group(2))
            anchor = slug if slug not in seen else f"{slug}-{seen[slug]}"
            seen[slug] = seen.get(slug, 0) + 1
            if level is not None and len(match.group(1)) <= level:
                break
            if anchor == heading:
                level = len(match.group(1))
        if level is not None:
            found.append(line)
    return "\n".join(found)


@pytest.mark.parametrize("preset", sorted(PUBLISHED))
def test_published_agent_steps_are_in_their_results_section(preset):
    """Each entry's agent step and commit are written in the section of the results page it
    names, a heading that exists."""
    published = PUBLISHED[preset]
    assert preset in PRESETS
    page, _, heading = published.source.partition("#")
    assert (ROOT / page).exists() and heading in anchors(ROOT / page)
    text = section(ROOT / page, heading)
    assert f"{published.agent_steps:,}" in text and f"`{published.commit}`" in text, (preset, heading)


def test_expected_minutes():
    assert expected_minutes("pong", 98.0) == pytest.approx(325_000 / 98 / 60)
    assert expected_minutes("catch-pqn", 200.0) == pytest.approx(1.0)
    assert expected_minutes("pong", 0.0) == math.inf
    assert expected_minutes("labml", 100.0) is None  # no published result


def test_quick_estimate_measures_a_rate(capsys, tmp_path):
    rows = load_cli().main(["--estimate", "--quick", "--json", str(tmp_path / "rows.json")])
    out = capsys.readouterr().out
    assert len(rows) == 1 and rows[0]["bench"] == "estimate" and rows[0]["impl"] == "catch"
    assert rows[0]["value"] > 0 and math.isfinite(rows[0]["value"])
    assert ("min to a training mean of 0.9 (seed 1) at 9,969 agent steps, as commit c40b271's run reached it "
            "(docs/results.md#catch)") in rows[0]["note"]
    assert "--preset catch: " in out and (tmp_path / "rows.json").exists()


def test_bad_estimate_seconds_exit_2(capsys):
    with pytest.raises(SystemExit) as exit_info:
        load_cli().main(["--estimate", "--estimate-seconds", "0"])
    assert exit_info.value.code == 2
    assert "--estimate-seconds 0 must be > 0" in capsys.readouterr().err


def test_env_id_sets_the_game_of_the_estimated_preset():
    from argparse import Namespace

    from vecdqn.benchmarks.env import ENV_ID, game
    from vecdqn.benchmarks.estimate import train_options

    args = Namespace(env_id="SeaquestNoFrameskip-v4", estimate_options="--amp off", preset="atari-pqn")
    assert train_options(args) == "--amp off --env-id SeaquestNoFrameskip-v4"
    assert train_options(Namespace(env_id=None, estimate_options="")) == ""
    assert game(Namespace(env_id=None)) == ENV_ID and game(args) == "SeaquestNoFrameskip-v4"


@pytest.mark.parametrize("args, message", [
    # the ids the project trains on are offered, as <Game>NoFrameskip-v4
    (["--env-id", "Seaquest"], "unknown env id 'Seaquest'; did you mean SeaquestNoFrameskip-v4?"),
    (["--env-id", "SeaquestNoFrameskip-v5"], "unknown env id 'SeaquestNoFrameskip-v5'; did you mean "
                                             "SeaquestNoFrameskip-v4?"),
    # the unknown id first, before the other options' errors
    (["--env-id", "Seaquest", "--estimate-seconds", "0"], "unknown env id 'Seaquest'"),
    (["--estimate-options", "--env-id Foo"], "--estimate-options '--env-id Foo': unknown env id 'Foo'"),
    (["--estimate-options", "--env-id BreakoutNoFrameskip-v4 --frame-skip 0"], "--estimate-options"),
    # an env whose observations are not images: the measured run's preflight used to raise it as a traceback
    (["--env-id", "CartPole-v1"], "--preset atari-pqn: --env-id CartPole-v1 cannot be used: GrayscaleResize needs"),
])
def test_a_game_that_cannot_run_exits_2_before_the_run(capsys, args, message):
    """The env id and env options are checked with the other options, not by the measured run
    (which would end in a traceback)."""
    with pytest.raises(SystemExit) as exit_info:
        load_cli().main(["--estimate", "--preset", "atari-pqn", *args])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "running --preset" not in err


@pytest.mark.parametrize("preset, env_id, applies", [
    ("atari-pqn", "SeaquestNoFrameskip-v4", True),  # one result for every ALE game: the end of its run
    ("atari-pqn", "BreakoutNoFrameskip-v4", True),
    ("pong", "PongNoFrameskip-v4", True),
    ("catch", "SeaquestNoFrameskip-v4", False),  # Catch's minutes say nothing of Seaquest's
    ("pong", "BreakoutNoFrameskip-v4", False),
    ("breakout-pqn", "PongNoFrameskip-v4", False),
])
def test_published_result_applies_to_its_own_game_only(preset, env_id, applies):
    from vecdqn.benchmarks.estimate import published_for

    assert (published_for(preset, env_id) is PUBLISHED[preset]) is applies


def test_another_game_prints_its_rate_without_the_published_minutes(capsys, monkeypatch):
    """``--preset catch --env-id SeaquestNoFrameskip-v4`` measures Seaquest: its rate is printed and
    the note says why no minutes to Catch's published result follow (the run itself is stubbed)."""
    from vecdqn.benchmarks import estimate

    monkeypatch.setattr(estimate, "measure", lambda preset, seconds, options="": (150.0, 8, "SeaquestNoFrameskip-v4"))
    rows = load_cli().main(["--estimate", "--preset", "catch", "--env-id", "SeaquestNoFrameskip-v4"])
    out = capsys.readouterr().out
    said = ("--preset catch --env-id SeaquestNoFrameskip-v4: 150.0 agent steps/s here; no minutes to a published "
            "result: --preset catch's was reached on vecdqn/Catch-v0, and this run plays SeaquestNoFrameskip-v4")
    assert said in out and " min " not in out and "docs/results.md" not in out
    assert rows[0]["value"] == 150.0 and rows[0]["note"].startswith("no minutes to a published result")
