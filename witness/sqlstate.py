"""The witness state on SQL: one implementation of :class:`witness.state.WitnessState` for
every engine, over a small :class:`Dialect` (:mod:`witness.sqlite_state`,
:mod:`witness.pg_state`).

This is a compact sibling of the journal store's SQL core (:mod:`store.sql`), with the same
transaction discipline; the witness does not import the store.

=====================  =====================================================================
 dialect member         what it decides
=====================  =====================================================================
 ``connect``            open a connection with its session settings (driver autocommit: this
                        module issues BEGIN/COMMIT itself)
 ``begin_write``        SQLite ``BEGIN IMMEDIATE`` (the write lock up front); PostgreSQL
                        ``READ COMMITTED`` (correctness from row locks and single statements)
 ``begin_read``         SQLite deferred ``BEGIN`` / PostgreSQL ``REPEATABLE READ READ ONLY``:
                        one snapshot for every query of a read
 ``lock_suffix``        appended to a SELECT to lock its rows until commit (PostgreSQL
                        ``FOR UPDATE``; nothing on SQLite, whose writers are serialised)
 ``types``              column types in the DDL
 ``sql``                placeholders: this module writes ``?``
 ``foreign_key``        the error is a foreign-key violation (an origin that is not configured)
 ``retryable``          the whole transaction may simply run again (nothing was written)
 ``commit_unknown``     a COMMIT failed without a verdict (the write may have landed)
 ``init_lock``          serialise concurrent schema creation (PostgreSQL advisory lock)
=====================  =====================================================================

Transactions. Every operation is one function run by :meth:`Session.transact` inside one
transaction: BEGIN, the function, COMMIT; any exception rolls back, so a failed operation
writes nothing. A retryable error, or a connection found broken before COMMIT was sent, runs
the function again (at most :data:`MAX_ATTEMPTS` times). A COMMIT of a write that fails without
a verdict raises :class:`CommitUnknownError`; any other driver error becomes
:class:`BackendError`. A handle has one connection, used by one thread at a time (a lock), and
reconnects when it finds it broken. None of these errors is a MalformedError: the witness
server maps them to 500, never to a client error.

Schema (created idempotently when a handle opens; safe from several processes at once)::

    witness_meta (singleton=1, schema_version)
    logs         (origin PK, qpd NULL or > 0, disabled)
    log_keys     (origin -> logs, vkey)                        PK (origin, vkey)
    latest       (origin PK -> logs, size, root, note, updated_at)
    evidence     (id PK, increasing, origin -> logs, reason, request, stored_note,
                  received_at)                                 index (origin, id)
    quota        (origin -> logs, day, count)                  PK (origin, day)

Origins and vkeys compare bytewise (SQLite BINARY, PostgreSQL ``COLLATE "C"``), so database
order is Python's ``str`` order. Every table but ``logs`` references ``logs``: a row for an
origin that is not configured cannot exist (UsageError "log X is not configured"). Nothing is
ever deleted: a log is disabled, never removed. Old ``quota`` rows (one per log and day) stay.

The compare-and-swap is ONE statement inside its transaction:

* expected None: ``INSERT INTO latest … ON CONFLICT (origin) DO NOTHING`` — True iff it
  inserted the row (two first checkpoints racing: the primary key picks one);
* otherwise: ``UPDATE latest SET … WHERE origin = ? AND size = ? AND root = ? AND updated_at
  <= ?`` (the new time) — True iff it changed the row. On PostgreSQL a racing UPDATE waits for
  the row lock and re-checks its WHERE clause against the committed row, so at most one of
  several swaps from one expected state to a larger size succeeds; on SQLite, BEGIN IMMEDIATE
  serialises them.

It is durable when it returns True: SQLite commits with WAL and ``synchronous=FULL`` (the
WAL is fsynced); PostgreSQL returned COMMIT.

Decisions where the contract leaves room:

* Origins are non-empty UTF-8 text of at most :data:`MAX_ORIGIN_BYTES` bytes without control
  characters (Unicode category Cc: U+0000-U+001F, U+007F-U+009F); vkeys parse with
  :func:`tlog.keys.parse_vkey`, are of type 0x01 (Ed25519) or 0x06 (ML-DSA-44) and at most
  :data:`MAX_VKEY_BYTES` bytes (the two limits keep a ``log_keys`` key within PostgreSQL's
  index-row limit). A writer given a bad origin or vkey raises MalformedError; a well-formed
  key of another type, or a value of the wrong Python type, raises UsageError. A *lookup*
  (``log``, ``latest``, ``evidence``) of an origin that breaks these rules finds nothing:
  such a log cannot be configured, so the server answers 404 as for any unknown log.
* ``add_log`` needs at least one key; repeated keys are kept once. ``LogConfig.keys`` is in
  bytewise order. ``add_key``/``set_disabled``/``set_qpd`` of an unknown origin: UsageError.
* ``compare_and_swap`` checks ``new`` before touching the database (UsageError, a caller
  bug): its note must be a signed note whose checkpoint text carries exactly ``new``'s origin,
  size and root; ``expected`` must name the same origin; ``new.size >= expected.size``, and at
  equal sizes the roots must be equal (anything else would fork the log). It does not look at
  ``disabled``: the server refuses a disabled log before it gets here. Re-storing the current
  (size, root) with a fresh note succeeds (a re-submitted checkpoint gets a new cosignature).
* ``evidence`` is ordered by ID, newest first: IDs increase in the order rows were inserted.
* ``count_request`` is one upsert-increment (``… ON CONFLICT DO UPDATE SET count = count + 1
  RETURNING count``): concurrent requests get distinct, dense counts.

Export format (``export_state``/``import_state``; UTF-8, every line ends in LF, no other
control characters)::

    tlog-witness-state v1                       exactly this header line
    log <origin>                                a log block; the origin is the rest of the line
    key <vkey>                                  one or more, in strictly increasing order
    qpd <decimal>                               optional: requests per day, 1..2^63-1
    disabled                                    optional: the log is disabled
    cosigned <updated_at> <base64 note>         optional: the latest cosigned note
    end <number of log blocks>                  last line, exactly once (catches truncation)

Log blocks come in strictly increasing origin order; decimals are canonical (no leading
zero); base64 is canonical and padded. The cosigned note's size and root are those of its
checkpoint text, whose origin must be the block's; the note must verify with at least one of
the block's keys (the witness's own cosignature lines are unknown to those keys, and ignored).
One state has exactly one spelling: parsing then formatting gives the same bytes.
"""

