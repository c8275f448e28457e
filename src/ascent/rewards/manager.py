"""Scoring a batch: decode each response, call the scoring function in a process pool with a
per-sample time limit, and turn the results into tensors.

A scorer that raises, runs past ``timeout_s`` (its process is killed and replaced) or returns
NaN/inf gives score 0 for that sample; the step goes on, the failures are counted in the
metrics (reward/errors, reward/timeouts, reward/non_finite), and the first one is printed
with its sample. Exactly one score per sample, checked. A dict result's other numeric keys
become metrics (``acc`` is the accuracy used by the metrics and the dynamic-sampling filter).
The function is called as verl calls it, by keyword (``ascent.rewards.signature``); one whose
signature verl could not call either is refused when the manager is built.

The pool (``ascent.rewards.pool``) survives the run being stopped: its processes ignore the
SIGTERM/SIGINT that the driver answers with a checkpoint, a sample whose process was killed
from outside is scored again (never 0), and a pool that pebble gave up on is replaced. A
sample whose process dies on every try stops the step with its data source and response.
"""

import math
from collections.abc import Iterable
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

import torch
from pydantic import Field

from ascent.batch import Batch
from ascent.engine.config import Strict
from ascent.errors import InputError
from ascent.importing import load_object
from ascent.rewards.call import score_sample
from ascent.rewards.pool import ScorerDied, ScoringPool
from ascent.rewards.signature import verl_call
from ascent.rewards.tokens import token_rewards
from ascent.rollout.types import response_lengths


class RewardConfig(Strict):
    """How responses are scored."""

    function: str | None = Field(
        None,
        description="'module:function' or 'file.py:function' with verl's compute_score "
        "signature; None: the built-in scorer of each row's data_source.",
    )
    workers: int = Field(
        2, ge=0, description="Scoring processes (0: in this process, without time limits)."
    )
    timeout_s: float = Field(10.0, gt=0, description="Time limit per sample.")
    function_weight: float = Field(
        1.0,
        description="Weight of the function's score in the reward (beside "
        "reward_model.weight); at 0 it is only measured (acc, val/*).",
    )


def response_texts(batch: Batch, tokenizer: Any) -> list[str]:
    """Each response decoded without special tokens: what every scorer reads."""
    lengths = response_lengths(batch).tolist()
    return tokenizer.batch_decode(
        [row[:n].tolist() for row, n in zip(batch["responses"], lengths, strict=True)],
        skip_special_tokens=True,
    )


class RewardFailure(RuntimeError):
    """Scoring cannot go on: the scorer failed on every sample of a batch, or a sample's
    scoring process died on every try. The step stops; its message names the sample."""


class RewardManager:
    def __init__(self, config: RewardConfig, tokenizer: Any) -> None:
        self.config = config
        self.tokenizer = tokenizer
        if config.function is not None:  # a typo fails now, not as a run of zero rewards
            try:
                function = load_object(config.function)
                if not callable(function):
                    raise TypeError("it is not callable")
                verl_call(function)  # a signature verl could not call either is refused now
            except Exception as error:
                raise InputError(f"reward.function={config.function!r}: {error}") from error
        self.pool = ScoringPool(config.workers, config.timeout_s) if config.workers else None
        self.reported_failure = False

    def score(self, batch: Batch, texts: list[str] | None = None) -> tuple[Batch, dict[str, float]]:
        """Adds ``scores`` and ``acc`` (B,), ``token_rewards`` (B, R) (the score on the last
        response token), ``reward_extra/<key>`` (B,) fields, and ``answers`` (a list: the
        scorer's ``pred`` string of each row, or None); returns the counts.
        ``texts``: the responses as ``response_texts`` decodes them, when already decoded."""
        if texts is None:
            texts = response_texts(batch, self.tokenizer)
        calls = [
            (self.config.function, source, text, truth, extra)
            for source, text, truth, extra in zip(
                batch["data_source"], texts, batch["ground_truth"], batch["extra_info"], strict=True
            )
        ]
        outcomes = list(self._run(calls))
        if len(outcomes) != len(batch):
            raise RuntimeError(f"{len(outcomes)} rewards for {len(batch)} samples")
        counts = {"errors": 0.0, "timeouts": 0.0, "non_finite": 0.0}
        scores, extras = [], []
        for call, (score, extra, failure) in zip(calls, outcomes, strict=True):
            if failure is not None:
                counts[failure[0]] += 1
                self._report(call, failure[1])
                score, extra = 0.0, {}
            scores.append(score)
            extras.append(extra)
        failed = [failure for _, _, failure in outcomes if failure is not None]
        if len(failed) == len(batch) > 1:  # a broken scorer, not a flaky one: stop the run
            raise RewardFailure(
                f"reward: the scorer failed on all {len(batch)} samples of the batch (first: "
                f"{failed[0][1]}); fix reward.function or the data's ground truth"
            )
        return self._as_fields(batch, scores, extras), {f"reward/{k}": v for k, v in counts.items()}

    def _run(self, calls: list[tuple]) -> Iterable[tuple[float, dict, tuple | None]]:
        if self.pool is None:
            for call in calls:
                yield self._checked(lambda call=call: score_sample(*call))
            return
        try:
            futures = self.pool.run(score_sample, calls)
        except ScorerDied as error:
            _, source, text, truth, _ = calls[error.index]
            raise RewardFailure(
                f"reward: a sample of data_source={source!r}, ground_truth={truth!r}, "
                f"response={text[:200]!r} has no score: {error}. The step stops; the last "
                "checkpoint stands"
            ) from None
        for future in futures:
            yield self._checked(future.result)

    @staticmethod
    def _checked(get: Any) -> tuple[float, dict, tuple | None]:
        try:
            score, extra = get()
        except FutureTimeout:
            return 0.0, {}, ("timeouts", "ran past the time limit")
        except Exception as error:
            return 0.0, {}, ("errors", f"{type(error).__name__}: {error}")
        if not math.isfinite(score):
            return 0.0, {}, ("non_finite", f"returned {score}")
        return score, extra, None

    def _report(self, call: tuple, reason: str) -> None:
        if self.reported_failure:
            return
        self.reported_failure = True
        _, source, text, truth, _ = call
        print(
            f"reward: the scorer failed ({reason}) on a sample of data_source={source!r}, "
            f"ground_truth={truth!r}, response={text[:200]!r}; it scores 0 and such failures "
            "are counted in reward/* metrics (reported once per run)"
        )

    def _as_fields(self, batch: Batch, scores: list[float], extras: list[dict]) -> Batch:
        score_tensor = torch.tensor(scores, dtype=torch.float32)
        on_tokens = token_rewards(batch, score_tensor)
        keys = sorted({k for extra in extras for k in extra} - {"pred"})
        fields = {
            f"reward_extra/{k}": torch.tensor([e.get(k, math.nan) for e in extras]) for k in keys
        }
        # Always a field, so that batches scored apart (refill rounds) keep one set of keys.
        fields["answers"] = [extra.get("pred") for extra in extras]
        accuracy = fields.get("reward_extra/acc", score_tensor)
        return batch.assign(
            scores=score_tensor, token_rewards=on_tokens, acc=accuracy.nan_to_num(0.0), **fields
        )

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()
            self.pool = None
