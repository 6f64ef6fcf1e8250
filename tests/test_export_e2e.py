"""`ddpcli export` on runs launched here (gloo, CPU), read back with the viewers' own readers: TensorBoard's
EventAccumulator and MLflow's MlflowClient on a SQLite store; W&B's offline files. Steps must be the records'
samples seen and values the records' own; a second export must add nothing.

The runs are three of the regression sweep's (tests/sweeps.py), launched once per session for several modules with
`--export tensorboard:DIR`: each run exported as it ended, which is read back here too. Each viewer's export runs
as the real command (a subprocess: its imports, its output, its exit code) in one test: W&B's read-back, two MLflow
exports at once into a new SQLite store, two TensorBoard exports at once with a Ctrl-C. Every other export runs in
this process (typer's CliRunner on ddpcli.cli.app.app, on copies of the recorded run folders), which spares an
interpreter's start and the viewers' imports each time."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

import pytest

from tests.conftest import write_toml
from tests.helpers import copy_runs
from tests.sweeps import REGRESSION, regression_root

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """1x16, 1x32 and 2x16 of the regression sweep (tests/sweeps.py, launched once per session), in a folder of
    this module's with the sweep's experiment file."""
    root = regression_root(tmp_path_factory)
    return copy_runs(root, tmp_path_factory.mktemp("export-e2e"), names=("1x16", "1x32", "2x16"))


@pytest.fixture(scope="module")
def empty_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite MLflow store with its tables and no run, made once (making its tables costs MLflow 5-8 s): each
    test that needs a store copies it; a new store's making is tested by two real exports at once."""
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    path = tmp_path_factory.mktemp("mlflow") / "empty.db"
    MlflowClient(f"sqlite:///{path}").search_experiments(max_results=1)
    return path


def store(empty_store: Path, tmp_path: Path, name: str) -> str:
    """A copy of the empty store in tmp_path, as a tracking URI."""
    shutil.copy(empty_store, tmp_path / name)
    return f"sqlite:///{tmp_path / name}"


