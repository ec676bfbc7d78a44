"""The pre-training curve's tables and plot, written from its results.json (``python -m study.curve``): the frozen
readings' gains over initialisation, and where the curve fine-tunes, MPP against scratch at each length, what
fine-tuning kept of MPP's encoder and the longer fine-tuning."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mpp.evaluation.statistics import describe_difference, paired_difference
from mpp.experiments.publishing import Comparison, holm_summary, mean_std, percent
from study.curve_config import LONGER
from study.reproduction_tables import GRID_EDGE, learning_rates

def chosen_rates(start: dict[str, Any]) -> str:
    """The rates chosen, a grid edge marked (``learning_rates``); from a results.json without the grid, plain."""
    return learning_rates(start["lr"], start.get("lr_grid", []))


def finetuned_table(results: dict[str, Any]) -> str:
    """Markdown: at each pre-training length, MPP's accuracy against its floor, fine-tuned balanced accuracy from
    MPP and from scratch trained as long, each one's training accuracy over its last log window and how much it rose
    over the last fifth of the steps (mean ± SD, in %), and MPP's gain with its 95% interval; then what fine-tuning
    kept of MPP's encoder (``kept_table``) and the longer fine-tuning (``longer_table``)."""
    curve = results["finetuned"]
    compared = finetuned_comparisons(results)
    floor = 100 * sum(results["mpp_majority_class_accuracy"]) / len(results["mpp_majority_class_accuracy"])
    lines = [f"| MPP pre-training ({len(results['seeds'])} seeds) | MPP accuracy (most frequent colour: {floor:.1f}) "
             "| Fine-tuned from MPP, balanced | From scratch, as many steps, balanced | Final training accuracy, "
             "fine-tuning MPP | Final training accuracy, scratch | Its rise over the last fifth, points, MPP; scratch "
             f"| {GAIN} | Rates chosen, from MPP; from scratch |",
             "|---|---:|---:|---:|---:|---:|---:|---|---|"]
    for epochs, entry in curve.items():
        mpp = [value for value in entry["mpp_accuracy"] if value is not None]
        trained = {start: percent(entry[start]["train_accuracy"]) for start in ("finetune", "scratch")}
        lines.append(f"| {length_row(epochs, entry)} | "
                     f"{percent(mpp) if mpp else '—'} | {percent(entry['finetune']['balanced_accuracy'])} | "
                     f"{percent(entry['scratch']['balanced_accuracy'])} | "
                     f"{trained['finetune']} | {trained['scratch']} | "
                     f"{last_fifths_rise(entry['finetune'])}; {last_fifths_rise(entry['scratch'])} | "
                     f"{describe_difference(compared[length_row(epochs, entry), GAIN].difference, claimed=True)} | "
                     f"{chosen_rates(entry['finetune'])}; {chosen_rates(entry['scratch'])} |")
    edges = GRID_EDGE in "\n".join(lines)
    legend = (f"\n{GRID_EDGE}: the lowest or the highest rate of the grid its length swept, where a wider grid might "
              "choose beyond it; running the experiment again widens that grid by a factor of 3 on that side and "
              "sweeps it again.\n") if edges else ""
    holm = "\n".join(["", *holm_summary(list(compared.values()), kind="fine-tuned")])
    return "\n".join(lines) + "\n" + legend + kept_table(results) + longer_table(results, compared) + holm


GAIN = "MPP's fine-tuned gain, points"  # the fine-tuned table's column of MPP's gain over scratch
OVER_SCRATCH = "Gain over scratch, points"  # the longer fine-tuning's table's column of its gain over scratch


def over_short(steps: int) -> str:
    """The longer fine-tuning's table's column of its gain over the short fine-tuning of ``steps`` steps."""
    return f"Gain over the fine-tuning of {steps:,} steps, points"


def length_row(epochs: str, entry: dict[str, Any]) -> str:
    """The fine-tuned table's row of a length: its epochs and steps."""
    return f"{length_label(epochs)} ({entry['pretraining_steps']:,} steps)"


