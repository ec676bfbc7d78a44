"""Steps whose loss or gradient is not finite never reach the weights.

The check stays on the device: each step's verdict goes to the fused optimizer as ``found_inf`` (as mixed-precision
loss scaling does), which then leaves parameters, moments and its step count untouched. Nothing synchronises with
the host per step; ``check`` reads the count at log steps and before every checkpoint, and then either stops the
run (``train.on_nonfinite=stop``, the default) or reports the skipped steps and goes on (``skip``). Either way no
checkpoint ever holds weights a non-finite step produced. In fp16, accelerate's gradient scaler skips overflowing
steps itself (that is how it finds its scale), so they are counted and reported, not stopped on.
"""

from __future__ import annotations

from typing import Any

import torch

from mpp.config import RunError


class NonFiniteStep(RunError):
    """A step with a non-finite loss or gradient under ``train.on_nonfinite=stop``, or a whole window of them."""


class NonFiniteGuard:
    def __init__(self, optimizer: Any, device: torch.device, stop: bool, scaler_skips: bool):
        self.optimizer = getattr(optimizer, "optimizer", optimizer)  # under accelerate's wrapper
        if not scaler_skips and not self.optimizer.defaults.get("fused"):
            raise ValueError("NonFiniteGuard skips steps through a fused optimizer's found_inf; create it fused=True")
        self.stop, self.scaler_skips = stop, scaler_skips
        self.loss_not_finite = torch.zeros((), dtype=torch.bool, device=device)  # any pass of the current step
        self.bad_steps = torch.zeros((), dtype=torch.long, device=device)  # since the last check
        self.first_bad_step = torch.zeros((), dtype=torch.long, device=device)  # 1-based; 0: none

    def observe_loss(self, loss: torch.Tensor) -> None:
        self.loss_not_finite |= ~torch.isfinite(loss.detach())

    def judge_step(self, step: int, grad_norm: torch.Tensor) -> None:
        """Before ``optimizer.step()`` of step ``step`` (1-based): let the optimizer skip it if it is bad."""
        bad = self.loss_not_finite | ~torch.isfinite(grad_norm)
        if not self.scaler_skips:
            self.optimizer.found_inf = bad.float()
        self.bad_steps += bad
        self.first_bad_step = torch.where((self.first_bad_step == 0) & bad, step, self.first_bad_step)
        self.loss_not_finite.zero_()

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
