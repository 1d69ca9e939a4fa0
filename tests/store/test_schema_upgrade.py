"""A store of schema version 2 (before the table ``witness_key``) or 3 (before the admission,
source and waiting indexes) opens with this code and works.

Two ways to have such a store, both tested:

* **the old code's own database**: ``tests/store/data/schema-v2.sql`` is the dump of a SQLite
  store written by the code before this schema (its header says how); the test loads it with
  :mod:`sqlite3` and opens it. Its recipe is :func:`recipe` below, which this code runs too, to
  check that the upgraded store and a new one hold the same journal;
* **on each backend**: a store made by this code is turned back into version 2 by SQL (the
  table dropped, ``meta`` set to 2), which is what version 3 added (store/schema.py
  ``UPGRADES``).

Opening (or ``init_store`` on) such a store upgrades it in place, once, in one transaction (also
when several handles open it at once); a store of a version this code neither reads nor upgrades
is refused with its version named, and left as it is. An upgraded store remembers no witness
yet: its export names the witness of a line it kept before (``--witness-key`` declares it), and
merging that line again with its key teaches the store the key. docs/embedder-guide.md §4.

Version 3 → 4 (:func:`test_a_version_3_store_is_upgraded_with_its_indexes_backfilled`): the
three new tables are derived from records, so the upgrade fills them from the journal — the
admission keys and sources of runs whose first record is a ``RunAdmitted``, the runs whose last
record is a ``RunSuspended`` — and the outcome index takes each sealed run's seal outcome (it
follows the seal record since version 4).
"""

from __future__ import annotations

import hashlib
import io
import sqlite3
import threading
from pathlib import Path
from typing import Any, cast

import pytest

from store.api import Append, JournalStore, WaitingRun
from store.errors import DuplicateAdmissionError
from store.export import export_store, restore_store
from store.open import init_store, open_store
from store.schema import SCHEMA_VERSION
from store.verify import verify_runs
from tests.conftest import Backend
from tlog.cosignature import CosignatureV1Signer
from tlog.errors import UsageError
from tlog.export import verify_export
from tlog.keys import SignerKey, format_vkey, generate_key
from tlog.note import Signature, add_signatures, parse_note

FIXTURE = Path(__file__).parent / "data" / "schema-v2.sql"
ORIGIN = "example.com/journal"
T0 = 1_700_000_000


