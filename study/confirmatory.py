"""A registered confirmatory test of one claim: two fine-tuned arms compared over fresh seeds by one pre-declared
paired test, then a fixed sequence of secondary tests, with exploratory arms beside them on the same seeds.

    python -m study.confirmatory --config study/configs/confirm_openclipart_cpu.yaml [key=value ...]

Per seed, in the registered order: one MPP pre-training run, then each arm's fine-tuning (from MPP's encoder, or from
scratch) at the learning rate the registration fixed. A seed is recorded in ``publish_dir``'s results.json as soon as
all its arms have finished, and a seed recorded there is never run again: the test may be run over several sessions (or
machines), each continuing with the seeds not yet recorded. The test is read once, when every registered seed has
been recorded; until then the tables give the seeds run and the arms' training accuracies alone.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal, Optional

import torch

from mpp.command_line import run_recipe
from mpp.config.building import build_config
from mpp.config.runs import FewShotRunConfig, FinetuneRunConfig, MPPRunConfig
from mpp.errors import ConfigError
from mpp.evaluation.statistics import PairedDifference, paired_difference, student_t_two_sided_p
from mpp.experiments.publishing import markdown_table, mean_std, percent
from mpp.experiments.runner import Run, claim_experiment, execute, recipe_command
from mpp.metrics import scores_of
from mpp.run import PREDICTIONS_FILE, configure_logging, read_metrics, write_whole
from study.class_balance import class_balance
from study.curve import last_fifths_training_accuracy
from study.results_page import PublishedExperimentConfig, check_section, write_section

logger = logging.getLogger("study.confirmatory")  # not __main__ when run with -m
DEFAULT_PRESET = Path(__file__).parent / "configs" / "confirm_openclipart_cpu.yaml"
PRETRAIN = "pretrain/mpp"
TUNING = "tuning"  # the tuning seed's runs: tuning/<arm>-<candidate>-seed<seed>
SEALED_FILE = "sealed-predictions.json"  # sealed: the test seeds' predictions, unscored until the last seed
WIDENINGS = 2  # the most rates a tuned arm's grid gains where its choice is an end of it


@dataclass(frozen=True)
class Arm:
    """One fine-tuning of every seed: from that seed's MPP encoder (``pretrained``) or from scratch."""

    name: str = ""  # its runs' folders: finetune/<name>-seed<seed>
    label: str = ""  # in the tables
    pretrained: bool = False
    overrides: tuple[str, ...] = ()  # after ``finetune``: its steps, warm-up, learning rate
    exploratory: bool = False  # beside the test, never part of it
    regularised: bool = False  # with ``tuning``: its regularisers chosen among the tuning's sets; else none


@dataclass(frozen=True)
class Regularisers:
    """A set of the field's regularisers a tuned arm may be trained with (DeiT's, MAE's): its overrides."""

    name: str = ""
    overrides: tuple[str, ...] = ()


@dataclass(frozen=True)
class Tuning:
    """Every arm's learning rate (and the regularised arms' set of regularisers) chosen once, on ``seed`` (no test
    seed) and on ``holdout_fraction`` of the training split held out from that seed's labelled images (never the
    test split), by balanced accuracy, each candidate trained whole; recorded before any test seed trains."""

    seed: Optional[int] = None  # None: no tuning here (the arms' overrides give their settings)
    rates: tuple[float, ...] = ()
    regularisers: tuple[Regularisers, ...] = ()  # the candidates of the arms with regularised: true
    holdout_fraction: float = 0.2


@dataclass(frozen=True)
class SequenceStep:
    """A secondary test of the fixed sequence: a one-sided paired t-test of ``better`` - ``worse`` (the primary's
    arms where empty) in ``measure``, against ``against`` points, the alternative ``alternative``."""

    test: str = ""  # its name in the tables
    better: str = ""
    worse: str = ""
    measure: Literal["balanced_accuracy", "accuracy"] = "balanced_accuracy"
    against: float = 0.0
    alternative: Literal["greater", "less"] = "greater"


@dataclass
class ConfirmatoryConfig(PublishedExperimentConfig):
    """study/confirmatory.py: the registered test (``registration`` names where it is written down)."""

    # Continued on a lent machine, its time there may differ.
    FREE_ON_CONTINUE: ClassVar[tuple[str, ...]] = (*PublishedExperimentConfig.FREE_ON_CONTINUE, "time_budget_minutes",
                                                   "timing_steps", "cost_only", "tuning_only")

    output_dir: str = "runs/confirm"
    registration: str = ""  # the text that fixed every setting below before any test seed ran
    finetune_preset: str = "finetune_openclipart_cpu"
    finetune: tuple[str, ...] = ()  # every arm's fine-tuning, before the arm's own overrides
    arms: tuple[Arm, ...] = ()
    better: str = ""  # the arm the claim says is better (its name), and the one it says is worse
    worse: str = ""
    level: float = 0.025  # one-sided, for the primary test and each secondary test in turn
    sequence: tuple[SequenceStep, ...] = ()  # the secondary tests read on these runs, in their registered order
    secondary: tuple[str, ...] = ()  # the registered sequence's tests beyond these, needing runs of their own, by name
    # Where the registration fixes a rule rather than the rates: each arm's rate chosen once on this seed (not a test
    # seed) by the sweep ``finetune`` asks for (finetune.sweep_lrs), before any test seed trains at it. None: the
    # arms' overrides give their rates.
    tuning_seed: Optional[int] = None
    tuning: Tuning = field(default_factory=Tuning)  # a registered tuning on a held-out slice (instead of tuning_seed)
    # true: each test seed's predictions on the test split are sealed (finetune.sealed) and kept unscored in
    # publish_dir's SEALED_FILE; results.json and the tables hold training figures alone until the last seed is
    # recorded, when one command scores them all and reads the test
    sealed: bool = False
    # The raw pixels' logistic regression and kNN (eval_preset, eval.features=pixels) on each seed's labelled images:
    # these overrides after data and encoder give the labelled subset (its shots per class); empty: none. Run at the
    # reading, beside the arms, not tested.
    pixels: tuple[str, ...] = ()
    # Above 0: first ``timing_steps`` steps of each run of a seed are timed, then only the seeds not yet recorded that
    # fit in this many minutes run, whole, in the registered order (a machine lent for a while). 0: every seed.
    time_budget_minutes: float = 0.0
    timing_steps: int = 200
    # true: run the tuning alone and stop, so that its choices can be written into the registration before any test
    # seed runs
    tuning_only: bool = False
    cost_only: bool = False  # print the training images of each stage and of the whole test, and run nothing
    max_steps: int = 0  # above 0: every run cut to this many steps (a dry run of the whole test, with output_dir,
    # publish_dir and results_page set elsewhere); 0: each run's own

    def presets(self) -> tuple[str, ...]:
        return ("mpp_preset", "eval_preset", "finetune_preset")

    def __post_init__(self) -> None:
        super().__post_init__()
        names = [arm.name for arm in self.arms]
        if not all(names) or len(set(names)) != len(names):
            raise ConfigError(f"arms: every arm needs a name of its own; got {names}")
        primary = {arm.name: arm for arm in self.arms if not arm.exploratory}
        if self.arms and ({self.better, self.worse} - set(primary) or self.better == self.worse):
            raise ConfigError(f"better={self.better!r} and worse={self.worse!r} must name two arms that are not "
                              f"exploratory; they are {', '.join(primary)}")
        for name, seed in (("tuning_seed", self.tuning_seed), ("tuning.seed", self.tuning.seed)):
            if seed is not None and seed in self.seeds:
                raise ConfigError(f"{name}={seed} is among the test seeds {list(self.seeds)}: a rate is chosen on a "
                                  "seed the test never reads")
        if self.tuning.seed is not None and (self.tuning_seed is not None or not self.tuning.rates):
            raise ConfigError(f"tuning.seed={self.tuning.seed} chooses every arm's rate among tuning.rates (set them; "
                              f"now {list(self.tuning.rates)}), and tuning_seed={self.tuning_seed} would choose them "
                              "again: set one of the two")
        if any(arm.regularised for arm in self.arms) and not self.tuning.regularisers:
            raise ConfigError("an arm with regularised: true chooses its regularisers among tuning.regularisers: "
                              "give them (name, overrides)")
        arms = set(names)
        for step in self.sequence:
            if {step.better, step.worse} - arms - {""}:
                raise ConfigError(f"sequence: {step.test!r} names arms {step.better!r} and {step.worse!r}; the arms "
                                  f"are {', '.join(names)}")
        if self.time_budget_minutes < 0 or self.timing_steps < 1 or self.max_steps < 0:
            raise ConfigError(f"time_budget_minutes={self.time_budget_minutes} must be at least 0 (0: no limit) and "
                              f"timing_steps={self.timing_steps} at least 1, max_steps={self.max_steps} at least 0")


