"""What compare finds between runs, beyond each run's own findings: an lr schedule that ran differently from the
baseline's or the equivalence partner's (ddpcli.diagnosis.schedule), and throughput counted per model for a run
whose processes each trained a model of their own (`observed.data_parallel_size`)."""

from __future__ import annotations

from ddpcli.diagnosis.compared import ComparedRun, RunSummary
from ddpcli.diagnosis.framework_advice import scheduler_per_process_cause, schedulers_seen
from ddpcli.diagnosis.schedule import ScheduleMismatch, compare_schedules, points
from ddpcli.jsonvalues import finite_or_none, whole_or_none
from ddpcli.rundir.record import Finding

LR_SCHEDULE_MISMATCH = "lr_schedule_mismatch"
# Findings that mark a run `!` in compare's table: what it trained on is not what its numbers say.
MARKED_CODES = frozenset({"plan_mismatch", LR_SCHEDULE_MISMATCH, "uneven_accumulation", "samples_below_plan"})


def separate_models(run: ComparedRun) -> int:
    """How many models the run's processes trained: world size / data_parallel_size (1 when unknown)."""
    observed = run.record.observed
    world = run.world_size
    data_parallel = observed.data_parallel_size if observed is not None else None
    if not world or not data_parallel or data_parallel >= world or world % data_parallel:
        return 1
    return world // data_parallel


def per_model(samples_per_s: float | None, run: ComparedRun) -> float | None:
    """Samples per second that trained one model."""
    models = separate_models(run)
    return samples_per_s / models if samples_per_s is not None and models > 1 else samples_per_s


def separate_models_note(label: str, run: ComparedRun) -> list[str]:
    """The note under the table for a run whose processes trained separate models."""
    models = separate_models(run)
    if models <= 1:
        return []
    observed = run.record.observed
    size = observed.data_parallel_size if observed is not None else None
    return [
        f"{label}: its {run.world_size} processes trained {models} separate models (data_parallel_size {size}): "
        "samples/s is one model's, and no speedup is shown."
    ]


def schedule_findings(run: RunSummary, references: list[tuple[RunSummary, str]]) -> list[Finding]:
    """lr_schedule_mismatch against the first of the references (the baseline, then the equivalence partner) that
    runs the same program and whose schedule the run's does not follow."""
    for reference, label in references:
        if reference is run or not same_program(run.record, reference.record):
            continue
        finding = schedule_finding(run, reference, label)
        if finding is not None:
            return [finding]
    return []


def same_program(first: ComparedRun, second: ComparedRun) -> bool:
    """Both ran one script or module (schedules of different programs may differ on purpose)."""
    mine = (first.record.launch.get("script"), first.record.launch.get("module"))
    theirs = (second.record.launch.get("script"), second.record.launch.get("module"))
    return any(mine) and mine == theirs


def schedule_finding(run: RunSummary, reference: RunSummary, label: str) -> Finding | None:
    ratio = _lr_ratio(run.record, reference.record)
    scale = _samples_scale(run, reference)
    if ratio is None or scale is None or not _same_planned_warmup(run.record, reference.record):
        return None
    mismatch = compare_schedules(
        points(run.metrics.lr_points, scale),
        reference.metrics.schedule_points,
        ratio,
        preferred=_likely_factors(run.record, reference.record),
    )
    if mismatch is None:
        return None
    return Finding(
        code=LR_SCHEDULE_MISMATCH, severity="warning", reference=label, factor=mismatch.factor,
        steps=mismatch.steps, steps_off=mismatch.steps_off, zero_steps=mismatch.zero_steps,
        message=_message(mismatch, run.record, reference.record, label, ratio),
    )  # fmt: skip


def _likely_factors(run: ComparedRun, reference: ComparedRun) -> list[float]:
    """Speeds a schedule usually runs at by mistake: once per process, once per micro-batch (or the reference
    did), once per epoch where the reference steps per step."""
    ratios = [
        _ratio(run.world_size, reference.world_size),
        _ratio(run.grad_accum_steps, reference.grad_accum_steps),
        _ratio(reference.grad_accum_steps, run.grad_accum_steps),
        whole_or_none(run.record.plan.get("steps_per_epoch")),
    ]
    factors = [float(ratio) for ratio in ratios[:2] if ratio and ratio > 1]
    return factors + [1 / ratio for ratio in ratios[2:] if ratio and ratio > 1]


def _lr_ratio(run: ComparedRun, reference: ComparedRun) -> float | None:
    """The planned lr ratio; the observed base lrs' where a plan has no lr."""
    ours, its = run.record, reference.record
    pairs = [
        (ours.plan.get("lr"), its.plan.get("lr")),
        (ours.observed and ours.observed.lr_base, its.observed and its.observed.lr_base),
    ]
    if _not_taken(run, "lr") or _not_taken(reference, "lr"):  # the script kept its own lr: compare what ran
        pairs.reverse()
    for mine, theirs in pairs:
        mine, theirs = finite_or_none(mine), finite_or_none(theirs)
        if mine and theirs and mine > 0 and theirs > 0:
            return mine / theirs
    return None


