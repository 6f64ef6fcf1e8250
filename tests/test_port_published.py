"""`ddpcli port` on scripts people publish (issues 25 and 37), proven by running what it wrote.

tests/port_scripts/ holds two kinds of fixture, and manifest.toml says what port must do with each: reproductions of
our own (each reproducing a published script's patterns, its header names which, with small models and synthetic
data), and published scripts themselves, read at a recorded commit from a local git mirror of their repository
(DDPCLI_PUBLISHED_MIRRORS; published code is not committed here, and those tests skip without it) with the smallest
written-down edits for a CPU run; their data comes from _shims/torchvision, synthetic sets of the real shapes. For a
script it ports: `python OUT` ends with bit-identical parameters and the same files as `python SCRIPT`; 1 x B and
2 x B/2 are launched through one `ddpcli launch` (torchrun, gloo, the observer), and each 2-process run must be
data-parallel (both ranks' parameters identical, distinct samples, no error finding), every epoch must be split into
disjoint halves that cover the training set, each file must be written by rank 0 alone, and where the manifest says
so 2 x B/2 must end within 1e-5 of 1 x B. What each process did is recorded from outside the script by
_probe/sitecustomize.py. Costs: the port runs in this process, and `python SCRIPT` / `python OUT` are forked from an
interpreter that imported torch once (tests/zygote.py, the probe applied by _probe/probed.py).
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import tomllib

from ddpcli.diagnosis.slowness import SLOWNESS_CODES
from tests import zygote
from tests.conftest import REPO
from tests.helpers import port_command
from tests.port_scripts import _synthetic as synthetic

pytestmark = pytest.mark.e2e

FIXTURES = REPO / "tests" / "port_scripts"
PROBE = FIXTURES / "_probe"
SHIMS = FIXTURES / "_shims"  # torchvision's stand-in (synthetic data of the real shapes) for published scripts
MIRRORS = os.environ.get("DDPCLI_PUBLISHED_MIRRORS", "")  # <owner>+<name>/repo: git mirrors of published scripts
CORPUS = os.environ.get("DDPCLI_PORT_CORPUS", "")  # a folder of manifests: benchmarks/port_corpus.py runs them instead


def manifest() -> dict[str, dict[str, Any]]:
    """The fixtures: tests/port_scripts/manifest.toml, or every `*.toml` of DDPCLI_PORT_CORPUS (the benchmark's
    published corpus, one file a repository, in the same format); a name given twice is an error, not a shadow."""
    paths = sorted(Path(CORPUS).glob("*.toml")) if CORPUS else [FIXTURES / "manifest.toml"]
    fixtures: dict[str, dict[str, Any]] = {}
    for path in paths:
        for name, entry in tomllib.loads(path.read_text())["fixtures"].items():
            assert name not in fixtures, f"{path}: fixture {name} is named twice"
            fixtures[name] = {**entry, "name": name}
    return fixtures


MANIFEST = manifest()
PORTED = [name for name, entry in MANIFEST.items() if entry["outcome"] == "ported"]
REFUSED = [name for name, entry in MANIFEST.items() if entry["outcome"] == "refused"]
HAND_BATCHING = [name for name, entry in MANIFEST.items() if entry["outcome"] == "hand_batching"]
NOT_PARALLEL = [name for name, entry in MANIFEST.items() if entry["outcome"] == "not_parallel"]
TOLERANCE = 1e-5
LAUNCH_OK = {"completed"}


def ddpcli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ddpcli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600, check=False, env=environment())  # fmt: skip


def environment(probe_dir: Path | None = None, **switches: str) -> dict[str, str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg", "PYTHONHASHSEED": "0"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PROBE), str(SHIMS), str(REPO), os.environ.get("PYTHONPATH")]))
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "PORT_PROBE_DIR"):
        env.pop(key, None)
    if probe_dir is not None:
        env["PORT_PROBE_DIR"] = str(probe_dir)
    env.update(switches)
    return env


def copy_fixture(name: str, root: Path, batch: int | None = None) -> Path:
    """The fixture's folder (or file) copied under root; a script without a parser gets `batch` written in."""
    entry = MANIFEST[name]
    if "upstream" in entry:
        script = published_copy(entry["upstream"], root / "script")
    else:
        source = FIXTURES / entry["script"]
        target_dir = root / (source.parent.name if source.parent != FIXTURES else "script")
        if source.parent != FIXTURES:
            shutil.copytree(source.parent, target_dir)
        else:
            target_dir.mkdir(parents=True)
            shutil.copy(source, target_dir)
        script = target_dir / source.name
    if batch is not None and "batch_source" in entry:
        text = script.read_text()
        line = re.compile(rf"^{re.escape(entry['batch_source'])}\b", re.MULTILINE)  # the code's line, not a comment
        assert len(line.findall(text)) == 1
        script.write_text(line.sub(f"batch_size = {batch}", text))
    if "text_corpus" in entry:  # a word-level corpus: train/valid/test.txt of a small vocabulary, seeded
        folder = script.parent / entry["text_corpus"]
        folder.mkdir(parents=True, exist_ok=True)
        words = random.Random(0)
        for split, lines in (("train", 60), ("valid", 12), ("test", 12)):
            text = "".join(" ".join(f"w{words.randrange(40)}" for _ in range(9)) + " \n" for _ in range(lines))
            (folder / f"{split}.txt").write_text(text)
    if batch is not None and "batch_replace" in entry:  # the batch inside a call: batch_size=128
        text = script.read_text()
        assert text.count(entry["batch_replace"]) == 1
        script.write_text(text.replace(entry["batch_replace"], f"batch_size={batch}"))
    return script


