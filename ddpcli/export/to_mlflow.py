"""MLflow: one MLflow experiment per experiment file (or runs folder), one MLflow run per ddpcli run, named after
its experiment, through MlflowClient on the tracking URI given (`ddpcli[mlflow]`: mlflow-skinny with sqlalchemy
and alembic, so a `sqlite:///sweep.db` store works; imported inside the functions).

Metrics go through `log_batch` at step = samples seen with the records' timestamps; params are written once, with
the run (MLflow's params cannot change), so `status` is a tag (`ddpcli.status`) and the MLflow run's own status
(FINISHED for completed, FAILED for failed, timed_out, interrupted or lost; RUNNING while the ddpcli run is).
The earlier export is found by the tag `ddpcli.run_id`; `ddpcli.exported_samples` is the last samples it wrote.
Nothing half-written: the store is reached and the experiment found before any run is created, and a new run
whose writing fails is deleted (MLflow's soft delete: `mlflow gc` removes it for good), so no partial run shows.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ddpcli.errors import UserError
from ddpcli.export.ledger import Exported, done, work
from ddpcli.export.lock import held
from ddpcli.export.names import component
from ddpcli.export.runs import ExportRun

RUN_ID_TAG, STATUS_TAG = "ddpcli.run_id", "ddpcli.status"
SAMPLES_TAG, EXPORTS_TAG = "ddpcli.exported_samples", "ddpcli.exports"
VERDICT_LINE_TAG = "ddpcli.verdict_line"
LOCK_SUFFIX = ".ddpcli-lock"
BATCH = 1000  # MLflow's limit of metrics a log_batch call
VIEWER_STATUS = {"completed": "FINISHED", "running": "RUNNING"}  # anything else ended badly: FAILED


class Store:
    """A tracking store, reached once: a URI MLflow refuses is one line (exit 2), before anything is written.

    A SQLite store is written under the lock `<file>.ddpcli-lock` beside it (ddpcli.export.lock), so that two
    exports at once make one MLflow run per ddpcli run and one set of tables; a SQLite store that does not exist yet
    is made only when there is a run to write (its folder is checked now), and an existing one is reached under the
    lock when a lock file is there (an export may be making its tables). A tracking server has no lock: two exports
    at once into one server can each make a run of the same ddpcli run (nor has a folder of files, which MLflow 3.18
    refuses as a store).
    """

    def __init__(self, uri: str, notify: Callable[[str], None] = lambda message: None) -> None:
        # MLflow retries an unreachable server 7 times with backoff (minutes) by default: one quick try and a 20 s
        # timeout say so at once; the user's own settings of these variables win. MLflow's INFO lines ("Creating
        # initial MLflow database tables...") are its own business, not the user's: warnings and errors still show.
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "20")
        self.uri = uri
        self.lock_path = lock_path(uri)
        self._client: Any = None
        self._experiments: dict[str, str] = {}
        database = sqlite_path(uri)
        if database is not None and not database.exists():
            if not database.parent.is_dir():
                raise UserError(f"MLflow refused the tracking URI {uri!r}: no folder {database.parent}")
            return  # made, with its tables, by the first export that has a run to write (under the lock)
        if self.lock_path is not None and self.lock_path.exists():  # no lock file: no export is making its tables
            with held(self.lock_path, uri, notify):
                self.connect()
        else:
            self.connect()

    @property
    def client(self) -> Any:
        if self._client is None:
            self.connect()
        return self._client

    def connect(self) -> None:
        """Reach the store (a new SQLite store's tables are made here: hold the lock)."""
        if self._client is not None:
            return
        quiet = "MLFLOW_LOGGING_LEVEL" not in os.environ
        if quiet:
            os.environ["MLFLOW_LOGGING_LEVEL"] = "WARNING"  # read when mlflow is first imported
        from mlflow.tracking import MlflowClient

        if quiet:
            logging.getLogger("mlflow").setLevel(logging.WARNING)  # mlflow was imported before (launch --export)
        try:
            client = MlflowClient(tracking_uri=self.uri)
            client.search_experiments(max_results=1)
        except Exception as error:  # MLflow raises many kinds for a bad URI or an unreachable server
            raise UserError(f"MLflow refused the tracking URI {self.uri!r}: {_first_line(error)}") from None
        self._client = client

    def experiment_id(self, name: str) -> str:
        if name not in self._experiments:
            found = self.client.get_experiment_by_name(name)
            self._experiments[name] = found.experiment_id if found is not None else self.client.create_experiment(name)
        return self._experiments[name]


def sqlite_path(uri: str) -> Path | None:
    """The file of a `sqlite:///PATH` URI (relative to the working folder; `sqlite:////abs/path.db`)."""
    if not uri.startswith("sqlite:///"):
        return None
    path = uri.removeprefix("sqlite:///").partition("?")[0]
    return Path(path) if path and path != ":memory:" else None


def lock_path(uri: str) -> Path | None:
    """`<file>.ddpcli-lock` beside a SQLite store, named after the file the path reaches (symlinks, `..` and the
    working folder resolved): two spellings of one store take one lock. None for any other store (a tracking
    server, an in-memory one)."""
    database = sqlite_path(uri)
    if database is None or not database.name:
        return None
    store = database.resolve()
    return store.with_name(store.name + LOCK_SUFFIX)


def export(run: ExportRun, store: Store) -> str:
    try:
        return _export(run, store)
    except UserError:
        raise
    except Exception as error:
        raise UserError(f"MLflow at {store.uri}: run {run.run_id}: {_first_line(error)}") from None


def _export(run: ExportRun, store: Store) -> str:
    from mlflow.entities import Metric, Param, RunTag

    client = store.client
    experiment = store.experiment_id(run.group)
    tag_id = component(run.run_id)
    found = client.search_runs([experiment], filter_string=f"tags.`{RUN_ID_TAG}` = '{tag_id}'", max_results=1)
    existing = found[0] if found else None
    earlier = _earlier(existing, run.run_id)
    job = work(run, earlier)
    if job.nothing:
        return "up to date"
    metrics = [Metric(key, value, int(point.wall_time * 1000), point.samples)
               for point in job.new_points for key, value in point.values.items()]  # fmt: skip
    if job.write_end and run.points:
        end_ms = int((run.ended_at or run.points[-1].wall_time) * 1000)
        metrics += [Metric(key, value, end_ms, run.points[-1].samples) for key, value in run.final.items()]
    entry = done(run, earlier, job)
    tags = {RUN_ID_TAG: tag_id, STATUS_TAG: run.status, SAMPLES_TAG: str(entry.samples),
            EXPORTS_TAG: str(entry.exports), "ddpcli.run_dir": str(run.run_dir.resolve()),
            VERDICT_LINE_TAG: run.verdict_line}  # fmt: skip
    tags.update({f"ddpcli.{key}": value for key, value in run.tags.items()})
    if existing is None:
        created = client.create_run(experiment, start_time=int(run.started_at * 1000), run_name=run.name)
        viewer_id = created.info.run_id
    else:
        viewer_id = existing.info.run_id
    try:
        params = [Param(key, str(value)) for key, value in run.params.items() if key != "status"]
        for start in range(0, len(metrics), BATCH):
            client.log_batch(viewer_id, metrics=metrics[start : start + BATCH])
        client.log_batch(viewer_id, params=params if existing is None else [],
                         tags=[RunTag(key, value) for key, value in tags.items()])  # fmt: skip
        if job.write_end:
            end_ms = int(run.ended_at * 1000) if run.ended_at is not None else None
            client.set_terminated(viewer_id, VIEWER_STATUS.get(run.status, "FAILED"), end_time=end_ms)
    except BaseException:
        if existing is None:
            client.delete_run(viewer_id)
        raise
    return job.words


def _earlier(existing: Any, run_id: str) -> Exported | None:
    if existing is None:
        return None
    tags = existing.data.tags
    data = {"run_id": run_id, "status": tags.get(STATUS_TAG), "samples": _number(tags.get(SAMPLES_TAG)),
            "exports": _number(tags.get(EXPORTS_TAG)), "verdict": tags.get(VERDICT_LINE_TAG)}  # fmt: skip
    return Exported.from_json(data, run_id)


def _number(text: str | None) -> float | None:
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None


def _first_line(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[0][:300] if lines else type(error).__name__
