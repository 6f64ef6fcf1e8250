"""Data batched by hand, without a DataLoader: `for i in range(0, len(x), batch_size): xb = x[i:i + batch_size]`
in a loop that steps. Under torchrun every rank would train on the same batches. The clear pattern (a range
stepping by the batch, slices that start at the loop variable) is sharded: the loop steps by world size x batch
and each rank slices its own batch, `x[i + _ddp_rank * batch_size : ...]`, up to where every rank still has one;
with one process it is the script's loop. A `batchify` / `get_batch` of the script is listed as not ported, with
its line."""

from __future__ import annotations

import libcst as cst

from ddpcli.port.context import Port
from ddpcli.port.facts import dotted
from ddpcli.port.rules.training import Training

BATCH_FUNCTIONS = ("batchify", "get_batch", "get_batches", "iterate_minibatches", "minibatches")


def _range_by_batch(loop: cst.For) -> tuple[str, cst.Call] | None:
    """`for i in range(0, n, bs)`: the loop variable and the range call."""
    call = loop.iter
    if (isinstance(call, cst.Call) and dotted(call.func) == "range" and len(call.args) == 3
            and isinstance(loop.target, cst.Name)):  # fmt: skip
        return loop.target.value, call
    return None


def _slices(port: Port, loop: cst.For, variable: str, step: str) -> list[cst.Slice]:
    """Slices `x[i:i + bs]` in the loop's body that start at the loop variable and span one step."""
    found = []
    for node in port.facts.walk(loop.body):
        if isinstance(node, cst.Slice) and node.lower is not None and dotted(node.lower) == variable:
            upper = port.code(node.upper).replace(" ", "") if node.upper is not None else ""
            if upper in (f"{variable}+{step}", f"{step}+{variable}") or upper.startswith(f"min({variable}+{step},"):
                found.append(node)
    return found


def apply(port: Port, training: Training | None = None) -> None:
    facts = port.facts
    training = training or Training(facts)
    for node in facts.walk(facts.module):
        if isinstance(node, cst.For) and training.steps_in(node) and (found := _range_by_batch(node)):
            variable, call = found
            step = port.code(call.args[2].value).replace(" ", "")
            slices = _slices(port, node, variable, step)
            if not slices:
                continue
            stride = call.args[2].value
            port.edits.rewrite(stride, lambda n: cst.BinaryOperation(left=n.with_changes(lpar=[cst.LeftParen()],
                               rpar=[cst.RightParen()]) if isinstance(n, cst.BinaryOperation) else n,
                               operator=cst.Multiply(), right=cst.Name("_ddp_world")))  # fmt: skip
            stop = call.args[1].value
            port.edits.rewrite(stop, lambda n, s=step: cst.parse_expression(
                f"{cst.Module([]).code_for_node(n)} - ({s}) * (_ddp_world - 1)"))  # fmt: skip
            for piece in slices:
                port.edits.rewrite(piece, lambda n, v=variable, s=step: n.with_changes(
                    lower=cst.parse_expression(f"{v} + _ddp_rank * {s}"),
                    upper=cst.parse_expression(f"{v} + (_ddp_rank + 1) * {s}")))  # fmt: skip
            port.change(node, "hand_batches", f"batches sliced by hand: the loop strides world size x {step} and "
                        f"each rank takes its own {step} (slice from {variable} + _ddp_rank * {step}); the range "
                        "ends where every rank still has a batch, so all ranks step as often")  # fmt: skip
        elif (
            isinstance(node, cst.Call)
            and dotted(node.func).rsplit(".", 1)[-1] in BATCH_FUNCTIONS
            and (training.steps_in(facts.scope(node)) or any(training.steps_in(a) for a in facts.loops_around(node)))
        ):
            port.cannot(node, f"data batched by hand ({dotted(node.func)}): every rank would train on the same "
                            "batches; give each rank its share by _ddp_rank and _ddp_world (or use a DataLoader, "
                            "which the port shards)")  # fmt: skip
