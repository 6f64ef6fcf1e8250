"""`ddpcli port`: write the data-parallel version of a single-device training script, and list what changed.

The port runs as the script did under `python OUT` (no RANK/WORLD_SIZE: the script's own path, bit for bit) and
data-parallel under torchrun. Every change is listed with its line in SCRIPT and why; what the port could not do is
listed too. Then `ddpcli init OUT` and `ddpcli launch` prove it: N x B/N against 1 x B.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, NoReturn

import typer

from ddpcli.cli.console import during_interrupt, error, say, user_errors, wrote
from ddpcli.errors import UserError
from ddpcli.port.engine import Program, port_program
from ddpcli.port.output import check_output, default_output, unified_diff
from ddpcli.port.records import PortRefused
from ddpcli.script import source as script_source


@user_errors
def port_command(
    script: Annotated[Path, typer.Argument(metavar="SCRIPT", help="Your single-device training script.")],
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            help="The ported script. Default: SCRIPT's name with _ddp before .py, beside it "
            "(train.py -> train_ddp.py).",
        ),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite OUT if it exists (never SCRIPT).")] = False,
    diff: Annotated[bool, typer.Option("--diff", help="Print a unified diff of SCRIPT -> OUT; write nothing.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the changes as JSON.")] = False,
) -> None:
    """Write the data-parallel version of a single-device training script (DDP under torchrun, unchanged under
    python), with each change and its reason."""
    if script.is_dir():
        raise UserError(f"{script}: a folder, not a script: name the training script in it")
    if not script.is_file():
        raise UserError(f"{script}: no such file")
    out = output if output is not None else default_output(script)
    if not diff:
        check_output(script, out, force)
    try:
        ported = port_program(script)
    except PortRefused as refused:
        for reason in refused.reasons:  # one line a reason, nothing written
            error(reason)
        raise typer.Exit(refused.exit_code) from None
    except KeyboardInterrupt:
        _interrupted(script)
    except Exception as bug:  # a rule that fails on an unforeseen pattern: one line, nothing written
        if during_interrupt(bug):  # Ctrl-C inside libcst can surface as another error (a KeyError of a node)
            _interrupted(script)
        error(f"{script}: ddpcli port could not port it ({type(bug).__name__}: {bug}); nothing written. This is "
              "a bug of ddpcli port: please report it with the script")  # fmt: skip
        raise typer.Exit(2) from None
    result = ported.script
    if not diff:
        for module in ported.modules:  # every file checked before any is written
            check_output(module.path, module.output, force)
    if diff:
        text = unified_diff(script_source.read(script).text, result.source, str(script), str(out))
        for module in ported.modules:
            assert module.result is not None
            text += unified_diff(script_source.read(module.path).text, module.result.source, str(module.path),
                                 str(module.output))  # fmt: skip
        if not as_json:
            typer.echo(text, nl=False)
    else:
        files = [(out, result.source.encode(result.encoding))] + [
            (m.output, m.result.source.encode(m.result.encoding)) for m in ported.modules if m.result is not None
        ]
        _write_all(files, force)
    if as_json:
        modules = [m.result.module_json(str(m.path), str(m.output)) for m in ported.modules if m.result is not None]
        typer.echo(json.dumps(result.as_json(str(script), str(out), modules), indent=2, allow_nan=False))
        return
    _list(script, out, ported, diff)
    if not diff:
        wrote(out)
        for module in ported.modules:
            wrote(module.output)
        say(f"next: ddpcli init {out}, then ddpcli launch (N x B/N against 1 x B proves the port)", to_stdout=True)


def _list(script: Path, out: Path, ported: Program, diff: bool) -> None:
    """Each file's changes and what it could not port, the script first, then each module of its program."""
    files = [(script, out, ported.script)] + [(m.path, m.output, m.result) for m in ported.modules if m.result]
    width = max((len(change.kind) for _, _, result in files for change in result.changes), default=0)
    for number, (path, output, result) in enumerate(files):
        what = "would port" if diff else "ported"
        module = " (a module of its program)" if number else ""
        say(f"{what} {path} -> {output}{module}: {len(result.changes)} changes, {len(result.not_ported)} not ported",
            to_stdout=not diff)  # fmt: skip
        for change in result.changes:
            say(f"  line {change.line:>4}  {change.kind:<{width}}  {change.text}", to_stdout=not diff)
        for item in result.not_ported:
            say(f"  line {item.line:>4}  not ported: {item.reason}", style="yellow", to_stdout=not diff)


def _interrupted(script: Path) -> NoReturn:
    error(f"{script}: interrupted; nothing written")
    raise typer.Exit(130) from None


def _write_all(files: list[tuple[Path, bytes]], force: bool) -> None:
    """OUT and the modules' copies, each in its file's own encoding (a coding cookie's, a byte order mark kept).
    Without --force each is created exclusively: a file another process made since the check is never replaced,
    and what this port created before it is removed (nothing half-written stays)."""
    created: list[Path] = []
    try:
        for path, data in files:
            with path.open("wb" if force else "xb") as handle:
                created.append(path)
                handle.write(data)
    except FileExistsError as problem:
        _remove(created)
        raise UserError(f"{problem.filename} exists (created while porting): --force overwrites it") from None
    except OSError as problem:
        _remove(created if not force else [])
        raise UserError(f"cannot write {problem.filename}: {problem.strerror or problem}") from None


def _remove(paths: list[Path]) -> None:
    for path in paths:
        path.unlink(missing_ok=True)
