from __future__ import annotations

import json
import shutil

import pytest
import timm
import torch
from accelerate import Accelerator

from mpp.config import ConfigError, MPPRunConfig, build_config
from mpp.models.encoder import create_encoder
from mpp.models.pretrained import export_encoder
from mpp.run.directory import RunDirectoryError, claim_output_dir
from mpp.training.checkpoint import (
    check_resume_compatible,
    list_checkpoints,
    load_checkpoint,
    resume_checkpoint,
    save_checkpoint,
)


def test_a_directory_holding_a_run_is_refused_unless_resuming_or_overwriting(tmp_path):
    claim_output_dir(tmp_path / "new", resume=False, overwrite=False)  # absent: created
    assert (tmp_path / "new").is_dir()
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.json").write_text("{}")
    with pytest.raises(RunDirectoryError, match="already holds a run .*metrics.json.*resume=auto.*overwrite=true"):
        claim_output_dir(run, resume=False, overwrite=False)
    assert (run / "metrics.json").read_text() == "{}"  # nothing lost
    claim_output_dir(run, resume=True, overwrite=False)
    assert (run / "metrics.json").exists()
    claim_output_dir(run, resume=False, overwrite=True)
    assert run.is_dir() and not any(run.iterdir())


def test_checkpoints_keep_the_newest_and_resume_from_the_latest(tmp_path):
    accelerator = Accelerator(cpu=True)
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
    accelerator = Accelerator(cpu=True)
    accelerator.prepare(torch.nn.Linear(3, 2))  # registered: save_state saves it
    save_checkpoint(accelerator, tmp_path, 5, MPPRunConfig(), keep=3)
    killed = tmp_path / "checkpoints" / "step_00000010.partial"  # a run killed while saving step 10 ...
    shutil.copytree(tmp_path / "checkpoints" / "step_00000005", killed)  # ... just before the rename
    (killed / "trainer_state.json").write_text('{"step": 10}')
    assert resume_checkpoint("auto", tmp_path).name == "step_00000005"
    save_checkpoint(accelerator, tmp_path, 7, MPPRunConfig(), keep=3)  # the next save clears the leftover
    assert sorted(path.name for path in (tmp_path / "checkpoints").iterdir()) == ["step_00000005", "step_00000007"]


def test_resuming_with_another_model_or_objective_is_refused(tmp_path):
    accelerator = Accelerator(cpu=True)
    accelerator.prepare(torch.nn.Linear(3, 2))
    config = build_config(MPPRunConfig, overrides=["model.depth=2"])
    checkpoint = save_checkpoint(accelerator, tmp_path, 1, config, keep=1)
    check_resume_compatible(checkpoint, build_config(MPPRunConfig, overrides=["model.depth=2", "train.steps=9"]))
    changed = build_config(MPPRunConfig, overrides=["model.depth=3", "mpp.target=pixels"])
    with pytest.raises(ConfigError, match=r"model.depth: 2 in the checkpoint, 3 now(.|\n)*mpp.target"):
        check_resume_compatible(checkpoint, changed)


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
    from mpp.config import FinetuneRunConfig

    accelerator = Accelerator(cpu=True)
    accelerator.prepare(torch.nn.Linear(3, 2))
    checkpoint = save_checkpoint(accelerator, tmp_path, 1, build_config(FinetuneRunConfig, overrides=["init=runs/a"]),
                                 keep=1)
    check_resume_compatible(checkpoint, build_config(FinetuneRunConfig, overrides=["init=runs/a"]))
    changed = build_config(FinetuneRunConfig, overrides=["init=runs/b", "finetune.ema_decay=0.9"])
    with pytest.raises(ConfigError, match=r"init: 'runs/a' in the checkpoint, 'runs/b' now(.|\n)*finetune.ema_decay"):
        check_resume_compatible(checkpoint, changed)
