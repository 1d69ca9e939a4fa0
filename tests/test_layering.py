"""The import directions between the packages, as docs/architecture.md §1 states them.

``tlog`` is the formats (docs/formats.md): the standard library and its crypto and JSON
dependencies only; its command-line layer ``tlog.cli`` is imported by no format module.
``verifier`` checks offline: no database code, no store, no witness. ``witness`` may use the
storage engine of ``store`` (``store.db``) and nothing else of ``store``; ``store`` uses only
the witness's client, and only in ``store.publish``; the engine itself
imports the standard library, ``tlog`` and (its PostgreSQL dialect only) psycopg. Every import
statement counts, also those inside functions (imported lazily).

What a command loads when it runs is checked too (pyproject.toml's extras, :mod:`tlog.extras`):
the verifier and ``tlog`` run on the base install, so they load none of the extras' modules,
and importing a command loads none either (a verb imports what it needs when it runs).
tests/test_install.py checks the same in a fresh install, where the extras are really absent.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

TLOG_THIRD_PARTY = {"cryptography", "nacl", "orjson"}
"""What tlog may import beside the standard library and itself (pyproject.toml's core)."""

DATABASE_DRIVERS = {"sqlite3", "psycopg", "psycopg_pool"}

EXTRA_MODULES = ("aiohttp", "psycopg", "requests", "uvloop")
"""The modules of pyproject.toml's extras (tlog.extras.EXTRAS): never loaded by the base roles."""


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


def test_store_uses_aiohttp_only_in_its_tile_server() -> None:
    found = {f for f, _, m in imports("store") if top(m) == "aiohttp"}
    assert found == {"tileserver.py"}


def test_tlog_imports_only_the_standard_library_and_its_crypto() -> None:
    bad = [
        (f, n, m)
        for f, n, m in imports("tlog")
        if top(m) not in sys.stdlib_module_names and top(m) not in TLOG_THIRD_PARTY | {"tlog"}
    ]
    assert bad == []


@pytest.mark.parametrize(
    "forbidden", ["store", "witness", *sorted(DATABASE_DRIVERS), "aiohttp", "requests", "uvloop"]
)
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


_RUN_THE_BASE_ROLES = """
import contextlib, io, json, sys
import tlog, verifier, store, witness
import tlog.cli.command, verifier.cli, store.cli, witness.cli
from tlog.cli.command import main as tlog_main
from verifier.cli import main as verify_main
loaded_by_imports = [m for m in {modules!r} if m in sys.modules]
checkpoint, vkey = sys.argv[1], sys.argv[2]
out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
with contextlib.redirect_stdout(out):
    statuses = [
        verify_main(["checkpoint", "--log-vkey", vkey, checkpoint]),
        verify_main(["checkpoint", "--log-vkey", vkey, "--json", checkpoint]),
        tlog_main(["open", "--vkey", vkey, checkpoint]),
    ]
out.flush()
print(json.dumps({{
    "statuses": statuses,
    "valid": '"verdict": "valid"' in out.buffer.getvalue().decode(),
    "loaded_by_imports": loaded_by_imports,
    "loaded": [m for m in {modules!r} if m in sys.modules],
}}))
"""


def test_the_base_roles_load_no_module_of_an_extra(tmp_path: Path) -> None:
    # In this environment every extra is installed: what matters is that nothing imports them.
    # Run in a fresh interpreter, from a directory that is not the checkout (whose packages the
    # environment's editable install points at anyway).
    data = ROOT / "testdata" / "sum.golang.org"
    vkey = (data / "vkey.txt").read_text(encoding="utf-8").strip()
    code = _RUN_THE_BASE_ROLES.format(modules=EXTRA_MODULES)
    proc = subprocess.run(
        [sys.executable, "-c", code, str(data / "checkpoint-6476701.txt"), vkey],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=False,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result == {"statuses": [0, 0, 0], "valid": True, "loaded_by_imports": [], "loaded": []}
