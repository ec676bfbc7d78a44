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

import json
import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Optional

from mpp.command_line import run_recipe
from mpp.config.building import build_config
from mpp.config.runs import FewShotRunConfig, FinetuneRunConfig, MPPRunConfig
from mpp.errors import ConfigError
from mpp.evaluation.statistics import PairedDifference, paired_difference, student_t_two_sided_p
from mpp.experiments.publishing import markdown_table, mean_std, percent
from mpp.experiments.runner import Run, claim_experiment, execute, recipe_command
from mpp.run.directory import read_metrics, write_whole
from mpp.run.session import configure_logging
from study.class_balance import class_balance
from study.curve import last_fifths_training_accuracy
from study.results_page import PublishedExperimentConfig, check_section, write_section

logger = logging.getLogger("study.confirmatory")  # not __main__ when run with -m
DEFAULT_PRESET = Path(__file__).parent / "configs" / "confirm_openclipart_cpu.yaml"
PRETRAIN = "pretrain/mpp"


@dataclass(frozen=True)
class Arm:
    """One fine-tuning of every seed: from that seed's MPP encoder (``pretrained``) or from scratch."""

    name: str = ""  # its runs' folders: finetune/<name>-seed<seed>
    label: str = ""  # in the tables
    pretrained: bool = False
    overrides: tuple[str, ...] = ()  # after ``finetune``: its steps, warm-up, learning rate
    exploratory: bool = False  # beside the test, never part of it


@dataclass
class ConfirmatoryConfig(PublishedExperimentConfig):
    """study/confirmatory.py: the registered test (``registration`` names where it is written down)."""

    # Continued on a lent machine, its time there may differ.
    FREE_ON_CONTINUE: ClassVar[tuple[str, ...]] = (*PublishedExperimentConfig.FREE_ON_CONTINUE, "time_budget_minutes",
                                                   "timing_steps", "cost_only")

    output_dir: str = "runs/confirm"
    registration: str = ""  # the text that fixed every setting below before any test seed ran
    finetune_preset: str = "finetune_openclipart_cpu"
    finetune: tuple[str, ...] = ()  # every arm's fine-tuning, before the arm's own overrides
    arms: tuple[Arm, ...] = ()
    better: str = ""  # the arm the claim says is better (its name), and the one it says is worse
    worse: str = ""
    effect: float = 2.0  # points: the effect the seeds were planned to detect; the second secondary test's bound
    level: float = 0.025  # one-sided, for the primary test and each secondary test in turn
    secondary: tuple[str, ...] = ()  # the registered sequence's tests beyond the first two, by name, in order
    # Where the registration fixes a rule rather than the rates: each arm's rate chosen once on this seed (not a test
    # seed) by the sweep ``finetune`` asks for (finetune.sweep_lrs), before any test seed trains at it. None: the
    # arms' overrides give their rates.
    tuning_seed: Optional[int] = None
    # Above 0: first ``timing_steps`` steps of each run of a seed are timed, then only the seeds not yet recorded that
    # fit in this many minutes run, whole, in the registered order (a machine lent for a while). 0: every seed.
    time_budget_minutes: float = 0.0
    timing_steps: int = 200
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
        if self.tuning_seed is not None and self.tuning_seed in self.seeds:
            raise ConfigError(f"tuning_seed={self.tuning_seed} is among the test seeds {list(self.seeds)}: a rate "
                              "is chosen on a seed the test never reads")
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


