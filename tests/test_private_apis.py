"""Each private API of the libraries underneath (mpp/private_apis.py) still exists and still does what the package
relies on: a release that changes one fails here, by name."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.distributed as dist
from accelerate import Accelerator
from accelerate.state import is_initialized
from accelerate.data_loader import prepare_data_loader
from accelerate.utils import SAFE_WEIGHTS_NAME, fsdp2_load_full_state_dict
from safetensors.torch import load_file
from timm.data.mixup import Mixup
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.utils.data import DataLoader, TensorDataset

from devices import USE_CPU
from mpp.models.encoder import create_encoder
from mpp.private_apis import (
    accelerate_launch_variable,
    launched_on_cpu,
    launched_with_fsdp,
    add_position_embeddings,
    capturable_optimizer_devices,
    forget_accelerate_state,
    forget_prepared_loader,
    fused_optimizer_devices,
    leave_process_group_to_launcher,
    mixup_batch_parameters,
    prepared_models_and_optimizers,
    process_share_of_batches,
    saved_model_file,
    seedable_shuffle,
    tell_fused_optimizer_whether_to_skip,
    with_fsdp2_tensor_lookup,
)


def test_accelerate_lists_what_it_prepared_and_save_state_writes_without_a_forgotten_loader(tmp_path):
    accelerator = Accelerator(cpu=USE_CPU)
    layer = torch.nn.Linear(2, 2)
    model, optimizer = accelerator.prepare(layer, torch.optim.SGD(layer.parameters(), lr=0.1))
    models, optimizers = prepared_models_and_optimizers(accelerator)
    assert models == [model] and optimizers == [optimizer]
    loader = accelerator.prepare(DataLoader(TensorDataset(torch.arange(8.0)), batch_size=2))
    forget_prepared_loader(accelerator, loader)
    with pytest.raises(ValueError):  # it was on accelerate's list of loaders to checkpoint, and is no longer
        forget_prepared_loader(accelerator, loader)
    accelerator.save_state(str(tmp_path / "state"))
    assert {"model.safetensors", "optimizer.bin"} <= {path.name for path in (tmp_path / "state").iterdir()}


def test_forgetting_accelerates_state_lets_the_next_accelerator_take_other_settings():
    Accelerator(cpu=USE_CPU, mixed_precision="no")
    with pytest.raises(ValueError, match="already been initialized"):  # accelerate's shared state refuses a change
        Accelerator(cpu=USE_CPU, mixed_precision="bf16")
    forget_accelerate_state()
    assert not is_initialized()
    try:
        assert Accelerator(cpu=USE_CPU, mixed_precision="bf16").mixed_precision == "bf16"
    finally:
        forget_accelerate_state()


def test_a_process_group_left_to_the_launcher_outlives_end_training(tmp_path, monkeypatch):
    monkeypatch.setenv("FORK_LAUNCHED", "0")  # restored after the test, which sets it
    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1)
    try:
        forget_accelerate_state()
        leave_process_group_to_launcher()
        Accelerator(cpu=USE_CPU).end_training()
        assert dist.is_initialized()
        monkeypatch.setenv("FORK_LAUNCHED", "0")
        forget_accelerate_state()
        Accelerator(cpu=USE_CPU).end_training()
        assert not dist.is_initialized()  # what end_training does otherwise
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
        forget_accelerate_state()


def test_save_state_writes_each_prepared_models_weights_to_its_file(tmp_path):
    accelerator = Accelerator(cpu=USE_CPU)
    first, second = accelerator.prepare(torch.nn.Linear(2, 2), torch.nn.Linear(3, 1))
    accelerator.save_state(str(tmp_path))
    assert saved_model_file(0) == SAFE_WEIGHTS_NAME == "model.safetensors"
    for index, model in enumerate((first, second)):
        weights = load_file(tmp_path / saved_model_file(index))
        assert weights.keys() == model.state_dict().keys()
        assert all(torch.equal(weights[name], tensor.cpu()) for name, tensor in model.state_dict().items())


def test_accelerate_launch_sets_its_variable_for_the_process_it_starts(tmp_path, monkeypatch):
    """A real launch of a script that writes the environment it started with (the launcher's way of starting its
    process changes between releases: 1.16 starts it through psutil, reading its stderr)."""
    script = tmp_path / "environment.py"
    script.write_text("import json, os, sys\njson.dump(dict(os.environ), open(sys.argv[1], 'w'))\n")
    monkeypatch.delenv(accelerate_launch_variable(), raising=False)
    subprocess.run([sys.executable, "-m", "accelerate.commands.launch", "--cpu", "--num_cpu_threads_per_process", "1",
                    "--num_processes", "1", "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
                    str(script), str(tmp_path / "environment.json")], check=True, timeout=120)
    started = json.loads((tmp_path / "environment.json").read_text())
    assert accelerate_launch_variable() in started
    for name, value in started.items():  # the started process's environment, as it reads it
        monkeypatch.setenv(name, value)
    assert launched_on_cpu() and not launched_with_fsdp()


CHECKOUT = Path(__file__).parents[1]
LIBRARIES = ("torch", "accelerate", "timm")


def private_uses(source: str) -> list[str]:
    """What ``source`` takes from the libraries that they do not publish: a name with a leading underscore imported
    from them, a name that mpp/private_apis.py imports from them as private, or an environment variable of
    accelerate's launcher read directly."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in LIBRARIES:
            found += [f"from {node.module} import {alias.name}" for alias in node.names
                      if alias.name.startswith("_") or any(part.startswith("_") for part in node.module.split("."))
                      or alias.name in PRIVATE_IMPORTS]
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and re.fullmatch(
                r"ACCELERATE_[A-Z_]+|FORK_LAUNCHED", node.value):
            found.append(f"the variable {node.value}")
    return found


