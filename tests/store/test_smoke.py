"""Smoke tests of the journal store backends (store.sqlite, store.postgres): a few per guarantee.

Every test runs on both backends through the ``backend`` fixture (a SQLite file, or a fresh
PostgreSQL schema). The full conformance battery is tests/store/test_conformance.py; these
tests show that the shared SQL implementation (store.sql) and its two dialects work, including
what only an implementation can show: concurrent writers, a COMMIT without a verdict, retried
transactions, concurrent initialisation, the server clock. docs/embedder-guide.md §5 compares
the backends.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from store import errors
from store.api import Append, Head, JournalStore
from store.open import init_store, open_store
from tlog import merkle
from tlog.checkpoint import open_checkpoint
from tlog.cosignature import CosignatureV1Signer
from tlog.errors import InvalidSignatureError, MalformedError, UsageError
from tlog.journal import GENESIS, verify_record_signature
from tlog.keys import SignerKey, format_vkey, generate_key
from tlog.note import Ed25519Signer, Signature, format_note, parse_note, sign_note

ORIGIN = "example.com/journal"
T0 = 1_700_000_000
LONG = 300


class Clock:
    """A store clock that moves only when told."""

    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> int:
        return self.now


class Env:
    """One initialised database (the ``backend``), and handles on it that share one clock."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend
        self.key: SignerKey = generate_key(ORIGIN)
        self.clock = Clock()
        self.handles: list[JournalStore] = []
        init_store(db=backend.db, postgres=backend.postgres, origin=ORIGIN, key=self.key)

    def open(self, tenant: str = "default", **kw: Any) -> JournalStore:
        kw.setdefault("key", self.key)
        kw.setdefault("clock", self.clock)
        s = open_store(db=self.backend.db, postgres=self.backend.postgres, tenant=tenant, **kw)
        self.handles.append(s)
        return s

    def log_verifier(self, tenant: str = "default") -> Any:
        return Ed25519Signer(f"{ORIGIN}/{tenant}", self.key.secret).verifier()

    def close(self) -> None:
        for s in self.handles:
            s.close()


@pytest.fixture
def env(backend: Any) -> Iterator[Env]:
    e = Env(backend)
    yield e
    e.close()


@pytest.fixture
def store(env: Env) -> JournalStore:
    return env.open()


def note(run: str, data: Any = "hello", case: str | None = None) -> Append:
    return Append(run, "Note", data=data, case=case)


def started(run: str, key: str) -> Append:
    return Append(run, "EffectStarted", data={"tool": "send"}, effect_key=key)


def concluded(run: str, outcome: str) -> Append:
    return Append(run, "RunConcluded", data={"outcome": outcome})


def hook(store: JournalStore, name: str) -> Callable[..., Any]:
    """A private test hook of the store (``_tamper_for_test`` …)."""
    fn: Callable[..., Any] = getattr(store, name)
    return fn


def sealed_run(store: JournalStore, run: str, outcome: str = "succeeded") -> bytes:
    lease = store.acquire(run, "w", LONG)
    store.append(lease.epoch, [note(run), concluded(run, outcome)])
    return store.seal(run, lease.epoch, outcome).head