from __future__ import annotations

import abc
import contextlib
import re
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, TypeVar

from tlog.checkpoint import Checkpoint
from tlog.cosignature import TYPE_SUBTREE_V1
from tlog.encoding import MAX_INT63, b64decode, b64encode, parse_decimal
from tlog.errors import (
    MalformedError,
    ProofError,
    TlogError,
    UnverifiedNoteError,
    UsageError,
    VerificationError,
)
from tlog.keys import TYPE_NAMES, parse_vkey
from tlog.note import TYPE_ED25519, Verifier, open_note, parse_note
from witness.state import Cosigned, Evidence, LogConfig, WitnessState

T = TypeVar("T")

SCHEMA_VERSION = 2
"""Version of the schema, recorded in ``witness_meta``. A state of version 1 is upgraded when
opened (:data:`_UPGRADES`); a state of any other version is refused."""

MAX_ATTEMPTS = 5
"""How many times a transaction runs when it keeps failing with a retryable error."""

MAX_ORIGIN_BYTES = 512
"""Longest origin, in UTF-8 bytes."""

MAX_VKEY_BYTES = 2048
"""Longest log vkey, in UTF-8 bytes (an ML-DSA-44 vkey with a 255-byte name is 2017)."""

MAX_REASON_CHARS = 1024
"""Longest evidence reason, in characters."""

MAX_EVIDENCE_PER_LOG = 64
"""Evidence rows kept per log: beyond, a proven split view is logged, not kept."""

MAX_EVIDENCE_BYTES_PER_LOG = 32 << 20
"""Bytes of evidence (request and stored note) kept per log: beyond, not kept."""

LOG_KEY_TYPES = (TYPE_ED25519, TYPE_SUBTREE_V1)
"""Key types a log signs checkpoints with: Ed25519 (0x01) and ML-DSA-44 subtree/v1 (0x06)."""

STATE_HEADER = "tlog-witness-state v1"
"""First line of an exported state."""

_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")  # Unicode category Cc, exactly


# --- errors -------------------------------------------------------------------------------------


class StateError(TlogError):
    """Root of the state's storage errors (never a MalformedError: a server answers 500)."""


class BackendError(StateError):
    """The database failed; the transaction was rolled back, nothing was written."""


class CommitUnknownError(StateError):
    """COMMIT was sent but no verdict came back: the write may or may not have landed.

    After a compare-and-swap, re-read :meth:`~witness.state.WitnessState.latest` before
    doing anything else, and never release a cosignature on the strength of it.
    """


class CorruptStateError(StateError):
    """A stored value has the wrong shape (a database edited by hand, or a bug)."""


# --- checks of arguments ------------------------------------------------------------------------


def check_origin(origin: object) -> str:
    """Return ``origin`` if it is a usable origin (see the module docstring), else raise
    MalformedError (UsageError when it is not a str)."""
    if not isinstance(origin, str):
        raise UsageError(f"an origin is a str, not {type(origin).__name__}")
    if not origin:
        raise MalformedError("the origin is empty")
    try:
        size = len(origin.encode("utf-8"))
    except UnicodeEncodeError:
        raise MalformedError(f"origin {origin[:60]!r} is not valid Unicode text") from None
    if size > MAX_ORIGIN_BYTES:
        raise MalformedError(f"origin {origin[:60]!r}… is longer than {MAX_ORIGIN_BYTES} bytes")
    bad = _CONTROL.search(origin)
    if bad:
        raise MalformedError(
            f"origin {origin[:60]!r} contains the control character U+{ord(bad.group()):04X}"
        )
    return origin


def could_be_configured(origin: object) -> bool:
    """True when ``origin`` could be configured; UsageError when it is not even a str. The
    server asks before any lookup or cache, so that an origin no log can have costs nothing."""
    try:
        check_origin(origin)
    except MalformedError:
        return False
    return True


def check_log_vkey(vkey: object) -> Verifier:
    """Parse a log's vkey (type 0x01 or 0x06, at most :data:`MAX_VKEY_BYTES`); MalformedError
    when it does not parse, UsageError for another key type or a non-str."""
    if not isinstance(vkey, str):
        raise UsageError(f"a vkey is a str, not {type(vkey).__name__}")
    try:
        v = parse_vkey(vkey)
    except MalformedError as e:
        raise MalformedError(f"log key {vkey[:60]!r}: {e}") from None
    if len(vkey.encode("utf-8")) > MAX_VKEY_BYTES:
        raise MalformedError(f"log key {v.name}+{v.key_id:08x} is longer than {MAX_VKEY_BYTES}")
    if v.key_type not in LOG_KEY_TYPES:
        kind = TYPE_NAMES.get(v.key_type, "unknown")
        raise UsageError(
            f"key {v.name}+{v.key_id:08x} is a {kind} key (type 0x{v.key_type:02x}); a log"
            " signs with type 0x01 (Ed25519) or 0x06 (ML-DSA-44)"
        )
    return v


