"""Chunked log-probs and entropy: values and gradients against the naive formula, and memory."""

import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F

from ascent.algos.logprobs import token_log_probs_and_entropy
from ascent.algos.logprobs_hidden import token_log_probs_and_entropy_from_hidden

VOCAB = 50


def naive(logits, targets, temperature=1.0, dtype=torch.float64):
    """The reference: log_softmax(logits / τ) gathered at the targets, and the entropy formula."""
    z = logits.to(dtype) / temperature
    log_probs = torch.log_softmax(z, dim=-1).gather(-1, targets[..., None]).squeeze(-1)
    entropy = torch.logsumexp(z, dim=-1) - (torch.softmax(z, dim=-1) * z).sum(dim=-1)
    return log_probs, entropy


def make(shape, vocab=VOCAB, dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    # Scale 3: peaked enough that log-probs span several nats, as a trained policy's do.
    logits = (3 * torch.randn(*shape, vocab, generator=gen)).to(dtype)
    targets = torch.randint(0, vocab, shape, generator=gen)
    return logits, targets


def loss_weights(shape, seed=1):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=gen), torch.randn(shape, generator=gen)


@pytest.mark.parametrize("temperature", [1.0, 0.6, 1.7])
@pytest.mark.parametrize("chunk_tokens", [1, 7, 64, 1000])
def test_fp32_values_match_naive(temperature, chunk_tokens):
    logits, targets = make((3, 13))  # N = 39: 7 does not divide it, 64 and 1000 exceed it
    log_probs, entropy = token_log_probs_and_entropy(
        logits, targets, temperature=temperature, chunk_tokens=chunk_tokens
    )
    ref_lp, ref_ent = naive(logits, targets, temperature)
    assert log_probs.dtype == entropy.dtype == torch.float32
    assert log_probs.shape == entropy.shape == (3, 13)
    torch.testing.assert_close(log_probs.double(), ref_lp, rtol=0, atol=2e-5)
    torch.testing.assert_close(entropy.double(), ref_ent, rtol=0, atol=2e-5)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_low_precision_values_match_naive_on_the_same_logits(dtype, temperature):
    logits, targets = make((2, 9, 5), dtype=dtype)
    log_probs, entropy = token_log_probs_and_entropy(
        logits, targets, temperature=temperature, chunk_tokens=4
    )
    assert log_probs.dtype == entropy.dtype == torch.float32
    # Same bf16/fp16 values, upcast: the only differences are float32 rounding in the softmax.
    ref_lp, ref_ent = naive(logits, targets, temperature, dtype=torch.float32)
    torch.testing.assert_close(log_probs, ref_lp, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(entropy, ref_ent, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape", [(1,), (1, 1), (), (0,), (4, 3, 2)])
def test_shapes_including_single_and_empty(shape):
    logits, targets = make(shape)
    log_probs, entropy = token_log_probs_and_entropy(logits, targets, chunk_tokens=5)
    ref_lp, ref_ent = naive(logits, targets)
    assert log_probs.shape == entropy.shape == targets.shape
    torch.testing.assert_close(log_probs.double(), ref_lp, rtol=0, atol=2e-5)
    torch.testing.assert_close(entropy.double(), ref_ent, rtol=0, atol=2e-5)


def test_without_entropy():
    logits, targets = make((4, 6))
    log_probs, entropy = token_log_probs_and_entropy(
        logits, targets, temperature=0.8, chunk_tokens=5, compute_entropy=False
    )
    assert entropy is None
    torch.testing.assert_close(
        log_probs.double(), naive(logits, targets, 0.8)[0], atol=2e-5, rtol=0
    )


def test_inference_without_grad():
    logits, targets = make((4, 6))
    logits.requires_grad_(True)
    with torch.no_grad():
        log_probs, entropy = token_log_probs_and_entropy(logits, targets, chunk_tokens=3)
    assert log_probs.grad_fn is None and entropy.grad_fn is None
    with torch.no_grad():
        ref_lp, ref_ent = naive(logits, targets)
    torch.testing.assert_close(log_probs.double(), ref_lp, atol=2e-5, rtol=0)
    torch.testing.assert_close(entropy.double(), ref_ent, atol=2e-5, rtol=0)


def mixed_loss(log_probs, entropy, use):
    """(w1·lp).sum() + (w2·H).sum(), or only one of the two terms."""
    w1, w2 = loss_weights(log_probs.shape)
    terms = {"lp": (w1 * log_probs).sum(), "ent": (w2 * entropy).sum()}
    return terms["lp"] + terms["ent"] if use == "both" else terms[use]


@pytest.mark.parametrize("use", ["both", "lp", "ent"])
@pytest.mark.parametrize("temperature", [1.0, 0.6])
def test_fp32_gradient_matches_autograd_through_naive(use, temperature):
    logits, targets = make((3, 11))
    logits.requires_grad_(True)
    got = torch.autograd.grad(
        mixed_loss(
            *token_log_probs_and_entropy(logits, targets, temperature=temperature, chunk_tokens=4),
            use,
        ),
        logits,
    )[0]
    leaf = logits.detach().double().requires_grad_(True)
    want = torch.autograd.grad(mixed_loss(*naive(leaf, targets, temperature), use), leaf)[0]
    assert got.dtype == torch.float32
    torch.testing.assert_close(got.double(), want, rtol=0, atol=1e-5)


@pytest.mark.parametrize("use", ["both", "lp"])
def test_bf16_gradient_matches_autograd_through_naive(use):
    logits, targets = make((2, 9), dtype=torch.bfloat16)
    logits.requires_grad_(True)
    lp, ent = token_log_probs_and_entropy(logits, targets, temperature=0.7, chunk_tokens=4)
    got = torch.autograd.grad(mixed_loss(lp, ent, use), logits)[0]
    want = torch.autograd.grad(
        mixed_loss(*naive(logits, targets, 0.7, dtype=torch.float32), use), logits
    )[0]
    assert got.dtype == torch.bfloat16
    # Both round a float32 gradient to bf16 once; allow one bf16 ulp.
    torch.testing.assert_close(got.float(), want.float(), rtol=2**-7, atol=1e-6)


def test_gradcheck_float64_logits():
    logits, targets = make((2, 3), vocab=7, dtype=torch.float64)
    logits.requires_grad_(True)
    assert torch.autograd.gradcheck(
        lambda x: token_log_probs_and_entropy(x, targets, temperature=0.7, chunk_tokens=4),
        (logits,),
    )
    assert torch.autograd.gradcheck(
        lambda x: token_log_probs_and_entropy(
            x, targets, temperature=0.7, chunk_tokens=4, compute_entropy=False
        )[0],
        (logits,),
    )
    # Only the entropy output reaches the loss: log-probs' gradient arrives as None.
    assert torch.autograd.gradcheck(
        lambda x: token_log_probs_and_entropy(x, targets, chunk_tokens=4)[1], (logits,)
    )


def make_hidden(shape, hidden_size=6, vocab=VOCAB, dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    hidden = torch.randn(*shape, hidden_size, generator=gen).to(dtype)
    weight = torch.randn(vocab, hidden_size, generator=gen).to(dtype)
    bias = torch.randn(vocab, generator=gen).to(dtype)
    targets = torch.randint(0, vocab, shape, generator=gen)
    return hidden, weight, bias, targets


@pytest.mark.parametrize("with_bias", [True, False])
@pytest.mark.parametrize("use", ["both", "lp", "ent"])
@pytest.mark.parametrize("chunk_tokens", [3, 100])
def test_fused_hidden_values_and_gradients_match_naive(with_bias, use, chunk_tokens):
    hidden, weight, bias, targets = make_hidden((2, 7))
    bias = bias if with_bias else None
    leaves = [t.requires_grad_(True) for t in (hidden, weight, bias) if t is not None]
    lp, ent = token_log_probs_and_entropy_from_hidden(
        hidden, weight, targets, bias=bias, temperature=0.8, chunk_tokens=chunk_tokens
    )
    got = torch.autograd.grad(mixed_loss(lp, ent, use), leaves)

    ref_leaves = [t.detach().double().requires_grad_(True) for t in leaves]
    ref_bias = ref_leaves[2] if with_bias else None
    ref_lp, ref_ent = naive(F.linear(ref_leaves[0], ref_leaves[1], ref_bias), targets, 0.8)
    want = torch.autograd.grad(mixed_loss(ref_lp, ref_ent, use), ref_leaves)

    torch.testing.assert_close(lp.double(), ref_lp, rtol=0, atol=5e-5)
    torch.testing.assert_close(ent.double(), ref_ent, rtol=0, atol=5e-5)
    for g, w, leaf in zip(got, want, leaves, strict=True):
        assert g.dtype == leaf.dtype and g.shape == leaf.shape
        torch.testing.assert_close(g.double(), w, rtol=1e-5, atol=5e-5)


def test_fused_hidden_bf16_matches_naive_in_the_same_dtype():
    hidden, weight, bias, targets = make_hidden((3, 5), hidden_size=16, dtype=torch.bfloat16)
    leaves = [t.requires_grad_(True) for t in (hidden, weight, bias)]
    lp, ent = token_log_probs_and_entropy_from_hidden(
        hidden, weight, targets, bias=bias, temperature=0.7, chunk_tokens=4
    )
    got = torch.autograd.grad(mixed_loss(lp, ent, "both"), leaves)
    # The naive path also builds the bf16 logits with one matmul, then upcasts.
    ref_lp, ref_ent = naive(F.linear(hidden, weight, bias), targets, 0.7, dtype=torch.float32)
    want = torch.autograd.grad(mixed_loss(ref_lp, ref_ent, "both"), leaves)
    # Logits of magnitude ~10 carry bf16 rounding of ~0.04 that may differ by one ulp.
    torch.testing.assert_close(lp, ref_lp, rtol=0, atol=0.1)
    torch.testing.assert_close(ent, ref_ent, rtol=0, atol=0.1)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == torch.bfloat16
        torch.testing.assert_close(g.float(), w.float(), rtol=0.05, atol=0.05)


def test_gradcheck_float64_hidden():
    hidden, weight, bias, targets = make_hidden((2, 3), hidden_size=4, vocab=7, dtype=torch.float64)
    for t in (hidden, weight, bias):
        t.requires_grad_(True)
    assert torch.autograd.gradcheck(
        lambda h, w, b: token_log_probs_and_entropy_from_hidden(
            h, w, targets, bias=b, temperature=0.7, chunk_tokens=4
        ),
        (hidden, weight, bias),
    )


@pytest.mark.parametrize("use", ["both", "lp", "ent"])
def test_soft_capped_logits_values_and_gradients_match_naive(use):
    """Gemma's final soft-cap, c tanh(l / c) before the temperature: logits of about ±10
    against a cap of 4 (far into the curve), against float64 autograd through the cap."""
    hidden, weight, bias, targets = make_hidden((3, 5))
    leaves = [t.requires_grad_(True) for t in (hidden, weight, bias)]
    lp, ent = token_log_probs_and_entropy_from_hidden(
        hidden, weight, targets, bias=bias, temperature=0.8, chunk_tokens=4, softcap=4.0
    )
    got = torch.autograd.grad(mixed_loss(lp, ent, use), leaves)
    ref_leaves = [t.detach().double().requires_grad_(True) for t in leaves]
    logits = F.linear(*ref_leaves)
    assert logits.abs().max() > 8  # the cap bends these
    ref_lp, ref_ent = naive(torch.tanh(logits / 4.0) * 4.0, targets, 0.8)
    want = torch.autograd.grad(mixed_loss(ref_lp, ref_ent, use), ref_leaves)
    torch.testing.assert_close(lp.double(), ref_lp, rtol=0, atol=5e-5)
    torch.testing.assert_close(ent.double(), ref_ent, rtol=0, atol=5e-5)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g.double(), w, rtol=1e-5, atol=5e-5)
    uncapped, _ = token_log_probs_and_entropy_from_hidden(hidden, weight, targets, bias=bias)
    assert (uncapped - lp).abs().max() > 0.1


def test_gradcheck_float64_hidden_with_a_soft_cap():
    hidden, weight, bias, targets = make_hidden((2, 3), hidden_size=4, vocab=7, dtype=torch.float64)
    for t in (hidden, weight, bias):
        t.requires_grad_(True)
    assert torch.autograd.gradcheck(
        lambda h, w, b: token_log_probs_and_entropy_from_hidden(
            h, w, targets, bias=b, temperature=0.7, chunk_tokens=4, softcap=2.0
        ),
        (hidden, weight, bias),
    )


def test_fused_hidden_without_weight_grad_and_without_entropy():
    hidden, weight, _, targets = make_hidden((5,))
    hidden.requires_grad_(True)  # a frozen lm_head: only the hidden states get a gradient
    lp, ent = token_log_probs_and_entropy_from_hidden(
        hidden, weight, targets, chunk_tokens=2, compute_entropy=False
    )
    assert ent is None
    lp.sum().backward()
    leaf = hidden.detach().double().requires_grad_(True)
    naive(leaf @ weight.double().T, targets)[0].sum().backward()
    torch.testing.assert_close(hidden.grad.double(), leaf.grad, rtol=1e-5, atol=5e-5)
    assert weight.grad is None


def test_bad_inputs_say_what_is_wrong():
    logits, targets = make((4, 6))
    with pytest.raises(ValueError, match="leading dims"):
        token_log_probs_and_entropy(logits, targets[:, :5])
    with pytest.raises(TypeError, match="int64"):
        token_log_probs_and_entropy(logits, targets.int())
    with pytest.raises(ValueError, match="chunk_tokens"):
        token_log_probs_and_entropy(logits, targets, chunk_tokens=0)
    hidden, weight, _, targets = make_hidden((4,))
    with pytest.raises(ValueError, match="vocab"):
        token_log_probs_and_entropy_from_hidden(hidden, weight.T, targets)


# Runs in a fresh interpreter so that the peak RSS belongs to one method only.
MEMORY_PROBE = textwrap.dedent(
    """
    import resource, sys, torch
    from ascent.algos.logprobs import token_log_probs_and_entropy

    mode, n, vocab = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])

    def step(logits, targets):
        if mode == "naive":
            z = logits.float() / 0.7
            lp = torch.log_softmax(z, -1).gather(-1, targets[:, None]).squeeze(-1)
            ent = torch.logsumexp(z, -1) - (torch.softmax(z, -1) * z).sum(-1)
        else:
            lp, ent = token_log_probs_and_entropy(logits, targets, temperature=0.7,
                                                  chunk_tokens=128)
        (lp.sum() + 0.1 * ent.sum()).backward()

    step(torch.randn(8, 64, requires_grad=True), torch.randint(0, 64, (8,)))  # lazy init
    logits = torch.randn(n, vocab, requires_grad=True)
    targets = torch.randint(0, vocab, (n,))
    baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    step(logits, targets)
    print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - baseline) * 1024)  # KiB
    """
)


def peak_extra_bytes(mode, n, vocab):
    # A fixed mmap threshold makes glibc return every large buffer on free, so RSS follows the
    # live tensors; otherwise freed chunk buffers may stay in the heap, fragmented.
    env = os.environ | {"MALLOC_MMAP_THRESHOLD_": str(1 << 20)}
    out = subprocess.run(
        [sys.executable, "-c", MEMORY_PROBE, mode, str(n), str(vocab)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return int(out.stdout.strip())


def test_peak_memory_is_lower_by_more_than_one_float32_copy():
    n, vocab = 1024, 32000
    copy = n * vocab * 4  # one float32 [N x V]: 125 MiB
    naive_peak = peak_extra_bytes("naive", n, vocab)
    chunked_peak = peak_extra_bytes("chunked", n, vocab)
    # Both must hold the logits' gradient (one copy); the naive path holds several more.
    assert chunked_peak < naive_peak - copy, (chunked_peak / 2**20, naive_peak / 2**20)
    # The chunked path needs the gradient plus two [128 x V] buffers (16 MiB each).
    assert chunked_peak < 1.5 * copy, chunked_peak / 2**20


@pytest.mark.gpu
def test_cuda_bf16_matches_naive_and_uses_less_memory():
    """On a GPU: chunked equals naive in values and gradients, with a much lower peak."""
    tokens, vocab = 4096, 32768
    logits, targets = make((tokens,), vocab=vocab, dtype=torch.bfloat16)
    logits, targets = logits.cuda(), targets.cuda()
    w_lp, w_ent = (w.cuda() for w in loss_weights((tokens,)))

    def peak_and_grad(fn):
        x = logits.clone().requires_grad_()
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        lp, ent = fn(x)
        ((w_lp * lp).sum() + (w_ent * ent).sum()).backward()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - base, lp.detach(), ent.detach(), x.grad

    naive_peak, naive_lp, naive_ent, naive_grad = peak_and_grad(
        lambda x: naive(x, targets, 0.7, dtype=torch.float32)
    )
    chunk_peak, lp, ent, grad = peak_and_grad(
        lambda x: token_log_probs_and_entropy(x, targets, temperature=0.7, chunk_tokens=512)
    )
    torch.testing.assert_close(lp, naive_lp, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(ent, naive_ent, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(grad.float(), naive_grad.float(), rtol=2e-2, atol=2e-3)
    one_fp32_copy = tokens * vocab * 4
    assert chunk_peak < naive_peak - one_fp32_copy
