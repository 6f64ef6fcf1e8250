"""torchrun's interpreter, started while `ddpcli launch` itself is still starting.

Most of a short job's time is start-up, and torchrun's is mostly `import torch` (1.5 s and more). The launcher needs
a few tenths of a second of its own (its modules, pydantic, the plan) before it knows torchrun's arguments; done
one after the other, that made `ddpcli launch` of a no-op job 1.13x the user's own torchrun. So `ddpcli launch`
starts `python -c PRESTART` first thing: it imports torchrun's module and waits on stdin. When the first run's
command is ready, the launcher sends its arguments, environment, working directory and log file, and the waiting
interpreter runs torchrun's `main` with them, exactly as `python -m torch.distributed.run ARGS` would (stdin from
/dev/null, stdout and stderr to the log, the run's environment; torchrun reads its options when main runs). Only
variables that torch reads while it is imported are the launcher's environment's for the agent process; the workers
torchrun starts get the run's environment in full. If the launcher never sends a command (--help, an error), the
interpreter sees stdin close and exits.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from ddpcli.launch.parent_death import die_with_parent

TORCHRUN_MODULE = "torch.distributed.run"

PRESTART = """
import json, os, sys
import torch.distributed.run as torchrun
line = sys.stdin.readline()
if not line.strip():
    os._exit(0)
order = json.loads(line)
os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
log = os.open(order["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
os.dup2(log, 1)
os.dup2(log, 2)
os.environ.clear()
os.environ.update(order["env"])
if order.get("cwd"):
    os.chdir(order["cwd"])
sys.argv = [torchrun.__file__, *order["args"]]
torchrun.main(order["args"])
"""

_waiting: subprocess.Popen[bytes] | None = None


def prestart(argv: Sequence[str]) -> None:
    """Start the waiting interpreter when the command line is a `launch` that will start torchrun."""
    global _waiting
    words = list(argv)
    if _waiting is not None or not words or words[0] != "launch":
        return
    if any(word in ("--dry-run", "--help", "-h") for word in words):
        return
    try:
        _waiting = subprocess.Popen(
            [sys.executable, "-c", PRESTART], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, start_new_session=True, preexec_fn=die_with_parent(),
        )  # fmt: skip
    except OSError:
        _waiting = None


def take(
    argv: Sequence[str], env: dict[str, str], log: Path, cwd: Path | None = None
) -> subprocess.Popen[bytes] | None:
    """The waiting interpreter, now running torchrun with `argv`'s arguments; None when there is none (a later run
    of a sweep, a command that is not `python -m torch.distributed.run`, an interpreter that died)."""
    global _waiting
    process, _waiting = _waiting, None
    if process is None:
        return None
    if list(argv[:3]) != [sys.executable, "-m", TORCHRUN_MODULE] or process.poll() is not None:
        _discard(process)
        return None
    order = json.dumps(
        {"args": list(argv[3:]), "env": env, "log": str(log), "cwd": str(cwd) if cwd else None}, allow_nan=False
    )
    try:
        assert process.stdin is not None
        process.stdin.write(order.encode() + b"\n")
        process.stdin.close()
    except OSError:
        _discard(process)
        return None
    return process


def _discard(process: subprocess.Popen[bytes]) -> None:
    process.kill()
    process.wait()
    if process.stdin is not None:
        process.stdin.close()
