"""Export a store's tenant to the export format, and restore an export into an empty store.

The file format is :mod:`tlog.export` (specified in ``docs/export-format.md``, §8 "Writing an
export, restoring one"). This module connects it to a :class:`~store.api.JournalStore`.

Export (:func:`export_store`) streams one tenant, in the format's canonical order:

1. the header: ``origin`` = :attr:`JournalStore.origin`, ``log-key`` =
   :attr:`JournalStore.log_vkey`, then the record keys the caller declares and the witness
   keys: those the store remembers (:meth:`JournalStore.remembered_witness_keys`: every
   witness whose cosignature it kept, and those a restore declared) and those the caller
   declares;
2. every kept checkpoint (:meth:`JournalStore.published`), as kept;
3. every sealed run by log position (:meth:`JournalStore.seals`, paged), each with its records
   (:meth:`JournalStore.read_page`, paged);
4. the unsealed runs by run ID (:meth:`JournalStore.runs`, paged; a run sealed at a position
   already written is skipped), each with the records it has when it is listed;
5. unless the tenant's inbox is empty, the inbox section (docs/export-format.md §4.7), read in
   one read transaction (:func:`store.inbox.transfer.read_inbox`); its witnesses (those the
   inbox log remembers) are declared in the header with the log's;
6. the end line; the digest is returned.

Memory: a page of records (:data:`PAGE`) at a time, and the list of kept checkpoint notes (the
contract returns it whole; there are few); never the journal. The export reads the store in
many transactions: on a store that is being written it is a view in which every run is a
prefix of what the store holds and the log is a prefix of the store's log (a run sealed after
the sealed runs were listed is written as unsealed, with the records it had before its seal
record). Keys: every
signature line of a kept checkpoint must be from the log key or a declared (or remembered)
witness key — a store of schema version 2 kept lines before it remembered keys, and a line of
those is declared by the caller, or remembered when merged again — and
every record signature from a declared record key (the format refuses anything else): an
undeclared key is a :class:`~tlog.errors.UsageError` naming it, raised before anything is
written for checkpoints, and when the record is reached for records. A witness vkey of type
0x01 is declared as its cosignature/v1 (0x04) form, as the format requires
(:func:`tlog.keys.cosigner_from_vkey`).

Restore (:func:`restore_store`) replays an export into a tenant whose log is empty and which
has no runs and no kept checkpoints (:class:`~tlog.errors.UsageError` otherwise):

* **Pass 1** verifies the whole file (:func:`tlog.export.verify_export`) with the store's own
  log key as the trusted one: an export of another log (another key, origin or tenant) is
  refused at its ``log-key`` line. Record and witness keys are the header's (``record_keys``
  narrows the trusted record keys). Nothing is written unless the whole file verifies.
* Then the header's witness keys are remembered
  (:meth:`JournalStore.remember_witness_keys`, one transaction), so that the restored store
  exports them as the source did: export → restore → export is byte-identical without
  declaring a witness key on either side.
* **Pass 2** reads the file again through :class:`tlog.export.ExportVerifier` (each item is
  verified again before it is used) and, for each run in file order, appends its records
  through :meth:`JournalStore.append` under each record's own epoch, in batches of
  consecutive records with one epoch (at most :data:`BATCH_RECORDS` records and about
  :data:`BATCH_BYTES` bytes of bodies). The runs have no lease row, so the store takes any epoch
  (the contract's restore path). The store must give back exactly the exported body bytes,
  previous hash, hash and signature of every record. A sealed run's last record, its seal
  record, is not appended: the run is sealed with its outcome under that record's epoch and
  with its signature (:meth:`JournalStore.seal` rebuilds the identical record), and must land
  at its exported position with that record's hash as head. Each checkpoint note is kept
  exactly as exported (:meth:`JournalStore.import_checkpoint`) as soon as the rebuilt log
  reaches its size. At the
  end, the rebuilt log must have the exported size and root, its root at every exported
  checkpoint's size must be that checkpoint's, the kept notes must be the exported notes, and
  the file's digest must be the one pass 1 verified (the file must not change meanwhile).

  Any failure in pass 2 raises :class:`RestoreError` naming the place (file line, run, seq).
  **The target store is then partially written and must be discarded** (it was empty, so
  nothing else is lost): a store refuses a second restore once it holds anything.

Record signatures. A restore must reproduce each record's signature byte for byte. Signing again
would need the original record key on the restoring side, and would sign records the export
left unsigned. Instead the contract's :meth:`JournalStore.append` takes the exported signatures
(``signatures=``): they replace the handle's record signer, whatever it is, so the restored
store holds exactly the exported signatures (and none on unsigned records). The store checks
their shape only; that they verify was checked in both passes against the header's record keys,
and the store's own hash of each record is compared with the exported one, which is what the
signature signs.

The inbox section, if any, is restored after the runs into the tenant's inbox, which must be
empty (:mod:`store.inbox.transfer`: events with all their fields, the inbox log's hashes, match
rows, waits, the wait counter; the inbox checkpoints are kept as the inbox log reaches them);
the rebuilt inbox log must have the exported size and root, and the inbox its counts.

What an export does not carry, and a restore therefore does not rebuild: leases (a restored run
has no lease row; the next :meth:`~JournalStore.acquire` gives an epoch above every epoch its
records carry), cancellation requests, and the times of the activity index (they become the
restore's times).
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, BinaryIO

from store.api import Append, JournalStore, Seal, declared_keys
from store.errors import CorruptError, RestoreError
from store.inbox import section, transfer
from tlog.checkpoint import Checkpoint
from tlog.errors import MalformedError, TlogError, UsageError, VerificationError
from tlog.export import (
    CheckpointItem,
    EndItem,
    EventItem,
    ExportHeader,
    ExportVerifier,
    ExportWriter,
    InboxCheckpointItem,
    InboxItem,
    InboxSummary,
    RecordItem,
    RunItem,
    WaitItem,
    verify_export,
)
from tlog.export.inbox import DELIVERED_TEXT
from tlog.inbox import KIND_EVENT_DELIVERED, inbox_origin
from tlog.journal import RecordSignature
from tlog.keys import cosigner_from_vkey, parse_vkey
from tlog.note import TYPE_ED25519, Ed25519Verifier, Verifier, parse_note

if TYPE_CHECKING:
    from store.inbox.core import Inbox

PAGE = 1000
"""Seals, runs or records fetched per query by :func:`export_store`."""

BATCH_RECORDS = 500
"""Most records :func:`restore_store` appends in one batch."""

BATCH_BYTES = 4 << 20
"""A restore batch is closed once its bodies reach this many bytes (a body is at most 1 MiB)."""


@dataclass(frozen=True)
class RestoreSummary:
    """What a restore rebuilt: the export's counts, its log's size and root, and its digest."""

    origin: str
    checkpoints: int
    runs: int
    sealed_runs: int
    records: int
    signed_records: int
    log_size: int
    log_root: bytes
    digest: bytes
    inbox: InboxSummary | None = None
    """The restored inbox's accounting (the export's inbox section's), None without one."""


