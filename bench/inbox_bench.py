"""Inbox benchmark: buffering and claiming throughput, and claim latency as the backlog grows.

Both backends are measured when they can be, as in :mod:`bench.store_bench`: SQLite (a file in
a temporary directory; the store's WAL and ``synchronous = FULL``: every COMMIT is fsynced) and
PostgreSQL (a fresh schema on the server named by ``TLOG_BENCH_POSTGRES``, else
``TLOG_TEST_POSTGRES``, else ``postgresql://postgres@127.0.0.1:5432/test``, dropped
afterwards; when no server answers, the report says so and measures SQLite alone).

(a) Throughput, against the machine's durable-commit rate measured in the same run. The
    *floor* is a bare loop of one-row transactions on the same backend: on SQLite a file of
    its own in the same directory, opened by :mod:`sqlite3` with WAL and ``synchronous =
    FULL``, ``BEGIN IMMEDIATE`` / one-row INSERT / ``COMMIT``; on PostgreSQL a psycopg
    connection to the same schema, one-row INSERT then ``commit()``. Each pass measures, side
    by side and in this order: the floor; buffered events/s through
    :meth:`~store.inbox.core.Inbox.buffer_many` (``match=True``, the default: nobody waits, so
    the match finds nothing) at batch sizes 1 and 100, each event getting its position in the
    inbox log (its receipt) in the buffering transaction and its leaf and indexes in the
    transaction of the buffer that completes its batch (``INDEX_BATCH``; a batch of 100
    writes its own at once), timed with the buffers; matched claims/s in the *wait*
    direction (``wait()`` claiming an event buffered beforehand, untimed, on the event's own
    correlation key) and in the *broadcast* direction (``buffer(event)`` claiming itself for
    a wait registered beforehand, untimed, by ``subscribe``). Events and waits are built
    before the clock starts. The figure is the median over :attr:`Config.runs` passes; the
    ratio to the floor is the median of the per-pass ratios (each pass measures both within
    seconds of each other, which cancels most of the drift of a shared machine). Every result
    is checked after the clock stops: the positions handed out are dense and in order, each
    claim names the expected event and wait, and the inbox log's size is the number buffered.
    On SQLite a second floor puts the batch-1 figure in proportion: the pages one buffer
    commits are counted (WAL frames over 200 buffers, :func:`pages_per_buffer`), and a bare
    ``sqlite3`` transaction writing as many pages (one row into each of as many tables,
    :class:`PageFloor`) is timed in each pass beside the one-row floor: what the disk charges
    for a commit of that size, with no store code around it.

(b) Claim latency at :attr:`Config.sizes` *live* (buffered, unclaimed) events (full run: 10k,
    100k, 1M). One inbox per backend grows through the sizes; at each, the log is grown so that
    exactly that many events are live (the claims of earlier sizes are made up for), then
    measured. Backlog event ``p`` (:func:`log_event`) has the correlation keys
    ``("order", "o-<p>")`` (its own) and ``("customer", "c-<p mod 1000>")`` (shared by a
    thousandth of the backlog). Two claims are timed, each call alone (``perf_counter``,
    garbage collector off) after a few untimed warm-up claims, each by a fresh run:
    ``claim(wait)`` on a random live event's own key (it must get that event), and on a
    random customer's key (it must get that customer's oldest live event). Figures: median and
    p99 (nearest rank). Flat means an index walk: the claim reads the first row of its key's
    range in ``inbox_match``, not a scan over the backlog.

    Building. The first size goes through the API (``buffer_many`` in batches of
    :attr:`Config.api_batch`). The larger sizes are reached by a *documented shortcut*,
    :func:`bulk_extend`: one transaction, over a connection opened by the store's own dialect,
    inserts the rows ``buffer`` writes for each new event — ``inbox_event`` (its columns as
    ``buffer``'s INSERT sets them), one ``inbox_match`` row per correlation key, the inbox
    log's RFC 6962 stored hashes in ``tree_hash`` (:func:`tlog.merkle.stored_hashes_for_leaves`
    over the entries' leaves, reading the log's right edge from the database) and its new size
    in ``log_state`` — with ``executemany`` on SQLite and ``COPY`` on PostgreSQL, followed on
    PostgreSQL by ``ANALYZE`` (as autovacuum would after such growth). That the shortcut writes
    what the API writes is checked, not assumed (:func:`check_rows`): the rows the API wrote for
    the first size are compared, every column, with the rows the shortcut would write for the
    same events and arrival times. After every size a sample is verified through the API: the
    inbox checkpoint's root equals the root of the expected leaves, ``counts()`` says exactly
    that many events are live, sampled events read back by ``get()`` are the expected ones,
    and their receipts (under a newly signed inbox checkpoint) verify. A PostgreSQL size whose
    bulk load is estimated (from the previous one's rate) beyond
    :attr:`Config.pg_build_budget_s` is skipped, and the report says so.

The schema's ceiling (SQLite): :class:`RowsFloor` writes exactly the rows ``buffer`` writes, one
event a durable transaction, by bare sqlite3 with every row computed beforehand, beside the
floor: how much of the gap to the floor is the schema's (its pages and indexes) and how much
the store's code. And :class:`~bench.inbox_lean.LeanFloor`, the leanest schema we found (two
rows a durable commit, the rest in batches), by bare sqlite3 too: how near any redesign of the
schema could come to the batch-1 target on this machine.

Targets (SQLite): buffering one event at a time >= 60% of the durable-commit rate measured in
the same run; buffering at batch 100 >= 20,000 events/s; a claim at 1,000,000 live events
<= 2 ms (median, both kinds of claim).
"""

from __future__ import annotations

import contextlib
import gc
import os
import random
import sqlite3
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from time import perf_counter
from typing import Any

