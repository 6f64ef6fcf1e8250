"""`ddpcli init`: real scripts' --help (argparse, click, typer, HfArgumentParser, a module) to experiment files that
ddpcli's own loader resolves and `launch --dry-run` fills; every user mistake is one line and exit 2."""

from __future__ import annotations

import json
import re
import shutil
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from ddpcli.cli.app import app
from ddpcli.diagnosis.slowness import SLOWNESS_CODES
from ddpcli.errors import UserError
from ddpcli.experiment.loading import parse_experiment_text
from ddpcli.experiment.planning import load_plan, resolve_plan
from ddpcli.experiment.resolved import Plan
from ddpcli.init.help_text import parse_help
from ddpcli.init.roles import find_flags
from ddpcli.init.scaffold import InitRequest, build_experiment, default_world_sizes, keep_global_batch
from tests.conftest import REPO
from tests.init_helpers import SCRIPTS, dry_run, init, launch_and_read, script_args

runner = CliRunner()


def init_script(tmp_path: Path, name: str, *args: str) -> Plan:
    """Copy the fixture next to the experiment file (as a user's script would be), run init, load the plan."""
    shutil.copy(SCRIPTS / name, tmp_path / name)
    output = tmp_path / "experiments.toml"
    code, _, err = init(tmp_path / name, "-o", output, *args)
    assert code == 0, err
    return load_plan(output)


def runs_by_name(plan: Plan) -> dict[str, tuple[int, int, int, int, float]]:
    """name -> (world size, per-device batch, accumulation, global batch, lr)."""
    return {
        run.name: (run.world_size, run.per_device_batch_size, run.grad_accum_steps, run.global_batch_size, run.lr)
        for run in (each.plan for each in plan.runs)
    }


def test_argparse_with_dashes_wires_every_flag_with_the_defaults(tmp_path: Path) -> None:
    plan = init_script(tmp_path, "argparse_dashes.py")
    assert plan.baseline.launch.args == [
        "--batch-size", "{per_device_batch_size}", "--grad-accum-steps", "{grad_accum_steps}", "--lr", "{lr}",
        "--warmup-steps", "{warmup_steps}", "--max-steps", "{total_steps}", "--seed", "{seed}",
        "--output-dir", "{run_dir}",
    ]  # fmt: skip
    assert plan.baseline.launch.script == str(tmp_path / "argparse_dashes.py")
    assert (plan.baseline.plan.warmup_steps, plan.baseline.plan.total_steps, plan.baseline.plan.seed) == (10, 200, 7)
    assert plan.baseline.plan.optimizer == "adamw"  # from --optimizer's default: lr scales by sqrt
    assert runs_by_name(plan) == {
        "1x32": (1, 32, 1, 32, 0.1),
        "2x32": (2, 32, 1, 64, pytest.approx(0.1 * 2**0.5)),
        "2x16": (2, 16, 1, 32, 0.1),
        "4x32": (4, 32, 1, 128, pytest.approx(0.2)),
        "4x8": (4, 8, 1, 32, 0.1),
    }
    commands = dry_run(tmp_path / "experiments.toml")
    assert script_args(commands["4x8"], "argparse_dashes.py")[:8] == [
        "--batch-size", "8", "--grad-accum-steps", "1", "--lr", "0.1", "--warmup-steps", "10"
    ]  # fmt: skip
    assert script_args(commands["4x32"], "argparse_dashes.py")[5] == "0.2"  # sqrt(4) x 0.1
    assert script_args(commands["2x32"], "argparse_dashes.py")[7] == "5"  # warmup keeps 320 samples


