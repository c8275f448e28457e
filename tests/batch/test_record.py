import dataclasses

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from ascent.batch import Batch, Padding

# construction and access


def test_from_dict_sorts_fields_and_copies_containers(batch):
    assert len(batch) == 6
    assert list(batch.tensors.keys()) == ["input_ids", "attention_mask", "scores", "hidden"]
    assert list(batch.non_tensors) == ["uid", "data_source", "extra"]
    assert batch.keys() == [*batch.tensors.keys(), *batch.non_tensors]
    assert batch["scores"].shape == (6,) and batch["uid"][2] == "p1"
    assert "uid" in batch and "input_ids" in batch and "nope" not in batch

    uids, meta = ["a", "b"], {"step": 1}
    small = Batch.from_dict({"uid": uids, "pair": ("x", "y")}, meta=meta)
    uids.append("c")
    meta["step"] = 2
    assert small["uid"] == ["a", "b"] and small["pair"] == ["x", "y"] and small.meta == {"step": 1}


def test_from_dict_size_mismatch_names_field_and_sizes():
    with pytest.raises(
        ValueError, match=r"'uid' has batch size 3 but field 'ids' has batch size 4"
    ):
        Batch.from_dict({"ids": torch.zeros(4, 2), "uid": ["a", "b", "c"]})


@pytest.mark.parametrize(
    ("value", "error", "pattern"),
    [
        (torch.tensor(1.0), ValueError, "0-dim"),
        (np.zeros(3), TypeError, "torch.from_numpy"),
        ("abc", TypeError, "'f' is a str"),
    ],
)
def test_from_dict_rejects_non_fields(value, error, pattern):
    with pytest.raises(error, match=pattern):
        Batch.from_dict({"f": value})


def test_constructor_validates_parts():
    td = TensorDict({"x": torch.zeros(2)}, batch_size=[2])
    with pytest.raises(ValueError, match=r"'u' has batch size 1 but the tensors has batch size 2"):
        Batch(td, {"u": ["a"]})
    with pytest.raises(ValueError, match="both a tensor and a non-tensor"):
        Batch(td, {"x": ["a", "b"]})
    with pytest.raises(TypeError, match=r"non_tensors\['u'\] is a tuple"):
        Batch(td, {"u": ("a", "b")})
    with pytest.raises(TypeError, match=r"meta\['bad'\] is a set"):
        Batch(td, meta={"bad": {1}})