from bench.inbox_lean import BATCH as LEAN_BATCH
from bench.inbox_lean import LeanFloor
from bench.merkle_bench import Section, fmt_ratio, fmt_time
from bench.store_bench import (
    ORIGIN,
    POSTGRES_URL,
    TENANT,
    Stats,
    Target,
    postgres_target,
    postgres_unavailable,
    sqlite_target,
)
from store.inbox import Buffered, Claimed, make_wait
from store.inbox.core import Inbox
from store.inbox.schema import INDEX_AT_ONCE, INDEX_BATCH
from store.sql import SQLStore, Tx
from store.sqlcore import StoredHashReader
from tlog import merkle
from tlog.inbox import Entry, Event, keys_json, make_event, receipt_entry
from tlog.keys import generate_key
from tlog.proof import TlogProof

TITLE = "inbox"

BATCHES = (1, 100)
FLOOR_SHARE_TARGET = 0.60
"""SQLite, batch 1: buffered events/s over the durable-commit rate of the same run."""
BATCH_TARGET = 20_000
"""Events per second, SQLite, batch 100."""
CLAIM_TARGET_S = 2e-3
"""A claim at TARGET_SIZE live events, SQLite, median."""
TARGET_SIZE = 1_000_000

SOURCE = "shop"
KIND = "OrderPaid"
CUSTOMERS = 1000
INBOX_LOG = f"{TENANT}/inbox"
"""The inbox log's name in the log tables (:mod:`store.inbox.schema`)."""

Row = tuple[str, str, str, str, str]


@dataclass(frozen=True)
class Config:
    """Sizes, sample counts and budgets of one run."""

    buffers: dict[int, int]
    """Events buffered per measurement, by batch size."""
    floor_commits: int
    """One-row transactions per floor measurement."""
    claims: int
    """Matched claims per measurement, in each direction."""
    runs: int
    """Passes (each measures the floor and everything of (a) once)."""
    sizes: tuple[int, ...]
    """Live events at which claims are timed; the first is built through the API."""
    samples: int
    """Timed claims per latency figure."""
    warmup: int
    """Untimed claims before each latency series."""
    api_batch: int
    """buffer_many batch size while building the first size."""
    receipts: int
    """Events checked through get() and receipt() after each size is built."""
    pg_build_budget_s: float
    """A PostgreSQL size whose bulk load is estimated longer than this is not measured."""
    seed: int = 20240314


_SETTINGS: dict[str, tuple[Any, Any]] = {
    # Config field: (the full run's value, the quick run's), side by side.
    "buffers": ({1: 1_000, 100: 20_000}, {1: 100, 100: 2_000}),
    "floor_commits": (1_000, 100),
    "claims": (500, 100),
    "runs": (5, 3),
    "sizes": ((10_000, 100_000, TARGET_SIZE), (1_000, 10_000)),
    "samples": (1_000, 200),
    "warmup": (20, 10),
    "api_batch": (1_000, 500),
    "receipts": (20, 5),
    "pg_build_budget_s": (240.0, 30.0),
}
FULL = Config(**{name: full for name, (full, _) in _SETTINGS.items()})
QUICK = Config(**{name: quick for name, (_, quick) in _SETTINGS.items()})


def _log(message: str) -> None:
    print(f"  [inbox] {message}", file=sys.stderr, flush=True)


def fmt_rate(rate: float, unit: str = "events/s") -> str:
    return f"{rate:,.0f} {unit}"


def median(values: Sequence[float]) -> float:
    return Stats.of(values).median


def inbox_of(store: object) -> Inbox:
    if not isinstance(store, SQLStore):
        raise AssertionError(f"the inbox needs a SQL store, not {type(store).__name__}")
    return store.inbox


# --- the floor: the machine's durable-commit rate ---------------------------------------------


class Floor:
    """A bare loop of one-row transactions beside the store (module docstring, (a))."""

    ROW = b"x" * 200

    def __init__(self, target: Target, directory: Path) -> None:
        self.conn: Any
        self.postgres = target.postgres is not None
        if target.postgres is not None:
            import psycopg

            self.conn = psycopg.connect(target.postgres)
            self.conn.execute("CREATE TABLE bench_floor (id BIGSERIAL PRIMARY KEY, v BYTEA)")
            self.conn.commit()
            self.label = "bare psycopg INSERT + COMMIT"
        else:
            self.conn = sqlite3.connect(str(directory / "floor.db"), isolation_level=None)
            self.conn.execute("PRAGMA journal_mode = WAL")
            self.conn.execute("PRAGMA synchronous = FULL")
            self.conn.execute("CREATE TABLE bench_floor (id INTEGER PRIMARY KEY, v BLOB)")
            self.label = "bare sqlite3 INSERT + COMMIT"

    def rate(self, n: int) -> float:
        """Durable one-row commits per second, over ``n`` of them."""
        conn = self.conn
        gc.collect()
        if self.postgres:
            start = perf_counter()
            for _ in range(n):
                conn.execute("INSERT INTO bench_floor (v) VALUES (%s)", (self.ROW,))
                conn.commit()
        else:
            start = perf_counter()
            for _ in range(n):
                conn.execute("BEGIN IMMEDIATE")
                conn.execute("INSERT INTO bench_floor (v) VALUES (?)", (self.ROW,))
                conn.execute("COMMIT")
        return n / (perf_counter() - start)

    def close(self) -> None:
        self.conn.close()


class PageFloor:
    """SQLite only: the durable-commit rate of a bare transaction that writes ``pages`` pages
    (one row into each of as many tables, in a file of its own beside the store): what a
    commit of a buffer's page count costs the disk, with no store code around it."""

    def __init__(self, directory: Path, pages: int) -> None:
        self.pages = max(1, pages)
        self.conn = sqlite3.connect(str(directory / "pages.db"), isolation_level=None)
        self.conn.execute("PRAGMA journal_mode = WAL")
        self.conn.execute("PRAGMA synchronous = FULL")
        for i in range(self.pages):
            self.conn.execute(f"CREATE TABLE t{i} (id INTEGER PRIMARY KEY, v BLOB)")

    def rate(self, n: int) -> float:
        conn = self.conn
        statements = [f"INSERT INTO t{i} (v) VALUES (?)" for i in range(self.pages)]
        gc.collect()
        start = perf_counter()
        for _ in range(n):
            conn.execute("BEGIN IMMEDIATE")
            for sql in statements:
                conn.execute(sql, (Floor.ROW,))
            conn.execute("COMMIT")
        return n / (perf_counter() - start)

    def close(self) -> None:
        self.conn.close()


