"""Where the port goes, and whether it may: never onto SCRIPT itself (any spelling of it: a relative or resolved
path, a symlink, a hard link), never over an existing file without --force."""

from __future__ import annotations

import difflib
import os
from pathlib import Path

from ddpcli.errors import UserError


def default_output(script: Path) -> Path:
    return script.with_name(f"{script.stem}_ddp.py")


def _same_file(a: Path, b: Path) -> bool:
    if a.resolve() == b.resolve():
        return True
    try:
        return os.path.samefile(a, b)  # a hard link is the same file under another name
    except OSError:
        return False


def check_output(script: Path, output: Path, force: bool) -> None:
    if _same_file(script, output):
        raise UserError(f"{output} is {script} itself: ddpcli port never writes the script it reads (even with "
                        "--force); name another file with -o")  # fmt: skip
    if output.exists() and not force:
        raise UserError(f"{output} exists: --force overwrites it, or name another file with -o")
    if output.is_dir():
        raise UserError(f"{output} is a directory: name a file with -o")


def unified_diff(before: str, after: str, script: str, output: str) -> str:
    lines = difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True), script, output)
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines)
