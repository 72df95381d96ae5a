"""Multiple-choice question answering in Vietnamese with K-shot prompts (ViLLM-Eval's exam and
reasoning tasks; Nguyen et al. 2024): ``exam_vi`` reads EXAMS (Hardalov et al. 2020), and
``xcopa_vi`` XCOPA (Ponti et al. 2020). Data is read by path, never shipped.

Each question becomes one :class:`~toolgym.records.Example`:

* ``input``: the prompt: a header, K solved questions taken from a separate split (the same
  subject first), and the question, ending with ``Đáp án:``;
* ``reference``: the key's letter;
* ``metadata``: ``options`` (letter → text), ``continuations`` (letter → the answer line a
  log-likelihood scorer scores, ``" B. text"``, written as the solved questions write it),
  ``subject``, ``shots`` (ids of the solved questions) and ``task: "choice"``.

Prompt format (one block per question, blocks separated by a blank line)::

    Sau đây là các câu hỏi trắc nghiệm (có đáp án) môn Sinh học.

    Câu hỏi: <stem>
    A. <text>
    B. <text>
    C. <text>
    D. <text>
    Đáp án: B. <text>
    ...
    Câu hỏi: <stem>
    A. ...
    Đáp án:
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolgym import DatasetError, Example
from toolgym.suites.vietnamese.answer_sheet import AnswerSheet, int_option, sample_indices

DEFAULT_SHOTS = 5

SUBJECTS_VI = {
    "Biology": "Sinh học",
    "Chemistry": "Hóa học",
    "Citizenship": "Giáo dục công dân",
    "Geography": "Địa lý",
    "History": "Lịch sử",
    "Physics": "Vật lý",
}


@dataclass(frozen=True)
class Question:
    """One multiple-choice question.

    Attributes:
        id: Unique id within its file.
        stem: The question text (everything before the options).
        options: Letter → option text, in display order.
        answer: The key's letter.
        subject: Subject or category (used for shots, headers and the report), if any.
    """

    id: str
    stem: str
    options: dict[str, str]
    answer: str
    subject: str | None = None


def answer_line(question: Question, letter: str) -> str:
    """The text after ``Đáp án:`` for ``letter``: ``" B. <option text>"``."""
    return f" {letter}. {question.options[letter]}"


def format_question(question: Question, with_answer: bool) -> str:
    """One question block: stem, lettered options and the answer line (``Đáp án:`` alone when
    ``with_answer`` is false)."""
    lines = [f"Câu hỏi: {question.stem.strip()}"]
    lines += [f"{letter}. {text.strip()}" for letter, text in question.options.items()]
    lines.append("Đáp án:" + (answer_line(question, question.answer) if with_answer else ""))
    return "\n".join(lines)


def build_prompt(question: Question, shots: list[Question], header: str) -> str:
    """The K-shot prompt: ``header``, the solved ``shots``, then ``question`` ending with
    ``Đáp án:`` (no trailing space). Blocks are separated by a blank line."""
    blocks = [header.strip()] if header.strip() else []
    blocks += [format_question(shot, with_answer=True) for shot in shots]
    blocks.append(format_question(question, with_answer=False))
    return "\n\n".join(blocks)


def select_shots(pool: list[Question], k: int, subject: str | None, exclude: set[str] = frozenset()) -> list[Question]:
    """The first ``k`` questions of ``pool`` (file order) with ``subject``, topped up with
    questions of other subjects (file order) when there are fewer; ids in ``exclude`` are
    skipped. Fixed shots per subject keep the prompt prefix shared, so it is evaluated once."""
    usable = [q for q in pool if q.id not in exclude]
    same = [q for q in usable if q.subject == subject]
    other = [q for q in usable if q.subject != subject]
    return (same + other)[:k]


def _stem_key(stem: str) -> str:
    return " ".join(stem.split()).casefold()


def _same_questions(pool: list[Question]) -> Callable[[Question], set[str]]:
    """A function from an evaluated question to the ids of the pool's questions that are that
    question (its id, or its text up to spaces and case), which its shots must leave out: a
    copy of the evaluated file given as the split of solved examples, or splits that share a
    question, would otherwise put the question's own answer in its prompt."""
    ids = {q.id for q in pool}
    by_stem: dict[str, set[str]] = {}
    for q in pool:
        by_stem.setdefault(_stem_key(q.stem), set()).add(q.id)

    def same(question: Question) -> set[str]:
        found = set(by_stem.get(_stem_key(question.stem), ()))
        if question.id in ids:
            found.add(question.id)
        return found

    return same


def _read_jsonl(path: Path) -> list[tuple[int, dict[str, Any]]]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise DatasetError(f"{path}: cannot read: {exc}") from None
    rows = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DatasetError(f"{path}:{lineno}: not valid JSON: {exc.msg}") from None
        if not isinstance(record, dict):
            raise DatasetError(f"{path}:{lineno}: expected a JSON object")
        rows.append((lineno, record))
    if not rows:
        raise DatasetError(f"{path}: no records")
    return rows


