from __future__ import annotations

import dataclasses

import pytest

from mpp.config.training import TrainConfig
from mpp.errors import ConfigError
from mpp.training.optimizer import learning_rate, resolved_schedule


def test_linear_warmup_then_cosine_to_the_final_rate():
    rates = [learning_rate(step, peak=1.0, warmup_steps=10, total_steps=111, final=0.1) for step in range(111)]
    assert rates[:10] == pytest.approx([(s + 1) / 10 for s in range(10)])
    assert rates[10] == pytest.approx(1.0)
    assert rates[60] == pytest.approx(0.55)  # decay runs over steps 10..110: half-way, the mean of peak and final
    assert rates[-1] == pytest.approx(0.1)
    assert all(a >= b for a, b in zip(rates[10:], rates[11:], strict=False))


def test_linear_decay_and_no_warmup():
    rates = [learning_rate(step, 2.0, 0, 5, decay="linear") for step in range(5)]
    assert rates == pytest.approx([2.0, 1.5, 1.0, 0.5, 0.0])


def test_warmup_longer_than_the_run_never_reaches_the_peak():
    assert learning_rate(4, 1.0, warmup_steps=10, total_steps=5) == pytest.approx(0.5)


def test_a_schedule_in_epochs_becomes_steps_of_whole_global_batches():
    given = TrainConfig(steps=None, epochs=2.5, warmup_steps=None, warmup_epochs=0.5, global_batch_size=64)
    resolved, derivation = resolved_schedule(given, images=1000)
    assert (resolved.steps, resolved.warmup_steps) == (38, 8)  # 15 whole steps an epoch: 37.5 and 7.5, rounded up
    assert resolved.epochs is None and resolved.warmup_epochs is None and resolved.lr == given.lr
    assert derivation == ("train.epochs=2.5 at 15 steps an epoch (1,000 images at a global batch of 64; the 40 left "
                          "over wait for the next epoch's shuffle): 38 steps; train.warmup_epochs=0.5 at 15 steps an "
                          "epoch (1,000 images at a global batch of 64; the 40 left over wait for the next epoch's "
                          "shuffle): 8 warm-up steps")
    assert resolved_schedule(TrainConfig(steps=None, epochs=100, global_batch_size=64), 1000)[0].steps == 1500
    assert resolved_schedule(TrainConfig(steps=None, epochs=1, global_batch_size=100), 1000)[0].steps == 10
    assert resolved_schedule(TrainConfig(steps=None, epochs=1, global_batch_size=100, log_every=50), 1000)[0] \
        .log_every == 10  # never longer than the run
    with pytest.raises(ConfigError, match="train.epochs needs a training set of known size.*give train.steps"):
        resolved_schedule(given, images=None)  # a stream


def test_a_warm_up_as_long_as_the_run_is_warned_of(caplog):
    cfg = TrainConfig(steps=None, epochs=1, warmup_steps=None, warmup_epochs=5, global_batch_size=16)
    resolved_schedule(cfg, images=100)  # 6 steps, 30 warm-up steps
    assert [record.getMessage() for record in caplog.records] == [
        "the warm-up (30 steps) is as long as the run (6 steps) or longer, so the learning rate never reaches its "
        "peak: shorten train.warmup_epochs or train.warmup_steps"]
    caplog.clear()
    resolved_schedule(TrainConfig(steps=100, warmup_steps=10), images=100)
    assert not caplog.records


def test_linear_scaling_gives_the_reference_batchs_rate_times_the_batch_ratio():
    given = TrainConfig(lr=1.5e-4, lr_scaling="linear", lr_reference_batch=256, global_batch_size=1024)
    resolved, derivation = resolved_schedule(given, images=10_000)
    assert resolved.lr == pytest.approx(6e-4) and resolved.lr_scaling == "none" and resolved.steps == given.steps
    assert derivation == "peak lr 0.0006 = train.lr 0.00015 x 1,024 / 256 (train.lr_scaling=linear)"
    assert resolved_schedule(TrainConfig(lr=1e-3), 10_000) == (TrainConfig(lr=1e-3), "")  # as given by default


def test_a_global_batch_larger_than_the_training_set_is_refused_in_one_line_before_the_schedule(tmp_path,
                                                                                                   tiny_model_config):
    """An epoch of 20 images at a global batch of 32 holds no step: said as such (with the fix), not as a schedule
    of 0 steps, nor trained as one of a batch the data cannot fill."""
    from types import SimpleNamespace

    from accelerate import Accelerator
    from PIL import Image

    from devices import USE_CPU
    from mpp.config.data import DataConfig
    from mpp.config.runs import SupervisedRunConfig
    from mpp.data.loading import build_dataset
    from mpp.errors import DataError
    from mpp.models.classifier import ImageClassifier
    from mpp.models.encoder import create_encoder
    from mpp.training.trainer import Trainer

    for i in range(20):
        (tmp_path / "images" / f"class_{i % 2}").mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (6, 5), (i, 0, 0)).save(tmp_path / "images" / f"class_{i % 2}" / f"{i}.png")
    data = DataConfig(source=f"folder:{tmp_path / 'images'}")
    train_set = build_dataset(data, "train", 16, channels=3, augment=True)
    config = SupervisedRunConfig(data=data)
    model = ImageClassifier(create_encoder(tiny_model_config), 2, config.classifier, (0.5,) * 3, (0.5,) * 3)
    session = SimpleNamespace(accelerator=Accelerator(cpu=USE_CPU), run_dir=tmp_path / "run")
    epochs = TrainConfig(steps=None, epochs=2, global_batch_size=32, warmup_steps=0)
    with pytest.raises(DataError) as refused:
        Trainer(session, model, train_set, config, train=epochs)
    assert str(refused.value) == ("the training set has 20 images, fewer than one global batch of 32, so no step can "
                                  "be made of them; set train.global_batch_size to 20 or less (a multiple of "
                                  "train.micro_batch_size x processes)")
    assert not (tmp_path / "run").exists()
    fits = Trainer(session, model, train_set, config, train=dataclasses.replace(epochs, global_batch_size=8))
    assert fits.train_config.steps == 4  # 2 epochs of 2 whole batches of 8
