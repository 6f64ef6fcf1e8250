"""The script's program: the modules it imports from its own folder (what `python SCRIPT` finds there first, its
`utils.py`, `engine.py`, `pkg/trainer.py`), read through the one reader and ported with it. A module a rule
changes gets a ported copy beside it (`utils_ddp.py`, `pkg/trainer_ddp.py`), and every file of the program that
imports a copied module imports its copy instead; the user's own files are never written. Installed packages are
not the program: their loops are the library's (the refusals name them).

What is read across files: which modules make up the program, whether any of them trains a model (the loaders of
every file are then data the wrap averages), and which imports to point at the copies. Each rule still reads one
file at a time: a loader built in the script and iterated in `engine.py` is judged in the script by the flow the
script shows (ddpcli.script.flow), by its name where the flow leaves the file.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import libcst as cst

from ddpcli.errors import UserError
from ddpcli.port.facts import Facts
from ddpcli.port.records import Change, NotPorted, PortResult
from ddpcli.port.rules.rank0 import writing_functions
from ddpcli.port.rules.wrap import optimizer_builders
from ddpcli.script.flow import (
    Fed,
    Feeding,
    attributes_trained,
    feeding_parameters,
    handing_parameters,
    imported_and_trained,
    kept_loaders,
    loader_functions,
    loaders_trained_from,
    merged_feeds,
    parameter_methods,
)
from ddpcli.script.layers import Layers, classes_of
from ddpcli.script.modules import absolute, imported_names, module_file, sys_path_folders
from ddpcli.script.reader import dotted
from ddpcli.script.source import Source, parse_ast, read

SUFFIX = "_ddp"


@dataclass
class Module:
    """One module of the program: its dotted name as imported, its file, and (once ported) its port."""

    name: str
    path: Path
    package: str  # the package its relative imports start from ("" at the top level)
    imports: set[str] = field(default_factory=set)  # the program's modules it imports
    source: Source | None = None  # its text, read once as Python reads it (None: Python could not read it either)
    facts: Facts | None = None  # its tree, read once: the program's questions and its port both use it
    result: PortResult | None = None

    @property
    def output(self) -> Path:
        return self.path.with_name(f"{self.path.stem}{SUFFIX}.py")

    @property
    def ported_name(self) -> str:
        """`utils` -> `utils_ddp`, `pkg.trainer` -> `pkg.trainer_ddp`; a package's `__init__.py` -> a module inside
        the package, `pkg.__init___ddp`, whose relative imports resolve as the __init__'s (one `__package__`)."""
        if self.is_package:
            return f"{self.name}.__init__{SUFFIX}"
        head, _, last = self.name.rpartition(".")
        return f"{head}.{last}{SUFFIX}" if head else f"{last}{SUFFIX}"

    @property
    def is_package(self) -> bool:
        return self.path.name == "__init__.py"


def modules_of(script: Path) -> dict[str, Module]:
    """Every module of the script's folder the script imports, and those they import, by dotted name (parse
    errors and unreadable files are left out: Python would fail on them, or they are not imported)."""
    roots = [script.parent]
    found: dict[str, Module] = {}
    queue: list[tuple[Path, str, set[str]]] = []
    top = Module("__main__", script, "")
    queue.append((script, "", top.imports))
    found["__main__"] = top
    while queue:
        path, package, imports = queue.pop()
        module = next(m for m in found.values() if m.path == path)
        try:
            module.source = read(path)
            parse_ast(module.source)
            module.facts = Facts.read(module.source.text)
        except (UserError, cst.ParserSyntaxError, RecursionError):
            module.source = None
            continue
        if module is top:  # the folders the script puts on sys.path hold its program too
            roots += sys_path_folders(module.facts, script)
        for name in imported_names(module.facts, package):
            file = next((f for r in roots if (f := module_file(r, name))), None) or _in_the_scripts_package(
                script, name
            )
            if file is None or file == script:
                continue
            imports.add(name)
            if name not in found:
                own = name if file.name == "__init__.py" else name.rpartition(".")[0]
                found[name] = Module(name, file, own)
                queue.append((file, own, found[name].imports))
    return found


