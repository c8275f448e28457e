"""The official ``tinker`` SDK against ``ascent service`` (a real server process, the tiny
model): a supervised loop lowers its loss; the log-probs it gets back are ascent's own
(PolicyModule on the same tokens); the losses are the documented sums; saved state comes back
into a new training client, also after the server restarts; two clients keep their own
weights; bad input gets the SDK's errors, at once; a sampling client samples the trained
weights with their log-probs."""

import math

import httpx
import pytest
import torch

from ascent.engine.modules import PolicyModule
from ascent.models import load_causal_lm
from tests.servers import ascent_service

tinker = pytest.importorskip("tinker")
types = tinker.types
pytestmark = pytest.mark.integration
BASE = "tiny-base"
TOKENS = [5, 17, 42, 99, 7, 13, 21, 8, 64, 3]


def datum(tokens=TOKENS, **inputs):
    inputs = {"target_tokens": tokens[1:], "weights": [1.0] * (len(tokens) - 1)} | inputs
    return types.Datum(model_input=types.ModelInput.from_ints(tokens[:-1]), loss_fn_inputs=inputs)


def log_probs(result, index=0):
    return torch.tensor(result.loss_fn_outputs[index]["logprobs"].tolist())


@pytest.fixture(scope="module")
def server(tiny_model, tmp_path_factory):
    root = tmp_path_factory.mktemp("service")
    with ascent_service(tiny_model, root / "log", "--name", BASE, "--root", str(root)) as process:
        yield process, root


@pytest.fixture
def client(server, monkeypatch):
    monkeypatch.setenv("TINKER_TELEMETRY", "0")
    service = tinker.ServiceClient(base_url=server[0].url, api_key="tml-test")
    yield service
    service.close("success").result(timeout=30)  # its heartbeats stop with it


def test_log_probs_are_ascents_own(client, tiny_model):
    """A fresh LoRA client's forward equals the base model's (LoRA's B starts at 0)."""
    training = client.create_lora_training_client(base_model=BASE, rank=4).result()
    result = training.forward([datum()], "cross_entropy").result()
    module = PolicyModule(load_causal_lm(tiny_model))
    ids = torch.tensor(TOKENS[:-1])
    with torch.no_grad():
        expected, _ = module(
            ids.unsqueeze(0),
            position_ids=torch.arange(ids.numel()).unsqueeze(0),
            query_index=torch.arange(ids.numel()),
            targets=torch.tensor(TOKENS[1:]),
        )
    torch.testing.assert_close(log_probs(result), expected, atol=1e-5, rtol=0)
    assert result.metrics["loss:sum"] == pytest.approx(-float(expected.sum()), rel=1e-5)


def test_a_supervised_loop_lowers_the_loss(client):
    training = client.create_lora_training_client(base_model=BASE, rank=8).result()
    data = [datum(), datum(TOKENS[::-1])]
    losses = []
    for _ in range(10):
        step = training.forward_backward(data, "cross_entropy")
        training.optim_step(types.AdamParams(learning_rate=5e-3)).result()
        losses.append(step.result().metrics["loss:sum"])
    assert losses[-1] < 0.85 * losses[0], losses


def test_policy_losses_are_the_documented_sums(client):
    training = client.create_lora_training_client(base_model=BASE, rank=4).result()
    n = len(TOKENS) - 1
    sampled = [-2.0 + 0.1 * i for i in range(n)]
    advantages = [1.0 if i % 2 else -0.5 for i in range(n)]
    inputs = {"logprobs": sampled, "advantages": advantages}
    example = datum(**inputs)
    lp = log_probs(training.forward([example], "cross_entropy").result())
    ratio = torch.exp(lp - torch.tensor(sampled))
    adv = torch.tensor(advantages)
    result = training.forward([example], "importance_sampling").result()
    assert result.metrics["loss:sum"] == pytest.approx(-float((ratio * adv).sum()), rel=1e-5)
    config = {"clip_low_threshold": 0.9, "clip_high_threshold": 1.1}
    result = training.forward([example], "ppo", loss_fn_config=config).result()
    clipped = torch.minimum(ratio * adv, ratio.clamp(0.9, 1.1) * adv)
    assert result.metrics["loss:sum"] == pytest.approx(-float(clipped.sum()), rel=1e-5)
    result = training.forward([example], "cispo", loss_fn_config=config).result()
    weighted = ratio.clamp(0.9, 1.1) * adv * lp
    assert result.metrics["loss:sum"] == pytest.approx(-float(weighted.sum()), rel=1e-5)


