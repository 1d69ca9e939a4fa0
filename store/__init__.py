"""The durable journal of runs and its per-tenant RFC 6962 Merkle log: the embedder's API.

Everything an embedder uses is importable from ``store`` itself (``from store import
open_store, Append``); each name lives in one module, which documents it:

* open and initialise — :mod:`store.open`: :func:`init_store` (once: the base origin and the
  Ed25519 log key) and :func:`open_store` (a handle for one tenant, on a SQLite file or a
  PostgreSQL URL), and :func:`open_in_memory` (an initialised ephemeral store, SQLite in memory);
* the handle and its records — :mod:`store.api`: :class:`JournalStore`, the contract and its
  guarantees (append, leases and fencing, seal, the log, checkpoints, kept checkpoints), and
  the values it takes and returns: :class:`Append`, :class:`Head`, :class:`Lease`,
  :class:`Seal`, :class:`Inclusion`, :class:`Cancellation`, :class:`WaitingRun`, and the
  records it reads,
  :class:`Record` (defined with the record format in :mod:`tlog.journal`);
* records from outside — :mod:`store.batch`: :func:`parse_data` (a record's data as strict
  JSON) and :func:`parse_batch` (the JSON Lines batch format of ``tlog-store append --batch``);
* checking what is stored — :mod:`store.verify`: :func:`read_pages` (a run's records, links
  checked across pages), :func:`verify_run` and :func:`verify_runs` (chains, heads, seals and
  their leaves in the log, as :class:`RunCheck`), :func:`all_runs`;
* proving a run — :mod:`store.prove`: :func:`prove_run`, the C2SP tlog-proof@v1 of a sealed
  run (:class:`NotSealedError`, of :mod:`store.errors`, for one that is not);
* checkpoints and witnesses — :mod:`store.publish`: :func:`publish_to_witnesses` (sign the
  current checkpoint, have witnesses cosign it over C2SP tlog-witness, keep the cosignatures:
  a :class:`Publication`) with :func:`witness_clients`, and :func:`published_checkpoints` /
  :func:`describe_note` (the kept checkpoints as :class:`KeptCheckpoint`);
* the journal as an outbox — :mod:`store.outbox` (subscriptions and delivery cursors:
  :class:`Subscription`, :class:`Delivery`) and :mod:`store.deliver` (the worker that pushes
  records to receivers, :class:`Deliverer` and its :class:`Attempt`; :func:`outbox_of`, a
  store's outbox);
* the inbound-event inbox — :mod:`store.inbox`: ``store.inbox`` on a handle is an
  :class:`Inbox` (events from outside, deduplicated, correlated to waiting runs, claimed once,
  dead-lettered, erasable, each a leaf of the tenant's inbox log with a receipt); its values
  :class:`Wait` (:func:`make_wait`), :class:`StoredEvent`, :class:`Claimed`, :class:`Buffered`,
  :class:`Targeted`, :class:`InboxCounts`; events are :class:`Event` (:func:`make_event`, of
  :mod:`tlog.inbox`);
* the log in public — :mod:`store.tiles` (a tenant's log as C2SP tlog-tiles resources:
  :class:`StoreLog` over a store, :class:`EntryLog` over entries in memory, :class:`TiledLog`
  the resources; served by :mod:`store.tileserver`, ``tlog-store serve``) and
  :mod:`store.tilefiles` (:func:`publish_tiles`, the same as files for a static web server:
  :class:`Published`);
* joining the embedder's transaction — :mod:`store.atomic`: ``store.atomic`` (an
  :class:`AtomicJournal` on PostgreSQL, None on SQLite), :func:`require_atomic`, and
  :class:`JoinedJournal`, the appends and seals of the caller's transaction;
* export and restore — :mod:`store.export`: :func:`export_store`, :func:`restore_store`
  (:class:`RestoreSummary`; an export that does not verify raises the :mod:`tlog.export` error
  naming its line, a MalformedError or VerificationError, and one the store does not rebuild
  :class:`RestoreError`);
* errors — they live in two modules, and both sets are exported here. :mod:`store.errors` holds
  the store's own, under :class:`StoreError`: :class:`FencedError`, :class:`LeaseHeldError`,
  :class:`LeaseNotHeldError`, :class:`DuplicateEffectError`, :class:`DuplicateAdmissionError`,
  :class:`RunSealedError` and its
  kind :class:`SealConflictError` (refused by the store's rules), :class:`NotSealedError` (a
  proof of a run not in the log), :class:`CorruptError` (stored data does not verify),
  :class:`CommitUnknownError` and :class:`BackendError` (the database failed). StoreError is a
  :class:`TlogError`, the root of :mod:`tlog.errors`, whose classes the store raises too:
  :class:`MalformedError` and :class:`UsageError` (bad input or arguments),
  :class:`VerificationError` (what does not verify) and among its kinds
  :class:`InvalidSignatureError` (a cosignature that does not verify).

The ``tlog-store`` command (:mod:`store.cli`) is a thin layer over these names, and
``docs/embedder-guide.md`` shows a Python recipe for each of its verbs. Importing ``store``
loads no database driver (a backend's is imported when a store is opened) and no HTTP
library (the witness client is imported when witnesses are contacted, requests when records
are delivered).
"""

