"""The layers of ddpcli/ hold: each module's imports (module-level, inside functions and under TYPE_CHECKING), read
with `ast`.

The package is cut by feature, and the features are in an order (ORDER; docs/architecture.md): a feature imports
only its own modules and the features below it, never one above it or beside it:
    cli > the commands' features (export and port build on compare's and init's reading: they sit one step above
    init, launch, compare and slurm) > diagnosis > experiment > rundir > leaves.
Leaves import only leaves (errors, jsonvalues, arithmetic, noise_scale, prediction, script, and the run
directory's names and CPU-list format, which the worker writes by). The worker side (ddpcli.worker, ddpcli.runtime,
ddpcli.examples) imports only itself and leaves. A failure names the import: module, line, what it imports.

Inside each feature a module is one of four kinds:
    pure    the logic: experiment files, planning, run records, the merge, findings, comparison, sbatch text. Never
            torch, numpy, matplotlib, rich, typer or click, and no host, cli or worker module.
    host    runs or reads things on the launching machine (torchrun, a script's --help, parameter files): imports
            pure modules; torch only inside functions; never rich, typer, cli or worker.
    worker  code inside training processes: imports pure modules and torch, never host or cli, never rich or typer,
            and never pydantic at module level, directly or through what it imports (it costs every process ~90 ms).
    cli     the Typer app and its Rich rendering: imports pure and host, never worker; torch only inside functions;
            renderers (ddpcli.cli.render) take data and import no host module.
`ddpcli.runtime` (the facade training scripts import) and `ddpcli.examples` belong to the worker side;
`ddpcli/__init__.py` and `ddpcli/__main__.py` are the package's door. Module-level imports between ddpcli modules
form no cycle, and no import inside a function closes one. Self-contained on purpose (no import-linter): the
rules are a dozen lines and run with pytest.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.helpers import HOST_MODULES

PACKAGE = REPO / "ddpcli"
NEVER_IN_PURE = ("torch", "numpy", "matplotlib", "rich", "typer", "click")
WORKER_SIDE = ("ddpcli.worker", "ddpcli.runtime", "ddpcli.examples")
LEAVES = (
    "ddpcli.errors",
    "ddpcli.jsonvalues",
    "ddpcli.arithmetic",
    "ddpcli.noise_scale",
    "ddpcli.prediction",
    "ddpcli.script",
    "ddpcli.rundir.layout",  # the run directory's names: the worker writes by them, every feature reads by them
    "ddpcli.rundir.cpu_list",  # the CPU-list text of a rank's `timing` row: written by the worker, read by diagnosis
)
ORDER = (  # top to bottom; a feature of a tier imports the tiers below its own
    ("ddpcli.cli",),
    ("ddpcli.export", "ddpcli.port"),  # export reads runs as compare does; port reads a script as init does
    ("ddpcli.init", "ddpcli.launch", "ddpcli.compare", "ddpcli.slurm"),
    ("ddpcli.diagnosis",),
    ("ddpcli.experiment",),
    ("ddpcli.rundir",),
    LEAVES,
)
# Imports against the order, each allowed until the issue named removes it (test_every_exception_is_still_taken).
EXCEPTIONS: dict[tuple[str, str], str] = {}
FEATURES = tuple(feature for tier in ORDER[1:] for feature in tier)  # the pure kind's, and the host modules'


@dataclass(frozen=True)
class Import:
    importer: str  # the module that imports
    target: str  # the module imported (for `from a import b`: a.b when that is a module, else a)
    in_function: bool  # inside a def or lambda: runs only when called
    type_only: bool  # under `if TYPE_CHECKING:`: never runs
    line: int = 0  # where, in the importer's file


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def _is_type_checking(node: ast.If) -> bool:
    return isinstance(node.test, ast.Name | ast.Attribute) and "TYPE_CHECKING" in ast.unparse(node.test)


def _absolute(module: str, node: ast.ImportFrom, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - node.level + 1]
    return ".".join([*base, *([node.module] if node.module else [])])


def imports_of(module: str) -> Iterator[Import]:
    path = MODULES[module]
    is_package = path.name == "__init__.py"

    def visit(node: ast.AST, in_function: bool, type_only: bool) -> Iterator[Import]:
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(module, alias.name, in_function, type_only, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            source = _absolute(module, node, is_package)
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                target = submodule if submodule in MODULES else source
                yield Import(module, target, in_function, type_only, node.lineno)
        for child in ast.iter_child_nodes(node):
            nested = in_function or isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
            typed = type_only or (isinstance(node, ast.If) and _is_type_checking(node) and child in node.body)
            yield from visit(child, nested, typed)

    yield from visit(ast.parse(path.read_text(encoding="utf-8")), False, False)


ALL_IMPORTS = [found for module in MODULES for found in imports_of(module)]


def _within(name: str, *prefixes: str) -> bool:
    return any(name == prefix or name.startswith(prefix + ".") for prefix in prefixes)


def layer_of(module: str) -> str:
    if _within(module, *HOST_MODULES):
        return "host"
    if _within(module, *FEATURES):
        return "pure"
    if _within(module, "ddpcli.cli"):
        return "cli"
    return "worker" if _within(module, *WORKER_SIDE) else "door"


def violation(found: Import) -> str | None:
    """Why this import breaks the layering, or None."""
    layer, target = layer_of(found.importer), found.target
    runtime_torch = _within(target, "torch") and not found.in_function and not found.type_only
    forbidden: dict[str, tuple[bool, str]] = {
        "pure": (
            _within(target, "ddpcli.cli", *HOST_MODULES, *WORKER_SIDE, *NEVER_IN_PURE),
            "a pure module imports no host, cli or worker module and never torch, numpy, matplotlib, rich or typer",
        ),
        "host": (
            _within(target, "ddpcli.cli", *WORKER_SIDE, "rich", "typer", "click") or runtime_torch,
            "host imports only pure modules (torch only inside functions)",
        ),
        "worker": (
            _within(target, *HOST_MODULES, "ddpcli.cli", "rich", "typer", "click"),
            "worker imports only pure modules, never rich or typer",
        ),
        "cli": (
            _within(target, *WORKER_SIDE)
            or runtime_torch
            or (_within(found.importer, "ddpcli.cli.render") and _within(target, *HOST_MODULES)),
            "cli imports pure and host modules, never worker (renderers no host either); torch only inside functions",
        ),
        "door": (_within(target, "torch", *WORKER_SIDE), "importing ddpcli (or python -m ddpcli) stays light"),
    }
    broken, rule = forbidden[layer]
    return f"{found.importer} imports {target}: {rule}" if broken else None


def test_the_scan_sees_every_layer_and_both_kinds_of_import() -> None:
    """Guards the test itself: a scan that found nothing would pass every rule below."""
    assert {layer_of(module) for module in MODULES} == {"pure", "host", "worker", "cli", "door"}
    host_params = [found for found in ALL_IMPORTS if found.importer == "ddpcli.rundir.params"]
    assert any(found.target == "torch" and found.in_function for found in host_params)
    assert any(found.target == "ddpcli.rundir.param_diff" and not found.in_function for found in host_params)
    run_types = [found for found in ALL_IMPORTS if found.importer == "ddpcli.experiment.resolved"]
    assert any(found.target == "ddpcli.experiment.schema" and found.type_only for found in run_types)


@pytest.mark.parametrize("layer", ["pure", "host", "worker", "cli", "door"])
def test_no_layer_imports_upward_or_sideways(layer: str) -> None:
    problems = [problem for found in ALL_IMPORTS if layer_of(found.importer) == layer and (problem := violation(found))]
    assert problems == []


@pytest.mark.parametrize(
    ("found", "expected"),
    [
        (Import("ddpcli.experiment.planning", "rich.console", False, False), "a pure module imports no host"),
        (Import("ddpcli.experiment.outlook", "ddpcli.rundir.params", True, False), "a pure module imports no host"),
        (Import("ddpcli.compare.table", "numpy", True, False), "never torch, numpy"),
        (Import("ddpcli.rundir.merge", "ddpcli.launch.sweep", False, False), "a pure module imports no host"),
        (Import("ddpcli.cli.render.compare", "ddpcli.rundir.params", True, False), "renderers no host"),
        (Import("ddpcli.rundir.params", "torch", False, False), "torch only inside functions"),
        (Import("ddpcli.worker.stream", "ddpcli.cli.console", False, False), "worker imports only pure modules"),
        (Import("ddpcli.cli.commands.plan", "ddpcli.runtime", True, False), "never worker"),
        (Import("ddpcli.cli.app", "torch", False, False), "torch only inside functions"),
    ],
)
def test_the_rules_catch_what_they_forbid(found: Import, expected: str) -> None:
    assert expected in (violation(found) or "")


def test_host_and_cli_may_import_torch_inside_functions() -> None:
    assert violation(Import("ddpcli.rundir.params", "torch", True, False)) is None
    assert violation(Import("ddpcli.cli.commands.compare", "torch", True, False)) is None


def feature_of(module: str) -> str | None:
    """The feature a module belongs to: the longest name in ORDER or WORKER_SIDE it is within (None: the door)."""
    names = [name for tier in ORDER for name in tier] + list(WORKER_SIDE)
    return max((name for name in names if _within(module, name)), key=len, default=None)


def tier_of(feature: str) -> int:
    return next(index for index, tier in enumerate(ORDER) if feature in tier)


def where(found: Import) -> str:
    path = MODULES[found.importer].relative_to(REPO) if found.importer in MODULES else found.importer
    how = " (inside a function)" if found.in_function else " (under TYPE_CHECKING)" if found.type_only else ""
    return f"{path}:{found.line}: {found.importer} imports {found.target}{how}"


def order_violation(found: Import) -> str | None:
    """Why this import goes against the order of features, or None."""
    if not _within(found.target, "ddpcli") or found.target == "ddpcli":  # another package; the door's __version__
        return None
    mine, theirs = feature_of(found.importer), feature_of(found.target)
    if mine is None or mine == theirs or (found.importer, found.target) in EXCEPTIONS:
        return None
    order = " > ".join(", ".join(name.removeprefix("ddpcli.") for name in tier) for tier in ORDER)
    if mine in WORKER_SIDE:
        if theirs in WORKER_SIDE or theirs in LEAVES:
            return None
        return f"{where(found)}: the worker side imports only itself and leaves ({', '.join(LEAVES)})"
    if theirs is None or theirs in WORKER_SIDE:
        return f"{where(found)}: the host side imports neither the worker side nor the package's door"
    if tier_of(theirs) > tier_of(mine) or (mine in LEAVES and theirs in LEAVES):
        return None
    side = "beside" if tier_of(theirs) == tier_of(mine) else "above"
    return (
        f"{where(found)}: {theirs} is {side} {mine}, which imports only what is below it. The order, top to bottom: "
        f"{order} (tests/test_layers.py ORDER; docs/architecture.md)"
    )


def test_every_module_has_a_place_in_the_order() -> None:
    """A new package must be placed in ORDER (or be the worker side's) before the order can say anything of it."""
    placed = {module for module in MODULES if feature_of(module) is not None}
    assert set(MODULES) - placed == {"ddpcli", "ddpcli.__main__"}


def test_no_feature_imports_above_or_beside_itself() -> None:
    problems = [problem for found in ALL_IMPORTS if (problem := order_violation(found))]
    assert problems == [], "\n".join(problems)


def test_every_exception_is_still_taken() -> None:
    """An exception whose import is gone (its issue done) is removed from EXCEPTIONS, so the list stays short."""
    taken = {(found.importer, found.target) for found in ALL_IMPORTS}
    assert [pair for pair in EXCEPTIONS if pair not in taken] == []


@pytest.mark.parametrize(
    ("found", "expected"),
    [
        (Import("ddpcli.rundir.merge", "ddpcli.diagnosis.parallel", True, False, 7), "is above ddpcli.rundir"),
        (Import("ddpcli.experiment.planning", "ddpcli.launch.argv", False, False), "launch is above ddpcli.experiment"),
        (Import("ddpcli.compare.lost", "ddpcli.launch.supervisor", True, False), "launch is beside ddpcli.compare"),
        (Import("ddpcli.diagnosis.notes", "ddpcli.compare.row", False, True), "compare is above ddpcli.diagnosis"),
        (Import("ddpcli.rundir.record", "ddpcli.rundir.layout", False, False), None),
        (Import("ddpcli.errors", "ddpcli.rundir.record", False, False), "rundir is above ddpcli.errors"),
        (Import("ddpcli.worker.allreduce_probe", "ddpcli.experiment.predict", False, False), "the worker side imports"),
        (Import("ddpcli.worker.stream", "ddpcli.rundir.layout", False, False), None),
        (Import("ddpcli.launch.sweep", "ddpcli.worker.stream", True, False), "imports neither the worker side"),
        (Import("ddpcli.export.runs", "ddpcli.compare.row", False, False), None),
        (Import("ddpcli.script.source", "ddpcli.errors", False, False), None),
    ],
)
def test_the_order_catches_what_it_forbids(found: Import, expected: str | None) -> None:
    problem = order_violation(found)
    if expected is None:
        assert problem is None
    else:
        assert problem is not None and expected in problem
        assert f":{found.line}: {found.importer} imports {found.target}" in problem  # where, and what


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph as a path [a, b, ..., a], or None (depth-first search with three colours)."""
    state: dict[str, str] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        stack.append(node)
        for successor in sorted(graph.get(node, ())):
            if state.get(successor) == "open":
                return [*stack[stack.index(successor) :], successor]
            if successor not in state and (cycle := visit(successor)):
                return cycle
        stack.pop()
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def import_graph(include_deferred: bool, include_type_only: bool = False) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {module: set() for module in MODULES}
    for found in ALL_IMPORTS:
        runs = (include_type_only or not found.type_only) and (include_deferred or not found.in_function)
        if runs and found.target in MODULES and found.target != found.importer:
            graph[found.importer].add(found.target)
    return graph


def test_module_level_imports_between_ddpcli_modules_have_no_cycle() -> None:
    assert find_cycle(import_graph(include_deferred=False)) is None


def test_no_cycle_hides_behind_an_import_inside_a_function() -> None:
    """A deferred import only postpones a cycle (planning and notes once imported each other that way)."""
    assert find_cycle(import_graph(include_deferred=True)) is None


def test_no_cycle_hides_behind_type_checking() -> None:
    """A type-only import still says which module depends on which: the types that modules share live below them
    (prediction.comm and .contention once took Target back from predict, which imports them)."""
    assert find_cycle(import_graph(include_deferred=True, include_type_only=True)) is None


def test_find_cycle_finds_one() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def module_level_closure(start: str) -> set[str]:
    """Every module (ddpcli's and third-party top-level names) that importing `start` runs, at module level."""
    seen: set[str] = set()
    todo = [start]
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        for found in imports_of(module):
            if found.in_function or found.type_only:
                continue
            if found.target in MODULES:
                todo.append(found.target)
            else:
                seen.add(found.target.split(".")[0])
    return seen


@pytest.mark.parametrize("entry", ["ddpcli.worker.observer.entry", "ddpcli.worker.runtime", "ddpcli.worker.stream"])
def test_the_worker_side_never_loads_pydantic(entry: str) -> None:
    """Every training process imports the worker side: pydantic would cost each of them ~90 ms at start."""
    closure = module_level_closure(entry)
    assert "torch" in closure or entry.endswith("entry")  # the scan follows imports
    assert "pydantic" not in closure


def _builds_a_finding(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
    return name == "Finding"


def test_only_diagnosis_builds_a_finding() -> None:
    """What ddpcli concludes about a run is diagnosis's (issue 40): the run directory's format defines the Finding
    record, compare and launch carry them, and no module outside ddpcli.diagnosis makes one."""
    builders = [
        f"{module}:{node.lineno}"
        for module, path in MODULES.items()
        if not _within(module, "ddpcli.diagnosis")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if _builds_a_finding(node)
    ]
    assert builders == []
    made_in_diagnosis = [
        module
        for module, path in MODULES.items()
        if _within(module, "ddpcli.diagnosis")
        and any(_builds_a_finding(node) for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))))
    ]
    assert len(made_in_diagnosis) >= 5  # the scan sees the calls it forbids elsewhere
