"""Resolve an experiment file into concrete runs: batch sizes, learning rate, warmup and epoch arithmetic.

Pure Python on purpose (no torch, no rich): this is the arithmetic people get wrong, so it must be easy to test
and instant to run. The rules follow what DistributedDataParallel and DistributedSampler actually do; see
docs/batch-science in the README for the sources.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any

from ddpcli.errors import ConfigError, OptionError
from ddpcli.experiment.loading import load_experiment_file, validate_experiment_data
from ddpcli.experiment.notes import run_notes
from ddpcli.experiment.placeholders import check_placeholders
from ddpcli.experiment.resolved import LaunchSettings, Plan, ResolvedRun, RunPlan, samples_kept_warmup
from ddpcli.experiment.schema import (
    BATCH_FIELDS,
    DERIVED_FIELDS,
    ELASTIC_NNODES,
    ExperimentFile,
    RunEntry,
    RunFields,
    nnodes_problem,
)

EXCLUSIVE = {"module": "script", "script": "module", "epochs": "max_steps", "max_steps": "epochs"}

AUTO_SCALING = {"sgd": "linear", "adam": "sqrt", "adamw": "sqrt", "other": "none"}


def load_plan(path: Path, nnodes: int | str | None = None, names: list[str] | None = None) -> Plan:
    """Read, validate and resolve an experiment file; `nnodes` overrides the node count of the named runs (all
    runs when no names are given), as `ddpcli launch --nnodes` does."""
    experiment_file = load_experiment_file(path)
    if nnodes is not None:
        experiment_file = with_nnodes(experiment_file, nnodes, names, path)
    return resolve_plan(experiment_file, path)


def with_nnodes(
    experiment_file: ExperimentFile, nnodes: int | str, names: list[str] | None, path: Path
) -> ExperimentFile:
    """A copy with `nnodes` set on the named entries. The value is checked first, as the flag it is: a mistake
    in `--nnodes` is not one in the file."""
    value = int(nnodes) if isinstance(nnodes, str) and nnodes.isascii() and nnodes.isdigit() else nnodes
    problem = nnodes_problem(value)
    if problem:
        raise OptionError("nnodes", nnodes, problem)
    data = experiment_file.model_dump(exclude_unset=True)
    entries = [data["baseline"], *data.get("experiments", [])]
    for entry in entries:
        if not names or entry["name"] in names:
            entry["nnodes"] = value
    return validate_experiment_data(data, path)


def resolve_plan(experiment_file: ExperimentFile, path: Path) -> Plan:
    """Resolve every run of a validated experiment file. Raises ConfigError naming the field at fault."""
    defaults = experiment_file.defaults
    base_dir = path.parent
    baseline = _resolve_run(
        _merge(defaults, experiment_file.baseline, None, "baseline"), "baseline", None, path, base_dir
    )
    experiments = [
        _resolve_run(_merge(defaults, entry, experiment_file.baseline, where), where, baseline, path, base_dir)
        for index, entry in enumerate(experiment_file.experiments)
        for where in [f"experiments[{index}]"]
    ]
    return Plan(
        file=str(path),
        baseline=baseline,
        experiments=experiments,
        runs_dir=(base_dir / defaults.runs_dir),
        cluster=experiment_file.cluster,
    )


def _merge(defaults: RunFields, entry: RunEntry, baseline: RunEntry | None, where: str) -> dict[str, Any]:
    """Most specific wins: entry over baseline over defaults, except for the fields scaling derives.

    An experiment never inherits the baseline's batch fields, lr or warmup: those are what the scaling rules
    compute. Its batch fields come from its own entry, else from [defaults] as a group (mixing one field from
    each could contradict), else the baseline's per-device batch is kept (see `_resolve_batch`). lr and
    warmup_steps in [defaults] are the baseline's.

    `origins` says which table (`defaults`, `baseline`, `where`) each merged field came from, so that errors name
    the field as the file holds it; `arg_fields` names each of the merged args that way.
    """
    merged: dict[str, Any] = {}
    origins: dict[str, str] = {}
    own_batch = bool(entry.model_fields_set & set(BATCH_FIELDS))
    layers = [(label, layer) for label, layer in (("defaults", defaults), ("baseline", baseline), (where, entry))
              if layer is not None]  # fmt: skip
    for label, layer in layers:
        for key in layer.model_fields_set - {"runs_dir", "name", "env", "extra_args"}:
            inherited = layer is not entry and baseline is not None
            if inherited and key in DERIVED_FIELDS and (key not in BATCH_FIELDS or own_batch or layer is baseline):
                continue
            merged[key], origins[key] = getattr(layer, key), label
            merged.pop(EXCLUSIVE.get(key, ""), None)  # a more specific `script` replaces `module`, etc.
    merged["name"] = entry.name
    # The file's env is a table: merge its keys rather than replace the whole table.
    merged["env"] = {**(defaults.env or {}), **((baseline.env or {}) if baseline else {}), **(entry.env or {})}
    # extra_args add to the inherited args: each layer's, from the least specific to the entry's own.
    args = list(merged.get("args") or [])
    arg_fields = [f"{origins.get('args')}.args[{index}]" for index in range(len(args))]
    for label, layer in layers:
        args += layer.extra_args or []
        arg_fields += [f"{label}.extra_args[{index}]" for index in range(len(layer.extra_args or []))]
    merged["args"], merged["arg_fields"], merged["origins"] = args, tuple(arg_fields), origins
    return merged


def _resolve_run(
    fields: dict[str, Any], where: str, baseline: ResolvedRun | None, path: Path, base_dir: Path
) -> ResolvedRun:
    def fail(field_name: str | None, message: str) -> ConfigError:
        return ConfigError(path, f"{where}.{field_name}" if field_name else where, message)

    nnodes, min_nnodes = _nnodes(fields.get("nnodes", 1))
    nproc_per_node = fields.get("nproc_per_node", 1)
    world_size = nnodes * nproc_per_node
    per_device, accum, global_batch = _resolve_batch(fields, world_size, baseline.plan if baseline else None, fail)

    if baseline is None:
        if "lr" not in fields:
            raise fail("lr", "is required on the baseline (the learning rate that worked on one device)")
        batch_scale, scaling, lr = 1.0, "baseline", fields["lr"]
        warmup_steps = fields.get("warmup_steps", 0)
    else:
        base = baseline.plan
        batch_scale = global_batch / base.global_batch_size
        optimizer = fields.get("optimizer", "sgd")
        scaling, lr = _scaled_lr(fields, base.lr, batch_scale, optimizer)
        if not math.isfinite(lr) or lr <= 0:
            raise fail(
                "lr",
                f"{scaling} scaling gives lr {base.lr:g} x {lr_factor(scaling, batch_scale):g} = {lr:g}, not a "
                "usable learning rate; set lr on this run",
            )
        # a warmup the script decides itself (a stand-in) is what every run gets: no flag can rescale it
        kept = base.warmup_steps if "warmup_steps" in (fields.get("stand_ins") or ()) else None
        warmup_steps = fields.get("warmup_steps", kept if kept is not None else samples_kept_warmup(base, global_batch))

    epoch = _epoch_arithmetic(fields, world_size, per_device, accum, fail)
    plan = RunPlan(
        name=fields["name"], nnodes=nnodes, min_nnodes=min_nnodes, nproc_per_node=nproc_per_node,
        world_size=world_size, per_device_batch_size=per_device, grad_accum_steps=accum,
        global_batch_size=global_batch, batch_scale=batch_scale, scaling=scaling, lr=lr, warmup_steps=warmup_steps,
        **epoch, seed=fields.get("seed", 0), dataset_size=fields.get("dataset_size"), epochs=fields.get("epochs"),
        max_steps=fields.get("max_steps"), optimizer=fields.get("optimizer", "sgd"),
        drop_last=fields.get("drop_last", False),
    )  # fmt: skip
    run = ResolvedRun(
        plan,
        _launch_settings(fields, base_dir),
        timeout_s=fields.get("timeout_s"),
        known_noise_scale=_known_noise_scale(fields.get("noise_scale")),
        stand_ins=tuple(fields.get("stand_ins") or ()),
        sample_tokens=fields.get("sample_tokens"),
        arg_fields=fields.get("arg_fields", ()),
    )
    _check_script(run, fields, path)
    if run.known_noise_scale is not None and not math.isfinite(global_batch / run.known_noise_scale):
        raise fail("noise_scale", f"{run.known_noise_scale:g} is too small to compare with global batch {global_batch}")
    check_placeholders(run, path, where)  # so that `plan` finds what `launch` would refuse
    return replace(run, plan=replace(plan, notes=run_notes(run, baseline)))


def _launch_settings(fields: dict[str, Any], base_dir: Path) -> LaunchSettings:
    return LaunchSettings(
        module=fields.get("module"),
        script=str((base_dir / fields["script"]).resolve()) if fields.get("script") else None,
        args=list(fields.get("args") or []),
        env=dict(fields.get("env") or {}),
        max_restarts=fields.get("max_restarts", 0),
        noise_scale=fields.get("noise_scale") is True,  # a number is a known B_simple for plan, not a request
        observe=fields.get("observe") is not False,
        workdir=fields.get("workdir", "launch"),
    )


def _check_script(run: ResolvedRun, fields: dict[str, Any], path: Path) -> None:
    """A script that is not there (or is a folder) is the file's mistake, found before anything starts: launch would
    start torchrun only to record a failed run. Named by the table that holds `script`."""
    script = run.launch.script
    if script is None or Path(script).is_file():
        return
    origin = fields.get("origins", {}).get("script")
    why = "not a file" if Path(script).exists() else "no such file"
    raise ConfigError(path, f"{origin}.script" if origin else None, f"{fields['script']!r}: {why} ({script})")


def _known_noise_scale(value: bool | float | None) -> float | None:
    return None if value is None or isinstance(value, bool) else float(value)


def _nnodes(value: int | str) -> tuple[int, int]:
    """Returns (max, min) nodes; the plan's world size uses the maximum."""
    if isinstance(value, int):
        return value, value
    match = ELASTIC_NNODES.fullmatch(value)
    assert match, "validated by the config model"
    return int(match[2]), int(match[1])


