"""Which framework the run was under, seen on the call stack, and how its lr schedulers stepped.

Advice that names a library is advice only where that library drove the run: build-nanogpt never imports
accelerate, yet was told to pass `step_scheduler_with_optimizer=False` to Accelerator. So the observer records the
frameworks imported (sys.modules, at the end), those on the stack when the first optimizer step ran (transformers'
Trainer, Lightning, Fabric and accelerate's wrapped optimizer all call the torch optimizer's step from their own
code), and for each lr scheduler its class, how many times it stepped (its initial step left out) and the
frameworks on the stack when it first stepped (accelerate's AcceleratedScheduler steps the one it wraps once per
process). Also the numeric regime a difference between runs comes from (TF32, deterministic algorithms).
"""

import sys
import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch.optim.lr_scheduler import LRScheduler
from torch.optim.optimizer import register_optimizer_step_pre_hook

from ddpcli.worker.observer.reading import wrap

# module name prefix -> the framework's name in findings (the longest prefix first: lightning.fabric is Fabric)
FRAMEWORK_MODULES = (
    ("lightning.fabric", "fabric"),
    ("lightning_fabric", "fabric"),
    ("lightning.pytorch", "lightning"),
    ("pytorch_lightning", "lightning"),
    ("accelerate", "accelerate"),
    ("transformers", "transformers"),
)
MAX_SCHEDULERS = 8
MAX_FRAMES = 200


def framework_of(module: str) -> str | None:
    for prefix, name in FRAMEWORK_MODULES:
        if module == prefix or module.startswith(prefix + "."):
            return name
    return None


def on_stack(skip: int = 1) -> list[str]:
    """The frameworks whose code is on the caller's stack, innermost first, each once."""
    found: list[str] = []
    frame = sys._getframe(skip)
    for _ in range(MAX_FRAMES):
        if frame is None:
            break
        name = framework_of(str(frame.f_globals.get("__name__", "")))
        if name is not None and name not in found:
            found.append(name)
        frame = frame.f_back
    return found


def imported() -> list[str]:
    return sorted({name for module in list(sys.modules) if (name := framework_of(module)) is not None})


class StackWatch:
    def __init__(self) -> None:
        self.optimizer_stepped_by: list[str] | None = None  # at the first optimizer step
        self.schedulers: list[tuple[weakref.ref[LRScheduler], dict[str, Any]]] = []

    def install(self, guard: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
        register_optimizer_step_pre_hook(guard(self._optimizer_step))
        wrap(LRScheduler, "step", before=guard(self._scheduler_step))

    def _optimizer_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if self.optimizer_stepped_by is None:
            self.optimizer_stepped_by = on_stack(2)  # once (a hook removed while torch iterates its hooks breaks)

    def _scheduler_step(self, scheduler: LRScheduler, *args: Any, **kwargs: Any) -> None:
        for ref, info in self.schedulers:
            if ref() is scheduler:
                info["steps"] += 1
                if info["stepped_by"] is None:
                    info["stepped_by"] = on_stack(2)
                return
        if len(self.schedulers) < MAX_SCHEDULERS:  # its first call: the initial step its __init__ makes
            info = {"class": type(scheduler).__name__, "steps": 0, "stepped_by": None}
            self.schedulers.append((weakref.ref(scheduler), info))

    def row(self) -> dict[str, Any]:
        return {
            "imported": imported(),
            "optimizer_stepped_by": self.optimizer_stepped_by,
            "schedulers": [dict(info) for _, info in self.schedulers],
        }


def numerics() -> dict[str, Any]:
    """The numeric regime besides autocast (recorded apart): TF32 matmuls and convolutions, float32 matmul
    precision, deterministic algorithms."""
    return {
        "tf32_matmul": bool(torch.backends.cuda.matmul.allow_tf32),
        "tf32_cudnn": bool(torch.backends.cudnn.allow_tf32),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "deterministic": bool(torch.are_deterministic_algorithms_enabled()),
    }
