"""What steps the weights: the optimizer of every recipe, its learning-rate schedule, and the guard that keeps a
non-finite step from ever reaching them.

The optimizer: AdamW for pre-training (App. B.1), SGD with momentum for fine-tuning (Sec. 3.2), created for the device
it will step on, as torch's own lists of supported devices say:
- fused (one kernel per step) where torch has fused kernels for the device (CUDA, CPU);
- elsewhere AdamW is capturable where torch allows it (XLA), so that its step count and bias corrections stay on the
  device and a TPU step needs nothing from the host. torch runs a capturable AdamW on XLA in its single-tensor
  implementation only (its foreach one refuses XLA), which is one traced graph all the same;
- foreach otherwise (SGD on XLA: it keeps no step count).
Weight decay skips biases, norms, tokens and position embeddings (the model's ``no_weight_decay``). Fine-tuning may
decay the learning rate layer by layer (``finetune.layer_decay``): each parameter group then carries its ``lr_scale``,
its share of the peak rate.

The schedule: linear warm-up, then cosine or linear decay (App. B.1), a pure function of the step; and the schedule in
steps from one given in epochs, with the peak learning rate scaled to the batch.

Steps whose loss or gradient is not finite never reach the weights, on every backend. The verdict stays on the device,
and so does skipping the step: nothing synchronises with the host per step.
- A fused optimizer (CUDA, CPU) takes the verdict as ``found_inf``, as in mixed-precision loss scaling, and leaves
  parameters, moments and its step count untouched.
- Any other (foreach, as on XLA) steps, and then every parameter and state tensor it changed is put back where the
  step was bad: one ``torch.where`` per tensor, so on XLA it is part of the step's graph. A state the step created
  goes back to zeros, which is how Adam's moments and step count and SGD's momentum start.
``check`` reads the count at log steps and before every checkpoint, and then either stops the run
(``train.on_nonfinite=stop``, the default) or reports the skipped steps and goes on (``skip``). Either way no
checkpoint ever holds weights a non-finite step produced. In fp16, accelerate's gradient scaler skips overflowing
steps itself (that is how it finds its scale), so they are counted and reported, not stopped on.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
from typing import Any, Iterator, Literal, Optional

import torch
from timm.optim import create_optimizer_v2, param_groups_layer_decay, param_groups_weight_decay

from mpp.config.training import TrainConfig
from mpp.data.loading import steps_per_epoch
from mpp.errors import ConfigError, RunError
from mpp.models.classifier import ImageClassifier
from mpp.private_apis import capturable_optimizer_devices, fused_optimizer_devices, tell_fused_optimizer_whether_to_skip

logger = logging.getLogger(__name__)


# The optimizer, made for its device.
def create_optimizer(model: torch.nn.Module, cfg: TrainConfig, device: torch.device, layer_decay: float = 1.0
                     ) -> torch.optim.Optimizer:
    """The optimizer ``cfg`` names for ``model``, whose parameters will live on ``device``; with ``layer_decay`` below
    1, for a classifier, in layer_decay_groups' groups."""
    fused = device.type in fused_optimizer_devices()
    groups = ({"param_group_fn": lambda model: layer_decay_groups(model, cfg.weight_decay, layer_decay)}
              if layer_decay < 1 else {})
    if cfg.optimizer == "sgd":  # timm's "momentum": plain (not Nesterov) momentum, as the paper
        return create_optimizer_v2(model, opt="momentum", lr=cfg.lr, weight_decay=cfg.weight_decay,
                                   momentum=cfg.momentum, **({"fused": True} if fused else {"foreach": True}), **groups)
    if fused:
        kernels = {"fused": True}
    elif device.type in capturable_optimizer_devices():
        kernels = {"foreach": False, "capturable": True}
    else:
        kernels = {"foreach": True}
    return create_optimizer_v2(model, opt="adamw", lr=cfg.lr, weight_decay=cfg.weight_decay, betas=cfg.betas,
                               **kernels, **groups)


