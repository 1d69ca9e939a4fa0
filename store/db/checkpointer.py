"""Checkpointing a SQLite database's WAL on a thread of its own, off the writers' path.

In WAL mode a commit appends pages to the ``-wal`` file; a *checkpoint* copies them back into
the database file (random writes, then an fsync of the database) so that the WAL can start
over. By default SQLite runs one in the writer itself, after the commit that brings the WAL
past 1,000 pages: every such writer pays for the copying of the pages the others wrote. For a
transaction that touches many pages in random places (an index keyed by a correlation value)
that is a large share of its time: the inbox benchmark's batches of 100 events spent a third
of their COMMIT there. SQLite's documentation suggests the alternative this module is: turn
the writers' automatic checkpoint down to a backstop and checkpoint on another thread, which
a second core runs while the writers go on.

:class:`Checkpointer`, one per store handle (its writers hold :meth:`Checkpointer.writing`
around each write transaction), started by the handle's first write:

* after writes, at most every :data:`PACE_S`, a ``PASSIVE`` checkpoint: it copies what it can
  without waiting for anybody, while the writers go on appending;
* the WAL starts over (the next write transaction writes from its beginning) only when every
  one of its pages has been copied and no reader still uses it. Under a steady stream of
  writes the passive checkpoints never quite reach the WAL's end, so once the WAL holds
  :data:`CATCH_UP_FRAMES` pages and the last passive checkpoint was held back by nobody (it
  copied every page there was when it began: no reader pins an older snapshot), the thread
  *catches up*: it takes the handle's writers' lock and runs one more passive checkpoint,
  which copies the few pages written since. Writers wait for that copying only; never for a
  reader — a ``RESTART`` checkpoint, which waits for the readers while it holds SQLite's write
  lock, stalled every writer behind a reader that would not finish;
* the writers keep an automatic (passive) checkpoint at :data:`BACKSTOP_FRAMES` pages, for
  writers of other handles or processes, which this thread does not see, and the WAL file is
  truncated to :data:`WAL_LIMIT_BYTES` whenever it starts over.

What no checkpoint can bound: a reader that keeps one snapshot open pins every page written
after it in the WAL, which grows until that reader ends (SQLite's rule: the reader must go on
seeing its snapshot). The store's reads are short transactions; a ``sqlite3`` shell left in
``BEGIN`` is such a reader.

Durability does not change: a commit is durable when its WAL pages are fsynced, before the
writer returns, whoever checkpoints later. A checkpoint interrupted by a crash is repeated
from the WAL at the next open. The thread is a daemon, started by the first write of the handle
and stopped by :meth:`Checkpointer.stop` when the handle closes (or, for a handle dropped
without closing, when it is collected); a handle that only reads never starts one.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import urllib.parse
import weakref

PACE_S = 0.02
"""At most one passive checkpoint per this many seconds."""
CATCH_UP_FRAMES = 4096
"""A WAL this many pages long is caught up with under the writers' lock, so that it starts
over: 16 MiB of 4 KiB pages, one segment of SQLite's WAL index."""
BACKSTOP_FRAMES = 16384
"""The writers' own automatic checkpoint, should this thread fall behind."""
WAL_LIMIT_BYTES = 64 * 1024 * 1024
"""The WAL file is truncated to this size when it starts over (``journal_size_limit``)."""
WAIT_MS = 50
"""The thread's busy timeout: how long its checkpoint waits for the WAL index lock of a
connection that is opening or recovering the database."""
STOP_WAIT_S = 5.0
"""How long :meth:`Checkpointer.stop` waits for a checkpoint in progress to end."""

THREAD_NAME = "tlog-wal-checkpointer"

WRITER_PRAGMAS = (
    f"PRAGMA wal_autocheckpoint = {BACKSTOP_FRAMES}",
    f"PRAGMA journal_size_limit = {WAL_LIMIT_BYTES}",
)
"""Run on every connection of a database whose WAL a :class:`Checkpointer` keeps."""


