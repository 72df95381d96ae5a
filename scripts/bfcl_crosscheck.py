"""Compare toolgym's BFCL checker with the leaderboard's own ``ast_checker`` on the same answers.

Needs a checkout of github.com/ShishirPatil/gorilla (its code is imported from there, never
copied here) and the BFCL v4 data. For every entry of the 10 AST categories it builds the
oracle's answer (function names as in the data) and systematic mistakes (no call, an extra
call, reversed and missing parallel calls, a wrong function name, an unexpected argument, each
argument dropped, and each value changed: off by one, int/float/str/bool swapped, strings
changed in case, spacing and punctuation, lists reversed, cut and extended, dicts with a key
more or less), checks each with both checkers, and counts the answers whose verdict
(valid, error_type) differs.

The leaderboard's ``bfcl_eval.constants.model_config`` pulls in every model handler; it is
replaced by a stub in which no model turns dots into underscores (names are given as in the
data), which is all ``ast_checker`` reads from it.

Usage: python scripts/bfcl_crosscheck.py --gorilla PATH/TO/gorilla [--data ../shared/data/bfcl_v4]
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import types
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def changed_values(value, language: str) -> list:
    """Wrong or re-typed variants of one argument value."""
    if language != "python":
        return [value + "x", 5, "", value.upper()] if isinstance(value, str) else [str(value)]
    if isinstance(value, bool):
        return [not value, int(value), str(value)]
    if isinstance(value, int):
        return [value + 1, float(value), str(value), True]
    if isinstance(value, float):
        return [value + 0.5, int(value), str(value)]
    if isinstance(value, str):
        return [value + "zz", value.upper(), " " + value.replace(" ", "-"), 7, [value]]
    if isinstance(value, list):
        return [value[::-1], value[:-1], value + value[:1], [str(x) for x in value], tuple(value)]
    if isinstance(value, dict):
        return [{**value, "zz": 1}, {k: value[k] for k in list(value)[:-1]},
                {k: (str(x) if not isinstance(x, str) else x + "q") for k, x in value.items()}]
    return [None]


def answers(calls: list[dict], language: str):
    """The oracle's answer, then its systematic mistakes."""
    yield calls
    yield []
    yield calls + calls[:1]
    if len(calls) > 1:
        yield calls[::-1]
        yield calls[1:]
    for i, call in enumerate(calls):
        name, args = next(iter(call.items()))
        yield calls[:i] + [{name + "_x": args}] + calls[i + 1:]
        yield calls[:i] + [{name: {**args, "zz_extra": 1}}] + calls[i + 1:]
        for key, value in args.items():
            yield calls[:i] + [{name: {a: b for a, b in args.items() if a != key}}] + calls[i + 1:]
            for other in changed_values(value, language):
                yield calls[:i] + [{name: {**args, key: other}}] + calls[i + 1:]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gorilla", required=True, help="a checkout of github.com/ShishirPatil/gorilla")
    parser.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "bfcl_v4"))
    parser.add_argument("--show", type=int, default=20, help="differences to print")
    args = parser.parse_args()

    stub = types.ModuleType("bfcl_eval.constants.model_config")
    stub.MODEL_CONFIG_MAPPING = type("Configs", (dict,), {"__getitem__": lambda self, key: types.SimpleNamespace(underscore_to_dot=False)})()
    sys.modules["bfcl_eval.constants.model_config"] = stub
    sys.path.insert(0, str(Path(args.gorilla) / "berkeley-function-call-leaderboard"))
    from bfcl_eval.constants.enums import Language
    from bfcl_eval.eval_checker.ast_eval.ast_checker import ast_checker

    from toolgym.suites.bfcl.checker import check
    from toolgym.suites.bfcl.data import CATEGORIES, entry_of, load_examples

    languages = {"python": Language.PYTHON, "java": Language.JAVA, "javascript": Language.JAVASCRIPT}
    counts, differences = Counter(), []
    for category in CATEGORIES:
        for example in load_examples(Path(args.data) / f"BFCL_v4_{category}.json", {}):
            entry = entry_of(example)
            if entry.kind in ("irrelevance", "relevance"):
                continue
            names = {f["name"].replace(".", "_"): f["name"] for f in entry.functions}
            oracle = [{names.get(c.name, c.name): dict(c.arguments)} for c in example.expected_calls or []]
            for answer in answers(oracle, entry.language):
                mine = check(entry, copy.deepcopy(answer))
                try:
                    theirs = ast_checker(copy.deepcopy(entry.functions), copy.deepcopy(answer), copy.deepcopy(entry.ground_truth),
                                         languages[entry.language], category, "model")
                    official = (theirs["valid"], None if theirs["valid"] else theirs.get("error_type"))
                except Exception as exc:  # the leaderboard's checker raising is a difference too
                    official = ("raised", type(exc).__name__)
                ours = (mine.valid, mine.error_type)
                counts["same" if ours == official else "different"] += 1
                counts["valid"] += ours[0] is True
                if ours != official:
                    differences.append((example.id, json.dumps(answer, default=str)[:160], ours, official))
    print(f"answers: {counts['same'] + counts['different']}, same verdict and error_type: {counts['same']}, "
          f"different: {counts['different']} (valid by toolgym: {counts['valid']})")
    for difference in differences[: args.show]:
        print(*difference)
    return 0 if not differences else 1


if __name__ == "__main__":
    sys.exit(main())
