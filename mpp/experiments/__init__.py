"""Experiments over the recipes: grids of ordinary recipe runs, run as subprocesses (``runner``), read into tables
and published (``publishing``): what MPP buys on your own images over seeds (``comparison``); its config is in
``config``. The checkout's study (``study/``) runs its experiments on the same runner."""
