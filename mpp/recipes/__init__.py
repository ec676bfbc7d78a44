"""Each recipe's run, as the library holds it: the scripts under ``recipes/`` and ``eval/`` parse their command line
and call one of these; ``python_api`` builds the same config from Python and calls the same function.

- ``pretraining_run.py``, ``finetune_run.py``: the training runs (MPP and supervised pre-training, with the monitors
  they report as they go; fine-tuning);
- ``few_shot_run.py``, ``linear_probe_run.py``, ``knn_run.py``, ``inspection_run.py``: the evaluations of a frozen
  encoder;
- ``run_result.py``: what each returns, its metrics and its run directory;
- ``python_api.py``: ``mpp.pretrain``, ``mpp.finetune``, ``mpp.evaluate``.
"""
