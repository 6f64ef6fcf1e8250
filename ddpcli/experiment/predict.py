"""Predict a planned run's step time, throughput and memory per device from one finished run. Pure.

The cost model, term by term, per optimizer step of a run with world size W, per-device batch B and accumulation A,
from a baseline that ran W0, B0, A0 (its time breakdown's median rank, ddpcli.rundir.timing):

    compute   = baseline compute per sample x B x A x contention
    data      = baseline data wait per sample x B x A x contention
    optimizer = baseline optimizer step x contention (the same parameters at every world size)
    other     = baseline other x contention
    comm      = all-reduces per step x one all-reduce of the gradients at W (measured: ddpcli.launch.probe, or
                the ring formula 2 (W-1)/W x bytes / link bandwidth), none hidden behind backward, + the wait
                for the slowest of W ranks: each step's compute varies (the baseline's standard deviation over
                steps, as a fraction of its mean, cv), and every rank waits for the last, so on average
                E[max of W] - mean = k(W) x cv x compute (k: the expected maximum of W standard normals,
                0.56 for 2, 1.03 for 4); 0 at W = 1
    contention (CPU only) = p0 / p, the cores' worth of CPU one process gets: p0 measured on the baseline (its CPU
                seconds / wall seconds), p = T x min(1, cores / (processes x T + E)) for T threads per process,
                where E, the cores' worth of other work, is measured on this host just before (busy cores in
                /proc/stat while none of ours runs: a one-process baseline on two cores leaves a core to the
                others and looks alone, two processes do not), else inferred from p0: processes that share
                cores take turns, ours and everyone else's.
                1 on GPUs. Linear in samples: a fixed cost per forward (small batches) is scaled too.

All-reduces per step: the baseline's per micro-batch (1 per micro-batch without no_sync, 1/A with it) x A when the
baseline was DDP; else 1 (the script is assumed to use no_sync). samples/s = W x B x A / step; speedup against the
baseline's own samples/s from its breakdown; scaling efficiency = speedup / (W / W0).

Memory per device: parameters, gradients and optimizer state as the baseline held them (exact bytes), DDP's bucket
copy of the gradients (when W > 1 and gradient_as_bucket_view is off), activations = the baseline's peak minus
what it held at its first forward and minus the static terms, scaled by B / B0, and the runtime (the process
before its first forward, less the parameters: the Python and torch runtime on CPU, the batch on CUDA).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the all-reduce probe (a worker) imports this module: no pydantic at import
    from ddpcli.rundir.record import Observed

DDP_FIRST_BUCKET_BYTES = 1024 * 1024  # torch.distributed._DEFAULT_FIRST_BUCKET_BYTES
TERMS = ("data_s", "compute_s", "comm_s", "optimizer_s", "other_s")


class NoBaseline(ValueError):
    """The run cannot serve as a baseline (not observed, or no step was timed)."""


@dataclass(frozen=True)
class Target:
    """What the cost model needs of a planned run."""

    world_size: int
    nproc_per_node: int
    per_device_batch_size: int
    grad_accum_steps: int
    threads: int | None  # OMP_NUM_THREADS of its env, else None (torchrun: 1 when nproc > 1)


@dataclass(frozen=True)
class Prediction:
    step_time_s: float
    samples_per_s: float
    speedup: float
    scaling_efficiency: float
    memory_bytes: int
    terms: dict[str, float]
    memory: dict[str, int]
    all_reduces_per_step: float
    comm_source: str
    assumptions: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {
            "predicted_step_time_s": self.step_time_s,
            "predicted_samples_per_s": self.samples_per_s,
            "predicted_speedup": self.speedup,
            "predicted_scaling_efficiency": self.scaling_efficiency,
            "predicted_memory_bytes": self.memory_bytes,
            "prediction": {
                "step_terms_s": self.terms,
                "memory_terms_bytes": self.memory,
                "all_reduces_per_step": self.all_reduces_per_step,
                "comm_source": self.comm_source,
                "assumptions": self.assumptions,
            },
        }

    def note(self) -> str:
        parts = " + ".join(f"{key.removesuffix('_s')} {value * 1000:.3g}" for key, value in self.terms.items())
        return (
            f"Predicted: {self.step_time_s * 1000:.3g} ms a step ({parts} ms), {self.samples_per_s:.4g} samples/s, "
            f"{self.speedup:.2f}x the baseline ({self.scaling_efficiency:.0%} efficiency), "
            f"{self.memory_bytes / 2**20:.1f} MiB per device; comm: {self.comm_source}."
        )


@dataclass(frozen=True)
class Baseline:
    """The numbers of one finished run the model starts from."""

    world_size: int
    nproc_per_node: int
    per_device_batch_size: int
    grad_accum_steps: int
    device: str
    threads: int
    cores: int
    step: dict[str, float]  # TERMS and step_s, of the median rank
    all_reduces_per_micro_batch: float | None  # None: not DDP
    param_bytes: int
    grad_bytes: int
    optimizer_state_bytes: int
    optimizer: str | None
    buckets_are_views: bool
    memory_at_first_forward: int | None
    peak_memory: int | None
    cpu_share: float | None = None  # the cores' worth the baseline's process got (CPU seconds / wall seconds)
    compute_cv: float | None = None  # standard deviation / mean over steps of forward + backward
    load_average: float | None = None  # the host's 1-minute load average when the baseline ended

    @property
    def samples_per_s(self) -> float:
        return self.world_size * self.per_device_batch_size * self.grad_accum_steps / self.step["step_s"]

    @property
    def gradient_bytes(self) -> int:
        return self.grad_bytes or self.param_bytes


def baseline_from(observed: Observed | None, timing_row: dict[str, Any]) -> Baseline:
    """The baseline from a run's `observed` and its rank 0's last `timing` row (threads, cores, processes)."""
    if observed is None or observed.time_breakdown is None or observed.model_state is None:
        raise NoBaseline("it was not observed, or it timed no optimizer step after its first")
    median, state = observed.time_breakdown.median, observed.model_state
    if not median.step_s or not observed.per_device_batch_size or state.param_bytes is None:
        raise NoBaseline("its time breakdown or its batch is unknown")
    first = observed.time_breakdown.ranks[0]
    syncs = first.all_reduces_per_step
    micro = first.micro_batches_per_step or float(observed.grad_accum_steps or 1)
    return Baseline(
        world_size=observed.world_size or 1,
        nproc_per_node=_positive(timing_row.get("local_world_size"), 1),
        per_device_batch_size=observed.per_device_batch_size,
        grad_accum_steps=observed.grad_accum_steps or 1,
        device=observed.device or "cpu",
        threads=_positive(timing_row.get("threads"), 1),
        cores=_positive(timing_row.get("cores"), 1),
        step={"step_s": median.step_s, **{key: getattr(median, key) or 0.0 for key in TERMS}},
        all_reduces_per_micro_batch=syncs / micro if syncs is not None and micro else None,
        param_bytes=state.param_bytes,
        grad_bytes=state.grad_bytes or 0,
        optimizer_state_bytes=state.optimizer_state_bytes or 0,
        optimizer=state.optimizer,
        buckets_are_views=bool(state.gradient_as_bucket_view),
        memory_at_first_forward=state.memory_at_first_forward_bytes,
        peak_memory=state.peak_memory_bytes,
        cpu_share=median.cpu_share,
        load_average=first.load_average,
        compute_cv=_cv(median.forward_backward_sd_s, (median.compute_s or 0.0) + (median.comm_s or 0.0)),
    )


def _cv(sd: float | None, mean: float) -> float | None:
    return sd / mean if sd is not None and mean > 0 else None


# E[max of n standard normals] for n = 1..8; beyond, Blom's approximation (within 1% there).
_EXPECTED_MAX = (0.0, 0.5642, 0.8463, 1.0294, 1.1630, 1.2672, 1.3522, 1.4236)


def expected_max(n: int) -> float:
    """The expected maximum of n independent standard normal variables."""
    if n <= len(_EXPECTED_MAX):
        return _EXPECTED_MAX[max(n, 1) - 1]
    return statistics.NormalDist().inv_cdf((n - 0.375) / (n + 0.25))


def _positive(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else default


def parallelism(device: str, threads: int, processes: int, cores: int) -> float:
    """The cores' worth of work one process gets: min(threads, cores / processes) on CPU; 1 on an accelerator."""
    return 1.0 if device != "cpu" else min(float(threads), cores / processes)


