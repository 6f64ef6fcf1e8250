"""Predict a planned run's step time, throughput and memory per device from finished runs. Pure.

The cost model, term by term, per optimizer step of a run with world size W, per-device batch B and accumulation A,
from a baseline that ran W0, B0, A0 (its time breakdown's median rank, ddpcli.rundir.timing), every host term
first scaled by the baseline's median step / mean step (robust_scale, ddpcli.prediction.baseline: one
noisy spell of the baseline does not decide the prediction; 1 on a CPU baseline with its share of a core known,
where the contention term, in CPU seconds, does that):

    compute   = (fixed + per_sample x B) x A x contention (ddpcli.prediction.compute: fixed = 0, linear
                in the batch, unless finished runs of other per-device batches measured the line)
    data      = baseline data wait per sample x B x A x contention
    optimizer = baseline optimizer step x contention (the same parameters at every world size)
    other     = baseline other x contention
    comm      = all-reduces per step x one all-reduce of the gradients at W (measured: ddpcli.launch.probe, after
                the CPU work a rank does before it and from the last rank's arrival, as a step meets it; or
                the ring formula 2 (W-1)/W x bytes / link bandwidth), none hidden behind backward, + the wait
                for the slowest of W ranks (ddpcli.prediction.comm): the expected excess of the maximum
                of W steps over their mean, from the baseline's own step durations (else its compute's standard
                deviation), or from the busy-loop probe's rounds at W processes, whichever is larger, as a
                fraction of data + compute; 0 at W = 1
    contention (CPU only) = the baseline's share of a core / the planned process's share
                (ddpcli.prediction.contention: measured by a busy-loop probe when possible). 1 on GPUs.

All-reduces per step: the baseline's per micro-batch (1 per micro-batch without no_sync, 1/A with it) x A when the
baseline was DDP; else 1 (the script is assumed to use no_sync). samples/s = W x B x A / step; speedup against the
baseline's own samples/s from its breakdown; scaling efficiency = speedup / (W / W0).

Memory per device: parameters, gradients and optimizer state as the baseline held them (exact bytes), DDP's bucket
copy of the gradients (when W > 1 and gradient_as_bucket_view is off), activations = the baseline's peak minus
what it held at its first forward and minus the static terms, scaled by B / B0, and the runtime (the process
before its first forward, less the parameters: the Python and torch runtime on CPU, the batch on CUDA).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ddpcli.prediction.baseline import TERMS, Baseline, NoBaseline, baseline_from
from ddpcli.prediction.comm import (
    DDP_FIRST_BUCKET_BYTES,
    all_reduces_per_step,
    ddp_bucket_sizes,
    excess_of_max,
    expected_max,
    ring_allreduce_s,
)
from ddpcli.prediction.compute import ComputeModel, compute_model
from ddpcli.prediction.contention import HostNow, contention_of, target_threads
from ddpcli.prediction.target import Target

__all__ = [  # what predict offers; the parts live in baseline, comm, compute, contention, target
    "DDP_FIRST_BUCKET_BYTES", "TERMS", "Baseline", "ComputeModel", "HostNow", "NoBaseline", "Prediction", "Target",
    "baseline_from", "compute_model", "ddp_bucket_sizes", "excess_of_max", "expected_max", "predict",
    "predicted_memory", "ring_allreduce_s", "static_bytes",
]  # fmt: skip


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
    compute: ComputeModel | None = None  # the compute line the prediction used
    baseline_step_scale: float = 1.0  # the baseline's median step / mean step, applied to its host terms
    slowest_rank_wait_s: float = 0.0  # the part of comm_s that waits for the slowest rank
    cpu_contention: float = 1.0  # how many times slower host work is than the baseline's (1 on GPUs)
    comm_probe: dict[str, Any] | None = None  # what the all-reduce probe measured (None: no probe, world size 1)

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
                "compute_model": self.compute.as_json() if self.compute is not None else None,
                "baseline_step_scale": self.baseline_step_scale,
                "slowest_rank_wait_s": self.slowest_rank_wait_s,
                "cpu_contention": self.cpu_contention,
                "comm_probe": self.comm_probe,
            },
        }

    def note(self) -> str:
        parts = " + ".join(f"{key.removesuffix('_s')} {value * 1000:.3g}" for key, value in self.terms.items())
        return (
            f"Predicted: {self.step_time_s * 1000:.3g} ms a step ({parts} ms), {self.samples_per_s:.4g} samples/s, "
            f"{self.speedup:.2f}x the baseline ({self.scaling_efficiency:.0%} efficiency), "
            f"{self.memory_bytes / 2**20:.1f} MiB per device; comm: {self.comm_source}"
            + (f"; compute {self.compute.source.split(':')[0]}." if self.compute is not None else ".")
        )


def predict(
    baseline: Baseline,
    target: Target,
    allreduce_s: float,
    comm_source: str,
    busy: float | None = None,
    host: HostNow | None = None,
    compute: ComputeModel | None = None,
    comm_probe: dict[str, Any] | None = None,
) -> Prediction:
    """The planned run's step, term by term, its throughput and its memory per device (module docstring). `host`:
    what this host gives a run now (`busy`: just its busy cores); `compute`: the compute line (else linear from
    the baseline alone); `comm_probe`: what measured `allreduce_s` (ddpcli.launch.probe.AllReduceProbe.as_json)."""
    host = host or HostNow(busy_cores=busy)
    contention, assumptions = contention_of(baseline, target, host)
    compute_line = compute or compute_model(baseline)
    scale = baseline.robust_scale
    if abs(scale - 1) > 0.01:
        assumptions.append(f"the baseline's terms x{scale:.3g}: its median step over its mean, over "
                           f"{len(baseline.step_durations)} steady steps (warm-up left out)")  # fmt: skip
    if compute_line.fixed_s == 0:
        assumptions.append(f"compute {compute_line.source}")
    samples, samples0 = (
        target.per_device_batch_size * target.grad_accum_steps,
        (baseline.per_device_batch_size * baseline.grad_accum_steps),
    )
    syncs = all_reduces_per_step(baseline, target)
    if baseline.all_reduces_per_micro_batch is None and target.world_size > 1:
        assumptions.append("one all-reduce per optimizer step (the baseline had no DDP model to tell)")
    compute_s = compute_line.per_micro_batch(target.per_device_batch_size) * target.grad_accum_steps * contention
    data = baseline.step["data_s"] * scale / samples0 * samples * contention
    if comm_probe is not None and target.world_size > 1:
        assumptions.append(probe_assumption(comm_probe))
    wait = slowest_rank_wait(baseline, target, host, data, compute_s, assumptions)
    terms = {
        "data_s": data,
        "compute_s": compute_s,
        "comm_s": syncs * allreduce_s + wait if target.world_size > 1 else 0.0,
        "optimizer_s": baseline.step["optimizer_s"] * scale * contention,
        "other_s": baseline.step["other_s"] * scale * contention,
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
        compute=compute_line,
        baseline_step_scale=scale,
        slowest_rank_wait_s=wait,
        cpu_contention=contention,
        comm_probe=comm_probe,
    )


def probe_assumption(probe: dict[str, Any]) -> str:
    """What the all-reduce probe measured, as an assumption line."""
    seconds, idle, work = probe["seconds"], probe["idle_seconds"], probe["work_s"]
    if work <= 0:
        return f"the all-reduce: {seconds * 1000:.3g} ms, probed idle from the last rank's arrival"
    return (f"the all-reduce as a step meets it: {seconds * 1000:.3g} ms, probed after {work * 1000:.3g} ms of CPU "
            f"work a rank (the compute before each all-reduce) from the last rank's arrival ({idle * 1000:.3g} ms "
            "idle); the wait for the last rank is the separate term below")  # fmt: skip


def slowest_rank_wait(
    baseline: Baseline, target: Target, host: HostNow, data: float, compute: float, assumptions: list[str]
) -> float:
    """Seconds a step waits for the slowest of the target's ranks (module docstring), with the reason appended."""
    world = target.world_size
    if world <= 1:
        return 0.0
    if baseline.step_durations:
        fraction = excess_of_max(baseline.step_durations, world)
        wait, why = fraction * (data + compute), f"the baseline's {len(baseline.step_durations)} steady steps"
    elif baseline.compute_cv is not None:
        wait = expected_max(world) * baseline.compute_cv * compute
        why = f"the baseline's compute varied by {baseline.compute_cv:.0%} between steps"
    else:
        wait, why = 0.0, ""
    probed = host.waits.get((target.nproc_per_node, target_threads(baseline, target)))
    if probed is not None and probed * (data + compute) > wait:
        wait = probed * (data + compute)
        why = f"busy-loop rounds of {target.nproc_per_node} processes on this host just before: {probed:.1%} a round"
    if wait > 0:
        assumptions.append(f"waiting for the slowest of {world} ranks: {wait * 1000:.3g} ms a step ({why})")
    return wait


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
