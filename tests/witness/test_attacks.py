"""The witness attacked as an attacker would: `tlog-witness serve` on loopback, hostile clients.

The limits under test are docs/operator-guide.md's "Limits"; the protocol is
https://c2sp.org/tlog-witness.

Each test starts the real command (``python -m witness.cli serve``) on a state it configures:
one process on SQLite, and ``--workers 2`` on PostgreSQL (the ``target`` fixture runs every
test against both). The connection limits are the documented settings, set small in the
config file so the tests are quick:

* idle and slowloris connections up to the connection cap and past it;
* a flood of checkpoints whose origin line is 1 MB long;
* an evidence flood: the public monitoring checkpoint POSTed back with junk proofs;
* chunked-body and header floods; pipelining; 500 concurrent connections;
* a real fork (two roots at one size, both signed by the log's key): kept exactly once.

For every attack: no 5xx; no change of the stored checkpoints or the evidence except by a 200
(a snapshot before and after); the server's RSS (read from ``/proc``, summed over the worker
processes) grows less than :data:`RSS_BOUND`; and a legitimate add-checkpoint from a new
connection, sent while the attack is held, is answered within 100 ms.

Every loop is bounded in count and time and talks only to 127.0.0.0/8. The attackers use
source addresses 127.0.0.2-127.0.0.8 (so that the per-address cap does not stop them before the
global one); the legitimate client uses 127.0.0.99.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import os
import re
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.clirunner import command_env, run_module
from tests.conftest import POSTGRES_URL, require_postgres
from tests.witness.helpers import ED_SEED, WITNESS, ForkLog, configure_state, leaf
from tlog.cosignature import TYPE_COSIGNATURE_V1
from tlog.keys import generate_key
from tlog.witnessproto import origin_hash
from witness.open import open_state

PAGE = 4096
MiB = 1 << 20

RSS_BOUND = 128 * MiB
"""The RSS growth every attack must stay under: below the operator guide's documented ceiling
for these limits (docs/operator-guide.md, "Limits": max_body_memory + 300 KiB per connection
+ 16 MiB, per process), and low enough that keeping what a hostile client sends (a 1 MB origin
per request, as before the fix) would fail the origin flood."""

LEGIT = "127.0.0.99"
ATTACKERS = [f"127.0.0.{i}" for i in range(2, 9)]

LIMITS = {
    "idle_timeout": 2,
    "header_timeout": 2,
    "request_timeout": 10,
    "read_timeout": 2,
    "max_header_bytes": 16384,
    "max_connections_per_address": 400,
}
CAP = {"sqlite": 1000, "postgres": 500}
"""max_connections per process: one process on SQLite, two workers on PostgreSQL (1,000 in
all either way)."""


# --- the server under attack ---------------------------------------------------------------


@dataclass
class Target:
    kind: str
    proc: subprocess.Popen[bytes]
    port: int
    stderr: Path
    db: str | None
    postgres: str | None
    log: ForkLog
    cap_total: int
    workers: int
    pids: list[int] = field(default_factory=list)

    def state_snapshot(self) -> tuple[Any, ...]:
        """What must not change without a 200: every stored (size, root) and the evidence."""
        s = open_state(db=self.db, postgres=self.postgres, create=False)
        try:
            latest = tuple((c.origin, c.size, c.root) for c in s.all_latest())
            evidence = tuple(e.id for e in s.evidence(None, 1000))
            return latest, evidence
        finally:
            s.close()

    def evidence(self) -> list[Any]:
        s = open_state(db=self.db, postgres=self.postgres, create=False)
        try:
            return s.evidence(None, 1000)
        finally:
            s.close()

    def rss(self) -> int:
        """Resident bytes of the serving processes, from /proc/PID/status (VmRSS)."""
        return sum(self.rss_by_process())

    def rss_by_process(self) -> list[int]:
        """Resident bytes of each serving process, in ``pids`` order."""
        out = []
        for pid in self.pids:
            with open(f"/proc/{pid}/status") as f:
                out += [int(ln.split()[1]) * 1024 for ln in f if ln.startswith("VmRSS:")]
        return out

    def lines(self) -> list[dict[str, Any]]:
        out = []
        for line in self.stderr.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("{"):
                out.append(json.loads(line))
        return out

    def statuses(self) -> list[int]:
        return [e["status"] for e in self.lines() if "status" in e]


def _children(pid: int) -> list[int]:
    out: list[int] = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/children") as f:
            out += [int(p) for p in f.read().split()]
    return out


def _toml(settings: dict[str, Any]) -> str:
    return "".join(f"{k} = {json.dumps(v)}\n" for k, v in settings.items())


@pytest.fixture(params=["sqlite", "postgres"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Target]:
    kind = request.param
    schema = None
    db: str | None = None
    postgres: str | None = None
    if kind == "postgres":
        require_postgres()
        import psycopg
        from psycopg.conninfo import make_conninfo

        schema = f"t_{uuid.uuid4().hex[:16]}"
        with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{schema}"')
        postgres = make_conninfo(POSTGRES_URL, options=f"-c search_path={schema}")
    else:
        db = str(tmp_path / "witness.db")
    try:
        log = ForkLog(f"attack.example/{kind}").grow(8)
        configure_state(db=db, postgres=postgres, logs=[log])
        key = tmp_path / "witness.key"
        key.write_text(generate_key(WITNESS, TYPE_COSIGNATURE_V1, ED_SEED).format() + "\n")
        key.chmod(0o600)
        workers = 1 if kind == "sqlite" else 2
        settings: dict[str, Any] = {
            **LIMITS,
            "max_connections": CAP[kind],
            "workers": workers,
            "keys": [str(key)],
            "listen": "127.0.0.1:0",
        }
        settings["db" if db else "postgres"] = db or postgres
        config = tmp_path / "witness.toml"
        config.write_text(_toml(settings))
        stderr = tmp_path / "stderr.log"
        env = command_env(("TLOG_WITNESS_DB", "TLOG_WITNESS_POSTGRES"), root_on_path=True)
        with open(stderr, "wb") as err:
            proc = subprocess.Popen(
                [sys.executable, "-m", "witness.cli", "serve", "--config", str(config)],
                stdout=subprocess.PIPE,
                stderr=err,
                stdin=subprocess.DEVNULL,
                env=env,
            )
        try:
            port = _wait_listening(proc, stderr)
            t = Target(kind, proc, port, stderr, db, postgres, log, 1000, workers)
            t.pids = _children(proc.pid) if workers > 1 else [proc.pid]
            assert len(t.pids) == workers
            # The log's first checkpoint, cosigned: the legitimate client re-submits it.
            status, _ = post(port, log.request(0, log.size))
            assert status == 200
            yield t
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
        # The server never wrote a traceback, whatever it was sent.
        text = stderr.read_text(encoding="utf-8", errors="replace")
        assert "Traceback" not in text, text[-3000:]
        assert all(line.startswith("{") for line in text.splitlines()), text[-3000:]
    finally:
        if schema is not None:
            import psycopg

            with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


def _wait_listening(proc: subprocess.Popen[bytes], stderr: Path) -> int:
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    deadline = time.monotonic() + 30
    seen = b""
    while True:
        m = re.search(rb"listening on http://127\.0\.0\.1:(\d+)\n", seen)
        if m:
            return int(m.group(1))
        ready, _, _ = select.select([fd], [], [], max(deadline - time.monotonic(), 0))
        if not ready:
            raise AssertionError(f"serve did not listen: {stderr.read_text()}")
        chunk = os.read(fd, 65536)
        if not chunk:
            raise AssertionError(f"serve exited {proc.wait()}: {stderr.read_text()}")
        seen += chunk


# --- clients -------------------------------------------------------------------------------


def post(
    port: int, body: bytes, path: str = "/add-checkpoint", source: str = LEGIT
) -> tuple[int, bytes]:
    """One request on a new connection from ``source``: (status, body)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30, source_address=(source, 0))
    try:
        conn.request("POST" if body else "GET", path, body=body or None)
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def legit_latency(t: Target, tries: int = 5) -> list[float]:
    """Seconds each of ``tries`` legitimate add-checkpoints took (a re-submission of the stored
    checkpoint, from a new connection, from an address no attacker uses); each must be a 200.

    A first, untimed one (a 200 within 5 s) lets the server finish what the attack's start
    queued (accepting a thousand connections at once, say): the timed ones measure the attack
    held, not its first burst."""
    started = time.perf_counter()
    status, body = post(t.port, t.log.request(t.log.size, t.log.size))
    assert status == 200 and time.perf_counter() - started < 5, body
    out = []
    for _ in range(tries):
        started = time.perf_counter()
        status, body = post(t.port, t.log.request(t.log.size, t.log.size))
        out.append(time.perf_counter() - started)
        assert status == 200, body
    return out


