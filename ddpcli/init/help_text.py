"""A script's options: from the parser itself (what the `--help` bootstrap dumps for argparse, HfArgumentParser,
jsonargparse, click and typer) or, for any other parser, from the `--help` text.

The parser's own description is exact (a default of None is None, not the text "None"; a required option or a
positional says so); the text is the fallback for parsers the bootstrap does not know (Fire, docopt, ...).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, replace

_BOX = str.maketrans({char: " " for char in "│┃╭╮╰╯─━┌┐└┘|"})
# Options are indented (argparse, click and typer all indent them); a description wrapped so that a quoted command
# line starts a line with a flag at column 0 is not an option.
_OPTION_START = re.compile(r"^(\s{1,12})(-{1,2}[A-Za-z0-9])")
_FLAG = re.compile(r"(?<![\w-])(-{1,2}[A-Za-z0-9][\w.-]*)")
# argparse `(default: X)`, click and typer `[default: X]`, jsonargparse `(type: T, default: X)`, Fire `Default: X`
_DEFAULT = re.compile(r"\(default:\s*(.*?)\)|\[default:\s*(.*?)\]|[(,]\s*default:\s*([^()]*?)\)|^Default:\s*(\S+)")


@dataclass(frozen=True)
class HelpOption:
    """One option or positional: its flags (none for a positional), whether it takes a value, its default as
    text (None: none shown), and whether the script refuses to start without it."""

    flags: tuple[str, ...]
    takes_value: bool
    default: str | None
    help: str
    required: bool = False
    name: str = ""  # a positional's name (its metavar or dest)
    nargs: str = ""  # a positional's count: "" one, "+" one or more, "?" / "*" optional, "N"
    given: bool = False  # the default is the value given after `--` to ddpcli init

    @property
    def positional(self) -> bool:
        return not self.flags


def parse_help(text: str) -> list[HelpOption]:
    """The options of an argparse, click or typer (plain or Rich-boxed) help text, in order.

    An option starts on a line whose first word is a flag; the lines indented deeper than it are its help. The
    default is what `(default: X)` (argparse) or `[default: X]` (click, typer) says, the last one in its help.
    """
    options: list[HelpOption] = []
    current: tuple[int, str, list[str]] | None = None
    for raw_line in text.translate(_BOX).splitlines():
        line = raw_line.rstrip()
        start = _OPTION_START.match(line)
        if start:
            if current:
                options.append(_option(current[1], current[2]))
            spec, _, rest = line.strip().partition("  ")
            current = (len(start[1]), spec, [rest.strip()])
        elif current and line.strip() and len(line) - len(line.lstrip()) > current[0]:
            current[2].append(line.strip())
        elif current:
            options.append(_option(current[1], current[2]))
            current = None
    if current:
        options.append(_option(current[1], current[2]))
    return options


def _option(spec: str, help_lines: list[str]) -> HelpOption:
    flags = tuple(_FLAG.findall(spec))
    words = [word for word in re.split(r"[\s,/]+", spec) if word and not _FLAG.fullmatch(word)]
    help_text = " ".join(part for part in help_lines if part)
    if not words and help_text:  # typer's Rich table puts the type after the flag's column gap
        first = help_text.split()[0]
        words = [first] if re.fullmatch(r"[A-Z][A-Z_]+|<\w+>", first) else []
    defaults = [next(part for part in groups if part) for groups in _DEFAULT.findall(help_text) if any(groups)]
    default = defaults[-1].strip() if defaults else None
    required = "[required]" in help_text
    return HelpOption(flags, bool(words), None if default in (None, "", "None") else default, help_text, required)


def options_from_dump(text: str) -> list[HelpOption] | None:
    """The options the bootstrap wrote for the parser that printed the help (the last one dumped), or None."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return None
    try:
        entries = json.loads(lines[-1])
    except ValueError:
        return None
    if not isinstance(entries, list):
        return None
    return [_dumped(entry) for entry in entries if isinstance(entry, dict) and "subcommands" not in entry]


def subcommands_from_dump(text: str) -> tuple[str, ...]:
    """The subcommands of the parser that printed the help (argparse subparsers, a click group), or ()."""
    lines = [line for line in text.splitlines() if line.strip()]
    try:
        entries = json.loads(lines[-1]) if lines else []
    except ValueError:
        return ()
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, dict) and isinstance(entry.get("subcommands"), list):
            return tuple(str(name) for name in entry["subcommands"])
    return ()


def _dumped(entry: dict[str, object]) -> HelpOption:
    flags = tuple(str(flag) for flag in entry.get("flags") or ())  # type: ignore[union-attr]
    return HelpOption(
        flags=flags,
        takes_value=bool(entry.get("takes_value")),
        default=default_text(entry.get("default")),
        help=str(entry.get("help") or ""),
        required=bool(entry.get("required")),
        name=str(entry.get("name") or ""),
        nargs=str(entry.get("nargs") or ""),
    )


def default_text(value: object) -> str | None:
    """A default as the help would print it: None stays None; inf and nan stay visible (they are invalid)."""
    if value is None:
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    return str(value)


def normalise(flag: str) -> str:
    """`--Per-Device-Batch-Size` -> `per_device_batch_size`; `--trainer.max-steps` -> `trainer_max_steps`."""
    return flag.lstrip("-").lower().replace("-", "_").replace(".", "_")


def spellings(flag: str) -> set[str]:
    """The names a flag is matched by: all of it, and its last dotted part (`--data.batch_size` -> batch_size)."""
    stripped = flag.lstrip("-")
    return {normalise(stripped), normalise(stripped.rsplit(".", 1)[-1])}


def with_default(option: HelpOption, value: str) -> HelpOption:
    """The option with the value given after `--` as its default (the baseline's value when wired)."""
    return replace(option, default=value, given=True)
