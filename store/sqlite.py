"""The journal store on SQLite: the embedded default (one process writes; see :mod:`store.sql`).

Connection: Python's :mod:`sqlite3` with ``isolation_level=None`` (the store issues BEGIN and
COMMIT itself) and ``check_same_thread=False`` (one connection per handle, used by one thread at
a time under the handle's lock). Session settings, applied on every connection:

* ``PRAGMA journal_mode = WAL`` — readers never block the writer and see one snapshot per
  transaction (the mode is persistent; it is also set at initialisation, and retried while a
  concurrent initialiser holds the file's lock);
* ``PRAGMA synchronous = FULL`` — in WAL mode every COMMIT fsyncs the WAL, so a write is
  durable when the call returns;
* ``PRAGMA busy_timeout`` (:data:`BUSY_TIMEOUT_MS`) — another connection's write transaction is
  waited for, not failed on.

Transactions: ``BEGIN IMMEDIATE`` for every write (append, seal, acquire, renew, release,
cancellation requests, checkpoint signing and cosigning). It takes the database's write lock up
front, so a write transaction's reads and writes form one act, across connections and
processes, and SQLite never has to upgrade a read lock (which can fail with SQLITE_BUSY). Reads
use a deferred ``BEGIN``: one WAL snapshot for every query of the operation. Row locks are not
needed (``lock_suffix`` is empty): one writer at a time is SQLite's rule.

Unique violations are identified by the table and columns SQLite names in its message
("UNIQUE constraint failed: effect_once.tenant, effect_once.run, effect_once.effect_key"),
matched against :data:`store.sql.CONSTRAINTS`. A COMMIT that fails with an I/O error is
reported as :class:`~store.errors.CommitUnknownError` (the WAL may or may not hold the commit);
any other failure is a clean rollback.

The database file must exist to be opened (URI ``mode=rw``): a missing file is "not
initialised", never silently created; :meth:`SQLiteStore.initialise` creates it.
"""

from __future__ import annotations

import os
import sqlite3
import time
import urllib.parse
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from store.sql import CONSTRAINTS, NOT_INITIALISED, Dialect, SQLStore
from tlog.errors import UsageError
from tlog.keys import SignerKey
from tlog.note import Ed25519Signer

BUSY_TIMEOUT_MS = 30_000
"""How long a write waits for another connection's write transaction, in milliseconds."""

_UNIQUE_PREFIX = "UNIQUE constraint failed: "
_BY_COLUMNS = {
    (table, tuple(f"{table}.{c}" for c in cols)): name
    for name, (table, cols) in CONSTRAINTS.items()
}


class SQLiteDialect(Dialect):
    """SQLite through :mod:`sqlite3` (see the module docstring)."""

    name: ClassVar[str] = "sqlite"
    shared: ClassVar[bool] = False
    begin_write: ClassVar[str] = "BEGIN IMMEDIATE"
    begin_read: ClassVar[str] = "BEGIN"
    lock_suffix: ClassVar[str] = ""
    clock_sql: ClassVar[str | None] = None
    types: ClassVar[dict[str, str]] = {
        "blob": "BLOB",
        "key": "TEXT",  # BINARY collation: bytewise, like Python's str order
        "bool": "INTEGER",
        "compact": " WITHOUT ROWID",
    }
    meta_exists_sql: ClassVar[str] = (
        "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'meta'"
    )
    driver_errors: ClassVar[tuple[type[Exception], ...]] = (sqlite3.Error,)

    def __init__(self, path: str, *, create: bool) -> None:
        self.path = path
        self.create = create

    def connect(self) -> Any:
        quoted = urllib.parse.quote(os.path.abspath(self.path))
        uri = f"file:{quoted}?mode={'rwc' if self.create else 'rw'}"
        conn = sqlite3.connect(
            uri,
            uri=True,
            isolation_level=None,
            check_same_thread=False,
            timeout=BUSY_TIMEOUT_MS / 1000,
        )
        try:
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            mode = self._wal(conn)
            if str(mode).lower() != "wal":
                raise sqlite3.OperationalError(f"journal mode is {mode}, WAL is needed")
            conn.execute("PRAGMA synchronous = FULL")
        except BaseException:
            conn.close()
            raise
        return conn

    @staticmethod
    def _wal(conn: sqlite3.Connection) -> object:
        # Switching a new file to WAL needs an exclusive lock, and SQLite answers "database is
        # locked" at once (without its busy handler) while another connection — a concurrent
        # initialiser — holds a lock: wait for it as busy_timeout would.
        deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
        delay = 0.005
        while True:
            try:
                (mode,) = conn.execute("PRAGMA journal_mode = WAL").fetchone()
                return mode
            except sqlite3.OperationalError as e:
                name = getattr(e, "sqlite_errorname", "")
                busy = isinstance(name, str) and name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED"))
                if not busy or time.monotonic() >= deadline:
                    raise
            time.sleep(delay)
            delay = min(delay * 2, 0.1)

    def sql(self, text: str) -> str:
        return text

    def any_of(self, column: str, values: Sequence[int]) -> tuple[str, tuple[Any, ...]]:
        return f"{column} IN ({', '.join('?' * len(values))})", tuple(values)

    def unique_constraint(self, exc: Exception) -> str | None:
        if not isinstance(exc, sqlite3.IntegrityError):
            return None
        msg = str(exc)
        if not msg.startswith(_UNIQUE_PREFIX):
            return None
        columns = tuple(c.strip() for c in msg[len(_UNIQUE_PREFIX) :].split(","))
        table = columns[0].partition(".")[0]
        return _BY_COLUMNS.get((table, columns))

    def commit_unknown(self, exc: Exception, conn: Any) -> bool:
        name = getattr(exc, "sqlite_errorname", "")
        return isinstance(name, str) and name.startswith("SQLITE_IOERR")


class SQLiteStore(SQLStore):
    """The journal store in one SQLite file (see :mod:`store.sql` for the contract's details).

    Requires: ``db`` was initialised (:meth:`initialise`); otherwise UsageError
    ("not initialised: run tlog-store init").
    """

    def __init__(
        self,
        db: str,
        *,
        tenant: str = "default",
        key: SignerKey | None = None,
        record_signer: Ed25519Signer | None = None,
        clock: Callable[[], int] | None = None,
    ) -> None:
        if not isinstance(db, str) or not db:
            raise UsageError("the SQLite database is a file path")
        if not os.path.exists(db):
            raise UsageError(f"{db}: {NOT_INITIALISED}")
        super().__init__(
            SQLiteDialect(db, create=False),
            tenant=tenant,
            key=key,
            record_signer=record_signer,
            clock=clock,
        )

    @classmethod
    def initialise(cls, db: str, origin: str, key: SignerKey) -> None:
        """Create (if needed) and initialise the database file ``db`` (see
        :meth:`SQLStore._initialise`)."""
        if not isinstance(db, str) or not db or db == ":memory:":
            raise UsageError("the SQLite database is a file path")
        cls._initialise(SQLiteDialect(db, create=True), origin, key)
