"""Joining the embedder's transaction: append and seal inside a transaction the caller owns.

An embedder whose own tables live in the store's PostgreSQL database writes its business rows
and the journal's records in *one* transaction: both commit, or neither does — no compensation
to run when one of them fails, because there is no moment at which one exists without the other.

The capability is spelled as absence: :attr:`store.api.JournalStore.atomic` is an
:class:`AtomicJournal` on PostgreSQL and None on SQLite (an embedded file has no notion of a
caller's transaction on another connection). An embedder that needs it asks when it is
configured — :func:`require_atomic` refuses there, with one line — never at commit time.

:meth:`AtomicJournal.join` binds the caller's psycopg connection; the returned
:class:`JoinedJournal`'s :meth:`~JoinedJournal.append`, :meth:`~JoinedJournal.seal` and
:meth:`~JoinedJournal.head` run on that connection, inside the transaction the caller has open
there. They are the store's own append and seal — the same function runs in the store's
transactions (:meth:`store.writes.JournalWrites._append_work`): the fence, the seal rule, the
chain, the exactly-once keys, the indexes, the log and the outbox's due marks. What differs:

* the caller's transaction must be open (``with conn.transaction():``, or a statement already
  run without autocommit) and ``READ COMMITTED``, PostgreSQL's default; anything else is refused
  (UsageError). The connection must reach this store: the same database and schema
  (``current_database()``, ``current_schema()``, the server's address and port) as the store's
  own connection, and the same ``meta`` row (origin, log key);
* each call runs in a savepoint: a refused call (FencedError, DuplicateEffectError, …) or a
  failed one (BackendError) undoes itself alone, and the caller's transaction goes on;
* nothing is retried and nothing is committed here: a serialization failure or a deadlock is a
  BackendError, after which the caller retries its whole transaction; the caller's COMMIT is the
  only commit, and so its verdict is the caller's — a COMMIT whose answer was lost is the
  CommitUnknownError case of the store (re-read ``head`` before retrying);
* the rows the calls lock (the run's lock row, the tenant's log row for a seal) and the
  outbox's gate, held shared (:mod:`store.outbox`: a ``subscribe`` waits for it), stay held
  until the caller's transaction ends: keep it short, as the store keeps its own;
* ``SET LOCAL synchronous_commit = on``: the caller's COMMIT is durable, as the store's are.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from store.api import Append, Head, JournalStore, Seal
from store.db import Tx, run_joined
from store.errors import BackendError, DuplicateEffectError
from store.schema import read_meta, stored_hash, stored_int
from tlog.errors import UsageError
from tlog.journal import Record, RecordSignature, check_run_id

if TYPE_CHECKING:
    from store.sql import SQLStore

T = TypeVar("T")

_WHERE = "SELECT current_database(), current_schema(), host(inet_server_addr()), inet_server_port()"


def require_atomic(store: JournalStore) -> AtomicJournal:
    """The store's :class:`AtomicJournal`; UsageError, naming the backend, when it has none."""
    atomic = store.atomic
    if atomic is None:
        raise UsageError(
            f"this store ({type(store).__name__}) cannot join the embedder's transaction:"
            " it needs PostgreSQL"
        )
    return atomic


class AtomicJournal:
    """The capability of a PostgreSQL store (:attr:`store.api.JournalStore.atomic`)."""

    def __init__(self, store: SQLStore) -> None:
        self._store = store
        self._where: tuple[Any, ...] | None = None

    def _store_where(self) -> tuple[Any, ...]:
        # Where the store's own connection is, and its meta row (origin, log key), read once.
        if self._where is None:

            def where(tx: Tx) -> tuple[Any, ...]:
                row = tx.one(_WHERE)
                assert row is not None
                return (*row, read_meta(tx))

            self._where = self._store._read(where)
        return self._where

    def join(self, conn: Any) -> JoinedJournal:
        """The journal inside the transaction open on the caller's psycopg connection ``conn``
        (module docstring). Nothing is checked yet: each call checks the connection."""
        return JoinedJournal(self._store, conn, self._store_where())


class JoinedJournal:
    """The store's appends and seals, on the caller's connection, in the caller's transaction."""

    def __init__(self, store: SQLStore, conn: Any, where: tuple[Any, ...]) -> None:
        self._store = store
        self._conn = conn
        self._where = where

    def _run(self, fn: Callable[[Tx], T]) -> T:
        store = self._store

        def checked(tx: Tx) -> T:
            here = tx.one(_WHERE)
            if here is None or here != self._where[:4]:
                reached = None if here is None else f"{here[0]}.{here[1]}"
                raise UsageError(
                    "the connection does not reach this store's database and schema"
                    f" ({self._where[0]}.{self._where[1]}; it reaches {reached})"
                )
            if read_meta(tx) != self._where[4]:
                raise UsageError("the connection reaches another store (origin or log key)")
            return fn(tx)

        return run_joined(store._d, self._conn, checked, BackendError)

    def append(
        self,
        epoch: int,
        batch: Sequence[Append],
        *,
        signatures: Sequence[RecordSignature | None] | None = None,
    ) -> list[Record]:
        """:meth:`store.api.JournalStore.append`, in the caller's transaction."""
        if not batch:
            return self._store.append(epoch, batch, signatures=signatures)
        run, work = self._store._append_work(epoch, batch, signatures)
        from store.writes import _EffectConflict  # noqa: PLC0415 - the store's own

        try:
            return self._run(work)
        except _EffectConflict as c:
            key = self._store._conflicting_key(run, c.keys, self._run)
            raise DuplicateEffectError(run, key) from None

    def seal(
        self,
        run: str,
        epoch: int,
        outcome: str,
        *,
        signatures: Sequence[RecordSignature | None] | None = None,
    ) -> Seal:
        """:meth:`store.api.JournalStore.seal`, in the caller's transaction."""
        return self._run(self._store._seal_work(run, epoch, outcome, signatures))

    def head(self, run: str) -> Head:
        """The run's head as the caller's transaction sees it (its own appends included)."""
        check_run_id(run)
        tenant = self._store.tenant
        row = self._run(
            lambda tx: tx.one(
                "SELECT seq, hash FROM journal WHERE tenant = ? AND run = ?"
                " ORDER BY seq DESC LIMIT 1",
                (tenant, run),
            )
        )
        if row is None:
            return Head.genesis()
        seq = stored_int(row[0], "record seq", run, 1)
        return Head(seq, stored_hash(row[1], "hash", run, seq))


__all__ = ["AtomicJournal", "JoinedJournal", "require_atomic"]
