"""The native engine against transformers: greedy token-for-token, the sampling distribution,
stop handling, reproducibility, memory budget (waiting and preemption) and sleep/wake."""

import pytest
import torch

from ascent.models import load_causal_lm, load_tokenizer
from ascent.models.loading import causal_lm_from_config
from ascent.rollout import EngineLimits, NativeEngine, SamplingParams, TransformersEngine

GREEDY = SamplingParams(temperature=0, max_new_tokens=12)


def random_prompts(lengths, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 250, (n,), generator=g).tolist() for n in lengths]


def hf_greedy(model, prompt, max_new_tokens):
    ids = torch.tensor([prompt], device=model.device)  # a CUDA model's too
    out = model.generate(
        ids,
        attention_mask=torch.ones_like(ids),
        max_new_tokens=max_new_tokens,
        do_sample=False,
        eos_token_id=None,
        pad_token_id=0,
    )
    return out[0, ids.shape[1] :].tolist()


def architectures():
    from transformers import LlamaConfig, Qwen3Config

    small = {
        "vocab_size": 259,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
    }
    return {
        "llama": lambda: causal_lm_from_config(LlamaConfig(**small), seed=1),
        "qwen3": lambda: causal_lm_from_config(Qwen3Config(**small, head_dim=16), seed=2),
    }


@pytest.mark.parametrize("slots", [2, 16])
def test_greedy_equals_transformers_token_for_token(tiny_model, slots):
    """slots=2 with 7 prompts: sequences join mid-flight as others finish."""
    model = load_causal_lm(tiny_model)
    prompts = random_prompts([3, 11, 5, 17, 4, 9, 2])
    engine = NativeEngine(
        load_causal_lm(tiny_model), EngineLimits(max_num_seqs=slots, max_model_len=64)
    )
    samples = engine.generate(prompts, GREEDY)
    assert [s.prompt_index for s in samples] == list(range(7))
    for sample in samples:
        assert sample.token_ids == hf_greedy(model, prompts[sample.prompt_index], 12)
        assert sample.finish_reason == "length"


@pytest.mark.parametrize("name", ["llama", "qwen3"])
def test_other_llama_family_architectures(name):
    model = architectures()[name]()
    prompts = random_prompts([6, 13, 3], seed=4)
    samples = NativeEngine(model, EngineLimits(max_num_seqs=2, max_model_len=64)).generate(
        prompts, GREEDY
    )
    for sample in samples:
        assert sample.token_ids == hf_greedy(model, prompts[sample.prompt_index], 12)


def test_same_seed_same_samples_and_n_samples_share_a_prompt(tiny_model):
    engine = NativeEngine(
        load_causal_lm(tiny_model), EngineLimits(max_num_seqs=5, max_model_len=64)
    )
    prompts = random_prompts([4, 8, 6])
    params = SamplingParams(n=4, temperature=1.0, max_new_tokens=10, seed=7)
    first = engine.generate(prompts, params)
    again = engine.generate(prompts, params)
    other = engine.generate(prompts, params.model_copy(update={"seed": 8}))
    assert [s.token_ids for s in first] == [s.token_ids for s in again]
    assert [s.token_ids for s in first] != [s.token_ids for s in other]
    assert [(s.prompt_index, s.sample_index) for s in first] == [
        (p, i) for p in range(3) for i in range(4)
    ]
    assert len({tuple(s.token_ids) for s in first if s.prompt_index == 0}) > 1, "samples differ"


def reference_distribution(logits, temperature, top_k, top_p):
    """softmax(logits / T) cut to the top-k tokens and renormalised, then cut to the smallest
    prefix of that distribution with mass top_p (the order transformers' warpers apply)."""
    probs = torch.softmax(logits.double() / temperature, dim=-1)
    order = probs.argsort(descending=True).tolist()
    top = order[:top_k] if top_k else order
    mass_of_top = float(probs[top].sum())
    kept, mass = [], 0.0
    for token in top:
        if mass >= top_p:
            break
        kept.append(token)
        mass += float(probs[token]) / mass_of_top
    restricted = torch.zeros_like(probs)
    restricted[kept] = probs[kept]
    return restricted / restricted.sum()


@pytest.mark.parametrize(("top_k", "top_p"), [(0, 1.0), (40, 1.0), (0, 0.9), (60, 0.8)])
def test_sampling_follows_the_restricted_softmax(tiny_model, top_k, top_p):
    model = load_causal_lm(tiny_model)
    prompt = random_prompts([9], seed=3)[0]
    # Sharpen the random model's nearly uniform output, so the top-k / top-p cuts matter.
    model.lm_head.weight.data *= 5
    with torch.no_grad():
        logits = model(torch.tensor([prompt])).logits[0, -1]
    temperature, draws = 0.8, 6000
    expected = reference_distribution(logits, temperature, top_k, top_p)
    engine = NativeEngine(model, EngineLimits(max_num_seqs=64, max_model_len=32))
    params = SamplingParams(
        n=draws, temperature=temperature, top_k=top_k, top_p=top_p, max_new_tokens=1, seed=11
    )
    samples = engine.generate([prompt], params)
    tokens = torch.tensor([s.token_ids[0] for s in samples])
    counts = torch.bincount(tokens, minlength=logits.numel()).double()
    assert counts[expected == 0].sum() == 0, "a token outside the top-k/top-p set was drawn"
    expected_counts = expected * draws
    big = expected_counts >= 5
    observed = torch.cat([counts[big], counts[~big].sum().reshape(1)])
    wanted = torch.cat([expected_counts[big], expected_counts[~big].sum().reshape(1)])
    keep = wanted > 0
    chi2 = float(((observed[keep] - wanted[keep]) ** 2 / wanted[keep]).sum())
    dof = int(keep.sum()) - 1
    p_value = float(torch.special.gammaincc(torch.tensor(dof / 2.0), torch.tensor(chi2 / 2.0)))
    assert p_value > 1e-3, f"chi2={chi2:.1f} dof={dof}"
    for s in samples[:20]:  # the returned log-prob is that of the restricted distribution
        assert s.log_probs[0] == pytest.approx(float(torch.log(expected[s.token_ids[0]])), abs=1e-4)


