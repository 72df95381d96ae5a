"""Run directories and a real ``toolgym view`` server for the view tests.

``make_custom_run`` writes a typewriter_1 run whose trajectories are written directly as
records (through toolgym's own writers) so the tests control what the runner cannot produce on
demand: reasoning text, token counts, a very long tool output, metadata, example ids that a
spreadsheet would run as formulas, and script payloads in reasoning and results. It is then
graded with the real graders (``toolgym.runner.grade``).

``view_server`` starts ``python run_agent.py view ... --port 0 --no-browser`` as a child
process on 127.0.0.1 and yields the URL it prints.
"""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from toolgym.data import write_examples
from toolgym.records import Example, ModelStep, ToolCall, ToolStep, Trajectory
from toolgym.runio import JsonlAppender, write_json_atomic
from toolgym.runner import grade
from toolgym.suites.typewriter.environment import Typewriter1

ROOT = Path(__file__).resolve().parent.parent
LONG_OUTPUT = "long-output-start " + "0123456789" * 500 + " long-output-end"
REASONING_PAYLOAD = "<img src=x onerror=\"window.__xss='reasoning'\">I should type carefully."
FORMULA_IDS = ["=HYPERLINK(\"http://example.com\",\"x\")", "+1+2", "-3", "@SUM(A1)"]


def _episode(example: Example, trial: int, letters: str, *, reasoning: str | None = None,
             long_output: bool = False, tokens: int = 100, status: str = "completed") -> Trajectory:
    env = Typewriter1()
    env.reset(example)
    steps: list = []
    for i, letter in enumerate(letters):
        call = ToolCall(id=f"c{i}", name="type_letter", arguments={"letter": letter})
        steps.append(ModelStep(text=f"typing {letter}", tool_calls=[call], latency_s=0.5, input_tokens=tokens,
                               output_tokens=10, reasoning=reasoning if i == 0 else None,
                               reasoning_tokens=7 if reasoning and i == 0 else None))
        result = env.call(call.name, call.arguments)
        output = LONG_OUTPUT if long_output and i == 0 else result.output
        steps.append(ToolStep(call_id=call.id, name=call.name, arguments=call.arguments, output=output,
                              error=result.error))
    steps.append(ModelStep(text=f"Done: {letters}", latency_s=0.25, input_tokens=tokens, output_tokens=5))
    return Trajectory(
        example_id=example.id, trial=trial, env="typewriter_1", agent="tool_calling", model="scripted:view",
        status=status, steps=steps, final_state=env.read_state(), final_answer=f"Done: {letters}",
        duration_s=0.75 * len(letters) + 0.25, error="RuntimeError: boom" if status == "error" else None,
    )


def custom_examples() -> list[Example]:
    """Words typed by the custom run, with a ``difficulty`` metadata field."""
    words = ["sun", "moon", "star", "sky", "sea", "tree", "leaf", "rock", "sand", "wind", "rain", "snow"]
    examples = [
        Example(id=f"w{i:02d}-{w}", input=w, expected_calls=Typewriter1.calls_for(w), expected_state={"paper": w},
                metadata={"difficulty": "easy" if len(w) == 3 else "hard", "n_steps": len(w)})
        for i, w in enumerate(words)
    ]
    examples += [
        Example(id=i, input="ok", expected_calls=Typewriter1.calls_for("ok"), expected_state={"paper": "ok"},
                metadata={"difficulty": "easy", "n_steps": 2})
        for i in FORMULA_IDS
    ]
    return examples


def write_custom_run(out: Path, dataset: Path, examples: list[Example], n: int | None = None, graded: bool = True) -> None:
    """Write (or extend to the first ``n`` examples) the custom run in ``out`` and grade it
    (unless ``graded`` is false: a run still playing, whose lock ``grade`` would refuse)."""
    out.mkdir(parents=True, exist_ok=True)
    write_examples(dataset, examples)
    write_json_atomic(out / "run.json", {
        "env": "typewriter_1", "agent": {"agent": "tool_calling", "max_steps": 40}, "model": "scripted:view",
        "dataset": {"path": str(dataset), "n_examples": len(examples)},
        "graders": ["final_state", "steps_exact"], "trials": 1,
    })
    done = 0
    path = out / "trajectories.jsonl"
    if path.exists():
        done = sum(1 for line in path.read_text(encoding="utf-8").splitlines() if line.strip())
    with JsonlAppender(path) as writer:
        for i, ex in enumerate(examples[: n if n is not None else len(examples)]):
            if i < done:
                continue
            word = ex.input if isinstance(ex.input, str) else "x"
            if i % 4 == 1:  # a wrong letter
                writer.write(_episode(ex, 0, word[:-1] + "z", tokens=400))
            elif i % 4 == 2:
                writer.write(_episode(ex, 0, word, reasoning=REASONING_PAYLOAD, long_output=True, tokens=250))
            elif i == 7:
                writer.write(_episode(ex, 0, word[:1], status="error"))
            else:
                writer.write(_episode(ex, 0, word))
    if graded:
        grade(out)


