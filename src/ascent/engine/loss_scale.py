"""Dynamic loss scaling for float16 training under FSDP2.

A float16 backward loses every gradient below 2^-24 (the smallest subnormal) and rounds
those below 2^-14 coarsely; a policy-gradient loss divided by the global token count makes
many of them that small. So the loss is multiplied by a scale S before backward:

    L_scaled = S * L    =>    g_scaled = S * g

and every gradient is divided by S again before clipping and the optimiser step. S is a
power of two (``init_scale`` must be one; growth and backoff are by 2), so multiplying and
dividing by it are exact in floating point whenever nothing overflows or becomes subnormal:
the unscaled gradient is the one float16 would give if its range were wider.

The decision after each mini-batch's backward (``LossScaler.check``), taken alike on every
rank: each rank looks at the local shards of its gradients (FSDP2 DTensors, each element on
exactly one rank) and at the losses it scaled, and one all-reduce (MAX) over all ranks of

    [any local gradient element non-finite, any local loss non-finite]

makes the verdict global (a rank whose shards are clean still skips when another's overflow):

- the loss was non-finite somewhere: the forward is at fault, not S (the forward does not
  depend on S), so the step is skipped as a *non-finite update* (the run's fault guard,
  ``trainer.max_consecutive_nonfinite``, counts it) and S stays;
- else a gradient was non-finite: S was too large, the step is skipped as an expected
  *overflow* (metric ``<role>/loss_scale_skipped``, not a fault), the gradients are
  zeroed and S <- S * 0.5; at ``MIN_SCALE`` (1: no scaling left to undo) an overflow is a
  non-finite update instead, so a run that overflows whatever S cannot skip forever;
- else the gradients are unscaled (g <- g / S), clipped and stepped; after
  ``growth_interval`` such clean steps in a row S <- S * 2.

torch's ``GradScaler`` does the same on DTensor gradients (its found-inf is reduced over
each DTensor's mesh), but its skip is decided inside ``step(optimizer)``, apart from ascent's
own clipping over several meshes (``ascent.engine.gradients``) and from the non-finite-loss
case; this module is those few lines, with its state (S, clean steps in a row) saved in the
engine's checkpoint so that a resumed run scales exactly as the uninterrupted one.
"""

from enum import Enum

import torch
import torch.distributed as dist
from torch import Tensor
from torch.distributed.tensor import DTensor

GROWTH = 2.0
BACKOFF = 0.5
MIN_SCALE = 1.0


class Verdict(Enum):
    """What a mini-batch's gradients allow: step, skip for an overflow, skip as non-finite."""

    CLEAN = "clean"
    OVERFLOW = "overflow"
    NON_FINITE = "non_finite"


def _local(tensor: Tensor) -> Tensor:
    return tensor.to_local() if isinstance(tensor, DTensor) else tensor


class LossScaler:
    """The scale S of one engine's float16 training and its clean-step counter;
    ``init_scale``: a power of two >= 1 (``LossScaleSettings`` checks)."""

    def __init__(self, init_scale: float, growth_interval: int, device: torch.device) -> None:
        self.scale = float(init_scale)
        self.growth_interval = growth_interval
        self.clean_steps = 0  # optimiser steps in a row without overflow
        self.device = device
        self._loss_finite = torch.ones((), dtype=torch.bool, device=device)

    def scale_loss(self, loss: Tensor) -> Tensor:
        """S * loss, noting (without a device sync) whether the loss itself was finite."""
        self._loss_finite &= torch.isfinite(loss.detach()).all()
        return loss * self.scale

    @torch.no_grad()
    def check(self, params: list[Tensor]) -> Verdict:
        """The verdict on the mini-batch's scaled gradients of ``params``, the same on every
        rank (one all-reduce); a CLEAN one leaves the gradients unscaled (divided by S)."""
        grads = [_local(p.grad) for p in params if p.grad is not None]
        finite = torch.stack([torch.isfinite(g).all() for g in grads]).all() if grads else True
        flags = torch.stack(
            [torch.as_tensor(finite, device=self.device).logical_not(), ~self._loss_finite]
        ).float()
        if dist.is_initialized() and dist.get_world_size() > 1:
            dist.all_reduce(flags, op=dist.ReduceOp.MAX)
        self._loss_finite.fill_(True)
        grads_bad, loss_bad = flags.tolist()
        if loss_bad or (grads_bad and self.scale <= MIN_SCALE):
            return Verdict.NON_FINITE
        if grads_bad:
            return Verdict.OVERFLOW
        inverse = 1.0 / self.scale  # exact: S is a power of two
        for grad in grads:  # the local pieces: scaling in place moves nothing
            grad.mul_(inverse)
        return Verdict.CLEAN

    def update(self, verdict: Verdict) -> None:
        """Back off after an overflow, grow after ``growth_interval`` clean steps in a row;
        a non-finite step leaves S as it is (the forward was at fault) but ends the run of
        clean steps."""
        if verdict is Verdict.CLEAN:
            self.clean_steps += 1
            if self.clean_steps >= self.growth_interval:
                self.scale *= GROWTH
                self.clean_steps = 0
            return
        self.clean_steps = 0
        if verdict is Verdict.OVERFLOW:
            self.scale = max(self.scale * BACKOFF, MIN_SCALE)

    def state_dict(self) -> dict[str, float | int]:
        return {"scale": self.scale, "clean_steps": self.clean_steps}

    def load_state_dict(self, state: dict[str, float | int]) -> None:
        self.scale, self.clean_steps = float(state["scale"]), int(state["clean_steps"])
