"""The public Python API as a user's script meets it: ``toolgym.evaluate`` and
``toolgym.load_run``, with an environment, a model and a dataset given as objects."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest

import toolgym
from toolgym.cli import main
from toolgym.plugins import registries
from toolgym.registry import UnknownNameError

ROOT = Path(__file__).resolve().parents[1]

# The README's "Use from Python" example, run as a script of its own outside the repository.
README_PYTHON = '''\
# --- README python start ---
import toolgym
from toolgym.providers.scripted import ScriptedChatModel


class KeyValueStore(toolgym.Environment):
    """A tiny key-value store."""

    instructions = "You manage a key-value store. Use the tools to do what the user asks."

    def reset(self, example):
        self.data = dict(example.metadata.get("data", {}))

    @toolgym.tool
    def put(self, key: str, value: str) -> str:
        """Store a value under a key.

        Args:
            key: The key.
            value: The value to store.
        """
        self.data[key] = value
        return "ok"

    @toolgym.tool
    def get(self, key: str) -> str:
        """Read the value stored under a key.

        Args:
            key: The key.
        """
        if key not in self.data:
            raise toolgym.ToolError(f"no such key: {key}")
        return self.data[key]

    def read_state(self):
        return {"data": dict(self.data)}


# Any langchain-core chat model works here (ChatOpenAI(...), ...); this one replays a script.
model = ScriptedChatModel(turns=[
    {"tool_calls": [{"name": "put", "args": {"key": "color", "value": "blue"}}]},
    {"tool_calls": [{"name": "get", "args": {"key": "color"}}]},
    "The color is blue.",
])

dataset = [
    {
        "id": "blue",
        "input": "Set color to blue, then read it back.",
        "expected_calls": [
            {"name": "put", "arguments": {"key": "color", "value": "blue"}},
            {"name": "get", "arguments": {"key": "color"}},
        ],
        "expected_state": {"data": {"color": "blue"}},
    },
    {
        "id": "red",
        "input": "Set color to red, then read it back.",
        "expected_calls": [
            {"name": "put", "arguments": {"key": "color", "value": "red"}},
            {"name": "get", "arguments": {"key": "color"}},
        ],
        "expected_state": {"data": {"color": "red"}},
    },
]

result = toolgym.evaluate(KeyValueStore, model=model, dataset=dataset, graders=["final_state", "steps_exact"])

for row in result.summary:  # mean ± standard error per grader
    print(row.grader, row.estimate.format())
for trajectory in result.trajectories:
    print(trajectory.example_id, trajectory.status, [step.name for step in trajectory.tool_steps])
for score in result.scores:
    print(score.example_id, score.grader, score.value, score.explanation)
# --- README python end ---
'''


def readme_snippet() -> str:
    return README_PYTHON.split("# --- README python start ---\n")[1].split("# --- README python end ---")[0]


def test_readme_python_example_runs_as_a_script(tmp_path):
    script = tmp_path / "evaluate_kv.py"
    script.write_text(readme_snippet(), encoding="utf-8")
    # this checkout's toolgym, whatever the working directory (as pytest's pythonpath does)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    proc = subprocess.run(
        [sys.executable, script.name],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[:2] == ["final_state 0.500 ± 0.354", "steps_exact 1.000 ± 0.000"], proc.stdout
    assert sorted(lines[2:4]) == ["blue completed ['put', 'get']", "red completed ['put', 'get']"], (
        proc.stdout
    )
    scores = lines[4:]
    assert "blue final_state 1.0 final state matches" in scores, proc.stdout
    assert any(line.startswith("red final_state 0.0 ") for line in scores), proc.stdout
    assert sum(" steps_exact 1.0 " in line for line in scores) == 2, proc.stdout
    assert not list(tmp_path.glob("runs")), "evaluate without out= writes nothing"


def test_readme_shows_exactly_this_example():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = [b for b in re.findall(r"```python\n(.*?)```", readme, re.DOTALL) if "class KeyValueStore" in b]
    assert blocks, "README.md has no 'Use from Python' example"
    assert blocks[0].strip() == readme_snippet().strip()


# --- the same environment, for the tests below -----------------------------------------------


class KeyValueStore(toolgym.Environment):
    """A tiny key-value store."""

    instructions = "You manage a key-value store. Use the tools to do what the user asks."

    def reset(self, example):
        self.data = dict(example.metadata.get("data", {}))

    @toolgym.tool
    def put(self, key: str, value: str) -> str:
        """Store a value under a key.

        Args:
            key: The key.
            value: The value to store.
        """
        self.data[key] = value
        return "ok"

    @toolgym.tool
    def get(self, key: str) -> str:
        """Read the value stored under a key.

        Args:
            key: The key.
        """
        if key not in self.data:
            raise toolgym.ToolError(f"no such key: {key}")
        return self.data[key]

    def read_state(self):
        return {"data": dict(self.data)}


SCRIPT = [
    {"content": "", "tool_calls": [{"name": "put", "args": {"key": "color", "value": "blue"}}]},
    {
        "content": "",
        "tool_calls": [{"name": "get", "args": {"key": "color"}}, {"name": "get", "args": {"key": "size"}}],
    },
    "The color is blue.",
]


def example(color: str) -> dict:
    return {
        "id": color,
        "input": f"Set color to {color}, then read it back.",
        "expected_calls": [
            {"name": "put", "arguments": {"key": "color", "value": color}},
            {"name": "get", "arguments": {"key": "color"}},
        ],
        "expected_state": {"data": {"color": color}},
    }


DATASET = [example("blue"), example("red")]
GRADERS = ["final_state", "steps_exact"]


def react(model, tools, instructions):
    """A user's own langgraph graph."""
    with warnings.catch_warnings():  # deprecated in langgraph 1.x in favour of langchain.agents
        warnings.simplefilter("ignore")
        from langgraph.prebuilt import create_react_agent

        return create_react_agent(model, tools, prompt=instructions or None)