def _check_keys(keys: object) -> list[str]:
    if isinstance(keys, str) or not isinstance(keys, tuple | list):
        raise UsageError("a log's keys are a tuple of vkey strings")
    if not keys:
        raise UsageError("a log needs at least one key")
    for k in keys:
        check_log_vkey(k)
    return sorted(set(keys))


def _check_int(value: object, what: str, lo: int, hi: int = MAX_INT63) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
        raise UsageError(f"{what} must be an integer in [{lo}, {hi}], not {value!r}")
    return value


def _check_qpd(qpd: object) -> int | None:
    return None if qpd is None else _check_int(qpd, "qpd (requests per day)", 1)


def _check_cosigned(c: object, what: str) -> Cosigned:
    """Shape checks of a Cosigned argument (UsageError: a caller bug)."""
    if not isinstance(c, Cosigned):
        raise UsageError(f"{what} is a Cosigned, not {type(c).__name__}")
    try:
        check_origin(c.origin)
    except MalformedError as e:
        raise UsageError(f"{what}: {e}") from None
    _check_int(c.size, f"{what}.size", 0)
    if not isinstance(c.root, bytes) or len(c.root) != 32:
        raise UsageError(f"{what}.root must be 32 bytes")
    if not isinstance(c.note, bytes):
        raise UsageError(f"{what}.note must be bytes")
    _check_int(c.updated_at, f"{what}.updated_at", 0)
    return c


def _check_new_note(new: Cosigned) -> None:
    """``new.note`` is a signed note of exactly ``new``'s checkpoint (UsageError otherwise)."""
    try:
        text, _ = parse_note(new.note)
        cp = Checkpoint.parse(text)
    except (MalformedError, ProofError) as e:
        raise UsageError(
            f"log {new.origin}: the new note is not a signed checkpoint: {e}"
        ) from None
    if (cp.origin, cp.size, cp.root) != (new.origin, new.size, new.root):
        raise UsageError(
            f"log {new.origin}: the new note's checkpoint ({cp.origin}, size {cp.size}) is not"
            f" the new state's (size {new.size}, its root)"
        )


def _check_swap(expected: Cosigned | None, new: Cosigned) -> None:
    """The preconditions of a compare-and-swap (UsageError naming the one that fails)."""
    _check_cosigned(new, "new")
    if expected is not None:
        _check_cosigned(expected, "expected")
        if expected.origin != new.origin:
            raise UsageError(
                f"compare_and_swap of log {new.origin} with the expected state of {expected.origin}"
            )
        if new.size < expected.size:
            raise UsageError(
                f"log {new.origin}: compare_and_swap would move the state back from size"
                f" {expected.size} to {new.size}"
            )
        if new.size == expected.size and new.root != expected.root:
            raise UsageError(
                f"log {new.origin}: compare_and_swap would store another root for size {new.size}"
            )
    _check_new_note(new)


def _swap(tx: Tx, expected: Cosigned | None, new: Cosigned) -> bool:
    """The compare-and-swap statement: True iff it wrote the row."""
    values = (new.size, new.root, new.note, new.updated_at)
    if expected is None:
        try:
            n = tx.execute(
                "INSERT INTO latest (origin, size, root, note, updated_at)"
                " VALUES (?, ?, ?, ?, ?) ON CONFLICT (origin) DO NOTHING",
                (new.origin, *values),
            )
        except tx.dialect.driver_errors as e:
            if tx.dialect.foreign_key(e):
                raise _not_configured(new.origin) from None
            raise
    else:
        n = tx.execute(
            "UPDATE latest SET size = ?, root = ?, note = ?, updated_at = ?"
            " WHERE origin = ? AND size = ? AND root = ? AND updated_at <= ?",
            (*values, new.origin, expected.size, expected.root, new.updated_at),
        )
    return n == 1


# --- checks of stored values -------------------------------------------------------------------


def _stored_int(value: object, what: str, lo: int = 0) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= MAX_INT63:
        raise CorruptStateError(f"stored {what} {value!r} is not an integer >= {lo}")
    return value


def _stored_bytes(value: object, what: str, size: int | None = None) -> bytes:
    if isinstance(value, memoryview):
        value = bytes(value)
    if not isinstance(value, bytes) or (size is not None and len(value) != size):
        raise CorruptStateError(f"stored {what} is not {size or 'any number of'} bytes")
    return value


