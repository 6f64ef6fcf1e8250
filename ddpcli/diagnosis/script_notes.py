"""Notes from what the script itself used, observed, where the plan had to assume. Pure.

The plan's square-root note for Adam scales 1 - beta2 by the batch ratio assuming beta2 = 0.999 (PyTorch's
default); the observer records the optimizer's real hyper-parameters (`observed.optimizer`), so compare redoes the
note with the script's beta2 when it differs (nanoGPT's AdamW uses 0.95).
"""

from __future__ import annotations

import math
from typing import Any

from ddpcli.jsonvalues import finite_or_none

ASSUMED_BETA2 = 0.999


def observed_beta2(record: Any) -> float | None:
    optimizer = record.observed.optimizer if record.observed is not None else None
    betas = optimizer.get("betas") if isinstance(optimizer, dict) else None
    return finite_or_none(betas[1]) if isinstance(betas, list) and len(betas) == 2 else None


def beta2_note(label: str, record: Any) -> str | None:
    """The plan's Adam beta2 note redone with the beta2 the script used, when it is not the one assumed."""
    beta2, scale = observed_beta2(record), finite_or_none(record.plan.get("batch_scale"))
    plan_notes = record.plan.get("notes")
    assumed = isinstance(plan_notes, list) and any(
        isinstance(note, str) and "beta2 0.999" in note for note in plan_notes
    )
    if beta2 is None or scale is None or not assumed or math.isclose(beta2, ASSUMED_BETA2):
        return None
    optimizer = record.observed.optimizer.get("class", "the optimizer")
    return (
        f"{label}: the script's {optimizer} uses beta2 {beta2:g} (observed), not the {ASSUMED_BETA2:g} the plan's "
        f"note assumed: the square-root rule makes it {1 - min(1.0, (1 - beta2) * scale):.4g}."
    )