def _in_the_scripts_package(script: Path, name: str) -> Path | None:
    """`from TCN.mnist_pixel.utils import data_generator` in TCN/mnist_pixel/pmnist_test.py (after the script puts the
    folder above TCN on sys.path): a module of the package the script itself is in, named from the package's top;
    not a module of any other folder."""
    top, here = name.split(".", 1)[0], script.resolve().parent
    for folder in (here, *here.parents):
        if folder.name == top and (folder / "__init__.py").is_file():
            file = module_file(folder.parent, name)
            if file is None or folder not in file.parents:
                return None
            return script.parent / os.path.relpath(file, here)  # spelled as the script's path is
    return None


@dataclass
class ProgramFacts:
    """What the port asks of the program as a whole, read from every file of it."""

    steps: bool = False  # a module besides the script steps an optimizer
    optimizers: set[str] = field(default_factory=set)  # the files that build an optimizer (one may wrap its model)
    loader_functions: dict[str, frozenset[str]] = field(default_factory=dict)  # file -> its functions returning a
    # DataLoader they build (ddpcli.script.flow.loader_functions)
    feeding: dict[str, Feeding] = field(default_factory=dict)  # file -> {function name: (its parameters, those
    # reaching a backward, with the keys of each that do)} (ddpcli.script.flow.feeding_parameters)
    classes: dict[str, Layers] = field(default_factory=dict)  # class -> what it builds and may not reach, of every
    # file (ddpcli.script.layers; a name two files define: both classes' layers)

    def trains_elsewhere(self, name: str, script_wraps: bool = False) -> bool:
        """Whether a file of the program besides `name` may wrap a model, whose data `name`'s loaders may be: the
        script where its port wrapped one, a module where it builds an optimizer. A file's own optimizer does not
        count: where its own wrap found no model, sharding its data would train a model a rank."""
        return script_wraps or bool(self.optimizers - {name, "__main__"})

    def loaders_elsewhere(self, name: str) -> frozenset[str]:
        """The functions of the program's other files that return a DataLoader: what `name` may get its loader from."""
        return frozenset().union(*(made for other, made in self.loader_functions.items() if other != name))

    def feeding_elsewhere(self, name: str) -> Feeding:
        """The functions of the program's other files whose parameters feed a loss: what `name` may hand data to."""
        merged: Feeding = {}
        for other, functions in self.feeding.items():
            if other != name:
                merged.update(functions)
        return merged


