"""Run under ``accelerate launch`` by test_data_loading: the batches of a training run of ``train.epochs=2`` through
the library (its schedule and its batches), in each process; writes the labels (here: image indices) this process
saw in each epoch's share of the steps to <out>/process_<rank>_epoch_<epoch>.json."""

import json
import sys
from pathlib import Path

from accelerate import Accelerator
from accelerate.utils import DataLoaderConfiguration

from mpp.config.data import DataConfig
from mpp.config.training import TrainConfig
from mpp.data.loading import BatchPlan, build_dataset, training_batches
from mpp.training.optimizer import resolved_schedule

EPOCHS, MICRO_BATCH = 2, 4
source, out = sys.argv[1], Path(sys.argv[2])
accelerator = Accelerator(dataloader_config=DataLoaderConfiguration(use_seedable_sampler=True, data_seed=0))
cfg = DataConfig(source=source, num_workers=1)
dataset = build_dataset(cfg, "train", 8, channels=1, augment=True, seed=0, process_index=accelerator.process_index,
                        num_processes=accelerator.num_processes)
schedule, _ = resolved_schedule(TrainConfig(steps=None, epochs=EPOCHS, warmup_steps=0,
                                            global_batch_size=MICRO_BATCH * accelerator.num_processes), len(dataset))
plan = BatchPlan(MICRO_BATCH * accelerator.num_processes, MICRO_BATCH, accelerator.num_processes, 1)
batches = training_batches(accelerator, dataset, plan, cfg, seed=0)
seen = [next(batches)[1].tolist() for _ in range(schedule.steps)]
batches.close()
per_epoch = -(-schedule.steps // EPOCHS)  # the last epoch's share may fall short; the test says
for epoch in range(EPOCHS):
    record = {"num_processes": accelerator.num_processes, "distributed_type": str(accelerator.distributed_type),
              "images_read": schedule.steps * schedule.global_batch_size,  # over all processes
              "seen": [label for batch in seen[epoch * per_epoch:(epoch + 1) * per_epoch] for label in batch]}
    (out / f"process_{accelerator.process_index}_epoch_{epoch}.json").write_text(json.dumps(record))
