from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from mpp.config.building import build_config, config_keys, config_to_dict, parse_command_line
from mpp.config.data import SOURCE_KINDS
from mpp.config.runs import (
    FewShotRunConfig,
    FinetuneRunConfig,
    InspectionRunConfig,
    KnnRunConfig,
    LinearProbeRunConfig,
    MPPRunConfig,
    SupervisedRunConfig,
)
from mpp.errors import ConfigError
from study.curve_config import PretrainingCurveConfig
from study.reproduction_config import ReproductionConfig

PRESETS = sorted(path for path in (Path(__file__).parents[1] / "recipes" / "configs").glob("*.yaml")
                 if not path.stem.startswith("compare_"))
# the experiments' presets: test_comparison.py, and in study/configs tests/study/


def test_dotted_overrides_are_typed_by_the_field():
    cfg = build_config(
        MPPRunConfig,
        overrides=["train.lr=1e-3", "train.steps=1_000", "seed=7", "mpp.target=pixels", "overwrite=true",
                   "model.img_size=64", "data.mean=[0.1,0.2,0.3]", "train.micro_batch_size=null", "output_dir=runs/x"],
    )
    assert cfg.train.lr == 1e-3 and cfg.train.steps == 1000 and cfg.seed == 7 and cfg.overwrite is True
    assert cfg.mpp.target == "pixels" and cfg.model.img_size == 64 and cfg.data.mean == (0.1, 0.2, 0.3)
    assert cfg.train.micro_batch_size is None and cfg.output_dir == "runs/x"


def test_defaults_are_the_papers_mpp_settings():
    cfg = MPPRunConfig()
    assert (cfg.mpp.corruption_rate, cfg.mpp.mask_fraction, cfg.mpp.random_fraction) == (0.5, 0.8, 0.1)
    assert (cfg.mpp.target, cfg.mpp.colour_bits) == ("mean_colour", 3)
    assert (cfg.train.lr, cfg.train.warmup_steps, cfg.train.decay) == (2e-4, 10_000, "cosine")
    assert (cfg.train.global_batch_size, cfg.train.steps, cfg.train.betas) == (4096, 1_000_000, (0.9, 0.999))
    assert cfg.train.grad_clip_norm == 1.0


def test_preset_then_command_line(tmp_path):
    preset = tmp_path / "preset.yaml"
    preset.write_text("train:\n  lr: 1e-3\n  steps: 50\nmpp:\n  corruption_rate: 0.15\n")
    cfg = build_config(MPPRunConfig, preset, ["train.steps=60"])
    assert (cfg.train.lr, cfg.train.steps, cfg.mpp.corruption_rate) == (1e-3, 60, 0.15)  # YAML's "1e-3" is a float


def test_unknown_key_is_an_error_that_lists_the_valid_ones(tmp_path):
    with pytest.raises(ConfigError) as error:
        build_config(MPPRunConfig, overrides=["train.step=10"])
    message = str(error.value)
    assert "unknown config key 'train.step'" in message and "did you mean 'train.steps'" in message
    assert all(key in message for key in config_keys(MPPRunConfig))
    preset = tmp_path / "preset.yaml"
    preset.write_text("mpp:\n  mask_rate: 0.5\n")
    with pytest.raises(ConfigError, match="unknown config key 'mpp.mask_rate'"):
        build_config(MPPRunConfig, preset)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("train.steps=1.5", "not a valid int"),
        ("train.lr=fast", "not a valid float"),
        ("overwrite=maybe", "not a valid bool"),
        ("mpp.target=colour", "not one of: mean_colour, downsampled, pixels"),
        ("mpp.corruption_rate=0", "must lie in"),
        ("mpp.mask_fraction=0.95", "sum to at most 1"),
        ("model.img_size=30", "not divisible by model.patch_size"),
        ("train.betas=[0.9]", "must have 2 items"),
        ("train.collective_timeout_s=0", "train.collective_timeout_s=0 must be at least 1"),
        ("train.log_with=wandb", r"must be a list, e.g. train.log_with=\[wandb\]"),
        ("steps", "not of the form key=value"),
        ("train.epochs=10", r"give one of train.steps=1000000 and train.epochs=10.0, and set the other to null"),
        ("train.warmup_steps=null", r"give one of train.warmup_steps=None and train.warmup_epochs=None"),
        ("train.lr_scaling=sqrt", "not one of: none, linear"),
    ],
)
def test_bad_values_name_the_key_and_the_problem(override, message):
    overrides = [override] + (["model.patch_size=4"] if override.startswith("model.img_size") else [])
    with pytest.raises(ConfigError, match=message):
        build_config(MPPRunConfig, overrides=overrides)


