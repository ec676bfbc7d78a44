from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest
import timm
import torch
import yaml
from accelerate import Accelerator
from devices import USE_CPU

import mpp.training.checkpoint as checkpoint_module
from mpp.config.building import build_config
from mpp.config.runs import FinetuneRunConfig, MPPRunConfig
from mpp.errors import ConfigError
from mpp.models.encoder import create_encoder
from mpp.models.pretrained import export_encoder
from mpp.run import RunDirectoryError, claim_output_dir
from mpp.training.checkpoint import (
    CheckpointError,
    check_resume_compatible,
    checkpoint_damage,
    list_checkpoints,
    load_checkpoint,
    resume_checkpoint,
    save_checkpoint,
)


def test_a_directory_holding_a_run_is_refused_unless_resuming_or_overwriting(tmp_path):
    claim_output_dir(tmp_path / "new", resume=False, overwrite=False).release()  # absent: created
    assert (tmp_path / "new").is_dir()
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.json").write_text("{}")
    with pytest.raises(RunDirectoryError, match="already holds a run .*metrics.json.*resume=auto.*overwrite=true"):
        claim_output_dir(run, resume=False, overwrite=False)
    assert (run / "metrics.json").read_text() == "{}"  # nothing lost
    claim_output_dir(run, resume=True, overwrite=False).release()
    assert (run / "metrics.json").exists()
    claim_output_dir(run, resume=False, overwrite=True).release()
    assert run.is_dir() and not any(run.iterdir())


def test_what_a_run_stopped_before_its_first_checkpoint_left_does_not_block_the_same_command(tmp_path):
    failed = tmp_path / "failed"
    failed.mkdir()
    for name in ("config.yaml", "log.txt", "events.out.tfevents.1.host"):
        (failed / name).write_text("from the failed start\n")
    claim_output_dir(failed, resume=False, overwrite=False).release()
    assert (failed / "log.txt").read_text() == "from the failed start\n"  # kept: the new run adds to it
    (failed / "notes.txt").write_text("the user's\n")  # anything else: a folder that is not a failed start
    with pytest.raises(RunDirectoryError, match="already holds a run"):
        claim_output_dir(failed, resume=False, overwrite=False)


def test_checkpoints_keep_the_newest_and_resume_from_the_latest(tmp_path):
    accelerator = Accelerator(cpu=USE_CPU)
    model = accelerator.prepare(torch.nn.Linear(3, 2))
    config = MPPRunConfig()
    for step in (10, 20, 30, 40):
        with torch.no_grad():
            model.weight.fill_(step)
        save_checkpoint(accelerator, tmp_path, step, config, keep=2)
    checkpoints = list_checkpoints(tmp_path)
    assert [path.name for path in checkpoints] == ["step_00000030", "step_00000040"]
    assert not list((tmp_path / "checkpoints").glob("*.partial"))
    assert resume_checkpoint("auto", tmp_path) == checkpoints[-1]
    assert resume_checkpoint("", tmp_path) is None
    assert resume_checkpoint("auto", tmp_path / "elsewhere") is None
    with pytest.raises(ConfigError, match="is not a checkpoint"):
        resume_checkpoint(str(tmp_path), tmp_path)

    with torch.no_grad():
        model.weight.zero_()
    assert load_checkpoint(accelerator, checkpoints[0]) == 30
    assert torch.all(model.weight == 30)


def test_a_half_written_checkpoint_is_never_the_latest(tmp_path):
    accelerator = Accelerator(cpu=USE_CPU)
    accelerator.prepare(torch.nn.Linear(3, 2))  # registered: save_state saves it
    save_checkpoint(accelerator, tmp_path, 5, MPPRunConfig(), keep=3)
    killed = tmp_path / "checkpoints" / "step_00000010.partial"  # a run killed while saving step 10 ...
    shutil.copytree(tmp_path / "checkpoints" / "step_00000005", killed)  # ... just before the rename
    (killed / "trainer_state.json").write_text('{"step": 10}')
    assert resume_checkpoint("auto", tmp_path).name == "step_00000005"
    save_checkpoint(accelerator, tmp_path, 7, MPPRunConfig(), keep=3)  # the next save clears the leftover
    assert sorted(path.name for path in (tmp_path / "checkpoints").iterdir()) == ["step_00000005", "step_00000007"]


def test_resuming_with_another_model_or_objective_is_refused(tmp_path):
    accelerator = Accelerator(cpu=USE_CPU)
    accelerator.prepare(torch.nn.Linear(3, 2))
    config = build_config(MPPRunConfig, overrides=["model.depth=2"])
    checkpoint = save_checkpoint(accelerator, tmp_path, 1, config, keep=1)
    check_resume_compatible(checkpoint, build_config(MPPRunConfig, overrides=["model.depth=2", "train.steps=9"]))
    # memory, not results: out of memory, a run resumes with gradient checkpointing
    check_resume_compatible(checkpoint, build_config(MPPRunConfig, overrides=["model.depth=2",
                                                                              "model.grad_checkpointing=true"]))
    changed = build_config(MPPRunConfig, overrides=["model.depth=3", "mpp.target=pixels"])
    with pytest.raises(ConfigError, match=r"model.depth: 2 in the checkpoint, 3 now(.|\n)*mpp.target"):
        check_resume_compatible(checkpoint, changed)


