"""BFCL's multi-turn categories: loading from the installed ``bfcl-eval`` package (by category
name or by path), the API classes as the environment's state and tools, and the official
checker's verdict beside toolgym's stepwise view. Skipped when the package is not installed
(``pip install --no-deps bfcl-eval==2026.3.23 mpmath``)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from toolgym import DatasetError
from toolgym.data import resolve_dataset
from toolgym.suites.bfcl import SUITE

bfcl_eval = pytest.importorskip("bfcl_eval")

from toolgym.suites.bfcl import multi_turn as mt  # noqa: E402
from toolgym.suites.bfcl.data import load_examples  # noqa: E402

BENCHMARK = SUITE.benchmarks[0]
DATA = Path(bfcl_eval.__file__).parent / "data"


def rows(category: str, answers: bool = False) -> list[dict]:
    folder = DATA / "possible_answer" if answers else DATA
    return [json.loads(line) for line in (folder / f"BFCL_v4_{category}.json").read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def miss_func() -> list:
    return load_examples(resolve_dataset(BENCHMARK, "multi_turn_miss_func"), {})


def test_a_category_is_found_by_name_in_the_package():
    assert resolve_dataset(BENCHMARK, "multi_turn_base") == DATA / "BFCL_v4_multi_turn_base.json"
    assert mt.category_path("long_context") == DATA / "BFCL_v4_multi_turn_long_context.json"
    assert mt.category_path("simple_python") is None
    with pytest.raises(DatasetError, match="neither a file nor|has no built-in dataset"):
        resolve_dataset(BENCHMARK, "multi_turn_nothing")


def test_every_category_loads_its_200_conversations_with_their_turns():
    for category in mt.MULTI_TURN_CATEGORIES:
        examples = load_examples(mt.category_path(category), {})
        raw = {r["id"]: r for r in rows(category)}
        truth = {r["id"]: r["ground_truth"] for r in rows(category, answers=True)}
        assert len(examples) == 200
        for ex in examples:
            meta = ex.metadata
            assert meta["category"] == category and meta["multi_turn"] is True
            assert len(meta["turns"]) == len(raw[ex.id]["question"]) == len(meta["ground_truth"])
            assert ex.input == [{"role": "user", "content": meta["turns"][0]}]
            assert meta["ground_truth"] == truth[ex.id]
            assert meta["initial_config"] == raw[ex.id]["initial_config"]
            assert meta["excluded_function"] == raw[ex.id].get("excluded_function", [])
            assert len(ex.expected_calls) == sum(len(t) for t in truth[ex.id])


def test_miss_func_withholds_its_functions_until_their_turn(miss_func):
    first = next(ex for ex in miss_func if ex.id == "multi_turn_miss_func_0")
    assert first.metadata["missed_function"] == {"4": ["sort"]}  # turn index 3 of the data, numbered from 1
    assert first.metadata["turns"][3] == mt.ADDED_FUNCTIONS_PROMPT
    names = {d["name"] for d in first.metadata["functions"]}
    assert "sort" not in names and {"mv", "grep", "post_tweet"} <= names


def test_the_added_functions_prompt_is_the_leaderboards():
    from bfcl_eval.constants.default_prompts import DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC

    assert mt.ADDED_FUNCTIONS_PROMPT == DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC


def test_positional_ground_truth_calls_get_their_parameter_names():
    ex = next(e for e in load_examples(mt.category_path("multi_turn_base"), {})
              if any("sort('" in c for t in e.metadata["ground_truth"] for c in t))
    call = next(c for c in ex.expected_calls if c.name == "sort")
    assert list(call.arguments) == ["file_name"]


def test_a_file_by_path_with_answers_beside_it(tmp_path):
    (tmp_path / "possible_answer").mkdir()
    name = "BFCL_v4_multi_turn_base.json"
    shutil.copy(DATA / "possible_answer" / name, tmp_path / "possible_answer" / name)
    (tmp_path / name).write_text("\n".join(json.dumps(r) for r in rows("multi_turn_base")[:3]) + "\n")
    assert [e.id for e in load_examples(tmp_path / name, {})] == [f"multi_turn_base_{i}" for i in range(3)]


def test_a_ground_truth_with_the_wrong_number_of_turns_is_refused(tmp_path):
    (tmp_path / "possible_answer").mkdir()
    name = "BFCL_v4_multi_turn_base.json"
    entry = rows("multi_turn_base")[0]
    truth = rows("multi_turn_base", answers=True)[0]
    truth["ground_truth"] = truth["ground_truth"][:1]
    (tmp_path / "possible_answer" / name).write_text(json.dumps(truth) + "\n")
    (tmp_path / name).write_text(json.dumps(entry) + "\n")
    with pytest.raises(DatasetError, match=r"multi_turn_base_0.*one list of calls per turn"):
        load_examples(tmp_path / name, {})


def test_a_missing_package_names_the_install_command(monkeypatch):
    mt.package.cache_clear()
    monkeypatch.setitem(__import__("sys").modules, "bfcl_eval", None)
    try:
        with pytest.raises(DatasetError, match=r"pip install --no-deps bfcl-eval==2026\.3\.23 mpmath"):
            mt.category_path("multi_turn_base")
    finally:
        mt.package.cache_clear()


# --- the environment --------------------------------------------------------------------------
def test_the_environment_executes_the_api_methods_and_reads_their_state(miss_func):
    from toolgym.suites.bfcl.environment import BFCL

    ex = next(e for e in miss_func if e.id == "multi_turn_miss_func_0")
    env = BFCL()
    env.reset(ex)
    assert env.max_model_turns is None
    assert set(env.read_state()) == {"GorillaFileSystem", "TwitterAPI"}
    root = env.read_state()["GorillaFileSystem"]["root"]
    assert root["name"] == "workspace"
    assert root["contents"]["document"]["contents"]["final_report.pdf"]["type"] == "file"
    assert "sort" not in env.functions and "mkdir" in env.functions
    out = env.call("cd", {"folder": "document"})
    assert not out.error and json.loads(out.output) == {"current_working_directory": "document"}
    assert not env.call("mkdir", {"dir_name": "temp"}).error
    after = env.read_state()["GorillaFileSystem"]["root"]["contents"]["document"]
    assert after["contents"]["temp"] == {"type": "directory", "name": "temp", "contents": {}}
    # a failing method's result is the checker's error text, shown to the model as the observation
    assert json.loads(env.call("cd", {"folder": "nowhere"}).output) == {"error": "cd: 'nowhere': No such file or directory"}
    key = env.tool_set_key()
    env.begin_turn(3)
    assert "sort" not in env.functions
    env.begin_turn(4)  # the turn the data withholds it for
    assert "sort" in env.functions and env.tool_set_key() != key
    assert "Python 3 syntax" in env.tools["sort"].description


def test_the_state_equals_where_the_checker_finds_it_equal():
    apis = mt.APIs(["GorillaFileSystem"], rows("multi_turn_base")[0]["initial_config"])
    other = mt.APIs(["GorillaFileSystem"], rows("multi_turn_base")[0]["initial_config"])
    assert apis.state() == other.state()
    apis.execute("cd", [], {"folder": "workspace"})  # moves the current directory: private, not compared
    assert apis.state() == other.state()
    apis.execute_string("touch(file_name='x.txt')")
    assert apis.state() != other.state()
    assert apis.execute_string("no_such_method()").startswith("Error during execution")
    assert apis.execute_string("cd(folder=open('x'))") == "Error during execution: an argument is not a literal"


# --- grading: the official verdict, toolgym's stepwise view, import and export ---------------
def _gt_result(truth: list[list[str]]) -> list:
    """The ground truth in the decoded form: one step per turn that has calls."""
    return [[list(t)] if t else [] for t in truth]


def planted(entry: dict, truth: list[list[str]], rng) -> dict[str, list]:
    """The ground truth and planted faults of it: a dropped call, an emptied turn, a repeated
    step, an extra read (a ground-truth call that leaves the state as it is, made again at the
    start of a turn), a wrong string argument, two adjacent turns swapped."""
    import copy

    base = _gt_result(truth)
    out = {"none": base}
    full = [i for i, t in enumerate(truth) if t]
    if not full:
        return out
    i = rng.choice(full)
    r = copy.deepcopy(base)
    del r[i][0][rng.randrange(len(truth[i]))]
    r[i] = [s for s in r[i] if s]
    out["drop"] = r
    r = copy.deepcopy(base)
    r[i] = []
    out["empty_turn"] = r
    r = copy.deepcopy(base)
    r[i].append(list(r[i][0]))
    out["repeat"] = r
    apis = mt.APIs(entry["involved_classes"], entry["initial_config"], "long_context" in entry["id"])
    reads = []
    for turn in truth:
        for call in turn:
            before = apis.state()
            apis.execute_string(call)
            if apis.state() == before:
                reads.append(call)
    if reads:
        r = copy.deepcopy(base)
        r[rng.choice(full)].insert(0, [rng.choice(reads)])
        out["extra_read"] = r
    for _ in range(5):
        k = rng.choice(full)
        j = rng.randrange(len(truth[k]))
        call = truth[k][j]
        if "'" in call:
            r = copy.deepcopy(base)
            a = call.index("'")
            r[k][0][j] = call[: a + 1] + "zz" + call[a + 1:]
            out["wrong_argument"] = r
            break
    if len(truth) > 1:
        k = rng.randrange(len(truth) - 1)
        r = copy.deepcopy(base)
        r[k], r[k + 1] = r[k + 1], r[k]
        out["swapped_turns"] = r
    return out


def reference_verdict(entry: dict, result: list, truth: list[list[str]], name: str) -> str | None:
    """The package's own multi_turn_checker on a result, called directly (None: valid)."""
    import copy

    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker

    if len(result) != len(truth):
        return "multi_turn:force_terminated"
    verdict = multi_turn_checker([[s for s in t if s] for t in result], truth, copy.deepcopy(entry),
                                 entry["id"].rsplit("_", 1)[0], name)
    return None if verdict["valid"] else verdict["error_type"]


