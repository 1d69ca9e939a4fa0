"""The witness state on PostgreSQL: a witness run as several processes (see
:mod:`witness.sqlstate`).

Connection: psycopg 3 with driver-level autocommit (:class:`witness.sqlstate.Session` issues
BEGIN and COMMIT). The tables live in the connection's current schema (the first existing
schema of its ``search_path``), so one database can hold several states.

* Every session sets ``synchronous_commit = on``: a COMMIT returns once the WAL is flushed,
  whatever the server's, database's or role's default.
* Writes run in ``READ COMMITTED``. The compare-and-swap is one conditional statement: a
  racing ``UPDATE … WHERE origin = ? AND size = ? AND root = ?`` waits for the row lock held
  by the first and then re-evaluates its WHERE clause against the committed row (so it changes
  nothing once the state moved); a racing first ``INSERT … ON CONFLICT DO NOTHING`` waits for
  the first inserter's verdict and then does nothing. ``import_state`` locks each stored row
  it compares (``SELECT … FOR UPDATE``).
* Multi-query reads run in ``REPEATABLE READ READ ONLY``: one snapshot.
* ``SerializationFailure`` and ``DeadlockDetected`` re-run the whole transaction (bounded).
* A foreign-key violation (``ForeignKeyViolation``) is an origin that is not configured.
* A COMMIT that fails without a server verdict — an ``OperationalError`` without SQLSTATE, or
  a connection left broken — raises :class:`~witness.sqlstate.CommitUnknownError`; a COMMIT
  that PostgreSQL turned into a ROLLBACK is an error, never a silent success.

Opening creates the tables under a transaction-scoped advisory lock keyed by the schema name
(concurrent ``CREATE TABLE IF NOT EXISTS`` can otherwise fail on PostgreSQL's catalogs), so
several processes may open one fresh state at once.
"""

from __future__ import annotations

from typing import Any, ClassVar

import psycopg
from psycopg import errors as pg_errors

from tlog.errors import UsageError
from witness.sqlstate import Dialect, SQLState, Tx


class PostgresDialect(Dialect):
    """PostgreSQL through psycopg 3 (see the module docstring)."""

    name: ClassVar[str] = "postgres"
    begin_write: ClassVar[str] = "BEGIN ISOLATION LEVEL READ COMMITTED"
    begin_read: ClassVar[str] = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"
    lock_suffix: ClassVar[str] = " FOR UPDATE"
    types: ClassVar[dict[str, str]] = {
        "key": 'TEXT COLLATE "C"',  # bytewise order, like Python's str order
        "blob": "BYTEA",
        "bool": "BOOLEAN",
        "serial": "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY",
    }
    schema_exists_sql: ClassVar[str] = "SELECT to_regclass('witness_meta') IS NOT NULL"
    driver_errors: ClassVar[tuple[type[Exception], ...]] = (psycopg.Error,)

    def __init__(self, conninfo: str) -> None:
        self.conninfo = conninfo
        self._sql: dict[str, str] = {}

    def connect(self) -> Any:
        conn = psycopg.connect(self.conninfo, autocommit=True)
        try:
            # COMMIT must mean "on disk" whatever the server, database or role default says
            # (synchronous_commit = off would let a crash undo a write already answered).
            conn.execute("SET synchronous_commit = on")
        except BaseException:
            conn.close()
            raise
        return conn

    def sql(self, text: str) -> str:
        out = self._sql.get(text)
        if out is None:
            # The state's SQL holds no '?' or '%' other than its placeholders.
            out = self._sql[text] = text.replace("?", "%s")
        return out

    def foreign_key(self, exc: Exception) -> bool:
        return isinstance(exc, pg_errors.ForeignKeyViolation)

    def retryable(self, exc: Exception) -> bool:
        return isinstance(exc, pg_errors.SerializationFailure | pg_errors.DeadlockDetected)

    def commit_unknown(self, exc: Exception, conn: Any) -> bool:
        no_verdict = isinstance(exc, psycopg.OperationalError) and exc.sqlstate is None
        return no_verdict or bool(getattr(conn, "broken", False))

    def usable(self, conn: Any) -> bool:
        return not bool(conn.closed) and not bool(conn.broken)

    def committed(self, cursor: Any) -> bool:
        return bool(cursor.statusmessage == "COMMIT")

    def init_lock(self, tx: Tx) -> None:
        row = tx.one("SELECT current_schema()")
        if row is None or row[0] is None:
            raise UsageError("the connection's search_path names no existing schema")
        tx.one("SELECT pg_advisory_xact_lock(hashtext('tlog-witness init ' || current_schema()))")


class PostgresState(SQLState):
    """The witness state in the current schema of the PostgreSQL connection ``conninfo`` (a
    libpq string or URL); see :mod:`witness.sqlstate`. With ``create=False`` the tables must
    exist (UsageError otherwise)."""

    def __init__(self, conninfo: str, *, create: bool = True) -> None:
        if not isinstance(conninfo, str):
            raise UsageError("the PostgreSQL connection is a libpq string or URL")
        super().__init__(PostgresDialect(conninfo), create=create, where="postgres")