def test_a_custom_loss_trains_as_the_built_in_one_it_equals(client):
    """``forward_backward_custom`` (the SDK's forward, the loss's gradient as cross-entropy
    weights): -sum(lp) steps the weights exactly as cross_entropy with weights 1."""
    clients = [
        client.create_lora_training_client(base_model=BASE, rank=4, seed=7).result()
        for _ in range(2)
    ]
    built_in, custom = clients
    built_in.forward_backward([datum()], "cross_entropy").result()

    def negative_log_likelihood(data, logprobs):
        loss = -sum(lp.sum() for lp in logprobs)
        return loss, {"nll": float(loss.detach())}

    custom.forward_backward_custom([datum()], negative_log_likelihood).result()
    for training in clients:
        training.optim_step(types.AdamParams(learning_rate=1e-2)).result()
    after = [log_probs(c.forward([datum()], "cross_entropy").result()) for c in clients]
    torch.testing.assert_close(after[1], after[0], atol=1e-6, rtol=0)


def test_saved_state_comes_back_also_after_a_restart(client, server, monkeypatch):
    process, _ = server
    training = client.create_lora_training_client(base_model=BASE, rank=4).result()
    for _ in range(2):
        training.forward_backward([datum()], "cross_entropy")
        training.optim_step(types.AdamParams(learning_rate=1e-2)).result()
    path = training.save_state("two").result().path
    assert path.startswith("tinker://") and path.endswith("/weights/two")
    trained = log_probs(training.forward([datum()], "cross_entropy").result())
    restored = client.create_training_client_from_state_with_optimizer(path).result()
    torch.testing.assert_close(
        log_probs(restored.forward([datum()], "cross_entropy").result()), trained
    )
    process.start(120)  # a new server process over the same checkpoint root
    again = tinker.ServiceClient(base_url=process.url, api_key="tml-test")
    resumed = again.create_training_client_from_state(path).result()
    torch.testing.assert_close(
        log_probs(resumed.forward([datum()], "cross_entropy").result()), trained
    )
    again.close("success").result(timeout=30)


def test_two_clients_keep_their_own_weights(client):
    first = client.create_lora_training_client(base_model=BASE, rank=4).result()
    second = client.create_lora_training_client(base_model=BASE, rank=4).result()
    before = log_probs(second.forward([datum()], "cross_entropy").result())
    for _ in range(2):
        first.forward_backward([datum()], "cross_entropy")
        first.optim_step(types.AdamParams(learning_rate=1e-2)).result()
    moved = log_probs(first.forward([datum()], "cross_entropy").result())
    assert not torch.allclose(moved, before)
    torch.testing.assert_close(
        log_probs(second.forward([datum()], "cross_entropy").result()), before
    )


def test_a_closed_client_frees_its_models_and_its_session_answers_gone(server, monkeypatch):
    monkeypatch.setenv("TINKER_TELEMETRY", "0")
    service = tinker.ServiceClient(base_url=server[0].url, api_key="tml-test")
    model_id = service.create_lora_training_client(base_model=BASE, rank=4).result().model_id
    service.close("success").result(timeout=30)
    url = f"{server[0].url}/api/v1"
    gone = httpx.post(f"{url}/get_info", json={"model_id": model_id})
    assert gone.status_code == 410 and "has finished" in gone.json()["detail"]
    beat = httpx.post(f"{url}/session_heartbeat", json={"session_id": model_id.split(":")[0]})
    assert beat.status_code == 410


def test_bad_input_gets_the_sdks_errors(client):
    with pytest.raises(tinker.NotFoundError, match="unknown base model"):
        client.create_lora_training_client(base_model="no-such-model", rank=4).result()
    training = client.create_lora_training_client(base_model=BASE, rank=4).result()
    short = types.Datum(
        model_input=types.ModelInput.from_ints([1, 2]),
        loss_fn_inputs={"target_tokens": [1, 2, 3], "weights": [1.0, 1.0, 1.0]},
    )
    with pytest.raises(tinker.RequestFailedError, match=r"must be \[2\]") as failed:
        training.forward_backward([short], "cross_entropy").result()
    assert failed.value.category == "user"  # the client's to fix, not the server's
    with pytest.raises(tinker.RequestFailedError, match="is not served"):
        training.forward_backward([datum()], "dro").result()
    outside = datum([1, 2, 10**6])
    with pytest.raises(tinker.RequestFailedError, match="outside the vocabulary"):
        training.forward_backward([outside], "cross_entropy").result()
    # the model still trains after its bad calls
    result = training.forward_backward([datum()], "cross_entropy").result()
    assert math.isfinite(result.metrics["loss:sum"])


