"""Frozen-feature quality as MPP pre-training grows: the first thing a reader asks of a self-supervised method.

    python -m study.curve [--config study/configs/curve_<preset>.yaml] [key=value ...]

Writes results.md, results.json and pretraining_curve.png to output_dir (and to publish_dir and results_page's
section, where set); running the command again continues a stopped curve.

Per seed, one MPP pre-training run of ``pretraining_epochs`` epochs keeps a checkpoint at every epoch; the encoder at
initialisation (the same seed's random encoder) and at each epoch of ``epochs`` are read frozen, by the linear probe
fitted to every training label and by few-shot ridge regression, through ``features`` (by default the mean of the
patch tokens, which MPP trains). The raw pixels are read the same way once, as the reference. The gain over
initialisation at each length is a paired difference over the seeds with its 95% interval.

With ``finetune_preset``, each length's encoder is also fine-tuned and met by a ViT from scratch trained as long; and
because a fine-tuned gain alone does not say why it is absent, what fine-tuning kept of MPP's encoder is measured too:
per block, the linear CKA of its features with MPP's own and with the scratch ViT's, and how far the weights moved.

The runs are subprocesses of the recipes (``mpp.experiments.runner``), continued by running the same command again,
with ``tables_only`` to rewrite the tables from results.json. Part of this package's own study (``study/``), beside
the library: it uses ``mpp`` and is never imported by it.
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path
from typing import Any, Optional

from timm.models.vision_transformer import VisionTransformer

from mpp.command_line import run_recipe
from mpp.config.building import build_config
from mpp.config.runs import FewShotRunConfig, FinetuneRunConfig, MPPRunConfig
from mpp.data.loading import build_dataset, check_batch_fits, sample_images, steps_per_epoch
from mpp.errors import ConfigError
from mpp.experiments.publishing import copy_to_publish_dir, publish_table
from mpp.experiments.runner import Run, at_first_seeds_rate, recipe_command, run_experiment
from mpp.models.encoder import InputNormalisation, encoder_structure
from mpp.models.pretrained import fine_tuning_encoder, read_pretrained
from mpp.private_apis import saved_model_file
from mpp.run import configure_logging, logged_scalars, read_metrics
from mpp.training.checkpoint import checkpoint_path
from study.class_balance import class_balance
from study.curve_config import LONGER, PretrainingCurveConfig
from study.curve_tables import curve_table, finetuned_table, plot_curve
from study.learning_rate_widening import finished_widenings, swept_grids, widened_run_name, widened_sweep
from study.representation_similarity import block_similarity, relative_weight_change
from study.results_page import check_section, write_section

logger = logging.getLogger("study.curve")  # not __main__ when run with -m
PIXELS = "pixels"
MODEL_FILE = saved_model_file(0)  # the model's weights in an accelerate checkpoint
SIMILARITY_IMAGES = 256  # test images every encoder's blocks are read on: one seeded sample for all of them
SIMILARITY_SEED = 0


def pretraining_steps_per_epoch(cfg: PretrainingCurveConfig) -> int:
    """Optimizer steps in one epoch of the pre-training images (``mpp.data.loading.steps_per_epoch``)."""
    run = build_config(MPPRunConfig, cfg.mpp_preset, (*cfg.data, *cfg.encoder, *cfg.mpp))
    image_size = encoder_structure(run.model).patch_embed.img_size[0]
    images = build_dataset(run.data, "train", image_size, run.model.in_chans, augment=False)
    check_batch_fits(images, run.train.global_batch_size, described="the pre-training data")
    epoch_steps = steps_per_epoch(len(images), run.train.global_batch_size)
    logger.info("%d steps per epoch; checkpoints read at epochs %s", epoch_steps, list(cfg.epochs))
    return epoch_steps


def lengths(cfg: PretrainingCurveConfig) -> list[int]:
    """The pre-training lengths read, in epochs: 0 (initialisation), then ``epochs``."""
    return [0, *cfg.epochs]


def plan_runs(cfg: PretrainingCurveConfig, epoch_steps: int) -> list[Run]:
    """The raw-pixel references (once), every seed's pre-training run, then per seed a linear probe and a few-shot run
    of the encoder at each length: the pre-training runs, the longest, start first and side by side. Every
    evaluation of one encoder shares a feature cache."""
    output_dir = Path(cfg.output_dir)
    cache = f"eval.feature_cache={output_dir / 'feature-cache'}"
    last = cfg.pretraining_epochs
    # Fine-tuned readings need MPP's own accuracy at each length: a log step at every epoch's end.
    logged = (f"train.log_every={epoch_steps}",) if cfg.finetune_preset else ()
    pretraining = (*cfg.data, *cfg.encoder, *cfg.mpp, *logged, f"train.steps={last * epoch_steps}",
                   f"train.checkpoint_every={epoch_steps}", f"train.keep_checkpoints={last + 1}",
                   "monitor.few_shot_every=0", "monitor.mosaic_every=0", "monitor.final_few_shot_draws=0")
    evaluations = {"linear_probe": ("probe", cfg.linear_probe), "few_shot": ("few_shot", cfg.few_shot)}

    def evaluation(script: str, name: str, seed: int, after: str | None, *extra: str) -> Run:
        stage, overrides = evaluations[script]
        folder = f"{stage}/{name}-seed{seed}"
        command = recipe_command(cfg, script, cfg.eval_preset, (*cfg.data, *cfg.encoder, *overrides,
                                 cache, *extra), seed, output_dir / folder)
        return Run(folder, stage, command, after)

    runs = [Run(f"pretrain/mpp-seed{seed}", "pretrain", recipe_command(cfg, "pretrain", cfg.mpp_preset,
                pretraining, seed, output_dir / f"pretrain/mpp-seed{seed}"), None) for seed in cfg.seeds]
    runs += [evaluation(script, PIXELS, cfg.seeds[0], None, "eval.features=pixels") for script in evaluations]
    for seed in cfg.seeds:
        source = f"pretrain/mpp-seed{seed}"
        for epochs in lengths(cfg):
            checkpoint = checkpoint_path(output_dir / source, epochs * epoch_steps)
            init = (f"init={checkpoint / MODEL_FILE}",) if epochs else ()
            for script in evaluations:
                runs.append(evaluation(script, f"epoch{epochs}", seed, source if epochs else None,
                                       f"eval.features={cfg.features}", *init))
    return runs[:len(cfg.seeds)] + finetuning_runs(cfg, epoch_steps) + runs[len(cfg.seeds):]


def finetuning_runs(cfg: PretrainingCurveConfig, epoch_steps: int) -> list[Run]:
    """Where ``finetune_preset`` is set: per seed and length, the encoder at that length's checkpoint fine-tuned,
    and a ViT from scratch trained by the same preset for as many steps as the pre-training to that length and the
    fine-tuning together. The runs from scratch need no pre-training: the longest start beside it. With
    ``longer_finetune_steps``, the longest length's encoder fine-tuned that many steps too (``LONGER``)."""
    if not cfg.finetune_preset:
        return []
    output_dir = Path(cfg.output_dir)

    def finetuning(start: str, epochs: int, seed: int, after: str | None, *extra: str) -> Run:
        # A rate chosen at its grid's edge sweeps a widened grid in runs of their own, as a reproduction's rows do.
        base = f"{start}/epoch{epochs}"
        grids = swept_grids(cfg, base, sweep_grid(cfg, start))
        tuned, waits = at_first_seeds_rate(cfg, widened_run_name(base, cfg.seeds[0], len(grids) - 1), seed)
        name = widened_run_name(base, seed, len(grids) - 1)
        command = recipe_command(cfg, "finetune", cfg.finetune_preset,
                                 (*cfg.data, *cfg.encoder, *cfg.finetune, f"data.subset_seed={seed}", *extra, *tuned,
                                  *widened_sweep(grids, tuned)), seed, output_dir / name)
        return Run(name, start, command, after, also_after=waits)

    def from_mpp(start: str, epochs: int, seed: int, *extra: str) -> Run:
        source = f"pretrain/mpp-seed{seed}"
        checkpoint = checkpoint_path(output_dir / source, epochs * epoch_steps)
        return finetuning(start, epochs, seed, source, f"init={checkpoint / MODEL_FILE}", *extra)

    scratch, finetuned = [], []
    for epochs in reversed(cfg.epochs):
        for seed in cfg.seeds:
            finetuned.append(from_mpp("finetune", epochs, seed))
            scratch.append(finetuning("scratch", epochs, seed, None, *cfg.scratch_finetune,
                                      f"train.steps={epochs * epoch_steps + cfg.finetune_steps}"))
    longer = [from_mpp(LONGER, cfg.epochs[-1], seed, f"train.steps={cfg.longer_finetune_steps}")
              for seed in cfg.seeds] if cfg.longer_finetune_steps else []
    for run in longer:  # the setting may change when a curve continues: never under runs that trained another length
        finished = read_metrics(output_dir / run.name)
        if finished is not None and finished["step"] != cfg.longer_finetune_steps:
            raise ConfigError(f"{output_dir / run.name} fine-tuned {finished['step']} steps, not "
                              f"longer_finetune_steps={cfg.longer_finetune_steps}: set it back to {finished['step']}, "
                              f"or delete {output_dir / LONGER} to fine-tune again")
    return scratch + finetuned + longer