def steps(trajectory: toolgym.Trajectory) -> list[dict]:
    return [s.model_dump(exclude={"latency_s", "input_tokens", "output_tokens"}) for s in trajectory.steps]


def jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def without_timings(trajectory: dict) -> dict:
    trajectory = {k: v for k, v in trajectory.items() if k != "duration_s"}
    trajectory["steps"] = [{k: v for k, v in s.items() if k != "latency_s"} for s in trajectory["steps"]]
    return trajectory


# --- (b) out=DIR and load_run ----------------------------------------------------------------


def test_evaluate_out_writes_what_the_cli_writes_and_load_run_reads_it(tmp_path):
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"turns": SCRIPT}), encoding="utf-8")
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps(ex) + "\n" for ex in DATASET), encoding="utf-8")
    model = f"scripted:{script}"
    spec = f"{KeyValueStore.__module__}:KeyValueStore"

    cli_dir, api_dir = tmp_path / "cli", tmp_path / "api"
    status = main(
        [
            "run",
            "--env",
            spec,
            "--model",
            model,
            "--dataset",
            str(data),
            "--grader",
            GRADERS[0],
            "--grader",
            GRADERS[1],
            "--out",
            str(cli_dir),
            "--no-progress",
        ]
    )
    assert status == 0
    result = toolgym.evaluate(KeyValueStore, model=model, dataset=DATASET, graders=GRADERS, out=api_dir)

    run_files = {"run.json", "trajectories.jsonl", "scores.jsonl"}
    assert run_files <= {p.name for p in cli_dir.iterdir()}
    assert run_files | {"examples.jsonl"} <= {p.name for p in api_dir.iterdir()}  # in-memory examples kept
    assert [without_timings(t) for t in jsonl(api_dir / "trajectories.jsonl")] == [
        without_timings(t) for t in jsonl(cli_dir / "trajectories.jsonl")
    ]
    assert jsonl(api_dir / "scores.jsonl") == jsonl(cli_dir / "scores.jsonl")
    cli_record, api_record = (
        json.loads((d / "run.json").read_text(encoding="utf-8")) for d in (cli_dir, api_dir)
    )
    assert set(api_record) == set(cli_record)
    for key in ("schema_version", "env", "graders", "measures", "trials"):
        assert api_record[key] == cli_record[key], key
    assert api_record["extensions"]["env"]["spec"] == cli_record["extensions"]["env"]["spec"] == spec

    loaded = toolgym.load_run(api_dir)
    assert isinstance(loaded, toolgym.Run) and isinstance(loaded.record, toolgym.RunRecord)
    assert loaded.record.schema_version == 5
    assert loaded.problem is None
    assert loaded.examples is not None and sorted(loaded.examples) == ["blue", "red"]
    assert all(isinstance(ex, toolgym.Example) for ex in loaded.examples.values())
    assert loaded.examples["red"].expected_steps == ["put", "get"]
    assert all(isinstance(t, toolgym.Trajectory) for t in loaded.trajectories)
    assert all(isinstance(s, toolgym.Score) for s in loaded.scores)
    assert [t.key for t in loaded.trajectories] == [t.key for t in result.trajectories]
    assert [(s.example_id, s.grader, s.value) for s in loaded.scores] == [
        (s.example_id, s.grader, s.value) for s in result.scores
    ]
    assert loaded.record.measures["final_state"] == toolgym.BINARY

    # the command line reads evaluate's run directory
    assert main(["grade", str(api_dir)]) == 0
    assert main(["show", str(api_dir), "--example", "red"]) == 0
    assert jsonl(api_dir / "scores.jsonl") == jsonl(cli_dir / "scores.jsonl")


