"""Export and restore of a tenant's inbox (store.export, store.inbox.transfer; the file's inbox
section is docs/export-format.md §4.7), on SQLite and PostgreSQL.

Issue 14's acceptance, tested here:

* **export and restore carry the inbox; export → restore → export stays byte-identical**: an
  inbox with live, claimed (held and released), delivered, dead-lettered and erased events,
  registered waits (a case, steps, several keys), the wait counter beyond the waits, and
  inbox checkpoints (of size 0, cosigned by a witness), beside a journal whose runs hold
  ``EventDelivered`` records (one of them sealed) — on each backend and from SQLite to
  PostgreSQL. The restored inbox works: a live event is claimable, the next wait is numbered
  after the counter, receipts verify under the restored checkpoints.
* **an auditor can check that every event was claimed, dead-lettered or is still live**: the
  verifier's summary counts them, and the accounting adds up to the inbox log's size, which
  the inbox checkpoints sign; an event line dropped or reordered is refused.
* **journaled delivery**: every ``EventDelivered`` record is matched with the event it names,
  claimed by its run with its seq, and every delivered event with its record; the export still
  verifies with the payload erased.
* An empty inbox adds nothing: the export is the journal's alone.
* Tampering: every byte of the inbox section flipped is refused at a named line; a dropped,
  reordered or duplicated event line, a payload that is not its hash's, a delivery record naming
  another event, a claim by another run, a delivery left out, a delivery record without an
  inbox section — each refused, also with the digest recomputed. The parallel verifier gives the
  one-pass verifier's verdict, message and summary on each.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from store.api import Append, JournalStore
from store.export import RestoreSummary, export_store, restore_store
from store.inbox import make_wait
from store.open import init_store, open_store
from tests.conftest import POSTGRES_URL, Backend, require_postgres
from tests.exportfile import join, lines_of, redigest
from tests.store.helpers import FakeClock
from tlog import merkle
from tlog.cosignature import CosignatureV1Signer
from tlog.errors import TlogError
from tlog.export import ExportVerificationError, read_export, verify_export, write_export
from tlog.inbox import make_event
from tlog.journal import chain_hash
from tlog.keys import format_vkey, generate_key
from tlog.note import Signature, add_signatures, parse_note
from tlog.policy import Policy
from tlog.proof import TlogProof
from verifier.export import verify_export_file
from verifier.parallel import verify_export_parallel

ORIGIN = "example.com/journal"
LOG_KEY = generate_key(ORIGIN, seed=hashlib.sha256(b"inbox export test: log key").digest())
W1 = CosignatureV1Signer("witness.example/one", hashlib.sha256(b"w1").digest(), clock=lambda: 7)
W1_VKEY = format_vkey(W1.verifier())
LINE = re.compile(r"line (\d+): ")


class Databases:
    """Fresh initialised stores: SQLite files, PostgreSQL schemas (dropped after)."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.count = 0
        self.schemas: list[str] = []
        self.handles: list[JournalStore] = []

    def new(self, kind: str) -> Backend:
        self.count += 1
        if kind == "sqlite":
            where = Backend("sqlite", db=str(self.tmp / f"db{self.count}.sqlite"))
        else:
            require_postgres()
            name = f"t_{uuid.uuid4().hex[:16]}"
            with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
                conn.execute(f'CREATE SCHEMA "{name}"')
            self.schemas.append(name)
            conninfo = make_conninfo(POSTGRES_URL, options=f"-c search_path={name}")
            where = Backend("postgres", postgres=conninfo)
        init_store(db=where.db, postgres=where.postgres, origin=ORIGIN, key=LOG_KEY)
        return where

    def open(self, where: Backend, clock: FakeClock | None = None) -> JournalStore:
        s = open_store(db=where.db, postgres=where.postgres, key=LOG_KEY, clock=clock)
        self.handles.append(s)
        return s

    def close(self) -> None:
        for h in self.handles:
            h.close()
        for name in self.schemas:
            with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA "{name}" CASCADE')


@pytest.fixture
def dbs(tmp_path: Path) -> Iterator[Databases]:
    d = Databases(tmp_path)
    yield d
    d.close()


def inbox_of(store: JournalStore) -> Any:
    return store.inbox


