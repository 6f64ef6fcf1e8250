"""Notes in plain words under the table: failures, divergences and their likely causes, unchecked runs, runs from
several experiment files."""

from __future__ import annotations

from collections.abc import Sequence

from ddpcli.diagnosis.compared import ComparedRun, ComparisonRow
from ddpcli.diagnosis.equivalence import DIVERGED
from ddpcli.diagnosis.findings import explaining
from ddpcli.diagnosis.initial import initial_params_cause
from ddpcli.diagnosis.numerics import numeric_regime
from ddpcli.diagnosis.prediction import prediction_note
from ddpcli.diagnosis.run_checks import separate_models_note
from ddpcli.diagnosis.script_notes import beta2_note
from ddpcli.diagnosis.status import status_reason
from ddpcli.diagnosis.throughput import throughput_row_notes
from ddpcli.experiment.outlook import far_above_critical
from ddpcli.rundir.record import Finding

STATUS_WORDS = {
    "failed": "failed", "interrupted": "was interrupted", "timed_out": "timed out", "running": "is running",
    "lost": "was lost",
}  # fmt: skip
# Samplers that deal out the same permutation at every world size, given one seed (so they can match each other).
SHARDING_ALIKE = frozenset({"DistributedSampler"})
PLAN_CAUSES = (  # plan keys that break equivalence when they differ, and what each changes
    ("seed", "the seed (initial weights and data order)"),
    ("dataset_size", "dataset_size (the data)"),
    ("drop_last", "drop_last (which samples an epoch holds)"),
    ("warmup_steps", "warmup_steps (the learning-rate schedule)"),
    ("optimizer", "the optimizer"),
)
NO_FILE = "(no experiment file)"  # the experiment file of runs recorded without one, in the table's head too


class ComparisonNotes:
    """What a reader of the table needs explained (failures, divergences and why, unchecked runs, mixed files), as
    the rows pass, one at a time (each while its record is read): kept by kind, so they come out grouped (every
    failure, then every finding, ...) as from the whole table. The baseline's row comes first."""

    KINDS = 9

    def __init__(self, atol: float, runs: Sequence[ComparedRun]) -> None:
        self.atol = atol
        self._base: ComparisonRow | None = None
        self._kinds: list[list[str]] = [[] for _ in range(self.KINDS)]
        self._files = _file_notes(runs)

    def add(self, row: ComparisonRow) -> None:
        if row.is_baseline and self._base is None:
            self._base = row
        for kind, notes in zip(self._kinds, self._of(row), strict=True):
            kind += notes

    @property
    def notes(self) -> list[str]:
        return [*(note for kind in self._kinds for note in kind), *self._files]

    def _of(self, row: ComparisonRow) -> tuple[list[str], ...]:
        run = row.run.record
        reason = status_reason(run.record)
        status = [f"{row.label} {STATUS_WORDS.get(run.status, f'is {run.status}')}: {reason}."] if reason else []
        return (
            status,
            _finding_notes(row),
            _equivalence_notes(row, self.atol),
            separate_models_note(row.label, run),
            throughput_row_notes(row, self._base),
            _noise_scale_notes(row),
            [note] if (note := beta2_note(row.label, run.record)) else [],
            [note] if (note := prediction_note(row)) else [],
            [note] if (note := shard_scope_note(row)) else [],
        )


def _finding_notes(row: ComparisonRow) -> list[str]:
    """What the observer found: first whether the script followed its plan, then the other warnings."""
    record = row.run.record
    told = explaining(row.findings) if row.verdict == DIVERGED else []  # the divergence note names these
    mismatches = [finding.message for finding in record.plan_mismatches if finding not in told]
    notes = [f"{row.label} did not follow its plan: {'; '.join(mismatches)}."] if mismatches else []
    notes += [
        f"{row.label}: {finding.message} ({finding.code})."
        for finding in row.findings
        if finding.code != "plan_mismatch" and finding.severity != "info" and finding not in told
    ]
    return notes


def _noise_scale_notes(row: ComparisonRow) -> list[str]:
    """What the measured noise scale says about this run's global batch (McCandlish et al. 2018)."""
    b_noise, batch = row.run.noise_scale, row.run.record.global_batch_size
    if b_noise is None or not batch or row.predicted_step_speedup is None or row.data_efficiency is None:
        return []
    if row.is_baseline or abs(row.predicted_step_speedup - 1) < 0.005:
        steps = "needs as many steps as the baseline's"
    else:
        steps = f"should need {row.predicted_step_speedup:.2f}x fewer steps than the baseline's"
    note = (
        f"{row.label}: noise scale {b_noise:.3g}, so global batch {batch} {steps} and uses "
        f"{row.data_efficiency:.0%} of its samples efficiently"
    )
    warning = far_above_critical(batch, b_noise)
    return [note + (f"; {warning}." if warning else ".")]


