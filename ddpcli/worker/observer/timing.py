"""Where each optimizer step's time goes on this rank, with no device synchronisation per step.

Measured per rank, over the steps after the first (whose one-off costs would swamp a short run):
- data wait: time inside the training DataLoader iterators' `__next__` (host time on every device);
- forward + backward: from the model's first training forward of a micro-batch to the return of its backward
  (on a DDP model that return waits for the last all-reduce, so this still holds the exposed communication);
- optimizer: `optimizer.step` (a global pre hook and the observer's post hook);
- the step: from the end of one optimizer step to the end of the next.
On CUDA the three device intervals are CUDA events, read in chunks once they have completed (`query()`, which never
blocks) and the rest once at the end; on CPU they are host clock readings. Exposed communication is not timed here:
the DDP reducer times it itself (`_get_ddp_logging_data()`, read at the reducer's sampling points), each
sampled iteration of the window is kept (ddpcli.worker.observer.reducer_samples), and the host merge
(ddpcli.rundir.timing) takes their mean out of forward + backward. The row `timing` is written every
RESOLVE_EVERY steps (cumulative: the merge keeps the last) and at the end, with peak memory, threads and cores,
the training thread's wait for a CPU over the window (ddpcli.worker.observer.cpu_wait),
and the byte counts of the parameters, their gradients and the optimizer state (what `ddpcli plan --predict-from`
starts from).
"""

from __future__ import annotations

import os
import resource
import time
import weakref
from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel
from torch.optim.optimizer import register_optimizer_step_pre_hook
from torch.utils.data.dataloader import _BaseDataLoaderIter

from ddpcli.rundir.cpu_list import format_cpu_list
from ddpcli.worker.observer.cpu_wait import RunQueueWait
from ddpcli.worker.observer.parallel import optimizer_params, sharding
from ddpcli.worker.observer.reducer_samples import ReducerSamples

RESOLVE_EVERY = 256  # steps between two cumulative `timing` rows (and two reads of completed CUDA events)
# The reducer samples its timers on its first 10 iterations, then one in 100: read them after each of the first
# steps and every 100 steps after (a host call), so they are known even when the script drops its model first.
DDP_READ_FIRST, DDP_READ_EVERY = 12, 100
DDP_KEYS = (
    "avg_forward_compute_time", "avg_backward_compute_time", "avg_backward_comm_time",
    "avg_backward_compute_comm_overlap_time", "iteration", "find_unused_parameters", "unused_parameter_size",
    "total_parameter_size_bytes", "bucket_cap_bytes", "gradient_as_bucket_view", "num_buckets_reduced",
)  # fmt: skip


class Clock:
    """Host clock: a mark is a perf_counter reading, an interval is known at once."""

    source = "host"

    def mark(self) -> Any:
        return time.perf_counter()

    def add(self, totals: dict[str, float], key: str, start: Any, end: Any) -> None:
        totals[key] = totals.get(key, 0.0) + (end - start)

    def resolve(self, totals: dict[str, float], final: bool) -> None:
        return None


class CudaClock(Clock):
    """CUDA events on the current stream: an interval is summed once its end event has completed."""

    source = "cuda_events"

    def __init__(self) -> None:
        self.pending: list[tuple[str, Any, Any]] = []

    def mark(self) -> Any:
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def add(self, totals: dict[str, float], key: str, start: Any, end: Any) -> None:
        self.pending.append((key, start, end))

    def resolve(self, totals: dict[str, float], final: bool) -> None:
        """Sum the completed intervals (all of them at the end, after one synchronisation)."""
        if final:
            torch.cuda.synchronize()
        waiting = []
        for key, start, end in self.pending:
            if final or end.query():
                totals[key] = totals.get(key, 0.0) + start.elapsed_time(end) / 1000.0
            else:
                waiting.append((key, start, end))
        self.pending = waiting