def test_a_learning_rate_taken_from_another_run_and_a_sweep_of_its_own_are_refused_together():
    with pytest.raises(ConfigError, match=r"finetune.lr_from=runs/a takes that run's chosen learning rate, and "
                                          r"finetune.sweep_lrs=\[0.1, 0.3\] would choose another"):
        build_config(FinetuneRunConfig, overrides=["finetune.lr_from=runs/a", "finetune.sweep_lrs=[0.1,0.3]"])
    build_config(FinetuneRunConfig, overrides=["finetune.lr_from=runs/a", "finetune.sweep_lrs=[]"])


def test_scoring_a_held_out_slice_needs_one_and_a_split_seed_needs_a_source_it_draws():
    with pytest.raises(ConfigError, match="finetune.scored_split=holdout scores the held-out slice of the training "
                                          r"split: set data.holdout_fraction \(e.g. 0.2\)"):
        build_config(FinetuneRunConfig, overrides=["finetune.scored_split=holdout"])
    build_config(FinetuneRunConfig, overrides=["finetune.scored_split=holdout", "data.holdout_fraction=0.2"])
    with pytest.raises(ConfigError, match="data.split_seed=1 draws the test split of openclipart and "
                                          "openclipart-pool; data.source=fashion-mnist keeps its own"):
        build_config(FinetuneRunConfig, overrides=["data.source=fashion-mnist", "data.split_seed=1"])
    build_config(FinetuneRunConfig, overrides=["data.source=openclipart-pool", "data.split_seed=1"])


