"""Warnings keep the file and line of the code that caused them, not the observer's wrappers in between.

A library warns with `stacklevel=2` to name its caller: torch's DDP warns "`broadcast_buffers` is deprecated" at
the line of the script that built the model. With the observer's wrapper around `DistributedDataParallel.__init__`,
the caller one level up is the wrapper, and the warning read "ddpcli/worker/observer/reading.py:22". Python 3.12
has `skip_file_prefixes` for this, but only the code that warns can pass it, and ddpcli supports 3.10.

So `warnings.warn` is replaced, once, by a function that walks up the stack the way CPython does (stepping over
importlib's internal frames), counts the observer's wrapper frames among the frames a stacklevel passes, and calls
the original with the stacklevel raised by that many (plus one for itself). A warning without such a frame in
its path is attributed exactly as before; filters, `once` registries and `catch_warnings` work as before.
"""

from __future__ import annotations

import sys
import types
import warnings
from collections.abc import Callable
from typing import Any

_skipped: set[types.CodeType] = set()
_original_warn: Callable[..., Any] | None = None


def skip_in_warnings(function: Callable[..., Any]) -> None:
    """Warnings passing through `function`'s frames are attributed to its caller (installs the replacement)."""
    code = getattr(function, "__code__", None)
    if isinstance(code, types.CodeType):
        _skipped.add(code)
    _install()


def _install() -> None:
    global _original_warn
    if _original_warn is None:
        _original_warn = warnings.warn
        warnings.warn = _warn


def _internal(frame: types.FrameType) -> bool:
    """CPython's own rule (warnings.py, _warnings.c): importlib's bootstrap frames never count as a level."""
    filename = frame.f_code.co_filename
    return "importlib" in filename and "_bootstrap" in filename


def _extra_levels(caller: types.FrameType | None, stacklevel: int) -> int:
    """How many of the observer's frames lie on the path of `stacklevel` levels up from the caller of warn."""
    if stacklevel <= 1 or caller is None or not _skipped:
        return 0
    extra, frame, remaining = 0, caller, stacklevel - 1
    while remaining > 0 and frame is not None:
        frame = frame.f_back
        if frame is None:
            break
        if _internal(frame):
            continue  # CPython skips these itself, without counting them
        if frame.f_code in _skipped:
            extra += 1
        else:
            remaining -= 1
    return extra


def _warn(message: Any, category: Any = None, stacklevel: int = 1, source: Any = None, **kwargs: Any) -> None:
    assert _original_warn is not None
    level = max(stacklevel, 1) if isinstance(stacklevel, int) else 1
    extra = _extra_levels(sys._getframe(1), level) if level > 1 else 0
    _original_warn(message, category, level + 1 + extra, source, **kwargs)
