"""Joining the embedder's transaction (store/atomic.py): the capability on both backends, and on
PostgreSQL a business row and the journal's records that commit or roll back together.

* SQLite answers None (``store.atomic``), and ``require_atomic`` refuses it with one line: the
  refusal comes when the capability is asked for, never at commit.
* PostgreSQL: an append (and a seal) on the caller's connection is invisible to the store's
  own handle until the caller commits; a rollback leaves neither the business row nor the
  record; a commit keeps both; the store's rules hold inside (fencing, sealed runs, exactly-once
  keys), each refusal undoing only itself (a savepoint) so that the caller's transaction goes
  on; a connection without a transaction, in REPEATABLE READ, or on another schema is refused.
* SIGKILL: a process (tests/store/worker.py ``embedder``) that inserts a business row per record
  and appends in one transaction is killed at random moments, several times, some of them
  between its append and its COMMIT: afterwards the business rows and the journal's records
  are the same set, every run's chain verifies.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from store.api import Append, JournalStore
from store.atomic import require_atomic
from store.errors import DuplicateEffectError, FencedError, RunSealedError
from store.open import init_store, open_store
from tests.conftest import PostgresSchema
from tlog.errors import UsageError
from tlog.keys import generate_key

ORIGIN = "example.com/journal"
WORKER = Path(__file__).resolve().parent / "worker.py"

BUSINESS = "CREATE TABLE orders (run TEXT NOT NULL, seq BIGINT NOT NULL, PRIMARY KEY (run, seq))"


def test_sqlite_has_no_atomic_capability(tmp_path: Path) -> None:
    db = str(tmp_path / "s.db")
    init_store(db=db, origin=ORIGIN, key=generate_key(ORIGIN))
    with open_store(db=db) as s:
        assert s.atomic is None
        with pytest.raises(UsageError, match="cannot join the embedder's transaction"):
            require_atomic(s)


@pytest.fixture
def pg(pg_schema: PostgresSchema) -> Iterator[tuple[JournalStore, Any]]:
    """A PostgreSQL store, and the embedder's own connection on its schema (an orders table)."""
    import psycopg

    init_store(postgres=pg_schema.conninfo, origin=ORIGIN, key=generate_key(ORIGIN))
    store = open_store(postgres=pg_schema.conninfo)
    with psycopg.connect(pg_schema.conninfo) as conn:
        conn.execute(BUSINESS)
        conn.commit()
        try:
            yield store, conn
        finally:
            store.close()


def orders(conn: Any) -> set[tuple[str, int]]:
    with conn.cursor() as cur:
        cur.execute("SELECT run, seq FROM orders")
        rows = {(r, s) for r, s in cur.fetchall()}
    conn.commit()
    return rows


def test_postgres_store_has_the_capability(pg: tuple[JournalStore, Any]) -> None:
    store, _ = pg
    assert require_atomic(store) is store.atomic is not None


def test_rollback_leaves_neither_row_nor_record(pg: tuple[JournalStore, Any]) -> None:
    store, conn = pg
    journal = require_atomic(store).join(conn)
    lease = store.acquire("r1", "me", 60)
    with pytest.raises(ZeroDivisionError), conn.transaction():
        (rec,) = journal.append(lease.epoch, [Append("r1", "Ordered", data={"n": 1})])
        conn.execute("INSERT INTO orders VALUES (%s, %s)", ("r1", rec.seq))
        assert journal.head("r1").seq == 1  # the caller's transaction sees its own append
        assert store.head("r1").seq == 0  # nobody else does yet
        raise ZeroDivisionError  # the embedder fails after both writes
    assert store.head("r1").seq == 0
    assert store.read("r1") == []
    assert orders(conn) == set()
    # Nothing half-written: the next append is seq 1.
    assert [r.seq for r in store.append(lease.epoch, [Append("r1", "Ordered")])] == [1]


def test_commit_keeps_both_and_seal_joins_too(pg: tuple[JournalStore, Any]) -> None:
    store, conn = pg
    journal = require_atomic(store).join(conn)
    lease = store.acquire("r1", "me", 60)
    with conn.transaction():
        recs = journal.append(
            lease.epoch, [Append("r1", "Ordered", data={"n": 1}), Append("r1", "Paid")]
        )
        for r in recs:
            conn.execute("INSERT INTO orders VALUES (%s, %s)", ("r1", r.seq))
        seal = journal.seal("r1", lease.epoch, "ok")
        assert store.sealed("r1") is None
    assert store.read("r1")[:2] == recs
    assert store.sealed("r1") == seal and seal.position == 0
    assert store.checkpoint().size == 1
    assert orders(conn) == {("r1", 1), ("r1", 2)}
    store.verify("r1")


