"""Running a script's `--help` for `ddpcli init`: nothing injected into the parser, nothing left running (timeout,
SIGTERM, a helper that moved to its own session and holds the pipes), bounded memory for a huge help, and errors
that show what the script printed or why a default cannot be used."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import pytest

from ddpcli.errors import UserError
from ddpcli.init.script_help import MAX_OUTPUT_BYTES, read_help
from tests.conftest import REPO
from tests.init_helpers import SCRIPTS, init


def alive(pid: int) -> bool:
    """Running, not a zombie waiting for a parent (in a container PID 1 may never reap)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8").rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def wait_for(path: Path, timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.is_file() and path.read_text(encoding="utf-8").endswith("\n"):
            return path.read_text(encoding="utf-8")
        time.sleep(0.1)
    raise AssertionError(f"{path} never appeared")


def test_a_hanging_help_with_a_detached_helper_returns_at_the_timeout_and_leaves_nothing(tmp_path: Path) -> None:
    script = tmp_path / "hangs_with_helper.py"
    script.write_bytes((SCRIPTS / "hangs_with_helper.py").read_bytes())
    started = time.monotonic()
    code, _, err = init(script, "-o", tmp_path / "e.toml", "--help-timeout", "2")
    elapsed = time.monotonic() - started
    assert code == 2 and "did not finish within 2 s" in err
    assert elapsed < 10, f"init took {elapsed:.1f} s for a 2 s timeout"  # was 60 s: it waited for the pipes
    pids = [int(pid) for pid in (tmp_path / "pids.txt").read_text(encoding="utf-8").split()]
    time.sleep(0.2)
    assert [pid for pid in pids if alive(pid)] == []


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_stopping_init_stops_the_help_run_and_its_helper(tmp_path: Path, signum: int) -> None:
    script = tmp_path / "hangs_with_helper.py"
    script.write_bytes((SCRIPTS / "hangs_with_helper.py").read_bytes())
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    output = str(tmp_path / "e.toml")
    command = [sys.executable, "-m", "ddpcli", "init", str(script), "-o", output, "--help-timeout", "120"]
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        pids = [int(pid) for pid in wait_for(tmp_path / "pids.txt", 60).split()]
        process.send_signal(signum)
        process.communicate(timeout=20)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode != 0
    time.sleep(0.2)
    assert [pid for pid in pids if alive(pid)] == []


def test_a_50_mb_help_is_read_with_bounded_memory(tmp_path: Path) -> None:
    """Was 1.2 GB of RSS: communicate() kept all of it (and its decoded copy)."""
    tracemalloc.start()
    try:
        found = read_help(SCRIPTS / "huge_help.py", None, tmp_path, timeout_s=60)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(found.text.encode()) <= MAX_OUTPUT_BYTES
    assert found.text.startswith("  --option-0000000 VALUE")
    assert peak < 8 * MAX_OUTPUT_BYTES, f"peak {peak / 2**20:.1f} MiB"


def test_a_failing_help_shows_what_it_printed_on_either_stream(tmp_path: Path) -> None:
    script = tmp_path / "t.py"
    script.write_text(
        "import argparse, sys\nparser = argparse.ArgumentParser()\nparser.print_help()\n"
        "print('last words on stdout')\nsys.exit(3)\n",
        encoding="utf-8",
    )
    with pytest.raises(UserError, match=r"exited with code 3: last words on stdout$"):
        read_help(script, None, tmp_path)


@pytest.mark.parametrize("default", ["-0.1", "float('nan')", "1e400"])
def test_an_invalid_default_says_it_is_invalid(tmp_path: Path, default: str) -> None:
    script = tmp_path / "t.py"
    script.write_text(
        "import argparse\nparser = argparse.ArgumentParser()\nparser.add_argument('--batch-size', type=int, "
        f"default=8)\nparser.add_argument('--lr', type=float, default={default})\nparser.parse_args()\n",
        encoding="utf-8",
    )
    code, _, err = init(script, "-o", tmp_path / "e.toml")
    assert code == 2 and err.count("\n") == 1
    assert "shows an invalid default for --lr:" in err and "give the one-device lr with --lr X" in err


def test_no_help_keyword_is_injected_into_a_parsers_own_actions(tmp_path: Path) -> None:
    """jsonargparse's _ActionPrintConfig takes no `help`: the old bootstrap's add_argument wrapper raised
    TypeError inside the script. An action of the same shape must work, and its defaults still be read."""
    script = tmp_path / "t.py"
    script.write_text(
        "import argparse\n"
        "class PrintConfig(argparse.Action):\n"
        "    def __init__(self, option_strings, dest, nargs='?'):\n"
        "        super().__init__(option_strings, dest, nargs=nargs, help='print the config')\n"
        "    def __call__(self, parser, namespace, values, option_string=None):\n"
        "        pass\n"
        "parser = argparse.ArgumentParser()\n"
        "parser.add_argument('--print_config', action=PrintConfig)\n"
        "parser.add_argument('--batch_size', type=int, default=6)\n"
        "parser.add_argument('--lr', type=float, default=0.3)\n"
        "parser.parse_args()\n",
        encoding="utf-8",
    )
    code, _, err = init(script, "-o", tmp_path / "e.toml", "--nproc-per-node", "2")
    assert code == 0, err
    text = (tmp_path / "e.toml").read_text(encoding="utf-8")
    assert "per_device_batch_size = 6" in text and "lr = 0.3" in text


def test_a_slow_help_says_what_it_waits_for_after_a_few_seconds(tmp_path: Path) -> None:
    """transformers' example scripts import for 7-11 s on the loaded 2-core machine (run_clm.py's imports measured
    at load 1.6-2.7), more under heavier load: init waits up to DEFAULT_TIMEOUT_S and, at a terminal, says what
    it waits for once NOTICE_AFTER_S have passed."""
    from ddpcli.init.script_help import DEFAULT_TIMEOUT_S, NOTICE_AFTER_S

    assert DEFAULT_TIMEOUT_S >= 60 and NOTICE_AFTER_S <= 5
    script = tmp_path / "t.py"
    script.write_text(
        f"import argparse, time\ntime.sleep({NOTICE_AFTER_S + 1.5})\nparser = argparse.ArgumentParser()\n"
        "parser.add_argument('--batch-size', type=int, default=8)\nparser.parse_args()\n",
        encoding="utf-8",
    )
    told: list[str] = []
    found = read_help(script, None, tmp_path, notice=told.append)
    assert "--batch-size" in found.text
    assert told == [
        f"waiting for `python {script} --help`: the script imports its libraries before its parser prints its "
        f"flags (up to {DEFAULT_TIMEOUT_S:g} s; --help-timeout sets it)"
    ]
    quick = tmp_path / "q.py"
    quick.write_text("import argparse\nargparse.ArgumentParser().parse_args()\n", encoding="utf-8")
    told.clear()
    read_help(quick, None, tmp_path, notice=told.append)
    assert told == []