def finetuned_comparisons(results: dict[str, Any]) -> dict[tuple[str, str], Comparison]:
    """Every paired difference of balanced accuracy the fine-tuned tables read, keyed by its table row and column:
    MPP's gain over scratch at each length, and where it ran the longer fine-tuning's over scratch and over the short
    fine-tuning. One family: the tables' Holm line corrects them together, apart from the frozen readings."""
    compared = {}

    def compare(row: str, column: str, better: dict[str, Any], worse: dict[str, Any]) -> None:
        difference = paired_difference(better["balanced_accuracy"], worse["balanced_accuracy"], scale=100)
        compared[row, column] = Comparison(row, column, "balanced accuracy", difference)

    for epochs, entry in results["finetuned"].items():
        compare(length_row(epochs, entry), GAIN, entry["finetune"], entry["scratch"])
    epochs, entry = next(reversed(results["finetuned"].items()))
    if LONGER in entry:
        compare(length_label(epochs), OVER_SCRATCH, entry[LONGER], entry["scratch"])
        compare(length_label(epochs), over_short(entry["finetune"]["steps"][0]), entry[LONGER], entry["finetune"])
    return compared


def last_fifths_rise(start: dict[str, Any]) -> str:
    """Mean ± SD over the seeds of how many points the training accuracy rose over the last fifth of the steps (near
    0: a plateau); "—" where a seed logged no step there, or for a results.json written before it was read."""
    before = start.get("train_accuracy_last_fifth")
    if not before or None in before:
        return "—"
    mean, std = mean_std([100 * (final - then) for final, then in zip(start["train_accuracy"], before, strict=True)])
    return f"{mean:+.1f} ± {std:.1f}"


def mean_sd(values: list[float], spec: str) -> str:
    mean, std = mean_std(values)
    return f"{mean:{spec}} ± {std:{spec}}"


def kept_table(results: dict[str, Any]) -> str:
    """Markdown, after a blank line: at each length, what fine-tuning kept of MPP's encoder (mean ± SD over the seeds):
    the linear CKA of the first and the last block's features with MPP's own, the last block's with the ViT from
    scratch, and the relative weight change in %. Where fine-tuned MPP is not ahead of scratch, these say whether
    fine-tuning kept MPP's features (CKA near 1, a small change) or replaced them (the last block near scratch's). Empty
    for a results.json written before they were measured (running the experiment's command again adds them)."""
    curve = results["finetuned"]
    if "kept_similarity" not in next(iter(curve.values())):
        return ""
    lines = ["", f"What fine-tuning keeps of MPP's encoder: linear CKA (1: the same features up to a rotation and "
             f"scale; near 0: unrelated) of each block's mean patch token on {results['similarity_images']} test "
             "images, and the weights' relative change ||θ fine-tuned - θ MPP|| / ||θ MPP|| in %:", "",
             f"| MPP pre-training ({len(results['seeds'])} seeds) | Kept CKA, first block | Kept CKA, last block "
             "| Last block's CKA to scratch | Weight change, % |", "|---|---:|---:|---:|---:|"]
    for epochs, entry in curve.items():
        kept, to_scratch = entry["kept_similarity"], entry["similarity_to_scratch"]
        lines.append(f"| {length_label(epochs)} | {mean_sd([blocks[0] for blocks in kept], '.3f')} | "
                     f"{mean_sd([blocks[-1] for blocks in kept], '.3f')} | "
                     f"{mean_sd([blocks[-1] for blocks in to_scratch], '.3f')} | "
                     f"{mean_sd([100 * change for change in entry['weight_change']], '.1f')} |")
    return "\n".join(lines) + "\n"


