"""The witness client (witness/client.py) against real witness servers on 127.0.0.1.

Each test starts the aiohttp witness (witness/server.py, over a SQLite state in tmp_path) on an
ephemeral port, in an event loop of its own in a background thread (:class:`ServerThread`),
and drives it with the synchronous client. Misbehaving witnesses are the real server with an
extra middleware (a delay, a rewritten response) or a canned-response app where the real one
never gives such an answer (a malformed 409, a 429 with a date, a 500).

Covered: the 200 path (one and two keys), verification of the returned lines (unknown keys ignored,
bad signatures, zero and future timestamps refused: https://c2sp.org/tlog-witness, edge case 10),
the 409 recovery loop (witness behind and ahead of the client's memory, bounded retries, the alarm
when the witness holds more than the log, a witness newer than the note), the strict 409 body (edge
case 12), the status mapping (400/403/404/405 rejected, 422 alarm, 429 busy,
408/5xx/refused/timeout unavailable), the monitoring GET, and gather: 2-of-3 with a witness down
and one slow, early stop, the deadline, no policy, remembered sizes, alarms.

:class:`ServerThread`, :class:`FakeLog` and :func:`start_witness` are reused by
tests/witness/test_conformance.py and tests/store/test_publish.py.
"""

from __future__ import annotations

import asyncio
import hashlib
import socket
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import format_datetime
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.typedefs import Handler, Middleware
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.servers import ServerThread
from tlog.checkpoint import Checkpoint
from tlog.cosignature import CosignatureV1Signer, SubtreeV1Signer, timestamp_of
from tlog.encoding import b64encode
from tlog.errors import MalformedError, UsageError, VerificationError
from tlog.keys import format_vkey
from tlog.merkle import MemoryHashStore, consistency_proof, leaf_hash
from tlog.note import Ed25519Signer, Signature, open_note, parse_note, sign_note
from tlog.policy import Policy
from tlog.witnessproto import format_cosignature_response
from witness.client import (
    GatherResult,
    WitnessAlarm,
    WitnessBadResponse,
    WitnessBusy,
    WitnessClient,
    WitnessConflict,
    WitnessRejected,
    WitnessUnavailable,
    gather,
    merge_cosignatures,
    verify_cosignature_response,
)
from witness.errors import http_status
from witness.open import open_state
from witness.server import make_app
from witness.state import WitnessState

ORIGIN = "example.com/client-test-log"
LOG_SEED = hashlib.sha256(b"client test log").digest()


# --- servers in a background event loop ---------------------------------------------------------


@pytest.fixture
def servers() -> Iterator[ServerThread]:
    with ServerThread() as s:
        yield s