def read_program(modules: dict[str, Module]) -> ProgramFacts:
    found = ProgramFacts()
    for name, module in modules.items():
        facts = module.facts
        if facts is None:
            continue
        if facts.optimizer_calls():
            found.optimizers.add(name)
        found.steps = found.steps or (name != "__main__" and bool(facts.step_calls()))
        found.feeding[name] = feeding_parameters(facts, facts.backward_sources())
        found.loader_functions[name] = loader_functions(facts)
        for cls, layers in classes_of(facts).items():
            known = found.classes.get(cls, Layers())
            unreached = sorted({*known.unreached, *layers.unreached})
            found.classes[cls] = Layers(unreached, [*known.classes, *layers.classes])
    _hand_on(modules, found)
    yielding = frozenset().union(*(parameter_methods(m.facts) for m in modules.values() if m.facts is not None))
    held = {name: loader_functions(m.facts, into_containers=True) for name, m in modules.items() if m.facts}
    builders = {name: optimizer_builders(m.facts) for name, m in modules.items() if m.facts}
    optimizer_classes = {name: m.facts.own_optimizer_classes() for name, m in modules.items() if m.facts}
    factories = {name: m.facts.optimizer_factories() for name, m in modules.items() if m.facts}
    by_name = {name: m.facts.builders_by_name() for name, m in modules.items() if m.facts}
    stepping = {name: m.facts.stepping_methods() for name, m in modules.items() if m.facts}
    writing = {name: writing_functions(m.facts) for name, m in modules.items() if m.facts}
    held_elsewhere = {name: frozenset().union(*(f for n, f in held.items() if n != name)) for name in held}
    attributes = {name: attributes_trained(m.facts, found.feeding_elsewhere(name)) for name, m in modules.items()
                  if m.facts}  # fmt: skip
    trained: dict[str, dict[str, set[str | int | None]]] = {}  # file -> {function of another file: keys}
    names_trained: dict[str, set[str]] = {}  # file -> its top-level names another file imports and trains on
    for name, module in modules.items():
        if module.facts is not None:
            feeding = found.feeding_elsewhere(name)
            trained[name] = loaders_trained_from(module.facts, held_elsewhere[name], feeding)
            for node, imported in imported_and_trained(module.facts, feeding):
                source = absolute(node, module.package)
                if source in modules and source != name:
                    names_trained.setdefault(source, set()).add(imported)
                    module.facts.trains_imported_loaders = True
    for name, module in modules.items():
        if module.facts is not None:
            module.facts.program_classes = found.classes
            module.facts.parameter_methods = yielding
            module.facts.loaders_held_elsewhere = held_elsewhere[name]
            module.facts.builders_elsewhere = {
                k: v for n, made in builders.items() if n != name for k, v in made.items()
            }
            module.facts.attributes_trained_elsewhere = frozenset().union(
                *(made for n, made in attributes.items() if n != name)
            )
            kept_elsewhere = set().union(*(kept_loaders(m.facts) for n, m in modules.items() if n != name and m.facts))
            module.facts.trains_imported_loaders |= bool(attributes.get(name, set()) & kept_elsewhere)
            module.facts.optimizers_elsewhere = frozenset().union(
                *(classes for n, classes in optimizer_classes.items() if n != name)
            )
            module.facts.optimizer_factories_elsewhere = frozenset().union(
                *(made for n, made in factories.items() if n != name)
            )
            module.facts.builders_by_name_elsewhere = {
                k: v for n, made in by_name.items() if n != name for k, v in made.items()
            }
            module.facts.writes_elsewhere = frozenset().union(*(made for n, made in writing.items() if n != name))
            module.facts.stepping_elsewhere = {
                k: v for n, made in stepping.items() if n != name for k, v in made.items()
            }
            keys: dict[str, set[str | int | None]] = {}
            for other, functions in trained.items():
                for function, where in functions.items() if other != name else ():
                    keys.setdefault(function, set()).update(where)
            module.facts.loaders_trained_elsewhere = keys
            module.facts.names_trained_elsewhere = frozenset(names_trained.get(name, ()))
    return found


def _hand_on(modules: dict[str, Module], found: ProgramFacts) -> None:
    """A function that hands its parameter on to another file's feeding parameter feeds too: the script's
    `trainer.train(loader)`, trainer.py's `train_epoch(model, loader, ...)`, engine.py's backward. To a fixed point
    (each pass adds parameters, finitely many)."""
    while True:
        grown = False
        for name, module in modules.items():
            if module.facts is None:
                continue
            mine = found.feeding[name]
            for function, fed in handing_parameters(module.facts, found.feeding_elsewhere(name)).items():
                known = mine.get(function, Fed(fed.params, {}))
                merged = merged_feeds(known.feeds, fed.feeds)
                if merged != known.feeds:
                    mine[function] = known._replace(feeds=merged)
                    grown = True
        if not grown:
            return


def copied(modules: dict[str, Module]) -> set[str]:
    """The modules that get a ported copy: those a rule changed, and those importing one (their import must name
    the copy), to a fixed point; never the script (written as OUT). A package's `__init__.py` a rule changed is
    copied inside the package (Module.ported_name): what the program imports from the package that the __init__
    defines comes from the copy; one that only imports a copied module is not (what it re-exports from it is
    imported from the copy: reexports)."""
    copyable = {name for name, module in modules.items() if module.result is not None and name != "__main__"}
    changed = {name for name in copyable if modules[name].result.changes}  # type: ignore[union-attr]
    while True:
        more = {name for name in copyable - changed if modules[name].imports & changed and not modules[name].is_package}
        if not more:
            return changed
        changed |= more


