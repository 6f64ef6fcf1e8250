"""The files of a record are written like any other file: they follow the umask, and a write that fails (a full
disk) leaves nothing behind, neither a half file nor a temp file."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from ddpcli.jsonvalues import write_json_atomic
from ddpcli.rundir.metrics import write_metrics


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize("umask", [0o022, 0o002, 0o077])
def test_records_follow_the_umask(tmp_path: Path, umask: int) -> None:
    old = os.umask(umask)
    try:
        write_json_atomic(tmp_path / "run.json", {"status": "running"})
        write_metrics(tmp_path / "metrics.jsonl", [{"step": 1, "loss": 0.5}])
        (tmp_path / "plain.txt").write_text("x")
    finally:
        os.umask(old)
    assert mode_of(tmp_path / "run.json") == mode_of(tmp_path / "plain.txt") == 0o666 & ~umask
    assert mode_of(tmp_path / "metrics.jsonl") == 0o666 & ~umask


def test_a_failed_write_leaves_no_temp_file(tmp_path: Path) -> None:
    """A row that cannot be written (a set) fails the write; the old file stays whole."""
    write_metrics(tmp_path / "metrics.jsonl", [{"step": 1}])
    with pytest.raises(TypeError):
        write_metrics(tmp_path / "metrics.jsonl", [{"step": 1}, {"step": 2, "extra": {"x": {1, 2}}}])
    with pytest.raises(ValueError):
        write_json_atomic(tmp_path / "run.json", {"loss": float("inf")})
    assert sorted(path.name for path in tmp_path.iterdir()) == ["metrics.jsonl"]
    assert (tmp_path / "metrics.jsonl").read_text() == '{"step": 1}\n'


def test_a_full_disk_leaves_no_temp_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The temp file is created, then its writes go to /dev/full: ENOSPC (at the latest when it is flushed)."""
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full here")
    real_open = os.open

    def open_full(path: str, flags: int, mode: int = 0o777) -> int:
        if str(path).endswith(".tmp"):
            os.close(real_open(path, flags, mode))
            return real_open("/dev/full", os.O_WRONLY)
        return real_open(path, flags, mode)

    monkeypatch.setattr(os, "open", open_full)
    with pytest.raises(OSError, match="No space left"):
        write_metrics(tmp_path / "metrics.jsonl", [{"step": step} for step in range(10_000)])
    with pytest.raises(OSError, match="No space left"):
        write_json_atomic(tmp_path / "run.json", {"status": "completed"})
    monkeypatch.undo()
    assert list(tmp_path.iterdir()) == []
