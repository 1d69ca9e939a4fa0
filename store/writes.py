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
    DuplicateEffectError,
    FencedError,
    LeaseHeldError,
    LeaseNotHeldError,
    RunSealedError,
    SealConflictError,
)
from store.outbox import mark_due
from store.schema import (
    CONCLUSION_COUNTER,
    CONSTRAINTS,
    INSERT_RECORD,
    record_row,
    stored_bool,
    stored_int,
    stored_run,
    stored_text,
)
from store.sqlcore import SQLCore
from tlog import merkle
from tlog.encoding import MAX_INT63
from tlog.errors import MalformedError, UsageError
from tlog.journal import (
    KIND_EFFECT_STARTED,
    KIND_RUN_SEALED,
    Body,
    Record,
    RecordSignature,
    check_outcome,
    check_run_id,
    make_record,
    seal_body,
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
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise UsageError(f"{what} is not valid Unicode text") from None
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


def _batch_run(batch: Sequence[Append]) -> str:
    """The one run a batch of Append values names (UsageError otherwise, or for the
    reserved seal kind)."""
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
    return run


class _EffectConflict(Exception):
    """Internal: the exactly-once key refused one of ``keys`` (named after the rollback)."""

    def __init__(self, keys: list[str]) -> None:
        super().__init__("duplicate effect")
        self.keys = keys


def _chain(
    run: str,
    epoch: int,
    batch: Sequence[Append],
    head: Head,
    signer: Ed25519Signer | None,
    given: Signatures | None,
) -> tuple[list[Record], str | None]:
    """The batch's records chained after ``head`` (signed by ``signer``, or carrying the
    ``given`` signatures), and the outcome of its last conclusion (checked), if any."""
    seq, prev = head.seq, head.hash
    records: list[Record] = []
    outcome = None
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
            outcome = concluded
        records.append(rec)
        prev = rec.hash
    return records, outcome


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
        then the records, the exactly-once keys (DuplicateEffectError), the outcome index
        and the activity index. A malformed record raises MalformedError; nothing is written.

        ``signatures`` (the restore path), when given, holds one entry per record and replaces
        the handle's record signer for this batch (see :mod:`store.sql`).
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
    ) -> tuple[str, Callable[[Tx], list[Record]]]:
        """The checked arguments of a non-empty :meth:`append` as its run and the function its
        transaction runs: the one append, for the store's own transactions and for a caller's
        (:mod:`store.atomic`). The function raises :class:`_EffectConflict` for a refused
        exactly-once key (the caller names it, :meth:`_conflicting_key`, once rolled back)."""
        given = None if signatures is None else _check_signatures(signatures, len(batch))
        check_int(epoch, "epoch", 1)
        run = _batch_run(batch)
        tenant = self._tenant
        signer = self._record_signer if given is None else None

        def work(tx: Tx) -> list[Record]:
            self._lock_run(tx, run)
            lease_epoch, seal, head, now = self._run_state(tx, run)
            _fence(run, epoch, lease_epoch)
            if seal is not None:
                raise RunSealedError(run, seal.outcome)
            records, outcome = _chain(run, epoch, batch, head, signer, given)
            pairs = list(zip(batch, records, strict=True))
            self._claim_effects(tx, run, pairs)
            tx.executemany(
                INSERT_RECORD,
                [record_row(tenant, epoch, a.kind, a.case, a.effect_key, r) for a, r in pairs],
            )
            if outcome is not None:
                tx.execute(
                    "INSERT INTO run_outcome (tenant, run, outcome, ordinal) VALUES (?, ?, ?, ?)"
                    " ON CONFLICT (tenant, run) DO UPDATE"
                    " SET outcome = excluded.outcome, ordinal = excluded.ordinal",
                    (tenant, run, outcome, self._next_ordinal(tx)),
                )
            self._touch(tx, run, now)
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

    def _touch(self, tx: Tx, run: str, now: int) -> None:
        """Record ``now`` as the run's last activity (the activity index)."""
        tx.execute(
            "INSERT INTO run_activity (tenant, run, updated_at) VALUES (?, ?, ?)"
            " ON CONFLICT (tenant, run) DO UPDATE SET updated_at = excluded.updated_at",
            (self._tenant, run, now),
        )

    def _next_ordinal(self, tx: Tx) -> int:
        row = tx.one(
            "INSERT INTO counter (tenant, name, value) VALUES (?, ?, 1)"
            " ON CONFLICT (tenant, name) DO UPDATE SET value = counter.value + 1"
            " RETURNING value",
            (self._tenant, CONCLUSION_COUNTER),
        )
        assert row is not None
        return stored_int(row[0], "conclusion ordinal", lo=1)

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
