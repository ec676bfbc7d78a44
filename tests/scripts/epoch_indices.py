"""Run under ``accelerate launch`` by test_data_loading: one epoch of the training loader, through the library,
in each process; writes the labels (here: image indices) this process saw to <out>/process_<rank>.json."""

import json
import sys
from pathlib import Path

from accelerate import Accelerator
from accelerate.utils import DataLoaderConfiguration

from mpp.config import DataConfig
from mpp.data.loading import build_dataset, build_loader, prepare_loader

source, out = sys.argv[1], Path(sys.argv[2])
accelerator = Accelerator(dataloader_config=DataLoaderConfiguration(use_seedable_sampler=True, data_seed=0))
cfg = DataConfig(source=source, num_workers=1)
dataset = build_dataset(cfg, "train", 8, channels=1, augment=True, seed=0, process_index=accelerator.process_index,
                        num_processes=accelerator.num_processes)
loader = prepare_loader(accelerator, build_loader(dataset, batch_size=4, cfg=cfg, train=True))
for epoch in range(2):
    loader.set_epoch(epoch)
    dataset.set_epoch(epoch)
    seen = [label for _, labels, _ in loader for label in labels.tolist()]
    record = {"num_processes": accelerator.num_processes, "distributed_type": str(accelerator.distributed_type),
              "seen": seen}
    (out / f"process_{accelerator.process_index}_epoch_{epoch}.json").write_text(json.dumps(record))
