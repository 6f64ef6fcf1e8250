"""A script that trains as soon as it starts: ddpcli init must not start it."""

from pathlib import Path

Path("trained.marker").write_text("ran", encoding="utf-8")
