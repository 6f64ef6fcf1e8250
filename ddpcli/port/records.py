"""What a port did and did not do, as the command prints it and `--json` writes it."""

from __future__ import annotations

from dataclasses import dataclass, field

from ddpcli.errors import UserError

PORT_JSON_KEYS = ("script", "output", "changes", "not_ported", "modules")  # `ddpcli port --json` (contracts.md)
MODULE_JSON_KEYS = ("module", "output", "changes", "not_ported")  # each ported module of the program


@dataclass(frozen=True)
class Change:
    line: int  # in SCRIPT (1-based)
    kind: str  # the rule's name: process_group, device, ddp_wrap, sampler, ...
    text: str  # what changed and why, in plain words


@dataclass(frozen=True)
class NotPorted:
    line: int
    reason: str


@dataclass
class PortResult:
    source: str  # the ported script's text
    changes: list[Change] = field(default_factory=list)
    not_ported: list[NotPorted] = field(default_factory=list)
    encoding: str = "utf-8"  # the script's (its coding cookie, "utf-8-sig" for a byte order mark): OUT's too

    def as_json(self, script: str, output: str, modules: list[dict[str, object]] | None = None) -> dict[str, object]:
        data = {"script": script, "output": output, **self._lists(), "modules": modules or []}
        assert tuple(data) == PORT_JSON_KEYS
        return data

    def module_json(self, module: str, output: str) -> dict[str, object]:
        data = {"module": module, "output": output, **self._lists()}
        assert tuple(data) == MODULE_JSON_KEYS
        return data

    def _lists(self) -> dict[str, object]:
        return {
            "changes": [{"line": c.line, "kind": c.kind, "text": c.text} for c in self.changes],
            "not_ported": [{"line": n.line, "reason": n.reason} for n in self.not_ported],
        }


class PortRefused(UserError):
    """The script cannot be ported: one reason a line, exit 2, nothing written."""

    def __init__(self, reasons: list[str]) -> None:
        self.reasons = reasons
        super().__init__("\n".join(reasons))