class RowsFloor:
    """SQLite only: the rows ``buffer`` writes — the same tables and indexes, the same values
    (:func:`backlog_rows`, the inbox log's stored hashes and its size), each event in its own
    durable transaction that first reads the log's size, the highest position and the dedup
    key, as ``buffer`` does; the event's row alone (pending), and in every
    :data:`~store.inbox.schema.INDEX_BATCH`-th transaction the batch's match rows, hashes,
    log size and ``indexed`` flags — written by bare sqlite3 with every row computed
    beforehand: what this schema costs the disk and SQLite, with none of the store's code.
    A separate store file (``rows.db``) of ``start`` events, as many as the store compared
    with (the first 1,000 through the API, the rest by :func:`bulk_extend`)."""

    def __init__(self, directory: Path, key: Any, start: int) -> None:
        self.target = sqlite_target(directory, "rows", key)
        self.backlog = Backlog()
        store = self.target.open(key)
        try:
            build_via_api(inbox_of(store), self.backlog, min(start, 1_000), 1_000)
        finally:
            store.close()
        if start > self.backlog.size:  # as large as the store it is compared with
            bulk_extend(self.target, self.backlog, start)
        self.indexed = self.backlog.size
        self.matches: dict[int, list[tuple[Any, ...]]] = {}
        self.conn = self.target.dialect().connect()

    def rate(self, n: int) -> float:
        """Events per second over the next ``n`` events."""
        lo = self.backlog.size
        events = [log_event(p) for p in range(lo, lo + n)]
        received = [int(time.time())] * n
        leaves = self.backlog.add(events, received)
        rows = backlog_rows(events, lo, received)
        matches = self.matches  # the pending events', from the calls before too
        for row in rows["inbox_match"]:
            matches.setdefault(row[4], []).append(row)
        tree = self.backlog.tree.hashes
        Batch = tuple[list[tuple[Any, ...]], list[tuple[str, int, bytes]], int, int]
        per_event: list[tuple[tuple[Any, ...], Batch | None]] = []
        batch_lo = self.indexed
        for i, event_row in enumerate(rows["inbox_event"]):
            p = lo + i
            if p + 1 - batch_lo < INDEX_BATCH:
                per_event.append((event_row, None))
                continue
            first, end = merkle.stored_hash_count(batch_lo), merkle.stored_hash_count(p + 1)
            hashes = [(INBOX_LOG, first + j, tree[first + j]) for j in range(end - first)]
            batch_matches = [m for q in range(batch_lo, p + 1) for m in matches.pop(q)]
            per_event.append((event_row, (batch_matches, hashes, batch_lo, p + 1)))
            batch_lo = p + 1
        self.indexed = batch_lo
        del leaves
        event_sql = (
            f"INSERT INTO inbox_event ({', '.join(EVENT_INSERT)}, indexed)"
            f" VALUES ({', '.join('?' * len(EVENT_INSERT))}, 0)"
        )
        match_sql = (
            f"INSERT INTO inbox_match ({', '.join(MATCH_COLUMNS)}) VALUES (?, ?, ?, ?, ?, ?, ?)"
        )
        conn = self.conn
        gc.collect()
        start = perf_counter()
        for event_row, due in per_event:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(
                "SELECT size, (SELECT position FROM inbox_event WHERE tenant = ? AND source = ?"
                " AND id = ?), (SELECT MAX(position) FROM inbox_event WHERE tenant = ?)"
                " FROM log_state WHERE tenant = ?",
                (TENANT, event_row[1], event_row[2], TENANT, INBOX_LOG),
            ).fetchone()
            conn.execute(event_sql, event_row)
            if due is not None:
                match_rows, due_hashes, low, size = due
                conn.executemany(match_sql, match_rows)
                conn.executemany(
                    "INSERT INTO tree_hash (tenant, idx, hash) VALUES (?, ?, ?)", due_hashes
                )
                conn.execute("UPDATE log_state SET size = ? WHERE tenant = ?", (size, INBOX_LOG))
                conn.execute(
                    "UPDATE inbox_event SET indexed = 1 WHERE tenant = ? AND position >= ?"
                    " AND position < ?",
                    (TENANT, low, size),
                )
            conn.execute("COMMIT")
        return n / (perf_counter() - start)

    def close(self) -> None:
        self.conn.close()


def pages_per_buffer(inbox: Inbox, db: str, n: int = 50) -> float:
    """WAL frames (pages) one ``buffer`` commits, on average over ``n`` (SQLite): the WAL is
    restarted first (a RESTART checkpoint: the next commit writes from its start, the file
    keeps its size), and a PASSIVE checkpoint after reports how many frames it holds. ``n``
    stays below the automatic checkpoint's 1,000 frames."""
    with contextlib.closing(sqlite3.connect(db)) as conn:
        conn.execute("PRAGMA wal_checkpoint(RESTART)")
        for i in range(n):
            inbox.buffer(bench_event("pages", i))
        _, frames, _ = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    return int(frames) / n


# --- (a) throughput --------------------------------------------------------------------------


def bench_event(tag: str, n: int) -> Event:
    """Throughput event ``n`` of measurement ``tag``: its own order key, a shared customer."""
    return make_event(
        SOURCE,
        f"{tag}-{n}",
        KIND,
        [("order", f"{tag}-o-{n}"), ("customer", f"c-{n % CUSTOMERS:04d}")],
        {"order": f"{tag}-o-{n}", "amount": 1000 + n % 9000, "currency": "EUR"},
    )


@dataclass
class Throughput:
    """One backend's figures, a list per operation (one value per pass)."""

    backend: str
    floor_label: str
    rates: dict[str, list[float]] = field(default_factory=dict)
    ratios: dict[str, list[float]] = field(default_factory=dict)
    pages: float = 0.0
    """SQLite: WAL pages one buffer commits (:func:`pages_per_buffer`)."""

    def add(self, op: str, rate: float, floor: float) -> None:
        self.rates.setdefault(op, []).append(rate)
        self.ratios.setdefault(op, []).append(rate / floor)


