"""The journal-store conformance battery: one set of checks, run against every backend.

Every test takes the ``backend`` fixture (conftest.py), so each runs once on SQLite and once on
PostgreSQL: "one battery, so a PostgreSQL-shaped mistake cannot hide behind a SQLite-shaped test
suite". The checks are the guarantees of :mod:`store.api` (docs/embedder-guide.md) and of the
upstream journal store's battery (admission keys, runs by source and waiting runs included) and
the further checks its comments call for, grouped by invariant.

Time is a :class:`~tests.store.helpers.FakeClock` handed to ``open_store``: lease expiry is reached
by ``clock.advance`` instead of sleeping. One test uses the default clock with a 1 s lease, to show
that it works too.

Oracles are independent of the store: record hashes are recomputed with
:func:`tlog.journal.chain_hash`, Merkle roots rebuilt from the sealed heads with
:func:`tlog.merkle.root`, proofs checked with :func:`tlog.merkle.verify_inclusion` and
:func:`tlog.merkle.verify_consistency`, notes opened with :mod:`tlog.note` and
:mod:`tlog.checkpoint`.

Decisions this battery tests (where the seeds left a choice):

* A deleted run (``_delete_run_for_test``) keeps its leaf: positions are never reused, the stored
  tree is unchanged and stays consistent with every earlier checkpoint; the run's records, seal
  and inclusion proof are gone. Deletion is caught by an auditor who rebuilds the log from the
  surviving sealed heads: that tree is not consistent with what was published.
* Argument errors are :class:`~tlog.errors.MalformedError` or :class:`~tlog.errors.UsageError`
  (errors.py allows either), except an oversized record, which is a ``MalformedError`` naming its
  size and the limit.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from store import errors
from store.api import Append, Cancellation, Head, JournalStore, Lease, Seal, WaitingRun
from tests.store.helpers import (
    ORIGIN,
    T0,
    BackendLike,
    FakeClock,
    StoreFactory,
    concluded,
    delete_run,
    note,
    record_signer,
    started,
    tamper,
)
from tlog import merkle
from tlog.checkpoint import Checkpoint, open_checkpoint
from tlog.cosignature import CosignatureV1Signer
from tlog.encoding import MAX_INT63
from tlog.errors import (
    InvalidSignatureError,
    MalformedError,
    ProofError,
    TlogError,
    UnverifiedNoteError,
    UsageError,
)
from tlog.journal import (
    GENESIS,
    KIND_RUN_SEALED,
    MAX_RECORD_SIZE,
    Body,
    Record,
    RecordSignature,
    chain_hash,
    seal_body,
    seal_outcome,
    verify_record_signature,
)
from tlog.keys import format_vkey
from tlog.note import Ed25519Signer, Signature, add_signatures, open_note, parse_note, sign_note

INVALID = (MalformedError, UsageError)
"""What a malformed argument raises (store/errors.py allows either)."""

LEASE = 300
"""A lease that outlives any test (the clock only moves when told)."""

EMPTY_ROOT = hashlib.sha256(b"").digest()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def stores(backend: BackendLike, clock: FakeClock) -> Iterator[StoreFactory]:
    """An initialised database on this backend; handles opened on it are closed afterwards."""
    factory = StoreFactory(backend, clock)
    yield factory
    factory.close()


@pytest.fixture
def store(stores: StoreFactory) -> JournalStore:
    """A handle for the default tenant, on the fake clock."""
    return stores.open()


def seqs(records: list[Record]) -> list[int]:
    return [r.seq for r in records]


def seal_run(store: JournalStore, run: str, outcome: str = "succeeded", records: int = 1) -> Seal:
    """Lease ``run``, write ``records`` notes, seal it, release the lease; return the seal."""
    lease = store.acquire(run, "sealer", LEASE)
    store.append(lease.epoch, [note(run, f"{run} {i}") for i in range(records)])
    s = store.seal(run, lease.epoch, outcome)
    store.release(run, lease.epoch)
    return s


def is_shared_expected(backend: BackendLike) -> bool:
    return backend.name == "postgres"


# =============================================================================================
# chaining: heads, contiguous seqs, links, verification, reads
# =============================================================================================


def test_the_head_of_an_unwritten_run_is_genesis(store: JournalStore) -> None:
    assert Head.genesis() == Head(0, bytes(32))
    assert store.head("run-a") == Head(0, GENESIS)
    assert store.read("run-a") == []
    assert store.read_page("run-a", 1, 10) == []
    assert store.verify("run-a") == GENESIS


def test_append_assigns_contiguous_seqs(store: JournalStore) -> None:
    lease = store.acquire("run-a", "alice", LEASE)
    for want in (1, 2, 3):
        (rec,) = store.append(lease.epoch, [note("run-a", want)])
        assert (rec.run, rec.seq) == ("run-a", want)
    batch = store.append(lease.epoch, [note("run-a", i) for i in (4, 5, 6)])
    assert seqs(batch) == [4, 5, 6]
    assert seqs(store.read("run-a")) == [1, 2, 3, 4, 5, 6]
    assert store.head("run-a") == Head(6, batch[-1].hash)


def test_append_links_each_record_to_the_previous(store: JournalStore) -> None:
    lease = store.acquire("run-a", "alice", LEASE)
    written = store.append(lease.epoch, [note("run-a", "one")])
    written += store.append(lease.epoch, [note("run-a", "two"), note("run-a", "three")])
    written += store.append(lease.epoch, [note("run-a", "four")])
    records = store.read("run-a")
    assert records == written
    prev = GENESIS
    for r in records:
        assert r.prev_hash == prev
        assert r.hash == chain_hash(prev, r.raw)
        assert r.signature is None
        prev = r.hash


def test_a_record_body_carries_what_was_appended(store: JournalStore) -> None:
    lease = store.acquire("run-a", "alice", LEASE)
    recs = store.append(
        lease.epoch,
        [
            Append(
                "run-a", "EffectStarted", data={"n": 1, "s": "x"}, case="case-1", effect_key="k1"
            ),
            Append("run-a", "Marker"),
            Append("run-a", "Marker", data=[None]),
        ],
    )
    first, second, third = (r.body() for r in recs)
    assert first == Body(
        run="run-a",
        seq=1,
        epoch=lease.epoch,
        kind="EffectStarted",
        case="case-1",
        effect_key="k1",
        data={"n": 1, "s": "x"},
        has_data=True,
    )
    assert second == Body(run="run-a", seq=2, epoch=lease.epoch, kind="Marker")
    assert third == Body(
        run="run-a", seq=3, epoch=lease.epoch, kind="Marker", data=[None], has_data=True
    )
    # raw is the canonical encoding of the body: one record, one spelling.
    for r in recs:
        assert r.raw == r.body().encode()
    assert b'"data"' not in recs[1].raw
    assert b'"data":[null]' in recs[2].raw
    # "data": null is refused (optional fields are absent, never null), and nothing is written.
    with pytest.raises(MalformedError, match="null"):
        store.append(lease.epoch, [note("run-a"), Append("run-a", "Marker", data=None)])
    assert store.head("run-a").seq == 3


def test_a_sound_chain_verifies(store: JournalStore) -> None:
    lease = store.acquire("run-a", "alice", LEASE)
    for i in range(4):
        store.append(lease.epoch, [note("run-a", i)])
    assert store.verify("run-a") == store.head("run-a").hash
    assert store.head("run-a").seq == 4


def test_verify_pages_past_a_thousand_records(store: JournalStore) -> None:
    n = 1003
    store.append(1, [note("run-a", i) for i in range(n)])
    head = store.head("run-a")
    assert head.seq == n
    assert store.verify("run-a") == head.hash
    assert seqs(store.read_page("run-a", 1000, 1000)) == [1000, 1001, 1002, 1003]
    assert len(store.read("run-a")) == n


def test_read_starts_where_it_is_told(store: JournalStore) -> None:
    store.append(1, [note("run-a", i) for i in range(4)])
    assert seqs(store.read("run-a", 3)) == [3, 4]
    assert seqs(store.read("run-a")) == [1, 2, 3, 4]
    assert store.read("run-a", 5) == []
    assert seqs(store.read_page("run-a", 1, 2)) == [1, 2]
    assert seqs(store.read_page("run-a", 2, 2)) == [2, 3]
    assert seqs(store.read_page("run-a", 3, 10)) == [3, 4]
    assert store.read_page("run-a", 5, 10) == []
    assert store.read_page("run-a", 1, 4) == store.read("run-a")


# =============================================================================================
# recent runs: a total order (updated_at DESC, run DESC), paged strictly after a cursor
# =============================================================================================


def write_activity(store: JournalStore, clock: FakeClock) -> list[tuple[str, int]]:
    """Runs appended at three clock readings, with ties; returns the expected listing."""
    # Mixed case and punctuation: Python (and COLLATE "C") order them by code point, which a
    # locale collation would not.
    for run in ("run-a", "run-B", "run_c", "run.d"):
        store.append(1, [note(run)])
    clock.advance(5)
    for run in ("run-e", "run-f"):
        store.append(1, [note(run)])
    clock.advance(5)
    store.append(1, [note("run-a", "again")])  # the last append moves run-a to the front
    expected = [
        ("run-a", T0 + 10),
        ("run-f", T0 + 5),
        ("run-e", T0 + 5),
        ("run_c", T0),
        ("run.d", T0),
        ("run-B", T0),
    ]
    assert expected == sorted(expected, key=lambda row: (row[1], row[0]), reverse=True)
    return expected


def test_recent_runs_are_in_a_total_order(store: JournalStore, clock: FakeClock) -> None:
    expected = write_activity(store, clock)
    assert store.recent_runs(None, 100) == expected
    assert store.recent_runs(None, 2) == expected[:2]
    assert store.recent_runs(None, 1) == expected[:1]


def test_recent_runs_page_strictly_after_the_cursor(store: JournalStore, clock: FakeClock) -> None:
    expected = write_activity(store, clock)
    for size in (1, 2, 4):
        rebuilt: list[tuple[str, int]] = []
        cursor: tuple[int, str] | None = None
        for _ in range(len(expected) + 1):
            page = store.recent_runs(cursor, size)
            assert len(page) <= size
            if not page:
                break
            rebuilt += page
            run, updated_at = page[-1]
            cursor = (updated_at, run)  # the cursor is (time, run); a row is (run, time)
        assert rebuilt == expected, f"pages of {size}"
    # A cursor inside a tie resumes after it, by run ID.
    assert store.recent_runs((T0, "run.d"), 10) == [("run-B", T0)]
    assert store.recent_runs((T0 + 5, "run-f"), 2) == [("run-e", T0 + 5), ("run_c", T0)]
    # A cursor that names no row still divides the order.
    assert store.recent_runs((T0 + 5, "run-ez"), 10) == expected[2:]
    assert store.recent_runs((T0 + 100, "zzz"), 10) == expected
    assert store.recent_runs((T0, "run-B"), 10) == []


def test_runs_lists_every_run_with_records_by_id(store: JournalStore) -> None:
    ids = ["run-b", "run-A", "run_c", "run.d"]
    for run in ids:
        store.append(1, [note(run)])
    store.acquire("run-leased-only", "alice", LEASE)
    store.request_cancel("run-asked-only", "operator", "no records")
    want = sorted(ids)
    assert store.runs(None, 100) == want
    assert store.runs(None, 2) == want[:2]
    assert store.runs(want[1], 2) == want[2:4]
    assert store.runs("run-B", 10) == [r for r in want if r > "run-B"]
    assert store.runs(want[-1], 10) == []


# =============================================================================================
# exactly-once: one EffectStarted per (run, effect key), by a unique key
# =============================================================================================


def test_a_second_start_for_one_effect_is_rejected(store: JournalStore) -> None:
    lease = store.acquire("run-a", "alice", LEASE)
    store.append(lease.epoch, [started("run-a", "k")])
    head = store.head("run-a")
    with pytest.raises(errors.DuplicateEffectError) as e:
        store.append(lease.epoch, [started("run-a", "k")])
    assert (e.value.run, e.value.effect_key) == ("run-a", "k")
    assert store.head("run-a") == head
    # Another key in the same run is another effect.
    store.append(lease.epoch, [started("run-a", "k2")])
    assert store.head("run-a").seq == 2


def test_the_same_effect_key_in_another_run_is_allowed(store: JournalStore) -> None:
    store.append(1, [started("run-a", "k")])
    store.append(1, [started("run-b", "k")])
    assert store.head("run-a").seq == 1
    assert store.head("run-b").seq == 1


def test_a_duplicate_start_inside_one_batch_writes_nothing(store: JournalStore) -> None:
    lease = store.acquire("run-a", "alice", LEASE)
    with pytest.raises(errors.DuplicateEffectError) as e:
        store.append(lease.epoch, [note("run-a"), started("run-a", "k"), started("run-a", "k")])
    assert e.value.effect_key == "k"
    assert store.head("run-a") == Head.genesis()
    assert store.read("run-a") == []
    # The refused batch claimed nothing: the key is still free.
    (rec,) = store.append(lease.epoch, [started("run-a", "k")])
    assert rec.seq == 1


def test_only_keyed_effect_started_records_are_constrained(store: JournalStore) -> None:
    store.append(1, [started("run-a", "k")])
    # Other kinds may repeat a key (the done/failed records of the effect) ...
    store.append(1, [Append("run-a", "EffectDone", effect_key="k")])
    store.append(1, [Append("run-a", "EffectDone", effect_key="k")])
    # ... and EffectStarted without a key is not an exactly-once record.
    store.append(1, [Append("run-a", "EffectStarted"), Append("run-a", "EffectStarted")])
    assert store.head("run-a").seq == 5


# =============================================================================================
# fencing: leases, epochs, acquire / renew / release
# =============================================================================================


def test_the_first_lease_of_a_new_run_has_epoch_one(store: JournalStore) -> None:
    lease = store.acquire("run-a", "alice", 10)
    assert lease == Lease("run-a", "alice", 1, T0 + 10)


def test_a_stale_epoch_is_fenced(store: JournalStore, clock: FakeClock) -> None:
    a = store.acquire("run-a", "alice", 1)
    store.append(a.epoch, [note("run-a")])
    clock.advance(1)
    b = store.acquire("run-a", "bob", LEASE)
    assert b.epoch > a.epoch
    head = store.head("run-a")
    with pytest.raises(errors.FencedError) as e:
        store.append(a.epoch, [note("run-a")])
    assert (e.value.run, e.value.held, e.value.current) == ("run-a", a.epoch, b.epoch)
    assert store.head("run-a") == head
    (rec,) = store.append(b.epoch, [note("run-a")])
    assert rec.seq == 2
    assert rec.body().epoch == b.epoch


def test_a_fabricated_future_epoch_is_fenced(store: JournalStore) -> None:
    lease = store.acquire("run-a", "alice", LEASE)
    with pytest.raises(errors.FencedError) as e:
        store.append(lease.epoch + 1, [note("run-a")])
    assert (e.value.held, e.value.current) == (lease.epoch + 1, lease.epoch)
    assert store.head("run-a") == Head.genesis()
    assert store.recent_runs(None, 10) == []


def test_an_expired_lease_still_fences_by_its_epoch(store: JournalStore, clock: FakeClock) -> None:
    # Only a takeover shuts the old holder out; until then its epoch is still the lease's.
    a = store.acquire("run-a", "alice", 1)
    clock.advance(5)
    store.append(a.epoch, [note("run-a")])
    with pytest.raises(errors.FencedError):
        store.append(a.epoch + 1, [note("run-a")])
    assert store.head("run-a").seq == 1


def test_a_live_lease_is_not_stolen(store: JournalStore, clock: FakeClock) -> None:
    a = store.acquire("run-a", "alice", 10)
    clock.advance(3)
    with pytest.raises(errors.LeaseHeldError) as e:
        store.acquire("run-a", "bob", LEASE)
    assert (e.value.run, e.value.owner, e.value.epoch, e.value.remaining) == (
        "run-a",
        "alice",
        a.epoch,
        7,
    )
    # The refused claim changed nothing: alice still writes.
    store.append(a.epoch, [note("run-a")])


def test_a_takeover_advances_the_epoch(store: JournalStore, clock: FakeClock) -> None:
    a = store.acquire("run-a", "alice", 1)
    clock.advance(1)
    b = store.acquire("run-a", "bob", LEASE)
    assert b.epoch > a.epoch
    assert b == Lease("run-a", "bob", b.epoch, clock.now + LEASE)


def test_acquire_claims_and_never_renews(store: JournalStore, clock: FakeClock) -> None:
    a = store.acquire("run-a", "alice", 10)
    with pytest.raises(errors.LeaseHeldError) as e:
        store.acquire("run-a", "alice", 10)
    assert (e.value.owner, e.value.epoch) == ("alice", a.epoch)
    # Taking back one's own expired lease is a claim too: it bumps, fencing the old epoch.
    clock.advance(10)
    again = store.acquire("run-a", "alice", 10)
    assert again.epoch > a.epoch
    with pytest.raises(errors.FencedError):
        store.append(a.epoch, [note("run-a")])
    store.append(again.epoch, [note("run-a")])


def test_a_renewal_extends_only_what_is_still_held(store: JournalStore, clock: FakeClock) -> None:
    a = store.acquire("run-a", "alice", 10)
    clock.advance(4)
    renewed = store.renew("run-a", "alice", a.epoch, 10)
    assert renewed == Lease("run-a", "alice", a.epoch, T0 + 14)
    clock.advance(6)  # the original expiry has passed; the renewed one has not
    with pytest.raises(errors.LeaseHeldError):
        store.acquire("run-a", "bob", LEASE)
    store.append(a.epoch, [note("run-a")])  # the epoch is kept: no self-fencing
    with pytest.raises(errors.LeaseNotHeldError) as e:
        store.renew("run-a", "bob", a.epoch, 10)
    assert (e.value.run, e.value.owner, e.value.epoch) == ("run-a", "bob", a.epoch)
    with pytest.raises(errors.LeaseNotHeldError):
        store.renew("run-a", "alice", a.epoch + 1, 10)
    store.release("run-a", a.epoch)
    with pytest.raises(errors.LeaseNotHeldError):
        store.renew("run-a", "alice", a.epoch, 10)
    clock.advance(100)
    assert "run-a" not in store.abandoned_runs(100)
    # The refused renewal did not reclaim the released lease.
    assert store.acquire("run-a", "bob", LEASE).epoch > a.epoch


def test_a_refused_renewal_writes_nothing(store: JournalStore, clock: FakeClock) -> None:
    a = store.acquire("run-a", "alice", 10)
    clock.advance(5)
    for owner, epoch in (("bob", a.epoch), ("alice", a.epoch + 1)):
        with pytest.raises(errors.LeaseNotHeldError):
            store.renew("run-a", owner, epoch, 1000)
    with pytest.raises(INVALID):
        store.renew("run-a", "alice", a.epoch, 0)
    clock.advance(5)  # now == expires_at: expired (inclusive), and renew never reclaims
    with pytest.raises(errors.LeaseNotHeldError):
        store.renew("run-a", "alice", a.epoch, 1000)
    # None of the refusals extended, reclaimed or bumped the lease (a claim bumps by one).
    b = store.acquire("run-a", "bob", LEASE)
    assert b.epoch == a.epoch + 1


def test_renewing_a_run_without_a_lease_is_refused(store: JournalStore) -> None:
    with pytest.raises(errors.LeaseNotHeldError):
        store.renew("run-a", "alice", 1, 10)
    assert store.abandoned_runs(10) == []
    assert store.acquire("run-a", "alice", 10).epoch == 1


def test_a_stale_epoch_cannot_seal(store: JournalStore) -> None:
    lease = store.acquire("run-a", "alice", LEASE)
    store.append(lease.epoch, [note("run-a")])
    with pytest.raises(errors.FencedError):
        store.seal("run-a", lease.epoch + 7, "succeeded")
    assert store.sealed("run-a") is None
    assert store.checkpoint().size == 0
    s = store.seal("run-a", lease.epoch, "succeeded")
    assert s == Seal("run-a", 0, store.head("run-a").hash, "succeeded")


def test_a_released_lease_is_free_at_once(store: JournalStore) -> None:
    a = store.acquire("run-a", "alice", LEASE)
    store.release("run-a", a.epoch)
    b = store.acquire("run-a", "bob", LEASE)  # no waiting for the expiry
    assert b.epoch > a.epoch
    store.release("run-a", a.epoch)  # a second release of the old epoch: no error, no effect
    with pytest.raises(errors.LeaseHeldError):
        store.acquire("run-a", "carol", LEASE)
    store.release("run-a", b.epoch)
    store.release("run-a", b.epoch)  # idempotent
    assert store.acquire("run-a", "carol", LEASE).epoch > b.epoch


def test_releasing_a_run_without_a_lease_does_nothing(store: JournalStore) -> None:
    store.release("run-a", 5)
    assert store.acquire("run-a", "alice", LEASE).epoch == 1


def test_a_lease_starts_past_every_epoch_the_history_records(store: JournalStore) -> None:
    # No lease row: any epoch is accepted (the restore path replays the original epochs) ...
    store.append(7, [note("run-a")])
    store.append(3, [note("run-a")])
    assert [r.body().epoch for r in store.read("run-a")] == [7, 3]
    # ... and the first claim starts past the highest of them, not at 1 nor after the last.
    lease = store.acquire("run-a", "alice", LEASE)
    assert lease.epoch == 8
    for old in (3, 7):
        with pytest.raises(errors.FencedError):
            store.append(old, [note("run-a")])


def test_fencing_applies_to_leased_runs_only(store: JournalStore, clock: FakeClock) -> None:
    # The rule of store.api "Leases and fencing", both halves, for append and seal alike.
    # A run never leased has nothing to fence against: any epoch, even going backwards.
    store.append(5, [note("run-a")])
    store.append(2, [note("run-a")])
    assert store.seal("run-a", 1, "succeeded").position == 0
    assert [r.body().epoch for r in store.read("run-a")] == [5, 2, 1]
    store.append(9, [note("run-b")])
    # Once leased, exactly the lease's epoch: while live, after it lapses, after a release.
    lease = store.acquire("run-b", "alice", 1)
    assert lease.epoch == 10
    for state in ("live", "lapsed", "released"):
        if state == "lapsed":
            clock.advance(1)
        if state == "released":
            store.release("run-b", lease.epoch)
        for epoch in (1, 9, lease.epoch + 1):
            with pytest.raises(errors.FencedError) as e:
                store.append(epoch, [note("run-b")])
            assert (e.value.held, e.value.current) == (epoch, lease.epoch), state
            with pytest.raises(errors.FencedError):
                store.seal("run-b", epoch, "succeeded")
        (rec,) = store.append(lease.epoch, [note("run-b")])
        assert rec.body().epoch == lease.epoch
    assert store.sealed("run-b") is None
    assert store.seal("run-b", lease.epoch, "succeeded").position == 1


def test_a_release_does_not_forget_the_epoch(store: JournalStore, clock: FakeClock) -> None:
    a = store.acquire("run-a", "alice", 1)
    clock.advance(1)
    b = store.acquire("run-a", "bob", LEASE)
    store.release("run-a", b.epoch)
    with pytest.raises(errors.FencedError):
        store.append(a.epoch, [note("run-a")])
    c = store.acquire("run-a", "carol", LEASE)
    assert c.epoch > b.epoch > a.epoch


def test_a_fenced_caller_cannot_release_the_new_owners_lease(
    store: JournalStore, clock: FakeClock
) -> None:
    a = store.acquire("run-a", "alice", 1)
    clock.advance(1)
    b = store.acquire("run-a", "bob", LEASE)
    store.release("run-a", a.epoch)  # returns without error, does nothing
    with pytest.raises(errors.LeaseHeldError) as e:
        store.acquire("run-a", "carol", LEASE)
    assert (e.value.owner, e.value.epoch) == ("bob", b.epoch)
    store.append(b.epoch, [note("run-a")])


def test_the_expiry_boundary_is_inclusive(store: JournalStore, clock: FakeClock) -> None:
    a = store.acquire("run-a", "alice", 10)
    assert a.expires_at == T0 + 10
    clock.advance(9)
    with pytest.raises(errors.LeaseHeldError) as e:
        store.acquire("run-a", "bob", LEASE)
    assert e.value.remaining == 1
    assert store.abandoned_runs(10) == []
    clock.advance(1)  # now == expires_at: already expired
    assert store.abandoned_runs(10) == ["run-a"]
    with pytest.raises(errors.LeaseNotHeldError):
        store.renew("run-a", "alice", a.epoch, 10)
    b = store.acquire("run-a", "bob", LEASE)
    assert b.epoch > a.epoch


BAD_TTLS: list[Any] = [0, -1, 0.5, 1.5, "5", None, 2**64, MAX_INT63, MAX_INT63 - T0 + 1]


@pytest.mark.parametrize(
    "ttl",
    BAD_TTLS,
    ids=["zero", "negative", "half", "fractional", "str", "none", "2^64", "int63", "overflow"],
)
def test_a_bad_ttl_is_refused(store: JournalStore, clock: FakeClock, ttl: Any) -> None:
    with pytest.raises(INVALID):
        store.acquire("run-a", "alice", ttl)
    a = store.acquire("run-a", "alice", 10)
    assert a.epoch == 1  # the refused acquire wrote nothing
    with pytest.raises(INVALID):
        store.renew("run-a", "alice", a.epoch, ttl)
    clock.advance(10)  # the refused renewal did not extend the lease
    assert store.acquire("run-a", "bob", LEASE).epoch == 2


def test_the_largest_ttl_that_fits_is_accepted(store: JournalStore) -> None:
    lease = store.acquire("run-a", "alice", MAX_INT63 - T0)
    assert lease.expires_at == MAX_INT63
    with pytest.raises(errors.LeaseHeldError):
        store.acquire("run-a", "bob", 1)


def test_the_default_clock_expires_leases(stores: StoreFactory) -> None:
    s = stores.open(fake_clock=False)
    # Start early in a second, so that the 1 s lease cannot lapse before bob's first try.
    while time.time() % 1 > 0.5:
        time.sleep(0.05)
    a = s.acquire("run-a", "alice", 1)
    assert abs(a.expires_at - (int(time.time()) + 1)) <= 1
    with pytest.raises(errors.LeaseHeldError):
        s.acquire("run-a", "bob", 1)
    deadline = time.monotonic() + 3
    while True:
        time.sleep(0.1)
        try:
            b = s.acquire("run-a", "bob", 1)
            break
        except errors.LeaseHeldError:
            if time.monotonic() > deadline:
                raise
    assert b.epoch > a.epoch


# =============================================================================================
# atomicity: a batch belongs to one run, and a refused batch writes nothing
# =============================================================================================


def test_a_batch_spans_one_run(store: JournalStore) -> None:
    lease = store.acquire("run-a", "alice", LEASE)
    with pytest.raises(INVALID):
        store.append(lease.epoch, [note("run-a"), note("run-b")])
    with pytest.raises(INVALID):
        store.append(1, [note("run-c"), note("run-d")])
    for run in ("run-a", "run-b", "run-c", "run-d"):
        assert store.read(run) == []
        assert store.head(run) == Head.genesis()
    assert store.runs(None, 10) == []


def _bad_tail(kind: str) -> Append:
    return {
        "duplicate": started("run-a", "k"),
        "oversized": note("run-a", "x" * MAX_RECORD_SIZE),
        "bad-kind": Append("run-a", "not a kind"),
        "float": note("run-a", {"x": 0.5}),
        "other-run": note("run-b"),
    }[kind]


@pytest.mark.parametrize("failure", ["duplicate", "oversized", "bad-kind", "float", "other-run"])
def test_a_rejected_batch_writes_nothing(
    store: JournalStore, clock: FakeClock, failure: str
) -> None:
    lease = store.acquire("run-a", "alice", LEASE)
    store.append(lease.epoch, [started("run-a", "k", case="case-1")])
    before = store.read("run-a")
    head = store.head("run-a")
    clock.advance(10)
    batch = [
        note("run-a", case="case-2"),
        concluded("run-a", "failed"),
        started("run-a", "k2"),
        _bad_tail(failure),
    ]
    with pytest.raises(errors.DuplicateEffectError if failure == "duplicate" else INVALID):
        store.append(lease.epoch, batch)
    # No records, no case rows, no outcome row, no activity, no effect key.
    assert store.read("run-a") == before
    assert store.head("run-a") == head
    assert store.read("run-b") == []
    assert store.case_history("case-2", 10) == []
    assert len(store.case_history("case-1", 10)) == 1
    assert store.count_by_outcome("failed") == 0
    assert store.runs_by_outcome("failed", 10) == []
    assert store.recent_runs(None, 10) == [("run-a", T0)]
    assert store.runs(None, 10) == ["run-a"]
    (rec,) = store.append(lease.epoch, [started("run-a", "k2")])
    assert rec.seq == 2


# =============================================================================================
# seal: first seal wins, sealed runs take no more records, fence before seal
# =============================================================================================


def test_a_seal_appends_the_seal_record_whose_hash_is_the_head(store: JournalStore) -> None:
    lease = store.acquire("run-a", "alice", LEASE)
    (first,) = store.append(lease.epoch, [note("run-a")])
    s = store.seal("run-a", lease.epoch, "succeeded")
    seal_rec = store.read("run-a", 2)
    assert len(seal_rec) == 1 and store.head("run-a") == Head(2, seal_rec[0].hash)
    assert s.head == seal_rec[0].hash and store.sealed("run-a") == s
    assert seal_rec[0].raw == seal_body("run-a", 2, lease.epoch, "succeeded").encode()
    assert seal_rec[0].prev_hash == first.hash and seal_rec[0].signature is None
    assert seal_outcome(seal_rec[0].body()) == "succeeded"
    assert store.verify("run-a") == s.head
    # The log's leaf is the seal record's hash: the checkpoint covers the outcome.
    inc = store.inclusion_proof("run-a")
    assert inc is not None and inc.head == seal_rec[0].hash
    # A re-seal writes nothing more.
    assert store.seal("run-a", lease.epoch, "succeeded").already
    assert store.head("run-a").seq == 2


def test_the_seal_record_kind_is_reserved(store: JournalStore) -> None:
    lease = store.acquire("run-a", "alice", LEASE)
    store.append(lease.epoch, [note("run-a")])
    for batch in (
        [Append("run-a", KIND_RUN_SEALED, {"outcome": "succeeded"})],
        [note("run-a"), Append("run-a", KIND_RUN_SEALED)],
    ):
        with pytest.raises(UsageError, match="reserved"):
            store.append(lease.epoch, batch)
    assert store.head("run-a").seq == 1 and store.sealed("run-a") is None


def test_the_seal_record_is_signed_like_any_record(stores: StoreFactory) -> None:
    signer = record_signer()
    s = stores.open(record_signer=signer)
    lease = s.acquire("run-a", "alice", LEASE)
    s.append(lease.epoch, [note("run-a")])
    sealed = s.seal("run-a", lease.epoch, "succeeded")
    (rec,) = s.read("run-a", 2)
    assert rec.signature is not None and rec.hash == sealed.head
    assert verify_record_signature(rec.signature, rec.hash, [signer.verifier()])
    # The restore path: the given signature (or none) instead of the handle's signer.
    given = RecordSignature("other.example", 7, b"x" * 64)
    s.append(1, [note("run-b")])
    s.seal("run-b", 1, "failed", signatures=[given])
    assert s.read("run-b", 2)[0].signature == given
    s.append(1, [note("run-c")])
    s.seal("run-c", 1, "failed", signatures=[None])
    assert s.read("run-c", 2)[0].signature is None
    with pytest.raises(UsageError):
        s.seal("run-d", 1, "failed", signatures=[])


def test_a_sealed_run_refuses_appends(store: JournalStore) -> None:
    lease = store.acquire("run-a", "alice", LEASE)
    store.append(lease.epoch, [note("run-a"), concluded("run-a", "succeeded")])
    s = store.seal("run-a", lease.epoch, "succeeded")
    head = store.head("run-a")
    assert s.head == head.hash
    with pytest.raises(errors.RunSealedError) as e:
        store.append(lease.epoch, [note("run-a")])
    assert (e.value.run, e.value.outcome) == ("run-a", "succeeded")
    with pytest.raises(errors.RunSealedError):
        store.append(lease.epoch, [started("run-a", "k"), note("run-a")])
    assert store.head("run-a") == head
    assert store.verify("run-a") == s.head


def test_the_fence_is_checked_before_the_seal(store: JournalStore) -> None:
    a = store.acquire("run-a", "alice", LEASE)
    store.append(a.epoch, [note("run-a")])
    store.seal("run-a", a.epoch, "succeeded")
    with pytest.raises(errors.FencedError):
        store.append(a.epoch + 1, [note("run-a")])
    store.release("run-a", a.epoch)
    b = store.acquire("run-a", "bob", LEASE)
    with pytest.raises(errors.FencedError):
        store.append(a.epoch, [note("run-a")])
    with pytest.raises(errors.RunSealedError):
        store.append(b.epoch, [note("run-a")])


def test_a_reseal_changes_nothing(store: JournalStore) -> None:
    a = store.acquire("run-a", "alice", LEASE)
    store.append(a.epoch, [note("run-a"), note("run-a")])
    s = store.seal("run-a", a.epoch, "succeeded")
    assert s == Seal("run-a", 0, store.head("run-a").hash, "succeeded")
    other = seal_run(store, "run-b")
    assert other.position == 1
    assert not s.already and not other.already
    cp = store.checkpoint()
    head = store.head("run-a")
    # With the sealed outcome: idempotent, and it says so.
    again = store.seal("run-a", a.epoch, "succeeded")
    assert again == s and again.already  # same head, same position, same outcome
    # With another outcome: refused, naming both; the first seal stands.
    with pytest.raises(errors.SealConflictError) as e:
        store.seal("run-a", a.epoch, "quarantined")
    assert isinstance(e.value, errors.RunSealedError)
    assert (e.value.run, e.value.outcome, e.value.requested) == (
        "run-a",
        "succeeded",
        "quarantined",
    )
    assert "run run-a is sealed (succeeded)" in str(e.value) and "quarantined" in str(e.value)
    stored = store.sealed("run-a")
    assert stored == s and stored is not None and not stored.already
    assert store.head("run-a") == head
    assert store.checkpoint() == cp
    assert [x.run for x in store.seals()] == ["run-a", "run-b"]
    # A re-seal is fenced like a seal, before the outcome is compared.
    store.release("run-a", a.epoch)
    b = store.acquire("run-a", "bob", LEASE)
    for outcome in ("succeeded", "failed"):
        with pytest.raises(errors.FencedError):
            store.seal("run-a", a.epoch, outcome)
    assert store.seal("run-a", b.epoch, "succeeded").already
    with pytest.raises(errors.SealConflictError):
        store.seal("run-a", b.epoch, "failed")
    assert store.checkpoint() == cp


def test_an_empty_run_cannot_be_sealed(store: JournalStore) -> None:
    with pytest.raises(TlogError):
        store.seal("run-a", 1, "succeeded")  # no lease row, no records
    lease = store.acquire("run-a", "alice", LEASE)
    with pytest.raises(TlogError):
        store.seal("run-a", lease.epoch, "succeeded")
    assert store.sealed("run-a") is None
    assert store.seals() == []
    assert store.checkpoint().size == 0
    with pytest.raises(errors.NotSealedError, match="run run-a is not sealed: it has no records"):
        store.inclusion_proof("run-a")  # leased, but no records: unknown to the log
    store.append(lease.epoch, [note("run-a")])
    with pytest.raises(errors.NotSealedError, match="run run-a is not sealed yet") as e:
        store.inclusion_proof("run-a")
    assert (e.value.run, e.value.reason) == ("run-a", "unsealed")
    assert store.seal("run-a", lease.epoch, "succeeded").position == 0


def test_a_seal_keeps_the_lease_and_the_outcome_index(store: JournalStore) -> None:
    lease = store.acquire("run-a", "alice", LEASE)
    store.append(lease.epoch, [note("run-a")])
    store.seal("run-a", lease.epoch, "succeeded")
    with pytest.raises(errors.LeaseHeldError):
        store.acquire("run-a", "bob", LEASE)
    # The seal record is the run's last conclusion, the one the log signs: it is indexed.
    assert store.count_by_outcome("succeeded") == 1
    assert store.runs_by_outcome("succeeded", 10) == ["run-a"]


# =============================================================================================
# merkle log: dense positions, stored hashes, proofs against every kept checkpoint
# =============================================================================================

N_SEALED = 6


def seal_many(store: JournalStore, n: int = N_SEALED) -> tuple[list[str], list[Checkpoint]]:
    """Seal runs run-1..run-n, one checkpoint after each; returns the runs and checkpoints."""
    runs: list[str] = []
    kept: list[Checkpoint] = []
    for k in range(1, n + 1):
        run = f"run-{k}"
        s = seal_run(store, run, records=k)
        assert s.position == k - 1
        runs.append(run)
        kept.append(store.checkpoint())
    return runs, kept


def test_the_log_only_grows(store: JournalStore) -> None:
    runs, kept = seal_many(store)
    assert [cp.size for cp in kept] == list(range(1, N_SEALED + 1))
    assert all(cp.origin == store.origin for cp in kept)
    latest = store.checkpoint()
    assert latest == kept[-1]
    # Independent oracle: the RFC 6962 roots of the sealed heads, in seal order.
    heads = [store.head(run).hash for run in runs]
    leaves = [merkle.leaf_hash(h) for h in heads]
    for cp in kept:
        assert cp.root == merkle.root(leaves[: cp.size])
        assert store.tree_root(cp.size) == cp.root
    for i, run in enumerate(runs):
        inc = store.inclusion_proof(run)
        assert inc is not None
        assert (inc.run, inc.index, inc.size, inc.head) == (run, i, N_SEALED, heads[i])
        merkle.verify_inclusion(
            inc.index, inc.size, merkle.leaf_hash(inc.head), inc.proof, latest.root
        )
    for cp in kept:
        proof = store.consistency_proof(cp.size)
        merkle.verify_consistency(cp.size, latest.size, cp.root, latest.root, proof)


def test_proofs_at_an_earlier_size_verify(store: JournalStore) -> None:
    runs, kept = seal_many(store)
    for cp in kept:
        for i, run in enumerate(runs):
            if i >= cp.size:
                with pytest.raises(errors.NotSealedError) as e:
                    store.inclusion_proof(run, cp.size)
                assert (e.value.reason, e.value.position, e.value.size) == ("beyond", i, cp.size)
                continue
            inc = store.inclusion_proof(run, cp.size)
            assert (inc.index, inc.size) == (i, cp.size)
            merkle.verify_inclusion(i, cp.size, merkle.leaf_hash(inc.head), inc.proof, cp.root)
        for new in kept:
            if cp.size <= new.size:
                proof = store.consistency_proof(cp.size, new.size)
                merkle.verify_consistency(cp.size, new.size, cp.root, new.root, proof)


def test_a_proof_from_a_wrong_size_does_not_verify(store: JournalStore) -> None:
    # Honesty check of the oracle: a proof verifies only against its own sizes and roots.
    _, kept = seal_many(store, 5)
    proof = store.consistency_proof(3)
    with pytest.raises(ProofError):
        merkle.verify_consistency(2, 5, kept[1].root, kept[4].root, proof)
    with pytest.raises(ProofError):
        merkle.verify_consistency(3, 5, kept[1].root, kept[4].root, proof)


def test_consistency_proofs_have_bounds(store: JournalStore) -> None:
    assert store.consistency_proof(0) == []
    with pytest.raises(TlogError):
        store.consistency_proof(1)  # beyond an empty log: an error, never []
    seal_many(store, 3)
    assert store.consistency_proof(0) == []
    assert store.consistency_proof(3) == []
    assert store.consistency_proof(0, 2) == []
    assert store.consistency_proof(2, 2) == []
    for old, new in ((4, None), (3, 2), (1, 4), (-1, None)):
        with pytest.raises(TlogError):
            store.consistency_proof(old, new)
    with pytest.raises(TlogError):
        store.tree_root(4)


def test_an_empty_log_has_the_empty_root(store: JournalStore, stores: StoreFactory) -> None:
    cp = store.checkpoint()
    assert cp == Checkpoint(store.origin, 0, EMPTY_ROOT)
    assert EMPTY_ROOT.hex().startswith("e3b0c442")
    assert store.tree_root(0) == EMPTY_ROOT
    signed = open_checkpoint(store.sign_checkpoint(), [stores.log_verifier()])
    assert signed.checkpoint == cp


def test_seals_list_the_log_in_order(store: JournalStore) -> None:
    sealed = [seal_run(store, f"run-{k}", outcome=f"o{k}") for k in range(5)]
    assert [s.position for s in sealed] == [0, 1, 2, 3, 4]
    assert store.seals() == sealed
    assert store.seals(1, 2) == sealed[2:4]
    assert store.seals(-1, 1) == sealed[:1]
    assert store.seals(4) == []
    for s in sealed:
        assert store.sealed(s.run) == s


# =============================================================================================
# signed checkpoints: the tenant's log key, kept notes, witness cosignatures
# =============================================================================================


def test_a_signed_checkpoint_verifies_with_the_tenant_log_key(stores: StoreFactory) -> None:
    s = stores.open("t1")
    seal_run(s, "run-a")
    seal_run(s, "run-b")
    signed = s.sign_checkpoint()
    v = stores.log_verifier("t1")
    assert (v.name, v.key_type) == (f"{ORIGIN}/t1", 0x01)
    opened = open_checkpoint(signed, [v])
    assert opened.checkpoint == s.checkpoint()
    assert opened.checkpoint.origin == f"{ORIGIN}/t1"
    assert [sig.name for sig in opened.note.sigs] == [v.name]
    assert opened.note.unverified == ()
    # Exactly three lines, no extension: the store's text is the canonical checkpoint.
    assert opened.note.text == opened.checkpoint.format()
    assert opened.note.text.count(b"\n") == 3
    # The same key under another tenant's name is another verifier.
    with pytest.raises(UnverifiedNoteError):
        open_checkpoint(signed, [stores.log_verifier("t2")])


def _set_line(text: bytes, index: int, line: bytes) -> bytes:
    lines = text.split(b"\n")
    lines[index] = line
    return b"\n".join(lines)


def _non_canonical_b64(text: bytes) -> bytes:
    # The last base64 digit of a 32-byte value carries 2 padding bits, which must be zero.
    alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    root = text.split(b"\n")[2]
    digit = alphabet.index(root[42:43]) | 1
    return _set_line(text, 2, root[:42] + alphabet[digit : digit + 1] + b"=")


STRICT_MUTATIONS: dict[str, Callable[[bytes], bytes]] = {
    "crlf": lambda t: t.replace(b"\n", b"\r\n"),
    "no-final-lf": lambda t: t[:-1],
    "empty-origin": lambda t: _set_line(t, 0, b""),
    "plus": lambda t: _set_line(t, 1, b"+2"),
    "leading-zero": lambda t: _set_line(t, 1, b"02"),
    "space": lambda t: _set_line(t, 1, b" 2"),
    "non-canonical-b64": _non_canonical_b64,
    "no-padding": lambda t: _set_line(t, 2, t.split(b"\n")[2].rstrip(b"=")),
    "31-byte-root": lambda t: _set_line(t, 2, base64.b64encode(bytes(31))),
    "33-byte-root": lambda t: _set_line(t, 2, base64.b64encode(bytes(33))),
}


@pytest.mark.parametrize("mutation", list(STRICT_MUTATIONS))
def test_the_checkpoint_text_is_strict(store: JournalStore, mutation: str) -> None:
    seal_run(store, "run-a")
    seal_run(store, "run-b")
    text, _ = parse_note(store.sign_checkpoint())
    assert text.split(b"\n")[1] == b"2"
    assert Checkpoint.parse(text).format() == text  # the note round-trips
    bad = STRICT_MUTATIONS[mutation](text)
    assert bad != text
    with pytest.raises(MalformedError):
        Checkpoint.parse(bad)


def test_published_checkpoints_are_kept_by_size(store: JournalStore, stores: StoreFactory) -> None:
    v = stores.log_verifier()
    assert store.published() == []
    n0 = store.sign_checkpoint()
    seal_run(store, "run-a")
    n1 = store.sign_checkpoint()
    seal_run(store, "run-b")
    seal_run(store, "run-c")
    n3 = store.sign_checkpoint()
    assert store.published() == [n0, n1, n3]
    assert [open_checkpoint(n, [v]).checkpoint.size for n in store.published()] == [0, 1, 3]


def test_signing_twice_at_one_size_keeps_one_note(store: JournalStore) -> None:
    seal_run(store, "run-a")
    first = store.sign_checkpoint()
    second = store.sign_checkpoint()
    assert second == first  # Ed25519 is deterministic and the text is the same
    assert store.published() == [first]


def witness(name: str, fill: int) -> CosignatureV1Signer:
    return CosignatureV1Signer(name, bytes([fill]) * 32, clock=lambda: T0)


def cosign(note_bytes: bytes, w: CosignatureV1Signer) -> bytes:
    text, _ = parse_note(note_bytes)
    return add_signatures(note_bytes, [Signature(w.name, w.key_id, w.sign(text))])


def test_cosignatures_are_merged_into_the_kept_checkpoint(
    store: JournalStore, stores: StoreFactory
) -> None:
    seal_run(store, "run-a")
    signed = store.sign_checkpoint()
    w1, w2 = witness("witness.example/w1", 7), witness("witness.example/w2", 9)
    keys = [format_vkey(w1.verifier()), format_vkey(w2.verifier())]
    merged = store.add_cosignatures(cosign(signed, w1), witness_keys=keys)
    log = stores.log_verifier()
    opened = open_note(merged, [log, w1.verifier()])
    assert {s.name for s in opened.sigs} == {log.name, w1.name}
    assert opened.text == parse_note(signed)[0]
    assert store.published() == [merged]
    # Nothing new to merge (a line kept already needs no key).
    assert store.add_cosignatures(cosign(signed, w1), witness_keys=[]) == merged
    # A second witness's copy (made from the original note) adds its line to the kept one.
    merged2 = store.add_cosignatures(cosign(signed, w2), witness_keys=keys)
    opened2 = open_note(merged2, [log, w1.verifier(), w2.verifier()])
    assert {s.name for s in opened2.sigs} == {log.name, w1.name, w2.name}
    assert store.published() == [merged2]


def test_a_cosigned_copy_of_another_text_is_refused(
    store: JournalStore, stores: StoreFactory
) -> None:
    seal_run(store, "run-a")
    signed = store.sign_checkpoint()
    seal_run(store, "run-b")  # size 2 is the current checkpoint, but it was never signed
    w = witness("witness.example/w1", 7)
    unsigned_current = store.checkpoint().format()
    forged_root = Checkpoint(store.origin, 1, bytes(32)).format()
    for text in (unsigned_current, forged_root):
        # Even signed with the log key itself: the store keeps only what it signed.
        foreign = sign_note(text, [stores.log_signer(), w])
        with pytest.raises(TlogError):
            store.add_cosignatures(foreign, witness_keys=[format_vkey(w.verifier())])
    assert store.published() == [signed]


def test_only_cosignatures_that_verify_under_a_declared_witness_are_kept(
    store: JournalStore, stores: StoreFactory
) -> None:
    # The store never keeps a line an export could not carry, or one that does not verify.
    seal_run(store, "run-a")
    signed = store.sign_checkpoint()
    text = parse_note(signed)[0]
    w1 = witness("witness.example/w1", 7)
    w1_vkey = format_vkey(w1.verifier())
    good = cosign(signed, w1)
    b64 = good[good.rindex("— witness.example/w1 ".encode()) :].split(b" ")[-1].rstrip(b"\n")
    sig = base64.b64decode(b64)
    for flip in (4, 12, len(sig) - 1):  # the timestamp, the signature's start and end
        bad_sig = sig[:flip] + bytes([sig[flip] ^ 1]) + sig[flip + 1 :]
        bad = good.replace(b64, base64.b64encode(bad_sig))
        with pytest.raises(InvalidSignatureError):
            store.add_cosignatures(bad, witness_keys=[w1_vkey])
        assert store.published() == [signed]
    # A line of a key nobody declared: refused, naming the flag that declares it.
    with pytest.raises(UsageError, match="--witness-key"):
        store.add_cosignatures(good, witness_keys=[])
    # A plain Ed25519 (0x01) signature by the witness's key: no export could carry it.
    plain = Ed25519Signer(w1.name, w1.seed)
    for declared in (w1_vkey, format_vkey(plain.verifier())):  # the 0x04 or the 0x01 vkey
        with pytest.raises(UsageError, match=r"plain Ed25519 signature \(type 0x01\)"):
            store.add_cosignatures(
                sign_note(text, [stores.log_signer(), plain]), witness_keys=[declared]
            )
    assert store.published() == [signed]
    # The witness's 0x01 vkey is read as its cosignature/v1 key: the good line is kept.
    merged = store.add_cosignatures(good, witness_keys=[format_vkey(plain.verifier())])
    assert merged == good and store.published() == [good]


# =============================================================================================
# outcome index: derived from RunConcluded and seal records, last conclusion wins, newest first
# =============================================================================================


def conclude(store: JournalStore, run: str, outcome: str, *, seal: bool) -> None:
    lease = store.acquire(run, "worker", LEASE)
    store.append(lease.epoch, [note(run), concluded(run, outcome)])
    if seal:
        store.seal(run, lease.epoch, outcome)
    store.release(run, lease.epoch)


def test_sealed_runs_are_findable_by_how_they_ended(store: JournalStore) -> None:
    # All at one clock reading: only the conclusion order can order them.
    conclude(store, "run-m", "quarantined", seal=True)
    conclude(store, "run-s", "succeeded", seal=True)
    conclude(store, "run-z", "quarantined", seal=True)
    conclude(store, "run-a", "quarantined", seal=True)
    assert store.runs_by_outcome("quarantined", 100) == ["run-a", "run-z", "run-m"]
    assert store.runs_by_outcome("quarantined", 1) == ["run-a"]
    assert store.runs_by_outcome("quarantined", 2) == ["run-a", "run-z"]
    assert store.count_by_outcome("quarantined") == 3
    assert store.runs_by_outcome("succeeded", 100) == ["run-s"]
    assert store.count_by_outcome("succeeded") == 1
    assert store.count_by_outcome("no-such-outcome") == 0
    assert store.runs_by_outcome("no-such-outcome", 10) == []


def test_the_outcome_index_follows_the_last_conclusion(store: JournalStore) -> None:
    conclude(store, "run-a", "failed", seal=False)  # a failed run is indexed without a seal
    conclude(store, "run-b", "succeeded", seal=True)
    assert store.runs_by_outcome("failed", 10) == ["run-a"]
    assert store.count_by_outcome("failed") == 1
    assert store.runs_by_outcome("succeeded", 10) == ["run-b"]
    conclude(store, "run-a", "succeeded", seal=True)  # resumed, then succeeded
    assert store.runs_by_outcome("failed", 10) == []
    assert store.count_by_outcome("failed") == 0
    # The re-conclusion took a fresh ordinal: run-a, first concluded before run-b, is now the
    # newest success.
    assert store.runs_by_outcome("succeeded", 10) == ["run-a", "run-b"]
    assert store.count_by_outcome("succeeded") == 2


def test_a_conclusion_without_an_outcome_is_not_indexed(store: JournalStore) -> None:
    store.append(1, [Append("run-a", "RunConcluded", data={"why": "no outcome"})])
    store.append(1, [Append("run-b", "Note", data={"outcome": "succeeded"})])
    assert store.count_by_outcome("succeeded") == 0


# =============================================================================================
# case history: the records of one case, in (run, seq) order
# =============================================================================================


def test_a_case_scan_selects_one_matter(store: JournalStore) -> None:
    store.append(
        1,
        [
            note("run-y", "y1", case="case-A"),
            note("run-y", "y2"),
            note("run-y", "y3", case="case-A"),
        ],
    )
    store.append(1, [note("run-b", "b1", case="case-B"), note("run-b", "b2", case="case-A")])
    history = store.case_history("case-A", 100)
    assert [(r.run, r.seq) for r in history] == [("run-b", 2), ("run-y", 1), ("run-y", 3)]
    assert all(r.body().case == "case-A" for r in history)
    by_key = {(r.run, r.seq): r for r in store.read("run-y") + store.read("run-b")}
    assert all(by_key[(r.run, r.seq)] == r for r in history)
    assert store.case_history("case-A", 1) == history[:1]
    assert [(r.run, r.seq) for r in store.case_history("case-B", 100)] == [("run-b", 1)]
    assert store.case_history("case-C", 100) == []


# =============================================================================================
# cancellation: unfenced, first asker wins
# =============================================================================================


def test_a_stop_request_needs_no_lease(store: JournalStore) -> None:
    lease = store.acquire("run-a", "alice", LEASE)
    assert store.request_cancel("run-a", "operator", "stop it") is True
    assert store.cancellation("run-a") == Cancellation("operator", "stop it", T0)
    assert store.cancellation("run-b") is None
    assert store.request_cancel("run-never-written", "operator", "pre-emptive") is True
    # The request touched neither the lease nor the chain.
    with pytest.raises(errors.LeaseHeldError):
        store.acquire("run-a", "bob", LEASE)
    store.append(lease.epoch, [note("run-a")])
    assert store.head("run-a").seq == 1


def test_the_first_asker_stays_on_the_record(store: JournalStore, clock: FakeClock) -> None:
    assert store.request_cancel("run-a", "alice", "first") is True
    clock.advance(5)
    assert store.request_cancel("run-a", "bob", "second") is False
    assert store.cancellation("run-a") == Cancellation("alice", "first", T0)


def test_the_actor_is_kept_as_the_label_given(store: JournalStore) -> None:
    # Provenance is the embedder's to put in the label (store.api, Cancellation): the store
    # keeps it byte for byte, and establishes nothing about it.
    for run, actor in (("run-a", "api:alice"), ("run-b", "operator:bob (on call)")):
        assert store.request_cancel(run, actor, "why") is True
        cancel = store.cancellation(run)
        assert cancel is not None and cancel.actor == actor


# =============================================================================================
# record signatures: with a record signer every record is signed; without, none is
# =============================================================================================


def test_records_carry_a_signature_that_verifies(stores: StoreFactory) -> None:
    signer = record_signer()
    s = stores.open(record_signer=signer)
    lease = s.acquire("run-a", "alice", LEASE)
    written = s.append(lease.epoch, [note("run-a", case="case-A"), started("run-a", "k")])
    written += s.append(lease.epoch, [note("run-a", case="case-A")])
    verifiers = [signer.verifier()]
    for group in (
        written,
        s.read("run-a"),
        s.read_page("run-a", 2, 5),
        s.case_history("case-A", 9),
    ):
        assert group
        for r in group:
            assert r.signature is not None
            assert (r.signature.name, r.signature.key_id) == (signer.name, signer.key_id)
            assert verify_record_signature(r.signature, r.hash, verifiers)
    assert s.read("run-a") == written  # the signature written is the one read
    sig0 = written[0].signature
    assert sig0 is not None
    assert not verify_record_signature(sig0, written[1].hash, verifiers)


def test_an_unsigned_store_writes_no_signatures(store: JournalStore) -> None:
    written = store.append(1, [note("run-a", case="case-A"), note("run-a")])
    assert all(r.signature is None for r in written)
    assert all(r.signature is None for r in store.read("run-a"))
    assert all(r.signature is None for r in store.case_history("case-A", 10))


# =============================================================================================
# abandoned runs: expired and never released, oldest expiry first
# =============================================================================================


def test_abandonment_names_the_dead_not_the_finished(store: JournalStore, clock: FakeClock) -> None:
    store.acquire("run-dead", "a", 1)
    finished = store.acquire("run-finished", "b", 1)
    store.acquire("run-alive", "c", LEASE)
    store.release("run-finished", finished.epoch)
    assert store.abandoned_runs(10) == []
    clock.advance(2)
    assert store.abandoned_runs(10) == ["run-dead"]


def test_abandoned_runs_come_oldest_expiry_first(store: JournalStore, clock: FakeClock) -> None:
    for run, ttl in (("run-a", 30), ("run-b", 10), ("run-c", 20)):
        lease = store.acquire(run, "worker", ttl)
        store.append(lease.epoch, [note(run)])
    clock.advance(15)
    assert store.abandoned_runs(10) == ["run-b"]
    clock.advance(16)
    assert store.abandoned_runs(10) == ["run-b", "run-c", "run-a"]
    assert store.abandoned_runs(2) == ["run-b", "run-c"]
    store.acquire("run-b", "rescuer", LEASE)  # a takeover is no longer abandoned
    assert store.abandoned_runs(10) == ["run-c", "run-a"]


def test_a_refused_renewal_does_not_make_a_run_abandoned(
    store: JournalStore, clock: FakeClock
) -> None:
    a = store.acquire("run-a", "alice", 5)
    store.release("run-a", a.epoch)
    with pytest.raises(errors.LeaseNotHeldError):
        store.renew("run-a", "alice", a.epoch, 5)
    with pytest.raises(errors.LeaseNotHeldError):
        store.renew("run-b", "bob", 1, 5)
    clock.advance(60)
    assert store.abandoned_runs(10) == []


# =============================================================================================
# tenants: a key prefix, not a filter
# =============================================================================================


def test_a_run_of_one_tenant_is_invisible_to_another(
    stores: StoreFactory, clock: FakeClock
) -> None:
    t1, t2 = stores.open("t1"), stores.open("t2")
    lease = t1.acquire("run-a", "alice", 1)
    t1.append(
        lease.epoch,
        [note("run-a", case="case-A"), started("run-a", "k"), concluded("run-a", "succeeded")],
    )
    t1.seal("run-a", lease.epoch, "succeeded")
    t1.sign_checkpoint()
    t1.request_cancel("run-a", "operator", "stop")
    clock.advance(5)
    assert t1.abandoned_runs(10) == ["run-a"]
    assert t2.read("run-a") == []
    assert t2.read_page("run-a", 1, 10) == []
    assert t2.head("run-a") == Head.genesis()
    assert t2.verify("run-a") == GENESIS
    assert t2.sealed("run-a") is None
    with pytest.raises(errors.NotSealedError, match="no records"):
        t2.inclusion_proof("run-a")
    assert t2.cancellation("run-a") is None
    assert t2.runs(None, 10) == []
    assert t2.recent_runs(None, 10) == []
    assert t2.runs_by_outcome("succeeded", 10) == []
    assert t2.count_by_outcome("succeeded") == 0
    assert t2.case_history("case-A", 10) == []
    assert t2.abandoned_runs(10) == []
    assert t2.seals() == []
    assert t2.checkpoint().size == 0
    assert t2.published() == []
    # The same run ID in t2 is another run: its own epochs, effects and seal state.
    l2 = t2.acquire("run-a", "bob", LEASE)
    assert l2.epoch == 1
    (rec,) = t2.append(l2.epoch, [started("run-a", "k")])
    assert rec.seq == 1
    assert t1.head("run-a").seq == 4  # three records and the seal record
    assert t2.request_cancel("run-a", "other", "also") is True


def test_each_tenant_has_its_own_dense_log(stores: StoreFactory) -> None:
    t1, t2 = stores.open("t1"), stores.open("t2")
    p1 = [seal_run(t1, "run-a").position]
    p2 = [seal_run(t2, "run-x").position]
    p1.append(seal_run(t1, "run-b").position)
    p2.append(seal_run(t2, "run-y").position)
    p1.append(seal_run(t1, "run-c").position)
    assert (p1, p2) == ([0, 1, 2], [0, 1])
    c1, c2 = t1.checkpoint(), t2.checkpoint()
    assert (c1.size, c2.size) == (3, 2)
    assert c1.root != c2.root
    for s, cp, runs in ((t1, c1, ("run-a", "run-b", "run-c")), (t2, c2, ("run-x", "run-y"))):
        leaves = [merkle.leaf_hash(s.head(r).hash) for r in runs]
        assert cp.root == merkle.root(leaves)
        for r in runs:
            inc = s.inclusion_proof(r)
            assert inc is not None
            merkle.verify_inclusion(
                inc.index, inc.size, merkle.leaf_hash(inc.head), inc.proof, cp.root
            )
    for s, r in ((t2, "run-a"), (t1, "run-x")):
        with pytest.raises(errors.NotSealedError, match="no records"):
            s.inclusion_proof(r)


def test_each_tenant_has_its_own_origin(stores: StoreFactory) -> None:
    t1, t2, default = stores.open("t1"), stores.open("t2"), stores.open()
    assert (t1.tenant, t1.origin) == ("t1", f"{ORIGIN}/t1")
    assert (t2.tenant, t2.origin) == ("t2", f"{ORIGIN}/t2")
    assert (default.tenant, default.origin) == ("default", f"{ORIGIN}/default")
    assert t1.checkpoint().origin == f"{ORIGIN}/t1"
    note1 = t1.sign_checkpoint()
    assert open_checkpoint(note1, [stores.log_verifier("t1")]).checkpoint.origin == t1.origin
    with pytest.raises(UnverifiedNoteError):
        open_checkpoint(note1, [stores.log_verifier("t2")])


def test_a_tenant_of_64_characters_is_accepted(stores: StoreFactory) -> None:
    tenant = "t" * 64
    s = stores.open(tenant)
    assert s.tenant == tenant
    assert s.origin == f"{ORIGIN}/{tenant}"


@pytest.mark.parametrize(
    "tenant",
    ["", "a/b", "a:b", "a\x00b", "a\nb", "a\tb", "t" * 65, " t1", "t1 ", "T1"],
    ids=[
        "empty",
        "slash",
        "colon",
        "nul",
        "lf",
        "tab",
        "65-chars",
        "lead-space",
        "trail-space",
        "upper",
    ],
)
def test_an_invalid_tenant_is_refused(stores: StoreFactory, tenant: str) -> None:
    with pytest.raises(INVALID):
        stores.open(tenant)


def test_is_shared_tells_the_backend(store: JournalStore, backend: BackendLike) -> None:
    assert store.is_shared() is is_shared_expected(backend)


# =============================================================================================
# tampering and deletion: caught at read time, and at the log level
# =============================================================================================


@pytest.mark.parametrize("how", ["changed-data", "copied-record", "not-json"])
def test_a_tampered_record_is_caught_on_read(store: JournalStore, how: str) -> None:
    recs = store.append(
        1,
        [
            note("run-a", "one", case="case-A"),
            note("run-a", "two", case="case-A"),
            note("run-a", "three", case="case-A"),
        ],
    )
    raw = {
        "changed-data": recs[1].raw.replace(b'"two"', b'"TWO"'),
        "copied-record": recs[2].raw,
        "not-json": b"garbage",
    }[how]
    assert raw != recs[1].raw
    tamper(store, "run-a", 2, raw)
    reads: list[Callable[[], object]] = [
        lambda: store.read("run-a"),
        lambda: store.read("run-a", 2),
        lambda: store.read_page("run-a", 1, 10),
        lambda: store.verify("run-a"),
        lambda: store.case_history("case-A", 10),
    ]
    for call in reads:
        with pytest.raises(errors.CorruptError) as e:
            call()
        assert (e.value.run, e.value.seq) == ("run-a", 2)
        assert "run-a" in str(e.value)
    # The check is per record: the record before the tampered one still reads.
    assert store.read_page("run-a", 1, 1) == recs[:1]


def test_a_deleted_run_keeps_its_log_position(store: JournalStore) -> None:
    a, _, c = (seal_run(store, r) for r in ("run-a", "run-b", "run-c"))
    cp3 = store.checkpoint()
    delete_run(store, "run-b")
    assert store.read("run-b") == []
    assert store.head("run-b") == Head.genesis()
    assert store.sealed("run-b") is None
    with pytest.raises(errors.NotSealedError, match="no records"):
        store.inclusion_proof("run-b")
    assert store.seals() == [a, c]
    assert store.checkpoint() == cp3  # the stored tree keeps the leaf
    d = seal_run(store, "run-d")
    assert d.position == 3  # never b's position 1
    cp4 = store.checkpoint()
    assert cp4.size == 4
    merkle.verify_consistency(3, 4, cp3.root, cp4.root, store.consistency_proof(3))
    for s in (a, c, d):
        inc = store.inclusion_proof(s.run)
        assert inc is not None
        assert inc.index == s.position
        merkle.verify_inclusion(inc.index, 4, merkle.leaf_hash(inc.head), inc.proof, cp4.root)


def test_a_deleted_run_is_caught_by_the_next_checkpoint(store: JournalStore) -> None:
    for run in ("run-a", "run-b", "run-c"):
        seal_run(store, run)
    cp3 = store.checkpoint()
    b_head = store.head("run-b").hash
    delete_run(store, "run-b")
    seal_run(store, "run-d")
    cp4 = store.checkpoint()
    # The store's own view is consistent: it never pretends the log shrank.
    merkle.verify_consistency(3, 4, cp3.root, cp4.root, store.consistency_proof(3))
    # An auditor rebuilds the log from the sealed runs that remain, each re-verified.
    survivors = store.seals()
    assert [s.position for s in survivors] == [0, 2, 3]  # the gap names the missing leaf
    for s in survivors:
        assert store.verify(s.run) == s.head
    rebuilt = merkle.root([merkle.leaf_hash(s.head) for s in survivors])
    with pytest.raises(ProofError):  # same size as the earlier checkpoint, another root
        merkle.verify_consistency(3, 3, cp3.root, rebuilt, [])
    with pytest.raises(ProofError):  # the rebuilt log is not a prefix of the published one
        merkle.verify_consistency(3, 4, rebuilt, cp4.root, store.consistency_proof(3))
    assert rebuilt != cp4.root
    # With the deleted run's head put back, the published history is whole again.
    heads = [survivors[0].head, b_head, survivors[1].head, survivors[2].head]
    assert merkle.root([merkle.leaf_hash(h) for h in heads]) == cp4.root


# =============================================================================================
# invalid inputs: refused before anything is written
# =============================================================================================


def refusals(calls: dict[str, Callable[[], object]]) -> list[str]:
    """The names of the calls that raised an argument error (the others accepted the input)."""
    refused = []
    for name, call in calls.items():
        try:
            call()
        except INVALID:
            refused.append(name)
    return refused


@pytest.mark.parametrize(
    "run",
    ["", "-run", "run/a", "run a", "r" * 129, "run\n", "rün", ".run"],
    ids=["empty", "dash-first", "slash", "space", "129-chars", "lf", "non-ascii", "dot-first"],
)
def test_a_bad_run_id_is_refused(store: JournalStore, run: str) -> None:
    calls: dict[str, Callable[[], object]] = {
        "append": lambda: store.append(1, [note(run)]),
        "read": lambda: store.read(run),
        "read_page": lambda: store.read_page(run, 1, 10),
        "head": lambda: store.head(run),
        "acquire": lambda: store.acquire(run, "alice", LEASE),
        "renew": lambda: store.renew(run, "alice", 1, LEASE),
        "seal": lambda: store.seal(run, 1, "succeeded"),
        "sealed": lambda: store.sealed(run),
        "inclusion_proof": lambda: store.inclusion_proof(run),
        "request_cancel": lambda: store.request_cancel(run, "operator", "why"),
        "cancellation": lambda: store.cancellation(run),
    }
    assert refusals(calls) == list(calls)
    assert store.runs(None, 10) == []
    assert store.recent_runs(None, 10) == []


@pytest.mark.parametrize("kind", ["", "1abc", "a b", "kind/x", "k" * 65, "é", "_x"])
def test_a_bad_kind_is_refused(store: JournalStore, kind: str) -> None:
    with pytest.raises(INVALID):
        store.append(1, [Append("run-a", kind)])
    assert store.head("run-a") == Head.genesis()


@pytest.mark.parametrize(
    "data",
    [1.5, {"x": 0.5}, [1, 2.0], float("nan"), 2**53, {1: "non-string key"}, b"bytes", {"s"}],
    ids=["float", "nested", "integral-float", "nan", "2^53", "int-key", "bytes", "set"],
)
def test_non_canonical_data_is_refused(store: JournalStore, data: Any) -> None:
    with pytest.raises(INVALID):
        store.append(1, [note("run-a", data)])
    assert store.head("run-a") == Head.genesis()


def test_a_bad_case_or_effect_key_is_refused(store: JournalStore) -> None:
    for bad in (
        Append("run-a", "Note", case="bad case"),
        Append("run-a", "Note", case=""),
        Append("run-a", "EffectStarted", effect_key=""),
        Append("run-a", "EffectStarted", effect_key="k\n"),
        Append("run-a", "EffectStarted", effect_key="k" * 257),
    ):
        with pytest.raises(INVALID):
            store.append(1, [bad])
    assert store.head("run-a") == Head.genesis()


@pytest.mark.parametrize("epoch", [0, -1, 2**63, True], ids=["zero", "negative", "2^63", "bool"])
def test_a_bad_epoch_is_refused(store: JournalStore, epoch: Any) -> None:
    with pytest.raises(INVALID):
        store.append(epoch, [note("run-a")])
    assert store.head("run-a") == Head.genesis()


def test_a_record_larger_than_the_limit_is_refused(store: JournalStore) -> None:
    base = len(Body("run-a", 1, 1, "Note", data="", has_data=True).encode())
    fill = MAX_RECORD_SIZE - base
    with pytest.raises(MalformedError) as e:
        store.append(1, [note("run-a", "x" * (fill + 1))])
    assert str(MAX_RECORD_SIZE + 1) in str(e.value)  # the real size
    assert str(MAX_RECORD_SIZE) in str(e.value)  # and the limit
    assert store.head("run-a") == Head.genesis()
    (rec,) = store.append(1, [note("run-a", "x" * fill)])  # exactly at the limit: accepted
    assert len(rec.raw) == MAX_RECORD_SIZE
    assert store.read("run-a") == [rec]


@pytest.mark.parametrize("limit", [0, -1])
def test_a_limit_must_be_positive(store: JournalStore, limit: int) -> None:
    store.append(1, [note("run-a", case="case-A"), concluded("run-a", "failed")])
    store.acquire("run-b", "alice", 1)
    calls: dict[str, Callable[[], object]] = {
        "read_page": lambda: store.read_page("run-a", 1, limit),
        "runs_by_outcome": lambda: store.runs_by_outcome("failed", limit),
        "case_history": lambda: store.case_history("case-A", limit),
        "recent_runs": lambda: store.recent_runs(None, limit),
        "recent_runs by source": lambda: store.recent_runs(None, limit, source="billing"),
        "waiting_runs": lambda: store.waiting_runs(limit),
        "runs": lambda: store.runs(None, limit),
        "abandoned_runs": lambda: store.abandoned_runs(limit),
        "seals": lambda: store.seals(-1, limit),
    }
    assert refusals(calls) == list(calls)


# =============================================================================================
# concurrency: several handles (connections) on one database, writing at once
# =============================================================================================

WORKERS = 4


def run_together(fns: list[Callable[[], Any]]) -> list[Any]:
    """Run ``fns`` in threads released at once; each result is a value or the exception."""
    barrier = threading.Barrier(len(fns))

    def go(fn: Callable[[], Any]) -> Any:
        barrier.wait()
        try:
            return fn()
        except Exception as e:  # collected: the caller asserts on each
            return e

    with ThreadPoolExecutor(len(fns)) as pool:
        return list(pool.map(go, fns))


def test_parallel_first_acquires_elect_one_holder(stores: StoreFactory) -> None:
    handles = [stores.open() for _ in range(WORKERS)]
    results = run_together(
        [functools.partial(h.acquire, "run-a", f"owner-{i}", LEASE) for i, h in enumerate(handles)]
    )
    won = [r for r in results if isinstance(r, Lease)]
    assert len(won) == 1, results
    assert all(isinstance(r, errors.LeaseHeldError) for r in results if r is not won[0]), results
    assert won[0].epoch == 1


@pytest.mark.parametrize("leased", [True, False], ids=["leased", "restore-path"])
def test_parallel_appends_give_contiguous_seqs(stores: StoreFactory, leased: bool) -> None:
    handles = [stores.open() for _ in range(WORKERS)]
    epoch = handles[0].acquire("run-a", "alice", LEASE).epoch if leased else 1

    def work(h: JournalStore, i: int) -> None:
        for j in range(5):
            # Keyed records of a kind that is not exactly-once: a seq race misreported as a
            # DuplicateEffect would show here.
            h.append(epoch, [Append("run-a", "EffectDone", data=[i, j], effect_key=f"k{i}")])

    results = run_together([functools.partial(work, h, i) for i, h in enumerate(handles)])
    assert results == [None] * WORKERS
    records = handles[0].read("run-a")
    assert seqs(records) == list(range(1, 5 * WORKERS + 1))
    assert handles[0].verify("run-a") == records[-1].hash


def test_parallel_seals_keep_the_log_dense(stores: StoreFactory) -> None:
    handles = [stores.open() for _ in range(WORKERS)]
    runs = [f"run-{i}" for i in range(WORKERS)]
    for h, run in zip(handles, runs, strict=True):
        h.append(1, [note(run)])
    results = run_together(
        [functools.partial(h.seal, r, 1, "succeeded") for h, r in zip(handles, runs, strict=True)]
    )
    assert all(isinstance(r, Seal) for r in results), results
    seals = handles[0].seals()
    assert sorted(s.position for s in seals) == list(range(WORKERS))
    cp = handles[0].checkpoint()
    assert cp.size == WORKERS
    assert cp.root == merkle.root([merkle.leaf_hash(s.head) for s in seals])
    for s in seals:
        inc = handles[0].inclusion_proof(s.run)
        assert inc is not None
        merkle.verify_inclusion(inc.index, inc.size, merkle.leaf_hash(inc.head), inc.proof, cp.root)


def test_parallel_starts_of_one_effect_let_one_win(stores: StoreFactory) -> None:
    shared = stores.open()  # one handle used from several threads, as the contract allows
    lease = shared.acquire("run-a", "alice", LEASE)
    results = run_together(
        [lambda: shared.append(lease.epoch, [started("run-a", "k")]) for _ in range(WORKERS)]
    )
    won = [r for r in results if isinstance(r, list)]
    assert len(won) == 1, results
    assert all(isinstance(r, errors.DuplicateEffectError) for r in results if r is not won[0]), (
        results
    )
    assert shared.head("run-a").seq == 1


# =============================================================================================
# admission keys: one run per (tenant, key), refused by the key inside append; kept until retired
# =============================================================================================


def admitted(run: str, source: str = "billing", emitter_id: str = "inv-1", **more: Any) -> Append:
    """A ``RunAdmitted`` record: the admission key ``<source>/<emitter_id>``."""
    return Append(run, "RunAdmitted", data={"source": source, "id": emitter_id, **more})


def test_an_admission_key_admits_one_run(store: JournalStore) -> None:
    assert store.admitted_as("billing/inv-1") is None
    (rec,) = store.append(1, [admitted("run-a", request={"cents": 4200})])
    assert store.admitted_as("billing/inv-1") == "run-a"
    # Another run with the key: refused, naming the holder; nothing of it is written.
    with pytest.raises(errors.DuplicateAdmissionError) as e:
        store.append(1, [admitted("run-b"), note("run-b")])
    assert (e.value.key, e.value.holder, e.value.run) == ("billing/inv-1", "run-a", "run-b")
    assert "run-a" in str(e.value) and "billing/inv-1" in str(e.value)
    assert store.head("run-b") == Head.genesis()
    assert [r for r, _ in store.recent_runs(None, 10)] == ["run-a"]
    # The holder itself retrying its admission learns the same (not "not the first record").
    with pytest.raises(errors.DuplicateAdmissionError) as e:
        store.append(1, [admitted("run-a")])
    assert e.value.holder == "run-a"
    assert store.read("run-a") == [rec]
    # Another id, or another source, is another key.
    store.append(1, [admitted("run-c", emitter_id="inv-2")])
    store.append(1, [admitted("run-d", source="crm")])
    assert store.admitted_as("billing/inv-2") == "run-c"
    assert store.admitted_as("crm/inv-1") == "run-d"


def test_an_admission_is_a_runs_first_record(store: JournalStore) -> None:
    store.append(1, [note("run-a")])
    with pytest.raises(MalformedError, match="first record"):
        store.append(1, [admitted("run-a")])
    with pytest.raises(MalformedError, match="first record"):
        store.append(1, [note("run-b"), admitted("run-b")])
    # Refused before it wrote: the key is free, run-b has nothing.
    assert store.admitted_as("billing/inv-1") is None
    assert store.head("run-b") == Head.genesis()
    assert store.head("run-a").seq == 1


@pytest.mark.parametrize(
    "data",
    [
        {"source": "billing"},
        {"id": "inv-1"},
        {"source": "bill/ing", "id": "inv-1"},
        {"source": "", "id": "inv-1"},
        {"source": "billing", "id": ""},
        {"source": "billing", "id": "a\nb"},
        {"source": "billing", "id": 7},
        ["billing", "inv-1"],
        "billing/inv-1",
    ],
)
def test_a_malformed_admission_is_refused(store: JournalStore, data: Any) -> None:
    with pytest.raises(MalformedError, match="record 1"):
        store.append(1, [Append("run-a", "RunAdmitted", data=data)])
    with pytest.raises(MalformedError):
        store.append(1, [Append("run-a", "RunAdmitted")])  # no data at all
    assert store.head("run-a") == Head.genesis()


@pytest.mark.parametrize("key", ["billing", "/inv-1", "billing/", "bill ing/x", "", 7])
def test_admitted_as_refuses_what_is_not_a_key(store: JournalStore, key: Any) -> None:
    with pytest.raises(INVALID):
        store.admitted_as(key)


def test_admission_keys_are_tenant_scoped(stores: StoreFactory) -> None:
    acme, other = stores.open("acme"), stores.open("other")
    acme.append(1, [admitted("run-a")])
    other.append(1, [admitted("run-b")])  # the same key, another tenant: ordinary
    assert acme.admitted_as("billing/inv-1") == "run-a"
    assert other.admitted_as("billing/inv-1") == "run-b"
    assert other.forget_admissions(T0 + 1) == 1
    assert acme.admitted_as("billing/inv-1") == "run-a"  # retiring is per tenant too


def test_keys_are_retired_only_on_request(store: JournalStore, clock: FakeClock) -> None:
    store.append(1, [admitted("run-a", emitter_id="old")])
    clock.advance(10)
    store.append(1, [admitted("run-b", emitter_id="new")])
    clock.advance(10_000)  # time alone retires nothing
    assert store.admitted_as("billing/old") == "run-a"
    assert store.forget_admissions(T0) == 0  # strictly before: claimed at T0 is kept
    assert store.forget_admissions(T0 + 1) == 1
    assert store.forget_admissions(T0 + 1) == 0
    assert store.admitted_as("billing/old") is None
    assert store.admitted_as("billing/new") == "run-b"
    # A retired key admits a new run (the door it closed is open again) ...
    store.append(1, [admitted("run-c", emitter_id="old")])
    assert store.admitted_as("billing/old") == "run-c"
    # ... and the retired run keeps its records and its source.
    assert store.head("run-a").seq == 1
    assert [r for r, _ in store.recent_runs(None, 10, source="billing")] == [
        "run-c",
        "run-b",
        "run-a",
    ]
    with pytest.raises(INVALID):
        store.forget_admissions(-1)


def test_parallel_admissions_of_one_key_admit_one_run(stores: StoreFactory) -> None:
    handles = [stores.open() for _ in range(WORKERS)]
    results = run_together(
        [
            functools.partial(h.append, 1, [admitted(f"run-{i}"), note(f"run-{i}")])
            for i, h in enumerate(handles)
        ]
    )
    won = [i for i, r in enumerate(results) if isinstance(r, list)]
    assert len(won) == 1, results
    winner = f"run-{won[0]}"
    for i, r in enumerate(results):
        if i != won[0]:
            assert isinstance(r, errors.DuplicateAdmissionError), results
            assert (r.holder, r.run) == (winner, f"run-{i}")
            assert handles[0].head(f"run-{i}") == Head.genesis()
    assert handles[0].admitted_as("billing/inv-1") == winner
    assert handles[0].recent_runs(None, 10, source="billing") == [(winner, T0)]


# =============================================================================================
# runs by source: recent_runs narrowed to one source, same order, tie-break and cursor
# =============================================================================================


def write_sourced_activity(store: JournalStore, clock: FakeClock) -> dict[str, str]:
    """:func:`write_activity`'s runs, each admitted from one of two sources (and one run not
    admitted), with the same times; returns run -> source."""
    sources = {
        "run-a": "s1",
        "run-B": "s1",
        "run_c": "s2",
        "run.d": "s1",
        "run-e": "s2",
        "run-f": "s1",
    }
    for run in ("run-a", "run-B", "run_c", "run.d"):
        store.append(1, [admitted(run, sources[run], run)])
    store.append(1, [note("run-plain")])
    clock.advance(5)
    for run in ("run-e", "run-f"):
        store.append(1, [admitted(run, sources[run], run)])
    clock.advance(5)
    store.append(1, [note("run-a", "again")])  # activity moves the run in its source's listing
    return sources


def test_runs_by_source_follow_recent_runs(store: JournalStore, clock: FakeClock) -> None:
    sources = write_sourced_activity(store, clock)
    everything = store.recent_runs(None, 100)
    for source in ("s1", "s2"):
        expected = [row for row in everything if sources.get(row[0]) == source]
        assert store.recent_runs(None, 100, source=source) == expected
        for size in (1, 2, 3):
            rebuilt: list[tuple[str, int]] = []
            cursor: tuple[int, str] | None = None
            for _ in range(len(expected) + 1):
                page = store.recent_runs(cursor, size, source=source)
                if not page:
                    break
                rebuilt += page
                cursor = (page[-1][1], page[-1][0])
            assert rebuilt == expected, (source, size)
    assert store.recent_runs(None, 100, source="s1")[0] == ("run-a", T0 + 10)
    # A cursor inside a tie resumes after it, by run ID, as recent_runs does.
    assert store.recent_runs((T0, "run.d"), 10, source="s1") == [("run-B", T0)]
    assert store.recent_runs(None, 10, source="nobody") == []


def test_a_seal_moves_a_run_in_its_source(store: JournalStore, clock: FakeClock) -> None:
    store.append(1, [admitted("run-a", emitter_id="a")])
    store.append(1, [admitted("run-b", emitter_id="b")])
    clock.advance(3)
    store.seal("run-a", 1, "succeeded")
    assert store.recent_runs(None, 10, source="billing") == [("run-a", T0 + 3), ("run-b", T0)]
    assert store.recent_runs(None, 10, source="billing") == [
        r for r in store.recent_runs(None, 10) if r[0] in ("run-a", "run-b")
    ]


@pytest.mark.parametrize("source", ["", "a/b", "with space", 7])
def test_a_malformed_source_is_refused(store: JournalStore, source: Any) -> None:
    with pytest.raises(INVALID):
        store.recent_runs(None, 10, source=source)


# =============================================================================================
# waiting runs: the last record is a suspension; soonest until first; derived inside append
# =============================================================================================


def suspended(run: str, until: int, message: str | None = None) -> Append:
    data: dict[str, Any] = {"until": until}
    if message is not None:
        data["message"] = message
    return Append(run, "RunSuspended", data=data)


def test_waiting_runs_are_listed_soonest_first(store: JournalStore) -> None:
    store.append(1, [note("run-z"), suspended("run-z", T0 + 30)])
    store.append(1, [suspended("run-m", T0 + 10, "payment-7")])
    store.append(1, [suspended("run-a", T0 + 30, "reply-1")])
    store.append(1, [suspended("run-x", T0 - 5)])  # already due: it is the inert one
    store.append(1, [note("run-plain")])
    assert store.waiting_runs(10) == [
        WaitingRun("run-x", T0 - 5, None, 1),
        WaitingRun("run-m", T0 + 10, "payment-7", 1),
        WaitingRun("run-a", T0 + 30, "reply-1", 1),
        WaitingRun("run-z", T0 + 30, None, 2),
    ]
    assert [w.run for w in store.waiting_runs(2)] == ["run-x", "run-m"]
    # Any later record ends the wait; a new suspension replaces the old one.
    store.append(1, [note("run-x", "woke")])
    store.append(1, [suspended("run-m", T0 + 100)])
    assert [(w.run, w.until, w.message) for w in store.waiting_runs(10)] == [
        ("run-a", T0 + 30, "reply-1"),
        ("run-z", T0 + 30, None),
        ("run-m", T0 + 100, None),
    ]
    # A batch that suspends and goes on is not waiting; one that ends suspended is.
    store.append(1, [suspended("run-a", T0), note("run-a", "on")])
    store.append(1, [note("run-plain", "x"), suspended("run-plain", T0 + 1)])
    assert [w.run for w in store.waiting_runs(10)] == ["run-plain", "run-z", "run-m"]
    # A seal ends it too.
    store.seal("run-z", 1, "cancelled")
    assert [w.run for w in store.waiting_runs(10)] == ["run-plain", "run-m"]
    with pytest.raises(INVALID):
        store.waiting_runs(0)


@pytest.mark.parametrize(
    "data",
    [{}, {"until": -1}, {"until": "soon"}, {"until": True}, {"until": 5, "message": ""}, [5]],
)
def test_a_malformed_suspension_is_refused(store: JournalStore, data: Any) -> None:
    with pytest.raises(MalformedError, match="record 2"):
        store.append(1, [note("run-a"), Append("run-a", "RunSuspended", data=data)])
    assert store.head("run-a") == Head.genesis()
    assert store.waiting_runs(10) == []


def test_a_refused_batch_leaves_the_waiting_index(store: JournalStore) -> None:
    store.append(1, [suspended("run-a", T0 + 9)])
    with pytest.raises(errors.DuplicateEffectError):
        store.append(1, [started("run-a", "k"), started("run-a", "k")])
    assert [w.run for w in store.waiting_runs(10)] == ["run-a"]


# =============================================================================================
# derived indexes refuse a row they cannot read, every listing and the count alike
# =============================================================================================


def plant(store: JournalStore, statement: str) -> None:
    """Run one statement on the store's database (the private test hook), planting a row."""
    hooks: Any = store
    hooks._execute_for_test(statement)


def test_count_by_outcome_refuses_what_the_listing_refuses(store: JournalStore) -> None:
    conclude(store, "run-a", "quarantined", seal=False)
    plant(store, "UPDATE run_outcome SET run = 'not a run!' WHERE run = 'run-a'")
    with pytest.raises(errors.CorruptError, match="does not parse"):
        store.runs_by_outcome("quarantined", 10)
    with pytest.raises(errors.CorruptError, match="does not parse"):
        store.count_by_outcome("quarantined")


def test_the_new_indexes_refuse_an_unreadable_row(store: JournalStore) -> None:
    store.append(1, [admitted("run-a"), suspended("run-a", T0)])
    for table in ("run_admission", "run_source", "run_waiting"):
        plant(store, f"UPDATE {table} SET run = 'not a run!'")
    for call in (
        lambda: store.admitted_as("billing/inv-1"),
        lambda: store.recent_runs(None, 10, source="billing"),
        lambda: store.waiting_runs(10),
    ):
        with pytest.raises(errors.CorruptError, match="does not parse"):
            call()
