"""What the script does around its training loop, watched through thin wrappers: the process group it starts,
the optimizers it creates (a step it replaces on one: optimizers.py), the processes it spawns itself and the
files it loads before its first optimizer step (loads.py)."""

import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from ddpcli.worker import process_group
from ddpcli.worker.observer.loads import loaded_file
from ddpcli.worker.observer.reading import wrap

MAX_LOADED = 16  # files recorded
MAX_LOAD_CALLS = 64  # torch.load calls looked at (a dataset of .pt shards read before the first step: no cost)


class ScriptHabits:
    def __init__(self, run_dir: Path, stepped: Callable[[], bool]) -> None:
        self.run_dir = run_dir
        self.stepped = stepped  # whether the first optimizer step happened
        self.process_group = False  # the script called init_process_group
        self.spawned = 0  # processes the script started itself with torch.multiprocessing.spawn
        self.loaded: list[dict[str, Any]] = []  # files torch.load read before the first step
        self.load_calls = 0
        self.optimizers: list[weakref.ref[torch.optim.Optimizer]] = []  # every optimizer created

    def patch(self, guard: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
        wrap(torch.optim.Optimizer, "__init__", after=guard(self._optimizer_created))
        wrap(dist, "init_process_group", after=guard(self._group_started))
        wrap(torch.multiprocessing, "spawn", before=guard(self._spawning))
        wrap(torch, "load", before=guard(self._loading))

    def _optimizer_created(self, result: Any, optimizer: torch.optim.Optimizer, *args: Any, **kwargs: Any) -> None:
        self.optimizers.append(weakref.ref(optimizer))

    def _group_started(self, *args: Any, **kwargs: Any) -> None:
        self.process_group = True
        process_group.hold_world_group()

    def _spawning(self, fn: Any, args: Any = (), nprocs: int = 1, *rest: Any, **kwargs: Any) -> None:
        self.spawned += nprocs if isinstance(nprocs, int) else 1

    def _loading(self, *args: Any, **kwargs: Any) -> None:
        self.load_calls += 1
        if not self.stepped() and len(self.loaded) < MAX_LOADED and self.load_calls <= MAX_LOAD_CALLS:
            found = loaded_file(args[0] if args else kwargs.get("f"), self.run_dir)
            if found is not None and found not in self.loaded:
                self.loaded.append(found)