def test_argparse_with_underscores_and_an_alias_trains_by_epochs(tmp_path: Path) -> None:
    plan = init_script(tmp_path, "argparse_underscores.py", "--nproc-per-node", "2")
    assert plan.baseline.launch.args == [
        "--bs", "{per_device_batch_size}", "--gradient_accumulation_steps", "{grad_accum_steps}",
        "--learning_rate", "{lr}", "--num_samples", "{dataset_size}", "--num_epochs", "{epochs}",
    ]  # fmt: skip
    # Baseline 24 x 2 accumulation = 48; keeping it on 2 processes halves the accumulation, not the batch.
    assert runs_by_name(plan) == {
        "1x24-acc2": (1, 24, 2, 48, 3e-4),
        "2x24-acc2": (2, 24, 2, 96, pytest.approx(6e-4)),
        "2x24": (2, 24, 1, 48, 3e-4),
    }
    assert (plan.baseline.plan.epochs, plan.baseline.plan.dataset_size, plan.baseline.plan.total_steps) == (2, 960, 40)


def test_click_script_defaults_are_read_although_click_hides_them(tmp_path: Path) -> None:
    plan = init_script(tmp_path, "click_train.py", "--nproc-per-node", "4")
    assert plan.baseline.launch.args == [
        "--per-device-batch-size", "{per_device_batch_size}", "--lr", "{lr}", "--steps", "{total_steps}",
        "--seed", "{seed}",
    ]  # fmt: skip
    assert runs_by_name(plan) == {
        "1x16": (1, 16, 1, 16, 0.01),
        "4x16": (4, 16, 1, 64, 0.04),
        "4x4": (4, 4, 1, 16, 0.01),
    }
    assert (plan.baseline.plan.total_steps, plan.baseline.plan.seed) == (50, 3)


def test_typer_script_and_the_users_batch_and_lr_win_over_its_defaults(tmp_path: Path) -> None:
    plan = init_script(
        tmp_path, "typer_train.py", "--per-device-batch-size", "12", "--lr", "0.5", "--nproc-per-node", "3"
    )
    assert plan.baseline.launch.args == [
        "--batch-size", "{per_device_batch_size}", "--learning-rate", "{lr}", "--warmup", "{warmup_steps}",
        "--iterations", "{total_steps}",
    ]  # fmt: skip
    assert runs_by_name(plan) == {"1x12": (1, 12, 1, 12, 0.5), "3x12": (3, 12, 1, 36, 1.5), "3x4": (3, 4, 1, 12, 0.5)}
    assert (plan.baseline.plan.warmup_steps, plan.baseline.plan.total_steps) == (100, 1000)


def test_hf_argument_parser_with_training_arguments(tmp_path: Path) -> None:
    started = time.monotonic()
    plan = init_script(tmp_path, "hf_train.py", "--nproc-per-node", "2,4")
    elapsed = time.monotonic() - started
    assert plan.baseline.launch.args == [
        "--per_device_train_batch_size", "{per_device_batch_size}",
        "--gradient_accumulation_steps", "{grad_accum_steps}", "--learning_rate", "{lr}",
        "--warmup_steps", "{warmup_steps}", "--seed", "{seed}", "--output_dir", "{run_dir}",
        "--use_cpu", "True", "--ddp_backend", "gloo",  # no CUDA here: the Trainer's own switches to DDP on CPU
    ]  # fmt: skip
    baseline = plan.baseline.plan
    assert (baseline.per_device_batch_size, baseline.lr, baseline.seed) == (8, 5e-05, 42)
    assert baseline.optimizer == "adamw" and baseline.total_steps is None  # max_steps -1: not a count
    assert [run.name for run in plan.runs] == ["1x8", "2x8", "2x4", "4x8", "4x2"]
    assert elapsed < 15, f"transformers' --help took {elapsed:.1f} s"  # about 2.5 s on the 2-core dev machine
    commands = dry_run(tmp_path / "experiments.toml")
    command = commands["2x4"]
    assert "/runs/2x4/" in command[command.index("--output_dir") + 1]


def test_a_module_runs_with_python_m_from_the_output_files_folder(tmp_path: Path) -> None:
    package = tmp_path / "mypkg"
    package.mkdir()
    (package / "__init__.py").write_text("", encoding="utf-8")
    shutil.copy(SCRIPTS / "argparse_dashes.py", package / "train.py")
    code, _, err = init("-m", "mypkg.train", "-o", tmp_path / "experiments.toml", "--nproc-per-node", "2")
    assert code == 0, err
    plan = load_plan(tmp_path / "experiments.toml")
    assert (plan.baseline.launch.module, plan.baseline.launch.script) == ("mypkg.train", None)
    assert plan.baseline.launch.args[:4] == [
        "--batch-size",
        "{per_device_batch_size}",
        "--grad-accum-steps",
        "{grad_accum_steps}",
    ]
    assert [run.name for run in plan.runs] == ["1x32", "2x32", "2x16"]


