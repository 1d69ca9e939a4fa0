"""The inbox's schema: a third schema on the storage engine, beside the journal's.

Tables (created idempotently by :func:`create`; the tenant leads every key and every index, so
that a range over one tenant's rows cannot see another's — one tenant's event can never match
another tenant's waiting run, even with identical correlation values)::

    inbox_meta   (singleton=1, schema_version)
    inbox_event  (tenant, source, id, position, kind, keys, payload, payload_hash, received_at,
                  claimed_by, claimed_at, held, dead, dead_reason, dead_at, delivered_seq,
                  claimed_for)
                 PK (tenant, source, id)              the dedup key: the pair, never id alone
                 UNIQUE (tenant, position)            the event's leaf in the inbox log
                 index inbox_event_live (tenant, received_at, position)
                       WHERE claimed_by IS NULL AND NOT dead      — the sweep's walk
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

Columns: ``keys`` is the canonical JSON of the event's keys (:func:`tlog.inbox.keys_json`);
``payload`` the canonical JSON of its payload, SQL NULL once erased (shed by ``unsubscribe`` or
``erase``), while ``payload_hash`` stays; ``held`` is true from the claim until the claiming
run unsubscribes; ``delivered_seq`` is the seq of the run's ``EventDelivered`` record once
journaled; ``claimed_for`` is the effect key of the wait the claim satisfied, so that a run's
crash-recovery re-claim gives each of its waits back its own event, never another wait's.
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

SCHEMA_VERSION = 1
OWNER = "tlog-inbox"
"""The schema's name for the engine's init lock."""
WAIT_COUNTER = "inbox-wait"
"""The per-tenant counter that numbers waits in registration order."""
LOG_SUFFIX = "inbox"
"""The inbox log's name is ``<tenant>/<LOG_SUFFIX>``."""

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
        CONSTRAINT inbox_event_pk PRIMARY KEY (tenant, source, id),
        CONSTRAINT inbox_event_position UNIQUE (tenant, position))""",
    """CREATE INDEX IF NOT EXISTS inbox_event_live
        ON inbox_event (tenant, received_at, position) WHERE claimed_by IS NULL AND NOT dead""",
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
    """UsageError unless the inbox's stored schema version is this code's."""
    row: Any = tx.one("SELECT schema_version FROM inbox_meta WHERE singleton = 1")
    version = None if row is None else row[0]
    if version != SCHEMA_VERSION:
        raise UsageError(
            f"the inbox's schema version is {version!r}, this code reads {SCHEMA_VERSION}"
        )


__all__ = [
    "CONSTRAINTS",
    "DDL",
    "EVENT_COLUMNS",
    "LOG_SUFFIX",
    "OWNER",
    "SCHEMA_VERSION",
    "STORED",
    "WAIT_COLUMNS",
    "WAIT_COUNTER",
    "check_version",
    "create",
    "exists",
]
