"""The journal store on SQL: one implementation of :class:`store.api.JournalStore` for every engine.

:class:`SQLStore` holds all of the store's logic — every statement, every check, every
transaction boundary. What differs between engines is confined to a small :class:`Dialect`
(implemented by :mod:`store.sqlite` and :mod:`store.postgres`):

=====================  =====================================================================
 dialect member         what it decides
=====================  =====================================================================
 ``connect``            open a connection with its session settings (autocommit at the
                        driver level: the store issues BEGIN/COMMIT itself)
 ``begin_write``        how a write transaction starts (SQLite ``BEGIN IMMEDIATE``: the
                        database write lock up front; PostgreSQL ``READ COMMITTED``)
 ``begin_read``         how a multi-query read starts (SQLite deferred ``BEGIN``: one WAL
                        snapshot; PostgreSQL ``REPEATABLE READ READ ONLY``: one snapshot)
 ``lock_suffix``        appended to a SELECT to lock the rows it reads until commit
                        (PostgreSQL ``FOR UPDATE``; nothing on SQLite, whose writers are
                        already serialised by BEGIN IMMEDIATE)
 ``clock_sql``          the shared clock as an SQL expression (PostgreSQL's server clock),
                        or None for the process clock (SQLite)
 ``types``              column types in the DDL (bytes, ordered text keys, booleans)
 ``sql``/``any_of``     placeholders: the store writes ``?``; ``any_of`` spells
                        "column is one of these integers" (``IN (?, …)`` / ``= ANY(?)``)
 ``unique_constraint``  which named constraint (table :data:`CONSTRAINTS`) a unique
                        violation hit — never guessed from the record being written
 ``retryable``          errors after which the whole transaction may simply run again
                        (PostgreSQL serialization failures and deadlocks)
 ``commit_unknown``     a COMMIT that failed without a verdict (the write may have landed)
=====================  =====================================================================

Transactions. Every operation is one function run by :meth:`Session.transact` inside one
transaction: ``BEGIN`` (write or read flavour), the function, ``COMMIT``. Any exception rolls
back, so a failed operation writes nothing. A retryable error (or a connection found broken
before COMMIT was sent) runs the whole function again, at most :data:`MAX_ATTEMPTS` times; a
COMMIT that fails without a server verdict raises :class:`~store.errors.CommitUnknownError` for
every write; any other driver error becomes :class:`~store.errors.BackendError`. A handle has
one connection, used by one thread at a time (a lock), and reconnects when it finds it broken.

Per-run serialisation. Every write to a run — append, seal, acquire, renew, release,
cancellation request — first *ensures and locks* the run's row in ``run_state``: a
``SELECT … <lock_suffix>``, and when the row does not exist yet an
``INSERT … ON CONFLICT DO NOTHING`` followed by the same SELECT. The row always exists once
written and is never deleted, so there is always something to lock — also for a run that has no
lease row or no records yet (a first ``acquire``, or appends on the restore path). Everything
the operation then reads (lease, seal, head) is read by *later* statements: under READ
COMMITTED each statement takes a fresh snapshot, so they see everything committed by whoever
held the lock before. (A single statement that locked ``run_state`` and joined the lease would
return the lease as of its snapshot, taken before it waited: stale.) Seals additionally lock
the tenant's ``log_state`` row the same way, which serialises a tenant's seals and makes log
positions dense: position = size, then size + 1.

Schema (created idempotently by :meth:`SQLStore.initialise`; the tenant leads every key)::

    meta         (singleton=1, schema_version, base_origin, log_vkey)
    journal      (tenant, run, seq, epoch, kind, case_id, effect_key, raw, prev_hash, hash,
                  sig_name, sig_key_id, sig)            PK (tenant, run, seq)
                 index journal_case (tenant, case_id, run, seq) WHERE case_id IS NOT NULL
    run_state    (tenant, run)                          PK — the per-run lock row
    effect_once  (tenant, run, effect_key, seq)         PK (tenant, run, effect_key)
    run_lease    (tenant, run, owner, epoch, expires_at, released)   PK (tenant, run)
                 index run_lease_abandoned (tenant, expires_at, run) WHERE NOT released
    run_seal     (tenant, run, position, head, outcome, sealed_at)   PK (tenant, run),
                 UNIQUE (tenant, position)
    log_state    (tenant, size)                         PK (tenant) — the log's lock row
    tree_hash    (tenant, idx, hash)                    PK (tenant, idx): RFC 6962 stored
                 hashes at tlog.merkle.stored_hash_index positions, append-only
    checkpoint   (tenant, size, note)                   PK (tenant, size): kept signed notes
    run_outcome  (tenant, run, outcome, ordinal)        PK (tenant, run), UNIQUE (tenant,
                 ordinal), index (tenant, outcome, ordinal)
    counter      (tenant, name, value)                  PK (tenant, name): per-tenant
                 ordinals ("conclusion"), incremented by an upsert, never MAX()+1
    run_activity (tenant, run, updated_at)              PK (tenant, run), index (tenant,
                 updated_at DESC, run DESC); one row per run with records
    run_cancel   (tenant, run, actor, reason, requested_at)          PK (tenant, run)

Text keys (tenant, run, case) compare bytewise (SQLite's BINARY, PostgreSQL ``COLLATE "C"``),
so database order equals Python's ``str`` order and paging cursors agree with the database.
Hashes and bodies are bytes columns; times are whole Unix seconds from the store clock (the
injected clock, else PostgreSQL's server clock or the process clock on SQLite), never written
into the journal.

Decisions where the contract leaves room (also in the method docstrings):

* A half-written record signature (some of name, key ID, signature stored, not all) reads as
  :class:`~store.errors.CorruptError`, never as unsigned or signed.
* ``read`` and ``case_history`` recompute every hash; they do not decode bodies (``verify``
  does: links, gaps, bodies naming their run and seq).
* A ``RunConcluded`` record without a non-empty string ``data.outcome`` leaves the outcome
  index alone; when one batch concludes twice, the last conclusion is indexed. Outcomes — a
  seal's, and an indexed conclusion's — follow :func:`tlog.journal.check_outcome` (the export
  format requires it of a sealed run's outcome), else MalformedError and nothing is written.
* A listing's ``limit`` is at least 1 (UsageError otherwise): a page of 0 would make a
  paging loop spin forever.
* Labels (lease owners, cancellation actors) are 1-256 characters without control characters;
  a cancellation reason is 0-4096 such characters.
* ``sign_checkpoint`` returns the note *as kept*: when a note for that size is already kept
  (perhaps with cosignatures merged), that one.
* ``add_cosignatures`` keeps at most one line per (key name, key ID): a line for a key that
  already has one in the kept note is dropped, so that the kept note can never hold two
  different lines for one key (which verifiers reject). A line under the log's own key name
  must be the log's valid signature. Every other line it keeps must be from a witness key the
  caller declares and verify: the store never keeps a line an export could not carry (a plain
  Ed25519 line, an undeclared key) or that does not verify.
* ``seal`` appends the run's seal record (:func:`tlog.journal.seal_body`, kind ``RunSealed``)
  in its transaction; its hash is the sealed head. ``append`` refuses that reserved kind
  (UsageError), so a run's only seal record is its last.
* ``append(..., signatures=…)`` (the restore path) stores the given signatures instead of the
  handle's: each None or a :class:`~tlog.journal.RecordSignature` with a valid key name, a
  32-bit key ID and 64 signature bytes (Ed25519), UsageError otherwise. They are not verified
  here (the store holds no record verifiers): restore verified them.
* ``import_checkpoint`` verifies the log's line, refuses a note with two lines for one key
  (byte-identical repeats included), and requires the note's text to be exactly the
  checkpoint text this store formats at that size (so no extension lines); UsageError
  otherwise. It inserts the note as given; the same bytes again change nothing.
* ``_delete_run_for_test`` deletes what an operator deleting a run would: its records, seal
  row, exactly-once keys, outcome and activity rows. Its lease row (the epoch memory), log
  position and stored hashes stay: the log never shrinks and never reuses the position.
"""

from __future__ import annotations

import abc
import contextlib
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, TypeVar

from store.api import (
    Append,
    Cancellation,
    Head,
    Inclusion,
    JournalStore,
    Lease,
    Seal,
    declared_keys,
)
from store.errors import (
    BackendError,
    CommitUnknownError,
    CorruptError,
    DuplicateEffectError,
    FencedError,
    LeaseHeldError,
    LeaseNotHeldError,
    RunSealedError,
)
from tlog import merkle
from tlog.checkpoint import Checkpoint
from tlog.encoding import MAX_INT63
from tlog.errors import InvalidSignatureError, MalformedError, UsageError
from tlog.journal import (
    KIND_EFFECT_STARTED,
    KIND_RUN_SEALED,
    Body,
    Record,
    RecordSignature,
    chain_hash,
    check_case_id,
    check_outcome,
    check_run_id,
    check_tenant,
    make_record,
    seal_body,
)
from tlog.keys import SignerKey, cosigner_from_vkey, format_vkey, parse_vkey
from tlog.note import (
    MAX_SIGNATURES,
    TYPE_ED25519,
    Ed25519Signer,
    Ed25519Verifier,
    Signature,
    Verifier,
    add_signatures,
    check_key_name,
    key_id,
    parse_note,
    sign_note,
)

