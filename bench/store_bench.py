"""Journal-store benchmark: append throughput, and checkpoint / proof latency as the log grows.

Both backends are measured when they can be: SQLite (a file in a temporary directory, opened by
the store with WAL and ``synchronous = FULL``: every COMMIT is fsynced) and PostgreSQL (a fresh
schema on the server named by ``TLOG_BENCH_POSTGRES``, else ``TLOG_TEST_POSTGRES``, else
``postgresql://postgres@127.0.0.1:5432/test``, dropped afterwards; when no server answers, the
report says so and measures SQLite alone).

(a) Appends. Records per second through :meth:`~store.api.JournalStore.append` at batch sizes
    1, 10 and 100. One measurement appends a fixed number of records (:attr:`Config.appends`)
    to a fresh run under a lease acquired for it (so every append is epoch-checked, as in
    production); the clock covers the appends only (the :class:`~store.api.Append` values are
    built before it starts, the lease acquired before and released after). Each batch size is
    measured :attr:`Config.append_runs` times, the batch sizes interleaved; the figure is the
    median rate. Each record carries a small tool-call payload (see :func:`append_data`).
    Target: SQLite, batch 100, >= 20,000 records/s.

(b) Log latency. One log per backend grows through the sizes of :attr:`Config.sizes` (full run:
    10k, 100k, 1M); at each size the store is measured as it is, then grown to the next size.
    Log position ``p`` is the run :func:`run_id` (``p``) holding one record (kind ``Note``,
    data ``{"n": p}``, epoch 1) sealed ``succeeded`` (so its second record is its seal record,
    :func:`tlog.journal.seal_body`, whose hash is the head); every run's head is therefore known
    in advance (:class:`Expected`), and equal on both backends.

    Building. The first size goes through the public API: ``append`` then ``seal`` per run
    (epoch 1 with no lease row: the store's restore path, so that the rows are exactly those of
    the bulk load below). A million sealing transactions would take too long, so the larger
    sizes are reached by a *documented shortcut*, :func:`bulk_extend`: one transaction, over a
    connection opened by the store's own dialect, inserts the rows the store's ``append`` and
    ``seal`` would have written — ``run_state``, ``journal`` (the record and the seal record
    from :func:`tlog.journal.make_record`), ``run_activity``, ``run_seal``, the outcome index
    (``run_outcome``: the seal is each run's only conclusion, so position ``p``'s ordinal is
    ``p + 1``, and the tenant's ``conclusion`` counter in ``counter`` moves to the new size),
    the RFC 6962 stored hashes in ``tree_hash`` from
    :func:`tlog.merkle.stored_hashes_for_leaves` (reading the log's right edge from the
    database), and the new size in ``log_state`` — with ``executemany`` on SQLite and ``COPY``
    on PostgreSQL. On PostgreSQL every size, the
    API-built one too, is followed by ``ANALYZE`` of the log's tables, as autovacuum would do
    after such growth (:func:`analyze`). That the shortcut writes what the API writes is
    checked, not assumed (:func:`check_rows`): after the API-built size, the rows the API wrote
    for the first runs are compared, column by column (timestamps aside), with the rows the
    shortcut would write for them, the ``counter`` and ``log_state`` rows with the log's size,
    and every other table of the database (listed from the database, so that a table a later
    schema adds is not missed) must be empty.
    After every size, the store's checkpoint root must equal the root of the expected heads,
    and sampled proofs from the store must verify against it.

    Measured at each size, each call timed alone (``perf_counter``, garbage collector off)
    after a few untimed warm-up calls; the figures are the median and the p99 (nearest rank):
    ``checkpoint()``; ``inclusion_proof(run)`` for :attr:`Config.samples` random sealed runs;
    ``consistency_proof(old)`` for as many random old sizes in [1, size) against the current
    size; ``sign_checkpoint()`` at a *new* size (each call after one more run is appended and
    sealed, untimed: this grows the log by :attr:`Config.sign_new` runs) and at a size *already
    signed* (the kept note is read back and compared; the signature is still computed). The
    operating system's page cache is warm: the log was just written. Targets (SQLite, at
    1,000,000): ``checkpoint()``, ``inclusion_proof`` and ``consistency_proof`` each <= 1 ms
    (median). A PostgreSQL size whose bulk load is estimated (from the previous one's rate)
    beyond :attr:`Config.pg_build_budget_s` is skipped, and the report says so.

(c) Peer. pymerkle's ``SqliteTree`` on an on-disk file, in ``.venv-peers`` (see
    :mod:`bench.peers`; run by bench/peer_store.py) when a Python >= 3.12 is available: built
    from the same heads (so its roots must equal ours, and its inclusion paths our proofs),
    grown through the same sizes and asked for the same random proofs, with its subroot cache
    warm (after ``get_root()``) and with the cache off. A size whose build would exceed the
    peer build limit is not built; the report says how far it got. Ratios are ours / theirs
    (below 1: ours is faster) for times; for rates, ours / target (above 1: faster).
"""

from __future__ import annotations

import contextlib
import gc
import math
import os
import platform
import random
import sqlite3
import sys
import tempfile
import time
import traceback
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from time import perf_counter
from typing import Any, TypeVar

