"""`ddpcli init` on the patterns of published scripts (small fixtures of their patterns, not copies): the script's
kind from its syntax tree, LightningCLI, nanoGPT-style configurator globals, required positionals and options
after `--`, frameworks' switches (Lightning devices, accelerate --cpu, timm's own lr rule, --device), the
optimizer from the source and stand-ins instead of invented numbers. Each file init writes passes `plan`."""

from __future__ import annotations

import ast
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ddpcli.diagnosis.slowness import SLOWNESS_CODES
from ddpcli.experiment.planning import load_plan
from ddpcli.experiment.resolved import Plan
from ddpcli.init.fixed_args import split_fixed, unwired
from ddpcli.init.help_text import HelpOption
from ddpcli.init.roles import LITERAL_NAMES
from ddpcli.init.script_kind import script_facts
from tests.init_helpers import SCRIPTS, dry_run, init, launch_and_read, script_args

LIGHTNING_HELP_S = "120"  # importing lightning takes 5-15 s on the loaded 2-core machine


def copy_and_init(tmp_path: Path, name: str, *args: str) -> tuple[Plan, str, str]:
    """Copy the fixture (a file or a folder) next to the experiment file, run init; (plan, file text, stderr)."""
    source = SCRIPTS / name
    if source.is_dir():
        shutil.copytree(source, tmp_path / name)
    else:
        shutil.copy(source, tmp_path / name)
    script = tmp_path / name / "train.py" if source.is_dir() else tmp_path / name
    output = tmp_path / "experiments.toml"
    code, _, err = init(script, "-o", output, "--nproc-per-node", "2", *args)
    assert code == 0, err
    return load_plan(output), output.read_text(encoding="utf-8"), err


Inited = Callable[..., tuple[Path, Plan, str]]


@pytest.fixture(scope="module")
def inited(tmp_path_factory: pytest.TempPathFactory) -> Inited:
    """copy_and_init once per module for each (script, arguments): the test of what init wrote and the test that
    launches it read one folder (init runs the script's --help: ~3 CPU-seconds for Lightning's). (folder, plan,
    file text); a launch adds its runs/ to the folder, which no reader of the plan looks at."""
    done: dict[tuple[str, ...], tuple[Path, Plan, str]] = {}

    def get(name: str, *args: str) -> tuple[Path, Plan, str]:
        if (name, *args) not in done:
            folder = tmp_path_factory.mktemp(name.replace(".", "-"))
            plan, text, _ = copy_and_init(folder, name, *args)
            done[(name, *args)] = (folder, plan, text)
        return done[(name, *args)]

    return get


@pytest.mark.parametrize(
    ("source", "kind"),
    [
        ("import argparse\nparser = argparse.ArgumentParser()\n", "argparse"),
        ("from argparse import ArgumentParser as AP\nAP().parse_args()\n", "argparse"),
        ("# uses argparse options\nprint('--lr option')\n", "none"),
        ("import argparse  # imported, never built\nprint(1)\n", "none"),
        ("import sys\nsteps = int(sys.argv[1])\n", "hand"),
        ("from sys import argv\nprint(argv)\n", "hand"),
        ("import click\n@click.command()\n@click.option('--lr')\ndef main(lr): pass\n", "click"),
        ("import typer\ndef main(lr: float = 0.1): pass\ntyper.run(main)\n", "typer"),
        ("from transformers import HfArgumentParser\nHfArgumentParser(())\n", "hf"),
        ("from lightning.pytorch.cli import LightningCLI\nLightningCLI(object)\n", "lightning_cli"),
        ("from jsonargparse import CLI\nCLI(print)\n", "jsonargparse"),
        ("import fire\nfire.Fire(print)\n", "fire"),
        ("batch_size = 12\nexec(open('configurator.py').read())\n", "configurator"),
    ],
)
def test_the_scripts_kind_comes_from_its_syntax_tree(tmp_path: Path, source: str, kind: str) -> None:
    (tmp_path / "train.py").write_text(source, encoding="utf-8")
    assert script_facts(tmp_path / "train.py", LITERAL_NAMES).kind == kind


