"""Relational data: users, locations and foods in a SQLite database, read through 17 lookup tools.

Modelled on the "Relational Data" task of the LangChain tool-usage benchmark
(github.com/langchain-ai/langchain-benchmarks, ``langchain_benchmarks/tool_usage/tasks/
relational_data.py``): the tool names and the layout of a tables file (``user_data``,
``location_data``, ``food_data``, ``current_user_id``) follow the published task; the built-in
tables (:data:`DEFAULT_TABLES`), the fuzzy matching and the SQL schema are this project's.

Every episode gets its own in-memory SQLite database (built with sqlite-utils) holding five
tables: ``locations``, ``foods``, ``food_allergens``, ``users`` and ``user_favorite_foods``
(foreign keys enforced). Every query is parameterized; name search ranks rows with a
``similarity`` SQL function registered on the connection.
"""

from __future__ import annotations

import difflib
import json
import random
import sqlite3
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from toolgym.data import DatasetError, load_examples
from toolgym.environments import Environment, ToolError, tool
from toolgym.records import Example

if TYPE_CHECKING:  # sqlite-utils (and numpy beneath it) load with the first database
    from sqlite_utils import Database

#: How many matches the ``find_*_by_name`` tools return at most.
MAX_MATCHES = 5
#: Minimum :func:`name_similarity` of a match.
MIN_SIMILARITY = 0.6
#: Name of the published tables file looked for beside a LangChain-form dataset.
PUBLISHED_TABLES_FILE = "relational_data_tables.json"

# The project's own tables: ids are not consecutive, do not overlap between tables and never
# look like names; two users share a location, two share an email provider, favourite-food
# lists have one to three entries and one food has no allergens.
DEFAULT_TABLES: dict[str, Any] = {
    "current_user_id": 190,
    "user_data": [
        {"id": 104, "name": "Ingrid", "email": "ingrid@fjordpost.no", "location": 31,
         "favorite_color": "teal", "favorite_foods": [318, 356]},
        {"id": 117, "name": "Tomasz", "email": "tomasz.n@kmail.com", "location": 58,
         "favorite_color": "crimson", "favorite_foods": [347, 384, 301]},
        {"id": 123, "name": "Priya", "email": "priya.r@sunmail.org", "location": 89,
         "favorite_color": "saffron", "favorite_foods": [395, 369]},
        {"id": 158, "name": "Kwame", "email": "kwame@kmail.com", "location": 27,
         "favorite_color": "indigo", "favorite_foods": [322, 318, 384]},
        {"id": 162, "name": "Lucia", "email": "lucia.f@sunmail.org", "location": 12,
         "favorite_color": "olive", "favorite_foods": [322]},
        {"id": 190, "name": "Haruto", "email": "haruto@fjordpost.no", "location": 46,
         "favorite_color": "amber", "favorite_foods": [301, 395, 356]},
        {"id": 203, "name": "Selma", "email": "selma.k@kmail.com", "location": 73,
         "favorite_color": "lavender", "favorite_foods": [369, 347]},
        {"id": 245, "name": "Ana Sofia", "email": "ana.sofia@sunmail.org", "location": 12,
         "favorite_color": "coral", "favorite_foods": [356, 384, 322]},
    ],
    "location_data": [
        {"id": 12, "city": "Lisbon", "current_time": "2024-05-02 09:10",
         "current_weather": "Sunny, Temperature: 21°C"},
        {"id": 27, "city": "Nairobi", "current_time": "2024-05-02 11:10",
         "current_weather": "Thunderstorms, Temperature: 24°C"},
        {"id": 31, "city": "Oslo", "current_time": "2024-05-02 10:10",
         "current_weather": "Light rain, Temperature: 9°C"},
        {"id": 46, "city": "Osaka", "current_time": "2024-05-02 17:10",
         "current_weather": "Clear, Temperature: 19°C"},
        {"id": 58, "city": "Montreal", "current_time": "2024-05-02 04:10",
         "current_weather": "Snow showers, Temperature: -1°C"},
        {"id": 73, "city": "Santiago", "current_time": "2024-05-02 04:10",
         "current_weather": "Overcast, Temperature: 12°C"},
        {"id": 89, "city": "Hanoi", "current_time": "2024-05-02 15:10",
         "current_weather": "Heavy rain, Temperature: 31°C"},
    ],
    "food_data": [
        {"id": 301, "name": "Ramen", "calories": 480, "allergic_ingredients": ["Gluten", "Soy", "Egg"]},
        {"id": 318, "name": "Falafel", "calories": 330, "allergic_ingredients": ["Sesame"]},
        {"id": 322, "name": "Paella", "calories": 520, "allergic_ingredients": ["Shellfish"]},
        {"id": 347, "name": "Pierogi", "calories": 410, "allergic_ingredients": ["Gluten", "Dairy", "Egg"]},
        {"id": 356, "name": "Mango Sticky Rice", "calories": 290, "allergic_ingredients": []},
        {"id": 369, "name": "Lentil Soup", "calories": 230, "allergic_ingredients": ["Celery"]},
        {"id": 384, "name": "Cheesecake", "calories": 450, "allergic_ingredients": ["Dairy", "Egg", "Gluten"]},
        {"id": 395, "name": "Pad Thai", "calories": 540, "allergic_ingredients": ["Peanut", "Fish", "Soy"]},
    ],
}


