"""The models: timm's Vision Transformer and what is trained on it.

- ``encoder.py``: ``create_encoder`` (any timm ViT, sizes overridable) and ``BuiltOnEncoder``, what every model is
  built on the same way, with the one path from raw images to features (normalise -> ViT -> pool); ``ImageEncoder``
  reads an encoder frozen.
- ``masked_patch_prediction.py``: masked patch prediction whole: BERT-style corruption of patch embeddings (drawn,
  then applied), what MPP predicts per patch (one object per kind: mean colour, downsized patch, pixels), and the MPP
  model, which owns its objective: corrupt, encode, predict, loss.
- ``mixing.py``: mixup and cutmix of a classifier's training pass.
- ``classifier.py``: the classifier of supervised pre-training and fine-tuning (a tanh MLP or linear head).
- ``pretrained.py``: an encoder's weights out of a run (timm's hub format) and back in (init for fine-tuning and
  evaluation; position embeddings interpolated to a larger grid).
"""
