"""The classifier both supervised pre-training and fine-tuning train: its head, pooling, regularisation, optimizer
and top-1 evaluation."""

from __future__ import annotations

import pytest
import torch
from accelerate import Accelerator
from devices import USE_CPU
from torch.utils.data import DataLoader

from mpp.config.model import ClassifierConfig
from mpp.config.training import TrainConfig
from mpp.errors import ConfigError
from mpp.metrics import class_hits, class_scores
from mpp.models.classifier import ImageClassifier
from mpp.models.encoder import create_encoder, pooled_features
from mpp.training.classifier_training import top1_predictions
from mpp.training.optimizer import NonFiniteGuard, create_optimizer


@pytest.mark.parametrize("head", ["mlp", "linear"])
@pytest.mark.parametrize("pool", ["token", "avg"])
def test_the_new_heads_logits_are_exactly_zero_at_step_0(tiny_model_config, head, pool):
    model = ImageClassifier(create_encoder(tiny_model_config), 7, ClassifierConfig(head=head, pool=pool),
                            (0.5,) * 3, (0.5,) * 3)
    output = model(torch.rand(4, 3, 16, 16), torch.tensor([0, 1, 2, 6]))
    assert output.logits.shape == (4, 7) and torch.equal(output.logits, torch.zeros(4, 7))
    assert torch.isclose(output.loss, torch.log(torch.tensor(7.0)))  # uniform over the classes
    output.loss.backward()
    head_grads = [parameter.grad for parameter in model.head.parameters()]
    assert head_grads[-1].abs().sum() > 0  # and the head learns from the first step


