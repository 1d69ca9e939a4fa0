"""Fault and concurrency tests of the journal store: real processes racing, real SIGKILLs (the
guarantees of docs/embedder-guide.md: leases, fencing, durable appends).

Every test here drives *separate OS processes* — ``sys.executable tests/store/worker.py`` —
each with its own store handle and database connection on one store (a SQLite file, or a fresh
PostgreSQL schema), and checks the outcome from the test process through its own handle, with
oracles independent of the store: Merkle roots rebuilt from the sealed heads
(:class:`tlog.merkle.MemoryHashStore`), proofs checked with :func:`tlog.merkle.verify_inclusion`
and :func:`tlog.merkle.verify_consistency`, record bodies decoded with
:func:`tlog.journal.decode_body`, checkpoint notes opened with the log's verifier.

Races (each several rounds with fresh runs, :data:`PROCS` processes started on one instant —
every worker is connected and waiting before the test hands them a common start time ``at``):

* ``acquire``: exactly one process gets the lease, every other one LeaseHeldError naming the
  winner; the winner's epoch is the store's (a fresh run: 1; an expired lease: its epoch + 1;
  records without a lease: their highest epoch + 1), and only that epoch may append.
* fenced writers: a chain of :data:`PROCS` takeovers of one run (each lease expires on the shared
  clock, the next process acquires it) while every earlier holder keeps appending: once taken
  over, *every* append of a stale holder is refused with FencedError, none of its refused
  records exist, the epochs along the chain never decrease, and the chain verifies.
* effect starts: :data:`PROCS` processes append ``EffectStarted`` with one effect key to one run
  (without a lease row, each under another epoch; or all under the run's lease epoch): exactly
  one batch lands, every other one is DuplicateEffectError, the run holds one such record.
* admissions: :data:`PROCS` processes each admit their own run with one admission key (a fresh
  key, or one retired from an earlier run): exactly one run is admitted, every other process
  gets DuplicateAdmissionError naming it, and its run has no record.
* seals: :data:`PROCS` processes each acquire, append to and seal their own runs while another
  process takes checkpoints (and signs some) without pause: positions are exactly
  0..total-1, no size is ever seen with two roots nor shrinks, every kept (size, root) equals the
  root rebuilt from the sealed heads and has a verified consistency proof to the next kept one
  and to the final one, every sealed run's inclusion proof verifies against the final root.

Crash safety: a writer process (``tests/store/worker.py writer``) appends batches of 1-20 records,
concludes and seals runs, releases leases and signs checkpoints, printing a line after each
commit; it is killed with SIGKILL :data:`KILL_CYCLES` times per backend on one store, at random
moments and, on purpose, right after it announced a seal, an append or a checkpoint. After each
kill: every record it reported is present with the same hash, every touched chain verifies with
non-decreasing epochs, every reported seal is at its reported position, the log is dense, the
new checkpoint is consistent (verified proofs) with every earlier checkpoint (reported by a
writer or taken by the test), the killed writer's lease shows up in ``abandoned_runs``, and the
next writer takes that run over at the head the test last saw. At the end everything is
checked again over the whole store.

The shared store clock is a file (:class:`tests.store.worker.FileClock`) that the test moves: leases
expire without sleeping.
"""

from __future__ import annotations

import itertools
import json
import os
import queue
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import pytest

from store.api import Append, JournalStore, Seal
from store.errors import FencedError, LeaseHeldError
from store.open import init_store, open_store
from tests.store.worker import FileClock
from tlog.checkpoint import open_checkpoint
from tlog.journal import KIND_EFFECT_STARTED, decode_body
from tlog.keys import SignerKey, generate_key
from tlog.merkle import EMPTY_ROOT, MemoryHashStore, leaf_hash, verify_consistency, verify_inclusion
from tlog.note import Ed25519Signer, Verifier

ROOT = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).resolve().parent / "worker.py"

ORIGIN = "example.com/journal"
T0 = 1_700_000_000
LONG = 3600
"""A lease TTL that never runs out during a test (the shared clock moves only when told)."""

PROCS = 8
"""How many processes race in each round."""

KILL_CYCLES = 50
"""SIGKILLs of the crash writer per backend."""

Json = dict[str, Any]


# --- the store under test ----------------------------------------------------------------------


