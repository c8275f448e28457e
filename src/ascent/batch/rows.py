"""Row selection: split sizes and the normalisation of row indices."""

from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

RowIndex = slice | Sequence[int] | Sequence[bool] | Tensor | np.ndarray


def even_split_sizes(size: int, parts: int, *, allow_uneven: bool) -> list[int]:
    """Sizes of ``parts`` consecutive parts of ``size`` rows.

    Uneven sizes follow ``numpy.array_split``: the first ``size % parts`` parts get one extra
    row, so sizes differ by at most one and parts are empty when ``size < parts``.
    """
    if parts < 1:
        raise ValueError(f"cannot split into {parts} parts; need at least 1")
    base, extra = divmod(size, parts)
    if extra and not allow_uneven:
        raise ValueError(
            f"cannot split a batch of {size} rows into {parts} equal parts "
            f"({size} % {parts} = {extra}); pad the batch to a multiple of {parts}, "
            f"drop {extra} rows, or pass allow_uneven=True (the first {extra} parts then "
            f"get {base + 1} rows, the others {base})"
        )
    return [base + 1] * extra + [base] * (parts - extra)


def check_split_sizes(sizes: Sequence[int], size: int) -> None:
    if any(s < 0 for s in sizes):
        raise ValueError(f"split sizes must be >= 0, got {list(sizes)}")
    if sum(sizes) != size:
        raise ValueError(
            f"split sizes {list(sizes)} sum to {sum(sizes)} but the batch has {size} rows"
        )


def row_positions(idx: RowIndex, size: int) -> Tensor:
    """Row positions (K,) int64 on the CPU for an int list/array/LongTensor (negative counts
    from the end) or a bool mask of length ``size``. Slices are handled by the caller."""
    if isinstance(idx, int):
        raise TypeError(
            f"a single int ({idx}) would drop the batch dimension; use batch[[{idx}]] for a "
            "one-row batch"
        )
    positions = torch.as_tensor(idx).cpu()
    if positions.dim() != 1:
        raise IndexError(f"row index must be 1-dim, got shape {tuple(positions.shape)}")
    if positions.dtype == torch.bool:
        if positions.shape[0] != size:
            raise IndexError(
                f"bool mask has {positions.shape[0]} entries but the batch has {size} rows"
            )
        return positions.nonzero().squeeze(1)
    if positions.numel() == 0:  # [] becomes a float tensor
        return positions.long()
    if positions.is_floating_point() or positions.is_complex():
        raise TypeError(f"row index must hold ints or bools, got {positions.dtype}")
    positions = positions.long()
    bad = (positions < -size) | (positions >= size)
    if bad.any():
        raise IndexError(
            f"row index {positions[bad][0].item()} is out of range for a batch of {size} rows"
        )
    return torch.where(positions < 0, positions + size, positions)
