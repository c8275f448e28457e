"""The reward-model role: a sequence classifier (transformers
``AutoModelForSequenceClassification``, one label, any architecture) that scores
conversations, sharded with FSDP2, frozen.

It reads conversations, not the policy's tokens: the driver decodes each response with the
policy's tokenizer and sends (prompt messages + the response as the assistant's message);
this worker renders them with the reward model's own tokenizer and chat template
(``ascent.data.preference.reward_model_ids``, the rendering ``ascent rm`` trained on). This
is the one place where re-rendering text is right: the reward model is another model, with
its own vocabulary.
"""

import torch
from pydantic import Field
from torch import Tensor

from ascent.batch import Batch
from ascent.batch.fields import right_padded
from ascent.controller import Dispatch, Worker, register
from ascent.data.preference import reward_model_ids
from ascent.engine import FSDPConfig, ModelConfig, SequenceScoreModule, TrainEngine
from ascent.engine.config import Strict
from ascent.models.loading import load_sequence_classifier, load_tokenizer
from ascent.workers.common import micro_batched, require


class RewardModelConfig(Strict):
    model: ModelConfig
    fsdp: FSDPConfig = FSDPConfig()
    chat_template: bool = True
    max_length: int = Field(2048, ge=2)
    tokens_per_micro_batch: int = Field(8192, ge=1)


def reward_tokenizer_and_model(model: ModelConfig) -> tuple[object, torch.nn.Module]:
    """The reward model's tokenizer and its sequence classifier; a config without a pad id
    gets the tokenizer's pad token, else its EOS (transformers finds a decoder's last token
    by it)."""
    tokenizer = load_tokenizer(model.path, trust_remote_code=model.trust_remote_code)
    classifier = load_sequence_classifier(
        model.path,
        pad_token_id=fallback_pad_id(tokenizer),
        trust_remote_code=model.trust_remote_code,
        attn_implementation=model.attn_implementation,
    )
    return tokenizer, classifier


def fallback_pad_id(tokenizer: object) -> int | None:
    """The pad id a reward model without one gets: the tokenizer's pad token, else its EOS."""
    pad = tokenizer.pad_token_id
    return tokenizer.eos_token_id if pad is None else pad


def score_forward(module: torch.nn.Module, batch: Batch, device: torch.device) -> Tensor:
    """Scores (b,) of a right-padded micro-batch (``input_ids``, ``attention_mask``), cut to
    its longest row first.

    The padding is written with the model's own pad id: transformers reads a decoder's score
    at the last token that is not that id. A row that itself ends with the pad id would be
    scored one token early, so it is refused."""
    mask = batch["attention_mask"]
    width = int(mask.sum(-1).max())
    mask = mask[:, :width]
    pad_id = module.model.config.get_text_config().pad_token_id
    ids = batch["input_ids"][:, :width]
    if pad_id is not None:
        last = ids.gather(1, (mask.sum(-1, keepdim=True) - 1).clamp(min=0))
        if bool((last == pad_id).any()):
            raise ValueError(
                f"a conversation rendered for the reward model ends with its pad token (id "
                f"{pad_id}): transformers would read the score before it. Give the reward "
                "model's tokenizer a pad token that does not end conversations"
            )
        ids = ids.masked_fill(mask == 0, pad_id)
    return module(ids.to(device), mask.to(device))


class RewardModelWorker(Worker):
    """``score``: conversations (``rm_messages``, each a list of chat messages) ->
    ``rm_scores`` (B,) and ``rm_truncated`` (B,) (1 where the conversation was cut to
    ``max_length``, keeping its end)."""

    def __init__(self, config: RewardModelConfig | dict) -> None:
        self.config = RewardModelConfig.model_validate(config)
        self.tokenizer, model = reward_tokenizer_and_model(self.config.model)
        model.requires_grad_(False)
        self.engine = TrainEngine(
            SequenceScoreModule(model), device=self.device, fsdp=self.config.fsdp, optim=None
        )
        self.engine.train(False)

    @register(Dispatch.DP)
    def score(self, batch: Batch) -> Batch:
        require(batch, "reward_model", "rm_messages")
        cfg = self.config
        rendered = [
            reward_model_ids(
                self.tokenizer,
                messages,
                chat_template=cfg.chat_template,
                max_length=cfg.max_length,
            )
            for messages in batch["rm_messages"]
        ]
        ids, mask = right_padded([ids for ids, _ in rendered])
        inputs = Batch.from_dict({"input_ids": ids, "attention_mask": mask})
        (scores,) = micro_batched(
            lambda micro: (score_forward(self.engine.module, micro, self.device).unsqueeze(-1),),
            inputs,
            cfg.tokens_per_micro_batch,
            self.device,
            True,
        )
        truncated = torch.tensor([float(cut) for _, cut in rendered])
        return Batch.from_dict({"rm_scores": scores[:, 0], "rm_truncated": truncated})