@dataclass
class Db:
    """One initialised store, its log key (also in a key file) and its shared file clock."""

    name: str
    db: str | None
    postgres: str | None
    key: SignerKey
    key_file: Path
    clock: FileClock
    tmp: Path

    @classmethod
    def create(cls, backend: Any, tmp: Path) -> Db:
        """Initialise the ``backend`` fixture's store with a fresh key; the clock reads T0."""
        key = generate_key(ORIGIN)
        init_store(db=backend.db, postgres=backend.postgres, origin=ORIGIN, key=key)
        key_file = tmp / "log.key"
        key_file.write_text(key.format() + "\n", encoding="utf-8")
        clock = FileClock(str(tmp / "clock"))
        clock.set(T0)
        return cls(backend.name, backend.db, backend.postgres, key, key_file, clock, tmp)

    def args(self) -> list[str]:
        """The worker's options for this store."""
        where = ["--db", self.db] if self.db is not None else ["--postgres", str(self.postgres)]
        return [*where, "--clock-file", self.clock.path, "--key-file", str(self.key_file)]

    def open(self) -> JournalStore:
        """A handle of the test process (with the log key and the shared clock)."""
        return open_store(db=self.db, postgres=self.postgres, key=self.key, clock=self.clock)

    def verifier(self) -> Verifier:
        """The verifier of the default tenant's checkpoints."""
        return Ed25519Signer(f"{ORIGIN}/default", self.key.secret).verifier()


# --- worker processes --------------------------------------------------------------------------


class Worker:
    """One ``tests/store/worker.py`` process: JSON commands to its stdin, JSON lines from its stdout
    (read by a thread into a queue, so the test can wait with a timeout)."""

    _count = 0

    def __init__(self, db: Db, mode: str, *extra: str) -> None:
        Worker._count += 1
        self.err_path = db.tmp / f"worker-{Worker._count}.err"
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
        with open(self.err_path, "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, str(WORKER), mode, *db.args(), *extra],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                cwd=ROOT,
                env=env,
            )
        self.lines: queue.Queue[bytes | None] = queue.Queue()
        self.raw: list[bytes] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        out = self.proc.stdout
        assert out is not None
        for line in out:
            self.raw.append(line)
            self.lines.put(line)
        self.lines.put(None)

    def stderr(self) -> str:
        return self.err_path.read_text(encoding="utf-8", errors="replace")[-3000:]

    def send(self, cmd: Json) -> None:
        stdin = self.proc.stdin
        assert stdin is not None
        stdin.write((json.dumps(cmd) + "\n").encode())
        stdin.flush()

    def recv(self, timeout: float = 120.0) -> Json:
        """The next line, parsed; fails the test when the worker ended or fell silent."""
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            pytest.fail(f"worker {self.proc.pid} silent for {timeout} s; stderr:\n{self.stderr()}")
        if line is None:
            self.proc.wait(10)
            pytest.fail(
                f"worker {self.proc.pid} ended (status {self.proc.returncode}); "
                f"stderr:\n{self.stderr()}"
            )
        assert line.endswith(b"\n"), line
        out: Json = json.loads(line)
        return out

    def call(self, cmd: Json) -> Json:
        self.send(cmd)
        return self.recv()

    def kill(self) -> None:
        """SIGKILL this worker (if it still runs) and wait for it and its output."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)
        self._reader.join(30)

    def stop(self) -> None:
        """End a serving worker politely (EOF on stdin), else kill it."""
        stdin: IO[bytes] | None = self.proc.stdin
        try:
            if self.proc.poll() is None and stdin is not None:
                stdin.close()
            self.proc.wait(10)
        except (OSError, subprocess.TimeoutExpired):
            pass
        self.kill()


@contextmanager
def serving(db: Db, n: int) -> Iterator[list[Worker]]:
    """``n`` serving workers on ``db``, each connected and ready; all stopped afterwards."""
    workers: list[Worker] = []
    try:
        for _ in range(n):
            workers.append(Worker(db, "serve"))
        for w in workers:
            assert "ready" in w.recv(), w.stderr()
        yield workers
    finally:
        for w in workers:
            w.stop()


def start_time() -> float:
    """A common start instant for a race, far enough ahead for every command to arrive."""
    return time.time() + 0.15


def race(workers: list[Worker], command: Callable[[int], Json]) -> list[Json]:
    """Send ``command(i)`` to worker i, all with one start time; return the replies in order."""
    at = start_time()
    for i, w in enumerate(workers):
        w.send({**command(i), "at": at})
    return [w.recv() for w in workers]


# --- oracles -----------------------------------------------------------------------------------


def all_seals(store: JournalStore) -> list[Seal]:
    out: list[Seal] = []
    while True:
        page = store.seals(out[-1].position if out else -1, 1000)
        out.extend(page)
        if len(page) < 1000:
            return out


def all_runs(store: JournalStore) -> list[str]:
    out: list[str] = []
    while True:
        page = store.runs(out[-1] if out else None, 1000)
        out.extend(page)
        if len(page) < 1000:
            return out


def rebuilt_tree(seals: list[Seal]) -> MemoryHashStore:
    """The log rebuilt from the sealed heads, which must hold positions 0..n-1 exactly."""
    assert [s.position for s in seals] == list(range(len(seals))), "log positions are not dense"
    tree = MemoryHashStore()
    tree.extend(leaf_hash(s.head) for s in seals)
    return tree


def check_consistent(store: JournalStore, old: tuple[int, bytes], new: tuple[int, bytes]) -> None:
    """Verify the store's consistency proof from checkpoint ``old`` to checkpoint ``new``."""
    (m, old_root), (n, new_root) = old, new
    assert m <= n
    if m == 0:
        assert old_root == EMPTY_ROOT
        return
    verify_consistency(m, n, old_root, new_root, store.consistency_proof(m, n))


