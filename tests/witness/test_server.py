"""The witness HTTP server (witness/server.py) end to end, over real HTTP on 127.0.0.1.

Every test starts the aiohttp application on an ephemeral port (aiohttp's TestServer) over an
in-memory :class:`MemoryState` — thread-safe, with an honest compare-and-swap — and talks
to it with aiohttp's client (or a raw socket where the exact bytes of a header matter).

Covered: each status code and spec rule of tlog-witness add-checkpoint
(https://c2sp.org/tlog-witness; edge cases 10-16, 19, 29-31 of tests/tlog/__init__.py), the
torchwood litewitness conversation and the real sum.golang.org checkpoint (testdata/torchwood), the
monitoring endpoint, sign-subtree with the draft-03 subtree consistency proof (every
transparency-dev/merkle subtreeconsistency vector, testdata/transparency-dev-merkle), limits (413,
408, 429), the status page, /metrics, the JSON request log, the compare-and-swap under concurrency:
two conflicting forks raced through two server instances sharing one state, 100 times; the group
commit (batches, a refused swap, a failed batch), the per-process caches (configuration, stale
stored state across two instances on one SQLite file or PostgreSQL schema) and the replay fast
path.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import html
import json
import logging
import random
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import load_ssh_private_key
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from multidict import CIMultiDictProxy
from yarl import URL

from tests.vectors import TESTDATA
from tlog.checkpoint import Checkpoint
from tlog.cosignature import (
    CosignatureV1Signer,
    CosignatureV1Verifier,
    Subtree,
    SubtreeV1Signer,
    SubtreeV1Verifier,
    timestamp_of,
)
from tlog.encoding import b64encode
from tlog.errors import MalformedError, ProofError, UsageError
from tlog.keys import format_vkey
from tlog.merkle import (
    EMPTY_ROOT,
    MemoryHashStore,
    consistency_proof,
    inclusion_proof,
    is_valid_subtree,
    root,
    verify_subtree_consistency,
)
from tlog.note import Ed25519Signer, Ed25519Verifier, Signature, format_note, parse_note, sign_note
from tlog.witnessproto import (
    MAX_REQUEST_SIZE,
    SIZE_CONTENT_TYPE,
    AddCheckpointRequest,
    SignSubtreeRequest,
    monitoring_path,
    origin_hash,
    parse_cosignature_response,
    parse_size_body,
)
from witness.errors import GENERIC_500_BODY, QuotaExceededError, UnknownLogError, reply_for
from witness.open import open_state
from witness.server import make_app
from witness.sqlstate import BackendError
from witness.state import Cosigned, Evidence, LogConfig, WitnessState

SUBTREE_VECTORS = TESTDATA / "transparency-dev-merkle" / "testdata" / "subtreeconsistency"

WITNESS = "witness.example/w1"
ED_SEED = hashlib.sha256(b"test witness ed25519").digest()
ML_SEED = hashlib.sha256(b"test witness ml-dsa-44").digest()
T0 = 1_780_000_000  # a fixed "now" for the fake clock (2026-05-28)
ORIGIN = "example.com/log"

Client = TestClient[web.Request, web.Application]


# --- states: in memory, SQLite, and a recording wrapper ------------------------------------


class MemoryState(WitnessState):
    """The storage contract in memory: thread-safe, with an honest compare-and-swap."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._logs: dict[str, LogConfig] = {}
        self._latest: dict[str, Cosigned] = {}
        self._evidence: list[Evidence] = []
        self._proves: set[tuple[str, bytes]] = set()
        self._counts: dict[tuple[str, int], int] = {}

    def add_log(
        self, origin: str, keys: tuple[str, ...], qpd: int | None = None, tiles: str | None = None
    ) -> None:
        with self._lock:
            if origin in self._logs:
                raise UsageError(f"log {origin} exists")
            self._logs[origin] = LogConfig(origin, tuple(keys), qpd, tiles=tiles)

    def add_key(self, origin: str, vkey: str) -> None:
        with self._lock:
            c = self._logs[origin]
            if vkey not in c.keys:
                self._logs[origin] = LogConfig(origin, (*c.keys, vkey), c.qpd, c.disabled)

    def set_disabled(self, origin: str, disabled: bool) -> None:
        with self._lock:
            c = self._logs[origin]
            self._logs[origin] = LogConfig(origin, c.keys, c.qpd, disabled)

    def set_qpd(self, origin: str, qpd: int | None) -> None:
        with self._lock:
            c = self._logs[origin]
            self._logs[origin] = LogConfig(origin, c.keys, qpd, c.disabled)

    def log(self, origin: str) -> LogConfig | None:
        with self._lock:
            return self._logs.get(origin)

    def logs(self) -> list[LogConfig]:
        with self._lock:
            return [self._logs[o] for o in sorted(self._logs)]

    def latest(self, origin: str) -> Cosigned | None:
        with self._lock:
            return self._latest.get(origin)

    def compare_and_swap(self, expected: Cosigned | None, new: Cosigned) -> bool:
        with self._lock:
            current = self._latest.get(new.origin)
            if expected is None:
                ok = current is None
            else:
                if new.size < expected.size:
                    raise UsageError("the state only moves forward")
                ok = current is not None and (current.size, current.root) == (
                    expected.size,
                    expected.root,
                )
            if ok:
                self._latest[new.origin] = new
            return ok

    def all_latest(self) -> list[Cosigned]:
        with self._lock:
            return [self._latest[o] for o in sorted(self._latest)]

    def add_evidence(
        self,
        origin: str,
        reason: str,
        request: bytes,
        stored_note: bytes | None,
        at: int,
        *,
        proves: bytes | None = None,
    ) -> int | None:
        with self._lock:
            if proves is not None and (origin, proves) in self._proves:
                return None
            if proves is not None:
                self._proves.add((origin, proves))
            e = Evidence(len(self._evidence) + 1, origin, reason, request, stored_note, at)
            self._evidence.append(e)
            return e.id

    def evidence(self, origin: str | None = None, limit: int = 100) -> list[Evidence]:
        with self._lock:
            found = [e for e in reversed(self._evidence) if origin is None or e.origin == origin]
            return found[:limit]

    def count_request(self, origin: str, day: int) -> int:
        with self._lock:
            n = self._counts.get((origin, day), 0) + 1
            self._counts[(origin, day)] = n
            return n

    def export_state(self) -> bytes:
        raise NotImplementedError("not used by the server")

    def import_state(self, data: bytes) -> None:
        raise NotImplementedError("not used by the server")

    def close(self) -> None:
        pass


@dataclass
class Stats:
    """Shared by the recorders of one test: commits in order, lost swaps, one commit lock."""

    history: list[tuple[str, int]] = field(default_factory=list)
    cas_failures: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


class Recorder(WitnessState):
    """A WitnessState that delegates to a real one and records what the server did.

    ``stats.history`` lists every committed (origin, size) in commit order: the inner
    compare-and-swap and the append run under ``stats.lock``, shared by the recorders of one
    test, so the order is the commit order even across two handles of one SQLite file (the
    read-check-write race the server must survive stays unserialised). ``before_cas`` runs
    first in ``compare_and_swap`` and for every pair of ``compare_and_swap_many`` (tests stall
    or synchronise requests there); ``delay`` sleeps in ``latest`` and in each swap call to
    widen race windows. ``compare_and_swap_many`` (the server's group commit) is forwarded to
    the inner state's own, so a SQL state runs its one-transaction batch; ``batches`` lists
    the origins of each such call, in call order, and ``before_many`` runs first in it;
    ``reads`` counts ``latest`` calls.
    """

    def __init__(self, inner: WitnessState, stats: Stats | None = None, delay: float = 0) -> None:
        self.inner = inner
        self.stats = stats or Stats()
        self.delay = delay
        self.before_cas: Callable[[Cosigned | None, Cosigned], None] | None = None
        self.before_many: Callable[[Sequence[tuple[Cosigned | None, Cosigned]]], None] | None = None
        self.batches: list[list[str]] = []
        self.reads = 0

    @property
    def history(self) -> list[tuple[str, int]]:
        return self.stats.history

    def add_log(
        self, origin: str, keys: tuple[str, ...], qpd: int | None = None, tiles: str | None = None
    ) -> None:
        self.inner.add_log(origin, keys, qpd, tiles)

    def add_key(self, origin: str, vkey: str) -> None:
        self.inner.add_key(origin, vkey)

    def set_disabled(self, origin: str, disabled: bool) -> None:
        self.inner.set_disabled(origin, disabled)

    def set_qpd(self, origin: str, qpd: int | None) -> None:
        self.inner.set_qpd(origin, qpd)

    def log(self, origin: str) -> LogConfig | None:
        return self.inner.log(origin)

    def logs(self) -> list[LogConfig]:
        return self.inner.logs()

    def latest(self, origin: str) -> Cosigned | None:
        if self.delay:
            time.sleep(self.delay)
        with self.stats.lock:
            self.reads += 1
        return self.inner.latest(origin)

    def compare_and_swap(self, expected: Cosigned | None, new: Cosigned) -> bool:
        if self.before_cas is not None:
            self.before_cas(expected, new)
        if self.delay:
            time.sleep(self.delay)
        with self.stats.lock:
            ok = self.inner.compare_and_swap(expected, new)
            if ok:
                self.stats.history.append((new.origin, new.size))
            else:
                self.stats.cas_failures += 1
        return ok

    def compare_and_swap_many(
        self, swaps: Sequence[tuple[Cosigned | None, Cosigned]]
    ) -> list[bool]:
        with self.stats.lock:
            self.batches.append([new.origin for _, new in swaps])
        if self.before_many is not None:
            self.before_many(swaps)
        if self.before_cas is not None:
            for expected, new in swaps:
                self.before_cas(expected, new)
        if self.delay:
            time.sleep(self.delay)
        with self.stats.lock:
            oks = self.inner.compare_and_swap_many(swaps)
            for (_, new), ok in zip(swaps, oks, strict=True):
                if ok:
                    self.stats.history.append((new.origin, new.size))
                else:
                    self.stats.cas_failures += 1
        return oks

    def all_latest(self) -> list[Cosigned]:
        return self.inner.all_latest()

    def add_evidence(self, *args: Any, **kwargs: Any) -> int | None:
        # Passed through as given: the wrapper records nothing about evidence.
        return self.inner.add_evidence(*args, **kwargs)

    def evidence(self, origin: str | None = None, limit: int = 100) -> list[Evidence]:
        return self.inner.evidence(origin, limit)

    def count_request(self, origin: str, day: int) -> int:
        return self.inner.count_request(origin, day)

    def export_state(self) -> bytes:
        return self.inner.export_state()

    def import_state(self, data: bytes) -> None:
        self.inner.import_state(data)

    def close(self) -> None:
        self.inner.close()


class Backend:
    """Where a test's state lives. ``open()`` gives a handle: for memory always the same
    object; for SQLite (and PostgreSQL, given ``postgres``, a libpq string) a new connection
    to the same database (as another process would)."""

    def __init__(
        self, kind: str, directory: Path | None = None, postgres: str | None = None
    ) -> None:
        self.kind = kind
        self.directory = directory
        self.postgres = postgres
        self.memory = MemoryState()
        self.handles: list[WitnessState] = []

    def open(self) -> WitnessState:
        if self.kind == "memory":
            return self.memory
        if self.kind == "postgres":
            assert self.postgres is not None
            handle = open_state(postgres=self.postgres)
            self.handles.append(handle)
            return handle
        assert self.directory is not None
        handle = open_state(db=str(self.directory / "witness.db"))
        self.handles.append(handle)
        return handle

    def close(self) -> None:
        for h in self.handles:
            h.close()


