"""The pre-training curve (python -m study.curve): the runs it plans (one MPP run per seed, every length read
from that run's checkpoints, the raw pixels once), the table it writes from results.json (gains over initialisation
with 95% intervals), and the whole experiment end to end on tiny runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import save_file

from mpp.config.building import build_config
from mpp.config.runs import FinetuneRunConfig
from mpp.errors import ConfigError
from mpp.experiments.checks import run_config
from mpp.experiments.runner import claim_experiment
from mpp.models.encoder import create_encoder
from mpp.run import write_metrics
from mpp.training.checkpoint import checkpoint_path
from study.curve import (
    encoder_similarities,
    finished_run,
    last_fifths_training_accuracy,
    plan_runs,
    pretraining_steps_per_epoch,
    swept_grid,
)
from study.curve_config import LONGER, PretrainingCurveConfig
from study.curve_tables import curve_table, finetuned_table
from tests.launching import ROOT, run_module_here

CONFIGS = ROOT / "recipes" / "configs"
FINETUNED = {"finetune_preset": str(CONFIGS / "finetune_tiny_cpu.yaml"), "finetune_steps": 4,
             "finetune": ["train.steps=4", "train.global_batch_size=8", "train.warmup_steps=1", "train.log_every=2",
                          "finetune.sweep_lrs=[]"],
             "scratch_finetune": ["train.warmup_steps=2"]}
TINY = {  # 40 shapes images (4 per class), a one-block ViT on 16x16 images, batches of 8: 5 steps an epoch
    "mpp_preset": str(CONFIGS / "mpp_tiny_cpu.yaml"), "eval_preset": str(CONFIGS / "eval_tiny_cpu.yaml"),
    "data": ["data.shots_per_class=4"],
    "encoder": ["model.img_size=16", "model.embed_dim=16", "model.depth=1", "model.num_heads=2"],
    "mpp": ["train.global_batch_size=8", "train.warmup_steps=1", "train.log_every=5", "mpp.downsampled_size=2"],
    "epochs": [1, 2], "few_shot": ["few_shot.shots=[1]", "few_shot.seeds=2", "few_shot.holdout_per_class=1"],
    "linear_probe": ["linear_probe.max_iterations=5"], "parallel_runs": 2,
}


def tiny_config(tmp_path: Path, **changes) -> PretrainingCurveConfig:
    preset = tmp_path / "curve.yaml"
    preset.write_text(yaml.safe_dump({**TINY, "output_dir": str(tmp_path / "curve"), **changes}))
    return build_config(PretrainingCurveConfig, preset)


def test_one_pre_training_run_per_seed_is_read_at_initialisation_and_at_each_epochs_checkpoint(tmp_path):
    cfg = tiny_config(tmp_path, seeds=[3, 7])
    assert pretraining_steps_per_epoch(cfg) == 5
    planned = plan_runs(cfg, 5)
    assert [run.name for run in planned[:2]] == ["pretrain/mpp-seed3", "pretrain/mpp-seed7"]  # the longest first
    runs = {run.name: run for run in planned}
    assert len(runs) == 2 + 2 * (1 + 2 * 3)  # the pixels twice; per seed: pre-training, 2 protocols x 3 lengths
    for seed in (3, 7):
        pretraining = run_config(runs[f"pretrain/mpp-seed{seed}"])
        assert (pretraining.train.steps, pretraining.train.checkpoint_every) == (10, 5)  # 2 epochs, one a checkpoint
        assert pretraining.train.keep_checkpoints >= 2 and pretraining.monitor.few_shot_every == 0
        for stage in ("probe", "few_shot"):
            assert runs[f"{stage}/epoch0-seed{seed}"].after is None
            for epochs in (1, 2):
                run = runs[f"{stage}/epoch{epochs}-seed{seed}"]
                assert run.after == f"pretrain/mpp-seed{seed}"
                assert f"init={cfg.output_dir}/pretrain/mpp-seed{seed}/checkpoints/step_{5 * epochs:08d}/" \
                       "model.safetensors" in run.command
    for run in runs.values():  # every command is a valid command line of its recipe
        config = run_config(run)
        assert config.output_dir == f"{cfg.output_dir}/{run.name}"
        if run.stage != "pretrain":
            assert config.eval.features == ("pixels" if "pixels" in run.name else "avg")
            assert config.eval.feature_cache == f"{cfg.output_dir}/feature-cache"
    with pytest.raises(ConfigError, match="epochs=\\[2, 1\\] must list whole epochs"):
        tiny_config(tmp_path, epochs=[2, 1])


def test_a_curve_read_at_a_few_lengths_continues_at_more_checkpoints_of_the_same_pre_training_runs(tmp_path):
    cfg = tiny_config(tmp_path, epochs=[1], pretraining_epochs=4)
    pretraining = plan_runs(cfg, 5)[0]
    mpp = run_config(pretraining)
    assert (mpp.train.steps, mpp.train.keep_checkpoints) == (20, 5)  # 4 epochs of 5 steps, every epoch's checkpoint
    claim_experiment(cfg)
    finished = Path(cfg.output_dir) / pretraining.name  # a run finished: its settings are the experiment's now
    finished.mkdir(parents=True)
    (finished / "metrics.json").write_text("{}")
    longer = tiny_config(tmp_path, epochs=[1, 2, 4], pretraining_epochs=4)
    claim_experiment(longer)  # more lengths of the same runs: continued
    assert plan_runs(longer, 5)[0].command == pretraining.command
    with pytest.raises(ConfigError, match="holds an experiment with other settings"):
        claim_experiment(tiny_config(tmp_path, epochs=[1, 2]))  # runs of 2 epochs: others
    with pytest.raises(ConfigError, match="pretraining_epochs=4: set pretraining_epochs to 8 or more"):
        tiny_config(tmp_path, epochs=[1, 8], pretraining_epochs=4)


def test_the_table_reads_every_length_and_the_gain_over_initialisation_with_its_interval():
    results = {"seeds": [0, 1, 2], "features": "avg", "classes": 10,
               "curve": {"0": {"linear_probe": [0.70, 0.71, 0.72], "5-shot": [0.40, 0.42, 0.41]},
                         "4": {"linear_probe": [0.75, 0.77, 0.79], "5-shot": [0.40, 0.43, 0.40]}},
               "pixels": {"linear_probe": 0.8, "5-shot": 0.45}}
    table = curve_table(results)
    assert "| MPP pre-training (3 seeds, avg features) | linear probe, all labels | 5-shot |" in table
    assert "| none (initialisation) | 71.0 ± 1.0 | 41.0 ± 1.0 |" in table
    assert "| 4 epochs | 77.0 ± 2.0 | 41.0 ± 1.7 |" in table
    assert "| raw pixels, no encoder | 80.0 | 45.0 |" in table
    # Gains +5, +6, +7: mean 6, sd 1, t(0.975, 2) = 4.303: 6 ± 2.48; t = 6 sqrt(3), p = 1 - t / sqrt(2 + t^2) = 0.0091.
    # Gains 0, +1, -1: not shown.
    assert "| 4 epochs | +6.0 [+3.5, +8.5], shown (p 0.0091) | +0.0 [-2.5, +2.5], not shown (p 1; power 0.8 " \
           "needs more than 1000 seeds at this mean and SD) |" in table
    assert "Gain of 4 epochs over a shorter" not in table  # one length: no shorter one to grow from
    assert table.endswith("These tables read 2 comparisons, 1 shown each on its own; after a Holm correction across "
                          "all 2 (5% family-wise), 1 stays shown: 4 epochs over initialisation (linear probe, all "
                          "labels: Holm p 0.018).\n")  # 2 x 0.0091


def test_the_longest_pre_training_is_read_against_each_shorter_one_and_holm_counts_every_gain():
    results = {"seeds": [0, 1, 2], "features": "avg", "classes": 10,
               "curve": {"0": {"linear_probe": [0.70, 0.71, 0.72]}, "1": {"linear_probe": [0.72, 0.74, 0.76]},
                         "2": {"linear_probe": [0.75, 0.78, 0.79]}},
               "pixels": {"linear_probe": 0.8}}
    table = curve_table(results)
    assert "| Gain of 2 epochs over a shorter pre-training, points | linear probe, all labels |" in table
    # 2 epochs against 1: +3, +4, +3: mean 3.33, sd 0.577, 3.33 ± 4.303 x 0.333 = [+1.9, +4.8].
    assert "| against 1 epoch | +3.3 [+1.9, +4.8], shown (p 0.0" in table
    assert "These tables read 3 comparisons, 3 shown each on its own;" in table  # 1 and 2 over initialisation, 2 over 1


@pytest.mark.slow
@pytest.mark.many_runs
@pytest.mark.usefixtures("experiment_runs_here")
def test_the_whole_curve_runs_writes_its_table_and_plot_and_a_rerun_redoes_nothing(tmp_path):
    preset = tmp_path / "curve.yaml"
    page = tmp_path / "results.md"
    page.write_text("# Title\n<!-- results: curve -->\n<!-- /results: curve -->\n")
    # Two blocks: what fine-tuning keeps is read per block, and the table reads the first and the last.
    two_blocks = [override.replace("model.depth=1", "model.depth=2") for override in TINY["encoder"]]
    # One length read besides initialisation: each length is read alike, and planning every length is tested above.
    preset.write_text(yaml.safe_dump({**TINY, **FINETUNED, "seeds": [0, 1], "output_dir": str(tmp_path / "curve"),
                                      "results_page": str(page), "encoder": two_blocks, "epochs": [2]}))
    command = ["study.curve", "--config", str(preset)]  # the experiment and its runs in this process
    result = run_module_here(*command)
    assert "16 runs, 0 already finished" in result.stderr
    results = json.loads((tmp_path / "curve" / "results.json").read_text())
    assert list(results["curve"]) == ["0", "2"] and results["steps_per_epoch"] == 5
    for figures in results["curve"].values():
        assert set(figures) == {"linear_probe", "linear_probe_balanced", "1-shot"}
        assert all(0 <= value <= 1 for values in figures.values() for value in values) and len(figures["1-shot"]) == 2
    assert results["classes"] == 10
    for epochs, entry in results["finetuned"].items():  # each length in epochs and steps, beside its fine-tuned runs
        assert entry["epochs"] == int(epochs) and entry["pretraining_steps"] == 5 * int(epochs)
        assert entry["scratch"]["steps"] == [5 * int(epochs) + 4] * 2 and entry["finetune"]["steps"] == [4, 4]
        assert all(0 < value < 1 for value in entry["mpp_accuracy"])  # logged at the epoch's end
        for similarity in ("kept_similarity", "similarity_to_scratch"):  # per seed, per block
            assert [len(blocks) for blocks in entry[similarity]] == [2, 2]
            assert all(0 <= value <= 1 for blocks in entry[similarity] for value in blocks)
        assert len(entry["weight_change"]) == 2 and all(value >= 0 for value in entry["weight_change"])
    assert results["similarity_images"] == 256
    table = (tmp_path / "curve" / "results.md").read_text()
    assert "Fine-tuned (exploratory):" in table and "| 2 epochs (10 steps) |" in table
    assert "What fine-tuning keeps of MPP's encoder" in table and "| Weight change, % |" in table
    assert "| 2 epochs |" in table and f"<!-- results: curve -->\n{table}" in page.read_text()
    assert (tmp_path / "curve" / "pretraining_curve.png").read_bytes().startswith(b"\x89PNG")
    again = run_module_here(*command)
    assert again.returncode == 0 and "16 runs, 16 already finished" in again.stderr
    # The registration's plateau reading: scratch (14 steps, logged every 2) logs a step in its last fifth.
    assert all(0 <= value <= 1 for entry in results["finetuned"].values()
               for value in entry["scratch"]["train_accuracy_last_fifth"])

    # The finished curve continued with a longer fine-tuning of the longest length: its two runs alone run.
    longer = run_module_here(*command, "longer_finetune_steps=8", check=False)
    assert longer.returncode == 0 and "18 runs, 16 already finished" in longer.stderr, longer.stderr[-3000:]
    finetuned = json.loads((tmp_path / "curve" / "results.json").read_text())["finetuned"]
    assert finetuned["2"][LONGER]["steps"] == [8, 8]
    assert [len(blocks) for blocks in finetuned["2"][LONGER]["kept_similarity"]] == [2, 2]  # per seed, per block
    table = (tmp_path / "curve" / "results.md").read_text()
    assert "MPP's encoder after 2 epochs fine-tuned 8 steps instead of 4, by the same recipe: 18 steps in all" in table
    assert "These tables read 3 fine-tuned comparisons" in table  # the length's gain and the longer's two


def test_fine_tuned_the_encoder_at_each_length_meets_a_vit_from_scratch_trained_as_long(tmp_path):
    cfg = tiny_config(tmp_path, seeds=[3, 7], **FINETUNED)
    planned = plan_runs(cfg, 5)
    names = [run.name for run in planned]
    # Pre-training first, then the runs from scratch, the longest first (they need no pre-training), then the rest.
    assert names[:4] == ["pretrain/mpp-seed3", "pretrain/mpp-seed7", "scratch/epoch2-seed3", "scratch/epoch2-seed7"]
    assert len(planned) == 2 + 2 * (1 + 2 * 3) + 2 * 2 * 2  # the frozen curve's, then per seed and length two runs
    runs = {run.name: run for run in planned}
    for seed in (3, 7):
        pretraining = run_config(runs[f"pretrain/mpp-seed{seed}"])
        assert pretraining.train.log_every == 5  # MPP's accuracy logged at every epoch's end
        for epochs in (1, 2):
            finetuned, scratch = runs[f"finetune/epoch{epochs}-seed{seed}"], runs[f"scratch/epoch{epochs}-seed{seed}"]
            assert finetuned.after == f"pretrain/mpp-seed{seed}" and scratch.after is None
            assert f"init={cfg.output_dir}/pretrain/mpp-seed{seed}/checkpoints/step_{5 * epochs:08d}/" \
                   "model.safetensors" in finetuned.command
            from_scratch = run_config(scratch)
            assert from_scratch.train.steps == 5 * epochs + 4 and from_scratch.init == ""  # as long as both together
            assert from_scratch.train.warmup_steps == 2 and from_scratch.data.subset_seed == seed
            assert run_config(finetuned).train.steps == 4
    # tune_once: the first seed's sweep chooses each run's rate, at each length; the other seeds train at it.
    once = {run.name: run for run in plan_runs(tiny_config(tmp_path, seeds=[3, 7], tune_once=True, **{
        **FINETUNED, "finetune": [*FINETUNED["finetune"][:-1], "finetune.sweep_lrs=[0.01,0.1]"]}), 5)}
    for start in ("finetune", "scratch"):
        assert once[f"{start}/epoch2-seed3"].also_after == () and "finetune.sweep_lrs=[]" not in \
            once[f"{start}/epoch2-seed3"].command
        later = once[f"{start}/epoch2-seed7"]
        assert later.also_after == (f"{start}/epoch2-seed3",)
        assert f"finetune.lr_from={cfg.output_dir}/{start}/epoch2-seed3" in later.command
    with pytest.raises(ConfigError, match="finetune_steps must give the fine-tuning's optimizer steps"):
        tiny_config(tmp_path, **{**FINETUNED, "finetune_steps": 0})


def test_the_longest_lengths_encoder_is_also_fine_tuned_longer_in_runs_a_finished_curve_adds(tmp_path):
    tuned_once = {**FINETUNED, "finetune": [*FINETUNED["finetune"][:-1], "finetune.sweep_lrs=[0.01,0.1]"]}
    cfg = tiny_config(tmp_path, seeds=[3, 7], tune_once=True, **tuned_once)
    claim_experiment(cfg)
    longer_cfg = tiny_config(tmp_path, seeds=[3, 7], tune_once=True, longer_finetune_steps=12, **tuned_once)
    claim_experiment(longer_cfg)  # the same experiment, continued with the longer runs
    planned = plan_runs(longer_cfg, 5)
    longer = [run for run in planned if run.stage == LONGER]
    assert [run for run in planned if run not in longer] == plan_runs(cfg, 5)  # no run of the curve changes
    assert [run.name for run in longer] == [f"{LONGER}/epoch2-seed3", f"{LONGER}/epoch2-seed7"]  # the longest alone
    for run, seed in zip(longer, (3, 7), strict=True):
        assert run.after == f"pretrain/mpp-seed{seed}"
        assert f"init={cfg.output_dir}/pretrain/mpp-seed{seed}/checkpoints/step_00000010/model.safetensors" \
               in run.command
        tuned = run_config(run)
        assert tuned.train.steps == 12 and tuned.train.warmup_steps == 1  # the same recipe, only longer
    assert longer[0].also_after == () and "finetune.sweep_lrs=[0.01,0.1]" in longer[0].command  # its own sweep
    assert longer[1].also_after == (f"{LONGER}/epoch2-seed3",)
    (Path(cfg.output_dir) / longer[0].name).mkdir(parents=True)
    write_metrics(Path(cfg.output_dir) / longer[0].name, {"step": 12, "chosen_lr": 0.03})  # inside its grid
    assert plan_runs(longer_cfg, 5)  # finished at the steps asked: read as it is
    other = tiny_config(tmp_path, seeds=[3, 7], tune_once=True, longer_finetune_steps=20, **tuned_once)
    with pytest.raises(ConfigError, match="fine-tuned 12 steps, not longer_finetune_steps=20: set it back to 12"):
        plan_runs(other, 5)  # another length under a finished run would be read as this one
    for steps, fix in ((4, "more steps than finetune_steps=4"), (12, "needs a finetune_preset")):
        with pytest.raises(ConfigError, match=fix):
            tiny_config(tmp_path, longer_finetune_steps=steps, **(FINETUNED if steps == 4 else {}))


def test_a_lengths_rate_chosen_at_its_grids_edge_is_swept_again_over_a_widened_grid_and_its_results_read(tmp_path):
    cfg = tiny_config(tmp_path, seeds=[3, 7], tune_once=True, **{
        **FINETUNED, "finetune": [*FINETUNED["finetune"][:-1], "finetune.sweep_lrs=[0.01,0.1]"]})
    output_dir = Path(cfg.output_dir)

    def finish(name: str, **metrics) -> None:
        (output_dir / name).mkdir(parents=True)
        write_metrics(output_dir / name, metrics)

    finish("scratch/epoch2-seed3", chosen_lr=0.1)  # the top of its grid
    finish("finetune/epoch2-seed3", chosen_lr=0.1 / 3)  # inside: not widened
    runs = {run.name: run for run in plan_runs(cfg, 5)}
    assert "finetune/epoch2-seed7" in runs and "finetune/epoch2-widened1-seed3" not in runs
    widened = runs["scratch/epoch2-widened1-seed3"]
    assert "finetune.sweep_lrs=[0.01,0.1,0.3]" in widened.command and "scratch/epoch2-seed7" not in runs
    later = runs["scratch/epoch2-widened1-seed7"]  # the other seed trains at the widened sweep's rate
    assert later.also_after == ("scratch/epoch2-widened1-seed3",) and "finetune.sweep_lrs=[0.01,0.1,0.3]" not in \
        later.command
    assert finished_run(cfg, "scratch", 2, 7) == "scratch/epoch2-seed7"  # the results read the last finished grid
    finish("scratch/epoch2-widened1-seed3", chosen_lr=0.1)
    assert finished_run(cfg, "scratch", 2, 7) == "scratch/epoch2-widened1-seed7"
    assert finished_run(cfg, "finetune", 2, 7) == "finetune/epoch2-seed7"


def test_the_fine_tuned_tables_read_mpp_against_its_floor_its_gain_over_scratch_and_what_fine_tuning_kept():
    def runs(balanced: list[float], train: list[float]) -> dict:
        return {"accuracy": balanced, "balanced_accuracy": balanced, "lr": [0.1, 0.1, 0.1], "steps": [9, 9, 9],
                "train_accuracy": train}

    results = {"seeds": [0, 1, 2], "mpp_majority_class_accuracy": [0.02, 0.03, 0.025], "finetuned": {
        "1": {"epochs": 1, "pretraining_steps": 5, "mpp_accuracy": [0.2, 0.3, None],
              "finetune": runs([0.50, 0.52, 0.54], [0.6, 0.7, 0.8]),
              "scratch": runs([0.40, 0.41, 0.42], [0.9, 0.95, 1.0])}}}
    table = finetuned_table(results)
    assert "| MPP pre-training (3 seeds) | MPP accuracy (most frequent colour: 2.5) |" in table
    # Gains +10, +11, +12: mean 11, SD 1, 11 ± 4.303 / sqrt(3) = [+8.5, +13.5]; a seed without a log point left out.
    # Each arm's training accuracy, fine-tuning MPP's then scratch's.
    assert ("| 1 epoch (5 steps) | 25.0 ± 7.1 | 52.0 ± 2.0 | 41.0 ± 1.0 | 70.0 ± 10.0 | 95.0 ± 5.0 | —; — | +11.0 "
            "[+8.5, +13.5], shown" in table)  # written before the last fifth was read: no rise
    assert "| 0.1 x3; 0.1 x3 |" in table and "(grid edge)" not in table  # no grid recorded: nothing to mark
    assert "What fine-tuning keeps" not in table  # results.json written before it was measured: no such table
    # The training accuracy a fifth before the end: MPP's rose 20, 30 and 40 points since, scratch's 0, 1 and 2.
    results["finetuned"]["1"]["finetune"]["train_accuracy_last_fifth"] = [0.4, 0.4, 0.4]
    results["finetuned"]["1"]["scratch"]["train_accuracy_last_fifth"] = [0.9, 0.94, 0.98]
    assert "| 95.0 ± 5.0 | +30.0 ± 10.0; +1.0 ± 1.0 | +11.0" in finetuned_table(results)
    results["finetuned"]["1"]["scratch"]["train_accuracy_last_fifth"][1] = None  # no log step in its last fifth
    assert "| +30.0 ± 10.0; — | +11.0" in finetuned_table(results)
    results["finetuned"]["1"]["finetune"]["lr_grid"] = [0.03, 0.1, 0.3]
    results["finetuned"]["1"]["scratch"] |= {"lr": [0.3, 0.3, 0.3], "lr_grid": [0.03, 0.1, 0.3]}
    table = finetuned_table(results)
    assert "| 0.1 x3; 0.3 (grid edge) x3 |" in table  # scratch's rate at its grid's top: marked, with the legend
    assert "(grid edge): the lowest or the highest rate of the grid its length swept" in table

    results["similarity_images"] = 256
    results["finetuned"]["1"] |= {"kept_similarity": [[0.9, 0.5], [0.8, 0.4], [0.7, 0.3]],
                                  "similarity_to_scratch": [[0.1, 0.6], [0.2, 0.7], [0.3, 0.8]],
                                  "weight_change": [0.1, 0.2, 0.3]}
    table = finetuned_table(results)
    assert "of each block's mean patch token on 256 test images" in table
    assert ("| MPP pre-training (3 seeds) | Kept CKA, first block | Kept CKA, last block | Last block's CKA to scratch "
            "| Weight change, % |\n|---|---:|---:|---:|---:|\n| 1 epoch | 0.800 ± 0.100 | 0.400 ± 0.100 | "
            "0.700 ± 0.100 | 20.0 ± 10.0 |\n") in table
    assert "fine-tuned 90 steps" not in table  # no longer fine-tuning: no such table
    # The fine-tuned gains are one family of their own, Holm-corrected apart from the frozen readings: here one.
    assert ("These tables read 1 fine-tuned comparisons, 1 shown each on its own; after a Holm correction across these "
            "1 alone (5% family-wise), 1 stays shown: 1 epoch (5 steps) (MPP's fine-tuned gain, points: Holm p 0.0027)."
            ) in table

    # The longest length fine-tuned 90 steps too: balanced 45, 48, 49 against scratch's 40, 41, 42 (+5, +7, +7:
    # +6.3, SD 1.15, 6.3 ± 4.303 x 1.15 / sqrt(3) = [+3.5, +9.2], t 9.5 on 2 df: p 0.011) and the short fine-tuning's
    # 50, 52, 54 (-5, -4, -5: -4.7, SD 0.58, t 14.0: p 0.0051).
    results["finetuned"]["1"][LONGER] = {**runs([0.45, 0.48, 0.49], [0.97, 0.98, 0.99]), "steps": [90, 90, 90],
                                         "kept_similarity": [[0.9, 0.2], [0.8, 0.3], [0.7, 0.4]],
                                         "weight_change": [0.3, 0.4, 0.5]}
    table = finetuned_table(results)
    assert ("MPP's encoder after 1 epoch fine-tuned 90 steps instead of 9, by the same recipe: 95 steps in all "
            "against the 9 of the ViT from scratch above") in table
    # Its gain over scratch in top-1 beside (the stand-in's accuracies are its balanced ones), outside Holm's count.
    assert ("| 1 epoch | 90 | 47.3 ± 2.1 | 98.0 ± 1.0 | — | +6.3 [+3.5, +9.2], shown (p 0.011) | +6.3 [+3.5, +9.2], "
            "shown (p 0.011) | -4.7 [-6.1, -3.2], shown (p 0.0051) | 0.300 ± 0.100 | 40.0 ± 10.0 | 0.1 x3 |") in table
    # Holm across the three (p 0.0027, 0.011, 0.0051): 3 x 0.0027, 2 x 0.0051, then 0.011: all stay shown.
    assert "after a Holm correction across these 3 alone (5% family-wise), 3 stay shown: " in table
    assert "1 epoch (Gain over scratch, points: Holm p 0.011); 1 epoch (Gain over the fine-tuning of 9 steps, " in table


def test_the_plateau_reading_is_the_training_accuracy_logged_first_in_the_last_fifth_of_the_steps(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    with SummaryWriter(tmp_path) as writer:  # a run of 10 steps of 8 images, logged every 2 steps, x: images seen
        for step in range(2, 11, 2):
            writer.add_scalar("train/train_accuracy", step / 10, global_step=8 * step)
            writer.add_scalar("train/loss", 1 - step / 10, global_step=8 * step)
    # The last fifth starts after 8 steps (64 images): the point logged there is the first of it.
    assert last_fifths_training_accuracy(tmp_path, {"step": 10, "global_batch_size": 8}) == pytest.approx(0.8)
    assert last_fifths_training_accuracy(tmp_path, {"step": 9, "global_batch_size": 8}) == pytest.approx(0.8)
    assert last_fifths_training_accuracy(tmp_path, {"step": 20, "global_batch_size": 8}) is None  # none logged there
    # A run of 6 steps: of its log steps (2, 4, 6) only the last falls in its last fifth, no span to read a rise on.
    assert last_fifths_training_accuracy(tmp_path, {"step": 6, "global_batch_size": 8}) is None


def test_a_lengths_grid_is_the_rates_its_first_seeds_sweep_tried():
    swept = {"sweep_holdout_balanced_accuracy": {"0.1": 0.4, "0.01": 0.5, "0.03": 0.3}}
    others = {"sweep_holdout_balanced_accuracy": None}  # tune_once: trained at the first seed's rate
    assert swept_grid([swept, others, others]) == [0.01, 0.03, 0.1]
    assert swept_grid([others, others]) == [] and swept_grid([{}, {}]) == []  # no sweep: none recorded


def test_what_fine_tuning_keeps_reads_the_mpp_checkpoint_against_each_runs_last_weights(tmp_path):
    cfg = tiny_config(tmp_path, seeds=[3], longer_finetune_steps=40, **FINETUNED)
    output_dir = Path(cfg.output_dir)
    model = build_config(FinetuneRunConfig, cfg.finetune_preset, (*cfg.data, *cfg.encoder, *cfg.finetune)).model
    head = {"head.weight": torch.zeros(10, 16), "head.bias": torch.zeros(10)}  # a classifier's, left out

    def save(run: str, step: int, encoder: dict[str, torch.Tensor], others: dict[str, torch.Tensor]) -> None:
        """A checkpoint's model.safetensors as the recipes write it: the encoder's weights under ``encoder.``."""
        checkpoint_path(output_dir / run, step).mkdir(parents=True)
        save_file({**{f"encoder.{name}": value.clone() for name, value in encoder.items()}, **others},
                  checkpoint_path(output_dir / run, step) / "model.safetensors")
        if not run.startswith("pretrain"):  # a finished run, its last step recorded
            write_metrics(output_dir / run, {"step": step})

    for epochs in (1, 2):  # 5 steps an epoch; the fine-tuning runs end at step 4, scratch's at 5 L + 4
        mpp = create_encoder(model).state_dict()
        save("pretrain/mpp-seed3", 5 * epochs, mpp, {"mask_embedding": torch.zeros(16)})
        save("pretrain/mpp-seed3", 5 * epochs + 1, create_encoder(model).state_dict(), {})  # another step: not read
        # Fine-tuning left the 1-epoch encoder as it was and scaled every weight of the 2-epoch one by 1.1; scratch
        # ended at another initialisation, and at 2 epochs at that fine-tuned encoder itself.
        tuned = mpp if epochs == 1 else {name: 1.1 * value for name, value in mpp.items()}
        save(f"finetune/epoch{epochs}-seed3", 4, tuned, head)
        save(f"scratch/epoch{epochs}-seed3", 5 * epochs + 4, create_encoder(model).state_dict() if epochs == 1
             else tuned, head)
    # The longest length's longer fine-tuning scaled every weight by 1.3.
    save(f"{LONGER}/epoch2-seed3", 40, {name: 1.3 * value for name, value in mpp.items()}, head)
    similarities, images = encoder_similarities(cfg, 5)
    assert images == 256
    assert similarities["1"]["kept_similarity"] == [[pytest.approx(1, abs=1e-9)]]  # one block, one seed
    assert similarities["1"]["weight_change"] == [0]
    assert similarities["1"]["similarity_to_scratch"][0][0] < 0.95  # another initialisation: 0.85
    assert similarities["2"]["kept_similarity"][0][0] < 1 - 1e-6  # MPP's weights scaled, through layer norms
    assert similarities["2"]["weight_change"] == [pytest.approx(0.1, abs=1e-6)]
    assert similarities["2"]["similarity_to_scratch"] == [[pytest.approx(1, abs=1e-9)]]
    assert LONGER not in similarities["1"]  # the longest length alone
    assert similarities["2"][LONGER]["weight_change"] == [pytest.approx(0.3, abs=1e-6)]
    assert len(similarities["2"][LONGER]["kept_similarity"][0]) == 1  # per seed, per block


def synthetic_curve(balanced_like_plain: bool, largest_class: float) -> dict:
    """Curve results of two lengths and two seeds: the linear probe's balanced accuracy equal to its accuracy (balanced
    classes) or not, the test split's largest class this share."""
    def figures(plain: list[float]) -> dict:
        balanced = plain if balanced_like_plain else [value - 0.1 for value in plain]
        return {"linear_probe": plain, "linear_probe_balanced": balanced, "5-shot": [value - 0.05 for value in plain]}

    return {"curve": {"0": figures([0.30, 0.32]), "1": figures([0.40, 0.41])}, "classes": 10,
            "pixels": {measure: values[0] for measure, values in figures([0.5]).items()},
            "majority_class_accuracy": largest_class}


def test_the_curve_plot_draws_every_line_its_legend_names_and_each_accuracys_floor():
    from study.curve_tables import curve_figure

    figure = curve_figure(synthetic_curve(balanced_like_plain=True, largest_class=0.1))
    labels = [text.get_text() for text in figure.legends[0].get_texts()]
    assert labels == ["linear probe, all labels (= its balanced accuracy)", "5-shot", "chance",
                      "raw pixels (each measure's colour)"]  # equal lines merged: none hidden under another
    drawn = [tuple(line.get_ydata()) for line in figure.axes[0].get_lines() if len(line.get_ydata())]
    assert len(drawn) == len(set(drawn))

    figure = curve_figure(synthetic_curve(balanced_like_plain=False, largest_class=0.376))
    labels = [text.get_text() for text in figure.legends[0].get_texts()]
    assert labels[:2] == ["linear probe, all labels", "its balanced accuracy"]
    assert "always the largest class (37.6%, plain accuracy's floor)" in labels  # unbalanced: plain accuracy's floor
    assert "chance (balanced accuracy's floor)" in labels
    assert 37.6 in [round(line.get_ydata()[0], 1) for line in figure.axes[0].get_lines() if len(line.get_ydata())]
