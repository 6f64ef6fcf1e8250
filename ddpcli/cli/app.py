"""The `ddpcli` command: one root Typer app whose commands are loaded only when they run.

Each command lives in its own module under ddpcli/cli/commands/. The root group knows them by name (COMMANDS) and
imports a module only when its command is invoked, as click's "Lazily Loading Subcommands" pattern (and hatch)
do: `ddpcli plan` imports planning and the plan renderer, not the supervisor, the sweep or the comparison. The
one-line help of each command is kept here so that `ddpcli --help` lists every command without importing any;
tests/test_startup.py checks that it equals the first paragraph of the command's docstring.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup

from ddpcli import __version__
from ddpcli.cli.console import usage_errors

MARKUP_MODE = "markdown"


def house_style(params: list[Any], ctx: Any) -> list[Any]:
    """The parameters as every command's help shows them: a flag with no value placeholder, a positional by its name
    in capitals.

    typer 0.29 fills the type column of its Rich help (rich_utils._print_options_panel) from
    `display_type_rich()`, which is the metavar when one is set and otherwise the annotation for every option,
    flags included (`--help <bool>`); its plain-text help (`get_help_record`) shows none for a flag, and so did its
    Rich help up to 0.27.1 (which skipped a type containing "bool"). A flag takes no value, so its metavar is the
    empty string, which every typer shows as nothing. A positional's metavar is its name in capitals (`FILE`, not
    `file` beside port's `SCRIPT`); the usage line is ours (collect_usage). A number with bounds is
    `<int> [x>=1]`, not typer 0.29's `<int range> [x>=1]` (`display_type()`, absent before): the bounds say it, and
    the shorter type column leaves init's `--per-device-batch-size` uncut at 80 columns. A repeatable option
    shows the value it takes each time (`--only <str>`, not `<list[str]>`, which reads as one value holding a list),
    and so does a repeated positional (`RUNS <path>`; typer 0.29 gives an argument no metavar in that column).
    Applied to the parameters of every command here, and to --help, which click adds to them.
    """
    for param in params:
        if param.param_type_name == "option" and param.is_flag and not param.count and param.metavar is None:
            param.metavar = ""
        elif param.param_type_name == "option" and param.metavar is None and hasattr(param, "display_type"):
            label = param.display_type(ctx)  # typer 0.29: `<int range>` for a bounded int, `<list[str]>`
            if label.endswith(" range>"):
                param.metavar = label.removesuffix(" range>") + ">"
            elif param.multiple and label.startswith("<list[") and label.endswith("]>"):
                param.metavar = f"<{label[len('<list[') : -len(']>')].lower()}>"  # one value each time it is given
        elif param.param_type_name == "argument":
            if param.metavar is None and param.name:
                param.metavar = param.name.upper()
            label = param.display_type(ctx) if hasattr(param, "display_type") else ""
            if param.nargs != 1 and label.startswith("<list[") and label.endswith("]>"):
                each = f"<{label[len('<list[') : -len(']>')].lower()}>"  # `RUNS <path>`, the usage line's `...`
                param.display_type_rich = lambda ctx, each=each: each
    return params


def collect_usage(ctx: Any, params: list[Any], options_metavar: str | None) -> list[str]:
    """The usage line's pieces in click's one style: `SCRIPT` required, `[FILE]` optional, `[RUNS]...` repeated.

    (typer >= 0.27 writes a required positional as `{SCRIPT}`, which click's own usage uses for a choice.)
    """
    pieces = [options_metavar] if options_metavar else []
    for param in params:
        if param.param_type_name != "argument":
            pieces.extend(param.get_usage_pieces(ctx))
            continue
        piece = param.metavar or (param.name or "").upper()
        if not param.required:
            piece = f"[{piece}]"
        pieces.append(f"{piece}..." if param.nargs != 1 else piece)
    return pieces


class Command(TyperCommand):
    """Every command: house_style parameters and usage line, and click's usage errors as one `error:` line."""

    def get_params(self, ctx: typer.Context) -> list[Any]:
        return house_style(super().get_params(ctx), ctx)

    def collect_usage_pieces(self, ctx: typer.Context) -> list[str]:
        return collect_usage(ctx, self.get_params(ctx), self.options_metavar)


@dataclass(frozen=True)
class LazyCommand:
    """Where a command's function lives, and the one line `ddpcli --help` shows for it."""

    module: str
    function: str
    short_help: str

    def load(self, name: str) -> Any:
        """Import the module and build the command exactly as `app.command(name)(function)` would."""
        function = getattr(importlib.import_module(self.module), self.function)
        single = typer.Typer(rich_markup_mode=MARKUP_MODE, add_completion=False)
        single.command(name, cls=Command)(function)
        return typer.main.get_command(single)  # a Typer with one command and no callback is that command


COMMANDS = {
    "plan": LazyCommand(
        "ddpcli.cli.commands.plan",
        "plan_command",
        "Resolve every run of an experiment file: world size, per-device batch, accumulation, global batch,\n"
        "learning-rate scaling, warmup and steps per epoch, with notes in plain words. Never imports torch.",
    ),
    "launch": LazyCommand(
        "ddpcli.cli.commands.launch",
        "launch_command",
        "Run the experiment file's runs (baseline first) through torchrun, one after another.",
    ),
    "compare": LazyCommand(
        "ddpcli.cli.commands.compare",
        "compare_command",
        "Compare runs: throughput, speedup and scaling efficiency against a baseline, loss at equal samples\n"
        "seen, and whether each multi-process run ends with the same parameters as its single-process equivalent.",
    ),
    "export": LazyCommand(
        "ddpcli.cli.commands.export",
        "export_command",
        "Export runs to TensorBoard, MLflow or W&B, every metrics row at step = samples seen, with params, final\n"
        "metrics and compare's verdict.",
    ),
    "slurm": LazyCommand(
        "ddpcli.cli.commands.slurm",
        "slurm_command",
        "Write an sbatch script for one run: srun starts one `ddpcli launch` per node, and the nodes meet\n"
        "at a torchrun rendezvous on the first node. Printed by default; `--submit` queues it.",
    ),
    "init": LazyCommand(
        "ddpcli.cli.commands.init",
        "init_command",
        "Write an experiment file for your own training script, read from its source and `--help`, without training.",
    ),
    "port": LazyCommand(
        "ddpcli.cli.commands.port",
        "port_command",
        "Write the data-parallel version of a single-device training script (DDP under torchrun, unchanged under\n"
        "python), with each change and its reason.",
    ),
}


class LazyGroup(TyperGroup):
    """The root group: commands by name from COMMANDS, each module imported on first use.

    While the group's own help is written, a command is a placeholder carrying only its one-line help, so that
    listing the commands imports none of them.
    """

    # Commands and contexts are typer's click classes (typer vendors click since 0.16), hence `Any` in the hints.
    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        self._listing = False
        self._loaded: dict[str, Any] = {}

    def list_commands(self, ctx: typer.Context) -> list[str]:
        return list(COMMANDS)

    def get_params(self, ctx: typer.Context) -> list[Any]:
        return house_style(super().get_params(ctx), ctx)

    def make_context(self, info_name: str | None, args: list[str], parent: Any = None, **extra: Any) -> Any:
        with usage_errors():  # the root's own options: `ddpcli --bogus`
            return super().make_context(info_name, args, parent=parent, **extra)

    def invoke(self, ctx: typer.Context) -> Any:
        with usage_errors():  # an unknown command, and every command's own parsing (bad value, missing argument)
            return super().invoke(ctx)

    def get_command(self, ctx: typer.Context, cmd_name: str) -> Any:
        lazy = COMMANDS.get(cmd_name)
        if lazy is None:
            return None
        if self._listing:
            return TyperCommand(cmd_name, short_help=lazy.short_help)
        if cmd_name not in self._loaded:
            self._loaded[cmd_name] = lazy.load(cmd_name)
        return self._loaded[cmd_name]

    def format_help(self, ctx: typer.Context, formatter: Any) -> None:
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False


app = typer.Typer(
    name="ddpcli",
    cls=LazyGroup,
    help="Plan, launch and compare PyTorch DistributedDataParallel runs: what your batch size, learning rate "
    "and epoch become on N GPUs, proven with real torchrun jobs.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=MARKUP_MODE,
    pretty_exceptions_show_locals=False,
)


def _version(value: bool) -> None:
    if value:
        print(f"ddpcli {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    """Plan, launch and compare DDP runs."""


def main(argv: Sequence[str] | None = None) -> None:
    from ddpcli.launch.prestart import prestart  # `launch`: torchrun's interpreter starts while the command loads

    prestart(sys.argv[1:] if argv is None else argv)
    app(args=list(argv) if argv is not None else None, prog_name="ddpcli")
