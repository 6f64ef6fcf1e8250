"""What a run really did, from the files every rank's observer wrote (<run_dir>/observed/rank-<rank>.jsonl).

Pure: reads JSON lines, returns numbers. Once torchrun has ended, `ddpcli launch` (ddpcli.launch.sweep) calls
`read_observations`, `summarize` and `merged_metrics`: the run record gets `observed` and `findings`
(ddpcli.rundir.findings), and metrics.jsonl is written from the merged steps.

Row kinds (ddpcli.worker.observer and ddpcli.worker.runtime write them; docs/contracts.md lists them):
  start        a process began (restart count, pid)
  step         one optimizer step: micro_batches, samples, loss (back-propagated, summed), lr per group, time;
               with noise_scale = true on a DDP model, sq_small and sq_big: this step's squared gradient norms before
               and after the all-reduce (the merge keeps their EMAs and computes the noise scale)
  resume       the runtime helper resumed from a checkpoint: the next step is step + 1
  log          a row of the runtime helper's ctx.log (step, loss, lr, extra scalars), this rank's values
  fingerprint  three numbers of one of the first training batches
  run          world size, backend, device, DDP and its options, models, BatchNorm layers, AMP
  end          training loaders (sampler, epochs seen), AMP, comm hooks
  timing       cumulative seconds of the timed steps (data, forward+backward, optimizer, step), the DDP
               reducer's timers, peak memory, threads and cores, parameter and optimizer-state bytes
  error        something inside the observer failed (training went on)
A process that starts again (a torchrun restart, a resume) appends to the same file. Step numbers are absolute (the
runtime helper tells the observer the step it resumed from), so for a step seen twice the later row wins.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ddpcli.jsonvalues import finite_or_none, parse_row, text_or_none, whole_or_none
from ddpcli.noise_scale import NoiseScaleTracker, simple_noise_scale
from ddpcli.rundir.layout import OBSERVED_DIR
from ddpcli.rundir.record import Observed
from ddpcli.rundir.steps import base_lr
from ddpcli.rundir.timing import model_state, time_breakdown

NOISE_BETA = 0.99  # EMA factor of the observer's noise-scale measurement (the runtime helper's default)


@dataclass
class RankObservation:
    rank: int
    steps: dict[int, dict[str, Any]] = field(default_factory=dict)
    logs: dict[int, dict[str, Any]] = field(default_factory=dict)
    fingerprints: list[list[float]] = field(default_factory=list)
    run: dict[str, Any] = field(default_factory=dict)
    end: dict[str, Any] = field(default_factory=dict)
    timing: dict[str, Any] = field(default_factory=dict)  # the last `timing` row (cumulative)
    errors: list[str] = field(default_factory=list)
    skipped_lines: int = 0


def read_rank_file(path: Path, rank: int) -> RankObservation:
    seen = RankObservation(rank)
    try:
        lines = path.read_bytes().splitlines()
    except OSError:
        return seen
    for line in lines:
        row = parse_row(line) if line.strip() else None
        if row is None:
            seen.skipped_lines += bool(line.strip())
            continue
        kind = row.get("kind")
        if kind == "resume" and whole_or_none(row.get("step")) is not None:
            _forget_after(seen, int(row["step"]))  # the attempt that died went further than its last checkpoint
        elif kind == "step" and whole_or_none(row.get("step")) is not None:
            seen.steps[int(row["step"])] = row
        elif kind == "log" and whole_or_none(row.get("step")) is not None:
            seen.logs[int(row["step"])] = row
        elif kind == "fingerprint" and isinstance(row.get("values"), list) and len(seen.fingerprints) < 8:
            seen.fingerprints.append([value for value in row["values"] if isinstance(value, int | float)])
        elif kind in ("run", "end", "timing"):
            setattr(seen, kind, row)
        elif kind == "error":
            seen.errors.append(str(row.get("message", "")))
    return seen


def _forget_after(seen: RankObservation, step: int) -> None:
    seen.steps = {number: row for number, row in seen.steps.items() if number <= step}
    seen.logs = {number: row for number, row in seen.logs.items() if number <= step}


def main_rank(ranks: dict[int, RankObservation]) -> RankObservation | None:
    """Rank 0's observations (whose timeline and run description stand for the run), else the lowest rank's."""
    return ranks.get(0) or (ranks[min(ranks)] if ranks else None)


def read_observations(run_dir: Path) -> dict[int, RankObservation]:
    """Every rank's observations, by rank; empty when the run was not observed."""
    folder = run_dir / OBSERVED_DIR
    ranks: dict[int, RankObservation] = {}
    if not folder.is_dir():
        return ranks
    for path in sorted(folder.glob("rank-*.jsonl")):
        number = path.stem.removeprefix("rank-")
        if number.isdigit():
            ranks[int(number)] = read_rank_file(path, int(number))
    return ranks


