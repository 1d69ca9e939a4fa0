"""The journal store contract: one abstract class, implemented on SQLite and PostgreSQL.

A store handle serves one *tenant*. Every key it writes begins with the tenant, so another
tenant's data is never filtered out: it is simply never addressed. The tenant's Merkle log has
the origin ``<base origin>/<tenant>``, and its checkpoints are signed by the store's Ed25519 log
key under that name (one key, one key name per tenant).

Guarantees (each enforced inside the transaction that writes, never by a read-then-write):

* **Records** (:mod:`tlog.journal`): seqs contiguous from 1; each record's hash covers its body
  and the previous hash; every read recomputes the hash and raises
  :class:`~store.errors.CorruptError` on a mismatch.
* **Batches** are atomic and belong to one run: a batch naming two runs is refused before
  anything is written; any failure writes nothing.
* **Leases and fencing.** ``acquire`` is a pure claim: it refuses a live lease even to its
  holder and bumps the epoch; the first epoch of a run is one more than the highest epoch its
  records carry. ``renew`` extends only the exact live (owner, epoch) and keeps the epoch.
  ``release`` marks the lease expired, keeps its epoch, is idempotent and never an error. A
  lease is expired when ``expires_at <= now``. TTLs are whole seconds >= 1. ``append`` and
  ``seal`` of a run that has a lease row (live, expired or released: the row keeps the epoch)
  require the caller's epoch to *equal* its epoch (stale and future epochs are both fenced:
  :class:`~store.errors.FencedError`). A run that was never leased has no lease row and
  nothing to fence against: it accepts any epoch, even one lower than its last record's. That
  is the restore path, which replays every record under its own epoch (an export carries no
  leases); a writer that wants fencing acquires the run first, and the first ``acquire`` of a
  run starts above every epoch its records carry.
* **Exactly-once**: a second ``EffectStarted`` record for one (run, effect key) is refused by a
  unique key: :class:`~store.errors.DuplicateEffectError`.
* **Seal** appends the run's *seal record* (kind ``RunSealed``, ``data`` ``{"outcome": …}``,
  :func:`tlog.journal.seal_body`), freezes the run, and appends its head — the seal record's
  hash, which covers the outcome — to the tenant's log at the next position (dense, from 0,
  never reused). First seal wins and a re-seal changes nothing: with the sealed outcome it is
  idempotent (it returns the seal, flagged :attr:`Seal.already`), with another outcome it is
  refused (:class:`~store.errors.SealConflictError`); later appends are refused
  (:class:`~store.errors.RunSealedError`, after the fence check). An empty run cannot be
  sealed. ``append`` refuses the reserved kind ``RunSealed``.
* **Merkle log**: the RFC 6962 stored hashes (:mod:`tlog.merkle`) are written in the seal's
  transaction, so a checkpoint or a proof costs O(log n) reads, taken in one snapshot.
* **Outcome index**: derived from the records that conclude a run — ``RunConcluded`` records
  (``data.outcome``), written by ``append``, and the seal record, written by ``seal`` — in
  the transaction that writes them. The last conclusion wins with a fresh ordinal; listings
  are newest first. The seal feeds it because its outcome is the one the log signs: the seal
  record's hash is the run's leaf, so the index follows the signed record, and a sealed run
  lists under the outcome every checkpoint over it attests, whatever ``RunConcluded`` said
  before (a run concluded ``failed``, resumed and sealed ``succeeded`` lists as succeeded).
  ``runs_by_outcome`` and ``count_by_outcome`` read the same rows and refuse alike: a row
  whose run ID does not parse is :class:`~store.errors.CorruptError` for both (so the count
  reads every row it counts: counting an outcome every healthy run reaches is a scan the
  caller chooses).
* **Admission keys** (:mod:`tlog.journal`, "The admission record"): ``append`` of a run's
  ``RunAdmitted`` record claims its admission key in its transaction, by the primary key of
  the derived index (never by a read first): a key the tenant issued already is refused with
  :class:`~store.errors.DuplicateAdmissionError`, naming the run that holds it, and nothing is
  written — so two processes admitting one emitter's request at once admit one run.
  ``admitted_as`` reads the index (a read, not the arbiter: two racing admitters both read
  None). Keys are kept until ``forget_admissions`` retires them, on request only (retiring a
  key lets the next ``RunAdmitted`` with it admit a new run: the window must exceed the
  emitter's retry horizon). Tenant-scoped: two tenants may use one key.
* **Runs by source**: ``recent_runs(…, source=S)`` lists the runs whose ``RunAdmitted`` names
  the source S, in ``recent_runs``' order, tie-break and cursor; the source index is written
  with the ``RunAdmitted`` and moved with the run's activity by every append (and the seal).
  A source is never forgotten: ``forget_admissions`` leaves it.
* **Waiting runs**: a run is waiting while its last record is a ``RunSuspended``
  (:func:`tlog.journal.suspension_of`): every append sets or clears the run's row of the
  derived index, and the seal clears it. ``waiting_runs`` lists them soonest ``until`` first
  (ties by run ID), bounded.
* **Derived indexes rebuild**: the outcome, activity, admission, source and waiting indexes
  are written from records by ``append`` and ``seal`` only, so a restore (which replays every
  record through them) rebuilds them; the export carries none of them.
* **One clock per row**: every time a store writes (lease expiry, activity, claim and
  cancellation times) and every time it compares (lease expiry, ``abandoned_runs``) is the
  *store clock* of the handle: the injected ``clock`` when given, else PostgreSQL's server
  clock or the process clock on SQLite. The injected clock is for tests and simulations (the
  ephemeral store): every handle on one database must use the same clock — all the same
  injected clock, or none — because a lease stamped by one clock and judged by another is how
  a live owner's run is recovered from under it. The store cannot tell two handles' clocks
  apart, so this rule is the caller's.
* **Restore** (:mod:`store.export`): ``append`` and ``seal`` may be given the records'
  signatures (the exported ones) instead of signing them, and ``import_checkpoint`` keeps an
  exported checkpoint note as is, once the rebuilt log gives its text.
* **Kept checkpoints** hold only lines an export can carry: ``add_cosignatures`` verifies every
  cosignature it keeps against the witness keys its caller declares.
* **Remembered witness keys**: ``add_cosignatures`` remembers, in the transaction that keeps
  it, the key of every witness line the kept note holds, and a restore remembers the export's
  declared witness keys (``remember_witness_keys``); an export declares every remembered key
  (``remembered_witness_keys``), so it needs no witness key from its caller. At most one key
  per (key name, key ID), never the log's; a remembered key is never forgotten.
* **Cancellation requests** are unfenced; the first asker wins. The actor is a label the caller
  gives (1-256 characters), kept as given: the store does not establish who asked, so a
  reader takes it as the asker's claim (see :class:`Cancellation`).
* **Recent runs**: ordered by (last append time DESC, run ID DESC), a total order; paging
  resumes strictly after the cursor ``(updated_at, run)``.
* **Abandoned runs**: leases expired and never released, oldest expiry first.
* **Where a store lives**: a SQLite file, a PostgreSQL schema, or nowhere durable — the
  ephemeral store (:func:`store.open.open_in_memory`), the same code on SQLite in memory, which
  leaves nothing behind and cannot outlive a crash (tests and simulations only).
* **Joining the embedder's transaction** (optional): :attr:`JournalStore.atomic` is None when
  the backend cannot (SQLite), else the capability (:mod:`store.atomic`; PostgreSQL), whose
  appends and seals are this contract's, run inside the caller's own transaction.
* **The outbox** (:mod:`store.outbox`, on every SQL store): an append or a seal makes the
  deliveries of the subscriptions covering its run due in its own transaction; a delivery's
  cursor moves only after the receiver acknowledged (at least once, in seq order per run).
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from store.errors import CorruptError
from tlog.checkpoint import Checkpoint
from tlog.errors import UsageError
from tlog.journal import GENESIS, ChainError, Record, RecordSignature, verify_chain
from tlog.keys import format_vkey, parse_vkey_value
from tlog.note import Verifier

if TYPE_CHECKING:
    from store.atomic import AtomicJournal
    from store.inbox.core import Inbox

_NO_DATA: Any = object()


@dataclass(frozen=True)
class Append:
    """One record to append: the store assigns seq, epoch, previous hash, hash and signature.

    ``data`` is any canonical-JSON value (no floats) but None: leave it out for a record without
    data (``data=None`` is JSON null, refused: optional fields are absent, never null). The kind
    ``RunSealed`` is reserved for the seal record :meth:`JournalStore.seal` writes.
    """

    run: str
    kind: str
    data: Any = _NO_DATA
    case: str | None = None
    effect_key: str | None = None

    @property
    def has_data(self) -> bool:
        return self.data is not _NO_DATA


@dataclass(frozen=True)
class Head:
    """A run's chain position: its last seq and hash; (0, GENESIS) for an unwritten run."""

    seq: int
    hash: bytes

    @staticmethod
    def genesis() -> Head:
        return Head(0, GENESIS)


