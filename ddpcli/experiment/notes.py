"""Plain-language notes for a resolved run: the answers people look for when they move from 1 GPU to N.

Each note states a fact about this run with its numbers, not generic advice. Sources: PyTorch DDP and
DistributedSampler docs; Goyal et al. 2017 for linear scaling and warmup; Malladi et al. 2022 for Adam's
square-root rule.
"""

from __future__ import annotations

from ddpcli.experiment.resolved import ResolvedRun, RunPlan, samples_kept_warmup

LINEAR_RULE_LIMIT = 32  # Goyal et al. 2017 saw linear scaling hold to 8k from 256 (x32) and fail beyond.


def run_notes(run: ResolvedRun, baseline: ResolvedRun | None) -> list[str]:
    plan = run.plan
    notes = [_epoch_shorter_than_a_step(plan) or _what_a_step_is(plan), *_token_notes(run), *_node_notes(plan),
             *_stand_in_notes(run)]  # fmt: skip
    if baseline is None:
        return notes + _data_notes(plan)
    notes += _scaling_notes(plan, baseline.plan, run.stand_ins)
    notes += _batchnorm_notes(plan, baseline.plan)
    notes += _data_notes(plan)
    notes += _schedule_notes(plan, baseline.plan)
    return notes


def _token_notes(run: ResolvedRun) -> list[str]:
    """A token budget in the script's own unit: a sample is a sequence of `sample_tokens` tokens."""
    if run.sample_tokens is None:
        return []
    tokens = run.plan.global_batch_size * run.sample_tokens
    return [
        f"A sample is a sequence of {run.sample_tokens} tokens: each optimizer step takes {tokens} tokens "
        f"({run.plan.global_batch_size} x {run.sample_tokens}), {run.plan.per_device_batch_size * run.sample_tokens} "
        "per micro-batch per process."
    ]


def _stand_in_notes(run: ResolvedRun) -> list[str]:
    """Values the file holds only for the arithmetic: the script decides them itself, so say whose they are."""
    if not run.stand_ins:
        return []
    values = ", ".join(f"{key} {getattr(run.plan, key)}" for key in run.stand_ins if getattr(run.plan, key) is not None)
    return [
        f"Stand-ins, yours to check or fill in: {values or ', '.join(run.stand_ins)} only stand in for what the "
        "script decides itself (it has no flag for them, so no run receives them)."
    ]


def _what_a_step_is(run: RunPlan) -> str:
    micro = run.per_device_batch_size
    accum = f" x {run.grad_accum_steps} accumulated micro-batches" if run.grad_accum_steps > 1 else ""
    if run.world_size == 1:
        return (
            f"One process takes {micro} samples per micro-batch{accum}: each optimizer step uses the mean "
            f"gradient of {run.global_batch_size} samples."
        )
    nodes = f" ({run.nnodes} nodes x {run.nproc_per_node})" if run.nnodes > 1 else ""
    return (
        f"Each of {run.world_size} processes{nodes} takes {micro} samples per micro-batch{accum}; DDP "
        f"averages the gradients, so each optimizer step uses the mean gradient of "
        f"{run.global_batch_size} samples: the same as batch {run.global_batch_size} on one device for "
        "a mean-reduced loss."
    )


def _epoch_shorter_than_a_step(run: RunPlan) -> str | None:
    """When a process's share of the epoch is less than one step's worth, a step is not the batch planned: it
    is whatever the sampler gave each process (the DataLoader yields a short last batch, the sampler pads)."""
    step_samples = run.per_device_batch_size * run.grad_accum_steps
    if run.dataset_size is None or run.samples_per_rank is None or run.samples_per_rank >= step_samples:
        return None
    used = run.samples_per_rank * run.world_size
    who = "the one process gets" if run.world_size == 1 else f"each of {run.world_size} processes gets"
    share = f"{run.samples_per_rank} sample{'s' if run.samples_per_rank != 1 else ''}"
    repeats = (
        f" ({run.dataset_size} distinct; DistributedSampler repeats {run.padded_samples})" if run.padded_samples else ""
    )
    scaled = (
        f", and the lr scaled for a batch of {run.global_batch_size} is scaled for a batch that never happens"
        if run.scaling in {"linear", "sqrt"} and run.batch_scale != 1
        else ""
    )
    return (
        f"dataset_size {run.dataset_size} is smaller than one global batch of {run.global_batch_size}: {who} "
        f"{share} per epoch, not {step_samples}, so each optimizer step uses the mean gradient of {used} "
        f"samples{repeats}{scaled}."
    )


