"""The state one port shares between its rules: the script's facts, the edits asked for, what was changed and
what could not be, and the helper pieces the header must define."""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from ddpcli.port.edits import Edits
from ddpcli.port.facts import Facts
from ddpcli.port.records import Change, NotPorted


@dataclass
class Port:
    facts: Facts
    edits: Edits = field(default_factory=Edits)
    changes: list[Change] = field(default_factory=list)
    not_ported: list[NotPorted] = field(default_factory=list)
    needs: set[str] = field(default_factory=set)  # header pieces: unwrap, shard, contextlib, ddp
    models: list[str] = field(default_factory=list)  # names DDP-wraps (the wrap rule sets them)
    wraps_at_module_level: bool = False  # a DDP wrap or barrier outside any function: set up the group there
    dist: str = "dist"  # the name torch.distributed goes by in the output
    counted_loops: set[int] = field(default_factory=set)  # epoch loops given a round counter (no epoch variable)
    epochs_set: set[tuple[int, str]] = field(default_factory=set)  # (epoch loop, loader) pairs given set_epoch
    loaders_not_ported: bool = False  # a training loader was listed as not ported (its own sampler, ...)
    renames: dict[str, str] = field(default_factory=dict)  # the port's names the script takes -> the port's instead
    seeded: set[int] = field(default_factory=set)  # ids of the statements `_ddp_seed()` is placed before
    same_orders: set[cst.CSTNode] = field(default_factory=set)  # draws of a batch order made rank 0's (_ddp_same)
    module: bool = False  # a module the script imports from its folder: the script sets up and ends the group
    program_trains: bool = False  # some file of the program wraps a model: this file's loaders may be its data

    def __post_init__(self) -> None:
        self.edits.newline = self.facts.module.default_newline

    def change(self, node: cst.CSTNode, kind: str, text: str) -> None:
        self.changes.append(Change(self.facts.line(node), kind, text))

    def cannot(self, node: cst.CSTNode | None, reason: str) -> None:
        line = self.facts.line(node) if node is not None else 1
        if not any(item.line == line and item.reason == reason for item in self.not_ported):
            self.not_ported.append(NotPorted(line, reason))

    def code(self, node: cst.CSTNode) -> str:
        return self.facts.module.code_for_node(node).strip()

    def needs_group_here(self, node: cst.CSTNode) -> None:
        if isinstance(self.facts.scope(node), cst.Module):
            self.wraps_at_module_level = True
