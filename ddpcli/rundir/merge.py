"""What a run really did (run.json's `observed`), summarised from every rank's observations.

Pure: reads JSON lines, returns numbers. Once torchrun has ended, `ddpcli launch` calls ddpcli.diagnosis.finish, which
reads the ranks' files (ddpcli.rundir.observations), summarises them here, writes metrics.jsonl from the merged
steps (ddpcli.rundir.merged_rows) and adds the findings (ddpcli.diagnosis.findings).

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
from typing import Any

from ddpcli.jsonvalues import finite_or_none, text_or_none, whole_or_none
from ddpcli.rundir.frameworks import frameworks_row, numerics_row
from ddpcli.rundir.observations import RankObservation, lr_of, main_rank
from ddpcli.rundir.parallel import ParallelCheck, check_data_parallel, initial_fingerprint, trained_together
from ddpcli.rundir.record import Observed
from ddpcli.rundir.timeline import ascending
from ddpcli.rundir.timing import model_state, time_breakdown
from ddpcli.rundir.tokens import token_counts


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


def base_lr(end: dict[str, Any], lrs: list[float]) -> float | None:
    """The first param group's base lr: `initial_lr` where a scheduler set it (the main rank's end row), else the
    peak of the lrs its steps ran (without a scheduler the lr starts at its base, or a warmup written by hand
    rises to it)."""
    initial = end.get("initial_lr")
    if isinstance(initial, list) and initial and (value := finite_or_none(initial[0])) is not None:
        return value
    return max(lrs) if lrs else None


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


def _product(*factors: int | None) -> int | None:
    return None if any(factor is None for factor in factors) else math.prod(factors)  # type: ignore[arg-type]


def _samples_seen(totals: StepTotals, ranks: dict[int, RankObservation], parallel: ParallelCheck) -> int | None:
    """Samples that trained rank 0's model (the ranks that trained it; a second streamed pass only when some rank
    trained a model of its own); None when a step's batch size could not be read (unknown, never counted as 0)."""
    together = trained_together(ranks, parallel)
    if together is not ranks:
        totals = step_totals(together)
    return None if totals.samples_unknown else totals.samples_seen


def summarize(ranks: dict[int, RankObservation], parallel: ParallelCheck | None = None) -> Observed | None:
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
    parallel = check_data_parallel(ranks, world) if parallel is None else parallel  # the run's (diagnosis.finish)
    ranges = {
        name: [counted.low, counted.high]
        for name, counted in (("per_device_batch_size", per_device), ("grad_accum_steps", accumulation),
                              ("global_batch_size", global_batch))
        if counted.low is not None and counted.high is not None
        and (name != "global_batch_size" or parallel.synchronized is not False)
    }  # fmt: skip
    return Observed(
        world_size=world if world is not None else len(ranks),
        processes=whole_or_none(main.run.get("processes")) or max(world or 0, len(ranks)) or None,
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
        dropout_layers=whole_or_none(main.run.get("dropout_layers")),
        # One process: its statistics are the global batch's, there is nothing to synchronise.
        batchnorm_synchronized=(synchronised == norms) if norms and world != 1 else None,
        amp=text_or_none(main.end.get("amp")) or text_or_none(main.run.get("amp")),
        backend=text_or_none(main.run.get("backend")),
        device=text_or_none(main.run.get("device")),
        ddp=main.run.get("ddp") if isinstance(main.run.get("ddp"), bool) else None,
        initial_params_fingerprint=initial_fingerprint(main),
        optimizer=main.run.get("optimizer") if isinstance(main.run.get("optimizer"), dict) else None,
        time_breakdown=time_breakdown(timing := {rank: seen.timing for rank, seen in ranks.items()}),
        model_state=model_state(timing),
        frameworks=frameworks_row(main.end),
        numerics=numerics_row(main.end),
        tokens_per_micro_batch=(tokens := token_counts(ranks, main))[0],
        tokens_per_step=tokens[1],
    )
