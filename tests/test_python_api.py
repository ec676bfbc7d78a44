"""The recipes called from Python (mpp/recipes/python_api.py): the same config as the command line, errors raised
rather than exits, runs one after another in one process, and two processes under accelerate's notebook_launcher."""

from __future__ import annotations

import importlib
import json
import logging
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from accelerate.state import is_initialized

import mpp
from devices import USE_CPU
from mpp import command_line
from mpp.commands import COMMANDS
from mpp.config.building import build_config, preset_path
from mpp.config.runs import FinetuneRunConfig, MPPRunConfig
from mpp.errors import ConfigError, DataError, RunError
from mpp.recipes import python_api
from mpp.recipes.python_api import override_arguments
from mpp.training.checkpoint import Preempted
from tests.launching import ROOT, free_port, load_script, write_two_noise_classes

ENCODER = {"img_size": 16, "patch_size": 4, "embed_dim": 32, "depth": 2, "num_heads": 2}
TINY = {"model": ENCODER, "train": {"global_batch_size": 8, "warmup_steps": 1, "log_every": 2, "checkpoint_every": 4,
                                    "steps": 4}}
NO_MONITORS = {"monitor": {"few_shot_every": 0, "mosaic_every": 0, "final_few_shot_draws": 0}}


@pytest.fixture(autouse=True)
def device(monkeypatch):
    """Runs in this process take the test device as a launched recipe does (tests/launching.py)."""
    if USE_CPU:
        monkeypatch.setenv("ACCELERATE_USE_CPU", "1")


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, str]:
    """Two classes of 16x16 noise, dark and bright, 8 training and 4 test images each, as data overrides."""
    root = tmp_path_factory.mktemp("folders")
    write_two_noise_classes(root, {"train": 8, "test": 4})
    return {"source": f"folder:{root / 'train'}", "eval_folder": str(root / "test"), "shots_per_class": 0}


def test_keyword_overrides_are_the_command_lines_arguments():
    overrides = {"seed": 1, "train": {"steps": None, "epochs": 2, "lr": 1e-3}, "model.depth": 6,
                 "data": {"mean": (0.4, 0.5, 0.6)}, "output_dir": Path("runs/x"), "resume": "auto",
                 "mpp": {"target": "mean_colour"}, "overwrite": True}
    arguments = override_arguments(overrides)
    assert arguments == ["seed=1", "train.steps=null", "train.epochs=2", "train.lr=0.001", "model.depth=6",
                         "data.mean=[0.4, 0.5, 0.6]", "output_dir=runs/x", "resume=auto", "mpp.target=mean_colour",
                         "overwrite=true"]
    cfg = build_config(MPPRunConfig, None, arguments)
    assert (cfg.seed, cfg.train.steps, cfg.train.epochs, cfg.train.lr, cfg.model.depth, cfg.data.mean) == (
        1, None, 2, 1e-3, 6, (0.4, 0.5, 0.6))
    assert (cfg.output_dir, cfg.resume, cfg.overwrite) == ("runs/x", "auto", True)


def test_an_unknown_key_raises_the_command_lines_error_before_anything_is_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as raised:
        mpp.pretrain(trian={"epochs": 2})
    with pytest.raises(ConfigError) as command_line:
        build_config(MPPRunConfig, COMMANDS["pretrain"].preset, ["trian.epochs=2"])
    assert str(raised.value) == str(command_line.value)
    assert "did you mean 'train.epochs'?" in str(raised.value) and "valid keys: output_dir, seed" in str(raised.value)
    assert list(tmp_path.iterdir()) == []


def test_a_key_given_as_a_parameter_and_an_override_is_refused():
    with pytest.raises(TypeError, match="data.source given twice"):
        mpp.pretrain(data="shapes", **{"data.source": "shapes"})
    with pytest.raises(ConfigError, match="method='mae' is not one of: mpp, supervised"):
        mpp.pretrain(method="mae")