def test_a_parser_built_in_a_local_module_counts_and_its_optimizer_too(tmp_path: Path) -> None:
    (tmp_path / "options.py").write_text(
        "import argparse\ndef get_args():\n    return argparse.ArgumentParser().parse_args()\n", encoding="utf-8"
    )
    (tmp_path / "model.py").write_text("import torch\ndef opt(p):\n    return torch.optim.AdamW(p)\n", encoding="utf-8")
    (tmp_path / "train.py").write_text("from options import get_args\nimport model\nget_args()\n", encoding="utf-8")
    facts = script_facts(tmp_path / "train.py", LITERAL_NAMES)
    assert facts.kind == "argparse" and [found.value for found in facts.optimizers] == ["adamw"]


def test_a_hand_parsing_script_is_never_run(tmp_path: Path) -> None:
    """It ignores --help and overwrites its checkpoint when started; init must not start it."""
    plan, text, err = copy_and_init(tmp_path, "hand_parsed.py")
    assert not (tmp_path / "checkpoint.pt").exists()
    assert "reads sys.argv itself" in err and "not run with --help" in err
    assert plan.baseline.launch.args == [] and "usage:" not in text


def test_configurator_globals_are_wired_without_running_the_script(tmp_path: Path) -> None:
    """nanoGPT's pattern: `--key=value`, the accumulation is the total over ranks, max_iters + 1 iterations, a
    min_lr that follows the lr, and CPU switches; a config file and `--max_iters=3` given after --."""
    (tmp_path / "tiny.py").write_text("batch_size = 2\nlearning_rate = 1e-3\nmin_lr = 1e-4\n", encoding="utf-8")
    plan, text, _ = copy_and_init(tmp_path, "nanogpt", "--", "../tiny.py", "--max_iters=3", "--dtype=float32")
    assert not (tmp_path / "nanogpt" / "out").exists()
    assert plan.baseline.launch.args == [
        "../tiny.py", "--dtype=float32",
        "--batch_size={per_device_batch_size}", "--gradient_accumulation_steps={grad_accum_steps * world_size}",
        "--learning_rate={lr}", "--min_lr={lr / 10:.3e}", "--warmup_iters={warmup_steps}",
        "--max_iters={total_steps - 1}", "--out_dir={run_dir}", "--device=cpu", "--backend=gloo", "--compile=False",
    ]  # fmt: skip
    baseline = plan.baseline
    assert (baseline.plan.per_device_batch_size, baseline.plan.grad_accum_steps, baseline.plan.lr) == (2, 4, 1e-3)
    assert (baseline.plan.total_steps, baseline.plan.warmup_steps, baseline.plan.optimizer) == (4, 2, "adamw")
    assert "--max_iters as given after -- to ddpcli init + 1" in text
    command = script_args(dry_run(tmp_path / "experiments.toml")["2x2-acc2"], "train.py")
    assert command[2:8] == [
        "--batch_size=2", "--gradient_accumulation_steps=4", "--learning_rate=0.001", "--min_lr=1.000e-04",
        "--warmup_iters=2", "--max_iters=3",
    ]  # fmt: skip


