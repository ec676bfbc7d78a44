"""The reproduction's tables, from its results.json: every row's accuracies and balanced accuracies (a learning rate
chosen at its grid's edge marked), both readouts, the frozen fits; the primary family's comparisons this experiment
holds (``study.primary_family``), Holm-corrected over them alone; each claim and what MPP's encoder should
beat as exploratory paired differences read like with like, with a Holm correction across those; and the references
on the same images."""

from __future__ import annotations

import statistics
from typing import Any, Optional

from mpp.evaluation.statistics import PairedDifference, holm_adjusted, paired_difference
from mpp.experiments.publishing import (
    Comparison,
    comparison_table,
    holm_summary,
    markdown_table,
    measured_cell,
    percent,
)
from study.primary_family import CLAIMS, FAMILY_LEVEL, PROTOCOLS, PrimaryClaim, Protocol, family_size


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


GRID_EDGE = "(grid edge)"
GRID_EDGE_LEGEND = (f"{GRID_EDGE}: the lowest or the highest rate of its row's grid, where a wider grid might choose "
                    "beyond it; running the experiment again widens that row's grid by a factor of 3 on that side and "
                    "sweeps it again.")


def grid_edges(grid: list[float]) -> set[float]:
    """The lowest and the highest rate of a row's grid (``finetune_sweep_lrs``; none where it swept none)."""
    return {min(grid), max(grid)} if grid else set()


def learning_rates(rates: list[float], grid: list[float]) -> str:
    """Each chosen learning rate and how many seeds chose it, a rate at the edge of ``grid`` marked: "0.1 x4, 0.3
    (grid edge) x1"."""
    return ", ".join(f"{rate:g}{f' {GRID_EDGE}' if rate in grid_edges(grid) else ''} x{rates.count(rate)}"
                     for rate in sorted(set(rates)))


def accuracy_table(results: dict[str, Any], balanced: bool) -> list[str]:
    """Every row's fine-tuned and few-shot accuracy (``balanced``: balanced accuracy), with the chosen learning rates
    where recorded (and a legend where one is at its grid's edge), then the raw pixels and always answering the
    largest class."""
    rows, shots, suffix = results["rows"], few_shot_shots(results), "_balanced" if balanced else ""
    rates = not balanced and "finetune_lr" in next(iter(rows.values()))
    header = [f"Starting point: {'balanced accuracy' if balanced else 'accuracy'}",
              f"Fine-tuned, {labels_used(results)}",
              *(["learning rate (seeds)"] if rates else []), *(f"{k}-shot" for k in shots)]
    body = [[row["label"], percent(row[f"finetune{suffix}_accuracy"]),
             *([learning_rates(row["finetune_lr"], row["finetune_sweep_lrs"])] if rates else []),
             *(percent(row[f"few_shot{suffix}_accuracy"][k]) for k in shots)] for row in rows.values()]
    pixels = results["pixels"][f"few_shot{suffix}_accuracy"]
    body.append(["raw pixels, no encoder", "—", *(["—"] if rates else []), *(percent(pixels[k]) for k in shots)])
    # Always answering the largest class: its share of the test images, and chance in balanced accuracy.
    floor = f"{100 / results['classes'] if balanced else 100 * results['majority_class_accuracy']:.1f}"
    body.append([f"always the largest class (chance: {100 / results['classes']:.1f})", floor,
                 *(["—"] if rates else []), *(floor for _ in shots)])
    edge = rates and any(set(row["finetune_lr"]) & grid_edges(row["finetune_sweep_lrs"]) for row in rows.values())
    return markdown_table(header, body) + ([GRID_EDGE_LEGEND, ""] if edge else [])


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


def protocol_of(experiment: str) -> Optional[Protocol]:
    """The primary family's protocol that ``experiment`` (its output_dir's last part) runs, if any."""
    return next((protocol for protocol in PROTOCOLS if protocol.experiment == experiment), None)


def primary_claims(results: dict[str, Any], experiment: str) -> list[PrimaryClaim]:
    """The primary family's claims this experiment holds: where it runs one of the family's protocols, those whose
    (better, worse) rows are one of its own claims'; none elsewhere."""
    held = {(claim["better"], claim["worse"]) for claim in results["claims"]}
    return [claim for claim in CLAIMS if (claim.better, claim.worse) in held] if protocol_of(experiment) else []


def primary_comparisons(results: dict[str, Any], experiment: str) -> list[tuple[PrimaryClaim, Comparison,
                                                                                  Optional[float]]]:
    """Each primary claim this experiment holds, read by the family's endpoint (fine-tuned; balanced accuracy where
    recorded), with its p-value Holm-adjusted over those claims alone."""
    rows = results["rows"]
    read = [(claim, comparison) for claim in primary_claims(results, experiment)
            for comparison in compare(results, claim.claim, finetuned_readings(rows[claim.better]),
                                      finetuned_readings(rows[claim.worse]))]
    adjusted = holm_adjusted([comparison.difference.p_value for _, comparison in read])
    return [(claim, comparison, p) for (claim, comparison), p in zip(read, adjusted, strict=True)]


