"""`ddpcli compare` through Typer's CliRunner over hand-made run directories: table, --json, --csv, --plot,
errors, failed runs, truncated metrics, and torch imported only when parameter files must be read."""

from __future__ import annotations

import csv
import json
import math
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from ddpcli.cli.app import app
from ddpcli.cli.console import stdout
from tests.builders import make_run, state
from tests.conftest import REPO, loads_torch, probe_cli
from tests.contract_keys import COMPARE_KEYS

runner = CliRunner()
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def invoke(*args: str | Path) -> tuple[int, str, str]:
    result = runner.invoke(app, ["compare", *map(str, args)])
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    """1x16 baseline, 1x64 and its equivalent 4x16, a diverged 8x8 (BatchNorm, no SyncBatchNorm), a failed 2x8."""
    pytest.importorskip("torch")
    root = tmp_path / "runs"
    bn = ["torchrun", "--nproc-per-node=8", "-m", "train", "--batchnorm"]
    make_run(root, "1x16", steps=100, step_time=0.016, loss=lambda k: 2.0 - k / 100, params=state(w=[0.0]))
    make_run(root, "1x64", per_device=64, lr=0.2, steps=25, step_time=0.05, params=state(w=[1.0, 2.0]))
    make_run(root, "4x16", nproc=4, lr=0.2, steps=25, step_time=0.02, params=state(w=[1.0, 2.0 + 2**-22]))
    make_run(root, "8x8", nproc=8, per_device=8, lr=0.2, steps=25, step_time=0.0125, argv=bn, params=state(w=[1, 3]))
    make_run(root, "2x8", nproc=2, per_device=8, steps=60, planned_steps=100, status="failed", metrics_tail='{"st')
    return root


def rows_by_name(out: str) -> dict[str, list[str]]:
    rows = {}
    for line in out.splitlines():
        cells = line.split()
        if cells and cells[0] in {"1x16", "1x64", "4x16", "8x8", "2x8"}:
            rows[cells[0]] = cells
    return rows


def test_table(runs: Path) -> None:
    code, out, err = invoke(runs)
    assert code == 0, err
    assert out.startswith("Compare: baseline 1x16 (the baseline in its run.json plan)")
    rows = rows_by_name(out)
    # run * status procs batch global lr steps samples loss loss@base wall samples/s predicted/s speedup eff step-time
    # peak-mem noise equivalence curve (not observed: no prediction, step time or memory)
    expected = {
        "1x16": "1x16 *~ | completed 1 16 16 0.05 100 1,600 1 1 3.6 1,000 - 1.00x - - - - -",
        "4x16": "4x16 ~ | completed 4 16 64 0.2 25 1,600 0.04 0.04 2.5 3,200 - 3.20x 80% - - - equivalent vs 1x64, "
        "2.4e-07",
        "8x8": "8x8 ~ | completed 8 8 64 0.2 25 1,600 0.04 0.04 2.3 5,120 - 5.12x 64% - - - diverged vs 1x64, 1",
    }
    for name, line in expected.items():
        cells = line.replace("| ", "").split(" ")
        assert rows[name][: len(cells)] == cells
    assert rows["2x8"][2] == "failed"
    assert rows["1x16"][-1] == "██▇▇▆▆▅▅▄▄▃▃▂▂▁▁"  # loss falls linearly from 1.99 to 1.0: 8 levels, 16 chars
    assert "2x8 failed: rank 1 exited with code 1: RuntimeError: boom." in out
    assert "8x8 diverged from 1x64: parameters differ by up to 1 (atol 1e-05)." in out
    assert "--batchnorm without --sync-bn" in out
    assert f"warning: {runs / '2x8' / '20260101T000000Z-aaaaaa' / 'metrics.jsonl'}:61: not a complete JSON line" in err


