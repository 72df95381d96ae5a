"""The published result file of a JMultiWOZ-TC run: ``result_<model>.jsonl`` in the run
directory, one line per turn, appended as each turn finishes; resumable; graded at the end
into ``score_<model>.json``, ``incorrect_<model>.json`` and ``diagnostics_<model>.json``."""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Any

from toolgym.suites.jmultiwoz_tc.scoring import (
    Evaluation,
    Turn,
    evaluate,
    read_results,
    result_line,
    safe_model_name,
    write_score_files,
)
from toolgym.records import Example, Trajectory
from toolgym.runio import RunDirError

__all__ = ["ResultWriter", "check_trials", "grade_file", "turns_of"]


def turns_of(examples: list[Example]) -> dict[str, Turn]:
    """Gold turns of loaded examples, by id."""
    turns = {}
    for ex in examples:
        history = ex.input if isinstance(ex.input, list) else [{"role": "user", "content": ex.input}]
        last = next((m.get("content") for m in reversed(history) if m.get("role") == "user"), None)
        gold = tuple({"name": c.name, "arguments": c.arguments} for c in ex.expected_calls or ())
        turns[ex.id] = Turn(ex.id, ex.metadata.get("dialogue_id"), gold, last, ex.metadata.get("turn"))
    return turns


def grade_file(result: Path, turns: dict[str, Turn], slot_types: dict[str, dict[str, str]], out: Path, model: str,
               notes: list[str] | None = None) -> Evaluation:
    """Read, grade and write the score files of one result file.

    Raises:
        ResultFileError: for an unreadable, empty or invalid result file (nothing is written).
    """
    records, read_notes = read_results(result)
    evaluation = evaluate(records, turns, slot_types, [*(notes or []), *read_notes], source=str(result))
    write_score_files(out, model, evaluation)
    return evaluation


class ResultWriter:
    """Appends one published result line per finished turn (flushed at once) and grades the
    file when the run ends (see :class:`toolgym.environments.RunOutputs`).

    Args:
        out: The run directory.
        examples: The run's examples (their gold is what the file is graded against).
        model: The model spec (or agent name); sanitised for the file names.
        resume: Continue an existing result file: its data_ids are skipped; a torn last line
            left by a killed run is cut off (a complete last line without its newline gets one).
        tool_names: The tools the model was offered (other names are marked malformed).
        slot_types: ``{tool: {slot: JSON type}}`` for the lenient diagnostics.

    Raises:
        RunDirError: if the result file exists and is not empty while ``resume`` is off, or
            holds an invalid line other than a torn last one.
    """

    def __init__(self, out: Path, examples: list[Example], model: str, resume: bool,
                 tool_names: list[str], slot_types: dict[str, dict[str, str]]) -> None:
        self.out = Path(out)
        self.model = safe_model_name(model)
        self.path = self.out / f"result_{self.model}.jsonl"
        self.examples = examples
        self.tool_names = tool_names
        self.slot_types = slot_types
        self._dialogues = {ex.id: ex.metadata.get("dialogue_id") for ex in examples}
        self._done: set[str] = set()
        if self.path.exists() and self.path.stat().st_size:
            if not resume:
                raise RunDirError(f"{self.path} already exists; pass --resume to continue it or choose another --out")
            self._done = self._prepare_resume()
        self._fh = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - closed by close()

    def _prepare_resume(self) -> set[str]:
        data = self.path.read_bytes()
        lines = data.split(b"\n")
        done: set[str] = set()
        for lineno, raw in enumerate(lines, 1):
            if not raw.strip():
                continue
            last = lineno == len(lines)
            try:
                rec = json.loads(raw)
                data_id = rec.get("data_id", rec.get("id")) if isinstance(rec, dict) else None
                if data_id is None:
                    raise ValueError("record without 'data_id'")
            except (ValueError, UnicodeDecodeError) as exc:
                if last:  # a write torn by kill -9: never a complete record
                    warnings.warn(f"{self.path}:{lineno}: cut off a torn last line ({len(raw)} bytes)", stacklevel=3)
                    with open(self.path, "r+b") as fh:
                        fh.truncate(len(data) - len(raw))
                    break
                raise RunDirError(f"{self.path}:{lineno}: cannot resume: invalid line ({exc})") from None
            if last:  # complete, but without its newline
                with open(self.path, "ab") as fh:
                    fh.write(b"\n")
            done.add(str(data_id))
        return done

    def done_ids(self) -> set[str]:
        """data_ids already in the result file."""
        return set(self._done)

    def write(self, trajectory: Trajectory) -> None:
        """Append the turn's result line and flush it."""
        record = result_line(trajectory, self._dialogues.get(trajectory.example_id), self.tool_names)
        self._fh.write(json.dumps(record, ensure_ascii=False) + "\n")
        self._fh.flush()

    def close(self) -> None:
        """Close the result file."""
        if not self._fh.closed:
            self._fh.close()

    def finish(self) -> None:
        """Put the result lines in dataset order (lines are kept byte for byte; ids unknown to
        the dataset keep their order at the end), then write the score files.

        The rewrite goes through a temporary file, so an interruption leaves the appended file.
        """
        self.close()
        self._sort_in_dataset_order()
        grade_file(self.path, turns_of(self.examples), self.slot_types, self.out, self.model)

    def _sort_in_dataset_order(self) -> None:
        order = {ex.id: i for i, ex in enumerate(self.examples)}
        lines = [line for line in self.path.read_bytes().split(b"\n") if line.strip()]
        if not lines:
            return
        keyed = []
        for i, line in enumerate(lines):
            try:
                rec: Any = json.loads(line)
                data_id = str(rec.get("data_id", rec.get("id")))
            except (ValueError, AttributeError):
                return  # leave an unexpected file untouched; grading will name the line
            keyed.append((order.get(data_id, len(order)), i, line))
        keyed.sort()
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_bytes(b"".join(line + b"\n" for _, _, line in keyed))
        os.replace(tmp, self.path)


def check_trials(trials: int) -> None:
    """The published format has one line per turn.

    Raises:
        ValueError: when ``trials`` is not 1.
    """
    if trials != 1:
        raise ValueError(f"jmultiwoz_tc writes one result line per turn; --trials must be 1 (got {trials})")

