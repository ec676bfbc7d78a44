"""Pictures of what an encoder learned (ViT paper Sec. 4.5, Fig. 6-7, App. D.7-D.8), as PNG files in
<output_dir>/pictures/ and in TensorBoard's images tab:

- patch_embedding_filters.png: RGB principal components of the patch-embedding filters;
- position_embedding_similarity.png: for each patch position, its embedding's cosine similarity to all others;
- mean_attention_distance.png: how far each head attends, in pixels, against depth;
- attention_rollout.png: test images, and each weighted by its attention rollout from the [class] token.

    accelerate launch eval/inspect_encoder.py [--config recipes/configs/<preset>.yaml] [init=<run dir>] [key=value ...]

No init: a randomly initialised encoder, for comparison. metrics.json holds the mean attention distances.
"""

from __future__ import annotations


from mpp.command_line import run_recipe
from mpp.config.runs import InspectionRunConfig
from mpp.presets import default_preset

DEFAULT_PRESET = default_preset("eval")


def cli() -> None:
    """The command line; what each process runs under `accelerate launch --tpu --main_training_function cli`."""
    run_recipe("mpp.recipes.inspection_run:inspect_frozen_encoder", InspectionRunConfig, DEFAULT_PRESET,
               description=__doc__)


if __name__ == "__main__":
    cli()