OPS_A = (
    ("buffer1", "buffer, batch 1"),
    ("buffer100", "buffer_many, batch 100"),
    ("wait", "matched claim, wait() (wait direction)"),
    ("broadcast", "matched claim, buffer() (broadcast direction)"),
)


def measure_throughput(target: Target, directory: Path, key: Any, c: Config) -> Throughput:
    """(a) on one backend (module docstring)."""
    floor = Floor(target, directory)
    store = target.open(key)
    inbox = inbox_of(store)
    result = Throughput(target.name, floor.label)
    positions: list[int] = []
    pages: PageFloor | None = None
    try:
        for rep in range(c.runs):
            f = floor.rate(c.floor_commits)
            result.rates.setdefault("floor", []).append(f)
            for batch in BATCHES:
                tag = f"b{batch}r{rep}"
                events = [bench_event(tag, n) for n in range(c.buffers[batch])]
                chunks = [events[i : i + batch] for i in range(0, len(events), batch)]
                got: list[Buffered] = []
                gc.collect()
                start = perf_counter()
                for chunk in chunks:
                    got.extend(inbox.buffer_many(chunk))
                elapsed = perf_counter() - start
                _check_buffered(got, events, positions)
                result.add(f"buffer{batch}", len(events) / elapsed, f)
            result.add("wait", _wait_claims(inbox, f"w{rep}", c.claims, positions), f)
            result.add("broadcast", _broadcast_claims(inbox, f"s{rep}", c.claims, positions), f)
            _log(
                f"{target.name} pass {rep + 1}/{c.runs}: floor {f:,.0f}/s; "
                + ", ".join(f"{op} {result.rates[op][-1]:,.0f}/s" for op, _ in OPS_A)
            )
        if target.db is not None:
            # After the passes, at the store's largest: its pages per buffer, and a bare commit
            # of that many pages side by side with the one-row floor, pass by pass.
            result.pages = pages_per_buffer(inbox, target.db)
            positions.extend(range(len(positions), len(positions) + 50))
            pages = PageFloor(directory, round(result.pages))
            rows = RowsFloor(directory, key, len(positions))
            lean = LeanFloor(directory, len(positions))
            try:
                for _ in range(c.runs):
                    f = floor.rate(c.floor_commits)
                    result.rates.setdefault("floor after", []).append(f)
                    result.rates.setdefault("pages", []).append(pages.rate(c.floor_commits))
                    result.rates.setdefault("rows", []).append(rows.rate(c.buffers[1]) / f)
                    result.rates.setdefault("lean", []).append(lean.rate(c.buffers[1]) / f)
            finally:
                rows.close()
                lean.close()
        if positions != list(range(len(positions))):
            raise AssertionError(f"{target.name}: the positions handed out are not dense")
        cp = inbox.checkpoint()
        if cp.size != len(positions):
            raise AssertionError(
                f"{target.name}: inbox log of {cp.size}, {len(positions)} buffered"
            )
    finally:
        store.close()
        floor.close()
        if pages is not None:
            pages.close()
    return result


def _check_buffered(got: list[Buffered], events: list[Event], positions: list[int]) -> None:
    if len(got) != len(events):
        raise AssertionError(f"{len(got)} results for {len(events)} events")
    for b, e in zip(got, events, strict=True):
        if b.duplicate or (b.source, b.id) != (e.source, e.id) or b.matched is not None:
            raise AssertionError(f"event {e.id} was not buffered as new: {b}")
        positions.append(b.position)


def _wait_claims(inbox: Inbox, tag: str, n: int, positions: list[int]) -> float:
    """Matched claims/s, the wait direction: ``n`` events buffered (untimed), then each
    claimed by a fresh run's ``wait()`` on its own key."""
    events = [bench_event(tag, i) for i in range(n)]
    for i in range(0, n, 100):
        got = inbox.buffer_many(events[i : i + 100])
        _check_buffered(got, events[i : i + 100], positions)
    waits = [
        make_wait(f"run-{tag}-{i}", "resume", KIND, [("order", f"{tag}-o-{i}")]) for i in range(n)
    ]
    claims: list[Claimed | None] = []
    gc.collect()
    start = perf_counter()
    for w in waits:
        claims.append(inbox.wait(w))
    elapsed = perf_counter() - start
    for i, claim in enumerate(claims):
        if claim is None or claim.event.id != f"{tag}-{i}" or claim.recovered:
            raise AssertionError(f"wait {i} of {tag} claimed {claim}")
        if claim.event.claimed_by != f"run-{tag}-{i}":
            raise AssertionError(f"event {tag}-{i} is not claimed by its run")
    return n / elapsed


def _broadcast_claims(inbox: Inbox, tag: str, n: int, positions: list[int]) -> float:
    """Matched claims/s, the broadcast direction: ``n`` waits registered (untimed), then
    ``n`` events buffered one at a time, each claiming itself for its waiting run."""
    for i in range(n):
        w = make_wait(f"run-{tag}-{i}", "resume", KIND, [("order", f"{tag}-o-{i}")])
        if not inbox.subscribe(w):
            raise AssertionError(f"wait {i} of {tag} was registered before")
    events = [bench_event(tag, i) for i in range(n)]
    got: list[Buffered] = []
    gc.collect()
    start = perf_counter()
    for e in events:
        got.append(inbox.buffer(e))
    elapsed = perf_counter() - start
    for i, b in enumerate(got):
        if b.duplicate or b.matched is None or b.matched.run != f"run-{tag}-{i}":
            raise AssertionError(f"event {i} of {tag} did not claim its waiter: {b}")
        positions.append(b.position)
    return n / elapsed


# --- (b) the backlog --------------------------------------------------------------------------


