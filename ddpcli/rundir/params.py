"""The one place that reads final_params.pt, and so the only place `ddpcli compare` imports torch.

torch is imported inside the functions: importing this module costs nothing, and `compare` calls it only when
two parameter files really have to be compared (`ddpcli compare` passes `param_diff` to ddpcli.compare).
"""

from __future__ import annotations

import math
import re
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ddpcli.rundir.param_diff import ParamDiff


def load_state_dict(path: Path) -> dict[str, Any]:
    """A state_dict saved by torch.save, on CPU, with nested mappings flattened to dotted names.

    weights_only=True: a parameter file is data, and loading it must never run code from it.
    """
    torch = _torch()
    loaded = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(loaded, Mapping):
        raise ValueError(f"expected a state_dict (a mapping of names to tensors), got {type(loaded).__name__}")
    return _flatten(loaded)


def _torch() -> Any:
    """torch, imported here, without its "Failed to initialize NumPy" warning.

    torch warns at import when numpy is missing or built for another ABI; loading tensors with weights_only never
    needs numpy, so for compare the warning is noise in its output (numpy is also a dependency, see pyproject).
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
        import torch
    return torch


def _flatten(container: Mapping[Any, Any] | Sequence[Any], prefix: str = "") -> dict[str, Any]:
    """Nested mappings, lists and tuples (an optimizer state, a list of layers) as one level of dotted names."""
    flat: dict[str, Any] = {}
    items = container.items() if isinstance(container, Mapping) else enumerate(container)
    for key, value in items:
        name = f"{prefix}{key}"
        if isinstance(value, Mapping | list | tuple) and value:
            flat.update(_flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def param_diff(path_a: Path, path_b: Path) -> ParamDiff:
    """Largest absolute difference over every tensor of two state_dicts (float64, so int buffers count too).

    Different names, shapes or non-finite values are a mismatch (the runs diverged); an unreadable file is an
    error (no verdict).
    """
    states = []
    for path in (path_a, path_b):
        try:
            states.append(load_state_dict(path))
        except Exception as error:  # torch.load raises many types (pickle, zip, RuntimeError): all mean "unreadable"
            return ParamDiff(error=f"cannot read {path}: {_first_line(error)}")
    shards, gathered_from = [], []
    for index, path in enumerate((path_a, path_b)):
        found = _shards(path)
        gathered = _gathered(path, states[index], found)
        if gathered is not None:
            (states[index], ranks), found = gathered, {}
            gathered_from.append(ranks)
        shards.append(found)
    state_a, state_b = states
    scope = None
    if gathered_from and not (shards[0] or shards[1]):
        ranks = " and ".join(sorted({str(count) for count in gathered_from}))
        scope = f"every parameter, gathered from the {ranks} ranks' shards"
    if shards[0] or shards[1]:
        aligned = _aligned(state_a, state_b, *shards)
        if isinstance(aligned, str):
            return ParamDiff(mismatch=aligned)
        state_a, state_b = aligned
        scope = "rank 0's shard of each sharded parameter (the rest of it was held by other ranks and not saved)"
    mismatch = _structure_mismatch(state_a, state_b)
    if mismatch:
        return ParamDiff(mismatch=mismatch)
    largest = 0.0
    for name in state_a:
        difference = _entry_diff(name, state_a[name], state_b[name])
        if isinstance(difference, str):
            return ParamDiff(mismatch=difference)
        largest = max(largest, difference)
    return ParamDiff(max_abs_diff=largest, scope=scope)


def _rank_files(path: Path) -> list[Path]:
    """The other ranks' shard files beside rank 0's final_params.pt (ddpcli.rundir.layout.rank_params_file)."""
    return sorted(other for other in path.parent.glob("final_params.rank-*.pt") if _RANK_FILE.fullmatch(other.name))


_RANK_FILE = re.compile(r"final_params\.rank-[1-9][0-9]*\.pt")


def _gathered(path: Path, state: dict[str, Any], shards: dict[str, Any]) -> tuple[dict[str, Any], int] | None:
    """Rank 0's state with each sharded tensor put together from every rank's pieces, and how many ranks' files
    gave them, where the rank files beside it cover the whole of every one; None where a piece is missing (another
    node's ranks) or unreadable."""
    others = _rank_files(path) if shards else []
    if not others:
        return None
    pieces = {name: [(shard, state[name])] for name, shard in shards.items() if name in state}
    for other in others:
        try:
            their_state, their_shards = load_state_dict(other), _shards(other)
        except Exception:  # an unreadable piece: compare what rank 0 holds, as without the others
            return None
        for name, shard in their_shards.items():
            if name in pieces and name in their_state:
                pieces[name].append((shard, their_state[name]))
    full = dict(state)
    for name, parts in pieces.items():
        tensor = _assembled(parts)
        if tensor is None:
            return None
        full[name] = tensor
    return full, len(others) + 1


def _assembled(parts: list[tuple[dict[str, Any], Any]]) -> Any:
    """One full tensor from its shards (each with its offset), or None unless they cover all of it exactly."""
    torch = _torch()
    shape = parts[0][0].get("shape")
    if not isinstance(shape, list) or any(shard.get("shape") != shape for shard, _ in parts):
        return None
    full = torch.zeros(shape, dtype=parts[0][1].dtype)
    covered = torch.zeros(shape, dtype=torch.bool)
    for shard, local in parts:
        offset = shard.get("offset")
        if not isinstance(offset, list) or len(offset) != len(shape) or list(local.shape) != shard.get("local_shape"):
            return None
        bounds = zip(offset, local.shape, shape, strict=True)
        if any(start < 0 or start + size > whole for start, size, whole in bounds):
            return None
        index = tuple(slice(start, start + size) for start, size in zip(offset, local.shape, strict=True))
        full[index] = local  # a replicated shard (HSDP) lands on the same slice with the same values
        covered[index] = True
    return full if bool(covered.all()) else None


def _shards(path: Path) -> dict[str, dict[str, Any]]:
    """Where each tensor of a final_params.pt of local shards sits in the full tensor (its shard map beside it)."""
    from ddpcli.jsonvalues import loads_json
    from ddpcli.rundir.layout import shards_file

    try:
        found = loads_json(shards_file(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    shards = found.get("shards") if isinstance(found, dict) else None
    if not isinstance(shards, dict):
        return {}
    # A "shard" that is the whole tensor (one rank holding everything) is the full tensor.
    return {name: shard for name, shard in shards.items()
            if isinstance(shard, dict) and shard.get("local_shape") != shard.get("shape")}  # fmt: skip


def _aligned(
    state_a: dict[str, Any], state_b: dict[str, Any], shards_a: dict[str, Any], shards_b: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]] | str:
    """Both states cut to the parts both hold: a shard against the same slice of the other's full tensor, two
    shards only where they cover the same slice."""
    a, b = dict(state_a), dict(state_b)
    for name in a.keys() & b.keys():
        one, two = shards_a.get(name), shards_b.get(name)
        if one is None and two is None:
            continue
        if one is not None and two is not None:
            if one.get("offset") != two.get("offset") or one.get("shape") != two.get("shape"):
                offsets = f"{one.get('offset')} and {two.get('offset')}"
                return f"{name}: the two runs saved different shards of it (offsets {offsets})"
            continue
        shard, full, flip = (one, b, False) if one is not None else (two, a, True)
        piece = _slice(full[name], shard, a[name] if not flip else b[name])
        if isinstance(piece, str):
            return f"{name}: {piece}"
        full[name] = piece
    return a, b


def _slice(tensor: Any, shard: dict[str, Any], local: Any) -> Any:
    """The part of a full tensor a shard covers."""
    offset, shape = shard.get("offset"), shard.get("shape")
    if not isinstance(offset, list) or list(getattr(tensor, "shape", ())) != shape:
        return f"the full tensor has shape {_shape(getattr(tensor, 'shape', None))}, the shard came from {shape}"
    index = tuple(slice(start, start + size) for start, size in zip(offset, local.shape, strict=False))
    return tensor[index]


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


def _first_line(error: BaseException, limit: int = 200) -> str:
    """An exception as one line. torch's weights_only refusal is paragraphs of advice (with terminal escapes) that
    belong in torch's docs: only its `WeightsUnpickler error:` sentence, the actual reason, is kept."""
    text = str(error)
    reason = re.search(r"WeightsUnpickler error: ([^\n]+)", text)
    if "Weights only load failed" in text:
        detail = reason[1].split(". ")[0].rstrip(".") if reason else "not a plain state_dict"
        return f"torch.load(weights_only=True) refused it: {detail[:limit]}"
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return f"{type(error).__name__}: {lines[0][:limit]}" if lines else type(error).__name__


def _entry_diff(name: str, value_a: Any, value_b: Any) -> float | str:
    """Max |a - b| of one entry, or the reason it cannot be compared as numbers."""
    torch = _torch()
    if not (isinstance(value_a, torch.Tensor) and isinstance(value_b, torch.Tensor)):
        if isinstance(value_a, torch.Tensor) or isinstance(value_b, torch.Tensor):
            return f"{name} is a tensor in one run and not in the other"
        return (
            0.0
            if _equal(value_a, value_b)
            else f"{name} is not a tensor and differs ({value_a!r:.80} vs {value_b!r:.80})"
        )
    if value_a.numel() == 0:
        return 0.0
    a, b = value_a.detach().to(torch.float64), value_b.detach().to(torch.float64)
    if not (torch.isfinite(a).all() and torch.isfinite(b).all()):
        return f"{name} holds non-finite values (NaN or inf): training blew up in at least one run"
    difference = float((a - b).abs().max())
    return difference if math.isfinite(difference) else f"{name} differs by a non-finite amount"


def _equal(value_a: Any, value_b: Any) -> bool:
    """== for any two values a state_dict may hold; a comparison that raises (or is not a bool) is a difference."""
    try:
        return bool(value_a == value_b)
    except Exception:
        return False


def _names(names: list[str], limit: int = 5) -> str:
    if not names:
        return "none"
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _shape(shape: Any) -> str:
    return "(not a tensor)" if shape is None else str(tuple(shape))
