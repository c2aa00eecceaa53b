"""``--estimate``: a preset's speed on this machine, and the minutes its published result would take.

Runs ``train.py --preset NAME`` (the reader's own command, with ``--estimate-options`` added) until
it has learned for ``--estimate-seconds`` seconds, stops it as ``timeout -s INT`` would, and
prints its agent steps/s counted from the first update, and ``PUBLISHED[NAME].agent_steps`` at
that rate in minutes: the time to the agent step at which the published run first reached its
result. The steps before the first update run faster than that (no updates), so the estimate is
a little high for DQN presets; start-up time is not counted. ``--repeats`` does not apply: one run.

A run on another game than the published one (``--env-id``, here or in ``--estimate-options``)
prints its rate and says that no published minutes apply: a result on one game says nothing of
another's (`published_for`; atari-pqn's, the end of its run, holds for every ALE game).
"""

from __future__ import annotations

import argparse
import math
import shlex
import signal
import tempfile
import time
from typing import Any, NamedTuple

from vecdqn.benchmarks.harness import Row, check_durations, check_train_options
from vecdqn.cli import duration
from vecdqn.presets import PRESETS

__all__ = ["PUBLISHED", "QUICK", "Published", "add_arguments", "check_arguments", "expected_minutes", "published_for",
           "run", "said_minutes"]


class Published(NamedTuple):
    """A preset's published result: the agent step at which its run first reached it, what it
    was, the results table it comes from (a path and heading in this repository, whose section
    gives that agent step), the commit the run was made at, and whether it holds for every ALE
    game the preset is given (``--env-id``; else only for the preset's own env id)."""

    agent_steps: int
    result: str
    source: str
    commit: str
    any_ale_game: bool = False


# The one place the estimate reads published results from: each the agent step at which a run of
# docs/results.md first reached its result (of two seeds, the later one), at that run's commit; a
# rerun that changes a table changes it here. A preset missing here has no measured result yet
# (the defaults, labml).
PUBLISHED: dict[str, Published] = {
    "catch": Published(9_969, "a training mean of 0.9 (seed 1)", "docs/results.md#catch", "c40b271"),
    # The current code's seed 1 reached a best of +14.4 in 420,308 agent steps (docs/results.md#pong).
    "pong": Published(325_000, "+20.6 greedy (seed 1)", "docs/results.md#pong", "4408064"),
    "catch-pqn": Published(12_000, "1.00 greedy (seeds 1 and 2)", "docs/results.md#catch-1", "c08203c"),
    "pong-pqn": Published(3_250_048, "greedy >= +18 (seed 1: +19.7; seed 2 at 2,000,000)", "docs/results.md#pong-1",
                          "4dab916"),
    # Per game: the whole run, one seed of each of the seven games.
    "atari-pqn": Published(10_000_000, "the end of the run", "docs/results.md#the-seven-games-of-the-first-dqn-paper",
                           "94a8523", any_ale_game=True),
    "breakout-pqn": Published(10_000_000, "greedy >= 300 (seed 1 at 8,000,000: +319.1; seed 2: +343.3)",
                              "docs/results.md#pqn-breakout-pqn", "0e354ef"),
}