def check_included(store: JournalStore, seal: Seal, size: int, root: bytes) -> None:
    """Verify the store's inclusion proof of ``seal`` in the log of ``size`` with ``root``."""
    inc = store.inclusion_proof(seal.run, size)
    assert inc is not None, seal
    assert (inc.index, inc.size, inc.head) == (seal.position, size, seal.head)
    verify_inclusion(inc.index, size, leaf_hash(inc.head), inc.proof, root)


def epochs_of(store: JournalStore, run: str) -> list[int]:
    return [decode_body(r.raw).epoch for r in store.read(run)]


def non_decreasing(xs: list[int]) -> bool:
    return all(a <= b for a, b in itertools.pairwise(xs))


# --- races -------------------------------------------------------------------------------------

ACQUIRE_ROUNDS = 12


def test_acquire_race_gives_exactly_one_owner(
    backend: Any, tmp_path: Path, record_property: Callable[[str, object], None]
) -> None:
    """PROCS processes acquire one run at one instant: one Lease, PROCS-1 LeaseHeldError naming
    the winner; the winner's epoch is the store's. Rounds rotate over a fresh run (epoch 1), a
    run whose lease expired (its epoch + 1) and a run with records but no lease (their highest
    epoch + 1)."""
    db = Db.create(backend, tmp_path)
    wins: Counter[int] = Counter()
    with db.open() as store, serving(db, PROCS) as workers:
        for rnd in range(ACQUIRE_ROUNDS):
            run = f"acquire-{rnd}"
            kind = rnd % 3
            if kind == 0:
                want = 1
            elif kind == 1:
                first = store.acquire(run, "earlier", 1)
                store.release(run, first.epoch)
                second = store.acquire(run, "earlier", 1)
                db.clock.advance(2)  # the second lease lapses, unreleased
                assert run in store.abandoned_runs(1000)
                want = second.epoch + 1
            else:
                store.append(7, [Append(run, "Note", data=rnd)])  # no lease row: any epoch
                want = 8

            def command(i: int, run: str = run) -> Json:
                return {"op": "acquire", "run": run, "owner": f"p{i}", "ttl": LONG}

            replies = race(workers, command)
            winners = [i for i, r in enumerate(replies) if "lease" in r]
            assert len(winners) == 1, replies
            (w,) = winners
            wins[w] += 1
            epoch = replies[w]["lease"]
            assert epoch == want, (rnd, replies)
            for i, r in enumerate(replies):
                if i != w:
                    assert r.get("error") == "LeaseHeldError", (i, r)
                    assert (r["owner"], r["epoch"]) == (f"p{w}", epoch), (i, r)
            with pytest.raises(LeaseHeldError) as held:
                store.acquire(run, "probe", 1)
            assert (held.value.owner, held.value.epoch) == (f"p{w}", epoch)
            # The winner's epoch is the one the store fences with.
            with pytest.raises(FencedError):
                store.append(epoch + 1, [Append(run, "Note", data="future")])
            if epoch > 1:
                with pytest.raises(FencedError):
                    store.append(epoch - 1, [Append(run, "Note", data="stale")])
            store.append(epoch, [Append(run, "Note", data="owner")])
            store.verify(run)
    summary = f"acquire race {db.name}: {ACQUIRE_ROUNDS} rounds x {PROCS} processes, wins {wins}"
    record_property("summary", summary)
    print(summary)


EFFECT_ROUNDS = 10
EFFECT_KEY = "send-invoice"


