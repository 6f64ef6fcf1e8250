"""nanoGPT-style configuration: module-level globals (`batch_size = 12`, `gradient_accumulation_steps = 5 * 8`)
that `exec(open('configurator.py').read())` overrides from `--key=value` arguments (and from config files given
as plain arguments). Read statically: the script is never run, since its configurator asserts on `--help`.

Two of nanoGPT's habits change what a flag means, and both are read from the syntax tree, not assumed:
- `gradient_accumulation_steps //= ddp_world_size`: the flag is the total over all ranks, so it is wired as
  `{grad_accum_steps * world_size}`;
- `if iter_num > max_iters: break` after the step: the loop runs max_iters + 1 optimizer steps, so it is wired as
  `{total_steps - 1}`.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

from ddpcli.arithmetic import ExpressionError, evaluate
from ddpcli.init.help_text import HelpOption


@dataclass
class ConfigGlobals:
    """The overridable globals (name -> value, in source order) and the habits above."""

    values: dict[str, object] = field(default_factory=dict)
    total_over_ranks: set[str] = field(default_factory=set)  # names divided by the world size in the script
    one_more_step: set[str] = field(default_factory=set)  # N in `if i > N: break`: N + 1 iterations

    def options(self) -> list[HelpOption]:
        """The globals as options `--name=value` (what the configurator accepts), defaults as text."""
        return [
            HelpOption((f"--{name}",), True, None if value is None else str(value), "config global")
            for name, value in self.values.items()
        ]


def read_config_globals(tree: ast.Module) -> ConfigGlobals:
    """The simple globals assigned before the module-level `exec(...)`: literals and arithmetic over earlier
    globals (`lr_decay_iters = max_iters`); anything else (a call, an expression on the machine) is not a flag
    init can fill."""
    config = ConfigGlobals()
    for statement in tree.body:
        if _is_exec(statement):
            break
        if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
            target = statement.targets[0]
            if isinstance(target, ast.Name) and not target.id.startswith("_"):
                value = _simple_value(statement.value, config.values)
                if value is not None:
                    config.values[target.id] = value
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.AugAssign)
            and isinstance(node.op, ast.FloorDiv | ast.Div)
            and isinstance(node.target, ast.Name)
            and "world" in ast.unparse(node.value).lower()
        ):
            config.total_over_ranks.add(node.target.id)
        if isinstance(node, ast.If) and any(isinstance(inner, ast.Break) for inner in node.body):
            test = node.test
            if (
                isinstance(test, ast.Compare)
                and len(test.ops) == 1
                and isinstance(test.ops[0], ast.Gt)
                and isinstance(test.comparators[0], ast.Name)
            ):
                config.one_more_step.add(test.comparators[0].id)
    return config


def apply_config_files(config: ConfigGlobals, files: list[Path]) -> list[str]:
    """nanoGPT's plain arguments are config files exec'd over the globals: read their assignments the same way.
    Returns the problems (a file that cannot be read) for the file's header."""
    problems = []
    for path in files:
        try:
            tree = ast.parse(path.read_bytes())
        except (OSError, SyntaxError, ValueError) as error:
            problems.append(f"config file {path} not read ({error}): its values are not in this file")
            continue
        for name, value in read_config_globals(tree).values.items():
            if name in config.values:
                config.values[name] = value
    return problems


def _is_exec(statement: ast.stmt) -> bool:
    return (
        isinstance(statement, ast.Expr)
        and isinstance(statement.value, ast.Call)
        and isinstance(statement.value.func, ast.Name)
        and statement.value.func.id == "exec"
    )


def _simple_value(node: ast.expr, known: dict[str, object]) -> object:
    if isinstance(node, ast.Constant) and isinstance(node.value, bool | str):
        return node.value
    numbers = {name: value for name, value in known.items() if isinstance(value, int | float)}
    try:
        return evaluate(ast.unparse(node), numbers)
    except ExpressionError:
        return None
