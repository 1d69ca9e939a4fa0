"""The durable journal of runs and its per-tenant RFC 6962 Merkle log: the embedder's API.

Everything an embedder uses is importable from ``store`` itself (``from store import
open_store, Append``); each name lives in one module, which documents it:

* open and initialise — :mod:`store.open`: :func:`init_store` (once: the base origin and the
  Ed25519 log key) and :func:`open_store` (a handle for one tenant, on a SQLite file or a
  PostgreSQL URL);
* the handle and its records — :mod:`store.api`: :class:`JournalStore`, the contract and its
  guarantees (append, leases and fencing, seal, the log, checkpoints, kept checkpoints), and
  the values it takes and returns: :class:`Append`, :class:`Head`, :class:`Lease`,
  :class:`Seal`, :class:`Inclusion`, :class:`Cancellation` (records themselves are
  :class:`tlog.journal.Record`);
* records from outside — :mod:`store.batch`: :func:`parse_data` (a record's data as strict
  JSON) and :func:`parse_batch` (the JSON Lines batch format of ``tlog-store append --batch``);
* checking what is stored — :mod:`store.verify`: :func:`read_pages` (a run's records, links
  checked across pages), :func:`verify_run` and :func:`verify_runs` (chains, heads, seals and
  their leaves in the log, as :class:`RunCheck`), :func:`all_runs`;
* proving a run — :mod:`store.prove`: :func:`prove_run`, the C2SP tlog-proof@v1 of a sealed
  run (:class:`NotSealedError` for one that is not);
* checkpoints and witnesses — :mod:`store.publish`: :func:`publish_to_witnesses` (sign the
  current checkpoint, have witnesses cosign it over C2SP tlog-witness, keep the cosignatures:
  a :class:`Publication`) with :func:`witness_clients`, and :func:`published_checkpoints` /
  :func:`describe_note` (the kept checkpoints as :class:`KeptCheckpoint`);
* export and restore — :mod:`store.export`: :func:`export_store`, :func:`restore_store`
  (:class:`RestoreSummary`; an export that does not verify raises the :mod:`tlog.export` error
  naming its line, a MalformedError or VerificationError, and one the store does not rebuild
  :class:`RestoreError`);
* errors — they live in two modules, and both sets are exported here. :mod:`store.errors` holds
  the store's own, under :class:`StoreError`: :class:`FencedError`, :class:`LeaseHeldError`,
  :class:`LeaseNotHeldError`, :class:`DuplicateEffectError`, :class:`RunSealedError` (refused
  by the store's rules), :class:`CorruptError` (stored data does not verify),
  :class:`CommitUnknownError` and :class:`BackendError` (the database failed). StoreError is a
  :class:`TlogError`, the root of :mod:`tlog.errors`, whose classes the store raises too:
  :class:`MalformedError` and :class:`UsageError` (bad input or arguments),
  :class:`VerificationError` (what does not verify) and among its kinds
  :class:`InvalidSignatureError` (a cosignature that does not verify).

The ``tlog-store`` command (:mod:`store.cli`) is a thin layer over these names, and
``docs/embedder-guide.md`` shows a Python recipe for each of its verbs. Importing ``store``
loads no database driver (a backend's is imported when a store is opened) and no HTTP
library (the witness client is imported when witnesses are contacted).
"""

from __future__ import annotations

from store.api import Append, Cancellation, Head, Inclusion, JournalStore, Lease, Seal
from store.batch import parse_batch, parse_data
from store.errors import (
    BackendError,
    CommitUnknownError,
    CorruptError,
    DuplicateEffectError,
    FencedError,
    LeaseHeldError,
    LeaseNotHeldError,
    RunSealedError,
    StoreError,
)
from store.export import RestoreError, RestoreSummary, export_store, restore_store
from store.open import init_store, open_store
from store.prove import NotSealedError, prove_run
from store.publish import (
    KeptCheckpoint,
    Publication,
    describe_note,
    publish_to_witnesses,
    published_checkpoints,
    witness_clients,
)
from store.verify import RunCheck, all_runs, read_pages, verify_run, verify_runs
from tlog.errors import (
    InvalidSignatureError,
    MalformedError,
    TlogError,
    UsageError,
    VerificationError,
)

__all__ = [
    "Append",
    "BackendError",
    "Cancellation",
    "CommitUnknownError",
    "CorruptError",
    "DuplicateEffectError",
    "FencedError",
    "Head",
    "Inclusion",
    "InvalidSignatureError",
    "JournalStore",
    "KeptCheckpoint",
    "Lease",
    "LeaseHeldError",
    "LeaseNotHeldError",
    "MalformedError",
    "NotSealedError",
    "Publication",
    "RestoreError",
    "RestoreSummary",
    "RunCheck",
    "RunSealedError",
    "Seal",
    "StoreError",
    "TlogError",
    "UsageError",
    "VerificationError",
    "all_runs",
    "describe_note",
    "export_store",
    "init_store",
    "open_store",
    "parse_batch",
    "parse_data",
    "prove_run",
    "publish_to_witnesses",
    "published_checkpoints",
    "read_pages",
    "restore_store",
    "verify_run",
    "verify_runs",
    "witness_clients",
]
