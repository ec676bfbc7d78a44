"""The reproduction's tables, from its results.json: every row's accuracies and balanced accuracies, both readouts,
the frozen fits, each claim and what MPP's encoder should beat as paired differences read like with like, a Holm
correction across them, and the references on the same images."""

from __future__ import annotations

import statistics
from typing import Any, Optional

from mpp.evaluation.statistics import paired_difference
from mpp.experiments.publishing import Comparison, comparison_table, holm_summary, markdown_table, percent


BASELINES = {"linear_probe": "logistic regression on raw pixels", "knn": "kNN on raw pixels (cosine)"}


def rows_at_chance(results: dict[str, Any], margin: float) -> list[str]:
    """The rows whose mean fine-tuned test accuracy, balanced where recorded (always answering one class then scores
    chance, however large the class), lies within ``margin`` of chance (1 / classes); none for a margin of 0."""
    chance, key = 1 / results["classes"], headline(results)
    return [f"{row['label']} ({100 * statistics.fmean(row[key]):.1f}%, chance {100 * chance:.1f}%)"
            for row in results["rows"].values()
            if margin > 0 and abs(statistics.fmean(row[key]) - chance) <= margin]


def headline(results: dict[str, Any]) -> str:
    """The fine-tuned figure the claims and the chance check read: balanced accuracy where the results hold it."""
    row = next(iter(results["rows"].values()))
    return "finetune_balanced_accuracy" if "finetune_balanced_accuracy" in row else "finetune_accuracy"


READOUTS = {"token": "[class] token", "avg": "mean patch token"}  # eval.features: what a frozen encoder is read by


def learning_rates(rates: list[float]) -> str:
    """Each chosen learning rate and how many seeds chose it: "0.1 x4, 0.3 x1"."""
    return ", ".join(f"{rate:g} x{rates.count(rate)}" for rate in sorted(set(rates)))


def accuracy_table(results: dict[str, Any], balanced: bool) -> list[str]:
    """Every row's fine-tuned and few-shot accuracy (``balanced``: balanced accuracy), with the chosen learning rates
    where recorded, then the raw pixels and always answering the largest class."""
    rows, shots, suffix = results["rows"], few_shot_shots(results), "_balanced" if balanced else ""
    rates = not balanced and "finetune_lr" in next(iter(rows.values()))
    header = [f"Starting point: {'balanced accuracy' if balanced else 'accuracy'}",
              f"Fine-tuned, {labels_used(results)}",
              *(["learning rate (seeds)"] if rates else []), *(f"{k}-shot" for k in shots)]
    body = [[row["label"], percent(row[f"finetune{suffix}_accuracy"]),
             *([learning_rates(row["finetune_lr"])] if rates else []),
             *(percent(row[f"few_shot{suffix}_accuracy"][k]) for k in shots)] for row in rows.values()]
    pixels = results["pixels"][f"few_shot{suffix}_accuracy"]
    body.append(["raw pixels, no encoder", "—", *(["—"] if rates else []), *(percent(pixels[k]) for k in shots)])
    # Always answering the largest class: its share of the test images, and chance in balanced accuracy.
    floor = f"{100 / results['classes'] if balanced else 100 * results['majority_class_accuracy']:.1f}"
    body.append([f"always the largest class (chance: {100 / results['classes']:.1f})", floor,
                 *(["—"] if rates else []), *(floor for _ in shots)])
    return markdown_table(header, body)


def readout_table(results: dict[str, Any]) -> list[str]:
    """Every row's few-shot accuracy through both readouts of its frozen encoder."""
    shots = few_shot_shots(results)
    header = ["Few-shot accuracy by readout", *(f"{k}-shot, {READOUTS[readout]}" for k in shots
                                                for readout in READOUTS)]
    return markdown_table(header, [[row["label"], *(percent(row["few_shot_by_readout"][readout][k]) for k in shots
                                                    for readout in READOUTS)] for row in results["rows"].values()])


FROZEN_FITS = {"linear_probe": "logistic regression", "knn": "kNN"}


def frozen_table(results: dict[str, Any]) -> list[str]:
    """Every row's frozen encoder through both readouts, logistic regression and kNN fitted to the labelled images,
    in balanced accuracy; then the same fits on the raw pixels, and chance."""
    pixels = results["pixels"]
    header = [f"Frozen, {labels_used(results)}: balanced accuracy",
              *(f"{FROZEN_FITS[script]}, {READOUTS[readout]}" for script in BASELINES for readout in READOUTS)]
    body = [[row["label"], *(percent(row["frozen_labelled"][script][readout]["balanced_accuracy"])
                             for script in BASELINES for readout in READOUTS)] for row in results["rows"].values()]
    body.append(["raw pixels, no encoder", *(percent(pixels[f"{script}_labelled_balanced"]) for script in BASELINES
                                             for _ in READOUTS)])
    body.append(["chance", *(f"{100 / results['classes']:.1f}" for _ in BASELINES for _ in READOUTS)])
    return markdown_table(header, body)


