"""The witness state in one SQLite file: the embedded default (see :mod:`witness.sqlstate`).

Connection: :mod:`sqlite3` with ``isolation_level=None`` (BEGIN and COMMIT are issued by
:class:`witness.sqlstate.Session`) and ``check_same_thread=False`` (one connection per handle,
used by one thread at a time under the handle's lock). Session settings, on every connection:

* ``PRAGMA journal_mode = WAL`` — readers never block the writer; switching a new file to WAL
  is retried while a concurrent opener holds the file's lock (SQLite answers that at once,
  without its busy handler);
* ``PRAGMA synchronous = FULL`` — every COMMIT fsyncs the WAL: a compare-and-swap that
  returned True survives a crash or power loss;
* ``PRAGMA busy_timeout`` (:data:`BUSY_TIMEOUT_MS`) — another connection's write is waited
  for, not failed on (several server processes may share one file);
* ``PRAGMA foreign_keys = ON`` — SQLite enforces the schema's references only when asked.

Writes start with ``BEGIN IMMEDIATE``: the database's write lock up front, so every write is
one act across connections and processes and a read lock never has to be upgraded (which can
fail with SQLITE_BUSY). Before it, a writer takes an exclusive ``flock`` on the file
``<db>-writer.lock`` (created beside the database, like SQLite's ``-wal`` and ``-shm``): writers
of this code then queue in the kernel and each is woken the moment the previous one commits,
where SQLite's busy handler would poll with sleeps of 1, 2, 5, 10… ms (the tail latency of two
server processes sharing one file). A writer that does not take it (the ``sqlite3`` shell) is
still excluded by SQLite's own lock and waited for with ``busy_timeout``. Reads use a
deferred ``BEGIN``: one WAL snapshot. A COMMIT failing with an I/O error (``SQLITE_IOERR*``)
raises :class:`~witness.sqlstate.CommitUnknownError`.

``create=True`` creates the file (and the schema) when missing; ``create=False`` requires both.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sqlite3
import time
import urllib.parse
from collections.abc import Iterator
from typing import Any, ClassVar

from tlog.errors import UsageError
from witness.sqlstate import Dialect, SQLState

BUSY_TIMEOUT_MS = 30_000
"""How long a write waits for another connection's write transaction, in milliseconds."""


def _errorname(exc: Exception) -> str:
    name = getattr(exc, "sqlite_errorname", "")
    return name if isinstance(name, str) else ""


class SQLiteDialect(Dialect):
    """SQLite through :mod:`sqlite3` (see the module docstring)."""

    name: ClassVar[str] = "sqlite"
    begin_write: ClassVar[str] = "BEGIN IMMEDIATE"
    begin_read: ClassVar[str] = "BEGIN"
    lock_suffix: ClassVar[str] = ""
    types: ClassVar[dict[str, str]] = {
        "key": "TEXT",  # BINARY collation: bytewise, like Python's str order
        "blob": "BLOB",
        "bool": "INTEGER",
        "serial": "INTEGER PRIMARY KEY AUTOINCREMENT",  # never reuses an ID
    }
    schema_exists_sql: ClassVar[str] = (
        "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'witness_meta'"
    )
    driver_errors: ClassVar[tuple[type[Exception], ...]] = (sqlite3.Error,)

    def __init__(self, path: str, *, create: bool) -> None:
        self.path = path
        self.create = create
        self._lock_fd: int | None = None
        self._lock_pid = 0

    @contextlib.contextmanager
    def write_lock(self) -> Iterator[object]:
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

    def close(self) -> None:
        fd, self._lock_fd = self._lock_fd, None
        if fd is not None and self._lock_pid == os.getpid():
            os.close(fd)

    def connect(self) -> Any:
        if self.create:
            # The state is the witness's to read: 0600 whatever the umask. SQLite gives the
            # -wal and -shm files the database file's mode, so creating it first is enough.
            with contextlib.suppress(FileExistsError):
                os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
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
            try:
                mode = self._wal(conn)
            except sqlite3.OperationalError as e:
                if _errorname(e).startswith(("SQLITE_READONLY", "SQLITE_CANTOPEN", "SQLITE_PERM")):
                    # WAL needs the -wal and -shm files beside the database.
                    raise UsageError(
                        f"{self.path}: cannot open the database for writing ({e}): the file and"
                        " its directory must be writable (SQLite keeps -wal and -shm files there)"
                    ) from None
                raise
            if str(mode).lower() != "wal":
                raise sqlite3.OperationalError(f"journal mode is {mode}, WAL is needed")
            conn.execute("PRAGMA synchronous = FULL")
            conn.execute("PRAGMA foreign_keys = ON")
        except BaseException:
            conn.close()
            raise
        return conn

    @staticmethod
    def _wal(conn: sqlite3.Connection) -> object:
        deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
        delay = 0.005
        while True:
            try:
                (mode,) = conn.execute("PRAGMA journal_mode = WAL").fetchone()
                return mode
            except sqlite3.OperationalError as e:
                busy = _errorname(e).startswith(("SQLITE_BUSY", "SQLITE_LOCKED"))
                if not busy or time.monotonic() >= deadline:
                    raise
            time.sleep(delay)
            delay = min(delay * 2, 0.1)

    def foreign_key(self, exc: Exception) -> bool:
        return _errorname(exc) == "SQLITE_CONSTRAINT_FOREIGNKEY"

    def commit_unknown(self, exc: Exception, conn: Any) -> bool:
        return _errorname(exc).startswith("SQLITE_IOERR")


class SQLiteState(SQLState):
    """The witness state in the SQLite file ``db`` (see :mod:`witness.sqlstate`).

    Requires: ``db`` a file path (not ``:memory:``: a witness's state must survive it); with
    ``create=False`` the file must hold a witness state (UsageError otherwise).
    """

    def __init__(self, db: str, *, create: bool = True) -> None:
        if not isinstance(db, str) or not db or db == ":memory:":
            raise UsageError("the SQLite database is a file path")
        if not create and not os.path.exists(db):
            raise UsageError(f"{db}: no witness state here (create it first)")
        super().__init__(SQLiteDialect(db, create=create), create=create, where=db)