from __future__ import annotations

from tlog.lazy import lazy_exports

# Not typing.TYPE_CHECKING: importing typing would cost more than the rest of this module
# (type checkers treat any TYPE_CHECKING name so).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from store.api import Append as Append
    from store.api import Cancellation as Cancellation
    from store.api import Head as Head
    from store.api import Inclusion as Inclusion
    from store.api import JournalStore as JournalStore
    from store.api import Lease as Lease
    from store.api import Seal as Seal
    from store.api import WaitingRun as WaitingRun
    from store.atomic import AtomicJournal as AtomicJournal
    from store.atomic import JoinedJournal as JoinedJournal
    from store.atomic import require_atomic as require_atomic
    from store.batch import parse_batch as parse_batch
    from store.batch import parse_data as parse_data
    from store.deliver import Attempt as Attempt
    from store.deliver import Deliverer as Deliverer
    from store.deliver import outbox_of as outbox_of
    from store.errors import BackendError as BackendError
    from store.errors import CommitUnknownError as CommitUnknownError
    from store.errors import CorruptError as CorruptError
    from store.errors import DuplicateAdmissionError as DuplicateAdmissionError
    from store.errors import DuplicateEffectError as DuplicateEffectError
    from store.errors import FencedError as FencedError
    from store.errors import LeaseHeldError as LeaseHeldError
    from store.errors import LeaseNotHeldError as LeaseNotHeldError
    from store.errors import RestoreError as RestoreError
    from store.errors import RunSealedError as RunSealedError
    from store.errors import SealConflictError as SealConflictError
    from store.errors import StoreError as StoreError
    from store.export import RestoreSummary as RestoreSummary
    from store.export import export_store as export_store
    from store.export import restore_store as restore_store
    from store.inbox.core import Inbox as Inbox
    from store.inbox.values import Buffered as Buffered
    from store.inbox.values import Claimed as Claimed
    from store.inbox.values import InboxCounts as InboxCounts
    from store.inbox.values import StoredEvent as StoredEvent
    from store.inbox.values import Targeted as Targeted
    from store.inbox.values import Wait as Wait
    from store.inbox.values import make_wait as make_wait
    from store.open import init_store as init_store
    from store.open import open_in_memory as open_in_memory
    from store.open import open_store as open_store
    from store.outbox import Delivery as Delivery
    from store.outbox import Subscription as Subscription
    from store.prove import NotSealedError as NotSealedError
    from store.prove import prove_run as prove_run
    from store.publish import KeptCheckpoint as KeptCheckpoint
    from store.publish import Publication as Publication
    from store.publish import describe_note as describe_note
    from store.publish import publish_to_witnesses as publish_to_witnesses
    from store.publish import published_checkpoints as published_checkpoints
    from store.publish import witness_clients as witness_clients
    from store.tilefiles import Published as Published
    from store.tilefiles import publish_tiles as publish_tiles
    from store.tiles import EntryLog as EntryLog
    from store.tiles import StoreLog as StoreLog
    from store.tiles import TiledLog as TiledLog
    from store.verify import RunCheck as RunCheck
    from store.verify import all_runs as all_runs
    from store.verify import read_pages as read_pages
    from store.verify import verify_run as verify_run
    from store.verify import verify_runs as verify_runs
    from tlog.errors import InvalidSignatureError as InvalidSignatureError
    from tlog.errors import MalformedError as MalformedError
    from tlog.errors import TlogError as TlogError
    from tlog.errors import UsageError as UsageError
    from tlog.errors import VerificationError as VerificationError
    from tlog.inbox import Event as Event
    from tlog.inbox import make_event as make_event
    from tlog.journal import Record as Record