def test_effect_start_race_gives_exactly_one(
    backend: Any, tmp_path: Path, record_property: Callable[[str, object], None]
) -> None:
    """PROCS processes each append [Note, EffectStarted(EFFECT_KEY)] to one run at one instant:
    exactly one batch lands; every other is DuplicateEffectError and wrote nothing. Even rounds
    have no lease row (each process under its own epoch, all accepted); odd rounds share the
    run's lease epoch."""
    db = Db.create(backend, tmp_path)
    wins: Counter[int] = Counter()
    with db.open() as store, serving(db, PROCS) as workers:
        for rnd in range(EFFECT_ROUNDS):
            run = f"effect-{rnd}"
            if rnd % 2:
                lease = store.acquire(run, "test", LONG)
                epochs = [lease.epoch] * PROCS
            else:
                epochs = [i + 1 for i in range(PROCS)]

            def command(i: int, run: str = run, epochs: list[int] = epochs) -> Json:
                return {
                    "op": "append",
                    "run": run,
                    "epoch": epochs[i],
                    "records": [
                        {"kind": "Note", "data": {"p": i}},
                        {"kind": KIND_EFFECT_STARTED, "effect_key": EFFECT_KEY, "data": {"p": i}},
                    ],
                }

            replies = race(workers, command)
            winners = [i for i, r in enumerate(replies) if "records" in r]
            assert len(winners) == 1, replies
            (w,) = winners
            for i, r in enumerate(replies):
                if i != w:
                    assert r.get("error") == "DuplicateEffectError", (i, r)
            records = store.read(run)
            assert [[r.seq, r.hash.hex()] for r in records] == replies[w]["records"]
            bodies = [decode_body(r.raw) for r in records]
            assert [b.data for b in bodies] == [{"p": w}, {"p": w}]
            assert [b.epoch for b in bodies] == [epochs[w]] * 2
            started = [b for b in bodies if b.kind == KIND_EFFECT_STARTED]
            assert len(started) == 1
            assert started[0].effect_key == EFFECT_KEY
            store.verify(run)
            wins[w] += 1
    summary = f"effect race {db.name}: {EFFECT_ROUNDS} rounds x {PROCS} processes, wins {wins}"
    record_property("summary", summary)
    print(summary)


ADMISSION_ROUNDS = 10


def test_admission_race_admits_exactly_one_run_per_key(
    backend: Any, tmp_path: Path, record_property: Callable[[str, object], None]
) -> None:
    """PROCS processes each admit their own run with one admission key at one instant
    ([RunAdmitted, Note], no lease: nothing but the key relates the runs): exactly one run is
    admitted; every other process gets DuplicateAdmissionError naming the winner, and its run
    has nothing. Odd rounds race for a key retired (``forget_admissions``) from an earlier run,
    which the winner then holds."""
    db = Db.create(backend, tmp_path)
    wins: Counter[int] = Counter()
    winners_all: list[str] = []
    with db.open() as store, serving(db, PROCS) as workers:
        for rnd in range(ADMISSION_ROUNDS):
            key_id = f"order-{rnd}"
            if rnd % 2:
                before = Append(f"before-{rnd}", "RunAdmitted", {"source": "queue", "id": key_id})
                store.append(1, [before])
                # Retires this key and the earlier rounds' (all claimed before now).
                assert store.forget_admissions(db.clock.advance(1)) >= 1
                assert store.admitted_as(f"queue/{key_id}") is None

            def command(i: int, rnd: int = rnd, key_id: str = key_id) -> Json:
                run = f"adm-{rnd}-{i}"
                return {
                    "op": "append",
                    "run": run,
                    "epoch": 1,
                    "records": [
                        {"kind": "RunAdmitted", "data": {"source": "queue", "id": key_id}},
                        {"kind": "Note", "data": {"p": i}},
                    ],
                }

            replies = race(workers, command)
            winners = [i for i, r in enumerate(replies) if "records" in r]
            assert len(winners) == 1, replies
            (w,) = winners
            winner = f"adm-{rnd}-{w}"
            for i, r in enumerate(replies):
                if i != w:
                    assert r.get("error") == "DuplicateAdmissionError", (i, r)
                    assert (r["key"], r["holder"], r["run"]) == (
                        f"queue/{key_id}",
                        winner,
                        f"adm-{rnd}-{i}",
                    ), (i, r)
                    assert store.read(f"adm-{rnd}-{i}") == []
            assert store.admitted_as(f"queue/{key_id}") == winner
            assert [r.seq for r in store.read(winner)] == [1, 2]
            winners_all.append(winner)
            wins[w] += 1
        # The source index holds the winners (and the retired keys' runs), no loser.
        listed = {r for r, _ in store.recent_runs(None, 1000, source="queue")}
        assert {r for r in listed if r.startswith("adm-")} == set(winners_all)
    summary = (
        f"admission race {db.name}: {ADMISSION_ROUNDS} rounds x {PROCS} processes, wins {wins}"
    )
    record_property("summary", summary)
    print(summary)


FENCE_ROUNDS = {"postgres": 4, "sqlite": 2}
"""Rounds per backend (SQLite's busy handler makes eight hammering processes slow)."""
FENCED_ATTEMPTS = 25
"""Appends each stale holder keeps trying after it was taken over (all must be refused)."""
LAST_WRITER_OKS = 30


