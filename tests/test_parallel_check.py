"""The merge's judgement of data parallelism from the ranks' parameter digests (ddpcli.rundir.parallel). Pure."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ddpcli.diagnosis.parallel import parallel_findings
from ddpcli.rundir.observations import RankObservation
from ddpcli.rundir.parallel import check_data_parallel


def rank(number: int, samples: list[float] | None, *, at: str = "end", group: bool = True, **run: Any) -> Any:
    seen = RankObservation(number)
    seen.end = {"process_group": group}
    seen.run = {"world_size": 2 if group else 1, **run}
    if samples is not None:
        seen.params[at] = {"kind": "params", "at": at, "sums": [len(samples)], "samples": samples, "numel": 100}
    return seen


def test_identical_ranks_are_one_data_parallel_group() -> None:
    check = check_data_parallel({0: rank(0, [1.0, 2.0]), 1: rank(1, [1.0, 2.0])}, 2)
    assert (check.size, check.synchronized, check.largest_difference) == (2, True, 0.0)
    assert parallel_findings(check, 8, {}) == []


def test_ranks_that_drifted_apart_trained_separately_and_the_largest_difference_is_named() -> None:
    ranks = {0: rank(0, [1.0, 2.0]), 1: rank(1, [1.5, 2.0]), 2: rank(2, [1.0, 2.0]), 3: rank(3, [1.0, 2.25])}
    check = check_data_parallel(ranks, 4)
    assert (check.size, check.synchronized, check.group_ranks) == (2, False, (0, 2))
    assert check.largest_difference == 0.5
    [finding] = parallel_findings(check, 8, {"ddp": True, "models": ["DistributedDataParallel"]})
    assert finding.code == "ranks_not_synchronized" and finding.severity == "error"
    assert "largest difference 0.5" in finding.message and "only 2 of 4 ranks" in finding.message
    assert "wrapped in DistributedDataParallel" in finding.message and "not 32" in finding.message


def test_a_difference_of_float_rounding_in_the_sum_is_no_drift() -> None:
    check = check_data_parallel({0: rank(0, [1.0, 1000.0]), 1: rank(1, [1.0, 1000.0 + 1e-7])}, 2)
    assert check.synchronized is True


def test_a_nan_rank_is_not_in_sync_and_no_difference_is_invented() -> None:
    check = check_data_parallel({0: rank(0, [1.0]), 1: rank(1, ["nan"])}, 2)  # type: ignore[list-item]
    assert (check.synchronized, check.size, check.largest_difference) == (False, 1, None)


def test_without_an_end_digest_the_first_step_is_compared() -> None:
    ranks = {0: rank(0, [1.0], at="first_step"), 1: rank(1, [3.0], at="first_step")}
    check = check_data_parallel(ranks, 2)
    assert (check.at, check.synchronized) == ("first_step", False)


def test_no_digest_at_all_is_not_judged() -> None:
    check = check_data_parallel({0: rank(0, None), 1: rank(1, None)}, 2)
    assert (check.synchronized, check.size) == (None, 2)
    assert parallel_findings(check, 8, {}) == []


def test_ranks_that_failed_before_training_without_a_group_are_not_called_separate_trainings() -> None:
    """init_process_group raised (the published FSDP2 example's device_id on a CPU): no group, no step, no digest."""
    check = check_data_parallel({0: rank(0, None, group=False), 1: rank(1, None, group=False)}, 1)
    assert (check.size, check.synchronized, check.process_group) == (None, None, False)
    assert parallel_findings(check, 8, {}, "example.py") == []


def test_no_process_group_means_one_process_per_training() -> None:
    check = check_data_parallel({0: rank(0, [1.0], group=False), 1: rank(1, [1.0], group=False)}, 1)
    assert (check.size, check.process_group) == (1, False)
    [finding] = parallel_findings(check, 8, {})
    assert finding.code == "no_process_group" and "2 separate trainings" in finding.message


def test_sharded_parameters_are_not_judged() -> None:
    ranks = {0: rank(0, None), 1: rank(1, None)}
    for seen in ranks.values():
        seen.params["end"] = {"kind": "params", "at": "end", "sharded": "FullyShardedDataParallel"}
    check = check_data_parallel(ranks, 2)
    assert (check.synchronized, check.size, check.sharded) == (None, 2, "FullyShardedDataParallel")
    [finding] = parallel_findings(check, 8, {})
    assert finding.code == "data_parallel_unchecked" and finding.severity == "info"


def test_ranks_of_different_sizes_hold_shards() -> None:
    ranks = {0: rank(0, [1.0, 2.0]), 1: rank(1, [1.0, 2.0])}
    ranks[1].params["end"]["numel"] = 50
    assert check_data_parallel(ranks, 2).sharded == "ranks hold parameters of different sizes"


def test_one_process_is_its_own_group() -> None:
    check = check_data_parallel({0: rank(0, [1.0], group=False)}, 1)
    assert (check.size, check.synchronized) == (1, None)


def test_ranks_on_other_nodes_are_taken_at_torchs_word() -> None:
    """A node's run directory holds its own ranks' files: a synchronised pair of a world of 4 is 4, a single rank of
    a world of 2 is 2 (nothing to compare it with), one process alone is 1."""
    assert check_data_parallel({0: rank(0, [1.0]), 1: rank(1, [1.0])}, 4).size == 4
    assert check_data_parallel({2: rank(2, [1.0])}, 2).size == 2
    assert check_data_parallel({0: rank(0, [1.0], group=False)}, 1).size == 1


def test_a_runs_check_is_made_once_for_its_summary_metrics_and_findings(tmp_path: Path, monkeypatch: Any) -> None:
    """finish.observe judges data parallelism once and hands the result to the merge, rank 0's metrics and the
    findings: two ranks that drifted apart are one verdict everywhere (size 1, only rank 0's samples, an error)."""
    from ddpcli.diagnosis import findings, finish
    from ddpcli.rundir import merge, parallel
    from ddpcli.rundir.record import RunRecord
    from tests.builders import end, run_rows, steps, write_rank

    for number in (0, 1):
        digest = {"kind": "params", "at": "end", "sums": [1], "samples": [1.0 + number], "numel": 100}
        write_rank(tmp_path, number, [{"kind": "start", "rank": number}, *steps(4, per_device=8), run_rows(2),
                                      digest, {**end(), "process_group": True}])  # fmt: skip
    checks: list[int] = []

    def counted(ranks: dict[int, Any], world_size: int | None) -> Any:
        checks.append(len(ranks))
        return check_data_parallel(ranks, world_size)

    for module in (parallel, merge, findings):
        monkeypatch.setattr(module, "check_data_parallel", counted)
    record = finish.observe(RunRecord(run_id="r", name="n", status="completed"), tmp_path)
    assert checks == [2]
    assert record.observed is not None and record.observed.data_parallel_size == 1
    assert record.observed.samples_seen == 32  # rank 0's 4 steps of 8: rank 1 trained a model of its own
    assert [finding.code for finding in record.findings if finding.severity == "error"] == ["ranks_not_synchronized"]
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [row["samples"] for row in rows] == [8, 16, 24, 32]


def test_ranks_holding_the_same_nans_are_in_sync() -> None:
    """A diverged DDP run: both ranks averaged the same inf into the same NaN (issue 26, item 3)."""
    check = check_data_parallel({0: rank(0, ["nan", "inf"]), 1: rank(1, ["nan", "inf"])}, 2)  # type: ignore[list-item]
    assert (check.synchronized, check.size, check.largest_difference) == (True, 2, 0.0)


def test_equal_raw_bits_are_equal_tensors_and_different_bits_are_not() -> None:
    ranks = {0: rank(0, ["nan"]), 1: rank(1, ["nan"])}  # type: ignore[list-item]
    ranks[0].params["end"]["bits"], ranks[1].params["end"]["bits"] = [123], [124]
    assert check_data_parallel(ranks, 2).synchronized is False
    ranks[1].params["end"]["bits"] = [123]
    assert check_data_parallel(ranks, 2).synchronized is True


def copies(framework: str | None, *, grad_calls: int = 0, prints: tuple[float, float] = (1.0, 1.0), **run: Any):
    ranks = {number: rank(number, [1.0, 2.0], **run) for number in (0, 1)}
    for number, seen in ranks.items():
        seen.end["collectives"] = {"calls": grad_calls, "grad_calls": grad_calls}
        seen.end["stacks"] = {"imported": [framework] if framework else []}
        seen.fingerprints = [[prints[number]]]
    return check_data_parallel(ranks, 2)


def test_equal_ranks_that_nothing_averaged_on_the_same_batches_are_copies_with_the_frameworks_switch() -> None:
    check = copies("transformers")
    assert (check.copies, check.size, check.group_ranks) == (True, 1, (0,))
    [finding] = parallel_findings(check, 8, {"models": ["GPT2LMHeadModel"]}, "run_clm.py")
    assert (finding.code, finding.severity) == ("copies_of_one_training", "error")
    assert "2 copies of one training" in finding.message and "--use_cpu" in finding.message
    assert "ddpcli port" not in finding.message
    [plain] = parallel_findings(copies(None), 8, {}, "train.py")
    assert plain.message.endswith("`ddpcli port train.py` makes a single-device script data-parallel")


def test_equal_ranks_are_data_parallel_with_evidence_of_averaging_or_different_batches() -> None:
    assert copies(None, ddp=True).copies is False  # the DDP wrapper averaged them
    assert copies(None, grad_calls=8).size == 2  # the script all-reduced its gradients
    assert copies(None, prints=(1.0, 2.0)).size == 2  # different batches and still equal: something averaged
