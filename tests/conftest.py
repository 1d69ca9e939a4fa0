"""Shared fixtures: backends for the store and witness batteries.

PostgreSQL tests use ``TLOG_TEST_POSTGRES`` (default
``postgresql://postgres@127.0.0.1:5432/test``). Each test gets a fresh schema, dropped
afterwards. When no server answers, those tests are skipped with the reason shown — unless
``TLOG_REQUIRE_POSTGRES=1`` (set by ``.ci/run``), which turns the skip into a failure.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

POSTGRES_URL = os.environ.get("TLOG_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
REQUIRE_POSTGRES = os.environ.get("TLOG_REQUIRE_POSTGRES") == "1"


def _postgres_unavailable() -> str | None:
    try:
        from store.db.postgres import unavailable
    except ImportError as e:  # pragma: no cover - psycopg is a dependency
        return f"psycopg is not installed: {e}"
    return unavailable(POSTGRES_URL)


_PG_REASON: list[str | None] = []


def postgres_reason() -> str | None:
    """Why PostgreSQL tests cannot run here, or None when they can (cached)."""
    if not _PG_REASON:
        _PG_REASON.append(_postgres_unavailable())
    return _PG_REASON[0]


def require_postgres() -> None:
    """Skip (or, under TLOG_REQUIRE_POSTGRES=1, fail) when no PostgreSQL server answers."""
    reason = postgres_reason()
    if reason is None:
        return
    if REQUIRE_POSTGRES:
        pytest.fail(f"TLOG_REQUIRE_POSTGRES=1 but {reason}")
    pytest.skip(reason)


@dataclass(frozen=True)
class PostgresSchema:
    """A throwaway schema: ``conninfo`` connects with it as the search path."""

    name: str
    conninfo: str


@pytest.fixture
def pg_schema() -> Iterator[PostgresSchema]:
    """A fresh, empty PostgreSQL schema for one test, dropped afterwards."""
    require_postgres()
    import psycopg
    from psycopg.conninfo import make_conninfo

    name = f"t_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{name}"')
    try:
        yield PostgresSchema(name, make_conninfo(POSTGRES_URL, options=f"-c search_path={name}"))
    finally:
        with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{name}" CASCADE')


@dataclass(frozen=True)
class Backend:
    """Where a store lives for one test: exactly one of a SQLite path or a PostgreSQL URL."""

    name: str
    db: str | None = None
    postgres: str | None = None


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """Each backend in turn: a SQLite file in tmp_path, or a fresh PostgreSQL schema."""
    if request.param == "sqlite":
        yield Backend("sqlite", db=str(tmp_path / "store.db"))
        return
    schema = request.getfixturevalue("pg_schema")
    yield Backend("postgres", postgres=schema.conninfo)