def test_a_preset_is_named_by_its_name_or_given_as_a_file():
    named = preset_path("finetune_tiny_cpu")  # installed with the package, recipes/configs/ in a checkout
    assert named == ROOT / "mpp" / "presets" / "finetune_tiny_cpu.yaml"
    assert named.resolve() == (ROOT / "recipes" / "configs" / "finetune_tiny_cpu.yaml").resolve()
    assert preset_path("my/preset.yaml") == Path("my/preset.yaml")
    assert build_config(FinetuneRunConfig, "finetune_tiny_cpu").train.steps == 200  # the named preset was read
    assert mpp.finetune.__module__ == "mpp.recipes.python_api"
    with pytest.raises(ConfigError, match="config file .*no_such_preset.yaml does not exist; give a preset's name "
                                          r"\(compare_own_images_cpu, eval_fashion_mnist_cpu"):
        build_config(FinetuneRunConfig, "no_such_preset")


SCRIPTS = {"recipes/mpp.py": "pretrain", "recipes/supervised.py": "supervised", "recipes/finetune.py": "finetune",
           "recipes/compare.py": "compare", "eval/linear_probe.py": "linear_probe", "eval/knn.py": "knn",
           "eval/few_shot.py": "few_shot", "eval/inspect_encoder.py": "inspect"}


def record_runs(monkeypatch) -> list[dict]:
    """What each command line would run, recorded instead of run."""
    runs = []
    monkeypatch.setattr(command_line, "run_recipe", lambda run, config_class, preset, description, invocation, argv,
                        prog: runs.append({"run": run, "config_class": config_class, "preset": preset,
                                           "invocation": invocation, "argv": argv}))
    return runs


@pytest.mark.parametrize("script", SCRIPTS)
def test_each_script_runs_its_command_of_the_table(script, monkeypatch):
    runs = record_runs(monkeypatch)
    monkeypatch.setattr(sys, "argv", [script, "seed=3"])
    load_script(ROOT / script, f"python_api_check_{Path(script).stem}").cli()
    command = COMMANDS[SCRIPTS[script]]
    assert runs == [{"run": command.run, "config_class": command.config_class(), "preset": command.preset,
                     "invocation": [script], "argv": ["seed=3"]}]
    assert preset_path(command.preset).is_file() and preset_path(command.cpu_preset).is_file()


def test_python_m_mpp_runs_each_command_of_the_table_and_refuses_any_other(monkeypatch, capsys):
    runs = record_runs(monkeypatch)
    for name in COMMANDS:
        command_line.main([name, "--config", "x.yaml", "seed=3"])
    assert [run["run"] for run in runs] == [command.run for command in COMMANDS.values()]
    assert [run["invocation"] for run in runs] == [["-m", "mpp", name] for name in COMMANDS]
    assert {tuple(run["argv"]) for run in runs} == {("--config", "x.yaml", "seed=3")}
    with pytest.raises(SystemExit, match="'train' is not a command of mpp; the commands: pretrain, supervised, "):
        command_line.main(["train"])
    with pytest.raises(SystemExit) as stop:
        command_line.main(["--help"])
    assert stop.value.code == 0
    listed = capsys.readouterr().out
    assert all(f"  {name} " in listed for name in COMMANDS) and "mpp_own_images_cpu" in listed


def test_the_python_api_runs_the_commands_of_the_table(monkeypatch):
    ran = []
    monkeypatch.setattr(python_api, "_run", lambda name, config, overrides: ran.append(name))
    mpp.pretrain()
    mpp.pretrain(method="supervised")
    mpp.finetune()
    for protocol in ("linear_probe", "knn", "few_shot", "inspect"):
        mpp.evaluate(protocol=protocol)
    assert ran == ["pretrain", "supervised", "finetune", "linear_probe", "knn", "few_shot", "inspect"]
    assert set(ran) | {"compare"} == set(COMMANDS)  # mpp.compare: COMMANDS["compare"], tested from a wheel


def test_an_error_is_raised_not_exited_and_leaves_no_accelerator_behind(tmp_path):
    with pytest.raises(RunError, match="does not exist"):  # raised once the run's Accelerator is made
        mpp.finetune(init=tmp_path / "missing", output_dir=tmp_path / "run", model=ENCODER)
    assert not is_initialized()
    assert not [handler for handler in logging.getLogger().handlers if isinstance(handler, logging.FileHandler)]


