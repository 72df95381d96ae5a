"""A run made by ``evaluate(EnvClass, out=...)`` from a script (issue 38, item 9): the class,
defined in the script's ``__main__``, is recorded as ``script.py:Class``, so ``toolgym grade``
and ``toolgym export`` (other processes) find it again. Real processes throughout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from toolgym.runio import read_run

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}

SCRIPT = textwrap.dedent('''
    """A shelf environment and its evaluation, in one script."""
    import sys

    from toolgym import Environment, evaluate, tool


    class Shelf(Environment):
        """Items put on a shelf. State: {"items": [...]}."""

        instructions = "Put the given item on the shelf."

        def reset(self, example):
            self.items = []

        @tool
        def put(self, item: str) -> str:
            """Put an item on the shelf.

            Args:
                item: The item.
            """
            self.items.append(item)
            return "OK"

        def read_state(self):
            return {"items": list(self.items)}


    EXAMPLES = [{"id": "book", "input": "book", "expected_calls": [{"name": "put", "arguments": {"item": "book"}}],
                 "expected_state": {"items": ["book"]}, "reference": "done"}]

    if __name__ == "__main__":
        evaluate(Shelf, agent="oracle", dataset=EXAMPLES, out=sys.argv[1])
''')


def test_a_script_environment_is_recorded_as_its_file_and_found_again(tmp_path):
    script = tmp_path / "shelf.py"
    script.write_text(SCRIPT)
    out = tmp_path / "run"
    done = subprocess.run([sys.executable, str(script), str(out)], cwd=tmp_path, env=ENV, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    record = read_run(out)
    assert record.extensions["env"].spec == f"{script.resolve()}:Shelf"
    graded = subprocess.run([sys.executable, str(ROOT / "run_agent.py"), "grade", str(out)], cwd=ROOT, env=ENV,
                            capture_output=True, text=True, timeout=300)
    assert graded.returncode == 0, graded.stderr
    exported = tmp_path / "sft.jsonl"
    done = subprocess.run([sys.executable, str(ROOT / "run_agent.py"), "export", str(out), "--out", str(exported)],
                          cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    [line] = exported.read_text().splitlines()
    conversation = json.loads(line)
    assert [t["function"]["name"] for t in conversation["tools"]] == ["put"]
    assert conversation["messages"][0]["content"].startswith("Put the given item on the shelf.")


TOP_LEVEL = SCRIPT.replace('if __name__ == "__main__":\n    evaluate(', 'evaluate(').replace('\n    evaluate(', '\nevaluate(')


def test_a_class_no_process_can_import_exports_from_the_recorded_tools(tmp_path):
    """The script calls evaluate at its top level, so loading it again would play again: the
    class stays ``<object Shelf>``, and export reads the prompt and tools run.json recorded."""
    assert "\nevaluate(Shelf" in TOP_LEVEL
    script = tmp_path / "shelf_top.py"
    script.write_text(TOP_LEVEL)
    out = tmp_path / "run"
    done = subprocess.run([sys.executable, str(script), str(out)], cwd=tmp_path, env=ENV, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    record = read_run(out)
    assert record.extensions["env"].spec == "<object Shelf>"
    assert [t["function"]["name"] for t in record.described["tools"]] == ["put"]
    exported = tmp_path / "sft.jsonl"
    done = subprocess.run([sys.executable, str(ROOT / "run_agent.py"), "export", str(out), "--out", str(exported)],
                          cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    [line] = exported.read_text().splitlines()
    conversation = json.loads(line)
    assert [t["function"]["name"] for t in conversation["tools"]] == ["put"]
    assert [m["role"] for m in conversation["messages"][:2]] == ["system", "user"]
    assert conversation["messages"][1]["content"] == "book"
