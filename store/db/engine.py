"""The engine: one connection per handle, and the transaction runner every schema uses.

What differs between SQL engines is confined to a small :class:`Dialect` (implemented by
:mod:`store.db.sqlite` and :mod:`store.db.postgres`); a schema writes portable SQL with ``?``
placeholders and ``{type}`` names in its DDL, and never sees a driver:

=====================  =====================================================================
 dialect member         what it decides
=====================  =====================================================================
 ``connect``            open a connection with its session settings (autocommit at the
                        driver level: the engine issues BEGIN/COMMIT itself)
 ``begin_write``        how a write transaction starts (SQLite ``BEGIN IMMEDIATE``: the
                        database write lock up front; PostgreSQL ``READ COMMITTED``:
                        correctness from row locks, constraints and single statements)
 ``begin_read``         how a multi-query read starts (SQLite deferred ``BEGIN``: one WAL
                        snapshot; PostgreSQL ``REPEATABLE READ READ ONLY``: one snapshot)
 ``lock_suffix``        appended to a SELECT to lock the rows it reads until commit
                        (PostgreSQL ``FOR UPDATE``; nothing on SQLite, whose writers are
                        already serialised by BEGIN IMMEDIATE)
 ``skip_locked``        appended to a locking SELECT so that it passes over rows another
                        transaction holds (PostgreSQL ``FOR UPDATE SKIP LOCKED``: workers
                        claiming queued rows; nothing on SQLite, one writer at a time)
 ``xact_lock``          a named lock held to the end of the transaction, shared or exclusive
                        (PostgreSQL advisory locks; nothing on SQLite, one writer at a time);
                        ``xact_locks`` takes several, in the given order, in one statement
 ``indexed_by``         appended to a table name: read it through a named index (SQLite
                        ``INDEXED BY``, whose planner has no statistics; nothing on PostgreSQL)
 ``analyze_sql``        the statement that refreshes the planner's statistics of some tables
                        (PostgreSQL ``ANALYZE``), or None where the planner keeps none
 ``joined``             run statements on a caller's own connection, inside the caller's
                        open transaction (PostgreSQL: a savepoint; SQLite cannot, and says
                        so: :attr:`can_join` is False)
 ``shared``             several processes may write at once (PostgreSQL)
 ``clock_sql``          the shared clock as an SQL expression (PostgreSQL's server clock),
                        or None for the process clock (SQLite)
 ``types``              column types for the DDL's ``{blob}`` (bytes), ``{key}`` (text that
                        orders bytewise), ``{bool}``, ``{serial}`` (an increasing integer
                        primary key that never reuses a value) and ``{compact}`` (a
                        table-storage suffix for small keyed rows)
 ``sql``/``any_of``     placeholders: schemas write ``?``; ``any_of`` spells "column is one
                        of these integers" (``IN (?, …)`` / ``= ANY(?)``)
 ``unique_constraint``  which of a schema's named unique constraints a violation hit — never
                        guessed from the row being written
 ``foreign_key``        the error is a foreign-key violation
 ``retryable``          errors after which the whole transaction may simply run again
                        (PostgreSQL serialization failures and deadlocks)
 ``commit_unknown``     a COMMIT that failed without a verdict (the write may have landed)
 ``write_lock``         held around every write transaction, before BEGIN (SQLite's writer
                        queue, when the schema asks for it)
 ``init_lock``          serialise concurrent schema creators (PostgreSQL advisory lock)
 ``table_exists_sql``   a query whose single value is true when a table exists
=====================  =====================================================================

Transactions. Every operation of a schema is one function run by :meth:`Session.transact`
inside one transaction: ``BEGIN`` (write or read flavour), the function, ``COMMIT``. Any
exception rolls back, so a failed operation writes nothing. A retryable error, or a
connection found broken before COMMIT was sent, runs the whole function again, at most
:data:`MAX_ATTEMPTS` times: the function must therefore do nothing but statements on its
:class:`Tx` (and pure computation) — no effects outside the database. A COMMIT of a write
that fails without a server verdict raises :class:`~store.db.errors.CommitUnknownError` (the
rule: the write may or may not have landed, so the caller re-reads before it goes on); a
COMMIT that the server turned into a ROLLBACK, and any other driver error, raise
:class:`~store.db.errors.BackendError`. A read's failed COMMIT is never "unknown": it wrote
nothing. A handle has one connection, opened when first needed, used by one thread at a time
(a lock), and replaced when it is found broken. None of these errors is a MalformedError:
a failing database is never the caller's input's fault.

A schema names these errors in its own hierarchy by subclassing :class:`Session`
(:attr:`Session.backend_error`, :attr:`Session.commit_unknown_error`), and creates its tables
with :func:`create_tables`.
"""