def test_fenced_writers_are_refused_while_racing(
    backend: Any, tmp_path: Path, record_property: Callable[[str, object], None]
) -> None:
    """A chain of PROCS takeovers of one run, each while every earlier holder keeps appending.

    Holder i acquires with a 1 s TTL; it appends without pause; once it has landed an append the
    clock moves 2 s and holder i+1 takes the run over (epoch + 1). Every stale holder goes on
    appending until FENCED_ATTEMPTS of its appends were refused; the last holder lands
    LAST_WRITER_OKS appends meanwhile. Each holder's stream must be some landed appends, then
    only refusals; the chain must hold exactly the landed appends, epochs never decreasing.
    """
    db = Db.create(backend, tmp_path)
    refused = 0
    with db.open() as store, serving(db, PROCS) as workers:
        for rnd in range(FENCE_ROUNDS[db.name]):
            run = f"fenced-{rnd}"
            epochs: list[int] = []
            streams: list[list[Json]] = [[] for _ in workers]
            for i, w in enumerate(workers):
                db.clock.advance(2)  # the previous holder's 1 s lease has lapsed
                reply = w.call({"op": "acquire", "run": run, "owner": f"h{i}", "ttl": 1})
                assert "lease" in reply, (i, reply)
                epochs.append(reply["lease"])
                last = i == len(workers) - 1
                w.send(
                    {
                        "op": "hammer",
                        "run": run,
                        "epoch": reply["lease"],
                        "tag": i,
                        "ok_limit": LAST_WRITER_OKS if last else 10**9,
                        "fenced_limit": 1 if last else FENCED_ATTEMPTS,
                        "timeout": 60,
                        "seed": rnd * 100 + i,
                    }
                )
                if not last:
                    # The next takeover comes only once this holder is writing.
                    streams[i].append(w.recv())
                    assert "ok" in streams[i][0], (i, streams[i])
            for i, w in enumerate(workers):
                while not streams[i] or "done" not in streams[i][-1]:
                    streams[i].append(w.recv())
            assert epochs == list(range(epochs[0], epochs[0] + PROCS)), epochs
            landed: dict[int, set[tuple[int, str]]] = {}
            for i, lines in enumerate(streams):
                done, attempts = lines[-1], lines[:-1]
                assert not done["timed_out"], (i, done)
                kinds = [
                    "ok" if "ok" in a else "fenced" if "fenced" in a else "?" for a in attempts
                ]
                n_ok = kinds.count("ok")
                if i < PROCS - 1:
                    assert n_ok >= 1
                    assert kinds == ["ok"] * n_ok + ["fenced"] * FENCED_ATTEMPTS, (i, attempts)
                    assert all(a["current"] > epochs[i] for a in attempts[n_ok:]), (i, attempts)
                    refused += FENCED_ATTEMPTS
                else:
                    assert kinds == ["ok"] * LAST_WRITER_OKS, (i, attempts)
                landed[i] = {(s, h) for a in attempts[:n_ok] for s, h in a["records"]}
            records = store.read(run)
            bodies = [decode_body(r.raw) for r in records]
            for i in range(PROCS):
                mine = {
                    (r.seq, r.hash.hex())
                    for r, b in zip(records, bodies, strict=True)
                    if b.data["w"] == i
                }
                assert mine == landed[i], (
                    f"holder {i}: the chain holds other records than it landed"
                )
            assert all(b.epoch == epochs[b.data["w"]] for b in bodies)
            assert non_decreasing([b.epoch for b in bodies]), (
                "a stale epoch landed after a newer one"
            )
            assert store.verify(run) == records[-1].hash
    summary = (
        f"fenced writers {db.name}: {FENCE_ROUNDS[db.name]} rounds x {PROCS} holders,"
        f" {refused} stale appends refused"
    )
    record_property("summary", summary)
    print(summary)


SEAL_ROUNDS = 4
RUNS_PER_SEALER = 20
SIGN_EVERY = 7


