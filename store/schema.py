"""The journal's schema: its tables, its constraints, and the readers of its rows.

Schema (created idempotently by :meth:`store.sql.SQLStore._initialise`; the tenant leads every
key)::

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
    witness_key  (tenant, name, key_id, vkey, first_seen)            PK (tenant, name,
                 key_id): the witness keys the tenant's exports declare (below)
    run_admission (tenant, admission_key, run, claimed_at)           PK (tenant,
                 admission_key), index (tenant, claimed_at): the admission keys (below)
    run_source   (tenant, run, source, updated_at)      PK (tenant, run), index (tenant,
                 source, updated_at DESC, run DESC): recent runs by source (below)
    run_waiting  (tenant, run, until_at, message, seq)  PK (tenant, run), index (tenant,
                 until_at, run): the waiting runs (below)
    subscription (tenant, id, url, token, run, created_at)           PK (tenant, id): the
                 outbox's receivers (:mod:`store.outbox`); run NULL: the whole tenant
    delivery     (tenant, subscription, run, next_seq, attempts, next_attempt_at,
                  last_error, claim)                    PK (tenant, subscription, run), index
                 delivery_due (tenant, next_attempt_at) WHERE next_attempt_at IS NOT NULL

Text keys (tenant, run, case) compare bytewise (SQLite's BINARY, PostgreSQL ``COLLATE "C"``),
so database order equals Python's ``str`` order and paging cursors agree with the database.
Hashes and bodies are bytes columns; times are whole Unix seconds from the store clock (the
injected clock, else PostgreSQL's server clock or the process clock on SQLite), never written
into the journal.

``witness_key`` remembers, per tenant, the cosignature vkey (type 0x04 or 0x06, canonical text
:func:`tlog.keys.format_vkey`; ``name`` and ``key_id`` are its key name and ID, the identity a
note's signature line names) of every witness whose cosignature a kept checkpoint holds: written
by ``add_cosignatures`` in the transaction that keeps the line, and by a restore for each
``witness-key`` of the export's header. ``first_seen`` is the store clock when it was first
remembered. An export declares them all, so that a store which published to witnesses exports
without being told their keys again.

The three tables of version 4 are *derived* from records, written by ``append`` (and ``seal``)
in the transaction that writes the records, so a restore, which replays the records through
``append``, rebuilds them. ``run_admission`` holds the admission key of every run whose first
record is a ``RunAdmitted`` (:func:`tlog.journal.admission_of`), with the run holding it; its
primary key is what refuses a second run with the key. ``claimed_at`` is the store clock when
it was claimed, used only by ``forget_admissions``, which deletes rows (the only deletion of
a derived row that is not a later record's doing). ``run_source`` holds the source of the same
runs, never deleted, and the run's last activity time, moved with ``run_activity``.
``run_waiting`` holds the runs whose last record is a ``RunSuspended``
(:func:`tlog.journal.suspension_of`): ``until_at`` and ``message`` from its data, ``seq`` its
seq; the row is deleted by the next append or the seal. The upgrade from version 3 backfills
all three from the journal (:func:`backfill_v4`).

The tables are created by :func:`store.db.create_tables` (one write transaction, under the
engine's init lock for :data:`OWNER`); ``meta`` is read back by :func:`open_meta` on every
open, which first brings a store of an older schema version that this code upgrades
(:data:`UPGRADES`) to :data:`SCHEMA_VERSION`, in one write transaction (so opening a store of
an older version needs write access once). Every value read from a row passes a check of its
shape (:data:`STORED`, :func:`record`, :func:`stored_run`, :func:`stored_note`): a value of
the wrong shape raises :class:`~store.errors.CorruptError`, naming the run (and the record)
when known.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from store.db import Session, StoredValues, Tx
from store.errors import BackendError, CommitUnknownError, CorruptError
from tlog.errors import MalformedError, UsageError
from tlog.journal import (
    KIND_RUN_ADMITTED,
    KIND_RUN_SUSPENDED,
    Record,
    RecordSignature,
    admission_of,
    chain_hash,
    check_run_id,
    decode_body,
    split_admission_key,
    suspension_of,
)
from tlog.note import Signature, parse_note

SCHEMA_VERSION = 4
"""Version of the schema below, recorded in ``meta``. A store of version 2 is upgraded when it is
opened or initialised (:data:`UPGRADES`); one of any other version is refused. Version 2: a seal
appends the run's seal record (kind ``RunSealed``), whose hash is the sealed head; a version-1
store's seals have none, and its exports would not verify. Version 3: the table
``witness_key``. Version 4: the tables ``run_admission``, ``run_source`` and
``run_waiting``, and the outbox (``subscription``, ``delivery``)."""

OWNER = "tlog-store"
"""The schema's name for the engine's init lock."""

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
    "witness_key_pk": ("witness_key", ("tenant", "name", "key_id")),
    # issue 13: admissions, sources, waiting
    "run_admission_pk": ("run_admission", ("tenant", "admission_key")),
    "run_source_pk": ("run_source", ("tenant", "run")),
    "run_waiting_pk": ("run_waiting", ("tenant", "run")),
    # issue 13: outbox
    "subscription_pk": ("subscription", ("tenant", "id")),
    "delivery_pk": ("delivery", ("tenant", "subscription", "run")),
}
"""Every unique constraint of the schema: name -> (table, columns). Dialects report these names."""

WITNESS_KEY_DDL = """CREATE TABLE IF NOT EXISTS witness_key (
        tenant {key} NOT NULL,
        name TEXT NOT NULL,
        key_id BIGINT NOT NULL,
        vkey TEXT NOT NULL,
        first_seen BIGINT NOT NULL,
        CONSTRAINT witness_key_pk PRIMARY KEY (tenant, name, key_id))"""
"""The table of version 3: in :data:`DDL`, and the upgrade from version 2."""

# issue 13: admissions, sources, waiting
ADMISSION_DDL = (
    """CREATE TABLE IF NOT EXISTS run_admission (
        tenant {key} NOT NULL,
        admission_key {key} NOT NULL,
        run {key} NOT NULL,
        claimed_at BIGINT NOT NULL,
        CONSTRAINT run_admission_pk PRIMARY KEY (tenant, admission_key))""",
    """CREATE INDEX IF NOT EXISTS run_admission_claimed
        ON run_admission (tenant, claimed_at)""",
    """CREATE TABLE IF NOT EXISTS run_source (
        tenant {key} NOT NULL,
        run {key} NOT NULL,
        source {key} NOT NULL,
        updated_at BIGINT NOT NULL,
        CONSTRAINT run_source_pk PRIMARY KEY (tenant, run)){compact}""",
    """CREATE INDEX IF NOT EXISTS run_source_recent
        ON run_source (tenant, source, updated_at DESC, run DESC)""",
    """CREATE TABLE IF NOT EXISTS run_waiting (
        tenant {key} NOT NULL,
        run {key} NOT NULL,
        until_at BIGINT NOT NULL,
        message TEXT,
        seq BIGINT NOT NULL,
        CONSTRAINT run_waiting_pk PRIMARY KEY (tenant, run))""",
    """CREATE INDEX IF NOT EXISTS run_waiting_due
        ON run_waiting (tenant, until_at, run)""",
)
"""The tables of version 4 (see the module docstring): in :data:`DDL`, and the upgrade from
version 3."""

CLAIM_ADMISSION = (
    "INSERT INTO run_admission (tenant, admission_key, run, claimed_at) VALUES (?, ?, ?, ?)"
    " ON CONFLICT (tenant, admission_key) DO NOTHING"
)
"""Claim an admission key: one row written, or none when the key is held (the arbiter)."""

INSERT_SOURCE = (
    "INSERT INTO run_source (tenant, run, source, updated_at) VALUES (?, ?, ?, ?)"
    " ON CONFLICT (tenant, run) DO NOTHING"
)
UPSERT_WAITING = (
    "INSERT INTO run_waiting (tenant, run, until_at, message, seq) VALUES (?, ?, ?, ?, ?)"
    " ON CONFLICT (tenant, run) DO UPDATE SET until_at = excluded.until_at,"
    " message = excluded.message, seq = excluded.seq"
)
CLEAR_WAITING = "DELETE FROM run_waiting WHERE tenant = ? AND run = ?"


def next_counter(tx: Tx, tenant: str, name: str, what: str) -> int:
    """The tenant's counter ``name`` incremented by one (an upsert, never MAX()+1: two
    transactions never get one value), its new value; ``what`` names it in a CorruptError."""
    row = tx.one(
        "INSERT INTO counter (tenant, name, value) VALUES (?, ?, 1)"
        " ON CONFLICT (tenant, name) DO UPDATE SET value = counter.value + 1"
        " RETURNING value",
        (tenant, name),
    )
    assert row is not None
    return stored_int(row[0], what, lo=1)


def index_outcome(tx: Tx, tenant: str, run: str, outcome: str) -> None:
    """Make ``outcome`` the run's last conclusion in the outcome index, with a fresh ordinal
    (the per-tenant counter :data:`CONCLUSION_COUNTER`)."""
    ordinal = next_counter(tx, tenant, CONCLUSION_COUNTER, "conclusion ordinal")
    tx.execute(
        "INSERT INTO run_outcome (tenant, run, outcome, ordinal) VALUES (?, ?, ?, ?)"
        " ON CONFLICT (tenant, run) DO UPDATE"
        " SET outcome = excluded.outcome, ordinal = excluded.ordinal",
        (tenant, run, outcome, ordinal),
    )


# issue 13: outbox
OUTBOX_DDL = (
    """CREATE TABLE IF NOT EXISTS subscription (
        tenant {key} NOT NULL,
        id BIGINT NOT NULL,
        url TEXT NOT NULL,
        token TEXT,
        run {key},
        created_at BIGINT NOT NULL,
        CONSTRAINT subscription_pk PRIMARY KEY (tenant, id))""",
    """CREATE TABLE IF NOT EXISTS delivery (
        tenant {key} NOT NULL,
        subscription BIGINT NOT NULL,
        run {key} NOT NULL,
        next_seq BIGINT NOT NULL,
        attempts BIGINT NOT NULL,
        next_attempt_at BIGINT,
        last_error TEXT,
        claim TEXT,
        CONSTRAINT delivery_pk PRIMARY KEY (tenant, subscription, run))""",
    """CREATE INDEX IF NOT EXISTS delivery_due
        ON delivery (tenant, next_attempt_at) WHERE next_attempt_at IS NOT NULL""",
)
"""The outbox's tables (:mod:`store.outbox`), of version 4: in :data:`DDL`, and the upgrade
from version 3."""

# The DDL, with the dialect's column types substituted for {blob} (bytes), {key} (text that
# orders bytewise), {bool} and {compact} (a table-storage suffix for small keyed rows).
DDL = (
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
    WITNESS_KEY_DDL,
    # issue 13: admissions, sources, waiting
    *ADMISSION_DDL,
    # issue 13: outbox
    *OUTBOX_DDL,
)

Upgrade = str | Callable[[Tx], None]
"""One step of an upgrade: a statement (``{type}`` names as in :data:`DDL`), or a function of
the upgrade's transaction (a backfill)."""


