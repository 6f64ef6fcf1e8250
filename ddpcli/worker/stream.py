"""This rank's observation file, `<run_dir>/observed/rank-<rank>.jsonl`: what the observer and the runtime helper
record, one JSON object a line, merged by `ddpcli launch` after the run (ddpcli.rundir.merge).

Rows may hold tensors (a loss, an lr that is a tensor): they stay where they are until a flush, which copies all of
them to the host in one transfer per device. So recording a step costs no device synchronisation; a flush
(every FLUSH_ROWS rows or FLUSH_S seconds, and at the end) costs one. No collective ever: each rank writes its own file.
"""

import json
import math
import os
import time
from pathlib import Path
from typing import IO, Any

import torch

from ddpcli.jsonvalues import strict_number
from ddpcli.rundir.layout import OBSERVED_DIR, rank_file_name

FLUSH_ROWS = 256
FLUSH_S = 2.0  # `ddpcli launch` follows rank 0's file for its progress bar


class RankStream:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.rows: list[dict[str, Any]] = []
        self._file: IO[str] | None = None
        self._last_flush = time.monotonic()
        self._flushing = False

    def add(self, row: dict[str, Any]) -> None:
        self.rows.append(row)
        if len(self.rows) >= FLUSH_ROWS or time.monotonic() - self._last_flush > FLUSH_S:
            self.flush()

    def flush(self) -> None:
        if self._flushing or not self.rows:
            return
        self._flushing = True  # a signal handler may flush while a flush runs: let the first one finish
        try:
            rows, self.rows = self.rows, []
            if self._file is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._file = self.path.open("a", encoding="utf-8")
            self._file.write("".join(json.dumps(row, allow_nan=False) + "\n" for row in _to_host(rows)))
            self._file.flush()
            self._last_flush = time.monotonic()
        finally:
            self._flushing = False

    def close(self) -> None:
        self.flush()
        if self._file is not None:
            self._file.close()
            self._file = None


def _to_host(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows with every tensor replaced by Python numbers, read in one transfer per device. Scalars of one dtype (a
    loss, a norm: nearly all of them) are stacked in one operation, so a flush costs a few operations, not one per
    value."""
    found: list[torch.Tensor] = []
    _collect(rows, found)
    if not found:
        return [_replace(row, {}) for row in rows]  # still: a non-finite float becomes a string
    by_device: dict[torch.device, dict[tuple[torch.dtype, bool], list[torch.Tensor]]] = {}
    for tensor in found:
        by_device.setdefault(tensor.device, {}).setdefault((tensor.dtype, tensor.dim() == 0), []).append(tensor)
    values: dict[int, Any] = {}
    with torch.no_grad():
        for groups in by_device.values():
            order = [tensor for tensors in groups.values() for tensor in tensors]
            parts = [
                torch.stack(tensors).double() if scalars else torch.cat([t.reshape(-1).double() for t in tensors])
                for (_, scalars), tensors in groups.items()
            ]
            flat = torch.cat(parts).tolist()
            position = 0
            for tensor in order:
                size = tensor.numel()
                values[id(tensor)] = flat[position] if tensor.dim() == 0 else flat[position : position + size]
                position += size
    return [_replace(row, values) for row in rows]


_PLAIN = (str, int, bool, type(None))  # values written as they are (a float only when finite)


def _collect(value: Any, found: list[torch.Tensor]) -> None:
    """Every tensor in nested rows. Plain values are skipped inline: a flush walks thousands of them."""
    items = value.values() if isinstance(value, dict) else value
    for item in items:
        if isinstance(item, _PLAIN) or type(item) is float:
            continue
        if isinstance(item, torch.Tensor):
            found.append(item)
        elif isinstance(item, dict | list | tuple):
            _collect(item, found)


def _replace(value: Any, values: dict[int, Any]) -> Any:
    if isinstance(value, dict):
        return {key: _replace_item(item, values) for key, item in value.items()}
    return [_replace_item(item, values) for item in value]


def _replace_item(item: Any, values: dict[int, Any]) -> Any:
    if isinstance(item, _PLAIN) or (type(item) is float and math.isfinite(item)):
        return item
    if isinstance(item, torch.Tensor):
        return strict_number(values[id(item)])
    if isinstance(item, dict | list | tuple):
        return _replace(item, values)
    return strict_number(item)


_streams: dict[tuple[str, str], RankStream] = {}


def rank_stream() -> RankStream | None:
    """This process's stream, shared by the observer and the runtime; None outside `ddpcli launch`. Looked up by
    the two variables that name it (the runtime asks once per logged step: no path is built each time)."""
    run_dir = os.environ.get("DDPCLI_RUN_DIR")
    if not run_dir:
        return None
    rank = os.environ.get("RANK", "0")
    stream = _streams.get((run_dir, rank))
    if stream is None:
        stream = _streams[run_dir, rank] = RankStream(Path(run_dir) / OBSERVED_DIR / rank_file_name(int(rank)))
    return stream
