"""Seeded difficulty-ladder generators: the common entry point behind ``toolgym generate``.

A benchmark that can generate examples declares a :class:`toolgym.Generator`; each example's
``metadata`` carries ``n_steps`` (tool calls of the reference solution) and ``difficulty`` (its
level). What a level means is the generator's own (string length, hops, tree depth).
"""

from __future__ import annotations

from toolgym.plugins import get_benchmark
from toolgym.records import Example


def parse_levels(text: str | None) -> list[int] | None:
    """Parse ``"1-8"``, ``"1,2,4"`` or ``"3"`` (mixable: ``"1-3,8"``) into sorted unique levels.

    Raises:
        ValueError: for anything else, or an empty or reversed range.
    """
    if text is None:
        return None
    levels: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        try:
            if "-" in part:
                low, high = (int(x) for x in part.split("-", 1))
                if low > high:
                    raise ValueError
                levels.update(range(low, high + 1))
            else:
                levels.add(int(part))
        except ValueError:
            raise ValueError(f"--levels: cannot read {part!r} (use e.g. 1-8 or 1,2,4)") from None
    return sorted(levels)


def generate(env: str, seed: int, per_level: int, levels: list[int] | None = None) -> list[Example]:
    """Generate a ladder for the environment named by ``env`` (a name or spec).

    Raises:
        UnknownNameError: for an unknown environment.
        ValueError: if the environment has no generator, ``per_level`` is below 1, or a level
            is invalid for it.
    """
    generator = get_benchmark(env).generator
    if per_level < 1:
        raise ValueError(f"--per-level must be at least 1, got {per_level}")
    if generator is None:
        raise ValueError(f"environment {env!r} has no generator")
    return generator.make(seed, per_level, list(levels or generator.default_levels))