def sweep_grid(cfg: PretrainingCurveConfig, start: str) -> tuple[float, ...]:
    """The learning rates the fine-tuning runs of ``start`` ("finetune" or "scratch") sweep before any widening."""
    scratch = cfg.scratch_finetune if start == "scratch" else ()
    return build_config(FinetuneRunConfig, cfg.finetune_preset,
                        (*cfg.data, *cfg.encoder, *cfg.finetune, *scratch)).finetune.sweep_lrs


def finished_run(cfg: PretrainingCurveConfig, start: str, epochs: int, seed: int) -> str:
    """The run holding ``seed``'s result for ``start`` at ``epochs``: that of the last widening of its grid the
    first seed finished (``finished_widenings``)."""
    base = f"{start}/epoch{epochs}"
    return widened_run_name(base, seed, finished_widenings(Path(cfg.output_dir), base, cfg.seeds[0]))


def encoder_similarities(cfg: PretrainingCurveConfig, epoch_steps: int) -> tuple[dict[str, dict[str, list]], int]:
    """What fine-tuning keeps of what MPP learned, per length, each a list over the seeds: per block, the linear CKA
    between MPP's encoder at that length and the encoder fine-tuned from it (``kept_similarity``) and between that
    fine-tuned encoder and the one trained from scratch as long (``similarity_to_scratch``); and fine-tuning's
    relative weight change from MPP's (``weight_change``); where it ran, under ``LONGER``, the longer fine-tuning's
    kept CKA and weight change. Every encoder is read on the CPU in this process, on one seeded sample of the test
    images (their number is returned too), normalised as the fine-tuning runs normalise them, with the architecture
    the fine-tuning preset builds."""
    output_dir = Path(cfg.output_dir)
    run = build_config(FinetuneRunConfig, cfg.finetune_preset, (*cfg.data, *cfg.encoder, *cfg.finetune))

    def encoder(weights: Path) -> VisionTransformer:
        """The encoder in a checkpoint's weights, loaded as fine-tuning loads its init."""
        return fine_tuning_encoder(run.model, read_pretrained(str(weights)))

    def final_weights(name: str) -> Path:
        """A finished training run's last checkpoint: it exports no encoder, and its last step is always kept."""
        return checkpoint_path(output_dir / name, read_metrics(output_dir / name)["step"]) / MODEL_FILE

    image_size = encoder_structure(run.model).patch_embed.img_size[0]
    test_set = build_dataset(run.data, "test", image_size, run.model.in_chans, augment=False)
    raw = next(sample_images(test_set, SIMILARITY_IMAGES, SIMILARITY_SEED, batch_size=SIMILARITY_IMAGES))
    # A checkpoint file records no normalisation, so fine-tuning and scratch both normalised with data.mean / .std.
    images = InputNormalisation(run.data.mean, run.data.std, run.model.in_chans)(raw)
    curve = {}
    for epochs in cfg.epochs:
        kept, to_scratch, change, longer = [], [], [], {"kept_similarity": [], "weight_change": []}
        for seed in cfg.seeds:
            mpp = encoder(checkpoint_path(output_dir / f"pretrain/mpp-seed{seed}", epochs * epoch_steps) / MODEL_FILE)
            tuned = encoder(final_weights(finished_run(cfg, "finetune", epochs, seed)))
            kept.append(block_similarity(mpp, tuned, images))
            scratch = encoder(final_weights(finished_run(cfg, "scratch", epochs, seed)))
            to_scratch.append(block_similarity(tuned, scratch, images))
            change.append(relative_weight_change(mpp.state_dict(), tuned.state_dict()))
            if longer_finetuned(cfg, epochs):
                tuned_longer = encoder(final_weights(finished_run(cfg, LONGER, epochs, seed)))
                longer["kept_similarity"].append(block_similarity(mpp, tuned_longer, images))
                longer["weight_change"].append(relative_weight_change(mpp.state_dict(), tuned_longer.state_dict()))
        curve[str(epochs)] = {"kept_similarity": kept, "similarity_to_scratch": to_scratch, "weight_change": change,
                              **({LONGER: longer} if longer_finetuned(cfg, epochs) else {})}
    return curve, len(images)


