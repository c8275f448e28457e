"""The paged KV cache: block bookkeeping, samples sharing their prompt's blocks, a later turn
reusing the blocks of its context, memory that follows the live tokens, and preemption."""

import pytest
import torch

from ascent.models import load_causal_lm
from ascent.rollout import EngineLimits, NativeEngine, SamplingParams
from ascent.rollout.kv_blocks import BlockAllocator
from ascent.rollout.requests import EngineRequest

GREEDY = SamplingParams(temperature=0, max_new_tokens=9)


def random_prompts(lengths, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 250, (n,), generator=g).tolist() for n in lengths]


@pytest.fixture(scope="module")
def model(tiny_model):
    return load_causal_lm(tiny_model)


def test_blocks_are_shared_released_cached_and_evicted_oldest_first():
    blocks = BlockAllocator(block_size=2, capacity=4, limit=4)
    a, b = blocks.allocate(), blocks.allocate()
    prefix = blocks.lookup([1, 2, 3, 4, 5], max_tokens=4)
    assert prefix.blocks == [] and len(prefix.names) == 2  # two full blocks of 2 in five tokens
    names = prefix.names
    blocks.register(a, names[0])
    blocks.register(b, names[1])
    blocks.share(a)  # a second sample holds the first block
    blocks.release([a, b])
    assert blocks.refs[a] == 1 and blocks.in_use == 1 and list(blocks.cached) == [b]
    assert blocks.lookup([1, 2, 3, 4, 9], max_tokens=4).blocks == [a, b]
    assert blocks.lookup([1, 2, 7, 4], max_tokens=4).blocks == [a], "a name is the whole prefix"
    assert blocks.lookup([9, 9, 3, 4], max_tokens=4).blocks == []
    blocks.release([a])
    assert list(blocks.cached) == [b, a]
    c, d = blocks.allocate(), blocks.allocate()  # the two never used
    assert {c, d}.isdisjoint({a, b})
    assert blocks.allocate() == b, "the least recently released cached block goes first"
    assert blocks.lookup([1, 2, 3, 4], max_tokens=4).blocks == [a]
    assert blocks.allocate() == a and blocks.allocate() is None
    blocks.release([a])
    blocks.forget_prefixes()
    assert blocks.lookup([1, 2, 3, 4], max_tokens=4).blocks == [] and blocks.available == 1


def test_the_samples_of_a_prompt_share_its_full_blocks(model):
    engine = NativeEngine(model, EngineLimits(max_num_seqs=8, max_model_len=128))
    sampled = SamplingParams(n=8, temperature=1.0, max_new_tokens=8, seed=0)
    engine.generate(random_prompts([40]), sampled)
    # 40 tokens: 2 full blocks of 16, shared, and the partial third copied per sample; the
    # 8 new tokens stay in it (positions 40-47; the last token is never written).
    assert engine.cache.peak_blocks == 2 + 8
    assert engine.scheduler.admission.prefilled_tokens == 40


def test_a_later_turn_prefills_only_its_new_tokens(model, tiny_model):
    engine = NativeEngine(model, EngineLimits(max_num_seqs=4, max_model_len=128))
    admission = engine.scheduler.admission
    prompt = random_prompts([40])[0]
    response = engine.generate([prompt], GREEDY)[0].token_ids
    # Positions 0-47 are cached (the 9th token is never written): three full blocks.
    next_turn = prompt + response + random_prompts([20], seed=1)[0]
    before = admission.prefilled_tokens
    reused = engine.generate([next_turn], GREEDY)[0]
    assert admission.prefilled_tokens - before == len(next_turn) - 48
    assert admission.reused_tokens == 48
    fresh = NativeEngine(
        load_causal_lm(tiny_model), EngineLimits(max_num_seqs=4, max_model_len=128)
    )
    expected = fresh.generate([next_turn], GREEDY)[0]
    assert reused.token_ids == expected.token_ids
    assert max(abs(a - b) for a, b in zip(reused.log_probs, expected.log_probs, strict=True)) < 1e-4