def build(store: JournalStore, clock: FakeClock) -> None:
    """A journal and an inbox that use everything the inbox section carries."""
    ib = inbox_of(store)
    ib.sign_checkpoint()  # an inbox checkpoint of size 0
    # run-a waits, an event arrives and resumes it; its delivery is journaled; it is sealed.
    ea = store.acquire("run-a", "w", 60).epoch
    store.append(ea, [Append("run-a", "Started", {"order": 1})])
    assert ib.wait(make_wait("run-a", "pay", "Paid", [["order", "1"]], case="c-1", step=2)) is None
    clock.advance(3)
    got = ib.buffer(make_event("shop", "m-1", "Paid", [["order", "1"]], {"amount": 5}))
    assert got.matched is not None
    ib.journal_delivery("run-a", ea, "shop", "m-1")
    store.append(ea, [Append("run-a", "Done")])
    store.seal("run-a", ea, "succeeded")
    store.sign_checkpoint()
    # run-b claims an event that waited in the buffer, journals it, unsubscribes (payload shed).
    ib.buffer(make_event("bank", "t 1", "Refund", [["acct", "x"], ["order", "2"]], [1, "ü"]))
    eb = store.acquire("run-b", "w", 60).epoch
    store.append(eb, [Append("run-b", "Started")])
    claimed = ib.wait(make_wait("run-b", "refund", "Refund", [["order", "2"]]))
    assert claimed is not None
    ib.journal_delivery("run-b", eb, "bank", "t 1")
    ib.unsubscribe("run-b")
    # run-c holds a claimed event whose delivery is not journaled yet (it crashed).
    ib.buffer(make_event("shop", "m-3", "Paid", [["order", "3"]], None))
    assert ib.claim(make_wait("run-c", "pay", "Paid", [["order", "3"]])) is not None
    note = ib.sign_checkpoint()  # size 3, cosigned by W1
    text, _ = parse_note(note)
    ib.log.add_cosignatures(
        add_signatures(note, [Signature(W1.name, W1.key_id, W1.sign(text))]),
        witness_keys=[W1_VKEY],
    )
    # Dead letters: two old events swept, one of them erased.
    ib.buffer(make_event("shop", "old-1", "Paid", [["order", "9"]], {"x": 1}))
    ib.buffer(make_event("shop", "old-2", "Shipped", [["order", "9"]], "text"))
    clock.advance(100)
    assert ib.sweep(clock.now - 50, "nobody waited") == 2
    ib.erase("shop", "old-2")
    # Live events, one erased; waits that nothing matched; a wait registered and removed.
    ib.buffer(make_event("crm", "l-1", "Lead", [["email", "a@b"], ["region", "eu"]], {"n": 1}))
    ib.buffer(make_event("crm", "l-2", "Lead", [["email", "c@d"]], {"n": 2}))
    ib.erase("crm", "l-2")
    ib.subscribe(make_wait("run-d", "gone", "Nope", [["k", "v"]]))
    ib.unsubscribe("run-d")
    ib.subscribe(make_wait("run-e", "e1", "Paid", [["order", "7"], ["order", "8"]], step=4))
    clock.advance(1)
    ib.subscribe(make_wait("run-f", "f1", "Shipped", [["order", "7"]], case="c-2"))
    ib.sign_checkpoint()  # size 7
    ef = store.acquire("run-f", "w", 60).epoch
    store.append(ef, [Append("run-f", "Started")])


def populate(dbs: Databases, kind: str) -> JournalStore:
    clock = FakeClock()
    store = dbs.open(dbs.new(kind), clock)
    build(store, clock)
    return store


def export_bytes(store: JournalStore) -> bytes:
    out = io.BytesIO()
    export_store(store, out)
    return out.getvalue()


def restore_bytes(store: JournalStore, data: bytes, tmp: Path) -> RestoreSummary:
    path = tmp / f"restore-{uuid.uuid4().hex[:8]}.export"
    path.write_bytes(data)
    return restore_store(store, path)


def inbox_state(store: JournalStore) -> dict[str, Any]:
    ib = inbox_of(store)
    return {
        "events": ib.events(-1, 100),
        "waits": ib.waiting(100),
        "counts": ib.counts(),
        "published": ib.log.published(),
        "checkpoint": ib.checkpoint(),
    }


# --- the acceptance ------------------------------------------------------------------------------


@pytest.mark.parametrize("kinds", [("sqlite", "sqlite"), ("postgres", "postgres"),
                                   ("sqlite", "postgres")])  # fmt: skip
