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
 DuplicateAdmissionError  a ``RunAdmitted`` whose admission key the tenant already issued:
                        the emitter's request was admitted before, as ``holder``; use that run
 RunSealedError         an append to a sealed run, even under the current epoch
 SealConflictError      a seal of a sealed run with another outcome (a RunSealedError): the
                        first seal stands; a re-seal with its outcome is not an error
 NotSealedError         an inclusion proof (or a tlog-proof) of a run that is not in the log:
                        unknown (no records), not sealed yet, or sealed beyond the tree
                        asked for (also a VerificationError: nothing proves it is there)
 RestoreError           a restore's second pass failed (the store did not reproduce the
                        export, or refused a write; also a VerificationError): the target
                        is partially written and must be discarded
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

from typing import Literal

from store import db
from tlog.errors import TlogError, VerificationError


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


class DuplicateAdmissionError(StoreError):
    """A ``RunAdmitted`` record for run ``run`` names the admission key ``key``, which this
    tenant issued to run ``holder`` (None when the key was retired in the instant between the
    refusal and the read that names the holder)."""

    def __init__(self, key: str, holder: str | None, run: str) -> None:
        held = f"run {holder}" if holder is not None else "another run"
        super().__init__(f"admission key {key!r} is held by {held}: run {run} is not admitted")
        self.key = key
        self.holder = holder
        self.run = run


class RunSealedError(StoreError):
    """An append to a sealed run (and, as :class:`SealConflictError`, a conflicting seal)."""

    def __init__(self, run: str, outcome: str) -> None:
        super().__init__(f"run {run} is sealed ({outcome}); it takes no more records")
        self.run = run
        self.outcome = outcome


class SealConflictError(RunSealedError):
    """A seal of a sealed run with another outcome: the first seal stands (``outcome``)."""

    def __init__(self, run: str, outcome: str, requested: str) -> None:
        StoreError.__init__(
            self,
            f"run {run} is sealed ({outcome}); the first seal stands, it cannot be sealed again"
            f" as {requested}",
        )
        self.run = run
        self.outcome = outcome
        self.requested = requested


NotSealedReason = Literal["unknown", "unsealed", "beyond"]
"""Why a run is not in the log: no records; records but no seal; sealed at a position the tree
asked for does not reach."""


class NotSealedError(StoreError, VerificationError):
    """A run is not in the log (at the size asked for), so nothing proves that it is there.

    ``reason`` says why (:data:`NotSealedReason`); ``position`` and ``size`` are the seal's log
    position and the tree size asked for when the reason is ``"beyond"`` (None otherwise).
    """

    def __init__(
        self,
        run: str,
        reason: NotSealedReason,
        position: int | None = None,
        size: int | None = None,
    ) -> None:
        if reason == "unknown":
            message = f"run {run} is not sealed: it has no records (an unknown run)"
        elif reason == "unsealed":
            message = f"run {run} is not sealed yet"
        else:
            message = (
                f"run {run} is sealed at log position {position}, which the tree of size {size}"
                " does not reach yet"
            )
        super().__init__(message + ("" if reason == "beyond" else ", so it is not in the log"))
        self.run = run
        self.reason = reason
        self.position = position
        self.size = size


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


class RestoreError(StoreError, VerificationError):
    """Pass 2 of a restore failed: the store did not reproduce the export, or refused a write.

    The message starts with ``"line N: "`` (the export's line) and names the run and record
    where known (``run``, ``seq``). The target store is partially written and must be
    discarded.
    """

    def __init__(
        self, line: int, message: str, run: str | None = None, seq: int | None = None
    ) -> None:
        super().__init__(
            f"line {line}: {message} (restore stopped half-way: the target store is partially "
            "written and must be discarded)"
        )
        self.line = line
        self.run = run
        self.seq = seq


__all__ = [
    "BackendError",
    "CommitUnknownError",
    "CorruptError",
    "DuplicateAdmissionError",
    "DuplicateEffectError",
    "FencedError",
    "LeaseHeldError",
    "LeaseNotHeldError",
    "NotSealedError",
    "NotSealedReason",
    "RestoreError",
    "RunSealedError",
    "SealConflictError",
    "StoreError",
]
