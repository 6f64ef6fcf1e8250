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
  error        something inside the observer failed (training went on)
A process that starts again (a torchrun restart, a resume) appends to the same file. Step numbers are absolute (the
runtime helper tells the observer the step it resumed from), so for a step seen twice the later row wins.

Streaming: step and log rows are never all in memory (ddpcli.rundir.timeline keeps where they are and reads them
back in step order), so the merge of a million steps needs about as much memory as that of ten. Every value is
untrusted: a number beyond float range, a string or a list where a number belongs is no number, never a crash.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ddpcli.jsonvalues import finite_or_none, parse_row, text_or_none, whole_or_none
from ddpcli.noise_scale import NoiseScaleTracker, simple_noise_scale
from ddpcli.rundir.layout import OBSERVED_DIR
from ddpcli.rundir.parallel import ParallelCheck, check_data_parallel, initial_fingerprint, trained_together
from ddpcli.rundir.record import Observed
from ddpcli.rundir.steps import base_lr
from ddpcli.rundir.timeline import TimelineBuilder, ascending

NOISE_BETA = 0.99  # EMA factor of the observer's noise-scale measurement (the runtime helper's default)


@dataclass
class RankObservation:
    rank: int
    # step -> row: a Timeline (read from the file when iterated, rising steps) when read from a file.
    steps: Mapping[int, dict[str, Any]] = field(default_factory=dict)
    logs: Mapping[int, dict[str, Any]] = field(default_factory=dict)
    fingerprints: list[list[float]] = field(default_factory=list)
    run: dict[str, Any] = field(default_factory=dict)
    end: dict[str, Any] = field(default_factory=dict)
    params: dict[str, dict[str, Any]] = field(default_factory=dict)  # parameter digests by "at" (rundir.parallel)
    errors: list[str] = field(default_factory=list)
    skipped_lines: int = 0


MAX_ERRORS = 100  # distinct observer error messages kept per rank (a finding quotes the first)


def read_rank_file(path: Path, rank: int) -> RankObservation:
    """One pass over the file: where its step and log rows are (not the rows), and the few other rows."""
    seen = RankObservation(rank)
    builders = {kind: TimelineBuilder(kind) for kind in ("step", "log")}
    resumes: list[tuple[int, int]] = []  # (order, step): a resume drops the rows after its step written before it
    order, offset = 0, 0
    try:
        with path.open("rb") as handle:
            for line in handle:
                start, offset = offset, offset + len(line)
                row = parse_row(line) if line.strip() else None
                if row is None:
                    seen.skipped_lines += bool(line.strip())
                    continue
                kind, step = row.get("kind"), whole_or_none(row.get("step"))
                if kind in builders and step is not None:
                    order += builders[kind].add(step, start, order)
                elif kind == "resume" and step is not None:
                    resumes.append((order, step))  # the attempt that died went further than its last checkpoint
                    for builder in builders.values():
                        builder.close()
                    order += 1
                else:
                    _note(seen, kind, row)
    except OSError:
        pass
    seen.steps = builders["step"].build(path, resumes)
    seen.logs = builders["log"].build(path, resumes)
    return seen


def _note(seen: RankObservation, kind: Any, row: dict[str, Any]) -> None:
    if kind == "fingerprint" and isinstance(row.get("values"), list) and len(seen.fingerprints) < 8:
        seen.fingerprints.append([value for value in row["values"] if finite_or_none(value) is not None])
    elif kind in ("run", "end"):
        setattr(seen, kind, row)
    elif kind == "params":
        seen.params[str(row.get("at"))] = row
    elif kind == "error" and len(seen.errors) < MAX_ERRORS:
        message = str(row.get("message", ""))[:500]
        if message not in seen.errors:
            seen.errors.append(message)


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
    def of(cls, values: list[int] | Counter[int]) -> Counted:
        counts = values if isinstance(values, Counter) else Counter(values)
        if not counts:
            return cls(None)
        value = counts.most_common(1)[0][0]
        low, high = min(counts), max(counts)
        return cls(value) if low == high else cls(value, low, high)


