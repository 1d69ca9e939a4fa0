"""The core of the journal store on SQL: a handle's state, its clock and its lock rows.

:class:`SQLCore` is what every operation of :class:`store.sql.SQLStore` stands on — the
session (:class:`store.schema.JournalSession`), the store clock, the per-run and per-log lock
rows of :mod:`store.sql`'s serialisation rule, and the reads of a locked run's state; the
operations themselves are in :mod:`store.writes` (records, leases, seals, cancellations),
:mod:`store.reads` (records, seals, proofs, indexes) and :mod:`store.notes` (checkpoints).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Sequence
from typing import Any, Self, TypeVar

from store.api import Head, JournalStore, Seal
from store.db import Dialect, Tx, check_int
from store.errors import CorruptError
from store.schema import JournalSession, open_meta, stored_hash, stored_int, stored_text
from tlog import merkle
from tlog.errors import MalformedError, UsageError
from tlog.journal import check_tenant
from tlog.keys import SignerKey, format_vkey, parse_vkey
from tlog.note import TYPE_ED25519, Ed25519Signer, Ed25519Verifier

T = TypeVar("T")


class StoredHashReader:
    """The stored hashes of the log named ``tenant``, read inside one transaction (a
    :class:`merkle.HashReader`); also the bulk loaders' of bench/."""

    __slots__ = ("_d", "_tenant", "_tx")

    def __init__(self, tx: Tx, dialect: Dialect, tenant: str) -> None:
        self._tx = tx
        self._d = dialect
        self._tenant = tenant

    def read_hashes(self, indexes: Sequence[int]) -> list[bytes]:
        if not indexes:
            return []
        wanted = sorted(set(indexes))
        cond, params = self._d.any_of("idx", wanted)
        rows = self._tx.all(
            f"SELECT idx, hash FROM tree_hash WHERE tenant = ? AND {cond}",  # noqa: S608
            (self._tenant, *params),
        )
        got = {idx: h for idx, h in rows}
        out = []
        for i in indexes:
            h = got.get(i)
            if not isinstance(h, bytes) or len(h) != 32:
                raise CorruptError(f"stored tree hash {i} is missing or not 32 bytes")
            out.append(h)
        return out


class TreeEdge:
    """The right edge of one log's tree (:func:`tlog.merkle.right_edge`) at the size this
    handle last committed, so that an append at that size reads no stored hash.

    Why it is safe across processes: a tree of a given size never changes once committed
    (the log is append-only), so the remembered edge stays true whatever other writers do;
    their appends merely change the size, and an append at any other size reads the edge
    from the database. It is remembered only after the transaction that wrote it committed
    (:meth:`commit`): a rolled-back append must never be.
    """

    __slots__ = ("_frontier", "_size")

    def __init__(self) -> None:
        self._size = -1
        self._frontier: list[bytes] = []

    def append(
        self, size: int, leaves: list[bytes], reader: StoredHashReader
    ) -> tuple[list[bytes], tuple[int, list[bytes]]]:
        """(the stored hashes ``leaves`` add to the tree of ``size``, the edge after them to
        :meth:`commit` once they are committed). Requires: ``size`` is the tree's committed
        size, read under the log's lock in ``reader``'s transaction."""
        if size == self._size:
            frontier = list(self._frontier)
        else:
            need = merkle.right_edge(size)
            frontier = reader.read_hashes(need) if need else []
        hashes = merkle.fold_leaves(size, frontier, leaves)  # moves frontier to the new edge
        return hashes, (size + len(leaves), frontier)

    def commit(self, edge: tuple[int, list[bytes]]) -> None:
        """Remember ``edge`` (from :meth:`append`), whose transaction committed."""
        self._size, self._frontier = edge


# What an append or a seal must know about its run, read after the run's row is locked: the
# lease epoch, the seal, the head and the clock ({now}: a placeholder or the server clock).
_RUN_STATE = (
    "SELECT l.epoch, s.position, s.head, s.outcome, j.seq, j.hash, {now}"
    " FROM (SELECT 1 AS one) AS base"
    " LEFT JOIN run_lease AS l ON l.tenant = ? AND l.run = ?"
    " LEFT JOIN run_seal AS s ON s.tenant = ? AND s.run = ?"
    " LEFT JOIN (SELECT seq, hash FROM journal WHERE tenant = ? AND run = ?"
    " ORDER BY seq DESC LIMIT 1) AS j ON 1 = 1"
)


