"""The one reader of a user's script, for `ddpcli init` and `ddpcli port` alike: libcst's tree with what each name
resolves to (its qualified name through imports and aliases: `import torch.nn as nn; nn.BatchNorm2d` is
torch.nn.BatchNorm2d, `from torch.optim import AdamW as A; A(...)` is torch.optim.AdamW), the scope of each node
and the assignments each access reaches (a local `torch = ...` shadows the import), and each node's line.

Both commands decide by what a name is, not by how it is spelled or by words in it: two readers that each matched
spellings (one with `ast`, one with libcst) disagreed on the same script.

Speed: libcst's QualifiedNameProvider names every node of the file up front, and ScopeProvider alone costs a
third of a port of a 2,500-line script. So a node's qualified name is computed when a decision asks for it, and the
scopes only when a question needs them: the accesses of a name (where values flow), or a name an import binds that
something else binds too (a parameter, an assignment: it may be shadowed); and then over the top-level function
the question is in, not the whole file (`Reader.scope_of`). Any other name means what its import says in every
scope, and the imports alone resolve it, to the same answer (tests/test_script_reader.py checks the two agree).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import libcst as cst
from libcst.metadata import (
    Assignment,
    MetadataWrapper,
    PositionProvider,
    QualifiedNameSource,
    Scope,
    ScopeProvider,
)

from ddpcli.script.source import Source, parse_ast


def dotted(node: cst.CSTNode) -> str:
    """`torch.optim.SGD` for an attribute chain on a name; '' for anything else (`make().AdamW`: a chain on a call
    spells no name; what it resolves to is `Reader.resolve`'s)."""
    parts: list[str] = []
    while isinstance(node, cst.Attribute):
        parts.append(node.attr.value)
        node = node.value
    if not isinstance(node, cst.Name):
        return ""
    parts.append(node.value)
    return ".".join(reversed(parts))


def last_name(node: cst.CSTNode) -> str:
    """The last name of a call's function or of an attribute chain (`make().AdamW(...)` -> AdamW)."""
    if isinstance(node, cst.Call):
        node = node.func
    if isinstance(node, cst.Attribute):
        return node.attr.value
    return node.value if isinstance(node, cst.Name) else ""


def keyword(call: cst.Call, name: str) -> cst.Arg | None:
    return next((arg for arg in call.args if arg.keyword is not None and arg.keyword.value == name), None)


def string_value(node: cst.CSTNode) -> str | None:
    if isinstance(node, cst.SimpleString):
        value = node.evaluated_value
        return value if isinstance(value, str) else None
    return None


MODE_LETTERS = frozenset("rwaxbtU+")


def open_mode(call: cst.Call) -> str | None:
    """The mode string of `open(path, mode)` / `open(path, mode=...)` (a module's too: `gzip.open(path, "wt")`), or
    of a path's own `path.open(mode)`; None where it is not a literal."""
    mode = keyword(call, "mode") or (call.args[1] if len(call.args) > 1 and call.args[1].keyword is None else None)
    if mode is None and opens_its_receiver(call):
        mode = call.args[0]
    return string_value(mode.value) if mode is not None else None


def opens_its_receiver(call: cst.Call) -> bool:
    """`path.open("w")`: a method `open` whose first argument is a mode (pathlib's), not a file (`Image.open(path)`,
    `gzip.open(path, mode)`)."""
    if not isinstance(call.func, cst.Attribute) or call.func.attr.value != "open" or not call.args:
        return False
    first = call.args[0]
    mode = string_value(first.value) if first.keyword is None else None
    return bool(mode) and set(mode) <= MODE_LETTERS  # type: ignore[arg-type]


def opens_to_write(call: cst.Call) -> bool:
    """`open(...)`'s literal mode writes (w, a, x or +); the call's function is the caller's to check."""
    mode = open_mode(call)
    return mode is not None and any(letter in mode for letter in "wax+")


def literal_value(node: cst.CSTNode | None) -> object:
    """The value of a literal as Python would build it (numbers, strings, True/False/None, a sign, lists, tuples,
    dicts of literals); None for anything else. Reading a default never runs the script."""
    if isinstance(node, cst.Integer | cst.Float | cst.SimpleString):
        return node.evaluated_value
    if isinstance(node, cst.ConcatenatedString):
        return node.evaluated_value
    if isinstance(node, cst.Name) and node.value in _CONSTANTS:
        return _CONSTANTS[node.value]
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus | cst.Plus):
        value = literal_value(node.expression)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return -value if isinstance(node.operator, cst.Minus) else value
    if isinstance(node, cst.List | cst.Tuple):
        values = [literal_value(element.value) for element in node.elements]
        return None if None in values else (list(values) if isinstance(node, cst.List) else tuple(values))
    return None


