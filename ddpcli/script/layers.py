"""The layers a model class builds that its training forward may not reach: built in `__init__`, called in
`forward` only under a condition (`if self.do_bn: x = self.bn_input(x)`, MorvanZhou's batch normalization net), or
never. DistributedDataParallel waits, in every backward, for a gradient of each parameter that requires one; a
parameter no forward used never gets one, and the next forward fails ("Expected to have finished reduction in the
prior iteration") unless the wrap says `find_unused_parameters=True`.

Read from the class's syntax tree: the `self.<name> = <Class>(...)` assignments of `__init__` (a class built: a
layer, a block of the project's, an `nn.Parameter`), and the `self.<name>` references of `forward` and of the
methods it calls, each either reached on every call or under an `if`, a conditional expression, the right side of
`and`/`or`, an `except` or a `case`, or after an `if` that may return. A body under `if self.training:` is
reached: DDP's backward follows a training forward. A container indexed by what the call decides
(`self.blocks[step](x)` for `step` in `range(steps)`, a forward argument: ProGAN's progressive blocks) may leave
some of its layers unreached; by a number written out, or by the position of a loop over the container itself
(`for i in range(len(self.blocks))`, `enumerate(self.blocks)`), it is reached. A forward that reaches its layers by
name at run time (`getattr(self, ...)`, `self.children()`) is not judged. A class's own blocks are asked the same
(`self.block = Block()`, Block's forward with an optional layer): their unused parameters are the model's."""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from ddpcli.script.reader import Reader, dotted

# Classes torch.nn builds without parameters: an unreached one makes DDP wait for nothing.
PARAMETERLESS = frozenset({
    "Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout", "Identity", "Flatten", "Unflatten",
    "ReLU", "ReLU6", "LeakyReLU", "ELU", "SELU", "CELU", "GELU", "SiLU", "Mish", "Sigmoid", "Tanh", "Softmax",
    "LogSoftmax", "Softplus", "Hardtanh", "Hardswish", "Hardsigmoid", "MaxPool1d", "MaxPool2d", "MaxPool3d",
    "AvgPool1d", "AvgPool2d", "AvgPool3d", "AdaptiveAvgPool1d", "AdaptiveAvgPool2d", "AdaptiveAvgPool3d",
    "AdaptiveMaxPool1d", "AdaptiveMaxPool2d", "AdaptiveMaxPool3d", "Upsample", "PixelShuffle", "ZeroPad2d",
})  # fmt: skip
BY_NAME = frozenset({"getattr", "children", "named_children", "modules", "named_modules", "_modules", "__dict__"})


@dataclass(frozen=True)
class Layers:
    """What one class builds: the layers its forward may not reach, and the classes of the layers it builds."""

    unreached: list[str] = field(default_factory=list)
    classes: list[str] = field(default_factory=list)


def layers_of(reader: Reader, cls: cst.ClassDef) -> Layers:
    """The layers `cls` builds in `__init__` that its forward reaches only under a condition, or not at all."""
    methods = {item.name.value: item for item in cls.body.body if isinstance(item, cst.FunctionDef)}
    if "__init__" not in methods:
        return Layers()
    built = _built(reader, methods["__init__"])
    classes = list(dict.fromkeys(built.values()))
    if "forward" not in methods:
        return Layers(classes=classes)  # inherited: what the base class calls is not read here
    reached: set[str] = set()
    queue, visited = ["forward"], set()
    while queue:
        method = queue.pop()
        if method in visited:
            continue
        visited.add(method)
        references = _references(reader, methods[method])
        if references is None:
            return Layers(classes=classes)
        for name, conditional in references:
            if not conditional:
                reached.add(name)
                if name in methods:
                    queue.append(name)
    return Layers(sorted(name for name in built if name not in reached), classes)


def classes_of(reader: Reader) -> dict[str, Layers]:
    """Every class of a file, by name, with what it builds (the first of a name the file defines twice)."""
    found: dict[str, Layers] = {}
    for node in reader.order:
        if isinstance(node, cst.ClassDef) and node.name.value not in found:
            found[node.name.value] = layers_of(reader, node)
    return found


def unreached_in(classes: dict[str, Layers], names: list[str]) -> dict[str, list[str]]:
    """The layers the models of classes `names` may not reach: each class's own, and those of the classes its
    layers are built from (known ones: the program's), by class."""
    found: dict[str, list[str]] = {}
    queue, seen = list(names), set()
    while queue:
        name = queue.pop(0)
        if name in seen or name not in classes:
            continue
        seen.add(name)
        if classes[name].unreached:
            found[name] = classes[name].unreached
        queue += classes[name].classes
    return found


