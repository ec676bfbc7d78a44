"""Training sections: optimisation and its schedule, the monitors of a pre-training run, and what fine-tuning adds;
the paper's supervised and fine-tuning recipes as defaults."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal, Optional

from mpp.config.model import ClassifierConfig, Pooling
from mpp.config.runtime import RuntimeConfig
from mpp.errors import ConfigError


@dataclass
class TrainConfig(RuntimeConfig):
    """Optimisation (App. B.1.2: Adam, LR 2e-4, 10k warm-up steps, cosine decay, batch 4096, 1M steps)."""

    steps: Optional[int] = 1_000_000  # optimizer steps; null where train.epochs gives the length
    epochs: Optional[float] = None  # the length in passes over the training set instead (then train.steps=null)
    global_batch_size: int = 4096  # images per optimizer step, over all processes and accumulation steps
    micro_batch_size: Optional[int] = None  # images per process per forward pass; unset: no accumulation
    # Images per process per forward pass when a classifier is scored (hold-out slice, test split): no gradients are
    # kept, so it can be larger than the training pass (timm's validation batch size); unset: the micro batch.
    eval_batch_size: Optional[int] = None
    lr: float = 2e-4  # peak learning rate: as is, or of the reference batch (train.lr_scaling)
    lr_scaling: Literal["none", "linear"] = "none"  # linear: peak = lr x global_batch_size / lr_reference_batch
    lr_reference_batch: int = 256  # the batch train.lr is given for when scaled (MAE states its rates at 256)
    warmup_steps: Optional[int] = 10_000  # linear warm-up from 0 (a run shorter than this never reaches the peak)
    warmup_epochs: Optional[float] = None  # the warm-up in epochs instead (then train.warmup_steps=null)
    decay: Literal["cosine", "linear"] = "cosine"  # from the peak after warm-up to train.min_lr at the last step
    min_lr: float = 0.0  # learning rate at the last step
    betas: tuple[float, float] = (0.9, 0.999)  # adamw only
    weight_decay: float = 0.0  # decoupled (AdamW); App. B.1.2 states none for MPP. Skips biases, norms, tokens.
    grad_clip_norm: float = 1.0  # global norm (App. B.1)
    optimizer: Literal["adamw", "sgd"] = "adamw"  # Adam with decoupled weight decay, or SGD (fine-tuning, Sec. 3.2)
    momentum: float = 0.9  # sgd only
    log_every: int = 50  # steps between TensorBoard points (the only steps that synchronise with the device)
    checkpoint_every: int = 5_000  # steps between checkpoints; one is always written at the end
    keep_checkpoints: int = 3  # most recent checkpoints kept
    on_nonfinite: Literal["stop", "skip"] = "stop"  # a step with a non-finite loss or gradient is never applied;
    # "stop" ends the run at the next log step or checkpoint, "skip" reports it and goes on
    stop_check_every: int = 10  # several processes: steps between agreeing whether a SIGTERM/SIGINT arrived

    section: ClassVar[str] = "train"

    def __post_init__(self) -> None:
        super().__post_init__()
        for steps, epochs in (("steps", "epochs"), ("warmup_steps", "warmup_epochs")):
            if (getattr(self, steps) is None) == (getattr(self, epochs) is None):
                raise ConfigError(f"give one of train.{steps}={getattr(self, steps)} and train.{epochs}="
                                  f"{getattr(self, epochs)}, and set the other to null (e.g. train.{steps}=null "
                                  f"train.{epochs}=100)")
        for name in ("steps", "epochs", "global_batch_size", "lr_reference_batch", "log_every", "checkpoint_every",
                     "keep_checkpoints", "stop_check_every"):
            if getattr(self, name) is not None and getattr(self, name) <= 0:
                raise ConfigError(f"train.{name}={getattr(self, name)} must be positive")
        for name in ("micro_batch_size", "eval_batch_size"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ConfigError(f"train.{name}={getattr(self, name)} must be at least 1 (or null)")
        for name in ("warmup_steps", "warmup_epochs"):
            if getattr(self, name) is not None and getattr(self, name) < 0:
                raise ConfigError(f"train.{name}={getattr(self, name)} must be at least 0")
        if self.lr <= 0:
            raise ConfigError(f"train.lr={self.lr} must be positive")


@dataclass
class MonitorConfig:
    """Representation quality while pre-training runs: few-shot linear accuracy (the paper's ridge regression) on a
    fixed seeded slice of the training split, logged to TensorBoard as few_shot/<k>shot."""

    few_shot_every: int = 0  # steps between evaluations (and one before the first step); 0: none
    few_shot_shots: int = 10  # labelled images per class the regression is fitted to
    few_shot_holdout_per_class: int = 10  # images per class its regulariser is chosen on
    few_shot_test_per_class: int = 50  # images per class it is scored on; the three slices are disjoint
    features: Pooling = "token"  # what the regression reads (MPP's monitors: the mean of the patch tokens)

    def __post_init__(self) -> None:
        for name, least in (("few_shot_every", 0), ("few_shot_shots", 1), ("few_shot_holdout_per_class", 1),
                            ("few_shot_test_per_class", 1)):
            if getattr(self, name) < least:
                raise ConfigError(f"monitor.{name}={getattr(self, name)} must be at least {least}")


@dataclass
class MPPMonitorConfig(MonitorConfig):
    """... and for MPP, pictures of what the model predicts (pictures/mpp_step_<step>.png, TensorBoard mpp/mosaic)."""

    features: Pooling = "avg"  # MPP trains the patch tokens, never the [class] token's output
    mosaic_every: int = 0  # steps between mosaics of images, their corrupted views and the predictions; 0: none
    mosaic_images: int = 8  # images in each mosaic, the same ones and the same corruption every time
    # At the end of the run: the few-shot fit above on this many seeded draws of such slices, for the trained encoder
    # and for the same encoder at initialisation (metrics.json: few_shot_accuracy, few_shot_accuracy_at_init), to
    # show what pre-training bought (MPP never sees the labels, so training images may score it); 0: none
    final_few_shot_draws: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.final_few_shot_draws < 0:
            raise ConfigError(f"monitor.final_few_shot_draws={self.final_few_shot_draws} must be at least 0")
        if self.mosaic_every < 0 or self.mosaic_images < 1:
            raise ConfigError(f"monitor.mosaic_every={self.mosaic_every} must be at least 0 and "
                              f"monitor.mosaic_images={self.mosaic_images} at least 1")


def supervised_training() -> TrainConfig:
    """Supervised pre-training (App. B.1, Table 3, ViT-B on JFT-300M): Adam, lr 8e-4, weight decay 0.1, linear decay."""
    return TrainConfig(lr=8e-4, weight_decay=0.1, decay="linear")


@dataclass
class FinetuneConfig:
    """What fine-tuning adds to classifier training (Sec. 3.2, App. B.1.1)."""

    ema_decay: float = 0.0  # > 0: also keep a Polyak (exponential moving) average of the weights (Table 2: 0.9999)
    # A learning-rate grid (e.g. [0.001,0.003,0.01,0.03]): each is trained on the training images less a seeded
    # slice of sweep_holdout_fraction of them and scored on that slice; the best is then trained on all of them.
    sweep_lrs: tuple[float, ...] = ()
    sweep_holdout_fraction: float = 0.02  # App. B.1.1: 2% for CIFAR, 1% for ImageNet, 10% for Pets and Flowers
    # What the held-out slice scores each rate by: balanced accuracy where the classes are unbalanced, as the
    # reported figure is then.
    sweep_score: Literal["accuracy", "balanced_accuracy"] = "accuracy"
    # A finished fine-tuning run's directory: train at the learning rate its sweep chose (its metrics.json's
    # chosen_lr), without a sweep of its own; for the other seeds of a rate chosen once.
    lr_from: str = ""
    # Layer-wise learning-rate decay (BEiT's and MAE's fine-tuning): the head learns at the peak rate, block i of L
    # (from 0) at the peak x layer_decay^(L - i), the patch embedding, [class] token and position embedding at the
    # peak x layer_decay^(L + 1). 1: every parameter at the peak rate (the paper's fine-tuning). Exploratory: no
    # published result uses it.
    layer_decay: float = 1.0
    # What the trained classifier is scored on: the test split, or "holdout": data.holdout_fraction of the training
    # split, which it never trains on (a registered test's settings chosen without reading its test split)
    scored_split: Literal["test", "holdout"] = "test"
    # true: the scored split's predictions and labels go to predictions.json, neither scored nor logged (a registered
    # test's seeds are read together, once, after the last: study/confirmatory.py)
    sealed: bool = False

    def __post_init__(self) -> None:
        if self.lr_from and self.sweep_lrs:
            raise ConfigError(f"finetune.lr_from={self.lr_from} takes that run's chosen learning rate, and "
                              f"finetune.sweep_lrs={list(self.sweep_lrs)} would choose another: set one of them "
                              "(finetune.sweep_lrs=[] to drop the sweep)")
        if not 0 < self.layer_decay <= 1:
            raise ConfigError(f"finetune.layer_decay={self.layer_decay} must lie in (0, 1] (1: no decay)")
        if not 0 <= self.ema_decay < 1:
            raise ConfigError(f"finetune.ema_decay={self.ema_decay} must lie in [0, 1) (0: no averaging)")
        if not 0 < self.sweep_holdout_fraction < 1:
            raise ConfigError(f"finetune.sweep_holdout_fraction={self.sweep_holdout_fraction} must lie in (0, 1)")
        if any(lr <= 0 for lr in self.sweep_lrs):
            raise ConfigError(f"finetune.sweep_lrs={list(self.sweep_lrs)} must hold positive learning rates")


@dataclass
class AugmentConfig:
    """The regularisers a classifier is trained with since DeiT (Touvron et al., 2021), as MAE's and BEiT's fine-tuning
    use them, beyond the paper's crops and flips; all off in the paper's recipes. With ``classifier.label_smoothing``,
    ``model.drop_path_rate``, ``train.weight_decay`` and ``finetune.layer_decay``, which exist already. Per image
    (in the loader, each image's draws seeded by its key, (seed, epoch, index)): the policy, then erasing; per pass
    (on the device): mixup or cutmix."""

    # torchvision's augmentation policy, per image: randaugment (Cubuk et al.: augment.randaugment_ops operations at
    # augment.randaugment_magnitude), trivialaugment (TrivialAugmentWide: one operation at a random magnitude); none
    auto_augment: Literal["none", "randaugment", "trivialaugment"] = "none"
    randaugment_ops: int = 2  # operations per image (DeiT: 2)
    # on timm's scale of 0 to 10 (DeiT's rand-m9: 90% of each operation's largest change); torchvision's own default
    # scale has 31 steps, on which the same strength is 27
    randaugment_magnitude: int = 9
    # Random erasing (Zhong et al.): the probability per image that a box of 2-33% of it is filled with per-pixel
    # normal noise of the normalised input (DeiT's 0.25, timm's mode "pixel"); 0: none
    random_erasing: float = 0.0
    # Mixup and cutmix on each pass (timm's Mixup, mode "batch": the pass mixed with itself reversed, one weight per
    # pass, drawn from Beta(alpha, alpha)); soft targets with classifier.label_smoothing. DeiT: 0.8 and 1.0. 0: off
    mixup_alpha: float = 0.0
    cutmix_alpha: float = 0.0
    mix_prob: float = 1.0  # the probability that a pass is mixed at all
    mix_switch_prob: float = 0.5  # with both on: the probability that a mixed pass uses cutmix rather than mixup

    def __post_init__(self) -> None:
        for name in ("random_erasing", "mix_prob", "mix_switch_prob"):
            if not 0 <= getattr(self, name) <= 1:
                raise ConfigError(f"augment.{name}={getattr(self, name)} must lie in [0, 1]")
        for name in ("mixup_alpha", "cutmix_alpha"):
            if getattr(self, name) < 0:
                raise ConfigError(f"augment.{name}={getattr(self, name)} must be at least 0 (0: off)")
        if self.randaugment_ops < 1 or not 0 <= self.randaugment_magnitude <= RANDAUGMENT_SCALE:
            raise ConfigError(f"augment.randaugment_ops={self.randaugment_ops} must be at least 1 and "
                              f"augment.randaugment_magnitude={self.randaugment_magnitude} lie in [0, "
                              f"{RANDAUGMENT_SCALE}] (DeiT's: 2 and 9)")

    @property
    def mixes(self) -> bool:
        return self.mixup_alpha > 0 or self.cutmix_alpha > 0


RANDAUGMENT_SCALE = 10  # the largest magnitude of augment.randaugment_magnitude: timm's scale (DeiT's m9 is on it)


def finetune_training() -> TrainConfig:
    """Fine-tuning (Sec. 3.2, Table 4, ImageNet): SGD with momentum 0.9, no weight decay, batch 512, 20k steps,
    a short warm-up and cosine decay."""
    return TrainConfig(optimizer="sgd", lr=0.03, weight_decay=0.0, global_batch_size=512, steps=20_000,
                       warmup_steps=500, checkpoint_every=2_000)


def finetune_classifier() -> ClassifierConfig:
    return ClassifierConfig(head="linear")