def test_a_sampling_client_samples_the_trained_weights_with_their_log_probs(client, tiny_model):
    """``save_weights_and_get_sampling_client``: the engine samples the snapshot; each
    token's log-prob is the trained model's (forward on the sampled tokens)."""
    training = client.create_lora_training_client(base_model=BASE, rank=4).result()
    for _ in range(2):
        training.forward_backward([datum()], "cross_entropy")
        training.optim_step(types.AdamParams(learning_rate=1e-2)).result()
    sampler = training.save_weights_and_get_sampling_client().result()
    prompt = types.ModelInput.from_ints(TOKENS[:4])
    params = types.SamplingParams(max_tokens=6, temperature=1.0, seed=3)
    result = sampler.sample(prompt=prompt, num_samples=3, sampling_params=params).result()
    assert len(result.sequences) == 3
    for sequence in result.sequences:
        assert sequence.stop_reason in ("stop", "length")
        assert len(sequence.logprobs) == len(sequence.tokens) > 0
        whole = TOKENS[:4] + list(sequence.tokens)
        scored = types.Datum(
            model_input=types.ModelInput.from_ints(whole[:-1]),
            loss_fn_inputs={"target_tokens": whole[1:], "weights": [1.0] * (len(whole) - 1)},
        )
        trained = log_probs(training.forward([scored], "cross_entropy").result())[3:]
        torch.testing.assert_close(torch.tensor(sequence.logprobs), trained, atol=1e-4, rtol=0)
    prompt_lp = sampler.compute_logprobs(types.ModelInput.from_ints(TOKENS)).result()
    assert prompt_lp[0] is None and len(prompt_lp) == len(TOKENS)


def test_a_call_whose_client_went_away_neither_hangs_nor_blocks_the_model(client, server):
    """A forward_backward submitted and never polled (its client gone): it still runs, its
    result waits for a poll, and the model's next calls go on; a retried submit of the same
    seq_id gets the same future."""
    pb = pytest.importorskip("tinker.proto.tinker_public_pb2")
    training = client.create_lora_training_client(base_model=BASE, rank=4).result()
    model_id = training.model_id
    request = pb.ForwardBackwardRequest(model_id=model_id, seq_id=100, loss_fn="cross_entropy")
    row = request.data.add()
    row.model_input.add().encoded_text.tokens = (
        torch.tensor(TOKENS[:-1], dtype=torch.int32).numpy().tobytes()
    )
    for name, values, dtype in (
        ("target_tokens", TOKENS[1:], torch.int64),
        ("weights", [1.0] * 9, torch.float32),
    ):
        tensor = row.loss_fn_inputs[name]
        tensor.dense = torch.tensor(values, dtype=dtype).numpy().tobytes()
        tensor.dtype = pb.DTYPE_INT64 if dtype == torch.int64 else pb.DTYPE_FLOAT32
        tensor.shape.append(len(values))
    headers = {"Content-Type": "application/x-protobuf", "X-API-Key": "tml-test"}
    url = f"{server[0].url}/api/v1"
    with httpx.Client() as gone:  # submits, then closes without polling
        submitted = gone.post(
            f"{url}/forward_backward", content=request.SerializeToString(), headers=headers
        )
    assert submitted.status_code == 200
    body = request.SerializeToString()
    retried = httpx.post(f"{url}/forward_backward", content=body, headers=headers)
    assert retried.json()["request_id"] == submitted.json()["request_id"]  # not run twice
    result = training.forward([datum()], "cross_entropy").result()
    assert math.isfinite(result.metrics["loss:sum"])
    polled = httpx.post(
        f"{url}/retrieve_future", json={"request_id": submitted.json()["request_id"]}, timeout=60
    )
    output = pb.ForwardBackwardOutput()
    output.ParseFromString(polled.content)
    assert output.metrics["loss:sum"] == pytest.approx(result.metrics["loss:sum"], rel=1e-5)


def test_only_the_newest_snapshot_sessions_are_kept(client, server):
    """An RL loop makes a sampling session a step: the older snapshots go, weights and all."""
    training = client.create_lora_training_client(base_model=BASE, rank=4).result()
    samplers = [training.save_weights_and_get_sampling_client().result() for _ in range(3)]
    prompt = types.ModelInput.from_ints(TOKENS[:4])
    params = types.SamplingParams(max_tokens=2, seed=0)
    with pytest.raises(tinker.NotFoundError, match="unknown sampling session"):
        samplers[0].sample(prompt=prompt, num_samples=1, sampling_params=params).result()
    snapshots = list((server[1] / training.model_id / "sampler_sessions").iterdir())
    assert len(snapshots) == 2
    result = samplers[-1].sample(prompt=prompt, num_samples=1, sampling_params=params).result()
    assert len(result.sequences) == 1
