"""`ddpcli plan` must stay instant: it never imports torch (nor does importing the CLI)."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import REPO

PROBE = """
import json, sys
from ddpcli.cli.app import main
try:
    main(sys.argv[1:])
except SystemExit as exit:
    code = exit.code
print(json.dumps({"torch": [name for name in sys.modules if name == "torch" or name.startswith("torch.")],
                  "code": code}), file=sys.stderr)
"""


def run_probe(*args: str) -> dict:
    result = subprocess.run(
        [sys.executable, "-c", PROBE, *args], cwd=REPO, capture_output=True, text=True, timeout=60, check=False
    )
    return json.loads(result.stderr.strip().splitlines()[-1])


def test_plan_never_imports_torch() -> None:
    probe = run_probe("plan", str(REPO / "experiments.toml"))
    assert probe == {"torch": [], "code": 0}


def test_plan_json_and_help_never_import_torch() -> None:
    assert run_probe("plan", "--json")["torch"] == []
    assert run_probe("--help")["torch"] == []


def test_plan_command_module_imports_no_host_and_no_other_renderer() -> None:
    """The plan command and its renderer stand alone: nothing of ddpcli.host, no launch or compare renderer."""
    probe = (
        "import json, sys; import ddpcli.cli.commands.plan; "
        "print(json.dumps(sorted(name for name in sys.modules if name.startswith(('ddpcli.host', "
        "'ddpcli.cli.render.launch', 'ddpcli.cli.render.compare', 'ddpcli.cli.commands.launch', "
        "'ddpcli.cli.commands.compare')))))"
    )
    result = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == []
