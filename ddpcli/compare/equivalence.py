"""Parameter equivalence: which single-process run a multi-process run must match, and the difference between their
final parameters (the verdict on it is ddpcli.diagnosis.equivalence's). Parameter files need torch, so the core
never reads them: the caller passes the reader (`ddpcli.rundir.params.param_diff`, which imports torch only when two
files really have to be compared)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ddpcli.compare.metrics import RunSummary
from ddpcli.compare.runs import ComparedRun
from ddpcli.rundir.layout import PARAMS_FILE
from ddpcli.rundir.param_diff import ParamDiff, ParamDiffFn

DEFAULT_ATOL = 1e-5


def find_partner(run: RunSummary, others: Sequence[RunSummary]) -> RunSummary | None:
    """The single-process run a multi-process run must match: same global batch, lr (math.isclose) and steps.

    Among several, prefer one with final_params.pt, then a completed one, then the same seed, the same
    experiment file, and the newest.
    """
    record = run.record
    if not record.world_size or record.world_size <= 1 or record.global_batch_size is None or record.lr is None:
        return None
    candidates = [
        other
        for other in others
        if other.record.world_size == 1
        and other.record.global_batch_size == record.global_batch_size
        and other.record.lr is not None
        and math.isclose(other.record.lr, record.lr)
        and _same_steps(run, other)
    ]
    if not candidates:
        return None
    return max(candidates, key=lambda other: _partner_preference(record, other))


def _same_steps(run: RunSummary, other: RunSummary) -> bool:
    """Same planned total_steps when both plans have one; two completed runs must also have done as many steps.

    The plan decides the pairing, so a run that failed early still finds its partner (and the note then says its
    parameters could not be compared) instead of looking unpaired.
    """
    mine, theirs = run.record.total_steps, other.record.total_steps
    planned = mine is not None and theirs is not None
    if planned and mine != theirs:
        return False
    both_done = run.record.status == "completed" and other.record.status == "completed"
    if (both_done or not planned) and run.metrics.steps is not None and other.metrics.steps is not None:
        return run.metrics.steps == other.metrics.steps
    return True


def _partner_preference(run: ComparedRun, other: RunSummary) -> tuple[Any, ...]:
    mine, theirs = run.keys, other.record.keys
    return (
        other.record.has_params,
        theirs.status == "completed",
        theirs.seed == mine.seed,
        theirs.experiment_file == mine.experiment_file,
        theirs.run_id,
    )


def compare_params(run: ComparedRun, partner: ComparedRun, diff_fn: ParamDiffFn | None = None) -> ParamDiff:
    """Compare final parameters with `diff_fn` (ddpcli.rundir.params.param_diff) when both files exist; without a
    reader the parameters are not compared, and the diff says so rather than inventing a number."""
    for record in (run, partner):
        if not record.params_path.is_file():
            return ParamDiff(error=f"{record.name} has no {PARAMS_FILE} ({record.status}) in {record.run_dir}")
    if diff_fn is None:
        return ParamDiff(error="final parameters not compared (no parameter reader given)")
    return diff_fn(run.params_path, partner.params_path)