# --quick: a short measurement of the smallest preset, for a smoke run (the numbers mean little)
QUICK = {"estimate_seconds": 1.0, "preset": "catch"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("--estimate section")
    group.add_argument("--estimate", action="store_true",
                       help="run a preset briefly and print its agent steps/s here and the minutes to its "
                            "published result (one run; --repeats does not apply)")
    group.add_argument("--preset", default="pong", choices=sorted(PRESETS),
                       help="the preset to estimate (default pong)")
    group.add_argument("--estimate-seconds", type=duration, default=40.0,
                       help="seconds of learning to measure, after the first update (default 40)")
    group.add_argument("--estimate-options", default="",
                       help="more train.py options for the run, e.g. '--amp off' (default none)")


def check_arguments(args: argparse.Namespace) -> None:
    """Raise ``ValueError`` (one line) for an unknown ``--env-id`` (first), a ``--estimate-seconds``
    not above 0, or a run that ``train.py`` would refuse before starting its workers
    (`vecdqn.benchmarks.harness.check_train_options`): ``--estimate-options`` it refuses or that
    name another preset, or a game the preset cannot play (e.g. an env whose observations are not
    images)."""
    from vecdqn.envs import check_env_id

    if args.env_id is not None:
        check_env_id(args.env_id)
    check_durations(args, "estimate_seconds")
    check_train_options("--estimate-options", args.estimate_options, args.preset, args.env_id)


def train_options(args: argparse.Namespace) -> str:
    """``--estimate-options``, with ``--env-id`` (the game, in place of the preset's own) when given."""
    game = ["--env-id", shlex.quote(args.env_id)] if args.env_id is not None else []
    return " ".join([args.estimate_options, *game]).strip()


def published_for(preset: str, env_id: str) -> Published | None:
    """``PUBLISHED[preset]`` if it holds for a run of ``preset`` on ``env_id``: the preset's own env
    id, or any ALE game for a result that holds for each (`Published.any_ale_game`); else None
    (another game's minutes to the result are unknown).

    >>> published_for("pong", "PongNoFrameskip-v4").agent_steps, published_for("pong", "BreakoutNoFrameskip-v4")
    (325000, None)
    """
    from vecdqn.envs import env_family

    published = PUBLISHED.get(preset)
    if published is None or env_id == preset_game(preset):
        return published
    return published if published.any_ale_game and env_family(env_id).name == "ALE" else None


def preset_game(preset: str) -> str:
    """The env id ``train.py --preset preset`` plays: the preset's own, else `Config`'s default."""
    from vecdqn.config import Config

    return PRESETS[preset].get("env_id", Config().env_id)


def expected_minutes(preset: str, steps_per_second: float) -> float | None:
    """Minutes to ``PUBLISHED[preset].agent_steps`` at ``steps_per_second``; None for a preset
    without a published result.

    >>> round(expected_minutes("pong", 98.0), 1)
    55.3
    """
    published = PUBLISHED.get(preset)
    if published is None:
        return None
    return published.agent_steps / steps_per_second / 60 if steps_per_second > 0 else math.inf


def said_minutes(minutes: float) -> str:
    """``minutes`` as the estimate prints them: one decimal below 10, none above.

    >>> said_minutes(0.34), said_minutes(55.3), said_minutes(math.inf)
    ('~0.3 min', '~55 min', 'unknown minutes (no learning was measured)')
    """
    if not math.isfinite(minutes):
        return "unknown minutes (no learning was measured)"
    return f"~{minutes:.1f} min" if minutes < 10 else f"~{minutes:,.0f} min"


class _Clock:
    """``on_step`` of the measured run: notes the agent step and time of the first update, and
    stops the run (as SIGINT would) ``seconds`` after it."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.start: tuple[float, int] | None = None
        self.end: tuple[float, int] | None = None

    def __call__(self, trainer: Any) -> None:
        state, now = trainer.core.state, time.perf_counter()
        if self.start is None:
            if state.updates > state.update_offset:
                self.start = (now, state.step)
            return
        self.end = (now, state.step)
        if now - self.start[0] >= self.seconds:
            trainer.core.stop.signum = signal.SIGINT  # stop after this step, with a checkpoint

    def steps_per_second(self) -> float:
        """Agent steps/s from the first update to the last step seen (nan before two steps)."""
        if self.start is None or self.end is None or self.end[0] <= self.start[0]:
            return math.nan
        return (self.end[1] - self.start[1]) / (self.end[0] - self.start[0])


def measure(preset: str, seconds: float, options: str = "") -> tuple[float, int, str]:
    """``(agent steps/s after the first update, envs, env id)`` of ``train.py --preset preset`` plus
    ``options``, run in a temporary folder for ``seconds`` of learning (or to its end, if sooner)."""
    from vecdqn.cli import parse_args
    from vecdqn.signals import Interrupted
    from vecdqn.trainer import Trainer

    clock = _Clock(seconds)
    with tempfile.TemporaryDirectory() as log_dir:
        config = parse_args(["--preset", preset, "--log-dir", log_dir, "--checkpoint-every", "0",
                             "--no-keep-checkpoints", "--eval-every", "0", *shlex.split(options)])
        try:
            Trainer(config, progress=False, handle_signals=False, on_step=clock).run()
        except Interrupted:
            pass
    return clock.steps_per_second(), config.num_envs, config.env_id


def run(args: argparse.Namespace) -> list[Row]:
    """The section's row: the preset's agent steps/s here, the minutes to its published result in
    its note (`published_for`: none where the run plays another game than the published one); the
    same in one line on the console."""
    options = train_options(args)
    game = f" --env-id {args.env_id}" if args.env_id is not None else ""
    print(f"running --preset {args.preset}{game} for {args.estimate_seconds:g} s of learning ...", flush=True)
    sps, envs, env_id = measure(args.preset, args.estimate_seconds, options)
    minutes, published = expected_minutes(args.preset, sps), published_for(args.preset, env_id)
    if args.preset not in PUBLISHED:
        note = "no published result yet"
    elif published is None:
        note = (f"no minutes to a published result: --preset {args.preset}'s was reached on "
                f"{preset_game(args.preset)}, and this run plays {env_id}")
    else:
        note = (f"{said_minutes(minutes)} to {published.result} at {published.agent_steps:,} agent steps, as "
                f"commit {published.commit}'s run reached it ({published.source})")
    print(f"--preset {args.preset}{game}: {sps:,.1f} agent steps/s here; {note}\n", flush=True)
    return [{"bench": "estimate", "impl": args.preset, "num_envs": envs, "value": sps, "unit": "steps/s",
             "note": note + (f"; {options.strip()}" if options else "")}]