_CONSTANTS: dict[str, object] = {"True": True, "False": False, "None": None}


def import_aliases(node: cst.CSTNode) -> list[tuple[str, str]]:
    """The names an import binds and what each is: `import a.b` -> (a, a); `import a.b as c` -> (c, a.b);
    `from a import b as c` -> (c, a.b). Relative and star imports bind nothing known."""
    if isinstance(node, cst.Import):
        found = []
        for alias in node.names:
            full = dotted(alias.name)
            found.append((dotted(alias.asname.name), full) if alias.asname else (full.split(".")[0],) * 2)
        return found
    if isinstance(node, cst.ImportFrom) and node.module and not node.relative and isinstance(node.names, Sequence):
        return [(dotted(alias.asname.name) if alias.asname else dotted(alias.name),
                 f"{dotted(node.module)}.{dotted(alias.name)}") for alias in node.names]  # fmt: skip
    return []


@dataclass
class Reader:
    """A script read once: its tree, each node's parent, children, scope and line, its imports, calls and
    functions. Nodes a caller builds later (not the script's) have no scope: they resolve by the imports alone."""

    module: cst.Module
    positions: Mapping[cst.CSTNode, object]
    wrapper: MetadataWrapper
    parents: dict[cst.CSTNode, cst.CSTNode]
    children: dict[cst.CSTNode, list[cst.CSTNode]] = field(default_factory=dict)
    order: list[cst.CSTNode] = field(default_factory=list)  # every node, in source order (preorder)
    aliases: dict[str, str] = field(default_factory=dict)  # local name -> what it imports (any scope)
    names: set[str] = field(default_factory=set)  # every name the script spells
    functions: dict[str, cst.FunctionDef] = field(default_factory=dict)
    calls: list[cst.Call] = field(default_factory=list)  # in source order
    shadowable: set[str] = field(default_factory=set)  # names an import binds and something else binds too
    memo: dict[str, dict[Any, Any]] = field(default_factory=dict)  # what a question of the flow found, by question
    _resolved: dict[cst.CSTNode, str] = field(default_factory=dict)
    _scopes: dict[cst.CSTNode | None, Mapping[cst.CSTNode, Scope | None]] = field(default_factory=dict)

    @classmethod
    def read(cls, text: str) -> Reader:
        """`text` parsed (a libcst ParserSyntaxError where it is not Python) and indexed in one visit."""
        wrapper = MetadataWrapper(cst.parse_module(text), unsafe_skip_copy=True)  # the tree is ours: no copy
        tree = _Tree()
        wrapper.module.visit(tree)
        reader = cls(wrapper.module, wrapper.resolve(PositionProvider), wrapper, tree.parents)
        reader.children, reader.order = tree.children, tree.order
        reader._index()
        return reader

    @classmethod
    def of(cls, source: Source) -> Reader:
        """The script's bytes read: Python's own verdict on its syntax first (NotPython with Python's line and
        message, for the Python that runs it), then the tree."""
        parse_ast(source)
        return cls.read(source.text)

    def _index(self) -> None:
        """Imports, names, functions and calls, in one pass over the nodes."""
        spelled: list[cst.Name] = []
        for node in self.order:
            if isinstance(node, cst.Import | cst.ImportFrom):
                self.aliases.update(import_aliases(node))
            elif isinstance(node, cst.Name):
                self.names.add(node.value)
                spelled.append(node)
            elif isinstance(node, cst.FunctionDef):
                self.functions.setdefault(node.name.value, node)
            elif isinstance(node, cst.Call):
                self.calls.append(node)
        self.shadowable = {n.value for n in spelled if n.value in self.aliases and binds(self, n)}

    def scope_of(self, node: cst.CSTNode) -> Scope | None:
        """`node`'s scope (libcst's ScopeProvider), computed the first time a question needs it, over the part of
        the module it can depend on: the module's own statements and classes, with the one function that holds
        `node` whole and every other top-level function as its bare name (a def binds only its name in the module
        scope; its body cannot bind a name elsewhere but by `global`, which this reading does not follow). A
        question about one function of a 2,500-line script then costs that function, not the file."""
        top = self._top(node)
        if top not in self._scopes:
            body = [self._stub(s) if isinstance(s, cst.FunctionDef) and s is not top else s for s in self.module.body]
            changed = any(mine is not theirs for mine, theirs in zip(body, self.module.body, strict=True))
            part = self.module.with_changes(body=body) if changed else None
            wrapper = MetadataWrapper(part, unsafe_skip_copy=True) if part is not None else self.wrapper
            self._scopes[top] = wrapper.resolve(ScopeProvider)
        return self._scopes[top].get(node)

    def _top(self, node: cst.CSTNode) -> cst.CSTNode | None:
        """The top-level function holding `node`, None outside any."""
        top = None
        for ancestor in self.ancestors(node):
            if isinstance(ancestor, cst.FunctionDef) and self.parents.get(ancestor) is self.module:
                top = ancestor
        return top

    @staticmethod
    def _stub(function: cst.FunctionDef) -> cst.FunctionDef:
        """`def name(): pass`: the binding a function is in the module scope, without its body to analyse."""
        return cst.FunctionDef(name=function.name, params=cst.Parameters(), body=cst.SimpleStatementSuite([cst.Pass()]))

    def walk(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        """`node` and everything under it, in source order (from the tree read once: libcst's `.children`
        rebuilds a node's children each time it is asked, which made every walk cost a visit)."""
        if node is self.module:
            yield from self.order
            return
        stack = [node]
        while stack:
            current = stack.pop()
            yield current
            below = self.children.get(current)
            if below is None and current not in self.parents:  # a node a caller built, not the script's
                below = list(current.children)
            stack.extend(reversed(below or ()))

    def line(self, node: cst.CSTNode) -> int:
        return self.positions[node].start.line  # type: ignore[attr-defined]

    def ancestors(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        while node in self.parents:
            node = self.parents[node]
            yield node

    def ancestors_below(self, node: cst.CSTNode, top: cst.CSTNode) -> Iterator[cst.CSTNode]:
        """`node`'s ancestors up to `top`, without it (all of them where `top` is none of theirs)."""
        for ancestor in self.ancestors(node):
            if ancestor is top:
                return
            yield ancestor

    def resolve(self, node: cst.CSTNode) -> str:
        """What an expression (a call: its function) names: the imported thing (`optim.SGD` -> torch.optim.SGD
        after `from torch import optim`), a builtin by its name (`print`), a name of the script as it is spelled
        (`model.save`), or the path of a chain on a call (`make().AdamW` -> make.AdamW). A name a local binding
        shadows is never the import: `torch = Stub(); torch.load(f)` in a function is f.<locals>.torch.load."""
        node = node.func if isinstance(node, cst.Call) else node
        if node not in self._resolved:
            self._resolved[node] = self._resolve(node)
        return self._resolved[node]

    def _resolve(self, node: cst.CSTNode) -> str:
        head = _head(node)
        if head is None or head.value not in self.shadowable or node not in self.parents:
            return self._by_imports(node)
        scope = self.scope_of(node)
        found = scope.get_qualified_names_for(node) if scope is not None else set()
        for source in (QualifiedNameSource.IMPORT, QualifiedNameSource.BUILTIN):
            names = sorted(q.name for q in found if q.source is source and not q.name.startswith("."))
            if names:
                return names[0].removeprefix("builtins.")
        return min((q.name for q in found), default=self._by_imports(node))

    def _by_imports(self, node: cst.CSTNode) -> str:
        """The name with its head taken through the imports: exact where no binding shadows the head (and for a
        node built after the reading, which has no scope)."""
        parts: list[str] = []
        while isinstance(node, cst.Attribute):
            parts.append(node.attr.value)
            node = node.value
        if isinstance(node, cst.Call):  # `make().AdamW`: what the call's function names, then the attributes
            base = self._by_imports(node.func)
            return ".".join([base, *reversed(parts)]) if base else ""
        if not isinstance(node, cst.Name):
            return ""
        return ".".join([self.aliases.get(node.value, node.value), *reversed(parts)])

    def code(self, node: cst.CSTNode) -> str:
        """`node` as the script writes it."""
        return self.module.code_for_node(node)

    def is_variable(self, name: cst.Name) -> bool:
        """A name read or bound as a variable, not an attribute's (`x.argv`) or a keyword's (`f(argv=1)`)."""
        parent = self.parents.get(name)
        if isinstance(parent, cst.Attribute) and parent.attr is name:
            return False
        return not (isinstance(parent, cst.Arg) and parent.keyword is name)

    def imports(self) -> set[str]:
        """Everything the script imports, qualified (`torch.nn`, `lightning.Trainer`)."""
        return set(self.aliases.values())

    def builds_layer(self, word: str) -> bool:
        """A call of a class whose qualified name's last part holds `word` (`nn.BatchNorm2d(...)`,
        `SyncBatchNorm`): the layer the model builds, not the word in a comment, a string or a variable name."""
        return any(word in self.resolve(call).rsplit(".", 1)[-1] for call in self.calls)

    def values_of(self, name: cst.Name) -> list[cst.CSTNode]:
        """What `name` (an access) may hold: each binding its scope resolves it to, as the node that binds it
        (the right-hand side of `x = ...`, the `for` or comprehension that binds it, the parameter)."""
        scope = self.scope_of(name)
        if scope is None:
            return []
        found: list[cst.CSTNode] = []
        for access in scope.accesses[name]:
            if access.node is not name:
                continue
            for referent in access.referents:
                if isinstance(referent, Assignment) and isinstance(referent.node, cst.CSTNode):
                    found.append(self._binder(referent.node))
        return found or self._matched(name)

    def _matched(self, name: cst.Name) -> list[cst.CSTNode]:
        """A name a `case` pattern around it binds (`match batch: case [xb, yb]: ... xb`): what it holds is taken
        from the match's subject (libcst's scopes record no binding for a pattern's names)."""
        for ancestor in self.ancestors(name):
            if isinstance(ancestor, cst.FunctionDef | cst.ClassDef):
                break
            if isinstance(ancestor, cst.MatchCase) and any(
                isinstance(node, cst.MatchAs | cst.MatchStar) and isinstance(node.name, cst.Name)
                and node.name.value == name.value for node in self.walk(ancestor.pattern)
            ):  # fmt: skip
                match = self.parents.get(ancestor)
                return [match.subject] if isinstance(match, cst.Match) else []
        return []

    def _binder(self, target: cst.CSTNode) -> cst.CSTNode:
        """The node that binds `target`: an Assign's value, an AugAssign's value (`total += loss.item()`: what it
        adds; what it added to is the name's earlier binding), a For / CompFor, a Param, a def, an import."""
        child = target
        for parent in self.ancestors(target):
            binding = isinstance(parent, cst.Assign | cst.AnnAssign | cst.NamedExpr | cst.AugAssign)
            if binding and child is not parent.value:
                return parent.value or parent
            if isinstance(parent, cst.For | cst.CompFor | cst.WithItem) and child is not _iter_or_item(parent):
                return parent
            if not isinstance(
                parent, cst.Tuple | cst.List | cst.Element | cst.StarredElement | cst.AssignTarget | cst.AsName
            ):
                return target
            child = parent
        return target


def _head(node: cst.CSTNode) -> cst.Name | None:
    """The name an attribute chain (through calls) starts from: `nn` of `nn.Linear`, `make` of `make().AdamW`."""
    while isinstance(node, cst.Attribute | cst.Call):
        node = node.value if isinstance(node, cst.Attribute) else node.func
    return node if isinstance(node, cst.Name) else None


def binds(reader: Reader, node: cst.Name) -> bool:
    """`node` is bound here by something other than an import (assigned, a parameter, a def, a loop or `with`
    target, `global`), not only read."""
    child: cst.CSTNode = node
    for parent in reader.ancestors(node):
        if isinstance(parent, cst.Assign | cst.AugAssign | cst.AnnAssign):
            targets = parent.targets if isinstance(parent, cst.Assign) else [parent.target]
            return any(target is child for target in targets)
        if isinstance(parent, cst.For | cst.CompFor):
            return parent.target is child
        if isinstance(parent, cst.AsName):
            return not isinstance(reader.parents.get(parent), cst.ImportAlias)
        if isinstance(parent, cst.NamedExpr | cst.Param | cst.FunctionDef | cst.ClassDef | cst.Global | cst.Nonlocal):
            return True
        if not isinstance(parent, _TARGET_PARTS):
            return False
        child = parent
    return False


_TARGET_PARTS = (cst.Tuple, cst.List, cst.Element, cst.StarredElement, cst.AssignTarget, cst.AsName)


def _iter_or_item(node: cst.For | cst.CompFor | cst.WithItem) -> cst.BaseExpression:
    return node.item if isinstance(node, cst.WithItem) else node.iter


class _Tree(cst.CSTVisitor):
    """Each node's parent and children, and every node in source order, in one visit."""

    def __init__(self) -> None:
        super().__init__()
        self.parents: dict[cst.CSTNode, cst.CSTNode] = {}
        self.children: dict[cst.CSTNode, list[cst.CSTNode]] = {}
        self.order: list[cst.CSTNode] = []
        self.stack: list[cst.CSTNode] = []

    def on_visit(self, node: cst.CSTNode) -> bool:
        if self.stack:
            self.parents[node] = self.stack[-1]
            self.children[self.stack[-1]].append(node)
        self.children[node] = []
        self.order.append(node)
        self.stack.append(node)
        return True

    def on_leave(self, original_node: cst.CSTNode) -> None:
        self.stack.pop()
