"""The parts of the cost model: the wait for the slowest rank from the baseline's own steps, the robust step scale,
the compute line fitted to several runs, CPU contention measured by the busy-loop probe, and `plan` with several
`--predict-from` runs (ddpcli.prediction, ddpcli.launch.cpu_probe)."""

from __future__ import annotations

import json
import socket
import statistics
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from ddpcli.cli.app import app
from ddpcli.launch import cpu_probe
from ddpcli.launch.probe import host_now
from ddpcli.prediction.baseline import steady_durations
from ddpcli.prediction.compute import least_squares
from ddpcli.prediction.predict import HostNow, compute_model, excess_of_max, expected_max, predict
from ddpcli.rundir.record import RunRecord
from tests.builders import PARAMS, baseline, observed_of, target, timing_row
from tests.conftest import write_toml

durations = st.lists(st.floats(0.001, 10.0), min_size=2, max_size=40)


def test_excess_of_the_maximum_by_hand() -> None:
    """Steps of 1 s and 3 s: two ranks both draw 1 s a quarter of the time, so E[max] = 2.5 s, 0.5 s over the
    mean of 2 s: 25% of it."""
    assert excess_of_max([1.0, 3.0], 2) == pytest.approx(0.25)
    assert excess_of_max([1.0, 3.0], 3) == pytest.approx((1 * 1 / 8 + 3 * 7 / 8 - 2) / 2)
    assert excess_of_max([1.0, 3.0], 1) == 0 and excess_of_max([2.0], 4) == 0
    assert excess_of_max([0.5] * 10, 8) == 0  # steps that do not vary: no wait


@given(durations)
def test_two_ranks_wait_half_the_mean_absolute_difference(values: list[float]) -> None:
    """max(a, b) = (a + b) / 2 + |a - b| / 2: for two ranks the excess is half the mean absolute difference."""
    mean = statistics.fmean(values)
    difference = statistics.fmean(abs(a - b) for a in values for b in values)
    assert excess_of_max(values, 2) == pytest.approx(difference / 2 / mean, rel=1e-6, abs=1e-9)


@given(durations, st.integers(1, 16))
def test_more_ranks_wait_longer_but_never_past_the_slowest_step(values: list[float], world: int) -> None:
    excess = excess_of_max(values, world)
    assert excess <= excess_of_max(values, world + 1) + 1e-9
    assert 0 <= excess <= max(values) / statistics.fmean(values) - 1 + 1e-9


def test_normal_steps_give_the_normal_expected_maximum() -> None:
    """Steps spread as a normal distribution (its quantiles) of mean 1 and sd 0.1: the table's k(W) x 10%."""
    normal = statistics.NormalDist(1.0, 0.1)
    steps = [normal.inv_cdf((i - 0.5) / 4000) for i in range(1, 4001)]
    for world in (2, 4, 8):
        assert excess_of_max(steps, world) == pytest.approx(expected_max(world) * 0.1, rel=0.02)


def test_steady_durations_leave_out_the_warm_up() -> None:
    """Step 1 ended at 0 s, step 2 took 5 s (warm-up), ...: of 11 durations (steps 2 to 12), 10% rounded up (2)
    are left out as warm-up."""
    times = [0.0, 5.0, 6.0, 7.5, 8.0, 9.0, 10.0, 11.0, 12.0, 13.0, 14.0, 15.0]
    assert steady_durations(times) == (1.5, 0.5, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0)
    assert steady_durations([0.0, 1.0]) == (1.0,) and steady_durations([]) == ()


