"""A batch or accumulation the script derives from the world size, named so, with whether a flag sets it. Pure.

build-nanogpt computes its accumulation as `total_batch_size // (B * T * world)` and has no flag for it: "pass it 8
(grad_accum_steps x world_size)" named a flag that does not exist. dist_tuto computes `bsz = 128 // world`: "batch
per process 64; the plan said 128" gave no cause at all. A value equal to the planned one divided by the world size
is what such a script does; the run's launch args (with their `{placeholders}`, as init wired them) say whether a
flag takes the value: advice names the flag's placeholder only where the args hold it.
"""

from __future__ import annotations

from ddpcli.jsonvalues import whole_or_none
from ddpcli.rundir.record import Finding, Observed

WORDS = {"grad_accum_steps": "accumulation", "per_device_batch_size": "batch per process"}


def derived_cause(finding: Finding, observed: Observed, plan: dict, args: list[str] | None) -> str | None:
    field = finding.field
    if field not in WORDS or finding.planned is None or finding.observed is None:
        return None
    planned, seen = whole_or_none(finding.planned), whole_or_none(finding.observed)
    world = observed.world_size or whole_or_none(plan.get("world_size"))
    if not planned or not seen or not world or world < 2 or planned != seen * world:
        return None
    head = f"the script divides its {WORDS[field]} by the world size ({seen} = {planned} / {world} processes)"
    placeholder = "{" + field + "}"
    wired = args is not None and any(placeholder in str(arg) for arg in args)
    if wired:
        return (
            f"{head}, so it wants the total over every process: pass it {planned * world} ({field} x world_size) "
            f"to get {planned} per process"
        )
    if args is not None:
        return (
            f"{head}: no flag in the run's args takes {placeholder}; the script computes it from a total of its own "
            "(e.g. `total // world_size`), so it keeps that total at every world size: change the total in the script, "
            "or compare the runs by what they ran"
        )
    return f"{head}: it wants the total over every process (whether a flag sets it is not recorded)"


def partial_batch_cause(finding: Finding, end: dict) -> str | None:
    """The batches smaller than the loader's own batch_size, which is the planned one: not divided by the script,
    but cut by a share of the data smaller than the batch (pytorch/examples mnist at 2 x 64 on 64 samples: each
    rank's DistributedSampler gives it 32, so every batch is 32; 32 = 64 / 2 read as a division before)."""
    if finding.field != "per_device_batch_size" or finding.planned is None or finding.observed is None:
        return None
    planned, seen = whole_or_none(finding.planned), whole_or_none(finding.observed)
    listed = end.get("loaders")  # a rank file's value: anything (tests/test_merge_faults.py)
    loaders = [loader for loader in listed if isinstance(loader, dict) and loader.get("training")] if isinstance(
        listed, list) else []  # fmt: skip
    if not planned or not seen or seen >= planned or not any(loader.get("batch_size") == planned for loader in loaders):
        return None
    return (
        f"the training DataLoader's batch_size is {planned}, as planned, and every batch was {seen}: each process's "
        f"share of the data (its sampler's) is smaller than the batch, so each batch is a partial one; a larger "
        f"dataset or a smaller batch per process makes them full"
    )
