"""The viewers' libraries cost 0.2-1.4 s to import: `import ddpcli`, every other command and `ddpcli export --help`
import none of them; a missing one is one line naming the pip command that adds it (exit 2).

One fresh interpreter runs every probe, one after another (an interpreter each cost about 0.7 s): first the imports,
then each command with nothing blocked, then each export with its viewer's library blocked. A library once imported
stays in sys.modules, so each probe reports the viewers it loaded that were not loaded before it: every probe
loading none is the same as each loading none in an interpreter of its own."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO

VIEWERS = ("tensorboardX", "tensorboard", "mlflow", "wandb")
COMMANDS = [("plan",), ("compare", "--help"), ("export", "--help"), ("launch", "--help")]
MISSING = [("tensorboard", "tensorboardX", "tensorboard"), ("mlflow", "mlflow", "mlflow"), ("wandb", "wandb", "wandb")]

_PROBE = """
import contextlib, importlib.util, io, json, sys
probes = json.loads(sys.argv[1])
viewers = set(json.loads(sys.argv[2]))
blocked = set()
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in blocked:
            raise ModuleNotFoundError(name)
        return None
    def find_module(self, name, path=None):
        return None
sys.meta_path.insert(0, Block())
_find = importlib.util.find_spec
importlib.util.find_spec = lambda name, *a: None if name.split(".")[0] in blocked else _find(name, *a)
def loaded():
    return {name.split(".")[0] for name in sys.modules} & viewers
reports = []
for probe in probes:
    before, code, err = loaded(), 0, io.StringIO()
    blocked.clear()
    blocked.update(probe["blocked"])
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        try:
            if "imports" in probe:
                for module in probe["imports"]:
                    importlib.import_module(module)
            else:
                from ddpcli.cli.app import main
                main(probe["args"])
        except SystemExit as exit:
            code = exit.code
    reports.append({"code": code, "viewers": sorted(loaded() - before), "stderr": err.getvalue()})
print(json.dumps(reports))
"""

IMPORTS = ["ddpcli", "ddpcli.cli.app", "ddpcli.export.exporter", "ddpcli.export.runs"]


@pytest.fixture(scope="module")
def probed(tmp_path_factory: pytest.TempPathFactory) -> dict[Any, dict[str, Any]]:
    """Each probe's exit code, the viewers it loaded first and its stderr, from one fresh interpreter."""
    runs = tmp_path_factory.mktemp("no-runs")
    probes: list[tuple[Any, dict[str, Any]]] = [("imports", {"imports": IMPORTS, "blocked": []})]
    probes += [(args, {"args": list(args), "blocked": []}) for args in COMMANDS]
    probes += [
        (viewer, {"args": ["export", viewer, str(runs), "--to", "sqlite:///x.db"], "blocked": [module]})
        for viewer, module, _ in MISSING
    ]
    result = subprocess.run([sys.executable, "-c", _PROBE, json.dumps([probe for _, probe in probes]),
                             json.dumps(VIEWERS)], cwd=REPO, capture_output=True, text=True, timeout=120,
                            check=False)  # fmt: skip
    assert result.returncode == 0, result.stderr
    reports = json.loads(result.stdout.strip().splitlines()[-1])
    return {key: report for (key, _), report in zip(probes, reports, strict=True)}


@pytest.mark.parametrize("args", COMMANDS)
def test_no_command_but_an_export_imports_a_viewer(args: tuple[str, ...], probed: dict[Any, dict[str, Any]]) -> None:
    report = probed[args]
    assert report["code"] == 0 and report["viewers"] == [], report


def test_import_ddpcli_imports_no_viewer(probed: dict[Any, dict[str, Any]]) -> None:
    assert probed["imports"]["viewers"] == []


@pytest.mark.parametrize(("viewer", "module", "extra"), MISSING)
def test_a_missing_library_is_one_line_with_its_pip_command(
    viewer: str, module: str, extra: str, probed: dict[Any, dict[str, Any]]
) -> None:
    report = probed[viewer]
    lines = report["stderr"].strip().splitlines()
    assert report["code"] == 2 and report["viewers"] == []
    assert len(lines) == 1 and lines[0].startswith("error:") and module in lines[0], lines
    assert f"pip install 'ddpcli[{extra}]'" in lines[0]


def test_the_probe_reports_a_library_where_it_is_first_imported(tmp_path: Path) -> None:
    """The probe itself, with `email` standing for a viewer: reported by the probe that imports it, not by the one
    before, nor by the next (already loaded)."""
    probes = [{"imports": ["json"], "blocked": []}, {"imports": ["email.message"], "blocked": []},
              {"imports": ["email"], "blocked": []}]  # fmt: skip
    result = subprocess.run([sys.executable, "-c", _PROBE, json.dumps(probes), json.dumps(["email"])], cwd=tmp_path,
                            capture_output=True, text=True, timeout=120, check=True)  # fmt: skip
    reports = json.loads(result.stdout.strip().splitlines()[-1])
    assert [report["viewers"] for report in reports] == [[], ["email"], []]
