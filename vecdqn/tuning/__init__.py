"""Hyperparameter tuning of ``train.py`` runs with Optuna (``scripts/tune.py``).

Modules: `space` (the search space: ``--space NAME=LOW:HIGH[:log]`` or ``NAME=A,B,...``),
`train_command` (each trial's ``train.py`` command line, checked with train.py's own parser before
any trial), `trial_run` (a trial as a ``train.py`` child process, followed through its event file),
`study` (the Optuna study: storage, pruner, the objective, the table of the best trials),
`storage` (the database URL as printed, without its password; the lock that serializes opening a
SQLite study), `liveness` (which tuner runs a trial, and whether it has ended).

Optuna is an optional dependency (``pip install -e ".[tune]"``): importing this package does not
import it; `require_optuna` says what to install.
"""

from __future__ import annotations

from vecdqn.extras import require

__all__ = ["OPTUNA_MISSING", "StudyError", "require_optuna"]

OPTUNA_MISSING = 'the optuna package is not installed; scripts/tune.py needs it: pip install -e ".[tune]"'


class StudyError(ValueError):
    """A study that cannot be opened or continued as asked (one line: what and what to do)."""


def require_optuna() -> None:
    """Raise ``ImportError(OPTUNA_MISSING)`` when Optuna cannot be imported (checked without
    importing it)."""
    require("optuna", OPTUNA_MISSING)