def test_a_sweep_whose_training_images_fill_no_batch_is_refused_before_anything_is_written(tmp_path, folders):
    # 16 training images fill the batch of 8 (the final run could start), but the sweep's 12 after holding out 4
    # do not fill one of 16: refused while nothing is written, not once the sweep's first point starts.
    with pytest.raises(DataError, match=r"sweep holds out finetune.sweep_holdout_fraction=0.25 of the training "
                                        r"images: the rest has 12 images, fewer than one global batch of 16"):
        mpp.finetune(output_dir=tmp_path / "tuned", data=folders, model=ENCODER,
                     train={**TINY["train"], "global_batch_size": 16},
                     finetune={"sweep_lrs": [0.01, 0.03], "sweep_holdout_fraction": 0.25})
    assert not (tmp_path / "tuned").exists()


def test_fine_tuning_and_its_sweep_train_at_the_layer_wise_decay_and_pre_training_without(tmp_path, folders,
                                                                                           monkeypatch):
    from mpp.training import trainer

    decays = []

    def recording(model, cfg, device, layer_decay):
        decays.append(layer_decay)
        return create_optimizer(model, cfg, device, layer_decay)

    create_optimizer = trainer.create_optimizer
    monkeypatch.setattr(trainer, "create_optimizer", recording)
    mpp.finetune(output_dir=tmp_path / "tuned", data=folders, **TINY,
                 finetune={"layer_decay": 0.5, "sweep_lrs": [0.01, 0.03], "sweep_holdout_fraction": 0.25})
    assert len(decays) >= 3 and set(decays) == {0.5}  # the sweep's two points and the run at the chosen rate
    mpp.pretrain(output_dir=tmp_path / "pre", data=folders, **TINY, **NO_MONITORS)
    assert decays[-1] == 1.0


def test_the_exports_features_are_an_export_setting_apart_from_what_the_monitors_read(tmp_path, folders):
    run = mpp.pretrain(output_dir=tmp_path / "pre", data=folders, **TINY, **NO_MONITORS, export={"features": "token"})
    assert yaml.safe_load((run.run_dir / "config.yaml").read_text())["monitor"]["features"] == "avg"
    assert json.loads((run.export_dir / "config.json").read_text())["model_args"]["global_pool"] == "token"
    card = (run.export_dir / "README.md").read_text().replace("\n", " ")
    assert "Without a head, timm gives the [class] token's output" in card


def test_pretrain_finetune_evaluate_one_after_another_in_this_process(tmp_path, folders):
    first = mpp.pretrain(output_dir=tmp_path / "first", data=folders, **TINY, **NO_MONITORS)
    # Another precision: accelerate refuses a second Accelerator that differs, unless the first run's state is gone.
    second = mpp.pretrain(output_dir=tmp_path / "second", data=folders, model=ENCODER, monitor=NO_MONITORS["monitor"],
                          train={**TINY["train"], "mixed_precision": "bf16"})
    tuned = mpp.finetune(init=first.run_dir, output_dir=tmp_path / "tuned", data=folders, **TINY)
    knn = mpp.evaluate(init=first.export_dir, output_dir=tmp_path / "knn", data=folders, protocol="knn", knn={"k": 3},
                       model=ENCODER)

    # Every accuracy beside its floors on the same test images: 4 of each of 2 classes.
    assert tuned.metrics["test_majority_class_accuracy"] == 0.5 == knn.metrics["knn"]["test_chance_balanced_accuracy"]
    for result in (first, second, tuned, knn):
        written = json.loads((result.run_dir / "metrics.json").read_text())
        assert json.loads(json.dumps(result.metrics)).items() <= written.items()  # which adds what the run was
        log = (result.run_dir / "log.txt").read_text()
        assert log.count("run directory ") == 1, log  # its own log, each line once, none of another run's
    assert first.export_dir == tmp_path / "first" / "export" and (first.export_dir / "model.safetensors").is_file()
    assert tuned.export_dir is None and tuned.metrics["init"] == str(first.run_dir)
    assert first.metrics["step"] == second.metrics["step"] == tuned.metrics["step"] == 4
    assert 0 <= knn.metrics["knn"]["test_accuracy"] <= 1 and knn.metrics["test_images"] == 8
    assert not is_initialized()
    assert not [handler for handler in logging.getLogger().handlers if isinstance(handler, logging.FileHandler)]


