"""One export at a time into a target: an exclusive lock (flock) on a file of the target, held while runs are
written, so that two exports at once (two shells, `launch --export` beside `ddpcli export`) neither write one run
twice nor race on creating the target (a TensorBoard run folder, an MLflow SQLite store's tables).

The second export says that another one is writing the target (with its pid) and waits for it; then every run the
first wrote is up to date. The kernel drops the lock when its holder ends, however it ends (Ctrl-C, kill -9), so a
lock file left behind locks nothing. The lock file is made only when there is a run to write.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from ddpcli.errors import UserError


@contextmanager
def held(path: Path, what: str, notify: Callable[[str], None]) -> Iterator[None]:
    """Hold the lock of `path` (made with its folders if missing); `notify` hears once when it must wait."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as error:
        raise UserError(f"cannot write {path.parent}: {error.strerror or error}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
            by = f" (pid {holder})" if holder.isdigit() else ""
            notify(f"another ddpcli export{by} is writing {what}: waiting for it to finish")
            fcntl.flock(fd, fcntl.LOCK_EX)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        yield
    finally:
        os.close(fd)  # releases the lock