def plan_runs(cfg: ConfirmatoryConfig, seeds: list[int], rates: dict[str, float], output_dir: Optional[Path] = None,
              steps: tuple[str, ...] = ()) -> list[Run]:
    """Each seed's runs, seed after seed in the given order: its MPP pre-training, then every arm (those from
    scratch may start beside the pre-training). With ``tuning_seed``, a test seed's arm trains at the rate the
    tuning seed's sweep chose: ``rates`` where it is known, else read from that run once it has finished. ``steps``
    ends each run early (the timing)."""
    output_dir = output_dir or Path(cfg.output_dir)
    runs = []
    for seed in seeds:
        pretrain = run_name(PRETRAIN, seed)
        runs.append(Run(pretrain, "pretrain", recipe_command(cfg, "pretrain", cfg.mpp_preset,
                                                             (*pretraining_overrides(cfg), *steps), seed,
                                                             output_dir / pretrain), None))
        for arm in cfg.arms:
            name, tuned, waits = run_name(arm.name, seed), (), ()
            if arm.name in rates:
                tuned = ("finetune.sweep_lrs=[]", f"train.lr={rates[arm.name]}")
            elif cfg.tuning_seed is not None and seed != cfg.tuning_seed:
                waits = (run_name(arm.name, cfg.tuning_seed),)
                tuned = ("finetune.sweep_lrs=[]", f"finetune.lr_from={output_dir / waits[0]}")
            init = (f"init={output_dir / pretrain}",) if arm.pretrained else ()
            command = recipe_command(cfg, "finetune", cfg.finetune_preset,
                                     (*arm_overrides(cfg, arm, seed), *init, *tuned, *steps), seed, output_dir / name)
            runs.append(Run(name, "finetune", command, pretrain if arm.pretrained else None, also_after=waits))
    return runs


def seed_minutes(cfg: ConfirmatoryConfig, seed: int, rates: dict[str, float]) -> tuple[float, float, str]:
    """A seed's wall time, in minutes, from ``timing_steps`` steps of each of its runs (run one at a time under
    ``output_dir``/timing): per run, its start-up and its steps at the speed it showed, over ``parallel_runs``; and
    the tuning seed's too where its rates are not yet chosen (its sweep trains each arm once per rate, then once
    more), in minutes; and what each run showed, to print."""
    timing_dir = Path(cfg.output_dir) / "timing"
    (timing_dir / "console").mkdir(parents=True, exist_ok=True)
    every_rate = {arm.name: 0.1 for arm in cfg.arms}  # the timing never sweeps: the speed is the same at any rate
    runs = plan_runs(cfg, [seed], every_rate, timing_dir, (f"train.steps={cfg.timing_steps}",))
    lines, minutes, tuning = [], 0.0, 0.0
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
        run_minutes = (start_up + steps * step_seconds) / 60
        minutes += run_minutes
        # The tuning seed runs its pre-training once and each arm not yet tuned once per rate and once more.
        trainings = (0 if arm.name in rates else 1 + len(config.finetune.sweep_lrs)) if arm else 1
        tuning += trainings * run_minutes
        lines.append(f"{run.name}: {start_up:.0f} s to start, {1000 * step_seconds:.1f} ms a step: "
                     f"{steps:,} steps in {run_minutes:.1f} min")
    tuning = tuning / cfg.parallel_runs if cfg.tuning_seed is not None and len(rates) < len(cfg.arms) else 0.0
    return minutes / cfg.parallel_runs, tuning, "\n".join(lines)


def training_images(cfg: ConfirmatoryConfig) -> str:
    """Markdown: the images each run trains on (its steps x its global batch), a test seed's and the tuning seed's
    (whose sweep trains each arm once per rate on most of its images, counted whole, then once more), and the whole
    test's. Frozen evaluations and the timing are not counted."""
    pretraining = build_config(MPPRunConfig, cfg.mpp_preset, pretraining_overrides(cfg)).train
    rows = [("MPP pre-training", pretraining.steps, pretraining.global_batch_size, 1)]
    for arm in cfg.arms:
        run = build_config(FinetuneRunConfig, cfg.finetune_preset, arm_overrides(cfg, arm, cfg.seeds[0]))
        rows.append((arm.label, run.train.steps, run.train.global_batch_size, 1 + len(run.finetune.sweep_lrs)))
    per_seed = sum(steps * batch for _, steps, batch, _ in rows)
    tuning = sum(steps * batch * trainings for _, steps, batch, trainings in rows) if cfg.tuning_seed is not None else 0
    body = [[label, f"{steps:,} x {batch}", f"{steps * batch:,}",
             f"{trainings}" if cfg.tuning_seed is not None else "—"] for label, steps, batch, trainings in rows]
    return "\n".join(markdown_table(["Run", "Steps x batch", "Images a test seed", "Trainings on the tuning seed"],
                                     body) + [f"A test seed: {per_seed:,} images; the tuning seed: {tuning:,}; the "
                                              f"{len(cfg.seeds)} test seeds and the tuning seed: "
                                              f"{len(cfg.seeds) * per_seed + tuning:,}."])


