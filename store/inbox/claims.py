"""The arbiters of the inbox's claims (:class:`InboxClaims`, on
:class:`~store.inbox.indexing.InboxIndexes`): the locks, the two walks (an event looking for
the oldest waiter, a wait for the oldest event), crash recovery and the registration of waits,
which :class:`~store.inbox.core.Inbox`'s verbs compose.

Claims are decided in the transaction that selects them, by statements that are their own
arbiters:

* an event is claimed by ``UPDATE inbox_event … WHERE claimed_by IS NULL AND NOT dead``: one
  row changed, or none when somebody else claimed or dead-lettered it first (on PostgreSQL the
  UPDATE waits for that somebody's commit and re-checks the row);
* a waiter is consumed by ``DELETE FROM inbox_wait WHERE (tenant, run, effect_key)``: rows
  deleted, or none when another event took the wait first.

Both directions first take a transaction lock per (tenant, kind, namespace, value) they touch,
in sorted order (:meth:`Dialect.xact_lock`: advisory locks on PostgreSQL; SQLite serialises
writers anyway). That closes the one race the arbiters cannot: a wait registering while an
event with its key arrives, each not yet seeing the other's row, which would leave a live event
beside a waiting run. With the lock one of them commits first and the other sees it. Locks are
taken in one order everywhere: the keys, the inbox log's row, a wait's own lock
(:meth:`InboxClaims._lock_wait`).

One wait, one event: a wait whose run holds an event claimed for it
(:meth:`InboxClaims._held_for`) is satisfied, and gets no second one. A run sealed in the
journal takes no more records, so it can resume on no event: the verbs refuse it
(:meth:`InboxClaims._refuse_sealed`), and the broadcast path retires a wait whose run was
sealed after it registered and passes the event on.
"""

from __future__ import annotations

from collections.abc import Sequence

from store.db import Dialect, Tx
from store.errors import CorruptError, RunSealedError
from store.inbox.indexing import InboxIndexes
from store.inbox.schema import EVENT_COLUMNS, WAIT_COUNTER
from store.inbox.values import Claimed, StoredEvent, Wait, stored_event
from store.schema import next_counter, stored_int

_OLDEST_WAIT = (
    "SELECT number, run, effect_key FROM inbox_wait WHERE tenant = ? AND kind = ?"
    " AND namespace = ? AND value = ? AND number > ? ORDER BY number LIMIT 1"
)
_OLDEST_EVENT = (
    "SELECT position, source, id FROM inbox_match WHERE tenant = ? AND kind = ?"
    " AND namespace = ? AND value = ? AND position > ? ORDER BY position LIMIT 1"
)


class Taken(Exception):
    """Internal: the event was claimed by somebody else inside a match (roll back the wait)."""


def locks_keys(tx: Tx) -> bool:
    """Whether the engine takes per-key transaction locks: not with the default
    :meth:`Dialect.xact_lock`, whose writers are serialised already (SQLite)."""
    return type(tx.dialect).xact_lock is not Dialect.xact_lock


