"""``lambada_vi``: predict the last word of a Vietnamese Wikipedia paragraph (a LAMBADA-style
task, Paperno et al. 2016), built here from the XQuAD Vietnamese paragraphs (Artetxe et al.
2020) read by path. The construction rules and counts are in
``toolgym/suites/vietnamese/datasets/lambada_vi/README.md``; :func:`build_lambada` is the construction.
"""

from __future__ import annotations

import json
import unicodedata
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolgym import DatasetError, Example
from toolgym.suites.vietnamese.answer_sheet import AnswerSheet, sample_indices
from toolgym.suites.vietnamese.text import is_punct_or_symbol, strip_punct

WORD_JOINERS = "-'’"


@dataclass(frozen=True)
class LastWordItem:
    """One paragraph split into context and target.

    Attributes:
        id: ``<article title>/<paragraph index>``.
        context: The paragraph up to the target word, without the trailing space.
        target: The last word (its surrounding punctuation removed).
        continuation: The text scored after the context: ``" " + target``, or ``target`` alone
            when the context ends with an opening bracket or quote.
    """

    id: str
    context: str
    target: str
    continuation: str


@dataclass
class Construction:
    """Result of :func:`build_lambada`: the kept items and why the others were dropped."""

    items: list[LastWordItem] = field(default_factory=list)
    dropped: Counter = field(default_factory=Counter)
    n_paragraphs: int = 0


def split_last_word(paragraph: str) -> LastWordItem | str:
    """Split a paragraph into context and last word, or say why it is not usable.

    Rules (in order): the text is NFC-normalised and stripped; the last whitespace-separated
    token with its leading and trailing punctuation/symbols removed is the target. Vietnamese
    puts a space between syllables, so the target is the paragraph's last syllable-word.

    Returns:
        A :class:`LastWordItem` with an empty ``id``, or the reason to drop the paragraph:
        ``"punctuation"`` (the token has no letter or digit), ``"number"`` (the target contains
        a digit), ``"not a word"`` (characters other than letters, combining marks and inner
        ``-'’``, e.g. a URL or ``U.S.A``), ``"no context"`` (a one-word paragraph).
    """
    text = unicodedata.normalize("NFC", paragraph).strip()
    tokens = text.split()
    if not tokens:
        return "no context"
    token = tokens[-1]
    target = strip_punct(token)
    if not target:
        return "punctuation"
    if any(ch.isdigit() for ch in target):
        return "number"
    body = target.strip(WORD_JOINERS)
    if body != target or not all(ch.isalpha() or unicodedata.category(ch).startswith("M") or ch in WORD_JOINERS for ch in target):
        return "not a word"
    token_start = len(text) - len(token)
    lead = 0
    while is_punct_or_symbol(token[lead]):
        lead += 1
    before = text[: token_start + lead]
    if not before.strip():
        return "no context"
    if before[-1].isspace():
        return LastWordItem("", before.rstrip(), target, " " + target)
    return LastWordItem("", before, target, target)


def build_lambada(xquad: dict[str, Any], where: str = "XQuAD") -> Construction:
    """Build ``lambada_vi`` from an XQuAD (SQuAD v1.1 format) document: every paragraph
    (``data[].paragraphs[].context``) in file order, split by :func:`split_last_word`;
    a paragraph whose context repeats an earlier one is dropped as ``"duplicate"``.

    Raises:
        DatasetError: naming ``where`` and the article/paragraph of a malformed record.
    """
    result = Construction()
    seen: set[str] = set()
    articles = xquad.get("data")
    if not isinstance(articles, list):
        raise DatasetError(f"{where}: field data must be a list of articles")
    for a, article in enumerate(articles):
        paragraphs = article.get("paragraphs") if isinstance(article, dict) else None
        if not isinstance(paragraphs, list):
            raise DatasetError(f"{where}: data[{a}].paragraphs must be a list")
        title = str(article.get("title", a))
        for p, paragraph in enumerate(paragraphs):
            context = paragraph.get("context") if isinstance(paragraph, dict) else None
            if not isinstance(context, str):
                raise DatasetError(f"{where}: data[{a}].paragraphs[{p}].context must be a string")
            result.n_paragraphs += 1
            split = split_last_word(context)
            if isinstance(split, str):
                result.dropped[split] += 1
                continue
            if split.context in seen:
                result.dropped["duplicate"] += 1
                continue
            seen.add(split.context)
            result.items.append(
                LastWordItem(f"{title}/{p}", split.context, split.target, split.continuation)
            )
    return result


def read_xquad(path: Path) -> dict[str, Any]:
    """Parse an XQuAD JSON file.

    Raises:
        DatasetError: when it cannot be read or is not a JSON object.
    """
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise DatasetError(f"{path}: cannot read: {exc}") from None
    except json.JSONDecodeError as exc:
        raise DatasetError(f"{path}: not valid JSON: {exc.msg} (line {exc.lineno})") from None
    if not isinstance(doc, dict):
        raise DatasetError(f"{path}: expected a JSON object with 'data'")
    return doc


class LambadaVi(AnswerSheet):
    """Last-word prediction on Vietnamese Wikipedia paragraphs. The input is the paragraph
    without its last word; the reference is that word. Scored by ``last_word_accuracy``
    (greedy continuation, or the written word) and ``target_nll`` (for perplexity).

    Environment options: ``sample`` / ``sample_seed`` (evaluate N paragraphs drawn at random).
    """

    name = "lambada_vi"

    instructions = (
        "Đoạn văn sau bị thiếu từ cuối cùng. Chỉ viết đúng một từ còn thiếu đó, không giải thích."
    )
    stop_sequences = ("\n",)

    @classmethod
    def load_dataset(cls, path: Path, options: dict[str, Any]) -> list[Example] | None:
        """Build the examples from an XQuAD JSON file (the benchmark's ``load_dataset``).

        Args:
            path (Path): An XQuAD JSON file, or a toolgym JSONL file.
            options (dict[str, Any]): Environment options: ``sample``, ``sample_seed``.

        Returns:
            list[Example] | None: One example per kept paragraph, in file order, or ``None``
            for a file that is not ``.json`` (then read as toolgym examples).

        Raises:
            DatasetError: for a malformed XQuAD file.
        """
        path = Path(path)
        if path.suffix != ".json":
            return None
        built = build_lambada(read_xquad(path), where=str(path))
        items = built.items
        chosen = sample_indices(len(items), options)
        if chosen is not None:
            items = [items[i] for i in chosen]
        return [
            Example(
                id=item.id,
                input=item.context,
                reference=item.target,
                metadata={"task": "last_word", "continuation": item.continuation},
            )
            for item in items
        ]
