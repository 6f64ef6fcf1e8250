"""observed.frameworks and observed.numerics: what the run's end row says of the frameworks that drove it and of its
numerics, kept well-formed for run.json (diagnosis.framework_advice turns them into advice). Pure.
"""

from __future__ import annotations

from typing import Any

from ddpcli.jsonvalues import text_or_none, whole_or_none


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
