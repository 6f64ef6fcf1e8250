"""The gradient noise scale: exact arithmetic of ddpcli.noise_scale, and the runtime's estimate against the truth.

The statistical tests measure at a fixed parameter point of a linear regression (tests/scripts/noise_linear.py),
where B_simple = tr(Sigma) / |G|^2 is computed exactly from the per-example gradients of the whole dataset; the
estimate from 400 steps must be within 15% of it (simulating the estimator gives a spread of about 3-4%).
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

from ddpcli import noise_scale as gns
from tests.conftest import REPO, merge_observations

SCRIPT = Path(__file__).resolve().parent / "scripts" / "noise_linear.py"
TORCHRUN_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "GROUP_RANK")
TOLERANCE = 0.15

# -- pure arithmetic ---------------------------------------------------------------------------------------------


def expected_sq(grad_sq: float, trace: float, batch: float) -> float:
    """E|G_B|^2 = |G|^2 + tr(Sigma) / B (McCandlish et al. 2018, A.1)."""
    return grad_sq + trace / batch


@pytest.mark.parametrize(("b_small", "b_big"), [(8, 32), (1, 2), (16, 64), (4, 1024)])
def test_estimators_are_exact_on_expected_norms(b_small: int, b_big: int) -> None:
    small, big = expected_sq(3.0, 40.0, b_small), expected_sq(3.0, 40.0, b_big)
    assert gns.true_grad_sq(small, big, b_small, b_big) == pytest.approx(3.0)
    assert gns.trace_sigma(small, big, b_small, b_big) == pytest.approx(40.0)
    assert gns.simple_noise_scale(small, big, b_small, b_big) == pytest.approx(40.0 / 3.0)


def test_noise_scale_is_undefined_while_the_gradient_estimate_is_not_positive() -> None:
    assert gns.true_grad_sq(1.0, 2.0, 8, 32) > 0 and gns.trace_sigma(1.0, 2.0, 8, 32) < 0  # |G_big| > |G_small|
    assert gns.simple_noise_scale(1.0, 2.0, 8, 32) is None
    assert gns.true_grad_sq(10.0, 2.0, 8, 32) < 0  # (64 - 80) / 24
    assert gns.simple_noise_scale(10.0, 2.0, 8, 32) is None
    with pytest.raises(ValueError, match="B_small < B_big"):
        gns.simple_noise_scale(2.0, 1.0, 32, 32)


def test_tracker_debiases_its_start_and_skips_non_finite_steps() -> None:
    tracker = gns.NoiseScaleTracker(beta=0.9)
    assert tracker.noise_scale(8, 32) is None and tracker.grad_sq_small is None
    tracker.update(expected_sq(3.0, 40.0, 8), expected_sq(3.0, 40.0, 32))
    assert tracker.grad_sq_small == pytest.approx(8.0) and tracker.grad_sq_big == pytest.approx(4.25)
    assert tracker.noise_scale(8, 32) == pytest.approx(40.0 / 3.0)
    tracker.update(math.inf, 1.0)  # an AMP overflow step
    tracker.update(math.nan, 1.0)
    assert tracker.grad_sq_small == pytest.approx(8.0) and tracker.weight == pytest.approx(0.1)


def test_averaging_trackers_equals_tracking_the_average() -> None:
    """What the runtime relies on to average each rank's EMA once at log time instead of every step."""
    ranks = [gns.NoiseScaleTracker(beta=0.8) for _ in range(3)]
    together = gns.NoiseScaleTracker(beta=0.8)
    for step in range(20):
        smalls = [5.0 + ((step * 7 + rank * 3) % 11) for rank in range(3)]
        big = 4.0 + (step % 5) * 0.1
        for tracker, small in zip(ranks, smalls, strict=True):
            tracker.update(small, big)
        together.update(sum(smalls) / 3, big)
    assert sum(tracker.ema_small for tracker in ranks) / 3 == pytest.approx(together.ema_small)
    assert ranks[0].ema_big == pytest.approx(together.ema_big)
    with pytest.raises(ValueError, match="beta"):
        gns.NoiseScaleTracker(beta=1.0)


