"""The device the tests that exercise one run on: the CPU, or with ``MPP_TEST_DEVICE=cuda`` the GPU (what
``python -m tools.gpu`` sets). In-process tests make their Accelerator with ``cpu=USE_CPU``; launched recipes
get ``ACCELERATE_USE_CPU`` from ``tests/launching.py``. Tests that run on the CPU by design (two gloo processes on one
machine, refusals that only a machine without a GPU gives) carry ``@pytest.mark.cpu_only(reason)`` and are skipped
on the GPU, saying why."""

from __future__ import annotations

import os

TEST_DEVICE = os.environ.get("MPP_TEST_DEVICE", "cpu")
USE_CPU = TEST_DEVICE == "cpu"