Readings = dict[str, dict[str, list[float]]]  # {column: {measure: one value per seed}}

BALANCED, PLAIN = "balanced accuracy", "accuracy"


def measures_read(results: dict[str, Any]) -> list[str]:
    """The measures a comparison reads, in order of preference: balanced accuracy first where the results record it
    (always answering one class cannot lift it above chance)."""
    return [BALANCED, PLAIN] if headline(results) == "finetune_balanced_accuracy" else [PLAIN]


def both_measures(plain: Optional[list[float]], balanced: Optional[list[float]]) -> dict[str, list[float]]:
    return {measure: values for measure, values in ((PLAIN, plain), (BALANCED, balanced)) if values is not None}


def few_shot_readings(results: dict[str, Any], row: dict[str, Any]) -> Readings:
    """``row``'s few-shot figures per column: one per number of shots and readout where the results hold both
    readouts, so that two rows compare like with like. Balanced accuracy where recorded: for every readout, or (in
    results written before that) for the readout ``eval.features=auto`` chose, MPP's mean patch token and any other
    encoder's [class] token."""
    shots = few_shot_shots(results)
    if "few_shot_by_readout" not in row:
        balanced = row.get("few_shot_balanced_accuracy", {})
        return {f"{k}-shot": both_measures(row["few_shot_accuracy"][k], balanced.get(k)) for k in shots}
    auto = "avg" if row["pretraining"] == "mpp" else "token"
    balanced = row.get("few_shot_balanced_by_readout") or (
        {auto: row["few_shot_balanced_accuracy"]} if "few_shot_balanced_accuracy" in row else {})
    return {f"{k}-shot, {READOUTS[readout]}": both_measures(row["few_shot_by_readout"][readout][k],
                                                           balanced.get(readout, {}).get(k))
            for k in shots for readout in READOUTS}


def frozen_column(script: str, readout: str) -> str:
    return f"{FROZEN_FITS[script]}, {READOUTS[readout]}"


def frozen_readings(row: dict[str, Any]) -> Readings:
    """``row``'s frozen fits to the labelled images, per fit and readout."""
    return {frozen_column(script, readout): both_measures(row["frozen_labelled"][script][readout]["accuracy"],
                                                          row["frozen_labelled"][script][readout]["balanced_accuracy"])
            for script in BASELINES for readout in READOUTS}


def finetuned_readings(row: dict[str, Any]) -> Readings:
    return {"Fine-tuned": both_measures(row["finetune_accuracy"], row.get("finetune_balanced_accuracy"))}


def pixel_readings(results: dict[str, Any], row: dict[str, Any]) -> Readings:
    """The raw pixels' figures in the columns ``row`` is read in: fine-tuned, logistic regression on the same labelled
    images; each frozen fit's, under both readouts; few-shot, under each readout the row has (the pixels have none:
    the same figures under each). Only figures that vary with the seed as the rows' do (a fit to all the labels is
    made once)."""
    pixels, seeds = results["pixels"], len(results["seeds"])

    def fit(script: str) -> dict[str, list[float]]:
        return both_measures(pixels.get(f"{script}_labelled"), pixels.get(f"{script}_labelled_balanced"))

    few_shot: dict[str, Any] = {"pretraining": None, "few_shot_accuracy": pixels["few_shot_accuracy"]}
    if "few_shot_balanced_accuracy" in pixels:
        few_shot["few_shot_balanced_accuracy"] = pixels["few_shot_balanced_accuracy"]
    if "few_shot_by_readout" in row:
        few_shot["few_shot_by_readout"] = dict.fromkeys(READOUTS, pixels["few_shot_accuracy"])
        if "few_shot_balanced_accuracy" in pixels:
            few_shot["few_shot_balanced_by_readout"] = dict.fromkeys(READOUTS, pixels["few_shot_balanced_accuracy"])
    readings = {"Fine-tuned": fit("linear_probe"),
                **{frozen_column(script, readout): fit(script) for script in BASELINES for readout in READOUTS},
                **few_shot_readings(results, few_shot)}
    return {column: {measure: values for measure, values in figures.items() if len(values) == seeds}
            for column, figures in readings.items()}


def compare(results: dict[str, Any], finding: str, better: Readings, worse: Readings) -> list[Comparison]:
    """``better`` - ``worse`` in every column both read, by the first of measures_read both sides record."""
    comparisons = []
    for column, figures in better.items():
        measure = next((m for m in measures_read(results) if m in figures and m in worse.get(column, {})), None)
        if measure:
            difference = paired_difference(figures[measure], worse[column][measure], scale=100)
            comparisons.append(Comparison(finding, column, measure, difference))
    return comparisons


