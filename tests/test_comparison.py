"""ddpcli.compare on hand-made run directories whose numbers are known: arithmetic, interpolation, partners,
verdicts, notes, and the metrics reader's fast and careful paths."""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from ddpcli import compare as cmp
from ddpcli.errors import UserError
from ddpcli.rundir.params import param_diff
from tests.builders import make_run, records, row_of, state
from tests.contract_keys import COMPARE_KEYS

# ---------------------------------------------------------------------------------------------------------------
# Making run directories (also used by tests/test_compare_cli.py)


# ---------------------------------------------------------------------------------------------------------------
# Arithmetic


def test_speedup_and_efficiency_arithmetic() -> None:
    assert cmp.speedup(3200.0, 1000.0) == pytest.approx(3.2)
    assert cmp.scaling_efficiency(3.2, 4, 1) == pytest.approx(0.8)
    assert cmp.scaling_efficiency(3.2, 8, 2) == pytest.approx(0.8)
    assert cmp.speedup(None, 1000.0) is None
    assert cmp.speedup(10.0, None) is None
    assert cmp.scaling_efficiency(None, 4, 1) is None
    # issue 49: 1 x 64 against 1 x 16 at 7.62x the samples/s is a larger batch, not 762% scaling
    assert cmp.scaling_efficiency(7.62, 1, 1) is None and cmp.scaling_efficiency(1.0, 2, 2) is None


