"""Where values flow in a script, read backwards from the loss it back-propagates: the training loader is the one
whose batches reach `loss.backward()`, whatever it is called (`train_loader`, `dataloaders[phase]`, a loader
built in a function, one iterated inline in the `for`). A name decides nothing: a script's "train" loader may be
`dl_a`, and its test loader may be called `train_eval_loader`.

The walk goes from an expression to the bindings its names reach (ddpcli.script.reader's scopes), through the
`for` that binds a batch to what it iterates, through a parameter to the arguments of the function's calls, and
through a call of the script's own function to what that function returns. It is bounded (MAX_NODES) and never
runs anything.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import NamedTuple

import libcst as cst

from ddpcli.script import guards
from ddpcli.script.reader import Reader, dotted, last_name, literal_value

LOADER_CLASSES = ("DataLoader",)  # torch.utils.data.DataLoader, and any loader class of that name
MAX_NODES = 5000  # a walk that reaches this many expressions stops: a script's loss does not need more
MAX_CALLS = 4  # calls of the script's own functions a walk remembers it came through (the innermost kept)

Calls = tuple[cst.Call, ...]  # the calls of the script's own functions a walk entered, innermost last


def backward_calls(reader: Reader) -> list[cst.Call]:
    """`loss.backward()`, `scaler.scale(loss).backward()`, `(loss / n).backward()`: a call of `.backward` with no
    positional argument (`torch.autograd.backward(x)` is a function, not a loss's method)."""
    return [
        call for call in reader.calls if isinstance(call.func, cst.Attribute) and call.func.attr.value == "backward"
    ]


def is_loader(reader: Reader, node: cst.CSTNode) -> bool:
    return isinstance(node, cst.Call) and reader.resolve(node).rsplit(".", 1)[-1] in LOADER_CLASSES


def backward_sources(reader: Reader) -> list[cst.CSTNode]:
    """Every expression a back-propagated loss is computed from (`sources` of each `.backward()`'s receiver), each
    once, in the order reached: what the port's rules ask of the training path (its loaders, the model's methods)."""
    reached: dict[cst.CSTNode, None] = {}
    for call in backward_calls(reader):
        assert isinstance(call.func, cst.Attribute)
        reached.update(dict.fromkeys(sources(reader, call.func.value, training=True)))
    return list(reached)


def training_loaders(reader: Reader, reached: list[cst.CSTNode] | None = None) -> list[cst.Call]:
    """The loader calls whose batches reach a back-propagated loss, in source order (`reached`: the file's
    backward_sources, where the caller has them)."""
    loaders = {node for node in (backward_sources(reader) if reached is None else reached) if is_loader(reader, node)}
    return [call for call in reader.calls if call in loaders]


Key = str | int | None  # where a loader sits in a value: a dict key, a tuple position, None: it is the value
Feeds = dict[str, frozenset[Key]]  # a function's parameters that reach a loss -> where in each the loss's data sits
WHOLE: frozenset[Key] = frozenset({None})


class Fed(NamedTuple):
    """A function whose parameters feed a back-propagated loss, as another file's call of it needs to know."""

    params: tuple[str, ...]  # its parameters in order (a method's without self / cls)
    feeds: Feeds  # those that feed the loss, with where in each the loss's data sits
    defined: tuple[Reader, cst.FunctionDef] | None = None  # its file and definition: which calls of it train


Feeding = dict[str, Fed]  # function name (as a call spells it) -> what it is fed


def feeding_parameters(reader: Reader, reached: list[cst.CSTNode] | None = None) -> Feeding:
    """For each function of the file whose parameters reach a back-propagated loss (`def train(model, loader,
    optimizer): for x, y in loader: ... loss.backward()`): its name, its parameters in order (a method's without
    `self` / `cls`), and those that feed the loss, each with the part of its value that does: the whole value, or
    the keys the function reads it at (`loaders[0]`, `self.train_loader, self.val_loader = loaders`: position 0).
    What another file of the program hands to such a parameter is training data (ddpcli.port.program), at those
    keys only. `reached`: the file's backward_sources, where the caller has them."""
    reached = backward_sources(reader) if reached is None else reached
    on_path = set(reached)
    found: dict[str, tuple[tuple[str, ...], dict[str, set[Key]]]] = {}
    defined: dict[str, tuple[Reader, cst.FunctionDef]] = {}
    for node in reached:
        function = _function_of(reader, node) if isinstance(node, cst.Param) else None
        if function is None or not isinstance(node, cst.Param):
            continue
        params = tuple(p.name.value for p in function.params.params if p.name.value not in ("self", "cls"))
        feeds = found.setdefault(_called_as(reader, function), (params, {}))[1]
        feeds.setdefault(node.name.value, set()).update(_parameter_keys(reader, node, on_path))
        defined[_called_as(reader, function)] = (reader, function)
    return _frozen(found, defined)


def _frozen(
    found: dict[str, tuple[tuple[str, ...], dict[str, set[Key]]]], defined: dict[str, tuple[Reader, cst.FunctionDef]]
) -> Feeding:
    return {
        name: Fed(params, {p: frozenset(keys) for p, keys in feeds.items()}, defined.get(name))
        for name, (params, feeds) in found.items()
    }


def trains_at(reader: Reader, function: cst.FunctionDef, call: cst.Call) -> bool:
    """Whether `call` (of this file or another) of `function` (of `reader`'s file) can reach a backward of the
    function's own: `run_epoch(model, val_loader)` of a run_epoch that back-propagates only when given an optimizer
    cannot (ddpcli.script.guards)."""
    backwards = reader.memo.setdefault("backward_calls", {})
    if None not in backwards:
        backwards[None] = backward_calls(reader)
    return guards.trains_at(reader, function, backwards[None], call)


def merged_feeds(known: Feeds, more: Feeds) -> Feeds:
    """Both readings of a function's feeding parameters: each parameter's keys of either."""
    return {param: known.get(param, frozenset()) | more.get(param, frozenset()) for param in {*known, *more}}


def _parameter_keys(reader: Reader, param: cst.Param, on_path: set[cst.CSTNode]) -> frozenset[Key]:
    """Where in the parameter's value the loss's data sits, read from how the path to the loss reads it: `p[key]`
    at that key, `a, b = p` (or `self.a, self.b = p`) at the positions the path goes on from; read whole anywhere
    on the path (iterated, handed on, a key not written out): the whole value."""
    keys: set[Key] = set()
    for node in on_path:
        if isinstance(node, cst.Subscript) and _reads(reader, node.value, param):
            key = literal_value(node.slice[0].slice.value) if _one_index(node) else None  # type: ignore[union-attr]
            keys.add(key if isinstance(key, str | int) and not isinstance(key, bool) else None)
        elif isinstance(node, cst.Name) and _reads(reader, node, param):
            keys |= _positions_read(reader, node, on_path)
    return frozenset(keys) or WHOLE


def _one_index(node: cst.Subscript) -> bool:
    return len(node.slice) == 1 and isinstance(node.slice[0].slice, cst.Index)


def _reads(reader: Reader, node: cst.BaseExpression, param: cst.Param) -> bool:
    return isinstance(node, cst.Name) and node in reader.parents and param in reader.values_of(node)


def _unpacking(reader: Reader, value: cst.CSTNode) -> bool:
    """`value` is what `a, b = value` unpacks."""
    assign = reader.parents.get(value)
    return isinstance(assign, cst.Assign) and assign.value is value


def _positions_read(reader: Reader, value: cst.BaseExpression, on_path: set[cst.CSTNode]) -> set[Key]:
    """`a, b = value`: the positions whose target the path reads (`a`, `self.a`); {None} for any other read."""
    if not _unpacking(reader, value):
        return {None}
    assign = reader.parents[value]
    assert isinstance(assign, cst.Assign)
    positions: set[Key] = set()
    for target in assign.targets:
        if not isinstance(target.target, cst.Tuple | cst.List):
            return {None}
        elements = target.target.elements
        if any(isinstance(element, cst.StarredElement) for element in elements):
            return {None}
        for position, element in enumerate(elements):
            if _read_on_path(reader, element.value, value, on_path):
                positions.add(position)
    return positions


def _read_on_path(
    reader: Reader, target: cst.BaseExpression, value: cst.BaseExpression, on_path: set[cst.CSTNode]
) -> bool:
    """The path to the loss reads what `target` is bound to: a name whose binding is `value`'s unpacking, or an
    attribute of that spelling (as _attribute_values follows one)."""
    if isinstance(target, cst.Name):
        return any(
            isinstance(node, cst.Name) and node.value == target.value and value in reader.values_of(node)
            for node in on_path
            if node in reader.parents
        )
    spelled = dotted(target)
    return bool(spelled) and any(isinstance(node, cst.Attribute) and dotted(node) == spelled for node in on_path)


def handing_parameters(reader: Reader, feeding: Feeding) -> Feeding:
    """The file's functions that hand a parameter of theirs on to a feeding parameter of another file's function
    (`feeding`, by the name a call spells): `Trainer.train(self, loader)` calling engine.py's `train_epoch(model,
    loader, ...)`, at the keys the other function reads. What a third file hands them is training data too
    (ddpcli.port.program, to a fixed point)."""
    found: dict[str, tuple[tuple[str, ...], dict[str, set[Key]]]] = {}
    for call in reader.calls:
        for value, keys in handed(reader, call, feeding):
            for node in _passed_through(reader, value):
                function = _function_of(reader, node)
                if function is None:
                    continue
                names = tuple(p.name.value for p in function.params.params if p.name.value not in ("self", "cls"))
                feeds = found.setdefault(_called_as(reader, function), (names, {}))[1]
                feeds.setdefault(node.name.value, set()).update(keys)
    return _frozen(found, {})


def loaders_trained_from(reader: Reader, made: frozenset[str], feeding: Feeding) -> dict[str, set[Key]]:
    """For each function of another file of the program that builds and returns loaders (`made`), called here:
    where in its returned value sit the loaders this file trains on or hands to a feeding parameter of another file
    (`loaders["train"]` of `loaders = build_loaders(cfg)`; position 0 of `train_loader, val_loader = make()`;
    position 0 of `make()` handed whole to a Trainer that reads `loaders[0]`). The file that builds them shards
    those (ddpcli.port.rules.sampler)."""
    if not made:
        return {}
    found: dict[str, set[Key]] = {}
    on_path = set(backward_sources(reader))
    for node, keys in _trained_here(reader, feeding):
        if node in on_path and _unpacking(reader, node):  # `self.a, self.b = make()`: the targets the path reads
            keys = frozenset(_positions_read(reader, node, on_path)) or WHOLE  # type: ignore[arg-type]
        for function, key in _where_returned(reader, node, made, keys):
            found.setdefault(function, set()).add(key)
    return found


def imported_and_trained(reader: Reader, feeding: Feeding) -> list[tuple[cst.ImportFrom, str]]:
    """The names this file imports from another file of the program (`from data import loader`) and trains on or
    hands to a feeding parameter: each import and the name the other file binds. That file shards its loader."""
    found = []
    for node, _ in _trained_here(reader, feeding):
        if not isinstance(node, cst.Name) or node not in reader.parents:
            continue
        for binder in reader.values_of(node):
            if isinstance(binder, cst.ImportFrom) and not isinstance(binder.names, cst.ImportStar):
                found += [(binder, dotted(alias.name)) for alias in binder.names
                          if dotted(alias.asname.name if alias.asname else alias.name) == node.value]  # fmt: skip
    return found


def attributes_trained(reader: Reader, feeding: Feeding) -> set[tuple[str, str]]:
    """(class, attribute) for each attribute of an object this file builds by calling a class (`dataset =
    Cifar(...)`) whose value it trains on (`for batch in dataset.train:`), or hands to a feeding parameter of another
    file: the file defining that class shards the loader it keeps there (`self.train = DataLoader(...)`)."""
    found: set[tuple[str, str]] = set()
    for node, _ in _trained_here(reader, feeding):
        if isinstance(node, cst.Attribute) and dotted(node):
            found |= {(last_name(end), node.attr.value) for end in origins(reader, node.value)
                      if isinstance(end, cst.Call) and last_name(end)}  # fmt: skip
    return found


def kept_loaders(reader: Reader) -> set[tuple[str, str]]:
    """(class, attribute) for each DataLoader a method of the file's classes keeps in an attribute of its own
    (`self.train = DataLoader(...)` in Cifar.__init__)."""
    found: set[tuple[str, str]] = set()
    for call in reader.calls:
        assign = reader.parents.get(call)
        cls = next((a for a in reader.ancestors(call) if isinstance(a, cst.ClassDef)), None)
        if cls is None or not isinstance(assign, cst.Assign) or not is_loader(reader, call):
            continue
        found |= {(cls.name.value, spelled.removeprefix("self.")) for target in assign.targets
                  if (spelled := dotted(target.target)).startswith("self.") and spelled.count(".") == 1}  # fmt: skip
    return found


def _trained_here(reader: Reader, feeding: Feeding) -> list[tuple[cst.CSTNode, frozenset[Key]]]:
    """What this file's backward is computed from (each whole), and what it hands to feeding parameters of other
    files (with the keys of it those read)."""
    return [*((node, WHOLE) for node in backward_sources(reader)),
            *(item for call in reader.calls for item in handed(reader, call, feeding))]  # fmt: skip


def _handed_with_keys(call: cst.Call, feeding: Feeding) -> list[tuple[cst.BaseExpression, frozenset[Key]]]:
    """The arguments `call` passes (by position or keyword) for the parameters of a function of another file that
    reach its backward (`feeding`, by the name the call spells: ddpcli.port.program), each with the keys read."""
    if (known := feeding.get(last_name(call))) is None:
        return []
    if known.defined is not None and not trains_at(*known.defined, call):
        return []  # a call that back-propagates nothing (evaluation through the training function)
    params, feeds = known.params, known.feeds
    positional = [arg.value for arg in call.args if arg.keyword is None and not arg.star]
    handed = [(value, feeds[param]) for param, value in zip(params, positional, strict=False) if param in feeds]
    return handed + [(arg.value, feeds[arg.keyword.value]) for arg in call.args
                     if arg.keyword is not None and arg.keyword.value in feeds]  # fmt: skip


def handed(reader: Reader, call: cst.Call, feeding: Feeding) -> list[tuple[cst.BaseExpression, frozenset[Key]]]:
    """What `call` hands to feeding parameters of another file's function, narrowed to the parts that function
    reads: of `(train_loader, val_loader)` handed to a parameter read at position 0, `train_loader` (whole); of a
    value whose parts are not written out here (`make_loaders()` of another file), the value, with the keys."""
    found: list[tuple[cst.BaseExpression, frozenset[Key]]] = []
    for value, keys in _handed_with_keys(call, feeding):
        found += _parts(reader, value, keys)
    return found


def _parts(
    reader: Reader, value: cst.BaseExpression, keys: frozenset[Key]
) -> list[tuple[cst.BaseExpression, frozenset[Key]]]:
    if None in keys:
        return [(value, WHOLE)]
    ends = origins(reader, value, into_containers=False)
    parts: list[tuple[cst.BaseExpression, frozenset[Key]]] = []
    for end in ends:
        if isinstance(end, cst.Tuple | cst.List) and not any(isinstance(e, cst.StarredElement) for e in end.elements):
            parts += [(end.elements[key].value, WHOLE) for key in keys
                      if isinstance(key, int) and -len(end.elements) <= key < len(end.elements)]  # fmt: skip
        elif isinstance(end, cst.Dict):
            parts += [(e.value, WHOLE) for e in end.elements
                      if isinstance(e, cst.DictElement) and literal_value(e.key) in keys]  # fmt: skip
        else:
            return [(value, keys)]  # parts this file does not write out: the value, at the keys read
    return parts


def _where_returned(
    reader: Reader, node: cst.CSTNode, made: frozenset[str], keys: frozenset[Key] = WHOLE
) -> list[tuple[str, Key]]:
    """(function, key) for each call of a function of `made` whose returned value `node` is, or is an item of;
    `keys`: the parts of `node` that are trained on, where not the whole of it."""
    found: list[tuple[str, Key]] = []
    if isinstance(node, cst.Subscript) and _one_index(node):
        key = literal_value(node.slice[0].slice.value)  # type: ignore[union-attr]
        if isinstance(key, str | int) and not isinstance(key, bool):
            found += [(last_name(end), key) for end in origins(reader, node.value, into_containers=False)
                      if isinstance(end, cst.Call) and last_name(end) in made]  # fmt: skip
    for end in origins(reader, node, into_containers=False):
        if isinstance(end, cst.Call) and last_name(end) in made:
            position = _unpacked_at(reader, node, end)
            found += [(last_name(end), position)] if position is not None else [(last_name(end), k) for k in keys]
    return found


def _unpacked_at(reader: Reader, node: cst.CSTNode, call: cst.Call) -> Key:
    """The position `node` (a name) takes in `a, b = call(...)`; None where it is bound to the whole value."""
    if not isinstance(node, cst.Name):
        return None
    assign = reader.parents.get(call)
    if not isinstance(assign, cst.Assign):
        return None
    for target in assign.targets:
        if isinstance(target.target, cst.Tuple | cst.List):
            names = [dotted(element.value) for element in target.target.elements]
            if node.value in names:
                return names.index(node.value)
    return None


def returned_keys(reader: Reader, function: cst.FunctionDef, loader: cst.Call) -> set[Key]:
    """Where `loader` sits in what `function` returns: a dict's key, a tuple's or list's position, None for the
    value itself (`return {"train": DataLoader(...)}`, `return train_loader, val_loader`)."""
    found: set[Key] = set()
    for node in reader.walk(function):
        if not isinstance(node, cst.Return) or node.value is None:
            continue
        if isinstance(node.value, cst.Name):
            found |= {i for i, added in enumerate(_appended_in_order(reader, node.value))
                      if loader in origins(reader, added)}  # fmt: skip
        for end in origins(reader, node.value, into_containers=False):
            if isinstance(end, cst.Dict):
                keys = [literal_value(e.key) for e in end.elements
                        if isinstance(e, cst.DictElement) and loader in origins(reader, e.value)]  # fmt: skip
                found |= {key for key in keys if isinstance(key, str | int)}
            elif isinstance(end, cst.Tuple | cst.List):
                found |= {i for i, e in enumerate(end.elements) if loader in origins(reader, e.value)}
            elif end is loader:
                found.add(None)
    return found


def _appended_in_order(reader: Reader, name: cst.Name) -> list[cst.CSTNode]:
    """What `name`'s function appends to the list it names, each at its position (`ds = []; ds.append(train);
    ds.append(test)`): only where the list starts empty and every append runs once, in order (no loop or branch
    around one); else nothing known."""
    function = _function_of_node(reader, name)
    bound = [n.value for n in reader.walk(function) if isinstance(n, cst.Assign)
             and any(isinstance(t.target, cst.Name) and t.target.value == name.value for t in n.targets)]  # fmt: skip
    if len(bound) != 1 or not (isinstance(bound[0], cst.List) and not bound[0].elements):
        return []
    appends = [n for n in reader.walk(function) if isinstance(n, cst.Call) and isinstance(n.func, cst.Attribute)
               and n.func.attr.value in ADDS and _names(n.func.value, name.value)]  # fmt: skip
    if any(n.func.attr.value != "append" or len(n.args) != 1 for n in appends):  # type: ignore[union-attr]
        return []
    inside = (cst.For, cst.While, cst.If, cst.Try, cst.ListComp)
    if any(isinstance(a, inside) for n in appends for a in reader.ancestors_below(n, function)):
        return []
    return [n.args[0].value for n in appends]


def _passed_through(reader: Reader, start: cst.CSTNode) -> Iterator[cst.Param]:
    """The parameters `start`'s value passes through on its way back to where it is made."""
    seen: set[cst.CSTNode] = set()
    queue = [start]
    while queue and len(seen) < MAX_NODES:
        node = queue.pop()
        if node in seen:
            continue
        seen.add(node)
        if isinstance(node, cst.Param):
            yield node
        queue += _same_value(reader, node)


def loader_functions(reader: Reader, into_containers: bool = False) -> frozenset[str]:
    """The file's functions that return a DataLoader they build (`def make_loader(...): return DataLoader(...)`):
    what another file of the program calls to get its training loader (ddpcli.port.program). A function returning
    a tuple of loaders (`return train_loader, valid_loader`) returns no loader: its value is the tuple; it is one
    of those `into_containers` asks for (the loaders it builds are its file's to shard)."""
    return frozenset(
        name
        for name, function in reader.functions.items()
        if any(
            is_loader(reader, origin)
            for node in reader.walk(function)
            if isinstance(node, cst.Return) and node.value is not None
            for origin in _returned_values(reader, node.value, into_containers)
        )
    )


def _returned_values(reader: Reader, value: cst.BaseExpression, into_containers: bool) -> list[cst.CSTNode]:
    """What a return gives: its value's origins, and, into containers, a dict's values too."""
    ends = origins(reader, value, into_containers=into_containers)
    if not into_containers:
        return ends
    inside = [
        e.value for end in ends if isinstance(end, cst.Dict) for e in end.elements if isinstance(e, cst.DictElement)
    ]
    # `ds.append(loader); return ds`, where each append's position is known (else the names decide, as before)
    inside += _appended_in_order(reader, value) if isinstance(value, cst.Name) else []
    return ends + [origin for element in inside for origin in origins(reader, element)]


PARAMETER_METHODS = ("parameters", "named_parameters")  # nn.Module's own


def parameter_methods(reader: Reader) -> frozenset[str]:
    """The methods of the file's classes that return or yield parameters (`def get_1x_lr_params(self): for p in
    self.backbone.parameters(): yield p`, DeepLab's parameter groups): `model.get_1x_lr_params()` in an optimizer's
    groups names `model` as the model it trains, whichever file of the program calls it."""
    found = set()
    for name, function in reader.functions.items():
        if not any(isinstance(a, cst.ClassDef) for a in reader.ancestors(function)):
            continue
        ends = (node for node in reader.walk(function) if isinstance(node, cst.Return | cst.Yield))
        given = [node.value for node in ends if isinstance(node.value, cst.BaseExpression)]
        if any(_parameters_call(node) for value in given for node in held(reader, value)):
            found.add(name)
    return frozenset(found)


def _parameters_call(node: cst.CSTNode) -> bool:
    return isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and (
        node.func.attr.value in PARAMETER_METHODS)  # fmt: skip


ADDS = ("append", "extend", "insert", "add", "update")  # a container's methods that put values in it


def held(
    reader: Reader, start: cst.CSTNode, depth: int = 0, seen: set[cst.CSTNode] | None = None
) -> Iterator[cst.CSTNode]:
    """Every node of what `start` holds, as far as the script says: its own nodes, and for each name in it what
    the name is bound to (a loop's iterable for its variable) and what the code puts in it where it is built
    (`groups.append(p)`, `groups += [p]`, `groups["params"] = p`, `groups["params"].append(p)`), and for a call of
    the script's own function what it returns, five deep.
    What an optimizer is given is read so: the parameter groups a loop over named_parameters fills."""
    seen = set() if seen is None else seen
    for node in reader.walk(start):
        yield node
        if node in seen or depth >= 5:
            continue
        if isinstance(node, cst.Call):  # the script's function: what it returns
            seen.add(node)
            for value in _returned(reader, node):
                yield from held(reader, value, depth + 1, seen)
        if not isinstance(node, cst.Name) or not reader.is_variable(node):
            continue
        seen.add(node)
        for value in [*reader.values_of(node), *_added_to(reader, node)]:
            if isinstance(value, cst.FunctionDef | cst.ClassDef | cst.Import | cst.ImportFrom):
                continue  # a definition binds the name: what it computes is not what the name holds
            inner = value.iter if isinstance(value, cst.For | cst.CompFor) else value
            yield from held(reader, inner, depth + 1, seen)


def _added_to(reader: Reader, name: cst.Name) -> list[cst.CSTNode]:
    """What the code of `name`'s function puts in the container it names: the arguments of its adding methods
    (also on an item of it: `decay["params"].append(p)`), `+=`'s right side, an item assigned."""
    function = _function_of_node(reader, name)
    found: list[cst.CSTNode] = []
    for node in reader.walk(function):
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value in ADDS:
            if _names(node.func.value, name.value):
                found += [arg.value for arg in node.args]
        elif isinstance(node, cst.AugAssign) and _names(node.target, name.value):
            found.append(node.value)
        elif isinstance(node, cst.Assign):
            found += [node.value for t in node.targets if isinstance(t.target, cst.Subscript)
                      and _names(t.target, name.value)]  # fmt: skip
    return found


def _put_in(reader: Reader, name: cst.Name) -> list[cst.CSTNode]:
    """What the code puts in the container `name` names (_added_to: `losses.append(loss.item())`): what its value
    is computed from, besides its binding (`np.average(losses)` is computed from every loss appended). Read once a
    name and function."""
    cache: dict[tuple[cst.CSTNode, str], list[cst.CSTNode]] = reader.memo.setdefault("put_in", {})
    key = (_function_of_node(reader, name), name.value)
    if key not in cache:
        cache[key] = _added_to(reader, name)
    return cache[key]


def _names(node: cst.CSTNode, name: str) -> bool:
    """`node` is the name, or an item of it (`groups[0]`, `decay["params"]`)."""
    while isinstance(node, cst.Subscript):
        node = node.value
    return isinstance(node, cst.Name) and node.value == name


def _function_of_node(reader: Reader, node: cst.CSTNode) -> cst.CSTNode:
    return next((a for a in reader.ancestors(node) if isinstance(a, cst.FunctionDef)), reader.module)


def origins(
    reader: Reader, start: cst.CSTNode, into_containers: bool = True, training: bool = False
) -> list[cst.CSTNode]:
    """What the value of `start` is (not what it is computed from): followed through names, attributes, loop
    targets, parameters and the script's own functions' returns, never into a call's arguments. The ends: calls
    (`SGD(...)`), literals, and parameters or names nothing in the script binds (where the reading cannot decide).
    A list, tuple or set the script writes is its elements, unless `into_containers` is False (then it is an end:
    what `loaders[1]` is depends on which element). `training`: `start` is what a loop that steps iterates, and a
    parameter's values are those of the calls that can reach its function's backward (as for `sources`)."""
    seen: set[cst.CSTNode] = set()
    queue, found = [start], []
    while queue and len(seen) < MAX_NODES:
        node = queue.pop(0)
        if node in seen:
            continue
        seen.add(node)
        containers = cst.List | cst.Tuple | cst.Set | cst.ListComp | cst.SetComp | cst.GeneratorExp
        same = _same_value(reader, node, training) if into_containers or not isinstance(node, containers) else []
        if same:
            queue += same
        else:
            found.append(node)
    return found


def _same_value(reader: Reader, node: cst.CSTNode, training: bool = False) -> list[cst.CSTNode]:
    """The expressions whose value `node`'s is, one step back; [] at an end."""
    if isinstance(node, cst.Name):
        return [
            value
            for binder in _reaching(reader, node, reader.values_of(node))
            for value in _unpacked(reader, node, binder)
        ]
    if isinstance(node, cst.Attribute) and dotted(node):
        return _attribute_values(reader, dotted(node))
    if isinstance(node, cst.Call):
        return _got(reader, node) or _returned(reader, node)
    if isinstance(node, cst.For | cst.CompFor):
        return [node.iter]
    if isinstance(node, cst.List | cst.Tuple | cst.Set):
        return [element.value for element in node.elements]
    if isinstance(node, cst.ListComp | cst.SetComp | cst.GeneratorExp):
        return [node.elt]  # each element: `[Adam(net.parameters()) for net in nets]`
    if isinstance(node, cst.Param):
        return _arguments(reader, node, training) + _default(node)
    if isinstance(node, cst.Subscript):
        return _keyed(reader, node) or []
    return []


def sources(reader: Reader, start: cst.CSTNode, training: bool = False) -> Iterator[cst.CSTNode]:
    """Every expression `start` is computed from, as far as the script says (breadth first, each once per call
    context). Entering the script's own function through one call (`loss = criterion(out, y)`) and reaching its
    parameter leaves through that call's argument only, not every call of the function: `criterion(...)` also
    called in the evaluation loop does not make the evaluation loader a training one. `training`: `start` is a
    back-propagated loss, and a parameter's values are those of the calls that can reach the function's backward
    (`run_epoch(model, val_loader)` of a `run_epoch` that back-propagates only when given an optimizer is not)."""
    seen: set[tuple[cst.CSTNode, Calls]] = set()
    queue: deque[tuple[cst.CSTNode, Calls]] = deque([(start, ())])
    while queue and len(seen) < MAX_NODES:
        node, calls = queue.popleft()
        if (node, calls) in seen:
            continue
        seen.add((node, calls))
        yield node
        if is_loader(reader, node):
            continue  # the loader itself: what it is built from is not a batch
        queue += _inputs(reader, node, calls, training)


def _inputs(reader: Reader, node: cst.CSTNode, calls: Calls, training: bool) -> list[tuple[cst.CSTNode, Calls]]:
    """What `node`'s value comes from, one step back, each with the calls it was reached through."""
    if isinstance(node, cst.For | cst.CompFor):
        return [(node.iter, calls)]
    if isinstance(node, cst.Param):
        if calls and (argument := _argument_at(reader, node, calls[-1])) is not None:
            return [(argument, calls[:-1])]
        return [(value, ()) for value in _arguments(reader, node, training) + _default(node)]
    if isinstance(node, cst.FunctionDef | cst.ClassDef | cst.Lambda | cst.Import | cst.ImportFrom):
        return []
    if isinstance(node, cst.Subscript):
        keyed = _keyed(reader, node)
        if keyed is not None:
            return [(value, calls) for value in keyed]
    found: list[tuple[cst.CSTNode, Calls]] = []
    for inner in reader.walk(node):
        if isinstance(inner, cst.Name) and reader.is_variable(inner):
            reaching = _reaching(reader, inner, reader.values_of(inner))
            found += [(value, calls) for binder in reaching for value in _counted(reader, inner, binder)]
            found += [(value, calls) for value in _put_in(reader, inner)]
        elif isinstance(inner, cst.Attribute) and dotted(inner):
            found += [(value, calls) for value in _attribute_values(reader, dotted(inner))]
        elif isinstance(inner, cst.Call) and inner is not node and is_loader(reader, inner):
            found.append((inner, calls))
        elif isinstance(inner, cst.Call):
            inside = (*calls, inner)[-MAX_CALLS:]
            found += [(value, inside) for value in _returned(reader, inner)]
    return found


def _keyed(reader: Reader, node: cst.Subscript) -> list[cst.CSTNode] | None:
    """`loaders["train"]`, `pair[0]` of a dict, list or tuple the script writes out: the one element under that
    literal key, not every value of the container; None where the key or the container is not a literal one."""
    if len(node.slice) != 1 or not isinstance(node.slice[0].slice, cst.Index):
        return None
    key = literal_value(node.slice[0].slice.value)
    if key is None:
        return None
    found: list[cst.CSTNode] = []
    for container in origins(reader, node.value, into_containers=False):
        if isinstance(container, cst.Dict):
            found += [
                e.value for e in container.elements if isinstance(e, cst.DictElement) and literal_value(e.key) == key
            ]
        elif isinstance(container, cst.Param) and isinstance(key, str) and _is_star_kwargs(reader, container):
            found += _keyword_arguments(reader, container, key) or [container]  # no call here: undecided
        elif isinstance(container, cst.List | cst.Tuple) and isinstance(key, int) and not isinstance(key, bool):
            elements = [e.value for e in container.elements if not isinstance(e, cst.StarredElement)]
            if len(elements) != len(container.elements) or not -len(elements) <= key < len(elements):
                return None
            found.append(elements[key])
        else:
            return None
    return found or None


def _got(reader: Reader, call: cst.Call) -> list[cst.CSTNode]:
    """`kwargs.get("optimizer")` (with its default, where one is given) of a function's `**kwargs`: the keyword
    argument of that name at each call of the function; [] for any other call."""
    if not isinstance(call.func, cst.Attribute) or call.func.attr.value != "get" or not call.args:
        return []
    key = literal_value(call.args[0].value)
    if not isinstance(key, str):
        return []
    params = [end for end in origins(reader, call.func.value, into_containers=False)]
    if not params or not all(isinstance(p, cst.Param) and _is_star_kwargs(reader, p) for p in params):
        return []
    default = [arg.value for arg in call.args[1:2]]
    passed = [value for param in params for value in _keyword_arguments(reader, param, key)]  # type: ignore[arg-type]
    return (passed or params) + default  # no call of the function here: the parameter, undecided


def _is_star_kwargs(reader: Reader, param: cst.Param) -> bool:
    function = _function_of(reader, param)
    return function is not None and function.params.star_kwarg is param


def _keyword_arguments(reader: Reader, param: cst.Param, key: str) -> list[cst.CSTNode]:
    """What `**kwargs[key]` holds: the argument passed as `key=...` at each call of the parameter's function."""
    function = _function_of(reader, param)
    if function is None:
        return []
    called = _called_as(reader, function)
    return [
        arg.value
        for call in reader.calls
        if last_name(call) == called
        for arg in call.args
        if arg.keyword is not None and arg.keyword.value == key
    ]


def _unpacked(reader: Reader, name: cst.Name, binder: cst.CSTNode) -> list[cst.CSTNode]:
    """For a name a loop unpacks from `zip(a, b)` or `enumerate(a)` (`for net, opt in zip(nets, opts)`), the
    iterable its position takes from (`opts`: an element of it); for one an assignment unpacks from a tuple written
    out (`train, valid = make_loaders()`, `return train_loader, valid_loader`), that element; else the binding."""
    element = _element_bound(reader, name, binder)
    if element is not None:
        return element
    at = _loop_position(binder, name, ("zip", "enumerate"))
    if at is None:
        return [binder]
    call, position, size = at
    arguments = [arg.value for arg in call.args if arg.keyword is None and not arg.star]
    if dotted(call.func) == "enumerate":
        return [arguments[0] if position == 1 and size == 2 and arguments else binder]
    if position is None or len(arguments) != size:
        return [binder]
    return [arguments[position]]


def _element_bound(reader: Reader, name: cst.Name, value: cst.CSTNode) -> list[cst.CSTNode] | None:
    """`a, b = value` binding `name`: the element at its position of each tuple or list `value` may be, where every
    one is written out (through the script's own functions' returns); None where the assignment is no unpacking or
    some value's elements are not known here."""
    assign = reader.parents.get(value)
    if not isinstance(assign, cst.Assign) or assign.value is not value or len(assign.targets) != 1:
        return None
    target = assign.targets[0].target
    if not isinstance(target, cst.Tuple | cst.List) or any(isinstance(e, cst.StarredElement) for e in target.elements):
        return None
    position = next((i for i, e in enumerate(target.elements) if _binds_name(e.value, name)), None)
    if position is None:
        return None
    size, found = len(target.elements), []
    for end in origins(reader, value, into_containers=False):
        elements = end.elements if isinstance(end, cst.Tuple | cst.List) else None
        if elements is None or len(elements) != size or any(isinstance(e, cst.StarredElement) for e in elements):
            return None
        found.append(elements[position].value)
    return found or None


def _counted(reader: Reader, name: cst.Name, binder: cst.CSTNode) -> list[cst.CSTNode]:
    """What a name a loop binds is computed from: for the count of `for i, batch in enumerate(loader)`, enumerate's
    `start` alone (the count is the same whatever the batches hold); for a name unpacked from a tuple written out,
    its element; else the binding itself."""
    element = _element_bound(reader, name, binder)
    if element is not None:
        return element
    at = _loop_position(binder, name, ("enumerate",))
    if at is None or at[1] != 0:
        return [binder]
    call = at[0]
    return [arg.value for arg in call.args[1:2] if not arg.star] + [
        arg.value for arg in call.args if arg.keyword is not None and arg.keyword.value == "start"
    ]


def _loop_position(
    binder: cst.CSTNode, name: cst.Name, unpacking: tuple[str, ...]
) -> tuple[cst.Call, int | None, int] | None:
    """For a loop that unpacks one of `unpacking`'s calls into a tuple (`for i, (x, y) in enumerate(loader)`):
    the call, the position `name` has in the target (None: not directly in it) and the target's length."""
    if not isinstance(binder, cst.For | cst.CompFor) or not isinstance(binder.target, cst.Tuple | cst.List):
        return None
    call = binder.iter
    if not isinstance(call, cst.Call) or dotted(call.func) not in unpacking:
        return None
    elements = binder.target.elements
    position = next((i for i, e in enumerate(elements) if _binds_name(e.value, name)), None)
    return call, position, len(elements)


def _binds_name(target: cst.CSTNode, name: cst.Name) -> bool:
    return isinstance(target, cst.Name) and target.value == name.value


def reaching(reader: Reader, name: cst.Name) -> list[cst.CSTNode]:
    """The bindings of `name` (a read) that reach it, as `sources` follows them (each the node `values_of` gives)."""
    return _reaching(reader, name, reader.values_of(name))


def _reaching(reader: Reader, name: cst.Name, binders: list[cst.CSTNode]) -> list[cst.CSTNode]:
    """The bindings of `name` that reach it, where the scope holds several (`x` bound by the training loop and
    by the evaluation loop of one function): the `for` around it, else the last binding before it in its own
    loop with those in the other branches of the `if` it is in (StarGAN's `if CelebA: data_loader = self.celeba_
    loader elif RaFD: data_loader = self.rafd_loader`), else every binding (the reading is not flow-exact, but a
    later loop's batch never reaches an earlier loss)."""
    around = [b for b in binders if isinstance(b, cst.For | cst.CompFor) and b in set(reader.ancestors(name))]
    if around:
        return around[:1] if len(around) == 1 else [_innermost(reader, name, around)]
    loop = _loop_of(reader, name)
    same = [b for b in binders if loop is None or loop in set(reader.ancestors(b))] or binders
    before = sorted((b for b in same if b in reader.positions and reader.line(b) <= reader.line(name)), key=reader.line)
    return _branches(reader, name, before) if before else same


def _branches(reader: Reader, name: cst.Name, before: list[cst.CSTNode]) -> list[cst.CSTNode]:
    """The last of `before` (bindings in source order), and, where it is bound in a branch of an `if` that `name` is
    not in, or in a loop it is not in (`total += loss.item()` in the batches' loop, read after it), every binding
    in that `if`'s branches or that loop, with what reaches it where no `else` closes it (a loop may not run)."""
    last = before[-1]
    around_name = set(reader.ancestors(name))
    branching = [a for a in reader.ancestors(last) if isinstance(a, cst.If | cst.For | cst.While)
                 and a not in around_name]  # fmt: skip
    if not branching:
        return [last]
    outer = branching[-1]
    inside = set(reader.walk(outer))
    within = [b for b in before if b in inside]
    earlier = [b for b in before if b not in inside]
    closed = isinstance(outer, cst.If) and _closed(outer)
    return within + (_branches(reader, name, earlier) if earlier and not closed else [])


def _closed(statement: cst.If) -> bool:
    """An `if` / `elif` chain that ends in `else`: one of its branches always runs."""
    orelse = statement.orelse
    return isinstance(orelse, cst.Else) or (isinstance(orelse, cst.If) and _closed(orelse))


def _innermost(reader: Reader, name: cst.Name, loops: list[cst.CSTNode]) -> cst.CSTNode:
    return next(a for a in reader.ancestors(name) if a in loops)


def _loop_of(reader: Reader, node: cst.CSTNode) -> cst.CSTNode | None:
    """The innermost loop holding `node` within its function (None: straight-line code)."""
    for ancestor in reader.ancestors(node):
        if isinstance(ancestor, cst.FunctionDef):
            return None
        if isinstance(ancestor, cst.For | cst.While):
            return ancestor
    return None


def _attribute_values(reader: Reader, spelled: str) -> list[cst.CSTNode]:
    """`self.loader`: the values assigned to that spelling anywhere in the script (`self.loader = DataLoader(..)`;
    unpacked, `self.train_loader, self.val_loader, n = make_data_loader(args)`: the element where the right side
    is written out, else the whole value, the call it is unpacked from)."""
    found: list[cst.CSTNode] = []
    for statement in reader.order:
        if not isinstance(statement, cst.Assign):
            continue
        for target in statement.targets:
            if dotted(target.target) == spelled:
                found.append(statement.value)
            elif isinstance(target.target, cst.Tuple | cst.List):
                found += _element_assigned(target.target, statement.value, spelled)
    return found


def _element_assigned(target: cst.Tuple | cst.List, value: cst.BaseExpression, spelled: str) -> list[cst.CSTNode]:
    elements = target.elements
    position = next((i for i, e in enumerate(elements) if dotted(e.value) == spelled), None)
    if position is None or any(isinstance(e, cst.StarredElement) for e in elements):
        return []
    if isinstance(value, cst.Tuple | cst.List) and len(value.elements) == len(elements):
        return [value.elements[position].value]
    return [value]


def _returned(reader: Reader, call: cst.Call) -> list[cst.CSTNode]:
    """A call of the script's own function: what it returns (`make_loader(...)`, `train_step(model, batch)`), a
    lambda's body where the name called is bound to one (`make_optimizer = lambda m: SGD(m.parameters())`)."""
    function = reader.functions.get(last_name(call)) if dotted(call.func) else None
    if function is None:
        return [lam.body for lam in lambdas_called(reader, call)]
    return [node.value for node in reader.walk(function) if isinstance(node, cst.Return) and node.value is not None]


def lambdas_called(reader: Reader, call: cst.Call) -> list[cst.Lambda]:
    """The lambdas a call's name is bound to in its scope."""
    if not isinstance(call.func, cst.Name) or call.func not in reader.parents:
        return []
    return [value for value in reader.values_of(call.func) if isinstance(value, cst.Lambda)]


def _arguments(reader: Reader, param: cst.Param, training: bool = False) -> list[cst.CSTNode]:
    """A parameter's values: the argument passed for it at each call of its function (by position or keyword);
    `training`: at each call that can reach the function's backward."""
    function = _function_of(reader, param)
    if function is None:
        return []
    called = _called_as(reader, function)
    return [
        argument
        for call in reader.calls
        if last_name(call) == called
        and (argument := _argument_at(reader, param, call)) is not None
        and (not training or trains_at(reader, function, call))
    ]


def _default(param: cst.Param) -> list[cst.CSTNode]:
    """A parameter's default: its value at a call that passes nothing for it (`snapshot_path="snapshot.pt"`)."""
    return [param.default] if param.default is not None else []


def _argument_at(reader: Reader, param: cst.Param, call: cst.Call) -> cst.CSTNode | None:
    """The argument `call` passes for `param` (by position or keyword); None where `call` is not a call of the
    parameter's function or passes nothing for it."""
    function = _function_of(reader, param)
    if function is None or last_name(call) != _called_as(reader, function):
        return None
    params = list(function.params.params)
    index = next((i for i, p in enumerate(params) if p is param), None)
    if index is not None and params and params[0].name.value in ("self", "cls"):
        index -= 1
    positional = [arg for arg in call.args if arg.keyword is None and not arg.star]
    if index is not None and 0 <= index < len(positional):
        return positional[index].value
    return next((arg.value for arg in call.args if arg.keyword is not None and arg.keyword.value == param.name.value),
                None)  # fmt: skip


def _function_of(reader: Reader, param: cst.Param) -> cst.FunctionDef | None:
    return next((a for a in reader.ancestors(param) if isinstance(a, cst.FunctionDef)), None)


def _called_as(reader: Reader, function: cst.FunctionDef) -> str:
    """The name a call of `function` spells: its own, or its class's for `__init__` (`Trainer(model, optimizer)`)."""
    if function.name.value == "__init__":
        return next((a.name.value for a in reader.ancestors(function) if isinstance(a, cst.ClassDef)), "__init__")
    return function.name.value