from bench import peers
from bench.merkle_bench import Section, fmt_ratio, fmt_time
from store.api import Append, JournalStore
from store.open import init_store, open_store
from store.postgres import PostgresDialect
from store.schema import CONCLUSION_COUNTER
from store.sql import Dialect, Tx
from store.sqlcore import StoredHashReader
from store.sqlite import SQLiteDialect
from tlog import merkle
from tlog.journal import GENESIS, KIND_RUN_SEALED, Body, make_record, seal_body
from tlog.keys import generate_key

TITLE = "store"

BATCHES = (1, 10, 100)
APPEND_TARGET = 20_000
"""Records per second, SQLite, batch 100."""
LATENCY_TARGET_S = 1e-3
"""checkpoint(), inclusion and consistency proofs, each, SQLite, at TARGET_SIZE (median)."""
TARGET_SIZE = 1_000_000

ORIGIN = "bench.example/journal"
TENANT = "default"
LOG_KIND = "Note"
LOG_OUTCOME = "succeeded"
APPEND_KIND = "ToolCalled"

POSTGRES_URL = (
    os.environ.get("TLOG_BENCH_POSTGRES")
    or os.environ.get("TLOG_TEST_POSTGRES")
    or "postgresql://postgres@127.0.0.1:5432/test"
)

PEER_SCRIPT = Path(__file__).resolve().parent / "peer_store.py"

T = TypeVar("T")
Row = tuple[str, str, str, str, str]


@dataclass(frozen=True)
class Config:
    """Sizes, sample counts and budgets of one run."""

    appends: dict[int, int]
    """Records appended per measurement, by batch size."""
    append_runs: int
    """Measurements per batch size."""
    sizes: tuple[int, ...]
    """Log sizes measured; the first is built through the API, the others by bulk load."""
    samples: int
    """Timed calls per latency figure."""
    sign_new: int
    """sign_checkpoint() calls at a new size (each after one more seal) per log size."""
    warmup: int
    """Untimed calls before each latency series."""
    check_runs: int
    """Runs whose API-written rows are compared with the bulk loader's (check_rows)."""
    pg_build_budget_s: float
    """A PostgreSQL size whose bulk load is estimated longer than this is not measured."""
    peer_proof_budget_s: float
    """Time allowed per pymerkle proof series (cache warm) at one size."""
    peer_uncached_budget_s: float
    """Time allowed per pymerkle proof series with the cache off (at least 3 proofs)."""
    peer_timeout_s: float
    peer_samples: int = 3
    """Inclusion paths compared between pymerkle and the store, per size."""
    seed: int = 20240229


_SETTINGS: dict[str, tuple[Any, Any]] = {
    # Config field: (the full run's value, the quick run's), side by side.
    "appends": ({1: 2_000, 10: 10_000, 100: 20_000}, {1: 100, 10: 500, 100: 2_000}),
    "append_runs": (5, 3),
    "sizes": ((10_000, 100_000, TARGET_SIZE), (500, 5_000, 25_000)),
    "samples": (1_000, 200),
    "sign_new": (200, 20),
    "warmup": (20, 10),
    "check_runs": (2_000, 500),
    "pg_build_budget_s": (120.0, 20.0),
    "peer_proof_budget_s": (60.0, 5.0),
    "peer_uncached_budget_s": (8.0, 1.0),
    "peer_timeout_s": (1800.0, 300.0),
}
FULL = Config(**{name: full for name, (full, _) in _SETTINGS.items()})
QUICK = Config(**{name: quick for name, (_, quick) in _SETTINGS.items()})


def _log(message: str) -> None:
    print(f"  [store] {message}", file=sys.stderr, flush=True)


# --- statistics ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Stats:
    """Median and p99 (nearest rank) of ``n`` timed calls, in seconds."""

    median: float
    p99: float
    n: int

    @staticmethod
    def of(times: Sequence[float]) -> Stats:
        """The statistics of ``times`` (not empty); the same as peer_store.py computes."""
        s = sorted(times)
        n = len(s)
        median = s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2
        return Stats(median, s[max(math.ceil(0.99 * n) - 1, 0)], n)

    @staticmethod
    def parse(obj: Any) -> Stats:
        """From peer_store.py's ``{"median", "p99", "n"}``."""
        return Stats(float(obj["median"]), float(obj["p99"]), int(obj["n"]))

    def show(self) -> str:
        return f"{fmt_time(self.median)} (p99 {fmt_time(self.p99)})"


def latency(fn: Callable[[T], object], args: Sequence[T], warmup: int) -> Stats:
    """Each call ``fn(a)`` for ``a`` in ``args`` timed alone, the garbage collector off, after
    ``warmup`` untimed calls on the first arguments."""
    for a in args[:warmup]:
        fn(a)
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


def fmt_rate(rate: float) -> str:
    return f"{rate:,.0f} rec/s"


# --- where a store lives -----------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """One initialised store: exactly one of a SQLite path and a PostgreSQL conninfo."""

    name: str
    db: str | None = None
    postgres: str | None = None

    def dialect(self) -> Dialect:
        """The store's own dialect for this database (its connection settings)."""
        if self.db is not None:
            return SQLiteDialect(self.db, create=False)
        assert self.postgres is not None
        return PostgresDialect(self.postgres)

    def open(self, key: Any) -> JournalStore:
        return open_store(db=self.db, postgres=self.postgres, tenant=TENANT, key=key)


