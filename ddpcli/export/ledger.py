"""What an earlier export wrote, so that exporting again is safe: no run and no point twice.

Every viewer keeps, beside the run it wrote, the ddpcli run id, the status it exported and the last samples seen
it wrote (TensorBoard: `ddpcli-export.json` in the run's folder; MLflow: tags on the run; W&B: `ddpcli-wandb.json`
in the target). A run is up to date when its status is the one exported and it has no row past those samples; a
run exported while `running` gets its remaining rows, and its final params, status and verdict, once it ended.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ddpcli.export.points import Point, after
from ddpcli.export.runs import UNFINISHED, ExportRun
from ddpcli.jsonvalues import finite_or_none, whole_or_none

LEDGER_VERSION = 1


@dataclass(frozen=True)
class Exported:
    """An earlier export of one run: its status then, the last samples it wrote, how many exports wrote it."""

    status: str
    samples: int | None
    exports: int = 1

    def as_json(self, run_id: str) -> dict[str, Any]:
        return {"version": LEDGER_VERSION, "run_id": run_id, "status": self.status, "samples": self.samples,
                "exports": self.exports}  # fmt: skip

    @classmethod
    def from_json(cls, data: Any, run_id: str) -> Exported | None:
        """The entry, when it is one of this run (a foreign or damaged entry is None: the caller says so)."""
        if not isinstance(data, dict) or data.get("run_id") != run_id or not isinstance(data.get("status"), str):
            return None
        samples = finite_or_none(data.get("samples"))
        exports = whole_or_none(data.get("exports")) or 1
        return cls(data["status"], None if samples is None else round(samples), exports)


@dataclass(frozen=True)
class Work:
    """What this export writes of a run: the points not yet written, and whether the run's end (hparams, final
    metrics, verdict, viewer status) is written now."""

    new_points: list[Point]
    write_end: bool
    sequence: int  # 1 for the first export of the run, then 2, ...

    @property
    def nothing(self) -> bool:
        return not self.new_points and not self.write_end


def work(run: ExportRun, earlier: Exported | None) -> Work:
    """What is left to write of `run` after `earlier` (None: never exported)."""
    if earlier is None:
        return Work(list(run.points), run.finished, 1)
    ended_since = earlier.status in UNFINISHED and run.finished
    return Work(after(run.points, earlier.samples), ended_since, earlier.exports + 1)


def done(run: ExportRun, earlier: Exported | None, job: Work) -> Exported:
    """The ledger entry once `job` is written."""
    last = job.new_points[-1].samples if job.new_points else (earlier.samples if earlier else None)
    exports = job.sequence if not job.nothing else (earlier.exports if earlier else 1)
    return Exported(run.status, last, exports)