# --------------------------------------------------------------------------------------------
# tables
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Tables:
    """The content of a relational-data world, validated.

    Attributes:
        users: Rows ``{id, name, email, location, favorite_color, favorite_foods}``
            (``location`` a location id, ``favorite_foods`` a list of food ids, in order).
        locations: Rows ``{id, city, current_time, current_weather}``.
        foods: Rows ``{id, name, calories, allergic_ingredients}`` (a list of strings).
        current_user_id: The id ``get_current_user_id`` returns.
        source: Where the tables came from (``"builtin"`` or a file path).
    """

    users: tuple[dict[str, Any], ...]
    locations: tuple[dict[str, Any], ...]
    foods: tuple[dict[str, Any], ...]
    current_user_id: int
    source: str = "builtin"

    @classmethod
    def from_dict(cls, doc: Any, source: str = "builtin") -> Tables:
        """Validate a tables document in the published layout.

        Args:
            doc: ``{"user_data": [...], "location_data": [...], "food_data": [...],
                "current_user_id": int}``.
            source: Named in error messages and in the environment's state.

        Raises:
            ValueError: naming ``source`` and the offending field.
        """
        if not isinstance(doc, dict):
            raise ValueError(f"{source}: tables must be a JSON object")
        fields = {
            "user_data": {"id": int, "name": str, "email": str, "location": int,
                          "favorite_color": str, "favorite_foods": list},
            "location_data": {"id": int, "city": str, "current_time": str, "current_weather": str},
            "food_data": {"id": int, "name": str, "calories": int, "allergic_ingredients": list},
        }
        rows: dict[str, tuple[dict[str, Any], ...]] = {}
        for key, spec in fields.items():
            items = doc.get(key)
            if not isinstance(items, list) or not items:
                raise ValueError(f"{source}: field {key!r} must be a non-empty list")
            seen: set[int] = set()
            for i, row in enumerate(items):
                where = f"{source}: {key}[{i}]"
                if not isinstance(row, dict):
                    raise ValueError(f"{where}: must be an object")
                for name, kind in spec.items():
                    value = row.get(name)
                    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
                        raise ValueError(f"{where}.{name}: expected {kind.__name__}, got {value!r}")
                if row["id"] in seen:
                    raise ValueError(f"{where}.id: duplicate id {row['id']}")
                seen.add(row["id"])
            rows[key] = tuple(dict(r) for r in items)
        location_ids = {r["id"] for r in rows["location_data"]}
        food_ids = {r["id"] for r in rows["food_data"]}
        for i, user in enumerate(rows["user_data"]):
            if user["location"] not in location_ids:
                raise ValueError(f"{source}: user_data[{i}].location: no location {user['location']}")
            bad = [f for f in user["favorite_foods"] if f not in food_ids]
            if bad:
                raise ValueError(f"{source}: user_data[{i}].favorite_foods: no food {bad[0]!r}")
        for i, food in enumerate(rows["food_data"]):
            if not all(isinstance(a, str) for a in food["allergic_ingredients"]):
                raise ValueError(f"{source}: food_data[{i}].allergic_ingredients: expected strings")
        current = doc.get("current_user_id")
        if current not in {u["id"] for u in rows["user_data"]}:
            raise ValueError(f"{source}: current_user_id {current!r} is not a user id")
        return cls(rows["user_data"], rows["location_data"], rows["food_data"], current, source)

    @classmethod
    def from_json(cls, path: str | Path) -> Tables:
        """Read a tables file (for example the published ``relational_data_tables.json``).

        Raises:
            ValueError: if the file cannot be read, is not JSON, or fails :meth:`from_dict`.
        """
        path = Path(path)
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(f"{path}: cannot read tables: {exc}") from None
        return cls.from_dict(doc, str(path))

    def user(self, user_id: int) -> dict[str, Any]:
        """The user row with ``user_id`` (KeyError if absent)."""
        return next(u for u in self.users if u["id"] == user_id)

    def food(self, food_id: int) -> dict[str, Any]:
        """The food row with ``food_id``."""
        return next(f for f in self.foods if f["id"] == food_id)

    def location(self, location_id: int) -> dict[str, Any]:
        """The location row with ``location_id``."""
        return next(loc for loc in self.locations if loc["id"] == location_id)


@lru_cache(maxsize=1)
def default_tables() -> Tables:
    """The built-in tables, validated once."""
    return Tables.from_dict(DEFAULT_TABLES)


@lru_cache(maxsize=16)
def _tables_from_file(path: str, mtime_ns: int) -> Tables:
    return Tables.from_json(path)


def load_tables(path: str | Path) -> Tables:
    """:meth:`Tables.from_json`, cached per file path and modification time."""
    resolved = Path(path).resolve()
    try:
        mtime = resolved.stat().st_mtime_ns
    except OSError as exc:
        raise ValueError(f"{path}: cannot read tables: {exc}") from None
    return _tables_from_file(str(resolved), mtime)