def log_event(p: int) -> Event:
    """Backlog event ``p`` (module docstring, (b))."""
    return make_event(
        SOURCE,
        f"ev-{p:08d}",
        KIND,
        [("order", f"o-{p:08d}"), ("customer", f"c-{p % CUSTOMERS:04d}")],
        {"order": f"o-{p:08d}", "amount": 1000 + p % 9000, "currency": "EUR"},
    )


class Backlog:
    """What the backlog holds: each position's arrival time and leaf, and the claimed ones."""

    def __init__(self) -> None:
        self.received: list[int] = []
        self.tree = merkle.MemoryHashStore()
        self.claimed: set[int] = set()

    @property
    def size(self) -> int:
        return len(self.received)

    def add(self, events: Sequence[Event], received: Sequence[int]) -> list[bytes]:
        leaves = [Entry.of(e, t).leaf for e, t in zip(events, received, strict=True)]
        self.received.extend(received)
        self.tree.extend(leaves)
        return leaves

    @property
    def live(self) -> int:
        return self.size - len(self.claimed)

    def oldest_live(self, customer: int, also: set[int]) -> int | None:
        """The position of ``customer``'s oldest live event, ``also`` counted as claimed."""
        p = customer
        while p in self.claimed or p in also:
            p += CUSTOMERS
        return p if p < self.size else None


EVENT_INSERT = (
    "tenant",
    "source",
    "id",
    "position",
    "kind",
    "keys",
    "payload",
    "payload_hash",
    "received_at",
    "held",
    "dead",
)
"""The columns buffer's INSERT sets (the others start NULL)."""
EVENT_ALL = (
    *EVENT_INSERT,
    "claimed_by",
    "claimed_at",
    "dead_reason",
    "dead_at",
    "delivered_seq",
)
MATCH_COLUMNS = ("tenant", "kind", "namespace", "value", "position", "source", "id")
TREE_COLUMNS = ("tenant", "idx", "hash")


def backlog_rows(
    events: Sequence[Event], lo: int, received: Sequence[int]
) -> dict[str, list[tuple[Any, ...]]]:
    """The ``inbox_event`` and ``inbox_match`` rows of ``events`` at positions from ``lo``."""
    return {
        "inbox_event": [
            (
                TENANT,
                e.source,
                e.id,
                lo + i,
                e.kind,
                keys_json(e.keys),
                e.payload_bytes,
                e.payload_sha256,
                t,
                False,
                False,
            )
            for i, (e, t) in enumerate(zip(events, received, strict=True))
        ],
        "inbox_match": [
            (TENANT, e.kind, ns, v, lo + i, e.source, e.id)
            for i, e in enumerate(events)
            for ns, v in e.keys
        ],
    }


def _insert(tx: Tx, cursor: Any, table: str, columns: Sequence[str], rows: list[Any]) -> None:
    if tx.dialect.name == "postgres":
        with cursor.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)
    else:
        marks = ", ".join("?" * len(columns))
        tx.executemany(f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks})", rows)


def bulk_extend(target: Target, backlog: Backlog, end: int) -> float:
    """Grow the inbox log from ``backlog.size`` to ``end`` events by the documented shortcut
    (module docstring, (b)); the seconds it took."""
    start = backlog.size
    began = perf_counter()
    dialect = target.dialect()
    conn = dialect.connect()
    cursor = conn.cursor()
    tx = Tx(cursor, dialect)
    try:
        tx.execute(dialect.begin_write)
        row = tx.one("SELECT size FROM log_state WHERE tenant = ?", (INBOX_LOG,))
        if row is None or row[0] != start:
            raise AssertionError(f"the inbox log holds {row} events, not {start}")
        now = int(time.time())
        reader = StoredHashReader(tx, tx.dialect, INBOX_LOG)
        for lo in range(start, end, 50_000):
            hi = min(lo + 50_000, end)
            events = [log_event(p) for p in range(lo, hi)]
            received = [now] * len(events)
            leaves = backlog.add(events, received)
            hashes = merkle.stored_hashes_for_leaves(lo, leaves, reader)
            first = merkle.stored_hash_count(lo)
            if hashes != backlog.tree.hashes[first : first + len(hashes)]:
                raise AssertionError("the stored hashes in the database disagree with Backlog")
            for table, rows in backlog_rows(events, lo, received).items():
                columns = EVENT_INSERT if table == "inbox_event" else MATCH_COLUMNS
                _insert(tx, cursor, table, columns, rows)
            tree = [(INBOX_LOG, first + i, h) for i, h in enumerate(hashes)]
            _insert(tx, cursor, "tree_hash", TREE_COLUMNS, tree)
        tx.execute("UPDATE log_state SET size = ? WHERE tenant = ?", (end, INBOX_LOG))
        cursor.execute("COMMIT")
    except BaseException:
        with contextlib.suppress(Exception):
            cursor.execute("ROLLBACK")
        raise
    finally:
        conn.close()
    analyze(target)
    return perf_counter() - began


def analyze(target: Target) -> None:
    """PostgreSQL: refresh the planner's statistics of the tables the backlog fills."""
    if target.postgres is None:
        return
    conn = target.dialect().connect()
    try:
        cursor = conn.cursor()
        for table in ("inbox_event", "inbox_match", "tree_hash", "log_state"):
            cursor.execute(f"ANALYZE {table}")
    finally:
        conn.close()


def build_via_api(inbox: Inbox, backlog: Backlog, end: int, batch: int) -> float:
    """Buffer backlog events up to ``end`` through the API; the seconds it took."""
    began = perf_counter()
    for lo in range(backlog.size, end, batch):
        events = [log_event(p) for p in range(lo, min(lo + batch, end))]
        got = inbox.buffer_many(events)
        for p, b in enumerate(got, lo):
            if b.duplicate or b.position != p or b.matched is not None:
                raise AssertionError(f"backlog event {p} was buffered as {b}")
        backlog.add(events, [b.received_at for b in got])
    inbox.catch_up()  # the bulk loader goes on from an indexed log
    return perf_counter() - began


