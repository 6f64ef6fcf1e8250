"""LightningCLI scripts: the `fit` subcommand, and their flags read from the source where `--help` cannot run.

LightningCLI(Model, DataModule) turns the classes' `__init__` arguments into `--model.NAME` and `--data.NAME`
flags and adds Lightning's `--trainer.*` and `--seed_everything`. `ddpcli init` runs `SCRIPT fit --help` to read
them; where that fails because jsonargparse is not installed (LightningCLI's own dependency), the same flags are
read from the syntax tree: the classes defined in the script and Lightning's trainer defaults
(`frameworks.LIGHTNING_CLI_TRAINER`).
"""

from __future__ import annotations

import libcst as cst

from ddpcli.init.help_text import HelpOption
from ddpcli.script.frameworks import LIGHTNING_CLI_TRAINER
from ddpcli.script.reader import keyword, literal_value


def subcommand(call: cst.Call | None) -> tuple[str, ...]:
    """("fit",) unless the script builds LightningCLI(..., run=False), which has no subcommands."""
    if call is None:
        return ()
    run = keyword(call, "run")
    if run is not None and literal_value(run.value) is False:
        return ()
    return ("fit",)


def static_options(call: cst.Call, classes: dict[str, cst.ClassDef]) -> list[HelpOption]:
    """The flags LightningCLI would build from the classes of `call` that the script defines."""
    options = []
    seed_arg = keyword(call, "seed_everything_default")
    seed = literal_value(seed_arg.value) if seed_arg is not None else None
    for flag, default in LIGHTNING_CLI_TRAINER:
        if flag == "--seed_everything" and seed is not None:
            default = str(seed)
        options.append(HelpOption((flag,), True, default, "Lightning's default"))
    positional = [arg.value for arg in call.args if arg.keyword is None]
    for prefix, index, name in (("model", 0, "model_class"), ("data", 1, "datamodule_class")):
        given = keyword(call, name)
        node = positional[index] if len(positional) > index else given.value if given is not None else None
        if isinstance(node, cst.Name) and node.value in classes:
            options += [
                HelpOption((f"--{prefix}.{arg}",), True, default, f"{node.value}.__init__")
                for arg, default in _init_defaults(classes[node.value])
            ]
    return options


def _init_defaults(cls: cst.ClassDef) -> list[tuple[str, str | None]]:
    body = cls.body.body if isinstance(cls.body, cst.IndentedBlock) else ()
    init = next((node for node in body if isinstance(node, cst.FunctionDef) and node.name.value == "__init__"), None)
    if init is None:
        return []
    arguments = [*init.params.posonly_params, *init.params.params][1:] + list(init.params.kwonly_params)
    return [(argument.name.value, _literal_text(argument.default)) for argument in arguments]


def _literal_text(node: cst.BaseExpression | None) -> str | None:
    value = literal_value(node)
    return None if value is None else str(value)
