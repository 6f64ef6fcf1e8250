"""Deterministic output for CLI tests: no colour, a fixed wide terminal (set before ddpcli's consoles exist)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ["NO_COLOR"] = "1"
os.environ["COLUMNS"] = "200"
os.environ.pop("FORCE_COLOR", None)

REPO = Path(__file__).resolve().parent.parent


def write_toml(directory: Path, text: str, name: str = "experiments.toml") -> Path:
    path = directory / name
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def repo_root() -> Path:
    return REPO