class StepTiming:
    def __init__(self, observer: Any) -> None:
        self.observer = observer
        self.clock: Clock | None = None  # chosen at the first training forward, by the batch's device
        self.loader_wait: dict[int | None, float] = {}  # host seconds in __next__, by loader id (window only)
        self.totals: dict[str, float] = {}  # forward_backward, optimizer, step: seconds over the window
        self.forward_start: Any = None
        self.optimizer_start: Any = None
        self.last_step_end: Any = None
        self.window_started = False
        self.steps = 0  # optimizer steps in the window
        self.micro_batches = 0
        self.synced_backwards = 0  # backwards of a DDP model that all-reduced (no no_sync around its forward)
        self.synced_before_window = 0  # the same, in the first step: the reducer's iterations before the window
        self.reducer_samples = ReducerSamples()
        self.ddp_models: list[weakref.ref[DistributedDataParallel]] = []
        self.grad_bytes: int | None = None
        self.params_without_grad: int | None = None  # most parameters of a DDP model stepped without a gradient
        self.ddp_stats: dict[str, int] | None = None
        self.memory_at_first_forward: int | None = None  # the process before any activation: runtime + model
        self.cpu_start = 0.0  # process CPU time (every thread) at the window's start
        self.cpu_s = 0.0  # process CPU time over the window: / step_s = the cores' worth this process got
        self.run_queue: RunQueueWait | None = None  # the training thread's wait for a CPU (opened at the window)
        self.cpu_wait_start: float | None = None
        self.cpu_wait_s: float | None = None  # that wait over the window (None: not known on this OS)
        self.step_fb = 0.0  # host clock: this step's forward + backward seconds so far
        self.fb_squares = 0.0  # host clock: sum over timed steps of (a step's forward + backward)^2

    # -- installing -------------------------------------------------------------------------------------------

    def install(self) -> None:
        register_optimizer_step_pre_hook(self.observer._guard(self._before_step))
        original_next = _BaseDataLoaderIter.__next__
        original_backward = torch.autograd.backward
        timing, after_backward = self, self.observer._guard(self._after_backward)

        def timed_next(iterator: Any) -> Any:
            start = time.perf_counter()
            try:
                return original_next(iterator)
            finally:
                if timing.window_started:
                    key = getattr(iterator, "_ddpcli_loader", None)
                    timing.loader_wait[key] = timing.loader_wait.get(key, 0.0) + time.perf_counter() - start

        def timed_backward(*args: Any, **kwargs: Any) -> Any:
            result = original_backward(*args, **kwargs)
            after_backward()
            return result

        timed_next.__wrapped__ = original_next  # type: ignore[attr-defined]
        timed_backward.__wrapped__ = original_backward  # type: ignore[attr-defined]
        _BaseDataLoaderIter.__next__ = timed_next  # type: ignore[method-assign]
        torch.autograd.backward = timed_backward

    # -- the step's parts -------------------------------------------------------------------------------------

    def forward(self, module: Any, batch: torch.Tensor | None) -> None:
        """A top-level training forward (called by the observer): the first one of a micro-batch starts it."""
        if self.clock is None:
            on_cuda = batch is not None and batch.device.type == "cuda"
            self.clock = CudaClock() if on_cuda else Clock()
            self.memory_at_first_forward = current_memory(on_cuda)
        if isinstance(module, DistributedDataParallel):
            if all(ref() is not module for ref in self.ddp_models):
                self.ddp_models.append(weakref.ref(module))
            if self.forward_start is None and module.require_backward_grad_sync:
                if self.window_started:
                    self.synced_backwards += 1
                elif torch.is_grad_enabled():  # as the reducer counts its iterations
                    self.synced_before_window += 1
        if self.forward_start is None:
            self.forward_start = self.clock.mark()

    def _after_backward(self) -> None:
        if self.forward_start is None or self.clock is None:
            return
        if self.window_started:
            end = self.clock.mark()
            self.clock.add(self.totals, "forward_backward", self.forward_start, end)
            if not isinstance(self.clock, CudaClock):
                self.step_fb += end - self.forward_start
        self.forward_start = None

    def _before_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        known = self.observer.optimizers
        if self.clock is not None and (not known or optimizer is known[0]):
            self.optimizer_start = self.clock.mark()
        if self.grad_bytes is None:  # at the first step, while the gradients exist (zero_grad may drop them)
            params = [param for group in optimizer.param_groups for param in group["params"]]
            self.grad_bytes = sum(_bytes(p.grad) for p in params if p.grad is not None)
        if self.ddp_models and self.steps < DDP_READ_FIRST:
            missing = _without_grad(optimizer, self.ddp_models)
            if missing is not None:
                self.params_without_grad = max(self.params_without_grad or 0, missing)

    def step_done(self, micro_batches: int) -> None:
        """The observer counted an optimizer step of `micro_batches` (its step row's: a backward pass for another
        optimizer or on generated samples alone is none): close its optimizer interval and the step itself."""
        if self.clock is None:
            return
        end = self.clock.mark()
        if self.window_started:
            self.steps += 1
            self.micro_batches += micro_batches
            if self.optimizer_start is not None:
                self.clock.add(self.totals, "optimizer", self.optimizer_start, end)
            self.clock.add(self.totals, "step", self.last_step_end, end)
            self.fb_squares += self.step_fb * self.step_fb
            if self.ddp_models and (self.steps <= DDP_READ_FIRST or self.steps % DDP_READ_EVERY == 0):
                self.ddp_stats = self._ddp_stats() or self.ddp_stats
            if self.steps % RESOLVE_EVERY == 0:
                self.clock.resolve(self.totals, final=False)
                self.observer.stream.add(self.row())
        else:
            self.cpu_start = time.process_time()
            self.run_queue = RunQueueWait()
            self.cpu_wait_start = self.run_queue.seconds()
        self.window_started = True
        self.cpu_s = time.process_time() - self.cpu_start
        waited = self.run_queue.seconds() if self.run_queue is not None else None
        if waited is not None and self.cpu_wait_start is not None:
            self.cpu_wait_s = waited - self.cpu_wait_start
        self.last_step_end, self.optimizer_start, self.forward_start, self.step_fb = end, None, None, 0.0

    # -- the row ----------------------------------------------------------------------------------------------

    def finish(self) -> None:
        if self.clock is not None:
            self.clock.resolve(self.totals, final=True)
        self.observer.stream.add(self.row())

    def row(self) -> dict[str, Any]:
        training = {key for key, info in self.observer.loaders.items() if info.get("training")}
        return {
            "kind": "timing",
            "clock": self.clock.source if self.clock is not None else None,
            "steps": self.steps,
            "step_s": self.totals.get("step", 0.0),
            "data_s": sum(seconds for key, seconds in self.loader_wait.items() if key in training),
            "forward_backward_s": self.totals.get("forward_backward", 0.0),
            "forward_backward_squares": self.fb_squares if not isinstance(self.clock, CudaClock) else None,
            "optimizer_s": self.totals.get("optimizer", 0.0),
            "cpu_s": self.cpu_s,
            "cpu_wait_s": self.cpu_wait_s,
            "load_average": os.getloadavg()[0],
            "micro_batches": self.micro_batches,
            "synced_backwards": self.synced_backwards,
            "ddp": self._ddp_stats() or self.ddp_stats,
            "ddp_samples": list(self.reducer_samples.samples) if self.ddp_models else None,
            **peak_memory(self.clock),
            "memory_at_first_forward_bytes": self.memory_at_first_forward,
            **cpu_budget(),
            **model_bytes(self.observer.optimizers),
            "grad_bytes": self.grad_bytes,
            "ddp_params_without_grad": self.params_without_grad,
            "script_collectives": self.observer.collectives.timing(),
            "sharded": sharding(optimizer_params(self.observer.optimizers), self.observer.models.modules()),
        }

    def _ddp_stats(self) -> dict[str, int] | None:
        """The reducer's own timers (ns, averaged over the iterations it sampled) of the first DDP model."""
        for ref in self.ddp_models:
            model = ref()
            if model is not None:
                data = model._get_ddp_logging_data()
                self.reducer_samples.add(data, self.synced_before_window + 1)
                return {key: int(data[key]) for key in DDP_KEYS if isinstance(data.get(key), int)}
        return None