def run_name(arm: str, seed: int) -> str:
    return f"{PRETRAIN}-seed{seed}" if arm == PRETRAIN else f"finetune/{arm}-seed{seed}"


def pretraining_overrides(cfg: ConfirmatoryConfig) -> tuple[str, ...]:
    return (*cfg.data, *cfg.encoder, *cfg.mpp, "monitor.few_shot_every=0", "monitor.mosaic_every=0",
            "monitor.final_few_shot_draws=0")


def arm_overrides(cfg: ConfirmatoryConfig, arm: Arm, seed: int) -> tuple[str, ...]:
    return (*cfg.data, *cfg.encoder, *cfg.finetune, f"data.subset_seed={seed}", *arm.overrides)


def pretraining_run(cfg: ConfirmatoryConfig, seed: int, output_dir: Path, steps: tuple[str, ...]) -> Run:
    name = run_name(PRETRAIN, seed)
    return Run(name, "pretrain", recipe_command(cfg, "pretrain", cfg.mpp_preset, (*pretraining_overrides(cfg), *steps),
                                                seed, output_dir / name), None)


def arm_rates(cfg: ConfirmatoryConfig, arm: Arm, tuning: dict[str, Any]) -> list[float]:
    """The rates an arm's tuning tries: ``tuning.rates``, widened where its choice was an end (``tuning``, its
    record)."""
    return tuning.get(arm.name, {}).get("rates") or list(cfg.tuning.rates)


def candidates(cfg: ConfirmatoryConfig, arm: Arm, tuning: dict[str, Any]) -> dict[str, tuple[str, ...]]:
    """An arm's settings the tuning chooses among, by name: each of its rates, with each set of
    ``tuning.regularisers`` where the arm is regularised."""
    sets = cfg.tuning.regularisers if arm.regularised else (Regularisers("paper"),)
    return {f"{regularisers.name}-lr{rate:g}": (*regularisers.overrides, f"train.lr={rate}")
            for regularisers in sets for rate in arm_rates(cfg, arm, tuning)}


def tuning_run_name(arm: str, candidate: str, seed: int) -> str:
    return f"{TUNING}/{arm}-{candidate}-seed{seed}"


def plan_tuning(cfg: ConfirmatoryConfig, scored: dict[str, Any], output_dir: Optional[Path] = None,
                steps: tuple[str, ...] = (), pretrained: bool = True, from_scratch: int = -1) -> list[Run]:
    """The tuning seed's runs not yet ``scored`` (its record, per arm, of each candidate's held-out score): its MPP
    pre-training, where a pre-trained arm has a candidate left, and then each candidate of each arm, trained whole on
    that seed's labelled images and scored on the slice of the training split held out from them. ``pretrained``:
    with the pre-training and the pre-trained arms' candidates (whole, as on a machine that keeps none of its runs);
    ``from_scratch``: the first that many candidates of the arms from scratch (-1: all)."""
    output_dir, seed = output_dir or Path(cfg.output_dir), cfg.tuning.seed
    pretrain = pretraining_run(cfg, seed, output_dir, steps)
    runs, scratch = [], []
    for arm in cfg.arms:
        init = (f"init={output_dir / pretrain.name}",) if arm.pretrained else ()
        for candidate, overrides in candidates(cfg, arm, scored).items():
            if candidate in scored.get(arm.name, {}).get("holdout_balanced_accuracy", {}):
                continue
            name = tuning_run_name(arm.name, candidate, seed)
            command = recipe_command(cfg, "finetune", cfg.finetune_preset, (
                *arm_overrides(cfg, arm, seed), *overrides, f"data.holdout_fraction={cfg.tuning.holdout_fraction}",
                "finetune.scored_split=holdout", *init, *steps), seed, output_dir / name)
            run = Run(name, "finetune", command, pretrain.name if arm.pretrained else None)
            (runs if arm.pretrained else scratch).append(run)
    runs = ([pretrain, *runs] if runs else []) if pretrained else []
    return runs + scratch[:None if from_scratch < 0 else from_scratch]


