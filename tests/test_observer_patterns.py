"""The observer on unusual but legitimate loops (issue 15, items 6-13): it counts what really ran and never changes
the run: every script exits with the code it has without the observer and ends with bit-identical parameters."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ddpcli.rundir.merge import summarize
from ddpcli.rundir.observations import read_observations
from tests import zygote
from tests.conftest import REPO

pytestmark = pytest.mark.interpreters

SCRIPT = REPO / "tests" / "observe_scripts" / "loop_patterns.py"
# How the observed process ends is the point of these: observed, they run in a fresh interpreter of their own, not
# forked from the zygote (which ends a bare run as python does: exit code, atexit).
OWN_INTERPRETER = ("os-exit", "exit-code", "spawn")


def run_pattern(
    run_dir: Path, pattern: str, *, observe: bool = True, extra_env: dict | None = None, fresh: bool = False
):
    """(exit code, final parameters, stderr) of the script under `python -m ddpcli.worker.observer`, or run as
    `python SCRIPT` when not observed (what torchrun runs with `--no-observe`). A process of its own each time,
    forked from the zygote (torch imported once) unless the pattern is about how the process ends."""
    import torch

    env = {key: value for key, value in os.environ.items() if not key.startswith(("DDPCLI_", "TORCHELASTIC"))}
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    env.update({"DDPCLI_RUN_DIR": str(run_dir), "OMP_NUM_THREADS": "1", "DDPCLI_OBSERVE": "1" if observe else "0"})
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    env.update(extra_env or {})
    run_dir.mkdir(parents=True, exist_ok=True)
    saved = run_dir / "script_final.pt"
    entry = ["-m", "ddpcli.worker.observer"] if observe else []  # --no-observe runs the script itself
    command = [sys.executable, *entry, str(SCRIPT), "--pattern", pattern, "--save", str(saved)]
    if fresh or (observe and pattern in OWN_INTERPRETER):  # the observer's own end is the point, not the bare run's
        result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, check=False)
    else:
        result = zygote.run(command, env=env, timeout=120)
    params = torch.load(saved, weights_only=True) if saved.exists() else None
    return result.returncode, params, result.stderr


def observed_unchanged(tmp_path: Path, pattern: str, read: bool = True, **kwargs):
    """Run with and without the observer: same exit code, bit-identical parameters; the observations."""
    import torch

    code, params, stderr = run_pattern(tmp_path / "observed", pattern, **kwargs)
    bare_code, bare_params, _ = run_pattern(tmp_path / "bare", pattern, observe=False)
    assert code == bare_code, stderr[-3000:]
    assert params is not None and bare_params is not None
    assert params.keys() == bare_params.keys()
    assert all(torch.equal(params[key], bare_params[key]) for key in params)
    return code, read_observations(tmp_path / "observed") if read else {}, stderr


def test_the_reference_loop(tmp_path: Path) -> None:
    code, ranks, _ = observed_unchanged(tmp_path, "plain")
    observed = summarize(ranks)
    assert code == 0 and observed is not None
    assert (observed.optimizer_steps, observed.per_device_batch_size, observed.grad_accum_steps) == (4, 8, 1)
    assert observed.samples_seen == 32 and observed.sampler == "RandomSampler"


def test_a_numpy_lr_is_stored_as_a_number(tmp_path: Path) -> None:
    """Item 6: the flush raised on a numpy float32, the worker exited 1."""
    code, ranks, _ = observed_unchanged(tmp_path, "numpy-lr")
    observed = summarize(ranks)
    assert code == 0 and observed is not None
    assert observed.optimizer_steps == 4 and observed.lr_peak == pytest.approx(0.1)


def test_os_exit_at_the_end_loses_no_rows(tmp_path: Path) -> None:
    """Item 8: the last rows were never flushed."""
    code, ranks, _ = observed_unchanged(tmp_path, "os-exit")
    observed = summarize(ranks)
    assert code == 0 and observed is not None
    assert observed.optimizer_steps == 4 and observed.samples_seen == 32
    assert ranks[0].end.get("steps") == 4


def test_the_scripts_own_exit_code_is_kept(tmp_path: Path) -> None:
    code, ranks, _ = observed_unchanged(tmp_path, "exit-code")
    assert code == 3 and summarize(ranks).optimizer_steps == 4  # type: ignore[union-attr]


def test_a_fresh_optimizer_over_the_same_parameters_takes_over(tmp_path: Path) -> None:
    """Item 9: only the first optimizer's 2 steps counted."""
    _, ranks, _ = observed_unchanged(tmp_path, "fresh-optimizer")
    observed = summarize(ranks)
    assert observed is not None and (observed.optimizer_steps, observed.samples_seen) == (4, 32)
    assert observed.lr_first == pytest.approx(0.1) and observed.lr_last == pytest.approx(0.05)


