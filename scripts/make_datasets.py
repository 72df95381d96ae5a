"""Rebuild the built-in datasets this script owns (``python -m scripts.make_datasets``).

* ``relational_data/test.jsonl``: hand-written questions over the built-in tables; each has its
  reference calls and an answer rule, and its reference answer is computed by replaying the
  calls on a fresh environment (so it can never disagree with the tools).
* ``multiverse_math/test.jsonl``: hand-written word problems, each with the expression that
  solves it; expected calls and the answer come from evaluating that expression with the
  environment's own (altered) operations.
* ``<env>/ladder.jsonl`` for the four environments: seeded difficulty ladders (seed 0,
  3 examples per level, default levels).
* ``<env>/multi_turn.jsonl`` for the four environments: hand-written conversations whose
  request arrives in pieces or changes midway (scripted ``turns``), each expected call marked
  with the user turn that makes it, and ``<env>/simulated_user.jsonl`` for typewriter_1 and
  relational_data: the same kind of task for a simulated user (``user``); see
  docs/multi-turn.md.
"""

from __future__ import annotations

from pathlib import Path

from toolgym.data import write_examples
from toolgym.generators import generate
from toolgym.records import Example
from toolgym.suites.multiverse_math.environment import MultiverseMath
from toolgym.suites.relational_data.environment import make_example


def c(tool_name: str, /, **arguments) -> dict:
    return {"name": tool_name, "arguments": arguments}


LAST = {"op": "last"}

