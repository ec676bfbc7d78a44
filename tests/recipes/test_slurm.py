"""recipes/slurm.sbatch's requeue path on this machine: the script run as SLURM would run it on one node (its
environment variables set, srun and scontrol standing in), with two gloo processes."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.launching import RECIPE, ROOT, TINY, free_port, wait_for_log

pytestmark = [pytest.mark.slow,
              pytest.mark.cpu_only("two gloo processes on this machine's CPU stand in for a node's GPUs")]

SCRIPT = ROOT / "recipes" / "slurm.sbatch"


def one_node_allocation(tmp_path: Path) -> dict[str, str]:
    """The environment of a one-node job: SLURM's variables, and srun and scontrol as this machine's stand-ins (srun
    runs its command once, here; scontrol names this host and records what else it is asked)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text('#!/bin/bash\nwhile [[ $1 == --* ]]; do shift; done\nexec "$@"\n')
    (bin_dir / "scontrol").write_text(f'#!/bin/bash\nif [[ $1 == show ]]; then echo localhost; '
                                      f'else echo "$@" >> {tmp_path / "scontrol.txt"}; fi\n')
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{Path(sys.executable).parent}:{os.environ['PATH']}",
            "PYTHONPATH": str(ROOT), "SLURM_JOB_ID": "42", "SLURM_NNODES": "1", "SLURM_NODEID": "0",
            "SLURM_JOB_NODELIST": "localhost", "MPP_PROCESSES_PER_NODE": "2", "MPP_MAIN_PORT": str(free_port()),
            "ACCELERATE_USE_CPU": "1"}


def test_a_job_signalled_before_its_time_limit_checkpoints_requeues_itself_and_the_requeued_job_finishes(tmp_path):
    run_dir = tmp_path / "run"
    job = ["bash", str(SCRIPT), str(RECIPE), f"output_dir={run_dir}", *TINY, "train.steps=80", "train.log_every=5",
           "train.checkpoint_every=1000"]
    env = one_node_allocation(tmp_path)
    first = subprocess.Popen(job, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                             start_new_session=True)
    wait_for_log(run_dir / "log.txt", r"step 20/80", first)
    os.kill(first.pid, signal.SIGUSR1)  # SLURM, 5 minutes before the limit (#SBATCH --signal=B:USR1@300)
    stdout, stderr = first.communicate(timeout=300)
    assert first.returncode == 0, stderr[-3000:]
    assert "2 processes on 1 node(s)" in stdout and "requeued job 42" in stdout
    assert (tmp_path / "scontrol.txt").read_text().split() == ["requeue", "42"]
    stops = re.findall(r"stopped by SIGTERM after step (\d+)", stderr)
    assert len(stops) == 2 and len(set(stops)) == 1, stderr[-3000:]  # both processes, at one step
    step = int(stops[0])
    assert [p.name for p in (run_dir / "checkpoints").iterdir()] == [f"step_{step:08d}"]
    assert not (run_dir / "metrics.json").exists()

    second = subprocess.run(job, capture_output=True, text=True, env=env, timeout=600)  # the requeued job
    assert second.returncode == 0, second.stderr[-3000:]
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["step"] == 80 and metrics["steps_this_session"] == 80 - step and metrics["num_processes"] == 2
    assert (tmp_path / "scontrol.txt").read_text().split() == ["requeue", "42"]  # a finished run is not requeued