def ring_allreduce_s(size_bytes: int, world: int, link_gbps: float, latency_s: float = 0.0) -> float:
    """Ring all-reduce (Patarasuk and Yuan 2009): 2 (n-1)/n x S / B + 2 (n-1) alpha."""
    if world <= 1:
        return 0.0
    return 2 * (world - 1) / world * size_bytes / (link_gbps * 1e9 / 8) + 2 * (world - 1) * latency_s


def ddp_bucket_sizes(size_bytes: int, cap_bytes: int = 25 * 1024 * 1024) -> list[int]:
    """The bucket sizes DDP all-reduces gradients of `size_bytes` in: a small first bucket, then up to the cap."""
    sizes, left = [], size_bytes
    first = min(left, DDP_FIRST_BUCKET_BYTES)
    if first:
        sizes.append(first)
        left -= first
    while left > 0:
        sizes.append(min(left, cap_bytes))
        left -= sizes[-1]
    return sizes


def cpu_share(threads: int, processes: int, cores: int, others: float) -> float:
    """The cores' worth one process gets when `processes` processes of `threads` busy threads share `cores` with
    `others` cores' worth of other work: threads x min(1, cores / (our threads + others))."""
    return threads * min(1.0, cores / (processes * threads + others))


def other_load(baseline: Baseline) -> float:
    """Runnable threads of other work the baseline shared its cores with, inferred from the share it got (0 when it
    got what its threads could use: it was limited by its threads, not by the cores)."""
    alone = cpu_share(baseline.threads, baseline.nproc_per_node, baseline.cores, 0.0)
    if not baseline.cpu_share or baseline.cpu_share >= 0.9 * alone:
        return 0.0
    return max(baseline.threads * baseline.cores / baseline.cpu_share - baseline.nproc_per_node * baseline.threads, 0.0)


