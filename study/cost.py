"""What a reproduction's plan costs before it runs: the training images each stage processes, and their time on one
H100 where a measured training step applies to the stage's encoder.

    python -m study.cost --config study/configs/reproduce_fashion_mnist_gpu.yaml [key=value ...]
        [--json FILE]

A training is its optimizer steps x its global batch in images. Pre-training: each pre-trained row once per seed.
Fine-tuning (the pre-trained rows) and from scratch (the rows without pre-training, ``scratch_finetune`` added): each
row once per seed and, where ``finetune.sweep_lrs`` is set, one more training per rate, each the full fine-tuning
steps on the images the sweep keeps (with ``tune_once``, on the first seed only). Not counted: the frozen evaluations
(forward passes, no optimizer steps) and a grid widened after a rate chosen at its edge (runs no plan can foresee).

A stage's time is its images over the speed of a step measured on its encoder (``H200_MEASURED_STEPS``: the same
width, depth, resolution, patch, precision and compilation), scaled to an H100 by ``H100_PER_H200``; where none was
measured it is "no measured step", never a guess. The runs a reproduction starts at once share the GPU, so their
images add up at one step's speed: for a small encoder that leaves the GPU idle part of the time, an upper estimate.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal, Optional, Union

from mpp.config.building import build_config
from mpp.config.runs import FinetuneRunConfig, MPPRunConfig, SupervisedRunConfig
from mpp.errors import ConfigError
from mpp.models.encoder import encoder_structure
from study.reproduction_config import ReproductionConfig, ReproductionRow

Step = Literal["mpp", "supervised"]  # the step a training takes: MPP's, or a classifier's (supervised, fine-tuning)
STAGES = ("pre-training (MPP)", "pre-training (supervised)", "fine-tuning", "from scratch")  # in the order printed
NO_MEASURED_STEP = "no measured step"


@dataclass(frozen=True)
class Encoder:
    """What a training step's speed depends on: the ViT's width, depth, image and patch sides, and how it runs."""

    width: int
    depth: int
    image_size: int
    patch_size: int
    precision: str
    compiled: bool

    def __str__(self) -> str:
        return (f"width {self.width}, {self.depth} blocks, {self.image_size} px, {self.patch_size}x{self.patch_size} "
                f"patches, {self.precision}, {'compiled' if self.compiled else 'eager'}")


@dataclass(frozen=True)
class MeasuredStep:
    """A training step timed on one H200 (``python -m mpp.benchmark``): images/s of the MPP step and of the supervised
    step, the same ViT with a classifier head (the step fine-tuning takes)."""

    encoder: Encoder
    mpp: float
    supervised: float
    measured: str  # where the figures are published, and at what batch

    def images_per_second(self, step: Step) -> float:
        return self.mpp if step == "mpp" else self.supervised


_H200_RUN = "one H200 at batch 256: results/gpu-h200-2, docs/performance.md's GPU status"
H200_MEASURED_STEPS = (
    MeasuredStep(Encoder(768, 12, 224, 16, "bf16", compiled=True), mpp=3425.1, supervised=3487.4,
                 measured=_H200_RUN),
    MeasuredStep(Encoder(768, 12, 224, 16, "bf16", compiled=False), mpp=2631.4, supervised=2727.2,
                 measured=_H200_RUN),
)
# No step has been timed on an H100: its speed is the H200's scaled by their memory bandwidths (H100 SXM 3.35 TB/s,
# H200 4.8 TB/s; both 989 TFLOP/s of dense bf16), as if the step were bound by memory alone: the slowest an H100 would
# be against an H200, so the time is an upper estimate.
H100_PER_H200 = 3.35 / 4.8


@dataclass(frozen=True)
class Training:
    """``count`` trainings of one row in one stage, each ``steps`` optimizer steps of ``batch`` images."""

    stage: str
    step: Step
    count: int
    steps: int
    batch: int
    encoder: Encoder

    @property
    def images(self) -> int:
        return self.count * self.steps * self.batch

    def h100_seconds(self) -> Optional[float]:
        measured = measured_step(self.encoder)
        return None if measured is None else self.images / (measured.images_per_second(self.step) * H100_PER_H200)


@dataclass(frozen=True)
class StageCost:
    """One stage of the plan: its trainings, each one's steps x batch, the images they process and, where every one
    has a measured step, their time on one H100 (estimated)."""

    stage: str
    trainings: int
    shapes: tuple[str, ...]  # each distinct "steps x batch" of its trainings
    images: int
    h100_seconds: Optional[float]


def measured_step(encoder: Encoder) -> Optional[MeasuredStep]:
    return next((measured for measured in H200_MEASURED_STEPS if measured.encoder == encoder), None)


TrainingRun = Union[MPPRunConfig, SupervisedRunConfig, FinetuneRunConfig]


def pretraining_config(cfg: ReproductionConfig, row: ReproductionRow) -> Union[MPPRunConfig, SupervisedRunConfig]:
    """``row``'s pre-training run's config, with the overrides the reproduction gives it."""
    if row.pretraining == "mpp":
        overrides = (*cfg.data, *cfg.encoder, *cfg.pretraining, *cfg.mpp, *row.overrides)
        return build_config(MPPRunConfig, cfg.mpp_preset, overrides)
    return build_config(SupervisedRunConfig, cfg.supervised_preset,
                        (*cfg.data, *cfg.encoder, *cfg.pretraining, *row.overrides))


def finetuning_config(cfg: ReproductionConfig, row: ReproductionRow) -> FinetuneRunConfig:
    """``row``'s fine-tuning run's config: a row without pre-training adds ``scratch_finetune``."""
    scratch = () if row.pretraining else cfg.scratch_finetune
    return build_config(FinetuneRunConfig, cfg.finetune_preset, (*cfg.data, *cfg.encoder, *cfg.finetune, *scratch))


def encoder_of(run: TrainingRun) -> Encoder:
    vit = encoder_structure(run.model)
    return Encoder(vit.embed_dim, len(vit.blocks), vit.patch_embed.img_size[0], vit.patch_embed.patch_size[0],
                   run.train.mixed_precision, run.train.compile)


def training(stage: str, row: ReproductionRow, step: Step, count: int, run: TrainingRun) -> Training:
    if run.train.steps is None:
        raise ConfigError(f"row {row.name}'s {stage} gives train.epochs={run.train.epochs}: the cost counts optimizer "
                          "steps, so give its length as train.steps")
    return Training(stage, step, count, run.train.steps, run.train.global_batch_size, encoder_of(run))


def fine_tunings(cfg: ReproductionConfig, run: FinetuneRunConfig) -> int:
    """A row's fine-tuning trainings over the seeds: one per seed, and one per rate of each sweep (the first seed's
    alone with tune_once)."""
    sweeping = 1 if cfg.tune_once else len(cfg.seeds)
    return len(cfg.seeds) + len(run.finetune.sweep_lrs) * sweeping


def plan_trainings(cfg: ReproductionConfig) -> list[Training]:
    """Every training the reproduction's plan runs, by row and stage."""
    trainings = []
    for row in cfg.rows:
        if row.pretraining:
            stage = STAGES[0] if row.pretraining == "mpp" else STAGES[1]
            trainings.append(training(stage, row, row.pretraining, len(cfg.seeds), pretraining_config(cfg, row)))
        run = finetuning_config(cfg, row)
        trainings.append(training(STAGES[2] if row.pretraining else STAGES[3], row, "supervised",
                                  fine_tunings(cfg, run), run))
    return trainings


