"""toolgym as an outsider gets it: built as a wheel, installed (not editable, with its
dependencies) into a fresh virtual environment, extended by a plugin distribution of its own.

The plugin declares one environment, one agent (a ``create_react_agent`` graph factory), one
grader and one model prefix in toolgym's entry-point groups; the same code is then named by
``module:Name`` specs (a second distribution without entry points) and by ``file.py:Name`` specs.
Everything runs through the installed ``toolgym`` script. Two plugins claiming one name, and a
run whose plugin was uninstalled, must fail with a clear message and exit status 2.

The virtual environment is built once for the module (about 30 s, most of it installing
langgraph and matplotlib from the configured package index or pip's cache).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]

PLUGIN_DIST, PLUGIN_VERSION = "toolgym-mycorp-plugin", "0.3.1"
PLAIN_DIST, PLAIN_VERSION = "mycorp-plain", "1.4.0"
RIVAL_DIST, RIVAL_VERSION = "rival-counters", "2.0.0"

# One plugin module, installed as mycorp_toolgym (entry points), as mycorp_plain (no entry
# points), as mycorp_rival (claims the same environment name) and kept as a plain file.
PLUGIN_SOURCE = '''\
"""mycorp's toolgym extensions: a counter environment, a ReAct agent, a grader, a fake model."""

from __future__ import annotations

import warnings

import toolgym
from toolgym.providers.scripted import ScriptedChatModel


class Counter(toolgym.Environment):
    """A counter the model increments."""

    instructions = "You operate a counter. Call increment as often as the user asks."

    def reset(self, example):
        self.count = int(example.metadata.get("start", 0))

    @toolgym.tool
    def increment(self, by: int = 1) -> str:
        """Add to the counter.

        Args:
            by: How much to add (at least 1).
        """
        if by < 1:
            raise toolgym.ToolError("by must be at least 1")
        self.count += by
        return f"count is {self.count}"

    def read_state(self):
        return {"count": self.count}


def react(model, tools, instructions):
    """A langgraph ReAct graph over the environment's tools."""
    with warnings.catch_warnings():  # deprecated in langgraph 1.x in favour of langchain.agents
        warnings.simplefilter("ignore")
        from langgraph.prebuilt import create_react_agent

        return create_react_agent(model, tools, prompt=instructions or None)


class CountGrader:
    """1 when the counter ends at the expected count."""

    name = "mycorp_count"
    measure = toolgym.BINARY

    def grade(self, example, trajectory):
        if example.expected_state is None:
            return None
        want, got = example.expected_state["count"], trajectory.final_state.get("count")
        return toolgym.make_score(
            self, trajectory, float(got == want), f"count {got}, expected {want}", expected=want, actual=got
        )


def fake_model(model_name, settings):
    """A scripted chat model: increments twice, one call per turn, then answers."""
    return ScriptedChatModel(turns=[
        {"content": "", "tool_calls": [{"name": "increment", "args": {"by": 1}, "id": "c1"}]},
        {"content": "", "tool_calls": [{"name": "increment", "args": {"by": 1}, "id": "c2"}]},
        {"content": f"done ({model_name})"},
    ])
