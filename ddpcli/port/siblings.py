"""Functions of the script's own folder (`from utils import progress_bar`, `import utils`): whether one only
prints, read from its source with `ast` (nothing is imported or run). kuangliu/pytorch-cifar's `progress_bar` writes
to sys.stdout and touches no torch: its calls are talk, rank 0's alone, like print."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

from ddpcli.errors import UserError
from ddpcli.script.source import parse_ast, read

PRINTS = {"print", "sys.stdout.write", "sys.stderr.write"}


def _dotted(node: ast.AST) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return ""
    parts.append(node.id)
    return ".".join(reversed(parts))


@cache
def _module(folder: Path, module: str) -> ast.Module | None:
    base = folder.joinpath(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            try:
                return parse_ast(read(path))
            except UserError:
                return None
    return None


def only_prints(folder: Path | None, imported: str) -> bool:
    """`imported` (`utils.progress_bar`) is a function of a module in `folder` that prints and uses no torch."""
    module, _, name = imported.rpartition(".")
    tree = _module(folder, module) if folder is not None and module and not module.startswith("torch") else None
    if tree is None:
        return False
    function = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name), None)
    if function is None:
        return False
    torch_names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            for alias in node.names:
                origin = (node.module or "") if isinstance(node, ast.ImportFrom) else alias.name
                if origin.startswith("torch"):
                    torch_names.add(alias.asname or alias.name.split(".")[0])
    calls = [_dotted(n.func) for n in ast.walk(function) if isinstance(n, ast.Call)]
    uses = {n.id for n in ast.walk(function) if isinstance(n, ast.Name)}
    return any(call in PRINTS for call in calls) and not uses & torch_names