def _field(record: dict[str, Any], dotted: str, where: str, kind: type | tuple[type, ...] = str) -> Any:
    value: Any = record
    for part in dotted.split("."):
        if not isinstance(value, dict) or part not in value:
            raise DatasetError(f"{where}: missing field {dotted}")
        value = value[part]
    if not isinstance(value, kind):
        raise DatasetError(f"{where}: field {dotted} must be {getattr(kind, '__name__', kind)}, got {type(value).__name__}")
    return value


def parse_exams(path: Path) -> list[Question]:
    """Questions of an EXAMS JSONL file (``id``, ``question.stem``,
    ``question.choices[{label, text}]``, ``answerKey``, ``info.subject``).

    Raises:
        DatasetError: naming the file, line and field of an invalid record (missing field,
            duplicate label, key not among the labels, duplicate id).
    """
    questions, seen = [], set()
    for lineno, record in _read_jsonl(path):
        where = f"{path}:{lineno}"
        qid = str(_field(record, "id", where, (str, int)))
        choices = _field(record, "question.choices", where, list)
        options: dict[str, str] = {}
        for i, choice in enumerate(choices):
            label = _field(choice, "label", f"{where}: question.choices[{i}]") if isinstance(choice, dict) else None
            if label is None:
                raise DatasetError(f"{where}: question.choices[{i}] must be an object")
            label = label.strip().upper()
            if label in options:
                raise DatasetError(f"{where}: question.choices has label {label!r} twice")
            options[label] = _field(choice, "text", f"{where}: question.choices[{i}]")
        answer = _field(record, "answerKey", where).strip().upper()
        if answer not in options:
            raise DatasetError(f"{where}: answerKey {answer!r} is not among the labels {''.join(options)}")
        if qid in seen:
            raise DatasetError(f"{where}: duplicate id {qid!r}")
        seen.add(qid)
        info = record.get("info") if isinstance(record.get("info"), dict) else {}
        questions.append(
            Question(qid, _field(record, "question.stem", where), dict(sorted(options.items())), answer, info.get("subject"))
        )
    return questions


XCOPA_QUESTION = {"cause": "Nguyên nhân là gì?", "effect": "Kết quả là gì?"}


def parse_xcopa(path: Path) -> list[Question]:
    """Questions of an XCOPA JSONL file (``premise``, ``choice1``, ``choice2``, ``question``
    ``cause``/``effect``, ``label`` 0/1, ``idx``): the stem is the premise followed by
    "Nguyên nhân là gì?" (cause) or "Kết quả là gì?" (effect); options A and B; the subject is
    the question type.

    Raises:
        DatasetError: naming the file, line and field of an invalid record.
    """
    questions = []
    for lineno, record in _read_jsonl(path):
        where = f"{path}:{lineno}"
        kind = _field(record, "question", where)
        if kind not in XCOPA_QUESTION:
            raise DatasetError(f"{where}: field question must be 'cause' or 'effect', got {kind!r}")
        label = _field(record, "label", where, int)
        if label not in (0, 1):
            raise DatasetError(f"{where}: field label must be 0 or 1, got {label!r}")
        premise = _field(record, "premise", where)
        questions.append(
            Question(
                id=str(record.get("idx", lineno)),
                stem=f"{premise.strip()} {XCOPA_QUESTION[kind]}",
                options={"A": _field(record, "choice1", where), "B": _field(record, "choice2", where)},
                answer="AB"[label],
                subject=kind,
            )
        )
    return questions


