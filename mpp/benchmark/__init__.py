"""Benchmarks: tools beside the library that measure it, and that nothing in it imports.

- ``python -m mpp.benchmark`` (``training_step.py``): the training step's images/s, peak memory and FLOP utilisation,
  for supervised, MPP and vit-pytorch's MPP, timed in turn.
- ``python -m mpp.benchmark.loader_speed`` (``loader_speed.py``): images/s of every data source at several worker
  counts, next to the training step.
- ``python -m mpp.benchmark.training_run`` (``training_run.py``): the pre-training recipe on prepared images, its
  images/s and the share of its time spent waiting for data beside the step's, on a small and a large dataset.
- ``python -m mpp.benchmark.checkpoint_speed`` (``checkpoint_speed.py``): saving, verifying and loading a checkpoint of
  the ViT-B/16 preset's size (synthetic state), from the page cache and (``--cold``) from the disk.
- ``python -m mpp.benchmark.step_profile`` (``step_profile.py``): where the step's time goes, by kind of work.

Their default preset is ``mpp_tiny_cpu``; ``--config`` takes a preset's name or a YAML file.
"""

from pathlib import Path

from mpp.config.runs import MPPRunConfig
from mpp.config.building import build_config


def preset_encoder_and_batch(preset: str | Path) -> MPPRunConfig:
    """An MPP preset's settings for a benchmark that builds its encoder and batch on images of its own: the preset's
    data is never read, so a preset that leaves ``data.source`` to the user (the paper's) is given the embedded one."""
    return build_config(MPPRunConfig, preset, ["data.source=shapes"])
