"""Experiments over the recipes: grids of ordinary recipe runs, run as subprocesses (``runner``), read into tables
and plots and published (``publishing``). Two experiments: the paper's MPP claims (``reproduction``) and frozen
features as pre-training grows (``pretraining_curve``); their configs are in ``config``."""
