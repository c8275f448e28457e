"""A trained model of ``ascent service`` on two ranks over Ray (``resources`` of its config:
FSDP2 over gloo, a process per rank) computes what one rank in the server's process computes:
the same log-probs and ``loss:sum``, the same weights after each step, also when a call has
fewer datums than ranks (a rank runs a filler pass); a state saved on two ranks loads on one.
"""

import shutil

import pytest
import torch

from tests.servers import ascent_service

tinker = pytest.importorskip("tinker")
types = tinker.types
pytestmark = pytest.mark.integration
BASE = "tiny-base"


def datum(tokens):
    targets = tokens[1:]
    return types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={"target_tokens": targets, "weights": [1.0] * len(targets)},
    )


# Three datums of unequal length (the ranks get unequal token shares), then one alone.
CALL = [
    datum([5, 17, 42, 99, 7, 13, 21, 8, 64, 3, 11]),
    datum([9, 4, 33, 2, 18, 6]),
    datum([7, 1, 5]),
]
ALONE = [datum([12, 40, 3, 27, 9, 14])]


def log_probs(result):
    return [torch.tensor(out["logprobs"].tolist()) for out in result.loss_fn_outputs]


def trajectory(url: str) -> tuple[list, str]:
    """What a client sees over two steps (one of three datums, one of one): each call's
    log-probs and loss, the log-probs after each step, and its saved state's path."""
    service = tinker.ServiceClient(base_url=url, api_key="tml-test")
    training = service.create_lora_training_client(base_model=BASE, rank=4, seed=1).result()
    seen = []
    for data in (CALL, ALONE):
        result = training.forward_backward(data, "cross_entropy").result()
        seen.append((log_probs(result), result.metrics["loss:sum"]))
        training.optim_step(types.AdamParams(learning_rate=2e-2)).result()
        seen.append((log_probs(training.forward(CALL, "cross_entropy").result()), None))
    short = types.Datum(
        model_input=types.ModelInput.from_ints([1, 2]),
        loss_fn_inputs={"target_tokens": [1, 2, 3], "weights": [1.0] * 3},
    )
    with pytest.raises(tinker.RequestFailedError, match=r"datum 1: .* must be \[2\]"):
        training.forward_backward([ALONE[0], short], "cross_entropy").result()  # every rank
    path = training.save_state("after-two").result().path
    service.close("success").result(timeout=30)
    return seen, path


@pytest.fixture(scope="module")
def servers(tiny_model, tmp_path_factory):
    root = tmp_path_factory.mktemp("ranks")
    flags = ("--name", BASE)
    two_ranks = ("resources.devices_per_node=2", f"root={root / 'two'}")
    one_rank = (f"root={root / 'one'}",)
    with (
        ascent_service(tiny_model, root / "one.log", *flags, overrides=one_rank) as one,
        ascent_service(
            tiny_model, root / "two.log", *flags, overrides=two_ranks, timeout=240
        ) as two,
    ):
        yield one, two, root


def test_two_ranks_train_as_one(servers, monkeypatch):
    monkeypatch.setenv("TINKER_TELEMETRY", "0")
    one, two, root = servers
    expected, _ = trajectory(one.url)
    got, path = trajectory(two.url)
    for (want, want_loss), (have, have_loss) in zip(expected, got, strict=True):
        for a, b in zip(want, have, strict=True):
            torch.testing.assert_close(b, a, atol=2e-5, rtol=0)
        if want_loss is not None:
            assert have_loss == pytest.approx(want_loss, rel=1e-5)
    assert not torch.allclose(expected[1][0][0], expected[0][0][0], atol=1e-3)  # it learnt

    # the client closed: its model's ranks are free for the next client's, which resumes
    service = tinker.ServiceClient(base_url=two.url, api_key="tml-test")
    resumed = service.create_training_client_from_state(path).result()
    again = log_probs(resumed.forward(CALL, "cross_entropy").result())
    for a, b in zip(got[-1][0], again, strict=True):
        torch.testing.assert_close(b, a, atol=2e-5, rtol=0)
    service.close("success").result(timeout=30)

    # the two ranks' checkpoint, moved under another model id of the one-rank server
    model_id = path.removeprefix("tinker://").split("/")[0]
    shutil.copytree(
        root / "two" / model_id / "weights" / "after-two",
        root / "one" / "moved" / "weights" / "two",
    )
    service = tinker.ServiceClient(base_url=one.url, api_key="tml-test")
    loaded = service.create_training_client_from_state("tinker://moved/weights/two").result()
    moved = log_probs(loaded.forward(CALL, "cross_entropy").result())
    for a, b in zip(got[-1][0], moved, strict=True):
        torch.testing.assert_close(b, a, atol=2e-5, rtol=0)
    service.close("success").result(timeout=30)