def test_export_restore_export_with_an_inbox_is_byte_identical(
    dbs: Databases, tmp_path: Path, kinds: tuple[str, str]
) -> None:
    source = populate(dbs, kinds[0])
    data = export_bytes(source)
    summary = verify_export(io.BytesIO(data), log_key=source.log_vkey)
    inbox = summary.inbox
    assert inbox is not None
    assert inbox.to_json() | {"root": None} == {
        "origin": f"{ORIGIN}/default/inbox",
        "size": 7,
        "root": None,
        "checkpoints": 3,
        "checkpoint_sizes": [0, 3, 7],
        "consistency_proofs": 1,
        "live": 2,
        "claimed": 3,
        "dead": 2,
        "erased": 3,  # run-b's shed payload, an erased dead letter, an erased live event
        "delivered": 2,
        "held": 2,
        "waits": 2,
    }
    assert inbox.cosignatures == {W1_VKEY: 1}
    assert inbox.live + inbox.claimed + inbox.dead == inbox.size
    assert inbox.root == inbox_of(source).checkpoint().root

    target = dbs.open(dbs.new(kinds[1]))
    restored = restore_bytes(target, data, tmp_path)
    assert restored.inbox == inbox
    assert export_bytes(target) == data
    assert inbox_state(target) == inbox_state(source)

    # The restored inbox works on: numbering, matching, receipts.
    ib = inbox_of(target)
    assert ib.subscribe(make_wait("run-g", "g", "Other", [["k", "v"]]))
    assert ib.waiting(10)[-1].number == inbox_of(source).waiting(10)[-1].number + 1
    got = ib.claim(make_wait("run-h", "h", "Lead", [["region", "eu"]]))
    assert got is not None and got.event.id == "l-1"
    receipt: TlogProof = ib.receipt("shop", "m-1")
    assert receipt == inbox_of(source).receipt("shop", "m-1")
    assert receipt.checkpoint == inbox_of(source).log.published()[-1]
    # Identity of an erased payload survives everything.
    assert ib.get("crm", "l-2").erased


def test_the_inbox_takes_its_key_locks_on_postgresql(dbs: Databases) -> None:
    # store.inbox.core named its per-key locks with NUL separators, which PostgreSQL text
    # refuses: every wait, claim and matching buffer failed there (fixed: U+001F).
    ib = inbox_of(dbs.open(dbs.new("postgres")))
    assert ib.wait(make_wait("run-a", "k", "Paid", [["order", "1"]])) is None
    assert ib.buffer(make_event("s", "1", "Paid", [["order", "1"]], None)).matched is not None


def test_an_empty_inbox_adds_nothing(dbs: Databases) -> None:
    clock = FakeClock()
    store = dbs.open(dbs.new("sqlite"), clock)
    e = store.acquire("run-a", "w", 60).epoch
    store.append(e, [Append("run-a", "Started")])
    before = export_bytes(store)
    assert b"\ninbox " not in before
    ib = inbox_of(store)
    ib.subscribe(make_wait("run-a", "x", "K", [["k", "v"]]))  # creates the schema, the counter
    ib.unsubscribe("run-a")
    assert export_bytes(store) == before
    assert verify_export(io.BytesIO(before)).inbox is None


def test_the_export_verifies_with_payloads_erased_everywhere(dbs: Databases) -> None:
    source = populate(dbs, "sqlite")
    ib = inbox_of(source)
    for ev in ib.events(-1, 100):
        ib.erase(ev.source, ev.id)
    data = export_bytes(source)
    assert b"\npayload " not in data
    s = verify_export(io.BytesIO(data))
    assert s.inbox is not None and (s.inbox.erased, s.inbox.delivered) == (7, 2)


def test_a_restore_needs_an_empty_inbox(dbs: Databases, tmp_path: Path) -> None:
    data = export_bytes(populate(dbs, "sqlite"))
    target = dbs.open(dbs.new("sqlite"))
    inbox_of(target).buffer(make_event("s", "1", "K", [["k", "v"]], None))
    with pytest.raises(TlogError, match="empty"):
        restore_bytes(target, data, tmp_path)


# --- tampering --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    d = Databases(tmp_path_factory.mktemp("inbox-export"))
    try:
        clock = FakeClock()
        store = d.open(d.new("sqlite"), clock)
        build(store, clock)
        return export_bytes(store)
    finally:
        d.close()


def refused(data: bytes) -> TlogError:
    with pytest.raises(TlogError) as info:
        verify_export(io.BytesIO(data))
    assert LINE.match(str(info.value)), str(info.value)
    return info.value


def line_no(e: TlogError) -> int:
    m = LINE.match(str(e))
    assert m is not None
    return int(m.group(1))


def index(lines: list[bytes], prefix: bytes, nth: int = 0) -> int:
    return [i for i, x in enumerate(lines) if x.startswith(prefix)][nth]


