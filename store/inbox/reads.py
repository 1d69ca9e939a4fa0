"""The inbox's reads: the handle's state, the stored rows, listings and counts
(:class:`InboxReads`, the base of :class:`store.inbox.indexing.InboxIndexes` and of
:class:`store.inbox.core.Inbox`, which add the inbox log's checkpoints, receipts and writes).

Every read is one read transaction on the journal store's session; an inbox whose tables do
not exist yet (a store that never used its inbox) reads as empty, without creating them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from store.db import Tx, check_int
from store.errors import CorruptError
from store.inbox import schema
from store.inbox.schema import EVENT_COLUMNS, WAIT_COLUMNS
from store.inbox.values import InboxCounts, StoredEvent, Wait, stored_event, stored_waits
from store.schema import stored_int
from tlog.errors import MalformedError, UsageError
from tlog.inbox import MAX_KEYS, check_label
from tlog.journal import check_run_id

if TYPE_CHECKING:
    from store.sql import SQLStore

T = TypeVar("T")

MAX_LIMIT = 10_000
"""Largest page of a listing."""


TOP_POSITION = "SELECT MAX(position) FROM inbox_event WHERE tenant = ?"
"""The tenant's highest event position: the last entry of a key's range, never a count."""


def events_past(size: int, top: object) -> int:
    """The number of events of an inbox log of stored ``size`` whose highest event position
    is ``top`` (None: no event): the pending ones are the positions from ``size`` on."""
    return size if top is None else max(size, stored_int(top, "event position") + 1)


def _limit(limit: int) -> int:
    return check_int(limit, "limit", 1, MAX_LIMIT)


def checked_label(value: object, what: str, limit: int = 256) -> str:
    """:func:`tlog.inbox.check_label`, its refusal a UsageError (the caller's mistake)."""
    try:
        return check_label(value, what, limit)
    except MalformedError as e:
        raise UsageError(str(e)) from None


def checked_identity(source: object, id: object) -> None:
    """UsageError unless (``source``, ``id``) could name a buffered event (each a label):
    a lookup of anything else is a caller's mistake."""
    checked_label(source, "an event's source")
    checked_label(id, "an event's id")


def checked_run(run: object) -> None:
    """UsageError unless ``run`` is a run ID (:func:`tlog.journal.check_run_id`)."""
    try:
        check_run_id(run)  # type: ignore[arg-type]  # checked there: any value may come
    except MalformedError as e:
        raise UsageError(str(e)) from None


class InboxReads:
    """The reads of the inbound-event inbox of one tenant of a SQL journal store.

    Requires: the handle it came from stays open. Methods that sign (``receipt`` without a
    kept covering checkpoint, ``sign_checkpoint``) need the log key on that handle.
    """

    def __init__(self, store: SQLStore) -> None:
        self._store = store
        self._tenant = store.tenant
        self._log = store._log_named(schema.LOG_SUFFIX)
        self._ready = False

    # --- the handle ----------------------------------------------------------------------------

    @property
    def tenant(self) -> str:
        return self._tenant

    @property
    def origin(self) -> str:
        """The inbox log's origin: ``<base origin>/<tenant>/inbox``."""
        return self._log.origin

    def _read(self, fn: Callable[[Tx], T], empty: T) -> T:
        if not self._ready:
            present, version = self._store._read(schema.stored_version)
            if not present:
                return empty
            if version != schema.SCHEMA_VERSION:
                # Upgraded (or refused) as a write would: a handle whose first call reads
                # must not go on to write to a schema it never checked.
                self._ensure()
            self._ready = True
        return self._store._read(fn)

    def _ensure(self) -> None:
        def work(tx: Tx) -> None:
            if schema.exists(tx):
                schema.check_version(tx)
            else:
                schema.create(tx)

        self._store._write(work)
        self._ready = True

    # --- reading rows --------------------------------------------------------------------------

    def _event_total(self, tx: Tx, size: int = 0) -> int:
        """The number of events (:func:`events_past` of the inbox log's stored ``size``)."""
        row = tx.one(TOP_POSITION, (self._tenant,))
        return events_past(size, None if row is None else row[0])

    def _event(self, tx: Tx, source: str, id_: str, lock: bool = False) -> StoredEvent | None:
        suffix = tx.dialect.lock_suffix if lock else ""
        row = tx.one(
            f"SELECT {EVENT_COLUMNS} FROM inbox_event"  # noqa: S608 - fixed columns
            f" WHERE tenant = ? AND source = ? AND id = ?{suffix}",
            (self._tenant, source, id_),
        )
        return None if row is None else stored_event(row)

    def _wait_rows(self, tx: Tx, run: str, effect_key: str, *, lock: bool = False) -> list[Wait]:
        """The wait (run, effect key), [] when none is registered; with ``lock``, its rows
        locked to the end of the transaction where rows are locked (a concurrent unsubscribe
        then waits, and sees what this transaction did)."""
        suffix = tx.dialect.lock_suffix if lock else ""
        rows = tx.all(
            f"SELECT {WAIT_COLUMNS} FROM inbox_wait"  # noqa: S608
            f" WHERE tenant = ? AND run = ? AND effect_key = ? ORDER BY namespace, value{suffix}",
            (self._tenant, run, effect_key),
        )
        return stored_waits(rows)

    # --- reading -------------------------------------------------------------------------------

    def get(self, source: str, id: str) -> StoredEvent | None:
        """The stored event (source, id), or None."""
        checked_identity(source, id)
        return self._read(lambda tx: self._event(tx, source, id), None)

    def dead_letters(self, limit: int, before: int | None = None) -> list[StoredEvent]:
        """Dead letters, newest (highest position) first, at most ``limit``, those below
        position ``before`` when given (the paging cursor: the last one's position)."""
        _limit(limit)
        cond, params = (
            ("", ()) if before is None else (" AND position < ?", (check_int(before, "before", 0),))
        )

        def work(tx: Tx) -> list[StoredEvent]:
            rows = tx.all(
                f"SELECT {EVENT_COLUMNS} FROM inbox_event"  # noqa: S608
                f"{tx.dialect.indexed_by('inbox_event_dead')} WHERE tenant = ? AND dead{cond}"
                " ORDER BY position DESC LIMIT ?",
                (self._tenant, *params, limit),
            )
            return [stored_event(r) for r in rows]

        return self._read(work, [])

    def waiting(self, limit: int, after: int | None = None) -> list[Wait]:
        """Registered waits in registration order, at most ``limit``, those after wait number
        ``after`` when given (the paging cursor: the last one's ``number``)."""
        _limit(limit)
        cond, params = (
            ("", ()) if after is None else (" AND number > ?", (check_int(after, "after", 0),))
        )

        def work(tx: Tx) -> list[Wait]:
            rows = tx.all(
                f"SELECT {WAIT_COLUMNS} FROM inbox_wait WHERE tenant = ?{cond}"  # noqa: S608
                " ORDER BY number, run, effect_key, namespace, value LIMIT ?",
                (self._tenant, *params, limit * MAX_KEYS),
            )
            return stored_waits(rows)[:limit]

        return self._read(work, [])

    def held(self, run: str) -> list[StoredEvent]:
        """The events ``run`` holds claimed (claimed, not yet unsubscribed), oldest first."""
        checked_run(run)

        def work(tx: Tx) -> list[StoredEvent]:
            rows = tx.all(
                f"SELECT {EVENT_COLUMNS} FROM inbox_event"  # noqa: S608
                f"{tx.dialect.indexed_by('inbox_event_held')} WHERE tenant = ? AND claimed_by = ?"
                " AND held ORDER BY position",
                (self._tenant, run),
            )
            return [stored_event(r) for r in rows]

        return self._read(work, [])

    def events(self, after: int = -1, limit: int = 1000) -> list[StoredEvent]:
        """Events in log (arrival) order, from position ``after`` + 1, at most ``limit``."""
        _limit(limit)
        check_int(after, "after", -1)

        def work(tx: Tx) -> list[StoredEvent]:
            rows = tx.all(
                f"SELECT {EVENT_COLUMNS} FROM inbox_event WHERE tenant = ? AND position > ?"  # noqa: S608
                " ORDER BY position LIMIT ?",
                (self._tenant, after, limit),
            )
            return [stored_event(r) for r in rows]

        return self._read(work, [])

    def counts(self) -> InboxCounts:
        """The inbox's accounting (a count over the tenant's events: for operators, not for a
        request path)."""

        def work(tx: Tx) -> InboxCounts:
            t = self._tenant
            row = tx.one(
                "SELECT COUNT(*), SUM(CASE WHEN claimed_by IS NULL AND NOT dead THEN 1 ELSE 0 END),"
                " SUM(CASE WHEN claimed_by IS NOT NULL THEN 1 ELSE 0 END),"
                " SUM(CASE WHEN dead THEN 1 ELSE 0 END),"
                " SUM(CASE WHEN payload IS NULL THEN 1 ELSE 0 END)"
                " FROM inbox_event WHERE tenant = ?",
                (t,),
            )
            assert row is not None
            waits = tx.one("SELECT COUNT(DISTINCT number) FROM inbox_wait WHERE tenant = ?", (t,))
            size = self._event_total(tx)
            vals = [int(v or 0) for v in row]
            if vals[0] != size:
                raise CorruptError(f"the inbox holds {vals[0]} events at {size} positions")
            return InboxCounts(
                size, vals[1], vals[2], vals[3], vals[4], int(waits[0] if waits else 0)
            )

        return self._read(work, InboxCounts(0, 0, 0, 0, 0, 0))


__all__ = ["MAX_LIMIT", "InboxReads"]