def test_planted_faults_get_the_official_checkers_verdict_through_grade_result(tmp_path):
    """Every 10th entry of each category with each planted fault, written as result files and
    graded with ``grade --env bfcl --result``: every score equals the verdict of the
    package's multi_turn_checker called directly, and toolgym's own stepwise replay names
    the same error type (the full 800 x 7 are in benchmarks/bfcl_multi_turn.py)."""
    import random

    from toolgym.cli import main
    from toolgym.runio import read_scores

    rng = random.Random(7)
    kinds_seen: set[str] = set()
    checked = 0
    for category in mt.MULTI_TURN_CATEGORIES:
        entries = rows(category)[::10]
        dataset = _subset(tmp_path / "data" / category, category, 10)  # those entries only: a quicker load
        truths = {r["id"]: r["ground_truth"] for r in rows(category, answers=True)}
        by_kind: dict[str, list[dict]] = {}
        expected: dict[tuple[str, str], str | None] = {}
        for entry in entries:
            for kind, result in planted(entry, truths[entry["id"]], rng).items():
                by_kind.setdefault(kind, []).append({"id": entry["id"], "result": result})
                expected[kind, entry["id"]] = reference_verdict(entry, result, truths[entry["id"]], f"ref_{kind}_{checked}")
                checked += 1
        for kind, lines in by_kind.items():
            kinds_seen.add(kind)
            folder = tmp_path / category / kind
            folder.mkdir(parents=True)
            result_file = folder / f"BFCL_v4_{category}_result.json"
            result_file.write_text("".join(json.dumps(line) + "\n" for line in lines))
            out = folder / "graded"
            assert main(["grade", "--env", "bfcl", "--result", str(result_file), "--dataset", str(dataset),
                         "--out", str(out)]) == 0
            scores = {s.example_id: s for s in read_scores(out) if s.grader == "bfcl_accuracy"}
            assert len(scores) == len(lines)
            for example_id, score in scores.items():
                want = expected[kind, example_id]
                assert score.value == (1.0 if want is None else 0.0), (kind, example_id, want)
                assert score.details.get("error_type") == want, (kind, example_id)
                assert score.details.get("stepwise_error_type") == want, (kind, example_id, score.details.get("reason"))
                if want is not None:
                    assert score.details["turn"] >= 1 and score.details["call"] >= 0
            header = json.loads((out / f"BFCL_v4_{category}_score.json").read_text().splitlines()[0])
            assert header["correct_count"] == sum(v is None for (k, _), v in expected.items() if k == kind)
    assert kinds_seen == {"none", "drop", "empty_turn", "repeat", "extra_read", "wrong_argument", "swapped_turns"}
    assert checked > 500