def refused_url() -> str:
    """A 127.0.0.1 URL where nothing listens (connection refused)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return f"http://127.0.0.1:{port}"


# --- a test log ---------------------------------------------------------------------------------


class FakeLog:
    """A Merkle log of 64 deterministic leaves with an Ed25519 key named after its origin.

    ``fork`` changes the leaves (same origin and key): a split view of the same log.
    """

    def __init__(self, origin: str = ORIGIN, seed: bytes = LOG_SEED, fork: bytes = b"") -> None:
        self.origin = origin
        self.signer = Ed25519Signer(origin, seed)
        self.vkey = format_vkey(self.signer.verifier())
        self.tree = MemoryHashStore()
        self.tree.extend(leaf_hash(b"%s entry %d" % (fork, i)) for i in range(64))

    def text(self, size: int) -> bytes:
        return Checkpoint(self.origin, size, self.tree.root(size)).format()

    def note(self, size: int) -> bytes:
        return sign_note(self.text(size), [self.signer])

    def prove(self, old: int, size: int) -> list[bytes]:
        return [] if old in (0, size) else consistency_proof(old, size, self.tree)


# --- witnesses ----------------------------------------------------------------------------------


@dataclass
class Witness:
    """A running witness: its URL, signers, vkeys and state."""

    url: str
    name: str
    signers: list[CosignatureV1Signer | SubtreeV1Signer]
    state: WitnessState
    requests: list[int] = field(default_factory=list)  # add-checkpoint statuses, in order

    @property
    def vkeys(self) -> list[str]:
        return [format_vkey(s.verifier()) for s in self.signers]

    @property
    def vkey(self) -> str:
        return self.vkeys[0]

    def client(self, **kw: object) -> WitnessClient:
        return WitnessClient(self.url, self.vkeys, **kw)  # type: ignore[arg-type]


def start_witness(
    servers: ServerThread,
    tmp_path: Path,
    name: str,
    logs: Sequence[FakeLog | tuple[str, str]],
    *,
    middlewares: Sequence[Middleware] = (),
    outer: Sequence[Middleware] = (),
    mldsa: bool = False,
    qpd: int | None = None,
    submission_prefix: str = "",
    monitoring_prefix: str = "",
) -> Witness:
    """A witness ``name`` on a fresh SQLite state following ``logs`` ((origin, vkey) or FakeLog).

    ``middlewares`` run inside the server's own (closest to the handler), in order; ``outer``
    ones outside it (they see its error responses). The URL is the submission prefix.
    """
    seed = hashlib.sha256(b"witness seed " + name.encode()).digest()
    signers: list[CosignatureV1Signer | SubtreeV1Signer] = [CosignatureV1Signer(name, seed)]
    if mldsa:
        signers.append(SubtreeV1Signer(name, hashlib.sha256(b"ml " + seed).digest()))
    db = tmp_path / f"witness-{hashlib.sha256(name.encode()).hexdigest()[:8]}.db"
    state = open_state(db=str(db))
    for log in logs:
        origin, vkey = (log.origin, log.vkey) if isinstance(log, FakeLog) else log
        state.add_log(origin, (vkey,), qpd)
    app = make_app(
        state,
        signers,
        name=name,
        status_endpoints=False,
        submission_prefix=submission_prefix,
        monitoring_prefix=monitoring_prefix,
    )
    w = Witness("", name, signers, state)

    @web.middleware
    async def count(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            resp = await handler(request)
        except web.HTTPException as e:
            w.requests.append(e.status)
            raise
        except Exception as e:
            w.requests.append(http_status(e))
            raise
        w.requests.append(resp.status)
        return resp

    app.middlewares.append(count)
    for m in middlewares:
        app.middlewares.append(web.middleware(m))
    for i, m in enumerate(outer):
        app.middlewares.insert(i, web.middleware(m))
    w.url = servers.serve(app) + submission_prefix
    return w


def delay(seconds: float) -> Middleware:
    """A middleware that answers only after ``seconds``."""

    async def mw(request: web.Request, handler: Handler) -> web.StreamResponse:
        await asyncio.sleep(seconds)
        return await handler(request)

    return mw


def rewrite_200(transform: Callable[[bytes], bytes]) -> Middleware:
    """A middleware that rewrites the body of every 200 add-checkpoint response."""

    async def mw(request: web.Request, handler: Handler) -> web.StreamResponse:
        resp = await handler(request)
        if resp.status == 200 and request.path.endswith("/add-checkpoint"):
            assert isinstance(resp, web.Response) and isinstance(resp.body, bytes)
            resp.body = transform(resp.body)
        return resp

    return mw


def canned(
    servers: ServerThread, answers: Sequence[tuple[int, bytes, dict[str, str]]]
) -> tuple[str, list[bytes]]:
    """An app that answers each POST with the next canned (status, body, headers), repeating
    the last one; returns its URL and the list of request bodies it received."""
    bodies: list[bytes] = []

    async def handler(request: web.Request) -> web.Response:
        bodies.append(await request.read())
        status, body, headers = answers[min(len(bodies), len(answers)) - 1]
        return web.Response(status=status, body=body, headers=headers)

    app = web.Application()
    app.router.add_post("/add-checkpoint", handler)
    return servers.serve(app), bodies


@pytest.fixture
def log() -> FakeLog:
    return FakeLog()


def advance(w: Witness, log: FakeLog, size: int) -> None:
    """Bring witness ``w`` to ``size`` with a client of its own (from whatever it holds)."""
    with w.client() as c:
        c.submit(log.note(size), lambda old: log.prove(old, size), my_size=size)


def cosigned_by(note: bytes, *witnesses: Witness) -> None:
    """``note`` opens with each witness's keys."""
    for w in witnesses:
        opened = open_note(note, [s.verifier() for s in w.signers])
        assert len(opened.sigs) == len(w.signers)


# --- the 200 path -------------------------------------------------------------------------------


def test_add_checkpoint_first_cosignature(
    servers: ServerThread, tmp_path: Path, log: FakeLog
) -> None:
    w = start_witness(servers, tmp_path, "w1.example", [log])
    note = log.note(5)
    before = int(time.time())
    with w.client() as c:
        sigs = c.add_checkpoint(note, 0, [])
        assert c.known_size(ORIGIN) == 5
    assert [(s.name, s.key_id) for s in sigs] == [("w1.example", w.signers[0].key_id)]
    assert before <= timestamp_of(sigs[0]) <= int(time.time())
    cosigned = merge_cosignatures(note, sigs)
    open_note(cosigned, [log.signer.verifier()])
    cosigned_by(cosigned, w)
    # The witness stored what it cosigned.
    latest = w.state.latest(ORIGIN)
    assert latest is not None and latest.size == 5


def test_two_keys_and_key_selection(servers: ServerThread, tmp_path: Path, log: FakeLog) -> None:
    # A witness with an Ed25519 and an ML-DSA-44 key returns two lines; a client that knows only
    # the Ed25519 key keeps only that line (the other is from an unknown key).
    w = start_witness(servers, tmp_path, "w2.example", [log], mldsa=True)
    with w.client() as c:
        sigs = c.add_checkpoint(log.note(3), 0, [])
    assert sorted(s.key_id for s in sigs) == sorted(s.key_id for s in w.signers)
    with WitnessClient(w.url, [w.vkeys[0]]) as c:
        sigs = c.submit(log.note(4), lambda old: log.prove(old, 4), my_size=4)
    assert [s.key_id for s in sigs] == [w.signers[0].key_id]