def is_tables_document(doc: Any) -> bool:
    """True for a JSON object laid out as a tables file (and not a dataset)."""
    return isinstance(doc, dict) and "examples" not in doc and {"user_data", "food_data"} <= set(doc)


# --------------------------------------------------------------------------------------------
# database
# --------------------------------------------------------------------------------------------
def name_similarity(name: str, query: str) -> float:
    """How well ``query`` matches ``name``, in [0, 1].

    Both are NFKC-normalised first (full-width ``Ｆｒａｎｋ`` is ``Frank``, compatibility
    ligatures and digits are folded), then case-folded. The largest of: difflib's ``SequenceMatcher.ratio`` between the case-folded query and the
    whole name, the same ratio against each word of the name (so ``"frank"`` finds
    ``"Frank The Cat"``), and 1.0 when the query is the initials of a name of several words
    (``"LA"`` finds ``"Los Angeles"``).
    """
    q = " ".join(unicodedata.normalize("NFKC", str(query)).casefold().split())
    n = " ".join(unicodedata.normalize("NFKC", str(name)).casefold().split())
    if not q or not n:
        return 0.0
    words = n.split()
    best = difflib.SequenceMatcher(None, q, n).ratio()
    for word in words:
        best = max(best, difflib.SequenceMatcher(None, q, word).ratio())
    if len(words) > 1 and q.replace(".", "").replace(" ", "") == "".join(w[0] for w in words):
        best = 1.0
    return best


def build_database(tables: Tables) -> Database:
    """A fresh in-memory SQLite database holding ``tables`` (foreign keys enforced)."""
    # check_same_thread=False: an episode may be driven from a worker thread of the event loop.
    from sqlite_utils import Database

    db = Database(sqlite3.connect(":memory:", check_same_thread=False), execute_plugins=False)
    db.execute("PRAGMA foreign_keys = ON")
    # Columns are local_time/weather, not current_time: CURRENT_TIME is an SQL keyword that
    # SQLite evaluates to the wall clock when it appears unquoted in a query.
    db["locations"].create(
        {"id": int, "city": str, "local_time": str, "weather": str}, pk="id", not_null={"city"}
    )
    db["foods"].create({"id": int, "name": str, "calories": int}, pk="id", not_null={"name"})
    db["food_allergens"].create(
        {"food_id": int, "position": int, "ingredient": str},
        pk=("food_id", "position"), foreign_keys=[("food_id", "foods", "id")],
    )
    db["users"].create(
        {"id": int, "name": str, "email": str, "location_id": int, "favorite_color": str},
        pk="id", foreign_keys=[("location_id", "locations", "id")], not_null={"name"},
    )
    db["user_favorite_foods"].create(
        {"user_id": int, "position": int, "food_id": int},
        pk=("user_id", "position"),
        foreign_keys=[("user_id", "users", "id"), ("food_id", "foods", "id")],
    )
    db["session"].create({"key": str, "value": int}, pk="key")
    with db.conn:
        db["locations"].insert_all(
            {"id": loc["id"], "city": loc["city"], "local_time": loc["current_time"],
             "weather": loc["current_weather"]}
            for loc in tables.locations
        )
        db["foods"].insert_all({k: f[k] for k in ("id", "name", "calories")} for f in tables.foods)
        db["food_allergens"].insert_all(
            {"food_id": f["id"], "position": i, "ingredient": a}
            for f in tables.foods
            for i, a in enumerate(f["allergic_ingredients"])
        )
        db["users"].insert_all(
            {"id": u["id"], "name": u["name"], "email": u["email"], "location_id": u["location"],
             "favorite_color": u["favorite_color"]}
            for u in tables.users
        )
        db["user_favorite_foods"].insert_all(
            {"user_id": u["id"], "position": i, "food_id": f}
            for u in tables.users
            for i, f in enumerate(u["favorite_foods"])
        )
        db["session"].insert({"key": "current_user_id", "value": tables.current_user_id})
    db.register_function(name_similarity, deterministic=True, name="similarity")
    return db


_TABLE_NAMES = ("locations", "foods", "food_allergens", "users", "user_favorite_foods", "session")


# --------------------------------------------------------------------------------------------
# answer rules: how a reference answer follows from the reference calls' observations
# --------------------------------------------------------------------------------------------
def _yes_no(flag: bool) -> str:
    return "yes" if flag else "no"


def _render(value: Any) -> Any:
    if isinstance(value, list):
        return ", ".join(str(v) for v in value)
    return value


