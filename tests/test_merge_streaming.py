"""The streaming read of rank files (ddpcli.rundir.timeline) keeps exactly the rows the simple rule keeps: for a
step seen twice the later row wins, and a resume at step k drops the earlier-written rows of steps after k."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ddpcli.rundir.merge import summarize
from ddpcli.rundir.merged_rows import iter_merged_metrics
from ddpcli.rundir.observations import read_observations, read_rank_file


def reference(lines: list[dict[str, Any]]) -> tuple[dict[int, dict], dict[int, dict]]:
    """The rule, holding every row in memory (what the merge did before it streamed)."""
    steps: dict[int, dict] = {}
    logs: dict[int, dict] = {}
    for row in lines:
        if row["kind"] == "resume":
            steps = {step: kept for step, kept in steps.items() if step <= row["step"]}
            logs = {step: kept for step, kept in logs.items() if step <= row["step"]}
        else:
            (steps if row["kind"] == "step" else logs)[row["step"]] = row
    return steps, logs


def attempts() -> st.SearchStrategy[list[dict[str, Any]]]:
    """Attempts of a process: each runs steps start..stop (some logged every few steps), maybe after a resume."""
    attempt = st.tuples(st.integers(0, 12), st.integers(0, 12), st.integers(1, 3), st.booleans(), st.integers(0, 9))
    jumps = st.lists(st.tuples(st.sampled_from(["step", "log"]), st.integers(0, 15)), max_size=4)

    def lines(parts: list[tuple[int, int, int, bool, int]], extra: list[tuple[str, int]]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for number, (start, length, every, resumed, tag) in enumerate(parts):
            if resumed:
                out.append({"kind": "resume", "step": start})
            for step in range(start + 1, start + length + 1):
                out.append({"kind": "step", "step": step, "loss": number * 100 + step, "samples": 4,
                            "micro_batches": 1, "tag": tag})  # fmt: skip
                if step % every == 0:
                    out.append({"kind": "log", "step": step, "loss": -step - number, "tag": tag})
        for kind, step in extra:  # rows out of order
            out.insert(step % (len(out) + 1), {"kind": kind, "step": step, "loss": 0.5, "samples": 4, "tag": 99})
        return out

    return st.builds(lines, st.lists(attempt, max_size=4), jumps)


@settings(max_examples=300, deadline=None)
@given(lines=attempts())
def test_the_streamed_rows_are_the_rules_rows(lines: list[dict[str, Any]]) -> None:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "rank-0.jsonl"
        path.write_text("".join(json.dumps(row) + "\n" for row in lines) + '{"kind": "step", "st')
        seen = read_rank_file(path, 0)
        steps, logs = reference(lines)
        assert dict(seen.steps.items()) == steps
        assert dict(seen.logs.items()) == logs
        assert list(seen.steps) == sorted(steps) and len(seen.steps) == len(steps)
        assert [seen.steps[step] for step in sorted(steps)] == [steps[step] for step in sorted(steps)]
        assert all(step in seen.steps for step in steps) and -1 not in seen.steps


def test_two_ranks_merge_step_by_step(tmp_path: Path) -> None:
    """Rank 1 missed step 2 and restarted (its step 3 written twice: the later row counts)."""
    folder = tmp_path / "observed"
    folder.mkdir()
    rank0 = [{"kind": "step", "step": step, "samples": 4, "micro_batches": 1, "loss": 1.0, "lr": [0.1]}
             for step in (1, 2, 3)]  # fmt: skip
    rank1 = [{"kind": "step", "step": 1, "samples": 4, "micro_batches": 1, "loss": 3.0},
             {"kind": "step", "step": 3, "samples": 4, "micro_batches": 1, "loss": 9.0},
             {"kind": "step", "step": 3, "samples": 4, "micro_batches": 1, "loss": 5.0}]  # fmt: skip
    for rank, rows in ((0, rank0), (1, rank1)):
        (folder / f"rank-{rank}.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    ranks = read_observations(tmp_path)
    rows = list(iter_merged_metrics(ranks))
    assert [(row["step"], row["samples"], row["loss"]) for row in rows] == [(1, 8, 2.0), (2, 12, 1.0), (3, 20, 3.0)]
    observed = summarize(ranks)
    assert observed is not None
    assert (observed.optimizer_steps, observed.samples_seen, observed.global_batch_size) == (3, 20, 8)
    assert observed.ranges == {"global_batch_size": [4, 8]}