def reexports(modules: dict[str, Module]) -> dict[str, str]:
    """`pkg.Name` -> `pkg.mod` for each name a package's `__init__.py` imports from a module of the program
    (`from .logger import Logger`, or `from .logger import *` and logger defines it at its top level): where the
    script writes `from pkg import Name`, the module that defines Name (bearpaw/pytorch-classification's utils)."""
    found: dict[str, str] = {}
    for package in modules.values():
        if package.path.name != "__init__.py" or package.facts is None:
            continue
        for node in package.facts.module.body:
            for statement in node.body if isinstance(node, cst.SimpleStatementLine) else ():
                base = absolute(statement, package.name) if isinstance(statement, cst.ImportFrom) else None
                if base is None or base not in modules or modules[base].facts is None:
                    continue
                names = statement.names  # type: ignore[union-attr]
                defined = _top_level_names(modules[base].facts) if isinstance(names, cst.ImportStar) else {
                    (alias.asname.name.value if alias.asname else dotted(alias.name))  # type: ignore[union-attr]
                    for alias in names}  # fmt: skip
                found.update({f"{package.name}.{name}": base for name in defined if not name.startswith("_")})
    return found


def _attributes(node: cst.CSTNode) -> Iterator[cst.Attribute]:
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, cst.Import | cst.ImportFrom):
            continue  # `import pkg.quiet` names a module; it reads nothing off pkg
        if isinstance(current, cst.Attribute):
            yield current
        stack.extend(current.children)


def package_names(modules: dict[str, Module]) -> dict[str, set[str]]:
    """For each package of the program, the names its __init__.py binds at its top level: what it defines, assigns
    and imports (`from .ssim import SSIM`); a star import binds names this reading does not list."""
    found = {}
    for name, module in modules.items():
        if module.is_package and module.facts is not None:
            names = _top_level_names(module.facts)
            for statement in module.facts.module.body:
                for small in statement.body if isinstance(statement, cst.SimpleStatementLine) else ():
                    if isinstance(small, cst.Import):
                        names |= {dotted(a.asname.name) if a.asname else dotted(a.name).split(".")[0]
                                  for a in small.names}  # fmt: skip
                    elif isinstance(small, cst.ImportFrom) and not isinstance(small.names, cst.ImportStar):
                        names |= {dotted(a.asname.name) if a.asname else dotted(a.name) for a in small.names}
            found[name] = names
    return found


def _top_level_names(facts: Facts) -> set[str]:
    names = set()
    for statement in facts.module.body:
        if isinstance(statement, cst.FunctionDef | cst.ClassDef):
            names.add(statement.name.value)
        for small in getattr(statement, "body", ()) if isinstance(statement, cst.SimpleStatementLine) else ():
            if isinstance(small, cst.Assign):
                names |= {target.target.value for target in small.targets if isinstance(target.target, cst.Name)}
    return names


