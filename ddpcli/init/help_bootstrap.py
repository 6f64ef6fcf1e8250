"""The program `ddpcli init` runs as `python -c BOOTSTRAP (script PATH | module NAME) [PREFIX...]`: the script
with `--help` (after PREFIX, such as LightningCLI's `fit` or a subcommand), as `python SCRIPT --help` would run it.

It changes no parser and no argument: it only wraps argparse's `format_help` and click's `Context.get_help` so
that, when the script's own parser prints its help, the parser's options (flags, whether each takes a value, its
default, whether it is required, positionals, the names of its subcommands) are also written as one JSON line to
the file named by DDPCLI_HELP_DUMP. argparse's subclasses (HfArgumentParser, jsonargparse) and typer (built on
click) go through the same two functions. An earlier bootstrap added `help=` to every `add_argument` call, which
broke parsers whose own actions take no `help` (jsonargparse's `_ActionPrintConfig`): nothing is injected any more.
"""

BOOTSTRAP = r"""
import json, os, runpy, sys

def _plain(value):
    if value is None or isinstance(value, (bool, int, float, str)):
        return None if isinstance(value, str) and value == "==SUPPRESS==" else value
    text = str(value)
    return None if "UNSET" in text or "Sentinel" in text else text

def _write(entries):
    path = os.environ.get("DDPCLI_HELP_DUMP")
    if path:
        with open(path, "a", encoding="utf-8") as dump:
            dump.write(json.dumps(entries) + "\n")

def _argparse_entries(parser):
    import argparse
    entries = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            entries.append({"subcommands": [str(name) for name in action.choices],
                            "required": bool(action.required)})
            continue
        if isinstance(action, (argparse._HelpAction, argparse._VersionAction)):
            continue
        if action.help == argparse.SUPPRESS:
            continue
        nargs = action.nargs
        entries.append({"flags": list(action.option_strings), "takes_value": nargs != 0,
                        "default": _plain(action.default), "required": bool(action.required),
                        "help": str(action.help or ""), "name": str(action.metavar or action.dest),
                        "nargs": "" if nargs is None else str(nargs)})
    return entries

def _click_entries(context):
    import click
    entries = []
    if isinstance(context.command, click.Group):
        entries.append({"subcommands": [str(name) for name in context.command.list_commands(context)],
                        "required": not context.command.invoke_without_command})
    for param in context.command.get_params(context):
        if isinstance(param, click.Option):
            if "--help" in param.opts or getattr(param, "hidden", False):
                continue
            entries.append({"flags": list(param.opts) + list(param.secondary_opts),
                            "takes_value": not param.is_flag and not param.count,
                            "default": None if callable(param.default) else _plain(param.default),
                            "required": bool(param.required), "help": str(param.help or ""), "name": param.name})
        elif isinstance(param, click.Argument):
            many = "+" if param.required else "*"
            nargs = "" if param.nargs == 1 else many if param.nargs < 0 else str(param.nargs)
            entries.append({"flags": [], "takes_value": True, "default": _plain(param.default),
                            "required": bool(param.required), "help": "", "name": param.human_readable_name,
                            "nargs": nargs})
    return entries

import argparse
_format_help = argparse.ArgumentParser.format_help
def format_help(self, *args, **kwargs):
    try:
        _write(_argparse_entries(self))
    except Exception:
        pass
    return _format_help(self, *args, **kwargs)
argparse.ArgumentParser.format_help = format_help
try:
    import click
except ImportError:
    pass
else:
    _get_help = click.Context.get_help
    def get_help(self, *args, **kwargs):
        try:
            _write(_click_entries(self))
        except Exception:
            pass
        return _get_help(self, *args, **kwargs)
    click.Context.get_help = get_help

kind, target, prefix = sys.argv[1], sys.argv[2], sys.argv[3:]
if kind == "script":
    origin = os.path.abspath(target)
    sys.argv = [origin, *prefix, "--help"]
    sys.path[0] = os.path.dirname(origin)
    runpy.run_path(origin, run_name="__main__")
else:
    sys.argv = [target, *prefix, "--help"]
    sys.path[0] = os.getcwd()
    runpy.run_module(target, run_name="__main__", alter_sys=True)
"""