def test_json_rows(runs: Path) -> None:
    code, out, err = invoke(runs, "--json")
    assert code == 0, err
    rows = json.loads(out)
    assert [row["name"] for row in rows] == ["1x16", "1x64", "2x8", "4x16", "8x8"]
    assert all(tuple(row) == COMPARE_KEYS for row in rows)
    assert all(row["values_from"] == "plan" and row["observed"] is None and row["findings"] == [] for row in rows)
    assert all(row["plan_followed"] is None for row in rows)  # not observed: nobody knows
    by_name = {row["name"]: row for row in rows}
    four = by_name["4x16"]
    assert four["run_dir"] == str((runs / "4x16" / "20260101T000000Z-aaaaaa").resolve())
    assert {key: four[key] for key in ("world_size", "per_device_batch_size", "grad_accum_steps")} == {
        "world_size": 4,
        "per_device_batch_size": 16,
        "grad_accum_steps": 1,
    }
    assert (four["global_batch_size"], four["lr"], four["steps"], four["samples_seen"]) == (64, 0.2, 25, 1600)
    assert four["samples_per_s"] == pytest.approx(3200.0)
    assert (four["speedup"], four["scaling_efficiency"]) == (pytest.approx(3.2), pytest.approx(0.8))
    assert (four["equivalent_to"], four["max_param_diff"], four["verdict"]) == ("1x64", 2**-22, "equivalent")
    assert (by_name["8x8"]["verdict"], by_name["8x8"]["max_param_diff"]) == ("diverged", 1.0)
    base = by_name["1x16"]
    assert (base["loss_at_baseline_samples"], base["final_loss"], base["speedup"]) == (1.0, 1.0, 1.0)
    assert (base["equivalent_to"], base["verdict"], base["max_param_diff"]) == (None, None, None)
    failed = by_name["2x8"]
    assert (failed["status"], failed["steps"], failed["loss_at_baseline_samples"]) == ("failed", 60, None)
    assert (failed["equivalent_to"], failed["verdict"]) == ("1x16", None)  # paired, but it has no parameters
    assert "not a complete JSON line" in err


def test_csv_has_the_json_rows(runs: Path, tmp_path: Path) -> None:
    path = tmp_path / "rows.csv"
    code, _, err = invoke(runs, "--json", "--csv", path)
    assert code == 0, err
    with path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        rows = list(reader)
    assert tuple(reader.fieldnames or ()) == COMPARE_KEYS[:-4]
    four = next(row for row in rows if row["name"] == "4x16")
    assert (four["verdict"], four["equivalent_to"], four["samples_seen"], four["lr"]) == (
        "equivalent",
        "1x64",
        "1600",
        "0.2",
    )
    assert next(row for row in rows if row["name"] == "1x16")["verdict"] == ""  # null is an empty cell