def test_a_turn_continues_from_the_partial_block_its_context_ended_in(model, tiny_model):
    engine = NativeEngine(model, EngineLimits(max_num_seqs=4, max_model_len=128))
    admission = engine.scheduler.admission
    prompt = random_prompts([40])[0]
    short = SamplingParams(temperature=0, max_new_tokens=5)
    response = engine.generate([prompt], short)[0].token_ids
    # Positions 0-43 are cached: two full blocks, and 12 positions of the third.
    next_turn = prompt + response + random_prompts([7], seed=2)[0]
    before = admission.prefilled_tokens
    reused = engine.generate([next_turn], GREEDY)[0]
    assert admission.prefilled_tokens - before == len(next_turn) - 44 == 8
    fresh = NativeEngine(
        load_causal_lm(tiny_model), EngineLimits(max_num_seqs=4, max_model_len=128)
    )
    assert reused.token_ids == fresh.generate([next_turn], GREEDY)[0].token_ids
    # The partial block was copied, not written: the first context is still found whole.
    again = engine.generate([prompt + response[:4] + [1, 2, 3]], short)
    assert admission.prefilled_tokens - before == 8 + 3 and len(again) == 1


def test_new_weights_make_the_cached_prefixes_stale(model):
    engine = NativeEngine(model, EngineLimits(max_num_seqs=4, max_model_len=128))
    prompt = random_prompts([40])[0]
    engine.generate([prompt], GREEDY)
    engine.generate([prompt], GREEDY)
    assert engine.scheduler.admission.reused_tokens == 32
    engine.load_weights(model.named_parameters(), version=1)
    engine.generate([prompt], GREEDY)
    assert engine.scheduler.admission.reused_tokens == 32, "nothing reused after the refresh"