def sha(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


KEY = generate_key(ORIGIN, seed=sha(b"schema v2 fixture: log key"))
W1 = CosignatureV1Signer("witness.example/one", sha(b"witness one"), clock=lambda: T0)
W1_VKEY = format_vkey(W1.verifier())


def recipe(s: JournalStore) -> None:
    """The journal of the fixture (see its header), written through the contract."""
    e = s.acquire("order-1", "worker-1", 60).epoch
    s.append(
        e,
        [
            Append("order-1", "RunStarted", {"customer": 77}, case="case-7"),
            Append("order-1", "EffectStarted", {"cents": 4200}, effect_key="charge-card"),
        ],
    )
    s.append(e, [Append("order-1", "RunConcluded", {"outcome": "succeeded"})])
    s.seal("order-1", e, "succeeded")
    note = s.sign_checkpoint()
    text, _ = parse_note(note)
    line = Signature(W1.name, W1.key_id, W1.sign(text))
    s.add_cosignatures(add_signatures(note, [line]), witness_keys=[W1_VKEY])
    e = s.acquire("order-2", "worker-2", 60).epoch
    s.append(e, [Append("order-2", "RunStarted", {"customer": 78})])
    s.request_cancel("order-2", "operator", "customer asked")


def load_fixture(path: Path) -> str:
    conn = sqlite3.connect(path)
    try:
        conn.executescript(FIXTURE.read_text(encoding="utf-8"))
    finally:
        conn.close()
    return str(path)


def sql(store: JournalStore, statement: str, params: tuple[Any, ...] = ()) -> list[Any]:
    rows: list[Any] = cast(Any, store)._execute_for_test(statement, params)
    return rows


def version(store: JournalStore) -> int:
    (row,) = sql(store, "SELECT schema_version FROM meta")
    return int(row[0])


def export(store: JournalStore, witness_keys: tuple[str, ...] = ()) -> bytes:
    out = io.BytesIO()
    export_store(store, out, witness_keys=witness_keys)
    return out.getvalue()


# --- the old code's own database -------------------------------------------------------------


def test_the_old_codes_store_opens_upgraded_and_works(tmp_path: Path) -> None:
    db = load_fixture(tmp_path / "v2.db")
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT schema_version FROM meta").fetchone() == (2,)
    conn.close()
    with open_store(db=db, key=KEY, clock=lambda: T0 + 10) as s:
        assert version(s) == SCHEMA_VERSION == 4
        # issue 13: outbox: the upgrade made the outbox's tables (version 4).
        assert cast(Any, s).subscriptions() == []
        # Everything written by the old code reads and verifies.
        checks = list(verify_runs(s))
        assert [(c.run, c.records, c.seal is not None) for c in checks] == [
            ("order-1", 4, True),
            ("order-2", 1, False),
        ]
        assert s.cancellation("order-2") is not None
        inc = s.inclusion_proof("order-1")
        assert (inc.index, inc.size) == (0, 1)
        # It remembers no witness yet: the export names the one whose line it kept.
        assert s.remembered_witness_keys() == []
        with pytest.raises(UsageError, match=r"witness\.example/one") as e:
            export(s)
        assert "--witness-key VKEY" in str(e.value)
        declared = export(s, (W1_VKEY,))
        summary = verify_export(io.BytesIO(declared), log_key=s.log_vkey)
        assert summary.cosignatures == {W1_VKEY: 1}
        # Merging the kept line again with its key declared teaches the store the key.
        kept = s.published()[0]
        assert s.add_cosignatures(kept, witness_keys=[W1_VKEY]) == kept
        assert s.remembered_witness_keys() == [W1_VKEY]
        assert export(s) == declared
        # New writes work: the lease of order-2 is still live at T0 + 10.
        s.append(1, [Append("order-2", "Step", 1)])
        assert s.seal("order-2", 1, "succeeded").position == 1
        assert s.checkpoint().size == 2
        after = export(s)
    # The same journal written by this code exports the same bytes (the log key, the clock and
    # the witness's signature are deterministic): the upgrade kept everything as it was.
    new = str(tmp_path / "new.db")
    init_store(db=new, origin=ORIGIN, key=KEY)
    with open_store(db=new, key=KEY, clock=lambda: T0) as fresh:
        recipe(fresh)
        assert export(fresh) == declared
    # And the upgraded store's export restores byte for byte, with no witness key declared.
    path = tmp_path / "upgraded.export"
    path.write_bytes(after)
    copy = str(tmp_path / "copy.db")
    init_store(db=copy, origin=ORIGIN, key=KEY)
    with open_store(db=copy) as target:
        restore_store(target, path)
        assert export(target) == after


def test_init_upgrades_the_old_codes_store(tmp_path: Path) -> None:
    db = load_fixture(tmp_path / "v2.db")
    init_store(db=db, origin=ORIGIN, key=KEY)  # idempotent for the same origin and key
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT schema_version FROM meta").fetchone() == (SCHEMA_VERSION,)
        assert conn.execute("SELECT COUNT(*) FROM witness_key").fetchone() == (0,)
    conn.close()
    with pytest.raises(UsageError, match="another log key"):
        init_store(db=db, origin=ORIGIN, key=generate_key(ORIGIN))


# --- on each backend ---------------------------------------------------------------------------


def made_old(backend: Backend, key: SignerKey) -> None:
    """Initialise a store with this code, write the recipe, then turn it into version 2."""
    init_store(db=backend.db, postgres=backend.postgres, origin=ORIGIN, key=key)
    with open_store(db=backend.db, postgres=backend.postgres, key=key) as s:
        recipe(s)
        sql(s, "DROP TABLE witness_key")
        sql(s, "UPDATE meta SET schema_version = 2")


def test_an_old_store_is_upgraded_when_opened(backend: Backend) -> None:
    made_old(backend, KEY)
    # Several handles open it at once: one upgrades, the others find nothing to do.
    errors: list[BaseException] = []
    handles: list[JournalStore] = []

    def opener() -> None:
        try:
            handles.append(open_store(db=backend.db, postgres=backend.postgres, key=KEY))
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=opener) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    try:
        assert errors == [] and len(handles) == 4
        s = handles[0]
        assert version(s) == SCHEMA_VERSION
        assert s.remembered_witness_keys() == []
        with pytest.raises(UsageError, match=r"witness\.example/one"):
            export(s)
        data = export(s, (W1_VKEY,))
        s.remember_witness_keys([W1_VKEY])
        assert all(h.remembered_witness_keys() == [W1_VKEY] for h in handles)
        assert export(handles[-1]) == data
    finally:
        for h in handles:
            h.close()


