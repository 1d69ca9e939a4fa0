"""The journal store's reads: records, heads, seals, the log's tree and proofs, the indexes.

Each read is one read transaction of the engine (:mod:`store.db.engine`): one snapshot for
all of its queries. Every stored value it returns is checked (:mod:`store.schema`): records
are hash-checked, and a value of the wrong shape raises CorruptError.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from store.api import Cancellation, Head, Inclusion, Seal, WaitingRun
from store.db import Tx, check_int
from store.errors import CorruptError, NotSealedError
from store.schema import (
    RECORD_COLUMNS,
    record,
    stored_hash,
    stored_int,
    stored_run,
    stored_text,
)
from store.sqlcore import SQLCore
from tlog import merkle
from tlog.checkpoint import Checkpoint
from tlog.errors import MalformedError, UsageError
from tlog.journal import (
    Record,
    check_case_id,
    check_run_id,
    check_source,
    split_admission_key,
)


class JournalReads(SQLCore):
    """The reads of :class:`store.sql.SQLStore`."""

    # --- records -------------------------------------------------------------------------------

    def _check_from(self, run: str, from_seq: int) -> None:
        check_run_id(run)
        check_int(from_seq, "from_seq", 0)

    def read(self, run: str, from_seq: int = 1) -> list[Record]:
        """All records of ``run`` with seq >= ``from_seq``, in order, each hash-checked."""
        self._check_from(run, from_seq)
        rows = self._tenant_rows(
            f"SELECT {RECORD_COLUMNS} FROM journal"  # noqa: S608
            " WHERE tenant = ? AND run = ? AND seq >= ? ORDER BY seq",
            run,
            from_seq,
        )
        return [record(run, r) for r in rows]

    def read_page(self, run: str, from_seq: int, limit: int) -> list[Record]:
        """At most ``limit`` records of ``run`` from ``from_seq`` (the database applies the
        bound), each hash-checked."""
        self._check_from(run, from_seq)
        check_int(limit, "limit", 1)
        rows = self._tenant_rows(
            f"SELECT {RECORD_COLUMNS} FROM journal"  # noqa: S608
            " WHERE tenant = ? AND run = ? AND seq >= ? ORDER BY seq LIMIT ?",
            run,
            from_seq,
            limit,
        )
        return [record(run, r) for r in rows]

    def head(self, run: str) -> Head:
        """The run's last (seq, stored hash), or the genesis head (0, 32 zero bytes)."""
        check_run_id(run)
        row = self._read(
            lambda tx: tx.one(
                "SELECT seq, hash FROM journal WHERE tenant = ? AND run = ?"
                " ORDER BY seq DESC LIMIT 1",
                (self._tenant, run),
            )
        )
        if row is None:
            return Head.genesis()
        seq = stored_int(row[0], "record seq", run, 1)
        return Head(seq, stored_hash(row[1], "hash", run, seq))

    # --- seals and the log ---------------------------------------------------------------------

    def _seal_of(self, run: str, row: Sequence[Any]) -> Seal:
        position, head, outcome = row
        return Seal(
            run,
            stored_int(position, "log position", run),
            stored_hash(head, "sealed head", run),
            stored_text(outcome, "outcome", run),
        )

    def _tenant_rows(self, sql: str, *params: object) -> list[tuple[Any, ...]]:
        """The rows of one read of ``sql``, whose first parameter is this handle's tenant."""
        return self._read(lambda tx: tx.all(sql, (self._tenant, *params)))

    def _run_row(self, columns: str, table: str, run: str) -> tuple[Any, ...] | None:
        """The one row of ``table`` for ``run`` (checked to be a run ID) in this tenant."""
        check_run_id(run)
        sql = f"SELECT {columns} FROM {table} WHERE tenant = ? AND run = ?"  # noqa: S608 - constants of this module
        return self._read(lambda tx: tx.one(sql, (self._tenant, run)))

    def sealed(self, run: str) -> Seal | None:
        """The run's seal, or None."""
        row = self._run_row("position, head, outcome", "run_seal", run)
        return None if row is None else self._seal_of(run, row)

    def seals(self, after_position: int = -1, limit: int = 1000) -> list[Seal]:
        """Seals in log order from position ``after_position + 1`` (a deleted run's position
        is absent)."""
        check_int(after_position, "after_position", -1)
        check_int(limit, "limit", 1)
        rows = self._tenant_rows(
            "SELECT run, position, head, outcome FROM run_seal"
            " WHERE tenant = ? AND position > ? ORDER BY position LIMIT ?",
            after_position,
            limit,
        )
        return [self._seal_of(stored_run(r[0]), r[1:]) for r in rows]

    def checkpoint(self) -> Checkpoint:
        """(origin, size, root) from the stored hashes: O(log size) reads, one snapshot."""

        def work(tx: Tx) -> Checkpoint:
            size = self._log_size(tx)
            return Checkpoint(self._origin, size, merkle.tree_hash(size, self._reader(tx)))

        return self._read(work)

    def _check_size(self, size: int, current: int, what: str) -> int:
        if size > current:
            raise UsageError(f"{what} {size} is beyond the log's size {current}")
        return size

    def tree_root(self, size: int) -> bytes:
        """The root at ``size`` (0 <= size <= the current size; UsageError beyond)."""
        check_int(size, "tree size", 0)

        def work(tx: Tx) -> bytes:
            self._check_size(size, self._log_size(tx), "tree size")
            return merkle.tree_hash(size, self._reader(tx))

        return self._read(work)

    def consistency_proof(self, old: int, new: int | None = None) -> list[bytes]:
        """RFC 6962 PROOF(old, D[0:new]); ``new`` defaults to the current size.

        ``old > new`` or ``new`` beyond the log is a UsageError, never an empty proof; ``old``
        0 or ``old == new`` gives [].
        """
        check_int(old, "old size", 0)
        if new is not None:
            check_int(new, "new size", 0)

        def work(tx: Tx) -> list[bytes]:
            current = self._log_size(tx)
            n = current if new is None else self._check_size(new, current, "new size")
            if old > n:
                raise UsageError(f"old size {old} is beyond the new size {n}")
            if old in (0, n):
                return []
            return merkle.consistency_proof(old, n, self._reader(tx))

        return self._read(work)

    def inclusion_proof(self, run: str, size: int | None = None) -> Inclusion:
        """The sealed run's position and RFC 6962 path at ``size`` (default: now), in one
        snapshot. A run not in the tree of that size raises NotSealedError naming why (no
        records, not sealed yet, sealed at a position not below ``size``); ``size`` beyond the
        log is a UsageError. The stored leaf at the position must be the leaf hash of the
        sealed head (CorruptError otherwise)."""
        check_run_id(run)
        if size is not None:
            check_int(size, "tree size", 0)

        def work(tx: Tx) -> Inclusion:
            row = tx.one(
                "SELECT position, head, outcome FROM run_seal WHERE tenant = ? AND run = ?",
                (self._tenant, run),
            )
            current = self._log_size(tx)
            n = current if size is None else self._check_size(size, current, "tree size")
            if row is None:
                known = tx.one(
                    "SELECT 1 FROM journal WHERE tenant = ? AND run = ? LIMIT 1",
                    (self._tenant, run),
                )
                raise NotSealedError(run, "unsealed" if known else "unknown")
            seal = self._seal_of(run, row)
            if seal.position >= n:
                if seal.position >= current:
                    raise CorruptError(f"sealed at position {seal.position} beyond the log", run)
                raise NotSealedError(run, "beyond", seal.position, n)
            reader = self._reader(tx)
            (leaf,) = reader.read_hashes([merkle.stored_hash_index(0, seal.position)])
            if leaf != merkle.leaf_hash(seal.head):
                raise CorruptError(f"the log's leaf {seal.position} is not this run's head", run)
            proof = merkle.inclusion_proof(seal.position, n, reader)
            return Inclusion(run, seal.position, n, seal.head, tuple(proof))

        return self._read(work)

    # --- indexes -------------------------------------------------------------------------------

    def runs_by_outcome(self, outcome: str, limit: int) -> list[str]:
        """Runs whose last conclusion is ``outcome``, newest conclusion first."""
        if not isinstance(outcome, str):
            raise UsageError("an outcome is a string")
        check_int(limit, "limit", 1)
        rows = self._tenant_rows(
            "SELECT run FROM run_outcome WHERE tenant = ? AND outcome = ?"
            " ORDER BY ordinal DESC LIMIT ?",
            outcome,
            limit,
        )
        return [stored_run(r[0]) for r in rows]

    def count_by_outcome(self, outcome: str) -> int:
        """How many runs' last conclusion is ``outcome`` (an exact count).

        Reads every row it counts, and refuses a run ID that does not parse (CorruptError), as
        :meth:`runs_by_outcome` does: a count of rows nobody can list would be a backlog no
        page shows (see :mod:`store.api`, "Outcome index")."""
        if not isinstance(outcome, str):
            raise UsageError("an outcome is a string")
        rows = self._tenant_rows(
            "SELECT run FROM run_outcome WHERE tenant = ? AND outcome = ?", outcome
        )
        for r in rows:
            stored_run(r[0])
        return len(rows)

    def case_history(self, case: str, limit: int) -> list[Record]:
        """Records of ``case`` in (run, seq) order, at most ``limit``, each hash-checked."""
        check_case_id(case)
        check_int(limit, "limit", 1)
        rows = self._tenant_rows(
            f"SELECT run, {RECORD_COLUMNS} FROM journal"  # noqa: S608
            " WHERE tenant = ? AND case_id = ?"
            " ORDER BY run, seq LIMIT ?",
            case,
            limit,
        )
        return [record(stored_run(r[0]), r[1:]) for r in rows]

    def recent_runs(
        self, after: tuple[int, str] | None, limit: int, *, source: str | None = None
    ) -> list[tuple[str, int]]:
        """(run, updated_at) by (updated_at DESC, run DESC), strictly after the cursor
        ``after = (updated_at, run)``.

        With ``source`` (:func:`tlog.journal.check_source`), the runs admitted from that source,
        read from the source index (``run_source``, which holds the same times as
        ``run_activity``) by the same query: so the order, the tie-break and the cursor are
        the same, and a page costs that source's rows, not the tenant's."""
        check_int(limit, "limit", 1)
        t = self._tenant
        table, where = "run_activity", "tenant = ?"
        head: tuple[Any, ...] = (t,)
        if source is not None:
            check_source(source)
            table, where, head = "run_source", "tenant = ? AND source = ?", (t, source)
        if after is None:
            sql = (
                f"SELECT run, updated_at FROM {table} WHERE {where}"  # noqa: S608 - constants
                " ORDER BY updated_at DESC, run DESC LIMIT ?"
            )
            params: tuple[Any, ...] = (*head, limit)
        else:
            if not isinstance(after, tuple | list) or len(after) != 2:
                raise UsageError("the cursor is a tuple (updated_at, run)")
            at = check_int(after[0], "cursor time", 0)
            if not isinstance(after[1], str):
                raise UsageError("the cursor's run is a string")
            sql = (
                f"SELECT run, updated_at FROM {table} WHERE {where}"  # noqa: S608 - constants
                # Strictly after (at, run) in (updated_at DESC, run DESC) order; the first
                # term lets the index seek instead of scanning the newer rows.
                " AND updated_at <= ? AND (updated_at < ? OR run < ?)"
                " ORDER BY updated_at DESC, run DESC LIMIT ?"
            )
            params = (*head, at, at, after[1], limit)
        rows = self._read(lambda tx: tx.all(sql, params))
        return [(stored_run(r[0]), stored_int(r[1], "activity time")) for r in rows]

    def runs(self, after: str | None, limit: int) -> list[str]:
        """Every run with records, by run ID (bytewise), strictly after ``after``."""
        check_int(limit, "limit", 1)
        if after is not None and not isinstance(after, str):
            raise UsageError("the cursor is a run ID")
        rows = self._tenant_rows(
            "SELECT run FROM run_activity WHERE tenant = ? AND run > ? ORDER BY run LIMIT ?",
            "" if after is None else after,
            limit,
        )
        return [stored_run(r[0]) for r in rows]

    def admitted_as(self, key: str) -> str | None:
        """The run holding the admission key ``key``, or None (a read: the arbiter of a race
        is the claim inside :meth:`append`, not this)."""
        try:
            split_admission_key(key)
        except MalformedError as e:
            raise UsageError(str(e)) from None
        row = self._read(
            lambda tx: tx.one(
                "SELECT run FROM run_admission WHERE tenant = ? AND admission_key = ?",
                (self._tenant, key),
            )
        )
        return None if row is None else stored_run(row[0])

    def waiting_runs(self, limit: int) -> list[WaitingRun]:
        """The runs whose last record is a suspension, by (until, run), at most ``limit``."""
        check_int(limit, "limit", 1)
        rows = self._tenant_rows(
            "SELECT run, until_at, message, seq FROM run_waiting WHERE tenant = ?"
            " ORDER BY until_at, run LIMIT ?",
            limit,
        )
        out = []
        for r in rows:
            run = stored_run(r[0])
            message = None if r[2] is None else stored_text(r[2], "awaited message", run)
            out.append(
                WaitingRun(
                    run,
                    stored_int(r[1], "suspension deadline", run),
                    message,
                    stored_int(r[3], "suspension seq", run, 1),
                )
            )
        return out

    def cancellation(self, run: str) -> Cancellation | None:
        """The first cancellation request for ``run``, or None."""
        row = self._run_row("actor, reason, requested_at", "run_cancel", run)
        if row is None:
            return None
        return Cancellation(
            stored_text(row[0], "cancellation actor", run),
            stored_text(row[1], "cancellation reason", run),
            stored_int(row[2], "cancellation time", run),
        )


__all__ = ["JournalReads"]
