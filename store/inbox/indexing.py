"""What every write of the inbox shares — its transactions, its inbox log and its indexes —
and the inbox log's checkpoints and receipts, which index what is pending first
(:class:`InboxIndexes`, the base of :class:`store.inbox.core.Inbox`, on the reads of
:class:`~store.inbox.reads.InboxReads`).

* **Transactions.** :meth:`InboxIndexes._write` creates the schema on first use;
  :meth:`InboxIndexes._write_appending` is a write that may append to the inbox log: the
  tree's right edge (:class:`store.sqlcore.TreeEdge`) is remembered only once it committed.
* **The inbox log.** :meth:`InboxIndexes._append_leaves` stores the hashes leaves add and the
  log's size, in the journal schema's ``tree_hash`` and ``log_state`` under ``<tenant>/inbox``.
* **The batched indexes** (:mod:`store.inbox.schema`, "Indexed in batches"): the pending events
  are the positions after the log's stored size. :meth:`InboxIndexes.catch_up` and, inside a
  transaction about to read the match or live index, :meth:`InboxIndexes._caught_up` write
  their leaves, match rows and live-index entries. The events this handle buffered pending are
  remembered (:attr:`InboxIndexes._own`) once their transaction committed, so that indexing
  them does not read their rows back: a pending event cannot change meanwhile (only a holder
  of the inbox log's row lock claims or dead-letters one, and it indexes the pending events
  first), and an event that somebody else indexed is no longer pending, so its entry is never
  looked at again. Where any pending position is not remembered (another handle buffered it,
  or its commit's verdict was lost), the rows are read, as ever. What is remembered is what
  the row holds, in plain ``str``, without the payload, and is forgotten once another handle
  has indexed it. The buffering handle trusts its memory: a pending row deleted behind its
  back (corruption) is noticed by a handle that reads the rows back, not by it.
* **Checkpoints and receipts** of the inbox log (:meth:`InboxIndexes.checkpoint`,
  :meth:`InboxIndexes.sign_checkpoint`, :meth:`InboxIndexes.receipt`) cover every buffered
  event: they index the pending ones first.
* **Statistics.** PostgreSQL's planner gets its first statistics of the inbox's tables when the
  inbox passes a few sizes (:meth:`InboxIndexes._refresh_statistics`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

from store.db import Tx
from store.errors import CorruptError
from store.inbox.reads import TOP_POSITION, InboxReads, events_past
from store.inbox.schema import INDEX_BATCH, STORED
from store.schema import stored_int
from store.sqlcore import TreeEdge
from tlog import merkle
from tlog.checkpoint import Checkpoint
from tlog.errors import MalformedError, UsageError
from tlog.inbox import Event, stored_leaf
from tlog.note import parse_note
from tlog.proof import TlogProof

if TYPE_CHECKING:
    from store.sql import SQLStore

T = TypeVar("T")

_STATISTICS_AT = (1_000, 10_000, 100_000)
"""Inbox log sizes after which :meth:`InboxIndexes._refresh_statistics` runs."""
_TABLES = ("inbox_event", "inbox_match", "inbox_wait")
_OWN_LIMIT = 4 * INDEX_BATCH
"""Remembered pending events past which :attr:`InboxIndexes._own` is forgotten (entries that
another handle's catch-up made useless)."""

Own = tuple[str, str, str, str, tuple[tuple[str, str], ...], bytes, int, bool]
"""A pending event as its buffer wrote it: (source, id, kind, its keys' stored JSON text, its
keys, payload digest, received_at, live: not claimed by its buffer's broadcast path); plain
``str`` values, as a row reads back, and not its payload."""


def own_entry(event: Event, keys: bytes, digest: bytes, at: int, live: bool) -> Own:
    """The :data:`Own` of ``event`` as its buffer wrote it (``keys``: its keys' stored JSON):
    plain ``str``, as the row reads back (an Event's fields may be ``str`` subclasses)."""
    return (
        str(event.source),
        str(event.id),
        str(event.kind),
        keys.decode("utf-8"),
        tuple((str(ns), str(v)) for ns, v in event.keys),
        digest,
        at,
        live,
    )


class InboxIndexes(InboxReads):
    """The writes' shared machinery of one tenant's inbox (module docstring).

    Requires: the handle it came from stays open."""

    def __init__(self, store: SQLStore) -> None:
        super().__init__(store)
        self._edge = TreeEdge()
        self._statistics_due = False
        self._own: dict[int, Own] = {}
        """Pending events this handle buffered, by position (module docstring)."""

    def _write(self, fn: Callable[[Tx], T]) -> T:
        if not self._ready:
            self._ensure()
        return self._store._write(fn)

    def _write_appending(self, fn: Callable[[Tx, list[tuple[int, list[bytes]]]], T]) -> T:
        """:meth:`_write` of ``fn``, which may append to the inbox log: the tree's right edge
        it leaves in its list is remembered only after the transaction committed."""
        due: list[tuple[int, list[bytes]]] = []

        def attempt(tx: Tx) -> T:
            # Each attempt starts with none: the engine runs a transaction again after a
            # retryable error, and a failed attempt's edge must never outlive it.
            due.clear()
            return fn(tx, due)

        result = self._write(attempt)
        if due:
            self._edge.commit(due[0])
        self._refresh_statistics()
        return result

    def _refresh_statistics(self) -> None:
        """Once the inbox log has grown past one of :data:`_STATISTICS_AT`, refresh the
        planner's statistics of the inbox's tables (PostgreSQL; nothing on SQLite). Why: a
        table that autovacuum has not analyzed yet has no statistics, and the planner then
        took the live-events index for a claim's primary-key update (a walk of every live
        event: 4 ms at 30,000 and growing, in the benchmark's first minute). Three ANALYZEs in
        a store's life, each of a bounded sample; after the first the estimates follow the
        tables' sizes."""
        if not self._statistics_due:
            return
        self._statistics_due = False
        sql = self._store._d.analyze_sql(_TABLES)
        if sql is not None:
            self._write(lambda tx: tx.execute(sql))

    def _grown(self, old: int, new: int) -> None:
        """The inbox holds ``new`` events, ``old`` before this transaction: statistics are due
        after its commit when it passed one of :data:`_STATISTICS_AT` (a rollback: harmless)."""
        if (
            old < _STATISTICS_AT[-1]  # mostly not: the loop below is for 3 of every 10^5
            and new >= _STATISTICS_AT[0]
            and any(old < at <= new for at in _STATISTICS_AT)
        ):
            self._statistics_due = True

    # --- the batched indexes (store.inbox.schema: "Indexed in batches") ---------------------

    def catch_up(self) -> int:
        """Write the indexes of the pending events now (the inbox log's leaves, the match
        rows, the live index); how many events were pending. A read, and no write, when none
        is (a store that never used its inbox stays without its tables)."""

        def pending(tx: Tx) -> int:
            size, total = self._sizes(tx)
            return total - size

        if not self._read(pending, 0):
            return 0

        def work(tx: Tx, due: list[tuple[int, list[bytes]]]) -> int:
            size = self._log._lock_log(tx)
            return self._index_rest(tx, size, due) - size

        return self._write_appending(work)

    def _sizes(self, tx: Tx) -> tuple[int, int]:
        """(the inbox log's stored size, the number of events), unlocked: on PostgreSQL a
        buffer may commit more events right after."""
        row = tx.one(
            f"SELECT (SELECT size FROM log_state WHERE tenant = ?), ({TOP_POSITION})",  # noqa: S608 - fixed text
            (self._log.tenant, self._tenant),
        )
        assert row is not None
        size = 0 if row[0] is None else stored_int(row[0], "log size")
        return size, events_past(size, row[1])

    def _caught_up(self, tx: Tx, due: list[tuple[int, list[bytes]]]) -> None:
        """Index the pending events, if any, in ``tx``: before a read of the match or live
        index. Locks the inbox log's row only when some are pending."""
        size, total = self._sizes(tx)
        if total > size:
            self._index_rest(tx, self._log._lock_log(tx), due)

    def _index_rest(self, tx: Tx, size: int, due: list[tuple[int, list[bytes]]]) -> int:
        """Index every pending event of the inbox log of stored ``size`` (its row locked in
        ``tx``); return the log's size, now its number of events."""
        total = self._event_total(tx, size)
        if total > size:
            self._index_pending(tx, size, total, due)
        return total

    def _index_pending(
        self,
        tx: Tx,
        size: int,
        end: int,
        due: list[tuple[int, list[bytes]]],
        fresh: Sequence[tuple[bytes, Sequence[tuple[str, str]], Event]] = (),
    ) -> None:
        """Index the pending events at positions ``size`` to ``end`` (the inbox log of stored
        ``size``, its row locked in ``tx``): their leaves, the match rows of those still live,
        their live-index entries; then the events ``fresh`` after them, which the caller
        inserted indexed: (leaf, keys to match (none: claimed), event) each. The pending
        events' state cannot change meanwhile: one is claimed or dead-lettered only under that
        lock (by the broadcast path of the buffer that stores it, or indexed first: a claim by
        key, ``match``, a sweep, a targeted delivery each index the pending events before)."""
        tenant = self._tenant
        leaves: list[bytes] = []
        matches: list[tuple[object, ...]] = []
        if not self._remembered(size, end, leaves, matches):
            self._read_back(tx, size, end, leaves, matches)
        if len(leaves) != end - size:
            raise CorruptError(
                f"the inbox holds no event at position {size + len(leaves)}, below {end}"
            )
        for pos, (leaf, keys, event) in enumerate(fresh, end):
            leaves.append(leaf)
            matches.extend(
                (tenant, event.kind, ns, v, pos, event.source, event.id) for ns, v in keys
            )
        self._append_leaves(tx, size, leaves, due)
        tx.executemany(
            "INSERT INTO inbox_match (tenant, kind, namespace, value, position, source, id)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            matches,
        )
        if end > size:
            tx.execute(
                "UPDATE inbox_event SET indexed = ? WHERE tenant = ? AND position >= ?"
                " AND position < ?",
                (True, tenant, size, end),
            )

    def _remembered(
        self, size: int, end: int, leaves: list[bytes], matches: list[tuple[object, ...]]
    ) -> bool:
        """When this handle remembers every pending event at positions ``size`` to ``end``,
        add their leaves and live match rows to ``leaves`` and ``matches`` (and forget them);
        False, adding nothing, otherwise."""
        remembered = self._own
        if not all(p in remembered for p in range(size, end)):
            return False
        tenant = self._tenant
        for pos in range(size, end):
            source, id_, kind, text, keys, digest, at, live = remembered.pop(pos)
            leaves.append(stored_leaf(source, id_, kind, text, digest, at))
            if live:
                matches.extend((tenant, kind, ns, v, pos, source, id_) for ns, v in keys)
        return True

    def _read_back(
        self,
        tx: Tx,
        size: int,
        end: int,
        leaves: list[bytes],
        matches: list[tuple[object, ...]],
    ) -> None:
        """Add the leaves and live match rows of the stored pending events at positions
        ``size`` to ``end`` to ``leaves`` and ``matches``, stopping at a gap."""
        tenant = self._tenant
        rows = tx.all(
            "SELECT source, id, position, kind, keys, payload_hash, received_at,"
            " claimed_by IS NULL AND NOT dead FROM inbox_event"
            " WHERE tenant = ? AND position >= ? AND position < ? ORDER BY position",
            (tenant, size, end),
        )
        for i, (source, id_, pos, kind, keys, digest, at, live) in enumerate(rows):
            if stored_int(pos, "event position") != size + i:
                break
            # The stored row as written by buffer: its keys' text is the entry's verbatim.
            try:
                text = STORED.blob(keys, "event keys").decode("utf-8")
                leaves.append(
                    stored_leaf(
                        STORED.text(source, "event source"),
                        STORED.text(id_, "event id"),
                        STORED.text(kind, "event kind"),
                        text,
                        STORED.blob(digest, "payload hash"),
                        stored_int(at, "received_at"),
                    )
                )
                if live:
                    matches.extend(
                        (tenant, kind, ns, v, pos, source, id_) for ns, v in json.loads(text)
                    )
            except (MalformedError, ValueError, TypeError) as e:
                raise CorruptError(f"event {source}/{id_}: stored {e}") from None

    def _remember(self, pending: list[tuple[int, Own]], size: int) -> None:
        """The pending events ``pending`` (position, as written) committed, in a transaction
        that read the inbox log's stored size ``size``: remember them, and forget those below
        it (indexed by another handle: never looked at again). Positions are remembered in
        increasing order, so the forgotten are the first ones."""
        remembered = self._own
        while remembered:
            first = next(iter(remembered))
            if first >= size:
                break
            del remembered[first]
        remembered.update(pending)
        if len(remembered) > _OWN_LIMIT:  # interleaved with other handles' positions: start over
            remembered.clear()

    def _append_leaves(
        self, tx: Tx, size: int, leaves: list[bytes], due: list[tuple[int, list[bytes]]]
    ) -> None:
        """Store the tree hashes ``leaves`` add to the inbox log of ``size`` (its row locked),
        and put the tree's new right edge in ``due``, for :meth:`_write_appending` to remember
        once the transaction committed."""
        start = merkle.stored_hash_count(size)
        hashes, edge = self._edge.append(size, leaves, self._log._reader(tx))
        due[:] = [edge]
        tx.executemany(
            "INSERT INTO tree_hash (tenant, idx, hash) VALUES (?, ?, ?)",
            [(self._log.tenant, start + i, h) for i, h in enumerate(hashes)],
        )
        tx.execute(
            "UPDATE log_state SET size = ? WHERE tenant = ?", (size + len(leaves), self._log.tenant)
        )

    # --- the inbox log's checkpoints and receipts (over the pending events too) -------------

    @property
    def log(self) -> InboxLog:
        """The inbox log, for publishing: what :func:`store.publish.publish_to_witnesses` and
        a witness need of it, over every buffered event (:class:`InboxLog`)."""
        return InboxLog(self)

    def checkpoint(self) -> Checkpoint:
        """The inbox log's current (unsigned) checkpoint, over every buffered event (the
        pending ones are indexed first: :meth:`catch_up`)."""
        self.catch_up()
        return self._log.checkpoint()

    def sign_checkpoint(self) -> bytes:
        """Sign and keep the inbox log's current checkpoint, over every buffered event (the
        log key is needed)."""
        self.catch_up()
        return self._log.sign_checkpoint()

    def receipt(
        self, source: str, id: str, *, sign: Callable[[], bytes] | None = None
    ) -> TlogProof:
        """The receipt of event (source, id): a tlog-proof@v1 whose extra data is the event's
        entry, under the newest kept inbox checkpoint covering it, else one signed now
        (``sign``, default :meth:`sign_checkpoint`). Checked before it is given. UsageError
        for an unknown event."""
        ev = self.get(source, id)
        if ev is None:
            raise UsageError(f"no event {source}/{id} is buffered")
        self.catch_up()
        kept = self._log.published()
        note = None
        if kept:
            text, _ = parse_note(kept[-1])
            if Checkpoint.parse(text).size > ev.position:
                note = kept[-1]
        if note is None:
            note = (sign or self.sign_checkpoint)()
        cp = Checkpoint.parse(parse_note(note)[0])
        hashes = self._store._read(
            lambda tx: merkle.inclusion_proof(ev.position, cp.size, self._log._reader(tx))
        )
        raw = ev.entry.encode()
        merkle.verify_inclusion(ev.position, cp.size, merkle.leaf_hash(raw), hashes, cp.root)
        return TlogProof(ev.position, tuple(hashes), note, raw)


class InboxLog:
    """The inbox log of one tenant's inbox, as publishing needs it (the methods of
    :class:`store.publish.PublishedLog`): its checkpoints, kept cosignatures, consistency
    proofs and key — and nothing that could append to it, which only buffering may. Its
    checkpoints cover every buffered event: the pending ones are indexed first.

    Requires: the inbox's handle stays open."""

    __slots__ = ("_inbox",)

    def __init__(self, inbox: InboxIndexes) -> None:
        self._inbox = inbox

    @property
    def origin(self) -> str:
        return self._inbox._log.origin

    @property
    def log_vkey(self) -> str:
        return self._inbox._log.log_vkey

    def checkpoint(self) -> Checkpoint:
        return self._inbox.checkpoint()

    def sign_checkpoint(self) -> bytes:
        return self._inbox.sign_checkpoint()

    def consistency_proof(self, old: int, new: int | None = None) -> list[bytes]:
        size = self.checkpoint().size  # the pending events indexed first
        return self._inbox._log.consistency_proof(old, size if new is None else new)

    def add_cosignatures(self, note: bytes, *, witness_keys: Sequence[str]) -> bytes:
        return self._inbox._log.add_cosignatures(note, witness_keys=witness_keys)

    def published(self) -> list[bytes]:
        return self._inbox._log.published()

    def remembered_witness_keys(self) -> list[str]:
        return self._inbox._log.remembered_witness_keys()


__all__ = ["InboxIndexes", "InboxLog", "Own", "own_entry"]
