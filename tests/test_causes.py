"""Causes named from what was observed (ddpcli.rundir.causes, compare's initial-parameter and beta2 notes). Pure."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ddpcli.diagnosis.causes import script_findings, with_causes
from ddpcli.diagnosis.findings import plan_mismatches
from ddpcli.diagnosis.initial import initial_params_cause
from ddpcli.diagnosis.script_io import spawn_findings
from ddpcli.diagnosis.script_notes import beta2_note
from ddpcli.rundir.observations import RankObservation
from ddpcli.rundir.record import Finding, Observed, RunRecord
from ddpcli.worker.observer.loads import loaded_file


def explained(plan: dict[str, Any], observed: Observed, end: dict[str, Any] | None = None) -> dict[str, str]:
    findings = with_causes(plan_mismatches(plan, observed, completed=True), plan, observed, end or {})
    return {str(finding.field): finding.message for finding in findings}


def test_one_step_more_than_planned_is_named() -> None:
    messages = explained({"total_steps": 60}, Observed(optimizer_steps=61))
    assert messages["total_steps"].startswith("the script ran optimizer steps 61; the plan said 60: ")
    message = messages["total_steps"]
    assert "one step more than the count it is given" in message and "pass 59" in message


def test_an_lr_left_at_the_baselines_is_named_only_when_the_plan_scaled_it() -> None:
    plan = {"lr": 0.4, "batch_scale": 4.0, "scaling": "linear"}
    assert "stayed at the baseline's 0.1" in explained(plan, Observed(lr_base=0.1))["lr"]
    assert "baseline" not in explained(plan, Observed(lr_base=0.2))["lr"]
    sqrt = {"lr": 0.2, "batch_scale": 4.0, "scaling": "sqrt"}
    assert "stayed at the baseline's 0.1" in explained(sqrt, Observed(lr_base=0.1))["lr"]


def test_accumulation_divided_by_the_world_size_needs_that_arithmetic() -> None:
    plan = {"grad_accum_steps": 8, "world_size": 4}
    message = explained(plan, Observed(world_size=4, grad_accum_steps=2))["grad_accum_steps"]
    assert "divides its accumulation by the world size (2 = 8 / 4 processes)" in message
    assert "pass it" not in message  # whether a flag sets it is unknown here: no flag is named
    assert "divides" not in explained(plan, Observed(world_size=4, grad_accum_steps=3))["grad_accum_steps"]


def test_fewer_steps_after_a_file_loaded_at_start_name_the_file() -> None:
    end = {"loaded": [{"path": "/w/snapshot.pt", "mtime": 0.0, "during_sweep": True, "written_by": "a (id1)"}]}
    message = explained({"total_steps": 64}, Observed(optimizer_steps=32), end)["total_steps"]
    assert "loaded /w/snapshot.pt before its first step" in message and "written by run a (id1)" in message
    [finding] = script_findings(end, 32)
    assert finding.code == "resumed_from_other_run"
    own = {"loaded": [{"path": "/w/pretrained.pt", "mtime": 0.0, "during_sweep": False}]}
    assert script_findings(own, 32) == []  # a file older than the sweep, in no run: the script's own weights


def test_a_checkpoint_in_the_runs_own_directory_is_not_another_runs(tmp_path: Path) -> None:
    """Found by the restarts test: `ddpcli launch --resume` loads the run's own checkpoint.pt, written after the
    run (its id: the sweep's start) began, and was told it started from what another run left."""
    run_dir = tmp_path / "runs" / "a" / "20260101T000000Z-abc123"
    run_dir.mkdir(parents=True)
    (run_dir / "checkpoint.pt").write_bytes(b"x")
    entry = loaded_file(str(run_dir / "checkpoint.pt"), run_dir)
    assert entry is not None and entry["own_run"] is True and "during_sweep" not in entry
    assert script_findings({"loaded": [entry]}, 12) == []
    message = explained({"total_steps": 24}, Observed(optimizer_steps=12), {"loaded": [entry]})["total_steps"]
    assert "this run's own checkpoint, which a restart or a resume goes on from" in message
    other = tmp_path / "runs" / "b" / "20260101T000001Z-def456"
    other.mkdir(parents=True)
    elsewhere = loaded_file(str(run_dir / "checkpoint.pt"), other)
    assert elsewhere is not None and "own_run" not in elsewhere and elsewhere["during_sweep"] is True


def test_spawned_processes_are_a_finding() -> None:
    """From an older observation's end row (torch.multiprocessing.spawn counted there), and from `spawn` rows."""
    [finding] = spawn_findings({0: RankObservation(0, end={"spawned": 2})}, 0)
    assert finding.code == "script_spawned_processes" and "2 processes" in finding.message
    assert script_findings({"spawned": 2}, 0) == []  # rundir.script_io's now
    rows = [{"kind": "spawn", "how": "multiprocessing.Process", "count": 1, "target": "run"}] * 2
    [finding] = spawn_findings({0: RankObservation(0, spawns=rows), 1: RankObservation(1, spawns=rows)}, None)
    assert finding.message.startswith(
        "the script started 2 processes of its own (2 with multiprocessing.Process) running run (ranks 0, 1 each did)"
    )


def record(name: str, fingerprint: str | None, **observed: Any) -> RunRecord:
    return RunRecord(
        run_id=name, name=name, plan={"seed": 0, "batch_scale": 4.0, "notes": ["... beta2 0.999 becomes 0.996."]},
        observed=Observed(initial_params_fingerprint=fingerprint, **observed),
    )  # fmt: skip


def test_different_initial_parameters_are_named() -> None:
    assert initial_params_cause(record("a", "x"), record("b", "x")) is None
    assert initial_params_cause(record("a", "x"), record("b", None)) is None
    cause = initial_params_cause(record("a", "x"), record("b", "y"))
    assert cause == "The runs started from different initial parameters (the model initialisation is not seeded)"
    resumed = record("b", "y")
    resumed.findings = [Finding(code="resumed_from_other_run", severity="warning", message="...")]
    assert "b loaded another run's checkpoint" in str(initial_params_cause(record("a", "x"), resumed))


def test_the_beta2_note_uses_the_scripts_beta2() -> None:
    nanogpt = record("gpt", None, optimizer={"class": "AdamW", "betas": [0.9, 0.95]})
    assert beta2_note("gpt", nanogpt) == (
        "gpt: the script's AdamW uses beta2 0.95 (observed), not the 0.999 the plan's note assumed: the square-root "
        "rule makes it 0.8."
    )
    assert beta2_note("x", record("x", None, optimizer={"class": "AdamW", "betas": [0.9, 0.999]})) is None
    assert beta2_note("x", record("x", None, optimizer={"class": "SGD", "momentum": 0.9})) is None


def test_one_process_where_several_ran_without_a_process_group_is_named() -> None:
    message = explained({"world_size": 2}, Observed(world_size=1), {"process_group": False})["world_size"]
    assert message.endswith("no process called init_process_group: 2 separate trainings (see no_process_group)")


def test_a_value_the_script_derives_from_the_world_size_is_named_with_its_flag_or_none() -> None:
    """build-nanogpt derives its accumulation (`total_batch_size // (B * T * world)`, no flag); dist_tuto its batch
    (`bsz = 128 // world`). The placeholder is named only where the run's args hold it."""
    plan = {"world_size": 2, "grad_accum_steps": 4, "per_device_batch_size": 128}
    observed = Observed(world_size=2, grad_accum_steps=2, per_device_batch_size=64)
    mismatches = plan_mismatches(plan, observed, completed=True)

    def messages(args: list[str] | None) -> dict[str, str]:
        return {str(f.field): f.message for f in with_causes(mismatches, plan, observed, {}, args)}

    bare = messages(["--steps", "{total_steps}"])
    assert bare["grad_accum_steps"] == (
        "the script ran micro-batches per optimizer step 2; the plan said 4: the script divides its accumulation by "
        "the world size (2 = 4 / 2 processes): no flag in the run's args takes {grad_accum_steps}; the script "
        "computes it from a total of its own (e.g. `total // world_size`), so it keeps that total at every world "
        "size: change the total in the script, or compare the runs by what they ran"
    )
    assert "pass it" not in bare["grad_accum_steps"]
    assert (
        "the script divides its batch per process by the world size (64 = 128 / 2 processes)"
        in bare["per_device_batch_size"]
    )
    wired = messages(["--grad-accum", "{grad_accum_steps}"])
    assert "pass it 8 (grad_accum_steps x world_size) to get 4 per process" in wired["grad_accum_steps"]
    assert "pass it" not in wired["per_device_batch_size"]
    assert "pass it" not in messages(None)["grad_accum_steps"]


def test_batches_cut_by_a_share_smaller_than_the_batch_are_not_called_a_division() -> None:
    """pytorch/examples mnist ported, 2 x 64 on 64 samples: each rank's share is 32, the loader's batch_size 64, so
    every batch is 32. 32 = 64 / 2 was read as the script dividing its batch by the world size."""
    plan = {"world_size": 2, "per_device_batch_size": 64}
    observed = Observed(world_size=2, per_device_batch_size=32)
    loaders = [{"sampler": "DistributedSampler", "batch_size": 64, "training": True}]
    message = explained(plan, observed, {"loaders": loaders})["per_device_batch_size"]
    assert message == (
        "the script ran batch per process 32; the plan said 64: the training DataLoader's batch_size is 64, as "
        "planned, and every batch was 32: each process's share of the data (its sampler's) is smaller than the "
        "batch, so each batch is a partial one; a larger dataset or a smaller batch per process makes them full"
    )
    divided = [{"sampler": "DistributedSampler", "batch_size": 32, "training": True}]  # the script's own 64 // 2
    assert "divides its batch per process" in explained(plan, observed, {"loaders": divided})["per_device_batch_size"]