def derive_answer(rule: dict[str, Any], results: list[tuple[str, Any]]) -> str | int | float:
    """Compute a reference answer from the observations of the reference calls.

    Args:
        rule: ``{"op": ...}`` with, depending on ``op``:
            ``last`` (the last observation; a list is joined with ", "),
            ``first_id`` (the ``id`` of the best match of the last ``find_*`` call),
            ``count`` (length of the last observation),
            ``contains`` / ``lacks`` + ``value`` ("yes"/"no": whether the last observation,
            a string or a list of strings, contains ``value``, case-insensitively),
            ``equal`` + ``tool`` ("yes" when every observation of ``tool`` is the same),
            ``same_domain`` + ``tool`` ("yes" when the email observations of ``tool`` share
            their domain),
            ``sum`` + ``tool`` (sum of the observations of ``tool``),
            ``count_containing`` + ``tool`` + ``value`` (how many observations of ``tool``
            contain ``value``).
        results: ``(tool name, decoded observation)`` of every reference call, in order.

    Raises:
        ValueError: for an unknown ``op`` or observations that do not fit it.
    """
    op = rule.get("op")
    of_tool = [value for name, value in results if name == rule.get("tool")]
    if not results:
        raise ValueError("no observations to derive an answer from")
    last = results[-1][1]

    def has(container: Any, value: str) -> bool:
        if isinstance(container, list):
            return any(value.casefold() == str(c).casefold() for c in container)
        return value.casefold() in str(container).casefold()

    if op == "last":
        return _render(last)
    if op == "first_id":
        if not last:
            raise ValueError("the last find call matched nothing")
        return last[0]["id"]
    if op == "count":
        return len(last)
    if op in ("contains", "lacks"):
        found = has(last, rule["value"])
        return _yes_no(found if op == "contains" else not found)
    if not of_tool:
        raise ValueError(f"rule {rule!r}: no observation of tool {rule.get('tool')!r}")
    if op == "equal":
        return _yes_no(all(v == of_tool[0] for v in of_tool))
    if op == "same_domain":
        return _yes_no(len({str(v).rsplit("@", 1)[-1].casefold() for v in of_tool}) == 1)
    if op == "sum":
        return sum(of_tool)
    if op == "count_containing":
        return sum(has(v, rule["value"]) for v in of_tool)
    raise ValueError(f"unknown answer rule {op!r}")


