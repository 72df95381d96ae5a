"""Typewriter environments: the paper is the state (LangChain tool-usage benchmark, "Typewriter
(1 tool)" and "Typewriter (26 tools)")."""

from __future__ import annotations

import string
from collections.abc import Callable
from typing import Any

from toolgym.environments import Environment, ToolError, register_environment, tool
from toolgym.records import Example


class _Paper(Environment):
    """Shared state of both typewriters: ``{"paper": str}``."""

    graders = ("final_state", "steps_exact", "step_ratio")

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


@register_environment("typewriter_1")
class Typewriter1(_Paper):
    """One tool, ``type_letter(letter)``, appends a character to the paper."""

    instructions = (
        "Repeat the given string using only the provided tool. Type one letter per call. "
        "Do not write anything else on the paper. When the string is typed, stop."
    )
    default_dataset = "typewriter"

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


@register_environment("typewriter_26")
class Typewriter26(_Paper):
    """26 parameterless tools ``a`` … ``z``; each appends its letter to the paper."""

    instructions = (
        "Repeat the given string by using the provided tools, one tool per letter. Do not "
        "write anything else on the paper. When the string is typed, stop."
    )
    default_dataset = "typewriter"

    def tool_functions(self) -> dict[str, Callable]:
        return {c: _letter_tool(self, c) for c in string.ascii_lowercase}

    @classmethod
    def calls_for(cls, text: str) -> list[dict[str, Any]]:
        return [{"name": c, "arguments": {}} for c in text]
