"""`ddpcli port` proven by running what it writes: `python OUT` is `python SCRIPT` bit for bit (same files, same
parameters); under torchrun every rank ends with the same parameters and writes each file once; and on the bundled
single-device example, `ddpcli init OUT` + `ddpcli launch` + `ddpcli compare` say data_parallel_size 2, ranks
synchronized, distinct samples, no error finding and 2 x B/2 "equivalent" to 1 x B."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from ddpcli.diagnosis.slowness import SLOWNESS_CODES
from tests import zygote
from tests.conftest import REPO
from tests.helpers import assert_equal_ranks, port_command, torchrun_ranks

pytestmark = pytest.mark.e2e
EXAMPLE = REPO / "ddpcli" / "examples" / "single_device.py"
MIXED = REPO / "tests" / "port_rules" / "mixed.py"
TRAINER = REPO / "tests" / "port_rules" / "trainer_class.py"
DOWNLOADS = REPO / "tests" / "port_rules" / "downloads.py"


def ddpcli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ddpcli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300, check=False)  # fmt: skip


def python(script: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`python SCRIPT` forked from an interpreter that imported torch once (tests/zygote.py): a process of its own
    with this environment and working directory, without a fresh `import torch` per run."""
    run = zygote.run([sys.executable, script], env=dict(os.environ), cwd=cwd, timeout=120)
    assert run.returncode == 0, run.stderr
    return run


def ported_pair(tmp_path: Path, source: Path) -> tuple[Path, Path]:
    """SCRIPT in one folder and OUT (its port) in another, so each run's files are its own."""
    original, port = tmp_path / "original", tmp_path / "port"
    original.mkdir()
    port.mkdir()
    shutil.copy(source, original / source.name)
    shutil.copy(source, port / source.name)
    done = port_command(port / source.name)  # in this process: the port is under test, not a start-up
    assert done.returncode == 0, done.stdout + done.stderr
    (port / source.name).unlink()
    return original, port


def assert_same_under_python(original: Path, port: Path, script: str, checkpoint: str) -> None:
    before, after = python(script, original), python(script.replace(".py", "_ddp.py"), port)
    assert before.stdout == after.stdout
    assert sorted(p.name for p in original.iterdir()) == [checkpoint, script]
    assert sorted(p.name for p in port.iterdir()) == [checkpoint, script.replace(".py", "_ddp.py")]
    mine, theirs = torch.load(original / checkpoint), torch.load(port / checkpoint)
    flat = (lambda state: {k: v for k, v in state.items()}) if "model" not in mine else (
        lambda state: {f"{m}.{k}": v for m, sub in state.items() for k, v in sub.items()})  # fmt: skip
    assert flat(mine).keys() == flat(theirs).keys()
    assert all(torch.equal(flat(mine)[key], flat(theirs)[key]) for key in flat(mine))  # bit-identical


def test_python_out_is_python_script_bit_for_bit_on_a_script_with_several_rules(tmp_path: Path) -> None:
    original, port = ported_pair(tmp_path, MIXED)
    assert_same_under_python(original, port, "mixed.py", "mixed.pt")


def test_under_torchrun_the_ranks_end_equal_and_the_checkpoint_is_written_once(tmp_path: Path) -> None:
    _, port = ported_pair(tmp_path, MIXED)
    stdout, zero, one = torchrun_ranks(port, "mixed_ddp.py")
    assert stdout.count("epoch 1: loss") == 1  # printed by rank 0 alone
    assert_equal_ranks(zero, one, models=2)
    assert sorted(p.name for p in port.iterdir() if p.suffix == ".pt") == ["mixed.pt"]


def test_a_dataset_that_downloads_is_downloaded_once_by_rank_zero(tmp_path: Path) -> None:
    """Both ranks of the unported script would download into data/ at once (two lines in downloads.log, two
    partial files racing); the port's rank 0 downloads, rank 1 waits and reads its file."""
    _, port = ported_pair(tmp_path, DOWNLOADS)
    stdout, zero, one = torchrun_ranks(port, "downloads_ddp.py")
    assert len((port / "data" / "downloads.log").read_text().splitlines()) == 1
    assert sorted(path.name for path in (port / "data").iterdir()) == ["data.bin", "downloads.log"]
    assert stdout.count("epoch 1: done") == 1
    assert_equal_ranks(zero, one, models=1)


def test_the_ddp_tutorials_trainer_class_is_ported(tmp_path: Path) -> None:
    """A Trainer keeps the model (moved in __init__, after its optimizer) and a loader a function built."""
    original, port = ported_pair(tmp_path, TRAINER)
    assert_same_under_python(original, port, "trainer_class.py", "checkpoint.pt")
    (port / "checkpoint.pt").unlink()
    stdout, zero, one = torchrun_ranks(port, "trainer_class_ddp.py")
    assert stdout.count("Steps: 4") == 3  # rank 0 alone, 3 epochs of 128 samples / 32: each rank half the data
    assert_equal_ranks(zero, one, models=1)
    assert (port / "checkpoint.pt").is_file()


@pytest.fixture(scope="module")
def proof(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """The bundled example ported, run under python beside the original, then init + launch 1x32 and 2x16."""
    tmp_path = tmp_path_factory.mktemp("port_proof")
    original, port = ported_pair(tmp_path, EXAMPLE)
    initialised = ddpcli("init", "single_device_ddp.py", "--nproc-per-node", "2", cwd=port)
    assert initialised.returncode == 0, initialised.stderr
    launched = ddpcli("launch", "--only", "1x32", "--only", "2x16", cwd=port)
    assert launched.returncode == 0, launched.stdout + launched.stderr
    compared = ddpcli("compare", "--json", cwd=port)
    assert compared.returncode == 0, compared.stderr
    return {"original": original, "port": port, "rows": {row["name"]: row for row in json.loads(compared.stdout)}}


def test_the_bundled_example_under_python_is_bit_identical(tmp_path: Path) -> None:
    original, port = ported_pair(tmp_path, EXAMPLE)
    assert_same_under_python(original, port, "single_device.py", "single_device.pt")


def test_the_port_of_the_bundled_example_is_data_parallel_and_equivalent(proof: dict[str, object]) -> None:
    rows = proof["rows"]
    assert isinstance(rows, dict)
    two, one = rows["2x16"], rows["1x32"]
    observed = two["observed"]
    assert (observed["data_parallel_size"], observed["world_size"], observed["per_device_batch_size"]) == (2, 2, 16)
    assert observed["sampler"] == "DistributedSampler" and observed["distinct_samples_across_ranks"] is True
    for row in (one, two):
        codes = [finding["code"] for finding in row["findings"] if finding["code"] not in SLOWNESS_CODES]
        assert codes == [] and all(f["severity"] != "error" for f in row["findings"]), row["findings"]
        assert row["plan_followed"] is True
    assert (two["verdict"], two["equivalent_to"]) == ("equivalent", "1x32")
    assert two["max_param_diff"] < 1e-5