# issue 13: admissions, sources, waiting
def backfill_v4(tx: Tx) -> None:
    """Fill the derived tables of version 4 from the journal of a version-3 store, as ``append``
    would have: the admission key and source of every run whose record 1 is a well-formed
    ``RunAdmitted`` (claimed at the run's last activity time, the latest it can have been
    claimed, so ``forget_admissions`` errs towards keeping it; a key two runs name is held by
    the first in (tenant, run) order), the waiting runs (last record a well-formed
    ``RunSuspended``), and the outcome of every sealed run in log order (the outcome index
    follows the seal record since version 4). Records of these kinds that are not well formed
    were written before the kinds meant anything to the store, and are left unindexed."""
    for tenant, run, raw, updated_at in tx.all(
        "SELECT j.tenant, j.run, j.raw, a.updated_at FROM journal AS j"
        " JOIN run_activity AS a ON a.tenant = j.tenant AND a.run = j.run"
        " WHERE j.kind = ? AND j.seq = 1 ORDER BY j.tenant, j.run",
        (KIND_RUN_ADMITTED,),
    ):
        try:
            key = admission_of(decode_body(raw))
        except MalformedError:
            continue
        assert key is not None
        tx.execute(CLAIM_ADMISSION, (tenant, key, run, updated_at))
        tx.execute(INSERT_SOURCE, (tenant, run, split_admission_key(key)[0], updated_at))
    for tenant, run, seq, raw in tx.all(
        "SELECT j.tenant, j.run, j.seq, j.raw FROM journal AS j WHERE j.kind = ? AND j.seq ="
        " (SELECT MAX(k.seq) FROM journal AS k WHERE k.tenant = j.tenant AND k.run = j.run)",
        (KIND_RUN_SUSPENDED,),
    ):
        try:
            wait = suspension_of(decode_body(raw))
        except MalformedError:
            continue
        assert wait is not None
        tx.execute(UPSERT_WAITING, (tenant, run, wait.until, wait.message, seq))
    for tenant, run, outcome in tx.all(
        "SELECT tenant, run, outcome FROM run_seal ORDER BY tenant, position"
    ):
        index_outcome(tx, tenant, run, outcome)