def plan_cost(cfg: ReproductionConfig) -> list[StageCost]:
    """The images each stage of the plan processes, and their time on one H100 where every training of the stage
    has a measured step (None otherwise), in the order of ``STAGES``."""
    return stage_costs(plan_trainings(cfg))


def stage_costs(trainings: list[Training]) -> list[StageCost]:
    by_stage: dict[str, list[Training]] = {stage: [] for stage in STAGES}
    for each in trainings:
        by_stage.setdefault(each.stage, []).append(each)
    costs = []
    for stage, of_stage in by_stage.items():
        if not of_stage:
            continue
        seconds = [each.h100_seconds() for each in of_stage]
        costs.append(StageCost(stage, sum(each.count for each in of_stage),
                               tuple(dict.fromkeys(f"{each.steps:,} x {each.batch}" for each in of_stage)),
                               sum(each.images for each in of_stage), None if None in seconds else sum(seconds)))
    return costs


def total_seconds(costs: list[StageCost]) -> Optional[float]:
    seconds = [cost.h100_seconds for cost in costs]
    return None if None in seconds else sum(seconds)


def h100_time(seconds: Optional[float]) -> str:
    return NO_MEASURED_STEP if seconds is None else f"{seconds / 3600:.1f} h"


def encoders(trainings: list[Training]) -> list[str]:
    return list(dict.fromkeys(str(each.encoder) for each in trainings))


