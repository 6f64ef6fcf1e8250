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

from dataclasses import dataclass, field
from pathlib import Path

import libcst as cst

from ddpcli.arithmetic import ExpressionError, evaluate
from ddpcli.errors import UserError
from ddpcli.init.help_text import HelpOption
from ddpcli.script.reader import Reader, literal_value
from ddpcli.script.source import decode


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


def read_config_globals(tree: Reader) -> ConfigGlobals:
    """The simple globals assigned before the module-level `exec(...)`: literals and arithmetic over earlier
    globals (`lr_decay_iters = max_iters`); anything else (a call, an expression on the machine) is not a flag
    init can fill."""
    config = ConfigGlobals()
    for statement in _module_statements(tree):
        if _is_exec(statement):
            break
        if isinstance(statement, cst.Assign) and len(statement.targets) == 1:
            target = statement.targets[0].target
            if isinstance(target, cst.Name) and not target.value.startswith("_"):
                value = _simple_value(tree, statement.value, config.values)
                if value is not None:
                    config.values[target.value] = value
    for node in tree.order:
        if (
            isinstance(node, cst.AugAssign)
            and isinstance(node.operator, cst.FloorDivideAssign | cst.DivideAssign)
            and isinstance(node.target, cst.Name)
            and "world" in tree.code(node.value).lower()
        ):
            config.total_over_ranks.add(node.target.value)
        if isinstance(node, cst.If) and any(isinstance(inner, cst.Break) for inner in _block(node.body)):
            test = node.test
            if (
                isinstance(test, cst.Comparison)
                and len(test.comparisons) == 1
                and isinstance(test.comparisons[0].operator, cst.GreaterThan)
                and isinstance(test.comparisons[0].comparator, cst.Name)
            ):
                config.one_more_step.add(test.comparisons[0].comparator.value)
    return config


def _module_statements(tree: Reader) -> list[cst.CSTNode]:
    """The module's statements one by one (`a = 1; b = 2` is two)."""
    return _block(tree.module)


def _block(block: cst.Module | cst.BaseSuite) -> list[cst.CSTNode]:
    """The statements directly in a block, small statements of a line each on their own."""
    lines = block.body if isinstance(block, cst.Module | cst.IndentedBlock) else [block]
    found: list[cst.CSTNode] = []
    for line in lines:
        found += list(line.body) if isinstance(line, cst.SimpleStatementLine | cst.SimpleStatementSuite) else [line]
    return found


def apply_config_files(config: ConfigGlobals, files: list[Path]) -> list[str]:
    """nanoGPT's plain arguments are config files exec'd over the globals: read their assignments the same way.
    Returns the problems (a file that cannot be read) for the file's header."""
    problems = []
    for path in files:
        try:
            tree = Reader.read(decode(path.read_bytes(), str(path)).text)
        except (OSError, UserError, cst.ParserSyntaxError) as error:
            problems.append(f"config file {path} not read ({error}): its values are not in this file")
            continue
        for name, value in read_config_globals(tree).values.items():
            if name in config.values:
                config.values[name] = value
    return problems


def _is_exec(statement: cst.CSTNode) -> bool:
    return (
        isinstance(statement, cst.Expr)
        and isinstance(statement.value, cst.Call)
        and isinstance(statement.value.func, cst.Name)
        and statement.value.func.value == "exec"
    )


def _simple_value(tree: Reader, node: cst.BaseExpression, known: dict[str, object]) -> object:
    value = literal_value(node)
    if isinstance(value, bool | str):
        return value
    numbers = {name: value for name, value in known.items() if isinstance(value, int | float)}
    try:
        return evaluate(tree.code(node), numbers)
    except ExpressionError:
        return None
