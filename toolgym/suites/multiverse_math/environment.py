"""Multiverse math: arithmetic whose operations have been altered, so the model must use the
tools instead of its own arithmetic.

The altered operations are those of the "Multiverse Math" task of the LangChain tool-usage
benchmark (github.com/langchain-ai/langchain-benchmarks,
``langchain_benchmarks/tool_usage/tasks/multiverse_math.py``)::

    multiply(a, b) = 1.1 * a * b          divide(a, b)  = 0.5 * a / b
    add(a, b)      = a + b + 1.2          subtract(a, b) = a - b - 3
    power(a, b)    = a ** (b + 2)         log(a, base)   = ln(a) / ln(|base + 1.5|)
    sin(x)         = cos(x)               cos(x)         = sin(x)
    pi()           = e                    negate(a)      = a

A result that is not a finite real number (division by zero, log of a non-positive number, a
negative number to a fractional power, overflow) is a tool error, never a crash.
"""

from __future__ import annotations

import ast
import inspect
import math
import random
from dataclasses import dataclass, field
from typing import Any, ClassVar

from toolgym.environments import Environment, ToolError, tool
from toolgym.records import Example

#: Published answers are reproduced within this relative tolerance.
ANSWER_REL_TOL = 1e-9


def _finite(value: float, what: str) -> float:
    if isinstance(value, complex) or not math.isfinite(value):
        raise ToolError(f"{what} is not a finite real number")
    return value


