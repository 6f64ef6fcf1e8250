"""Which modules of a script's own folder an import loads, and their files: what `python SCRIPT` finds first on
sys.path (its folder), found by reading, never by importing. Shared by init (options read from the script's own
modules) and port (the program it ports with the script)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import libcst as cst

from ddpcli.script.reader import Reader, dotted


def module_file(root: Path, name: str) -> Path | None:
    """The file of module `name` under `root`: `name.py`, or the package's `__init__.py`."""
    base = root.joinpath(*name.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def own_module(root: Path, name: str) -> bool:
    """Whether top-level module `name` is of the folder `root`: a module, a package, or a folder without
    `__init__.py` holding Python files (a namespace package, which `python SCRIPT` imports from its folder too)."""
    folder = root / name
    return module_file(root, name) is not None or (folder.is_dir() and any(folder.glob("*.py")))


def imported_names(reader: Reader, package: str = "") -> Iterator[str]:
    """The dotted names of modules the file's imports may load: `import a.b` (a, a.b), `from a import b` (a, and
    a.b: b may be a submodule), `from .b import c` in package p (p.b, p.b.c). Relative imports outside a package
    load nothing (Python refuses them)."""
    for node in reader.order:
        if isinstance(node, cst.Import):
            for alias in node.names:
                yield from _with_parents(dotted(alias.name))
        elif isinstance(node, cst.ImportFrom):
            base = absolute(node, package)
            if base is None:
                continue
            if base:
                yield from _with_parents(base)
            if not isinstance(node.names, cst.ImportStar):
                yield from (f"{base}.{dotted(alias.name)}" if base else dotted(alias.name) for alias in node.names)


def _with_parents(name: str) -> Iterator[str]:
    parts = name.split(".")
    yield from (".".join(parts[: i + 1]) for i in range(len(parts)))


def absolute(node: cst.ImportFrom, package: str) -> str | None:
    """The module an ImportFrom names, made absolute (None for a relative import outside a package, or past its
    top)."""
    module = dotted(node.module) if node.module is not None else ""
    level = len(node.relative)
    if not level:
        return module
    if not package:
        return None
    parts = package.split(".")
    if level - 1 > len(parts):
        return None
    base = parts[: len(parts) - (level - 1)]
    return ".".join([*base, module] if module else base)


def unread_imports(reader: Reader, root: Path) -> list[str]:
    """The top-level modules the file imports that are neither in its folder nor found on this interpreter's path
    outside the user's folders: code of the user's elsewhere (a repository installed with `pip install -e`, a path
    the script inserts in sys.path), which reading the program from the script's folder does not reach. Found by
    asking the import system where each would load from (importlib.util.find_spec of the top name, no import)."""
    import importlib.util
    import sys

    installed = tuple(str(Path(p).resolve()) for p in {sys.prefix, sys.base_prefix, sys.exec_prefix})
    unread = []
    for name in dict.fromkeys(name.split(".")[0] for name in imported_names(reader)):
        if name in sys.builtin_module_names or name in sys.stdlib_module_names or own_module(root, name):
            continue
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        origin = getattr(spec, "origin", None) or next(
            iter(getattr(spec, "submodule_search_locations", None) or []), None
        )
        if spec is None or (origin is not None and not str(Path(origin).resolve()).startswith(installed)):
            unread.append(name)
    return unread


PATH_ADDS = ("sys.path.append", "sys.path.insert")
PATH_FUNCTIONS = ("os.path.dirname", "os.path.abspath", "os.path.realpath", "os.path.normpath", "os.path.join",
                  "str", "pathlib.Path", "os.fspath")  # fmt: skip


def sys_path_folders(reader: Reader, script: Path) -> list[Path]:
    """The folders the script puts on sys.path, where their paths are written out (`sys.path.append("..")`,
    `sys.path.insert(0, os.path.join(os.path.dirname(__file__), "../.."))`, `str(Path(__file__).parent.parent)`):
    where `python SCRIPT` finds more of its program (davda54/sam's example/train.py imports sam.py from the folder
    above it). A relative path is taken from the script's folder, where its users run it."""
    found: list[Path] = []
    for call in reader.calls:
        if reader.resolve(call) not in PATH_ADDS or not call.args:
            continue
        value = _path_value(reader, call.args[-1].value, script, 0)
        if value is not None:
            folder = (script.parent / value) if not Path(value).is_absolute() else Path(value)
            if folder.is_dir() and folder.resolve() != script.parent.resolve():
                found.append(folder)
    return found


def _path_value(reader: Reader, node: cst.CSTNode, script: Path, depth: int) -> str | None:
    """The path `node` evaluates to, read without running anything; None where the script does not write it out."""
    if depth > 8:
        return None
    if isinstance(node, cst.SimpleString):
        text = node.evaluated_value
        return text if isinstance(text, str) else None
    if isinstance(node, cst.Name) and node.value == "__file__":
        return str(script.resolve())
    if isinstance(node, cst.Name) and node in reader.parents:
        values = reader.values_of(node)
        return _path_value(reader, values[0], script, depth + 1) if len(values) == 1 else None
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Add | cst.Divide):
        left = _path_value(reader, node.left, script, depth + 1)
        right = _path_value(reader, node.right, script, depth + 1)
        if left is None or right is None:
            return None
        return left + right if isinstance(node.operator, cst.Add) else os.path.join(left, right)
    if isinstance(node, cst.Attribute) and node.attr.value == "parent":
        inner = _path_value(reader, node.value, script, depth + 1)
        return os.path.dirname(os.path.normpath(inner)) if inner is not None else None
    if not isinstance(node, cst.Call):
        return None
    if isinstance(node.func, cst.Attribute) and node.func.attr.value in ("resolve", "absolute") and not node.args:
        inner = _path_value(reader, node.func.value, script, depth + 1)
        return os.path.abspath(os.path.join(script.parent, inner)) if inner is not None else None
    function = reader.resolve(node)
    if function not in PATH_FUNCTIONS and function.rsplit(".", 1)[-1] != "Path":
        return None
    args = [_path_value(reader, arg.value, script, depth + 1) for arg in node.args]
    if not args or any(arg is None for arg in args):
        return None
    strings = [arg for arg in args if arg is not None]
    if function == "os.path.dirname":
        return os.path.dirname(strings[0])
    if function in ("os.path.abspath", "os.path.realpath"):
        return os.path.abspath(os.path.join(script.parent, strings[0]))
    if function == "os.path.normpath":
        return os.path.normpath(strings[0])
    return os.path.join(*strings)  # join, Path(a, b), str(...), fspath(...)
