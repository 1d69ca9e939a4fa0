"""The journal store on SQLite: the embedded default (one process writes; see :mod:`store.sql`).

The connection, its settings (WAL, ``synchronous = FULL``, the busy timeout) and the
transactions are the storage engine's (:mod:`store.db.sqlite`), used as they are: the journal
does not take the engine's writer queue (the reason is there). Every write (append, seal,
acquire, renew, release, cancellation requests, checkpoint signing and cosigning) is a
``BEGIN IMMEDIATE`` transaction: the database's write lock up front, so its reads and writes
form one act across connections and processes. Reads use a deferred ``BEGIN``: one WAL
snapshot for every query of the operation.

The database file must exist to be opened (URI ``mode=rw``): a missing file is "not
initialised", never silently created; :meth:`SQLiteStore.initialise` creates it.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from store.db.sqlite import BUSY_TIMEOUT_MS, SQLiteDialect
from store.schema import NOT_INITIALISED
from store.sql import SQLStore
from tlog.errors import UsageError
from tlog.keys import SignerKey
from tlog.note import Ed25519Signer


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
        cls._initialise(SQLiteDialect(_check_path(db), create=True), origin, key)


__all__ = ["BUSY_TIMEOUT_MS", "SQLiteDialect", "SQLiteStore"]
