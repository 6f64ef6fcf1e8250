"""A child that dies with its parent: torchrun must not go on alone when `ddpcli launch` is killed (even by SIGKILL,
when nothing of the launcher runs). Linux only; elsewhere torchrun is started without it."""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path

PR_SET_PDEATHSIG = 1


def die_with_parent(parent: int | None = None) -> Callable[[], None] | None:
    """A preexec_fn that has the child get SIGTERM when this process dies (Linux prctl PR_SET_PDEATHSIG; None
    elsewhere). The signal follows the thread that forks: Popen runs on the launcher's main thread, which lives as
    long as the launcher. libc is looked up here, before the fork, so the child only makes two system calls."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid() if parent is None else parent  # a forked child names the process that forked it

    def set_parent_death_signal() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:  # the launcher died before the call: the signal would never come
            os.kill(os.getpid(), signal.SIGTERM)

    return set_parent_death_signal


def ended(pid: int) -> bool:
    """Whether process `pid` has ended (Linux /proc): gone, or a zombie or dead process whose parent has not waited
    for it (a child of torchrun's killed group, or a torchrun whose parent, the prestart server, is gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    state = stat[stat.rfind(")") + 2 :][:1]
    return state in ("Z", "X", "")
