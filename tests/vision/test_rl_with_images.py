"""An RL run on image prompts end to end (a tiny Qwen2.5-VL, the native engine in
process): prompts with images from a parquet file reach the engine and the actor, a
malformed image row is skipped and counted, and the training/rollout mismatch on image
rows is as small as on text."""

import io

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from ascent.trainer.rl.loop import train_rl
from ascent.trainer.run_dir import CannotStart
from tests.trainer.rl_setup import config, metric

COLOURS = {"red": (220, 30, 30), "blue": (30, 30, 220)}


def colour_png(name: str, size: int) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (size, size), COLOURS[name]).save(buffer, format="PNG")
    return buffer.getvalue()


def image_prompts(folder, rows=16):
    data = [
        {
            "data_source": "colour",
            "prompt": [{"role": "user", "content": "<image> Which colour?"}],
            "reward_model": {"ground_truth": name},
            "images": [{"bytes": colour_png(name, 56 + 28 * (i % 2)), "path": None}],
        }
        for i, name in enumerate(["red", "blue"] * (rows // 2))
    ]
    data.append(data[0] | {"images": [{"bytes": b"not an image", "path": None}]})
    path = folder / "train.parquet"
    pq.write_table(pa.Table.from_pylist(data), path)
    return path


def image_run(tiny_vlm, tmp_path, *overrides):
    """A short GRPO run's config on ``image_prompts`` (4 pictures x 4 samples a step)."""
    return config(
        tiny_vlm,
        tmp_path,
        tmp_path / "run",
        f"data.train_files=[{image_prompts(tmp_path)}]",
        "data.val_files=[]",
        "data.chat_template=true",
        "data.malformed=skip",
        "data.prompts_per_step=4",
        "rollout.samples_per_prompt=4",
        *overrides,
    )


def test_an_rl_run_on_image_prompts(tiny_vlm, tmp_path, capsys):
    train_rl(image_run(tiny_vlm, tmp_path, "trainer.total_steps=2"))
    assert "skipped_malformed': 1" in capsys.readouterr().out
    mismatch = metric(tmp_path / "run", "rollout/mismatch_kl")
    assert len(mismatch) == 2 and max(mismatch) < 1e-6
    generations = (tmp_path / "run" / "generations.jsonl").read_text()
    assert "<|image_pad|>" in generations  # the prompts the engine saw held the images


@pytest.mark.parametrize("engine", ["serve", "openai", "transformers"])
def test_an_engine_that_cannot_take_images_is_refused_before_any_worker_starts(
    tiny_vlm, tmp_path, engine
):
    run = image_run(tiny_vlm, tmp_path, f"rollout.engine={engine}")
    with pytest.raises(CannotStart, match=f"rollout.engine={engine} cannot generate from"):
        train_rl(run)