@dataclass(frozen=True)
class Counted:
    """The value most steps had, and the range when it varies."""

    value: int | None
    low: int | None = None
    high: int | None = None

    @classmethod
    def of(cls, values: list[int]) -> Counted:
        if not values:
            return cls(None)
        value = Counter(values).most_common(1)[0][0]
        low, high = min(values), max(values)
        return cls(value) if low == high else cls(value, low, high)


def per_step_batches(ranks: dict[int, RankObservation]) -> tuple[Counted, Counted, Counted]:
    """Per-device batch (samples per micro-batch), accumulation (micro-batches per step), global batch (samples of
    a step over every rank), each the value most steps had."""
    per_device, accumulation = [], []
    global_by_step: dict[int, int] = {}
    for seen in ranks.values():
        for step, row in seen.steps.items():
            micro, samples = whole_or_none(row.get("micro_batches")), whole_or_none(row.get("samples"))
            if not micro or samples is None:
                continue
            accumulation.append(micro)
            if samples % micro == 0:
                per_device.append(samples // micro)
            global_by_step[step] = global_by_step.get(step, 0) + samples
    return Counted.of(per_device), Counted.of(accumulation), Counted.of(list(global_by_step.values()))


def lr_of(row: dict[str, Any]) -> float | None:
    """The first param group's lr of a step row (groups may differ; the first is the one people quote)."""
    lrs = row.get("lr")
    return finite_or_none(lrs[0]) if isinstance(lrs, list) and lrs else finite_or_none(lrs)


def distinct_samples(ranks: dict[int, RankObservation]) -> bool | None:
    """False when every rank saw the very same first batches (no sharding); None when it cannot be told."""
    prints = [seen.fingerprints for seen in ranks.values() if seen.fingerprints]
    if len(ranks) < 2 or len(prints) < 2:
        return None
    count = min(len(each) for each in prints)
    return any(each[:count] != prints[0][:count] for each in prints[1:])


def training_loader(ranks: dict[int, RankObservation]) -> dict[str, Any] | None:
    seen = main_rank(ranks)
    loaders = seen.end.get("loaders") if seen is not None else None
    if not isinstance(loaders, list) or not loaders or not isinstance(loaders[0], dict):
        return None
    return loaders[0]


def _sampler_chain(loader: dict[str, Any] | None) -> list[str] | None:
    chain = loader.get("sampler_chain") if loader is not None else None
    return [str(name) for name in chain] if isinstance(chain, list) else None


def merged_metrics(ranks: dict[int, RankObservation]) -> list[dict[str, Any]]:
    """metrics.jsonl rows: one per optimizer step of rank 0's timeline; `samples` is what every rank consumed so
    far, `loss` the mean over ranks. Where the runtime helper logged a step, its loss, lr and scalars are used
    (averaged over ranks) and only its steps are rows."""
    if not ranks:
        return []
    main = main_rank(ranks)
    cumulative, total = {}, 0
    for step in sorted(main.steps):
        total += sum(whole_or_none(seen.steps.get(step, {}).get("samples")) or 0 for seen in ranks.values())
        cumulative[step] = total
    if main.logs:
        return [_log_row(step, ranks, cumulative) for step in sorted(main.logs)]
    noise = observed_noise(ranks)
    rows = []
    for step in sorted(main.steps):
        row = main.steps[step]
        rows.append({
            "step": step,
            "samples": cumulative[step],
            "time": row.get("time"),
            "loss": _mean([seen.steps.get(step, {}).get("loss") for seen in ranks.values()]),
            "lr": lr_of(row),
            **noise.get(step, {}),
        })  # fmt: skip
    return rows


def observed_noise(ranks: dict[int, RankObservation], beta: float = NOISE_BETA) -> dict[int, dict[str, float]]:
    """Per step of rank 0's timeline: the EMAs of |G_small|^2 (averaged over ranks: each rank's gradient before the
    all-reduce) and |G_big|^2 (after it), and the noise scale from them with B_small = the samples one rank put into
    the step (per-device batch x accumulation) and B_big = the step's samples over every rank. Steps where a rank's
    norms are missing or not finite (an AMP overflow) are left out of the EMAs."""
    if not ranks:
        return {}
    main = main_rank(ranks)
    tracker, found = NoiseScaleTracker(beta), {}
    for step in sorted(main.steps):
        measured = _step_norms([seen.steps.get(step, {}) for seen in ranks.values()])
        if measured is None:
            continue
        small, big, b_small, b_big = measured
        tracker.update(small, big)
        values = {"grad_sq_small": tracker.ema_small / tracker.weight, "grad_sq_big": tracker.ema_big / tracker.weight}
        if 0 < b_small < b_big and (noise_scale := tracker.noise_scale(b_small, b_big)) is not None:
            values["noise_scale"] = noise_scale
        found[step] = values
    return found


def _log_row(step: int, ranks: dict[int, RankObservation], cumulative: dict[int, int]) -> dict[str, Any]:
    main = main_rank(ranks)
    logged = main.logs[step]
    row: dict[str, Any] = {"step": step}
    samples = cumulative.get(step, logged.get("samples"))
    if samples is not None:
        row["samples"] = samples
    row["time"] = logged.get("time")
    keys = [key for key in logged if key not in ("kind", "step", "samples", "time", "noise_batches")]
    for key in keys:
        values = [seen.logs.get(step, {}).get(key) for seen in ranks.values()]
        row[key] = logged[key] if key == "lr" else _mean(values)
    row.update(_noise_values(row, logged.get("noise_batches")))
    return row


def _noise_values(row: dict[str, Any], batches: Any) -> dict[str, Any]:
    """The noise scale from the rank-averaged small-batch EMA and the big-batch one (see ddpcli.noise_scale)."""
    small, big = finite_or_none(row.get("grad_sq_small")), finite_or_none(row.get("grad_sq_big"))
    if small is None or big is None or not isinstance(batches, list) or len(batches) != 2:
        return {}
    try:
        value = simple_noise_scale(small, big, float(batches[0]), float(batches[1]))
    except (ValueError, TypeError):
        return {}
    return {"noise_scale": value} if value is not None else {}


def _mean(values: list[Any]) -> float | str | None:
    """Mean of the finite numbers; "nan" when a rank's value was not finite (so a NaN loss is never hidden)."""
    if any(isinstance(value, str) or (isinstance(value, float) and not math.isfinite(value)) for value in values):
        return "nan"
    numbers = [float(value) for value in values if isinstance(value, int | float) and not isinstance(value, bool)]
    return sum(numbers) / len(numbers) if numbers else None


def _step_norms(rows: list[dict[str, Any]]) -> tuple[float, float, float, int] | None:
    """(rank mean of |G_small|^2, of |G_big|^2, mean samples per rank, samples over ranks) of one step's rows; None
    when a rank's values are missing or not finite."""
    small, big, samples = [], [], []
    for row in rows:
        one, two, count = (
            finite_or_none(row.get("sq_small")),
            finite_or_none(row.get("sq_big")),
            whole_or_none(row.get("samples")),
        )
        if one is None or two is None or count is None:
            return None
        small.append(one)
        big.append(two)
        samples.append(count)
    if not rows:
        return None
    return sum(small) / len(small), sum(big) / len(big), sum(samples) / len(samples), sum(samples)


def summarize(ranks: dict[int, RankObservation]) -> Observed | None:
    """The run's `observed` record; None when no rank wrote anything (run with observe = false, or no worker ran)."""
    if not ranks:
        return None
    main = main_rank(ranks)
    per_device, accumulation, global_batch = per_step_batches(ranks)
    lrs = [lr for step in sorted(main.steps) if (lr := lr_of(main.steps[step])) is not None]
    loader = training_loader(ranks)
    norms = whole_or_none(main.run.get("batchnorm_layers"))
    synchronised = whole_or_none(main.run.get("batchnorm_synchronized"))
    world = whole_or_none(main.run.get("world_size"))
    ranges = {
        name: [counted.low, counted.high]
        for name, counted in (("per_device_batch_size", per_device), ("grad_accum_steps", accumulation),
                              ("global_batch_size", global_batch))
        if counted.low is not None and counted.high is not None
    }  # fmt: skip
    return Observed(
        world_size=world if world is not None else len(ranks),
        per_device_batch_size=per_device.value,
        grad_accum_steps=accumulation.value,
        global_batch_size=global_batch.value,
        ranges=ranges,
        optimizer_steps=len(main.steps),
        samples_seen=sum(
            whole_or_none(row.get("samples")) or 0 for seen in ranks.values() for row in seen.steps.values()
        ),
        lr_first=lrs[0] if lrs else None,
        lr_peak=max(lrs) if lrs else None,
        lr_last=lrs[-1] if lrs else None,
        lr_base=base_lr(main.end, lrs),
        sampler=str(loader["sampler"]) if loader is not None else None,
        sampler_chain=_sampler_chain(loader),
        distinct_samples_across_ranks=distinct_samples(ranks),
        batchnorm_layers=norms,
        # One process: its statistics are the global batch's, there is nothing to synchronise.
        batchnorm_synchronized=(synchronised == norms) if norms and world != 1 else None,
        amp=text_or_none(main.end.get("amp")) or text_or_none(main.run.get("amp")),
        backend=text_or_none(main.run.get("backend")),
        device=text_or_none(main.run.get("device")),
        ddp=main.run.get("ddp") if isinstance(main.run.get("ddp"), bool) else None,
        time_breakdown=time_breakdown(timing := {rank: seen.timing for rank, seen in ranks.items()}),
        model_state=model_state(timing),
    )
