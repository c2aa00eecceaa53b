"""Which tuner process runs a trial, and whether it is still there.

A tuner records `identity` in each trial it starts: its host name, pid, and, on Linux, the host's
boot id, its pid namespace and the pid's start time. `is_gone` tells, from another process, whether
that tuner has ended: on the same host and pid namespace it looks the pid up, and a pid that now
belongs to another process (same number, another start time), a zombie, or a boot since, all count
as gone. For a tuner on another host (or in another container) it cannot tell: Optuna's heartbeat
decides there.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

__all__ = ["identity", "is_gone"]


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def _pid_namespace() -> str | None:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


def _stat(pid: int) -> tuple[str, str] | None:
    """``(state, start time in clock ticks after boot)`` of ``pid`` from ``/proc/<pid>/stat``
    (fields 3 and 22; the command name, field 2, may hold spaces and parentheses), or None."""
    text = _read(f"/proc/{pid}/stat")
    if text is None or ")" not in text:
        return None
    fields = text.rsplit(")", 1)[1].split()
    return (fields[0], fields[19]) if len(fields) > 19 else None


def identity() -> dict[str, Any]:
    """This process as a JSON-ready dict: ``host``, ``pid``, and ``boot``, ``pid_namespace``,
    ``started`` (None where ``/proc`` does not tell)."""
    pid = os.getpid()
    stat = _stat(pid)
    return {"host": socket.gethostname(), "pid": pid, "boot": _read("/proc/sys/kernel/random/boot_id"),
            "pid_namespace": _pid_namespace(), "started": stat[1] if stat else None}


def is_gone(owner: Any) -> bool | None:
    """Whether the process ``owner`` (an `identity`, as recorded) has ended: True or False for
    one of this host and pid namespace; None when that cannot be told here (another host or
    namespace, or no identity)."""
    if not isinstance(owner, dict) or owner.get("host") != socket.gethostname():
        return None
    pid = owner.get("pid")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return None
    boot = _read("/proc/sys/kernel/random/boot_id")
    if owner.get("boot") and boot and owner["boot"] != boot:
        return True  # the host has restarted since
    if owner.get("pid_namespace") != _pid_namespace():
        return None  # another container on this host: its pids are not ours to look up
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass  # a process of another user holds the pid
    stat = _stat(pid)
    if stat is None:
        return False  # alive, and no /proc to say more
    state, started = stat
    return state in ("Z", "X") or (owner.get("started") is not None and started != owner["started"])