class ImportsOfCopies(cst.CSTTransformer):
    """`import utils` -> `import utils_ddp as utils`, `from utils import f` -> `from utils_ddp import f`,
    `from pkg import trainer` -> `from pkg import trainer_ddp as trainer`, relative imports alike: each name the
    file binds stays the one it bound, bound to the copy."""

    def __init__(
        self,
        copies: dict[str, str],
        package: str,
        reexported: dict[str, str] | None = None,
        submodules: frozenset[str] = frozenset(),
        defined: dict[str, set[str]] | None = None,
    ) -> None:
        super().__init__()
        self.copies = copies  # dotted module -> dotted copy
        self.submodules = submodules  # every module of the program, by dotted name
        self.defined = defined or {}  # package -> the names its __init__ binds at its top level (copied packages)
        self.read_off: dict[str, set[str]] = {}  # `pkg` -> the X of each `pkg.X` the file reads (visit_Module)
        self.package = package
        self.reexported = reexported or {}  # `pkg.Name` -> the module of the program defining it (reexports)
        self.changed: list[tuple[str, str]] = []  # (the module, what changed), in the order met
        self.missed: list[tuple[str, str]] = []

    def visit_Module(self, node: cst.Module) -> bool:
        """What the file reads off each copied package it imports whole (`pytorch_ssim.ssim(...)`): `import pkg`
        becomes `import pkg.__init___ddp as pkg` only where the copy binds every such name."""
        packages = {name for name, copy in self.copies.items() if copy.startswith(f"{name}.")}
        for inner in _attributes(node):
            if isinstance(inner.value, cst.Name) and inner.value.value in packages:
                self.read_off.setdefault(inner.value.value, set()).add(inner.attr.value)
        return True

    def leave_Import(self, original_node: cst.Import, updated_node: cst.Import) -> cst.Import:
        names = []
        for alias in updated_node.names:
            name = dotted(alias.name)
            if name in self.copies and self.copies[name].startswith(f"{name}."):  # a package's __init__ copied
                read = self.read_off.get(name, set())
                if alias.asname is None and "." not in name and read <= self.defined.get(name, set()):
                    self.changed.append((name, f"import {name} -> {self.copies[name]}"))
                    alias = alias.with_changes(name=_dotted_node(self.copies[name]), asname=cst.AsName(cst.Name(name)))
                else:
                    self.missed.append((name, f"import {name}: the program reads {name}.<name> where the copy "
                                        f"{self.copies[name]} does not bind it (a submodule); write `from {name} "
                                        "import <name>` to use the port's copy"))  # fmt: skip
            elif name in self.copies and (alias.asname is not None or "." not in name):
                self.changed.append((name, f"import {name} -> {self.copies[name]}"))
                bound = alias.asname or cst.AsName(cst.Name(name))
                alias = alias.with_changes(name=_dotted_node(self.copies[name]), asname=bound)
            elif name in self.copies:  # `import pkg.trainer` binds pkg: its uses spell the original's path
                self.missed.append((name, f"import {name}: the program's code reaches it as {name}, not its copy "
                                   f"{self.copies[name]}; write `from {name.rpartition('.')[0]} import "
                                   f"{name.rpartition('.')[2]}` to use the port's copy"))  # fmt: skip
            names.append(alias)
        return updated_node.with_changes(names=names)

    def leave_ImportFrom(  # type: ignore[override]
        self, original_node: cst.ImportFrom, updated_node: cst.ImportFrom
    ) -> cst.ImportFrom | cst.FlattenSentinel[cst.BaseSmallStatement]:
        base = absolute(updated_node, self.package)
        if base is None:
            return updated_node
        if base in self.copies and self.copies[base].startswith(f"{base}.") and updated_node.module is not None:
            return self._from_package_copy(updated_node, base)
        if base in self.copies:
            copy = self.copies[base].rpartition(".")[2]
            module = updated_node.module
            if module is None:
                return updated_node
            parts = dotted(module).split(".")
            self.changed.append((base, f"from {base} import ... -> {self.copies[base]}"))
            return updated_node.with_changes(module=_dotted_node(".".join([*parts[:-1], copy])))
        if isinstance(updated_node.names, cst.ImportStar):
            return updated_node
        names, moved = [], []
        for alias in updated_node.names:
            full = f"{base}.{dotted(alias.name)}" if base else dotted(alias.name)
            if full in self.copies and not self._rebound(full):
                self.changed.append((full, f"from {base} import {dotted(alias.name)} -> {self.copies[full]}"))
                alias = alias.with_changes(name=cst.Name(self.copies[full].rpartition(".")[2]),
                                           asname=alias.asname or cst.AsName(cst.Name(dotted(alias.name))))  # fmt: skip
            elif self.reexported.get(full) in self.copies:  # the package's __init__ imports it from a copied module
                copy = self.copies[self.reexported[full]]
                self.changed.append((self.reexported[full], f"from {base} import {dotted(alias.name)} -> {copy}"))
                alone = alias.with_changes(comma=cst.MaybeSentinel.DEFAULT)
                moved.append(cst.ImportFrom(module=_dotted_node(copy), names=[alone]))
                continue
            names.append(alias)
        if not moved:
            return updated_node.with_changes(names=names)
        if names:
            names[-1] = names[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
            return cst.FlattenSentinel([updated_node.with_changes(names=names), *moved])
        return cst.FlattenSentinel(moved)

    def _from_package_copy(
        self, node: cst.ImportFrom, base: str
    ) -> cst.ImportFrom | cst.FlattenSentinel[cst.BaseSmallStatement]:
        """`from pkg import make_loader, datasets` where pkg's __init__ is copied: what the __init__ defines from
        `pkg.__init___ddp` (relative: `from .__init___ddp import ...`), a submodule of the package from the package
        (a copied one as its copy, `leave_ImportFrom`'s rule)."""
        if isinstance(node.names, cst.ImportStar):
            self.changed.append((base, f"from {base} import * -> {self.copies[base]}"))
            return node.with_changes(module=_dotted_node(f"{dotted(node.module)}.{self._tail(base)}"))
        kept, moved = [], []
        for alias in node.names:
            full = f"{base}.{dotted(alias.name)}"
            if full in self.copies and not self._rebound(full):
                kept.append(
                    alias.with_changes(
                        name=cst.Name(self.copies[full].rpartition(".")[2]),
                        asname=alias.asname or cst.AsName(cst.Name(dotted(alias.name))),
                    )
                )
                self.changed.append((full, f"from {base} import {dotted(alias.name)} -> {self.copies[full]}"))
            elif full in self.submodules and not self._rebound(full):
                kept.append(alias)
            else:
                moved.append(alias.with_changes(comma=cst.MaybeSentinel.DEFAULT))
        if moved:
            self.changed.append((base, f"from {base} import {', '.join(dotted(a.name) for a in moved)} -> "
                                 f"{self.copies[base]}"))  # fmt: skip
        module = _dotted_node(f"{dotted(node.module)}.{self._tail(base)}")  # type: ignore[arg-type]
        copied = [node.with_changes(module=module, names=_commas(moved))] if moved else []
        return cst.FlattenSentinel([node.with_changes(names=_commas(kept)), *copied] if kept else copied)

    def _rebound(self, full: str) -> bool:
        """The package's __init__ binds `pkg.name` with an import from one of its modules (`from .config import *`
        whose `coco` dict replaces the submodule coco.py as `data.coco`, ssd.pytorch's data package; `from .coco
        import coco`): `from pkg import name` gives that binding, not the submodule, so not the submodule's copy
        (the binding comes from its module's copy where that module is copied)."""
        return full in self.reexported and self.reexported[full] != full.rpartition(".")[0]

    def _tail(self, base: str) -> str:
        return self.copies[base].rpartition(".")[2]


def _commas(aliases: list[cst.ImportAlias]) -> list[cst.ImportAlias]:
    """The aliases with a comma after each but the last."""
    comma = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
    return [a.with_changes(comma=comma if i < len(aliases) - 1 else cst.MaybeSentinel.DEFAULT)
            for i, a in enumerate(aliases)]  # fmt: skip


def _dotted_node(name: str) -> cst.Attribute | cst.Name:
    node: cst.Attribute | cst.Name = cst.Name(name.split(".")[0])
    for part in name.split(".")[1:]:
        node = cst.Attribute(value=node, attr=cst.Name(part))
    return node


def point_at_copies(
    source: str,
    original: str,
    copies: dict[str, str],
    package: str,
    result: PortResult,
    reexported: dict[str, str] | None = None,
    submodules: frozenset[str] = frozenset(),
    defined: dict[str, set[str]] | None = None,
) -> str:
    """`source` (a ported file of the program) with its imports of copied modules pointing at the copies, each
    listed as a change at its line in `original`, the user's file; a name a package re-exports from a copied module
    is imported from the copy (`submodules`: the program's modules, which a package's copy does not hold)."""
    if not copies:  # a program of one file, or one no rule changed beside the script: nothing to point anywhere
        return source
    imports = ImportsOfCopies(copies, package, reexported, submodules, defined)
    written = cst.parse_module(source).visit(imports)
    for module, text in dict.fromkeys(imports.changed):
        line = _import_line(original, module)
        result.changes.append(Change(line, "program", f"{text}: the ported copy of the program's module"))
    result.not_ported.extend(NotPorted(_import_line(original, module), text) for module, text in imports.missed)
    result.changes.sort(key=lambda change: change.line)
    return written.code


def _import_line(original: str, module: str) -> int:
    """The first line of the user's file importing `module` or a package holding it (`from utils import Logger`,
    the name re-exported from utils/logger.py; 1 if none is found)."""
    last = module.rpartition(".")[2]
    for number, line in enumerate(original.splitlines(), 1):
        words = line.replace(",", " ").split()
        if words[:1] in (["import"], ["from"]) and any(w.rstrip(".").split(".")[-1] == last or w == module
                                                       for w in words[1:]):  # fmt: skip
            return number
    for number, line in enumerate(original.splitlines(), 1):
        words = line.split()
        if words[:1] == ["from"] and len(words) > 1 and module.startswith(words[1].lstrip(".") + "."):
            return number
    return 1
