"""Image tokens in a prompt: expanded to one per image feature, and cut back to one per
image for a server that expands them itself (vLLM)."""

import pytest

from ascent.vision.images import BadImage
from ascent.vision.prompts import collapse_image_runs, expand_image_tokens

IMAGE, START, END = 9, 7, 8


def test_expanding_then_collapsing_gives_the_prompt_back():
    prompt = [1, START, IMAGE, END, 2, START, IMAGE, END, START, IMAGE, END, 3]
    expanded = expand_image_tokens(prompt, IMAGE, [4, 1, 6])
    assert expanded.count(IMAGE) == 11 and len(expanded) == len(prompt) + 8
    assert collapse_image_runs(expanded, IMAGE) == prompt
    assert collapse_image_runs([1, 2, 3], IMAGE) == [1, 2, 3]


def test_a_count_per_image_token_is_required():
    with pytest.raises(BadImage, match="renders 1 image place"):
        expand_image_tokens([1, IMAGE, 2], IMAGE, [3, 3])