from __future__ import annotations

import abc
import contextlib
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, TypeVar

from store.db.errors import BackendError, CommitUnknownError
from tlog.errors import UsageError

T = TypeVar("T")

MAX_ATTEMPTS = 5
"""How many times a transaction runs when it keeps failing with a retryable error."""


class Dialect(abc.ABC):
    """What differs between SQL engines (see the module docstring's table)."""

    name: ClassVar[str]
    shared: ClassVar[bool]
    begin_write: ClassVar[str]
    begin_read: ClassVar[str]
    lock_suffix: ClassVar[str]
    skip_locked: ClassVar[str] = ""
    can_join: ClassVar[bool] = False
    """:meth:`joined` works: statements can join a transaction the caller holds."""
    clock_sql: ClassVar[str | None]
    types: ClassVar[dict[str, str]]
    """DDL substitutions: ``blob``, ``key``, ``bool``, ``serial``, ``compact``."""

    def indexed_by(self, index: str) -> str:
        """Appended to a table in a FROM clause: read it through ``index``, where the planner
        needs telling (SQLite: ``INDEXED BY``, an error rather than a scan when the index
        cannot serve the statement); nothing where statistics guide the planner."""
        return ""

    driver_errors: ClassVar[tuple[type[Exception], ...]]
    """The driver's error classes: anything else raised inside a transaction is not the DB's."""

    @abc.abstractmethod
    def connect(self) -> Any:
        """Open a connection (driver-level autocommit; session settings applied)."""

    def sql(self, text: str) -> str:
        """Translate ``?`` placeholders to the driver's."""
        return text

    @abc.abstractmethod
    def any_of(self, column: str, values: Sequence[int]) -> tuple[str, tuple[Any, ...]]:
        """A condition "``column`` is one of ``values``" (non-empty), with ``?`` placeholders."""

    @abc.abstractmethod
    def unique_constraint(
        self, exc: Exception, constraints: dict[str, tuple[str, tuple[str, ...]]]
    ) -> str | None:
        """The name in ``constraints`` (name -> (table, columns): every unique constraint of
        the schema) that a unique violation hit, or None (not one, or not named there)."""

    @abc.abstractmethod
    def foreign_key(self, exc: Exception) -> bool:
        """True when ``exc`` is a foreign-key violation."""

    @abc.abstractmethod
    def table_exists_sql(self, table: str) -> str:
        """A query whose single value is true when ``table`` (a fixed identifier) exists."""

    def retryable(self, exc: Exception) -> bool:
        """True when the failed transaction may run again as a whole (nothing was written)."""
        return False

    @abc.abstractmethod
    def commit_unknown(self, exc: Exception, conn: Any) -> bool:
        """True when a failed COMMIT gave no verdict: the write may or may not have landed."""

    def usable(self, conn: Any) -> bool:
        """False when the connection is closed or broken and must be replaced."""
        return True

    def committed(self, cursor: Any) -> bool:
        """After COMMIT returned: did it commit? (PostgreSQL turns a failed one into ROLLBACK.)"""
        return True

    def write_lock(self) -> contextlib.AbstractContextManager[object]:
        """Held around every write transaction, before BEGIN (default: nothing)."""
        return contextlib.nullcontext()

    def close(self) -> None:  # noqa: B027 - optional hook, empty by default
        """Release what the dialect holds beside the connection (default: nothing)."""

    def init_lock(self, tx: Tx, owner: str) -> None:  # noqa: B027 - optional hook
        """Serialise concurrent creators of ``owner``'s schema, inside the write transaction
        that creates it; nothing when ``begin_write`` already does."""

    def xact_lock(self, tx: Tx, name: str, *, shared: bool) -> None:  # noqa: B027 - optional
        """Take the lock ``name`` (any text; scoped to the schema) until the transaction ends:
        shared holders exclude an exclusive one. Nothing where writers are serialised already
        (the default)."""

    def xact_locks(self, tx: Tx, names: Sequence[str], *, shared: bool) -> None:
        """:meth:`xact_lock` of each of ``names``, in that order (callers sort them, so that
        two transactions never wait for each other's)."""
        for name in names:
            self.xact_lock(tx, name, shared=shared)

    def analyze_sql(self, tables: Sequence[str]) -> str | None:
        """The statement that refreshes the planner's statistics of ``tables``; None when the
        engine's planner needs none (the default)."""
        del tables
        return None

    def joined(self, conn: Any) -> contextlib.AbstractContextManager[Any]:
        """A cursor on the caller's connection ``conn``, inside the transaction the caller has
        open there, for one operation: what it writes commits or rolls back with the caller's
        transaction, and an exception inside undoes the operation alone (a savepoint), leaving
        the caller's transaction usable. UsageError when ``conn`` cannot be joined (not this
        driver's connection, no transaction open, an isolation level the schema's rules do not
        hold under); an engine that cannot join any (:attr:`can_join` False) always refuses."""
        raise UsageError(f"the {self.name} engine cannot join a caller's transaction")


