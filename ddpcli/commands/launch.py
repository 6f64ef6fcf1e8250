"""`ddpcli launch` (not yet built)."""

from __future__ import annotations

from ddpcli.errors import UserError


def launch_command() -> None:
    """Not built yet."""
    raise UserError("ddpcli launch is not built yet")
