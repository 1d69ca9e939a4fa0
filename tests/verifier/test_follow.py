"""``tlog-verify follow``: a monitor of a tiled log, against real servers on loopback.

C2SP tlog-tiles (docs/specs.md §6) read by a client that trusts nothing served: each detection
of verifier/follow.py's docstring is caught here against ``tlog-store serve``'s application or a
tiny static server over a tile tree that a test tampers with, and leaves evidence that
``tlog-verify consistency`` — a third party — judges invalid too.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from store import Append, JournalStore, StoreLog, open_in_memory, publish_tiles
from store.tileserver import TileServer, make_app
from tests.clirunner import call_main
from tests.servers import ServerThread, static_app
from tlog.keys import SignerKey, generate_key
from tlog.tiles import format_bundle, parse_bundle
from verifier.cli import main
from verifier.follow import follow, follow_once
from verifier.report import Report
from verifier.trust import build_policy

ORIGIN = "example.com/journal"


@pytest.fixture
def servers() -> Iterator[ServerThread]:
    with ServerThread() as s:
        yield s


@pytest.fixture
def key() -> SignerKey:
    return generate_key(ORIGIN)


def log(key: SignerKey, runs: int, first: int = 0) -> JournalStore:
    """An in-memory store signed with ``key``: ``runs`` sealed runs from r<first>, a
    checkpoint kept."""
    store = open_in_memory(origin=ORIGIN, key=key)
    grow(store, runs, first)
    return store


def grow(store: JournalStore, runs: int, first: int | None = None) -> None:
    start = store.checkpoint().size if first is None else first
    for i in range(start, start + runs):
        store.append(1, [Append(f"r{i}", "Note", data=i)])
        store.seal(f"r{i}", 1, "ok")
    store.sign_checkpoint()


class Switchable:
    """A TileServer whose one tenant's store a test can swap (a log that changes its story)."""

    def __init__(self, store: JournalStore) -> None:
        self.store = store
        self.server = TileServer(lambda: ["default"], lambda t: self, ttl=0)

    def latest_note(self) -> bytes | None:
        return StoreLog(self.store).latest_note()

    def kept_sizes(self, after: int = -1) -> list[int]:
        return StoreLog(self.store).kept_sizes(after)

    def tile_hashes(self, level: int, index: int, width: int) -> bytes:
        return StoreLog(self.store).tile_hashes(level, index, width)

    def entries(self, start: int, count: int) -> list[bytes]:
        return StoreLog(self.store).entries(start, count)

    def entries_and_leaves(self, start: int, count: int) -> tuple[list[bytes], list[bytes]]:
        return StoreLog(self.store).entries_and_leaves(start, count)


def run(url: str, store: JournalStore, state: Path, *extra: str) -> tuple[int, dict[str, object]]:
    argv = ["follow", url, "--log-vkey", store.log_vkey, "--state", str(state), "--once"]
    code, out, _ = call_main(main, [*argv, *extra, "--json"])
    return code, json.loads(out)


def evidence_of(report: dict[str, object]) -> Path:
    facts = report["facts"]
    assert isinstance(facts, dict)
    return Path(facts["evidence"])


def third_party(evidence: Path, vkey: str) -> int:
    """``tlog-verify consistency`` on the evidence, as someone else would run it."""
    argv = ["consistency", str(evidence / "checkpoint.old"), str(evidence / "checkpoint.new")]
    if (evidence / "consistency-proof").exists():
        argv += ["--proof", str(evidence / "consistency-proof")]
    return call_main(main, [*argv, "--log-vkey", vkey]).code


# --- accepting ---------------------------------------------------------------------------------


