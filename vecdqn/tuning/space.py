"""The search space of a tuning study: which ``train.py`` options vary, over which values.

One dimension per option, written ``NAME=SPEC`` on the command line (``--space``) or one per
line in a file (``--space-file``; ``#`` starts a comment)::

    learning_rate=1e-4:3e-3:log     a float range, sampled on a log scale
    n_step=1:3                      an integer range (the option takes integers), ends included
    batch_size=32,64,128            choices
    double=true,false               choices of an on/off option

``NAME`` is a `vecdqn.config.Config` field as ``train.py`` spells it (``learning_rate``,
``learning-rate`` and ``--learning-rate`` are the same). Ranges are inclusive; ``:log`` needs a
low end above zero. The numbers of an integer option (range ends and choices) are whole numbers
written as ``train.py`` takes them (`vecdqn.cli.whole_number`): ``n_step=1:1000``, not ``1:1e3``
or ``1:1000.0``. Options that name or move the run (``--run-name``, ``--log-dir``,
``--resume``), pick a preset, or set tracking cannot vary.

Every error is a `SpaceError`, one line naming the dimension as given and what is allowed.
"""

from __future__ import annotations

import argparse
import difflib
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vecdqn.cli import OPTION_TYPES, option_flags, whole_number
from vecdqn.config import option_flag, options_with

__all__ = ["FIXED_BY_TUNER", "MAX_CHECKED_VALUES", "Dimension", "SpaceError", "option_flags", "parse_dimension",
           "parse_space", "read_space_file"]

# Options a trial cannot vary (`vecdqn.config.options_with`): the tuner names each trial's run, and a
# preset or tracking is not a hyperparameter (vary the preset's values instead).
FIXED_BY_TUNER = options_with("fixed_by_tuner")

# An integer range of at most this many values has each of them checked before any trial (about
# 2 ms each), not only its ends: a rule such as "--minibatches divides the rollout" holds at the
# ends of 1:8 and fails inside it.
MAX_CHECKED_VALUES = 1_000

_TRUE = ("true", "yes", "on", "1")
_FALSE = ("false", "no", "off", "0")


class SpaceError(ValueError):
    """A search-space dimension that cannot be used (one line: the dimension and what is allowed)."""


@dataclass(frozen=True)
class Dimension:
    """One option of the search space.

    Attributes:
        name: the `Config` field (``"learning_rate"``).
        kind: ``"int"`` or ``"float"`` (a range ``low..high``, both included) or ``"choice"``.
        low, high: the range's ends (None for choices).
        log: sample the range on a log scale.
        choices: the values of a ``"choice"`` dimension, in the option's type.
        spec: the dimension as the user wrote it, for messages.
    """

    name: str
    kind: str
    low: float | None = None
    high: float | None = None
    log: bool = False
    choices: tuple[Any, ...] = ()
    spec: str = ""

    @property
    def ends(self) -> list[tuple[str, Any]]:
        """``(what, value)`` for each value to check before any trial: both ends, or each choice."""
        if self.kind == "choice":
            return [(f"choice {value!r}", value) for value in self.choices]
        return [("low end", self.low), ("high end", self.high)]

    @property
    def inner_values(self) -> list[int]:
        """The values strictly inside an integer range of at most `MAX_CHECKED_VALUES` values, each
        to check before any trial as the ends are; none for other dimensions."""
        if self.kind != "int" or self.high - self.low + 1 > MAX_CHECKED_VALUES:
            return []
        return list(range(int(self.low) + 1, int(self.high)))

    def suggest(self, trial: Any) -> Any:
        """This dimension's value for an Optuna ``trial`` (its parameter name is `name`)."""
        if self.kind == "int":
            return trial.suggest_int(self.name, int(self.low), int(self.high), log=self.log)
        if self.kind == "float":
            return trial.suggest_float(self.name, float(self.low), float(self.high), log=self.log)
        return trial.suggest_categorical(self.name, list(self.choices))


def _field_name(text: str) -> str:
    return text.strip().removeprefix("--").replace("-", "_")


def _number(text: str, kind: str, spec: str, name: str) -> float | int:
    """``text`` as option ``name``'s number type, in the ASCII digits 0-9 only (Python's ``float``
    also reads other scripts' digits): for an integer option a whole number as ``train.py`` reads
    it (`vecdqn.cli.whole_number`: ``1000``, not ``1e3`` or ``1000.0``; at most 10**12), for a
    decimal option a finite number."""
    shown = text.strip()
    try:
        if not text.isascii():
            raise ValueError(text)
        value = float(text)
    except ValueError:
        raise SpaceError(f"--space {spec}: {shown!r} is not a number in the digits 0-9") from None
    if not math.isfinite(value):
        raise SpaceError(f"--space {spec}: {shown!r} is not a finite number")
    if kind != "int":
        return value
    try:
        int(text)  # Python's integer syntax, as whole_number reads it
    except ValueError:
        written = f": {int(value)}, not {shown}" if value.is_integer() else ""
        raise SpaceError(f"--space {spec}: {shown!r} is not a whole number, and {option_flag(name)} takes whole "
                         f"numbers, written in the digits 0-9 as train.py reads them{written}") from None
    try:
        return whole_number(text)
    except argparse.ArgumentTypeError as err:  # beyond the limit of every count
        raise SpaceError(f"--space {spec}: {err}") from None


