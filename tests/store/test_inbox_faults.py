"""Fault and concurrency tests of the inbox (store.inbox): real processes racing on one key,
and a writer SIGKILLed at random moments (issue 14, acceptance items 2 and 3).

Every process here is a child forked by a *zygote* (``tests/store/inbox_worker.py``, started
with ``sys.executable``): it imported everything once, so a child costs a fork and a database
connection rather than an interpreter start-up. Each child opens its own store handle; the test
looks at the store through its own handle, with oracles independent of the inbox's code: the
Merkle root rebuilt from the entries (:func:`tlog.merkle.leaf_hash` of the canonical entry
JSON, spelled out here), checkpoint notes opened with the verifier parsed from the inbox log's
vkey, consistency proofs checked with :func:`tlog.merkle.verify_consistency`, payloads hashed
here.

Races (:func:`test_claim_race_resumes_each_run_and_event_at_most_once`): :data:`RACERS`
processes; between them they register the waits of N runs and buffer M events (a few sent
twice, by two processes; a few more of a kind nobody waits for), interleaved, on keys that
overlap: waits go through ``wait`` or ``claim`` then ``wait``, events through
``buffer(match=True)``, ``buffer(match=False)`` then ``match``, or ``buffer_many``, so claims
happen in both directions at once. The shapes (:data:`SHAPES`): many short slots of N<M, N>M
and N=M where every racer's one op starts at one instant (a wait and an event on one key really
collide there), and longer rounds of N<M, N>M, N=M with one key common to every wait and event
(any wait fits any event) and of N=M with keys drawn from a pool (no common key). The first
racers create the inbox's tables, at once. After each slot: each event was claimed at most once
and each (run, effect) got at most one event — in the calls' return values and in the table;
every claimed event was returned to the call that claimed it, is listed by ``held`` of its run
and is handed back by the run's ``claim`` (recovered), and nothing else is claimed (nothing
claimed-but-unreachable); every run either claimed or still waits, never both; no live event is
left beside a registered wait that fits it (with the common key: matched == min(N, M) exactly);
events of the other kind stay live; no transaction had to be re-run (a PostgreSQL deadlock).
At the end ``counts`` adds up (live + claimed + dead == size == the events listed) and the inbox
root is the one rebuilt from the entries. On PostgreSQL and, trivially, on SQLite (several
processes on one file). Removing the per-key locks of store/inbox/core.py makes it fail within a
few slots (a live event beside a waiting run), and so does removing the claim's arbiter (one
event resumes two runs).

Crash safety (:func:`test_inbox_writer_killed_at_random_loses_nothing_acknowledged`):
:data:`WRITERS` writers at once (:class:`tests.store.inbox_worker.InboxWriter`) buffer events,
wait and claim for their runs, journal deliveries under a lease epoch, unsubscribe, conclude
runs, sign inbox checkpoints, erase payloads and sweep; both are SIGKILLed in each of
:data:`KILLS` cycles per backend, the first at a random moment or on purpose right after it
announced a given operation (:data:`KILL_MODES`). The next writers take over the abandoned runs
(their leases lapse on the shared clock). After each cycle — on PostgreSQL once the killed
children's backends are gone, so that a COMMIT one had sent has landed or not — every
acknowledged buffer is there with its position and payload hash; every acknowledged claim names
its run; no run holds two events and no dead letter is claimed; a payload is missing only when
erased on purpose (the writer announced the erasure) or shed by ``unsubscribe`` after the
delivery was journaled; each run has at most one ``EventDelivered`` record, which names the
event its run claimed (and the event names the record); no event is delivered twice; a run that
claimed does not wait; the inbox log is dense and its root rebuilt from the entries is the
checkpoint's; every kept inbox checkpoint verifies (the inbox log's vkey) and is a prefix of the
log, consistent (verified proofs) with the one before it and with the current one; every
acknowledged checkpoint is kept; ``counts`` adds up. At the end every held event and every
registered wait belongs to an abandoned run (one a writer will take over). The test requires
kills inside writes and writes that landed unacknowledged, and reports the numbers. Splitting
``journal_delivery`` into two transactions makes it fail within a few cycles.

:func:`test_one_event_never_resumes_two_waits_of_one_run`: the crash recovery of a claim is per
wait (the claim remembers the wait it satisfied), so a run's second wait is never handed the
event claimed for its first.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import pytest

from store.api import JournalStore
from store.inbox import StoredEvent, Wait, make_wait
from tests.store.inbox_worker import WAITED_KIND, delivered_records, inbox_of, wait_of
from tests.store.test_faults import Db
from tlog.checkpoint import open_checkpoint
from tlog.encoding import b64encode
from tlog.inbox import make_event
from tlog.journal import canonical_json
from tlog.keys import parse_vkey
from tlog.merkle import EMPTY_ROOT, MemoryHashStore, leaf_hash, verify_consistency

ROOT = Path(__file__).resolve().parents[2]
ZYGOTE = Path(__file__).resolve().parent / "inbox_worker.py"

Json = dict[str, Any]
EventId = tuple[str, str]

RACERS = 5
"""Processes racing in each round."""

KILLS = 50
"""Kill cycles per backend (each kills :data:`WRITERS` writers)."""
WRITERS = 2
"""Crash writers working on the store at once in each cycle."""


# --- the zygote and its children -----------------------------------------------------------------


class Zygote:
    """``tests/store/inbox_worker.py``: forks the children (module docstring there)."""

    def __init__(self, db: Db) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
        self.err_path = db.tmp / "zygote.err"
        with open(self.err_path, "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, str(ZYGOTE), *db.args()],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                cwd=ROOT,
                env=env,
            )
        self.tmp = db.tmp
        self.children: set[int] = set()

    def _call(self, cmd: Json) -> Json:
        stdin: IO[bytes] | None = self.proc.stdin
        stdout: IO[bytes] | None = self.proc.stdout
        assert stdin is not None and stdout is not None
        stdin.write((json.dumps(cmd) + "\n").encode())
        stdin.flush()
        line = stdout.readline()
        if not line:
            self.proc.wait(10)
            pytest.fail(f"the zygote ended ({self.proc.returncode}): {self.stderr()}")
        out: Json = json.loads(line)
        return out

    def stderr(self) -> str:
        return self.err_path.read_text(encoding="utf-8", errors="replace")[-3000:]

    def spawn(self, mode: str, name: str, args: Json) -> Child:
        out = self.tmp / f"{name}.jsonl"
        pid = self._call({"op": "spawn", "mode": mode, "out": str(out), "args": args})["pid"]
        self.children.add(pid)
        return Child(self, pid, out)

    def reap(self, pid: int) -> Json:
        status = self._call({"op": "reap", "pid": pid})
        self.children.discard(pid)
        return status

    def close(self) -> None:
        for pid in list(self.children):
            os.kill(pid, signal.SIGKILL)
            self.reap(pid)
        stdin = self.proc.stdin
        if stdin is not None:
            stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


@contextmanager
def zygote(db: Db) -> Iterator[Zygote]:
    z = Zygote(db)
    try:
        yield z
    finally:
        z.close()


@dataclass
class Child:
    """One forked child and the lines it wrote (:meth:`poll` reads the new ones)."""

    zygote: Zygote
    pid: int
    out: Path
    lines: list[Json] = field(default_factory=list)
    _offset: int = 0

    def poll(self) -> list[Json]:
        """The complete lines written since the last poll."""
        try:
            with open(self.out, "rb") as f:
                f.seek(self._offset)
                data = f.read()
        except FileNotFoundError:
            return []
        end = data.rfind(b"\n") + 1
        self._offset += end
        new = [json.loads(x) for x in data[:end].splitlines()]
        self.lines.extend(new)
        for x in new:
            if x.get("fatal"):
                pytest.fail(f"child {self.pid} failed: {x}\n{self.zygote.stderr()}")
        return new

    def wait_for(self, want: Callable[[Json], bool], timeout: float) -> bool:
        """Read lines until one satisfies ``want`` (True), or time is up (False)."""
        deadline = time.monotonic() + timeout
        while True:
            if any(want(x) for x in self.poll()):
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(0.001)

    def kill(self) -> Json:
        os.kill(self.pid, signal.SIGKILL)
        status = self.zygote.reap(self.pid)
        self.poll()
        return status

    def finish(self, timeout: float = 120) -> Json:
        """Wait for the child's ``done`` line and its exit."""
        if not self.wait_for(lambda x: bool(x.get("done")), timeout):
            pytest.fail(f"child {self.pid} did not finish: {self.lines[-5:]}")
        status = self.zygote.reap(self.pid)
        assert status["exit"] == 0, (status, self.zygote.stderr())
        return status


