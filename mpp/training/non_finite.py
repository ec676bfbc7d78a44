"""Steps whose loss or gradient is not finite never reach the weights, on every backend.

The verdict stays on the device, and so does skipping the step: nothing synchronises with the host per step.
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
from typing import Any, Iterator

import torch

from mpp.errors import RunError
from mpp.private_apis import tell_fused_optimizer_whether_to_skip


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
