"""The one place that reads final_params.pt, and so the only place `ddpcli compare` imports torch.

torch is imported inside the functions: importing this module costs nothing, and `compare` calls it only when
two parameter files really have to be compared (see ddpcli.core.comparison.equivalence.compare_params).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ddpcli.core.comparison.equivalence import ParamDiff


def load_state_dict(path: Path) -> dict[str, Any]:
    """A state_dict saved by torch.save, on CPU, with nested mappings flattened to dotted names.

    weights_only=True: a parameter file is data, and loading it must never run code from it.
    """
    import torch

    loaded = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(loaded, Mapping):
        raise ValueError(f"expected a state_dict (a mapping of names to tensors), got {type(loaded).__name__}")
    return _flatten(loaded)


def _flatten(mapping: Mapping[Any, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in mapping.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(_flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def param_diff(path_a: Path, path_b: Path) -> ParamDiff:
    """Largest absolute difference over every tensor of two state_dicts (float64, so int buffers count too).

    Different names, shapes or non-finite values are a mismatch (the runs diverged); an unreadable file is an
    error (no verdict).
    """
    try:
        state_a, state_b = load_state_dict(path_a), load_state_dict(path_b)
    except Exception as error:  # torch.load raises many types (pickle, zip, RuntimeError): all mean "unreadable"
        return ParamDiff(error=f"cannot read a parameter file: {type(error).__name__}: {error}")
    mismatch = _structure_mismatch(state_a, state_b)
    if mismatch:
        return ParamDiff(mismatch=mismatch)
    largest = 0.0
    for name in state_a:
        difference = _entry_diff(name, state_a[name], state_b[name])
        if isinstance(difference, str):
            return ParamDiff(mismatch=difference)
        largest = max(largest, difference)
    return ParamDiff(max_abs_diff=largest)


def _structure_mismatch(state_a: dict[str, Any], state_b: dict[str, Any]) -> str | None:
    only_a, only_b = sorted(state_a.keys() - state_b.keys()), sorted(state_b.keys() - state_a.keys())
    if only_a or only_b:
        return (
            f"the state_dicts hold different tensors (only in this run: {_names(only_a)}; "
            f"only in the other: {_names(only_b)})"
        )
    for name in state_a:
        shape_a, shape_b = getattr(state_a[name], "shape", None), getattr(state_b[name], "shape", None)
        if shape_a != shape_b:
            return f"{name} has shape {_shape(shape_a)} here and {_shape(shape_b)} in the other run"
    return None


def _entry_diff(name: str, value_a: Any, value_b: Any) -> float | str:
    """Max |a - b| of one entry, or the reason it cannot be compared as numbers."""
    import torch

    if not (isinstance(value_a, torch.Tensor) and isinstance(value_b, torch.Tensor)):
        return 0.0 if value_a == value_b else f"{name} is not a tensor and differs ({value_a!r} vs {value_b!r})"
    if value_a.numel() == 0:
        return 0.0
    a, b = value_a.detach().to(torch.float64), value_b.detach().to(torch.float64)
    if not (torch.isfinite(a).all() and torch.isfinite(b).all()):
        return f"{name} holds non-finite values (NaN or inf): training blew up in at least one run"
    difference = float((a - b).abs().max())
    return difference if math.isfinite(difference) else f"{name} differs by a non-finite amount"


def _names(names: list[str], limit: int = 5) -> str:
    if not names:
        return "none"
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _shape(shape: Any) -> str:
    return "(not a tensor)" if shape is None else str(tuple(shape))
