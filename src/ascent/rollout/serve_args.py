"""``ascent serve``'s engine flags, generated from ``EngineSettings``: names, types, choices,
defaults and help come from the fields' declarations, so the server's command line, the
command the ``serve`` rollout backend builds (``SERVE_KNOBS.args``) and the settings the
server parses back (``settings_from_args``) cannot disagree. Also the environment variables
the server takes its keys from, which the backend sets for a server it starts and reads for
one it is given (``ascent.serve.access`` says what each key guards)."""

import argparse
from typing import Literal, get_args, get_origin

from ascent.rollout.engine_settings import (
    TRAINING_ONLY,
    CommandKnobs,
    EngineSettings,
    Flag,
    setting_field,
)

# ``ascent serve``'s keys when --api-key / --admin-token are not given.
API_KEY_ENV = "ASCENT_API_KEY"
ADMIN_TOKEN_ENV = "ASCENT_ADMIN_TOKEN"

SERVE_KNOBS = CommandKnobs(
    flags={
        "model.path": Flag("model_dir"),
        "model.trust_remote_code": Flag("--trust-remote-code"),
        "model.attn_implementation": Flag("--attn-implementation"),
        "max_num_seqs": Flag("--max-num-seqs"),
        "max_model_len": Flag("--max-model-len"),
        "kv_cache_bytes": Flag("--kv-cache-bytes"),
        "dtype": Flag("--dtype"),
        "cuda_graphs": Flag("--cuda-graphs"),
    },
    not_applicable=TRAINING_ONLY,
)


def _dest(name: str) -> str:
    return name.replace(".", "__")


def _argument(flag: Flag, name: str) -> dict:
    """``add_argument``'s keywords for setting ``name``, from its declaration."""
    field = setting_field(name)
    described = (field.description or "").replace("%", "%%")
    if not flag.name.startswith("--"):
        return {"help": described}
    kind = field.annotation
    help_ = f"{described} (default: {field.default})"
    options = {"dest": _dest(name), "default": field.default, "help": help_}
    if kind is bool:
        return {**options, "action": argparse.BooleanOptionalAction}
    if get_origin(kind) is Literal:
        return {**options, "choices": list(get_args(kind))}
    options["metavar"] = name.rsplit(".", 1)[-1].upper()
    # int, str, or one of them | None
    return {**options, "type": next(t for t in get_args(kind) or (kind,) if t is not type(None))}


def add_engine_arguments(parser: argparse.ArgumentParser) -> None:
    """One argument per applicable setting (``SERVE_KNOBS``); a bool gets --x and --no-x."""
    for name, flag in SERVE_KNOBS.flags.items():
        parser.add_argument(flag.name, **_argument(flag, name))


def settings_from_args(args: argparse.Namespace) -> EngineSettings:
    """The ``EngineSettings`` a parsed ``ascent serve`` command line gives."""
    values: dict = {}
    for name, flag in SERVE_KNOBS.flags.items():
        dest = flag.name if not flag.name.startswith("--") else _dest(name)
        *parents, leaf = name.split(".")
        node = values
        for parent in parents:
            node = node.setdefault(parent, {})
        node[leaf] = getattr(args, dest)
    return EngineSettings.model_validate(values)
