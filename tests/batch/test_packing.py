import pytest
import torch

from ascent.batch import PackedTokens, pack_tokens, unpack_tokens


def reference_pack(values: torch.Tensor, mask: torch.Tensor):
    """Row by row, the obvious way: valid tokens of each row, positions 0..n-1."""
    rows = [values[i][mask[i].bool()] for i in range(mask.shape[0])]
    positions = [torch.arange(len(r)) for r in rows]
    return torch.cat(rows), torch.cat(positions), [len(r) for r in rows]


def random_mask(batch: int, length: int, gen: torch.Generator) -> torch.Tensor:
    """Left-padded prompt + right-padded response per row (verl's layout), some rows empty,
    plus holes inside the response (tool output masked out)."""
    pos = torch.arange(length)
    starts = torch.randint(0, length + 1, (batch, 1), generator=gen)
    ends = torch.randint(0, length + 1, (batch, 1), generator=gen)
    holes = torch.rand(batch, length, generator=gen) < 0.1
    mask = (pos >= starts) & (pos < ends) & ~holes
    mask[0] = False
    return mask


def test_left_and_right_padding_by_hand():
    ids = torch.tensor([[0, 0, 5, 6, 7, 0], [0, 0, 0, 0, 0, 0], [8, 9, 0, 0, 0, 0]])
    mask = ids != 0
    packed = pack_tokens({"input_ids": ids}, mask)
    assert torch.equal(packed.values["input_ids"], torch.tensor([5, 6, 7, 8, 9]))
    assert torch.equal(packed.cu_seqlens, torch.tensor([0, 3, 3, 5], dtype=torch.int32))
    assert torch.equal(packed.position_ids, torch.tensor([0, 1, 2, 0, 1]))
    assert torch.equal(packed.seq_lens, torch.tensor([3, 0, 2], dtype=torch.int32))
    assert packed.max_seqlen == 3
    assert torch.equal(packed.unpack()["input_ids"], ids)


@pytest.mark.parametrize("seed", range(5))
def test_random_masks_round_trip_exactly(seed):
    gen = torch.Generator().manual_seed(seed)
    batch, length = 7, 11
    mask = random_mask(batch, length, gen)
    values = {
        "input_ids": torch.randint(1, 1000, (batch, length), generator=gen),
        "log_probs": torch.randn(batch, length, generator=gen).bfloat16(),
        "hidden": torch.randn(batch, length, 4, generator=gen),
        "flags": torch.rand(batch, length, generator=gen) > 0.5,
    }
    packed = pack_tokens(values, mask.long())  # 0/1 integer masks work like bool ones
    for name, value in values.items():
        flat, positions, lengths = reference_pack(value, mask)
        assert torch.equal(packed.values[name], flat)
        assert packed.values[name].dtype == value.dtype
        assert torch.equal(packed.position_ids, positions)
        assert packed.cu_seqlens.dtype == torch.int32
        assert packed.cu_seqlens.tolist() == [0, *torch.tensor(lengths).cumsum(0).tolist()]

    restored = packed.unpack(pad_value={"input_ids": -1})
    for name, value in values.items():
        pad = -1 if name == "input_ids" else 0
        expected = torch.where(mask.view(batch, length, *[1] * (value.dim() - 2)), value, pad)
        assert torch.equal(restored[name], expected.to(value.dtype)), name


def test_unpack_new_values_with_the_packed_layout():
    """What a packed forward pass needs: per-token outputs back to (B, T)."""
    mask = torch.tensor([[0, 1, 1], [1, 0, 0]], dtype=torch.bool)
    packed = pack_tokens({"input_ids": torch.arange(6).view(2, 3)}, mask)
    log_probs = -torch.arange(1.0, 4.0)
    out = unpack_tokens({"log_probs": log_probs}, packed.mask, pad_value=0.0)
    assert torch.equal(out["log_probs"], torch.tensor([[0.0, -1.0, -2.0], [-3.0, 0.0, 0.0]]))


def test_all_empty_and_zero_rows():
    packed = pack_tokens({"x": torch.ones(3, 4, 2)}, torch.zeros(3, 4, dtype=torch.bool))
    assert packed.values["x"].shape == (0, 2) and packed.position_ids.shape == (0,)
    assert packed.cu_seqlens.tolist() == [0, 0, 0, 0] and packed.max_seqlen == 0
    assert torch.equal(packed.unpack(pad_value=5)["x"], torch.full((3, 4, 2), 5.0))

    none = pack_tokens({"x": torch.ones(0, 4)}, torch.zeros(0, 4, dtype=torch.bool))
    assert none.cu_seqlens.tolist() == [0] and none.max_seqlen == 0
    assert none.unpack()["x"].shape == (0, 4)


def test_errors_name_the_problem():
    mask = torch.ones(2, 3, dtype=torch.bool)
    with pytest.raises(ValueError, match=r"cannot pack 'x': shape \(2, 4\)"):
        pack_tokens({"x": torch.zeros(2, 4)}, mask)
    with pytest.raises(ValueError, match=r"mask must be \(B, T\)"):
        pack_tokens({}, torch.ones(6))
    with pytest.raises(ValueError, match="only 0 and 1"):
        pack_tokens({}, torch.full((2, 3), 2))
    with pytest.raises(ValueError, match="cannot unpack 'x': it has 5 tokens but the mask has 6"):
        unpack_tokens({"x": torch.zeros(5)}, mask)


def test_batch_pack_uses_the_attention_mask(make_batch, unchanged):
    batch = make_batch()
    with unchanged(batch):
        packed = batch.pack(["input_ids", "hidden"])
    assert isinstance(packed, PackedTokens)
    mask = batch["attention_mask"]
    assert torch.equal(packed.values["input_ids"], batch["input_ids"][mask])
    assert torch.equal(batch.pack("input_ids").values["input_ids"], batch["input_ids"][mask])
    restored = packed.unpack()
    assert torch.equal(restored["hidden"][mask], batch["hidden"][mask])
    with pytest.raises(KeyError, match="no field 'nope'"):
        batch.pack(["nope"])
    with pytest.raises(TypeError, match="'uid' is a list"):
        batch.pack(["input_ids"], mask_key="uid")
