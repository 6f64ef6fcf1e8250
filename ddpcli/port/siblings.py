"""Functions of the script's own folder (`from utils import progress_bar`, `import utils`): whether one only
prints, read from its source by ddpcli.script's reader (nothing is imported or run). kuangliu/pytorch-cifar's
`progress_bar` writes to sys.stdout and touches no torch: its calls are talk, rank 0's alone, like print.
pix2pix-pytorch's `update_learning_rate(scheduler, optimizer)` prints the rate too, after `scheduler.step()`: what
it is given, it changes, so every rank must call it (its print is the helper's own)."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import libcst as cst

from ddpcli.errors import UserError
from ddpcli.port.pure import PURE_METHODS
from ddpcli.script.modules import module_file
from ddpcli.script.reader import Reader
from ddpcli.script.source import read

PRINTS = {"print", "sys.stdout.write", "sys.stderr.write"}


@cache
def _module(folder: Path, module: str) -> Reader | None:
    path = module_file(folder, module)
    try:
        return Reader.of(read(path)) if path is not None else None
    except (UserError, cst.ParserSyntaxError):
        return None


def only_prints(folder: Path | None, imported: str) -> bool:
    """`imported` (`utils.progress_bar`) is a function of a module in `folder` that prints and uses no torch."""
    module, _, name = imported.rpartition(".")
    tree = _module(folder, module) if folder is not None and module and not module.startswith("torch") else None
    if tree is None:
        return False
    function = next((n for n in tree.module.body if isinstance(n, cst.FunctionDef) and n.name.value == name), None)
    if function is None:
        return False
    torch_names = {local for local, origin in tree.aliases.items() if origin.startswith("torch")}
    calls = [tree.resolve(n) for n in tree.walk(function) if isinstance(n, cst.Call)]
    uses = {n.value for n in tree.walk(function) if isinstance(n, cst.Name)}
    return (
        any(call in PRINTS for call in calls) and not uses & torch_names and not _changes_its_arguments(tree, function)
    )


def _changes_its_arguments(tree: Reader, function: cst.FunctionDef) -> bool:
    """A method of a parameter called that is not a read (`scheduler.step()`), or an attribute or item of one set."""
    params = {param.name.value for param in [*function.params.params, *function.params.kwonly_params]}
    for node in tree.walk(function):
        method = node.func if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) else None
        if method is not None and _root(method.value) in params and method.attr.value not in PURE_METHODS:
            return True
        targets = [t.target for t in node.targets] if isinstance(node, cst.Assign) else (
            [node.target] if isinstance(node, cst.AugAssign | cst.AnnAssign) else [])  # fmt: skip
        if any(isinstance(t, cst.Attribute | cst.Subscript) and _root(t) in params for t in targets):
            return True
    return False


def _root(node: cst.CSTNode) -> str:
    """`scheduler` of `scheduler.optimizer.param_groups[0]`."""
    while isinstance(node, cst.Attribute | cst.Subscript | cst.Call):
        node = node.value if not isinstance(node, cst.Call) else node.func
    return node.value if isinstance(node, cst.Name) else ""
