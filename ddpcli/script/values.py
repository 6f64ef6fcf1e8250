"""What a value of a script is, and what it is computed from, read from its source without running it: the
bindings a name reaches (ddpcli.script.reader's scopes, narrowed by flow: the `for` around a read, the last binding
before it, an `if`'s branches), a loop's iterable for its variable, a parameter's arguments at its function's calls,
a call of the script's own function through what it returns, the elements of the containers the script writes out.

`origins` answers what a value is (`opt` is `SGD(...)`), `sources` what it is computed from (a loss from its batch,
its batch from a loader), `held` what a container holds (what the code puts in it). ddpcli.script.flow asks these of
a loss to find the training loaders and what a program's files hand each other. Every walk is bounded (MAX_NODES).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator

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


def trains_at(reader: Reader, function: cst.FunctionDef, call: cst.Call) -> bool:
    """Whether `call` (of this file or another) of `function` (of `reader`'s file) can reach a backward of the
    function's own: `run_epoch(model, val_loader)` of a run_epoch that back-propagates only when given an optimizer
    cannot (ddpcli.script.guards)."""
    backwards = reader.memo.setdefault("backward_calls", {})
    if None not in backwards:
        backwards[None] = backward_calls(reader)
    return guards.trains_at(reader, function, backwards[None], call)


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
    function = enclosing_function(reader, name)
    found: list[cst.CSTNode] = []
    for node in reader.walk(function):
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value in ADDS:
            if names_or_item(node.func.value, name.value):
                found += [arg.value for arg in node.args]
        elif isinstance(node, cst.AugAssign) and names_or_item(node.target, name.value):
            found.append(node.value)
        elif isinstance(node, cst.Assign):
            found += [node.value for t in node.targets if isinstance(t.target, cst.Subscript)
                      and names_or_item(t.target, name.value)]  # fmt: skip
    return found


def _put_in(reader: Reader, name: cst.Name) -> list[cst.CSTNode]:
    """What the code puts in the container `name` names (_added_to: `losses.append(loss.item())`): what its value
    is computed from, besides its binding (`np.average(losses)` is computed from every loss appended). Read once a
    name and function."""
    cache: dict[tuple[cst.CSTNode, str], list[cst.CSTNode]] = reader.memo.setdefault("put_in", {})
    key = (enclosing_function(reader, name), name.value)
    if key not in cache:
        cache[key] = _added_to(reader, name)
    return cache[key]


def names_or_item(node: cst.CSTNode, name: str) -> bool:
    """`node` is the name, or an item of it (`groups[0]`, `decay["params"]`)."""
    while isinstance(node, cst.Subscript):
        node = node.value
    return isinstance(node, cst.Name) and node.value == name


def enclosing_function(reader: Reader, node: cst.CSTNode) -> cst.CSTNode:
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
        same = same_value(reader, node, training) if into_containers or not isinstance(node, containers) else []
        if same:
            queue += same
        else:
            found.append(node)
    return found


def same_value(reader: Reader, node: cst.CSTNode, training: bool = False) -> list[cst.CSTNode]:
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
    function = function_of(reader, param)
    return function is not None and function.params.star_kwarg is param


def _keyword_arguments(reader: Reader, param: cst.Param, key: str) -> list[cst.CSTNode]:
    """What `**kwargs[key]` holds: the argument passed as `key=...` at each call of the parameter's function."""
    function = function_of(reader, param)
    if function is None:
        return []
    called = called_as(reader, function)
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
    function = function_of(reader, param)
    if function is None:
        return []
    called = called_as(reader, function)
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
    function = function_of(reader, param)
    if function is None or last_name(call) != called_as(reader, function):
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


def function_of(reader: Reader, param: cst.Param) -> cst.FunctionDef | None:
    return next((a for a in reader.ancestors(param) if isinstance(a, cst.FunctionDef)), None)


def called_as(reader: Reader, function: cst.FunctionDef) -> str:
    """The name a call of `function` spells: its own, or its class's for `__init__` (`Trainer(model, optimizer)`)."""
    if function.name.value == "__init__":
        return next((a.name.value for a in reader.ancestors(function) if isinstance(a, cst.ClassDef)), "__init__")
    return function.name.value