def test_refusals_undo_only_themselves(pg: tuple[JournalStore, Any]) -> None:
    store, conn = pg
    journal = require_atomic(store).join(conn)
    lease = store.acquire("r1", "me", 60)
    with conn.transaction():
        conn.execute("INSERT INTO orders VALUES ('r1', 1)")
        journal.append(lease.epoch, [Append("r1", "EffectStarted", effect_key="k")])
        with pytest.raises(FencedError):
            journal.append(lease.epoch + 1, [Append("r1", "Late")])
        with pytest.raises(DuplicateEffectError) as e:
            journal.append(lease.epoch, [Append("r1", "EffectStarted", effect_key="k")])
        assert e.value.effect_key == "k"  # named from the caller's own (uncommitted) record
        journal.append(lease.epoch, [Append("r1", "Done")])  # the transaction goes on
    assert [r.body().kind for r in store.read("r1")] == ["EffectStarted", "Done"]
    assert orders(conn) == {("r1", 1)}
    store.seal("r1", lease.epoch, "ok")
    with pytest.raises(RunSealedError), conn.transaction():
        journal.append(lease.epoch, [Append("r1", "After")])


def test_connections_that_cannot_be_joined(
    pg: tuple[JournalStore, Any], pg_schema: PostgresSchema
) -> None:
    import psycopg

    from tests.conftest import POSTGRES_URL

    store, _ = pg
    atomic = require_atomic(store)
    batch = [Append("r1", "X")]
    with psycopg.connect(pg_schema.conninfo, autocommit=True) as auto:
        with pytest.raises(UsageError, match="no transaction open"):
            atomic.join(auto).append(1, batch)
        with auto.transaction():
            auto.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            with pytest.raises(UsageError, match="must be READ COMMITTED"):
                atomic.join(auto).append(1, batch)
    with pytest.raises(UsageError, match="psycopg connection"):
        atomic.join(object()).append(1, batch)
    # Another schema (the public one): refused, whatever its tables are.
    with (
        psycopg.connect(POSTGRES_URL, autocommit=True) as other,
        pytest.raises(UsageError, match="does not reach this store"),
        other.transaction(),
    ):
        atomic.join(other).append(1, batch)
    assert store.head("r1").seq == 0


# --- SIGKILL between the business row and the commit ---------------------------------------------

KILLS = 12


def test_sigkill_never_keeps_one_without_the_other(pg_schema: PostgresSchema) -> None:
    import psycopg

    init_store(postgres=pg_schema.conninfo, origin=ORIGIN, key=generate_key(ORIGIN))
    with psycopg.connect(pg_schema.conninfo, autocommit=True) as conn:
        conn.execute(BUSINESS)
    rng = random.Random(13)
    committed: set[tuple[str, int]] = set()
    for cycle in range(KILLS):
        proc = subprocess.Popen(
            [
                sys.executable,
                str(WORKER),
                "embedder",
                "--postgres",
                pg_schema.conninfo,
                "--prefix",
                f"c{cycle}",
                "--seed",
                str(cycle),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert proc.stdout is not None
        # Kill at a random line: half of the time right after "appended" (before COMMIT).
        target = rng.randrange(2, 30)
        for seen, raw in enumerate(proc.stdout, 1):
            line = json.loads(raw)
            if line.get("op") == "committed":
                committed.update((line["run"], s) for s in line["seqs"])
            if seen >= target and (line.get("op") == "appended" or rng.random() < 0.3):
                if rng.random() < 0.5:
                    time.sleep(rng.random() * 0.005)
                break
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        assert proc.returncode == -signal.SIGKILL, proc.stderr.read() if proc.stderr else ""
        with (
            open_store(postgres=pg_schema.conninfo) as store,
            psycopg.connect(pg_schema.conninfo, autocommit=True) as conn,
        ):
            rows = {(r, s) for r, s in conn.execute("SELECT run, seq FROM orders").fetchall()}
            runs = {r for r, _ in rows} | {f"c{cycle}-{k}" for k in range(20)}
            records = {(run, rec.seq) for run in runs for rec in store.read(run)}
            assert rows == records  # never one without the other
            assert committed <= rows  # what was reported committed is there
            for run in runs:
                store.verify(run)