# --- export ----------------------------------------------------------------------------------


def _key_of(v: Verifier) -> tuple[str, int]:
    return (v.name, v.key_id)


def _check_keys(
    log_vkey: str,
    witness_keys: Sequence[str],
    record_keys: Sequence[str],
    remembered: Sequence[str] = (),
) -> tuple[dict[str, Verifier], dict[str, Verifier]]:
    """The declared witness keys (with the ``remembered`` ones) and record keys, canonical,
    checked as the header requires."""
    # cosigner_from_vkey gives 0x04 or 0x06 only (a 0x01 vkey becomes its 0x04 form).
    given = declared_keys(witness_keys, "witness", cosigner_from_vkey)
    witnesses = declared_keys([*remembered, *given], "witness", cosigner_from_vkey)
    log = _key_of(parse_vkey(log_vkey))
    for text, v in witnesses.items():
        if _key_of(v) == log:
            raise UsageError(f"witness key {text} has the log key's name and key ID")
    records = declared_keys(record_keys, "record", parse_vkey)
    for text, v in records.items():
        if v.key_type != TYPE_ED25519:
            raise UsageError(f"record key {text} has type 0x{v.key_type:02x}, not 0x01 (Ed25519)")
    return witnesses, records


def _check_notes(notes: list[bytes], allowed: set[tuple[str, int]], which: str = "") -> None:
    """Every signature line of every kept note must be from the log key or a witness key
    (``which``: ``"inbox "`` for the inbox log's notes)."""
    for note in notes:
        try:
            text, sigs = parse_note(note)
            size = Checkpoint.parse(text).size
        except MalformedError as e:  # pragma: no cover - the store parsed it when it kept it
            raise CorruptError(f"a kept checkpoint does not parse: {e}") from None
        for s in sigs:
            if (s.name, s.key_id) not in allowed:
                raise UsageError(
                    f"the kept {which}checkpoint of size {size} carries a signature line of "
                    f"{s.name}+{s.key_id:08x}, which is neither the log key nor a remembered "
                    "or declared witness key (the export format refuses lines of undeclared "
                    "keys rather than drop them): if it is a witness's cosignature, kept before "
                    "the store remembered witness keys, declare its vkey (tlog-store export "
                    "--witness-key VKEY, or witness_keys= in Python); a plain Ed25519 (type "
                    "0x01) line, which no export can carry, was kept by a store older than its "
                    "check"
                )


