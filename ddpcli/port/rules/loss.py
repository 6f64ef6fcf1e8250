"""A loss summed over the batch (`reduction="sum"`, `size_average=False`, as pytorch/examples' VAE) keeps its
gradient: each rank sums over its B samples and DDP averages over ranks, which would divide the global batch's
gradient by the world size; the backward of such a loss is multiplied by it, with a comment saying why."""

from __future__ import annotations

import libcst as cst

from ddpcli.port.context import Port
from ddpcli.port.facts import Facts, dotted, keyword, string_value

COMMENT = "# ddpcli port: this loss sums over the batch and DDP averages gradients over ranks: x world size"


def _sums(call: cst.Call) -> bool:
    reduction, size_average = keyword(call, "reduction"), keyword(call, "size_average")
    if reduction is not None and string_value(reduction.value) == "sum":
        return True
    return size_average is not None and isinstance(size_average.value, cst.Name) and size_average.value.value == "False"


def summing(facts: Facts) -> tuple[set[str], set[str]]:
    """Functions whose body sums a loss over the batch (a summing call, a summing criterion's call, or a call of
    another such function), and names bound to a summing criterion."""
    criteria = set()
    for call in facts.calls:
        parent = facts.parents.get(call)
        if _sums(call) and isinstance(parent, cst.Assign):
            criteria |= {dotted(target.target) for target in parent.targets}
    criteria -= {""}
    functions: set[str] = set()
    while True:  # until no function is added: `total(...)` calls `loss_function(...)` calls `criterion(...)`
        found = {
            name
            for name, f in facts.functions.items()
            if name not in functions
            and any(
                isinstance(n, cst.Call) and (_sums(n) or dotted(n.func) in criteria | functions) for n in facts.walk(f)
            )
        }
        if not found:
            return functions, criteria
        functions |= found


def _is_summed(facts: Facts, expression: cst.CSTNode, scope: cst.CSTNode, known: tuple[set[str], set[str]],
               skip: cst.CSTNode | None, depth: int = 0) -> bool:  # fmt: skip
    """The expression sums over the batch: directly, or through the names it is computed from (three deep)."""
    functions, criteria = known
    for node in facts.walk(expression):
        if isinstance(node, cst.Call) and (_sums(node) or dotted(node.func) in functions | criteria):
            return True
        if isinstance(node, cst.Name) and depth < 3:
            for statement in facts.assigned_in(scope, node.value):
                if statement is not skip and _is_summed(facts, statement, scope, known, statement, depth + 1):
                    return True
    return False


def apply(port: Port) -> None:
    facts = port.facts
    functions, criteria = summing(facts)
    if not functions and not criteria and not any(_sums(call) for call in facts.calls):
        return
    for call in facts.calls:
        if not (isinstance(call.func, cst.Attribute) and call.func.attr.value == "backward"):
            continue
        receiver = call.func.value
        if not _is_summed(facts, receiver, facts.scope(call), (functions, criteria), facts.statement(call)):
            continue
        port.edits.rewrite(receiver, lambda node: cst.BinaryOperation(
            left=node, operator=cst.Multiply(), right=cst.Name("_ddp_world"),
            lpar=[cst.LeftParen()], rpar=[cst.RightParen()]))  # fmt: skip
        statement = facts.statement(call)
        port.edits.rewrite(statement, lambda node: node.with_changes(
            leading_lines=[*node.leading_lines, cst.EmptyLine(comment=cst.Comment(COMMENT))]))  # fmt: skip
        port.change(call, "sum_loss", f"{port.code(receiver)}.backward() x world size: the loss sums over the "
                    "batch and DDP averages over ranks, so the gradient stays the summed global batch's")  # fmt: skip