def primary_record(results: dict[str, Any], experiment: str) -> Optional[dict[str, Any]]:
    """What results.json records of the primary family: None where the experiment runs none of its protocols; else
    the protocol, the family's size and level, and each of its claims held here with its paired difference and its
    p-value Holm-adjusted over the claims held here."""
    protocol = protocol_of(experiment)
    if protocol is None:
        return None
    return {"protocol": protocol.name, "family_size": family_size(), "level": FAMILY_LEVEL,
            "claims": [{"claim": claim.claim, "better": claim.better, "worse": claim.worse,
                        "measure": comparison.measure, "mean": comparison.difference.mean,
                        "interval": [comparison.difference.low, comparison.difference.high],
                        "p_value": comparison.difference.p_value, "holm_p_value": adjusted}
                       for claim, comparison, adjusted in primary_comparisons(results, experiment)]}


def holm_cell(difference: PairedDifference, adjusted: Optional[float]) -> str:
    """A claim's Holm-adjusted p-value and the pre-registration's verdict on it: shown where that p-value is below the
    family's level and the mean has the claimed sign, the opposite shown with the other sign, else not shown."""
    if adjusted is None:
        return "—"
    shown = "not shown" if adjusted >= FAMILY_LEVEL else "shown" if difference.mean > 0 else "the opposite shown"
    return f"{adjusted:.2g}, {shown}"


def primary_table(results: dict[str, Any], experiment: str, preferred: str) -> list[str]:
    """The primary family's claims this experiment holds, each with its difference and Holm-adjusted p-value and the
    verdict it gives; nothing where it holds none."""
    primary = primary_comparisons(results, experiment)
    if not primary:
        return []
    protocol = protocol_of(experiment)
    # Results that record no family ran before the registration: pilot data, read as the family would be.
    family = ("Primary family, pre-registered" if "primary" in results else
              "The pre-registered family read on pilot runs made before it (exploratory)")
    header = [f"{family} (results/preregistration.md): {protocol.name}, {len(primary)} of its "
              f"{family_size()} comparisons", f"Fine-tuned, {preferred}",
              f"Holm p over these {len(primary)}" if len(primary) > 1 else "Holm p (this one alone)"]
    body = [[comparison.finding, measured_cell(comparison, preferred), holm_cell(comparison.difference, adjusted)]
            for _, comparison, adjusted in primary]
    return markdown_table(header, body, left_columns=3)


def claim_comparisons(results: dict[str, Any], experiment: str) -> list[Comparison]:
    """Each claim as the paired difference of its two rows, fine-tuned and few-shot through each readout (the same on
    both sides): the exploratory ones, all but the fine-tuned reading of a primary claim."""
    rows = results["rows"]
    primary = {(claim.better, claim.worse) for claim in primary_claims(results, experiment)}

    def readings(claim: dict[str, Any], side: str) -> Readings:
        row = rows[claim[side]]
        finetuned = {} if (claim["better"], claim["worse"]) in primary else finetuned_readings(row)
        return finetuned | few_shot_readings(results, row)

    return [comparison for claim in results["claims"]
            for comparison in compare(results, claim["claim"], readings(claim, "better"), readings(claim, "worse"))]


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


def claims_tables(results: dict[str, Any], experiment: str) -> list[str]:
    """The primary family's claims held here; then, exploratory, the claims, the first MPP encoder against
    initialisation and the pixels, and the Holm line over both."""
    preferred = measures_read(results)[0]
    fallback = f"; where a side lacks it, {PLAIN}, marked" if preferred == BALANCED else ""
    primary = "; the primary claims fine-tuned: above" if primary_claims(results, experiment) else ""
    claims, encoder = claim_comparisons(results, experiment), encoder_comparisons(results)
    lines = primary_table(results, experiment, preferred)
    lines += comparison_table(f"The paper's claim, exploratory ({preferred}{fallback}{primary})", claims, preferred)
    if encoder:
        lines += comparison_table(f"Against what it should beat, exploratory ({preferred}{fallback})", encoder,
                                  preferred)
    return lines + holm_summary(claims + encoder, "exploratory")


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


def results_table(results: dict[str, Any], experiment: str) -> str:
    """Markdown: every row's accuracies (mean ± standard deviation over the seeds, in %) and, where recorded, its
    balanced accuracies, chosen learning rates (each with the grid it was chosen from: ``finetune_sweep_lrs``), both
    readouts and frozen fits; each claim, the primary family's apart where ``experiment`` runs one of its protocols;
    and the references on the same images: raw pixels, and the ViT trained from scratch with the labels alone."""
    recorded = next(iter(results["rows"].values()))
    lines = accuracy_table(results, balanced=False)
    lines += accuracy_table(results, balanced=True) if "finetune_balanced_accuracy" in recorded else []
    lines += readout_table(results) if "few_shot_by_readout" in recorded else []
    lines += frozen_table(results) if "frozen_labelled" in recorded else []
    return "\n".join(lines + claims_tables(results, experiment) + reference_table(results)) + "\n"