def test_evaluate_in_memory_returns_everything(scripted):
    result = toolgym.evaluate(KeyValueStore, model=scripted(SCRIPT), dataset=DATASET, graders=GRADERS)
    assert result.run.directory is None
    assert result.record.schema_version == 5
    assert result.record.model == "object:ScriptedChatModel"
    assert {t.example_id: t.final_state for t in result.trajectories} == {
        "blue": {"data": {"color": "blue"}},
        "red": {"data": {"color": "blue"}},
    }
    errors = [s for t in result.trajectories for s in t.tool_steps if s.error]
    assert [(s.name, s.output) for s in errors] == [
        ("get", "Error: no such key: size")
    ] * 2  # a ToolError, seen
    by = {(s.example_id, s.grader): s.value for s in result.scores}
    assert by == {
        ("blue", "final_state"): 1.0,
        ("red", "final_state"): 0.0,
        ("blue", "steps_exact"): 0.0,
        ("red", "steps_exact"): 0.0,
    }  # one get too many
    summary = {row.grader: (row.estimate.mean, row.estimate.n) for row in result.summary}
    assert summary == {"final_state": (0.5, 2), "steps_exact": (0.0, 2)}


# --- (c) a graph factory as the agent --------------------------------------------------------


def test_graph_factory_agent_records_the_same_steps_as_tool_calling(scripted):
    model = scripted(SCRIPT)
    builtin = toolgym.evaluate(
        KeyValueStore, agent="tool_calling", model=model, dataset=DATASET, graders=GRADERS
    )
    graph = toolgym.evaluate(KeyValueStore, agent=react, model=model, dataset=DATASET, graders=GRADERS)
    assert [t.agent for t in graph.trajectories] == ["react", "react"]
    assert graph.record.agent["factory"].endswith(":react")
    for a, b in zip(builtin.trajectories, graph.trajectories, strict=True):
        assert a.example_id == b.example_id
        assert steps(a) == steps(b)
        assert (a.status, a.final_answer, a.final_state) == (b.status, b.final_answer, b.final_state)
    assert [(s.example_id, s.grader, s.value) for s in builtin.scores] == [
        (s.example_id, s.grader, s.value) for s in graph.scores
    ]


# --- (d) errors ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad, field",
    [
        ({"input": "no id"}, "id"),
        ({"id": "x", "input": "typo", "expected_stpes": ["put"]}, "expected_stpes"),
        (
            {"id": "x", "input": "bad call", "expected_calls": [{"name": "put", "args": {}}]},
            "expected_calls.0.args",
        ),
    ],
)
def test_a_bad_in_memory_record_raises_dataset_error_naming_it(scripted, bad, field):
    model = scripted([])  # never called: the dataset is checked first
    with pytest.raises(toolgym.DatasetError) as caught:
        toolgym.evaluate(KeyValueStore, model=model, dataset=[DATASET[0], bad], graders=GRADERS)
    message = str(caught.value)
    assert message.startswith("dataset[1]"), message
    assert field in message, message


def test_an_unknown_tool_in_expected_calls_is_a_dataset_error(scripted):
    bad = {**example("blue"), "expected_calls": [{"name": "delete", "arguments": {"key": "color"}}]}
    with pytest.raises(toolgym.DatasetError, match="delete"):
        toolgym.evaluate(KeyValueStore, model=scripted([]), dataset=[bad], graders=GRADERS)


def test_an_unknown_environment_name_suggests_the_close_one(scripted):
    known = registries()["environments"].names()[0]
    with pytest.raises(UnknownNameError) as caught:
        toolgym.evaluate(known + "x", model=scripted([]), dataset=DATASET)
    assert "did you mean" in str(caught.value).lower(), str(caught.value)
    assert repr(known) in str(caught.value)


def test_an_unknown_grader_name_suggests_the_close_one(scripted):
    with pytest.raises(UnknownNameError, match="(?i)did you mean 'final_state'"):
        toolgym.evaluate(KeyValueStore, model=scripted(SCRIPT), dataset=DATASET, graders=["final_stat"])


def test_evaluate_refuses_to_overwrite_a_run_directory(scripted, tmp_path):
    toolgym.evaluate(
        KeyValueStore, model=scripted(SCRIPT), dataset=DATASET, graders=GRADERS, out=tmp_path / "run"
    )
    with pytest.raises(toolgym.RunDirError, match="resume"):
        toolgym.evaluate(
            KeyValueStore, model=scripted(SCRIPT), dataset=DATASET, graders=GRADERS, out=tmp_path / "run"
        )


# --- (e) expected_steps derived from expected_calls --------------------------------------------


