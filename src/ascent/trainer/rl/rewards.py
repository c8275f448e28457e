"""A run's rewards: the function reward (``ascent.rewards.manager``) and, when configured, a
reward model's score and a generative judge's (``ascent.rewards.judge``), combined by weights:

    score[i] = reward.function_weight * function_score[i]
             + reward_model.weight * model_score[i] + judge.weight * judge_score[i]

placed on the last response token like any outcome score. The function still runs at weight 0:
its ``acc`` stays the accuracy that metrics, validation and dynamic sampling read (a rule
checked on the side while the policy trains against a reward model or a judge). The batch keeps
the parts, ``function_scores``, ``model_scores`` and ``judge_scores`` (B,); the run logs their
distributions, and the judge's failure counts (judge/*) with the function's (reward/*).

The reward model and the judge read each response as text: decoded with the policy's tokenizer
(special tokens skipped, as the function reward reads it), beside the row's chat prompt (or,
for raw-text prompts, the prompt decoded as a user message). The reward model gets them as a
conversation, rendered by its worker with its own tokenizer and template; the judge as the
``{prompt}`` and ``{response}`` of its template (``prompt_text``).
"""

from pydantic import Field

from ascent.batch import Batch
from ascent.controller import WorkerGroup
from ascent.engine import FSDPConfig, ModelConfig
from ascent.engine.config import Strict
from ascent.rewards.judge import Judge, prompt_text
from ascent.rewards.manager import RewardManager, response_texts
from ascent.rewards.tokens import token_rewards
from ascent.workers.resources import ResourcesConfig
from ascent.workers.reward_model import RewardModelConfig


class RewardModelSettings(Strict):
    """A reward model (a sequence classifier, e.g. from ``ascent rm``) scoring responses."""

    model: ModelConfig = Field(description="Its checkpoint (ModelConfig; its own tokenizer).")
    weight: float = Field(
        1.0, description="Weight of its score in the reward (beside reward.function_weight)."
    )
    chat_template: bool = Field(
        True, description="Render with its tokenizer's chat template (false: plain text)."
    )
    max_length: int = Field(
        2048, ge=2, description="Tokens per scored conversation (longer: the end is kept)."
    )
    tokens_per_micro_batch: int = Field(8192, ge=1, description="Token budget per forward.")
    fsdp: FSDPConfig = Field(FSDPConfig(), description="Sharding (FSDPConfig).")
    resources: ResourcesConfig | None = Field(
        None, description="Own devices; None: colocated with the actor."
    )

    def worker_config(self) -> RewardModelConfig:
        return RewardModelConfig(
            model=self.model,
            fsdp=self.fsdp,
            chat_template=self.chat_template,
            max_length=self.max_length,
            tokens_per_micro_batch=self.tokens_per_micro_batch,
        )


class RunRewards:
    """``score(batch) -> (batch, counts)``: the combined rewards of a generated batch."""

    def __init__(
        self,
        function: RewardManager,
        settings: RewardModelSettings | None,
        tokenizer: object,
        model: WorkerGroup | None,
        judge: Judge | None = None,
    ) -> None:
        self.function, self.function_weight = function, function.config.function_weight
        self.settings, self.tokenizer, self.model = settings, tokenizer, model
        self.judge = judge

    def score(self, batch: Batch) -> tuple[Batch, dict[str, float]]:
        texts = response_texts(batch, self.tokenizer)  # decoded once for every scorer
        batch, counts = self.function.score(batch, texts)
        if self.model is None and self.judge is None and self.function_weight == 1.0:
            return batch, counts  # the function's scores as they are
        function_scores = batch["scores"]
        scores = self.function_weight * function_scores
        fields = {"function_scores": function_scores}
        if self.model is not None:
            scored = self._model_scores(batch, texts)
            scores = scores + self.settings.weight * scored["rm_scores"]
            fields |= {"model_scores": scored["rm_scores"], "rm_truncated": scored["rm_truncated"]}
        if self.judge is not None:
            prompts = [
                prompt_text(prompt_messages(batch, row, self.tokenizer))
                for row in range(len(batch))
            ]
            graded = self.judge.grade(prompts, texts, batch["ground_truth"])
            scores = scores + self.judge.config.weight * graded.scores
            fields["judge_scores"] = graded.scores
            counts |= graded.counts
        on_tokens = token_rewards(batch, scores)
        return batch.assign(scores=scores, token_rewards=on_tokens, **fields), counts

    def _model_scores(self, batch: Batch, texts: list[str]) -> Batch:
        """The reward model's scores of ``batch``'s conversations; the request is padded with
        copies of its last row to a multiple of the group's ranks, and trimmed back."""
        conversations = reward_model_conversations(batch, texts, self.tokenizer)
        extra = -len(conversations) % self.model.dp_size
        conversations += [conversations[-1]] * extra
        scored = self.model.score(Batch.from_dict({"rm_messages": conversations}))
        return scored.index(slice(0, len(batch)))

    def close(self) -> None:
        self.function.close()
        if self.judge is not None:
            self.judge.close()


def prompt_messages(batch: Batch, row: int, tokenizer: object) -> list[dict]:
    """Row ``row``'s prompt as chat messages: its own, or for a raw-text prompt
    (data.chat_template=false) the prompt decoded as a user message."""
    messages = batch["raw_prompt"][row]
    if messages is None:
        ids = batch["prompts"][row][batch["prompt_mask"][row].bool()].tolist()
        messages = [{"role": "user", "content": tokenizer.decode(ids, skip_special_tokens=True)}]
    return messages


def reward_model_conversations(
    batch: Batch, texts: list[str], tokenizer: object
) -> list[list[dict]]:
    """Per row: the prompt's messages and the decoded response (``texts``) as the
    assistant's turn."""
    return [
        [*prompt_messages(batch, row, tokenizer), {"role": "assistant", "content": response}]
        for row, response in enumerate(texts)
    ]
