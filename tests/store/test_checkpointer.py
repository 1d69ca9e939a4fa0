"""The WAL checkpointed on a thread (:mod:`store.db.checkpointer`): the WAL stays bounded under
writes that never pause, only a handle that writes starts the thread, closing stops it, and
what was written is there after a restart of the WAL and after a reopen."""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from pathlib import Path

from store.db.checkpointer import BACKSTOP_FRAMES, RESTART_FRAMES, Checkpointer
from store.open import init_store, open_store
from store.sql import SQLStore
from tlog.inbox import make_event
from tlog.keys import generate_key

ORIGIN = "example.com/checkpointer"


def _threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "tlog-wal-checkpointer"]


def _wal_frames(db: Path) -> int:
    """Pages the WAL holds (a PASSIVE checkpoint's report; it copies, it never restarts)."""
    conn = sqlite3.connect(str(db))
    try:
        return int(conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()[1])
    finally:
        conn.close()


def _writer(db: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(str(db), isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = OFF")  # the WAL's length is the point, not the disk
    conn.execute("PRAGMA wal_autocheckpoint = 0")  # nobody but the thread checkpoints
    conn.execute("CREATE TABLE IF NOT EXISTS t (k BLOB PRIMARY KEY, v BLOB)")
    return conn


def _write_pages(conn: sqlite3.Connection, transactions: int, after: object = None) -> None:
    """``transactions`` commits of 20 rows in random places of an index: about 20 pages each,
    with a pause between them as short as a writer's own work (a writer that never lets go of
    the lock would starve a RESTART; the writers' backstop is for that)."""
    for _ in range(transactions):
        time.sleep(0.0002)
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(
            "INSERT INTO t (k, v) VALUES (?, ?)", [(os.urandom(16), b"x" * 300) for _ in range(20)]
        )
        conn.execute("COMMIT")
        if isinstance(after, Checkpointer):
            after.written()


def test_without_the_thread_the_wal_only_grows(tmp_path: Path) -> None:
    # The control: the same writes with nobody checkpointing leave every page in the WAL.
    db = tmp_path / "control.db"
    conn = _writer(db)
    try:
        _write_pages(conn, 600)
        assert _wal_frames(db) > 2 * RESTART_FRAMES
    finally:
        conn.close()


def test_the_thread_keeps_the_wal_bounded_under_writes_that_never_pause(tmp_path: Path) -> None:
    db = tmp_path / "kept.db"
    conn = _writer(db)
    keeper = Checkpointer(str(db))
    try:
        _write_pages(conn, 600, keeper)  # about 12,000 pages through the WAL
        deadline = time.monotonic() + 10
        while keeper.restarts == 0 and time.monotonic() < deadline:
            _write_pages(conn, 10, keeper)
        assert keeper.restarts >= 1, "the WAL was never started over"
        # Started over: the next commits write from the WAL's beginning.
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO t (k, v) VALUES (?, ?)", (b"last", b"y"))
        conn.execute("COMMIT")
        assert _wal_frames(db) < RESTART_FRAMES + 2_000
        assert conn.execute("SELECT COUNT(*) FROM t").fetchone()[0] >= 600 * 20 + 1
    finally:
        keeper.stop()
        conn.close()
    assert not _threads()


def test_a_store_handle_starts_it_at_its_first_write_and_stops_it_when_closed(
    tmp_path: Path,
) -> None:
    db = str(tmp_path / "j.db")
    key = generate_key(ORIGIN)
    init_store(db=db, origin=ORIGIN, key=key)
    assert not _threads()
    reader = open_store(db=db)
    try:
        reader.runs(None, 10)
        assert not _threads(), "a handle that only reads started a checkpointer"
    finally:
        reader.close()
    s = open_store(db=db, key=key)
    try:
        assert isinstance(s, SQLStore)
        inbox = s.inbox
        for i in range(60):  # batches of random correlation keys: pages all over the index
            inbox.buffer_many(
                [
                    make_event(
                        "shop",
                        f"e-{i}-{j}",
                        "order.paid",
                        [("order", f"o-{(i * 7919 + j * 104729) % 100_003}")],
                        {"n": j, "pad": "p" * 200},
                    )
                    for j in range(100)
                ]
            )
        assert len(_threads()) == 1
        # 6,000 events in batches all over an index: the WAL was started over meanwhile.
        assert _wal_frames(Path(db)) < BACKSTOP_FRAMES
        assert inbox.counts().live == 6_000
    finally:
        s.close()
    assert not _threads(), "closing the handle left its checkpointer running"
    with open_store(db=db) as again:
        assert isinstance(again, SQLStore)
        assert again.inbox.counts().live == 6_000
