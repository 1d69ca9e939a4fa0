"""The witness's status page (``GET /``) and evidence endpoints (``GET /evidence``,
``/evidence/<id>``): witness/monitoring.py, witness/statuspage.py.

* In a real browser: a witness server process (tests/witness/proc.py, through
  :class:`~tests.witness.helpers.WitnessProcess`) on SQLite and on PostgreSQL, with two logs —
  one with a quota and a real split view (two checkpoints of one size signed by the log key, the
  second sent with the right old size, so the witness keeps evidence), one without — is
  rendered by headless Chromium (Debian's ``/usr/bin/chromium``, installed with ``apt-get
  install -y chromium`` when missing and possible; the test fails, never skips, when it cannot
  be had) at a phone's window size: ``--dump-dom`` is checked item by item (name, keys,
  version, uptime, both logs with size, last update, requests today against the quota, last
  refusal, evidence count and link, database health), the evidence link is followed (both
  notes, byte for byte, and they do conflict), and ``--screenshot`` must be a PNG of the
  window's size that is not one colour (decoded here, zlib and the PNG filters).
* In process (aiohttp's test server): the state's status read against the contract's default
  (SQL and the base class agree), a state that fails (an unhealthy page, 503, never a 500),
  the evidence pages (paging, bad input 400/404, the metrics label), the prefixes shown as
  configured, and the refusals kept only for configured logs, escaped.
* Under ``serve --workers 2`` (tests/witness/test_serving.py's supervisor): each worker names
  itself, and both show the supervisor's start.
"""

from __future__ import annotations

import asyncio
import calendar
import importlib.metadata
import os
import re
import shutil
import struct
import subprocess
import time
import urllib.error
import urllib.request
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from tests.conftest import Backend
from tests.witness.helpers import (
    WITNESS,
    ForkLog,
    WitnessProcess,
    configure_state,
    witness_signers,
    witness_verifiers,
)
from tests.witness.test_serving import fetch as fetch_on_a_new_connection
from tests.witness.test_serving import supervisor, witness_state
from tlog.checkpoint import open_checkpoint
from tlog.keys import format_vkey
from tlog.witnessproto import AddCheckpointRequest, monitoring_path
from witness.open import open_state
from witness.pull import quote
from witness.server import make_app
from witness.sqlite_state import SQLiteState
from witness.sqlstate import BackendError
from witness.state import LogStatus, WitnessState
from witness.statuspage import EVIDENCE_PAGE

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_TIMEOUT = 120.0  # seconds for one headless run: generous, for a loaded 2-core machine
PHONE = (412, 915)  # CSS pixels: a phone's window
FORKED = "example.com/forked"
QUIET = "example.com/quiet"
QPD = 100


# --- a browser -----------------------------------------------------------------------------


@pytest.fixture(scope="session")
def chromium() -> str:
    """Debian's Chromium, installed when missing (as root, with apt-get); the test FAILS when
    it cannot be had: a browser test that skips proves nothing."""
    if not os.access(CHROMIUM, os.X_OK) and shutil.which("apt-get") and os.geteuid() == 0:
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        # Two xdist workers may both get here: the second waits for dpkg's lock.
        install = ["apt-get", "-o", "DPkg::Lock::Timeout=600", "install", "-y", "chromium"]
        done = subprocess.run(install, capture_output=True, env=env, timeout=900, check=False)
        if done.returncode != 0:  # stale package lists: update once, then try again
            subprocess.run(
                ["apt-get", "-o", "DPkg::Lock::Timeout=600", "update"],
                capture_output=True,
                env=env,
                timeout=600,
                check=False,
            )
            done = subprocess.run(install, capture_output=True, env=env, timeout=900, check=False)
        if done.returncode != 0:
            pytest.fail(f"apt-get install -y chromium failed:\n{done.stderr.decode()[-2000:]}")
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(f"{CHROMIUM} is missing and cannot be installed here (needs root and apt-get)")
    return CHROMIUM


def headless(chromium: str, profile: Path, *args: str) -> bytes:
    """Run headless Chromium with ``args`` (its own profile: xdist workers run side by side);
    its stdout."""
    command = [
        chromium,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--hide-scrollbars",
        f"--user-data-dir={profile}",
        f"--window-size={PHONE[0]},{PHONE[1]}",
        *args,
    ]
    done = subprocess.run(command, capture_output=True, timeout=CHROMIUM_TIMEOUT, check=False)
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-2000:]
    return done.stdout