def test_monitoring_get(servers: ServerThread, tmp_path: Path, log: FakeLog) -> None:
    w = start_witness(servers, tmp_path, "w1.example", [log])
    with w.client() as c:
        assert c.get_checkpoint(ORIGIN) is None
        c.add_checkpoint(log.note(2), 0, [])
        served = c.get_checkpoint(ORIGIN)
        assert c.get_checkpoint("example.com/other") is None
    assert served is not None
    open_note(served, [log.signer.verifier()])
    cosigned_by(served, w)


# --- the 409 recovery loop ------------------------------------------------------------------------


def test_submit_witness_behind_from_nothing_known(
    servers: ServerThread, tmp_path: Path, log: FakeLog
) -> None:
    # The witness holds 4; a client that knows nothing sends old 0, learns 4 from the 409 and
    # proves 4 -> 9.
    w = start_witness(servers, tmp_path, "w1.example", [log])
    advance(w, log, 4)
    w.requests.clear()
    asked: list[int] = []

    def prover(old: int) -> list[bytes]:
        asked.append(old)
        return log.prove(old, 9)

    with w.client() as c:
        sigs = c.submit(log.note(9), prover, my_size=9)
        assert c.known_size(ORIGIN) == 9
    assert asked == [4]
    assert w.requests == [409, 200]
    cosigned_by(merge_cosignatures(log.note(9), sigs), w)


@pytest.mark.parametrize("known_old", [2, 7])
def test_submit_known_old_wrong_either_way(
    servers: ServerThread, tmp_path: Path, log: FakeLog, known_old: int
) -> None:
    # The client believes 2 (the witness is ahead of it) or 7 (the witness is behind it); the
    # witness holds 4 either way, and the 409 corrects the client.
    w = start_witness(servers, tmp_path, "w1.example", [log])
    advance(w, log, 4)
    w.requests.clear()
    with w.client() as c:
        c.submit(log.note(9), lambda old: log.prove(old, 9), known_old=known_old, my_size=9)
    assert w.requests == [409, 200]


def test_submit_uses_the_remembered_size(
    servers: ServerThread, tmp_path: Path, log: FakeLog
) -> None:
    w = start_witness(servers, tmp_path, "w1.example", [log])
    with w.client() as c:
        c.submit(log.note(3), lambda old: log.prove(old, 3), my_size=3)
        c.submit(log.note(8), lambda old: log.prove(old, 8), my_size=8)
        assert c.known_sizes() == {ORIGIN: 8}
        # The same checkpoint again: old = size = 8, empty proof, a fresh 200 (edge case 14).
        c.submit(log.note(8), lambda old: log.prove(old, 8), my_size=8)
    assert w.requests == [200, 200, 200]
    # A size set from outside (a persisted one) is used too.
    w.requests.clear()
    with w.client() as c:
        c.set_known_size(ORIGIN, 8)
        c.submit(log.note(10), lambda old: log.prove(old, 10), my_size=10)
        with pytest.raises(UsageError):
            c.set_known_size(ORIGIN, -1)
    assert w.requests == [200]


def test_submit_alarm_when_witness_holds_more_than_the_log(
    servers: ServerThread, tmp_path: Path, log: FakeLog
) -> None:
    # A local rollback: the witness cosigned 9, the log now claims to be at 5.
    w = start_witness(servers, tmp_path, "w1.example", [log])
    advance(w, log, 9)
    with w.client() as c, pytest.raises(WitnessAlarm) as e:
        c.submit(log.note(5), lambda old: log.prove(old, 5), my_size=5)
    assert e.value.size == 9 and e.value.status is None
    assert "larger tree than this log" in str(e.value)
    assert w.url in str(e.value)
    # my_size may be read when needed: a log that grew to 12 meanwhile is not an alarm, but the
    # witness is newer than this note.
    with w.client() as c, pytest.raises(WitnessConflict) as c_err:
        c.submit(log.note(5), lambda old: log.prove(old, 5), my_size=lambda: 12)
    assert c_err.value.size == 9


def test_submit_retries_are_bounded(servers: ServerThread) -> None:
    log = FakeLog()
    url, bodies = canned(servers, [(409, b"3\n", {"Content-Type": "text/x.tlog.size"})])
    with WitnessClient(url, [_witness_key("w.example")]) as c, pytest.raises(WitnessConflict) as e:
        c.submit(log.note(9), lambda old: log.prove(old, 9), my_size=9, max_retries=2)
    assert e.value.size == 3 and "after 2 retries" in str(e.value)
    assert [b.split(b"\n", 1)[0] for b in bodies] == [b"old 0", b"old 3", b"old 3"]
    # The proof lines sent from 3 are the consistency proof 3 -> 9.
    assert bodies[1].split(b"\n\n", 1)[0].split(b"\n")[1:] == [
        b64encode(h).encode() for h in log.prove(3, 9)
    ]


