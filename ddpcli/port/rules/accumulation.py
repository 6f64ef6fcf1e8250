"""Gradient accumulation: where the optimizer steps under a condition inside the loop that runs backward
(`if (i + 1) % accum == 0: optimizer.step()`), the micro-batches that do not step skip DDP's all-reduce:
their forward and backward run under `model.no_sync()`, the gradients only add up locally until the stepping one.

no_sync only saves all-reduces (averaged gradients summed are the sum averaged), but it is wrong on any other
model: it goes on the model the stepping optimizer trains, never on one whose optimizer steps every iteration
(znxlwm's WGAN_GP steps its critic every iteration and its generator every n_critic-th: the critic under
no_sync trained apart on each rank). Where the stepped optimizer's gradients are zeroed before its own backward in
the stepping branch, nothing adds up: no accumulation."""

from __future__ import annotations

import libcst as cst

from ddpcli.port.context import Port
from ddpcli.port.facts import dotted
from ddpcli.port.rules.wrap import trained_models
from ddpcli.script.values import origins


def apply(port: Port) -> None:
    facts = port.facts
    if not port.models:
        return
    done: set[int] = set()
    for step in facts.step_calls():
        loops = facts.loops_around(step)
        if not loops:
            continue
        loop = loops[0]
        condition = next((a for a in facts.ancestors(step) if a is loop or isinstance(a, cst.If)), None)
        if not isinstance(condition, cst.If) or not _counts_micro_batches(port, condition):
            continue
        if _zeroed_every_iteration(port, step, loop) or _zeroed_before_its_backward(port, step, condition):
            continue
        stepped = _stepped_models(port, step)
        if not stepped:
            continue  # the model this optimizer trains is not known: every micro-batch all-reduces (right, slower)
        for call in facts.calls:
            if not (isinstance(call.func, cst.Attribute) and call.func.attr.value == "backward"):
                continue
            if loop not in list(facts.ancestors(call)) or condition in list(facts.ancestors(call)):
                continue
            last = facts.statement(call)
            if id(last) in done:
                continue
            done.add(id(last))
            block = facts.block_of(last)
            body = list(block.body)
            end = body.index(last)
            start = next((i for i, s in enumerate(body[: end + 1]) if any(_calls(port, s, m) for m in stepped)), None)
            model = next((m for m in stepped if start is not None and _calls(port, body[start], m)), None)
            if start is None or model is None:
                port.cannot(call, "an accumulation step without the model's forward in this block: wrap the "
                            "micro-batches that do not step in model.no_sync()")  # fmt: skip
                continue
            test = _test_at_the_step(port, condition, body[start], block)
            if test is None:
                port.cannot(condition, f"{port.code(condition.test)}: a name it reads is set again between the "
                            "forward and this test; wrap the micro-batches that do not step in model.no_sync() "
                            "yourself")  # fmt: skip
                continue
            port.edits.wrap_region(block, body[start], last, f"with {model}.no_sync() if _ddp and not ({test}) "
                                   "else contextlib.nullcontext():")  # fmt: skip
            port.needs.add("contextlib")
            port.change(body[start], "no_sync", f"micro-batches that do not step ({test} is false) run under "
                        f"{model}.no_sync(): one all-reduce per optimizer step, not per micro-batch")  # fmt: skip


def _test_at_the_step(port: Port, condition: cst.If, start: cst.CSTNode, block: cst.CSTNode) -> str | None:
    """The step's test as it will read at the step, written where the forward starts: DDP decides at the forward
    whether the backward all-reduces, so a counter moved between the two (`loss.backward(); micro += 1; if micro %
    2 == 0: step()`) is read moved (`(micro + 1) % 2 == 0`). None where a name the test reads is set otherwise
    there (the reading cannot say what it will be)."""
    facts = port.facts
    read = {n.value for n in facts.walk(condition.test) if isinstance(n, cst.Name) and facts.is_variable(n)}
    body = list(block.body)  # type: ignore[attr-defined]
    holder = next((s for s in body if s is condition or condition in set(facts.walk(s))), None)
    moved: dict[str, str] = {}
    for statement in body[body.index(start) : body.index(holder) if holder in body else len(body)]:
        for node in facts.walk(statement):
            target = node.target if isinstance(node, cst.AugAssign | cst.AnnAssign) else None
            targets = [t.target for t in node.targets] if isinstance(node, cst.Assign) else [target] if target else []
            for name in (dotted(t) for t in targets):
                if name not in read:
                    continue
                if not isinstance(node, cst.AugAssign) or not isinstance(
                    node.operator, cst.AddAssign | cst.SubtractAssign
                ):
                    return None
                sign = "+" if isinstance(node.operator, cst.AddAssign) else "-"
                moved[name] = f"({moved.get(name, name)} {sign} {port.code(node.value)})"
    if not moved:
        return port.code(condition.test)
    return port.code(condition.test.visit(_Moved(moved)))


