"""``python -m mpp.benchmark``: the training-step benchmark (``training_step.py``)."""

from mpp.benchmark.training_step import main

main()
