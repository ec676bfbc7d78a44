"""Run under torchrun by test_fsdp_export with two gloo processes: the MPP model sharded by torch's FSDP2
(``fully_shard``, each block and the whole model, as accelerate's FSDP2 wraps a ViT), one training step, then its
whole state dict gathered as accelerate's ``get_state_dict`` gathers it under FSDP2 and exported as the recipes
export it. Rank 0 also trains an unsharded copy on the same batch and exports it. Writes <out>/sharded and
<out>/one-process."""

import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.fsdp import fully_shard

from mpp.config.model import ModelConfig, MPPConfig
from mpp.images import keys_of
from mpp.models.encoder import create_encoder
from mpp.models.masked_patch_prediction import MaskedPatchPredictor
from mpp.models.pretrained import encoder_from_model_state, export_encoder

out = Path(sys.argv[1])
dist.init_process_group("gloo")
cfg = ModelConfig(name="vit_tiny_patch16_224", img_size=16, patch_size=4, embed_dim=32, depth=2, num_heads=2)


def fresh_model() -> MaskedPatchPredictor:
    torch.manual_seed(0)  # the same weights on every process and in the unsharded copy
    return MaskedPatchPredictor(create_encoder(cfg), MPPConfig(), (0.5,) * 3, (0.5,) * 3)


def train_one_step(model: torch.nn.Module) -> None:
    torch.manual_seed(1)  # the same batch on every process, so the averaged gradient is the unsharded one
    images = torch.rand(8, 3, 16, 16)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    model(images, torch.zeros(8, dtype=torch.long), keys_of(0, torch.arange(8))).loss.backward()
    optimizer.step()


sharded = fresh_model()
for block in sharded.encoder.blocks:
    fully_shard(block)
fully_shard(sharded)
train_one_step(sharded)
assert type(sharded.encoder.blocks[0].attn.qkv.weight).__name__ == "DTensor"
state = get_model_state_dict(sharded, options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True,
                                                                 cpu_offload=True))  # accelerate's, for FSDP2
if dist.get_rank() == 0:
    export_encoder(encoder_from_model_state(state, cfg), out / "sharded", (0.5,) * 3, (0.5,) * 3, tag="mpp")
    unsharded = fresh_model()
    train_one_step(unsharded)
    export_encoder(encoder_from_model_state(unsharded.state_dict(), cfg), out / "one-process", (0.5,) * 3,
                   (0.5,) * 3, tag="mpp")
else:
    assert not state  # only the main process receives the gathered weights (cpu_offload)
dist.barrier()  # every process stays until the main one has written both exports
dist.destroy_process_group()
# torch 2.14 with FSDP2 on gloo: an exit now and then aborts ("terminate called without an active exception") in the
# interpreter's teardown, after everything above has run (as tests/scripts/fsdp2_step.py found); end here instead.
os._exit(0)