def longer_finetuned(cfg: PretrainingCurveConfig, epochs: int) -> bool:
    """Whether MPP's encoder after ``epochs`` was also fine-tuned ``longer_finetune_steps`` steps (the longest length
    alone)."""
    return bool(cfg.longer_finetune_steps) and epochs == cfg.epochs[-1]


def finetuned_results(cfg: PretrainingCurveConfig, epoch_steps: int) -> dict[str, Any]:
    """Per length (in epochs of the pre-training images, with its steps): each seed's fine-tuned test accuracy and
    balanced accuracy, from MPP's encoder and from scratch trained as long, their learning rates and final training
    accuracies; MPP's own accuracy at that length (its training log's, over the epoch that ended there) beside
    always predicting the most frequent colour; and what fine-tuning kept of MPP's encoder
    (``encoder_similarities``). The longest length holds the longer fine-tuning's under ``LONGER``, where it ran."""
    output_dir = Path(cfg.output_dir)
    pretraining = [output_dir / f"pretrain/mpp-seed{seed}" for seed in cfg.seeds]
    batch = [read_metrics(run)["global_batch_size"] for run in pretraining]
    logged = [logged_scalars(run, "train/mpp_accuracy") for run in pretraining]
    curve = {}
    for epochs in cfg.epochs:
        entry: dict[str, Any] = {"epochs": epochs, "pretraining_steps": epochs * epoch_steps,
                                 "mpp_accuracy": [points.get(epochs * epoch_steps * size)
                                                  for points, size in zip(logged, batch, strict=True)]}
        for start in ("finetune", "scratch", *((LONGER,) if longer_finetuned(cfg, epochs) else ())):
            folders = [output_dir / finished_run(cfg, start, epochs, seed) for seed in cfg.seeds]
            runs = [read_metrics(folder) for folder in folders]
            entry[start] = {"accuracy": [run["test_accuracy"] for run in runs],
                            "balanced_accuracy": [run["test_balanced_accuracy"] for run in runs],
                            "lr": [run["chosen_lr"] or run["lr"] for run in runs],
                            "lr_grid": swept_grid(runs),
                            "steps": [run["step"] for run in runs],
                            "train_accuracy": [run["train_accuracy"] for run in runs],
                            "train_accuracy_last_fifth": [last_fifths_training_accuracy(folder, run)
                                                          for folder, run in zip(folders, runs, strict=True)]}
        curve[str(epochs)] = entry
    similarities, images = encoder_similarities(cfg, epoch_steps)
    for epochs, entry in curve.items():
        measured = similarities[epochs]
        if LONGER in measured:  # what the longer fine-tuning kept, beside its accuracies
            entry[LONGER] |= measured.pop(LONGER)
        entry.update(measured)
    floor = [read_metrics(run)["mpp_majority_class_accuracy"] for run in pretraining]
    return {"finetuned": curve, "similarity_images": images, "mpp_majority_class_accuracy": floor}


