"""The engine on SQLite: one database file, the embedded default (one writer at a time).

Connection: Python's :mod:`sqlite3` with ``isolation_level=None`` (the engine issues BEGIN
and COMMIT itself) and ``check_same_thread=False`` (one connection per handle, used by one
thread at a time under the session's lock). Session settings, applied on every connection:

* ``PRAGMA journal_mode = WAL`` — readers never block the writer and see one snapshot per
  transaction. The mode is persistent; switching a new file to WAL needs an exclusive lock,
  and is retried while a concurrent opener holds the file's lock (SQLite answers that at
  once, without its busy handler);
* ``PRAGMA synchronous = FULL`` — in WAL mode every COMMIT fsyncs the WAL, so a write is
  durable when the call returns (survives a crash or power loss);
* ``PRAGMA busy_timeout`` (:data:`BUSY_TIMEOUT_MS`) — another connection's write transaction
  is waited for, not failed on (several processes may share one file);
* ``PRAGMA foreign_keys = ON`` — SQLite enforces a schema's references only when asked.

Transactions: ``BEGIN IMMEDIATE`` for every write. It takes the database's write lock up
front, so a write transaction's reads and writes form one act, across connections and
processes, and SQLite never has to upgrade a read lock (which can fail with SQLITE_BUSY).
Reads use a deferred ``BEGIN``: one WAL snapshot for every query of the operation. Row locks
are not needed (``lock_suffix`` is empty): one writer at a time is SQLite's rule.

The writer queue (:attr:`SQLiteDialect.writer_queue`, off unless a schema turns it on): before
BEGIN, a writer takes an exclusive ``flock`` on the file ``<db>-writer.lock`` (created beside
the database, like SQLite's ``-wal`` and ``-shm``, when the first write needs it). Writers of
this code then queue in the kernel and each is woken the moment the previous one commits,
where SQLite's busy handler would poll with sleeps of 1, 2, 5, 10… ms — the tail latency of
several processes writing one file all the time (the witness's server processes). A writer
that does not take it (the ``sqlite3`` shell) is still excluded by SQLite's own lock and
waited for with ``busy_timeout``. The journal store does not turn it on: its SQLite backend is
the embedded one, written by one process (several writers use PostgreSQL), where nothing
waits in the busy handler for long — and a ``-writer.lock`` file beside every journal would
be a change to what a deployment sees on disk without a measured gain.

Unique violations are identified by the table and columns SQLite names in its message
("UNIQUE constraint failed: effect_once.tenant, effect_once.run, effect_once.effect_key"),
matched against the schema's constraint table. A COMMIT that fails with an I/O error
(``SQLITE_IOERR*``) has no verdict (the WAL may or may not hold the commit); any other
failure is a clean rollback.

Checkpoints (:attr:`SQLiteDialect.background_checkpoints`, off unless a schema turns it on):
SQLite checkpoints the WAL in the writer whose commit brought it past 1,000 pages; with the
option, a thread of the handle's does (:mod:`store.db.checkpointer`), and the writers keep a
backstop. The journal store turns it on.

The database file must exist to be opened when ``create`` is false (URI ``mode=rw``): a
missing file is never silently created.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sqlite3
import time
import urllib.parse
import weakref
from collections.abc import Iterator, Sequence
from typing import Any, ClassVar

from store.db.checkpointer import WRITER_PRAGMAS, Checkpointer
from store.db.engine import Dialect
from tlog.errors import UsageError

BUSY_TIMEOUT_MS = 30_000
"""How long a write waits for another connection's write transaction, in milliseconds."""

_UNIQUE_PREFIX = "UNIQUE constraint failed: "


def _errorname(exc: Exception) -> str:
    name = getattr(exc, "sqlite_errorname", "")
    return name if isinstance(name, str) else ""


