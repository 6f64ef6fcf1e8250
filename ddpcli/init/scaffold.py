"""`ddpcli init`: from a script's options to a commented experiment file that plans and launches.

Pure on purpose (no subprocess, torch, rich or typer): `ddpcli.init.inspect` reads the script (its syntax tree,
and its `--help` when it builds a parser); here the options are matched to the plan's roles (`roles`), wired
(`wiring`), the frameworks' switches set (`switches`), the runs chosen and the TOML written (`toml_text`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ddpcli.experiment.schema import process_counts
from ddpcli.init.derived import Derivation, derived_per_rank
from ddpcli.init.fixed_args import check_required, split_fixed, unwired, with_given_values
from ddpcli.init.help_text import HelpOption
from ddpcli.init.roles import find_flags
from ddpcli.init.switches import wire_fabric, wire_optimizer, wire_switches, wire_workdir
from ddpcli.init.toml_text import args_lines, assignment, env_line, header, toml_string
from ddpcli.init.wiring import Source, Wiring, wire_roles

MODULE_NAME = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")


@dataclass(frozen=True)
class InitRequest:
    """What the user asked for. `script` is written as given: relative to the experiment file's folder."""

    script: str | None
    module: str | None
    help_command: str
    per_device_batch_size: int | None = None
    lr: float | None = None
    world_sizes: tuple[int, ...] = (2, 4)
    fixed_args: tuple[str, ...] = ()  # given after `--`
    prefix: tuple[str, ...] = ()  # arguments every run starts with (LightningCLI's `fit`)
    cpu_only: bool = True  # no GPU listed: frameworks' CPU switches are set


@dataclass
class Scaffold:
    """The experiment file's text and the lines to repeat on stderr."""

    text: str
    warnings: list[str] = field(default_factory=list)
    run_names: list[str] = field(default_factory=list)


def parse_world_sizes(values: list[str]) -> tuple[int, ...]:
    """`["2,4", "8"]` -> (2, 4, 8): world sizes of 2 or more, in order, without repeats."""
    return process_counts(values, 2, " (the baseline is the 1-process run)")


def default_world_sizes(gpus: int | None) -> tuple[int, ...]:
    """2 and 4, or, on a machine with 2 or more GPUs, the powers of two up to the GPU count and the count."""
    if gpus is None or gpus < 2:
        return (2, 4)
    sizes = [size for size in (2**power for power in range(1, gpus.bit_length())) if size <= gpus]
    return tuple(sizes if sizes[-1] == gpus else [*sizes, gpus])


def build_experiment(
    request: InitRequest,
    options: list[HelpOption] | None,
    source: Source | None = None,
    not_run: str = "",
    warnings: tuple[str, ...] = (),
    first: tuple[str, ...] = (),
) -> Scaffold:
    """The experiment file for `request`, given the script's options (None: the script was not run, and
    `not_run` says why); `warnings` (from reading the script) head the file's list, after `first` (what the user
    must know before anything else: the script has no DDP)."""
    source = source or Source()
    target = request.script if request.script is not None else request.module or ""
    segments = split_fixed(request.fixed_args, options or [])
    if options is not None:
        check_required(options, segments, target)
        options = with_given_values(options, segments)
    flags = find_flags(options or [])
    wiring = wire_roles(flags, options or [], source, request.per_device_batch_size, request.lr, request.help_command)
    given_flags = {segment.flag for segment in segments if segment.flag}
    wire_switches(options or [], source, request.cpu_only, given_flags, wiring)
    wire_optimizer(flags.get("optimizer"), source, wiring)
    wire_workdir(source, wiring)
    wire_fabric(source, request.cpu_only, wiring)
    wiring.warnings[:0] = [*first, *([f"{not_run}: no flags are wired"] if options is None else []), *warnings]
    runs = _experiments(request, wiring)
    fixed = unwired(segments, wiring.wired_flags)
    lines = _header(request, wiring, options is not None)
    lines += _defaults_table(request, wiring, fixed)
    baseline_name = run_name(1, wiring.batch, wiring.accum)
    lines += ["", "[baseline]                    # the run that worked on one device",
              f"name = {toml_string(baseline_name)}", "nproc_per_node = 1"]  # fmt: skip
    lines += [assignment(key, value, why) for key, value, why in wiring.baseline]
    lines += env_line(_run_env(wiring, 1))
    if wiring.stand_ins:
        lines.append(assignment("stand_ins", wiring.stand_ins, "the script decides these itself; fill in its values"))
    names = [baseline_name]
    for entry, why in runs:
        lines += ["", "[[experiments]]", assignment("name", entry["name"], why)]
        lines += [assignment(key, value, "") for key, value in entry.items() if key != "name"]
        lines += env_line(_run_env(wiring, int(str(entry["nproc_per_node"]))))
        names.append(str(entry["name"]))
    return Scaffold("\n".join(lines) + "\n", wiring.warnings, names)


def _run_env(wiring: Wiring, nproc_per_node: int) -> dict[str, str]:
    """The env a run needs of its own (Fabric's LT_DEVICES): each run's process count (env takes no placeholder)."""
    return {key: value.replace("{nproc_per_node}", str(nproc_per_node)) for key, value in wiring.run_env.items()}


