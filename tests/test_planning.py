"""The batch, learning-rate, warmup and epoch arithmetic, pinned with concrete numbers and properties."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ddpcli.errors import ConfigError
from ddpcli.experiment.loading import validate_experiment_data
from ddpcli.experiment.planning import resolve_plan
from ddpcli.experiment.resolved import Plan
from tests.contract_keys import RUN_KEYS

SOURCE = Path("/tmp/exp/experiments.toml")


def plan_of(baseline: dict, *experiments: dict, defaults: dict | None = None) -> Plan:
    data = {"baseline": {"name": "base", **baseline}, "experiments": list(experiments)}
    if defaults is not None:
        data["defaults"] = defaults
    return resolve_plan(validate_experiment_data(data, SOURCE), SOURCE)


SEED = {"name": "1x16", "nproc_per_node": 1, "per_device_batch_size": 16, "lr": 0.05, "warmup_steps": 100}


def test_seed_case_linear_keeps_per_device_batch() -> None:
    plan = plan_of(
        SEED, {"name": "4x16", "nproc_per_node": 4}, {"name": "4x4", "nproc_per_node": 4, "global_batch_size": 16}
    )
    four_by_16, four_by_4 = plan.experiments
    sixteen = four_by_16.plan
    assert (sixteen.world_size, sixteen.per_device_batch_size, sixteen.global_batch_size) == (4, 16, 64)
    assert four_by_16.plan.batch_scale == 4.0
    assert four_by_16.plan.scaling == "linear"
    assert four_by_16.plan.lr == pytest.approx(0.2)
    assert four_by_16.plan.warmup_steps == 25
    assert (four_by_4.plan.per_device_batch_size, four_by_4.plan.global_batch_size, four_by_4.plan.lr) == (4, 16, 0.05)
    assert four_by_4.plan.warmup_steps == 100


def test_seed_case_sqrt_for_adam() -> None:
    plan = plan_of(SEED, {"name": "4x16", "nproc_per_node": 4}, defaults={"optimizer": "adam"})
    assert plan.experiments[0].plan.scaling == "sqrt"
    assert plan.experiments[0].plan.lr == pytest.approx(0.1)
    # Malladi et al.: 1 - beta2 scales WITH the batch ratio (x4 here): 0.999 -> 1 - 0.004.
    assert any("beta2 0.999 becomes 0.996." in note for note in plan.experiments[0].plan.notes)


@pytest.mark.parametrize(
    ("optimizer", "rule", "lr"), [("sgd", "linear", 0.2), ("adamw", "sqrt", 0.1), ("other", "none", 0.05)]
)
def test_auto_scaling_follows_optimizer(optimizer: str, rule: str, lr: float) -> None:
    plan = plan_of(SEED, {"name": "4x16", "nproc_per_node": 4, "optimizer": optimizer})
    assert (plan.experiments[0].plan.scaling, plan.experiments[0].plan.lr) == (rule, pytest.approx(lr))


def test_explicit_lr_and_scaling_override() -> None:
    plan = plan_of(
        SEED,
        {"name": "a", "nproc_per_node": 4, "lr": 0.3},
        {"name": "b", "nproc_per_node": 4, "scaling": "none"},
        {"name": "c", "nproc_per_node": 4, "scaling": "sqrt", "warmup_steps": 7},
    )
    a, b, c = plan.experiments
    assert (a.plan.scaling, a.plan.lr) == ("explicit", 0.3)
    assert (b.plan.scaling, b.plan.lr) == ("none", 0.05)
    assert (c.plan.scaling, c.plan.lr, c.plan.warmup_steps) == ("sqrt", pytest.approx(0.1), 7)


def test_gradient_accumulation_derivations() -> None:
    plan = plan_of(
        SEED,
        {"name": "accum-from-global", "nproc_per_node": 2, "per_device_batch_size": 8, "global_batch_size": 64},
        {"name": "per-device-from-global", "nproc_per_node": 2, "grad_accum_steps": 4, "global_batch_size": 64},
        {"name": "keeps-per-device", "nproc_per_node": 2, "grad_accum_steps": 3},
    )
    first, second, third = plan.experiments
    assert (first.plan.per_device_batch_size, first.plan.grad_accum_steps, first.plan.global_batch_size) == (8, 4, 64)
    assert (second.plan.per_device_batch_size, second.plan.grad_accum_steps) == (8, 4)
    assert (third.plan.per_device_batch_size, third.plan.grad_accum_steps, third.plan.global_batch_size) == (16, 3, 96)
    assert third.plan.batch_scale == 6.0 and third.plan.lr == pytest.approx(0.3)


def test_two_nodes() -> None:
    plan = plan_of(SEED, {"name": "2n", "nnodes": 2, "nproc_per_node": 8})
    run = plan.experiments[0]
    nodes = run.plan
    assert (nodes.nnodes, nodes.nproc_per_node, nodes.world_size, nodes.global_batch_size) == (2, 8, 16, 256)
    assert run.plan.lr == pytest.approx(0.8)
    assert "2 nodes x 8" in run.plan.notes[0]


def test_elastic_nodes_plan_for_the_maximum() -> None:
    run = plan_of(SEED, {"name": "elastic", "nnodes": "1:3", "nproc_per_node": 2}).experiments[0]
    assert (run.plan.min_nnodes, run.plan.nnodes, run.plan.world_size) == (1, 3, 6)


def test_padding_and_steps_per_epoch() -> None:
    plan = plan_of(
        {**SEED, "warmup_steps": 0}, {"name": "3x16", "nproc_per_node": 3}, defaults={"dataset_size": 1000, "epochs": 2}
    )
    base, three = plan.baseline, plan.experiments[0]
    one = base.plan
    assert (one.samples_per_rank, one.padded_samples, one.steps_per_epoch, one.total_steps) == (1000, 0, 63, 126)
    # ceil(1000 / 3) = 334 per rank, 334 * 3 - 1000 = 2 repeated; ceil(334 / 16) = 21 steps.
    assert (three.plan.samples_per_rank, three.plan.padded_samples, three.plan.dropped_samples) == (334, 2, 0)
    assert (three.plan.steps_per_epoch, three.plan.total_steps) == (21, 42)
    assert any("pads 2 repeated samples" in note for note in three.plan.notes)


def test_drop_last_floors_everything() -> None:
    plan = plan_of(
        {**SEED, "warmup_steps": 0},
        {"name": "3x16", "nproc_per_node": 3, "grad_accum_steps": 2},
        defaults={"dataset_size": 1000, "epochs": 1, "drop_last": True},
    )
    run = plan.experiments[0]
    # floor(1000 / 3) = 333 per rank, 1 dropped; floor(floor(333 / 16) / 2) = floor(20 / 2) = 10 steps.
    dropping = run.plan
    assert (dropping.samples_per_rank, dropping.padded_samples, dropping.dropped_samples, dropping.steps_per_epoch) == (
        333, 0, 1, 10)  # fmt: skip


def test_accumulation_rounds_partial_steps_up_without_drop_last() -> None:
    run = plan_of(
        SEED, {"name": "a", "nproc_per_node": 3, "grad_accum_steps": 2}, defaults={"dataset_size": 1000, "epochs": 1}
    ).experiments[0]
    assert run.plan.steps_per_epoch == 11  # ceil(ceil(334 / 16) / 2) = ceil(21 / 2)


def test_max_steps_overrides_epochs_arithmetic() -> None:
    run = plan_of(
        SEED, {"name": "a", "nproc_per_node": 2, "max_steps": 7}, defaults={"dataset_size": 100, "epochs": 1}
    ).experiments[0]
    assert (run.plan.steps_per_epoch, run.plan.total_steps, run.plan.epochs) == (4, 7, None)


def test_defaults_batch_fields_reach_experiments_as_a_group() -> None:
    plan = plan_of(
        {"name": "1x8", "lr": 0.1},
        {"name": "2x", "nproc_per_node": 2},
        {"name": "own", "nproc_per_node": 2, "global_batch_size": 8},
        defaults={"per_device_batch_size": 8},
    )
    assert plan.baseline.plan.per_device_batch_size == 8
    assert plan.experiments[0].plan.global_batch_size == 16
    # its own global batch: defaults' per-device not mixed in
    assert plan.experiments[1].plan.per_device_batch_size == 4


def test_experiments_do_not_inherit_baseline_lr_or_batch() -> None:
    plan = plan_of({**SEED, "grad_accum_steps": 2}, {"name": "4x", "nproc_per_node": 4})
    assert plan.baseline.plan.global_batch_size == 32
    run = plan.experiments[0]
    assert (run.plan.per_device_batch_size, run.plan.grad_accum_steps, run.plan.global_batch_size) == (16, 1, 64)
    assert run.plan.lr == pytest.approx(0.1)  # scale 2, not the baseline's lr unchanged


def test_env_tables_merge_and_script_is_relative_to_file(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("", encoding="utf-8")
    data = {"defaults": {"env": {"A": "1", "B": "1"}}, "baseline": {"name": "base", **SEED, "env": {"B": "2"}},
            "experiments": [{"name": "e", "env": {"C": "3"}, "script": "train.py"}]}  # fmt: skip
    source = tmp_path / "experiments.toml"
    plan = resolve_plan(validate_experiment_data(data, source), source)
    assert plan.baseline.launch.env == {"A": "1", "B": "2"}
    assert plan.experiments[0].launch.env == {"A": "1", "B": "2", "C": "3"}
    assert plan.experiments[0].launch.script == str((tmp_path / "train.py").resolve())
    assert plan.runs_dir == tmp_path / "runs"


def test_plan_json_keys_are_the_contract() -> None:
    """What `ddpcli plan --json` prints (ddpcli.experiment.report, the one place that builds it)."""
    from ddpcli.experiment.report import plan_report

    plan = plan_of(SEED, {"name": "4x16", "nproc_per_node": 4})
    data = plan_report(plan).as_json()
    assert set(data) == {"file", "baseline", "experiments"}
    assert tuple(data["baseline"]) == RUN_KEYS


@pytest.mark.parametrize(
    ("experiment", "message"),
    [
        (
            {"nproc_per_node": 4, "per_device_batch_size": 3, "grad_accum_steps": 5, "global_batch_size": 64},
            "global_batch_size 64 != per_device_batch_size 3 x grad_accum_steps 5 x world_size 4",
        ),
        ({"nproc_per_node": 4, "global_batch_size": 10}, "global_batch_size 10 is not a positive multiple"),
        (
            {"nproc_per_node": 4, "per_device_batch_size": 8, "global_batch_size": 48},
            "global_batch_size 48 is not a positive multiple of per_device_batch_size 8 x world_size 4 = 32",
        ),
        ({"nproc_per_node": 8, "global_batch_size": 4}, "would not be a whole number"),
    ],
)
def test_inconsistent_batches_name_the_numbers(experiment: dict, message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        plan_of(SEED, {"name": "bad", **experiment})
    assert raised.value.field_path == "experiments[0].global_batch_size"
    assert message in raised.value.message


def test_baseline_needs_a_batch_and_lr() -> None:
    with pytest.raises(ConfigError, match=r"baseline\.per_device_batch_size"):
        plan_of({"lr": 0.1})
    with pytest.raises(ConfigError, match=r"baseline\.lr: is required"):
        plan_of({"per_device_batch_size": 4})


def test_drop_last_with_too_small_dataset_is_an_error() -> None:
    with pytest.raises(ConfigError, match="fewer than one optimizer step"):
        plan_of(
            SEED, {"name": "big", "nproc_per_node": 4}, defaults={"dataset_size": 50, "epochs": 1, "drop_last": True}
        )


@given(
    per_device=st.integers(1, 64),
    accum=st.integers(1, 8),
    nproc=st.integers(1, 8),
    nnodes=st.integers(1, 4),
    dataset_size=st.integers(1, 5000),
    drop_last=st.booleans(),
    by_global=st.booleans(),
)
def test_invariants(
    per_device: int, accum: int, nproc: int, nnodes: int, dataset_size: int, drop_last: bool, by_global: bool
) -> None:
    world = nproc * nnodes
    experiment: dict = {"name": "x", "nproc_per_node": nproc, "nnodes": nnodes, "grad_accum_steps": accum}
    if by_global:
        experiment["global_batch_size"] = per_device * accum * world
    else:
        experiment["per_device_batch_size"] = per_device
    defaults = {"dataset_size": dataset_size, "epochs": 1, "drop_last": drop_last}
    try:
        run = plan_of(SEED, experiment, defaults=defaults).experiments[0]
    except ConfigError as error:  # only possible reason: drop_last leaves less than one step per rank
        assert drop_last
        assert "fewer than one optimizer step" in error.message or (
            "smaller than the world size" in error.message and dataset_size < world
        )
        baseline_starved = dataset_size < 16  # the baseline takes 16 per step on one process
        assert baseline_starved or dataset_size // world < per_device * accum
        return
    assert run.plan.per_device_batch_size == per_device
    numbers = run.plan
    assert numbers.global_batch_size == numbers.per_device_batch_size * numbers.grad_accum_steps * numbers.world_size
    assert run.plan.batch_scale == pytest.approx(run.plan.global_batch_size / 16)
    assert run.plan.lr == pytest.approx(0.05 * run.plan.batch_scale)
    covered = run.plan.samples_per_rank * world
    if drop_last:
        assert run.plan.padded_samples == 0 and covered + run.plan.dropped_samples == dataset_size
        assert run.plan.dropped_samples < world
    else:
        assert run.plan.dropped_samples == 0 and covered - run.plan.padded_samples == dataset_size
        assert (run.plan.padded_samples + dataset_size) % world == 0 and run.plan.padded_samples < world
    micro_batches_per_step = run.plan.steps_per_epoch * run.plan.grad_accum_steps
    # Every sample a rank holds falls into some step (ceil) or the steps never overrun the data (floor).
    if drop_last:
        assert micro_batches_per_step * per_device <= run.plan.samples_per_rank
    else:
        assert (micro_batches_per_step - run.plan.grad_accum_steps) * per_device < run.plan.samples_per_rank
    assert run.plan.warmup_steps == math.ceil(100 / run.plan.batch_scale)


def test_warmup_rounding_is_exact_integer_arithmetic() -> None:
    """21 warmup steps x 5 samples = 105 samples; at batch 7 that is ceil(105 / 7) = 15 steps, not 16."""
    run = plan_of({"name": "b", "per_device_batch_size": 5, "lr": 0.1, "warmup_steps": 21},
                  {"name": "e", "per_device_batch_size": 7}).experiments[0]  # fmt: skip
    assert run.plan.warmup_steps == 15
    assert any("keeps the baseline's 105 warmup samples" in note for note in run.plan.notes)


def test_a_numeric_noise_scale_is_for_plan_only() -> None:
    plan = plan_of(SEED, {"name": "m", "noise_scale": True}, defaults={"noise_scale": 48.0})
    assert (plan.baseline.launch.noise_scale, plan.baseline.known_noise_scale) == (False, 48.0)
    assert plan.experiments[0].launch.noise_scale is True
