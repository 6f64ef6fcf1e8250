"""The process group's lifetime on gloo: what keeps a worker from aborting at exit. Shared by the runtime helper
and the observer, so a script gets the fix whether or not it imports ddpcli.

Two traps, both seen with torch 2.13 on CPU (see README, "Clean exit"):
- torch.distributed.nn.functional takes `group=group.WORLD` as a default argument. Imported for the first time
  after init_process_group (torch._dynamo imports it, and torch.optim and DDP's forward import torch._dynamo), it
  captures the default group for good: destroy_process_group cannot free it, its gloo threads outlive the
  interpreter and the worker aborts ("terminate called without an active exception"). Importing it here, before
  any group exists, binds the default to the empty placeholder instead.
- A finished collective can still wait in a gloo worker thread to be freed, and freeing its Python-owned tensors
  takes the GIL. DDP's Reducer holds the group; when the model is freed the Reducer destroys the group and joins
  those threads while holding the GIL: a deadlock. One reference held here means the Reducer is never the last
  holder; `release_groups` drops it from Python (whose binding releases the GIL while the threads are joined).
"""

import atexit
import gc

import torch.distributed as dist
import torch.distributed.nn.functional  # noqa: F401  (imported before any group exists: see above)

_held_groups: list[dist.ProcessGroup] = []
_release_registered = False


def hold_world_group() -> None:
    """Keep one reference to the default group until `release_groups` (at exit at the latest)."""
    global _release_registered
    if dist.is_initialized():
        _held_groups.append(dist.group.WORLD)
    if not _release_registered:
        atexit.register(release_groups)
        _release_registered = True


def init_process_group(backend: str) -> None:
    dist.init_process_group(backend)
    hold_world_group()


def release_groups() -> None:
    gc.collect()  # a model caught in a reference cycle lets go of the group now, not during interpreter teardown
    _held_groups.clear()
