"""Who owns a lease, and whether that owner is provably dead.

An owner is ``host/pid/start``. A crashed process cannot release its leases;
rather than make every resume wait ``lease_ttl`` for them to expire, a process
on the same host checks that the owner's pid is gone (or now belongs to a
process that started at another time) and takes the lease over at once.
Owners on other hosts are only ever outlived by their lease expiry.
"""

from __future__ import annotations

import os
import socket
import uuid
from functools import cache


def _start_time(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            stat = f.read()
    except OSError:
        return None
    # Field 22 (starttime) counts from the end of the parenthesised comm field.
    fields = stat.rsplit(")", 1)[-1].split()
    return fields[19] if len(fields) > 19 else None


@cache
def _host() -> str:
    return socket.gethostname().replace("/", "_") or "localhost"


def current_owner() -> str:
    """This process's owner string (stable for the life of the process)."""
    pid = os.getpid()
    return f"{_host()}/{pid}/{_start_time(pid) or uuid.uuid4().hex[:8]}"


def owner_is_dead(owner: str | None) -> bool:
    """True only when ``owner`` is a process on this host that no longer runs."""
    if not owner:
        return False
    parts = owner.split("/")
    if len(parts) != 3 or parts[0] != _host():
        return False
    try:
        pid = int(parts[1])
    except ValueError:
        return False
    if pid == os.getpid():
        return owner != current_owner()
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    started = _start_time(pid)
    return started is not None and started != parts[2]