def test_samples_per_s_leaves_the_first_steps_set_up_out(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path, "4x16", nproc=4, lr=0.2, steps=0)
    path = run_dir / "metrics.jsonl"
    rows = [{"step": k, "samples": 64 * k, "time": 5.0 + 0.01 * k, "loss": 1.0} for k in range(1, 101)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert cmp.summarize_metrics(path).samples_per_s == pytest.approx(6400.0)  # 64 per 0.01 s, not 6400 / 6
    path.write_text(json.dumps(rows[0]) + "\n")
    # One row: its time holds the start-up (a 1-step run once showed speedup 0.0009x, prediction error +614).
    assert cmp.summarize_metrics(path).samples_per_s is None


def test_speedup_and_efficiency_from_run_records(tmp_path: Path) -> None:
    # 1x16: 16 samples per 0.016 s = 1000 samples/s. 4x16: 64 samples per 0.02 s = 3200 samples/s.
    base = make_run(tmp_path, "1x16", steps=100, step_time=0.016)
    four = make_run(tmp_path, "4x16", nproc=4, lr=0.2, steps=25, step_time=0.02)
    result = cmp.compare_runs(records(base, four))
    assert result.baseline.label == "1x16"
    assert result.baseline.run.metrics.samples_per_s == pytest.approx(1000.0)
    assert result.baseline.speedup == pytest.approx(1.0)
    row = row_of(result, "4x16")
    assert row.run.metrics.samples_per_s == pytest.approx(3200.0)
    assert row.speedup == pytest.approx(3.2)
    assert row.scaling_efficiency == pytest.approx(0.8)
    data = row.as_json()
    assert tuple(data) == COMPARE_KEYS
    assert data["samples_seen"] == 1600 and data["steps"] == 25 and data["global_batch_size"] == 64
    assert data["wall_time_s"] == pytest.approx(2.5)


def test_loss_at_the_baseline_sample_count(tmp_path: Path) -> None:
    # Baseline: 100 steps x 16 = 1600 samples. 4x24 logs every 96 samples: 1536 (step 16) and 1632 (step 17).
    base = make_run(tmp_path, "1x16", steps=100, loss=lambda k: 2.0 - k / 100)
    wide = make_run(tmp_path, "4x24", nproc=4, per_device=24, lr=0.3, steps=30, loss=lambda k: 10.0 / k)
    short = make_run(tmp_path, "2x16", nproc=2, lr=0.1, steps=40, status="failed")  # 1280 samples < 1600
    result = cmp.compare_runs(records(base, wide, short))
    assert result.baseline.loss_at_baseline_samples == pytest.approx(1.0)  # its own final loss
    expected = 10 / 16 + (10 / 17 - 10 / 16) * (1600 - 1536) / 96
    assert row_of(result, "4x24").loss_at_baseline_samples == pytest.approx(expected, rel=1e-12)
    assert row_of(result, "2x16").loss_at_baseline_samples is None


def test_fast_and_careful_readers_agree(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path, "4x24", nproc=4, per_device=24, steps=5000, loss=lambda k: 1 / math.sqrt(k))
    path = run_dir / "metrics.jsonl"
    for target in (96.0, 1600.0, 123456.0, 480000.0, 480001.0):
        fast = cmp.summarize_metrics(path, target, plot_points=100)
        careful = cmp.summarize_metrics(path, target, plot_points=100, full_parse=True)
        assert not fast.full_parse and careful.full_parse
        assert (fast.loss_at_target, fast.loss_points, fast.plot_points) == (
            careful.loss_at_target,
            careful.loss_points,
            careful.plot_points,
        )
        assert (fast.steps, fast.samples_seen, fast.final_loss, fast.rows) == (5000, 480000, 1 / math.sqrt(5000), 5000)


# ---------------------------------------------------------------------------------------------------------------
# Robust reading


def test_truncated_last_line_is_skipped_with_a_message(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path, "1x16", steps=10, metrics_tail='{"step": 11, "samples": 17')
    summary = cmp.summarize_metrics(run_dir / "metrics.jsonl")
    assert summary.steps == 10 and summary.samples_seen == 160 and not summary.full_parse
    assert summary.skipped == [f"{run_dir / 'metrics.jsonl'}:11: not a complete JSON line, skipped"]


@pytest.mark.parametrize(
    ("row", "said"),
    [
        ({"step": 11, "samples": 10**400}, "the row of step 11: samples is an integer of 401 digits"),
        ({"step": 11, "samples": "176"}, 'the row of step 11: samples is "176"'),
        ({"step": 11.5, "samples": None}, "a row: samples is null"),
        ({"step": 10**400}, "a row: step is an integer of 401 digits"),
    ],
)
def test_a_row_of_no_finite_samples_is_skipped_with_a_message(tmp_path: Path, row: dict[str, Any], said: str) -> None:
    """Issue 49: a row whose samples seen (or the step that stands in for it) is there but no finite number was left
    out of the curve without a word."""
    run_dir = make_run(tmp_path, "1x16", steps=10, metrics_tail=json.dumps(row) + "\n")
    summary = cmp.summarize_metrics(run_dir / "metrics.jsonl", global_batch_size=16)
    assert (summary.steps, summary.samples_seen) == (10, 160)
    assert summary.skipped == [f"{run_dir / 'metrics.jsonl'}: {said}, not a finite number; skipped"]


def test_last_row_without_newline_still_counts(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path, "1x16", steps=10, metrics_tail='{"step": 11, "samples": 176, "time": 1, "loss": 0.5}')
    summary = cmp.summarize_metrics(run_dir / "metrics.jsonl")
    assert (summary.steps, summary.samples_seen, summary.final_loss, summary.skipped) == (11, 176, 0.5, [])


def test_partial_line_in_the_middle_and_a_restart(tmp_path: Path) -> None:
    """A crash mid-write, then a restarted attempt logging again from step 1: the later attempt wins."""
    run_dir = make_run(tmp_path, "1x16", steps=6, loss=lambda k: 1.0)
    path = run_dir / "metrics.jsonl"
    second = "".join(
        json.dumps({"step": k, "samples": 16 * k, "time": 0.1 * k, "loss": 2.0}) + "\n" for k in range(1, 9)
    )
    path.write_text(path.read_text() + '{"step": 7, "sam' + second)
    summary = cmp.summarize_metrics(path, 48.0)
    assert summary.full_parse
    assert summary.skipped == [f"{path}:7: not a complete JSON line, skipped"]
    assert (summary.steps, summary.samples_seen, summary.final_loss, summary.loss_at_target) == (8, 128, 2.0, 2.0)
    # The restart's own step 1 shared the broken line, so the first attempt's step 1 (time 0.016) is the first row.
    assert summary.samples_per_s == pytest.approx((128 - 16) / (0.8 - 0.016))


def test_an_unrecorded_restart_is_caught_by_the_order_check(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path, "1x16", steps=50, loss=lambda k: 1.0)
    path = run_dir / "metrics.jsonl"
    again = [{"step": k, "samples": 16 * k, "time": 0.1 * k, "loss": 3.0} for k in range(1, 31)]
    path.write_text(path.read_text() + "".join(json.dumps(row) + "\n" for row in again))
    summary = cmp.summarize_metrics(path, 400.0)  # run.json says restarts 0: the fast reader starts
    assert summary.full_parse and summary.skipped == []
    assert (summary.rows, summary.steps, summary.samples_seen, summary.loss_at_target) == (30, 30, 480, 3.0)


def test_restarts_recorded_in_run_json_use_the_careful_reader(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path, "1x16", steps=4, extra={"restarts": 1})
    path = run_dir / "metrics.jsonl"
    path.write_text(path.read_text() + json.dumps({"step": 3, "samples": 48, "time": 9.0, "loss": 7.0}) + "\n")
    summary = cmp.load_run(run_dir).metrics
    assert summary.full_parse and (summary.steps, summary.samples_seen, summary.final_loss) == (3, 48, 7.0)


def test_rows_without_samples_count_steps_times_the_global_batch(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path, "4x16", nproc=4, lr=0.2, steps=0)
    rows = [{"step": k, "time": 0.5 * k, "loss": 1.0 / k} for k in range(1, 11)]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    metrics = cmp.load_run(run_dir, 96.0).metrics
    assert (metrics.steps, metrics.samples_seen, metrics.samples_per_s) == (10, 640, 128.0)
    assert metrics.loss_at_target == pytest.approx(1.0 + (0.5 - 1.0) * 32 / 64)  # between steps 1 and 2


def test_missing_and_empty_metrics(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path, "1x16", steps=0, status="failed")
    assert cmp.summarize_metrics(run_dir / "metrics.jsonl") == cmp.MetricsSummary()
    (run_dir / "metrics.jsonl").unlink()
    assert cmp.summarize_metrics(run_dir / "metrics.jsonl", 10.0) == cmp.MetricsSummary()


def test_not_a_run_directory(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"is not a run directory .* and contains none"):
        cmp.collect_runs([tmp_path])
    with pytest.raises(UserError, match="no such directory"):
        cmp.collect_runs([tmp_path / "missing"])
    bad = tmp_path / "runs" / "x" / "20260101T000000Z-aaaaaa"
    bad.mkdir(parents=True)
    (bad / "run.json").write_text("{not json")
    with pytest.raises(UserError, match="cannot read it"):
        cmp.collect_runs([bad])


def test_unreadable_run_under_a_root_is_a_warning(tmp_path: Path) -> None:
    make_run(tmp_path, "1x16")
    bad = tmp_path / "broken" / "20260101T000000Z-aaaaaa"
    bad.mkdir(parents=True)
    (bad / "run.json").write_text("[]")
    found, warnings = cmp.collect_runs([tmp_path])
    assert [record.name for record in found] == ["1x16"]
    assert len(warnings) == 1 and "expected a JSON object" in warnings[0]


# ---------------------------------------------------------------------------------------------------------------
# Selecting runs and the baseline


def test_newest_completed_run_of_each_name(tmp_path: Path) -> None:
    make_run(tmp_path, "1x16", run_id="20260101T000000Z-000001")
    make_run(tmp_path, "1x16", run_id="20260102T000000Z-000002")
    make_run(tmp_path, "1x16", run_id="20260103T000000Z-000003", status="failed")
    make_run(tmp_path, "4x16", nproc=4, run_id="20260101T000000Z-000004", status="failed")
    make_run(tmp_path, "4x16", nproc=4, run_id="20260102T000000Z-000005", status="interrupted")
    found, _ = cmp.collect_runs([tmp_path])
    assert sorted((record.name, record.run_id) for record in found) == [
        ("1x16", "20260102T000000Z-000002"),
        ("4x16", "20260102T000000Z-000005"),
    ]
    everything, _ = cmp.collect_runs([tmp_path], include_all=True)
    assert len(everything) == 5
    by_name, _ = cmp.collect_runs([tmp_path / "4x16"])  # a name directory
    assert [record.run_id for record in by_name] == ["20260102T000000Z-000005"]
    other = tmp_path.parent / f"{tmp_path.name}-other"
    make_run(other, "1x16", run_id="20260105T000000Z-000006")
    both, _ = cmp.collect_runs([tmp_path, other, tmp_path / "1x16" / "20260101T000000Z-000001"])
    assert sorted(record.run_id for record in both if record.name == "1x16") == [
        "20260101T000000Z-000001",  # given directly
        "20260102T000000Z-000002",  # newest completed under the first root
        "20260105T000000Z-000006",  # and under the second
    ]


def test_baseline_choice(tmp_path: Path) -> None:
    toml = tmp_path / "exp.toml"
    toml.write_text('[baseline]\nname = "1x64"\nper_device_batch_size = 64\nlr = 0.2\n')
    one = make_run(tmp_path, "1x16", scaling="explicit", experiment_file=str(toml))
    big = make_run(tmp_path, "1x64", per_device=64, lr=0.2, scaling="explicit", experiment_file=str(toml))
    four = make_run(tmp_path, "4x16", nproc=4, lr=0.2, experiment_file=str(toml))
    assert cmp.choose_baseline(records(one, big, four)) == (cmp.read_run_record(big), f"baseline of {toml}")
    assert cmp.choose_baseline(records(one, big, four), "4x16")[0].name == "4x16"
    with pytest.raises(UserError, match=r"^baseline 'nope': no such run here; runs: 1x16, 1x64, 4x16"):
        cmp.choose_baseline(records(one, big, four), "nope")
    toml.unlink()  # unreadable now: fall back to the plan's scaling, then to the smallest world size
    assert cmp.choose_baseline(records(one, big, four))[1] == "smallest world size"
    assert cmp.choose_baseline(records(one, big, four))[0].name == "1x16"
    other = make_run(tmp_path / "b", "1x16", run_id="20260101T000000Z-bbbbbb")  # scaling "baseline"
    chosen, why = cmp.choose_baseline(records(big, four, other))
    assert (chosen.run_dir, why) == (other, "the baseline in its run.json plan")


# ---------------------------------------------------------------------------------------------------------------
# Equivalence


def test_partner_matching(tmp_path: Path) -> None:
    four = make_run(tmp_path, "4x16", nproc=4, lr=0.2, steps=25)
    candidates = [
        make_run(tmp_path, "1x64-no-params", per_device=64, lr=0.2, steps=25),
        make_run(tmp_path, "1x64", per_device=64, lr=0.2, steps=25, params=state(w=[1.0])),
        make_run(
            tmp_path,
            "1x64-other-seed",
            per_device=64,
            lr=0.2,
            steps=25,
            seed=1,
            params=state(w=[1.0]),
            run_id="20270101T000000Z-newer",
        ),  # newer: only the same-seed preference puts 1x64 first
        make_run(tmp_path, "1x64-lr", per_device=64, lr=0.1, steps=25, params=state(w=[1.0])),
        make_run(tmp_path, "1x64-steps", per_device=64, lr=0.2, steps=30, params=state(w=[1.0])),
        make_run(tmp_path, "1x32x2", per_device=32, accum=2, lr=0.2 + 1e-12, steps=25, run_id="20250101T000000Z-0"),
        make_run(tmp_path, "2x32", nproc=2, per_device=32, lr=0.2, steps=25, params=state(w=[1.0])),
    ]
    summaries = [cmp.load_run(run_dir) for run_dir in candidates]
    run = cmp.load_run(four)
    partner = cmp.find_partner(run, summaries)
    assert partner is not None and partner.record.name == "1x64"
    # Without final_params.pt anywhere, a completed one with the same seed, then the newest, is taken.
    no_params = [summary for summary in summaries if not summary.record.params_path.is_file()]
    assert {summary.record.name for summary in no_params} == {"1x64-no-params", "1x32x2"}
    chosen = cmp.find_partner(run, no_params)
    assert chosen is not None and chosen.record.name == "1x64-no-params"
    assert cmp.find_partner(summaries[1], summaries) is None  # a single-process run has no partner


@pytest.fixture
def torch_or_skip() -> Any:
    return pytest.importorskip("torch")


def test_param_diff_and_verdicts(tmp_path: Path, torch_or_skip: Any) -> None:
    def saved(name: str, value: dict[str, Any]) -> Path:
        path = tmp_path / f"{name}.pt"
        torch_or_skip.save(value, path)
        return path

    a = saved("a", {"w": torch_or_skip.tensor([1.0, 2.0]), "n": torch_or_skip.tensor(3)})
    same = saved("same", {"w": torch_or_skip.tensor([1.0, 2.0]), "n": torch_or_skip.tensor(3)})
    near = saved("near", {"w": torch_or_skip.tensor([1.0, 2.0 + 2**-20]), "n": torch_or_skip.tensor(3)})
    far = saved("far", {"w": torch_or_skip.tensor([1.5, 2.0]), "n": torch_or_skip.tensor(3)})
    counter = saved("counter", {"w": torch_or_skip.tensor([1.0, 2.0]), "n": torch_or_skip.tensor(5)})
    keys = saved("keys", {"w": torch_or_skip.tensor([1.0, 2.0]), "m": torch_or_skip.tensor(3)})
    shape = saved("shape", {"w": torch_or_skip.tensor([1.0, 2.0, 3.0]), "n": torch_or_skip.tensor(3)})
    nan = saved("nan", {"w": torch_or_skip.tensor([1.0, math.nan]), "n": torch_or_skip.tensor(3)})
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"not a torch file")

    assert param_diff(a, same) == cmp.ParamDiff(max_abs_diff=0.0)
    assert param_diff(a, near).max_abs_diff == pytest.approx(2**-20)
    assert param_diff(a, far).max_abs_diff == pytest.approx(0.5)
    assert param_diff(a, counter).max_abs_diff == 2.0  # integer buffers (num_batches_tracked) count too
    assert "only in this run: n; only in the other: m" in (param_diff(a, keys).mismatch or "")
    assert param_diff(a, shape).mismatch == "w has shape (2,) here and (3,) in the other run"
    assert "non-finite" in (param_diff(a, nan).mismatch or "")
    assert (param_diff(a, junk).error or "").startswith(
        f"cannot read {junk}: torch.load(weights_only=True) refused it: "
    )
    module = tmp_path / "module.pt"
    torch_or_skip.save(torch_or_skip.nn.Linear(2, 2), module)  # not a state_dict: torch's long weights_only advice
    assert param_diff(a, module).error == (
        f"cannot read {module}: torch.load(weights_only=True) refused it: Unsupported global: "
        "GLOBAL torch.nn.modules.linear.Linear was not an allowed global by default"
    )

    assert cmp.verdict(param_diff(a, same), 1e-5) == cmp.EQUIVALENT
    assert cmp.verdict(param_diff(a, near), 1e-5) == cmp.EQUIVALENT  # 9.5e-7 <= 1e-5
    assert cmp.verdict(param_diff(a, near), 1e-7) == cmp.DIVERGED
    assert cmp.verdict(param_diff(a, far), 1e-5) == cmp.DIVERGED
    assert cmp.verdict(param_diff(a, keys), 1e-5) == cmp.DIVERGED
    assert cmp.verdict(param_diff(a, junk), 1e-5) is None
    assert cmp.verdict(None, 1e-5) is None


