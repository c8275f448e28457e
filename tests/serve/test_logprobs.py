"""Log-probs as evaluation clients ask for them: the engine keeps each sampled token's top
alternatives from the distribution it was drawn from, teacher-forced scoring of a prompt
equals a transformers forward, and ``ascent serve`` returns top alternatives (completions
``logprobs`` k, chat ``top_logprobs`` k; streamed too) and ``echo`` with the prompt's
log-probs in OpenAI's / vLLM's shapes, through the official ``openai`` client."""

import openai
import pytest
import torch

from ascent.models import load_causal_lm, load_tokenizer
from ascent.rollout import EngineLimits, NativeEngine, SamplingParams
from ascent.rollout.requests import EngineRequest
from ascent.rollout.sampling import distribution
from ascent.rollout.scoring import score_tokens
from ascent.serve.schema import CompletionRequest, RequestError

IDS = [5, 17, 33, 70, 71, 100, 3, 9, 40, 41, 42]


@pytest.fixture(scope="module")
def model(tiny_model):
    return load_causal_lm(tiny_model)


@pytest.fixture(scope="module")
def reference(model):
    """log_softmax of a transformers forward over IDS: (T, V)."""
    with torch.no_grad():
        logits = model(torch.tensor([IDS])).logits[0].float()
    return torch.log_softmax(logits, dim=-1)


@pytest.fixture(scope="module")
def client(served):
    return openai.OpenAI(base_url=f"{served.url}/v1", api_key="none", max_retries=0)


@pytest.mark.parametrize("rows_per_slice", [256, 3])
def test_scoring_equals_a_transformers_forward(model, reference, rows_per_slice):
    engine = NativeEngine(model, EngineLimits(max_num_seqs=2, max_model_len=64))
    scores = score_tokens(engine.runner, IDS, 4, rows_per_slice=rows_per_slice)
    assert scores.log_probs[0] is None and scores.top[0] is None
    expected = reference[:-1].gather(-1, torch.tensor(IDS[1:])[:, None]).squeeze(-1)
    assert scores.log_probs[1:] == pytest.approx(expected.tolist(), abs=1e-5)
    values, indices = reference[:-1].topk(4, dim=-1)
    for t, alternatives in enumerate(scores.top[1:]):
        assert [a for a, _ in alternatives] == indices[t].tolist()
        assert [v for _, v in alternatives] == pytest.approx(values[t].tolist(), abs=1e-5)


def generate(engine, prompt, sampling, top_logprobs):
    """One response of the engine, with ``top_logprobs`` alternatives per token."""
    samples, generator = [], engine.seeded_generator(sampling)
    engine.add_request(
        EngineRequest(
            prompt, sampling, samples.append, generator=generator, top_logprobs=top_logprobs
        )
    )
    while engine.has_work():
        engine.step()
    return samples[0]


def test_the_engine_keeps_each_tokens_alternatives_from_its_sampling_distribution(model):
    engine = NativeEngine(model, EngineLimits(max_num_seqs=2, max_model_len=64))
    sampling = SamplingParams(temperature=0.7, top_k=3, max_new_tokens=6, seed=2)
    sample = generate(engine, IDS[:5], sampling, top_logprobs=5)
    ids = IDS[:5] + sample.token_ids
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0, 4:-1].float()  # predicting the response
    expected = distribution(logits, sampling).topk(5)
    assert len(sample.top_logprobs) == len(sample.token_ids) == 6
    for t, (token, log_prob, alternatives) in enumerate(
        zip(sample.token_ids, sample.log_probs, sample.top_logprobs, strict=True)
    ):
        assert len(alternatives) == 3, "top_k 3 leaves three tokens with any probability"
        assert [a for a, _ in alternatives] == expected.indices[t, :3].tolist()
        assert [v for _, v in alternatives] == pytest.approx(
            expected.values[t, :3].tolist(), abs=1e-5
        )
        assert dict(alternatives)[token] == pytest.approx(log_prob, abs=1e-6)
    plain = generate(engine, IDS[:5], sampling, top_logprobs=0)
    assert plain.top_logprobs is None and plain.token_ids == sample.token_ids, "same draws"


def test_teacher_forced_scoring_agrees_with_what_the_engine_sampled(model):
    engine = NativeEngine(model, EngineLimits(max_num_seqs=2, max_model_len=64))
    [sample] = engine.generate([IDS[:5]], SamplingParams(temperature=0, max_new_tokens=8))
    scores = engine.score(IDS[:5] + sample.token_ids, 2)
    assert scores.log_probs[5:] == pytest.approx(sample.log_probs, abs=1e-4)
    assert [top[0][0] for top in scores.top[5:]] == sample.token_ids, "greedy: the argmax"


def test_completions_echo_scores_the_prompt_with_top_alternatives(client, reference, tiny_model):
    answer = client.completions.create(
        model="tiny", prompt=IDS, max_tokens=0, echo=True, logprobs=3, temperature=0
    )
    [choice] = answer.choices
    logprobs = choice.logprobs
    assert choice.model_extra["token_ids"] == [] and choice.finish_reason == "length"
    assert choice.text == load_tokenizer(tiny_model).decode(IDS)
    assert len(logprobs.tokens) == len(IDS) and logprobs.token_logprobs[0] is None
    expected = reference[:-1].gather(-1, torch.tensor(IDS[1:])[:, None]).squeeze(-1)
    assert logprobs.token_logprobs[1:] == pytest.approx(expected.tolist(), abs=1e-4)
    assert logprobs.top_logprobs[0] is None
    for t, top in enumerate(logprobs.top_logprobs[1:], start=1):
        # the three most likely tokens and the prompt's own (when not among them), keyed by
        # text: byte tokens that decode alike ("\ufffd") share a key holding the likelier
        assert 1 <= len(top) <= 4 and top[logprobs.tokens[t]] >= logprobs.token_logprobs[t]
        best = reference[t - 1].max().item()
        assert max(top.values()) == pytest.approx(best, abs=1e-4)


