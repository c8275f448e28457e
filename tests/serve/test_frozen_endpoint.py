"""``rollout.engine: openai``: the rollout role generating through an OpenAI-compatible
endpoint (here ``ascent serve``), and refusing to follow a trained policy."""

import pytest
import torch

from ascent.batch import Batch
from ascent.controller import ResourcePool, Role, spawn_groups
from ascent.models import load_causal_lm
from ascent.rollout import EngineLimits, NativeEngine, SamplingParams
from ascent.workers import ActorConfig, ActorWorker
from ascent.workers.rollout import RolloutConfig, RolloutWorker

pytestmark = pytest.mark.integration


def test_the_rollout_role_generates_through_an_endpoint_and_refuses_weights(served, tiny_model):
    rollout = RolloutConfig(
        model={"path": tiny_model},
        engine="openai",
        server={"urls": [served.url], "model": "tiny"},
        sampling={"n": 2, "max_new_tokens": 6, "temperature": 0},
        max_model_len=64,
    )
    groups = spawn_groups(
        {
            "actor": Role(ActorWorker, args=(ActorConfig(model={"path": tiny_model}),)),
            "rollout": Role(RolloutWorker, args=(rollout,)),
        },
        ResourcePool(),
        backend="in-process",
    )
    try:
        prompts = [[5, 17, 33], [100, 3, 9, 12]]
        mask = torch.tensor([[0, 1, 1, 1], [1, 1, 1, 1]])
        padded = torch.tensor([[0, *prompts[0]], prompts[1]])
        batch = Batch.from_dict({"prompts": padded, "prompt_mask": mask, "uid": ["a", "b"]})
        out = groups["rollout"].generate(batch)
        local = NativeEngine(load_causal_lm(tiny_model), EngineLimits(max_model_len=64)).generate(
            prompts, SamplingParams(n=2, max_new_tokens=6, temperature=0, stop_token_ids=[258])
        )
        for row, sample in enumerate(local):
            assert out["responses"][row, : len(sample.token_ids)].tolist() == sample.token_ids
            count = len(sample.log_probs)
            assert out["rollout_log_probs"][row, :count].tolist() == pytest.approx(
                sample.log_probs, abs=1e-5
            )
        with pytest.raises(Exception, match="frozen endpoint"):
            groups["rollout"].sync_from_colocated("actor", version=1)
    finally:
        for group in {id(g.hosts): g for g in groups.values()}.values():
            group.shutdown()