def test_equivalent_and_diverged_rows_with_notes(tmp_path: Path, torch_or_skip: Any) -> None:
    bn_args = ["torchrun", "-m", "train", "--batchnorm"]
    base = make_run(tmp_path, "1x16", params=state(w=[0.0]))
    make_run(tmp_path, "1x64", per_device=64, lr=0.2, steps=25, params=state(w=[1.0, 2.0]), argv=bn_args)
    make_run(tmp_path, "4x16", nproc=4, lr=0.2, steps=25, params=state(w=[1.0, 2.0 + 2**-22]), argv=bn_args)
    make_run(tmp_path, "8x8", nproc=8, per_device=8, lr=0.2, steps=25, params=state(w=[1.0, 2.5]), argv=bn_args)
    make_run(tmp_path, "2x8", nproc=2, per_device=8, steps=100, status="failed")
    found, _ = cmp.collect_runs([tmp_path])
    result = cmp.compare_runs(found, param_diff=param_diff)
    assert [row.label for row in result.rows] == ["1x16", "1x64", "2x8", "4x16", "8x8"]
    assert result.baseline.run.record.run_dir == base
    four, eight, two = row_of(result, "4x16"), row_of(result, "8x8"), row_of(result, "2x8")
    assert (four.verdict, four.partner_label) == (cmp.EQUIVALENT, "1x64")
    assert four.param_diff is not None and four.param_diff.max_abs_diff == 2**-22  # one float32 ulp at 2.0
    assert (eight.verdict, eight.partner_label, eight.as_json()["max_param_diff"]) == (cmp.DIVERGED, "1x64", 0.5)
    assert (two.verdict, two.partner_label) == (None, "1x16")
    assert two.param_diff == cmp.ParamDiff(error=f"2x8 has no final_params.pt (failed) in {two.run.record.run_dir}")
    notes = "\n".join(result.notes)
    assert "2x8 failed: rank 1 exited with code 1: RuntimeError: boom." in notes
    assert "8x8 diverged from 1x64: parameters differ by up to 0.5 (atol 1e-05)." in notes
    assert (
        "BatchNorm statistics differ: 8x8 normalises over 8 samples (8 per device) (its args have --batchnorm "
        "without --sync-bn; SyncBatchNorm would normalise over all), 1x64 over 64." in notes
    )
    assert "2x8 could not be checked against 1x16: 2x8 has no final_params.pt" in notes


