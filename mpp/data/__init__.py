"""The data every recipe reads, chosen by ``data.source``.

A source gives one split's raw images and labels (``image_source.py`` says what every source provides; one reader
module a kind: ``shapes.py``, ``openclipart.py``, ``fashion_mnist.py``, ``cifar.py``, ``image_folder.py``,
``hugging_face.py``); ``image_dataset.py`` holds the views that turn them into model inputs and ``ImageDataset``,
which puts the two together over a selection; and ``loading.py`` opens a source by its kind, builds the dataset of a
split (with its seeded hold-out slice or shots per class), the loader of one pass over it, and a training run's
batches. ``prepare.py`` writes any source once as pre-resized shards.
"""