class Checkpointer:
    """Checkpoints the WAL of the database file ``path`` on a daemon thread (see the module
    docstring), after each write transaction run inside :meth:`writing`.

    Requires: ``path`` is in WAL mode (the engine's connections put it there).
    """

    def __init__(self, path: str) -> None:
        self._uri = f"file:{urllib.parse.quote(os.path.abspath(path))}?mode=rw"
        self.thread_name = f"{THREAD_NAME} {os.path.abspath(path)}"
        """The thread's name: :data:`THREAD_NAME` and the database's path (what a thread
        listing, py-spy or a test shows)."""
        self._writers = threading.Lock()
        self._writing = _Writing(self)
        self._due = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self.catch_ups = 0
        """Catch-ups that copied the whole WAL, so that it could start over (for tests)."""
        self.writers_held = 0
        """Times the thread took the writers' lock (for tests: never behind a reader)."""
        _LIVE.add(self)

    def writing(self) -> contextlib.AbstractContextManager[None]:
        """Held around one write transaction of the handle's: excludes a catch-up, and
        schedules a checkpoint when the transaction ends."""
        return self._writing

    def _written(self) -> None:
        # No thread: none started yet, the last one ended, or this is a forked child (whose
        # _thread _after_fork_in_child forgot). Checked on every write, so no syscall here.
        if self._thread is None:
            if self._stopping.is_set():
                return
            # The thread holds the checkpointer, never the handle: a handle dropped without
            # close() is still collected, and its finaliser stops the thread.
            thread = self._thread = threading.Thread(
                target=self._run, name=self.thread_name, daemon=True
            )
            thread.start()
        if not self._due.is_set():  # set() takes a lock and notifies: skip it when it's set
            self._due.set()

    def stop(self, wait: bool = True) -> None:
        """Stop the thread; later writes start none. With ``wait``, a checkpoint in progress
        ends first, for up to :data:`STOP_WAIT_S` (a finaliser, which may run on any thread,
        passes False)."""
        self._stopping.set()
        self._due.set()
        thread = self._thread
        if (
            wait
            and thread is not None
            and thread is not threading.current_thread()
            and thread.is_alive()
        ):
            thread.join(STOP_WAIT_S)

    def _run(self) -> None:
        conn: sqlite3.Connection | None = None
        try:
            while True:
                self._due.wait()
                if self._stopping.is_set():
                    return
                self._due.clear()
                try:
                    if conn is None:
                        conn = sqlite3.connect(self._uri, uri=True, isolation_level=None)
                        conn.execute(f"PRAGMA busy_timeout = {WAIT_MS}")
                    self._checkpoint(conn)
                except sqlite3.Error:
                    # The database is failing: the writers see that on their own commits;
                    # this thread tries again, on a new connection, after their next write.
                    if conn is not None:
                        conn.close()
                    conn = None
                if self._stopping.wait(PACE_S):
                    return
        finally:
            if conn is not None:
                with contextlib.suppress(sqlite3.Error):
                    conn.close()
            if self._thread is threading.current_thread():
                self._thread = None  # ended by an error: the next write starts another

    def _checkpoint(self, conn: sqlite3.Connection) -> None:
        frames, copied = _passive(conn)
        if frames < CATCH_UP_FRAMES or copied < frames:
            # Short enough; or a reader pins an older snapshot, and catching up would only
            # make the writers wait for a copy that cannot reach the end.
            return
        with self._writers:
            self.writers_held += 1
            frames, copied = _passive(conn)
            # Counted before the writers go on: the next write starts the WAL over, and a
            # test that saw the count can rely on that (counted after, on a busy machine a
            # writer could run hundreds of commits into the new WAL before it changed).
            if copied == frames:
                self.catch_ups += 1


_LIVE: weakref.WeakSet[Checkpointer] = weakref.WeakSet()
"""Every checkpointer of the process, for :func:`_after_fork_in_child`."""


def _after_fork_in_child() -> None:
    # A fork copies the locks as they are: taken by the parent's checkpointer thread in the
    # middle of a catch-up, the writers' lock would stay taken in the child, whose first write
    # would wait forever. The child has no checkpointer thread: fresh locks (its first write
    # starts a thread of its own).
    for keeper in list(_LIVE):
        keeper._thread = None  # the parent's: not in this process
        stopping = threading.Event()
        if keeper._stopping.is_set():
            stopping.set()
        keeper._writers = threading.Lock()
        keeper._due = threading.Event()
        keeper._stopping = stopping


os.register_at_fork(after_in_child=_after_fork_in_child)


class _Writing:
    """:meth:`Checkpointer.writing`: a plain context manager, not a generator's, because it
    wraps every write transaction (a generator-based one cost about 10 µs of a one-event
    buffer's 110 µs of CPU)."""

    __slots__ = ("_keeper",)

    def __init__(self, keeper: Checkpointer) -> None:
        self._keeper = keeper

    def __enter__(self) -> None:
        self._keeper._writers.acquire()

    def __exit__(self, *exc: object) -> None:
        keeper = self._keeper
        keeper._writers.release()
        keeper._written()


def _passive(conn: sqlite3.Connection) -> tuple[int, int]:
    """One PASSIVE checkpoint: (pages in the WAL when it began, pages copied so far); both -1
    when the checkpoint could not run at all."""
    row = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    if row is None or row[0] != 0:
        return -1, -1
    return int(row[1]), int(row[2])


__all__ = [
    "BACKSTOP_FRAMES",
    "CATCH_UP_FRAMES",
    "PACE_S",
    "THREAD_NAME",
    "WAIT_MS",
    "WAL_LIMIT_BYTES",
    "WRITER_PRAGMAS",
    "Checkpointer",
]