def test_expected_steps_are_derived_and_the_oracle_scores_one():
    ex = toolgym.Example(
        id="derived",
        input="Store size=L and color=red, then read color.",
        expected_calls=[
            toolgym.ToolCallSpec(name="put", arguments={"key": "size", "value": "L"}),
            {"name": "put", "arguments": {"key": "color", "value": "red"}},
            {"name": "get", "arguments": {"key": "color"}},
        ],
        expected_state={"data": {"size": "L", "color": "red"}},
    )
    assert ex.expected_steps == ["put", "put", "get"]
    result = toolgym.evaluate(
        KeyValueStore, agent="oracle", dataset=[ex], graders=["steps_exact", "final_state"]
    )
    (trajectory,) = result.trajectories
    assert trajectory.status == "completed"
    assert [s.name for s in trajectory.tool_steps] == ["put", "put", "get"]
    assert {s.grader: s.value for s in result.scores} == {"steps_exact": 1.0, "final_state": 1.0}
    assert result.record.model is None  # the oracle needs no model


class SlowCounter(toolgym.Environment):
    """A counter whose tool takes 0.2 s (so a loop left free has time to run)."""

    instructions = "Count."

    def reset(self, example):
        self.count = 0

    @toolgym.tool
    def tick(self) -> str:
        """Add one."""
        import time

        time.sleep(0.2)
        self.count += 1
        return str(self.count)

    def read_state(self):
        return {"count": self.count}


def _tick_model():
    from toolgym.providers.scripted import ScriptedChatModel

    return ScriptedChatModel(turns=[{"tool_calls": [{"name": "tick", "args": {}}]}, "1"])


TICK_DATA = [{"id": f"t{i}", "input": "Tick once.", "expected_steps": ["tick"], "expected_state": {"count": 1}} for i in range(3)]


def test_evaluate_works_inside_a_running_event_loop_and_aevaluate_leaves_it_free(tmp_path):
    """As in a Jupyter cell (an event loop running in the calling thread): the synchronous
    entry point runs, and the async one lets other tasks run meanwhile."""
    import asyncio

    async def notebook():
        inside = toolgym.evaluate(SlowCounter, model=_tick_model(), dataset=TICK_DATA, graders=["final_state"], out=tmp_path / "sync")
        ticks = 0

        async def ticker():
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        task = asyncio.create_task(ticker())
        awaited = await toolgym.aevaluate(SlowCounter, model=_tick_model(), dataset=TICK_DATA, graders=["final_state"], out=tmp_path / "async")
        task.cancel()
        return inside, awaited, ticks

    inside, awaited, ticks = asyncio.run(notebook())
    for result in (inside, awaited):
        assert [t.status for t in result.trajectories] == ["completed"] * 3
        assert {s.grader: s.value for s in result.scores if s.example_id == "t0"}["final_state"] == 1.0
    assert ticks >= 20  # 0.6 s of tools: the loop ran its other task meanwhile
    assert len(toolgym.load_run(tmp_path / "async").trajectories) == 3
    with pytest.raises(toolgym.RunDirError):  # errors come through as they are
        asyncio.run(toolgym.aevaluate(SlowCounter, model=_tick_model(), dataset=TICK_DATA, out=tmp_path / "async"))


def test_a_script_defined_environment_run_is_exported_and_regraded_in_its_process(tmp_path):
    """The README's script with ``out=``, then ``export`` and ``grade`` in the same process
    (the class in scope); another process is told why it cannot and what to do instead."""
    script = tmp_path / "evaluate_kv.py"
    script.write_text(readme_snippet().replace(
        'graders=["final_state", "steps_exact"])', 'graders=["final_state", "steps_exact"], out="run")'
    ) + textwrap.dedent('''
        import json
        from toolgym.cli import main
        from toolgym.views.export import export_runs

        exported = export_runs(["run"], "sft.jsonl")
        print("EXPORTED", exported.records)
        print("GRADE", main(["grade", "run"]))
        print("FINAL", [s.value for s in toolgym.load_run("run").scores if s.grader == "final_state"])
    '''), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, script.name], cwd=tmp_path, env=env, capture_output=True, text=True,
                          encoding="utf-8", timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "EXPORTED 2" in proc.stdout and "GRADE 0" in proc.stdout, proc.stdout + proc.stderr
    assert "FINAL [1.0, 0.0]" in proc.stdout or "FINAL [0.0, 1.0]" in proc.stdout
    records = [json.loads(line) for line in (tmp_path / "sft.jsonl").read_text(encoding="utf-8").splitlines()]
    assert {c["function"]["name"] for r in records for m in r["messages"] for c in m.get("tool_calls", [])} == {"put", "get"}
    # another process: refused, saying why and what works
    other = subprocess.run([sys.executable, str(ROOT / "run_agent.py"), "grade", "run"], cwd=tmp_path, env=env,
                           capture_output=True, text=True, encoding="utf-8", timeout=300)
    assert other.returncode != 0
    assert "no other process can import" in other.stderr and "envs.py:KeyValueStore" in other.stderr, other.stderr
