"""The inbox's schema: a third schema on the storage engine, beside the journal's.

Tables (created idempotently by :func:`create`; the tenant leads every key and every index, so
that a range over one tenant's rows cannot see another's — one tenant's event can never match
another tenant's waiting run, even with identical correlation values)::

    inbox_meta   (singleton=1, schema_version)
    inbox_event  (tenant, source, id, position, kind, keys, payload, payload_hash, received_at,
                  claimed_by, claimed_at, held, dead, dead_reason, dead_at, delivered_seq,
                  claimed_for, indexed)
                 PK (tenant, position)                the event's leaf in the inbox log
                 UNIQUE (tenant, source, id)          the dedup key: the pair, never id alone
                 index inbox_event_live (tenant, received_at, position)
                       WHERE indexed AND claimed_by IS NULL AND NOT dead  — the sweep's walk
                 index inbox_event_dead (tenant, position) WHERE dead  — dead letters
                 index inbox_event_held (tenant, claimed_by, position) WHERE held
                                                      — what a run holds claimed
    inbox_match  (tenant, kind, namespace, value, position, source, id)
                 PK (tenant, kind, namespace, value, position): the *live* events (unclaimed,
                 not dead) by correlation key, oldest first; a row is deleted in the
                 transaction that claims or dead-letters its event, so the oldest claimable
                 event for a key is the first row of its range, never the end of a walk over
                 claimed ones
    inbox_wait   (tenant, run, effect_key, namespace, value, kind, case_id, step, number,
                  created_at)                         PK (tenant, run, effect_key, namespace,
                 value): one row per key of a registered wait; ``number`` orders waits by
                 registration (the per-tenant counter ``inbox-wait``), shared by a wait's rows
                 index inbox_wait_match (tenant, kind, namespace, value, number)
                 index inbox_wait_order (tenant, number)

**Indexed in batches.** A buffered event's transaction writes its row alone (``indexed``
false): its position, and the dedup key that a duplicate is refused by. Its inbox-log leaf
(``tree_hash``, ``log_state.size``), its correlation keys (``inbox_match``) and its place in the
live index are written together for every :data:`INDEX_BATCH` events
(:meth:`store.inbox.core.Inbox.catch_up`), and before anything reads them: a claim by key,
``match``, a sweep, a checkpoint, a receipt, an export, a targeted delivery. Why: a durable
commit costs the disk a page per index it touches; one event a commit touched nine pages, now
two (the event's page at the end of the table, the dedup key's page) and its share of its
batch's, whose pages are written once for all of its events (3.8 pages a buffer in all,
``bench/inbox_bench.py``). A batch of :data:`INDEX_AT_ONCE` or more new events writes its
indexes at once. The inbox log's stored size is therefore the size of its indexed prefix; the
events after it are the *pending* ones, at most a batch: a prefix of the log, never anything
but the log.

Columns: ``keys`` is the canonical JSON of the event's keys (:func:`tlog.inbox.keys_json`);
``payload`` the canonical JSON of its payload, SQL NULL once erased (shed by ``unsubscribe`` or
``erase``), while ``payload_hash`` stays; ``held`` is true from the claim until the claiming
run unsubscribes; ``delivered_seq`` is the seq of the run's ``EventDelivered`` record once
journaled; ``claimed_for`` is the effect key of the wait the claim satisfied, so that a run's
crash-recovery re-claim gives each of its waits back its own event, never another wait's;
``indexed`` is true once the event's leaf, match rows and live-index entry are written.
Times are the store clock's whole seconds.

The inbox log lives in the journal schema's log tables (``log_state``, ``tree_hash``,
``checkpoint``, ``witness_key``), under the log name ``<tenant>/inbox``: a tenant has no ``/``,
so no tenant's journal log can have that name. Its origin is ``<base origin>/<tenant>/inbox``
(:func:`tlog.inbox.inbox_origin`). The per-tenant counter is the journal's ``counter`` table.
So the inbox depends on the journal schema in the same database, and never the reverse.
"""