def test_submit_preconditions(servers: ServerThread, tmp_path: Path, log: FakeLog) -> None:
    w = start_witness(servers, tmp_path, "w1.example", [log])
    advance(w, log, 4)
    with w.client() as c:
        with pytest.raises(UsageError, match="smaller than the note"):
            c.submit(log.note(6), lambda old: log.prove(old, 6), my_size=5)
        with pytest.raises(UsageError):
            c.submit(log.note(6), lambda old: log.prove(old, 6), my_size=6, max_retries=-1)
        with pytest.raises(UsageError):
            c.add_checkpoint(log.note(6), -1, [])
        with pytest.raises(UsageError):
            c.add_checkpoint(log.note(6), 4, [b"\x00" * 31])
        with pytest.raises(UsageError):
            c.add_checkpoint(log.note(6), 4, [b"\x00" * 32] * 64)
        with pytest.raises(MalformedError):
            c.add_checkpoint(b"not a note", 0, [])
    with pytest.raises(UsageError):
        WitnessClient("ftp://x", [w.vkey])
    with pytest.raises(UsageError):
        WitnessClient(w.url + "?q=1", [w.vkey])
    with pytest.raises(UsageError):
        WitnessClient(w.url, [])
    with pytest.raises(UsageError):
        WitnessClient(w.url, [w.vkey, w.vkey])
    with pytest.raises(UsageError):
        WitnessClient(w.url, [w.vkey], timeout=0)
    # A trailing slash is dropped; a 0x01 vkey is read as the cosignature/v1 key.
    plain = format_vkey(Ed25519Signer(w.name, w.signers[0].seed).verifier())
    with WitnessClient(w.url + "/", [plain]) as c:
        assert c.url == w.url
        assert c.verifiers[0].key_id == w.signers[0].key_id


def test_error_constructors() -> None:
    # The positional arguments are what each error is about; the URL prefixes the message.
    e = WitnessConflict(5)
    assert (e.size, e.url, str(e)) == (5, "", "witness holds size 5 (409)")
    r = WitnessRejected(404, b"unknown log\n", url="http://w")
    assert (r.status, r.body, str(r)) == (
        404,
        b"unknown log\n",
        "http://w: rejected with 404: 'unknown log'",
    )
    assert r.reason == "rejected with 404: 'unknown log'"
    b = WitnessBusy(30)
    assert b.retry_after == 30 and "retry after 30 s" in str(b)
    a = WitnessAlarm("fork", status=422)
    assert isinstance(a, VerificationError) and a.status == 422 and a.size is None
    assert WitnessUnavailable("down", status=503).status == 503
    assert WitnessBadResponse("odd", status=201).status == 201


# --- alarms and rejections ----------------------------------------------------------------------


def test_422_same_size_other_root_is_an_alarm(
    servers: ServerThread, tmp_path: Path, log: FakeLog
) -> None:
    w = start_witness(servers, tmp_path, "w1.example", [log])
    advance(w, log, 5)
    fork = FakeLog(fork=b"fork")
    with w.client() as c:
        with pytest.raises(WitnessAlarm) as e:
            c.add_checkpoint(fork.note(5), 5, [])
        assert e.value.status == 422
        # The recovery loop gets there too: 409 5, then old 5 with the fork's root.
        with pytest.raises(WitnessAlarm) as e2:
            c.submit(fork.note(5), lambda old: fork.prove(old, 5), my_size=5, known_old=0)
        assert e2.value.status == 422


def test_422_bad_proof_is_an_alarm(servers: ServerThread, tmp_path: Path, log: FakeLog) -> None:
    w = start_witness(servers, tmp_path, "w1.example", [log])
    advance(w, log, 5)
    proof = log.prove(5, 11)
    proof[0] = hashlib.sha256(b"wrong").digest()
    with w.client() as c, pytest.raises(WitnessAlarm) as e:
        c.submit(log.note(11), lambda old: proof, my_size=11, known_old=5)
    assert e.value.status == 422 and e.value.body != b""


def test_rejections(servers: ServerThread, tmp_path: Path, log: FakeLog) -> None:
    w = start_witness(servers, tmp_path, "w1.example", [log])
    other = FakeLog("example.com/not-configured")
    wrong_key = FakeLog(seed=hashlib.sha256(b"not the log key").digest())
    with w.client() as c:
        with pytest.raises(WitnessRejected) as e:
            c.add_checkpoint(other.note(3), 0, [])
        assert e.value.status == 404
        with pytest.raises(WitnessRejected) as e:
            c.add_checkpoint(wrong_key.note(3), 0, [])
        assert e.value.status == 403
        with pytest.raises(WitnessRejected) as e:
            c.add_checkpoint(log.note(3), 4, [])  # old > size
        assert e.value.status == 400
        assert "400" in str(e.value) and "larger than the checkpoint size" in str(e.value)
    # A wrong URL (the path has no add-checkpoint) is a configuration error too.
    with WitnessClient(w.url + "/nowhere", [w.vkey]) as c, pytest.raises(WitnessRejected) as e:
        c.add_checkpoint(log.note(3), 0, [])
    assert e.value.status == 404


def test_429_from_the_quota(servers: ServerThread, tmp_path: Path, log: FakeLog) -> None:
    w = start_witness(servers, tmp_path, "w1.example", [log], qpd=1)
    with w.client() as c:
        c.add_checkpoint(log.note(1), 0, [])
        with pytest.raises(WitnessBusy) as e:
            c.add_checkpoint(log.note(2), 1, log.prove(1, 2))
    assert e.value.retry_after is not None and 1 <= e.value.retry_after <= 86400