def other_work(baseline: Baseline, busy_cores: float | None) -> float:
    """Cores' worth of other work the planned run will share the cores with: what other processes use now (busy
    cores measured while none of ours runs), else what the baseline met (inferred from its share of a core)."""
    return busy_cores if busy_cores is not None else other_load(baseline)


def contention_of(baseline: Baseline, target: Target, busy: float | None = None) -> tuple[float, list[str]]:
    """How many times slower the planned run's host work is than the baseline's (module docstring), and why.
    `busy`: cores' worth of CPU other processes use on this host now, else inferred from the baseline's share."""
    if baseline.device != "cpu":
        return 1.0, []
    threads = target.threads or (1 if target.nproc_per_node > 1 else baseline.threads)
    others = other_work(baseline, busy)
    before = cpu_share(baseline.threads, baseline.nproc_per_node, baseline.cores, others)
    after = cpu_share(threads, target.nproc_per_node, baseline.cores, others)
    factor = (baseline.cpu_share or before) / after
    why = []
    if abs(factor - 1) > 0.01:
        why.append(
            f"CPU contention x{factor:.3g}: {target.nproc_per_node} x {threads}-thread processes on "
            f"{baseline.cores} cores, each about {after:.2f} of a core, next to {others:.2f} cores of other work ("
            + ("measured now" if busy is not None else "inferred from the baseline's share")
            + f"; the baseline got {baseline.cpu_share or before:.2f} of a core)"
        )
    if target.nproc_per_node * threads > baseline.cores:
        why.append(
            "oversubscribed (processes x threads > cores): every step waits for each process to be scheduled, "
            "which this model leaves out: expect a slower run than predicted"
        )
    return factor, why


