"""`ddpcli port` on a corpus of published single-device training scripts (issue 48 item 6): does a rule hold on
programs nobody here wrote?

Each repository's scripts are a manifest in benchmarks/port_corpus/ (`<owner>+<name>.toml`, the format of the
published fixtures of tests/port_scripts/manifest.toml: repository, commit, files, and the smallest edits for
synthetic data, CPU and a short run; facts only, the published code is never committed). The scripts are read at
their commit from local git mirrors (`--mirrors`, `<owner>+<name>/repo` under it, as the library's `fetch` writes
them); a repository without a mirror is skipped and counted as such. The checks are tests/test_port_published.py's,
run by pytest over the corpus instead of the test manifest: the port's outcome (ported, or refused with the reason
the manifest holds as true), `python OUT` == `python SCRIPT` bit for bit (parameters, files, saves), torchrun x 2 at
B/2 through `ddpcli launch` (completed, one data-parallel training, ranks' parameters equal, each epoch's training
samples split into disjoint halves that cover it, files written by rank 0 alone), 1 x B == 2 x B/2 within 1e-5 where
the script allows it, and rank 0's evaluation lines equal to one process's.

    PYTHONPATH=. python benchmarks/port_corpus.py --mirrors /work/.mirror
    PYTHONPATH=. python benchmarks/port_corpus.py --mirrors /work/.mirror --only ex_mnist gan_dcgan --markdown t.md

Prints a table (a script a row, a check a column) and the totals; `--markdown` writes the README's table, `--json`
every check's result and message. Exit 1 when a script is wrong or the port had an internal error.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass, field
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "benchmarks" / "port_corpus"
TESTS = "tests/test_port_published.py"

# The test of each check, by the column the table gives it.
CHECKS = {
    "test_each_published_script_is_ported": "port",
    "test_refused_with_its_reason_and_nothing_written": "refusal",
    "test_hand_batching_is_sharded_or_named_by_its_line": "hand batching",
    "test_nothing_to_wrap_is_said_and_the_data_stays_whole": "not parallel",
    "test_python_out_takes_script_path_bit_for_bit": "python",
    "test_two_processes_are_one_data_parallel_training": "2 procs",
    "test_each_epoch_is_split_into_disjoint_halves_that_cover_it": "epochs",
    "test_files_are_written_once_by_rank_zero": "files",
    "test_two_by_half_batch_ends_where_one_by_batch_does": "1xB=2xB/2",
    "test_rank_zero_prints_the_evaluation_of_one_process": "eval",
}
COLUMNS = list(dict.fromkeys(CHECKS.values()))
TESTS_OF = {  # the manifest's outcome -> the tests that check it
    "refused": ["test_refused_with_its_reason_and_nothing_written"],
    "hand_batching": ["test_hand_batching_is_sharded_or_named_by_its_line"],
    "not_parallel": ["test_nothing_to_wrap_is_said_and_the_data_stays_whole"],
    "ported": [
        test
        for test in CHECKS
        if test.startswith(
            ("test_each_published", "test_python", "test_two", "test_each_epoch", "test_files", "test_rank_zero")
        )
    ],
}
MARK = {"passed": "ok", "failed": "FAIL", "error": "ERROR", "skipped": "-"}
INTERNAL = "bug of ddpcli"  # the port's words for an internal error (ddpcli.errors)


@dataclass
class Script:
    name: str
    repository: str
    commit: str
    kind: str
    outcome: str
    checks: dict[str, tuple[str, str]] = field(default_factory=dict)  # column -> (result, message)

    @property
    def mirrored(self) -> bool:
        return not any("no mirror under" in message for _, message in self.checks.values())

    @property
    def verdict(self) -> str:
        """right, wrong (a check failed or errored), or unmirrored (skipped for want of a mirror)."""
        if not self.mirrored:
            return "unmirrored"
        if not self.checks:
            return "not run"
        if any(result in ("failed", "error") for result, _ in self.checks.values()):
            return "wrong"
        return "right"

    @property
    def internal_error(self) -> bool:
        return any(INTERNAL in message for _, message in self.checks.values())

    def first_failure(self) -> str:
        for column in COLUMNS:
            result, message = self.checks.get(column, ("", ""))
            if result in ("failed", "error"):
                return f"{column}: {_first_line(message)}"
        return ""


def _first_line(message: str) -> str:
    """The line of a pytest failure that says what was wrong: the assertion's, else the first."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    for line in lines:
        if line.startswith(("AssertionError", "assert ", "E ")) or "Error:" in line:
            return line.removeprefix("E").strip()[:160]
    return (lines[0] if lines else "")[:160]


def read_corpus(only: list[str]) -> dict[str, Script]:
    scripts = {}
    for path in sorted(CORPUS.glob("*.toml")):
        for name, entry in tomllib.loads(path.read_text())["fixtures"].items():
            if only and name not in only:
                continue
            upstream = entry["upstream"]
            scripts[name] = Script(name, upstream["repository"], upstream["commit"], entry.get("kind", ""),
                                   entry["outcome"])  # fmt: skip
    return scripts


