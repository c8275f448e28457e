"""A batch on disk: one directory, two files, no pickle.

    <directory>/tensors.safetensors   every tensor, exact dtype and shape (bf16 and bool too)
    <directory>/batch.json            format version, batch size, tensor key order,
                                      non-tensor fields and meta

JSON stores tuples as lists, so a tuple in ``non_tensors`` or ``meta`` loads as a list;
NaN and infinities are written the way Python's ``json`` writes them (``NaN``,
``Infinity``) and read back exactly by it. Values JSON cannot store unchanged (numpy or
torch scalars, sets, non-str dict keys, ...) are an error at save time, naming the field
and the row.

Saving is atomic: both files are written and fsynced in a hidden sibling directory
``.<name>.tmp-<random>``, which is then renamed to ``<directory>``, so a crash never leaves
a half-written batch under that name. ``overwrite=True`` first renames the old batch aside
to ``.<name>.old-<random>`` and deletes it only once the new one is in place: after a
crash between those two renames ``<directory>`` is missing (load fails clearly) and the
old batch survives in the ``.old`` sibling. Crashes can leave these hidden siblings behind.
"""

import json
import os
import shutil
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

import safetensors.torch
from safetensors import SafetensorError
from torch import Tensor

from ascent.batch.jsonable import check_jsonable

FORMAT = "ascent.batch"
VERSION = 1
TENSORS_FILE = "tensors.safetensors"
JSON_FILE = "batch.json"


class StoredBatch(NamedTuple):
    """The parts of a loaded batch, in the order the tensors were saved."""

    tensors: dict[str, Tensor]
    non_tensors: dict[str, list]
    meta: dict[str, Any]
    batch_size: int


def write_batch(
    directory: str | os.PathLike,
    tensors: Mapping[str, Tensor],
    non_tensors: Mapping[str, list],
    meta: Mapping[str, Any],
    batch_size: int,
    *,
    overwrite: bool = False,
) -> Path:
    """Write the parts atomically to ``directory`` (see the module docstring); returns it."""
    for name, values in non_tensors.items():
        for row, value in enumerate(values):
            check_jsonable(value, f"non_tensors[{name!r}][{row}]")
    check_jsonable(dict(meta), "meta")
    header = {
        "format": FORMAT,
        "version": VERSION,
        "batch_size": batch_size,
        "tensor_keys": list(tensors),
        "non_tensors": dict(non_tensors),
        "meta": dict(meta),
    }
    text = json.dumps(header, ensure_ascii=False)

    target = Path(directory)
    if target.exists() and not overwrite:
        raise FileExistsError(f"{target} already exists; pass overwrite=True to replace it")
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.parent / f".{target.name}.tmp-{uuid.uuid4().hex}"
    staging.mkdir()
    try:
        tensors_path = staging / TENSORS_FILE
        safetensors.torch.save_file(_storable(tensors), tensors_path, metadata={"format": FORMAT})
        fsync_path(tensors_path)
        (staging / JSON_FILE).write_text(text, encoding="utf-8")
        fsync_path(staging / JSON_FILE)
        fsync_path(staging)
        _publish(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target


def read_batch(directory: str | os.PathLike) -> StoredBatch:
    """Read what ``write_batch`` wrote; a clear error naming the file if it is missing or
    corrupt."""
    source = Path(directory)
    if not source.is_dir():
        raise FileNotFoundError(f"no saved batch at {source}: the directory does not exist")
    json_path = source / JSON_FILE
    tensors_path = source / TENSORS_FILE
    for path in (json_path, tensors_path):
        if not path.is_file():
            raise FileNotFoundError(f"{path} is missing; {source} is not a complete saved batch")
    try:
        header = json.loads(json_path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"{json_path} is corrupt (not valid JSON: {error})") from error
    _check_header(header, json_path)
    try:
        loaded = safetensors.torch.load_file(tensors_path)
    except SafetensorError as error:
        raise ValueError(f"{tensors_path} is corrupt: {error}") from error
    keys = header["tensor_keys"]
    if sorted(loaded) != sorted(keys):
        raise ValueError(
            f"{tensors_path} holds tensors {sorted(loaded)} but {json_path} lists {sorted(keys)}"
        )
    tensors = {key: loaded[key] for key in keys}
    return StoredBatch(tensors, header["non_tensors"], header["meta"], header["batch_size"])


def _check_header(header: Any, json_path: Path) -> None:
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise ValueError(f"{json_path} is not an ascent batch file (no format {FORMAT!r})")
    if header.get("version") != VERSION:
        raise ValueError(
            f"{json_path} has format version {header.get('version')!r}; this version of "
            f"ascent reads version {VERSION}"
        )
    expected = {"batch_size": int, "tensor_keys": list, "non_tensors": dict, "meta": dict}
    for key, kind in expected.items():
        if not isinstance(header.get(key), kind):
            raise ValueError(f"{json_path} is corrupt: {key!r} is missing or not a {kind.__name__}")


def _storable(tensors: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """Contiguous CPU tensors; safetensors refuses two tensors sharing one storage (e.g. two
    fields viewing one buffer), so the later of such a pair is cloned."""
    out, storages = {}, set()
    for name, tensor in tensors.items():
        tensor = tensor.detach().to("cpu").contiguous()
        storage = tensor.untyped_storage().data_ptr()
        if storage in storages and tensor.numel():
            tensor = tensor.clone()
        storages.add(tensor.untyped_storage().data_ptr())
        out[name] = tensor
    return out


def _publish(staging: Path, target: Path) -> None:
    if not target.exists():
        os.rename(staging, target)
    else:
        retired = target.parent / f".{target.name}.old-{uuid.uuid4().hex}"
        os.rename(target, retired)
        try:
            os.rename(staging, target)
        except BaseException:
            os.rename(retired, target)
            raise
        shutil.rmtree(retired)
    fsync_path(target.parent)


def fsync_path(path: Path) -> None:
    """Flush a file or directory entry to the disk, so the rename publishes real bytes."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
