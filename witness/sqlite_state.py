"""The witness state in one SQLite file: the embedded default (see :mod:`witness.sqlstate`).

The connection and its settings (WAL, ``synchronous = FULL`` — a compare-and-swap that
returned True survives a crash or power loss —, the busy timeout, ``foreign_keys = ON``) and
the transactions are the storage engine's (:mod:`store.db.sqlite`). The witness turns on three
of its options (:class:`SQLiteDialect`):

* the writer queue: before ``BEGIN IMMEDIATE``, a writer takes an exclusive ``flock`` on
  ``<db>-writer.lock`` beside the database, so that several server processes sharing one file
  queue in the kernel instead of polling in SQLite's busy handler (the tail latency);
* the file is created with mode 0600 whatever the umask: the state is the witness's to read;
* a database (or directory) that cannot be written is a UsageError naming the path.

``create=True`` creates the file (and the schema) when missing; ``create=False`` requires both.
"""

from __future__ import annotations

import os
from typing import ClassVar

from store.db.sqlite import BUSY_TIMEOUT_MS
from store.db.sqlite import SQLiteDialect as EngineSQLiteDialect
from tlog.errors import UsageError
from witness.sqlstate import SQLState


class SQLiteDialect(EngineSQLiteDialect):
    """The engine's SQLite dialect with the witness's options (see the module docstring)."""

    writer_queue: ClassVar[bool] = True
    file_mode: ClassVar[int | None] = 0o600
    unwritable_is_usage: ClassVar[bool] = True


class SQLiteState(SQLState):
    """The witness state in the SQLite file ``db`` (see :mod:`witness.sqlstate`).

    Requires: ``db`` a file path (not ``:memory:``: a witness's state must survive it); with
    ``create=False`` the file must hold a witness state (UsageError otherwise).
    """

    def __init__(self, db: str, *, create: bool = True) -> None:
        if not isinstance(db, str) or not db or db == ":memory:":
            raise UsageError("the SQLite database is a file path")
        if not create and not os.path.exists(db):
            raise UsageError(f"{db}: no witness state here (create it first)")
        super().__init__(SQLiteDialect(db, create=create), create=create, where=db)


__all__ = ["BUSY_TIMEOUT_MS", "SQLiteDialect", "SQLiteState"]