def ddpcli(cwd: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`python -m ddpcli ARGS` in a fresh interpreter: the real command."""
    return subprocess.run([sys.executable, "-m", "ddpcli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300, check=False, env={**os.environ, **(env or {})})  # fmt: skip


@dataclass(frozen=True)
class Ran:
    returncode: int
    stdout: str
    stderr: str


@contextlib.contextmanager
def inside(folder: Path) -> Iterator[None]:
    """The working folder `folder` for a while (contextlib.chdir, which Python 3.10 lacks)."""
    before = Path.cwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(before)


def export(cwd: Path, *args: str, env: dict[str, str] | None = None) -> Ran:
    """`ddpcli export ARGS` in this process, in `cwd`, with `env` added (the environment as it was afterwards:
    MLflow's variables that export sets do not leak into the next test). A bug's traceback is raised as it is."""
    from typer.testing import CliRunner

    from ddpcli.cli.app import app

    with inside(cwd), mock.patch.dict(os.environ, env or {}):
        result = CliRunner().invoke(app, ["export", *args])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return Ran(result.exit_code, result.stdout, result.stderr)


def records(root: Path) -> dict[str, tuple[str, list[dict]]]:
    """name -> (run id, metrics rows) of every run under root/runs."""
    found = {}
    for run_json in sorted((root / "runs").glob("*/*/run.json")):
        rows = [json.loads(line) for line in (run_json.parent / "metrics.jsonl").read_text().splitlines() if line]
        found[run_json.parent.parent.name] = (run_json.parent.name, rows)
    return found


def copies(runs: Path, root: Path, count: int, rows: int | None = None) -> Path:
    """`count` runs in root/runs, copies of the launched ones under names and run ids of their own (`1x16-03`);
    with `rows`, each has that many metrics rows, continuing the recorded ones (an export long enough to stop)."""
    sources = sorted((runs / "runs").glob("*/*/run.json"))
    for index in range(count):
        source = sources[index % len(sources)].parent
        name, run_id = f"{source.parent.name}-{index:02d}", f"{source.name[:-6]}{index:06x}"
        copy = root / "runs" / name / run_id
        shutil.copytree(source, copy)
        record = json.loads((copy / "run.json").read_text())
        (copy / "run.json").write_text(json.dumps({**record, "name": name, "run_id": run_id,
                                                   "plan": {**record["plan"], "name": name}}))  # fmt: skip
        if rows is not None:
            recorded = [json.loads(line) for line in (copy / "metrics.jsonl").read_text().splitlines() if line]
            last = recorded[-1]
            per_step, step_s = last["samples"] // last["step"], last["time"] / last["step"]
            more = [{**last, "step": last["step"] + k, "samples": last["samples"] + k * per_step,
                     "time": last["time"] + k * step_s} for k in range(1, rows - len(recorded) + 1)]  # fmt: skip
            (copy / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in recorded + more))
    return root / "runs"


def wandb_records(path: Path) -> list[dict]:
    """A .wandb transaction log's records, as wandb's own reader prints them (`wandb leet inspect --json`)."""
    wandb = Path(sys.executable).with_name("wandb")
    result = subprocess.run([str(wandb), "leet", "inspect", "--json", str(path)], capture_output=True, text=True,
                            timeout=120, check=True)  # fmt: skip
    return [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]


def accumulator(folder: Path):  # tensorboard's EventAccumulator
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(folder), size_guidance={"scalars": 0, "tensors": 0})
    events.Reload()
    return events


def test_tensorboard_steps_are_samples_and_values_the_records(runs: Path, tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    from tensorboard.plugins.hparams import metadata

    target = tmp_path / "tb"
    result = export(runs, "tensorboard", "--to", str(target))
    assert result.returncode == 0, result.stderr
    for name, (run_id, rows) in records(runs).items():
        events = accumulator(target / name / run_id)
        loss = events.Scalars("loss")
        assert [event.step for event in loss] == [row["samples"] for row in rows]
        assert [event.value for event in loss] == pytest.approx([row["loss"] for row in rows], rel=1e-6)
        assert [event.value for event in events.Scalars("optimizer_step")] == [row["step"] for row in rows]
        assert [event.value for event in events.Scalars("lr")] == pytest.approx([row["lr"] for row in rows])
        # samples/s between rows, from the records' own samples and times; the first row has none
        rates = [(b["samples"] - a["samples"]) / (b["time"] - a["time"]) for a, b in itertools.pairwise(rows)]
        assert [event.step for event in events.Scalars("samples_per_s")] == [row["samples"] for row in rows[1:]]
        assert [event.value for event in events.Scalars("samples_per_s")] == pytest.approx(rates, rel=1e-5)
        walls = [event.wall_time for event in loss]
        assert walls == sorted(walls) and walls[-1] - walls[0] == pytest.approx(
            rows[-1]["time"] - rows[0]["time"], abs=1e-5
        )
        start = metadata.parse_session_start_info_plugin_data(
            events.PluginTagToContent("hparams")["_hparams_/session_start_info"]
        )
        assert start.hparams["status"].string_value == "completed"
        assert start.hparams["world_size"].number_value == (2 if name == "2x16" else 1)
        assert events.Scalars("hparams/final_loss")[0].value == pytest.approx(rows[-1]["loss"], rel=1e-6)
    verdict = accumulator(target / "2x16" / records(runs)["2x16"][0]).Tensors("ddpcli/verdict/text_summary")
    assert verdict[0].tensor_proto.string_val[0].decode().startswith("equivalent to 1x32")
    before = sorted(str(path) for path in target.rglob("*"))
    again = export(runs, "tensorboard", "--to", str(target))
    assert again.returncode == 0, again.stderr
    assert again.stdout.count("up to date") == 3
    assert sorted(str(path) for path in target.rglob("*")) == before  # no run, no point, no file added


def test_a_running_run_gets_its_remaining_rows_and_its_end(runs: Path, tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    name, (run_id, rows) = "1x32", records(runs)["1x32"]
    copy = tmp_path / "runs" / name / run_id
    shutil.copytree(runs / "runs" / name / run_id, copy)
    record = json.loads((copy / "run.json").read_text())
    (copy / "run.json").write_text(json.dumps({**record, "status": "running", "supervisor_pid": None}))
    (copy / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows[:3]))
    target = tmp_path / "tb"
    first = export(tmp_path, "tensorboard", str(tmp_path / "runs"), "--to", str(target))
    assert first.returncode == 0, first.stderr
    assert [event.step for event in accumulator(target / name / run_id).Scalars("loss")] == [
        row["samples"] for row in rows[:3]
    ]
    shutil.copy(runs / "runs" / name / run_id / "run.json", copy / "run.json")
    shutil.copy(runs / "runs" / name / run_id / "metrics.jsonl", copy / "metrics.jsonl")
    second = export(tmp_path, "tensorboard", str(tmp_path / "runs"), "--to", str(target))
    assert second.returncode == 0, second.stderr
    assert "3 points, its end" in second.stdout
    events = accumulator(target / name / run_id)
    assert [event.step for event in events.Scalars("loss")] == [row["samples"] for row in rows]  # each once
    assert events.Scalars("hparams/final_loss")[0].value == pytest.approx(rows[-1]["loss"], rel=1e-6)


def test_a_verdict_that_came_later_is_written_by_the_next_export(runs: Path, empty_store: Path, tmp_path: Path) -> None:
    """2x16 exported before its single-process partner 1x32 was there (as under `launch --export`), then again."""
    pytest.importorskip("tensorboard")
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    found = records(runs)
    (two_id, two_rows), (one_id, _) = found["2x16"], found["1x32"]
    shutil.copytree(runs / "runs" / "2x16" / two_id, tmp_path / "runs" / "2x16" / two_id)
    target, uri = tmp_path / "tb", store(empty_store, tmp_path, "late.db")
    for viewer, to in (("tensorboard", str(target)), ("mlflow", uri)):
        first = export(tmp_path, viewer, str(tmp_path / "runs"), "--to", to)
        assert first.returncode == 0, first.stderr
    shutil.copytree(runs / "runs" / "1x32" / one_id, tmp_path / "runs" / "1x32" / one_id)
    for viewer, to in (("tensorboard", str(target)), ("mlflow", uri)):
        second = export(tmp_path, viewer, str(tmp_path / "runs"), "--to", to)
        assert second.returncode == 0, second.stderr
        assert f"2x16 {two_id}: its new verdict" in second.stdout
    verdicts = accumulator(target / "2x16" / two_id).Tensors("ddpcli/verdict/text_summary")
    said = [event.tensor_proto.string_val[0].decode() for event in verdicts]
    assert said[0].startswith("no verdict") and said[-1].startswith("equivalent to 1x32")
    assert [event.step for event in accumulator(target / "2x16" / two_id).Scalars("loss")] == [
        row["samples"] for row in two_rows
    ]  # no point written twice
    client = MlflowClient(uri)
    [run] = [run for run in client.search_runs([client.get_experiment_by_name("experiments").experiment_id])
             if run.info.run_name == "2x16"]  # fmt: skip
    assert run.data.tags["ddpcli.verdict"] == "equivalent" and run.data.tags["ddpcli.verdict_line"].startswith(
        "equivalent to 1x32"
    )  # fmt: skip
    assert len(client.get_metric_history(run.info.run_id, "loss")) == len(two_rows)
    third = export(tmp_path, "tensorboard", str(tmp_path / "runs"), "--to", str(target))
    assert third.stdout.count("up to date") == 2


def test_mlflow_sqlite_store_holds_the_records(runs: Path, empty_store: Path, tmp_path: Path) -> None:
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    uri = store(empty_store, tmp_path, "sweep.db")
    result = export(runs, "mlflow", "--to", uri)
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines() == [f"exported 3 of 3 runs to {uri}"], result.stderr
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("experiments")  # the experiment file's stem
    found = {run.info.run_name: run for run in client.search_runs([experiment.experiment_id])}
    expected = records(runs)
    assert set(found) == set(expected)
    for name, (run_id, rows) in expected.items():
        run = found[name]
        assert run.data.tags["ddpcli.run_id"] == run_id and run.info.status == "FINISHED"
        history = sorted(client.get_metric_history(run.info.run_id, "loss"), key=lambda metric: metric.step)
        assert [metric.step for metric in history] == [row["samples"] for row in rows]
        assert [metric.value for metric in history] == [row["loss"] for row in rows]
        assert run.data.params["global_batch_size"] == str(rows[0]["samples"])
    assert found["2x16"].data.tags["ddpcli.verdict"] == "equivalent"
    assert float(found["2x16"].data.tags["ddpcli.max_param_diff"]) <= 1e-5
    again = export(runs, "mlflow", "--to", uri)
    assert again.returncode == 0, again.stderr
    runs_after = client.search_runs([experiment.experiment_id])
    assert len(runs_after) == 3
    for run in runs_after:
        assert len(client.get_metric_history(run.info.run_id, "loss")) == len(expected[run.info.run_name][1])


def test_mlflow_refuses_a_bad_uri_in_one_line(runs: Path) -> None:
    pytest.importorskip("mlflow")
    result = export(runs, "mlflow", "--to", "nosuchscheme://x")
    assert result.returncode == 2
    assert result.stderr.startswith("error: MLflow refused the tracking URI") and "Traceback" not in result.stderr
    unreachable = export(runs, "mlflow", "--to", "http://127.0.0.1:9")  # one try, not minutes of retries
    assert unreachable.returncode == 2 and unreachable.stderr.startswith("error: MLflow refused the tracking URI")


def test_wandb_offline_runs_name_the_samples_step_metric(runs: Path, tmp_path: Path) -> None:
    pytest.importorskip("wandb")
    env = {"WANDB_MODE": "offline", "WANDB_DIR": str(tmp_path / "wandb-home"), "WANDB_SILENT": "true"}
    env |= {"WANDB_CONFIG_DIR": str(tmp_path / "wandb-config"), "WANDB_CACHE_DIR": str(tmp_path / "wandb-cache")}
    target = tmp_path / "wb"
    result = ddpcli(runs, "export", "wandb", "--to", str(target), env=env)  # the real command, once for W&B
    assert result.returncode == 0, result.stderr
    for _name, (run_id, rows) in records(runs).items():
        [folder] = (target / "wandb").glob(f"offline-run-*-{run_id}")
        logged = wandb_records(folder / f"run-{run_id}.wandb")
        metrics = [record["metric"] for record in logged if record["type"] == "metric"]
        assert {"glob_name": "*", "step_metric": "samples"}.items() <= next(
            metric for metric in metrics if metric.get("glob_name") == "*"
        ).items()  # fmt: skip
        history = [record["history"]["item"] for record in logged if record["type"] == "history"]
        assert [(item["samples"], item["loss"]) for item in history] == [(row["samples"], row["loss"]) for row in rows]
    ledger = json.loads((target / "ddpcli-wandb.json").read_text())
    assert {entry["samples"] for entry in ledger.values()} == {
        rows[-1]["samples"] for _, rows in records(runs).values()
    }
    again = export(runs, "wandb", "--to", str(target), env=env)
    assert again.returncode == 0 and again.stdout.count("up to date") == 3
    assert len(list((target / "wandb").glob("offline-run-*"))) == 3
    assert not list(target.glob(".ddpcli-export-*"))  # no staging folder left


def test_truncated_line_and_nan_loss_are_exported_with_one_warning(runs: Path, tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    name, (run_id, rows) = "1x16", records(runs)["1x16"]
    copy = tmp_path / "runs" / name / run_id
    shutil.copytree(runs / "runs" / name / run_id, copy)
    damaged = [*rows[:-1], {**rows[-1], "loss": "nan"}]
    (copy / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in damaged) + '{"step": 7, "sam')
    target = tmp_path / "tb"
    result = export(tmp_path, "tensorboard", str(tmp_path / "runs"), "--to", str(target))
    assert result.returncode == 0, result.stderr
    assert result.stderr.count("not a complete JSON line") == 1
    loss = accumulator(target / name / run_id).Scalars("loss")
    assert [event.step for event in loss] == [row["samples"] for row in rows]
    assert loss[-1].value != loss[-1].value  # NaN, as recorded


def test_bad_input_is_one_line_and_writes_nothing(runs: Path, tmp_path: Path) -> None:
    missing = export(runs, "tensorboard", str(tmp_path / "nowhere"), "--to", str(tmp_path / "tb-missing"))
    assert missing.returncode == 2 and missing.stderr.startswith("error:") and "Traceback" not in missing.stderr
    (tmp_path / "empty").mkdir()
    empty = export(runs, "tensorboard", str(tmp_path / "empty"), "--to", str(tmp_path / "tb" / "deeper"))
    assert empty.returncode == 2 and "contains none" in empty.stderr
    new_store = export(runs, "mlflow", str(tmp_path / "empty"), "--to", f"sqlite:///{tmp_path / 'new.db'}")
    assert new_store.returncode == 2 and "contains none" in new_store.stderr
    # nothing made before there is a run to write: no target folder, no parent of it, no SQLite store
    assert sorted(path.name for path in tmp_path.iterdir()) == ["empty"]
    folder_store = export(runs, "mlflow", "--to", str(tmp_path / "mlruns"))
    if folder_store.returncode == 2:  # MLflow 3.18 refuses a folder of files as a store: nothing made for it either
        assert folder_store.stderr.startswith("error: MLflow refused") and sorted(tmp_path.iterdir()) == [
            tmp_path / "empty"
        ]
    (tmp_path / "file").write_text("")
    unwritable = export(runs, "tensorboard", "--to", str(tmp_path / "file"))
    assert unwritable.returncode == 2 and "not a directory" in unwritable.stderr
    under_a_file = export(runs, "tensorboard", "--to", str(tmp_path / "file" / "tb"))
    assert under_a_file.returncode == 2 and "is not a directory" in under_a_file.stderr
    no_folder = export(runs, "mlflow", "--to", f"sqlite:///{tmp_path / 'nowhere' / 'x.db'}")
    assert no_folder.returncode == 2 and no_folder.stderr.startswith("error: MLflow refused the tracking URI")
    no_to = export(runs, "wandb")
    assert no_to.returncode in (2,) and no_to.stderr.startswith("error:")


def test_launch_exports_each_run_as_it_ends(runs: Path, tmp_path: Path) -> None:
    """`launch --export` checks its target before anything runs, and its reporter (ExportOnEnd) exports each run
    as the sweep reports it ended: here the launched 1x16 run, with its record, through the sweep's own types."""
    pytest.importorskip("tensorboard")
    from typer.testing import CliRunner

    from ddpcli.cli.app import app
    from ddpcli.cli.commands.export import ExportOnEnd
    from ddpcli.launch.argv import build_launch
    from ddpcli.launch.sweep import _run_from_record
    from ddpcli.rundir.record import RunRecord

    path = write_toml(tmp_path, REGRESSION)
    with inside(tmp_path):
        bad = CliRunner().invoke(app, ["launch", str(path), "--only", "1x16", "--export", "nosuchviewer:x"])
    assert bad.exit_code == 2 and not (tmp_path / "runs").exists()  # checked before anything ran
    run_id, rows = records(runs)["1x16"]
    run_dir = tmp_path / "runs" / "1x16" / run_id
    shutil.copytree(runs / "runs" / "1x16" / run_id, run_dir)
    record = RunRecord.load(run_dir)
    spec = build_launch(_run_from_record(record), run_dir, str(path))

    class Heard:  # the sweep's own reporter, under ExportOnEnd
        def __init__(self) -> None:
            self.ended: list[str] = []

        def run_ended(self, spec: object, record: RunRecord) -> None:
            self.ended.append(record.run_id)

    heard = Heard()
    ExportOnEnd(heard, f"tensorboard:{tmp_path / 'tb'}").run_ended(spec, record)
    assert heard.ended == [run_id]  # the sweep's own reporter still hears it
    loss = accumulator(tmp_path / "tb" / "1x16" / run_id).Scalars("loss")
    assert [event.step for event in loss] == [row["samples"] for row in rows]


def test_a_launched_sweep_exported_each_run_as_it_ended(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The regression sweep ran with `launch --export tensorboard:DIR` (the real path: torchrun, the sweep, its
    reporter): every run of it is in TensorBoard, at step = samples seen, with the values its records hold."""
    pytest.importorskip("tensorboard")
    root = regression_root(tmp_path_factory)
    found = records(root)
    assert len(found) == 8
    for name, (run_id, rows) in found.items():
        assert (root / "tensorboard" / name / run_id).is_dir(), f"{name} was not exported when it ended"
        loss = accumulator(root / "tensorboard" / name / run_id).Scalars("loss")
        assert [event.step for event in loss] == [row["samples"] for row in rows], name
        assert [event.value for event in loss] == pytest.approx([row["loss"] for row in rows], rel=1e-6), name


def test_two_mlflow_exports_at_once_make_one_run_each_on_a_new_store(runs: Path, tmp_path: Path) -> None:
    """Two `ddpcli export mlflow` into one new SQLite store at once: neither fails making the store's tables
    (mlflow's "duplicate column name: step" when both make them), and each ddpcli run is one MLflow run."""
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    root = copies(runs, tmp_path, 8)
    uri = f"sqlite:///{tmp_path / 'both.db'}"
    argv = [sys.executable, "-m", "ddpcli", "export", "mlflow", str(root), "--to", uri]
    both = [subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(2)]  # fmt: skip
    outputs = [process.communicate(timeout=300) for process in both]
    done = [(process.returncode, out, err) for process, (out, err) in zip(both, outputs, strict=True)]
    assert [code for code, _, _ in done] == [0, 0], [err for _, _, err in done]
    client = MlflowClient(uri)
    made = client.search_runs([client.get_experiment_by_name("experiments").experiment_id])
    assert sorted(run.data.tags["ddpcli.run_id"] for run in made) == sorted(
        path.parent.name for path in root.glob("*/*/run.json")
    )  # one MLflow run per ddpcli run
    assert sum(out.count("6 points, its end") for _, out, _ in done) == 8  # each run written by one of the two
    # One wrote them, the other found them up to date (having said that it waited, if it did); mlflow's own INFO
    # lines ("Creating initial MLflow database tables...") are not the user's: nothing else reaches stderr.
    finals = sorted(err.splitlines()[-1] for _, _, err in done)
    assert finals == [f"exported 0 of 8 runs to {uri} (8 already up to date)", f"exported 8 of 8 runs to {uri}"]
    for (_, _, err), other in zip(done, reversed(both), strict=True):
        by = (f" (pid {other.pid})", "")  # no pid when it came in the instant between the other's lock and its pid
        waited = {f"another ddpcli export{pid} is writing {uri}: waiting for it to finish" for pid in by}
        assert set(err.splitlines()[:-1]) <= waited, err


def test_ctrl_c_and_a_second_export_at_once(runs: Path, tmp_path: Path) -> None:
    """The real command twice into one TensorBoard folder, the first stopped (SIGSTOP) after its first run so that
    the second comes while the first writes: the second says another export is writing the folder and waits (no
    "Directory not empty", no run twice). Then Ctrl-C on the first: each run's line was printed as it was written,
    the last line says how many were and that exporting again writes the rest, exit 130; the second, waiting, is
    that export again: it writes each remaining run once."""
    pytest.importorskip("tensorboard")
    root, target = copies(runs, tmp_path, 12, rows=1500), tmp_path / "tb"
    argv = [sys.executable, "-m", "ddpcli", "export", "tensorboard", str(root), "--to", str(target)]
    first = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert first.stdout is not None
    line = first.stdout.readline()  # the first run's line, while the others are still to write
    first.send_signal(signal.SIGSTOP)
    try:
        assert line.endswith(": 1500 points, its end\n")
        second = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert second.stderr is not None
        waiting = second.stderr.readline()
        assert waiting == f"another ddpcli export (pid {first.pid}) is writing {target}: waiting for it to finish\n"
        first.send_signal(signal.SIGINT)
    finally:
        first.send_signal(signal.SIGCONT)
    out, err = first.communicate(timeout=120)
    lines = [line, *out.splitlines(keepends=True)]
    assert first.returncode == 130 and 1 <= len(lines) < 12, err
    assert err == f"interrupted: {len(lines)} of 12 runs written to {target}; export again to write the rest\n"
    out, err = second.communicate(timeout=300)
    assert second.returncode == 0, err
    assert out.count("up to date") == len(lines) and out.count("1500 points, its end") == 12 - len(lines)
    assert err == f"exported {12 - len(lines)} of 12 runs to {target} ({len(lines)} already up to date)\n"
    loss = [accumulator(folder).Scalars("loss") for folder in sorted(target.glob("*/*"))]
    assert [len(each) for each in loss] == [1500] * 12  # every run, every point once
    assert not list(target.glob(".ddpcli-export-*"))  # nothing half-written left


def test_ctrl_c_between_runs_in_this_process(runs: Path, tmp_path: Path) -> None:
    """The same, at a known place: Ctrl-C while the third of three runs is written (in this process)."""
    pytest.importorskip("tensorboard")
    from ddpcli.export import to_tensorboard

    real, calls = to_tensorboard.export, []

    def interrupted_at_the_third(run: object, target: Path) -> str:
        calls.append(run)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(run, target)  # type: ignore[arg-type]

    target = tmp_path / "tb"
    with mock.patch.object(to_tensorboard, "export", interrupted_at_the_third):
        stopped = export(runs, "tensorboard", "--to", str(target))
    assert stopped.returncode == 130 and len(stopped.stdout.splitlines()) == 2
    assert stopped.stderr == f"interrupted: 2 of 3 runs written to {target}; export again to write the rest\n"
    again = export(runs, "tensorboard", "--to", str(target))
    assert again.stderr == f"exported 1 of 3 runs to {target} (2 already up to date)\n"


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads /proc")
def test_ctrl_c_while_waiting_for_a_store_another_export_holds(runs: Path, empty_store: Path, tmp_path: Path) -> None:
    """An existing SQLite store whose lock another export holds (here, this test) is reached only once the other is
    done, as its tables may be in the making; Ctrl-C while waiting for it says that no run was written, exit 130."""
    pytest.importorskip("mlflow")
    import fcntl
    import threading

    from ddpcli.cli.commands import export as command

    uri = store(empty_store, tmp_path, "held.db")
    said: list[str] = []

    def ctrl_c_once_it_waits() -> None:
        """SIGINT once the main thread sleeps in flock: a signal that came before the call would be taken before
        it and leave the call waiting for ever (a timer's 0.2 s hung the suite on a loaded machine)."""
        main = threading.main_thread()
        wchan = Path(f"/proc/self/task/{main.native_id}/wchan")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and "lock" not in wchan.read_text():
            time.sleep(0.01)
        assert main.ident is not None
        signal.pthread_kill(main.ident, signal.SIGINT)

    def say(message: str, **how: object) -> None:
        said.append(message)
        if message.startswith("another ddpcli export"):  # it waits now: Ctrl-C
            threading.Thread(target=ctrl_c_once_it_waits, daemon=True).start()

    with (tmp_path / "held.db.ddpcli-lock").open("w") as holder, mock.patch.object(command, "say", say):
        fcntl.flock(holder, fcntl.LOCK_EX)
        stopped = export(runs, "mlflow", "--to", uri)
    assert stopped.returncode == 130
    assert said == [f"another ddpcli export is writing {uri}: waiting for it to finish",
                    f"interrupted before any run was written to {uri}"]  # fmt: skip
