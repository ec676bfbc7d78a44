"""Typed run configuration: one dataclass per entry point, made of sections, and the ``data.source`` grammar.

The defaults in code are the paper's settings (section noted beside each); a preset in ``recipes/configs/`` changes
only what differs from them, and ``key=value`` on the command line wins over both (mpp/config_loading.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar, Literal, NamedTuple, Optional

from accelerate.tracking import LOGGER_TYPE_TO_CLASS

from mpp.errors import ConfigError, DataError

Pooling = Literal["token", "avg"]  # the [class] token's output after the final norm, or the patch tokens' mean (D.3)
# What a frozen evaluation reads: a pooling of the encoder's output, or "pixels", the normalised input image itself
# (no encoder): the raw-pixel baseline that every accuracy should be read against.
FrozenFeatures = Literal["token", "avg", "pixels"]
# eval.features may also say "auto": the mean of the patch tokens for an encoder MPP trained (which never trains the
# [class] token's output), the [class] token for any other.
EvaluationFeatures = Literal["auto", "token", "avg", "pixels"]


@dataclass
class ModelConfig:
    """The encoder: a timm Vision Transformer (Sec. 3.1) with a [class] token and learnable 1-D position embeddings."""

    name: str = "vit_base_patch16_224"  # any timm ViT architecture; the fields below override its sizes when set
    img_size: Optional[int] = None  # pre-training resolution (Sec. 4.6 and B.1: 224)
    patch_size: Optional[int] = None  # pixels per patch side (8, 14, 16, 32); must divide model.img_size
    embed_dim: Optional[int] = None  # token width (Ti 192, S 384, B 768, L 1024, H 1280)
    depth: Optional[int] = None  # transformer blocks
    num_heads: Optional[int] = None  # attention heads per block; must divide model.embed_dim
    in_chans: int = 3  # input channels: 3 for colour, 1 for grey images (each image is converted to it)
    drop_path_rate: float = 0.0  # stochastic depth
    dropout: float = 0.0  # after adding position embeddings and after every dense layer but qkv (App. B.1)
    # Recompute each block's activations in the backward pass instead of keeping them (timm's
    # set_grad_checkpointing): the same loss and gradients, with activation memory of one block instead of all, for
    # about a third more compute. For large ViTs on small GPUs; a resume may switch it.
    grad_checkpointing: bool = False

    FREE_ON_RESUME: ClassVar[tuple[str, ...]] = ("grad_checkpointing",)  # memory and speed only, not the results

    def __post_init__(self) -> None:
        if self.img_size is not None and self.patch_size is not None and self.img_size % self.patch_size:
            raise ConfigError(
                f"model.img_size={self.img_size} is not divisible by model.patch_size={self.patch_size}; "
                f"choose an image size that is a multiple of the patch size, e.g. "
                f"model.img_size={self.img_size // self.patch_size * self.patch_size or self.patch_size}"
            )


class SourceKind(NamedTuple):
    location: Literal["none", "optional", "required"]  # what may follow "<kind>:"
    usage: str


# data.source=<kind>[:<location>]. Each kind has one reader, in mpp/data/sources.py.
SOURCE_KINDS = {
    "shapes": SourceKind("none", "shapes, the embedded procedurally drawn data (no argument)"),
    "fashion-mnist": SourceKind("optional", "fashion-mnist[:<dir>], the IDX files (default: the Debian package's "
                                            "directory)"),
    "openclipart": SourceKind("optional", "openclipart[:<dir>], clip art in subject folders (default: the Debian "
                                          "package openclipart-png's /usr/share/openclipart/png)"),
    "cifar10": SourceKind("required", "cifar10:<dir>, the python pickles (cifar-10-batches-py/)"),
    "cifar100": SourceKind("required", "cifar100:<dir>, the python pickles (cifar-100-python/)"),
    "folder": SourceKind("required", "folder:<dir>, class_name/image files"),
    "hf": SourceKind("required", "hf:<name-or-path>, anything datasets.load_dataset takes, or a directory written by "
                                 "save_to_disk"),
}


def parse_source(source: str) -> tuple[str, str]:
    """``"kind:location"`` -> (kind, location); the location may be empty only where the kind has a default.

    An empty source is what a preset for data of the user's own says (the paper presets): it must be given, so a
    ViT-B/16 run never starts on the embedded toy data by accident."""
    if not source:
        raise DataError("data.source is not set: this preset trains on your own images; add, for example, "
                        "data.source=folder:/data/imagenet/train (or hf:<name-or-path>; see docs/data.md)")
    kind, _, location = source.partition(":")
    if kind not in SOURCE_KINDS:
        raise DataError(f"data.source={source!r}: unknown source {kind!r}; valid sources:\n  "
                        + "\n  ".join(known.usage for known in SOURCE_KINDS.values()))
    if SOURCE_KINDS[kind].location == "none" and location:
        raise DataError(f"data.source={source!r}: the {kind} source takes no argument; use data.source={kind}")
    if SOURCE_KINDS[kind].location == "required" and not location:
        raise DataError(f"data.source={source!r} needs a location: {SOURCE_KINDS[kind].usage}")
    return kind, location


@dataclass
class DataConfig:
    """Where images come from and how they become model inputs (mpp/data/)."""

    # shapes | fashion-mnist[:<dir>] | openclipart[:<dir>] | cifar10:<dir> | cifar100:<dir> | folder:<dir> | hf:<name-or-path>
    # A preset that sets it empty ("") must be given one (the paper presets: the run is refused without it).
    source: str = "shapes"  # the embedded, procedurally drawn dataset (mpp/data/shapes.py)
    eval_folder: str = ""  # folder: a separate folder for the evaluation split (same class sub-folders)
    # hf: split and column names; an empty column name means the dataset's one Image / ClassLabel column
    train_split: str = "train"
    eval_split: str = "test"
    image_column: str = ""
    label_column: str = ""
    hf_config: str = ""  # load_dataset's configuration name
    hf_data_dir: str = ""  # load_dataset's data_dir (e.g. with hf:imagefolder or hf:parquet)
    hf_cache_dir: str = ""  # where load_dataset caches; empty: the datasets library's default
    streaming: bool = False  # hf: read as a stream, for datasets larger than the disk
    shuffle_buffer: int = 10_000  # streaming: examples in the shuffle buffer
    max_bad_fraction: float = 0.01  # images that fail to decode are skipped; more than this fraction stops the run
    # Seeded slices of the training split (App. B.1.1 holds out 1-10% of it to tune on)
    holdout_fraction: float = 0.0  # this fraction of the training split becomes the "holdout" split
    shots_per_class: int = 0  # > 0: keep this many training images per class (few-shot, low-label settings)
    subset_seed: int = 0  # chooses the hold-out slice and the shots, independently of the run's seed
    # Views: pre-training crops and flips (Inception-style, as the paper's ImageNet recipes); evaluation resizes
    crop_scale: tuple[float, float] = (0.08, 1.0)
    crop_ratio: tuple[float, float] = (3 / 4, 4 / 3)
    hflip: float = 0.5
    eval_crop_fraction: float = 1.0  # evaluation: centre square of this fraction of the short side, resized
    # Loading; null picks for the machine: workers 0 on a CPU (training uses every core), else the cores per process
    num_workers: Optional[int] = None
    pin_memory: Optional[bool] = None  # null: on when training on a GPU
    prefetch_factor: int = 2  # batches each worker loads ahead
    # Where files are decoded: "cpu" (torchvision's or PIL's decoder, in the loader's workers) or "gpu" (nvJPEG,
    # batched, in the main process)
    decode: Literal["cpu", "gpu"] = "cpu"
    # Normalisation applied to the encoder's input; recorded in the exported encoder's pretrained_cfg.
    mean: tuple[float, ...] = (0.5, 0.5, 0.5)
    std: tuple[float, ...] = (0.5, 0.5, 0.5)

    def __post_init__(self) -> None:
        parse_source(self.source)
        if not 0 <= self.holdout_fraction < 1:
            raise ConfigError(f"data.holdout_fraction={self.holdout_fraction} must lie in [0, 1)")
        if not 0 <= self.max_bad_fraction <= 1:
            raise ConfigError(f"data.max_bad_fraction={self.max_bad_fraction} must lie in [0, 1]")
        if not 0 < self.crop_scale[0] <= self.crop_scale[1] <= 1:
            raise ConfigError(f"data.crop_scale={list(self.crop_scale)} must satisfy 0 < low <= high <= 1")
        if not 0 < self.crop_ratio[0] <= self.crop_ratio[1]:
            raise ConfigError(f"data.crop_ratio={list(self.crop_ratio)} must satisfy 0 < low <= high")
        if not 0 < self.eval_crop_fraction <= 1:
            raise ConfigError(f"data.eval_crop_fraction={self.eval_crop_fraction} must lie in (0, 1]")
        if self.num_workers is not None and self.num_workers < 0:
            raise ConfigError(f"data.num_workers={self.num_workers} must be at least 0 (or null: automatic)")
        # A non-finite or non-positive value would turn every input into NaN or infinity: the first steps would be
        # non-finite and the run would stop blaming the learning rate.
        if not all(math.isfinite(value) for value in self.mean):
            raise ConfigError(f"data.mean={list(self.mean)} must hold finite numbers, one per channel, e.g. "
                              "data.mean=[0.5,0.5,0.5]")
        if not all(math.isfinite(value) and value > 0 for value in self.std):
            raise ConfigError(f"data.std={list(self.std)} must hold finite numbers above 0, one per channel, e.g. "
                              "data.std=[0.5,0.5,0.5]")
        if self.decode == "gpu" and self.num_workers:
            raise ConfigError(f"data.decode=gpu decodes in the main process (CUDA cannot start in a loader worker); "
                              f"drop data.num_workers={self.num_workers}")


@dataclass
class MPPConfig:
    """Masked patch prediction (Sec. 4.6, App. B.1.2)."""

    target: Literal["mean_colour", "downsampled", "pixels"] = "mean_colour"  # the paper's best few-shot option
    corruption_rate: float = 0.5  # fraction of patches corrupted per image (BERT's 0.15 was slightly worse)
    mask_fraction: float = 0.8  # of the corrupted patches: replaced by the learnable [mask] embedding
    random_fraction: float = 0.1  # ... by another patch's embedding; the rest stay unchanged
    colour_bits: int = 3  # bits per channel of the colour targets: 3 gives 512 classes
    downsampled_size: int = 4  # cells per side of the "downsampled" target (4x4 = 16 predictions per patch)

    def __post_init__(self) -> None:
        if not 0.0 < self.corruption_rate <= 1.0:
            raise ConfigError(f"mpp.corruption_rate={self.corruption_rate} must lie in (0, 1]")
        if self.mask_fraction < 0 or self.random_fraction < 0 or self.mask_fraction + self.random_fraction > 1:
            raise ConfigError(
                f"mpp.mask_fraction={self.mask_fraction} and mpp.random_fraction={self.random_fraction} must be "
                "non-negative and sum to at most 1 (the remainder stays unchanged)"
            )
        if not 1 <= self.colour_bits <= 8:
            raise ConfigError(f"mpp.colour_bits={self.colour_bits} must lie between 1 and 8")


@dataclass
class RuntimeConfig:
    """How a run uses its machine: the settings training (train.*) and evaluation (eval.*) share."""

    mixed_precision: Literal["no", "bf16", "fp16"] = "no"  # autocast precision of the forward pass (bf16 on GPUs)
    compile: bool = False  # torch.compile the model (accelerate's "inductor" backend): a slow start, faster steps on
    # a GPU; false leaves it to `accelerate launch --dynamo_backend` (off unless asked)
    cpu_threads: int = 0  # on a CPU: threads per process; 0 shares the cores among this machine's processes
    # Several processes: the longest one waits for the others in a collective before the run ends with an error (a
    # process that vanished without closing its connections, e.g. with its machine). Above the longest pause of one
    # process: the main process writing a checkpoint, a first compilation.
    collective_timeout_s: int = 1800
    # Experiment trackers, any that accelerate supports (wandb, mlflow, aim, comet_ml, ...) whose package is
    # installed, each configured as its package reads it (e.g. WANDB_PROJECT). TensorBoard is always one of them:
    # the run directory keeps its events and pictures.
    log_with: tuple[str, ...] = ("tensorboard",)

    section: ClassVar[str] = ""  # the config key this is read from, for messages

    def __post_init__(self) -> None:
        if self.collective_timeout_s < 1:
            raise ConfigError(f"{self.section}.collective_timeout_s={self.collective_timeout_s} must be at least 1")
        unknown = [name for name in self.log_with if name not in LOGGER_TYPE_TO_CLASS]
        if unknown:
            raise ConfigError(f"{self.section}.log_with names {', '.join(unknown)}, which accelerate does not track "
                              f"with; choose from {', '.join(LOGGER_TYPE_TO_CLASS)}")


@dataclass
class TrainConfig(RuntimeConfig):
    """Optimisation (App. B.1.2: Adam, LR 2e-4, 10k warm-up steps, cosine decay, batch 4096, 1M steps)."""

    steps: Optional[int] = 1_000_000  # optimizer steps; null where train.epochs gives the length
    epochs: Optional[float] = None  # the length in passes over the training set instead (then train.steps=null)
    global_batch_size: int = 4096  # images per optimizer step, over all processes and accumulation steps
    micro_batch_size: Optional[int] = None  # images per process per forward pass; unset: no accumulation
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
        if self.micro_batch_size is not None and self.micro_batch_size < 1:
            raise ConfigError(f"train.micro_batch_size={self.micro_batch_size} must be at least 1 (or null)")
        for name in ("warmup_steps", "warmup_epochs"):
            if getattr(self, name) is not None and getattr(self, name) < 0:
                raise ConfigError(f"train.{name}={getattr(self, name)} must be at least 0")
        if self.lr <= 0:
            raise ConfigError(f"train.lr={self.lr} must be positive")


@dataclass
class RunConfig:
    """What every run has: its directory, seed, encoder and data."""

    output_dir: str = ""  # the run's directory; empty: runs/<recipe>-<date>-<time>
    seed: int = 0  # seeds the weights, the data order, the views and the corruption
    overwrite: bool = False  # start again in an output_dir that holds an earlier run, deleting it
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)


@dataclass
class TrainingRunConfig(RunConfig):
    """What every training run adds: continuing from its checkpoints."""

    RESUME_MUST_MATCH: ClassVar[tuple[str, ...]] = ("model",)  # sections (or top-level keys) a resume may not change
    resume: str = ""  # "auto": continue from the latest checkpoint(s) in output_dir, if any; or a checkpoint path


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


@dataclass
class MPPRunConfig(TrainingRunConfig):
    """Everything one masked-patch-prediction pre-training run needs (recipes/mpp.py)."""

    RESUME_MUST_MATCH: ClassVar[tuple[str, ...]] = ("model", "mpp")
    mpp: MPPConfig = field(default_factory=MPPConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    monitor: MPPMonitorConfig = field(default_factory=MPPMonitorConfig)


@dataclass
class ClassifierConfig:
    """The classification head on the encoder's output (Sec. 3.1, App. D.3)."""

    head: Literal["mlp", "linear"] = "mlp"  # pre-training: one tanh hidden layer of the encoder's width; fine-tuning:
    # a single linear layer (Sec. 3.2). The output layer always starts at zero, so initial logits are exactly zero.
    pool: Pooling = "token"  # what the head reads
    label_smoothing: float = 0.0  # of the cross-entropy's targets (0: none)

    def __post_init__(self) -> None:
        if not 0 <= self.label_smoothing < 1:
            raise ConfigError(f"classifier.label_smoothing={self.label_smoothing} must lie in [0, 1)")


