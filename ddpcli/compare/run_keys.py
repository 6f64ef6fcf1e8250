"""What compare needs of a run before its row is built: the numbers it sorts, pairs and picks the baseline by.

Worked out once from run.json (`RunKeys.of`) and kept in summary.json beside the metrics summary
(ddpcli.compare.summary_cache), so a later compare reads a few hundred bytes per run to choose and order its runs,
and parses each run.json once, when that run's row is built, then lets it go. Batch numbers, lr and steps are what
the run did (`observed`) where the observer saw it, else the plan's; `observed_from_run` says which it is.
"""

from __future__ import annotations

import math
import sys
from dataclasses import asdict, dataclass, fields
from typing import Any

from ddpcli.jsonvalues import finite_or_none
from ddpcli.rundir.record import RunRecord

OPTIONAL_INT = frozenset({int, type(None)})
OPTIONAL_STR = frozenset({str, type(None)})
JSON_SCALARS = frozenset({int, float, str, bool, type(None)})


@dataclass(frozen=True, slots=True)
class RunKeys:
    name: str
    status: str
    run_id: str
    started_at: str
    observed_from_run: bool
    world_size: int | None  # the processes launched (torchrun's), whether or not they trained one model together
    per_device_batch_size: int | None
    grad_accum_steps: int | None
    global_batch_size: int | None
    total_steps: int | None
    lr: float | None  # the base lr the run was given (a scheduler's initial_lr), else its peak, else the plan's
    experiment_file: str | None
    experiment_file_sha256: str | None
    scaling: str | None  # the plan's (`baseline` marks the baseline run)
    seed: int | float | str | bool | None  # the plan's (partners with the same seed are preferred)
    restarts: int

    @classmethod
    def of(cls, record: RunRecord) -> RunKeys:
        """The keys of a record as compare shows it (its name filled in, `lost` for a run whose launcher is gone)."""
        observed = record.observed
        from_run = observed is not None and observed.optimizer_steps not in (None, 0)
        seen = observed if from_run else None

        def batch(key: str) -> int | None:
            value = getattr(seen, key) if seen is not None else None
            return value if value is not None else _int_or_none(record.plan.get(key))

        lr = finite_or_none(record.plan.get("lr"))
        if seen is not None and (seen.lr_base if seen.lr_base is not None else seen.lr_peak) is not None:
            lr = finite_or_none(seen.lr_base if seen.lr_base is not None else seen.lr_peak)
        steps = _int_or_none(record.plan.get("total_steps"))
        if seen is not None and record.status == "completed":
            steps = seen.optimizer_steps
        seed = record.plan.get("seed")
        return cls(
            name=record.name,
            status=record.status,
            run_id=record.run_id,
            started_at=record.started_at or "",
            observed_from_run=from_run,
            world_size=(seen.processes if seen is not None else None) or batch("world_size"),
            per_device_batch_size=batch("per_device_batch_size"),
            grad_accum_steps=batch("grad_accum_steps"),
            global_batch_size=batch("global_batch_size"),
            total_steps=steps,
            lr=lr,
            experiment_file=_shared(record.experiment_file),
            experiment_file_sha256=_shared(record.experiment_file_sha256),
            scaling=_shared(record.plan.get("scaling") if isinstance(record.plan.get("scaling"), str) else None),
            seed=seed if type(seed) in JSON_SCALARS and not (type(seed) is float and not math.isfinite(seed)) else None,
            restarts=record.restarts,
        )

    def as_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, values: Any) -> RunKeys | None:
        """The keys summary.json kept, or None when anything is missing or of another type than `of` makes."""
        if not isinstance(values, dict) or values.keys() != NAMES:
            return None
        for name, allowed in TYPES.items():
            if type(values[name]) not in allowed:
                return None
        if not all(math.isfinite(values[name]) for name in ("lr", "seed") if type(values[name]) is float):
            return None  # `of` keeps no NaN (nor does strict JSON): a file that has one was not written by it
        return cls(**{name: _shared(value) if name in SHARED else value for name, value in values.items()})


def _int_or_none(value: Any) -> int | None:
    """A JSON integer (not a bool, not a float), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _shared(value: Any) -> Any:
    """One string object for a value every run of a sweep repeats (its experiment file, its hash)."""
    return sys.intern(value) if isinstance(value, str) else value


NAMES = frozenset(field.name for field in fields(RunKeys))
SHARED = frozenset({"experiment_file", "experiment_file_sha256", "scaling"})
TYPES = {
    "name": {str}, "status": {str}, "run_id": {str}, "started_at": {str}, "observed_from_run": {bool},
    "world_size": OPTIONAL_INT, "per_device_batch_size": OPTIONAL_INT, "grad_accum_steps": OPTIONAL_INT,
    "global_batch_size": OPTIONAL_INT, "total_steps": OPTIONAL_INT, "lr": {float, int, type(None)},
    "experiment_file": OPTIONAL_STR, "experiment_file_sha256": OPTIONAL_STR, "scaling": OPTIONAL_STR,
    "seed": JSON_SCALARS, "restarts": {int},
}  # fmt: skip