def test_a_noisy_spell_of_the_baseline_does_not_decide_the_prediction() -> None:
    """9 steps of 50 ms and one of 500 ms: the mean (95 ms) holds the spell, the median (50 ms) does not; the
    baseline's host terms are scaled by 50 / 95. Under 8 steady steps, no scale; nor on CPU with the baseline's
    share of a core known (the contention term counts its work in CPU seconds, which the spell did not change)."""
    spelled = replace(baseline(), step_durations=(0.05,) * 9 + (0.5,), cpu_share=None)
    assert spelled.robust_scale == pytest.approx(0.05 / 0.095)
    found = predict(spelled, target(world=1, threads=None), 0.0, "none")
    assert found.terms["compute_s"] == pytest.approx(0.04 * 0.05 / 0.095)
    assert found.baseline_step_scale == pytest.approx(0.05 / 0.095)
    assert any("median step over its mean" in text for text in found.assumptions)
    assert replace(spelled, step_durations=(0.05,) * 6 + (0.5,)).robust_scale == 1.0
    assert replace(spelled, cpu_share=0.7).robust_scale == 1.0
    assert replace(spelled, device="cuda", cpu_share=0.7).robust_scale == pytest.approx(0.05 / 0.095)


def test_the_wait_for_the_slowest_rank_from_the_baseline_steps_or_the_probe() -> None:
    """Steps of 40 and 60 ms alternating: 2 ranks wait 5 ms per 50 ms step (10%) of data + compute (45 ms here);
    a probe that saw longer waits on this host wins."""
    steps = replace(baseline(), step_durations=(0.04, 0.06) * 5)
    two = predict(steps, target(world=2), 0.001, "t")
    assert two.slowest_rank_wait_s == pytest.approx(0.1 * 0.045)
    assert two.terms["comm_s"] == pytest.approx(0.001 + 0.1 * 0.045)
    probed = predict(steps, target(world=2), 0.001, "t", host=HostNow(waits={(2, 1): 0.3}))
    assert probed.slowest_rank_wait_s == pytest.approx(0.3 * 0.045)
    assert any("busy-loop rounds" in text for text in probed.assumptions)
    assert predict(steps, target(world=1, threads=None), 0.0, "t").slowest_rank_wait_s == 0


def test_contention_measured_by_the_probe_and_inferred_from_the_baseline() -> None:
    """The baseline got half a core of 2: 3 runnable threads of other work, so 2 processes will get 2 / 5 = 0.4 of
    a core each; the probe's 2 processes got 0.25 each just before. The mean, 0.325, makes host work 0.5 / 0.325
    times as long as in the baseline."""
    half = replace(baseline(), cpu_share=0.5)
    found = predict(half, target(world=2), 0.0, "t", host=HostNow(shares={(2, 1): 0.25}))
    assert found.cpu_contention == pytest.approx(0.5 / 0.325)
    assert found.terms["compute_s"] == pytest.approx(0.04 * 0.5 / 0.325)
    assert found.terms["optimizer_s"] == pytest.approx(0.002 * 0.5 / 0.325)
    assert any("about 0.33 of a core: the mean of 0.25" in text for text in found.assumptions)
    unknown = replace(baseline(), cpu_share=None)  # no share recorded: the probe's alone, against the fair share
    alone = predict(unknown, target(world=2), 0.0, "t", host=HostNow(shares={(2, 1): 0.25}))
    assert alone.cpu_contention == pytest.approx(1.0 / 0.25)
    unmeasured = predict(half, target(world=2), 0.0, "t", host=HostNow(shares={(4, 1): 0.25}))
    assert unmeasured.cpu_contention == pytest.approx(0.5 / 0.4)  # the fair share per thread, as before


@given(st.floats(-1.0, 1.0), st.floats(0.0, 1.0), st.lists(st.integers(1, 4096), min_size=2, max_size=6, unique=True))
def test_least_squares_recovers_a_line(intercept: float, slope: float, xs: list[int]) -> None:
    fixed, per = least_squares([(float(x), intercept + slope * x) for x in xs])
    assert fixed == pytest.approx(intercept, abs=1e-6) and per == pytest.approx(slope, abs=1e-9)