def tuning_runs(cfg: ConfirmatoryConfig, tuning: dict[str, Any]) -> dict[str, tuple[Arm, str]]:
    """Every tuning run's name -> its arm and candidate (``tuning``: the record so far, whose grids may be
    widened)."""
    return {tuning_run_name(arm.name, candidate, cfg.tuning.seed): (arm, candidate)
            for arm in cfg.arms for candidate in candidates(cfg, arm, tuning)}


def record_tuning(cfg: ConfirmatoryConfig, tuning: dict[str, Any], run: Run, output_dir: Path) -> None:
    """A finished tuning run's held-out balanced accuracy (the final weights', as the test scores them) added to
    ``tuning``; once an arm has every candidate's, the one it chose (the highest; the first of equals), its
    overrides and rate. A rate at an end of the arm's grid widens the grid by one rate (a factor of 3) on that side,
    up to ``WIDENINGS`` times, and the choice waits for the new rate's candidates."""
    arm, candidate = tuning_runs(cfg, tuning)[run.name]
    record = tuning.setdefault(arm.name, {"holdout_balanced_accuracy": {}})
    scores = record["holdout_balanced_accuracy"]
    scores[candidate] = read_metrics(run.directory(output_dir))["holdout_balanced_accuracy"]
    options = candidates(cfg, arm, tuning)
    if set(options) - set(scores):
        return
    record["holdout_balanced_accuracy"] = {name: scores[name] for name in options}  # in the grid's order
    chosen = max(record["holdout_balanced_accuracy"], key=record["holdout_balanced_accuracy"].get)
    rates, rate = arm_rates(cfg, arm, tuning), float(options[chosen][-1].split("=")[1])
    edge = None if min(rates) < rate < max(rates) else "highest" if rate == max(rates) else "lowest"
    if edge and len(rates) < len(cfg.tuning.rates) + WIDENINGS:
        beyond = float(f"{rate * 3 if edge == 'highest' else rate / 3:.3g}")
        record["rates"] = sorted([*rates, beyond])
        logger.info("tuning: %s chose %s, the %s rate of its grid: trying %g too", arm.name, chosen, edge, beyond)
        return
    if edge:
        logger.warning("tuning: %s chose %s, the %s rate of its grid widened %d times: the best may lie beyond it",
                       arm.name, chosen, edge, WIDENINGS)
    record |= {"chosen": chosen, "overrides": list(options[chosen]), "lr": rate, "grid_edge": edge}


def record_finished_tuning(cfg: ConfirmatoryConfig, tuning: dict[str, Any], output_dir: Path) -> dict[str, Any]:
    """``tuning`` with every tuning run finished under ``output_dir`` and not yet in it recorded (a run that finished
    while nothing recorded it, or a folder of runs used again); until a widened grid asks for none more."""
    while found := [(name, arm) for name, (arm, candidate) in tuning_runs(cfg, tuning).items()
                    if candidate not in tuning.get(arm.name, {}).get("holdout_balanced_accuracy", {})
                    and read_metrics(output_dir / name) is not None]:
        for name, _ in found:
            record_tuning(cfg, tuning, Run(name, "finetune", (), None), output_dir)
    return tuning


def plan_runs(cfg: ConfirmatoryConfig, seeds: list[int], settings: dict[str, tuple[str, ...]],
              output_dir: Optional[Path] = None, steps: tuple[str, ...] = ()) -> list[Run]:
    """Each seed's runs, seed after seed in the given order: its MPP pre-training, then every arm (those from
    scratch may start beside the pre-training). ``settings``: an arm's tuned overrides where they are known; else,
    with ``tuning_seed``, a test seed's arm trains at the rate the tuning seed's sweep chose, read from that run once
    it has finished. ``steps`` ends each run early (the timing)."""
    output_dir = output_dir or Path(cfg.output_dir)
    runs = []
    for seed in seeds:
        pretrain = pretraining_run(cfg, seed, output_dir, steps)
        runs.append(pretrain)
        sealed = ("finetune.sealed=true",) if cfg.sealed and seed in cfg.seeds else ()
        for arm in cfg.arms:
            name, tuned, waits = run_name(arm.name, seed), settings.get(arm.name, ()), ()
            if arm.name not in settings and cfg.tuning_seed is not None and seed != cfg.tuning_seed:
                waits = (run_name(arm.name, cfg.tuning_seed),)
                tuned = ("finetune.sweep_lrs=[]", f"finetune.lr_from={output_dir / waits[0]}")
            init = (f"init={output_dir / pretrain.name}",) if arm.pretrained else ()
            command = recipe_command(cfg, "finetune", cfg.finetune_preset,
                                     (*arm_overrides(cfg, arm, seed), *init, *tuned, *sealed, *steps), seed,
                                     output_dir / name)
            runs.append(Run(name, "finetune", command, pretrain.name if arm.pretrained else None, also_after=waits))
    return runs


def arm_settings(cfg: ConfirmatoryConfig, results: dict[str, Any]) -> dict[str, tuple[str, ...]]:
    """Each arm's tuned overrides recorded so far: the tuning's choice, or the rate the tuning seed's sweep chose."""
    if cfg.tuning.seed is not None:
        return {arm: tuple(record["overrides"]) for arm, record in results.get("tuning", {}).items()
                if "overrides" in record}
    return {arm: ("finetune.sweep_lrs=[]", f"train.lr={rate}") for arm, rate in results.get("tuned_rates", {}).items()}


def run_minutes(cfg: ConfirmatoryConfig, seed: int) -> tuple[dict[str, float], str]:
    """Each of a seed's runs' wall time in minutes (by ``PRETRAIN`` and arm name), from ``timing_steps`` steps of
    each (run one at a time under ``output_dir``/timing): its start-up and its steps at the speed it showed; and what
    each showed, to print. A tuned arm is timed at its first candidate."""
    timing_dir = Path(cfg.output_dir) / "timing"
    (timing_dir / "console").mkdir(parents=True, exist_ok=True)
    # The timing never sweeps: the speed is the same at any rate.
    every_arm = {arm.name: next(iter(candidates(cfg, arm, {}).values())) if cfg.tuning.seed is not None else
                 ("finetune.sweep_lrs=[]", "train.lr=0.1") for arm in cfg.arms}
    runs = plan_runs(cfg, [seed], every_arm, timing_dir, (f"train.steps={cfg.timing_steps}",))
    lines, minutes = [], {}
    for index, run in enumerate(runs):
        start = time.perf_counter()
        execute(runs[:index + 1], timing_dir, 1)  # with the runs before it, finished: the pre-training it starts from
        metrics = read_metrics(run.directory(timing_dir))
        step_seconds = metrics["global_batch_size"] / metrics["images_per_second"]
        start_up = max(0.0, time.perf_counter() - start - cfg.timing_steps * step_seconds)
        arm = next((arm for arm in cfg.arms if run_name(arm.name, seed) == run.name), None)
        config = (build_config(FinetuneRunConfig, cfg.finetune_preset, arm_overrides(cfg, arm, seed)) if arm else
                  build_config(MPPRunConfig, cfg.mpp_preset, pretraining_overrides(cfg)))
        steps = min(config.train.steps, cfg.max_steps or config.train.steps)  # a dry run's are cut
        minutes[arm.name if arm else PRETRAIN] = (start_up + steps * step_seconds) / 60
        lines.append(f"{run.name}: {start_up:.0f} s to start, {1000 * step_seconds:.1f} ms a step: "
                     f"{steps:,} steps in {minutes[arm.name if arm else PRETRAIN]:.1f} min")
    return minutes, "\n".join(lines)


