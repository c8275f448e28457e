"""Ring attention over real processes (gloo) equals attention over the whole sequence, forward
and backward: packed rows (attention within each row, causal), grouped key/value heads, a
sliding window, and tokens given to ranks in any order (here: the load-balanced chunks, and
a shuffle)."""

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from ascent.engine.ring_attention import Ring, ring_attention

HEADS, GROUPS, DIM, SCALE = 4, 2, 8, 0.3
ROWS = [9, 13, 8]  # packed rows, 30 tokens: the same number on each of 2 or 3 ranks


def whole_problem():
    g = torch.Generator().manual_seed(0)
    n = sum(ROWS)
    q = torch.randn(HEADS, n, DIM, generator=g)
    k, v = torch.randn(GROUPS, n, DIM, generator=g), torch.randn(GROUPS, n, DIM, generator=g)
    weight = torch.randn(HEADS, n, DIM, generator=g)  # the loss: sum(out * weight)
    row = torch.repeat_interleave(torch.arange(len(ROWS)), torch.tensor(ROWS))
    return q, k, v, weight, row


def reference(window=None):
    """Attention over all tokens at once, with the same mask, and its gradients."""
    q, k, v, weight, row = (t.clone() for t in whole_problem())
    for t in (q, k, v):
        t.requires_grad_(True)
    n = q.shape[1]
    index = torch.arange(n)
    allowed = (row[:, None] == row[None, :]) & (index[None, :] <= index[:, None])
    if window is not None:  # transformers' sliding window: i - w < j <= i
        allowed &= index[None, :] > index[:, None] - window
    scores = torch.einsum("hqd,hkd->hqk", q, k.repeat_interleave(HEADS // GROUPS, 0)) * SCALE
    probs = scores.masked_fill(~allowed, float("-inf")).softmax(-1)
    out = probs @ v.repeat_interleave(HEADS // GROUPS, 0)
    (out * weight).sum().backward()
    return out.detach(), q.grad, k.grad, v.grad


def assignment(kind, size, n):
    """Each rank's token indices: balanced chunks (r and 2P-1-r) or a shuffle."""
    if kind == "balanced":
        chunks = torch.arange(n).tensor_split(2 * size)
        return [torch.cat([chunks[r], chunks[2 * size - 1 - r]]) for r in range(size)]
    order = torch.randperm(n, generator=torch.Generator().manual_seed(1))
    return list(order.tensor_split(size))


def _rank(rank, size, kind, window, store, out):
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=size)
    try:
        q, k, v, weight, row = whole_problem()
        mine = assignment(kind, size, q.shape[1])[rank]
        local = [t[:, mine].clone().requires_grad_(True) for t in (q, k, v)]
        ring = Ring(dist.group.WORLD, size, rank, index=mine, row=row[mine])
        result = ring_attention(*local, ring, SCALE, window)
        (result * weight[:, mine]).sum().backward()
        torch.save([mine, result.detach(), *(t.grad for t in local)], f"{out}.{rank}")
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize(
    "size, kind, window",
    [
        (3, "balanced", None),
        (2, "balanced", 5),  # a sliding-window layer (Gemma 3's, Mistral's)
        pytest.param(2, "balanced", None, marks=pytest.mark.slow),
        pytest.param(2, "shuffled", None, marks=pytest.mark.slow),
    ],
)
def test_ring_attention_equals_whole_attention(tmp_path, size, kind, window):
    out = tmp_path / "ring"
    args = (size, kind, window, str(tmp_path / "store"), str(out))
    mp.spawn(_rank, args=args, nprocs=size)
    expected = reference(window)
    for rank in range(size):
        mine, *pieces = torch.load(f"{out}.{rank}")
        for name, got, whole in zip(("out", "dq", "dk", "dv"), pieces, expected, strict=True):
            torch.testing.assert_close(got, whole[:, mine], atol=2e-6, rtol=1e-5, msg=name)
