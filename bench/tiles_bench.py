"""The log in public: tiles served per second (with p99 latency), and a follower's catch-up.

* **serve**: ``tlog-store serve``'s application (:mod:`store.tileserver`) over a SQLite store,
  on 127.0.0.1, asked for full level-0 tiles and bundles by one client in a loop (``urllib``):
  requests per second and the 99th percentile latency.
* **follow**: ``tlog-verify follow --verify-entries`` (:func:`verifier.follow.follow_once`)
  catching up from nothing against that server, compared with the hashing floor: the
  SHA-256 work of the tree alone (a leaf hash per entry and a node hash per entry) in a loop.
"""

from __future__ import annotations

import asyncio
import hashlib
import socket
import tempfile
import threading
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from time import perf_counter

from aiohttp import web

from store import Append, StoreLog, init_store, open_store
from store.tileserver import TileServer, make_app
from tlog.keys import generate_key
from verifier.follow import follow_once
from verifier.trust import build_policy

TITLE = "tiles"
Row = tuple[str, str, str, str, str]


@dataclass
class Section:
    title: str
    rows: list[Row] = field(default_factory=list)
    targets: list[tuple[str, bool]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _serve(app: web.Application) -> tuple[str, asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()

    async def start() -> str:
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        await web.SockSite(runner, sock).start()
        return f"http://127.0.0.1:{sock.getsockname()[1]}"

    return asyncio.run_coroutine_threadsafe(start(), loop).result(10), loop


def run(*, quick: bool, peers_enabled: bool = True, peer_build_limit_s: float = 120.0) -> Section:
    """Run the tiles benchmark and return its section of the report."""
    size = 2_048 if quick else 16_384
    requests = 200 if quick else 2_000
    section = Section(title=f"tiles: a SQLite log of {size:,} sealed runs served on loopback")
    with tempfile.TemporaryDirectory() as tmp:
        db = str(Path(tmp) / "bench.db")
        key = generate_key("bench.example/journal")
        init_store(db=db, origin="bench.example/journal", key=key)
        with open_store(db=db, key=key) as store:
            for i in range(size):
                store.append(1, [Append(f"r{i}", "Note", data=i)])
                store.seal(f"r{i}", 1, "ok")
            store.sign_checkpoint()
            vkey = store.log_vkey
        server = TileServer(lambda: ["default"], lambda t: StoreLog(open_store(db=db, tenant=t)))
        url, loop = _serve(make_app(server))
        try:
            full = size // 256
            latencies = []
            began = perf_counter()
            for n in range(requests):
                kind = "entries" if n % 2 else "0"
                path = f"{url}/default/tile/{kind}/{n % full:03d}"
                t0 = perf_counter()
                with urllib.request.urlopen(path, timeout=10) as r:
                    r.read()
                latencies.append(perf_counter() - t0)
            elapsed = perf_counter() - began
            latencies.sort()
            p99 = latencies[int(len(latencies) * 0.99) - 1]
            section.rows.append(
                ("serve full tiles and bundles", f"{requests / elapsed:,.0f}/s", "", "", "")
            )
            section.rows.append(("  p99 latency", f"{p99 * 1000:.2f} ms", "", "", ""))
            policy = build_policy(log_vkey=vkey)
            began = perf_counter()
            report = follow_once(
                f"{url}/default/", policy=policy, state=Path(tmp) / "state", verify_entries=True
            )
            follow_s = perf_counter() - began
            assert report.valid, report.render_text()
        finally:
            loop.call_soon_threadsafe(loop.stop)
    began = perf_counter()
    h = b"\x00" * 32
    for _ in range(size):
        h = hashlib.sha256(b"\x00" + h).digest()
        h = hashlib.sha256(b"\x01" + h + h).digest()
    floor_s = perf_counter() - began
    section.rows.append(
        (
            f"follow --verify-entries from 0 ({size:,} entries)",
            f"{follow_s:.3f} s",
            "hashing floor",
            f"{floor_s:.3f} s",
            f"{follow_s / floor_s:.1f}",
        )
    )
    section.notes.append(
        "serve: one client, sequential requests (latency-bound); follow: one round, bundles "
        "fetched one after another, every entry hashed and folded into the tree"
    )
    return section