def test_plot_writes_a_png(runs: Path, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    path = tmp_path / "loss.png"
    code, _, err = invoke(runs, "--plot", path)
    assert code == 0, err
    assert path.read_bytes().startswith(PNG_SIGNATURE)
    assert f"wrote {path}" in err


def test_plot_without_matplotlib_says_how_to_install(runs: Path, tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` now raises ImportError
    code, out, err = invoke(runs, "--plot", tmp_path / "loss.png")
    assert code == 2
    assert "pip install 'ddpcli[plot]'" in err
    assert out == "" and not (tmp_path / "loss.png").exists()


def test_not_a_run_directory_is_exit_2(tmp_path: Path) -> None:
    code, out, err = invoke(tmp_path)
    assert (code, out) == (2, "")
    assert err.startswith(f"error: {tmp_path} is not a run directory (it has no run.json) and contains none")
    code, _, err = invoke(tmp_path / "missing")
    assert code == 2 and "no such directory" in err


def test_unknown_baseline_is_exit_2(runs: Path) -> None:
    code, _, err = invoke(runs, "--baseline", "9x9")
    assert code == 2 and "--baseline '9x9': no such run here" in err


def test_baseline_option_and_single_run_dirs(runs: Path) -> None:
    one, four = runs / "1x64" / "20260101T000000Z-aaaaaa", runs / "4x16" / "20260101T000000Z-aaaaaa"
    code, out, err = invoke(four, one, "--json", "--baseline", "1x64")
    assert code == 0, err
    rows = json.loads(out)
    assert [row["name"] for row in rows] == ["1x64", "4x16"]
    assert rows[1]["speedup"] == pytest.approx(3200 / 1280)
    assert rows[1]["scaling_efficiency"] == pytest.approx(3200 / 1280 / 4)


def test_failed_only_run_is_listed_with_its_status(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    make_run(root, "1x16", run_id="20260101T000000Z-000001")
    make_run(root, "4x16", nproc=4, lr=0.2, steps=25, run_id="20260101T000000Z-000002", status="interrupted")
    make_run(root, "4x16", nproc=4, lr=0.2, steps=3, run_id="20260101T000000Z-000003", status="timed_out")
    code, out, err = invoke(root)
    assert code == 0, err
    assert rows_by_name(out)["4x16"][2] == "timed_out"
    assert "4x16 timed out: stopped: past its timeout after 2 s." in out
    code, out, _ = invoke(root, "--all")
    assert "4x16@20260101T000000Z-000002" in out and "4x16@20260101T000000Z-000003" in out


def test_default_root_comes_from_the_experiment_file(tmp_path: Path, monkeypatch: Any) -> None:
    (tmp_path / "experiments.toml").write_text(
        '[defaults]\nruns_dir = "out"\n[baseline]\nname = "1x16"\nper_device_batch_size = 16\nlr = 0.05\n'
    )
    make_run(tmp_path / "out", "1x16", experiment_file=str(tmp_path / "experiments.toml"), scaling="explicit")
    monkeypatch.chdir(tmp_path)
    code, out, err = invoke("--json")
    assert code == 0, err
    assert [row["name"] for row in json.loads(out)] == ["1x16"]
    code, out, err = invoke()
    assert code == 0 and f"(baseline of {tmp_path / 'experiments.toml'})" in out
    (tmp_path / "experiments.toml").unlink()
    code, _, err = invoke()
    assert code == 2 and "runs: no such directory" in err


def test_runs_from_two_experiment_files_say_so(tmp_path: Path) -> None:
    make_run(tmp_path, "1x16", experiment_file="a.toml")
    make_run(tmp_path, "4x16", nproc=4, lr=0.2, steps=25, experiment_file="b.toml")
    code, out, _ = invoke(tmp_path)
    assert code == 0
    assert "Runs from 2 experiment files: a.toml, b.toml." in out
    assert "These runs come from 2 different experiment files" in out


def test_narrow_console_splits_the_table(runs: Path, monkeypatch: Any) -> None:
    monkeypatch.setattr(stdout, "width", 90)  # conftest's COLUMNS was read when the console was created
    code, out, _ = invoke(runs)
    assert code == 0
    assert out.count("1x16 *") == 3  # training, speed (with prediction and step time), equivalence: each keyed by run
    assert "equivalent vs" in out and "loss curve" in out  # the equivalence column wraps (Column wraps=True)


def test_torch_is_imported_only_to_read_parameter_files(tmp_path: Path, runs: Path) -> None:
    make_run(tmp_path / "plain", "1x64", per_device=64, lr=0.2, steps=25)
    make_run(tmp_path / "plain", "4x16", nproc=4, lr=0.2, steps=25)  # no final_params.pt anywhere
    code, modules = probe_cli("compare", tmp_path / "plain", "--json")
    assert (code, loads_torch(modules)) == (0, False)
    code, modules = probe_cli("compare", runs, "--json")
    assert (code, loads_torch(modules)) == (0, True)


def test_unwritable_csv_path_is_one_line(runs: Path, tmp_path: Path) -> None:
    code, _, err = invoke(runs, "--json", "--csv", tmp_path / "missing-dir" / "rows.csv")
    assert code == 2 and "does not exist" in err  # checked before any work
    code, _, err = invoke(runs, "--json", "--csv", "/proc/rows.csv")  # the directory exists, writing fails
    assert code == 2 and "cannot write /proc/rows.csv" in err and "Traceback" not in err


# ---------------------------------------------------------------------------------------------------------------
# Malformed files: a warning and a skipped row or an `unchecked` verdict, never a traceback

DEEP = "[" * 100_000 + "]" * 100_000  # json raises RecursionError on it


def strict_json(text: str) -> Any:
    """json.loads that refuses NaN and Infinity, which strict JSON does not have."""

    def refuse(constant: str) -> None:
        raise AssertionError(f"not strict JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


def pair(root: Path, **four: Any) -> tuple[Path, Path]:
    one = make_run(root, "1x64", per_device=64, lr=0.2, steps=25)
    return one, make_run(root, "4x16", nproc=4, lr=0.2, steps=25, **four)


def invoke_ok(*args: str | Path) -> tuple[list[dict[str, Any]], str]:
    """compare --json that must exit 0 without an exception; its rows (strict JSON) and stderr."""
    result = runner.invoke(app, ["compare", *map(str, args), "--json"])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == 0, result.stderr
    return strict_json(result.stdout), result.stderr


@pytest.mark.parametrize("tail", [b"", b"\n"])
def test_invalid_utf8_in_a_metrics_line_is_a_skipped_line(tmp_path: Path, tail: bytes) -> None:
    _, four = pair(tmp_path)
    with (four / "metrics.jsonl").open("ab") as handle:
        handle.write(b'{"step": 26, "loss": "\xff\xfe"}' + tail)
    rows, err = invoke_ok(tmp_path)
    assert {row["name"]: row["steps"] for row in rows} == {"1x64": 25, "4x16": 25}
    assert f"{four / 'metrics.jsonl'}:26:" in err


def test_metrics_file_that_is_a_directory_is_a_warning(tmp_path: Path) -> None:
    _, four = pair(tmp_path)
    (four / "metrics.jsonl").unlink()
    (four / "metrics.jsonl").mkdir()
    rows, err = invoke_ok(tmp_path)
    assert {row["name"]: row["steps"] for row in rows} == {"1x64": 25, "4x16": None}
    assert f"{four / 'metrics.jsonl'}: cannot read it" in err


def test_deeply_nested_run_json_skips_the_run(tmp_path: Path) -> None:
    _, four = pair(tmp_path)
    (four / "run.json").write_text(DEEP)
    rows, err = invoke_ok(tmp_path)
    assert [row["name"] for row in rows] == ["1x64"]
    assert f"{four / 'run.json'}: cannot read it: nested too deeply" in err
    code, _, err = invoke(four)  # the only run: one line, exit 2
    assert code == 2 and "nested too deeply" in err and "Traceback" not in err


def test_deeply_nested_metrics_line_is_a_skipped_line(tmp_path: Path) -> None:
    _, four = pair(tmp_path)
    with (four / "metrics.jsonl").open("a") as handle:
        handle.write(DEEP + "\n")
    rows, err = invoke_ok(tmp_path)
    assert {row["name"]: row["steps"] for row in rows} == {"1x64": 25, "4x16": 25}
    assert f"{four / 'metrics.jsonl'}:26:" in err


def test_negative_noise_scale_is_not_a_measurement(tmp_path: Path) -> None:
    _, four = pair(tmp_path)
    with (four / "metrics.jsonl").open("a") as handle:
        handle.write('{"step": 26, "samples": 1664, "time": 0.5, "loss": 0.1, "noise_scale": -3.0}\n')
    rows, err = invoke_ok(tmp_path)
    four_row = next(row for row in rows if row["name"] == "4x16")
    assert (four_row["noise_scale"], four_row["predicted_step_speedup"]) == (None, None)
    assert "noise_scale -3" in err


def test_huge_losses_give_a_sparkline_and_strict_json(tmp_path: Path) -> None:
    make_run(tmp_path, "1x16", steps=20, loss=lambda k: 1.5e308 if k % 2 else -1.5e308)
    code, out, err = invoke(tmp_path)
    assert code == 0, err
    assert "1.5e+308" in out
    rows, _ = invoke_ok(tmp_path)
    assert rows[0]["final_loss"] == -1.5e308


def test_parameter_files_holding_lists_of_tensors(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    one, four = pair(tmp_path)
    torch.save({"layers": [torch.zeros(2), torch.ones(3)]}, one / "final_params.pt")
    torch.save({"layers": [torch.zeros(2), torch.ones(3)]}, four / "final_params.pt")
    rows, _ = invoke_ok(tmp_path)
    assert next(row for row in rows if row["name"] == "4x16")["verdict"] == "equivalent"
    torch.save({"layers": [torch.zeros(2), torch.full((3,), 2.0)]}, four / "final_params.pt")
    rows, _ = invoke_ok(tmp_path)
    four_row = next(row for row in rows if row["name"] == "4x16")
    assert (four_row["verdict"], four_row["max_param_diff"]) == ("diverged", 1.0)
    torch.save({"layers": [torch.zeros(2)], "step": [1, 2]}, one / "final_params.pt")
    torch.save({"layers": [torch.zeros(2)], "step": [1, 3]}, four / "final_params.pt")
    rows, _ = invoke_ok(tmp_path)
    assert next(row for row in rows if row["name"] == "4x16")["verdict"] == "diverged"


NUMBERS = st.one_of(
    st.integers(min_value=-(10**20), max_value=10**20), st.floats(allow_nan=True, allow_infinity=True), st.none()
)
JSON_VALUES = st.recursive(
    st.one_of(NUMBERS, st.booleans(), st.text(max_size=8)),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
RUN_KEYS = ("run_id", "name", "status", "wall_time_s", "exit_code", "failed_ranks", "restarts", "started_at", "argv")
PLAN_KEYS = ("world_size", "per_device_batch_size", "grad_accum_steps", "global_batch_size", "lr", "total_steps")
ROW_FIELDS = ("step", "samples", "time", "loss", "noise_scale")


def run_json_texts() -> st.SearchStrategy[bytes]:
    plan = st.fixed_dictionaries({}, optional={key: st.one_of(NUMBERS, JSON_VALUES) for key in PLAN_KEYS})
    record = st.fixed_dictionaries(
        {"plan": plan}, optional={key: JSON_VALUES for key in RUN_KEYS} | {"status": st.sampled_from(["completed"])}
    )
    return st.one_of(st.binary(max_size=40), record.map(lambda data: json.dumps(data).encode()))


def metrics_texts() -> st.SearchStrategy[bytes]:
    row = st.fixed_dictionaries({}, optional={key: NUMBERS for key in ROW_FIELDS}).map(lambda r: json.dumps(r).encode())
    line = st.one_of(row, row, st.binary(max_size=20), JSON_VALUES.map(lambda v: json.dumps(v).encode()))
    return st.one_of(
        st.binary(max_size=60),
        st.lists(line, max_size=8).map(b"\n".join),
        st.lists(line, max_size=8).map(lambda lines: b"\n".join(lines) + b"\n"),
    )


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(run_json=run_json_texts(), metrics=metrics_texts(), alone=st.booleans())
def test_random_run_files_never_crash_compare(run_json: bytes, metrics: bytes, alone: bool) -> None:
    """Whatever run.json and metrics.jsonl hold: exit 0 or 2, no exception, strict JSON rows under --json."""
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        if not alone:
            make_run(root, "1x16", steps=5)
        run_dir = root / "random" / "20260101T000000Z-random"
        run_dir.mkdir(parents=True)
        (run_dir / "run.json").write_bytes(run_json)
        (run_dir / "metrics.jsonl").write_bytes(metrics)
        for args in ([root, "--json"], [root]):
            result = runner.invoke(app, ["compare", *map(str, args)])
            assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
            assert result.exit_code in (0, 2), result.stderr
            if result.exit_code == 0 and "--json" in args:
                assert isinstance(strict_json(result.stdout), list)
            if result.exit_code == 2:
                assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1


# ---------------------------------------------------------------------------------------------------------------
# Messages that must not mislead, and torch's NumPy warning


@pytest.mark.parametrize("option", ["--csv", "--plot"])
def test_output_path_under_a_file_says_so(runs: Path, tmp_path: Path, option: str) -> None:
    if option == "--plot":
        pytest.importorskip("matplotlib")
    (tmp_path / "file").write_text("")
    code, out, err = invoke(runs, option, tmp_path / "file" / "out")
    assert (code, out) == (2, "")
    assert err == f"error: {tmp_path / 'file' / 'out'}: {tmp_path / 'file'} is a file, not a directory\n"


def test_shape_mismatch_is_not_blamed_on_the_loss(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    one, four = pair(tmp_path)
    torch.save({"w": torch.zeros(2)}, one / "final_params.pt")
    torch.save({"w": torch.zeros(3)}, four / "final_params.pt")
    code, out, err = invoke(tmp_path)
    assert code == 0, err
    note = " ".join(out.split())  # the note wraps
    assert "4x16 diverged from 1x64: w has shape (3,) here and (2,) in the other run." in note
    assert "sum-reduced" not in note
    assert "The two runs did not train the same model" in note


def test_unreadable_parameter_file_is_one_line(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    one, four = pair(tmp_path)
    torch.save({"w": torch.zeros(2)}, one / "final_params.pt")
    torch.save(torch.nn.Linear(2, 2), four / "final_params.pt")  # a module, not a state_dict
    code, out, err = invoke(tmp_path)
    assert code == 0, err
    note = " ".join(out.split())
    assert (
        f"4x16 could not be checked against 1x64: cannot read {four / 'final_params.pt'}: "
        "torch.load(weights_only=True) refused it: Unsupported global: GLOBAL torch.nn.modules.linear.Linear "
        "was not an allowed global by default."
    ) in note
    assert "PyTorch 2.6" not in out and "\x1b" not in out


def test_nan_final_loss_is_shown_as_nan(tmp_path: Path) -> None:
    make_run(tmp_path, "1x16", steps=10, loss=lambda k: math.nan if k == 10 else 1.0)
    code, out, err = invoke(tmp_path)
    assert code == 0, err
    assert rows_by_name(out)["1x16"][9] == "nan"  # run * status procs batch global lr steps samples loss
    rows, _ = invoke_ok(tmp_path)
    assert rows[0]["final_loss"] is None  # strict JSON has no NaN


def test_copies_of_a_run_get_distinct_labels(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path / "a", "1x16")
    shutil.copytree(run_dir, tmp_path / "b" / "1x16" / run_dir.name)
    shutil.copytree(run_dir, tmp_path / "a" / "1x16" / "copy")
    rows, _ = invoke_ok(tmp_path / "a", tmp_path / "b", "--all")
    assert len(rows) == 3
    _, out, _ = invoke(tmp_path / "a", tmp_path / "b", "--all")
    labels = {line.split()[0] for line in out.splitlines() if line.split() and line.split()[0].startswith("1x16@")}
    assert labels == {f"1x16@a/1x16/{run_dir.name}", "1x16@a/1x16/copy", f"1x16@b/1x16/{run_dir.name}"}


NUMPY_PROBE = """
import sys
sys.modules["numpy"] = None  # numpy absent
from ddpcli.cli.app import main
main(["compare", *sys.argv[1:]])
"""


def test_compare_without_numpy_prints_no_numpy_warning(runs: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-c", NUMPY_PROBE, str(runs), "--json"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "equivalent" in result.stdout  # parameter files were read, so torch was imported
    assert "NumPy" not in result.stderr


def observed_as(per_device: int, world: int, lr: float, steps: int) -> dict[str, Any]:
    return {
        "world_size": world, "per_device_batch_size": per_device, "grad_accum_steps": 1,
        "global_batch_size": per_device * world, "optimizer_steps": steps, "samples_seen": per_device * world * steps,
        "lr_first": lr, "lr_peak": lr, "lr_last": lr,
    }  # fmt: skip


def test_compare_shows_what_ran_and_names_the_plan_it_did_not_follow(tmp_path: Path) -> None:
    """The plan said 4 x 8 at lr 0.1; the script ran 4 x 16 at lr 0.2 (its own defaults): compare shows 16, 64 and
    0.2, marks the run, and its divergence note names the finding instead of guessing."""
    pytest.importorskip("torch")
    root = tmp_path / "runs"
    mismatch = {
        "code": "plan_mismatch", "severity": "warning", "field": "per_device_batch_size", "planned": 8,
        "observed": 16, "message": "the script ran batch per process 16; the plan said 8",
    }  # fmt: skip
    make_run(root, "1x16", steps=25, extra={"observed": observed_as(16, 1, 0.05, 25)}, params=state(w=[0.0]))
    make_run(root, "1x64", per_device=64, lr=0.2, steps=25, params=state(w=[1.0]),
             extra={"observed": observed_as(64, 1, 0.2, 25)})  # fmt: skip
    make_run(root, "4x16", nproc=4, per_device=8, lr=0.1, steps=25, params=state(w=[1.5]),
             extra={"observed": observed_as(16, 4, 0.2, 25), "findings": [mismatch]})  # fmt: skip
    code, out, err = invoke(root)
    assert code == 0, err
    row = rows_by_name(out)["4x16"]
    assert row[:8] == ["4x16", "!", "completed", "4", "16", "64", "0.2", "25"]
    assert "diverged vs 1x64" in out  # partnered by what ran (64 at lr 0.2), not by the plan (32 at 0.1)
    assert (
        "4x16 diverged from 1x64: parameters differ by up to 0.5 (atol 1e-05). 4x16: the script ran batch per "
        "process 16; the plan said 8 (plan_mismatch)." in " ".join(out.split())
    )
    code, out, _ = invoke(root, "--json")
    four = next(row for row in json.loads(out) if row["name"] == "4x16")
    assert (four["values_from"], four["plan_followed"], four["per_device_batch_size"]) == ("observed", False, 16)
    assert four["findings"] == [mismatch] and four["observed"]["lr_peak"] == 0.2
    one = next(row for row in json.loads(out) if row["name"] == "1x64")
    assert (one["values_from"], one["plan_followed"]) == ("observed", True)


def test_a_divergence_names_the_samplers_the_runs_really_used(tmp_path: Path) -> None:
    """Lightning at 1 process shuffles with a RandomSampler, at 2 with a DistributedSampler: other batches each step.
    The observer saw both samplers and no BatchNorm layer, so the note says so instead of guessing."""
    pytest.importorskip("torch")
    root = tmp_path / "runs"
    one = {**observed_as(16, 1, 0.05, 8), "sampler": "RandomSampler", "batchnorm_layers": 0}
    two = {**observed_as(8, 2, 0.05, 8), "sampler": "DistributedSampler", "batchnorm_layers": 0}
    make_run(root, "1x16", steps=8, params=state(w=[0.0]), extra={"observed": one})
    make_run(root, "2x8", nproc=2, per_device=8, steps=8, params=state(w=[0.06]), extra={"observed": two})
    code, out, err = invoke(root)
    assert code == 0, err
    text = " ".join(out.split())
    assert "2x8 diverged from 1x16" in text
    assert "The runs drew their samples differently: 2x8 through DistributedSampler, 1x16 through RandomSampler" in text
    assert "Nothing in the run records explains it" not in text and "BatchNorm" not in text


@pytest.mark.parametrize("dropout", [1, 0])
def test_a_divergence_names_the_dropout_layers_each_process_draws_for(tmp_path: Path, dropout: int) -> None:
    """pytorch/examples mnist at 2 x 32 ended 0.03 away from 1 x 64 with nothing named: its nn.Dropout layers draw
    their masks per process. Seen, they are the cause; seen absent in both, dropout is no suspect."""
    pytest.importorskip("torch")
    root = tmp_path / "runs"
    alike = {"sampler": "DistributedSampler", "batchnorm_layers": 0, "dropout_layers": dropout}
    one = {**observed_as(64, 1, 1.0, 8), **alike}
    two = {**observed_as(32, 2, 1.0, 8), **alike}
    make_run(root, "1x64", per_device=64, lr=1.0, steps=8, params=state(w=[0.0]), extra={"observed": one})
    make_run(root, "2x32", nproc=2, per_device=32, lr=1.0, steps=8, params=state(w=[0.03]), extra={"observed": two})
    code, out, err = invoke(root)
    assert code == 0, err
    text = " ".join(out.split())
    assert "2x32 diverged from 1x64: parameters differ by up to 0.03" in text
    cause = "2x32: its model has 1 Dropout layer(s) with p > 0, and each of its 2 processes draws its own dropout masks"
    if dropout:
        assert cause in text and "Nothing in the run records explains it" not in text
    else:
        assert cause not in text and "Nothing in the run records explains it" in text
        assert "augmentation (or F.dropout) drawing different random numbers on each rank" in text
        assert "dropout or augmentation" not in text


def test_an_integer_beyond_float_range_is_not_a_number_to_show(tmp_path: Path) -> None:
    """JSON allows a 400-digit integer; float() of it overflows. A loss like that is no finite loss, not a traceback."""
    root = tmp_path / "runs"
    run_dir = make_run(root, "1x16", steps=3)
    with (run_dir / "metrics.jsonl").open("a", encoding="utf-8") as handle:
        handle.write('{"step": 4, "samples": 64, "time": 0.1, "loss": 1' + "0" * 400 + "}\n")
    code, out, err = invoke(root, "--json")
    assert code == 0 and "Traceback" not in err, err
    (row,) = json.loads(out)
    assert (row["steps"], row["final_loss"]) == (4, None)
