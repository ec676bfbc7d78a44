"""Two processes on this CPU-only machine (gloo) run the recipe as one process would, and only one of them writes."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from mpp.training.checkpoint import checkpoint_damage, list_checkpoints
from tests.launching import RECIPE, ROOT, TINY, free_port, launch, run_here, start, training_process, wait_for_log

pytestmark = [pytest.mark.slow, pytest.mark.cpu_only("two gloo processes share this machine's CPU, and accelerate "
                                                     "refuses FSDP only where there is no GPU; on a GPU, python -m "
                                                     "tools.gpu runs FSDP itself")]

STEPS = ["train.steps=20", "train.global_batch_size=16", "train.log_every=5", "train.lr=2e-3"]
INVARIANCE = 1e-5  # relative: the same images and draws, summed in another order (measured: at most 2e-7 apart)


def run_on(processes: int, *args: str) -> None:
    """The recipe's run on ``processes`` processes: launched where there are several, the launcher being under test;
    one in this process (a process start the fewer)."""
    if processes > 1:
        launch(*args, processes=processes)
    else:
        run_here(*args)


def logged_losses(run_dir) -> list[float]:
    """The loss of every logged step, at TensorBoard's float32 (the log's four decimals hide a difference)."""
    return [event.value for event in EventAccumulator(str(run_dir)).Reload().Scalars("train/loss")]


@pytest.fixture(scope="module")
def whole_run(tmp_path_factory):
    """``whole_run(processes, *settings)``: the directory of the recipe's 20-step run on ``processes`` processes, a
    checkpoint every 10 steps, run the first time a test asks for it (one run is read by two tests: the reference of
    one, the checkpointed start of the other). The tests that share them are one xdist group, on one worker."""
    runs = {}

    def run(processes: int, *settings: str):
        key = (processes, *settings)
        if key not in runs:  # kept once finished: a failed run is tried again by the next test, failing with its error
            directory = tmp_path_factory.mktemp("whole-run")
            run_on(processes, f"output_dir={directory}", *TINY, *STEPS, "train.checkpoint_every=10", *settings)
            runs[key] = directory
        return runs[key]

    return run


@pytest.mark.xdist_group("whole runs")
@pytest.mark.parametrize("micro", [[], ["train.micro_batch_size=4"]], ids=["one-pass", "accumulating"])
def test_one_and_two_processes_give_the_same_run_and_only_the_main_one_writes(whole_run, micro):
    """The global batch holds the same images, and each image's view and corruption are keyed by the seed and its
    index or place in the run, not by the process that holds it: the losses agree to rounding."""
    one, two = whole_run(1, *micro), whole_run(2, *micro)

    metrics = json.loads((two / "metrics.json").read_text())
    log = (two / "log.txt").read_text()
    assert metrics["num_processes"] == 2 and f"{4 if micro else 8} per pass x 2 process(es)" in log  # both took part
    assert metrics["images_seen"] == json.loads((one / "metrics.json").read_text())["images_seen"] == 320
    assert log.count("saved checkpoint") == 2 and log.count("step 20/20") == 1  # one writer of the log
    assert len(list(two.glob("events.out.tfevents.*"))) == 1
    assert sorted(p.name for p in (two / "checkpoints").iterdir()) == ["step_00000010", "step_00000020"]

    single, double = logged_losses(one), logged_losses(two)
    assert len(single) == 4 and double[-1] < double[0] - 0.2  # it learns
    assert double == pytest.approx(single, rel=INVARIANCE)


@pytest.mark.xdist_group("whole runs")
@pytest.mark.parametrize(("first", "then"), [(2, 1), (1, 2)], ids=["two-then-one", "one-then-two"])
def test_a_run_checkpointed_on_some_processes_and_resumed_on_others_ends_where_it_would_have(tmp_path, whole_run,
                                                                                              first, then):
    whole, resumed = whole_run(first), tmp_path / "resumed"
    shutil.copytree(whole, resumed)
    shutil.rmtree(resumed / "checkpoints" / "step_00000020")  # as if stopped after step 10
    run_on(then, f"output_dir={resumed}", *TINY, *STEPS, "train.checkpoint_every=10", "--resume")
    ended = json.loads((resumed / "metrics.json").read_text())
    assert ended["steps_this_session"] == 10 and ended["num_processes"] == then
    assert ended["loss"] == pytest.approx(json.loads((whole / "metrics.json").read_text())["loss"], rel=INVARIANCE)


def test_sigterm_to_a_two_process_run_stops_both_at_one_step_and_resume_finishes_it(tmp_path):
    run_dir = tmp_path / "run"
    args = [f"output_dir={run_dir}", *TINY, "train.steps=300", "train.log_every=5", "train.checkpoint_every=1000"]
    process = start(*args, processes=2)
    wait_for_log(run_dir / "log.txt", r"step 20/300", process)
    os.killpg(process.pid, signal.SIGTERM)  # as a scheduler: the launcher and both training processes
    _, stderr = process.communicate(timeout=300)
    stops = re.findall(r"stopped by SIGTERM after step (\d+)", stderr)
    assert len(stops) == 2 and len(set(stops)) == 1, stderr[-3000:]  # both processes, the same step
    step = int(stops[0])
    assert step % 10 == 0  # they agree every train.stop_check_every steps
    assert [p.name for p in (run_dir / "checkpoints").iterdir()] == [f"step_{step:08d}"]

    launch(*args, "--resume", processes=2)
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["step"] == 300 and metrics["steps_this_session"] == 300 - step and metrics["num_processes"] == 2


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGSTOP], ids=["killed", "frozen"])
def test_one_process_killed_or_frozen_ends_the_whole_run_soon_with_a_message(tmp_path, signum):
    """SIGKILL closes the process's connections: the other process learns at once. SIGSTOP keeps them open (as a lost
    machine would): the other waits train.collective_timeout_s, then stops."""
    run_dir = tmp_path / "run"
    process = start(f"output_dir={run_dir}", *TINY, "train.steps=100000", "train.log_every=5",
                    "train.checkpoint_every=10", "train.collective_timeout_s=5", processes=2)
    try:
        wait_for_log(run_dir / "log.txt", r"saved checkpoint .*step_00000010", process)
        os.kill(training_process(process, rank=1), signum)
        # Ends within the collective timeout (5 s) and the launcher's 30 s grace for a stopped process, or the
        # harness's limit fails the test; 100,000 steps would take the survivor hours.
        _, stderr = process.communicate(timeout=120)
    finally:
        with contextlib.suppress(ProcessLookupError):  # none left: the run ended as it should
            os.killpg(process.pid, signal.SIGKILL)  # a stopped process ignores everything else
    assert process.returncode != 0 and not (run_dir / "metrics.json").exists()
    assert "error: a collective between this run's processes failed" in stderr, stderr[-3000:]
    assert "[rank0]: Traceback" not in stderr  # the launcher's own report of the failed process stays
    checkpoints = list_checkpoints(run_dir)
    assert checkpoints and all(checkpoint_damage(path) is None for path in checkpoints)


@pytest.mark.parametrize("launch_flags", [["--use_fsdp"], ["--use_fsdp", "--fsdp_version", "2"], ["--multi_gpu"]],
                         ids=["fsdp-1-on-cpu", "fsdp-2-on-cpu", "no-group"])
def test_a_launch_accelerate_would_run_otherwise_is_refused_before_anything_is_written(tmp_path, launch_flags):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    fsdp = "--use_fsdp" in launch_flags
    if fsdp:  # accelerate 1.15 on CPU processes: version 1 stops on "no available devices", 2 runs unsharded
        env["ACCELERATE_USE_CPU"] = "1"
    else:  # without ACCELERATE_USE_CPU, on a machine without CUDA the two processes never connect
        env.pop("ACCELERATE_USE_CPU", None)
    command = [sys.executable, "-m", "accelerate.commands.launch", "-q", "--num_processes", "2", "--num_machines",
               "1", "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", str(free_port()),
               *launch_flags, str(RECIPE), f"output_dir={tmp_path / 'run'}", *TINY]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)
    assert result.returncode != 0
    expected = "--use_fsdp was given, but accelerate" if fsdp else "started 2 processes, but they did not join"
    assert f"error: accelerate launch {expected}" in result.stderr, result.stderr[-2000:]
    assert not (tmp_path / "run").exists()


def test_the_mpp_model_trains_under_torchs_fsdp2_as_unsharded(tmp_path):
    # accelerate 1.15 runs FSDP only on GPUs; torch's FSDP2 itself runs on gloo CPU processes, and the model is
    # what accelerate would hand it.
    import subprocess
    import sys

    from tests.launching import ROOT, free_port

    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
               str(free_port()), str(ROOT / "tests" / "scripts" / "fsdp2_step.py"), str(tmp_path)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 0, result.stderr[-3000:]
    records = [json.loads((tmp_path / f"process_{rank}.json").read_text()) for rank in (0, 1)]
    for rank, record in enumerate(records):
        assert record["world_size"] == 2 and record["gradients"] > 10
        reference_loss, sharded_loss = record["losses"]
        assert abs(reference_loss - sharded_loss) < 1e-5 and record["largest_gradient_difference"] < 1e-5
        assert record["pos_embed_shard"] == [1 - rank, 17, 32]  # 1 x 17 tokens: one process holds it, as sharded


def start_machine(rank: int, port: int, *args: str) -> subprocess.Popen:
    """One of two machines' launchers (one gloo process each), as on a cluster: --num_machines 2 --machine_rank."""
    command = [sys.executable, "-m", "accelerate.commands.launch", "-q", "--multi_gpu", "--num_processes", "2",
               "--num_machines", "2", "--machine_rank", str(rank), "--main_process_ip", "127.0.0.1",
               "--main_process_port", str(port), "--mixed_precision", "no", "--dynamo_backend", "no", str(RECIPE),
               *args]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "ACCELERATE_USE_CPU": "1"}
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)


