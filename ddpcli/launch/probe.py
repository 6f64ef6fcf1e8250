"""The communication term of a prediction, measured: one DDP-style all-reduce of a model's gradients at a world size,
timed by a short job on this machine (ddpcli.worker.allreduce_probe: gloo's ranks forked from one process, nccl's
under torchrun) as a step meets it (after each rank's CPU work, from the last rank's arrival; on CUDA idle),
cached per version, backend, world size, size, host and
work in <cache>/allreduce.json (DDPCLI_CACHE_DIR, else $XDG_CACHE_HOME/ddpcli, else ~/.cache/ddpcli). Version 2:
the keys of version 1 (idle rounds from a barrier, 2.6 ms where a busy step saw 4.5 ms) are not reused. Then the
prediction of each planned run from a finished baseline (ddpcli.prediction.predict). No torch imported here.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ddpcli.errors import UserError
from ddpcli.experiment.resolved import ResolvedRun
from ddpcli.jsonvalues import read_json, write_json_atomic
from ddpcli.launch import cpu_probe
from ddpcli.launch.probe_run import run_probe
from ddpcli.prediction.comm import work_before
from ddpcli.prediction.contention import target_threads
from ddpcli.prediction.predict import (
    Baseline,
    HostNow,
    NoBaseline,
    Prediction,
    Target,
    baseline_from,
    compute_model,
    predict,
    ring_allreduce_s,
)
from ddpcli.rundir.observations import RankObservation, main_rank, read_observations
from ddpcli.rundir.record import RunRecord

PROBE_TIMEOUT_S = 120  # torchrun's start, the workers' and the rendezvous, for a small model
# The probe runs 2 x (3 warm-up + 15 timed) all-reduces (ddpcli.worker.allreduce_probe). A 400 MB gloo all-reduce
# took 0.26 s on a 2-core host (0.7 s a GiB): a ~1B-parameter baseline came near the flat limit. Four times that
# per GiB all-reduced is allowed on top.
PROBE_ALLREDUCES = 36
PROBE_S_PER_GIB = 2.8
PROBE_ROUNDS = 12  # rounds of the busy-loop CPU probe
MAX_STEP_TIMES = 20_000  # steps of the baseline whose durations are read


def cache_file() -> Path:
    root = os.environ.get("DDPCLI_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "ddpcli"
    )
    return Path(root) / "allreduce.json"


CACHE_VERSION = "v2"  # v2: busy rounds timed from the last rank's arrival (v1: idle rounds after a barrier)


@dataclass(frozen=True)
class AllReduceProbe:
    """One all-reduce as the probe measured it: `seconds` after `work_s` of CPU work a rank (idle when 0), from
    the last rank's arrival; `idle_seconds` the same all-reduce in the idle rounds interleaved with them."""

    seconds: float
    idle_seconds: float
    work_s: float

    def as_json(self) -> dict[str, object]:
        return {"seconds": self.seconds, "idle_seconds": self.idle_seconds, "work_s": self.work_s,
                "timed_from": "last_arrival"}  # fmt: skip

    def describe(self) -> str:
        if self.work_s <= 0:
            return f"{self.seconds * 1000:.3g} ms idle, from the last rank's arrival"
        return (f"{self.seconds * 1000:.3g} ms after {self.work_s * 1000:.3g} ms of CPU work a rank, from the last "
                f"rank's arrival ({self.idle_seconds * 1000:.3g} ms idle)")  # fmt: skip