@dataclass(frozen=True)
class Lease:
    """Ownership of a run: the owner and the epoch its writes must carry."""

    run: str
    owner: str
    epoch: int
    expires_at: int


@dataclass(frozen=True)
class Seal:
    """A sealed run: its log position, head (the leaf value) and outcome.

    ``already`` is True on the value :meth:`JournalStore.seal` returns when the run was sealed
    before that call (with the same outcome: the call wrote nothing); False everywhere else. It
    takes no part in equality: the seal is the same.
    """

    run: str
    position: int
    head: bytes
    outcome: str
    already: bool = field(default=False, compare=False)


@dataclass(frozen=True)
class Inclusion:
    """Evidence that a sealed run is in the log: position, log size, head, RFC 6962 path."""

    run: str
    index: int
    size: int
    head: bytes
    proof: tuple[bytes, ...]


@dataclass(frozen=True)
class WaitingRun:
    """A run whose last record is a suspension (record ``seq``): it waits for the instant
    ``until`` (``message`` None), or for the message with the correlation key ``message`` until
    the deadline ``until`` (whole Unix seconds). The two fail differently: an instant not yet
    come is the system working; a message that never came is a correlation to investigate."""

    run: str
    until: int
    message: str | None
    seq: int


@dataclass(frozen=True)
class Cancellation:
    """The first request to cancel a run.

    ``actor`` is the label its caller gave, not an identity the store established: the store
    has no authentication of its own (a caller holding the database can write any label), so
    provenance — who asked, as what — is the embedder's to put in the label (for example
    ``api:alice`` or ``operator:bob``) and to trust accordingly; a run's owner that journals the
    request into its chain makes it part of the signed history (when records are signed, the
    record's signature says which writer recorded it)."""

    actor: str
    reason: str
    requested_at: int