def sweep_minutes(cfg: ConfirmatoryConfig, minutes: dict[str, float], settings: dict[str, tuple[str, ...]]) -> float:
    """The tuning seed's wall time where its sweeps have not all run: its pre-training once and each arm not yet
    tuned once per rate and once more, over ``parallel_runs``."""
    if cfg.tuning_seed is None or len(settings) == len(cfg.arms):
        return 0.0
    trainings = {arm.name: 1 + len(build_config(FinetuneRunConfig, cfg.finetune_preset, arm_overrides(
        cfg, arm, cfg.tuning_seed)).finetune.sweep_lrs) for arm in cfg.arms if arm.name not in settings}
    return (minutes[PRETRAIN] + sum(minutes[arm] * count for arm, count in trainings.items())) / cfg.parallel_runs


def tuning_that_fits(cfg: ConfirmatoryConfig, scored: dict[str, Any], minutes: dict[str, float], left: float
                     ) -> tuple[dict[str, Any], float]:
    """Of the tuning's runs not yet scored, what fits in ``left`` minutes, whole: the pre-training with every
    pre-trained arm's candidates left (one piece, since a lent machine keeps no run), then as many candidates of the
    arms from scratch as fit, in order. Its ``plan_tuning`` arguments and its minutes."""
    left_over = [(arm, candidate) for name, (arm, candidate) in tuning_runs(cfg, scored).items()
                 if candidate not in scored.get(arm.name, {}).get("holdout_balanced_accuracy", {})]
    pretrained = [minutes[arm.name] for arm, _ in left_over if arm.pretrained]
    piece = minutes[PRETRAIN] + sum(pretrained) / cfg.parallel_runs if pretrained else 0.0  # they wait for it
    spent, taken = (piece, 0) if piece <= left else (0.0, 0)
    for arm, _ in (entry for entry in left_over if not entry[0].pretrained):
        if spent + minutes[arm.name] / cfg.parallel_runs > left:
            break
        spent, taken = spent + minutes[arm.name] / cfg.parallel_runs, taken + 1
    scratch = sum(not arm.pretrained for arm, _ in left_over)
    return {"pretrained": piece <= left, "from_scratch": taken,
            "whole": (piece <= left or not pretrained) and taken == scratch}, spent


def training_images(cfg: ConfirmatoryConfig) -> str:
    """Markdown: the images each run trains on (its steps x its global batch), a test seed's and the tuning seed's
    (whose sweep trains each arm once per rate on most of its images, counted whole, then once more; a ``tuning``,
    once per candidate), and the whole test's. Frozen evaluations and the timing are not counted."""
    pretraining = build_config(MPPRunConfig, cfg.mpp_preset, pretraining_overrides(cfg)).train
    rows = [("MPP pre-training", pretraining.steps, pretraining.global_batch_size, 1)]
    for arm in cfg.arms:
        run = build_config(FinetuneRunConfig, cfg.finetune_preset, arm_overrides(cfg, arm, cfg.seeds[0]))
        trainings = len(candidates(cfg, arm, {})) if cfg.tuning.seed is not None else 1 + len(run.finetune.sweep_lrs)
        rows.append((arm.label, run.train.steps, run.train.global_batch_size, trainings))
    per_seed = sum(steps * batch for _, steps, batch, _ in rows)
    tuned = cfg.tuning_seed is not None or cfg.tuning.seed is not None
    tuning = sum(steps * batch * trainings for _, steps, batch, trainings in rows) if tuned else 0
    body = [[label, f"{steps:,} x {batch}", f"{steps * batch:,}", f"{trainings}" if tuned else "—"]
            for label, steps, batch, trainings in rows]
    return "\n".join(markdown_table(["Run", "Steps x batch", "Images a test seed", "Trainings on the tuning seed"],
                                     body) + [f"A test seed: {per_seed:,} images; the tuning seed: {tuning:,}; the "
                                              f"{len(cfg.seeds)} test seeds and the tuning seed: "
                                              f"{len(cfg.seeds) * per_seed + tuning:,}."])


def seed_record(cfg: ConfirmatoryConfig, seed: int) -> Optional[dict[str, Any]]:
    """One seed's results, per arm (test accuracy and balanced accuracy, steps, rate, training accuracy at its end
    and at the first log step of its last fifth), once every arm has finished; else None. Sealed: in place of the
    scores, the SHA-256 of the arm's sealed predictions (``sealed_predictions``), which the reading checks."""
    record = {}
    for arm in cfg.arms:
        folder = Path(cfg.output_dir) / run_name(arm.name, seed)
        metrics = read_metrics(folder)
        if metrics is None:
            return None
        scores = ({"predictions_sha256": predictions_digest(run_predictions(folder)["final"])} if cfg.sealed else
                  {"accuracy": metrics["test_accuracy"], "balanced_accuracy": metrics["test_balanced_accuracy"]})
        record[arm.name] = {**scores, "steps": metrics["step"], "lr": metrics["lr"],
                            "train_accuracy": metrics["train_accuracy"],
                            "train_accuracy_last_fifth": last_fifths_training_accuracy(folder, metrics)}
    return record


def run_predictions(folder: Path) -> dict[str, Any]:
    """A sealed fine-tuning run's predictions file (finetune.sealed)."""
    return json.loads((folder / PREDICTIONS_FILE).read_text())


def predictions_digest(predictions: list[int]) -> str:
    return hashlib.sha256(json.dumps(predictions).encode()).hexdigest()