def test_no_recognisable_flag_still_plans_and_warns(tmp_path: Path) -> None:
    shutil.copy(SCRIPTS / "no_flags.py", tmp_path / "no_flags.py")
    code, _, err = init(tmp_path / "no_flags.py", "-o", tmp_path / "experiments.toml")
    assert code == 0
    assert "no batch flag found: the script decides its own batch (not found in the source)" in err
    assert "no learning-rate flag found" in err
    text = (tmp_path / "experiments.toml").read_text(encoding="utf-8")
    assert "#   - no batch flag found" in text  # the same lines head the file
    plan = load_plan(tmp_path / "experiments.toml")
    assert plan.baseline.launch.args == []  # --global-batch-size is not a per-device batch
    assert [run.name for run in plan.runs] == ["1x32", "2x32", "4x32"]
    # 32 and 0.001 are nobody's numbers: the file marks them stand-ins and plan says so on every run
    assert plan.baseline.stand_ins == ("per_device_batch_size", "lr")
    assert all(any(note.startswith("Stand-ins, yours to check or fill in") for note in run.plan.notes)
               for run in plan.runs)  # fmt: skip
    assert dry_run(tmp_path / "experiments.toml")["4x32"][-1].endswith("no_flags.py")


def test_a_script_without_argument_parsing_is_not_run(tmp_path: Path) -> None:
    shutil.copy(SCRIPTS / "no_parser.py", tmp_path / "no_parser.py")
    code, _, err = init(tmp_path / "no_parser.py", "-o", tmp_path / "experiments.toml")
    assert code == 0
    assert "so it was not run with --help" in err
    assert not (tmp_path / "trained.marker").exists()
    assert load_plan(tmp_path / "experiments.toml").baseline.launch.args == []


def test_existing_file_is_kept_unless_force(tmp_path: Path) -> None:
    output = tmp_path / "experiments.toml"
    output.write_text("mine", encoding="utf-8")
    code, _, err = init(SCRIPTS / "click_train.py", "-o", output)
    assert code == 2 and err.count("\n") == 1 and "exists; pass --force" in err
    assert output.read_text(encoding="utf-8") == "mine"
    code, _, err = init(SCRIPTS / "click_train.py", "-o", output, "--force")
    assert code == 0, err
    assert load_plan(output).baseline.launch.args[0] == "--per-device-batch-size"


def test_print_writes_to_stdout_and_no_file(tmp_path: Path) -> None:
    output = tmp_path / "experiments.toml"
    output.write_text("mine", encoding="utf-8")  # --print never touches it
    code, out, err = init(SCRIPTS / "click_train.py", "-o", output, "--print")
    assert code == 0, err
    assert output.read_text(encoding="utf-8") == "mine"
    plan = resolve_plan(parse_experiment_text(out, output), output)
    assert plan.baseline.launch.script == str(SCRIPTS / "click_train.py")  # outside the file's folder: absolute


