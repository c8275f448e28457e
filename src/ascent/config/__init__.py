"""Configs from YAML files plus dotted command-line overrides, validated by pydantic.

    config = load_config(SFTConfig, "sft.yaml", ["optim.lr=3e-4", "trainer.max_steps=50"])

Unknown keys are errors that name the closest valid key; every value is type-checked; the
resolved config is written back to YAML in the run directory (``dump_config``).
"""

from ascent.config.loader import ConfigError, dump_config, load_config, parse_overrides

__all__ = ["ConfigError", "dump_config", "load_config", "parse_overrides"]
