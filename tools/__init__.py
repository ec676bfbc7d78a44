"""Tools that need a checkout of the repository, run from its root with ``python -m tools.<name>``; not part of the
installed package.

- ``gpu``: the GPU acceptance run, which runs the checkout's tests and recipes on a GPU machine (docs/performance.md).
- ``presets``: writes docs/presets.md from every preset in recipes/configs/, timing each training preset's step.
- ``shapes_regions`` and ``grey_images``: analyses of one experiment each: where a trained MPP model with a colour
  target is right (inside the shapes or on their outlines; on clip art's grey or colour drawings).
"""
