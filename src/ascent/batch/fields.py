"""Field-level rules shared by the Batch operations: sorting values, comparing, merging meta."""

from collections.abc import Mapping, Sequence
from typing import Any, Literal, NamedTuple

import torch
from torch import Tensor

Field = Tensor | list


class Padding(NamedTuple):
    """How a padded (B, T, ...) field is widened: with ``value``, on ``side`` of dim 1."""

    value: int | float
    side: Literal["left", "right"]


def as_field(name: str, value: object) -> tuple[Field, int]:
    """A field value and its batch size: a tensor (B, ...) as is, a list/tuple as a new list."""
    if isinstance(value, Tensor):
        if value.dim() == 0:
            raise ValueError(
                f"field {name!r} is a 0-dim tensor; every field needs a leading batch "
                "dimension (use value.expand(B) or put it in meta)"
            )
        return value, value.shape[0]
    if isinstance(value, list | tuple):
        return list(value), len(value)
    hint = ""
    if type(value).__module__ == "numpy":
        hint = " (torch.from_numpy for numeric arrays, .tolist() for object arrays)"
    raise TypeError(
        f"field {name!r} is a {type(value).__name__}; a field must be a torch.Tensor with a "
        f"leading batch dimension or a list with one entry per sample{hint}"
    )


def size_mismatch(name: str, size: int, other: str, other_size: int) -> ValueError:
    return ValueError(
        f"field {name!r} has batch size {size} but {other} has batch size {other_size}; "
        "every field needs exactly one entry per sample"
    )


def field_difference(a: Field, b: Field) -> str | None:
    """Why two field values differ (dtype, shape, type or values), or None when equal."""
    if isinstance(a, Tensor) and isinstance(b, Tensor):
        if a.dtype != b.dtype:
            return f"dtype {a.dtype} vs {b.dtype}"
        if a.shape != b.shape:
            return f"shape {tuple(a.shape)} vs {tuple(b.shape)}"
        # torch.equal ignores dtype and does not compare across devices.
        return None if torch.equal(a, b.to(a.device)) else "values differ"
    if isinstance(a, list) and isinstance(b, list):
        return None if a == b else "values differ"
    return f"{type(a).__name__} vs {type(b).__name__}"


def merge_meta(metas: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Union of the meta dicts; a key present in several must have equal values (==).

    A key missing from some inputs is kept: meta describes the step, not the rows, so one
    part knowing e.g. ``weight_version`` is no conflict.
    """
    merged: dict[str, Any] = {}
    origin: dict[str, int] = {}
    for i, meta in enumerate(metas):
        for key, value in meta.items():
            if key not in merged:
                merged[key] = value
                origin[key] = i
            elif merged[key] != value:
                raise ValueError(
                    f"meta key {key!r} conflicts: batch {origin[key]} has {merged[key]!r}, "
                    f"batch {i} has {value!r}; make them equal with with_meta() first"
                )
    return merged


def key_difference(reference: Sequence[str], other: Sequence[str]) -> str | None:
    """'missing [..], extra [..]' of ``other`` relative to ``reference``, or None when equal."""
    missing = [k for k in reference if k not in other]
    extra = [k for k in other if k not in reference]
    if not missing and not extra:
        return None
    return f"missing {missing}, extra {extra}"


def widened(tensors: list[Tensor], padding: Padding | None) -> list[Tensor]:
    """``tensors`` (B_k, T_k, ...) padded along dim 1 to the largest T_k (unchanged without
    ``padding``, or when the widths already agree)."""
    if padding is None or len({t.shape[1] for t in tensors}) <= 1:
        return tensors
    if padding.side not in ("left", "right"):
        raise ValueError(f"padding side must be 'left' or 'right', got {padding.side!r}")
    width = max(t.shape[1] for t in tensors)
    out = []
    for tensor in tensors:
        shape = (tensor.shape[0], width - tensor.shape[1], *tensor.shape[2:])
        filler = torch.full(shape, padding.value, dtype=tensor.dtype, device=tensor.device)
        parts = [filler, tensor] if padding.side == "left" else [tensor, filler]
        out.append(torch.cat(parts, dim=1))
    return out


def right_padded(rows: Sequence[Sequence[int]], value: int = 0) -> tuple[Tensor, Tensor]:
    """(B, L) integer rows right-padded with ``value`` (L the longest row), and the mask
    (B, L) that is 1 on each row's own entries."""
    width = max(len(row) for row in rows)
    out = torch.full((len(rows), width), value, dtype=torch.long)
    mask = torch.zeros(len(rows), width, dtype=torch.long)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(row, dtype=torch.long)
        mask[i, : len(row)] = 1
    return out, mask