def test_the_classifier_is_built_on_the_encoder_as_mpp_is_and_reads_the_features_an_image_encoder_reads(
        tiny_model_config):
    from mpp.models.encoder import BuiltOnEncoder, ImageEncoder

    model = ImageClassifier(create_encoder(tiny_model_config), 7, ClassifierConfig(head="linear", pool="avg"),
                            (0.5,) * 3, (0.5,) * 3)
    assert isinstance(model, BuiltOnEncoder) and not isinstance(model, ImageEncoder)
    vit_names = {f"encoder.{name}" for name in model.encoder.state_dict()}
    assert set(model.state_dict()) == vit_names | {"head.weight", "head.bias"}
    with torch.no_grad():
        model.head.weight.copy_(torch.eye(7, model.encoder.embed_dim))  # logits: the first 7 features
    images = torch.rand(2, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    frozen = ImageEncoder(model.encoder, model.normalise, "avg")
    assert torch.allclose(model(images, torch.tensor([0, 1])).logits, frozen(images)[:, :7], atol=1e-6)


def test_pooling_reads_the_class_token_or_averages_the_patch_tokens():
    tokens = torch.arange(2 * 5 * 3, dtype=torch.float).reshape(2, 5, 3)  # (b 1+n d), n = 4
    assert torch.equal(pooled_features(tokens, "token"), tokens[:, 0])
    assert torch.equal(pooled_features(tokens, "avg"), tokens[:, 1:].mean(dim=1))


def test_dropout_sits_after_the_position_embeddings_and_the_dense_layers_but_not_qkv(tiny_model_config):
    tiny_model_config.dropout = 0.1
    encoder = create_encoder(tiny_model_config)
    block = encoder.blocks[0]
    assert encoder.pos_drop.p == 0.1
    assert block.attn.proj_drop.p == 0.1 and block.mlp.drop1.p == 0.1 and block.mlp.drop2.p == 0.1
    assert block.attn.attn_drop.p == 0.0  # attention weights themselves: not in the paper's list


def test_a_classifier_needs_labels_and_one_normalisation_value_per_channel(tiny_model_config):
    encoder = create_encoder(tiny_model_config)
    with pytest.raises(ConfigError, match="at least 2 classes"):
        ImageClassifier(encoder, 0, ClassifierConfig(), (0.5,) * 3, (0.5,) * 3)
    with pytest.raises(ConfigError, match="one value per input channel"):
        ImageClassifier(encoder, 3, ClassifierConfig(), (0.5,), (0.5,))


def test_sgd_is_plain_momentum_and_skips_a_non_finite_step_on_the_device():
    layer = torch.nn.Linear(3, 2)
    optimizer = create_optimizer(layer, TrainConfig(optimizer="sgd", lr=0.1, momentum=0.9, weight_decay=0.0),
                                 torch.device("cpu"))
    assert optimizer.defaults["momentum"] == 0.9 and not optimizer.defaults["nesterov"]
    guard = NonFiniteGuard(optimizer, torch.device("cpu"), stop=False, scaler_skips=False)
    before = layer.weight.detach().clone()
    (layer(torch.ones(1, 3)).sum() * float("nan")).backward()
    guard.observe_loss(torch.tensor(float("nan")))
    with guard.only_if_finite(torch.tensor(float("nan"))):
        optimizer.step()
    assert torch.equal(layer.weight, before)
    assert guard.check(1, window_steps=2) == 1


class FixedLogits(torch.nn.Module):
    """Predicts class (image value) for each image: the image tensor holds the predicted class."""

    def forward(self, images, labels, keys):
        return type("Output", (), {"logits": torch.nn.functional.one_hot(images.long(), 3).float()})


def test_top1_predictions_keep_every_image_once_in_order():
    accelerator = Accelerator(cpu=USE_CPU)
    predicted = torch.tensor([0, 1, 2, 2, 1, 0, 0])
    labels = torch.tensor([0, 1, 1, 2, 0, 0, 2])  # 4 of 7 right
    keys = torch.arange(7)
    batches = DataLoader(list(zip(predicted, labels, keys, strict=True)), batch_size=3)  # the last one uneven
    loader = accelerator.prepare(batches)
    predictions, seen = top1_predictions(accelerator, FixedLogits(), loader)
    assert predictions.tolist() == predicted.tolist() and seen.tolist() == labels.tolist()
    hits = class_hits(predictions, seen, 3)
    assert hits.tolist() == [[2, 3], [1, 2], [1, 2]]  # per class: right, seen
    scores = class_scores(hits, "test_")
    assert scores["test_accuracy"] == pytest.approx(4 / 7)
    assert scores["test_balanced_accuracy"] == pytest.approx((2 / 3 + 1 / 2 + 1 / 2) / 3)


def test_supervised_and_fine_tuning_defaults_are_the_papers(tmp_path):
    from mpp.config.building import build_config
    from mpp.config.runs import FinetuneRunConfig, SupervisedRunConfig

    preset = tmp_path / "preset.yaml"
    preset.write_text("train:\n  steps: 10\n")  # a preset changes only what it lists
    supervised = build_config(SupervisedRunConfig, preset)
    assert (supervised.train.optimizer, supervised.train.weight_decay, supervised.train.steps) == ("adamw", 0.1, 10)
    assert supervised.classifier.head == "mlp" and supervised.train.grad_clip_norm == 1.0
    finetune = build_config(FinetuneRunConfig, preset, ["train.lr=0.01"])
    assert (finetune.train.optimizer, finetune.train.momentum, finetune.train.weight_decay) == ("sgd", 0.9, 0.0)
    assert (finetune.train.steps, finetune.train.lr, finetune.train.global_batch_size) == (10, 0.01, 512)
    assert finetune.classifier.head == "linear" and finetune.train.decay == "cosine"


def test_a_classifier_is_scored_in_passes_of_the_eval_batch_size_to_the_same_scores(tiny_model_config, monkeypatch):
    from types import SimpleNamespace

    from mpp.config.data import DataConfig
    from mpp.data.loading import build_dataset
    from mpp.training import classifier_training

    data = DataConfig(num_workers=0)
    test_set = build_dataset(data, "test", 16, 3, augment=False, seed=0).subset(torch.arange(30))
    model = ImageClassifier(create_encoder(tiny_model_config), 10, ClassifierConfig(head="linear"), (0.5,) * 3,
                            (0.5,) * 3)
    torch.nn.init.normal_(model.head.weight)  # logits that tell the images apart, not the zeros of step 0
    passes, build_loader = [], classifier_training.build_loader

    def loader_of(dataset, batch_size, *args, **kwargs):  # the loader scoring builds, its batch size recorded
        passes.append(batch_size)
        return build_loader(dataset, batch_size, *args, **kwargs)

    monkeypatch.setattr(classifier_training, "build_loader", loader_of)
    trainer = SimpleNamespace(accelerator=Accelerator(cpu=USE_CPU), model=model,
                              averaged=None, log_prefix="", run_config=SimpleNamespace(data=data),
                              plan=SimpleNamespace(micro_batch_size=4, global_batch_size=4))
    scores = {}
    for eval_batch_size in (None, 16):
        trainer.train_config = TrainConfig(steps=1, eval_batch_size=eval_batch_size)
        scores[eval_batch_size] = classifier_training.score_classifier(trainer, test_set, "test")
    assert passes == [4, 16]  # unset: the training pass's micro batch
    assert scores[16] == scores[None] and 0 < scores[None]["test_accuracy"] < 1