# (question, calls, answer rule, order_matters)
RELATIONAL = [
    # 1 hop
    ("Which city is location 46 in?", [c("get_city_for_location", location_id=46)], LAST, True),
    ("What is the name of the food with id 369?", [c("get_food_name", food_id=369)], LAST, True),
    ("What is Priya's user id?", [c("find_users_by_name", name="Priya")], {"op": "first_id"}, True),
    ("What is my user id?", [c("get_current_user_id")], LAST, True),
    ("How many users are there?", [c("list_user_ids")], {"op": "count"}, True),
    # 2 hops
    ("What is Kwame's email address?",
     [c("find_users_by_name", name="Kwame"), c("get_user_email", user_id=158)], LAST, True),
    ("What is the weather like in Oslo right now?",
     [c("find_locations_by_name", city="Oslo"), c("get_current_weather_for_location", location_id=31)], LAST, True),
    ("How many calories are in a serving of paella?",
     [c("find_foods_by_name", food="paella"), c("get_food_calories", food_id=322)], LAST, True),
    ("What is my name?", [c("get_current_user_id"), c("get_user_name", user_id=190)], LAST, True),
    ("Can someone with a sesame allergy safely eat falafel?",
     [c("find_foods_by_name", food="falafel"), c("get_food_allergic_ingredients", food_id=318)],
     {"op": "lacks", "value": "Sesame"}, True),
    ("What time is it in Montreal right now?",
     [c("find_locations_by_name", city="Montreal"), c("get_current_time_for_location", location_id=58)], LAST, True),
    ("What is Selma's favourite colour?",
     [c("find_users_by_name", name="Selma"), c("get_user_favorite_color", user_id=203)], LAST, True),
    # 3 hops
    ("Which city does Tomasz live in?",
     [c("find_users_by_name", name="Tomasz"), c("get_user_location", user_id=117),
      c("get_city_for_location", location_id=58)], LAST, True),
    ("What is the weather where I live?",
     [c("get_current_user_id"), c("get_user_location", user_id=190),
      c("get_current_weather_for_location", location_id=46)], LAST, True),
    ("What is the name of Priya's favourite food (the first one on her list)?",
     [c("find_users_by_name", name="Priya"), c("get_user_favorite_foods", user_id=123),
      c("get_food_name", food_id=395)], LAST, True),
    ("Does Ingrid need an umbrella if she goes outside now?",
     [c("find_users_by_name", name="Ingrid"), c("get_user_location", user_id=104),
      c("get_current_weather_for_location", location_id=31)], {"op": "contains", "value": "rain"}, True),
    ("How many allergenic ingredients does my favourite food (the first on my list) have?",
     [c("get_current_user_id"), c("get_user_favorite_foods", user_id=190),
      c("get_food_allergic_ingredients", food_id=301)], {"op": "count"}, True),
    # 4 hops
    ("Do Lucia and Ana Sofia live in the same city?",
     [c("find_users_by_name", name="Lucia"), c("find_users_by_name", name="Ana Sofia"),
      c("get_user_location", user_id=162), c("get_user_location", user_id=245)],
     {"op": "equal", "tool": "get_user_location"}, False),
    ("Do Kwame and Selma use the same email provider?",
     [c("find_users_by_name", name="Kwame"), c("find_users_by_name", name="Selma"),
      c("get_user_email", user_id=158), c("get_user_email", user_id=203)],
     {"op": "same_domain", "tool": "get_user_email"}, False),
    ("How many calories do Priya's two favourite foods have together, one serving each?",
     [c("find_users_by_name", name="Priya"), c("get_user_favorite_foods", user_id=123),
      c("get_food_calories", food_id=395), c("get_food_calories", food_id=369)],
     {"op": "sum", "tool": "get_food_calories"}, False),
    ("Do Lucia and Kwame have the same favourite colour?",
     [c("find_users_by_name", name="Lucia"), c("find_users_by_name", name="Kwame"),
      c("get_user_favorite_color", user_id=162), c("get_user_favorite_color", user_id=158)],
     {"op": "equal", "tool": "get_user_favorite_color"}, False),
    ("Is my favourite colour the same as Ana Sofia's?",
     [c("get_current_user_id"), c("find_users_by_name", name="Ana Sofia"),
      c("get_user_favorite_color", user_id=190), c("get_user_favorite_color", user_id=245)],
     {"op": "equal", "tool": "get_user_favorite_color"}, False),
    # 5 hops
    ("How many calories are in Kwame's three favourite foods combined, one serving each?",
     [c("find_users_by_name", name="Kwame"), c("get_user_favorite_foods", user_id=158),
      c("get_food_calories", food_id=322), c("get_food_calories", food_id=318),
      c("get_food_calories", food_id=384)], {"op": "sum", "tool": "get_food_calories"}, False),
    ("What is the total calorie count of one serving of each of my favourite foods?",
     [c("get_current_user_id"), c("get_user_favorite_foods", user_id=190),
      c("get_food_calories", food_id=301), c("get_food_calories", food_id=395),
      c("get_food_calories", food_id=356)], {"op": "sum", "tool": "get_food_calories"}, False),
    ("Is it the same local time where Selma lives as in Montreal?",
     [c("find_users_by_name", name="Selma"), c("get_user_location", user_id=203),
      c("get_current_time_for_location", location_id=73), c("find_locations_by_name", city="Montreal"),
      c("get_current_time_for_location", location_id=58)],
     {"op": "equal", "tool": "get_current_time_for_location"}, False),
    ("How many of Ana Sofia's favourite foods contain dairy?",
     [c("find_users_by_name", name="Ana Sofia"), c("get_user_favorite_foods", user_id=245),
      c("get_food_allergic_ingredients", food_id=356), c("get_food_allergic_ingredients", food_id=384),
      c("get_food_allergic_ingredients", food_id=322)],
     {"op": "count_containing", "tool": "get_food_allergic_ingredients", "value": "Dairy"}, False),
]