# What private_apis.py imports from the libraries that is theirs alone (not in their documented API)
PRIVATE_IMPORTS = {"SAFE_WEIGHTS_NAME", "AcceleratorState", "GradientState", "BatchSamplerShard",
                   "SeedableRandomSampler"}


def test_no_private_name_of_the_libraries_is_used_outside_private_apis():
    held = private_uses((CHECKOUT / "mpp" / "private_apis.py").read_text())  # the check finds what it holds
    assert {"from accelerate.utils import SAFE_WEIGHTS_NAME", "the variable ACCELERATE_USE_CPU",
            "from torch.optim.optimizer import _get_capturable_supported_devices"} <= set(held)
    files = [path for folder in ("mpp", "recipes", "eval", "tools", "study")
             for path in (CHECKOUT / folder).rglob("*.py") if path.name != "private_apis.py"]
    assert len(files) > 100
    used = {f"{path.relative_to(CHECKOUT)}: {use}" for path in files for use in private_uses(path.read_text())}
    assert not used, "use mpp/private_apis.py for these: " + "; ".join(sorted(used))


class TopLevelParameter(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(4))  # a name without a dot, as MPP's mask_embedding
        self.inner = torch.nn.Linear(2, 2)


@with_fsdp2_tensor_lookup
class TopLevelParameterLookedUp(TopLevelParameter):
    pass


