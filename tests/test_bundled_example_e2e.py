"""The bundled experiment file's script (`ddpcli.examples.plain_ddp`: plain torch DDP, nothing of ddpcli in it) under
`ddpcli launch`, as a newcomer runs it: the observer sees the plan followed, and 2 processes x 16 end with the
parameters of 1 process x 32 (the README's claim, on a smaller data set so the test stays short)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ddpcli.diagnosis.slowness import SLOWNESS_CODES
from tests.conftest import REPO

pytestmark = pytest.mark.e2e


def bundled_file_with(directory: Path, experiments: str) -> Path:
    """The repository's experiments.toml, its own [defaults] and [baseline], other experiments, less data."""
    text = (REPO / "experiments.toml").read_text(encoding="utf-8")
    text = text[: text.index("[[experiments]]")].replace("dataset_size = 2048", "dataset_size = 512")
    path = directory / "experiments.toml"
    path.write_text(text + experiments, encoding="utf-8")
    return path


def test_the_plain_script_follows_its_plan_and_two_by_sixteen_equals_one_by_thirty_two(tmp_path: Path) -> None:
    path = bundled_file_with(tmp_path, '[[experiments]]\nname = "2x16"\nnproc_per_node = 2\n\n'
                                       '[[experiments]]\nname = "1x32"\nper_device_batch_size = 32\n')  # fmt: skip
    launched = subprocess.run([sys.executable, "-m", "ddpcli", "launch", str(path), "--only", "2x16", "--only", "1x32"],
                              cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert launched.returncode == 0, launched.stdout + launched.stderr
    compared = subprocess.run([sys.executable, "-m", "ddpcli", "compare", "--json"], cwd=tmp_path,
                              capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert compared.returncode == 0, compared.stderr
    rows = {row["name"]: row for row in json.loads(compared.stdout)}
    two, one = rows["2x16"], rows["1x32"]
    for row in (two, one):  # why-slow findings (a tiny model's all-reduce on gloo) are no mistake of the script
        mistakes = [finding for finding in row["findings"] if finding["code"] not in SLOWNESS_CODES]
        assert (row["values_from"], row["plan_followed"], mistakes) == ("observed", True, [])
    assert (two["world_size"], two["per_device_batch_size"], two["global_batch_size"]) == (2, 16, 32)
    assert (two["steps"], two["samples_seen"], two["lr"]) == (16, 512, pytest.approx(0.1))  # linear x2
    assert two["observed"]["sampler"] == "DistributedSampler"
    assert two["verdict"] == "equivalent" and two["equivalent_to"] == "1x32"
    assert two["max_param_diff"] < 1e-6