def _stored_text(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise CorruptStateError(f"stored {what} is not text")
    return value


def _stored_bool(value: object, what: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise CorruptStateError(f"stored {what} {value!r} is not a boolean")


# --- the dialect and the transaction runner ----------------------------------------------------


class Dialect(abc.ABC):
    """What differs between SQL engines (see the module docstring's table)."""

    name: ClassVar[str]
    begin_write: ClassVar[str]
    begin_read: ClassVar[str]
    lock_suffix: ClassVar[str]
    types: ClassVar[dict[str, str]]
    """DDL substitutions: ``key`` (text ordered bytewise), ``blob``, ``bool``, ``serial``
    (an increasing integer primary key column)."""
    schema_exists_sql: ClassVar[str]
    """A query whose single value is true when ``witness_meta`` exists."""
    driver_errors: ClassVar[tuple[type[Exception], ...]]

    @abc.abstractmethod
    def connect(self) -> Any:
        """Open a connection (driver-level autocommit; session settings applied)."""

    def sql(self, text: str) -> str:
        """Translate ``?`` placeholders to the driver's."""
        return text

    @abc.abstractmethod
    def foreign_key(self, exc: Exception) -> bool:
        """True when ``exc`` is a foreign-key violation."""

    def retryable(self, exc: Exception) -> bool:
        """True when the failed transaction may run again as a whole."""
        return False

    @abc.abstractmethod
    def commit_unknown(self, exc: Exception, conn: Any) -> bool:
        """True when a failed COMMIT gave no verdict."""

    def usable(self, conn: Any) -> bool:
        """False when the connection is closed or broken."""
        return True

    def committed(self, cursor: Any) -> bool:
        """After COMMIT returned: did it commit?"""
        return True

    def write_lock(self) -> contextlib.AbstractContextManager[object]:
        """Held around every write transaction, before BEGIN (default: nothing)."""
        return contextlib.nullcontext()

    def close(self) -> None:  # noqa: B027 - optional hook, empty by default
        """Release what the dialect holds beside the connection (default: nothing)."""

    def init_lock(self, tx: Tx) -> None:  # noqa: B027 - optional hook, empty by default
        """Serialise concurrent schema creators (inside the creating transaction)."""


class Tx:
    """A transaction in progress: statements with ``?`` placeholders, on one cursor."""

    __slots__ = ("_cur", "_d")

    def __init__(self, cursor: Any, dialect: Dialect) -> None:
        self._cur = cursor
        self._d = dialect

    @property
    def dialect(self) -> Dialect:
        return self._d

    def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Run one statement; return its row count."""
        self._cur.execute(self._d.sql(sql), tuple(params))
        return int(self._cur.rowcount)

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        self._cur.executemany(self._d.sql(sql), rows)

    def all(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Every row (fetching all also runs an ``INSERT … RETURNING`` to completion)."""
        self._cur.execute(self._d.sql(sql), tuple(params))
        return [tuple(r) for r in self._cur.fetchall()]

    def one(self, sql: str, params: Sequence[Any] = ()) -> tuple[Any, ...] | None:
        rows = self.all(sql, params)
        return rows[0] if rows else None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0]}" if text else type(exc).__name__