def predict(
    baseline: Baseline, target: Target, allreduce_s: float, comm_source: str, busy: float | None = None
) -> Prediction:
    """The planned run's step, term by term, its throughput and its memory per device (module docstring). `busy`:
    cores' worth of CPU other processes use on this host now (a CPU run here), else the baseline's share tells."""
    contention, assumptions = contention_of(baseline, target, busy)
    samples, samples0 = (
        target.per_device_batch_size * target.grad_accum_steps,
        (baseline.per_device_batch_size * baseline.grad_accum_steps),
    )
    if baseline.all_reduces_per_micro_batch is None:
        syncs = 1.0 if target.world_size > 1 else 0.0
        if target.world_size > 1:
            assumptions.append("one all-reduce per optimizer step (the baseline had no DDP model to tell)")
    else:
        syncs = max(baseline.all_reduces_per_micro_batch * target.grad_accum_steps, 1.0)
    compute = baseline.step["compute_s"] / samples0 * samples * contention
    wait = 0.0
    if target.world_size > 1 and baseline.compute_cv is not None:
        wait = expected_max(target.world_size) * baseline.compute_cv * compute
        assumptions.append(f"waiting for the slowest of {target.world_size} ranks: {wait * 1000:.3g} ms a step "
                           f"(the baseline's compute varied by {baseline.compute_cv:.0%} between steps)")  # fmt: skip
    terms = {
        "data_s": baseline.step["data_s"] / samples0 * samples * contention,
        "compute_s": compute,
        "comm_s": syncs * allreduce_s + wait if target.world_size > 1 else 0.0,
        "optimizer_s": baseline.step["optimizer_s"] * contention,
        "other_s": baseline.step["other_s"] * contention,
    }
    step = sum(terms.values())
    samples_per_s = target.world_size * samples / step
    speedup = samples_per_s / baseline.samples_per_s
    memory = predicted_memory(baseline, target)
    return Prediction(
        step_time_s=step,
        samples_per_s=samples_per_s,
        speedup=speedup,
        scaling_efficiency=speedup / (target.world_size / baseline.world_size),
        memory_bytes=sum(memory.values()),
        terms=terms,
        memory=memory,
        all_reduces_per_step=syncs,
        comm_source=comm_source,
        assumptions=assumptions,
    )


def predicted_memory(baseline: Baseline, target: Target) -> dict[str, int]:
    """Bytes per device, term by term (module docstring)."""
    grads = baseline.gradient_bytes
    baseline_buckets = grads if baseline.world_size > 1 and not baseline.buckets_are_views else 0
    buckets = grads if target.world_size > 1 and not baseline.buckets_are_views else 0
    terms = {
        "params": baseline.param_bytes,
        "grads": grads,
        "optimizer_state": baseline.optimizer_state_bytes,
        "ddp_buckets": buckets,
    }
    if baseline.memory_at_first_forward is not None and baseline.peak_memory is not None:
        held = baseline.memory_at_first_forward + grads + baseline.optimizer_state_bytes + baseline_buckets
        activations = max(baseline.peak_memory - held, 0)
        scale = target.per_device_batch_size / baseline.per_device_batch_size
        terms["activations"] = round(activations * scale)
        terms["runtime"] = max(baseline.memory_at_first_forward - baseline.param_bytes, 0)
    return terms


def static_bytes(memory: dict[str, int]) -> int:
    """Parameters, gradients and optimizer state: what the model and optimizer hold whatever the batch."""
    return memory["params"] + memory["grads"] + memory["optimizer_state"]
