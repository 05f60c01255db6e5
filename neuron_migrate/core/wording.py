"""How every tool counts things in its messages."""

from __future__ import annotations


def plural(count: int, word: str) -> str:
    """`1 change`, `2 changes`."""
    return f"{count} {word}{'' if count == 1 else 's'}"