def test_follows_a_growing_log_fetching_only_what_the_proof_needs(
    key: SignerKey, servers: ServerThread, tmp_path: Path
) -> None:
    store = log(key, 300)
    source = Switchable(store)
    url = servers.serve(make_app(source.server)) + "/default/"
    state = tmp_path / "state"
    code, report = run(url, store, state, "--verify-entries")
    assert code == 0, report
    assert state.read_bytes() == store.published()[-1]
    grow(store, 700)
    code, report = run(url, store, state)
    assert code == 0, report
    facts = report["facts"]
    assert isinstance(facts, dict)
    assert (facts["old_size"], facts["size"]) == (300, 1000)
    # The checkpoint and a handful of tiles: never a walk of the log.
    assert isinstance(facts["requests"], int) and facts["requests"] <= 8
    assert state.read_bytes() == store.published()[-1]
    # Nothing new: valid, state unchanged.
    assert run(url, store, state)[0] == 0
    assert state.read_bytes() == store.published()[-1]


def test_verify_entries_catches_up_from_nothing(
    key: SignerKey, servers: ServerThread, tmp_path: Path
) -> None:
    store = log(key, 600)
    url = servers.serve(make_app(Switchable(store).server)) + "/default/"
    code, report = run(url, store, tmp_path / "state", "--verify-entries")
    assert code == 0, report
    assert report["facts"]["entries"] == 600  # type: ignore[index]
    grow(store, 20)
    code, report = run(url, store, tmp_path / "state", "--verify-entries")
    assert (code, report["facts"]["entries"]) == (0, 20)  # type: ignore[index]


# --- detections --------------------------------------------------------------------------------


def test_second_root_for_one_size(key: SignerKey, servers: ServerThread, tmp_path: Path) -> None:
    honest, fork = log(key, 5), log(key, 5, first=100)
    source = Switchable(honest)
    url = servers.serve(make_app(source.server)) + "/default/"
    state = tmp_path / "state"
    assert run(url, honest, state)[0] == 0
    kept = state.read_bytes()
    source.store = fork
    code, report = run(url, honest, state)
    assert code == 1
    assert "two roots for size 5" in report["failure"]["message"]  # type: ignore[index]
    assert state.read_bytes() == kept  # never moved
    evidence = evidence_of(report)
    assert (evidence / "checkpoint.old").read_bytes() == kept
    assert (evidence / "checkpoint.new").read_bytes() == fork.published()[-1]
    # Equal sizes need no proof (the roots must be equal): the guide's command has no --proof.
    assert not (evidence / "consistency-proof").exists()
    assert third_party(evidence, honest.log_vkey) == 1


def test_inconsistent_growth_is_proven(
    key: SignerKey, servers: ServerThread, tmp_path: Path
) -> None:
    honest, fork = log(key, 5), log(key, 9, first=100)
    source = Switchable(honest)
    url = servers.serve(make_app(source.server)) + "/default/"
    state = tmp_path / "state"
    assert run(url, honest, state)[0] == 0
    source.store = fork
    code, report = run(url, honest, state)
    assert code == 1
    message = report["failure"]["message"]  # type: ignore[index]
    assert "is not consistent with size 5: its tree has the root" in message
    evidence = evidence_of(report)
    assert (evidence / "consistency-proof").exists()
    assert third_party(evidence, honest.log_vkey) == 1


@pytest.mark.parametrize(("old", "new"), [(1, 3), (4, 9), (256, 300)])
def test_inconsistent_growth_from_a_power_of_two_is_proven(
    key: SignerKey, servers: ServerThread, tmp_path: Path, old: int, new: int
) -> None:
    # From a power of two the proof carries no root at the old size: the node over the first
    # `old` leaves is read from the tiles, and the proof folds from it. Before, no root came
    # out of such a proof and a fork there was taken for a rewritten tile.
    honest, fork = log(key, old), log(key, new, first=1000)
    source = Switchable(honest)
    url = servers.serve(make_app(source.server)) + "/default/"
    state = tmp_path / "state"
    assert run(url, honest, state)[0] == 0
    kept = state.read_bytes()
    grow(honest, new - old)
    assert run(url, honest, state)[0] == 0, "honest growth from a power of two"
    state.write_bytes(kept)  # back at the power of two, and now the log serves a fork
    source.store = fork
    code, report = run(url, honest, state)
    assert code == 1, report
    message = report["failure"]["message"]  # type: ignore[index]
    assert f"is not consistent with size {old}: its tree has the root" in message, message
    evidence = evidence_of(report)
    assert (evidence / "consistency-proof").exists()
    assert third_party(evidence, honest.log_vkey) == 1


