"""The journal as an outbox (store/outbox.py, store/deliver.py): subscriptions, delivery cursors,
and the workers that push records to receivers, on both backends.

The receiver is a real HTTP server on 127.0.0.1 (:class:`Receiver`, a ``http.server`` thread)
whose answers the test scripts per request (200, 500, or a stall past the worker's timeout); it
records every request it got — parsed body, whether it answered 2xx — and, while requests are in
flight, which (subscription, run, seq) they carry, so that two requests carrying one record at
once are caught (``overlaps``).

* In one process, with the store's fake clock (backoff passes by advancing it): a receiver that
  fails, times out and recovers gets every record of its scope at least once, in seq order per
  run, and — no worker died — exactly once among its 2xx answers; attempts, the last error and
  the exponential (capped) backoff are recorded; a sealed run's delivery is gone once its seal
  record is taken; a claim excludes other claims until it expires, and an expired claim
  acknowledges nothing; due deliveries come from the index ``delivery_due`` (SQLite's query
  plan says so).
* SIGKILL (:data:`KILLS` per backend): a worker process (tests/store/worker.py ``deliver``) is
  killed at random moments — some while the receiver holds its request — while the test keeps
  appending; at the end one more worker drains the outbox, and every record reached the
  receiver, never a later record of a run before an earlier one, and a record came twice only
  with a kill between the two requests.
* PostgreSQL: two workers on one store at once never have one record in flight twice, and
  between them deliver every record exactly once; runs first written by several threads while
  subscriptions are made all get a delivery for every subscription (the outbox's gate: without
  it, an append that did not see a new subscription and a subscribe that did not see the
  append's run leave that run undelivered).
"""

from __future__ import annotations

import base64
import itertools
import json
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import IO, Any, cast

import pytest

from store.api import Append, JournalStore
from store.deliver import Deliverer, claim_ttl, outbox_of
from store.open import init_store, open_store
from store.outbox import JournalOutbox
from tests.conftest import Backend
from tests.store.helpers import FakeClock
from tests.store.worker import FileClock
from tlog.errors import UsageError
from tlog.journal import chain_hash
from tlog.keys import generate_key

ORIGIN = "example.com/journal"
T0 = 1_700_000_000
WORKER = Path(__file__).resolve().parent / "worker.py"

KILLS = 30
"""SIGKILLs of the deliver worker per backend."""

Key = tuple[int, str, int]  # (subscription, run, seq)


@dataclass
class Request:
    """One request the receiver got: when (an event number), what, and its answer."""

    number: int
    sub: int
    run: str
    seqs: list[int]
    auth: str | None
    status: int = 0
    worker: str | None = None
    """The pid of the test worker that sent it (its ``X-Test-Worker`` header)."""