def sealed_predictions(cfg: ConfirmatoryConfig, sealed: dict[str, Any], seed: int) -> dict[str, Any]:
    """``sealed`` (the published SEALED_FILE) with seed ``seed``'s predictions of the final weights added, unscored;
    the test split's labels and category names once, checked to be the same for every run."""
    for arm in cfg.arms:
        found = run_predictions(Path(cfg.output_dir) / run_name(arm.name, seed))
        split = {"labels": found["labels"], "class_names": found["class_names"]}
        if sealed.setdefault("split", split) != split:
            raise ConfigError(f"{run_name(arm.name, seed)} predicted another test split than the seeds sealed before "
                              "it: the data settings changed under a registered test")
        sealed.setdefault("predictions", {}).setdefault(str(seed), {})[arm.name] = found["final"]
    return sealed


def unsealed_scores(cfg: ConfirmatoryConfig, records: dict[str, Any], sealed: dict[str, Any]) -> dict[str, Any]:
    """``records`` with each arm's test scores from its sealed predictions (after the last seed, once): accuracy,
    balanced accuracy and per-category accuracy; refused where a prediction differs from the digest recorded with
    its seed."""
    labels = torch.tensor(sealed["split"]["labels"])
    classes = len(sealed["split"]["class_names"])
    scored = {}
    for seed, record in records.items():
        scored[seed] = {}
        for arm, figures in record.items():
            predictions = sealed["predictions"][seed][arm]
            if predictions_digest(predictions) != figures["predictions_sha256"]:
                raise ConfigError(f"{SEALED_FILE}: seed {seed}'s {arm} predictions are not the ones recorded with "
                                  "that seed (their SHA-256 differs): the sealed file was changed")
            found = scores_of(torch.tensor(predictions), labels, classes)
            scored[seed][arm] = {"accuracy": found["accuracy"], "balanced_accuracy": found["balanced_accuracy"],
                                 "per_class_accuracy": found["per_class_accuracy"], **figures}
    return scored


PIXEL_BASELINES = {"logistic_regression": "linear_probe", "knn": "knn"}  # their names -> the commands that run them


def plan_pixel_runs(cfg: ConfirmatoryConfig, seeds: list[int]) -> list[Run]:
    """Per seed, the raw pixels' logistic regression and kNN on its labelled images (``pixels``)."""
    output_dir = Path(cfg.output_dir)
    return [Run(f"pixels/{name}-seed{seed}", command, recipe_command(
        cfg, command, cfg.eval_preset, (*cfg.data, *cfg.encoder, *cfg.pixels, f"data.subset_seed={seed}",
                                        "eval.features=pixels"), seed, output_dir / f"pixels/{name}-seed{seed}"), None)
            for seed in seeds for name, command in PIXEL_BASELINES.items()]


def pixel_scores(cfg: ConfirmatoryConfig, seeds: list[int]) -> dict[str, Any]:
    """Per seed, each pixel baseline's test accuracy, balanced accuracy and per-category accuracy."""
    found = {}
    for seed in seeds:
        found[str(seed)] = {}
        for name, command in PIXEL_BASELINES.items():
            metrics = read_metrics(Path(cfg.output_dir) / f"pixels/{name}-seed{seed}")[command]
            found[str(seed)][name] = {key: metrics[f"test_{key}"]
                                      for key in ("accuracy", "balanced_accuracy", "per_class_accuracy")}
    return found


def one_sided_p(difference: PairedDifference, bound: float, alternative: str) -> Optional[float]:
    """The paired t-test's one-sided p-value of the mean difference against ``bound`` (points), the alternative
    that it is "greater" or "less"."""
    if difference.n < 2 or difference.sd == 0:
        return None
    t = (difference.mean - bound) / (difference.sd / math.sqrt(difference.n))
    tail = student_t_two_sided_p(t, difference.n - 1) / 2  # the tail beyond |t|
    return tail if (t > 0) == (alternative == "greater") else 1 - tail


def arm_values(records: dict[str, Any], seeds: list[int], arm: str, measure: str) -> list[float]:
    return [records[str(seed)][arm][measure] for seed in seeds]


def read_tests(cfg: ConfirmatoryConfig, records: dict[str, Any]) -> dict[str, Any]:
    """The primary test and the secondary sequence, read once over every registered seed."""
    seeds = list(cfg.seeds)

    def test(step: SequenceStep) -> dict[str, Any]:
        difference = paired_difference(arm_values(records, seeds, step.better or cfg.better, step.measure),
                                       arm_values(records, seeds, step.worse or cfg.worse, step.measure), scale=100)
        p = one_sided_p(difference, step.against, step.alternative)
        return {"test": step.test, "measure": step.measure, "mean": difference.mean, "sd": difference.sd,
                "interval": [difference.low, difference.high], "against": step.against,
                "alternative": step.alternative, "p_value": p, "shown": p is not None and p < cfg.level}

    primary = test(SequenceStep(f"one-sided paired t-test, {cfg.better} - {cfg.worse} > 0"))
    low, high = primary["interval"]
    primary |= {"registration": cfg.registration, "seeds": seeds, "level": cfg.level,
                "verdict": ("gain shown" if primary["shown"] else
                            "the opposite shown" if high < 0 else "no gain shown")}
    sequence = [test(step) for step in cfg.sequence]
    reached = primary["shown"]
    for step in sequence:
        step["reached"] = reached
        reached = reached and step["shown"]
    sequence += [{"test": name, "reached": False, "ran": False} for name in cfg.secondary]
    return {"primary": primary, "secondary": sequence}


def exploratory_comparisons(cfg: ConfirmatoryConfig, records: dict[str, Any]) -> list[tuple[str, PairedDifference]]:
    """Every exploratory arm against the worse primary arm, then the primary arms' better against it too where the
    exploratory arm starts from MPP: paired differences in balanced accuracy, points."""
    seeds = list(cfg.seeds)
    labels = {arm.name: arm.label for arm in cfg.arms}
    pairs = []
    for arm in (arm for arm in cfg.arms if arm.exploratory):
        against = [cfg.worse, *([cfg.better] if arm.pretrained else [])]
        pairs += [(f"{arm.label} - {labels[other]}", paired_difference(
            arm_values(records, seeds, arm.name, "balanced_accuracy"),
            arm_values(records, seeds, other, "balanced_accuracy"), scale=100)) for other in against]
    return pairs