@dataclass
class StepTotals:
    """What one pass over every rank's step rows gives: batch counts, samples, rank 0's lr."""

    per_device: Counter[int] = field(default_factory=Counter)
    accumulation: Counter[int] = field(default_factory=Counter)
    global_batch: Counter[int] = field(default_factory=Counter)
    samples_seen: int = 0
    samples_unknown: bool = False  # a step whose batch size could not be read: the total is unknown, not short
    lr_first: float | None = None
    lr_peak: float | None = None
    lr_last: float | None = None


def step_totals(ranks: dict[int, RankObservation]) -> StepTotals:
    """One streamed pass over the step rows of every rank, in step order."""
    totals, main = StepTotals(), main_rank(ranks)
    streams = [_tagged(rank, seen.steps) for rank, seen in ranks.items()]
    step_now, step_sum = None, None
    for step, rank, row in heapq.merge(*streams, key=lambda item: (item[0], item[1])):
        if step != step_now:
            if step_sum is not None:
                totals.global_batch[step_sum] += 1
            step_now, step_sum = step, None
        micro, samples = whole_or_none(row.get("micro_batches")), whole_or_none(row.get("samples"))
        totals.samples_seen += samples or 0
        totals.samples_unknown |= samples is None
        if main is not None and rank == main.rank and (lr := lr_of(row)) is not None:
            totals.lr_first = lr if totals.lr_first is None else totals.lr_first
            totals.lr_peak = lr if totals.lr_peak is None else max(totals.lr_peak, lr)
            totals.lr_last = lr
        if not micro or samples is None:
            continue
        totals.accumulation[micro] += 1
        if samples % micro == 0:
            totals.per_device[samples // micro] += 1
        step_sum = (step_sum or 0) + samples
    if step_sum is not None:
        totals.global_batch[step_sum] += 1
    return totals


def _tagged(rank: int, rows: Mapping[int, dict[str, Any]]) -> Iterator[tuple[int, int, dict[str, Any]]]:
    return ((step, rank, row) for step, row in ascending(rows))


def per_step_batches(ranks: dict[int, RankObservation]) -> tuple[Counted, Counted, Counted]:
    """Per-device batch (samples per micro-batch), accumulation (micro-batches per step), global batch (samples of
    a step over every rank), each the value most steps had."""
    totals = step_totals(ranks)
    return Counted.of(totals.per_device), Counted.of(totals.accumulation), Counted.of(totals.global_batch)


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
    """metrics.jsonl rows as a list (iter_merged_metrics streams them: what `ddpcli launch` writes from)."""
    return list(iter_merged_metrics(ranks))


def iter_merged_metrics(ranks: dict[int, RankObservation]) -> Iterator[dict[str, Any]]:
    """metrics.jsonl rows: one per optimizer step of rank 0's timeline; `samples` is what every rank consumed so
    far, `loss` the mean over ranks. Where the runtime helper logged a step, its loss, lr and scalars are used
    (averaged over ranks) and only its steps are rows. Streamed: one step's rows of every rank at a time."""
    if not ranks:
        return
    main = main_rank(ranks)
    if main.logs:
        yield from _log_rows(ranks)
        return
    tracker = NoiseScaleTracker(NOISE_BETA)
    for step, rows, samples in aligned_steps(ranks):
        row = rows[main.rank]
        yield {
            "step": step,
            "samples": samples,
            "time": row.get("time"),
            "loss": _mean([each.get("loss") for each in rows.values()]),
            "lr": lr_of(row),
            **_noise_step(tracker, list(rows.values())),
        }  # fmt: skip


def aligned_steps(ranks: dict[int, RankObservation]) -> Iterator[tuple[int, dict[int, dict[str, Any]], int]]:
    """For each step of rank 0's timeline: (step, each rank's row of that step ({} where it has none), samples
    every rank consumed up to it), reading every rank's file once, in step order."""
    main = main_rank(ranks)
    if main is None:
        return
    cursors = {rank: _Cursor(seen.steps) for rank, seen in ranks.items()}
    total = 0
    for step, row in ascending(main.steps):
        rows = {rank: row if rank == main.rank else cursor.at(step) for rank, cursor in cursors.items()}
        total += sum(whole_or_none(each.get("samples")) or 0 for each in rows.values())
        yield step, rows, total


class _Cursor:
    """A rank's rows, read forward: `at(step)` for rising steps."""

    def __init__(self, rows: Mapping[int, dict[str, Any]]) -> None:
        self.items = ascending(rows)
        self.step: int | None = None
        self.row: dict[str, Any] = {}

    def at(self, step: int) -> dict[str, Any]:
        while self.items is not None and (self.step is None or self.step < step):
            found = next(self.items, None)
            if found is None:
                self.items = None
                break
            self.step, self.row = found
        return self.row if self.step == step else {}


def _noise_step(tracker: NoiseScaleTracker, rows: list[dict[str, Any]]) -> dict[str, float]:
    measured = _step_norms(rows)
    if measured is None:
        return {}
    small, big, b_small, b_big = measured
    tracker.update(small, big)
    if not tracker.weight:
        return {}
    values = {"grad_sq_small": tracker.ema_small / tracker.weight, "grad_sq_big": tracker.ema_big / tracker.weight}
    if 0 < b_small < b_big and (noise_scale := tracker.noise_scale(b_small, b_big)) is not None:
        values["noise_scale"] = noise_scale
    return values


def _log_rows(ranks: dict[int, RankObservation]) -> Iterator[dict[str, Any]]:
    """The logged steps' rows, with the samples consumed up to each (where rank 0 has that optimizer step)."""
    main = main_rank(ranks)
    steps = aligned_steps(ranks)
    cursors = {rank: _Cursor(seen.logs) for rank, seen in ranks.items()}
    step_now, total = None, None
    for step, logged in ascending(main.logs):
        while step_now is None or step_now < step:
            found = next(steps, None)
            if found is None:
                break
            step_now, _, total = found
        rows = {rank: logged if rank == main.rank else cursor.at(step) for rank, cursor in cursors.items()}
        yield _log_row(step, logged, list(rows.values()), total if step_now == step else None)


def observed_noise(ranks: dict[int, RankObservation], beta: float = NOISE_BETA) -> dict[int, dict[str, float]]:
    """Per step of rank 0's timeline: the EMAs of |G_small|^2 (averaged over ranks: each rank's gradient before the
    all-reduce) and |G_big|^2 (after it), and the noise scale from them with B_small = the samples one rank put into
    the step (per-device batch x accumulation) and B_big = the step's samples over every rank. Steps where a rank's
    norms are missing or not finite (an AMP overflow) are left out of the EMAs. (A dict: for tests and small runs;
    the merge computes the same values streaming.)"""
    tracker, found = NoiseScaleTracker(beta), {}
    for step, rows, _ in aligned_steps(ranks):
        values = _noise_step(tracker, list(rows.values()))
        if values:
            found[step] = values
    return found


def _log_row(step: int, logged: dict[str, Any], rows: list[dict[str, Any]], samples: int | None) -> dict[str, Any]:
    row: dict[str, Any] = {"step": step}
    samples = samples if samples is not None else logged.get("samples")
    if samples is not None:
        row["samples"] = samples
    row["time"] = logged.get("time")
    keys = [key for key in logged if key not in ("kind", "step", "samples", "time", "noise_batches")]
    for key in keys:
        row[key] = logged[key] if key == "lr" else _mean([each.get(key) for each in rows])
    row.update(_noise_values(row, logged.get("noise_batches")))
    return row


def _noise_values(row: dict[str, Any], batches: Any) -> dict[str, Any]:
    """The noise scale from the rank-averaged small-batch EMA and the big-batch one (see ddpcli.noise_scale)."""
    small, big = finite_or_none(row.get("grad_sq_small")), finite_or_none(row.get("grad_sq_big"))
    if small is None or big is None or not isinstance(batches, list) or len(batches) != 2:
        return {}
    try:
        value = simple_noise_scale(small, big, float(batches[0]), float(batches[1]))
    except (ValueError, TypeError, OverflowError, ZeroDivisionError):
        return {}
    return {"noise_scale": value} if value is not None else {}


def _mean(values: list[Any]) -> float | str | None:
    """Mean of the finite numbers; "nan" when a rank's value was not a finite number (a NaN, an integer beyond float
    range, a string), so a NaN loss is never hidden."""
    numbers = []
    for value in values:
        if isinstance(value, str) or (isinstance(value, int | float) and not isinstance(value, bool)):
            number = finite_or_none(value)
            if number is None:
                return "nan"
            numbers.append(number)
    if not numbers:
        return None
    mean = math.fsum(numbers) / len(numbers)
    return mean if math.isfinite(mean) else "nan"


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
    total = sum(samples)
    if finite_or_none(total) is None:
        return None
    return math.fsum(small) / len(small), math.fsum(big) / len(big), total / len(samples), total


def _product(*factors: int | None) -> int | None:
    return None if any(factor is None for factor in factors) else math.prod(factors)  # type: ignore[arg-type]


def _samples_seen(totals: StepTotals, ranks: dict[int, RankObservation], parallel: ParallelCheck) -> int | None:
    """Samples that trained rank 0's model (the ranks that trained it; a second streamed pass only when some rank
    trained a model of its own); None when a step's batch size could not be read (unknown, never counted as 0)."""
    together = trained_together(ranks, parallel)
    if together is not ranks:
        totals = step_totals(together)
    return None if totals.samples_unknown else totals.samples_seen


def summarize(ranks: dict[int, RankObservation]) -> Observed | None:
    """The run's `observed` record; None when no rank wrote anything (run with observe = false, or no worker ran)."""
    if not ranks:
        return None
    main = main_rank(ranks)
    totals = step_totals(ranks)
    per_device, accumulation = Counted.of(totals.per_device), Counted.of(totals.accumulation)
    global_batch = Counted.of(totals.global_batch)
    loader = training_loader(ranks)
    norms = whole_or_none(main.run.get("batchnorm_layers"))
    synchronised = whole_or_none(main.run.get("batchnorm_synchronized"))
    world = whole_or_none(main.run.get("world_size"))
    parallel = check_data_parallel(ranks, world)
    ranges = {
        name: [counted.low, counted.high]
        for name, counted in (("per_device_batch_size", per_device), ("grad_accum_steps", accumulation),
                              ("global_batch_size", global_batch))
        if counted.low is not None and counted.high is not None
        and (name != "global_batch_size" or parallel.synchronized is not False)
    }  # fmt: skip
    return Observed(
        world_size=world if world is not None else len(ranks),
        data_parallel_size=parallel.size,
        per_device_batch_size=per_device.value,
        grad_accum_steps=accumulation.value,
        global_batch_size=_product(per_device.value, accumulation.value, parallel.size),
        ranges=ranges,
        optimizer_steps=len(main.steps),
        samples_seen=_samples_seen(totals, ranks, parallel),
        lr_first=totals.lr_first,
        lr_peak=totals.lr_peak,
        lr_last=totals.lr_last,
        lr_base=base_lr(main.end, [totals.lr_peak] if totals.lr_peak is not None else []),
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
        initial_params_fingerprint=initial_fingerprint(main),
        optimizer=main.run.get("optimizer") if isinstance(main.run.get("optimizer"), dict) else None,
    )
