"""Errors that are the user's to fix: the CLI prints them as one line and exits 2, never with a traceback."""

from __future__ import annotations

from pathlib import Path


class UserError(Exception):
    """A mistake in what the user gave us (a file, a flag, a path). Exit code 2."""

    exit_code = 2


class ConfigError(UserError):
    """A problem in an experiment file, located by file and field path (`experiments[1].global_batch_size`)."""

    def __init__(self, path: Path | str, field_path: str | None, message: str) -> None:
        self.path = str(path)
        self.field_path = field_path
        self.message = message
        location = f"{self.path}: {field_path}" if field_path else self.path
        super().__init__(f"{location}: {message}")