def _no_run_at(position: int) -> CorruptError:
    return CorruptError(
        f"log position {position} has no sealed run (was its run deleted?): an export needs "
        "the run of every leaf"
    )


def _write_run(
    store: JournalStore,
    w: ExportWriter,
    run: str,
    seal: Seal | None,
    record_keys: set[tuple[str, int]],
    delivered: set[tuple[str, int]],
) -> None:
    """Write one run: its ``run`` line and its records, a page at a time.

    An unsealed run (``seal`` None) is written with the records it has now — but without its
    seal record if it was sealed meanwhile (a run sealed after the sealed runs were written is
    exported as it was before its seal)."""
    head = store.head(run)
    if head.seq == 0:
        if seal is not None:
            raise CorruptError(f"sealed at position {seal.position} but has no records", run)
        return  # listed, then deleted: there is nothing to export
    count = head.seq
    if seal is not None:
        if seal.head != head.hash:
            raise CorruptError("the sealed head is not the hash of the run's last record", run)
    else:
        now = store.sealed(run)
        if now is not None and now.head == head.hash:
            count -= 1  # sealed since it was listed: its seal record is the head read above
            if count == 0:  # pragma: no cover - a store never seals an empty run
                return
    w.run(
        run,
        count,
        None if seal is None else (seal.position, seal.outcome),
        head=None if seal is None else seal.head,
    )
    seq = 1
    prev: bytes | None = None
    while seq <= count:
        page = store.read_page(run, seq, min(PAGE, count - seq + 1))
        if not page:
            raise CorruptError(f"record {seq} is missing (the head is record {count})", run)
        for r in page:
            if r.seq != seq:
                raise CorruptError(f"sequence gap: expected record {seq}", run, r.seq)
            if prev is not None and r.prev_hash != prev:
                raise CorruptError("does not link to the previous record's hash", run, r.seq)
            s = r.signature
            if s is not None and (s.name, s.key_id) not in record_keys:
                raise UsageError(
                    f"run {run} record {r.seq} is signed by {s.name}+{s.key_id:08x}, which is "
                    "no declared record key: declare its vkey (tlog-store export --record-key "
                    "VKEY)"
                )
            try:
                w.record(r)
            except (MalformedError, VerificationError) as e:
                raise CorruptError(f"cannot be exported: {e}", run, r.seq) from None
            if DELIVERED_TEXT in r.raw and r.body().kind == KIND_EVENT_DELIVERED:
                delivered.add((run, r.seq))
            prev = r.hash
            seq += 1


