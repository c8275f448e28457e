"""Rows with images in verl's schema: every form an image comes in, ``<image>`` placeholders
rendered as the model's image tokens, and bad images (truncated, empty, huge, odd modes,
extreme shapes) as malformed rows that name the row and the image, or converted by the
documented rule; SFT conversations with images."""

import base64
import io
import json
import struct
import zlib

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from ascent.data.files import MalformedRow
from ascent.data.images import row_images_for
from ascent.data.rl import RLDataConfig, load_rl_prompts, prompts_batch
from ascent.data.sft import SFTDataConfig, load_sft_examples
from ascent.errors import InputError
from ascent.models import load_tokenizer
from ascent.vision.images import decode_url
from tests.vision.data import png_bytes


@pytest.fixture(scope="module")
def vlm(tiny_vlm):
    return load_tokenizer(tiny_vlm), row_images_for(tiny_vlm)


def image_row(images, prompt="What colour is <image>?"):
    return {
        "data_source": "shapes",
        "prompt": [{"role": "user", "content": prompt}],
        "reward_model": {"ground_truth": "red"},
        "images": images,
    }


def write_parquet(path, rows):
    pq.write_table(pa.Table.from_pylist(rows), path)
    return str(path)


def load(vlm, path, **config):
    tokenizer, images = vlm
    return load_rl_prompts(
        [path], tokenizer, RLDataConfig(train_files=[path], **config), None, images
    )


def encoded(image, format="PNG"):
    buffer = io.BytesIO()
    image.save(buffer, format=format)
    return buffer.getvalue()


def with_size(png, width, height):
    """A PNG whose header claims ``width`` x ``height`` (its pixel data is a 1 x 1 image's)."""
    header = b"IHDR" + struct.pack(">II", width, height) + png[24:29]
    chunk = struct.pack(">I", 13) + header + struct.pack(">I", zlib.crc32(header))
    return png[:8] + chunk + png[33:]


def test_every_image_form_renders_as_image_tokens(vlm, tmp_path):
    (tmp_path / "pictures").mkdir()
    (tmp_path / "pictures" / "a.png").write_bytes(png_bytes(64, 64, seed=1))
    url = "data:image/png;base64," + base64.b64encode(png_bytes(64, 64, seed=2)).decode()
    rows = [
        image_row([{"bytes": png_bytes(64, 64), "path": None}]),  # datasets' Image feature
        image_row([{"bytes": None, "path": "pictures/a.png"}]),  # relative to the data file
        image_row([{"bytes": None, "path": url}]),
        image_row(
            [{"bytes": png_bytes(64, 64, seed=3), "path": None}] * 2,
            prompt="Is <image> the same as <image>?",
        ),
    ]
    path = write_parquet(tmp_path / "train.parquet", rows)
    prompts, counts = load(vlm, path)
    assert counts == {"rows": 4, "kept": 4}
    tokenizer = vlm[0]
    one = "<|vision_start|>" + "<|image_pad|>" * 4 + "<|vision_end|>"  # 64 x 64: 16 patches
    assert tokenizer.decode(prompts[0].prompt_ids).startswith(
        f"<|im_start|>user\nWhat colour is {one}?<|im_end|>\n<|im_start|>assistant\n"
    )
    assert all(len(p.images) == 1 for p in prompts[:3]) and len(prompts[3].images) == 2
    assert tokenizer.decode(prompts[3].prompt_ids).count(one) == 2
    assert (
        decode_url(prompts[1].images[0]).tobytes()
        == Image.open(tmp_path / "pictures" / "a.png").tobytes()
    )
    batch = prompts_batch(prompts, tokenizer.pad_token_id, "step0")
    assert batch["images"] == [list(p.images) for p in prompts]


def test_larger_images_take_more_tokens_up_to_the_processor_bound(vlm, tmp_path):
    sizes = [(28, 28), (64, 64), (112, 56), (1000, 1000)]
    rows = [image_row([png_bytes(w, h)]) for w, h in sizes]
    prompts, _ = load(vlm, write_parquet(tmp_path / "train.parquet", rows))
    image_token = vlm[1].image_token_id
    counts = [p.prompt_ids.count(image_token) for p in prompts]
    # min_pixels 56 x 56 lifts the smallest to 2 x 2 patches; max_pixels 112 x 112 caps at 16.
    assert counts == [4, 4, 8, 16]


