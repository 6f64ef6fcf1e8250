"""How long the training loop's thread was runnable but not running: it waited for a CPU that other work held.

Linux keeps it per thread in /proc/<tid>/schedstat (its second field: nanoseconds spent waiting on a run queue).
The file is opened from the training thread, so later reads are that thread's even from another one; each read
is one pread of a small file. A rank that waits for a CPU is slow because of its host, not its work: this is
what lets a straggler finding name the host as the cause it saw (ddpcli.diagnosis.slowness). Elsewhere (no such
file, another OS) every read is None and nothing is claimed.
"""

from __future__ import annotations

import os


class RunQueueWait:
    """Seconds the opening thread has waited on a run queue, read cumulatively (None where not available)."""

    def __init__(self) -> None:
        try:
            self.fd: int | None = os.open("/proc/thread-self/schedstat", os.O_RDONLY)
        except OSError:
            self.fd = None

    def seconds(self) -> float | None:
        if self.fd is None:
            return None
        try:
            return int(os.pread(self.fd, 128, 0).split()[1]) / 1e9
        except (OSError, ValueError, IndexError):
            return None
