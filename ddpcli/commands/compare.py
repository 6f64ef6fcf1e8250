"""`ddpcli compare` (not yet built)."""

from __future__ import annotations

from ddpcli.errors import UserError


def compare_command() -> None:
    """Not built yet."""
    raise UserError("ddpcli compare is not built yet")