def test_a_step_replaced_on_the_instance_is_counted(tmp_path: Path) -> None:
    """Item 9: torch's hooks never ran, 0 steps were seen."""
    _, ranks, _ = observed_unchanged(tmp_path, "instance-step")
    observed = summarize(ranks)
    assert observed is not None and (observed.optimizer_steps, observed.per_device_batch_size) == (4, 8)


def test_a_bound_step_on_the_instance_stays_a_bound_method(tmp_path: Path) -> None:
    """An lr scheduler created after the observer wrapped `opt.step` unwraps `opt.step.__func__`: it must still work
    (the run's parameters are the same), and every step is counted once."""
    code, ranks, stderr = observed_unchanged(tmp_path, "bound-step")
    observed = summarize(ranks)
    assert code == 0 and observed is not None, stderr[-2000:]
    assert (observed.optimizer_steps, observed.samples_seen) == (4, 32)
    assert (observed.lr_first, observed.lr_last) == (pytest.approx(0.1), pytest.approx(0.05))


@pytest.mark.parametrize("pattern", ["double-backward", "loss-list"])
def test_several_losses_on_one_batch_are_one_micro_batch(tmp_path: Path, pattern: str) -> None:
    """Item 10: two backward calls counted as 2 micro-batches of half the batch; a list of losses not at all."""
    _, ranks, _ = observed_unchanged(tmp_path, pattern)
    observed = summarize(ranks)
    assert observed is not None
    assert (observed.per_device_batch_size, observed.grad_accum_steps, observed.samples_seen) == (8, 1, 32)
    assert all(isinstance(row["loss"], float) and row["loss"] > 0 for row in ranks[0].steps.values())


def test_a_gan_step_is_one_micro_batch_of_data(tmp_path: Path) -> None:
    """Seen on the dcgan fixture: the discriminator's two backward passes (data, generated samples) and the
    generator's one were read as 3 micro-batches a step (2 at the first), a global batch 3x the plan's and
    uneven accumulation. The generator's pass was for its own optimizer, the second pass trained on no data."""
    _, ranks, _ = observed_unchanged(tmp_path, "gan")
    observed = summarize(ranks)
    assert observed is not None
    assert (observed.optimizer_steps, observed.per_device_batch_size, observed.grad_accum_steps) == (4, 8, 1)
    assert observed.samples_seen == 32
    assert [row["micro_batches"] for row in ranks[0].steps.values()] == [1, 1, 1, 1]
    assert ranks[0].timing["micro_batches"] == 3  # the timed steps after the first: one micro-batch each


def test_a_discriminator_on_data_and_generated_samples_in_one_backward_counts_the_data(tmp_path: Path) -> None:
    """Found by the corpus (PyTorch-GAN's wgan, pytorch-tutorial's GAN): the discriminator's loss on the data batch
    and on generated samples back-propagated at once counted both forwards' samples: a batch of 16 where the
    loader gave 8, and plan_mismatch findings that were not true. Samples detached as they are made
    (`generator(z).detach()`, the output tensor dropped at once) were taken for data: the storage is what lives on."""
    _, ranks, _ = observed_unchanged(tmp_path, "gan-one-backward")
    observed = summarize(ranks)
    assert observed is not None  # two discriminator steps a round: samples not detached, then detached at once
    assert (observed.optimizer_steps, observed.per_device_batch_size, observed.grad_accum_steps) == (8, 8, 1)
    assert observed.samples_seen == 64