def sqlite_target(directory: Path, name: str, key: Any) -> Target:
    """A new SQLite store file in ``directory``, initialised."""
    path = str(directory / f"{name}.db")
    init_store(db=path, origin=ORIGIN, key=key)
    return Target("SQLite", db=path)


def postgres_unavailable(url: str) -> str | None:
    """Why no PostgreSQL server can be used at ``url``, or None."""
    from store.db.postgres import unavailable

    return unavailable(url)


@contextlib.contextmanager
def postgres_target(url: str, key: Any) -> Iterator[Target]:
    """A fresh schema at ``url`` holding an initialised store; dropped afterwards."""
    import psycopg
    from psycopg.conninfo import make_conninfo

    name = f"bench_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{name}"')
    try:
        conninfo = make_conninfo(url, options=f"-c search_path={name}")
        init_store(postgres=conninfo, origin=ORIGIN, key=key)
        yield Target("PostgreSQL", postgres=conninfo)
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{name}" CASCADE')


# --- (a) appends -------------------------------------------------------------------------------


def append_data(n: int) -> dict[str, Any]:
    """The payload of appended record ``n``: a small tool call (about 200-byte bodies)."""
    return {
        "tool": "send_email",
        "args": {"to": "someone@example.com", "subject": "Quarterly report", "attempt": 1},
        "n": n,
    }


def measure_appends(store: JournalStore, c: Config, label: str) -> dict[int, list[float]]:
    """Records/s per measurement, by batch size (see the module docstring, (a))."""
    rates: dict[int, list[float]] = {b: [] for b in BATCHES}
    for rep in range(c.append_runs):
        for batch in BATCHES:
            total = c.appends[batch]
            run = f"append-b{batch}-r{rep}"
            batches = [
                [Append(run, APPEND_KIND, data=append_data(i + j)) for j in range(batch)]
                for i in range(0, total, batch)
            ]
            lease = store.acquire(run, "bench", 3600)
            gc.collect()
            start = perf_counter()
            for b in batches:
                store.append(lease.epoch, b)
            elapsed = perf_counter() - start
            store.release(run, lease.epoch)
            head = store.head(run)
            if head.seq != len(batches) * batch:
                raise AssertionError(f"{run}: {head.seq} records, expected {total}")
            rates[batch].append(head.seq / elapsed)
        _log(
            f"{label} appends, pass {rep + 1}/{c.append_runs}: "
            + ", ".join(f"batch {b}: {rates[b][-1]:,.0f}/s" for b in BATCHES)
        )
    # One full chain check, untimed: the figures mean nothing if the records are wrong.
    store.verify(f"append-b{BATCHES[-1]}-r{c.append_runs - 1}")
    return rates


# --- (b) the log -------------------------------------------------------------------------------


def run_id(position: int) -> str:
    """The run sealed at log ``position``; zero-padded, so run order is position order."""
    return f"log-{position:08d}"


class Expected:
    """The log every backend builds: each position's record (body, hash), its seal record's
    body and hash (the head), and the stored hashes (a :class:`tlog.merkle.MemoryHashStore` of
    their leaf hashes), computed once."""

    def __init__(self) -> None:
        self.raws: list[bytes] = []
        self.hashes: list[bytes] = []
        self.seal_raws: list[bytes] = []
        self.heads: list[bytes] = []
        self.tree = merkle.MemoryHashStore()

    def ensure(self, size: int) -> None:
        """Compute positions up to ``size``."""
        start = len(self.heads)
        for p in range(start, size):
            body = Body(run_id(p), 1, 1, LOG_KIND, None, None, {"n": p}, True)
            record = make_record(body, GENESIS)
            seal = make_record(seal_body(run_id(p), 2, 1, LOG_OUTCOME), record.hash)
            self.raws.append(record.raw)
            self.hashes.append(record.hash)
            self.seal_raws.append(seal.raw)
            self.heads.append(seal.hash)
        if size > start:
            self.tree.extend(merkle.leaf_hash(h) for h in self.heads[start:size])


_COLUMNS: dict[str, tuple[str, ...]] = {
    "run_state": ("tenant", "run"),
    "journal": (
        "tenant",
        "run",
        "seq",
        "epoch",
        "kind",
        "case_id",
        "effect_key",
        "raw",
        "prev_hash",
        "hash",
        "sig_name",
        "sig_key_id",
        "sig",
    ),
    "run_activity": ("tenant", "run", "updated_at"),
    "run_seal": ("tenant", "run", "position", "head", "outcome", "sealed_at"),
    "run_outcome": ("tenant", "run", "outcome", "ordinal"),
    "tree_hash": ("tenant", "idx", "hash"),
}
"""The per-run rows an ``append`` + ``seal`` of a one-record run writes (besides the
``counter`` and ``log_state`` rows, which :func:`bulk_extend` moves to the new size): two
journal rows per run, its record and its seal record."""
_TIMES = {"updated_at", "sealed_at"}
_SIZED = ("counter", "log_state")
"""Tables holding one row of the log's size: the ``conclusion`` counter and the log size."""
_UNTOUCHED = ("meta",)
"""Tables written by ``init``, not by the log's build."""