class MultiverseMath(Environment):
    """Ten altered math operations (stateless; the state is the number of calls made)."""

    name = "multiverse_math"

    instructions = (
        "You are solving math problems in a parallel universe where the basic operations have "
        "been changed and give different results from the ones you know. Do not compute "
        "anything yourself and do not trust your knowledge of arithmetic: use the tools for "
        "every operation, and pass each tool's result on exactly as returned. Commutativity "
        "and associativity still hold, distributivity does not. Use as few tool calls as "
        "possible. Reply with the final number only."
    )
    graders = ("steps_exact", "step_ratio", "answer_match")
    default_levels: ClassVar[tuple[int, ...]] = tuple(range(1, 9))
    replay_target: ClassVar[bool] = False  # the state counts calls, which is no target: final_state keeps to expected_state, as in LangChain

    def reset(self, example: Example) -> None:
        self.calls = 0

    def read_state(self) -> dict[str, Any]:
        return {"calls": getattr(self, "calls", 0)}

    def _count(self) -> None:
        self.calls = getattr(self, "calls", 0) + 1

    # --- tools ---------------------------------------------------------------------------
    @tool
    def multiply(self, a: float, b: float) -> float:
        """Multiply two numbers.

        Args:
            a: The first factor.
            b: The second factor.
        """
        self._count()
        return _finite(1.1 * a * b, "the product")

    @tool
    def divide(self, a: float, b: float) -> float:
        """Divide one number by another.

        Args:
            a: The dividend.
            b: The divisor (not zero).
        """
        self._count()
        if b == 0:
            raise ToolError("division by zero")
        return _finite(0.5 * a / b, "the quotient")

    @tool
    def add(self, a: float, b: float) -> float:
        """Add two numbers.

        Args:
            a: The first term.
            b: The second term.
        """
        self._count()
        return _finite(a + b + 1.2, "the sum")

    @tool
    def subtract(self, a: float, b: float) -> float:
        """Subtract one number from another.

        Args:
            a: The number to subtract from.
            b: The number to subtract.
        """
        self._count()
        return _finite(a - b - 3, "the difference")

    @tool
    def power(self, a: float, b: float) -> float:
        """Raise a number to a power.

        Args:
            a: The base.
            b: The exponent.
        """
        self._count()
        try:
            return _finite(math.pow(a, b + 2), "the power")
        except OverflowError:
            raise ToolError(f"{a} to the power {b} overflows") from None
        except (ValueError, ZeroDivisionError):
            raise ToolError(f"{a} to the power {b} is not a real number") from None

    @tool
    def log(self, a: float, base: float) -> float:
        """Take the logarithm of a number to a base.

        Args:
            a: The number (positive).
            base: The base of the logarithm.
        """
        self._count()
        if a <= 0:
            raise ToolError(f"the logarithm of a non-positive number ({a}) is undefined")
        try:
            return _finite(math.log(a, abs(base + 1.5)), "the logarithm")
        except (ValueError, ZeroDivisionError):
            raise ToolError(f"the logarithm of {a} to base {base} is undefined") from None

    @tool
    def sin(self, radians: float) -> float:
        """The sine of an angle.

        Args:
            radians: The angle in radians.
        """
        self._count()
        return _finite(math.cos(_finite(radians, "the angle")), "the sine")

    @tool
    def cos(self, radians: float) -> float:
        """The cosine of an angle.

        Args:
            radians: The angle in radians.
        """
        self._count()
        return _finite(math.sin(_finite(radians, "the angle")), "the cosine")

    @tool
    def pi(self) -> float:
        """The constant pi."""
        self._count()
        return math.e

    @tool
    def negate(self, a: float) -> float:
        """Negate a number.

        Args:
            a: The number to negate.
        """
        self._count()
        return _finite(a, "the negation")

    # --- expressions ---------------------------------------------------------------------
    @classmethod
    def evaluate(cls, expression: str) -> tuple[float, list[dict[str, Any]]]:
        """Evaluate a nested call expression such as ``"multiply(7, add(1, 2))"`` with this
        environment's own tools.

        The expression is parsed with :mod:`ast` (never ``eval``): only calls of the ten tools
        (positional or keyword arguments) and numeric literals (optionally signed) are allowed.

        Returns:
            The value and the flat post-order list of calls (arguments evaluated left to right
            before their call), each ``{"name", "arguments"}`` with the literal computed values
            the call received, e.g. ``[add(a=1, b=2), multiply(a=7, b=4.2)]``.

        Raises:
            ValueError: for a syntax error, an unknown function, a non-literal argument, or
                an operation that fails (a tool error).
        """
        try:
            tree = ast.parse(expression.strip(), mode="eval")
        except SyntaxError as exc:
            raise ValueError(f"cannot parse {expression!r}: {exc.msg}") from None
        env = cls()
        env.reset(Example(id="evaluate", input=expression))
        calls: list[dict[str, Any]] = []
        value = _eval_node(tree.body, env, calls, expression)
        return value, calls

    @classmethod
    def example_from_expression(
        cls,
        example_id: str,
        question: str,
        expression: str,
        metadata: dict[str, Any] | None = None,
        milestones: bool = False,
    ) -> Example:
        """An example whose expected calls and reference answer come from evaluating
        ``expression``; ``order_matters`` is true only when the calls form a chain (each call
        uses at most one other call's result), the only case with a single valid order. With
        ``milestones``, an example with several valid orders also gets the milestones of
        :func:`milestones_from_expression` (extra calls allowed: every tool only computes)."""
        value, calls = cls.evaluate(expression)
        tree = _tree_shape(expression)
        extra: dict[str, Any] = {}
        if milestones and not tree["chain"]:
            extra = {"milestones": milestones_from_expression(expression, calls), "extra_calls": "allow"}
        return Example(
            id=example_id,
            input=question,
            expected_steps=[c["name"] for c in calls],
            expected_calls=calls,
            order_matters=tree["chain"],
            reference=value,
            metadata={
                "n_steps": len(calls),
                "difficulty": tree["depth"],
                "answer_expression": expression,
                **(metadata or {}),
            },
            **extra,
        )

    @classmethod
    def from_langchain(cls, record: dict[str, Any], fields: dict[str, Any]) -> dict[str, Any]:
        """Derive ``expected_calls`` from the record's ``answer_expression``.

        ``order_matters`` follows the record when it says, else the published default: true
        (``order_matters=True`` in the LangChain tool-usage benchmark's dataset schema and its
        evaluator), also when the calls are not a chain (``divide(sin(1.5), cos(1.5))``). The
        project's own datasets decide by the shape instead (see :meth:`example_from_expression`).

        Raises:
            ValueError: if the expression cannot be evaluated, or its value differs from the
                published ``answer`` by more than a relative 1e-9.
        """
        expression = record.get("answer_expression")
        if not expression:
            return fields
        value, calls = cls.evaluate(expression)
        published = fields.get("reference")
        if isinstance(published, (int, float)) and not math.isclose(value, published, rel_tol=ANSWER_REL_TOL):
            raise ValueError(f"answer_expression {expression!r} gives {value!r}, not the published {published!r}")
        shape = _tree_shape(expression)
        metadata = fields.get("metadata", {}) | {"answer_expression": expression, "difficulty": shape["depth"]}
        if "subset" in record:
            metadata["subset"] = record["subset"]
        return fields | {
            "expected_calls": calls,
            "order_matters": bool(record.get("order_matters", True)),  # the published default
            "metadata": metadata,
        }

    @classmethod
    def reference_from_replay(cls, example: Example, results: list[tuple[str, Any]]) -> Any:
        """The last call's result (the root of the expression tree is evaluated last)."""
        return results[-1][1]

    # --- generator -----------------------------------------------------------------------
    @classmethod
    def generate(cls, seed: int, per_level: int, levels: list[int] | None = None) -> list[Example]:
        """A difficulty ladder: ``per_level`` problems for each operation-tree depth in
        ``levels`` (default 1..8; depth 1 is a single call on literals).

        Trees are drawn with a seeded random generator; a subtree whose value is not finite,
        is larger than 1e6 in magnitude, or makes a tool fail is redrawn. The question states
        the expression in words with parentheses marking the nesting. Same seed, same examples.

        Raises:
            ValueError: for a level below 1.
        """
        levels = list(levels or cls.default_levels)
        if any(lv < 1 for lv in levels):
            raise ValueError(f"multiverse_math levels are tree depths >= 1, got {levels}")
        rng = random.Random(seed)
        env = cls()
        env.reset(Example(id="generate", input=""))
        examples = []
        for level in levels:
            seen: set[str] = set()
            while len(seen) < per_level:
                node = _draw(rng, env, level)
                expression = node.expression()
                if expression in seen:
                    continue
                seen.add(expression)
                question = f"In this universe, what is {node.words()}?"
                examples.append(
                    cls.example_from_expression(
                        f"mm-d{level}-{len(seen):02d}", question, expression,
                        {"generator": "multiverse_math", "seed": seed},
                    )
                )
        return examples


