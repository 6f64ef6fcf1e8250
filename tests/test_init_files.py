"""`ddpcli init` and the files it touches: it never writes over its script (any spelling of the path, a symlink, a
hard link, even with --force), reads the source as Python does (a UTF-8 byte order mark, an encoding cookie), and
every file-system problem is one line and exit 2, never a traceback."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ddpcli.cli.app import app

runner = CliRunner()
SCRIPT = """import argparse
parser = argparse.ArgumentParser()
parser.add_argument("--batch-size", type=int, default=8)
parser.add_argument("--lr", type=float, default=0.1)
if __name__ == "__main__":
    parser.parse_args()
"""


def init(*args: str | Path) -> tuple[int, str]:
    result = runner.invoke(app, ["init", *map(str, args)])
    return result.exit_code, result.stderr


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "train.py"
    path.write_text(SCRIPT, encoding="utf-8")
    return path


@pytest.mark.parametrize("spelling", ["train.py", "./train.py", "ABSOLUTE", "sub/../train.py"])
def test_init_never_writes_over_its_script_whatever_the_spelling(
    script: Path, monkeypatch: pytest.MonkeyPatch, spelling: str
) -> None:
    monkeypatch.chdir(script.parent)
    (script.parent / "sub").mkdir()
    output = str(script) if spelling == "ABSOLUTE" else spelling
    code, err = init("train.py", "-o", output, "--force")
    assert code == 2, err
    assert script.read_text(encoding="utf-8") == SCRIPT
    assert "the training script itself" in err and len(err.strip().splitlines()) == 1


def test_init_never_writes_through_a_symlink_or_a_hard_link_to_its_script(script: Path) -> None:
    (script.parent / "link.toml").symlink_to(script)
    os.link(script, script.parent / "hard.toml")
    for name in ("link.toml", "hard.toml"):
        code, err = init(script, "-o", script.parent / name, "--force")
        assert code == 2, err
        assert "the training script itself" in err
    assert script.read_text(encoding="utf-8") == SCRIPT


def test_a_script_with_a_byte_order_mark_or_an_encoding_cookie_is_read_as_python_reads_it(tmp_path: Path) -> None:
    bom = tmp_path / "bom.py"
    bom.write_bytes(b"\xef\xbb\xbf" + SCRIPT.encode())
    code, err = init(bom, "--print")
    assert code == 0, err
    latin = tmp_path / "latin.py"
    latin.write_bytes(b"# -*- coding: latin-1 -*-\n# caf\xe9\n" + SCRIPT.encode())
    code, err = init(latin, "--print")
    assert code == 0, err


def test_a_symlink_loop_as_the_script_is_one_line_and_exit_2(tmp_path: Path) -> None:
    loop = tmp_path / "loop.py"
    loop.symlink_to(tmp_path / "loop2.py")
    (tmp_path / "loop2.py").symlink_to(loop)
    result = runner.invoke(app, ["init", str(loop), "-o", str(tmp_path / "e.toml")])
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert len(result.stderr.strip().splitlines()) == 1 and str(loop) in result.stderr


def test_an_output_that_is_a_directory_or_unwritable_is_one_line(script: Path, tmp_path: Path) -> None:
    (tmp_path / "folder.toml").mkdir()
    code, err = init(script, "-o", tmp_path / "folder.toml", "--force")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "not a regular file" in err


def test_init_never_writes_over_the_module_it_reads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("", encoding="utf-8")
    (tmp_path / "pkg" / "train.py").write_text(SCRIPT, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    code, err = init("-m", "pkg.train", "-o", "pkg/train.py", "--force")
    assert code == 2 and "the training script itself" in err, err
    assert (tmp_path / "pkg" / "train.py").read_text(encoding="utf-8") == SCRIPT


def test_a_script_without_ddp_is_said_up_front_with_the_port_command(tmp_path: Path) -> None:
    """Issue 25: no init_process_group, no DDP wrapper, no framework that runs it: the first line names
    `ddpcli port`; a DDP script, an accelerate or a Trainer script gets no such line."""
    single = tmp_path / "single.py"
    single.write_text(SCRIPT + "import torch\nmodel = torch.nn.Linear(2, 1)\n", encoding="utf-8")
    result = runner.invoke(app, ["init", str(single), "-o", str(tmp_path / "e.toml")])
    assert result.exit_code == 0, result.stderr
    first = result.stderr.splitlines()[0]
    assert "has no DDP" in first and f"ddpcli port {single}" in first and "single_ddp.py" in first
    assert "has no DDP" in (tmp_path / "e.toml").read_text(encoding="utf-8").split("# Not wired")[1].splitlines()[1]
    extras = (
        "import torch.distributed as dist\ndist.init_process_group('gloo')\n",
        "from torch.nn.parallel import DistributedDataParallel as DDP\nmodel = DDP(model)\n",
        "from accelerate import Accelerator\n",
        "from transformers import Trainer\nTrainer(model=model)\n",
    )
    for extra in extras:
        single.write_text(SCRIPT + "import torch\nmodel = torch.nn.Linear(2, 1)\n" + extra, encoding="utf-8")
        result = runner.invoke(app, ["init", str(single), "--print"])
        assert result.exit_code == 0 and "has no DDP" not in result.stderr + result.stdout, extra