def settle(store: JournalStore, backend: int | None) -> None:
    """On PostgreSQL, wait until the killed child's backend is gone: its transaction, and a
    COMMIT it had sent, has then ended one way or the other (SQLite has nothing in flight once
    the process is gone)."""
    if backend is None:
        return
    hooks: Any = store
    deadline = time.monotonic() + 30
    while hooks._execute_for_test(
        "SELECT count(*) FROM pg_stat_activity WHERE pid = ?", (backend,)
    )[0][0]:
        assert time.monotonic() < deadline, f"backend {backend} outlived its client"
        time.sleep(0.005)


# --- oracles -------------------------------------------------------------------------------------


def all_events(store: JournalStore) -> list[StoredEvent]:
    out: list[StoredEvent] = []
    while True:
        page = inbox_of(store).events(out[-1].position if out else -1, 1000)
        out.extend(page)
        if len(page) < 1000:
            return out


def all_waits(store: JournalStore) -> list[Wait]:
    out: list[Wait] = []
    while True:
        page = inbox_of(store).waiting(1000, out[-1].number if out else None)
        out.extend(page)
        if len(page) < 1000:
            return out


def entry_leaf(ev: StoredEvent) -> bytes:
    """The event's leaf, from the entry format of tlog/inbox.py spelled out here."""
    entry = {
        "id": ev.id,
        "keys": [list(k) for k in ev.keys],
        "kind": ev.kind,
        "payload_sha256": b64encode(ev.payload_sha256),
        "received_at": ev.received_at,
        "source": ev.source,
        "v": 1,
    }
    return leaf_hash(canonical_json(entry))


