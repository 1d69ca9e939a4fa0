"""``tlog-witness feed``: a witness that follows a served log by URL (issue 15, acceptance 3).

Against a real ``tlog-store serve`` application and a tiny static server over tile trees a
test writes or tampers with, all on loopback: the witness cosigns a growing log's new
checkpoints, builds each consistency proof from the tiles itself, refuses a forked log (and
keeps the evidence, as the push path does), survives the server being down, and never moves
backwards.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import shutil
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from aiohttp import web

from store import Append, JournalStore, StoreLog, open_in_memory, publish_tiles
from store.tileserver import TileServer
from store.tileserver import make_app as tiles_app
from tests.clirunner import call_main
from tests.servers import ServerThread, static_app
from tests.witness.helpers import WITNESS, witness_signers, witness_verifiers
from tlog import merkle
from tlog.checkpoint import Checkpoint, open_checkpoint
from tlog.keys import SignerKey, generate_key, parse_vkey
from tlog.note import open_note, sign_note
from tlog.tiles import (
    MAX_LEVEL,
    TILE_HEIGHT,
    Tile,
    consistency_tiles,
    parse_tile_path,
    prefix_tiles,
    tile_root,
)
from witness.cli import main
from witness.cosigning import Cosigning
from witness.feed import FeedResult, feed_round, round_status, run_feed
from witness.open import open_state
from witness.server import COSIGNING_KEY
from witness.server import make_app as witness_app
from witness.state import WitnessState

BASE = "example.com/journal"
ORIGIN = f"{BASE}/default"  # the store's one tenant's log
T = TypeVar("T")


def grow(store: JournalStore, runs: int, tag: str = "r") -> None:
    """``runs`` more sealed runs (named ``<tag><n>``), then a kept checkpoint."""
    start = store.checkpoint().size
    for i in range(start, start + runs):
        store.append(1, [Append(f"{tag}{i}", "Note", data=i)])
        store.seal(f"{tag}{i}", 1, "ok")
    store.sign_checkpoint()


def new_log(key: SignerKey, runs: int, tag: str = "r") -> JournalStore:
    store = open_in_memory(origin=BASE, key=key)
    grow(store, runs, tag)
    return store


class Served:
    """A store served by ``tlog-store serve``'s application; the test may swap the store."""

    def __init__(self, store: JournalStore) -> None:
        self.store = store
        self.server = TileServer(lambda: ["default"], lambda t: StoreLog(self.store), ttl=0)


class Witness:
    """A witness (its state in SQLite, its Cosigning object) whose feed rounds run on the
    servers' event loop, so its locks and group commit live on one loop."""

    def __init__(self, servers: ServerThread, db: Path) -> None:
        self.servers = servers
        self.state: WitnessState = open_state(db=str(db))
        app = witness_app(self.state, witness_signers(), name=WITNESS, config_ttl=0)
        self.cosigning: Cosigning = app[COSIGNING_KEY]

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.servers.loop).result(60)

    def round(self) -> FeedResult:
        async def go() -> list[FeedResult]:
            import aiohttp

            async with aiohttp.ClientSession() as session:
                return await feed_round(self.cosigning, session, timeout=5)

        [result] = self.run(go())
        return result

    def stored_size(self) -> int | None:
        c = self.state.latest(ORIGIN)
        return None if c is None else c.size


@pytest.fixture
def servers() -> Iterator[ServerThread]:
    with ServerThread() as s:
        yield s


@pytest.fixture
def key() -> SignerKey:
    return generate_key(BASE)


@pytest.fixture
def witness(servers: ServerThread, tmp_path: Path) -> Iterator[Witness]:
    w = Witness(servers, tmp_path / "witness.db")
    yield w
    w.state.close()


def cosigned_by_witness_and_log(note: bytes, vkey: str) -> None:
    """The stored note carries a valid log signature and a valid cosignature of ours."""
    open_checkpoint(note, [parse_vkey(vkey)])
    assert open_note(note, witness_verifiers()).sigs


# --- following -------------------------------------------------------------------------------


