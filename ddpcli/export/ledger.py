"""What an earlier export wrote, so that exporting again is safe: no run and no point twice.

Every viewer keeps, beside the run it wrote, the ddpcli run id, the status it exported and the last samples seen
it wrote (TensorBoard: `ddpcli-export.json` in the run's folder; MLflow: tags on the run; W&B: `ddpcli-wandb.json`
in the target). A run is up to date when its status is the one exported, it has no row past those samples and
compare's verdict is the one exported; a run exported while `running` gets its remaining rows, and its final params,
status and verdict, once it ended; a finished run whose verdict changed (its single-process partner ended after it,
as under `launch --export`) gets the new verdict.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ddpcli.export.points import Point, after
from ddpcli.export.runs import UNFINISHED, ExportRun
from ddpcli.jsonvalues import finite_or_none, text_or_none, whole_or_none

LEDGER_VERSION = 1


@dataclass(frozen=True)
class Exported:
    """An earlier export of one run: its status then, the last samples it wrote, how many exports wrote it, and the
    verdict it wrote (None before the run's end was written)."""

    status: str
    samples: int | None
    exports: int = 1
    verdict: str | None = None

    def as_json(self, run_id: str) -> dict[str, Any]:
        return {"version": LEDGER_VERSION, "run_id": run_id, "status": self.status, "samples": self.samples,
                "exports": self.exports, "verdict": self.verdict}  # fmt: skip

    @classmethod
    def from_json(cls, data: Any, run_id: str) -> Exported | None:
        """The entry, when it is one of this run (a foreign or damaged entry is None: the caller says so)."""
        if not isinstance(data, dict) or data.get("run_id") != run_id or not isinstance(data.get("status"), str):
            return None
        samples = finite_or_none(data.get("samples"))
        exports = whole_or_none(data.get("exports")) or 1
        verdict = text_or_none(data.get("verdict"))
        return cls(data["status"], None if samples is None else round(samples), exports, verdict)


@dataclass(frozen=True)
class Work:
    """What this export writes of a run: the points not yet written, and whether the run's end (hparams, final
    metrics, verdict, viewer status) is written now."""

    new_points: list[Point]
    write_end: bool
    sequence: int  # 1 for the first export of the run, then 2, ...
    write_verdict: bool = False  # the run's end was written before, with another verdict than compare's now

    @property
    def nothing(self) -> bool:
        return not self.new_points and not self.write_end and not self.write_verdict

    @property
    def words(self) -> str:
        """What this export wrote of the run, in a few words (a line of the command's output)."""
        if self.write_verdict and not self.new_points:
            return "its new verdict"
        return f"{len(self.new_points)} points" + (", its end" if self.write_end else "")


def work(run: ExportRun, earlier: Exported | None) -> Work:
    """What is left to write of `run` after `earlier` (None: never exported)."""
    if earlier is None:
        return Work(list(run.points), run.finished, 1)
    ended_since = earlier.status in UNFINISHED and run.finished
    verdict_since = run.finished and not ended_since and earlier.verdict != run.verdict_line
    return Work(after(run.points, earlier.samples), ended_since, earlier.exports + 1, verdict_since)


def done(run: ExportRun, earlier: Exported | None, job: Work) -> Exported:
    """The ledger entry once `job` is written."""
    last = job.new_points[-1].samples if job.new_points else (earlier.samples if earlier else None)
    exports = job.sequence if not job.nothing else (earlier.exports if earlier else 1)
    return Exported(run.status, last, exports, run.verdict_line if run.finished else None)