def last_fifths_training_accuracy(folder: Path, metrics: dict[str, Any]) -> Optional[float]:
    """A finished training run's logged training accuracy at its first log step in the last fifth of its steps (the
    registration's plateau reading: against its final training accuracy, how much it still rose over its last
    fifth); None where no log step but the last falls there."""
    logged = logged_scalars(folder, "train/train_accuracy")  # {images seen: accuracy over the last log window}
    end = metrics["step"] * metrics["global_batch_size"]
    last_fifth = [images for images in logged if 0.8 * end <= images < end]
    return logged[min(last_fifth)] if last_fifth else None


def swept_grid(runs: list[dict[str, Any]]) -> list[float]:
    """The learning rates a length's sweep tried (the first seed's alone with ``tune_once``; none without a sweep)."""
    # A run that swept nothing records no sweep (or None, trained at another run's rate).
    swept = next((run["sweep_holdout_balanced_accuracy"] for run in runs if run.get("sweep_holdout_balanced_accuracy")),
                 {})
    return sorted(float(rate) for rate in swept)


def collect_results(cfg: PretrainingCurveConfig, epoch_steps: int) -> dict[str, Any]:
    """Per length: each seed's linear-probe accuracy and balanced accuracy and few-shot accuracy per number of
    shots; the raw pixels' once."""
    output_dir = Path(cfg.output_dir)

    def scores(name: str, seed: int) -> dict[str, Any]:
        probe = read_metrics(output_dir / f"probe/{name}-seed{seed}")["linear_probe"]
        few_shot = read_metrics(output_dir / f"few_shot/{name}-seed{seed}")["few_shot"]
        return {"linear_probe": probe["test_accuracy"], "linear_probe_balanced": probe["test_balanced_accuracy"],
                **{f"{k}-shot": result["mean"] for k, result in few_shot.items()}}

    curve = {}
    for epochs in lengths(cfg):
        per_seed = [scores(f"epoch{epochs}", seed) for seed in cfg.seeds]
        curve[str(epochs)] = {measure: [run[measure] for run in per_seed] for measure in per_seed[0]}
    return {"seeds": list(cfg.seeds), "features": cfg.features, "curve": curve, "pixels": scores(PIXELS, cfg.seeds[0]),
            **scored_class_balance(cfg), **(finetuned_results(cfg, epoch_steps) if cfg.finetune_preset else {})}