T = TypeVar("T")

SCHEMA_VERSION = 2
"""Version of the schema below, recorded in ``meta``; a store of another version is refused.
Version 2: a seal appends the run's seal record (kind ``RunSealed``), whose hash is the sealed
head; a version-1 store's seals have none, and its exports would not verify."""

MAX_ATTEMPTS = 5
"""How many times a transaction runs when it keeps failing with a retryable error."""

CONCLUSION_COUNTER = "conclusion"
"""Name of the per-tenant counter that orders conclusions in the outcome index."""

NOT_INITIALISED = "not initialised: run tlog-store init"

CONSTRAINTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "journal_pk": ("journal", ("tenant", "run", "seq")),
    "run_state_pk": ("run_state", ("tenant", "run")),
    "effect_once_pk": ("effect_once", ("tenant", "run", "effect_key")),
    "run_lease_pk": ("run_lease", ("tenant", "run")),
    "run_seal_pk": ("run_seal", ("tenant", "run")),
    "run_seal_position": ("run_seal", ("tenant", "position")),
    "log_state_pk": ("log_state", ("tenant",)),
    "tree_hash_pk": ("tree_hash", ("tenant", "idx")),
    "checkpoint_pk": ("checkpoint", ("tenant", "size")),
    "run_outcome_pk": ("run_outcome", ("tenant", "run")),
    "run_outcome_ordinal": ("run_outcome", ("tenant", "ordinal")),
    "counter_pk": ("counter", ("tenant", "name")),
    "run_activity_pk": ("run_activity", ("tenant", "run")),
    "run_cancel_pk": ("run_cancel", ("tenant", "run")),
}
"""Every unique constraint of the schema: name -> (table, columns). Dialects report these names."""

# The DDL, with the dialect's column types substituted for {blob} (bytes), {key} (text that
# orders bytewise), {bool} and {compact} (a table-storage suffix for small keyed rows).
_DDL = (
    """CREATE TABLE IF NOT EXISTS meta (
        singleton BIGINT NOT NULL PRIMARY KEY CHECK (singleton = 1),
        schema_version BIGINT NOT NULL,
        base_origin TEXT NOT NULL,
        log_vkey TEXT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS journal (
        tenant {key} NOT NULL,
        run {key} NOT NULL,
        seq BIGINT NOT NULL,
        epoch BIGINT NOT NULL,
        kind TEXT NOT NULL,
        case_id {key},
        effect_key TEXT,
        raw {blob} NOT NULL,
        prev_hash {blob} NOT NULL,
        hash {blob} NOT NULL,
        sig_name TEXT,
        sig_key_id BIGINT,
        sig {blob},
        CONSTRAINT journal_pk PRIMARY KEY (tenant, run, seq))""",
    """CREATE INDEX IF NOT EXISTS journal_case
        ON journal (tenant, case_id, run, seq) WHERE case_id IS NOT NULL""",
    """CREATE TABLE IF NOT EXISTS run_state (
        tenant {key} NOT NULL,
        run {key} NOT NULL,
        CONSTRAINT run_state_pk PRIMARY KEY (tenant, run)){compact}""",
    """CREATE TABLE IF NOT EXISTS effect_once (
        tenant {key} NOT NULL,
        run {key} NOT NULL,
        effect_key TEXT NOT NULL,
        seq BIGINT NOT NULL,
        CONSTRAINT effect_once_pk PRIMARY KEY (tenant, run, effect_key)){compact}""",
    """CREATE TABLE IF NOT EXISTS run_lease (
        tenant {key} NOT NULL,
        run {key} NOT NULL,
        owner TEXT NOT NULL,
        epoch BIGINT NOT NULL,
        expires_at BIGINT NOT NULL,
        released {bool} NOT NULL,
        CONSTRAINT run_lease_pk PRIMARY KEY (tenant, run))""",
    """CREATE INDEX IF NOT EXISTS run_lease_abandoned
        ON run_lease (tenant, expires_at, run) WHERE NOT released""",
    """CREATE TABLE IF NOT EXISTS run_seal (
        tenant {key} NOT NULL,
        run {key} NOT NULL,
        position BIGINT NOT NULL,
        head {blob} NOT NULL,
        outcome TEXT NOT NULL,
        sealed_at BIGINT NOT NULL,
        CONSTRAINT run_seal_pk PRIMARY KEY (tenant, run),
        CONSTRAINT run_seal_position UNIQUE (tenant, position))""",
    """CREATE TABLE IF NOT EXISTS log_state (
        tenant {key} NOT NULL,
        size BIGINT NOT NULL,
        CONSTRAINT log_state_pk PRIMARY KEY (tenant)){compact}""",
    """CREATE TABLE IF NOT EXISTS tree_hash (
        tenant {key} NOT NULL,
        idx BIGINT NOT NULL,
        hash {blob} NOT NULL,
        CONSTRAINT tree_hash_pk PRIMARY KEY (tenant, idx)){compact}""",
    """CREATE TABLE IF NOT EXISTS checkpoint (
        tenant {key} NOT NULL,
        size BIGINT NOT NULL,
        note {blob} NOT NULL,
        CONSTRAINT checkpoint_pk PRIMARY KEY (tenant, size))""",
    """CREATE TABLE IF NOT EXISTS run_outcome (
        tenant {key} NOT NULL,
        run {key} NOT NULL,
        outcome TEXT NOT NULL,
        ordinal BIGINT NOT NULL,
        CONSTRAINT run_outcome_pk PRIMARY KEY (tenant, run),
        CONSTRAINT run_outcome_ordinal UNIQUE (tenant, ordinal))""",
    """CREATE INDEX IF NOT EXISTS run_outcome_by
        ON run_outcome (tenant, outcome, ordinal)""",
    """CREATE TABLE IF NOT EXISTS counter (
        tenant {key} NOT NULL,
        name TEXT NOT NULL,
        value BIGINT NOT NULL,
        CONSTRAINT counter_pk PRIMARY KEY (tenant, name)){compact}""",
    """CREATE TABLE IF NOT EXISTS run_activity (
        tenant {key} NOT NULL,
        run {key} NOT NULL,
        updated_at BIGINT NOT NULL,
        CONSTRAINT run_activity_pk PRIMARY KEY (tenant, run)){compact}""",
    """CREATE INDEX IF NOT EXISTS run_activity_recent
        ON run_activity (tenant, updated_at DESC, run DESC)""",
    """CREATE TABLE IF NOT EXISTS run_cancel (
        tenant {key} NOT NULL,
        run {key} NOT NULL,
        actor TEXT NOT NULL,
        reason TEXT NOT NULL,
        requested_at BIGINT NOT NULL,
        CONSTRAINT run_cancel_pk PRIMARY KEY (tenant, run))""",
)


def schema(types: dict[str, str]) -> list[str]:
    """The schema's statements for a dialect's column ``types`` (keys: blob, key, bool, compact)."""
    return [stmt.format(**types) for stmt in _DDL]


# --- the dialect -----------------------------------------------------------------------------


