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

:class:`Checkpointer`, per database file and process, started by the first write:

* after writes, at most every :data:`PACE_S`, a ``PASSIVE`` checkpoint: it copies what it can
  without waiting for anybody (a writer may append meanwhile);
* when the WAL has reached :data:`RESTART_FRAMES` pages, a ``RESTART`` checkpoint: it waits
  (at most :data:`WAIT_MS`, so a long reader never stalls the writers for long) for the
  current writer to finish and copies the rest, which the passive ones have left small, so
  that the next writer starts the WAL from its beginning. Under a steady stream of writes a
  passive checkpoint never catches up with the WAL's end, and the WAL would only grow;
* the writers keep an automatic checkpoint at :data:`BACKSTOP_FRAMES` pages, and the WAL is
  truncated to :data:`WAL_LIMIT_BYTES` when it starts over, so that the file stays bounded
  should the thread ever fall behind.

Durability does not change: a commit is durable when its WAL pages are fsynced, before the
writer returns, whoever checkpoints later. A checkpoint interrupted by a crash is repeated
from the WAL at the next open. The thread is a daemon, started by the first write of the handle
and stopped by :meth:`Checkpointer.stop` when the handle closes: a handle that only reads
never starts one.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import urllib.parse

PACE_S = 0.02
"""At most one passive checkpoint per this many seconds."""
RESTART_FRAMES = 4096
"""A WAL this many pages long is started over (a RESTART checkpoint): 16 MiB of 4 KiB pages,
one segment of SQLite's WAL index."""
BACKSTOP_FRAMES = 16384
"""The writers' own automatic checkpoint, should this thread fall behind."""
WAL_LIMIT_BYTES = 64 * 1024 * 1024
"""The WAL file is truncated to this size when it starts over (``journal_size_limit``)."""
WAIT_MS = 50
"""How long a RESTART checkpoint waits for the current writer or for old readers."""
STOP_WAIT_S = 5.0
"""How long :meth:`Checkpointer.stop` waits for a checkpoint in progress."""

WRITER_PRAGMAS = (
    f"PRAGMA wal_autocheckpoint = {BACKSTOP_FRAMES}",
    f"PRAGMA journal_size_limit = {WAL_LIMIT_BYTES}",
)
"""Run on every connection of a database whose WAL a :class:`Checkpointer` keeps."""


class Checkpointer:
    """Checkpoints the WAL of the database file ``path`` on a daemon thread (see the module
    docstring), after each :meth:`written`.

    Requires: ``path`` is in WAL mode (the engine's connections put it there).
    """

    def __init__(self, path: str) -> None:
        self._uri = f"file:{urllib.parse.quote(os.path.abspath(path))}?mode=rw"
        self._due = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._pid = 0
        self.restarts = 0
        """RESTART checkpoints run so far (for tests and the curious)."""

    def written(self) -> None:
        """A write transaction ended: checkpoint soon (the thread is started if needed)."""
        thread = self._thread
        if thread is None or self._pid != os.getpid() or not thread.is_alive():
            if self._stopping.is_set():
                return
            self._pid = os.getpid()
            thread = self._thread = threading.Thread(
                target=self._run, name="tlog-wal-checkpointer", daemon=True
            )
            thread.start()
        self._due.set()

    def stop(self) -> None:
        """Stop the thread (a checkpoint in progress ends first, for up to
        :data:`STOP_WAIT_S`); later :meth:`written` calls do nothing."""
        self._stopping.set()
        self._due.set()
        thread = self._thread
        if thread is not None and self._pid == os.getpid() and thread.is_alive():
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
                    # Busy, or the database is failing: the writers see that on their own
                    # commits; this thread tries again after their next write.
                    if conn is not None:
                        conn.close()
                    conn = None
                if self._stopping.wait(PACE_S):
                    return
        finally:
            if conn is not None:
                with contextlib.suppress(sqlite3.Error):
                    conn.close()

    def _checkpoint(self, conn: sqlite3.Connection) -> None:
        row = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        frames = int(row[1]) if row is not None else 0
        if frames >= RESTART_FRAMES:
            row = conn.execute("PRAGMA wal_checkpoint(RESTART)").fetchone()
            if row is not None and row[0] == 0:  # 1: busy (the writer or a reader held on)
                self.restarts += 1


__all__ = [
    "BACKSTOP_FRAMES",
    "PACE_S",
    "RESTART_FRAMES",
    "WAIT_MS",
    "WAL_LIMIT_BYTES",
    "WRITER_PRAGMAS",
    "Checkpointer",
]