def test_stop_tokens_stop_strings_and_lengths(tiny_model):
    tokenizer = load_tokenizer(tiny_model)
    engine = NativeEngine(
        load_causal_lm(tiny_model),
        EngineLimits(max_num_seqs=4, max_model_len=40),
        tokenizer=tokenizer,
    )
    prompts = random_prompts([5, 30])
    free = engine.generate(prompts, SamplingParams(temperature=0, max_new_tokens=16))
    target = free[0].token_ids
    # A stop token: the response ends at its first occurrence, the token kept.
    stop_token = target[4]
    first = target.index(stop_token)
    stopped = engine.generate(
        prompts[:1], SamplingParams(temperature=0, max_new_tokens=16, stop_token_ids=[stop_token])
    )[0]
    assert stopped.token_ids == target[: first + 1] and stopped.finish_reason == "stop"
    # A stop string: the text of two generated tokens; ends with the token completing it.
    text = tokenizer.decode(target[5:7])
    by_string = engine.generate(
        prompts[:1], SamplingParams(temperature=0, max_new_tokens=16, stop=[text])
    )[0]
    decoded = tokenizer.decode(by_string.token_ids)
    assert text in decoded and text not in tokenizer.decode(by_string.token_ids[:-1])
    assert by_string.finish_reason == "stop"
    # Lengths: max_new_tokens, and the context limit for the 30-token prompt (40 total).
    assert len(free[0].token_ids) == 16 and free[0].finish_reason == "length"
    assert len(free[1].token_ids) == 40 - 30 and free[1].finish_reason == "length"


def test_kv_cache_budget_and_sleep(tiny_model):
    """A budget smaller than the batch wants makes sequences wait or be preempted, never
    fail, and changes no output; sleep frees the cache and wake starts it empty."""
    model = load_causal_lm(tiny_model)
    per_block = 2 * 2 * 2 * 16 * 16 * 4  # layers x (k, v) x kv heads x block x head dim x fp32
    prompts = random_prompts([4, 7, 5, 6, 3, 30, 2, 9])
    greedy = SamplingParams(temperature=0, max_new_tokens=40)
    roomy = NativeEngine(model, EngineLimits(max_num_seqs=8, max_model_len=64))
    tight = NativeEngine(
        model, EngineLimits(max_num_seqs=8, max_model_len=64, kv_cache_bytes=7 * per_block)
    )
    assert tight.cache.limit == 7
    expected = roomy.generate(prompts, greedy)
    before = tight.generate(prompts, greedy)
    assert [s.token_ids for s in before] == [s.token_ids for s in expected]
    assert tight.scheduler.preemptions > 0 and tight.cache.bytes <= 7 * per_block
    tight.sleep()
    assert not tight.cache.awake and tight.cache.bytes == 0
    after = tight.generate(prompts, greedy)  # wakes the cache again
    assert tight.cache.awake
    assert [s.token_ids for s in before] == [s.token_ids for s in after]
    with pytest.raises(ValueError, match="holds no sequence"):
        NativeEngine(
            model, EngineLimits(max_num_seqs=8, max_model_len=64, kv_cache_bytes=4 * per_block)
        )


def test_bad_requests_are_explained(tiny_model):
    model = load_causal_lm(tiny_model)
    engine = NativeEngine(model, EngineLimits(max_num_seqs=2, max_model_len=16))
    with pytest.raises(ValueError, match="prompt 1 has 20 tokens"):
        engine.generate([[1, 2], list(range(20))], GREEDY)
    with pytest.raises(ValueError, match="stop strings need"):
        engine.generate([[1, 2]], SamplingParams(stop=["x"]))
    from transformers import GPT2Config

    engines = "rollout.engine=transformers or vllm"
    with pytest.raises(ValueError, match=f"no model family for model_type 'gpt2' .*{engines}"):
        NativeEngine(causal_lm_from_config(GPT2Config(n_layer=1, n_embd=32, n_head=2)))


def test_transformers_reference_engine_agrees_on_greedy(tiny_model):
    prompts = random_prompts([3, 11, 5])
    model = load_causal_lm(tiny_model)
    native = NativeEngine(model, EngineLimits(max_num_seqs=4, max_model_len=64)).generate(
        prompts, GREEDY
    )
    reference = TransformersEngine(model, max_num_seqs=2).generate(prompts, GREEDY)
    assert [s.token_ids for s in native] == [s.token_ids for s in reference]
    for a, b in zip(native, reference, strict=True):
        assert max(abs(x - y) for x, y in zip(a.log_probs, b.log_probs, strict=True)) < 1e-4


def test_loaded_weights_carry_the_version_they_are_given(tiny_model):
    """Tokens record the version the caller gives the weights (the engine keeps no
    numbering of its own: a refresh without a version is an error)."""
    model = load_causal_lm(tiny_model)
    engine = NativeEngine(model, EngineLimits(max_num_seqs=4, max_model_len=256))
    greedy = SamplingParams(temperature=0, max_new_tokens=4)
    assert engine.load_weights(model.named_parameters(), version=7) == 7
    assert set(engine.generate([[5, 6, 7]], greedy)[0].weight_versions) == {7}
    with pytest.raises(TypeError, match="version"):
        engine.load_weights(model.named_parameters())