def shard_scope_note(row: ComparisonRow) -> str | None:
    """What an equivalence verdict means where the run saved shards of its parameters, not the whole of them."""
    diff = row.param_diff
    if diff is None or not diff.scope or row.verdict is None:
        return None
    return f"{row.label}: {row.verdict} against {row.partner_label} over {diff.scope}."


def _equivalence_notes(row: ComparisonRow, atol: float) -> list[str]:
    record = row.run.record
    if not record.world_size or record.world_size <= 1:
        return []
    if row.partner is None:
        return [
            f"{row.label}: no single-process run with global batch {record.global_batch_size}, lr {record.lr:.4g} "
            f"and {row.run.metrics.steps or record.total_steps or 'the same'} steps among these runs, so its "
            "equivalence was not checked."
            if record.lr is not None
            else f"{row.label}: its plan has no lr, so its equivalence was not checked."
        ]
    diff = row.param_diff
    assert diff is not None
    if diff.error:
        return [f"{row.label} could not be checked against {row.partner_label}: {diff.error}."]
    if row.verdict != DIVERGED:
        return []
    return [divergence_note(row, atol)]


def divergence_note(row: ComparisonRow, atol: float) -> str:
    """Why a multi-process run ended with different parameters than its single-process partner, specifically."""
    assert row.partner is not None and row.param_diff is not None
    run, partner = row.run.record, row.partner.record
    diff = row.param_diff
    if diff.mismatch:
        head = f"{row.label} diverged from {row.partner_label}: {diff.mismatch}."
    else:
        head = (
            f"{row.label} diverged from {row.partner_label}: parameters differ by up to {diff.max_abs_diff:.3g} "
            f"(atol {atol:g})."
        )
    causes = divergence_causes(run, partner, row.compare_findings)
    if diff.mismatch:
        # Different tensors or shapes: not the same model at all, which no loss reduction or data order explains;
        # non-finite values: training blew up, which the mismatch already says.
        return " ".join([head, *(f"{cause}." for cause in causes or [_structural(diff.mismatch)])])
    regime = numeric_regime(run, partner) if not causes else None
    if regime is not None:  # before float32 rounding: the observed regime is what rounds coarsest
        small = diff.max_abs_diff is not None and diff.max_abs_diff <= 100 * atol
        causes = [regime] if small else [regime, _unexplained(run, partner)]
    if not causes and diff.max_abs_diff is not None and diff.max_abs_diff <= 100 * atol:
        causes = [
            "The difference is small: summing gradients across processes rounds in a different order than one "
            "large batch, and float32 rounding accumulates over many steps; raise --atol if this is acceptable"
        ]
    if not causes:
        causes = [_unexplained(run, partner)]
    return " ".join([head, *(f"{cause}." for cause in causes)])


def _structural(mismatch: str) -> str:
    """The cause to name when two parameter files do not even hold the same model."""
    if "non-finite" in mismatch:
        return "A learning rate too high for this batch, or a loss that overflowed, is the usual cause"
    return (
        "The two runs did not train the same model: compare their scripts and arguments (run.json's argv), "
        "or the code that builds the model"
    )


def _unexplained(run: ComparedRun, partner: ComparedRun) -> str:
    """The usual suspects, when run.json records no difference between the two runs."""
    observed = run.record.observed
    no_dropout = all(  # seen in both: neither model has a Dropout layer that drops
        side.record.observed is not None and side.record.observed.dropout_layers == 0 for side in (run, partner)
    )
    suspects = [
        "a sum-reduced loss (DDP averages gradients, so each process must use the mean over its own batch)",
        "a different data order (the DistributedSampler shards must together hold the one-device batch of each "
        "step, with the same seed)",
        ("augmentation (or F.dropout)" if no_dropout else "dropout or augmentation")
        + " drawing different random numbers on each rank",
    ]
    no_batchnorm = observed is not None and observed.batchnorm_layers == 0  # seen: the model has none
    if run.per_device_batch_size != partner.per_device_batch_size and not no_batchnorm:
        suspects.append(
            f"BatchNorm layers normalising over {run.per_device_batch_size} samples per device instead of "
            f"{partner.per_device_batch_size} (SyncBatchNorm normalises over all processes)"
        )
    return f"Nothing in the run records explains it; likely causes: {'; '.join(suspects)}"