def longer_table(results: dict[str, Any], compared: dict[tuple[str, str], Comparison]) -> str:
    """Markdown, after a blank line, where the longest length was also fine-tuned longer (``LONGER``): its fine-tuned
    balanced accuracy, final training accuracy and its rise over the last fifth, its gain over scratch (in top-1 too)
    and over the short fine-tuning with their 95% intervals, what it kept of MPP's encoder (the last block's CKA, the
    weight change) and its rates (``compared``: ``finetuned_comparisons``). Empty otherwise."""
    epochs, entry = next(reversed(results["finetuned"].items()))
    if LONGER not in entry:
        return ""
    longer, short, scratch = entry[LONGER], entry["finetune"], entry["scratch"]
    steps, short_steps, scratch_steps = longer["steps"][0], short["steps"][0], scratch["steps"][0]
    row = length_label(epochs)
    over = {"scratch": describe_difference(compared[row, OVER_SCRATCH].difference, claimed=True),
            "short": describe_difference(compared[row, over_short(short_steps)].difference),
            # The paper's metric, beside: the same comparison read again, not another one for Holm to count.
            "top-1": describe_difference(paired_difference(longer["accuracy"], scratch["accuracy"], scale=100),
                                         claimed=True)}
    lines = ["", f"MPP's encoder after {length_label(epochs)} fine-tuned {steps:,} steps instead of {short_steps:,}, "
             f"by the same recipe: {entry['pretraining_steps'] + steps:,} steps in all against the {scratch_steps:,} "
             "of the ViT from scratch above, a bias in MPP's favour:", "",
             f"| MPP pre-training ({len(results['seeds'])} seeds) | Fine-tuning steps | Fine-tuned from MPP, balanced "
             f"| Final training accuracy | Its rise over the last fifth, points | {OVER_SCRATCH} | "
             f"{OVER_SCRATCH}, top-1 | {over_short(short_steps)} | Kept CKA, last block | Weight change, % | "
             "Rates chosen |",
             "|---|---:|---:|---:|---:|---|---|---|---:|---:|---|",
             f"| {row} | {steps:,} | {percent(longer['balanced_accuracy'])} | "
             f"{percent(longer['train_accuracy'])} | {last_fifths_rise(longer)} | {over['scratch']} | "
             f"{over['top-1']} | {over['short']} | "
             f"{mean_sd([blocks[-1] for blocks in longer['kept_similarity']], '.3f')} | "
             f"{mean_sd([100 * change for change in longer['weight_change']], '.1f')} | {chosen_rates(longer)} |"]
    return "\n".join(lines) + "\n"


MEASURES = {"linear_probe": "linear probe, all labels", "linear_probe_balanced": "its balanced accuracy"}


def measure_label(measure: str) -> str:
    return MEASURES.get(measure, measure)


def length_label(epochs: str) -> str:
    return "none (initialisation)" if epochs == "0" else f"{epochs} epoch{'' if epochs == '1' else 's'}"


def curve_table(results: dict[str, Any]) -> str:
    """Markdown: every length's figures (mean ± standard deviation over the seeds, in %), the raw pixels', and the
    gain of each length over initialisation with its 95% interval."""
    curve, pixels = results["curve"], results["pixels"]
    measures = list(next(iter(curve.values())))
    header = "| " + " | ".join(measure_label(measure) for measure in measures) + " |"
    lines = [f"| MPP pre-training ({len(results['seeds'])} seeds, {results['features']} features) {header}",
             "|---|" + "---:|" * len(measures)]
    for epochs, figures in curve.items():
        lines.append(f"| {length_label(epochs)} | " + " | ".join(percent(figures[measure]) for measure in measures)
                     + " |")
    lines.append("| raw pixels, no encoder | " + " | ".join(f"{100 * pixels[measure]:.1f}" for measure in measures)
                 + " |")
    comparisons = []
    longest = list(curve)[-1]
    # The gain of each length over initialisation, then whether the longest still adds to each shorter length.
    for title, pairs in (("Gain over initialisation, points", [(epochs, "0") for epochs in list(curve)[1:]]),
                         (f"Gain of {length_label(longest)} over a shorter pre-training, points",
                          [(longest, epochs) for epochs in list(curve)[1:-1]])):
        if not pairs:
            continue
        lines += ["", f"| {title} {header}", "|---|" + "---|" * len(measures)]
        for longer, shorter in pairs:
            finding = f"{length_label(longer)} over {'initialisation' if shorter == '0' else length_label(shorter)}"
            row = [Comparison(finding, measure_label(measure), "",
                              paired_difference(curve[longer][measure], curve[shorter][measure], scale=100))
                   for measure in measures]
            label = length_label(longer) if shorter == "0" else f"against {length_label(shorter)}"
            lines.append(f"| {label} | " + " | ".join(describe_difference(cell.difference, claimed=True)
                                                      for cell in row) + " |")
            comparisons += row
    # A measure that equals another everywhere (balanced accuracy on balanced classes) is one comparison, not two.
    counted = [cell for cell in comparisons if cell.column in map(measure_label, plotted_measures(results))]
    return "\n".join(lines + [""] + holm_summary(counted)[:-1]) + "\n"


