"""Read a training script for `ddpcli init`: its syntax tree always, its `--help` only when it builds a parser.

- a parser (argparse, click, typer, HfArgumentParser, jsonargparse, LightningCLI with `fit`, Fire, ...): run
  `--help` (`script_help`), take the options the parser itself describes, else those of the help text;
- nanoGPT-style configurator globals: read them statically (`configurator`), run nothing;
- anything else (a script that reads `sys.argv` itself, or takes no arguments): run nothing, wire nothing.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ddpcli.errors import UserError
from ddpcli.init.configurator import apply_config_files, read_config_globals
from ddpcli.init.help_text import HelpOption, options_from_dump, parse_help, subcommands_from_dump
from ddpcli.init.lightning_cli import static_options, subcommand
from ddpcli.init.roles import LITERAL_NAMES
from ddpcli.init.script_help import ScriptHelp, read_help
from ddpcli.init.script_kind import ScriptFacts, module_source, script_facts
from ddpcli.init.wiring import Source

NOT_RUN = {
    "hand": "the script reads sys.argv itself and builds no parser init knows (argparse, click, typer, "
    "HfArgumentParser, LightningCLI, Fire, ...), so it was not run with --help (it would have trained)",
    "none": "the script builds no argument parser (argparse, click, typer, HfArgumentParser, LightningCLI, Fire, "
    "...), so it was not run with --help (it would have trained)",
}


@dataclass
class Inspection:
    """The script's options (None: not run, `not_run` says why), what its source says, and how it was read."""

    options: list[HelpOption] | None
    source: Source
    command: str
    seconds: float = 0.0
    prefix: tuple[str, ...] = ()
    not_run: str = ""
    warnings: list[str] = field(default_factory=list)
    path: Path | None = None  # the source file read (a module's, found without importing it)
    single_device: bool = False  # the source shows no DDP: no process group, no wrapper, no framework doing it
    fixed_args: tuple[str, ...] | None = None  # after `--`, less the subcommand (and what came before it)


def inspect_script(
    script: Path | None, module: str | None, cwd: Path, timeout_s: float, fixed_args: tuple[str, ...],
    notice: Callable[[str], None] | None = None,
) -> Inspection:  # fmt: skip
    """`notice` is told, once, what init waits for when the script's --help takes more than a few seconds."""
    if script is not None and not script.is_file():
        raise UserError(f"{script}: no such script")
    path = script if script is not None else module_source(module or "", [cwd, *map(Path, sys.path[1:])])
    if path is None:  # not found without importing: let Python say what is wrong
        found = read_help(None, module, cwd, timeout_s, notice=notice)
        return Inspection(_options(found.dump, found.text), Source(), found.command, found.seconds)
    facts = script_facts(path, LITERAL_NAMES, () if script is not None else (cwd,))
    inspection = _inspect_source(facts, script, module, path, cwd, timeout_s, fixed_args, notice)
    inspection.path = path
    inspection.single_device = not facts.data_parallel
    return inspection


def _inspect_source(
    facts: ScriptFacts,
    script: Path | None, module: str | None, path: Path, cwd: Path, timeout_s: float, fixed_args: tuple[str, ...],
    notice: Callable[[str], None] | None,
) -> Inspection:  # fmt: skip
    source = _source(facts)
    if facts.kind == "configurator":
        return _configurator(facts, path, source, fixed_args)
    if not facts.runs_help:
        return Inspection(None, source, f"python {script or '-m ' + str(module)}", not_run=NOT_RUN[facts.kind])
    prefix = subcommand(facts.lightning_cli) if facts.kind == "lightning_cli" else ()
    try:
        found = read_help(script, module, cwd, timeout_s, prefix, notice)
    except UserError as error:
        if facts.lightning_cli is None or "jsonargparse" not in str(error):
            raise
        reason = str(error).split(": ", 1)[-1]
        return Inspection(
            static_options(facts.lightning_cli, facts.classes), source, "LightningCLI read from the source",
            prefix=prefix, warnings=[f"--help could not run here ({reason}): LightningCLI's flags were read from "
                                     "the source; the runs need jsonargparse installed"],
        )  # fmt: skip
    found, prefix, fixed = _subcommand(script, module, cwd, timeout_s, found, prefix, fixed_args, notice)
    inspection = Inspection(_options(found.dump, found.text), source, found.command, found.seconds, prefix)
    inspection.fixed_args = fixed
    return inspection


MAX_SUBCOMMAND_LEVELS = 4


def _subcommand(
    script: Path | None, module: str | None, cwd: Path, timeout_s: float, found: ScriptHelp,
    prefix: tuple[str, ...], fixed: tuple[str, ...], notice: Callable[[str], None] | None,
) -> tuple[ScriptHelp, tuple[str, ...], tuple[str, ...]]:  # fmt: skip
    """A parser with subcommands (argparse subparsers, a click group) holds the training flags in the chosen
    subcommand's parser: the first value after `--` that names one is that choice (with the arguments before it,
    the top-level parser's, it heads every run's args) and its own `--help` is read. Without one: exit 2."""
    for _ in range(MAX_SUBCOMMAND_LEVELS):
        names = subcommands_from_dump(found.dump)
        if not names:
            break
        index = next((i for i, token in enumerate(fixed) if token in names), None)
        if index is None:
            target = str(script) if script is not None else f"-m {module}"
            raise UserError(
                f"{target} has subcommands ({', '.join(names)}): give the one to run after --, e.g. "
                f"`ddpcli init {target} -- {' '.join((*prefix, names[0]))}`"
            )
        prefix, fixed = (*prefix, *fixed[: index + 1]), fixed[index + 1 :]
        found = read_help(script, module, cwd, timeout_s, prefix, notice)
    return found, prefix, fixed


def _options(dump: str, text: str) -> list[HelpOption]:
    dumped = options_from_dump(dump)
    return dumped if dumped is not None else parse_help(text)


def _configurator(facts: ScriptFacts, path: Path, source: Source, fixed_args: tuple[str, ...]) -> Inspection:
    assert facts.tree is not None
    config = read_config_globals(facts.tree)
    files = [path.parent / arg for arg in fixed_args if not arg.startswith("-") and "=" not in arg]
    problems = apply_config_files(config, files)
    source = Source(
        frameworks=source.frameworks, literals=source.literals, warmups=source.warmups, optimizers=source.optimizers,
        checkpoints=source.checkpoints, derived=source.derived, fabric=source.fabric,
        fabric_launches=source.fabric_launches,
        total_over_ranks=frozenset(config.total_over_ranks), one_more_step=frozenset(config.one_more_step),
        equals_form=True,
    )  # fmt: skip
    return Inspection(
        config.options(), source, "its configurator globals (read statically, nothing run)", warnings=problems
    )


def _source(facts: ScriptFacts) -> Source:
    return Source(
        frameworks=frozenset(facts.frameworks),
        literals={role: (found.value, f"{found.how} at line {found.line}") for role, found in facts.literals.items()},
        warmups=tuple(f"{found.how} at line {found.line}" for found in facts.warmups),
        optimizers=tuple((str(found.value), f"{found.how} at line {found.line}") for found in facts.optimizers),
        checkpoints=tuple(f"{found.how} at line {found.line}" for found in facts.checkpoints),
        derived=tuple(facts.derivations),
        fabric=facts.fabric,
        fabric_launches=facts.fabric_launches,
    )