def interval(values: list[float]) -> str:
    low, high = values
    return f"[{low:+.1f}, {high:+.1f}]"


def p_cell(p: Optional[float]) -> str:
    return "—" if p is None else f"{p:.2g}"


def test_cell(test: dict[str, Any]) -> str:
    """A test's result as the package's tables give a comparison: mean [95% interval], verdict (p); "the opposite
    shown" where the whole interval lies on the other side of the bound from the alternative tested."""
    low, high = test["interval"]
    opposite = high < test["against"] if test["alternative"] == "greater" else low > test["against"]
    verdict = "shown" if test["shown"] else "the opposite shown" if opposite else "not shown"
    return f"{test['mean']:+.1f} {interval(test['interval'])}, {verdict} (p {p_cell(test['p_value'])})"


def result_cell(step: dict[str, Any]) -> str:
    """A test of the sequence: its result where it was reached; one it did not reach has no verdict, only the p its
    runs give (a test that needs runs of its own: "not run")."""
    if not step.get("ran", True):
        return "not run"
    if step["reached"]:
        return test_cell(step)
    return f"not reached (p {p_cell(step['p_value'])} against {step['against']:+g})"


def tables(cfg: ConfirmatoryConfig, results: dict[str, Any]) -> str:
    """Markdown: the verdict and the secondary sequence (once every seed has run), then per arm its accuracies and
    its training accuracy over its last fifth, the floors, and the exploratory comparisons."""
    records, seeds = results["per_seed"], [seed for seed in cfg.seeds if str(seed) in results["per_seed"]]
    lines = [f"Registered in {cfg.registration}. Seeds recorded: {len(seeds)} of {len(cfg.seeds)} "
             f"({', '.join(map(str, seeds)) or 'none'}).", ""]
    if results.get("tuning"):
        lines += tuning_table(cfg, results["tuning"])
    if results.get("tuned_rates"):
        lines += [f"Learning rates chosen on tuning seed {cfg.tuning_seed}: " + ", ".join(
            f"{arm.label} {results['tuned_rates'][arm.name]:g}" for arm in cfg.arms
            if arm.name in results["tuned_rates"]) + ".", ""]
    if "primary" in results:
        primary = results["primary"]
        lines += [f"**Primary test** ({primary['test']}, level {primary['level']}, balanced accuracy): "
                  f"{primary['mean']:+.1f} points {interval(primary['interval'])} (95% interval; paired SD "
                  f"{primary['sd']:.2f}), one-sided p {p_cell(primary['p_value'])}: **{primary['verdict']}**.", ""]
        body = [[step["test"], "yes" if step["reached"] else "no", result_cell(step)]
                for step in [{**primary, "test": "the primary test, balanced accuracy", "reached": True},
                             *results["secondary"]]]
        lines += markdown_table(["Test, in order", "Reached", "Result (one-sided p)"], body, left_columns=3)
    else:
        lines += [f"The test is read once all {len(cfg.seeds)} registered seeds have run; until then the table "
                  "gives the training accuracies alone.", ""]
    read = "primary" in results
    body = []
    for arm in cfg.arms:
        row = [f"{arm.label}{' (exploratory)' if arm.exploratory else ''}",
               f"{records[str(seeds[0])][arm.name]['steps']:,}" if seeds else "—"]
        if read:
            row += [percent(arm_values(records, seeds, arm.name, measure))
                    for measure in ("balanced_accuracy", "accuracy")]
        ends = arm_values(records, seeds, arm.name, "train_accuracy") if seeds else []
        fifths = arm_values(records, seeds, arm.name, "train_accuracy_last_fifth") if seeds else []
        rises = [100 * (end - fifth) for end, fifth in zip(ends, fifths, strict=True) if fifth is not None]
        row += [percent(ends) if ends else "—",
                "{:+.1f} ± {:.1f}".format(*mean_std(rises)) if rises else "—"]
        body.append(row)
    header = ["Arm", "Steps", *(["Balanced accuracy, %", "Top-1, %"] if read else []),
              "Training accuracy at the end, %", "Its rise over the last fifth, points"]
    lines += markdown_table(header, body)
    if read:
        lines += [f"Floors on the test split: chance {100 / results['classes']:.1f}% (balanced accuracy's); always "
                  f"the largest category {100 * results['majority_class_accuracy']:.1f}% (top-1's).", ""]
        if results.get("pixels"):
            lines += pixel_table(results["pixels"], seeds)
        if results.get("class_names"):
            lines += category_table(cfg, results, seeds)
        body = [[finding, f"{difference.mean:+.1f} {interval([difference.low, difference.high])}",
                 p_cell(difference.p_value)]
                for finding, difference in exploratory_comparisons(cfg, results["per_seed"])]
        if body:  # only where the design has arms beside the tested ones
            lines += ["Exploratory (not tested: intervals only):", ""]
            lines += markdown_table(["Balanced accuracy, points", "Mean [95% interval]", "Two-sided p"], body)
    return "\n".join(lines)


def tuning_table(cfg: ConfirmatoryConfig, tuning: dict[str, Any]) -> list[str]:
    """Markdown lines: each arm's held-out balanced accuracy per candidate on the tuning seed, and its choice."""
    labels = {arm.name: arm.label for arm in cfg.arms}
    lines = [f"Tuning on seed {cfg.tuning.seed} (not a test seed), scored on {cfg.tuning.holdout_fraction:g} of the "
             "training split held out from its labelled images (never the test split), balanced accuracy of the "
             "final weights, %:", ""]
    body = [[labels[arm], ", ".join(f"{candidate} {100 * score:.1f}" for candidate, score in
                                    record["holdout_balanced_accuracy"].items()),
             record["chosen"] + (f" (the {record['grid_edge']} rate)" if record["grid_edge"] else "")
             if "chosen" in record else "— (not every candidate has run)"]
            for arm, record in ((arm.name, tuning[arm.name]) for arm in cfg.arms if arm.name in tuning)]
    return [*lines, *markdown_table(["Arm", "Candidates", "Chosen"], body, left_columns=3)]


def pixel_table(pixels: dict[str, Any], seeds: list[int]) -> list[str]:
    """Markdown lines: the raw pixels' baselines on the same labelled images, beside the arms (not tested)."""
    body = [[f"raw pixels, {name.replace('_', ' ')}",
             *(percent([pixels[str(seed)][name][measure] for seed in seeds])
               for measure in ("balanced_accuracy", "accuracy"))] for name in PIXEL_BASELINES]
    return ["Beside the arms, not tested: the raw pixels of each seed's labelled images.", "",
            *markdown_table(["Baseline", "Balanced accuracy, %", "Top-1, %"], body)]


