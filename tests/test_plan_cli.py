"""`ddpcli plan` through Typer's CliRunner: the table, --json, the quick form and every bad-input message."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ddpcli.cli.app import app
from tests.conftest import REPO, write_toml

runner = CliRunner()

GOOD = """
[defaults]
module = "ddpcli.examples.regression"
dataset_size = 1000
epochs = 2

[baseline]
name = "1x16"
per_device_batch_size = 16
lr = 0.05
warmup_steps = 100

[[experiments]]
name = "4x16"
nproc_per_node = 4

[[experiments]]
name = "4x4"
nproc_per_node = 4
global_batch_size = 16
"""


def invoke(*args: str | Path) -> tuple[int, str, str]:
    result = runner.invoke(app, ["plan", *map(str, args)])
    return result.exit_code, result.stdout, result.stderr


def test_table_and_notes_for_bundled_file() -> None:
    code, out, err = invoke(REPO / "experiments.toml")
    assert code == 0, err
    rows = {line.split()[0]: line.split() for line in out.splitlines() if len(line.split()) >= 9}
    # run procs batch global lr rule...
    assert rows["4x16"][1:6] == ["4", "16", "64", "0.2", "linear"]
    assert rows["4x4"][1:6] == ["4", "4", "16", "0.05", "linear"]
    assert "DDP averages the gradients, so each optimizer step uses the mean gradient of 64 samples" in out


def test_json_is_one_object_with_the_contract_keys(tmp_path: Path) -> None:
    code, out, _ = invoke(write_toml(tmp_path, GOOD), "--json")
    assert code == 0
    data = json.loads(out)
    assert data["file"].endswith("experiments.toml")
    assert data["baseline"]["name"] == "1x16"
    four_by_16 = data["experiments"][0]
    assert {
        key: four_by_16[key]
        for key in (
            "world_size",
            "global_batch_size",
            "lr",
            "warmup_steps",
            "samples_per_rank",
            "padded_samples",
            "steps_per_epoch",
            "total_steps",
        )
    } == {
        "world_size": 4,
        "global_batch_size": 64,
        "lr": 0.2,
        "warmup_steps": 25,
        "samples_per_rank": 250,
        "padded_samples": 0,
        "steps_per_epoch": 16,
        "total_steps": 32,
    }


def test_only_selects_runs(tmp_path: Path) -> None:
    code, out, _ = invoke(write_toml(tmp_path, GOOD), "--only", "4x4", "--json")
    assert code == 0
    assert [run["name"] for run in json.loads(out)["experiments"]] == ["4x4"]
    code, _, err = invoke(write_toml(tmp_path, GOOD), "--only", "8x8")
    assert code == 2 and "no run named '8x8'" in err


def test_default_file_is_experiments_toml_in_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_toml(tmp_path, GOOD)
    monkeypatch.chdir(tmp_path)
    code, out, _ = invoke("--json")
    assert code == 0 and json.loads(out)["file"] == "experiments.toml"


def test_quick_form() -> None:
    code, out, err = invoke("--per-device-batch-size", "16", "--lr", "0.1", "--nproc-per-node", "4", "--json")
    assert code == 0, err
    target = json.loads(out)["experiments"][0]
    assert (target["global_batch_size"], target["lr"], target["scaling"]) == (64, 0.4, "linear")
    code, out, _ = invoke(
        "--per-device-batch-size",
        "16",
        "--lr",
        "0.1",
        "--nproc-per-node",
        "4",
        "--nnodes",
        "2",
        "--optimizer",
        "adam",
        "--global-batch-size",
        "256",
        "--json",
    )
    target = json.loads(out)["experiments"][0]
    assert (target["world_size"], target["per_device_batch_size"], target["grad_accum_steps"]) == (8, 16, 2)
    assert target["lr"] == pytest.approx(0.4) and target["scaling"] == "sqrt"
    code, out, _ = invoke("--per-device-batch-size", "16", "--lr", "0.1", "--nproc-per-node", "4")
    assert code == 0 and "target" in out


def test_quick_form_errors(tmp_path: Path) -> None:
    code, _, err = invoke("--per-device-batch-size", "16", "--lr", "0.1")
    assert code == 2 and "--nproc-per-node" in err
    code, _, err = invoke(
        write_toml(tmp_path, GOOD), "--per-device-batch-size", "16", "--lr", "0.1", "--nproc-per-node", "4"
    )
    assert code == 2 and "not both" in err
    code, _, err = invoke(
        "--per-device-batch-size", "16", "--lr", "0.1", "--nproc-per-node", "4", "--optimizer", "lion"
    )
    assert code == 2 and err.startswith("error: --optimizer: ") and "defaults" not in err  # the flag, not the field


def replace(old: str, new: str) -> str:
    assert old in GOOD
    return GOOD.replace(old, new, 1)


BAD_INPUTS = [
    ("invalid TOML", "[baseline\nname = 1", "invalid TOML", "line 1"),
    (
        "unknown key",
        replace("nproc_per_node = 4", "nprocs_per_node = 4"),
        "experiments[0].nprocs_per_node",
        "did you mean 'nproc_per_node'",
    ),
    ("unknown table", GOOD + "\n[clutser]\nrdzv_id = 'x'\n", "clutser", "did you mean 'cluster'"),
    ("wrong type", replace("lr = 0.05", 'lr = "fast"'), "baseline.lr", "got 'fast'"),
    ("missing baseline", GOOD.split("[baseline]")[0] + "[[experiments]]\nname = 'x'\n", "baseline", "is required"),
    ("duplicate name", replace('name = "4x4"', 'name = "4x16"'), "experiments[1].name", "duplicate run name '4x16'"),
    ("unsafe name", replace('name = "4x4"', 'name = "../etc"'), "experiments[1].name", "not a safe directory"),
    (
        "batch below 1",
        replace("per_device_batch_size = 16", "per_device_batch_size = 0"),
        "baseline.per_device_batch_size",
        "greater than or equal to 1",
    ),
    (
        "procs below 1",
        replace("nproc_per_node = 4", "nproc_per_node = 0"),
        "experiments[0].nproc_per_node",
        "greater than or equal to 1",
    ),
    ("negative lr", replace("lr = 0.05", "lr = -0.1"), "baseline.lr", "positive finite number"),
    ("infinite lr", replace("lr = 0.05", "lr = inf"), "baseline.lr", "positive finite number"),
    (
        "non-divisible batch",
        replace("global_batch_size = 16", "global_batch_size = 18"),
        "experiments[1].global_batch_size",
        "not a positive multiple",
    ),
    (
        "inconsistent batch",
        replace("global_batch_size = 16", "global_batch_size = 16\nper_device_batch_size = 2\ngrad_accum_steps = 1"),
        "experiments[1].global_batch_size",
        "global_batch_size 16 != per_device_batch_size 2 x grad_accum_steps 1 x world_size 4",
    ),
    (
        "both epochs and steps",
        replace("epochs = 2", "epochs = 2\nmax_steps = 3"),
        "defaults",
        "either epochs or max_steps",
    ),
    (
        "bad elastic nodes",
        replace("nproc_per_node = 4", 'nproc_per_node = 4\nnnodes = "3:1"'),
        "experiments[0].nnodes",
        "MIN:MAX",
    ),
]


@pytest.mark.parametrize(("case", "text", "field", "message"), BAD_INPUTS, ids=[case[0] for case in BAD_INPUTS])
def test_bad_input_is_one_clear_line(tmp_path: Path, case: str, text: str, field: str, message: str) -> None:
    path = write_toml(tmp_path, text)
    code, out, err = invoke(path)
    assert code == 2, (case, out, err)
    assert out == ""
    assert "Traceback" not in err
    assert err.startswith(f"error: {path}")
    assert field in err and message in err, err
    assert len(err.strip().splitlines()) == 1


def test_missing_and_unreadable_files(tmp_path: Path) -> None:
    code, _, err = invoke(tmp_path / "nope.toml")
    assert code == 2 and "nope.toml: no such file" in err
    code, _, err = invoke(tmp_path)  # a directory
    assert code == 2 and "cannot read it" in err
    binary = tmp_path / "binary.toml"
    binary.write_bytes(b"\xff\xfe\x00")
    code, _, err = invoke(binary)
    assert code == 2 and "cannot read it" in err


def test_multi_node_without_an_endpoint_is_planned_with_a_note(tmp_path: Path) -> None:
    """Planning needs no endpoint: previewing a multi-node setting works anywhere; `launch` is what refuses."""
    two_nodes = replace("nproc_per_node = 4", "nproc_per_node = 8\nnnodes = 2")
    path = write_toml(tmp_path, two_nodes)
    code, out, err = invoke(path, "--only", "4x16", "--json")
    assert code == 0, err
    run = json.loads(out)["experiments"][0]
    assert (run["nnodes"], run["nproc_per_node"], run["world_size"], run["global_batch_size"]) == (2, 8, 16, 256)
    assert any("2 nodes x 8 = world size 16" in note for note in run["notes"])
    assert run["notes"][-1].startswith("No rendezvous endpoint is known yet")
    code, out, _ = invoke(path, "--rdzv-endpoint", "head:29400", "--only", "4x16", "--json")
    assert code == 0 and not any("rendezvous" in note for note in json.loads(out)["experiments"][0]["notes"])
    path = write_toml(tmp_path, two_nodes + '\n[cluster]\nrdzv_endpoint = "head:29400"\n')
    code, out, _ = invoke(path)
    assert code == 0 and "16 (2x8)" in out and "No rendezvous endpoint" not in out


def test_noise_scale_in_the_file_adds_the_outlook(tmp_path: Path) -> None:
    text = (
        replace("epochs = 2", "epochs = 2\nnoise_scale = 48.0")
        + '\n[[experiments]]\nname = "32x16"\nnproc_per_node = 32\n'
    )
    code, out, _ = invoke(write_toml(tmp_path, text), "--json")
    assert code == 0
    data = json.loads(out)
    big = data["experiments"][2]
    # B_crit 48: steps (1 + 48/16) / (1 + 48/512) = 3.657x fewer; efficiency 1 / (1 + 512/48) = 8.6%.
    assert big["critical_batch_size"] == 48.0
    assert big["predicted_step_speedup"] == pytest.approx(4 / (1 + 48 / 512))
    assert big["data_efficiency"] == pytest.approx(1 / (1 + 512 / 48))
    assert "11x the critical batch" in big["notes"][-1]
    assert data["experiments"][0]["predicted_step_speedup"] == pytest.approx(4 / (1 + 48 / 64))
    assert not any("critical batch" in note for note in data["experiments"][0]["notes"])  # 64 is not far above


def test_noise_scale_from_a_run_directory(tmp_path: Path) -> None:
    run_dir = tmp_path / "runs" / "1x16" / "ID"
    run_dir.mkdir(parents=True)
    (run_dir / "run.json").write_text("{}")
    (run_dir / "metrics.jsonl").write_text('{"step": 1, "noise_scale": 10.0}\n{"step": 2, "noise_scale": 16.0}\n')
    path = write_toml(tmp_path, GOOD)
    code, out, _ = invoke(path, "--noise-scale-from", run_dir)
    assert code == 0 and "B_crit" in out
    code, out, _ = invoke(path, "--noise-scale-from", run_dir, "--json")
    assert json.loads(out)["experiments"][0]["critical_batch_size"] == 16.0
    (run_dir / "metrics.jsonl").write_text('{"step": 1, "loss": 1.0}\n')
    code, _, err = invoke(path, "--noise-scale-from", run_dir)
    assert code == 2 and "has no noise_scale" in err
    code, _, err = invoke(path, "--noise-scale-from", tmp_path)
    assert code == 2 and "not a run directory" in err


def test_quick_options_with_a_file_are_an_error_not_ignored(tmp_path: Path) -> None:
    path = write_toml(tmp_path, GOOD)
    for option in (["--nnodes", "3"], ["--optimizer", "adam"], ["--global-batch-size", "64"]):
        code, _, err = invoke(path, *option)
        assert code == 2 and "not both" in err, option
    code, _, err = invoke("--nnodes", "3")
    assert code == 2 and "--per-device-batch-size" in err
