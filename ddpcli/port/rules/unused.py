"""A wrapped model whose forward returns several outputs, where the script drops one made by layers nothing it keeps
goes through (InfoGAN's `validity, _, _ = discriminator(x)`: the label and code heads get no gradient in that
backward), needs `find_unused_parameters=True`: without it DDP's reducer waits for gradients that never come and
the next forward fails ("Expected to have finished reduction in the prior iteration"). Read from the syntax tree:
the model's class, its forward's returned tuple, the `self.<layer>(...)` calls each element is computed from, and
the script's calls of the model that unpack the tuple into `_` or take one element by index."""

from __future__ import annotations

import libcst as cst

from ddpcli.port.context import Port
from ddpcli.script.reader import dotted, literal_value
from ddpcli.script.values import origins, sources


def dropped_layers(port: Port, model: str) -> tuple[cst.Call, list[str]] | None:
    """A call of `model` that drops an output and the layers only that output goes through, or None."""
    facts = port.facts
    calls = [call for call in facts.calls if dotted(call.func) == model]
    forwards = _forwards(port, calls[0]) if calls else []
    if len(forwards) != 1:  # none, or several classes the name may be (`a, b = A(), B()` is read as either)
        return None
    [forward] = forwards
    returned = _returned_tuple(forward)
    if returned is None:
        return None
    layers = [_layers(port, element) for element in returned]
    for call in calls:
        kept = _kept(port, call, len(returned))
        if kept is None or len(kept) == len(returned):
            continue
        used = set().union(*(layers[index] for index in kept))
        dropped = sorted(set().union(*(layers[index] for index in range(len(returned)) if index not in kept)) - used)
        if dropped:
            return call, dropped
    return None


def _forwards(port: Port, call: cst.Call) -> list[cst.FunctionDef]:
    """The forward of the class the called model was built from (`discriminator = Discriminator()`)."""
    found = []
    for end in origins(port.facts, call.func):
        if not isinstance(end, cst.Call):
            continue
        name = dotted(end.func).rsplit(".", 1)[-1]
        for node in port.facts.walk(port.facts.module):
            if isinstance(node, cst.ClassDef) and node.name.value == name:
                found += [
                    item
                    for item in node.body.body
                    if isinstance(item, cst.FunctionDef) and item.name.value == "forward"
                ]
    return found


def _returned_tuple(forward: cst.FunctionDef) -> list[cst.BaseExpression] | None:
    """The elements of the tuple forward returns (one return statement of a tuple of plain elements), or None."""
    returns = [node for node in _walk(forward) if isinstance(node, cst.Return)]
    if len(returns) != 1 or not isinstance(returns[0].value, cst.Tuple):
        return None
    elements = returns[0].value.elements
    if len(elements) < 2 or any(isinstance(element, cst.StarredElement) for element in elements):
        return None
    return [element.value for element in elements]


def _walk(node: cst.CSTNode) -> list[cst.CSTNode]:
    found, queue = [], [node]
    while queue:
        current = queue.pop()
        found.append(current)
        queue += [child for child in current.children if not isinstance(child, cst.FunctionDef | cst.ClassDef)]
    return found


def _layers(port: Port, element: cst.CSTNode) -> set[str]:
    """The `self.<layer>(...)` calls an element of the returned tuple is computed from."""
    return {
        dotted(node.func)
        for node in sources(port.facts, element)
        if isinstance(node, cst.Call) and dotted(node.func).startswith("self.")
    }


def _kept(port: Port, call: cst.Call, count: int) -> set[int] | None:
    """Which outputs a call keeps: `a, _, _ = model(x)` keeps 0, `model(x)[1]` keeps 1; None where it keeps the
    tuple whole or the reading cannot tell."""
    parent = port.facts.parents.get(call)
    if isinstance(parent, cst.Assign) and len(parent.targets) == 1:
        target = parent.targets[0].target
        if isinstance(target, cst.Tuple | cst.List) and len(target.elements) == count:
            names = [element.value for element in target.elements]
            if all(isinstance(name, cst.Name) for name in names):
                return {i for i, name in enumerate(names) if not name.value.startswith("_")}  # type: ignore[union-attr]
        return None
    if isinstance(parent, cst.Subscript) and parent.value is call and len(parent.slice) == 1:
        index = parent.slice[0].slice
        key = literal_value(index.value) if isinstance(index, cst.Index) else None
        if isinstance(key, int) and not isinstance(key, bool) and -count <= key < count:
            return {key % count}
    return None
