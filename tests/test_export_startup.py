"""The viewers' libraries cost 0.2-1.4 s to import: `import ddpcli`, every other command and `ddpcli export --help`
import none of them; a missing one is one line naming the pip command that adds it (exit 2)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

VIEWERS = ("tensorboardX", "tensorboard", "mlflow", "wandb")

_PROBE = """
import json, sys
blocked = set(json.loads(sys.argv[1]))
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in blocked:
            raise ModuleNotFoundError(name)
        return None
    def find_module(self, name, path=None):
        return None
sys.meta_path.insert(0, Block())
import importlib.util
_find = importlib.util.find_spec
importlib.util.find_spec = lambda name, *a: None if name.split(".")[0] in blocked else _find(name, *a)
from ddpcli.cli.app import main
code = 0
try:
    main(sys.argv[2:])
except SystemExit as exit:
    code = exit.code
viewers = sorted({name.split(".")[0] for name in sys.modules} & {"tensorboardX", "tensorboard", "mlflow", "wandb"})
print(json.dumps({"code": code, "viewers": viewers}), file=sys.stderr)
"""


def probe(*args: str, blocked: tuple[str, ...] = ()) -> tuple[int, list[str], str]:
    result = subprocess.run([sys.executable, "-c", _PROBE, json.dumps(list(blocked)), *args], cwd=REPO,
                            capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    lines = result.stderr.strip().splitlines()
    report = json.loads(lines[-1])
    return report["code"], report["viewers"], "\n".join(lines[:-1])


@pytest.mark.parametrize("args", [("plan",), ("compare", "--help"), ("export", "--help"), ("launch", "--help")])
def test_no_command_but_an_export_imports_a_viewer(args: tuple[str, ...]) -> None:
    code, viewers, _ = probe(*args)
    assert code == 0 and viewers == []


def test_import_ddpcli_imports_no_viewer() -> None:
    code = "import sys, ddpcli, ddpcli.cli.app, ddpcli.export.exporter, ddpcli.export.runs; print(sorted(sys.modules))"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert not any(f"'{viewer}" in loaded for viewer in VIEWERS)


MISSING = [("tensorboard", "tensorboardX", "tensorboard"), ("mlflow", "mlflow", "mlflow"), ("wandb", "wandb", "wandb")]


@pytest.mark.parametrize(("viewer", "module", "extra"), MISSING)
def test_a_missing_library_is_one_line_with_its_pip_command(
    viewer: str, module: str, extra: str, tmp_path: Path
) -> None:
    code, viewers, stderr = probe("export", viewer, str(tmp_path), "--to", "sqlite:///x.db", blocked=(module,))
    assert code == 2 and viewers == []
    assert (
        stderr.strip().splitlines() == [next(line for line in stderr.splitlines() if line.startswith("error:"))]
        and f"pip install 'ddpcli[{extra}]'" in stderr
    )