def in_threads(n: int, fn: Callable[[int], Any]) -> list[Any]:
    """Run fn(0..n-1) at once in threads; return results or exceptions, in order."""
    out: list[Any] = [None] * n
    barrier = threading.Barrier(n)

    def go(i: int) -> None:
        barrier.wait()
        try:
            out[i] = fn(i)
        except Exception as e:
            out[i] = e

    threads = [threading.Thread(target=go, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


# --- records and the chain -------------------------------------------------------------------


def test_append_assigns_contiguous_linked_seqs(store: JournalStore) -> None:
    assert store.head("r") == Head(0, GENESIS)
    lease = store.acquire("r", "w", LONG)
    for i in range(3):
        store.append(lease.epoch, [note("r", i)])
    store.append(lease.epoch, [note("r", 3), note("r", 4)])
    records = store.read("r")
    assert [r.seq for r in records] == [1, 2, 3, 4, 5]
    assert records[0].prev_hash == GENESIS
    assert all(b.prev_hash == a.hash for a, b in itertools.pairwise(records))
    assert all(r.body().epoch == lease.epoch for r in records)
    assert store.verify("r") == records[-1].hash == store.head("r").hash
    assert [r.seq for r in store.read("r", 3)] == [3, 4, 5]
    assert [r.seq for r in store.read_page("r", 1, 2)] == [1, 2]


def test_empty_batch_returns_nothing_without_the_database(store: JournalStore) -> None:
    store.close()
    assert store.append(1, []) == []
    with pytest.raises(UsageError):
        store.head("r")


def test_batch_spanning_runs_is_refused_before_writing(store: JournalStore) -> None:
    with pytest.raises(UsageError):
        store.append(1, [note("a"), note("b")])
    assert store.read("a") == [] and store.read("b") == []


def test_a_failed_batch_writes_nothing(store: JournalStore) -> None:
    store.append(1, [started("r", "k")])
    before = store.recent_runs(None, 10)
    with pytest.raises(errors.DuplicateEffectError) as e:
        store.append(1, [note("r"), concluded("r", "failed"), started("r", "k")])
    assert e.value.effect_key == "k"
    with pytest.raises(MalformedError):
        store.append(1, [note("r"), note("r", data=1.5)])
    with pytest.raises(MalformedError):  # a lone surrogate is not Unicode text
        store.append(1, [note("r"), note("r", data="\ud800")])
    for outcome in ("fail\x00ed", "needs review", "-x"):  # indexed: check_outcome
        with pytest.raises(MalformedError):
            store.append(1, [concluded("r", outcome)])
    assert [r.seq for r in store.read("r")] == [1]
    assert store.count_by_outcome("failed") == 0
    assert store.recent_runs(None, 10) == before


def test_exactly_once_within_a_batch_against_history_and_per_run(store: JournalStore) -> None:
    with pytest.raises(errors.DuplicateEffectError) as e:
        store.append(1, [started("r", "k1"), started("r", "k2"), started("r", "k2")])
    assert e.value.effect_key == "k2"
    store.append(1, [started("r", "k1"), started("r", "k2")])
    with pytest.raises(errors.DuplicateEffectError) as e:
        store.append(1, [started("r", "k3"), started("r", "k2")])
    assert e.value.effect_key == "k2"
    store.append(1, [started("other", "k1")])  # another run: allowed
    # Other kinds with the key are not constrained.
    store.append(1, [Append("r", "EffectDone", effect_key="k1")])
    assert [r.seq for r in store.read("r")] == [1, 2, 3]


def test_record_signatures_round_trip(env: Env) -> None:
    signer = Ed25519Signer("example.com/records", bytes(range(32)))
    store = env.open(record_signer=signer)
    written = store.append(1, [note("r"), note("r")])
    read = store.read("r")
    assert read == written
    for r in read:
        assert r.signature is not None
        assert verify_record_signature(r.signature, r.hash, [signer.verifier()])


def test_tampering_is_caught_on_read_and_verify(store: JournalStore) -> None:
    store.append(1, [note("r", i) for i in range(3)])
    hook(store, "_tamper_for_test")("r", 2, b'{"tampered":true}')
    with pytest.raises(errors.CorruptError) as e:
        store.read("r")
    assert (e.value.run, e.value.seq) == ("r", 2)
    with pytest.raises(errors.CorruptError) as e:
        store.verify("r")
    assert e.value.seq == 2
    assert [r.seq for r in store.read("r", 3)] == [3]


def test_stored_values_of_the_wrong_shape_are_corrupt(store: JournalStore) -> None:
    store.append(1, [note("r"), note("r")])
    sql = hook(store, "_execute_for_test")
    sql("UPDATE journal SET sig_name = ? WHERE run = ? AND seq = 1", ("half", "r"))
    with pytest.raises(errors.CorruptError, match="signature"):
        store.read("r")
    sql("UPDATE journal SET sig_name = NULL, hash = ? WHERE run = ? AND seq = 1", (b"x" * 31, "r"))
    with pytest.raises(errors.CorruptError, match="32 bytes"):
        store.read("r")


# --- leases ------------------------------------------------------------------------------------


def test_acquire_is_a_pure_claim(env: Env, store: JournalStore) -> None:
    a = store.acquire("r", "alice", 10)
    assert (a.epoch, a.expires_at) == (1, T0 + 10)
    for owner in ("alice", "bob"):
        with pytest.raises(errors.LeaseHeldError) as e:
            store.acquire("r", owner, 10)
        assert (e.value.owner, e.value.epoch, e.value.remaining) == ("alice", 1, 10)
    env.clock.now += 10  # expires_at <= now: expired at the exact second
    b = store.acquire("r", "bob", 10)
    assert b.epoch == 2
    with pytest.raises(errors.FencedError) as f:
        store.append(a.epoch, [note("r")])
    assert (f.value.held, f.value.current) == (1, 2)
    with pytest.raises(errors.FencedError):
        store.append(b.epoch + 1, [note("r")])  # a future epoch is fenced too
    store.append(b.epoch, [note("r")])


def test_the_first_epoch_follows_the_journal(store: JournalStore) -> None:
    store.append(7, [note("r")])  # no lease row: any epoch (the restore path)
    store.append(3, [note("r")])
    assert store.acquire("r", "w", LONG).epoch == 8


def test_renew_extends_only_the_exact_live_lease(env: Env, store: JournalStore) -> None:
    a = store.acquire("r", "alice", 10)
    env.clock.now += 5
    assert store.renew("r", "alice", a.epoch, 10).expires_at == T0 + 15
    for owner, epoch in (("bob", a.epoch), ("alice", a.epoch + 1)):
        with pytest.raises(errors.LeaseNotHeldError):
            store.renew("r", owner, epoch, 100)
    env.clock.now = T0 + 15  # lapsed
    with pytest.raises(errors.LeaseNotHeldError):
        store.renew("r", "alice", a.epoch, 100)
    assert store.abandoned_runs(10) == ["r"]  # the refusals wrote nothing
    b = store.acquire("r", "bob", 10)
    store.release("r", b.epoch)
    with pytest.raises(errors.LeaseNotHeldError):
        store.renew("r", "bob", b.epoch, 10)
    assert store.abandoned_runs(10) == []


def test_release_keeps_the_epoch_and_ignores_other_epochs(env: Env, store: JournalStore) -> None:
    a = store.acquire("r", "alice", 1)
    env.clock.now += 1
    b = store.acquire("r", "bob", LONG)
    store.release("r", a.epoch)  # a fenced caller's release: no error, no effect
    with pytest.raises(errors.LeaseHeldError):
        store.acquire("r", "carol", LONG)
    store.release("r", b.epoch)
    store.release("r", b.epoch)  # idempotent
    store.release("never-leased", 1)
    with pytest.raises(errors.FencedError):
        store.append(a.epoch, [note("r")])
    c = store.acquire("r", "carol", LONG)  # free at once, and past the released epoch
    assert c.epoch == b.epoch + 1


@pytest.mark.parametrize("ttl", [0, -1, 1.5, True, "5", 2**63])
def test_bad_ttls_are_refused(store: JournalStore, ttl: Any) -> None:
    with pytest.raises(UsageError):
        store.acquire("r", "w", ttl)
    assert store.abandoned_runs(10) == []


def test_an_expiry_beyond_int63_and_an_empty_owner_are_refused(store: JournalStore) -> None:
    with pytest.raises(UsageError, match="overflows"):
        store.acquire("r", "w", 2**63 - 1 - T0 + 1)
    lease = store.acquire("r", "w", 2**63 - 1 - T0)
    assert lease.expires_at == 2**63 - 1
    with pytest.raises(UsageError):
        store.acquire("s", "", 10)


def test_abandoned_runs_are_expired_unreleased_oldest_first(env: Env, store: JournalStore) -> None:
    store.acquire("late", "w", 3)
    store.acquire("early", "w", 2)
    store.acquire("alive", "w", LONG)
    done = store.acquire("done", "w", 1)
    store.release("done", done.epoch)
    env.clock.now += 3
    assert store.abandoned_runs(10) == ["early", "late"]
    assert store.abandoned_runs(1) == ["early"]


# --- seal and the log --------------------------------------------------------------------------


def test_seal_is_fenced_first_wins_and_freezes_the_run(store: JournalStore) -> None:
    lease = store.acquire("r", "w", LONG)
    with pytest.raises(UsageError, match="no records"):
        store.seal("r", lease.epoch, "succeeded")
    store.append(lease.epoch, [note("r")])
    with pytest.raises(errors.FencedError):
        store.seal("r", lease.epoch + 7, "succeeded")
    with pytest.raises(MalformedError):  # check_outcome: the export format requires it
        store.seal("r", lease.epoch, "needs review")
    seal = store.seal("r", lease.epoch, "succeeded")
    assert seal.position == 0 and seal.head == store.head("r").hash
    assert store.seal("r", lease.epoch, "succeeded").already  # idempotent
    with pytest.raises(errors.SealConflictError, match="first seal stands"):
        store.seal("r", lease.epoch, "quarantined")
    assert store.sealed("r") == seal and store.checkpoint().size == 1
    with pytest.raises(errors.FencedError):
        store.seal("r", lease.epoch + 1, "succeeded")
    with pytest.raises(errors.FencedError):  # the fence comes before the seal check
        store.append(lease.epoch + 1, [note("r")])
    with pytest.raises(errors.RunSealedError) as e:
        store.append(lease.epoch, [note("r")])
    assert e.value.outcome == "succeeded"
    assert store.head("r").hash == seal.head


def test_the_log_only_grows_and_every_proof_verifies(store: JournalStore) -> None:
    empty = store.checkpoint()
    assert (empty.size, empty.root) == (0, merkle.EMPTY_ROOT)
    heads, roots = [], [merkle.EMPTY_ROOT]
    for i in range(7):
        heads.append(sealed_run(store, f"r{i}"))
        cp = store.checkpoint()
        assert cp.size == i + 1
        assert cp.root == merkle.root_of_entries(heads) == store.tree_root(i + 1)
        roots.append(cp.root)
    size = 7
    for i, head in enumerate(heads):
        inc = store.inclusion_proof(f"r{i}")
        assert inc is not None and (inc.index, inc.size, inc.head) == (i, size, head)
        merkle.verify_inclusion(i, size, merkle.leaf_hash(head), inc.proof, roots[size])
        if i < 5:
            earlier = store.inclusion_proof(f"r{i}", 5)
            merkle.verify_inclusion(i, 5, merkle.leaf_hash(head), earlier.proof, roots[5])
        else:
            with pytest.raises(errors.NotSealedError, match="does not reach") as e:
                store.inclusion_proof(f"r{i}", 5)
            assert (e.value.reason, e.value.position, e.value.size) == ("beyond", i, 5)
    for old in range(1, size + 1):
        for new in range(old, size + 1):
            proof = store.consistency_proof(old, new)
            merkle.verify_consistency(old, new, roots[old], roots[new], proof)
    assert store.consistency_proof(0) == [] and store.consistency_proof(size) == []
    for bad in ((size + 1, None), (3, 2), (1, size + 1)):
        with pytest.raises(UsageError):
            store.consistency_proof(*bad)
    with pytest.raises(UsageError):
        store.tree_root(size + 1)
    with pytest.raises(errors.NotSealedError, match="has no records") as e:
        store.inclusion_proof("never-sealed")
    assert e.value.reason == "unknown"
    assert [s.run for s in store.seals(after_position=4)] == ["r5", "r6"]


def test_positions_are_never_reused(store: JournalStore) -> None:
    sealed_run(store, "a")
    sealed_run(store, "b")
    old = store.checkpoint()
    hook(store, "_delete_run_for_test")("a")
    assert store.read("a") == [] and store.sealed("a") is None
    with pytest.raises(errors.NotSealedError, match="no records"):
        store.inclusion_proof("a")  # its records were deleted with its seal
    sealed_run(store, "c")
    sealed = store.sealed("c")
    assert sealed is not None and sealed.position == 2
    assert store.tree_root(2) == old.root  # the log kept a's leaf: it never shrinks
    assert [s.position for s in store.seals()] == [1, 2]


def test_a_missing_stored_hash_is_corrupt(store: JournalStore) -> None:
    for r in ("a", "b", "c"):
        sealed_run(store, r)
    hook(store, "_execute_for_test")("DELETE FROM tree_hash WHERE idx = 2")  # node (1, 0)
    with pytest.raises(errors.CorruptError):
        store.checkpoint()
    with pytest.raises(errors.CorruptError):
        store.inclusion_proof("c")


# --- checkpoints -------------------------------------------------------------------------------


def test_signed_checkpoints_are_kept_one_per_size(env: Env, store: JournalStore) -> None:
    zero = store.sign_checkpoint()
    opened = open_checkpoint(zero, [env.log_verifier()])
    assert (opened.checkpoint.origin, opened.checkpoint.size) == (f"{ORIGIN}/default", 0)
    assert opened.checkpoint.root == merkle.EMPTY_ROOT
    sealed_run(store, "r")
    one = store.sign_checkpoint()
    assert store.sign_checkpoint() == one
    assert open_checkpoint(one, [env.log_verifier()]).checkpoint == store.checkpoint()
    assert store.published() == [zero, one]
    with pytest.raises(UsageError):
        env.open(key=None).sign_checkpoint()


def test_cosignatures_are_merged_into_the_kept_note(env: Env, store: JournalStore) -> None:
    sealed_run(store, "r")
    kept = store.sign_checkpoint()
    text, sigs = parse_note(kept)
    witness = CosignatureV1Signer("witness.example", bytes([7] * 32), clock=lambda: T0)
    cosigned = sign_note(text, [witness], sigs)
    keys = [format_vkey(witness.verifier())]
    merged = store.add_cosignatures(cosigned, witness_keys=keys)
    assert len(parse_note(merged)[1]) == 2 and store.published() == [merged]
    assert store.add_cosignatures(cosigned, witness_keys=keys) == merged  # idempotent
    later = CosignatureV1Signer("witness.example", bytes([7] * 32), clock=lambda: T0 + 1)
    # One line per key.
    assert store.add_cosignatures(sign_note(text, [later]), witness_keys=keys) == merged
    with pytest.raises(UsageError):  # not a kept checkpoint
        store.add_cosignatures(
            sign_note(text.replace(b"\n1\n", b"\n2\n"), [witness]), witness_keys=keys
        )
    forged = sign_note(text, [Ed25519Signer(f"{ORIGIN}/default", bytes(32))])
    with pytest.raises(UsageError):  # the log's name under another key
        store.add_cosignatures(forged, witness_keys=keys)
    (ours,) = sigs
    flipped = Signature(ours.name, ours.key_id, bytes([ours.sig[0] ^ 1]) + ours.sig[1:])
    with pytest.raises(InvalidSignatureError):
        store.add_cosignatures(
            format_note(text, [flipped, *parse_note(merged)[1][1:]]), witness_keys=keys
        )


def test_a_second_root_for_one_size_is_corrupt(env: Env, store: JournalStore) -> None:
    sealed_run(store, "r")
    other = sign_note(f"{ORIGIN}/default\n1\n{'A' * 43}=\n".encode(), [env.key.signer()])
    hook(store, "_execute_for_test")(
        "INSERT INTO checkpoint (tenant, size, note) VALUES (?, ?, ?)", ("default", 1, other)
    )
    with pytest.raises(errors.CorruptError, match="two roots"):
        store.sign_checkpoint()


# --- indexes -----------------------------------------------------------------------------------


def test_the_outcome_index_follows_the_last_conclusion(store: JournalStore) -> None:
    store.append(1, [concluded("a", "failed")])
    store.append(1, [concluded("b", "quarantined")])
    store.append(1, [concluded("c", "quarantined")])
    assert store.runs_by_outcome("failed", 10) == ["a"]
    assert store.runs_by_outcome("quarantined", 10) == ["c", "b"]
    assert store.runs_by_outcome("quarantined", 1) == ["c"]
    store.append(1, [note("a"), concluded("a", "failed"), concluded("a", "succeeded")])
    assert store.count_by_outcome("failed") == 0
    assert store.runs_by_outcome("succeeded", 10) == ["a"]
    store.append(1, [concluded("b", "quarantined")])  # a fresh ordinal: now the newest
    assert store.runs_by_outcome("quarantined", 10) == ["b", "c"]
    assert store.count_by_outcome("quarantined") == 2 and store.count_by_outcome("nope") == 0


def test_case_history_selects_one_case(store: JournalStore) -> None:
    store.append(1, [note("r1", case="A"), note("r1"), note("r1", case="A")])
    store.append(1, [note("r2", case="B"), note("r2", case="A")])
    history = store.case_history("A", 100)
    assert [(r.run, r.seq) for r in history] == [("r1", 1), ("r1", 3), ("r2", 2)]
    assert all(r.body().case == "A" for r in history)
    assert len(store.case_history("A", 1)) == 1


def test_recent_runs_page_in_a_total_order(env: Env, store: JournalStore) -> None:
    for run in ("b", "a", "d", "c"):
        store.append(1, [note(run)])
    env.clock.now += 1
    store.append(1, [note("a")])
    full = store.recent_runs(None, 100)
    assert full == [("a", T0 + 1), ("d", T0), ("c", T0), ("b", T0)]
    pages: list[tuple[str, int]] = []
    cursor: tuple[int, str] | None = None
    while True:
        page = store.recent_runs(cursor, 2)
        assert len(page) <= 2
        pages += page
        if len(page) < 2:
            break
        cursor = (page[-1][1], page[-1][0])
    assert pages == full
    assert store.runs(None, 10) == ["a", "b", "c", "d"] and store.runs("b", 1) == ["c"]


@pytest.mark.parametrize("limit", [0, -1, True, 2**63])
def test_listing_limits_are_at_least_one(store: JournalStore, limit: Any) -> None:
    for listing in (
        lambda: store.read_page("r", 1, limit),
        lambda: store.runs_by_outcome("failed", limit),
        lambda: store.recent_runs(None, limit),
        lambda: store.abandoned_runs(limit),
        lambda: store.seals(-1, limit),
    ):
        with pytest.raises(UsageError):
            listing()


def test_cancellation_is_unfenced_and_the_first_asker_wins(store: JournalStore) -> None:
    store.acquire("r", "someone-else", LONG)
    assert store.request_cancel("r", "alice", "first")
    assert not store.request_cancel("r", "bob", "second")
    c = store.cancellation("r")
    assert c is not None and (c.actor, c.reason, c.requested_at) == ("alice", "first", T0)
    assert store.cancellation("untouched") is None


def test_listings_refuse_bad_stored_run_ids(store: JournalStore) -> None:
    sql = hook(store, "_execute_for_test")
    sql("INSERT INTO run_outcome VALUES ('default', 'bad id', 'failed', 99)")
    sql("INSERT INTO run_activity VALUES ('default', 'bad/id', 5)")
    sql("INSERT INTO run_lease VALUES ('default', '', 'w', 1, 0, ?)", (False,))
    for listing in (
        lambda: store.runs_by_outcome("failed", 10),
        lambda: store.recent_runs(None, 10),
        lambda: store.runs(None, 10),
        lambda: store.abandoned_runs(10),
    ):
        with pytest.raises(errors.CorruptError, match="run ID"):
            listing()


# --- tenants, opening, initialisation ----------------------------------------------------------


def test_tenants_are_isolated(env: Env) -> None:
    t1, t2 = env.open("t1"), env.open("t2")
    assert (t1.origin, t2.origin) == (f"{ORIGIN}/t1", f"{ORIGIN}/t2")
    sealed_run(t1, "r")
    t1.request_cancel("r", "alice", "why")
    assert t2.read("r") == [] and t2.head("r").seq == 0 and t2.cancellation("r") is None
    assert t2.sealed("r") is None and t2.runs(None, 10) == [] and t2.recent_runs(None, 10) == []
    assert t2.runs_by_outcome("succeeded", 10) == [] and t2.checkpoint().size == 0
    sealed_run(t2, "x")
    sealed_run(t2, "r")  # the same run ID, another tenant: its own chain and position
    assert [s.position for s in t2.seals()] == [0, 1] and t1.checkpoint().size == 1
    for bad in ("", "a/b", "a:b", "A", "x" * 65, "a\n"):
        with pytest.raises(MalformedError):
            env.open(bad)


def test_open_refuses_an_uninitialised_store(tmp_path: Path, pg_schema: Any) -> None:
    with pytest.raises(UsageError, match="not initialised: run tlog-store init"):
        open_store(db=str(tmp_path / "missing.db"))
    assert not (tmp_path / "missing.db").exists()
    with pytest.raises(UsageError, match="not initialised: run tlog-store init"):
        open_store(postgres=pg_schema.conninfo)


def test_an_unreachable_server_is_a_backend_error() -> None:
    with pytest.raises(errors.BackendError, match="cannot open"):
        open_store(postgres="postgresql://nobody@127.0.0.1:1/none?connect_timeout=2")


def test_initialise_is_idempotent_and_refuses_another_setup(env: Env) -> None:
    b = env.backend
    init_store(db=b.db, postgres=b.postgres, origin=ORIGIN, key=env.key)
    with pytest.raises(UsageError, match="another log key"):
        init_store(db=b.db, postgres=b.postgres, origin=ORIGIN, key=generate_key(ORIGIN))
    with pytest.raises(UsageError, match="origin"):
        init_store(db=b.db, postgres=b.postgres, origin="other.example", key=env.key)
    with pytest.raises(UsageError):
        env.open(key=generate_key(ORIGIN))
    with pytest.raises(UsageError):
        env.open(key=generate_key("w", key_type=0x04))


def test_concurrent_initialisation_succeeds(backend: Any) -> None:
    key = generate_key(ORIGIN)
    results = in_threads(
        4, lambda _: init_store(db=backend.db, postgres=backend.postgres, origin=ORIGIN, key=key)
    )
    assert results == [None] * 4
    with open_store(db=backend.db, postgres=backend.postgres, key=key) as s:
        assert s.checkpoint().size == 0


def test_is_shared_and_the_default_clock(
    env: Env, backend: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = env.open(clock=None)
    assert store.is_shared() == (backend.name == "postgres")
    real_now = int(time.time())
    monkeypatch.setattr("store.sqlcore.time.time", lambda: 1000.0)
    lease = store.acquire("r", "w", 10)
    if backend.name == "postgres":  # the server's clock, not the process's
        assert abs(lease.expires_at - 10 - real_now) < 60
    else:
        assert lease.expires_at == 1010


# --- concurrency -------------------------------------------------------------------------------


def test_parallel_first_acquires_have_one_winner(env: Env) -> None:
    handles = [env.open() for _ in range(6)]
    results = in_threads(6, lambda i: handles[i].acquire("r", f"w{i}", LONG))
    winners = [r for r in results if not isinstance(r, Exception)]
    assert len(winners) == 1 and winners[0].epoch == 1
    assert all(isinstance(r, errors.LeaseHeldError) for r in results if r not in winners)


def test_parallel_appends_without_a_lease_stay_contiguous(env: Env) -> None:
    handles = [env.open() for _ in range(4)]
    results = in_threads(4, lambda i: [handles[i].append(1, [note("r", i)]) for _ in range(5)])
    assert not [r for r in results if isinstance(r, Exception)]
    assert [r.seq for r in handles[0].read("r")] == list(range(1, 21))
    handles[0].verify("r")


def test_one_handle_is_safe_from_several_threads(store: JournalStore) -> None:
    lease = store.acquire("r", "w", LONG)
    results = in_threads(4, lambda i: [store.append(lease.epoch, [note("r", i)]) for _ in range(5)])
    assert not [r for r in results if isinstance(r, Exception)]
    assert [r.seq for r in store.read("r")] == list(range(1, 21))


def test_parallel_effect_starts_have_one_winner(env: Env) -> None:
    handles = [env.open() for _ in range(4)]
    results = in_threads(4, lambda i: handles[i].append(1, [started("r", "k")]))
    assert len([r for r in results if isinstance(r, list)]) == 1
    assert all(
        isinstance(r, errors.DuplicateEffectError) for r in results if not isinstance(r, list)
    )


def test_parallel_seals_give_a_dense_log(env: Env) -> None:
    handles = [env.open() for _ in range(4)]
    heads = in_threads(4, lambda i: [sealed_run(handles[i], f"r{i}-{j}") for j in range(3)])
    assert not [h for h in heads if isinstance(h, Exception)]
    store = handles[0]
    seals = store.seals()
    assert [s.position for s in seals] == list(range(12))
    cp = store.checkpoint()
    assert cp.root == merkle.root_of_entries([s.head for s in seals])
    for s in seals:
        inc = store.inclusion_proof(s.run)
        assert inc is not None
        merkle.verify_inclusion(inc.index, cp.size, merkle.leaf_hash(s.head), inc.proof, cp.root)


# --- commit without a verdict, retries ----------------------------------------------------------


class _FaultyConnection:
    """Wraps a driver connection: ``before(sql)`` runs before each statement is sent."""

    def __init__(self, conn: Any, before: Callable[[str], None]) -> None:
        self._conn = conn
        self._before = before

    def cursor(self) -> Any:
        return _FaultyCursor(self._conn.cursor(), self._before)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


class _FaultyCursor:
    def __init__(self, cur: Any, before: Callable[[str], None]) -> None:
        self._cur = cur
        self._before = before

    def execute(self, sql: str, *args: Any) -> Any:
        self._before(sql)
        return self._cur.execute(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cur, name)


def _inject(store: JournalStore, before: Callable[[Any, str], None]) -> None:
    session = store._session  # type: ignore[attr-defined]
    session._conn.cursor().execute("SELECT 1")  # connected
    real = session._conn
    session._conn = _FaultyConnection(real, lambda sql: before(real, sql))


def test_a_commit_without_a_verdict_is_commit_unknown(env: Env, backend: Any) -> None:
    store = env.open()
    lease = store.acquire("r", "w", LONG)
    armed = [True]

    def before(conn: Any, sql: str) -> None:
        if sql != "COMMIT" or not armed[0]:
            return
        armed[0] = False
        if backend.name == "postgres":
            # The server goes away between the last statement and COMMIT.
            with psycopg.connect(backend.postgres, autocommit=True) as killer:
                killer.execute("SELECT pg_terminate_backend(%s)", (conn.info.backend_pid,))
        else:
            import sqlite3

            e = sqlite3.OperationalError("disk I/O error")
            e.sqlite_errorname = "SQLITE_IOERR_FSYNC"
            raise e

    _inject(store, before)
    with pytest.raises(errors.CommitUnknownError):
        store.append(lease.epoch, [note("r")])
    # The handle recovers (reconnecting if it must); here the commit did not land.
    assert store.read("r") == []
    store.append(lease.epoch, [note("r")])
    assert [r.seq for r in store.read("r")] == [1]


def test_serialization_failures_retry_the_whole_transaction(pg_schema: Any) -> None:
    key = generate_key(ORIGIN)
    init_store(postgres=pg_schema.conninfo, origin=ORIGIN, key=key)
    with open_store(postgres=pg_schema.conninfo, key=key, clock=Clock()) as store:
        failures = [2]

        def before(conn: Any, sql: str) -> None:
            if sql == "COMMIT" and failures[0]:
                failures[0] -= 1
                raise psycopg.errors.SerializationFailure("injected")

        _inject(store, before)
        records = store.append(1, [note("r"), note("r")])
        assert [r.seq for r in records] == [1, 2]
        assert store.read("r") == records  # written once, by the third attempt


def test_postgres_commits_are_synchronous_whatever_the_default(pg_schema: Any) -> None:
    """A database, role or connection string may default to synchronous_commit = off (a crash
    could then undo a reported append or seal): the store's sessions set it on."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    options = conninfo_to_dict(pg_schema.conninfo).get("options", "")
    lax = make_conninfo(pg_schema.conninfo, options=f"{options} -c synchronous_commit=off")
    with psycopg.connect(lax) as probe:  # the default this test sets up is really off
        assert probe.execute("SHOW synchronous_commit").fetchone() == ("off",)
    key = generate_key(ORIGIN)
    init_store(postgres=lax, origin=ORIGIN, key=key)
    with open_store(postgres=lax, key=key, clock=Clock()) as store:
        store.append(1, [note("r")])
        # The session's own connection (private: there is no other way to ask it).
        conn = store._session._conn  # type: ignore[attr-defined]
        assert conn.execute("SHOW synchronous_commit").fetchone() == ("on",)