def scored_class_balance(cfg: PretrainingCurveConfig) -> dict[str, Any]:
    """Chance and the largest class's share of the test split the frozen protocols score."""
    return class_balance(FewShotRunConfig, cfg.eval_preset, (*cfg.data, *cfg.encoder))


def publish(cfg: PretrainingCurveConfig, results: dict[str, Any], folder: Path) -> dict[str, Any]:
    """results.md and the plot beside results.json in ``folder``, and into ``publish_dir`` and ``results_page``."""
    tables = curve_table(results) + (f"\nFine-tuned (exploratory):\n\n{finetuned_table(results)}"
                                     if "finetuned" in results else "")
    table = publish_table(cfg, folder, tables, results["runs"], results["wall_seconds"])
    write_section(cfg, table)
    plot = plot_curve(results, folder / "pretraining_curve.png")
    copy_to_publish_dir(cfg, folder, [plot])
    return {**results, "table": table, "plot": str(plot)}


def pretraining_curve(cfg: PretrainingCurveConfig) -> dict[str, Any]:
    """Every run not yet finished, then the table and the plot."""
    check_section(cfg)  # before anything runs
    # Builds the dataset: only when runs are planned.
    epoch_steps = functools.cache(lambda: pretraining_steps_per_epoch(cfg))
    return run_experiment(cfg, lambda: plan_runs(cfg, epoch_steps()),
                          lambda: collect_results(cfg, epoch_steps()) | {"steps_per_epoch": epoch_steps()},
                          lambda results, folder: publish(cfg, results, folder))


def main(cfg: PretrainingCurveConfig) -> None:
    configure_logging()
    pretraining_curve(cfg)


def cli() -> None:
    """The command line: ``python -m study.curve [--config FILE] [key=value ...]``."""
    run_recipe(main, PretrainingCurveConfig, Path(__file__).parent / "configs" / "curve_fashion_mnist_cpu.yaml",
               description=__doc__)


if __name__ == "__main__":
    cli()
