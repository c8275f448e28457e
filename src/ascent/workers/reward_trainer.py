"""The ``ascent rm`` role: a reward model trained on preference pairs with the Bradley-Terry
loss (``ascent.algos.bradley_terry``), on the FSDP2 engine, all weights or LoRA adapters
(with the score head trained whole).

Batch, one row per pair: ``chosen_ids``, ``chosen_mask``, ``rejected_ids``,
``rejected_mask`` (P, L) right-padded; ``pair_weight`` (P, 1), 0 for a padding pair;
``margin`` (P,); ``attention_mask`` (P, 2L), both masks side by side (the row's tokens, for
the token budget). Each micro-batch's chosen and rejected rows go through one forward.
"""

import torch
from pydantic import Field

from ascent.algos import LossNormalizer
from ascent.algos.bradley_terry import PairwiseLoss, bradley_terry_loss
from ascent.batch import Batch
from ascent.batch.fields import right_padded
from ascent.controller import Dispatch, Worker, register
from ascent.data.preference import PreferencePair
from ascent.engine import FSDPConfig, ModelConfig, OptimConfig, SequenceScoreModule, TrainEngine
from ascent.engine.config import Strict
from ascent.engine.token_budget import synchronized_micro_batches
from ascent.models.lora import apply_lora
from ascent.workers.common import EngineCheckpoints, require, token_counts, train
from ascent.workers.config import MicroBatching
from ascent.workers.reward_model import reward_tokenizer_and_model, score_forward

FIELDS = ("chosen_ids", "chosen_mask", "rejected_ids", "rejected_mask", "pair_weight", "margin")


class RewardTrainerConfig(Strict):
    model: ModelConfig
    optim: OptimConfig = OptimConfig(lr=1e-5)
    fsdp: FSDPConfig = FSDPConfig()
    tokens_per_micro_batch: int = Field(8192, ge=1)


def collate_pairs(pairs: list[PreferencePair]) -> Batch:
    """The batch of ``pairs`` (layout in the module docstring; the worker writes the
    padding with the model's pad id)."""
    ids, mask = right_padded([p.chosen_ids for p in pairs] + [p.rejected_ids for p in pairs])
    chosen, rejected = slice(0, len(pairs)), slice(len(pairs), None)
    return Batch.from_dict(
        {
            "chosen_ids": ids[chosen],
            "chosen_mask": mask[chosen],
            "rejected_ids": ids[rejected],
            "rejected_mask": mask[rejected],
            "attention_mask": torch.cat([mask[chosen], mask[rejected]], dim=1),
            "pair_weight": torch.tensor([[p.weight] for p in pairs], dtype=torch.float32),
            "margin": torch.tensor([p.margin for p in pairs], dtype=torch.float32),
        }
    )


class RewardTrainerWorker(EngineCheckpoints, Worker):
    """``train_step`` (one optimiser step over a batch of pairs), ``eval_sums``, checkpoints,
    and ``export`` (a sequence-classification checkpoint that the reward-model role and
    ``AutoModelForSequenceClassification`` load)."""

    def __init__(self, config: RewardTrainerConfig | dict) -> None:
        self.config = RewardTrainerConfig.model_validate(config)
        cfg = self.config
        _, model = reward_tokenizer_and_model(cfg.model)
        if cfg.model.lora is not None:
            model = apply_lora(model, cfg.model.lora, train_heads=True)
        self.engine = TrainEngine(
            SequenceScoreModule(model),
            device=self.device,
            fsdp=cfg.fsdp,
            optim=cfg.optim,
            gradient_checkpointing=cfg.model.gradient_checkpointing,
        )

    def _scores(self, micro: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """Chosen and rejected scores (p,) from one forward over the 2p rows."""
        both = Batch.from_dict(
            {
                "input_ids": torch.cat([micro["chosen_ids"], micro["rejected_ids"]]),
                "attention_mask": torch.cat([micro["chosen_mask"], micro["rejected_mask"]]),
            }
        )
        scores = score_forward(self.engine.module, both, self.device)
        return scores[: len(micro)], scores[len(micro) :]

    def _loss(self, micro: Batch, num_pairs: float, dp_size: int) -> PairwiseLoss:
        chosen, rejected = self._scores(micro)
        return bradley_terry_loss(
            chosen,
            rejected,
            num_pairs=num_pairs,
            weights=micro["pair_weight"][:, 0].to(self.device),
            margins=micro["margin"].to(self.device),
            dp_size=dp_size,
        )

    @register(Dispatch.DP)
    def train_step(self, batch: Batch) -> dict[str, float]:
        require(batch, "rm", *FIELDS)
        settings = MicroBatching(tokens_per_micro_batch=self.config.tokens_per_micro_batch)

        def micro_loss(micro: Batch, normalizer: LossNormalizer) -> tuple[torch.Tensor, dict]:
            # pair_weight is the "token" mask: its global count is the number of real pairs
            pairwise = self._loss(micro, normalizer.num_tokens, normalizer.dp_size)
            return pairwise.loss, {"loss": pairwise.loss.detach(), **pairwise.metrics}

        return train(
            self.engine,
            batch,
            settings,
            micro_loss,
            role="rm",
            norm_length=1,
            dp_size=self.ctx.dp_size,
            mask_key="pair_weight",
            padded=True,
        )

    @register(Dispatch.DP)
    def eval_sums(self, batch: Batch) -> dict[str, float]:
        """Over the real pairs of the whole batch (all ranks): summed loss (``loss``),
        pairs ranked right (``correct``), summed chosen - rejected gap (``margin``), and
        their count (``pairs``)."""
        require(batch, "rm", *FIELDS)
        self.engine.train(False)
        total = torch.zeros(4, dtype=torch.float64, device=self.device)
        with torch.no_grad():
            budget = self.config.tokens_per_micro_batch
            for rows in synchronized_micro_batches(token_counts(batch), budget, self.device, True):
                micro = batch.index(rows)
                weights = micro["pair_weight"][:, 0].to(self.device).double()
                pairwise = self._loss(micro, 1.0, 1)  # num_pairs 1: the loss is the sum
                total += torch.stack(
                    [
                        pairwise.loss.double(),
                        pairwise.metrics["accuracy"].double() * weights.sum(),
                        pairwise.metrics["margin"].double() * weights.sum(),
                        weights.sum(),
                    ]
                )
        loss, correct, margin, pairs = self.engine.all_reduce_sum(total.tolist())
        return {"loss": loss, "correct": correct, "margin": margin, "pairs": pairs}
