"""`ascent doctor` on real configs, a real tiny checkpoint and a real local Ray."""

import json
import os
import shutil

import pytest
import ray
import torch
import yaml
from safetensors.torch import load_file, save_file

from ascent.doctor import run_doctor
from ascent.models.loading import load_causal_lm


def write_config(tmp_path, model_path, **sections):
    """A minimal RL config (model, one-row prompts file, run dir) plus ``sections``."""
    prompts = tmp_path / "prompts.jsonl"
    row = {"data_source": "x", "prompt": "hi", "reward_model": {"ground_truth": ""}}
    prompts.write_text(json.dumps(row) + "\n")
    config = {
        "model": {"path": str(model_path)},
        "data": {"train_files": [str(prompts)]},
        "trainer": {"run_dir": str(tmp_path / "run")},
    }
    for key, value in sections.items():
        config[key] = {**config.get(key, {}), **value}
    path = tmp_path / "rl.yaml"
    path.write_text(yaml.safe_dump(config))
    return str(path)


def doctor(config_path, overrides=(), start_ray=False):
    lines = []
    code = run_doctor(config_path, list(overrides), start_ray=start_ray, out=lines.append)
    return code, "\n".join(lines)


def copy_model(tiny_model, tmp_path):
    copy = tmp_path / "model"
    shutil.copytree(tiny_model, copy)
    return copy


def resave_weights(model_dir, edit):
    """Rewrite model.safetensors with ``edit`` applied to its tensors."""
    file = model_dir / "model.safetensors"
    tensors = load_file(str(file))
    edit(tensors)
    save_file(tensors, str(file), metadata={"format": "pt"})


def test_valid_config_passes_and_leaves_the_callers_ray_running(tmp_path, tiny_model, local_ray):
    code, output = doctor(write_config(tmp_path, tiny_model))
    print(output)
    assert code == 0, output
    assert f"torch {torch.__version__}" in output
    assert f"ok   ray: {ray.cluster_resources()['CPU']:g} CPU" in output
    assert "ok   disk: " in output and "GiB free in" in output
    parameters = sum(p.numel() for p in load_causal_lm(tiny_model).parameters())
    assert f"({parameters:,})" in output
    assert output.splitlines()[-1] == "doctor: all ok"
    assert ray.is_initialized()  # the doctor did not start this Ray, so it must not stop it


def test_more_workers_than_the_cluster_has_names_the_fields(tmp_path, tiny_model, local_ray):
    config = write_config(tmp_path, tiny_model, resources={"devices_per_node": 16})
    code, output = doctor(config)
    assert code == 1
    assert "FAIL ray resources: resources.nodes x resources.devices_per_node" in output
    assert ray.is_initialized()


def test_a_typo_key_fails_and_is_named(tmp_path, tiny_model):
    code, output = doctor(write_config(tmp_path, tiny_model, trainer={"totl_steps": 3}))
    assert code == 1
    assert "FAIL config:" in output and "trainer.totl_steps" in output
    assert "trainer.total_steps" in output  # the suggestion


def test_an_override_is_validated_too(tmp_path, tiny_model):
    code, output = doctor(write_config(tmp_path, tiny_model), ["data.prompts_per_step=0"])
    assert code == 1
    assert "data.prompts_per_step" in output


def test_a_missing_weight_is_named(tmp_path, tiny_model):
    model_dir = copy_model(tiny_model, tmp_path)
    resave_weights(model_dir, lambda tensors: tensors.pop("model.norm.weight"))
    code, output = doctor(write_config(tmp_path, model_dir))
    assert code == 1
    assert "FAIL model:" in output and "missing model.norm.weight" in output


def test_a_wrongly_shaped_weight_is_named(tmp_path, tiny_model):
    model_dir = copy_model(tiny_model, tmp_path)

    def shrink(tensors):
        tensors["lm_head.weight"] = tensors["lm_head.weight"][:10].clone()

    resave_weights(model_dir, shrink)
    code, output = doctor(write_config(tmp_path, model_dir))
    assert code == 1
    assert "wrong shape lm_head.weight (10, 64)" in output


def test_a_tied_head_may_be_absent_from_the_files(tmp_path, tiny_tied_model):
    code, output = doctor(write_config(tmp_path, tiny_tied_model))
    assert code == 0, output


def test_no_safetensors_fails(tmp_path, tiny_model):
    model_dir = copy_model(tiny_model, tmp_path)
    (model_dir / "model.safetensors").unlink()
    code, output = doctor(write_config(tmp_path, model_dir))
    assert code == 1
    assert f"no *.safetensors weights in {model_dir}" in output


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through directory permissions")
def test_a_read_only_run_dir_fails(tmp_path, tiny_model):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    try:
        config = write_config(tmp_path, tiny_model, trainer={"run_dir": str(locked / "run")})
        code, output = doctor(config)
    finally:
        locked.chmod(0o700)  # so pytest can clean up tmp_path
    assert code == 1
    assert f"FAIL run dir: {locked} is not writable" in output


def test_a_run_dir_under_a_file_fails(tmp_path, tiny_model):
    blocker = tmp_path / "blocker"
    blocker.write_text("")
    config = write_config(tmp_path, tiny_model, trainer={"run_dir": str(blocker / "run")})
    code, output = doctor(config)
    assert code == 1
    assert f"FAIL run dir: {blocker} is a file" in output


def test_without_a_config_only_the_machine_is_checked(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, output = doctor(None)
    assert code == 0, output
    assert "versions:" in output and "cpu:" in output and "torch.distributed:" in output
    assert "config:" not in output and "model:" not in output
    assert f"free in {tmp_path}" in output