def supervised_training() -> TrainConfig:
    """Supervised pre-training (App. B.1, Table 3, ViT-B on JFT-300M): Adam, lr 8e-4, weight decay 0.1, linear decay."""
    return TrainConfig(lr=8e-4, weight_decay=0.1, decay="linear")


@dataclass
class SupervisedRunConfig(TrainingRunConfig):
    """Everything one supervised pre-training run needs (recipes/supervised.py)."""

    RESUME_MUST_MATCH: ClassVar[tuple[str, ...]] = ("model", "classifier")
    classifier: ClassifierConfig = field(default_factory=ClassifierConfig)
    train: TrainConfig = field(default_factory=supervised_training)
    monitor: MonitorConfig = field(default_factory=MonitorConfig)


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

    def __post_init__(self) -> None:
        if self.lr_from and self.sweep_lrs:
            raise ConfigError(f"finetune.lr_from={self.lr_from} takes that run's chosen learning rate, and "
                              f"finetune.sweep_lrs={list(self.sweep_lrs)} would choose another: set one of them "
                              "(finetune.sweep_lrs=[] to drop the sweep)")
        if not 0 <= self.ema_decay < 1:
            raise ConfigError(f"finetune.ema_decay={self.ema_decay} must lie in [0, 1) (0: no averaging)")
        if not 0 < self.sweep_holdout_fraction < 1:
            raise ConfigError(f"finetune.sweep_holdout_fraction={self.sweep_holdout_fraction} must lie in (0, 1)")
        if any(lr <= 0 for lr in self.sweep_lrs):
            raise ConfigError(f"finetune.sweep_lrs={list(self.sweep_lrs)} must hold positive learning rates")