def test_memory_follows_the_live_tokens_not_max_model_len(model):
    prompts = random_prompts([20, 35, 50, 12, 64, 30, 41, 27])
    sampled = SamplingParams(n=2, temperature=1.0, max_new_tokens=48, seed=3)
    figures = []
    for max_model_len in (256, 8192):
        engine = NativeEngine(model, EngineLimits(max_num_seqs=16, max_model_len=max_model_len))
        samples = engine.generate(prompts, sampled)
        cache = engine.cache
        figures.append((cache.bytes, cache.peak_blocks, [s.token_ids for s in samples]))
        held = cache.bytes // cache.block_bytes
        assert held <= max(16 + 1, (cache.peak_blocks + 1) * 17 // 16 + 1)
    assert figures[0] == figures[1]


def test_the_smallest_budget_serves_many_samples_of_a_long_prompt(model):
    """A budget of one whole sequence (and its next block): samples run one or two at a
    time, and the queue never stalls."""
    per_block = model.config.num_hidden_layers * 2 * 2 * 16 * 16 * 4
    engine = NativeEngine(
        model, EngineLimits(max_num_seqs=4, max_model_len=64, kv_cache_bytes=5 * per_block)
    )
    roomy = NativeEngine(model, EngineLimits(max_num_seqs=4, max_model_len=64))
    prompt = random_prompts([40])
    params = SamplingParams(n=4, temperature=0, max_new_tokens=23)
    got = engine.generate(prompt, params)
    assert [len(s.token_ids) for s in got] == [23] * 4 and engine.cache.held_blocks == 0
    assert [s.token_ids for s in got] == [s.token_ids for s in roomy.generate(prompt, params)]


def test_a_preempted_sequence_that_is_aborted_returns_its_tokens(model):
    per_block = model.config.num_hidden_layers * 2 * 2 * 16 * 16 * 4
    engine = NativeEngine(
        model, EngineLimits(max_num_seqs=4, max_model_len=64, kv_cache_bytes=6 * per_block)
    )
    done = []
    requests = [
        EngineRequest(prompt, SamplingParams(temperature=0, max_new_tokens=60), done.append)
        for prompt in random_prompts([3, 3, 3])
    ]
    for request in requests:
        engine.add_request(request)
    while engine.scheduler.preemptions == 0:
        engine.step()
    waiting = next(job for job in engine.scheduler.waiting if job.resume is not None)
    generated = list(waiting.resume.generated)
    engine.abort(waiting.request)
    assert done[-1].token_ids == generated and done[-1].finish_reason == "abort"
    while engine.has_work():
        engine.step()
    assert len(done) == 3 and engine.cache.held_blocks == 0


@pytest.mark.parametrize(
    "heads,kv_heads,dim,value_dim,window,threads",
    [
        (4, 2, 16, 16, None, 1),
        (9, 3, 64, 64, None, 2),
        (8, 8, 32, 32, None, 1),
        (4, 2, 32, 32, 20, 2),  # a sliding window: the chunk starts past its first blocks
        (4, 1, 48, 32, None, 1),  # latent attention: keys (latent + rope) wider than values
        (4, 1, 48, 32, 7, 2),
    ],
)
def test_the_cpu_attention_kernel_equals_gathered_attention(
    heads, kv_heads, dim, value_dim, window, threads
):
    from ascent.rollout import kernels, paged_attention

    assert kernels.library() is not None, "a C compiler is part of the test machine"
    g = torch.Generator().manual_seed(0)
    block_size, blocks, batch = 16, 40, 5
    k_pool = torch.randn(blocks, kv_heads, dim, block_size, generator=g)
    v_pool = torch.randn(blocks, kv_heads, block_size, value_dim, generator=g)
    tables = torch.randperm(blocks, generator=g)[: batch * 6].view(batch, 6)
    decode = torch.tensor([0, 15, 16, 57, 95])[:, None]  # block edges; the whole table
    # A prefill of 40 tokens after 0-50 cached ones (two chunks of queries in the kernel).
    prefill = torch.tensor([0, 5, 16, 40, 50])[:, None] + torch.arange(40)
    scale = 0.3 if window else None  # a family's own scale, or 1/sqrt(dim)
    # Every row (a work item per sequence, all its KV heads), then one row alone (so few
    # items that the kernel splits them by KV head to keep its threads busy).
    cases = [(decode, batch), (prefill, batch), (decode[3:4], 1), (prefill[3:4], 1)]
    for positions, rows in cases:
        q = torch.randn(rows, heads, positions.shape[1], dim, generator=g)
        row_tables = tables[3:4] if rows == 1 else tables
        before = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            got = kernels.paged_attention(
                q, k_pool, v_pool, row_tables, positions, scale=scale, window=window
            )
        finally:
            torch.set_num_threads(before)
        expected = paged_attention.attend_gathered(
            q, k_pool, v_pool, row_tables, positions, scale=scale, window=window
        )
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    assert kernels.paged_attention(q.double(), k_pool, v_pool, tables, positions) is None


def test_gathered_attention_with_a_window_equals_attention_over_the_last_keys():
    """The window's mask, checked against attention over exactly the keys it keeps."""
    from ascent.rollout import paged_attention

    g = torch.Generator().manual_seed(1)
    k_pool = torch.randn(4, 1, 16, 16, generator=g)
    v_pool = torch.randn(4, 1, 16, 16, generator=g)
    tables = torch.tensor([[2, 0, 3]])
    q = torch.randn(1, 2, 1, 16, generator=g)
    got = paged_attention.attend_gathered(q, k_pool, v_pool, tables, torch.tensor([[40]]), window=5)
    keys = paged_attention.gather(k_pool, tables, transposed=True)[:, :, 36:41]
    values = paged_attention.gather(v_pool, tables)[:, :, 36:41]
    expected = torch.softmax(q @ keys.transpose(-1, -2) / 4, dim=-1) @ values
    torch.testing.assert_close(got, expected, atol=1e-6, rtol=1e-6)


def test_the_kernel_declines_shapes_its_register_tiles_do_not_take():
    """Head dims or block sizes that are not multiples of 16 (or blocks over 64) go to
    gathered attention: the kernel answers None rather than reading past a block."""
    from ascent.rollout import kernels

    assert kernels.library() is not None
    for dim, block_size in ((24, 16), (16, 8), (16, 128)):
        q = torch.randn(2, 2, 1, dim)
        k_pool = torch.randn(4, 1, dim, block_size)
        v_pool = torch.randn(4, 1, block_size, dim)
        tables = torch.tensor([[1], [2]])
        positions = torch.tensor([[3], [0]])
        assert kernels.paged_attention(q, k_pool, v_pool, tables, positions) is None


def test_without_the_kernel_the_engine_gathers_and_agrees(model, monkeypatch):
    """No C compiler (or ASCENT_C_KERNELS=0): the same tokens through gathered SDPA, for
    fresh prompts, a later turn after cached context, and decoding."""
    from ascent.rollout import kernels

    prompt = random_prompts([40])[0]
    with_kernel = NativeEngine(model, EngineLimits(max_num_seqs=4, max_model_len=128))
    first = with_kernel.generate([prompt], GREEDY)[0].token_ids
    expected = with_kernel.generate([prompt + first + [7, 8, 9]], GREEDY)[0]
    monkeypatch.setitem(kernels._state, "library", None)
    gathered = NativeEngine(model, EngineLimits(max_num_seqs=4, max_model_len=128))
    assert gathered.generate([prompt], GREEDY)[0].token_ids == first
    got = gathered.generate([prompt + first + [7, 8, 9]], GREEDY)[0]
    assert gathered.scheduler.admission.reused_tokens > 0
    assert got.token_ids == expected.token_ids
    assert max(abs(a - b) for a, b in zip(got.log_probs, expected.log_probs, strict=True)) < 1e-4
