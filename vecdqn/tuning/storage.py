"""A study's database URL as printed, and the lock that lets tuners open one SQLite study together.

Printing: `shown_url` and `hide_passwords` replace the password of every URL (``user:***@``, and a
``password=`` query value) with ``***``, so neither the study line nor an error line shows it.

Opening: the first time Optuna's ``RDBStorage`` opens a database it creates its tables and stamps
their schema version. Tuners doing that together on one new SQLite file collide: ``table studies
already exists``, ``UNIQUE constraint failed: alembic_version.version_num``, ``database is
locked``. `opening_lock` takes an exclusive ``flock`` on the folder that holds the SQLite file
while a tuner creates or loads the study, so the tuners of one machine take turns (a folder, not
a lock file beside the database: nothing is left behind). A server database (PostgreSQL, MySQL)
has no such folder: there `is_opening_race` picks the errors worth a retry.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from pathlib import Path

__all__ = ["OPENING_RACES", "hide_passwords", "is_opening_race", "opening_lock", "shown_url", "sqlite_folder"]

# ``scheme://user:password@host``: the password runs to the authority's last "@" (an unquoted "@"
# in a password is taken in too); and ``?password=...`` / ``&pwd=...`` query values.
_USERINFO = re.compile(r"(//[^:/@\s]*:)[^/\s]*@")
_QUERY = re.compile(r"([?&](?:password|passwd|pwd)=)[^&\s]*", re.IGNORECASE)

# Messages of the errors two tuners get when they create one study's tables at the same moment
# (SQLite's, then MySQL's and PostgreSQL's wording).
OPENING_RACES = ("already exists", "UNIQUE constraint failed", "database is locked", "Duplicate entry",
                 "duplicate key value")


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


def sqlite_folder(url: str) -> Path | None:
    """The folder that holds a SQLite URL's database file; None for another database, an
    in-memory one, or a folder that does not exist."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        return None
    if parsed.get_backend_name() != "sqlite" or not parsed.database or parsed.database == ":memory:" \
            or parsed.database.startswith("file:"):
        return None
    folder = Path(parsed.database).expanduser().resolve().parent
    return folder if folder.is_dir() else None


def is_opening_race(err: BaseException) -> bool:
    """Whether ``err`` is one of `OPENING_RACES` (another tuner created the tables meanwhile):
    opening again finds them."""
    return any(text in str(err) for text in OPENING_RACES)


@contextlib.contextmanager
def opening_lock(folder: Path | None) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``folder`` (the SQLite database's) for the block; nothing
    when ``folder`` is None or the file system does not lock folders (e.g. NFS): the retries on
    `is_opening_race` remain."""
    fd = None
    if folder is not None:
        try:
            import fcntl

            fd = os.open(folder, os.O_RDONLY)
            fcntl.flock(fd, fcntl.LOCK_EX)
        except (ImportError, OSError):
            if fd is not None:
                os.close(fd)
            fd = None
    try:
        yield
    finally:
        if fd is not None:
            os.close(fd)  # closing the last descriptor releases the lock
