"""Fault, race and hostile-input tests of the witness: real server processes over real HTTP.

Every test here runs the witness as separate OS processes — ``sys.executable
tests/witness/proc.py`` (:class:`tests.witness.helpers.WitnessProcess`), built on
:func:`witness.server.make_app` — on a SQLite file or a fresh PostgreSQL schema, and judges the
outcome from the test process with oracles of its own: the logs' Merkle trees
(:class:`tests.witness.helpers.ForkLog`), the log and witness public keys, and the state read
through a separate handle (:func:`witness.open.open_state`).

Races (acceptance items 2 and 4; https://c2sp.org/tlog-witness, edge case 15). :data:`RACE_ROUNDS`
rounds, each with a fresh origin: the log's first ``BASE`` leaves are cosigned, then
:data:`RACE_REQUESTS` requests (16 per fork, each with a correct proof within its own fork) go out
at once over as many client connections, spread over the server processes. Every round must cosign
one fork only (zero split views); every 200 verifies over the winning fork's checkpoint; every 409
names a size the witness stored; every 422 is a request of the losing fork; the stored checkpoint
is the largest cosigned one, on the winning fork, and the monitoring endpoint serves it with both
signatures. Item 2: one process on SQLite. Item 4: two processes sharing one PostgreSQL schema
(and, beyond the brief, two processes sharing one SQLite file); their JSON request logs show the
compare-and-swap races the second process lost.

Crashes (acceptance item 3; edge case 16). :data:`CRASH_CLIENTS` client threads keep submitting
valid, advancing checkpoints of :data:`CRASH_ORIGINS` logs (correct old sizes and proofs,
resynchronising on 409) while the server is killed with SIGKILL at a random moment 10-300 ms
after it starts listening, :data:`CRASH_KILLS` times per backend, and restarted on the same
database. After each kill, once no request to the dead server is in flight: for every log the
stored size is >= every size that ever got a 200, the stored root equals the cosigned root at
equal size and otherwise a consistency proof from each cosigned checkpoint to the stored one
verifies; the stored note carries the log's and the witness's valid signatures; the stored
size never decreased. The same checks run again once the server has restarted (on PostgreSQL a
COMMIT the killed server had already sent may still land after the kill; that is allowed, and
counted), and the restarted server's monitoring endpoint serves exactly the stored note.
While running, every 200 cosignature verifies, no 200 comes from an old size below a size
already cosigned, and no 409 names such a size.

Hostile input (acceptance item 5): at least :data:`HOSTILE_MIN` hostile requests against one
server process, judged request by request by :class:`Probe` (see
:func:`test_hostile_input_never_5xx_never_changes_state`). Each server bug it found is also
pinned by a small test of its own (``test_hostile_undecodable_content_encoding_…`` and
``test_hostile_body_cut_short_…``).
"""

from __future__ import annotations

import asyncio
import base64
import gzip
import http.client
import json
import random
import re
import signal
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import requests
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.witness.helpers import (
    WITNESS,
    ForkLog,
    WitnessProcess,
    check_cosignatures,
    configure_state,
    witness_verifiers,
)
from tlog.checkpoint import Checkpoint, open_checkpoint
from tlog.merkle import verify_consistency
from tlog.note import Signature, parse_note
from tlog.witnessproto import (
    MAX_REQUEST_SIZE,
    SIZE_CONTENT_TYPE,
    AddCheckpointRequest,
    monitoring_path,
    parse_size_body,
)
from witness.open import open_state
from witness.state import Cosigned, WitnessState

RACE_ROUNDS = 100
"""Rounds of the two-fork race, each with a fresh origin."""

RACE_REQUESTS = 32
"""Concurrent requests per round (16 per fork), each on its own client connection."""

BASE = 3
"""Leaves the two forks share; both forks then grow by 10."""

CRASH_KILLS = 50
"""SIGKILLs of the server per backend."""

CRASH_ORIGINS = 3
CRASH_CLIENTS = 6
CRASH_LOG_SIZE = 1 << 13
"""Leaves of each crash-test log; a client that reaches the end re-submits the last one."""

# --- shared -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Where:
    """A witness state: exactly one of a SQLite file or a PostgreSQL connection string."""

    name: str
    db: str | None = None
    postgres: str | None = None

    def open(self) -> WitnessState:
        return open_state(db=self.db, postgres=self.postgres, create=False)

    def configure(self, logs: Sequence[ForkLog]) -> None:
        configure_state(db=self.db, postgres=self.postgres, logs=logs)

    def server(self, tmp: Path, tag: str, **kw: Any) -> WitnessProcess:
        return WitnessProcess(
            db=self.db, postgres=self.postgres, stderr_path=tmp / f"{tag}.err", **kw
        )


