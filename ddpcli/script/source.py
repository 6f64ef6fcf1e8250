"""A script's source as Python reads it, for init and port alike: the bytes decoded by their PEP 263 coding cookie
or UTF-8 byte order mark (UTF-8 otherwise), the encoding kept so that a copy is written back in it, and a syntax
error said with Python's own line and message (a NUL byte with its line: Python 3.11's parser gives none)."""

from __future__ import annotations

import ast
import io
import tokenize
from dataclasses import dataclass
from pathlib import Path

from ddpcli.errors import UserError


@dataclass(frozen=True)
class Source:
    name: str  # how messages name it: the path as given
    data: bytes
    text: str
    encoding: str  # Python's name of it: "utf-8", "iso-8859-1", "utf-8-sig" (a byte order mark, kept on write)

    def encode(self, text: str) -> bytes:
        """`text` (a copy of this script) in the script's own encoding."""
        return text.encode(self.encoding)


class NotPython(UserError):
    """The bytes do not parse as Python: `name:line: not valid Python (message)`."""

    def __init__(self, name: str, line: int, message: str) -> None:
        self.name, self.line, self.message = name, line, message
        super().__init__(f"{name}:{line}: not valid Python ({message})")


def decode(data: bytes, name: str) -> Source:
    """The text of `data` as the interpreter decodes it; a UserError naming why it cannot be."""
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        text = data.decode(encoding)
    except (SyntaxError, UnicodeDecodeError, LookupError) as error:
        message = error.msg if isinstance(error, SyntaxError) else str(error)
        if isinstance(error, SyntaxError) and "encoding declaration" in message:  # no cookie, not UTF-8 either
            message = _utf8_error(data) or message
        raise UserError(f"{name}: cannot read it: {message}") from None
    return Source(name, data, text, encoding)


def _utf8_error(data: bytes) -> str | None:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as error:
        return str(error)
    return None


def read(path: Path) -> Source:
    try:
        data = path.read_bytes()
    except OSError as error:
        raise UserError(f"{path}: cannot read it: {error.strerror or error}") from None
    return decode(data, str(path))


def parse_ast(source: Source) -> ast.Module:
    """The `ast` tree Python builds from the script's bytes, or NotPython with Python's line and message."""
    if b"\0" in source.data:
        line = source.data[: source.data.index(b"\0")].count(b"\n") + 1
        raise NotPython(source.name, line, "source code cannot contain null bytes")
    try:
        return ast.parse(source.data, filename=source.name)
    except SyntaxError as error:
        raise NotPython(source.name, error.lineno or 1, error.msg) from None
    except ValueError as error:
        raise NotPython(source.name, 1, str(error)) from None
