"""Whether a teacher can score a student's tokens: the two must share a vocabulary.

On-policy distillation hands the teacher the student's token ids, never text (re-tokenising
would score other tokens than those sampled). So every (token, id) pair of the student's
vocabulary must be the teacher's too; the teacher may have more tokens (a larger, padded
vocabulary) but not other ones. Checked before any worker starts.
"""

from typing import Any


class VocabularyMismatch(ValueError):
    """The teacher's tokenizer gives some id another token than the student's."""


def check_shared_vocabulary(student: Any, teacher: Any, teacher_name: str) -> None:
    """Raise ``VocabularyMismatch`` naming the first id whose token differs (or is missing)
    between the ``student`` and ``teacher`` tokenizers (transformers tokenizers)."""
    theirs = teacher.get_vocab()
    differing = [
        (index, token, _token_at(theirs, index))
        for token, index in student.get_vocab().items()
        if theirs.get(token) != index
    ]
    if not differing:
        return
    index, token, other = min(differing)
    raise VocabularyMismatch(
        f"teacher {teacher_name}'s tokenizer differs from the policy's at {len(differing)} "
        f"token ids, first id {index} (policy {token!r}, teacher {other!r}); on-policy "
        "distillation scores the student's token ids, so the teacher must share the "
        "student's vocabulary: use a teacher of the same tokenizer family (e.g. a larger "
        "model of the student's series)"
    )


def _token_at(vocabulary: dict[str, int], index: int) -> str | None:
    for token, position in vocabulary.items():
        if position == index:
            return token
    return None
