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
* **Outcome index**: derived by ``append`` from ``RunConcluded`` records (``data.outcome``); the
  last conclusion wins with a fresh ordinal; listings are newest first.
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
* **Cancellation requests** are unfenced; the first asker wins.
* **Recent runs**: ordered by (last append time DESC, run ID DESC), a total order; paging
  resumes strictly after the cursor ``(updated_at, run)``.
* **Abandoned runs**: leases expired and never released, oldest expiry first.
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
class Cancellation:
    """The first request to cancel a run."""

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
    def recent_runs(self, after: tuple[int, str] | None, limit: int) -> list[tuple[str, int]]:
        """(run, updated_at) by updated_at DESC, run DESC, strictly after the cursor."""

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