def run_at(batch: int, compute_s: float, share: float = 1.0, world: int = 1) -> object:
    """A baseline of `batch` whose forward + backward took `compute_s` a step, with `share` of a core."""
    found = replace(baseline(), per_device_batch_size=batch, cpu_share=share, world_size=world)
    return replace(found, step={**found.step, "compute_s": compute_s})


def test_the_compute_line_from_two_batches() -> None:
    """16 samples in 10 ms and 64 in 13 ms: 9 ms a micro-batch + 62.5 us a sample; 4 samples then cost 9.25 ms,
    not the 2.5 ms a line through the origin says. A run that got half the baseline's share of a core counts half
    its seconds; a run of another kind (2 processes) is left out."""
    base = run_at(16, 0.010)
    line = compute_model(base, [run_at(64, 0.026, share=0.5), run_at(32, 0.5, world=2)])
    assert line.fixed_s == pytest.approx(0.009) and line.per_sample_s == pytest.approx(62.5e-6)
    assert line.source.startswith("fitted to per-device batches 16, 64")
    found = predict(base, target(world=1, batch=4, accumulation=3, threads=None), 0.0, "t", compute=line)
    assert found.terms["compute_s"] == pytest.approx(3 * (0.009 + 4 * 62.5e-6))
    assert found.as_json()["prediction"]["compute_model"]["fixed_s"] == pytest.approx(0.009)
    assert not any(text.startswith("compute linear") for text in found.assumptions)
    assert found.note().endswith("; compute fitted to per-device batches 16, 64.")


def test_the_compute_line_falls_back_to_linear_and_says_why() -> None:
    alone = compute_model(run_at(16, 0.010))
    assert (alone.fixed_s, alone.per_sample_s) == (0.0, pytest.approx(0.010 / 16))
    assert "one per-device batch measured (16)" in alone.source
    shrinking = compute_model(run_at(16, 0.010), [run_at(64, 0.005)])  # more samples, less time: no line
    assert shrinking.fixed_s == 0 and "gave a negative cost per sample" in shrinking.source
    found = predict(run_at(16, 0.010), target(world=1, batch=4, threads=None), 0.0, "t")
    assert any(text.startswith("compute linear in the batch") for text in found.assumptions)
    assert found.terms["compute_s"] == pytest.approx(0.0025)
    assert found.note().endswith("; compute linear in the batch.")


def test_probe_summary_by_hand() -> None:
    """Two ranks of one thread, 10 ms of CPU a round; the first round is left out. Then rounds of (20, 40) and
    (20, 20) ms: the slowest waits 10 ms over a mean of 30, then 0 over 20: 10 / 50 = 20%. Each worker spun 20 and
    30 ms on average for 10 ms of CPU: 0.4 of a core on average."""
    found = cpu_probe.summarize({0: [0.05, 0.02, 0.02], 1: [0.05, 0.04, 0.02]}, 2, 1, 0.01)
    assert found.wait == pytest.approx(0.2) and found.share == pytest.approx(0.4)
    threads = cpu_probe.summarize({0: [0.1, 0.02], 1: [0.1, 0.04]}, 1, 2, 0.01)  # 1 rank of 2 threads
    assert threads.wait == 0 and threads.share == pytest.approx(2 * 0.01 * 2 / 0.06)


def test_the_probe_runs_here() -> None:
    found = cpu_probe.measure(2, 1, work_s=0.005, rounds=3)
    assert found is not None
    assert 0 < found.share <= 1.05 and found.wait >= 0


def write_run(run_dir: Path, batch: int, step_s: float) -> None:
    """A finished 1-process run of `batch` with 12 steps of `step_s` each (10 timed), 80% of it forward + backward,
    5% data, 5% optimizer, on a core of its own."""
    (run_dir / "observed").mkdir(parents=True)
    total = step_s * 10
    timing = {**timing_row(), "step_s": total, "forward_backward_s": 0.8 * total, "data_s": 0.05 * total,
              "optimizer_s": 0.05 * total, "cpu_s": total}  # fmt: skip
    steps = [{"kind": "step", "step": step, "samples": batch, "time": step * step_s} for step in range(1, 13)]
    (run_dir / "observed" / "rank-0.jsonl").write_text("".join(json.dumps(row) + "\n" for row in [*steps, timing]))
    RunRecord(run_id=run_dir.name, name=f"1x{batch}", status="completed",
              observed=observed_of(timing, batch=batch)).write(run_dir / "run.json")  # fmt: skip


