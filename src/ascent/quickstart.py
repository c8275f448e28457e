"""``make quickstart`` until the trainer exists: the algorithm core learning a toy task.

A toy policy (one independent softmax per prompt and position, no transformer yet) learns
to spell a target word for each prompt. Every step runs the real ascent pieces the trainer
will use: a ``Batch`` of prompts, ``repeat_interleave`` for n samples per prompt, rollout
log-probs kept, GRPO advantages over the groups, the PPO loss aggregated with global
denominators over micro-batches, rollout-correction metrics, and a dump and reload of the
scored batch. It prints one line per step and writes ``runs/quickstart/summary.json``.
"""

import json
import string
import time
from pathlib import Path

import torch
from torch import Tensor

from ascent.algos import (
    AdvantageInputs,
    LossNormalizer,
    PolicyLossInputs,
    actor_objective,
    compute_advantages,
    compute_policy_loss,
    rollout_correction,
)
from ascent.batch import Batch

WORDS = ["ascent", "reward", "policy", "kl", "gae", "rloo"]
VOCAB = ["<stop>", *string.ascii_lowercase]
MAX_LEN = 7
PROMPTS_PER_STEP, SAMPLES_PER_PROMPT = 6, 8
MINI_BATCHES, MICRO_BATCHES = 2, 2  # optimiser steps per RL step; micro-batches per step


def encode(word: str) -> list[int]:
    return [VOCAB.index(c) for c in word] + [0]