def test_required_positionals_are_refused_then_taken_after_the_double_dash(tmp_path: Path, inited: Inited) -> None:
    shutil.copy(SCRIPTS / "positionals.py", tmp_path / "positionals.py")
    code, _, err = init(tmp_path / "positionals.py", "-o", tmp_path / "e.toml")
    assert code == 2 and err.count("\n") == 1 and not (tmp_path / "e.toml").exists()
    assert "requires total_epochs (positional), save_every (positional): give fixed values after --" in err
    assert "-- TOTAL_EPOCHS SAVE_EVERY`" in err
    _, plan, text = inited("positionals.py", "--", "2", "1")
    assert plan.baseline.launch.args == ["2", "1", "--batch_size", "{per_device_batch_size}"]
    assert all(run.launch.workdir == "run" for run in plan.runs)  # snapshot.pt: each run its own working directory
    # lr 1e-3 is hard-coded in the SGD call: a labelled stand-in, never scaled, never passed
    assert (plan.baseline.plan.lr, plan.baseline.stand_ins, plan.baseline.plan.optimizer) == (1e-3, ("lr",), "sgd")
    assert {run.plan.lr for run in plan.runs} == {1e-3} and "hard-coded: SGD(lr=0.001)" in text


def test_a_required_option_is_named_and_a_wired_value_after_the_dash_is_the_baselines(tmp_path: Path) -> None:
    """transformers' no_trainer pattern: required --model_name_or_path, --max_train_steps None, accelerate
    without a --cpu flag, AdamW in the source and no optimizer flag."""
    shutil.copy(SCRIPTS / "hf_no_trainer.py", tmp_path / "hf_no_trainer.py")
    code, _, err = init(tmp_path / "hf_no_trainer.py", "-o", tmp_path / "e.toml")
    assert code == 2 and "requires --model_name_or_path: give fixed values after --" in err
    assert "-- --model_name_or_path MODEL_NAME_OR_PATH`" in err
    plan, _, _ = copy_and_init(
        tmp_path, "hf_no_trainer.py", "--", "--model_name_or_path", "tiny", "--max_train_steps", "10"
    )
    assert plan.baseline.launch.args[:2] == ["--model_name_or_path", "tiny"]
    assert "--max_train_steps" in plan.baseline.launch.args and "10" not in plan.baseline.launch.args
    assert (plan.baseline.plan.total_steps, plan.baseline.plan.optimizer, plan.baseline.launch.env) == (
        10, "adamw", {"ACCELERATE_USE_CPU": "1"}
    )  # fmt: skip
    assert plan.experiments[0].plan.scaling == "sqrt"  # AdamW read from the source: not a silent sgd


def test_lightning_devices_nodes_strategy_and_accelerator_are_wired(inited: Inited) -> None:
    folder, plan, _ = inited("lightning_devices.py", "--help-timeout", LIGHTNING_HELP_S)
    args = plan.baseline.launch.args
    pairs = dict(zip(args[::2], args[1::2], strict=True))
    assert pairs == {
        "--batch_size": "{per_device_batch_size}", "--accumulate_grad_batches": "{grad_accum_steps}",
        "--lr": "{lr}", "--max_steps": "{total_steps}", "--devices": "{nproc_per_node}", "--num_nodes": "{nnodes}",
        "--strategy": "ddp", "--accelerator": "cpu",
    }  # fmt: skip
    command = script_args(dry_run(folder / "experiments.toml")["2x4"], "lightning_devices.py")
    filled = dict(zip(command[::2], command[1::2], strict=True))
    assert (filled["--devices"], filled["--num_nodes"], filled["--batch_size"]) == ("2", "1", "4")


def test_lightning_cli_flags_are_dotted_and_fit_comes_first(tmp_path: Path) -> None:
    """Read from `fit --help` where jsonargparse is installed, else from the source: the same file either way."""
    plan, _, _ = copy_and_init(
        tmp_path, "lightning_cli.py", "--help-timeout", LIGHTNING_HELP_S, "--", "--trainer.max_steps=3"
    )
    assert plan.baseline.launch.args == [
        "fit", "--data.batch_size", "{per_device_batch_size}", "--trainer.accumulate_grad_batches",
        "{grad_accum_steps}", "--model.learning_rate", "{lr}", "--trainer.max_steps", "{total_steps}",
        "--seed_everything", "{seed}", "--trainer.devices", "{nproc_per_node}", "--trainer.num_nodes", "{nnodes}",
        "--trainer.strategy", "ddp", "--trainer.accelerator", "cpu", "--trainer.default_root_dir", "{run_dir}",
    ]  # fmt: skip
    baseline = plan.baseline.plan
    assert (baseline.per_device_batch_size, baseline.lr, baseline.seed, baseline.total_steps) == (8, 0.002, 1234, 3)
    assert baseline.optimizer == "adam"  # configure_optimizers builds torch.optim.Adam


