"""Step by step: optimizer steps that did not train on what the others did. Pure.

A loop that steps the optimizer when `step % accumulation == 0`, counting micro-batches from 0, makes its first
optimizer step out of 1 micro-batch; an epoch whose batches are not a multiple of the accumulation ends in a
short step; a last batch smaller than the rest (drop_last = False) trains on fewer samples. The run's numbers are
"the value most steps had", so these steps would go unseen; here each becomes a finding with its step numbers.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from ddpcli.experiment.planned_samples import planned_samples
from ddpcli.jsonvalues import whole_or_none
from ddpcli.rundir.observations import RankObservation
from ddpcli.rundir.record import Finding, Observed

UNEVEN_ACCUMULATION = "uneven_accumulation"
SAMPLES_BELOW_PLAN = "samples_below_plan"
LISTED_STEPS = 8  # step numbers named in a message; the rest are counted


def step_findings(
    plan: dict[str, Any], observed: Observed, ranks: dict[int, RankObservation], completed: bool
) -> list[Finding]:
    """uneven_accumulation (steps with another micro-batch count than most) and samples_below_plan (steps that
    trained on fewer samples than most, and what that cost against the plan)."""
    found = []
    uneven = _uneven_accumulation(ranks)
    if uneven is not None:
        found.append(uneven)
    short = _samples_below(plan, observed, ranks, completed)
    if short is not None:
        found.append(short)
    return found


def _uneven_accumulation(ranks: dict[int, RankObservation]) -> Finding | None:
    counts: dict[int, set[int]] = {}  # step -> the micro-batch counts its ranks had
    for seen in ranks.values():
        for step, row in seen.steps.items():
            micro = whole_or_none(row.get("micro_batches"))
            if micro:
                counts.setdefault(step, set()).add(micro)
    usual = _most_common([count for values in counts.values() for count in values])
    if usual is None:
        return None
    odd = {step: sorted(values - {usual}) for step, values in sorted(counts.items()) if values != {usual}}
    if not odd:
        return None
    detail = ", ".join(f"{step} ({'/'.join(map(str, values))})" for step, values in list(odd.items())[:LISTED_STEPS])
    more = f" and {len(odd) - LISTED_STEPS} more" if len(odd) > LISTED_STEPS else ""
    cause = ""
    if 1 in odd and odd[1] == [1] and usual > 1:
        cause = (
            ": a first step of 1 micro-batch is what stepping on `step % accumulation == 0` with step counted from "
            "0 does; step on `(step + 1) % accumulation == 0`"
        )
    elif list(odd) == [max(counts)]:
        cause = ": the last step took what was left of the data"
    return Finding(
        code=UNEVEN_ACCUMULATION, severity="warning",
        message=f"{len(odd)} of {len(counts)} optimizer steps accumulated another number of micro-batches than the "
        f"{usual} of the others: step{'s' if len(odd) > 1 else ''} {detail}{more}{cause}",
    )  # fmt: skip


def _samples_below(
    plan: dict[str, Any], observed: Observed, ranks: dict[int, RankObservation], completed: bool
) -> Finding | None:
    """Steps whose samples over every rank fell below the run's usual global batch, in a completed run that trained
    fewer samples than its plan holds (experiment.planned_samples: epochs x shard, partial last batches included)."""
    by_step: dict[int, int] = {}
    reported: Counter[int] = Counter()
    for seen in ranks.values():
        for step, row in seen.steps.items():
            by_step[step] = by_step.get(step, 0) + (whole_or_none(row.get("samples")) or 0)
            reported[step] += 1
    # A step some rank never reported (uneven_steps_across_ranks says so) is not a short step.
    by_step = {step: samples for step, samples in by_step.items() if reported[step] == len(ranks)}
    usual = observed.global_batch_size
    if not usual or not by_step:
        return None
    short = {step: samples for step, samples in sorted(by_step.items()) if samples < usual}
    if not short:
        return None
    detail = ", ".join(f"{step} ({samples})" for step, samples in list(short.items())[:LISTED_STEPS])
    more = f" and {len(short) - LISTED_STEPS} more" if len(short) > LISTED_STEPS else ""
    total = sum(by_step.values())
    plan_holds = planned_samples(plan) if completed else None
    if plan_holds is None or total >= plan_holds.samples:
        return None  # short steps that still trained what the plan holds (a partial last batch it planned)
    planned = plan_holds.samples
    against = f"; {total} samples in all against the plan's {plan_holds.words}"
    return Finding(
        code=SAMPLES_BELOW_PLAN, severity="warning", planned=planned, observed=total,
        message=f"{len(short)} of {len(by_step)} optimizer steps trained on fewer samples than the global batch "
        f"{usual} of the others: step{'s' if len(short) > 1 else ''} {detail}{more}{against}",
    )  # fmt: skip


def _most_common(values: list[int]) -> int | None:
    return Counter(values).most_common(1)[0][0] if values else None
