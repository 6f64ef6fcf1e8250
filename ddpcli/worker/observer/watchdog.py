"""Workers never outlive torchrun: a worker whose torchrun is gone (killed hard, or dead with its launcher) stops.

torchrun starts each worker as its own child and, when it is stopped cleanly, stops them; killed by SIGKILL it cannot,
and its workers would train on with parent 1, holding devices and writing into a run nobody watches. `ddpcli launch`
gives torchrun a parent-death signal (ddpcli.launch.supervisor), which covers a killed launcher; this thread covers a
killed torchrun: once a second it asks whether its parent changed, and if so stops the process the way torchrun
would, with SIGTERM (the observer flushes its rows; a script's own handler runs), then SIGKILL after a grace period.

Only under torchrun (TORCHELASTIC_RUN_ID is set): run by hand, a worker keeps python's behaviour. No torch here.
"""

from __future__ import annotations

import os
import signal
import threading
import time

CHECK_S = 1.0
GRACE_S = 10.0


def watch_parent() -> threading.Thread | None:
    if "TORCHELASTIC_RUN_ID" not in os.environ:
        return None
    parent = os.getppid()
    if parent == 1:  # already orphaned: nothing to watch
        return None
    thread = threading.Thread(target=_stop_when_orphaned, args=(parent,), name="ddpcli-watchdog", daemon=True)
    thread.start()
    return thread


def _stop_when_orphaned(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(CHECK_S)
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(GRACE_S)
    os.kill(os.getpid(), signal.SIGKILL)
