"""Export and restore of a journal store (store.export), on SQLite and PostgreSQL; the file is
docs/export-format.md, the how-to docs/embedder-guide.md §4.

The issue's acceptance, tested here:

* **Export, restore, export again gives byte-identical files**: a journal with sealed and
  unsealed runs, several epochs, signed and unsigned records, effect keys, cases, conclusions
  and checkpoints at several sizes (one of size 0, some cosigned by two cosignature/v1
  witnesses) is exported, restored into a fresh store and exported again — on each backend, from
  SQLite to PostgreSQL and back, and over Hypothesis-drawn journals; and a journal of admitted
  runs (one key retired and issued again), waiting runs and a seal that overrides an earlier
  conclusion, whose derived indexes (admission keys, runs by source, waiting runs, outcomes) the
  restore rebuilds from the records.
* **Every single-byte change to an export makes restore refuse it with a message naming the
  place**: at every byte of a small export (about 2 KB), xor 0x01, xor 0x20 and deletion each
  make :func:`restore_store` raise a :class:`TlogError` whose message starts with ``"line N: "``,
  with N no earlier than the item holding the changed byte, and the target store stays empty
  (pass 1 refused before anything was written).

Also: the refusals (a non-empty target, another log key or tenant, untrusted or missing record
signatures), the store's disagreements in pass 2 (simulated by monkeypatching the target's
methods) reported with run and seq, the export's key declarations, the contract additions
(``log_vkey``, ``append(signatures=…)``, ``import_checkpoint``) on both backends, paging, and
memory that does not grow with the journal.
"""

from __future__ import annotations

import base64
import hashlib
import io
import re
import tempfile
import tracemalloc
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import psycopg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from psycopg.conninfo import make_conninfo

import store.export as store_export
from store.api import Append, JournalStore, Seal, WaitingRun
from store.errors import CorruptError, DuplicateAdmissionError, DuplicateEffectError
from store.export import RestoreError, RestoreSummary, export_store, restore_store
from store.open import init_store, open_store
from tests.conftest import POSTGRES_URL, Backend, require_postgres
from tests.store.helpers import T0, FakeClock, delete_run
from tlog import merkle
from tlog.checkpoint import Checkpoint
from tlog.cosignature import CosignatureV1Signer
from tlog.errors import InvalidSignatureError, MalformedError, TlogError, UsageError
from tlog.export import CheckpointItem, ExportVerificationError, read_export, verify_export
from tlog.journal import Body, Record, RecordSignature, make_record, sign_record
from tlog.keys import SignerKey, format_vkey, generate_key
from tlog.note import Ed25519Signer, Signature, add_signatures, format_note, parse_note, sign_note

ORIGIN = "example.com/journal"