def test_example_is_the_bundled_file_and_plans(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    code, _, err = init("--example")
    assert code == 0, err
    written = (tmp_path / "experiments.toml").read_text(encoding="utf-8")
    assert written == (REPO / "experiments.toml").read_text(encoding="utf-8")
    assert [run.name for run in load_plan(tmp_path / "experiments.toml").runs] == ["1x16", "4x16", "1x64", "4x4"]
    code, _, err = init("--example")
    assert code == 2 and "exists; pass --force" in err
    code, out, _ = init("--example", "--print")
    assert code == 0 and out == written


def test_packaged_example_is_identical_to_the_repository_root_file() -> None:
    packaged = REPO / "ddpcli" / "examples" / "experiments.toml"
    assert packaged.read_bytes() == (REPO / "experiments.toml").read_bytes(), (
        "copy experiments.toml into ddpcli/examples/"
    )


def test_missing_experiment_file_names_both_ways_out(tmp_path: Path) -> None:
    result = runner.invoke(app, ["plan", str(tmp_path / "experiments.toml")])
    assert result.exit_code == 2
    assert "no such file; write one with `ddpcli init SCRIPT`" in result.stderr
    assert "`ddpcli init --example`" in result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["missing.py"], "missing.py: no such script"),
        ([], "give your training script"),
        (["x.py", "-m", "pkg.mod"], "give your training script"),
        (["-m", "not a module"], "expected a dotted module name"),
        (["-m", "no_such_module_for_ddpcli"], "exited with code 1: "),
        ([str(SCRIPTS / "broken.py")], "exited with code 1: ModuleNotFoundError"),
        ([str(SCRIPTS / "click_train.py"), "--nproc-per-node", "1"], "--nproc-per-node '1': expected whole numbers"),
        ([str(SCRIPTS / "click_train.py"), "--nproc-per-node", "2,x"], "expected whole numbers of 2 or more"),
        ([str(SCRIPTS / "click_train.py"), "--lr", "-1"], "--lr -1.0: expected a positive finite number"),
        (["--example", str(SCRIPTS / "click_train.py")], "--example writes the bundled file"),
        ([str(SCRIPTS / "click_train.py"), "-o", "no/such/dir/e.toml"], "no such directory"),
    ],
)
def test_user_mistakes_are_one_line_and_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], message: str
) -> None:
    monkeypatch.chdir(tmp_path)
    code, _, err = init(*args)
    assert code == 2, err
    assert err.startswith("error: ") and err.count("\n") == 1 and message in err, err
    assert not (tmp_path / "experiments.toml").exists()


def test_a_help_that_hangs_is_stopped_at_the_timeout(tmp_path: Path) -> None:
    started = time.monotonic()
    code, _, err = init(SCRIPTS / "slow_help.py", "-o", tmp_path / "e.toml", "--help-timeout", "1")
    assert code == 2 and err.count("\n") == 1
    assert "did not finish within 1 s" in err
    assert time.monotonic() - started < 10
    assert not (tmp_path / "e.toml").exists()


def test_a_batch_flag_without_a_shown_default_needs_the_users_batch() -> None:
    help_text = "options:\n  --batch-size N   per device\n  --lr LR  learning rate (default: 0.1)\n"
    request = InitRequest(script="t.py", module=None, help_command="python t.py --help")
    with pytest.raises(UserError, match="shows no default for --batch-size: give the one-device batch"):
        build_experiment(request, parse_help(help_text))
    scaffold = build_experiment(
        InitRequest(script="t.py", module=None, help_command="python t.py --help", per_device_batch_size=6),
        parse_help(help_text),
    )
    assert re.search(r"\nper_device_batch_size = 6 +# given to ddpcli init\n", scaffold.text)
    assert "no 4-process run keeps the global batch 6" in " ".join(scaffold.warnings)


def test_parse_help_reads_rich_boxed_typer_output_and_wrapped_defaults() -> None:
    boxed = (
        "╭─ Options ──────────────────────────────────────────╮\n"
        "│ --batch-size        INTEGER  Batch. [default: 64]  │\n"
        "│ --verbose                    Talk.                 │\n"
        "╰────────────────────────────────────────────────────╯\n"
    )
    options = parse_help(boxed)
    assert [(option.flags, option.takes_value, option.default) for option in options] == [
        (("--batch-size",), True, "64"),
        (("--verbose",), False, None),
    ]
    wrapped = "  --num_train_epochs NUM_TRAIN_EPOCHS, --num-train-epochs N\n      Epochs. (default:\n      3.0)\n"
    (option,) = parse_help(wrapped)
    assert option.flags == ("--num_train_epochs", "--num-train-epochs") and option.default == "3.0"


