"""Typed run configuration, by concern: one dataclass per section (``model``, ``data``, ``runtime``, ``training``,
``evaluation``) and one per entry point made of them (``runs``). A module imports the sections it reads.

The defaults in code are the paper's settings (section noted beside each); a preset in ``recipes/configs/`` changes
only what differs from them, and ``key=value`` on the command line wins over both (mpp/config/building.py).
"""