def test_lm_eval_style_request_scores_the_context_and_one_generated_token(client):
    """What lm-eval's ``local-completions`` sends for a log-likelihood: echo, max_tokens 1,
    logprobs 1; it reads entries [context length : -1]."""
    answer = client.completions.create(
        model="tiny", prompt=[IDS], max_tokens=1, echo=True, logprobs=1, temperature=0
    )
    logprobs = answer.choices[0].logprobs
    assert len(logprobs.token_logprobs) == len(IDS) + 1
    generated = answer.choices[0].model_extra["token_ids"][0]
    top = logprobs.top_logprobs[-1]
    assert max(top, key=top.get) == logprobs.tokens[-1], "greedy: the chosen token is the top one"
    assert logprobs.tokens[-1] == answer.choices[0].text[-len(logprobs.tokens[-1]) :]
    assert generated >= 0 and logprobs.text_offset[0] == 0


def test_sampled_completions_report_alternatives_beside_the_engine_log_prob(client):
    answer = client.completions.create(
        model="tiny",
        prompt="ab",
        max_tokens=6,
        logprobs=2,
        temperature=0.9,
        seed=4,
        extra_body={"top_k": 2},
    )
    logprobs = answer.choices[0].logprobs
    for token, value, top in zip(
        logprobs.tokens, logprobs.token_logprobs, logprobs.top_logprobs, strict=True
    ):
        assert token in top and 1 <= len(top) <= 2, "top_k 2: the chosen one is among them"
        assert top[token] >= value  # equal, unless a likelier token decodes to the same text


def test_chat_top_logprobs(client):
    answer = client.chat.completions.create(
        model="tiny",
        messages=[{"role": "user", "content": "hi"}],
        max_tokens=5,
        temperature=0,
        logprobs=True,
        top_logprobs=3,
    )
    content = answer.choices[0].logprobs.content
    assert len(content) == len(answer.choices[0].model_extra["token_ids"]) == 5
    for entry in content:
        values = [alternative.logprob for alternative in entry.top_logprobs]
        assert len(values) == 3 and values == sorted(values, reverse=True)
        assert entry.top_logprobs[0].token == entry.token, "greedy picks the most likely"
        assert entry.logprob == pytest.approx(values[0], abs=1e-4)


def test_streamed_tokens_carry_their_alternatives(client):
    completion = client.completions.create(
        model="tiny", prompt="ab", max_tokens=5, temperature=0, logprobs=2, stream=True
    )
    chunks = [chunk.choices[0] for chunk in completion if chunk.choices[0].finish_reason is None]
    assert len(chunks) == 5
    offsets = [chunk.logprobs.text_offset[0] for chunk in chunks]
    assert offsets == sorted(offsets) and offsets[0] == 0
    for chunk in chunks:
        [token], [value], [top] = (
            chunk.logprobs.tokens,
            chunk.logprobs.token_logprobs,
            chunk.logprobs.top_logprobs,
        )
        assert max(top.values()) == top[token] == value, "greedy: the likeliest"
    chat = client.chat.completions.create(
        model="tiny",
        messages=[{"role": "user", "content": "hi"}],
        max_tokens=4,
        temperature=0,
        logprobs=True,
        top_logprobs=3,
        stream=True,
    )
    entries = [
        e for chunk in chat if chunk.choices[0].logprobs for e in chunk.choices[0].logprobs.content
    ]
    assert len(entries) == 4
    for entry in entries:
        assert len(entry.top_logprobs) == 3 and entry.top_logprobs[0].token == entry.token


def test_max_tokens_zero_without_echo_is_refused_naming_the_field():
    with pytest.raises(RequestError, match="set echo to score the prompt") as refused:
        CompletionRequest(model="tiny", prompt="x", max_tokens=0).unsupported()
    assert refused.value.param == "max_tokens"
    CompletionRequest(model="tiny", prompt="x", max_tokens=0, echo=True).unsupported()


def test_return_tokens_as_token_ids_names_each_token_by_its_id(client, reference):
    """vLLM's extension: tokens and alternatives as "token_id:N", exact where texts collide."""
    plain, named = (
        client.completions.create(
            model="tiny",
            prompt=IDS,
            max_tokens=0,
            echo=True,
            logprobs=3,
            extra_body={"return_tokens_as_token_ids": as_ids},
        ).choices[0]
        for as_ids in (False, True)
    )
    logprobs = named.logprobs
    assert logprobs.tokens == [f"token_id:{t}" for t in IDS]
    assert logprobs.text_offset == plain.logprobs.text_offset, "offsets count the text"
    assert logprobs.token_logprobs == plain.logprobs.token_logprobs
    values, indices = reference[:-1].topk(3, dim=-1)
    for t, top in enumerate(logprobs.top_logprobs[1:]):
        ranked = sorted(top.items(), key=lambda item: -item[1])[:3]
        assert [key for key, _ in ranked] == [f"token_id:{i}" for i in indices[t].tolist()]
        assert [v for _, v in ranked] == pytest.approx(values[t].tolist(), abs=1e-4)
    stream = client.completions.create(
        model="tiny",
        prompt=IDS,
        max_tokens=3,
        temperature=0,
        logprobs=1,
        stream=True,
        extra_body={"return_tokens_as_token_ids": True},
    )
    chunks = [c.choices[0] for c in stream if c.choices[0].finish_reason is None]
    for chunk in chunks:
        assert chunk.logprobs.tokens == [f"token_id:{chunk.model_extra['token_ids'][0]}"]