def category_table(cfg: ConfirmatoryConfig, results: dict[str, Any], seeds: list[int]) -> list[str]:
    """Markdown lines: per category, its test drawings, each primary arm's mean accuracy on it, and the primary
    difference with its 95% interval: where the gain sits (exploratory)."""
    records, arms = results["per_seed"], [arm for arm in cfg.arms if not arm.exploratory]
    body = []
    for index, name in enumerate(results["class_names"]):
        per_arm = {arm.name: [records[str(seed)][arm.name]["per_class_accuracy"][index] for seed in seeds]
                   for arm in arms}
        difference = paired_difference(per_arm[cfg.better], per_arm[cfg.worse], scale=100)
        body.append([name, f"{results['class_sizes'][index]:,}",
                     *(f"{100 * mean_std(values)[0]:.1f}" for values in per_arm.values()),
                     f"{difference.mean:+.1f} {interval([difference.low, difference.high])}"])
    header = ["Category", "Test drawings", *(f"{arm.label}, %" for arm in arms), f"{cfg.better} - {cfg.worse}"]
    return ["Per category (exploratory: intervals only, not corrected for the categories' number):", "",
            *markdown_table(header, body)]


def publish(cfg: ConfirmatoryConfig, results: dict[str, Any], sealed: Optional[dict[str, Any]] = None) -> str:
    """results.json and results.md in ``publish_dir`` (and ``output_dir``), and ``sealed`` as SEALED_FILE there, the
    page's section; the tables. The test is read once every registered seed is recorded (and, with ``pixels``, the
    pixel baselines have run): sealed, its scores are made from the sealed predictions then."""
    if len(results["per_seed"]) == len(cfg.seeds) and (not cfg.pixels or "pixels" in results):
        if cfg.sealed:
            results["per_seed"] = unsealed_scores(cfg, results["per_seed"], sealed)
            labels = torch.tensor(sealed["split"]["labels"])
            results["class_names"] = sealed["split"]["class_names"]
            results["class_sizes"] = torch.bincount(labels, minlength=len(results["class_names"])).tolist()
        results |= read_tests(cfg, results["per_seed"])
    else:  # registered seeds added since a reading: no test until they are in too
        for reading in ("primary", "secondary"):
            results.pop(reading, None)
    runs = results["runs"] = len(results["per_seed"]) * (1 + len(cfg.arms))  # as every experiment's results.json
    table = tables(cfg, results) + (f"\n{runs} runs of the recorded seeds, {cfg.parallel_runs} at a time, in "
                                    f"{results['wall_seconds'] / 60:.0f} min of wall time in all"
                                    f"{' (the tuning included)' if results.get('tuning') else ''}.\n")
    for folder in dict.fromkeys(Path(name) for name in (cfg.output_dir, cfg.publish_dir) if name):
        folder.mkdir(parents=True, exist_ok=True)
        if sealed:
            write_whole(folder / SEALED_FILE, lambda partial: partial.write_text(sealed_text(sealed)))
        write_whole(folder / "results.json",
                    lambda partial: partial.write_text(json.dumps(results, indent=2) + "\n"))
        (folder / "results.md").write_text(table)
    write_section(cfg, table)
    return table


def sealed_text(sealed: dict[str, Any]) -> str:
    """SEALED_FILE's text: a run's predictions on one line each, so that a seed's commit adds its lines alone."""
    lines = [f'{{"split": {json.dumps(sealed["split"])},', '"predictions": {']
    seeds = list(sealed.get("predictions", {}).items())
    for seed_index, (seed, arms) in enumerate(seeds):
        lines.append(f"{json.dumps(seed)}: {{")
        lines += [f"  {json.dumps(arm)}: {json.dumps(predictions)}{',' if index < len(arms) - 1 else ''}"
                  for index, (arm, predictions) in enumerate(arms.items())]
        lines.append("}" + ("," if seed_index < len(seeds) - 1 else ""))
    return "\n".join([*lines, "}}"]) + "\n"


def check_sealed(cfg: ConfirmatoryConfig, results: dict[str, Any], sealed: dict[str, Any]) -> None:
    """A ConfigError unless a sealed test's published records agree: its seeds the ones it registered (recorded with
    its first publication; a sealed test is read with all of them, never fewer), and the sealed predictions those of
    exactly the recorded seeds, each matching the digest recorded with its seed."""
    registered = results.setdefault("registered_seeds", list(cfg.seeds))
    if registered != list(cfg.seeds):
        raise ConfigError(f"seeds={list(cfg.seeds)}: this sealed test registered seeds {registered}, and is read with "
                          "all of them; its seeds do not change")
    recorded = sealed.get("predictions", {})
    if set(recorded) != set(results["per_seed"]):
        raise ConfigError(f"{SEALED_FILE} holds the predictions of seeds {sorted(recorded)}, and results.json records "
                          f"seeds {sorted(results['per_seed'])}: restore the {SEALED_FILE} published with them")
    for seed, record in results["per_seed"].items():
        for arm, figures in record.items():
            if predictions_digest(recorded[seed][arm]) != figures["predictions_sha256"]:
                raise ConfigError(f"{SEALED_FILE}: seed {seed}'s {arm} predictions are not the ones recorded with "
                                  "that seed (their SHA-256 differs): the sealed file was changed")


def published(cfg: ConfirmatoryConfig, name: str = "results.json") -> dict[str, Any]:
    """The results published so far (``publish_dir``'s results.json, or its ``name``), or none yet."""
    path = Path(cfg.publish_dir or cfg.output_dir) / name
    return json.loads(path.read_text()) if path.is_file() else (
        {"per_seed": {}, "wall_seconds": 0.0} if name == "results.json" else {})


