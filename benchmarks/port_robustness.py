"""`ddpcli port` on every `.py` file of installed packages (issue 37 item 6): thousands of real files nobody here
wrote, each ported to a temporary folder. Each must end in a written port or a clean refusal with its reason, never
an internal error ("a bug of ddpcli port"). Prints the counts, and each internal error's class with its files.

    PYTHONPATH=. python benchmarks/port_robustness.py torch lightning transformers
    PYTHONPATH=. python benchmarks/port_robustness.py --files list.txt   # one path a line
    PYTHONPATH=. python benchmarks/port_robustness.py --rules torch      # every rule on every file, refused or not

Exit 1 when any file ended in an internal error.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
import time
import traceback
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from ddpcli.errors import UserError
from ddpcli.port.engine import port_script, rules_only
from ddpcli.port.records import PortRefused
from ddpcli.script import source as script_source


@dataclass
class Tally:
    written: int = 0
    refused: Counter[str] = field(default_factory=Counter)  # the reason's kind -> files
    errors: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))  # error class -> files

    @property
    def total(self) -> int:
        return self.written + sum(self.refused.values()) + sum(map(len, self.errors.values()))


def package_files(package: str) -> list[Path]:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"{package}: not installed as a package")
    return sorted(p for root in spec.submodule_search_locations for p in Path(root).rglob("*.py"))


def refusal_kind(reason: str) -> str:
    """`x.py:12: not valid Python (...)` -> "not valid Python": the words after the file and line."""
    words = reason.split(": ", 2)
    text = words[2] if len(words) > 2 and words[1].isdigit() else words[-1]
    return text.split(":")[0].split(" (")[0][:60]


def error_class(error: BaseException) -> str:
    """The exception's type and where in ddpcli it was raised (file:line of the innermost ddpcli frame)."""
    frames = [f for f in traceback.extract_tb(error.__traceback__) if "/ddpcli/" in f.filename]
    where = f"{Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else "?"
    return f"{type(error).__name__} at {where}: {str(error)[:80]}"


def port_one(path: Path, out: Path, tally: Tally, rules: bool = False) -> None:
    """Port `path` (with `rules`: run every rule on it even where the port refuses it) and count how it ended."""
    try:
        if rules:
            source = script_source.read(path)
            script_source.parse_ast(source)
            result = rules_only(source.text, str(path))
        else:
            result = port_script(path)
    except PortRefused as refused:
        tally.refused[refusal_kind(refused.reasons[0])] += 1
        return
    except UserError as error:  # not readable or not Python (rules mode reads the file itself)
        tally.refused[refusal_kind(str(error))] += 1
        return
    except Exception as error:  # what `ddpcli port` reports as a bug of its own
        tally.errors[error_class(error)].append(str(path))
        return
    (out / f"{tally.written}_{path.name}").write_text(result.source, encoding="utf-8")
    tally.written += 1


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("packages", nargs="*", default=["torch"])
    parser.add_argument("--files", type=Path, help="a file listing the paths to port, one a line")
    parser.add_argument("--rules", action="store_true", help="run every rule on every file, refused or not")
    args = parser.parse_args(argv)
    groups = {str(args.files): [Path(line) for line in args.files.read_text().split()]} if args.files else {
        package: package_files(package) for package in args.packages}  # fmt: skip
    failed = False
    with tempfile.TemporaryDirectory(prefix="port-robustness-") as folder:
        for name, files in groups.items():
            tally, start = Tally(), time.perf_counter()
            for path in files:
                port_one(path, Path(folder), tally, args.rules)
            errors = sum(map(len, tally.errors.values()))
            print(f"{name}: {tally.total} files in {time.perf_counter() - start:.0f} s: {tally.written} written, "
                  f"{sum(tally.refused.values())} refused with a reason, {errors} internal errors")  # fmt: skip
            for kind, count in tally.refused.most_common():
                print(f"  refused {count:>5}  {kind}")
            for kind, paths in sorted(tally.errors.items(), key=lambda item: -len(item[1])):
                print(f"  ERROR   {len(paths):>5}  {kind}")
                for path in paths[:5]:
                    print(f"                 {path}")
            failed |= errors > 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
