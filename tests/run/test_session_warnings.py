"""What a run says before it starts: a GPU's settings asked of a CPU."""

from __future__ import annotations

import logging

from mpp.config.training import TrainConfig
from mpp.run.session import warn_of_gpu_settings_on_a_cpu


def test_bf16_or_compile_on_a_cpu_is_warned_of_in_one_line_naming_a_cpu_preset(caplog):
    with caplog.at_level(logging.WARNING, logger="mpp.run.session"):
        warn_of_gpu_settings_on_a_cpu(TrainConfig(mixed_precision="bf16", compile=True), "cpu")
        warn_of_gpu_settings_on_a_cpu(TrainConfig(mixed_precision="bf16", compile=True), "cuda")  # where they pay
        warn_of_gpu_settings_on_a_cpu(TrainConfig(), "cpu")  # fp32, eager: a CPU's own settings
    assert [record.getMessage() for record in caplog.records] == [
        "this run asks for mixed_precision=bf16 and compile=true, a GPU's settings, on a CPU: it will be slow; a "
        "*_cpu.yaml preset (recipes/configs/, e.g. mpp_tiny_cpu.yaml) is sized for a CPU"]
