"""The README.md of an exported encoder (``<run>/export/``), as a model folder on the Hugging Face hub has one: the
encoder, what it was trained on and how, the run's figures, how to load it, the licence and the citation."""

from __future__ import annotations

from importlib.metadata import version
from typing import Any, Mapping

from timm.models.vision_transformer import VisionTransformer

from mpp.config.runs import MPPRunConfig, SupervisedRunConfig
from mpp.config.training import TrainConfig

PACKAGE_CITATION = f"""@software{{mpp,
  title = {{mpp: masked patch prediction for Vision Transformers}},
  author = {{{{The mpp authors}}}},
  year = {{2026}},
  version = {{{version("mpp")}}},
  license = {{MIT}}
}}"""
PAPER_CITATION = """@inproceedings{dosovitskiy2021image,
  title = {An Image is Worth 16x16 Words: Transformers for Image Recognition at Scale},
  author = {Dosovitskiy, Alexey and Beyer, Lucas and Kolesnikov, Alexander and Weissenborn, Dirk and Zhai, Xiaohua
            and Unterthiner, Thomas and Dehghani, Mostafa and Minderer, Matthias and Heigold, Georg and Gelly, Sylvain
            and Uszkoreit, Jakob and Houlsby, Neil},
  booktitle = {International Conference on Learning Representations},
  year = {2021}
}"""


def scalar_figures(metrics: Mapping[str, Any], prefix: str = "") -> dict[str, float]:
    """The numbers of a metrics dict (nested sections as dotted keys; lists and text left out)."""
    figures: dict[str, float] = {}
    for key, value in metrics.items():
        if isinstance(value, Mapping):
            figures |= scalar_figures(value, f"{prefix}{key}.")
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            figures[f"{prefix}{key}"] = value
    return figures


def model_card(config: MPPRunConfig | SupervisedRunConfig, train: TrainConfig, metrics: Mapping[str, Any],
               encoder: VisionTransformer, run_name: str) -> str:
    """Markdown with the hub's front matter, from the run's resolved config, the schedule it trained on (``train``:
    steps, warm-up and peak learning rate as the loop read them) and its metrics."""
    image_size, patch_size = encoder.patch_embed.img_size[0], encoder.patch_embed.patch_size[0]
    parameters = sum(parameter.numel() for parameter in encoder.parameters())
    data = config.data
    if isinstance(config, MPPRunConfig):
        method = "masked patch prediction"
        objective = (f"masked patch prediction (ViT paper Sec. 4.6): {config.mpp.corruption_rate:.0%} of the patch "
                     f"embeddings corrupted ({config.mpp.mask_fraction:.0%} [mask], {config.mpp.random_fraction:.0%} "
                     f"another patch, the rest unchanged), target `{config.mpp.target}` "
                     f"({config.mpp.colour_bits}-bit colours); the labels are never read")
    else:
        method = "supervised pre-training"
        objective = (f"supervised classification: a {config.classifier.head} head on the "
                     f"{'[class] token' if config.classifier.pool == 'token' else 'mean patch token'}, label "
                     f"smoothing {config.classifier.label_smoothing:g}; the head is not part of this folder")
    precision = "fp32" if train.mixed_precision == "no" else f"{train.mixed_precision} mixed precision"
    pool = config.export.features if isinstance(config, MPPRunConfig) else config.classifier.pool
    features = ("the mean of the patch tokens after the final norm, what MPP trains (never the [class] token's "
                "output)" if pool == "avg" else "the [class] token's output after the final norm")
    crop = "all" if data.eval_crop_fraction == 1 else f"the centre {data.eval_crop_fraction:g}"
    figures = "\n".join(f"| `{key}` | {value:.6g} |" for key, value in scalar_figures(metrics).items())
    return f"""---
library_name: timm
tags:
- image-feature-extraction
- timm
- vision-transformer
- mpp
---

# {run_name}: a Vision Transformer encoder from {method}

Written by mpp at the end of the run; the run directory above this folder holds
its full configuration (`config.yaml`), log and `metrics.json`.

## Encoder

timm `VisionTransformer` (`{config.model.name}` with the sizes below), {parameters / 1e6:.2f}M parameters:
{image_size}x{image_size} px images in {patch_size}x{patch_size} patches, width {encoder.embed_dim},
{len(encoder.blocks)} blocks, {encoder.blocks[0].attn.num_heads} heads, {encoder.patch_embed.proj.in_channels} input
channels. Inputs are images in [0, 1] normalised by mean {list(data.mean)} and standard deviation \
{list(data.std)} (also in `config.json`). Images with transparency were put on white before that, as the package
decodes them (timm's transform does not: composite them on white yourself); evaluation resized the short side and
kept {crop} of it (`crop_pct` in `config.json`). Without a head, timm gives {features}:
`global_pool` in `config.json`.

## Training

- Objective: {objective}.
- Data: `data.source={data.source}`, random resized crops of scale {list(data.crop_scale)}, flips with probability
  {data.hflip:g}.
- Optimisation: {train.steps:,} steps of {train.global_batch_size:,} images, {train.optimizer}, peak learning rate
  {train.lr:g} after {train.warmup_steps:,} warm-up steps, {train.decay} decay, weight decay {train.weight_decay:g},
  gradient clipping at {train.grad_clip_norm:g}, {precision}, seed {config.seed}.

## Figures of the run (`metrics.json`)

| Metric | Value |
| --- | ---: |
{figures}

## Loading

```python
import timm
encoder = timm.create_model("local-dir:<this folder>", pretrained=True, num_classes=0)  # features
classifier = timm.create_model("local-dir:<this folder>", pretrained=True, num_classes=10)  # a new head
```

transformers loads it too: `AutoModel.from_pretrained("<this folder>")`.

## Licence

The code that trained these weights, mpp, is under the MIT licence. The weights are derived from the training data
named above: their terms of use are those of that data.

## Citation

The method is the ViT paper's; please cite it, and the package if it helped:

```bibtex
{PAPER_CITATION}

{PACKAGE_CITATION}
```
"""