def measured_allreduce(
    backend: str, world: int, size_bytes: int, work_s: float = 0.0, run: Callable[..., object] = run_probe
) -> AllReduceProbe:
    """One all-reduce of `size_bytes` over `world` local processes after `work_s` of CPU work each (cached; 0 for
    one process)."""
    if world <= 1:
        return AllReduceProbe(0.0, 0.0, work_s)
    key = f"{CACHE_VERSION}/{backend}/{world}/{size_bytes}/{socket.gethostname()}/{work_s * 1000:g}ms"
    path = cache_file()
    cache = _read_cache(path)
    found = _cached(cache.get(key))
    if found is not None:
        return found
    with tempfile.TemporaryDirectory(prefix="ddpcli-probe-") as folder:
        out = Path(folder) / "probe.json"
        command = [*probe_starter(backend, world), "--bytes", str(size_bytes), "--backend", backend,
                   "--work", repr(work_s), "--out", str(out)]  # fmt: skip
        env = cpu_probe.env_importing_ddpcli({**os.environ, "OMP_NUM_THREADS": "1"})
        what = f"the all-reduce probe ({backend}, {world} processes)"
        result = run(
            command, env=env, timeout=probe_timeout_s(size_bytes), what=what
        )  # nothing of it outlives this call
        found = _cached(json.loads(out.read_text())) if out.exists() else None
        if found is None:
            tail = (getattr(result, "stderr", "") or "").strip().splitlines()[-1:] or ["no output"]
            raise UserError(f"{what} failed: {tail[0]}")
    cache[key] = found.as_json()
    with contextlib.suppress(OSError):  # an unwritable cache only costs the next probe
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(path, cache)
    return found


def probe_starter(backend: str, world: int) -> list[str]:
    """The probe's command up to its own arguments: gloo's ranks forked from one process that imported torch once
    (ddpcli.worker.allreduce_probe), nccl's under torchrun (CUDA cannot be used in a forked process)."""
    if backend == "nccl":
        return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(world), "-m",
                "--", "ddpcli.worker.allreduce_probe"]  # fmt: skip
    return [sys.executable, "-m", "ddpcli.worker.allreduce_probe", "--world", str(world)]


def probe_timeout_s(size_bytes: int) -> float:
    """How long the all-reduce probe of `size_bytes` may run before it is stopped."""
    return PROBE_TIMEOUT_S + PROBE_ALLREDUCES * PROBE_S_PER_GIB * size_bytes / 2**30


def _cached(value: object) -> AllReduceProbe | None:
    """A probe's result from its JSON (the worker's output or a cache entry); None when it is not one."""
    if not isinstance(value, dict):
        return None
    numbers = [value.get(key) for key in ("seconds", "idle_seconds", "work_s")]
    if not all(isinstance(number, int | float) and not isinstance(number, bool) for number in numbers):
        return None
    seconds, idle, work = (float(number) for number in numbers)  # type: ignore[arg-type]
    # A cache is a file anyone can edit: NaN printed "nan ms a step", a negative time "-6.4 samples/s". An
    # all-reduce takes some time, and CPU work before it none or some: anything else is probed again.
    if not all(math.isfinite(number) for number in (seconds, idle, work)) or seconds <= 0 or idle <= 0 or work < 0:
        return None
    return AllReduceProbe(seconds, idle, work)


def _read_cache(path: Path) -> dict[str, object]:
    try:
        data = read_json(path)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def busy_cores(seconds: float = 1.0, stat: Path = Path("/proc/stat")) -> float | None:
    """Cores' worth of CPU the host's processes use, over `seconds` (Linux /proc/stat; None elsewhere)."""

    def sample() -> tuple[int, int] | None:
        try:
            fields = [int(value) for value in stat.read_text().splitlines()[0].split()[1:]]
        except (OSError, ValueError, IndexError):
            return None
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
        return sum(fields[:8]) - idle, sum(fields[:8])

    first = sample()
    time.sleep(seconds)
    second = sample()
    if first is None or second is None or second[1] <= first[1]:
        return None
    cores = os.cpu_count() or 1
    return cores * (second[0] - first[0]) / (second[1] - first[1])


def read_baseline(run_dir: Path) -> Baseline:
    """The baseline of a prediction: a finished, observed run directory (its rank 0's steps' times too)."""
    try:
        record = RunRecord.load_tolerant(run_dir)
    except (OSError, ValueError) as error:
        raise UserError(f"--predict-from {run_dir}: no readable run.json ({error})") from None
    main = main_rank(read_observations(run_dir))
    try:
        return baseline_from(record.observed, main.timing if main is not None else {}, step_times(main))
    except NoBaseline as error:
        raise UserError(f"--predict-from {run_dir}: cannot predict from this run: {error}") from None