def log_rows(
    expected: Expected, lo: int, hi: int, now: int, hashes: Sequence[bytes]
) -> dict[str, list[tuple[Any, ...]]]:
    """The rows of positions [lo, hi), by table (columns as in :data:`_COLUMNS`);
    ``hashes`` are the stored hashes the seals add, from index ``stored_hash_count(lo)``."""
    runs = [run_id(p) for p in range(lo, hi)]
    heads = expected.heads[lo:hi]
    first = merkle.stored_hash_count(lo)
    return {
        "run_state": [(TENANT, r) for r in runs],
        "journal": [
            row
            for r, raw, h, seal_raw, head in zip(
                runs,
                expected.raws[lo:hi],
                expected.hashes[lo:hi],
                expected.seal_raws[lo:hi],
                heads,
                strict=True,
            )
            for row in (
                (TENANT, r, 1, 1, LOG_KIND, None, None, raw, GENESIS, h, None, None, None),
                (TENANT, r, 2, 1, KIND_RUN_SEALED, None, None, seal_raw, h, head, None, None, None),
            )
        ],
        "run_activity": [(TENANT, r, now) for r in runs],
        "run_seal": [
            (TENANT, r, p, h, LOG_OUTCOME, now)
            for p, r, h in zip(range(lo, hi), runs, heads, strict=True)
        ],
        # Each run's seal is its only conclusion, and the runs are sealed in position order.
        "run_outcome": [
            (TENANT, r, LOG_OUTCOME, p + 1) for p, r in zip(range(lo, hi), runs, strict=True)
        ],
        "tree_hash": [(TENANT, first + i, h) for i, h in enumerate(hashes)],
    }


def _insert(tx: Tx, cursor: Any, table: str, rows: list[tuple[Any, ...]]) -> None:
    columns = _COLUMNS[table]
    if tx.dialect.name == "postgres":
        with cursor.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)
    else:
        marks = ", ".join("?" * len(columns))
        tx.executemany(f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks})", rows)


def bulk_extend(target: Target, expected: Expected, start: int, end: int) -> float:
    """Grow the log from ``start`` to ``end`` positions by the documented shortcut (module
    docstring, (b)); return the seconds it took.

    Requires: the log holds exactly ``start`` positions, those of :class:`Expected`.
    """
    expected.ensure(end)
    began = perf_counter()
    dialect = target.dialect()
    conn = dialect.connect()
    cursor = conn.cursor()
    tx = Tx(cursor, dialect)
    try:
        tx.execute(dialect.begin_write)
        row = tx.one("SELECT size FROM log_state WHERE tenant = ?", (TENANT,))
        if row is None or row[0] != start:
            raise AssertionError(f"the log holds {row} positions, not {start}")
        now = int(time.time())
        reader = StoredHashReader(tx, tx.dialect, TENANT)
        chunk = 50_000
        for lo in range(start, end, chunk):
            hi = min(lo + chunk, end)
            leaves = [merkle.leaf_hash(h) for h in expected.heads[lo:hi]]
            hashes = merkle.stored_hashes_for_leaves(lo, leaves, reader)
            if hashes != expected.tree.hashes[merkle.stored_hash_count(lo) :][: len(hashes)]:
                raise AssertionError("the stored hashes in the database disagree with Expected")
            for table, rows in log_rows(expected, lo, hi, now, hashes).items():
                _insert(tx, cursor, table, rows)
        tx.execute("UPDATE log_state SET size = ? WHERE tenant = ?", (end, TENANT))
        _move_counter(tx, start, end)
        cursor.execute("COMMIT")
    except BaseException:
        with contextlib.suppress(Exception):
            cursor.execute("ROLLBACK")
        raise
    finally:
        conn.close()
    analyze(target)
    return perf_counter() - began


def _move_counter(tx: Tx, start: int, end: int) -> None:
    """The tenant's ``conclusion`` counter from ``start`` (no row when 0) to ``end``, as
    ``end - start`` seals would have moved it (:func:`store.schema.index_outcome`)."""
    args = (TENANT, CONCLUSION_COUNTER)
    row = tx.one("SELECT value FROM counter WHERE tenant = ? AND name = ?", args)
    if (row[0] if row is not None else 0) != start:
        raise AssertionError(f"the conclusion counter is {row}, not the log size {start}")
    if row is None:
        tx.execute("INSERT INTO counter (tenant, name, value) VALUES (?, ?, ?)", (*args, end))
    else:
        tx.execute("UPDATE counter SET value = ? WHERE tenant = ? AND name = ?", (end, *args))


def database_tables(tx: Tx) -> list[str]:
    """The names of the database's tables (SQLite's file; PostgreSQL's current schema)."""
    if tx.dialect.name == "postgres":
        sql = (
            "SELECT table_name FROM information_schema.tables"
            " WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'"
        )
    else:
        sql = "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
    return sorted(str(r[0]) for r in tx.all(sql))


def analyze(target: Target) -> None:
    """PostgreSQL: refresh the planner's statistics of the log's tables, as autovacuum would
    after a large load (SQLite: nothing; the store does not use ANALYZE there)."""
    if target.postgres is None:
        return
    dialect = target.dialect()
    conn = dialect.connect()
    try:
        cursor = conn.cursor()
        for table in (*_COLUMNS, "log_state"):
            cursor.execute(f"ANALYZE {table}")
    finally:
        conn.close()


