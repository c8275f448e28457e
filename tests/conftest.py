"""Suite-wide: tiny checkpoints on disk, the RL toy task's prompts, `gpu` tests skipped where
CUDA is not available, and a local Ray for the modules that ask for one (imported only
then)."""

import json
import random

import pytest
import torch

from ascent.models import build_tiny_model


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(
        reason="needs a CUDA device (run with `pytest -m gpu` on a GPU machine)"
    )
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    """A Qwen2-shaped model (untied head) and its byte-level tokenizer, saved to disk."""
    return str(build_tiny_model(tmp_path_factory.mktemp("tiny") / "model", seed=0))


@pytest.fixture(scope="session")
def tiny_tied_model(tmp_path_factory):
    """The same shape with the output head tied to the embedding."""
    return str(
        build_tiny_model(tmp_path_factory.mktemp("tied") / "model", tie_word_embeddings=True)
    )


@pytest.fixture(scope="module")
def local_ray():
    """A local Ray per test module (8 logical CPUs: workers mostly wait), shut down after it.

    Ray is imported here, not at the top: the GPU machine has no Ray, and its tests run
    without it."""
    import ray

    from ascent.controller.ray_backend import workers_at_normal_priority

    if not ray.is_initialized():
        workers_at_normal_priority()
        ray.init(num_cpus=8, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def prompts(tmp_path_factory):
    """The RL toy task's prompts (tests/trainer/rl_setup.py): train.jsonl and val.jsonl."""
    folder = tmp_path_factory.mktemp("rl-prompts")
    r = random.Random(0)
    rows = [
        {
            "data_source": "digits",
            "prompt": "say " + "".join(r.choice("abcdefgh") for _ in range(4)),
            "reward_model": {"ground_truth": ""},
        }
        for _ in range(256)
    ]
    (folder / "train.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    (folder / "val.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows[:16]))
    return folder


@pytest.fixture(scope="session")
def tiny_moe(tmp_path_factory):
    """A tiny Qwen3-MoE: three layers, the middle one dense, the others routing each token
    to 2 of 4 experts."""
    from ascent.models.tiny_moe import build_tiny_moe

    directory = tmp_path_factory.mktemp("tiny-moe") / "model"
    return str(build_tiny_moe(directory, layers=3, dense_layers=(1,), seed=0))


@pytest.fixture(scope="session")
def tiny_qwen2_moe(tmp_path_factory):
    """A tiny Qwen2-MoE: sparse layers with a shared expert behind a sigmoid gate."""
    from ascent.models.tiny_moe import build_tiny_moe

    directory = tmp_path_factory.mktemp("tiny-qwen2-moe") / "model"
    return str(build_tiny_moe(directory, layers=2, family="qwen2_moe", seed=0))


@pytest.fixture(scope="session")
def tiny_deepseek(tmp_path_factory):
    """A tiny DeepSeek-V3 (``tests.families.models``): latent attention, a dense first
    layer, then layers routing each token to 2 of 8 experts in 4 groups (sigmoid scores, a
    correction bias) beside a shared expert."""
    from tests.families.models import build

    return str(build("deepseek_v3", tmp_path_factory.mktemp("tiny-deepseek") / "model"))


@pytest.fixture(scope="session")
def tiny_mixtral(tmp_path_factory):
    """A tiny Mixtral (``tests.families.models``): every layer routes each token to 2 of 4
    experts, with float32 router weights always renormalised."""
    from tests.families.models import build

    return str(build("mixtral", tmp_path_factory.mktemp("tiny-mixtral") / "model"))


@pytest.fixture(scope="session")
def tiny_vlm(tmp_path_factory):
    """A tiny Qwen2.5-VL (vision tower of two blocks), its tokenizer with the vision tokens
    and its image processor, saved to disk."""
    from ascent.models.tiny_vlm import build_tiny_vlm

    return str(build_tiny_vlm(tmp_path_factory.mktemp("tiny-vlm") / "model", seed=0))


@pytest.fixture(scope="session")
def tiny_qwen2_vl(tmp_path_factory):
    """The same at Qwen2-VL's design (no windowed vision attention)."""
    from ascent.models.tiny_vlm import build_tiny_vlm

    folder = tmp_path_factory.mktemp("tiny-qwen2-vl") / "model"
    return str(build_tiny_vlm(folder, family="qwen2_vl", seed=1))