def test_server_going_backwards(key: SignerKey, servers: ServerThread, tmp_path: Path) -> None:
    store = log(key, 5)
    older = tmp_path / "older" / "default"
    publish_tiles(StoreLog(store), older)
    grow(store, 4)
    source = Switchable(store)
    url = servers.serve(make_app(source.server)) + "/default/"
    state = tmp_path / "state"
    assert run(url, store, state)[0] == 0
    back = servers.serve(static_app(tmp_path / "older")) + "/default/"
    code, report = run(back, store, state)
    assert code == 1
    assert "went back: it serves size 5, after size 9" in report["failure"]["message"]  # type: ignore[index]
    evidence = evidence_of(report)
    assert (evidence / "checkpoint.old").read_bytes() == store.published()[-1]
    # No proof is computed for a log that went back; the guide's command reports a rollback.
    assert not (evidence / "consistency-proof").exists()
    argv = ["consistency", str(evidence / "checkpoint.old"), str(evidence / "checkpoint.new")]
    result = call_main(main, [*argv, "--log-vkey", store.log_vkey])
    assert result.code == 1 and "rollback: the old checkpoint has size 9" in result.err


def test_rewritten_tile(key: SignerKey, servers: ServerThread, tmp_path: Path) -> None:
    store = log(key, 5)
    root = tmp_path / "www"
    publish_tiles(StoreLog(store), root / "default")
    url = servers.serve(static_app(root)) + "/default/"
    state = tmp_path / "state"
    assert run(url, store, state)[0] == 0
    grow(store, 4)
    publish_tiles(StoreLog(store), root / "default")
    tile = root / "default" / "tile" / "0" / "000.p" / "9"
    data = bytearray(tile.read_bytes())
    data[40] ^= 1
    tile.write_bytes(bytes(data))
    code, report = run(url, store, state)
    assert code == 1
    assert "tiles do not hash to the root" in report["failure"]["message"]  # type: ignore[index]
    # The tiles the root was computed from, as served, with their URLs: the bad one among them.
    served = evidence_of(report) / "served"
    assert (served / "tile/0/000.p/9").read_bytes() == bytes(data)
    assert f"{url}tile/0/000.p/9\n" in (served / "urls").read_text()
    tile.write_bytes(bytes(data[:-32]))  # cut short
    code, report = run(url, store, state)
    assert code == 1
    assert "truncated or padded tile" in report["failure"]["message"]  # type: ignore[index]


def test_a_rewritten_tile_in_the_proof_is_no_fork(
    key: SignerKey, servers: ServerThread, tmp_path: Path
) -> None:
    # Tile 0/000 is full at size 300 and off the root's path: only the consistency proof from
    # size 3 reads it. A byte flipped there (a cache, a proxy) must be named as a rewritten
    # tile, never as a log that forked, and leave no consistency proof behind as evidence.
    store = log(key, 3)
    root = tmp_path / "www"
    publish_tiles(StoreLog(store), root / "default")
    url = servers.serve(static_app(root)) + "/default/"
    state = tmp_path / "state"
    assert run(url, store, state)[0] == 0
    grow(store, 297)
    publish_tiles(StoreLog(store), root / "default")
    tile = root / "default" / "tile" / "0" / "000"
    good = tile.read_bytes()
    data = bytearray(good)
    data[100 * 32] ^= 1
    tile.write_bytes(bytes(data))
    code, report = run(url, store, state)
    assert code == 1, report
    message = report["failure"]["message"]  # type: ignore[index]
    assert "the tiles give no consistency proof from size 3 to the root of size 300" in message, (
        message
    )
    assert "not consistent" not in message
    assert not (evidence_of(report) / "consistency-proof").exists()
    assert (evidence_of(report) / "served" / "tile/0/000").read_bytes() == bytes(data)
    tile.write_bytes(good)
    assert run(url, store, state)[0] == 0  # the honest tiles: consistent, accepted


