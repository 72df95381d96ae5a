"""Benchmark: do the scores move between two toolgym checkouts? The same recorded trajectories
and the same result files, graded by a baseline checkout's code and by this checkout's code.

Each checkout grades in its own processes, with ``PYTHONPATH`` set to that checkout, through
the command both versions have::

    python run_agent.py grade RUN_DIR --dataset DATASET          (recorded trajectories)
    python run_agent.py grade --env jmultiwoz_tc --result RESULT --dataset ZIP --out DIR
    python run_agent.py grade --env bfcl --result RESULT --dataset BFCL_v4_<category>.json --out DIR

What is graded (generated once, with this checkout):

* the LangChain tool-usage test sets (relational_data, multiverse_math, typewriter_1,
  typewriter_26) and the published LangChain files of the last three (``--langchain``; the
  published relational_data file names tools without arguments, so nothing can play it): the
  ``oracle`` agent's trajectories, and deterministic others played by the ``tool_calling``
  agent with a scripted model (``scripted:FILE``), so that every record is what an environment
  really returned. The reference calls one per model turn with one call dropped, two different
  calls swapped, an argument changed, an integer argument written as a string (refused by the
  environment since issue 38), an extra call added, the last call repeated, the episode
  stopped after half of the calls (with a non-answer), the first call's arguments as text that
  is not JSON (a malformed call, never run); all the calls in one model turn (the ``oracle``'s
  turn shape before issue 35); and, as a control, the calls of an example with milestones
  grouped by data flow (independent calls in one turn, each call in the turn after those it
  reads), valid under every rule. In the graded copy, variant ``k`` is trial ``k`` of one run
  directory per set (so each checkout grades a set in one process).
* the same trajectories against the same sets with the expected steps and calls removed from
  every example that has milestones (its task given by the milestones alone: issue 35's
  finding 6, where ``steps_exact`` no longer applies).
* the built-in sets graded again with ``--trajectory-mode strict|unordered|subset|superset``
  (agentevals' modes, arguments exact: ``trajectory_match`` on the examples without
  milestones); only ``trajectory_match`` is compared there.
* run directories found under ``--runs-under`` (the bundled local model's, ``"model":
  "local"``), and any given with ``--run``: graded as they are; trajectories the baseline
  cannot read (multi-turn records, statuses it does not have) are left out of both and counted.
* JMultiWOZ-TC: the result file of ``benchmarks/jmultiwoz_grading.py`` (31,303 turns with
  mistakes of every kind), imported and graded by each checkout; its five published rows are
  also compared with the published ``evaluate.py``'s.
* BFCL single-turn: the result files of ``benchmarks/bfcl_grading.py`` (13 categories, 3,641
  entries), imported and graded by each checkout.

A run directory written by this checkout may hold ``run.json`` fields that the baseline does not
know (``grade`` rewrites the grader records anyway): the baseline's copy has them removed, each
named in the output, by the baseline's own :class:`toolgym.RunRecord` (fields it forbids as
extra). Nothing else is changed.

Reports, per set and grader: scores in each checkout, how many differ (a value changed, or a
score present in one checkout only), and for each difference the example, the variant, both
values and both explanations. Exit status 0 whatever moved (a moved score is not by itself a
bug); ``--json FILE`` keeps every difference.

Usage: python benchmarks/grader_drift.py --baseline DIR [--runs-under DIR ...] [--work DIR]
       [--jmultiwoz ZIP] [--published evaluate.py] [--bfcl DIR] [--skip jmultiwoz,bfcl,local]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
JMULTIWOZ = SHARED / "data" / "jmultiwoz_tc" / "JMultiWOZ-TC_data.zip"
PUBLISHED = SHARED / "reference" / "jmultiwoz_tc" / "evaluate.py"
BFCL = SHARED / "data" / "bfcl_v4"

ENVS = ("relational_data", "multiverse_math", "typewriter_1", "typewriter_26")
VARIANTS = ("oracle", "drop", "swap", "change_argument", "string_argument", "extra_call", "duplicate", "stop_early",
            "one_turn", "parallel_independent", "malformed")
EXTRA_CALL = {  # a call of a real tool that no reference of the set makes at that point
    "relational_data": {"name": "list_user_ids", "arguments": {}},
    "multiverse_math": {"name": "negate", "arguments": {"a": 7}},
    "typewriter_1": {"name": "type_letter", "arguments": {"letter": "z"}},
    "typewriter_26": {"name": "z", "arguments": {}},
}
STOPPED = "I stop here."
MODES = ("strict", "unordered", "subset", "superset")  # trajectory_match's agentevals modes (arguments exact)
LANGCHAIN = SHARED / "data" / "langchain_tool_usage"
LANGCHAIN_FILES = {  # the published files whose examples carry the calls' arguments (relational_data's do not)
    "multiverse_math": "multiverse_math_dataset.json",
    "typewriter_1": "typewriter_1_tool_dataset.json",
    "typewriter_26": "typewriter_26_tools_dataset.json",
}


# ---------------------------------------------------------------- perturbations (pure functions)

def changed(value: Any) -> Any:
    """Another value of the same JSON type: a number plus one, a letter the next letter, a
    longer string with ``x`` appended, ``True`` and ``False`` swapped."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value + 1
    if isinstance(value, str):
        if len(value) == 1 and value.isalpha():
            return "b" if value.lower() == "a" else "a"
        return value + "x"
    return value