def test_boolean_and_global_batch_flags_are_never_wired() -> None:
    help_text = "  --bs  (default: False)\n  --global-batch-size G  (default: 64)\n  --batch_size B  (default: 8)\n"
    flags = find_flags(parse_help(help_text))
    assert flags["per_device_batch_size"].flag == "--batch_size" and flags["per_device_batch_size"].default == "8"


@pytest.mark.parametrize(
    ("global_batch", "world", "batch", "accum", "batch_wired", "accum_wired", "expected"),
    [
        (16, 4, 16, 1, True, True, (4, 1)),
        (64, 2, 16, 4, True, True, (16, 2)),  # less accumulation before a smaller batch
        (64, 2, 16, 4, True, False, (8, 4)),  # no accumulation flag: the batch shrinks
        (6, 4, 6, 1, True, True, None),  # 6 samples do not split over 4 processes
        (64, 4, 16, 4, False, True, (16, 1)),  # no batch flag: only accumulation can change
        (32, 2, 32, 1, False, True, None),
    ],
)
def test_keep_global_batch(
    global_batch: int, world: int, batch: int, accum: int, batch_wired: bool, accum_wired: bool, expected: object
) -> None:
    assert keep_global_batch(global_batch, world, batch, accum, batch_wired, accum_wired) == expected


def test_default_world_sizes_from_the_gpu_count() -> None:
    assert [default_world_sizes(count) for count in (None, 0, 1, 2, 6, 8)] == [
        (2, 4), (2, 4), (2, 4), (2,), (2, 4, 6), (2, 4, 8)
    ]  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), min_size=1, max_size=40))
def test_any_script_path_round_trips_through_ddpclis_loader(path_text: str) -> None:
    """Quotes, backslashes, newlines, control characters and unicode in a path: the file still loads as written.
    (Not NUL: no file system allows it in a path, and the loader refuses it.)"""
    request = InitRequest(script=path_text, module=None, help_command=f"python {path_text} --help")
    options = parse_help("  --batch-size B  (default: 8)\n  --lr LR  (default: 0.1)\n")
    text = build_experiment(request, options).text
    experiment_file = parse_experiment_text(text, Path("experiments.toml"))
    assert experiment_file.defaults.script == path_text


@pytest.mark.e2e
def test_init_then_launch_a_plain_ddp_script(tmp_path: Path) -> None:
    """init on a torch DDP script that knows nothing of ddpcli, then launch the baseline and a 2-process run that
    keeps the global batch: both complete, each rank received the planned per-device batch and lr, the observer
    saw the plan followed (no plan_mismatch) and compare says so."""

    plan = init_script(tmp_path, "ddp_plain.py", "--nproc-per-node", "2")
    assert plan.baseline.launch.args == [
        "--batch-size", "{per_device_batch_size}", "--lr", "{lr}", "--steps", "{total_steps}", "--seed", "{seed}"
    ]  # fmt: skip
    planned = {run.name: run for run in plan.runs}
    for name, (run_dir, record) in launch_and_read(tmp_path, "1x8", "2x4").items():
        received = [
            json.loads(line.removeprefix("received "))
            for log in sorted((run_dir / "logs").rglob("stdout.log"))
            for line in log.read_text(encoding="utf-8").splitlines()
            if line.startswith("received ")
        ]
        run = planned[name]
        assert [finding["code"] for finding in record["findings"] if finding["code"] not in SLOWNESS_CODES] == []
        observed = record["observed"]
        assert (observed["world_size"], observed["per_device_batch_size"], observed["global_batch_size"]) == (
            run.plan.world_size, run.plan.per_device_batch_size, run.plan.global_batch_size
        )  # fmt: skip
        assert (observed["optimizer_steps"], observed["lr_peak"]) == (run.plan.total_steps, run.plan.lr)
        assert sorted(item["rank"] for item in received) == list(range(run.plan.world_size))
        for item in received:
            assert (item["world_size"], item["per_device_batch_size"], item["lr"], item["steps"]) == (
                run.plan.world_size, run.plan.per_device_batch_size, run.plan.lr, run.plan.total_steps
            )  # fmt: skip
    assert (planned["2x4"].plan.per_device_batch_size, planned["2x4"].plan.global_batch_size) == (4, 8)
    compared = runner.invoke(app, ["compare", str(tmp_path / "runs"), "--json"])
    assert compared.exit_code == 0, compared.stderr
    rows = {row["name"]: row for row in json.loads(compared.stdout)}
    assert {name: (row["values_from"], row["plan_followed"]) for name, row in rows.items()} == {
        "1x8": ("observed", True), "2x4": ("observed", True)
    }  # fmt: skip
    assert rows["2x4"]["verdict"] is not None  # the observer's final parameters were compared with 1x8's