class ChoiceTask(AnswerSheet):
    """K-shot multiple-choice questions read by path; see the module docstring for the prompt.

    Environment options: ``shots`` (K, default 5), ``shots_from`` (the file the solved
    questions come from; default: the sibling split given by :meth:`default_shots_file`;
    a question's shots leave out the pool's questions with its id or its text, so that a copy
    of the evaluated file never puts a question's own answer in its prompt),
    ``sample`` (evaluate N questions drawn with ``sample_seed``, default 0). Questions are
    ordered by subject so each subject's prompt prefix is shared by consecutive questions.
    A writing model stops where a next question would start.
    """

    stop_sequences = ("\nCâu hỏi:", "\n\nCâu hỏi")

    @classmethod
    def parse(cls, path: Path) -> list[Question]:
        """Read the task's native file format."""
        raise NotImplementedError

    @classmethod
    def recognises(cls, record: dict[str, Any]) -> bool:
        """True when a JSONL record is in the task's native format (else it is read as
        toolgym Examples)."""
        raise NotImplementedError

    @classmethod
    def header(cls, subject: str | None) -> str:
        """The prompt's first line for questions of ``subject``."""
        raise NotImplementedError

    @classmethod
    def default_shots_file(cls, path: Path) -> Path | None:
        """The separate split the solved examples come from by default, or ``None``."""
        return None

    @classmethod
    def load_dataset(cls, path: Path, options: dict[str, Any]) -> list[Example] | None:
        """Build K-shot examples from a native file (the benchmark's ``load_dataset``).

        Args:
            path (Path): The evaluated file (EXAMS or XCOPA JSONL, or toolgym JSONL).
            options (dict[str, Any]): Environment options: ``shots``, ``shots_from``,
                ``sample``, ``sample_seed``.

        Returns:
            list[Example] | None: The examples grouped by subject, or ``None`` for a file not
            in the task's native format (then read as toolgym examples).

        Raises:
            DatasetError: for an invalid record or option, a missing shots file, or a shots
                file that is the evaluated file itself.
        """
        path = Path(path)
        try:
            with open(path, encoding="utf-8") as fh:
                first = next((line for line in fh if line.strip()), "")
            record = json.loads(first)
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            return None  # let the generic loader report what is wrong
        if not isinstance(record, dict) or not cls.recognises(record):
            return None
        questions = cls.parse(path)
        k = int_option(options, "shots", DEFAULT_SHOTS)
        pool: list[Question] = []
        if k:
            shots_path = Path(options["shots_from"]) if options.get("shots_from") else cls.default_shots_file(path)
            if shots_path is None or not shots_path.exists():
                raise DatasetError(
                    f"{path}: no split to take {k} solved examples from "
                    f"({shots_path or 'no default'}); pass --shots-from FILE or --shots 0"
                )
            if shots_path.resolve() == path.resolve():
                raise DatasetError(f"{path}: the solved examples must come from a separate split, not the evaluated file")
            pool = cls.parse(shots_path)
        chosen = sample_indices(len(questions), options)
        if chosen is not None:
            questions = [questions[i] for i in chosen]
        order = {s: i for i, s in enumerate(dict.fromkeys(q.subject for q in questions))}
        questions = sorted(questions, key=lambda q: order[q.subject])  # stable: file order within a subject
        same = _same_questions(pool)
        return [cls.to_example(q, select_shots(pool, k or 0, q.subject, same(q))) for q in questions]

    @classmethod
    def to_example(cls, question: Question, shots: list[Question]) -> Example:
        """The :class:`Example` of one question with its solved examples."""
        return Example(
            id=question.id,
            input=build_prompt(question, shots, cls.header(question.subject)),
            reference=question.answer,
            metadata={
                "task": "choice",
                "subject": question.subject,
                "options": question.options,
                "continuations": {letter: answer_line(question, letter) for letter in question.options},
                "shots": [s.id for s in shots],
            },
        )


class ExamVi(ChoiceTask):
    """Vietnamese grade-12 exam questions (EXAMS, four options), K-shot with solved questions
    of the same subject from the dev split."""

    name = "exam_vi"

    instructions = (
        "Bạn đang làm bài thi trắc nghiệm. Hãy trả lời câu hỏi cuối cùng: viết \"Đáp án:\" "
        "rồi chữ cái của phương án đúng (A, B, C hoặc D)."
    )

    @classmethod
    def parse(cls, path: Path) -> list[Question]:
        return parse_exams(path)

    @classmethod
    def recognises(cls, record: dict[str, Any]) -> bool:
        return isinstance(record.get("question"), dict) and "answerKey" in record

    @classmethod
    def header(cls, subject: str | None) -> str:
        name = SUBJECTS_VI.get(subject or "", subject)
        topic = f" môn {name}" if name else ""
        return f"Sau đây là các câu hỏi trắc nghiệm (có đáp án){topic}."

    @classmethod
    def default_shots_file(cls, path: Path) -> Path | None:
        """``multilingual_test_vi.jsonl`` → ``multilingual_dev_vi.jsonl``."""
        if "test" not in path.name:
            return None
        return path.with_name(path.name.replace("test", "dev"))


class XcopaVi(ChoiceTask):
    """Vietnamese causal reasoning (XCOPA): a premise, "what was the cause / the effect?",
    two options; K-shot with solved questions from the validation split."""

    name = "xcopa_vi"

    instructions = (
        "Hãy trả lời câu hỏi cuối cùng: viết \"Đáp án:\" rồi chữ cái của phương án hợp lý "
        "hơn (A hoặc B)."
    )

    @classmethod
    def parse(cls, path: Path) -> list[Question]:
        return parse_xcopa(path)

    @classmethod
    def recognises(cls, record: dict[str, Any]) -> bool:
        return "premise" in record and "choice1" in record

    @classmethod
    def header(cls, subject: str | None) -> str:
        return "Sau đây là các câu hỏi về nguyên nhân và kết quả (có đáp án)."

    @classmethod
    def default_shots_file(cls, path: Path) -> Path | None:
        """``test.vi.jsonl`` → ``val.vi.jsonl``."""
        if not path.name.startswith("test"):
            return None
        return path.with_name("val" + path.name[len("test"):])