def test_the_export_round_trips_through_the_reader_and_writer(exported: bytes) -> None:
    out = io.BytesIO()
    write_export(out, read_export(io.BytesIO(exported)))
    assert out.getvalue() == exported


def test_every_byte_of_the_inbox_section_is_guarded(exported: bytes) -> None:
    start = exported.index(b"\ninbox ") + 1
    first = exported[:start].count(b"\n") + 1
    runs = exported[: exported.index(b"\nrun ")].count(b"\n") + 2
    for at in range(start, len(exported) - 60):  # the end line's digest: test_export.py's
        changed = bytearray(exported)
        changed[at] ^= 0x01
        e = refused(bytes(changed))
        # Named at the line changed, or earlier where the check is: the inbox line, the
        # inbox checkpoint whose root no longer matches, the EventDelivered record of a run.
        assert runs <= line_no(e) <= exported[:at].count(b"\n") + 1 or line_no(e) >= first


def forged(lines: list[bytes]) -> bytes:
    """An export with the digest recomputed (what a forger does)."""
    return redigest(join(lines))


def event_obj(line: bytes) -> dict[str, Any]:
    value: dict[str, Any] = json.loads(line[len(b"event ") :])
    return value


def event_text(obj: dict[str, Any]) -> bytes:
    return b"event " + json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def test_an_event_line_dropped_reordered_or_twice_is_refused(exported: bytes) -> None:
    lines = lines_of(exported)
    i = index(lines, b"event ", 4)  # a dead letter without payload line
    assert not lines[i + 1].startswith(b"payload ")
    e = refused(forged(lines[:i] + lines[i + 1 :]))
    assert "position" in str(e) and line_no(e) == i + 1
    j = index(lines, b"event ", 3)
    k = index(lines, b"event ", 5)
    swapped = lines[:j] + lines[i : i + 1] + lines[j:i] + lines[i + 1 :]
    assert "the next is 3" in str(refused(forged(swapped)))
    twice = lines[:k] + lines[i : i + 1] + lines[k:]
    assert "the next is 5" in str(refused(forged(twice)))
    # The last event dropped and the size lowered: the inbox checkpoint of size 7 is refused.
    last = index(lines, b"event ", 6)
    inbox = index(lines, b"inbox ")
    fewer = list(lines)
    fewer[inbox] = fewer[inbox].replace(b" 7 2 ", b" 6 2 ")
    del fewer[last : last + 2]
    e = refused(forged(fewer))
    assert "larger than the inbox log" in str(e)


def test_two_events_of_one_source_and_id_are_refused(exported: bytes) -> None:
    """The inbox deduplicates by (source, id): an export holding a pair twice (entry and all
    recomputed by a forger) is refused at the second, before a restore could fail on it."""
    lines = lines_of(exported)
    first, second = index(lines, b"event ", 3), index(lines, b"event ", 5)
    one, other = event_obj(lines[first])["entry"], event_obj(lines[second])["entry"]
    assert (one["source"], one["id"]) != (other["source"], other["id"])
    obj = event_obj(lines[second])
    obj["entry"] = {**other, "source": one["source"], "id": one["id"]}
    copy = list(lines)
    copy[second] = event_text(obj)
    e = refused(forged(copy))
    assert "deduplicated by (source, id)" in str(e) and line_no(e) == second + 1, e


def test_a_payload_that_is_not_its_hash_is_refused(exported: bytes) -> None:
    lines = lines_of(exported)
    i = index(lines, b"payload ")
    lines[i] = b'payload {"amount":6}'
    e = refused(forged(lines))
    assert isinstance(e, ExportVerificationError) and line_no(e) == i + 1
    assert "payload's SHA-256" in str(e)


def test_a_claim_by_another_run_or_a_delivery_left_out_is_refused(exported: bytes) -> None:
    lines = lines_of(exported)
    i = index(lines, b"event ")
    obj = event_obj(lines[i])
    assert obj["claimed_by"] == "run-a" and obj["delivered_seq"] == 2
    lines[i] = event_text(obj | {"claimed_by": "run-z"})
    e = refused(forged(lines))
    assert line_no(e) == i + 1 and "claimed by run run-z" in str(e)
    lines[i] = event_text({k: v for k, v in obj.items() if k != "delivered_seq"})
    e = refused(forged(lines))
    assert line_no(e) == i + 1 and "records no delivery" in str(e)
    lines[i] = event_text(obj | {"delivered_seq": 3})
    assert "delivered by its record 3" in str(refused(forged(lines)))