# --- reading what the browser gives back ---------------------------------------------------


class Node:
    """An element of a parsed DOM."""

    def __init__(self, tag: str, attrs: dict[str, str]) -> None:
        self.tag = tag
        self.attrs = attrs
        self.children: list[Node | str] = []

    def text(self) -> str:
        return "".join(c if isinstance(c, str) else c.text() for c in self.children)

    def words(self) -> str:
        """The text with runs of white space as one space."""
        return " ".join(self.text().split())

    def walk(self) -> Iterator[Node]:
        yield self
        for c in self.children:
            if isinstance(c, Node):
                yield from c.walk()

    def by_id(self, name: str) -> Node:
        found = [n for n in self.walk() if n.attrs.get("id") == name]
        assert len(found) == 1, (name, len(found))
        return found[0]

    def by_class(self, name: str) -> list[Node]:
        return [n for n in self.walk() if name in n.attrs.get("class", "").split()]

    def by_tag(self, tag: str) -> list[Node]:
        return [n for n in self.walk() if n.tag == tag]


_VOID = {"meta", "link", "br", "hr", "img", "input", "wbr", "source", "col", "area", "base"}


class _TreeBuilder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#document", {})
        self.stack = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, {k: v or "" for k, v in attrs})
        self.stack[-1].children.append(node)
        if tag not in _VOID:
            self.stack.append(node)

    def handle_endtag(self, tag: str) -> None:
        for i in range(len(self.stack) - 1, 0, -1):
            if self.stack[i].tag == tag:
                del self.stack[i:]
                return

    def handle_data(self, data: str) -> None:
        self.stack[-1].children.append(data)


def parse_dom(markup: str) -> Node:
    builder = _TreeBuilder()
    builder.feed(markup)
    builder.close()
    return builder.root