def test_the_stepwise_view_names_the_turn_step_and_call_at_fault():
    entry = rows("multi_turn_base")[0]
    truth = rows("multi_turn_base", answers=True)[0]["ground_truth"]
    assert truth[0] == ["cd(folder='document')", "mkdir(dir_name='temp')", "mv(source='final_report.pdf', destination='temp')"]
    result = _gt_result(truth)
    result[0] = [["cd(folder='document')"], ["mkdir(dir_name='tmp')"], ["mv(source='final_report.pdf', destination='tmp')"]]
    judged = mt.judge(entry, result, truth)
    assert judged.official["error_type"] == "multi_turn:instance_state_mismatch"
    assert "root" in judged.official["details"]["differences"]
    view = judged.view
    # step 2 made a directory the ground truth never makes: the first call off its path
    assert (view.turn, view.step, view.call) == (1, 2, 1)
    assert judged.turn_states[0] is False and len(judged.turn_states) == len(truth)
    # a turn that stops short has no single step at fault: the end of the turn
    short = _gt_result(truth)
    short[0] = [["cd(folder='document')", "mkdir(dir_name='temp')"]]
    view = mt.judge(entry, short, truth).view
    assert (view.turn, view.step, view.call) == (1, None, 2)
    assert mt.judge(entry, _gt_result(truth), truth).turn_states == [True] * len(truth)