def seed_record(cfg: ConfirmatoryConfig, seed: int) -> Optional[dict[str, Any]]:
    """One seed's results, per arm (test accuracy and balanced accuracy, steps, rate, training accuracy at its end
    and at the first log step of its last fifth), once every arm has finished; else None."""
    record = {}
    for arm in cfg.arms:
        folder = Path(cfg.output_dir) / run_name(arm.name, seed)
        metrics = read_metrics(folder)
        if metrics is None:
            return None
        record[arm.name] = {"accuracy": metrics["test_accuracy"],
                            "balanced_accuracy": metrics["test_balanced_accuracy"], "steps": metrics["step"],
                            "lr": metrics["lr"], "train_accuracy": metrics["train_accuracy"],
                            "train_accuracy_last_fifth": last_fifths_training_accuracy(folder, metrics)}
    return record


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

    def compared(measure: str) -> PairedDifference:
        return paired_difference(arm_values(records, seeds, cfg.better, measure),
                                 arm_values(records, seeds, cfg.worse, measure), scale=100)

    def test(name: str, measure: str, bound: float, alternative: str) -> dict[str, Any]:
        difference = compared(measure)
        p = one_sided_p(difference, bound, alternative)
        return {"test": name, "measure": measure, "mean": difference.mean, "sd": difference.sd,
                "interval": [difference.low, difference.high], "against": bound, "alternative": alternative,
                "p_value": p, "shown": p is not None and p < cfg.level}

    primary = test(f"one-sided paired t-test, {cfg.better} - {cfg.worse} > 0", "balanced_accuracy", 0.0, "greater")
    low, high = primary["interval"]
    primary |= {"registration": cfg.registration, "seeds": seeds, "level": cfg.level,
                "verdict": ("gain shown" if primary["shown"] else
                            "the opposite shown" if high < 0 else "no gain shown")}
    sequence = [test("the same comparison in top-1 accuracy", "accuracy", 0.0, "greater"),
                test(f"the gain smaller than +{cfg.effect:g} points", "balanced_accuracy", cfg.effect, "less")]
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
    """A test's result as the package's tables give a comparison: mean [95% interval], verdict (p)."""
    return (f"{test['mean']:+.1f} {interval(test['interval'])}, {'shown' if test['shown'] else 'not shown'} "
            f"(p {p_cell(test['p_value'])})")


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
        body = [[finding, f"{difference.mean:+.1f} {interval([difference.low, difference.high])}",
                 p_cell(difference.p_value)]
                for finding, difference in exploratory_comparisons(cfg, results["per_seed"])]
        lines += ["Exploratory (not tested: intervals only):", ""]
        lines += markdown_table(["Balanced accuracy, points", "Mean [95% interval]", "Two-sided p"], body)
    return "\n".join(lines)


def publish(cfg: ConfirmatoryConfig, results: dict[str, Any]) -> str:
    """results.json and results.md in ``publish_dir`` (and ``output_dir``), the page's section; the tables."""
    if len(results["per_seed"]) == len(cfg.seeds):
        results |= read_tests(cfg, results["per_seed"])
    else:  # registered seeds added since a reading: no test until they are in too
        for reading in ("primary", "secondary"):
            results.pop(reading, None)
    runs = results["runs"] = len(results["per_seed"]) * (1 + len(cfg.arms))  # as every experiment's results.json
    table = tables(cfg, results) + (f"\n{runs} runs of the recorded seeds, {cfg.parallel_runs} at a time, in "
                                    f"{results['wall_seconds'] / 60:.0f} min of wall time in all.\n")
    for folder in dict.fromkeys(Path(name) for name in (cfg.output_dir, cfg.publish_dir) if name):
        folder.mkdir(parents=True, exist_ok=True)
        write_whole(folder / "results.json",
                    lambda partial: partial.write_text(json.dumps(results, indent=2) + "\n"))
        (folder / "results.md").write_text(table)
    write_section(cfg, table)
    return table