class InboxClaims(InboxIndexes):
    """The claims' machinery of one tenant's inbox (module docstring).

    Requires: the handle it came from stays open."""

    def _now(self, tx: Tx) -> int:
        return self._store._now(tx)

    def _lock_keys(self, tx: Tx, kind: str, keys: Sequence[tuple[str, str]]) -> None:
        # In sorted order, so that two transactions never wait for each other's keys. The
        # parts are joined by U+001F: no part can hold a control character, and PostgreSQL
        # text cannot hold NUL. Names are hashed to 32 bits (hashtext): a collision serialises
        # more, and at worst makes two transactions wait for each other, which PostgreSQL
        # detects and the engine answers by running the loser again (a retryable error).
        if not locks_keys(tx):
            return
        names = [
            f"inbox\x1f{self._tenant}\x1f{kind}\x1f{ns}\x1f{value}"
            for ns, value in sorted(set(keys))
        ]
        tx.dialect.xact_locks(tx, names, shared=False)

    def _match_event(self, tx: Tx, ev: StoredEvent, now: int) -> Wait | None:
        """Claim live ``ev`` for the oldest wait of its kind on any of its keys, retiring the
        wait; None when nobody waits. Raises :class:`_Taken` when ``ev`` was claimed by
        somebody else meanwhile (the caller rolls back)."""
        after = -1
        while True:
            # By number alone (a wait's own; unique in a key's range): the first entry of
            # inbox_wait_match's range, not a sort of every wait on the key.
            best = self._oldest(tx, _OLDEST_WAIT, ev.kind, ev.keys, "wait number", after)
            if best is None:
                return None
            number, run, effect = best
            self._lock_wait(tx, run, effect)
            waits = self._wait_rows(tx, run, effect)
            if not waits:
                continue  # another event took this wait first: the next oldest
            if self._seal_outcome(tx, run) is not None:
                # Sealed since it registered: it can resume on nothing, so it is retired,
                # and the event goes to the next wait.
                self._retire_wait(tx, run, effect)
                continue
            if self._held_for(tx, waits[0]) is not None:
                # Satisfied by a targeted delivery, which keeps its wait (see deliver): it
                # gets no second event. The walk goes on past it, in registration order.
                after = number
                continue
            gone = self._retire_wait(tx, run, effect)
            if gone == 0:
                continue  # another event took this wait first: the next oldest
            if not self._claim_row(tx, ev, run, effect, now):
                raise Taken
            return waits[0]

    def _lock_wait(self, tx: Tx, run: str, effect: str) -> None:
        """Take the transaction lock of ``run``'s wait ``effect`` (where the engine takes
        locks): whoever registers it, claims for it or delivers to it holds it, after the key
        locks and the inbox log's lock, so that two of them never decide on one wait at once
        although they share no key."""
        if locks_keys(tx):
            tx.dialect.xact_locks(
                tx, [f"inbox-wait\x1f{self._tenant}\x1f{run}\x1f{effect}"], shared=False
            )

    def _seal_outcome(self, tx: Tx, run: str) -> str | None:
        """The outcome ``run`` is sealed with in the journal; None while it is open."""
        row = tx.one(
            "SELECT outcome FROM run_seal WHERE tenant = ? AND run = ?", (self._tenant, run)
        )
        return None if row is None else str(row[0])

    def _refuse_sealed(self, tx: Tx, run: str) -> None:
        """RunSealedError when ``run`` is sealed: a sealed run takes no more records, so it
        can wait for, claim or be delivered no event (it could never resume on it). A plain
        read, not under the run's row lock: a seal takes that lock before the inbox log's,
        a claim would take it after the inbox's locks, and the two orders deadlock (a helper's
        stress test counted 24 a minute). So on PostgreSQL a seal committing during a claim
        can still leave the event claimed by the sealed run: the run's own ordering."""
        outcome = self._seal_outcome(tx, run)
        if outcome is not None:
            raise RunSealedError(run, outcome)

    def _claim_row(self, tx: Tx, ev: StoredEvent, run: str, effect: str, now: int) -> bool:
        """Claim live ``ev`` for ``run``'s wait ``effect`` (the arbiter); drop its match rows
        when it was won."""
        n = tx.execute(
            "UPDATE inbox_event SET claimed_by = ?, claimed_for = ?, claimed_at = ?, held = ?"
            " WHERE tenant = ? AND source = ? AND id = ? AND claimed_by IS NULL AND NOT dead",
            (run, effect, now, True, self._tenant, ev.source, ev.id),
        )
        if n != 1:
            return False
        self._unmatch(tx, ev)
        return True

    def _unmatch(self, tx: Tx, ev: StoredEvent) -> None:
        tx.executemany(
            "DELETE FROM inbox_match WHERE tenant = ? AND kind = ? AND namespace = ? AND value = ?"
            " AND position = ?",
            [(self._tenant, ev.kind, ns, v, ev.position) for ns, v in ev.keys],
        )

    def _register(self, tx: Tx, wait: Wait) -> bool:
        tenant = self._tenant
        # Two registrations of one (run, effect key) with different kinds or keys share no
        # key lock: the second waits for the first here and then finds its rows.
        self._lock_wait(tx, wait.run, wait.effect_key)
        if tx.one(
            "SELECT 1 FROM inbox_wait WHERE tenant = ? AND run = ? AND effect_key = ? LIMIT 1",
            (tenant, wait.run, wait.effect_key),
        ):
            return False
        number = next_counter(tx, tenant, WAIT_COUNTER, "wait number")
        now = self._now(tx)
        tx.executemany(
            "INSERT INTO inbox_wait (tenant, run, effect_key, namespace, value, kind, case_id,"
            " step, number, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (
                    tenant,
                    wait.run,
                    wait.effect_key,
                    ns,
                    v,
                    wait.kind,
                    wait.case,
                    wait.step,
                    number,
                    now,
                )
                for ns, v in wait.keys
            ],
        )
        return True

    def _claim_for(self, tx: Tx, wait: Wait, now: int) -> Claimed | None:
        mine = self._held_for(tx, wait)
        if mine is not None:
            self._retire_wait(tx, wait.run, wait.effect_key)
            return Claimed(mine, wait, recovered=True)
        for _ in range(1000):
            best = self._oldest(tx, _OLDEST_EVENT, wait.kind, wait.keys, "event position")
            if best is None:
                return None
            ev = self._event(tx, best[1], best[2])
            if ev is None:
                raise CorruptError(f"match row of event {best[1]}/{best[2]} has no event")
            if self._claim_row(tx, ev, wait.run, wait.effect_key, now):
                self._retire_wait(tx, wait.run, wait.effect_key)
                got = self._event(tx, ev.source, ev.id)
                assert got is not None
                return Claimed(got, wait)
            # Lost to a concurrent claim or sweep; if the row is ours to clean, clean it.
            if ev.state != "live":
                self._unmatch(tx, ev)
        raise CorruptError("the inbox's match index keeps naming claimed events")

    def _held_for(self, tx: Tx, wait: Wait) -> StoredEvent | None:
        """The oldest event ``wait``'s run holds claimed for it: claimed for its effect key,
        of its kind, on one of its keys (a walk of the run's held events: a few). The run gets
        it back from a claim (crash recovery), and while there is one the wait is satisfied:
        no second event is claimed for it. Another wait of the run gets its own back."""
        wanted = set(wait.keys)
        for row in tx.all(
            f"SELECT {EVENT_COLUMNS} FROM inbox_event"  # noqa: S608
            f"{tx.dialect.indexed_by('inbox_event_held')}"
            " WHERE tenant = ? AND claimed_by = ? AND held AND kind = ? AND claimed_for = ?"
            " ORDER BY position",
            (self._tenant, wait.run, wait.kind, wait.effect_key),
        ):
            mine = stored_event(row)
            if wanted & set(mine.keys):
                return mine
        return None

    def _retire_wait(self, tx: Tx, run: str, effect: str) -> int:
        """Delete the wait (run, effect)'s rows; how many there were (0: another claim took
        it first — the DELETE is the waiter's arbiter)."""
        return tx.execute(
            "DELETE FROM inbox_wait WHERE tenant = ? AND run = ? AND effect_key = ?",
            (self._tenant, run, effect),
        )

    def _oldest(
        self,
        tx: Tx,
        select: str,
        kind: str,
        keys: Sequence[tuple[str, str]],
        what: str,
        after: int = -1,
    ) -> tuple[int, str, str] | None:
        """The smallest (ordinal, text, text) row ``select`` gives over ``keys`` of ``kind``
        whose ordinal is above ``after``: one indexed ``LIMIT 1`` per key (the oldest event
        or wait on any of them)."""
        best: tuple[int, str, str] | None = None
        for ns, value in keys:
            row = tx.one(select, (self._tenant, kind, ns, value, after))
            if row is not None:
                cand = (stored_int(row[0], what), str(row[1]), str(row[2]))
                if best is None or cand < best:
                    best = cand
        return best


__all__ = ["InboxClaims", "Taken", "locks_keys"]