def finetune_training() -> TrainConfig:
    """Fine-tuning (Sec. 3.2, Table 4, ImageNet): SGD with momentum 0.9, no weight decay, batch 512, 20k steps,
    a short warm-up and cosine decay."""
    return TrainConfig(optimizer="sgd", lr=0.03, weight_decay=0.0, global_batch_size=512, steps=20_000,
                       warmup_steps=500, checkpoint_every=2_000)


def finetune_classifier() -> ClassifierConfig:
    return ClassifierConfig(head="linear")


@dataclass
class FinetuneRunConfig(TrainingRunConfig):
    """Everything one fine-tuning run needs (recipes/finetune.py)."""

    RESUME_MUST_MATCH: ClassVar[tuple[str, ...]] = ("init", "model", "classifier", "finetune")
    # The starting weights: a run directory or its export/ folder from recipes/mpp.py or recipes/supervised.py,
    # local-dir:<timm folder>, or a checkpoint file (.safetensors, .pth, .bin). Empty: from scratch, the baseline.
    # With a folder, the encoder's architecture is the folder's; model.img_size still sets the resolution.
    init: str = ""
    classifier: ClassifierConfig = field(default_factory=finetune_classifier)
    finetune: FinetuneConfig = field(default_factory=FinetuneConfig)
    train: TrainConfig = field(default_factory=finetune_training)