def export_store(
    store: JournalStore,
    out: BinaryIO,
    *,
    witness_keys: Sequence[str] = (),
    record_keys: Sequence[str] = (),
) -> bytes:
    """Stream an export of ``store``'s tenant to ``out``; return its digest (the end line's).

    The header declares the witness keys the store remembers and ``witness_keys``: vkeys of
    witnesses whose cosignature lines the kept checkpoints carry and the store does not
    remember (0x04 or 0x06; a 0x01 vkey is read as its 0x04 form; a store remembers the key of
    every line it kept since schema version 3), or any other witness to declare.
    ``record_keys``: the Ed25519 vkeys of every key that signed records. Declared keys may sign
    nothing.

    Raises :class:`~tlog.errors.UsageError` for a malformed key, a kept checkpoint line of an
    undeclared key (before writing anything) or a record signed by an undeclared key;
    :class:`~store.errors.CorruptError` when the store cannot be exported as it is (a log
    position whose run was deleted, a sealed head that is not the run's last record, a record
    the format refuses). When it raises, ``out`` holds a partial export: discard it.
    Requires: ``out`` a binary stream opened for writing.
    """
    origin = store.origin
    log_vkey = store.log_vkey
    inbox = _inbox_of(store)
    remembered = store.remembered_witness_keys()
    if inbox is not None:  # the witnesses of the inbox log's kept checkpoints
        remembered += inbox.log.remembered_witness_keys()
    witnesses, records = _check_keys(log_vkey, witness_keys, record_keys, remembered)
    log = parse_vkey(log_vkey)
    notes = store.published()
    cosigners = {_key_of(v) for v in witnesses.values()}
    _check_notes(notes, {_key_of(log)} | cosigners)
    inbox_notes: list[bytes] = []
    if inbox is not None:
        inbox_notes = inbox.log.published()
        inbox_key = Ed25519Verifier(inbox_origin(origin), log.public_key)
        _check_notes(inbox_notes, {_key_of(inbox_key)} | cosigners, "inbox ")
    # Read after the notes: the log only grows, so every note's size is within it, and every
    # position below it must have its sealed run.
    log_size = store.checkpoint().size

    w = ExportWriter(out)
    w.header(ExportHeader(origin, log_vkey, tuple(records), tuple(witnesses)))
    for note in notes:
        w.checkpoint(note)
    signers = {_key_of(v) for v in records.values()}
    delivered: set[tuple[str, int]] = set()  # (run, seq) of the EventDelivered records written

    position = 0  # the next log position, and the number of sealed runs written
    while page := store.seals(position - 1, PAGE):
        for seal in page:
            if seal.position != position:
                raise _no_run_at(position)
            _write_run(store, w, seal.run, seal, signers, delivered)
            position += 1
    if position < log_size:
        raise _no_run_at(position)

    last: str | None = None
    while runs := store.runs(last, PAGE):
        for run in runs:
            sealed = store.sealed(run)
            if sealed is not None and sealed.position < position:
                continue  # written with the sealed runs
            # Unsealed, or sealed after the sealed runs were listed: as it was before.
            _write_run(store, w, run, None, signers, delivered)
        last = runs[-1]
    if inbox is not None:
        section.write_section(inbox, w, inbox_notes, delivered)
    return w.end()


def _inbox_of(store: JournalStore) -> Inbox | None:
    """The tenant's inbox, on a store that has one (the SQL stores)."""
    inbox: Inbox | None = getattr(store, "inbox", None)
    return inbox


# --- restore ---------------------------------------------------------------------------------


def _require_empty(store: JournalStore) -> None:
    """Refuse a target whose tenant has runs, a log or kept checkpoints."""
    where = f"tenant {store.tenant!r} of the target store"
    if store.runs(None, 1):
        raise UsageError(f"{where} has runs: a restore needs an empty tenant")
    size = store.checkpoint().size
    if size:
        raise UsageError(f"{where} has a log of size {size}: a restore needs an empty log")
    if store.published():
        raise UsageError(f"{where} keeps checkpoints: a restore needs an empty log")
    inbox = _inbox_of(store)
    if inbox is not None and not transfer.is_empty(inbox):
        raise UsageError(
            f"{where} has an inbox (events, waits or inbox checkpoints): a restore needs an "
            "empty one"
        )


@dataclass
class _Batch:
    """Consecutive records of one run with one epoch, to append together."""

    epoch: int = 0
    items: list[RecordItem] = field(default_factory=list)
    appends: list[Append] = field(default_factory=list)
    size: int = 0

    def fits(self, epoch: int, raw_size: int) -> bool:
        return not self.items or (
            epoch == self.epoch
            and len(self.items) < BATCH_RECORDS
            and self.size + raw_size <= BATCH_BYTES
        )