def test_the_leaderboards_rules_before_the_checker():
    entry = rows("multi_turn_base")[0]
    truth = rows("multi_turn_base", answers=True)[0]["ground_truth"]
    assert mt.official_verdict(entry, "Error during inference: timeout", truth)["error_type"] == "multi_turn:inference_error"
    assert mt.official_verdict(entry, _gt_result(truth)[:-1], truth)["error_type"] == "multi_turn:force_terminated"
    # steps holding no call are left out, as the runner leaves out steps that do not decode
    padded = [[[], *turn, ["not a call"] * 0] for turn in _gt_result(truth)]
    assert mt.official_verdict(entry, padded, truth) == {"valid": True}


def test_the_checker_leaves_no_instances_behind():
    import importlib

    utils = importlib.import_module("bfcl_eval.eval_checker.multi_turn_eval.multi_turn_utils")
    before = set(utils.__dict__)
    entry = rows("multi_turn_base")[1]
    truth = rows("multi_turn_base", answers=True)[1]["ground_truth"]
    assert mt.official_verdict(entry, _gt_result(truth), truth)["valid"]
    assert set(utils.__dict__) == before


def test_a_result_file_round_trips_through_export(tmp_path):
    from toolgym.cli import main

    lines = [{"id": r["id"], "result": _gt_result(r["ground_truth"])} for r in rows("multi_turn_miss_param", answers=True)[:5]]
    lines[1]["result"] = lines[1]["result"][:-1]  # one turn short
    result_file = tmp_path / "BFCL_v4_multi_turn_miss_param_result.json"
    result_file.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert main(["grade", "--env", "bfcl", "--result", str(result_file), "--dataset", "multi_turn_miss_param",
                 "--out", str(tmp_path / "g")]) == 0
    exported = [json.loads(line) for line in (tmp_path / "g" / result_file.name).read_text().splitlines()]
    assert exported == lines
    score = (tmp_path / "g" / "BFCL_v4_multi_turn_miss_param_score.json").read_text().splitlines()
    assert json.loads(score[0]) == {"accuracy": 0.8, "correct_count": 4, "total_count": 5}
    assert json.loads(score[1])["error_type"] == "multi_turn:force_terminated"
    # the imported steps: each call with the result the checker's execution gives it
    from toolgym.runio import read_trajectories

    first = read_trajectories(tmp_path / "g")[0]
    tools = [s for s in first.steps if s.kind == "tool"]
    assert [t.name for t in tools] == [c.split("(")[0] for turn in lines[0]["result"] for step in turn for c in step]
    assert json.loads(tools[0].output) == {"current_working_directory": "document"}
    # the directory grades again from its own files
    assert main(["grade", str(tmp_path / "g")]) == 0
    assert json.loads((tmp_path / "g" / "BFCL_v4_multi_turn_miss_param_score.json").read_text().splitlines()[0])["correct_count"] == 4