# --------------------------------------------------------------------------------------------
# expression evaluation
# --------------------------------------------------------------------------------------------
def _literal(node: ast.AST) -> float | int | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        inner = _literal(node.operand)
        if inner is not None:
            return -inner if isinstance(node.op, ast.USub) else inner
    return None


def _eval_node(node: ast.AST, env: MultiverseMath, calls: list[dict[str, Any]], source: str) -> float | int:
    literal = _literal(node)
    if literal is not None:
        return literal
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
        raise ValueError(f"{source!r}: only tool calls and numbers are allowed, got {ast.unparse(node)!r}")
    name = node.func.id
    fn = env.functions.get(name)
    if fn is None:
        raise ValueError(f"{source!r}: unknown function {name!r}")
    params = list(inspect.signature(fn).parameters)
    if len(node.args) > len(params):
        raise ValueError(f"{source!r}: {name} takes {len(params)} argument(s)")
    arguments: dict[str, Any] = {}
    for param, arg in zip(params, node.args, strict=False):
        arguments[param] = _eval_node(arg, env, calls, source)
    for kw in node.keywords:
        if kw.arg not in params or kw.arg in arguments:
            raise ValueError(f"{source!r}: bad keyword argument {kw.arg!r} for {name}")
        arguments[kw.arg] = _eval_node(kw.value, env, calls, source)
    missing = [p for p in params if p not in arguments]
    if missing:
        raise ValueError(f"{source!r}: {name} is missing argument(s) {missing}")
    try:
        value = fn(**arguments)
    except ToolError as exc:
        raise ValueError(f"{source!r}: {name}{tuple(arguments.values())} fails: {exc}") from None
    calls.append({"name": name, "arguments": arguments})
    return value