def rechain(lines: list[bytes], run_line: int) -> None:
    """Recompute the hashes of the records of the (unsigned) run whose run line is given."""
    prev = bytes(32)
    i = run_line + 1
    while i < len(lines) and not lines[i].startswith((b"run ", b"inbox ", b"end ")):
        body = lines[i][45:]
        h = chain_hash(prev, body)
        lines[i] = base64.b64encode(h) + b" " + body
        prev = h
        i += 1


def test_a_delivery_record_naming_another_event_is_refused(exported: bytes) -> None:
    lines = lines_of(exported)
    run_b = index(lines, b"run run-b ")
    i = next(j for j in range(run_b, len(lines)) if b'"kind":"EventDelivered"' in lines[j])
    for old, new, what in (
        (b'"source":"bank"', b'"source":"bonk"', "source differs"),
        (b'"id":"t 1"', b'"id":"t 2"', "id differs"),
        (b'"position":1', b'"position":2', "no EventDelivered record"),
        (b'"position":1', b'"position":9', "lacks"),
        (b'"position":1', b'"position":0', "second delivery"),
    ):
        changed = list(lines)
        changed[i] = changed[i].replace(old, new)
        assert changed[i] != lines[i]
        rechain(changed, run_b)
        e = refused(forged(changed))
        assert what in str(e), (what, str(e))


def test_a_delivery_record_without_an_inbox_section_is_refused(exported: bytes) -> None:
    lines = lines_of(exported)
    cut = lines[: index(lines, b"inbox ")] + lines[-1:]
    e = refused(forged(cut))
    assert "no inbox section" in str(e)
    assert line_no(e) == index(lines, b"run run-a ") + 3  # its EventDelivered record


def test_the_parallel_verifier_agrees(exported: bytes, tmp_path: Path) -> None:
    lines = lines_of(exported)
    i = index(lines, b"event ")
    run_b = index(lines, b"run run-b ")
    j = next(k for k in range(run_b, len(lines)) if b'"kind":"EventDelivered"' in lines[k])
    bad_delivery = list(lines)
    bad_delivery[j] = bad_delivery[j].replace(b'"id":"t 1"', b'"id":"t 2"')
    rechain(bad_delivery, run_b)
    cases = [
        exported,
        forged(lines[:i] + lines[i + 2 :]),
        forged(lines[: index(lines, b"inbox ")] + lines[-1:]),
        forged(bad_delivery),
        forged(
            [*lines[:i], event_text(event_obj(lines[i]) | {"claimed_by": "x"}), *lines[i + 1 :]]
        ),
    ]
    for n, data in enumerate(cases):
        path = tmp_path / f"case{n}.export"
        path.write_bytes(data)
        try:
            want: Any = verify_export(io.BytesIO(data))
        except TlogError as e:
            want = (type(e), str(e))
        for jobs, chunk in ((1, 200), (2, 300)):
            try:
                got: Any = verify_export_parallel(path, jobs=jobs, chunk_bytes=chunk)
            except TlogError as e:
                got = (type(e), str(e))
            assert got == want, (n, jobs)


def test_the_inbox_log_is_the_entries_tree(exported: bytes) -> None:
    entries = []
    for item in read_export(io.BytesIO(exported)):
        raw = getattr(item, "entry_raw", None)
        if raw is not None:
            entries.append(merkle.leaf_hash(raw))
    tree = merkle.MemoryHashStore()
    tree.extend(entries)
    s = verify_export(io.BytesIO(exported))
    assert s.inbox is not None and s.inbox.root == tree.root()


def test_the_auditor_report_gives_the_inbox_accounting(exported: bytes, tmp_path: Path) -> None:
    path = tmp_path / "inbox.export"
    path.write_bytes(exported)
    header = read_export(io.BytesIO(exported))
    log_vkey = next(header).header.log_key  # type: ignore[union-attr]
    policy = Policy.parse(f"log {log_vkey}\nquorum none\n".encode())
    for floor in (0, 1 << 30):  # chunked (parallel code) and streaming
        report = verify_export_file(str(path), policy=policy, parallel_min_bytes=floor)
        out = report.to_json()
        assert out["status"] == 0, out
        assert out["facts"]["inbox"]["size"] == 7
        assert (out["facts"]["inbox"]["live"], out["facts"]["inbox"]["claimed"]) == (2, 3)
        names = [c["id"] for c in out["checks"]]
        assert {"inbox-log", "inbox-accounting", "inbox-deliveries"} <= set(names)
        assert any("signed by nothing" in n for n in out["notes"])
