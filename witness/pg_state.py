"""The witness state on PostgreSQL: a witness run as several processes (see
:mod:`witness.sqlstate`).

The connection, its settings (``synchronous_commit = on``), the isolation levels, the retries
and the commit-unknown rule are the storage engine's (:mod:`store.db.postgres`), used as they
are. The tables live in the connection's current schema (the first existing schema of its
``search_path``), so one database can hold several states.

What the witness builds on them: writes run in ``READ COMMITTED``, and the compare-and-swap is
one conditional statement — a racing ``UPDATE … WHERE origin = ? AND size = ? AND root = ?``
waits for the row lock held by the first and then re-evaluates its WHERE clause against the
committed row (so it changes nothing once the state moved); a racing first ``INSERT … ON
CONFLICT DO NOTHING`` waits for the first inserter's verdict and then does nothing.
``import_state`` locks each stored row it compares (``SELECT … FOR UPDATE``). A foreign-key
violation (``ForeignKeyViolation``) is an origin that is not configured.

Opening creates the tables under the engine's advisory lock (owner ``tlog-witness``, keyed by
the schema name), so several processes may open one fresh state at once.
"""

from __future__ import annotations

from store.db.postgres import PostgresDialect
from tlog.errors import UsageError
from witness.sqlstate import SQLState


class PostgresState(SQLState):
    """The witness state in the current schema of the PostgreSQL connection ``conninfo`` (a
    libpq string or URL); see :mod:`witness.sqlstate`. With ``create=False`` the tables must
    exist (UsageError otherwise)."""

    def __init__(self, conninfo: str, *, create: bool = True) -> None:
        if not isinstance(conninfo, str):
            raise UsageError("the PostgreSQL connection is a libpq string or URL")
        super().__init__(PostgresDialect(conninfo), create=create, where="postgres")


__all__ = ["PostgresDialect", "PostgresState"]