def sha(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


LOG_KEY = generate_key(ORIGIN, seed=sha(b"store export test: log key"))
OTHER_KEY = generate_key(ORIGIN, seed=sha(b"store export test: another log key"))
RECORD_SIGNER = Ed25519Signer("example.com/records", sha(b"store export test: record key"))
RECORD_VKEY = format_vkey(RECORD_SIGNER.verifier())
OTHER_RECORD_SIGNER = Ed25519Signer("example.com/records", sha(b"another record key"))
W1 = CosignatureV1Signer("witness.example/one", sha(b"witness one"), clock=lambda: T0)
W2 = CosignatureV1Signer("witness.example/two", sha(b"witness two"), clock=lambda: T0 + 7)
WITNESS_VKEYS = [format_vkey(W1.verifier()), format_vkey(W2.verifier())]
LINE = re.compile(r"line (\d+): ")


# --- databases -------------------------------------------------------------------------------


class Databases:
    """Fresh initialised stores for one test: SQLite files, PostgreSQL schemas (dropped after)."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp = tmp_path
        self.count = 0
        self.schemas: list[str] = []
        self.handles: list[JournalStore] = []

    def init(self, where: Backend, key: SignerKey = LOG_KEY) -> Backend:
        init_store(db=where.db, postgres=where.postgres, origin=ORIGIN, key=key)
        return where

    def new(self, kind: str, key: SignerKey = LOG_KEY) -> Backend:
        self.count += 1
        if kind == "sqlite":
            return self.init(Backend("sqlite", db=str(self.tmp / f"db{self.count}.sqlite")), key)
        require_postgres()
        name = f"t_{uuid.uuid4().hex[:16]}"
        with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{name}"')
        self.schemas.append(name)
        conninfo = make_conninfo(POSTGRES_URL, options=f"-c search_path={name}")
        return self.init(Backend("postgres", postgres=conninfo), key)

    def open(
        self,
        where: Backend,
        *,
        tenant: str = "default",
        key: SignerKey | None = LOG_KEY,
        record_signer: Ed25519Signer | None = None,
        clock: FakeClock | None = None,
    ) -> JournalStore:
        s = open_store(
            db=where.db,
            postgres=where.postgres,
            tenant=tenant,
            key=key,
            record_signer=record_signer,
            clock=clock,
        )
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


# --- journals --------------------------------------------------------------------------------


def cosign(store: JournalStore, note: bytes, *witnesses: CosignatureV1Signer) -> bytes:
    """Have ``witnesses`` cosign a kept note and merge their lines into it."""
    text, _ = parse_note(note)
    sigs = [Signature(w.name, w.key_id, w.sign(text)) for w in witnesses]
    return store.add_cosignatures(add_signatures(note, sigs), witness_keys=WITNESS_VKEYS)


def build_journal(signed: JournalStore, plain: JournalStore) -> None:
    """A journal that uses everything an export carries (two handles on one tenant; ``signed``
    signs its records)."""
    cosign(plain, plain.sign_checkpoint(), W1)  # size 0, cosigned
    e = signed.acquire("run-a", "worker-1", 60).epoch
    signed.append(
        e,
        [
            Append("run-a", "Started", {"input": [1, "ü → ✓", None, True], "z": {}}, case="c-1"),
            Append("run-a", "EffectStarted", {"tool": "mail"}, effect_key="mail:1", case="c-1"),
        ],
    )
    signed.append(
        e,
        [
            Append("run-a", "EffectDone", effect_key="mail:1"),  # no data
            Append("run-a", "RunConcluded", {"outcome": "succeeded"}),
        ],
    )
    signed.seal("run-a", e, "succeeded")
    cosign(plain, plain.sign_checkpoint(), W1, W2)  # size 1
    # run-b: an unsigned record at epoch 1, then a signed one at epoch 2 after a hand-over.
    e1 = plain.acquire("run-b", "worker-1", 60).epoch
    plain.append(e1, [Append("run-b", "Started", 'a "quote", a \\ and a \t tab\n')])
    plain.release("run-b", e1)
    e2 = signed.acquire("run-b", "worker-2", 60).epoch
    signed.append(e2, [Append("run-b", "RunConcluded", {"outcome": "failed"}, case="c-2")])
    signed.seal("run-b", e2, "failed")
    plain.sign_checkpoint()  # size 2, the log's line only
    e = plain.acquire("run-c", "worker-1", 60).epoch
    plain.append(e, [Append("run-c", "Note")])
    plain.seal("run-c", e, "cancelled")
    cosign(plain, plain.sign_checkpoint(), W2)  # size 3
    e = plain.acquire("run-d", "worker-1", 60).epoch  # sealed after the last checkpoint
    plain.append(e, [Append("run-d", "Note", {"n": -(2**53 - 1)})])
    plain.seal("run-d", e, "succeeded")
    # Unsealed runs: one sorts before every sealed run ID; one has three epochs; one is
    # still leased; one is long enough to page.
    e = plain.acquire("A-early", "worker-1", 60).epoch
    plain.append(e, [Append("A-early", "Note", [])])
    for i in range(3):
        e = signed.acquire("run-e", "worker-1", 60).epoch
        signed.append(e, [Append("run-e", "Step", {"i": i}, case="c-1")])
        signed.release("run-e", e)
    e = plain.acquire("run-f", "worker-9", 60).epoch
    plain.append(e, [Append("run-f", "EffectStarted", effect_key="k")])
    e = plain.acquire("run-g", "worker-1", 60).epoch
    plain.append(e, [Append("run-g", "Step", {"i": i, "pad": "x" * i}) for i in range(23)])


def build_small(signed: JournalStore, plain: JournalStore) -> None:
    """A small journal (its export is about 2 KB) for the byte-by-byte changes."""
    e = signed.acquire("run-a", "w", 60).epoch
    signed.append(
        e,
        [
            Append("run-a", "Started", {"x": 1}, case="case-1"),
            Append("run-a", "RunConcluded", {"outcome": "ok"}),
        ],
    )
    signed.seal("run-a", e, "ok")
    cosign(plain, plain.sign_checkpoint(), W1)  # size 1
    e = plain.acquire("run-b", "w", 60).epoch
    plain.append(e, [Append("run-b", "EffectStarted", {"to": "a@b"}, effect_key="mail:1")])
    plain.seal("run-b", e, "failed")
    e = plain.acquire("run-c", "w", 60).epoch
    plain.append(e, [Append("run-c", "Note", "hi")])


def populate(
    dbs: Databases, where: Backend, build: Callable[[JournalStore, JournalStore], None]
) -> JournalStore:
    """Build a journal in ``where`` (initialised); return a handle on it."""
    clock = FakeClock()
    signed = dbs.open(where, record_signer=RECORD_SIGNER, clock=clock)
    plain = dbs.open(where, clock=clock)
    build(signed, plain)
    return plain


def export_bytes(store: JournalStore, **keys: Any) -> bytes:
    out = io.BytesIO()
    digest = export_store(
        store,
        out,
        # None by default: the store declares the witnesses whose cosignatures it kept.
        witness_keys=keys.get("witness_keys", ()),
        record_keys=keys.get("record_keys", [RECORD_VKEY]),
    )
    data = out.getvalue()
    assert data.endswith(b" " + base64.b64encode(digest) + b"\n")
    return data


def restore_bytes(store: JournalStore, data: bytes, tmp: Path, **kw: Any) -> RestoreSummary:
    path = tmp / f"restore-{uuid.uuid4().hex[:8]}.export"
    path.write_bytes(data)
    return restore_store(store, path, **kw)


def assert_empty(store: JournalStore) -> None:
    assert store.runs(None, 1) == []
    assert store.checkpoint().size == 0
    assert store.published() == []
    assert store.remembered_witness_keys() == []


def state(store: JournalStore) -> dict[str, Any]:
    """What a restore must reproduce, read through the contract."""
    runs: list[str] = []
    last = None
    while page := store.runs(last, 100):
        runs += page
        last = page[-1]
    return {
        "runs": runs,
        "records": {r: store.read(r) for r in runs},
        "seals": store.seals(),
        "published": store.published(),
        "checkpoint": store.checkpoint(),
        "case c-1": store.case_history("c-1", 100),
        "outcomes": {o: store.count_by_outcome(o) for o in ("succeeded", "failed")},
    }


# --- the acceptance: export → restore → export is byte-identical ------------------------------


def test_export_restore_export_is_byte_identical(
    backend: Backend, dbs: Databases, tmp_path: Path
) -> None:
    source = populate(dbs, dbs.init(backend), build_journal)
    data = export_bytes(source)
    summary = verify_export(io.BytesIO(data), log_key=source.log_vkey)
    assert summary.checkpoint_sizes == (0, 1, 2, 3)
    assert (summary.log_size, summary.runs, summary.sealed_runs) == (4, 8, 4)
    assert summary.signed_records == 10  # run-a's and run-b's seal records are signed too
    assert summary.cosignatures == {WITNESS_VKEYS[0]: 2, WITNESS_VKEYS[1]: 2}

    target = dbs.open(dbs.new(backend.name))
    restored = restore_bytes(target, data, tmp_path)
    assert restored == RestoreSummary(
        origin=f"{ORIGIN}/default",
        checkpoints=4,
        runs=8,
        sealed_runs=4,
        records=summary.records,
        signed_records=10,
        log_size=4,
        log_root=source.checkpoint().root,
        digest=summary.digest,
    )
    assert export_bytes(target) == data
    assert state(target) == state(source)
    # Neither export was told a witness key: the source remembers the witnesses whose
    # cosignatures it kept, and the target those the export declared.
    assert target.remembered_witness_keys() == source.remembered_witness_keys()
    assert source.remembered_witness_keys() == sorted(WITNESS_VKEYS)
    # The restored runs have no lease: the next epoch is above every epoch a record carries.
    assert target.acquire("run-e", "worker-1", 60).epoch == 4
    assert target.acquire("run-f", "worker-1", 60).epoch == 2
    # Exactly-once survives the restore.
    with pytest.raises(DuplicateEffectError):
        target.append(2, [Append("run-f", "EffectStarted", effect_key="k")])


def build_admitted_journal(signed: JournalStore, plain: JournalStore) -> None:
    """Admitted runs (one sealed, one waiting, one whose key was retired and issued again),
    waiting runs of both kinds, a run that waited and went on, and a run sealed after it
    concluded otherwise (the outcome index follows the seal)."""
    e = signed.acquire("z-retired", "worker-1", 60).epoch
    signed.append(e, [Append("z-retired", "RunAdmitted", {"source": "billing", "id": "inv-1"})])
    signed.append(e, [Append("z-retired", "RunConcluded", {"outcome": "failed"})])
    signed.seal("z-retired", e, "succeeded")
    assert plain.forget_admissions(T0 + 1) == 1  # the fake clock reads T0 throughout
    plain.append(1, [Append("a-reissued", "RunAdmitted", {"source": "billing", "id": "inv-1"})])
    plain.append(
        1,
        [
            Append("pay-2", "RunAdmitted", {"source": "billing", "id": "inv-2", "cents": 99}),
            Append("pay-2", "RunSuspended", {"until": T0 + 600, "message": "payment:inv-2"}),
        ],
    )
    plain.append(1, [Append("crm-1", "RunAdmitted", {"source": "crm", "id": "lead-1"})])
    plain.append(1, [Append("timer", "Note"), Append("timer", "RunSuspended", {"until": T0})])
    plain.append(1, [Append("went-on", "RunSuspended", {"until": T0}), Append("went-on", "Note")])
    plain.sign_checkpoint()


def derived(store: JournalStore) -> dict[str, Any]:
    """The derived indexes of :func:`build_admitted_journal`'s journal (activity times aside:
    they are the restoring store's clock)."""
    return {
        "keys": {
            k: store.admitted_as(k)
            for k in ("billing/inv-1", "billing/inv-2", "crm/lead-1", "crm/inv-1")
        },
        "billing": sorted(r for r, _ in store.recent_runs(None, 100, source="billing")),
        "crm": [r for r, _ in store.recent_runs(None, 100, source="crm")],
        "waiting": store.waiting_runs(100),
        "outcomes": {o: store.runs_by_outcome(o, 10) for o in ("succeeded", "failed")},
    }


def test_restore_rebuilds_admissions_sources_and_waiting_runs(
    backend: Backend, dbs: Databases, tmp_path: Path
) -> None:
    source = populate(dbs, dbs.init(backend), build_admitted_journal)
    want = {
        "keys": {
            "billing/inv-1": "a-reissued",
            "billing/inv-2": "pay-2",
            "crm/lead-1": "crm-1",
            "crm/inv-1": None,
        },
        "billing": ["a-reissued", "pay-2", "z-retired"],  # the source is never forgotten
        "crm": ["crm-1"],
        "waiting": [
            WaitingRun("timer", T0, None, 2),
            WaitingRun("pay-2", T0 + 600, "payment:inv-2", 2),
        ],
        "outcomes": {"succeeded": ["z-retired"], "failed": []},
    }
    assert derived(source) == want
    data = export_bytes(source)
    for dst in ("sqlite", "postgres") if backend.name == "sqlite" else ("postgres",):
        target = dbs.open(dbs.new(dst))
        restore_bytes(target, data, tmp_path)
        assert export_bytes(target) == data
        # Derived from the records, so rebuilt by the replay. The retired-and-reissued key goes
        # to the run restored last (sealed runs first, in log order): its current holder.
        assert derived(target) == want
        with pytest.raises(DuplicateAdmissionError) as e:
            target.append(1, [Append("again", "RunAdmitted", {"source": "billing", "id": "inv-2"})])
        assert e.value.holder == "pay-2"


@pytest.mark.parametrize(("src", "dst"), [("sqlite", "postgres"), ("postgres", "sqlite")])
def test_cross_backend_restore_is_byte_identical(
    src: str, dst: str, dbs: Databases, tmp_path: Path
) -> None:
    source = populate(dbs, dbs.new(src), build_journal)
    data = export_bytes(source)
    target = dbs.open(dbs.new(dst))
    restore_bytes(target, data, tmp_path)
    assert export_bytes(target) == data
    assert state(target) == state(source)


def test_empty_store_round_trip(dbs: Databases, tmp_path: Path) -> None:
    source = dbs.open(dbs.new("sqlite"))
    data = export_bytes(source, witness_keys=[], record_keys=[])
    assert data.startswith(b"tlog-toolkit export v2\norigin example.com/journal/default\n")
    assert data.count(b"\n") == 4  # magic, origin, log-key, end
    target = dbs.open(dbs.new("sqlite"))
    summary = restore_bytes(target, data, tmp_path)
    assert (summary.runs, summary.log_size, summary.log_root) == (0, 0, merkle.EMPTY_ROOT)
    assert export_bytes(target, witness_keys=[], record_keys=[]) == data


def test_restore_is_independent_of_the_targets_record_signer(
    dbs: Databases, tmp_path: Path
) -> None:
    """The exported signatures are kept as they are: a target handle that signs records with
    another key neither re-signs them nor signs the unsigned ones."""
    data = export_bytes(populate(dbs, dbs.new("sqlite"), build_journal))
    target = dbs.open(dbs.new("sqlite"), record_signer=OTHER_RECORD_SIGNER)
    restore_bytes(target, data, tmp_path)
    assert export_bytes(target) == data
    assert target.read("run-c")[0].signature is None


# --- Hypothesis: random journals round-trip -----------------------------------------------------

_TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=12)
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53 - 1), 2**53 - 1) | _TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3),
    max_leaves=6,
)
_RECORD = st.tuples(
    st.booleans(),  # a new epoch (a hand-over) before this record
    st.booleans(),  # signed
    # data: absent, or present (never null: "data": null is refused)
    st.one_of(st.just(None), _JSON.filter(lambda v: v is not None).map(lambda v: [v])),
    st.sampled_from([None, "case-1", "case:2"]),
)
_RUN = st.tuples(
    st.lists(_RECORD, min_size=1, max_size=5),
    st.sampled_from([None, "ok", "failed"]),  # the seal's outcome, or unsealed
    st.booleans(),  # publish a checkpoint after it
)


