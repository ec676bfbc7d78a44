"""The package's commands, each written down once: the function it runs, its config, the preset it reads without
``--config``, the preset of its kind sized for a CPU, and its help. ``python -m mpp <command>`` (and
``accelerate launch -m mpp <command>``), the scripts of recipes/ and eval/, the Python API (``mpp.pretrain``, ...) and
the experiments' runner all read this table.

Functions and configs are named ``module:attribute`` and imported when used, so that the table is read without torch
(``--help`` and a mistyped key answer in about a second), and sits below every layer that reads it.
"""

from __future__ import annotations

import importlib
import textwrap
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["COMMANDS", "Command"]  # what study/, tools/ and users may import from here


@dataclass(frozen=True)
class Command:
    """One command of ``python -m mpp``."""

    run: str  # the function it runs, given the built config: "module:function"
    config: str  # its config's class: "module:class"
    preset: str  # the preset it reads without --config
    cpu_preset: str  # the preset of its kind sized for a CPU, named where a run on a CPU asks for a GPU's settings
    # A training run continues from its checkpoints (resume=auto); an evaluation has none and starts again; an
    # experiment runs the others in subprocesses and continues by itself.
    kind: Literal["training", "evaluation", "experiment"]
    summary: str  # its line in ``python -m mpp --help``
    details: str  # the rest of its --help, after the usage line

    def function(self) -> Any:
        return imported(self.run)

    def config_class(self) -> type:
        return imported(self.config)


def imported(name: str) -> Any:
    """``module:attribute``, imported."""
    module, attribute = name.split(":")
    return getattr(importlib.import_module(module), attribute)


NO_INIT = "No init: a randomly initialised encoder, the baseline."

