"""The result of comparing two final_params.pt files, and the shape of the function that computes it.

A leaf of the pure modules on purpose: ddpcli.rundir.params (which needs torch) builds ParamDiff values and
ddpcli.compare judges them, so the type lives below both and neither imports the other. The comparison
gets the reader as an argument (`compare_runs(..., param_diff=ddpcli.rundir.params.param_diff)`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ParamDiff:
    """The result of comparing two final_params.pt files.

    max_abs_diff: over every tensor of both state_dicts (when their names and shapes match).
    mismatch: why the two cannot be the same model (names, shapes, non-finite values): a divergence.
    error: why they could not be compared at all (a missing or unreadable file): no verdict.
    """

    max_abs_diff: float | None = None
    mismatch: str | None = None
    error: str | None = None
    scope: str | None = None  # what was compared, where not every parameter whole (a sharded run's shards)


ParamDiffFn = Callable[[Path, Path], ParamDiff]