def payload_intact(ev: StoredEvent) -> bool:
    return hashlib.sha256(canonical_json(ev.payload)).digest() == ev.payload_sha256


def check_counts(store: JournalStore, events: list[StoredEvent], waits: list[Wait]) -> None:
    """``counts`` against a recount of the listings: live + claimed + dead == size."""
    c = inbox_of(store).counts()
    states = Counter(ev.state for ev in events)
    assert c.size == len(events), (c, len(events))
    assert (c.live, c.claimed, c.dead) == (states["live"], states["claimed"], states["dead"]), c
    assert c.live + c.claimed + c.dead == c.size, c
    assert c.erased == sum(ev.erased for ev in events), c
    assert c.waits == len(waits), (c, len(waits))


def rebuilt_tree(store: JournalStore, events: list[StoredEvent]) -> MemoryHashStore:
    """The inbox log rebuilt from the entries; it must be the log's current checkpoint."""
    assert [ev.position for ev in events] == list(range(len(events))), "positions not dense"
    tree = MemoryHashStore()
    tree.extend(entry_leaf(ev) for ev in events)
    cp = inbox_of(store).checkpoint()
    assert (cp.size, cp.root) == (len(events), tree.root()), "the inbox root is not the entries'"
    return tree


def fits(wait: Wait, ev: StoredEvent) -> bool:
    return wait.kind == ev.kind and bool(set(wait.keys) & set(ev.keys))


# --- races ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Shape:
    """``slots`` rounds of N = ``runs`` waits and M = ``events`` events, each on keys of its
    own, every racer starting its share of a slot at the slot's instant; ``resent`` of the
    events are buffered again by another racer, ``foreign`` events more are of a kind nobody
    waits for."""

    name: str
    runs: int
    events: int
    common: bool
    """One key shared by every wait and event (besides 0-2 drawn from a pool of 3)."""
    slots: int
    resent: int
    foreign: int


SHAPES = [
    # One op per racer, all at one instant: a wait and an event on one key really collide.
    Shape("N<M 2x3", 2, 3, True, 24, 0, 0),
    Shape("N>M 3x2", 3, 2, True, 24, 0, 0),
    Shape("N=M 3x3", 3, 3, True, 24, 1, 0),
    # Longer rounds: each racer's ops one after the other.
    Shape("N<M 10x24", 10, 24, True, 2, 3, 2),
    Shape("N>M 24x10", 24, 10, True, 2, 3, 2),
    Shape("N=M 18x18", 18, 18, True, 2, 3, 2),
    Shape("N=M 18x18 pooled keys", 18, 18, False, 2, 3, 2),
]
SLOT_GAP = 0.08
"""Seconds between the start instants of two slots."""
FOREIGN_KIND = "shipped"