def test_seal_race_keeps_the_log_dense_and_consistent(
    backend: Any, tmp_path: Path, record_property: Callable[[str, object], None]
) -> None:
    """PROCS processes each acquire, append to and seal RUNS_PER_SEALER runs of their own while
    one more process takes checkpoints (signing every SIGN_EVERY-th) until the log is complete.
    Checked each round and at the end: positions dense, no size with two roots, no shrinking,
    kept roots equal to the rebuilt tree's, proofs between kept checkpoints and to the final
    one, every sealed run's inclusion proof against the final root, signed notes valid."""
    db = Db.create(backend, tmp_path)
    kept: dict[int, bytes] = {}
    reported: dict[str, tuple[int, str]] = {}
    interleaved_rounds = 0
    midway = 0
    with db.open() as store, serving(db, PROCS + 1) as workers:
        sealers, watcher = workers[:PROCS], workers[PROCS]
        total = 0
        for rnd in range(SEAL_ROUNDS):
            target = total + PROCS * RUNS_PER_SEALER
            at = start_time()
            watcher.send(
                {
                    "op": "checkpoints",
                    "until": target,
                    "sign_every": SIGN_EVERY,
                    "timeout": 120,
                    "at": at,
                }
            )
            for i, w in enumerate(sealers):
                runs = [f"seal-{rnd}-{i}-{k}" for k in range(RUNS_PER_SEALER)]
                w.send(
                    {
                        "op": "seal_runs",
                        "runs": runs,
                        "owner": f"p{i}",
                        "ttl": LONG,
                        "seed": rnd * 100 + i,
                        "at": at,
                    }
                )
            owner_at: dict[int, int] = {}
            for i, w in enumerate(sealers):
                for _ in range(RUNS_PER_SEALER):
                    line = w.recv()
                    assert "sealed" in line, (i, line)
                    reported[line["sealed"]] = (line["position"], line["head"])
                    owner_at[line["position"]] = i
                assert w.recv() == {"done": True}
            watch = watcher.recv()
            assert watch.get("done"), watch
            assert not watch["timed_out"] and watch["conflicts"] == [], watch
            assert watch["decreases"] == 0, watch
            assert sorted(owner_at) == list(range(total, target)), "reported positions"
            owners = [owner_at[p] for p in range(total, target)]
            if sum(a != b for a, b in itertools.pairwise(owners)) > PROCS - 1:
                interleaved_rounds += 1

            seals = all_seals(store)
            tree = rebuilt_tree(seals)
            cp = store.checkpoint()
            assert (cp.size, cp.root) == (target, tree.root())
            for s in seals[total:]:
                assert reported[s.run] == (s.position, s.head.hex())
                assert store.head(s.run).hash == s.head
            pairs = [(size, bytes.fromhex(root)) for size, root in watch["pairs"]]
            midway += sum(total < size < target for size, _ in pairs)
            for size, root in pairs:
                assert kept.setdefault(size, root) == root, f"two roots for size {size}"
                assert tree.root(size) == root, f"size {size}: not a prefix of the final log"
            for size, root in watch["signed"]:
                assert kept[size] == bytes.fromhex(root)
            ordered = sorted(kept.items())
            for old, new in itertools.pairwise(ordered):
                if old[0] >= total:  # pairs of earlier rounds were proved then
                    check_consistent(store, old, new)
            for old in ordered:
                if old[0] >= total:
                    check_consistent(store, old, (cp.size, cp.root))
            for s in seals[total:]:
                check_included(store, s, cp.size, cp.root)
            total = target

        final = store.checkpoint()
        assert final.size == total == len(reported)
        seals = all_seals(store)
        tree = rebuilt_tree(seals)
        assert tree.root() == final.root
        for size, root in sorted(kept.items()):
            assert tree.root(size) == root
            check_consistent(store, (size, root), (final.size, final.root))
        for s in seals:
            check_included(store, s, final.size, final.root)
            store.verify(s.run)
        verifier = db.verifier()
        notes = store.published()
        assert notes, "the watcher signed no checkpoint"
        for note in notes:
            c = open_checkpoint(note, [verifier]).checkpoint
            assert tree.root(c.size) == c.root
    assert interleaved_rounds >= 1, "the sealers never overlapped: nothing raced"
    assert midway >= SEAL_ROUNDS, "no checkpoint was taken while the seals raced"
    summary = (
        f"seal race {db.name}: {SEAL_ROUNDS} rounds x {PROCS} sealers, {total} seals,"
        f" {len(kept)} kept checkpoints ({midway} mid-race), {len(notes)} signed,"
        f" {interleaved_rounds} interleaved rounds"
    )
    record_property("summary", summary)
    print(summary)


# --- crash safety ------------------------------------------------------------------------------


@dataclass
class CrashLedger:
    """What the killed writers reported, and what the test saw, across all kill cycles."""

    records: dict[str, dict[int, str]] = field(default_factory=dict)
    sealed: dict[str, tuple[int, str]] = field(default_factory=dict)
    checkpoints: dict[int, bytes] = field(default_factory=dict)
    heads: dict[str, int] = field(default_factory=dict)
    lease_epochs: dict[str, int] = field(default_factory=dict)
    abandoned: list[str] = field(default_factory=list)
    kills: Counter[str] = field(default_factory=Counter)
    fates: Counter[str] = field(default_factory=Counter)
    cycles: int = 0
    cycles_after_commit: int = 0
    takeovers: int = 0
    reported_records: int = 0

    def keep_checkpoint(self, size: int, root: bytes) -> None:
        assert self.checkpoints.setdefault(size, root) == root, f"two roots for size {size}"


KILL_MODES = ["early", "seal", "seal", "checkpoint", "append", "append", "random", "random"]
"""Kill schedules, in turn: ``early`` at 50-400 ms after start (maybe before any commit);
``seal``/``append``/``checkpoint`` 0-4 ms after the writer announced that operation;
``random`` 0-300 ms after its first commit."""


def wait_for(w: Worker, seen: list[Json], want: Callable[[Json], bool], timeout: float) -> bool:
    """Read the worker's lines into ``seen`` until one satisfies ``want`` (True) or time is up."""
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        try:
            line = w.lines.get(timeout=left)
        except queue.Empty:
            return False
        if line is None:
            w.proc.wait(10)
            pytest.fail(f"the writer ended by itself ({w.proc.returncode}):\n{w.stderr()}")
        seen.append(json.loads(line))
        if want(seen[-1]):
            return True