@pytest.fixture(params=["memory", "sqlite"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """The in-memory state and the SQLite state (witness.open.open_state) on tmp_path."""
    b = Backend(request.param, tmp_path)
    yield b
    b.close()


# --- logs, clocks, servers -------------------------------------------------------------------


class FakeClock:
    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def leaf(fork: str, i: int) -> bytes:
    return hashlib.sha256(f"{fork}/{i}".encode()).digest()


class Log:
    """A test log: an Ed25519 key (type 0x01) and a Merkle tree of synthetic leaf hashes."""

    def __init__(
        self,
        origin: str = ORIGIN,
        *,
        key_name: str | None = None,
        seed: bytes = b"log key",
        leaves: Sequence[bytes] = (),
    ) -> None:
        self.origin = origin
        self.signer = Ed25519Signer(key_name or origin, hashlib.sha256(seed).digest())
        self.vkey = format_vkey(self.signer.verifier())
        self.leaves = list(leaves)
        self.tree = MemoryHashStore()
        self.tree.extend(self.leaves)

    def grow(self, n: int, fork: str = "main") -> Log:
        new = [leaf(fork, self.tree.size + i) for i in range(n)]
        self.leaves += new
        self.tree.extend(new)
        return self

    def text(self, size: int, extensions: tuple[str, ...] = ()) -> bytes:
        return Checkpoint(self.origin, size, self.tree.root(size), extensions).format()

    def note(self, size: int, extensions: tuple[str, ...] = ()) -> bytes:
        return sign_note(self.text(size, extensions), [self.signer])

    def proof(self, old: int, size: int) -> list[bytes]:
        return [] if old == 0 else consistency_proof(old, size, self.tree)

    def request(
        self, old: int, size: int, proof: Sequence[bytes] | None = None, note: bytes | None = None
    ) -> bytes:
        return AddCheckpointRequest(
            old,
            tuple(self.proof(old, size) if proof is None else proof),
            self.note(size) if note is None else note,
        ).format()


@dataclass
class Resp:
    status: int
    body: bytes
    headers: CIMultiDictProxy[str]


@contextlib.asynccontextmanager
async def serve(app: web.Application) -> AsyncIterator[Client]:
    client: Client = TestClient(TestServer(app, host="127.0.0.1"))
    await client.start_server()
    try:
        yield client
    finally:
        await client.close()


async def fetch(client: Client, method: str, path: str | URL, body: Any = None) -> Resp:
    async with client.request(method, path, data=body) as r:
        return Resp(r.status, await r.read(), r.headers)


@dataclass
class Env:
    """One running witness: its (recorded) state, clock, keys and an HTTP client."""

    state: Recorder
    clock: FakeClock
    ed: CosignatureV1Signer
    ml: SubtreeV1Signer | None
    client: Client

    @property
    def signers(self) -> list[CosignatureV1Signer | SubtreeV1Signer]:
        return [self.ed] if self.ml is None else [self.ed, self.ml]

    async def post(self, body: bytes, path: str = "/add-checkpoint") -> Resp:
        return await fetch(self.client, "POST", path, body)

    async def get(self, path: str | URL) -> Resp:
        return await fetch(self.client, "GET", path)

    def add(self, log: Log, qpd: int | None = None) -> Log:
        self.state.add_log(log.origin, (log.vkey,), qpd)
        return log


def witness_signers(mldsa: bool) -> list[CosignatureV1Signer | SubtreeV1Signer]:
    ed = CosignatureV1Signer(WITNESS, ED_SEED)
    return [ed, SubtreeV1Signer(WITNESS, ML_SEED)] if mldsa else [ed]


def run(
    test: Callable[[Env], Awaitable[None]],
    *,
    mldsa: bool = False,
    backend: Backend | None = None,
    inner: WitnessState | None = None,
    **app_kw: Any,
) -> None:
    """Run ``test`` against a fresh witness server over ``backend`` (default: memory) or
    over the given ``inner`` state."""

    async def main() -> None:
        state = Recorder(inner or (backend or Backend("memory")).open())
        clock = FakeClock()
        signers = witness_signers(mldsa)
        app = make_app(state, signers, name=WITNESS, clock=clock, **app_kw)
        async with serve(app) as client:
            ml = signers[1] if mldsa else None
            assert ml is None or isinstance(ml, SubtreeV1Signer)
            ed = signers[0]
            assert isinstance(ed, CosignatureV1Signer)
            await test(Env(state, clock, ed, ml, client))

    asyncio.run(main())


def check_cosignatures(env: Env, body: bytes, text: bytes) -> list[Signature]:
    """A 200 body: exactly one line per witness key, each a valid cosignature of ``text``
    with a non-zero timestamp (tlog-witness, edge case 10)."""
    sigs = parse_cosignature_response(body)
    assert sorted((s.name, s.key_id) for s in sigs) == sorted(
        (s.name, s.key_id) for s in env.signers
    )
    for sig in sigs:
        if sig.key_id == env.ed.key_id:
            assert CosignatureV1Verifier(WITNESS, env.ed.public_key).verify(text, sig.sig)
        else:
            assert env.ml is not None
            assert SubtreeV1Verifier(WITNESS, env.ml.public_key).verify(text, sig.sig)
        assert timestamp_of(sig) > 0
    return sigs


# --- add-checkpoint: the happy path ----------------------------------------------------------


def test_add_checkpoint_first_then_update(backend: Backend) -> None:
    async def t(env: Env) -> None:
        log = env.add(Log().grow(8))
        r = await env.post(log.request(0, 5))
        assert r.status == 200, r.body
        assert r.headers["Content-Type"] == "text/plain; charset=utf-8"
        sigs = check_cosignatures(env, r.body, log.text(5))
        assert {timestamp_of(s) for s in sigs} == {T0}
        env.clock.now += 10
        r = await env.post(log.request(5, 8))
        assert r.status == 200, r.body
        sigs = check_cosignatures(env, r.body, log.text(8))
        assert {timestamp_of(s) for s in sigs} == {T0 + 10}
        stored = env.state.latest(ORIGIN)
        assert stored is not None
        assert (stored.size, stored.root, stored.updated_at) == (8, log.tree.root(8), T0 + 10)
        assert env.state.history == [(ORIGIN, 5), (ORIGIN, 8)]

    run(t, mldsa=True, backend=backend)


def test_response_carries_only_witness_cosignatures_and_stored_note_only_verified_lines(
    backend: Backend,
) -> None:
    """The 200 body is this witness's lines only; the stored (monitoring) note is the text,
    the log's verified lines and the cosignatures — a forged line bearing the witness's own
    name and key ID (unknown to the log's keys, so unverified) never reaches it."""

    async def t(env: Env) -> None:
        log = env.add(Log().grow(3))
        forged = Signature(WITNESS, env.ed.key_id, b"\x00" * 72)
        other = Signature("other.example/w", 0x01020304, b"\x01" * 72)
        text, sigs = parse_note(log.note(3))
        note = text + b"\n" + b"".join(s.line() for s in [*sigs, forged, other])
        r = await env.post(log.request(0, 3, note=note))
        assert r.status == 200, r.body
        cosigs = check_cosignatures(env, r.body, text)
        served = await env.get(monitoring_path("", ORIGIN))
        assert served.status == 200
        assert served.body == text + b"\n" + b"".join(s.line() for s in [*sigs, *cosigs])
        assert forged.line() not in served.body

    run(t, backend=backend)


def test_add_checkpoint_with_prefixes() -> None:
    async def t(env: Env) -> None:
        log = env.add(Log().grow(2))
        assert (await env.post(log.request(0, 2))).status == 404
        r = await env.post(log.request(0, 2), "/w/add-checkpoint")
        assert r.status == 200, r.body
        assert (await env.get(monitoring_path("/m", ORIGIN))).status == 200
        assert (await env.get(monitoring_path("", ORIGIN))).status == 404
        assert (await env.get(monitoring_path("/w", ORIGIN))).status == 404

    run(t, submission_prefix="/w", monitoring_prefix="/m")


def test_make_app_preconditions() -> None:
    st_ = MemoryState()
    ed = CosignatureV1Signer(WITNESS, ED_SEED)
    with pytest.raises(UsageError):
        make_app(st_, [], name=WITNESS)
    with pytest.raises(UsageError):
        make_app(st_, [CosignatureV1Signer("other.example", ED_SEED)], name=WITNESS)
    with pytest.raises(UsageError):
        make_app(st_, [ed, CosignatureV1Signer(WITNESS, ED_SEED)], name=WITNESS)
    with pytest.raises(UsageError):
        make_app(st_, [Ed25519Signer(WITNESS, ED_SEED)], name=WITNESS)  # type: ignore[list-item]
    for prefix in ("w", "/w/", "//w"):
        with pytest.raises(UsageError):
            make_app(st_, [ed], name=WITNESS, submission_prefix=prefix)
        with pytest.raises(UsageError):
            make_app(st_, [ed], name=WITNESS, monitoring_prefix=prefix)
    with pytest.raises(UsageError):
        make_app(st_, [ed], name=WITNESS, max_body=0)
    with pytest.raises(MalformedError):
        make_app(st_, [ed], name="bad name")
    make_app(st_, [ed], name=WITNESS, submission_prefix="/a/b", monitoring_prefix="/a/b")


# --- edge case 11: one request per status row, status and body ------------------------------


def test_edge_11_unknown_origin_404(backend: Backend) -> None:
    async def t(env: Env) -> None:
        env.add(Log().grow(2))
        stranger = Log("example.com/stranger").grow(2)
        r = await env.post(stranger.request(0, 2))
        assert (r.status, r.body) == (404, b"unknown log 'example.com/stranger'\n")

    run(t, backend=backend)


def test_edge_11_bad_or_absent_trusted_signature_403(backend: Backend) -> None:
    async def t(env: Env) -> None:
        log = env.add(Log().grow(2))
        # A line of the trusted (name, key ID) whose signature does not verify.
        text, [sig] = parse_note(log.note(2))
        bad = Signature(sig.name, sig.key_id, bytes([sig.sig[0] ^ 1]) + sig.sig[1:])
        r = await env.post(log.request(0, 2, note=text + b"\n" + bad.line()))
        assert r.status == 403
        assert r.body.startswith(b"invalid signature for key example.com/log+")
        # Only lines from keys the witness does not trust for this origin.
        impostor = Log(seed=b"another key").grow(2)
        r = await env.post(impostor.request(0, 2))
        assert (r.status, r.body) == (403, b"note has no verifiable signatures\n")
        # The trusted key's name with another key ID is an unknown line too (edge case 7).
        renamed = Signature(sig.name, sig.key_id ^ 1, sig.sig)
        r = await env.post(log.request(0, 2, note=text + b"\n" + renamed.line()))
        assert r.status == 403
        assert env.state.latest(ORIGIN) is None

    run(t, backend=backend)


def test_edge_11_old_greater_than_size_400(backend: Backend) -> None:
    async def t(env: Env) -> None:
        log = env.add(Log().grow(5))
        r = await env.post(log.request(6, 5, proof=[]))
        assert (r.status, r.body) == (400, b"old size 6 is larger than the checkpoint size 5\n")

    run(t, backend=backend)


def test_edge_11_old_not_stored_size_409(backend: Backend) -> None:
    async def t(env: Env) -> None:
        log = env.add(Log().grow(9))
        assert (await env.post(log.request(0, 4))).status == 200
        r = await env.post(log.request(2, 9))
        assert (r.status, r.body) == (409, b"4\n")
        assert r.headers["Content-Type"] == SIZE_CONTENT_TYPE
        assert parse_size_body(r.body, r.headers["Content-Type"]) == 4
        assert env.state.evidence() == []  # a 409 is resynchronisation, not evidence

    run(t, backend=backend)


def test_edge_11_size_zero_non_empty_root_422(backend: Backend) -> None:
    async def t(env: Env) -> None:
        log = env.add(Log())
        text = f"{ORIGIN}\n0\n{b64encode(leaf('x', 0))}\n".encode()
        r = await env.post(log.request(0, 0, note=sign_note(text, [log.signer])))
        assert r.status == 422
        assert b"empty-tree root" in r.body

    run(t, backend=backend)


def test_edge_11_old_zero_with_proof_422(backend: Backend) -> None:
    async def t(env: Env) -> None:
        log = env.add(Log().grow(5))
        r = await env.post(log.request(0, 5, proof=[leaf("x", 1)]))
        assert (r.status, r.body) == (422, b"an update from size 0 takes no proof, got 1 hashes\n")
        assert env.state.latest(ORIGIN) is None

    run(t, backend=backend)


def test_edge_11_same_size_different_root_422_and_evidence(backend: Backend) -> None:
    async def t(env: Env) -> None:
        log = env.add(Log().grow(5))
        assert (await env.post(log.request(0, 5))).status == 200
        stored = env.state.latest(ORIGIN)
        fork = Log(leaves=[leaf("fork", i) for i in range(5)])
        body = fork.request(5, 5)
        r = await env.post(body)
        assert (r.status, r.body) == (422, b"two different roots for the same size 5\n")
        [e] = env.state.evidence(ORIGIN)
        assert stored is not None
        assert (e.request, e.stored_note, e.received_at) == (body, stored.note, T0)
        assert "different roots" in e.reason
        assert env.state.latest(ORIGIN) == stored

    run(t, backend=backend)


def test_edge_11_bad_proof_422_and_evidence(backend: Backend) -> None:
    async def t(env: Env) -> None:
        log = env.add(Log().grow(8))
        assert (await env.post(log.request(0, 3))).status == 200
        proof = log.proof(3, 8)
        proof[0] = bytes([proof[0][0] ^ 1]) + proof[0][1:]
        body = log.request(3, 8, proof=proof)
        r = await env.post(body)
        assert (r.status, r.body) == (
            422,
            b"consistency proof does not lead to the root of size 3\n",
        )
        # A proof that does not verify is the submitter's error, not a proven fork.
        assert env.state.evidence(ORIGIN) == []
        # A fork (signed by the same log key) that diverges before the stored size, with a
        # correct proof within its own tree: the proof folds to the fork's signed root from
        # another root at size 3, which proves the split view by itself. Kept once.
        fork = Log(leaves=[leaf("main", 0), *(leaf("b", i) for i in range(7))])
        for _ in range(3):
            r = await env.post(fork.request(3, 8))
            assert r.status == 422 and b"consistency proof" in r.body
        [e] = env.state.evidence(ORIGIN)
        assert e.request == fork.request(3, 8)
        # A log that grew past the stored size along the same leaves is consistent.
        grown = Log(
            leaves=[*(leaf("main", i) for i in range(3)), *(leaf("b", i) for i in range(5))]
        )
        assert (await env.post(grown.request(3, 8))).status == 200

    run(t, backend=backend)


def test_conflicting_checkpoint_at_stored_size_is_evidence_even_on_409(backend: Backend) -> None:
    """old != stored gives 409, but a validly signed checkpoint with the stored size and
    another root proves a fork by itself: it is kept as evidence."""

    async def t(env: Env) -> None:
        log = env.add(Log().grow(5))
        assert (await env.post(log.request(0, 5))).status == 200
        fork = Log(leaves=[leaf("fork", i) for i in range(5)])
        r = await env.post(fork.request(2, 5, proof=[leaf("z", 0)] * 3))
        assert (r.status, r.body) == (409, b"5\n")
        [e] = env.state.evidence(ORIGIN)
        assert e.reason == "two different roots for size 5"

    run(t, backend=backend)


# --- edge case 12: the 409 body and the exact Content-Type header ----------------------------


async def raw_http(
    port: int, request: bytes, timeout: float = 10
) -> tuple[bytes, list[bytes], bytes]:
    """Send raw bytes; return (status line, header lines, body) exactly as received."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request)
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout)
        status, *headers = head[:-4].split(b"\r\n")
        length = 0
        for h in headers:
            k, _, v = h.partition(b":")
            if k.strip().lower() == b"content-length":
                length = int(v.strip())
        body = await asyncio.wait_for(reader.readexactly(length), timeout)
        return status, headers, body
    finally:
        writer.close()


def http_post(path: str, body: bytes, length: int | None = None) -> bytes:
    n = len(body) if length is None else length
    return (
        f"POST {path} HTTP/1.1\r\nHost: witness\r\nContent-Length: {n}\r\nConnection: close\r\n\r\n"
    ).encode() + body


def test_edge_12_conflict_body_and_content_type(backend: Backend) -> None:
    """An unseen origin with ``old 5``: 409 with body exactly ``0`` LF and the header exactly
    ``Content-Type: text/x.tlog.size`` (no charset appended) — never trust on first use."""

    async def t(env: Env) -> None:
        log = env.add(Log().grow(9))
        port = env.client.port
        assert port is not None
        status, headers, body = await raw_http(
            port, http_post("/add-checkpoint", log.request(5, 9))
        )
        assert status == b"HTTP/1.1 409 Conflict"
        assert body == b"0\n"
        ctype = [h for h in headers if h.lower().startswith(b"content-type:")]
        assert ctype == [b"Content-Type: text/x.tlog.size"]
        assert env.state.latest(ORIGIN) is None
        # Once something is stored, the 409 names it.
        assert (await env.post(log.request(0, 3))).status == 200
        status, headers, body = await raw_http(
            port, http_post("/add-checkpoint", log.request(5, 9))
        )
        assert (status, body) == (b"HTTP/1.1 409 Conflict", b"3\n")
        assert b"Content-Type: text/x.tlog.size" in headers

    run(t, backend=backend)


# --- edge case 13: size 0, library semantics vs witness semantics ---------------------------


def test_edge_13_size_zero_library_vs_witness(backend: Backend) -> None:
    async def t(env: Env) -> None:
        log = env.add(Log().grow(5))
        # An unseen origin, one proof line from old 0: 422, and nothing stored.
        r = await env.post(log.request(0, 5, proof=[log.tree.root(1)]))
        assert r.status == 422
        # old 0 -> 5 with no proof: trust on first use from the empty tree.
        r = await env.post(log.request(0, 5))
        assert r.status == 200, r.body
        check_cosignatures(env, r.body, log.text(5))
        # A size-0 checkpoint with another root than SHA-256(""): 422 (even for a known log).
        other = Log("example.com/empty")
        env.add(other)
        text = f"{other.origin}\n0\n{b64encode(leaf('x', 0))}\n".encode()
        r = await env.post(other.request(0, 0, note=sign_note(text, [other.signer])))
        assert r.status == 422
        # The empty tree with its proper root is cosignable (old 0 = size 0).
        r = await env.post(other.request(0, 0))
        assert r.status == 200, r.body
        stored = env.state.latest(other.origin)
        assert stored is not None and (stored.size, stored.root) == (0, EMPTY_ROOT)

    run(t, mldsa=True, backend=backend)


# --- edge case 14: equal sizes -------------------------------------------------------------


def test_edge_14_equal_sizes(backend: Backend) -> None:
    async def t(env: Env) -> None:
        log = env.add(Log().grow(6))
        r1 = await env.post(log.request(0, 6))
        assert r1.status == 200
        first = env.state.latest(ORIGIN)
        env.clock.now += 60
        r2 = await env.post(log.request(6, 6))
        assert r2.status == 200, r2.body
        sigs = check_cosignatures(env, r2.body, log.text(6))
        assert {timestamp_of(s) for s in sigs} == {T0 + 60}
        second = env.state.latest(ORIGIN)
        assert first is not None and second is not None
        assert (second.size, second.root) == (first.size, first.root)
        assert second.note != first.note  # the stored note carries the new cosignatures
        served = await env.get(monitoring_path("", ORIGIN))
        assert all(s.line() in served.body for s in sigs)
        # Equal sizes with a non-empty proof: 422 (cf. merkle
        # sizes-match-but-proof-is-not-empty-and-sizes-are-one.json).
        r3 = await env.post(log.request(6, 6, proof=[log.tree.root(6)]))
        assert r3.status == 422
        assert env.state.history == [(ORIGIN, 6), (ORIGIN, 6)]

    run(t, mldsa=True, backend=backend)


# --- edge case 15: atomic compare-and-swap ----------------------------------------------------


async def two_servers(
    backend: Backend, clock: FakeClock, delay: float = 0, logs: Sequence[Log] = ()
) -> tuple[contextlib.AsyncExitStack, Recorder, Recorder, Client, Client]:
    """Two witness instances ("processes"), each with its own handle on one state (for
    SQLite, its own connection to the file): only the state's compare-and-swap serialises
    them. The two recorders share their Stats. ``logs`` are added to the state (by the first
    handle)."""
    stack = contextlib.AsyncExitStack()
    stats = Stats()
    states = [Recorder(backend.open(), stats, delay) for _ in range(2)]
    for log in logs:
        states[0].add_log(log.origin, (log.vkey,))
    clients = []
    for state in states:
        app = make_app(state, witness_signers(False), name=WITNESS, clock=clock)
        clients.append(await stack.enter_async_context(serve(app)))
    return stack, states[0], states[1], clients[0], clients[1]


def test_edge_15_compare_and_swap_concurrent_updates(backend: Backend) -> None:
    """``old N -> N+5`` and ``old N -> N+9`` both pass their checks against stored N (a
    barrier holds them at the compare-and-swap); exactly one gets 200, the other 409 with the
    winner's size, and the stored size never decreases."""

    async def main() -> None:
        log = Log().grow(12)
        stack, sa, sb, a, b = await two_servers(backend, FakeClock(), logs=[log])
        async with stack:
            assert (await fetch(a, "POST", "/add-checkpoint", log.request(0, 3))).status == 200
            barrier = threading.Barrier(2, timeout=10)

            def together(expected: Cosigned | None, new: Cosigned) -> None:
                barrier.wait()

            sa.before_cas = sb.before_cas = together
            ra, rb = await asyncio.gather(
                fetch(a, "POST", "/add-checkpoint", log.request(3, 8)),
                fetch(b, "POST", "/add-checkpoint", log.request(3, 12)),
            )
            statuses = sorted([(ra.status, ra.body), (rb.status, rb.body)])
            stored = sb.latest(ORIGIN)
            assert stored is not None
            assert statuses[0][0] == 200
            assert statuses[1] == (409, b"%d\n" % stored.size)
            assert stored.size in (8, 12)
            assert sa.stats.cas_failures == 1
            assert sa.history == [(ORIGIN, 3), (ORIGIN, stored.size)]

    asyncio.run(main())


def stall_at(
    size: int,
) -> tuple[threading.Event, threading.Event, Callable[[Cosigned | None, Cosigned], None]]:
    """A ``before_cas`` hook that holds the swap to ``size``: it sets the first event once
    there, then waits (10 s at most) for the second."""
    stalled = threading.Event()
    release = threading.Event()

    def stall(expected: Cosigned | None, new: Cosigned) -> None:
        if new.size == size:
            stalled.set()
            assert release.wait(10)

    return stalled, release, stall


def test_edge_15_rollback_race_between_processes(backend: Backend) -> None:
    """The spec's race: A (N -> N+5) is checked, then stalls before committing; B (N -> N+9)
    is checked, stored and cosigned; A then must not roll the witness back: 409 ``N+9``."""

    async def main() -> None:
        log = Log().grow(12)
        stack, state, _, a, b = await two_servers(backend, FakeClock(), logs=[log])
        async with stack:
            assert (await fetch(a, "POST", "/add-checkpoint", log.request(0, 3))).status == 200
            stalled, release, state.before_cas = stall_at(8)
            slow = asyncio.create_task(fetch(a, "POST", "/add-checkpoint", log.request(3, 8)))
            assert await asyncio.to_thread(stalled.wait, 10)
            fast = await fetch(b, "POST", "/add-checkpoint", log.request(3, 12))
            assert fast.status == 200, fast.body
            release.set()
            late = await slow
            assert (late.status, late.body) == (409, b"12\n")
            assert late.headers["Content-Type"] == SIZE_CONTENT_TYPE
            stored = state.latest(ORIGIN)
            assert stored is not None and stored.size == 12
            assert state.history == [(ORIGIN, 3), (ORIGIN, 12)]

    asyncio.run(main())


def test_edge_15_rollback_race_within_one_process(backend: Backend) -> None:
    """In one process the origin's lock serialises: B waits for the stalled A, then finds the
    state moved and answers 409 with A's size."""

    async def t(env: Env) -> None:
        log = env.add(Log().grow(12))
        assert (await env.post(log.request(0, 3))).status == 200
        stalled, release, env.state.before_cas = stall_at(8)
        slow = asyncio.create_task(env.post(log.request(3, 8)))
        assert await asyncio.to_thread(stalled.wait, 10)
        fast = asyncio.create_task(env.post(log.request(3, 12)))
        await asyncio.sleep(0.05)
        assert not fast.done()  # queued behind the origin's lock
        release.set()
        assert (await slow).status == 200
        r = await fast
        assert (r.status, r.body) == (409, b"8\n")
        assert env.state.history == [(ORIGIN, 3), (ORIGIN, 8)]

    run(t, backend=backend)


def fork_requests(log_a: Log, log_b: Log, base: int) -> list[tuple[str, int, bytes]]:
    """16 requests per fork: single-leaf steps ``base+j -> base+j+1`` and jumps
    ``base -> base+2+j``, each with a correct proof within its own fork."""
    out = []
    for name, log in (("a", log_a), ("b", log_b)):
        for j in range(8):
            out.append((name, base + j + 1, log.request(base + j, base + j + 1)))
            out.append((name, base + 2 + j, log.request(base, base + 2 + j)))
    return out


@pytest.mark.parametrize("kind,trials", [("memory", 100), ("sqlite", 100)])
def test_concurrency_two_forks_cosign_one_fork_only(kind: str, trials: int, tmp_path: Path) -> None:
    """Acceptance item 2: 32 concurrent requests advance one log along two conflicting
    forks (same first ``base`` leaves) through two witness instances sharing one state;
    cosignatures are issued for one fork only, the stored checkpoint is the largest cosigned
    one and on that fork, the stored size never decreases, and every 422 is kept as
    evidence. 100 times in memory, each with a fresh log; 15 times on SQLite (two
    connections to one file; every commit fsyncs)."""
    backend = Backend(kind, tmp_path)

    async def main() -> None:
        clock = FakeClock()
        stack, state, _, a, b = await two_servers(backend, clock, delay=0.0005)
        statuses: dict[int, int] = {}
        async with stack:
            for trial in range(trials):
                origin = f"fork.example/{trial}"
                base = 3
                shared = [leaf(origin, i) for i in range(base)]
                fork_a = Log(origin, leaves=shared).grow(10, "a")
                fork_b = Log(origin, leaves=shared).grow(10, "b")
                state.add_log(origin, (fork_a.vkey,))
                first = await fetch(a, "POST", "/add-checkpoint", fork_a.request(0, base))
                assert first.status == 200
                requests = fork_requests(fork_a, fork_b, base)
                random.Random(trial).shuffle(requests)
                results = await asyncio.gather(
                    *(
                        fetch((a, b)[i % 2], "POST", "/add-checkpoint", body)
                        for i, (_, _, body) in enumerate(requests)
                    )
                )
                winners = {
                    name
                    for (name, _, _), r in zip(requests, results, strict=True)
                    if r.status == 200
                }
                assert len(winners) == 1, (trial, winners)
                [winner] = winners
                won = Log(origin, leaves=shared).grow(10, winner)
                cosigned = []
                for (name, size, _), r in zip(requests, results, strict=True):
                    statuses[r.status] = statuses.get(r.status, 0) + 1
                    assert r.status in (200, 409, 422), (r.status, r.body)
                    if r.status == 200:
                        sigs = parse_cosignature_response(r.body)
                        assert [s.key_id for s in sigs] == [
                            CosignatureV1Signer(WITNESS, ED_SEED).key_id
                        ]
                        v = CosignatureV1Verifier(
                            WITNESS, CosignatureV1Signer(WITNESS, ED_SEED).public_key
                        )
                        assert v.verify(won.text(size), sigs[0].sig)
                        cosigned.append(size)
                    elif r.status == 409:
                        assert r.headers["Content-Type"] == SIZE_CONTENT_TYPE
                    else:
                        assert name != winner  # a proof within the winning fork is good
                stored = state.latest(origin)
                assert stored is not None
                assert stored.size == max(cosigned)
                assert stored.root == won.tree.root(stored.size)
                sizes = [s for o, s in state.history if o == origin]
                assert sizes == sorted(sizes) and sizes[1:] == sorted(cosigned)
                # Evidence: only proven forks, each once (the two forks are fixed, so one
                # reason names one pair of checkpoints), never more rows than refusals.
                refused = sum(1 for r in results if r.status in (409, 422))
                kept = state.evidence(origin)
                assert len(kept) <= refused
                assert len({e.reason for e in kept}) == len(kept)
                assert all(
                    e.reason.startswith(("two different roots", "the consistency proof"))
                    for e in kept
                )
        assert statuses.get(422, 0) > 0 and statuses.get(409, 0) > 0
        assert state.stats.cas_failures > 0  # the race between the two instances did happen

    try:
        asyncio.run(main())
    finally:
        backend.close()


# --- edge case 16: durability: the response is the commitment ------------------------------


class FailingCasState(MemoryState):
    def compare_and_swap(self, expected: Cosigned | None, new: Cosigned) -> bool:
        raise OSError("disk full: the write did not happen")


class LosingCasState(MemoryState):
    """Another process always wins: it stored size 7 just before our write."""

    def compare_and_swap(self, expected: Cosigned | None, new: Cosigned) -> bool:
        other = Cosigned(new.origin, 7, b"\x07" * 32, b"other note", T0)
        with self._lock:
            self._latest[new.origin] = other
        return False


def test_edge_16_durability_no_cosignature_without_commit(caplog: pytest.LogCaptureFixture) -> None:
    """A cosignature is returned only after compare_and_swap returned True: a failing write
    answers 500 with a generic body (the cause is logged), a lost race answers 409 with the
    size found on re-reading. (Crash durability itself belongs to the state backend.)"""
    caplog.set_level(logging.INFO, logger="witness.server")

    async def failing(env: Env) -> None:
        log = env.add(Log().grow(4))
        r = await env.post(log.request(0, 4))
        assert (r.status, r.body) == (500, GENERIC_500_BODY)
        assert "\u2014" not in r.body.decode()
        assert env.state.latest(ORIGIN) is None

    run(failing, inner=FailingCasState())
    assert "disk full" in caplog.text and "Traceback" in caplog.text

    async def losing(env: Env) -> None:
        log = env.add(Log().grow(4))
        r = await env.post(log.request(0, 4))
        assert (r.status, r.body) == (409, b"7\n")

    run(losing, inner=LosingCasState())


SERVER_PROCESS = """
import asyncio, sys
from aiohttp import web
from tlog.cosignature import CosignatureV1Signer
from witness.open import open_state
from witness.server import make_app

async def main() -> None:
    state = open_state(db=sys.argv[1])
    signer = CosignatureV1Signer(sys.argv[2], bytes.fromhex(sys.argv[3]))
    runner = web.AppRunner(make_app(state, [signer], name=sys.argv[2]))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    print(runner.addresses[0][1], flush=True)
    await asyncio.Event().wait()

asyncio.run(main())
"""


def test_edge_16_durability_kill_after_200(tmp_path: Path) -> None:
    """A witness process on SQLite is killed (SIGKILL) right after each 200; on restart the
    stored size equals the cosigned size and the stored note carries the returned lines."""
    db = tmp_path / "witness.db"
    log = Log().grow(9)
    setup = open_state(db=str(db))
    setup.add_log(ORIGIN, (log.vkey,))
    setup.close()
    root_dir = Path(__file__).resolve().parents[2]
    for old, size in [(0, 3), (3, 9)]:
        proc = subprocess.Popen(
            [sys.executable, "-c", SERVER_PROCESS, str(db), WITNESS, ED_SEED.hex()],
            stdout=subprocess.PIPE,
            cwd=root_dir,
        )
        try:
            assert proc.stdout is not None
            port = int(proc.stdout.readline())
            req = urllib.request.Request(
                f"http://127.0.0.1:{port}/add-checkpoint", data=log.request(old, size)
            )
            with urllib.request.urlopen(req, timeout=30) as r:
                assert r.status == 200
                body = r.read()
        finally:
            proc.kill()
            proc.wait()
        state = open_state(db=str(db), create=False)
        try:
            stored = state.latest(ORIGIN)
            assert stored is not None
            assert (stored.size, stored.root) == (size, log.tree.root(size))
            assert stored.note.endswith(body)
        finally:
            state.close()


# --- group commit, per-process caches, the replay fast path ------------------------------------


Swaps = Sequence[tuple[Cosigned | None, Cosigned]]


def hold_first_batch(state: Recorder, reads: int) -> Callable[[Swaps], None]:
    """A ``before_many`` hook: the first group commit waits (at most 10 s) until ``reads``
    more reads of the stored state happened (every request has read its log and is about to
    queue its swap), then 0.2 s more, so that the requests behind it queue for one batch."""
    start = state.reads

    def hold(swaps: Swaps) -> None:
        if len(state.batches) == 1:
            deadline = time.monotonic() + 10
            while state.reads - start < reads and time.monotonic() < deadline:
                time.sleep(0.005)
            time.sleep(0.2)

    return hold


async def leader_then_rest(
    env: Env, bodies: Sequence[bytes], then: Callable[[Swaps], None] | None = None
) -> list[Resp]:
    """POST ``bodies[0]`` and, once its swap is held in the first group commit, the rest
    together (they queue behind it: the second batch). ``then`` runs in every batch call
    after the hold. Answers in the order of ``bodies``."""
    hold = hold_first_batch(env.state, len(bodies))

    def hook(swaps: Swaps) -> None:
        hold(swaps)
        if then is not None:
            then(swaps)

    env.state.before_many = hook
    first = asyncio.create_task(env.post(bodies[0]))
    for _ in range(1000):
        if env.state.batches:
            break
        await asyncio.sleep(0.005)
    assert env.state.batches, "the leader never reached its compare-and-swap"
    rest = await asyncio.gather(*(env.post(b) for b in bodies[1:]))
    return [await first, *rest]


def group_logs(env: Env, n: int) -> list[Log]:
    return [env.add(Log(f"example.com/group/{i}", seed=b"group %d" % i).grow(3)) for i in range(n)]


def test_group_commit_batches_concurrent_requests(backend: Backend) -> None:
    """8 concurrent first checkpoints of 8 logs: their swaps are made durable in fewer
    state calls than requests (a batch of several), each request once, and every answer is a
    valid cosignature of its own checkpoint, stored as such."""
    n = 8

    async def t(env: Env) -> None:
        logs = group_logs(env, n)
        rs = await leader_then_rest(env, [log.request(0, 3) for log in logs])
        for log, r in zip(logs, rs, strict=True):
            assert r.status == 200, (log.origin, r.body)
            check_cosignatures(env, r.body, log.text(3))
            stored = env.state.latest(log.origin)
            assert stored is not None and (stored.size, stored.root) == (3, log.tree.root(3))
            assert stored.note == log.note(3) + r.body  # the log's line, then ours
        batches = env.state.batches
        assert sorted(o for b in batches for o in b) == sorted(log.origin for log in logs)
        assert batches[0] == [logs[0].origin]
        assert len(batches) < n and max(len(b) for b in batches) > 1, batches
        assert sorted(env.state.history) == sorted((log.origin, 3) for log in logs)

    run(t, mldsa=True, backend=backend)


def test_group_commit_precondition_failure_fails_only_its_request(backend: Backend) -> None:
    """One swap of a batch breaks a precondition (UsageError: the batch is refused whole and
    writes nothing): the server retries the swaps one by one, so only that request fails
    (500), and every other request of the batch is cosigned and stored."""
    n = 6

    async def t(env: Env) -> None:
        logs = group_logs(env, n)
        marked = logs[3].origin

        def refuse(expected: Cosigned | None, new: Cosigned) -> None:
            if new.origin == marked:
                raise UsageError(f"log {marked}: a precondition fails")

        env.state.before_cas = refuse
        rs = await leader_then_rest(env, [log.request(0, 3) for log in logs])
        for log, r in zip(logs, rs, strict=True):
            if log.origin == marked:
                assert (r.status, r.body) == (500, GENERIC_500_BODY)
                assert env.state.latest(marked) is None
            else:
                assert r.status == 200, (log.origin, r.body)
                check_cosignatures(env, r.body, log.text(3))
                stored = env.state.latest(log.origin)
                assert stored is not None and stored.note == log.note(3) + r.body
        # The marked swap was refused inside a batch with others (not alone).
        assert any(marked in b and len(b) > 1 for b in env.state.batches), env.state.batches
        assert sorted(env.state.history) == sorted(
            (x.origin, 3) for x in logs if x.origin != marked
        )
        # The fault gone, the same request goes through.
        env.state.before_cas = None
        r = await env.post(logs[3].request(0, 3))
        assert r.status == 200, r.body
        check_cosignatures(env, r.body, logs[3].text(3))

    run(t, backend=backend)


@pytest.mark.parametrize(
    "error",
    [RuntimeError("disk on fire"), BackendError("sqlite: disk I/O error"), MalformedError("x")],
    ids=lambda e: type(e).__name__,
)
def test_group_commit_failed_batch_fails_every_request(backend: Backend, error: Exception) -> None:
    """The batch call raises something other than a precondition failure: every request of
    that batch gets a 500 with the generic body (no cosignature line), nothing of it is stored,
    and the batch before it is unaffected. Retried later, the requests succeed."""
    n = 5

    async def t(env: Env) -> None:
        logs = group_logs(env, n)

        def fail_second(swaps: Swaps) -> None:
            if len(env.state.batches) == 2:
                raise error

        rs = await leader_then_rest(env, [log.request(0, 3) for log in logs], fail_second)
        failed = {o for b in env.state.batches[1:2] for o in b}
        assert len(failed) > 1, env.state.batches
        for log, r in zip(logs, rs, strict=True):
            if log.origin in failed:
                assert (r.status, r.body) == (500, GENERIC_500_BODY), log.origin
                assert "\u2014".encode() not in r.body
                assert env.state.latest(log.origin) is None
            else:
                assert r.status == 200, (log.origin, r.body)
                check_cosignatures(env, r.body, log.text(3))
        env.state.before_many = None
        for log in logs:
            if log.origin in failed:
                r = await env.post(log.request(0, 3))
                assert r.status == 200, r.body
                stored = env.state.latest(log.origin)
                assert stored is not None and stored.note == log.note(3) + r.body

    run(t, backend=backend)


class MiscountingState(MemoryState):
    """A broken backend: its batch call lands nothing and returns no verdict at all."""

    broken = True

    def compare_and_swap_many(
        self, swaps: Sequence[tuple[Cosigned | None, Cosigned]]
    ) -> list[bool]:
        return [] if self.broken else super().compare_and_swap_many(swaps)


def test_group_commit_with_a_miscounting_state_answers_500_and_recovers() -> None:
    """A state that returns fewer verdicts than swaps must not leave a request (and with it
    its log's lock) waiting forever: the request gets a 500, and the log is usable again."""
    inner = MiscountingState()

    async def t(env: Env) -> None:
        log = env.add(Log().grow(4))
        r = await asyncio.wait_for(env.post(log.request(0, 2)), 10)
        assert (r.status, r.body) == (500, GENERIC_500_BODY)
        assert env.state.latest(ORIGIN) is None
        inner.broken = False
        r = await asyncio.wait_for(env.post(log.request(0, 2)), 10)
        assert r.status == 200, r.body
        check_cosignatures(env, r.body, log.text(2))

    run(t, inner=inner)


def test_swap_that_raised_after_landing_drops_the_cached_state(backend: Backend) -> None:
    """A swap call that raises may have landed (a COMMIT without a verdict): the server must
    forget what it cached, so the next request is decided on what is stored. Here the write
    of size 4 lands and the call fails; a replay of size 2 in the same second (which the
    cached size 2 would answer from its stored cosignatures) is a 409 naming 4."""

    async def t(env: Env) -> None:
        log = env.add(Log().grow(8))
        assert (await env.post(log.request(0, 2))).status == 200

        def land_then_fail(swaps: Swaps) -> None:
            assert env.state.inner.compare_and_swap_many(swaps) == [True]
            raise BackendError("COMMIT failed without a verdict")

        env.state.before_many = land_then_fail
        r = await env.post(log.request(2, 4))
        assert (r.status, r.body) == (500, GENERIC_500_BODY)
        env.state.before_many = None
        stored = env.state.latest(ORIGIN)
        assert stored is not None and stored.size == 4  # it did land
        r = await env.post(log.request(2, 2))
        assert (r.status, r.body) == (409, b"4\n")
        r = await env.post(log.request(4, 8))
        assert r.status == 200, r.body

    run(t, backend=backend)


def served_cosignatures(body: bytes) -> list[Signature]:
    _, sigs = parse_note(body)
    return [s for s in sigs if s.name == WITNESS]


def test_replay_fast_path(backend: Backend, caplog: pytest.LogCaptureFixture) -> None:
    """The stored checkpoint re-submitted in the second of its cosignatures is answered with
    the stored cosignature lines, without signing or writing; a second later it is signed
    anew and stored; other extension lines are another text, signed and stored."""
    caplog.set_level(logging.INFO, logger="witness.server")
    path = monitoring_path("", ORIGIN)

    async def t(env: Env) -> None:
        log = env.add(Log().grow(5))
        assert (await env.post(log.request(0, 3))).status == 200
        env.clock.now += 1
        advance = await env.post(log.request(3, 5))
        assert advance.status == 200
        calls, history = len(env.state.batches), list(env.state.history)
        served = await env.get(path)
        # Same second (the clock is fixed): the stored lines, exactly, and no swap.
        for _ in range(3):
            r = await env.post(log.request(5, 5))
            assert r.status == 200, r.body
            assert r.body == advance.body
            assert b"".join(s.line() for s in served_cosignatures(served.body)) == r.body
        assert (len(env.state.batches), env.state.history) == (calls, history)
        assert (await env.get(path)).body == served.body
        # The clock moves one second: signed anew at the new time, stored and served.
        env.clock.now += 1
        r = await env.post(log.request(5, 5))
        assert r.status == 200, r.body
        sigs = check_cosignatures(env, r.body, log.text(5))
        assert {timestamp_of(s) for s in sigs} == {T0 + 2}
        assert len(env.state.batches) == calls + 1
        assert env.state.history == [*history, (ORIGIN, 5)]
        now_served = await env.get(path)
        assert now_served.body == log.note(5) + r.body
        assert {timestamp_of(s) for s in served_cosignatures(now_served.body)} == {T0 + 2}
        # Same second, other extension lines: another text, so signed and stored (slow path).
        for extensions in [("ext: one",), ("ext: one", "ext: two"), ()]:
            text = log.text(5, extensions)
            r = await env.post(log.request(5, 5, note=log.note(5, extensions)))
            assert r.status == 200, r.body
            sigs = check_cosignatures(env, r.body, text)
            assert {timestamp_of(s) for s in sigs} == {T0 + 2}  # never backwards
            assert (await env.get(path)).body == log.note(5, extensions) + r.body
        assert len(env.state.batches) == calls + 4
        # ...and now that text, re-submitted in the same second, is a replay again.
        again = await env.post(log.request(5, 5))
        assert again.body == r.body and len(env.state.batches) == calls + 4

    run(t, mldsa=True, backend=backend)
    entries = [
        json.loads(rec.getMessage())
        for rec in caplog.records
        if rec.name == "witness.server" and rec.getMessage().startswith("{")
    ]
    replays = [e for e in entries if e.get("replay")]
    assert len(replays) == 4 and all(e["status"] == 200 for e in replays)
    assert replays[0]["size"] == 5 and replays[0]["old"] == 5


@pytest.fixture(params=["sqlite", "postgres"])
def shared_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """A database that two witness instances share: a SQLite file or a PostgreSQL schema."""
    if request.param == "postgres":
        schema = request.getfixturevalue("pg_schema")
        b = Backend("postgres", postgres=schema.conninfo)
    else:
        b = Backend("sqlite", tmp_path)
    yield b
    b.close()


def test_stale_cache_across_two_instances(shared_backend: Backend) -> None:
    """Instance B cached size 2 (it cosigned it); instance A then moved the log to 4. B's
    refusals are re-decided on a fresh read, its lost swap re-reads, nothing moves back."""

    async def main() -> None:
        clock = FakeClock()
        stack, sa, sb, a, b = await two_servers(shared_backend, clock)
        logs = {k: Log(f"stale.example/{k}", seed=k.encode()).grow(12) for k in "xyzp"}
        for log in logs.values():
            sa.add_log(log.origin, (log.vkey,))

        async def post(c: Client, body: bytes) -> Resp:
            return await fetch(c, "POST", "/add-checkpoint", body)

        async with stack:
            first: dict[str, bytes] = {}
            for k, log in logs.items():
                r = await post(b, log.request(0, 2))
                assert r.status == 200, r.body
                first[k] = r.body
                assert (await post(a, log.request(2, 4))).status == 200
            # x: old 4 refused on B's cached 2, re-decided on the stored 4: 200.
            x = logs["x"]
            r = await post(b, x.request(4, 6))
            assert r.status == 200, r.body
            check_cosignatures_of(r.body, x.text(6))
            # y: old 2 passes B's cache, the swap is lost, B re-reads: 409 naming 4.
            y = logs["y"]
            failures = sb.stats.cas_failures
            r = await post(b, y.request(2, 5))
            assert (r.status, r.body) == (409, b"4\n")
            assert sb.stats.cas_failures == failures + 1
            r = await post(b, y.request(2, 5))  # now on the fresh read: no swap tried
            assert (r.status, r.body) == (409, b"4\n")
            assert sb.stats.cas_failures == failures + 1
            # p: a bad proof from B's cached 2 is re-decided on the stored 4: a 409, and no
            # evidence (it is not inconsistent with what is stored, only stale).
            p = logs["p"]
            proof = p.proof(2, 6)
            proof[0] = leaf("bad", 0)
            r = await post(b, p.request(2, 6, proof=proof))
            assert (r.status, r.body) == (409, b"4\n")
            assert sa.evidence(p.origin) == []
            # z: the size-2 text replayed to B in the same second. What the code does: B's
            # cache still says 2 with its cosignatures of this second, so B answers them
            # (the very bytes it issued before), without a write; the state stays at 4.
            z = logs["z"]
            swaps = len(sb.batches)
            r = await post(b, z.request(2, 2))
            assert (r.status, r.body) == (200, first["z"])
            assert len(sb.batches) == swaps
            stored = sa.latest(z.origin)
            assert stored is not None and stored.size == 4
            # A second later it is no replay: the swap from the stale 2 is lost, 409 names 4.
            clock.now += 1
            r = await post(b, z.request(2, 2))
            assert (r.status, r.body) == (409, b"4\n")
            # Nothing ever moved back.
            for log in logs.values():
                sizes = [s for o, s in sa.history if o == log.origin]
                assert sizes == sorted(sizes), (log.origin, sizes)
                stored = sb.latest(log.origin)
                assert stored is not None and stored.size >= 4
                assert stored.root == log.tree.root(stored.size)

    asyncio.run(main())


def test_timestamps_never_go_back_across_two_instances(shared_backend: Backend) -> None:
    """Module docstring, step 8: the cosignature timestamp is ``max(now, latest timestamp of
    this witness's cosignatures on the stored note)``, never going backwards for an origin
    even if the clock does. B cached the log at size 4 cosigned at T0; A re-stored size 4
    with cosignatures of T0+10 (same size and root: B's compare-and-swap still matches); the
    clock then steps back to T0+5. B's next cosignature must not be older than T0+10."""

    async def main() -> None:
        clock = FakeClock()
        stack, sa, _, a, b = await two_servers(shared_backend, clock)
        log = Log().grow(6)
        sa.add_log(ORIGIN, (log.vkey,))
        async with stack:
            assert (await fetch(b, "POST", "/add-checkpoint", log.request(0, 4))).status == 200
            clock.now = T0 + 10
            r = await fetch(a, "POST", "/add-checkpoint", log.request(4, 4))
            assert r.status == 200, r.body
            assert {timestamp_of(s) for s in parse_cosignature_response(r.body)} == {T0 + 10}
            clock.now = T0 + 5  # the clock goes back
            r = await fetch(b, "POST", "/add-checkpoint", log.request(4, 6))
            assert r.status == 200, r.body
            [sig] = parse_cosignature_response(r.body)
            assert timestamp_of(sig) >= T0 + 10
            stored = sa.latest(ORIGIN)
            assert stored is not None and stored.updated_at >= T0 + 10

    asyncio.run(main())


def check_cosignatures_of(body: bytes, text: bytes) -> None:
    """A 200 body of a witness with the Ed25519 key only: one valid cosignature of ``text``."""
    [sig] = parse_cosignature_response(body)
    assert CosignatureV1Verifier(WITNESS, CosignatureV1Signer(WITNESS, ED_SEED).public_key).verify(
        text, sig.sig
    )


def test_unknown_log_added_later_is_used_after_config_ttl(backend: Backend) -> None:
    """The server caches "not configured" too; a log added while it runs is followed within
    config_ttl seconds."""

    async def t(env: Env) -> None:
        log = Log().grow(3)
        r = await env.post(log.request(0, 3))
        assert (r.status, r.body) == (404, b"unknown log 'example.com/log'\n")
        env.add(log)
        assert (await env.post(log.request(0, 3))).status == 404  # cached as unknown
        await asyncio.sleep(0.35)
        r = await env.post(log.request(0, 3))
        assert r.status == 200, r.body
        check_cosignatures(env, r.body, log.text(3))

    run(t, backend=backend, config_ttl=0.3)


# --- edge case 19: the proof line limit ----------------------------------------------------


def test_edge_19_proof_line_limit(backend: Backend) -> None:
    async def t(env: Env) -> None:
        log = env.add(Log().grow(8))
        assert (await env.post(log.request(0, 4))).status == 200
        # Built by hand: AddCheckpointRequest.format refuses to write 64 lines.
        lines = [b64encode(leaf("p", i)).encode() for i in range(64)]
        body = b"old 4\n" + b"\n".join(lines) + b"\n\n" + log.note(8)
        r = await env.post(body)
        assert r.status == 400
        assert r.body == b"request has 64 proof lines, at most 63\n"
        # 63 lines pass the framing; the proof then fails on its merits: 422, not 400.
        r = await env.post(log.request(4, 8, proof=[leaf("p", i) for i in range(63)]))
        assert r.status == 422

    run(t, backend=backend)


# --- edge case 10: timestamps ---------------------------------------------------------------


def test_edge_10_timestamps_non_zero_monotonic_per_origin(backend: Backend) -> None:
    async def t(env: Env) -> None:
        log = env.add(Log().grow(10))
        r = await env.post(log.request(0, 4))
        assert {timestamp_of(s) for s in check_cosignatures(env, r.body, log.text(4))} == {T0}
        env.clock.now = T0 - 3600  # the clock goes back an hour
        r = await env.post(log.request(4, 7))
        assert r.status == 200
        # Never backwards for this origin while the size grows: the previous timestamp.
        assert {timestamp_of(s) for s in check_cosignatures(env, r.body, log.text(7))} == {T0}
        env.clock.now = T0 + 5
        r = await env.post(log.request(7, 10))
        assert {timestamp_of(s) for s in check_cosignatures(env, r.body, log.text(10))} == {T0 + 5}
        # Another origin is not held back by this one's timestamps.
        other = env.add(Log("example.com/other").grow(2))
        env.clock.now = T0 - 7200
        r = await env.post(other.request(0, 2))
        assert {timestamp_of(s) for s in check_cosignatures(env, r.body, other.text(2))} == {
            T0 - 7200
        }

    run(t, mldsa=True, backend=backend)


def test_edge_10_clock_before_epoch_is_a_server_error() -> None:
    async def t(env: Env) -> None:
        log = env.add(Log().grow(2))
        env.clock.now = 0
        r = await env.post(log.request(0, 2))
        assert (r.status, r.body) == (500, GENERIC_500_BODY)
        assert env.state.latest(ORIGIN) is None

    run(t)


# --- edge case 29: signature count and size limits --------------------------------------------


def test_edge_29_signature_count_and_size_limits(backend: Backend) -> None:
    """A checkpoint with the log's line and 16 ML-DSA-44 lines (about 53 KB) is accepted,
    and the unknown lines are not stored; 101 signature lines are malformed (400); a body
    over the cap is 413, whether announced by Content-Length or sent chunked."""

    async def t(env: Env) -> None:
        log = env.add(Log().grow(4))
        text, log_sigs = parse_note(log.note(4))
        others = [SubtreeV1Signer(f"other{i}.example", bytes([i]) * 32) for i in range(16)]
        lines = [Signature(o.name, o.key_id, o.sign_at(text, T0)) for o in others]
        note = text + b"\n" + b"".join(s.line() for s in [*log_sigs, *lines])
        body = log.request(0, 4, note=note)
        assert len(body) > 52_000  # "about 53 KB"
        r = await env.post(body)
        assert r.status == 200, r.body
        stored = env.state.latest(ORIGIN)
        assert stored is not None and len(stored.note) < 1000
        # 101 signature lines (the Go cap is 100): malformed.
        many = [Signature(f"g{i}.example", i, b"\x00" * 8) for i in range(100)]
        note = text + b"\n" + b"".join(s.line() for s in [*log_sigs, *many])
        r = await env.post(log.request(4, 4, note=note))
        assert r.status == 400 and b"101 signature lines" in r.body
        # Over the body cap.
        big = log.request(4, 4) + b"x" * MAX_REQUEST_SIZE
        r = await env.post(big)
        assert r.status == 413

        async def chunks() -> AsyncIterator[bytes]:
            for _ in range(40):
                yield b"y" * 32768

        r = await env.post(chunks())  # type: ignore[arg-type]
        assert r.status == 413

    run(t, backend=backend)


def test_body_cap_is_configurable() -> None:
    async def t(env: Env) -> None:
        log = env.add(Log().grow(2))
        body = log.request(0, 2)
        assert len(body) > 150
        r = await env.post(body)
        assert (r.status, r.body) == (413, b"request body is larger than 150 bytes\n")

    run(t, max_body=150)


def test_read_timeout_408() -> None:
    """A client that announces a body and stalls gets 408 after the read deadline."""

    async def t(env: Env) -> None:
        env.add(Log().grow(2))
        port = env.client.port
        assert port is not None
        started = time.monotonic()
        status, _, body = await raw_http(
            port, http_post("/add-checkpoint", b"old 0\n", length=500), timeout=5
        )
        assert status == b"HTTP/1.1 408 Request Timeout"
        assert body == b"request body not received within 0.2 seconds\n"
        assert time.monotonic() - started < 4

    run(t, read_timeout=0.2)


# --- edge case 30: the monitoring path ------------------------------------------------------


def test_edge_30_monitoring_path(backend: Backend) -> None:
    async def t(env: Env) -> None:
        log = env.add(Log().grow(3))
        path = monitoring_path("", ORIGIN)
        assert path == f"/{hashlib.sha256(ORIGIN.encode()).hexdigest()}/checkpoint"
        # Configured but never cosigned: 404.
        assert (await env.get(path)).status == 404
        r = await env.post(log.request(0, 3))
        assert r.status == 200
        served = await env.get(path)
        assert served.status == 200
        assert served.headers["Content-Type"] == "text/plain; charset=utf-8"
        text, sigs = parse_note(served.body)
        assert text == log.text(3)
        names = [s.name for s in sigs]
        assert names == [ORIGIN, WITNESS, WITNESS]  # log signature, then the cosignatures
        assert Ed25519Verifier(ORIGIN, log.signer.public_key).verify(text, sigs[0].sig)
        check_cosignatures(env, b"".join(s.line() for s in sigs[1:]), text)
        # Not the defined path: uppercase hex, a percent-encoded origin, a bad hash.
        digest = origin_hash(ORIGIN)
        assert (await env.get(f"/{digest.upper()}/checkpoint")).status == 404
        encoded = URL("/example.com%2Flog/checkpoint", encoded=True)
        assert (await env.get(encoded)).status == 404
        assert (await env.get(f"/{digest[:-1]}/checkpoint")).status == 404
        assert (await env.get(f"/{'0' * 64}/checkpoint")).status == 404
        assert (await env.get(f"/{digest}/checkpoint/")).status == 404
        # Only GET (and HEAD).
        r = await fetch(env.client, "POST", path, b"")
        assert r.status == 405 and "GET" in r.headers["Allow"]
        r = await fetch(env.client, "HEAD", path)
        assert r.status == 200

    run(t, mldsa=True, backend=backend)


def test_monitoring_sees_logs_added_later() -> None:
    """The hash -> origin map reloads on a miss (at most every config_ttl seconds)."""

    async def t(env: Env) -> None:
        assert (await env.get(monitoring_path("", ORIGIN))).status == 404
        log = Log().grow(2)
        env.state.add_log(ORIGIN, (log.vkey,))
        req = log.request(0, 2)
        # A checkpoint cosigned by another instance sharing the state.
        other = make_app(env.state, witness_signers(False), name=WITNESS, clock=env.clock)
        async with serve(other) as c:
            assert (await fetch(c, "POST", "/add-checkpoint", req)).status == 200
        assert (await env.get(monitoring_path("", ORIGIN))).status == 200

    run(t, config_ttl=0)


# --- edge case 31: keys are selected by origin, whatever their name ---------------------------


def test_edge_31_key_lookup_by_origin(backend: Backend) -> None:
    """A log whose key name differs from its origin (``go.sum database tree`` signed by
    ``sum.golang.org``): the real checkpoint of testdata/torchwood/litewitness_sumdb.json."""
    data = json.loads((TESTDATA / "torchwood" / "litewitness_sumdb.json").read_text())

    async def t(env: Env) -> None:
        env.state.add_log(data["log_origin"], (data["log_vkey"],))
        r = await env.post(data["request_body"].encode())
        assert r.status == data["want_status"] == 200, r.body
        note = data["request_body"].encode().partition(b"\n\n")[2]
        text, _ = parse_note(note)
        check_cosignatures(env, r.body, text)
        stored = env.state.latest("go.sum database tree")
        assert stored is not None and stored.size == 35225469
        # The same bytes as testdata/sum.golang.org/checkpoint-35225469.txt.
        assert note == (TESTDATA / "sum.golang.org" / "checkpoint-35225469.txt").read_bytes()

    run(t, backend=backend)


# --- the torchwood litewitness conversation --------------------------------------------------


def test_litewitness_conversation() -> None:
    """testdata/torchwood/litewitness_conversation.json, in order, against our witness with
    litewitness's own witness key (an OpenSSH Ed25519 key) and name.

    Where current tlog-witness and this server differ from litewitness:

    * step 2 (litewitness 403 "invalid signature"): the tampered signature ends ``…6gx=``, whose
      trailing bits are not zero. Our signed-note parser refuses non-canonical base64, so the
      *note* is malformed before any key is tried: 400. (A trusted line that parses but fails
      to verify is 403: see test_edge_11_bad_or_absent_trusted_signature_403.)
    * step 3 (litewitness 403 "unknown log"): an unknown origin is 404 on current main.
    """
    conv = json.loads((TESTDATA / "torchwood" / "litewitness_conversation.json").read_text())
    key = load_ssh_private_key(conv["witness_key_openssh_pem"].encode(), None)
    assert isinstance(key, Ed25519PrivateKey)
    signer = CosignatureV1Signer(conv["witness_name"], key.private_bytes_raw())
    log_vkey = format_vkey(
        Ed25519Verifier(conv["origin"], bytes.fromhex(conv["log_public_key_hex"]))
    )
    ours = [200, 400, 404, 422, 422, 200, 409, 200, 409]
    theirs = [200, 403, 403, 422, 422, 200, 409, 200, 409]  # litewitness's statuses
    assert [s["want_status"] for s in conv["steps"]] == theirs

    async def main() -> None:
        state = MemoryState()
        state.add_log(conv["origin"], (log_vkey,))
        app = make_app(state, [signer], name=conv["witness_name"], clock=FakeClock())
        async with serve(app) as client:
            for step, want in zip(conv["steps"], ours, strict=True):
                r = await fetch(client, "POST", step["path"], step["request_body"].encode())
                assert r.status == want, (step, r.body)
                if want == 200:
                    assert "\u2014 example.com/witness " in r.body.decode()
                    note = step["request_body"].encode().partition(b"\n\n")[2]
                    text, _ = parse_note(note)
                    [sig] = parse_cosignature_response(r.body)
                    assert signer.verifier().verify(text, sig.sig)
                elif want == 400:
                    assert b"non-canonical base64" in r.body
                elif want == 404:
                    assert r.body.startswith(b"unknown log")
                elif want == 422:
                    assert b"consistency proof" in r.body
                else:
                    assert r.body == json.loads(step["asserts"].split("==", 1)[1]).encode()
                    assert r.headers["Content-Type"] == SIZE_CONTENT_TYPE
        stored = state.latest(conv["origin"])
        assert stored is not None
        assert stored.size == conv["expected_final_state"]["size"]

    asyncio.run(main())


# --- methods, disabled logs, quota, unexpected errors --------------------------------------


def test_wrong_method_405_with_allow() -> None:
    async def t(env: Env) -> None:
        for method in ("GET", "PUT", "DELETE"):
            r = await fetch(env.client, method, "/add-checkpoint")
            assert r.status == 405
            assert r.headers["Allow"] == "POST"
        r = await fetch(env.client, "GET", "/sign-subtree")
        assert r.status == 405 and r.headers["Allow"] == "POST"

    run(t, mldsa=True)


def test_disabled_log_404(backend: Backend) -> None:
    """Decision: a disabled log is refused like an unknown one (404), with a body that says
    it is disabled; its stored checkpoint stays on the monitoring endpoint. (config_ttl=0:
    the configuration is read on every request.)"""

    async def t(env: Env) -> None:
        log = env.add(Log().grow(4))
        assert (await env.post(log.request(0, 2))).status == 200
        env.state.set_disabled(ORIGIN, True)
        r = await env.post(log.request(2, 4))
        assert (r.status, r.body) == (404, b"log 'example.com/log' is disabled on this witness\n")
        assert (await env.get(monitoring_path("", ORIGIN))).status == 200
        env.state.set_disabled(ORIGIN, False)
        assert (await env.post(log.request(2, 4))).status == 200

    run(t, backend=backend, config_ttl=0)


def test_configuration_read_at_most_every_config_ttl(backend: Backend) -> None:
    """A log's configuration is cached for config_ttl seconds: a log disabled (or a key added)
    while the server runs takes effect within that time, and not before."""

    async def t(env: Env) -> None:
        log = env.add(Log().grow(6))
        assert (await env.post(log.request(0, 2))).status == 200
        env.state.set_disabled(ORIGIN, True)
        assert (await env.post(log.request(2, 4))).status == 200  # still cached
        await asyncio.sleep(0.45)
        r = await env.post(log.request(4, 6))
        assert (r.status, r.body) == (404, b"log 'example.com/log' is disabled on this witness\n")
        env.state.set_disabled(ORIGIN, False)
        assert (await env.post(log.request(4, 6))).status == 404  # the refusal is cached too
        await asyncio.sleep(0.45)
        assert (await env.post(log.request(4, 6))).status == 200

    run(t, backend=backend, config_ttl=0.4)


def test_quota_429_retry_after(backend: Backend) -> None:
    """qpd counts, per UTC day, the requests that move the log on; past it, 429 with
    Retry-After = the seconds to the next UTC midnight. Unauthenticated requests, resends of
    the stored checkpoint (anyone can replay the public one), 409s and 422s do not use it."""

    async def t(env: Env) -> None:
        log = env.add(Log().grow(6), qpd=2)
        impostor = Log(seed=b"impostor").grow(6)
        for _ in range(3):
            assert (await env.post(impostor.request(0, 1))).status == 403
        assert (await env.post(log.request(0, 1))).status == 200
        for _ in range(5):
            assert (await env.post(log.request(1, 1))).status == 200  # resends: free
            assert (await env.post(log.request(0, 2))).status == 409  # resyncs: free
            bad = log.request(1, 3, proof=[leaf("junk", 0)] * len(log.proof(1, 3)))
            assert (await env.post(bad)).status == 422  # refusals: free
        assert (await env.post(log.request(1, 2))).status == 200
        r = await env.post(log.request(2, 3))
        assert r.status == 429
        assert r.headers["Retry-After"] == str(86400 - T0 % 86400)
        assert b"quota of 2 requests per day" in r.body
        assert (await env.post(log.request(2, 2))).status == 200  # a resend still answers
        env.clock.now = (T0 // 86400 + 1) * 86400  # the next UTC day
        assert (await env.post(log.request(2, 3))).status == 200

    run(t, backend=backend)


class ExplodingState(MemoryState):
    def latest(self, origin: str) -> Cosigned | None:
        raise RuntimeError("boom: a secret detail")


def test_unexpected_exception_500_generic_body(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="witness.server")

    async def t(env: Env) -> None:
        log = env.add(Log().grow(2))
        r = await env.post(log.request(0, 2))
        assert (r.status, r.body) == (500, GENERIC_500_BODY)

    run(t, inner=ExplodingState())
    assert "boom: a secret detail" in caplog.text
    assert "Traceback" in caplog.text


def test_client_mistakes_are_never_500() -> None:
    """Garbage of every kind gets a 4xx."""
    bodies = [
        b"",
        b"old 0",
        b"old 0\n\n",
        b"old 0\n\n\n",
        b"old -1\n\nx\n",
        b"old 05\n\nexample.com/log\n1\nAAAA\n\n",
        b"old 0\n\n\xff\xfe\n1\n",
        b"old 0\n\nexample.com/log\n",
        b"old 0\n\nexample.com/log\n1\n\n\xe2\x80\x94 x AAAA\n",
        b"old 0\r\n\r\nexample.com/log\n",
        b"\x00" * 100,
        b"old 99999999999999999999999\n\nexample.com/log\n1\n",
    ]

    async def t(env: Env) -> None:
        log = env.add(Log().grow(2))
        for body in [*bodies, log.request(0, 2)[:-1], log.request(0, 2).replace(b"\n", b"\r\n")]:
            r = await env.post(body)
            assert 400 <= r.status < 500, (body, r.status, r.body)

    run(t)


def test_client_disconnect_is_logged_499(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="witness.server")

    async def t(env: Env) -> None:
        env.add(Log().grow(2))
        port = env.client.port
        assert port is not None
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(http_post("/add-checkpoint", b"old 0\n", length=500))
        await writer.drain()
        await asyncio.sleep(0.1)
        writer.close()
        for _ in range(100):
            if "client disconnected" in caplog.text:
                break
            await asyncio.sleep(0.02)
        metrics = (await env.get("/metrics")).body.decode()
        assert 'endpoint="add-checkpoint",code="499"} 1' in metrics
        assert 'code="500"' not in metrics

    run(t)
    [entry] = [
        json.loads(r.getMessage())
        for r in caplog.records
        if r.getMessage().startswith("{") and '"add-checkpoint"' in r.getMessage()
    ]
    assert (entry["status"], entry["error"]) == (499, "client disconnected")


def test_long_origin_gets_only_the_ed25519_cosignature() -> None:
    """subtree/v1 names origins of at most 255 bytes: a longer configured origin is cosigned
    by the Ed25519 key alone; a witness with only an ML-DSA key cannot cosign it (500)."""
    origin = "example.com/" + "x" * 300

    async def t(env: Env) -> None:
        log = env.add(Log(origin).grow(3))
        r = await env.post(log.request(0, 3))
        assert r.status == 200, r.body
        [sig] = parse_cosignature_response(r.body)
        assert sig.key_id == env.ed.key_id
        assert env.ed.verifier().verify(log.text(3), sig.sig)
        # Nor can such a log get a subtree signature: 400.
        r = await env.post(
            subtree_request(log, 2, 3, 3, log.text(3) + b"\n" + r.body), "/sign-subtree"
        )
        assert (r.status, r.body) == (
            400,
            b"a subtree/v1 cosignature names origins of at most 255 bytes\n",
        )

    run(t, mldsa=True)

    async def only_mldsa() -> None:
        state = MemoryState()
        log = Log(origin).grow(3)
        short = Log().grow(3)
        state.add_log(origin, (log.vkey,))
        state.add_log(ORIGIN, (short.vkey,))
        ml = SubtreeV1Signer(WITNESS, ML_SEED)
        async with serve(make_app(state, [ml], name=WITNESS, clock=FakeClock())) as c:
            r = await fetch(c, "POST", "/add-checkpoint", log.request(0, 3))
            assert (r.status, r.body) == (500, GENERIC_500_BODY)
            r = await fetch(c, "POST", "/add-checkpoint", short.request(0, 3))
            assert r.status == 200
            [sig] = parse_cosignature_response(r.body)
            assert ml.verifier().verify(short.text(3), sig.sig) and timestamp_of(sig) == T0

    asyncio.run(only_mldsa())


def test_configured_key_that_does_not_parse_is_skipped(caplog: pytest.LogCaptureFixture) -> None:
    """A bad vkey in the configuration is the operator's mistake: logged and ignored (the
    log's other keys still work; with none left, requests get 403 — never 400 or 500)."""
    caplog.set_level(logging.INFO, logger="witness.server")

    async def t(env: Env) -> None:
        log = Log().grow(3)
        env.state.add_log(ORIGIN, ("not a vkey", log.vkey))
        assert (await env.post(log.request(0, 3))).status == 200
        other = Log("example.com/other").grow(1)
        env.state.add_log(other.origin, ("example.com/other+00000000+AAAA",))
        assert (await env.post(other.request(0, 1))).status == 403

    run(t)
    assert "bad-configured-key" in caplog.text


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=300), st.integers(min_value=0, max_value=200))
def test_mutated_requests_never_500(junk: bytes, cut: int) -> None:
    log = Log().grow(5)
    good = log.request(0, 5)

    async def t(env: Env) -> None:
        env.add(log)
        for body in (junk, good[:cut] + junk + good[cut:], good[:cut]):
            r = await env.post(body)
            assert r.status in (200, 400, 403, 404, 409, 422), (body, r.status, r.body)

    run(t)


def test_reply_mapping() -> None:
    """witness.errors is the one mapping from exceptions to statuses."""
    assert reply_for(MalformedError("x")).status == 400
    assert reply_for(ProofError("x")).status == 422
    assert reply_for(UnknownLogError("o")).status == 404
    q = reply_for(QuotaExceededError("o", 5, 0))
    assert (q.status, q.headers["Retry-After"]) == (429, "1")
    assert reply_for(UsageError("caller bug")) == reply_for(KeyError("x"))
    assert reply_for(KeyError("x")).status == 500


# --- request logs, status page, metrics ------------------------------------------------------


def test_one_json_log_line_per_request(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="witness.server")

    async def t(env: Env) -> None:
        log = env.add(Log().grow(5))
        assert (await env.post(log.request(0, 5))).status == 200
        assert (await env.post(log.request(3, 5))).status == 409

    run(t)
    entries = [json.loads(r.getMessage()) for r in caplog.records if r.name == "witness.server"]
    assert [(e["status"], e["origin"], e["old"], e["size"]) for e in entries] == [
        (200, ORIGIN, 0, 5),
        (409, ORIGIN, 3, 5),
    ]
    for e in entries:
        assert e["endpoint"] == "add-checkpoint" and e["method"] == "POST"
        assert isinstance(e["duration_ms"], float) and e["duration_ms"] >= 0
    assert entries[1]["error"] == "the witness's latest cosigned size is 5"


def test_status_page(backend: Backend) -> None:
    async def t(env: Env) -> None:
        log = env.add(Log().grow(3))
        evil = env.add(Log("evil.example/<script>").grow(1))
        assert (await env.post(log.request(0, 3))).status == 200
        r = await env.get("/")
        assert r.status == 200
        assert r.headers["Content-Type"] == "text/html; charset=utf-8"
        page = r.body.decode()
        assert ORIGIN in page and '<td class="size" data-label="Size">3</td>' in page
        assert "2026-05-28" in page  # the last update, from the fake clock
        assert "evil.example/&lt;script&gt;" in page and "<script>" not in page
        assert format_vkey(env.ed.verifier()) in page
        # Configured, never cosigned: no size, no link (tests/witness/test_status_page.py
        # checks the rest of the page in a browser).
        assert (
            f'<td class="origin" data-label="Log">{html.escape(evil.origin)}</td>'
            '<td class="state" data-label="State">enabled</td>'
            '<td class="size" data-label="Size">\u2014</td>'
            '<td class="updated" data-label="Last update">never</td>'
        ) in page

    run(t, backend=backend)


def test_metrics(backend: Backend) -> None:
    async def t(env: Env) -> None:
        log = env.add(Log().grow(3))
        env.add(Log("example.com/two"))
        env.state.set_disabled("example.com/two", True)
        assert (await env.post(log.request(0, 3))).status == 200
        assert (await env.post(log.request(1, 3))).status == 409
        assert (await env.get("/nope")).status == 404
        r = await env.get("/metrics")
        assert r.status == 200
        assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        lines = r.body.decode().splitlines()
        assert 'witness_http_requests_total{endpoint="add-checkpoint",code="200"} 1' in lines
        assert 'witness_http_requests_total{endpoint="add-checkpoint",code="409"} 1' in lines
        assert 'witness_http_requests_total{endpoint="other",code="404"} 1' in lines
        assert 'witness_logs{state="enabled"} 1' in lines
        assert 'witness_logs{state="disabled"} 1' in lines
        assert "witness_logs_cosigned 1" in lines
        assert "witness_cosignatures_total 1" in lines
        buckets = [
            int(line.rsplit(" ", 1)[1])
            for line in lines
            if line.startswith(
                'witness_http_request_duration_seconds_bucket{endpoint="add-checkpoint"'
            )
        ]
        assert buckets == sorted(buckets) and buckets[-1] == 2
        assert 'witness_http_request_duration_seconds_count{endpoint="add-checkpoint"} 2' in lines

    run(t, backend=backend)


def test_status_endpoints_can_be_hidden() -> None:
    async def t(env: Env) -> None:
        assert (await env.get("/")).status == 404
        assert (await env.get("/metrics")).status == 404

    run(t, status_endpoints=False)


# --- sign-subtree ---------------------------------------------------------------------------


def subtree_subproof(start: int, end: int, leaves: Sequence[bytes], known: bool) -> list[bytes]:
    """SUBTREE_SUBPROOF (draft-ietf-plants-merkle-tree-certs-03 §4.4.1), from its definition."""
    n = len(leaves)
    if start == 0 and end == n:
        return [] if known else [root(leaves)]
    k = 1 << ((n - 1).bit_length() - 1)  # the largest power of two smaller than n
    if end <= k:
        return [*subtree_subproof(start, end, leaves[:k], known), root(leaves[k:])]
    if k <= start:
        return [*subtree_subproof(start - k, end - k, leaves[k:], known), root(leaves[:k])]
    return [*subtree_subproof(0, end - k, leaves[k:], False), root(leaves[:k])]


def subtree_proof(start: int, end: int, leaves: Sequence[bytes]) -> list[bytes]:
    return subtree_subproof(start, end, leaves, True)


def test_is_valid_subtree() -> None:
    assert is_valid_subtree(0, 1) and is_valid_subtree(0, 13) and is_valid_subtree(4, 8)
    assert is_valid_subtree(8, 13) and is_valid_subtree(12, 14) and is_valid_subtree(13, 14)
    assert not is_valid_subtree(1, 3)  # 1 is not a multiple of 2
    assert not is_valid_subtree(2, 5)  # 2 is not a multiple of 4
    assert not is_valid_subtree(8, 8)  # empty: draft-03 requires start < end
    assert not is_valid_subtree(9, 8)
    assert not is_valid_subtree(-2, 2)
    # BIT_CEIL above 2^63 does not overflow.
    assert is_valid_subtree(0, (1 << 63) + 5)
    assert not is_valid_subtree(1 << 62, (1 << 62) + (1 << 62) + 1)


def test_verify_subtree_consistency_draft_examples_and_identities() -> None:
    """Every valid subtree of every tree up to 33 leaves: the proof generated from the draft's
    definition verifies, and any changed, missing or extra hash is refused. Start 0 gives the
    RFC 6962 consistency proof; a one-leaf subtree gives the inclusion proof."""
    all_leaves = [leaf("s", i) for i in range(33)]
    tree = MemoryHashStore()
    tree.extend(all_leaves)
    checked = 0
    for n in range(1, 34):
        leaves = all_leaves[:n]
        rt = root(leaves)
        for end in range(1, n + 1):
            for start in range(end):
                if not is_valid_subtree(start, end):
                    continue
                node = root(leaves[start:end])
                proof = subtree_proof(start, end, leaves)
                verify_subtree_consistency(start, end, n, proof, node, rt)
                checked += 1
                if start == 0 and end < n:
                    assert proof == consistency_proof(end, n, tree)
                if end == start + 1:
                    assert proof == inclusion_proof(start, n, tree)
                for i in range(len(proof)):
                    bad = list(proof)
                    bad[i] = bytes([bad[i][0] ^ 1]) + bad[i][1:]
                    with pytest.raises(ProofError):
                        verify_subtree_consistency(start, end, n, bad, node, rt)
                with pytest.raises(ProofError):
                    verify_subtree_consistency(start, end, n, [*proof, rt], node, rt)
                if proof:
                    with pytest.raises(ProofError):
                        verify_subtree_consistency(start, end, n, proof[:-1], node, rt)
                with pytest.raises(ProofError):
                    verify_subtree_consistency(start, end, n, proof, leaf("x", 0), rt)
                with pytest.raises(ProofError):
                    verify_subtree_consistency(start, end, n, proof, node, leaf("x", 0))
    assert checked > 1000
    # The draft's worked examples (§4.4.2), tree of size 14.
    leaves = all_leaves[:14]
    assert subtree_proof(4, 8, leaves) == [root(leaves[0:4]), root(leaves[8:14])]
    assert subtree_proof(8, 13, leaves) == [
        root(leaves[12:13]),
        root(leaves[13:14]),
        root(leaves[8:12]),
        root(leaves[0:8]),
    ]


def subtree_vectors() -> list[Path]:
    return sorted(SUBTREE_VECTORS.rglob("*.json"))


# Where we and transparency-dev/merkle disagree, we reject (README there): draft-03 refuses the
# empty subtree [x, x), and every hash must be 32 bytes.
SUBTREE_DISAGREE = {
    "additional/sizes-are-equal-one-and-proof-is-empty.json",
    "additional/subtree-is-empty-sizes-are-equal-one-subtree-root-valid-proof-is-empty.json",
    "additional/subtree-is-empty-sizes-are-equal-one-subtree-root-valid-tree-root-random-proof-is-empty.json",
    "additional/subtree-is-empty-sizes-are-equal-zero-subtree-root-valid-proof-is-empty.json",
    "additional/subtree-is-empty-sizes-are-equal-zero-subtree-root-valid-tree-root-random-proof-is-empty.json",
    "additional/subtree-is-empty-subtree-root-valid-proof-is-empty.json",
    "additional/subtree-is-empty-subtree-root-valid-tree-root-random-proof-is-empty.json",
}


def test_subtree_consistency_vectors_count() -> None:
    assert len(subtree_vectors()) == 118
    found = {p.relative_to(SUBTREE_VECTORS).as_posix() for p in subtree_vectors()}
    assert found >= SUBTREE_DISAGREE


@pytest.mark.parametrize(
    "path", subtree_vectors(), ids=lambda p: p.relative_to(SUBTREE_VECTORS).as_posix()
)
def test_subtree_consistency_vector(path: Path) -> None:
    v = json.loads(path.read_text())
    proof = [base64.b64decode(h) for h in v["proof"] or []]
    args = (v["start"], v["end"], v["size"], proof)
    root1, root2 = base64.b64decode(v["root1"]), base64.b64decode(v["root2"])
    want_ok = not v["wantErr"]
    if path.relative_to(SUBTREE_VECTORS).as_posix() in SUBTREE_DISAGREE:
        assert want_ok
        want_ok = False
        assert v["start"] == v["end"] or len(root1) != 32
    if want_ok:
        verify_subtree_consistency(*args, root1, root2)
    else:
        with pytest.raises(ProofError):
            verify_subtree_consistency(*args, root1, root2)


@settings(max_examples=100)
@given(
    st.integers(min_value=0, max_value=(1 << 63) - 1),
    st.integers(min_value=1, max_value=1 << 40),
    st.lists(st.binary(min_size=32, max_size=32), max_size=63),
)
def test_sign_subtree_request_round_trip(start: int, size: int, proof: list[bytes]) -> None:
    # Snap start to a valid subtree of the drawn size.
    bit_ceil = 1 << (size - 1).bit_length()
    start -= start % bit_ceil
    # Sizes and ends are bounded by 2^63-1 everywhere (tlog.encoding.MAX_INT63).
    assume(start + size <= (1 << 63) - 1)
    req = SignSubtreeRequest(
        start, start + size, b"\x07" * 32, tuple(proof), b"note\n\n\xe2\x80\x94 x AAAAAAA=\n"
    )
    assert SignSubtreeRequest.parse(req.format()) == req


@pytest.mark.parametrize(
    "body",
    [
        b"subtree 0 1\n",
        b"subtree 0 1\n\nnote\n",  # no hash line
        b"subtree 1 3\n" + b64encode(b"\0" * 32).encode() + b"\n\nnote\n",  # invalid subtree
        b"subtree 8 8\n" + b64encode(b"\0" * 32).encode() + b"\n\nnote\n",  # empty subtree
        b"subtree 0 01\n" + b64encode(b"\0" * 32).encode() + b"\n\nnote\n",
        b"subtree +0 1\n" + b64encode(b"\0" * 32).encode() + b"\n\nnote\n",
        b"subtree 0  1\n" + b64encode(b"\0" * 32).encode() + b"\n\nnote\n",
        b"subtree 0 1 2\n" + b64encode(b"\0" * 32).encode() + b"\n\nnote\n",
        b"subtree\t0 1\n" + b64encode(b"\0" * 32).encode() + b"\n\nnote\n",
        b"old 0 1\n" + b64encode(b"\0" * 32).encode() + b"\n\nnote\n",
        b"subtree 0 1\nAA==\n\nnote\n",
        b"subtree 0 1\n" + b64encode(b"\0" * 32).encode() + b"\n\n",
        b"subtree 0 1\n" + b64encode(b"\0" * 32).encode() + b"\n\n\nnote\n",
        b"subtree 0 1\n"
        + b64encode(b"\0" * 32).encode()
        + b"\n"
        + b"\n".join([b64encode(b"\1" * 32).encode()] * 64)
        + b"\n\nnote\n",
    ],
)
def test_sign_subtree_request_malformed(body: bytes) -> None:
    with pytest.raises(MalformedError):
        SignSubtreeRequest.parse(body)


async def cosigned_reference(env: Env, log: Log, size: int) -> bytes:
    """A reference checkpoint carrying only this witness's cosignatures (as the spec
    recommends), obtained through add-checkpoint."""
    stored = env.state.latest(log.origin)
    old = 0 if stored is None else stored.size
    r = await env.post(log.request(old, size))
    assert r.status == 200, r.body
    return log.text(size) + b"\n" + r.body


def subtree_request(log: Log, start: int, end: int, size: int, note: bytes) -> bytes:
    """A correct sign-subtree request for [start, end) against ``note`` (tree of ``size``)."""
    hashes = log.leaves[:size]
    return SignSubtreeRequest(
        start, end, root(hashes[start:end]), tuple(subtree_proof(start, end, hashes)), note
    ).format()


def subtree_log(origin: str = ORIGIN, n: int = 14) -> Log:
    return Log(origin, leaves=[leaf(origin, i) for i in range(n)])


def test_sign_subtree_success(backend: Backend) -> None:
    async def t(env: Env) -> None:
        assert env.ml is not None
        log = env.add(subtree_log())
        note = await cosigned_reference(env, log, 14)
        verifier = SubtreeV1Verifier(WITNESS, env.ml.public_key)
        hashes = log.leaves
        for start, end in [(8, 13), (4, 8), (0, 14), (0, 5), (13, 14), (12, 14), (0, 8)]:
            r = await env.post(subtree_request(log, start, end, 14, note), "/sign-subtree")
            assert r.status == 200, (start, end, r.body)
            [sig] = parse_cosignature_response(r.body)
            assert (sig.name, sig.key_id) == (WITNESS, env.ml.key_id)
            assert timestamp_of(sig) == 0  # edge case 10: sign-subtree requires 0
            assert sig.sig[:8] == b"\x00" * 8
            subtree = Subtree(ORIGIN, start, end, root(hashes[start:end]))
            assert verifier.verify_subtree(subtree, sig.sig)
            assert not verifier.verify_subtree(Subtree(ORIGIN, start, end, leaf("x", 0)), sig.sig)
        # The reference may also carry the log's signature (unknown lines are ignored).
        text, log_sigs = parse_note(log.note(14))
        _, cosigs = parse_note(note)
        both = text + b"\n" + b"".join(s.line() for s in [*log_sigs, *cosigs])
        r = await env.post(subtree_request(log, 8, 13, 14, both), "/sign-subtree")
        assert r.status == 200, r.body
        # An older cosigned checkpoint works too (stateless): size 13, subtree [8, 13).
        old_note = (
            log.text(13)
            + b"\n"
            + Signature(WITNESS, env.ed.key_id, env.ed.sign_at(log.text(13), T0 - 100)).line()
        )
        r = await env.post(subtree_request(log, 8, 13, 13, old_note), "/sign-subtree")
        assert r.status == 200, r.body

    run(t, mldsa=True, backend=backend)


def test_sign_subtree_statuses(backend: Backend) -> None:
    async def t(env: Env) -> None:
        log = env.add(subtree_log())
        note = await cosigned_reference(env, log, 14)
        hashes = log.leaves

        async def post(body: bytes) -> Resp:
            return await env.post(body, "/sign-subtree")

        # 400: invalid subtree, empty subtree, end beyond the checkpoint, too many lines.
        for start, end in [(1, 3), (8, 8), (2, 6)]:
            raw = f"subtree {start} {end}\n{b64encode(hashes[0])}\n\n".encode() + note
            r = await post(raw)
            assert (r.status, r.body) == (400, b"[%d, %d) is not a valid subtree\n" % (start, end))
        r = await post(SignSubtreeRequest(8, 16, root(hashes[8:14]), (), note).format())
        assert (r.status, r.body) == (400, b"subtree end 16 is beyond the checkpoint's size 14\n")
        raw = (
            b"subtree 8 13\n"
            + b64encode(hashes[0]).encode()
            + b"\n"
            + b"\n".join([b64encode(hashes[1]).encode()] * 64)
            + b"\n\n"
            + note
        )
        assert (await post(raw)).status == 400
        # 404: unknown origin (checked before any signature).
        stranger = subtree_log("example.com/stranger")
        r = await post(subtree_request(stranger, 8, 13, 14, stranger.note(14)))
        assert r.status == 404
        # 403: only the log's signature; a tampered cosignature line of ours.
        r = await post(subtree_request(log, 8, 13, 14, log.note(14)))
        assert (r.status, r.body) == (403, b"note has no verifiable signatures\n")
        text, [ed_sig, ml_sig] = parse_note(note)
        bad = Signature(ed_sig.name, ed_sig.key_id, ed_sig.sig[:-1] + bytes([ed_sig.sig[-1] ^ 1]))
        r = await post(subtree_request(log, 8, 13, 14, text + b"\n" + bad.line() + ml_sig.line()))
        assert r.status == 403 and r.body.startswith(b"invalid signature")
        # A cosignature of ours on another checkpoint text does not vouch for this one.
        forged_text = Checkpoint(ORIGIN, 14, leaf("x", 0)).format()
        r = await post(subtree_request(log, 8, 13, 14, forged_text + b"\n" + ed_sig.line()))
        assert r.status == 403
        # 422: a wrong proof, a wrong subtree hash.
        proof = subtree_proof(8, 13, hashes)
        proof[1] = leaf("x", 1)
        r = await post(SignSubtreeRequest(8, 13, root(hashes[8:13]), tuple(proof), note).format())
        assert r.status == 422
        r = await post(
            SignSubtreeRequest(
                8, 13, leaf("x", 2), tuple(subtree_proof(8, 13, hashes)), note
            ).format()
        )
        assert r.status == 422
        # [0, 14) is the checkpoint itself: empty proof, the root as the hash.
        r = await post(SignSubtreeRequest(0, 14, root(hashes), (leaf("x", 3),), note).format())
        assert r.status == 422

    run(t, mldsa=True, backend=backend)


def test_sign_subtree_needs_an_mldsa_signer() -> None:
    async def t(env: Env) -> None:
        log = env.add(subtree_log())
        note = await cosigned_reference(env, log, 14)
        r = await env.post(subtree_request(log, 8, 13, 14, note), "/sign-subtree")
        assert r.status == 404

    run(t)


def test_sign_subtree_with_prefix() -> None:
    async def t(env: Env) -> None:
        log = env.add(subtree_log())
        r0 = await env.post(log.request(0, 14), "/w/add-checkpoint")
        assert r0.status == 200
        note = log.text(14) + b"\n" + r0.body
        assert (await env.post(subtree_request(log, 4, 8, 14, note), "/sign-subtree")).status == 404
        r = await env.post(subtree_request(log, 4, 8, 14, note), "/w/sign-subtree")
        assert r.status == 200, r.body

    run(t, mldsa=True, submission_prefix="/w")


# --- found by review: evidence on a fresh read, lines in our name we never signed, lock order ---


def test_evidence_is_kept_when_the_refusal_is_decided_on_a_fresh_read(
    shared_backend: Backend,
) -> None:
    """The first request for a log after a restart (or on a worker that never cached it) is
    decided on a fresh read: a fork refused there is kept as evidence too — both the 422 of a
    second root at the stored size and the 409 that carries one."""

    async def main() -> None:
        clock = FakeClock()
        log = Log().grow(8)
        fork = Log(leaves=[leaf("fork", i) for i in range(5)])
        s1 = shared_backend.open()
        s1.add_log(ORIGIN, (log.vkey,))
        async with serve(make_app(s1, witness_signers(False), name=WITNESS, clock=clock)) as c:
            assert (await fetch(c, "POST", "/add-checkpoint", log.request(0, 5))).status == 200
        other = Log(leaves=[leaf("other", i) for i in range(5)])
        for body, status, reason in [
            (fork.request(5, 5), 422, "two different roots for size 5"),
            (other.request(2, 5, proof=[leaf("z", 0)] * 3), 409, "two different roots for size 5"),
        ]:
            # A new instance each time: its first read of the log is a fresh one.
            s = shared_backend.open()
            before = len(s.evidence(ORIGIN))
            async with serve(make_app(s, witness_signers(False), name=WITNESS, clock=clock)) as c:
                r = await fetch(c, "POST", "/add-checkpoint", body)
            assert r.status == status, r.body
            kept = s.evidence(ORIGIN)
            assert len(kept) == before + 1, (status, kept)
            assert kept[0].request == body
            assert kept[0].reason.startswith(reason), kept[0].reason

    asyncio.run(main())


def test_lines_in_our_name_we_never_signed_are_not_repeated(tmp_path: Path) -> None:
    """import-state checks a note with the log's keys only, so it may bring lines in this
    witness's name that do not verify. The server must neither repeat them to a re-submission
    (the replay path) nor take its timestamp floor from them."""
    from witness.sqlstate import format_state

    async def main() -> None:
        backend = Backend("sqlite", tmp_path)
        state = backend.open()
        log = Log().grow(6)
        ed = witness_signers(False)[0]
        future = T0 + 10**6
        bogus = Signature(WITNESS, ed.key_id, future.to_bytes(8, "big") + b"\x00" * 64)
        _, log_sigs = parse_note(log.note(5))
        note = format_note(log.text(5), [*log_sigs, bogus])
        root = log.tree.root(5)
        entry = (LogConfig(ORIGIN, (log.vkey,)), Cosigned(ORIGIN, 5, root, note, T0 - 100))
        state.import_state(format_state([entry]))
        clock = FakeClock()
        verifier = CosignatureV1Verifier(WITNESS, ed.public_key)
        async with serve(make_app(state, witness_signers(False), name=WITNESS, clock=clock)) as c:
            for old, size in [(5, 5), (5, 6)]:
                r = await fetch(c, "POST", "/add-checkpoint", log.request(old, size))
                assert r.status == 200, r.body
                [sig] = parse_cosignature_response(r.body)
                assert verifier.verify(log.text(size), sig.sig), (old, size)
                assert timestamp_of(sig) == T0, (old, size)  # the clock's, not the bogus line's
        backend.close()

    asyncio.run(main())


def test_group_commit_takes_row_locks_in_origin_order(backend: Backend) -> None:
    """Every batch reaches the state in origin order (two processes on one PostgreSQL then
    queue on their row locks instead of deadlocking), and each request still gets its own
    verdict."""
    n = 6

    async def t(env: Env) -> None:
        logs = group_logs(env, n)
        # Arrival order is the reverse of origin order.
        rs = await leader_then_rest(env, [log.request(0, 3) for log in reversed(logs)], None)
        assert all(r.status == 200 for r in rs), [r.body for r in rs]
        multi = [b for b in env.state.batches if len(b) > 1]
        assert multi, env.state.batches
        assert all(b == sorted(b) for b in env.state.batches), env.state.batches
        for log, r in zip(reversed(logs), rs, strict=True):
            check_cosignatures(env, r.body, log.text(3))
            stored = env.state.latest(log.origin)
            assert stored is not None and stored.note == log.note(3) + r.body

    run(t, backend=backend)
