"""One reading of a script's bytes for port and init (issue 39 items 6 and 7): PEP 263 coding cookies and a UTF-8
byte order mark as Python honours them, the line of a syntax error as Python says it, a NUL byte's line."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from ddpcli.cli.app import app
from ddpcli.errors import UserError
from ddpcli.init.script_kind import read_source
from ddpcli.script.source import NotPython, parse_ast, read

runner = CliRunner()
LATIN1 = "# -*- coding: latin-1 -*-\nname = 'café'\n".encode("latin-1")


def test_a_coding_cookie_decodes_as_python_does(tmp_path: Path) -> None:
    path = tmp_path / "t.py"
    path.write_bytes(LATIN1)
    source = read(path)
    assert source.encoding == "iso-8859-1" and "name = 'café'" in source.text
    assert source.text.encode(source.encoding) == LATIN1


def test_a_byte_order_mark_is_kept_for_the_written_copy(tmp_path: Path) -> None:
    path = tmp_path / "t.py"
    path.write_bytes(b"\xef\xbb\xbfx = 1\n")
    source = read(path)
    assert source.text == "x = 1\n" and source.encoding == "utf-8-sig"
    assert source.text.encode(source.encoding) == b"\xef\xbb\xbfx = 1\n"


def test_undecodable_bytes_and_a_bad_cookie_are_one_line_each(tmp_path: Path) -> None:
    path = tmp_path / "t.py"
    path.write_bytes(b"x = '\xe9'\n")
    with pytest.raises(UserError, match=r"t.py: cannot read it: .*utf-8.* position 5"):
        read(path)
    path.write_bytes(b"# coding: klingon\nx = 1\n")
    with pytest.raises(UserError, match=r"t\.py: cannot read it: unknown encoding: klingon"):
        read(path)


@pytest.mark.parametrize(
    ("data", "line"),
    [(b"x = 1\ndef f(:\n    pass\n", 2), (b"import os\n\nx = 1\x00\n", 3), (b"x = (\n", 1)],
)
def test_the_line_is_pythons(data: bytes, line: int, tmp_path: Path) -> None:
    path = tmp_path / "t.py"
    path.write_bytes(data)
    with pytest.raises(NotPython) as error:
        parse_ast(read(path))
    assert error.value.line == line


def test_init_and_port_say_the_same_line(tmp_path: Path) -> None:
    path = tmp_path / "t.py"
    path.write_bytes(b"import torch\ndef f(:\n    pass\n")
    with pytest.raises(UserError, match=r"t.py:2: not valid Python"):
        read_source(path)
    result = runner.invoke(app, ["port", str(path)])
    assert result.exit_code == 2 and result.stderr.startswith(f"error: {path}:2: not valid Python (")
    nul = tmp_path / "bin.py"
    nul.write_bytes(b"import os\x00\n")
    with pytest.raises(UserError, match=r"bin.py:1: not valid Python \(.*null bytes"):
        read_source(nul)
    result = runner.invoke(app, ["port", str(nul)])
    assert result.exit_code == 2 and result.stderr.startswith(f"error: {nul}:1: not valid Python (")


def test_port_reads_a_latin1_script_and_writes_it_in_its_encoding(tmp_path: Path) -> None:
    path = tmp_path / "train.py"
    body = (
        "# -*- coding: latin-1 -*-\nimport torch\nmodel = torch.nn.Linear(2, 1)\n"
        "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\nfor x in [torch.ones(1, 2)]:\n"
        "    optimizer.zero_grad()\n    model(x).sum().backward()\n    optimizer.step()\nprint('fini, café')\n"
    )
    path.write_bytes(body.encode("latin-1"))
    result = runner.invoke(app, ["port", str(path)])
    assert result.exit_code == 0, result.output
    written = (tmp_path / "train_ddp.py").read_bytes()
    assert "print('fini, café')".encode("latin-1") in written and b"caf\xc3\xa9" not in written
    compile(written, "train_ddp.py", "exec")


def test_init_reads_the_training_loaders_batch_through_the_ports_shard(tmp_path: Path) -> None:
    """37 item 2: on a ported script, `_ddp_shard(DataLoader(..., batch_size=128))` comes before the test loader's
    `batch_size=100` in the file, and init takes the first literal in the file's order (not the syntax tree's
    breadth-first order, which met the unwrapped test loader first)."""
    from ddpcli.init.script_kind import script_facts

    path = tmp_path / "main_ddp.py"
    path.write_text(
        "import torch\n\ntrainloader = _ddp_shard(torch.utils.data.DataLoader(trainset, batch_size=128))\n"
        "testloader = torch.utils.data.DataLoader(testset, batch_size=100)\n",
        encoding="utf-8",
    )
    found = script_facts(path, {"batch_size": "per_device_batch_size"}).literals["per_device_batch_size"]
    assert (found.value, found.line) == (128, 3)
