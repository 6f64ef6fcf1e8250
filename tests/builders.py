"""Run directories, observation files and timing rows made by hand, for the tests that read them (no launch)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ddpcli import compare as cmp
from ddpcli.launch.argv import LaunchSpec
from ddpcli.prediction.predict import (
    Baseline,
    Target,
    baseline_from,
)
from ddpcli.rundir.record import Observed, RunRecord
from ddpcli.rundir.timing import model_state, time_breakdown


def make_run(
    root: Path,
    name: str,
    *,
    run_id: str = "20260101T000000Z-aaaaaa",
    nproc: int = 1,
    per_device: int = 16,
    accum: int = 1,
    lr: float = 0.05,
    steps: int = 100,
    planned_steps: int | None = None,
    step_time: float = 0.016,
    loss: Callable[[int], float | None] = lambda step: 1.0 / step,
    status: str = "completed",
    seed: int = 0,
    scaling: str | None = None,
    argv: list[str] | None = None,
    experiment_file: str | None = None,
    params: dict[str, Any] | None = None,
    extra: dict[str, Any] | None = None,
    metrics_tail: str = "",
) -> Path:
    """A run directory as `ddpcli launch` writes it: run.json, one metrics row per step, optional final_params.pt.

    Row k (1-based, up to `steps`) has samples k x global batch, time k x step_time and loss(k); the plan says
    `planned_steps` (default: `steps`).
    """
    run_dir = root / name / run_id
    run_dir.mkdir(parents=True)
    global_batch = per_device * accum * nproc
    plan = {
        "name": name,
        "nnodes": 1,
        "nproc_per_node": nproc,
        "world_size": nproc,
        "per_device_batch_size": per_device,
        "grad_accum_steps": accum,
        "global_batch_size": global_batch,
        "batch_scale": 1.0,
        "scaling": scaling or ("baseline" if name == "1x16" else "linear"),
        "lr": lr,
        "warmup_steps": 0,
        "samples_per_rank": None,
        "padded_samples": None,
        "dropped_samples": None,
        "steps_per_epoch": None,
        "total_steps": planned_steps or steps,
        "notes": [],
        "min_nnodes": 1,
        "seed": seed,
        "dataset_size": None,
        "epochs": None,
        "max_steps": planned_steps or steps,
        "optimizer": "sgd",
        "drop_last": False,
    }
    failed = status == "failed"
    record = RunRecord.model_validate(
        {
            "run_id": run_id,
            "name": name,
            "status": status,
            "plan": plan,
            "argv": argv if argv is not None else ["torchrun", f"--nproc-per-node={nproc}", "-m", "train"],
            "started_at": "2026-01-01T00:00:00+00:00",
            "ended_at": "2026-01-01T00:00:10+00:00",
            "wall_time_s": steps * step_time + 2.0,
            "exit_code": 1 if failed else 0,
            "failed_ranks": [{"rank": 1, "exit_code": 1, "error": "RuntimeError: boom\nmore", "log_tail": ""}]
            if failed
            else [],
            "hostname": "test",
            "python": "3.11",
            "torch_version": "2.13.0",
            "experiment_file": experiment_file,
            **(extra or {}),
        },
        strict=True,  # a fixture that drifts from the record's model fails here, not in the code under test
    )
    record.write(run_dir / "run.json")
    lines = [
        json.dumps({"step": k, "samples": k * global_batch, "time": k * step_time, "loss": loss(k), "lr": lr})
        for k in range(1, steps + 1)
    ]
    (run_dir / "metrics.jsonl").write_text("".join(f"{line}\n" for line in lines) + metrics_tail, encoding="utf-8")
    if params is not None:
        import torch

        torch.save(params, run_dir / "final_params.pt")
    return run_dir


def state(**tensors: list[float]) -> dict[str, Any]:
    import torch

    return {key: torch.tensor(value, dtype=torch.float32) for key, value in tensors.items()}


def records(*run_dirs: Path) -> list[cmp.ComparedRun]:
    return [cmp.read_run_record(run_dir) for run_dir in run_dirs]


def row_of(comparison: cmp.Comparison, label: str) -> cmp.ComparisonRow:
    return next(row for row in comparison.rows if row.label == label)


def write_rank(run_dir: Path, rank: int, rows: list[dict[str, Any]]) -> None:
    folder = run_dir / "observed"
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / f"rank-{rank}.jsonl").open("a", encoding="utf-8") as handle:
        handle.writelines(json.dumps(row) + "\n" for row in rows)


def steps(count: int, *, per_device: int, accum: int = 1, lr: float = 0.1, loss: float = 1.0, first: int = 1) -> list:
    return [
        {"kind": "step", "step": step, "micro_batches": accum, "samples": per_device * accum, "loss": loss / step,
         "lr": [lr * min(1.0, step / 2)], "time": 0.01 * step}
        for step in range(first, first + count)
    ]  # fmt: skip


def run_rows(world: int, *, norms: int = 0, synced: int = 0) -> dict[str, Any]:
    return {"kind": "run", "world_size": world, "backend": "gloo", "device": "cpu", "ddp": world > 1,
            "batchnorm_layers": norms, "batchnorm_synchronized": synced, "amp": None}  # fmt: skip


def end(sampler: str = "DistributedSampler", epochs: list[int] | None = None) -> dict[str, Any]:
    loader = {"sampler": sampler, "distributed_sampler": sampler == "DistributedSampler", "iterations": 1,
              "epochs": epochs or [0], "training": True, "batch_size": 8}  # fmt: skip
    return {"kind": "end", "steps": 0, "loaders": [loader], "amp": None}


MS = 1_000_000  # ns


def row(
    steps: int = 10, step: float = 1.0, data: float = 0.1, fb: float = 0.6, opt: float = 0.1, **extra: Any
) -> dict[str, Any]:
    return {"kind": "timing", "clock": "host", "steps": steps, "step_s": step, "data_s": data,
            "forward_backward_s": fb, "optimizer_s": opt, "micro_batches": steps, "synced_backwards": 0,
            "ddp": None, "peak_memory_bytes": 1000, "memory_source": "peak_rss", "threads": 1, "cores": 2,
            "local_world_size": 1, **extra}  # fmt: skip


def ddp(comm_ms: float, overlap_ms: float, **extra: Any) -> dict[str, int]:
    return {"avg_backward_comm_time": int(comm_ms * MS), "avg_backward_compute_comm_overlap_time": int(overlap_ms * MS),
            "iteration": 10, "find_unused_parameters": 0, "unused_parameter_size": 0, **extra}  # fmt: skip


PARAMS = 4 * 296_449  # the knob script's MLP in float32


def timing_row(**extra: object) -> dict[str, object]:
    """A 1-process CPU baseline: 10 timed steps of 50 ms: 5 ms data, 40 ms compute, 2 ms optimizer, 3 ms other; 300
    MiB at the first forward (parameters included), a peak 64 MiB of activations above that and the gradients and
    momentum."""
    return row(step=0.5, data=0.05, fb=0.4, opt=0.02, param_bytes=PARAMS, grad_bytes=PARAMS,
               optimizer_state_bytes=PARAMS, optimizer="SGD", memory_at_first_forward_bytes=300 * 2**20,
               peak_memory_bytes=300 * 2**20 + 2 * PARAMS + 64 * 2**20, cpu_s=0.5, **extra)  # fmt: skip


def observed_of(timing: dict[str, object], batch: int = 64) -> Observed:
    rows = {0: timing}
    return Observed(world_size=1, per_device_batch_size=batch, grad_accum_steps=1, device="cpu",
                    time_breakdown=time_breakdown(rows), model_state=model_state(rows))  # fmt: skip


def baseline(**extra: object) -> Baseline:
    return baseline_from(observed_of(timing_row(**extra)), timing_row(**extra))


def target(world: int = 2, batch: int = 64, accumulation: int = 1, threads: int | None = 1) -> Target:
    return Target(world, world, batch, accumulation, threads)


def write_baseline(run_dir: Path) -> None:
    (run_dir / "observed").mkdir(parents=True)
    timing = {"kind": "timing", **timing_row()}
    (run_dir / "observed" / "rank-0.jsonl").write_text(json.dumps(timing) + "\n")
    RunRecord(run_id=run_dir.name, name="base", status="completed", observed=observed_of(timing)).write(
        run_dir / "run.json"
    )


# What an observer writes: one step row per optimizer step into observed/rank-0.jsonl.
WRITER = """
import json, os, sys
folder = os.path.join(os.environ["DDPCLI_RUN_DIR"], "observed")
os.makedirs(folder, exist_ok=True)
with open(os.path.join(folder, "rank-0.jsonl"), "w") as handle:
    for step in range(1, int(sys.argv[1]) + 1):
        row = {"kind": "step", "step": step, "micro_batches": 1, "samples": 4, "loss": 1.0 / step, "lr": [0.1],
               "time": step * 0.01}
        handle.write(json.dumps(row) + "\\n")
"""


class Reporter:
    def __init__(self) -> None:
        self.ended: list[str] = []

    def run_started(self, spec: LaunchSpec) -> None:
        pass

    def metrics(self, spec: LaunchSpec, rows: list[dict[str, Any]]) -> None:
        pass

    def run_ended(self, spec: LaunchSpec, record: RunRecord) -> None:
        self.ended.append(record.status)
