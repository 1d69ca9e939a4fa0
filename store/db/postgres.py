"""The engine on PostgreSQL: several writers, one database.

Imported only when a PostgreSQL database is opened: it is the one module of the engine that
needs psycopg.

Connection: psycopg 3 with driver-level autocommit; the engine issues its own BEGIN and COMMIT.
A schema's tables live in the connection's current schema (the first existing schema of its
``search_path``), so one database can hold several stores and witness states — the tests give
each its own schema.

* Every session sets ``synchronous_commit = on``: a COMMIT returns once the WAL is flushed,
  whatever the server's, database's or role's default.
* Writes run in ``READ COMMITTED``. Correctness comes from row locks (``SELECT … FOR UPDATE``,
  :attr:`~store.db.engine.Dialect.lock_suffix`), constraints and single conditional
  statements, not from the isolation level: each later statement of a transaction takes a
  fresh snapshot, so it sees whatever the previous holder of a lock committed.
* Multi-query reads run in ``REPEATABLE READ READ ONLY``: one snapshot, and such a transaction
  never fails to serialise.
* ``SerializationFailure`` and ``DeadlockDetected`` re-run the whole transaction (bounded).
* A unique violation is identified by ``e.diag.constraint_name`` (a schema names every
  constraint it needs to tell apart), a foreign-key violation by ``ForeignKeyViolation``.
* A COMMIT that fails without a server verdict — an ``OperationalError`` without SQLSTATE, or
  a connection left broken — has no verdict; a COMMIT that PostgreSQL turned into a ROLLBACK
  (the transaction had failed) is an error, never a silent success.

Joining a caller's transaction (:meth:`PostgresDialect.joined`): the caller's psycopg
connection, with a transaction open in ``READ COMMITTED`` (anything else is refused); each
operation runs in a savepoint there, with ``SET LOCAL synchronous_commit = on`` so that the
caller's COMMIT is durable, and its rows read as tuples whatever the connection's row factory.

Clock: the server's, ``floor(extract(epoch from clock_timestamp()))::bigint``, read inside the
transaction (after the locks are taken), so writers with skewed clocks agree on times.

Schema creation takes a transaction-scoped advisory lock keyed by the owner's name and the
schema name before ``CREATE … IF NOT EXISTS`` (concurrent creators can otherwise fail on
PostgreSQL's catalogs), so several processes may create one schema at once.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator, Sequence
from typing import Any, ClassVar

import psycopg
from psycopg import errors as pg_errors
from psycopg import pq
from psycopg.rows import tuple_row

from store.db.engine import Dialect, Tx
from tlog.errors import UsageError

_NAME = re.compile(r"[a-z][a-z0-9_-]*")  # what an owner or table name in SQL text may be


class PostgresDialect(Dialect):
    """PostgreSQL through psycopg 3 (see the module docstring); ``conninfo`` is a libpq
    connection string or URL."""

    name: ClassVar[str] = "postgres"
    shared: ClassVar[bool] = True
    begin_write: ClassVar[str] = "BEGIN ISOLATION LEVEL READ COMMITTED"
    begin_read: ClassVar[str] = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"
    lock_suffix: ClassVar[str] = " FOR UPDATE"
    skip_locked: ClassVar[str] = " FOR UPDATE SKIP LOCKED"
    can_join: ClassVar[bool] = True
    clock_sql: ClassVar[str | None] = "floor(extract(epoch from clock_timestamp()))::bigint"
    types: ClassVar[dict[str, str]] = {
        "blob": "BYTEA",
        "key": 'TEXT COLLATE "C"',  # bytewise order, like Python's str order
        "bool": "BOOLEAN",
        "serial": "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY",
        "compact": "",
    }
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
            # A schema's SQL holds no '?' or '%' other than its placeholders.
            out = self._sql[text] = text.replace("?", "%s")
        return out

    def any_of(self, column: str, values: Sequence[int]) -> tuple[str, tuple[Any, ...]]:
        return f"{column} = ANY(?::bigint[])", (list(values),)

    def unique_constraint(
        self, exc: Exception, constraints: dict[str, tuple[str, tuple[str, ...]]]
    ) -> str | None:
        if not isinstance(exc, pg_errors.UniqueViolation):
            return None
        name = exc.diag.constraint_name
        return name if name in constraints else None

    def foreign_key(self, exc: Exception) -> bool:
        return isinstance(exc, pg_errors.ForeignKeyViolation)

    def table_exists_sql(self, table: str) -> str:
        assert _NAME.fullmatch(table), table
        return f"SELECT to_regclass('{table}') IS NOT NULL"

    def retryable(self, exc: Exception) -> bool:
        return isinstance(exc, pg_errors.SerializationFailure | pg_errors.DeadlockDetected)

    def commit_unknown(self, exc: Exception, conn: Any) -> bool:
        no_verdict = isinstance(exc, psycopg.OperationalError) and exc.sqlstate is None
        return no_verdict or bool(getattr(conn, "broken", False))

    def usable(self, conn: Any) -> bool:
        return not bool(conn.closed) and not bool(conn.broken)

    def committed(self, cursor: Any) -> bool:
        return bool(cursor.statusmessage == "COMMIT")

    def xact_lock(self, tx: Tx, name: str, *, shared: bool) -> None:
        fn = "pg_advisory_xact_lock_shared" if shared else "pg_advisory_xact_lock"
        tx.one(f"SELECT {fn}(hashtext(? || ' ' || current_schema()))", (name,))

    def xact_locks(self, tx: Tx, names: Sequence[str], *, shared: bool) -> None:
        # One round trip for a batch's locks (a buffer of 100 events took 200, one each):
        # taken row by row in the array's order (WITH ORDINALITY, ORDER BY it).
        if len(names) < 2:
            super().xact_locks(tx, names, shared=shared)
            return
        fn = "pg_advisory_xact_lock_shared" if shared else "pg_advisory_xact_lock"
        tx.all(
            f"SELECT {fn}(hashtext(t.name || ' ' || current_schema()))"  # noqa: S608 - fixed
            " FROM unnest(?::text[]) WITH ORDINALITY AS t(name, n) ORDER BY t.n",
            (list(names),),
        )

    def analyze_sql(self, tables: Sequence[str]) -> str | None:
        return f"ANALYZE {', '.join(tables)}"

    @contextlib.contextmanager
    def joined(self, conn: Any) -> Iterator[Any]:
        # The caller's transaction must be open (psycopg's transaction() on an idle connection
        # would begin and *commit* one of its own) and READ COMMITTED: the schemas' rule is
        # "lock, then read in later statements", each with a fresh snapshot; under REPEATABLE
        # READ the reads after a lock would see the snapshot of the caller's first statement.
        if not isinstance(conn, psycopg.Connection):
            raise UsageError(
                f"a joined transaction needs a psycopg connection, not {type(conn).__name__}"
            )
        status = conn.info.transaction_status
        if status == pq.TransactionStatus.IDLE:
            raise UsageError(
                "the connection has no transaction open: begin one (with conn.transaction():)"
            )
        if status != pq.TransactionStatus.INTRANS:
            raise UsageError(f"the connection's transaction cannot be joined ({status.name})")
        cur = conn.cursor(row_factory=tuple_row)
        cur.execute("SELECT current_setting('transaction_isolation')")
        row = cur.fetchone()
        if row is None or row[0] != "read committed":
            level = None if row is None else row[0]
            raise UsageError(
                f"the connection's transaction is {level}: a joined transaction must be"
                " READ COMMITTED"
            )
        # COMMIT must mean "on disk" (connect's setting), for the caller's commit too.
        cur.execute("SET LOCAL synchronous_commit = on")
        with conn.transaction():  # a savepoint inside the caller's transaction
            yield cur

    def init_lock(self, tx: Tx, owner: str) -> None:
        assert _NAME.fullmatch(owner), owner
        row = tx.one("SELECT current_schema()")
        if row is None or row[0] is None:
            raise UsageError("the connection's search_path names no existing schema")
        tx.one(f"SELECT pg_advisory_xact_lock(hashtext('{owner} init ' || current_schema()))")


__all__ = ["PostgresDialect", "unavailable"]


def unavailable(conninfo: str) -> str | None:
    """Why no PostgreSQL server can be used at ``conninfo`` (one line), or None when one
    answers a query within 3 seconds — for tests and benchmarks that need a server."""
    try:
        with psycopg.connect(conninfo, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as e:
        return f"no PostgreSQL server at {conninfo}: {str(e).strip().splitlines()[0]}"
    return None
