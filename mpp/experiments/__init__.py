"""Experiments over the recipes: grids of ordinary recipe runs, run as subprocesses (``runner``), read into tables
and plots and published (``publishing``): the paper's MPP claims (``reproduction``) and what MPP buys on your own
images (``comparison``); their configs are in ``config``."""
