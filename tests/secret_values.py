"""Secret values for the tests of redaction (issue 38, item 4): drawn at random per test session,
so no list of known secrets (no ``sk-`` prefix, no ``api_key`` name) can find them. Tests that
pass a secret to toolgym (``serve --token``, credentials in ``--base-url``) take it from here;
``conftest.py`` then greps every run directory the session wrote for all of them."""

from __future__ import annotations

import secrets

SECRETS = {
    "token": secrets.token_hex(10),
    "user": "u" + secrets.token_hex(5),
    "password": secrets.token_urlsafe(9).replace("-", "x").replace("_", "y"),
    "query": secrets.token_hex(8),
    "query_name": "q" + secrets.token_hex(3),  # a parameter name no deny-list holds
}


def leaks_in(directory) -> list[str]:
    """``"FILE: NAME"`` for each secret of :data:`SECRETS` found in a file under ``directory``
    that belongs to a run directory (a folder holding ``run.json``, and everything below it).
    The parameter's name is not a secret and is not searched for."""
    from pathlib import Path

    found = []
    values = {k: v.encode() for k, v in SECRETS.items() if k != "query_name"}
    for run_json in Path(directory).rglob("run.json"):
        for path in run_json.parent.rglob("*"):
            if not path.is_file() or path.is_symlink() or path.stat().st_size > 50_000_000:
                continue
            data = path.read_bytes()
            found += [f"{path}: {name}" for name, value in values.items() if value in data]
    return sorted(set(found))