def _resolve_batch(
    fields: dict[str, Any], world_size: int, baseline: RunPlan | None, fail: Any
) -> tuple[int, int, int]:
    """Any two of (per_device, accumulation, global) decide the third; accumulation defaults to 1."""
    per_device = fields.get("per_device_batch_size")
    accum = fields.get("grad_accum_steps")
    global_batch = fields.get("global_batch_size")

    if per_device is not None and global_batch is not None:
        if accum is not None:
            if per_device * accum * world_size != global_batch:
                raise fail(
                    "global_batch_size",
                    f"global_batch_size {global_batch} != per_device_batch_size "
                    f"{per_device} x grad_accum_steps {accum} x world_size {world_size}",
                )
            return per_device, accum, global_batch
        accum = _exact_quotient(global_batch, per_device * world_size)
        if accum is None:
            raise fail(
                "global_batch_size",
                f"global_batch_size {global_batch} is not a positive multiple of "
                f"per_device_batch_size {per_device} x world_size {world_size} "
                f"= {per_device * world_size}, so grad_accum_steps would not be a whole number",
            )
        return per_device, accum, global_batch

    accum = 1 if accum is None else accum
    if global_batch is not None:
        per_device = _exact_quotient(global_batch, accum * world_size)
        if per_device is None:
            raise fail(
                "global_batch_size",
                f"global_batch_size {global_batch} is not a positive multiple of "
                f"grad_accum_steps {accum} x world_size {world_size} = {accum * world_size}, "
                "so per_device_batch_size would not be a whole number",
            )
        return per_device, accum, global_batch

    if per_device is None:
        if baseline is None:
            raise fail("per_device_batch_size", "the baseline needs per_device_batch_size or global_batch_size")
        per_device = baseline.per_device_batch_size  # what plain DDP does: each process keeps its batch
    return per_device, accum, per_device * accum * world_size