from __future__ import annotations

from typing import Any

from store.db import StoredValues, Tx, create_tables
from store.errors import CorruptError
from tlog.errors import UsageError

SCHEMA_VERSION = 2
"""1: the first; 2: ``indexed`` and the batched indexes (an upgrade of 1 adds the column, true
for every event, and the new live index: :func:`upgrade`)."""
INDEX_BATCH = 256
"""Pending events whose indexes are written together (the module docstring): a buffer that
makes this many pending writes them in its transaction."""
INDEX_AT_ONCE = 32
"""A batch of this many new events writes its indexes in its own transaction, with those of
any pending before it: a large batch gains nothing from waiting (its pages are shared by its
events already), and its own are written from memory, not read back."""
OWNER = "tlog-inbox"
"""The schema's name for the engine's init lock."""
WAIT_COUNTER = "inbox-wait"
"""The per-tenant counter that numbers waits in registration order."""
LOG_SUFFIX = "inbox"
"""The inbox log's name is ``<tenant>/<LOG_SUFFIX>``."""

LIVE_INDEX = (
    "CREATE INDEX IF NOT EXISTS inbox_event_live ON inbox_event (tenant, received_at, position)"
    " WHERE indexed AND claimed_by IS NULL AND NOT dead"
)
DDL = (
    """CREATE TABLE IF NOT EXISTS inbox_meta (
        singleton BIGINT NOT NULL PRIMARY KEY CHECK (singleton = 1),
        schema_version BIGINT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS inbox_event (
        tenant {key} NOT NULL,
        source {key} NOT NULL,
        id {key} NOT NULL,
        position BIGINT NOT NULL,
        kind TEXT NOT NULL,
        keys {blob} NOT NULL,
        payload {blob},
        payload_hash {blob} NOT NULL,
        received_at BIGINT NOT NULL,
        claimed_by {key},
        claimed_at BIGINT,
        held {bool} NOT NULL,
        dead {bool} NOT NULL,
        dead_reason TEXT,
        dead_at BIGINT,
        delivered_seq BIGINT,
        claimed_for {key},
        indexed {bool} NOT NULL DEFAULT TRUE,
        CONSTRAINT inbox_event_position PRIMARY KEY (tenant, position),
        CONSTRAINT inbox_event_pk UNIQUE (tenant, source, id)){compact}""",
    LIVE_INDEX,
    """CREATE INDEX IF NOT EXISTS inbox_event_dead ON inbox_event (tenant, position) WHERE dead""",
    """CREATE INDEX IF NOT EXISTS inbox_event_held
        ON inbox_event (tenant, claimed_by, position) WHERE held""",
    """CREATE TABLE IF NOT EXISTS inbox_match (
        tenant {key} NOT NULL,
        kind {key} NOT NULL,
        namespace {key} NOT NULL,
        value {key} NOT NULL,
        position BIGINT NOT NULL,
        source {key} NOT NULL,
        id {key} NOT NULL,
        CONSTRAINT inbox_match_pk
            PRIMARY KEY (tenant, kind, namespace, value, position)){compact}""",
    """CREATE TABLE IF NOT EXISTS inbox_wait (
        tenant {key} NOT NULL,
        run {key} NOT NULL,
        effect_key {key} NOT NULL,
        namespace {key} NOT NULL,
        value {key} NOT NULL,
        kind {key} NOT NULL,
        case_id {key},
        step BIGINT NOT NULL,
        number BIGINT NOT NULL,
        created_at BIGINT NOT NULL,
        CONSTRAINT inbox_wait_pk
            PRIMARY KEY (tenant, run, effect_key, namespace, value)){compact}""",
    """CREATE INDEX IF NOT EXISTS inbox_wait_match
        ON inbox_wait (tenant, kind, namespace, value, number)""",
    """CREATE INDEX IF NOT EXISTS inbox_wait_order ON inbox_wait (tenant, number)""",
)

CONSTRAINTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "inbox_event_pk": ("inbox_event", ("tenant", "source", "id")),
    "inbox_event_position": ("inbox_event", ("tenant", "position")),
    "inbox_match_pk": ("inbox_match", ("tenant", "kind", "namespace", "value", "position")),
    "inbox_wait_pk": ("inbox_wait", ("tenant", "run", "effect_key", "namespace", "value")),
}
"""Every unique constraint of the schema: name -> (table, columns)."""

STORED = StoredValues(CorruptError)

EVENT_COLUMNS = (
    "source, id, position, kind, keys, payload, payload_hash, received_at, claimed_by,"
    " claimed_at, held, dead, dead_reason, dead_at, delivered_seq, claimed_for"
)
"""The columns :func:`store.inbox.values.stored_event` reads, in its order."""

WAIT_COLUMNS = "run, effect_key, namespace, value, kind, case_id, step, number, created_at"
"""The columns :func:`store.inbox.values.stored_waits` reads, in its order."""


def exists(tx: Tx) -> bool:
    """Whether the inbox's tables exist (a store that never used its inbox has none)."""
    row = tx.one(tx.dialect.table_exists_sql("inbox_meta"))
    return row is not None and bool(row[0])


def stored_version(tx: Tx) -> tuple[bool, object]:
    """(whether the inbox's tables exist, its stored schema version as stored: None when
    there is none)."""
    if not exists(tx):
        return False, None
    row = tx.one("SELECT schema_version FROM inbox_meta WHERE singleton = 1")
    return True, None if row is None else row[0]


def create(tx: Tx) -> None:
    """Create the schema (idempotent; under the engine's init lock) and check its version.
    Requires: a write transaction."""
    create_tables(tx, OWNER, DDL)
    tx.execute(
        "INSERT INTO inbox_meta (singleton, schema_version) VALUES (1, ?)"
        " ON CONFLICT (singleton) DO NOTHING",
        (SCHEMA_VERSION,),
    )
    check_version(tx)


def check_version(tx: Tx) -> None:
    """UsageError unless the inbox's stored schema version is this code's; a version 1
    schema is upgraded first (:func:`upgrade`). Requires: a write transaction."""
    row: Any = tx.one("SELECT schema_version FROM inbox_meta WHERE singleton = 1")
    version = None if row is None else row[0]
    if version == 1:
        upgrade(tx)
        version = SCHEMA_VERSION
    if version != SCHEMA_VERSION:
        raise UsageError(
            f"the inbox's schema version is {version!r}, this code reads {SCHEMA_VERSION}"
        )


def upgrade(tx: Tx) -> None:
    """Version 1 to 2, in the caller's write transaction: every event of a version 1 store
    has its indexes written, so ``indexed`` is true for all; the live index gains the
    condition. The keys of a version 1 table stay as they were ((tenant, source, id) its
    primary key, (tenant, position) unique): the same two unique indexes, one page more per
    buffered event on SQLite than a new store's table."""
    tx.execute(
        f"ALTER TABLE inbox_event ADD COLUMN indexed {tx.dialect.types['bool']}"
        " NOT NULL DEFAULT TRUE"
    )
    tx.execute("DROP INDEX inbox_event_live")
    tx.execute(LIVE_INDEX)
    tx.execute("UPDATE inbox_meta SET schema_version = ? WHERE singleton = 1", (SCHEMA_VERSION,))


__all__ = [
    "CONSTRAINTS",
    "DDL",
    "EVENT_COLUMNS",
    "INDEX_AT_ONCE",
    "INDEX_BATCH",
    "LOG_SUFFIX",
    "OWNER",
    "SCHEMA_VERSION",
    "STORED",
    "WAIT_COLUMNS",
    "WAIT_COUNTER",
    "check_version",
    "create",
    "exists",
    "stored_version",
]
