"""The witness's durable state: configured logs, the latest cosigned checkpoint per log, and
evidence of split views.

One storage contract (:class:`WitnessState`), implemented on SQLite (the default) and
PostgreSQL (a witness run as several processes), tested by one conformance battery.

What is kept, per origin (compared as exact UTF-8 bytes):

* the log's configuration: its trusted verifier keys (vkeys of type 0x01 or 0x06), an optional
  requests-per-day quota (``qpd``, from a logs/v0 list) and whether it is disabled. A log is
  **never deleted**: re-adding a deleted log would let the witness cosign a tree inconsistent
  with one it cosigned before. Disabling keeps the state and refuses new checkpoints;
* the latest cosigned checkpoint: size, root and the **full note** (the log's verified
  signature lines plus this witness's cosignature lines), which the monitoring endpoint serves;
* evidence: a request whose validly signed checkpoint *proves* a split view against the stored
  one (same size and another root; or a consistency proof that leads to the request's root
  from another root at the stored size) is kept with the whole request body, the stored note,
  the reason and the time, once per thing proved and within a bound per log (count and bytes),
  so the operator can show the split view to anyone.

The one write that matters is :meth:`WitnessState.compare_and_swap`: it replaces the stored
checkpoint only if the stored (size, root) is still the one the caller checked against, in a
single atomic statement, and is durable when it returns (SQLite WAL with synchronous=FULL;
PostgreSQL commit). The server signs a cosignature only after it returned True.

The reads of the server's status page and evidence endpoints (:meth:`WitnessState.status`,
:meth:`~WitnessState.evidence_summaries`, :meth:`~WitnessState.evidence_entry`,
:attr:`~WitnessState.backend`) have defaults built on the other reads, so every implementation
has them; the SQL state answers each with one query (or one read transaction).
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass

from tlog.errors import UsageError

_EVERY = (1 << 63) - 1  # a limit that reads every row (the defaults of the read methods)


@dataclass(frozen=True)
class LogConfig:
    """A log the witness follows."""

    origin: str
    keys: tuple[str, ...]
    qpd: int | None = None
    disabled: bool = False
    tiles: str | None = None
    """The log's C2SP tlog-tiles URL prefix (ending in ``/``) that ``tlog-witness feed``
    follows, or None: the witness only waits for the log to submit."""


@dataclass(frozen=True)
class Cosigned:
    """The latest checkpoint the witness cosigned for a log."""

    origin: str
    size: int
    root: bytes
    note: bytes
    updated_at: int


@dataclass(frozen=True)
class Evidence:
    """A validly signed checkpoint that conflicted with the stored state."""

    id: int
    origin: str
    reason: str
    request: bytes
    stored_note: bytes | None
    received_at: int


@dataclass(frozen=True)
class EvidenceSummary:
    """An evidence row without its two notes: what a listing shows."""

    id: int
    origin: str
    reason: str
    received_at: int
    request_bytes: int
    stored_bytes: int | None


@dataclass(frozen=True)
class LogStatus:
    """What the status page shows of one log, from one read (:meth:`WitnessState.status`).

    ``size`` and ``updated_at`` are None when the witness never cosigned the log;
    ``requests_today`` is the quota's count for the day asked (0 when none was counted), or None
    when the state cannot tell (a state without the read); ``evidence`` the rows kept for the
    log and ``last_evidence_at`` the time of its newest one."""

    config: LogConfig
    size: int | None
    updated_at: int | None
    requests_today: int | None
    evidence: int
    last_evidence_at: int | None


class WitnessState(abc.ABC):
    """The storage contract. Methods are synchronous and may fsync: run them off the event loop.

    A handle is safe to use from several threads.
    """

    # --- configuration -----------------------------------------------------------------------

    @abc.abstractmethod
    def add_log(
        self, origin: str, keys: tuple[str, ...], qpd: int | None = None, tiles: str | None = None
    ) -> None:
        """Follow a new log (``tiles``: its tiles URL, :meth:`set_tiles`). Refuses an origin
        that exists (enabled or disabled)."""

    @abc.abstractmethod
    def add_key(self, origin: str, vkey: str) -> None:
        """Trust one more key for a configured log (key rotation). Idempotent."""

    @abc.abstractmethod
    def set_disabled(self, origin: str, disabled: bool) -> None:
        """Disable (or re-enable) a log; its state is kept either way."""

    @abc.abstractmethod
    def set_qpd(self, origin: str, qpd: int | None) -> None:
        """Set or clear a log's requests-per-day quota."""

    def set_tiles(self, origin: str, url: str | None) -> None:
        """Set (a URL, :func:`witness.statecheck.check_tiles_url`) or clear (None) the tiles
        URL ``tlog-witness feed`` reads a log from. A state that cannot keep one refuses."""
        raise UsageError(f"this state ({type(self).__name__}) keeps no tiles URLs")

    @abc.abstractmethod
    def log(self, origin: str) -> LogConfig | None:
        """A log's configuration, or None when not configured."""

    @abc.abstractmethod
    def logs(self) -> list[LogConfig]:
        """Every configured log, by origin."""

    # --- checkpoints ---------------------------------------------------------------------

    @abc.abstractmethod
    def latest(self, origin: str) -> Cosigned | None:
        """The latest cosigned checkpoint of a log, or None if never cosigned."""

    @abc.abstractmethod
    def compare_and_swap(self, expected: Cosigned | None, new: Cosigned) -> bool:
        """Atomically replace ``expected`` (None: nothing stored yet) by ``new``.

        Returns False, writing nothing, when the stored (size, root) is no longer ``expected``'s
        (or, for None, when something is stored), or when the stored ``updated_at`` is later
        than ``new.updated_at``: the time of a log's state never goes backwards either (the
        server's cosignature timestamps, even with several processes and a clock stepped
        back). Durable when it returns True. Requires: ``new.size >= expected.size`` — a caller
        bug otherwise (UsageError): the state only moves forward.
        """

    def compare_and_swap_many(
        self, swaps: Sequence[tuple[Cosigned | None, Cosigned]]
    ) -> list[bool]:
        """Several compare-and-swaps, in order; the verdict of each, as
        :meth:`compare_and_swap` would give it.

        The server batches the swaps of requests for different logs that arrive together, so
        that one commit (one fsync) makes them all durable. Durable when it returns. A backend
        that can should run them in one transaction and raise, writing nothing, if one pair
        breaks :meth:`compare_and_swap`'s preconditions; this default runs them one by one.
        """
        return [self.compare_and_swap(expected, new) for expected, new in swaps]

    @abc.abstractmethod
    def all_latest(self) -> list[Cosigned]:
        """The latest cosigned checkpoint of every log that has one, by origin."""

    # --- evidence ----------------------------------------------------------------------------

    @abc.abstractmethod
    def add_evidence(
        self,
        origin: str,
        reason: str,
        request: bytes,
        stored_note: bytes | None,
        at: int,
        *,
        proves: bytes | None = None,
    ) -> int | None:
        """Keep a request that proves a split view against ``stored_note``; returns its
        evidence ID, or None when not kept: the log already has evidence that ``proves`` the
        same thing (a digest of what it proves; None: never a duplicate), or its evidence is
        at the per-log bound (count and bytes)."""

    @abc.abstractmethod
    def evidence(self, origin: str | None = None, limit: int = 100) -> list[Evidence]:
        """Kept evidence, newest first, optionally for one origin."""

    def evidence_summaries(
        self, before: int | None = None, limit: int = 100
    ) -> list[EvidenceSummary]:
        """Kept evidence without the notes, newest first, IDs below ``before`` when given.

        This default reads the whole rows through :meth:`evidence`; a backend should read only
        the columns listed (the SQL state does)."""
        rows = self.evidence(None, _EVERY)
        return [_summary(e) for e in rows if before is None or e.id < before][:limit]

    def evidence_entry(self, evidence_id: int) -> Evidence | None:
        """The evidence row ``evidence_id``, or None. This default scans :meth:`evidence`."""
        return next((e for e in self.evidence(None, _EVERY) if e.id == evidence_id), None)

    # --- the status page ---------------------------------------------------------------------

    @property
    def backend(self) -> str:
        """The storage engine's name (``sqlite``, ``postgres``), for the status page."""
        return type(self).__name__

    def status(self, day: int) -> list[LogStatus]:
        """Every configured log with its latest size and time, its quota count on ``day``
        (days since the epoch, UTC) and its evidence count, by origin: one consistent read
        that costs O(logs + evidence rows), never the notes or the history.

        This default is built from :meth:`logs`, :meth:`all_latest` and :meth:`evidence` and
        cannot count requests (``requests_today`` None); the SQL state answers in one read
        transaction."""
        latest = {c.origin: c for c in self.all_latest()}
        counts: dict[str, tuple[int, int]] = {}
        for e in self.evidence(None, _EVERY):
            n, last = counts.get(e.origin, (0, 0))
            counts[e.origin] = (n + 1, max(last, e.received_at))
        out = []
        for config in self.logs():
            c = latest.get(config.origin)
            n, last = counts.get(config.origin, (0, 0))
            out.append(
                LogStatus(
                    config,
                    None if c is None else c.size,
                    None if c is None else c.updated_at,
                    None,
                    n,
                    last if n else None,
                )
            )
        return out

    # --- quota -------------------------------------------------------------------------------

    @abc.abstractmethod
    def count_request(self, origin: str, day: int) -> int:
        """Count one request for ``origin`` on ``day`` (days since the epoch); return the count."""

    # --- moving a witness -------------------------------------------------------------------

    @abc.abstractmethod
    def export_state(self) -> bytes:
        """Every log's configuration and latest cosigned note, from one consistent snapshot,
        in the strict line format of :mod:`witness.statefile` (``tlog-witness-state v1``).

        Evidence and request counts are not exported: they belong to the old deployment.
        """

    @abc.abstractmethod
    def import_state(self, data: bytes) -> None:
        """Merge an :meth:`export_state` file into this state, in one atomic write.

        The file is parsed strictly first (MalformedError naming the line); every cosigned
        note must verify with its log's keys from the file. Then, per log: a new origin is
        added as in the file; for a configured one the file's keys are added (keys are never
        removed), its qpd replaces the stored one, and a log disabled on either side stays
        disabled. A checkpoint moves the stored one forward only: larger size → replaced;
        same size and root → unchanged (the stored note stays). An imported checkpoint
        *smaller* than the stored one, or of the same size with another root, refuses the
        whole import (UsageError naming every such origin) and writes nothing.
        """

    @abc.abstractmethod
    def close(self) -> None:
        """Release the connection."""


def _summary(e: Evidence) -> EvidenceSummary:
    return EvidenceSummary(
        e.id,
        e.origin,
        e.reason,
        e.received_at,
        len(e.request),
        None if e.stored_note is None else len(e.stored_note),
    )