def test_accelerate_cpu_switch_and_hard_coded_values_are_stand_ins(inited: Inited) -> None:
    _, plan, text = inited("accelerate_cpu.py")
    assert plan.baseline.launch.args == ["--gradient_accumulation_steps", "{grad_accum_steps}", "--cpu"]
    baseline, wider = plan.baseline, plan.experiments[0]
    assert baseline.stand_ins == ("per_device_batch_size", "lr", "warmup_steps")
    assert (baseline.plan.per_device_batch_size, baseline.plan.lr, baseline.plan.warmup_steps) == (16, 2e-3, 2)
    # the script keeps its lr and warmup whatever the world size: so does the plan, and says whose they are
    assert (wider.plan.lr, wider.plan.warmup_steps, wider.plan.scaling) == (2e-3, 2, "none")
    assert any(note.startswith("Stand-ins, yours to check or fill in") for note in wider.plan.notes)
    assert not any("no warmup" in note for note in wider.plan.notes)
    assert "get_linear_schedule_with_warmup(num_warmup_steps=2)" in text


def test_timm_style_lr_rule_device_and_warmup_epochs(inited: Inited) -> None:
    """--lr is None by design: the baseline's lr is what timm's own rule gives its global batch, --lr is wired
    (which turns timm's rule off) and the file says so; --lr-base is not wired (it would scale twice)."""
    _, plan, text = inited("timm_style.py")
    pairs = dict(zip(plan.baseline.launch.args[::2], plan.baseline.launch.args[1::2], strict=True))
    assert pairs["--lr"] == "{lr}" and pairs["--device"] == "cpu" and "--lr-base" not in pairs
    assert plan.baseline.plan.lr == pytest.approx(0.1 * 16 / 256)
    assert {run.name: run.plan.lr for run in plan.experiments} == {"2x16": pytest.approx(0.0125), "2x8": 0.00625}
    assert "This file passes --lr {lr}, which turns timm's rule off" in text
    assert "--warmup-epochs 5" in text and plan.baseline.stand_ins == ("warmup_steps",)


@pytest.mark.parametrize(
    ("construct", "optimizer", "warned"),
    [
        ("torch.optim.AdamW(params, lr=args.lr)", "adamw", False),
        ("torch.optim.SGD(params, lr=args.lr)", "sgd", False),
        ("Lion(params)", "other", False),
        ("getattr(torch.optim, name)(params)", "other", True),
        ("torch.optim.Adam(params) if a else torch.optim.SGD(params)", "other", True),
    ],
)
def test_the_optimizer_comes_from_the_source_never_a_silent_sgd(
    tmp_path: Path, construct: str, optimizer: str, warned: bool
) -> None:
    script = (
        "import argparse\nparser = argparse.ArgumentParser()\n"
        "parser.add_argument('--batch-size', type=int, default=8)\nparser.add_argument('--lr', type=float, "
        f"default=0.1)\nargs = parser.parse_args()\ndef build(params, name, a):\n    import torch\n"
        f"    return {construct}\n"
    )
    ast.parse(script)
    (tmp_path / "train.py").write_text(script, encoding="utf-8")
    output = tmp_path / "experiments.toml"
    code, _, err = init(tmp_path / "train.py", "-o", output, "--nproc-per-node", "2")
    assert code == 0, err
    assert load_plan(output).baseline.plan.optimizer == optimizer
    assert ('optimizer = "other" keeps the lr' in err) == warned