class Session:
    """One connection, used by one thread at a time, and the transaction runner."""

    def __init__(self, dialect: Dialect) -> None:
        self._d = dialect
        self._lock = threading.Lock()
        self._conn: Any = None
        self._closed = False

    def _connect(self) -> Any:
        d = self._d
        self._discard()
        try:
            self._conn = d.connect()
        except d.driver_errors as e:
            raise BackendError(f"{d.name}: cannot open the database: {_first_line(e)}") from e
        return self._conn

    def _discard(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(*self._d.driver_errors):
                conn.close()

    def _rollback(self, conn: Any) -> None:
        # No transaction left, or the connection is gone: nothing to undo.
        with contextlib.suppress(*self._d.driver_errors):
            conn.cursor().execute("ROLLBACK")

    def transact(self, write: bool, fn: Callable[[Tx], T]) -> T:
        """Run ``fn`` in one transaction and commit (see the module docstring)."""
        d = self._d
        with self._lock, d.write_lock() if write else contextlib.nullcontext():
            if self._closed:
                raise UsageError("the witness state is closed")
            attempt = 0
            while True:
                attempt += 1
                conn = self._conn
                if conn is None or not d.usable(conn):
                    conn = self._connect()
                try:
                    cur = conn.cursor()
                    cur.execute(d.begin_write if write else d.begin_read)
                    result = fn(Tx(cur, d))
                except d.driver_errors as e:
                    self._rollback(conn)
                    # COMMIT was never sent: nothing landed, the whole function may run again.
                    if attempt < MAX_ATTEMPTS and (d.retryable(e) or not d.usable(conn)):
                        time.sleep(0.001 * attempt)
                        continue
                    raise BackendError(f"{d.name}: {_first_line(e)}") from e
                except BaseException:
                    self._rollback(conn)
                    raise
                try:
                    cur.execute("COMMIT")
                except d.driver_errors as e:
                    if write and d.commit_unknown(e, conn):
                        self._rollback(conn)
                        raise CommitUnknownError(
                            f"{d.name}: COMMIT failed without a verdict ({_first_line(e)}); "
                            "the write may or may not have landed: re-read before going on"
                        ) from e
                    self._rollback(conn)
                    if attempt < MAX_ATTEMPTS and d.retryable(e):
                        time.sleep(0.001 * attempt)
                        continue
                    raise BackendError(f"{d.name}: COMMIT failed: {_first_line(e)}") from e
                if not d.committed(cur):
                    raise BackendError(f"{d.name}: the transaction was rolled back at COMMIT")
                return result

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._discard()
            self._d.close()


# --- the schema ---------------------------------------------------------------------------------

_DDL = (
    """CREATE TABLE IF NOT EXISTS witness_meta (
        singleton BIGINT NOT NULL PRIMARY KEY CHECK (singleton = 1),
        schema_version BIGINT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS logs (
        origin {key} NOT NULL PRIMARY KEY,
        qpd BIGINT CHECK (qpd IS NULL OR qpd > 0),
        disabled {bool} NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS log_keys (
        origin {key} NOT NULL REFERENCES logs (origin),
        vkey {key} NOT NULL,
        PRIMARY KEY (origin, vkey))""",
    """CREATE TABLE IF NOT EXISTS latest (
        origin {key} NOT NULL PRIMARY KEY REFERENCES logs (origin),
        size BIGINT NOT NULL CHECK (size >= 0),
        root {blob} NOT NULL,
        note {blob} NOT NULL,
        updated_at BIGINT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS evidence (
        id {serial},
        origin {key} NOT NULL REFERENCES logs (origin),
        reason TEXT NOT NULL,
        request {blob} NOT NULL,
        stored_note {blob},
        received_at BIGINT NOT NULL,
        proves {blob})""",
    "CREATE INDEX IF NOT EXISTS evidence_by_origin ON evidence (origin, id)",
    "CREATE UNIQUE INDEX IF NOT EXISTS evidence_proves ON evidence (origin, proves)",
    """CREATE TABLE IF NOT EXISTS quota (
        origin {key} NOT NULL REFERENCES logs (origin),
        day BIGINT NOT NULL,
        count BIGINT NOT NULL,
        PRIMARY KEY (origin, day))""",
)


_UPGRADES: dict[int, tuple[str, ...]] = {
    # 1 -> 2: evidence names what it proves, once per log (rows of version 1 keep NULL, which
    # a unique index never compares equal).
    1: (
        "ALTER TABLE evidence ADD COLUMN proves {blob}",
        "CREATE UNIQUE INDEX IF NOT EXISTS evidence_proves ON evidence (origin, proves)",
    ),
}
"""Statements that take a state from version N to N + 1, run in one write transaction."""


def schema(types: dict[str, str]) -> list[str]:
    """The DDL statements with a dialect's column types substituted."""
    return [stmt.format(**types) for stmt in _DDL]


def _not_configured(origin: str) -> UsageError:
    return UsageError(f"log {origin} is not configured")


# --- the state ----------------------------------------------------------------------------------


class SQLState(WitnessState):
    """The witness state in one SQL database through a :class:`Dialect`.

    With ``create`` (the default) the schema is created if missing (idempotent, safe from
    several processes at once); without it the schema must exist (UsageError otherwise).
    A state written by another schema version is refused (UsageError).
    """

    def __init__(self, dialect: Dialect, *, create: bool = True, where: str = "") -> None:
        self._d = dialect
        self._where = where or dialect.name
        self._session = Session(dialect)
        try:
            version = self._session.transact(
                create, self._initialise if create else self._check_schema
            )
            if version != SCHEMA_VERSION:
                self._session.transact(True, self._upgrade)
        except BaseException:
            self._session.close()
            raise

    def _initialise(self, tx: Tx) -> int:
        tx.dialect.init_lock(tx)
        for stmt in schema(tx.dialect.types):
            tx.execute(stmt)
        tx.execute(
            "INSERT INTO witness_meta (singleton, schema_version) VALUES (1, ?)"
            " ON CONFLICT (singleton) DO NOTHING",
            (SCHEMA_VERSION,),
        )
        return self._check_schema(tx)

    def _upgrade(self, tx: Tx) -> None:
        """Bring an older state to :data:`SCHEMA_VERSION`, in one write transaction (a
        concurrent upgrader waits for the write lock, then finds nothing to do)."""
        version = self._check_schema(tx)
        while version < SCHEMA_VERSION:
            for stmt in _UPGRADES[version]:
                tx.execute(stmt.format(**tx.dialect.types))
            version += 1
        tx.execute("UPDATE witness_meta SET schema_version = ? WHERE singleton = 1", (version,))

    def _check_schema(self, tx: Tx) -> int:
        """The state's schema version: this code's, or one it upgrades (UsageError else)."""
        row = tx.one(tx.dialect.schema_exists_sql)
        missing = f"{self._where}: no witness state here (create it first)"
        if row is None or not row[0]:
            raise UsageError(missing)
        meta = tx.one("SELECT schema_version FROM witness_meta WHERE singleton = 1")
        if meta is None:
            raise UsageError(missing)
        if meta[0] != SCHEMA_VERSION and meta[0] not in _UPGRADES:
            raise UsageError(
                f"{self._where}: the witness state's schema version is {meta[0]!r}, this code"
                f" reads {SCHEMA_VERSION}"
            )
        return int(meta[0])

    def _write(self, fn: Callable[[Tx], T]) -> T:
        return self._session.transact(True, fn)

    def _read(self, fn: Callable[[Tx], T]) -> T:
        return self._session.transact(False, fn)

    def close(self) -> None:
        self._session.close()

    # --- configuration -------------------------------------------------------------------------

    def add_log(self, origin: str, keys: tuple[str, ...], qpd: int | None = None) -> None:
        """Follow a new log. Requires: a valid origin, at least one log vkey, qpd None or
        positive. An origin already configured (enabled or disabled) is a UsageError."""
        check_origin(origin)
        vkeys = _check_keys(keys)
        qpd = _check_qpd(qpd)

        def work(tx: Tx) -> None:
            if not tx.execute(
                "INSERT INTO logs (origin, qpd, disabled) VALUES (?, ?, ?)"
                " ON CONFLICT (origin) DO NOTHING",
                (origin, qpd, False),
            ):
                raise UsageError(
                    f"log {origin} is already configured (disabled logs are never deleted)"
                )
            tx.executemany(
                "INSERT INTO log_keys (origin, vkey) VALUES (?, ?)", [(origin, k) for k in vkeys]
            )

        self._write(work)

    def add_key(self, origin: str, vkey: str) -> None:
        """Trust one more key for a configured log (UsageError if not configured). Idempotent."""
        check_origin(origin)
        check_log_vkey(vkey)

        def work(tx: Tx) -> None:
            try:
                tx.execute(
                    "INSERT INTO log_keys (origin, vkey) VALUES (?, ?)"
                    " ON CONFLICT (origin, vkey) DO NOTHING",
                    (origin, vkey),
                )
            except tx.dialect.driver_errors as e:
                if tx.dialect.foreign_key(e):
                    raise _not_configured(origin) from None
                raise

        self._write(work)

    def _update_log(self, origin: str, column: str, value: object) -> None:
        def work(tx: Tx) -> None:
            if not tx.execute(
                f"UPDATE logs SET {column} = ? WHERE origin = ?",  # noqa: S608 - fixed names
                (value, origin),
            ):
                raise _not_configured(origin)

        self._write(work)

    def set_disabled(self, origin: str, disabled: bool) -> None:
        """Disable or re-enable a configured log (UsageError if not configured)."""
        check_origin(origin)
        if not isinstance(disabled, bool):
            raise UsageError("disabled is a bool")
        self._update_log(origin, "disabled", disabled)

    def set_qpd(self, origin: str, qpd: int | None) -> None:
        """Set (positive) or clear (None) a configured log's quota."""
        check_origin(origin)
        self._update_log(origin, "qpd", _check_qpd(qpd))

    def log(self, origin: str) -> LogConfig | None:
        if not could_be_configured(origin):
            return None

        def work(tx: Tx) -> LogConfig | None:
            row = tx.one("SELECT qpd, disabled FROM logs WHERE origin = ?", (origin,))
            if row is None:
                return None
            keys = tx.all("SELECT vkey FROM log_keys WHERE origin = ? ORDER BY vkey", (origin,))
            return _log_config(origin, row[0], row[1], [k for (k,) in keys])

        return self._read(work)

    def logs(self) -> list[LogConfig]:
        return self._read(_all_logs)

    # --- checkpoints ----------------------------------------------------------------------

    def latest(self, origin: str) -> Cosigned | None:
        if not could_be_configured(origin):
            return None
        row = self._read(
            lambda tx: tx.one(
                "SELECT origin, size, root, note, updated_at FROM latest WHERE origin = ?",
                (origin,),
            )
        )
        return None if row is None else _cosigned(row)

    def all_latest(self) -> list[Cosigned]:
        rows = self._read(
            lambda tx: tx.all(
                "SELECT origin, size, root, note, updated_at FROM latest ORDER BY origin"
            )
        )
        return [_cosigned(r) for r in rows]

    def compare_and_swap(self, expected: Cosigned | None, new: Cosigned) -> bool:
        """See :meth:`WitnessState.compare_and_swap` and the module docstring. UsageError for a
        malformed ``new``, an origin mismatch, a move backwards, or (expected None) an origin
        that is not configured; CommitUnknownError when the COMMIT got no verdict."""
        _check_swap(expected, new)
        return self._write(lambda tx: _swap(tx, expected, new))

    def compare_and_swap_many(
        self, swaps: Sequence[tuple[Cosigned | None, Cosigned]]
    ) -> list[bool]:
        """Every swap in one transaction, one commit (one fsync on SQLite): group commit.

        Each pair is checked first as in :meth:`compare_and_swap`; one bad pair raises and
        nothing is written. The swaps run in order, so a later pair sees an earlier one's
        effect."""
        for expected, new in swaps:
            _check_swap(expected, new)
        if not swaps:
            return []
        return self._write(lambda tx: [_swap(tx, expected, new) for expected, new in swaps])

    # --- evidence -----------------------------------------------------------------------------

    def add_evidence(
        self,
        origin: str,
        reason: str,
        request: bytes,
        stored_note: bytes | None,
        at: int,
        *,
        proves: bytes | None = None,
    ) -> int | None:
        """Keep evidence for a configured log (UsageError otherwise); returns its ID, or None
        when it was not kept: a row of the log already ``proves`` the same (non-None) thing,
        or the log's evidence is at :data:`MAX_EVIDENCE_PER_LOG` rows or would pass
        :data:`MAX_EVIDENCE_BYTES_PER_LOG` bytes. The reason is 1-1024 characters without
        control characters; ``proves`` is 1-64 bytes."""
        check_origin(origin)
        if not isinstance(reason, str) or not 1 <= len(reason) <= MAX_REASON_CHARS:
            raise UsageError(f"an evidence reason is a str of 1-{MAX_REASON_CHARS} characters")
        if _CONTROL.search(reason):
            raise UsageError("the evidence reason contains a control character")
        if not isinstance(request, bytes):
            raise UsageError("the evidence request is bytes")
        if stored_note is not None and not isinstance(stored_note, bytes):
            raise UsageError("the stored note is bytes or None")
        _check_int(at, "the evidence time", 0)
        if proves is not None and (not isinstance(proves, bytes) or not 1 <= len(proves) <= 64):
            raise UsageError("what evidence proves is 1-64 bytes or None")
        size = len(request) + (0 if stored_note is None else len(stored_note))

        def work(tx: Tx) -> int | None:
            # The log's row, locked: evidence of one log is counted and added one writer at a
            # time (PostgreSQL; SQLite's writers are serialised anyway).
            locked = f"SELECT 1 FROM logs WHERE origin = ?{tx.dialect.lock_suffix}"  # noqa: S608
            if tx.one(locked, (origin,)) is None:
                raise _not_configured(origin)
            if proves is not None and tx.one(
                "SELECT 1 FROM evidence WHERE origin = ? AND proves = ?", (origin, proves)
            ):
                return None
            used = tx.one(
                "SELECT COUNT(*), COALESCE(SUM(LENGTH(request) + COALESCE(LENGTH(stored_note), 0)),"
                " 0) FROM evidence WHERE origin = ?",
                (origin,),
            )
            assert used is not None
            if (
                int(used[0]) >= MAX_EVIDENCE_PER_LOG
                or int(used[1]) + size > MAX_EVIDENCE_BYTES_PER_LOG
            ):
                return None
            row = tx.one(
                "INSERT INTO evidence (origin, reason, request, stored_note, received_at, proves)"
                " VALUES (?, ?, ?, ?, ?, ?) RETURNING id",
                (origin, reason, request, stored_note, at, proves),
            )
            assert row is not None
            return _stored_int(row[0], "evidence ID", 1)

        return self._write(work)

    def evidence(self, origin: str | None = None, limit: int = 100) -> list[Evidence]:
        """Kept evidence, newest (highest ID) first; ``limit`` >= 1."""
        _check_int(limit, "limit", 1)
        columns = "SELECT id, origin, reason, request, stored_note, received_at FROM evidence"
        params: tuple[Any, ...]
        if origin is None:
            sql, params = f"{columns} ORDER BY id DESC LIMIT ?", (limit,)
        elif not could_be_configured(origin):
            return []
        else:
            sql = f"{columns} WHERE origin = ? ORDER BY id DESC LIMIT ?"
            params = (origin, limit)
        rows = self._read(lambda tx: tx.all(sql, params))
        return [
            Evidence(
                _stored_int(r[0], "evidence ID", 1),
                _stored_text(r[1], "evidence origin"),
                _stored_text(r[2], "evidence reason"),
                _stored_bytes(r[3], "evidence request"),
                None if r[4] is None else _stored_bytes(r[4], "evidence stored note"),
                _stored_int(r[5], "evidence time"),
            )
            for r in rows
        ]

    # --- quota ---------------------------------------------------------------------------------

    def count_request(self, origin: str, day: int) -> int:
        """Count one request of a configured log (UsageError otherwise) on ``day`` >= 0."""
        check_origin(origin)
        _check_int(day, "day", 0)

        def work(tx: Tx) -> int:
            try:
                row = tx.one(
                    "INSERT INTO quota (origin, day, count) VALUES (?, ?, 1)"
                    " ON CONFLICT (origin, day) DO UPDATE SET count = quota.count + 1"
                    " RETURNING count",
                    (origin, day),
                )
            except tx.dialect.driver_errors as e:
                if tx.dialect.foreign_key(e):
                    raise _not_configured(origin) from None
                raise
            assert row is not None
            return _stored_int(row[0], "request count", 1)

        return self._write(work)

    # --- moving a witness ----------------------------------------------------------------------

    def export_state(self) -> bytes:
        def work(tx: Tx) -> bytes:
            configs = _all_logs(tx)
            latest = {
                c.origin: c
                for c in map(
                    _cosigned, tx.all("SELECT origin, size, root, note, updated_at FROM latest")
                )
            }
            return format_state([(cfg, latest.get(cfg.origin)) for cfg in configs])

        return self._read(work)

    def import_state(self, data: bytes) -> None:
        entries = parse_state(data)
        lock = self._d.lock_suffix

        def work(tx: Tx) -> None:
            refused: list[str] = []
            for cfg, cos in entries:
                o = cfg.origin
                if not tx.execute(
                    "INSERT INTO logs (origin, qpd, disabled) VALUES (?, ?, ?)"
                    " ON CONFLICT (origin) DO NOTHING",
                    (o, cfg.qpd, cfg.disabled),
                ):
                    tx.execute(
                        "UPDATE logs SET qpd = ?, disabled = (disabled OR ?) WHERE origin = ?",
                        (cfg.qpd, cfg.disabled, o),
                    )
                tx.executemany(
                    "INSERT INTO log_keys (origin, vkey) VALUES (?, ?)"
                    " ON CONFLICT (origin, vkey) DO NOTHING",
                    [(o, k) for k in cfg.keys],
                )
                if cos is None:
                    continue
                select = "SELECT size, root FROM latest WHERE origin = ?" + lock  # noqa: S608
                row = tx.one(select, (o,))
                if row is None:
                    if tx.execute(
                        "INSERT INTO latest (origin, size, root, note, updated_at)"
                        " VALUES (?, ?, ?, ?, ?) ON CONFLICT (origin) DO NOTHING",
                        (o, cos.size, cos.root, cos.note, cos.updated_at),
                    ):
                        continue
                    row = tx.one(select, (o,))  # a concurrent first checkpoint won
                    assert row is not None
                size = _stored_int(row[0], "size")
                root = _stored_bytes(row[1], "root", 32)
                if cos.size < size:
                    refused.append(
                        f"log {o}: the file's checkpoint (size {cos.size}) is older than the"
                        f" stored one (size {size})"
                    )
                elif cos.size == size:
                    if cos.root != root:
                        refused.append(
                            f"log {o}: the file's checkpoint of size {size} has another root"
                            " than the stored one"
                        )
                else:
                    tx.execute(
                        "UPDATE latest SET size = ?, root = ?, note = ?, updated_at = ?"
                        " WHERE origin = ?",
                        (cos.size, cos.root, cos.note, cos.updated_at, o),
                    )
            if refused:
                raise UsageError(
                    "import refused, nothing was written (a witness state never moves"
                    " backwards): " + "; ".join(refused)
                )

        self._write(work)


def _log_config(origin: str, qpd: object, disabled: object, keys: list[object]) -> LogConfig:
    return LogConfig(
        origin,
        tuple(_stored_text(k, "log key") for k in keys),
        None if qpd is None else _stored_int(qpd, "qpd", 1),
        _stored_bool(disabled, "disabled flag"),
    )


def _all_logs(tx: Tx) -> list[LogConfig]:
    rows = tx.all("SELECT origin, qpd, disabled FROM logs ORDER BY origin")
    keys: dict[object, list[object]] = {}
    for origin, vkey in tx.all("SELECT origin, vkey FROM log_keys ORDER BY origin, vkey"):
        keys.setdefault(origin, []).append(vkey)
    return [
        _log_config(_stored_text(o, "origin"), qpd, disabled, keys.get(o, []))
        for o, qpd, disabled in rows
    ]


def _cosigned(row: Sequence[Any]) -> Cosigned:
    origin, size, root, note, updated_at = row
    return Cosigned(
        _stored_text(origin, "origin"),
        _stored_int(size, "size"),
        _stored_bytes(root, "root", 32),
        _stored_bytes(note, "note"),
        _stored_int(updated_at, "update time"),
    )


# --- the export format -------------------------------------------------------------------------


def format_state(entries: Sequence[tuple[LogConfig, Cosigned | None]]) -> bytes:
    """The export file of ``entries`` (see the module docstring); logs and keys are sorted.

    Requires: entries as a state holds them (valid origins and vkeys, at least one key each,
    notes whose checkpoint is the log's), as :meth:`SQLState.export_state` passes them.
    """
    lines = [STATE_HEADER]
    for cfg, cos in sorted(entries, key=lambda e: e[0].origin):
        lines.append(f"log {cfg.origin}")
        lines.extend(f"key {k}" for k in sorted(cfg.keys))
        if cfg.qpd is not None:
            lines.append(f"qpd {cfg.qpd}")
        if cfg.disabled:
            lines.append("disabled")
        if cos is not None:
            lines.append(f"cosigned {cos.updated_at} {b64encode(cos.note)}")
    lines.append(f"end {len(entries)}")
    return ("\n".join(lines) + "\n").encode("utf-8")


def parse_state(data: bytes) -> list[tuple[LogConfig, Cosigned | None]]:
    """Parse an export file strictly: MalformedError naming the line; a cosigned note that does
    not verify with its log's keys raises UnverifiedNoteError naming the line."""
    if not isinstance(data, bytes):
        raise UsageError("a state file is bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise MalformedError(f"state file is not valid UTF-8 (byte {e.start})") from None
    if not text.endswith("\n"):
        raise MalformedError("state file does not end in a newline")
    lines = text[:-1].split("\n")
    if lines[0] != STATE_HEADER:
        raise MalformedError(f"state line 1: expected the header {STATE_HEADER!r}")
    out: list[tuple[LogConfig, Cosigned | None]] = []
    i = 1

    def peek(prefix: str) -> str | None:
        # The rest of line i if it starts with prefix ("" when prefix is the whole line).
        if i < len(lines) and lines[i].startswith(prefix):
            return lines[i][len(prefix) :]
        return None

    def fail(detail: str, at: int | None = None) -> MalformedError:
        return MalformedError(f"state line {(i if at is None else at) + 1}: {detail}")

    while True:
        if i >= len(lines):
            raise fail("missing the final 'end' line (is the file truncated?)")
        if (rest := peek("end ")) is not None:
            try:
                count = parse_decimal(rest, "the log count")
            except MalformedError as e:
                raise fail(str(e)) from None
            if count != len(out):
                raise fail(f"'end' counts {count} logs, the file holds {len(out)}")
            if i != len(lines) - 1:
                raise fail("text after the 'end' line", i + 1)
            return out
        origin = peek("log ")
        if origin is None:
            raise fail("expected 'log <origin>' or 'end <count>'")
        try:
            check_origin(origin)
        except MalformedError as e:
            raise fail(str(e)) from None
        if out and origin <= out[-1][0].origin:
            raise fail(f"log {origin} is out of order or repeated (origins increase strictly)")
        i += 1
        keys: list[str] = []
        while (vkey := peek("key ")) is not None:
            try:
                check_log_vkey(vkey)
            except (MalformedError, UsageError) as e:
                raise fail(str(e)) from None
            if keys and vkey <= keys[-1]:
                raise fail("keys are out of order or repeated (they increase strictly)")
            keys.append(vkey)
            i += 1
        if not keys:
            raise fail(f"log {origin} has no 'key' line")
        qpd = None
        if (rest := peek("qpd ")) is not None:
            try:
                qpd = parse_decimal(rest, "qpd")
            except MalformedError as e:
                raise fail(str(e)) from None
            if qpd == 0:
                raise fail("qpd must be at least 1")
            i += 1
        disabled = peek("disabled") == ""
        if disabled:
            i += 1
        cos = None
        if (rest := peek("cosigned ")) is not None:
            cos = _parse_cosigned(rest, origin, keys, fail)
            i += 1
        out.append((LogConfig(origin, tuple(keys), qpd, disabled), cos))


def _parse_cosigned(
    rest: str, origin: str, keys: list[str], fail: Callable[[str], MalformedError]
) -> Cosigned:
    fields = rest.split(" ")
    if len(fields) != 2:
        raise fail("expected 'cosigned <updated_at> <base64 note>'")
    try:
        updated_at = parse_decimal(fields[0], "the update time")
        note = b64decode(fields[1], "the cosigned note")
        text, _ = parse_note(note)
        cp = Checkpoint.parse(text)
    except (MalformedError, ProofError) as e:
        raise fail(str(e)) from None
    if cp.origin != origin:
        raise fail(f"the cosigned note is a checkpoint of {cp.origin}, not of {origin}")
    try:
        open_note(note, [parse_vkey(k) for k in keys])
    except (VerificationError, UsageError) as e:
        where = str(fail("")).rstrip(": ")
        raise UnverifiedNoteError(
            f"{where}: log {origin}: the cosigned note does not verify with the log's keys: {e}"
        ) from None
    return Cosigned(origin, cp.size, cp.root, note, updated_at)


__all__ = [
    "LOG_KEY_TYPES",
    "MAX_ATTEMPTS",
    "MAX_EVIDENCE_BYTES_PER_LOG",
    "MAX_EVIDENCE_PER_LOG",
    "MAX_ORIGIN_BYTES",
    "MAX_REASON_CHARS",
    "MAX_VKEY_BYTES",
    "SCHEMA_VERSION",
    "STATE_HEADER",
    "BackendError",
    "CommitUnknownError",
    "CorruptStateError",
    "Dialect",
    "SQLState",
    "Session",
    "StateError",
    "Tx",
    "check_log_vkey",
    "check_origin",
    "could_be_configured",
    "format_state",
    "parse_state",
    "schema",
]
