"""Padded (B, T, ...) <-> packed (N, ...) token fields, vectorised over rows.

Valid tokens may sit anywhere in a row (left-padded prompt followed by a right-padded
response, as verl lays them out); packing keeps them in row order and, within a row, in
position order. The (B, T) mask travels with the packed values, so the padded layout is
restored exactly.
"""

from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch import Tensor

PadValue = int | float | bool | Mapping[str, int | float | bool]


@dataclass(frozen=True, eq=False)
class PackedTokens:
    """The valid tokens of some (B, T, ...) fields, concatenated sequence after sequence.

    values: name -> (N, ...) tensor, N = number of valid tokens in the whole batch.
    cu_seqlens: (B+1,) int32 cumulative sequence lengths, starting at 0 (the flash-attention
        varlen convention); a row without valid tokens is a sequence of length 0.
    position_ids: (N,) int64 position of each token inside its own sequence (0, 1, ...).
    mask: (B, T) bool, True on valid tokens; what ``unpack`` scatters back into.
    """

    values: dict[str, Tensor]
    cu_seqlens: Tensor
    position_ids: Tensor
    mask: Tensor

    @property
    def seq_lens(self) -> Tensor:
        """(B,) int32 number of valid tokens per row."""
        return self.cu_seqlens.diff()

    @property
    def max_seqlen(self) -> int:
        """Longest sequence (0 for an empty batch); a host sync on GPU tensors."""
        return int(self.seq_lens.max().item()) if self.mask.shape[0] else 0

    def unpack(self, pad_value: PadValue = 0) -> dict[str, Tensor]:
        """The values back as (B, T, ...) tensors, ``pad_value`` outside the mask."""
        return unpack_tokens(self.values, self.mask, pad_value)


def pack_tokens(values: Mapping[str, Tensor], mask: Tensor) -> PackedTokens:
    """Pack every (B, T, ...) tensor in ``values`` to (N, ...) using the (B, T) ``mask``
    (bool, or integers/floats that are all 0 or 1). Returns new tensors; inputs are untouched."""
    mask = _bool_mask(mask)
    batch, length = mask.shape
    flat = _flat_positions(mask)
    packed = {}
    for name, value in values.items():
        if value.shape[:2] != mask.shape:
            raise ValueError(
                f"cannot pack {name!r}: shape {tuple(value.shape)} does not start with the "
                f"mask shape {tuple(mask.shape)}"
            )
        packed[name] = value.reshape(batch * length, *value.shape[2:]).index_select(0, flat)
    cu_seqlens = torch.zeros(batch + 1, dtype=torch.int32, device=mask.device)
    cu_seqlens[1:] = mask.sum(dim=1).cumsum(dim=0)
    # The running count of valid tokens in a row, minus one, is each token's position.
    positions = mask.long().cumsum(dim=1) - 1
    position_ids = positions.reshape(-1).index_select(0, flat)
    return PackedTokens(packed, cu_seqlens, position_ids, mask)


def unpack_tokens(
    values: Mapping[str, Tensor], mask: Tensor, pad_value: PadValue = 0
) -> dict[str, Tensor]:
    """Scatter (N, ...) tensors back to (B, T, ...) along the (B, T) ``mask``.

    Use it for anything computed on packed tokens (e.g. per-token log-probs of a packed
    forward pass) with the mask of the ``PackedTokens`` that produced the input.
    ``pad_value`` is one value for all fields or a mapping name -> value (missing names: 0).
    """
    mask = _bool_mask(mask)
    batch, length = mask.shape
    flat = _flat_positions(mask)
    unpacked = {}
    for name, value in values.items():
        if value.shape[0] != flat.numel():
            raise ValueError(
                f"cannot unpack {name!r}: it has {value.shape[0]} tokens but the mask has "
                f"{flat.numel()} valid positions"
            )
        pad = pad_value.get(name, 0) if isinstance(pad_value, Mapping) else pad_value
        out = value.new_full((batch * length, *value.shape[1:]), pad)
        out.index_copy_(0, flat, value)
        unpacked[name] = out.reshape(batch, length, *value.shape[1:])
    return unpacked


def _bool_mask(mask: Tensor) -> Tensor:
    if mask.dim() != 2:
        raise ValueError(f"mask must be (B, T), got shape {tuple(mask.shape)}")
    if mask.dtype == torch.bool:
        return mask
    if not ((mask == 0) | (mask == 1)).all():
        raise ValueError(f"mask of dtype {mask.dtype} must hold only 0 and 1")
    return mask.bool()


def _flat_positions(mask: Tensor) -> Tensor:
    """(N,) int64 indices of the valid tokens in the flattened (B*T,) layout, row-major."""
    return mask.reshape(-1).nonzero().squeeze(1)