@pytest.fixture(params=["sqlite", "postgres"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> Where:
    """Each backend in turn: a SQLite file in tmp_path, or a fresh PostgreSQL schema."""
    if request.param == "sqlite":
        return Where("sqlite", db=str(tmp_path / "witness.db"))
    schema = request.getfixturevalue("pg_schema")
    return Where("postgres", postgres=schema.conninfo)


def check_stored_note(stored: Cosigned, log: ForkLog) -> None:
    """The stored note is the log's checkpoint of the stored size, with a valid log signature
    and a valid cosignature of this witness (what the monitoring endpoint serves)."""
    signed = open_checkpoint(stored.note, [log.verifier, *witness_verifiers()])
    cp = signed.checkpoint
    assert (cp.origin, cp.size, cp.root) == (log.origin, stored.size, stored.root)
    names = {s.name for s in signed.note.sigs}
    assert names == {log.origin, WITNESS}, names


def lost_races(log_path: Path) -> tuple[int, int]:
    """(compare-and-swaps lost to another process, 5xx answers) in a server's JSON log."""
    lost = errors = 0
    if not log_path.exists():
        return 0, 0
    for line in log_path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("{"):
            continue
        entry = json.loads(line)
        lost += bool(entry.get("lost_race"))
        errors += int(entry.get("status", 0)) >= 500
    return lost, errors


# --- races (items 2 and 4) --------------------------------------------------------------------


def fork_requests(a: ForkLog, b: ForkLog) -> list[tuple[str, int, bytes]]:
    """16 requests per fork, (fork, size, body): single-leaf steps BASE+j -> BASE+j+1 and
    jumps BASE -> BASE+2+j, each with a correct proof within its own fork."""
    out = []
    for name, log in (("a", a), ("b", b)):
        for j in range(8):
            out.append((name, BASE + j + 1, log.request(BASE + j, BASE + j + 1)))
            out.append((name, BASE + 2 + j, log.request(BASE, BASE + 2 + j)))
    assert len(out) == RACE_REQUESTS
    return out


@dataclass
class RaceReport:
    rounds: int = 0
    split_views: int = 0
    statuses: Counter[int] = field(default_factory=Counter)
    cosigned: int = 0


async def post(session: aiohttp.ClientSession, address: str, body: bytes) -> tuple[int, bytes, str]:
    async with session.post(address + "/add-checkpoint", data=body) as r:
        return r.status, await r.read(), r.headers.get("Content-Type", "")


async def race_rounds(
    addresses: list[str], state: WitnessState, forks: list[tuple[ForkLog, ForkLog]]
) -> RaceReport:
    """Run one race round per pair of forks (see the module docstring); return the tally.
    Assertions name the round."""
    report = RaceReport()
    connector = aiohttp.TCPConnector(limit=RACE_REQUESTS * 2, limit_per_host=RACE_REQUESTS)
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        for trial, (fork_a, fork_b) in enumerate(forks):
            origin = fork_a.origin
            status, body, _ = await post(session, addresses[0], fork_a.request(0, BASE))
            assert status == 200, (trial, status, body)
            requests_ = fork_requests(fork_a, fork_b)
            random.Random(trial).shuffle(requests_)
            results = await asyncio.gather(
                *(
                    post(session, addresses[i % len(addresses)], body)
                    for i, (_, _, body) in enumerate(requests_)
                )
            )
            winners = {
                name for (name, _, _), (s, _, _) in zip(requests_, results, strict=True) if s == 200
            }
            report.rounds += 1
            if len(winners) != 1:
                report.split_views += 1
                continue
            [winner] = winners
            won = fork_a if winner == "a" else fork_b
            cosigned = [BASE]
            conflicts = []
            for (name, size, _), (s, rbody, ctype) in zip(requests_, results, strict=True):
                report.statuses[s] += 1
                assert s in (200, 409, 422), (trial, s, rbody)
                if s == 200:
                    check_cosignatures(rbody, won.text(size))
                    cosigned.append(size)
                    report.cosigned += 1
                elif s == 409:
                    assert ctype == SIZE_CONTENT_TYPE, (trial, ctype)
                    conflicts.append(parse_size_body(rbody, ctype))
                else:
                    # A proof within the winning fork is always good: only the loser gets 422.
                    assert name != winner, (trial, size, rbody)
            # A 409 names a size the witness stored at some point: BASE or a cosigned one.
            assert set(conflicts) <= set(cosigned), (trial, conflicts, cosigned)
            stored = state.latest(origin)
            assert stored is not None, trial
            assert stored.size == max(cosigned), (trial, stored.size, cosigned)
            assert stored.root == won.root(stored.size), trial
            check_stored_note(stored, won)
            mon = addresses[trial % len(addresses)] + monitoring_path("", origin)
            async with session.get(mon) as r:
                assert r.status == 200, trial
                assert await r.read() == stored.note, trial
    return report


def run_race(
    where: Where, tmp_path: Path, processes: int, record_property: Callable[[str, object], None]
) -> None:
    forks = [ForkLog.forks(f"race.example/{where.name}/{t}", BASE, 10) for t in range(RACE_ROUNDS)]
    where.configure([a for a, _ in forks])
    logs = [tmp_path / f"race-{i}.log" for i in range(processes)]
    started = time.monotonic()
    servers: list[WitnessProcess] = []
    state = where.open()
    try:
        for i in range(processes):
            servers.append(where.server(tmp_path, f"race-{i}", log_path=logs[i]))
        report = asyncio.run(race_rounds([s.address for s in servers], state, forks))
        for s in servers:
            assert s.alive(), s.stderr()
    finally:
        for s in servers:
            s.kill()
        state.close()
    lost = errors = 0
    for log in logs:
        n_lost, n_errors = lost_races(log)
        lost += n_lost
        errors += n_errors
    summary = (
        f"race {where.name} x{processes} processes: {report.rounds} rounds of"
        f" {RACE_REQUESTS} requests, {report.split_views} split views,"
        f" statuses {dict(sorted(report.statuses.items()))}, {report.cosigned} cosignatures,"
        f" {lost} compare-and-swaps lost to another process,"
        f" {time.monotonic() - started:.1f} s"
    )
    record_property("summary", summary)
    print(summary)
    assert report.rounds == RACE_ROUNDS, summary
    assert report.split_views == 0, summary
    assert errors == 0, summary
    assert report.statuses[409] > 0 and report.statuses[422] > 0, summary
    if processes > 1:
        assert lost > 0, f"the processes never raced each other: {summary}"


def test_race_one_process_sqlite_two_forks_zero_split_views(
    tmp_path: Path, record_property: Callable[[str, object], None]
) -> None:
    """Item 2: 32 concurrent requests along two conflicting forks against one server
    process on SQLite, 100 rounds: cosignatures for one fork only, every round."""
    run_race(Where("sqlite", db=str(tmp_path / "witness.db")), tmp_path, 1, record_property)


def test_race_two_processes_shared_state_two_forks_zero_split_views(
    where: Where, tmp_path: Path, record_property: Callable[[str, object], None]
) -> None:
    """Item 4: two server processes sharing one PostgreSQL schema (and one SQLite file), the
    race of item 2 split across both, 100 rounds: zero split views."""
    run_race(where, tmp_path, 2, record_property)


# --- crashes (item 3) -------------------------------------------------------------------------


class Load:
    """The gate between the crash test and its client threads: where the server is, and how
    many requests are in flight.

    A client calls :meth:`begin` before each request (it blocks while no server runs) and
    :meth:`end` after it; :meth:`halt` waits until no request is in flight.
    """

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.address: str | None = None
        self.generation = 0
        self.active = 0
        self.stopped = False

    def begin(self) -> tuple[int, str] | None:
        with self.cond:
            while self.address is None and not self.stopped:
                self.cond.wait()
            if self.stopped:
                return None
            assert self.address is not None
            self.active += 1
            return self.generation, self.address

    def end(self) -> None:
        with self.cond:
            self.active -= 1
            self.cond.notify_all()

    def go(self, address: str) -> None:
        with self.cond:
            self.generation += 1
            self.address = address
            self.cond.notify_all()

    def halt(self, timeout: float = 60.0) -> None:
        with self.cond:
            self.address = None
            if not self.cond.wait_for(lambda: self.active == 0, timeout):
                raise AssertionError(f"{self.active} requests still in flight after {timeout} s")

    def stop(self) -> None:
        with self.cond:
            self.stopped = True
            self.address = None
            self.cond.notify_all()


@dataclass
class CrashLedger:
    """Every 200 the clients received (origin -> size -> root), and the tallies."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    cosigned: dict[str, dict[int, bytes]] = field(default_factory=dict)
    floor: dict[str, int] = field(default_factory=dict)
    oks: Counter[int] = field(default_factory=Counter)  # by server generation
    statuses: Counter[int] = field(default_factory=Counter)
    connection_errors: int = 0
    failures: list[str] = field(default_factory=list)

    def fail(self, what: str) -> None:
        with self.lock:
            self.failures.append(what)

    def floor_of(self, origin: str) -> int:
        with self.lock:
            return self.floor.get(origin, 0)

    def cosign(self, origin: str, size: int, root: bytes, generation: int) -> None:
        with self.lock:
            known = self.cosigned.setdefault(origin, {})
            if known.setdefault(size, root) != root:
                self.failures.append(f"{origin}: two roots cosigned for size {size}")
            self.floor[origin] = max(self.floor.get(origin, 0), size)
            self.oks[generation] += 1

    def snapshot(self, origin: str) -> dict[int, bytes]:
        with self.lock:
            return dict(self.cosigned.get(origin, {}))


def crash_client(i: int, load: Load, logs: dict[str, ForkLog], ledger: CrashLedger) -> None:
    """Submit valid advancing checkpoints until the load stops (see the module docstring)."""
    rng = random.Random(1000 + i)
    session = requests.Session()
    known = dict.fromkeys(logs, 0)  # what this client believes the witness stored
    origins = sorted(logs)
    try:
        while (got := load.begin()) is not None:
            generation, address = got
            try:
                origin = rng.choice(origins)
                log = logs[origin]
                old = known[origin]
                size = min(old + rng.randint(0 if old else 1, 4), log.size)
                floor = ledger.floor_of(origin)
                body = log.request(old, size)
                try:
                    r = session.post(address + "/add-checkpoint", data=body, timeout=30)
                except requests.RequestException:
                    with ledger.lock:
                        ledger.connection_errors += 1
                    session.close()
                    session = requests.Session()
                    continue
                with ledger.lock:
                    ledger.statuses[r.status_code] += 1
                if r.status_code == 200:
                    check_cosignatures(r.content, log.text(size))
                    if old < floor:
                        ledger.fail(f"{origin}: 200 from old {old} after {floor} was cosigned")
                    ledger.cosign(origin, size, log.root(size), generation)
                    known[origin] = size
                elif r.status_code == 409:
                    n = parse_size_body(r.content, r.headers.get("Content-Type"))
                    if not floor <= n <= log.size:
                        ledger.fail(f"{origin}: 409 names {n} after {floor} was cosigned")
                    known[origin] = n
                else:
                    ledger.fail(f"{origin}: old {old} size {size}: {r.status_code} {r.content!r}")
            except Exception as e:
                ledger.fail(f"client {i}: {e!r}")
            finally:
                load.end()
    finally:
        session.close()


def check_after_kill(
    state: WitnessState,
    logs: dict[str, ForkLog],
    ledger: CrashLedger,
    previous: dict[str, Cosigned],
) -> dict[str, Cosigned]:
    """No cosignature was returned for a state that is not on disk; the state only moved
    forward. Returns the stored checkpoint of every log that has one."""
    now: dict[str, Cosigned] = {}
    for origin, log in logs.items():
        stored = state.latest(origin)
        cosigned = ledger.snapshot(origin)
        before = previous.get(origin)
        if stored is None:
            assert not cosigned and before is None, (origin, sorted(cosigned)[-3:])
            continue
        now[origin] = stored
        check_stored_note(stored, log)
        assert stored.root == log.root(stored.size), origin
        if before is not None:
            assert stored.size >= before.size, (origin, before.size, stored.size)
            if stored.size == before.size:
                assert stored.root == before.root
            else:
                proof = log.proof(before.size, stored.size)
                verify_consistency(before.size, stored.size, before.root, stored.root, proof)
        for size, root in cosigned.items():
            if before is not None and size < before.size:
                continue  # checked against an earlier stored state, consistent with this one
            assert size <= stored.size, (origin, size, stored.size)
            if size == stored.size:
                assert root == stored.root, (origin, size)
            else:
                proof = log.proof(size, stored.size)
                verify_consistency(size, stored.size, root, stored.root, proof)
    return now


def test_crash_sigkill_under_load_loses_no_cosigned_state(
    where: Where, tmp_path: Path, record_property: Callable[[str, object], None]
) -> None:
    """Item 3: CRASH_KILLS SIGKILLs under load, restarts on the same database (see the
    module docstring)."""
    logs = {}
    for k in range(CRASH_ORIGINS):
        log = ForkLog(f"crash.example/{where.name}/{k}").grow(CRASH_LOG_SIZE)
        logs[log.origin] = log
    where.configure(list(logs.values()))
    rng = random.Random(20240917)
    load = Load()
    ledger = CrashLedger()
    threads = [
        threading.Thread(target=crash_client, args=(i, load, logs, ledger), daemon=True)
        for i in range(CRASH_CLIENTS)
    ]
    for t in threads:
        t.start()
    started = time.monotonic()
    kills = in_flight = with_200 = unreported = late = 0
    stored: dict[str, Cosigned] = {}
    state = where.open()
    try:
        for cycle in range(CRASH_KILLS):
            server = where.server(tmp_path, "crash")
            try:
                # On PostgreSQL a COMMIT the killed server had sent may land after the kill:
                # check again now, then the restarted server serves exactly what is stored.
                now = check_after_kill(state, logs, ledger, stored)
                late += now != stored
                stored = now
                with requests.Session() as s:
                    for origin, c in stored.items():
                        r = s.get(server.address + monitoring_path("", origin), timeout=30)
                        assert (r.status_code, r.content) == (200, c.note), (cycle, origin)
                load.go(server.address)
                time.sleep(rng.uniform(0.01, 0.3))
                in_flight += load.active > 0
            finally:
                status = server.kill()
                load.halt()
            assert status == -signal.SIGKILL, (status, server.stderr())
            kills += 1
            with_200 += ledger.oks[load.generation] > 0
            assert not ledger.failures, ledger.failures[:5]
            stored = check_after_kill(state, logs, ledger, stored)
            # A commit whose 200 never reached the client: the kill fell between the two.
            unreported += any(c.size > ledger.floor_of(o) for o, c in stored.items())
    finally:
        load.stop()
        for t in threads:
            t.join(30)
        state.close()
    sizes = {o.rsplit("/", 1)[1]: c.size for o, c in sorted(stored.items())}
    summary = (
        f"crash {where.name}: {kills} SIGKILLs ({in_flight} with requests in flight,"
        f" {with_200} after a 200 from that server, {unreported} leaving a commit whose 200"
        f" never arrived, {late} with a commit that landed after the kill), statuses"
        f" {dict(sorted(ledger.statuses.items()))}, {ledger.connection_errors} connection"
        f" errors, stored sizes {sizes}, {time.monotonic() - started:.1f} s"
    )
    record_property("summary", summary)
    print(summary)
    assert not ledger.failures, ledger.failures[:5]
    assert kills >= 50, summary
    assert in_flight >= kills * 9 // 10, summary
    assert with_200 >= kills // 2, summary
    assert ledger.statuses[409] > 0, summary


# --- hostile input (item 5) -------------------------------------------------------------------

HOSTILE_MIN = 10_000
"""Hostile requests the test must send, at least (Hypothesis, mutation loop and raw HTTP)."""

HYPOTHESIS_EXAMPLES = 500
"""Examples of each of the three Hypothesis strategies."""

OVERSIZED_EVERY = 400
"""Every so many mutation-loop requests, one body is larger than the server's cap."""

TOKENS: tuple[bytes, ...] = (
    b"\n",
    b"\n\n",
    b"\r",
    b"\r\n",
    b"\x00",
    b"\xff",
    b"\xc0\x80",  # overlong NUL
    b"\xed\xa0\x80",  # a UTF-16 surrogate in UTF-8
    b"\xef\xbb\xbf",  # BOM
    b"\xe2\x80\x94 ",  # the signature line's em dash
    b"\xe2\x80\x94",
    b"- ",
    b" ",
    b"\t",
    b"+",
    b"-",
    b"0",
    b"=",
    b"==",
    b"A" * 44,
    b"old 0\n",
    b"subtree 0 1\n",
    b"9" * 30,
    b"18446744073709551616",
    b"9223372036854775808",
    "\u0663".encode(),  # ARABIC-INDIC DIGIT THREE
    b"1_0",
    b"%00",
)
"""Bytes a mutation inserts or substitutes: framing, control characters, invalid UTF-8,
near-miss numbers and signature-line prefixes."""

NUMBERS: tuple[bytes, ...] = (
    b"05",
    b"+5",
    b"-1",
    b"1_0",
    b" 5",
    b"5 ",
    "\u0665".encode(),
    b"0x10",
    b"1e3",
    b"9223372036854775807",
    b"9223372036854775808",
    b"18446744073709551616",
    b"9" * 400,
    b"",
    b"0",
)
"""What a mutation writes in place of a decimal number (old size, tree size, subtree bounds)."""

UNKNOWN_SIGNATURE = Signature("other.example/key", 0x0BADC0DE, bytes(range(64)))
"""A signature line from a key no log is configured with."""

REPEATS = (2, 63, 64, 65, 200, 5000)
"""How often a mutation repeats a line: around the 63-proof-line limit, and far beyond."""

OPS = (
    "flip",
    "set",
    "truncate",
    "insert",
    "delete",
    "duplicate",
    "line_replace",
    "line_repeat",
    "line_drop",
    "line_swap",
    "crlf",
    "number",
    "splice",
)

METHODS = ("GET", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD", "FOO", "post")
PATHS = (
    "/add-checkpoint/",
    "//add-checkpoint",
    "/ADD-CHECKPOINT",
    "/add-checkpoint%00",
    "/add-checkpoint/../add-checkpoint",
    "/sign-subtree/x",
    "/add_checkpoint",
    "/witness/add-checkpoint",
    "/",
    "/metrics",
    "/%ff%fe",
    "/" + "a" * 9000,
    "/" + "0" * 64 + "/checkpoint",
    "/" + "F" * 64 + "/checkpoint",
    "/" + "0" * 63 + "/checkpoint",
    "/hostile.example%2Fa/checkpoint",
    "/checkpoint",
)
"""Paths that are not an endpoint, or not this method's (the status and metrics pages are)."""


def mutate(body: bytes, op: str, a: int, b: int, token: bytes, other: bytes) -> bytes:
    """Apply one mutation to ``body``; ``a``/``b`` pick positions and counts (reduced modulo
    what fits), ``token`` is inserted or substituted, ``other`` is spliced in."""
    n = len(body)
    i = a % (n + 1)
    if op == "flip" and n:
        i = a % n
        return body[:i] + bytes([body[i] ^ (1 << (b % 8))]) + body[i + 1 :]
    if op == "set" and n:
        i = a % n
        return body[:i] + bytes([b % 256]) + body[i + 1 :]
    if op == "truncate":
        return body[:i]
    if op == "insert":
        return body[:i] + token + body[i:]
    if op == "delete":
        return body[:i] + body[i + 1 + b % 64 :]
    if op == "duplicate":
        return body[:i] + body[i : i + 1 + b % 64] + body[i:]
    if op == "splice":
        return body[:i] + other[b % (len(other) + 1) :]
    if op == "crlf":
        if b % 2:
            return body.replace(b"\n", b"\r\n")
        k = body.find(b"\n", i)
        return body if k < 0 else body[:k] + b"\r\n" + body[k + 1 :]
    if op == "number":
        runs = list(re.finditer(rb"[0-9]+", body))
        if not runs:
            return body + NUMBERS[b % len(NUMBERS)]
        run = runs[a % len(runs)]
        return body[: run.start()] + NUMBERS[b % len(NUMBERS)] + body[run.end() :]
    lines = body.split(b"\n")
    j = a % len(lines)
    if op == "line_replace":
        lines[j] = token
    elif op == "line_repeat":
        lines[j:j] = [lines[j]] * REPEATS[b % len(REPEATS)]
    elif op == "line_drop":
        del lines[j]
    elif op == "line_swap":
        k = b % len(lines)
        lines[j], lines[k] = lines[k], lines[j]
    return b"\n".join(lines)


class NoDelayConnection(http.client.HTTPConnection):
    """http.client sends the headers and the body in two writes: without TCP_NODELAY, Nagle's
    algorithm holds the body until the server's delayed ACK (about 40 ms a request)."""

    def connect(self) -> None:
        super().connect()
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


@dataclass(frozen=True)
class Template:
    """A well-formed, validly signed request built for the current state: unmutated, it
    succeeds (all but the one naming an unknown origin, which gets 404)."""

    path: str
    body: bytes


class Probe:
    """Sends hostile requests, one at a time on a keep-alive connection, and checks each
    answer and the state after it.

    The oracle: no answer is a 5xx (each is kept in ``server_errors``; the test fails at the
    end, listing them all); a connection closed without an answer only for a body
    larger than the server's cap; the stored checkpoint of a log changes only with a 200 from
    add-checkpoint for exactly that request's checkpoint, whose note then ends with the lines
    the 200 returned, and never moves backwards; a 200 from add-checkpoint stores its
    checkpoint. ``count`` counts the requests sent.
    """

    def __init__(
        self, address: str, state: WitnessState, logs: dict[str, ForkLog], subtree: ForkLog
    ) -> None:
        host, port = address.removeprefix("http://").rsplit(":", 1)
        self.host, self.port = host, int(port)
        self.conn = NoDelayConnection(self.host, self.port, timeout=30)
        self.state = state
        self.logs = logs
        self.subtree = subtree
        self.snapshot = self.read_state()
        self.count = 0
        self.statuses: Counter[int] = Counter()
        self.dropped = 0
        self.changes = 0
        self.server_errors: list[str] = []
        self.sources: Counter[str] = Counter()
        self._templates: list[Template] = []
        self._templates_for: dict[str, Cosigned] | None = None

    def read_state(self) -> dict[str, Cosigned]:
        return {c.origin: c for c in self.state.all_latest()}

    # --- templates ---------------------------------------------------------------------------

    def templates(self) -> list[Template]:
        """Valid requests for the current state (rebuilt when the state changed)."""
        if self._templates_for == self.snapshot:
            return self._templates
        out = []
        for origin, log in self.logs.items():
            stored = self.snapshot.get(origin)
            s = 0 if stored is None else stored.size
            for k in (1, 3):
                out.append(Template("/add-checkpoint", log.request(s, min(s + k, log.size))))
            if s:
                out.append(Template("/add-checkpoint", log.request(s, s)))
            ext = log.note(min(s + 2, log.size), ("hostile extension",))
            out.append(Template("/add-checkpoint", log.request(s, min(s + 2, log.size), note=ext)))
            # A line of a key the witness does not know is ignored: mutating it may keep the
            # request valid (then it gets its 200, and the oracle sees the state move).
            unknown = log.note(min(s + 1, log.size), extra=[UNKNOWN_SIGNATURE])
            out.append(
                Template("/add-checkpoint", log.request(s, min(s + 1, log.size), note=unknown))
            )
        # An unknown origin, validly signed.
        out.append(
            Template("/add-checkpoint", ForkLog("hostile.example/unknown").grow(4).request(0, 4))
        )
        ref = self.snapshot[self.subtree.origin]
        for start, end in ((8, 13), (0, 14), (12, 14), (4, 8), (13, 14)):
            out.append(
                Template(
                    "/sign-subtree", self.subtree.subtree_request(start, end, ref.size, ref.note)
                )
            )
        self._templates, self._templates_for = out, dict(self.snapshot)
        return out

    # --- sending and checking ----------------------------------------------------------------

    def send(
        self,
        method: str,
        path: str,
        body: bytes | None,
        *,
        source: str,
        chunked: bool = False,
    ) -> int | None:
        """One request and the oracle's checks; the status, or None if the server closed the
        connection without answering (allowed only for an oversized body). ``chunked`` sends
        the body with chunked transfer encoding, in three chunks."""
        self.count += 1
        self.sources[source] += 1
        status: int | None = None
        answer = b""
        for attempt in (1, 2):
            try:
                if chunked and body is not None:
                    third = len(body) // 3 + 1
                    chunks = [body[k : k + third] for k in range(0, len(body), third)]
                    self.conn.request(method, path, body=iter(chunks), encode_chunked=True)
                else:
                    self.conn.request(method, path, body=body)
                r = self.conn.getresponse()
                status, answer = r.status, r.read()
                if r.will_close:
                    self.conn.close()
                break
            except (http.client.HTTPException, OSError) as e:
                self.conn.close()
                # A kept-alive connection the server had closed: try once on a fresh one.
                if attempt == 2:
                    oversized = body is not None and len(body) > MAX_REQUEST_SIZE
                    assert oversized, (method, path, (body or b"")[:200], repr(e))
                    self.dropped += 1
        if status is not None:
            self.statuses[status] += 1
            if status >= 500:
                self.server_errors.append(
                    f"{method} {path} {(body or b'')[:160]!r} chunked={chunked}: {status}"
                )
        self.check(method, path, body, status, answer)
        return status

    def check(
        self, method: str, path: str, body: bytes | None, status: int | None, answer: bytes
    ) -> None:
        now = self.read_state()
        stored_by_request: str | None = None
        if status == 200 and method == "POST" and body is not None and body.startswith(b"old "):
            # Whatever the path, a 200 for an add-checkpoint body is a cosignature: it must
            # have stored exactly that checkpoint.
            text = AddCheckpointRequest.parse(body).checkpoint
            cp = Checkpoint.parse(parse_note(text)[0])
            c = now.get(cp.origin)
            assert c is not None and (c.size, c.root) == (cp.size, cp.root), (body[:300], c)
            assert c.note.endswith(answer), (c.note, answer)
            check_cosignatures(answer, parse_note(text)[0], mldsa=True)
            stored_by_request = cp.origin
        for origin in set(now) | set(self.snapshot):
            before, after = self.snapshot.get(origin), now.get(origin)
            if before == after:
                continue
            assert origin == stored_by_request, (origin, method, path, status, (body or b"")[:300])
            assert after is not None
            assert before is None or after.size >= before.size
            self.changes += 1
        self.snapshot = now

    def alive(self) -> None:
        """The server answers a valid request: it cosigns the next checkpoint of a log."""
        origin, log = next(iter(self.logs.items()))
        stored = self.snapshot.get(origin)
        s = 0 if stored is None else stored.size
        assert self.send("POST", "/add-checkpoint", log.request(s, s + 1), source="alive") == 200
        assert self.snapshot[origin].size == s + 1

    # --- raw HTTP ----------------------------------------------------------------------------

    def raw(
        self, data: bytes, *, shut: bool = False, wait: float = 2.0, valid: bytes = b""
    ) -> None:
        """Send raw bytes on a fresh connection and read the answers (:func:`read_responses`);
        none may be a 5xx. ``valid`` is the add-checkpoint body inside, if any: the state may
        then change as for a 200 of it."""
        self.count += 1
        self.sources["raw"] += 1
        with socket.create_connection((self.host, self.port), timeout=wait) as sock:
            try:
                sock.sendall(data)
                if shut:
                    sock.shutdown(socket.SHUT_WR)
            except ConnectionError:
                pass
            answers = read_responses(sock, wait)
        for code, answer in answers:
            self.statuses[code] += 1
            if code >= 500:
                self.server_errors.append(f"raw {data[:160]!r}: {code} {answer[:100]!r}")
        oks = [answer for code, answer in answers if code == 200]
        if oks and valid:
            self.check("POST", "/add-checkpoint", valid, 200, oks[0])
        else:
            self.check("POST", "/raw", data, None, b"")


def read_responses(sock: socket.socket, wait: float) -> list[tuple[int, bytes]]:
    """The HTTP/1.1 responses on ``sock`` as (status, body): read until EOF, or ``wait``
    seconds without a final response, or 50 ms of silence after one (a pipelined second
    answer comes at once). Bodies are framed by Content-Length (the witness always sends it)."""
    buf = b""
    out: list[tuple[int, bytes]] = []
    sock.settimeout(wait)
    while True:
        try:
            chunk = sock.recv(65536)
        except (TimeoutError, ConnectionError):
            break
        if not chunk:
            break
        buf += chunk
        while (head_end := buf.find(b"\r\n\r\n")) >= 0:
            head = buf[:head_end].decode("latin-1")
            m = re.match(r"HTTP/\d\.\d (\d{3})", head)
            assert m, buf[:300]
            length = re.search(r"(?im)^content-length: *(\d+)", head)
            size = int(length.group(1)) if length else 0
            if len(buf) < head_end + 4 + size:
                break
            code = int(m.group(1))
            out.append((code, buf[head_end + 4 : head_end + 4 + size]))
            buf = buf[head_end + 4 + size :]
            if code >= 200:
                sock.settimeout(0.05)
    return out


def hostile_raw_requests(probe: Probe, valid: bytes) -> None:
    """HTTP-level garbage on fresh connections: malformed request lines and headers, broken
    framing, bodies cut short, content encodings, pipelining."""
    n = len(valid)

    def post(headers: bytes, body: bytes) -> bytes:
        return b"POST /add-checkpoint HTTP/1.1\r\nHost: w\r\n" + headers + b"\r\n" + body

    probe.raw(b"GARBAGE\r\n\r\n")
    probe.raw(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(64))  # a TLS hello
    probe.raw(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
    probe.raw(b"GET /\r\n\r\n")
    probe.raw(b"POST /add-checkpoint HTTP/9.9\r\nContent-Length: 0\r\n\r\n")
    probe.raw(b"CONNECT /add-checkpoint HTTP/1.1\r\nHost: w\r\n\r\n")
    probe.raw(b"GET /\xff\xfe/checkpoint HTTP/1.1\r\nHost: w\r\n\r\n")
    probe.raw(b"GET /a b/checkpoint HTTP/1.1\r\nHost: w\r\n\r\n")
    probe.raw(b"GET /" + b"a" * 100_000 + b" HTTP/1.1\r\nHost: w\r\n\r\n")
    probe.raw(post(b"X-Big: " + b"b" * 100_000 + b"\r\n", b""))
    probe.raw(post(b"".join(b"X-%d: y\r\n" % i for i in range(2000)), b""))
    probe.raw(post(b"X-Nul: a\x00b\r\nContent-Length: 0\r\n", b""))
    probe.raw(post(b"NoColonHere\r\nContent-Length: 0\r\n", b""))
    probe.raw(post(b"Content-Length: -1\r\n", valid), valid=valid)
    probe.raw(post(b"Content-Length: abc\r\n", valid), valid=valid)
    probe.raw(post(b"Content-Length: +%d\r\n" % n, valid), valid=valid)
    probe.raw(
        post(b"Content-Length: %d\r\nContent-Length: %d\r\n" % (n, n - 1), valid), valid=valid
    )
    probe.raw(post(b"Content-Length: %d\r\nTransfer-Encoding: chunked\r\n" % n, valid), valid=valid)
    probe.raw(
        post(b"Transfer-Encoding: chunked\r\n", b"zz\r\n" + valid + b"\r\n0\r\n\r\n"), valid=valid
    )
    probe.raw(
        post(b"Transfer-Encoding: chunked\r\n", b"%x;ext=\x01\r\n" % n + valid + b"\r\n0\r\n\r\n"),
        valid=valid,
    )
    probe.raw(post(b"Transfer-Encoding: gzip, chunked\r\n", b"5\r\nhello\r\n0\r\n\r\n"))
    probe.raw(
        post(b"Transfer-Encoding: chunked\r\n", b"%x\r\n" % n + valid[: n // 2]),
        shut=True,
        valid=valid,
    )
    # A body cut short: the client half-closes, or goes silent past the read deadline.
    probe.raw(post(b"Content-Length: %d\r\n" % n, valid[: n // 2]), shut=True, valid=valid)
    probe.raw(post(b"Content-Length: %d\r\n" % n, valid[: n // 2]), wait=3.0, valid=valid)
    probe.raw(post(b"Content-Length: %d\r\n" % (n + 10), valid), wait=3.0, valid=valid)
    # A declared or streamed body beyond the cap.
    probe.raw(post(b"Content-Length: %d\r\n" % (MAX_REQUEST_SIZE + 1), b""))
    probe.raw(post(b"Content-Length: 99999999999999999999999\r\n", b""))
    chunk = b"A" * 65536
    streamed = b"".join(b"%x\r\n" % len(chunk) + chunk + b"\r\n" for _ in range(20)) + b"0\r\n\r\n"
    probe.raw(post(b"Transfer-Encoding: chunked\r\n", streamed))
    # Content encodings the server may decode: garbage, a bomb, and a valid body compressed.
    for enc in (b"gzip", b"deflate", b"br", b"zstd", b"x-unknown"):
        probe.raw(
            post(b"Content-Encoding: %s\r\nContent-Length: %d\r\n" % (enc, n), valid), valid=valid
        )
    bomb = gzip.compress(b"\n" * (4 * MAX_REQUEST_SIZE))
    probe.raw(post(b"Content-Encoding: gzip\r\nContent-Length: %d\r\n" % len(bomb), bomb))
    packed = gzip.compress(valid)
    probe.raw(
        post(b"Content-Encoding: gzip\r\nContent-Length: %d\r\n" % len(packed), packed), valid=valid
    )
    probe.raw(
        post(b"Expect: 100-continue\r\nContent-Length: %d\r\n" % n, valid[:-1] + b"X"), valid=valid
    )
    probe.raw(post(b"Expect: bogus\r\nContent-Length: %d\r\n" % n, valid[:-1] + b"X"), valid=valid)
    # Pipelined: a malformed request, then garbage.
    probe.raw(post(b"Content-Length: 5\r\n", b"old 0") + b"\x00\x01\x02 garbage\r\n\r\n")


numbers = st.one_of(
    st.integers(0, 1 << 70).map(lambda i: str(i).encode()),
    st.sampled_from(NUMBERS),
    st.from_regex(rb"\A[0-9+\- _\x00]{0,12}\Z"),
)
mutation_ops = st.tuples(
    st.sampled_from(OPS),
    st.integers(0, 1 << 20),
    st.integers(0, 1 << 20),
    st.one_of(st.sampled_from(TOKENS), st.binary(max_size=8)),
)
b64ish = st.one_of(
    st.binary(max_size=40).map(base64.b64encode),
    st.binary(max_size=60),
)


def hypothesis_phase(probe: Probe) -> None:
    """Three Hypothesis strategies, HYPOTHESIS_EXAMPLES examples each, derandomized: random
    bodies, requests rebuilt from generated parts, and mutated valid requests."""
    common = settings(
        max_examples=HYPOTHESIS_EXAMPLES,
        derandomize=True,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )

    @common
    @given(st.sampled_from(["/add-checkpoint", "/sign-subtree"]), st.binary(max_size=1000))
    def random_bodies(path: str, body: bytes) -> None:
        probe.send("POST", path, body, source="hypothesis-random")

    # Draws never depend on the templates (which change with the state): Hypothesis needs
    # the same choices to replay an example, so templates and lines are picked by index.
    pick = st.integers(0, 1 << 16)

    def choose(items: Sequence[bytes]) -> st.SearchStrategy[bytes]:
        return pick.map(lambda k: items[k % len(items)])

    @common
    @given(st.data())
    def rebuilt(data: st.DataObject) -> None:
        templates = probe.templates()
        tpl = templates[data.draw(pick) % len(templates)]
        head, _, note = tpl.body.partition(b"\n\n")
        text, _, sig_block = note.rpartition(b"\n\n")
        first, *proof = head.split(b"\n")
        origin, size, root_line = text.split(b"\n")[:3]
        sigs = sig_block.rstrip(b"\n").split(b"\n")
        first = data.draw(
            st.one_of(
                st.just(first),
                numbers.map(lambda n: first.split(b" ")[0] + b" " + n),
                st.builds(
                    lambda op: mutate(first, "number", op[1], op[2], op[3], b""), mutation_ops
                ),
            )
        )
        proof = data.draw(
            st.one_of(
                st.just(proof),
                st.lists(st.one_of(choose(proof or [b"A" * 44]), b64ish), max_size=70),
            )
        )
        sep = data.draw(st.sampled_from([b"\n\n", b"\n\n\n", b"\r\n\r\n", b"\n", b"\n \n"]))
        origin = data.draw(
            st.sampled_from([origin, b"", b"hostile.example/unknown", origin + b" ", b"\xff"])
        )
        size = data.draw(st.one_of(st.just(size), numbers))
        root_line = data.draw(st.one_of(st.just(root_line), b64ish))
        ext = data.draw(st.lists(st.binary(max_size=20), max_size=3))
        line = st.one_of(
            choose(sigs),
            st.binary(max_size=120).map(lambda b: b"\xe2\x80\x94 " + b),
            b64ish.map(lambda b: b"\xe2\x80\x94 " + origin + b" " + b),
        )
        sigs = data.draw(st.one_of(st.just(sigs), st.lists(line, max_size=5)))
        body = b"\n".join([first, *proof]) + sep + b"\n".join([origin, size, root_line, *ext])
        body += b"\n\n" + b"".join(s + b"\n" for s in sigs)
        probe.send("POST", tpl.path, body, source="hypothesis-rebuilt")

    @common
    @given(st.data())
    def mutated(data: st.DataObject) -> None:
        templates = probe.templates()
        tpl = templates[data.draw(pick) % len(templates)]
        other = templates[data.draw(pick) % len(templates)].body
        body = tpl.body
        for op, a, b, token in data.draw(st.lists(mutation_ops, min_size=1, max_size=4)):
            body = mutate(body, op, a, b, token, other)
        probe.send("POST", tpl.path, body, source="hypothesis-mutated")

    random_bodies()
    rebuilt()
    mutated()


def mutation_loop(probe: Probe, until: int) -> None:
    """Deterministic mutations of valid requests until ``probe.count`` reaches ``until``; now
    and then the valid request itself, a wrong method, a wrong path, or an oversized body."""
    rng = random.Random(20241105)
    i = 0
    while probe.count < until:
        i += 1
        templates = probe.templates()
        tpl = rng.choice(templates)
        if i % 50 == 0:
            probe.send("POST", tpl.path, tpl.body, source="valid")
            continue
        body = tpl.body
        for _ in range(rng.choice((1, 1, 1, 2, 3))):
            token = rng.choice(TOKENS) if rng.random() < 0.7 else rng.randbytes(rng.randint(0, 8))
            op = rng.choice(OPS)
            a, b = rng.getrandbits(20), rng.getrandbits(20)
            body = mutate(body, op, a, b, token, rng.choice(templates).body)
        if i % OVERSIZED_EVERY == 0:
            body = tpl.body + b"A" * (MAX_REQUEST_SIZE + rng.randint(1, 1000) - len(tpl.body))
            probe.send("POST", tpl.path, body, source="oversized")
        elif i % 41 == 0:
            method = rng.choice(METHODS)
            probe.send(
                method, tpl.path, None if method in ("GET", "HEAD") else body, source="method"
            )
        elif i % 37 == 0:
            path = rng.choice(PATHS)
            probe.send(rng.choice(("GET", "POST")), path, body, source="path")
        elif i % 29 == 0:
            probe.send("POST", tpl.path, body, source="chunked", chunked=True)
        else:
            probe.send("POST", tpl.path, body, source="mutated")


def test_hostile_input_never_5xx_never_changes_state(
    tmp_path: Path, record_property: Callable[[str, object], None]
) -> None:
    """Item 5: at least HOSTILE_MIN hostile requests against a real server process on SQLite
    (with an ML-DSA-44 key, so sign-subtree is served): Hypothesis-generated and mutated bodies
    (byte flips, truncations, insertions, deletions, spliced requests, repeated lines up to
    5000 proof lines, huge and non-canonical numbers, CRLF, NUL, invalid UTF-8, oversized
    bodies, chunked bodies), wrong methods, garbage paths, sign-subtree bodies, and raw HTTP
    garbage. No answer is a 5xx (nor any line of the server's log), the stored checkpoints
    change only by a 200 for exactly the request's checkpoint (:class:`Probe`), the server
    process stays up and still cosigns a valid request at the end."""
    where = Where("sqlite", db=str(tmp_path / "witness.db"))
    logs = {o: ForkLog(o).grow(4096) for o in ("hostile.example/a", "hostile.example/b")}
    subtree = ForkLog("hostile.example/subtree").grow(14)
    where.configure([*logs.values(), subtree])
    log_path = tmp_path / "hostile.log"
    started = time.monotonic()
    state = where.open()
    server = where.server(tmp_path, "hostile", log_path=log_path, mldsa=True, read_timeout=1.0)
    try:
        with requests.Session() as s:
            first = logs["hostile.example/a"].request(0, 5)
            assert s.post(server.address + "/add-checkpoint", data=first).status_code == 200
            r = s.post(server.address + "/add-checkpoint", data=subtree.request(0, 14))
            assert r.status_code == 200
        probe = Probe(server.address, state, logs, subtree)
        hostile_raw_requests(probe, probe.templates()[0].body)
        after_raw = time.monotonic()
        hypothesis_phase(probe)
        after_hypothesis = time.monotonic()
        mutation_loop(probe, HOSTILE_MIN + 100)
        probe.alive()
        assert server.alive(), server.stderr()
    finally:
        server.kill()
        state.close()
    _, errors = lost_races(log_path)
    summary = (
        f"hostile: {probe.count} requests (by source {dict(sorted(probe.sources.items()))}),"
        f" statuses {dict(sorted(probe.statuses.items()))}, {probe.dropped} oversized bodies"
        f" cut off without an answer, {probe.changes} state changes (each by a 200),"
        f" {errors} 5xx in the server log; raw {after_raw - started:.1f} s, Hypothesis"
        f" {after_hypothesis - after_raw:.1f} s, total {time.monotonic() - started:.1f} s"
    )
    record_property("summary", summary)
    print(summary)
    assert probe.count >= HOSTILE_MIN, summary
    assert not probe.server_errors, "\n".join([summary, *probe.server_errors[:20]])
    assert errors == 0, summary


# --- the server bugs the hostile test found, one by one -------------------------------------


def hostile_server(tmp_path: Path) -> tuple[Where, WitnessProcess, ForkLog, Path]:
    """A witness process on a fresh SQLite state following one log (cosigned at size 5)."""
    where = Where("sqlite", db=str(tmp_path / "witness.db"))
    log = ForkLog("hostile.example/one").grow(16)
    where.configure([log])
    log_path = tmp_path / "server.log"
    server = where.server(tmp_path, "server", log_path=log_path, read_timeout=1.0)
    try:
        r = requests.post(server.address + "/add-checkpoint", data=log.request(0, 5), timeout=30)
        assert r.status_code == 200
    except BaseException:
        server.kill()
        raise
    return where, server, log, log_path


def raw_exchange(address: str, data: bytes, *, shut: bool) -> list[tuple[int, bytes]]:
    host, port = address.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(data)
        if shut:
            sock.shutdown(socket.SHUT_WR)
        return read_responses(sock, 5.0)


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_hostile_undecodable_content_encoding_is_a_client_error(
    encoding: str, tmp_path: Path
) -> None:
    """A body declared ``Content-Encoding: gzip`` (or deflate) that does not decode is the
    client's mistake: a 4xx, never the generic 500. (aiohttp decodes request bodies itself and
    raises RequestPayloadError from ``request.content.readany()``; witness/server.py's
    read_body does not catch it, so the middleware answers 500.)"""
    _, server, log, log_path = hostile_server(tmp_path)
    with server:
        body = log.request(5, 6)
        head = f"Content-Encoding: {encoding}\r\nContent-Length: {len(body)}\r\n"
        data = b"POST /add-checkpoint HTTP/1.1\r\nHost: w\r\n" + head.encode() + b"\r\n" + body
        answers = raw_exchange(server.address, data, shut=False)
        assert server.alive()
    assert len(answers) == 1 and 400 <= answers[0][0] < 500, answers
    assert lost_races(log_path)[1] == 0, log_path.read_text()


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
def test_hostile_body_cut_short_is_not_a_server_error(framing: str, tmp_path: Path) -> None:
    """A client that half-closes its connection in the middle of the body has made a client
    mistake (or gone away): the server may answer 400 or nothing, but it must not count or log
    an internal error. (readany() raises ConnectionResetError("Connection lost"); read_body
    does not catch it, and the middleware logs a traceback and a 500 — in the request log and
    in /metrics — for what any client can trigger.)"""
    _, server, log, log_path = hostile_server(tmp_path)
    with server:
        body = log.request(5, 6)
        if framing == "chunked":
            head = b"Transfer-Encoding: chunked\r\n"
            cut = b"%x\r\n" % len(body) + body[: len(body) // 2]
        else:
            head = b"Content-Length: %d\r\n" % len(body)
            cut = body[: len(body) // 2]
        data = b"POST /add-checkpoint HTTP/1.1\r\nHost: w\r\n" + head + b"\r\n" + cut
        answers = raw_exchange(server.address, data, shut=True)
        assert all(code < 500 for code, _ in answers), answers
        # The server still answers, and has logged the cut request by now.
        r = requests.post(server.address + "/add-checkpoint", data=body, timeout=30)
        assert r.status_code == 200
        assert server.alive()
    lines = [json.loads(x) for x in log_path.read_text().splitlines() if x.startswith("{")]
    statuses = [x.get("status") for x in lines if x.get("endpoint") == "add-checkpoint"]
    assert 500 not in statuses, log_path.read_text()