def _ceil_div(numerator: int, denominator: int) -> int:
    return -(-numerator // denominator)


def _exact_quotient(numerator: int, denominator: int) -> int | None:
    quotient, remainder = divmod(numerator, denominator)
    return quotient if remainder == 0 and quotient >= 1 else None


def _scaled_lr(fields: dict[str, Any], baseline_lr: float, batch_scale: float, optimizer: str) -> tuple[str, float]:
    if "lr" in fields:
        return "explicit", fields["lr"]
    rule = fields.get("scaling", "auto")
    if rule == "auto":
        rule = AUTO_SCALING[optimizer]
    return rule, baseline_lr * lr_factor(rule, batch_scale)


def lr_factor(rule: str, batch_scale: float) -> float:
    """What the baseline's lr is multiplied by under a scaling rule."""
    return {"linear": batch_scale, "sqrt": math.sqrt(batch_scale)}.get(rule, 1.0)


def _epoch_arithmetic(
    fields: dict[str, Any], world_size: int, per_device: int, accum: int, fail: Any
) -> dict[str, int | None]:
    """What DistributedSampler + DataLoader (+ accumulation) make of one epoch."""
    size = fields.get("dataset_size")
    epochs, max_steps = fields.get("epochs"), fields.get("max_steps")
    if size is None:
        if epochs is not None:
            raise fail("dataset_size", "is needed to count the steps of `epochs`; set it or use max_steps")
        return dict(
            samples_per_rank=None,
            padded_samples=None,
            dropped_samples=None,
            steps_per_epoch=None,
            total_steps=max_steps,
        )
    # Integers only: size / world_size in floats is wrong beyond 2**53 (9007199254740993 gave padded_samples -1).
    if fields.get("drop_last", False):
        samples_per_rank = size // world_size
        padded, dropped = 0, size - samples_per_rank * world_size
        steps_per_epoch = (samples_per_rank // per_device) // accum
    else:
        samples_per_rank = _ceil_div(size, world_size)
        padded, dropped = samples_per_rank * world_size - size, 0
        steps_per_epoch = _ceil_div(_ceil_div(samples_per_rank, per_device), accum)
    if samples_per_rank == 0:
        raise fail(
            "dataset_size",
            f"dataset_size {size} is smaller than the world size {world_size}: with drop_last some processes "
            "would get no sample at all",
        )
    if steps_per_epoch == 0:
        raise fail(
            "dataset_size",
            f"dataset_size {size} gives each of {world_size} processes {samples_per_rank} "
            f"samples, fewer than one optimizer step of {per_device} x {accum} with drop_last",
        )
    total_steps = max_steps if max_steps is not None else (epochs * steps_per_epoch if epochs else None)
    return dict(
        samples_per_rank=samples_per_rank,
        padded_samples=padded,
        dropped_samples=dropped,
        steps_per_epoch=steps_per_epoch,
        total_steps=total_steps,
    )