@pytest.mark.parametrize("how", ["truncated", "reordered", "rewritten"])
def test_bad_bundle(key: SignerKey, servers: ServerThread, tmp_path: Path, how: str) -> None:
    store = log(key, 7)
    root = tmp_path / "www"
    publish_tiles(StoreLog(store), root / "default")
    bundle = root / "default" / "tile" / "entries" / "000.p" / "7"
    entries = parse_bundle(bundle.read_bytes(), 7)
    if how == "truncated":
        bundle.write_bytes(format_bundle(entries[:6]))
    elif how == "reordered":
        bundle.write_bytes(format_bundle([entries[1], entries[0], *entries[2:]]))
    else:
        bundle.write_bytes(format_bundle([*entries[:6], b"\x00" * 32]))
    url = servers.serve(static_app(root)) + "/default/"
    state = tmp_path / "state"
    code, report = run(url, store, state, "--verify-entries")
    assert code == 1, report
    message = report["failure"]["message"]  # type: ignore[index]
    if how == "truncated":
        assert "truncated or padded bundle" in message
    else:
        assert "does not hash to its level-0 tile" in message
    assert not state.exists()
    # Without --verify-entries the bundles are not read: the tiles and checkpoint are fine.
    assert run(url, store, state)[0] == 0


@pytest.mark.parametrize("how", ["reordered", "rewritten"])
def test_bad_full_bundle(key: SignerKey, servers: ServerThread, tmp_path: Path, how: str) -> None:
    # A full bundle's level-0 tile is not fetched (its leaf hashes are the tile): its root is
    # checked against the level-1 tile instead, and a bad bundle is named by that check.
    store = log(key, 300)
    root = tmp_path / "www"
    publish_tiles(StoreLog(store), root / "default")
    bundle = root / "default" / "tile" / "entries" / "000"
    entries = parse_bundle(bundle.read_bytes(), 256)
    if how == "reordered":
        bundle.write_bytes(format_bundle([*entries[:9], entries[10], entries[9], *entries[11:]]))
    else:
        bundle.write_bytes(format_bundle([*entries[:255], b"\x01" * 32]))
    url = servers.serve(static_app(root)) + "/default/"
    state = tmp_path / "state"
    code, report = run(url, store, state, "--verify-entries")
    assert code == 1, report
    message = report["failure"]["message"]  # type: ignore[index]
    assert message.endswith(
        "tile/entries/000 does not hash to the root tile tile/1/000.p/1 holds at position 0"
        " (the bundle's entries or the tile were rewritten, reordered or cut)"
    ), message
    served = evidence_of(report) / "served"
    assert (served / "tile/entries/000").read_bytes() == bundle.read_bytes()
    tile1 = root / "default" / "tile" / "1" / "000.p" / "1"
    assert (served / "tile/1/000.p/1").read_bytes() == tile1.read_bytes()
    assert sorted((served / "urls").read_text().splitlines()) == [
        f"{url}tile/1/000.p/1",
        f"{url}tile/entries/000",
    ]
    assert not state.exists()
    assert run(url, store, state)[0] == 0  # the tiles and checkpoint are fine