def kill_cycle(db: Db, cycle: int, rng: random.Random) -> tuple[str, list[Json]]:
    """Start a writer, kill it by the cycle's schedule; return (what it was doing, its lines)."""
    mode = KILL_MODES[cycle % len(KILL_MODES)]
    w = Worker(db, "writer", "--prefix", f"c{cycle}", "--seed", str(cycle))
    try:
        seen: list[Json] = []
        if mode == "early":
            time.sleep(rng.uniform(0.05, 0.4))
        elif mode == "random":
            if wait_for(w, seen, lambda x: x.get("op") not in (None, "begin"), 20):
                time.sleep(rng.uniform(0, 0.3))
        else:
            # Let it commit a few operations first, so there is something to lose.
            wait_for(w, seen, lambda x: x.get("op") == "appended", 20)
            wait_for(w, seen, lambda x: x.get("op") == "begin" and x.get("what") == mode, 20)
            time.sleep(rng.uniform(0, 0.004))
    finally:
        w.kill()
    assert w.proc.returncode == -signal.SIGKILL, (w.proc.returncode, w.stderr())
    lines = []
    for raw in w.raw:
        # A line is written in one system call after its commit: never torn; but a line
        # without its newline would report nothing, so it is not counted.
        if raw.endswith(b"\n"):
            lines.append(json.loads(raw))
    last = lines[-1] if lines else {}
    doing = last["what"] if last.get("op") == "begin" else "between" if lines else "starting"
    return doing, lines


def interrupted(store: JournalStore, led: CrashLedger, lines: list[Json]) -> str | None:
    """For a kill inside an append or a seal call: did that write land (committed, unreported)
    or was it lost (rolled back, or never sent)? Both are allowed; counting them shows that
    kills do land inside transactions."""
    last = lines[-1] if lines else {}
    if last.get("op") != "begin" or last["what"] not in ("append", "seal"):
        return None
    run = last["run"]
    if last["what"] == "seal":
        landed = store.sealed(run) is not None
    else:
        # The head before the interrupted append: the test's last look (the previous cycle),
        # or what this writer reported since.
        known = [led.heads.get(run, 0)]
        for x in lines:
            if x.get("op") == "acquired" and x["run"] == run:
                known.append(x["head"])
            elif x.get("op") == "appended" and x["run"] == run:
                known.append(x["records"][-1][0])
        landed = store.head(run).seq > max(known)
    return f"{last['what']} {'landed' if landed else 'lost'}"


def settle_run(store: JournalStore, run: str) -> None:
    """Wait until no transaction holds ``run``'s lock row (``run_state``, store/sql.py's
    serialisation rule): on PostgreSQL a killed writer's sent COMMIT has then landed or not.
    (SQLite has no in-flight transaction once the writer's process is gone.)"""
    if store.is_shared():
        hooks: Any = store
        hooks._execute_for_test(
            "SELECT run FROM run_state WHERE tenant = ? AND run = ? FOR UPDATE",
            (store.tenant, run),
        )


