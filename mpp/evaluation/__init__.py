"""Evaluating an encoder: frozen-feature protocols, the paper's pictures, and the monitors a pre-training run reports
as it goes. Nothing here trains; the pre-training recipes (``mpp.recipes.pretraining_run``) hand the monitors to the
loop.

- ``frozen_encoder.py``: an encoder under evaluation (from ``init``, or random), its features extracted and cached.
- ``few_shot_regression.py``: the paper's few-shot linear accuracy, and its monitor during pre-training.
- ``logistic_regression.py``: logistic regression on the whole training split's features.
- ``frozen_feature_classifiers.py``: the closed-form ridge regression and kNN votes both build on.
- ``attention_maps.py``, ``inspection.py``: mean attention distance, rollout, filters, position similarity (Sec. 4.5).
- ``mpp_mosaic.py``: pictures of what MPP predicts while it trains.
- ``pictures.py``: pictures to PNG files and TensorBoard.
"""