@pytest.mark.e2e
def test_init_then_launch_a_hugging_face_trainer_script(tmp_path: Path) -> None:
    """init reads a Trainer script's flags; launch runs 1x8 and 2x4 (same global batch) as planned: the observer
    sees the plan followed, and compare shows the observed numbers."""

    shutil.copy(REPO / "tests" / "observe_scripts" / "hf_train.py", tmp_path / "hf_train.py")
    code, _, err = init(tmp_path / "hf_train.py", "-o", tmp_path / "experiments.toml", "--nproc-per-node", "2")
    assert code == 0, err
    plan = load_plan(tmp_path / "experiments.toml")
    args = plan.baseline.launch.args
    assert args[:4] == ["--batch-size", "{per_device_batch_size}", "--grad-accum", "{grad_accum_steps}"]
    planned = {run.name: run for run in plan.runs}
    for name, (_, record) in launch_and_read(tmp_path, "1x8", "2x4").items():
        run, observed = planned[name], record["observed"]
        found = [finding["code"] for finding in record["findings"] if finding["code"] not in SLOWNESS_CODES]
        assert found == [], record["findings"]  # why-slow findings (a tiny model's all-reduce) are not mistakes
        assert (observed["world_size"], observed["per_device_batch_size"], observed["grad_accum_steps"]) == (
            run.plan.world_size, run.plan.per_device_batch_size, run.plan.grad_accum_steps
        )  # fmt: skip
        assert (observed["global_batch_size"], observed["optimizer_steps"]) == (8, run.plan.total_steps)
        assert observed["lr_peak"] == pytest.approx(run.plan.lr)
    compared = runner.invoke(app, ["compare", str(tmp_path / "runs"), "--json"])
    assert compared.exit_code == 0, compared.stderr
    rows = {row["name"]: row for row in json.loads(compared.stdout)}
    assert {name: row["plan_followed"] for name, row in rows.items()} == {"1x8": True, "2x4": True}
    assert rows["2x4"]["samples_seen"] == rows["1x8"]["samples_seen"] == 8 * planned["1x8"].plan.total_steps


def test_flags_named_in_the_description_are_not_options() -> None:
    """argparse wraps a description that quotes a command line: a wrapped line may start with a flag at column 0.
    Options are indented (argparse, click and typer all indent them); the description's flags are not options."""
    text = """usage: train.py [-h] [--batch-size BATCH_SIZE]

Run it as: torchrun --standalone
--nproc-per-node 2 train.py --batch-size 8
--grad-accum 2

options:
  -h, --help            show this help message and exit
  --batch-size BATCH_SIZE
                        (default: 16)
"""
    options = parse_help(text)
    assert [option.flags for option in options] == [("-h", "--help"), ("--batch-size",)]
    assert find_flags(options)["per_device_batch_size"].default == "16"


def test_a_run_that_keeps_the_per_device_batch_says_whether_its_lr_is_scaled() -> None:
    """A hard-coded lr is kept (scaling = "none"): the run's comment must not say "lr scaled"."""
    code, hard_coded, _ = init(SCRIPTS / "no_flags.py", "--print")
    assert code == 0
    assert "# keeps the per-device batch 32: global 64, same lr (the script's own)" in hard_coded
    code, wired, _ = init(SCRIPTS / "argparse_dashes.py", "--print")
    assert code == 0 and "global 64, lr scaled" in wired and "same lr (the script's own)" not in wired