def test_canned_statuses(servers: ServerThread) -> None:
    log = FakeLog()
    note = log.note(4)
    key = _witness_key("w.example")
    when = datetime.fromtimestamp(time.time() + 120, UTC)
    cases: list[tuple[tuple[int, bytes, dict[str, str]], type[Exception], str]] = [
        ((429, b"slow down\n", {"Retry-After": "30"}), WitnessBusy, "retry after 30"),
        ((429, b"", {"Retry-After": format_datetime(when, usegmt=True)}), WitnessBusy, "retry"),
        ((429, b"", {"Retry-After": "soon"}), WitnessBusy, "busy (429)"),
        ((500, b"boom\n", {}), WitnessUnavailable, "500"),
        ((503, b"", {}), WitnessUnavailable, "503"),
        ((408, b"", {}), WitnessUnavailable, "408"),
        ((405, b"", {}), WitnessRejected, "405"),
        ((413, b"", {}), WitnessRejected, "413"),
        ((201, b"", {}), WitnessBadResponse, "unexpected status 201"),
        ((302, b"", {"Location": "http://example.com/"}), WitnessBadResponse, "302"),
        ((200, b"", {}), WitnessBadResponse, "malformed 200"),
        ((200, b"hello\n", {}), WitnessBadResponse, "malformed 200"),
        ((200, b"\xff\n", {}), WitnessBadResponse, "malformed 200"),
    ]
    for answer, exc, text in cases:
        url, _ = canned(servers, [answer])
        with WitnessClient(url, [key]) as c, pytest.raises(exc) as e:
            c.add_checkpoint(note, 0, [])
        assert text in str(e.value), (answer, str(e.value))
        if isinstance(e.value, WitnessBusy) and answer[2].get("Retry-After", "").isdigit():
            assert e.value.retry_after == 30
        if isinstance(e.value, WitnessBusy) and "GMT" in answer[2].get("Retry-After", ""):
            assert e.value.retry_after is not None and 100 <= e.value.retry_after <= 121


def test_edge_12_409_body_parsed_strictly(servers: ServerThread) -> None:
    # tlog-witness: a 409 whose Content-Type is not text/x.tlog.size or whose body is not
    # exactly <decimal> LF is an error, never a size to act on.
    log = FakeLog()
    key = _witness_key("w.example")
    good = {"Content-Type": "text/x.tlog.size"}
    bad_answers: list[tuple[int, bytes, dict[str, str]]] = [
        (409, b"5\n", {"Content-Type": "text/plain"}),
        (409, b"5\n", {}),
        (409, b"05\n", good),
        (409, b"5", good),
        (409, b"+5\n", good),
        (409, b"5\r\n", good),
        (409, b" 5\n", good),
        (409, b"", good),
    ]
    for answer in bad_answers:
        url, _ = canned(servers, [answer])
        with WitnessClient(url, [key]) as c, pytest.raises(WitnessBadResponse) as e:
            c.add_checkpoint(log.note(9), 0, [])
        assert "malformed 409" in str(e.value), answer
    # Parameters of the media type are ignored; case too.
    for ctype in ("text/x.tlog.size; charset=utf-8", "TEXT/X.TLOG.SIZE"):
        url, _ = canned(servers, [(409, b"5\n", {"Content-Type": ctype})])
        with WitnessClient(url, [key]) as c, pytest.raises(WitnessConflict) as conflict:
            c.add_checkpoint(log.note(9), 0, [])
        assert conflict.value.size == 5


def test_unavailable_refused_and_timeout(
    servers: ServerThread, tmp_path: Path, log: FakeLog
) -> None:
    key = _witness_key("w.example")
    with (
        WitnessClient(refused_url(), [key]) as c,
        pytest.raises(WitnessUnavailable, match="request failed"),
    ):
        c.add_checkpoint(log.note(3), 0, [])
    w = start_witness(servers, tmp_path, "slow.example", [log], middlewares=[delay(3)])
    started = time.monotonic()
    with w.client(timeout=0.3) as c, pytest.raises(WitnessUnavailable, match="no answer within"):
        c.add_checkpoint(log.note(3), 0, [])
    assert time.monotonic() - started < 2
    # A deadline already passed fails before any request.
    with w.client() as c, pytest.raises(WitnessUnavailable, match="deadline passed"):
        c.submit(log.note(3), lambda old: [], my_size=3, deadline=time.monotonic() - 1)


# --- verifying the returned lines ---------------------------------------------------------------


def _witness_key(name: str) -> str:
    return format_vkey(CosignatureV1Signer(name, hashlib.sha256(name.encode()).digest()).verifier())


def _line(name: str, key_id: int, sig: bytes) -> bytes:
    return Signature(name, key_id, sig).line()


def _own_line(w: Witness, text: bytes, at: int) -> bytes:
    """A signature line of ``w``'s own key over ``text`` with timestamp ``at``."""
    s = w.signers[0]
    return _line(s.name, s.key_id, s.sign_at(text, at))