def layer_decay_groups(model: ImageClassifier, weight_decay: float, layer_decay: float) -> list[dict[str, Any]]:
    """BEiT's layer-wise learning rates for a classifier on the encoder (MAE fine-tunes with them too), each group's
    ``lr_scale`` its share of the peak rate: 1 for the head, layer_decay^(L - i) for block i of L (from 0),
    layer_decay^(L + 1) for the patch embedding, [class] token and position embedding; weight decay as without.

    timm's param_groups_layer_decay groups the encoder by its ViT's group_matcher (the embeddings first, then each
    block; the final norm with the last block) and gives its last layer a scale of 1, the head's in a timm model: one
    more factor of ``layer_decay`` here leaves 1 to our head alone."""
    encoder = param_groups_layer_decay(model.encoder, weight_decay, model.encoder.no_weight_decay(),
                                       layer_decay=layer_decay)
    return ([{**group, "lr_scale": layer_decay * group["lr_scale"]} for group in encoder]
            + [{**group, "lr_scale": 1.0} for group in param_groups_weight_decay(model.head, weight_decay)])


# The learning-rate schedule.
def learning_rate(
    step: int,
    peak: float,
    warmup_steps: int,
    total_steps: int,
    decay: Literal["cosine", "linear"] = "cosine",
    final: float = 0.0,
) -> float:
    """The learning rate of optimizer step ``step`` (0-based) of ``total_steps``."""
    if step < warmup_steps:
        return peak * (step + 1) / warmup_steps
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - 1 - warmup_steps))
    if decay == "cosine":
        return final + (peak - final) * 0.5 * (1.0 + math.cos(math.pi * progress))
    return final + (peak - final) * (1.0 - progress)


def steps_of(epochs: float, images: int, global_batch_size: int) -> int:
    """Optimizer steps that make ``epochs`` epochs of ``images`` training images, ``global_batch_size`` a step:
    exactly so for whole epochs, rounded up for a fraction of one."""
    return math.ceil(epochs * steps_per_epoch(images, global_batch_size) - 1e-9)


def resolved_schedule(cfg: TrainConfig, images: Optional[int]) -> tuple[TrainConfig, str]:
    """``cfg`` as the loop reads it, and how each figure was derived (for the plan line): steps and warm-up steps
    from ``train.epochs`` / ``train.warmup_epochs`` and the training set's ``images``, and the peak learning rate
    scaled to the global batch where ``train.lr_scaling`` asks (MAE's rule: lr x batch / 256)."""
    derived = []
    lengths = {}
    for steps, epochs, name in (("steps", "epochs", "steps"), ("warmup_steps", "warmup_epochs", "warm-up steps")):
        if getattr(cfg, epochs) is None:
            continue
        if images is None:
            raise ConfigError(f"train.{epochs} needs a training set of known size, and a stream "
                              f"(data.streaming=true) has none; give train.{steps} instead")
        lengths[steps] = steps_of(getattr(cfg, epochs), images, cfg.global_batch_size)
        lengths[epochs] = None
        per_epoch = steps_per_epoch(images, cfg.global_batch_size)
        left_over = images - per_epoch * cfg.global_batch_size
        derived.append(f"train.{epochs}={getattr(cfg, epochs):g} at {per_epoch:,} steps an epoch ({images:,} images "
                       f"at a global batch of {cfg.global_batch_size:,}"
                       + (f"; the {left_over:,} left over wait for the next epoch's shuffle" if left_over else "")
                       + f"): {lengths[steps]:,} {name}")
    lr = cfg.lr
    if cfg.lr_scaling == "linear":
        lr = cfg.lr * cfg.global_batch_size / cfg.lr_reference_batch
        derived.append(f"peak lr {lr:.3g} = train.lr {cfg.lr:g} x {cfg.global_batch_size:,} / "
                       f"{cfg.lr_reference_batch:,} (train.lr_scaling=linear)")
    resolved = dataclasses.replace(cfg, lr=lr, lr_scaling="none", **lengths)
    # Never longer than the run (whose last step always logs), so that the config saved says when the run logged.
    resolved = dataclasses.replace(resolved, log_every=max(1, min(resolved.log_every, resolved.steps)))
    if resolved.warmup_steps and resolved.warmup_steps >= resolved.steps:
        logger.warning("the warm-up (%d steps) is as long as the run (%d steps) or longer, so the learning rate never "
                       "reaches its peak: shorten train.warmup_epochs or train.warmup_steps",
                       resolved.warmup_steps, resolved.steps)
    return resolved, "; ".join(derived)


# A non-finite step never reaches the weights.
class NonFiniteStep(RunError):
    """A step with a non-finite loss or gradient under ``train.on_nonfinite=stop``, or a whole window of them."""