MULTIVERSE = [
    ("A shop sells 4 apples in the morning and 9 in the afternoon. How many apples does it sell in total?", "add(4, 9)"),
    ("A tank holds 50 litres and 18 litres leak out. How many litres are left?", "subtract(50, 18)"),
    ("Each of 6 boxes holds 12 eggs. How many eggs are there?", "multiply(6, 12)"),
    ("84 sweets are shared equally among 7 children. How many sweets does each child get?", "divide(84, 7)"),
    ("What is 3 to the power of 3?", "power(3, 3)"),
    ("What is the logarithm of 1000 to base 10?", "log(1000, 10)"),
    ("A ramp rises at an angle of 0.6 radians. What is the sine of that angle?", "sin(0.6)"),
    ("The temperature was -4 degrees and then dropped by 6 degrees. What is the temperature now?", "subtract(-4, 6)"),
    ("A train covers 120 km in 1.5 hours. What is its average speed in km per hour?", "divide(120, 1.5)"),
    ("A wheel has a radius of 3 metres. What is its circumference (2 times pi times the radius)?",
     "multiply(multiply(2, pi()), 3)"),
    ("I bought 3 packs of 8 pencils and then gave away 5 pencils. How many pencils do I have left?",
     "subtract(multiply(3, 8), 5)"),
    ("A runner runs 5 km on Monday, 7 km on Tuesday and 9 km on Wednesday. How far did she run in total?",
     "add(add(5, 7), 9)"),
    ("A cake needs 250 grams of flour. The flour for 4 cakes is split evenly between 2 bowls. How much flour goes in each bowl?",
     "divide(multiply(250, 4), 2)"),
    ("A square garden has sides of 6 metres and contains a square pond with sides of 2 metres. "
     "How many square metres of the garden are not pond?", "subtract(power(6, 2), power(2, 2))"),
    ("What is the area of a circle of radius 5 (pi times the radius squared)?", "multiply(pi(), power(5, 2))"),
    ("A bacteria culture doubles every hour. Starting with 3 bacteria, how many are there after 4 hours "
     "(3 times 2 to the power of 4)?", "multiply(3, power(2, 4))"),
    ("What is the average of 10, 20 and 30 (their sum divided by 3)?", "divide(add(add(10, 20), 30), 3)"),
    ("What is the negation of the sum of 8 and 13?", "negate(add(8, 13))"),
    ("Take the logarithm of 64 to base 2 and multiply it by 5.", "multiply(log(64, 2), 5)"),
    ("Square the sine of 1 radian.", "power(sin(1), 2)"),
    ("What is the cosine of pi divided by 3?", "cos(divide(pi(), 3))"),
    ("A farmer has 3 fields with 14 cows each and 2 fields with 9 sheep each. How many animals does the farmer have?",
     "add(multiply(3, 14), multiply(2, 9))"),
    ("Tickets cost 12 dollars for adults and 7 dollars for children. How much do 2 adults and 3 children pay "
     "after a 5 dollar discount?", "subtract(add(multiply(2, 12), multiply(3, 7)), 5)"),
    ("Add 2 and 3, square the result, then take the logarithm of that to base 10.", "log(power(add(2, 3), 2), 10)"),
    ("Subtract the product of 4 and 5 from the product of 10 and 6, then divide the result by 4.",
     "divide(subtract(multiply(10, 6), multiply(4, 5)), 4)"),
]


SUITES = Path(__file__).resolve().parents[1] / "toolgym" / "suites"
FOLDERS = {
    "relational_data": SUITES / "relational_data" / "datasets" / "relational_data",
    "multiverse_math": SUITES / "multiverse_math" / "datasets" / "multiverse_math",
    "typewriter_1": SUITES / "typewriter" / "datasets" / "typewriter_1",
    "typewriter_26": SUITES / "typewriter" / "datasets" / "typewriter_26",
}


# (id, turns, calls per turn): typewriter conversations; each turn's text is typed after the last
TYPEWRITER_TURNS = [
    ("tw-mt-01", ["ab", "Now also type: c"], ["ab", "c"]),
    ("tw-mt-02", ["cat", "Add an s at the end: s"], ["cat", "s"]),
    ("tw-mt-03", ["do", "Now type: g"], ["do", "g"]),
    ("tw-mt-04", ["a", "Also type: b", "And finally: c"], ["a", "b", "c"]),
    ("tw-mt-05", ["sun", "Keep going, type: ny"], ["sun", "ny"]),
]

# (id, turns, calls per turn, answer rule): the second question follows up on the first answer
RELATIONAL_TURNS = [
    ("rd-mt-01", ["Who is Kwame?", "And what is his email address?"],
     [[c("find_users_by_name", name="Kwame")], [c("get_user_email", user_id=158)]], LAST),
    ("rd-mt-02", ["Which city is location 46 in?", "What is the weather there right now?"],
     [[c("get_city_for_location", location_id=46)], [c("get_current_weather_for_location", location_id=46)]], LAST),
    ("rd-mt-03", ["What is my user id?", "What is my name?"],
     [[c("get_current_user_id")], [c("get_user_name", user_id=190)]], LAST),
    ("rd-mt-04", ["Find the user Selma.", "What is her favourite colour?"],
     [[c("find_users_by_name", name="Selma")], [c("get_user_favorite_color", user_id=203)]], LAST),
]

