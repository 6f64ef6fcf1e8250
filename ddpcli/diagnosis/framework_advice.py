"""Advice in the own switch of the framework that drove a run (the tables live in ddpcli.script.frameworks), from
run.json's observed.frameworks (ddpcli.rundir.frameworks reads it from the end row). Pure.

A library is named only where the observer saw it drive the run: its code on the stack of the first optimizer
step (`optimizer_stepped_by`) or of a scheduler's steps; imported alone is not enough (a script that imports
transformers for a tokenizer still writes its own loop).
"""

from __future__ import annotations

from typing import Any

from ddpcli.script.frameworks import FIND_UNUSED_OFF, SCHEDULER_PER_PROCESS


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