def check_cycle(store: JournalStore, db: Db, led: CrashLedger, lines: list[Json]) -> None:
    """Everything the killed writer reported is there, and the store is whole."""
    touched: set[str] = set()
    epoch_of: dict[str, int] = {}
    held: str | None = None
    for x in lines:
        op = x.get("op")
        if op == "acquired":
            run = x["run"]
            touched.add(run)
            if x["takeover"]:
                led.takeovers += 1
                assert run in led.abandoned, f"took over {run}, which was not abandoned"
                # It resumes exactly at the head the test saw after the previous kill.
                assert x["head"] == led.heads.get(run, 0), (x, led.heads.get(run))
            # A new epoch, above every epoch the run was written or leased under.
            assert x["epoch"] > led.lease_epochs.get(run, 0), (x, led.lease_epochs.get(run))
            led.lease_epochs[run] = x["epoch"]
            epoch_of[run] = x["epoch"]
            held = run
        elif op == "appended":
            run = x["run"]
            assert x["epoch"] == epoch_of[run]
            mine = led.records.setdefault(run, {})
            for seq, h in x["records"]:
                assert mine.setdefault(seq, h) == h, f"{run} {seq} reported twice"
                led.reported_records += 1
        elif op == "sealed":
            assert x["run"] not in led.sealed
            led.sealed[x["run"]] = (x["position"], x["head"])
        elif op == "released":
            held = None
        elif op == "checkpoint":
            led.keep_checkpoint(x["size"], bytes.fromhex(x["root"]))

    # Records and chains of every run this writer touched.
    for run in touched:
        # On PostgreSQL a COMMIT the killed writer had sent may still land while this reads
        # (the server finishes it): first wait for it, by taking the run's lock row, which
        # every write to the run holds until it ends. (A statement sent without its COMMIT
        # rolls back when the server finds the connection gone.) Without the wait, an append
        # landing after this look is seen by the next writer's takeover as a head the test
        # never saw.
        settle_run(store, run)
        # The seal before the records, all the same: a seal read after the records could
        # name a seal record they do not hold yet, were anything still in flight.
        seal = store.sealed(run)
        records = store.read(run)
        stored = {r.seq: r.hash.hex() for r in records}
        for seq, h in led.records.get(run, {}).items():
            assert stored.get(seq) == h, (
                f"{run} record {seq}: reported {h}, stored {stored.get(seq)}"
            )
        head = store.verify(run) if records else None
        assert head is None or head == records[-1].hash
        epochs = [decode_body(r.raw).epoch for r in records]
        assert non_decreasing(epochs), f"{run}: epochs go backwards"
        led.lease_epochs[run] = max([led.lease_epochs.get(run, 0), *epochs])
        led.heads[run] = len(records)
        if run in led.sealed:
            assert seal is not None and (seal.position, seal.head.hex()) == led.sealed[run]
        if seal is not None:
            assert records and seal.head == records[-1].hash, f"{run}: appended after its seal"

    # The log: dense, equal to the tree of the sealed heads, consistent with all seen before.
    seals = all_seals(store)
    tree = rebuilt_tree(seals)
    cp = store.checkpoint()
    assert (cp.size, cp.root) == (len(seals), tree.root())
    for size, root in sorted(led.checkpoints.items()):
        assert tree.root(size) == root, f"checkpoint {size} is not a prefix of the log"
        check_consistent(store, (size, root), (cp.size, cp.root))
    led.keep_checkpoint(cp.size, cp.root)

    # The killed writer's lease lapses on the shared clock: its run is abandoned (unless the
    # kill landed right after the release committed, before the writer could report it).
    db.clock.advance(2)
    led.abandoned = store.abandoned_runs(1000)
    last = lines[-1] if lines else {}
    if held is not None and last != {"op": "begin", "what": "release", "run": held}:
        assert held in led.abandoned, f"the killed writer's run {held} is not abandoned"


def check_store_whole(store: JournalStore, db: Db, led: CrashLedger) -> None:
    """After the last kill: every run, every seal and every checkpoint, once more."""
    runs = all_runs(store)
    assert set(led.records) <= set(runs)
    for run in runs:
        records = store.read(run)
        stored = {r.seq: r.hash.hex() for r in records}
        for seq, h in led.records.get(run, {}).items():
            assert stored.get(seq) == h, (run, seq)
        assert store.verify(run) == records[-1].hash
    seals = all_seals(store)
    tree = rebuilt_tree(seals)
    final = store.checkpoint()
    assert (final.size, final.root) == (len(seals), tree.root())
    for run, (position, head) in led.sealed.items():
        assert seals[position].run == run and seals[position].head.hex() == head
    for s in seals:
        check_included(store, s, final.size, final.root)
    for size, root in sorted(led.checkpoints.items()):
        check_consistent(store, (size, root), (final.size, final.root))
    verifier = db.verifier()
    for note in store.published():
        c = open_checkpoint(note, [verifier]).checkpoint
        assert led.checkpoints.get(c.size, c.root) == c.root
        assert tree.root(c.size) == c.root


def test_writer_killed_at_random_loses_nothing_committed(
    backend: Any, tmp_path: Path, record_property: Callable[[str, object], None]
) -> None:
    """KILL_CYCLES SIGKILLs of a writer on one store (see the module docstring)."""
    db = Db.create(backend, tmp_path)
    rng = random.Random(20240611)
    led = CrashLedger()
    started = time.monotonic()
    with db.open() as store:
        for cycle in range(KILL_CYCLES):
            doing, lines = kill_cycle(db, cycle, rng)
            led.cycles += 1
            led.kills[doing] += 1
            if any(x.get("op") not in (None, "begin") for x in lines):
                led.cycles_after_commit += 1
            fate = interrupted(store, led, lines)  # before check_cycle updates led.heads
            if fate is not None:
                led.fates[fate] += 1
            check_cycle(store, db, led, lines)
        check_store_whole(store, db, led)
        size = store.checkpoint().size
    summary = (
        f"crash {db.name}: {led.cycles} kills ({led.cycles_after_commit} after a commit;"
        f" by operation {dict(sorted(led.kills.items()))}; interrupted writes"
        f" {dict(sorted(led.fates.items()))}), {led.reported_records} records and"
        f" {len(led.sealed)} seals reported, {led.takeovers} takeovers, log size {size},"
        f" {len(led.checkpoints)} checkpoints checked, {time.monotonic() - started:.1f} s"
    )
    record_property("summary", summary)
    print(summary)
    assert led.cycles >= 50, summary
    assert led.cycles_after_commit >= KILL_CYCLES * 3 // 4, summary
    assert led.kills["seal"] >= 1 and led.kills["append"] >= 1, summary
    assert led.takeovers >= 1 and len(led.sealed) >= 1, summary