def claim_comparisons(results: dict[str, Any]) -> list[Comparison]:
    """Each claim as the paired difference of its two rows, fine-tuned and few-shot through each readout (the same on
    both sides)."""
    rows = results["rows"]

    def readings(row: dict[str, Any]) -> Readings:
        return finetuned_readings(row) | few_shot_readings(results, row)

    return [comparison for claim in results["claims"]
            for comparison in compare(results, claim["claim"], readings(rows[claim["better"]]),
                                      readings(rows[claim["worse"]]))]


def encoder_comparisons(results: dict[str, Any]) -> list[Comparison]:
    """The first MPP row's frozen encoder against the encoder at initialisation (the from-scratch row, read frozen)
    and against the raw pixels, through every fit and readout, like with like; and its fine-tuned figure against
    logistic regression on the pixels of the same labelled images. None where the grid lacks either row or the
    results hold no frozen fits."""
    rows = list(results["rows"].values())
    mpp = next((row for row in rows if row["pretraining"] == "mpp"), None)
    initial = next((row for row in rows if row["pretraining"] is None), None)
    if mpp is None or initial is None or "frozen_labelled" not in mpp:
        return []
    ours = finetuned_readings(mpp) | frozen_readings(mpp) | few_shot_readings(results, mpp)
    at_init = frozen_readings(initial)  # few-shot against initialisation is the first claim's: not read twice
    return (compare(results, f"{mpp['label']} beats the encoder at initialisation", ours, at_init)
            + compare(results, f"{mpp['label']} beats the raw pixels", ours, pixel_readings(results, mpp)))


def claims_tables(results: dict[str, Any]) -> list[str]:
    """The claims, the first MPP encoder against initialisation and the pixels, and the Holm line over both."""
    preferred = measures_read(results)[0]
    fallback = f"; where a side lacks it, {PLAIN}, marked" if preferred == BALANCED else ""
    claims, encoder = claim_comparisons(results), encoder_comparisons(results)
    lines = comparison_table(f"The paper's claim ({preferred}{fallback})", claims, preferred)
    if encoder:
        lines += comparison_table(f"Against what it should beat ({preferred}{fallback})", encoder, preferred)
    return lines + holm_summary(claims + encoder)


def reference_table(results: dict[str, Any]) -> list[str]:
    """The references on the same training images: raw pixels, and the ViT trained with the labels alone."""
    rows, pixels = results["rows"], results["pixels"]
    # Fine-tuning on a few labels: a column for those and one for all of them; on all the labels, one column.
    columns = ["labelled", "all"] if results["labelled_per_class"] else ["all"]
    header = ["Reference on the same training images",
              *([f"{labels_used(results)} ({pixels['labelled_images']:,} images)"] if len(columns) == 2 else []),
              f"all {pixels['all_images']:,} labels"]
    body = [[label + (f", k={pixels['knn_k']}" if script == "knn" else ""),
             *(percent(pixels[f"{script}_{labels}"]) for labels in columns)] for script, label in BASELINES.items()]
    scratch = next(row for row in rows.values() if row["pretraining"] is None)
    steps = f" ({scratch['finetune_steps'][0]:,} steps)" if "finetune_steps" in scratch else ""
    supervised = results["supervised_test_accuracy"]
    if len(columns) == 2:  # the supervised row's pre-training, scored with its own head, trained on all the labels
        body.append([f"the ViT from scratch: fine-tuning recipe{steps}; supervised pre-training with its own head",
                     percent(scratch["finetune_accuracy"]), percent(supervised) if supervised else "—"])
    else:
        body.append([f"the ViT from scratch: fine-tuning recipe{steps}", percent(scratch["finetune_accuracy"])])
    return markdown_table(header, body)[:-1]


def labels_used(results: dict[str, Any]) -> str:
    """The labels fine-tuning used: "100 labels per class", or "all labels"."""
    per_class = results["labelled_per_class"]
    return f"{per_class} labels per class" if per_class else "all labels"


def few_shot_shots(results: dict[str, Any]) -> list[str]:
    return list(next(iter(results["rows"].values()))["few_shot_accuracy"])


def results_table(results: dict[str, Any]) -> str:
    """Markdown: every row's accuracies (mean ± standard deviation over the seeds, in %) and, where recorded, its
    balanced accuracies, chosen learning rates, both readouts and frozen fits; each claim; and the references on the
    same images: raw pixels, and the ViT trained from scratch with the labels alone."""
    recorded = next(iter(results["rows"].values()))
    lines = accuracy_table(results, balanced=False)
    lines += accuracy_table(results, balanced=True) if "finetune_balanced_accuracy" in recorded else []
    lines += readout_table(results) if "few_shot_by_readout" in recorded else []
    lines += frozen_table(results) if "frozen_labelled" in recorded else []
    return "\n".join(lines + claims_tables(results) + reference_table(results)) + "\n"