UPGRADES: dict[int, tuple[Upgrade, ...]] = {
    # 2 -> 3: the remembered witness keys (an upgraded store remembers none yet: the keys of the
    # cosignatures it kept before are remembered when they are merged again, or declared).
    2: (WITNESS_KEY_DDL,),
    3: (
        # issue 13: admissions, sources, waiting
        *ADMISSION_DDL,
        backfill_v4,
        # issue 13: outbox (an upgraded store has no subscriptions yet)
        *OUTBOX_DDL,
    ),
}
"""Steps that take a store from schema version N to N + 1 (:data:`Upgrade`), run by
:func:`upgrade` in one write transaction."""


def schema(types: dict[str, str]) -> list[str]:
    """The schema's statements for a dialect's column ``types`` (keys: blob, key, bool, compact)."""
    return [stmt.format(**types) for stmt in DDL]


class JournalSession(Session):
    """The engine's session, raising the journal's errors (:mod:`store.errors`)."""

    backend_error = BackendError
    commit_unknown_error = CommitUnknownError
    closed_message = "the store is closed"
    unknown_advice = "re-read before retrying"


def _meta(tx: Tx) -> tuple[object, str, str]:
    """(schema version as stored, base origin, log vkey); UsageError when not initialised."""
    row = tx.one(tx.dialect.table_exists_sql("meta"))
    if row is None or not row[0]:
        raise UsageError(NOT_INITIALISED)
    meta = tx.one("SELECT schema_version, base_origin, log_vkey FROM meta WHERE singleton = 1")
    if meta is None:
        raise UsageError(NOT_INITIALISED)
    version, base, vkey = meta
    return version, stored_text(base, "base origin"), stored_text(vkey, "log key")