def run_checks(scripts: dict[str, Script], mirrors: Path, reports: Path, jobs: int) -> list[str]:
    """tests/test_port_published.py over the corpus in `jobs` pytest processes side by side (each script's runs are
    torchrun jobs of their own), a junit report each; what a process printed where it wrote no report."""
    env = {**os.environ, "DDPCLI_PORT_CORPUS": str(CORPUS), "DDPCLI_PUBLISHED_MIRRORS": str(mirrors)}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    names = list(scripts)
    running = []
    for job in range(jobs):
        tests = [f"{TESTS}::{test}[{name}]" for name in names[job::jobs] for test in TESTS_OF[scripts[name].outcome]]
        if not tests:
            continue
        report = reports / f"report-{job}.xml"
        command = [sys.executable, "-m", "pytest", *tests, "-n", "0", "-p", "no:cacheprovider", "-q", "-o",
                   "addopts=", f"--junitxml={report}"]  # fmt: skip
        running.append((report, subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                                 stderr=subprocess.STDOUT, text=True)))  # fmt: skip
    failures = []
    for report, process in running:
        output, _ = process.communicate()
        if not report.exists():
            failures.append(output[-4000:])
    return failures


def read_results(scripts: dict[str, Script], reports: Path) -> None:
    cases = [
        case for report in sorted(reports.glob("report-*.xml")) for case in ElementTree.parse(report).iter("testcase")
    ]
    for case in cases:
        match = re.fullmatch(r"(\w+)\[(.+)\]", case.get("name", ""))
        if not match or match[1] not in CHECKS or match[2] not in scripts:
            continue
        result, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                result = {"failure": "failed"}.get(child.tag, child.tag)
                message = (child.get("message") or "") + "\n" + (child.text or "")
        scripts[match[2]].checks[CHECKS[match[1]]] = (result, message)


def table(scripts: dict[str, Script]) -> list[list[str]]:
    rows = [["script", "repository", "kind", "expected", *COLUMNS, "verdict"]]
    for script in scripts.values():
        marks = [MARK.get(script.checks.get(column, ("", ""))[0], "") for column in COLUMNS]
        rows.append([script.name, f"{script.repository}@{script.commit[:7]}", script.kind, script.outcome, *marks,
                     script.verdict])  # fmt: skip
    return rows


def totals(scripts: dict[str, Script]) -> dict[str, int]:
    mirrored = [script for script in scripts.values() if script.mirrored]
    return {
        "scripts": len(scripts),
        "repositories": len({script.repository for script in scripts.values()}),
        "mirrored": len(mirrored),
        "mirrored_repositories": len({script.repository for script in mirrored}),
        "right": sum(script.verdict == "right" for script in mirrored),
        "wrong": sum(script.verdict == "wrong" for script in mirrored),
        "internal_errors": sum(script.internal_error for script in mirrored),
    }


def plain(rows: list[list[str]]) -> str:
    widths = [max(len(row[index]) for row in rows) for index in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)) for row in rows)


def markdown(rows: list[list[str]], scripts: dict[str, Script], counts: dict[str, int], header: str) -> str:
    lines = [header, "", "| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])]
    lines += ["| " + " | ".join(row) + " |" for row in rows[1:]]
    wrong = [script for script in scripts.values() if script.verdict == "wrong"]
    if wrong:
        lines += ["", "What is wrong, each script's first failing check:", ""]
        lines += [f"- {script.name}: {script.first_failure()}" for script in wrong]
    lines += ["", ", ".join(f"{key.replace('_', ' ')}: {value}" for key, value in counts.items())]
    return "\n".join(lines) + "\n"


def commit_of_ddpcli() -> str:
    result = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                            check=False)  # fmt: skip
    return result.stdout.strip() or "unknown"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--mirrors",
        type=Path,
        default=Path(os.environ.get("DDPCLI_PUBLISHED_MIRRORS", "mirrors")),
        help="the folder of <owner>+<name>/repo git mirrors (default: $DDPCLI_PUBLISHED_MIRRORS)",
    )
    parser.add_argument("--only", nargs="+", default=[], metavar="NAME", help="these scripts of the corpus alone")
    parser.add_argument("--jobs", type=int, default=1, help="pytest processes side by side (default 1)")
    parser.add_argument("--markdown", type=Path, help="write the table, the failures and the totals as Markdown")
    parser.add_argument("--json", type=Path, help="write every check's result and message as JSON")
    args = parser.parse_args()
    scripts = read_corpus(args.only)
    if not scripts:
        print(f"no script of {CORPUS} matches", file=sys.stderr)
        return 2
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as scratch:
        failures = run_checks(scripts, args.mirrors.resolve(), Path(scratch), args.jobs)
        for output in failures:
            print(output, file=sys.stderr)
        if failures:
            return 2
        read_results(scripts, Path(scratch))
    rows, counts = table(scripts), totals(scripts)
    print(plain(rows))
    for script in scripts.values():
        if script.verdict == "wrong":
            print(f"  {script.name}: {script.first_failure()}")
    print(", ".join(f"{key.replace('_', ' ')}: {value}" for key, value in counts.items()),
          f"({time.perf_counter() - started:.0f} s)")  # fmt: skip
    header = f"ddpcli {commit_of_ddpcli()}, {time.strftime('%Y-%m-%d')}, torch CPU, gloo, synthetic data"
    if args.markdown:
        args.markdown.write_text(markdown(rows, scripts, counts, header))
    if args.json:
        records = {name: {"repository": s.repository, "commit": s.commit, "kind": s.kind, "expected": s.outcome,
                          "verdict": s.verdict, "checks": {c: {"result": r, "message": m.strip()[:2000]}
                                                           for c, (r, m) in s.checks.items()}}
                   for name, s in scripts.items()}  # fmt: skip
        args.json.write_text(json.dumps({"header": header, "totals": counts, "scripts": records}, indent=2))
    return 1 if counts["wrong"] or counts["internal_errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