@dataclass
class EvaluationConfig(RuntimeConfig):
    """How an encoder is evaluated frozen (eval/)."""

    features: EvaluationFeatures = "auto"  # what the protocols read
    batch_size: int = 256  # images per forward pass and process, extracting features
    # Features are cached under a fingerprint of the encoder's weights and the images: a folder shared between
    # runs (e.g. runs/feature-cache) extracts each encoder's features once. Empty: <output_dir>/features.
    feature_cache: str = ""

    section: ClassVar[str] = "eval"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.batch_size < 1:
            raise ConfigError(f"eval.batch_size={self.batch_size} must be at least 1")


@dataclass
class EvaluationRunConfig(RunConfig):
    """What every evaluation of a frozen encoder needs (eval/)."""

    # The encoder: a run directory or its export/ folder (recipes/mpp.py, supervised.py, finetune.py),
    # local-dir:<timm folder> or a checkpoint file. Empty: a randomly initialised encoder (seeded), the baseline.
    init: str = ""
    eval: EvaluationConfig = field(default_factory=EvaluationConfig)


@dataclass
class FewShotConfig:
    """Few-shot linear evaluation (Sec. 4.1 "Metrics"): ridge regression of frozen features onto {-1, 1}^K."""

    shots: tuple[int, ...] = (1, 5, 10, 25)  # labelled training images per class
    seeds: int = 3  # independent draws of the shots (and of the hold-out slice); mean and standard deviation
    holdout_per_class: int = 10  # training images per class, never among the shots, the regulariser is chosen on
    l2_grid: tuple[float, ...] = (1e-3, 1e-2, 1e-1, 1.0, 1e1, 1e2, 1e3, 1e4)  # candidate ridge penalties

    def __post_init__(self) -> None:
        if not self.shots or min(self.shots) < 1 or self.seeds < 1 or self.holdout_per_class < 1:
            raise ConfigError(f"few_shot.shots={list(self.shots)}, few_shot.seeds={self.seeds} and "
                              f"few_shot.holdout_per_class={self.holdout_per_class} must all be at least 1")
        if not self.l2_grid or min(self.l2_grid) <= 0:
            raise ConfigError(f"few_shot.l2_grid={list(self.l2_grid)} must hold positive penalties")


