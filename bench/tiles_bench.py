"""The log in public: a 1M-entry log served as tiles, and a follower catching up and following.

* **build**: a SQLite store of ``size`` sealed runs (1,000,000; 20,000 with ``--quick``): the
  first 1,000 through the API (append and seal), the rest by the store benchmark's documented
  bulk shortcut (:func:`bench.store_bench.bulk_extend`: the rows ``append`` and ``seal``
  write, checked by :func:`bench.store_bench.check_rows` on the API-built runs), then a
  checkpoint signed through the API. Its root must be the expected heads' root, and sampled
  runs' inclusion proofs, read through the API, must verify against it.
* **serve**: ``tlog-store serve`` on that store, in its own process on 127.0.0.1 (as deployed:
  the follower's CPU is not the server's), asked for full level-0 tiles and bundles by one
  client on one keep-alive connection in a loop: requests per second and the p99 latency.
* **follow**: ``tlog-verify follow --verify-entries`` (:func:`verifier.follow.follow_once`)
  catching up from nothing against that server: wall time and the follower's CPU time,
  against the **hashing floor** of the same entries in the same run: SHA-256 of every entry
  as a leaf and of every node of the tree above them (``N`` + ``N − 1`` hashes), one
  ``hashlib`` call each in the tightest Python loop (:func:`tlog.merkle.root`). Target: the
  catch-up at >= 50 % of the floor's speed (wall time at most twice the floor's). Bytes fetched
  are compared with the least the spec allows: for ``--verify-entries`` from nothing, every
  bundle and every tile above level 0 (a full level-0 tile is its bundle's leaf hashes), the
  partial level-0 tile and the checkpoint.
* **follow while it grows**: another process seals runs and signs checkpoints while rounds of
  ``follow`` (without ``--verify-entries``) run against the server: every round valid, and
  bytes fetched against the tiles the consistency proofs need
  (:func:`tlog.tiles.consistency_tiles`), the least a client can fetch.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import os
import random
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from time import perf_counter, process_time

from bench.store_bench import (
    Expected,
    build_via_api,
    bulk_extend,
    check_rows,
    run_id,
    sqlite_target,
)
from tlog import merkle
from tlog.checkpoint import Checkpoint
from tlog.keys import generate_key
from tlog.note import parse_note
from tlog.policy import Policy
from tlog.tiles import Bundle, Tile, bundles_for_size, consistency_tiles, tiles_for_size
from verifier.follow import follow_once
from verifier.trust import build_policy

TITLE = "tiles"
Row = tuple[str, str, str, str, str]
ORIGIN = "bench.example/journal"
API_RUNS = 1_000
SAMPLES = 20


@dataclass
class Section:
    title: str
    rows: list[Row] = field(default_factory=list)
    targets: list[tuple[str, bool]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _log(message: str) -> None:
    print(f"[tiles] {message}", file=sys.stderr, flush=True)


def build(directory: Path, size: int, section: Section) -> tuple[str, str, Expected]:
    """The store of ``size`` sealed runs (module docstring); (db path, log vkey, Expected)."""
    key = generate_key(ORIGIN)
    (directory / "tiles.key").write_text(key.format() + "\n")
    target = sqlite_target(directory, "tiles", key)
    expected = Expected()
    began = perf_counter()
    api = min(size, API_RUNS)
    with contextlib.closing(target.open(key)) as store:
        build_via_api(store, expected, 0, api)
    check_rows(target, expected, api)
    if size > api:
        _log(f"bulk-loading positions {api:,} to {size:,}")
        bulk_extend(target, expected, api, size)
    with contextlib.closing(target.open(key)) as store:
        store.sign_checkpoint()
        cp = store.checkpoint()
        if (cp.size, cp.root) != (size, expected.tree.root(size)):
            raise AssertionError("the store's root is not the expected heads' root")
        for p in random.Random(7).sample(range(size), min(SAMPLES, size)):
            inc = store.inclusion_proof(run_id(p))
            if (inc.index, inc.head) != (p, expected.heads[p]):
                raise AssertionError(f"run {run_id(p)} is not at its position")
            merkle.verify_inclusion(p, size, merkle.leaf_hash(inc.head), inc.proof, cp.root)
        vkey = store.log_vkey
    section.notes.append(
        f"build: {size:,} sealed runs in {perf_counter() - began:.1f} s ({api:,} through the "
        f"API, the rest bulk-loaded); root checked, {min(SAMPLES, size)} sampled inclusion "
        "proofs read through the API verified"
    )
    assert target.db is not None
    return target.db, vkey, expected


class Server:
    """``tlog-store serve`` on ``db`` in a child process (its request log discarded)."""

    def __init__(self, db: str) -> None:
        exe = Path(sys.executable).parent / "tlog-store"
        self.proc = subprocess.Popen(
            [str(exe), "serve", "--db", db, "--listen", "127.0.0.1:0"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("listening on "):
            self.close()
            raise RuntimeError(f"tlog-store serve did not start: {line!r}")
        self.url = line.split()[-1].rstrip("/")

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def measure_serve(url: str, size: int, requests: int, section: Section) -> None:
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    full = max(1, size // 256)
    latencies = []
    began = perf_counter()
    for n in range(requests):
        index = n % full
        path = "/default/" + (Bundle(index).path() if n % 2 else Tile(0, index).path())
        t0 = perf_counter()
        conn.request("GET", path)
        response = conn.getresponse()
        body = response.read()
        latencies.append(perf_counter() - t0)
        assert response.status == 200 and body, (path, response.status)
    elapsed = perf_counter() - began
    conn.close()
    latencies.sort()
    p99 = latencies[int(len(latencies) * 0.99) - 1]
    section.rows.append(
        ("serve full tiles and bundles", f"{requests / elapsed:,.0f}/s", "", "", "")
    )
    section.rows.append(("  p99 latency", f"{p99 * 1000:.2f} ms", "", "", ""))


def floor_seconds(expected: Expected, size: int, root: bytes) -> float:
    """The hashing floor (module docstring), checked to give the root."""
    sha = hashlib.sha256
    heads = expected.heads[:size]
    began = perf_counter()
    leaves = [sha(b"\x00" + h).digest() for h in heads]
    got = merkle.root(leaves)
    elapsed = perf_counter() - began
    if got != root:
        raise AssertionError("the floor's tree is not the log's")
    return elapsed


def minimum_bytes(size: int, note: bytes) -> int:
    """What ``--verify-entries`` from nothing must fetch at least: the checkpoint, every
    bundle (32-byte entries: 34 bytes each) and every tile above level 0 — a full level-0
    tile is its bundle's leaf hashes, so it need not be fetched — and the partial level-0
    tile, which the root check reads before any bundle."""
    tiles = sum(t.data_size for t in tiles_for_size(size) if t.level > 0 or not t.is_full)
    bundles = sum(b.width * 34 for b in bundles_for_size(size))
    return len(note) + tiles + bundles


_SEALER = """
import sys, time
from store import Append, open_store
db, key_file, seconds, batch = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
from tlog.cli.files import read_key_file
with open_store(db=db, key=read_key_file(key_file)) as store:
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end:
        for _ in range(batch):
            run = f"grow-{n}"
            store.append(1, [Append(run, "Note", data=n)])
            store.seal(run, 1, "ok")
            n += 1
        store.sign_checkpoint()
        time.sleep(0.2)
