"""Findings: what the observer saw that changes what a run means, checked against its plan. Pure.

Each finding has a `code` other tools match on (a contract: docs/contracts.md lists them), a severity and one
sentence in plain words. plan_mismatch findings also carry the field and both numbers.
"""

from __future__ import annotations

import math
from typing import Any

from ddpcli.diagnosis.advice import batchnorm_fix
from ddpcli.diagnosis.causes import loss_scale_findings, script_findings, with_causes
from ddpcli.diagnosis.parallel import PortAdvice, parallel_findings, plain_port_clause
from ddpcli.diagnosis.script_io import same_file_findings, spawn_findings
from ddpcli.diagnosis.slowness import slowness_findings
from ddpcli.diagnosis.steps import step_findings
from ddpcli.jsonvalues import finite_or_none
from ddpcli.rundir.merge import training_loader
from ddpcli.rundir.observations import RankObservation, main_rank
from ddpcli.rundir.parallel import ParallelCheck, check_data_parallel, trained_together
from ddpcli.rundir.record import Finding, Observed

# (field of the plan, field of Observed, words)
COMPARED = (
    ("per_device_batch_size", "per_device_batch_size", "batch per process"),
    ("grad_accum_steps", "grad_accum_steps", "micro-batches per optimizer step"),
    ("global_batch_size", "global_batch_size", "global batch"),
    ("world_size", "processes", "processes"),  # launched: whether they trained together is parallel.py's
    ("total_steps", "optimizer_steps", "optimizer steps"),
    ("lr", "lr_base", "base learning rate"),
)


def run_findings(
    plan: dict[str, Any],
    observed: Observed,
    ranks: dict[int, RankObservation],
    completed: bool,
    parallel_check: ParallelCheck | None = None,  # the run's (ddpcli.diagnosis.finish makes it once)
    script: Any = None,  # the script (or module) launched, for the pointer to `ddpcli port`
    launch_args: list[str] | None = None,  # run.json's launch args, placeholders kept: which values a flag sets
    port_advice: PortAdvice = plain_port_clause,  # how `ddpcli port` would make the script data-parallel
) -> list[Finding]:
    main = main_rank(ranks) or RankObservation(0)
    findings = with_causes(plan_mismatches(plan, observed, completed), plan, observed, main.end, launch_args)
    if parallel_check is None:
        parallel_check = check_data_parallel(ranks, observed.world_size)
    # Steps as rank 0's model took them: a separate training's samples are not another's global batch.
    findings += step_findings(plan, observed, trained_together(ranks, parallel_check), completed)
    script = script if isinstance(script, str) else None
    parallel = parallel_findings(parallel_check, _one_process_batch(observed), main.run, script, port_advice)
    findings += parallel + spawn_findings(ranks, observed.optimizer_steps)
    findings += script_findings(main.end, observed.optimizer_steps) + same_file_findings(ranks)
    findings += loss_scale_findings(main.steps, observed.world_size)
    world = observed.world_size or len(ranks)
    alone = any(finding.severity == "error" for finding in parallel)  # separate trainings: no global batch at all
    if observed.distinct_samples_across_ranks is False and not parallel_check.copies:
        findings.append(_same_samples(parallel_check.processes if alone else world, alone))
    loader = training_loader(ranks)
    if loader is not None and _epoch_never_set(loader):
        findings.append(Finding(
            code="sampler_epoch_not_set", severity="warning",
            message=f"the training DataLoader ran {loader.get('iterations')} epochs with a DistributedSampler whose "
            "epoch never changed (set_epoch was not called): every epoch repeated one order",
        ))  # fmt: skip
    if world > 1 and not alone and observed.batchnorm_layers and observed.batchnorm_synchronized is False:
        findings.append(Finding(
            code="batchnorm_not_synchronized", severity="warning",
            message=f"{observed.batchnorm_layers} BatchNorm layer(s) computed statistics per process (a batch of "
            f"{observed.per_device_batch_size}), not over the global batch: "
            + batchnorm_fix(observed.device, observed.backend),
        ))  # fmt: skip
    # The last step each rank reached (not its row count: a rank killed and restarted can lose unflushed rows).
    steps = {rank: max(seen.steps, default=0) for rank, seen in ranks.items()}
    if len(set(steps.values())) > 1:
        counts = ", ".join(f"rank {rank}: {count}" for rank, count in sorted(steps.items()))
        findings.append(Finding(
            code="uneven_steps_across_ranks", severity="warning",
            message=f"ranks took different numbers of optimizer steps ({counts})",
        ))  # fmt: skip
    if _noise_scale_blocked(ranks):
        findings.append(Finding(
            code="noise_scale_not_measured", severity="info",
            message="noise_scale = true, but the script registers its own DDP communication hook, which the observer "
            "leaves in place: the gradient noise scale was not measured",
        ))  # fmt: skip
    findings += slowness_findings(observed, {rank: seen.timing for rank, seen in ranks.items()})
    errors = sorted({message for seen in ranks.values() for message in seen.errors})
    if errors:
        findings.append(Finding(
            code="observer_error", severity="info",
            message=f"the observer failed in part, training was not affected: {errors[0]}"
            + (f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""),
        ))  # fmt: skip
    return findings


