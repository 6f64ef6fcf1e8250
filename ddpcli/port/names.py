"""The names the port adds (`_ddp`, `_is_main`, `_DDPModel`, `os`, `dist`, ...) against the script's own: where the
script binds one of them to something else (or may: a name it uses that a star import could bind), the port's is
renamed (`_is_main` -> `_is_main_`, `import os as os_`) and the script's own stays as it was.

The rules write the names as they are; the rename runs over the written tree: the script's own uses of a taken name
are set aside first (a placeholder on each of its nodes), then every other use of it, which the port wrote, gets
the new name, and the script's come back."""

from __future__ import annotations

import libcst as cst

from ddpcli.port.facts import Facts, import_aliases
from ddpcli.script.reader import binds

# name -> what it must be where the port uses it: a module or class imported under it, or None (defined by the port)
ADDED: dict[str, str | None] = {
    "os": "os", "torch": "torch", "dist": "torch.distributed", "contextlib": "contextlib",
    "DistributedDataParallel": "torch.nn.parallel.DistributedDataParallel",
    "DistributedSampler": "torch.utils.data.distributed.DistributedSampler",
    **dict.fromkeys(("_ddp", "_ddp_rank", "_ddp_world", "_ddp_local_rank", "_is_main", "_ddp_setup", "_DDPModel",
                     "_ddp_shard", "_ddp_epoch", "_ddp_seed", "_ddp_seeded", "_ddp_quiet", "_ddp_shared",
                     "_ddp_map_location", "_ddp_data_parallel",
                     "_ddp_device", "_DDPLoader", "_ddp_same", "_ddp_any")),
    "weakref": "weakref",
}  # fmt: skip
PLACEHOLDER = "__ddpcli_script_name__"


def _spelled(facts: Facts) -> dict[str, list[cst.Name]]:
    """Each name the script spells as a variable (not an attribute, a keyword or a module path), with its nodes."""
    found: dict[str, list[cst.Name]] = {}
    for node in facts.order:
        if not isinstance(node, cst.Name):
            continue
        parent = facts.parents.get(node)
        if isinstance(parent, cst.Attribute) and parent.attr is node:
            continue
        if isinstance(parent, cst.Arg) and parent.keyword is node:
            continue
        if any(isinstance(a, cst.ImportFrom) and a.module is not None and _within(facts, node, a.module)
               for a in facts.ancestors(node)):  # fmt: skip
            continue
        found.setdefault(node.value, []).append(node)
    return found


def _within(facts: Facts, node: cst.CSTNode, container: cst.CSTNode) -> bool:
    return node is container or any(a is container for a in facts.ancestors(node))


def taken(facts: Facts) -> dict[str, str]:
    """The port's names the script takes, each with the name the port uses instead."""
    imports: dict[str, set[str]] = {}
    for node in facts.order:
        if isinstance(node, cst.Import | cst.ImportFrom):
            for local, full in import_aliases(node):
                imports.setdefault(local, set()).add(full)
    spelled = _spelled(facts)
    renames: dict[str, str] = {}
    for name, origin in ADDED.items():
        if name not in spelled:
            continue
        uses = spelled[name]
        only_imports = all(_is_import_name(facts, node) or not binds(facts, node) for node in uses)
        if origin is not None and imports.get(name) == {origin} and only_imports:
            continue
        new = f"{name}_"
        while new in spelled or new in ADDED or new in renames.values():
            new += "_"
        renames[name] = new
    return renames


def _is_import_name(facts: Facts, node: cst.Name) -> bool:
    return any(isinstance(a, cst.Import | cst.ImportFrom) for a in facts.ancestors(node))


def set_aside(facts: Facts, renames: dict[str, str]) -> list[cst.Name]:
    """The script's own nodes of each taken name (the placeholder goes on them before the edits are applied)."""
    return [node for node in facts.order if isinstance(node, cst.Name) and node.value in renames]


def hidden(node: cst.CSTNode) -> cst.CSTNode:
    assert isinstance(node, cst.Name)
    return node.with_changes(value=PLACEHOLDER + node.value)


class Rename(cst.CSTTransformer):
    """The port's uses of each taken name get its new name; the script's own (set aside) come back as they were.
    Attributes, keywords and module paths keep their spelling: `import os as os` becomes `import os as os_`."""

    def __init__(self, renames: dict[str, str]) -> None:
        super().__init__()
        self.renames = renames

    def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.Name:
        value = updated_node.value
        if value.startswith(PLACEHOLDER):
            return updated_node.with_changes(value=value.removeprefix(PLACEHOLDER))
        return updated_node.with_changes(value=self.renames.get(value, value))

    def leave_Attribute(self, original_node: cst.Attribute, updated_node: cst.Attribute) -> cst.Attribute:
        return updated_node.with_changes(attr=_restored(original_node.attr))

    def leave_Arg(self, original_node: cst.Arg, updated_node: cst.Arg) -> cst.Arg:
        keyword = original_node.keyword
        return updated_node.with_changes(keyword=_restored(keyword) if keyword is not None else None)

    def leave_ImportAlias(self, original_node: cst.ImportAlias, updated_node: cst.ImportAlias) -> cst.ImportAlias:
        return updated_node.with_changes(name=original_node.name.visit(_Restore()))

    def leave_ImportFrom(self, original_node: cst.ImportFrom, updated_node: cst.ImportFrom) -> cst.ImportFrom:
        module = original_node.module
        return updated_node.with_changes(module=module.visit(_Restore()) if module is not None else None)


def _restored(node: cst.Name) -> cst.Name:
    return node.with_changes(value=node.value.removeprefix(PLACEHOLDER))


class _Restore(cst.CSTTransformer):
    def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.Name:
        return _restored(updated_node)