def test_the_witness_cosigns_a_growing_served_log_from_proofs_it_builds_from_tiles(
    key: SignerKey, servers: ServerThread, witness: Witness
) -> None:
    store = new_log(key, 300)
    url = servers.serve(tiles_app(Served(store).server)) + "/default"
    witness.state.add_log(ORIGIN, (store.log_vkey,), tiles=url)

    first = witness.round()
    assert (first.outcome, first.status, first.old, first.size) == ("cosigned", 200, 0, 300)
    assert first.message == "size 300 (its first checkpoint)"
    stored = witness.state.latest(ORIGIN)
    assert stored is not None and stored.size == 300
    cosigned_by_witness_and_log(stored.note, store.log_vkey)
    assert stored.note.startswith(store.published()[-1].split(b"\n\n")[0])

    grow(store, 400)  # 700: a level-0 partial tile, full ones, and the level-1 tile
    second = witness.round()
    assert (second.outcome, second.old, second.size) == ("cosigned", 300, 700)
    assert second.proof > 0
    assert second.tiles == len(consistency_tiles(300, 700))  # only the tiles the proof needs
    stored = witness.state.latest(ORIGIN)
    assert stored is not None and stored.size == 700
    cosigned_by_witness_and_log(stored.note, store.log_vkey)

    again = witness.round()
    assert (again.outcome, again.size, again.tiles) == ("unchanged", 700, 0)
    assert witness.state.evidence(ORIGIN) == []


def test_an_empty_log_is_cosigned_and_then_followed(
    key: SignerKey, servers: ServerThread, witness: Witness
) -> None:
    store = new_log(key, 0)
    url = servers.serve(tiles_app(Served(store).server)) + "/default/"
    witness.state.add_log(ORIGIN, (store.log_vkey,), tiles=url)
    empty = witness.round()
    assert (empty.outcome, empty.size, empty.message) == (
        "cosigned",
        0,
        "size 0 (its first checkpoint)",
    )
    grow(store, 1)
    one = witness.round()
    assert (one.outcome, one.old, one.size) == ("cosigned", 0, 1)
    assert one.message == "size 1 (from 0 with 0 proof hashes)"


@pytest.mark.parametrize(("old", "new"), [(1, 2), (2, 5), (4, 260), (256, 300)])
def test_the_witness_moves_on_from_a_power_of_two(
    key: SignerKey, servers: ServerThread, witness: Witness, old: int, new: int
) -> None:
    # From a power of two the proof carries no root of its own for the old size: the feed
    # fetches the tile holding the node over the first `old` leaves and checks the proof folds
    # from it. Before, such a proof was taken for a rewritten tile and the witness stayed at
    # the power of two for good.
    store = new_log(key, old)
    url = servers.serve(tiles_app(Served(store).server)) + "/default"
    witness.state.add_log(ORIGIN, (store.log_vkey,), tiles=url)
    assert witness.round().outcome == "cosigned"
    grow(store, new - old)
    moved = witness.round()
    assert (moved.outcome, moved.old, moved.size) == ("cosigned", old, new), moved
    wanted = consistency_tiles(old, new)
    assert moved.tiles == len(wanted) + len([t for t in prefix_tiles(old, new) if t not in wanted])
    assert witness.stored_size() == new


def test_a_forked_log_is_refused_and_kept_as_evidence(
    key: SignerKey, servers: ServerThread, witness: Witness, tmp_path: Path
) -> None:
    honest = new_log(key, 300)
    url = servers.serve(tiles_app(Served(honest).server)) + "/default/"
    witness.state.add_log(ORIGIN, (honest.log_vkey,), tiles=url)
    assert witness.round().outcome == "cosigned"

    # The same key signs another history: a larger tree that does not extend the cosigned
    # one, served as static files (its tiles are its own and hash to its root).
    forked = new_log(key, 500, tag="fork")
    publish_tiles(StoreLog(forked), tmp_path / "fork" / "default")
    witness.state.set_tiles(ORIGIN, servers.serve(static_app(tmp_path / "fork")) + "/default/")
    refused = witness.round()
    assert (refused.outcome, refused.status, refused.old, refused.size) == (
        "refused",
        422,
        300,
        500,
    )
    assert witness.stored_size() == 300
    [evidence] = witness.state.evidence(ORIGIN)
    assert "consistency proof from size 300 to 500" in evidence.reason
    # The same fork again is refused and kept once.
    assert witness.round().outcome == "refused"
    assert len(witness.state.evidence(ORIGIN)) == 1

    # Another root at the cosigned size: two roots for one size.
    same_size = new_log(key, 300, tag="other")
    publish_tiles(StoreLog(same_size), tmp_path / "same" / "default")
    witness.state.set_tiles(ORIGIN, servers.serve(static_app(tmp_path / "same")) + "/default/")
    twin = witness.round()
    assert (twin.outcome, twin.status, twin.size) == ("refused", 422, 300)
    assert witness.stored_size() == 300
    reasons = sorted(e.reason for e in witness.state.evidence(ORIGIN))
    assert any("two different roots for size 300" in r for r in reasons), reasons

    # The honest log, still served, is cosigned as it grows: the witness held its ground.
    witness.state.set_tiles(ORIGIN, url)
    grow(honest, 10)
    assert witness.round().outcome == "cosigned"
    assert witness.stored_size() == 310