def test_unknown_key_lines_are_ignored(servers: ServerThread, tmp_path: Path, log: FakeLog) -> None:
    # Lines from another witness, and a line with this witness's name but another key ID,
    # surround the genuine one: the client returns the genuine line only (CS-5, TW-21).
    stranger = CosignatureV1Signer("other.example", b"\x07" * 32)
    holder: dict[str, bytes] = {}

    def add_noise(body: bytes) -> bytes:
        text = holder["text"]
        foreign = _line(stranger.name, stranger.key_id, stranger.sign_at(text, 1_700_000_000))
        wrong_id = _line("w1.example", 0xDEADBEEF, b"\x00" * 72)
        return foreign + body + wrong_id

    w = start_witness(servers, tmp_path, "w1.example", [log], middlewares=[rewrite_200(add_noise)])
    holder["text"] = log.text(6)
    with w.client() as c:
        sigs = c.add_checkpoint(log.note(6), 0, [])
    assert [(s.name, s.key_id) for s in sigs] == [("w1.example", w.signers[0].key_id)]


def _rewritten(
    servers: ServerThread, tmp_path: Path, log: FakeLog, make: Callable[[Witness, bytes], bytes]
) -> tuple[Witness, WitnessClient]:
    """A witness whose 200 body is replaced by ``make(witness, text of size 6)``."""
    ref: list[Witness] = []
    w = start_witness(
        servers,
        tmp_path,
        "w1.example",
        [log],
        middlewares=[rewrite_200(lambda body: make(ref[0], log.text(6)))],
    )
    ref.append(w)
    return w, w.client()


def _assert_refused(
    servers: ServerThread,
    tmp_path: Path,
    log: FakeLog,
    make: Callable[[Witness, bytes], bytes],
    match: str,
) -> None:
    """The client refuses the 200 body ``make`` gives (see :func:`_rewritten`), saying ``match``."""
    _, c = _rewritten(servers, tmp_path, log, make)
    with c, pytest.raises(WitnessBadResponse, match=match):
        c.add_checkpoint(log.note(6), 0, [])


def test_edge_10_zero_timestamp_rejected_by_client(
    servers: ServerThread, tmp_path: Path, log: FakeLog
) -> None:
    # tlog-witness: the cosignatures of a 200 must carry a non-zero timestamp. The line below
    # is a valid signature of the witness's key at time 0: still refused.
    def zero(w: Witness, text: bytes) -> bytes:
        return _own_line(w, text, 0)

    _assert_refused(servers, tmp_path, log, zero, "zero timestamp")


def test_future_timestamp_rejected(servers: ServerThread, tmp_path: Path, log: FakeLog) -> None:
    def future(w: Witness, text: bytes) -> bytes:
        return _own_line(w, text, int(time.time()) + 3600)

    _assert_refused(servers, tmp_path, log, future, "more than 60 s after now")


def test_bad_signature_and_no_known_line_rejected(
    servers: ServerThread, tmp_path: Path, log: FakeLog
) -> None:
    def flipped(w: Witness, text: bytes) -> bytes:
        s = w.signers[0]
        sig = bytearray(s.sign_at(text, int(time.time())))
        sig[-1] ^= 1
        return _line(s.name, s.key_id, bytes(sig))

    _assert_refused(servers, tmp_path, log, flipped, "does not verify")


def test_response_with_only_unknown_lines_rejected(
    servers: ServerThread, tmp_path: Path, log: FakeLog
) -> None:
    def other(w: Witness, text: bytes) -> bytes:
        s = CosignatureV1Signer("someone.else", b"\x01" * 32)
        return _line(s.name, s.key_id, s.sign_at(text, int(time.time())))

    _assert_refused(servers, tmp_path, log, other, "no line from the configured key")


def test_two_different_lines_from_one_key_rejected(
    servers: ServerThread, tmp_path: Path, log: FakeLog
) -> None:
    def twice(w: Witness, text: bytes) -> bytes:
        now = int(time.time())
        return _own_line(w, text, now) + _own_line(w, text, now - 1)

    _assert_refused(servers, tmp_path, log, twice, "does not verify")


WITNESS_SIGNER = CosignatureV1Signer("w.example", hashlib.sha256(b"w.example").digest())
PROP_LOG = FakeLog()
PROP_NOTE = PROP_LOG.note(7)
PROP_NOW = 1_780_000_000
PROP_BODY = format_cosignature_response(
    [
        Signature(
            WITNESS_SIGNER.name,
            WITNESS_SIGNER.key_id,
            WITNESS_SIGNER.sign_at(PROP_LOG.text(7), PROP_NOW),
        )
    ]
)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_mutated_responses_never_yield_an_unverified_line(data: st.DataObject) -> None:
    # Any mutation of a valid 200 body is either refused or yields only lines that verify,
    # with a timestamp in range.
    body = bytearray(PROP_BODY)
    for _ in range(data.draw(st.integers(1, 3))):
        op = data.draw(st.sampled_from(["flip", "delete", "insert"]))
        i = data.draw(st.integers(0, max(0, len(body) - 1)))
        if op == "flip" and body:
            body[i] ^= 1 << data.draw(st.integers(0, 7))
        elif op == "delete" and body:
            del body[i]
        else:
            body.insert(i, data.draw(st.integers(0, 255)))
    verifier = WITNESS_SIGNER.verifier()
    try:
        sigs = verify_cosignature_response(PROP_NOTE, bytes(body), [verifier], now=PROP_NOW)
    except WitnessBadResponse:
        return
    text, _ = parse_note(PROP_NOTE)
    for s in sigs:
        assert verifier.verify(text, s.sig)
        assert 0 < timestamp_of(s) <= PROP_NOW + 60