@dataclass
class Receiver:
    """A loopback HTTP receiver (module docstring). ``answer(request)`` gives each request's
    answer: an HTTP status, or "stall" (no answer until ``stall`` seconds passed, then 503)."""

    answer: Callable[[Request], int | str] = lambda r: 200
    hold: float = 0.0
    stall: float = 3.0
    requests: list[Request] = field(default_factory=list)
    events: list[tuple[int, str]] = field(default_factory=list)
    overlaps: list[Key] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    in_flight: set[Key] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)
    counter: int = 0
    on_request: Callable[[Request], None] | None = None

    def __post_init__(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                try:
                    body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                    req = receiver.arrived(
                        body, self.headers.get("Authorization"), self.headers.get("X-Test-Worker")
                    )
                except Exception as e:  # a malformed request: the test fails at its end
                    receiver.problems.append(repr(e))
                    self.send_response(400)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                try:
                    if receiver.on_request is not None:
                        receiver.on_request(req)
                    verdict = receiver.answer(req)
                    if receiver.hold:
                        time.sleep(receiver.hold)
                    if verdict == "stall":
                        time.sleep(receiver.stall)
                        verdict = 503
                    status = int(verdict)
                    with receiver.lock:
                        req.status = status
                    self.send_response(status)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                except OSError:
                    pass  # the worker is gone (killed, or timed out)
                finally:
                    receiver.left(req)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def arrived(self, body: dict[str, Any], auth: str | None, worker: str | None = None) -> Request:
        seqs = []
        prev = None
        for r in body["records"]:
            # Each record is whole: its hash covers its body and link.
            raw = r["raw"].encode("utf-8")
            assert chain_hash(base64.b64decode(r["prev_hash"]), raw) == base64.b64decode(r["hash"])
            assert prev is None or base64.b64decode(r["prev_hash"]) == prev
            assert json.loads(raw)["kind"] == r["kind"]
            prev = base64.b64decode(r["hash"])
            seqs.append(r["seq"])
        assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
        with self.lock:
            self.counter += 1
            req = Request(self.counter, body["subscription"], body["run"], seqs, auth, 0, worker)
            self.requests.append(req)
            keys = {(req.sub, req.run, s) for s in seqs}
            self.overlaps += sorted(keys & self.in_flight)
            self.in_flight |= keys
        return req

    def left(self, req: Request) -> None:
        with self.lock:
            self.in_flight -= {(req.sub, req.run, s) for s in req.seqs}

    def event(self, what: str) -> None:
        with self.lock:
            self.counter += 1
            self.events.append((self.counter, what))

    def taken(self) -> dict[tuple[int, str], list[int]]:
        """(subscription, run) -> the seqs of the requests answered 2xx, in order."""
        out: dict[tuple[int, str], list[int]] = {}
        with self.lock:
            for r in self.requests:
                if 200 <= r.status < 300:
                    out.setdefault((r.sub, r.run), []).extend(r.seqs)
        return out

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    try:
        yield r
    finally:
        r.close()
    assert r.problems == []


def in_order(requests: list[Request]) -> None:
    """No request of a (subscription, run) starts past the highest seq sent before it + 1."""
    top: dict[tuple[int, str], int] = {}
    for r in requests:
        k = (r.sub, r.run)
        assert r.seqs[0] <= top.get(k, 0) + 1, (k, r.seqs, top.get(k))
        top[k] = max(top.get(k, 0), r.seqs[-1])


def outbox(store: JournalStore) -> JournalOutbox:
    return outbox_of(store)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


@pytest.fixture
def store(backend: Backend, clock: FakeClock) -> Iterator[JournalStore]:
    init_store(db=backend.db, postgres=backend.postgres, origin=ORIGIN, key=generate_key(ORIGIN))
    s = open_store(db=backend.db, postgres=backend.postgres, clock=clock)
    try:
        yield s
    finally:
        s.close()


def write(store: JournalStore, run: str, n: int, *, seal: bool = False) -> None:
    store.append(1, [Append(run, "Step", data={"i": i}) for i in range(n)])
    if seal:
        store.seal(run, 1, "ok")


# --- subscriptions -----------------------------------------------------------------------------


def test_subscriptions_are_listed_and_deleted(store: JournalStore) -> None:
    o = outbox(store)
    write(store, "r1", 2)
    a = o.subscribe("https://hooks.example/a", token="s3cr3t.token=")
    b = o.subscribe("http://127.0.0.1:8080/b", run="r1")
    assert (a, b) == (1, 2)
    subs = o.subscriptions()
    assert [(s.id, s.url, s.run, s.token) for s in subs] == [
        (1, "https://hooks.example/a", None, "s3cr3t.token="),
        (2, "http://127.0.0.1:8080/b", "r1", None),
    ]
    assert "s3cr3t" not in repr(subs)
    # Both start at the first record of the runs that have records already.
    assert [(d.subscription, d.run, d.next_seq, d.next_attempt_at) for d in o.deliveries()] == [
        (1, "r1", 1, T0),
        (2, "r1", 1, T0),
    ]
    assert o.unsubscribe(1) and not o.unsubscribe(1)
    assert [s.id for s in o.subscriptions()] == [2]
    assert [d.subscription for d in o.deliveries()] == [2]
    assert o.subscribe("http://x.example/") == 3  # IDs are never reused


@pytest.mark.parametrize(
    ("url", "token", "message"),
    [
        ("ftp://x.example/", None, "not http:// or https://"),
        ("http:///path", None, "with a host"),
        ("http://user:pw@x.example/", None, "no user or password"),
        ("http://x.example/#frag", None, "has a fragment"),
        ("http://x.example/ a", None, "no spaces"),
        ("http://x.example:99999/", None, "does not parse"),
        ("http://x.example/", "two words", "bearer token"),
        ("http://x.example/", "", "bearer token"),
    ],
)
def test_bad_subscriptions_are_refused(
    store: JournalStore, url: str, token: str | None, message: str
) -> None:
    with pytest.raises(UsageError, match=message):
        outbox(store).subscribe(url, token=token)
    assert outbox(store).subscriptions() == []


# --- delivery through failures -----------------------------------------------------------------


def test_failures_timeouts_and_recovery(
    store: JournalStore, clock: FakeClock, receiver: Receiver
) -> None:
    o = outbox(store)
    write(store, "r1", 5)
    write(store, "r2", 2, seal=True)
    tenant = o.subscribe(receiver.url, token="tok")
    one = o.subscribe(receiver.url, run="r1")
    failures: list[int | str] = [500, 500, "stall"]  # what (tenant, r1) gets first

    def answer(r: Request) -> int | str:
        return failures.pop(0) if (r.sub, r.run) == (tenant, "r1") and failures else 200

    receiver.answer = answer
    receiver.stall = 2.5
    with Deliverer(store, batch=2, timeout=1, backoff=(1, 4)) as w:
        # Three failed attempts of one delivery (500, 500, a timeout) while the others go on.
        for attempt, delay, error in ((1, 1, "HTTP 500"), (2, 2, "HTTP 500"), (3, 4, "Timeout")):
            w.run(once=True)
            (d,) = [d for d in o.deliveries() if (d.subscription, d.run) == (tenant, "r1")]
            assert (d.next_seq, d.attempts, d.next_attempt_at) == (1, attempt, clock.now + delay)
            assert d.last_error is not None and error in d.last_error, d.last_error
            assert w.step() is None  # in backoff: not due
            clock.advance(delay)
        w.run(once=True)
        # Appends after the receiver caught up make the deliveries due again.
        write(store, "r1", 3)
        write(store, "r3", 1)
        w.run(once=True)
    taken = receiver.taken()
    assert taken == {
        (tenant, "r1"): list(range(1, 9)),
        (tenant, "r2"): [1, 2, 3],  # with the seal record
        (tenant, "r3"): [1],
        (one, "r1"): list(range(1, 9)),
    }
    in_order(receiver.requests)
    assert {r.auth for r in receiver.requests if r.sub == tenant} == {"Bearer tok"}
    assert {r.auth for r in receiver.requests if r.sub == one} == {None}
    # Caught up: no next attempt; the sealed run's deliveries are gone.
    left = {(d.subscription, d.run): (d.next_seq, d.next_attempt_at) for d in o.deliveries()}
    assert left == {(tenant, "r1"): (9, None), (tenant, "r3"): (2, None), (one, "r1"): (9, None)}


def test_a_claim_excludes_others_until_it_expires(store: JournalStore, clock: FakeClock) -> None:
    o = outbox(store)
    write(store, "r1", 3)
    o.subscribe("http://127.0.0.1:9/")
    (c,) = o.claim_deliveries(10, 30)
    assert (c.run, c.next_seq, c.expires_at) == ("r1", 1, T0 + 30)
    assert o.claim_deliveries(10, 30) == []
    write(store, "r1", 1)  # an append does not steal a claimed delivery
    assert o.claim_deliveries(10, 30) == []
    clock.advance(30)
    (again,) = o.claim_deliveries(10, 30)  # the claim expired: a dead worker's row is due
    assert again.next_seq == 1
    assert not o.acknowledge(c, 4)  # the expired claim acknowledges nothing
    assert not o.delivery_failed(c, "late")
    assert o.acknowledge(again, 3)
    (d,) = o.deliveries()
    assert (d.next_seq, d.next_attempt_at, d.claimed) == (3, T0 + 30, False)  # r1 has seq 4


def test_due_deliveries_come_from_the_index(tmp_path: Path) -> None:
    db = str(tmp_path / "s.db")
    init_store(db=db, origin=ORIGIN, key=generate_key(ORIGIN))
    with open_store(db=db) as s:
        plan = cast(Any, s)._execute_for_test(
            "EXPLAIN QUERY PLAN SELECT subscription, run, next_seq, attempts FROM delivery"
            " WHERE tenant = ? AND next_attempt_at IS NOT NULL AND next_attempt_at <= ?"
            " ORDER BY next_attempt_at LIMIT ?",
            ("default", T0, 1),
        )
    assert any("USING INDEX delivery_due" in str(row) for row in plan), plan


def test_the_cli_verbs(
    tmp_path: Path, receiver: Receiver, capsys: pytest.CaptureFixture[str]
) -> None:
    from store.cli import main

    db = str(tmp_path / "j.db")
    assert main(["init", "--db", db, "--origin", ORIGIN]) == 0
    assert main(["append", "r1", "--db", db, "--epoch", "1", "--kind", "A"]) == 0
    token = tmp_path / "token"
    token.write_text("abc\n")
    capsys.readouterr()
    assert main(["subscribe", receiver.url, "--db", db, "--token-file", str(token)]) == 0
    assert capsys.readouterr().out == "1\n"
    assert main(["subscriptions", "--db", db]) == 0
    assert capsys.readouterr().out == f"1 tenant {receiver.url} token\n"
    assert main(["deliver", "--db", db, "--once"]) == 0
    assert capsys.readouterr().out == "delivered 1 r1 1-1\n"
    assert receiver.taken() == {(1, "r1"): [1]} and receiver.requests[0].auth == "Bearer abc"
    assert main(["unsubscribe", "2", "--db", db]) == 2
    assert "no subscription 2" in capsys.readouterr().err
    assert main(["unsubscribe", "1", "--db", db]) == 0
    assert main(["subscriptions", "--db", db, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"subscriptions": []}


# --- SIGKILL of the worker -----------------------------------------------------------------------


def start_worker(backend: Backend, clock_file: Path, *extra: str) -> subprocess.Popen[bytes]:
    where = ["--db", backend.db] if backend.db else ["--postgres", str(backend.postgres)]
    proc = subprocess.Popen(
        [sys.executable, str(WORKER), "deliver", *where, "--clock-file", str(clock_file), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None
    assert "ready" in json.loads(proc.stdout.readline())
    return proc


def lines(out: IO[bytes]) -> list[dict[str, Any]]:
    return [json.loads(x) for x in out.read().splitlines()]


def test_sigkill_of_the_worker_loses_nothing(
    backend: Backend, tmp_path: Path, receiver: Receiver
) -> None:
    init_store(db=backend.db, postgres=backend.postgres, origin=ORIGIN, key=generate_key(ORIGIN))
    clock = FileClock(str(tmp_path / "clock"))
    clock.set(T0)
    rng = random.Random(1313)
    timeout = 2
    with open_store(db=backend.db, postgres=backend.postgres, clock=clock) as store:
        o = outbox(store)
        subs = [o.subscribe(receiver.url), o.subscribe(receiver.url, run="r0")]
        runs: dict[str, int] = {}
        killed: set[str] = set()
        kill_now = threading.Event()
        held = threading.Event()

        def on_request(req: Request) -> None:
            # Some kills happen while the receiver holds a request (before its answer).
            if kill_now.is_set():
                held.set()
                time.sleep(0.2)

        receiver.on_request = on_request
        for cycle in range(KILLS):
            for _ in range(rng.randint(1, 3)):
                run = f"r{rng.randrange(5)}"
                if runs.get(run, 0) < 0:
                    continue  # sealed
                n = rng.randint(1, 4)
                write(store, run, n, seal=rng.random() < 0.1)
                runs[run] = -1 if store.sealed(run) else runs.get(run, 0) + n
            mid_request = cycle % 3 == 0
            if mid_request:
                kill_now.set()
            proc = start_worker(backend, tmp_path / "clock", "--batch", "2")
            if mid_request:
                held.wait(2)
            else:
                time.sleep(rng.random() * 0.15)
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
            killed.add(str(proc.pid))
            receiver.event("kill")
            kill_now.clear()
            held.clear()
            clock.advance(claim_ttl(timeout) + 1)  # the killed worker's claims expire
        # One more worker drains the outbox.
        proc = start_worker(backend, tmp_path / "clock", "--batch", "2", "--once")
        assert proc.stdout is not None
        out = lines(proc.stdout)
        assert proc.wait(timeout=60) == 0 and out[-1] == {"done": True}
        receiver.on_request = None
        heads = {run: store.head(run).seq for run in runs}
        assert not o.claim_deliveries(100, 10)  # nothing left due
    with receiver.lock:
        requests = list(receiver.requests)
        kills = [n for n, what in receiver.events if what == "kill"]
    assert len(kills) == KILLS
    in_order(requests)
    got: dict[Key, list[Request]] = {}
    for r in requests:
        assert r.worker is not None
        for s in r.seqs:
            got.setdefault((r.sub, r.run, s), []).append(r)
    want = {(subs[0], run, s) for run, head in heads.items() for s in range(1, head + 1)}
    want |= {(subs[1], "r0", s) for s in range(1, heads.get("r0", 0) + 1)}
    assert set(got) == want  # every record reached the receiver: nothing lost
    for key, sent in got.items():
        for earlier, _ in itertools.pairwise(sent):
            # A record is sent again only after a worker that sent it was killed (before it
            # could record the delivery). By the sender's pid, not by the order of arrival:
            # a killed worker's last request may be read by the receiver after the kill.
            assert earlier.worker in killed, (key, [(r.number, r.worker) for r in sent])


def test_two_workers_never_deliver_one_record_at_once(
    pg_schema: Any, tmp_path: Path, receiver: Receiver
) -> None:
    backend = Backend("postgres", postgres=pg_schema.conninfo)
    init_store(postgres=backend.postgres, origin=ORIGIN, key=generate_key(ORIGIN))
    clock = FileClock(str(tmp_path / "clock"))
    clock.set(T0)  # frozen: no claim expires during the test
    receiver.hold = 0.03
    with open_store(postgres=backend.postgres, clock=clock) as store:
        o = outbox(store)
        subs = [o.subscribe(receiver.url), o.subscribe(receiver.url, run="r0")]
        workers = [start_worker(backend, tmp_path / "clock", "--batch", "2") for _ in range(2)]
        try:
            for i in range(20):
                write(store, f"r{i}", 6)
            want = {(subs[0], f"r{i}", s) for i in range(20) for s in range(1, 7)}
            want |= {(subs[1], "r0", s) for s in range(1, 7)}
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                taken = receiver.taken()
                got = {(sub, run, s) for (sub, run), seqs in taken.items() for s in seqs}
                if got >= want:
                    break
                time.sleep(0.1)
        finally:
            for w in workers:
                w.send_signal(signal.SIGKILL)
                w.wait(timeout=30)
    assert receiver.overlaps == []
    assert got == want
    # Exactly once (no worker died while delivering), and both workers took part.
    assert sum(len(seqs) for seqs in receiver.taken().values()) == len(want)
    per_worker = [
        [x for x in lines(cast(IO[bytes], w.stdout)) if x.get("op") == "attempt"] for w in workers
    ]
    assert all(per_worker), [len(p) for p in per_worker]
    in_order(receiver.requests)


def test_runs_written_while_subscribing_get_deliveries(pg_schema: Any) -> None:
    # New runs appended by several threads (each its own handle and connection) while
    # subscriptions are made: every run with records has a delivery for every subscription
    # made before its first append committed or after — i.e. for all of them.
    url = pg_schema.conninfo
    init_store(postgres=url, origin=ORIGIN, key=generate_key(ORIGIN))
    stop = threading.Event()
    errors: list[BaseException] = []

    def appender(k: int) -> None:
        try:
            with open_store(postgres=url) as s:
                i = 0
                while not stop.is_set():
                    s.append(1, [Append(f"t{k}-{i}", "Step")])
                    i += 1
        except BaseException as e:  # reported by the test
            errors.append(e)

    threads = [threading.Thread(target=appender, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    try:
        with open_store(postgres=url) as s:
            subs = []
            for _ in range(15):
                time.sleep(0.02)
                subs.append(outbox(s).subscribe("http://127.0.0.1:9/"))
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=60)
    assert errors == []
    with open_store(postgres=url) as s:
        runs = set(s.runs(None, 100_000))
        have: dict[int, set[str]] = {}
        for d in outbox(s).deliveries(limit=1_000_000):
            have.setdefault(d.subscription, set()).add(d.run)
    assert len(runs) > 50
    assert {sub: runs - have.get(sub, set()) for sub in subs} == {sub: set() for sub in subs}