@pytest.mark.parametrize("stored", [1, SCHEMA_VERSION + 1])
def test_a_version_this_code_does_not_upgrade_is_refused(backend: Backend, stored: int) -> None:
    made_old(backend, KEY)
    with open_store(db=backend.db, postgres=backend.postgres) as s:
        # A version-2 store, then set to a version this code neither reads nor upgrades.
        sql(s, "UPDATE meta SET schema_version = ?", (stored,))
    want = f"the store's schema version is {stored!r}, this code reads {SCHEMA_VERSION}"
    for attempt in (
        lambda: open_store(db=backend.db, postgres=backend.postgres),
        lambda: init_store(db=backend.db, postgres=backend.postgres, origin=ORIGIN, key=KEY),
    ):
        with pytest.raises(UsageError) as e:
            attempt()
        assert str(e.value) == want


# --- version 3 -> 4: the derived indexes are backfilled ----------------------------------------


def made_v3(backend: Backend, key: SignerKey) -> None:
    """A store with admitted, waiting and sealed runs, turned into what version 3 held: without
    the three tables, and with the outcome index fed by RunConcluded records only."""
    init_store(db=backend.db, postgres=backend.postgres, origin=ORIGIN, key=key)
    with open_store(db=backend.db, postgres=backend.postgres, key=key, clock=lambda: T0) as s:
        s.append(
            1,
            [
                Append("adm-1", "RunAdmitted", {"source": "billing", "id": "inv-1"}),
                Append("adm-1", "RunSuspended", {"until": T0 + 60, "message": "payment-1"}),
            ],
        )
        s.append(1, [Append("adm-2", "RunAdmitted", {"source": "billing", "id": "inv-2"})])
        s.append(1, [Append("adm-2", "Step", 1)])
        s.append(1, [Append("other", "RunAdmitted", {"source": "crm", "id": "inv-1"})])
        s.append(1, [Append("nap", "RunSuspended", {"until": T0 + 5})])
        s.append(1, [Append("woke", "RunSuspended", {"until": T0}), Append("woke", "Step", 2)])
        e = s.acquire("done", "worker", 60).epoch
        s.append(e, [Append("done", "RunConcluded", {"outcome": "failed"})])
        s.seal("done", e, "succeeded")
        for table in ("run_admission", "run_source", "run_waiting"):
            sql(s, f"DROP TABLE {table}")
        sql(s, "UPDATE run_outcome SET outcome = 'failed' WHERE run = 'done'")
        sql(s, "UPDATE meta SET schema_version = 3")


def test_a_version_3_store_is_upgraded_with_its_indexes_backfilled(backend: Backend) -> None:
    made_v3(backend, KEY)
    with open_store(db=backend.db, postgres=backend.postgres, key=KEY, clock=lambda: T0 + 10) as s:
        assert version(s) == SCHEMA_VERSION == 4
        assert s.admitted_as("billing/inv-1") == "adm-1"
        assert s.admitted_as("billing/inv-2") == "adm-2"
        assert s.admitted_as("crm/inv-1") == "other"
        assert s.admitted_as("billing/inv-3") is None
        assert s.recent_runs(None, 10, source="billing") == [("adm-2", T0), ("adm-1", T0)]
        assert s.recent_runs(None, 10, source="crm") == [("other", T0)]
        assert s.waiting_runs(10) == [
            WaitingRun("nap", T0 + 5, None, 1),
            WaitingRun("adm-1", T0 + 60, "payment-1", 2),
        ]
        # The outcome index follows the seal record now.
        assert s.runs_by_outcome("succeeded", 10) == ["done"]
        assert s.count_by_outcome("failed") == 0
        # The backfilled key is the arbiter from now on; the source moves with activity.
        with pytest.raises(DuplicateAdmissionError) as e:
            s.append(1, [Append("adm-3", "RunAdmitted", {"source": "billing", "id": "inv-1"})])
        assert (e.value.key, e.value.holder, e.value.run) == ("billing/inv-1", "adm-1", "adm-3")
        s.append(1, [Append("adm-1", "Resumed", {"by": "payment-1"})])
        assert s.waiting_runs(10) == [WaitingRun("nap", T0 + 5, None, 1)]
        assert s.recent_runs(None, 1, source="billing") == [("adm-1", T0 + 10)]
        # Claimed at the run's last activity before the upgrade: kept until asked otherwise.
        assert s.forget_admissions(T0) == 0
        assert s.forget_admissions(T0 + 1) == 3
        assert s.admitted_as("billing/inv-1") is None
