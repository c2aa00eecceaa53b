"""The ``train.py`` command line of a trial: the study's fixed options plus one value per dimension.

The fixed options are what follows ``--`` on ``tune.py``'s command line, exactly as ``train.py``
takes them (``--preset catch --total-steps 8000 ...``). They and every end of the search space are
parsed and validated by ``train.py``'s own parser before any trial starts, so a trial never fails
on a value the space could have been told to avoid.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any

from vecdqn.cli import UsageError, build_parser, explicit_options, parse_config
from vecdqn.config import Config, option_flag
from vecdqn.tracking import check_wandb_names
from vecdqn.tuning.space import FIXED_BY_TUNER, Dimension, option_flags

__all__ = ["CommandError", "TrainCommand", "check_wandb_project"]


class CommandError(ValueError):
    """Fixed options or a space that ``train.py`` refuses (one line: what and why)."""


def _parse(argv: list[str]) -> Config:
    """``argv`` parsed and validated as ``train.py`` does it.

    Raises:
        CommandError: ``train.py``'s own one-line message.
    """
    try:
        return parse_config(argv)[0]
    except UsageError as err:
        raise CommandError(str(err).removesuffix(" (see train.py --help)")) from None


def check_wandb_project(config: Config) -> None:
    """Refuse a ``--track`` run's ``--wandb-project`` that W&B refuses
    (`vecdqn.tracking.check_wandb_names`): each trial would fail at its start. Without
    ``--track`` the project is not used.

    Raises:
        CommandError: the project, what W&B allows, and for ``team/project`` the ``--wandb-entity``
            to give instead.
    """
    if not config.track:
        return
    try:
        check_wandb_names(config.to_dict())
    except ValueError as err:
        raise CommandError(str(err)) from None


@dataclass
class TrainCommand:
    """The fixed ``train.py`` options of a study and what they resolve to.

    Attributes:
        options: the fixed options, as given after ``--``.
        config: their resolved configuration (preset applied, validated).
    """

    options: list[str]
    config: Config

    @classmethod
    def parse(cls, options: list[str]) -> TrainCommand:
        """Parse and validate the fixed options.

        Raises:
            CommandError: an option ``train.py`` refuses, one the tuner sets itself (``--run-name``,
                ``--resume``), or a ``--wandb-project`` W&B refuses (`check_wandb_project`).
        """
        given = explicit_options(build_parser(), options)
        for name in ("run_name", "resume"):
            if name in given:
                raise CommandError(f"{option_flag(name)} cannot be a fixed option: the tuner starts each trial as a "
                                   "new run named <study>/trial_<number>")
        config = _parse(list(options))
        check_wandb_project(config)
        return cls(list(options), config)

    def check_space(self, dims: list[Dimension]) -> None:
        """Every end (or choice) of every dimension, each alone and the low and high ends all
        together, as ``train.py`` would take them with the fixed options; and each value inside
        an integer range of at most `vecdqn.tuning.space.MAX_CHECKED_VALUES` values, alone.

        Raises:
            CommandError: naming the dimension, the value and ``train.py``'s reason (for values
                inside a range: how many fail, the first one's reason and the values that work,
                to give as choices); or a dimension that a fixed option also sets.
        """
        given = explicit_options(build_parser(), self.options)
        for dim in dims:
            if dim.name in given:
                raise CommandError(f"--space {dim.spec}: {option_flag(dim.name)} is also a fixed option after --; give "
                                   "it in one place")
            assert dim.name not in FIXED_BY_TUNER  # parse_dimension refuses these
            for what, value in dim.ends:
                try:
                    _parse(self.options + option_flags(dim.name, value))
                except CommandError as err:
                    raise CommandError(f"--space {dim.spec}: its {what} does not work with the fixed options: "
                                       f"{err}") from None
            self._check_inside(dim)
        for end in ("low", "high"):
            ranges = [d for d in dims if d.kind != "choice"]
            if len(ranges) > 1:
                values = {d.name: getattr(d, end) for d in ranges}
                try:
                    _parse(self.argv(values))
                except CommandError as err:
                    shown = " ".join(d.spec for d in ranges)
                    raise CommandError(f"--space {shown}: their {end} ends together do not work: {err}") from None

    def _check_inside(self, dim: Dimension) -> None:
        """Each value inside ``dim``'s integer range (`Dimension.inner_values`), alone with the
        fixed options; see `check_space`."""
        failed: dict[int, CommandError] = {}
        for value in dim.inner_values:
            try:
                _parse(self.options + option_flags(dim.name, value))
            except CommandError as err:
                failed[value] = err
        if not failed:
            return
        first = min(failed)
        works = [v for v in range(int(dim.low), int(dim.high) + 1) if v not in failed]
        shown = ",".join(map(str, works[:20])) + (",..." if len(works) > 20 else "")
        raise CommandError(f"--space {dim.spec}: {len(failed)} of its values do not work with the fixed options "
                           f"({first}: {failed[first]}); give the values that do as choices: {dim.name}={shown}")

    def argv(self, params: dict[str, Any], **tuner: Any) -> list[str]:
        """The fixed options, then each parameter, then ``tuner``'s options (``log_dir``,
        ``run_name``) as ``train.py`` arguments."""
        out = list(self.options)
        for name, value in {**params, **tuner}.items():
            out += option_flags(name, value)
        return out

    def reproduce(self, params: dict[str, Any]) -> str:
        """The ``train.py`` command line that runs these parameters again (in a new run folder)."""
        return "python scripts/train.py " + shlex.join(self.argv(params))
