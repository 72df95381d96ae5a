"""Typewriter environments: the paper is the state (LangChain tool-usage benchmark, "Typewriter
(1 tool)" and "Typewriter (26 tools)")."""

from __future__ import annotations

import random
import string
from collections.abc import Callable
from typing import Any, ClassVar

from toolgym.environments import Environment, ToolError, tool
from toolgym.records import Example


class _Paper(Environment):
    """Shared state of both typewriters: ``{"paper": str}``."""

    graders = ("final_state", "steps_exact", "step_ratio")
    default_levels: ClassVar[tuple[int, ...]] = (1, 2, 4, 8, 16, 32)

    def reset(self, example: Example) -> None:
        self.paper = ""

    def read_state(self) -> dict[str, Any]:
        return {"paper": self.paper}

    @classmethod
    def calls_for(cls, text: str) -> list[dict[str, Any]]:
        """The reference calls that type ``text``."""
        raise NotImplementedError

    @classmethod
    def from_langchain(cls, record: dict[str, Any], fields: dict[str, Any]) -> dict[str, Any]:
        text = record.get("state", record.get("reference", record["question"]))
        return fields | {
            "expected_state": {"paper": text},
            "expected_calls": cls.calls_for(text),
        }

    @classmethod
    def generate(cls, seed: int, per_level: int, levels: list[int] | None = None) -> list[Example]:
        """A difficulty ladder of random lowercase strings: ``per_level`` strings of each length
        in ``levels`` (default 1, 2, 4, 8, 16, 32); the length is the number of tool calls.

        About one string in four repeats a single letter (the ``aaaa`` kind), the others draw
        letters uniformly from a-z. Same seed, same examples.

        Raises:
            ValueError: for a length below 1.
        """
        levels = list(levels or cls.default_levels)
        if any(lv < 1 for lv in levels):
            raise ValueError(f"{cls.name} levels are string lengths >= 1, got {levels}")
        rng = random.Random(seed)
        examples = []
        for level in levels:
            seen: set[str] = set()
            while len(seen) < min(per_level, 26**level):
                if rng.random() < 0.25:
                    text = rng.choice(string.ascii_lowercase) * level
                else:
                    text = "".join(rng.choice(string.ascii_lowercase) for _ in range(level))
                if text in seen:
                    continue
                seen.add(text)
                calls = cls.calls_for(text)
                examples.append(
                    Example(
                        id=f"tw-len{level}-{len(seen):02d}",
                        input=text,
                        expected_steps=[c["name"] for c in calls],
                        expected_calls=calls,
                        reference=text,
                        expected_state={"paper": text},
                        metadata={"n_steps": len(text), "difficulty": level, "generator": cls.name, "seed": seed},
                    )
                )
        return examples


class Typewriter1(_Paper):
    """One tool, ``type_letter(letter)``, appends a character to the paper."""

    name = "typewriter_1"

    instructions = (
        "Repeat the given string using only the provided tool. Type one letter per call. "
        "Do not write anything else on the paper. When the string is typed, stop."
    )

    @tool
    def type_letter(self, letter: str) -> str:
        """Type one letter on the paper.

        Args:
            letter: Exactly one character to type.
        """
        if len(letter) != 1:
            raise ToolError(f"letter must be exactly one character, got {letter!r}")
        self.paper += letter
        return "OK"

    @classmethod
    def calls_for(cls, text: str) -> list[dict[str, Any]]:
        return [{"name": "type_letter", "arguments": {"letter": c}} for c in text]


def _letter_tool(paper: _Paper, letter: str) -> Callable[[], str]:
    def press() -> str:
        paper.paper += letter
        return "OK"

    press.__name__ = letter
    press.__doc__ = f'Type the letter "{letter}" on the paper.'
    return press


class Typewriter26(_Paper):
    """26 parameterless tools ``a`` … ``z``; each appends its letter to the paper."""

    name = "typewriter_26"

    instructions = (
        "Repeat the given string by using the provided tools, one tool per letter. Do not "
        "write anything else on the paper. When the string is typed, stop."
    )

    def tool_functions(self) -> dict[str, Callable]:
        return {c: _letter_tool(self, c) for c in string.ascii_lowercase}

    @classmethod
    def calls_for(cls, text: str) -> list[dict[str, Any]]:
        return [{"name": c, "arguments": {}} for c in text]
