"""The journal store on PostgreSQL: several writers, one database (see :mod:`store.sql`).

The connection, its settings (``synchronous_commit = on``), the isolation levels, the retries
and the commit-unknown rule are the storage engine's (:mod:`store.db.postgres`), used as they
are. The store lives in the connection's current schema (the first existing schema of its
``search_path``), so one database can hold several stores — the tests give each its own schema.

What the journal builds on them:

* writes run in ``READ COMMITTED``. Correctness comes from row locks and constraints, not from
  the isolation level: every write to a run first ensures and locks the run's ``run_state``
  row (``INSERT … ON CONFLICT DO NOTHING`` when missing, then ``SELECT … FOR UPDATE``), and
  reads the lease, the seal and the head in later statements, whose fresh snapshots see
  whatever the previous lock holder committed; seals also lock the tenant's ``log_state`` row,
  so positions are dense (position = size, then size + 1) and the stored tree hashes are
  appended in the same transaction;
* a unique violation is identified by ``e.diag.constraint_name`` (the schema names every
  constraint, :data:`store.schema.CONSTRAINTS`), never by what the record being written carries;
* a COMMIT that fails without a server verdict raises :class:`~store.errors.CommitUnknownError`,
  for every write.

Clock: the server's, read inside the transaction (after the locks are taken), so writers with
skewed clocks agree on lease expiry. An injected clock overrides it.

Initialisation takes the engine's advisory lock (owner ``tlog-store``, keyed by the schema name)
before ``CREATE … IF NOT EXISTS``, so several processes may initialise one store at once.
"""

from __future__ import annotations

from collections.abc import Callable

from store.atomic import AtomicJournal
from store.db.postgres import PostgresDialect
from store.sql import SQLStore
from tlog.errors import UsageError
from tlog.keys import SignerKey
from tlog.note import Ed25519Signer


class PostgresStore(SQLStore):
    """The journal store in a PostgreSQL schema (see :mod:`store.sql` for the contract's
    details).

    ``conninfo`` is a libpq connection string or URL; the store lives in its current schema.
    Requires: the schema was initialised (:meth:`initialise`); otherwise UsageError
    ("not initialised: run tlog-store init").
    """

    def __init__(
        self,
        conninfo: str,
        *,
        tenant: str = "default",
        key: SignerKey | None = None,
        record_signer: Ed25519Signer | None = None,
        clock: Callable[[], int] | None = None,
    ) -> None:
        if not isinstance(conninfo, str):
            raise UsageError("the PostgreSQL connection is a libpq string or URL")
        super().__init__(
            PostgresDialect(conninfo),
            tenant=tenant,
            key=key,
            record_signer=record_signer,
            clock=clock,
        )
        self._atomic: AtomicJournal | None = None

    @property
    def atomic(self) -> AtomicJournal:
        """This backend can join the embedder's transaction (:mod:`store.atomic`)."""
        if self._atomic is None:
            self._atomic = AtomicJournal(self)
        return self._atomic

    @classmethod
    def initialise(cls, conninfo: str, origin: str, key: SignerKey) -> None:
        """Create the schema's tables (if needed) and record the origin and log key (see
        :meth:`SQLStore._initialise`)."""
        if not isinstance(conninfo, str):
            raise UsageError("the PostgreSQL connection is a libpq string or URL")
        cls._initialise(PostgresDialect(conninfo), origin, key)


__all__ = ["PostgresDialect", "PostgresStore"]