def confirmatory_test(cfg: ConfirmatoryConfig) -> str:
    """The tuning where it has not run, the seeds not yet recorded, seed after seed (``tables_only``: none), the
    pixel baselines after the last, then the tables."""
    if not cfg.arms:
        raise ConfigError("arms: a confirmatory test needs its arms (name, label, pretrained, overrides), two of "
                          "them named by better and worse")
    if cfg.cost_only:
        return training_images(cfg)
    check_section(cfg)
    results, sealed = published(cfg), published(cfg, SEALED_FILE) if cfg.sealed else None
    if cfg.sealed:
        check_sealed(cfg, results, sealed)
    unknown = set(results["per_seed"]) - {str(seed) for seed in cfg.seeds}
    if unknown:
        raise ConfigError(f"{cfg.publish_dir} records seeds {sorted(unknown)} that seeds={list(cfg.seeds)} does not "
                          "register: a registered test's seeds do not change")
    if "classes" not in results:  # once: rewriting the tables needs no data
        results |= class_balance(FewShotRunConfig, cfg.eval_preset, (*cfg.data, *cfg.encoder))
    if cfg.tables_only:
        return publish(cfg, results, sealed)
    start, spent = time.perf_counter(), results["wall_seconds"]
    output_dir = claim_experiment(cfg)
    rates = results.setdefault("tuned_rates", {}) if cfg.tuning_seed is not None else {}

    def record(run: Run) -> None:
        """A tuning run's chosen rate, or the seed of ``run`` once its last run has finished, recorded and
        published at once."""
        seed = int(run.name.rsplit("-seed", 1)[1])
        if seed == cfg.tuning_seed:
            arm = next((arm.name for arm in cfg.arms if run_name(arm.name, seed) == run.name), None)
            if arm:
                rates[arm] = read_metrics(run.directory(output_dir))["chosen_lr"]
                publish(cfg, results, sealed)
            return
        record_seed(seed)

    def record_seed(seed: int) -> None:
        """Seed ``seed`` recorded and published at once, once all its runs have finished."""
        finished = seed_record(cfg, seed) if seed in cfg.seeds and str(seed) not in results["per_seed"] else None
        if finished is not None:
            if cfg.sealed:
                sealed_predictions(cfg, sealed, seed)
            recorded = results["per_seed"] | {str(seed): finished}
            results["per_seed"] = {str(seed): recorded[str(seed)] for seed in cfg.seeds if str(seed) in recorded}
            results["wall_seconds"] = spent + time.perf_counter() - start
            publish(cfg, results, sealed)

    for seed in cfg.seeds:  # a seed whose runs finished while nothing recorded them (a stop between the two)
        record_seed(seed)

    seeds = [seed for seed in cfg.seeds if str(seed) not in results["per_seed"]]
    settings = arm_settings(cfg, results)
    tuning = results.setdefault("tuning", {}) if cfg.tuning.seed is not None else {}
    sweeping = cfg.tuning_seed is not None and len(settings) < len(cfg.arms) and bool(seeds)
    grid_left = cfg.tuning.seed is not None and len(settings) < len(cfg.arms)
    budget = cfg.time_budget_minutes and (seeds or grid_left)
    minutes, timed = run_minutes(cfg, (seeds or list(cfg.seeds))[0]) if budget else ({}, "")
    cut = (f"train.steps={cfg.max_steps}",) if cfg.max_steps else ()

    def minutes_left() -> float:
        return cfg.time_budget_minutes - (time.perf_counter() - start) / 60

    def record_tuned(run: Run) -> None:
        if run.name in tuning_runs(cfg, tuning):  # not the pre-training
            record_tuning(cfg, tuning, run, output_dir)
            publish(cfg, results, sealed)

    try:
        # Every arm chosen before any test seed trains (again where a choice at an end widened a grid); on a lent
        # machine, what fits its time, each piece whole.
        while grid_left:
            record_finished_tuning(cfg, tuning, output_dir)
            grid = tuning_that_fits(cfg, tuning, minutes, minutes_left())[0] if budget else {"whole": True}
            runs = plan_tuning(cfg, tuning, steps=cut, **{key: value for key, value in grid.items() if key != "whole"})
            if budget:
                logger.info("timed over %d steps:\n%s\n%d runs of the tuning left fit in the %.1f minutes left%s",
                            cfg.timing_steps, timed, len(runs), minutes_left(),
                            "" if grid["whole"] else " (not all of it: no seed runs on this machine)")
            if not runs:
                break
            execute(runs, output_dir, cfg.parallel_runs, on_finished=record_tuned)
        record_finished_tuning(cfg, tuning, output_dir)
        settings = arm_settings(cfg, results)
        if cfg.tuning_only:
            return "\n".join(tuning_table(cfg, tuning))
        if len(settings) < len(cfg.arms) and cfg.tuning.seed is not None:
            seeds = []  # the tuning is not whole yet
        if budget:
            per_seed, left = sum(minutes.values()) / cfg.parallel_runs, minutes_left()
            # The tuning seed's sweeps first, alone if no seed fits after them.
            sweep = sweep_minutes(cfg, minutes, settings) if sweeping else 0.0
            sweeping = sweeping and sweep <= left
            ready = sweeping or cfg.tuning_seed is None or len(settings) == len(cfg.arms)
            left -= sweep if sweeping else 0.0
            fitting = seeds[:max(0, int(left // per_seed))] if ready else []
            logger.info("timed over %d steps:\n%s\na seed: %.1f min%s; %d of the %d seeds not yet recorded fit in "
                        "the %.1f minutes left: %s", cfg.timing_steps, timed, per_seed,
                        f" (the tuning seed first: {sweep:.1f} min)" if sweeping else "", len(fitting), len(seeds),
                        left, fitting or "none")
            seeds = fitting
        sweeps = [] if not sweeping else [
            run for run in plan_runs(cfg, [cfg.tuning_seed], settings, steps=cut)
            if run.name == run_name(PRETRAIN, cfg.tuning_seed) or run.name in {
                run_name(arm.name, cfg.tuning_seed) for arm in cfg.arms if arm.name not in settings}]
        execute(sweeps + plan_runs(cfg, seeds, settings, steps=cut), output_dir, cfg.parallel_runs,
                on_finished=record)
        if cfg.pixels and len(results["per_seed"]) == len(cfg.seeds) and "pixels" not in results:
            execute(plan_pixel_runs(cfg, list(cfg.seeds)), output_dir, cfg.parallel_runs)
            results["pixels"] = pixel_scores(cfg, list(cfg.seeds))
    finally:
        results["wall_seconds"] = spent + time.perf_counter() - start
        table = publish(cfg, results, sealed)
    return table


def main(cfg: ConfirmatoryConfig) -> None:
    configure_logging()
    logging.getLogger("study").setLevel(logging.INFO)  # its own lines beside the package's
    print(confirmatory_test(cfg))


def cli() -> None:
    """The command line: ``python -m study.confirmatory [--config FILE] [key=value ...]``."""
    run_recipe(main, ConfirmatoryConfig, DEFAULT_PRESET, description=__doc__)


if __name__ == "__main__":
    cli()