def test_a_file_of_all_four_categories_reports_the_multi_turn_overall(tmp_path, capsys):
    """The multi-turn overall is the unweighted mean of the four categories' accuracies (the
    leaderboard's Multi Turn Overall Acc), not the mean over entries."""
    from toolgym.cli import main

    (tmp_path / "possible_answer").mkdir()
    questions, answers, lines = [], [], []
    for n, category in zip((1, 2, 3, 4), mt.MULTI_TURN_CATEGORIES, strict=True):
        questions += rows(category)[:n]
        truths = rows(category, answers=True)[:n]
        answers += truths
        # the first entry of each category right, the others one turn short
        lines += [{"id": t["id"], "result": _gt_result(t["ground_truth"])[: None if i == 0 else -1]}
                  for i, t in enumerate(truths)]
    name = "BFCL_v4_multi_turn_all.json"
    (tmp_path / name).write_text("".join(json.dumps(q) + "\n" for q in questions))
    (tmp_path / "possible_answer" / name).write_text("".join(json.dumps(a) + "\n" for a in answers))
    result = tmp_path / "all_result.json"
    result.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert main(["grade", "--env", "bfcl", "--result", str(result), "--dataset", str(tmp_path / name),
                 "--out", str(tmp_path / "g")]) == 0
    from toolgym import load_run
    from toolgym.suites.bfcl.results import report

    table = next(t for t in report(load_run(tmp_path / "g")) if t.title == "bfcl: accuracy by category")
    overall = table.rows[-1]
    # (1 + 1/2 + 1/3 + 1/4) / 4 = 0.521; over entries it would be 4/10
    assert overall["category"].startswith("multi-turn overall") and overall["n"] == 10
    assert overall["official accuracy ± s.e."] == "0.521"
    assert [r["category"] for r in table.rows[:4]] == list(mt.MULTI_TURN_CATEGORIES)
    assert "multi-turn overall" in capsys.readouterr().out
    for category in mt.MULTI_TURN_CATEGORIES:
        assert (tmp_path / "g" / f"BFCL_v4_{category}_score.json").exists()


# --- episodes: the environment played by an agent ---------------------------------------------
def _subset(tmp_path: Path, category: str, step: int) -> Path:
    """Every ``step``-th entry of a category as a file of its own, answers beside it."""
    name = f"BFCL_v4_{category}.json"
    (tmp_path / "possible_answer").mkdir(parents=True, exist_ok=True)
    (tmp_path / name).write_text("".join(json.dumps(r) + "\n" for r in rows(category)[::step]))
    shutil.copy(DATA / "possible_answer" / name, tmp_path / "possible_answer" / name)
    return tmp_path / name


def _oracle_scores(dataset, out: Path) -> dict[str, list]:
    from toolgym.cli import main
    from toolgym.runio import read_scores

    assert main(["run", "--env", "bfcl", "--dataset", str(dataset), "--agent", "oracle", "--out", str(out),
                 "--no-progress"]) == 0
    by_grader: dict[str, list] = {}
    for s in read_scores(out):
        by_grader.setdefault(s.grader, []).append(s)
    return by_grader


def test_the_oracle_plays_every_tenth_conversation_turn_by_turn_and_scores_one(tmp_path):
    for category in mt.MULTI_TURN_CATEGORIES:
        scores = _oracle_scores(_subset(tmp_path / category, category, 10), tmp_path / f"run-{category}")
        assert len(scores["bfcl_accuracy"]) == 20
        assert all(s.value == 1.0 for s in scores["bfcl_accuracy"]), [s.explanation for s in scores["bfcl_accuracy"] if s.value != 1]
        assert all(s.value == 1.0 for s in scores["turn_state"])


@pytest.mark.slow
def test_the_oracle_scores_one_on_all_800_conversations(tmp_path):
    for category in mt.MULTI_TURN_CATEGORIES:
        scores = _oracle_scores(category, tmp_path / category)
        assert len(scores["bfcl_accuracy"]) == 200
        assert all(s.value == 1.0 for s in scores["bfcl_accuracy"]), [s.explanation for s in scores["bfcl_accuracy"] if s.value != 1]
        assert all(s.value == 1.0 for s in scores["turn_state"])


