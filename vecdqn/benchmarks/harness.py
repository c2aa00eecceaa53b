"""What every benchmark section shares: timing, interleaved rounds, the table and the JSON rows.

A row is a dict with the keys of `COLUMNS` (absent: ``None``, printed ``-``) and any extra keys,
which go to the JSON only. ``value`` is in ``unit``; ``ratio`` is ``value / anchor value`` of the
same round (median over rounds), ``None`` where a row has no anchor.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from vecdqn.preflight import available_memory_bytes

__all__ = ["COLUMNS", "ENV_ID", "Row", "available_memory_bytes", "check_counts", "check_durations",
           "check_train_options", "format_table", "interleaved", "print_table", "rss_bytes", "time_block", "write_json"]

Row = dict
COLUMNS = ["bench", "op", "impl", "num_envs", "capacity", "batch_size", "value", "unit", "ratio", "anchor", "note"]

# The game every section that steps an emulator plays: a common Atari benchmark, with FIRE.
ENV_ID = "BreakoutNoFrameskip-v4"


def check_counts(args: argparse.Namespace, *dests: str, least: int = 1) -> None:
    """Refuse a value below ``least`` of the options ``dests`` (their argparse names; a value may be
    a list, or None for an option not given).

    Raises:
        ValueError: one line naming the first such option, its values and the bound.
    """
    for dest in dests:
        value = getattr(args, dest)
        values = [] if value is None else value if isinstance(value, list) else [value]
        if min(values, default=least) < least:
            flag = "--" + dest.replace("_", "-")
            each = ": each" if isinstance(value, list) else ""
            raise ValueError(f"{flag} {' '.join(map(str, values))}{each} must be >= {least}")


def check_durations(args: argparse.Namespace, *dests: str) -> None:
    """Refuse a duration of 0 of the options ``dests`` (their argparse names: a section's
    ``--*-seconds``, whose `vecdqn.cli.duration` type already refuses negative and non-finite
    values): a timing over no time measures nothing.

    Raises:
        ValueError: one line naming the first such option and the bound.
    """
    for dest in dests:
        value = getattr(args, dest)
        if not value > 0:
            raise ValueError(f"--{dest.replace('_', '-')} {value:g} must be > 0")


def check_train_options(flag: str, options: str, preset: str, env_id: str | None = None) -> list[str]:
    """``options`` (a section's ``train.py`` options, e.g. ``--estimate-options``) split as a shell
    would, checked as ``train.py --preset preset [--env-id env_id]`` would check them before any
    worker starts; returns the words (without ``--env-id env_id``).

    Raises:
        ValueError: one line naming ``flag`` (``--preset preset`` where ``options`` is empty): a
            ``--preset`` or ``--resume`` among the options (the section runs its own preset,
            fresh), a quote left open, an option ``train.py`` refuses, an env id or env option it
            would refuse, or an env whose observations it cannot use or whose game cannot start
            (`vecdqn.preflight.check_env_starts`: one env made and reset here).
    """
    import shlex

    from vecdqn.cli import UsageError, parse_config
    from vecdqn.envs import check_env_options
    from vecdqn.preflight import check_env_starts

    try:
        words = shlex.split(options)
    except ValueError as err:
        raise ValueError(f"{flag} {options!r}: {err}") from None
    for word in words:
        if word.split("=")[0] in ("--preset", "--resume"):
            raise ValueError(f"{flag} {options!r}: {word.split('=')[0]} cannot be given there; the section runs "
                             f"--preset {preset} in a new run folder (choose the preset with --preset)")
    game = ["--env-id", env_id] if env_id is not None else []
    said = f"{flag} {options!r}" if options.strip() else f"--preset {preset}"
    try:
        config, _ = parse_config(["--preset", preset, *words, *game])
        check_env_options(config.env_id, config.env_options())
        check_env_starts(config)
    except (UsageError, ValueError) as err:  # its pointer to train.py's --help goes: the line ends with benchmark.py's
        raise ValueError(f"{said}: {re.sub(r' [(]see [^ ]+ --help[)]$', '', str(err))}") from None
    return words


def rss_bytes() -> int:
    """Resident set size of this process in bytes (psutil when installed, else /proc).

    Raises:
        RuntimeError: neither is available.
    """
    try:
        import psutil

        return psutil.Process().memory_info().rss
    except ImportError:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    raise RuntimeError("cannot read the RSS: install psutil")


def time_block(call: Callable[[], object], calls: int) -> float:
    """Mean wall-clock seconds per call (``time.perf_counter``) over ``calls`` calls, after one
    untimed warm-up call."""
    call()
    start = time.perf_counter()
    for _ in range(calls):
        call()
    return (time.perf_counter() - start) / calls


def interleaved(rounds: int, candidates: dict[str, Callable[[], float]], anchor: str) -> dict[str, tuple[float, float]]:
    """Run each candidate once per round, in turn; ``{name: (median value, median ratio)}``.

    Interleaving makes a slow spell of a shared machine hit every candidate, not one. A
    candidate is a function that prepares itself (outside its timing) and returns its own
    measured value for that round; the ratio of a round is its value over the anchor's value in
    the same round.

    Raises:
        KeyError: ``anchor`` is not a candidate.
    """
    values: dict[str, list[float]] = {name: [] for name in candidates}
    for _ in range(rounds):
        for name, run in candidates.items():
            values[name].append(run())
    anchor_values = values[anchor]
    return {name: (statistics.median(v), statistics.median(x / a for x, a in zip(v, anchor_values, strict=True)))
            for name, v in values.items()}


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1 << 14:
        return f"2^{value.bit_length() - 1}" if value & (value - 1) == 0 else f"{value:,}"
    return str(value)


def format_table(rows: list[Row]) -> str:
    """The rows as a text table of `COLUMNS`, a header line and one line per row (no rows: the
    header alone)."""
    cells = [[_cell(row.get(c)) for c in COLUMNS] for row in rows]
    widths = [max([len(c), *(len(r[i]) for r in cells)]) for i, c in enumerate(COLUMNS)]
    lines = [COLUMNS, *cells]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(line, widths, strict=True)) for line in lines)


def print_table(rows: list[Row]) -> None:
    print(format_table(rows))


def write_json(rows: list[Row], path: Path) -> None:
    """Write the rows as one JSON list (every key, extra keys included)."""
    Path(path).write_text(json.dumps(rows, indent=1) + os.linesep)