class NonFiniteGuard:
    def __init__(self, optimizer: Any, device: torch.device, stop: bool, scaler_skips: bool, start_step: int = 0):
        self.optimizer = getattr(optimizer, "optimizer", optimizer)  # the torch optimizer under accelerate's wrapper
        self.fused = bool(self.optimizer.defaults.get("fused"))
        self.stop, self.scaler_skips = stop, scaler_skips
        self.loss_not_finite = torch.zeros((), dtype=torch.bool, device=device)  # any pass of the current step
        self.bad_steps = torch.zeros((), dtype=torch.long, device=device)  # since the last check
        self.first_bad_step = torch.zeros((), dtype=torch.long, device=device)  # 1-based; 0: none
        # Counted on the device: a new Python number in every step's graph would make XLA compile it again.
        self.steps = torch.tensor(start_step, device=device)
        if self.fused:
            self.start_momentum_at_zero()

    @torch.no_grad()
    def start_momentum_at_zero(self) -> None:
        """Fused SGD with momentum makes its momentum buffers with ``empty_like`` in its first step and fills them in
        the kernel; a first step skipped leaves them unset, and the next one would read whatever memory held (values
        like 1e25 reached the weights, torch 2.14). Buffers of zeros from the start: without dampening, the first
        step then makes the buffer the gradient, as torch's own first step does."""
        if not isinstance(self.optimizer, torch.optim.SGD):
            return
        for group in self.optimizer.param_groups:
            if group["momentum"] and not group["dampening"]:
                for parameter in group["params"]:
                    state = self.optimizer.state[parameter]
                    if state.get("momentum_buffer") is None:
                        state["momentum_buffer"] = torch.zeros_like(parameter, memory_format=torch.preserve_format)

    def observe_loss(self, loss: torch.Tensor) -> None:
        self.loss_not_finite |= ~torch.isfinite(loss.detach())

    @contextlib.contextmanager
    def only_if_finite(self, grad_norm: torch.Tensor) -> Iterator[None]:
        """Around the loop's optimizer step: the step is not applied if its loss or gradient is not finite, decided
        on the device (a fused optimizer is told so as ``found_inf``; any other's changes are put back)."""
        bad = self.loss_not_finite | ~torch.isfinite(grad_norm)
        self.steps += 1
        self.bad_steps += bad
        self.first_bad_step = torch.where((self.first_bad_step == 0) & bad, self.steps, self.first_bad_step)
        self.loss_not_finite.zero_()
        if self.scaler_skips:  # the fp16 scaler skips such a step itself
            yield
        elif self.fused:
            tell_fused_optimizer_whether_to_skip(self.optimizer, bad)
            yield
        else:
            before = self.snapshot()
            yield
            self.restore(before, bad)

    def snapshot(self) -> list[tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]]:
        """Every parameter, its value and its optimizer state, as they are before a step."""
        return [(parameter, parameter.detach().clone(),
                 {key: value.clone() for key, value in self.optimizer.state.get(parameter, {}).items()
                  if torch.is_tensor(value)})
                for group in self.optimizer.param_groups for parameter in group["params"]]

    @torch.no_grad()
    def restore(self, before: list[tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]],
                bad: torch.Tensor) -> None:
        """Where ``bad``, parameters and optimizer state as ``before`` (a state the step created: zeros)."""
        for parameter, value, old_state in before:
            parameter.copy_(torch.where(bad, value, parameter))
            state = self.optimizer.state[parameter]
            for key, new in state.items():
                if torch.is_tensor(new):
                    state[key] = torch.where(bad, old_state.get(key, torch.zeros_like(new)), new)

    def check(self, step: int, window_steps: int) -> int:
        """After step ``step``: how many of the last ``window_steps`` were skipped; raises where the run must stop.
        Reads two numbers from the device."""
        bad, first = (int(value) for value in torch.stack([self.bad_steps, self.first_bad_step]).tolist())
        if bad and not self.scaler_skips and (self.stop or bad == window_steps):  # told to stop, or nothing is left
            alternative = "; or set train.on_nonfinite=skip to skip such steps and go on" if self.stop else ""
            raise NonFiniteStep(
                f"{bad} of the last {window_steps} steps had a non-finite loss or gradient (first: step {first}); "
                f"stopped after step {step}. Those steps were not applied, and no checkpoint was written since the "
                f"last one: lower train.lr, raise train.warmup_steps or check the data, then resume{alternative}"
            )
        return bad

    def describe(self, skipped: int) -> str:
        """For the log line of a window: the skipped steps, if any."""
        return f"  ({skipped} steps with a non-finite loss or gradient skipped)" if skipped else ""

    def reset(self) -> None:
        """Start a new window (after a log step)."""
        self.bad_steps.zero_()
        self.first_bad_step.zero_()