def test_a_checkpoint_written_before_the_augment_section_resumes_at_its_defaults_only(tmp_path):
    accelerator = Accelerator(cpu=USE_CPU)
    accelerator.prepare(torch.nn.Linear(3, 2))
    checkpoint = save_checkpoint(accelerator, tmp_path, 1, build_config(FinetuneRunConfig), keep=1)
    saved = yaml.safe_load((checkpoint / "config.yaml").read_text())
    del saved["augment"]  # as an earlier version wrote it
    (checkpoint / "config.yaml").write_text(yaml.safe_dump(saved))
    check_resume_compatible(checkpoint, build_config(FinetuneRunConfig))
    with pytest.raises(ConfigError, match="augment.mixup_alpha: 0.0 in the checkpoint, 0.8 now"):
        check_resume_compatible(checkpoint, build_config(FinetuneRunConfig, overrides=["augment.mixup_alpha=0.8"]))


def test_exported_encoder_loads_in_timm_offline_with_identical_outputs(tiny_model_config, tmp_path):
    encoder = create_encoder(tiny_model_config).eval()
    export_encoder(encoder, tmp_path / "export", mean=(0.1, 0.2, 0.3), std=(0.4, 0.5, 0.6), tag="mpp")
    config = json.loads((tmp_path / "export" / "config.json").read_text())
    assert config["architecture"] == "vit_tiny_patch16_224"
    assert config["model_args"]["patch_size"] == 4 and config["model_args"]["depth"] == 2
    assert config["pretrained_cfg"]["mean"] == [0.1, 0.2, 0.3] and config["pretrained_cfg"]["std"] == [0.4, 0.5, 0.6]
    assert (tmp_path / "export" / "model.safetensors").is_file()

    loaded = timm.create_model(f"local-dir:{tmp_path / 'export'}", pretrained=True).eval()
    images = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        assert torch.equal(loaded(images), encoder(images))
    assert list(timm.data.resolve_data_config({}, model=loaded)["mean"]) == [0.1, 0.2, 0.3]
    classifier = timm.create_model(f"local-dir:{tmp_path / 'export'}", pretrained=True, num_classes=5)
    assert classifier.head.out_features == 5  # a timm pipeline can fine-tune it as is


def test_resuming_a_fine_tuning_run_from_other_starting_weights_is_refused(tmp_path):
    from mpp.config.runs import FinetuneRunConfig

    accelerator = Accelerator(cpu=USE_CPU)
    accelerator.prepare(torch.nn.Linear(3, 2))
    checkpoint = save_checkpoint(accelerator, tmp_path, 1, build_config(FinetuneRunConfig, overrides=["init=runs/a"]),
                                 keep=1)
    check_resume_compatible(checkpoint, build_config(FinetuneRunConfig, overrides=["init=runs/a"]))
    changed = build_config(FinetuneRunConfig, overrides=["init=runs/b", "finetune.ema_decay=0.9"])
    with pytest.raises(ConfigError, match=r"init: 'runs/a' in the checkpoint, 'runs/b' now(.|\n)*finetune.ema_decay"):
        check_resume_compatible(checkpoint, changed)


def saved_run(tmp_path, steps=(10, 20, 30)) -> tuple[Accelerator, torch.nn.Module]:
    accelerator = Accelerator(cpu=USE_CPU)
    model = accelerator.prepare(torch.nn.Linear(64, 64))
    for step in steps:
        with torch.no_grad():
            model.weight.fill_(step)
        save_checkpoint(accelerator, tmp_path, step, MPPRunConfig(), keep=len(steps))
    return accelerator, model


def test_a_checkpoint_records_the_size_and_checksum_of_every_other_file(tmp_path):
    saved_run(tmp_path, steps=(10,))
    checkpoint = list_checkpoints(tmp_path)[0]
    recorded = json.loads((checkpoint / "trainer_state.json").read_text())["files"]
    on_disk = {path.name for path in checkpoint.iterdir()} - {"trainer_state.json"}
    assert set(recorded) == on_disk and {"model.safetensors", "config.yaml"} <= on_disk
    assert all(entry["bytes"] == (checkpoint / name).stat().st_size for name, entry in recorded.items())
    assert checkpoint_damage(checkpoint) is None
    weights = checkpoint / "random_states_0.pkl"
    weights.write_bytes(bytes([weights.read_bytes()[0] ^ 1]) + weights.read_bytes()[1:])  # one bit, same size
    assert checkpoint_damage(checkpoint) == "random_states_0.pkl does not match the checksum recorded when saved"


