"""The experiment file's text: a header that says what was wired and what was not, then [defaults], [baseline]
and the runs. Strings are always escaped; a comment never spans lines (a control character is shown escaped)."""

from __future__ import annotations

import math

from ddpcli.errors import UserError


def header(target: str, source_line: str, wired: list[str], notes: list[str], warnings: list[str]) -> list[str]:
    lines = [
        f"# ddpcli experiment file for {comment(target)}, written by `ddpcli init`{comment(source_line)}.",
        "# `ddpcli plan` shows what each run gets, `ddpcli launch` runs them, `ddpcli compare` lines them up.",
        '# Every field is explained by `ddpcli init --help` and the README\'s "The experiment file".',
    ]
    if wired:
        lines.append("# Flags wired to {placeholders} or set for every run (the keys of `ddpcli plan --json`):")
        lines += [f"#   {comment(item)}" for item in wired]
    if notes:
        lines.append("# Decisions:")
        lines += [f"#   - {comment(note)}" for note in notes]
    if warnings:
        lines.append("# Not wired, or not possible (where a flag is not wired, the runs keep the script's own value):")
        lines += [f"#   - {comment(warning)}" for warning in warnings]
    return lines


def args_lines(prefix: list[str], fixed: list[str], wired: list[tuple[tuple[str, ...], str]]) -> list[str]:
    if not prefix and not fixed and not wired:
        return ["args = []  # no flag found to wire; add the script's own arguments here"]
    lines = ["args = ["]
    if prefix:
        lines.append(f"    {', '.join(toml_string(token) for token in prefix)},  # the subcommand")
    if fixed:
        lines.append(f"    {', '.join(toml_string(token) for token in fixed)},  # given after -- to ddpcli init")
    lines += [f"    {', '.join(toml_string(token) for token in tokens)},  # {comment(why)}" for tokens, why in wired]
    return [*lines, "]"]


def env_line(env: dict[str, str]) -> list[str]:
    if not env:
        return []
    pairs = ", ".join(f"{toml_string(key)} = {toml_string(value)}" for key, value in env.items())
    return [f"env = {{ {pairs} }}"]


def assignment(key: str, value: object, why: str) -> str:
    line = f"{key} = {toml_value(value)}"
    return f"{line:<29} # {comment(why)}" if why else line


def toml_value(value: object) -> str:
    """A TOML literal for the values an experiment file holds; strings are always escaped."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{value!r} has no place in an experiment file")
        return repr(value)
    if isinstance(value, str):
        return toml_string(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(item) for item in value) + "]"
    raise TypeError(f"no TOML form for {type(value).__name__}")


_TOML_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


def toml_string(text: str) -> str:
    """A TOML basic string: quotes, backslashes and control characters escaped, other unicode kept as is.

    A lone surrogate (an undecodable byte in a path) cannot be written in UTF-8 TOML: that is a UserError.
    """
    out = []
    for char in text:
        if char in _TOML_ESCAPES:
            out.append(_TOML_ESCAPES[char])
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\u{ord(char):04X}")
        elif 0xD800 <= ord(char) <= 0xDFFF:
            raise UserError(f"{text!r} is not valid unicode, so it cannot be written into a TOML file")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def comment(text: str) -> str:
    """One line of comment text: control characters (a newline would end the comment) shown escaped."""
    return "".join(
        char if ord(char) >= 0x20 and ord(char) != 0x7F and not 0xD800 <= ord(char) <= 0xDFFF else f"\\x{ord(char):02x}"
        for char in text
    )