def build_via_api(store: JournalStore, expected: Expected, start: int, end: int) -> float:
    """Append and seal positions [start, end) through the API; the seconds it took."""
    expected.ensure(end)
    began = perf_counter()
    for p in range(start, end):
        run = run_id(p)
        (record,) = store.append(1, [Append(run, LOG_KIND, data={"n": p})])
        seal = store.seal(run, 1, LOG_OUTCOME)
        if record.hash != expected.hashes[p] or seal.head != expected.heads[p]:
            raise AssertionError(f"run {run}: the store wrote other records")
        if seal.position != p:
            raise AssertionError(f"run {run}: the store sealed it at another position")
    return perf_counter() - began


def check_rows(target: Target, expected: Expected, count: int) -> str:
    """Compare the rows the API wrote for positions [0, count) with :func:`log_rows`; raise
    AssertionError on a difference; say what was compared."""
    hashes = expected.tree.hashes[: merkle.stored_hash_count(count)]
    want = log_rows(expected, 0, count, 0, hashes)
    dialect = target.dialect()
    conn = dialect.connect()
    cursor = conn.cursor()
    tx = Tx(cursor, dialect)
    compared = 0
    try:
        tx.execute(dialect.begin_read)
        for table, columns in _COLUMNS.items():
            kept = [i for i, col in enumerate(columns) if col not in _TIMES]
            key = "idx" if table == "tree_hash" else "run"
            bound: object = len(hashes) if table == "tree_hash" else run_id(count)
            order = "run, seq" if table == "journal" else key
            got = tx.all(
                f"SELECT {', '.join(columns[i] for i in kept)} FROM {table}"
                f" WHERE tenant = ? AND {key} < ? ORDER BY {order}",
                (TENANT, bound),
            )
            expect = [tuple(r[i] for i in kept) for r in want[table]]
            if [tuple(r) for r in got] != expect:
                raise AssertionError(f"{target.name}: {table} rows differ from the bulk loader's")
            compared += len(got)
        size_row = tx.one("SELECT size FROM log_state WHERE tenant = ?", (TENANT,))
        size = -1 if size_row is None else size_row[0]
        sized = {
            "counter": tx.all("SELECT tenant, name, value FROM counter ORDER BY tenant, name"),
            "log_state": tx.all("SELECT tenant, size FROM log_state ORDER BY tenant"),
        }
        if [tuple(r) for r in sized["counter"]] != [(TENANT, CONCLUSION_COUNTER, size)]:
            raise AssertionError(f"{target.name}: counter rows {sized['counter']} differ")
        if [tuple(r) for r in sized["log_state"]] != [(TENANT, size)]:
            raise AssertionError(f"{target.name}: log_state rows {sized['log_state']} differ")
        compared += 2
        empty = 0
        for table in database_tables(tx):
            if table in _COLUMNS or table in _SIZED or table in _UNTOUCHED:
                continue
            row = tx.one(f"SELECT COUNT(*) FROM {table}")
            if row is None or row[0] != 0:
                raise AssertionError(
                    f"{target.name}: {table} has rows the bulk loader does not write"
                )
            empty += 1
        cursor.execute("COMMIT")
    finally:
        conn.close()
    return (
        f"the API's rows for the first {count:,} runs ({compared:,} rows in "
        f"{len(_COLUMNS) + len(_SIZED)} tables) equal the bulk loader's, timestamps aside; "
        f"the {empty} other tables (meta aside) are empty"
    )


@dataclass
class LogResult:
    """One backend's log measurements."""

    backend: str
    sizes: list[int] = field(default_factory=list)
    stats: dict[int, dict[str, Stats]] = field(default_factory=dict)
    signed_at: dict[int, tuple[int, int]] = field(default_factory=dict)
    """By size: the log sizes of the last new-size signature and of the already-signed ones."""
    proofs: dict[int, dict[int, list[bytes]]] = field(default_factory=dict)
    """By size: the store's inclusion proofs for the first sampled positions."""
    notes: list[str] = field(default_factory=list)


OPS = (
    ("checkpoint", "checkpoint()"),
    ("sign_new", "sign_checkpoint(), new size"),
    ("sign_same", "sign_checkpoint(), already signed"),
    ("inclusion", "inclusion_proof(run)"),
    ("consistency", "consistency_proof(old)"),
)


