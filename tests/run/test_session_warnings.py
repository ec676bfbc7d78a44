"""What a run says before it starts: a GPU's settings asked of a CPU."""

from __future__ import annotations

import logging

import pytest

from mpp.config.building import preset_path
from mpp.config.training import TrainConfig
from mpp.run import warn_of_gpu_settings_on_a_cpu


@pytest.mark.parametrize("prefix", ["mpp", "supervised", "finetune", "linear-probe", "knn", "few-shot", "inspect"])
def test_bf16_or_compile_on_a_cpu_is_warned_of_in_one_line_naming_the_cpu_preset_of_that_run(caplog, prefix):
    with caplog.at_level(logging.WARNING, logger="mpp.run"):
        warn_of_gpu_settings_on_a_cpu(TrainConfig(mixed_precision="bf16", compile=True), "cpu", prefix)
        warn_of_gpu_settings_on_a_cpu(TrainConfig(mixed_precision="bf16", compile=True), "cuda", prefix)  # they pay
        warn_of_gpu_settings_on_a_cpu(TrainConfig(), "cpu", prefix)  # fp32, eager: a CPU's own settings
    (message,) = [record.getMessage() for record in caplog.records]
    assert message.startswith("this run asks for mixed_precision=bf16 and compile=true, a GPU's settings, on a CPU: "
                              "it will be slow; --config ")
    preset = preset_path(message.split("--config ")[1].split()[0])  # a preset's name
    kind = {"mpp": "mpp", "supervised": "supervised", "finetune": "finetune"}.get(prefix, "eval")
    assert preset.is_file() and preset.stem.startswith(f"{kind}_") and preset.stem.endswith("_cpu"), message