class Dialect(abc.ABC):
    """What differs between SQL engines (see the module docstring's table)."""

    name: ClassVar[str]
    shared: ClassVar[bool]
    begin_write: ClassVar[str]
    begin_read: ClassVar[str]
    lock_suffix: ClassVar[str]
    clock_sql: ClassVar[str | None]
    types: ClassVar[dict[str, str]]
    meta_exists_sql: ClassVar[str]
    """A query whose single value is true when the ``meta`` table exists."""
    driver_errors: ClassVar[tuple[type[Exception], ...]]
    """The driver's error classes: anything else raised inside a transaction is not the DB's."""

    @abc.abstractmethod
    def connect(self) -> Any:
        """Open a connection (driver-level autocommit; session settings applied)."""

    @abc.abstractmethod
    def sql(self, text: str) -> str:
        """Translate the store's ``?`` placeholders to the driver's."""

    @abc.abstractmethod
    def any_of(self, column: str, values: Sequence[int]) -> tuple[str, tuple[Any, ...]]:
        """A condition "``column`` is one of ``values``" (non-empty), with ``?`` placeholders."""

    @abc.abstractmethod
    def unique_constraint(self, exc: Exception) -> str | None:
        """The :data:`CONSTRAINTS` name a unique violation hit, or None (not one, or unknown)."""

    def retryable(self, exc: Exception) -> bool:
        """True when the failed transaction may run again as a whole (nothing was written)."""
        return False

    @abc.abstractmethod
    def commit_unknown(self, exc: Exception, conn: Any) -> bool:
        """True when a failed COMMIT gave no verdict: the write may or may not have landed."""

    def usable(self, conn: Any) -> bool:
        """False when the connection is closed or broken and must be replaced."""
        return True

    def committed(self, cursor: Any) -> bool:
        """After COMMIT returned: did it commit? (PostgreSQL turns a failed one into ROLLBACK.)"""
        return True

    def init_lock(self, tx: Tx) -> None:  # noqa: B027 - optional hook, empty by default
        """Serialise concurrent initialisers (inside the write transaction that creates the
        schema); nothing when ``begin_write`` already does."""


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
        """Run one statement for each parameter row."""
        self._cur.executemany(self._d.sql(sql), rows)

    def one(self, sql: str, params: Sequence[Any] = ()) -> tuple[Any, ...] | None:
        """The first row of a query, or None."""
        self._cur.execute(self._d.sql(sql), tuple(params))
        row = self._cur.fetchone()
        return None if row is None else tuple(row)

    def all(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Every row of a query."""
        self._cur.execute(self._d.sql(sql), tuple(params))
        return [tuple(r) for r in self._cur.fetchall()]

    def rows_if_any(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run any statement; its rows if it returns some, else []."""
        self._cur.execute(self._d.sql(sql), tuple(params))
        if self._cur.description is None:
            return []
        return [tuple(r) for r in self._cur.fetchall()]


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
        with self._lock:
            self._connect()

    def _connect(self) -> Any:
        d = self._d
        if self._conn is not None:
            self._discard()
        try:
            self._conn = d.connect()
        except d.driver_errors as e:
            raise BackendError(f"{d.name}: cannot open the database: {_first_line(e)}") from e
        return self._conn

    def _discard(self) -> None:
        conn, self._conn = self._conn, None
        with contextlib.suppress(*self._d.driver_errors):
            conn.close()

    def _rollback(self, conn: Any) -> None:
        # No transaction left, or the connection is gone: nothing to undo here.
        with contextlib.suppress(*self._d.driver_errors):
            conn.cursor().execute("ROLLBACK")

    def transact(self, write: bool, fn: Callable[[Tx], T]) -> T:
        """Run ``fn`` in one transaction (write or read flavour) and commit; see the module
        docstring for retries and error mapping."""
        d = self._d
        with self._lock:
            if self._closed:
                raise UsageError("the store is closed")
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
                    # Nothing was committed: COMMIT was never sent. Retry the whole
                    # transaction after a retryable error or on a fresh connection.
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
                            "the write may or may not have landed: re-read before retrying"
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
            if self._conn is not None:
                self._discard()


# --- checks of arguments and of stored values -------------------------------------------------


def _check_int(value: object, what: str, lo: int, hi: int = MAX_INT63) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
        raise UsageError(f"{what} must be an integer in [{lo}, {hi}], not {value!r}")
    return value


def _check_label(value: object, what: str, *, empty: bool = False, limit: int = 256) -> str:
    # Owners, actors, outcomes: short printable labels (control characters would let one
    # label print as another in logs and listings).
    if not isinstance(value, str) or (not value and not empty) or len(value) > limit:
        raise UsageError(f"{what} must be a string of {0 if empty else 1}-{limit} characters")
    if any(c < " " or c == "\x7f" for c in value):
        raise UsageError(f"{what} contains a control character")
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise UsageError(f"{what} is not valid Unicode text") from None
    return value


def _stored_int(value: object, what: str, run: str | None = None, lo: int = 0) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= MAX_INT63:
        raise CorruptError(f"stored {what} {value!r} is not an integer >= {lo}", run)
    return value


def _stored_hash(value: object, what: str, run: str | None = None, seq: int | None = None) -> bytes:
    if not isinstance(value, bytes) or len(value) != 32:
        raise CorruptError(f"stored {what} is not 32 bytes", run, seq)
    return value


def _stored_text(value: object, what: str, run: str | None = None) -> str:
    if not isinstance(value, str):
        raise CorruptError(f"stored {what} is not text", run)
    return value


def _stored_bool(value: object, what: str, run: str | None = None) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise CorruptError(f"stored {what} {value!r} is not a boolean", run)


def _stored_run(value: object) -> str:
    try:
        if not isinstance(value, str):
            raise MalformedError("not text")
        check_run_id(value)
    except MalformedError:
        raise CorruptError(f"stored run ID {value!r} does not parse") from None
    return value


def _stored_note(value: object, what: str) -> tuple[bytes, bytes, list[Signature]]:
    if not isinstance(value, bytes):
        raise CorruptError(f"stored {what} is not bytes")
    try:
        text, sigs = parse_note(value)
    except MalformedError as e:
        raise CorruptError(f"stored {what} is not a signed note: {e}") from None
    return value, text, sigs


def _record(run: str, row: Sequence[Any]) -> Record:
    """A stored journal row (seq, raw, prev_hash, hash, sig_name, sig_key_id, sig), checked."""
    seq_v, raw, prev, h, sig_name, sig_key_id, sig = row
    seq = _stored_int(seq_v, "record seq", run, lo=1)
    if not isinstance(raw, bytes):
        raise CorruptError("stored body is not bytes", run, seq)
    prev = _stored_hash(prev, "previous hash", run, seq)
    h = _stored_hash(h, "hash", run, seq)
    signature = None
    parts = (sig_name, sig_key_id, sig)
    if any(p is not None for p in parts):
        if (
            not isinstance(sig_name, str)
            or not isinstance(sig_key_id, int)
            or isinstance(sig_key_id, bool)
            or not 0 <= sig_key_id < 1 << 32
            or not isinstance(sig, bytes)
            or not sig
        ):
            raise CorruptError("stored record signature is incomplete or malformed", run, seq)
        signature = RecordSignature(sig_name, sig_key_id, sig)
    if chain_hash(prev, raw) != h:
        raise CorruptError("hash does not cover the stored body", run, seq)
    return Record(run, seq, raw, prev, h, signature)


RECORD_SIGNATURE_SIZE = 64
"""Bytes of a record signature (Ed25519)."""


def _check_signatures(signatures: object, count: int) -> list[RecordSignature | None]:
    """Given record signatures (the restore path): one per record, each None or well-formed."""
    if not isinstance(signatures, list | tuple):
        raise UsageError("signatures are a list, one entry per record")
    if len(signatures) != count:
        raise UsageError(f"{len(signatures)} signatures for a batch of {count} records")
    for i, s in enumerate(signatures):
        if s is None:
            continue
        if not isinstance(s, RecordSignature):
            raise UsageError(f"signature {i} is a {type(s).__name__}, not a RecordSignature")
        try:
            if not isinstance(s.name, str):
                raise MalformedError("the key name is not a string")
            check_key_name(s.name)
        except MalformedError as e:
            raise UsageError(f"signature {i}: {e}") from None
        if (
            not isinstance(s.key_id, int)
            or isinstance(s.key_id, bool)
            or not 0 <= s.key_id < 1 << 32
        ):
            raise UsageError(f"signature {i}: key ID {s.key_id!r} is not a 32-bit value")
        if not isinstance(s.sig, bytes) or len(s.sig) != RECORD_SIGNATURE_SIZE:
            raise UsageError(f"signature {i} is not {RECORD_SIGNATURE_SIZE} bytes")
    return list(signatures)


def _witness_verifiers(witness_keys: Sequence[str]) -> dict[tuple[str, int], Verifier]:
    """(key name, key ID) -> cosignature verifier, for the witness vkeys a caller declares."""
    declared = declared_keys(witness_keys, "witness", cosigner_from_vkey)
    return {(v.name, v.key_id): v for v in declared.values()}


def _unkeepable(s: Signature, witness_keys: Sequence[str]) -> str:
    """Why a signature line that is neither the log's nor a declared witness's is refused."""
    for vkey in witness_keys:
        v = parse_vkey(vkey)
        if v.name == s.name and key_id(v.name, TYPE_ED25519, v.public_key) == s.key_id:
            return (
                f"the signature line of {s.name}+{s.key_id:08x} is a plain Ed25519 signature "
                f"(type 0x01) by the key of witness {format_vkey(cosigner_from_vkey(vkey))}: a "
                "witness must cosign with cosignature/v1 (type 0x04) or subtree/v1 (0x06); an "
                "export could not carry this line, so it is not kept"
            )
    return (
        f"the signature line of {s.name}+{s.key_id:08x} is from no declared witness key: "
        "declare the witness's vkey (tlog-store publish --witness-key VKEY) to keep it"
    )


def _batch_run(batch: Sequence[Append]) -> str:
    run = None
    for a in batch:
        if not isinstance(a, Append):
            raise UsageError(f"a batch holds Append values, not {type(a).__name__}")
        if run is None:
            run = a.run
        elif a.run != run:
            raise UsageError(f"a batch belongs to one run; this one names {run!r} and {a.run!r}")
    assert run is not None
    check_run_id(run)
    return run


class _EffectConflict(Exception):
    """Internal: the exactly-once key refused one of ``keys`` (named after the rollback)."""

    def __init__(self, keys: list[str]) -> None:
        super().__init__("duplicate effect")
        self.keys = keys


class _HashReader:
    """The tenant's stored hashes, read inside one transaction (a :class:`merkle.HashReader`)."""

    __slots__ = ("_d", "_tenant", "_tx")

    def __init__(self, tx: Tx, dialect: Dialect, tenant: str) -> None:
        self._tx = tx
        self._d = dialect
        self._tenant = tenant

    def read_hashes(self, indexes: Sequence[int]) -> list[bytes]:
        if not indexes:
            return []
        wanted = sorted(set(indexes))
        cond, params = self._d.any_of("idx", wanted)
        rows = self._tx.all(
            f"SELECT idx, hash FROM tree_hash WHERE tenant = ? AND {cond}",  # noqa: S608
            (self._tenant, *params),
        )
        got = {idx: h for idx, h in rows}
        out = []
        for i in indexes:
            h = got.get(i)
            if not isinstance(h, bytes) or len(h) != 32:
                raise CorruptError(f"stored tree hash {i} is missing or not 32 bytes")
            out.append(h)
        return out


# --- the store -------------------------------------------------------------------------------

_RECORD_COLUMNS = "seq, raw, prev_hash, hash, sig_name, sig_key_id, sig"

_INSERT_RECORD = (
    "INSERT INTO journal (tenant, run, seq, epoch, kind, case_id, effect_key, raw, prev_hash,"
    " hash, sig_name, sig_key_id, sig) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)

# What an append or a seal must know about its run, read after the run's row is locked: the
# lease epoch, the seal, the head and the clock ({now}: a placeholder or the server clock).
_RUN_STATE = (
    "SELECT l.epoch, s.position, s.head, s.outcome, j.seq, j.hash, {now}"
    " FROM (SELECT 1 AS one) AS base"
    " LEFT JOIN run_lease AS l ON l.tenant = ? AND l.run = ?"
    " LEFT JOIN run_seal AS s ON s.tenant = ? AND s.run = ?"
    " LEFT JOIN (SELECT seq, hash FROM journal WHERE tenant = ? AND run = ?"
    " ORDER BY seq DESC LIMIT 1) AS j ON 1 = 1"
)


class SQLStore(JournalStore):
    """A journal store over one SQL database through a :class:`Dialect`.

    Requires: the database was initialised (:meth:`initialise`), else :class:`UsageError`
    ("not initialised: run tlog-store init"). ``tenant`` must pass
    :func:`tlog.journal.check_tenant`. ``key``, when given, must be the type-0x01 Ed25519 key
    the store was initialised with (:class:`UsageError` otherwise); it is needed only by
    :meth:`sign_checkpoint`. ``record_signer`` signs every record appended through this handle.
    ``clock`` (whole Unix seconds) overrides the dialect's clock.
    """

    def __init__(
        self,
        dialect: Dialect,
        *,
        tenant: str = "default",
        key: SignerKey | None = None,
        record_signer: Ed25519Signer | None = None,
        clock: Callable[[], int] | None = None,
    ) -> None:
        check_tenant(tenant)
        if key is not None and (not isinstance(key, SignerKey) or key.key_type != TYPE_ED25519):
            raise UsageError("the log key must be an Ed25519 signer key (type 0x01)")
        if record_signer is not None and not isinstance(record_signer, Ed25519Signer):
            raise UsageError("the record signer must be an Ed25519Signer")
        if clock is not None and not callable(clock):
            raise UsageError("the clock must be a callable returning whole seconds")
        self._d = dialect
        self._tenant = tenant
        self._record_signer = record_signer
        self._clock = clock
        self._session = Session(dialect)
        try:
            base, vkey = self._session.transact(False, _read_meta)
            self._origin = f"{base}/{tenant}"
            try:
                public_key = parse_vkey(vkey).public_key
                self._log_verifier = Ed25519Verifier(self._origin, public_key)
            except MalformedError as e:
                raise CorruptError(f"stored log key: {e}") from None
            self._log_signer: Ed25519Signer | None = None
            if key is not None:
                signer = Ed25519Signer(self._origin, key.secret)
                if signer.public_key != public_key:
                    raise UsageError("the log key is not the key this store was initialised with")
                self._log_signer = signer
        except BaseException:
            self._session.close()
            raise

    # --- initialisation ----------------------------------------------------------------------

    @staticmethod
    def _initialise(dialect: Dialect, origin: str, key: SignerKey) -> None:
        """Create the schema (idempotent) and record ``origin`` and the log key's public half.

        Requires: ``origin`` a valid key name (no spaces, no ``+``), ``key`` type 0x01. A
        database initialised with another origin or key is refused (:class:`UsageError`).
        Safe to run from several processes at once.
        """
        if not isinstance(origin, str):
            raise UsageError("the base origin must be a string")
        try:
            check_key_name(origin)
        except MalformedError as e:
            raise UsageError(f"base origin {origin!r} is not usable as a key name: {e}") from None
        if not isinstance(key, SignerKey) or key.key_type != TYPE_ED25519:
            raise UsageError("the log key must be an Ed25519 signer key (type 0x01)")
        vkey = key.vkey()
        public_key = key.signer().public_key

        def work(tx: Tx) -> None:
            dialect.init_lock(tx)
            for stmt in schema(dialect.types):
                tx.execute(stmt)
            tx.execute(
                "INSERT INTO meta (singleton, schema_version, base_origin, log_vkey)"
                " VALUES (1, ?, ?, ?) ON CONFLICT (singleton) DO NOTHING",
                (SCHEMA_VERSION, origin, vkey),
            )
            base, stored_vkey = _read_meta(tx)
            if base != origin:
                raise UsageError(f"the store was initialised with the origin {base!r}")
            try:
                stored_public = parse_vkey(stored_vkey).public_key
            except MalformedError as e:
                raise CorruptError(f"stored log key: {e}") from None
            if stored_public != public_key:
                raise UsageError("the store was initialised with another log key")

        session = Session(dialect)
        try:
            session.transact(True, work)
        finally:
            session.close()

    # --- small helpers -------------------------------------------------------------------------

    @property
    def tenant(self) -> str:
        return self._tenant

    @property
    def origin(self) -> str:
        return self._origin

    @property
    def log_vkey(self) -> str:
        """The tenant log's vkey: the stored public log key under the name :attr:`origin`."""
        return format_vkey(self._log_verifier)

    def is_shared(self) -> bool:
        return self._d.shared

    def close(self) -> None:
        self._session.close()

    def _write(self, fn: Callable[[Tx], T]) -> T:
        return self._session.transact(True, fn)

    def _read(self, fn: Callable[[Tx], T]) -> T:
        return self._session.transact(False, fn)

    def _now_sql(self) -> tuple[str, tuple[int, ...]]:
        # The store clock as a select-list item: the injected clock, the process clock, or
        # (PostgreSQL) the server clock read inside the transaction.
        if self._clock is not None:
            return "?", (_check_int(self._clock(), "the clock's time", 0),)
        if self._d.clock_sql is None:
            return "?", (int(time.time()),)
        return self._d.clock_sql, ()

    def _now(self, tx: Tx) -> int:
        expr, params = self._now_sql()
        if params:
            return params[0]
        row = tx.one(f"SELECT {expr}")
        assert row is not None
        return _stored_int(row[0], "clock")

    def _lock_row(self, tx: Tx, select: str, insert: str, params: Sequence[Any]) -> Any:
        # Ensure a lock row exists and lock it (module docstring): the common case — the row
        # exists — costs one statement.
        suffix = self._d.lock_suffix
        row = tx.one(select + suffix, params)
        if row is None:
            tx.execute(insert, params)
            row = tx.one(select + suffix, params)
            assert row is not None
        return row[0]

    def _lock_run(self, tx: Tx, run: str) -> None:
        self._lock_row(
            tx,
            "SELECT run FROM run_state WHERE tenant = ? AND run = ?",
            "INSERT INTO run_state (tenant, run) VALUES (?, ?)"
            " ON CONFLICT (tenant, run) DO NOTHING",
            (self._tenant, run),
        )

    def _lock_log(self, tx: Tx) -> int:
        size = self._lock_row(
            tx,
            "SELECT size FROM log_state WHERE tenant = ?",
            "INSERT INTO log_state (tenant, size) VALUES (?, 0) ON CONFLICT (tenant) DO NOTHING",
            (self._tenant,),
        )
        return _stored_int(size, "log size")

    def _log_size(self, tx: Tx) -> int:
        row = tx.one("SELECT size FROM log_state WHERE tenant = ?", (self._tenant,))
        return 0 if row is None else _stored_int(row[0], "log size")

    def _reader(self, tx: Tx) -> _HashReader:
        return _HashReader(tx, self._d, self._tenant)

    def _run_state(self, tx: Tx, run: str) -> tuple[int | None, Seal | None, Head, int]:
        """(lease epoch or None, seal or None, head, now) of a locked run."""
        expr, now_params = self._now_sql()
        t = self._tenant
        row = tx.one(_RUN_STATE.format(now=expr), (*now_params, t, run, t, run, t, run))
        assert row is not None
        lease_epoch, position, head, outcome, seq, h, now = row
        epoch = None if lease_epoch is None else _stored_int(lease_epoch, "lease epoch", run, 1)
        seal = None
        if position is not None:
            seal = Seal(
                run,
                _stored_int(position, "log position", run),
                _stored_hash(head, "sealed head", run),
                _stored_text(outcome, "outcome", run),
            )
        if seq is None:
            current = Head.genesis()
        else:
            s = _stored_int(seq, "record seq", run, 1)
            current = Head(s, _stored_hash(h, "hash", run, s))
        return epoch, seal, current, _stored_int(now, "clock")

    # --- records -------------------------------------------------------------------------------

    def append(
        self,
        epoch: int,
        batch: Sequence[Append],
        *,
        signatures: Sequence[RecordSignature | None] | None = None,
    ) -> list[Record]:
        """Append ``batch`` to its run under ``epoch``, atomically (see :mod:`store.api`).

        An empty batch returns [] without touching the database. A batch naming two runs, or
        holding something other than :class:`Append`, is refused (:class:`UsageError`) before
        the transaction. Inside it: the fence (FencedError), then the seal (RunSealedError),
        then the records, the exactly-once keys (DuplicateEffectError), the outcome index
        and the activity index. A malformed record raises MalformedError; nothing is written.

        ``signatures`` (the restore path), when given, holds one entry per record and replaces
        the handle's record signer for this batch (see the module docstring).
        """
        given = None if signatures is None else _check_signatures(signatures, len(batch))
        if not batch:
            return []
        _check_int(epoch, "epoch", 1)
        run = _batch_run(batch)
        for a in batch:
            if a.kind == KIND_RUN_SEALED:
                raise UsageError(
                    f"the record kind {KIND_RUN_SEALED} is reserved: a run's seal record is "
                    "written by seal, not appended"
                )
        tenant = self._tenant
        signer = self._record_signer if given is None else None

        def work(tx: Tx) -> list[Record]:
            self._lock_run(tx, run)
            lease_epoch, seal, head, now = self._run_state(tx, run)
            if lease_epoch is not None and lease_epoch != epoch:
                raise FencedError(run, epoch, lease_epoch)
            if seal is not None:
                raise RunSealedError(run, seal.outcome)
            seq, prev = head.seq, head.hash
            records: list[Record] = []
            rows: list[tuple[Any, ...]] = []
            effects: list[tuple[str, str, str, int]] = []
            outcome = None
            for i, a in enumerate(batch):
                seq += 1
                has_data = a.has_data
                body = Body(
                    run,
                    seq,
                    epoch,
                    a.kind,
                    a.case,
                    a.effect_key,
                    a.data if has_data else None,
                    has_data,
                )
                rec = make_record(body, prev, signer)
                if given is not None and given[i] is not None:
                    rec = Record(run, seq, rec.raw, prev, rec.hash, given[i])
                sig = rec.signature
                rows.append(
                    (
                        tenant,
                        run,
                        seq,
                        epoch,
                        a.kind,
                        a.case,
                        a.effect_key,
                        rec.raw,
                        prev,
                        rec.hash,
                        None if sig is None else sig.name,
                        None if sig is None else sig.key_id,
                        None if sig is None else sig.sig,
                    )
                )
                if a.kind == KIND_EFFECT_STARTED and a.effect_key is not None:
                    effects.append((tenant, run, a.effect_key, seq))
                concluded = body.outcome
                if concluded is not None:
                    # Indexed, so held to the rule of a seal's outcome (check_outcome).
                    try:
                        check_outcome(concluded)
                    except MalformedError as e:
                        raise MalformedError(f"record {seq}: RunConcluded {e}") from None
                    outcome = concluded
                records.append(rec)
                prev = rec.hash
            if effects:
                # The exactly-once key decides; Python only names the key afterwards.
                try:
                    tx.executemany(
                        "INSERT INTO effect_once (tenant, run, effect_key, seq)"
                        " VALUES (?, ?, ?, ?)",
                        effects,
                    )
                except self._d.driver_errors as e:
                    if self._d.unique_constraint(e) == "effect_once_pk":
                        raise _EffectConflict([k for _, _, k, _ in effects]) from e
                    raise
            tx.executemany(_INSERT_RECORD, rows)
            if outcome is not None:
                ordinal = self._next_ordinal(tx)
                tx.execute(
                    "INSERT INTO run_outcome (tenant, run, outcome, ordinal) VALUES (?, ?, ?, ?)"
                    " ON CONFLICT (tenant, run) DO UPDATE"
                    " SET outcome = excluded.outcome, ordinal = excluded.ordinal",
                    (tenant, run, outcome, ordinal),
                )
            tx.execute(
                "INSERT INTO run_activity (tenant, run, updated_at) VALUES (?, ?, ?)"
                " ON CONFLICT (tenant, run) DO UPDATE SET updated_at = excluded.updated_at",
                (tenant, run, now),
            )
            return records

        try:
            return self._write(work)
        except _EffectConflict as c:
            raise DuplicateEffectError(run, self._conflicting_key(run, c.keys)) from None

    def _next_ordinal(self, tx: Tx) -> int:
        row = tx.one(
            "INSERT INTO counter (tenant, name, value) VALUES (?, ?, 1)"
            " ON CONFLICT (tenant, name) DO UPDATE SET value = counter.value + 1"
            " RETURNING value",
            (self._tenant, CONCLUSION_COUNTER),
        )
        assert row is not None
        return _stored_int(row[0], "conclusion ordinal", lo=1)

    def _conflicting_key(self, run: str, keys: list[str]) -> str:
        # Which key the constraint refused: a key repeated inside the batch, else one that the
        # run's history holds (keys are never deleted, so it is still there).
        seen: set[str] = set()
        for k in keys:
            if k in seen:
                return k
            seen.add(k)
        if len(keys) == 1:
            return keys[0]

        def find(tx: Tx) -> str | None:
            for k in keys:
                if tx.one(
                    "SELECT seq FROM effect_once WHERE tenant = ? AND run = ? AND effect_key = ?",
                    (self._tenant, run, k),
                ):
                    return k
            return None

        return self._read(find) or keys[0]

    def _check_from(self, run: str, from_seq: int) -> None:
        check_run_id(run)
        _check_int(from_seq, "from_seq", 0)

    def read(self, run: str, from_seq: int = 1) -> list[Record]:
        """All records of ``run`` with seq >= ``from_seq``, in order, each hash-checked."""
        self._check_from(run, from_seq)
        rows = self._read(
            lambda tx: tx.all(
                f"SELECT {_RECORD_COLUMNS} FROM journal"  # noqa: S608
                " WHERE tenant = ? AND run = ? AND seq >= ? ORDER BY seq",
                (self._tenant, run, from_seq),
            )
        )
        return [_record(run, r) for r in rows]

    def read_page(self, run: str, from_seq: int, limit: int) -> list[Record]:
        """At most ``limit`` records of ``run`` from ``from_seq`` (the database applies the
        bound), each hash-checked."""
        self._check_from(run, from_seq)
        _check_int(limit, "limit", 1)
        rows = self._read(
            lambda tx: tx.all(
                f"SELECT {_RECORD_COLUMNS} FROM journal"  # noqa: S608
                " WHERE tenant = ? AND run = ? AND seq >= ? ORDER BY seq LIMIT ?",
                (self._tenant, run, from_seq, limit),
            )
        )
        return [_record(run, r) for r in rows]

    def head(self, run: str) -> Head:
        """The run's last (seq, stored hash), or the genesis head (0, 32 zero bytes)."""
        check_run_id(run)
        row = self._read(
            lambda tx: tx.one(
                "SELECT seq, hash FROM journal WHERE tenant = ? AND run = ?"
                " ORDER BY seq DESC LIMIT 1",
                (self._tenant, run),
            )
        )
        if row is None:
            return Head.genesis()
        seq = _stored_int(row[0], "record seq", run, 1)
        return Head(seq, _stored_hash(row[1], "hash", run, seq))

    # --- leases --------------------------------------------------------------------------------

    def _check_ttl(self, ttl: int) -> int:
        return _check_int(ttl, "lease TTL (whole seconds)", 1)

    @staticmethod
    def _expiry(now: int, ttl: int) -> int:
        if now + ttl > MAX_INT63:
            raise UsageError(f"lease TTL {ttl} overflows the clock (now {now}, limit 2^63-1)")
        return now + ttl

    def _lease_row(self, tx: Tx, run: str) -> tuple[str, int, int, bool] | None:
        row = tx.one(
            "SELECT owner, epoch, expires_at, released FROM run_lease WHERE tenant = ? AND run = ?",
            (self._tenant, run),
        )
        if row is None:
            return None
        return (
            _stored_text(row[0], "lease owner", run),
            _stored_int(row[1], "lease epoch", run, 1),
            _stored_int(row[2], "lease expiry", run),
            _stored_bool(row[3], "lease released flag", run),
        )

    def acquire(self, run: str, owner: str, ttl: int) -> Lease:
        """Claim ``run`` for ``owner`` for ``ttl`` whole seconds (>= 1), bumping the epoch.

        A live lease (``expires_at > now``, not released) is refused even to its holder:
        :class:`LeaseHeldError`. Without a lease row the epoch is 1 + the highest epoch the
        run's records carry. The expiry ``now + ttl`` must fit in 2^63-1 (UsageError).
        """
        check_run_id(run)
        _check_label(owner, "lease owner")
        self._check_ttl(ttl)

        def work(tx: Tx) -> Lease:
            self._lock_run(tx, run)
            now = self._now(tx)
            expires_at = self._expiry(now, ttl)
            lease = self._lease_row(tx, run)
            if lease is None:
                row = tx.one(
                    "SELECT MAX(epoch) FROM journal WHERE tenant = ? AND run = ?",
                    (self._tenant, run),
                )
                top = 0 if row is None or row[0] is None else _stored_int(row[0], "epoch", run)
                epoch = top + 1
            else:
                holder, held, lease_expiry, released = lease
                if not released and lease_expiry > now:
                    raise LeaseHeldError(run, holder, held, lease_expiry - now)
                epoch = held + 1
            if epoch > MAX_INT63:
                raise UsageError(f"run {run} has used up its epochs")
            tx.execute(
                "INSERT INTO run_lease (tenant, run, owner, epoch, expires_at, released)"
                " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (tenant, run) DO UPDATE"
                " SET owner = excluded.owner, epoch = excluded.epoch,"
                " expires_at = excluded.expires_at, released = excluded.released",
                (self._tenant, run, owner, epoch, expires_at, False),
            )
            return Lease(run, owner, epoch, expires_at)

        return self._write(work)

    def renew(self, run: str, owner: str, epoch: int, ttl: int) -> Lease:
        """Extend the exact live (``owner``, ``epoch``) lease to ``now + ttl``, keeping the
        epoch; otherwise :class:`LeaseNotHeldError`, writing nothing."""
        check_run_id(run)
        _check_label(owner, "lease owner")
        _check_int(epoch, "epoch", 1)
        self._check_ttl(ttl)

        def work(tx: Tx) -> Lease:
            self._lock_run(tx, run)
            now = self._now(tx)
            lease = self._lease_row(tx, run)
            if lease is None:
                raise LeaseNotHeldError(run, owner, epoch)
            holder, held, lease_expiry, released = lease
            if released or lease_expiry <= now or holder != owner or held != epoch:
                raise LeaseNotHeldError(run, owner, epoch)
            expires_at = self._expiry(now, ttl)
            tx.execute(
                "UPDATE run_lease SET expires_at = ? WHERE tenant = ? AND run = ?",
                (expires_at, self._tenant, run),
            )
            return Lease(run, owner, epoch, expires_at)

        return self._write(work)

    def release(self, run: str, epoch: int) -> None:
        """Mark the lease at ``epoch`` released and expired (no later than now), keeping the
        epoch. Any other epoch, or no lease: nothing happens, and it is not an error."""
        check_run_id(run)
        _check_int(epoch, "epoch", 1)

        def work(tx: Tx) -> None:
            self._lock_run(tx, run)
            now = self._now(tx)
            tx.execute(
                "UPDATE run_lease SET released = ?,"
                " expires_at = CASE WHEN expires_at > ? THEN ? ELSE expires_at END"
                " WHERE tenant = ? AND run = ? AND epoch = ?",
                (True, now, now, self._tenant, run, epoch),
            )

        self._write(work)

    def abandoned_runs(self, limit: int) -> list[str]:
        """Runs whose lease expired (``expires_at <= now``) and was never released, oldest
        expiry first (ties by run ID)."""
        _check_int(limit, "limit", 1)

        def work(tx: Tx) -> list[tuple[Any, ...]]:
            expr, params = self._now_sql()
            return tx.all(
                "SELECT run FROM run_lease WHERE tenant = ? AND NOT released"  # noqa: S608
                f" AND expires_at <= {expr} ORDER BY expires_at, run LIMIT ?",
                (self._tenant, *params, limit),
            )

        return [_stored_run(r[0]) for r in self._read(work)]

    # --- seal and log --------------------------------------------------------------------------

    def seal(
        self,
        run: str,
        epoch: int,
        outcome: str,
        *,
        signatures: Sequence[RecordSignature | None] | None = None,
    ) -> Seal:
        """Append ``run``'s seal record, freeze the run, and enter the seal record's hash (the
        new head) into the tenant's log at the next position.

        ``outcome`` follows :func:`tlog.journal.check_outcome` (MalformedError). The seal
        record (:func:`tlog.journal.seal_body`) is the run's next record, under ``epoch``,
        signed by the handle's record signer — or, on the restore path, carrying
        ``signatures[0]`` (one entry, None for unsigned; checked as :meth:`append` checks
        them). Fenced like :meth:`append` (FencedError comes first, also for a re-seal). A
        sealed run returns its existing seal unchanged (first seal wins, whatever ``outcome``
        says now). A run without records cannot be sealed (UsageError). The seal record, the
        seal row, the position and the stored tree hashes are written in one transaction.
        """
        given = None if signatures is None else _check_signatures(signatures, 1)
        check_run_id(run)
        _check_int(epoch, "epoch", 1)
        check_outcome(outcome)
        tenant = self._tenant
        signer = self._record_signer if given is None else None

        def work(tx: Tx) -> Seal:
            self._lock_run(tx, run)
            lease_epoch, seal, head, now = self._run_state(tx, run)
            if lease_epoch is not None and lease_epoch != epoch:
                raise FencedError(run, epoch, lease_epoch)
            if seal is not None:
                return seal
            if head.seq == 0:
                raise UsageError(f"run {run} has no records: there is nothing to seal")
            if head.seq >= MAX_INT63:
                raise UsageError(f"run {run} has used up its seqs: it cannot take a seal record")
            seq = head.seq + 1
            rec = make_record(seal_body(run, seq, epoch, outcome), head.hash, signer)
            if given is not None:
                rec = Record(run, seq, rec.raw, head.hash, rec.hash, given[0])
            sig = rec.signature
            tx.execute(
                _INSERT_RECORD,
                (
                    tenant,
                    run,
                    seq,
                    epoch,
                    KIND_RUN_SEALED,
                    None,
                    None,
                    rec.raw,
                    head.hash,
                    rec.hash,
                    None if sig is None else sig.name,
                    None if sig is None else sig.key_id,
                    None if sig is None else sig.sig,
                ),
            )
            tx.execute(
                "INSERT INTO run_activity (tenant, run, updated_at) VALUES (?, ?, ?)"
                " ON CONFLICT (tenant, run) DO UPDATE SET updated_at = excluded.updated_at",
                (tenant, run, now),
            )
            size = self._lock_log(tx)
            start = merkle.stored_hash_count(size)
            hashes = merkle.stored_hashes_for_leaf(
                size, merkle.leaf_hash(rec.hash), self._reader(tx)
            )
            try:
                tx.executemany(
                    "INSERT INTO tree_hash (tenant, idx, hash) VALUES (?, ?, ?)",
                    [(tenant, start + i, h) for i, h in enumerate(hashes)],
                )
            except self._d.driver_errors as e:
                if self._d.unique_constraint(e) == "tree_hash_pk":
                    raise CorruptError(
                        f"stored tree hashes exist beyond the log size {size}"
                    ) from e
                raise
            tx.execute(
                "INSERT INTO run_seal (tenant, run, position, head, outcome, sealed_at)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (tenant, run, size, rec.hash, outcome, now),
            )
            tx.execute("UPDATE log_state SET size = ? WHERE tenant = ?", (size + 1, tenant))
            return Seal(run, size, rec.hash, outcome)

        return self._write(work)

    def _seal_of(self, run: str, row: Sequence[Any]) -> Seal:
        position, head, outcome = row
        return Seal(
            run,
            _stored_int(position, "log position", run),
            _stored_hash(head, "sealed head", run),
            _stored_text(outcome, "outcome", run),
        )

    def sealed(self, run: str) -> Seal | None:
        """The run's seal, or None."""
        check_run_id(run)
        row = self._read(
            lambda tx: tx.one(
                "SELECT position, head, outcome FROM run_seal WHERE tenant = ? AND run = ?",
                (self._tenant, run),
            )
        )
        return None if row is None else self._seal_of(run, row)

    def seals(self, after_position: int = -1, limit: int = 1000) -> list[Seal]:
        """Seals in log order from position ``after_position + 1`` (a deleted run's position
        is absent)."""
        _check_int(after_position, "after_position", -1)
        _check_int(limit, "limit", 1)
        rows = self._read(
            lambda tx: tx.all(
                "SELECT run, position, head, outcome FROM run_seal"
                " WHERE tenant = ? AND position > ? ORDER BY position LIMIT ?",
                (self._tenant, after_position, limit),
            )
        )
        return [self._seal_of(_stored_run(r[0]), r[1:]) for r in rows]

    def checkpoint(self) -> Checkpoint:
        """(origin, size, root) from the stored hashes: O(log size) reads, one snapshot."""

        def work(tx: Tx) -> Checkpoint:
            size = self._log_size(tx)
            return Checkpoint(self._origin, size, merkle.tree_hash(size, self._reader(tx)))

        return self._read(work)

    def _check_size(self, size: int, current: int, what: str) -> int:
        if size > current:
            raise UsageError(f"{what} {size} is beyond the log's size {current}")
        return size

    def tree_root(self, size: int) -> bytes:
        """The root at ``size`` (0 <= size <= the current size; UsageError beyond)."""
        _check_int(size, "tree size", 0)

        def work(tx: Tx) -> bytes:
            self._check_size(size, self._log_size(tx), "tree size")
            return merkle.tree_hash(size, self._reader(tx))

        return self._read(work)

    def consistency_proof(self, old: int, new: int | None = None) -> list[bytes]:
        """RFC 6962 PROOF(old, D[0:new]); ``new`` defaults to the current size.

        ``old > new`` or ``new`` beyond the log is a UsageError, never an empty proof; ``old``
        0 or ``old == new`` gives [].
        """
        _check_int(old, "old size", 0)
        if new is not None:
            _check_int(new, "new size", 0)

        def work(tx: Tx) -> list[bytes]:
            current = self._log_size(tx)
            n = current if new is None else self._check_size(new, current, "new size")
            if old > n:
                raise UsageError(f"old size {old} is beyond the new size {n}")
            if old in (0, n):
                return []
            return merkle.consistency_proof(old, n, self._reader(tx))

        return self._read(work)

    def inclusion_proof(self, run: str, size: int | None = None) -> Inclusion | None:
        """The sealed run's position and RFC 6962 path at ``size`` (default: now), in one
        snapshot; None when the run is not sealed or its position is not below ``size``.
        The stored leaf at the position must be the leaf hash of the sealed head
        (CorruptError otherwise)."""
        check_run_id(run)
        if size is not None:
            _check_int(size, "tree size", 0)

        def work(tx: Tx) -> Inclusion | None:
            row = tx.one(
                "SELECT position, head, outcome FROM run_seal WHERE tenant = ? AND run = ?",
                (self._tenant, run),
            )
            current = self._log_size(tx)
            n = current if size is None else self._check_size(size, current, "tree size")
            if row is None:
                return None
            seal = self._seal_of(run, row)
            if seal.position >= n:
                if seal.position >= current:
                    raise CorruptError(f"sealed at position {seal.position} beyond the log", run)
                return None
            reader = self._reader(tx)
            (leaf,) = reader.read_hashes([merkle.stored_hash_index(0, seal.position)])
            if leaf != merkle.leaf_hash(seal.head):
                raise CorruptError(f"the log's leaf {seal.position} is not this run's head", run)
            proof = merkle.inclusion_proof(seal.position, n, reader)
            return Inclusion(run, seal.position, n, seal.head, tuple(proof))

        return self._read(work)

    # --- published checkpoints -----------------------------------------------------------------

    def sign_checkpoint(self) -> bytes:
        """Sign the current checkpoint with the log key (name = origin), keep it, return the
        note as kept (an already kept note for that size, with its cosignatures, wins).

        Requires: the store was opened with its log key (UsageError otherwise). A kept note of
        the same size with another text is CorruptError: a log never signs two roots for one
        size.
        """
        signer = self._log_signer
        if signer is None:
            raise UsageError("signing a checkpoint needs the log key: open the store with it")
        tenant = self._tenant

        def work(tx: Tx) -> bytes:
            size = self._log_size(tx)
            text = Checkpoint(self._origin, size, merkle.tree_hash(size, self._reader(tx))).format()
            note = sign_note(text, [signer])
            if tx.execute(
                "INSERT INTO checkpoint (tenant, size, note) VALUES (?, ?, ?)"
                " ON CONFLICT (tenant, size) DO NOTHING",
                (tenant, size, note),
            ):
                return note
            row = tx.one(
                "SELECT note FROM checkpoint WHERE tenant = ? AND size = ?", (tenant, size)
            )
            assert row is not None
            kept, kept_text, _ = _stored_note(row[0], f"checkpoint {size}")
            if kept_text != text:
                raise CorruptError(
                    f"the kept checkpoint of size {size} has another text: the log would sign"
                    " two roots for one size"
                )
            return kept

        return self._write(work)

    def add_cosignatures(self, note: bytes, *, witness_keys: Sequence[str]) -> bytes:
        """Merge the signature lines of ``note`` into the kept note with the same text.

        ``note`` must parse as a checkpoint of this log (MalformedError / UsageError) whose text
        equals a kept note's (UsageError otherwise). A line under the log's key name must be
        the log's valid signature (InvalidSignatureError, or UsageError for another key ID).
        ``witness_keys`` are the vkeys of the witnesses whose cosignatures may be kept (0x04 or
        0x06; a 0x01 vkey is read as its cosignature/v1 form, :func:`tlog.keys.cosigner_from_vkey`).
        Every other line that is not already in the kept note byte for byte must be from one of
        them and verify (InvalidSignatureError); a line of any other key — a plain Ed25519
        (0x01) signature of a witness key included, which no export could carry — is refused
        (UsageError). So the kept note holds only lines an export can carry and that verify. A
        key that already has a line in the kept note keeps it. Nothing is written when it
        raises. Returns the note as kept.
        """
        if not isinstance(note, bytes):
            raise UsageError("a note is bytes")
        witnesses = _witness_verifiers(witness_keys)
        text, sigs = parse_note(note)
        cp = Checkpoint.parse(text)
        if cp.origin != self._origin:
            raise UsageError(f"the note is a checkpoint of {cp.origin!r}, not of {self._origin!r}")
        log = self._log_verifier
        others: list[Signature] = []
        for s in sigs:
            if s.name == log.name and s.key_id == log.key_id:
                if not log.verify(text, s.sig):
                    raise InvalidSignatureError(s.name, s.key_id)
                continue
            w = witnesses.get((s.name, s.key_id))
            if w is not None:
                if not w.verify(text, s.sig):
                    raise InvalidSignatureError(s.name, s.key_id)
            elif s.name == log.name:
                raise UsageError(f"the note has a line for {s.name} from another key")
            others.append(s)
        tenant = self._tenant

        def work(tx: Tx) -> bytes:
            row = tx.one(
                "SELECT note FROM checkpoint WHERE tenant = ? AND size = ?"  # noqa: S608
                + self._d.lock_suffix,
                (tenant, cp.size),
            )
            if row is None:
                raise UsageError(f"no checkpoint of size {cp.size} was signed by this store")
            kept, kept_text, kept_sigs = _stored_note(row[0], f"checkpoint {cp.size}")
            if kept_text != text:
                raise UsageError(
                    f"the note's text is not that of the kept checkpoint of size {cp.size}"
                )
            have = {(s.name, s.key_id) for s in kept_sigs}
            extra: list[Signature] = []
            for s in others:
                if s in kept_sigs:
                    continue  # kept already (verified when it was kept)
                if (s.name, s.key_id) not in witnesses:
                    raise UsageError(_unkeepable(s, witness_keys))
                if (s.name, s.key_id) not in have:
                    have.add((s.name, s.key_id))
                    extra.append(s)
            if not extra:
                return kept
            if len(kept_sigs) + len(extra) > MAX_SIGNATURES:
                raise UsageError(f"the merged note would carry more than {MAX_SIGNATURES} lines")
            merged = add_signatures(kept, extra)
            tx.execute(
                "UPDATE checkpoint SET note = ? WHERE tenant = ? AND size = ?",
                (merged, tenant, cp.size),
            )
            return merged

        return self._write(work)

    def import_checkpoint(self, note: bytes) -> None:
        """Keep ``note`` as given: a checkpoint of this log, signed by its key, whose text is
        this store's checkpoint text at its size (the root from the stored hashes).

        Malformed notes raise MalformedError. A note of another origin, with two lines for one
        key, without the log's line, with a log-name line of another key, of a size beyond
        the log, or whose text is not this log's at its size is a UsageError; an invalid log
        signature is an InvalidSignatureError. When a note of that size is kept already, the
        same bytes change nothing and different bytes are a UsageError. Cosignature lines are
        not verified (the caller did). Nothing is written when it raises.
        """
        if not isinstance(note, bytes):
            raise UsageError("a note is bytes")
        text, sigs = parse_note(note)
        cp = Checkpoint.parse(text)
        if cp.origin != self._origin:
            raise UsageError(f"the note is a checkpoint of {cp.origin!r}, not of {self._origin!r}")
        if note.count(b"\n") - text.count(b"\n") - 1 != len(sigs):
            # parse_note returns byte-identical repeated lines once; keep no such note.
            raise UsageError(f"checkpoint of size {cp.size}: the note repeats a signature line")
        log = self._log_verifier
        keys: set[tuple[str, int]] = set()
        for s in sigs:
            k = (s.name, s.key_id)
            if k in keys:
                raise UsageError(
                    f"checkpoint of size {cp.size}: two lines for the key {s.name}+{s.key_id:08x}"
                )
            keys.add(k)
            if s.name == log.name:
                if s.key_id != log.key_id:
                    raise UsageError(f"the note has a line for {s.name} from another key")
                if not log.verify(text, s.sig):
                    raise InvalidSignatureError(s.name, s.key_id)
        if (log.name, log.key_id) not in keys:
            raise UsageError(f"checkpoint of size {cp.size} carries no signature of the log key")
        tenant = self._tenant

        def work(tx: Tx) -> None:
            size = self._log_size(tx)
            if cp.size > size:
                raise UsageError(f"checkpoint of size {cp.size} is beyond the log's size {size}")
            own = Checkpoint(self._origin, cp.size, merkle.tree_hash(cp.size, self._reader(tx)))
            if own.format() != text:
                raise UsageError(
                    f"the note's text is not this log's checkpoint of size {cp.size}"
                    " (another root, or extension lines)"
                )
            if tx.execute(
                "INSERT INTO checkpoint (tenant, size, note) VALUES (?, ?, ?)"
                " ON CONFLICT (tenant, size) DO NOTHING",
                (tenant, cp.size, note),
            ):
                return
            row = tx.one(
                "SELECT note FROM checkpoint WHERE tenant = ? AND size = ?", (tenant, cp.size)
            )
            assert row is not None
            kept, _, _ = _stored_note(row[0], f"checkpoint {cp.size}")
            if kept != note:
                raise UsageError(f"another note of size {cp.size} is kept already")

        self._write(work)

    def published(self) -> list[bytes]:
        """Every kept checkpoint note, by increasing size."""
        rows = self._read(
            lambda tx: tx.all(
                "SELECT size, note FROM checkpoint WHERE tenant = ? ORDER BY size",
                (self._tenant,),
            )
        )
        return [_stored_note(note, f"checkpoint {size}")[0] for size, note in rows]

    # --- indexes -------------------------------------------------------------------------------

    def runs_by_outcome(self, outcome: str, limit: int) -> list[str]:
        """Runs whose last conclusion is ``outcome``, newest conclusion first."""
        if not isinstance(outcome, str):
            raise UsageError("an outcome is a string")
        _check_int(limit, "limit", 1)
        rows = self._read(
            lambda tx: tx.all(
                "SELECT run FROM run_outcome WHERE tenant = ? AND outcome = ?"
                " ORDER BY ordinal DESC LIMIT ?",
                (self._tenant, outcome, limit),
            )
        )
        return [_stored_run(r[0]) for r in rows]

    def count_by_outcome(self, outcome: str) -> int:
        """How many runs' last conclusion is ``outcome`` (an exact count)."""
        if not isinstance(outcome, str):
            raise UsageError("an outcome is a string")
        row = self._read(
            lambda tx: tx.one(
                "SELECT COUNT(*) FROM run_outcome WHERE tenant = ? AND outcome = ?",
                (self._tenant, outcome),
            )
        )
        assert row is not None
        return _stored_int(row[0], "count")

    def case_history(self, case: str, limit: int) -> list[Record]:
        """Records of ``case`` in (run, seq) order, at most ``limit``, each hash-checked."""
        check_case_id(case)
        _check_int(limit, "limit", 1)
        rows = self._read(
            lambda tx: tx.all(
                f"SELECT run, {_RECORD_COLUMNS} FROM journal"  # noqa: S608
                " WHERE tenant = ? AND case_id = ?"
                " ORDER BY run, seq LIMIT ?",
                (self._tenant, case, limit),
            )
        )
        return [_record(_stored_run(r[0]), r[1:]) for r in rows]

    def recent_runs(self, after: tuple[int, str] | None, limit: int) -> list[tuple[str, int]]:
        """(run, updated_at) by (updated_at DESC, run DESC), strictly after the cursor
        ``after = (updated_at, run)``."""
        _check_int(limit, "limit", 1)
        t = self._tenant
        if after is None:
            sql = (
                "SELECT run, updated_at FROM run_activity WHERE tenant = ?"
                " ORDER BY updated_at DESC, run DESC LIMIT ?"
            )
            params: tuple[Any, ...] = (t, limit)
        else:
            if not isinstance(after, tuple | list) or len(after) != 2:
                raise UsageError("the cursor is a tuple (updated_at, run)")
            at = _check_int(after[0], "cursor time", 0)
            if not isinstance(after[1], str):
                raise UsageError("the cursor's run is a string")
            sql = (
                "SELECT run, updated_at FROM run_activity WHERE tenant = ?"
                # Strictly after (at, run) in (updated_at DESC, run DESC) order; the first
                # term lets the index seek instead of scanning the newer rows.
                " AND updated_at <= ? AND (updated_at < ? OR run < ?)"
                " ORDER BY updated_at DESC, run DESC LIMIT ?"
            )
            params = (t, at, at, after[1], limit)
        rows = self._read(lambda tx: tx.all(sql, params))
        return [(_stored_run(r[0]), _stored_int(r[1], "activity time")) for r in rows]

    def runs(self, after: str | None, limit: int) -> list[str]:
        """Every run with records, by run ID (bytewise), strictly after ``after``."""
        _check_int(limit, "limit", 1)
        if after is not None and not isinstance(after, str):
            raise UsageError("the cursor is a run ID")
        rows = self._read(
            lambda tx: tx.all(
                "SELECT run FROM run_activity WHERE tenant = ? AND run > ? ORDER BY run LIMIT ?",
                (self._tenant, "" if after is None else after, limit),
            )
        )
        return [_stored_run(r[0]) for r in rows]

    def request_cancel(self, run: str, actor: str, reason: str) -> bool:
        """Record a request to cancel ``run`` (no lease needed; the run need not exist).
        True if this call made it; False if one exists (the first asker stays)."""
        check_run_id(run)
        _check_label(actor, "actor")
        _check_label(reason, "reason", empty=True, limit=4096)

        def work(tx: Tx) -> bool:
            self._lock_run(tx, run)
            now = self._now(tx)
            return (
                tx.execute(
                    "INSERT INTO run_cancel (tenant, run, actor, reason, requested_at)"
                    " VALUES (?, ?, ?, ?, ?) ON CONFLICT (tenant, run) DO NOTHING",
                    (self._tenant, run, actor, reason, now),
                )
                == 1
            )

        return self._write(work)

    def cancellation(self, run: str) -> Cancellation | None:
        """The first cancellation request for ``run``, or None."""
        check_run_id(run)
        row = self._read(
            lambda tx: tx.one(
                "SELECT actor, reason, requested_at FROM run_cancel WHERE tenant = ? AND run = ?",
                (self._tenant, run),
            )
        )
        if row is None:
            return None
        return Cancellation(
            _stored_text(row[0], "cancellation actor", run),
            _stored_text(row[1], "cancellation reason", run),
            _stored_int(row[2], "cancellation time", run),
        )

    # --- test-only hooks (private; never call them outside tests) ------------------------------

    def _tamper_for_test(self, run: str, seq: int, raw: bytes) -> None:
        """TEST ONLY: overwrite record ``seq``'s stored body with ``raw``, leaving its hash."""
        n = self._write(
            lambda tx: tx.execute(
                "UPDATE journal SET raw = ? WHERE tenant = ? AND run = ? AND seq = ?",
                (raw, self._tenant, run, seq),
            )
        )
        if n != 1:
            raise UsageError(f"run {run} has no record {seq}")

    def _delete_run_for_test(self, run: str) -> None:
        """TEST ONLY: delete a run's records, seal row, exactly-once keys, outcome and activity
        rows; its lease row, log position and stored hashes stay (the position is never
        reused)."""

        def work(tx: Tx) -> None:
            for table in ("journal", "effect_once", "run_seal", "run_outcome", "run_activity"):
                tx.execute(f"DELETE FROM {table} WHERE tenant = ? AND run = ?", (self._tenant, run))  # noqa: S608 - fixed table names

        self._write(work)

    def _execute_for_test(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """TEST ONLY: run one statement (``?`` placeholders) in a write transaction, e.g. to
        plant a malformed row; returns its rows, if any."""
        return self._write(lambda tx: tx.rows_if_any(sql, params))


def _read_meta(tx: Tx) -> tuple[str, str]:
    """(base origin, log vkey) from ``meta``; UsageError when the store is not initialised."""
    row = tx.one(tx.dialect.meta_exists_sql)
    if row is None or not row[0]:
        raise UsageError(NOT_INITIALISED)
    meta = tx.one("SELECT schema_version, base_origin, log_vkey FROM meta WHERE singleton = 1")
    if meta is None:
        raise UsageError(NOT_INITIALISED)
    version, base, vkey = meta
    if version != SCHEMA_VERSION:
        raise UsageError(
            f"the store's schema version is {version!r}, this code reads {SCHEMA_VERSION}"
        )
    return _stored_text(base, "base origin"), _stored_text(vkey, "log key")


__all__ = [
    "CONSTRAINTS",
    "MAX_ATTEMPTS",
    "SCHEMA_VERSION",
    "Dialect",
    "SQLStore",
    "Session",
    "Tx",
    "schema",
]
