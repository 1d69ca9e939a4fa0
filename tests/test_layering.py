"""The import directions between the packages, as docs/architecture.md §1 states them.

``tlog`` is the formats (docs/formats.md): the standard library and its crypto and JSON
dependencies only; its command-line layer ``tlog.cli`` is imported by no format module.
``verifier`` checks offline: no database code, no store, no witness. ``witness`` may use the
storage engine of ``store`` (``store.db``) and nothing else of ``store``; ``store`` uses only
the witness's client, and only in ``store.publish``; the engine itself
imports the standard library, ``tlog`` and (its PostgreSQL dialect only) psycopg. Every import
statement counts, also those inside functions (imported lazily).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

TLOG_THIRD_PARTY = {"cryptography", "nacl", "orjson"}
"""What tlog may import beside the standard library and itself (pyproject.toml's core)."""

DATABASE_DRIVERS = {"sqlite3", "psycopg", "psycopg_pool"}


def imports(package: str) -> list[tuple[str, int, str]]:
    """(file, line, imported module) for every import in ``package``'s modules."""
    out = []
    base = ROOT / package
    for path in sorted(base.rglob("*.py")):  # subpackages too (tlog.cli, tlog.export, store.db)
        name = path.relative_to(base).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                out += [(name, node.lineno, a.name) for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                out.append((name, node.lineno, node.module))
    return out


def top(module: str) -> str:
    return module.split(".", 1)[0]


def test_the_scan_sees_imports() -> None:
    # The scan itself: it finds lazy imports (inside functions) too.
    found = {m for _, _, m in imports("witness")}
    assert {"aiohttp", "tlog.checkpoint", "uvloop"} <= found


def test_the_scan_sees_subpackages() -> None:
    files = {f for f, _, _ in imports("tlog")}
    assert {"cli/run.py", "export/scan.py"} <= files


def test_no_format_module_imports_the_command_line_layer() -> None:
    bad = [
        (f, n, m)
        for f, n, m in imports("tlog")
        if not f.startswith("cli/") and (m == "tlog.cli" or m.startswith("tlog.cli."))
    ]
    assert bad == []


def test_store_uses_only_the_witness_client_and_only_to_publish() -> None:
    found = [(f, m) for f, _, m in imports("store") if top(m) == "witness"]
    assert found, "the scan should see store.publish's import of witness.client"
    assert {(f, m) for f, m in found} == {("publish.py", "witness.client")}


def test_tlog_imports_only_the_standard_library_and_its_crypto() -> None:
    bad = [
        (f, n, m)
        for f, n, m in imports("tlog")
        if top(m) not in sys.stdlib_module_names and top(m) not in TLOG_THIRD_PARTY | {"tlog"}
    ]
    assert bad == []


@pytest.mark.parametrize("forbidden", ["store", "witness", *sorted(DATABASE_DRIVERS), "aiohttp"])
def test_verifier_imports_no_database_code(forbidden: str) -> None:
    assert [(f, n, m) for f, n, m in imports("verifier") if top(m) == forbidden] == []


def test_witness_uses_nothing_of_store_but_its_storage_engine() -> None:
    bad = [
        (f, n, m)
        for f, n, m in imports("witness")
        if top(m) == "store" and m != "store.db" and not m.startswith("store.db.")
    ]
    assert bad == []


def test_the_storage_engine_imports_only_the_standard_library_tlog_and_its_driver() -> None:
    # store.db is below both schemas (the journal, the witness's state): nothing of store
    # outside store.db, nothing of witness; psycopg only in the PostgreSQL dialect.
    bad = [
        (f, n, m)
        for f, n, m in imports("store/db")
        if top(m) not in sys.stdlib_module_names
        and top(m) != "tlog"
        and m != "store.db"
        and not m.startswith("store.db.")
        and not (f == "postgres.py" and top(m) == "psycopg")
    ]
    assert bad == []
