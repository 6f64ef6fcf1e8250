"""The pointer to `ddpcli port` in a finding about a script with no DDP (issue 34): what the port would change in
that very script, from the port's own rules (nothing written), or why it would refuse."""

from __future__ import annotations

from pathlib import Path

from ddpcli.port.advice import port_clause
from tests.conftest import REPO

PORT_SCRIPTS = REPO / "tests" / "port_scripts"


def test_a_single_device_script_gets_the_changes_its_port_would_make(tmp_path: Path) -> None:
    script = str(PORT_SCRIPTS / "mnist.py")
    clause = port_clause(script)
    assert clause.startswith(f"; `ddpcli port {script}` writes mnist_ddp.py, a data-parallel copy with a process group")
    for words in ("DistributedDataParallel", "DistributedSampler", "set_epoch", "10 changes in all"):
        assert words in clause
    assert not (PORT_SCRIPTS / "mnist_ddp.py").exists()  # told, not written


def test_a_script_the_port_refuses_is_told_why() -> None:
    script = str(PORT_SCRIPTS / "ddp_tutorial" / "multigpu_torchrun.py")  # already DDP
    clause = port_clause(script)
    assert clause.startswith(f"; `ddpcli port {script}` cannot port it as it is: ")
    assert "already" in clause.lower()


def test_a_script_that_cannot_be_read_gets_the_plain_pointer(tmp_path: Path) -> None:
    missing = str(tmp_path / "train.py")
    assert port_clause(missing) == f"; `ddpcli port {missing}` makes a single-device script data-parallel"
    assert port_clause(None) == "; `ddpcli port SCRIPT` makes a single-device script data-parallel"
    (tmp_path / "broken.py").write_text("def (:\n")
    assert "cannot port it as it is" in port_clause(str(tmp_path / "broken.py"))
