"""Pulling the final answer out of a response."""

import re

NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def last_number(text: str) -> str | None:
    """The last number in ``text`` (commas removed), or None."""
    found = NUMBER.findall(text)
    return found[-1].replace(",", "") if found else None


# verl reads only the end of a response, where the final answer is; it also bounds the time
# a regex can spend on a long response.
TAIL_CHARS = 300
GSM8K_ANSWER = re.compile(r"#### (-?[0-9.,]+)")
ANSWER_LINE = re.compile(r"Answer\s*:\s*([^\n]+)", flags=re.IGNORECASE)


def gsm8k_answer(text: str) -> str | None:
    """verl's strict GSM8K answer: in the last 300 characters, the last ``#### `` (one space)
    followed by a run of ``-``, digits, ``.`` and ``,``; that run with commas removed, or None.

    ``$`` cannot be in the run, so verl's removal of it changes nothing: ``#### $72`` has no
    answer. The run is taken as written (``72.0`` stays ``72.0``, a final ``.`` stays)."""
    found = GSM8K_ANSWER.findall(text[-TAIL_CHARS:])
    return found[-1].replace(",", "") if found else None


def answer_line(text: str) -> str | None:
    """verl's ``math_dapo`` answer: in the last 300 characters, the text after the last
    ``Answer:`` (any case, anywhere in a line, blanks around the colon skipped, a line break
    too) up to the end of the line, or None."""
    found = ANSWER_LINE.findall(text[-TAIL_CHARS:])
    return found[-1] if found else None


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
