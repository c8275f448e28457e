"""Validation: greedy answers to the held-out prompts, scored as training rollouts are."""

from collections import defaultdict
from typing import Any

from ascent.batch import Batch
from ascent.controller import WorkerGroup
from ascent.data.rl import RLPrompt, prompts_batch


def validate(
    rollout: WorkerGroup, rewards: Any, rows: Any, prompts: list[RLPrompt], pad_id: int
) -> dict[str, float]:
    """One greedy answer per prompt: ``val/<data_source>/acc`` and ``/score`` (and
    ``/model_score``, ``/judge_score`` where those scorers run), the row kind's own metrics,
    and the scorers' failures (``val/reward/errors``, ``timeouts``, ``val/judge/*``) when
    any. The prompts are padded by repeats to a multiple of the generation ranks; the
    repeats are not scored."""
    if not prompts:
        return {}
    padded = prompts + prompts[: -len(prompts) % rollout.dp_size]
    batch = rollout.generate(
        prompts_batch(padded, pad_id, "val"), sampling={"n": 1, "temperature": 0.0}
    )
    scored, failures = rows.score_validation(batch, len(prompts), rewards)
    # Logged when some happened: a scorer failing on validation answers lowers val/*/acc
    # without being the model's fault.
    metrics = {f"val/{name}": count for name, count in failures.items() if count}
    metrics |= per_source_means(scored)
    return metrics | rows.validation_metrics(scored)


def per_source_means(scored: Batch) -> dict[str, float]:
    """Means of the scored rows' accuracy and scores, per data source."""
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
                metrics[f"val/{source}/{name}"] = float(scored[field][rows].mean())
    return metrics
