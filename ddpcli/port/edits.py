"""The edits rules ask for, applied in one pass over the tree.

A rule never rewrites the tree itself: it names an original node and what to do with it (replace it through a
function of its already-edited self, so that edits inside it survive; put statements before or after a
statement). One transformer applies them bottom-up, so two rules may touch the same statement.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

import libcst as cst

Rewrite = Callable[[cst.CSTNode], cst.CSTNode]


def statements(code: str, newline: str = "\n") -> list[cst.BaseStatement]:
    """Statements from source text, ready to insert in any block (libcst re-indents them). `newline` is the target
    file's line ending: libcst writes the lines between statements with the file's own, but a string spanning lines
    (a helper's docstring) keeps the ones it was parsed with, so the text is parsed with the file's."""
    return list(cst.parse_module(code.replace("\n", newline)).body)


def expression(code: str) -> cst.BaseExpression:
    return cst.parse_expression(code)


def guarded(statement: cst.CSTNode, test: str) -> cst.If:
    """`if TEST:` around a statement; its comments above stay above the `if`."""
    assert isinstance(statement, cst.SimpleStatementLine | cst.BaseCompoundStatement)
    inner = statement.with_changes(leading_lines=())
    return cst.If(test=expression(test), body=cst.IndentedBlock([inner]), leading_lines=statement.leading_lines)


class Edits:
    def __init__(self, newline: str = "\n") -> None:
        self.newline = newline  # the edited file's line ending, for the statements inserted
        self.rewrites: dict[cst.CSTNode, list[Rewrite]] = defaultdict(list)
        self.before: dict[cst.CSTNode, list[cst.BaseStatement]] = defaultdict(list)
        self.after: dict[cst.CSTNode, list[cst.BaseStatement]] = defaultdict(list)
        self.regions: dict[cst.CSTNode, list[Region]] = defaultdict(list)

    def rewrite(self, node: cst.CSTNode, how: Rewrite) -> None:
        self.rewrites[node].append(how)

    def insert_before(self, statement: cst.CSTNode, code: str) -> None:
        self.before[statement].extend(statements(code, self.newline))

    def insert_after(self, statement: cst.CSTNode, code: str) -> None:
        self.after[statement].extend(statements(code, self.newline))

    def guard(self, statement: cst.CSTNode, test: str) -> None:
        """Run the statement only where `test` holds (once per statement, whatever asks twice)."""
        if any(getattr(how, "guard_test", None) == test for how in self.rewrites[statement]):
            return

        def how(node: cst.CSTNode) -> cst.CSTNode:
            return guarded(node, test)

        how.guard_test = test  # type: ignore[attr-defined]
        self.rewrites[statement].append(how)

    def wrap_region(self, block: cst.CSTNode, first: cst.CSTNode, last: cst.CSTNode, code: str) -> None:
        """Put the statements of `block` from `first` to `last` (with what was inserted around them) inside the
        compound statement `code` (its body a `pass`), e.g. `with model.no_sync():`."""
        self.regions[block].append(Region(first, last, code))

    def apply(self, module: cst.Module) -> cst.Module:
        return module.visit(_Apply(self))


@dataclass(frozen=True)
class Region:
    first: cst.CSTNode
    last: cst.CSTNode
    code: str


class _Apply(cst.CSTTransformer):
    def __init__(self, edits: Edits) -> None:
        super().__init__()
        self.edits = edits
        self.updated: dict[cst.CSTNode, cst.CSTNode] = {}  # original statement -> its edited self

    def _wrap_regions(self, original: cst.CSTNode, node: cst.CSTNode) -> cst.CSTNode:
        for region in self.edits.regions.get(original, ()):
            body = list(node.body)  # type: ignore[attr-defined]
            first, last = self.updated[region.first], self.updated[region.last]
            start = _index(body, first) - len(self.edits.before.get(region.first, []))
            end = _index(body, last) + len(self.edits.after.get(region.last, []))
            inner = [body[start].with_changes(leading_lines=()), *body[start + 1 : end + 1]]
            wrapper = cst.parse_statement(region.code + "\n    pass\n")
            assert isinstance(wrapper, cst.BaseCompoundStatement)
            wrapper = wrapper.with_changes(body=cst.IndentedBlock(inner), leading_lines=body[start].leading_lines)
            node = node.with_changes(body=[*body[:start], wrapper, *body[end + 1 :]])
        return node

    def on_leave(self, original_node: cst.CSTNode, updated_node: cst.CSTNode):  # type: ignore[override]
        node = self._wrap_regions(original_node, updated_node)
        for how in self.edits.rewrites.get(original_node, ()):
            node = how(node)
        before, after = self.edits.before.get(original_node, []), self.edits.after.get(original_node, [])
        self.updated[original_node] = node
        if before or after:
            return cst.FlattenSentinel([*before, node, *after])
        return node


def _index(body: list[cst.CSTNode], node: cst.CSTNode) -> int:
    return next(i for i, item in enumerate(body) if item is node)
