"""The inbox conformance battery: one set of checks of store/inbox (the rules its __init__.py
states, with the reasons the seed shared/seeds/004_50c52a0385ee951f.txt gives for each), run
against both backends (every test takes the ``backend`` fixture through ``stores``).

Grouped by rule:

* **buffer**: dedup by the pair (source, id), never id alone; a duplicate is reported, keeps the
  first position and time and changes nothing; the stored event is exactly what arrived,
  provenance included; positions dense from 0 in arrival order; ``buffer_many`` atomic.
* **waits**: ``subscribe`` idempotent; ``wait`` claims or registers in one transaction;
  ``waiting`` in registration order and ``dead_letters`` newest first, both paged.
* **claims**, both directions: a wait takes the oldest live event of its kind on any of its keys,
  an arriving event the oldest wait; a claim retires its wait (at most one event per wait); a
  claimed event is nobody else's, also under threads racing on one database.
* **crash recovery**: a run that claimed (either direction) and did not resume gets the same
  event again, ``recovered``; nobody else does; after its unsubscribe not even the run.
* **targeted delivery**: matched (wait kept, retry matched again), duplicate, not-waiting.
* **unsubscribe** removes waits and sheds held payloads; **erase** strips one payload; both keep
  identity, accounting, dedup and receipts.
* **sweep**: ``<=`` the cutoff (a zero grace window retires everything already buffered),
  claimed events never, through the live index (the query plan says so), in chunks.
* **journaled delivery**: ``EventDelivered`` naming the event, fenced, idempotent, only for the
  claiming run; the plain append refuses the kind.
* **tenants**: identical kinds, keys and ids in two tenants never meet.
* **receipts**: verified offline with tlog.proof and the inbox log's vkey; every flipped byte
  fails; inbox checkpoints are consistent across growth.
* **accounting**: a Hypothesis model of the rules, checked after every step, with
  size == live + claimed + dead.

Time is the store's injected :class:`~tests.store.helpers.FakeClock`.
"""

from __future__ import annotations

import dataclasses
import itertools
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, cast

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from store.api import Append, JournalStore
from store.db import Tx
from store.errors import CorruptError, FencedError
from store.inbox import Claimed, StoredEvent, Wait, make_wait, wait_from_json
from store.inbox import claims as inbox_claims
from store.inbox import core as inbox_core
from store.inbox.core import MAX_LIMIT, Inbox
from store.inbox.schema import INDEX_AT_ONCE
from store.sql import SQLStore
from store.sqlcore import TreeEdge
from tests.store.helpers import T0, BackendLike, FakeClock, StoreFactory
from tlog import merkle
from tlog.checkpoint import Checkpoint
from tlog.errors import MalformedError, TlogError, UsageError
from tlog.inbox import (
    KIND_EVENT_DELIVERED,
    Entry,
    Event,
    delivery_of,
    inbox_origin,
    make_event,
    receipt_entry,
)
from tlog.keys import parse_vkey
from tlog.note import parse_note
from tlog.proof import TlogProof, verify_proof

