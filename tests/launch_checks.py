"""What a stopped launch must leave behind: nothing (shared by the launch tests)."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterable

from clorch_nb.data.workers.shm import PREFIX, SHM_DIR


def _group_of(pid: int) -> tuple[int, str] | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[2]), fields[0]
    except (OSError, IndexError, ValueError):
        return None


def leftovers(pids: Iterable[int], port: int, wait_s: float = 5.0) -> list[str]:
    """Live processes in the ranks' process groups, their ``/dev/shm`` segments, and whether
    the rendezvous port is still taken (empty when nothing is left)."""
    pids = set(pids)
    deadline = time.monotonic() + wait_s
    while True:
        found = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                g = _group_of(int(entry))
                if g is not None and g[0] in pids and g[1] != "Z":
                    found.append(f"process {entry} of rank group {g[0]}")
        found += [
            f"/dev/shm/{name}"
            for name in os.listdir(SHM_DIR)
            if name.startswith(PREFIX + "-") and name.split("-")[1] in {str(p) for p in pids}
        ]
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            # SO_REUSEADDR: connections in TIME_WAIT (closed, kept by the kernel for a minute)
            # do not count; a process still listening on the port does
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                found.append(f"port {port} still listened on")
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.1)