@dataclass
class FewShotRunConfig(EvaluationRunConfig):
    """eval/few_shot.py."""

    few_shot: FewShotConfig = field(default_factory=FewShotConfig)


@dataclass
class LinearProbeConfig:
    """A linear classifier (multinomial logistic regression) fitted to frozen, standardised features of the whole
    training split by L-BFGS, its L2 penalty chosen on a hold-out slice of them."""

    l2_grid: tuple[float, ...] = (0.0, 1e-5, 1e-4, 1e-3)  # penalties on the weights, added to the mean cross-entropy
    max_iterations: int = 1000  # L-BFGS function evaluations per fit
    holdout_fraction: float = 0.1  # of the training features; the best penalty is then fitted to all of them

    def __post_init__(self) -> None:
        if not self.l2_grid or min(self.l2_grid) < 0:
            raise ConfigError(f"linear_probe.l2_grid={list(self.l2_grid)} must hold penalties >= 0")
        if self.max_iterations < 1:
            raise ConfigError(f"linear_probe.max_iterations={self.max_iterations} must be at least 1")
        if not 0 < self.holdout_fraction < 1:
            raise ConfigError(f"linear_probe.holdout_fraction={self.holdout_fraction} must lie in (0, 1)")


@dataclass
class LinearProbeRunConfig(EvaluationRunConfig):
    """eval/linear_probe.py."""

    linear_probe: LinearProbeConfig = field(default_factory=LinearProbeConfig)


