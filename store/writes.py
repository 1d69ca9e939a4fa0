"""The journal store's writes: records, leases, seals and cancellation requests.

Each write is one transaction of the engine (:mod:`store.db.engine`) that first ensures and
locks the run's row (:mod:`store.sql`'s serialisation rule), then reads what it decides on —
the lease, the seal, the head — in later statements. Arguments are checked before the
transaction; nothing is written when a write raises.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from store.api import Append, Head, Lease, Seal
from store.db import Tx, check_int
from store.errors import (
    CorruptError,
    DuplicateAdmissionError,
    DuplicateEffectError,
    FencedError,
    LeaseHeldError,
    LeaseNotHeldError,
    RunSealedError,
    SealConflictError,
)
from store.outbox import mark_due
from store.schema import (
    CLAIM_ADMISSION,
    CLEAR_WAITING,
    CONSTRAINTS,
    INSERT_RECORD,
    INSERT_SOURCE,
    UPSERT_WAITING,
    index_outcome,
    record_row,
    stored_bool,
    stored_int,
    stored_run,
    stored_text,
)
from store.sqlcore import SQLCore
from tlog import merkle
from tlog.encoding import MAX_INT63, is_text
from tlog.errors import MalformedError, UsageError
from tlog.inbox import KIND_EVENT_DELIVERED
from tlog.journal import (
    KIND_EFFECT_STARTED,
    KIND_RUN_SEALED,
    Body,
    Record,
    RecordSignature,
    Suspension,
    admission_of,
    check_outcome,
    check_run_id,
    make_record,
    seal_body,
    split_admission_key,
    suspension_of,
)
from tlog.note import Ed25519Signer, check_key_name

Signatures = list[RecordSignature | None]


def _check_label(value: object, what: str, *, empty: bool = False, limit: int = 256) -> str:
    # Owners, actors, outcomes: short printable labels (control characters would let one
    # label print as another in logs and listings).
    if not isinstance(value, str) or (not value and not empty) or len(value) > limit:
        raise UsageError(f"{what} must be a string of {0 if empty else 1}-{limit} characters")
    if any(c < " " or c == "\x7f" for c in value):
        raise UsageError(f"{what} contains a control character")
    if not is_text(value):
        raise UsageError(f"{what} is not valid Unicode text")
    return value


RECORD_SIGNATURE_SIZE = 64
"""Bytes of a record signature (Ed25519)."""


def _check_signatures(signatures: object, count: int) -> list[RecordSignature | None]:
    """Given record signatures (the restore path): one per record, each None or well-formed."""
    if not isinstance(signatures, list | tuple):
        raise UsageError("signatures are a list, one entry per record")
    if len(signatures) != count:
        raise UsageError(f"{len(signatures)} signatures for a batch of {count} records")
    for i, s in enumerate(signatures):
        if s is None:
            continue
        if not isinstance(s, RecordSignature):
            raise UsageError(f"signature {i} is a {type(s).__name__}, not a RecordSignature")
        try:
            if not isinstance(s.name, str):
                raise MalformedError("the key name is not a string")
            check_key_name(s.name)
        except MalformedError as e:
            raise UsageError(f"signature {i}: {e}") from None
        if (
            not isinstance(s.key_id, int)
            or isinstance(s.key_id, bool)
            or not 0 <= s.key_id < 1 << 32
        ):
            raise UsageError(f"signature {i}: key ID {s.key_id!r} is not a 32-bit value")
        if not isinstance(s.sig, bytes) or len(s.sig) != RECORD_SIGNATURE_SIZE:
            raise UsageError(f"signature {i} is not {RECORD_SIGNATURE_SIZE} bytes")
    return list(signatures)


def _batch_run(batch: Sequence[Append], *, delivery_ok: bool = False) -> str:
    """The one run a batch of Append values names (UsageError otherwise, or for the
    reserved seal kind, or for the reserved delivery kind unless ``delivery_ok``: the inbox
    and the restore path write it)."""
    run = None
    for a in batch:
        if not isinstance(a, Append):
            raise UsageError(f"a batch holds Append values, not {type(a).__name__}")
        if run is None:
            run = a.run
        elif a.run != run:
            raise UsageError(f"a batch belongs to one run; this one names {run!r} and {a.run!r}")
    assert run is not None
    check_run_id(run)
    for a in batch:
        if a.kind == KIND_RUN_SEALED:
            raise UsageError(
                f"the record kind {KIND_RUN_SEALED} is reserved: a run's seal record is "
                "written by seal, not appended"
            )
        if a.kind == KIND_EVENT_DELIVERED and not delivery_ok:
            raise UsageError(
                f"the record kind {KIND_EVENT_DELIVERED} is reserved: a delivery record is "
                "written by the inbox when a run resumes on an event"
            )
    return run


class _EffectConflict(Exception):
    """Internal: the exactly-once key refused one of ``keys`` (named after the rollback)."""

    def __init__(self, keys: list[str]) -> None:
        super().__init__("duplicate effect")
        self.keys = keys


class _Derived:
    """What a batch means to the derived indexes (:func:`_chain`): the outcome of its last
    conclusion, the admission key of its ``RunAdmitted`` record with that record's seq, and
    the suspension its last record is (None when the last record is not one)."""

    def __init__(self) -> None:
        self.outcome: str | None = None
        self.admission: tuple[str, int] | None = None
        self.suspension: Suspension | None = None


def _chain(
    run: str,
    epoch: int,
    batch: Sequence[Append],
    head: Head,
    signer: Ed25519Signer | None,
    given: Signatures | None,
) -> tuple[list[Record], _Derived]:
    """The batch's records chained after ``head`` (signed by ``signer``, or carrying the
    ``given`` signatures), and what they mean to the derived indexes (each record of a kind
    the store reads checked: MalformedError naming its seq)."""
    seq, prev = head.seq, head.hash
    records: list[Record] = []
    derived = _Derived()
    for i, a in enumerate(batch):
        seq += 1
        has_data = a.has_data
        body = Body(
            run, seq, epoch, a.kind, a.case, a.effect_key, a.data if has_data else None, has_data
        )
        rec = make_record(body, prev, signer)
        if given is not None and given[i] is not None:
            rec = Record(run, seq, rec.raw, prev, rec.hash, given[i])
        concluded = body.outcome
        if concluded is not None:
            # Indexed, so held to the rule of a seal's outcome (check_outcome).
            try:
                check_outcome(concluded)
            except MalformedError as e:
                raise MalformedError(f"record {seq}: RunConcluded {e}") from None
            derived.outcome = concluded
        try:
            key = admission_of(body)
            derived.suspension = suspension_of(body)
        except MalformedError as e:
            raise MalformedError(f"record {seq}: {e}") from None
        if key is not None:
            if derived.admission is not None:
                raise MalformedError(f"record {seq}: a second RunAdmitted record in one batch")
            derived.admission = (key, seq)
        records.append(rec)
        prev = rec.hash
    return records, derived


def _fence(run: str, epoch: int, lease_epoch: int | None) -> None:
    # A run with a lease row (live, expired or released) takes exactly its epoch. A run never
    # leased has nothing to fence against and takes any epoch: the restore path replays each
    # record under its own epoch, and an export carries no leases (store.api, "Leases and
    # fencing"). Its first acquire starts above every epoch its records carry.
    if lease_epoch is not None and lease_epoch != epoch:
        raise FencedError(run, epoch, lease_epoch)


class JournalWrites(SQLCore):
    """The writes of :class:`store.sql.SQLStore` (and :meth:`abandoned_runs`, which reads
    the leases they write)."""

    # --- records -------------------------------------------------------------------------------

    def append(
        self,
        epoch: int,
        batch: Sequence[Append],
        *,
        signatures: Sequence[RecordSignature | None] | None = None,
    ) -> list[Record]:
        """Append ``batch`` to its run under ``epoch``, atomically (see :mod:`store.api`).

        An empty batch returns [] without touching the database. A batch naming two runs, or
        holding something other than :class:`Append`, is refused (:class:`UsageError`) before
        the transaction. Inside it: the fence (FencedError when the run has a lease row whose
        epoch is not ``epoch``; a run never leased takes any epoch), then the seal
        (RunSealedError),
        then the records, the admission key of a ``RunAdmitted`` (DuplicateAdmissionError;
        MalformedError when it is not the run's first record), the exactly-once keys
        (DuplicateEffectError), the outcome index, the activity and source indexes, and the
        waiting index (set when the batch's last record is a ``RunSuspended``, cleared
        otherwise). A malformed record raises MalformedError; nothing is written.

        ``signatures`` (the restore path), when given, holds one entry per record and replaces
        the handle's record signer for this batch (see :mod:`store.sql`); on that path a held
        admission key is taken over instead of refused (:meth:`_claim_admission`).
        """
        if not batch:
            if signatures is not None:
                _check_signatures(signatures, 0)
            return []
        run, work = self._append_work(epoch, batch, signatures)
        try:
            return self._write(work)
        except _EffectConflict as c:
            raise DuplicateEffectError(
                run, self._conflicting_key(run, c.keys, self._read)
            ) from None

    def _append_work(
        self,
        epoch: int,
        batch: Sequence[Append],
        signatures: Sequence[RecordSignature | None] | None,
        *,
        delivery_ok: bool = False,
    ) -> tuple[str, Callable[[Tx], list[Record]]]:
        """The checked arguments of a non-empty :meth:`append` as its run and the function its
        transaction runs: the one append, for the store's own transactions and for a caller's
        (:mod:`store.atomic`). The function raises :class:`_EffectConflict` for a refused
        exactly-once key (the caller names it, :meth:`_conflicting_key`, once rolled back)."""
        given = None if signatures is None else _check_signatures(signatures, len(batch))
        check_int(epoch, "epoch", 1)
        run = _batch_run(batch, delivery_ok=delivery_ok or given is not None)
        tenant = self._tenant
        signer = self._record_signer if given is None else None

        def work(tx: Tx) -> list[Record]:
            self._lock_run(tx, run)
            lease_epoch, seal, head, now = self._run_state(tx, run)
            _fence(run, epoch, lease_epoch)
            if seal is not None:
                raise RunSealedError(run, seal.outcome)
            records, derived = _chain(run, epoch, batch, head, signer, given)
            pairs = list(zip(batch, records, strict=True))
            if derived.admission is not None:
                key, seq = derived.admission
                # The key first: a retried admission learns which run holds its key (perhaps
                # this one), not that the run has begun.
                self._claim_admission(tx, run, key, now, restoring=given is not None)
                if seq != 1:
                    # A run has one key and one source: the ones its first record names.
                    raise MalformedError(
                        f"record {seq}: a RunAdmitted record is a run's first record; run {run}"
                        f" has {seq - 1} before it"
                    )
            self._claim_effects(tx, run, pairs)
            tx.executemany(
                INSERT_RECORD,
                [record_row(tenant, epoch, a.kind, a.case, a.effect_key, r) for a, r in pairs],
            )
            if derived.outcome is not None:
                index_outcome(tx, tenant, run, derived.outcome)
            self._touch(tx, run, now)
            wait = derived.suspension
            if wait is not None:  # the batch's last record is a suspension
                last = records[-1].seq
                tx.execute(UPSERT_WAITING, (tenant, run, wait.until, wait.message, last))
            else:
                tx.execute(CLEAR_WAITING, (tenant, run))
            mark_due(tx, tenant, run, now)
            return records

        return run, work

    def _claim_effects(self, tx: Tx, run: str, pairs: list[tuple[Append, Record]]) -> None:
        """Insert the exactly-once keys of the batch's ``EffectStarted`` records."""
        effects = [
            (self._tenant, run, a.effect_key, r.seq)
            for a, r in pairs
            if a.kind == KIND_EFFECT_STARTED and a.effect_key is not None
        ]
        if not effects:
            return
        # The exactly-once key decides; Python only names the key afterwards.
        try:
            tx.executemany(
                "INSERT INTO effect_once (tenant, run, effect_key, seq) VALUES (?, ?, ?, ?)",
                effects,
            )
        except self._d.driver_errors as e:
            if self._d.unique_constraint(e, CONSTRAINTS) == "effect_once_pk":
                raise _EffectConflict([k for _, _, k, _ in effects]) from e
            raise

    def _claim_admission(self, tx: Tx, run: str, key: str, now: int, *, restoring: bool) -> None:
        """Claim ``key`` for ``run`` and index the run's source; DuplicateAdmissionError when
        the key is held.

        The primary key decides (``ON CONFLICT DO NOTHING``: on PostgreSQL a concurrent
        claimant's insert is waited for, and the loser writes nothing); the holder is read
        afterwards only to be named, by a later statement that sees the winner's commit. On the
        restore path (``restoring``: the records carry given signatures) a held key is not an
        error: an export can hold two runs with one key when the key was retired
        (``forget_admissions``) and issued again — retiring is not journaled, so the export
        cannot say so. The run restored last takes the key: a restore writes sealed runs in log
        order, then the unsealed ones, so that is the run sealed last or a run still open,
        which is the reissued holder whenever the retired one was sealed before it.
        """
        t = self._tenant
        if tx.execute(CLAIM_ADMISSION, (t, key, run, now)) != 1:
            if not restoring:
                row = tx.one(
                    "SELECT run FROM run_admission WHERE tenant = ? AND admission_key = ?",
                    (t, key),
                )
                holder = None if row is None else stored_run(row[0])
                raise DuplicateAdmissionError(key, holder, run)
            tx.execute(
                "UPDATE run_admission SET run = ?, claimed_at = ?"
                " WHERE tenant = ? AND admission_key = ?",
                (run, now, t, key),
            )
        tx.execute(INSERT_SOURCE, (t, run, split_admission_key(key)[0], now))

    def _touch(self, tx: Tx, run: str, now: int) -> None:
        """Record ``now`` as the run's last activity (the activity index, and the source
        index's copy of it)."""
        tx.execute(
            "INSERT INTO run_activity (tenant, run, updated_at) VALUES (?, ?, ?)"
            " ON CONFLICT (tenant, run) DO UPDATE SET updated_at = excluded.updated_at",
            (self._tenant, run, now),
        )
        tx.execute(
            "UPDATE run_source SET updated_at = ? WHERE tenant = ? AND run = ?",
            (now, self._tenant, run),
        )

    def _conflicting_key(
        self, run: str, keys: list[str], read: Callable[[Callable[[Tx], str | None]], str | None]
    ) -> str:
        # Which key the constraint refused: a key repeated inside the batch, else one that the
        # run's history holds (keys are never deleted, so it is still there), looked up by
        # ``read`` (a read transaction, or the caller's joined transaction).
        seen: set[str] = set()
        for k in keys:
            if k in seen:
                return k
            seen.add(k)
        if len(keys) == 1:
            return keys[0]

        def find(tx: Tx) -> str | None:
            for k in keys:
                if tx.one(
                    "SELECT seq FROM effect_once WHERE tenant = ? AND run = ? AND effect_key = ?",
                    (self._tenant, run, k),
                ):
                    return k
            return None

        return read(find) or keys[0]

    # --- leases --------------------------------------------------------------------------------

    def _check_ttl(self, ttl: int) -> int:
        return check_int(ttl, "lease TTL (whole seconds)", 1)

    @staticmethod
    def _expiry(now: int, ttl: int) -> int:
        if now + ttl > MAX_INT63:
            raise UsageError(f"lease TTL {ttl} overflows the clock (now {now}, limit 2^63-1)")
        return now + ttl

    def _lease_row(self, tx: Tx, run: str) -> tuple[str, int, int, bool] | None:
        row = tx.one(
            "SELECT owner, epoch, expires_at, released FROM run_lease WHERE tenant = ? AND run = ?",
            (self._tenant, run),
        )
        if row is None:
            return None
        return (
            stored_text(row[0], "lease owner", run),
            stored_int(row[1], "lease epoch", run, 1),
            stored_int(row[2], "lease expiry", run),
            stored_bool(row[3], "lease released flag", run),
        )

    def acquire(self, run: str, owner: str, ttl: int) -> Lease:
        """Claim ``run`` for ``owner`` for ``ttl`` whole seconds (>= 1), bumping the epoch.

        A live lease (``expires_at > now``, not released) is refused even to its holder:
        :class:`LeaseHeldError`. Without a lease row the epoch is 1 + the highest epoch the
        run's records carry. The expiry ``now + ttl`` must fit in 2^63-1 (UsageError).
        """
        check_run_id(run)
        _check_label(owner, "lease owner")
        self._check_ttl(ttl)

        def work(tx: Tx) -> Lease:
            self._lock_run(tx, run)
            now = self._now(tx)
            expires_at = self._expiry(now, ttl)
            lease = self._lease_row(tx, run)
            if lease is None:
                row = tx.one(
                    "SELECT MAX(epoch) FROM journal WHERE tenant = ? AND run = ?",
                    (self._tenant, run),
                )
                top = 0 if row is None or row[0] is None else stored_int(row[0], "epoch", run)
                epoch = top + 1
            else:
                holder, held, lease_expiry, released = lease
                if not released and lease_expiry > now:
                    raise LeaseHeldError(run, holder, held, lease_expiry - now)
                epoch = held + 1
            if epoch > MAX_INT63:
                raise UsageError(f"run {run} has used up its epochs")
            tx.execute(
                "INSERT INTO run_lease (tenant, run, owner, epoch, expires_at, released)"
                " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (tenant, run) DO UPDATE"
                " SET owner = excluded.owner, epoch = excluded.epoch,"
                " expires_at = excluded.expires_at, released = excluded.released",
                (self._tenant, run, owner, epoch, expires_at, False),
            )
            return Lease(run, owner, epoch, expires_at)

        return self._write(work)

    def renew(self, run: str, owner: str, epoch: int, ttl: int) -> Lease:
        """Extend the exact live (``owner``, ``epoch``) lease to ``now + ttl``, keeping the
        epoch; otherwise :class:`LeaseNotHeldError`, writing nothing."""
        check_run_id(run)
        _check_label(owner, "lease owner")
        check_int(epoch, "epoch", 1)
        self._check_ttl(ttl)

        def work(tx: Tx) -> Lease:
            self._lock_run(tx, run)
            now = self._now(tx)
            lease = self._lease_row(tx, run)
            if lease is None:
                raise LeaseNotHeldError(run, owner, epoch)
            holder, held, lease_expiry, released = lease
            if released or lease_expiry <= now or holder != owner or held != epoch:
                raise LeaseNotHeldError(run, owner, epoch)
            expires_at = self._expiry(now, ttl)
            tx.execute(
                "UPDATE run_lease SET expires_at = ? WHERE tenant = ? AND run = ?",
                (expires_at, self._tenant, run),
            )
            return Lease(run, owner, epoch, expires_at)

        return self._write(work)

    def release(self, run: str, epoch: int) -> None:
        """Mark the lease at ``epoch`` released and expired (no later than now), keeping the
        epoch. Any other epoch, or no lease: nothing happens, and it is not an error."""
        check_run_id(run)
        check_int(epoch, "epoch", 1)

        def work(tx: Tx) -> None:
            self._lock_run(tx, run)
            now = self._now(tx)
            tx.execute(
                "UPDATE run_lease SET released = ?,"
                " expires_at = CASE WHEN expires_at > ? THEN ? ELSE expires_at END"
                " WHERE tenant = ? AND run = ? AND epoch = ?",
                (True, now, now, self._tenant, run, epoch),
            )

        self._write(work)

    def abandoned_runs(self, limit: int) -> list[str]:
        """Runs whose lease expired (``expires_at <= now``) and was never released, oldest
        expiry first (ties by run ID)."""
        check_int(limit, "limit", 1)

        def work(tx: Tx) -> list[tuple[Any, ...]]:
            expr, params = self._now_sql()
            return tx.all(
                "SELECT run FROM run_lease WHERE tenant = ? AND NOT released"  # noqa: S608
                f" AND expires_at <= {expr} ORDER BY expires_at, run LIMIT ?",
                (self._tenant, *params, limit),
            )

        return [stored_run(r[0]) for r in self._read(work)]

    # --- seal ----------------------------------------------------------------------------------

    def seal(
        self,
        run: str,
        epoch: int,
        outcome: str,
        *,
        signatures: Sequence[RecordSignature | None] | None = None,
    ) -> Seal:
        """Append ``run``'s seal record, freeze the run, and enter the seal record's hash (the
        new head) into the tenant's log at the next position.

        ``outcome`` follows :func:`tlog.journal.check_outcome` (MalformedError). The seal
        record (:func:`tlog.journal.seal_body`) is the run's next record, under ``epoch``,
        signed by the handle's record signer — or, on the restore path, carrying
        ``signatures[0]`` (one entry, None for unsigned; checked as :meth:`append` checks
        them). Fenced like :meth:`append` (FencedError comes first, also for a re-seal). First
        seal wins: a sealed run sealed again with its outcome returns its seal with
        ``already=True`` and writes nothing (idempotent: a retry after CommitUnknownError is
        safe); with another outcome it raises SealConflictError (a RunSealedError) and writes
        nothing. A run without records cannot be sealed (UsageError). The seal record, the seal
        row, the position and the stored tree hashes are written in one transaction.
        """
        return self._write(self._seal_work(run, epoch, outcome, signatures))

    def _seal_work(
        self,
        run: str,
        epoch: int,
        outcome: str,
        signatures: Sequence[RecordSignature | None] | None,
    ) -> Callable[[Tx], Seal]:
        """The checked arguments of :meth:`seal` as the function its transaction runs: the
        one seal, for the store's own transactions and for a caller's (:mod:`store.atomic`)."""
        given = None if signatures is None else _check_signatures(signatures, 1)
        check_run_id(run)
        check_int(epoch, "epoch", 1)
        check_outcome(outcome)
        tenant = self._tenant
        signer = self._record_signer if given is None else None

        def work(tx: Tx) -> Seal:
            self._lock_run(tx, run)
            lease_epoch, seal, head, now = self._run_state(tx, run)
            _fence(run, epoch, lease_epoch)
            if seal is not None:
                if seal.outcome != outcome:
                    raise SealConflictError(run, seal.outcome, outcome)
                return replace(seal, already=True)
            if head.seq == 0:
                raise UsageError(f"run {run} has no records: there is nothing to seal")
            if head.seq >= MAX_INT63:
                raise UsageError(f"run {run} has used up its seqs: it cannot take a seal record")
            seq = head.seq + 1
            rec = make_record(seal_body(run, seq, epoch, outcome), head.hash, signer)
            if given is not None:
                rec = Record(run, seq, rec.raw, head.hash, rec.hash, given[0])
            tx.execute(INSERT_RECORD, record_row(tenant, epoch, KIND_RUN_SEALED, None, None, rec))
            self._touch(tx, run, now)
            # The seal record is the run's last conclusion, signed into the log: the outcome
            # index follows it (store.api, "Outcome index"); and a sealed run waits for nothing.
            index_outcome(tx, tenant, run, outcome)
            tx.execute(CLEAR_WAITING, (tenant, run))
            position = self._enter_log(tx, rec.hash)
            tx.execute(
                "INSERT INTO run_seal (tenant, run, position, head, outcome, sealed_at)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (tenant, run, position, rec.hash, outcome, now),
            )
            tx.execute("UPDATE log_state SET size = ? WHERE tenant = ?", (position + 1, tenant))
            mark_due(tx, tenant, run, now)
            return Seal(run, position, rec.hash, outcome)

        return work

    def _enter_log(self, tx: Tx, head: bytes) -> int:
        """Lock the tenant's log and store the tree hashes that its next leaf, the leaf hash
        of ``head``, adds; return that leaf's position (the log's size before)."""
        size = self._lock_log(tx)
        start = merkle.stored_hash_count(size)
        hashes = merkle.stored_hashes_for_leaf(size, merkle.leaf_hash(head), self._reader(tx))
        try:
            tx.executemany(
                "INSERT INTO tree_hash (tenant, idx, hash) VALUES (?, ?, ?)",
                [(self._tenant, start + i, h) for i, h in enumerate(hashes)],
            )
        except self._d.driver_errors as e:
            if self._d.unique_constraint(e, CONSTRAINTS) == "tree_hash_pk":
                raise CorruptError(f"stored tree hashes exist beyond the log size {size}") from e
            raise
        return size

    # --- admission keys ------------------------------------------------------------------------

    def forget_admissions(self, older_than: int) -> int:
        """Retire this tenant's admission keys claimed before ``older_than`` (whole Unix
        seconds of the store clock); return how many. Their runs keep their records and their
        source; a retired key can be claimed again by a new run."""
        check_int(older_than, "older_than (whole seconds)", 0)
        return self._write(
            lambda tx: tx.execute(
                "DELETE FROM run_admission WHERE tenant = ? AND claimed_at < ?",
                (self._tenant, older_than),
            )
        )

    # --- cancellation --------------------------------------------------------------------------

    def request_cancel(self, run: str, actor: str, reason: str) -> bool:
        """Record a request to cancel ``run`` (no lease needed; the run need not exist).
        True if this call made it; False if one exists (the first asker stays)."""
        check_run_id(run)
        _check_label(actor, "actor")
        _check_label(reason, "reason", empty=True, limit=4096)

        def work(tx: Tx) -> bool:
            self._lock_run(tx, run)
            now = self._now(tx)
            return (
                tx.execute(
                    "INSERT INTO run_cancel (tenant, run, actor, reason, requested_at)"
                    " VALUES (?, ?, ?, ?, ?) ON CONFLICT (tenant, run) DO NOTHING",
                    (self._tenant, run, actor, reason, now),
                )
                == 1
            )

        return self._write(work)


__all__ = ["JournalWrites"]