def _header(request: InitRequest, wiring: Wiring, was_run: bool) -> list[str]:
    target = request.script if request.script is not None else f"-m {request.module}"
    command = request.help_command
    source_line = (f" from `{command}`" if command.startswith("python") else f" from {command}") if was_run else ""
    wired = [" ".join(tokens) for tokens, _ in wiring.args]
    return header(target, source_line, wired, wiring.notes, wiring.warnings)


def _defaults_table(request: InitRequest, wiring: Wiring, fixed: list[str]) -> list[str]:
    lines = ["", "[defaults]"]
    if request.module is not None:
        lines.append(f"module = {toml_string(request.module)}  # run with python -m, from where you run ddpcli")
    else:
        lines.append(f"script = {toml_string(request.script or '')}  # relative to this file")
    lines += args_lines(list(request.prefix), fixed, wiring.args)
    lines += env_line(wiring.env)
    lines += [assignment(key, value, why) for key, value, why in wiring.defaults]
    lines.append('runs_dir = "runs"  # relative to this file: runs/<name>/<run id>/')
    return lines


def _experiments(request: InitRequest, wiring: Wiring) -> list[tuple[dict[str, object], str]]:
    """For each world size: one run that keeps the per-device batch, one that keeps the global batch."""
    if wiring.kept is not None:
        return _kept_runs(request.world_sizes, wiring.kept, wiring)
    runs: list[tuple[dict[str, object], str]] = []
    global_batch = wiring.batch * wiring.accum
    for size in request.world_sizes:
        same: dict[str, object] = {"name": run_name(size, wiring.batch, wiring.accum), "nproc_per_node": size}
        if wiring.accum != 1:  # an experiment never inherits the baseline's accumulation: say it again
            same |= {"per_device_batch_size": wiring.batch, "grad_accum_steps": wiring.accum}
        kept_lr = any(
            (key == "scaling" and value == "none") or (key == "optimizer" and value == "other")
            for key, value, _ in wiring.defaults
        )  # optimizer "other" has no rule: scaling auto keeps its lr
        lr_words = "same lr (the script's own)" if kept_lr else "lr scaled"
        runs.append((same, f"keeps the per-device batch {wiring.batch}: global {global_batch * size}, {lr_words}"))
        split = keep_global_batch(global_batch, size, wiring.batch, wiring.accum, wiring.batch_wired,
                                  wiring.accum_wired)  # fmt: skip
        if split is None:
            wiring.warnings.append(
                f"no {size}-process run keeps the global batch {global_batch}: it does not split into {size} "
                "equal per-device batches the script's flags can set"
            )
            continue
        per_device, accum = split
        entry: dict[str, object] = {"name": run_name(size, per_device, accum), "nproc_per_node": size,
                                    "per_device_batch_size": per_device, "grad_accum_steps": accum}  # fmt: skip
        how = f"per-device {per_device}" + (f" x accumulation {accum}" if accum != 1 else "")
        runs.append((entry, f"keeps the global batch {global_batch}: {how}, same lr"))
    return runs


def _kept_runs(sizes: tuple[int, ...], kept: Derivation, wiring: Wiring) -> list[tuple[dict[str, object], str]]:
    """A script that keeps its global batch: each run as the script computes it at its world size, named and
    planned so (its values are stand-ins: no flag reaches them); a world size it cannot split evenly is left out."""
    runs: list[tuple[dict[str, object], str]] = []
    tokens = f" sequences ({kept.total} tokens)" if kept.tokens_per_sample else ""
    for size in sizes:
        value = derived_per_rank(kept, size)
        if value is None:
            wiring.warnings.append(
                f"no {size}-process run: the script's {kept.where()} does not divide evenly at {size} processes"
            )
            continue
        per_device, accum = (value, 1) if kept.role == "per_device_batch_size" else (wiring.batch, value)
        entry: dict[str, object] = {"name": run_name(size, per_device, accum), "nproc_per_node": size,
                                    "per_device_batch_size": per_device, "grad_accum_steps": accum}  # fmt: skip
        how = f"per-device {per_device}" + (f" x accumulation {accum}" if accum != 1 else "")
        runs.append((entry, f"the script keeps its global batch {kept.global_samples}{tokens}: {how}, same lr"))
    return runs


def keep_global_batch(
    global_batch: int, world_size: int, batch: int, accum: int, batch_wired: bool, accum_wired: bool
) -> tuple[int, int] | None:
    """(per-device batch, accumulation) that keep `global_batch` on `world_size` processes, changing only what
    the script's flags can change: the largest per-device batch up to the baseline's (less accumulation, same
    memory), or None."""
    per_rank, remainder = divmod(global_batch, world_size)
    if remainder or per_rank == 0:
        return None
    candidates = range(min(batch, per_rank), 0, -1) if batch_wired else [batch]
    for per_device in candidates:
        steps, rest = divmod(per_rank, per_device)
        if rest == 0 and (accum_wired or steps == accum):
            return per_device, steps
    return None


def run_name(world_size: int, batch: int, accum: int) -> str:
    """`4x16`, or `4x16-acc2` with accumulation."""
    return f"{world_size}x{batch}" + (f"-acc{accum}" if accum != 1 else "")