def divergence_causes(run: ComparedRun, partner: ComparedRun, found: Sequence[Finding] = ()) -> list[str]:
    """Differences recorded in run.json (and `found` by compare between the two) that break equivalence, each in
    words with its numbers."""
    # before any other cause: nothing later makes such runs end alike
    initial = initial_params_cause(run.record, partner.record)
    causes = [initial] if initial else []
    causes += [
        f"{record.name}: {finding.message} ({finding.code})"
        for record, findings in ((run, [*run.record.findings, *found]), (partner, partner.record.findings))
        for finding in explaining(findings)
    ]
    bn = _batchnorm_cause(run, partner)
    if bn and not any(finding.code == "batchnorm_not_synchronized" for finding in run.record.findings):
        causes.append(bn)
    dropout = _dropout_cause(run)
    if dropout:
        causes.append(dropout)
    for key, what in PLAN_CAUSES:
        mine, theirs = run.record.plan.get(key), partner.record.plan.get(key)
        if mine is not None and theirs is not None and mine != theirs:
            causes.append(f"The runs differ in {what}: {mine} vs {theirs}")
    sampler = _sampler_cause(run, partner)
    return [*causes, sampler] if sampler else causes


def _sampler_cause(run: ComparedRun, partner: ComparedRun) -> str | None:
    """Observed samplers of different kinds draw different batches at each step, so the runs cannot end alike."""
    mine = run.record.observed.sampler if run.record.observed is not None else None
    theirs = partner.record.observed.sampler if partner.record.observed is not None else None
    if not mine or not theirs or mine == theirs or {mine, theirs} <= SHARDING_ALIKE:
        return None
    return (
        f"The runs drew their samples differently: {run.name} through {mine}, {partner.name} through {theirs}, so "
        "each step saw other samples (the same sampler and seed at every world size, e.g. a DistributedSampler at "
        "world size 1 too, would make them match)"
    )


def _dropout_cause(run: ComparedRun) -> str | None:
    """Dropout masks are drawn per process: N processes with one seed draw N alike masks, where one process taking
    the whole batch draws one mask over all of it (pytorch/examples mnist at 2 x 32 ended 0.03 away from 1 x 64)."""
    observed = run.record.observed
    layers = observed.dropout_layers if observed is not None else None
    if not layers or not run.world_size or run.world_size <= 1:
        return None
    return (
        f"{run.name}: its model has {layers} Dropout layer(s) with p > 0, and each of its {run.world_size} "
        "processes draws its own dropout masks, which one process taking the whole batch does not draw: the runs "
        "cannot end alike while dropout is on (p = 0 in both runs would check their equivalence)"
    )


def _batchnorm_cause(run: ComparedRun, partner: ComparedRun) -> str | None:
    """BatchNorm normalises over what one forward pass sees: per device, or all devices with SyncBatchNorm."""
    per_device = run.per_device_batch_size
    if per_device is None or partner.per_device_batch_size is None or not run.world_size:
        return None
    sync = run.uses_sync_bn
    seen = per_device * run.world_size if sync else per_device
    if seen == partner.per_device_batch_size:
        return None
    if not run.uses_batchnorm:
        return None  # the generic note still mentions BatchNorm when the per-device batches differ
    where = f"{run.world_size} processes x {per_device} with SyncBatchNorm" if sync else f"{per_device} per device"
    fix = "" if sync else " (its args have --batchnorm without --sync-bn; SyncBatchNorm would normalise over all)"
    return (
        f"BatchNorm statistics differ: {run.name} normalises over {seen} samples ({where}){fix}, "
        f"{partner.name} over {partner.per_device_batch_size}"
    )


def _file_notes(records: Sequence[ComparedRun]) -> list[str]:
    """Runs from several experiment files (or one file edited in between) were planned under different rules."""
    names: dict[str, set[str]] = {}
    hashes: dict[str, set[str]] = {}
    for run in records:
        path = run.keys.experiment_file or NO_FILE
        names.setdefault(path, set()).add(run.name)
        sha256 = run.keys.experiment_file_sha256
        hashes.setdefault(path, set()).update([sha256] if sha256 else [])
    notes = []
    if len(names) > 1:
        groups = "; ".join(f"{path}: {', '.join(sorted(names[path]))}" for path in sorted(names))
        notes.append(f"These runs come from {len(names)} different experiment files ({groups}).")
    notes += [
        f"{path} was edited between these runs (its recorded sha256 differs)."
        for path in sorted(hashes)
        if len(hashes[path]) > 1
    ]
    return notes
