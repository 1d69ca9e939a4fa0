"""The journal store on SQL: one implementation of :class:`store.api.JournalStore` for every engine.

The journal is a schema on the storage engine (:mod:`store.db`): :class:`SQLStore` holds all
of the store's logic — every statement, every check, every transaction boundary — and runs
on SQLite (:mod:`store.sqlite`) and PostgreSQL (:mod:`store.postgres`) through the engine's
dialects; the engine's module :mod:`store.db.engine` defines the transactions (retries, the
commit-unknown rule, reconnecting). The store is built of parts, one concept each:

======================  ===================================================================
 module                  what it holds
======================  ===================================================================
 :mod:`store.schema`     the tables, their constraints, the readers of stored rows
 :mod:`store.sqlcore`    a handle's state, the store clock, the lock rows (below)
 :mod:`store.writes`     append, seal, the leases, cancellation requests
 :mod:`store.reads`      records, heads, seals, the tree and proofs, the indexes
 :mod:`store.notes`      signed checkpoints: sign, merge cosignatures, import
 :mod:`store.outbox`     subscriptions and delivery cursors (the journal as an outbox)
 :mod:`store.tilereads`  tlog-tiles reads: a tile's stored hashes, a bundle's sealed heads
 :mod:`store.sql`        :class:`SQLStore`, the whole store; initialisation
======================  ===================================================================

Per-run serialisation. Every write to a run — append, seal, acquire, renew, release,
cancellation request — first *ensures and locks* the run's row in ``run_state``: a
``SELECT … <lock_suffix>``, and when the row does not exist yet an
``INSERT … ON CONFLICT DO NOTHING`` followed by the same SELECT. The row always exists once
written and is never deleted, so there is always something to lock — also for a run that has no
lease row or no records yet (a first ``acquire``, or appends on the restore path). Everything
the operation then reads (lease, seal, head) is read by *later* statements: under READ
COMMITTED each statement takes a fresh snapshot, so they see everything committed by whoever
held the lock before. (A single statement that locked ``run_state`` and joined the lease would
return the lease as of its snapshot, taken before it waited: stale.) Seals additionally lock
the tenant's ``log_state`` row the same way, which serialises a tenant's seals and makes log
positions dense: position = size, then size + 1.

Decisions where the contract leaves room (also in the method docstrings):

* A half-written record signature (some of name, key ID, signature stored, not all) reads as
  :class:`~store.errors.CorruptError`, never as unsigned or signed.
* ``read`` and ``case_history`` recompute every hash; they do not decode bodies (``verify``
  does: links, gaps, bodies naming their run and seq).
* A ``RunConcluded`` record without a non-empty string ``data.outcome`` leaves the outcome
  index alone; when one batch concludes twice, the last conclusion is indexed. Outcomes — a
  seal's, and an indexed conclusion's — follow :func:`tlog.journal.check_outcome` (the export
  format requires it of a sealed run's outcome), else MalformedError and nothing is written.
* The kinds ``RunAdmitted`` and ``RunSuspended`` (:mod:`tlog.journal`) are held to their
  shape: one whose ``data`` lacks what the store indexes (a valid ``source`` and ``id``; a
  valid ``until``, and ``message`` when present) is MalformedError naming its seq, never left
  unindexed — an admission the index silently missed would admit the duplicate it exists to
  refuse. A ``RunAdmitted`` that is not the run's first record is MalformedError too (after
  its key is tried, so a retried admission of a run is told which run holds the key).
* ``append(..., signatures=…)`` (the restore path) takes a held admission key over instead of
  refusing it (:meth:`store.writes.JournalWrites._claim_admission` says why).
* A listing's ``limit`` is at least 1 (UsageError otherwise): a page of 0 would make a
  paging loop spin forever.
* Labels (lease owners, cancellation actors) are 1-256 characters without control characters;
  a cancellation reason is 0-4096 such characters.
* ``sign_checkpoint`` returns the note *as kept*: when a note for that size is already kept
  (perhaps with cosignatures merged), that one.
* ``add_cosignatures`` keeps at most one line per (key name, key ID): a line for a key that
  already has one in the kept note is dropped, so that the kept note can never hold two
  different lines for one key (which verifiers reject). A line under the log's own key name
  must be the log's valid signature. Every other line it keeps must be from a witness key the
  caller declares and verify: the store never keeps a line an export could not carry (a plain
  Ed25519 line, an undeclared key) or that does not verify.
* ``add_cosignatures`` remembers the witness key of every line the merged note holds that a
  key declared in the call verifies (the new lines, and kept ones), in its transaction; a kept
  line of no declared key is kept, but its key is not learnt. A key whose (name, key ID) is a
  remembered key's with other key bytes is refused (UsageError): an export could not declare
  both.
* ``seal`` appends the run's seal record (:func:`tlog.journal.seal_body`, kind ``RunSealed``)
  in its transaction; its hash is the sealed head. ``append`` refuses that reserved kind
  (UsageError), so a run's only seal record is its last.
* ``append(..., signatures=…)`` (the restore path) stores the given signatures instead of the
  handle's: each None or a :class:`~tlog.journal.RecordSignature` with a valid key name, a
  32-bit key ID and 64 signature bytes (Ed25519), UsageError otherwise. They are not verified
  here (the store holds no record verifiers): restore verified them.
* ``import_checkpoint`` verifies the log's line, refuses a note with two lines for one key
  (byte-identical repeats included), and requires the note's text to be exactly the
  checkpoint text this store formats at that size (so no extension lines); UsageError
  otherwise. It inserts the note as given; the same bytes again change nothing.
* ``_delete_run_for_test`` deletes what an operator deleting a run would: its records, seal
  row, exactly-once keys, outcome, activity, admission, source and waiting rows. Its lease row
  (the epoch memory), log position and stored hashes stay: the log never shrinks and never
  reuses the position.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from store.db import MAX_ATTEMPTS, Dialect, Session, Tx, create_tables
from store.errors import CorruptError
from store.notes import CheckpointNotes
from store.outbox import JournalOutbox
from store.reads import JournalReads
from store.schema import (
    CONSTRAINTS,
    DDL,
    OWNER,
    SCHEMA_VERSION,
    JournalSession,
    schema,
    upgrade,
)
from store.tilereads import TileReads
from store.writes import JournalWrites

if TYPE_CHECKING:
    from store.inbox.core import Inbox
from tlog.errors import MalformedError, UsageError
from tlog.keys import SignerKey, parse_vkey
from tlog.note import TYPE_ED25519, check_key_name


class SQLStore(JournalWrites, JournalReads, CheckpointNotes, JournalOutbox, TileReads):
    """A journal store over one SQL database through a :class:`Dialect`.

    Requires: the database was initialised (:meth:`initialise`), else :class:`UsageError`
    ("not initialised: run tlog-store init"). ``tenant`` must pass
    :func:`tlog.journal.check_tenant`. ``key``, when given, must be the type-0x01 Ed25519 key
    the store was initialised with (:class:`UsageError` otherwise); it is needed only by
    :meth:`sign_checkpoint`. ``record_signer`` signs every record appended through this handle.
    ``clock`` (whole Unix seconds) overrides the dialect's clock.
    """

    # --- the inbox ---------------------------------------------------------------------------

    @property
    def inbox(self) -> Inbox:
        """The tenant's inbound-event inbox (:mod:`store.inbox`), on this handle's session."""
        box = self.__dict__.get("_inbox")
        if box is None:
            from store.inbox.core import Inbox  # noqa: PLC0415 - loaded on first use

            box = self.__dict__["_inbox"] = Inbox(self)
        return box

    # --- initialisation ----------------------------------------------------------------------

    @staticmethod
    def _initialise(dialect: Dialect, origin: str, key: SignerKey) -> None:
        """Create the schema (idempotent) and record ``origin`` and the log key's public half.

        Requires: ``origin`` a valid key name (no spaces, no ``+``), ``key`` type 0x01. A
        database initialised with another origin or key is refused (:class:`UsageError`); one
        of an older schema version is upgraded (:func:`store.schema.upgrade`). Safe to run from
        several processes at once.
        """
        if not isinstance(origin, str):
            raise UsageError("the base origin must be a string")
        try:
            check_key_name(origin)
        except MalformedError as e:
            raise UsageError(f"base origin {origin!r} is not usable as a key name: {e}") from None
        if not isinstance(key, SignerKey) or key.key_type != TYPE_ED25519:
            raise UsageError("the log key must be an Ed25519 signer key (type 0x01)")
        vkey = key.vkey()
        public_key = key.signer().public_key

        def work(tx: Tx) -> None:
            create_tables(tx, OWNER, DDL)
            tx.execute(
                "INSERT INTO meta (singleton, schema_version, base_origin, log_vkey)"
                " VALUES (1, ?, ?, ?) ON CONFLICT (singleton) DO NOTHING",
                (SCHEMA_VERSION, origin, vkey),
            )
            base, stored_vkey = upgrade(tx)  # a store of an older version is upgraded
            if base != origin:
                raise UsageError(f"the store was initialised with the origin {base!r}")
            try:
                stored_public = parse_vkey(stored_vkey).public_key
            except MalformedError as e:
                raise CorruptError(f"stored log key: {e}") from None
            if stored_public != public_key:
                raise UsageError("the store was initialised with another log key")

        session = JournalSession(dialect)
        try:
            session.transact(True, work)
        finally:
            session.close()

    # --- test-only hooks (private; never call them outside tests) ------------------------------

    def _tamper_for_test(self, run: str, seq: int, raw: bytes) -> None:
        """TEST ONLY: overwrite record ``seq``'s stored body with ``raw``, leaving its hash."""
        n = self._write(
            lambda tx: tx.execute(
                "UPDATE journal SET raw = ? WHERE tenant = ? AND run = ? AND seq = ?",
                (raw, self._tenant, run, seq),
            )
        )
        if n != 1:
            raise UsageError(f"run {run} has no record {seq}")

    def _delete_run_for_test(self, run: str) -> None:
        """TEST ONLY: delete a run's records, seal row, exactly-once keys, outcome, activity,
        admission, source and waiting rows; its lease row, log position and stored hashes stay
        (the position is never reused)."""

        def work(tx: Tx) -> None:
            for table in (
                "journal",
                "effect_once",
                "run_seal",
                "run_outcome",
                "run_activity",
                "run_admission",
                "run_source",
                "run_waiting",
            ):
                tx.execute(f"DELETE FROM {table} WHERE tenant = ? AND run = ?", (self._tenant, run))  # noqa: S608 - fixed table names

        self._write(work)

    def _execute_for_test(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """TEST ONLY: run one statement (``?`` placeholders) in a write transaction, e.g. to
        plant a malformed row; returns its rows, if any."""
        return self._write(lambda tx: tx.rows_if_any(sql, params))


__all__ = [
    "CONSTRAINTS",
    "MAX_ATTEMPTS",
    "SCHEMA_VERSION",
    "Dialect",
    "SQLStore",
    "Session",
    "Tx",
    "schema",
]