def race_ops(rnd: str, shape: Shape, rng: random.Random) -> tuple[list[list[Json]], list[Wait]]:
    """The ops of each racer for one slot, and the waits (whose keys the slot uses)."""
    pool = [("order", f"{rnd}-{c}") for c in "PQRS"]
    common = ("order", f"{rnd}-common")

    def keys() -> list[list[str]]:
        if shape.common:
            chosen = [common, *rng.sample(pool[:3], rng.randint(0, 2))]
        else:
            chosen = rng.sample(pool, rng.randint(1, 2))
        return [list(k) for k in chosen]

    ops: list[Json] = []
    waits = []
    for i in range(shape.runs):
        w = make_wait(f"race{rnd}-run{i}", f"fx-{rnd}-{i}", WAITED_KIND, keys())
        waits.append(w)
        via = "claim" if rng.random() < 0.3 else "wait"
        ops.append({"t": "wait", "run": w.run, "effect": w.effect_key, "kind": w.kind,
                    "keys": [list(k) for k in w.keys], "via": via})  # fmt: skip
    specs: list[Json] = []
    for j in range(shape.events + shape.foreign):
        kind = WAITED_KIND if j < shape.events else FOREIGN_KIND
        source = rng.choice(["bank", "shop"])
        specs.append({"source": source, "id": f"{rnd}-e{j}", "kind": kind, "keys": keys(),
                      "payload": {"round": rnd, "j": j}})  # fmt: skip
    rng.shuffle(specs)
    home: dict[str, Json] = {}  # event id -> the op that carries it
    j = 0
    while j < len(specs):
        r = rng.random()
        carried = specs[j : j + (rng.randint(2, 3) if r < 0.15 else 1)]
        op: Json = (
            {"t": "events", "events": carried, "via": "batch"}
            if len(carried) > 1
            else {"t": "event", **carried[0], "via": "split" if r < 0.4 else "buffer"}
        )
        for e in carried:
            home[e["id"]] = op
        j += len(carried)
        ops.append(op)
    rng.shuffle(ops)
    offset = rng.randrange(RACERS)  # which racers get the extra ops of a slot
    per: list[list[Json]] = [ops[(i + offset) % RACERS :: RACERS] for i in range(RACERS)]
    for e in rng.sample(specs, shape.resent):
        # A retry of the same event, by a process other than the one that sends it first.
        first = next(i for i, p in enumerate(per) if any(op is home[e["id"]] for op in p))
        other = per[(first + 1 + rng.randrange(RACERS - 1)) % RACERS]
        other.insert(rng.randrange(len(other) + 1), {"t": "event", **e, "via": "buffer"})
    return per, waits


@dataclass
class RaceTally:
    rounds: int = 0
    paths: Counter[str] = field(default_factory=Counter)
    matched: Counter[str] = field(default_factory=Counter)
    ready_late: int = 0
    overlaps: int = 0
    """Pairs of ops of two racers that ran at the same time."""


def overlapping(per: list[list[Json]]) -> int:
    """Pairs of ops of different racers whose [t0, t1] intervals overlap."""
    spans = sorted((x["t0"], x["t1"], i) for i, lines in enumerate(per) for x in lines if "t0" in x)
    n = 0
    for a, (_, t1, i) in enumerate(spans):
        for u0, _, k in spans[a + 1 :]:
            if u0 > t1:
                break
            n += i != k
    return n


def check_race_round(
    store: JournalStore, rnd: str, shape: Shape, waits: list[Wait], replies: list[Json],
    tally: RaceTally,
) -> None:  # fmt: skip
    """The invariants of one slot (module docstring), from the ``replies`` of its ops."""
    errors = [x for x in replies if "error" in x or "retry" in x]
    assert not errors, errors
    replies = [
        x for x in replies
        if x.get("run", "").startswith(f"race{rnd}-") or x.get("id", "").startswith(f"{rnd}-")
    ]  # fmt: skip
    by_run = {w.run: w for w in waits}
    returned: dict[EventId, tuple[str, str]] = {}  # event -> (run, effect) by return values
    per_wait: Counter[tuple[str, str]] = Counter()
    first_arrivals: Counter[EventId] = Counter()

    def claimed(ev: EventId, run: str, effect: str, path: str) -> None:
        assert ev not in returned, f"event {ev} resumed {returned[ev]} and {(run, effect)}"
        returned[ev] = (run, effect)
        per_wait[(run, effect)] += 1
        assert per_wait[(run, effect)] == 1, f"wait {(run, effect)} got two events"
        tally.paths[path] += 1

    for x in replies:
        if x.get("t") == "wait":
            assert not x["recovered"], x  # nobody claimed for these runs before
            if x["claimed"] is not None:
                claimed(tuple(x["claimed"]), x["run"], x["effect"], f"wait via {x['by']}")
        elif x.get("t") == "event":
            eid = (x["source"], x["id"])
            if x["duplicate"]:
                assert x["matched"] is None, x
                continue
            first_arrivals[eid] += 1
            if x["matched"] is not None:
                run, effect = x["matched"]
                claimed(eid, run, effect, f"event via {x['via']}")
    assert all(n == 1 for n in first_arrivals.values()), first_arrivals
    everything = shape.events + shape.foreign
    assert len(first_arrivals) == everything, "a resent event was not a duplicate"

    events = [ev for ev in all_events(store) if ev.id.startswith(f"{rnd}-")]
    assert len(events) == everything
    foreign = [ev for ev in events if ev.kind == FOREIGN_KIND]
    assert len(foreign) == shape.foreign and all(ev.state == "live" for ev in foreign), foreign
    table = {(ev.source, ev.id): ev for ev in events}
    assert set(table) == set(first_arrivals)
    # The table agrees with the return values: every claimed event was returned to the run
    # that claimed it, and nothing returned is missing.
    in_table = {k: ev.claimed_by for k, ev in table.items() if ev.claimed_by is not None}
    assert in_table == {k: run for k, (run, _) in returned.items()}, "claimed-but-unreachable"
    holders = Counter(in_table.values())
    assert all(n == 1 for n in holders.values()), f"a run holds two events: {holders}"
    for k, (run, effect) in returned.items():
        ev = table[k]
        assert effect == by_run[run].effect_key, (k, run, effect)
        assert ev.state == "claimed" and ev.held and not ev.erased, ev
        assert fits(by_run[run], ev), (by_run[run], ev)
        assert [(e.source, e.id) for e in inbox_of(store).held(run)] == [k]
        again = inbox_of(store).claim(by_run[run])
        assert again is not None and again.recovered, again
        assert (again.event.source, again.event.id) == k
    registered = {w.run: w for w in all_waits(store) if w.run.startswith(f"race{rnd}-")}
    assert not set(registered) & set(holders), "a run that claimed still waits"
    assert set(registered) | set(holders) == set(by_run), "a run neither waits nor claimed"
    for run, w in registered.items():
        assert (w.effect_key, w.kind, w.keys) == (
            by_run[run].effect_key, by_run[run].kind, by_run[run].keys,
        )  # fmt: skip
    live = [ev for ev in events if ev.state == "live"]
    for ev in live:
        stuck = [w.run for w in registered.values() if fits(w, ev)]
        assert not stuck, f"live event {ev.id} beside waiting runs {stuck}"
    if shape.common:
        assert len(returned) == min(shape.runs, shape.events), (len(returned), shape)
    tally.matched[shape.name] += len(returned)


