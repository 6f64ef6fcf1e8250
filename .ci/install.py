"""CI's install into the running interpreter's environment: what the README's `pip install torch==2.13.0 -e ".[dev]"`
installs, by uv where it can, by pip where it cannot.

pip takes ~30 s here to resolve and unpack the ~130 distributions (5 % of CI's time); `uv pip install` installs the
same ones in ~3 s. uv reads no pip configuration, so pip's own (`pip config list`: its files and PIP_* variables)
is passed on as uv's flags, with `--index-strategy unsafe-best-match`: the newest version across every index, as pip
picks (uv's default takes the first index that has the package, older releases here). A configuration key that
this file does not know how to pass on, or any failure of uv, and pip installs instead: CI must not depend on uv.
Bytecode: neither compiles (see .ci/run).
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys

REQUIREMENTS = ["torch==2.13.0", "-e", ".[dev]"]  # CPU torch first: any other spelling pulls a multi-GB CUDA build
AS_FLAGS = {"find-links": "--find-links", "extra-index-url": "--extra-index-url", "index-url": "--index-url",
            "constraint": "--constraint"}  # fmt: skip
IGNORED = {"cert", "timeout", "default-timeout", "disable-pip-version-check", "no-input", "progress-bar", "retries"}
SCOPES = (":env:", "install", "global")  # pip's precedence: the environment, then [install], then [global]


def pip_and_its_configuration() -> tuple[list[str], dict[str, str] | None]:
    """pip installing into this environment, and its settings. First the base interpreter's pip pointed at this
    environment (`--python`, pip >= 22.3), which needs no pip here (`python -m venv --without-pip`: 0.1 s where
    ensurepip takes 2-4); where that pip cannot list its settings, this environment's own, made by ensurepip."""
    base = getattr(sys, "_base_executable", sys.executable)
    if base != sys.executable:
        pointed = [base, "-m", "pip", "--python", sys.executable]
        listed = subprocess.run([*pointed, "config", "list"], capture_output=True, text=True)
        if listed.returncode == 0:
            return pointed, settings_from(listed.stdout)
    own = [sys.executable, "-m", "pip"]
    if subprocess.run([*own, "--version"], capture_output=True).returncode != 0:
        subprocess.run([sys.executable, "-m", "ensurepip", "--default-pip"], capture_output=True, check=True)
    listed = subprocess.run([*own, "config", "list"], capture_output=True, text=True)
    return own, settings_from(listed.stdout) if listed.returncode == 0 else None


def settings_from(listed: str) -> dict[str, str] | None:
    """pip's effective settings from `pip config list`, name -> value, each from the scope pip would take it from;
    None where a line does not read as `scope.name='value'` (then pip installs)."""
    found: dict[tuple[str, str], str] = {}
    for line in listed.splitlines():
        key, _, value = line.partition("=")
        scope, _, name = key.rpartition(".")
        try:
            found[(scope, name)] = str(ast.literal_eval(value))
        except (ValueError, SyntaxError):
            return None
    names = {name for _, name in found}
    return {name: next(found[(scope, name)] for scope in SCOPES if (scope, name) in found) for name in names}


def uv_command(settings: dict[str, str] | None) -> list[str] | None:
    """`uv pip install` with pip's settings, or None where one of them has no translation here."""
    if settings is None or set(settings) - set(AS_FLAGS) - IGNORED:
        return None
    flags = [part for name, flag in AS_FLAGS.items() for value in settings.get(name, "").split()
             for part in (flag, value)]  # fmt: skip
    return [sys.executable, "-m", "uv", "pip", "install", "--quiet", "--python", sys.executable,
            "--index-strategy", "unsafe-best-match", *flags, *REQUIREMENTS]  # fmt: skip


def main() -> int:
    pip, settings = pip_and_its_configuration()
    pip = [*pip, "install", "--quiet", "--no-compile"]
    command = uv_command(settings)
    if command is not None and subprocess.run([*pip, "uv"], check=False).returncode == 0:
        env = dict(os.environ)
        if settings and settings.get("cert"):
            env["SSL_CERT_FILE"] = settings["cert"]  # pip's certificates, for an index behind a proxy of its own
        if subprocess.run(command, env=env, check=False).returncode == 0:
            return 0
        print("ci: uv could not install; pip installs instead", file=sys.stderr)
    else:
        print("ci: pip installs (uv unavailable, or a pip setting uv is not given)", file=sys.stderr)
    return subprocess.run([*pip, *REQUIREMENTS], check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