def published_copy(upstream: dict[str, Any], target_dir: Path) -> Path:
    """A published script and its siblings as its repository holds them at the recorded commit, read from a local
    git mirror (never committed here), with the manifest's edits, each of which must find its text on its line."""
    git_dir = Path(MIRRORS) / upstream["repository"].replace("/", "+") / "repo"
    git_dir = git_dir / ".git" if (git_dir / ".git").is_dir() else git_dir  # a clone with a work tree, or bare
    if not MIRRORS or not git_dir.is_dir():
        pytest.skip(f"{upstream['repository']}: no mirror under DDPCLI_PUBLISHED_MIRRORS (published code is not "
                    "committed here)")  # fmt: skip
    folder = f"{upstream['folder']}/" if upstream["folder"] else ""
    commit = upstream["commit"]

    def git(*args: str) -> bytes:
        return subprocess.run(["git", f"--git-dir={git_dir}", *args], capture_output=True, check=True).stdout

    files = []
    for path in upstream["files"]:
        if path.endswith("/"):
            files += [
                path + name for name in git("ls-tree", "--name-only", f"{commit}:{folder}{path}").decode().split()
            ]
        else:
            files.append(path)
    for path in files:
        (target_dir / path).parent.mkdir(parents=True, exist_ok=True)
        (target_dir / path).write_bytes(git("show", f"{commit}:{folder}{path}"))
    for edit in upstream.get("edits", []):
        lines = (target_dir / edit["file"]).read_text().splitlines(keepends=True)
        assert edit["replace"] in lines[edit["line"] - 1], (edit, lines[edit["line"] - 1])
        lines[edit["line"] - 1] = lines[edit["line"] - 1].replace(edit["replace"], edit["with"], 1)
        (target_dir / edit["file"]).write_text("".join(lines))
    return target_dir / upstream["script"]


def port(script: Path, as_json: bool = True) -> subprocess.CompletedProcess[str]:
    return port_command(script, *(["--json"] if as_json else []))


def ported_path(script: Path) -> Path:
    return script.with_name(f"{script.stem}_ddp.py")


def args_for(name: str, batch: int | str, here: Path) -> list[str]:
    """The manifest's args: "{batch}" the batch, "{here}" the script's folder (data shipped beside it)."""
    return [arg.replace("{batch}", str(batch)).replace("{here}", str(here)) for arg in MANIFEST[name]["args"]]


def run_python(name: str, script: Path, workdir: Path) -> dict[str, Any]:
    """`python SCRIPT ARGS` in a fresh working directory: its files, the probe's record and parameters."""
    entry = MANIFEST[name]
    workdir.mkdir(parents=True)
    for folder in entry.get("dirs", []):
        (workdir / folder).mkdir()
    probe_dir = workdir.parent / f"{workdir.name}-probe"
    probe_dir.mkdir()
    # forked from an interpreter that imported torch once (tests/zygote.py); probed.py applies the probe in it
    args = args_for(name, entry.get("batch", ""), script.parent)  # no batch: a script run once, never launched
    command = [sys.executable, str(PROBE / "probed.py"), str(script), *args]
    result = zygote.run(command, env=environment(probe_dir, **switches_for(entry)), cwd=workdir, timeout=300)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    return {"dir": workdir, "files": files_in(workdir), **read_probe(probe_dir)["main"]}


