"""The storage engine's errors: what a database failure means to the caller.

=====================  ==================================================================
 error                  meaning, and what the caller does
=====================  ==================================================================
 DatabaseError          root of the two below (never a MalformedError: the caller's input
                        was fine, the database was not)
 CommitUnknownError     the connection failed after COMMIT was sent: the write may or may
                        not have landed; re-read before doing anything that depends on it
 BackendError           the database failed otherwise; the transaction was rolled back and
                        nothing was written
=====================  ==================================================================

A schema names these failures in its own hierarchy by subclassing both its root and the
engine's class (``class BackendError(StoreError, store.db.BackendError)``) and telling its
:class:`~store.db.engine.Session` to raise them (:attr:`Session.backend_error`,
:attr:`Session.commit_unknown_error`): then ``except StoreError`` still catches a failing
database of the journal, and ``except store.db.BackendError`` catches that of any schema.
"""

from __future__ import annotations

from tlog.errors import TlogError


class DatabaseError(TlogError):
    """Root of the storage engine's errors."""


class BackendError(DatabaseError):
    """The database failed; the transaction was rolled back, nothing was written."""


class CommitUnknownError(DatabaseError):
    """COMMIT was sent but no verdict came back: the write may or may not have landed."""


__all__ = ["BackendError", "CommitUnknownError", "DatabaseError"]