print(n)
"""


def run(*, quick: bool, peers_enabled: bool = True, peer_build_limit_s: float = 120.0) -> Section:
    """Run the tiles benchmark and return its section of the report."""
    size = 20_000 if quick else 1_000_000
    requests = 400 if quick else 4_000
    section = Section(title=f"tiles: a SQLite log of {size:,} sealed runs served on loopback")
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        db, vkey, expected = build(directory, size, section)
        server = Server(db)
        try:
            measure_serve(server.url, size, requests, section)
            policy = build_policy(log_vkey=vkey)
            state = directory / "state"
            _log(f"follow --verify-entries from nothing, {size:,} entries")
            began, cpu = perf_counter(), process_time()
            report = follow_once(
                f"{server.url}/default/", policy=policy, state=state, verify_entries=True
            )
            follow_s, follow_cpu = perf_counter() - began, process_time() - cpu
            assert report.valid, report.render_text()
            note = state.read_bytes()
            cp = Checkpoint.parse(parse_note(note)[0])
            floor_s = floor_seconds(expected, size, cp.root)
            fetched = int(report.facts["bytes"])
            least = minimum_bytes(size, note)
            ratio = follow_s / floor_s
            section.rows.append(
                (
                    f"follow --verify-entries from 0 ({size:,} entries), wall",
                    f"{follow_s:.2f} s",
                    "hashing floor",
                    f"{floor_s:.2f} s",
                    f"{ratio:.2f}",
                )
            )
            section.rows.append(
                (
                    "  the follower's CPU time",
                    f"{follow_cpu:.2f} s",
                    "hashing floor",
                    f"{floor_s:.2f} s",
                    f"{follow_cpu / floor_s:.2f}",
                )
            )
            section.rows.append(
                (
                    "  bytes fetched",
                    f"{fetched / 1e6:.2f} MB",
                    "bundles + tiles > level 0",
                    f"{least / 1e6:.2f} MB",
                    f"{fetched / least:.3f}",
                )
            )
            section.rows.append(
                (
                    f"  requests ({size / follow_s:,.0f} entries/s)",
                    str(report.facts["requests"]),
                    "",
                    "",
                    "",
                )
            )
            # --check-tiles: the level-0 tiles fetched and compared too (twice the requests).
            _log(f"follow --check-tiles from nothing, {size:,} entries")
            began = perf_counter()
            checked = follow_once(
                f"{server.url}/default/",
                policy=policy,
                state=directory / "state-check-tiles",
                verify_entries=True,
                check_tiles=True,
            )
            check_s = perf_counter() - began
            assert checked.valid, checked.render_text()
            section.rows.append(
                (
                    f"  with --check-tiles ({checked.facts['requests']} requests), wall",
                    f"{check_s:.2f} s",
                    "hashing floor",
                    f"{floor_s:.2f} s",
                    f"{check_s / floor_s:.2f}",
                )
            )
            section.targets.append(
                (
                    f"follow --verify-entries catch-up at >= 50% of the hashing floor's speed "
                    f"(wall {follow_s:.2f} s <= 2 x {floor_s:.2f} s)",
                    ratio <= 2.0,
                )
            )
            grow_rows(directory, db, server.url, policy, state, quick, section)
        finally:
            server.close()
    section.notes.append(
        "serve: one client, sequential requests on one keep-alive connection (latency-bound); "
        "the server is its own process"
    )
    section.notes.append(
        "follow: bundles and tiles fetched over a few keep-alive connections while the entries "
        "are hashed; a full bundle's leaf hashes are its level-0 tile (not fetched), whose root "
        "is checked against the level-1 tile, and every full tile's root against the level "
        "above; the floor is pure Python hashlib"
    )
    return section


def grow_rows(
    directory: Path,
    db: str,
    url: str,
    policy: Policy,
    state: Path,
    quick: bool,
    section: Section,
) -> None:
    """Follow rounds while another process seals runs and signs checkpoints."""
    seconds = 3.0 if quick else 10.0
    key_file = directory / "tiles.key"
    if not key_file.exists():
        section.notes.append("follow while it grows: no key file, not measured")
        return
    sealer = subprocess.Popen(
        [sys.executable, "-c", _SEALER, db, str(key_file), str(seconds), "20"],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ},
    )
    rounds = fetched = least = 0
    old = Checkpoint.parse(parse_note(state.read_bytes())[0]).size
    try:
        while sealer.poll() is None:
            report = follow_once(f"{url}/default/", policy=policy, state=state)
            assert report.valid, report.render_text()
            new = int(report.facts["size"])
            rounds += 1
            fetched += int(report.facts["bytes"])
            note = state.read_bytes()
            least += len(note)
            if new > old:
                least += sum(t.data_size for t in consistency_tiles(old, new))
            old = new
            time.sleep(0.3)
    finally:
        out, _ = sealer.communicate(timeout=60)
    section.rows.append(
        (
            f"follow while another process seals ({rounds} rounds, {out.strip()} runs sealed)",
            f"{fetched / 1e3:.1f} kB",
            "tiles the proofs need",
            f"{least / 1e3:.1f} kB",
            f"{fetched / max(least, 1):.3f}",
        )
    )
