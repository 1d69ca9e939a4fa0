"""The leanest inbox schema we found, by bare sqlite3: how near any schema could come to the
batch-1 target on this machine (SQLite).

:class:`~bench.inbox_bench.RowsFloor` prices the store's schema without its code. This prices a
schema that writes as little per durable commit as we could make it write while keeping what
``buffer`` promises, so that the gap between the target and the store can be split into what
a redesign could win and what the disk charges any design:

* per event, one durable transaction with two rows: the event (keyed by (tenant, position),
  its columns as ``inbox_event``'s) and its dedup key (tenant, source, id) — the only index a
  buffer must read before it answers — after one statement that reads the log's size and
  probes the dedup key;
* everything else in batches, every :data:`BATCH` events, in the commit of the event that
  completes the batch: the correlation index (one row per key, as ``inbox_match``), the live
  index (as ``inbox_event_live``), the inbox log's stored hashes (``tree_hash``; the count of
  each leaf's, from :func:`tlog.merkle.stored_hash_count`) and its size (``log_state``). A
  store built so would have to make a claim or a receipt catch the batch up first, and make
  the dedup probe and the claim's search look at the events not yet indexed; none of that is
  timed here, so this is a ceiling, not a design.

Rows are computed before the clock starts, as for :class:`~bench.inbox_bench.RowsFloor`; the
file starts with as many events as the store compared with, written in one transaction.
"""

from __future__ import annotations

import gc
import hashlib
import sqlite3
import time
from pathlib import Path
from time import perf_counter

from tlog import merkle

BATCH = 128
"""Events whose indexes and log hashes are written together."""
TENANT = "default"
LOG = f"{TENANT}/inbox"

_DDL = (
    """CREATE TABLE ev (tenant TEXT NOT NULL, position INTEGER NOT NULL, source TEXT NOT NULL,
        id TEXT NOT NULL, kind TEXT NOT NULL, keys BLOB NOT NULL, payload BLOB,
        payload_hash BLOB NOT NULL, received_at INTEGER NOT NULL, claimed_by TEXT,
        claimed_at INTEGER, held INTEGER NOT NULL, dead INTEGER NOT NULL, dead_reason TEXT,
        dead_at INTEGER, delivered_seq INTEGER, claimed_for TEXT,
        PRIMARY KEY (tenant, position)) WITHOUT ROWID""",
    "CREATE UNIQUE INDEX ev_pair ON ev (tenant, source, id)",
    """CREATE TABLE live (tenant TEXT NOT NULL, received_at INTEGER NOT NULL,
        position INTEGER NOT NULL, PRIMARY KEY (tenant, received_at, position)) WITHOUT ROWID""",
    """CREATE TABLE m (tenant TEXT NOT NULL, kind TEXT NOT NULL, namespace TEXT NOT NULL,
        value TEXT NOT NULL, position INTEGER NOT NULL, source TEXT NOT NULL, id TEXT NOT NULL,
        PRIMARY KEY (tenant, kind, namespace, value, position)) WITHOUT ROWID""",
    """CREATE TABLE th (tenant TEXT NOT NULL, idx INTEGER NOT NULL, hash BLOB NOT NULL,
        PRIMARY KEY (tenant, idx)) WITHOUT ROWID""",
    "CREATE TABLE ls (tenant TEXT NOT NULL PRIMARY KEY, size INTEGER NOT NULL)",
)
_EVENT = (
    "INSERT INTO ev (tenant, position, source, id, kind, keys, payload, payload_hash,"
    " received_at, held, dead) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 0, 0)"
)
_PROBE = (
    "SELECT size, (SELECT position FROM ev WHERE tenant = ? AND source = ? AND id = ?)"
    " FROM ls WHERE tenant = ?"
)


class _Event:
    """One event's rows, computed before the clock starts."""

    __slots__ = ("event", "hashes", "live", "matches")

    def __init__(self, p: int, tag: str, now: int) -> None:
        source, id_ = "shop", f"{tag}-{p:08d}"
        order, customer = f"o-{tag}-{p:08d}", f"c-{p % 1000:04d}"
        payload = b'{"amount":%d,"currency":"EUR","order":"%s"}' % (1000 + p % 9000, order.encode())
        keys = b'[["customer","%s"],["order","%s"]]' % (customer.encode(), order.encode())
        digest = hashlib.sha256(payload).digest()
        self.event = (TENANT, p, source, id_, "order.paid", keys, payload, digest, now)
        self.matches = [
            (TENANT, "order.paid", "customer", customer, p, source, id_),
            (TENANT, "order.paid", "order", order, p, source, id_),
        ]
        self.live = (TENANT, now, p)
        first, end = merkle.stored_hash_count(p), merkle.stored_hash_count(p + 1)
        self.hashes = [(LOG, i, digest) for i in range(first, end)]


class LeanFloor:
    """The lean schema (module docstring) in a file of its own in ``directory``, holding
    ``start`` events; :meth:`rate` buffers the next ones, one durable commit each."""

    def __init__(self, directory: Path, start: int) -> None:
        self.conn = sqlite3.connect(str(directory / "lean.db"), isolation_level=None)
        self.conn.execute("PRAGMA journal_mode = WAL")
        self.conn.execute("PRAGMA synchronous = FULL")  # as the store's
        for ddl in _DDL:
            self.conn.execute(ddl)
        now = int(time.time())
        backlog = [_Event(p, "backlog", now) for p in range(start)]
        self.conn.execute("BEGIN")
        self._index(backlog)
        self.conn.executemany(_EVENT, [e.event for e in backlog])
        self.conn.execute("COMMIT")
        self.size = start

    def _index(self, batch: list[_Event]) -> None:
        """Write what ``batch`` (not empty) adds beside its events."""
        conn = self.conn
        conn.executemany(
            "INSERT INTO m VALUES (?, ?, ?, ?, ?, ?, ?)", [m for e in batch for m in e.matches]
        )
        conn.executemany("INSERT INTO live VALUES (?, ?, ?)", [e.live for e in batch])
        conn.executemany("INSERT INTO th VALUES (?, ?, ?)", [h for e in batch for h in e.hashes])
        conn.execute(
            "INSERT INTO ls (tenant, size) VALUES (?, ?)"
            " ON CONFLICT (tenant) DO UPDATE SET size = excluded.size",
            (LOG, batch[-1].event[1] + 1),
        )

    def rate(self, n: int) -> float:
        """Events per second over the next ``n`` events."""
        now = int(time.time())
        events = [_Event(p, "timed", now) for p in range(self.size, self.size + n)]
        pending: list[_Event] = []
        conn = self.conn
        gc.collect()
        start = perf_counter()
        for e in events:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(_PROBE, (TENANT, e.event[2], e.event[3], LOG)).fetchone()
            conn.execute(_EVENT, e.event)
            pending.append(e)
            if len(pending) == BATCH:
                self._index(pending)
                pending = []
            conn.execute("COMMIT")
        elapsed = perf_counter() - start
        if pending:  # untimed: the file ends indexed, as it started
            conn.execute("BEGIN IMMEDIATE")
            self._index(pending)
            conn.execute("COMMIT")
        self.size += n
        return n / elapsed

    def close(self) -> None:
        self.conn.close()
