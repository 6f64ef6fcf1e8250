"""The port reads the tree once (issue 39 item 14: 2,500 lines took 14-16 s, 10,000 about 60 s): every walk of a
rule goes over the parents and children recorded in one visit, never libcst's `.children`, which rebuilds a node's
children each time it is asked (a walk from the module was a visit of the whole tree, and the rules walk often)."""

from __future__ import annotations

import sys
from pathlib import Path

import libcst as cst
import pytest

from ddpcli.port.engine import port_source

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from port_speed import script


def test_a_port_never_asks_libcst_for_children(monkeypatch: pytest.MonkeyPatch) -> None:
    asked = []
    children = cst.CSTNode.children

    def counting(node: cst.CSTNode) -> object:
        asked.append(type(node).__name__)
        return children.fget(node)  # type: ignore[attr-defined]

    monkeypatch.setattr(cst.CSTNode, "children", property(counting))
    source = script(400)
    result = port_source(source, "long.py")
    assert asked == []
    assert "model = _DDPModel(model)" in result.source
    assert source.count("\n") >= 380


def test_the_long_script_is_a_training_script_the_port_rewrites_throughout() -> None:
    result = port_source(script(200), "long.py")
    kinds = [change.kind for change in result.changes]
    assert kinds.count("rank0") >= 15 and {"ddp_wrap", "sampler", "set_epoch", "unwrap"} <= set(kinds)


def test_the_cyclic_collector_is_paused_while_porting_and_restored_after(monkeypatch: pytest.MonkeyPatch) -> None:
    import gc

    from ddpcli.port import engine

    seen = []
    monkeypatch.setattr(engine, "RULES", (*engine.RULES, lambda port: seen.append(gc.isenabled())))
    assert gc.isenabled()
    port_source(script(50), "long.py")
    assert seen == [False] and gc.isenabled()