def test_claim_race_resumes_each_run_and_event_at_most_once(
    backend: Any, tmp_path: Path, record_property: Callable[[str, object], None]
) -> None:
    """RACERS processes register the waits of N runs and buffer M events at one instant, for
    each slot of each shape (see the module docstring)."""
    db = Db.create(backend, tmp_path)
    rng = random.Random(1414)
    tally = RaceTally()
    started = time.monotonic()
    with db.open() as store, zygote(db) as z:
        # No inbox tables yet: the first slot's racers create them, at once.
        for n, shape in enumerate(SHAPES):
            at = time.time() + 0.5
            per: list[list[Json]] = [[] for _ in range(RACERS)]
            slots = []
            for slot in range(shape.slots):
                tag = f"{n}x{slot}"
                ops, waits = race_ops(tag, shape, rng)
                slots.append((tag, waits))
                for mine, more in zip(per, ops, strict=True):
                    mine.extend({**op, "at": at + slot * SLOT_GAP} for op in more)
            children = [
                z.spawn("race", f"race-{n}-{i}", {"at": at, "ops": ops})
                for i, ops in enumerate(per)
            ]
            replies: list[Json] = []
            for c in children:
                c.finish()
                tally.ready_late += c.lines[0]["ready"] > at
                replies.extend(c.lines[1:])
            tally.overlaps += overlapping([c.lines for c in children])
            for tag, waits in slots:
                check_race_round(store, tag, shape, waits, replies, tally)
                tally.rounds += 1
        events = all_events(store)
        waits = all_waits(store)
        check_counts(store, events, waits)
        rebuilt_tree(store, events)
    summary = (
        f"inbox race {db.name}: {tally.rounds} rounds x {RACERS} processes, shapes"
        f" {[f'{s.name} x{s.slots}' for s in SHAPES]}, matched {tally.matched}, claims by path"
        f" {dict(sorted(tally.paths.items()))}, {len(events)} events, {len(waits)} waits left,"
        f" {tally.overlaps} pairs of ops of two racers overlapping in time,"
        f" {tally.ready_late} late starters, {time.monotonic() - started:.1f} s"
    )
    record_property("summary", summary)
    print(summary)
    # Both directions happened, at once: events claimed on arrival and waits claiming
    # buffered events, by racers whose operations overlapped.
    assert any(p.startswith("event") for p in tally.paths), summary
    assert any(p.startswith("wait") for p in tally.paths), summary
    assert tally.overlaps >= tally.rounds, summary


# --- crash safety --------------------------------------------------------------------------------


@dataclass
class Ledger:
    """What the killed writers acknowledged (and announced), across all kills."""

    buffered: dict[EventId, tuple[int, str]] = field(default_factory=dict)
    duplicates: list[tuple[EventId, int]] = field(default_factory=list)
    claims: dict[EventId, str] = field(default_factory=dict)
    delivered: dict[EventId, tuple[str, int]] = field(default_factory=dict)
    erase_intent: set[EventId] = field(default_factory=set)
    checkpoints: dict[int, str] = field(default_factory=dict)
    kept: list[tuple[int, bytes]] = field(default_factory=list)
    runs: set[str] = field(default_factory=set)
    kills: Counter[str] = field(default_factory=Counter)
    fates: Counter[str] = field(default_factory=Counter)
    after_ack: int = 0
    mid_write: int = 0
    takeovers: int = 0
    acks: int = 0
    retries: int = 0
    retry_kinds: Counter[str] = field(default_factory=Counter)


