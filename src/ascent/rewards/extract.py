"""Pulling the final answer out of a response."""

import re

NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def last_number(text: str) -> str | None:
    """The last number in ``text`` (commas removed), or None."""
    found = NUMBER.findall(text)
    return found[-1].replace(",", "") if found else None


def after_hashes(text: str) -> str | None:
    """GSM8K's final answer: what follows the last ``####`` (its first number)."""
    if "####" not in text:
        return None
    return last_number(text.rsplit("####", 1)[1].split("\n")[0]) or None


def last_boxed(text: str) -> str | None:
    """The contents of the last ``\\boxed{...}`` (braces balanced), or None."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth, begin = 0, start + len("\\boxed{")
    for index in range(begin, len(text)):
        char = text[index]
        if char == "{":
            depth += 1
        elif char == "}":
            if depth == 0:
                return text[begin:index]
            depth -= 1
    return None


def same_number(a: str | None, b: str | None) -> bool:
    if a is None or b is None:
        return False
    try:
        return abs(float(a) - float(b)) < 1e-9
    except ValueError:
        return a.strip() == b.strip()