COMMANDS = {
    "pretrain": Command(
        "mpp.recipes.pretraining_run:pretrain_mpp", "mpp.config.runs:MPPRunConfig", "mpp_tiny_cpu",
        "mpp_own_images_cpu", "training", "masked patch prediction pre-training (Sec. 4.6, App. B.1.2)",
        "With no arguments: the tiny CPU preset on the embedded shapes data. The run directory gets config.yaml, "
        "log.txt, TensorBoard events, checkpoints/, export/ (the encoder in timm's hub format) and metrics.json."),
    "supervised": Command(
        "mpp.recipes.pretraining_run:pretrain_supervised", "mpp.config.runs:SupervisedRunConfig",
        "supervised_tiny_cpu", "supervised_tiny_cpu", "training",
        "supervised pre-training on the labels (Sec. 4.1, App. B.1)",
        "With no arguments: the tiny CPU preset on the embedded shapes data. The run directory gets what pretrain "
        "writes, with the test split's top-1 accuracy in metrics.json. Fine-tune the result with finetune "
        "init=<run directory>."),
    "finetune": Command(
        "mpp.recipes.finetune_run:fine_tune", "mpp.config.runs:FinetuneRunConfig", "finetune_tiny_cpu",
        "finetune_own_images_cpu", "training",
        "fine-tuning an encoder, or a fresh one, on labels (Sec. 3.2, App. B.1.1)",
        "The pre-training head is dropped and a zero-initialised linear head is trained with the encoder by SGD with "
        "momentum; the resolution may be higher than in pre-training (position embeddings are 2-D interpolated). "
        "Every starting point (MPP, supervised, none) goes through the same code. With finetune.sweep_lrs, each "
        "learning rate is first trained on the training images less a held-out slice and scored on it "
        "(sweep/lr_<lr>/ in the run directory); the best is then trained on all of them and tested. With "
        "finetune.lr_from=<run dir>, the rate that run's sweep chose is trained instead."),
    "linear_probe": Command(
        "mpp.recipes.linear_probe_run:evaluate_linear_probe", "mpp.config.runs:LinearProbeRunConfig",
        "eval_tiny_cpu", "eval_own_images_cpu", "evaluation",
        "logistic regression on a frozen encoder's features",
        "Logistic regression on the standardised features of the whole training split, fitted by L-BFGS, its L2 "
        "penalty chosen on a hold-out slice; top-1 on the test split. Features are extracted once and cached "
        f"(eval.feature_cache), so trying other probe settings costs only the fits. {NO_INIT}"),
    "knn": Command(
        "mpp.recipes.knn_run:evaluate_knn", "mpp.config.runs:KnnRunConfig", "eval_tiny_cpu", "eval_own_images_cpu",
        "evaluation", "kNN accuracy of a frozen encoder",
        "Each test image takes the class with the most weight among its k nearest training images by cosine "
        f"similarity of their features, each neighbour voting exp(similarity / temperature). {NO_INIT}"),
    "few_shot": Command(
        "mpp.recipes.few_shot_run:evaluate_few_shot", "mpp.config.runs:FewShotRunConfig", "eval_tiny_cpu",
        "eval_own_images_cpu", "evaluation", "few-shot linear accuracy of a frozen encoder (Sec. 4.1)",
        "For k images per class, their features are regressed onto {-1, 1}^K targets in closed form, the penalty "
        "chosen on a hold-out slice of other training images; test accuracy over several seeds, mean and standard "
        f"deviation. {NO_INIT} The run directory gets config.yaml, log.txt, TensorBoard scalars few_shot/<k>shot, "
        "the cached features and metrics.json."),
    "inspect": Command(
        "mpp.recipes.inspection_run:inspect_frozen_encoder", "mpp.config.runs:InspectionRunConfig", "eval_tiny_cpu",
        "eval_own_images_cpu", "evaluation", "pictures of what an encoder learned (Sec. 4.5, Fig. 6-7)",
        "PNG files in <output_dir>/pictures/ and in TensorBoard's images tab: the RGB principal components of the "
        "patch-embedding filters; each position embedding's cosine similarity to all others; how far each head "
        "attends, in pixels, against depth; test images weighted by their attention rollout from the [class] token. "
        "No init: a randomly initialised encoder, for comparison. metrics.json holds the mean attention distances."),
    "compare": Command(
        "mpp.experiments.comparison:compare_on_the_console", "mpp.experiments.config:ComparisonConfig",
        "compare_own_images_cpu", "compare_own_images_cpu", "experiment",
        "what MPP pre-training buys on your own images, over seeds",
        "Per seed an MPP run on the unlabelled images and a draw of the labelled ones; then, fine-tuned with one "
        "recipe each at its own swept rate, the MPP encoder against the same architecture trained from scratch as "
        "many steps as MPP's pre-training and fine-tuning together (and at random weights as briefly as MPP's "
        "fine-tuning), and, frozen, the encoder, its random weights and the raw pixels by a linear probe and kNN. "
        "results.md opens with the verdict (what pre-training bought; whether each encoder clears logistic "
        "regression on the raw pixels), then per protocol each arm's mean +- SD and the paired differences with "
        "their 95% intervals. Every setting and both image sets are checked before the first run; each run is a "
        "command of this table in a subprocess, in a folder of its own under output_dir. Running the command again "
        "continues a stopped comparison, and with more seeds adds them."),
}


def usage(name: str) -> str:
    """The usage line of a command."""
    if name == "compare":
        return ("python -m mpp compare unlabelled=hf:<images> labelled=hf:<labelled images> [--config <preset>] "
                "[seeds=[0,1,2]] [output_dir=runs/comparison] [key=value ...]")
    init = " init=<run dir>" if name == "finetune" else " [init=<run dir>]" if COMMANDS[name].kind == "evaluation" \
        else ""
    resume = " [--resume]" if COMMANDS[name].kind == "training" else ""
    return f"accelerate launch -m mpp {name} [--config <preset name or file>]{resume}{init} [key=value ...]"


def help_text(name: str) -> str:
    """A command's --help description: its summary, usage and details."""
    command = COMMANDS[name]
    summary = command.summary[0].upper() + command.summary[1:]
    return f"{summary}.\n\n    {usage(name)}\n\n{textwrap.fill(command.details, 118)}"
