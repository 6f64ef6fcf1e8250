"""Step by step from hand-written observation files (pure, no torch): the base lr against the plan, optimizer steps
that accumulated another number of micro-batches or trained on fewer samples, advice fitted to the device."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ddpcli.diagnosis.advice import batchnorm_fix
from ddpcli.diagnosis.findings import plan_mismatches, run_findings
from ddpcli.rundir.merge import summarize
from ddpcli.rundir.observations import read_observations
from ddpcli.rundir.record import Observed
from tests.builders import end, run_rows, write_rank

PLAN = {"world_size": 2, "per_device_batch_size": 8, "grad_accum_steps": 2, "global_batch_size": 32,
        "total_steps": 4, "lr": 0.1}  # fmt: skip


def step(number: int, micro: int, samples: int, lr: float = 0.1) -> dict[str, Any]:
    return {"kind": "step", "step": number, "micro_batches": micro, "samples": samples, "loss": 1.0, "lr": [lr],
            "time": 0.01 * number}  # fmt: skip


def findings_of(run_dir: Path, plan: dict[str, Any] = PLAN) -> list[Any]:
    ranks = read_observations(run_dir)
    observed = summarize(ranks)
    assert observed is not None
    return run_findings(plan, observed, ranks, completed=True)


def test_a_first_step_of_one_micro_batch_is_uneven_accumulation_and_a_sample_shortfall(tmp_path: Path) -> None:
    """`if step % accum == 0: optimizer.step()` with step counted from 0: step 1 is 1 micro-batch of 8."""
    for rank in (0, 1):
        write_rank(tmp_path, rank, [step(1, 1, 8), *(step(n, 2, 16) for n in (2, 3, 4)), run_rows(2), end()])
    found = findings_of(tmp_path)
    assert [finding.code for finding in found] == ["uneven_accumulation", "samples_below_plan"]
    uneven, short = found
    assert uneven.message.startswith("1 of 4 optimizer steps accumulated another number of micro-batches than the 2")
    assert "step 1 (1)" in uneven.message and "(step + 1) % accumulation == 0" in uneven.message
    assert "step 1 (16)" in short.message and "112 samples in all against the plan's 4 x 32 = 128" in short.message
    assert (short.planned, short.observed) == (128, 16 + 3 * 32)


def test_a_short_last_step_names_its_step_and_why(tmp_path: Path) -> None:
    write_rank(tmp_path, 0, [*(step(n, 2, 16) for n in (1, 2, 3)), step(4, 1, 8), run_rows(1), end()])
    plan = {**PLAN, "world_size": 1, "global_batch_size": 16}
    uneven, short = findings_of(tmp_path, plan)
    assert "step 4 (1): the last step took what was left of the data" in uneven.message
    assert "step 4 (8)" in short.message and (short.planned, short.observed) == (64, 56)


def test_many_odd_steps_are_listed_up_to_eight_then_counted(tmp_path: Path) -> None:
    rows = [step(n, 1 if n % 2 else 2, 8 if n % 2 else 16) for n in range(1, 22)]
    rows += [step(n, 2, 16) for n in range(22, 40)]
    write_rank(tmp_path, 0, [*rows, run_rows(1), end()])
    uneven = findings_of(tmp_path, {})[0]
    assert uneven.message.startswith("11 of 39 optimizer steps")
    assert "steps 1 (1), 3 (1), 5 (1), 7 (1), 9 (1), 11 (1), 13 (1), 15 (1) and 3 more" in uneven.message


def test_even_steps_and_a_step_a_rank_never_reported_are_no_step_finding(tmp_path: Path) -> None:
    write_rank(tmp_path, 0, [*(step(n, 2, 16) for n in (1, 2, 3)), run_rows(2), end()])
    write_rank(tmp_path, 1, [*(step(n, 2, 16) for n in (1, 2)), run_rows(2), end()])
    codes = [finding.code for finding in findings_of(tmp_path, {})]
    assert codes == ["uneven_steps_across_ranks"]  # step 3 is short only because rank 1 never took it


def test_the_base_lr_is_the_schedulers_initial_lr_else_the_peak(tmp_path: Path) -> None:
    cosine = [step(n, 2, 16, lr=0.1 * (0.9 - 0.1 * n)) for n in (1, 2, 3, 4)]  # a cosine that never reaches 0.1
    write_rank(tmp_path / "scheduled", 0, [*cosine, run_rows(1), {**end(), "initial_lr": [0.1, 0.01]}])
    write_rank(tmp_path / "plain", 0, [step(1, 2, 16, lr=0.05), step(2, 2, 16, lr=0.1), run_rows(1), end()])
    scheduled = summarize(read_observations(tmp_path / "scheduled"))
    plain = summarize(read_observations(tmp_path / "plain"))
    assert scheduled is not None and plain is not None
    assert (scheduled.lr_base, scheduled.lr_peak) == (0.1, pytest.approx(0.08))
    assert (plain.lr_base, plain.lr_peak) == (0.1, 0.1)  # a warmup written by hand rises to its base


def test_the_lr_plan_check_reads_the_base_lr_not_the_peak() -> None:
    plan = {"lr": 0.05}
    below = Observed(lr_base=0.05, lr_peak=0.0375)  # timm's cosine over 3 epochs: --lr was honoured
    assert plan_mismatches(plan, below, completed=True) == []
    (wrong,) = plan_mismatches(plan, Observed(lr_base=0.1, lr_peak=0.1), completed=True)
    assert (wrong.field, wrong.planned, wrong.observed) == ("lr", 0.05, 0.1)
    assert wrong.message == "the script ran base learning rate 0.1; the plan said 0.05"


@pytest.mark.parametrize(
    ("device", "backend", "says", "never"),
    [
        ("cpu", "gloo", "ddpcli.runtime's cross-process BatchNorm", "convert_sync_batchnorm"),
        ("cpu", "gloo", "GroupNorm", "convert them"),
        ("cuda", "nccl", "nn.SyncBatchNorm.convert_sync_batchnorm(model)", "cross-process"),
        ("cuda", "gloo", "with the nccl backend", "cross-process"),
        (None, None, "on CPU (where SyncBatchNorm fails)", "SyncBatchNorm fails on"),
    ],
)
def test_batchnorm_advice_fits_the_device(device: str | None, backend: str | None, says: str, never: str) -> None:
    advice = batchnorm_fix(device, backend)
    assert says in advice and never not in advice


def test_an_unsynchronised_batchnorm_finding_on_cpu_does_not_say_syncbatchnorm_alone(tmp_path: Path) -> None:
    for rank in (0, 1):
        write_rank(tmp_path, rank, [*(step(n, 2, 16) for n in (1, 2)), run_rows(2, norms=2), end()])
    (finding,) = [f for f in findings_of(tmp_path, {}) if f.code == "batchnorm_not_synchronized"]
    assert finding.message.endswith(
        "SyncBatchNorm fails on cpu (gloo): use ddpcli.runtime's cross-process BatchNorm (ctx.sync_batchnorm(model), "
        "or runtime.convert_batchnorm(model) before DDP), GroupNorm instead of BatchNorm, or running on GPUs with "
        "SyncBatchNorm"
    )


EPOCHS_480 = {"world_size": 2, "per_device_batch_size": 32, "grad_accum_steps": 1, "global_batch_size": 64,
              "total_steps": 16, "lr": 0.1, "dataset_size": 480, "epochs": 2, "samples_per_rank": 240,
              "drop_last": False, "steps_per_epoch": 8}  # fmt: skip


def test_partial_last_batches_the_plan_holds_are_no_sample_shortfall(tmp_path: Path) -> None:
    """Fabric's image_classifier: 480 samples x 2 epochs at 2 x 32 ran 960 samples, the plan's own dataset; 16 x
    64 = 1024 is no number the plan said."""
    epoch = [*(32 for _ in range(7)), 16]
    for rank in (0, 1):
        rows = [step(n + 1, 1, samples) for n, samples in enumerate(epoch + epoch)]
        write_rank(tmp_path, rank, [*rows, run_rows(2), end()])
    assert "samples_below_plan" not in [finding.code for finding in findings_of(tmp_path, EPOCHS_480)]
    one = {"world_size": 1, "per_device_batch_size": 48, "grad_accum_steps": 1, "global_batch_size": 48,
           "total_steps": 8, "dataset_size": 160, "epochs": 2, "samples_per_rank": 160}  # fmt: skip
    write_rank(tmp_path / "one", 0, [*(step(n + 1, 1, s) for n, s in enumerate([48, 48, 48, 16] * 2)), run_rows(1),
                                     end()])  # fmt: skip
    assert "samples_below_plan" not in [finding.code for finding in findings_of(tmp_path / "one", one)]


def test_an_epoch_plan_counts_its_shortfall_against_its_own_samples(tmp_path: Path) -> None:
    """A first step of 1 micro-batch of 2 trains fewer than the epochs hold: named against 960, not 1024."""
    plan = {**EPOCHS_480, "grad_accum_steps": 2, "global_batch_size": 128, "total_steps": 8, "steps_per_epoch": 4}
    epoch = [64, 64, 64, 48]  # one process: 7 x 32 + 16 in steps of 2 micro-batches
    for rank in (0, 1):
        rows = [step(1, 1, 32), *(step(n + 2, 2, s) for n, s in enumerate(epoch[1:] + epoch))]
        write_rank(tmp_path, rank, [*rows, run_rows(2), end()])
    (short,) = [finding for finding in findings_of(tmp_path, plan) if finding.code == "samples_below_plan"]
    assert (short.planned, short.observed) == (960, 960 - 64)
    assert "896 samples in all against the plan's 960 (2 epochs of 480 samples, 240 per process an epoch)" in (
        short.message
    )


def test_tokens_are_counted_over_ranks_only_where_the_steps_had_token_ids(tmp_path: Path) -> None:
    for rank in (0, 1):
        write_rank(tmp_path / "lm", rank, [*({**step(n, 2, 16), "tokens": 16 * 32} for n in (1, 2)), run_rows(2),
                                           end()])  # fmt: skip
        write_rank(tmp_path / "mlp", rank, [*(step(n, 2, 16) for n in (1, 2)), run_rows(2), end()])
    lm, mlp = summarize(read_observations(tmp_path / "lm")), summarize(read_observations(tmp_path / "mlp"))
    assert lm is not None and mlp is not None
    assert (lm.tokens_per_micro_batch, lm.tokens_per_step) == (256, 1024)
    assert (mlp.tokens_per_micro_batch, mlp.tokens_per_step) == (None, None)