_MODULE_OF = {
    "Inbox": "store.inbox.core",
    "Wait": "store.inbox.values",
    "make_wait": "store.inbox.values",
    "StoredEvent": "store.inbox.values",
    "Claimed": "store.inbox.values",
    "Buffered": "store.inbox.values",
    "Targeted": "store.inbox.values",
    "InboxCounts": "store.inbox.values",
    "Event": "tlog.inbox",
    "make_event": "tlog.inbox",
    "Append": "store.api",
    "AtomicJournal": "store.atomic",
    "Attempt": "store.deliver",
    "BackendError": "store.errors",
    "Cancellation": "store.api",
    "CommitUnknownError": "store.errors",
    "CorruptError": "store.errors",
    "DuplicateAdmissionError": "store.errors",
    "Deliverer": "store.deliver",
    "Delivery": "store.outbox",
    "DuplicateEffectError": "store.errors",
    "EntryLog": "store.tiles",
    "FencedError": "store.errors",
    "Head": "store.api",
    "Inclusion": "store.api",
    "InvalidSignatureError": "tlog.errors",
    "JoinedJournal": "store.atomic",
    "JournalStore": "store.api",
    "KeptCheckpoint": "store.publish",
    "Lease": "store.api",
    "LeaseHeldError": "store.errors",
    "LeaseNotHeldError": "store.errors",
    "MalformedError": "tlog.errors",
    "NotSealedError": "store.prove",
    "Publication": "store.publish",
    "Published": "store.tilefiles",
    "Record": "tlog.journal",
    "RestoreError": "store.errors",
    "RestoreSummary": "store.export",
    "RunCheck": "store.verify",
    "RunSealedError": "store.errors",
    "Seal": "store.api",
    "WaitingRun": "store.api",
    "SealConflictError": "store.errors",
    "StoreError": "store.errors",
    "StoreLog": "store.tiles",
    "Subscription": "store.outbox",
    "TiledLog": "store.tiles",
    "TlogError": "tlog.errors",
    "UsageError": "tlog.errors",
    "VerificationError": "tlog.errors",
    "all_runs": "store.verify",
    "describe_note": "store.publish",
    "export_store": "store.export",
    "init_store": "store.open",
    "open_in_memory": "store.open",
    "open_store": "store.open",
    "outbox_of": "store.deliver",
    "parse_batch": "store.batch",
    "parse_data": "store.batch",
    "prove_run": "store.prove",
    "publish_tiles": "store.tilefiles",
    "publish_to_witnesses": "store.publish",
    "published_checkpoints": "store.publish",
    "read_pages": "store.verify",
    "require_atomic": "store.atomic",
    "restore_store": "store.export",
    "verify_run": "store.verify",
    "verify_runs": "store.verify",
    "witness_clients": "store.publish",
}
"""The module that holds each public name (the map above), imported on first use: so that
``import store.db`` — the storage engine the witness uses — does not load the journal."""

__all__ = [
    "Append",
    "AtomicJournal",
    "Attempt",
    "BackendError",
    "Buffered",
    "Cancellation",
    "Claimed",
    "CommitUnknownError",
    "CorruptError",
    "Deliverer",
    "Delivery",
    "DuplicateAdmissionError",
    "DuplicateEffectError",
    "EntryLog",
    "Event",
    "FencedError",
    "Head",
    "Inbox",
    "InboxCounts",
    "Inclusion",
    "InvalidSignatureError",
    "JoinedJournal",
    "JournalStore",
    "KeptCheckpoint",
    "Lease",
    "LeaseHeldError",
    "LeaseNotHeldError",
    "MalformedError",
    "NotSealedError",
    "Publication",
    "Published",
    "Record",
    "RestoreError",
    "RestoreSummary",
    "RunCheck",
    "RunSealedError",
    "Seal",
    "SealConflictError",
    "StoreError",
    "StoreLog",
    "StoredEvent",
    "Subscription",
    "Targeted",
    "TiledLog",
    "TlogError",
    "UsageError",
    "VerificationError",
    "Wait",
    "WaitingRun",
    "all_runs",
    "describe_note",
    "export_store",
    "init_store",
    "make_event",
    "make_wait",
    "open_in_memory",
    "open_store",
    "outbox_of",
    "parse_batch",
    "parse_data",
    "prove_run",
    "publish_tiles",
    "publish_to_witnesses",
    "published_checkpoints",
    "read_pages",
    "require_atomic",
    "restore_store",
    "verify_run",
    "verify_runs",
    "witness_clients",
]

__getattr__, __dir__ = lazy_exports(__name__, _MODULE_OF, __all__)