def perturb(
    variant: str, calls: list[dict], env: str, milestones: list | None = None
) -> tuple[list[list[dict]], bool] | None:
    """The model turns (each a list of calls) of ``variant`` over the reference ``calls``, and
    whether the final answer is the reference's; ``None`` where the variant does not apply
    (no two different calls to swap, no argument to change, no integer argument to write as a
    string, fewer than two calls in one turn, no two calls independent of each other).
    """
    calls = [dict(c, arguments=dict(c["arguments"])) for c in calls]
    if variant == "parallel_independent":
        layers = layered(calls, milestones)
        return None if layers is None or all(len(layer) < 2 for layer in layers) else (layers, True)
    one_each = True
    if variant == "drop":
        if not calls:
            return None
        del calls[len(calls) // 2]
    elif variant == "swap":
        pair = next(((i, j) for i in range(len(calls)) for j in range(i + 1, len(calls)) if calls[i] != calls[j]), None)
        if pair is None:
            return None
        i, j = pair
        calls[i], calls[j] = calls[j], calls[i]
    elif variant == "change_argument":
        at = next((i for i, c in enumerate(calls) if c["arguments"]), None)
        if at is None:
            return None
        key = sorted(calls[at]["arguments"])[0]
        calls[at]["arguments"][key] = changed(calls[at]["arguments"][key])
    elif variant == "string_argument":
        at = next((i for i, c in enumerate(calls) for v in c["arguments"].values()
                   if isinstance(v, int) and not isinstance(v, bool)), None)
        if at is None:
            return None
        key = next(k for k, v in sorted(calls[at]["arguments"].items()) if isinstance(v, int) and not isinstance(v, bool))
        calls[at]["arguments"][key] = str(calls[at]["arguments"][key])
    elif variant == "malformed":
        if not calls:
            return None
        calls[0] = {"name": calls[0]["name"], "malformed": "{not json"}
    elif variant == "extra_call":
        calls.insert(min(1, len(calls)), dict(EXTRA_CALL[env]))
    elif variant == "duplicate":
        if not calls:
            return None
        calls.insert(len(calls), dict(calls[-1]))
    elif variant == "stop_early":
        calls = calls[: len(calls) // 2]
        return [[c] for c in calls], False
    elif variant == "one_turn":
        if len(calls) < 2:
            return None
        one_each = False
    else:
        raise ValueError(f"unknown variant {variant!r}")
    return ([[c] for c in calls] if one_each else [calls]), True


# ---------------------------------------------------------------- workers (run with a checkout's PYTHONPATH)

def layered(calls: list[dict], milestones: list | None) -> list[list[dict]] | None:
    """The reference calls grouped into model turns by data flow: a call in the turn after the
    last of the calls its milestone comes ``after`` or reads (``$from``), independent calls
    together (parallel calls, valid under every rule). ``None`` unless the example's milestones
    are plain call milestones naming the reference calls one for one, in order."""
    if not milestones or len(milestones) != len(calls):
        return None
    ids = [m.get("id") for m in milestones]
    depth: dict[str, int] = {}
    for m, call in zip(milestones, calls, strict=True):
        if not isinstance(m.get("call"), dict) or m["call"].get("name") != call["name"]:
            return None
        sources = set(m.get("after") or []) | set(re.findall(r'"\$from": "([^"]+)"', json.dumps(m["call"])))
        if not sources <= set(depth):
            return None
        depth[m["id"]] = 1 + max((depth[x] for x in sources), default=-1)
    layers: list[list[dict]] = [[] for _ in range(max(depth.values()) + 1)]
    for i, call in zip(ids, calls, strict=True):
        layers[depth[i]].append(call)
    return layers


def worker_generate(work: Path, langchain: Path | None) -> None:
    """This checkout: the oracle's runs and the scripted perturbed runs of every set of
    :func:`sets_of`, merged into one run directory per set (variant k = trial k), with the
    examples as loaded (``examples.jsonl``) beside it."""
    import toolgym

    for label, env, dataset in sets_of(langchain):
        runs = work / "generated" / label
        runs.mkdir(parents=True, exist_ok=True)
        toolgym.evaluate(env, agent="oracle", model=None, dataset=str(dataset), out=runs / "oracle")
        examples = list(toolgym.load_run(runs / "oracle").examples.values())
        dumped = [ex.model_dump(mode="json", exclude_none=True) for ex in examples]
        oracle = {t["example_id"]: t for t in _jsonl(runs / "oracle" / "trajectories.jsonl")}
        for variant in VARIANTS[1:]:
            chosen, scripts = [], {}
            for example in dumped:
                made = perturb(variant, example.get("expected_calls") or [], env, example.get("milestones"))
                if made is None:
                    continue
                turns, answers = made
                answer = oracle[example["id"]].get("final_answer") or ""
                script = []
                for k, turn in enumerate(turns):
                    script.append({"content": "", "tool_calls": [
                        {"id": f"call_{k}_{i}", "name": c["name"], "args": c["arguments"]}
                        for i, c in enumerate(turn) if "malformed" not in c], "invalid_tool_calls": [
                        {"id": f"call_{k}_{i}", "name": c["name"], "args": c["malformed"], "error": "not JSON"}
                        for i, c in enumerate(turn) if "malformed" in c]})
                script.append(answer if answers else STOPPED)
                scripts[example["input"]] = script
                chosen.append(example)
            if not chosen:  # typewriter_26's tools take no argument to change
                continue
            subset = runs / f"{variant}.jsonl"
            subset.write_text("".join(json.dumps(ex, ensure_ascii=False) + "\n" for ex in chosen), encoding="utf-8")
            model = runs / f"{variant}.script.json"
            model.write_text(json.dumps({"by_input": scripts}), encoding="utf-8")
            toolgym.evaluate(env, agent="tool_calling", model=f"scripted:{model}", dataset=str(subset),
                             out=runs / variant)
        merged = work / "merged" / label
        merged.mkdir(parents=True, exist_ok=True)
        record = json.loads((runs / "oracle" / "run.json").read_text(encoding="utf-8"))
        record["trials"] = len(VARIANTS)
        (merged / "run.json").write_text(json.dumps(record, indent=1), encoding="utf-8")
        with open(merged / "trajectories.jsonl", "w", encoding="utf-8") as fh:
            for k, variant in enumerate(VARIANTS):
                if not (runs / variant).exists():
                    continue
                for t in _jsonl(runs / variant / "trajectories.jsonl"):
                    fh.write(json.dumps(dict(t, trial=k), ensure_ascii=False) + "\n")
        (merged / "dataset.txt").write_text(str(dataset), encoding="utf-8")
        (merged / "examples.jsonl").write_text(
            "".join(json.dumps(ex, ensure_ascii=False) + "\n" for ex in dumped), encoding="utf-8")
        if any("milestones" in ex for ex in dumped):  # issue 35 finding 6: steps_exact applies no more
            alone = [{k: v for k, v in ex.items() if k not in ("expected_steps", "expected_calls")}
                     if "milestones" in ex else ex for ex in dumped]
            (merged / "milestones_alone.jsonl").write_text(
                "".join(json.dumps(ex, ensure_ascii=False) + "\n" for ex in alone), encoding="utf-8")


def sets_of(langchain: Path | None) -> list[tuple[str, str, Path]]:
    """(label, environment, dataset) of every set whose trajectories are generated: the
    built-in test sets, then the published LangChain files found in ``langchain`` (the
    relational_data one names tools without arguments, so nothing can play it)."""
    sets = [(env, env, _builtin_dataset(env)) for env in ENVS]
    for env, name in LANGCHAIN_FILES.items():
        if langchain is not None and (langchain / name).exists():
            sets.append((f"{env} (LangChain file)", env, langchain / name))
    return sets


def _builtin_dataset(env: str) -> Path:
    """The built-in ``test.jsonl`` of ``env`` in this checkout."""
    found = sorted(ROOT.glob(f"toolgym/suites/*/datasets/{env}/test.jsonl"))
    if not found:
        raise SystemExit(f"no built-in test set of {env} under {ROOT}")
    return found[0]


def worker_fit(directory: Path) -> None:
    """The checkout on ``PYTHONPATH``: remove from ``run.json`` the fields its ``RunRecord``
    forbids as extra, and from ``trajectories.jsonl`` the lines its ``Trajectory`` cannot read
    (a status or a step kind it does not have). Prints ``{"dropped_fields": [...],
    "dropped_lines": {reason: count}, "kept": n}``; exits 3 with the reason when ``run.json``
    itself cannot be read."""
    from pydantic import ValidationError

    import toolgym

    data = json.loads((directory / "run.json").read_text(encoding="utf-8"))
    dropped = []
    for _ in range(100):
        try:
            toolgym.RunRecord.model_validate(data)
            break
        except ValidationError as exc:
            extras = [e["loc"] for e in exc.errors() if e["type"] == "extra_forbidden"]
            if not extras:
                print(f"run.json: {exc.errors()[0]['loc']}: {exc.errors()[0]['msg']}")
                sys.exit(3)
            for loc in extras:
                node = data
                for part in loc[:-1]:
                    node = node[part]
                node.pop(loc[-1], None)
                dropped.append(".".join(map(str, loc)))
    from toolgym.runio import RUN_SCHEMA_VERSION

    if data.get("schema_version", 1) > RUN_SCHEMA_VERSION:  # the lines it cannot read are dropped below
        dropped.append(f"schema_version (lowered from {data['schema_version']} to {RUN_SCHEMA_VERSION})")
        data["schema_version"] = RUN_SCHEMA_VERSION
    (directory / "run.json").write_text(json.dumps(data, indent=1), encoding="utf-8")
    kept, unread = [], {}
    for line in (directory / "trajectories.jsonl").read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        try:
            toolgym.Trajectory.model_validate_json(line)
            kept.append(line)
        except ValidationError as exc:
            err = exc.errors()[0]
            reason = f"{'.'.join(map(str, err['loc']))}: {err['msg']}"
            unread[reason] = unread.get(reason, 0) + 1
    (directory / "trajectories.jsonl").write_text("".join(x + "\n" for x in kept), encoding="utf-8")
    print(json.dumps({"dropped_fields": dropped, "dropped_lines": unread, "kept": len(kept)}))


def worker_bfcl_results(out: Path, data: Path) -> None:
    """This checkout: ``benchmarks/bfcl_grading.py``'s result file of each category."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bfcl_grading", ROOT / "benchmarks" / "bfcl_grading.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    from toolgym.suites.bfcl.data import CATEGORIES

    out.mkdir(parents=True, exist_ok=True)
    for category in CATEGORIES:
        module.write_result(out / f"BFCL_v4_{category}_result.json", data / f"BFCL_v4_{category}.json")
    print(json.dumps(list(CATEGORIES)))


# ---------------------------------------------------------------- driver (imports no toolgym)

def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def run_in(checkout: Path, args: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess:
    """``python ARGS`` with ``PYTHONPATH`` set to ``checkout`` alone."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return subprocess.run([sys.executable, *args], cwd=cwd or checkout, env=env, capture_output=True, text=True)


def grade_copy(
    checkout: Path, source: Path, dest: Path, dataset: Path, trajectories: Path | None = None,
    options: tuple[str, ...] = (),
) -> tuple[list[dict] | None, str]:
    """Copy run directory ``source`` (with ``trajectories`` instead of its own, if given) to
    ``dest``, fit it to ``checkout`` (:func:`worker_fit`) and grade it there: (scores, note);
    scores ``None`` with the reason when the checkout cannot read or grade it."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    shutil.copy2(source / "run.json", dest / "run.json")
    shutil.copy2(trajectories or source / "trajectories.jsonl", dest / "trajectories.jsonl")
    fit = run_in(checkout, [str(Path(__file__).resolve()), "--worker", "fit", str(dest)])
    if fit.returncode != 0:
        return None, (fit.stdout.strip() or fit.stderr.strip()[-300:])
    fitted = json.loads(fit.stdout.strip().splitlines()[-1])
    notes = []
    if fitted["dropped_fields"]:
        notes.append(f"run.json fields the checkout does not know, removed: {', '.join(fitted['dropped_fields'])}")
    if fitted["dropped_lines"]:
        notes.append("trajectories the checkout cannot read, left out of both: " + "; ".join(
            f"{n} x {reason}" for reason, n in fitted["dropped_lines"].items()))
    if not fitted["kept"]:
        return None, "; ".join(notes) or "no trajectories"
    done = run_in(checkout, [str(checkout / "run_agent.py"), "grade", str(dest), "--dataset", str(dataset), *options])
    if done.returncode != 0:
        return None, done.stderr.strip()[-300:]
    return _jsonl(dest / "scores.jsonl"), "; ".join(notes)


def same(a: Any, b: Any) -> bool:
    if isinstance(a, float | int) and isinstance(b, float | int):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12) or (math.isnan(a) and math.isnan(b))
    return a == b


def compare(
    label: str, old: list[dict], new: list[dict], variant_of=lambda s: "",
    examples: dict[str, dict] | None = None, trajectories: dict[tuple[str, int], dict] | None = None,
) -> list[dict]:
    """Rows per grader: n old, n new, differences (each with example, variant, both values and
    explanations, and :func:`likely_cause` when ``examples`` and ``trajectories`` are given)."""
    def keyed(scores):
        return {(s["example_id"], s.get("trial", 0), s["grader"]): s for s in scores}

    a, b = keyed(old), keyed(new)
    rows: dict[str, dict] = {}
    for key in sorted(set(a) | set(b), key=lambda k: (k[2], k[1], k[0])):
        grader = key[2]
        row = rows.setdefault(grader, {"set": label, "grader": grader, "n_old": 0, "n_new": 0, "diffs": []})
        sa, sb = a.get(key), b.get(key)
        row["n_old"] += sa is not None
        row["n_new"] += sb is not None
        va = sa["value"] if sa is not None else "absent"
        vb = sb["value"] if sb is not None else "absent"
        if not same(va, vb):
            diff = {
                "example": key[0], "variant": variant_of(sa or sb), "old": va, "new": vb,
                "old_explanation": (sa or {}).get("explanation", ""), "new_explanation": (sb or {}).get("explanation", ""),
                "cause": "",
            }
            if examples is not None and trajectories is not None:
                match = b.get((key[0], key[1], "trajectory_match")) or {}
                diff["cause"] = likely_cause(grader, diff, examples.get(key[0], {}), trajectories.get(key[:2], {}),
                                             match.get("explanation", ""))
            row["diffs"].append(diff)
    return list(rows.values())


COUNTED = re.compile(r"(\d+)/(\d+) counted tool steps")
LEFT_OUT = re.compile(r"\((\d+) (?:harmless )?allowed extras left out\)")


def likely_cause(grader: str, diff: dict, example: dict, trajectory: dict, match_explanation: str) -> str:
    """Which of issue 35's findings explains a moved score, by rules read off the records
    (docs/stepwise-grader.md states the findings' rules); ``"unexplained"`` when none applies,
    which is what to look at first.

    * finding 6: ``steps_exact`` scored before and not now, on an example given by milestones
      alone (no expected steps or calls);
    * finding 1: the trajectory holds a model turn of two or more calls, the example's
      milestones read results (``$from``), and this checkout's ``trajectory_match`` names a
      step ``out of order``: a value used in the turn that returned it;
    * finding 5: ``step_precision`` unscored before and 0 now (an all-wrong trajectory), or
      the same matched steps over a larger count that the calls left out before as allowed
      extras account for (calls that aimed at a milestone and missed count now).
    """
    old, new = diff["old"], diff["new"]
    if (grader == "steps_exact" and new == "absent" and old != "absent" and example.get("milestones") is not None
            and not example.get("expected_steps") and not example.get("expected_calls")):
        return "finding 6"
    turns = [s for s in trajectory.get("steps", []) if s.get("kind") == "model" and len(s.get("tool_calls") or []) >= 2]
    if turns and "$from" in json.dumps(example.get("milestones")) and "out of order" in match_explanation:
        return "finding 1"
    if grader == "step_precision":
        if old == "absent" and new == 0:
            return "finding 5 (all wrong: 0, was unscored)"
        was, now, extras = (COUNTED.search(diff["old_explanation"]), COUNTED.search(diff["new_explanation"]),
                            LEFT_OUT.search(diff["old_explanation"]))
        if was and now and extras and was[1] == now[1] and 0 < int(now[2]) - int(was[2]) <= int(extras[1]):
            return "finding 5 (missed calls count)"
    return "unexplained"


def find_local_runs(roots: list[Path]) -> list[Path]:
    """Run directories under ``roots`` whose ``run.json`` names the bundled local model."""
    found = []
    for root in roots:
        for path in sorted(root.rglob("run.json")):
            try:
                record = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            model = record.get("model")
            spec = model if isinstance(model, str) else (model or {}).get("spec", "") if isinstance(model, dict) else ""
            if isinstance(spec, str) and (spec == "local" or spec.startswith("local:")) and (path.parent / "trajectories.jsonl").exists():
                found.append(path.parent)
    return found


def dataset_of(run_dir: Path) -> tuple[Path | None, str]:
    """The dataset a run recorded, or the built-in set of the same name in this checkout when
    the recorded file is gone (a worktree since removed)."""
    record = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))
    path = (record.get("dataset") or {}).get("path")
    if path and Path(path).exists():
        return Path(path), ""
    if path:
        local = sorted(ROOT.glob(f"toolgym/suites/*/datasets/{record.get('env')}/{Path(path).name}"))
        if local:
            return local[0], f"recorded dataset gone; graded against this checkout's {local[0].relative_to(ROOT)}"
    return None, "no dataset"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", type=Path, help="another toolgym checkout (its code grades the same inputs)")
    parser.add_argument("--work", type=Path, help="keep the generated inputs and graded copies here (default: a temporary folder)")
    parser.add_argument("--runs-under", type=Path, action="append", default=[],
                        help="search here for run directories of the bundled local model (repeatable)")
    parser.add_argument("--langchain", type=Path, default=LANGCHAIN,
                        help="the published LangChain tool-usage files (graded besides the built-in test sets)")
    parser.add_argument("--run", type=Path, action="append", default=[],
                        help="a run directory to compare besides those found (repeatable)")
    parser.add_argument("--jmultiwoz", type=Path, default=JMULTIWOZ)
    parser.add_argument("--published", type=Path, default=PUBLISHED, help="the published JMultiWOZ-TC evaluate.py")
    parser.add_argument("--bfcl", type=Path, default=BFCL, help="the BFCL v4 data folder")
    parser.add_argument("--skip", default="", help="comma-separated: langchain, local (and --run), jmultiwoz, bfcl")
    parser.add_argument("--json", type=Path, help="write every row and difference here")
    parser.add_argument("--worker", choices=("generate", "fit", "bfcl"), help=argparse.SUPPRESS)
    parser.add_argument("paths", nargs="*", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker == "generate":
        worker_generate(args.paths[0], args.paths[1] if len(args.paths) > 1 else None)
        return 0
    if args.worker == "fit":
        worker_fit(args.paths[0])
        return 0
    if args.worker == "bfcl":
        worker_bfcl_results(args.paths[0], args.paths[1])
        return 0
    if args.baseline is None:
        parser.error("--baseline DIR is required")
    baseline = args.baseline.resolve()
    if not (baseline / "toolgym" / "__init__.py").exists():
        parser.error(f"--baseline {baseline}: not a toolgym checkout (no toolgym/__init__.py)")
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    checkouts = {"baseline": baseline, "this": ROOT}
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp_name:
        work = args.work.resolve() if args.work else Path(tmp_name)
        work.mkdir(parents=True, exist_ok=True)
        rows: list[dict] = []
        notes: list[str] = []

        if "langchain" not in skip:
            gen = run_in(ROOT, [str(Path(__file__).resolve()), "--worker", "generate", str(work), str(args.langchain)])
            if gen.returncode != 0:
                raise SystemExit(f"generating the trajectories failed:\n{gen.stderr[-3000:]}")
            order = [label for label, _, _ in sets_of(args.langchain)]
            for folder in sorted((work / "merged").iterdir(), key=lambda p: order.index(p.name)):
                dataset = Path((folder / "dataset.txt").read_text(encoding="utf-8"))
                sets = [(folder.name, dataset, folder / "examples.jsonl", ())]
                if (folder / "milestones_alone.jsonl").exists():
                    alone = folder / "milestones_alone.jsonl"
                    sets.append((f"{folder.name}, milestones alone", alone, alone, ()))
                if " (" not in folder.name:  # agentevals' modes, on the examples without milestones
                    sets += [(f"{folder.name}, --trajectory-mode {mode}", dataset, folder / "examples.jsonl",
                              ("--trajectory-mode", mode, "--grader", "trajectory_match")) for mode in MODES]
                recorded = {(t["example_id"], t.get("trial", 0)): t for t in _jsonl(folder / "trajectories.jsonl")}
                for label, dataset, loaded, options in sets:
                    graded = {}
                    for name, checkout in checkouts.items():
                        dest = work / "graded" / name / re.sub(r"[^A-Za-z0-9_.-]+", "_", label)
                        scores, note = grade_copy(checkout, folder, dest, dataset, options=options)
                        if scores is None:
                            raise SystemExit(f"{name} could not grade {label}: {note}")
                        if note and not options:
                            notes.append(f"{label} ({name}): {note}")
                        graded[name] = scores
                    examples = {ex["id"]: ex for ex in _jsonl(loaded)}
                    compared = compare(label, graded["baseline"], graded["this"], lambda s: VARIANTS[s.get("trial", 0)],
                                       examples, recorded)
                    rows += [r for r in compared if not options or r["grader"] == "trajectory_match"]

        if "local" not in skip:
            found = find_local_runs([p.resolve() for p in args.runs_under])
            for run_dir in found + [p.resolve() for p in args.run if p.resolve() not in found]:
                label = ("local model: " if run_dir in found else "run: ") + "/".join(run_dir.parts[-3:])
                dataset, why = dataset_of(run_dir)
                if dataset is None:
                    notes.append(f"{run_dir}: skipped ({why})")
                    continue
                safe = str(run_dir).strip("/").replace("/", "+")
                # the baseline first: the trajectories it can read are the ones both grade
                old, note = grade_copy(baseline, run_dir, work / "graded" / "baseline" / "local" / safe, dataset)
                if old is None:
                    notes.append(f"{run_dir}: not compared (the baseline cannot grade it: {note})")
                    continue
                kept = work / "graded" / "baseline" / "local" / safe / "trajectories.jsonl"
                new, note_new = grade_copy(ROOT, run_dir, work / "graded" / "this" / "local" / safe, dataset, kept)
                if new is None:
                    notes.append(f"{run_dir}: not compared (this checkout cannot grade it: {note_new})")
                    continue
                for text in (why, note, note_new):
                    if text:
                        notes.append(f"{run_dir}: {text}")
                examples = {ex["id"]: ex for ex in _jsonl(dataset)}
                recorded = {(t["example_id"], t.get("trial", 0)): t for t in _jsonl(kept)}
                rows += compare(label, old, new, lambda s: f"trial {s.get('trial', 0)}", examples, recorded)

        if "jmultiwoz" not in skip:
            rows += jmultiwoz(work, checkouts, args.jmultiwoz, args.published, notes)

        if "bfcl" not in skip:
            rows += bfcl(work, checkouts, args.bfcl, notes)

        report(rows, notes, baseline, time.perf_counter() - start)
        if args.json:
            args.json.write_text(json.dumps({"rows": rows, "notes": notes}, indent=1, ensure_ascii=False), encoding="utf-8")
    return 0


def jmultiwoz(work: Path, checkouts: dict[str, Path], dataset: Path, published: Path, notes: list[str]) -> list[dict]:
    """JMultiWOZ-TC: the benchmark's result file imported and graded by each checkout; the five
    published rows of each, and of the published script."""
    folder = work / "jmultiwoz"
    folder.mkdir(parents=True, exist_ok=True)
    result = folder / "result_drift.json"
    made = run_in(ROOT, [str(ROOT / "benchmarks" / "jmultiwoz_grading.py"), "--dataset", str(dataset),
                         "--write-result", str(result)])
    if made.returncode != 0:
        raise SystemExit(f"writing the JMultiWOZ-TC result file failed: {made.stderr[-2000:]}")
    graded, five = {}, {}
    for name, checkout in checkouts.items():
        out = folder / name
        shutil.rmtree(out, ignore_errors=True)
        done = run_in(checkout, [str(checkout / "run_agent.py"), "grade", "--env", "jmultiwoz_tc", "--result", str(result),
                                 "--dataset", str(dataset), "--out", str(out)])
        if done.returncode != 0:
            raise SystemExit(f"{name} could not grade the JMultiWOZ-TC result: {done.stderr[-2000:]}")
        graded[name] = _jsonl(out / "scores.jsonl")
        five[name] = [json.loads(x) for x in (out / "score_drift.json").read_text(encoding="utf-8").splitlines()[:5]]
    rows = compare("jmultiwoz_tc (31,303 turns)", graded["baseline"], graded["this"])
    if published.exists():
        pub = folder / "published"
        pub.mkdir(exist_ok=True)
        with zipfile.ZipFile(dataset) as archive:
            for name in ("jmultiwoz_tc_ground.json", "jmultiwoz_tc_input.json"):
                (pub / name).write_bytes(archive.read(name))
        with open(pub / "stdout.txt", "w") as fh:
            subprocess.run([sys.executable, str(published), "--result", str(result)], cwd=pub, stdout=fh, check=True)
        five["published evaluate.py"] = [json.loads(x) for x in (pub / "score_drift.json").read_text(encoding="utf-8").splitlines()[:5]]
    for name, values in five.items():
        notes.append(f"jmultiwoz_tc five rows, {name}: {json.dumps(values, ensure_ascii=False)}")
    equal = all(v == five["baseline"] for v in five.values())
    notes.append(f"jmultiwoz_tc: the five rows are {'equal' if equal else 'NOT equal'} across {', '.join(five)}")
    rows.append({"set": "jmultiwoz_tc (31,303 turns)", "grader": "the five published rows", "n_old": 5, "n_new": 5,
                 "diffs": [] if five["baseline"] == five["this"] else [
                     {"example": "five rows", "variant": "", "old": five["baseline"], "new": five["this"],
                      "old_explanation": "", "new_explanation": ""}]})
    return rows


def bfcl(work: Path, checkouts: dict[str, Path], data: Path, notes: list[str]) -> list[dict]:
    """BFCL single-turn: the benchmark's result file of each category imported and graded by
    each checkout; per-entry scores and the accuracy of the score file."""
    folder = work / "bfcl"
    made = run_in(ROOT, [str(Path(__file__).resolve()), "--worker", "bfcl", str(folder / "results"), str(data)])
    if made.returncode != 0:
        raise SystemExit(f"writing the BFCL result files failed: {made.stderr[-2000:]}")
    rows = []
    for category in json.loads(made.stdout.strip().splitlines()[-1]):
        result = folder / "results" / f"BFCL_v4_{category}_result.json"
        graded, accuracy = {}, {}
        for name, checkout in checkouts.items():
            out = folder / name / category
            shutil.rmtree(out, ignore_errors=True)
            done = run_in(checkout, [str(checkout / "run_agent.py"), "grade", "--env", "bfcl", "--result", str(result),
                                     "--dataset", str(data / f"BFCL_v4_{category}.json"), "--out", str(out)])
            if done.returncode != 0:
                raise SystemExit(f"{name} could not grade BFCL {category}: {done.stderr[-2000:]}")
            graded[name] = _jsonl(out / "scores.jsonl")
            head = json.loads((out / f"BFCL_v4_{category}_score.json").read_text(encoding="utf-8").splitlines()[0])
            accuracy[name] = (head.get("accuracy"), head.get("correct_count"), head.get("total_count"))
        label = f"bfcl {category}"
        rows += compare(label, graded["baseline"], graded["this"])
        rows.append({"set": label, "grader": "accuracy (score file)", "n_old": 1, "n_new": 1,
                     "diffs": [] if accuracy["baseline"] == accuracy["this"] else [
                         {"example": "score file", "variant": "", "old": accuracy["baseline"], "new": accuracy["this"],
                          "old_explanation": "", "new_explanation": ""}]})
        notes.append(f"bfcl {category}: accuracy (correct/total) baseline {accuracy['baseline']}, this {accuracy['this']}")
    return rows


def report(rows: list[dict], notes: list[str], baseline: Path, seconds: float) -> None:
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"baseline: {baseline}; this checkout: {ROOT}; {seconds:.0f} s; load average at the end {load}\n")
    print("| set | grader | scores (baseline) | scores (this) | differ | likely cause of the differences |")
    print("|---|---|---:|---:|---:|---|")
    for row in rows:
        causes = Counter(d.get("cause") or "not classified" for d in row["diffs"])
        text = ", ".join(f"{cause}: {n}" for cause, n in sorted(causes.items()))
        print(f"| {row['set']} | {row['grader']} | {row['n_old']:,} | {row['n_new']:,} | {len(row['diffs']):,} | {text} |")
    moved = [r for r in rows if r["diffs"]]
    if moved:
        print("\nDifferences (example, variant or trial: baseline -> this):")
    for row in moved:
        print(f"\n{row['set']} / {row['grader']}:")
        for d in row["diffs"]:
            cause = f"  ({d['cause']})" if d.get("cause") else ""
            print(f"  {d['example']} [{d['variant']}]: {fmt(d['old'])} -> {fmt(d['new'])}{cause}")
            if d["old_explanation"] or d["new_explanation"]:
                print(f"      baseline: {d['old_explanation'][:200]}")
                print(f"      this:     {d['new_explanation'][:200]}")
    if notes:
        print("\nNotes:")
        for note in notes:
            print(f"  {note}")


def fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else value


if __name__ == "__main__":
    sys.exit(main())