class _Moved(cst.CSTTransformer):
    def __init__(self, moved: dict[str, str]) -> None:
        super().__init__()
        self.moved = moved

    def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.BaseExpression:
        return (
            cst.parse_expression(self.moved[original_node.value]) if original_node.value in self.moved else updated_node
        )


def _counts_micro_batches(port: Port, condition: cst.If) -> bool:
    """`if (i + 1) % accum == 0:` (a modulo, or a name that says accumulation), with no else: a step every few
    micro-batches. `if args.use_optimizer: optimizer.step() else: ...` is a choice of update, not accumulation."""
    test = port.code(condition.test).lower()
    return condition.orelse is None and ("%" in test or "accum" in test)


def _stepped_models(port: Port, step: cst.Call) -> list[str]:
    """The wrapped models the stepped optimizer trains (`self.G` for `self.G_optimizer.step()`, built as
    `Adam(self.G.parameters())`), by where the optimizer comes from."""
    stepped = [step.func.value, *(arg.value for arg in step.args)] if isinstance(step.func, cst.Attribute) else []
    found: list[str] = []
    for node in stepped:
        for end in origins(port.facts, node):
            if isinstance(end, cst.Call) and port.facts.is_optimizer_call(end):
                found += [model for model in trained_models(port, end) if model in port.models and model not in found]
    return found


def _zeroes(port: Port, step: cst.Call) -> set[cst.Call]:
    """The calls that zero the stepped optimizer's gradients: its `zero_grad()`, and calls of the file's functions
    that make one (StarGAN's `self.reset_grad()`, zeroing both optimizers), the method's own spelling of it."""
    stepped = {dotted(step.func.value), *(dotted(arg.value) for arg in step.args)} - {""}  # type: ignore[attr-defined]
    direct = {call for call in port.facts.calls if isinstance(call.func, cst.Attribute)
              and call.func.attr.value == "zero_grad" and dotted(call.func.value) in stepped}  # fmt: skip
    helpers = {scope.name.value for call in direct if isinstance(scope := port.facts.scope(call), cst.FunctionDef)}
    return direct | {call for call in port.facts.calls if dotted(call.func).rsplit(".", 1)[-1] in helpers}


def _zeroed_before_its_backward(port: Port, step: cst.Call, condition: cst.If) -> bool:
    """The stepping branch zeroes the stepped optimizer's gradients before its own backward (`if i % n_critic ==
    0: optimizer_G.zero_grad(); g_loss.backward(); optimizer_G.step()`): what the other iterations' backwards left
    is discarded, nothing adds up into the step."""
    zeroes, zeroed = _zeroes(port, step), False
    for node in port.facts.walk(condition.body):
        if node in zeroes:
            zeroed = True
        elif isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == "backward":
            return zeroed
    return False


def _zeroed_every_iteration(port: Port, step: cst.Call, loop: cst.CSTNode) -> bool:
    """The stepped optimizer's `zero_grad()` runs at every iteration of the loop (under no condition inside it):
    nothing adds up between its steps, so there is no accumulation (PyTorch-GAN's wgan_gp zeroes its generator's
    gradients at every critic step and steps it every n_critic-th)."""
    for call in _zeroes(port, step):
        around = list(port.facts.ancestors(call))
        if loop in around and not any(isinstance(node, cst.If) for node in around[: around.index(loop)]):
            return True  # under no condition inside the loop (`if i % accum == 0: zero_grad()` opens a window)
    return False


def _calls(port: Port, statement: cst.CSTNode, model: str) -> bool:
    return any(isinstance(n, cst.Call) and dotted(n.func) == model for n in port.facts.walk(statement))
