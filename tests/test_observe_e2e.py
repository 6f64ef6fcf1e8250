"""The observer on real third-party stacks: scripts that never import ddpcli, launched through `ddpcli launch`.

tests/observe_scripts/ holds a textbook DDP script, a PyTorch Lightning one, a Hugging Face Trainer one and two with
classic mistakes. Each group of runs is launched once per module (a fixture) and read back by several tests: what
run.json's `observed` says the script really did, metrics.jsonl, the findings, and `ddpcli compare --json`.
"""

from __future__ import annotations

import math
import sys
from typing import Any

import pytest

from ddpcli.diagnosis.slowness import SLOWNESS_CODES
from ddpcli.rundir.observations import read_observations
from tests.conftest import final_params
from tests.helpers import OBSERVE_SCRIPTS, codes, compare_json, launch
from tests.sweeps import FRAMEWORK_RUNS, FRAMEWORK_STEPS, FRAMEWORKS

pytestmark = pytest.mark.e2e

SCRIPTS = OBSERVE_SCRIPTS
STEPS = FRAMEWORK_STEPS

# -- plain DDP, Lightning, Hugging Face: 1 process, and 2 processes with accumulation 2 ----------------------------


@pytest.fixture(scope="module")
def frameworks(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    return launch(tmp_path_factory, FRAMEWORKS).runs()


@pytest.mark.parametrize("name", FRAMEWORK_RUNS)
def test_observed_is_what_the_script_really_ran(frameworks: dict[str, dict[str, Any]], name: str) -> None:
    world, batch, accumulation, lr = FRAMEWORK_RUNS[name]
    record = frameworks[name]["record"]
    assert record["status"] == "completed", record["failed_ranks"]
    observed = record["observed"]
    assert observed["world_size"] == world
    assert observed["per_device_batch_size"] == batch == record["plan"]["per_device_batch_size"]
    assert observed["grad_accum_steps"] == accumulation == record["plan"]["grad_accum_steps"]
    assert observed["global_batch_size"] == world * batch * accumulation == record["plan"]["global_batch_size"]
    assert observed["ranges"] == {}  # every step had the same batch
    assert observed["optimizer_steps"] == STEPS
    assert observed["samples_seen"] == STEPS * world * batch * accumulation
    assert observed["lr_peak"] == pytest.approx(lr)
    assert observed["ddp"] is (world > 1 or name.startswith("hf"))  # accelerate wraps in DDP even at 1 process
    assert observed["distinct_samples_across_ranks"] is (True if world > 1 else None)
    # Why-slow findings (a tiny model's all-reduce on gloo is a large share of its step) are tested on their own.
    assert [code for code in codes(record) if code not in SLOWNESS_CODES] == []


@pytest.mark.parametrize("name", FRAMEWORK_RUNS)
def test_metrics_have_a_finite_loss_for_every_optimizer_step(frameworks: dict[str, dict[str, Any]], name: str) -> None:
    world, batch, accumulation, lr = FRAMEWORK_RUNS[name]
    rows = frameworks[name]["metrics"].rows
    assert [row["step"] for row in rows] == list(range(1, STEPS + 1))
    assert [row["samples"] for row in rows] == [step * world * batch * accumulation for step in range(1, STEPS + 1)]
    assert all(isinstance(row["loss"], float) and math.isfinite(row["loss"]) and row["loss"] > 0 for row in rows)
    assert rows[0]["lr"] == pytest.approx(lr)


@pytest.mark.parametrize("name", FRAMEWORK_RUNS)
def test_the_noise_scale_is_measured_on_every_stacks_ddp_model(
    frameworks: dict[str, dict[str, Any]], name: str
) -> None:
    """Lightning's and accelerate's DDP models get the observer's comm hook like a plain one; without DDP (one
    process, plain and Lightning) there is nothing to hook, and at one process there is no second batch size."""
    world = FRAMEWORK_RUNS[name][0]
    run = frameworks[name]
    hooked = world > 1 or name.startswith("hf")
    assert all(
        seen.end["noise_scale_by"] == ("observer" if hooked else None)
        for seen in read_observations(run["dir"]).values()
    )
    rows = run["metrics"].rows
    assert all(("grad_sq_small" in row) is hooked for row in rows)
    if hooked:
        assert all(row["grad_sq_small"] > 0 and row["grad_sq_big"] > 0 for row in rows)
    if world == 1:
        assert not any("noise_scale" in row for row in rows)
    assert "noise_scale_not_measured" not in codes(run["record"])


def test_samplers_are_the_ones_each_stack_uses(frameworks: dict[str, dict[str, Any]]) -> None:
    sampler = {name: run["record"]["observed"]["sampler"] for name, run in frameworks.items()}
    assert sampler["plain-1"] == sampler["plain-2x2"] == "DistributedSampler"
    assert sampler["lightning-1"] == "RandomSampler"  # Lightning adds a DistributedSampler only under DDP
    assert sampler["lightning-2x2"] == "DistributedSampler"
    assert sampler["hf-1"] == "SeedableRandomSampler"  # accelerate's, not the DataLoader's placeholder
    assert sampler["hf-2x2"] == "SeedableRandomSampler"  # the sampler that decides the order, behind its shard
    chain = frameworks["hf-2x2"]["record"]["observed"]["sampler_chain"]
    assert chain == ["BatchSamplerShard", "BatchSampler", "SeedableRandomSampler"]


def test_compare_lists_every_framework_run(frameworks: dict[str, dict[str, Any]]) -> None:
    root = frameworks["plain-1"]["dir"].parent.parent
    rows = {row["name"]: row for row in compare_json(root)}
    assert rows.keys() == FRAMEWORK_RUNS.keys()
    for name, (world, batch, accumulation, lr) in FRAMEWORK_RUNS.items():
        row = rows[name]
        assert row["status"] == "completed"
        assert (row["world_size"], row["per_device_batch_size"], row["grad_accum_steps"]) == (
            world,
            batch,
            accumulation,
        )
        assert row["global_batch_size"] == world * batch * accumulation
        assert row["lr"] == pytest.approx(lr)
        assert row["steps"] == STEPS
        assert row["samples_seen"] == STEPS * world * batch * accumulation
        assert row["final_loss"] == pytest.approx(frameworks[name]["metrics"].rows[-1]["loss"])


# -- classic mistakes -------------------------------------------------------------------------------------------

MISTAKES = f"""
[defaults]
max_steps = 6
scaling = "none"
env = {{ OMP_NUM_THREADS = "1" }}

[baseline]
name = "hardcoded"
script = "{SCRIPTS / "hardcoded_batch.py"}"
args = ["--batch-size", "{{per_device_batch_size}}", "--steps", "{{total_steps}}"]
per_device_batch_size = 32
lr = 0.05

[[experiments]]
name = "no-sampler"
script = "{SCRIPTS / "no_sampler.py"}"
args = ["--batch-size", "{{per_device_batch_size}}", "--steps", "{{total_steps}}"]
nproc_per_node = 2
per_device_batch_size = 8
"""


@pytest.fixture(scope="module")
def mistakes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    return launch(tmp_path_factory, MISTAKES).runs()


def test_a_script_without_distributed_sampler_is_found(mistakes: dict[str, dict[str, Any]]) -> None:
    record = mistakes["no-sampler"]["record"]
    assert record["status"] == "completed"
    assert record["observed"]["distinct_samples_across_ranks"] is False
    assert record["observed"]["sampler"] == "RandomSampler"
    assert [code for code in codes(record) if code not in SLOWNESS_CODES] == ["same_samples_across_ranks"]


def test_a_hardcoded_batch_is_a_plan_mismatch_with_both_numbers(mistakes: dict[str, dict[str, Any]]) -> None:
    record = mistakes["hardcoded"]["record"]
    assert record["observed"]["per_device_batch_size"] == 8
    found = {finding["field"]: finding for finding in record["findings"] if finding["code"] == "plan_mismatch"}
    assert (found["per_device_batch_size"]["planned"], found["per_device_batch_size"]["observed"]) == (32, 8)
    assert "8" in found["per_device_batch_size"]["message"] and "32" in found["per_device_batch_size"]["message"]
    assert (found["global_batch_size"]["planned"], found["global_batch_size"]["observed"]) == (32, 8)
    assert set(found) == {"per_device_batch_size", "global_batch_size"}


# -- equivalence and transparency on the plain script ----------------------------------------------------------

EQUIVALENCE = f"""
[defaults]
script = "{SCRIPTS / "plain.py"}"
args = ["--batch-size", "{{per_device_batch_size}}", "--lr", "{{lr}}", "--steps", "{{total_steps}}",
        "--save", "{{run_dir}}/own_params.pt"]
max_steps = 8
scaling = "none"
env = {{ OMP_NUM_THREADS = "1" }}

[baseline]
name = "1x32"
per_device_batch_size = 32
lr = 0.1

[[experiments]]
name = "2x16"
nproc_per_node = 2
global_batch_size = 32

[[experiments]]
name = "4x8"
nproc_per_node = 4
global_batch_size = 32

[[experiments]]
name = "2x16-bare"
nproc_per_node = 2
global_batch_size = 32
observe = false
"""


@pytest.fixture(scope="module")
def equivalence(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    return launch(tmp_path_factory, EQUIVALENCE).runs()


def test_2x16_and_4x8_end_equivalent_to_1x32(equivalence: dict[str, dict[str, Any]]) -> None:
    root = equivalence["1x32"]["dir"].parent.parent
    rows = {row["name"]: row for row in compare_json(root)}
    for name in ("2x16", "4x8"):
        assert rows[name]["equivalent_to"] == "1x32"
        assert rows[name]["verdict"] == "equivalent", rows[name]
        assert 0 <= rows[name]["max_param_diff"] < 1e-6


def test_the_observer_saves_the_parameters_the_script_trained(equivalence: dict[str, dict[str, Any]]) -> None:
    run_dir = equivalence["2x16"]["dir"]
    import torch

    own = torch.load(run_dir / "own_params.pt", weights_only=True)
    observed = final_params(run_dir)  # keys <optimizer>.<group>.<index>, in the optimizer's order
    assert len(observed) == len(own)
    for saved, mine in zip(observed.values(), own.values(), strict=True):
        assert torch.equal(saved, mine)


def test_the_observer_is_transparent(equivalence: dict[str, dict[str, Any]]) -> None:
    """Bit for bit the same parameters with and without the observer, at 2 processes."""
    import torch

    bare, observed = equivalence["2x16-bare"], equivalence["2x16"]
    assert observed["record"]["status"] == "completed"
    # Run bare, a gloo worker aborts at interpreter teardown in about one run of twenty (what the observer's exit
    # prevents, see test_twenty_plain_two_process_runs_all_exit_cleanly): after training, after rank 0 saved.
    failures = bare["record"]["failed_ranks"]
    assert bare["record"]["status"] == "completed" or any("SIGABRT" in (f["error"] or "") for f in failures), failures
    assert bare["record"]["observed"] is None and not (bare["dir"] / "observed").exists()
    first = torch.load(bare["dir"] / "own_params.pt", weights_only=True)
    second = torch.load(observed["dir"] / "own_params.pt", weights_only=True)
    assert first.keys() == second.keys()
    assert all(torch.equal(first[key], second[key]) for key in first)


# -- the bundled example takes its plan from the run -----------------------------------------------------------

EXAMPLE = """
[defaults]
module = "ddpcli.examples.regression"
dataset_size = 256
epochs = 1
scaling = "auto"
optimizer = "sgd"
noise_scale = true
env = { OMP_NUM_THREADS = "1" }

[baseline]
name = "1x8"
per_device_batch_size = 8
lr = 0.05
warmup_steps = 4
seed = 3

[[experiments]]
name = "2x8x2"
nproc_per_node = 2
grad_accum_steps = 2
"""


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    return launch(tmp_path_factory, EXAMPLE).runs()


@pytest.mark.parametrize("name", ["1x8", "2x8x2"])
def test_the_example_without_args_runs_its_plan(example: dict[str, dict[str, Any]], name: str) -> None:
    record = example[name]["record"]
    plan, observed = record["plan"], record["observed"]
    assert record["status"] == "completed"
    for key in ("world_size", "per_device_batch_size", "grad_accum_steps", "global_batch_size"):
        assert observed[key] == plan[key], key
    assert observed["optimizer_steps"] == plan["total_steps"]
    assert observed["samples_seen"] == plan["total_steps"] * plan["global_batch_size"] == 256
    assert observed["lr_peak"] == pytest.approx(plan["lr"])
    assert observed["lr_first"] == pytest.approx(plan["lr"] / plan["warmup_steps"])
    assert "plan_mismatch" not in codes(record)


def test_the_observer_measures_the_runtime_helpers_noise_scale(example: dict[str, dict[str, Any]]) -> None:
    """The example uses ddpcli.runtime with noise on: the observer's comm hook measures its DDP model (one measurement,
    in the step rows), the helper logs none, and the logged rows carry the EMAs over every step."""
    run = example["2x8x2"]
    rows = run["metrics"].rows
    assert [row["step"] for row in rows] == list(range(1, len(rows) + 1))
    assert all(row["grad_sq_small"] > row["grad_sq_big"] > 0 for row in rows) and rows[-1]["noise_scale"] > 0
    for seen in read_observations(run["dir"]).values():
        assert seen.end["noise_scale_by"] == "observer"
        assert all(isinstance(row["sq_small"], float) for row in seen.steps.values())
        assert not any("grad_sq_small" in row for row in seen.logs.values())
    assert "noise_scale_not_measured" not in codes(run["record"])
    one = example["1x8"]  # one process, no accumulation: no second batch size, nothing measured
    assert not any("grad_sq_small" in row for row in one["metrics"].rows)
    assert all(seen.end["noise_scale_by"] is None for seen in read_observations(one["dir"]).values())


# -- the gradient noise scale of a plain script's DDP model --------------------------------------------------------

NOISE = f"""
[defaults]
script = "{SCRIPTS / "noise_linear_plain.py"}"
args = ["--batch-size", "{{per_device_batch_size}}", "--grad-accum", "{{grad_accum_steps}}",
        "--steps", "{{total_steps}}"]
max_steps = 300
lr = 0.0001
scaling = "none"
noise_scale = true
env = {{ OMP_NUM_THREADS = "1" }}

[baseline]
name = "4x8"
nproc_per_node = 4
per_device_batch_size = 8

[[experiments]]
name = "2x4x2-scaler"
nproc_per_node = 2
per_device_batch_size = 4
grad_accum_steps = 2
args = ["--batch-size", "{{per_device_batch_size}}", "--grad-accum", "{{grad_accum_steps}}",
        "--steps", "{{total_steps}}", "--grad-scaler", "1024"]

[[experiments]]
name = "own-hook"
nproc_per_node = 2
max_steps = 5
args = ["--batch-size", "{{per_device_batch_size}}", "--steps", "{{total_steps}}", "--comm-hook"]
"""
NOISE_TOLERANCE = 0.15  # as tests/test_noise_scale.py: an EMA over ~100 steps of a noisy estimate


@pytest.fixture(scope="module")
def noise(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    return launch(tmp_path_factory, NOISE).runs()


def true_noise() -> dict[str, float]:
    sys.path.insert(0, str(SCRIPTS))
    try:
        import noise_linear_plain
    finally:
        sys.path.remove(str(SCRIPTS))
    dataset, w = noise_linear_plain.make_problem(8192, 8, 0)
    return noise_linear_plain.true_statistics(dataset, w)


@pytest.mark.parametrize(("name", "b_small", "b_big"), [("4x8", 8, 32), ("2x4x2-scaler", 8, 16)])
def test_the_observer_measures_the_true_noise_scale(
    noise: dict[str, dict[str, Any]], name: str, b_small: int, b_big: int
) -> None:
    """B_small is one rank's accumulated batch, B_big the global one; the GradScaler's 1024 is divided out."""
    truth, rows = true_noise(), noise[name]["metrics"].rows
    assert 10 < truth["b_simple_true"] < 30  # between the batch sizes: a meaningful test
    assert len(rows) == 300 and all("grad_sq_small" in row for row in rows)
    last = rows[-1]
    assert last["noise_scale"] == pytest.approx(truth["b_simple_true"], rel=NOISE_TOLERANCE)
    for key, batch in (("grad_sq_small", b_small), ("grad_sq_big", b_big)):
        expected = truth["grad_sq_true"] + truth["trace_sigma_true"] / batch  # E|G_B|^2 = |G|^2 + tr(Sigma)/B
        assert last[key] == pytest.approx(expected, rel=0.15), key
    assert "noise_scale_not_measured" not in codes(noise[name]["record"])


def test_a_script_with_its_own_comm_hook_is_not_measured(noise: dict[str, dict[str, Any]]) -> None:
    run = noise["own-hook"]
    assert run["record"]["status"] == "completed"
    assert "noise_scale_not_measured" in codes(run["record"])
    assert not any("noise_scale" in row or "grad_sq_small" in row for row in run["metrics"].rows)