def test_divergence_notes_name_recorded_differences(tmp_path: Path) -> None:
    sync = ["--batchnorm", "--sync-bn"]
    one = cmp.read_run_record(make_run(tmp_path, "1x64", per_device=64, lr=0.2, steps=25, argv=sync))
    four = cmp.read_run_record(make_run(tmp_path, "4x16", nproc=4, lr=0.2, steps=25, argv=sync))
    accum = cmp.read_run_record(make_run(tmp_path, "4x4x4", nproc=4, per_device=4, accum=4, lr=0.2, argv=sync))
    seeded = cmp.read_run_record(make_run(tmp_path, "4x16s", nproc=4, lr=0.2, steps=25, seed=7))
    assert cmp.divergence_causes(four, one) == []  # SyncBatchNorm over 4 x 16 = 64: same statistics
    assert cmp.divergence_causes(accum, one) == [
        "BatchNorm statistics differ: 4x4x4 normalises over 16 samples (4 processes x 4 with SyncBatchNorm), "
        "1x64 over 64"
    ]
    assert cmp.divergence_causes(seeded, one) == [
        "The runs differ in the seed (initial weights and data order): 7 vs 0"
    ]


def test_runs_from_different_experiment_files_are_noted(tmp_path: Path) -> None:
    make_run(tmp_path, "1x16", experiment_file="a.toml", extra={"experiment_file_sha256": "1" * 64})
    make_run(
        tmp_path, "1x64", per_device=64, lr=0.2, experiment_file="a.toml", extra={"experiment_file_sha256": "2" * 64}
    )
    make_run(tmp_path, "4x16", nproc=4, lr=0.2, steps=25, experiment_file="b.toml")
    make_run(tmp_path, "2x16", nproc=2, lr=0.1, steps=50)
    result = cmp.compare_runs(cmp.collect_runs([tmp_path])[0])
    assert result.experiment_files == ["(no experiment file)", "a.toml", "b.toml"]
    assert result.notes[-2:] == [
        "These runs come from 3 different experiment files ((no experiment file): 2x16; a.toml: 1x16, 1x64; "
        "b.toml: 4x16).",
        "a.toml was edited between these runs (its recorded sha256 differs).",
    ]


