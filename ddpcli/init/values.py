"""A default as the script shows it (text) to the number init may write: whole, positive, finite, or None.

`inf`, `nan`, `-0.1` and `1e400` (which Python reads as inf) are None: the caller says the default is invalid.
"""

from __future__ import annotations

import math


def as_int(text: str | None) -> int | None:
    """A whole number as printed (`3`, `3.0`), else None."""
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return int(value) if math.isfinite(value) and value == int(value) else None


def positive_int(text: str | None) -> int | None:
    value = as_int(text)
    return value if value is not None and value >= 1 else None


def non_negative_int(text: str | None) -> int | None:
    value = as_int(text)
    return value if value is not None and value >= 0 else None


def positive_float(text: str | None) -> float | None:
    try:
        value = float(text) if text is not None else None
    except ValueError:
        return None
    return value if value is not None and math.isfinite(value) and value > 0 else None