class JournalStore(abc.ABC):
    """The contract every backend implements (see the module docstring for the guarantees).

    Methods are synchronous and may block on disk (fsync); async callers run them in a
    thread. A handle is safe to use from several threads.
    """

    @property
    @abc.abstractmethod
    def tenant(self) -> str:
        """The tenant this handle serves."""

    @property
    @abc.abstractmethod
    def origin(self) -> str:
        """The checkpoint origin of this tenant's log: ``<base origin>/<tenant>``."""

    @property
    @abc.abstractmethod
    def log_vkey(self) -> str:
        """The vkey that verifies this tenant log's checkpoints: the store's Ed25519 log key
        (type 0x01) under the key name :attr:`origin`, spelled by :func:`tlog.keys.format_vkey`."""

    @abc.abstractmethod
    def is_shared(self) -> bool:
        """True when several processes may write the same state (PostgreSQL)."""

    @property
    def inbox(self) -> Inbox:
        """The tenant's inbound-event inbox (:mod:`store.inbox`). UsageError for a store that
        keeps none (every SQL store keeps one)."""
        raise UsageError(f"a {type(self).__name__} keeps no inbox")

    @property
    def atomic(self) -> AtomicJournal | None:
        """The capability to append and seal inside the embedder's own transaction
        (:mod:`store.atomic`), or None when this backend cannot offer it (the default; SQLite).
        Ask when the embedder is configured (:func:`store.atomic.require_atomic`)."""
        return None

    # --- records ---------------------------------------------------------------------------

    @abc.abstractmethod
    def append(
        self,
        epoch: int,
        batch: Sequence[Append],
        *,
        signatures: Sequence[RecordSignature | None] | None = None,
    ) -> list[Record]:
        """Append a batch of records to one run, atomically, under the caller's epoch.

        When the run has a lease row, ``epoch`` must equal its epoch (FencedError otherwise); a
        run never leased is not fenced (see the module docstring: the restore path).
        ``signatures`` is for the restore path: when given (one per record), record ``i``
        carries ``signatures[i]`` (None: no signature) instead of being signed by the handle's
        record signer. The store checks their shape, not their validity: the caller (restore)
        verified each against its key and checks that the store rebuilt the hash it signs.
        """

    @abc.abstractmethod
    def read(self, run: str, from_seq: int = 1) -> list[Record]:
        """All records with seq >= ``from_seq``, each hash-checked."""

    @abc.abstractmethod
    def read_page(self, run: str, from_seq: int, limit: int) -> list[Record]:
        """At most ``limit`` records from ``from_seq``, each hash-checked."""

    @abc.abstractmethod
    def head(self, run: str) -> Head:
        """The run's last (seq, hash), or the genesis head."""

    def verify(self, run: str) -> bytes:
        """Check the whole chain of a run (seqs, links, hashes); return its head hash."""

        def pages() -> Iterator[Record]:
            seq = 1
            while True:
                page = self.read_page(run, seq, 1000)
                yield from page
                if len(page) < 1000:
                    return
                seq = page[-1].seq + 1

        try:
            return verify_chain(pages(), run)
        except ChainError as e:
            raise CorruptError(str(e), run, e.seq) from None

    # --- leases ----------------------------------------------------------------------------

    @abc.abstractmethod
    def acquire(self, run: str, owner: str, ttl: int) -> Lease:
        """Claim a run for ``ttl`` whole seconds, bumping its epoch."""

    @abc.abstractmethod
    def renew(self, run: str, owner: str, epoch: int, ttl: int) -> Lease:
        """Extend the exact live (owner, epoch) lease by ``ttl`` seconds from now."""

    @abc.abstractmethod
    def release(self, run: str, epoch: int) -> None:
        """Mark the lease at ``epoch`` expired, keeping its epoch. Never an error."""

    @abc.abstractmethod
    def abandoned_runs(self, limit: int) -> list[str]:
        """Runs whose lease expired without a release, oldest expiry first."""

    # --- seal and log ----------------------------------------------------------------------

    @abc.abstractmethod
    def seal(
        self,
        run: str,
        epoch: int,
        outcome: str,
        *,
        signatures: Sequence[RecordSignature | None] | None = None,
    ) -> Seal:
        """Append the run's seal record naming ``outcome``, freeze the run and enter its head
        (the seal record's hash) into the tenant's log; return the seal.

        Fenced as :meth:`append` is, a re-seal too. First seal wins: sealing a sealed run again
        with its outcome writes nothing and returns its seal with ``already=True`` (so a retry
        after :class:`~store.errors.CommitUnknownError` is safe); with another outcome it is
        refused with :class:`~store.errors.SealConflictError` (a RunSealedError), which names
        both.

        ``signatures`` is for the restore path: one entry, the seal record's exported signature
        (None: unsigned), carried instead of the handle's record signer's (see :meth:`append`).
        """

    @abc.abstractmethod
    def sealed(self, run: str) -> Seal | None:
        """The run's seal, or None."""

    @abc.abstractmethod
    def seals(self, after_position: int = -1, limit: int = 1000) -> list[Seal]:
        """Sealed runs in log order, from position ``after_position + 1``."""

    @abc.abstractmethod
    def checkpoint(self) -> Checkpoint:
        """The log's current (origin, size, root), computed from stored hashes."""

    @abc.abstractmethod
    def tree_root(self, size: int) -> bytes:
        """The log's root at an earlier ``size`` (<= the current size)."""

    @abc.abstractmethod
    def consistency_proof(self, old: int, new: int | None = None) -> list[bytes]:
        """RFC 6962 proof that the log at ``new`` (default: now) extends the log at ``old``.

        ``old`` beyond ``new`` is an error; ``old`` 0 or equal to ``new`` gives [].
        """

    @abc.abstractmethod
    def inclusion_proof(self, run: str, size: int | None = None) -> Inclusion:
        """The sealed run's position and RFC 6962 path at ``size`` (default: now).

        A run that is not in the tree of that size raises :class:`~store.errors.NotSealedError`
        saying why (``reason``): it has no records (``"unknown"``), it is not sealed yet
        (``"unsealed"``), or it was sealed at a position the tree of ``size`` does not reach
        yet (``"beyond"``). ``size`` beyond the log is a UsageError.
        """

    # --- published checkpoints -------------------------------------------------------------

    @abc.abstractmethod
    def sign_checkpoint(self) -> bytes:
        """Sign the current checkpoint with the log key, keep it, and return the note."""

    @abc.abstractmethod
    def add_cosignatures(self, note: bytes, *, witness_keys: Sequence[str]) -> bytes:
        """Merge the signature lines of a (cosigned) copy of a kept checkpoint into it.

        The note's text must be that of a checkpoint this store signed. Every line to keep that
        is not the log's must be from one of ``witness_keys`` (vkeys of type 0x04 or 0x06; 0x01
        is read as 0x04) and verify: a line that does not verify, or of any other key, is
        refused and nothing is kept. The key of every witness line the merged note holds is
        remembered (:meth:`remembered_witness_keys`), in the same transaction. Returns the
        merged note as kept.
        """

    @abc.abstractmethod
    def import_checkpoint(self, note: bytes) -> None:
        """Keep ``note`` exactly as given: a checkpoint of this log signed elsewhere (restore).

        The note must carry a valid signature of the log key, at most one line per key, and
        its text must be this log's own checkpoint text at its size (origin, size, and the
        root computed from the stored hashes). The same note kept again changes nothing; a
        different note kept at that size is refused. Other lines (cosignatures) are kept
        unverified: the caller verified them.
        """

    @abc.abstractmethod
    def published(self) -> list[bytes]:
        """Every kept checkpoint note, by increasing size."""

    @abc.abstractmethod
    def remembered_witness_keys(self) -> list[str]:
        """The witness vkeys this tenant remembers (see the module docstring), canonical
        (type 0x04 or 0x06, :func:`tlog.keys.format_vkey`), by key name and key ID."""

    @abc.abstractmethod
    def remember_witness_keys(self, vkeys: Sequence[str]) -> None:
        """Remember ``vkeys`` as witness keys of this tenant (restore does, with the export's).

        Each is read as :meth:`add_cosignatures` reads witness keys (0x04 or 0x06; a 0x01 vkey
        is remembered in its 0x04 form). A malformed key, a key with the log key's name and key
        ID, and a key whose name and key ID are those of another key given or remembered, are
        refused (UsageError), and nothing is remembered then. A key remembered already changes
        nothing.
        """

    # --- indexes ---------------------------------------------------------------------------

    @abc.abstractmethod
    def runs_by_outcome(self, outcome: str, limit: int) -> list[str]:
        """Runs whose last conclusion is ``outcome``, newest first."""

    @abc.abstractmethod
    def count_by_outcome(self, outcome: str) -> int:
        """How many runs' last conclusion is ``outcome``."""

    @abc.abstractmethod
    def case_history(self, case: str, limit: int) -> list[Record]:
        """Records of a case, in (run, seq) order, each hash-checked."""

    @abc.abstractmethod
    def recent_runs(
        self, after: tuple[int, str] | None, limit: int, *, source: str | None = None
    ) -> list[tuple[str, int]]:
        """(run, updated_at) by updated_at DESC, run DESC, strictly after the cursor; with
        ``source``, only the runs whose ``RunAdmitted`` names that source (same order, tie-break
        and cursor)."""

    @abc.abstractmethod
    def admitted_as(self, key: str) -> str | None:
        """The run holding the admission key ``key`` (``<source>/<id>``), or None."""

    @abc.abstractmethod
    def forget_admissions(self, older_than: int) -> int:
        """Retire the admission keys claimed before ``older_than`` (store-clock seconds);
        return how many."""

    @abc.abstractmethod
    def waiting_runs(self, limit: int) -> list[WaitingRun]:
        """The runs whose last record is a suspension, soonest ``until`` first, at most
        ``limit``."""

    @abc.abstractmethod
    def runs(self, after: str | None, limit: int) -> list[str]:
        """Every run with records, by run ID, strictly after ``after``."""

    @abc.abstractmethod
    def request_cancel(self, run: str, actor: str, reason: str) -> bool:
        """Record a cancellation request; True if this call made it (first asker wins)."""

    @abc.abstractmethod
    def cancellation(self, run: str) -> Cancellation | None:
        """The first cancellation request for a run, or None."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release the connection."""

    def __enter__(self) -> JournalStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def declared_keys(
    vkeys: Sequence[str], what: str, parse: Callable[[str], Verifier]
) -> dict[str, Verifier]:
    """Canonical vkey text -> verifier (``parse``), for the keys a caller declares: repeats of
    one key merged, two keys with one (name, key ID) refused (UsageError, naming ``what``)."""
    if isinstance(vkeys, str | bytes) or not isinstance(vkeys, Sequence):
        raise UsageError(f"the {what} keys are a sequence of vkeys, not one string")
    out: dict[str, Verifier] = {}
    for vkey in vkeys:
        v = parse_vkey_value(
            vkey, what, f"a {what} key is a vkey string", error=UsageError, parse=parse
        )
        out[format_vkey(v)] = v
    by_key: dict[tuple[str, int], str] = {}
    for text, v in out.items():
        if by_key.setdefault((v.name, v.key_id), text) != text:
            raise UsageError(f"two different {what} keys have the name and key ID of {text}")
    return out
