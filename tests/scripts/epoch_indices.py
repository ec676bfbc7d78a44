"""Run under ``accelerate launch`` by test_data_loading: two epochs of a training run's loader, through the library,
in each process; writes the labels (here: image indices) this process saw in each to
<out>/process_<rank>_epoch_<epoch>.json."""

import json
import sys
from pathlib import Path

from accelerate import Accelerator
from accelerate.utils import DataLoaderConfiguration

from mpp.config.data import DataConfig
from mpp.data.loading import build_dataset, build_training_loader, prepare_loader

source, out = sys.argv[1], Path(sys.argv[2])
accelerator = Accelerator(dataloader_config=DataLoaderConfiguration(use_seedable_sampler=True, data_seed=0))
cfg = DataConfig(source=source, num_workers=1)
dataset = build_dataset(cfg, "train", 8, channels=1, augment=True, seed=0, process_index=accelerator.process_index,
                        num_processes=accelerator.num_processes)
loader = build_training_loader(dataset, batch_size=4, cfg=cfg, seed=0, num_processes=accelerator.num_processes,
                               process_index=accelerator.process_index)
per_epoch = loader.batch_sampler.batches_per_epoch
batches = iter(prepare_loader(accelerator, loader))
for epoch in range(2):
    seen = [label for _ in range(per_epoch) for label in next(batches)[1].tolist()]
    record = {"num_processes": accelerator.num_processes, "distributed_type": str(accelerator.distributed_type),
              "seen": seen}
    (out / f"process_{accelerator.process_index}_epoch_{epoch}.json").write_text(json.dumps(record))
