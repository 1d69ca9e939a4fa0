"""The WAL checkpointed on a thread (:mod:`store.db.checkpointer`): the WAL stays bounded under
writes that never pause, a reader that holds a snapshot never makes the thread stop the
writers, only a handle that writes starts the thread, closing the handle (or dropping it)
stops it, and what was written is there after the WAL started over and after a reopen."""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from store.db.checkpointer import BACKSTOP_FRAMES, CATCH_UP_FRAMES, THREAD_NAME, Checkpointer
from store.open import init_store, open_store
from store.sql import SQLStore
from tlog.inbox import make_event
from tlog.keys import generate_key

ORIGIN = "example.com/checkpointer"


def _threads(db: Path | str) -> list[threading.Thread]:
    """The checkpointer threads of ``db`` (other tests' stores may have theirs running)."""
    name = f"{THREAD_NAME} {os.path.abspath(db)}"
    return [t for t in threading.enumerate() if t.name == name]


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


def _write_pages(
    conn: sqlite3.Connection, transactions: int, keeper: Checkpointer | None = None
) -> None:
    """``transactions`` commits of 20 rows in random places of an index: about 20 pages each,
    back to back, each inside ``keeper.writing()`` as the engine's writers do."""
    for _ in range(transactions):
        with keeper.writing() if keeper is not None else contextlib.nullcontext():
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(
                "INSERT INTO t (k, v) VALUES (?, ?)",
                [(os.urandom(16), b"x" * 300) for _ in range(20)],
            )
            conn.execute("COMMIT")


def _write_until_started_over(db: Path, conn: sqlite3.Connection, keeper: Checkpointer) -> None:
    """Write on until the thread has caught up with the WAL and a commit after that started
    the WAL over, from its beginning (10 s at most). Usually the first commit after a catch-up
    does; on a busy machine the thread's next passive checkpoint can run just then, and SQLite
    does not start over under a checkpoint: the next catch-up is the WAL's chance."""
    deadline = time.monotonic() + 10
    seen = 0
    while time.monotonic() < deadline:
        _write_pages(conn, 10, keeper)
        if keeper.catch_ups > seen:
            seen = keeper.catch_ups
            _write_pages(conn, 1, keeper)
            if _wal_frames(db) < CATCH_UP_FRAMES + 2_000:
                return
    assert seen >= 1, "the WAL was never caught up with"
    raise AssertionError(f"the WAL never started over after {seen} catch-ups")


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_without_the_thread_the_wal_only_grows(tmp_path: Path) -> None:
    # The control: the same writes with nobody checkpointing leave every page in the WAL.
    db = tmp_path / "control.db"
    conn = _writer(db)
    try:
        _write_pages(conn, 600)
        assert _wal_frames(db) > 2 * CATCH_UP_FRAMES
    finally:
        conn.close()


def test_the_thread_keeps_the_wal_bounded_under_writes_that_never_pause(tmp_path: Path) -> None:
    db = tmp_path / "kept.db"
    conn = _writer(db)
    keeper = Checkpointer(str(db))
    try:
        _write_pages(conn, 600, keeper)  # about 12,000 pages through the WAL
        _write_until_started_over(db, conn, keeper)
        (rows,) = conn.execute("SELECT COUNT(*) FROM t").fetchone()
        assert rows >= 601 * 20 and rows % 20 == 0  # every transaction's rows, none lost
    finally:
        keeper.stop()
        conn.close()
    assert not _threads(db)


def test_a_reader_holding_a_snapshot_never_makes_the_thread_stop_the_writers(
    tmp_path: Path,
) -> None:
    # A RESTART checkpoint waited for such a reader while it held SQLite's write lock: every
    # writer stalled for its busy timeout, over and over. The thread now takes the writers'
    # lock only when no reader pins the WAL; the WAL grows meanwhile (SQLite's rule), and is
    # caught up with once the reader has gone.
    db = tmp_path / "pinned.db"
    conn = _writer(db)
    keeper = Checkpointer(str(db))
    reader = sqlite3.connect(str(db), isolation_level=None)
    try:
        _write_pages(conn, 5, keeper)
        reader.execute("BEGIN")
        held = reader.execute("SELECT COUNT(*) FROM t").fetchone()[0]
        _write_pages(conn, 600, keeper)
        time.sleep(5 * 0.02)  # the thread's last passes
        assert keeper.writers_held == 0, "the thread stopped the writers behind a reader"
        assert keeper.catch_ups == 0
        assert _wal_frames(db) > 2 * CATCH_UP_FRAMES  # pinned: what no checkpoint can bound
        assert reader.execute("SELECT COUNT(*) FROM t").fetchone()[0] == held  # its snapshot
        reader.execute("COMMIT")
        _write_until_started_over(db, conn, keeper)  # now that the reader has gone
    finally:
        keeper.stop()
        reader.close()
        conn.close()
    assert not _threads(db)