def test_tampered_tiles_are_unusable_not_evidence(
    key: SignerKey, servers: ServerThread, witness: Witness, tmp_path: Path
) -> None:
    store = new_log(key, 300)
    served = Served(store)
    witness.state.add_log(
        ORIGIN, (store.log_vkey,), tiles=servers.serve(tiles_app(served.server)) + "/default/"
    )
    assert witness.round().outcome == "cosigned"
    grow(store, 300)
    root = tmp_path / "static"
    publish_tiles(StoreLog(store), root / "default")
    tile = root / "default" / "tile" / "0" / "001"
    data = bytearray(tile.read_bytes())
    data[5] ^= 1
    tile.write_bytes(bytes(data))
    witness.state.set_tiles(ORIGIN, servers.serve(static_app(root)) + "/default/")
    bad = witness.round()  # a tile the proof reads, not the root
    assert (bad.outcome, bad.status) == ("unusable", None)
    assert "give no consistency proof from size 300 to the root of size 600" in bad.message
    root_tile = root / "default" / "tile" / "0" / "002.p" / "88"  # 600 = 512 + 88
    good = root_tile.read_bytes()
    root_tile.write_bytes(bytes([good[0] ^ 1]) + good[1:])
    tile.write_bytes(bytes(data[:5]) + bytes([data[5] ^ 1]) + bytes(data[6:]))
    rewritten = witness.round()
    assert rewritten.outcome == "unusable"
    assert "do not hash to the root of the checkpoint of size 600" in rewritten.message
    root_tile.write_bytes(good)
    tile.write_bytes(data[:-1])  # cut: a tile of the wrong length
    cut = witness.round()
    assert (cut.outcome, cut.size) == ("unusable", 600)
    assert "truncated or padded tile" in cut.message
    assert witness.stored_size() == 300
    assert witness.state.evidence(ORIGIN) == []


def test_a_server_down_is_a_clear_unusable_round_and_the_next_round_catches_up(
    key: SignerKey, servers: ServerThread, witness: Witness
) -> None:
    store = new_log(key, 40)
    other = ServerThread()
    url = other.serve(tiles_app(Served(store).server)) + "/default/"
    other.close()  # the log's server is down
    witness.state.add_log(ORIGIN, (store.log_vkey,), tiles=url)
    down = witness.round()
    assert down.outcome == "unusable"
    assert down.message.startswith(f"GET {url}checkpoint: ")
    assert "Connect" in down.message  # aiohttp's ClientConnectorError, named
    assert round_status([down]) == 4
    assert witness.stored_size() is None
    # Up again (at another address): the next round cosigns.
    witness.state.set_tiles(ORIGIN, servers.serve(tiles_app(Served(store).server)) + "/default/")
    assert witness.round().outcome == "cosigned"


def test_a_log_going_back_is_left_alone(
    key: SignerKey, servers: ServerThread, witness: Witness, tmp_path: Path
) -> None:
    store = new_log(key, 100)
    publish_tiles(StoreLog(store), tmp_path / "old" / "default")  # the tiles of size 100
    witness.state.add_log(
        ORIGIN,
        (store.log_vkey,),
        tiles=servers.serve(tiles_app(Served(store).server)) + "/default/",
    )
    grow(store, 50)
    assert witness.round().size == 150
    witness.state.set_tiles(ORIGIN, servers.serve(static_app(tmp_path / "old")) + "/default/")
    back = witness.round()
    assert (back.outcome, back.size, back.old) == ("behind", 100, 150)
    assert witness.stored_size() == 150
    assert witness.state.evidence(ORIGIN) == []