LEASE = 300
ORDER_A = [["order", "A"]]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(autouse=True, params=["batched", "by-2"])
def index_batch(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every rule holds whichever events are still pending: with the store's batch (the
    tests' events are all pending until a claim, a sweep or a checkpoint indexes them, and
    the handle indexes the events it remembers buffering) and with a batch of 2 (every other
    buffer indexes) on a handle that remembers nothing, so that it reads every pending row
    back."""
    if request.param == "by-2":
        monkeypatch.setattr(inbox_core, "INDEX_BATCH", 2)
        monkeypatch.setattr(inbox_core.Inbox, "_remember", lambda self, pending, size: None)


@pytest.fixture
def stores(backend: BackendLike, clock: FakeClock) -> Iterator[StoreFactory]:
    factory = StoreFactory(backend, clock)
    yield factory
    factory.close()


@pytest.fixture
def store(stores: StoreFactory) -> JournalStore:
    return stores.open()


def inbox_of(store: JournalStore) -> Inbox:
    return cast(SQLStore, store).inbox


@pytest.fixture
def ib(store: JournalStore) -> Inbox:
    return inbox_of(store)


def ev(
    id_: str,
    keys: Any = ORDER_A,
    *,
    kind: str = "Paid",
    source: str = "bank",
    payload: Any = None,
) -> Event:
    return make_event(source, id_, kind, keys, {"n": id_} if payload is None else payload)


def wt(run: str, keys: Any = ORDER_A, *, effect: str = "e1", kind: str = "Paid") -> Wait:
    return make_wait(run, effect, kind, keys, case="case-1", step=3)


def state(ib: Inbox, source: str, id_: str) -> StoredEvent:
    got = ib.get(source, id_)
    assert got is not None
    return got


def accounted(ib: Inbox) -> None:
    c = ib.counts()
    assert c.size == c.live + c.claimed + c.dead == ib.checkpoint().size


# =============================================================================================
# buffer: dedup by (source, id), provenance, positions, atomic batches
# =============================================================================================


def test_dedup_is_by_the_pair_never_the_id_alone(ib: Inbox) -> None:
    a = ib.buffer(ev("1", source="bank"))
    b = ib.buffer(ev("1", source="shop"))
    assert (a.duplicate, b.duplicate) == (False, False)
    assert (a.position, b.position) == (0, 1)
    assert state(ib, "bank", "1").source == "bank"
    assert state(ib, "shop", "1").payload == {"n": "1"}
    assert ib.counts().size == 2
    assert ib.get("bank", "2") is None and ib.get("other", "1") is None


def test_a_duplicate_is_reported_keeps_the_first_arrival_and_changes_nothing(
    ib: Inbox, clock: FakeClock
) -> None:
    first = ib.buffer(ev("1", payload={"v": "first"}), match=False)
    ib.subscribe(wt("run-1", [["order", "B"]]))
    before = (ib.checkpoint(), ib.counts(), ib.events(), ib.waiting(10))
    clock.advance(60)
    again = ib.buffer(ev("1", [["order", "B"]], kind="Paid", payload={"v": "second"}))
    assert again.duplicate and again.matched is None
    assert (again.position, again.received_at) == (first.position, first.received_at) == (0, T0)
    assert (ib.checkpoint(), ib.counts(), ib.events(), ib.waiting(10)) == before
    stored = state(ib, "bank", "1")
    assert stored.payload == {"v": "first"} and stored.keys == (("order", "A"),)
    assert ib.buffer_many([ev("1", payload={"v": "third"})])[0].duplicate


def test_the_stored_event_is_exactly_what_arrived(ib: Inbox) -> None:
    e = make_event(
        "psp.eu-1:x@y",
        "msg/42 \u00e9\U0001f600",
        "Payment.Settled_v2",
        [["order", "A-1"], ["customer", "c 7"]],
        {"amount": 1250, "currency": "EUR", "lines": [{"sku": "x", "q": 2}], "ok": True},
    )
    b = ib.buffer(e)
    got = state(ib, e.source, e.id)
    assert got.event() == e
    assert (got.source, got.id) == ("psp.eu-1:x@y", "msg/42 \u00e9\U0001f600")  # the bare id
    assert got.keys == (("customer", "c 7"), ("order", "A-1"))
    assert got.payload_sha256 == e.payload_sha256 and not got.erased
    assert (got.position, got.received_at, got.state) == (b.position, T0, "live")
    assert got.entry == Entry.of(e, T0)
    assert got.to_json()["payload"] == e.payload


def test_positions_are_dense_from_zero_in_arrival_order(ib: Inbox, clock: FakeClock) -> None:
    seen = []
    for i in range(12):
        clock.advance(i % 2)
        b = ib.buffer(ev(str(i % 9), source=f"s{i % 2}"), match=False)
        seen.append((b.position, b.duplicate))
    assert [p for p, dup in seen if not dup] == list(range(len([d for _, d in seen if not d])))
    events = ib.events()
    assert [e.position for e in events] == list(range(len(events)))
    assert [e.received_at for e in events] == sorted(e.received_at for e in events)
    assert ib.checkpoint().size == len(events)
    assert [e.position for e in ib.events(after=3, limit=2)] == [4, 5]


def test_buffer_many_is_atomic(ib: Inbox) -> None:
    good = ev("1")
    with pytest.raises(UsageError):
        ib.buffer_many([good, cast(Event, {"source": "bank"})])
    assert ib.counts().size == 0 and ib.get("bank", "1") is None
    assert ib.buffer_many([]) == []
    # An Event that make_event would not give is malformed too: nothing of the batch is kept.
    unsorted = Event("bank", "2", "Paid", (("z", "1"), ("a", "1")), None, b"null")
    bad_payload = Event("bank", "3", "Paid", (("a", "1"),), 1, b"2")
    bad_source = Event("a/b", "4", "Paid", (("a", "1"),), None, b"null")
    for bad in (unsorted, bad_payload, bad_source):
        for match in (True, False):
            with pytest.raises((UsageError, MalformedError)):
                ib.buffer_many([good, bad], match=match)
            assert ib.counts().size == 0 and ib.get("bank", "1") is None
    accounted(ib)


def test_an_event_twice_in_one_batch_is_a_duplicate_the_second_time(ib: Inbox) -> None:
    out = ib.buffer_many([ev("1", payload={"v": 1}), ev("2"), ev("1", payload={"v": 2})])
    assert [(b.id, b.position, b.duplicate) for b in out] == [
        ("1", 0, False),
        ("2", 1, False),
        ("1", 0, True),
    ]
    assert state(ib, "bank", "1").payload == {"v": 1}
    assert ib.counts().size == 2


# =============================================================================================
# waits: subscribe, wait, listings
# =============================================================================================


def test_subscribe_is_idempotent(ib: Inbox) -> None:
    w = wt("run-1")
    assert ib.subscribe(w)
    assert not ib.subscribe(w)
    assert not ib.subscribe(wt("run-1", [["order", "B"]]))  # (run, effect key) is taken
    (got,) = ib.waiting(10)
    assert (got.run, got.effect_key, got.keys, got.case, got.step) == (
        "run-1",
        "e1",
        (("order", "A"),),
        "case-1",
        3,
    )
    assert got.number >= 1 and got.created_at == T0
    assert ib.counts().waits == 1
    assert ib.subscribe(wt("run-1", effect="e2"))  # another effect key is another wait
    assert ib.counts().waits == 2


def test_subscribe_does_not_look_at_the_buffer_but_wait_does(ib: Inbox) -> None:
    ib.buffer(ev("1"))
    assert ib.subscribe(wt("run-1"))
    assert state(ib, "bank", "1").state == "live"
    got = ib.wait(wt("run-1"))
    assert got is not None and got.event.id == "1" and not got.recovered
    assert ib.waiting(10) == []  # the claim retired the registered wait


def test_wait_claims_or_registers(ib: Inbox) -> None:
    assert ib.wait(wt("run-1")) is None
    assert [w.run for w in ib.waiting(10)] == ["run-1"]
    b = ib.buffer(ev("1"))
    assert b.matched is not None and b.matched.run == "run-1" and b.matched.effect_key == "e1"
    assert b.matched.case == "case-1" and b.matched.step == 3
    assert state(ib, "bank", "1").claimed_by == "run-1"
    assert ib.waiting(10) == []


def test_waiting_is_in_registration_order_and_paged(ib: Inbox) -> None:
    regs = [
        wt("run-c", [["order", "A"], ["cust", "X"]]),
        wt("run-a"),
        wt("run-b", effect="e9", kind="Refund"),
        wt("run-a", effect="e2", keys=[["k", str(i)] for i in range(16)]),
        wt("run-0"),
    ]
    for w in regs:
        assert ib.subscribe(w)
    listed = ib.waiting(MAX_LIMIT)
    assert [(w.run, w.effect_key) for w in listed] == [(w.run, w.effect_key) for w in regs]
    assert [w.keys for w in listed] == [w.keys for w in regs]
    numbers = [w.number for w in listed]
    assert numbers == sorted(numbers) and len(set(numbers)) == 5
    pages: list[Wait] = []
    after = None
    while True:
        page = ib.waiting(2, after=after)
        if not page:
            break
        assert len(page) <= 2
        pages += page
        after = page[-1].number
    assert pages == listed
    assert ib.waiting(1, after=numbers[3]) == [listed[4]]
    assert ib.waiting(1) == [listed[0]]  # 16 keys of one wait do not eat the page


@pytest.mark.parametrize("limit", [0, -1, MAX_LIMIT + 1, True, "5", 1.0])
def test_listing_limits_are_checked(ib: Inbox, limit: Any) -> None:
    with pytest.raises(UsageError):
        ib.waiting(limit)
    with pytest.raises(UsageError):
        ib.dead_letters(limit)
    with pytest.raises(UsageError):
        ib.events(limit=limit)


def test_listing_cursors_are_checked(ib: Inbox) -> None:
    for bad in (-1, "1", True):
        with pytest.raises(UsageError):
            ib.waiting(10, after=cast(int, bad))
        with pytest.raises(UsageError):
            ib.dead_letters(10, before=cast(int, bad))
    assert ib.waiting(MAX_LIMIT) == [] and ib.dead_letters(MAX_LIMIT) == []


def test_dead_letters_are_newest_first_and_paged(ib: Inbox, clock: FakeClock) -> None:
    for i in range(7):
        ib.buffer(ev(str(i)))
    got = ib.wait(wt("run-1"))  # claims position 0
    assert got is not None and got.event.position == 0
    clock.advance(5)
    assert ib.sweep(clock.now, "no taker") == 6
    dead = ib.dead_letters(MAX_LIMIT)
    assert [d.position for d in dead] == [6, 5, 4, 3, 2, 1]
    assert {(d.dead_reason, d.dead_at, d.state) for d in dead} == {("no taker", T0 + 5, "dead")}
    assert dead[0].payload == {"n": "6"}  # a dead letter keeps what arrived
    pages: list[StoredEvent] = []
    before = None
    while page := ib.dead_letters(4, before=before):
        pages += page
        before = page[-1].position
    assert pages == dead
    assert [d.position for d in ib.dead_letters(2, before=3)] == [2, 1]
    assert ib.dead_letters(5, before=1) == []


@pytest.mark.parametrize(
    "bad",
    [
        {"run": "a/b", "effect_key": "e", "kind": "K", "keys": ORDER_A},
        {"run": "r", "effect_key": "", "kind": "K", "keys": ORDER_A},
        {"run": "r", "effect_key": "e", "kind": "1K", "keys": ORDER_A},
        {"run": "r", "effect_key": "e", "kind": "K", "keys": []},
        {"run": "r", "effect_key": "e", "kind": "K", "keys": ORDER_A, "step": -1},
        {"run": "r", "effect_key": "e", "kind": "K", "keys": ORDER_A, "step": 1 << 53},
        {"run": "r", "effect_key": "e", "kind": "K", "keys": ORDER_A, "case": "a b"},
        {"run": "r", "effect_key": "e", "kind": "K", "keys": ORDER_A, "extra": 1},
        {"run": "r", "effect_key": "e", "kind": "K"},
    ],
)
def test_a_bad_wait_is_refused(ib: Inbox, bad: dict[str, Any]) -> None:
    with pytest.raises(UsageError):
        wait_from_json(bad)
    with pytest.raises(UsageError):
        ib.subscribe(cast(Wait, bad))
    assert ib.counts().waits == 0


def test_a_sealed_run_waits_for_claims_and_is_delivered_nothing(
    store: JournalStore, ib: Inbox
) -> None:
    """A sealed run takes no more records, so it could never resume on an event: its waits
    and claims are refused (the store's rules: RunSealedError), and a wait it registered
    before it was sealed is passed by, its event going to the next wait."""
    from store.errors import RunSealedError

    epochs = {}
    for run in ("run-1", "run-2"):
        epochs[run] = store.acquire(run, "worker", 60).epoch
        store.append(epochs[run], [Append(run, "Started")])
    ib.subscribe(wt("run-2", [["order", "B"]]))
    delivered = (
        ib.deliver("run-1", ev("0", [["order", "A"]])) if ib.subscribe(wt("run-1")) else None
    )
    assert delivered is not None and delivered.status == "matched"
    for run in ("run-1", "run-2"):
        store.seal(run, epochs[run], "ok")
    assert ib.deliver("run-1", ev("0", [["order", "A"]])) == delivered  # a retry: answered
    for verb in (ib.subscribe, ib.wait, ib.claim):
        with pytest.raises(RunSealedError):
            verb(wt("run-1", effect="e2"))
    with pytest.raises(RunSealedError):
        ib.deliver("run-1", ev("2", [["order", "A"]]))
    # An event on a sealed run's wait retires it (satisfied or not) and stays live.
    for id_, key in (("1", "A"), ("3", "B")):
        assert ib.buffer(ev(id_, [["order", key]])).matched is None
        assert state(ib, "bank", id_).state == "live"
    assert ib.waiting(10) == []
    accounted(ib)


_GOOD_WAIT = Wait("run-1", "e1", "Paid", (("order", "A"),))


@pytest.mark.parametrize(
    "fields",
    [
        {"run": "run/1"},
        {"effect_key": ""},
        {"effect_key": "e\ud800"},
        {"kind": "1K"},
        {"keys": ()},
        {"keys": (("order", "B"), ("order", "A"))},  # out of canonical order
        {"keys": (("order", "\x00"),)},
        {"keys": (("order", "\ud800"),)},
        {"keys": [["order", "A"]]},  # lists, not the tuples make_wait gives
        {"step": -1},
        {"step": 2**64},
        {"case": "a b"},
    ],
)
def test_a_hand_built_wait_is_checked_as_make_wait_checks(
    ib: Inbox, fields: dict[str, Any]
) -> None:
    """A Wait built by hand, not by make_wait, is checked as make_wait would check its
    fields: a one-line UsageError, nothing stored, the wait counter untouched."""
    bad = dataclasses.replace(_GOOD_WAIT, **fields)
    for verb in (ib.subscribe, ib.wait, ib.claim):
        with pytest.raises(UsageError) as caught:
            verb(bad)
        assert "\n" not in str(caught.value)
    assert ib.counts().waits == 0
    assert ib.subscribe(_GOOD_WAIT) and ib.waiting(10)[0].number == 1


@pytest.mark.parametrize(
    "call",
    [
        lambda ib: ib.get(["a"], "1"),
        lambda ib: ib.get("bank", "\ud800"),
        lambda ib: ib.get("bank", ""),
        lambda ib: ib.erase("bank", 1),
        lambda ib: ib.match("bank", None),
        lambda ib: ib.receipt(b"bank", "1"),
        lambda ib: ib.held(["run-1"]),
        lambda ib: ib.held("run/1"),
        lambda ib: ib.journal_delivery(["run-1"], 1, "bank", "1"),
        lambda ib: ib.journal_delivery("run-1", 1, "bank", "\udc00"),
        lambda ib: ib.events(after=2**64),
        lambda ib: ib.events(after="x"),
        lambda ib: ib.events(after=-2),
        lambda ib: ib.buffer_many(None),
        lambda ib: ib.buffer_many(ev("1")),
        lambda ib: ib.sweep(0, "bad \udc00"),
        lambda ib: ib.subscribe(make_wait("run-1", "e1", "Paid", [["order", "\ud800"]])),
        lambda ib: ib.unsubscribe("run-1", ""),
    ],
)
def test_a_callers_mistake_is_a_one_line_usage_error(ib: Inbox, call: Any) -> None:
    """Values no stored event, run or position could have are the caller's mistake: a
    one-line UsageError, never a driver's error or a raw exception."""
    ib.buffer(ev("1"))
    with pytest.raises(UsageError) as caught:
        call(ib)
    assert "\n" not in str(caught.value)
    assert ib.counts().size == 1


# =============================================================================================
# claims, both directions
# =============================================================================================


def test_a_wait_takes_the_oldest_live_event_of_its_kind_on_any_of_its_keys(ib: Inbox) -> None:
    ib.buffer_many(
        [
            ev("0", [["order", "B"]]),
            ev("1", [["order", "A"]], kind="Refund"),
            ev("2", [["cust", "X"]]),
            ev("3", [["order", "A"], ["zz", "z"]]),
            ev("4", [["cust", "X"]]),
        ],
        match=False,
    )
    w = [["order", "A"], ["cust", "X"]]
    got = [ib.claim(wt(f"run-{i}", w)) for i in range(4)]
    assert [g.event.id if g else None for g in got] == ["2", "3", "4", None]
    assert all(g is None or g.event.claimed_by == f"run-{i}" for i, g in enumerate(got))
    assert state(ib, "bank", "0").state == "live" and state(ib, "bank", "1").state == "live"
    refund = ib.claim(wt("run-9", [["order", "A"]], kind="Refund"))
    assert refund is not None and refund.event.id == "1"


def test_an_arriving_event_takes_the_oldest_wait(ib: Inbox) -> None:
    ib.subscribe(wt("run-1", [["order", "A"]]))
    ib.subscribe(wt("run-2", [["cust", "X"]]))
    ib.subscribe(wt("run-3", [["order", "A"]], kind="Refund"))
    ib.subscribe(wt("run-4", [["order", "A"], ["cust", "X"]]))
    ib.subscribe(wt("run-5", [["order", "Z"]]))
    both = [["order", "A"], ["cust", "X"]]
    runs = []
    for i in range(4):
        m = ib.buffer(ev(str(i), both)).matched
        runs.append(None if m is None else m.run)
    assert runs == ["run-1", "run-2", "run-4", None]
    assert state(ib, "bank", "3").state == "live"
    m = ib.buffer(ev("r", [["order", "A"]], kind="Refund")).matched
    assert m is not None and m.run == "run-3"
    assert [w.run for w in ib.waiting(10)] == ["run-5"]
    accounted(ib)


def test_match_claims_a_buffered_event_for_the_oldest_wait(ib: Inbox, clock: FakeClock) -> None:
    ib.buffer(ev("1"), match=False)
    assert ib.match("bank", "1") is None  # nobody waits
    ib.subscribe(wt("run-1"))
    ib.subscribe(wt("run-2"))
    assert ib.match("nobody", "1") is None
    m = ib.match("bank", "1")
    assert m is not None and m.run == "run-1"
    assert state(ib, "bank", "1").claimed_by == "run-1"
    assert ib.match("bank", "1") is None  # claimed: never a second run
    ib.buffer(ev("2"), match=False)
    assert ib.sweep(clock.now) == 1
    assert ib.match("bank", "2") is None  # dead
    assert [w.run for w in ib.waiting(10)] == ["run-2"]


def test_a_claim_retires_its_wait_at_most_one_event_per_wait(ib: Inbox) -> None:
    # event direction
    ib.subscribe(wt("run-1"))
    assert ib.buffer(ev("1")).matched is not None
    assert ib.buffer(ev("2")).matched is None
    assert ib.match("bank", "2") is None
    assert state(ib, "bank", "2").state == "live"
    # wait direction: the registered wait goes with the claim
    ib.subscribe(wt("run-2"))
    got = ib.claim(wt("run-2"))
    assert got is not None and got.event.id == "2"
    assert ib.buffer(ev("3")).matched is None
    assert state(ib, "bank", "3").state == "live"
    assert ib.waiting(10) == []
    assert [e.claimed_by for e in ib.events()] == ["run-1", "run-2", None]


def test_a_claimed_event_is_never_claimed_by_another_run(ib: Inbox) -> None:
    ib.buffer(ev("1"))
    got = ib.wait(wt("run-1"))
    assert got is not None
    assert ib.claim(wt("run-2")) is None
    assert ib.wait(wt("run-2")) is None  # registers instead
    assert ib.match("bank", "1") is None
    assert ib.deliver("run-2", ev("1")).status == "duplicate"
    assert state(ib, "bank", "1").claimed_by == "run-1"


def test_kind_must_match(ib: Inbox) -> None:
    ib.buffer(ev("1", kind="Refund"))
    assert ib.wait(wt("run-1", kind="Paid")) is None
    assert ib.buffer(ev("2", kind="Refund")).matched is None
    assert ib.buffer(ev("3", kind="Paid")).matched is not None


def test_racing_claims_never_share_a_message(stores: StoreFactory, backend: BackendLike) -> None:
    """Threads on their own handles: runs wait on one key while events arrive on it. Each event
    resumes at most one run, each wait at most one event, and in the end no live event sits
    beside a waiting run (the per-key lock of core.py)."""
    n = 6
    handles = [inbox_of(stores.open()) for _ in range(2 * n)]
    barrier = threading.Barrier(2 * n)

    def waiter(i: int) -> Claimed | None:
        barrier.wait()
        return handles[i].wait(wt(f"run-{i}"))

    def sender(i: int) -> Wait | None:
        barrier.wait()
        return handles[n + i].buffer(ev(str(i))).matched

    with ThreadPoolExecutor(2 * n) as pool:
        claims = [pool.submit(waiter, i) for i in range(n)]
        matches = [pool.submit(sender, i) for i in range(n)]
        got = [f.result() for f in claims]
        matched = [f.result() for f in matches]
    ib = handles[0]
    resumed = [c.wait.run for c in got if c is not None] + [m.run for m in matched if m]
    assert len(resumed) == len(set(resumed))  # no run resumed twice
    events = ib.events()
    claimed = [e for e in events if e.claimed_by is not None]
    assert sorted(e.claimed_by or "" for e in claimed) == sorted(resumed)
    assert len(claimed) == len(resumed)  # one message never resumes two runs
    live = [e for e in events if e.state == "live"]
    assert not (live and ib.waiting(10))  # no live event beside a waiting run
    assert len(claimed) == n  # so every wait got one event, every event one run
    accounted(ib)


# =============================================================================================
# crash recovery
# =============================================================================================


def test_a_run_that_claimed_on_its_wait_recovers_the_same_event(ib: Inbox) -> None:
    ib.buffer_many([ev("1"), ev("2")])
    first = ib.wait(wt("run-1"))
    assert first is not None and not first.recovered and first.event.id == "1"
    # the run "crashed" before resuming: its retried wait gets the same event
    again = ib.wait(wt("run-1"))
    assert again is not None and again.recovered
    assert again.event == first.event and again.event.payload == {"n": "1"}
    assert ib.claim(wt("run-1")) == Claimed(first.event, wt("run-1"), recovered=True)
    # another run cannot have it: it gets the next one
    other = ib.claim(wt("run-2"))
    assert other is not None and other.event.id == "2" and not other.recovered
    assert ib.claim(wt("run-3")) is None
    assert [e.id for e in ib.held("run-1")] == ["1"]


def test_a_run_that_claimed_on_arrival_recovers_the_same_event(ib: Inbox) -> None:
    ib.subscribe(wt("run-1"))
    b = ib.buffer(ev("1"))
    assert b.matched is not None and b.matched.run == "run-1"
    got = ib.wait(wt("run-1"))
    assert got is not None and got.recovered and got.event.id == "1"
    assert ib.waiting(10) == []
    assert ib.wait(wt("run-2")) is None


def test_recovery_needs_the_kind_and_a_key_of_the_wait(ib: Inbox) -> None:
    ib.buffer(ev("1"))
    assert ib.claim(wt("run-1")) is not None
    assert ib.claim(wt("run-1", [["order", "B"]])) is None
    assert ib.claim(wt("run-1", kind="Refund")) is None
    got = ib.claim(wt("run-1", [["order", "B"], ["order", "A"]]))
    assert got is not None and got.recovered
    # Another wait of the run does not get this wait's event back.
    assert ib.claim(wt("run-1", effect="e7")) is None


def test_each_wait_of_a_run_recovers_its_own_event(ib: Inbox) -> None:
    # Two waits of one run on the same kind and key, two events, nobody unsubscribed: a
    # re-claim gives each wait back the event it claimed, never the other's.
    ib.buffer(ev("1"))
    ib.buffer(ev("2"))
    first = ib.wait(wt("run-1", effect="e1"))
    second = ib.wait(wt("run-1", effect="e2"))
    assert first is not None and second is not None
    assert (first.event.id, second.event.id) == ("1", "2")
    assert state(ib, "bank", "1").claimed_for == "e1"
    for effect, want in (("e2", "2"), ("e1", "1"), ("e2", "2")):
        again = ib.claim(wt("run-1", effect=effect))
        assert again is not None and again.recovered and again.event.id == want


def test_after_unsubscribe_a_run_cannot_reclaim(ib: Inbox) -> None:
    ib.buffer(ev("1"))
    assert ib.wait(wt("run-1")) is not None
    assert ib.unsubscribe("run-1") == (0, 1)
    assert ib.held("run-1") == []
    stored = state(ib, "bank", "1")
    assert (stored.claimed_by, stored.held, stored.erased) == ("run-1", False, True)
    assert ib.claim(wt("run-1")) is None
    assert ib.wait(wt("run-1")) is None  # registered, waiting for a new event
    m = ib.buffer(ev("2")).matched
    assert m is not None and m.run == "run-1"


# =============================================================================================
# targeted delivery
# =============================================================================================


def test_a_targeted_delivery_to_a_waiting_run_is_matched_and_keeps_the_wait(
    ib: Inbox, clock: FakeClock
) -> None:
    ib.buffer(ev("0", [["other", "x"]]))
    ib.subscribe(wt("run-1", [["order", "A"], ["cust", "X"]]))
    t = ib.deliver("run-1", ev("1", [["cust", "X"]]))
    assert t.status == "matched" and t.position == 1
    assert t.wait is not None and (t.wait.run, t.wait.effect_key) == ("run-1", "e1")
    assert t.wait.keys == (("cust", "X"), ("order", "A"))
    stored = state(ib, "bank", "1")
    assert (stored.claimed_by, stored.held, stored.position, stored.received_at) == (
        "run-1",
        True,
        1,
        T0,
    )
    assert [w.run for w in ib.waiting(10)] == ["run-1"]  # not retired
    clock.advance(10)
    retry = ib.deliver("run-1", ev("1", [["cust", "X"]]))
    assert retry == t
    assert ib.counts().size == 2 and ib.checkpoint().size == 2
    # it is not sweepable, and not claimable by anyone else
    assert ib.sweep(clock.now) == 1  # only event 0
    assert ib.claim(wt("run-2", [["cust", "X"]])) is None
    accounted(ib)


@pytest.mark.parametrize("path", ["buffer", "match"])
def test_a_wait_kept_by_a_targeted_delivery_gets_no_second_event(ib: Inbox, path: str) -> None:
    """The delivery keeps its wait (for its retries); an event arriving later on its keys
    is not claimed for it — one wait, one event — but for the next wait in registration
    order, or stays live for a later one."""
    ib.subscribe(wt("run-1", [["order", "A"]]))
    assert ib.deliver("run-1", ev("1", [["order", "A"]])).status == "matched"

    def arrive(e: Event) -> Wait | None:
        if path == "buffer":
            return ib.buffer(e).matched
        ib.buffer(e, match=False)
        return ib.match(e.source, e.id)

    assert arrive(ev("2", [["order", "A"]])) is None
    assert state(ib, "bank", "2").claimed_by is None
    ib.subscribe(wt("run-2", [["order", "A"]]))
    got = arrive(ev("3", [["order", "A"]]))
    assert got is not None and got.run == "run-2"
    # a retried delivery is still matched, and run-1's wait holds only its delivered event
    assert ib.deliver("run-1", ev("1", [["order", "A"]])).status == "matched"
    again = ib.wait(wt("run-1", [["order", "A"]]))
    assert again is not None and again.recovered and again.event.id == "1"
    live = ib.claim(wt("run-3", [["order", "A"]]))
    assert live is not None and live.event.id == "2"
    accounted(ib)


def _slowed(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str, seconds: float) -> None:
    """Make ``owner.name`` sleep ``seconds`` before it runs, in its first call only: a window
    for another handle to act in the middle of a transaction."""
    real = getattr(owner, name)
    calls = itertools.count()

    def slow(*args: Any, **kw: Any) -> Any:
        if next(calls) == 0:
            time.sleep(seconds)
        return real(*args, **kw)

    monkeypatch.setattr(owner, name, slow)


def test_two_registrations_of_one_wait_at_once_register_it_once(
    stores: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two subscribes of one (run, effect key) on two handles, their keys and kinds
    different (no key lock in common), the first held up inside its transaction: the
    second waits for it and finds the wait registered."""
    a, b = inbox_of(stores.open()), inbox_of(stores.open())
    a.subscribe(wt("warm-up"))
    _slowed(monkeypatch, inbox_claims, "next_counter", 0.4)
    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(a.subscribe, wt("run-1", [["order", "A"]]))
        time.sleep(0.15)
        second = b.subscribe(wt("run-1", [["order", "B"]], kind="Shipped"))
        assert sorted([first.result(), second]) == [False, True]
    mine = [w for w in a.waiting(10) if w.run == "run-1"]
    assert len(mine) == 1 and a.counts().waits == 2


def test_a_delivery_racing_a_buffer_of_its_event_is_a_duplicate(
    stores: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A targeted delivery whose event is buffered by another handle (no key lock in common:
    match=False) after the delivery first looked for it: a duplicate, never a database error
    or a second row."""
    a, b = inbox_of(stores.open()), inbox_of(stores.open())
    a.subscribe(wt("run-1", [["order", "A"]]))
    _slowed(monkeypatch, a, "_now", 0.4)  # between the first look and the log's lock
    with ThreadPoolExecutor(1) as pool:
        delivered = pool.submit(a.deliver, "run-1", ev("1", [["order", "A"]]))
        time.sleep(0.15)
        buffered = b.buffer(ev("1", [["order", "A"]]), match=False)
        outcome = delivered.result()
    if buffered.duplicate:  # the delivery went first (SQLite: one writer at a time)
        assert outcome.status == "matched"
    else:
        assert outcome.status == "duplicate"
    assert a.counts().size == 1
    accounted(a)


def test_a_second_delivery_to_a_satisfied_wait_is_not_waiting(ib: Inbox) -> None:
    """A wait that a delivery satisfied gets no second event by delivery either: another
    event for it is not stored (not-waiting), and the first is still the wait's."""
    ib.subscribe(wt("run-1", [["order", "A"]]))
    assert ib.deliver("run-1", ev("1", [["order", "A"]])).status == "matched"
    assert ib.deliver("run-1", ev("2", [["order", "A"]])).status == "not-waiting"
    assert ib.get("bank", "2") is None
    ib.subscribe(wt("run-1", [["order", "A"]], effect="e2"))  # another wait of the run
    second = ib.deliver("run-1", ev("2", [["order", "A"]]))
    assert second.status == "matched" and second.wait is not None
    assert second.wait.effect_key == "e2"
    # a retry of the first is answered from the wait it satisfied
    first = ib.deliver("run-1", ev("1", [["order", "A"]]))
    assert first.wait is not None and first.wait.effect_key == "e1"
    accounted(ib)


def test_a_retried_delivery_is_matched_only_while_its_event_satisfies_the_wait(
    ib: Inbox,
) -> None:
    """A retry is answered ``matched`` from the wait its event satisfies; once that event
    was shed (unsubscribe) or the wait re-registered for another kind, the retry is a
    duplicate, and the new wait is free for a new event."""
    ib.subscribe(wt("run-1"))
    first = ib.deliver("run-1", ev("1"))
    assert first.status == "matched" and ib.deliver("run-1", ev("1")) == first
    assert ib.unsubscribe("run-1", "e1") == (1, 1)
    ib.subscribe(wt("run-1"))
    assert ib.deliver("run-1", ev("1")).status == "duplicate"
    assert ib.deliver("run-1", ev("2")).status == "matched"
    got = ib.claim(wt("run-1"))
    assert got is not None and got.event.id == "2" and got.recovered
    # The wait re-registered for another kind: the old event does not satisfy it.
    ib.subscribe(wt("run-2", kind="Refund"))
    assert ib.buffer(ev("3", kind="Paid")).matched is None
    ib.subscribe(wt("run-3"))
    assert ib.claim(wt("run-3")) is not None  # run-3 takes event 3
    ib.unsubscribe("run-2")
    ib.subscribe(wt("run-2", kind="Refund"))
    assert ib.deliver("run-2", ev("3", kind="Paid")).status == "duplicate"
    accounted(ib)


def test_a_delivery_racing_a_broadcast_gives_the_wait_one_event(
    stores: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A delivery and a buffer whose events share no key, both for one wait on both keys,
    the delivery held up inside its transaction: the wait gets one of the two events, and
    the other stays live."""
    a, b = inbox_of(stores.open()), inbox_of(stores.open())
    a.subscribe(wt("run-1", [["order", "A"], ["order", "B"]]))
    _slowed(monkeypatch, a, "_held_for", 0.4)
    with ThreadPoolExecutor(1) as pool:
        delivered = pool.submit(a.deliver, "run-1", ev("1", [["order", "A"]]))
        time.sleep(0.15)
        buffered = b.buffer(ev("2", [["order", "B"]]))
        outcome = delivered.result()
    mine = [e.id for e in a.events() if e.claimed_by == "run-1"]
    assert len(mine) == 1, (outcome, buffered, mine)
    assert (outcome.status == "matched") == (mine == ["1"])
    accounted(a)


def test_a_targeted_delivery_of_somebody_elses_event_is_a_duplicate(ib: Inbox) -> None:
    ib.subscribe(wt("run-1"))
    ib.subscribe(wt("run-2"))
    assert ib.deliver("run-1", ev("1")).status == "matched"
    assert ib.deliver("run-2", ev("1")).status == "duplicate"
    ib.buffer(ev("2"), match=False)  # buffered live, nobody's
    assert ib.deliver("run-2", ev("2")).status == "duplicate"
    assert state(ib, "bank", "2").state == "live"
    assert ib.deliver("run-9", ev("2")).status == "duplicate"  # exists, run not waiting
    assert ib.counts().size == 2


def test_a_targeted_delivery_to_a_run_not_waiting_stores_nothing(ib: Inbox) -> None:
    ib.subscribe(wt("run-1", [["order", "A"]]))
    for run, e in [
        ("run-2", ev("1")),
        ("run-1", ev("1", [["order", "B"]])),
        ("run-1", ev("1", kind="Refund")),
    ]:
        assert ib.deliver(run, e).status == "not-waiting"
    assert ib.get("bank", "1") is None and ib.counts().size == 0
    assert ib.checkpoint().size == 0
    with pytest.raises(UsageError):
        ib.deliver("a/b", ev("1"))
    with pytest.raises(UsageError):
        ib.deliver("run-1", cast(Event, "event"))


def test_a_targeted_delivery_refuses_a_malformed_event(ib: Inbox) -> None:
    ib.subscribe(wt("run-1", [["a", "1"]]))
    unsorted = Event("bank", "2", "Paid", (("z", "1"), ("a", "1")), None, b"null")
    with pytest.raises((UsageError, MalformedError)):
        ib.deliver("run-1", unsorted)
    assert ib.counts().size == 0


# =============================================================================================
# unsubscribe and erase
# =============================================================================================


def test_unsubscribe_removes_waits_one_effect_or_all(ib: Inbox) -> None:
    ib.subscribe(wt("run-1", [["a", "1"], ["b", "2"]], effect="e1"))
    ib.subscribe(wt("run-1", effect="e2"))
    ib.subscribe(wt("run-2", effect="e1"))
    assert ib.unsubscribe("run-1", "e1") == (2, 0)  # two key rows of one wait
    assert [(w.run, w.effect_key) for w in ib.waiting(10)] == [("run-1", "e2"), ("run-2", "e1")]
    assert ib.unsubscribe("run-1") == (1, 0)
    assert [(w.run, w.effect_key) for w in ib.waiting(10)] == [("run-2", "e1")]
    assert ib.unsubscribe("run-1") == (0, 0)
    m = ib.buffer(ev("1")).matched
    assert m is not None and m.run == "run-2"
    with pytest.raises(UsageError):
        ib.unsubscribe("a/b")
    with pytest.raises(UsageError):
        ib.unsubscribe("run-1", "")


def test_unsubscribe_sheds_held_payloads_and_keeps_the_rest(ib: Inbox, clock: FakeClock) -> None:
    ib.subscribe(wt("run-1"))
    ib.buffer(ev("1"))
    ib.subscribe(wt("run-1", [["cust", "X"]], effect="e2"))
    ib.deliver("run-1", ev("2", [["cust", "X"]]))
    ib.buffer(ev("3"), match=False)
    assert ib.claim(wt("run-2")) is not None  # another run's claim is left alone
    before = {e.id: e for e in ib.events()}
    receipt = ib.receipt("bank", "1")
    clock.advance(3)
    # The wait e2 goes, and the payload of the event claimed for it; e1's stays held (its
    # run may not have journaled it yet), until e1 goes too.
    assert ib.unsubscribe("run-1", "e2") == (1, 1)
    assert state(ib, "bank", "1").held and state(ib, "bank", "1").payload == {"n": "1"}
    assert ib.unsubscribe("run-1") == (0, 1)
    for id_ in ("1", "2"):
        after = state(ib, "bank", id_)
        assert after.erased and after.payload is None and not after.held
        assert after == StoredEvent(
            **{**before[id_].__dict__, "payload": None, "erased": True, "held": False}
        )
        with pytest.raises(UsageError):
            after.event()
    assert state(ib, "bank", "3").payload == {"n": "3"}
    c = ib.counts()
    assert (c.size, c.claimed, c.erased) == (3, 3, 2)
    # dedup still refuses a replay of a shed event
    assert ib.buffer(ev("1")).duplicate
    assert ib.deliver("run-1", ev("2", [["cust", "X"]])).status == "duplicate"
    assert state(ib, "bank", "2").erased
    verify_receipt(ib, receipt, ev("1"))


def test_erase_strips_a_payload_and_keeps_identity_accounting_and_receipts(
    ib: Inbox, clock: FakeClock
) -> None:
    ib.buffer_many([ev("1"), ev("2"), ev("3")])
    ib.sweep(clock.now)
    got = ib.wait(wt("run-1"))
    assert got is None  # all dead
    ib.buffer(ev("4"), match=False)
    before = {e.id: e for e in ib.events()}
    counts = ib.counts()
    receipt = ib.receipt("bank", "2")
    assert ib.erase("bank", "2") and ib.erase("bank", "4")
    assert not ib.erase("bank", "nope") and not ib.erase("shop", "2")
    assert ib.erase("bank", "2")  # again: still there
    for id_ in ("2", "4"):
        after = state(ib, "bank", id_)
        assert after == StoredEvent(**{**before[id_].__dict__, "payload": None, "erased": True})
    assert state(ib, "bank", "1").payload == {"n": "1"}
    assert ib.counts() == type(counts)(**{**counts.__dict__, "erased": 2})
    assert ib.buffer(ev("2")).duplicate and ib.buffer(ev("4")).duplicate
    assert ib.dead_letters(10)[1].erased  # position 1 = event 2
    # the receipt given before still verifies, and a new one too
    verify_receipt(ib, receipt, ev("2"))
    verify_receipt(ib, ib.receipt("bank", "2"), ev("2"))
    # an erased live event is still claimable: the claim is the identity's
    got = ib.claim(wt("run-1"))
    assert got is not None and got.event.id == "4" and got.event.erased


# =============================================================================================
# sweep
# =============================================================================================


def test_sweep_retires_at_or_before_the_cutoff(ib: Inbox, clock: FakeClock) -> None:
    ib.buffer(ev("1"))
    clock.advance(10)
    ib.buffer(ev("2"))
    clock.advance(10)
    assert ib.sweep(T0 - 1) == 0
    assert ib.sweep(T0, "late") == 1  # <=, not <
    assert state(ib, "bank", "1").dead_reason == "late"
    assert state(ib, "bank", "2").state == "live"
    ib.buffer(ev("3"))
    # a zero grace window retires everything already buffered, this second's too
    assert ib.sweep(clock.now) == 2
    assert [e.state for e in ib.events()] == ["dead"] * 3
    assert {e.dead_at for e in ib.events()} == {T0 + 20}
    assert ib.sweep(clock.now) == 0
    assert ib.wait(wt("run-1")) is None  # dead letters are nobody's
    assert ib.buffer(ev("1")).duplicate  # and still deduplicate
    accounted(ib)


def test_claimed_events_never_dead_letter(ib: Inbox, clock: FakeClock) -> None:
    ib.subscribe(wt("run-1"))
    ib.buffer_many([ev("1"), ev("2")])
    ib.subscribe(wt("run-2", [["cust", "X"]]))
    ib.deliver("run-2", ev("3", [["cust", "X"]]))
    assert ib.wait(wt("run-3")) is not None  # event 2
    clock.advance(1000)
    assert ib.sweep(clock.now) == 0
    assert [e.state for e in ib.events()] == ["claimed"] * 3
    ib.unsubscribe("run-1")
    assert ib.sweep(clock.now) == 0  # shed, still claimed
    assert ib.dead_letters(10) == []


@pytest.mark.parametrize("count", [9, 10])
def test_a_large_sweep_goes_in_chunks(
    ib: Inbox, clock: FakeClock, monkeypatch: pytest.MonkeyPatch, count: int
) -> None:
    monkeypatch.setattr(inbox_core, "SWEEP_CHUNK", 3)
    ib.buffer_many([ev(str(i)) for i in range(count)])
    ib.claim(wt("run-1"))
    clock.advance(1)
    ib.buffer(ev("late"), match=False)
    assert ib.sweep(T0) == count - 1
    assert [d.position for d in ib.dead_letters(MAX_LIMIT)] == list(range(count - 1, 0, -1))
    assert state(ib, "bank", "late").state == "live"


@pytest.mark.parametrize(
    ("older_than", "reason"),
    [(-1, "r"), ("1", "r"), (True, "r"), (0, ""), (0, "a\nb"), (0, "x" * 501), (0, None)],
)
def test_sweep_arguments_are_checked(ib: Inbox, older_than: Any, reason: Any) -> None:
    ib.buffer(ev("1"))
    with pytest.raises(UsageError):
        ib.sweep(older_than, reason)
    assert state(ib, "bank", "1").state == "live"


def _explain(backend: BackendLike, sql: str, params: Sequence[Any]) -> str:
    if backend.db is not None:
        with sqlite3.connect(backend.db) as conn:
            rows = conn.execute("EXPLAIN QUERY PLAN " + sql, tuple(params)).fetchall()
        return "\n".join(str(r[-1]) for r in rows)
    import psycopg

    assert backend.postgres is not None
    with psycopg.connect(backend.postgres, autocommit=True) as conn:
        conn.execute("ANALYZE inbox_event, inbox_match, inbox_wait")
        conn.execute("SET enable_seqscan = off")  # a small table: take an index when usable
        conn.execute("SET enable_bitmapscan = off")  # and walk it in order, as at scale
        rows = conn.execute(("EXPLAIN " + sql).replace("?", "%s"), tuple(params)).fetchall()
    return "\n".join(str(r[0]) for r in rows)


@dataclass
class _Statements:
    seen: list[tuple[str, tuple[Any, ...]]] = field(default_factory=list)

    def find(self, *fragments: str) -> tuple[str, tuple[Any, ...]]:
        hits = [s for s in self.seen if all(f in s[0] for f in fragments)]
        assert hits, f"no statement with {fragments}: {[s for s, _ in self.seen]}"
        return hits[0]


def test_sweep_and_claims_walk_their_indexes(
    ib: Inbox, backend: BackendLike, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The statements the inbox really runs (recorded off Tx.all and Tx.one) are planned on
    the indexes the schema names for them, never as a scan of every event or wait the tenant
    has."""
    from store.db.engine import Tx

    for i in range(20):
        ib.buffer(ev(str(i), [["order", str(i % 3)]]), match=False)
    for i in range(100):  # waits on many keys, as a tenant has them
        ib.subscribe(wt(f"run-w{i}", [["order", f"w{i}"]]))
    ib.subscribe(wt("run-x", [["order", "zzz"]]))
    recorded = _Statements()
    real_all, real_one = Tx.all, Tx.one

    def spy(self: Tx, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        recorded.seen.append((sql, tuple(params)))
        return real_all(self, sql, params)

    def spy_one(self: Tx, sql: str, params: Sequence[Any] = ()) -> tuple[Any, ...] | None:
        recorded.seen.append((sql, tuple(params)))
        return real_one(self, sql, params)

    monkeypatch.setattr(Tx, "all", spy)
    monkeypatch.setattr(Tx, "one", spy_one)
    assert ib.claim(wt("run-1", [["order", "1"]])) is not None  # the wait path
    assert ib.buffer(ev("new", [["order", "zzz"]])).matched is not None  # the event path
    clock.advance(1)
    assert ib.sweep(T0) == 19
    assert len(ib.dead_letters(5)) == 5
    assert [e.id for e in ib.held("run-1")] == ["1"]
    monkeypatch.undo()

    plans = {
        "sweep": _explain(backend, *recorded.find("FROM inbox_event", "received_at <=")),
        "claim": _explain(backend, *recorded.find("FROM inbox_match", "ORDER BY position")),
        "waiter": _explain(backend, *recorded.find("FROM inbox_wait", "ORDER BY number")),
        "dead": _explain(backend, *recorded.find("FROM inbox_event", "AND dead")),
        "held": _explain(backend, *recorded.find("FROM inbox_event", "claimed_by = ?")),
        "reclaim": _explain(backend, *recorded.find("FROM inbox_event", "held AND kind")),
    }
    if backend.db is not None:
        expect = {
            "sweep": "inbox_event USING INDEX inbox_event_live",
            "claim": "SEARCH inbox_match USING",
            "waiter": "INDEX inbox_wait_match (tenant=? AND kind=? AND namespace=? AND value=?"
            " AND number>?)",
            "dead": "USING INDEX inbox_event_dead (tenant=?)",
            "held": "USING INDEX inbox_event_held (tenant=? AND claimed_by=?)",
            "reclaim": "USING INDEX inbox_event_held (tenant=? AND claimed_by=?)",
        }
        scans = ("SCAN inbox_", "USE TEMP B-TREE")
    else:
        expect = {
            "sweep": "using inbox_event_live",
            "claim": "using inbox_match_pk",
            "waiter": "using inbox_wait_match",
            "dead": "using inbox_event_dead",
            "held": "using inbox_event_held",
            "reclaim": "using inbox_event_held",
        }
        scans = ("Seq Scan", "Sort")
    for name, plan in plans.items():
        assert expect[name] in plan, (name, plan)
        assert not any(s in plan for s in scans), (name, plan)
    if backend.db is not None:  # the match range is bounded on all five of its key columns
        assert "(tenant=? AND kind=? AND namespace=? AND value=? AND position>?)" in plans["claim"]


# =============================================================================================
# journaled delivery
# =============================================================================================


def test_journal_delivery_appends_the_event_delivered_record(
    store: JournalStore, ib: Inbox
) -> None:
    ib.buffer(ev("0", [["x", "y"]]))
    e = ev("1", [["order", "A"], ["cust", "X"]], payload={"amount": 5})
    ib.subscribe(wt("run-1"))
    ib.buffer(e)
    lease = store.acquire("run-1", "worker", LEASE)
    rec = ib.journal_delivery("run-1", lease.epoch, "bank", "1")
    body = rec.body()
    assert (body.kind, rec.run, rec.seq) == (KIND_EVENT_DELIVERED, "run-1", 1)
    assert delivery_of(body.data) == (
        "bank",
        "1",
        "Paid",
        (("cust", "X"), ("order", "A")),
        e.payload_sha256,
        1,
    )
    assert store.read("run-1") == [rec]
    assert state(ib, "bank", "1").delivered_seq == 1
    # idempotent: the same record, nothing written
    assert ib.journal_delivery("run-1", lease.epoch, "bank", "1") == rec
    assert store.read("run-1") == [rec]
    # after the payload is shed the record is still the event's
    ib.unsubscribe("run-1")
    assert ib.journal_delivery("run-1", lease.epoch, "bank", "1") == rec
    store.append(lease.epoch, [Append("run-1", "Note", data="resumed")])
    assert [r.seq for r in store.read("run-1")] == [1, 2]


def test_journal_delivery_is_fenced(store: JournalStore, ib: Inbox, clock: FakeClock) -> None:
    ib.buffer(ev("1"))
    assert ib.wait(wt("run-1")) is not None
    old = store.acquire("run-1", "worker-1", 10)
    clock.advance(11)
    new = store.acquire("run-1", "worker-2", LEASE)
    assert new.epoch > old.epoch
    with pytest.raises(FencedError):
        ib.journal_delivery("run-1", old.epoch, "bank", "1")
    assert store.read("run-1") == [] and state(ib, "bank", "1").delivered_seq is None
    rec = ib.journal_delivery("run-1", new.epoch, "bank", "1")
    assert rec.seq == 1
    # A retry is fenced too: the old holder is not handed the record as if it had resumed.
    with pytest.raises(FencedError):
        ib.journal_delivery("run-1", old.epoch, "bank", "1")
    assert ib.journal_delivery("run-1", new.epoch, "bank", "1") == rec
    for bad in (0, -1, True, "1"):
        with pytest.raises(UsageError):
            ib.journal_delivery("run-1", cast(int, bad), "bank", "1")


def test_journal_delivery_needs_the_runs_claim(store: JournalStore, ib: Inbox) -> None:
    ib.buffer_many([ev("1"), ev("2")], match=False)
    assert ib.claim(wt("run-2")) is not None  # run-2 holds event 1
    epoch = store.acquire("run-1", "worker", LEASE).epoch
    for source, id_ in (("bank", "1"), ("bank", "2"), ("bank", "9")):
        with pytest.raises(UsageError):
            ib.journal_delivery("run-1", epoch, source, id_)
    assert store.read("run-1") == []


def test_the_plain_append_refuses_the_delivery_kind(store: JournalStore) -> None:
    epoch = store.acquire("run-1", "worker", LEASE).epoch
    with pytest.raises(UsageError, match=KIND_EVENT_DELIVERED):
        store.append(epoch, [Append("run-1", KIND_EVENT_DELIVERED, data={"forged": True})])
    with pytest.raises(UsageError, match=KIND_EVENT_DELIVERED):
        store.append(
            epoch,
            [Append("run-1", "Note", data=1), Append("run-1", KIND_EVENT_DELIVERED, data=1)],
        )
    assert store.read("run-1") == []


# =============================================================================================
# tenants
# =============================================================================================


def test_tenants_never_meet(stores: StoreFactory, clock: FakeClock) -> None:
    a, b = inbox_of(stores.open("a")), inbox_of(stores.open("b"))
    assert (a.tenant, b.tenant) == ("a", "b") and a.origin != b.origin
    b.subscribe(wt("run-1"))
    ba = a.buffer(ev("1"))
    assert ba.matched is None and ba.position == 0  # tenant b's wait is not a's
    assert b.waiting(10) != [] and a.waiting(10) == []
    assert b.wait(wt("run-1")) is None  # a's event is not b's
    assert a.get("bank", "1") is not None and b.get("bank", "1") is None
    bb = b.buffer(ev("1"))  # dedup is per tenant: new in b, at b's position 0
    assert (bb.duplicate, bb.position) == (False, 0)
    assert bb.matched is not None and bb.matched.run == "run-1"
    assert a.deliver("run-1", ev("2")).status == "not-waiting"
    a.subscribe(wt("run-1", effect="e2"))
    assert a.deliver("run-1", ev("2")).status == "matched"
    assert b.deliver("run-1", ev("2")).status == "not-waiting"  # b's run-1 no longer waits
    clock.advance(1)
    a.buffer(ev("3"), match=False)
    assert b.sweep(clock.now) == 0  # b's event is claimed; a's live one is not b's
    assert a.sweep(clock.now) == 2
    assert b.dead_letters(10) == [] and len(a.dead_letters(10)) == 2
    assert b.unsubscribe("run-1") == (0, 1) and a.held("run-1") != []
    assert b.erase("bank", "3") is False and a.get("bank", "3") is not None
    ca, cb = a.counts(), b.counts()
    assert (ca.size, ca.live, ca.claimed, ca.dead, ca.waits) == (3, 0, 1, 2, 1)
    assert (cb.size, cb.live, cb.claimed, cb.dead, cb.erased) == (1, 0, 1, 0, 1)
    assert a.checkpoint().size == 3 and b.checkpoint().size == 1
    ra, rb = a.receipt("bank", "1"), b.receipt("bank", "1")
    assert ra.index == rb.index == 0
    verify_receipt(a, ra, ev("1"))
    verify_receipt(b, rb, ev("1"))
    with pytest.raises(TlogError):
        verify_receipt(b, ra, ev("1"))  # another tenant's origin and key name


def test_the_inbox_log_is_not_the_tenants_journal_log(store: JournalStore, ib: Inbox) -> None:
    ib.buffer(ev("1"))
    assert store.checkpoint().size == 0 and ib.checkpoint().size == 1
    assert ib.origin == inbox_origin(store.origin)
    assert ib.log.log_vkey.startswith(ib.origin + "+")


# =============================================================================================
# receipts and inbox checkpoints
# =============================================================================================


def verify_receipt(ib: Inbox, proof: TlogProof, event: Event) -> Entry:
    """Check a receipt offline: reparse its file, verify it against the inbox log's vkey and
    origin, and check that its entry commits to ``event``."""
    parsed = TlogProof.parse(proof.format())
    assert parsed.extra is not None
    verify_proof(
        parsed,
        merkle.leaf_hash(parsed.extra),
        [parse_vkey(ib.log.log_vkey)],
        origin=ib.origin,
    )
    entry = receipt_entry(parsed.extra)
    assert entry.matches(event)
    return entry


def test_the_inbox_log_handle_publishes_and_cannot_append(ib: Inbox) -> None:
    """``inbox.log`` is what publishing needs of the inbox log, over every buffered event (the
    pending ones too), and nothing that could add a leaf behind the inbox's back."""
    from store.publish import PublishedLog

    for i in range(3):
        ib.buffer(ev(str(i)))
    log: PublishedLog = ib.log
    early = log.consistency_proof(1, 3)  # the pending events are indexed first
    assert log.checkpoint().size == 3 and early == log.consistency_proof(1) != []
    note = log.sign_checkpoint()
    assert log.published() == [note] and log.consistency_proof(1) == ib.log.consistency_proof(1, 3)
    assert log.log_vkey.startswith(ib.origin + "+")
    for name in ("append", "seal", "acquire", "import_checkpoint", "_log_size"):
        assert not hasattr(ib.log, name), name


def test_a_receipt_verifies_offline(ib: Inbox, clock: FakeClock) -> None:
    events = [ev(str(i), payload={"i": i}) for i in range(5)]
    for e in events:
        ib.buffer(e)
        clock.advance(1)
    for i, e in enumerate(events):
        r = ib.receipt(e.source, e.id)
        assert r.index == i
        entry = verify_receipt(ib, r, e)
        assert entry.received_at == T0 + i
        assert not entry.matches(events[(i + 1) % 5])
    with pytest.raises(UsageError):
        ib.receipt("bank", "nope")


def test_a_receipt_uses_a_kept_checkpoint_that_covers_the_event(ib: Inbox) -> None:
    ib.buffer_many([ev("1"), ev("2")])
    note = ib.sign_checkpoint()
    ib.buffer(ev("3"))
    assert ib.receipt("bank", "2").checkpoint == note
    r3 = ib.receipt("bank", "3")  # not covered: signed now, and kept
    assert Checkpoint.parse(parse_note(r3.checkpoint)[0]).size == 3
    assert ib.log.published()[-1] == r3.checkpoint
    verify_receipt(ib, ib.receipt("bank", "1"), ev("1"))


def test_every_flipped_byte_of_a_receipt_fails(ib: Inbox) -> None:
    for i in range(6):
        ib.buffer(ev(str(i)))
    raw = ib.receipt("bank", "4").format()
    event = ev("4")
    assert raw.count(b"\n") > 8  # header, extra, index, three hashes, the note

    def accepted(data: bytes) -> bool:
        try:
            proof = TlogProof.parse(data)
            if proof.extra is None:
                return False
            verify_proof(
                proof,
                merkle.leaf_hash(proof.extra),
                [parse_vkey(ib.log.log_vkey)],
                origin=ib.origin,
            )
            return receipt_entry(proof.extra).matches(event)
        except TlogError:
            return False

    assert accepted(raw)
    for pos in range(len(raw)):
        for bit in (0x01, 0x20, 0x80):
            flipped = raw[:pos] + bytes([raw[pos] ^ bit]) + raw[pos + 1 :]
            assert not accepted(flipped), (pos, bit)

    # and any other value at any place (Hypothesis draws both; the receipt is built once)
    @settings(max_examples=300, deadline=None)
    @given(st.integers(0, len(raw) - 1), st.integers(1, 255))
    def replaced(pos: int, delta: int) -> None:
        assert not accepted(raw[:pos] + bytes([(raw[pos] + delta) % 256]) + raw[pos + 1 :])

    replaced()


def test_inbox_checkpoints_are_consistent_across_growth(ib: Inbox) -> None:
    sizes: list[int] = []
    roots: list[bytes] = []
    for batch in (1, 2, 5, 1, 8):
        ib.buffer_many([ev(f"{len(sizes)}-{i}") for i in range(batch)])
        note = ib.sign_checkpoint()
        cp = Checkpoint.parse(parse_note(note)[0])
        assert cp.origin == ib.origin
        sizes.append(cp.size)
        roots.append(cp.root)
    assert sizes == [1, 3, 8, 9, 17]
    for i in range(len(sizes)):
        for j in range(i, len(sizes)):
            proof = ib.log.consistency_proof(sizes[i], sizes[j])
            merkle.verify_consistency(sizes[i], sizes[j], roots[i], roots[j], proof)
    leaves = [e.entry.leaf for e in ib.events()]
    assert merkle.root(leaves) == roots[-1]


# =============================================================================================
# accounting: a model of the rules, step by step
# =============================================================================================


@dataclass
class _ModelEvent:
    source: str
    id: str
    kind: str
    keys: frozenset[tuple[str, str]]
    position: int
    claimed_by: str | None = None
    held: bool = False
    dead: bool = False
    erased: bool = False
    claimed_for: str | None = None


@dataclass
class _Model:
    events: list[_ModelEvent] = field(default_factory=list)
    waits: list[tuple[str, str, str, frozenset[tuple[str, str]]]] = field(default_factory=list)

    def find(self, source: str, id_: str) -> _ModelEvent | None:
        return next((e for e in self.events if (e.source, e.id) == (source, id_)), None)

    def holds(self, wait: tuple[str, str, str, frozenset[tuple[str, str]]]) -> bool:
        """Whether the wait's run holds an event claimed for it (its effect key, its kind,
        one of its keys): the wait is satisfied, and the broadcast path passes it by."""
        run, effect, kind, keys = wait
        return any(
            (e.claimed_by, e.claimed_for, e.kind) == (run, effect, kind)
            and e.held
            and e.keys & keys
            for e in self.events
        )

    def oldest_wait(self, kind: str, keys: frozenset[tuple[str, str]]) -> int | None:
        return next(
            (
                i
                for i, w in enumerate(self.waits)
                if w[2] == kind and w[3] & keys and not self.holds(w)
            ),
            None,
        )

    def retire(self, run: str, effect: str) -> None:
        self.waits = [w for w in self.waits if (w[0], w[1]) != (run, effect)]


KEYS = [("order", "A"), ("order", "B"), ("cust", "X")]
_TENANTS = itertools.count()
operations = st.one_of(
    st.tuples(
        st.just("buffer"),
        st.sampled_from(["s1", "s2"]),
        st.sampled_from(["1", "2", "3"]),
        st.sampled_from(["Paid", "Refund"]),
        st.sets(st.sampled_from(KEYS), min_size=1, max_size=2),
        st.booleans(),
    ),
    st.tuples(
        st.just("wait"),
        st.sampled_from(["r1", "r2", "r3"]),
        st.sampled_from(["e1", "e2"]),
        st.sampled_from(["Paid", "Refund"]),
        st.sets(st.sampled_from(KEYS), min_size=1, max_size=2),
        st.sampled_from(["wait", "subscribe", "claim"]),
    ),
    st.tuples(st.just("sweep")),
    st.tuples(st.just("unsubscribe"), st.sampled_from(["r1", "r2", "r3"])),
    st.tuples(st.just("erase"), st.sampled_from(["s1", "s2"]), st.sampled_from(["1", "2", "3"])),
)


def _step(ib: Inbox, m: _Model, op: tuple[Any, ...], now: int) -> None:
    if op[0] == "buffer":
        _, source, id_, kind, keys, match = op
        got = ib.buffer(make_event(source, id_, kind, sorted(keys), {"id": id_}), match=match)
        first = m.find(source, id_)
        if first is not None:
            assert got.duplicate and got.position == first.position and got.matched is None
            return
        e = _ModelEvent(source, id_, kind, frozenset(keys), len(m.events))
        m.events.append(e)
        assert not got.duplicate and got.position == e.position
        i = m.oldest_wait(kind, e.keys) if match else None
        if i is None:
            assert got.matched is None
            return
        run, effect, _, _ = m.waits[i]
        assert got.matched is not None and (got.matched.run, got.matched.effect_key) == (
            run,
            effect,
        )
        e.claimed_by, e.held, e.claimed_for = run, True, effect
        m.retire(run, effect)
    elif op[0] == "wait":
        _, run, effect, kind, keys, how = op
        w = make_wait(run, effect, kind, sorted(keys))
        if how == "subscribe":
            new = ib.subscribe(w)
            assert new == all((x[0], x[1]) != (run, effect) for x in m.waits)
            if new:
                m.waits.append((run, effect, kind, frozenset(keys)))
            return
        claimed = ib.wait(w) if how == "wait" else ib.claim(w)
        mine = [
            e
            for e in m.events
            if e.claimed_by == run
            and e.claimed_for == effect
            and e.held
            and e.kind == kind
            and e.keys & keys
        ]
        live = [
            e
            for e in m.events
            if e.claimed_by is None and not e.dead and e.kind == kind and e.keys & keys
        ]
        if mine or live:
            e = (mine or live)[0]
            assert claimed is not None
            assert (claimed.event.source, claimed.event.id, claimed.recovered) == (
                e.source,
                e.id,
                bool(mine),
            )
            e.claimed_by, e.held, e.claimed_for = run, True, effect
            m.retire(run, effect)
        else:
            assert claimed is None
            if how == "wait" and all((x[0], x[1]) != (run, effect) for x in m.waits):
                m.waits.append((run, effect, kind, frozenset(keys)))
    elif op[0] == "sweep":
        n = ib.sweep(now)
        doomed = [e for e in m.events if e.claimed_by is None and not e.dead]
        assert n == len(doomed)
        for e in doomed:
            e.dead = True
    elif op[0] == "unsubscribe":
        run = op[1]
        _, shed = ib.unsubscribe(run)
        held = [e for e in m.events if e.claimed_by == run and e.held]
        assert shed == len(held)
        for e in held:
            e.held, e.erased = False, True
        m.waits = [w for w in m.waits if w[0] != run]
    else:
        _, source, id_ = op
        found = m.find(source, id_)
        assert ib.erase(source, id_) == (found is not None)
        if found is not None:
            found.erased = True


def _check(ib: Inbox, m: _Model) -> None:
    stored = ib.events(limit=MAX_LIMIT)
    assert [(e.source, e.id, e.position) for e in stored] == [
        (e.source, e.id, e.position) for e in m.events
    ]
    for got, want in zip(stored, m.events, strict=True):
        assert (got.claimed_by, got.held, got.dead, got.erased) == (
            want.claimed_by,
            want.held,
            want.dead,
            want.erased,
        )
    assert [(w.run, w.effect_key) for w in ib.waiting(MAX_LIMIT)] == [(w[0], w[1]) for w in m.waits]
    c = ib.counts()
    assert c.size == c.live + c.claimed + c.dead == len(m.events) == ib.checkpoint().size
    assert c.live == sum(e.claimed_by is None and not e.dead for e in m.events)
    assert c.claimed == sum(e.claimed_by is not None for e in m.events)
    assert c.dead == sum(e.dead for e in m.events)
    assert c.erased == sum(e.erased for e in m.events)
    assert c.waits == len(m.waits)
    for e in m.events:
        assert not (e.dead and e.claimed_by)  # claimed events never dead-letter


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(st.lists(operations, min_size=1, max_size=25))
def test_the_inbox_follows_its_rules_step_by_step(
    stores: StoreFactory, clock: FakeClock, ops: list[tuple[Any, ...]]
) -> None:
    """A fresh tenant per example (one database per test): every operation's answer and the
    whole state after it agree with a model of the rules."""
    ib = inbox_of(stores.open(f"m{next(_TENANTS)}"))
    m = _Model()
    for op in ops:
        clock.advance(1)
        _step(ib, m, op, clock.now)
        _check(ib, m)


# =============================================================================================
# the inbox log's remembered right edge (store.sqlcore.TreeEdge)
# =============================================================================================


def test_an_append_rolled_back_is_not_remembered_and_other_writers_are_seen(
    stores: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The edge an append computes is remembered only after its commit, and a handle whose
    remembered edge went stale (another handle appended) reads the edge again: every root
    stays the root of the entries in order (every buffer indexes its event at once here)."""
    monkeypatch.setattr(inbox_core, "INDEX_BATCH", 1)
    a, b = inbox_of(stores.open()), inbox_of(stores.open())
    tree = merkle.MemoryHashStore()

    def buffered(ib: Inbox, e: Event) -> None:
        got = ib.buffer(e)
        assert not got.duplicate
        tree.append(ib.get(e.source, e.id).entry.leaf)  # type: ignore[union-attr]

    buffered(a, ev("1"))
    buffered(a, ev("2"))  # a's edge now remembered at size 2
    real = TreeEdge.append

    def fails_after(self: TreeEdge, *args: Any) -> Any:
        real(self, *args)
        raise RuntimeError("the transaction fails after the append")

    monkeypatch.setattr(TreeEdge, "append", fails_after)
    with pytest.raises(RuntimeError):
        a.buffer(ev("3"))
    monkeypatch.undo()
    assert a.checkpoint().size == 2 and a.get("bank", "3") is None
    buffered(b, ev("4"))  # another writer takes position 2 with another event
    buffered(a, ev("5"))  # a's edge is for size 2: it must read the edge at size 3
    buffered(a, ev("6"))
    buffered(b, ev("7"))
    for ib in (a, b):
        assert ib.checkpoint().size == tree.size == 6
        assert ib.checkpoint().root == tree.root()
        proof = ib.receipt("bank", "5")
        verify_receipt(ib, proof, ev("5"))


# --- PostgreSQL: the planner's statistics, the batch's locks ----------------------------------


def test_the_planner_gets_statistics_once_the_log_grows(pg_schema: Any, clock: FakeClock) -> None:
    """A table autovacuum has not analyzed has no statistics; the planner then took the
    live-events index for a claim's primary-key update, a walk of every live event. Past
    1,000 events the store analyzes the inbox's tables, and the claim is a key lookup."""
    import psycopg

    from tests.conftest import Backend

    stores = StoreFactory(Backend("postgres", postgres=pg_schema.conninfo), clock)
    try:
        box = inbox_of(stores.open())
        with psycopg.connect(pg_schema.conninfo) as conn:

            def tuples() -> float:
                row = conn.execute(
                    "SELECT reltuples FROM pg_class WHERE oid = 'inbox_event'::regclass"
                ).fetchone()
                assert row is not None
                return float(row[0])

            box.buffer_many([ev(str(i), [["order", str(i)]], source="s") for i in range(999)])
            assert tuples() < 0  # never analyzed
            box.buffer(ev("999", [["order", "999"]], source="s"))
            assert tuples() == 1000
            plan = "\n".join(
                r[0]
                for r in conn.execute(
                    "EXPLAIN UPDATE inbox_event SET claimed_by = 'r' WHERE tenant = 'default'"
                    " AND source = 's' AND id = '5' AND claimed_by IS NULL AND NOT dead"
                ).fetchall()
            )
            assert "inbox_event_pk" in plan, plan
    finally:
        stores.close()


def test_a_batchs_key_locks_are_taken_in_one_statement_and_held(pg_schema: Any) -> None:
    import psycopg

    from store.db.postgres import PostgresDialect

    d = PostgresDialect(pg_schema.conninfo)
    conn = d.connect()
    names = [f"k{i}" for i in range(50)]
    try:
        cur = conn.cursor()
        cur.execute(d.begin_write)
        d.xact_locks(Tx(cur, d), names, shared=False)
        with psycopg.connect(pg_schema.conninfo, autocommit=True) as other:
            held = [
                not other.execute(
                    "SELECT pg_try_advisory_xact_lock(hashtext(%s || ' ' || current_schema()))",
                    (n,),
                ).fetchone()[0]  # type: ignore[index]
                for n in names
            ]
        assert all(held)
        cur.execute("COMMIT")
    finally:
        conn.close()


# =============================================================================================
# The batched indexes (store.inbox.schema: "Indexed in batches")
# =============================================================================================


def _stored_log_size(ib: Inbox) -> int:
    return ib._store._read(ib._log._log_size)


def test_a_buffer_writes_its_indexes_once_a_batch_is_pending(
    ib: Inbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pending events are the events after the stored log; the buffer that makes
    INDEX_BATCH of them pending indexes them all, in its own transaction."""
    monkeypatch.setattr(inbox_core, "INDEX_BATCH", 4)
    for i in range(3):
        ib.buffer(ev(str(i)))
    assert _stored_log_size(ib) == 0
    assert ib.counts().size == 3 and ib.counts().live == 3
    ib.buffer(ev("3"))
    assert _stored_log_size(ib) == 4
    ib.buffer(ev("4"))
    assert _stored_log_size(ib) == 4
    assert ib.catch_up() == 1 and ib.catch_up() == 0
    assert _stored_log_size(ib) == 5


def test_pending_events_are_in_every_checkpoint_receipt_claim_and_sweep(
    ib: Inbox, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(inbox_core, "INDEX_BATCH", 100)
    events = [ev(str(i), [["order", str(i)]], payload={"i": i}) for i in range(6)]
    for e in events:
        ib.buffer(e)
        clock.advance(1)
    assert _stored_log_size(ib) == 0  # all pending (the store's batch is larger)
    # a receipt of a pending event: signed over every event, verified offline
    verify_receipt(ib, ib.receipt("bank", "4"), events[4])
    assert _stored_log_size(ib) == 6 and ib.checkpoint().size == 6
    ib.buffer(events[0])  # a duplicate of an indexed event: nothing pending
    assert ib.buffer(ev("6", [["order", "6"]])).position == 6
    assert ib.checkpoint().size == 7
    ib.buffer(ev("7", [["order", "7"]]))
    got = ib.claim(wt("run-1", [["order", "7"]]))  # by key: the claim indexes it first
    assert got is not None and got.event.id == "7"
    ib.buffer(ev("8", [["order", "8"]]))
    assert ib.sweep(clock.now) == 8  # 0-6, and the pending 8; 7 is claimed
    assert [e.id for e in ib.dead_letters(10)] == ["8", "6", "5", "4", "3", "2", "1", "0"]
    c = ib.counts()
    assert (c.size, c.live, c.claimed, c.dead) == (9, 0, 1, 8)


def test_a_delivery_and_a_restore_index_the_pending_events_before_their_own(
    ib: Inbox,
) -> None:
    ib.buffer(ev("1", [["order", "1"]]))
    ib.subscribe(wt("run-1", [["order", "2"]]))
    assert ib.deliver("run-1", ev("2", [["order", "2"]])).position == 1
    assert _stored_log_size(ib) == 2  # the delivered event's leaf follows the pending one's
    tree = merkle.MemoryHashStore()
    for e in ib.events():
        tree.append(e.entry.leaf)
    assert ib.checkpoint().root == tree.root(2)


@pytest.mark.parametrize("read_first", [False, True], ids=["write-first", "read-first"])
def test_a_version_1_inbox_is_upgraded_on_first_use(stores: StoreFactory, read_first: bool) -> None:
    """A store whose inbox was made by version 1 (no ``indexed``; a live index without it)
    is upgraded in place: its events are indexed, and everything works on."""
    store = stores.open()
    box = inbox_of(store)
    box.buffer(ev("1", [["order", "1"]]))
    box.buffer(ev("2", [["order", "2"]]))
    box.catch_up()
    sql = cast(SQLStore, store)

    def downgrade(tx: Tx) -> None:
        tx.execute("DROP INDEX inbox_event_live")
        tx.execute("ALTER TABLE inbox_event DROP COLUMN indexed")
        tx.execute(
            "CREATE INDEX inbox_event_live ON inbox_event (tenant, received_at, position)"
            " WHERE claimed_by IS NULL AND NOT dead"
        )
        tx.execute("UPDATE inbox_meta SET schema_version = 1")

    sql._write(downgrade)
    again = inbox_of(stores.open())
    if read_first:  # a handle whose first call reads checks (and upgrades) all the same
        assert again.counts().live == 2
    assert again.buffer(ev("3", [["order", "3"]])).position == 2
    got = again.claim(wt("run-1", [["order", "1"]]))
    assert got is not None and got.event.id == "1"
    assert again.sweep(2**40) == 2
    assert again.checkpoint().size == 3
    assert sql._read(lambda tx: tx.one("SELECT schema_version FROM inbox_meta")) == (2,)


@pytest.mark.parametrize("read_first", [False, True], ids=["write-first", "read-first"])
def test_an_inbox_of_a_newer_schema_is_refused(stores: StoreFactory, read_first: bool) -> None:
    """A schema this code does not know is refused with a one-line UsageError, whether the
    handle's first call reads or writes, and nothing is written."""
    store = stores.open()
    inbox_of(store).buffer(ev("1"))
    cast(SQLStore, store)._write(lambda tx: tx.execute("UPDATE inbox_meta SET schema_version = 3"))
    again = inbox_of(stores.open())
    with pytest.raises(UsageError, match="schema version is 3"):
        if read_first:
            again.counts()
        again.buffer(ev("2"))
    rows = cast(SQLStore, store)._read(lambda tx: tx.all("SELECT id FROM inbox_event"))
    assert rows == [("1",)]


def test_a_gap_below_the_pending_events_is_corruption(
    ib: Inbox, stores: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(inbox_core, "INDEX_BATCH", 100)
    for i in range(3):
        ib.buffer(ev(str(i)))
    ib._store._write(
        lambda tx: tx.execute(
            "DELETE FROM inbox_event WHERE tenant = ? AND id = ?", (ib.tenant, "1")
        )
    )
    # Another handle, which did not buffer them, reads the pending rows back.
    with pytest.raises(CorruptError, match="no event at position 1"):
        inbox_of(stores.open()).checkpoint()


def _match_rows(ib: Inbox) -> set[tuple[str, str, str, int]]:
    rows = ib._store._read(
        lambda tx: tx.all(
            "SELECT kind, namespace, value, position FROM inbox_match WHERE tenant = ?",
            (ib.tenant,),
        )
    )
    return {(str(k), str(ns), str(v), int(p)) for k, ns, v, p in rows}


def _check_indexes(ib: Inbox) -> None:
    """The inbox log is the log of the stored events' leaves, and the match index holds the
    keys of exactly the live events."""
    ib.catch_up()
    events = sorted(ib.events(), key=lambda e: e.position)
    assert [e.position for e in events] == list(range(len(events)))
    tree = merkle.MemoryHashStore()
    for e in events:
        tree.append(e.entry.leaf)
    assert ib.checkpoint().root == tree.root(len(events))
    live = {(e.kind, ns, v, e.position) for e in events if e.state == "live" for ns, v in e.keys}
    assert _match_rows(ib) == live


def test_a_pending_event_claimed_by_match_keeps_no_match_row(ib: Inbox) -> None:
    """match() claims a buffered event that may still be pending: it indexes the pending
    events first, so that the claimed one's keys never reach the match index."""
    ib.buffer(ev("m"))
    assert ib.subscribe(wt("run-1"))
    got = ib.match("bank", "m")
    assert got is not None and got.run == "run-1"
    _check_indexes(ib)
    assert ib.claim(wt("run-2")) is None


@pytest.mark.parametrize("seed", range(4))
def test_handles_interleaving_pending_events_index_each_others(
    stores: StoreFactory, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    """Two handles of one store buffer, catch up, claim and match in a random order: each
    indexes the pending events the other buffered (read back) beside its own (remembered),
    and neither indexes an event twice or one that the other indexed already."""
    import random

    monkeypatch.setattr(inbox_core, "INDEX_BATCH", 5)
    rng = random.Random(seed)
    boxes = [inbox_of(stores.open()), inbox_of(stores.open())]
    for n in range(120):
        box = rng.choice(boxes)
        op = rng.random()
        key = [["order", f"o{rng.randrange(6)}"]]
        if op < 0.55:
            batch = [ev(f"e{n}-{i}", key) for i in range(rng.choice((1, 1, 1, 3)))]
            box.buffer_many(batch, match=rng.random() < 0.7)
        elif op < 0.7:
            box.catch_up()
        elif op < 0.85:
            box.wait(wt(f"run-{n}", key))
        else:
            box.match("bank", f"e{rng.randrange(n + 1)}-0")
    for box in boxes:
        _check_indexes(box)


class _Str(str):
    """A str subclass: make_event takes one for any text field."""


def test_events_of_str_subclasses_are_indexed_like_any(ib: Inbox) -> None:
    # The handle remembers plain str, as the rows read back: the leaf function takes nothing
    # else (a subclass failed the next catch-up, whoever's operation started it).
    ib.buffer(make_event(_Str("bank"), _Str("s1"), _Str("Paid"), [[_Str("order"), "A"]], {}))
    ib.buffer(ev("plain", [["order", "B"]]))
    got = ib.claim(wt("run-1"))
    assert got is not None and got.event.id == "s1"
    _check_indexes(ib)


def test_a_handle_forgets_the_pending_events_another_indexed(
    stores: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a handle remembers stays bounded, and holds no payload, when another handle
    (a worker that claims, sweeps or checkpoints) indexes its events every time."""
    monkeypatch.setattr(inbox_core, "INDEX_BATCH", 10)
    a, b = inbox_of(stores.open()), inbox_of(stores.open())
    for i in range(40):
        a.buffer(ev(str(i), [["order", str(i)]], payload={"blob": "x" * 1000}))
        b.catch_up()
        assert len(a._own) <= 2
    assert all(not isinstance(v, bytes) or len(v) <= 32 for e in a._own.values() for v in e)
    a.buffer(ev("last", [["order", "last"]]))
    _check_indexes(a)


def test_a_retried_transaction_leaves_no_tree_edge_of_its_failed_attempt(
    stores: StoreFactory, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An attempt that indexed (and so left the tree's new right edge for after the commit)
    and then failed with a retryable error, retried when another handle had stored the same
    events meanwhile: the retry appends nothing, and the failed attempt's edge must not be
    taken as the log's (the next append stored wrong tree hashes)."""
    from store.db import engine
    from store.inbox.indexing import InboxIndexes

    a, b = inbox_of(stores.open()), inbox_of(stores.open())
    batch = [ev(str(i), [["order", str(i)]]) for i in range(INDEX_AT_ONCE)]
    real = InboxIndexes._index_pending
    step = {"n": 0}

    def failing(self: InboxIndexes, *args: Any, **kw: Any) -> None:
        real(self, *args, **kw)
        if self is a and step["n"] == 0:
            step["n"] = 1
            raise engine._Again  # what a retryable driver error becomes

    def sleep(seconds: float) -> None:
        if step["n"] == 1:
            step["n"] = 2
            clock.advance(5)  # so that their leaves are not the failed attempt's
            b.buffer_many(batch)  # another process stores the same events meanwhile

    monkeypatch.setattr(InboxIndexes, "_index_pending", failing)
    monkeypatch.setattr("store.db.engine.time.sleep", sleep)
    assert all(o.duplicate for o in a.buffer_many(batch))
    monkeypatch.undo()
    a.buffer_many([ev(f"n{i}", [["order", "x"]]) for i in range(INDEX_AT_ONCE)])
    _check_indexes(a)


def test_a_large_batch_indexes_itself_and_the_pending_before_it(
    ib: Inbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(inbox_core, "INDEX_BATCH", 100)
    ib.buffer(ev("early", [["order", "x"]]))
    ib.subscribe(wt("run-9", [["order", "b7"]]))
    batch = [ev(f"b{i}", [["order", f"b{i}"]]) for i in range(INDEX_AT_ONCE)]
    got = ib.buffer_many(batch)
    assert got[7].matched is not None  # claimed in the batch: it gets no match rows
    assert _stored_log_size(ib) == 1 + len(batch)  # no read back, nothing left pending
    tree = merkle.MemoryHashStore()
    for e in ib.events():
        tree.append(e.entry.leaf)
    assert ib.checkpoint().root == tree.root(1 + len(batch))
    claimed = ib.claim(wt("run-1", [["order", "x"]]))
    assert claimed is not None and claimed.event.id == "early"
    assert ib.claim(wt("run-2", [["order", "b7"]])) is None
    assert ib.sweep(2**40) == len(batch) - 1