def test_yaml_that_cannot_be_parsed_is_named_with_its_line_and_column(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("train: {steps: 3\nmodel:\n  depth: 2\n")  # the mapping is never closed
    with pytest.raises(ConfigError, match=rf"config file {bad}, line 2, column 6: not valid YAML \(while parsing a "
                                          r"flow mapping; expected ',' or '}', but got ':'\)"):
        build_config(MPPRunConfig, bad)
    with pytest.raises(ConfigError, match=r"data.mean=\[0.5,0.5, column 9: not valid YAML .*expected ',' or '\]'"):
        build_config(MPPRunConfig, None, ["data.mean=[0.5,0.5"])


def test_missing_preset_file_is_named(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        build_config(MPPRunConfig, tmp_path / "nope.yaml")


def test_a_directory_given_as_the_preset_is_called_a_directory(tmp_path):
    with pytest.raises(ConfigError, match=rf"config file {tmp_path} is a directory; give one YAML file, e.g. --config "
                                          r"mpp_tiny_cpu"):
        build_config(MPPRunConfig, tmp_path)
    (tmp_path / "mine.yaml").write_text("seed: 1\n")
    with pytest.raises(ConfigError, match=rf"is a directory; give one YAML file, e.g. --config {tmp_path}/mine.yaml"):
        build_config(MPPRunConfig, tmp_path)


@pytest.mark.parametrize("override", ["data.std=[0,1,1]", "data.std=[0.5,-0.5,0.5]", "data.std=[0.5,inf,0.5]",
                                      "data.mean=[nan,0.5,0.5]", "data.mean=[0.5,0.5,-inf]"])
def test_normalisation_that_would_make_inputs_non_finite_is_refused_naming_the_key(override):
    key = override.split("=")[0]
    with pytest.raises(ConfigError, match=rf"^{key}=\[.*\] must hold finite numbers"):
        build_config(MPPRunConfig, overrides=[override])


RECIPE_CONFIGS = {"mpp": [MPPRunConfig], "supervised": [SupervisedRunConfig], "finetune": [FinetuneRunConfig],
                  "eval": [FewShotRunConfig, LinearProbeRunConfig, KnnRunConfig, InspectionRunConfig]}


@pytest.mark.parametrize("preset", PRESETS, ids=[p.stem for p in PRESETS])
def test_every_shipped_preset_builds_for_its_recipe(preset):
    own_data = 'source: ""' in preset.read_text()  # the paper presets: data.source is the user's to give
    for recipe in RECIPE_CONFIGS[preset.stem.split("_")[0]]:  # presets are named <recipe>_<setting>.yaml
        if own_data:
            with pytest.raises(ConfigError, match=r"^data.source is not set: .* add, for example, data.source=\S+"):
                build_config(recipe, preset)
        cfg = build_config(recipe, preset, ["data.source=folder:/data/images"] if own_data else [])
        assert config_to_dict(cfg)["model"]["name"].startswith("vit_")


@pytest.mark.parametrize("preset", [p for p in PRESETS if "vit_b16" in p.stem or "vit_l16" in p.stem],
                         ids=lambda p: p.stem)
def test_a_paper_scale_preset_never_falls_back_to_the_embedded_shapes(preset):
    with pytest.raises(ConfigError, match="data.source is not set"):
        build_config(RECIPE_CONFIGS[preset.stem.split("_")[0]][0], preset)


def test_resume_flag_means_resume_auto():
    tiny = Path(__file__).parents[1] / "recipes" / "configs" / "mpp_tiny_cpu.yaml"
    cfg = parse_command_line(MPPRunConfig, ["--resume", "seed=3"], tiny, description="")
    assert cfg.resume == "auto" and cfg.seed == 3
    cfg = parse_command_line(MPPRunConfig, ["seed=3", "--resume", "train.steps=5"], tiny, description="")
    assert cfg.resume == "auto" and cfg.seed == 3 and cfg.train.steps == 5  # overrides on both sides of the flag


def test_trackers_add_to_tensorboard_and_a_missing_package_is_named(monkeypatch):
    import accelerate.utils

    from mpp.run import trackers

    assert trackers(build_config(MPPRunConfig).train) == ["tensorboard"]
    monkeypatch.setattr(accelerate.utils, "is_mlflow_available", lambda: True)
    with_mlflow = build_config(MPPRunConfig, overrides=["train.log_with=[mlflow]"]).train
    assert trackers(with_mlflow) == ["tensorboard", "mlflow"]
    monkeypatch.setattr(accelerate.utils, "is_wandb_available", lambda: False)
    with pytest.raises(ConfigError, match="log_with names wandb, whose package is not installed: pip install wandb"):
        trackers(build_config(MPPRunConfig, overrides=["train.log_with=[mlflow,wandb]"]).train)
    with pytest.raises(ConfigError, match="names weights, which accelerate does not track with; choose from"):
        trackers(build_config(MPPRunConfig, overrides=["train.log_with=[tensorboard,weights]"]).train)


@pytest.mark.parametrize("cls", [MPPRunConfig, SupervisedRunConfig, FinetuneRunConfig, FewShotRunConfig,
                                 LinearProbeRunConfig, KnnRunConfig, InspectionRunConfig, ReproductionConfig,
                                 PretrainingCurveConfig], ids=lambda cls: cls.__name__)
def test_help_gives_every_key_its_section_type_default_and_meaning(cls, capsys, tmp_path):
    (tmp_path / "empty.yaml").write_text("")
    text = help_text(capsys, cls, tmp_path / "empty.yaml")
    assert "docs/presets.md" in text and "--print-config" in text
    lines = text.splitlines()
    for key in config_keys(cls):
        (at,) = [i for i, line in enumerate(lines) if line.startswith(f"  {key} ")]
        described = lines[at].split(maxsplit=1)[1]
        assert " = " in described, key  # its type and default
        section = key.rpartition(".")[0] or "run"
        heading = lines.index(f"{section}:", 0, at)  # under its section's heading
        meaning = lines[at + 1]
        assert (meaning.startswith(" " * 37) and meaning.strip()) or any(
            line.startswith("  # ") for line in lines[heading:at]), f"{key} has no meaning in its field's comment"


def help_text(capsys: pytest.CaptureFixture, cls: type, default_preset: Path, *argv: str) -> str:
    """What ``<recipe> [argv] --help`` prints, for a recipe whose default preset is ``default_preset``."""
    with pytest.raises(SystemExit) as ended:
        parse_command_line(cls, [*argv, "--help"], default_preset, description="")
    assert ended.value.code == 0
    return capsys.readouterr().out


def test_help_shows_types_and_defaults_as_a_command_line_writes_them(capsys, tmp_path):
    (tmp_path / "empty.yaml").write_text("")  # a preset that changes nothing: the recipe's own values
    text = help_text(capsys, MPPRunConfig, tmp_path / "empty.yaml")
    assert re.search(r"^  train.steps +int or null = 1000000$", text, re.M)
    assert re.search(r"^  train.decay +one of cosine\|linear = 'cosine'$", text, re.M)
    assert re.search(r"^  train.betas +list of float = \[0.9,0.999\]$", text, re.M)
    assert re.search(r"^ {37}optimizer steps; null where train.epochs gives the length$", text, re.M)


def test_help_shows_the_values_a_run_of_the_preset_uses_beside_the_recipes_own(capsys, tmp_path):
    configs = Path(__file__).parents[1] / "recipes" / "configs"
    steps = yaml.safe_load((configs / "mpp_tiny_cpu.yaml").read_text())["train"]["steps"]
    text = help_text(capsys, MPPRunConfig, configs / "mpp_tiny_cpu.yaml")  # a run without arguments
    assert re.search(rf"^  train.steps +int or null = {steps} \(the preset's; the recipe's own: 1000000\)$", text,
                     re.M)
    assert "the preset mpp_tiny_cpu.yaml" in text
    (tmp_path / "mine.yaml").write_text("train:\n  steps: 7\n")
    text = help_text(capsys, MPPRunConfig, configs / "mpp_tiny_cpu.yaml", "--config", str(tmp_path / "mine.yaml"))
    assert re.search(r"^  train.steps +int or null = 7 \(the preset's; the recipe's own: 1000000\)$", text, re.M)
    # a paper preset leaves data.source to the command line: its help is shown all the same
    text = help_text(capsys, MPPRunConfig, configs / "mpp_tiny_cpu.yaml", "--config",
                     str(configs / "mpp_vit_b16_one_gpu.yaml"))
    assert re.search(r"^  data.source +str = '' \(the preset's; the recipe's own: 'shapes'\)$", text, re.M)


def test_help_says_each_group_of_keys_comment_once_and_lists_the_source_kinds(capsys, tmp_path):
    (tmp_path / "empty.yaml").write_text("")
    text = help_text(capsys, MPPRunConfig, tmp_path / "empty.yaml")
    for heading in ("# hf: split and column names", "# Views: pre-training crops and flips",
                    "# Seeded slices of the training split", "# Normalisation applied to the encoder's input"):
        assert text.count(heading.removeprefix("# ")) == 1 and f"\n  {heading}" in text, heading
    source = text[text.index("  data.source "):text.index("  data.eval_folder ")]
    assert ").;" not in source and "SOURCE_KINDS" not in source
    for kind in SOURCE_KINDS.values():  # one line each, as the table says it
        assert re.search(rf"^ {{39}}{re.escape(kind.usage.split(' ')[0])}", source, re.M), kind.usage


def test_print_config_prints_the_resolved_config_and_builds_nothing(capsys, tmp_path):
    tiny = Path(__file__).parents[1] / "recipes" / "configs" / "mpp_tiny_cpu.yaml"
    with pytest.raises(SystemExit) as ended:
        parse_command_line(MPPRunConfig, ["--print-config", f"output_dir={tmp_path / 'run'}", "train.steps=5"], tiny,
                           description="")
    assert ended.value.code == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed == config_to_dict(build_config(MPPRunConfig, tiny, [f"output_dir={tmp_path / 'run'}",
                                                                       "train.steps=5"]))
    assert printed["train"]["steps"] == 5 and printed["model"]["embed_dim"] == 64  # the preset's, then the override
    assert not (tmp_path / "run").exists()


ENTRY_POINTS = sorted([*(Path(__file__).parents[1] / "recipes").glob("*.py"),
                       *(Path(__file__).parents[1] / "eval").glob("*.py")])


@pytest.mark.parametrize("script", ENTRY_POINTS, ids=[f"{p.parent.name}/{p.name}" for p in ENTRY_POINTS])
def test_help_print_config_and_a_mistyped_key_answer_without_importing_torch(script):
    # torch, timm and accelerate take seconds to import; a question about the config must not wait for them
    import subprocess
    import sys

    for args, code in ((["--help"], 0), (["--print-config"], 0), (["trian.steps=3"], 1)):
        ended = subprocess.run([sys.executable, "-X", "importtime", str(script), *args], capture_output=True,
                               text=True, timeout=120)
        assert ended.returncode == code, ended.stderr[-2000:]
        imported = {line.split("|")[-1].strip().split(".")[0] for line in ended.stderr.splitlines()
                    if line.startswith("import time:")}
        assert not imported & {"torch", "timm", "accelerate"}, (args, imported & {"torch", "timm", "accelerate"})
    assert "unknown config key 'trian.steps'" in ended.stderr


@pytest.mark.parametrize("cls", [FinetuneRunConfig, KnnRunConfig])
def test_a_presets_architecture_gives_way_to_an_init_folder_and_the_users_own_settings_stay(cls, tmp_path):
    preset = tmp_path / "preset.yaml"
    preset.write_text("model: {name: vit_tiny_patch16_224, img_size: 32, patch_size: 4, embed_dim: 64, depth: 4}\n")
    (tmp_path / "run").mkdir()
    (tmp_path / "weights.safetensors").write_bytes(b"")
    for init in (tmp_path / "run", f"random:{tmp_path / 'run'}", f"local-dir:{tmp_path / 'run'}"):
        model = build_config(cls, preset, [f"init={init}", "model.embed_dim=48"]).model
        assert (model.patch_size, model.depth, model.name) == (None, None, "vit_base_patch16_224")  # the folder's
        assert model.embed_dim == 48 and model.img_size == 32  # given by the user; the resolution may change
    kept = build_config(cls, preset, [f"init={tmp_path / 'weights.safetensors'}"]).model  # records no architecture
    assert (kept.patch_size, kept.depth, kept.embed_dim) == (4, 4, 64)
    assert build_config(cls, preset).model.depth == 4