def test_handles_dropped_without_close_leave_no_thread_and_no_descriptor(tmp_path: Path) -> None:
    db = str(tmp_path / "dropped.db")
    key = generate_key(ORIGIN)
    init_store(db=db, origin=ORIGIN, key=key)
    gc.collect()
    before = _fds()
    for i in range(30):
        s = open_store(db=db, key=key)
        assert isinstance(s, SQLStore)
        s.inbox.buffer(make_event("shop", f"d-{i}", "order.paid", [("order", f"o-{i}")], {"n": i}))
        assert len(_threads(db)) == 1
        del s  # never closed
        gc.collect()
        # The finaliser asks the thread to stop without waiting for it (it may run on any
        # thread): it ends within one pass.
        deadline = time.monotonic() + 5
        while _threads(db) and time.monotonic() < deadline:
            time.sleep(0.005)
        assert not _threads(db), f"dropped handle {i} left its checkpointer thread running"
    assert _fds() <= before + 2, f"descriptors {before} -> {_fds()}"
    with open_store(db=db) as again:
        assert isinstance(again, SQLStore)
        assert again.inbox.counts().live == 30


def test_a_store_handle_starts_it_at_its_first_write_and_stops_it_when_closed(
    tmp_path: Path,
) -> None:
    db = str(tmp_path / "j.db")
    key = generate_key(ORIGIN)
    init_store(db=db, origin=ORIGIN, key=key)
    assert not _threads(db)
    reader = open_store(db=db)
    try:
        reader.runs(None, 10)
        assert not _threads(db), "a handle that only reads started a checkpointer"
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
        assert len(_threads(db)) == 1
        # 6,000 events in batches all over an index: the WAL was started over meanwhile.
        assert _wal_frames(Path(db)) < BACKSTOP_FRAMES
        assert inbox.counts().live == 6_000
    finally:
        s.close()
    assert not _threads(db), "closing the handle left its checkpointer running"
    with open_store(db=db) as again:
        assert isinstance(again, SQLStore)
        assert again.inbox.counts().live == 6_000


def test_a_child_forked_during_a_catch_up_can_write(tmp_path: Path) -> None:
    # The thread holds the writers' lock for the length of a catch-up; a fork at that moment
    # copied the lock taken, and a write of the child's through the handle waited for ever.
    db = tmp_path / "forked.db"
    conn = _writer(db)
    keeper = Checkpointer(str(db))
    try:
        _write_pages(conn, 1, keeper)
        with keeper._writers:  # as the thread holds it while it catches up
            pid = os.fork()
            if pid == 0:  # the child: the writers' lock is free, and writing works
                code = 1
                try:
                    signal.alarm(20)  # a child that hangs is killed, and the test fails
                    child = _writer(db)
                    _write_pages(child, 3, keeper)
                    keeper.stop()
                    code = 0
                finally:
                    os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        (rows,) = conn.execute("SELECT COUNT(*) FROM t").fetchone()
        assert rows == 4 * 20
    finally:
        keeper.stop()
        conn.close()


def test_a_thread_ended_by_an_error_is_started_again_by_the_next_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "again.db"
    conn = _writer(db)
    keeper = Checkpointer(str(db))
    runs: list[str] = []
    real = keeper._checkpoint

    def first_fails(c: sqlite3.Connection) -> None:
        runs.append(threading.current_thread().name)
        if len(runs) == 1:
            raise RuntimeError("not a database error: the thread ends")
        real(c)

    monkeypatch.setattr(keeper, "_checkpoint", first_fails)
    monkeypatch.setattr(threading, "excepthook", lambda args: None)  # the expected traceback
    try:
        _write_pages(conn, 1, keeper)
        deadline = time.monotonic() + 5
        while (not runs or _threads(db)) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert runs and not _threads(db), "the thread did not end"
        _write_pages(conn, 1, keeper)
        while len(runs) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(runs) == 2 and len(_threads(db)) == 1
    finally:
        keeper.stop()
        conn.close()
    assert not _threads(db)