def plotted_measures(results: dict[str, Any]) -> dict[str, str]:
    """The measures the plot draws, with their legend labels: balanced accuracy and plain accuracy as one line where
    they are the same to 0.05 points everywhere (balanced classes), the pixels' included, so no line hides another."""
    curve = results["curve"]
    measures = {measure: measure_label(measure) for measure in next(iter(curve.values()))}
    if {"linear_probe", "linear_probe_balanced"} <= set(measures):
        pairs = [(figures["linear_probe"], figures["linear_probe_balanced"]) for figures in curve.values()]
        pairs.append(([results["pixels"]["linear_probe"]], [results["pixels"]["linear_probe_balanced"]]))
        if all(abs(a - b) < 5e-4 for plain, balanced in pairs for a, b in zip(plain, balanced, strict=True)):
            del measures["linear_probe_balanced"]
            measures["linear_probe"] = "linear probe, all labels (= its balanced accuracy)"
    return measures


def curve_figure(results: dict[str, Any]) -> Any:
    """Accuracy against pre-training length (each seed a dot, the mean a line), the raw pixels' as dashed lines;
    chance dotted, and where the test split's classes are unbalanced also always answering the largest class, the
    floor of every plain accuracy (balanced accuracy's is chance); the accuracy axis starts at 0."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curve = results["curve"]
    lengths_read = list(curve)
    figure, axes = plt.subplots(figsize=(7, 4.4), layout="constrained")
    for index, (measure, label) in enumerate(plotted_measures(results).items()):
        colour = f"C{index}"
        means = [100 * sum(curve[epochs][measure]) / len(curve[epochs][measure]) for epochs in lengths_read]
        axes.plot(range(len(lengths_read)), means, marker="o", color=colour, label=label)
        for position, epochs in enumerate(lengths_read):
            axes.plot([position] * len(curve[epochs][measure]), [100 * value for value in curve[epochs][measure]],
                      ".", color=colour, markersize=4)
        axes.axhline(100 * results["pixels"][measure], color=colour, linestyle="--", linewidth=0.8)
    chance, largest = 100 / results["classes"], 100 * results["majority_class_accuracy"]
    if largest > chance + 0.5:  # unbalanced: the plain accuracies read against the largest class
        axes.axhline(largest, color="0.4", linestyle="-.", linewidth=0.8,
                     label=f"always the largest class ({largest:.1f}%, plain accuracy's floor)")
        axes.axhline(chance, color="k", linestyle=":", linewidth=0.8, label="chance (balanced accuracy's floor)")
    else:
        axes.axhline(chance, color="k", linestyle=":", linewidth=0.8, label="chance")
    axes.plot([], [], "k--", linewidth=0.8, label="raw pixels (each measure's colour)")
    axes.set_xticks(range(len(lengths_read)), lengths_read)
    axes.set_xlabel("MPP pre-training, epochs (0: the encoder at initialisation)")
    axes.set_ylabel("test accuracy (%)")
    axes.set_ylim(0, 100)
    figure.legend(fontsize="small", loc="outside lower center", ncols=2)  # beside the lines, never over them
    return figure


def plot_curve(results: dict[str, Any], path: Path) -> Path:
    import matplotlib.pyplot as plt

    figure = curve_figure(results)
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path