def make_custom_run(root: Path, n: int | None = None) -> Path:
    """The custom run in ``root/custom`` (see the module docstring); returns its directory."""
    write_custom_run(root / "custom", root / "custom-dataset.jsonl", custom_examples(), n)
    return root / "custom"


@contextlib.contextmanager
def view_server(dirs: list[Path], cache: Path, *args: str, timeout: float = 60.0) -> Iterator[tuple[str, subprocess.Popen]]:
    """``toolgym view DIRS --port 0 --no-browser --cache-dir CACHE ARGS`` running on 127.0.0.1;
    yields (the URL it printed, without a token query, the process)."""
    cmd = [sys.executable, "run_agent.py", "view", *map(str, dirs), "--port", "0", "--no-browser",
           "--cache-dir", str(cache), "--poll", "0.3", *args]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + timeout
        line = ""
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if "http://" in line or proc.poll() is not None:
                break
        if "http://" not in line:
            proc.kill()
            raise RuntimeError(f"toolgym view did not start: {line!r} {proc.stderr.read()}")
        url = line.split("http://", 1)[1].split()[0]
        yield "http://" + url.split("?", 1)[0].rstrip("/"), proc
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        for name in ("stdout", "stderr"):  # closed (else ResourceWarning: unclosed file), what was left kept readable
            pipe = getattr(proc, name)
            with pipe:
                setattr(proc, name, io.StringIO(pipe.read()))


def write_big_run(out: Path, dataset: Path, n: int) -> Path:
    """A typewriter_1 run of ``n`` examples (``b00000``...; every fifth typed wrong), graded by
    the real graders: large enough that indexing it takes several batches."""
    words = ["sun", "moon", "star", "sky", "sea", "tree", "leaf", "rock", "sand", "wind", "rain", "snow"]
    examples = [Example(id=f"b{i:05d}", input=words[i % len(words)], expected_calls=Typewriter1.calls_for(words[i % len(words)]),
                        expected_state={"paper": words[i % len(words)]}) for i in range(n)]
    out.mkdir(parents=True, exist_ok=True)
    write_examples(dataset, examples)
    write_json_atomic(out / "run.json", {
        "env": "typewriter_1", "agent": {"agent": "tool_calling", "max_steps": 40}, "model": "scripted:big",
        "dataset": {"path": str(dataset), "n_examples": n}, "graders": ["final_state", "steps_exact"], "trials": 1,
    })
    template = {(w, wrong): _episode(examples[0], 0, w[:-1] + "z" if wrong else w) for w in words for wrong in (False, True)}
    with JsonlAppender(out / "trajectories.jsonl") as writer:
        for i, ex in enumerate(examples):
            writer.write(template[(ex.input, i % 5 == 4)].model_copy(update={"example_id": ex.id}))
    grade(out)
    return out


def make_fork(parent: Path, out: Path) -> Path:
    """``toolgym fork PARENT --example tw-2-cat --at first-error --model scripted:FIX --out OUT``
    (the command line, as a person runs it): the scripted run typed a wrong second letter in
    ``tw-2-cat``; the fork replays the first turn ("c") and lets a scripted model go on (it
    answers by the turn's number, so its turns 2 and 3 type "a" and "t")."""
    turn = lambda letter: {"content": "", "tool_calls": [{"name": "type_letter", "args": {"letter": letter}}]}  # noqa: E731
    script = out.parent / f"{out.name}-script.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(json.dumps({"by_input": {"cat": [turn("c"), turn("a"), turn("t"), "Done: cat"]}}), encoding="utf-8")
    subprocess.run([sys.executable, "run_agent.py", "fork", str(parent), "--example", "tw-2-cat", "--at", "first-error",
                    "--model", f"scripted:{script}", "--out", str(out)],
                   cwd=ROOT, check=True, capture_output=True, text=True)
    return out
