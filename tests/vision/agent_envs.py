"""Environments whose steps return images, named by import path in the tests' configs, and
the rows and scorer that go with them."""

import base64
import io
import string

from PIL import Image

from ascent.agents.environment import Environment, Step
from tests.vision.data import png_bytes

COLOURS = {"red": (220, 30, 30), "blue": (30, 30, 220)}
BLANK = (128, 128, 128)
# Every turn ends at its first letter or digit (rollout.stop / SamplingParams.stop).
LETTERS_OR_DIGITS = list(string.ascii_letters + string.digits)


def data_url(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def colour_url(rgb: tuple[int, int, int], size: int = 56) -> str:
    buffer = io.BytesIO()
    Image.new("RGB", (size, size), rgb).save(buffer, format="PNG")
    return data_url(buffer.getvalue())


def image_part(url: str) -> dict:
    return {"type": "image_url", "image_url": {"url": url}}


class Pictures(Environment):
    """Three turns with images at several places: after the first turn a tool returns one
    picture, after the second a user sends two (of other sizes) around some text; the
    third turn ends the episode. The pictures are noise, seeded by the row."""

    def reset(self, row):
        self.turns, self.seed = 0, int(row["extra_info"]["index"])
        return list(row["prompt"])

    def picture(self, width: int, number: int) -> dict:
        return image_part(data_url(png_bytes(width, 56, seed=100 * self.seed + number)))

    def step(self, message):
        self.turns += 1
        if self.turns == 1:
            content = [self.picture(28, 1), {"type": "text", "text": "that is the plot"}]
            return Step([{"role": "tool", "content": content}])
        if self.turns == 2:
            text = {"type": "text", "text": " and "}
            content = [self.picture(56, 2), text, self.picture(84, 3), text]
            return Step([{"role": "user", "content": content}])
        return Step(done=True)


class ColourTool(Environment):
    """A tool shows a picture of one colour (the row's ``ground_truth``: red or blue) after
    the first turn; the second turn must end on a digit for red and on a letter for blue
    (reward 1, else 0). Without looking, no policy expects more than 0.5 on balanced rows."""

    blank = False

    def reset(self, row):
        self.colour, self.turns = row["reward_model"]["ground_truth"], 0
        return list(row["prompt"])

    def step(self, message):
        self.turns += 1
        if self.turns == 1:
            rgb = BLANK if self.blank else COLOURS[self.colour]
            content = [image_part(colour_url(rgb)), {"type": "text", "text": "colour?"}]
            return Step([{"role": "tool", "content": content}])
        answer = message["content"][-1:]
        wanted = str.isdigit if self.colour == "red" else str.isalpha
        return Step(reward=float(bool(answer) and wanted(answer)), done=True)


class BlankTool(ColourTool):
    """The control: the same task, the same grey picture for every row."""

    blank = True


def zero(data_source, solution_str, ground_truth, extra_info):
    """No score of its own: the environment's reward is the episode's."""
    return 0.0


def colour_rows(count: int) -> list[dict]:
    """Balanced red and blue rows in verl's schema."""
    return [
        {
            "data_source": "colour_tool",
            "prompt": [{"role": "user", "content": "show the picture"}],
            "reward_model": {"ground_truth": ["red", "blue"][i % 2]},
            "extra_info": {"index": i},
        }
        for i in range(count)
    ]