class _Replay:
    """Pass 2: the store's side of a restore (see the module docstring)."""

    def __init__(self, store: JournalStore) -> None:
        self.store = store
        self.batch = _Batch()
        self.log_size = 0
        self.pending: deque[CheckpointItem] = deque()  # kept once the log reaches their size
        self.notes: list[CheckpointItem] = []  # every exported checkpoint (few)
        self.inbox: section.InboxReplay | None = None

    def checkpoint(self, item: CheckpointItem) -> None:
        self.notes.append(item)
        self.pending.append(item)
        self.import_reached()

    def import_reached(self) -> None:
        while self.pending and self.pending[0].checkpoint.size <= self.log_size:
            item = self.pending.popleft()
            size = item.checkpoint.size
            try:
                self.store.import_checkpoint(item.note)
            except TlogError as e:
                raise RestoreError(
                    item.line, f"checkpoint of size {size}: the store refused to keep it: {e}"
                ) from e

    def record(self, run: RunItem, item: RecordItem) -> None:
        r = item.record
        try:
            body = r.body()
        except MalformedError as e:  # pragma: no cover - both passes checked every body
            raise RestoreError(item.line, f"run {r.run} record {r.seq}: {e}", r.run, r.seq) from e
        if run.seal is not None and r.seq == run.count:
            # The seal record: rebuilt by seal, under its epoch, with its signature.
            self.flush()
            self.seal(run, item, body.epoch)
            return
        if not self.batch.fits(body.epoch, len(r.raw)):
            self.flush()
        b = self.batch
        b.epoch = body.epoch
        b.items.append(item)
        b.size += len(r.raw)
        if body.has_data:
            a = Append(r.run, body.kind, body.data, case=body.case, effect_key=body.effect_key)
        else:
            a = Append(r.run, body.kind, case=body.case, effect_key=body.effect_key)
        b.appends.append(a)
        if r.seq == run.count:
            self.flush()

    def flush(self) -> None:
        b, self.batch = self.batch, _Batch()
        if not b.items:
            return
        first = b.items[0].record
        last = b.items[-1].record
        signatures: list[RecordSignature | None] = [i.record.signature for i in b.items]
        try:
            got = self.store.append(b.epoch, b.appends, signatures=signatures)
        except TlogError as e:
            raise RestoreError(
                b.items[0].line,
                f"run {first.run} records {first.seq}-{last.seq}: the store refused them: {e}",
                first.run,
                first.seq,
            ) from e
        if len(got) != len(b.items):
            raise RestoreError(
                b.items[0].line,
                f"run {first.run} records {first.seq}-{last.seq}: the store wrote "
                f"{len(got)} records for {len(b.items)}",
                first.run,
                first.seq,
            )
        for item, rec in zip(b.items, got, strict=True):
            want = item.record
            where = f"run {want.run} record {want.seq}"
            if (rec.run, rec.seq) != (want.run, want.seq):
                raise RestoreError(
                    item.line, f"{where}: the store wrote run {rec.run} record {rec.seq}",
                    want.run, want.seq,
                )  # fmt: skip
            if rec.raw != want.raw:
                raise RestoreError(
                    item.line, f"{where}: the store rebuilt other body bytes", want.run, want.seq
                )
            if rec.prev_hash != want.prev_hash or rec.hash != want.hash:
                raise RestoreError(
                    item.line, f"{where}: the store rebuilt another hash", want.run, want.seq
                )
            if rec.signature != want.signature:
                raise RestoreError(
                    item.line, f"{where}: the store kept another signature", want.run, want.seq
                )

    def seal(self, run: RunItem, last: RecordItem, epoch: int) -> None:
        """Seal the run, which rebuilds its seal record (``last``) with the exported signature."""
        assert run.seal is not None
        want_record = last.record
        try:
            seal = self.store.seal(
                run.run, epoch, run.seal.outcome, signatures=[want_record.signature]
            )
        except TlogError as e:
            raise RestoreError(run.line, f"run {run.run}: the store refused to seal it: {e}") from e
        want = (run.seal.position, want_record.hash, run.seal.outcome)
        if (seal.position, seal.head, seal.outcome) != want:
            raise RestoreError(
                run.line,
                f"run {run.run}: the store sealed it at position {seal.position} "
                f"({seal.outcome}), the export at position {run.seal.position} "
                f"({run.seal.outcome})"
                + ("" if seal.head == want_record.hash else ", with another head"),
                run.run,
            )
        got = self.store.read_page(run.run, want_record.seq, 1)
        where = f"run {run.run} record {want_record.seq}"
        if not got or got[0].raw != want_record.raw or got[0].hash != want_record.hash:
            raise RestoreError(
                last.line,
                f"{where}: the store rebuilt another seal record",
                run.run,
                last.record.seq,
            )
        if got[0].signature != want_record.signature:
            raise RestoreError(
                last.line,
                f"{where}: the store kept another signature",
                run.run,
                want_record.seq,
            )
        self.log_size += 1
        self.import_reached()

    def finish(self, end: EndItem, origin: str) -> None:
        """The rebuilt log reproduces every exported checkpoint, and keeps exactly them."""
        store = self.store
        if self.pending:  # pragma: no cover - the verifier refuses checkpoints beyond the log
            item = self.pending[0]
            raise RestoreError(item.line, f"checkpoint of size {item.checkpoint.size} was not kept")
        for item in self.notes:
            cp = item.checkpoint
            if store.tree_root(cp.size) != cp.root:
                raise RestoreError(
                    item.line, f"the rebuilt log's root at size {cp.size} is not the checkpoint's"
                )
        now = store.checkpoint()
        if (now.origin, now.size) != (origin, end.log_size):
            raise RestoreError(
                end.line,
                f"the rebuilt log is {now.origin} of size {now.size}, the export's "
                f"{origin} of size {end.log_size}",
            )
        if store.published() != [item.note for item in self.notes]:
            raise RestoreError(end.line, "the store's kept checkpoints are not the exported ones")


