"""Pictures of a run, as PNG files in ``<run>/pictures/`` and in TensorBoard's images tab.

Everything is a (3 h w) float tensor in [0, 1] until it is written. Matplotlib draws the one chart (and lends its
colour maps); the image grids are plain tensor layouts.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib
import numpy as np
import torch
import torch.nn.functional as F
from accelerate import Accelerator
from PIL import Image
from torchvision.utils import make_grid

from mpp.run import PICTURES_DIR

matplotlib.use("Agg")  # files only: no display on a training machine

MIN_SIDE = 96  # small images (28 px, 4 px patches) are enlarged to at least this, pixels kept square


def save_picture(accelerator: Accelerator, run_dir: Path, name: str, tag: str, picture: torch.Tensor,
                 step: int = 0) -> Path:
    """``picture`` (3 h w) to ``<run_dir>/pictures/<name>.png`` and to TensorBoard as ``tag`` at ``step``
    (main process only); returns the file's path."""
    path = run_dir / PICTURES_DIR / f"{name}.png"
    if accelerator.is_main_process:
        path.parent.mkdir(parents=True, exist_ok=True)
        pixels = (picture.clamp(0, 1) * 255).round().byte().permute(1, 2, 0).cpu().numpy()
        Image.fromarray(pixels).save(path)
        accelerator.get_tracker("tensorboard").log_images({tag: picture[None].float().cpu().numpy()}, step=step)
    return path


def enlarged(images: torch.Tensor, min_side: int = MIN_SIDE) -> torch.Tensor:
    """(b c h w) -> (b c s*h s*w), each pixel repeated s times, s the smallest integer with s*h >= ``min_side``."""
    scale = max(1, -(-min_side // images.shape[-2]))
    return F.interpolate(images, scale_factor=scale, mode="nearest") if scale > 1 else images


def image_grid(images: torch.Tensor, columns: int) -> torch.Tensor:
    """(n 3 h w) -> (3 H W): rows of ``columns`` images on a white background."""
    return make_grid(images.float().cpu(), nrow=columns, padding=2, pad_value=1.0)


def colour_mapped(values: torch.Tensor, low: float, high: float, name: str = "viridis") -> torch.Tensor:
    """(...) values -> (... 3) colours of matplotlib's ``name`` colour map, ``low`` to ``high`` spanning it."""
    scaled = ((values.double().cpu() - low) / (high - low)).clamp(0, 1).numpy()
    return torch.from_numpy(matplotlib.colormaps[name](scaled)[..., :3]).float()


def figure_picture(figure: "matplotlib.figure.Figure") -> torch.Tensor:
    """A drawn matplotlib figure as (3 h w); the figure is closed."""
    import matplotlib.pyplot as plt

    figure.canvas.draw()
    rgba = np.asarray(figure.canvas.buffer_rgba())
    plt.close(figure)
    return torch.from_numpy(rgba[..., :3].copy()).permute(2, 0, 1).float() / 255
