"""KL coefficient controllers (Ziegler et al. 2019, arXiv:1909.08593).

fixed:    beta stays constant.
adaptive: after each step with measured KL ``kl`` over ``n_steps`` samples,
          e = clip(kl / target - 1, -0.2, 0.2);  beta *= 1 + e * n_steps / horizon.

Both expose ``value`` and ``state_dict``/``load_state_dict`` so a resumed run continues with
the same coefficient.
"""

from dataclasses import dataclass


@dataclass
class FixedKLController:
    """A constant KL coefficient."""

    value: float

    def update(self, kl: float, n_steps: int) -> None:
        """No-op: the coefficient is fixed."""

    def state_dict(self) -> dict[str, float]:
        return {"value": self.value}

    def load_state_dict(self, state: dict[str, float]) -> None:
        self.value = float(state["value"])


@dataclass
class AdaptiveKLController:
    """Proportional controller that steers the measured KL towards ``target``."""

    value: float
    target: float
    horizon: float

    def __post_init__(self) -> None:
        if self.target <= 0 or self.horizon <= 0:
            raise ValueError(
                f"adaptive KL controller needs target > 0 and horizon > 0 "
                f"(got target={self.target}, horizon={self.horizon})"
            )

    def update(self, kl: float, n_steps: int) -> None:
        """Move beta by at most 20% * n_steps / horizon towards the target KL."""
        error = min(max(kl / self.target - 1.0, -0.2), 0.2)
        self.value *= 1.0 + error * n_steps / self.horizon

    def state_dict(self) -> dict[str, float]:
        return {"value": self.value}

    def load_state_dict(self, state: dict[str, float]) -> None:
        self.value = float(state["value"])
