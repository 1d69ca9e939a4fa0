"""The errors of the journal store.

Each carries what the caller needs to act. They share :class:`StoreError`, itself a
:class:`tlog.errors.TlogError`; the exit statuses of ``tlog-store`` are mapped from these
classes in :mod:`store.cli` only. The two failures of the database are the storage engine's
(:mod:`store.db.errors`), named here as the journal's: :class:`BackendError` is both a
:class:`StoreError` and a :class:`store.db.BackendError`, and likewise
:class:`CommitUnknownError`.

=====================  ==================================================================
 error                  meaning, and what the caller does
=====================  ==================================================================
 FencedError            the caller's epoch is not the run's lease epoch (stale or
                        fabricated): it has lost the run and must stop; never retry
 LeaseHeldError         ``acquire`` met a live lease (even the caller's own): retry after
                        ``remaining`` seconds
 LeaseNotHeldError      ``renew`` refused (released, lapsed, other owner or epoch): stop
 DuplicateEffectError   a second ``EffectStarted`` for one (run, effect key): the effect
                        already started; exactly-once is holding
 RunSealedError         an append to a sealed run, even under the current epoch
 CorruptError           stored data does not verify (a hash that does not cover its body, a
                        broken link, a gap, a stored value of the wrong shape)
 CommitUnknownError     the connection failed after COMMIT was sent: the write may or may
                        not have landed; re-read before retrying
 BackendError           the database failed otherwise; nothing was written
=====================  ==================================================================

Malformed arguments (a bad run ID, a batch spanning two runs, a sub-second TTL) raise
:class:`tlog.errors.MalformedError` or :class:`tlog.errors.UsageError`.
"""

from __future__ import annotations

from store import db
from tlog.errors import TlogError


class StoreError(TlogError):
    """Root of the store's errors."""


class FencedError(StoreError):
    """The caller's epoch is not the current lease epoch of the run."""

    def __init__(self, run: str, held: int, current: int) -> None:
        super().__init__(f"run {run}: epoch {held} is fenced, the lease epoch is {current}")
        self.run = run
        self.held = held
        self.current = current


class LeaseHeldError(StoreError):
    """``acquire`` found a live lease."""

    def __init__(self, run: str, owner: str, epoch: int, remaining: int) -> None:
        super().__init__(
            f"run {run}: leased to {owner!r} at epoch {epoch} for {remaining} more seconds"
        )
        self.run = run
        self.owner = owner
        self.epoch = epoch
        self.remaining = remaining


class LeaseNotHeldError(StoreError):
    """``renew`` refused: the exact (owner, epoch) does not hold a live lease."""

    def __init__(self, run: str, owner: str, epoch: int) -> None:
        super().__init__(f"run {run}: {owner!r} does not hold a live lease at epoch {epoch}")
        self.run = run
        self.owner = owner
        self.epoch = epoch


class DuplicateEffectError(StoreError):
    """A second ``EffectStarted`` record for one (run, effect key)."""

    def __init__(self, run: str, effect_key: str) -> None:
        super().__init__(f"run {run}: effect {effect_key!r} has already started")
        self.run = run
        self.effect_key = effect_key


class RunSealedError(StoreError):
    """An append to a sealed run."""

    def __init__(self, run: str, outcome: str) -> None:
        super().__init__(f"run {run} is sealed ({outcome}); it takes no more records")
        self.run = run
        self.outcome = outcome


class CorruptError(StoreError):
    """Stored data does not verify. ``run`` and ``seq`` locate it when known."""

    def __init__(self, detail: str, run: str | None = None, seq: int | None = None) -> None:
        where = f"run {run} record {seq}: " if run is not None and seq is not None else ""
        where = where or (f"run {run}: " if run is not None else "")
        super().__init__(f"corrupt store: {where}{detail}")
        self.run = run
        self.seq = seq


class CommitUnknownError(StoreError, db.CommitUnknownError):
    """The connection failed between sending COMMIT and its acknowledgement."""


class BackendError(StoreError, db.BackendError):
    """The database failed; the transaction was rolled back."""


__all__ = [
    "BackendError",
    "CommitUnknownError",
    "CorruptError",
    "DuplicateEffectError",
    "FencedError",
    "LeaseHeldError",
    "LeaseNotHeldError",
    "RunSealedError",
    "StoreError",
]