def test_valid_response_round_trip() -> None:
    v = WITNESS_SIGNER.verifier()
    sigs = verify_cosignature_response(PROP_NOTE, PROP_BODY, [v], now=PROP_NOW)
    assert format_cosignature_response(sigs) == PROP_BODY
    # A timestamp exactly max_skew ahead is still accepted; one second more is not.
    assert verify_cosignature_response(PROP_NOTE, PROP_BODY, [v], now=PROP_NOW - 60)
    with pytest.raises(WitnessBadResponse):
        verify_cosignature_response(PROP_NOTE, PROP_BODY, [v], now=PROP_NOW - 61)


def test_merge_keeps_existing_lines() -> None:
    s1 = Signature("w.example", 1, b"\x00" * 72)
    s2 = Signature("w.example", 1, b"\x01" * 72)
    s3 = Signature("v.example", 2, b"\x02" * 72)
    merged = merge_cosignatures(PROP_NOTE, [s1])
    assert merge_cosignatures(merged, [s2]) == merged
    assert merge_cosignatures(merged, []) is merged
    _, sigs = parse_note(merge_cosignatures(merged, [s2, s3, s3]))
    assert sigs[1:] == [s1, s3]


# --- gather ---------------------------------------------------------------------------------------


def _three(
    servers: ServerThread, tmp_path: Path, log: FakeLog, third: str, slow: float = 3.0
) -> tuple[list[Witness | None], list[WitnessClient]]:
    """Witnesses w1, w2 (real) and a third: 'ok', 'down' (refused) or 'slow'."""
    w1 = start_witness(servers, tmp_path, "w1.example", [log])
    w2 = start_witness(servers, tmp_path, "w2.example", [log])
    ws: list[Witness | None] = [w1, w2]
    clients = [w1.client(), w2.client()]
    if third == "down":
        ws.append(None)
        clients.append(WitnessClient(refused_url(), [_witness_key("w3.example")]))
    else:
        w3 = start_witness(
            servers,
            tmp_path,
            "w3.example",
            [log],
            middlewares=[delay(slow)] if third == "slow" else [],
        )
        ws.append(w3)
        clients.append(w3.client())
    return ws, clients


def _policy(clients: Sequence[WitnessClient], k: int) -> Policy:
    return Policy.k_of_n(k, [format_vkey(c.verifiers[0]) for c in clients])


def _statuses(result: GatherResult) -> list[str]:
    return [o.status for o in result.outcomes]


def test_gather_2_of_3_one_down(servers: ServerThread, tmp_path: Path, log: FakeLog) -> None:
    ws, clients = _three(servers, tmp_path, log, "down")
    note = log.note(10)
    result = gather(
        note, clients, lambda old: log.prove(old, 10), _policy(clients, 2), my_size=10, deadline=10
    )
    assert result.quorum_met and result.shortfall == ""
    assert _statuses(result) == ["cosigned", "cosigned", "unavailable"]
    assert isinstance(result.outcomes[2].error, WitnessUnavailable)
    open_note(result.note, [log.signer.verifier()])
    cosigned_by(result.note, ws[0], ws[1])  # type: ignore[arg-type]
    assert result.known_sizes == {clients[0].url: 10, clients[1].url: 10}
    assert "unavailable" in result.outcomes[2].summary()
    assert result.outcomes[0].summary().startswith(f"{clients[0].url} cosigned: w1.example+")


def test_gather_2_of_3_one_slow_stops_early(
    servers: ServerThread, tmp_path: Path, log: FakeLog
) -> None:
    _, clients = _three(servers, tmp_path, log, "slow", slow=3.0)
    started = time.monotonic()
    result = gather(
        log.note(10), clients, lambda old: log.prove(old, 10), _policy(clients, 2),
        my_size=10, deadline=10,
    )  # fmt: skip
    elapsed = time.monotonic() - started
    assert result.quorum_met
    assert elapsed < 2.5, elapsed
    assert _statuses(result) == ["cosigned", "cosigned", "pending"]
    assert "no answer yet when the quorum was met" in result.outcomes[2].summary()
    # The request left running still completes, and its client remembers the size.
    deadline = time.monotonic() + 10
    while clients[2].known_size(ORIGIN) != 10 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert clients[2].known_size(ORIGIN) == 10


def test_gather_deadline_with_one_down_and_one_slow(
    servers: ServerThread, tmp_path: Path, log: FakeLog
) -> None:
    # w1 ok, w2 down, w3 slow: 2-of-3 cannot be met before the deadline; the slow witness is
    # reported as a timeout and the gather returns at the deadline.
    w1 = start_witness(servers, tmp_path, "w1.example", [log])
    w3 = start_witness(servers, tmp_path, "w3.example", [log], middlewares=[delay(5)])
    clients = [
        w1.client(),
        WitnessClient(refused_url(), [_witness_key("w2.example")]),
        w3.client(),
    ]
    started = time.monotonic()
    result = gather(
        log.note(10), clients, lambda old: log.prove(old, 10), _policy(clients, 2),
        my_size=10, deadline=1.5,
    )  # fmt: skip
    elapsed = time.monotonic() - started
    assert 1.4 <= elapsed < 3, elapsed
    assert not result.quorum_met
    assert result.shortfall == "quorum witnesses not met: group witnesses has 1 of 2"
    assert _statuses(result) == ["cosigned", "unavailable", "timeout"]
    assert "no answer within the deadline" in result.outcomes[2].summary()
    cosigned_by(result.note, w1)