def test_resume_auto_falls_back_past_damaged_checkpoints_with_a_warning(tmp_path, caplog):
    accelerator, model = saved_run(tmp_path)
    newest = list_checkpoints(tmp_path)[-1]
    with open(newest / "model.safetensors", "r+b") as weights:  # truncated, as a dying disk or a cut copy leaves it
        weights.truncate(100)
    with caplog.at_level(logging.WARNING):
        chosen = resume_checkpoint("auto", tmp_path)
    assert chosen.name == "step_00000020"
    assert "step_00000030 is damaged (model.safetensors holds 100 bytes" in caplog.text
    assert load_checkpoint(accelerator, chosen) == 20 and torch.all(model.weight == 20)

    (list_checkpoints(tmp_path)[1] / "trainer_state.json").write_text('{"st')
    assert resume_checkpoint("auto", tmp_path).name == "step_00000010"
    (list_checkpoints(tmp_path)[0] / "config.yaml").unlink()
    with pytest.raises(CheckpointError, match="every checkpoint in .* is damaged"):
        resume_checkpoint("auto", tmp_path)


def test_resuming_a_named_damaged_checkpoint_is_refused_naming_the_newest_intact_one(tmp_path):
    saved_run(tmp_path)
    newest = list_checkpoints(tmp_path)[-1]
    with open(newest / "model.safetensors", "r+b") as weights:
        weights.truncate(100)
    with pytest.raises(CheckpointError, match=rf"resume={newest} is damaged \(model.safetensors holds 100 bytes.*"
                                              rf"newest intact checkpoint of its run is .*step_00000020"):
        resume_checkpoint(str(newest), tmp_path)
    assert resume_checkpoint(str(list_checkpoints(tmp_path)[0]), tmp_path).name == "step_00000010"


def test_no_room_for_a_checkpoint_keeps_the_earlier_ones_and_says_how_much_is_needed(tmp_path, monkeypatch):
    accelerator, _ = saved_run(tmp_path, steps=(10, 20))
    before = {path: path.read_bytes() for path in tmp_path.rglob("*") if path.is_file()}
    size = sum(path.stat().st_size for path in list_checkpoints(tmp_path)[-1].iterdir())
    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(checkpoint_module.shutil, "disk_usage", lambda path: usage._replace(free=size - 1))
    expected = (rf"no room for checkpoint step_00000030 in .*checkpoints: {(size - 1) / 2**20:.1f} MiB free, a "
                rf"checkpoint needs about {size / 2**20:.1f} MiB.*--resume.*kept \(step_00000010, step_00000020")
    with pytest.raises(CheckpointError, match=expected):
        save_checkpoint(accelerator, tmp_path, 30, MPPRunConfig(), keep=2)  # refused before writing
    assert {path: path.read_bytes() for path in tmp_path.rglob("*") if path.is_file()} == before


def test_a_disk_filling_up_while_a_checkpoint_is_written_leaves_no_partial_one(tmp_path, monkeypatch):
    accelerator, _ = saved_run(tmp_path, steps=(10,))
    before = {path: path.read_bytes() for path in tmp_path.rglob("*") if path.is_file()}
    usage = shutil.disk_usage(tmp_path)
    free = [usage.free]
    monkeypatch.setattr(checkpoint_module.shutil, "disk_usage", lambda path: usage._replace(free=free[0]))

    def fill_the_disk(directory):  # torch's writer on a full disk: a RuntimeError, not an OSError
        Path(directory).mkdir()
        (Path(directory) / "model.safetensors").write_bytes(b"x" * 1000)
        free[0] = 0
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 1024 vs 960")

    monkeypatch.setattr(accelerator, "save_state", fill_the_disk)
    with pytest.raises(CheckpointError, match="no room for checkpoint step_00000020 .*0.0 MiB free.*kept "
                                              r"\(step_00000010\)"):
        save_checkpoint(accelerator, tmp_path, 20, MPPRunConfig(), keep=2)
    assert {path: path.read_bytes() for path in tmp_path.rglob("*") if path.is_file()} == before


def test_a_save_failing_with_room_to_spare_removes_its_partial_and_raises_its_own_error(tmp_path, monkeypatch):
    accelerator, _ = saved_run(tmp_path, steps=(10,))
    before = {path: path.read_bytes() for path in tmp_path.rglob("*") if path.is_file()}

    def fail(directory):
        Path(directory).mkdir()
        raise ValueError("not a disk problem")

    monkeypatch.setattr(accelerator, "save_state", fail)
    with pytest.raises(ValueError, match="not a disk problem"):
        save_checkpoint(accelerator, tmp_path, 20, MPPRunConfig(), keep=2)
    assert {path: path.read_bytes() for path in tmp_path.rglob("*") if path.is_file()} == before