def check_rows(target: Target, backlog: Backlog) -> str:
    """Compare every row the API wrote for the backlog so far with :func:`backlog_rows` and
    the stored hashes of :class:`Backlog`; AssertionError on a difference."""
    count = backlog.size
    want = backlog_rows([log_event(p) for p in range(count)], 0, backlog.received)
    want["inbox_event"] = [(*r, None, None, None, None, None) for r in want["inbox_event"]]
    want["tree_hash"] = [(INBOX_LOG, i, h) for i, h in enumerate(backlog.tree.hashes)]
    queries = {
        "inbox_event": (EVENT_ALL, TENANT, "position"),
        "inbox_match": (MATCH_COLUMNS, TENANT, "position, namespace, value"),
        "tree_hash": (TREE_COLUMNS, INBOX_LOG, "idx"),
    }
    dialect = target.dialect()
    conn = dialect.connect()
    cursor = conn.cursor()
    tx = Tx(cursor, dialect)
    compared = 0
    try:
        tx.execute(dialect.begin_read)
        for table, (columns, tenant, order) in queries.items():
            got = tx.all(
                f"SELECT {', '.join(columns)} FROM {table} WHERE tenant = ? ORDER BY {order}",
                (tenant,),
            )
            # Booleans: SQLite gives 0 and 1, which compare equal to False and True.
            if got != want[table]:
                raise AssertionError(f"{target.name}: {table} rows differ from the bulk loader's")
            compared += len(got)
        cursor.execute("COMMIT")
    finally:
        conn.close()
    return (
        f"every row the API wrote for the first {count:,} events ({compared:,} rows of "
        f"inbox_event, inbox_match, tree_hash) equals the bulk loader's"
    )


def verify_sample(inbox: Inbox, backlog: Backlog, rng: random.Random, n: int) -> None:
    """The checks after each size (module docstring, (b))."""
    cp = inbox.checkpoint()
    if cp.size != backlog.size or cp.root != backlog.tree.root(backlog.size):
        raise AssertionError(f"inbox checkpoint {cp.size} is not the expected log")
    counts = inbox.counts()
    if (counts.size, counts.live, counts.claimed) != (
        backlog.size,
        backlog.live,
        len(backlog.claimed),
    ):
        raise AssertionError(f"inbox counts {counts} are not the expected ones")
    note = inbox.sign_checkpoint()
    live = [
        p for p in (rng.randrange(backlog.size) for _ in range(4 * n)) if p not in backlog.claimed
    ]
    for p in live[:n]:
        e = log_event(p)
        got = inbox.get(e.source, e.id)
        if (
            got is None
            or got.position != p
            or got.received_at != backlog.received[p]
            or got.event() != e
            or got.state != "live"
        ):
            raise AssertionError(f"backlog event {p} reads back as {got}")
        proof: TlogProof = inbox.receipt(e.source, e.id, sign=lambda: note)
        if not receipt_entry(proof.extra).matches(e) or proof.index != p:
            raise AssertionError(f"the receipt of backlog event {p} is not its own")