@settings(max_examples=20, deadline=None)
@given(st.lists(_RUN, max_size=5))
def test_random_journals_round_trip(runs: list[Any]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        dbs = Databases(Path(tmp))
        try:
            where = dbs.new("sqlite")
            clock = FakeClock()
            signed = dbs.open(where, record_signer=RECORD_SIGNER, clock=clock)
            plain = dbs.open(where, clock=clock)
            for i, (records, outcome, publish) in enumerate(runs):
                run = f"r{i}"
                epoch = signed.acquire(run, "w", 60).epoch
                for j, (handover, sign, data, case) in enumerate(records):
                    if handover and j:
                        signed.release(run, epoch)
                        epoch = signed.acquire(run, "w", 60).epoch
                    h = signed if sign else plain
                    if data is None:
                        h.append(epoch, [Append(run, "Step", case=case)])
                    else:
                        h.append(epoch, [Append(run, "Step", data[0], case=case)])
                if outcome is not None:
                    (signed if records[-1][1] else plain).seal(run, epoch, outcome)
                if publish:
                    cosign(plain, plain.sign_checkpoint(), W2)
            data_out = export_bytes(plain)
            target = dbs.open(dbs.new("sqlite"))
            path = Path(tmp) / "x.export"
            path.write_bytes(data_out)
            restore_store(target, path)
            assert export_bytes(target) == data_out
        finally:
            dbs.close()


# --- the acceptance: every single-byte change is refused, naming the place ---------------------


@pytest.fixture(scope="module")
def small_export(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    dbs = Databases(tmp_path_factory.mktemp("small"))
    try:
        data = export_bytes(populate(dbs, dbs.new("sqlite"), build_small))
    finally:
        dbs.close()
    return data


def item_starts(data: bytes) -> list[int]:
    """For each line (from 1), the first line of the item holding it: a checkpoint note's
    lines belong to its ``checkpoint`` line; every other line is its own item."""
    lines = data.count(b"\n")
    start = list(range(lines + 2))
    for item in read_export(io.BytesIO(data)):
        if isinstance(item, CheckpointItem):
            for n in range(item.line, item.line + item.note.count(b"\n") + 1):
                start[n] = item.line
    return start


@pytest.mark.parametrize("change", ["xor 0x01", "xor 0x20", "delete"])
def test_every_single_byte_change_is_refused_naming_the_place(
    change: str, small_export: bytes, dbs: Databases, tmp_path: Path
) -> None:
    data = small_export
    assert 1500 < len(data) < 4096
    starts = item_starts(data)
    last_line = data.count(b"\n")
    target = dbs.open(dbs.new("sqlite"))
    path = tmp_path / "changed.export"
    for i in range(len(data)):
        if change == "delete":
            path.write_bytes(data[:i] + data[i + 1 :])
        else:
            changed = bytearray(data)
            changed[i] ^= 0x01 if change == "xor 0x01" else 0x20
            path.write_bytes(changed)
        with pytest.raises(TlogError) as caught:
            restore_store(target, path)
        e = caught.value
        m = LINE.match(str(e))
        assert m, f"byte {i}: {e}"
        assert not isinstance(e, RestoreError), f"byte {i}: refused in pass 2: {e}"
        line = data.count(b"\n", 0, i) + 1
        named = int(m.group(1))
        assert starts[line] <= named <= last_line + 1, f"byte {i} (line {line}): {e}"
        assert_empty(target)
    # The unchanged export restores into that very store: nothing was written before.
    path.write_bytes(data)
    restore_store(target, path)
    assert export_bytes(target) == data


# --- refusals before anything is written --------------------------------------------------------


def test_a_target_with_runs_or_a_log_is_refused(
    backend: Backend, dbs: Databases, tmp_path: Path
) -> None:
    data = export_bytes(populate(dbs, dbs.new("sqlite"), build_small))
    target = dbs.open(dbs.init(backend))
    # Only a kept checkpoint (of the empty log).
    note = target.sign_checkpoint()
    with pytest.raises(UsageError, match="keeps checkpoints"):
        restore_bytes(target, data, tmp_path)
    assert target.published() == [note]
    # A run with records.
    other = dbs.open(dbs.init(Backend("sqlite", db=str(tmp_path / "runs.db"))))
    other.append(1, [Append("run-z", "Note")])
    with pytest.raises(UsageError, match="has runs"):
        restore_bytes(other, data, tmp_path)
    assert other.runs(None, 10) == ["run-z"] and other.published() == []
    # A log (a sealed run).
    other.seal("run-z", 1, "ok")
    with pytest.raises(UsageError, match="has runs"):
        restore_bytes(other, data, tmp_path)


def test_a_restored_store_refuses_a_second_restore(dbs: Databases, tmp_path: Path) -> None:
    data = export_bytes(populate(dbs, dbs.new("sqlite"), build_small))
    target = dbs.open(dbs.new("sqlite"))
    restore_bytes(target, data, tmp_path)
    with pytest.raises(UsageError, match="has runs"):
        restore_bytes(target, data, tmp_path)
    assert export_bytes(target) == data


def test_an_export_of_another_log_key_is_refused(
    backend: Backend, dbs: Databases, tmp_path: Path
) -> None:
    data = export_bytes(populate(dbs, dbs.new("sqlite"), build_small))
    target = dbs.open(dbs.init(backend, OTHER_KEY), key=OTHER_KEY)
    with pytest.raises(ExportVerificationError, match=r"^line 3: log-key is not the trusted"):
        restore_bytes(target, data, tmp_path)
    assert_empty(target)


def test_an_export_of_another_tenant_is_refused(dbs: Databases, tmp_path: Path) -> None:
    where = dbs.new("sqlite")
    data = export_bytes(populate(dbs, where, build_small))
    other_tenant = dbs.open(where, tenant="other")  # same key, origin .../other
    with pytest.raises(ExportVerificationError, match=r"^line 3: "):
        restore_bytes(other_tenant, data, tmp_path)
    assert_empty(other_tenant)


def test_record_key_trust_and_required_signatures(dbs: Databases, tmp_path: Path) -> None:
    data = export_bytes(populate(dbs, dbs.new("sqlite"), build_small))
    target = dbs.open(dbs.new("sqlite"))
    other = format_vkey(OTHER_RECORD_SIGNER.verifier())
    with pytest.raises(ExportVerificationError, match=r"^line 4: record-key is not one of"):
        restore_bytes(target, data, tmp_path, record_keys=[other])
    with pytest.raises(ExportVerificationError, match=r"^line \d+: run run-b record 1 is not"):
        restore_bytes(target, data, tmp_path, require_record_signatures=True)
    assert_empty(target)
    restore_bytes(target, data, tmp_path, record_keys=[RECORD_VKEY])
    assert export_bytes(target) == data


# --- pass 2: the store's disagreements are named --------------------------------------------------


def _prepared(dbs: Databases) -> tuple[bytes, JournalStore]:
    data = export_bytes(populate(dbs, dbs.new("sqlite"), build_small))
    return data, dbs.open(dbs.new("sqlite"))


def _line_of(data: bytes, prefix: bytes) -> int:
    return data.split(b"\n").index(next(x for x in data.split(b"\n") if x.startswith(prefix))) + 1


def test_a_store_that_rebuilds_another_hash_is_named(
    dbs: Databases, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data, target = _prepared(dbs)
    real = target.append

    def append(epoch: int, batch: Any, **kw: Any) -> list[Record]:
        got = real(epoch, batch, **kw)
        if batch[0].run == "run-a":
            got[1] = replace(got[1], hash=bytes(32))
        return got

    monkeypatch.setattr(target, "append", append)
    with pytest.raises(RestoreError) as caught:
        restore_bytes(target, data, tmp_path)
    e = caught.value
    assert (e.run, e.seq) == ("run-a", 2)
    body_line = _line_of(data, b"run run-a") + 3  # record 1, its sig line, record 2
    assert str(e).startswith(f"line {body_line}: run run-a record 2: the store rebuilt another")
    assert "partially written and must be discarded" in str(e)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("raw", b"{}", "the store rebuilt other body bytes"),
        ("signature", None, "the store kept another signature"),
        ("seq", 7, "the store wrote run run-a record 7"),
    ],
)
def test_each_disagreement_of_a_record_is_named(
    field: str,
    value: Any,
    message: str,
    dbs: Databases,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    data, target = _prepared(dbs)
    real = target.append

    def append(epoch: int, batch: Any, **kw: Any) -> list[Record]:
        got = real(epoch, batch, **kw)
        got[0] = replace(got[0], **{field: value})
        return got

    monkeypatch.setattr(target, "append", append)
    line = _line_of(data, b"run run-a") + 1
    with pytest.raises(RestoreError, match=f"^line {line}: run run-a record 1: {message}"):
        restore_bytes(target, data, tmp_path)


def test_a_store_that_refuses_a_batch_is_named(
    dbs: Databases, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data, target = _prepared(dbs)
    real = target.append

    def append(epoch: int, batch: Any, **kw: Any) -> list[Record]:
        if batch[0].run == "run-b":
            raise DuplicateEffectError("run-b", "mail:1")
        return real(epoch, batch, **kw)

    monkeypatch.setattr(target, "append", append)
    with pytest.raises(RestoreError) as caught:
        restore_bytes(target, data, tmp_path)
    assert (caught.value.run, caught.value.seq) == ("run-b", 1)
    assert re.match(
        r"line \d+: run run-b records 1-1: the store refused them: run run-b", str(caught.value)
    )
    assert isinstance(caught.value.__cause__, DuplicateEffectError)


def test_a_seal_at_another_position_is_named(
    dbs: Databases, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data, target = _prepared(dbs)
    real = target.seal

    def seal(run: str, epoch: int, outcome: str, **kw: Any) -> Seal:
        s = real(run, epoch, outcome, **kw)
        return replace(s, position=s.position + 1) if run == "run-b" else s

    monkeypatch.setattr(target, "seal", seal)
    line = _line_of(data, b"run run-b")
    with pytest.raises(RestoreError, match=f"^line {line}: run run-b: the store sealed it at "
                       "position 2 \\(failed\\), the export at position 1"):  # fmt: skip
        restore_bytes(target, data, tmp_path)


def test_a_refused_checkpoint_is_named(
    dbs: Databases, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data, target = _prepared(dbs)

    def refuse(note: bytes) -> None:
        raise UsageError("no")

    monkeypatch.setattr(target, "import_checkpoint", refuse)
    line = _line_of(data, b"checkpoint ")
    with pytest.raises(
        RestoreError, match=f"^line {line}: checkpoint of size 1: the store refused"
    ):
        restore_bytes(target, data, tmp_path)


def test_checkpoints_the_store_did_not_keep_are_named(
    dbs: Databases, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data, target = _prepared(dbs)
    monkeypatch.setattr(target, "import_checkpoint", lambda note: None)
    end = data.count(b"\n")
    with pytest.raises(RestoreError, match=f"^line {end}: the store's kept checkpoints are not"):
        restore_bytes(target, data, tmp_path)


def test_a_file_changed_between_the_passes_is_named(
    dbs: Databases, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pass 2 reads the file again and verifies it again; a file replaced in between by
    another valid export is caught by the digest at the end."""
    data, target = _prepared(dbs)
    second = dbs.open(dbs.new("sqlite"))
    restore_bytes(second, data, tmp_path)
    second.append(1, [Append("run-z", "Note")])
    other = export_bytes(second)
    path = tmp_path / "moving.export"
    path.write_bytes(data)
    real = verify_export

    def verify_then_swap(*a: Any, **kw: Any) -> Any:
        result = real(*a, **kw)
        path.write_bytes(other)
        return result

    monkeypatch.setattr(store_export, "verify_export", verify_then_swap)
    with pytest.raises(RestoreError, match="changed between the verifying pass"):
        restore_store(target, path)


# --- export: declared keys, corrupt stores, paging, memory -------------------------------------


def forget_witness_key(store: JournalStore, name: str) -> None:
    """Make ``store`` one that kept a line of witness ``name`` before it remembered witness keys
    (as a store upgraded from schema version 2 is)."""
    sql = "DELETE FROM witness_key WHERE tenant = ? AND name = ?"
    cast(Any, store)._execute_for_test(sql, (store.tenant, name))


def test_an_undeclared_witness_is_named_before_anything_is_written(dbs: Databases) -> None:
    source = populate(dbs, dbs.new("sqlite"), build_journal)
    forget_witness_key(source, W2.name)
    out = io.BytesIO()
    w2 = f"{W2.name}+{W2.key_id:08x}"
    with pytest.raises(
        UsageError, match=re.escape(f"checkpoint of size 1 carries a signature line of {w2}")
    ):
        export_store(source, out, witness_keys=WITNESS_VKEYS[:1], record_keys=[RECORD_VKEY])
    assert out.getvalue() == b""


def test_an_undeclared_record_key_is_named(dbs: Databases) -> None:
    source = populate(dbs, dbs.new("sqlite"), build_journal)
    key = f"{RECORD_SIGNER.name}+{RECORD_SIGNER.key_id:08x}"
    with pytest.raises(
        UsageError, match=re.escape(f"run run-a record 1 is signed by {key}, which is no")
    ):
        export_store(source, io.BytesIO(), witness_keys=WITNESS_VKEYS)


def test_declared_keys_are_canonical_sorted_and_checked(dbs: Databases) -> None:
    source = populate(dbs, dbs.new("sqlite"), build_small)
    data = export_bytes(source, witness_keys=[WITNESS_VKEYS[0]])
    # A witness published as a 0x01 vkey is declared in its 0x04 form; repeats merge; the
    # header is sorted; an unused key may be declared.
    as_ed25519 = format_vkey(Ed25519Signer(W1.name, sha(b"witness one")).verifier())
    assert as_ed25519 != WITNESS_VKEYS[0]
    assert export_bytes(source, witness_keys=[as_ed25519, WITNESS_VKEYS[0]]) == data
    both = export_bytes(source, witness_keys=WITNESS_VKEYS[::-1])
    header = [x for x in both.split(b"\n") if x.startswith(b"witness-key ")]
    assert header == sorted(header) and len(header) == 2
    bads: list[tuple[Any, str]] = [
        (["not a vkey"], "witness key 'not a vkey'"),
        ("x+1+2", "not one string"),
        ([b"bytes"], "is a vkey string"),
    ]
    for bad, message in bads:
        with pytest.raises(UsageError, match=message):
            export_store(source, io.BytesIO(), witness_keys=bad, record_keys=[RECORD_VKEY])
    with pytest.raises(UsageError, match="not 0x01"):
        export_store(source, io.BytesIO(), witness_keys=WITNESS_VKEYS, record_keys=WITNESS_VKEYS)
    log_as_witness = format_vkey(CosignatureV1Signer(f"{ORIGIN}/default", bytes(32)).verifier())
    assert export_bytes(source, witness_keys=[log_as_witness, WITNESS_VKEYS[0]])  # other ID


def test_a_deleted_run_cannot_be_exported(backend: Backend, dbs: Databases) -> None:
    source = populate(dbs, dbs.init(backend), build_small)
    delete_run(source, "run-a")  # position 0 keeps its leaf, without a run
    with pytest.raises(CorruptError, match="log position 0 has no sealed run"):
        export_bytes(source)
    other = populate(dbs, dbs.new("sqlite"), build_small)
    delete_run(other, "run-b")  # the last position
    with pytest.raises(CorruptError, match="log position 1 has no sealed run"):
        export_bytes(other)


def test_a_run_sealed_while_exporting_is_written_as_it_was(
    dbs: Databases, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The export reads in many transactions: a run sealed after the sealed runs were listed
    is written unsealed, without its seal record (a state the store had), and the export
    verifies."""
    source = populate(dbs, dbs.new("sqlite"), build_small)
    real = source.runs
    sealed: list[Seal] = []

    def runs(after: str | None, limit: int) -> list[str]:
        if not sealed:
            sealed.append(source.seal("run-c", 1, "ok"))  # concurrently, as it were
        return real(after, limit)

    monkeypatch.setattr(source, "runs", runs)
    data = export_bytes(source)
    assert sealed[0].position == 2
    assert b"\nrun run-c 1\n" in data
    assert b'"kind":"RunSealed","run":"run-c"' not in data  # as it was: before its seal record
    summary = verify_export(io.BytesIO(data), log_key=source.log_vkey)
    assert summary.log_size == 2


def test_export_and_restore_page(
    dbs: Databases, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Small pages and batches give the same files; export never reads a whole run."""
    source = populate(dbs, dbs.new("sqlite"), build_journal)
    data = export_bytes(source)
    monkeypatch.setattr(store_export, "PAGE", 2)
    monkeypatch.setattr(store_export, "BATCH_RECORDS", 3)
    limits: list[int] = []
    real_page = source.read_page

    def read_page(run: str, from_seq: int, limit: int) -> list[Record]:
        limits.append(limit)
        return real_page(run, from_seq, limit)

    def whole(*a: Any) -> Any:
        raise AssertionError("read() holds a whole run")

    monkeypatch.setattr(source, "read_page", read_page)
    monkeypatch.setattr(source, "read", whole)
    assert export_bytes(source) == data
    assert max(limits) == 2 and len(limits) == 23  # 5 records take 3 pages, 23 take 12, …
    target = dbs.open(dbs.new("sqlite"))
    sizes: list[int] = []
    real_append = target.append

    def append(epoch: int, batch: Any, **kw: Any) -> list[Record]:
        sizes.append(len(batch))
        return real_append(epoch, batch, **kw)

    monkeypatch.setattr(target, "append", append)
    restore_bytes(target, data, tmp_path)
    # run-a: 4 records at one epoch = 3 + 1; run-g: 23 = 7 x 3 + 2; run-e: 3 epochs = 1 + 1 + 1.
    assert sorted(sizes) == [1] * 10 + [2] + [3] * 8
    assert export_bytes(target) == data


def test_memory_does_not_grow_with_the_journal(
    dbs: Databases, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """About 3 MB of records go through export and restore with a peak well below that."""
    monkeypatch.setattr(store_export, "PAGE", 50)
    monkeypatch.setattr(store_export, "BATCH_RECORDS", 50)
    where = dbs.new("sqlite")
    source = dbs.open(where)
    for b in range(6):
        source.append(1, [Append("big", "Step", {"b": b, "pad": "x" * 1000}) for _ in range(500)])
    source.seal("big", 1, "ok")

    class Sink(io.RawIOBase):
        size = 0

        def writable(self) -> bool:
            return True

        def write(self, b: Any) -> int:
            self.size += len(b)
            return len(b)

    sink = Sink()
    tracemalloc.start()
    try:
        export_store(source, sink)  # type: ignore[arg-type]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert sink.size > 3_000_000
    assert peak < 1_000_000, peak
    path = tmp_path / "big.export"
    with open(path, "wb") as f:
        export_store(source, f)
    target = dbs.open(dbs.new("sqlite"))
    tracemalloc.start()
    try:
        restore_store(target, path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1_500_000, peak
    assert target.head("big") == source.head("big")


# --- the contract's additions, on both backends ---------------------------------------------------


@pytest.fixture
def one(backend: Backend, dbs: Databases) -> JournalStore:
    return dbs.open(dbs.init(backend), clock=FakeClock())


def test_log_vkey_is_the_tenant_logs_key(
    one: JournalStore, backend: Backend, dbs: Databases
) -> None:
    assert one.log_vkey == format_vkey(
        Ed25519Signer(f"{ORIGIN}/default", LOG_KEY.secret).verifier()
    )
    other = dbs.open(backend, tenant="t2", key=None)
    assert other.log_vkey.startswith(f"{ORIGIN}/t2+") and other.log_vkey != one.log_vkey
    assert other.log_vkey.split("+")[2] == one.log_vkey.split("+")[2]  # one public key


def test_append_keeps_given_signatures(backend: Backend, dbs: Databases) -> None:
    signing = dbs.open(dbs.init(backend), record_signer=RECORD_SIGNER)
    first = signing.append(1, [Append("r", "A"), Append("r", "B")], signatures=[None, None])
    assert [r.signature for r in first] == [None, None]  # not signed by the handle's key
    h = signing.head("r").hash
    # The hash of the next record, computed the way the store does, and signed elsewhere.
    nxt = make_record(Body("r", 3, 1, "C"), h)
    sig = sign_record(OTHER_RECORD_SIGNER, nxt.hash)
    (got,) = signing.append(1, [Append("r", "C")], signatures=(sig,))
    assert got == replace(nxt, signature=sig)
    assert signing.read("r") == [*first, got]
    (own,) = signing.append(1, [Append("r", "D")])  # without: the handle signs
    assert own.signature is not None and own.signature.name == RECORD_SIGNER.name


@pytest.mark.parametrize(
    ("signatures", "message"),
    [
        ([], "0 signatures for a batch of 1 records"),
        ([None, None], "2 signatures"),
        (iter([None]), "a list"),
        (["sig"], "is a str, not a RecordSignature"),
        ([RecordSignature("a b", 1, bytes(64))], "white space"),
        ([RecordSignature("a", 1 << 32, bytes(64))], "not a 32-bit value"),
        ([RecordSignature("a", True, bytes(64))], "not a 32-bit value"),
        ([RecordSignature("a", 1, bytes(63))], "not 64 bytes"),
    ],
)
def test_append_refuses_malformed_signatures(
    signatures: Any, message: str, one: JournalStore
) -> None:
    with pytest.raises(UsageError, match=message):
        one.append(1, [Append("r", "A")], signatures=signatures)
    assert one.runs(None, 1) == []


def _grow(store: JournalStore, runs: int) -> None:
    for i in range(runs):
        store.append(1, [Append(f"g{i}", "Note", i)])
        store.seal(f"g{i}", 1, "ok")


def test_import_checkpoint_keeps_the_note_as_given(one: JournalStore) -> None:
    _grow(one, 3)
    log = Ed25519Signer(one.origin, LOG_KEY.secret)
    notes = []
    for size in (0, 2, 3):
        text = Checkpoint(one.origin, size, one.tree_root(size)).format()
        note = sign_note(text, [W2, log, W1])  # any line order: kept as given
        one.import_checkpoint(note)
        one.import_checkpoint(note)  # the same note again changes nothing
        notes.append(note)
    assert one.published() == notes
    # Another note for a kept size (fewer cosignatures) is refused; the kept one stays.
    with pytest.raises(UsageError, match="another note of size 2 is kept"):
        one.import_checkpoint(
            sign_note(Checkpoint(one.origin, 2, one.tree_root(2)).format(), [log])
        )
    assert one.published() == notes


def test_import_checkpoint_refusals(one: JournalStore) -> None:
    _grow(one, 2)
    log = Ed25519Signer(one.origin, LOG_KEY.secret)
    text = Checkpoint(one.origin, 1, one.tree_root(1)).format()
    good = sign_note(text, [log, W1])
    other_log = Ed25519Signer(one.origin, OTHER_KEY.secret)
    foreign = Ed25519Signer("example.com/journal/t2", LOG_KEY.secret)
    log_line = Signature(log.name, log.key_id, log.sign(text)).line()
    bad = bytearray(log.sign(text))
    bad[10] ^= 0x01
    forged = format_note(text, [Signature(log.name, log.key_id, bytes(bad))])
    refused: list[tuple[Any, type[Exception], str]] = [
        ("text", UsageError, "a note is bytes"),
        (b"garbage", MalformedError, "newline"),
        (sign_note(text, [W1]), UsageError, "no signature of the log key"),
        (sign_note(text, [other_log]), UsageError, "from another key"),
        (forged, InvalidSignatureError, "invalid signature for key example.com/journal/default"),
        (good + log_line, UsageError, "repeats a signature line"),
        (
            add_signatures(good, [Signature(W1.name, W1.key_id, W1.sign_at(text, T0 + 1))]),
            UsageError,
            "two lines for the key",
        ),
        (
            sign_note(Checkpoint(foreign.name, 1, one.tree_root(1)).format(), [foreign]),
            UsageError,
            "is a checkpoint of",
        ),
        (sign_note(Checkpoint(one.origin, 3, bytes(32)).format(), [log]), UsageError, "beyond"),
        (sign_note(Checkpoint(one.origin, 1, bytes(32)).format(), [log]), UsageError, "not this"),
        (
            sign_note(text + b"extension line\n", [log]),
            UsageError,
            "another root, or extension lines",
        ),
    ]
    for note, cls, message in refused:
        with pytest.raises(cls, match=message):
            one.import_checkpoint(note)
    assert one.published() == []
    one.import_checkpoint(good)
    assert one.published() == [good]


# --- remembered witness keys ----------------------------------------------------------------------


W3 = CosignatureV1Signer("witness.example/three", sha(b"witness three"), clock=lambda: T0)
W3_VKEY = format_vkey(W3.verifier())


def test_the_store_remembers_the_witnesses_of_the_lines_it_keeps(
    one: JournalStore, backend: Backend, dbs: Databases
) -> None:
    e = one.acquire("run-a", "w", 60).epoch
    one.append(e, [Append("run-a", "Note")])
    one.seal("run-a", e, "ok")
    note = one.sign_checkpoint()
    assert one.remembered_witness_keys() == []
    # W1's line is kept and its key remembered; W3, declared but with no line, is not.
    text, _ = parse_note(note)
    line = Signature(W1.name, W1.key_id, W1.sign(text))
    one.add_cosignatures(add_signatures(note, [line]), witness_keys=[WITNESS_VKEYS[0], W3_VKEY])
    assert one.remembered_witness_keys() == [WITNESS_VKEYS[0]]
    # A refused merge remembers nothing: W2's line does not verify, W3's is of no declared key.
    bad = Signature(W2.name, W2.key_id, bytes(8) + W2.sign(text)[8:])
    with pytest.raises(InvalidSignatureError):
        one.add_cosignatures(add_signatures(note, [bad]), witness_keys=WITNESS_VKEYS)
    w3_line = Signature(W3.name, W3.key_id, W3.sign(text))
    with pytest.raises(UsageError, match="no declared witness key"):
        one.add_cosignatures(add_signatures(note, [w3_line]), witness_keys=WITNESS_VKEYS)
    assert one.remembered_witness_keys() == [WITNESS_VKEYS[0]]
    # Other handles (another process) see it; another tenant remembers its own.
    assert dbs.open(backend, key=None).remembered_witness_keys() == [WITNESS_VKEYS[0]]
    assert dbs.open(backend, tenant="t2", key=None).remembered_witness_keys() == []
    # The export declares it without being told.
    data = export_bytes(one)
    assert export_bytes(one, witness_keys=[WITNESS_VKEYS[0]]) == data
    assert f"witness-key {WITNESS_VKEYS[0]}\n".encode() in data
    # A store that kept the line before it remembered keys learns the key when the line is
    # merged again with its key declared (it verifies under it).
    forget_witness_key(one, W1.name)
    with pytest.raises(UsageError, match="neither the log key nor a remembered or declared"):
        export_bytes(one)
    kept = one.published()[-1]
    one.add_cosignatures(kept, witness_keys=[WITNESS_VKEYS[1]])  # not its key: not learnt
    assert one.remembered_witness_keys() == []
    assert one.add_cosignatures(kept, witness_keys=[WITNESS_VKEYS[0]]) == kept
    assert one.remembered_witness_keys() == [WITNESS_VKEYS[0]]
    assert export_bytes(one) == data


def test_remember_witness_keys(one: JournalStore) -> None:
    clock = FakeClock()
    assert one.remember_witness_keys([]) is None
    # A 0x01 vkey is remembered as its cosignature/v1 form; repeats change nothing.
    as_ed25519 = format_vkey(Ed25519Signer(W1.name, sha(b"witness one")).verifier())
    one.remember_witness_keys([as_ed25519, WITNESS_VKEYS[1]])
    one.remember_witness_keys([WITNESS_VKEYS[0]])
    assert one.remembered_witness_keys() == WITNESS_VKEYS
    rows = cast(Any, one)._execute_for_test(
        "SELECT name, first_seen FROM witness_key WHERE tenant = ? ORDER BY name", ("default",)
    )
    assert [tuple(r) for r in rows] == [(W1.name, clock.now), (W2.name, clock.now)]
    bads: list[tuple[Any, str]] = [
        ([W3_VKEY, "not a vkey"], "witness key 'not a vkey'"),
        ("x+1+2", "not one string"),
        ([W3_VKEY, b"bytes"], "is a vkey string"),
    ]
    for bad, message in bads:
        with pytest.raises(UsageError, match=message):
            one.remember_witness_keys(bad)
    assert one.remembered_witness_keys() == WITNESS_VKEYS  # W3 was not remembered either
    # A row whose key is not its (name, key ID): another key under W3's name and ID is refused
    # (nothing written), and reading the planted row is corrupt.
    cast(Any, one)._execute_for_test(
        "INSERT INTO witness_key (tenant, name, key_id, vkey, first_seen) VALUES (?, ?, ?, ?, ?)",
        ("default", W3.name, W3.key_id, WITNESS_VKEYS[0], T0),
    )
    with pytest.raises(UsageError, match="has the name and key ID of the remembered witness key"):
        one.remember_witness_keys([WITNESS_VKEYS[1], W3_VKEY])
    with pytest.raises(CorruptError, match="is not its row's key"):
        one.remembered_witness_keys()


def test_restore_remembers_every_declared_witness_key(
    backend: Backend, dbs: Databases, tmp_path: Path
) -> None:
    source = populate(dbs, dbs.init(backend), build_small)  # W1 cosigned
    data = export_bytes(source, witness_keys=[W3_VKEY])  # W3 declared, cosigning nothing
    header = [x for x in data.split(b"\n") if x.startswith(b"witness-key ")]
    assert header == [f"witness-key {k}".encode() for k in sorted([WITNESS_VKEYS[0], W3_VKEY])]
    assert source.remembered_witness_keys() == [WITNESS_VKEYS[0]]  # export writes nothing
    target = dbs.open(dbs.new(backend.name))
    restore_bytes(target, data, tmp_path)
    assert target.remembered_witness_keys() == [WITNESS_VKEYS[0], W3_VKEY]
    assert export_bytes(target) == data