WRITES = {"buffer", "match", "wait", "claim", "deliver", "unsubscribe", "conclude", "sign",
          "erase", "sweep", "acquire"}  # fmt: skip
"""Operations that write (a kill right after ``begin`` of one lands inside a write)."""

KILL_MODES = ["early", "buffer", "wait", "deliver", "random", "unsubscribe", "buffer",
              "sign", "match", "claim", "random", "erase"]  # fmt: skip
"""Kill schedules, in turn: ``early`` 0-100 ms after the writer is ready; an operation's name:
0-3 ms after the writer announced it (after its first acknowledgement); ``random`` 0-300 ms
after its first acknowledgement."""


def kill_cycle(z: Zygote, cycle: int, rng: random.Random) -> list[Child]:
    """Start :data:`WRITERS` writers on the store at once; kill the first by the cycle's
    schedule (:data:`KILL_MODES`) and each other one 0-50 ms after the one before."""
    mode = KILL_MODES[cycle % len(KILL_MODES)]
    children = [
        z.spawn(
            "crash",
            f"crash-{cycle}-{i}",
            {"prefix": f"c{cycle}w{i}", "seed": cycle * WRITERS + i, "ttl": 1, "max_seconds": 30},
        )
        for i in range(WRITERS)
    ]
    for c in children:
        assert c.wait_for(lambda x: "ready" in x, 30), "a writer never got ready"
    c = children[0]
    acked = lambda x: x.get("op") not in (None, "begin")  # noqa: E731
    if mode == "early":
        time.sleep(rng.uniform(0, 0.1))
    elif mode == "random":
        c.wait_for(acked, 10)
        time.sleep(rng.uniform(0, 0.3))
    else:
        c.wait_for(acked, 10)
        c.wait_for(lambda x: x.get("op") == "begin" and x.get("what") == mode, 3)
        time.sleep(rng.uniform(0, 0.003))
    for i, c in enumerate(children):
        if i:
            time.sleep(rng.uniform(0, 0.05))
        status = c.kill()
        assert status["signal"] == signal.SIGKILL, (status, c.lines[-3:])
    return children


def fate(store: JournalStore, last: Json) -> str | None:
    """Whether the write a kill interrupted landed (committed, unacknowledged) or was lost."""
    what = last.get("what")
    if last.get("op") != "begin" or what not in WRITES:
        return None
    landed: bool | None = None
    if what == "buffer":
        landed = inbox_of(store).get(last["source"], last["id"]) is not None
    elif what == "match":
        ev = inbox_of(store).get(last["source"], last["id"])
        landed = ev is not None and ev.claimed_by is not None
    elif what == "deliver":
        ev = inbox_of(store).get(last["source"], last["id"])
        landed = ev is not None and ev.delivered_seq is not None
    elif what == "erase":
        ev = inbox_of(store).get(last["source"], last["id"])
        landed = ev is not None and ev.erased
    if landed is None:
        return f"{what} interrupted"
    return f"{what} {'landed' if landed else 'lost'}"


def absorb(led: Ledger, lines: list[Json]) -> set[str]:
    """Take the killed writer's lines into the ledger; return the runs it touched."""
    touched: set[str] = set()
    for x in lines:
        op = x.get("op")
        if op is None:
            if "retry" in x:
                led.retries += 1
                led.retry_kinds[x["retry"]] += 1
            else:
                assert "ready" in x, x
            continue
        if op == "begin":
            if x["what"] == "erase":
                led.erase_intent.add((x["source"], x["id"]))
            if "run" in x:
                touched.add(x["run"])
            continue
        led.acks += 1
        if op == "buffered":
            ev = (x["source"], x["id"])
            if x["duplicate"]:
                led.duplicates.append((ev, x["position"]))
            else:
                assert ev not in led.buffered, f"{ev} buffered as new twice"
                led.buffered[ev] = (x["position"], x["sha"])
            if x["matched"] is not None:
                assert not x["duplicate"]
                assert led.claims.setdefault(ev, x["matched"]) == x["matched"], ev
                touched.add(x["matched"])
        elif op == "matched":
            if x["run"] is not None:
                ev = (x["source"], x["id"])
                assert led.claims.setdefault(ev, x["run"]) == x["run"], ev
                touched.add(x["run"])
        elif op == "claimed":
            if x["event"] is not None:
                ev = tuple(x["event"])
                assert led.claims.setdefault(ev, x["run"]) == x["run"], (ev, x)
        elif op == "delivered":
            ev = (x["source"], x["id"])
            got = led.delivered.setdefault(ev, (x["run"], x["seq"]))
            assert got == (x["run"], x["seq"]), f"{ev} delivered as {got} and {x}"
        elif op == "acquired":
            led.takeovers += x["takeover"]
        elif op == "checkpoint":
            assert led.checkpoints.setdefault(x["size"], x["root"]) == x["root"]
    led.runs |= touched
    return touched