def test_a_discriminator_on_two_concatenations_of_one_batch_counts_the_batch_once(tmp_path: Path) -> None:
    """Found by the corpus (mrzhu-cool/pix2pix-pytorch): the discriminator on `cat(a, fake_b).detach()` and on
    `cat(a, b)` in one backward counted 16 samples where the loader gave 8 (a concatenation is new storage, so
    neither is a generator's output). Several forwards of one module on data count at most what the loaders gave
    since the last backward."""
    _, ranks, _ = observed_unchanged(tmp_path, "conditional-gan")
    observed = summarize(ranks)
    assert observed is not None
    assert (observed.optimizer_steps, observed.per_device_batch_size, observed.grad_accum_steps) == (4, 8, 1)
    assert observed.samples_seen == 32


def test_a_second_pass_on_the_same_batch_before_the_step_is_one_micro_batch(tmp_path: Path) -> None:
    """Found by the corpus (davda54/sam): SAM's two forward and backward passes on one batch, one step, were read
    as 2 micro-batches of 8: a plan_mismatch (accumulation 2, a global batch twice the plan's) that was not true."""
    _, ranks, _ = observed_unchanged(tmp_path, "sharpness-aware")
    observed = summarize(ranks)
    assert observed is not None
    assert (observed.optimizer_steps, observed.per_device_batch_size, observed.grad_accum_steps) == (4, 8, 1)
    assert observed.samples_seen == 32
    assert [row["micro_batches"] for row in ranks[0].steps.values()] == [1, 1, 1, 1]


@pytest.mark.parametrize("pattern", ["sliced-accumulation", "drawn-accumulation"])
def test_micro_batches_without_a_loader_stay_micro_batches(tmp_path: Path, pattern: str) -> None:
    """The other side of the same-batch rule: slices of one tensor share its storage, and a staging tensor is one
    tensor that new data is copied into; neither is the same batch again."""
    _, ranks, _ = observed_unchanged(tmp_path, pattern)
    observed = summarize(ranks)
    assert observed is not None
    assert (observed.optimizer_steps, observed.per_device_batch_size, observed.grad_accum_steps) == (4, 4, 2)
    assert observed.samples_seen == 32


def test_a_forward_that_no_backward_reached_is_not_training(tmp_path: Path) -> None:
    """Item 11: a validation batch of 32 with grad enabled, never back-propagated, was taken as the training one."""
    _, ranks, _ = observed_unchanged(tmp_path, "grad-validation")
    observed = summarize(ranks)
    assert observed is not None
    assert (observed.per_device_batch_size, observed.samples_seen) == (8, 32)
    assert observed.sampler == "RandomSampler"


def test_a_model_in_eval_mode_that_trains_is_the_model(tmp_path: Path) -> None:
    """Item 2: only a module in training mode was taken for the model (Lightning's wrapper after the sanity check)."""
    _, ranks, _ = observed_unchanged(tmp_path, "eval-wrapper")
    observed = summarize(ranks)
    assert observed is not None
    assert (observed.per_device_batch_size, observed.samples_seen) == (8, 32)
    assert ranks[0].run["models"] == ["Sequential"]


def test_blocks_recomputed_inside_the_backward_are_not_the_model(tmp_path: Path) -> None:
    """Activation checkpointing calls the block again, at the top level, while the backward runs."""
    _, ranks, _ = observed_unchanged(tmp_path, "checkpointed")
    observed = summarize(ranks)
    assert observed is not None
    assert (observed.per_device_batch_size, observed.grad_accum_steps, observed.samples_seen) == (8, 1, 32)
    assert ranks[0].run["models"] == ["Checkpointed"]