@dataclass
class LatencyResult:
    """One backend's claim latencies, by size then kind (``own`` / ``shared``)."""

    backend: str
    sizes: list[int] = field(default_factory=list)
    stats: dict[int, dict[str, Stats]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


KINDS = (("own", "claim(), the event's own key"), ("shared", "claim(), a customer's key"))


def timed(fn: Callable[[Any], object], warm: Sequence[Any], args: Sequence[Any]) -> Stats:
    """Each ``fn(a)`` for ``a`` in ``args`` timed alone, the garbage collector off, after the
    untimed calls ``fn(w)`` for ``w`` in ``warm`` (other arguments: a claim is not repeatable)."""
    for w in warm:
        fn(w)
    times: list[float] = []
    enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        for a in args:
            start = perf_counter()
            fn(a)
            times.append(perf_counter() - start)
    finally:
        if enabled:
            gc.enable()
    return Stats.of(times)


def measure_claims(
    inbox: Inbox, backlog: Backlog, size: int, rng: random.Random, c: Config, out: LatencyResult
) -> None:
    """Time both kinds of claim at ``size`` live events; check every claim's result."""
    stats: dict[str, Stats] = {}
    n = c.warmup + c.samples
    # Own key: distinct random live events.
    pool: set[int] = set()
    while len(pool) < n:
        p = rng.randrange(backlog.size)
        if p not in backlog.claimed:
            pool.add(p)
    picks = list(pool)
    rng.shuffle(picks)
    waits = [
        make_wait(f"claim-{size}-own-{i}", "resume", KIND, [("order", f"o-{p:08d}")])
        for i, p in enumerate(picks)
    ]
    got: list[Claimed | None] = []
    stats["own"] = timed(lambda w: got.append(inbox.claim(w)), waits[: c.warmup], waits[c.warmup :])
    for p, w, claim in zip(picks, waits, got, strict=True):
        if claim is None or claim.event.position != p or claim.event.claimed_by != w.run:
            raise AssertionError(f"the claim of backlog event {p} got {claim}")
        backlog.claimed.add(p)
    # Shared key: random customers, each claim the customer's oldest live event (picked so
    # that the customer still has one when its turn comes).
    expected: list[int] = []
    taken: set[int] = set()
    customers: list[int] = []
    while len(customers) < n:
        cu = rng.randrange(CUSTOMERS)
        oldest = backlog.oldest_live(cu, taken)
        if oldest is not None:
            customers.append(cu)
            expected.append(oldest)
            taken.add(oldest)
    waits = [
        make_wait(f"claim-{size}-shared-{i}", "resume", KIND, [("customer", f"c-{cu:04d}")])
        for i, cu in enumerate(customers)
    ]
    got = []
    stats["shared"] = timed(
        lambda w: got.append(inbox.claim(w)), waits[: c.warmup], waits[c.warmup :]
    )
    for cu, p, w, claim in zip(customers, expected, waits, got, strict=True):
        if claim is None or claim.event.position != p or claim.event.claimed_by != w.run:
            raise AssertionError(f"customer {cu}'s claim got {claim}, not event {p}")
        backlog.claimed.add(p)
    out.sizes.append(size)
    out.stats[size] = stats
    _log(
        f"{out.backend} at {size:,} live: " + "; ".join(f"{k} {s.show()}" for k, s in stats.items())
    )


def measure_backlog(target: Target, key: Any, c: Config) -> LatencyResult:
    """(b) on one backend (module docstring)."""
    result = LatencyResult(target.name)
    rng = random.Random(c.seed)
    backlog = Backlog()
    store = target.open(key)
    inbox = inbox_of(store)
    try:
        first = c.sizes[0]
        _log(f"{target.name}: buffering {first:,} events through the API")
        elapsed = build_via_api(inbox, backlog, first, c.api_batch)
        result.notes.append(
            f"{target.name} backlog: {first:,} events buffered through the API in "
            f"{elapsed:.1f} s (buffer_many, batch {c.api_batch})"
        )
        result.notes.append(f"{target.name} backlog: {check_rows(target, backlog)}")
        analyze(target)
        verify_sample(inbox, backlog, rng, c.receipts)
        measure_claims(inbox, backlog, first, rng, c, result)
        rate: float | None = None
        for size in c.sizes[1:]:
            end = size + len(backlog.claimed)
            if target.postgres is not None and rate is not None:
                estimate = rate * (end - backlog.size)
                if estimate > c.pg_build_budget_s:
                    result.notes.append(
                        f"{target.name} backlog: NOT measured at {size:,}: its bulk load was "
                        f"estimated at {estimate:.0f} s, over the {c.pg_build_budget_s:g} s budget"
                    )
                    break
            _log(f"{target.name}: bulk-loading events {backlog.size:,} to {end:,}")
            start = backlog.size
            elapsed = bulk_extend(target, backlog, end)
            rate = elapsed / (end - start)
            verify_sample(inbox, backlog, rng, c.receipts)
            result.notes.append(
                f"{target.name} backlog: events {start:,} to {end:,} bulk-loaded in "
                f"{elapsed:.1f} s; checkpoint root, live count, {c.receipts} sampled events "
                f"(get) and their receipts verified through the API"
            )
            measure_claims(inbox, backlog, size, rng, c, result)
    finally:
        store.close()
    return result


# --- the report -------------------------------------------------------------------------------


def run(*, quick: bool, peers_enabled: bool = True, peer_build_limit_s: float = 120.0) -> Section:
    """Run the inbox benchmark and return its section of the report (no peers)."""
    del peers_enabled, peer_build_limit_s
    c = QUICK if quick else FULL
    section = Section(
        title=f"inbox: buffering at batch {', '.join(map(str, BATCHES))} and matched claims "
        f"against the durable-commit floor; claim latency at "
        f"{', '.join(f'{n:,}' for n in c.sizes)} live events"
    )
    key = generate_key(ORIGIN)
    throughput: dict[str, Throughput] = {}
    latency: dict[str, LatencyResult] = {}
    pg_reason = postgres_unavailable(POSTGRES_URL)
    with tempfile_dir() as directory:
        section.notes.append(
            f"SQLite {sqlite3.sqlite_version}: files in {directory.parent}, WAL, "
            f"synchronous=FULL (the store's settings; the floor's too); PostgreSQL: "
            + (
                f"NOT measured: {pg_reason}"
                if pg_reason
                else f"{POSTGRES_URL}, a fresh schema per phase, dropped afterwards"
            )
        )
        # The throughput phases first, each after os.sync(): a backlog's bulk load leaves
        # gigabytes for the kernel to write, which stalled the next phase's fsyncs (PostgreSQL
        # buffering at batch 1 ranged 50-565/s after SQLite's 1M load).
        os.sync()
        throughput["SQLite"] = measure_throughput(
            sqlite_target(directory, "throughput", key), directory, key, c
        )
        if pg_reason is None:
            try:
                os.sync()
                with postgres_target(POSTGRES_URL, key) as target:
                    throughput["PostgreSQL"] = measure_throughput(target, directory, key, c)
            except Exception as e:  # a server failing mid-run: report it, keep SQLite's figures
                traceback.print_exc(file=sys.stderr)
                section.notes.append(f"PostgreSQL FAILED: {type(e).__name__}: {e}")
                pg_reason = str(e)
        latency["SQLite"] = measure_backlog(sqlite_target(directory, "backlog", key), key, c)
        if pg_reason is None:
            try:
                with postgres_target(POSTGRES_URL, key) as target:
                    latency["PostgreSQL"] = measure_backlog(target, key, c)
            except Exception as e:  # a server failing mid-run: report it, keep SQLite's figures
                traceback.print_exc(file=sys.stderr)
                section.notes.append(f"PostgreSQL FAILED: {type(e).__name__}: {e}")
    _report_throughput(section, c, throughput)
    _report_latency(section, c, latency)
    return section


@contextlib.contextmanager
def tempfile_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="tlog-inbox-bench-") as tmp:
        yield Path(tmp)


