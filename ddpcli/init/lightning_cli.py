"""LightningCLI scripts: the `fit` subcommand, and their flags read from the source where `--help` cannot run.

LightningCLI(Model, DataModule) turns the classes' `__init__` arguments into `--model.NAME` and `--data.NAME`
flags and adds Lightning's `--trainer.*` and `--seed_everything`. `ddpcli init` runs `SCRIPT fit --help` to read
them; where that fails because jsonargparse is not installed (LightningCLI's own dependency), the same flags are
read from the syntax tree: the classes defined in the script and Lightning's trainer defaults
(`frameworks.LIGHTNING_CLI_TRAINER`).
"""

from __future__ import annotations

import ast

from ddpcli.init.help_text import HelpOption
from ddpcli.script.frameworks import LIGHTNING_CLI_TRAINER


def subcommand(call: ast.Call | None) -> tuple[str, ...]:
    """("fit",) unless the script builds LightningCLI(..., run=False), which has no subcommands."""
    if call is None:
        return ()
    for keyword in call.keywords:
        if keyword.arg == "run" and isinstance(keyword.value, ast.Constant) and keyword.value.value is False:
            return ()
    return ("fit",)


def static_options(call: ast.Call, classes: dict[str, ast.ClassDef]) -> list[HelpOption]:
    """The flags LightningCLI would build from the classes of `call` that the script defines."""
    options = []
    seed = _keyword(call, "seed_everything_default")
    for flag, default in LIGHTNING_CLI_TRAINER:
        if flag == "--seed_everything" and seed is not None:
            default = str(seed)
        options.append(HelpOption((flag,), True, default, "Lightning's default"))
    for prefix, index, keyword in (("model", 0, "model_class"), ("data", 1, "datamodule_class")):
        node = call.args[index] if len(call.args) > index else _keyword_node(call, keyword)
        if isinstance(node, ast.Name) and node.id in classes:
            options += [
                HelpOption((f"--{prefix}.{name}",), True, default, f"{node.id}.__init__")
                for name, default in _init_defaults(classes[node.id])
            ]
    return options


def _init_defaults(cls: ast.ClassDef) -> list[tuple[str, str | None]]:
    init = next((node for node in cls.body if isinstance(node, ast.FunctionDef) and node.name == "__init__"), None)
    if init is None:
        return []
    arguments = [*init.args.args[1:], *init.args.kwonlyargs]
    defaults = [None] * (len(init.args.args) - 1 - len(init.args.defaults)) + list(init.args.defaults)
    defaults += list(init.args.kw_defaults)
    found = []
    for argument, default in zip(arguments, defaults, strict=True):
        found.append((argument.arg, _literal_text(default)))
    return found


def _keyword_node(call: ast.Call, name: str) -> ast.expr | None:
    return next((keyword.value for keyword in call.keywords if keyword.arg == name), None)


def _keyword(call: ast.Call, name: str) -> object:
    node = _keyword_node(call, name)
    try:
        return ast.literal_eval(node) if node is not None else None
    except ValueError:
        return None


def _literal_text(node: ast.expr | None) -> str | None:
    if node is None:
        return None
    try:
        value = ast.literal_eval(node)
    except ValueError:
        return None
    return None if value is None else str(value)