# --------------------------------------------------------------------------------------------
# the environment
# --------------------------------------------------------------------------------------------
class RelationalData(Environment):
    """Users, locations and foods in SQLite, read through 17 lookup tools (read-only world).

    The tables come from, in order: the example's ``metadata["tables"]`` (path of a tables
    file), the ``tables`` given to the constructor, or :data:`DEFAULT_TABLES`.

    Args:
        tables: Tables to use when the example names none.
    """

    name = "relational_data"

    instructions = (
        "Answer the user's question with the help of the tools. Do not guess: look every fact "
        "up. Users, locations and foods each have a name and a numeric id, and the id is never "
        "the name; find ids with the find_* tools, then use them with the get_* tools. When "
        "you know the answer, reply with it in plain text without calling another tool."
    )
    graders = ("steps_exact", "step_ratio", "answer_match")
    default_levels: ClassVar[tuple[int, ...]] = (1, 2, 3, 4, 5)
    replay_target: ClassVar[bool] = False  # a read-only world: every trajectory would reach it

    def __init__(self, tables: Tables | None = None) -> None:
        super().__init__()
        self._given = tables
        self.tables: Tables = tables or default_tables()
        self.db: Database | None = None

    # --- lifecycle -----------------------------------------------------------------------
    def reset(self, example: Example) -> None:
        """Build a fresh database from the example's tables file, the constructor's tables or
        the built-in ones.

        Raises:
            ValueError: if ``metadata["tables"]`` names an unreadable or invalid file.
        """
        path = example.metadata.get("tables")
        self.tables = load_tables(path) if path else (self._given or default_tables())
        self.close()
        self.db = build_database(self.tables)

    def read_state(self) -> dict[str, Any]:
        """``{"tables": source, "rows": {table: row count}}`` (the world is read-only)."""
        rows = {}
        if self.db is not None:
            rows = {t: self.db.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0]
                    for t in _TABLE_NAMES if self.db[t].exists()}
        return {"tables": self.tables.source, "rows": rows}

    def close(self) -> None:
        if self.db is not None:
            self.db.close()
            self.db = None

    def _db(self) -> Database:
        if self.db is None:
            self.db = build_database(self.tables)
        return self.db

    def _one(self, sql: str, params: tuple[Any, ...], what: str, key: int) -> Any:
        row = self._db().execute(sql, params).fetchone()
        if row is None:
            raise ToolError(f"there is no {what} with id {key}")
        return row[0]

    def _find(self, table: str, column: str, query: str) -> list[dict[str, Any]]:
        rows = self._db().execute(
            f"SELECT id, {column} FROM (SELECT id, {column}, similarity({column}, :q) AS score FROM {table}) "
            "WHERE score >= :cutoff ORDER BY score DESC, id LIMIT :k",
            {"q": query, "cutoff": MIN_SIMILARITY, "k": MAX_MATCHES},
        ).fetchall()
        return [{"id": r[0], column: r[1]} for r in rows]

    def _require_user(self, user_id: int) -> None:
        self._one("SELECT id FROM users WHERE id = ?", (user_id,), "user", user_id)

    # --- tools: users --------------------------------------------------------------------
    @tool
    def get_current_user_id(self) -> int:
        """Get the id of the current user (the person asking the question).

        Returns:
            The current user's id.
        """
        return self._db().execute("SELECT value FROM session WHERE key = 'current_user_id'").fetchone()[0]

    @tool
    def list_user_ids(self) -> list[int]:
        """List the ids of all users, in increasing order.

        Returns:
            Every user id.
        """
        return [r[0] for r in self._db().execute("SELECT id FROM users ORDER BY id")]

    @tool
    def find_users_by_name(self, name: str) -> list[dict[str, Any]]:
        """Find users by name. Matching ignores case and tolerates typos; returns up to 5 matches,
        best first, as a list of {"id": user id, "name": full name}, or [] when nothing matches.

        Args:
            name: The name (or part of the name) to search for.
        """
        return self._find("users", "name", name)

    @tool
    def get_user_name(self, user_id: int) -> str:
        """Get the name of a user.

        Args:
            user_id: The user's numeric id.
        """
        return self._one("SELECT name FROM users WHERE id = ?", (user_id,), "user", user_id)

    @tool
    def get_user_email(self, user_id: int) -> str:
        """Get the email address of a user.

        Args:
            user_id: The user's numeric id.
        """
        return self._one("SELECT email FROM users WHERE id = ?", (user_id,), "user", user_id)

    @tool
    def get_user_location(self, user_id: int) -> int:
        """Get the id of the location where a user lives (use get_city_for_location for its city).

        Args:
            user_id: The user's numeric id.
        """
        return self._one("SELECT location_id FROM users WHERE id = ?", (user_id,), "user", user_id)

    @tool
    def get_user_favorite_color(self, user_id: int) -> str:
        """Get the favourite colour of a user.

        Args:
            user_id: The user's numeric id.
        """
        return self._one("SELECT favorite_color FROM users WHERE id = ?", (user_id,), "user", user_id)

    @tool
    def get_user_favorite_foods(self, user_id: int) -> list[int]:
        """Get the ids of a user's favourite foods, most favourite first (use get_food_name for
        their names).

        Args:
            user_id: The user's numeric id.
        """
        self._require_user(user_id)
        rows = self._db().execute(
            "SELECT food_id FROM user_favorite_foods WHERE user_id = ? ORDER BY position", (user_id,)
        )
        return [r[0] for r in rows]

    # --- tools: locations ----------------------------------------------------------------
    @tool
    def find_locations_by_name(self, city: str) -> list[dict[str, Any]]:
        """Find locations by city name. Matching ignores case, tolerates typos and accepts
        initials ("LA"); returns up to 5 matches, best first, as a list of {"id": location id,
        "city": city name}, or [] when nothing matches.

        Args:
            city: The city name to search for.
        """
        return self._find("locations", "city", city)

    @tool
    def get_city_for_location(self, location_id: int) -> str:
        """Get the city of a location.

        Args:
            location_id: The location's numeric id.
        """
        return self._one("SELECT city FROM locations WHERE id = ?", (location_id,), "location", location_id)

    @tool
    def get_current_time_for_location(self, location_id: int) -> str:
        """Get the current local date and time at a location.

        Args:
            location_id: The location's numeric id.
        """
        return self._one(
            "SELECT local_time FROM locations WHERE id = ?", (location_id,), "location", location_id
        )

    @tool
    def get_current_weather_for_location(self, location_id: int) -> str:
        """Get the current weather at a location.

        Args:
            location_id: The location's numeric id.
        """
        return self._one(
            "SELECT weather FROM locations WHERE id = ?", (location_id,), "location", location_id
        )

    @tool
    def get_weather_at_location(self, location_id: int) -> str:
        """Get the weather at a location right now (same as get_current_weather_for_location).

        Args:
            location_id: The location's numeric id.
        """
        return self.get_current_weather_for_location(location_id)

    # --- tools: foods --------------------------------------------------------------------
    @tool
    def find_foods_by_name(self, food: str) -> list[dict[str, Any]]:
        """Find foods by name. Matching ignores case and tolerates typos; returns up to 5
        matches, best first, as a list of {"id": food id, "name": food name}, or [] when nothing
        matches.

        Args:
            food: The food name to search for.
        """
        return self._find("foods", "name", food)

    @tool
    def get_food_name(self, food_id: int) -> str:
        """Get the name of a food.

        Args:
            food_id: The food's numeric id.
        """
        return self._one("SELECT name FROM foods WHERE id = ?", (food_id,), "food", food_id)

    @tool
    def get_food_calories(self, food_id: int) -> int:
        """Get the calories in one serving of a food.

        Args:
            food_id: The food's numeric id.
        """
        return self._one("SELECT calories FROM foods WHERE id = ?", (food_id,), "food", food_id)

    @tool
    def get_food_allergic_ingredients(self, food_id: int) -> list[str]:
        """Get the allergenic ingredients of a food ([] when it has none).

        Args:
            food_id: The food's numeric id.
        """
        self._one("SELECT id FROM foods WHERE id = ?", (food_id,), "food", food_id)
        rows = self._db().execute(
            "SELECT ingredient FROM food_allergens WHERE food_id = ? ORDER BY position", (food_id,)
        )
        return [r[0] for r in rows]

    # --- datasets ------------------------------------------------------------------------
    @classmethod
    def load_dataset(cls, path: Path, options: dict[str, Any]) -> list[Example] | None:
        """Attach a tables file to the examples when one applies.

        * ``options["tables"]`` (a path) is attached to every example of any dataset;
        * a LangChain-form dataset (JSON object with ``examples``) without that option gets the
          published tables file :data:`PUBLISHED_TABLES_FILE` from the same folder, because the
          published questions are about the published tables; if that file is missing it is an
          error (the answers would not match the built-in tables);
        * a tables file passed as a dataset is rejected with a clear error.

        Returns ``None`` (generic loading, built-in tables) otherwise.

        Raises:
            DatasetError: for a tables file given as the dataset, a missing or invalid tables
                file, or any invalid record.
        """
        path = Path(path)
        doc = _read_json_object(path)
        if is_tables_document(doc):
            raise DatasetError(
                f"{path}: this is a relational-data tables file, not a dataset; pass it as the "
                "'tables' environment option and give a dataset of questions"
            )
        tables = options.get("tables")
        if tables is None and doc is not None and "examples" in doc:
            sibling = path.parent / PUBLISHED_TABLES_FILE
            if not sibling.exists():
                raise DatasetError(
                    f"{path}: a LangChain relational-data dataset needs the published tables; "
                    f"expected {PUBLISHED_TABLES_FILE} beside it or the 'tables' option"
                )
            tables = sibling
        if tables is None:
            return None
        try:
            load_tables(tables)
        except ValueError as exc:
            raise DatasetError(str(exc)) from None
        where = str(Path(tables).resolve())
        return [
            ex.model_copy(update={"metadata": ex.metadata | {"tables": where}})
            for ex in load_examples(path, None)
        ]

    @classmethod
    def reference_from_replay(cls, example: Example, results: list[tuple[str, Any]]) -> Any:
        """The answer the reference calls' observations imply, by ``metadata["answer_rule"]``
        (default ``{"op": "last"}``); see :func:`derive_answer`."""
        return derive_answer(example.metadata.get("answer_rule", {"op": "last"}), results)

    # --- generator -----------------------------------------------------------------------
    @classmethod
    def generate(cls, seed: int, per_level: int, levels: list[int] | None = None) -> list[Example]:
        """A difficulty ladder over the built-in tables: ``per_level`` questions needing exactly
        ``level`` tool calls (hops), for each level in 1..5.

        Each question comes from a template instantiated with seeded random entities; its
        reference answer is computed by replaying its calls on a fresh environment, so the
        oracle always solves it. Same seed, same examples.

        Raises:
            ValueError: for a level outside 1..5 or when a level has fewer distinct questions
                than ``per_level``.
        """
        levels = list(levels or cls.default_levels)
        bad = [lv for lv in levels if lv not in _TEMPLATES]
        if bad:
            raise ValueError(f"relational_data levels are hop counts 1..5, got {bad}")
        rng = random.Random(seed)
        tables = default_tables()
        examples = []
        for level in levels:
            seen: set[str] = set()
            attempts = 0
            while len(seen) < per_level:
                attempts += 1
                if attempts > 200 * per_level:
                    raise ValueError(f"level {level}: only {len(seen)} distinct questions available")
                question, calls, rule, order_matters = rng.choice(_TEMPLATES[level])(rng, tables)
                if question in seen:
                    continue
                seen.add(question)
                examples.append(
                    make_example(
                        f"rel-h{level}-{len(seen):02d}", question, calls, rule, order_matters,
                        {"difficulty": level, "generator": "relational_data", "seed": seed},
                    )
                )
        return examples