def measure_size(
    store: JournalStore,
    expected: Expected,
    size: int,
    inclusion: list[int],
    consistency: list[int],
    c: Config,
    result: LogResult,
) -> int:
    """Measure the store at ``size`` (its current size); return its size afterwards (it grows
    by ``c.sign_new`` runs)."""
    cp = store.checkpoint()
    if cp.size != size or cp.root != expected.tree.root(size):
        raise AssertionError(f"{result.backend}: checkpoint {cp.size} is not the expected log")
    # The figures mean nothing if the proofs are wrong: verify some (untimed).
    for p in inclusion[:20]:
        inc = store.inclusion_proof(run_id(p))
        if inc.index != p or inc.size != size or inc.head != expected.heads[p]:
            raise AssertionError(f"{result.backend}: inclusion_proof({run_id(p)}) is wrong")
        merkle.verify_inclusion(inc.index, inc.size, merkle.leaf_hash(inc.head), inc.proof, cp.root)
    for m in consistency[:20]:
        proof = store.consistency_proof(m)
        merkle.verify_consistency(m, size, expected.tree.root(m), cp.root, proof)
    result.proofs[size] = {}
    for p in inclusion[: c.peer_samples]:
        inc = store.inclusion_proof(run_id(p))
        result.proofs[size][p] = list(inc.proof)

    stats: dict[str, Stats] = {}
    stats["checkpoint"] = latency(lambda _: store.checkpoint(), range(c.samples), c.warmup)
    stats["inclusion"] = latency(lambda p: store.inclusion_proof(run_id(p)), inclusion, c.warmup)
    stats["consistency"] = latency(store.consistency_proof, consistency, c.warmup)

    # sign_checkpoint() at new sizes: one more run appended and sealed (untimed) before each.
    now = size
    expected.ensure(size + c.sign_new)
    times: list[float] = []
    for _ in range(c.sign_new):
        build_via_api(store, expected, now, now + 1)
        now += 1
        start = perf_counter()
        store.sign_checkpoint()
        times.append(perf_counter() - start)
    stats["sign_new"] = Stats.of(times)
    stats["sign_same"] = latency(lambda _: store.sign_checkpoint(), range(c.samples), c.warmup)
    result.signed_at[size] = (size + 1, now)
    result.stats[size] = stats
    result.sizes.append(size)
    _log(
        f"{result.backend} at {size:,}: "
        + ", ".join(f"{key} {stats[key].median * 1e6:.0f} µs" for key, _ in OPS)
    )
    return now


def measure_log(
    target: Target,
    key: Any,
    expected: Expected,
    samples: dict[int, tuple[list[int], list[int]]],
    c: Config,
) -> LogResult:
    """Build ``target``'s log through the sizes and measure each (module docstring, (b))."""
    result = LogResult(target.name)
    store = target.open(key)
    try:
        first = c.sizes[0]
        _log(f"{target.name}: appending and sealing {first:,} runs through the API")
        elapsed = build_via_api(store, expected, 0, first)
        result.notes.append(
            f"{target.name} log: {first:,} runs appended and sealed through the API in "
            f"{elapsed:.1f} s ({first / elapsed:,.0f} runs/s, two transactions each)"
        )
        result.notes.append(
            f"{target.name} log: {check_rows(target, expected, min(c.check_runs, first))}"
        )
        analyze(target)
        current = measure_size(store, expected, first, *samples[first], c, result)
        rate: float | None = None
        for size in c.sizes[1:]:
            if target.postgres is not None and rate is not None:
                estimate = rate * (size - current)
                if estimate > c.pg_build_budget_s:
                    result.notes.append(
                        f"{target.name} log: NOT measured at {size:,}: its bulk load was "
                        f"estimated at {estimate:.0f} s, over the {c.pg_build_budget_s:g} s "
                        f"budget"
                    )
                    break
            _log(f"{target.name}: bulk-loading positions {current:,} to {size:,}")
            elapsed = bulk_extend(target, expected, current, size)
            rate = elapsed / (size - current)
            result.notes.append(
                f"{target.name} log: positions {current:,} to {size:,} bulk-loaded in "
                f"{elapsed:.1f} s"
            )
            current = measure_size(store, expected, size, *samples[size], c, result)
    finally:
        store.close()
    return result


# --- (c) the peer ------------------------------------------------------------------------------


@dataclass
class PeerStage:
    """pymerkle's figures at one size."""

    size: int
    build_s: float
    open_root_s: float
    root_warm: Stats
    inclusion: Stats
    consistency: Stats
    uncached_inclusion: Stats
    uncached_consistency: Stats


