"""Weights & Biases: offline runs under `--to` (no network, no login), which `wandb sync <TARGET>/wandb/offline-run-*`
uploads later (`ddpcli[wandb]`; imported inside the functions).

One W&B run per ddpcli run: project = the experiment file's stem (or the runs folder), name = the experiment's,
id = the ddpcli run id (made safe), config = the params; `samples` is logged in every row and declared the step
metric of every other (`define_metric("*", step_metric="samples")`), so W&B's charts are by samples seen.
Summary: final loss, samples per second, compare's verdict. wandb.log takes no time of the record's, so W&B's own
`_timestamp` is the export's clock; the record's wall time is logged as the scalar `wall_time`.

Only finished runs are exported: a W&B offline run cannot be appended to by a later export, so a `running` run is
left for the export after it ends (said in a warning). The ledger `ddpcli-wandb.json` in the target holds which
runs were written. Nothing half-written: each run is written under a temporary folder of the target and its
`offline-run-*` folder moved into `<TARGET>/wandb/` once `finish()` returned.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from ddpcli.errors import UserError
from ddpcli.export.ledger import Exported, done, work
from ddpcli.export.names import component
from ddpcli.export.points import OPTIMIZER_STEP
from ddpcli.export.runs import ExportRun, Skipped
from ddpcli.jsonvalues import write_json_atomic

LEDGER = "ddpcli-wandb.json"
STEP_METRIC = "samples"
TMP_PREFIX = ".ddpcli-export-"


def export(run: ExportRun, target: Path) -> str:
    if not run.finished:
        raise Skipped(f"{run.name} ({run.run_id}) is still running: exported to W&B once it ended")
    ledger = _read_ledger(target)
    earlier = Exported.from_json(ledger.get(run.run_id), run.run_id)
    job = work(run, earlier)
    if earlier is not None:
        return "up to date"
    staging = Path(tempfile.mkdtemp(prefix=TMP_PREFIX, dir=target))
    try:
        written = _write_run(run, staging)
        (target / "wandb").mkdir(exist_ok=True)
        destination = target / "wandb" / written.name
        os.rename(written, destination)
        ledger[run.run_id] = {**done(run, earlier, job).as_json(run.run_id), "folder": destination.name}
        write_json_atomic(target / LEDGER, ledger)
    except OSError as error:
        raise UserError(f"cannot write {target}: {error.strerror or error}") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return f"{len(job.new_points)} points, its end"


def _write_run(run: ExportRun, staging: Path) -> Path:
    import wandb

    os.environ.setdefault("WANDB_SILENT", "true")
    settings = wandb.Settings(mode="offline", silent=True, console="off", x_disable_stats=True, x_disable_meta=True)
    handle = wandb.init(project=run.group, name=run.name, id=component(run.run_id).replace("%", "_"), dir=staging,
                        mode="offline", config=dict(run.params), settings=settings, reinit="create_new")  # fmt: skip
    try:
        handle.define_metric(STEP_METRIC)
        handle.define_metric("*", step_metric=STEP_METRIC)
        for point in run.points:
            handle.log({STEP_METRIC: point.samples, "wall_time": point.wall_time, **point.values})
        handle.summary.update(_summary(run))
    finally:
        handle.finish(exit_code=0 if run.status == "completed" else 1)
    folders = sorted((staging / "wandb").glob("offline-run-*"))
    if len(folders) != 1:
        raise UserError(f"W&B wrote {len(folders)} offline runs for {run.run_id} (expected one); nothing moved")
    return folders[0]


def _summary(run: ExportRun) -> dict[str, Any]:
    summary: dict[str, Any] = {**run.final, "status": run.status, "verdict": run.verdict_line}
    summary.update({f"ddpcli_{key}": value for key, value in run.tags.items()})
    summary["ddpcli_run_id"] = run.run_id
    if run.points and OPTIMIZER_STEP in run.points[-1].values:
        summary[OPTIMIZER_STEP] = run.points[-1].values[OPTIMIZER_STEP]
    return summary


def _read_ledger(target: Path) -> dict[str, Any]:
    try:
        data = json.loads((target / LEDGER).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as error:
        raise UserError(f"{target / LEDGER}: cannot read it ({error}); move it away to export again") from None
    return data if isinstance(data, dict) else {}
