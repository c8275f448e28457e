"""The vision quickstart's task: name the colour of the shape in a picture.

Each picture (56 x 56, drawn here with PIL, nothing downloaded) holds one circle, square or
triangle of one of four colours, at a random place and size (half the picture's width or
more), on a noisy grey background; the colour's shade is jittered, so no fixed pixel value
gives it away. The question is the
same for every picture ("What colour is the shape?"), so a model that does not see the
image cannot beat one answer in four. Pictures are split once (seeded) into held-out
(scored before and after RL), development (to stop the SFT warm start) and training sets.
Rows are written in verl's multimodal schema: the picture's PNG bytes in ``images`` and
``<image>`` in the prompt.
"""

import io
import random
from pathlib import Path

import numpy as np

SOURCE = "colours"
COLOURS = {
    "red": (205, 45, 40),
    "green": (45, 160, 60),
    "blue": (45, 75, 210),
    "yellow": (225, 195, 45),
}
SHAPES = ("circle", "square", "triangle")
SIZE = 56
# The shape's width in pixels, [low, high): half to four fifths of the picture. Smaller
# shapes (18-33 pixels) left the colour to one of the vision tower's four merged patches,
# and GRPO runs stalled at 50% (two colours told apart) or collapsed onto one colour.
SHAPE_SIZE = (28, 46)
QUESTION = "<image>What colour is the shape?"

Picture = tuple[int, int]  # (colour index, seed of everything else about the picture)


def split_pictures(
    seed: int, train: int = 3000, dev: int = 100, held_out: int = 200
) -> tuple[list[Picture], list[Picture], list[Picture]]:
    """Training, development and held-out pictures, each set with every colour equally often
    (so a model that always names one colour scores exactly 1/4 on the held-out set)."""
    rng = random.Random(seed)
    sets = []
    for size in (train, dev, held_out):
        pictures = [(i % len(COLOURS), rng.randrange(2**31)) for i in range(size)]
        rng.shuffle(pictures)
        sets.append(pictures)
    return sets[0], sets[1], sets[2]


def answer(picture: Picture) -> str:
    return list(COLOURS)[picture[0]]


def draw(picture: Picture) -> bytes:
    """The picture as PNG bytes."""
    from PIL import Image, ImageDraw

    colour, seed = picture
    rng = np.random.default_rng(seed)
    grey = int(rng.integers(90, 200))
    pixels = np.clip(grey + rng.normal(0, 12, (SIZE, SIZE, 3)), 0, 255).astype(np.uint8)
    image = Image.fromarray(pixels)
    fill = tuple(
        int(np.clip(c + rng.integers(-25, 26), 0, 255)) for c in list(COLOURS.values())[colour]
    )
    size = int(rng.integers(*SHAPE_SIZE))
    x, y = (int(v) for v in rng.integers(2, SIZE - size - 1, 2))
    pen = ImageDraw.Draw(image)
    shape = SHAPES[int(rng.integers(len(SHAPES)))]
    if shape == "circle":
        pen.ellipse((x, y, x + size, y + size), fill=fill)
    elif shape == "square":
        pen.rectangle((x, y, x + size, y + size), fill=fill)
    else:
        pen.polygon([(x, y + size), (x + size, y + size), (x + size // 2, y)], fill=fill)
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def row(picture: Picture, blank: bool = False) -> dict:
    """The picture's RL row (``blank``: the same question over an empty grey picture, for
    the image-blind control)."""
    image = blank_picture() if blank else draw(picture)
    return {
        "data_source": SOURCE,
        "prompt": [{"role": "user", "content": QUESTION}],
        "images": [{"bytes": image, "path": None}],
        "reward_model": {"ground_truth": answer(picture)},
    }


def blank_picture() -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (SIZE, SIZE), (145, 145, 145)).save(buffer, format="PNG")
    return buffer.getvalue()


def write_rl_rows(path: Path, pictures: list[Picture], blank: bool = False) -> str:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist([row(p, blank) for p in pictures]), path)
    return str(path)


def compute_score(
    data_source: str, solution_str: str, ground_truth: str, extra_info: dict | None = None
) -> float:
    """1 for the colour's name (surrounding space ignored), else 0."""
    return float(solution_str.strip() == ground_truth)