def check_runs(
    store: JournalStore, led: Ledger, runs: set[str], table: dict[EventId, StoredEvent]
) -> dict[EventId, str]:
    """Each run's ``EventDelivered`` records: at most one, naming the event it claimed (which
    names the record back); returns event -> delivering run."""
    out: dict[EventId, str] = {}
    for run in sorted(runs):
        records = delivered_records(store, run)
        assert len(records) <= 1, f"{run} resumed twice: {records}"
        for seq, source, id_ in records:
            ev = table[(source, id_)]
            assert ev.claimed_by == run, f"{run} resumed on {ev.id}, claimed by {ev.claimed_by}"
            assert ev.delivered_seq == seq, (ev, seq)
            assert (source, id_) not in out, f"{(source, id_)} delivered twice"
            out[(source, id_)] = run
        if records:
            store.verify(run)
    for ev_id, (run, seq) in led.delivered.items():
        if run in runs:
            assert out.get(ev_id) == run and table[ev_id].delivered_seq == seq, (ev_id, run)
    return out


def check_store(store: JournalStore, db: Db, led: Ledger, runs: set[str]) -> None:
    """Everything acknowledged is there, and the inbox is whole (module docstring)."""
    events = all_events(store)
    table = {(ev.source, ev.id): ev for ev in events}
    assert len(table) == len(events)
    for ev_id, (position, sha) in led.buffered.items():
        ev = table.get(ev_id)
        assert ev is not None, f"acknowledged buffer {ev_id} is gone"
        assert (ev.position, ev.payload_sha256.hex()) == (position, sha), (ev, position, sha)
    for ev_id, position in led.duplicates:
        assert table[ev_id].position == position, ev_id
    for ev_id, run in led.claims.items():
        assert table[ev_id].claimed_by == run, f"{ev_id} acknowledged for {run}: {table[ev_id]}"
    holders: Counter[str] = Counter()
    for k, ev in table.items():
        if ev.claimed_by is not None:
            holders[ev.claimed_by] += 1
            assert not ev.dead, f"claimed {k} is a dead letter"
        if not ev.erased:
            assert payload_intact(ev), f"{k}: the payload is not the one hashed"
        elif k not in led.erase_intent:
            # Gone without an erasure: only unsubscribe sheds, and only after the delivery.
            assert ev.state == "claimed", f"the payload of unclaimed {k} is lost"
            assert not ev.held and ev.delivered_seq is not None, f"{k} shed before delivery"
        if ev.held:
            assert ev.claimed_by is not None, ev
    assert all(n == 1 for n in holders.values()), f"a run holds two events: {holders}"
    waits = all_waits(store)
    assert not {w.run for w in waits} & set(holders), "a run that claimed still waits"
    for w in waits:
        assert w == store_wait(w), w
    check_runs(store, led, runs, table)
    check_counts(store, events, waits)

    # The inbox log.
    tree = rebuilt_tree(store, events)
    verifier = parse_vkey(inbox_of(store).log.log_vkey)
    assert verifier.name == f"{db.key.name}/default/inbox", verifier.name
    notes = inbox_of(store).log.published()
    kept = [(c.size, c.root) for c in (open_checkpoint(n, [verifier]).checkpoint for n in notes)]
    assert kept[: len(led.kept)] == led.kept, "a kept checkpoint changed or vanished"
    for size, root in kept:
        assert tree.root(size) == root, f"kept checkpoint {size} is not a prefix of the log"
    sizes = dict(kept)
    for size, hex_root in led.checkpoints.items():
        assert sizes.get(size) == bytes.fromhex(hex_root), f"acknowledged checkpoint {size}"
    cp = inbox_of(store).checkpoint()
    start = max(len(led.kept) - 1, 0)
    for old, new in itertools.pairwise([*kept[start:], (cp.size, cp.root)]):
        consistent(store, old, new)
    led.kept = kept


def check_reachable(store: JournalStore) -> None:
    """Nothing is claimed-but-unreachable: every event held claimed (its delivery not let go)
    and every registered wait belongs to a run that a writer will take over (abandoned: its
    lease lapsed), never to one that was released."""
    abandoned = set(store.abandoned_runs(10_000))
    held = {ev.claimed_by for ev in all_events(store) if ev.held}
    waiting = {w.run for w in all_waits(store)}
    assert held <= abandoned, f"held by runs nobody will resume: {held - abandoned}"
    assert waiting <= abandoned, f"waits of runs nobody will resume: {waiting - abandoned}"