def _node_notes(run: RunPlan) -> list[str]:
    if not run.is_multi_node:
        return []
    notes = [
        f"nproc_per_node counts processes on each node: {run.nnodes} nodes x {run.nproc_per_node} = world size "
        f"{run.world_size} (torchrun's --nproc-per-node is per node; accelerate's num_processes is the total)."
    ]
    if run.is_elastic:
        notes.append(
            f"Elastic: {run.min_nnodes} to {run.nnodes} nodes. The plan assumes {run.nnodes}; with fewer nodes the "
            "global batch, and so the right lr, is smaller."
        )
    return notes


def _scaling_notes(run: RunPlan, baseline: RunPlan, stand_ins: tuple[str, ...]) -> list[str]:
    notes: list[str] = []
    scale = run.batch_scale
    if run.scaling in {"linear", "sqrt"} and scale != 1:
        factor = scale if run.scaling == "linear" else scale**0.5
        notes.append(
            f"Global batch x{scale:g} of the baseline's {baseline.global_batch_size}: {run.scaling} "
            f"scaling gives lr {baseline.lr:g} x {factor:.4g} = {run.lr:.4g}."
        )
    if run.scaling == "sqrt" and run.optimizer in {"adam", "adamw"} and scale != 1:
        notes.append(
            "For Adam the square-root rule (Malladi et al. 2022) also scales 1 - beta by the batch "
            f"ratio: beta2 0.999 becomes {1 - min(1.0, (1 - 0.999) * scale):.4g}."
        )
    if run.scaling == "none" and scale != 1:
        notes.append(
            f"Global batch x{scale:g} but the lr is kept at {run.lr:g}: with a mean-reduced loss each "
            "step moves as far as before on a less noisy gradient, so training needs more samples."
        )
    if run.scaling == "linear" and scale > 1 and run.warmup_steps == 0 and "warmup_steps" not in stand_ins:
        notes.append(
            "The lr is scaled up with no warmup: Goyal et al. 2017 needed a gradual warmup for "
            "large-batch linear scaling (24.84% vs 23.74% top-1 error at 8k without/with it)."
        )
    if scale > LINEAR_RULE_LIMIT:
        notes.append(
            f"Batch scale {scale:g} is beyond x{LINEAR_RULE_LIMIT}, where the linear rule was seen to "
            "break down (Goyal et al. 2017); expect to tune the lr."
        )
    return notes


def _batchnorm_notes(run: RunPlan, baseline: RunPlan) -> list[str]:
    """Conditional: the plan never sees the model (no torch); a finished run's `batchnorm_layers` says."""
    if run.per_device_batch_size == baseline.per_device_batch_size:
        return []
    if run.world_size == 1 and run.grad_accum_steps == 1:
        return [
            f"If the model has BatchNorm, its statistics come from {run.per_device_batch_size} samples per batch "
            f"instead of the baseline's {baseline.per_device_batch_size}."
        ]
    return [
        "If the model has BatchNorm, its layers see only the per-device micro-batch "
        f"({run.per_device_batch_size}, baseline {baseline.per_device_batch_size}), not the global "
        f"{run.global_batch_size}: their statistics "
        "differ from the baseline's. "
        + (
            "SyncBatchNorm (ddpcli: ctx.sync_batchnorm) computes them over all processes."
            if run.world_size > 1
            else "Accumulated micro-batches are normalised one by one."
        )
    ]


def _data_notes(run: RunPlan) -> list[str]:
    notes: list[str] = []
    if run.padded_samples:
        notes.append(
            f"DistributedSampler pads {run.padded_samples} repeated samples per epoch so "
            f"{run.dataset_size} divides over {run.world_size} processes: metrics computed this way "
            "count them twice. Evaluate without the sampler, or set drop_last."
        )
    if run.dropped_samples:
        notes.append(f"drop_last leaves out {run.dropped_samples} samples per epoch.")
    return notes


def _schedule_notes(run: RunPlan, baseline: RunPlan) -> list[str]:
    notes: list[str] = []
    if run.steps_per_epoch is not None and baseline.steps_per_epoch not in {None, run.steps_per_epoch}:
        notes.append(
            f"An epoch is {run.steps_per_epoch} optimizer steps instead of {baseline.steps_per_epoch}: "
            "schedulers count optimizer steps, so step-based schedules must be rescaled too."
        )
    kept_samples = run.warmup_steps == samples_kept_warmup(baseline, run.global_batch_size)
    if baseline.warmup_steps and run.warmup_steps != baseline.warmup_steps and kept_samples:
        notes.append(
            f"Warmup {run.warmup_steps} steps keeps the baseline's "
            f"{baseline.warmup_steps * baseline.global_batch_size} warmup samples."
        )
    return notes
