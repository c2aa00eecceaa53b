"""Optional extras (``.[ray]``, ``.[track]``, ``.[tune]``): is a package there, before anything starts."""

from __future__ import annotations

import importlib.util

__all__ = ["require"]


def require(module: str, message: str) -> None:
    """Raise ``ImportError(message)`` when ``module`` cannot be imported; found without importing
    it, so the check is cheap and runs before any worker process starts.

    Raises:
        ImportError: ``module`` is not installed (or is blocked by a None entry in ``sys.modules``).
    """
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a None entry in sys.modules (tests simulate that)
        found = False
    if not found:
        raise ImportError(message)