def received(run_dir: Path) -> list[dict[str, object]]:
    """What each rank printed as `received {...}` (torchrun's tee'd stdout, one file per rank)."""
    return [
        json.loads(line.split("received ", 1)[1])
        for log in sorted((run_dir / "logs").rglob("stdout.log"))
        for line in log.read_text(encoding="utf-8").splitlines()
        if "received " in line
    ]


def assert_followed(plan: Plan, runs: dict[str, tuple[Path, dict]]) -> None:
    """Each run completed as planned: no finding (no plan_mismatch), and the observer saw the plan's numbers."""
    planned = {run.name: run for run in plan.runs}
    for name, (_, record) in runs.items():
        run, observed = planned[name], record["observed"]
        mistakes = [finding for finding in record["findings"] if finding["code"] not in SLOWNESS_CODES]
        assert mistakes == [], (name, record["findings"])  # why-slow findings are no mistake of the script
        assert (observed["world_size"], observed["per_device_batch_size"], observed["global_batch_size"]) == (
            run.plan.world_size, run.plan.per_device_batch_size, run.plan.global_batch_size
        )  # fmt: skip
        assert observed["lr_peak"] == pytest.approx(run.plan.lr)
        if run.plan.total_steps is not None:
            assert observed["optimizer_steps"] == run.plan.total_steps


@pytest.mark.e2e
def test_init_then_launch_a_configurator_script(tmp_path: Path) -> None:
    """nanoGPT's pattern on the CPU: the baseline (accumulation 4) and 2 processes x accumulation 2 (the script
    gets --gradient_accumulation_steps=4 and divides it by 2) run max_iters + 1 = total_steps steps each."""
    plan, _, _ = copy_and_init(tmp_path, "nanogpt", "--", "--max_iters=3")
    runs = launch_and_read(tmp_path, "1x4-acc4", "2x4-acc2")
    assert_followed(plan, runs)
    ranks = received(runs["2x4-acc2"][0])
    assert sorted((item["rank"], item["gradient_accumulation_steps"], item["device"]) for item in ranks) == [
        (0, 2, "cpu"), (1, 2, "cpu")
    ]  # fmt: skip


@pytest.mark.e2e
def test_init_then_launch_a_script_with_required_positionals_each_run_in_its_own_directory(inited: Inited) -> None:
    """The DDP tutorial's pattern: `-- 2 1` fixed, snapshot.pt in the working directory. With workdir = "run"
    the second run does not resume the first one's snapshot."""
    folder, plan, _ = inited("positionals.py", "--", "2", "1")
    runs = launch_and_read(folder, "1x32", "2x16")
    assert_followed(plan, runs)
    for run_dir, _ in runs.values():
        assert (run_dir / "snapshot.pt").is_file()
        assert {(item["cwd"], item["epochs_run"]) for item in received(run_dir)} == {(str(run_dir), 0)}
    assert not (folder / "snapshot.pt").exists()


@pytest.mark.e2e
def test_init_then_launch_lightning_with_devices_wired(inited: Inited) -> None:
    """Was: every multi-process run failed with "devices=1 ... does not match the world size (2)"."""
    folder, plan, _ = inited("lightning_devices.py", "--help-timeout", LIGHTNING_HELP_S)
    assert_followed(plan, launch_and_read(folder, "1x8", "2x4"))


@pytest.mark.e2e
def test_init_then_launch_accelerate_on_cpu_as_one_training(inited: Inited) -> None:
    """Was: without --cpu, accelerate under torchrun on a CPU machine ran one separate training per process."""
    folder, plan, _ = inited("accelerate_cpu.py")
    runs = launch_and_read(folder, "1x16", "2x16")
    assert_followed(plan, runs)
    assert {item["distributed_type"] for item in received(runs["2x16"][0])} == {"DistributedType.MULTI_CPU"}