@dataclass
class PeerResult:
    name: str
    stages: dict[int, PeerStage] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def run_peer(
    directory: Path,
    expected: Expected,
    ours: LogResult,
    samples: dict[int, tuple[list[int], list[int]]],
    c: Config,
    build_limit_s: float,
) -> PeerResult | str:
    """pymerkle at the sizes our SQLite log was measured at; a reason string if not run."""
    try:
        env = peers.ensure_peer_env(requirements=("pymerkle",))
        heads = directory / "heads.bin"
        heads.write_bytes(b"".join(expected.heads[: max(ours.sizes)]))
        payload = {
            "db": str(directory / "pymerkle.db"),
            "heads": str(heads),
            "sizes": ours.sizes,
            "inclusion": {str(n): samples[n][0] for n in ours.sizes},
            "consistency": {str(n): samples[n][1] for n in ours.sizes},
            "proof_budget_s": c.peer_proof_budget_s,
            "uncached_budget_s": c.peer_uncached_budget_s,
            "uncached_min": 3,
            "build_limit_s": build_limit_s,
            "samples": c.peer_samples,
        }
        _log(f"running {PEER_SCRIPT.name} in {env.python} (Python {env.version})")
        out = peers.run_peer_script(env, PEER_SCRIPT, payload, c.peer_timeout_s)
    except peers.PeerUnavailable as e:
        return str(e)
    if not isinstance(out, dict) or not isinstance(out.get("stages"), list):
        return f"{PEER_SCRIPT.name} printed an unexpected JSON shape"
    name = f"pymerkle {out.get('pymerkle')} SqliteTree"
    result = PeerResult(name)
    result.notes.append(
        f"peer: {name} on a file in the same directory, on Python {out.get('python')} in "
        f"{env.python.parent.parent.name} (ours on Python {platform.python_version()}); built "
        f"by append_entries from our heads, grown through the same sizes; each size measured "
        f"on a fresh handle: get_root() once (fills its subroot cache), then get_root() "
        f"(a cache hit, against our checkpoint(), which reads the database every time) and "
        f"the same random proofs as ours ('cache warm'); 'cache off' is a handle with "
        f"disable_cache=True (every subroot from the leaves), time-capped"
    )
    if out.get("error"):
        result.notes.append(f"peer FAILED: {out['error']}")
    if out.get("stopped"):
        result.notes.append(f"peer: {out['stopped']}")
    agreed: list[str] = []
    for stage in out["stages"]:
        size = int(stage["size"])
        root_ok = stage["root"] == expected.tree.root(size).hex()
        mine = ours.proofs.get(size, {})
        paths_ok = all(
            [h.hex() for h in mine.get(int(p), [])] == hexes
            for p, hexes in stage["inclusion_samples"]
        )
        agreed.append(
            f"{size:,}: "
            + ("root identical" if root_ok else "ROOT DIFFERS")
            + (
                f", {len(stage['inclusion_samples'])} inclusion paths identical"
                if paths_ok
                else ", INCLUSION PATHS DIFFER"
            )
        )
        result.stages[size] = PeerStage(
            size,
            float(stage["build_s"]),
            float(stage["open_root_s"]),
            *(
                Stats.parse(stage[k])
                for k in (
                    "root_warm",
                    "inclusion",
                    "consistency",
                    "uncached_inclusion",
                    "uncached_consistency",
                )
            ),
        )
    if agreed:
        result.notes.append("peer against ours: " + "; ".join(agreed))
        result.notes.append(
            "peer: "
            + "; ".join(
                f"{s.size:,}: append_entries {s.build_s:.2f} s, get_root() after open "
                f"{fmt_time(s.open_root_s)}, cache-off proofs timed: {s.uncached_inclusion.n} "
                f"inclusion, {s.uncached_consistency.n} consistency"
                for s in result.stages.values()
            )
        )
    return result


# --- the report --------------------------------------------------------------------------------


def _samples(c: Config) -> dict[int, tuple[list[int], list[int]]]:
    rng = random.Random(c.seed)
    return {
        n: (
            [rng.randrange(n) for _ in range(c.samples)],
            [rng.randrange(1, n) for _ in range(c.samples)],
        )
        for n in c.sizes
    }


def run(*, quick: bool, peers_enabled: bool = True, peer_build_limit_s: float = 120.0) -> Section:
    """Run the store benchmark and return its section of the report."""
    c = QUICK if quick else FULL
    section = Section(
        title=f"store: appends at batch {', '.join(map(str, BATCHES))}; checkpoint and proof "
        f"latency at {', '.join(f'{n:,}' for n in c.sizes)} sealed runs"
    )
    key = generate_key(ORIGIN)
    samples = _samples(c)
    expected = Expected()
    appends: dict[str, dict[int, list[float]]] = {}
    logs: dict[str, LogResult] = {}
    peer: PeerResult | str | None = None
    pg_reason = postgres_unavailable(POSTGRES_URL)

    with tempfile.TemporaryDirectory(prefix="tlog-store-bench-") as tmp:
        directory = Path(tmp)
        section.notes.append(
            f"SQLite {sqlite3.sqlite_version}: files in {directory.parent}, WAL, "
            f"synchronous=FULL (the store's settings); PostgreSQL: "
            + (
                f"NOT measured: {pg_reason}"
                if pg_reason
                else f"{POSTGRES_URL}, a fresh schema per phase, dropped afterwards"
            )
        )
        sqlite_appends = sqlite_target(directory, "appends", key)
        with contextlib.closing(sqlite_appends.open(key)) as store:
            appends["SQLite"] = measure_appends(store, c, "SQLite")
        logs["SQLite"] = measure_log(
            sqlite_target(directory, "log", key), key, expected, samples, c
        )
        if pg_reason is None:
            try:
                with (
                    postgres_target(POSTGRES_URL, key) as target,
                    contextlib.closing(target.open(key)) as store,
                ):
                    appends["PostgreSQL"] = measure_appends(store, c, "PostgreSQL")
                with postgres_target(POSTGRES_URL, key) as target:
                    logs["PostgreSQL"] = measure_log(target, key, expected, samples, c)
            except Exception as e:  # a server failing mid-run: report it, keep SQLite's figures
                traceback.print_exc(file=sys.stderr)
                section.notes.append(f"PostgreSQL FAILED: {type(e).__name__}: {e}")
        if peers_enabled:
            peer = run_peer(directory, expected, logs["SQLite"], samples, c, peer_build_limit_s)
        else:
            peer = "skipped (--no-peers)"

    _report_appends(section, c, appends)
    _report_logs(section, c, logs, peer)
    return section


