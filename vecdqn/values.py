"""The one check of an integer option or argument, shared by every room (standard library only)."""

from __future__ import annotations

import numbers
from typing import Any

__all__ = ["check_int", "is_int"]


def is_int(value: Any) -> bool:
    """An integer that is not a bool (NumPy integers included).

    >>> is_int(3), is_int(True), is_int(3.0)
    (True, False, False)
    """
    return not isinstance(value, bool) and isinstance(value, numbers.Integral)


def check_int(said: str, value: Any, minimum: int, hint: str) -> int:
    """``value`` as a Python int; raises ``ValueError("<said> is invalid; <hint>")`` unless it is an
    integer (not a bool) ``>= minimum``. ``said`` names the option and its value (``"skip=0"``,
    ``"--frame-skip 0"``)."""
    if not is_int(value) or value < minimum:
        raise ValueError(f"{said} is invalid; {hint}")
    return int(value)
