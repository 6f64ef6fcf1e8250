"""Where the script reaches into a wrapped model after the wrap, listed: `model.state_dict()`, `model.decode(z)`,
`model.n_classes = 3`. Nothing of these is rewritten: the wrapper (`_DDPModel`, the
header's) is the script's model for all of them wherever they happen, in this script or in a module it imports:
attributes and methods reach the script's module, state_dict keeps its names (DataParallel's `module.` only where
the script used it), torch.save and copy.deepcopy give the script's model. Calling the model (`model(x)`) and what
DDP and nn.Module answer themselves (train, eval, parameters, to, zero_grad, ...) are not listed.

Two things are rewritten. `torch.save(model, path)` of a wrapped model saves `_ddp_script_model(model)`: the
script's model pickled as the script pickled it (the wrapper pickles it too, in a form torch.load's weights_only
mode refuses). And a method of the model whose result is back-propagated (`loss = model.loss(x, y)`), which must
run as DDP's forward, or the backward all-reduces nothing (`_ddp_forward(model, "loss")(x, y)`: Lightning Fabric's
mark_forward_method). Its receiver is a wrapped model, or, in a function, a parameter the function uses as a model
(calls it, trains it, takes its parameters): the model another file hands it; on anything but the wrapper the
helper is the method itself."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from ddpcli.port.context import Port
from ddpcli.port.facts import CONTAINERS, Facts, dotted
from ddpcli.script.values import origins, reaching

PASSES_THROUGH = {
    "train", "eval", "parameters", "to", "cuda", "cpu", "zero_grad", "requires_grad_", "apply", "forward", "half",
    "float", "double", "bfloat16", "type", "no_sync", "module", "training", "children", "modules", "buffers",
    "register_forward_hook", "register_forward_pre_hook", "register_full_backward_hook",
}  # fmt: skip
SAVES = ("torch.save",)
TRACES = ("torch.jit.trace", "torch.jit.script", "torch.onnx.export")  # DDP's forward holds collectives: untraceable


RETURNS_ITSELF = ("eval", "train", "to", "cuda", "cpu", "float", "half", "double", "bfloat16", "requires_grad_")


def model_given(expression: cst.BaseExpression, models: set[str]) -> str | None:
    """The wrapped model an argument is: its name, or a call of one of its methods that returns it (`net.eval()`)."""
    if dotted(expression) in models:
        return dotted(expression)
    if (isinstance(expression, cst.Call) and isinstance(expression.func, cst.Attribute)
            and expression.func.attr.value in RETURNS_ITSELF and dotted(expression.func.value) in models):  # fmt: skip
        return dotted(expression.func.value)
    return None


MODEL_USES = ("train", "eval", "parameters", "named_parameters", "zero_grad", "state_dict", "to")  # a module's


def _names_a_module(facts: Facts, node: cst.Attribute) -> bool:
    """`from model.wide_res_net import WideResNet`, `import model.resnet`, `model.resnet.ResNet18()` after it: a
    package spelled as the model is, not the model (its variable is another binding, in another scope, or later in
    this one: `model = model.mnist(...)`)."""
    if any(isinstance(a, cst.Import | cst.ImportFrom) for a in facts.ancestors(node)):
        return True
    base = node.value
    while isinstance(base, cst.Attribute):
        base = base.value
    return isinstance(base, cst.Name) and _a_module_here(facts, base)


def apply(port: Port) -> None:
    through_forward = _through_forward(port)
    if not port.models:
        return
    facts, models = port.facts, set(port.models)
    for node in facts.walk(facts.module):
        if node in through_forward:
            continue
        if (
            isinstance(node, cst.Attribute)
            and dotted(node.value) in models
            and node.attr.value not in PASSES_THROUGH
            and not _names_a_module(facts, node)
        ):
            what = node.attr.value
            why = (
                "with the names it has without DDP"
                if "state_dict" in what or what.startswith("named_")
                else "its own attribute"
            )
            port.change(node, "unwrap", f"{dotted(node.value)}.{what}: the script's model's, through its DDP wrapper "
                        f"({why})")  # fmt: skip
        elif isinstance(node, cst.Call) and facts.resolve(node) in TRACES and node.args:
            traced = node.args[0].value
            if (model := model_given(traced, models)) is not None:
                port.needs.add("script_model")
                port.edits.rewrite(traced, lambda given: cst.Call(func=cst.Name("_ddp_script_model"),
                                                                  args=[cst.Arg(given)]))  # fmt: skip
                port.change(traced, "unwrap", f"{port.code(node.func)} of {model}: the script's model "
                            f"(_ddp_script_model({model})), as the script traced it: DDP's forward holds "
                            "collectives, which a trace cannot follow")  # fmt: skip
        elif isinstance(node, cst.Call) and facts.resolve(node) in SAVES and node.args:
            for model in _saved_models(port, node.args[0].value, models):
                port.needs.add("script_model")
                port.edits.rewrite(model, lambda saved: cst.Call(func=cst.Name("_ddp_script_model"),
                                                                 args=[cst.Arg(saved)]))  # fmt: skip
                port.change(model, "unwrap", f"torch.save of {dotted(model)}: pickles the script's model "
                            f"(_ddp_script_model({dotted(model)})), as the script did: not its DDP wrapper, which "
                            "loads only where a process group is set up, and torch.load(weights_only=True) loads "
                            "it back")  # fmt: skip


def _saved_models(port: Port, saved: cst.CSTNode, models: set[str], depth: int = 0) -> Iterator[cst.CSTNode]:
    """The wrapped models `torch.save` pickles: the object saved, or a value of the dict, list or tuple it is, written
    in the call or bound to the name saved (`state = {'net': net, ...}; torch.save(state, path)`), nested too."""
    if dotted(saved) in models:
        yield saved
    elif isinstance(saved, CONTAINERS):
        for element in saved.elements:
            value = getattr(element, "value", None)
            if value is not None and depth < 4:
                yield from _saved_models(port, value, models, depth + 1)
    elif isinstance(saved, cst.Name) and depth == 0:
        seen = set()
        for origin in origins(port.facts, saved):
            if isinstance(origin, CONTAINERS) and origin not in seen:
                seen.add(origin)
                yield from _saved_models(port, origin, models, depth + 1)


def _through_forward(port: Port) -> set[cst.Attribute]:
    """Rewrite each call of a model's method whose value a backward is computed from; the methods' attributes."""
    done = set()
    for node in port.facts.backward_sources():
        if not (isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute)):
            continue
        method = node.func.attr.value
        if method in PASSES_THROUGH or method.startswith("__") or not _a_model(port, node.func.value):
            continue
        done.add(node.func)
        port.needs.add("forward")
        port.edits.rewrite(node, lambda call, method=method: call.with_changes(func=_through(call, method)))
        port.change(node, "ddp_forward", f"{port.code(node.func)}(...): its result is back-propagated, so under "
                    "torchrun it runs as DDP's forward (called past the wrapper, the backward would all-reduce "
                    "nothing and each rank step on its own)")  # fmt: skip
    return done


def _a_module_here(facts: Facts, name: cst.Name) -> bool:
    """Every binding of `name` that reaches this read of it imports a module."""
    bound = reaching(facts, name) if name in facts.parents else []
    return bool(bound) and all(isinstance(binding, cst.Import | cst.ImportFrom) for binding in bound)


def _through(call: cst.CSTNode, method: str) -> cst.Call:
    """`_ddp_forward(model, "loss")`, the callee that replaces `model.loss` (its receiver as the edits left it)."""
    assert isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute)
    name = cst.SimpleString(f'"{method}"')
    return cst.Call(func=cst.Name("_ddp_forward"), args=[cst.Arg(call.func.value), cst.Arg(name)])


def _a_model(port: Port, receiver: cst.BaseExpression) -> bool:
    """A model the port wraps, or a parameter its function uses as a model (another file's wrapped model); not a
    module the name is bound to where it is read (`model = model.mnist(...)` after `from mnist import model`)."""
    if isinstance(receiver, cst.Name) and _a_module_here(port.facts, receiver):
        return False
    if dotted(receiver) in port.models:
        return True
    if not isinstance(receiver, cst.Name):
        return False
    found = origins(port.facts, receiver)
    if not found or not all(isinstance(origin, cst.Param) for origin in found):
        return False
    function = port.facts.scope(receiver)
    for node in port.facts.walk(function):
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and node.func.value == receiver.value:
            return True
        if (isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value in MODEL_USES
                and isinstance(node.func.value, cst.Name) and node.func.value.value == receiver.value):  # fmt: skip
            return True
    return False