def _same_samples(world: int, alone: bool) -> Finding:
    """Every rank took the same first batches. Separate trainings have no global batch to be copies of: what the
    sentence says then is that nothing split the data, which a port must add as well as the averaging."""
    if alone:
        message = (f"the {world} processes also took the same batches in the same order (nothing split the data "
                   f"across them, no DistributedSampler): {world} trainings over the same samples, not {world} shares "
                   "of the data")  # fmt: skip
    else:
        message = (f"all {world} ranks trained on the same first batches (no DistributedSampler?): the global batch "
                   f"is {world} copies of one batch, and an epoch {world} times longer than planned")  # fmt: skip
    return Finding(code="same_samples_across_ranks", severity="warning", message=message)


def plan_mismatches(plan: dict[str, Any], observed: Observed, completed: bool) -> list[Finding]:
    """One finding per number the script did not take from the plan. Optimizer steps only for completed runs."""
    found = []
    for plan_field, observed_field, words in COMPARED:
        planned, seen = plan.get(plan_field), getattr(observed, observed_field)
        if seen is None and observed_field == "processes":  # a record from before `processes`
            seen = observed.world_size
        if not _number(planned) or not _number(seen) or _same(planned, seen):
            continue
        if plan_field == "total_steps" and not completed:
            continue
        found.append(Finding(
            code="plan_mismatch", severity="warning", field=plan_field, planned=planned, observed=seen,
            message=f"the script ran {words} {_show(seen)}; the plan said {_show(planned)}",
        ))  # fmt: skip
    return found


def _one_process_batch(observed: Observed) -> int | None:
    if observed.per_device_batch_size is None or observed.grad_accum_steps is None:
        return None
    return observed.per_device_batch_size * observed.grad_accum_steps


def _noise_scale_blocked(ranks: dict[int, RankObservation]) -> bool:
    """The noise scale was asked for, nobody measured it, and the script's own comm hook is why."""
    end = (main_rank(ranks) or RankObservation(0)).end
    return (
        end.get("noise_scale_requested") is True
        and end.get("script_comm_hook") is True
        and not end.get("noise_scale_by")
    )


def _epoch_never_set(loader: dict[str, Any]) -> bool:
    epochs = loader.get("epochs")
    if not loader.get("distributed_sampler") or not isinstance(epochs, list) or len(epochs) < 2:
        return False
    return len(set(map(str, epochs))) == 1


def _number(value: Any) -> bool:
    """A finite number float() can hold (math.isfinite(10**400) raises OverflowError)."""
    return finite_or_none(value) is not None


def _same(planned: float, seen: float) -> bool:
    return math.isclose(planned, seen, rel_tol=1e-6, abs_tol=0.0)


def _show(value: float) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def explaining(findings: list[Finding]) -> list[Finding]:
    """The findings that can explain a run diverging from its single-process partner, most telling first."""
    order = ("no_process_group", "ranks_not_synchronized", "plan_mismatch", "lr_schedule_mismatch",
             "same_samples_across_ranks", "batchnorm_not_synchronized", "uneven_accumulation", "samples_below_plan",
             "uneven_steps_across_ranks")  # fmt: skip
    return sorted((f for f in findings if f.code in order), key=lambda f: order.index(f.code))
