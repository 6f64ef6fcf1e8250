"""Datasets that download (`datasets.MNIST(root, download=True)`): rank 0 downloads first, the other ranks wait
at a barrier and then read the files it wrote. Every rank downloading into one folder at once races on its files
(half-written archives, a failed checksum) and fetches the data N times."""

from __future__ import annotations

import libcst as cst

from ddpcli.port.context import Port
from ddpcli.port.facts import keyword


def _downloads(call: cst.Call) -> bool:
    flag = keyword(call, "download")
    return flag is not None and not (isinstance(flag.value, cst.Name) and flag.value.value in ("False", "None"))


def _plain_statement(statement: cst.BaseStatement) -> bool:
    """An assignment or expression line: code after it runs (a `return` line's would not, nor a compound's)."""
    return isinstance(statement, cst.SimpleStatementLine) and all(
        isinstance(part, cst.Assign | cst.AnnAssign | cst.Expr) for part in statement.body
    )


def apply(port: Port) -> None:
    facts, done = port.facts, set()
    for call in facts.calls:
        if not _downloads(call):
            continue
        statement = facts.statement(call)
        if not _plain_statement(statement):
            port.cannot(
                call,
                f"{port.code(call.func)}(download=...) where no barrier can follow it: every rank "
                "downloads into one folder at once; download on rank 0 first, the others after a barrier",
            )
            continue
        if statement in done:
            continue
        done.add(statement)
        barrier = f"\n    {port.dist}.barrier()"
        port.edits.insert_before(statement, f"if _ddp and not _is_main:{barrier}  # rank 0 downloads first\n")
        port.edits.insert_after(statement, f"if _ddp and _is_main:{barrier}  # the others read what it downloaded\n")
        port.needs_group_here(statement)
        port.change(call, "download", f"{port.code(call.func)}(download=...) on rank 0 first; the other ranks wait "
                    "at a barrier, then read the files it wrote (not N downloads into one folder at once)")  # fmt: skip