def test_what_the_push_path_refuses_the_feed_refuses(
    key: SignerKey, servers: ServerThread, witness: Witness
) -> None:
    """A checkpoint signed by a key the witness does not trust, another origin, a disabled
    log: the witness's own checks, before any tile is fetched."""
    store = new_log(key, 10)
    url = servers.serve(tiles_app(Served(store).server)) + "/default/"
    stranger = generate_key(ORIGIN)
    witness.state.add_log(ORIGIN, (stranger.vkey(),), tiles=url)
    untrusted = witness.round()
    assert (untrusted.outcome, untrusted.status, untrusted.tiles) == ("refused", 403, 0)
    witness.state.add_key(ORIGIN, store.log_vkey)
    witness.state.set_disabled(ORIGIN, True)

    async def no_logs() -> list[FeedResult]:
        import aiohttp

        async with aiohttp.ClientSession() as session:
            return await feed_round(witness.cosigning, session)

    assert witness.run(no_logs()) == []  # a disabled log is not fed
    witness.state.set_disabled(ORIGIN, False)
    assert witness.round().outcome == "cosigned"


def test_run_feed_keeps_going_until_stopped(
    key: SignerKey, servers: ServerThread, witness: Witness
) -> None:
    store = new_log(key, 20)
    url = servers.serve(tiles_app(Served(store).server)) + "/default/"
    witness.state.add_log(ORIGIN, (store.log_vkey,), tiles=url)
    seen: list[FeedResult] = []

    async def go() -> int:
        stop = asyncio.Event()

        def report(r: FeedResult) -> None:
            seen.append(r)
            if len(seen) == 1:
                grow(store, 5)
            if len(seen) == 3:
                stop.set()

        return await run_feed(
            witness.cosigning, once=False, interval=0.05, report=report, stop=stop
        )

    assert witness.run(go()) == 0
    assert [r.outcome for r in seen] == ["cosigned", "cosigned", "unchanged"]
    assert witness.stored_size() == 25


# --- the command -------------------------------------------------------------------------------


def test_the_feed_command(key: SignerKey, servers: ServerThread, tmp_path: Path) -> None:
    assert call_main(main, ["init", "--name", WITNESS, "--dir", str(tmp_path)]).code == 0
    config = ["--config", str(tmp_path / "witness.toml")]
    store = new_log(key, 30)
    url = servers.serve(tiles_app(Served(store).server)) + "/default"
    added = call_main(main, ["add-log", ORIGIN, "--key", store.log_vkey, "--tiles", url, *config])
    assert added.code == 0, added
    assert added.out.decode() == f'added "{ORIGIN}" (1 key, fed from {url}/)\n'
    listed = call_main(main, ["list-logs", *config])
    assert f"  tiles {url}/\n" in listed.out.decode()
    fed = call_main(main, ["feed", "--once", "--json", *config])
    assert fed.code == 0, fed
    line = json.loads(fed.out.decode())
    assert (line["outcome"], line["size"], line["origin"]) == ("cosigned", 30, ORIGIN)
    fed = call_main(main, ["feed", "--once", *config])
    assert (fed.code, fed.out.decode()) == (0, f'unchanged "{ORIGIN}": size 30, cosigned already\n')

    forked = new_log(key, 40, tag="fork")
    shutil.rmtree(tmp_path / "fork", ignore_errors=True)
    publish_tiles(StoreLog(forked), tmp_path / "fork" / "default")
    fork_url = servers.serve(static_app(tmp_path / "fork")) + "/default/"
    assert call_main(main, ["set-tiles", ORIGIN, fork_url, *config]).code == 0
    fed = call_main(main, ["feed", "--once", "--origin", ORIGIN, *config])
    assert fed.code == 1, fed
    assert fed.out.decode().startswith(f'refused "{ORIGIN}": size 40 from 30: ')
    shown = call_main(main, ["evidence", *config])
    assert "consistency proof from size 30 to 40" in shown.out.decode()

    assert (
        call_main(main, ["set-tiles", ORIGIN, "none", *config]).out.decode()
        == f'"{ORIGIN}": no tiles URL\n'
    )
    assert call_main(main, ["feed", "--once", *config]).out.decode() == ""
    bad = call_main(main, ["set-tiles", ORIGIN, "ftp://x/", *config])
    assert bad.code == 2 and "is not http:// or https://" in bad.err