def test_gather_waits_for_a_slow_witness_the_quorum_needs(
    servers: ServerThread, tmp_path: Path, log: FakeLog
) -> None:
    # Four witnesses, 2-of-3 over w1, w3 (down), w4 (slow, but within the deadline), plus w2
    # outside the policy: the quorum needs the slow one, which is waited for.
    ws, clients = _three(servers, tmp_path, log, "down")
    w4 = start_witness(servers, tmp_path, "w4.example", [log], middlewares=[delay(0.8)])
    clients.append(w4.client())
    policy = _policy([clients[0], clients[2], clients[3]], 2)
    result = gather(
        log.note(12), clients, lambda old: log.prove(old, 12), policy, my_size=12, deadline=10
    )
    assert result.quorum_met
    assert _statuses(result) == ["cosigned", "cosigned", "unavailable", "cosigned"]
    cosigned_by(result.note, ws[0], ws[1], w4)  # type: ignore[arg-type]


def test_gather_without_policy_needs_everyone(
    servers: ServerThread, tmp_path: Path, log: FakeLog
) -> None:
    _, clients = _three(servers, tmp_path, log, "down")
    result = gather(
        log.note(10), clients, lambda old: log.prove(old, 10), None, my_size=10, deadline=5
    )
    assert not result.quorum_met
    assert result.shortfall.startswith("2 of 3 witnesses cosigned")
    result = gather(
        log.note(11), clients[:2], lambda old: log.prove(old, 11), None, my_size=11, deadline=5
    )
    assert result.quorum_met


def test_gather_remembers_sizes_for_the_next_round(
    servers: ServerThread, tmp_path: Path, log: FakeLog
) -> None:
    ws, clients = _three(servers, tmp_path, log, "ok")
    assert ws[2] is not None
    advance(ws[2], log, 4)  # w3 already holds 4 (from another client)
    for w in ws:
        assert w is not None
        w.requests.clear()
    proved: list[int] = []

    def prover(old: int) -> list[bytes]:
        proved.append(old)
        return log.prove(old, 9)

    result = gather(log.note(9), clients, prover, _policy(clients, 3), my_size=9, deadline=10)
    assert result.quorum_met
    assert [w.requests for w in ws if w is not None] == [[200], [200], [409, 200]]
    assert proved == [4]
    assert set(result.known_sizes.values()) == {9}
    for w in ws:
        assert w is not None
        w.requests.clear()
    proved.clear()

    def prover2(old: int) -> list[bytes]:
        proved.append(old)
        return log.prove(old, 20)

    result = gather(log.note(20), clients, prover2, _policy(clients, 3), my_size=20, deadline=10)
    assert result.quorum_met
    # Every witness was asked once, from the remembered size; the proof was computed once.
    assert [w.requests for w in ws if w is not None] == [[200], [200], [200]]
    assert proved == [9]


def test_gather_reports_alarms_and_keeps_existing_lines(
    servers: ServerThread, tmp_path: Path, log: FakeLog
) -> None:
    ws, clients = _three(servers, tmp_path, log, "ok")
    assert ws[1] is not None
    advance(ws[1], log, 30)  # w2 holds more than the log will claim
    note = log.note(10)
    result = gather(
        note,
        clients,
        lambda old: log.prove(old, 10),
        _policy(clients, 2),
        my_size=10,
        deadline=10,
        stop_early=False,
    )
    assert _statuses(result) == ["cosigned", "alarm", "cosigned"]
    assert result.alarms == (result.outcomes[1],)
    assert result.outcomes[1].known_size == 30
    assert result.quorum_met
    # Gathering again on the cosigned note: each key keeps its first line.
    again = gather(
        result.note, [clients[0]], lambda old: log.prove(old, 10), None, my_size=10, deadline=10
    )
    assert again.outcomes[0].ok
    assert again.note == result.note


def test_gather_preconditions(log: FakeLog) -> None:
    c = WitnessClient("http://127.0.0.1:9", [_witness_key("w.example")])
    with pytest.raises(UsageError):
        gather(log.note(1), [], lambda old: [], None, my_size=1, deadline=1)
    with pytest.raises(UsageError):
        gather(log.note(1), [c, c], lambda old: [], None, my_size=1, deadline=1)
    with pytest.raises(UsageError):
        gather(log.note(1), [c], lambda old: [], None, my_size=1, deadline=0)


def test_gather_prover_failure_is_an_outcome(
    servers: ServerThread, tmp_path: Path, log: FakeLog
) -> None:
    w = start_witness(servers, tmp_path, "w1.example", [log])
    advance(w, log, 3)

    def broken(old: int) -> list[bytes]:
        raise UsageError(f"no proof from {old}")

    result = gather(log.note(8), [w.client()], broken, None, my_size=8, deadline=5)
    assert _statuses(result) == ["error"]
    assert "no proof from 3" in str(result.outcomes[0].error)
    assert not result.quorum_met