def cost_record(cfg: ReproductionConfig) -> dict[str, Any]:
    """The plan's cost as JSON: each stage's, the total, and the encoders whose measured steps the times read."""
    trainings = plan_trainings(cfg)
    costs = stage_costs(trainings)
    return {"seeds": len(cfg.seeds), "stages": [asdict(cost) for cost in costs],
            "images": sum(cost.images for cost in costs), "h100_seconds": total_seconds(costs),
            "h100_time": h100_time(total_seconds(costs)), "encoders": encoders(trainings)}


def cost_table(cfg: ReproductionConfig) -> str:
    """The plan's cost as the command prints it: a table of the stages, then what the times rest on."""
    trainings = plan_trainings(cfg)
    costs = stage_costs(trainings)
    lines = ["| stage | trainings | steps x batch, each | images | one H100, estimated |", "|---|---:|---|---:|---:|"]
    lines += [f"| {cost.stage} | {cost.trainings:,} | {', '.join(cost.shapes)} | {cost.images:,} | "
              f"{h100_time(cost.h100_seconds)} |" for cost in costs]
    lines.append(f"| all | {sum(cost.trainings for cost in costs):,} | | {sum(cost.images for cost in costs):,} | "
                 f"{h100_time(total_seconds(costs))} |")
    measured = "; ".join(str(step.encoder) for step in H200_MEASURED_STEPS)
    sources = "; ".join(dict.fromkeys(step.measured for step in H200_MEASURED_STEPS))
    return "\n".join([
        f"{len(cfg.seeds)} seed{'s' * (len(cfg.seeds) > 1)}; a training is its optimizer steps x its batch; each "
        "sweep's trainings counted.", "",
        *lines, "",
        f"The plan's encoder: {'; '.join(encoders(trainings))}. Steps measured (H200_MEASURED_STEPS, an H100 taken "
        f"as {H100_PER_H200:.3f} of an H200): {measured} ({sources})."])


def main(argv: Optional[list[str]] = None) -> None:
    parser = argparse.ArgumentParser(description="A reproduction's plan: the images each stage trains on, and their "
                                     "time on one H100 where a measured step applies")
    parser.add_argument("--config", type=Path, required=True, help="a reproduce_*.yaml preset")
    parser.add_argument("--json", type=Path, help="also write the cost here, as JSON")
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="as python -m study.reproduce takes them")
    args = parser.parse_args(argv)
    try:
        cfg = build_config(ReproductionConfig, args.config, args.overrides)
        print(f"Plan cost of {args.config}\n\n{cost_table(cfg)}")
        if args.json:
            args.json.write_text(json.dumps(cost_record(cfg), indent=2) + "\n")
    except ConfigError as error:
        sys.exit(f"error: {error}")


if __name__ == "__main__":
    main()