def fsdp2_loaded(model: torch.nn.Module, full: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``full`` loaded into ``model`` sharded by FSDP2 on one process, by accelerate's loading; the model's state."""
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)  # one process: nothing to wait for
    try:
        fully_shard(model, mesh=init_device_mesh("cpu", (1,)))
        fsdp2_load_full_state_dict(SimpleNamespace(is_main_process=True), model, full)
        return {name: tensor.full_tensor() for name, tensor in model.state_dict().items()}
    finally:
        dist.destroy_process_group()


def test_accelerates_fsdp2_loading_loads_a_parameter_of_the_model_itself(monkeypatch):
    """Up to 1.15 accelerate looks each tensor up by the model's ``get_parameter_or_buffer`` where it has one, and
    otherwise splits the name at a dot that a parameter of the model itself lacks: ``with_fsdp2_tensor_lookup`` gives
    the model one. From 1.16 it finds such a parameter without it, and a model without the lookup loads too."""
    looked_up = []
    lookup = TopLevelParameterLookedUp.get_parameter_or_buffer

    def recorded_lookup(model: torch.nn.Module, target: str) -> torch.Tensor:
        looked_up.append(target)
        return lookup(model, target)

    monkeypatch.setattr(TopLevelParameterLookedUp, "get_parameter_or_buffer", recorded_lookup)
    full = {name: torch.randn_like(tensor) for name, tensor in TopLevelParameter().state_dict().items()}
    loaded = fsdp2_loaded(TopLevelParameterLookedUp(), full)
    assert loaded.keys() == full.keys() and all(torch.equal(loaded[name], full[name]) for name in full)
    if looked_up:  # accelerate asks the model: every tensor through the lookup
        assert looked_up == list(full)
    else:  # it no longer asks: a model without the lookup loads as well
        loaded = fsdp2_loaded(TopLevelParameter(), full)
        assert all(torch.equal(loaded[name], full[name]) for name in full)


def test_torch_names_the_devices_of_its_fused_and_capturable_optimizers():
    assert {"cuda", "cpu"} <= set(fused_optimizer_devices())  # fused AdamW/SGD on the CPU and GPUs
    assert {"cuda", "xla"} <= set(capturable_optimizer_devices())  # a step count on an XLA device
    assert "xla" not in fused_optimizer_devices()


def fused_step(optimizer: torch.optim.Optimizer, parameter: torch.nn.Parameter, skip: bool) -> list[torch.Tensor]:
    """One step of ``optimizer``, told whether to skip it; then the parameter and its optimizer state."""
    parameter.grad = torch.ones_like(parameter)
    tell_fused_optimizer_whether_to_skip(optimizer, torch.tensor(skip))
    optimizer.step()
    return [parameter.detach().clone()] + [value.clone() for value in optimizer.state[parameter].values()
                                           if torch.is_tensor(value)]


@pytest.mark.parametrize("optimizer_class, settings", [(torch.optim.AdamW, {}), (torch.optim.SGD, {"momentum": 0.9})],
                         ids=["AdamW", "SGD"])
def test_a_fused_optimizer_skips_its_step_where_told_and_takes_it_elsewhere(optimizer_class, settings):
    parameter = torch.nn.Parameter(torch.ones(3))
    optimizer = optimizer_class([parameter], lr=0.1, fused=True, **settings)
    before = fused_step(optimizer, parameter, skip=False)
    skipped = fused_step(optimizer, parameter, skip=True)
    assert len(skipped) > 1 and all(torch.equal(old, new) for old, new in zip(before, skipped, strict=True))
    taken = fused_step(optimizer, parameter, skip=False)
    assert (taken[0] < skipped[0]).all()


def test_a_fused_adamw_skipping_its_first_step_stays_as_new():
    # Not so fused SGD with momentum: on a skipped first step it keeps the momentum buffer it made with empty_like.
    parameter = torch.nn.Parameter(torch.ones(3))
    optimizer = torch.optim.AdamW([parameter], lr=0.1, fused=True)
    skipped = fused_step(optimizer, parameter, skip=True)
    assert torch.equal(skipped[0], torch.ones(3)) and not any(value.any() for value in skipped[1:])  # step 0, moments 0


def test_timm_prepends_the_class_token_and_adds_the_position_embeddings(tiny_model_config):
    encoder = create_encoder(tiny_model_config).eval()
    patches = torch.randn(3, encoder.patch_embed.num_patches, encoder.embed_dim)
    expected = torch.cat([encoder.cls_token.expand(3, -1, -1), patches], dim=1) + encoder.pos_embed
    assert torch.allclose(add_position_embeddings(encoder, patches), expected)


@pytest.mark.parametrize("num_processes", [1, 2])
def test_accelerates_seedable_shuffle_and_split_are_what_its_prepared_loader_reads(num_processes):
    """Each epoch's batches of each process, as a shuffled loader prepared with a seedable sampler reads them."""
    for rank in range(num_processes):
        prepared = prepare_data_loader(DataLoader(range(44), batch_size=4, shuffle=True, drop_last=True),
                                       num_processes=num_processes, process_index=rank, use_seedable_sampler=True,
                                       data_seed=5)
        shuffle = seedable_shuffle(44, seed=5)
        batches = process_share_of_batches(torch.utils.data.BatchSampler(shuffle, 4, drop_last=True),
                                           num_processes, rank)
        for epoch in range(3):
            prepared.set_epoch(epoch)
            shuffle.set_epoch(epoch)
            assert [batch.tolist() for batch in prepared] == list(batches)


def test_timms_mixup_draws_a_batchs_weight_and_kind_from_numpys_generator():
    """The draw ``Mixup`` makes per batch, as its own ``__call__`` uses it: numpy's generator alone decides it."""
    both = Mixup(mixup_alpha=0.8, cutmix_alpha=1.0, prob=1.0, switch_prob=0.5, mode="batch")
    draws = []
    for seed in range(40):
        np.random.seed(seed)
        draws.append(mixup_batch_parameters(both))
        np.random.seed(seed)
        assert mixup_batch_parameters(both) == draws[-1]
    assert {cutmix for _, cutmix in draws} == {False, True}
    assert all(0 <= weight <= 1 for weight, _ in draws) and len({weight for weight, _ in draws}) == len(draws)
    never = Mixup(mixup_alpha=0.8, cutmix_alpha=0.0, prob=0.0)
    assert mixup_batch_parameters(never) == (1.0, False)  # not mixed: every image keeps its own label whole
    cutmix_only = Mixup(mixup_alpha=0.0, cutmix_alpha=1.0, prob=1.0)
    assert all(mixup_batch_parameters(cutmix_only)[1] for _ in range(5))