class Tx:
    """A transaction in progress: statements with ``?`` placeholders, on one cursor."""

    __slots__ = ("_cur", "_d")

    def __init__(self, cursor: Any, dialect: Dialect) -> None:
        self._cur = cursor
        self._d = dialect

    @property
    def dialect(self) -> Dialect:
        return self._d

    def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Run one statement; return its row count."""
        self._cur.execute(self._d.sql(sql), tuple(params))
        return int(self._cur.rowcount)

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        """Run one statement for each parameter row."""
        self._cur.executemany(self._d.sql(sql), rows)

    def all(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Every row of a query (fetching all also runs an ``INSERT … RETURNING`` to
        completion)."""
        self._cur.execute(self._d.sql(sql), tuple(params))
        # Rows are tuples already: sqlite3's default, and the PostgreSQL dialect's tuple_row.
        rows: list[tuple[Any, ...]] = self._cur.fetchall()
        return rows

    def one(self, sql: str, params: Sequence[Any] = ()) -> tuple[Any, ...] | None:
        """The first row of a query, or None."""
        self._cur.execute(self._d.sql(sql), tuple(params))
        rows: list[tuple[Any, ...]] = self._cur.fetchall()  # to the end (see all())
        return rows[0] if rows else None

    def rows_if_any(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run any statement; its rows if it returns some, else []."""
        self._cur.execute(self._d.sql(sql), tuple(params))
        if self._cur.description is None:
            return []
        rows: list[tuple[Any, ...]] = self._cur.fetchall()
        return rows


def first_line(exc: BaseException) -> str:
    """``Type: first line of the message``: a driver error as one line of an error message."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0]}" if text else type(exc).__name__


def create_tables(tx: Tx, owner: str, ddl: Sequence[str]) -> None:
    """Run a schema's ``CREATE … IF NOT EXISTS`` statements (``{type}`` names substituted)
    under the dialect's init lock for ``owner`` (a fixed name, e.g. ``tlog-store``), so that
    several processes may create one schema at once. Requires: a write transaction."""
    tx.dialect.init_lock(tx, owner)
    for stmt in ddl:
        tx.execute(stmt.format(**tx.dialect.types))


def run_joined(
    dialect: Dialect, conn: Any, fn: Callable[[Tx], T], backend_error: type[BackendError]
) -> T:
    """Run ``fn`` on the caller's connection ``conn``, inside the caller's transaction
    (:meth:`Dialect.joined`): no BEGIN, no COMMIT, no retry — the transaction is the caller's,
    and so are its commit and its verdict. A driver error becomes ``backend_error``, after the
    operation was undone (its savepoint rolled back); the caller's transaction goes on."""
    try:
        with dialect.joined(conn) as cur:
            return fn(Tx(cur, dialect))
    except dialect.driver_errors as e:
        raise backend_error(f"{dialect.name}: {first_line(e)}") from e


class _Again(Exception):
    """Internal: the transaction failed before COMMIT and may run again as a whole."""


class Session:
    """One connection, used by one thread at a time, and the transaction runner.

    A schema subclasses it to name its errors and messages (the class attributes).
    """

    backend_error: ClassVar[type[BackendError]] = BackendError
    """Raised for a failed database (a subclass of :class:`~store.db.errors.BackendError`)."""
    commit_unknown_error: ClassVar[type[CommitUnknownError]] = CommitUnknownError
    """Raised for a write's COMMIT without a verdict."""
    closed_message: ClassVar[str] = "the database is closed"
    """The UsageError of a transaction on a closed session."""
    unknown_advice: ClassVar[str] = "re-read before retrying"
    """The end of a :attr:`commit_unknown_error`'s message: what the caller does next."""

    def __init__(self, dialect: Dialect) -> None:
        self._d = dialect
        self._lock = threading.Lock()
        self._conn: Any = None
        self._closed = False

    def _connect(self) -> Any:
        d = self._d
        self._discard()
        try:
            self._conn = d.connect()
        except d.driver_errors as e:
            raise self.backend_error(f"{d.name}: cannot open the database: {first_line(e)}") from e
        return self._conn

    def _discard(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(*self._d.driver_errors):
                conn.close()

    def _rollback(self, conn: Any) -> None:
        # No transaction left, or the connection is gone: nothing to undo here.
        with contextlib.suppress(*self._d.driver_errors):
            conn.cursor().execute("ROLLBACK")

    def transact(self, write: bool, fn: Callable[[Tx], T]) -> T:
        """Run ``fn`` in one transaction (write or read flavour) and commit; see the module
        docstring for retries and the errors."""
        with self._lock, self._d.write_lock() if write else contextlib.nullcontext():
            if self._closed:
                raise UsageError(self.closed_message)
            attempt = 1
            while True:
                try:
                    return self._attempt(write, fn, attempt)
                except _Again:
                    time.sleep(0.001 * attempt)
                    attempt += 1

    def _attempt(self, write: bool, fn: Callable[[Tx], T], attempt: int) -> T:
        """One run of ``fn`` in one transaction: its result, or :class:`_Again` when the
        whole transaction may run again (nothing was written)."""
        d = self._d
        conn = self._conn
        if conn is None or not d.usable(conn):
            conn = self._connect()
        try:
            cur = conn.cursor()
            cur.execute(d.begin_write if write else d.begin_read)
            result = fn(Tx(cur, d))
        except d.driver_errors as e:
            self._rollback(conn)
            # Nothing was committed: COMMIT was never sent. Retry the whole transaction
            # after a retryable error or on a fresh connection.
            if attempt < MAX_ATTEMPTS and (d.retryable(e) or not d.usable(conn)):
                raise _Again from None
            raise self.backend_error(f"{d.name}: {first_line(e)}") from e
        except BaseException:
            self._rollback(conn)
            raise
        try:
            cur.execute("COMMIT")
        except d.driver_errors as e:
            # The verdict is read before the rollback, which could break the connection.
            unknown = write and d.commit_unknown(e, conn)
            self._rollback(conn)
            if unknown:
                raise self.commit_unknown_error(
                    f"{d.name}: COMMIT failed without a verdict ({first_line(e)}); "
                    f"the write may or may not have landed: {self.unknown_advice}"
                ) from e
            if attempt < MAX_ATTEMPTS and d.retryable(e):
                raise _Again from None
            raise self.backend_error(f"{d.name}: COMMIT failed: {first_line(e)}") from e
        if not d.committed(cur):
            raise self.backend_error(f"{d.name}: the transaction was rolled back at COMMIT")
        return result

    def close(self) -> None:
        """Close the connection and release the dialect's resources; later transactions
        raise UsageError."""
        with self._lock:
            self._closed = True
            self._discard()
            self._d.close()


__all__ = [
    "MAX_ATTEMPTS",
    "Dialect",
    "Session",
    "Tx",
    "create_tables",
    "first_line",
    "run_joined",
]