@pytest.mark.e2e
def test_init_then_launch_timm_style_with_its_own_rule_off(inited: Inited) -> None:
    """The 2-process run gets --lr 0.0125 (linear from 0.00625) and --device cpu: the lr timm's rule would have
    derived itself, so the observer sees exactly the planned lr (no double scaling)."""
    folder, plan, _ = inited("timm_style.py")
    runs = launch_and_read(folder, "2x16")
    assert_followed(plan, runs)
    assert {(item["lr"], item["device"]) for item in received(runs["2x16"][0])} == {(0.0125, "cpu")}


def test_click_required_argument_and_option_are_named_then_kept(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(
        "import click\n@click.command()\n@click.argument('data_dir')\n"
        "@click.option('--model', required=True)\n@click.option('--batch-size', default=8)\n"
        "@click.option('--lr', default=0.1)\ndef main(data_dir, model, batch_size, lr):\n"
        "    raise SystemExit('must not train')\nif __name__ == '__main__':\n    main()\n",
        encoding="utf-8",
    )
    code, _, err = init(tmp_path / "train.py", "-o", tmp_path / "e.toml")
    assert code == 2 and "requires DATA_DIR (positional), --model:" in err
    code, _, err = init(tmp_path / "train.py", "-o", tmp_path / "e.toml", "--", "data", "--model", "m", "--lr=0.2")
    assert code == 0, err
    plan = load_plan(tmp_path / "e.toml")
    args = plan.baseline.launch.args
    assert args == ["data", "--model", "m", "--batch-size", "{per_device_batch_size}", "--lr", "{lr}"]
    assert plan.baseline.plan.lr == 0.2  # given after --: the baseline's value, not a fixed argument


def test_a_module_takes_fixed_arguments_after_the_double_dash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("", encoding="utf-8")
    shutil.copy(SCRIPTS / "positionals.py", package / "train.py")
    monkeypatch.chdir(tmp_path)
    code, _, err = init("-m", "pkg.train", "-o", tmp_path / "e.toml", "--", "2", "1")
    assert code == 0, err
    assert load_plan(tmp_path / "e.toml").baseline.launch.args[:2] == ["2", "1"]


def test_jsonargparse_help_text_defaults_are_read() -> None:
    """Where no parser dump exists, jsonargparse's `(type: T, default: X)` is read from the text."""
    from ddpcli.init.help_text import parse_help

    text = """options:
  --model.learning_rate LEARNING_RATE
                        (type: float, default: 0.002)
  --trainer.devices DEVICES, --trainer.devices+ DEVICES
                        The devices to use. (type: Union[list[int], str, int], default: auto)
  --data.batch_size BATCH_SIZE
                        (type: int, default: 8)
"""
    assert [(option.flags[0], option.default) for option in parse_help(text)] == [
        ("--model.learning_rate", "0.002"), ("--trainer.devices", "auto"), ("--data.batch_size", "8")
    ]  # fmt: skip


def test_a_parser_in_a_package_of_the_scripts_folder_counts(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("", encoding="utf-8")
    (tmp_path / "pkg" / "args.py").write_text("import argparse\ndef parse():\n    argparse.ArgumentParser()\n")
    (tmp_path / "train.py").write_text("from pkg.args import parse\nparse()\n", encoding="utf-8")
    assert script_facts(tmp_path / "train.py", LITERAL_NAMES).kind == "argparse"


@given(st.lists(st.text(st.characters(blacklist_categories=("Cs",)), max_size=12), max_size=8))
def test_fixed_arguments_round_trip_when_nothing_is_wired(tokens: list[str]) -> None:
    """Whatever follows `--` reaches every run unchanged (in order) unless init wires that flag."""
    options = [HelpOption(("--lr",), True, "0.1", ""), HelpOption(("--cpu",), False, None, "")]
    segments = split_fixed(tuple(tokens), options)
    assert unwired(segments, set()) == tokens
    assert "--lr" not in unwired(segments, {"--lr"})