def test_a_model_gets_withheld_functions_at_their_turn_and_is_graded_turn_by_turn(miss_func):
    """miss_func_0 with a scripted model: turn 1 right; turn 3 calls ``sort`` before it is
    offered (refused by the agent as an unknown tool, yet decoded and executed by the checker,
    as the leaderboard does); turn 4 (the added functions) sorts again; turn 5 compares with a
    wrong file name. The verdict is the official checker's, and the stepwise view names turn 5;
    the states are right after every turn, so ``turn_state`` passes where the response check
    fails."""
    from conftest import call, turn

    from toolgym.providers.scripted import ScriptedChatModel
    from toolgym.runner import RunConfig, run

    ex = next(e for e in miss_func if e.id == "multi_turn_miss_func_0")
    said = ex.metadata["turns"]
    model = ScriptedChatModel(by_input={
        said[0]: [turn(call("cd", folder="document"), call("mkdir", dir_name="temp"),
                       call("mv", source="final_report.pdf", destination="temp")), "moved"],
        said[1]: [turn(call("cd", folder="temp"), call("grep", file_name="final_report.pdf", pattern="budget analysis")), "found"],
        said[2]: [turn(call("sort", file_name="final_report.pdf")), "I cannot sort"],
        said[3]: [turn(call("sort", file_name="final_report.pdf")), "sorted"],
        said[4]: [turn(call("cd", folder=".."), call("mv", source="previous_report.pdf", destination="temp"),
                       call("cd", folder="temp"), call("diff", file_name1="final_report.pdf", file_name2="previous.pdf")),
                  "compared"],
    })
    result = run(RunConfig(env="bfcl", model=model, dataset=[ex]), progress=False)
    (traj,) = result.trajectories
    assert [s.turn for s in traj.steps if s.kind == "user"] == [1, 2, 3, 4, 5]
    sorts = [s for s in traj.tool_steps if s.name == "sort"]
    assert sorts[0].error and "unknown tool 'sort'" in sorts[0].output  # turn 3: still withheld
    assert not sorts[1].error and "sorted_content" in sorts[1].output  # turn 4: added
    scores = {s.grader: s for s in result.scores}
    official = scores["bfcl_accuracy"]
    truth = ex.metadata["ground_truth"]
    from toolgym.suites.bfcl.results import multi_turn_result

    decoded = multi_turn_result(traj)
    assert decoded[2] == [["sort(file_name='final_report.pdf')"]]  # refused, but decoded as the leaderboard does
    assert official.details["error_type"] == reference_verdict(
        {"id": ex.id, "initial_config": ex.metadata["initial_config"], "involved_classes": ex.metadata["involved_classes"]},
        decoded, truth, "scripted_miss_func_0")
    assert official.value == 0.0 and official.details["turn"] == 5
    # diff changes no state: every turn's state is right, and only the response check fails
    assert official.details["error_type"] == "multi_turn:execution_response_mismatch"
    assert official.details["turn_states"] == [True] * 5 and scores["turn_state"].value == 1.0


def test_a_conversation_cut_short_names_the_error_it_made_first():
    """The official verdict of a result with turns missing is force_terminated; the stepwise
    view names the first failure in the turns played (a model looping until its step limit),
    else the first turn missing."""
    entry = rows("multi_turn_base")[0]
    truth = rows("multi_turn_base", answers=True)[0]["ground_truth"]
    looping = [[["mkdir(dir_name='temp')", "mv(source='final_report.pdf', destination='temp')"]] * 3]
    judged = mt.judge(entry, looping, truth)
    assert judged.official["error_type"] == "multi_turn:force_terminated"
    assert (judged.view.turn, judged.view.step, judged.view.call) == (1, 1, 0)
    assert judged.view.error_type == "multi_turn:instance_state_mismatch"
    short = mt.judge(entry, _gt_result(truth)[:2], truth).view
    assert (short.turn, short.step, short.error_type) == (3, None, "multi_turn:force_terminated")