def test_status_reasons(tmp_path: Path) -> None:
    def reason(status: str, **extra: Any) -> str | None:
        run_dir = make_run(tmp_path / status / str(len(extra)), "x", status=status, extra=extra)
        return cmp.status_reason(cmp.read_run_record(run_dir).record)

    assert reason("completed") is None
    assert reason("failed") == "rank 1 exited with code 1: RuntimeError: boom"
    two = [{"rank": 3, "exit_code": -9, "error": None, "log_tail": "a\nKilled\n"}, {"rank": 5, "exit_code": 1}]
    assert reason("failed", failed_ranks=two) == "ranks 3, 5 failed; rank 3 exited with code -9: Killed"
    assert reason("interrupted", exit_code=130) == "exit code 130"
    assert reason("timed_out", wall_time_s=61.2) == "stopped: past its timeout after 61 s"
    assert reason("running", ended_at=None) == "no end recorded: still running, or the launcher itself was killed"
    assert (
        reason("lost") == "its launcher is gone and nothing recorded an end: it was killed (e.g. its terminal closed)"
    )


def test_a_running_record_whose_launcher_is_gone_reads_as_lost(tmp_path: Path) -> None:
    import socket
    import subprocess
    import sys

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(gone.stdout)  # that process has exited: its pid names no live launcher
    for name, supervisor, host, expected in (
        ("dead", pid, socket.gethostname(), "lost"),
        ("alive", os.getpid(), socket.gethostname(), "running"),
        ("elsewhere", pid, "another-host", "running"),
        ("old", None, socket.gethostname(), "running"),
    ):
        run_dir = tmp_path / name / "ID"
        run_dir.mkdir(parents=True)
        record = {"run_id": "ID", "name": name, "status": "running", "supervisor_pid": supervisor, "hostname": host}
        (run_dir / "run.json").write_text(json.dumps(record))
        assert cmp.read_run_record(run_dir).status == expected, name