def _replay(
    store: JournalStore, stream: BinaryIO, verifier: ExportVerifier, origin: str
) -> tuple[EndItem, bytes]:
    """Pass 2; returns the end item and the rebuilt log's root."""
    replay = _Replay(store)
    run: RunItem | None = None
    end: EndItem | None = None
    for item in verifier.items(stream):
        if isinstance(item, CheckpointItem):
            replay.checkpoint(item)
        elif isinstance(item, RunItem):
            run = item
        elif isinstance(item, RecordItem):
            assert run is not None
            replay.record(run, item)
        elif isinstance(item, InboxItem):
            replay.flush()  # the runs' records are all written before the inbox's
            replay.inbox = section.InboxReplay(_inbox_of(store), item)
        elif isinstance(item, InboxCheckpointItem):
            assert replay.inbox is not None
            replay.inbox.checkpoint(item)
        elif isinstance(item, EventItem):
            assert replay.inbox is not None
            replay.inbox.event(item)
        elif isinstance(item, WaitItem):
            assert replay.inbox is not None
            replay.inbox.wait(item)
        elif isinstance(item, EndItem):
            end = item
    assert end is not None and verifier.summary is not None
    replay.flush()
    replay.finish(end, origin)
    if replay.inbox is not None:
        replay.inbox.finish(end, verifier.summary.inbox)
    root = store.checkpoint().root
    if root != verifier.summary.log_root:
        raise RestoreError(end.line, "the rebuilt log's root is not the export's")
    return end, root


def restore_store(
    store: JournalStore,
    path: str | os.PathLike[str],
    *,
    record_keys: Iterable[str] | None = None,
    require_record_signatures: bool = False,
) -> RestoreSummary:
    """Replay the export at ``path`` into ``store``'s tenant; return what was rebuilt.

    Requires: the tenant has no runs, an empty log and no kept checkpoints (UsageError
    otherwise, before reading the file); the export is of this store's log (its ``log-key`` is
    :attr:`JournalStore.log_vkey`, which fixes the origin too). ``record_keys``, when given,
    are the trusted record vkeys: every ``record-key`` of the export must be one of them;
    ``require_record_signatures`` refuses an unsigned record. The file must not change while
    the restore runs. (A lease taken on a run that has no records is invisible to the emptiness
    check; the replay's appends to that run would then be fenced, in pass 2.)

    Pass 1 verifies the whole file and raises the :mod:`tlog.export` error naming its line
    (``"line N: …"``) when it does not verify; nothing is written then. Pass 2 replays it (see
    the module docstring) and raises :class:`RestoreError` naming the line, run and record
    where the store did not reproduce the export or refused a write: **the target store is
    then partially written and must be discarded**.
    """
    _require_empty(store)
    log_key = store.log_vkey
    trusted = None if record_keys is None else list(record_keys)
    with open(path, "rb") as f:
        first = verify_export(
            f,
            log_key=log_key,
            record_keys=trusted,
            require_record_signatures=require_record_signatures,
        )
    _require_empty(store)  # still: nothing may have been written meanwhile
    store.remember_witness_keys(first.header.witness_keys)
    verifier = ExportVerifier(log_key, trusted, require_record_signatures)
    with open(path, "rb") as f:
        end, root = _replay(store, f, verifier, store.origin)
    if end.digest != first.digest:
        raise RestoreError(
            end.line, "the export changed between the verifying pass and the replaying pass"
        )
    return RestoreSummary(
        origin=first.header.origin,
        checkpoints=first.checkpoints,
        runs=first.runs,
        sealed_runs=first.sealed_runs,
        records=first.records,
        signed_records=first.signed_records,
        log_size=first.log_size,
        log_root=root,
        digest=end.digest,
        inbox=first.inbox,
    )


__all__ = [
    "BATCH_BYTES",
    "BATCH_RECORDS",
    "PAGE",
    "RestoreError",
    "RestoreSummary",
    "export_store",
    "restore_store",
]