def test_batch_is_immutable_without_locking_the_callers_tensordict():
    td = TensorDict({"x": torch.zeros(2)}, batch_size=[2])
    batch = Batch(td)
    td["y"] = torch.ones(2)  # the caller's TensorDict stays theirs
    assert batch.keys() == ["x"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        batch.meta = {}
    with pytest.raises(RuntimeError, match="locked"):
        batch.tensors["z"] = torch.ones(2)


def test_unknown_key_lists_available_fields(batch):
    with pytest.raises(KeyError, match=r"no field 'nope'.*available fields: \['input_ids'"):
        batch["nope"]
    with pytest.raises(TypeError, match="not iterable"):
        list(batch)


def test_repr_shows_size_fields_shapes_and_dtypes(batch):
    text = repr(batch)
    assert text.startswith("Batch(size=6, meta={'step': 3, 'weight_version': 2}")
    assert "input_ids" in text and "(6, 5) int64" in text and "(6, 5, 3) bfloat16" in text
    assert "uid" in text and "list[str]" in text and "list[dict]" in text


def test_equals_compares_dtype_fields_and_meta(batch):
    assert batch.equals(batch.index(slice(None)))
    assert not batch.equals(batch.assign(scores=batch["scores"].double()))
    assert not batch.equals(batch.with_meta(step=4))
    assert not batch.equals(batch.drop("extra"))
    assert not batch.equals("not a batch")


# no operation mutates its input

OPERATIONS = {
    "index": lambda b: b.index([3, 0, 0]),
    "getitem_mask": lambda b: b[torch.arange(6) % 2 == 0],
    "slice": lambda b: b[1:4],
    "split": lambda b: b.split(4, allow_uneven=True),
    "split_sizes": lambda b: b.split_sizes([1, 0, 5]),
    "concat": lambda b: Batch.concat([b, b]),
    "select": lambda b: b.select("uid", "scores"),
    "drop": lambda b: b.drop("extra", "hidden"),
    "union": lambda b: b.union(b.select("uid").assign(new=torch.ones(6))),
    "assign": lambda b: b.assign(scores=torch.zeros(6), uid=list("abcdef")),
    "with_meta": lambda b: b.with_meta(step=9, other="x"),
    "repeat_interleave": lambda b: b.repeat_interleave(3),
    "group_ids": lambda b: b.group_ids(),
    "pack_unpack": lambda b: b.pack(["input_ids", "hidden"]).unpack(pad_value=7),
    "to": lambda b: b.to("cpu"),
    "equals": lambda b: b.equals(b),
    "repr": repr,
}


@pytest.mark.parametrize("name", OPERATIONS)
def test_operation_does_not_mutate_input(batch, unchanged, name):
    with unchanged(batch):
        OPERATIONS[name](batch)


def test_results_do_not_alias_input_containers(batch):
    for result in (batch.select("uid"), batch.split(2)[0], batch.with_meta(x=1), batch.to("cpu")):
        assert result.non_tensors is not batch.non_tensors
        assert result.tensors is not batch.tensors


# rows


def test_index_forms_agree(batch):
    expected_rows = [4, 0, 5]
    by_list = batch.index(expected_rows)
    assert torch.equal(by_list["scores"], batch["scores"][expected_rows])
    assert by_list["uid"] == [batch["uid"][i] for i in expected_rows]
    for idx in (torch.tensor(expected_rows), np.array(expected_rows), [-2, -6, -1]):
        assert batch[idx].equals(by_list)
    mask = [True, False, False, True, False, True]
    assert batch[torch.tensor(mask)].equals(batch.index([0, 3, 5]))
    assert batch[mask].equals(batch.index([0, 3, 5]))
    assert batch[::-2].equals(batch.index([5, 3, 1]))
    assert batch[1:5:2].equals(batch.index([1, 3]))
    empty = batch[[]]
    assert len(empty) == 0 and empty["input_ids"].shape == (0, 5) and empty["uid"] == []


def test_slice_is_a_view_and_gather_is_a_copy(batch):
    assert batch[2:4]["scores"].data_ptr() == batch["scores"][2:].data_ptr()
    assert batch[[2, 3]]["scores"].data_ptr() != batch["scores"][2:].data_ptr()


@pytest.mark.parametrize(
    ("idx", "error", "pattern"),
    [
        (3, TypeError, r"batch\[\[3\]\]"),
        ([0, 6], IndexError, "6 is out of range for a batch of 6"),
        ([-7], IndexError, "-7 is out of range"),
        ([True, False], IndexError, "2 entries but the batch has 6 rows"),
        (torch.tensor([0.5]), TypeError, "ints or bools"),
    ],
)
def test_bad_row_index(batch, idx, error, pattern):
    with pytest.raises(error, match=pattern):
        batch[idx]


def test_even_split_concat_round_trip(batch):
    parts = batch.split(3)
    assert [len(p) for p in parts] == [2, 2, 2]
    assert parts[1]["uid"] == batch["uid"][2:4]
    assert all(p.meta == batch.meta for p in parts)
    assert Batch.concat(parts).equals(batch)


def test_uneven_split_is_an_error_that_says_what_to_do(batch):
    with pytest.raises(ValueError, match=r"6 rows into 4 equal parts") as info:
        batch.split(4)
    message = str(info.value)
    assert "pad" in message and "drop 2 rows" in message and "allow_uneven=True" in message


@pytest.mark.parametrize(("size", "parts"), [(6, 4), (7, 3), (3, 5), (0, 2), (5, 1)])
def test_uneven_split_follows_numpy_array_split(make_batch, size, parts):
    batch = make_batch(size)
    pieces = batch.split(parts, allow_uneven=True)
    expected = [len(a) for a in np.array_split(np.arange(size), parts)]
    assert [len(p) for p in pieces] == expected
    assert Batch.concat(pieces).equals(batch)


def test_split_sizes(batch):
    pieces = batch.split_sizes([0, 1, 5])
    assert [len(p) for p in pieces] == [0, 1, 5]
    assert Batch.concat(pieces).equals(batch)
    with pytest.raises(ValueError, match=r"sum to 5 but the batch has 6 rows"):
        batch.split_sizes([2, 3])
    with pytest.raises(ValueError, match=">= 0"):
        batch.split_sizes([7, -1])
    with pytest.raises(ValueError, match="at least 1"):
        batch.split(0)


def test_repeat_interleave_keeps_samples_of_a_prompt_together(make_batch):
    prompts = make_batch(3).assign(uid=["q0", "q1", "q2"])
    samples = prompts.repeat_interleave(4)
    assert len(samples) == 12
    assert samples["uid"] == [u for u in ["q0", "q1", "q2"] for _ in range(4)]
    assert torch.equal(samples["input_ids"], prompts["input_ids"].repeat_interleave(4, dim=0))
    assert torch.equal(samples.group_ids(), torch.arange(3).repeat_interleave(4))
    assert samples.meta == prompts.meta
    assert prompts.repeat_interleave(1).equals(prompts)
    with pytest.raises(ValueError, match="repeats must be >= 1"):
        prompts.repeat_interleave(0)


def test_group_ids_by_first_appearance():
    batch = Batch.from_dict(
        {"uid": ["b", "a", "b", "c", "a"], "gid": torch.tensor([7, 3, 7, 5, 3])}
    )
    expected = torch.tensor([0, 1, 0, 2, 1])
    assert torch.equal(batch.group_ids(), expected)
    assert torch.equal(batch.group_ids("gid"), expected)
    assert batch.group_ids().dtype == torch.long
    assert Batch.from_dict({"uid": []}).group_ids().shape == (0,)
    with pytest.raises(TypeError, match="hashable"):
        Batch.from_dict({"uid": [{"a": 1}]}).group_ids()
    with pytest.raises(ValueError, match=r"needs a \(B,\) tensor"):
        Batch.from_dict({"uid": torch.zeros(2, 2)}).group_ids()


# fields


def test_select_and_drop(batch):
    chosen = batch.select("uid", "scores")
    assert set(chosen.keys()) == {"uid", "scores"} and chosen.meta == batch.meta
    assert len(batch.select()) == 6
    assert set(batch.drop("uid", "scores").keys()) == set(batch.keys()) - {"uid", "scores"}
    for op in (batch.select, batch.drop):
        with pytest.raises(KeyError, match=r"no field 'nope'.*available fields"):
            op("uid", "nope")


def test_assign_sorts_fields_and_checks_size(batch):
    out = batch.assign(advantages=torch.ones(6, 5), note=[None] * 6, uid=torch.arange(6))
    assert "advantages" in out.tensors and out["note"] == [None] * 6
    assert "uid" in out.tensors and "uid" not in out.non_tensors
    with pytest.raises(ValueError, match=r"'bad' has batch size 5 but the batch has batch size 6"):
        batch.assign(bad=torch.zeros(5))
    assert batch.with_meta(step=4, seed=1).meta == {"step": 4, "weight_version": 2, "seed": 1}


def test_union_adds_fields_and_merges_meta(batch):
    extra = Batch.from_dict(
        {"uid": list(batch["uid"]), "old_log_probs": torch.zeros(6, 5)}, meta={"step": 3, "x": 1}
    )
    merged = batch.union(extra)
    assert merged.keys() == [*batch.tensors.keys(), "old_log_probs", *batch.non_tensors]
    assert merged.meta == {"step": 3, "weight_version": 2, "x": 1}


@pytest.mark.parametrize(
    ("field", "value", "pattern"),
    [
        ("scores", lambda b: b["scores"] + 1, "values differ"),
        ("scores", lambda b: b["scores"].double(), "dtype"),
        ("input_ids", lambda b: b["input_ids"][:, :4], "shape"),
        ("uid", lambda b: list("abcdef"), "values differ"),
        ("uid", lambda b: torch.zeros(6), "list vs Tensor"),
    ],
)
def test_union_conflict_names_the_field(batch, field, value, pattern):
    other = Batch.from_dict({field: value(batch)})
    with pytest.raises(ValueError, match=rf"field '{field}' differs.*{pattern}"):
        batch.union(other)


def test_union_needs_equal_sizes_and_compatible_meta(batch):
    with pytest.raises(ValueError, match="equal batch sizes, got 6 and 2"):
        batch.union(batch[:2])
    with pytest.raises(
        ValueError, match=r"meta key 'step' conflicts: batch 0 has 3, batch 1 has 4"
    ):
        batch.union(batch.select().with_meta(step=4))


def test_concat_checks_fields_and_merges_meta(batch):
    with pytest.raises(
        ValueError, match=r"batch 2 has different tensor fields.*missing \['scores'\]"
    ):
        Batch.concat([batch, batch, batch.drop("scores")])
    with pytest.raises(ValueError, match=r"batch 1 has different non-tensor fields.*extra \['n'\]"):
        Batch.concat([batch, batch.assign(n=[0] * 6)])
    with pytest.raises(ValueError, match=r"field 'input_ids': batch 1 has rows of shape \(4,\)"):
        Batch.concat([batch, batch.assign(input_ids=batch["input_ids"][:, :4])])
    with pytest.raises(ValueError, match=r"field 'scores'.*float64"):
        Batch.concat([batch, batch.assign(scores=batch["scores"].double())])
    with pytest.raises(
        ValueError, match=r"meta key 'step' conflicts: batch 0 has 3, batch 1 has 4"
    ):
        Batch.concat([batch, batch.with_meta(step=4)])
    with pytest.raises(ValueError, match="at least one batch"):
        Batch.concat([])
    merged = Batch.concat([batch.with_meta(a=1), batch.with_meta(b=2)])
    assert merged.meta == {"step": 3, "weight_version": 2, "a": 1, "b": 2}
    assert Batch.concat([batch]).equals(batch)


def test_concat_widens_padded_fields_to_the_widest():
    """Batches padded to their own widths (prompts left-padded, responses right-padded)
    concatenate once those fields are named in ``pad``; the others must still match."""
    narrow = Batch.from_dict(
        {"prompts": torch.tensor([[7, 8]]), "mask": torch.tensor([[1, 1]]), "r": torch.ones(1, 2)}
    )
    wide = Batch.from_dict(
        {
            "prompts": torch.tensor([[0, 5, 6, 7]]),
            "mask": torch.tensor([[0, 1, 1, 1]]),
            "r": torch.ones(1, 2),
        }
    )
    with pytest.raises(ValueError, match=r"field 'prompts'.*name it in pad="):
        Batch.concat([narrow, wide])
    pad = {"prompts": Padding(0, "left"), "mask": Padding(0, "left"), "r": Padding(-1, "right")}
    merged = Batch.concat([narrow, wide], pad=pad)
    assert merged["prompts"].tolist() == [[0, 0, 7, 8], [0, 5, 6, 7]]
    assert merged["mask"].tolist() == [[0, 0, 1, 1], [0, 1, 1, 1]]
    assert merged["r"].tolist() == [[1, 1], [1, 1]]  # same width: untouched
    right = Batch.concat([wide, narrow], pad={"prompts": Padding(9, "right"), "mask": pad["mask"]})
    assert right["prompts"].tolist() == [[0, 5, 6, 7], [7, 8, 9, 9]]
    with pytest.raises(ValueError, match=r"field 'r'"):  # only the named fields may differ
        Batch.concat(
            [narrow, wide.assign(r=torch.ones(1, 3))], pad={k: pad[k] for k in ("prompts", "mask")}
        )


def test_to_returns_a_new_batch(batch):
    moved = batch.to("cpu")
    assert moved is not batch and moved.equals(batch)


@pytest.mark.gpu
def test_to_cuda_and_back(batch):
    on_gpu = batch.to("cuda")
    assert on_gpu["scores"].is_cuda and "cuda:0" in repr(on_gpu)
    assert on_gpu.split(2)[1]["uid"] == batch["uid"][3:]
    assert torch.equal(on_gpu.group_ids("scores").cpu(), batch.group_ids("scores"))
    assert on_gpu.to("cpu").equals(batch)


def test_get_returns_a_field_or_the_default(batch):
    assert torch.equal(batch.get("scores"), batch["scores"])
    assert batch.get("uid") == batch["uid"]
    assert batch.get("absent") is None and batch.get("absent", 3) == 3
