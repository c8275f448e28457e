"""The implicit PRM worker (PRIME): trained on outcome labels alone, its summed log-ratio to
the reference separates the labels on the batch it learned, and its log-probs are those of
transformers' own forward."""

import pytest
import torch

from ascent.algos.implicit_prm import implicit_process_rewards
from ascent.workers import ReferenceWorker
from ascent.workers.implicit_prm import ImplicitPRMWorker
from tests.workers.conftest import in_process
from tests.workers.data import rl_batch

BETA = 0.1


@pytest.mark.parametrize(
    ("lora", "lr"), [(None, 1e-3), ({"rank": 8, "alpha": 16}, 1e-2)], ids=["full", "lora"]
)
def test_training_on_outcome_labels_separates_them(tiny_model, lora, lr):
    """All weights, or LoRA adapters alone (``implicit_prm.model.lora``)."""
    batch = rl_batch(rows=16, seed=3)
    labels = (torch.arange(16) % 2).float()  # half right, half wrong
    reference = in_process(ReferenceWorker, {"model": {"path": tiny_model}})
    batch = batch.union(reference.log_probs(batch)).assign(prm_labels=labels)
    model = {"path": tiny_model, "lora": lora}
    prm = in_process(ImplicitPRMWorker, {"model": model, "beta": BETA, "optim": {"lr": lr}})
    engine = prm.hosts.host.workers[prm.role].engine  # in-process: reachable
    trainable = [name for name, p in engine.module.named_parameters() if p.requires_grad]
    assert trainable and all(("lora_" in name) == (lora is not None) for name in trainable)

    def summed_rewards():
        log_probs = prm.log_probs(batch)["prm_log_probs"]
        mask = batch["response_mask"]
        return implicit_process_rewards(log_probs, batch["ref_log_probs"], mask, BETA).sum(-1)

    start = summed_rewards()
    torch.testing.assert_close(start, torch.zeros(16), atol=1e-5, rtol=0)  # a copy of the ref
    losses = [prm.update(batch)[0]["prm/loss"] for _ in range(10)]
    end = summed_rewards()
    assert losses[-1] < losses[0] - 0.05, losses
    right, wrong = end[labels == 1], end[labels == 0]
    assert right.min() > wrong.max(), (right, wrong)  # every right answer above every wrong
    assert right.mean() > 0 > wrong.mean()