@dataclass
class KnnConfig:
    """k-nearest-neighbour classification of frozen features: cosine similarity, votes weighted exp(s / T)."""

    k: int = 20  # neighbours that vote
    temperature: float = 0.07  # T of the votes' weights exp(similarity / T)

    def __post_init__(self) -> None:
        if self.k < 1 or self.temperature <= 0:
            raise ConfigError(f"knn.k={self.k} must be at least 1 and knn.temperature={self.temperature} positive")


@dataclass
class KnnRunConfig(EvaluationRunConfig):
    """eval/knn.py."""

    knn: KnnConfig = field(default_factory=KnnConfig)


@dataclass
class InspectionConfig:
    """The paper's pictures of a trained ViT (Sec. 4.5, App. D.7-D.8)."""

    filter_components: int = 28  # principal components of the patch-embedding filters shown (Fig. 7 left: 28)
    attention_images: int = 64  # test images the mean attention distance is averaged over
    rollout_images: int = 8  # test images shown with their attention rollout maps

    def __post_init__(self) -> None:
        for name in ("filter_components", "attention_images", "rollout_images"):
            if getattr(self, name) < 1:
                raise ConfigError(f"inspect.{name}={getattr(self, name)} must be at least 1")


@dataclass
class InspectionRunConfig(EvaluationRunConfig):
    """eval/inspect_encoder.py."""

    inspect: InspectionConfig = field(default_factory=InspectionConfig)
