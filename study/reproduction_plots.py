"""The reproduction's plots: fine-tuned accuracy per row against the references (finetune_accuracy.png), and the
few-shot monitor during pre-training (few_shot_during_pretraining.png)."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from mpp.experiments.publishing import mean_std
from study.reproduction_tables import BASELINES, headline


COLOURS = {None: "C7", "mpp": "C0", "supervised": "C1"}  # bars by kind of pre-training


def plot_results(results: dict[str, Any], output_dir: Path) -> list[Path]:
    """finetune_accuracy.png (every row, each seed a dot, in the claims' measure: balanced accuracy where recorded;
    the raw-pixel baselines on the same labelled images, chance and, in plain accuracy, the largest class as lines)
    and few_shot_during_pretraining.png (where monitored)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = list(results["rows"].values())
    measure, values, references = finetune_plot_figures(results)
    figure, axes = plt.subplots(figsize=(7, 3.6), layout="constrained")
    for y, row in enumerate(rows):
        mean, std = mean_std(values[y])
        axes.barh(y, mean, xerr=std, color=COLOURS[row["pretraining"]], alpha=0.6, capsize=3)
        axes.plot(values[y], [y] * len(values[y]), "k.", markersize=5)
    for (label, value), style in zip(references.items(), ("--", ":", "-."), strict=False):
        axes.axvline(value, color="k", linestyle=style, linewidth=1, label=label)
    axes.axvline(100 / results["classes"], color="0.6", linewidth=1, label="chance")
    figure.legend(fontsize="small", loc="outside lower center", ncols=2)
    axes.set_yticks(range(len(rows)), [row["label"] for row in rows])
    axes.invert_yaxis()
    axes.set_xlabel(f"test {measure} after fine-tuning (%), {len(results['seeds'])} seeds")
    axes.set_xlim(0, 100)  # from 0: differences read at their size
    paths = [output_dir / "finetune_accuracy.png"]
    figure.savefig(paths[0], dpi=120)
    plt.close(figure)

    curves, chance = monitor_plot_figures(results)
    if curves:
        figure, axes = plt.subplots(figsize=(7, 3.6), layout="constrained")
        for label, (images, means) in curves.items():
            axes.plot(images, means, marker=".", label=label)
        axes.axhline(chance, color="0.6", linewidth=1, label="chance")
        axes.set_xlabel("pre-training images seen")
        shots = next(row["few_shot_during_pretraining_shots"] for row in rows if row["few_shot_during_pretraining"])
        axes.set_ylabel(f"{shots}-shot accuracy (%), "
                        f"mean of {len(results['seeds'])} seeds")
        axes.set_ylim(0, None)  # from 0: differences read at their size
        # The monitor scores a slice of the training split, whose labels supervised pre-training has trained on.
        axes.set_title("during pre-training, on a fixed slice of the training split", fontsize="medium")
        axes.legend(fontsize="small")
        paths.append(output_dir / "few_shot_during_pretraining.png")
        figure.savefig(paths[-1], dpi=120)
        plt.close(figure)
    return paths


def monitor_plot_figures(results: dict[str, Any]) -> tuple[dict[str, tuple[list[int], list[float]]], float]:
    """What few_shot_during_pretraining.png draws: each monitored row's curve (images seen, accuracy in % averaged
    over the seeds, as far as every seed's curve reaches) and chance, the line to read them against. The monitor's
    slice holds the same number of images of every class, so always answering the largest class scores chance."""
    curves = {}
    for row in results["rows"].values():
        if row["few_shot_during_pretraining"]:
            seeds = list(row["few_shot_during_pretraining"].values())
            length = min(len(curve) for curve in seeds)
            curves[row["label"]] = ([point[0] for point in seeds[0][:length]],
                                    [100 * statistics.fmean(curve[i][1] for curve in seeds) for i in range(length)])
    return curves, 100 / results["classes"]


def finetune_plot_figures(results: dict[str, Any]) -> tuple[str, list[list[float]], dict[str, float]]:
    """What finetune_accuracy.png draws, in % and in the claims' measure (balanced accuracy where recorded): that
    measure's name, each row's value per seed, and the reference lines: the raw-pixel fits to the same labelled images
    and, in plain accuracy only, always answering the largest class (in balanced accuracy that scores chance, drawn
    anyway)."""
    key = headline(results)
    balanced = key == "finetune_balanced_accuracy"
    values = [[100 * value for value in row[key]] for row in results["rows"].values()]
    references = {BASELINES[script]: 100 * statistics.fmean(
        results["pixels"][f"{script}_labelled{'_balanced' if balanced else ''}"]) for script in BASELINES}
    if not balanced:
        references["always the largest class"] = 100 * results["majority_class_accuracy"]
    return ("balanced accuracy" if balanced else "accuracy"), values, references
