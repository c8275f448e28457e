"""Weights as a safetensors directory: how a refresh reaches a server in another process
(``ascent serve``'s ``/update_weights``, vLLM's ``reload_weights``).

Names are the Hugging Face checkpoint's (``model.layers.0.self_attn.q_proj.weight``), the
names every engine here loads.
"""

import os
import shutil
from collections.abc import Iterable, Iterator
from pathlib import Path

from torch import Tensor

FILE = "model.safetensors"


def write_weights(directory: str | Path, named_tensors: Iterable[tuple[str, Tensor]]) -> Path:
    """Write ``named_tensors`` to ``directory/model.safetensors`` (created, or replaced
    atomically: a reader never sees half a file). Returns the directory."""
    from safetensors.torch import save_file

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tensors = {name: t.detach().to("cpu").contiguous() for name, t in named_tensors}
    partial = directory / f".{FILE}.partial"
    save_file(tensors, str(partial), metadata={"format": "pt"})
    os.replace(partial, directory / FILE)
    return directory


def read_weights(directory: str | Path) -> Iterator[tuple[str, Tensor]]:
    """Every tensor of every ``*.safetensors`` file in ``directory``, one at a time."""
    from safetensors import safe_open

    files = sorted(Path(directory).glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(
            f"no *.safetensors file in {directory}: write the weights with "
            "ascent.rollout.weight_files.write_weights or save_pretrained"
        )
    for path in files:
        with safe_open(str(path), framework="pt") as handle:
            for name in handle.keys():  # noqa: SIM118 (safe_open is not a mapping)
                yield name, handle.get_tensor(name)


def memory_directory(model_dir: str | Path) -> str | None:
    """``/dev/shm`` when it can hold the refresh files (a refresh then costs no disk writes),
    else None (the temporary directory). Room for four times the checkpoint's safetensors: the
    trainer may write float32 where the checkpoint is bfloat16, and the old file stays until
    the new one is complete. A container's default /dev/shm (64 MiB) fails this."""
    if not os.access("/dev/shm", os.W_OK):
        return None
    checkpoint = sum(f.stat().st_size for f in Path(model_dir).glob("*.safetensors"))
    return "/dev/shm" if shutil.disk_usage("/dev/shm").free > 4 * checkpoint else None