def switches_for(entry: dict[str, Any]) -> dict[str, str]:
    """The probe's float64 and noise-off switches, alike for the python runs and both launches (a script whose
    files depend on its numbers, a checkpoint saved when the accuracy improves, then writes the same files in all)."""
    switches = dict(entry.get("env", {}))  # the shim's data sizes, a seed for a script that sets none
    if "synthetic" in entry:  # files the script reads from its working directory
        switches["PORT_PROBE_DATA"] = str(synthetic.folder_for(entry["name"], entry["synthetic"]))
    if entry.get("float64"):
        switches["PORT_PROBE_FLOAT64"] = "1"
    if entry.get("noise_off"):
        switches["PORT_PROBE_NOISE_OFF"] = "1"
    return switches


STAMPED = re.compile(r"(events\.out\.tfevents)\.\d+\.[^/]+$")  # TensorBoard's file: its time, host and pid


def files_in(directory: Path) -> set[str]:
    """The files under `directory`, a TensorBoard event file by its folder and kind: its name holds the time, the
    host and the pid it was written at, which no two runs share."""
    return {STAMPED.sub(r"\1.*", str(path.relative_to(directory))) for path in directory.rglob("*") if path.is_file()}


def read_probe(probe_dir: Path) -> dict[str, dict[str, Any]]:
    """Rank (or "main") -> {"iterations", "saves", "params"} of each process that trained."""
    import torch

    seen: dict[str, dict[str, Any]] = {}
    for path in sorted(probe_dir.glob("*.probe.json")):
        record = json.loads(path.read_text())
        params = torch.load(str(path).removesuffix(".probe.json") + ".params.pt", weights_only=True)
        assert record["rank"] not in seen, f"two processes of rank {record['rank']}"
        seen[record["rank"]] = {**record, "params": params}
    return seen


def loaded(path: Path, script_dir: Path) -> list[Any]:
    """The tensors of a saved file, in order: a state_dict's items, or a whole saved module's state_dict (its class
    is imported from the script's folder, as the script imported it)."""
    import torch

    sys.path.insert(0, str(script_dir))
    try:
        obj = torch.load(path, weights_only=False)
    finally:
        sys.path.remove(str(script_dir))
    if isinstance(obj, torch.nn.Module):
        obj = obj.state_dict()
    if isinstance(obj, torch.Tensor):
        return [("", obj)]
    assert isinstance(obj, dict), type(obj)
    return [(key, value) for key, value in obj.items()]


def max_diff(first: list[Any], second: list[Any]) -> float:
    assert len(first) == len(second)
    return max(float((a.double() - b.double()).abs().max()) for a, b in zip(first, second, strict=True))


# -- refusals ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", REFUSED)
def test_refused_with_its_reason_and_nothing_written(name: str, tmp_path: Path) -> None:
    script = copy_fixture(name, tmp_path)
    before = files_in(tmp_path)
    result = port(script, as_json=False)  # the refusal as a user reads it
    assert result.returncode == 2, result.stdout + result.stderr
    said = (result.stdout + result.stderr).lower()
    for alternatives in MANIFEST[name]["reasons"]:
        assert any(reason.lower() in said for reason in alternatives), (alternatives, result.stderr)
    assert files_in(tmp_path) == before


@pytest.mark.parametrize("name", HAND_BATCHING)
def test_hand_batching_is_sharded_or_named_by_its_line(name: str, tmp_path: Path) -> None:
    entry = MANIFEST[name]
    script = copy_fixture(name, tmp_path)
    result = port(script)
    if result.returncode == 2:
        assert any(f":{line}:" in result.stderr for line in entry["lines"]), result.stderr  # `SCRIPT:LINE: ...`
        assert not ported_path(script).exists()
        return
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    named = {item["line"] for item in report["not_ported"]}
    changed = {item["line"] for item in report["changes"]}
    assert named & set(entry["lines"]) or changed & set(entry["lines"]), report
    # Whatever it did, python OUT still takes SCRIPT's path.
    original = run_python(name, script, tmp_path / "original")
    out = run_python(name, ported_path(script), tmp_path / "out")
    assert out["files"] == original["files"]
    assert max_diff(out["params"], original["params"]) == 0.0
    if named & set(entry["lines"]):
        return  # left to the user, with its line
    # Sharded: two processes train one model on distinct columns, rank 0 alone writes the best model.
    run = launch_pair(name, tmp_path, ported_path(script), ported_path(script), entry["batch"],
                      only_two=True)["2x"]  # fmt: skip
    record = run["record"]
    assert record["status"] == "completed", run["launch"].stdout[-3000:] + run["launch"].stderr[-3000:]
    observed = record["observed"]
    assert (observed["world_size"], observed["data_parallel_size"]) == (2, 2)
    assert observed["distinct_samples_across_ranks"] is True
    assert [f for f in record["findings"] if f["severity"] == "error"] == []
    ranks = run["probe"]
    assert max_diff(ranks["0"]["params"], ranks["1"]["params"]) == 0.0
    assert ranks["1"]["saves"] == [] and len(ranks["0"]["saves"]) == len(original["saves"])


