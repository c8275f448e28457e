"""Validation: answers to the held-out prompts, scored as training rollouts are.

By default one greedy answer per prompt. With ``trainer.val_samples_per_prompt`` n > 1, n
sampled answers per prompt, and the @k metrics of ``ascent.algos.pass_at_k`` over them
(mean@k, pass@k, maj@k for each k of ``trainer.val_k``): per data source
``val/<source>/pass@k``, and over all prompts ``val/pass@k``, each prompt counting once.
maj@k votes on the scorer's extracted answer (its ``pred``, the ``answers`` field) and, for
an answer without one, on the response itself (the same tokens)."""

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import torch

from ascent.algos.pass_at_k import at_k_metrics, default_ks
from ascent.batch import Batch
from ascent.config import ConfigError
from ascent.controller import WorkerGroup
from ascent.data.rl import RLPrompt, prompts_batch
from ascent.trainer.rl.config import RLConfig


@dataclass(frozen=True)
class ValSampling:
    """How validation answers: ``n`` answers per prompt at ``temperature`` (0: greedy), the
    @k metrics for each of ``ks`` (when n > 1), and one greedy answer more (``greedy``)."""

    n: int
    temperature: float
    ks: tuple[int, ...]
    greedy: bool

    def describe(self) -> str:
        ks = ", ".join(map(str, self.ks))
        greedy = " and one greedy answer" if self.greedy else ""
        return (
            f"validation: {self.n} answers per prompt at temperature {self.temperature:g}"
            f"{greedy}; mean@k, pass@k, maj@k for k = {ks}"
        )


def val_sampling(config: RLConfig) -> ValSampling:
    """``trainer.val_*`` resolved and checked (errors name the fields)."""
    t = config.trainer
    n = t.val_samples_per_prompt
    greedy_default = 0.0 if n == 1 else config.rollout.temperature
    temperature = greedy_default if t.val_temperature is None else t.val_temperature
    if n > 1 and temperature == 0:
        raise ConfigError(
            f"trainer.val_samples_per_prompt={n} with trainer.val_temperature=0: greedy "
            "answers are one answer repeated; sample (a temperature > 0, or unset for "
            "rollout.temperature) or validate with 1 answer"
        )
    ks = tuple(default_ks(n) if t.val_k is None else t.val_k)
    if any(not 1 <= k <= n for k in ks):
        raise ConfigError(
            f"trainer.val_k={list(ks)}: each k must be from 1 to trainer.val_samples_per_prompt={n}"
        )
    if t.val_greedy and temperature == 0:
        raise ConfigError(
            "trainer.val_greedy=true adds a greedy answer to sampled ones, but validation "
            "is greedy already: set trainer.val_samples_per_prompt > 1 or val_temperature > 0"
        )
    return ValSampling(n=n, temperature=temperature, ks=ks, greedy=t.val_greedy)


class Validation:
    """``validation() -> metrics``: ``val/<data_source>/acc`` and ``/score`` (and
    ``/model_score``, ``/judge_score`` where those scorers run), means over every answer;
    the @k metrics with more than one answer per prompt; ``val/<source>/greedy/*`` with
    ``greedy``; the row kind's own metrics, and the scorers' failures
    (``val/reward/errors``, ``timeouts``, ``val/judge/*``) when any."""

    def __init__(
        self,
        sampling: ValSampling,
        rollout: WorkerGroup,
        rewards: Any,
        rows: Any,
        prompts: list[RLPrompt],
        pad_id: int,
    ) -> None:
        self.sampling, self.rollout, self.rewards, self.rows = sampling, rollout, rewards, rows
        self.prompts, self.pad_id = prompts, pad_id

    def __call__(self) -> dict[str, float]:
        if not self.prompts:
            return {}
        s = self.sampling
        scored, metrics = self._answers(s.n, s.temperature, "val")
        metrics |= per_source_means(scored) | self.rows.validation_metrics(scored)
        if s.n > 1:
            metrics |= at_k(scored, s.ks)
        if s.greedy:
            greedy, failures = self._answers(1, 0.0, "val/greedy")
            metrics |= failures | per_source_means(greedy, "greedy/")
        return metrics

    def _answers(self, n: int, temperature: float, prefix: str) -> tuple[Batch, dict]:
        """The prompts' scored answers, and the scorers' failure counts under ``prefix``.
        The prompts are padded by repeats to a multiple of the generation ranks; the repeats
        are not scored."""
        padded = self.prompts + self.prompts[: -len(self.prompts) % self.rollout.dp_size]
        batch = self.rollout.generate(
            prompts_batch(padded, self.pad_id, "val"),
            sampling={"n": n, "temperature": temperature},
        )
        scored, failures = self.rows.score_validation(batch, len(self.prompts), self.rewards)
        # Logged when some happened: a scorer failing on validation answers lowers val/*/acc
        # without being the model's fault.
        return scored, {f"{prefix}/{name}": count for name, count in failures.items() if count}


def per_source_means(scored: Batch, prefix: str = "") -> dict[str, float]:
    """Means of the scored rows' accuracy and scores, per data source:
    ``val/<source>/<prefix><name>``."""
    by_source: dict[str, list[int]] = defaultdict(list)
    for row, source in enumerate(scored["data_source"]):
        by_source[source].append(row)
    fields = {
        "acc": "acc",
        "score": "scores",
        "model_score": "model_scores",
        "judge_score": "judge_scores",
    }
    metrics = {}
    for source, rows in by_source.items():
        for name, field in fields.items():
            if field in scored:
                metrics[f"val/{source}/{prefix}{name}"] = float(scored[field][rows].mean())
    return metrics


def at_k(scored: Batch, ks: tuple[int, ...]) -> dict[str, float]:
    """``val/<source>/{mean,pass,maj}@k`` (means over the source's prompts) and
    ``val/{mean,pass,maj}@k`` (over all prompts) from a prompt's rows (its ``uid``)."""
    groups: dict[str, list[int]] = defaultdict(list)
    for row, uid in enumerate(scored["uid"]):
        groups[uid].append(row)
    counts = {len(rows) for rows in groups.values()}
    if len(counts) != 1:
        raise RuntimeError(f"validation prompts have unequal numbers of answers: {counts}")
    index = torch.tensor(list(groups.values()))  # (P, n)
    keys = answer_keys(scored)
    answers = torch.tensor([_class_ids([keys[row] for row in rows]) for rows in index.tolist()])
    metrics = at_k_metrics(scored["acc"][index], answers, list(ks))
    sources = [scored["data_source"][rows[0]] for rows in groups.values()]
    out = {f"val/{name}": float(values.mean()) for name, values in metrics.items()}
    for source in sorted(set(sources)):
        prompts = torch.tensor([s == source for s in sources])
        out |= {f"val/{source}/{name}": float(v[prompts].mean()) for name, v in metrics.items()}
    return out


def answer_keys(scored: Batch) -> list[tuple]:
    """What maj@k votes on, per row: the scorer's extracted answer, else the response."""
    answers = scored.get("answers") or [None] * len(scored)
    keys = []
    for row, answer in enumerate(answers):
        if answer is not None:
            keys.append(("answer", answer))
        else:
            mask = scored["response_mask"][row].bool()
            keys.append(("response", *scored["responses"][row][mask].tolist()))
    return keys


def _class_ids(keys: list[tuple]) -> list[int]:
    """Equal keys, equal ids."""
    ids: dict[tuple, int] = {}
    return [ids.setdefault(key, len(ids)) for key in keys]
