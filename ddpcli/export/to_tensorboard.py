"""TensorBoard: event files under `<TARGET>/<experiment>/<run id>/`, one folder per ddpcli run, written with
tensorboardX (imported here, inside the functions: `ddpcli[tensorboard]`).

Each row is one event at step = samples seen, holding every scalar of the row; the run's end adds the HPARAMS tab's
session (params, final loss and samples per second) and a text tag with compare's verdict. Nothing is half-written:
an export writes its event file in a temporary folder inside the target and moves it into place when it is complete
(a new run's whole folder is renamed in, with its ledger `ddpcli-export.json`); an export that fails leaves the
target as it was.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from ddpcli.errors import UserError
from ddpcli.export.ledger import Exported, Work, done, work
from ddpcli.export.names import component
from ddpcli.export.points import Point
from ddpcli.export.runs import ExportRun
from ddpcli.jsonvalues import write_json_atomic

LEDGER = "ddpcli-export.json"
TMP_PREFIX = ".ddpcli-export-"
VERDICT_TAG = "ddpcli/verdict"


def run_folder(target: Path, run: ExportRun) -> Path:
    return target / component(run.name) / component(run.run_id)


def export(run: ExportRun, target: Path) -> str:
    """Write what is new of `run` under `target`; returns what was done, in a few words."""
    folder = run_folder(target, run)
    earlier = _earlier(folder, run)
    job = work(run, earlier)
    if job.nothing:
        return "up to date"
    staging = Path(tempfile.mkdtemp(prefix=TMP_PREFIX, dir=target))
    try:
        events = staging / "run"
        _write_events(events, run, job)
        entry = done(run, earlier, job).as_json(run.run_id)
        if earlier is None:
            write_json_atomic(events / LEDGER, entry)
            folder.parent.mkdir(parents=True, exist_ok=True)
            os.rename(events, folder)  # a new run appears whole, or not at all
        else:
            for event_file in events.iterdir():
                os.replace(event_file, folder / event_file.name)
            write_json_atomic(folder / LEDGER, entry)
    except OSError as error:
        raise UserError(f"cannot write {folder}: {error.strerror or error}") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return job.words


def _earlier(folder: Path, run: ExportRun) -> Exported | None:
    if not folder.exists():
        return None
    try:
        data = json.loads((folder / LEDGER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        data = None
    earlier = Exported.from_json(data, run.run_id)
    if earlier is None:
        raise UserError(f"{folder} exists and was not written by ddpcli export for run {run.run_id}; left as it is")
    return earlier


def _write_events(folder: Path, run: ExportRun, job: Work) -> None:
    from tensorboardX import FileWriter
    from tensorboardX.proto.summary_pb2 import Summary

    folder.mkdir()
    # The suffix keeps each export's file apart (event file names hold the time in whole seconds).
    writer = FileWriter(str(folder), max_queue=1000, flush_secs=3600, filename_suffix=f".{job.sequence}")
    try:
        for point in job.new_points:
            writer.add_summary(_summary(Summary, point), global_step=point.samples, walltime=point.wall_time)
        if job.write_end:
            _write_end(writer, run)
        elif job.write_verdict:  # the verdict changed since the end was written: the text tag again, at the end
            from tensorboardX.summary import text

            step = run.points[-1].samples if run.points else 0
            writer.add_summary(text(VERDICT_TAG, run.verdict_line), global_step=step, walltime=_end_wall(run))
    finally:
        writer.close()


def _summary(summary_class: Any, point: Point) -> Any:
    values = [summary_class.Value(tag=tag, simple_value=value) for tag, value in point.values.items()]
    return summary_class(value=values)


def _write_end(writer: Any, run: ExportRun) -> None:
    """The HPARAMS tab's session (params and the final metrics' tags) and compare's verdict as text."""
    from tensorboardX.proto.summary_pb2 import Summary
    from tensorboardX.summary import hparams, text

    step, wall = run.points[-1].samples if run.points else 0, _end_wall(run)
    metric_tags = {f"hparams/{key}": value for key, value in run.final.items()}
    experiment, session_start, session_end = hparams(run.params, metric_tags)
    for summary in (experiment, session_start, session_end):
        writer.add_summary(summary, global_step=step, walltime=wall)
    values = [Summary.Value(tag=tag, simple_value=value) for tag, value in metric_tags.items()]
    writer.add_summary(Summary(value=values), global_step=step, walltime=wall)
    writer.add_summary(text(VERDICT_TAG, run.verdict_line), global_step=step, walltime=wall)


def _end_wall(run: ExportRun) -> float:
    return run.ended_at if run.ended_at is not None else (run.points[-1].wall_time if run.points else run.started_at)
