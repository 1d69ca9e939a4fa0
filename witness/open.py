"""Opening the witness state: the one place that picks a backend.

``db`` is a SQLite file path (the embedded default); ``postgres`` is a libpq connection string
or URL (``postgresql://user@host:5432/db``, tables in its current schema); exactly one is
given. The schema is created when missing unless ``create=False`` (then a missing state is a
UsageError — for commands that must not start from an empty state by mistake).
"""

from __future__ import annotations

from tlog.errors import UsageError
from witness.state import WitnessState


def open_state(
    *, db: str | None = None, postgres: str | None = None, create: bool = True
) -> WitnessState:
    """Open (and, with ``create``, create if needed) the witness state in one backend."""
    if (db is None) == (postgres is None):
        raise UsageError("give exactly one of a SQLite path (db) or a PostgreSQL URL (postgres)")
    if db is not None:
        from witness.sqlite_state import SQLiteState  # noqa: PLC0415 - load one driver only

        return SQLiteState(db, create=create)
    from witness.pg_state import PostgresState  # noqa: PLC0415

    assert postgres is not None
    return PostgresState(postgres, create=create)