BAD_IMAGES = {
    "truncated": (png_bytes(64, 64)[:-40], "cannot be decoded"),
    "not an image": (b"hello, world", "cannot be decoded"),
    "no pixels": (with_size(png_bytes(1, 1), 0, 5), "cannot be decoded|no pixels"),
    "20000 x 20000": (
        with_size(png_bytes(1, 1), 20000, 20000),
        "400000000 pixels.* over the limit",
    ),
    "60 megapixels": (with_size(png_bytes(1, 1), 10000, 6000), "60,000,000 pixels, over the limit"),
    "1 x 300": (png_bytes(300, 1), "aspect ratio must be smaller than 200"),
    "missing file": ({"bytes": None, "path": "nowhere.png"}, "does not exist"),
    "a number": (7, "an image must be bytes"),
}


@pytest.mark.parametrize("name", BAD_IMAGES)
def test_a_bad_image_is_a_malformed_row_that_names_the_row_and_the_image(vlm, tmp_path, name):
    image, message = BAD_IMAGES[name]
    path = tmp_path / "train.jsonl"
    good = image_row([png_bytes(64, 64)])
    rows = [good, image_row([png_bytes(64, 64), image], "<image> then <image>"), good]

    def jsonable(value):
        if isinstance(value, bytes):
            return "data:image/png;base64," + base64.b64encode(value).decode()
        return value

    lines = [json.dumps(r | {"images": [jsonable(i) for i in r["images"]]}) for r in rows]
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(MalformedRow, match=rf"row 1 of .*train\.jsonl: images\[1\]: .*({message})"):
        load(vlm, str(path))
    prompts, counts = load(vlm, str(path), malformed="skip")
    assert counts == {"rows": 3, "kept": 2, "skipped_malformed": 1} and len(prompts) == 2


def test_other_modes_become_rgb_with_transparency_on_white(vlm, tmp_path):
    transparent = Image.new("RGBA", (64, 64), (255, 0, 0, 0))
    transparent.putpixel((0, 0), (0, 0, 255, 255))
    cmyk = Image.new("CMYK", (64, 64), (0, 255, 255, 0))
    grey = Image.new("L", (64, 64), 128)
    palette = Image.new("P", (64, 64), 3)
    images = [encoded(transparent), encoded(cmyk, "JPEG"), encoded(grey), encoded(palette)]
    rows = [image_row([image]) for image in images]
    prompts, counts = load(vlm, write_parquet(tmp_path / "train.parquet", rows))
    assert counts["kept"] == 4
    decoded = [decode_url(p.images[0]) for p in prompts]
    assert all(image.mode == "RGB" and image.size == (64, 64) for image in decoded)
    assert decoded[0].getpixel((1, 1)) == (255, 255, 255)  # transparent: white
    assert decoded[0].getpixel((0, 0)) == (0, 0, 255)
    assert decoded[2].getpixel((5, 5)) == (128, 128, 128)


def test_placeholders_must_match_the_images(vlm, tmp_path):
    rows = [image_row([png_bytes(64, 64)], prompt="<image> and <image>?")]
    with pytest.raises(MalformedRow, match=r"row 0 .*marks 2 image\(s\) .* but the row has 1"):
        load(vlm, write_parquet(tmp_path / "a.parquet", rows))
    rows = [image_row([png_bytes(64, 64)], prompt="no placeholder")]
    with pytest.raises(MalformedRow, match=r"marks 0 image\(s\)"):
        load(vlm, write_parquet(tmp_path / "b.parquet", rows))


def test_images_for_a_text_model_stop_before_any_row_is_skipped(tiny_model, tmp_path):
    path = write_parquet(tmp_path / "train.parquet", [image_row([png_bytes(64, 64)])])
    assert row_images_for(tiny_model) is None
    config = RLDataConfig(train_files=[path], malformed="skip")
    with pytest.raises(InputError, match="not a vision-language model"):
        load_rl_prompts([path], load_tokenizer(tiny_model), config, None, None)


def test_sft_conversations_with_images(vlm, tmp_path):
    tokenizer, images = vlm
    row = {
        "messages": [
            {"role": "user", "content": "<image> What colour?"},
            {"role": "assistant", "content": "red"},
        ],
        "images": [png_bytes(64, 64)],
    }
    long_row = row | {"messages": [row["messages"][0], {"role": "assistant", "content": "r" * 80}]}
    path = write_parquet(tmp_path / "sft.parquet", [row, long_row])
    config = SFTDataConfig(train_files=[path], max_length=60)
    examples, counts = load_sft_examples([path], tokenizer, config, images)
    assert counts == {"rows": 2, "kept": 1, "dropped_overlong": 1}  # never cut through images
    (example,) = examples
    image_token = images.image_token_id
    assert example.input_ids.count(image_token) == 4 and len(example.images) == 1
    learned = [t for t, m in zip(example.input_ids, example.loss_mask, strict=True) if m]
    assert tokenizer.decode(learned) == "red<|im_end|>\n"