def _upgradable(version: object) -> bool:
    """``version`` is this code's, or one it upgrades (UsageError otherwise)."""
    if version == SCHEMA_VERSION and isinstance(version, int):
        return False
    if isinstance(version, int) and not isinstance(version, bool) and version in UPGRADES:
        return True
    raise UsageError(f"the store's schema version is {version!r}, this code reads {SCHEMA_VERSION}")


def read_meta(tx: Tx) -> tuple[str, str]:
    """(base origin, log vkey) from ``meta`` of a store of :data:`SCHEMA_VERSION`; UsageError
    when the store is not initialised or has another version (see :func:`open_meta`)."""
    version, base, vkey = _meta(tx)
    if _upgradable(version):
        raise UsageError(
            f"the store's schema version is {version!r}, this code reads {SCHEMA_VERSION}:"
            " open it to upgrade it"
        )
    return base, vkey


def upgrade(tx: Tx) -> tuple[str, str]:
    """Bring the store to :data:`SCHEMA_VERSION` (nothing to do when it is there already) and
    return :func:`read_meta`'s (base origin, log vkey). Requires: a write transaction.

    Under the engine's init lock, then the version is read: a concurrent upgrader (another
    process opening the same old store) has finished, and this one finds nothing to do. Every
    statement of :data:`UPGRADES` is idempotent (``IF NOT EXISTS``); a backfill runs in the
    transaction that moves the version, so it runs once.
    """
    tx.dialect.init_lock(tx, OWNER)
    version, _, _ = _meta(tx)
    if _upgradable(version):
        assert isinstance(version, int)
        while version < SCHEMA_VERSION:
            for step in UPGRADES[version]:
                if isinstance(step, str):
                    tx.execute(step.format(**tx.dialect.types))
                else:
                    step(tx)
            version += 1
        tx.execute("UPDATE meta SET schema_version = ? WHERE singleton = 1", (version,))
    return read_meta(tx)


