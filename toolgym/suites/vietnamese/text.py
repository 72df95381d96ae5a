"""Small text helpers shared by the Vietnamese tasks' datasets and graders."""

from __future__ import annotations

import unicodedata


def is_punct_or_symbol(ch: str) -> bool:
    """True for a Unicode punctuation (P*) or symbol (S*) character."""
    return unicodedata.category(ch)[0] in "PS"


def strip_punct(word: str) -> str:
    """``word`` without leading and trailing punctuation and symbols (``"(touchdown)."`` →
    ``"touchdown"``); inner ones are kept (``"Pro-Bowl"``)."""
    i, j = 0, len(word)
    while i < j and is_punct_or_symbol(word[i]):
        i += 1
    while j > i and is_punct_or_symbol(word[j - 1]):
        j -= 1
    return word[i:j]