def _read_json_object(path: Path) -> dict[str, Any] | None:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise DatasetError(f"{path}: cannot read: {exc}") from None
    if not text.lstrip().startswith("{"):
        return None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError:
        return None  # JSON Lines
    return doc if isinstance(doc, dict) else None


def replay(env: Environment, calls: list[dict[str, Any]]) -> list[tuple[str, Any]]:
    """Run calls on ``env`` and return ``(name, decoded observation)`` pairs.

    Raises:
        ValueError: if a call returns an error observation.
    """
    results = []
    for call in calls:
        result = env.call(call["name"], call.get("arguments", {}))
        if result.error:
            raise ValueError(f"reference call {call} failed: {result.output}")
        try:
            value = json.loads(result.output)
        except json.JSONDecodeError:
            value = result.output
        results.append((call["name"], value))
    return results


def _pointers(value: Any, target: Any, path: str = "") -> list[str]:
    """JSON pointers (RFC 6901) at which ``target`` (an id: an int, never a bool) sits in
    ``value``, in document order."""
    if type(value) is type(target) and value == target:
        return [path]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _pointers(v, target, f"{path}/{i}")]
    if isinstance(value, dict):
        return [p for k, v in value.items()
                for p in _pointers(v, target, f"{path}/{str(k).replace('~', '~0').replace('/', '~1')}")]
    return []


