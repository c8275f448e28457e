"""Load causal LMs, value models, reward models and tokenizers from a local directory, the
way real checkpoints are loaded: ``from_pretrained`` on config + safetensors + tokenizer files.

Nothing is fetched from a hub: a path that is not a local directory is an error naming it.
``trust_remote_code`` stays off unless the caller asks for it (it runs code from the
checkpoint directory).
"""

from pathlib import Path

import torch
from torch import nn

from ascent.errors import InputNotFound
from ascent.vision.prompts import is_vision_language


def _local_dir(path: str | Path) -> Path:
    directory = Path(path).expanduser()
    if not (directory / "config.json").is_file():
        raise InputNotFound(
            f"no model at {str(path)!r}: expected a local directory with config.json and "
            "weights (ascent never downloads models; save one with save_pretrained first)"
        )
    return directory


def _from_pretrained(
    auto_class: type,
    directory: Path,
    config: object | None,
    dtype: torch.dtype,
    trust_remote_code: bool,
    attn_implementation: str,
) -> nn.Module:
    """``auto_class.from_pretrained`` on a local directory (``config``: an edited one, or
    None for the checkpoint's own)."""
    extra = {} if config is None else {"config": config}
    return auto_class.from_pretrained(
        directory,
        dtype=dtype,
        trust_remote_code=trust_remote_code,
        attn_implementation=attn_implementation,
        local_files_only=True,
        **extra,
    )


def _checkpoint_config(directory: Path, trust_remote_code: bool) -> object:
    """The checkpoint's own config (to edit before loading)."""
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(
        directory, trust_remote_code=trust_remote_code, local_files_only=True
    )


def load_causal_lm(
    path: str | Path,
    *,
    dtype: torch.dtype = torch.float32,
    trust_remote_code: bool = False,
    attn_implementation: str = "sdpa",
) -> nn.Module:
    """The generative model at ``path``, on the CPU, in ``dtype``: an
    ``AutoModelForCausalLM``, or for a vision-language checkpoint (one whose config has a
    ``vision_config``, e.g. Qwen2.5-VL) an ``AutoModelForImageTextToText``, which is its
    causal LM with the vision tower in front."""
    directory = _local_dir(path)
    return _from_pretrained(
        generative_auto_class(directory, trust_remote_code),
        directory,
        None,
        dtype,
        trust_remote_code,
        attn_implementation,
    )


def generative_auto_class(directory: Path, trust_remote_code: bool = False) -> type:
    """The auto class that loads the checkpoint's generative model (see load_causal_lm)."""
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    config = _checkpoint_config(directory, trust_remote_code)
    return AutoModelForImageTextToText if is_vision_language(config) else AutoModelForCausalLM


def causal_lm_from_config(config: object, *, seed: int = 0) -> nn.Module:
    """A randomly initialised causal LM from a transformers config (seeded)."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(config)


def load_value_model(
    path: str | Path,
    *,
    dtype: torch.dtype = torch.float32,
    trust_remote_code: bool = False,
    attn_implementation: str = "sdpa",
) -> nn.Module:
    """A critic: the checkpoint's transformer with a one-output token head (``score``).

    Loaded as ``AutoModelForTokenClassification`` with one label, so a causal-LM checkpoint
    gives its backbone and a freshly initialised value head (the same on every rank and
    run: a fixed seed); dropout on the head is off. A
    vision-language checkpoint gives a ``VisionValueModel`` (its backbone, vision tower
    included, and the same kind of head).
    """
    from transformers import AutoModelForTokenClassification

    directory = _local_dir(path)
    config = _checkpoint_config(directory, trust_remote_code)
    if is_vision_language(config):
        from ascent.models.value_vlm import VisionValueModel

        return VisionValueModel(
            load_causal_lm(
                directory,
                dtype=dtype,
                trust_remote_code=trust_remote_code,
                attn_implementation=attn_implementation,
            )
        )
    config.num_labels = 1
    config.classifier_dropout = 0.0
    # The fresh head from a fixed seed: every rank (and every run) starts from the same one.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return _from_pretrained(
            AutoModelForTokenClassification,
            directory,
            config,
            dtype,
            trust_remote_code,
            attn_implementation,
        )


def load_sequence_classifier(
    path: str | Path,
    *,
    pad_token_id: int | None,
    dtype: torch.dtype = torch.float32,
    trust_remote_code: bool = False,
    attn_implementation: str = "sdpa",
) -> nn.Module:
    """A reward model: ``AutoModelForSequenceClassification`` with one label, from a reward
    model's checkpoint or from a causal LM's (its backbone, and a freshly initialised score
    head); the config as ``reward_model_config`` makes it."""
    from transformers import AutoModelForSequenceClassification

    directory = _local_dir(path)
    return _from_pretrained(
        AutoModelForSequenceClassification,
        directory,
        reward_model_config(directory, pad_token_id, trust_remote_code),
        dtype,
        trust_remote_code,
        attn_implementation,
    )


def reward_model_config(
    path: str | Path, pad_token_id: int | None, trust_remote_code: bool = False
) -> object:
    """The config of a one-output sequence classifier from the checkpoint at ``path`` (a
    reward model's or a causal LM's). ``pad_token_id`` is written into it when it has none:
    transformers pools a decoder's score at the last token that is not padding, and needs
    the id to find it. A classifier with more than one label is refused."""
    config = _checkpoint_config(_local_dir(path), trust_remote_code)
    classifier = any(a.endswith("ForSequenceClassification") for a in config.architectures or [])
    if classifier and config.num_labels != 1:
        raise ValueError(
            f"{path}: a reward model has one output (a score); this checkpoint has "
            f"num_labels={config.num_labels}"
        )
    config.num_labels = 1
    if getattr(config.get_text_config(), "pad_token_id", None) is None:
        config.get_text_config().pad_token_id = pad_token_id
    return config


def load_tokenizer(path: str | Path, *, trust_remote_code: bool = False) -> object:
    """The tokenizer saved next to the model."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(
        _local_dir(path), trust_remote_code=trust_remote_code, local_files_only=True
    )
