"""`ddpcli plan`: what batch, learning rate, warmup and epoch each run gets, before any GPU is touched."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from ddpcli.cli.commands import DEFAULT_EXPERIMENT_FILE, ExperimentFileArgument
from ddpcli.cli.console import stdout, user_errors
from ddpcli.cli.render.plan import plan_tables, print_notes
from ddpcli.errors import ConfigError, UserError
from ddpcli.experiment.loading import validate_experiment_data
from ddpcli.experiment.planning import load_plan, resolve_plan
from ddpcli.experiment.report import plan_report
from ddpcli.experiment.resolved import Plan
from ddpcli.experiment.schema import process_counts
from ddpcli.rundir.metrics import measured_noise_scale

QUICK = "Quick form (no file)"


@user_errors
def plan_command(
    file: ExperimentFileArgument = None,
    only: Annotated[list[str] | None, typer.Option("--only", help="Only this run (repeatable).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object instead of tables.")] = False,
    noise_scale_from: Annotated[
        Path | None,
        typer.Option(
            help="A finished run that measured the gradient noise scale: adds the critical batch, the step speed-up "
            "it predicts for each global batch and its data efficiency.",
            show_default=False,
        ),
    ] = None,
    predict_from: Annotated[
        list[Path] | None,
        typer.Option(
            help="A finished, observed run (usually the one-device baseline): adds each run's predicted step time, "
            "samples/s, speed-up, scaling efficiency and memory per device. The all-reduce term is measured by a "
            "short probe of that many processes at each world size on this machine (cached), unless --link-gbps is "
            "given. Repeat it with runs of the same kind at other per-device batches to fit a fixed cost per "
            "micro-batch.",
            show_default=False,
        ),
    ] = None,
    link_gbps: Annotated[
        float | None,
        typer.Option(
            min=0.001,
            help="With --predict-from: the link bandwidth (Gb/s) of a cluster you describe, "
            "instead of probing this machine.",
            show_default=False,
        ),
    ] = None,
    rdzv_endpoint: Annotated[
        str | None, typer.Option(help="host:port of the rendezvous for multi-node runs, if [cluster] has none.")
    ] = None,
    per_device_batch_size: Annotated[
        int | None, typer.Option(min=1, help="Quick form: the one-device batch that worked.", rich_help_panel=QUICK)
    ] = None,
    lr: Annotated[
        float | None, typer.Option(help="Quick form: the one-device learning rate.", rich_help_panel=QUICK)
    ] = None,
    nproc_per_node: Annotated[
        list[str] | None,
        typer.Option(
            "--nproc-per-node",
            metavar="N,...",
            help="Quick form: processes (GPUs) per node of the target, comma-separated or repeated (`2,4`): "
            "one target each.",
            rich_help_panel=QUICK,
            show_default=False,
        ),
    ] = None,
    nnodes: Annotated[
        str | None,
        typer.Option(help="Quick form: nodes of the target (N or MIN:MAX; default 1).", rich_help_panel=QUICK),
    ] = None,
    global_batch_size: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Quick form: target global batch, reached by accumulation at the same per-device batch "
            "unless --grad-accum-steps is given too.",
            rich_help_panel=QUICK,
        ),
    ] = None,
    grad_accum_steps: Annotated[
        int | None, typer.Option(min=1, help="Quick form: target gradient accumulation.", rich_help_panel=QUICK)
    ] = None,
    optimizer: Annotated[
        str, typer.Option(help="Quick form: sgd | adam | adamw | other.", rich_help_panel=QUICK)
    ] = "sgd",
    warmup_steps: Annotated[
        int, typer.Option(min=0, help="Quick form: one-device warmup steps.", rich_help_panel=QUICK)
    ] = 0,
    dataset_size: Annotated[
        int | None, typer.Option(min=1, help="Quick form: samples per epoch.", rich_help_panel=QUICK)
    ] = None,
) -> None:
    """Resolve every run of an experiment file: world size, per-device batch, accumulation, global batch,
    learning-rate scaling, warmup and steps per epoch, with notes in plain words. Never imports torch.

    Quick form, no file: `ddpcli plan --per-device-batch-size 16 --lr 0.1 --nproc-per-node 4`

    `--json` prints `{"file", "baseline": RUN, "experiments": [RUN, ...]}`; RUN's keys are what `{placeholders}` in
    `args` and `extra_args` name, alone or in arithmetic (`{grad_accum_steps * world_size}`, `{lr / 10:.2e}`).
    """
    quick = {"per_device_batch_size": per_device_batch_size, "lr": lr, "nproc_per_node": nproc_per_node}
    optional = {"global_batch_size": global_batch_size, "grad_accum_steps": grad_accum_steps,
                "dataset_size": dataset_size, "nnodes": nnodes,
                "optimizer": optimizer if optimizer != "sgd" else None,
                "warmup_steps": warmup_steps or None}  # fmt: skip
    if any(value is not None for value in (*quick.values(), *optional.values())):
        if file is not None or rdzv_endpoint is not None:
            raise UserError("give either an experiment file or the quick-form options, not both")
        missing = [f"--{key.replace('_', '-')}" for key, value in quick.items() if value is None]
        if missing:
            raise UserError(f"the quick form needs {', '.join(missing)} too")
        plan = _quick_plan(
            per_device_batch_size,
            lr,
            process_counts(nproc_per_node, 1),  # type: ignore[arg-type]  # 1: one GPU on each of several nodes
            int(nnodes) if nnodes is not None and nnodes.isdigit() else (nnodes or 1),
            global_batch_size,  # type: ignore[arg-type]
            grad_accum_steps,
            optimizer,
            warmup_steps,
            dataset_size,
        )
    else:
        plan = load_plan(file or DEFAULT_EXPERIMENT_FILE)
    predictions = {}
    if predict_from:
        from ddpcli.launch.probe import predict_runs, read_baselines
        from ddpcli.launch.probe_run import stopping_on_signals

        baseline, others = read_baselines(predict_from)
        with stopping_on_signals():  # a stop signal tears a running probe down, then plan exits 128 + its number
            predictions = predict_runs(baseline, plan.select(only), link_gbps, others)
    elif link_gbps is not None:
        raise UserError("--link-gbps needs --predict-from")
    report = plan_report(
        plan,
        only,
        endpoint=rdzv_endpoint or plan.cluster.rdzv_endpoint,
        critical_batch=measured_noise_scale(noise_scale_from) if noise_scale_from is not None else None,
        predictions=predictions,
    )
    if as_json:
        print(json.dumps(report.as_json(), indent=2, allow_nan=False))
        return
    for table in plan_tables(report.plan, report.runs, report.outlooks, stdout.width):
        stdout.print(table)
    print_notes(stdout, report.runs)


def _quick_plan(
    per_device: int,
    lr: float,
    nprocs: tuple[int, ...],
    nnodes: int | str,
    global_batch: int | None,
    accum: int | None,
    optimizer: str,
    warmup: int,
    dataset_size: int | None,
) -> Plan:
    """Build the same plan a file would give: a one-device baseline and the target (`target`), or one target per
    process count (`target-2`, `target-4`, ...)."""
    target: dict[str, Any] = {"nnodes": nnodes}
    if global_batch is not None:
        target["global_batch_size"] = global_batch
    if accum is not None:
        target["grad_accum_steps"] = accum
    if global_batch is None or accum is None:
        # Keep the batch that fit on one device; a larger global batch then comes from accumulation.
        target["per_device_batch_size"] = per_device
    defaults: dict[str, Any] = {"optimizer": optimizer}
    if dataset_size is not None:
        defaults |= {"dataset_size": dataset_size, "epochs": 1}
    data = {
        "defaults": defaults,
        "baseline": {"name": f"1x{per_device}", "per_device_batch_size": per_device, "lr": lr, "warmup_steps": warmup},
        "experiments": [
            {"name": "target" if len(nprocs) == 1 else f"target-{nproc}", "nproc_per_node": nproc, **target}
            for nproc in nprocs
        ],
    }
    source = Path("<command line>")
    try:
        return resolve_plan(validate_experiment_data(data, source), source)
    except ConfigError as error:
        raise _as_flag_error(error) from None


def _as_flag_error(error: ConfigError) -> UserError:
    """The quick form has no file: name the flag (`--optimizer`), not the field it became (`defaults.optimizer`)."""
    field_name = (error.field_path or "").rsplit(".", 1)[-1]
    if field_name in QUICK_FIELDS:
        return UserError(f"--{field_name.replace('_', '-')}: {error.message}")
    return error


QUICK_FIELDS = {"per_device_batch_size", "lr", "nproc_per_node", "nnodes", "global_batch_size", "grad_accum_steps",
                "optimizer", "warmup_steps", "dataset_size"}  # fmt: skip