def test_what_the_critical_batch_implies() -> None:
    assert gns.step_speedup(64, baseline_batch=16, b_crit=16) == pytest.approx(2 / 1.25)  # 4x batch, 1.6x fewer
    assert gns.step_speedup(16, baseline_batch=16, b_crit=16) == pytest.approx(1.0)
    assert gns.step_speedup(10**9, baseline_batch=16, b_crit=16) == pytest.approx(2.0, rel=1e-6)  # the ceiling
    assert gns.data_efficiency(16, b_crit=16) == pytest.approx(0.5)
    assert gns.data_efficiency(1, b_crit=1000) == pytest.approx(1000 / 1001)


# -- the runtime's estimate ------------------------------------------------------------------------------------


def clean_env() -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key not in (*TORCHRUN_ENV, "DDPCLI_RUN")}
    env["OMP_NUM_THREADS"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


def torchrun_last_row(nproc: int, run_dir: Path, *args: str) -> dict:
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc),
               str(SCRIPT), *args]  # fmt: skip
    env = {**clean_env(), "DDPCLI_RUN_DIR": str(run_dir)}
    result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=180, check=False)
    assert result.returncode == 0, result.stderr[-4000:]
    return merge_observations(run_dir)[-1]


def load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("noise_linear", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


Runner = Callable[..., list[dict]]


@pytest.fixture
def in_process(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Runner:
    """Run a training script's main() here, at world size 1 (no torchrun variables), and return its rows."""
    for key in (*TORCHRUN_ENV, "DDPCLI_RUN"):
        monkeypatch.delenv(key, raising=False)
    counter = iter(range(100))

    def run(main: Callable[[list[str]], None], *args: str, run_json: dict | None = None) -> list[dict]:
        run_dir = tmp_path / f"run{next(counter)}"
        monkeypatch.setenv("DDPCLI_RUN_DIR", str(run_dir))
        if run_json is not None:
            monkeypatch.setenv("DDPCLI_RUN", json.dumps(run_json))
        main(list(args))
        return merge_observations(run_dir)

    return run


def assert_matches_truth(row: dict, b_small: int, b_big: int) -> None:
    truth = row["b_simple_true"]
    assert abs(row["noise_scale"] - truth) <= TOLERANCE * truth, (row["noise_scale"], truth)
    # The averaged norms themselves: E|G_B|^2 = |G|^2 + tr(Sigma)/B, in the units of the loss's gradient.
    for key, batch in (("grad_sq_small", b_small), ("grad_sq_big", b_big)):
        expected = expected_sq(row["grad_sq_true"], row["trace_sigma_true"], batch)
        assert row[key] == pytest.approx(expected, rel=0.1), key


@pytest.mark.e2e
def test_ddp_estimate_at_world_size_4_matches_the_true_noise_scale(tmp_path: Path) -> None:
    row = torchrun_last_row(4, tmp_path, "--batch-size", "8")  # B_small 8 (one rank), B_big 32 (all four)
    assert 10 < row["b_simple_true"] < 30  # a noise scale between the two batch sizes: a meaningful test
    assert_matches_truth(row, b_small=8, b_big=32)


@pytest.mark.e2e
def test_ddp_estimate_with_accumulation_and_loss_scaling(tmp_path: Path) -> None:
    """The hook sees each rank's accumulated gradient (B_small = 4 x 2) and the AMP scale is divided out."""
    row = torchrun_last_row(2, tmp_path, "--batch-size", "4", "--grad-accum", "2", "--loss-scale", "1024")
    assert_matches_truth(row, b_small=8, b_big=16)


@pytest.mark.e2e
def test_under_the_observer_it_measures_the_helpers_model_and_divides_out_its_loss_scale(tmp_path: Path) -> None:
    """Under `ddpcli launch`'s observer the helper hands its DDP model to the observer's comm hook (its log carries no
    norms) with the grad_scale given to ctx.wrap, which the observer divides out; the merge's EMA has beta 0.99."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
               "-m", "ddpcli.worker.observer", str(SCRIPT), "--batch-size", "4", "--grad-accum", "2",
               "--loss-scale", "1024", "--sgd", "--steps", "300"]  # fmt: skip
    env = {**clean_env(), "DDPCLI_RUN_DIR": str(tmp_path)}
    result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-4000:]
    logged = [json.loads(line) for line in (tmp_path / "observed" / "rank-0.jsonl").read_text().splitlines()]
    assert [row["step"] for row in logged if row["kind"] == "log"] == [300]
    assert not any("grad_sq_small" in row for row in logged if row["kind"] == "log")
    assert sum(row["kind"] == "step" and isinstance(row.get("sq_small"), float) for row in logged) == 300
    assert_matches_truth(merge_observations(tmp_path)[-1], b_small=8, b_big=16)


def test_accumulation_estimate_at_world_size_1_matches_the_true_noise_scale(in_process: Runner) -> None:
    main = load_script().main
    rows = in_process(main, "--batch-size", "8", "--grad-accum", "4")  # B_small 8 (micro-batch), B_big 32
    assert_matches_truth(rows[-1], b_small=8, b_big=32)
    scaled = in_process(main, "--batch-size", "8", "--grad-accum", "4", "--loss-scale", "1024")[-1]
    for key in ("noise_scale", "grad_sq_small", "grad_sq_big"):
        assert scaled[key] == pytest.approx(rows[-1][key], rel=1e-5)


def test_one_process_without_accumulation_reports_no_noise_scale(in_process: Runner) -> None:
    row = in_process(load_script().main, "--steps", "5")[-1]
    assert "b_simple_true" in row and not {"noise_scale", "grad_sq_small", "grad_sq_big"} & set(row)


def test_the_bundled_example_logs_the_noise_scale_when_the_run_asks_for_it(in_process: Runner) -> None:
    from ddpcli.examples import regression

    run_json = {"noise_scale": True, "per_device_batch_size": 8, "grad_accum_steps": 2, "global_batch_size": 16}
    rows = in_process(regression.main, "--steps", "20", "--batch-size", "8", "--grad-accum", "2", run_json=run_json)
    assert [row["step"] for row in rows] == list(range(1, 21))
    assert all(math.isfinite(row["grad_sq_small"]) and math.isfinite(row["grad_sq_big"]) for row in rows)
    assert rows[-1]["grad_sq_small"] > rows[-1]["grad_sq_big"] > 0 and rows[-1]["noise_scale"] > 0
    assert rows[-1]["samples"] == 20 * 16


FIXED_POINT = f"""
[defaults]
script = "{SCRIPT}"
max_steps = 300
lr = 0.0001  # unused: the script steps no optimizer
scaling = "none"
noise_scale = true
env = {{ OMP_NUM_THREADS = "1" }}

[baseline]
name = "2x4x2"
nproc_per_node = 2
per_device_batch_size = 4
grad_accum_steps = 2
args = ["--batch-size", "{{per_device_batch_size}}", "--grad-accum", "{{grad_accum_steps}}",
        "--steps", "{{total_steps}}", "--loss-scale", "1024"]
"""


@pytest.fixture(scope="module")
def launched_fixed_point(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict]]:
    """`ddpcli launch` of the helper's fixed-point script: backward passes only, no optimizer (with an SGD of lr 0
    under the observer: test_under_the_observer_it_measures_the_helpers_model_and_divides_out_its_loss_scale)."""
    directory = tmp_path_factory.mktemp("fixed")
    (directory / "experiments.toml").write_text(FIXED_POINT, encoding="utf-8")
    result = subprocess.run([sys.executable, "-m", "ddpcli", "launch", "experiments.toml"], cwd=directory,
                            env=clean_env(), capture_output=True, text=True, timeout=600, check=False)  # fmt: skip
    runs = {}
    for record_path in sorted((directory / "runs").glob("*/*/run.json")):
        name = json.loads(record_path.read_text())["name"]
        lines = (record_path.parent / "metrics.jsonl").read_text().splitlines()
        runs[name] = [json.loads(line) for line in lines if line.strip()]
    assert set(runs) == {"2x4x2"}, result.stdout + result.stderr
    return runs


@pytest.mark.e2e
def test_under_launch_a_fixed_point_script_without_optimizer_steps_gets_its_noise_scale(
    launched_fixed_point: dict[str, list[dict]],
) -> None:
    """Issue 29.9: without an optimizer step the observer wrote no step rows, so its comm hook's norms went nowhere
    and metrics.jsonl had no noise_scale. Each backward's reduction is the measurement there (as the helper's own
    meter does without the observer), with B_small the rank's accumulated 4 x 2 and the loss scale divided out."""
    rows = launched_fixed_point["2x4x2"]
    assert rows[-1]["step"] == 300
    assert_matches_truth(rows[-1], b_small=8, b_big=16)