# (id, turns, expression): the follow-up works on the previous result
MULTIVERSE_TURNS = [
    ("mm-mt-01", ["A shop sells 4 apples in the morning and 9 in the afternoon. How many apples does it sell in total?",
                  "The next day it sells twice that many. How many is that?"], "multiply(add(4, 9), 2)"),
    ("mm-mt-02", ["A tank holds 50 litres and 18 litres leak out. How many litres are left?",
                  "Then 7 more litres leak out. How many litres are left now?"], "subtract(subtract(50, 18), 7)"),
    ("mm-mt-03", ["What is 3 to the power of 2?", "Add 5 to that."], "add(power(3, 2), 5)"),
    ("mm-mt-04", ["Multiply 6 by 7.", "Now divide the result by 3."], "divide(multiply(6, 7), 3)"),
]

SIMULATED_TYPEWRITER = [
    ("tw-su-01", "ab", ["ab", "c"], "You want the paper to read exactly 'abc'. You have asked for 'ab'. When the "
     "assistant says it has typed it, ask it to also type the letter c. When it says it has, you are done."),
    ("tw-su-02", "hi", ["hi", "t"], "You want the paper to read exactly 'hit'. You have asked for 'hi'. When the "
     "assistant says it has typed it, ask it to also type the letter t. When it says it has, you are done."),
]

SIMULATED_RELATIONAL = [
    ("rd-su-01", "Who is Kwame?", [[c("find_users_by_name", name="Kwame")], [c("get_user_email", user_id=158)]],
     "You want Kwame's email address, but you start by asking who Kwame is. Once the assistant has told you, ask "
     "for his email address. When it gives you the address, you are done."),
    ("rd-su-02", "Which city is location 46 in?",
     [[c("get_city_for_location", location_id=46)], [c("get_current_weather_for_location", location_id=46)]],
     "You want to know the weather at location 46, but you start by asking which city it is in. Once the assistant "
     "has told you, ask what the weather is there right now. When it tells you, you are done."),
]


def _typed(env: str, text: str, turn: int) -> list[dict]:
    if env == "typewriter_1":
        return [{"name": "type_letter", "arguments": {"letter": x}, "turn": turn} for x in text]
    return [{"name": x, "arguments": {}, "turn": turn} for x in text]


def _turned(calls: list[list[dict]]) -> list[dict]:
    return [{**call, "turn": k} for k, turn_calls in enumerate(calls, 1) for call in turn_calls]


def _as_turn_1(example: Example) -> dict:
    """An example's record with the ``turn`` of turn 1's calls left implicit (none is turn 1)."""
    record = example.model_dump(exclude_none=True)
    for call in record.get("expected_calls", []):
        if call.get("turn") == 1:
            del call["turn"]
    return record


def multi_turn_examples(env: str) -> list[Example]:
    """The scripted multi-turn conversations of ``env`` (see the module docstring)."""
    from toolgym.replay import replay_calls
    from toolgym.runner import resolve_benchmark

    out = []
    if env.startswith("typewriter"):
        for example_id, turns, pieces in TYPEWRITER_TURNS:
            calls = [call for k, piece in enumerate(pieces, 1) for call in _typed(env, piece, k)]
            states = [{"paper": "".join(pieces[:k])} for k in range(1, len(pieces) + 1)]
            out.append(Example.model_validate(_as_turn_1(Example(
                id=example_id, input=turns[0], turns=turns[1:], expected_calls=calls, reference=states[-1]["paper"],
                expected_state=states[-1], expected_states=states,
                metadata={"n_steps": len(calls), "difficulty": len(turns), "source": "hand-written"}))))
    elif env == "relational_data":
        for example_id, turns, per_turn, rule in RELATIONAL_TURNS:
            flat = [call for turn_calls in per_turn for call in turn_calls]
            base = make_example(example_id, turns[0], flat, rule, True, {"difficulty": len(turns), "source": "hand-written"},
                                milestones=True)
            record = {**base.model_dump(exclude_none=True), "turns": turns[1:], "expected_calls": _turned(per_turn)}
            # one milestone per call, in order: each names the user turn of its call
            record["milestones"] = [{**m, "turn": c["turn"]} for m, c in zip(record["milestones"], _turned(per_turn),
                                                                           strict=True)]
            out.append(Example.model_validate(_as_turn_1(Example.model_validate(record))))
    elif env == "multiverse_math":
        for example_id, turns, expression in MULTIVERSE_TURNS:
            base = MultiverseMath.example_from_expression(example_id, turns[0], expression, {"source": "hand-written"})
            calls = [{**call.model_dump(), "turn": 1 if k < len(base.expected_calls) - 1 else 2}
                     for k, call in enumerate(base.expected_calls)]
            record = {**base.model_dump(exclude_none=True), "turns": turns[1:], "expected_calls": calls,
                      "expected_states": [{"calls": len(calls) - 1}, {"calls": len(calls)}]}
            out.append(Example.model_validate(_as_turn_1(Example.model_validate(record))))
    benchmark, _ = resolve_benchmark(env)
    for example in out:  # the states and answers are the environment's own
        replayed = replay_calls(benchmark, example, example.expected_calls or [])
        assert replayed.turn_states is not None and replayed.status == "completed", example.id
    return out


