"""A loss summed over the batch (`reduction="sum"`, `size_average=False`, as pytorch/examples' VAE) keeps its
gradient: each rank sums over its B samples and DDP averages over ranks, which would divide the global batch's
gradient by the world size; the backward of such a loss is multiplied by it, with a comment saying why.

Whether a loss sums over the batch is read from what its value is (ddpcli.script.values.origins: the bindings its
names reach in their scope, the script's own functions' returns): a summing call, or the call of a criterion
bound to one, is a sum; divided by the batch's size (`x.size(0)`, `len(x)`, `x.shape[0]`, a batch size) it is a
mean; any other arithmetic keeps what its terms are. A criterion of another function, spelled alike, is not this
one's."""

from __future__ import annotations

import libcst as cst

from ddpcli.port.context import Port
from ddpcli.port.facts import Facts, dotted, keyword, last_name, string_value
from ddpcli.script.reader import literal_value
from ddpcli.script.values import origins

COMMENT = "# ddpcli port: this loss sums over the batch and DDP averages gradients over ranks: x world size"
MAX_DEPTH = 8


def _sums(call: cst.Call) -> bool:
    reduction, size_average = keyword(call, "reduction"), keyword(call, "size_average")
    if reduction is not None and string_value(reduction.value) == "sum":
        return True
    return size_average is not None and isinstance(size_average.value, cst.Name) and size_average.value.value == "False"


def sums_over_the_batch(facts: Facts, node: cst.CSTNode, depth: int = 0) -> bool:
    """`node`'s value is a loss summed over the batch."""
    if depth > MAX_DEPTH:
        return False
    if isinstance(node, cst.Call):
        if _sums(node):
            return True
        called = [end for end in origins(facts, node.func) if end is not node.func] if dotted(node.func) else []
        return any(isinstance(end, cst.Call) and _sums(end) for end in called) or any(
            sums_over_the_batch(facts, end, depth + 1) for end in origins(facts, node) if end is not node
        )
    if isinstance(node, cst.BinaryOperation):
        if isinstance(node.operator, cst.Divide | cst.FloorDivide):
            return not _batch_size(facts, node.right) and sums_over_the_batch(facts, node.left, depth + 1)
        return any(sums_over_the_batch(facts, side, depth + 1) for side in (node.left, node.right))
    if isinstance(node, cst.UnaryOperation):
        return sums_over_the_batch(facts, node.expression, depth + 1)
    if isinstance(node, cst.Name | cst.Attribute):
        return any(sums_over_the_batch(facts, end, depth + 1) for end in origins(facts, node) if end is not node)
    return False


def _batch_size(facts: Facts, node: cst.CSTNode, depth: int = 0) -> bool:
    """A divisor that counts the batch's samples: `x.size(0)`, `x.size(dim=0)`, `x.shape[0]`, `len(x)`, a name
    saying batch (`batch_size`, `args.batch_size`), or a name bound to one of those."""
    if isinstance(node, cst.Call):
        name = facts.resolve(node)
        if name == "len":
            return True
        first = node.args[0].value if node.args else None
        return last_name(node) == "size" and first is not None and literal_value(first) == 0
    if isinstance(node, cst.Subscript) and isinstance(node.value, cst.Attribute) and node.value.attr.value == "shape":
        index = node.slice[0].slice if len(node.slice) == 1 else None
        return isinstance(index, cst.Index) and literal_value(index.value) == 0
    if isinstance(node, cst.Name | cst.Attribute):
        if "batch" in dotted(node).rsplit(".", 1)[-1].lower():
            return True
        return depth < 3 and any(_batch_size(facts, end, depth + 1) for end in origins(facts, node) if end is not node)
    return False


def apply(port: Port) -> None:
    facts = port.facts
    if not any(_sums(call) for call in facts.calls):
        return
    for call in facts.calls:
        if not (isinstance(call.func, cst.Attribute) and call.func.attr.value == "backward"):
            continue
        receiver = call.func.value
        if not sums_over_the_batch(facts, receiver):
            continue
        port.edits.rewrite(receiver, lambda node: cst.BinaryOperation(
            left=node, operator=cst.Multiply(), right=cst.Name("_ddp_world"),
            lpar=[cst.LeftParen()], rpar=[cst.RightParen()]))  # fmt: skip
        statement = facts.statement(call)
        port.edits.rewrite(statement, lambda node: node.with_changes(
            leading_lines=[*node.leading_lines, cst.EmptyLine(comment=cst.Comment(COMMENT))]))  # fmt: skip
        port.change(call, "sum_loss", f"{port.code(receiver)}.backward() x world size: the loss sums over the "
                    "batch and DDP averages over ranks, so the gradient stays the summed global batch's")  # fmt: skip