def _built(reader: Reader, init: cst.FunctionDef) -> dict[str, str]:
    """`name -> SomeClass` for each `self.name = SomeClass(...)` in `__init__`: a class torch.nn builds without
    parameters, or a loss, left out."""
    found: dict[str, str] = {}
    for node in reader.walk(init.body):
        if not isinstance(node, cst.Assign | cst.AnnAssign) or node.value is None:
            continue
        targets = [t.target for t in node.targets] if isinstance(node, cst.Assign) else [node.target]
        pairs = [(target, node.value) for target in targets]
        for target in targets:  # `self.blocks, self.rgb = nn.ModuleList([]), nn.ModuleList([])` (ProGAN's)
            value = node.value
            if (isinstance(target, cst.Tuple | cst.List) and isinstance(value, cst.Tuple | cst.List)
                    and len(target.elements) == len(value.elements)):  # fmt: skip
                pairs += [(t.value, v.value) for t, v in zip(target.elements, value.elements, strict=True)]
        for target, value in pairs:
            if not isinstance(value, cst.Call):
                continue
            built = dotted(value.func).rsplit(".", 1)[-1]
            if not built[:1].isupper() or built in PARAMETERLESS or built.endswith("Loss"):
                continue
            if isinstance(target, cst.Attribute) and dotted(target.value) == "self":
                found.setdefault(target.attr.value, built)
    return found


def _references(reader: Reader, method: cst.FunctionDef) -> list[tuple[str, bool]] | None:
    """Each `self.<name>` the method reads, and whether it is read only under a condition; None where the method
    reaches its attributes by name at run time."""
    found: list[tuple[str, bool]] = []
    queue: list[tuple[cst.CSTNode, bool]] = [(method.body, False)]
    while queue:
        node, conditional = queue.pop()
        if (isinstance(node, cst.Name) and node.value in BY_NAME) or (
            isinstance(node, cst.Attribute) and node.attr.value in BY_NAME and dotted(node.value) == "self"
        ):
            return None
        if isinstance(node, cst.Attribute) and dotted(node.value) == "self":
            found.append((node.attr.value, conditional or _some_entries(reader, node)))
        queue += [(child, conditional or under) for child, under in _children(reader, node)]
    return found


def _some_entries(reader: Reader, attribute: cst.Attribute) -> bool:
    """`self.blocks[step]`: an entry the call decides (not a number written out, not the position of a loop over
    the container: `for i in range(len(self.blocks))`, `for i, block in enumerate(self.blocks)`)."""
    subscript = reader.parents.get(attribute)
    if not isinstance(subscript, cst.Subscript) or subscript.value is not attribute or len(subscript.slice) != 1:
        return False
    index = subscript.slice[0].slice
    if not isinstance(index, cst.Index):
        return True  # a slice: `self.blocks[:steps]`
    value = index.value
    if isinstance(value, cst.Integer) or (
        isinstance(value, cst.UnaryOperation) and isinstance(value.expression, cst.Integer)
    ):
        return False
    return not (isinstance(value, cst.Name) and _loops_over(reader, subscript, value.value, dotted(attribute)))


def _loops_over(reader: Reader, node: cst.CSTNode, variable: str, container: str) -> bool:
    """`variable` is the position a loop around `node` takes over the whole of `container`."""
    for loop in (a for a in reader.ancestors(node) if isinstance(a, cst.For)):
        header = reader.module.code_for_node(loop.iter).replace(" ", "")
        target = reader.module.code_for_node(loop.target).replace(" ", "")
        if header == f"range(len({container}))" and target == variable:
            return True
        if header == f"enumerate({container})" and target.split(",")[0].strip("()") == variable:
            return True
    return False


def _children(reader: Reader, node: cst.CSTNode) -> list[tuple[cst.CSTNode, bool]]:
    """A node's children, each with whether reaching it depends on a condition the node tests."""
    if isinstance(node, cst.If):
        always = dotted(node.test) == "self.training"  # the training forward takes this branch
        return [(node.test, False), (node.body, not always)] + ([(node.orelse, True)] if node.orelse else [])
    if isinstance(node, cst.IfExp):
        return [(node.test, False), (node.body, True), (node.orelse, True)]
    if isinstance(node, cst.BooleanOperation):
        return [(node.left, False), (node.right, True)]
    below = reader.children.get(node, [])  # the tree read once (libcst's .children rebuilds them each time)
    if isinstance(node, cst.ExceptHandler | cst.MatchCase):
        return [(child, True) for child in below]
    if isinstance(node, cst.IndentedBlock):  # what follows an `if` that may return runs only when it does not
        found, returned = [], False
        for child in below:
            found.append((child, returned))
            returned = returned or (isinstance(child, cst.If) and _returns(reader, child))
        return found
    return [(child, False) for child in below]


def _returns(reader: Reader, statement: cst.If) -> bool:
    """A `return` (or raise) inside the `if`, not in a function defined there; `if self.training:` aside."""
    if dotted(statement.test) == "self.training":
        return False
    return any(isinstance(node, cst.Return | cst.Raise) and not any(
        isinstance(a, cst.FunctionDef | cst.Lambda) for a in reader.ancestors_below(node, statement))
        for node in reader.walk(statement))  # fmt: skip
