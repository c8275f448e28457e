"""Minerva's final-answer normalisation (Lewkowycz et al. 2022), as verl's ``math_dapo``
scorer applies it to both the answer and the ground truth before comparing the two strings.
In order:

1. keep what follows the last ``=``;
2. plain replacements (``REPLACEMENTS``, in order), among them dropping every space and the
   words "a " / "an ", then deleting units and filler (``REMOVED``, in order);
3. keep only the first ``$...$`` span; unwrap ``\\text{}``, ``\\textbf{}``, ``\\overline{}``
   (the first of each) and ``\\boxed{}`` (to its last ``}``);
4. brace shorthand TeX: ``\\frac12`` -> ``\\frac{1}{2}``, ``\\sqrt2`` -> ``\\sqrt{2}``;
5. drop ``$``; drop the commas of a number made of digits and commas (``1,000`` -> ``1000``);
   strip.

The lists are verl's, kept with their quirks (e.g. "sue" and "cm" are deleted anywhere) so
that scores match verl's.
"""

import re

REPLACEMENTS = (
    ("an ", ""),
    ("a ", ""),
    (".$", "$"),
    ("\\$", ""),
    ("\\ ", ""),
    (" ", ""),
    ("mbox", "text"),
    (",\\text{and}", ","),
    ("\\text{and}", ","),
    ("\\text{m}", "\\text{}"),
)
REMOVED = (
    *("square", "ways", "integers", "dollars", "mph", "inches", "hours", "km", "units"),
    *("\\ldots", "sue", "points", "feet", "minutes", "digits", "cents", "degrees", "cm"),
    *("gm", "pounds", "meters", "meals", "edges", "students", "childrentickets", "multiples"),
    *("\\text{s}", "\\text{.}", "\\text{\ns}", "\\text{}^2", "\\text{}^3", "\\text{\n}"),
    *("\\text{}", "\\mathrm{th}", "^\\circ", "^{\\circ}", "\\;", ",\\!", "{,}", '"', "\\dots"),
)


def normalize_final_answer(answer: str) -> str:
    """``answer`` in the normal form above."""
    answer = answer.split("=")[-1]
    for old, new in REPLACEMENTS:
        answer = answer.replace(old, new)
    for filler in REMOVED:
        answer = answer.replace(filler, "")
    answer = re.sub(r".*?\$(.*?)\$.*", r"$\1$", answer)
    for command in ("text", "textbf", "overline"):
        answer = re.sub(rf"\\{command}\{{(.*?)\}}", r"\1", answer)
    answer = re.sub(r"\\boxed\{(.*)\}", r"\1", answer)
    answer = re.sub(r"frac([^{])(.)", r"frac{\1}{\2}", answer)
    answer = re.sub(r"sqrt([^{])", r"sqrt{\1}", answer)
    answer = answer.replace("$", "")
    if answer.replace(",", "").isdigit():
        answer = answer.replace(",", "")
    return answer.strip()