def published(cfg: ConfirmatoryConfig) -> dict[str, Any]:
    """The results published so far (``publish_dir``'s results.json), or none yet."""
    path = Path(cfg.publish_dir or cfg.output_dir) / "results.json"
    return json.loads(path.read_text()) if path.is_file() else {"per_seed": {}, "wall_seconds": 0.0}


def confirmatory_test(cfg: ConfirmatoryConfig) -> str:
    """The seeds not yet recorded, seed after seed (``tables_only``: none), then the tables."""
    if not cfg.arms:
        raise ConfigError("arms: a confirmatory test needs its arms (name, label, pretrained, overrides), two of "
                          "them named by better and worse")
    if cfg.cost_only:
        return training_images(cfg)
    check_section(cfg)
    results = published(cfg)
    unknown = set(results["per_seed"]) - {str(seed) for seed in cfg.seeds}
    if unknown:
        raise ConfigError(f"{cfg.publish_dir} records seeds {sorted(unknown)} that seeds={list(cfg.seeds)} does not "
                          "register: a registered test's seeds do not change")
    if "classes" not in results:  # once: rewriting the tables needs no data
        results |= class_balance(FewShotRunConfig, cfg.eval_preset, (*cfg.data, *cfg.encoder))
    if cfg.tables_only:
        return publish(cfg, results)
    start, spent = time.perf_counter(), results["wall_seconds"]
    output_dir = claim_experiment(cfg)
    rates = results.setdefault("tuned_rates", {})

    def record(run: Run) -> None:
        """A tuning run's chosen rate, or the seed of ``run`` once its last run has finished, recorded and
        published at once."""
        seed = int(run.name.rsplit("-seed", 1)[1])
        if seed == cfg.tuning_seed:
            arm = next((arm.name for arm in cfg.arms if run_name(arm.name, seed) == run.name), None)
            if arm:
                rates[arm] = read_metrics(run.directory(output_dir))["chosen_lr"]
                publish(cfg, results)
            return
        finished = seed_record(cfg, seed)
        if finished is not None and str(seed) not in results["per_seed"]:
            recorded = results["per_seed"] | {str(seed): finished}
            results["per_seed"] = {str(seed): recorded[str(seed)] for seed in cfg.seeds if str(seed) in recorded}
            results["wall_seconds"] = spent + time.perf_counter() - start
            publish(cfg, results)

    seeds = [seed for seed in cfg.seeds if str(seed) not in results["per_seed"]]
    tune = cfg.tuning_seed is not None and len(rates) < len(cfg.arms) and bool(seeds)
    if cfg.time_budget_minutes and seeds:
        per_seed, tuning_minutes, timed = seed_minutes(cfg, seeds[0], rates)
        left = cfg.time_budget_minutes - (time.perf_counter() - start) / 60
        tune = tune and tuning_minutes <= left  # the rates first, alone if no seed fits after them
        left -= tuning_minutes if tune else 0.0
        fitting = seeds[:max(0, int(left // per_seed))] if tune or len(rates) == len(cfg.arms) or \
            cfg.tuning_seed is None else []
        logger.info("timed over %d steps:\n%s\na seed: %.1f min%s; %d of the %d seeds not yet recorded fit in the "
                    "%.1f minutes left: %s", cfg.timing_steps, timed, per_seed,
                    f" (the tuning seed first: {tuning_minutes:.1f} min)" if tuning_minutes else "", len(fitting),
                    len(seeds), left, fitting or "none")
        seeds = fitting
    cut = (f"train.steps={cfg.max_steps}",) if cfg.max_steps else ()
    tuning = [] if not tune else [
        run for run in plan_runs(cfg, [cfg.tuning_seed], rates, steps=cut)
        if run.name == run_name(PRETRAIN, cfg.tuning_seed) or run.name in {
            run_name(arm.name, cfg.tuning_seed) for arm in cfg.arms if arm.name not in rates}]
    try:
        execute(tuning + plan_runs(cfg, seeds, rates, steps=cut), output_dir, cfg.parallel_runs, on_finished=record)
    finally:
        results["wall_seconds"] = spent + time.perf_counter() - start
        table = publish(cfg, results)
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