'''

ENTRY_POINTS = {
    "toolgym.environments": {"mycorp_counter": "mycorp_toolgym:Counter"},
    "toolgym.agents": {"mycorp_react": "mycorp_toolgym:react"},
    "toolgym.graders": {"mycorp_count": "mycorp_toolgym:CountGrader"},
    "toolgym.models": {"mycorp": "mycorp_toolgym:fake_model"},
}


def _increments(n: int) -> list[dict]:
    return [{"name": "increment", "arguments": {"by": 1}}] * n


EXAMPLES = [  # the fake model increments twice: "two" passes, "three" fails
    {
        "id": "two",
        "input": "Increment the counter twice.",
        "expected_calls": _increments(2),
        "expected_state": {"count": 2},
    },
    {
        "id": "three",
        "input": "Increment the counter three times.",
        "expected_calls": _increments(3),
        "expected_state": {"count": 3},
    },
]


def write_distribution(
    folder: Path, dist: str, version: str, package: str, entry_points: dict | None
) -> Path:
    """A source tree of a plugin distribution: ``pyproject.toml`` and one package."""
    (folder / package).mkdir(parents=True)
    (folder / package / "__init__.py").write_text(PLUGIN_SOURCE, encoding="utf-8")
    lines = [
        "[build-system]",
        'requires = ["setuptools>=68"]',
        'build-backend = "setuptools.build_meta"',
        "",
        "[project]",
        f'name = "{dist}"',
        f'version = "{version}"',
        'dependencies = ["toolgym"]',
        "",
        "[tool.setuptools]",
        f'packages = ["{package}"]',
        "",
    ]
    for group, names in (entry_points or {}).items():
        lines.append(f'[project.entry-points."{group}"]')
        lines += [f'{name} = "{value.replace("mycorp_toolgym", package)}"' for name, value in names.items()]
        lines.append("")
    (folder / "pyproject.toml").write_text("\n".join(lines), encoding="utf-8")
    return folder


def _run(argv: list, cwd: Path, env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(a) for a in argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=timeout,
    )


def _explain(proc: subprocess.CompletedProcess) -> str:
    command = " ".join(map(str, proc.args))
    return (
        f"$ {command}\nexit {proc.returncode}\n"
        f"--- stdout\n{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-4000:]}"
    )


@dataclass
class Venv:
    """The fresh virtual environment holding the wheel and the plugins, and the files around it."""

    root: Path
    work: Path
    wheel: Path
    source: Path  # the copy of the repository the wheel was built from
    plugin: Path
    plain: Path
    files: Path  # holds counter_plugin.py for the file specs
    dataset: Path
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def bin(self) -> Path:
        return self.root / "bin"

    def env(self) -> dict[str, str]:
        """The environment of a shell with this venv activated (nothing of the repository's)."""
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP")
        }
        env.update(
            VIRTUAL_ENV=str(self.root),
            PATH=f"{self.bin}{os.pathsep}{env.get('PATH', '')}",
            COLUMNS="220",
            PYTHONIOENCODING="utf-8",
            PYTHONDONTWRITEBYTECODE="1",
        )
        return env

    def pip(self, *args: object) -> subprocess.CompletedProcess:
        proc = _run(
            [self.bin / "python", "-m", "pip", "--disable-pip-version-check", *args], self.work, self.env()
        )
        assert proc.returncode == 0, _explain(proc)
        return proc

    def toolgym(self, *args: object, cwd: Path | None = None) -> subprocess.CompletedProcess:
        return _run([self.bin / "toolgym", *args], cwd or self.work, self.env(), timeout=300)

    def python(self, code: str) -> subprocess.CompletedProcess:
        return _run([self.bin / "python", "-c", code], self.work, self.env())


def build_wheel(source: Path, dest: Path) -> Path:
    """Build toolgym's wheel from a copy of the repository (the build writes ``build/`` and
    ``*.egg-info`` into its source tree; the repository is left alone).

    Isolated first (pip fetches ``setuptools>=68`` from the configured index or its cache);
    without isolation if that fails (offline, with a recent setuptools installed here).
    """
    shutil.copytree(
        ROOT / "toolgym", source / "toolgym", ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
    )
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    failures = []
    for extra in ([], ["--no-build-isolation"]):
        proc = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", *extra, "-w", dest, source], source)
        if proc.returncode == 0:
            break
        failures.append(_explain(proc))
    else:
        pytest.fail("cannot build the wheel:\n" + "\n\n".join(failures))
    (wheel,) = dest.glob("toolgym-*.whl")
    return wheel


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Venv:
    base = tmp_path_factory.mktemp("wheel")
    timings: dict[str, float] = {}

    start = time.perf_counter()
    (base / "source").mkdir()
    wheel = build_wheel(base / "source", base / "dist")
    timings["build wheel"] = time.perf_counter() - start

    start = time.perf_counter()
    root = base / "venv"
    proc = _run([sys.executable, "-m", "venv", root], base)  # a plain venv: no system site-packages
    assert proc.returncode == 0, _explain(proc)
    assert "include-system-site-packages = false" in (root / "pyvenv.cfg").read_text()
    timings["create venv"] = time.perf_counter() - start

    work = base / "work"
    work.mkdir()
    dataset = work / "counter.jsonl"
    dataset.write_text("".join(json.dumps(ex) + "\n" for ex in EXAMPLES), encoding="utf-8")
    files = base / "files"
    files.mkdir()
    (files / "counter_plugin.py").write_text(PLUGIN_SOURCE, encoding="utf-8")
    made = Venv(
        root=root,
        work=work,
        wheel=wheel,
        source=base / "source",
        dataset=dataset,
        files=files,
        plugin=write_distribution(
            base / "plugin", PLUGIN_DIST, PLUGIN_VERSION, "mycorp_toolgym", ENTRY_POINTS
        ),
        plain=write_distribution(base / "plain", PLAIN_DIST, PLAIN_VERSION, "mycorp_plain", None),
        timings=timings,
    )

    start = time.perf_counter()
    made.pip("install", wheel)  # not editable, with its dependencies
    timings["install wheel and dependencies"] = time.perf_counter() - start

    start = time.perf_counter()
    made.pip("install", made.plugin)
    made.pip("install", made.plain)
    timings["install plugins"] = time.perf_counter() - start
    return made


@pytest.fixture(scope="module")
def ep_run(venv: Venv) -> tuple[subprocess.CompletedProcess, Path]:
    """A run of the plugin's entry points through ``toolgym run``."""
    out = venv.work / "RUN"
    proc = venv.toolgym(
        "run",
        "--env",
        "mycorp_counter",
        "--agent",
        "mycorp_react",
        "--model",
        "mycorp:x",
        "--grader",
        "mycorp_count",
        "--grader",
        "steps_exact",
        "--dataset",
        venv.dataset,
        "--out",
        out,
        "--no-progress",
    )
    return proc, out


@pytest.fixture(scope="module")
def module_run(venv: Venv) -> tuple[subprocess.CompletedProcess, Path]:
    """A run of the same code by ``module:Name`` specs (distribution mycorp-plain, no entry
    points)."""
    cwd = venv.work / "module-cwd"
    cwd.mkdir()
    out = cwd / "RUN"
    proc = venv.toolgym(
        "run",
        "--env",
        "mycorp_plain:Counter",
        "--agent",
        "mycorp_plain:react",
        "--model",
        "mycorp_plain:fake_model",
        "--grader",
        "mycorp_plain:CountGrader",
        "--dataset",
        venv.dataset,
        "--out",
        out,
        "--no-progress",
        cwd=cwd,
    )
    return proc, out


@pytest.fixture(scope="module")
def file_run(venv: Venv) -> tuple[subprocess.CompletedProcess, Path]:
    """A run of the same code by ``file.py:Name`` specs relative to the working directory."""
    out = venv.files / "RUN"
    spec = "counter_plugin.py"
    proc = venv.toolgym(
        "run",
        "--env",
        f"{spec}:Counter",
        "--agent",
        f"{spec}:react",
        "--model",
        f"{spec}:fake_model",
        "--grader",
        f"{spec}:CountGrader",
        "--dataset",
        venv.dataset,
        "--out",
        out,
        "--no-progress",
        cwd=venv.files,
    )
    return proc, out


def run_json(out: Path) -> dict:
    return json.loads((out / "run.json").read_text(encoding="utf-8"))


def jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def values(out: Path, grader: str) -> dict[str, float]:
    return {s["example_id"]: s["value"] for s in jsonl(out / "scores.jsonl") if s["grader"] == grader}


def assert_ok(proc: subprocess.CompletedProcess) -> None:
    assert proc.returncode == 0, _explain(proc)
    assert "Traceback" not in proc.stderr, _explain(proc)


def list_rows(stdout: str) -> set[tuple[str, ...]]:
    """The rows of ``toolgym list``'s tables (one per kind, titled ``agents (--agent)``) as
    ``(kind, name, from)``."""
    rows = set()
    kind = ""
    for line in stdout.splitlines():
        title = re.fullmatch(r"\s*(environment|agent|grader|model)s \(--\w+\)\s*", line)
        if title:
            kind = title.group(1)
            continue
        cells = [c.strip() for c in line.strip().strip("│").split("│")]
        if len(cells) >= 3 and cells[0]:
            rows.add((kind, *cells[:2]))
    return rows


# --- the wheel --------------------------------------------------------------------------------


def test_toolgym_is_installed_from_the_wheel(venv: Venv):
    proc = venv.python(
        "import json, toolgym, importlib.metadata as m; d = m.distribution('toolgym');"
        "print(json.dumps([toolgym.__file__, d.read_text('direct_url.json')]))"
    )
    assert_ok(proc)
    location, direct_url = json.loads(proc.stdout)
    assert Path(location).is_relative_to(venv.root), location  # not the repository's sources
    assert direct_url is None or '"editable": true' not in direct_url
    print({k: round(v, 1) for k, v in venv.timings.items()})


def test_installed_version_is_the_package_version(venv: Venv):
    proc = venv.python(
        "import toolgym, importlib.metadata as m; print(toolgym.__version__, m.version('toolgym'))"
    )
    assert_ok(proc)
    dunder, metadata_version = proc.stdout.split()
    assert dunder == metadata_version, (
        f"toolgym.__version__ {dunder} but the wheel's metadata says {metadata_version}"
    )


def test_wheel_ships_every_file_of_the_package(venv: Venv):
    """Built-in datasets, the report's scripts: every file under toolgym/ is in the wheel."""
    package = venv.source / "toolgym"
    tree = {
        p.relative_to(venv.source).as_posix()
        for p in package.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
    }
    shipped = set(zipfile.ZipFile(venv.wheel).namelist())
    missing = sorted(tree - shipped)
    assert not missing, f"{len(missing)} files of the package are not in the wheel: {missing[:20]}"


def test_builtin_dataset_runs_from_the_wheel(venv: Venv):
    out = venv.work / "typewriter"
    proc = venv.toolgym(
        "run", "--env", "typewriter_1", "--agent", "oracle", "--limit", "2", "--out", out, "--no-progress"
    )
    assert_ok(proc)
    assert set(values(out, "steps_exact").values()) == {1.0}


# --- entry points -----------------------------------------------------------------------------


def test_list_names_the_plugin_distribution(venv: Venv):
    proc = venv.toolgym("list")
    assert_ok(proc)
    rows = list_rows(proc.stdout)
    plugin = f"({PLUGIN_DIST} {PLUGIN_VERSION})"
    for kind, name, group in [
        ("environment", "mycorp_counter", "toolgym.environments"),
        ("agent", "mycorp_react", "toolgym.agents"),
        ("grader", "mycorp_count", "toolgym.graders"),
        ("model", "mycorp", "toolgym.models"),
    ]:
        assert (kind, name, f"entry point {group} {plugin}") in rows, proc.stdout


def test_run_with_entry_points(venv: Venv, ep_run):
    proc, out = ep_run
    assert_ok(proc)
    assert "mycorp_count" in proc.stdout and "0.500" in proc.stdout, proc.stdout

    trajectories = jsonl(out / "trajectories.jsonl")
    assert sorted(t["example_id"] for t in trajectories) == ["three", "two"]
    for t in trajectories:
        assert (t["env"], t["agent"], t["model"], t["status"]) == (
            "mycorp_counter",
            "mycorp_react",
            "mycorp:x",
            "completed",
        )
        assert [s["name"] for s in t["steps"] if s["kind"] == "tool"] == ["increment", "increment"]
        assert t["final_state"] == {"count": 2}
        assert t["final_answer"] == "done (x)"  # the model name reached the plugin's factory
    assert values(out, "mycorp_count") == {"two": 1.0, "three": 0.0}
    assert values(out, "steps_exact") == {"two": 1.0, "three": 0.0}

    record = run_json(out)
    assert record["schema_version"] == 5
    assert record["graders"] == ["mycorp_count", "steps_exact"]
    for part, group in [("env", "environments"), ("agent", "agents"), ("grader:mycorp_count", "graders")]:
        ref = record["extensions"][part]
        assert ref["source"] == f"entry point toolgym.{group}", ref
        assert (ref["distribution"], ref["version"]) == (PLUGIN_DIST, PLUGIN_VERSION), ref
    assert record["versions"][PLUGIN_DIST] == PLUGIN_VERSION
    assert record["measures"]["mycorp_count"]["kind"] == "binary"


def test_grade_show_summary_report_of_a_plugin_run(venv: Venv, ep_run):
    _, out = ep_run
    (out / "scores.jsonl").unlink()
    graded = venv.toolgym("grade", out)
    assert_ok(graded)
    assert "mycorp_count" in graded.stdout and "0.500" in graded.stdout, graded.stdout
    assert values(out, "mycorp_count") == {"two": 1.0, "three": 0.0}

    shown = venv.toolgym("show", out, "--example", "three")
    assert_ok(shown)
    for text in ("three", "increment", "count is 2", "mycorp_count"):
        assert text in shown.stdout, shown.stdout

    summary = venv.toolgym("summary", out)
    assert_ok(summary)
    assert "mycorp_count" in summary.stdout and "0.500" in summary.stdout, summary.stdout

    html = venv.work / "r.html"
    report = venv.toolgym("report", out, "--out", html)
    assert_ok(report)
    text = html.read_text(encoding="utf-8")
    assert "mycorp_count" in text and "mycorp_counter" in text


# --- specs ------------------------------------------------------------------------------------


def test_run_with_module_specs(venv: Venv, module_run):
    proc, out = module_run
    assert_ok(proc)
    assert values(out, "mycorp_count") == {"two": 1.0, "three": 0.0}
    record = run_json(out)
    for part, name in [("env", "Counter"), ("agent", "react"), ("grader:mycorp_count", "CountGrader")]:
        ref = record["extensions"][part]
        assert ref["spec"] == f"mycorp_plain:{name}" and ref["source"] == "module", ref
        assert (ref["distribution"], ref["version"]) == (PLAIN_DIST, PLAIN_VERSION), ref
    assert record["versions"][PLAIN_DIST] == PLAIN_VERSION

    elsewhere = venv.work  # read again from another directory
    assert_ok(venv.toolgym("grade", out, cwd=elsewhere))
    assert values(out, "mycorp_count") == {"two": 1.0, "three": 0.0}
    shown = venv.toolgym("show", out, cwd=elsewhere)
    assert_ok(shown)
    assert "increment" in shown.stdout


def test_run_with_file_specs(venv: Venv, file_run):
    proc, out = file_run
    assert_ok(proc)
    assert values(out, "mycorp_count") == {"two": 1.0, "three": 0.0}
    record = run_json(out)
    path = (venv.files / "counter_plugin.py").resolve()
    for part, name in [("env", "Counter"), ("agent", "react"), ("grader:mycorp_count", "CountGrader")]:
        ref = record["extensions"][part]
        assert ref["spec"] == f"{path}:{name}" and ref["source"] == "file", (
            ref
        )  # absolute: readable from anywhere

    elsewhere = venv.work
    graded = venv.toolgym("grade", out, cwd=elsewhere)
    assert_ok(graded)
    assert values(out, "mycorp_count") == {"two": 1.0, "three": 0.0}
    assert_ok(venv.toolgym("show", out, cwd=elsewhere))


@pytest.mark.parametrize("how", ["entry point", "module", "file"])
def test_run_json_records_the_model_provider(venv: Venv, how, request):
    """``extensions`` names how each part was found, the model provider included (RunRecord:
    keys env, agent, model and grader:NAME)."""
    proc, out = request.getfixturevalue(
        {"entry point": "ep_run", "module": "module_run", "file": "file_run"}[how]
    )
    assert_ok(proc)
    extensions = run_json(out)["extensions"]
    assert "model" in extensions, f"run.json extensions has no 'model': {sorted(extensions)}"
    ref = extensions["model"]
    if how == "entry point":
        assert ref["source"] == "entry point toolgym.models", ref
        assert (ref["distribution"], ref["version"]) == (PLUGIN_DIST, PLUGIN_VERSION), ref
    elif how == "module":
        assert ref["spec"] == "mycorp_plain:fake_model" and ref["source"] == "module", ref
        assert (ref["distribution"], ref["version"]) == (PLAIN_DIST, PLAIN_VERSION), ref
    else:
        assert ref["spec"] == f"{(venv.files / 'counter_plugin.py').resolve()}:fake_model", ref
        assert ref["source"] == "file", ref


# --- conflicts and missing plugins ------------------------------------------------------------


def test_two_plugins_claiming_one_environment(venv: Venv, tmp_path):
    rival = write_distribution(
        tmp_path / "rival",
        RIVAL_DIST,
        RIVAL_VERSION,
        "mycorp_rival",
        {"toolgym.environments": ENTRY_POINTS["toolgym.environments"]},
    )
    venv.pip("install", rival)
    try:
        for argv in (
            ["list"],
            [
                "run",
                "--env",
                "mycorp_counter",
                "--agent",
                "mycorp_react",
                "--model",
                "mycorp:x",
                "--dataset",
                venv.dataset,
                "--out",
                tmp_path / "RUN",
                "--no-progress",
            ],
        ):
            proc = venv.toolgym(*argv)
            assert proc.returncode == 2, _explain(proc)
            assert "Traceback" not in proc.stderr, _explain(proc)
            assert "mycorp_counter" in proc.stderr, _explain(proc)
            assert PLUGIN_DIST in proc.stderr and RIVAL_DIST in proc.stderr, _explain(proc)
        assert not (tmp_path / "RUN").exists()
    finally:
        venv.pip("uninstall", "-y", RIVAL_DIST)
    assert_ok(venv.toolgym("list"))


def test_grading_after_the_plugin_is_uninstalled(venv: Venv, ep_run):
    _, out = ep_run
    venv.pip("uninstall", "-y", PLUGIN_DIST)
    try:
        proc = venv.toolgym("grade", out)
        assert proc.returncode == 2, _explain(proc)
        assert "Traceback" not in proc.stderr, _explain(proc)
        error = proc.stderr
        assert "'mycorp_counter'" in error and "can no longer be found" in error, error
        assert f"{PLUGIN_DIST} {PLUGIN_VERSION}" in error, error  # where it came from
        # the views read the run without the plugin (measures are recorded in run.json)
        assert_ok(venv.toolgym("summary", out))
        assert_ok(venv.toolgym("show", out))
    finally:
        venv.pip("install", venv.plugin)
