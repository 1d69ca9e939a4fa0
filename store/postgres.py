"""The journal store on PostgreSQL: several writers, one database (see :mod:`store.sql`).

Connection: psycopg 3 with driver-level autocommit; the store issues its own BEGIN and COMMIT.
The schema lives in the connection's current schema (the first existing schema of its
``search_path``), so one database can hold several stores — the tests give each its own schema.

Transactions and locks:

* every session sets ``synchronous_commit = on``: a COMMIT returns once the WAL is flushed,
  whatever the server's, database's or role's default;
* writes run in ``READ COMMITTED``. Correctness comes from row locks and constraints, not from
  the isolation level: every write to a run first ensures and locks the run's ``run_state``
  row (``INSERT … ON CONFLICT DO NOTHING`` when missing, then ``SELECT … FOR UPDATE``), and
  reads the lease, the seal and the head in later statements, whose fresh snapshots see
  whatever the previous lock holder committed; seals also lock the tenant's ``log_state`` row,
  so positions are dense (position = size, then size + 1) and the stored tree hashes are
  appended in the same transaction;
* multi-query reads run in ``REPEATABLE READ READ ONLY``: one snapshot, and such a transaction
  never fails to serialise;
* ``SerializationFailure`` and ``DeadlockDetected`` re-run the whole transaction (bounded);
* a unique violation is identified by ``e.diag.constraint_name`` (the schema names every
  constraint), never by what the record being written carries;
* a COMMIT that fails without a server verdict — an ``OperationalError`` without SQLSTATE, or a
  connection left broken — raises :class:`~store.errors.CommitUnknownError`, for every write;
* a COMMIT that PostgreSQL turned into a ROLLBACK (the transaction had failed) is an error,
  never a silent success.

Clock: the server's, ``floor(extract(epoch from clock_timestamp()))::bigint``, read inside the
transaction (after the locks are taken), so writers with skewed clocks agree on lease expiry.
An injected clock overrides it.

Initialisation takes a transaction-scoped advisory lock keyed by the schema name before
``CREATE … IF NOT EXISTS``, so several processes may initialise one store at once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import psycopg
from psycopg import errors as pg_errors

from store.sql import CONSTRAINTS, Dialect, SQLStore, Tx
from tlog.errors import UsageError
from tlog.keys import SignerKey
from tlog.note import Ed25519Signer


class PostgresDialect(Dialect):
    """PostgreSQL through psycopg 3 (see the module docstring)."""

    name: ClassVar[str] = "postgres"
    shared: ClassVar[bool] = True
    begin_write: ClassVar[str] = "BEGIN ISOLATION LEVEL READ COMMITTED"
    begin_read: ClassVar[str] = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"
    lock_suffix: ClassVar[str] = " FOR UPDATE"
    clock_sql: ClassVar[str | None] = "floor(extract(epoch from clock_timestamp()))::bigint"
    types: ClassVar[dict[str, str]] = {
        "blob": "BYTEA",
        "key": 'TEXT COLLATE "C"',  # bytewise order, like Python's str order
        "bool": "BOOLEAN",
        "compact": "",
    }
    meta_exists_sql: ClassVar[str] = "SELECT to_regclass('meta') IS NOT NULL"
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
            # The store's SQL holds no '?' or '%' other than its placeholders.
            out = self._sql[text] = text.replace("?", "%s")
        return out

    def any_of(self, column: str, values: Sequence[int]) -> tuple[str, tuple[Any, ...]]:
        return f"{column} = ANY(?::bigint[])", (list(values),)

    def unique_constraint(self, exc: Exception) -> str | None:
        if not isinstance(exc, pg_errors.UniqueViolation):
            return None
        name = exc.diag.constraint_name
        return name if name in CONSTRAINTS else None

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
        tx.one("SELECT pg_advisory_xact_lock(hashtext('tlog-store init ' || current_schema()))")


class PostgresStore(SQLStore):
    """The journal store in a PostgreSQL schema (see :mod:`store.sql` for the contract's
    details).

    ``conninfo`` is a libpq connection string or URL; the store lives in its current schema.
    Requires: the schema was initialised (:meth:`initialise`); otherwise UsageError
    ("not initialised: run tlog-store init").
    """

    def __init__(
        self,
        conninfo: str,
        *,
        tenant: str = "default",
        key: SignerKey | None = None,
        record_signer: Ed25519Signer | None = None,
        clock: Callable[[], int] | None = None,
    ) -> None:
        if not isinstance(conninfo, str):
            raise UsageError("the PostgreSQL connection is a libpq string or URL")
        super().__init__(
            PostgresDialect(conninfo),
            tenant=tenant,
            key=key,
            record_signer=record_signer,
            clock=clock,
        )

    @classmethod
    def initialise(cls, conninfo: str, origin: str, key: SignerKey) -> None:
        """Create the schema's tables (if needed) and record the origin and log key (see
        :meth:`SQLStore._initialise`)."""
        if not isinstance(conninfo, str):
            raise UsageError("the PostgreSQL connection is a libpq string or URL")
        cls._initialise(PostgresDialect(conninfo), origin, key)
