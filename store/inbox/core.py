"""The inbox's writes: buffering, waiting, claiming, delivering, sweeping, erasing
(:class:`Inbox`, on :class:`~store.inbox.claims.InboxClaims` and
:class:`~store.inbox.indexing.InboxIndexes`, the transactions, the inbox log
and the batched indexes every write shares and the log's checkpoints and receipts, itself on
:class:`~store.inbox.reads.InboxReads`, which has the listings and the counts; the rules are
:mod:`store.inbox`'s).

Every operation is one transaction on the journal store's session. How claims are decided
(the arbiters, the locks, one wait for one event, sealed runs) is
:mod:`store.inbox.claims`'s, on which :class:`Inbox` stands.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, TypeVar

from store.api import Append
from store.db import Tx, check_int
from store.errors import CorruptError, FencedError
from store.inbox.claims import InboxClaims, Taken, locks_keys
from store.inbox.indexing import Own, own_entry
from store.inbox.reads import (
    MAX_LIMIT,
    TOP_POSITION,
    checked_identity,
    checked_label,
    checked_run,
    events_past,
)
from store.inbox.schema import (
    EVENT_COLUMNS,
    INDEX_AT_ONCE,
    INDEX_BATCH,
    WAIT_COLUMNS,
)
from store.inbox.values import (
    Buffered,
    Claimed,
    StoredEvent,
    Targeted,
    Wait,
    checked_event,
    checked_wait,
    stored_event,
    stored_waits,
)
from store.schema import RECORD_COLUMNS, record, stored_int
from tlog.errors import MalformedError, UsageError
from tlog.inbox import (
    KIND_EVENT_DELIVERED,
    Entry,
    Event,
    buffered_encodings,
    delivery_data,
    keys_json,
)
from tlog.journal import Record, check_effect_key

if TYPE_CHECKING:
    from store.sql import SQLStore

T = TypeVar("T")

SWEEP_CHUNK = 1000
"""Events a sweep retires per transaction."""
MAX_REASON = 500


def _placed(
    events: Sequence[Event], stored: dict[tuple[str, str], tuple[int, int]], total: int, now: int
) -> tuple[list[Buffered], list[tuple[int, Event, int, bytes]]]:
    """What buffering ``events`` at ``now`` gives each, in an inbox of ``total`` events of
    which ``stored`` ((source, id) -> (position, received_at)) holds the batch's stored ones:
    a duplicate (of a stored event or of an earlier one of the batch: the first arrival's
    position and time), or the next position. Returns the answers and the new events as
    (index in the answers, event, position, payload digest); ``stored`` gains the new."""
    out: list[Buffered] = []
    fresh: list[tuple[int, Event, int, bytes]] = []
    for e in events:
        pair = (e.source, e.id)
        first = stored.get(pair)
        if first is not None:
            out.append(Buffered(e.source, e.id, first[0], first[1], True))
            continue
        position = total + len(fresh)
        stored[pair] = (position, now)
        fresh.append((len(out), e, position, e.payload_sha256))
        out.append(Buffered(e.source, e.id, position, now, False))
    return out, fresh


class Inbox(InboxClaims):
    """The inbound-event inbox of one tenant of a SQL journal store (``store.inbox``): the
    reads of :class:`~store.inbox.reads.InboxReads`, and the writes (on the shared machinery
    of :class:`~store.inbox.indexing.InboxIndexes`).

    Requires: the handle it came from stays open. Methods that sign (``receipt`` without a
    kept covering checkpoint, ``sign_checkpoint``) need the log key on that handle.
    """

    def __init__(self, store: SQLStore) -> None:
        super().__init__(store)
        self._lock_sql: dict[tuple[str, int, bool], str] = {}

    # --- buffering -----------------------------------------------------------------------------

    def buffer(self, event: Event, *, match: bool = True) -> Buffered:
        """Buffer ``event`` (deduplicated by (source, id): a duplicate changes nothing and is
        reported, not refused), giving it the next position of the inbox log; with ``match``
        (the default), in the same transaction, claim it for the oldest wait of its kind on
        any of its keys (the broadcast path: the wait is retired)."""
        return self.buffer_many([event], match=match)[0]

    def buffer_many(self, events: Sequence[Event], *, match: bool = True) -> list[Buffered]:
        """:meth:`buffer` of each of ``events``, atomically, in order (an event twice in the
        batch: the second is a duplicate)."""
        if isinstance(events, str | bytes) or not isinstance(events, Sequence):
            raise UsageError(f"buffer_many takes a list of Events, not {type(events).__name__}")
        for e in events:
            checked_event(e, "buffer")
        if not events:
            return []

        written: list[tuple[int, Own]] = []  # the pending events of the attempt that commits
        seen = [0]  # the stored log size that attempt read

        def work(tx: Tx, due: list[tuple[int, list[bytes]]]) -> list[Buffered]:
            written.clear()
            kinds = sorted({e.kind for e in events}) if match else []
            if locks_keys(tx):  # not even the lists where no lock is taken
                for kind in kinds:
                    self._lock_keys(tx, kind, [k for e in events if e.kind == kind for k in e.keys])
            # One statement: the log's row locked, the store clock, and whether anybody waits
            # for each kind at all (the batch's key locks are held, so no wait on its keys
            # can appear or go meanwhile; a kind nobody waits for skips the per-key lookups).
            # Duplicates: one select of the batch's (source, id) pairs, under the log's row
            # lock, which every insert into inbox_event holds (buffer and deliver): no other
            # transaction can add one of them before this one commits (for one event on
            # SQLite, part of the locking statement). The inserts below have no ON CONFLICT,
            # so the primary key stays the arbiter: were one there after all, the
            # transaction would fail rather than leave a gap in the positions.
            one = (events[0].source, events[0].id) if len(events) == 1 else None
            size, total, now, waited, stored = self._lock_log_waits(tx, kinds, one)
            if stored is None:
                stored = self._stored_positions(tx, {(e.source, e.id) for e in events})
            out, fresh = _placed(events, stored, total, now)
            if not fresh:
                return out
            end = total + len(fresh)
            # A batch this large (or the one that makes a batch pending) writes its indexes
            # now, its own from memory: only the events pending before it are read back.
            now_too = end - size >= INDEX_BATCH or len(fresh) >= INDEX_AT_ONCE
            forms = self._insert_fresh(
                tx, [(e, pos, digest) for _, e, pos, digest in fresh], now, now_too
            )
            if waited:
                for i, e, pos, digest in fresh:
                    if e.kind not in waited:
                        continue
                    # The event as just written (what reading its row back would give).
                    ev = StoredEvent(
                        e.source, e.id, e.kind, e.keys, e.payload, False, digest, pos, now
                    )
                    w = self._match_event(tx, ev, now)
                    if w is not None:
                        out[i] = Buffered(e.source, e.id, pos, now, False, w)
            self._grown(total, end)
            if now_too:  # after the matches: an event claimed already gets no match rows
                indexed_now = [
                    (leaf, () if out[i].matched else e.keys, e)
                    for (i, e, _, _), (_, leaf) in zip(fresh, forms, strict=True)
                ]
                self._index_pending(tx, size, total, due, indexed_now)
            else:
                written.extend(
                    (pos, own_entry(e, keys, digest, now, not out[i].matched))
                    for (i, e, pos, digest), (keys, _) in zip(fresh, forms, strict=True)
                )
                seen[0] = size
            return out

        out = self._write_appending(work)
        self._remember(written, seen[0])
        return out

    def _insert_fresh(
        self, tx: Tx, fresh: list[tuple[Event, int, bytes]], now: int, indexed: bool
    ) -> list[tuple[bytes, bytes]]:
        """Write the rows of the new events ``fresh`` ((event, position, payload digest),
        received at ``now``): pending, unless ``indexed`` (the caller writes their indexes in
        this transaction). Returns their (keys, leaf) (:func:`tlog.inbox.buffered_encodings`);
        the leaves only when ``indexed``."""
        tenant = self._tenant
        forms = [
            buffered_encodings(e, digest, now) if indexed else (e.stored_keys, b"")
            for e, _, digest in fresh
        ]
        tx.executemany(
            "INSERT INTO inbox_event (tenant, source, id, position, kind, keys, payload,"
            " payload_hash, received_at, held, dead, indexed)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (
                    tenant,
                    e.source,
                    e.id,
                    pos,
                    e.kind,
                    keys,
                    e.payload_bytes,
                    digest,
                    now,
                    False,
                    False,
                    indexed,
                )
                for (e, pos, digest), (keys, _) in zip(fresh, forms, strict=True)
            ],
        )
        return forms

    def _stored_positions(
        self, tx: Tx, pairs: set[tuple[str, str]]
    ) -> dict[tuple[str, str], tuple[int, int]]:
        """(position, received_at) of each stored event of ``pairs`` (source, id)."""
        found: dict[tuple[str, str], tuple[int, int]] = {}
        ordered = sorted(pairs)
        for lo in range(0, len(ordered), 500):
            chunk = ordered[lo : lo + 500]
            # A join on the list, not "(source, id) IN (VALUES …)": SQLite walks the tenant's
            # events for that one; the join is a primary-key probe per pair on both backends.
            rows = tx.all(
                "SELECT e.source, e.id, e.position, e.received_at FROM (VALUES "  # noqa: S608
                + ", ".join(["(?, ?)"] * len(chunk))
                + ") AS v JOIN inbox_event e"
                " ON e.tenant = ? AND e.source = v.column1 AND e.id = v.column2",
                (*(part for pair in chunk for part in pair), self._tenant),
            )
            for source, id_, position, at in rows:
                found[(str(source), str(id_))] = (
                    stored_int(position, "event position"),
                    stored_int(at, "received_at"),
                )
        return found

    def _lock_log_waits(
        self, tx: Tx, kinds: Sequence[str], pair: tuple[str, str] | None
    ) -> tuple[int, int, int, set[str], dict[tuple[str, str], tuple[int, int]] | None]:
        """Lock the inbox log's row (created when missing), in one statement: (its stored
        size, the number of events (the pending ones too), the store clock's time, the kinds
        of ``kinds`` somebody waits for, and — only where the engine serialises writers (no
        row locks: SQLite), for a batch of the one event (source, id) ``pair`` —
        :meth:`_stored_positions` of that pair when it is new ({}); None otherwise, and for a
        duplicate, whose time of arrival the caller looks up).

        Only there: on PostgreSQL a statement that waited for the row lock reads with the
        snapshot it started with, which may miss an event the previous holder committed, so
        the number of events and the batch's duplicates are looked up by statements of their
        own after the lock."""
        serialised = not tx.dialect.lock_suffix
        if not serialised:
            pair = None
        expr, now_params = self._store._now_sql()
        shape = (expr, len(kinds), pair is not None)
        sql = self._lock_sql.get(shape)
        if sql is None:
            # Each EXISTS ordered as inbox_wait_match is, so that its answer is that index's
            # first entry for the kind (PostgreSQL would otherwise walk inbox_wait_order,
            # filtering on kind).
            waits = "".join(
                ", EXISTS (SELECT 1 FROM inbox_wait WHERE tenant = ? AND kind = ?"
                " ORDER BY namespace, value, number LIMIT 1)"
                for _ in kinds
            )
            stored = (
                ""
                if pair is None
                else ", EXISTS (SELECT 1 FROM inbox_event WHERE tenant = ? AND source = ?"
                " AND id = ?)"
            )
            if serialised:
                stored += f", ({TOP_POSITION})"
            sql = self._lock_sql[shape] = (
                f"SELECT size, {expr}{waits}{stored} FROM log_state"  # noqa: S608 - fixed text
                f" WHERE tenant = ?{tx.dialect.lock_suffix}"
            )
        log = self._log.tenant
        tenant = self._tenant
        params: list[object] = list(now_params)
        for k in kinds:
            params += (tenant, k)
        if pair is not None:
            params += (tenant, *pair)
        if serialised:
            params.append(tenant)
        params.append(log)
        row = tx.one(sql, params)
        if row is None:
            tx.execute(
                "INSERT INTO log_state (tenant, size) VALUES (?, 0)"
                " ON CONFLICT (tenant) DO NOTHING",
                (log,),
            )
            row = tx.one(sql, params)
            assert row is not None
        n = 2 + len(kinds)
        waited = {k for k, w in zip(kinds, row[2:n], strict=True) if w}
        found: dict[tuple[str, str], tuple[int, int]] | None = (
            None if pair is None or row[n] else {}
        )
        size = stored_int(row[0], "log size")
        total = events_past(size, row[-1]) if serialised else self._event_total(tx, size)
        return size, total, stored_int(row[1], "clock"), waited, found

    # --- the broadcast path: an event looks for the oldest waiter ---------------------------

    def match(self, source: str, id: str) -> Wait | None:
        """Claim the buffered event (source, id) for the oldest wait of its kind on any of its
        keys, retiring that wait in the same transaction (the broadcast path); None when
        nobody waits, or the event is unknown, claimed or dead."""
        checked_identity(source, id)

        def work(tx: Tx, due: list[tuple[int, list[bytes]]]) -> Wait | None:
            ev = self._event(tx, source, id)
            if ev is None or ev.state != "live":
                return None
            self._lock_keys(tx, ev.kind, ev.keys)
            # Under the inbox log's row lock, as every broadcast walk and delivery: the walks
            # take waits' locks in their own orders, and the log's lock keeps two from
            # crossing. The pending events are indexed first: a pending event is claimed only
            # once indexed (store.inbox.indexing), so its match rows never outlive its claim.
            self._index_rest(tx, self._log._lock_log(tx), due)
            return self._match_event(tx, ev, self._now(tx))

        try:
            return self._write_appending(work)
        except Taken:
            return None

    # --- the wait path: a wait looks for the oldest event ------------------------------------

    def subscribe(self, wait: Wait) -> bool:
        """Register ``wait`` (idempotent: a wait already registered for (run, effect key) is
        left as it is); True when it was registered now. A registered wait is matched by
        arriving events; it does not look at the buffer (:meth:`wait` does both)."""
        wait = checked_wait(wait)

        def work(tx: Tx) -> bool:
            self._lock_keys(tx, wait.kind, wait.keys)
            self._refuse_sealed(tx, wait.run)
            return self._register(tx, wait)

        return self._write(work)

    def claim(self, wait: Wait) -> Claimed | None:
        """The event for ``wait``, claimed for its run in this transaction: first an event the
        run holds claimed already that fits the wait (crash recovery: the run claimed it and
        died before resuming; nobody else can re-claim it), else the oldest live event of the
        wait's kind on any of its keys. A registered wait of (run, effect key) is retired with
        the claim, so that a later event cannot be claimed for a wait this one satisfied.
        None when there is no such event (the buffer is not watched: see :meth:`wait`)."""
        wait = checked_wait(wait)

        def work(tx: Tx, due: list[tuple[int, list[bytes]]]) -> Claimed | None:
            self._lock_keys(tx, wait.kind, wait.keys)
            self._refuse_sealed(tx, wait.run)
            self._caught_up(tx, due)
            return self._claim_for(tx, wait, self._now(tx))

        return self._write_appending(work)

    def wait(self, wait: Wait) -> Claimed | None:
        """:meth:`claim`, and when nothing is claimable :meth:`subscribe`, in one transaction:
        the race-free way for a run to wait. Returns the claim, or None when the wait is now
        registered (an arriving event will claim itself for it)."""
        wait = checked_wait(wait)

        def work(tx: Tx, due: list[tuple[int, list[bytes]]]) -> Claimed | None:
            self._lock_keys(tx, wait.kind, wait.keys)
            self._refuse_sealed(tx, wait.run)
            self._caught_up(tx, due)
            got = self._claim_for(tx, wait, self._now(tx))
            if got is None:
                self._register(tx, wait)
            return got

        return self._write_appending(work)

    # --- targeted delivery -------------------------------------------------------------------

    def deliver(self, run: str, event: Event) -> Targeted:
        """Deliver ``event`` to the named ``run``: when the run has a wait of the event's kind
        on one of its keys that no event satisfies yet, the event is buffered (a new position
        in the log) already claimed by the run for it, and the wait is **not** retired (a
        retried delivery rebuilds its answer from it), though it gets no second event. A
        retry of a delivery that was made is ``matched`` again while that wait stands (until
        the run claims, waits or unsubscribes it); an event buffered before, and not claimed
        by the run for a standing wait, is ``duplicate``; a run that waits for no such event
        is ``not-waiting``, and nothing is stored. RunSealedError for a sealed run."""
        checked_run(run)
        checked_event(event, "deliver")
        tenant = self._tenant

        def work(tx: Tx, due: list[tuple[int, list[bytes]]]) -> Targeted:
            self._lock_keys(tx, event.kind, event.keys)
            existing = self._event(tx, event.source, event.id, lock=True)
            if existing is not None:
                return self._delivered(tx, run, existing)
            # Locks in the order every path takes them: the keys, the run's row, the inbox
            # log's row, the wait.
            self._refuse_sealed(tx, run)
            now = self._now(tx)
            size = self._index_rest(tx, self._log._lock_log(tx), due)
            # Looked up again under the log's lock, which every insert into inbox_event holds:
            # a buffer sharing no key lock with this delivery may have stored the event after
            # the first look (PostgreSQL).
            existing = self._event(tx, event.source, event.id)
            if existing is not None:
                return self._delivered(tx, run, existing)
            rows = tx.all(
                f"SELECT {WAIT_COLUMNS} FROM inbox_wait WHERE tenant = ? AND run = ? AND kind = ?"  # noqa: S608
                " ORDER BY number, effect_key, namespace, value",
                (tenant, run, event.kind),
            )
            chosen = None
            for w in stored_waits(rows):
                if set(w.keys) & set(event.keys):
                    self._lock_wait(tx, run, w.effect_key)
                    # Its rows locked: an unsubscribe of it waits for this delivery and then
                    # sheds its event, or went first and it is gone.
                    if not self._wait_rows(tx, run, w.effect_key, lock=True):
                        continue
                    if self._held_for(tx, w) is None:
                        chosen = w  # a wait satisfied already gets no second event
                        break
            if chosen is None:
                return Targeted("not-waiting")
            tx.execute(
                "INSERT INTO inbox_event (tenant, source, id, position, kind, keys, payload,"
                " payload_hash, received_at, claimed_by, claimed_at, held, dead, claimed_for)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    tenant,
                    event.source,
                    event.id,
                    size,
                    event.kind,
                    keys_json(event.keys),
                    event.payload_bytes,
                    event.payload_sha256,
                    now,
                    run,
                    now,
                    True,
                    False,
                    chosen.effect_key,
                ),
            )
            self._append_leaves(tx, size, [Entry.of(event, now).leaf], due)
            self._grown(size, size + 1)
            return Targeted("matched", chosen, size)

        return self._write_appending(work)

    def _delivered(self, tx: Tx, run: str, existing: StoredEvent) -> Targeted:
        """The answer to a delivery to ``run`` of the stored event ``existing``: a retry is
        ``matched`` from the wait the event was claimed for, while it still satisfies that
        wait (:meth:`_held_for`); anything else is a duplicate."""
        if existing.claimed_by == run and existing.claimed_for is not None:
            waits = self._wait_rows(tx, run, existing.claimed_for)
            held = None if not waits else self._held_for(tx, waits[0])
            if held is not None and held.position == existing.position:
                return Targeted("matched", waits[0], existing.position)
        return Targeted("duplicate")

    # --- after the claim ------------------------------------------------------------------------

    def journal_delivery(self, run: str, epoch: int, source: str, id: str) -> Record:
        """Append the ``EventDelivered`` record of event (source, id) to ``run``'s chain, under
        the run's ``epoch`` (fenced like any append), and note its seq on the event: the run
        resumed on it. The event must be claimed by ``run`` (UsageError otherwise). Idempotent:
        when the delivery was journaled already, that record is returned and nothing is
        written."""
        checked_run(run)
        checked_identity(source, id)
        check_int(epoch, "epoch", 1)

        def work(tx: Tx) -> Record:
            ev = self._event(tx, source, id, lock=True)
            if ev is None:
                raise UsageError(f"no event {source}/{id} is buffered")
            if ev.claimed_by != run:
                holder = "nobody" if ev.claimed_by is None else f"run {ev.claimed_by}"
                raise UsageError(f"event {source}/{id} is claimed by {holder}, not by run {run}")
            if ev.delivered_seq is not None:
                # The retry is fenced as the first call was: a holder whose lease was taken
                # over is told so, not handed the record as if it had resumed the run.
                lease = tx.one(
                    "SELECT epoch FROM run_lease WHERE tenant = ? AND run = ?", (self._tenant, run)
                )
                if lease is not None and lease[0] != epoch:
                    raise FencedError(run, epoch, stored_int(lease[0], "lease epoch"))
                row = tx.one(
                    f"SELECT {RECORD_COLUMNS} FROM journal"  # noqa: S608
                    " WHERE tenant = ? AND run = ? AND seq = ?",
                    (self._tenant, run, ev.delivered_seq),
                )
                if row is None:
                    raise CorruptError(f"the delivery record of {source}/{id} is gone", run)
                return record(run, row)
            batch = [Append(run, KIND_EVENT_DELIVERED, data=delivery_data(ev.entry, ev.position))]
            _, append = self._store._append_work(epoch, batch, None, delivery_ok=True)
            (rec,) = append(tx)
            tx.execute(
                "UPDATE inbox_event SET delivered_seq = ?"
                " WHERE tenant = ? AND source = ? AND id = ?",
                (rec.seq, self._tenant, source, id),
            )
            return rec

        return self._write(work)

    def unsubscribe(self, run: str, effect_key: str | None = None) -> tuple[int, int]:
        """Remove ``run``'s waits (only the one of ``effect_key`` when given) and shed the
        buffer's copy of the payload of every event the run holds claimed for them (its
        delivery is journaled by then): each keeps its identity, claim and accounting, and is
        no longer held, so a later wait of the run cannot re-claim it. Returns (wait rows
        removed, payloads shed)."""
        checked_run(run)
        if effect_key is not None:
            try:
                check_effect_key(effect_key)
            except MalformedError as e:
                raise UsageError(str(e)) from None

        def work(tx: Tx) -> tuple[int, int]:
            scope, params = (
                ("", ()) if effect_key is None else (" AND effect_key = ?", (effect_key,))
            )
            waits = tx.execute(
                f"DELETE FROM inbox_wait WHERE tenant = ? AND run = ?{scope}",  # noqa: S608
                (self._tenant, run, *params),
            )
            shed = tx.execute(
                f"UPDATE inbox_event{tx.dialect.indexed_by('inbox_event_held')}"  # noqa: S608
                f" SET payload = NULL, held = ? WHERE tenant = ? AND claimed_by = ? AND held"
                f"{scope.replace('effect_key', 'claimed_for')}",
                (False, self._tenant, run, *params),
            )
            return waits, shed

        return self._write(work)

    def erase(self, source: str, id: str) -> bool:
        """Strip the payload of event (source, id), keeping its identity, claim, dead-letter
        fields and its place in the log (every receipt stays valid); False when unknown."""
        checked_identity(source, id)

        def work(tx: Tx) -> bool:
            return (
                tx.execute(
                    "UPDATE inbox_event SET payload = NULL"
                    " WHERE tenant = ? AND source = ? AND id = ?",
                    (self._tenant, source, id),
                )
                == 1
            )

        return self._write(work)

    def sweep(self, older_than: int, reason: str = "unclaimed") -> int:
        """Make every unclaimed event received at or before ``older_than`` (store clock) a dead
        letter with ``reason``, walking the index of live events (never every event ever
        received), in transactions of :data:`SWEEP_CHUNK`. Claimed events never dead-letter.
        Returns how many were retired."""
        check_int(older_than, "older_than", 0)
        checked_label(reason, "a dead-letter reason", MAX_REASON)
        tenant = self._tenant

        def work(tx: Tx, due: list[tuple[int, list[bytes]]]) -> int:
            self._caught_up(tx, due)
            now = self._now(tx)
            rows = tx.all(
                f"SELECT {EVENT_COLUMNS} FROM inbox_event WHERE tenant = ? AND received_at <= ?"  # noqa: S608
                " AND indexed AND claimed_by IS NULL AND NOT dead"
                " ORDER BY received_at, position LIMIT ?",
                (tenant, older_than, SWEEP_CHUNK),
            )
            n = 0
            for row in rows:
                ev = stored_event(row)
                if (
                    tx.execute(
                        "UPDATE inbox_event SET dead = ?, dead_reason = ?, dead_at = ?"
                        " WHERE tenant = ? AND source = ? AND id = ?"
                        " AND claimed_by IS NULL AND NOT dead",
                        (True, reason, now, tenant, ev.source, ev.id),
                    )
                    == 1
                ):
                    self._unmatch(tx, ev)
                    n += 1
            return n if len(rows) == SWEEP_CHUNK else -n - 1

        total = 0
        while True:
            n = self._write_appending(work)
            if n < 0:
                return total + (-n - 1)
            total += n


__all__ = ["MAX_LIMIT", "SWEEP_CHUNK", "Inbox"]