def assert_prompt(latencies: list[float]) -> None:
    """Answered within 100 ms. One try of five may be slower (the 2-core machine runs other
    tests beside this one), none beyond a second."""
    assert sum(1 for s in latencies if s <= 0.100) >= len(latencies) - 1, latencies
    assert max(latencies) < 1.0, latencies


def connect(port: int, source: str) -> socket.socket | None:
    """A connection from ``source``, or None when the server refused it at once."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((source, 0))
    s.settimeout(5)
    try:
        s.connect(("127.0.0.1", port))
    except OSError:
        s.close()
        return None
    s.setblocking(False)
    return s


def open_many(port: int, n: int, per_address: int) -> list[socket.socket]:
    socks = []
    for i in range(n):
        s = connect(port, ATTACKERS[i // per_address])
        if s is not None:
            socks.append(s)
    return socks


def drain(s: socket.socket) -> bytes | None:
    """What the server sent, if it closed the connection (None while it is still open)."""
    out = b""
    while True:
        try:
            chunk = s.recv(65536)
        except BlockingIOError:
            return None
        except ConnectionResetError:
            return out
        if not chunk:
            return out
        out += chunk


@contextlib.contextmanager
def held(socks: list[socket.socket]) -> Iterator[list[socket.socket]]:
    try:
        yield socks
    finally:
        for s in socks:
            s.close()


def no_5xx(t: Target) -> None:
    bad = [e for e in t.lines() if e.get("status", 0) >= 500]
    assert bad == [], bad[:5]


def rss_bounded(t: Target, before: int) -> None:
    grew = t.rss() - before
    assert grew < RSS_BOUND, f"RSS grew by {grew / MiB:.1f} MiB"


def wait_until(check: Callable[[], bool], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return check()


# --- idle connections and slowloris --------------------------------------------------------


def test_idle_connections_past_the_cap(target: Target) -> None:
    t = target
    before, rss0 = t.state_snapshot(), t.rss()
    n = t.cap_total + 150
    with held(open_many(t.port, n, 300)) as socks:
        time.sleep(0.3)  # the server has accepted them all (and evicted what is past the cap)
        assert_prompt(legit_latency(t))
        rss_bounded(t, rss0)
        still_open = [s for s in socks if drain(s) is None]
        # Past the cap the longest-idle connections were closed to make room: never more open
        # than the cap (the legitimate client's own connection may have taken one more slot).
        assert len(still_open) <= t.cap_total
        assert len(still_open) >= t.cap_total - 200
        # Idle connections are closed after idle_timeout, by the server.
        assert wait_until(lambda: all(drain(s) is not None for s in socks), 6)
    no_5xx(t)
    assert t.state_snapshot() == before


def test_slowloris_past_the_cap(target: Target) -> None:
    t = target
    before, rss0 = t.state_snapshot(), t.rss()
    n = t.cap_total + 100
    with held(open_many(t.port, n, 300)) as socks:
        head = b"POST /add-checkpoint HTTP/1.1\r\nHost: w\r\nX-Slow: "
        got: dict[int, bytes] = {}
        started = time.monotonic()
        probe = None
        # One byte per connection every 0.5 s, for longer than header_timeout.
        for step in range(len(head) + 40):
            if time.monotonic() - started > LIMITS["header_timeout"] + 2.5:
                break
            for i, s in enumerate(socks):
                if i in got:
                    continue
                data = drain(s)
                if data is not None:
                    got[i] = data
                    continue
                with contextlib.suppress(OSError):
                    s.send(head[step : step + 1] or b"a")
            if probe is None and time.monotonic() - started > 1.0:
                probe = legit_latency(t)
                rss_bounded(t, rss0)
            time.sleep(0.5)
        assert probe is not None
        assert_prompt(probe)
        wait_until(lambda: all(i in got or drain(s) is not None for i, s in enumerate(socks)), 4)
        for i, s in enumerate(socks):
            if i not in got:
                data = drain(s)
                assert data is not None, "a slowloris connection outlived header_timeout"
                got[i] = data
    # Each was answered 408 (its headers were late) or closed without an answer (evicted to
    # make room for a newer one, or refused past the per-address cap).
    answers = {d.split(b"\r\n", 1)[0] for d in got.values()}
    assert answers <= {b"", b"HTTP/1.1 408 Request Timeout", b"HTTP/1.1 429 Too Many Requests"}
    assert b"HTTP/1.1 408 Request Timeout" in answers
    no_5xx(t)
    assert t.state_snapshot() == before
    assert any(e.get("status") == 408 and e.get("endpoint") == "connection" for e in t.lines())


def test_connections_aiohttp_answers_itself_are_never_busy(target: Target) -> None:
    """Blank lines before a request line (HTTP skips them), or a request answered at once
    (an unknown Expect, then a body that is not a request): such a connection is never busy
    for long, so a thousand of them cannot keep a legitimate client out of a full server."""
    t = target
    per = 300
    n = t.cap_total + 100
    with held(open_many(t.port, n, per)) as socks:
        expect = (
            b"POST /add-checkpoint HTTP/1.1\r\nHost: w\r\nExpect: 200-ok\r\n"
            b"Content-Length: 4\r\n\r\nabcd"
        )
        for i, s in enumerate(socks):
            with contextlib.suppress(OSError):
                s.send(b"\r\n\r\n" if i % 2 else expect)
        time.sleep(0.5)
        assert_prompt(legit_latency(t))
        # A new connection at the cap: admitted (something evictable made room), not 503.
        status, _ = post(t.port, b"", "/metrics", source=ATTACKERS[-1])
        assert status == 200
        # And they are closed by the header deadline.
        assert wait_until(lambda: all(drain(s) is not None for s in socks), 6)
    no_5xx(t)


def test_declared_bodies_hold_no_budget(target: Target) -> None:
    """64 connections that declare 1 MB bodies and send none hold none of max_body_memory:
    a legitimate client whose body comes in a second write is answered promptly."""
    t = target
    request = b"POST /add-checkpoint HTTP/1.1\r\nHost: w\r\nContent-Length: 1048000\r\n\r\n"
    with held(open_many(t.port, 64, 64)) as socks:
        for s in socks:
            s.send(request)
        time.sleep(0.3)
        body = t.log.request(t.log.size, t.log.size)
        latencies = []
        for _ in range(5):
            started = time.perf_counter()
            c = socket.create_connection(("127.0.0.1", t.port), 10, source_address=(LEGIT, 0))
            with c:
                c.sendall(
                    b"POST /add-checkpoint HTTP/1.1\r\nHost: w\r\nContent-Length: %d\r\n"
                    b"Connection: close\r\n\r\n" % len(body)
                )
                time.sleep(0.02)  # the body in a second write, after the handler started
                c.sendall(body)
                answer = c.recv(64)
            latencies.append(time.perf_counter() - started - 0.02)
            assert answer.startswith(b"HTTP/1.1 200 "), answer
        assert_prompt(latencies)
        _, metrics = post(t.port, b"", "/metrics")
        reserved = re.findall(rb"witness_body_bytes_reserved(?:\{[^}]*\})? (\d+)", metrics)
        assert reserved and all(int(r) < MiB for r in reserved), reserved
    no_5xx(t)


def test_per_address_cap_answers_429(target: Target) -> None:
    t = target
    per = LIMITS["max_connections_per_address"] * t.workers
    too_many = b"HTTP/1.1 429 Too Many Requests\r\n"
    # Each process has its own cap: at least the 20 past the cap of both are refused. A
    # connection let in may meanwhile be closed for idling (idle_timeout is 2 s): 408 or a plain
    # close, nothing else. When the server took longer than that to take the whole flood in (a
    # loaded machine: opening it, then accepting it, which a legitimate request queued behind
    # it measures), connections let in early may have idled out and freed their slots before
    # the last ones came, so too few were past the cap: that round proves nothing, and is
    # flooded again (at most three rounds; a round taken in in time must show the refusals).
    for attempt in range(3):
        began = time.monotonic()
        opened = [connect(t.port, ATTACKERS[0]) for _ in range(per + 20)]
        post(t.port, t.log.request(t.log.size, t.log.size))  # answered once the flood is in
        took = time.monotonic() - began
        with held([s for s in opened if s]) as socks:
            answers: dict[int, bytes] = {}

            def refused(
                socks: list[socket.socket] = socks, answers: dict[int, bytes] = answers
            ) -> bool:
                for i, s in enumerate(socks):
                    if i not in answers and (d := drain(s)) is not None:
                        answers[i] = d
                return sum(d.startswith(too_many) for d in answers.values()) >= 20

            met = wait_until(refused, 5)
            others = [
                d
                for d in answers.values()
                if d and not d.startswith((too_many, b"HTTP/1.1 408 Request Timeout\r\n"))
            ]
            assert not others, others[:2]
            if met:
                break
            assert took > 1.5 and attempt < 2, f"{len(answers)} answered; taken in in {took:.1f} s"
        time.sleep(0.5)  # the round's connections, closed, are gone before the next
    assert_prompt(legit_latency(t))
    no_5xx(t)


# --- hostile bodies ------------------------------------------------------------------------


def test_one_megabyte_origin_flood(target: Target) -> None:
    t = target
    before, rss0 = t.state_snapshot(), t.rss()
    origin = "x" * MiB
    body = b"old 0\n\n" + f"{origin}\n1\n{'A' * 43}=\n\n— {origin[:10]} AAAA\n".encode()
    statuses: list[int] = []

    def flood(source: str) -> None:
        for _ in range(50):
            statuses.append(post(t.port, body, source=source)[0])

    threads = [threading.Thread(target=flood, args=(a,)) for a in ATTACKERS[:4]]
    for th in threads:
        th.start()
    time.sleep(0.2)
    probe = legit_latency(t)
    for th in threads:
        th.join(120)
    assert len(statuses) == 200
    assert set(statuses) <= {400, 404}, set(statuses)
    assert_prompt(probe)
    rss_bounded(t, rss0)
    no_5xx(t)
    assert t.state_snapshot() == before
    # The log lines stay short: an origin is cut to what a configured one can be.
    assert max(len(json.dumps(e)) for e in t.lines()) < 4096


def test_large_body_flood(target: Target) -> None:
    """200 connections each send a whole 1 MB body at once: bodies are read within
    max_body_memory and aiohttp buffers little per connection, so memory stays bounded."""
    t = target
    # The bound is per process, as the operator guide's ceiling is: each worker may hold up to
    # max_body_memory (64 MiB) of bodies, so two workers together may reach RSS_BOUND itself
    # (measured up to 136 MiB in all under load, before issue 11's refactor and after it).
    before, rss0 = t.state_snapshot(), t.rss_by_process()
    body = b"old 0\n\n" + b"x" * (MiB - 16)
    request = (
        b"POST /add-checkpoint HTTP/1.1\r\nHost: w\r\nContent-Length: %d\r\n\r\n" % len(body) + body
    )
    socks = open_many(t.port, 200, 50)
    peak = 0
    answers: list[bytes] = []
    with held(socks):
        senders = [threading.Thread(target=_send_all, args=(s, request)) for s in socks]
        for th in senders:
            th.start()
        for _ in range(20):
            peak = max(
                peak, *(now - was for now, was in zip(t.rss_by_process(), rss0, strict=True))
            )
            time.sleep(0.05)
        for th in senders:
            th.join(60)
        # The 200 connections are still open (their answers unread). The probe comes after
        # the sending, which is this test's own CPU, not the server's.
        probe = legit_latency(t)
        for s in socks:
            s.setblocking(True)
            s.settimeout(30)
            with contextlib.suppress(OSError):
                answers.append(s.recv(64).split(b"\r\n", 1)[0])
    assert_prompt(probe)
    assert peak < RSS_BOUND, f"RSS of one process grew by {peak / MiB:.1f} MiB"
    rss_bounded(t, sum(rss0))
    # Each gets its answer: 400 (the body is not a checkpoint), or 408 when its body waited
    # for the memory budget past read_timeout (a slow machine: CI saw it), or the connection
    # was cut after the answer was sent while its body still arrived.
    answered = (b"HTTP/1.1 400 Bad Request", b"HTTP/1.1 408 Request Timeout")
    assert set(answers) <= {*answered, b""}, set(answers)
    assert sum(answers.count(a) for a in answered) >= 150, answers
    no_5xx(t)
    assert t.state_snapshot() == before


def _send_all(s: socket.socket, data: bytes) -> None:
    s.setblocking(True)
    s.settimeout(30)
    with contextlib.suppress(OSError):
        s.sendall(data)


def test_evidence_flood_by_replaying_the_public_checkpoint(target: Target) -> None:
    t = target
    status, note = post(t.port, b"", f"/{origin_hash(t.log.origin)}/checkpoint")
    assert status == 200
    before, rss0 = t.state_snapshot(), t.rss()
    size = t.log.size

    def h(tag: str) -> bytes:
        return base64.b64encode(leaf("junk", hash(tag) & 0xFFFF))

    junk = [
        b"old %d\n%s\n\n" % (size, h("a")) + note,  # one junk proof line
        b"old %d\n%s\n%s\n\n" % (size, h("b"), h("c")) + note,
        b"old 0\n%s\n\n" % h("d") + note,
        b"old 3\n%s\n\n" % h("e") + note,
    ]
    statuses = [post(t.port, junk[i % len(junk)], source=ATTACKERS[i % 3])[0] for i in range(40)]
    # 422: a proof that fails (or proof lines where none belong); 409: another old size.
    assert set(statuses) == {409, 422}, statuses
    assert_prompt(legit_latency(t))
    assert t.evidence() == []  # a proof that does not verify proves nothing
    assert t.state_snapshot() == before
    rss_bounded(t, rss0)
    no_5xx(t)


def _raw(port: int, data: bytes, source: str, wait: float = 8.0) -> bytes:
    s = socket.create_connection(("127.0.0.1", port), timeout=wait, source_address=(source, 0))
    try:
        with contextlib.suppress(OSError):
            s.sendall(data)
        out = b""
        with contextlib.suppress(OSError):
            while chunk := s.recv(65536):
                out += chunk
        return out
    finally:
        s.close()


def test_chunked_and_header_floods(target: Target) -> None:
    t = target
    before, rss0 = t.state_snapshot(), t.rss()
    chunk = b"%x\r\n%s\r\n" % (65536, b"a" * 65536)
    cases: list[tuple[bytes, int]] = [
        # An endless chunked body: 413 once past max_body.
        (
            b"POST /add-checkpoint HTTP/1.1\r\nHost: w\r\nTransfer-Encoding: chunked\r\n\r\n"
            + chunk * 40,
            413,
        ),
        # A declared body larger than max_body: 413 before reading it; with Expect:
        # 100-continue, the 413 at once and no 100 first.
        (
            b"POST /add-checkpoint HTTP/1.1\r\nHost: w\r\nExpect: 100-continue\r\n"
            b"Content-Length: 99999999\r\n\r\n",
            413,
        ),
        # An expectation the witness does not know is ignored: the request is answered as is.
        (
            b"POST /add-checkpoint HTTP/1.1\r\nHost: w\r\nExpect: 200-ok\r\n"
            b"Content-Length: 4\r\nConnection: close\r\n\r\nabcd",
            400,
        ),
        # A declared body larger than max_body: 413 before reading it.
        (
            b"POST /add-checkpoint HTTP/1.1\r\nHost: w\r\nContent-Length: 99999999\r\n\r\n",
            413,
        ),
        # A broken chunked framing.
        (
            b"POST /add-checkpoint HTTP/1.1\r\nHost: w\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            400,
        ),
        # Too many headers, one header too long, a header block too large in all.
        (
            b"GET / HTTP/1.1\r\n" + b"".join(b"X-%d: y\r\n" % i for i in range(300)) + b"\r\n",
            400,
        ),
        # One header over aiohttp's 8190 bytes: 400; over max_header_bytes: 431 first.
        (b"GET / HTTP/1.1\r\nX: " + b"y" * 9000 + b"\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nX: " + b"y" * 20000 + b"\r\n\r\n", 431),
        (
            b"GET / HTTP/1.1\r\n" + b"".join(b"X-%d: %s\r\n" % (i, b"y" * 4000) for i in range(8)),
            431,
        ),
        # A header block over max_header_bytes sent in one write, its end included.
        (
            b"GET / HTTP/1.1\r\n"
            + b"".join(b"X-%d: %s\r\n" % (i, b"y" * 8000) for i in range(7))
            + b"\r\n",
            431,
        ),
        # A body that does not decode (Content-Encoding), to a handler that never reads it:
        # aiohttp meets it after the answer.
        (
            b"GET / HTTP/1.1\r\nHost: w\r\nContent-Encoding: gzip\r\nContent-Length: 10\r\n"
            b"Connection: close\r\n\r\n0123456789",
            200,
        ),
        # Not HTTP at all.
        (
            b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 64 + b"\r\n\r\n",
            400,
        ),
    ]
    results: dict[int, bytes] = {}

    def one(i: int, data: bytes) -> None:
        results[i] = _raw(t.port, data, ATTACKERS[i % len(ATTACKERS)])

    threads = [
        threading.Thread(target=one, args=(i, data))
        for i, (data, _) in enumerate(cases * 8)  # 56 attackers at once
    ]
    for th in threads:
        th.start()
    probe = legit_latency(t)
    for th in threads:
        th.join(60)
    for i, (_, want) in enumerate(cases * 8):
        m = re.match(rb"HTTP/1\.[01] (\d{3}) ", results[i])
        assert m is not None and int(m.group(1)) == want, (i, results[i][:120])
    assert_prompt(probe)
    rss_bounded(t, rss0)
    no_5xx(t)
    assert t.state_snapshot() == before
    # Malformed HTTP is one JSON line and one metric each, never a traceback (the fixture
    # checks stderr has only JSON lines).
    assert sum(1 for e in t.lines() if e.get("endpoint") == "http") >= 8 * 4
    _, metrics = post(t.port, b"", "/metrics")
    assert b'endpoint="http",code="400"' in metrics


def test_slow_chunked_body_gets_408(target: Target) -> None:
    t = target
    s = socket.create_connection(
        ("127.0.0.1", t.port), timeout=10, source_address=(ATTACKERS[1], 0)
    )
    with s:
        s.sendall(b"POST /add-checkpoint HTTP/1.1\r\nHost: w\r\nTransfer-Encoding: chunked\r\n\r\n")
        answer = b""
        deadline = time.monotonic() + 8
        s.settimeout(0.5)
        while time.monotonic() < deadline and not answer:
            with contextlib.suppress(OSError):
                s.sendall(b"1\r\na\r\n")
            with contextlib.suppress(TimeoutError):
                answer = s.recv(4096)
        assert answer.startswith(b"HTTP/1.1 408 "), answer
    no_5xx(t)


def test_pipelining(target: Target) -> None:
    t = target
    before, rss0 = t.state_snapshot(), t.rss()
    path = f"/{origin_hash(t.log.origin)}/checkpoint".encode()
    get = b"GET " + path + b" HTTP/1.1\r\nHost: w\r\n\r\n"
    resubmit = t.log.request(t.log.size, t.log.size)
    post_req = (
        b"POST /add-checkpoint HTTP/1.1\r\nHost: w\r\nContent-Length: %d\r\n\r\n" % len(resubmit)
        + resubmit
    )
    n = 1000
    s = socket.create_connection(
        ("127.0.0.1", t.port), timeout=30, source_address=(ATTACKERS[2], 0)
    )
    with s:
        # Everything first, reading nothing, then all the answers.
        sender = threading.Thread(target=s.sendall, args=((get + post_req) * (n // 2),))
        sender.start()
        probe = legit_latency(t)
        data = b""
        while data.count(b"HTTP/1.1 ") < n:
            chunk = s.recv(1 << 20)
            if not chunk:
                break
            data += chunk
        sender.join(30)
    statuses = re.findall(rb"HTTP/1\.1 (\d{3}) ", data)
    assert len(statuses) == n
    assert set(statuses) <= {b"200", b"409"}, set(statuses)  # 409: lost a race to the other worker
    assert_prompt(probe)
    rss_bounded(t, rss0)
    no_5xx(t)
    assert t.state_snapshot()[0] == before[0]


def test_500_concurrent_connections(target: Target) -> None:
    """500 connections at once, each with a request anyone may send: half read the public
    checkpoint, half re-submit another log's cosigned checkpoint. Every one is answered within
    seconds; while the 500 stay open, the legitimate client is answered promptly. (While a
    burst of 500 requests is being served, a new one waits its turn like the others: that is
    load, not an attack that holds the server.)"""
    t = target
    other = ForkLog(t.log.origin + "/other").grow(3)
    configure_state(db=t.db, postgres=t.postgres, logs=[other])
    assert post(t.port, other.request(0, 3))[0] == 200
    before, rss0 = t.state_snapshot(), t.rss()
    body = other.request(3, 3)
    requests = [
        b"GET /%s/checkpoint HTTP/1.1\r\nHost: w\r\n\r\n" % origin_hash(t.log.origin).encode(),
        b"POST /add-checkpoint HTTP/1.1\r\nHost: w\r\nContent-Length: %d\r\n\r\n" % len(body)
        + body,
    ]
    socks = open_many(t.port, 500, 100)
    assert len(socks) == 500
    answers: dict[int, bytes] = {}
    with held(socks):
        started = time.monotonic()
        for i, s in enumerate(socks):
            s.setblocking(True)
            s.sendall(requests[i % 2])
        for i, s in enumerate(socks):
            s.settimeout(30)
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
            answers[i] = data.split(b"\r\n", 1)[0]
        # All 500 answered in a few seconds; they stay open (keep-alive, until idle_timeout)
        # while the legitimate client comes.
        assert time.monotonic() - started < 10
        probe = legit_latency(t)
    got = set(answers.values())
    # 409: a re-submission that lost a race to the other worker, which moved the log's time.
    assert got <= {b"HTTP/1.1 200 OK", b"HTTP/1.1 409 Conflict"}, got
    assert list(answers.values()).count(b"HTTP/1.1 200 OK") >= 375
    assert_prompt(probe)
    rss_bounded(t, rss0)
    no_5xx(t)
    assert t.state_snapshot()[0] == before[0]


# --- evidence: a real fork, kept once ------------------------------------------------------


@pytest.mark.parametrize("order", ["a-then-b", "b-then-a"])
def test_a_real_fork_is_kept_exactly_once(target: Target, order: str) -> None:
    t = target
    a, b = ForkLog.forks(t.log.origin.replace("attack", "fork"), 5, 4)
    configure_state(db=t.db, postgres=t.postgres, logs=[a])
    first, second = (a, b) if order == "a-then-b" else (b, a)
    assert post(t.port, first.request(0, 9))[0] == 200
    # The other fork's checkpoint of the same size, resent 20 times from several clients at
    # once (on two workers, to both): one row, however many times it arrives.
    results: list[int] = []

    def send(i: int) -> None:
        results.append(post(t.port, second.request(9, 9), source=ATTACKERS[i % 4])[0])

    threads = [threading.Thread(target=send, args=(i,)) for i in range(20)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    assert results == [422] * 20
    kept = [e for e in t.evidence() if e.origin == a.origin]
    assert len(kept) == 1, kept
    [e] = kept
    assert e.reason == "two different roots for size 9"
    # What the row holds convinces anyone with the log's key: two signed notes, one size,
    # two roots.
    from tlog.checkpoint import open_checkpoint

    mine = open_checkpoint(e.stored_note, [a.verifier]).checkpoint
    theirs = open_checkpoint(e.request.split(b"\n\n", 1)[1], [a.verifier]).checkpoint
    assert mine.size == theirs.size == 9 and mine.root != theirs.root
    no_5xx(t)
    # The same with the commands of the operator guide.
    ev = third_party_files(t, e.id)
    cps = [
        json.loads(tool("tlog", "open", "--checkpoint", "--json", "--vkey", a.vkey, str(ev / n)))
        for n in ("stored.note", "submitted.note")
    ]
    assert cps[0]["checkpoint"]["size"] == cps[1]["checkpoint"]["size"] == 9
    assert cps[0]["checkpoint"]["root"] != cps[1]["checkpoint"]["root"]


def test_proven_inconsistency_is_kept_once(target: Target) -> None:
    t = target
    a, b = ForkLog.forks(t.log.origin.replace("attack", "incons"), 2, 8)
    configure_state(db=t.db, postgres=t.postgres, logs=[a])
    assert post(t.port, a.request(0, 5))[0] == 200
    # b's tree of size 10 with b's own (correct) proof from size 5: it folds to b's signed
    # root from b's root at 5, which is not the stored one.
    bad = b.request(5, 10)
    junk = b.request(5, 10, proof=[leaf("junk", i) for i in range(len(b.proof(5, 10)))])
    statuses = [post(t.port, body)[0] for body in [bad] * 10 + [junk] * 10]
    assert statuses == [422] * 20
    kept = [e for e in t.evidence() if e.origin == a.origin]
    assert len(kept) == 1 and kept[0].request == bad
    no_5xx(t)
    # The operator guide's third-party check, as written there, with nothing but the CLIs.
    ev = third_party_files(t, kept[0].id)
    m = re.fullmatch(
        r"the consistency proof from size 5 to 10 leads to the request's root from root"
        r" (\S+) at size 5",
        kept[0].reason,
    )
    assert m is not None, kept[0].reason
    stored = tool(
        "tlog", "open", "--checkpoint", "--json", "--vkey", a.vkey, str(ev / "stored.note")
    )
    submitted = tool(
        "tlog", "open", "--checkpoint", "--json", "--vkey", a.vkey, str(ev / "submitted.note")
    )
    stored_cp, submitted_cp = json.loads(stored)["checkpoint"], json.loads(submitted)["checkpoint"]
    assert stored_cp["size"] == 5 and submitted_cp["size"] == 10
    assert m.group(1) != stored_cp["root"]
    assert tool(
        "tlog", "check", "consistency", "--old", "5", "--old-root", m.group(1),
        "--size", "10", "--root", submitted_cp["root"], str(ev / "proof.txt"),
    ) == b"ok\n"  # fmt: skip


def tool(cli: str, *args: str) -> bytes:
    """Run ``tlog`` or ``tlog-witness`` as a user would (exit 0 expected); its stdout."""
    module = {"tlog": "tlog.cli.command", "tlog-witness": "witness.cli"}[cli]
    done = run_module(module, *args, env=command_env(root_on_path=True), timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def third_party_files(t: Target, evidence_id: int) -> Path:
    where = ["--db", t.db] if t.db else ["--postgres", str(t.postgres)]
    out = t.stderr.parent / f"ev-{evidence_id}"
    listed = tool("tlog-witness", "evidence", *where, "--show", str(evidence_id), "--out", str(out))
    assert listed.decode().split() == [
        str(out / n) for n in ("request", "submitted.note", "proof.txt", "stored.note")
    ]
    return out