def open_meta(session: Session) -> tuple[str, str]:
    """(base origin, log vkey) of the store ``session`` reaches, read when a handle opens: one
    read transaction, and for a store of an older version that this code upgrades, one write
    transaction that upgrades it first (:func:`upgrade`). UsageError when it is not
    initialised or of a version this code neither reads nor upgrades."""
    version, base, vkey = session.transact(False, _meta)
    if not _upgradable(version):
        return base, vkey
    return session.transact(True, upgrade)


# --- rows ------------------------------------------------------------------------------------

STORED = StoredValues(CorruptError)
"""The shape checks of stored values; the extra arguments locate the value (run, seq)."""


def stored_int(value: object, what: str, run: str | None = None, lo: int = 0) -> int:
    return STORED.integer(value, what, lo, run)


def stored_hash(value: object, what: str, run: str | None = None, seq: int | None = None) -> bytes:
    return STORED.blob(value, what, 32, run, seq)


def stored_text(value: object, what: str, run: str | None = None) -> str:
    return STORED.text(value, what, run)


def stored_bool(value: object, what: str, run: str | None = None) -> bool:
    return STORED.boolean(value, what, run)


def stored_run(value: object) -> str:
    try:
        if not isinstance(value, str):
            raise MalformedError("not text")
        check_run_id(value)
    except MalformedError:
        raise CorruptError(f"stored run ID {value!r} does not parse") from None
    return value


def stored_note(value: object, what: str) -> tuple[bytes, bytes, list[Signature]]:
    if not isinstance(value, bytes):
        raise CorruptError(f"stored {what} is not bytes")
    try:
        text, sigs = parse_note(value)
    except MalformedError as e:
        raise CorruptError(f"stored {what} is not a signed note: {e}") from None
    return value, text, sigs


RECORD_COLUMNS = "seq, raw, prev_hash, hash, sig_name, sig_key_id, sig"

INSERT_RECORD = (
    "INSERT INTO journal (tenant, run, seq, epoch, kind, case_id, effect_key, raw, prev_hash,"
    " hash, sig_name, sig_key_id, sig) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


def record_row(
    tenant: str, epoch: int, kind: str, case: str | None, effect_key: str | None, rec: Record
) -> tuple[Any, ...]:
    """The :data:`INSERT_RECORD` parameters of ``rec``."""
    sig = rec.signature
    return (
        tenant,
        rec.run,
        rec.seq,
        epoch,
        kind,
        case,
        effect_key,
        rec.raw,
        rec.prev_hash,
        rec.hash,
        None if sig is None else sig.name,
        None if sig is None else sig.key_id,
        None if sig is None else sig.sig,
    )


def record(run: str, row: Sequence[Any]) -> Record:
    """A stored journal row (:data:`RECORD_COLUMNS`), checked."""
    seq_v, raw, prev, h, sig_name, sig_key_id, sig = row
    seq = stored_int(seq_v, "record seq", run, lo=1)
    if not isinstance(raw, bytes):
        raise CorruptError("stored body is not bytes", run, seq)
    prev = stored_hash(prev, "previous hash", run, seq)
    h = stored_hash(h, "hash", run, seq)
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


__all__ = [
    "ADMISSION_DDL",
    "CLAIM_ADMISSION",
    "CLEAR_WAITING",
    "CONCLUSION_COUNTER",
    "CONSTRAINTS",
    "DDL",
    "INSERT_RECORD",
    "INSERT_SOURCE",
    "NOT_INITIALISED",
    "OUTBOX_DDL",
    "OWNER",
    "RECORD_COLUMNS",
    "SCHEMA_VERSION",
    "STORED",
    "UPGRADES",
    "UPSERT_WAITING",
    "WITNESS_KEY_DDL",
    "JournalSession",
    "Upgrade",
    "backfill_v4",
    "index_outcome",
    "next_counter",
    "open_meta",
    "read_meta",
    "record",
    "record_row",
    "schema",
    "stored_bool",
    "stored_hash",
    "stored_int",
    "stored_note",
    "stored_run",
    "stored_text",
    "upgrade",
]
