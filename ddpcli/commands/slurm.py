"""`ddpcli slurm` (not yet built)."""

from __future__ import annotations

from ddpcli.errors import UserError


def slurm_command() -> None:
    """Not built yet."""
    raise UserError("ddpcli slurm is not built yet")