def _without_grad(optimizer: torch.optim.Optimizer, models: list[weakref.ref[DistributedDataParallel]]) -> int | None:
    """Parameters of the DDP models that `optimizer` steps and that have no gradient at its step (a layer whose
    output the loss dropped: the reducer's traversal counts it used); None where it steps none of theirs."""
    held = {id(param) for group in optimizer.param_groups for param in group["params"]}
    found = None
    for ref in models:
        model = ref()
        if model is None:
            continue
        for param in model.parameters():
            if param.requires_grad and id(param) in held:
                found = (found or 0) + (param.grad is None)
    return found


def peak_memory(clock: Clock | None) -> dict[str, Any]:
    """torch.cuda.max_memory_allocated on a CUDA run, else the process's peak resident set (Linux: KiB)."""
    if isinstance(clock, CudaClock):
        return {"peak_memory_bytes": int(torch.cuda.max_memory_allocated()), "memory_source": "cuda_max_allocated"}
    kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"peak_memory_bytes": int(kib) * 1024, "memory_source": "peak_rss"}


def current_memory(on_cuda: bool) -> int | None:
    """torch.cuda.memory_allocated on CUDA, else this process's resident set now (Linux /proc; None elsewhere)."""
    if on_cuda:
        return int(torch.cuda.memory_allocated())
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def cpu_budget() -> dict[str, Any]:
    """Intra-op threads of this process, the cores it may run on (their count and which: the merge takes the union
    over a node's ranks, which may each be pinned to cores of their own), its node, and the job's processes there."""
    try:
        allowed = sorted(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover (not Linux)
        allowed = list(range(os.cpu_count() or 1))
    local, node = os.environ.get("LOCAL_WORLD_SIZE", "1"), os.environ.get("GROUP_RANK", "0")
    return {
        "threads": torch.get_num_threads(),
        "cores": len(allowed),
        "cpus": format_cpu_list(allowed),
        "node": int(node) if node.isdigit() else 0,
        "local_world_size": int(local) if local.isdigit() else 1,
    }


def _local(tensor: torch.Tensor) -> torch.Tensor:
    """This rank's part of a tensor: a DTensor's local shard (FSDP2, tensor parallel), else the tensor itself."""
    to_local = getattr(tensor, "to_local", None)
    return to_local() if callable(to_local) else tensor


def _bytes(tensor: torch.Tensor) -> int:
    local = _local(tensor)
    return local.numel() * local.element_size()


def model_bytes(optimizers: list[torch.optim.Optimizer]) -> dict[str, Any]:
    """Bytes of the first optimizer's parameters and of its state (every tensor it holds) on this rank: a sharded
    run's shards (FSDP2's DTensors: their local part), with the parameters' full size beside them."""
    if not optimizers:
        return {}
    optimizer = optimizers[0]
    params = [param for group in optimizer.param_groups for param in group["params"]]
    state = [
        value for entry in optimizer.state.values() for value in entry.values() if isinstance(value, torch.Tensor)
    ]  # fmt: skip
    full = sum(param.numel() * param.element_size() for param in params)
    return {
        "optimizer": type(optimizer).__name__,
        "optimizer_options": {
            key: value
            for key, value in optimizer.defaults.items()
            if isinstance(value, bool | int | float | str) and key in ("momentum", "amsgrad", "foreach", "fused")
        },
        "param_count": sum(_local(param).numel() for param in params),
        "param_bytes": sum(_bytes(param) for param in params),
        "full_param_bytes": full if any(_local(param) is not param for param in params) else None,
        "optimizer_state_bytes": sum(_bytes(value) for value in state),
        "param_dtype": str(params[0].dtype).removeprefix("torch.") if params else None,
    }
