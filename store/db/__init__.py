"""The storage engine: connections, transactions, retries and dialects, written once.

The journal store (:mod:`store.sql`) and the witness's state (:mod:`witness.sqlstate`) are two
schemas on this engine; it imports only the standard library, :mod:`tlog` and (in
:mod:`store.db.postgres` only, loaded when a PostgreSQL database is opened) psycopg — nothing
else of :mod:`store`, nothing of :mod:`witness`.

=========================  =================================================================
 module                     what it holds
=========================  =================================================================
 :mod:`store.db.engine`     :class:`Dialect` (what differs between SQL engines), :class:`Tx`
                            (a transaction's statements), :class:`Session` (one connection
                            and the transaction runner: retry, the commit-unknown rule,
                            reconnecting), :func:`create_tables`; the transaction discipline
 :mod:`store.db.sqlite`     :class:`SQLiteDialect`: WAL, ``synchronous=FULL``, busy timeout,
                            ``BEGIN IMMEDIATE``, the optional ``flock`` writer queue
 :mod:`store.db.postgres`   ``PostgresDialect``: ``synchronous_commit``, READ COMMITTED
                            writes, REPEATABLE READ reads, retry on serialization failure
 :mod:`store.db.errors`     :class:`DatabaseError`, :class:`BackendError`,
                            :class:`CommitUnknownError`
 :mod:`store.db.values`     :func:`check_int` (arguments), :class:`StoredValues` (the shape
                            of what a query returned)
=========================  =================================================================

A schema on the engine is its DDL and its own functions, nothing more:

1. its DDL, ``CREATE … IF NOT EXISTS`` statements with ``?`` placeholders and ``{blob}``,
   ``{key}``, ``{bool}``, ``{serial}``, ``{compact}`` for the column types, run by
   :func:`create_tables` under the dialect's init lock; a singleton meta table with its
   schema version, found with :meth:`Dialect.table_exists_sql`;
2. its errors: subclasses of :class:`BackendError` and :class:`CommitUnknownError` under its
   own root, named in a :class:`Session` subclass (with its "closed" message);
3. its dialects: :class:`SQLiteDialect` and ``PostgresDialect``, subclassed only to set
   what it wants (the writer queue, a private file mode) — or used as they are;
4. its operations: functions of a :class:`Tx`, each run by :meth:`Session.transact` as one
   transaction (write or read), checking what comes back with a :class:`StoredValues`.
"""

from __future__ import annotations

from store.db.engine import (
    MAX_ATTEMPTS,
    Dialect,
    Session,
    Tx,
    create_tables,
    first_line,
    run_joined,
)
from store.db.errors import BackendError, CommitUnknownError, DatabaseError
from store.db.sqlite import SQLiteDialect
from store.db.values import StoredValues, check_int

__all__ = [
    "MAX_ATTEMPTS",
    "BackendError",
    "CommitUnknownError",
    "DatabaseError",
    "Dialect",
    "SQLiteDialect",
    "Session",
    "StoredValues",
    "Tx",
    "check_int",
    "create_tables",
    "first_line",
    "run_joined",
]