def test_plan_predicts_from_two_runs_with_a_fitted_compute_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """1 x 16 in 10 ms a step (8 ms compute) and 1 x 64 in 20 ms (16 ms compute): 5.33 ms a micro-batch + 167 us a
    sample; 2 x 4 is predicted from that line, with the all-reduce cached (no torchrun here)."""
    write_run(tmp_path / "a", 16, 0.010)
    write_run(tmp_path / "b", 64, 0.020)
    monkeypatch.setenv("DDPCLI_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "cache").mkdir()
    probed = {"seconds": 0.001, "idle_seconds": 0.0008, "work_s": 0.005, "timed_from": "last_arrival"}
    key = f"v2/gloo/2/{PARAMS}/{socket.gethostname()}/5ms"  # 6 ms of compute at a core's pace: 5 ms of work
    (tmp_path / "cache" / "allreduce.json").write_text(json.dumps({key: probed}))
    (tmp_path / "train.py").write_text("", encoding="utf-8")  # plan refuses a script that is not there
    path = write_toml(tmp_path, """
[defaults]
script = "train.py"
per_device_batch_size = 16
lr = 0.1
env = { OMP_NUM_THREADS = "1" }
[baseline]
name = "1x16"
[[experiments]]
name = "2x4"
nproc_per_node = 2
per_device_batch_size = 4
""")  # fmt: skip
    result = CliRunner().invoke(app, ["plan", str(path), "--json", "--predict-from", str(tmp_path / "a"),
                                      "--predict-from", str(tmp_path / "b")])  # fmt: skip
    assert result.exit_code == 0, result.output
    two = json.loads(result.stdout)["experiments"][0]["prediction"]
    line = two["compute_model"]
    assert line["fixed_s"] == pytest.approx(0.008 - 16 * 0.008 / 48) and line["per_sample_s"] == pytest.approx(
        0.008 / 48
    )
    contention = two["cpu_contention"]
    assert two["step_terms_s"]["compute_s"] == pytest.approx((line["fixed_s"] + 4 * line["per_sample_s"]) * contention)
    assert two["baseline_step_scale"] == pytest.approx(1.0)
    assert two["comm_source"] == (
        "gloo probe, 2 processes, 1.13 MiB: 1 ms after 5 ms of CPU work a rank, from the last rank's arrival "
        "(0.8 ms idle)"
    )
    assert two["comm_probe"] == probed and two["step_terms_s"]["comm_s"] >= 0.001
    assert any(line.startswith("the all-reduce as a step meets it: 1 ms, probed after 5 ms") for line in
               two["assumptions"])  # fmt: skip


def test_host_now_probes_each_planned_cpu_configuration_once() -> None:
    """Two planned runs of 2 one-thread processes and one of 1 process: two probes, and their shares are what
    the predictions use; a GPU baseline probes nothing."""
    quick = replace(baseline(), step={**baseline().step, "step_s": 0.005})  # 5 ms rounds
    found = host_now(quick, [target(world=2), target(world=2, batch=32), target(world=1, threads=1)])
    assert sorted(found.shares) == [(1, 1), (2, 1)] and sorted(found.waits) == [(1, 1), (2, 1)]
    assert all(0 < share <= 1.05 for share in found.shares.values()) and found.waits[(1, 1)] == 0
    assert found.busy_cores is None  # every configuration was measured: /proc/stat was not needed
    assert host_now(replace(quick, device="cuda"), [target(world=2)]) == HostNow()
