"""Which modules of a script's own folder an import loads, and their files: what `python SCRIPT` finds first on
sys.path (its folder), found by reading, never by importing. Shared by init (options read from the script's own
modules) and port (the program it ports with the script)."""

from __future__ import annotations

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
