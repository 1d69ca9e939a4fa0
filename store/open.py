"""Opening and initialising a journal store: the one place that picks a backend.

A store is initialised once (:func:`init_store`) with its *base origin* and its Ed25519 log key;
both are recorded in the database (the public key only). Every handle then serves one tenant,
whose log has the origin ``<base origin>/<tenant>`` and whose checkpoints are signed with the
log key under that name.

``db`` is a SQLite file path (the embedded default); ``postgres`` is a libpq connection string
or URL (``postgresql://user@host:5432/db``); exactly one is given. :func:`open_in_memory` is
the third place a store can live: nowhere durable (tests and simulations).
"""

from __future__ import annotations

from collections.abc import Callable

from store.api import JournalStore
from tlog.errors import UsageError
from tlog.keys import SignerKey, generate_key
from tlog.note import Ed25519Signer

Clock = Callable[[], int]


def _backend(db: str | None, postgres: str | None) -> str:
    if (db is None) == (postgres is None):
        raise UsageError("give exactly one of a SQLite path (db) or a PostgreSQL URL (postgres)")
    return "sqlite" if db is not None else "postgres"


def init_store(
    *, db: str | None = None, postgres: str | None = None, origin: str, key: SignerKey
) -> None:
    """Create the schema and record the base origin and the log key's public half.

    Idempotent for the same origin and key; refuses a database initialised differently.
    """
    if _backend(db, postgres) == "sqlite":
        from store.sqlite import SQLiteStore  # noqa: PLC0415

        assert db is not None
        SQLiteStore.initialise(db, origin, key)
    else:
        from store.postgres import PostgresStore  # noqa: PLC0415

        assert postgres is not None
        PostgresStore.initialise(postgres, origin, key)


def open_store(
    *,
    db: str | None = None,
    postgres: str | None = None,
    tenant: str = "default",
    key: SignerKey | None = None,
    record_signer: Ed25519Signer | None = None,
    clock: Clock | None = None,
) -> JournalStore:
    """Open an initialised store for one tenant.

    ``key`` (the log key) is needed only to sign checkpoints; it must be the key the store was
    initialised with. ``record_signer`` turns on record signatures (off by default).
    ``clock`` returns whole seconds for lease expiry and activity times (default: the
    database's clock on PostgreSQL, the process clock on SQLite).
    """
    if _backend(db, postgres) == "sqlite":
        from store.sqlite import SQLiteStore  # noqa: PLC0415

        assert db is not None
        return SQLiteStore(db, tenant=tenant, key=key, record_signer=record_signer, clock=clock)
    from store.postgres import PostgresStore  # noqa: PLC0415

    assert postgres is not None
    return PostgresStore(postgres, tenant=tenant, key=key, record_signer=record_signer, clock=clock)


EPHEMERAL_ORIGIN = "localhost/ephemeral"
"""The base origin of an ephemeral store opened without one."""


def open_in_memory(
    *,
    origin: str = EPHEMERAL_ORIGIN,
    tenant: str = "default",
    key: SignerKey | None = None,
    record_signer: Ed25519Signer | None = None,
    clock: Clock | None = None,
) -> JournalStore:
    """An initialised store that lives in memory only (SQLite), for tests and simulations.

    It is the whole contract (the same code as a SQLite file) on a database that nothing else
    can reach and that disappears when the handle is closed or the process ends: it leaves
    nothing behind, and **cannot outlive a crash** — never use it for a journal that must be
    kept (export it first: :func:`store.export.export_store`). ``key`` is the log key (a fresh
    one when omitted, so that checkpoints can be signed); the other arguments are
    :func:`open_store`'s. Each call opens a new, empty store.
    """
    from store.sqlite import MemoryStore  # noqa: PLC0415

    if key is None:
        key = generate_key(origin)
    return MemoryStore(origin, key, tenant=tenant, record_signer=record_signer, clock=clock)
