"""The script's own collectives: `dist.all_reduce`, `all_gather`, `reduce_scatter`, `broadcast` ... called from Python.

Two things depend on them. Whether the ranks trained one model: processes that end with equal parameters averaged
their gradients only if something reduced them (the DDP reducer, FSDP, or the script's own all-reduce of the `.grad`
tensors, as the pytorch tutorial's `average_gradients` does); so each call on a tensor that holds a parameter's
gradient (same storage: `param.grad.data` is one) is counted. And where the step's time went: the calls are timed
on the host clock as communication (gloo on CPU blocks until the collective is done); a call with `async_op=True`,
or on a CUDA tensor (NCCL returns before the work is done), is counted as untimed, never as 0 seconds.

A thin wrapper per function of torch.distributed (the script imports them after the observer is installed), one
dict lookup of data pointers per call, refreshed once per backward pass; no collective of its own.
"""

from __future__ import annotations

import functools
import time
from typing import Any

import torch
import torch.distributed as dist

from ddpcli.worker.observer.attribution import skip_in_warnings

NAMES = (
    "all_reduce", "reduce", "broadcast", "all_gather", "all_gather_into_tensor", "reduce_scatter",
    "reduce_scatter_tensor", "all_to_all", "all_to_all_single", "all_reduce_coalesced",
)  # fmt: skip


class ScriptCollectives:
    def __init__(self, observer: Any) -> None:
        self.observer = observer
        self.calls = 0  # every call, the whole run
        self.grad_calls = 0  # calls on a parameter's gradient, the whole run
        self.by_name: dict[str, int] = {}
        self.window_calls = 0  # in the timed window (the steps after the first)
        self.window_s = 0.0  # host seconds of the timed calls of the window
        self.inside_s = 0.0  # the part of it inside a forward + backward interval
        self.untimed = 0  # window calls whose time the host clock cannot tell (async, CUDA)
        self._grads: set[int] = set()
        self._grads_at: tuple[int, int] | None = None
        self._depth = 0  # a collective that calls another (all_reduce_coalesced) counts once

    def install(self) -> None:
        for name in NAMES:
            original = getattr(dist, name, None)
            if callable(original):
                setattr(dist, name, self._timed(name, original))

    def _timed(self, name: str, original: Any) -> Any:
        seen, guard = self, self.observer._guard

        @functools.wraps(original)
        def collective(*args: Any, **kwargs: Any) -> Any:
            if seen._depth:
                return original(*args, **kwargs)
            seen._depth += 1
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                seen._depth -= 1
                guard(seen._called)(name, time.perf_counter() - start, args, kwargs)

        skip_in_warnings(collective)
        collective.__wrapped__ = original  # type: ignore[attr-defined]
        return collective

    def _called(self, name: str, seconds: float, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self.calls += 1
        self.by_name[name] = self.by_name.get(name, 0) + 1
        tensor = _first_tensor(args, kwargs)
        if tensor is not None and self._is_gradient(tensor):
            self.grad_calls += 1
        timing = self.observer.timing
        if not timing.window_started:
            return
        self.window_calls += 1
        if kwargs.get("async_op") or (tensor is not None and tensor.device.type != "cpu"):
            self.untimed += 1
            return
        self.window_s += seconds
        if timing.forward_start is not None:  # between a training forward and the return of its backward
            self.inside_s += seconds

    def _is_gradient(self, tensor: torch.Tensor) -> bool:
        forwards = self.observer.forwards
        key = (self.observer.step, forwards.counts.micro_batches + forwards.in_backward)
        if key != self._grads_at:
            self._grads_at = key
            self._grads = {
                param.grad.data_ptr()
                for module in self.observer.models.modules()
                for param in module.parameters()
                if param.grad is not None and not hasattr(param.grad, "to_local")  # a DTensor's shard: FSDP's own
            }  # fmt: skip
        return tensor.data_ptr() in self._grads

    def end(self) -> dict[str, Any]:
        """For the `end` row: what the script's collectives were, over the whole run."""
        return {"calls": self.calls, "grad_calls": self.grad_calls, "by_name": dict(self.by_name)}

    def timing(self) -> dict[str, Any]:
        """For the `timing` row: the window's calls and their host seconds."""
        return {
            "calls": self.window_calls,
            "seconds": self.window_s,
            "inside_forward_backward_s": self.inside_s,
            "untimed": self.untimed,
        }


def _first_tensor(args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.Tensor | None:
    for value in (*args, *kwargs.values()):
        if isinstance(value, torch.Tensor):
            return value
        if isinstance(value, list | tuple) and value and isinstance(value[0], torch.Tensor):
            return value[0]
    return None
