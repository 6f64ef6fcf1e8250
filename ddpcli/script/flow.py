"""Where the training data flows in a program, read backwards from the loss it back-propagates: the training
loader is the one whose batches reach `loss.backward()`, whatever it is called (`train_loader`, `dataloaders[phase]`,
a loader built in a function, one iterated inline in the `for`). A name decides nothing: a script's "train" loader
may be `dl_a`, and its test loader may be called `train_eval_loader`.

Across the files of a program (ddpcli.port.program): which functions' parameters feed a loss and at which keys,
what a file hands to another's such parameters, which functions return loaders and where in their value the
trained ones sit. The walks themselves (what a value is, what it is computed from) are ddpcli.script.values'.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

import libcst as cst

from ddpcli.script import guards
from ddpcli.script.reader import Reader, dotted, last_name, literal_value
from ddpcli.script.values import (
    ADDS,
    MAX_NODES,
    backward_calls,
    called_as,
    enclosing_function,
    function_of,
    held,
    is_loader,
    names_or_item,
    origins,
    same_value,
    sources,
    trains_at,
)


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
        function = function_of(reader, node) if isinstance(node, cst.Param) else None
        if function is None or not isinstance(node, cst.Param):
            continue
        params = tuple(p.name.value for p in function.params.params if p.name.value not in ("self", "cls"))
        feeds = found.setdefault(called_as(reader, function), (params, {}))[1]
        feeds.setdefault(node.name.value, set()).update(_parameter_keys(reader, node, on_path))
        defined[called_as(reader, function)] = (reader, function)
    return _frozen(found, defined)


def _frozen(
    found: dict[str, tuple[tuple[str, ...], dict[str, set[Key]]]], defined: dict[str, tuple[Reader, cst.FunctionDef]]
) -> Feeding:
    return {
        name: Fed(params, {p: frozenset(keys) for p, keys in feeds.items()}, defined.get(name))
        for name, (params, feeds) in found.items()
    }


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
    attribute of that spelling (as ddpcli.script.values follows one)."""
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
                function = function_of(reader, node)
                if function is None:
                    continue
                names = tuple(p.name.value for p in function.params.params if p.name.value not in ("self", "cls"))
                feeds = found.setdefault(called_as(reader, function), (names, {}))[1]
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
    """(function, key) for each call of a function of `made` whose returned value `node` is, or is an item of
    (`loaders["train"]`, or a name bound to it: `train_dl = loaders["train"]`, cs230's); `keys`: the parts of
    `node` that are trained on, where not the whole of it."""
    found: list[tuple[str, Key]] = []
    ends = origins(reader, node, into_containers=False)
    for item in [node, *(end for end in ends if end is not node)]:
        if isinstance(item, cst.Subscript) and _one_index(item):
            key = literal_value(item.slice[0].slice.value)  # type: ignore[union-attr]
            if isinstance(key, str | int) and not isinstance(key, bool):
                found += [(last_name(end), key) for end in origins(reader, item.value, into_containers=False)
                          if isinstance(end, cst.Call) and last_name(end) in made]  # fmt: skip
    for end in ends:
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
            for key, stored in _stored_under_keys(reader, node.value):
                if loader in origins(reader, stored):
                    found |= _keys_stored_under(reader, function, key, loader)
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
    function = enclosing_function(reader, name)
    bound = [n.value for n in reader.walk(function) if isinstance(n, cst.Assign)
             and any(isinstance(t.target, cst.Name) and t.target.value == name.value for t in n.targets)]  # fmt: skip
    if len(bound) != 1 or not (isinstance(bound[0], cst.List) and not bound[0].elements):
        return []
    appends = [n for n in reader.walk(function) if isinstance(n, cst.Call) and isinstance(n.func, cst.Attribute)
               and n.func.attr.value in ADDS and names_or_item(n.func.value, name.value)]  # fmt: skip
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
        queue += same_value(reader, node)


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
    if isinstance(value, cst.Name):
        # `ds.append(loader); return ds`, where each append's position is known (else the names decide, as before)
        inside += _appended_in_order(reader, value)
        inside += [stored for _, stored in _stored_under_keys(reader, value)]  # `loaders[split] = dl`
    return ends + [origin for element in inside for origin in origins(reader, element)]


def _stored_under_keys(reader: Reader, name: cst.Name) -> list[tuple[cst.BaseExpression, cst.BaseExpression]]:
    """`name[key] = value` in `name`'s function (a dict of loaders filled key by key): (key, value) each."""
    found = []
    for node in reader.walk(enclosing_function(reader, name)):
        if not isinstance(node, cst.Assign):
            continue
        for target in node.targets:
            item = target.target
            if (isinstance(item, cst.Subscript) and isinstance(item.value, cst.Name) and item.value.value == name.value
                    and _one_index(item)):  # fmt: skip
                found.append((item.slice[0].slice.value, node.value))  # type: ignore[union-attr]
    return found


def _keys_stored_under(
    reader: Reader, function: cst.FunctionDef, key: cst.BaseExpression, loader: cst.Call
) -> set[Key]:
    """The keys `loader` is stored under by `name[key] = ...`: a literal key; or, for the variable of a loop over
    literals around the assignment (`for split in ["train", "val"]`), each literal under which the loader can be
    built there (`if split == "train": dl = DataLoader(...)`: ddpcli.script.guards); else none known."""
    literal = literal_value(key)
    if isinstance(literal, str | int) and not isinstance(literal, bool):
        return {literal}
    if not isinstance(key, cst.Name):
        return set()
    loops = [a for a in reader.ancestors(key) if isinstance(a, cst.For) and isinstance(a.target, cst.Name)
             and a.target.value == key.value and isinstance(a.iter, cst.List | cst.Tuple)]  # fmt: skip
    if not loops:
        return set()
    values = [literal_value(element.value) for element in loops[0].iter.elements]  # type: ignore[union-attr]
    return {
        value
        for value in values
        if isinstance(value, str | int)
        and not isinstance(value, bool)
        and guards.can_run(reader, function, loader, {key.value: value})
    }


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