def test_sparkline() -> None:
    assert cmp.sparkline([8.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.0, 1.0], width=8) == "█▇▆▅▄▃▂▁"
    assert cmp.sparkline([1.0, 3.0, 1.0, 3.0], width=2) == "▁▁"  # bucket means are equal
    assert cmp.sparkline([None, 2.0], width=2) == " ▁"
    assert cmp.sparkline([]) == ""
    assert len(cmp.sparkline([1.0 / k for k in range(1, 65)])) == cmp.SPARK_WIDTH


def test_curve_points_are_evenly_spaced_in_samples(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path, "4x25", nproc=4, per_device=25, steps=101, loss=lambda k: float(k))
    fast = cmp.summarize_metrics(run_dir / "metrics.jsonl", plot_points=5)
    # samples run from 100 (step 1) to 10,100 (step 101): targets 100, 2600, 5100, 7600, 10100 are steps 1..101.
    assert fast.plot_points == [(100.0, 1.0), (2600.0, 26.0), (5100.0, 51.0), (7600.0, 76.0), (10100.0, 101.0)]
    at_or_after = sorted({1 + -(-100 * i // 63) for i in range(cmp.SPARK_POINTS)})  # ceil: the row at or after
    assert fast.loss_points == [float(k) for k in at_or_after]
    few = make_run(tmp_path, "1x16", steps=3)
    assert cmp.summarize_metrics(few / "metrics.jsonl", plot_points=50).plot_points == [
        (16.0, 1.0),
        (32.0, 0.5),
        (48.0, 1 / 3),
    ]


def test_comparison_module_imports_neither_torch_rich_nor_planning() -> None:
    """Comparing reads run records (the pydantic run.json model), never experiment files, plans or parameters."""
    import subprocess

    heavy = ("torch", "rich", "ddpcli.experiment.schema", "ddpcli.experiment.planning", "ddpcli.rundir.params")
    code = f"import sys, ddpcli.compare; print(sorted(m for m in {heavy!r} if m in sys.modules))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def with_noise_scale(run_dir: Path, value: float) -> None:
    """Put a measured noise scale on the last metrics row, as the runtime logs it."""
    path = run_dir / "metrics.jsonl"
    lines = path.read_text().splitlines()
    last = json.loads(lines[-1])
    lines[-1] = json.dumps({**last, "noise_scale": value})
    path.write_text("\n".join(lines) + "\n")


def test_noise_scale_implications(tmp_path: Path) -> None:
    with_noise_scale(make_run(tmp_path, "1x16"), 48.0)
    with_noise_scale(make_run(tmp_path, "16x16", nproc=16, lr=0.8, steps=7), 64.0)
    comparison = cmp.compare_runs(cmp.collect_runs([tmp_path])[0], param_diff=lambda a, b: None)
    base, big = comparison.rows
    assert base.run.noise_scale == 48.0 and big.run.noise_scale == 64.0
    # B_crit 64: steps (1 + 64/16) / (1 + 64/256) = 4x fewer than at batch 16; efficiency 1 / (1 + 256/64) = 20%.
    assert big.predicted_step_speedup == pytest.approx(4.0)
    assert big.data_efficiency == pytest.approx(0.2)
    assert base.predicted_step_speedup == pytest.approx(1.0) and base.data_efficiency == pytest.approx(0.75)
    assert big.as_json()["noise_scale"] == 64.0
    assert any("16x16: noise scale 64, so global batch 256 should need 4.00x fewer steps" in note
               and "at 4x the critical batch" not in note for note in comparison.notes)  # fmt: skip


def test_far_above_the_critical_batch_is_flagged(tmp_path: Path) -> None:
    make_run(tmp_path, "1x16")
    with_noise_scale(make_run(tmp_path, "16x16", nproc=16, lr=0.8, steps=7), 20.0)
    comparison = cmp.compare_runs(cmp.collect_runs([tmp_path])[0], param_diff=lambda a, b: None)
    assert comparison.rows[0].data_efficiency is None  # the baseline measured nothing
    assert any("at 13x the critical batch, more devices buy almost no fewer steps" in note for note in comparison.notes)


def test_a_small_divergence_names_the_observed_autocast_before_float32_rounding(
    tmp_path: Path, torch_or_skip: Any
) -> None:
    """build-nanogpt under autocast bfloat16: 3.6e-4 apart (4.2e-7 without): bfloat16, not float32, rounds here."""
    bf16 = {"observed": {"world_size": 2, "optimizer_steps": 25, "amp": "autocast bfloat16", "device": "cpu",
                         "numerics": {"tf32_matmul": False, "deterministic": False}}}  # fmt: skip
    make_run(tmp_path, "1x64", per_device=64, lr=0.2, steps=25, params=state(w=[1.0, 2.0]))
    make_run(tmp_path, "2x32", nproc=2, per_device=32, lr=0.2, steps=25, params=state(w=[1.0, 2.0 + 3.6e-4]),
             extra=bf16)  # fmt: skip
    make_run(tmp_path, "4x16", nproc=4, lr=0.2, steps=25, params=state(w=[1.0, 2.0 + 3.6e-4]))
    notes = "\n".join(cmp.compare_runs(cmp.collect_runs([tmp_path])[0], param_diff=param_diff).notes)
    (bf16_note,) = [note for note in notes.splitlines() if note.startswith("2x32 diverged")]
    assert "2x32 trained under autocast bfloat16 (as observed)" in bf16_note
    assert "float32 rounding" not in bf16_note and "deterministic" not in bf16_note  # CPU: no such kernels
    (plain,) = [note for note in notes.splitlines() if note.startswith("4x16 diverged")]
    assert "float32 rounding accumulates" in plain and "autocast" not in plain


def breakdown(cpu_share: float, load: float) -> dict[str, Any]:
    step = {"step_s": 0.01, "data_s": 0.0005, "compute_s": 0.008, "comm_s": 0.0005, "cpu_share": cpu_share}
    return {"clock": "host", "median": step, "ranks": [{**step, "rank": 0, "steps": 30, "load_average": load}]}


def test_a_speedup_over_a_starved_baseline_is_marked_and_explained(tmp_path: Path) -> None:
    """dist_tuto at 2 processes showed 4.10x (205%) over a baseline that ran at 15% of a core (load 9.6)."""
    from ddpcli.cli.render.compare import _cells

    starved = {"observed": {"world_size": 1, "optimizer_steps": 100, "device": "cpu",
                            "time_breakdown": breakdown(0.15, 9.6)}}  # fmt: skip
    quiet = {"observed": {"world_size": 2, "optimizer_steps": 100, "device": "cpu",
                          "time_breakdown": breakdown(0.95, 1.1)}}  # fmt: skip
    make_run(tmp_path, "1x16", extra=starved, step_time=0.08)
    make_run(tmp_path, "2x8", nproc=2, per_device=8, extra=quiet, step_time=0.01)
    result = cmp.compare_runs(cmp.collect_runs([tmp_path])[0])
    two = row_of(result, "2x8")
    assert two.speedup == pytest.approx(8.0) and two.speed_unreliable
    assert not row_of(result, "1x16").speed_unreliable  # no speedup of its own to mark
    assert {"8.00x?", "400%?"} <= {cell.plain for cell in _cells(two)}
    assert (
        "2x8: its baseline 1x16 got 15% of a core per process, the host's load average 9.6 at its end: the host's "
        "other work set the baseline's samples/s, so this speedup (marked ?) is not a measure of DDP." in result.notes
    )


def test_a_speedup_beyond_linear_is_marked_and_names_the_compute_that_differed(tmp_path: Path) -> None:
    """A ported quickstart script on a loaded 2-core host: 1x64 then 2x64 at the same per-device batch, 4.56x (228%).
    Neither run was under STARVED_SHARE of a core (0.65 and 0.49), but the baseline's compute took 30.6 ms a step
    where each of the run's processes took 6.0 ms for the same 64 samples: the speedup measured the host."""
    from ddpcli.cli.render.compare import _cells

    def timed(compute_s: float, cpu_share: float, load: float) -> dict[str, Any]:
        step = {"step_s": compute_s + 0.004, "data_s": 0.002, "compute_s": compute_s, "comm_s": 0.001,
                "cpu_share": cpu_share}  # fmt: skip
        ranks = [{**step, "rank": 0, "steps": 7, "load_average": load}]
        return {"clock": "host", "median": step, "ranks": ranks}

    base = {"observed": {"world_size": 1, "optimizer_steps": 100, "device": "cpu",
                         "time_breakdown": timed(0.0306, 0.65, 2.2)}}  # fmt: skip
    fast = {"observed": {"world_size": 2, "optimizer_steps": 100, "device": "cpu",
                         "time_breakdown": timed(0.0060, 0.49, 2.5)}}  # fmt: skip
    make_run(tmp_path, "1x64", per_device=64, extra=base, step_time=0.08)
    make_run(tmp_path, "2x64", nproc=2, per_device=64, extra=fast, step_time=0.04)
    make_run(tmp_path, "2x32", nproc=2, per_device=32, extra=fast, step_time=0.045, run_id="20260101T000000Z-bbbbbb")
    result = cmp.compare_runs(cmp.collect_runs([tmp_path])[0])
    two = row_of(result, "2x64")
    assert two.scaling_efficiency == pytest.approx(2.0) and two.speed_unreliable
    assert {"4.00x?", "200%?"} <= {cell.plain for cell in _cells(two)}
    assert (
        "2x64: 200% scaling efficiency is beyond linear, which DDP does not give (short of cache effects): at 64 "
        "samples per process the baseline 1x64 computed 30.6 ms a step, this run 6 ms (median rank), the host's load "
        "average 2.2 and 2.5 at their ends; the speedup (marked ?) measures how the host served the two runs, not DDP."
        in result.notes
    )
    near_linear = row_of(result, "2x32")  # 1.78x at 2 processes of half the batch: 89%, nothing to say
    assert not near_linear.speed_unreliable
    assert not any(note.startswith("2x32: ") and "beyond linear" in note for note in result.notes)


def test_a_one_step_run_has_no_throughput_and_says_why(tmp_path: Path) -> None:
    make_run(tmp_path, "1x16", steps=50)
    make_run(tmp_path, "2x8", nproc=2, per_device=8, steps=1, planned_steps=1)
    result = cmp.compare_runs(cmp.collect_runs([tmp_path])[0])
    one = row_of(result, "2x8")
    assert (one.samples_per_s, one.speedup, one.scaling_efficiency) == (None, None, None)
    assert (
        "2x8: 1 logged step, none timed after the first (whose time holds the start-up): no samples/s, speedup or "
        "prediction error." in result.notes
    )


def test_a_model_fed_token_ids_shows_tokens_per_step_and_tokens_per_s(tmp_path: Path) -> None:
    """build-nanogpt counts tokens: 4-sequence micro-batches of 32 tokens, 512 tokens an optimizer step."""
    tokens = {"observed": {"world_size": 1, "optimizer_steps": 100, "per_device_batch_size": 16,
                           "tokens_per_micro_batch": 512, "tokens_per_step": 512}}  # fmt: skip
    make_run(tmp_path, "1x16", extra=tokens, step_time=0.01)
    notes = cmp.compare_runs(cmp.collect_runs([tmp_path])[0]).notes
    assert "1x16: 512 tokens per optimizer step (a sample is a sequence of 32 tokens), 51,200 tokens/s." in notes
