"""Pipeline stages of a transformers model (the first step of pipeline parallelism): two
stages on two real processes (gloo) under torch's 1F1B schedule, four packed micro-batches,
give the loss and every gradient of the unsplit model; layers keep their global names; a
tied head is refused."""

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.pipelining import PipelineStage, Schedule1F1B

from ascent.engine.pipeline_stages import PipelineStageModule, layer_ranges
from ascent.models import load_causal_lm

TOKENS, MICRO_BATCHES = 24, 4


def test_layers_split_into_consecutive_shares():
    assert layer_ranges(5, 2) == [range(0, 3), range(3, 5)]
    assert layer_ranges(4, 4) == [range(i, i + 1) for i in range(4)]
    with pytest.raises(ValueError, match="exceeds the model's 2 layers"):
        layer_ranges(2, 3)


def test_a_tied_head_is_refused(tiny_tied_model):
    with pytest.raises(ValueError, match="tied to the embedding"):
        PipelineStageModule(load_causal_lm(tiny_tied_model), 0, 2)


def micro_batches():
    """Ids, packed positions (two rows), targets (-1: not scored) and loss weights."""
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 250, (MICRO_BATCHES, TOKENS), generator=g)
    positions = torch.cat([torch.arange(10), torch.arange(TOKENS - 10)])
    positions = positions.expand(MICRO_BATCHES, TOKENS).contiguous()
    targets = torch.roll(ids, -1, 1)
    targets[:, 9] = targets[:, -1] = -1  # a row's last token has no next token
    weights = torch.rand(MICRO_BATCHES, TOKENS, generator=g)
    return ids, positions, targets, weights


def loss_of(output, weights):
    log_probs, entropy = output
    return (log_probs * weights[0]).sum() + 0.01 * entropy.sum()


def unsplit(path):
    model = load_causal_lm(path)
    whole = PipelineStageModule(model, 0, 1, chunk_tokens=7)
    ids, positions, targets, weights = micro_batches()
    total = 0.0
    for m in range(MICRO_BATCHES):
        rows = slice(m, m + 1)
        loss = loss_of(whole(ids[rows], positions[rows], targets[rows]), weights[rows])
        loss.backward()
        total += loss.item()
    grads = {whole.global_name(n): p.grad for n, p in whole.named_parameters()}
    return total, grads, model.lm_head.weight.grad


def _stage(rank, path, store, out):
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    try:
        torch.set_num_threads(1)
        model = load_causal_lm(path)
        module = PipelineStageModule(model, rank, 2, chunk_tokens=7)
        stage = PipelineStage(module, rank, 2, torch.device("cpu"))
        schedule = Schedule1F1B(stage, MICRO_BATCHES, loss_fn=loss_of, scale_grads=False)
        ids, positions, targets, weights = micro_batches()
        losses = []
        if rank == 0:
            schedule.step(ids, positions, targets)
        else:
            schedule.step(target=weights, losses=losses)
        grads = {module.global_name(n): p.grad for n, p in module.named_parameters()}
        head = model.lm_head.weight.grad if rank == 1 else None
        torch.save((sum(loss.item() for loss in losses), grads, head), f"{out}.{rank}")
    finally:
        dist.destroy_process_group()


def test_two_stages_equal_the_unsplit_model(tiny_model, tmp_path):
    out = tmp_path / "stage"
    mp.spawn(_stage, args=(tiny_model, str(tmp_path / "store"), str(out)), nprocs=2)
    total, grads, head = unsplit(tiny_model)
    (_, first, _), (loss, last, last_head) = (torch.load(f"{out}.{r}") for r in (0, 1))
    assert loss == pytest.approx(total, rel=1e-6)
    assert set(first) | set(last) == set(grads)  # every parameter once, by its global name
    assert not set(first) & set(last)
    for name, grad in {**first, **last}.items():
        torch.testing.assert_close(grad, grads[name], atol=1e-6, rtol=1e-5, msg=name)
    torch.testing.assert_close(last_head, head, atol=1e-6, rtol=1e-5)
