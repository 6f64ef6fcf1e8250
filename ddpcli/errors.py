"""Errors that are the user's to fix: the CLI prints them as one line and exits 2, never with a traceback."""

from __future__ import annotations

from pathlib import Path


class UserError(Exception):
    """A mistake in what the user gave us (a file, a flag, a path). Exit code 2."""

    exit_code = 2


class OptionError(UserError):
    """A bad value for one option of a command, found by the pure code that uses it. The pure layers name what
    they were given (`nnodes 0: ...`); the CLI names the flag it came from (`--nnodes 0: ...`) through
    ddpcli.cli.console.user_errors, which reads `option` and `value`."""

    def __init__(self, option: str, value: object, message: str) -> None:
        self.option, self.value, self.message = option, value, message
        super().__init__(f"{option} {value}: {message}")

    def as_flag(self) -> str:
        return f"--{self.option.replace('_', '-')} {self.value}: {self.message}"


class ConfigError(UserError):
    """A problem in an experiment file, located by file and field path (`experiments[1].global_batch_size`)."""

    def __init__(self, path: Path | str, field_path: str | None, message: str) -> None:
        self.path = str(path)
        self.field_path = field_path
        self.message = message
        location = f"{self.path}: {field_path}" if field_path else self.path
        super().__init__(f"{location}: {message}")