class ToyPolicy(torch.nn.Module):
    """logits[prompt, position, token]: a policy whose every choice is a free parameter."""

    def __init__(self) -> None:
        super().__init__()
        self.logits = torch.nn.Parameter(torch.zeros(len(WORDS), MAX_LEN, len(VOCAB)))

    def log_probs_and_entropy(self, prompts: Tensor, tokens: Tensor) -> tuple[Tensor, Tensor]:
        logp = torch.log_softmax(self.logits[prompts], dim=-1)  # (B, T, V)
        entropy = -(logp.exp() * logp).sum(-1)
        return logp.gather(-1, tokens.unsqueeze(-1)).squeeze(-1), entropy

    @torch.no_grad()
    def generate(self, prompts: Tensor, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        """Sample MAX_LEN tokens per prompt; the response ends at its first <stop>."""
        probs = torch.softmax(self.logits[prompts], dim=-1).flatten(0, 1)
        tokens = torch.multinomial(probs, 1, generator=generator).view(len(prompts), MAX_LEN)
        stopped_before = (tokens == 0).int().cumsum(-1) - (tokens == 0).int()
        return tokens, stopped_before == 0  # the mask keeps tokens up to and including <stop>


def score(tokens: Tensor, mask: Tensor, words: list[str]) -> Tensor:
    """Share of the target's characters (and its <stop>) spelled right; 1.0 is exact."""
    scores = []
    for row, valid, word in zip(tokens.tolist(), mask.tolist(), words, strict=True):
        response = [t for t, v in zip(row, valid, strict=True) if v]
        target = encode(word)
        hits = sum(a == b for a, b in zip(response, target, strict=False))
        scores.append(hits / max(len(target), len(response)))
    return torch.tensor(scores)


def ppo_update(policy: ToyPolicy, optimizer: torch.optim.Optimizer, batch: Batch) -> dict:
    """PPO over mini-batches (one optimiser step each) made of micro-batches (accumulated).

    The loss denominators are those of the mini-batch, so accumulating the micro-batch
    losses gives exactly the mini-batch gradient. Loss terms (pg_loss, entropy) are shares
    that add up over micro-batches; rates (pg_clipfrac, ppo_kl) are averaged.
    """
    totals: dict[str, float] = {}
    for mini in batch.split(MINI_BATCHES):
        normalizer = LossNormalizer.from_mask(mini["response_mask"], norm_length=MAX_LEN)
        optimizer.zero_grad()
        for micro in mini.split(MICRO_BATCHES):
            mask = micro["response_mask"]
            lp, entropy = policy.log_probs_and_entropy(micro["prompt"], micro["responses"])
            inputs = PolicyLossInputs(lp, micro["old_log_probs"], micro["advantages"], mask)
            objective = actor_objective(
                compute_policy_loss("ppo", inputs, clip_low=0.2, clip_high=0.28),
                mask,
                mode="token-mean",
                normalizer=normalizer,
                entropy=entropy,
                entropy_coef=0.001,
            )
            objective.loss.backward()
            for key, value in objective.metrics.items():
                weight = 1 if key in ("pg_loss", "entropy") else 1 / MICRO_BATCHES
                totals[key] = totals.get(key, 0.0) + value.item() * weight / MINI_BATCHES
        optimizer.step()
    return totals


def run_quickstart(steps: int = 40, seed: int = 0, out_dir: str = "runs/quickstart") -> int:
    """Train the toy policy with GRPO + PPO; returns 0 when the score improved."""
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    policy = ToyPolicy()
    optimizer = torch.optim.Adam(policy.parameters(), lr=0.3)
    out = Path(out_dir)
    history = []
    start = time.perf_counter()
    print(
        f"{'step':>4}  {'score':>6}  {'exact':>6}  {'pg_loss':>8}  {'clipfrac':>8}  {'entropy':>7}"
    )
    for step in range(steps):
        prompt_ids = torch.randint(0, len(WORDS), (PROMPTS_PER_STEP,), generator=generator)
        prompts = Batch.from_dict(
            {
                "prompt": prompt_ids,
                "uid": [f"{step}-{i}" for i in range(PROMPTS_PER_STEP)],
                "ground_truth": [WORDS[i] for i in prompt_ids.tolist()],
            },
            meta={"step": step},
        )
        batch = prompts.repeat_interleave(SAMPLES_PER_PROMPT)
        tokens, mask = policy.generate(batch["prompt"], generator)
        with torch.no_grad():
            rollout_lp, _ = policy.log_probs_and_entropy(batch["prompt"], tokens)
        scores = score(tokens, mask, batch["ground_truth"])
        last = mask.sum(-1) - 1
        rewards = torch.zeros(mask.shape).scatter(1, last.unsqueeze(-1), scores.unsqueeze(-1))
        batch = batch.assign(responses=tokens, response_mask=mask, rollout_log_probs=rollout_lp)
        batch = batch.assign(token_rewards=rewards, scores=scores)

        adv = compute_advantages(
            "grpo",
            AdvantageInputs(rewards, mask, group_ids=batch.group_ids("uid")),
        )
        batch = batch.assign(advantages=adv.advantages, old_log_probs=rollout_lp)

        metrics = ppo_update(policy, optimizer, batch)

        mismatch = rollout_correction(batch["old_log_probs"], batch["rollout_log_probs"], mask)
        exact = (scores == 1.0).float().mean().item()
        history.append({"step": step, "score": scores.mean().item(), "exact": exact, **metrics})
        history[-1]["mismatch_k3"] = mismatch.metrics["mismatch_k3"].item()
        if step % 5 == 0 or step == steps - 1:
            print(
                f"{step:>4}  {scores.mean():6.3f}  {exact:6.3f}  {metrics['pg_loss']:8.4f}  "
                f"{metrics['pg_clipfrac']:8.3f}  {metrics['entropy']:7.3f}"
            )

    # Dump the last scored batch and read it back: what --dump-rollouts will do per step.
    dumped = batch.save(out / "last_batch", overwrite=True)
    assert Batch.load(dumped).equals(batch)
    first = sum(h["score"] for h in history[:5]) / 5
    final = sum(h["score"] for h in history[-5:]) / 5
    summary = {
        "score_first_5_steps": first,
        "score_last_5_steps": final,
        "seconds": time.perf_counter() - start,
        "history": history,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    print(
        f"\nmean score {first:.3f} -> {final:.3f} over {steps} GRPO steps "
        f"({summary['seconds']:.1f} s); batch dumped to {dumped}, summary in {out}/summary.json"
    )
    return 0 if final > first + 0.3 else 1