def read_baselines(run_dirs: Sequence[Path]) -> tuple[Baseline, list[Baseline]]:
    """The first run directory is the baseline; the others add points to its compute line (same kind of run,
    other per-device batches: ddpcli.prediction.compute)."""
    return read_baseline(run_dirs[0]), [read_baseline(run_dir) for run_dir in run_dirs[1:]]


def step_times(rank: RankObservation | None, limit: int = MAX_STEP_TIMES) -> list[float]:
    """The times at which the rank's first `limit` steps ended (its observer's clock), in step order."""
    times: list[float] = []
    for _, row in zip(range(limit), (rank.steps.values() if rank is not None else ()), strict=False):
        value = row.get("time")
        if not isinstance(value, int | float) or isinstance(value, bool):
            return times
        times.append(float(value))
    return times


def target_of(run: ResolvedRun) -> Target:
    threads = run.launch.env.get("OMP_NUM_THREADS", "")
    return Target(
        world_size=run.plan.world_size,
        nproc_per_node=run.plan.nproc_per_node,
        per_device_batch_size=run.plan.per_device_batch_size,
        grad_accum_steps=run.plan.grad_accum_steps,
        threads=int(threads) if threads.isdigit() and int(threads) > 0 else None,
    )


def host_now(baseline: Baseline, targets: Sequence[Target]) -> HostNow:
    """What this host gives each planned CPU configuration now: the busy-loop probe (ddpcli.launch.cpu_probe) for
    each (processes, threads) planned, its rounds as long as the baseline's CPU work a step (5 to 30 ms); the busy
    cores of /proc/stat when a probe could not run. Nothing on GPUs."""
    if baseline.device != "cpu":
        return HostNow()
    work = min(max(baseline.step["step_s"] * (baseline.cpu_share or 1.0) / baseline.threads, 0.005), 0.03)
    configs = sorted({(target.nproc_per_node, target_threads(baseline, target)) for target in targets})
    shares, waits = {}, {}
    for config in configs:
        found = cpu_probe.measure(*config, work_s=work, rounds=PROBE_ROUNDS)
        if found is not None:
            shares[config], waits[config] = found.share, found.wait
    missing = len(shares) < len(configs)
    return HostNow(busy_cores=busy_cores() if missing else None, shares=shares, waits=waits)


def predict_runs(
    baseline: Baseline,
    runs: Sequence[ResolvedRun],
    link_gbps: float | None = None,
    others: Sequence[Baseline] = (),
) -> dict[str, Prediction]:
    """Each run's prediction; the all-reduce is probed once per world size here, or from --link-gbps; the CPU this
    host gives each configuration is probed here too (not for a cluster described by --link-gbps)."""
    backend = "nccl" if baseline.device == "cuda" else "gloo"
    host = host_now(baseline, [target_of(run) for run in runs]) if link_gbps is None else HostNow()
    compute = compute_model(baseline, others)
    predictions = {}
    for run in runs:
        target, probe = target_of(run), None
        if link_gbps is not None:
            seconds = ring_allreduce_s(baseline.gradient_bytes, target.world_size, link_gbps)
            source = f"ring formula at {link_gbps:g} Gb/s"
        elif run.plan.nnodes > 1:
            raise UserError(f"{run.name}: {run.plan.nnodes} nodes cannot be probed from here; give --link-gbps")
        else:
            probed = measured_allreduce(backend, target.world_size, baseline.gradient_bytes, work_before(baseline,
                                        target, compute) if backend == "gloo" else 0.0)  # fmt: skip
            seconds, probe = probed.seconds, probed.as_json()
            size = f"{baseline.gradient_bytes / 2**20:.3g} MiB"
            source = f"{backend} probe, {target.world_size} processes, {size}: {probed.describe()}"
        comm = source if target.world_size > 1 else "none"
        predictions[run.name] = predict(baseline, target, seconds, comm, host=host, compute=compute,
                                        comm_probe=probe if target.world_size > 1 else None)  # fmt: skip
    return predictions