NOTEBOOK = """
import json
import sys
from pathlib import Path

from accelerate import notebook_launcher

import mpp

data, tiny, no_monitors, encoder = (json.loads(argument) for argument in sys.argv[1:5])


def pretrain_then_probe(data, out):
    pre = mpp.pretrain(output_dir=out / "pre", data=data, **tiny, **no_monitors)
    mpp.evaluate(init=pre.run_dir, output_dir=out / "knn", data=data, protocol="knn", knn={"k": 3}, model=encoder)


notebook_launcher(pretrain_then_probe, args=(data, Path(sys.argv[5])), num_processes=2, use_port=sys.argv[6])
"""


@pytest.mark.slow
@pytest.mark.cpu_only("two gloo processes forked from a fresh one")
def test_notebook_launcher_runs_two_processes_on_the_cpu(tmp_path, folders):
    # A process of its own, as a fresh notebook's kernel: torch's autograd cannot run in a process forked from one
    # that has trained, as this test process may have.
    script = tmp_path / "notebook.py"
    script.write_text(NOTEBOOK)
    subprocess.run([sys.executable, str(script), *(json.dumps(part) for part in (folders, TINY, NO_MONITORS, ENCODER)),
                    str(tmp_path), str(free_port())], check=True, cwd=ROOT, timeout=600)
    pre = json.loads((tmp_path / "pre" / "metrics.json").read_text())
    assert pre["num_processes"] == 2 and pre["step"] == 4 and pre["backend"]["distributed_type"] == "MULTI_CPU"
    assert (tmp_path / "pre" / "export" / "model.safetensors").is_file()
    knn = json.loads((tmp_path / "knn" / "metrics.json").read_text())
    assert knn["backend"]["distributed_type"] == "MULTI_CPU" and knn["test_images"] == 8


def test_resume_of_a_finished_run_returns_its_result_rewriting_nothing_and_a_shorter_run_is_refused(tmp_path, folders,
                                                                                                    capsys):
    run_dir = tmp_path / "run"
    first = mpp.pretrain(output_dir=run_dir, data=folders, resume=True, **TINY, **NO_MONITORS)
    said = capsys.readouterr().err  # the package logs to the console (configure_logging): stderr
    assert f"no checkpoint in {run_dir} to resume: a new run starts" in said  # resume=True with none: a new run
    written = {path: path.read_bytes() for path in run_dir.rglob("*") if path.is_file()}

    again = mpp.pretrain(output_dir=run_dir, data=folders, resume=True, **TINY, **NO_MONITORS)
    said = capsys.readouterr().err
    assert again.metrics == json.loads((run_dir / "metrics.json").read_text()) and again.run_dir == first.run_dir
    assert f"the run in {run_dir} has finished (step 4 of train.steps=4); its encoder is exported to " in said
    assert {path: path.read_bytes() for path in run_dir.rglob("*") if path.is_file()} == written  # nothing rewritten

    shorter = {**TINY, "train": {**TINY["train"], "steps": 2}}
    with pytest.raises(ConfigError, match=r"step_00000004: it is at step 4, past train.steps=2; pass train.steps=4"):
        mpp.pretrain(output_dir=run_dir, data=folders, resume=True, **shorter, **NO_MONITORS)
    assert {path: path.read_bytes() for path in run_dir.rglob("*") if path.is_file()} == written


def test_a_run_stopped_by_a_signal_says_how_to_continue_in_this_apis_words(monkeypatch, tmp_path):
    checkpoint = tmp_path / "checkpoints" / "step_00000007"

    def stopped_by_ctrl_c(cfg):
        raise Preempted(signal.SIGINT, 7, checkpoint)

    monkeypatch.setattr(importlib.import_module("mpp.recipes.pretraining_run"), "pretrain_mpp", stopped_by_ctrl_c)
    with pytest.raises(Preempted) as stop:
        mpp.pretrain(output_dir=tmp_path)
    assert str(stop.value) == (f"stopped by Ctrl-C (SIGINT) after step 7; checkpoint {checkpoint} saved: continue with "
                               "resume=True and the same output_dir")