def store_wait(w: Wait) -> Wait:
    """The registered wait as its run made it (the crash writer derives it from the run)."""
    want = wait_of(w.run)
    return Wait(want.run, want.effect_key, want.kind, want.keys, want.case, want.step,
                w.number, w.created_at)  # fmt: skip


def consistent(store: JournalStore, old: tuple[int, bytes], new: tuple[int, bytes]) -> None:
    (m, old_root), (n, new_root) = old, new
    assert m <= n
    if m == 0:
        assert old_root == EMPTY_ROOT
        return
    verify_consistency(m, n, old_root, new_root, inbox_of(store).log.consistency_proof(m, n))


def test_inbox_writer_killed_at_random_loses_nothing_acknowledged(
    backend: Any, tmp_path: Path, record_property: Callable[[str, object], None]
) -> None:
    """KILLS SIGKILLs of the inbox writer on one store (see the module docstring)."""
    db = Db.create(backend, tmp_path)
    rng = random.Random(1403)
    led = Ledger()
    started = time.monotonic()
    with db.open() as store, zygote(db) as z:
        inbox_of(store).sweep(0)  # creates the inbox's tables
        for cycle in range(KILLS):
            children = kill_cycle(z, cycle, rng)
            for c in children:
                settle(store, c.lines[0].get("backend"))
            touched: set[str] = set()
            for c in children:
                acks = [x for x in c.lines if x.get("op") not in (None, "begin")]
                last = c.lines[-1]
                doing = last["what"] if last.get("op") == "begin" else "between"
                led.kills[doing] += 1
                led.after_ack += bool(acks)
                led.mid_write += doing in WRITES and bool(acks)
                f = fate(store, last)
                if f is not None:
                    led.fates[f] += 1
                touched |= absorb(led, c.lines)
            check_store(store, db, led, touched)
            db.clock.advance(2)  # the killed writers' leases lapse: their runs are abandoned
        check_store(store, db, led, led.runs)
        check_reachable(store)
        counts = inbox_of(store).counts()
    summary = (
        f"inbox crash {db.name}: {KILLS} cycles of {WRITERS} writers, {sum(led.kills.values())}"
        f" kills ({led.after_ack} after an acknowledgement,"
        f" {led.mid_write} inside a write; by operation {dict(sorted(led.kills.items()))};"
        f" interrupted writes {dict(sorted(led.fates.items()))}), {led.acks} acknowledgements,"
        f" {len(led.buffered)} buffers, {len(led.claims)} claims, {len(led.delivered)}"
        f" deliveries acknowledged, {len(led.runs)} runs ({led.takeovers} takeovers),"
        f" {len(led.kept)} kept checkpoints, {len(led.erase_intent)} erasures announced,"
        f" {led.retries} transactions re-run after {dict(led.retry_kinds)},"
        f" final {counts}, {time.monotonic() - started:.1f} s"
    )
    record_property("summary", summary)
    print(summary)
    assert sum(led.kills.values()) == KILLS * WRITERS >= 50, summary
    assert led.after_ack >= KILLS * WRITERS * 3 // 4, summary
    assert led.mid_write >= 5, summary
    # Kills landed both after a commit (before its acknowledgement) and before one.
    assert any(k.endswith("landed") for k in led.fates), summary
    assert any(k.endswith("lost") for k in led.fates), summary
    assert len(led.delivered) >= 5 and led.takeovers >= 5, summary


# --- two waits of one run ------------------------------------------------------------------------


def test_one_event_never_resumes_two_waits_of_one_run(backend: Any, tmp_path: Path) -> None:
    """Run R waits twice on one key (effects A and B, e.g. two parallel steps). Event e1
    arrives and is claimed for A (A's wait retired); e2 is then B's. Before claims remembered
    their wait, ``wait(B)`` returned e1 as ``recovered`` (the run holds it and it fits B's kind
    and keys) and retired B, so e1 resumed both waits and e2 stayed live beside a waiting run."""
    db = Db.create(backend, tmp_path)
    with db.open() as store:
        inbox = inbox_of(store)
        a = make_wait("R", "fx-a", WAITED_KIND, [("order", "1")])
        b = make_wait("R", "fx-b", WAITED_KIND, [("order", "1")])
        assert inbox.wait(a) is None and inbox.wait(b) is None
        e1 = inbox.buffer(make_event("bank", "e1", WAITED_KIND, [("order", "1")], 1))
        assert e1.matched is not None and e1.matched.effect_key == "fx-a"
        again = inbox.wait(b)  # B retries its wait (say, its step was re-run)
        assert again is None, f"wait B was handed A's event: {again}"
        e2 = inbox.buffer(make_event("bank", "e2", WAITED_KIND, [("order", "1")], 2))
        assert e2.matched is not None and e2.matched.effect_key == "fx-b"