def _report_appends(
    section: Section, c: Config, appends: dict[str, dict[int, list[float]]]
) -> None:
    body = len(
        make_record(
            Body("append-b1-r0", 1, 1, APPEND_KIND, data=append_data(0), has_data=True), GENESIS
        ).raw
    )
    for backend, rates in appends.items():
        for batch in BATCHES:
            median = Stats.of(rates[batch]).median
            row: Row = (f"append, {backend}, batch {batch}", fmt_rate(median), "", "", "")
            if backend == "SQLite" and batch == 100:
                row = (
                    row[0],
                    row[1],
                    "target",
                    fmt_rate(APPEND_TARGET),
                    f"{median / APPEND_TARGET:.2f}x",
                )
            section.rows.append(row)
        section.notes.append(
            f"{backend} appends: median of {c.append_runs} runs per batch size, each "
            + ", ".join(f"{c.appends[b]:,} records at batch {b}" for b in BATCHES)
            + " (range: "
            + "; ".join(f"batch {b} {min(rates[b]):,.0f}-{max(rates[b]):,.0f}/s" for b in BATCHES)
            + ")"
        )
    section.notes.append(
        f"appends: one fresh run per measurement under a lease acquired for it (epoch-checked "
        f"appends); bodies of about {body} bytes; rows ratio = ours / target (above 1: faster)"
    )
    sqlite = appends.get("SQLite")
    rate = Stats.of(sqlite[100]).median if sqlite else 0.0
    section.targets.append(
        (
            f"SQLite append at batch 100 >= {APPEND_TARGET:,} records/s: {rate:,.0f} records/s "
            f"(median of {c.append_runs} runs of {c.appends[100]:,} records)",
            rate >= APPEND_TARGET,
        )
    )


def _report_logs(
    section: Section, c: Config, logs: dict[str, LogResult], peer: PeerResult | str | None
) -> None:
    peer_stages = peer.stages if isinstance(peer, PeerResult) else {}
    peer_name = peer.name if isinstance(peer, PeerResult) else ""
    for backend, result in logs.items():
        for key, label in OPS:
            for size in result.sizes:
                stats = result.stats[size][key]
                at = size
                if key == "sign_new":
                    at = result.signed_at[size][0]
                    where = f"{size + 1:,}-{result.signed_at[size][1]:,}"
                elif key == "sign_same":
                    at = result.signed_at[size][1]
                    where = f"{at:,}"
                else:
                    where = f"{size:,}"
                name = f"{label}, {backend}, {where}"
                theirs = peer_stages.get(size) if backend == "SQLite" and at == size else None
                compare: list[tuple[str, Stats]] = []
                if theirs is not None:
                    if key == "checkpoint":
                        compare = [(f"{peer_name} get_root()", theirs.root_warm)]
                    elif key == "inclusion":
                        compare = [
                            (f"{peer_name}, cache warm", theirs.inclusion),
                            (f"{peer_name}, cache off", theirs.uncached_inclusion),
                        ]
                    elif key == "consistency":
                        compare = [
                            (f"{peer_name}, cache warm", theirs.consistency),
                            (f"{peer_name}, cache off", theirs.uncached_consistency),
                        ]
                if not compare:
                    section.rows.append((name, stats.show(), "", "", ""))
                for peer_label, other in compare:
                    section.rows.append(
                        (
                            name,
                            stats.show(),
                            peer_label,
                            other.show(),
                            fmt_ratio(stats.median, other.median),
                        )
                    )
        section.notes.extend(result.notes)
        if len(result.sizes) > 1:
            first, last = result.sizes[0], result.sizes[-1]
            section.notes.append(
                f"{backend} flatness, median at "
                + " / ".join(f"{n:,}" for n in result.sizes)
                + ": "
                + "; ".join(
                    f"{label} "
                    + " / ".join(fmt_time(result.stats[n][key].median) for n in result.sizes)
                    + f" ({last // first}x the runs: "
                    f"{result.stats[last][key].median / result.stats[first][key].median:.2f}x)"
                    for key, label in OPS
                )
                + "; for scale: a proof holds about log2(size) hashes, "
                + " / ".join(f"{math.log2(n):.1f}" for n in result.sizes)
            )
    section.notes.append(
        f"latency: {c.samples:,} timed calls per figure ({c.sign_new} for a new-size "
        f"signature: each after one more seal), after {c.warmup} warm-up calls; median "
        f"(p99); random runs and old sizes, the same on every backend and for the peer; "
        f"ratio = ours / theirs, medians (below 1: ours is faster)"
    )
    if isinstance(peer, PeerResult):
        section.notes.extend(peer.notes)
    elif peer is not None:
        section.notes.append(f"peer NOT measured: {peer}")

    sqlite = logs.get("SQLite")
    size = sqlite.sizes[-1] if sqlite and sqlite.sizes else 0
    where = f"at {size:,} on SQLite" + (
        "" if size == TARGET_SIZE else f" (quick run; the targets are set at {TARGET_SIZE:,})"
    )
    for key, label in (
        ("checkpoint", "checkpoint()"),
        ("inclusion", "inclusion proof"),
        ("consistency", "consistency proof"),
    ):
        median = sqlite.stats[size][key].median if sqlite and size else math.inf
        section.targets.append(
            (
                f"{label} <= {LATENCY_TARGET_S * 1e3:g} ms {where} (median): {fmt_time(median)}",
                median <= LATENCY_TARGET_S,
            )
        )