def simulated_user_examples(env: str) -> list[Example]:
    """The simulated-user conversations of ``env`` (typewriter_1 and relational_data)."""
    out = []
    if env == "typewriter_1":
        for example_id, first, pieces, instructions in SIMULATED_TYPEWRITER:
            calls = [call for k, piece in enumerate(pieces, 1) for call in _typed(env, piece, k)]
            states = [{"paper": "".join(pieces[:k])} for k in range(1, len(pieces) + 1)]
            out.append(Example.model_validate(_as_turn_1(Example(
                id=example_id, input=first, user={"instructions": instructions, "max_turns": 4},
                expected_calls=calls, expected_state=states[-1], expected_states=states,
                metadata={"n_steps": len(calls), "difficulty": len(pieces), "source": "hand-written"}))))
    elif env == "relational_data":
        for example_id, first, per_turn, instructions in SIMULATED_RELATIONAL:
            flat = [call for turn_calls in per_turn for call in turn_calls]
            base = make_example(example_id, first, flat, LAST, True, {"difficulty": len(per_turn), "source": "hand-written"})
            record = {**base.model_dump(exclude_none=True), "user": {"instructions": instructions, "max_turns": 4},
                      "expected_calls": _turned(per_turn)}
            out.append(Example.model_validate(_as_turn_1(Example.model_validate(record))))
    return out


def main() -> None:
    # where several call orders are valid (order_matters false), the example also gets
    # milestones: every call required, ordered by data flow only ($from where an id is looked up)
    rel = [
        make_example(f"rd-{i:02d}", q, calls, rule, order, {"difficulty": len(calls), "source": "hand-written"},
                     milestones=not order)
        for i, (q, calls, rule, order) in enumerate(RELATIONAL, 1)
    ]
    mm = [
        MultiverseMath.example_from_expression(f"mm-{i:02d}", q, expr, {"source": "hand-written"}, milestones=True)
        for i, (q, expr) in enumerate(MULTIVERSE, 1)
    ]
    for env, examples in (("relational_data", rel), ("multiverse_math", mm)):
        folder = FOLDERS[env]
        folder.mkdir(parents=True, exist_ok=True)
        write_examples(folder / "test.jsonl", examples)
        print(f"{env}/test.jsonl: {len(examples)} examples")
    for env in ("typewriter_1", "typewriter_26", "relational_data", "multiverse_math"):
        ladder = generate(env, seed=0, per_level=3)
        write_examples(FOLDERS[env] / "ladder.jsonl", ladder)
        print(f"{env}/ladder.jsonl: {len(ladder)} examples")
        conversations = multi_turn_examples(env)
        write_examples(FOLDERS[env] / "multi_turn.jsonl", conversations)
        print(f"{env}/multi_turn.jsonl: {len(conversations)} examples")
        simulated = simulated_user_examples(env)
        if simulated:
            write_examples(FOLDERS[env] / "simulated_user.jsonl", simulated)
            print(f"{env}/simulated_user.jsonl: {len(simulated)} examples")


if __name__ == "__main__":
    main()
