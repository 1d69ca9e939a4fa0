"""Attacks on ``tlog-verify follow --verify-entries`` (no full level-0 tile fetched).

A static tile tree is built here from chosen entries (no store: sizes up to 70000 stay fast),
signed with the log key, and one thing is altered; every round must be a detection (exit 1).
"""

from __future__ import annotations

import gzip
import hashlib
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest
from aiohttp import web

from tests.servers import ServerThread, static_app
from tests.verifier.test_follow import ORIGIN, run
from tlog import merkle
from tlog.checkpoint import Checkpoint
from tlog.keys import SignerKey, generate_key
from tlog.note import sign_note
from tlog.tiles import (
    TILE_HEIGHT,
    TILE_WIDTH,
    Bundle,
    Tile,
    format_bundle,
    parse_bundle,
    parse_tile_path,
    tile_root,
    tiles_from_leaf_hashes,
)


class _Store:  # what run() reads of a store: its vkey
    def __init__(self, key: SignerKey) -> None:
        self.log_vkey = key.vkey()


def entry(i: int) -> bytes:
    return hashlib.sha256(b"entry %d" % i).digest()


def publish(key: SignerKey, www: Path, size: int) -> None:
    """Every tile, bundle and the signed checkpoint of the tree of entries [0, size)."""
    entries = [entry(i) for i in range(size)]
    leaves = [merkle.leaf_hash(e) for e in entries]
    for tile, data in tiles_from_leaf_hashes(leaves).items():
        p = www / tile.path()
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    for first in range(0, size, TILE_WIDTH):
        chunk = entries[first : first + TILE_WIDTH]
        p = www / Bundle(first // TILE_WIDTH, len(chunk)).path()
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(format_bundle(chunk))
    text = Checkpoint(ORIGIN, size, merkle.root(leaves)).format()
    (www / "checkpoint").write_bytes(sign_note(text, [key.signer()]))


def rewrite_bundle(www: Path, bundle: Bundle, change: Callable[[list[bytes]], list[bytes]]) -> None:
    p = www / bundle.path()
    p.write_bytes(format_bundle(change(parse_bundle(p.read_bytes(), bundle.width))))


@pytest.fixture(scope="module")
def key() -> SignerKey:
    return generate_key(ORIGIN)


@pytest.fixture
def servers():  # type: ignore[no-untyped-def]
    with ServerThread() as s:
        yield s


def _swap(a: int, b: int) -> Callable[[list[bytes]], list[bytes]]:
    def change(es: list[bytes]) -> list[bytes]:
        es = list(es)
        es[a], es[b] = es[b], es[a]
        return es

    return change


def _set(i: int) -> Callable[[list[bytes]], list[bytes]]:
    def change(es: list[bytes]) -> list[bytes]:
        es = list(es)
        es[i] = b"\x07" * 32
        return es

    return change


# (old size or None, new size, what is altered)
CASES = [
    (None, 256, "bundle 0 entry"),
    (None, 512, "bundle 1 entry"),
    (None, 65536, "bundle 255 entry"),
    (None, 65536, "bundle 100 swap"),
    (None, 65536, "bundles 254/255 swapped"),
    (None, 65536, "bundle 255 = bundle 254"),
    (None, 65537, "bundle 255 entry"),
    (None, 65537, "bundle 256 partial"),
    (300, 70000, "bundle 1 old entry"),
    (300, 70000, "bundle 1 new entry"),
    (300, 70000, "bundle 273 partial"),
    (300, 70000, "bundle 270 entry"),
    (256, 512, "bundle 1 entry"),
    (65280, 65536, "bundle 255 entry"),
    (65536, 65792, "bundle 256 entry"),
    (65536, 70000, "bundle 256 entry"),
    (65535, 65536, "bundle 255 entry"),
    (65535, 65537, "bundle 255 entry"),
    (300, 70000, "bundle 5 and its level-1 slot"),
]


def _alter(www: Path, what: str) -> None:
    if what == "bundles 254/255 swapped":
        a, b = www / Bundle(254).path(), www / Bundle(255).path()
        da, db = a.read_bytes(), b.read_bytes()
        a.write_bytes(db)
        b.write_bytes(da)
    elif what == "bundle 255 = bundle 254":
        (www / Bundle(255).path()).write_bytes((www / Bundle(254).path()).read_bytes())
    elif what == "bundle 100 swap":
        rewrite_bundle(www, Bundle(100), _swap(3, 4))
    elif what == "bundle 256 partial":
        rewrite_bundle(www, Bundle(256, 1), _set(0))
    elif what == "bundle 273 partial":
        rewrite_bundle(www, Bundle(273, 70000 % 256), _set(5))
    elif what == "bundle 1 old entry":
        rewrite_bundle(www, Bundle(1), _set(10))
    elif what == "bundle 1 new entry":
        rewrite_bundle(www, Bundle(1), _set(100))
    elif what == "bundle 5 and its level-1 slot":
        rewrite_bundle(www, Bundle(5), _set(0))
        es = parse_bundle((www / Bundle(5).path()).read_bytes(), 256)
        root = merkle.root([merkle.leaf_hash(e) for e in es])
        t = www / "tile" / "1" / "000"
        data = bytearray(t.read_bytes())
        data[5 * 32 : 6 * 32] = root
        t.write_bytes(bytes(data))
        lt = www / "tile" / "0" / "005"
        lt.write_bytes(b"".join(merkle.leaf_hash(e) for e in es))
    else:
        assert what.endswith(" entry"), what
        rewrite_bundle(www, Bundle(int(what.split()[1])), _set(255))


@pytest.mark.parametrize(("old", "new", "what"), CASES)
def test_verify_entries_rejects_an_altered_tree(
    key: SignerKey, servers: ServerThread, tmp_path: Path, old: int | None, new: int, what: str
) -> None:
    www = tmp_path / "www"
    url = servers.serve(static_app(www)) + "/"
    state = tmp_path / "state"
    store = _Store(key)
    if old is not None:
        publish(key, www, old)
        code, report = run(url, store, state, "--verify-entries")  # type: ignore[arg-type]
        assert code == 0, report
    publish(key, www, new)
    code, report = run(url, store, state, "--verify-entries")  # type: ignore[arg-type]
    assert code == 0, report  # the honest tree is accepted
    state.unlink()
    if old is not None:
        publish(key, www, old)
        assert run(url, store, state, "--verify-entries")[0] == 0  # type: ignore[arg-type]
        publish(key, www, new)
    _alter(www, what)
    code, report = run(url, store, state, "--verify-entries")  # type: ignore[arg-type]
    assert code == 1, (what, report)


def _flip(www: Path, rel: str, at: int) -> None:
    p = www / rel
    data = bytearray(p.read_bytes())
    data[at] ^= 1
    p.write_bytes(bytes(data))


@pytest.mark.parametrize(
    ("old", "new", "tile", "flag", "expect"),
    [
        # A full level-0 tile is not read by --verify-entries (its bundle is its leaf hashes),
        # as documented; --check-tiles reads and compares every new one.
        (None, 65536, "tile/0/100", "--verify-entries", 0),
        (None, 65536, "tile/0/100", "--check-tiles", 1),
        (None, 65536, "tile/0/255", "--check-tiles", 1),
        (300, 70000, "tile/0/200", "--check-tiles", 1),
        # A full level-1 tile off the right edge (the root reads level 2): the bundles' roots
        # are compared with it.
        (None, 70000, "tile/1/000", "--verify-entries", 1),
        (300, 70000, "tile/1/000", "--verify-entries", 1),
        (None, 70000, "tile/1/001.p/17", "--verify-entries", 1),
        (None, 70000, "tile/0/273.p/112", "--verify-entries", 1),
    ],
)
def test_altered_tiles(
    key: SignerKey,
    servers: ServerThread,
    tmp_path: Path,
    old: int | None,
    new: int,
    tile: str,
    flag: str,
    expect: int,
) -> None:
    www = tmp_path / "www"
    url = servers.serve(static_app(www)) + "/"
    state = tmp_path / "state"
    store = _Store(key)
    if old is not None:
        publish(key, www, old)
        assert run(url, store, state, flag)[0] == 0  # type: ignore[arg-type]
    publish(key, www, new)
    _flip(www, tile, 40)
    code, report = run(url, store, state, flag)  # type: ignore[arg-type]
    assert code == expect, report


# --- tiles of the wrong length, and gzip -------------------------------------------------------


def gzip_app(root: Path, *, bomb: str | None = None) -> web.Application:
    """:func:`tests.servers.static_app` behind a front end that gzips every body (as a CDN
    may: follow asks for ``gzip, identity``); ``bomb``: that path is served as a gzip body
    that decodes to a megabyte."""

    async def handle(request: web.Request) -> web.Response:
        rel = request.match_info["tail"]
        if rel == bomb:
            body = gzip.compress(b"\0" * (1 << 20))
        else:
            path = root / rel
            if not path.is_file():
                return web.Response(status=404, text="not found\n")
            body = gzip.compress(path.read_bytes())
        return web.Response(body=body, headers={"Content-Encoding": "gzip"})

    app = web.Application()
    app.router.add_get("/{tail:.*}", handle)
    return app


@pytest.mark.parametrize("old", [None, 3, 255])
def test_follows_a_log_whose_every_body_is_gzipped(
    key: SignerKey, servers: ServerThread, tmp_path: Path, old: int | None
) -> None:
    # A full tile of hashes does not compress: gzipped it is larger than 8,192 bytes, and
    # the limit is the decoded size's.
    www = tmp_path / "www"
    url = servers.serve(gzip_app(www)) + "/"
    state = tmp_path / "state"
    store = _Store(key)
    if old is not None:
        publish(key, www, old)
        assert run(url, store, state, "--verify-entries")[0] == 0  # type: ignore[arg-type]
    publish(key, www, 70000)
    code, report = run(url, store, state, "--verify-entries", "--check-tiles")  # type: ignore[arg-type]
    assert code == 0, report
    assert report["facts"]["size"] == 70000  # type: ignore[index]


@pytest.mark.parametrize(
    ("change", "length"),
    [
        (lambda b: b[:-1], 8191),
        (lambda b: b + b"\0", 8193),
        (lambda b: b + b"\0" * 100_000, 8193),  # kept cut after a full tile and one byte
        (lambda b: b[:32], 32),
    ],
)
def test_a_tile_of_the_wrong_length_read_by_the_proof_is_a_fault_with_evidence(
    key: SignerKey,
    servers: ServerThread,
    tmp_path: Path,
    change: Callable[[bytes], bytes],
    length: int,
) -> None:
    # tile/0/000 is read only by the consistency proof from 3 to 300: short or long, it is
    # the same detection, with the tile as served in the evidence.
    www = tmp_path / "www"
    url = servers.serve(static_app(www)) + "/"
    state = tmp_path / "state"
    store = _Store(key)
    publish(key, www, 3)
    assert run(url, store, state)[0] == 0  # type: ignore[arg-type]
    publish(key, www, 300)
    tile = www / "tile" / "0" / "000"
    tile.write_bytes(change(tile.read_bytes()))
    code, report = run(url, store, state)  # type: ignore[arg-type]
    assert code == 1, report
    assert "tile/0/000" in str(report["failure"]), report
    evidence = Path(report["facts"]["evidence"])  # type: ignore[index]
    assert (evidence / "served" / "tile" / "0" / "000").stat().st_size == length
    assert (evidence / "served" / "urls").read_text().splitlines()[-1].endswith("tile/0/000")


def test_a_gzip_bomb_for_a_tile_is_cut_and_judged(
    key: SignerKey, servers: ServerThread, tmp_path: Path
) -> None:
    www = tmp_path / "www"
    url = servers.serve(gzip_app(www, bomb="tile/0/000.p/3")) + "/"
    state = tmp_path / "state"
    store = _Store(key)
    publish(key, www, 3)
    code, report = run(url, store, state)  # type: ignore[arg-type]
    assert code == 1, report
    evidence = Path(report["facts"]["evidence"])  # type: ignore[index]
    assert (evidence / "served" / "tile" / "0" / "000.p" / "3").stat().st_size == 8193


# --- scale: the entries check streams ----------------------------------------------------------


def uniform_log_app(key: SignerKey, size: int) -> web.Application:
    """A log of ``size`` identical 32-byte entries, its tiles and bundles computed on request
    (every node of a height has one hash): a large tree at no cost to build."""
    entry_ = bytes(32)
    by_height = [merkle.leaf_hash(entry_)]
    for _ in range(8 * 64):
        by_height.append(merkle.node_hash(by_height[-1], by_height[-1]))

    def tile_bytes(tile: Tile) -> bytes:
        return by_height[TILE_HEIGHT * tile.level] * tile.width

    text = Checkpoint(ORIGIN, size, tile_root(size, tile_bytes)).format()
    note = sign_note(text, [key.signer()])

    async def handle(request: web.Request) -> web.Response:
        rel = request.match_info["tail"]
        if rel == "checkpoint":
            return web.Response(body=note)
        item = parse_tile_path(rel)
        if isinstance(item, Bundle):
            return web.Response(body=format_bundle([entry_] * item.width))
        return web.Response(body=tile_bytes(item))

    app = web.Application()
    app.router.add_get("/{tail:.*}", handle)
    return app


def test_verifying_every_entry_of_a_large_log_holds_no_tile_it_checked(
    key: SignerKey, servers: ServerThread, tmp_path: Path
) -> None:
    # 2^18 + 77 entries: 1,025 bundles and as many level-0 tiles fetched (--check-tiles),
    # 8 MiB of tiles that a check keeping them (as it once did, with a list of every new
    # tile and bundle) holds at once. Streamed, the round's peak is a few of them.
    size = (1 << 18) + 77
    url = servers.serve(uniform_log_app(key, size)) + "/"
    tracemalloc.start()
    try:
        code, report = run(
            url,
            _Store(key),  # type: ignore[arg-type]
            tmp_path / "state",
            "--verify-entries",
            "--check-tiles",
        )
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert code == 0, report
    assert report["facts"]["entries"] == size  # type: ignore[index]
    assert peak < 3 * 1024 * 1024, f"peak {peak:,} bytes"