@pytest.mark.parametrize("name", NOT_PARALLEL)
def test_nothing_to_wrap_is_said_and_the_data_stays_whole(name: str, tmp_path: Path) -> None:
    """A script whose training no DistributedDataParallel can hold (each layer steps an optimizer of its own on its
    own forward): the port says so, wraps nothing and shards nothing (a rank a model on its share would end apart),
    and `python OUT` is the script."""
    script = copy_fixture(name, tmp_path)
    result = port(script)
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert any("the data is not sharded either" in item["reason"] for item in report["not_ported"]), report
    assert not {"ddp_wrap", "sampler", "hand_batches"} & {change["kind"] for change in report["changes"]}
    original = run_python(name, script, tmp_path / "original")
    out = run_python(name, ported_path(script), tmp_path / "out")
    assert out["files"] == original["files"] and max_diff(out["params"], original["params"]) == 0.0


# -- ported scripts: the port, then python, then torchrun ----------------------------------------------------------


@pytest.fixture(scope="module", params=PORTED)
def ported(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One fixture ported, run with python (SCRIPT and OUT), and launched as 1 x B and 2 x B/2."""
    name = request.param
    entry = MANIFEST[name]
    root = tmp_path_factory.mktemp(f"port-{name}")
    script = copy_fixture(name, root / "full")
    source_text = script.read_text()
    result = port(script)
    state: dict[str, Any] = {"name": name, "script": script, "port": result, "source_text": source_text}
    if result.returncode != 0:
        return state
    out = ported_path(script)
    state["out"] = out
    state["python"] = {"script": run_python(name, script, root / "py-script"),
                       "out": run_python(name, out, root / "py-out")}  # fmt: skip
    half = entry["batch"] // 2
    if (
        "batch_source" in entry or "batch_replace" in entry
    ):  # no parser: the B/2 run is the user's edit of the batch line, ported again
        half_script = copy_fixture(name, root / "half", batch=half)
        half_port = port(half_script)
        assert half_port.returncode == 0, half_port.stdout + half_port.stderr
        half_out = ported_path(half_script)
    else:
        half_out = out
    state["runs"] = launch_pair(name, root, out, half_out, half)
    return state


RUN_FILES = ("run.json", "metrics.jsonl", "final_params.pt", "summary.json")  # ddpcli's, beside the script's files
RUN_FOLDERS = ("observed",)  # docs/contracts.md: the run directory
# logs/ is ddpcli's (torchrun.log, torchrun's <id>/attempt_<n>/<rank>/ folders) and may be the script's too: a script
# writing `logs/<name>.csv` in its working directory (uoguelph-mlrg/Cutout) writes it beside them


def launch_pair(name: str, root: Path, out: Path, half_out: Path, half: int,
                only_two: bool = False) -> dict[str, dict[str, Any]]:  # fmt: skip
    """1 x B and 2 x B/2 through one `ddpcli launch` (one launcher, one torchrun server), each run in its own run
    directory as its working directory (`workdir = "run"`: the script's files), each with its own probe folder."""
    entry = MANIFEST[name]
    pairs = [("1x", out, 1, entry["batch"]), ("2x", half_out, 2, half)]
    pairs = pairs[1:] if only_two else pairs
    switches = switches_for(entry)
    env = {"OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg", **switches}
    if entry.get("dirs"):
        env["PORT_PROBE_MKDIRS"] = os.pathsep.join(entry["dirs"])  # folders the script expects, made as a user would
    env_toml = ", ".join(f'{key} = "{value}"' for key, value in env.items())
    sizes = f"dataset_size = {entry['train_samples']}\nepochs = {entry['epochs']}" if "epochs" in entry else ""
    text = f"""
[defaults]
scaling = "none"
workdir = "run"
runs_dir = "{root / "runs"}"
timeout_s = 300
lr = {entry["lr"]}
{sizes}
env = {{ {env_toml} }}
"""
    for index, (label, script, nproc, batch) in enumerate(pairs):
        args = json.dumps(args_for(name, "{per_device_batch_size}", script.parent))
        (root / f"probe-{label}").mkdir()
        text += f"""
[{"baseline" if index == 0 else "[experiments]"}]
name = "{name}-{label}{batch}"
script = "{script}"
args = {args}
nproc_per_node = {nproc}
per_device_batch_size = {batch}
env = {{ PORT_PROBE_DIR = "{root / f"probe-{label}"}" }}
"""
    launch_dir = root / "launch"
    launch_dir.mkdir()
    (launch_dir / "experiments.toml").write_text(text)
    result = ddpcli("launch", "experiments.toml", cwd=launch_dir)
    runs = {}
    for label, _, _, batch in pairs:
        [record_path] = (root / "runs").glob(f"{name}-{label}{batch}/*/run.json")
        run_dir = record_path.parent
        runs[label] = {"launch": result, "record": json.loads(record_path.read_text()), "dir": run_dir,
                       "run_dir": run_dir, "files": script_files(run_dir),
                       "probe": read_probe(root / f"probe-{label}")}  # fmt: skip
    return runs


def script_files(run_dir: Path) -> set[str]:
    """What the script wrote in its working directory, the run directory: all but ddpcli's own files."""
    return {path for path in files_in(run_dir) if path not in RUN_FILES and path.split("/")[0] not in RUN_FOLDERS
            and not _torchrun_log(path)}  # fmt: skip


def _torchrun_log(path: str) -> bool:
    parts = path.split("/")
    return parts[0] == "logs" and (
        parts[1:] == ["torchrun.log"] or (len(parts) > 2 and parts[2].startswith("attempt_"))
    )


def require(state: dict[str, Any]) -> None:
    result = state["port"]
    assert result.returncode == 0, f"port exited {result.returncode}: {result.stdout[-2000:]}{result.stderr[-2000:]}"


def test_each_published_script_is_ported(ported: dict[str, Any]) -> None:
    script, text, result = ported["script"], ported["source_text"], ported["port"]
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert Path(report["output"]).resolve() == ported_path(script).resolve()
    assert ported_path(script).exists() and script.read_text() == text
    assert report["changes"], report
    assert all({"line", "kind", "text"} <= set(change) for change in report["changes"])


def test_python_out_takes_script_path_bit_for_bit(ported: dict[str, Any]) -> None:
    require(ported)
    entry = MANIFEST[ported["name"]]
    original, out = ported["python"]["script"], ported["python"]["out"]
    here = ported["script"].parent
    assert out["files"] == original["files"]
    assert len(out["params"]) == len(original["params"]) > 0
    assert max_diff(out["params"], original["params"]) == 0.0
    for saved in entry["saves"]:
        assert saved in original["files"]
        a, b = loaded(original["dir"] / saved, here), loaded(out["dir"] / saved, here)
        assert [key for key, _ in a] == [key for key, _ in b]  # same names: no `module.` prefix
        assert max_diff([v for _, v in a], [v for _, v in b]) == 0.0
    assert out["saves"] == original["saves"]


def test_two_processes_are_one_data_parallel_training(ported: dict[str, Any]) -> None:
    require(ported)
    run = ported["runs"]["2x"]
    record = run["record"]
    assert record["status"] in LAUNCH_OK, run["launch"].stdout[-3000:] + run["launch"].stderr[-3000:]
    observed = record["observed"]
    assert (observed["world_size"], observed["data_parallel_size"], observed["ddp"]) == (2, 2, True)
    assert observed["distinct_samples_across_ranks"] is True
    assert observed["per_device_batch_size"] == MANIFEST[ported["name"]]["batch"] // 2
    assert observed["dropout_layers"] == MANIFEST[ported["name"]].get("dropout_layers", 0)
    assert [f for f in record["findings"] if f["severity"] == "error"] == []
    allowed = set(SLOWNESS_CODES) | set(MANIFEST[ported["name"]].get("allowed_findings", []))
    assert [f["code"] for f in record["findings"] if f["code"] not in allowed] == [], record["findings"]
    ranks = run["probe"]
    assert set(ranks) == {"0", "1"}
    assert max_diff(ranks["0"]["params"], ranks["1"]["params"]) == 0.0


def test_each_epoch_is_split_into_disjoint_halves_that_cover_it(ported: dict[str, Any]) -> None:
    require(ported)
    entry = MANIFEST[ported["name"]]
    if "epochs" not in entry:  # a script that draws with replacement until a step count: no epoch to split
        pytest.skip("no epochs: the script draws its samples with replacement until its last step")
    ranks = ported["runs"]["2x"]["probe"]
    epochs = {}
    for rank in ("0", "1"):
        epochs[rank] = [it["indices"] for it in ranks[rank]["iterations"]
                        if it["loader"] == entry.get("train_loader", 0) and it["complete"]]  # fmt: skip
        assert len(epochs[rank]) == entry["epochs"], [len(e) for e in epochs[rank]]
    for first, second in zip(epochs["0"], epochs["1"], strict=True):
        assert len(first) == len(second) == entry["train_samples"] // 2
        assert not set(first) & set(second)
        assert set(first) | set(second) == set(range(entry["train_samples"]))
    if entry["shuffle"]:  # set_epoch: each epoch in another order
        assert epochs["0"][0] != epochs["0"][1]


def test_files_are_written_once_by_rank_zero(ported: dict[str, Any]) -> None:
    require(ported)
    run = ported["runs"]["2x"]
    ranks = run["probe"]
    single = ported["runs"]["1x"]["probe"]["0"]
    assert ranks["1"]["saves"] == []
    saves = [ranks["0"]["saves"], single["saves"], ported["python"]["script"]["saves"]]
    if MANIFEST[ported["name"]]["equivalent"]:
        assert saves[0] == saves[1] == saves[2]
    else:  # a save when the test accuracy improves fires as often as runs that are not one training improve
        assert set(saves[0]) == set(saves[1]) == set(saves[2])
    assert run["files"] == ported["python"]["script"]["files"]
    for saved in MANIFEST[ported["name"]]["saves"]:
        here = ported["script"].parent
        keys = [key for key, _ in loaded(run["dir"] / saved, here)]
        assert keys == [key for key, _ in loaded(ported["python"]["script"]["dir"] / saved, here)]


def test_two_by_half_batch_ends_where_one_by_batch_does(ported: dict[str, Any]) -> None:
    name = ported["name"]
    if not MANIFEST[name]["equivalent"]:
        pytest.skip(f"not expected: batchnorm {MANIFEST[name]['batchnorm']}, noise {MANIFEST[name]['noise']!r}")
    require(ported)
    single, double = ported["runs"]["1x"], ported["runs"]["2x"]
    assert single["record"]["status"] in LAUNCH_OK and double["record"]["status"] in LAUNCH_OK
    diff = max_diff(single["probe"]["0"]["params"], double["probe"]["0"]["params"])
    assert diff <= TOLERANCE, f"2 x B/2 differs from 1 x B by {diff:.3g}"
    for saved in MANIFEST[name]["saves"]:
        here = ported["script"].parent
        a, b = loaded(single["dir"] / saved, here), loaded(double["dir"] / saved, here)
        assert max_diff([v for _, v in a], [v for _, v in b]) <= TOLERANCE


def test_rank_zero_prints_the_evaluation_of_one_process(ported: dict[str, Any]) -> None:
    """The evaluation lines rank 0 prints at 2 x B/2 are the 1-process run's (an evaluation sharded with its metric
    all-reduced, or run on rank 0 alone), where the two runs are equivalent."""
    entry = MANIFEST[ported["name"]]
    if "eval_lines" not in entry or not entry["equivalent"]:
        pytest.skip("no evaluation lines named, or runs not expected to be equivalent")
    require(ported)
    pattern = re.compile(entry["eval_lines"])

    def printed(run: dict[str, Any]) -> list[str]:
        [log] = run["run_dir"].glob("logs/*/attempt_*/0/stdout.log")
        return [line.strip() for line in log.read_text().splitlines() if pattern.search(line)]

    single, double = printed(ported["runs"]["1x"]), printed(ported["runs"]["2x"])
    assert single, f"no line of the 1-process run matches {entry['eval_lines']!r}"
    assert double == single