def dribbling_app(root: Path, *, gzipped: bool = False) -> web.Application:
    """The files under ``root``, each body sent in pieces of 700 bytes with a pause between
    them (as a slow network delivers it: the client's first read holds only the first piece);
    ``gzipped``: gzip-encoded first, as a front end may."""

    async def handle(request: web.Request) -> web.StreamResponse:
        path = root / request.match_info["tail"]
        if not path.is_file():
            return web.Response(status=404, text="not found\n")
        body = path.read_bytes()
        response = web.StreamResponse()
        if gzipped:
            body = gzip.compress(body)
            response.headers["Content-Encoding"] = "gzip"
        response.content_length = len(body)
        await response.prepare(request)
        for at in range(0, len(body), 700):
            await response.write(body[at : at + 700])
            await asyncio.sleep(0.02)
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_get("/{tail:.*}", handle)
    return app


@pytest.mark.parametrize("gzipped", [False, True])
def test_bodies_that_arrive_in_pieces_are_read_whole(
    key: SignerKey, servers: ServerThread, witness: Witness, tmp_path: Path, gzipped: bool
) -> None:
    # The checkpoint note and every tile reach the witness in pieces; a read that kept the
    # first piece refused an honest checkpoint ("note does not end in a newline").
    store = new_log(key, 300)
    root = tmp_path / "static"
    publish_tiles(StoreLog(store), root / "default")
    url = servers.serve(dribbling_app(root, gzipped=gzipped)) + "/default/"
    witness.state.add_log(ORIGIN, (store.log_vkey,), tiles=url)
    first = witness.round()
    assert first.outcome == "cosigned", first.message
    grow(store, 300)  # from 300 to 600: full tiles (8,192 bytes, a dozen pieces) in the proof
    publish_tiles(StoreLog(store), root / "default")
    second = witness.round()
    assert (second.outcome, witness.stored_size()) == ("cosigned", 600), second.message


def test_a_step_whose_proof_needs_64_hashes_is_refused_for_that_log_alone(
    servers: ServerThread, witness: Witness
) -> None:
    # A log that signs a size past 2^62 (here over a tree whose every leaf hash is zero,
    # served as tiles computed on the fly): from 3 the proof needs 64 hashes, one more than
    # tlog-witness carries. The round gives that log a result; it does not raise.
    origin = "example.com/enormous"
    log_key = generate_key(origin)
    zero = [bytes(32)]
    for _ in range(8 * MAX_LEVEL + 8):
        zero.append(merkle.node_hash(zero[-1], zero[-1]))
    size = {"now": 3}

    def tile_bytes(tile: Tile) -> bytes:
        return zero[TILE_HEIGHT * tile.level] * tile.width

    async def handle(request: web.Request) -> web.Response:
        rel = request.match_info["tail"]
        if rel == "checkpoint":
            cp = Checkpoint(origin, size["now"], tile_root(size["now"], tile_bytes))
            return web.Response(body=sign_note(cp.format(), [log_key.signer()]))
        tile = parse_tile_path(rel)
        assert isinstance(tile, Tile)  # the feed reads no bundle
        return web.Response(body=tile_bytes(tile))

    app = web.Application()
    app.router.add_get("/{tail:.*}", handle)
    witness.state.add_log(origin, (log_key.vkey(),), tiles=servers.serve(app) + "/")
    assert witness.round().outcome == "cosigned"
    size["now"] = 2**62 + 3
    assert merkle.consistency_proof_size(3, size["now"]) == 64
    refused = witness.round()
    assert (refused.outcome, refused.status, refused.proof) == ("refused", 400, 64)
    assert "tlog-witness carries at most 63" in refused.message
    assert witness.state.latest(origin).size == 3  # type: ignore[union-attr]
