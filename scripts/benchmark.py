"""Micro-benchmarks of vecdqn's hot paths, one section per flag.

    python scripts/benchmark.py --env --replay --learner --train --repeats 3 --json bench.json
    python scripts/benchmark.py --replay --quick        # smallest sizes: a smoke run
    python scripts/benchmark.py --estimate --preset pong  # this machine's speed, minutes to the result

Each section adds its own flags (``--help`` lists them); the sections, the method and the
output are described in `vecdqn.benchmarks`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from vecdqn.benchmarks import QUICK, SECTIONS, Row, option_sections, run_sections, sections_said  # noqa: E402
from vecdqn.cli import (  # noqa: E402
    OneLineErrorParser,
    UsageError,
    check_output_path,
    exit_code,
    explicit_options,
    fail,
    whole_number,
)

PROG = "benchmark.py"


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineErrorParser(prog=PROG, description=__doc__.split("\n\n")[0], allow_abbrev=False,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=whole_number, default=5,
                        help="interleaved rounds per row; rows are medians (default 5)")
    parser.add_argument("--json", type=Path, default=None, metavar="PATH", help="also write the rows as a JSON list")
    parser.add_argument("--quick", action="store_true",
                        help="the smallest sizes and one round, for a smoke run; flags given explicitly still apply")
    for module in SECTIONS.values():
        module.add_arguments(parser)
    return parser


def parse_args(argv: list[str] | None = None) -> tuple[argparse.Namespace, list[str]]:
    """``(args, the chosen section names)``; exits 2 with one line on a bad command line."""
    try:
        return _parse(argv)
    except UsageError as err:
        fail(PROG, err)


def _parse(argv: list[str] | None) -> tuple[argparse.Namespace, list[str]]:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.quick:  # parse again with the small sizes as defaults, so that explicit flags win
        parser.set_defaults(**QUICK)
        args = parser.parse_args(argv)
    chosen = [name for name in SECTIONS if getattr(args, name)]
    if not chosen:
        parser.error("choose at least one section: " + ", ".join(f"--{name}" for name in SECTIONS))
    try:
        check_options_used(explicit_options(parser, sys.argv[1:] if argv is None else argv), chosen)
    except ValueError as err:
        parser.error(str(err))
    if args.repeats < 1:
        parser.error(f"--repeats {args.repeats} must be >= 1")
    if args.json is not None:  # before any section runs: a bad path used to fail after all of them
        try:
            check_output_path("--json", args.json)
        except UsageError as err:
            parser.error(str(err))
    for name in chosen:  # each chosen section's own flags, before any section runs
        check = getattr(SECTIONS[name], "check_arguments", None)
        try:
            if check is not None:
                check(args)
        except ImportError as err:  # a missing extra (e.g. ray for --actors): what to install, no --help pointer
            raise UsageError(str(err)) from None
        except ValueError as err:
            parser.error(str(err))
    return args, chosen


def check_options_used(given: set[str], chosen: list[str]) -> None:
    """Refuse an option given explicitly (``given``: argparse names) that none of the ``chosen``
    sections reads (`vecdqn.benchmarks.option_sections`), rather than ignore it silently: e.g.
    ``--update --preset catch`` (``--update`` reads ``--update-preset``).

    Raises:
        ValueError: one line naming the first such option, the chosen sections and those that read it.
    """
    owners = option_sections()
    unused = [dest for dest in owners if dest in given and not set(owners[dest]) & set(chosen)]
    if not unused:
        return
    dest, flag = unused[0], "--" + unused[0].replace("_", "-")
    own = [f"; --{name} has its own --{name}-{flag[2:]}" for name in chosen if f"{name}_{dest}" in owners]
    uses = "uses" if len(owners[dest]) == 1 else "use"
    raise ValueError(f"{flag} does not apply to {sections_said(chosen)}; only {sections_said(owners[dest])} {uses} "
                     f"it{''.join(own)}")


def main(argv: list[str] | None = None) -> list[Row]:
    """Run the chosen sections in turn, print the table of all their rows and, with ``--json``,
    write them there; return the rows."""
    args, chosen = parse_args(argv)
    return run_sections(args, chosen, args.json)


def run(argv: list[str] | None = None) -> int:
    """`main` as the script runs it; its exit code: 0 done, 2 a bad command line, 130/143 stopped by
    SIGINT/SIGTERM (one line on stderr, no table)."""
    return exit_code(PROG, lambda: main(argv) and None, stop_on_signals=True)


if __name__ == "__main__":
    sys.exit(run())
