"""The data every recipe reads, chosen by ``data.source``.

A source gives one split's raw images and labels (``image_source.py`` says what every source provides,
``sources.py`` lists the kinds, one reader module each: ``shapes.py``, ``fashion_mnist.py``, ``cifar.py``,
``image_folder.py``, ``hugging_face.py``); a view (``transforms.py``) turns them into model inputs;
``ImageDataset`` (``image_dataset.py``) puts the two together over a seeded selection (``subsets.py``); and
``loading.py`` builds the dataset of a split and its loader.
"""
