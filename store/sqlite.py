"""The journal store on SQLite: the embedded default (one process writes; see :mod:`store.sql`).

The connection, its settings (WAL, ``synchronous = FULL``, the busy timeout) and the
transactions are the storage engine's (:mod:`store.db.sqlite`). The journal does not take the
engine's writer queue (the reason is there); it does checkpoint its WAL on a thread of the
handle's (:class:`JournalDialect`, :mod:`store.db.checkpointer`): a batch of inbox events or
of journal records writes pages all over its indexes, and copying them back into the database
file was a third of such a batch's commit when the writer did it. Every write (append, seal,
acquire, renew, release, cancellation requests, checkpoint signing and cosigning) is a
``BEGIN IMMEDIATE`` transaction: the database's write lock up front, so its reads and writes
form one act across connections and processes. Reads use a deferred ``BEGIN``: one WAL
snapshot for every query of the operation.

The database file must exist to be opened (URI ``mode=rw``): a missing file is "not
initialised", never silently created; :meth:`SQLiteStore.initialise` creates it.

The ephemeral store (:class:`MemoryStore`, :func:`store.open.open_in_memory`) is the same
schema and code on a SQLite database in memory: a shared-cache memory database with a name of
its own (``file:tlog-store-memory-<pid>-<n>?mode=memory&cache=shared``), kept alive by one idle
connection the handle holds, so that the initialisation's connection and the handle's see one
database. Closing the handle closes that connection and the database is gone; nothing is ever
written to disk, so it leaves nothing behind — and cannot outlive a crash, or the process: it
is for tests and simulations, never for a journal anyone must keep. No WAL (a memory database
has none) and no fsync: its writes are atomic and isolated, not durable.
"""

from __future__ import annotations

import itertools
import os
import sqlite3
from collections.abc import Callable
from typing import Any

from store.db.sqlite import BUSY_TIMEOUT_MS, SQLiteDialect
from store.schema import NOT_INITIALISED
from store.sql import SQLStore
from tlog.errors import UsageError
from tlog.keys import SignerKey
from tlog.note import Ed25519Signer


class JournalDialect(SQLiteDialect):
    """The engine's SQLite dialect with the WAL checkpointed on a thread (module docstring)."""

    background_checkpoints = True


def _check_path(db: object) -> str:
    if not isinstance(db, str) or not db or db == ":memory:":
        raise UsageError("the SQLite database is a file path")
    return db


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
            JournalDialect(db, create=False),
            tenant=tenant,
            key=key,
            record_signer=record_signer,
            clock=clock,
        )

    @classmethod
    def initialise(cls, db: str, origin: str, key: SignerKey) -> None:
        """Create (if needed) and initialise the database file ``db`` (see
        :meth:`SQLStore._initialise`)."""
        cls._initialise(SQLiteDialect(_check_path(db), create=True), origin, key)


_MEMORY_NAMES = itertools.count()


class _MemoryDialect(SQLiteDialect):
    """SQLite on a named shared-cache memory database, alive while :attr:`keeper` is open."""

    def __init__(self) -> None:
        super().__init__(f"tlog-store-memory-{os.getpid()}-{next(_MEMORY_NAMES)}", create=True)
        self._uri = f"file:{self.path}?mode=memory&cache=shared"
        self.keeper: sqlite3.Connection | None = self._open()

    def _open(self) -> sqlite3.Connection:
        return sqlite3.connect(
            self._uri,
            uri=True,
            isolation_level=None,
            check_same_thread=False,
            timeout=BUSY_TIMEOUT_MS / 1000,
        )

    def connect(self) -> Any:
        if self.keeper is None:
            raise sqlite3.OperationalError("the in-memory store is closed: its data is gone")
        conn = self._open()
        try:
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            conn.execute("PRAGMA foreign_keys = ON")
        except BaseException:
            conn.close()
            raise
        return conn

    def discard(self) -> None:
        """Close the keeper: the database is freed."""
        keeper, self.keeper = self.keeper, None
        if keeper is not None:
            keeper.close()


class MemoryStore(SQLStore):
    """The journal store in memory (see the module docstring): initialised with ``origin`` and
    the log key ``key`` when made, gone when closed."""

    def __init__(
        self,
        origin: str,
        key: SignerKey,
        *,
        tenant: str = "default",
        record_signer: Ed25519Signer | None = None,
        clock: Callable[[], int] | None = None,
    ) -> None:
        dialect = _MemoryDialect()
        self._memory = dialect
        try:
            self._initialise(dialect, origin, key)
            super().__init__(
                dialect, tenant=tenant, key=key, record_signer=record_signer, clock=clock
            )
        except BaseException:
            dialect.discard()
            raise

    def close(self) -> None:
        super().close()
        self._memory.discard()


__all__ = ["BUSY_TIMEOUT_MS", "JournalDialect", "MemoryStore", "SQLiteDialect", "SQLiteStore"]