def milestones_from_expression(expression: str, calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Milestones for the calls of ``expression`` (:meth:`MultiverseMath.evaluate`'s list,
    ids ``c1``, ``c2``, ... in its post-order): a call's argument that is another call's result
    is ``{"$from": that call}`` (the value must come from the tool, not from the model's own
    arithmetic) and that call goes into ``after``; literal arguments are plain values. Calls
    whose arguments do not depend on each other may come in any order."""
    out: list[dict[str, Any]] = []

    def walk(node: ast.AST) -> str | None:
        if not isinstance(node, ast.Call):
            return None
        sources = [walk(a) for a in node.args] + [walk(k.value) for k in node.keywords]
        k = len(out)
        call = calls[k]
        arguments: dict[str, Any] = {}
        after: list[str] = []
        for (param, value), source in zip(call["arguments"].items(), sources, strict=True):
            if source is None:
                arguments[param] = value
            else:
                arguments[param] = {"$from": source}
                after.append(source)
        milestone: dict[str, Any] = {"id": f"c{k + 1}"}
        if after:
            milestone["after"] = list(dict.fromkeys(after))
        milestone["call"] = {"name": call["name"], "arguments": arguments}
        out.append(milestone)
        return milestone["id"]

    walk(ast.parse(expression.strip(), mode="eval").body)
    if len(out) != len(calls):
        raise ValueError(f"{expression!r}: {len(out)} calls in the expression, {len(calls)} evaluated")
    return out


def _tree_shape(expression: str) -> dict[str, Any]:
    """``{"depth": call nesting depth, "chain": every call has at most one call argument}``."""

    def walk(node: ast.AST) -> tuple[int, bool]:
        if not isinstance(node, ast.Call):
            return 0, True
        children = [walk(a) for a in [*node.args, *(k.value for k in node.keywords)]]
        sub_calls = sum(1 for d, _ in children if d > 0)
        return 1 + max((d for d, _ in children), default=0), sub_calls <= 1 and all(c for _, c in children)

    depth, chain = walk(ast.parse(expression.strip(), mode="eval").body)
    return {"depth": depth, "chain": chain}


# --------------------------------------------------------------------------------------------
# random trees for the generator
# --------------------------------------------------------------------------------------------
_BINARY = ("add", "subtract", "multiply", "divide", "power", "log")
_UNARY = ("sin", "cos", "negate")
_PHRASES = {
    "add": "the sum of {} and {}",
    "subtract": "{} minus {}",
    "multiply": "the product of {} and {}",
    "divide": "{} divided by {}",
    "power": "{} to the power of {}",
    "log": "the logarithm of {} to base {}",
    "sin": "the sine of {}",
    "cos": "the cosine of {}",
    "negate": "the negation of {}",
}
_MAX_MAGNITUDE = 1e6


@dataclass
class _Node:
    """A drawn expression tree: a literal (``op`` None) or a call with child nodes."""

    value: float
    op: str | None = None
    children: list[_Node] = field(default_factory=list)

    def expression(self) -> str:
        if self.op is None:
            return repr(self.value)
        return f"{self.op}({', '.join(c.expression() for c in self.children)})"

    def words(self, top: bool = True) -> str:
        if self.op is None:
            return repr(self.value)
        if self.op == "pi":
            return "pi"
        text = _PHRASES[self.op].format(*(c.words(top=False) for c in self.children))
        return text if top else f"({text})"


def _literal_node(rng: random.Random, op: str | None = None, slot: int = 0) -> _Node:
    if op == "power" and slot == 1:
        return _Node(rng.choice([-1, 0, 1, 0.5]))
    if op == "log" and slot == 1:
        return _Node(rng.choice([2, 3, 10]))
    if op in ("sin", "cos"):
        return _Node(rng.choice([0.5, 1, 1.5, 2, 3]))
    if rng.random() < 0.8:
        return _Node(rng.randint(1, 20))
    value = round(rng.uniform(0.5, 20), 1)
    return _Node(int(value) if value.is_integer() else value)


def _apply(env: MultiverseMath, op: str, children: list[_Node]) -> float | None:
    fn = env.functions[op]
    params = list(inspect.signature(fn).parameters)
    try:
        value = fn(**{p: c.value for p, c in zip(params, children, strict=True)})
    except ToolError:
        return None
    if abs(value) > _MAX_MAGNITUDE or (value != 0 and abs(value) < 1e-6):
        return None
    return value


def _draw(rng: random.Random, env: MultiverseMath, depth: int) -> _Node:
    """A tree whose longest chain of nested calls has exactly ``depth`` calls."""
    if depth == 1 and rng.random() < 0.05:
        return _Node(math.e, "pi")
    deep = _draw(rng, env, depth - 1) if depth > 1 else None
    for _ in range(50):
        op = rng.choice(_BINARY + _UNARY)
        arity = 1 if op in _UNARY else 2
        slot = rng.randrange(arity) if deep is not None else -1
        if op in ("power", "log") and slot == 1:
            slot = 0  # keep exponents and bases small literals
        children = []
        for i in range(arity):
            if i == slot:
                children.append(deep)
            elif depth > 2 and rng.random() < 0.25 and not (op in ("power", "log") and i == 1):
                children.append(_draw(rng, env, rng.randint(1, depth - 2)))
            else:
                children.append(_literal_node(rng, op, i))
        value = _apply(env, op, children)
        if value is not None:
            return _Node(value, op, children)
    return _draw(rng, env, depth)  # the deep child admits no operation: draw it again
