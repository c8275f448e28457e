"""Noticing a run that has stopped learning, instead of letting it collapse in silence.

Two signs, each counted over consecutive steps:

- No learning signal. Group-relative estimators (GRPO, RLOO, DAPO, ...) compare the samples of
  one prompt; when every prompt's samples score the same, every advantage is 0 and the update
  teaches nothing (or only its KL and entropy terms act). Logged per step:
  ``signal/groups_with_spread``, the share of prompts whose samples' ``scores`` are not all
  equal (with one sample per prompt, 1 when the batch's scores differ at all, else 0; a step
  that dynamic sampling left empty counts as 0). Not a warning when a distillation teacher
  scores every token (its terms teach whatever the scores).
- Failing tools (agent runs): ``agent/tool_error_rate``, the share of the step's tool calls
  that came back as errors, above ``trainer.collapse_tool_error_rate``.

``signal/steps_without_spread`` and ``agent/steps_with_tool_errors`` count the current
streaks. When one reaches ``trainer.collapse_steps`` (and every as many steps after), a warning
names the likely causes; with ``trainer.stop_on_collapse`` the run then ends after the step,
with a checkpoint (``stopped`` says why).
"""

import sys

import torch

from ascent.batch import Batch

NO_SIGNAL = (
    "for {steps} steps in a row no prompt's samples scored differently "
    "(signal/groups_with_spread 0): every group-relative advantage is 0, so the policy learns "
    "nothing. Likely causes: the warm start (the model never or always answers right: read "
    "generations.jsonl and val/*), the reward (a scorer that gives everything one value: "
    "critic/score/*, reward/errors), or the format (responses cut at "
    "rollout.max_response_length, a stop token or chat template the scorer does not expect: "
    "response_length/*, agent/end/*)"
)
TOOL_ERRORS = (
    "for {steps} steps in a row more than {limit:.0%} of the tool calls failed "
    "(agent/tool_error_rate {rate:.2f}). Likely causes: malformed calls (the warm start, or a "
    "tool-call format the model was not taught: read generations.jsonl), tools the model is "
    "not shown (rollout.agent.tools_in_prompt), or a tool that raises (call it by hand with a "
    "logged call's arguments)"
)


def groups_with_spread(scores: torch.Tensor, groups: torch.Tensor) -> float:
    """The share of groups whose ``scores`` (B,) are not all equal; ``groups`` (B,) holds
    each row's group id. With singleton groups, 1.0 if the scores differ at all, else 0."""
    if scores.numel() == 0:
        return 0.0
    ids, index = torch.unique(groups, return_inverse=True)
    if len(ids) == len(groups):  # one sample per prompt: the batch is the comparison
        return float(scores.max() > scores.min())
    low = torch.full((len(ids),), torch.inf).scatter_reduce(0, index, scores.float(), "amin")
    high = torch.full((len(ids),), -torch.inf).scatter_reduce(0, index, scores.float(), "amax")
    return float((high > low).float().mean())


class CollapseWatch:
    """``check`` after every step: returns the step's signal metrics, warns at ``steps`` in
    a row (0: never), and sets ``stopped`` to the warning when ``stop`` is set."""

    def __init__(
        self, steps: int, tool_error_rate: float, stop: bool, per_token_signal: bool = False
    ) -> None:
        """``per_token_signal``: the run has a signal of its own on every token (a
        distillation teacher), so equal scores within groups are no warning."""
        self.steps, self.tool_error_rate, self.stop = steps, tool_error_rate, stop
        self.per_token_signal = per_token_signal
        self.without_spread = 0
        self.with_tool_errors = 0
        self.stopped: str | None = None

    def check(self, step: int, batch: Batch, metrics: dict[str, float]) -> dict[str, float]:
        spread = 0.0
        if len(batch):
            spread = groups_with_spread(batch["scores"], batch.group_ids("uid"))
        self.without_spread = 0 if spread > 0 else self.without_spread + 1
        found = {
            "signal/groups_with_spread": spread,
            "signal/steps_without_spread": float(self.without_spread),
        }
        if not self.per_token_signal:
            self._warn_at(step, self.without_spread, NO_SIGNAL.format(steps=self.without_spread))
        rate = metrics.get("agent/tool_error_rate")
        if rate is not None:
            failing = rate > self.tool_error_rate
            self.with_tool_errors = self.with_tool_errors + 1 if failing else 0
            found["agent/steps_with_tool_errors"] = float(self.with_tool_errors)
            warning = TOOL_ERRORS.format(
                steps=self.with_tool_errors, limit=self.tool_error_rate, rate=rate
            )
            self._warn_at(step, self.with_tool_errors, warning)
        return found

    def _warn_at(self, step: int, streak: int, warning: str) -> None:
        if not self.steps or streak == 0 or streak % self.steps:
            return
        print(f"warning: step {step}: {warning}", file=sys.stderr, flush=True)
        if self.stop and self.stopped is None:
            self.stopped = f"step {step}: {warning}"

    def state_dict(self) -> dict[str, int]:
        return {"without_spread": self.without_spread, "with_tool_errors": self.with_tool_errors}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.without_spread = state["without_spread"]
        self.with_tool_errors = state["with_tool_errors"]
