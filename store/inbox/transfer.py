"""The inbox's side of export and restore (``store.export``; the file's inbox section is
``docs/export-format.md`` §4.7).

Export reads the whole inbox of a tenant in **one read transaction** (:func:`read_inbox`):
one snapshot, so that the log size, the events below it, the waits and the wait counter agree
(events are read a page at a time, by position; waits a page of rows at a time, by number).

Restore writes it back exactly (:func:`restore_events`, :func:`restore_waits`,
:func:`set_wait_counter`), into a tenant whose inbox is empty (:func:`is_empty`): each event
row with all its columns (position, times, claim, held flag, dead letter, delivery seq, the
payload or its erasure), the inbox log's tree hashes for its entries (so the restored log has
the exported roots), the match rows of the live events, each wait's rows with its number and
time, and the counter that numbers waits. The inbox log's kept checkpoints are kept again by
the caller (``store.inbox._log.import_checkpoint``), once the log reaches their sizes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from store.db import Tx
from store.inbox.schema import EVENT_COLUMNS, WAIT_COLUMNS, WAIT_COUNTER
from store.inbox.values import StoredEvent, Wait, stored_event, stored_waits
from store.schema import stored_int
from tlog.errors import UsageError
from tlog.inbox import keys_json
from tlog.journal import canonical_json

if TYPE_CHECKING:
    from store.inbox.core import Inbox

PAGE = 1000
"""Events, or wait rows, read per query."""


def is_empty(inbox: Inbox) -> bool:
    """Whether the tenant's inbox holds no event, no wait and no kept inbox checkpoint."""
    counts = inbox.counts()
    return not (counts.size or counts.waits or inbox._log.published())


def _counter(tx: Tx, tenant: str) -> int:
    row = tx.one("SELECT value FROM counter WHERE tenant = ? AND name = ?", (tenant, WAIT_COUNTER))
    return 0 if row is None else stored_int(row[0], "wait counter")


def read_inbox(
    inbox: Inbox,
    start: Callable[[int, int, int], bool],
    event: Callable[[StoredEvent], None],
    wait: Callable[[Wait], None],
) -> None:
    """In one read transaction: ``start(size, waits, wait counter)`` (the inbox log's size,
    the number of registered waits, the wait counter); then, unless it returns False, ``event``
    for each event by position (those below ``size``) and ``wait`` for each wait by number.
    A store whose inbox schema does not exist calls ``start(0, 0, 0)`` alone. Memory: a page."""
    tenant = inbox.tenant
    inbox.catch_up()  # the export holds the log over every event

    def work(tx: Tx) -> bool:
        size = inbox._log._log_size(tx)
        row = tx.one("SELECT COUNT(DISTINCT number) FROM inbox_wait WHERE tenant = ?", (tenant,))
        waits = 0 if row is None else stored_int(row[0], "wait count")
        if not start(size, waits, _counter(tx, tenant)):
            return True
        after = -1
        while after + 1 < size:
            rows = tx.all(
                f"SELECT {EVENT_COLUMNS} FROM inbox_event WHERE tenant = ? AND position > ?"  # noqa: S608
                " AND position < ? ORDER BY position LIMIT ?",
                (tenant, after, size, PAGE),
            )
            if not rows:
                break  # the caller finds the events missing
            for r in rows:
                ev = stored_event(r)
                event(ev)
                after = ev.position
        number = 0
        while True:
            rows = tx.all(
                f"SELECT {WAIT_COLUMNS} FROM inbox_wait WHERE tenant = ? AND number > ?"  # noqa: S608
                " ORDER BY number, run, effect_key, namespace, value LIMIT ?",
                (tenant, number, PAGE),
            )
            got = stored_waits(rows)
            if len(rows) == PAGE:
                got = got[:-1]  # its rows may go on in the next page (a wait has at most 16)
            for w in got:
                wait(w)
                number = w.number
            if len(rows) < PAGE:
                return True

    if not inbox._read(work, False):
        start(0, 0, 0)


def restore_events(inbox: Inbox, events: Sequence[StoredEvent]) -> int:
    """Append ``events`` to the inbox, as they are (the next positions of the inbox log, in
    order), with their entries' leaves and the match rows of the live ones, in one
    transaction; return the inbox log's new size. UsageError when an event is not at the log's
    next position."""
    tenant = inbox.tenant
    log = inbox._log

    def work(tx: Tx) -> int:
        size = inbox._index_rest(tx, log._lock_log(tx), [])
        rows = []
        for i, ev in enumerate(events):
            if ev.position != size + i:
                raise UsageError(
                    f"event {ev.source}/{ev.id} is at position {ev.position}, the inbox log's "
                    f"next is {size + i}"
                )
            rows.append(
                (
                    tenant, ev.source, ev.id, ev.position, ev.kind, keys_json(ev.keys),
                    None if ev.erased else canonical_json(ev.payload), ev.payload_sha256,
                    ev.received_at, ev.claimed_by, ev.claimed_at, ev.held, ev.dead,
                    ev.dead_reason, ev.dead_at, ev.delivered_seq, ev.claimed_for,
                )
            )  # fmt: skip
        tx.executemany(
            f"INSERT INTO inbox_event (tenant, {EVENT_COLUMNS})"  # noqa: S608
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            rows,
        )
        # The edge is not remembered (due is dropped): the restore commits later, or not.
        inbox._append_leaves(tx, size, [ev.entry.leaf for ev in events], [])
        inbox._grown(size, size + len(events))
        tx.executemany(
            "INSERT INTO inbox_match (tenant, kind, namespace, value, position, source, id)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            [
                (tenant, ev.kind, ns, v, ev.position, ev.source, ev.id)
                for ev in events
                if ev.state == "live"
                for ns, v in ev.keys
            ],
        )
        return size + len(events)

    size = inbox._write(work)
    inbox._refresh_statistics()
    return size


def restore_waits(inbox: Inbox, waits: Sequence[Wait]) -> None:
    """Register ``waits`` as they are (numbers and times kept), in one transaction."""
    tenant = inbox.tenant

    def work(tx: Tx) -> None:
        tx.executemany(
            "INSERT INTO inbox_wait (tenant, run, effect_key, namespace, value, kind, case_id,"
            " step, number, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (tenant, w.run, w.effect_key, ns, v, w.kind, w.case, w.step, w.number,
                 w.created_at)
                for w in waits
                for ns, v in w.keys
            ],
        )  # fmt: skip

    inbox._write(work)


def set_wait_counter(inbox: Inbox, value: int) -> None:
    """Set the counter that numbers waits to ``value`` (the next wait gets ``value + 1``)."""
    tenant = inbox.tenant

    def work(tx: Tx) -> None:
        tx.execute(
            "INSERT INTO counter (tenant, name, value) VALUES (?, ?, ?)"
            " ON CONFLICT (tenant, name) DO UPDATE SET value = excluded.value",
            (tenant, WAIT_COUNTER, value),
        )

    inbox._write(work)


def wait_counter(inbox: Inbox) -> int:
    """The counter that numbers waits (0: no wait was ever registered)."""
    return inbox._store._read(lambda tx: _counter(tx, inbox.tenant))


__all__ = [
    "PAGE",
    "is_empty",
    "read_inbox",
    "restore_events",
    "restore_waits",
    "set_wait_counter",
    "wait_counter",
]
