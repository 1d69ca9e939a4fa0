"""The inbound-event inbox: events from outside, deduplicated, correlated to the runs that wait
for them, claimed exactly once, dead-lettered when nobody claims them, erasable — and each one
acknowledged by a leaf of the tenant's inbox log, so a sender can be handed a receipt.

A third schema on the storage engine (:mod:`store.inbox.schema`), reached through a journal
store handle: ``store.inbox`` is an :class:`~store.inbox.core.Inbox` for the handle's tenant.

The rules (the module docstrings say how each is kept):

* **Buffer** an event (:class:`tlog.inbox.Event`: source, id, kind, correlation keys, payload):
  deduplicated by the pair (source, id) — a duplicate is reported, changes nothing, and is
  not an error. Each new event gets the next position of the inbox log in the buffering
  transaction; its leaf, which commits to its entry (:mod:`tlog.inbox`), is a function of the
  stored row, written with its batch's and before any checkpoint, receipt, claim by key,
  sweep or export reads the log (:mod:`store.inbox.schema`, "Indexed in batches").
* **Wait**: a run's wait (run, effect key, kind, keys, case, step) is registered idempotently.
* **Claims**, each one transaction: a wait looks for the oldest live event of its kind on any
  of its keys (oldest by position, which is arrival order); an arriving event looks for the
  oldest wait (by registration) of its kind on any of its keys. Selecting and marking the
  winner happen in one transaction: one message never resumes two runs, two runs never consume
  one message. A run re-claiming an event it claimed already (it crashed between the claim and
  resuming) gets it again; nobody else can. A claim in either direction retires the wait it
  satisfies; a targeted delivery to a named run does not (a retried delivery rebuilds its
  answer from the wait).
* **Journaled delivery**: resuming appends an ``EventDelivered`` record to the run's chain,
  naming the event by source, id, kind, keys, payload hash and position.
* **Unsubscribe** removes a run's waits and sheds the payloads of the events it holds claimed.
* **Sweep**: unclaimed events received at or before a cutoff become dead letters with a
  reason, through the index of live events; claimed events never dead-letter.
* **Listings**: dead letters newest first; waits in registration order; both paged.
* **Erase** strips a payload, keeping identity, accounting, and every proof.
* **Tenants** lead every key and index.
* **Receipts**: the tlog-proof@v1 of an event's entry under a signed inbox checkpoint.
"""

from __future__ import annotations

from store.inbox.values import (
    Buffered,
    Claimed,
    InboxCounts,
    StoredEvent,
    Targeted,
    Wait,
    make_wait,
    wait_from_json,
)

__all__ = [
    "Buffered",
    "Claimed",
    "InboxCounts",
    "StoredEvent",
    "Targeted",
    "Wait",
    "make_wait",
    "wait_from_json",
]
