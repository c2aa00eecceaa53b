"""A study's database URL as printed: `shown_url` and `hide_passwords` replace the password of every
URL (``user:***@``, and a ``password=`` query value) with ``***``, so neither the study line nor an
error line shows it.
"""

from __future__ import annotations

import re

__all__ = ["hide_passwords", "shown_url"]

# ``scheme://user:password@host``: the password runs to the authority's last "@" (an unquoted "@"
# in a password is taken in too); and ``?password=...`` / ``&pwd=...`` query values.
_USERINFO = re.compile(r"(//[^:/@\s]*:)[^/\s]*@")
_QUERY = re.compile(r"([?&](?:password|passwd|pwd)=)[^&\s]*", re.IGNORECASE)


def hide_passwords(text: str) -> str:
    """``text`` with the password of every URL in it replaced by ``***``."""
    return _QUERY.sub(r"\1***", _USERINFO.sub(r"\1***@", text))


def shown_url(url: str) -> str:
    """``url`` as it may be printed: SQLAlchemy's rendering without the password, or, for a string
    SQLAlchemy cannot parse, the string with anything that looks like a password hidden."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        rendered = make_url(url).render_as_string(hide_password=True)
    except (ArgumentError, ValueError):  # not a URL SQLAlchemy parses: hide what looks like a password
        rendered = url
    return hide_passwords(rendered)