def milestones_from_calls(calls: list[dict[str, Any]], results: list[tuple[str, Any]]) -> list[dict[str, Any]]:
    """Milestones for reference ``calls`` whose order is free except where data flows: an id
    argument (``*_id``) found in the result of an earlier call becomes ``{"$from": that call,
    "path": where}`` and that call goes into ``after``; the other calls may come in any order.
    Text arguments (names, cities, foods) are compared with ``$lenient``.

    Args:
        calls: The reference calls (``{"name", "arguments"}``).
        results: Their decoded observations, in order (:func:`replay`).

    Returns:
        The milestones, one per call (ids ``c1``, ``c2``, ...), in the issue-25 format.
    """
    out = []
    for k, call in enumerate(calls):
        arguments: dict[str, Any] = {}
        after: list[str] = []
        for key, value in call.get("arguments", {}).items():
            source = None
            if key.endswith("_id") and isinstance(value, int) and not isinstance(value, bool):
                for j in range(k):
                    found = _pointers(results[j][1], value)
                    if found:
                        source = (j, found[0])
                        break
            if source is not None:
                arguments[key] = {"$from": f"c{source[0] + 1}", "path": source[1]}
                after.append(f"c{source[0] + 1}")
            elif isinstance(value, str):
                arguments[key] = {"$lenient": value}
            else:
                arguments[key] = value
        milestone: dict[str, Any] = {"id": f"c{k + 1}"}
        if after:
            milestone["after"] = list(dict.fromkeys(after))
        milestone["call"] = {"name": call["name"], "arguments": arguments}
        out.append(milestone)
    return out


def make_example(
    example_id: str,
    question: str,
    calls: list[dict[str, Any]],
    rule: dict[str, Any],
    order_matters: bool,
    metadata: dict[str, Any] | None = None,
    tables: Tables | None = None,
    milestones: bool = False,
) -> Example:
    """Build an example whose reference is derived by replaying ``calls`` on a fresh
    environment over ``tables`` (default: built-in) with ``rule`` (see :func:`derive_answer`).
    With ``milestones``, the example also gets the milestones of
    :func:`milestones_from_calls` (every call required, ordered only by data flow; extra
    read-only calls allowed: every tool here only reads).

    Raises:
        ValueError: if a call fails or the rule does not fit the observations.
    """
    env = RelationalData(tables)
    env.reset(Example(id=example_id, input=question))
    try:
        results = replay(env, calls)
        reference = derive_answer(rule, results)
    finally:
        env.close()
    extra: dict[str, Any] = {}
    if milestones:
        extra = {
            "milestones": milestones_from_calls(calls, results),
            "read_only": ["get_*", "find_*", "list_*"],
            "extra_calls": "allow_read_only",
        }
    return Example(
        id=example_id,
        input=question,
        expected_steps=[c["name"] for c in calls],
        expected_calls=calls,
        order_matters=order_matters,
        reference=reference,
        metadata={"n_steps": len(calls), **(metadata or {}), "answer_rule": rule},
        **extra,
    )


# --------------------------------------------------------------------------------------------
# generator templates: (rng, tables) -> (question, calls, answer rule, order_matters)
# --------------------------------------------------------------------------------------------
Template = Callable[[random.Random, Tables], tuple[str, list[dict[str, Any]], dict[str, Any], bool]]


def _c(tool_name: str, /, **arguments: Any) -> dict[str, Any]:
    return {"name": tool_name, "arguments": arguments}


def _h1(rng: random.Random, t: Tables):
    kind = rng.randrange(6)
    if kind == 0:
        loc = rng.choice(t.locations)
        return f"Which city is location {loc['id']} in?", [_c("get_city_for_location", location_id=loc["id"])], {"op": "last"}, True
    if kind == 1:
        food = rng.choice(t.foods)
        return f"What is the name of the food with id {food['id']}?", [_c("get_food_name", food_id=food["id"])], {"op": "last"}, True
    if kind == 2:
        food = rng.choice(t.foods)
        return f"How many calories does one serving of food {food['id']} have?", [_c("get_food_calories", food_id=food["id"])], {"op": "last"}, True
    if kind == 3:
        user = rng.choice(t.users)
        return f"What is {user['name']}'s user id?", [_c("find_users_by_name", name=user["name"])], {"op": "first_id"}, True
    if kind == 4:
        user = rng.choice(t.users)
        return f"What is the email address of user {user['id']}?", [_c("get_user_email", user_id=user["id"])], {"op": "last"}, True
    return "What is my user id?", [_c("get_current_user_id")], {"op": "last"}, True


def _h2(rng: random.Random, t: Tables):
    kind = rng.randrange(5)
    if kind == 0:
        user = rng.choice(t.users)
        tool_name, what = rng.choice([("get_user_email", "email address"), ("get_user_favorite_color", "favourite colour")])
        return (f"What is {user['name']}'s {what}?",
                [_c("find_users_by_name", name=user["name"]), _c(tool_name, user_id=user["id"])], {"op": "last"}, True)
    if kind == 1:
        food = rng.choice(t.foods)
        return (f"How many calories are in a serving of {food['name'].lower()}?",
                [_c("find_foods_by_name", food=food["name"]), _c("get_food_calories", food_id=food["id"])], {"op": "last"}, True)
    if kind == 2:
        food = rng.choice(t.foods)
        allergen = rng.choice(sorted({a for f in t.foods for a in f["allergic_ingredients"]}))
        return (f"Can someone who is allergic to {allergen.lower()} eat {food['name'].lower()}?",
                [_c("find_foods_by_name", food=food["name"]), _c("get_food_allergic_ingredients", food_id=food["id"])],
                {"op": "lacks", "value": allergen}, True)
    if kind == 3:
        loc = rng.choice(t.locations)
        tool_name, what = rng.choice([("get_current_time_for_location", "What time is it in {} right now?"),
                                      ("get_current_weather_for_location", "What is the weather like in {} right now?")])
        return (what.format(loc["city"]),
                [_c("find_locations_by_name", city=loc["city"]), _c(tool_name, location_id=loc["id"])], {"op": "last"}, True)
    me = t.current_user_id
    tool_name, what = rng.choice([("get_user_name", "name"), ("get_user_favorite_color", "favourite colour"),
                                  ("get_user_email", "email address")])
    return f"What is my {what}?", [_c("get_current_user_id"), _c(tool_name, user_id=me)], {"op": "last"}, True


