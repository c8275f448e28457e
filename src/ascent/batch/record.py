"""The Batch record: per-sample tensors, per-sample non-tensor fields and step metadata."""

import itertools
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn, Self

import torch
from tensordict import TensorDict, TensorDictBase
from torch import Tensor

from ascent.batch import rows, storage, transport
from ascent.batch.fields import (
    Field,
    Padding,
    as_field,
    field_difference,
    key_difference,
    merge_meta,
    size_mismatch,
    widened,
)
from ascent.batch.jsonable import check_jsonable
from ascent.batch.packing import PackedTokens, pack_tokens


@dataclass(frozen=True, eq=False, repr=False)
class Batch:
    """B samples flowing between the controller and the workers.

    tensors: TensorDict with batch_size [B]; every tensor is (B, ...), e.g. input_ids (B, T),
        response_mask (B, T), scores (B,).
    non_tensors: name -> list of B per-sample values (uid, data_source, ground_truth, extras).
    meta: JSON-able dict describing the step, not the rows (e.g. step, weight_version).

    Immutable: no operation changes its input, each returns a new Batch, and the
    TensorDict is locked so fields cannot be set on it. Results may share tensor storage
    and non-tensor values with their input (``split``, slicing, ``select``, ``to`` on the
    same device share; integer/mask indexing, ``concat`` and ``repeat_interleave`` copy
    tensors), so never modify a batch's tensors or lists in place: build a new field and
    ``assign`` it.
    """

    tensors: TensorDict
    non_tensors: dict[str, list] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        tensors = self.tensors
        if not isinstance(tensors, TensorDictBase) or tensors.batch_dims != 1:
            raise TypeError("tensors must be a TensorDict with batch_size [B]")
        for name, value in tensors.items():
            if not isinstance(value, Tensor):
                raise TypeError(f"tensors[{name!r}] is a {type(value).__name__}, not a Tensor")
        size = tensors.batch_size[0]
        for name, values in self.non_tensors.items():
            if name in tensors:
                raise ValueError(f"field {name!r} is both a tensor and a non-tensor field")
            if not isinstance(values, list):
                raise TypeError(f"non_tensors[{name!r}] is a {type(values).__name__}, not a list")
            if len(values) != size:
                raise size_mismatch(name, len(values), "the tensors", size)
        if not isinstance(self.meta, dict):
            raise TypeError(f"meta must be a dict, got {type(self.meta).__name__}")
        check_jsonable(self.meta, "meta")
        locked = tensors.copy()
        locked.lock_()
        object.__setattr__(self, "tensors", locked)
        object.__setattr__(self, "non_tensors", dict(self.non_tensors))

    # construction and access

    @classmethod
    def from_dict(
        cls, fields: Mapping[str, Tensor | list | tuple], *, meta: Mapping[str, Any] | None = None
    ) -> Self:
        """Sort tensors (B, ...) into ``tensors`` and lists/tuples (length B) into
        ``non_tensors``; a ValueError names the first field whose batch size differs."""
        tensors: dict[str, Tensor] = {}
        non_tensors: dict[str, list] = {}
        first: tuple[str, int] | None = None
        for name, raw in fields.items():
            value, size = as_field(name, raw)
            if first is None:
                first = (name, size)
            elif size != first[1]:
                raise size_mismatch(name, size, f"field {first[0]!r}", first[1])
            if isinstance(value, Tensor):
                tensors[name] = value
            else:
                non_tensors[name] = value
        size = first[1] if first else 0
        return cls(TensorDict(tensors, batch_size=[size]), non_tensors, dict(meta or {}))

    def __len__(self) -> int:
        return self.tensors.batch_size[0]

    def keys(self) -> list[str]:
        """All field names: tensor fields first, then non-tensor fields."""
        return [*self.tensors.keys(), *self.non_tensors]

    def __contains__(self, key: object) -> bool:
        return key in self.non_tensors or (isinstance(key, str) and key in self.tensors)

    def __getitem__(self, key: str | rows.RowIndex) -> Field | Self:
        """``batch["name"]``: that field's tensor or list; anything else: ``index(key)``."""
        if isinstance(key, str):
            if key in self.non_tensors:
                return self.non_tensors[key]
            if key in self.tensors:
                return self.tensors[key]
            raise self._unknown(key)
        return self.index(key)

    def get(self, key: str, default: Field | None = None) -> Field | None:
        """The field ``key`` (tensor or list), or ``default`` when the batch has none."""
        if key not in self:
            return default
        return self[key]

    def __iter__(self) -> NoReturn:
        raise TypeError("a Batch is not iterable; use keys(), split() or index()")

    # row operations

    def index(self, idx: rows.RowIndex) -> Self:
        """Rows selected or reordered by a slice, an int list/array/LongTensor (negative
        counts from the end, repeats allowed) or a bool mask of length B.

        A slice with a positive step returns views of the tensors; other indices copy them.
        """
        if isinstance(idx, slice) and (idx.step is None or idx.step > 0):
            non_tensors = {k: v[idx] for k, v in self.non_tensors.items()}
            return self._new(self.tensors[idx], non_tensors, self.meta)
        if isinstance(idx, slice):
            idx = list(range(len(self)))[idx]  # torch cannot slice with a negative step
        positions = rows.row_positions(idx, len(self))
        as_list = positions.tolist()
        non_tensors = {k: [v[i] for i in as_list] for k, v in self.non_tensors.items()}
        return self._new(self.tensors[positions], non_tensors, self.meta)

    def split(self, parts: int, *, allow_uneven: bool = False) -> list[Self]:
        """``parts`` consecutive parts, one per data-parallel rank; ``concat`` undoes it.

        B % parts != 0 is a ValueError unless ``allow_uneven``; then sizes follow
        ``numpy.array_split``: the first B % parts parts get one extra row, and parts are
        empty when B < parts. Parts are views of this batch's tensors.
        """
        return self.split_sizes(rows.even_split_sizes(len(self), parts, allow_uneven=allow_uneven))

    def split_sizes(self, sizes: Sequence[int]) -> list[Self]:
        """Consecutive parts of the given sizes (>= 0, summing to B), as views."""
        rows.check_split_sizes(sizes, len(self))
        bounds = list(itertools.accumulate(sizes, initial=0))
        return [self.index(slice(a, b)) for a, b in itertools.pairwise(bounds)]

    @classmethod
    def concat(
        cls, batches: Iterable["Batch"], *, pad: Mapping[str, Padding] | None = None
    ) -> Self:
        """Rows of all batches in order. Fields must match (same keys, tensor dtypes and
        per-row shapes); meta is merged: keys are united, a key with different values
        in two batches is a ValueError naming it.

        ``pad`` names the (B, T, ...) fields whose width T may differ between the batches
        (each padded, e.g. prompts padded to the longest prompt of their own batch): every
        such field is widened to the widest with ``Padding(value, side)``, e.g.
        ``{"prompts": Padding(pad_id, "left"), "prompt_mask": Padding(0, "left")}``.
        """
        batches = list(batches)
        if not batches:
            raise ValueError("concat needs at least one batch")
        first = batches[0]
        pad = dict(pad or {})
        for i, other in enumerate(batches[1:], start=1):
            for kind, ours, theirs in (
                ("tensor", list(first.tensors.keys()), list(other.tensors.keys())),
                ("non-tensor", list(first.non_tensors), list(other.non_tensors)),
            ):
                difference = key_difference(ours, theirs)
                if difference:
                    raise ValueError(
                        f"cannot concat: batch {i} has different {kind} fields than batch 0 "
                        f"({difference})"
                    )
            for name, ref in first.tensors.items():
                value = other.tensors[name]
                width_only = name in pad and value.shape[2:] == ref.shape[2:] and value.dim() > 1
                if value.dtype != ref.dtype or (
                    value.shape[1:] != ref.shape[1:] and not width_only
                ):
                    hint = "" if value.dim() < 2 else ", or name it in pad= to widen it"
                    raise ValueError(
                        f"cannot concat field {name!r}: batch {i} has rows of shape "
                        f"{tuple(value.shape[1:])} {value.dtype}, batch 0 has "
                        f"{tuple(ref.shape[1:])} {ref.dtype}; pad or cast to match first{hint}"
                    )
        size = sum(len(b) for b in batches)
        names = list(first.tensors.keys())  # iterating a TensorDict yields rows, not keys
        tensors = {
            name: torch.cat(widened([b.tensors[name] for b in batches], pad.get(name)))
            for name in names
        }
        non_tensors = {
            name: list(itertools.chain.from_iterable(b.non_tensors[name] for b in batches))
            for name in first.non_tensors
        }
        meta = merge_meta([b.meta for b in batches])
        return cls(TensorDict(tensors, batch_size=[size]), non_tensors, meta)

    def repeat_interleave(self, repeats: int) -> Self:
        """Each row ``repeats`` times in a row (n samples per prompt): rows 0,0,1,1,... for
        repeats=2. Non-tensor fields repeat alike, so the samples of one prompt share its
        ``uid`` (the repeated non-tensor values are the same objects, not copies)."""
        if repeats < 1:
            raise ValueError(f"repeats must be >= 1, got {repeats}")
        return self.index(torch.arange(len(self)).repeat_interleave(repeats))

    def group_ids(self, key: str = "uid") -> Tensor:
        """(B,) int64 dense group index by first appearance: rows with equal ``key`` values
        share an integer, and groups are numbered 0, 1, ... in the order they first occur.

        ``key`` is a non-tensor field of hashable values (result on the CPU) or a 1-dim
        tensor field (result on its device).
        """
        values = self[key]
        if isinstance(values, list):
            first_seen: dict[Any, int] = {}
            try:
                dense = [first_seen.setdefault(v, len(first_seen)) for v in values]
            except TypeError as error:
                raise TypeError(f"group_ids({key!r}) needs hashable values: {error}") from error
            return torch.tensor(dense, dtype=torch.long)
        if values.dim() != 1:
            raise ValueError(f"group_ids({key!r}) needs a (B,) tensor, got {tuple(values.shape)}")
        _, inverse = torch.unique(values, return_inverse=True)
        # torch.unique numbers groups in sorted order; renumber them by first appearance.
        positions = torch.arange(len(values), device=values.device)
        first = torch.full_like(positions, len(values)).scatter_reduce(
            0, inverse, positions, reduce="amin"
        )
        rank = torch.empty_like(first)
        rank[first.argsort()] = torch.arange(len(first), device=values.device)
        return rank[inverse]

    # field operations

    def select(self, *keys: str) -> Self:
        """Only the named fields (in the given order), all rows, same meta."""
        self._check_known(keys)
        tensors = {k: self.tensors[k] for k in keys if k in self.tensors}
        non_tensors = {k: self.non_tensors[k] for k in keys if k in self.non_tensors}
        return self._new(self._tensordict(tensors), non_tensors, self.meta)

    def drop(self, *keys: str) -> Self:
        """All fields but the named ones."""
        self._check_known(keys)
        return self.select(*(k for k in self.keys() if k not in keys))

    def assign(self, **fields: Tensor | list | tuple) -> Self:
        """Add or replace fields: a tensor (B, ...) goes to ``tensors``, a list or tuple of
        length B to ``non_tensors`` (a replaced field may change kind)."""
        tensors = dict(self.tensors.items())
        non_tensors = dict(self.non_tensors)
        for name, raw in fields.items():
            value, size = as_field(name, raw)
            if size != len(self):
                raise size_mismatch(name, size, "the batch", len(self))
            tensors.pop(name, None)
            non_tensors.pop(name, None)
            if isinstance(value, Tensor):
                tensors[name] = value
            else:
                non_tensors[name] = value
        return self._new(self._tensordict(tensors), non_tensors, self.meta)

    def with_meta(self, **meta: Any) -> Self:
        """Same rows, with ``meta`` keys added or replaced."""
        return self._new(self.tensors, self.non_tensors, {**self.meta, **meta})

    def union(self, other: "Batch") -> Self:
        """Fields of both batches (same B). A field in both must be equal (tensors: dtype,
        shape and values; lists: ==), else a ValueError names it; meta merges as in concat."""
        if len(other) != len(self):
            raise ValueError(f"union needs equal batch sizes, got {len(self)} and {len(other)}")
        shared = [name for name in self.keys() if name in other]
        for name in shared:
            difference = field_difference(self[name], other[name])
            if difference:
                raise ValueError(
                    f"cannot union: field {name!r} differs between the batches "
                    f"({difference}); drop or rename it on one side first"
                )
        tensors = dict(self.tensors.items())
        tensors.update((k, v) for k, v in other.tensors.items() if k not in tensors)
        non_tensors = {**self.non_tensors}
        non_tensors.update((k, v) for k, v in other.non_tensors.items() if k not in non_tensors)
        meta = merge_meta([self.meta, other.meta])
        return self._new(self._tensordict(tensors), non_tensors, meta)

    # tokens, devices, comparison

    def pack(self, keys: Sequence[str], mask_key: str = "attention_mask") -> PackedTokens:
        """Pack the (B, T, ...) tensor fields ``keys`` along the (B, T) field ``mask_key``;
        see ``ascent.batch.packing``."""
        keys = [keys] if isinstance(keys, str) else list(keys)
        return pack_tokens({k: self._tensor(k) for k in keys}, self._tensor(mask_key))

    def to(self, device: torch.device | str, *, non_blocking: bool = False) -> Self:
        """The same batch with every tensor on ``device`` (shared, not copied, if already there)."""
        return self._new(
            self.tensors.to(device, non_blocking=non_blocking), self.non_tensors, self.meta
        )

    def equals(self, other: object) -> bool:
        """Same B, fields (any order), tensor dtypes, shapes and values (``torch.equal``, so
        NaN never equals NaN), lists and meta (``==``)."""
        if not isinstance(other, Batch) or len(other) != len(self):
            return False
        if sorted(self.keys()) != sorted(other.keys()) or self.meta != other.meta:
            return False
        return all(field_difference(self[k], other[k]) is None for k in self.keys())

    def __repr__(self) -> str:
        lines = [f"Batch(size={len(self)}, meta={self.meta!r}"]
        width = max((len(k) for k in self.keys()), default=0)
        for name, value in self.tensors.items():
            dtype = str(value.dtype).removeprefix("torch.")
            device = "" if value.device.type == "cpu" else f" {value.device}"
            lines.append(f"  {name:<{width}}  {tuple(value.shape)} {dtype}{device}")
        for name, values in self.non_tensors.items():
            kinds = " | ".join(sorted({type(v).__name__ for v in values}))
            lines.append(f"  {name:<{width}}  list[{kinds}]")
        return "\n".join(lines) + ")"

    # disk and transport

    def save(self, directory: str | os.PathLike, *, overwrite: bool = False) -> Path:
        """Write atomically to ``directory`` (tensors.safetensors + batch.json, no pickle);
        see ``ascent.batch.storage``. Non-tensor values and meta must be JSON-able."""
        return storage.write_batch(
            directory,
            dict(self.tensors.items()),
            self.non_tensors,
            self.meta,
            len(self),
            overwrite=overwrite,
        )

    @classmethod
    def load(cls, directory: str | os.PathLike) -> Self:
        """Read a batch written by ``save``; tensors land on the CPU."""
        stored = storage.read_batch(directory)
        tensors = TensorDict(stored.tensors, batch_size=[stored.batch_size])
        return cls(tensors, stored.non_tensors, stored.meta)

    def __reduce_ex__(self, protocol: int) -> tuple:
        # Tensor bytes travel as pickle buffers (out-of-band with protocol 5); the rest of
        # the record is small and pickles as usual. See ascent.batch.transport.
        specs, buffers = transport.tensors_to_buffers(dict(self.tensors.items()), protocol)
        return _unpickle, (len(self), specs, buffers, self.non_tensors, self.meta)

    # helpers

    def _new(self, tensors: TensorDictBase, non_tensors: dict[str, list], meta: dict) -> Self:
        return type(self)(tensors, non_tensors, meta)

    def _tensordict(self, tensors: Mapping[str, Tensor]) -> TensorDict:
        return TensorDict(dict(tensors), batch_size=[len(self)])

    def _tensor(self, key: str) -> Tensor:
        value = self[key]
        if not isinstance(value, Tensor):
            raise TypeError(f"field {key!r} is a list; a tensor field is needed here")
        return value

    def _check_known(self, keys: Iterable[str]) -> None:
        for key in keys:
            if key not in self:
                raise self._unknown(key)

    def _unknown(self, key: object) -> KeyError:
        return KeyError(f"no field {key!r} in the batch; available fields: {self.keys()}")


def _unpickle(
    size: int,
    specs: list[transport.TensorSpec],
    buffers: list[Any],
    non_tensors: dict[str, list],
    meta: dict[str, Any],
) -> Batch:
    tensors = transport.tensors_from_buffers(specs, buffers)
    return Batch(TensorDict(tensors, batch_size=[size]), non_tensors, meta)