def _choice(text: str, kind: str, spec: str, name: str) -> Any:
    text = text.strip()
    if kind == "bool":
        if text.lower() in _TRUE:
            return True
        if text.lower() in _FALSE:
            return False
        raise SpaceError(f"--space {spec}: {text!r} is not true or false")
    if kind in ("int", "float"):
        return _number(text, kind, spec, name)
    if not text:
        raise SpaceError(f"--space {spec}: an empty choice; separate choices with single commas")
    return text


def parse_dimension(spec: str) -> Dimension:
    """One ``NAME=LOW:HIGH[:log]`` or ``NAME=A,B,...`` dimension (see the module docstring).

    Raises:
        SpaceError: not ``NAME=SPEC``; an unknown or fixed option; a range for an on/off or text
            option; a bound that is not a finite number (for an integer option: not a whole number
            in the digits 0-9, e.g. ``1e3``, or one beyond 10**12); an empty
            range (low not below high); a log scale whose low end is not above zero; a repeated
            choice.
    """
    spec = spec.strip()
    name_text, sep, values = spec.partition("=")
    name = _field_name(name_text)
    if not sep or not name or not values.strip():
        raise SpaceError(f"--space {spec!r}: expected NAME=LOW:HIGH, NAME=LOW:HIGH:log or NAME=A,B,... "
                         "(e.g. learning_rate=1e-4:3e-3:log)")
    if name not in OPTION_TYPES:
        close = difflib.get_close_matches(name, OPTION_TYPES, n=1)
        hint = f"did you mean {close[0]}? " if close else ""
        raise SpaceError(f"--space {spec}: {name!r} is not an option of train.py; {hint}the options are listed by "
                         "python scripts/train.py --help")
    if name in FIXED_BY_TUNER:
        raise SpaceError(f"--space {spec}: {option_flag(name)} cannot vary between trials; the options that cannot: "
                         f"{', '.join(option_flag(n) for n in FIXED_BY_TUNER)}")
    kind = OPTION_TYPES[name]
    if "," in values:
        choices = tuple(_choice(text, kind, spec, name) for text in values.split(","))
        if len(set(choices)) != len(choices):
            raise SpaceError(f"--space {spec}: a choice is repeated")
        return Dimension(name, "choice", choices=choices, spec=spec)
    if kind not in ("int", "float"):
        example = "true,false" if kind == "bool" else "A,B"
        raise SpaceError(f"--space {spec}: {option_flag(name)} is {'an on/off' if kind == 'bool' else 'a text'} "
                         f"option; give choices separated by commas, e.g. {name}={example}")
    parts = values.split(":")
    if len(parts) not in (2, 3) or (len(parts) == 3 and parts[2].strip() != "log"):
        raise SpaceError(f"--space {spec}: expected a range LOW:HIGH or LOW:HIGH:log, or choices A,B,...")
    low, high = (_number(text, kind, spec, name) for text in parts[:2])
    log = len(parts) == 3
    if not low < high:
        raise SpaceError(f"--space {spec}: the range {parts[0].strip()}:{parts[1].strip()} is empty; give LOW:HIGH "
                         "with LOW below HIGH (a single value is a fixed option: pass it to train.py after --)")
    if log and low <= 0:
        raise SpaceError(f"--space {spec}: a log scale needs a low end above zero, not {parts[0].strip()}")
    return Dimension(name, kind, low=low, high=high, log=log, spec=spec)


def read_space_file(path: str | Path) -> list[str]:
    """The dimensions of a space file: one ``NAME=SPEC`` per line; blank lines and ``#`` comments
    skipped.

    Raises:
        SpaceError: the file cannot be read.
    """
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as err:
        raise SpaceError(f"--space-file {path}: cannot be read ({getattr(err, 'strerror', None) or err})") from None
    return [line.split("#", 1)[0].strip() for line in text.splitlines() if line.split("#", 1)[0].strip()]


def parse_space(specs: list[str]) -> list[Dimension]:
    """All dimensions, in the order given.

    Raises:
        SpaceError: a bad dimension (see `parse_dimension`), an option given twice, or no
            dimension at all.
    """
    if not specs:
        raise SpaceError("no search space: give at least one --space NAME=LOW:HIGH[:log] or NAME=A,B,... "
                         "(or --space-file)")
    dims: list[Dimension] = []
    for spec in specs:
        dim = parse_dimension(spec)
        if any(d.name == dim.name for d in dims):
            raise SpaceError(f"--space {spec}: {option_flag(dim.name)} is already in the space; give each option once")
        dims.append(dim)
    return dims
