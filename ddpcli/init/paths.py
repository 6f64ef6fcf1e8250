"""The files `ddpcli init` reads and writes, checked before anything runs: the script exists and resolves (a
symlink loop is the user's to fix, in one line), and the experiment file is never the script itself, under any
spelling (`train.py`, `./train.py`, its absolute path, a symlink or a hard link to it), even with --force: that
would lose the user's training script.
"""

from __future__ import annotations

import os
from pathlib import Path

from ddpcli.errors import UserError


def resolved(path: Path, what: str) -> Path:
    """`path` with every symlink followed; a loop or an unreadable component is one line."""
    try:
        return path.resolve(strict=False)
    except (OSError, RuntimeError) as error:  # RuntimeError: Python < 3.13's "Symlink loop"
        reason = getattr(error, "strerror", None) or str(error)
        raise UserError(f"{path}: cannot resolve the {what} path: {reason}") from None


def check_script(script: Path) -> Path:
    """The script's resolved path; a missing script, a symlink loop or a folder is one line."""
    target = resolved(script, "script")
    if not target.exists():
        raise UserError(f"{script}: no such script")
    if not target.is_file():
        raise UserError(f"{script}: not a file")
    return target


def refuse_own_script(output: Path, script: Path | None) -> None:
    """An experiment file that would replace the script (same resolved path, or the same inode: a hard link)."""
    if script is None:
        return
    target = resolved(output, "output")
    same = target == resolved(script, "script")
    if not same and target.exists():
        try:
            same = os.path.samefile(target, script)
        except OSError:
            same = False
    if same:
        raise UserError(
            f"-o {output} is the training script itself ({script}); ddpcli init never writes over it: give "
            "another file with -o (default experiments.toml)"
        )


def check_output(output: Path) -> None:
    """An output that exists and is not a regular file (a folder, a device) cannot be the experiment file."""
    target = resolved(output, "output")
    if target.exists() and not target.is_file():
        raise UserError(f"{output}: exists and is not a regular file; give another file with -o")
