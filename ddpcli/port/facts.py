"""What the rules read from the script: its libcst tree with positions and parents, its imports, its optimizers,
their steps, the models they train, its DataLoaders and its loops. Read once, shared by every rule."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from ddpcli.script.frameworks import OPTIMIZER_CLASSES

OPTIMIZER_MODULES = ("torch.optim", "optim")


def dotted(node: cst.CSTNode) -> str:
    """`torch.optim.SGD` for an attribute chain on a name; '' for anything else."""
    parts: list[str] = []
    while isinstance(node, cst.Attribute):
        parts.append(node.attr.value)
        node = node.value
    if not isinstance(node, cst.Name):
        return ""
    parts.append(node.value)
    return ".".join(reversed(parts))


def dotted_module(node: cst.ImportFrom) -> str:
    return dotted(node.module) if node.module is not None else ""


def import_aliases(node: cst.BaseSmallStatement) -> list[tuple[str, str]]:
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


def call_name(node: cst.Call) -> str:
    return dotted(node.func)


def last_name(node: cst.CSTNode) -> str:
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


@dataclass
class Facts:
    module: cst.Module
    positions: dict[cst.CSTNode, object]
    parents: dict[cst.CSTNode, cst.CSTNode]
    aliases: dict[str, str] = field(default_factory=dict)  # local name -> what it imports
    names: set[str] = field(default_factory=set)  # every name the script uses (new names must not clash)
    functions: dict[str, cst.FunctionDef] = field(default_factory=dict)
    calls: list[cst.Call] = field(default_factory=list)  # in source order

    children: dict[cst.CSTNode, list[cst.CSTNode]] = field(default_factory=dict)
    order: list[cst.CSTNode] = field(default_factory=list)  # every node, in source order (preorder)
    folder: Path | None = None  # the script's folder (its own modules: utils.py), when read from a file

    @classmethod
    def read(cls, source: str) -> Facts:
        wrapper = MetadataWrapper(cst.parse_module(source), unsafe_skip_copy=True)  # the tree is ours: no copy
        tree = _Tree()
        wrapper.module.visit(tree)
        facts = cls(wrapper.module, dict(wrapper.resolve(PositionProvider)), tree.parents)
        facts.children, facts.order = tree.children, tree.order
        for node in facts.order:
            if isinstance(node, cst.Import | cst.ImportFrom):
                facts.aliases.update(import_aliases(node))
            elif isinstance(node, cst.Name):
                facts.names.add(node.value)
            elif isinstance(node, cst.FunctionDef):
                facts.functions.setdefault(node.name.value, node)
            elif isinstance(node, cst.Call):
                facts.calls.append(node)
        return facts

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
            if below is None and current not in self.parents:  # a node the rules built, not the script's
                below = list(current.children)
            stack.extend(reversed(below or ()))

    def line(self, node: cst.CSTNode) -> int:
        return self.positions[node].start.line  # type: ignore[attr-defined]

    def resolve(self, node: cst.CSTNode) -> str:
        """The imported name an expression spells: `optim.SGD` -> torch.optim.SGD after `from torch import optim`."""
        name = dotted(node.func if isinstance(node, cst.Call) else node)
        head, _, rest = name.partition(".")
        origin = self.aliases.get(head)
        return (f"{origin}.{rest}" if rest else origin) if origin else name

    def ancestors(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        while node in self.parents:
            node = self.parents[node]
            yield node

    def statement(self, node: cst.CSTNode) -> cst.BaseStatement:
        """The statement (a line or a compound statement) holding `node`, as it stands in its block."""
        current = node
        for parent in self.ancestors(node):
            if isinstance(current, cst.BaseStatement) and isinstance(parent, cst.IndentedBlock | cst.Module):
                return current
            current = parent
        raise ValueError("node outside any statement")

    def scope(self, node: cst.CSTNode) -> cst.FunctionDef | cst.Module:
        return next((a for a in self.ancestors(node) if isinstance(a, cst.FunctionDef)), self.module)

    def block_of(self, statement: cst.BaseStatement) -> cst.IndentedBlock | cst.Module:
        parent = self.parents[statement]
        assert isinstance(parent, cst.IndentedBlock | cst.Module)
        return parent

    def loops_around(self, node: cst.CSTNode) -> list[cst.For | cst.While]:
        """The loops holding `node`, innermost first, within its function."""
        loops: list[cst.For | cst.While] = []
        for ancestor in self.ancestors(node):
            if isinstance(ancestor, cst.FunctionDef):
                break
            if isinstance(ancestor, cst.For | cst.While):
                loops.append(ancestor)
        return loops

    def is_optimizer_call(self, call: cst.Call) -> bool:
        name = self.resolve(call)
        head, _, last = name.rpartition(".")
        return last in OPTIMIZER_CLASSES or (head in OPTIMIZER_MODULES and last[:1].isupper())

    def optimizer_calls(self) -> list[cst.Call]:
        return [call for call in self.calls if self.is_optimizer_call(call)]

    def optimizer_names(self) -> set[str]:
        """Names an optimizer is assigned to (`optimizer`, `self.opt`, `optimizerD`)."""
        names = set()
        for call in self.optimizer_calls():
            parent = self.parents.get(call)
            if isinstance(parent, cst.Assign):
                names |= {dotted(target.target) for target in parent.targets}
        return names - {""}

    def step_calls(self) -> list[cst.Call]:
        """`optimizer.step()` (or `scaler.step(optimizer)`): calls of `.step` on an optimizer's name, or on a name
        that says it is one (`opt`, `optim`)."""
        optimizers = self.optimizer_names()
        found = []
        for call in self.calls:
            if not isinstance(call.func, cst.Attribute) or call.func.attr.value != "step":
                continue
            receiver = dotted(call.func.value)
            tail = receiver.rsplit(".", 1)[-1].lower()
            scaler_of = any(dotted(arg.value) in optimizers for arg in call.args)
            if receiver in optimizers or scaler_of or ("opt" in tail and "sched" not in tail):
                found.append(call)
        return found

    def assigned_in(self, scope: cst.CSTNode, name: str) -> list[cst.BaseStatement]:
        """Statements of `scope` (not of nested functions) assigning `name` (`x = ...`, `x: T = ...`, `for x in`)."""
        found = []
        for node in self.walk(scope):
            if node is scope or self.scope(node) is not scope:
                continue
            targets: list[cst.CSTNode] = []
            if isinstance(node, cst.Assign):
                targets = [target.target for target in node.targets]
            elif isinstance(node, cst.AnnAssign | cst.AugAssign):
                targets = [node.target]
            elif isinstance(node, cst.WithItem) and node.asname is not None:
                targets = [node.asname.name]
            flat = [n for target in targets for n in self.walk(target) if isinstance(n, cst.Name | cst.Attribute)]
            if any(dotted(target) == name for target in flat):
                found.append(self.statement(node))
        return found

    def main_guard(self) -> cst.If | None:
        """`if __name__ == "__main__":` (either side) at the top level of the module."""
        for statement in self.module.body:
            test = statement.test if isinstance(statement, cst.If) else None
            if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
                target = test.comparisons[0]
                sides = {dotted(test.left), dotted(target.comparator)} | {
                    string_value(test.left) or "", string_value(target.comparator) or ""}  # fmt: skip
                if isinstance(target.operator, cst.Equal) and {"__name__", "__main__"} <= sides:
                    assert isinstance(statement, cst.If)
                    return statement
        return None

    def builds_layer(self, word: str) -> bool:
        """A call of a layer class whose name holds `word` (`nn.BatchNorm2d(...)`, `SyncBatchNorm`), not the word
        in a comment or a string."""
        return any(word in self.resolve(call).rsplit(".", 1)[-1] for call in self.calls)


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