def test_a_batch_whose_size_cannot_be_read_is_unknown_not_zero(tmp_path: Path) -> None:
    """Item 12: a list batch was reported as batch 0."""
    _, ranks, _ = observed_unchanged(tmp_path, "list-batch")
    observed = summarize(ranks)
    assert observed is not None and observed.optimizer_steps == 4
    assert (observed.per_device_batch_size, observed.samples_seen, observed.grad_accum_steps) == (None, None, None)
    assert [row["samples"] for row in ranks[0].steps.values()] == [None] * 4


def test_a_file_that_cannot_be_written_never_changes_the_exit_code(tmp_path: Path) -> None:
    """Item 7: a full disk made the worker exit 1 although the script ended 0. /dev/full fails every write with
    ENOSPC: the failure is reported once on stderr, and the script's exit code and parameters are its own."""
    observed_dir = tmp_path / "observed" / "observed"
    observed_dir.mkdir(parents=True)
    (observed_dir / "rank-0.jsonl").symlink_to("/dev/full")
    code, _, stderr = observed_unchanged(tmp_path, "plain", read=False, fresh=True)  # reading /dev/full never ends
    assert code == 0
    assert stderr.count("observer_error") == 1 and "No space left on device" in stderr


def test_a_script_that_spawns_its_own_processes_is_told_so(tmp_path: Path) -> None:
    """Item 13: training ran in a child process the observer never saw; "optimizer steps 0" and no hint."""
    from ddpcli.diagnosis.findings import run_findings

    code, ranks, _ = observed_unchanged(tmp_path, "spawn")
    observed = summarize(ranks)
    assert code == 0 and observed is not None and observed.optimizer_steps == 0
    findings = run_findings({"total_steps": 4}, observed, ranks, completed=True)
    spawn = next(finding for finding in findings if finding.code == "script_spawned_processes")
    assert "torch.multiprocessing.spawn" in spawn.message and "1 process" in spawn.message


def test_every_value_a_row_holds_becomes_a_plain_number_or_is_dropped() -> None:
    """Item 6: what a script may put in a param group (numpy, Decimal, Fraction) is written as a number; what JSON
    cannot hold (a complex number, an object) is dropped rather than failing the flush."""
    import json
    from decimal import Decimal
    from fractions import Fraction

    import numpy as np

    from ddpcli.worker.stream import _to_host

    row = {
        "lr": [np.float32(0.5), np.float64(0.25), np.int64(3), Decimal("0.1"), Fraction(1, 4), np.bool_(True)],
        "odd": [complex(1, 2), object(), np.float32("nan"), np.array([1.5, 2.5])],
    }
    [plain] = _to_host([row])
    assert plain == {"lr": [0.5, 0.25, 3, 0.1, 0.25, True], "odd": [None, None, "nan", [1.5, 2.5]]}
    json.dumps(plain, allow_nan=False)


def test_rows_that_cannot_be_converted_are_dropped_and_said_so_the_rest_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A value the flush cannot read (a tensor on the meta device) loses its own rows, not the file: an error row
    says so, the rows after it are written, and stderr says it once."""
    import json

    import torch

    from ddpcli.worker.stream import RankStream

    stream = RankStream(tmp_path / "rank-0.jsonl")
    stream.add({"kind": "step", "step": 1, "loss": torch.empty((), device="meta")})
    stream.flush()
    stream.add({"kind": "step", "step": 2, "loss": torch.tensor(0.5)})
    stream.close()
    rows = [json.loads(line) for line in (tmp_path / "rank-0.jsonl").read_text().splitlines()]
    assert [row["kind"] for row in rows] == ["error", "step"] and rows[1] == {"kind": "step", "step": 2, "loss": 0.5}
    assert rows[0]["message"].startswith("rows dropped: ")
    assert capsys.readouterr().err.count("observer_error") == 1
