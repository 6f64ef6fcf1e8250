"""What the run's end row says of the framework that drove it and of its numerics, read for findings and
compare, and advice in that framework's own switch (the tables live in ddpcli.init.frameworks). Pure.

A library is named only where the observer saw it drive the run: its code on the stack of the first optimizer
step (`optimizer_stepped_by`) or of a scheduler's steps; imported alone is not enough (a script that imports
transformers for a tokenizer still writes its own loop).
"""

from __future__ import annotations

from typing import Any

from ddpcli.init.frameworks import FIND_UNUSED_OFF, SCHEDULER_PER_PROCESS
from ddpcli.jsonvalues import text_or_none, whole_or_none

STACK_KEYS = ("imported", "optimizer_stepped_by", "schedulers")


def frameworks_row(end: dict[str, Any]) -> dict[str, Any] | None:
    """observed.frameworks: the end row's `stacks`, with only well-formed values."""
    stacks = end.get("stacks")
    if not isinstance(stacks, dict):
        return None
    schedulers = []
    for entry in stacks.get("schedulers") or []:
        if isinstance(entry, dict) and text_or_none(entry.get("class")):
            schedulers.append({
                "class": entry["class"], "steps": whole_or_none(entry.get("steps")),
                "stepped_by": _names(entry.get("stepped_by")),
            })  # fmt: skip
    return {
        "imported": _names(stacks.get("imported")) or [],
        "optimizer_stepped_by": _names(stacks.get("optimizer_stepped_by")),
        "schedulers": schedulers,
    }


def numerics_row(end: dict[str, Any]) -> dict[str, Any] | None:
    numerics = end.get("numerics")
    return {key: value for key, value in numerics.items() if isinstance(value, bool | str)} if isinstance(
        numerics, dict
    ) else None  # fmt: skip


def _names(value: Any) -> list[str] | None:
    return [item for item in value if isinstance(item, str)] if isinstance(value, list) else None


def driving_framework(frameworks: dict[str, Any] | None) -> str | None:
    """The framework whose code stepped the optimizer (the outermost: Trainer over accelerate is the Trainer)."""
    stepped = (frameworks or {}).get("optimizer_stepped_by") or []
    return stepped[-1] if stepped else None


def find_unused_off(frameworks: dict[str, Any] | None) -> str:
    framework = driving_framework(frameworks)
    if framework in FIND_UNUSED_OFF:
        return f"under {framework}, {FIND_UNUSED_OFF[framework]}"
    return "turn it off (DistributedDataParallel(..., find_unused_parameters=False))"


def scheduler_per_process_cause(frameworks: dict[str, Any] | None) -> str | None:
    """accelerate's once-per-process scheduler stepping, only where accelerate stepped a scheduler."""
    for entry in (frameworks or {}).get("schedulers") or []:
        if "accelerate" in (entry.get("stepped_by") or []):
            return SCHEDULER_PER_PROCESS["accelerate"]
    return None


def schedulers_seen(frameworks: dict[str, Any] | None, optimizer_steps: int | None) -> str | None:
    """What stepped the lr, in words: which scheduler stepped how often against the optimizer steps, or none."""
    if frameworks is None:
        return None
    steps = f" over {optimizer_steps} optimizer steps" if optimizer_steps else ""
    schedulers = frameworks.get("schedulers") or []
    if not schedulers:
        return f"no torch lr scheduler stepped{steps}: the script sets the lr itself"
    return "; ".join(
        f"its {entry['class']} stepped {entry.get('steps')} times{steps}"
        + (f" (from {', '.join(entry['stepped_by'])})" if entry.get("stepped_by") else "")
        for entry in schedulers
    )
