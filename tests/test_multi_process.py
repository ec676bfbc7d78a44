"""Two processes on this CPU-only machine (gloo) run the recipe as one process would, and only one of them writes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

from tests.test_recipe_mpp import RECIPE, TINY, launch

STEPS = ["train.steps=40", "train.global_batch_size=16", "train.log_every=10", "train.checkpoint_every=20",
         "train.lr=2e-3"]


TOLERANCE = 0.02  # relative, per logged loss (measured: at most 0.4% apart)


def launch_two_processes(*args: str) -> subprocess.CompletedProcess:
    # accelerate 1.15: `--cpu --num_processes 2` starts ONE process; this starts two (DistributedType.MULTI_CPU).
    command = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
               "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port",
               "29519", str(RECIPE), *args]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600,
                            env={**os.environ, "ACCELERATE_USE_CPU": "1"})
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def logged_losses(run_dir) -> list[float]:
    return [float(loss) for loss in re.findall(r"step \d+/\d+  loss (\S+)", (run_dir / "log.txt").read_text())]


def test_two_processes_follow_the_single_process_loss_curve_and_only_the_main_one_writes(tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    launch(f"output_dir={one}", *TINY, *STEPS)
    launch_two_processes(f"output_dir={two}", *TINY, *STEPS)

    metrics = json.loads((two / "metrics.json").read_text())
    log = (two / "log.txt").read_text()
    assert metrics["num_processes"] == 2 and "8 per pass x 2 process(es)" in log  # both took part
    assert metrics["images_seen"] == json.loads((one / "metrics.json").read_text())["images_seen"] == 640
    assert log.count("saved checkpoint") == 2 and log.count("step 40/40") == 1  # one writer of the log
    assert len(list(two.glob("events.out.tfevents.*"))) == 1
    assert sorted(p.name for p in (two / "checkpoints").iterdir()) == ["step_00000020", "step_00000040"]

    # The same images per step, split in two halves; corruption and views are drawn per process, so the curves
    # agree closely, not bit for bit.
    single, double = logged_losses(one), logged_losses(two)
    assert len(single) == len(double) == 4 and double[-1] < double[0] - 0.2  # it learns
    assert all(abs(a - b) <= TOLERANCE * a for a, b in zip(single, double)), (single, double)
