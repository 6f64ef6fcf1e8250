"""What the script does outside its training: the processes it starts itself and the files it writes.

- Processes: dist_tuto's `__main__` starts 2 `mp.Process` workers on port 29500; under torchrun they wait for peers
  that never come and the run hangs until its timeout. So each start is written (and flushed) the moment it
  happens: a run killed at its timeout still says why. Counted where the script's own code starts them:
  `multiprocessing.Process.start`, `multiprocessing.Pool`, `torch.multiprocessing.spawn`/`start_processes`, and
  `subprocess.Popen` of a Python interpreter. A library's processes (DataLoader workers, torch.compile's pool,
  a tracker's service) are started from its own code and are not the script's.
- Files: every rank of mnist at 2 processes `torch.save`s `mnist_cnn.pt`. Each rank records the paths its code
  wrote with `torch.save` or `open(.., "w"/"x")`; the merge finds the paths several ranks wrote.
"""

import builtins
import multiprocessing.pool
import multiprocessing.process
import os
import subprocess
import sys
import sysconfig
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.multiprocessing

from ddpcli.worker.observer.reading import wrap

MAX_WRITTEN = 32  # paths recorded per rank
MAX_SPAWNS = 16  # spawn rows per rank
_DDPCLI = str(Path(__file__).resolve().parents[2])
_LIBRARY_PREFIXES = tuple(
    sorted({path for key in ("stdlib", "platstdlib", "purelib", "platlib") if (path := sysconfig.get_paths().get(key))})
)


def _library(filename: str) -> bool:
    return (
        filename.startswith("<")
        or filename.startswith(_DDPCLI)
        or filename.startswith(_LIBRARY_PREFIXES)
        or "site-packages" in filename
        or "dist-packages" in filename
    )


def scripts_call(through: tuple[str, ...] = ()) -> bool:
    """Whether the first frame above the observer's wrappers (and the modules `through`: multiprocessing.Pool() is
    multiprocessing.context's call) is the script's own code, not a library's."""
    frame = sys._getframe(1)
    while frame is not None and (
        frame.f_code.co_filename.startswith(_DDPCLI)
        or str(frame.f_globals.get("__name__", "")).startswith(through or ("\0",))
    ):
        frame = frame.f_back
    return frame is not None and not _library(frame.f_code.co_filename)


def _python_command(args: Any) -> bool:
    first = args[0] if isinstance(args, list | tuple) and args else args if isinstance(args, str | os.PathLike) else ""
    name = os.path.basename(str(first).split()[0]) if str(first).strip() else ""
    return name.startswith("python") or str(first) == sys.executable


class OutsideWatch:
    def __init__(self, add: Callable[[dict[str, Any]], None], flush: Callable[[], None], run_dir: Path) -> None:
        self.add, self.flush, self.run_dir = add, flush, run_dir
        self.spawns = 0
        self.written: list[dict[str, str]] = []

    def install(self, guard: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
        wrap(multiprocessing.process.BaseProcess, "start", before=guard(self._process_start))
        wrap(multiprocessing.pool.Pool, "__init__", before=guard(self._pool))
        wrap(torch.multiprocessing, "spawn", before=guard(self._torch_spawn))
        wrap(torch.multiprocessing, "start_processes", before=guard(self._torch_spawn))
        wrap(subprocess.Popen, "__init__", before=guard(self._popen))
        wrap(torch, "save", before=guard(self._save))
        wrap(builtins, "open", before=guard(self._open))

    def _spawned(self, how: str, count: int, target: Any = None) -> None:
        if self.spawns >= MAX_SPAWNS:
            return
        self.spawns += 1
        name = getattr(target, "__qualname__", None) or (str(target)[:80] if target is not None else None)
        self.add({"kind": "spawn", "how": how, "count": count, "target": name})
        self.flush()  # now: a run that then hangs until its timeout keeps this row

    def _process_start(self, process: Any) -> None:
        if scripts_call():
            self._spawned("multiprocessing.Process", 1, getattr(process, "_target", None))

    def _pool(self, pool: Any, processes: Any = None, *args: Any, **kwargs: Any) -> None:
        if scripts_call(through=("multiprocessing.",)):
            count = processes if isinstance(processes, int) and processes > 0 else os.cpu_count() or 1
            self._spawned("multiprocessing.Pool", count)

    def _torch_spawn(self, fn: Any, args: Any = (), nprocs: Any = 1, *rest: Any, **kwargs: Any) -> None:
        if scripts_call():  # spawn's own start_processes call goes to its module's name, not to this wrapper
            count = nprocs if isinstance(nprocs, int) else 1
            self._spawned("torch.multiprocessing.spawn", count, fn)

    def _popen(self, popen: Any, args: Any = None, *rest: Any, **kwargs: Any) -> None:
        if _python_command(args if args is not None else kwargs.get("args")) and scripts_call(through=("subprocess",)):
            self._spawned("subprocess (python)", 1, args if isinstance(args, str) else " ".join(map(str, args)))

    def _save(self, obj: Any, f: Any = None, *args: Any, **kwargs: Any) -> None:
        self._wrote(f if f is not None else kwargs.get("f"), "torch.save")

    def _open(self, file: Any, mode: Any = "r", *args: Any, **kwargs: Any) -> None:
        mode = kwargs.get("mode", mode)
        if isinstance(mode, str) and ("w" in mode or "x" in mode):
            self._wrote(file, "open")

    def _wrote(self, target: Any, how: str) -> None:
        if len(self.written) >= MAX_WRITTEN:
            return
        given = target if isinstance(target, str | os.PathLike) else getattr(target, "name", None)
        if not isinstance(given, str | os.PathLike) or not scripts_call():
            return
        path = os.path.abspath(os.fspath(given))
        if any(entry["path"] == path for entry in self.written):
            return
        self.written.append({"path": path, "given": os.fspath(given), "how": how})