def _h3(rng: random.Random, t: Tables):
    kind = rng.randrange(4)
    if kind in (0, 1):
        if kind == 0:
            user = rng.choice(t.users)
            who, first = user["name"], _c("find_users_by_name", name=user["name"])
        else:
            user = t.user(t.current_user_id)
            who, first = "the current user", _c("get_current_user_id")
        loc = user["location"]
        tool_name, question, rule = rng.choice([
            ("get_city_for_location", "In which city does {} live?", {"op": "last"}),
            ("get_current_time_for_location", "What is the local time where {} lives?", {"op": "last"}),
            ("get_current_weather_for_location", "What is the weather where {} lives?", {"op": "last"}),
            ("get_current_weather_for_location", "Does {} need an umbrella outside right now?", {"op": "contains", "value": "rain"}),
        ])
        return (question.format(who),
                [first, _c("get_user_location", user_id=user["id"]), _c(tool_name, location_id=loc)], rule, True)
    user = rng.choice(t.users)
    food = user["favorite_foods"][0]
    tool_name, question, rule = rng.choice([
        ("get_food_name", "What is the name of {}'s top favourite food?", {"op": "last"}),
        ("get_food_calories", "How many calories are in a serving of {}'s top favourite food?", {"op": "last"}),
        ("get_food_allergic_ingredients", "How many allergenic ingredients does {}'s top favourite food have?",
         {"op": "count"}),
    ])
    return (question.format(user["name"]),
            [_c("find_users_by_name", name=user["name"]), _c("get_user_favorite_foods", user_id=user["id"]),
             _c(tool_name, food_id=food)], rule, True)


def _h4(rng: random.Random, t: Tables):
    kind = rng.randrange(2)
    if kind == 0:
        a, b = rng.sample(list(t.users), 2)
        tool_name, question, op = rng.choice([
            ("get_user_location", "Do {} and {} live at the same location?", "equal"),
            ("get_user_email", "Do {} and {} use the same email provider?", "same_domain"),
            ("get_user_favorite_color", "Do {} and {} have the same favourite colour?", "equal"),
        ])
        calls = [_c("find_users_by_name", name=a["name"]), _c("find_users_by_name", name=b["name"]),
                 _c(tool_name, user_id=a["id"]), _c(tool_name, user_id=b["id"])]
        return question.format(a["name"], b["name"]), calls, {"op": op, "tool": tool_name}, False
    user = rng.choice([u for u in t.users if len(u["favorite_foods"]) >= 2])
    foods = user["favorite_foods"][:2]
    calls = [_c("find_users_by_name", name=user["name"]), _c("get_user_favorite_foods", user_id=user["id"])]
    calls += [_c("get_food_calories", food_id=f) for f in foods]
    question = f"How many calories do {user['name']}'s two most favourite foods have together (one serving each)?"
    return question, calls, {"op": "sum", "tool": "get_food_calories"}, False


def _h5(rng: random.Random, t: Tables):
    kind = rng.randrange(3)
    if kind < 2:
        user = rng.choice([u for u in t.users if len(u["favorite_foods"]) >= 3])
        foods = user["favorite_foods"][:3]
        calls = [_c("find_users_by_name", name=user["name"]), _c("get_user_favorite_foods", user_id=user["id"])]
        if kind == 0:
            calls += [_c("get_food_calories", food_id=f) for f in foods]
            question = f"What is the total number of calories in one serving of each of {user['name']}'s three favourite foods?"
            return question, calls, {"op": "sum", "tool": "get_food_calories"}, False
        allergen = rng.choice(sorted({a for f in t.foods for a in f["allergic_ingredients"]}))
        calls += [_c("get_food_allergic_ingredients", food_id=f) for f in foods]
        question = f"How many of {user['name']}'s three favourite foods contain {allergen.lower()}?"
        return question, calls, {"op": "count_containing", "tool": "get_food_allergic_ingredients", "value": allergen}, False
    user = rng.choice(t.users)
    loc = rng.choice([x for x in t.locations if x["id"] != user["location"]] + [t.location(user["location"])])
    calls = [_c("find_users_by_name", name=user["name"]), _c("get_user_location", user_id=user["id"]),
             _c("get_current_time_for_location", location_id=user["location"]),
             _c("find_locations_by_name", city=loc["city"]),
             _c("get_current_time_for_location", location_id=loc["id"])]
    question = f"Is the local time where {user['name']} lives the same as the local time in {loc['city']}?"
    return question, calls, {"op": "equal", "tool": "get_current_time_for_location"}, False


_TEMPLATES: dict[int, list[Template]] = {1: [_h1], 2: [_h2], 3: [_h3], 4: [_h4], 5: [_h5]}