def png_pixels(data: bytes) -> tuple[int, int, list[bytes]]:
    """Width, height and pixels (one ``bytes`` per pixel) of an 8-bit RGB or RGBA PNG,
    decoded here: the chunks, zlib, and the five PNG scanline filters."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", data[:8]
    pos, idat, header = 8, b"", b""
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        assert zlib.crc32(kind + body) == struct.unpack(">I", data[pos + 8 + length :][:4])[0]
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", header)
    assert depth == 8 and colour in (2, 6) and interlace == 0, (depth, colour, interlace)
    bpp = 3 if colour == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * bpp
    assert len(raw) == height * (stride + 1)
    previous = bytearray(stride)
    pixels: list[bytes] = []
    for y in range(height):
        kind, line = (
            raw[y * (stride + 1)],
            bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)]),
        )
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = previous[i]
            c = previous[i - bpp] if i >= bpp else 0
            if kind == 1:
                line[i] = (line[i] + a) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + b) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else b if pb <= pc else c
                line[i] = (line[i] + pred) & 0xFF
            else:
                assert kind == 0, kind
        pixels += [bytes(line[i : i + 3]) for i in range(0, stride, bpp)]
        previous = line
    return width, height, pixels


def fetch(url: str) -> tuple[int, bytes, dict[str, str]]:
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.status, r.read(), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read(), dict(e.headers)


def utc(text: str, form: str) -> int:
    """Seconds since the epoch of a UTC time written in ``form``."""
    return calendar.timegm(time.strptime(text, form))


def post(url: str, body: bytes) -> int:
    request = urllib.request.Request(url, data=body, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


def parse_evidence(body: bytes) -> dict[str, Any]:
    """One ``GET /evidence/<id>`` answer, read strictly (witness/statuspage.py's format)."""
    out: dict[str, Any] = {}
    for field in ("evidence", "origin", "received", "reason"):
        line, body = body.split(b"\n", 1)
        name, value = line.decode().split(" ", 1)
        assert name == field, line
        out[field] = value
    for field in ("request", "stored-note"):
        line, body = body.split(b"\n", 1)
        name, value = line.decode().split(" ", 1)
        assert name == field, line
        n = int(value)
        out[field], body = body[:n], body[n:]
    assert body == b"", body
    return out


# --- the browser test ----------------------------------------------------------------------


def test_status_page_in_a_browser(backend: Backend, chromium: str, tmp_path: Path) -> None:
    started = time.time()
    forked, fork = ForkLog.forks(FORKED, 3, 2)
    quiet = ForkLog(QUIET, seed=b"quiet log").grow(4)
    configure_state(db=backend.db, postgres=backend.postgres, logs=[forked, quiet])
    state = open_state(db=backend.db, postgres=backend.postgres)
    try:
        state.set_qpd(FORKED, QPD)
        with WitnessProcess(
            db=backend.db, postgres=backend.postgres, stderr_path=tmp_path / "err", mldsa=True
        ) as w:
            assert post(w.address + "/add-checkpoint", forked.request(0, 5)) == 200
            assert post(w.address + "/add-checkpoint", quiet.request(0, 4)) == 200
            # The split view: the other fork's checkpoint of size 5, sent with the right old.
            split = fork.request(5, 5)
            assert post(w.address + "/add-checkpoint", split) == 422
            # Another process's request counted in the state (a worker's): the page reads the
            # count from the database, not from the answering process.
            day = int(time.time() // 86400)
            state.count_request(FORKED, day)
            status, page, headers = fetch(w.address + "/")
            assert status == 200, page
            assert headers["Content-Type"] == "text/html; charset=utf-8"
            assert "script-src" not in headers["Content-Security-Policy"]
            assert b"<script" not in page

            dom = parse_dom(
                headless(chromium, tmp_path / "profile", "--dump-dom", w.address).decode()
            )
            shot = tmp_path / "phone.png"
            headless(chromium, tmp_path / "profile", f"--screenshot={shot}", w.address)
            finished = time.time()

            # The witness.
            assert dom.by_id("name").text() == WITNESS
            assert WITNESS in dom.by_tag("title")[0].text()
            assert dom.by_id("witness-name").text() == WITNESS
            keys = dom.by_id("keys").text()
            for v in witness_verifiers(mldsa=True):
                assert format_vkey(v) in keys, format_vkey(v)
            version = importlib.metadata.version("tlog-toolkit")
            assert dom.by_id("version").words() == f"tlog-toolkit {version}"
            up = re.fullmatch(
                r"(?:(\d+) min )?(\d+) s, since (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) UTC",
                dom.by_id("uptime").words(),
            )
            assert up is not None, dom.by_id("uptime").words()
            uptime = int(up.group(1) or 0) * 60 + int(up.group(2))
            assert uptime <= finished - started + 1, up.group(0)
            since = utc(up.group(3), "%Y-%m-%d %H:%M:%S")
            assert started - 1 <= since <= finished, up.group(0)
            assert dom.by_id("process").words().startswith("one process (pid ")
            assert dom.by_id("submission-prefix").words() == "none"
            assert dom.by_id("monitoring-prefix").words() == "none"
            endpoints = dom.by_id("endpoints").words()
            assert "POST /add-checkpoint" in endpoints and "POST /sign-subtree" in endpoints

            # The state database.
            health = dom.by_id("health").words()
            assert "healthy" in health and "unhealthy" not in health, health
            assert ("sqlite" if backend.db else "postgres") in health
            assert re.search(r"read took \d+\.\d ms", health), health

            # The logs, in origin order.
            rows = dom.by_class("log")
            assert [r.by_class("origin")[0].words() for r in rows] == [FORKED, QUIET]
            cells = [{c.attrs["class"]: c for c in r.by_tag("td")} for r in rows]
            forked_row, quiet_row = cells
            assert forked_row["size"].words() == "5" and quiet_row["size"].words() == "4"
            for row in cells:
                assert row["state"].words() == "enabled"
                [when] = row["updated"].by_tag("time")
                stamp = utc(when.attrs["datetime"], "%Y-%m-%dT%H:%M:%SZ")
                assert int(started) - 1 <= stamp <= finished + 1, when.attrs
                assert row["updated"].words().endswith("ago)")
            # One advancing request of this process, one of "another": 2 of the quota.
            assert forked_row["quota"].words() == f"2 / {QPD}"
            assert quiet_row["quota"].words() == "not counted (no quota)"
            assert forked_row["evidence"].words().startswith("1, the last ")
            assert quiet_row["evidence"].words() == "0"
            refusal = forked_row["refusal"].words()
            assert refusal.startswith("422 ") and refusal.endswith(
                "two different roots for the same size 5"
            ), refusal
            assert quiet_row["refusal"].words() == "none"
            [link] = forked_row["origin"].by_tag("a")
            assert link.attrs["href"] == monitoring_path("", FORKED)
            status, stored, _ = fetch(w.address + link.attrs["href"])
            assert status == 200

            # The evidence: its count, and the link, followed.
            assert dom.by_id("evidence-count").text() == "1"
            href = dom.by_id("evidence-link").attrs["href"]
            assert href == "/evidence"
            status, listing, headers = fetch(w.address + href)
            assert status == 200 and headers["Content-Type"] == "text/plain; charset=utf-8"
            [line] = listing.decode().splitlines()
            evidence_id, _, rest = line.split(" ", 2)
            assert rest == f"{quote(FORKED)} two different roots for size 5", line
            status, body, _ = fetch(f"{w.address}/evidence/{evidence_id}")
            assert status == 200
            entry = parse_evidence(body)
            assert (entry["evidence"], entry["origin"]) == (evidence_id, quote(FORKED))
            assert entry["request"] == split
            assert entry["stored-note"] == stored  # the note the witness held then, and now
            # Two notes the log signed, one size, two roots: they cannot both be honest.
            log_key = [forked.verifier]
            theirs = open_checkpoint(AddCheckpointRequest.parse(split).checkpoint, log_key)
            ours = open_checkpoint(stored, log_key)
            assert theirs.checkpoint.size == ours.checkpoint.size == 5
            assert theirs.checkpoint.root != ours.checkpoint.root
    finally:
        state.close()

    # The screenshot: a PNG of the phone's window, not one colour (text on a background).
    width, height, pixels = png_pixels(shot.read_bytes())
    assert (width, height) == PHONE
    colours: dict[bytes, int] = {}
    for p in pixels:
        colours[p] = colours.get(p, 0) + 1
    background = max(colours.values())
    assert len(colours) > 8, len(colours)
    assert len(pixels) - background > len(pixels) // 100  # more than 1% is not the background


# --- in process ----------------------------------------------------------------------------

Client = TestClient[web.Request, web.Application]


@asynccontextmanager
async def serve(app: web.Application) -> AsyncIterator[Client]:
    client: Client = TestClient(TestServer(app))
    await client.start_server()
    try:
        yield client
    finally:
        await client.close()


def run(
    backend: Backend,
    test: Callable[[WitnessState, Client], Awaitable[None]],
    *,
    state: WitnessState | None = None,
    **options: Any,
) -> None:
    """Run ``test`` against make_app over the backend's state (or ``state``)."""

    async def main() -> None:
        s = state or open_state(db=backend.db, postgres=backend.postgres)
        try:
            async with serve(make_app(s, witness_signers(), name=WITNESS, **options)) as client:
                await test(s, client)
        finally:
            s.close()

    asyncio.run(main())


def add_evidence(state: WitnessState, origin: str, n: int) -> None:
    for i in range(n):
        request = b"old 1\n\nrequest %d of %s\n" % (i, origin.encode())
        state.add_evidence(origin, f"fork {i}", request, b"stored\n", 1_780_000_000 + i)


def test_status_read_agrees_with_the_contract(backend: Backend) -> None:
    """The SQL state's one-read status and evidence reads give what the base class's defaults
    build from the other reads (and the quota count the defaults cannot see)."""
    a, b = ForkLog("example.com/a").grow(3), ForkLog("example.com/b", seed=b"b").grow(2)
    configure_state(db=backend.db, postgres=backend.postgres, logs=[a, b, ForkLog("example.com/c")])
    state = open_state(db=backend.db, postgres=backend.postgres)
    try:
        state.set_qpd("example.com/a", 7)
        state.set_disabled("example.com/c", True)
        add_evidence(state, "example.com/a", 3)
        for _ in range(4):
            state.count_request("example.com/a", 20_000)
        state.count_request("example.com/a", 19_999)
        got = state.status(20_000)
        default = WitnessState.status(state, 20_000)
        assert [s.config for s in got] == [s.config for s in default] == state.logs()
        assert [(s.evidence, s.last_evidence_at) for s in got] == [
            (3, 1_780_000_002),
            (0, None),
            (0, None),
        ]
        assert [s.requests_today for s in got] == [4, 0, 0]
        assert [s.requests_today for s in default] == [None, None, None]
        for s, d in zip(got, default, strict=True):
            assert (s.size, s.updated_at, s.evidence) == (d.size, d.updated_at, d.evidence)
        assert state.backend == ("sqlite" if backend.db else "postgres")
        assert state.evidence_summaries(None, 2) == WitnessState.evidence_summaries(state, None, 2)
        assert state.evidence_summaries(3, 5) == WitnessState.evidence_summaries(state, 3, 5)
        [e] = state.evidence_summaries(2, 5)
        request = b"old 1\n\nrequest 0 of example.com/a\n"
        assert (e.id, e.reason, e.request_bytes, e.stored_bytes) == (1, "fork 0", len(request), 7)
        assert state.evidence_entry(2) == WitnessState.evidence_entry(state, 2) is not None
        assert state.evidence_entry(99) is None
    finally:
        state.close()


class FailingStatus(SQLiteState):
    """A state whose status read fails like a database that went away."""

    def status(self, day: int) -> list[LogStatus]:
        raise BackendError("sqlite: disk I/O error at /secret/path")


def test_unhealthy_state_is_a_page_not_a_500(tmp_path: Path) -> None:
    backend = Backend("sqlite", db=str(tmp_path / "w.db"))

    async def t(state: WitnessState, client: Client) -> None:
        r = await client.get("/")
        assert r.status == 503
        page = parse_dom(await r.text())
        health = page.by_id("health").words()
        assert "unhealthy" in health and "BackendError" in health, health
        assert "/secret/path" not in await r.text()  # the detail is for the log only
        assert page.by_id("name").text() == WITNESS
        assert format_vkey(witness_verifiers()[0]) in page.by_id("keys").text()
        assert "could not be read" in page.by_id("logs").words()

    run(backend, t, state=FailingStatus(str(tmp_path / "w.db")))


def test_evidence_pages(tmp_path: Path) -> None:
    backend = Backend("sqlite", db=str(tmp_path / "w.db"))
    configure_state(db=backend.db, logs=[ForkLog("example.com/a"), ForkLog("example.com/b")])
    state = open_state(db=backend.db)
    try:
        add_evidence(state, "example.com/a", 64)
        add_evidence(state, "example.com/b", 64)
    finally:
        state.close()

    async def t(state: WitnessState, client: Client) -> None:
        r = await client.get("/evidence")
        assert r.status == 200
        lines = (await r.text()).splitlines()
        assert len(lines) == EVIDENCE_PAGE + 1
        ids = [int(line.split(" ", 1)[0]) for line in lines[:-1]]
        assert ids == list(range(128, 128 - EVIDENCE_PAGE, -1))
        assert lines[0] == '128 2026-05-28T20:27:43Z "example.com/b" fork 63'
        assert lines[-1] == f"more /evidence?before={ids[-1]}"
        r = await client.get(lines[-1].split(" ", 1)[1])
        rest = (await r.text()).splitlines()
        assert [int(line.split(" ", 1)[0]) for line in rest] == list(range(28, 0, -1))
        assert (await (await client.get("/evidence?before=0")).text()) == ""
        r = await client.get("/evidence/1")
        assert r.status == 200
        entry = parse_evidence(await r.read())
        assert entry["origin"] == '"example.com/a"' and entry["reason"] == "fork 0"
        assert entry["request"] == b"old 1\n\nrequest 0 of example.com/a\n"
        assert entry["stored-note"] == b"stored\n"
        for path, status in [
            ("/evidence?before=x", 400),
            ("/evidence?before=01", 400),
            ("/evidence?before=" + "9" * 30, 400),
            ("/evidence/01", 400),
            ("/evidence/" + "9" * 30, 400),
            ("/evidence/0", 404),
            ("/evidence/129", 404),
            ("/evidence/x", 400),
            ("/evidence/-1", 400),
            ("/evidence/%C2%B9", 400),  # a superscript one: a digit to str.isdigit, not here
        ]:
            assert (await client.get(path)).status == status, path
        metrics = await (await client.get("/metrics")).text()
        assert 'witness_http_requests_total{endpoint="evidence",code="200"} 4' in metrics
        assert 'witness_http_requests_total{endpoint="evidence",code="400"} 8' in metrics

    run(backend, t)


def test_hidden_with_the_status_endpoints(tmp_path: Path) -> None:
    backend = Backend("sqlite", db=str(tmp_path / "w.db"))
    open_state(db=backend.db).close()

    async def t(state: WitnessState, client: Client) -> None:
        for path in ("/", "/evidence", "/evidence/1", "/metrics"):
            assert (await client.get(path)).status == 404, path

    run(backend, t, status_endpoints=False)


def test_prefixes_as_configured(tmp_path: Path) -> None:
    backend = Backend("sqlite", db=str(tmp_path / "w.db"))
    log = ForkLog("example.com/a").grow(2)
    configure_state(db=backend.db, logs=[log])

    async def t(state: WitnessState, client: Client) -> None:
        assert (await client.post("/w/add-checkpoint", data=log.request(0, 2))).status == 200
        page = parse_dom(await (await client.get("/")).text())
        assert page.by_id("submission-prefix").words() == "/w"
        assert page.by_id("monitoring-prefix").words() == "none"
        endpoints = page.by_id("endpoints").words()
        assert "POST /w/add-checkpoint" in endpoints and "sign-subtree" not in endpoints
        [link] = page.by_class("origin")[0].by_tag("a")
        assert link.attrs["href"] == monitoring_path("", log.origin)

    run(backend, t, submission_prefix="/w")


def test_refusals_only_of_configured_logs_and_escaped(tmp_path: Path) -> None:
    backend = Backend("sqlite", db=str(tmp_path / "w.db"))
    evil = ForkLog("evil.example/<b>x</b>").grow(2)
    good = ForkLog("example.com/a", seed=b"a").grow(3)
    configure_state(db=backend.db, logs=[evil, good])
    state = open_state(db=backend.db)
    state.set_disabled(evil.origin, True)
    state.close()

    async def t(state: WitnessState, client: Client) -> None:
        assert (await client.post("/add-checkpoint", data=evil.request(0, 2))).status == 404
        assert (await client.post("/add-checkpoint", data=good.request(0, 3))).status == 200
        assert (await client.post("/add-checkpoint", data=good.request(1, 3))).status == 409
        for i in range(50):  # unknown origins: refused, never remembered
            stranger = ForkLog(f"stranger.example/{i}").grow(1)
            assert (await client.post("/add-checkpoint", data=stranger.request(0, 1))).status == 404
        r = await client.get("/")
        markup = await r.text()
        assert "<b>" not in markup and "evil.example/&lt;b&gt;x&lt;/b&gt;" in markup
        page = parse_dom(markup)
        evil_row, good_row = page.by_class("log")
        assert [c.words() for c in evil_row.by_class("state")] == ["disabled"]
        refusal = evil_row.by_class("refusal")[0].words()
        assert refusal.startswith("404 ") and "disabled" in refusal, refusal
        refusal = good_row.by_class("refusal")[0].words()
        assert refusal.startswith("409 ") and "latest cosigned size is 3" in refusal, refusal
        assert "stranger" not in markup
        witness = client.app.middlewares[0].__self__  # type: ignore[attr-defined]
        assert sorted(witness.refusals) == sorted([evil.origin, good.origin])

    run(backend, t)


def test_workers_each_say_who_answered_and_share_the_start(tmp_path: Path) -> None:
    """Under ``serve --workers 2`` the page names the worker that answered (and its pid), and
    both show the supervisor's start: the uptime is the witness's, not the worker's."""
    state = witness_state(tmp_path, [ForkLog("example.com/a")])
    with supervisor(*state.args, stderr=tmp_path / "err") as srv:
        seen: dict[str, str] = {}
        for _ in range(60):  # new connections until the kernel gave each worker some
            status, body = fetch_on_a_new_connection(srv.url, "GET", "/")
            assert status == 200
            page = parse_dom(body.decode())
            uptime = page.by_id("uptime").words()
            seen[page.by_id("process").words().split(",")[0]] = uptime.split("since ")[1]
            if len(seen) == 2:
                break
        workers = srv.workers()
        assert sorted(seen) == sorted(f"worker {i} (pid {pid})" for i, pid in workers.items())
        assert len(set(seen.values())) == 1, seen
