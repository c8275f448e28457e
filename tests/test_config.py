"""Configs: YAML plus dotted overrides, unknown keys with the nearest valid one, and every
example config in examples/ loads."""

from pathlib import Path

import pytest
import yaml

from ascent.config import ConfigError, dump_config, load_config, parse_overrides
from ascent.trainer.rl.config import RLConfig
from ascent.trainer.rl.plan import make_plan
from ascent.trainer.rm import RMConfig
from ascent.trainer.sft import SFTConfig

EXAMPLES = sorted((Path(__file__).resolve().parents[1] / "examples").glob("*.yaml"))
CONFIG_OF = {"sft": SFTConfig, "rm": RMConfig, "train": RLConfig}


def test_overrides_parse_as_yaml_values():
    tree = parse_overrides(
        ["optim.lr=3e-4", "trainer.epochs=2", "data.train_files=[a, b]", "x.y=null", "s=ppo"]
    )
    assert tree == {
        "optim": {"lr": 3e-4},
        "trainer": {"epochs": 2},
        "data": {"train_files": ["a", "b"]},
        "x": {"y": None},
        "s": "ppo",
    }
    with pytest.raises(ConfigError, match=r"key\.path=value"):
        parse_overrides(["no-equals-sign"])


def test_file_then_overrides_then_validation(tmp_path):
    file = tmp_path / "c.yaml"
    file.write_text("model: {path: /m}\ndata: {train_files: [t.jsonl]}\noptim: {lr: 0.1}\n")
    config = load_config(SFTConfig, file, ["optim.lr=0.2", "trainer.batch_size=8"])
    assert config.optim.lr == 0.2 and config.trainer.batch_size == 8 and config.model.path == "/m"
    dump_config(config, tmp_path / "resolved.yaml")
    assert load_config(SFTConfig, tmp_path / "resolved.yaml") == config


def test_errors_name_the_key_and_the_nearest_valid_one(tmp_path):
    base = ["model.path=/m", "data.train_files=[t]"]
    with pytest.raises(
        ConfigError, match=r"unknown key 'trainer.max_step'; did you mean 'trainer.max_steps'"
    ):
        load_config(SFTConfig, None, [*base, "trainer.max_step=3"])
    with pytest.raises(ConfigError, match=r"unknown key 'optimizer'; did you mean 'optim'"):
        load_config(SFTConfig, None, [*base, "optimizer.lr=3"])
    with pytest.raises(ConfigError, match=r"optim.lr: .*number"):
        load_config(SFTConfig, None, [*base, "optim.lr=fast"])
    # the parallel degrees live in one section now: the old keys say where
    rl = ["model.path=/m", "data.train_files=[t]"]
    with pytest.raises(
        ConfigError, match=r"'actor.sequence_parallel'; it moved to parallel.sequence"
    ):
        load_config(RLConfig, None, [*rl, "actor.sequence_parallel=2"])
    with pytest.raises(ConfigError, match=r"'critic.fsdp.expert_parallel'; it moved to parallel"):
        load_config(RLConfig, None, [*rl, "critic.fsdp.expert_parallel=2"])
    with pytest.raises(ConfigError, match="missing required key 'model'"):
        load_config(SFTConfig, None, ["data.train_files=[t]"])
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(SFTConfig, tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(SFTConfig, bad)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_every_example_config_loads(path):
    kind = path.stem.split("_")[0]
    assert kind in CONFIG_OF, (
        f"{path.name}: name examples <kind>_<what>.yaml, kind in {list(CONFIG_OF)}"
    )
    config = load_config(CONFIG_OF[kind], path)
    assert config.model_dump(mode="json")  # validated, every field resolved
    assert yaml.safe_load(path.read_text())  # and not empty
    if isinstance(config, RLConfig):
        make_plan(config)  # batch sizes divide, and every name is registered


def test_there_are_examples():
    assert EXAMPLES


def test_yaml_booleans_for_resume_mean_the_words():
    base = ["model.path=/m", "data.train_files=[t]"]
    assert load_config(SFTConfig, None, [*base, "trainer.resume=off"]).trainer.resume == "off"
    assert load_config(SFTConfig, None, [*base, "trainer.resume=/a/b"]).trainer.resume == "/a/b"