class SQLiteDialect(Dialect):
    """SQLite through :mod:`sqlite3` (see the module docstring), on the file ``path``
    (created when missing if ``create``).

    A schema subclasses it to set the class attributes it wants.
    """

    name: ClassVar[str] = "sqlite"
    shared: ClassVar[bool] = False
    begin_write: ClassVar[str] = "BEGIN IMMEDIATE"
    begin_read: ClassVar[str] = "BEGIN"
    lock_suffix: ClassVar[str] = ""

    def indexed_by(self, index: str) -> str:
        # Without statistics SQLite took the primary key (tenant, position) for a query on a
        # partial index (held, dead letters): it saves the sort, and walks every event.
        return f" INDEXED BY {index}"

    clock_sql: ClassVar[str | None] = None
    types: ClassVar[dict[str, str]] = {
        "blob": "BLOB",
        "key": "TEXT",  # BINARY collation: bytewise, like Python's str order
        "bool": "INTEGER",
        "serial": "INTEGER PRIMARY KEY AUTOINCREMENT",  # never reuses an ID
        "compact": " WITHOUT ROWID",
    }
    driver_errors: ClassVar[tuple[type[Exception], ...]] = (sqlite3.Error,)

    writer_queue: ClassVar[bool] = False
    """Take the ``flock`` writer queue around every write (see the module docstring)."""
    file_mode: ClassVar[int | None] = None
    """With ``create``: make a missing file with this mode first, whatever the umask (SQLite
    gives the -wal and -shm files the database file's mode). None: SQLite creates it."""
    unwritable_is_usage: ClassVar[bool] = False
    """A file or directory that cannot be written (WAL needs -wal and -shm files beside the
    database) is a UsageError naming the path, not a BackendError."""
    background_checkpoints: ClassVar[bool] = False
    """Checkpoint the WAL on a thread of the handle's, not in the committing writer
    (:mod:`store.db.checkpointer`)."""

    def __init__(self, path: str, *, create: bool) -> None:
        self.path = path
        self.create = create
        self._lock_fd: int | None = None
        self._lock_pid = 0
        self._checkpointer = Checkpointer(path) if self.background_checkpoints else None
        if self._checkpointer is not None:
            # A handle dropped without close() must not leave its thread (and the thread's
            # connection) behind: the thread never refers to the dialect, so this runs.
            weakref.finalize(self, self._checkpointer.stop, False)

    @contextlib.contextmanager
    def _queue(self) -> Iterator[object]:
        # One descriptor per handle and process: flock excludes open file descriptions, and a
        # descriptor inherited across fork() would be shared with the child.
        if self._lock_fd is None or self._lock_pid != os.getpid():
            lock_path = f"{self.path}-writer.lock"
            try:
                self._lock_fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
            except OSError as e:
                raise UsageError(
                    f"{lock_path}: {e.strerror or e} (the writers' lock file of {self.path}:"
                    " the database's directory must exist and be writable)"
                ) from None
            self._lock_pid = os.getpid()
        fd = self._lock_fd
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            yield None
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)

    def write_lock(self) -> contextlib.AbstractContextManager[object]:
        if self._checkpointer is not None:
            if self.writer_queue:
                return self._checkpointing(self._checkpointer)
            return self._checkpointer.writing()
        return self._queue() if self.writer_queue else contextlib.nullcontext()

    @contextlib.contextmanager
    def _checkpointing(self, checkpointer: Checkpointer) -> Iterator[object]:
        with self._queue(), checkpointer.writing():
            yield None

    def close(self) -> None:
        if self._checkpointer is not None:
            self._checkpointer.stop()
        fd, self._lock_fd = self._lock_fd, None
        if fd is not None and self._lock_pid == os.getpid():
            os.close(fd)

    def connect(self) -> Any:
        if self.create and self.file_mode is not None:
            with contextlib.suppress(FileExistsError):
                os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, self.file_mode))
        quoted = urllib.parse.quote(os.path.abspath(self.path))
        conn = sqlite3.connect(
            f"file:{quoted}?mode={'rwc' if self.create else 'rw'}",
            uri=True,
            isolation_level=None,
            check_same_thread=False,
            timeout=BUSY_TIMEOUT_MS / 1000,
        )
        try:
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            mode = self._wal(conn)
            if str(mode).lower() != "wal":
                raise sqlite3.OperationalError(f"journal mode is {mode}, WAL is needed")
            conn.execute("PRAGMA synchronous = FULL")
            conn.execute("PRAGMA foreign_keys = ON")
            if self._checkpointer is not None:
                for pragma in WRITER_PRAGMAS:
                    conn.execute(pragma)
        except BaseException:
            conn.close()
            raise
        return conn

    def _wal(self, conn: sqlite3.Connection) -> object:
        # Wait for a concurrent opener's lock as busy_timeout would (module docstring).
        deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
        delay = 0.005
        while True:
            try:
                (mode,) = conn.execute("PRAGMA journal_mode = WAL").fetchone()
                return mode
            except sqlite3.OperationalError as e:
                name = _errorname(e)
                if self.unwritable_is_usage and name.startswith(
                    ("SQLITE_READONLY", "SQLITE_CANTOPEN", "SQLITE_PERM")
                ):
                    raise UsageError(
                        f"{self.path}: cannot open the database for writing ({e}): the file and"
                        " its directory must be writable (SQLite keeps -wal and -shm files there)"
                    ) from None
                if not name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")):
                    raise
                if time.monotonic() >= deadline:
                    raise
            time.sleep(delay)
            delay = min(delay * 2, 0.1)

    def any_of(self, column: str, values: Sequence[int]) -> tuple[str, tuple[Any, ...]]:
        return f"{column} IN ({', '.join('?' * len(values))})", tuple(values)

    def unique_constraint(
        self, exc: Exception, constraints: dict[str, tuple[str, tuple[str, ...]]]
    ) -> str | None:
        if not isinstance(exc, sqlite3.IntegrityError):
            return None
        msg = str(exc)
        if not msg.startswith(_UNIQUE_PREFIX):
            return None
        columns = tuple(c.strip() for c in msg[len(_UNIQUE_PREFIX) :].split(","))
        for name, (table, cols) in constraints.items():
            if tuple(f"{table}.{c}" for c in cols) == columns:
                return name
        return None

    def foreign_key(self, exc: Exception) -> bool:
        return _errorname(exc) == "SQLITE_CONSTRAINT_FOREIGNKEY"

    def table_exists_sql(self, table: str) -> str:
        return f"SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = '{table}'"  # noqa: S608 - a fixed identifier

    def commit_unknown(self, exc: Exception, conn: Any) -> bool:
        return _errorname(exc).startswith("SQLITE_IOERR")


__all__ = ["BUSY_TIMEOUT_MS", "SQLiteDialect"]
