"""The family registry: every family module is registered and found by a checkpoint's
``model_type``; a model no family covers is refused by the native engine with the engines
that run it; what a family declares (sliding windows, per-layer rotations, soft-caps) is
what transformers computes, and leaving it out would change the tokens."""

import dataclasses
import importlib
import pkgutil

import pytest
import torch

import ascent.models.families as families
from ascent.models import load_causal_lm
from ascent.models.families import FAMILIES, NoNativeFamily, family_of, native_family
from ascent.models.families.attention import AttentionKernel
from ascent.models.loading import causal_lm_from_config
from ascent.rollout import EngineLimits, NativeEngine, SamplingParams
from tests.families.models import CONFIGS, NAMES
from tests.families.test_exactness import PROMPTS, engine_for
from tests.rollout.test_native_engine import hf_greedy

GREEDY = SamplingParams(temperature=0, max_new_tokens=12)


def test_every_family_module_is_registered_once():
    modules = [
        importlib.import_module(f"{families.__name__}.{info.name}")
        for info in pkgutil.iter_modules(families.__path__)
    ]
    declared = [module.FAMILY for module in modules if hasattr(module, "FAMILY")]
    assert sorted(f.name for f in declared) == sorted(f.name for f in FAMILIES)
    model_types = [kind for family in FAMILIES for kind in family.model_types]
    assert len(model_types) == len(set(model_types)), "a model_type in two families"


@pytest.mark.parametrize("name", NAMES)
def test_each_case_is_found_by_its_checkpoints_model_type(family_checkpoint, name):
    model = load_causal_lm(family_checkpoint(name))
    assert family_of(model) is native_family(model.config) is family_of(model.config.model_type)
    assert family_of(model).read is not None


def test_a_model_no_family_covers_names_the_engines_that_run_it():
    from transformers import GPT2Config

    model = causal_lm_from_config(GPT2Config(n_layer=1, n_embd=32, n_head=2))
    assert family_of(model).read is None  # trained as any transformers model
    with pytest.raises(NoNativeFamily) as error:
        native_family(model)
    message = str(error.value)
    assert "model_type 'gpt2' (GPT2LMHeadModel)" in message
    assert "rollout.engine=transformers or vllm" in message and "gemma3_text" in message


def test_what_the_native_engine_does_not_run_is_refused_naming_the_field():
    config = CONFIGS["gemma3"]()
    config.attn_logit_softcapping = 50.0
    model = causal_lm_from_config(config)
    with pytest.raises(ValueError, match=r"attn_logit_softcapping=50\.0 is not run"):
        NativeEngine(model, EngineLimits(max_num_seqs=2, max_model_len=64))


@pytest.mark.parametrize(("name", "windows"), [("gemma3", [8, None, 8]), ("mistral", [8, 8])])
def test_sliding_windows_are_read_per_layer_and_matter(family_checkpoint, name, windows):
    """The windows are transformers' per layer; an engine that dropped them attends past
    them and gives other tokens for a prompt longer than the window."""
    path = family_checkpoint(name)
    engine = engine_for(path)
    assert [layer.attention.kernel.window for layer in engine.runner.layers] == windows
    model = load_causal_lm(path).eval()
    expected = hf_greedy(model, PROMPTS[3], 12)
    assert engine.generate([PROMPTS[3]], GREEDY)[0].token_ids == expected
    unwindowed = engine_for(path)
    layers = unwindowed.runner.layers
    for index, layer in enumerate(layers):
        kernel = AttentionKernel(layer.attention.kernel.scale, None)
        layers[index] = dataclasses.replace(
            layer, attention=dataclasses.replace(layer.attention, kernel=kernel)
        )
    assert unwindowed.generate([PROMPTS[3]], GREEDY)[0].token_ids != expected


def test_gemma3_rotates_each_layer_kind_with_its_own_base_and_caps_its_logits(family_checkpoint):
    model = load_causal_lm(family_checkpoint("gemma3")).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(300)  # logits far past the cap of 30 (tied: embeddings too)
    runner = NativeEngine(model, EngineLimits(max_num_seqs=2, max_model_len=64)).runner
    kinds = [layer.attention.rotation for layer in runner.layers]
    assert kinds == ["sliding_attention", "full_attention", "sliding_attention"]
    ids = torch.tensor([PROMPTS[3]])
    rotations = runner.decoder.rotary(runner.decoder.embed(ids), torch.arange(ids.shape[1])[None])
    local, wide = rotations["sliding_attention"], rotations["full_attention"]
    assert not torch.allclose(local.cos, wide.cos)  # RoPE bases 10k and 1M
    with torch.no_grad():
        theirs = model(ids).logits[0]
    ours = runner.logits(runner.teacher_forced(ids[0]))
    assert 29.0 < theirs.abs().max() <= 30.0
    torch.testing.assert_close(ours, theirs, atol=1e-4, rtol=1e-5)


def test_the_guide_names_every_family_and_what_each_engine_declares():
    from pathlib import Path

    from ascent.rollout.backends import BACKENDS
    from ascent.rollout.protocol import Capability

    page = (Path(__file__).parents[2] / "docs/guides/model-families.md").read_text()
    for family in FAMILIES:
        row = next(line for line in page.splitlines() if line.startswith(f"| `{family.name}` |"))
        assert all(f"`{kind}`" in row for kind in family.model_types), family.name
    header = next(line for line in page.splitlines() if line.startswith("| engine |"))
    columns = [cell.strip() for cell in header.strip("|").split("|")]
    for name, backend in BACKENDS.items():
        row = next(line for line in page.splitlines() if line.startswith(f"| {name} |"))
        cells = dict(zip(columns, (c.strip() for c in row.strip("|").split("|")), strict=True))
        for capability in columns[1:-1]:
            declared = Capability(capability) in backend.capabilities
            assert (cells[capability] == "yes") == declared, (name, capability)
        families_only = backend.refuses_model("gpt2") is not None
        assert cells["models"] == ("native families" if families_only else "any"), name