class SQLCore(JournalStore):
    """A journal store handle's state over one SQL database through a :class:`Dialect`: its
    session, tenant, keys and clock (the arguments, and what they require, are
    :class:`store.sql.SQLStore`'s), and the helpers every operation uses."""

    def __init__(
        self,
        dialect: Dialect,
        *,
        tenant: str = "default",
        key: SignerKey | None = None,
        record_signer: Ed25519Signer | None = None,
        clock: Callable[[], int] | None = None,
    ) -> None:
        check_tenant(tenant)
        if key is not None and (not isinstance(key, SignerKey) or key.key_type != TYPE_ED25519):
            raise UsageError("the log key must be an Ed25519 signer key (type 0x01)")
        if record_signer is not None and not isinstance(record_signer, Ed25519Signer):
            raise UsageError("the record signer must be an Ed25519Signer")
        if clock is not None and not callable(clock):
            raise UsageError("the clock must be a callable returning whole seconds")
        self._d = dialect
        self._tenant = tenant
        self._record_signer = record_signer
        self._clock = clock
        self._session = JournalSession(dialect)
        try:
            base, vkey = open_meta(self._session)
            self._origin = f"{base}/{tenant}"
            try:
                public_key = parse_vkey(vkey).public_key
                self._log_verifier = Ed25519Verifier(self._origin, public_key)
            except MalformedError as e:
                raise CorruptError(f"stored log key: {e}") from None
            self._log_signer: Ed25519Signer | None = None
            if key is not None:
                signer = Ed25519Signer(self._origin, key.secret)
                if signer.public_key != public_key:
                    raise UsageError("the log key is not the key this store was initialised with")
                self._log_signer = signer
        except BaseException:
            self._session.close()
            raise

    # --- small helpers -------------------------------------------------------------------------

    @property
    def tenant(self) -> str:
        return self._tenant

    @property
    def origin(self) -> str:
        return self._origin

    @property
    def log_vkey(self) -> str:
        """The tenant log's vkey: the stored public log key under the name :attr:`origin`."""
        return format_vkey(self._log_verifier)

    def _log_named(self, suffix: str) -> Self:
        """A handle on the log named ``<tenant>/<suffix>`` beside this tenant's, sharing this
        handle's session, clock and key: its origin is ``<origin>/<suffix>``, signed by the
        log key under that name. Only its log methods (checkpoints, proofs, kept notes) are
        meant for use; the tenant column of the log tables holds the log's name, which no
        tenant can have (a tenant has no ``/``)."""
        other = copy.copy(self)
        other._tenant = f"{self._tenant}/{suffix}"
        other._origin = f"{self._origin}/{suffix}"
        other._log_verifier = Ed25519Verifier(other._origin, self._log_verifier.public_key)
        if self._log_signer is not None:
            other._log_signer = Ed25519Signer(other._origin, self._log_signer.seed)
        return other

    def is_shared(self) -> bool:
        return self._d.shared

    def close(self) -> None:
        self._session.close()

    def _write(self, fn: Callable[[Tx], T]) -> T:
        return self._session.transact(True, fn)

    def _read(self, fn: Callable[[Tx], T]) -> T:
        return self._session.transact(False, fn)

    def _now_sql(self) -> tuple[str, tuple[int, ...]]:
        # The store clock as a select-list item: the injected clock, the process clock, or
        # (PostgreSQL) the server clock read inside the transaction.
        if self._clock is not None:
            return "?", (check_int(self._clock(), "the clock's time", 0),)
        if self._d.clock_sql is None:
            return "?", (int(time.time()),)
        return self._d.clock_sql, ()

    def _now(self, tx: Tx) -> int:
        expr, params = self._now_sql()
        if params:
            return params[0]
        row = tx.one(f"SELECT {expr}")
        assert row is not None
        return stored_int(row[0], "clock")

    def _lock_row(self, tx: Tx, select: str, insert: str, params: Sequence[Any]) -> Any:
        # Ensure a lock row exists and lock it (module docstring): the common case — the row
        # exists — costs one statement.
        suffix = self._d.lock_suffix
        row = tx.one(select + suffix, params)
        if row is None:
            tx.execute(insert, params)
            row = tx.one(select + suffix, params)
            assert row is not None
        return row[0]

    def _lock_run(self, tx: Tx, run: str) -> None:
        self._lock_row(
            tx,
            "SELECT run FROM run_state WHERE tenant = ? AND run = ?",
            "INSERT INTO run_state (tenant, run) VALUES (?, ?)"
            " ON CONFLICT (tenant, run) DO NOTHING",
            (self._tenant, run),
        )

    def _lock_log(self, tx: Tx) -> int:
        size = self._lock_row(
            tx,
            "SELECT size FROM log_state WHERE tenant = ?",
            "INSERT INTO log_state (tenant, size) VALUES (?, 0) ON CONFLICT (tenant) DO NOTHING",
            (self._tenant,),
        )
        return stored_int(size, "log size")

    def _log_size(self, tx: Tx) -> int:
        row = tx.one("SELECT size FROM log_state WHERE tenant = ?", (self._tenant,))
        return 0 if row is None else stored_int(row[0], "log size")

    def _reader(self, tx: Tx) -> StoredHashReader:
        return StoredHashReader(tx, self._d, self._tenant)

    def _run_state(self, tx: Tx, run: str) -> tuple[int | None, Seal | None, Head, int]:
        """(lease epoch or None, seal or None, head, now) of a locked run."""
        expr, now_params = self._now_sql()
        t = self._tenant
        row = tx.one(_RUN_STATE.format(now=expr), (*now_params, t, run, t, run, t, run))
        assert row is not None
        lease_epoch, position, head, outcome, seq, h, now = row
        epoch = None if lease_epoch is None else stored_int(lease_epoch, "lease epoch", run, 1)
        seal = None
        if position is not None:
            seal = Seal(
                run,
                stored_int(position, "log position", run),
                stored_hash(head, "sealed head", run),
                stored_text(outcome, "outcome", run),
            )
        if seq is None:
            current = Head.genesis()
        else:
            s = stored_int(seq, "record seq", run, 1)
            current = Head(s, stored_hash(h, "hash", run, s))
        return epoch, seal, current, stored_int(now, "clock")