def test_rewritten_level0_tile_is_not_blamed_on_the_entries(
    key: SignerKey, servers: ServerThread, tmp_path: Path
) -> None:
    # Tile 0/000 of a 300-leaf tree is off the right edge: only the entry check reads it.
    store = log(key, 300)
    root = tmp_path / "www"
    publish_tiles(StoreLog(store), root / "default")
    tile = root / "default" / "tile" / "0" / "000"
    data = bytearray(tile.read_bytes())
    data[40] ^= 1
    tile.write_bytes(bytes(data))
    url = servers.serve(static_app(root)) + "/default/"
    state = tmp_path / "state"
    code, report = run(url, store, state, "--check-tiles")
    assert code == 1, report
    message = report["failure"]["message"]  # type: ignore[index]
    assert "tile/entries/000 does not hash to its level-0 tile tile/0/000" in message
    assert "the bundle's entries or the tile were rewritten" in message
    served = evidence_of(report) / "served"
    assert (served / "tile/0/000").read_bytes() == bytes(data)
    bundle = root / "default" / "tile" / "entries" / "000"
    assert (served / "tile/entries/000").read_bytes() == bundle.read_bytes()
    tile.write_bytes(bytes(data[:40]) + bytes([data[40] ^ 1]) + bytes(data[41:]))  # honest
    code, report = run(url, store, state, "--check-tiles")
    assert code == 0, report
    listed = cast("list[dict[str, Any]]", report["checks"])
    checks = {c["id"]: c["count"] for c in listed}
    assert checks["level-0-tiles"] == 2  # 0/000 and 0/001.p/44
    state.unlink()
    tile.write_bytes(bytes(data))
    # --verify-entries alone does not read that tile (the bundle is its leaf hashes): the
    # entries and the tiles the checkpoint's root reads are right, so the round is valid.
    assert run(url, store, state, "--verify-entries")[0] == 0


def test_unknown_key(key: SignerKey, servers: ServerThread, tmp_path: Path) -> None:
    store = log(key, 3)
    stranger = log(generate_key(ORIGIN), 3)  # same origin, another key
    url = servers.serve(make_app(Switchable(stranger).server)) + "/default/"
    code, report = run(url, store, tmp_path / "state")
    assert code == 1
    assert report["failure"]["kind"] == "unverified"  # type: ignore[index]
    assert (evidence_of(report) / "checkpoint.new").read_bytes() == stranger.published()[-1]
    assert not (tmp_path / "state").exists()


def test_quorum_not_met(key: SignerKey, servers: ServerThread, tmp_path: Path) -> None:
    store = log(key, 3)
    witness = generate_key("witness.example/w1").vkey()
    url = servers.serve(make_app(Switchable(store).server)) + "/default/"
    argv = ["follow", url, "--log-vkey", store.log_vkey, "--witness", witness, "--quorum", "1"]
    code, _, err = call_main(main, [*argv, "--state", str(tmp_path / "state"), "--once"])
    assert code == 1
    assert err.startswith("tlog-verify: follow: INVALID: ") and err.count("\n") == 1
    assert not (tmp_path / "state").exists()


def test_a_server_that_does_not_answer_is_unusable(key: SignerKey, tmp_path: Path) -> None:
    store = log(key, 1)
    code, _, err = call_main(
        main,
        [
            "follow",
            "http://127.0.0.1:9/",
            "--log-vkey",
            store.log_vkey,
            "--state",
            str(tmp_path / "state"),
            "--once",
            "--timeout",
            "5",
        ],
    )
    assert code == 2 and err.startswith(
        "tlog-verify: follow: UNUSABLE: log: GET http://127.0.0.1:9/checkpoint: "
    )


def test_the_loop_stops_at_the_first_detection(
    key: SignerKey, servers: ServerThread, tmp_path: Path
) -> None:
    honest = log(key, 5)
    source = Switchable(honest)
    url = servers.serve(make_app(source.server)) + "/default/"
    policy = build_policy(policy=None, log_vkey=honest.log_vkey, witnesses=[], quorum=None)
    rounds: list[Report] = []

    def between(_: float) -> None:
        if len(rounds) == 2:
            grow(honest, 3)
        if len(rounds) == 3:
            source.store = log(key, 8, first=50)  # same size, another tree

    report = follow(
        lambda: follow_once(url, policy=policy, state=tmp_path / "state"),
        interval=0,
        on_round=rounds.append,
        sleep=between,
    )
    assert [r.status for r in rounds] == [0, 0, 0, 1]
    assert report is rounds[-1]
    assert "two roots for size 8" in (report.failure.message if report.failure else "")