def _report_throughput(section: Section, c: Config, results: dict[str, Throughput]) -> None:
    for backend, r in results.items():
        floor = median(r.rates["floor"])
        section.rows.append(
            (
                f"durable commit, {backend} ({r.floor_label})",
                fmt_rate(floor, "commits/s"),
                "",
                "",
                "",
            )
        )
        if "pages" in r.rates:
            paged = median(r.rates["pages"])
            per_floor = median(
                [p / f for p, f in zip(r.rates["pages"], r.rates["floor after"], strict=True)]
            )
            per_pages = median(r.ratios["buffer1"]) / per_floor
            section.rows.append(
                (
                    f"durable commit of {round(r.pages)} pages, {backend} (bare sqlite3, one row "
                    f"in each of {round(r.pages)} tables)",
                    fmt_rate(paged, "commits/s"),
                    "durable-commit floor (beside it)",
                    fmt_rate(median(r.rates["floor after"]), "commits/s"),
                    f"{per_floor:.2f}x",
                )
            )
            section.rows.append(
                (
                    f"buffer, batch 1, {backend} ({r.pages:.1f} pages a commit; each rate as "
                    "a share of its own pass's floor)",
                    f"{median(r.ratios['buffer1']):.0%} of floor",
                    f"bare commit of {round(r.pages)} pages",
                    f"{per_floor:.0%} of floor",
                    f"{per_pages:.2f}x",
                )
            )
        if "rows" in r.rates:
            ceiling = median(r.rates["rows"])
            section.rows.append(
                (
                    f"the same rows by bare sqlite3, one event a commit, {backend} (this schema's"
                    " ceiling, rows computed beforehand; a share of the floor beside it)",
                    f"{ceiling:.0%} of floor",
                    "buffer, batch 1",
                    f"{median(r.ratios['buffer1']):.0%} of floor",
                    f"{ceiling / median(r.ratios['buffer1']):.2f}x",
                )
            )
        if "lean" in r.rates:
            lean = median(r.rates["lean"])
            section.rows.append(
                (
                    f"the leanest schema we found, by bare sqlite3, {backend} (two rows a commit,"
                    f" the indexes and log hashes every {LEAN_BATCH} events: bench/inbox_lean.py;"
                    " a ceiling for any redesign)",
                    f"{lean:.0%} of floor",
                    "target",
                    f"{FLOOR_SHARE_TARGET:.0%} of floor",
                    f"{lean / FLOOR_SHARE_TARGET:.2f}x",
                )
            )
        for op, label in OPS_A:
            rate = median(r.rates[op])
            unit = "events/s" if op.startswith("buffer") else "claims/s"
            section.rows.append(
                (
                    f"{label}, {backend}",
                    fmt_rate(rate, unit),
                    "durable-commit floor",
                    fmt_rate(floor, "commits/s"),
                    f"{median(r.ratios[op]):.2f}x",
                )
            )
            if op == "buffer100" and backend == "SQLite":
                section.rows.append(
                    (
                        f"{label}, {backend}",
                        fmt_rate(rate, unit),
                        "target",
                        fmt_rate(BATCH_TARGET, unit),
                        f"{rate / BATCH_TARGET:.2f}x",
                    )
                )
        section.notes.append(
            f"{backend} throughput: median of {c.runs} passes; ratio = median of the per-pass "
            f"ratios to the floor measured in the same pass (above 1: faster than one bare "
            f"commit per item); ranges: "
            + "; ".join(
                f"{name} {min(r.rates[name]):,.0f}-{max(r.rates[name]):,.0f}/s"
                for name in ("floor", *(op for op, _ in OPS_A))
            )
        )
    section.notes.append(
        f"throughput: per pass {c.floor_commits:,} floor commits, "
        + ", ".join(f"{c.buffers[b]:,} events at batch {b}" for b in BATCHES)
        + f", {c.claims:,} claims in each direction; events of about "
        f"{len(bench_event('b1r0', 0).payload_bytes)}-byte payloads and 2 correlation keys; "
        f"buffer with match=True (the default; nobody waits, so the match finds nothing); every "
        f"event gets its inbox-log position in its buffering transaction, its leaf and indexes "
        f"with its batch's ({INDEX_BATCH} at batch 1; a batch of {INDEX_AT_ONCE} or more at "
        f"once), timed"
    )
    sqlite = results.get("SQLite")
    share = median(sqlite.ratios["buffer1"]) if sqlite else 0.0
    section.targets.append(
        (
            f"SQLite buffer, batch 1 >= {FLOOR_SHARE_TARGET:.0%} of the durable-commit rate of "
            f"the same run: {share:.0%}"
            + (
                f" ({median(sqlite.rates['buffer1']):,.0f} events/s against "
                f"{median(sqlite.rates['floor']):,.0f} commits/s)"
                if sqlite
                else ""
            ),
            share >= FLOOR_SHARE_TARGET,
        )
    )
    rate = median(sqlite.rates["buffer100"]) if sqlite else 0.0
    section.targets.append(
        (
            f"SQLite buffer_many, batch 100 >= {BATCH_TARGET:,} events/s: {rate:,.0f} events/s "
            f"(median of {c.runs} passes of {c.buffers[100]:,} events)",
            rate >= BATCH_TARGET,
        )
    )


def _report_latency(section: Section, c: Config, results: dict[str, LatencyResult]) -> None:
    for backend, r in results.items():
        for kind, label in KINDS:
            base = r.sizes[0]
            for size in r.sizes:
                s = r.stats[size][kind]
                name = f"{label}, {backend}, {size:,} live"
                if size == base:
                    section.rows.append((name, s.show(), "", "", ""))
                else:
                    b = r.stats[base][kind]
                    section.rows.append(
                        (
                            name,
                            s.show(),
                            f"same at {base:,}",
                            b.show(),
                            fmt_ratio(s.median, b.median),
                        )
                    )
        section.notes.extend(r.notes)
    section.notes.append(
        f"claim latency: {c.samples:,} timed claims per figure after {c.warmup} warm-up claims, "
        f"each by a fresh run (so the run holds nothing: no recovery), each a write transaction "
        f"with its COMMIT (fsynced on SQLite); median (p99); rows at larger sizes are compared "
        f"with the first size (ratio near 1: flat); 'own key' claims a random live event by "
        f"its own key, 'customer's key' the oldest live event of a random one of {CUSTOMERS:,} "
        f"customers (each holding a thousandth of the backlog)"
    )
    sqlite = results.get("SQLite")
    size = sqlite.sizes[-1] if sqlite and sqlite.sizes else 0
    worst = (
        max((s.median for s in sqlite.stats[size].values()), default=float("inf"))
        if sqlite and size
        else float("inf")
    )
    where = f"at {size:,} live on SQLite" + (
        "" if size == TARGET_SIZE else f" (quick run; the target is set at {TARGET_SIZE:,})"
    )
    section.targets.append(
        (
            f"claim <= {CLAIM_TARGET_S * 1e3:g} ms {where} (median, the slower kind): "
            f"{fmt_time(worst)}",
            worst <= CLAIM_TARGET_S,
        )
    )


__all__ = ["FULL", "QUICK", "TITLE", "run"]
