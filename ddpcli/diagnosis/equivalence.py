"""The verdict on a multi-process run's final parameters against its single-process partner's: `equivalent` when
the largest absolute difference over every tensor is within atol, `diverged` otherwise or when the files do not
hold the same tensors; none when they could not be compared. The words are compare's `verdict` column (a
contract) and what the divergence note explains. Pure."""

from __future__ import annotations

from ddpcli.rundir.param_diff import ParamDiff

EQUIVALENT, DIVERGED = "equivalent", "diverged"


def verdict(diff: ParamDiff | None, atol: float) -> str | None:
    if diff is None or diff.error is not None:
        return None
    if diff.mismatch is not None or diff.max_abs_diff is None:
        return DIVERGED
    return EQUIVALENT if diff.max_abs_diff <= atol else DIVERGED
