"""This rank's observation file, `<run_dir>/observed/rank-<rank>.jsonl`: what the observer and the runtime helper
record, one JSON object a line, merged by `ddpcli launch` after the run (ddpcli.rundir.merge).

Rows may hold tensors (a loss, an lr that is a tensor): they stay where they are until a flush, which copies all of
them to the host in one transfer per device. So recording a step costs no device synchronisation; a flush
(every FLUSH_ROWS rows or FLUSH_S seconds, and at the end) costs one. No collective ever: each rank writes its own file.
"""

import json
import math
import numbers
import os
import sys
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
        self.failed: str | None = None  # why the file could not be written (then rows are dropped, training goes on)
        self._warned = False

    def add(self, row: dict[str, Any]) -> None:
        if self.failed is not None:
            return
        self.rows.append(row)
        if len(self.rows) >= FLUSH_ROWS or time.monotonic() - self._last_flush > FLUSH_S:
            self.flush()

    def flush(self) -> None:
        """Write the rows. Never raises: a file that cannot be written (a full disk) is reported once, on stderr and
        as an `error` row if one can still be written at close, and observation stops; the script goes on."""
        if self._flushing or not self.rows or self.failed is not None:
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
        except OSError as error:  # the file: nothing more can be written
            self._fail(f"{type(error).__name__}: {error}")
        except Exception as error:  # a value: these rows are lost, not the ones after them
            self._warn(f"rows dropped ({type(error).__name__}: {error})")
            self.rows.append({"kind": "error", "message": f"rows dropped: {type(error).__name__}: {error}"[:500]})
        finally:
            self._flushing = False

    def _fail(self, reason: str) -> None:
        self.failed, self.rows = reason, []
        self._warn(f"cannot write {self.path} ({reason}); the observation stops here")

    def _warn(self, what: str) -> None:
        """Once per process, on stderr: the script's own output goes on."""
        if not self._warned:
            self._warned = True
            print(f"ddpcli observer: observer_error: {what}; training is not affected", file=sys.stderr, flush=True)

    def close(self) -> None:
        self.flush()
        self.flush()  # the error row of rows the first flush had to drop
        try:
            if self.failed is not None and self._file is not None:  # one last try: the space may have come back
                row = {"kind": "error", "message": f"cannot write: {self.failed}"}
                self._file.write(json.dumps(row, allow_nan=False) + "\n")
            if self._file is not None:
                self._file.close()
        except Exception:  # nothing more to report: stderr already says it
            pass
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
    return _plain_number(item)


def _plain_number(item: Any) -> Any:
    """A numpy number, a Decimal, a Fraction as a plain number (an lr a script set to np.float32(0.1)); anything
    else that JSON cannot hold is dropped (None), never written as text nor left to fail the flush."""
    if isinstance(item, float):  # float subclasses (np.float64)
        return strict_number(float(item))
    if isinstance(item, numbers.Integral):
        return int(item)
    try:
        if isinstance(item, numbers.Real) or type(item).__name__ in ("Decimal", "bool_"):
            value = item.item() if type(item).__name__ == "bool_" else float(item)  # type: ignore[union-attr]
            return strict_number(value)
        if hasattr(item, "tolist") and getattr(item, "ndim", None) in (0, 1):  # a numpy scalar or vector
            return strict_number(item.tolist())
    except (TypeError, ValueError, OverflowError):
        return None
    return None


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