def _samples_scale(run: RunSummary, reference: RunSummary) -> float | None:
    """What the run's samples are divided by to line up with the reference's: the ratio of the samples their
    plans hold (equal for runs planned from one baseline; 1 without them).

    Where either run's processes trained separate models, its rows count one model's samples and its plan (of one
    data-parallel model) holds none of them: mnist/main.py unchanged at 4 x 16 takes its 16 steps an epoch over the
    whole data in each process. Then the samples both runs saw line them up, where both ran to the end."""
    if separate_models(run.record) > 1 or separate_models(reference.record) > 1:
        mine, theirs = run.metrics.samples_seen, reference.metrics.samples_seen
        ended = run.record.status == "completed" and reference.record.status == "completed"
        return mine / theirs if ended and mine and theirs else None
    mine, theirs = _planned_samples(run.record), _planned_samples(reference.record)
    return mine / theirs if mine and theirs else 1.0


def _same_planned_warmup(run: ComparedRun, reference: ComparedRun) -> bool:
    """The plans' warmups cover the same share of their runs, give or take a step (ddpcli rounds warmup steps up):
    a warmup planned differently is a schedule that differs on purpose."""
    shares = []
    for each in (run, reference):
        plan = each.record.plan
        warmup, steps = whole_or_none(plan.get("warmup_steps")), whole_or_none(plan.get("total_steps"))
        if warmup is None or not steps:
            return True  # nothing planned to tell
        shares.append((warmup / steps, 1 / steps))
    (mine, my_step), (theirs, their_step) = shares
    return abs(mine - theirs) <= max(my_step, their_step) + 1e-12


def _planned_samples(run: ComparedRun) -> int | None:
    """The plan's steps x its global batch, or x the global batch the run observed where the script made its own
    (build-nanogpt derives its accumulation from the world size: same tokens per step at every world size)."""
    plan, observed = run.record.plan, run.record.observed
    steps, batch = whole_or_none(plan.get("total_steps")), whole_or_none(plan.get("global_batch_size"))
    if _not_taken(run, "global_batch_size") and observed is not None and observed.global_batch_size:
        batch = observed.global_batch_size
    return steps * batch if steps and batch else None


def _not_taken(run: ComparedRun, field: str) -> bool:
    """The run has a plan_mismatch on `field`: the script did not take that number from the plan."""
    return any(finding.code == "plan_mismatch" and finding.field == field for finding in run.record.findings)


def _message(mismatch: ScheduleMismatch, run: ComparedRun, reference: ComparedRun, label: str, ratio: float) -> str:
    k = mismatch.factor
    if k is None:
        head = f"the lr schedule is not {label}'s"
    elif k > 1:
        head = f"the lr schedule advanced {k:.3g}x as fast as {label}'s"
    else:
        head = f"the lr schedule advanced {1 / k:.3g}x slower than {label}'s"
    scaled = f", lr scaled by the planned {ratio:.3g}" if abs(ratio - 1) > 1e-9 else ""
    body = (
        f"{mismatch.steps_off} of {mismatch.steps} optimizer steps ran an lr that {label}'s schedule does not give "
        f"at the same share of the planned samples{scaled}"
    )
    if mismatch.zero_steps:
        body += (
            f"; {mismatch.zero_steps} steps ran at lr 0 (from step {mismatch.first_zero}) where {label}'s did not: "
            "the schedule ended early"
        )
    return f"{head}: {body}; {_cause(k, run, reference, label)}"


def _cause(k: float | None, run: ComparedRun, reference: ComparedRun, label: str) -> str:
    """The usual cause of a schedule running at that speed, from what differs between the two runs."""
    if k is None:
        return "it is no faster or slower copy of it: compare how the two build and step their schedulers"
    whole = round(k) if k > 1 and abs(k - round(k)) < 1e-6 else None
    processes = _ratio(run.world_size, reference.world_size)
    accumulation = _ratio(run.grad_accum_steps, reference.grad_accum_steps)
    causes = []
    frameworks = run.record.observed.frameworks if run.record.observed is not None else None
    per_process = scheduler_per_process_cause(frameworks)
    if whole is not None and whole == processes and per_process:  # only where accelerate stepped a scheduler
        causes.append(per_process)
    if whole is not None and whole == accumulation:
        causes.append(
            "a scheduler stepped once per micro-batch instead of once per optimizer step: step it where the "
            "optimizer steps"
        )
    slower = round(1 / k) if k < 1 and abs(1 / k - round(1 / k)) < 1e-6 else None
    if slower is not None and slower == whole_or_none(run.record.plan.get("steps_per_epoch")):
        causes.append(
            f"a scheduler stepped once per epoch ({slower} steps) where {label}'s steps once per optimizer step: "
            "step both the same way"
        )
    if slower is not None and slower == _ratio(reference.grad_accum_steps, run.grad_accum_steps):
        causes.append(f"{label} stepped its scheduler once per micro-batch, this run once per optimizer step")
    if causes:
        return "; or ".join(causes)
    seen = schedulers_seen(frameworks, run.record.observed.optimizer_steps if run.record.observed else None)
    if seen:
        return f"{seen}: check where the lr is set or scheduler.step() is called, and the length it was built with"
    if k < 1:
        return (
            f"it was stepped less often than {label}'s (per epoch where the other steps per step?) or given a "
            "longer length: check where scheduler.step() is called and the length it was built with"
        )
    return "check where scheduler.step() is called and the length it was built with"


def _ratio(mine: int | None, theirs: int | None) -> int | None:
    return mine // theirs if mine and theirs and mine % theirs == 0 else None
