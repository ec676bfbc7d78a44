"""What every run has, whichever entry point starts it: its Accelerator and settings, its directory, its start and
its end.

- ``session.py``: ``Session``, the start-up and teardown every recipe and evaluation shares.
- ``directory.py``: the run directory's layout, claiming it without overwriting an earlier run, ``metrics.json``.
"""
