"""'Did you mean' for every unknown name: units, variables, presets, references."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def did_you_mean(word: str, known: Iterable[str]) -> str | None:
    close = difflib.get_close_matches(word, list(known), n=3, cutoff=0.6)
    return f"did you mean {', '.join(close)}?" if close else None


def with_suggestion(message: str, word: str, known: Iterable[str]) -> str:
    """`message; did you mean ...?`, or the message alone when nothing is close (no dangling `; `)."""
    hint = did_you_mean(word, known)
    return f"{message}; {hint}" if hint else message