MACHINE_STEPS = 80  # the two-machine run's length


def machines_stopped_by_sigterm(run_dir, args: list[str], signalled: int, at_step: int) -> int:
    """Both machines' launchers run ``args`` until the log reaches ``at_step``; then the scheduler stops one
    machine's job step (SIGTERM to ``signalled``'s process group). -> the one step after which both stopped."""
    port = free_port()
    machines = [start_machine(rank, port, *args) for rank in (0, 1)]
    wait_for_log(run_dir / "log.txt", rf"step {at_step}/{MACHINE_STEPS}", machines[0])
    os.killpg(machines[signalled].pid, signal.SIGTERM)
    errors = [machine.communicate(timeout=300)[1] for machine in machines]
    stops = re.findall(r"stopped by SIGTERM after step (\d+)", "".join(errors))
    assert stops and len(set(stops)) == 1, "\n".join(error[-2000:] for error in errors)  # one step for both
    step = int(stops[0])
    assert list_checkpoints(run_dir)[-1].name == f"step_{step:08d}"  # its checkpoint, the newest
    return step


def test_two_machines_train_one_run_stop_together_on_sigterm_to_either_and_resume(tmp_path):
    """Stopped through the second machine, resumed; stopped through the first (the main process's), resumed to the
    end: one run, one writer."""
    run_dir = tmp_path / "run"
    args = [f"output_dir={run_dir}", *TINY, f"train.steps={MACHINE_STEPS}", "train.log_every=5",
            "train.checkpoint_every=1000"]
    first_stop = machines_stopped_by_sigterm(run_dir, args, signalled=1, at_step=20)
    assert [p.name for p in (run_dir / "checkpoints").iterdir()] == [f"step_{first_stop:08d}"]  # one checkpoint
    second_stop = machines_stopped_by_sigterm(run_dir, [*args, "--resume"], signalled=0,
                                             at_step=5 * (first_stop // 5 + 3))  # a logged step, at least 11 on
    assert second_stop > first_stop

    port = free_port()
    machines = [start_machine(rank, port, *args, "--resume") for rank in (0, 1)]
    for machine in machines:
        _, stderr = machine.communicate(timeout=300)
        assert machine.returncode == 0, stderr[-3000:]
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["step"] == MACHINE_STEPS and metrics["num_processes"] == 2
    assert metrics["steps_this_session"] == MACHINE_STEPS - second_stop
    log = (run_dir / "log.txt").read_text()
    assert "2 process(es)" in log and log.count(f"step {MACHINE_STEPS}/{MACHINE_STEPS}") == 1  # one writer in all
