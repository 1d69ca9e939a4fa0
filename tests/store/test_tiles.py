"""The log in public: tlog-tiles from the store (store.tilereads, store.tiles, store.tilefiles).

Checks the rules of C2SP tlog-tiles (docs/specs.md §6; TT-n are its checklist) and of
docs/tiles.md: a tile is the stored hashes at its positions, a bundle the sealed heads, only
what the latest kept checkpoint covers exists, and the files ``tlog-store tiles`` writes are
the resources, byte for byte — the same bytes our tile code gives for the same leaves, down to
every file of a log Tessera wrote (testdata/tessera).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from store import Append, JournalStore, make_event, open_in_memory
from store.errors import CorruptError
from store.tilefiles import TEMP_PREFIX, publish_tiles
from store.tiles import (
    CHECKPOINT_TYPE,
    IMMUTABLE_CACHE,
    PARTIAL_CACHE,
    TILE_TYPE,
    EntryLog,
    NotFoundError,
    StoreLog,
    TiledLog,
    tile_reads,
)
from tests.conftest import Backend
from tests.store.helpers import FakeClock, StoreFactory, delete_run
from tlog import merkle
from tlog.errors import MalformedError, UsageError, VerificationError
from tlog.tiles import (
    Bundle,
    Tile,
    bundles_for_size,
    parse_bundle,
    tiles_for_size,
    tiles_from_leaf_hashes,
)

TESSERA = Path(__file__).resolve().parents[2] / "testdata" / "tessera"


def seal_runs(store: JournalStore, first: int, count: int) -> None:
    """Seal ``count`` one-record runs ``r<first>`` … into the store's log."""
    for i in range(first, first + count):
        store.append(1, [Append(f"r{i}", "Note", data=i)])
        store.seal(f"r{i}", 1, "ok")


@pytest.fixture(scope="module")
def big() -> Iterator[JournalStore]:
    """One in-memory store with 600 sealed runs (the tree crosses 256 twice)."""
    store = open_in_memory(origin="example.com/journal")
    seal_runs(store, 0, 600)
    yield store
    store.close()


def heads_of(store: JournalStore) -> list[bytes]:
    return [s.head for s in store.seals(limit=100_000)]


# --- tiles are the stored hashes at their positions --------------------------------------------


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(size=st.integers(1, 600))
def test_every_tile_of_a_size_is_the_tile_of_its_leaves(big: JournalStore, size: int) -> None:
    # TT-8, TT-9, §6.3: the store's tiles (one SELECT of stored hashes each) are exactly what
    # tlog.tiles builds from the leaf hashes, full and partial, at every level.
    leaves = [merkle.leaf_hash(h) for h in heads_of(big)[:size]]
    want = tiles_from_leaf_hashes(leaves)
    reads = tile_reads(big)
    assert set(want) == set(tiles_for_size(size))
    for tile, data in want.items():
        assert reads.tile_hashes(tile.level, tile.index, tile.width) == data


def test_a_tile_that_is_not_complete_is_refused(big: JournalStore) -> None:
    reads = tile_reads(big)
    with pytest.raises(UsageError, match="not complete"):
        reads.tile_hashes(0, 2, 89)  # 600 = 2·256 + 88
    with pytest.raises(UsageError, match="not complete"):
        reads.tile_hashes(1, 0, 3)
    assert len(reads.tile_hashes(0, 2, 88)) == 88 * 32
    assert len(reads.tile_hashes(1, 0, 2)) == 64


def test_bundles_are_the_sealed_heads(big: JournalStore) -> None:
    # TT-14: a bundle is uint16_be(len) ‖ entry, and entry i hashes to position i of the
    # level-0 tile; our entries are the 32-byte sealed heads.
    log = TiledLog(StoreLog(big))
    heads = heads_of(big)
    for bundle in bundles_for_size(600):
        data = log.tile_or_bundle(bundle.path(), 600).body
        assert len(data) == 34 * bundle.width
        entries = parse_bundle(data, bundle.width)
        assert entries == heads[bundle.index * 256 : bundle.index * 256 + bundle.width]
        tile = log.tile_or_bundle(bundle.tile.path(), 600).body
        assert b"".join(merkle.leaf_hash(e) for e in entries) == tile


def test_a_bundle_with_a_deleted_run_is_never_built(tmp_path: Path) -> None:
    factory = StoreFactory(Backend("sqlite", db=str(tmp_path / "s.db")), FakeClock())
    try:
        store = factory.open()
        seal_runs(store, 0, 5)
        delete_run(store, "r2")
        with pytest.raises(CorruptError, match="log position 2 has no sealed run"):
            tile_reads(store).sealed_heads(0, 5)
        assert len(tile_reads(store).sealed_heads(0, 2)) == 2
    finally:
        factory.close()


def test_a_bundle_whose_head_is_not_the_leaf_is_never_built(tmp_path: Path) -> None:
    factory = StoreFactory(Backend("sqlite", db=str(tmp_path / "s.db")), FakeClock())
    try:
        store = factory.open()
        seal_runs(store, 0, 3)
        store._execute_for_test(  # type: ignore[attr-defined]
            "UPDATE run_seal SET head = ? WHERE position = 1", (b"\x07" * 32,)
        )
        with pytest.raises(CorruptError, match="position 1 is not the log's leaf"):
            tile_reads(store).sealed_heads(0, 3)
    finally:
        factory.close()


def test_a_full_bundle_is_checked_by_its_subtree_root_and_gives_its_level_0_tile(
    tmp_path: Path,
) -> None:
    """A full bundle's heads are checked against the one stored root of their subtree; a
    wrong head is still named by position, and a stored root that is not its leaves' root is
    refused too. The leaf hashes given with the heads are the stored level-0 tile."""
    factory = StoreFactory(Backend("sqlite", db=str(tmp_path / "s.db")), FakeClock())
    try:
        store = factory.open()
        seal_runs(store, 0, 300)
        reads = tile_reads(store)
        heads, leaves = reads.sealed_heads_and_leaves(0, 256)
        assert heads == heads_of(store)[:256]
        assert b"".join(leaves) == reads.tile_hashes(0, 0, 256)
        assert reads.sealed_heads_and_leaves(256, 44)[1] == [
            merkle.leaf_hash(h) for h in heads_of(store)[256:]
        ]
        root = merkle.stored_hash_index(8, 0)
        store._execute_for_test(  # type: ignore[attr-defined]
            "UPDATE tree_hash SET hash = ? WHERE tenant = 'default' AND idx = ?",
            (b"\x09" * 32, root),
        )
        with pytest.raises(CorruptError, match=r"stored root of positions 0\.\.255 is not"):
            reads.sealed_heads(0, 256)
        assert len(reads.sealed_heads(0, 255)) == 255  # a partial range reads the leaves
        store._execute_for_test(  # type: ignore[attr-defined]
            "UPDATE run_seal SET head = ? WHERE position = 200", (b"\x07" * 32,)
        )
        with pytest.raises(CorruptError, match="position 200 is not the log's leaf"):
            reads.sealed_heads(0, 256)
    finally:
        factory.close()


def test_a_level_0_tile_never_disagrees_with_its_bundle(tmp_path: Path) -> None:
    """A level-0 tile, partial or full, is its bundle's checked leaf hashes: a corrupt stored
    leaf hash makes the tile's read fail (served: 500; published: refused), never serve a
    tile that disagrees with the bundle of the same positions."""
    factory = StoreFactory(Backend("sqlite", db=str(tmp_path / "s.db")), FakeClock())
    try:
        store = factory.open()
        seal_runs(store, 0, 300)
        store.sign_checkpoint()
        log = TiledLog(StoreLog(store))
        good = log.tile_or_bundle("tile/0/001.p/44", 300).body
        assert good == b"".join(merkle.leaf_hash(h) for h in heads_of(store)[256:])
        store._execute_for_test(  # type: ignore[attr-defined]
            "UPDATE tree_hash SET hash = ? WHERE tenant = 'default' AND idx = ?",
            (b"\x09" * 32, merkle.stored_hash_index(0, 290)),
        )
        for path in ("tile/0/001.p/44", "tile/entries/001.p/44"):
            with pytest.raises(CorruptError, match="position 290 is not the log's leaf"):
                log.tile_or_bundle(path, 300)
        with pytest.raises(CorruptError, match="position 290 is not the log's leaf"):
            publish_tiles(StoreLog(store), tmp_path / "www")
        assert not (tmp_path / "www" / "checkpoint").exists()
    finally:
        factory.close()


def test_tile_reads_on_every_backend(backend: Backend) -> None:
    factory = StoreFactory(backend, FakeClock())
    try:
        a, b = factory.open("a"), factory.open("b")
        seal_runs(a, 0, 300)
        seal_runs(b, 0, 3)
        a.sign_checkpoint()
        b.sign_checkpoint()
        seal_runs(a, 300, 2)  # beyond the kept checkpoint
        a.sign_checkpoint()
        leaves = [merkle.leaf_hash(h) for h in heads_of(a)]
        reads = tile_reads(a)
        assert reads.tile_hashes(0, 0, 256) == b"".join(leaves[:256])
        assert reads.tile_hashes(0, 1, 46) == b"".join(leaves[256:302])
        assert reads.tile_hashes(1, 0, 1) == a.tree_root(256)
        assert reads.sealed_heads(255, 3) == heads_of(a)[255:258]
        c = factory.open("c")
        seal_runs(c, 0, 1)  # a log, nothing published
        assert reads.tenants() == ["a", "b"]
        # An inbox log's checkpoints (kept as "a/inbox") are not a tenant's.
        a.inbox.buffer(make_event("src", "1", "Paid", [("order", "1")], {}))
        a.inbox.sign_checkpoint()
        assert reads.tenants() == ["a", "b"] and "a/inbox" not in reads.log_tenants()
        assert reads.log_tenants() == ["a", "b", "c"]
        assert reads.kept_sizes() == [300, 302]
        assert reads.kept_sizes(300) == [302]
        assert reads.latest_note() == a.published()[-1]
        assert tile_reads(c).latest_note() is None
    finally:
        factory.close()


# --- what exists: only what the latest kept checkpoint covers ------------------------------------


def test_only_the_latest_kept_checkpoint_is_served() -> None:
    store = open_in_memory(origin="example.com/journal")
    try:
        log = TiledLog(StoreLog(store))
        with pytest.raises(NotFoundError, match="no checkpoint"):
            log.checkpoint()
        seal_runs(store, 0, 260)
        note = store.sign_checkpoint()
        seal_runs(store, 260, 10)  # sealed, but no checkpoint names them yet
        resource, size = log.checkpoint()
        assert (resource.body, size) == (note, 260)
        assert (resource.content_type, resource.cache_control) == (
            CHECKPOINT_TYPE,
            "public, max-age=5",
        )
        full = log.tile_or_bundle("tile/0/000", size)
        assert (full.content_type, full.cache_control) == (TILE_TYPE, IMMUTABLE_CACHE)
        partial = log.tile_or_bundle("tile/0/001.p/4", size)
        assert (len(partial.body), partial.cache_control) == (128, PARTIAL_CACHE)
        # Every narrower partial width is served too (the kept checkpoints of smaller sizes).
        assert log.tile_or_bundle("tile/0/001.p/1", size).body == partial.body[:32]
        for beyond in (
            "tile/0/001.p/5",
            "tile/0/001",
            "tile/entries/001.p/5",
            "tile/1/000.p/2",
            "tile/2/000.p/1",
            "tile/0/002.p/1",
        ):
            with pytest.raises(NotFoundError):
                log.tile_or_bundle(beyond, size)
        assert log.tile_or_bundle("tile/1/000.p/1", size).body == store.tree_root(256)
    finally:
        store.close()


@pytest.mark.parametrize(
    "path",
    [
        "tile/0/0",  # not 3 digits
        "tile/0/001/002",  # missing x
        "tile/0/x000/001",  # a leading zero group
        "tile/00/000",  # a level with a leading zero
        "tile/64/000",  # level out of range
        "tile/0/000.p/0",  # empty tiles do not exist
        "tile/0/000.p/256",  # a full tile has no suffix
        "tile/0/000.p/007",  # leading zero in the width
        "tile/0/000.p/",
        "tile/entries/000.p/300",
        "tile/data/000",  # static-ct-api's name
        "tile/8/0/000",  # Go's sumdb height segment
        "tile/0/000/",
    ],
)
def test_a_non_canonical_path_is_malformed(big: JournalStore, path: str) -> None:
    # TT-4, TT-5, TT-6: one spelling per tile, else 400.
    with pytest.raises(MalformedError):
        TiledLog(StoreLog(big)).tile_or_bundle(path, 600)


# --- the Tessera log: same leaves, same tiles ---------------------------------------------------


def tessera_log() -> EntryLog:
    keys = json.loads((TESSERA / "log_keys.json").read_text(encoding="utf-8"))
    entries = [e.encode("utf-8") for e in keys["entries_in_order"]]
    notes = [(TESSERA / "log" / f"checkpoint.{n}").read_bytes() for n in range(16)]
    return EntryLog(entries, notes)


def tree_files(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def test_the_tessera_log_published_from_its_entries_is_tesseras_tree(tmp_path: Path) -> None:
    # Our tile code, from Tessera's 15 entries and its 16 checkpoints, writes exactly the files
    # Tessera's POSIX driver wrote: every partial tile and bundle of every size, and the latest
    # checkpoint.
    done = publish_tiles(tessera_log(), tmp_path / "log")
    assert (done.old_size, done.size, done.written) == (0, 15, 30)
    want = {k: v for k, v in tree_files(TESSERA / "log").items() if not k.startswith("checkpoint.")}
    assert tree_files(tmp_path / "log") == want


def test_the_tessera_log_published_one_size_at_a_time(tmp_path: Path) -> None:
    keys = json.loads((TESSERA / "log_keys.json").read_text(encoding="utf-8"))
    entries = [e.encode("utf-8") for e in keys["entries_in_order"]]
    for n in range(16):
        note = (TESSERA / "log" / f"checkpoint.{n}").read_bytes()
        publish_tiles(EntryLog(entries[:n], [note]), tmp_path)
        assert (tmp_path / "checkpoint").read_bytes() == note
    want = {k: v for k, v in tree_files(TESSERA / "log").items() if not k.startswith("checkpoint.")}
    assert tree_files(tmp_path) == want


# --- static publishing ---------------------------------------------------------------------------


def test_publishing_extends_and_is_idempotent(tmp_path: Path) -> None:
    store = open_in_memory(origin="example.com/journal")
    out = tmp_path / "out"
    try:
        seal_runs(store, 0, 100)
        store.sign_checkpoint()
        seal_runs(store, 100, 200)
        store.sign_checkpoint()
        first = publish_tiles(StoreLog(store), out)
        assert (first.old_size, first.size) == (0, 300)
        # Partial tiles of both kept sizes (TT-11) and the full tile once.
        files = tree_files(out)
        assert {
            "tile/0/000.p/100",
            "tile/0/000",
            "tile/0/001.p/44",
            "tile/entries/000.p/100",
            "tile/entries/000",
            "tile/entries/001.p/44",
            "tile/1/000.p/1",
        } <= set(files)
        again = publish_tiles(StoreLog(store), out)
        assert (again.written, again.checkpoint_written) == (0, False)
        assert tree_files(out) == files
        seal_runs(store, 300, 300)
        store.sign_checkpoint()
        third = publish_tiles(StoreLog(store), out)
        assert (third.old_size, third.size) == (300, 600)
        log = TiledLog(StoreLog(store))
        for rel, data in tree_files(out).items():
            if rel != "checkpoint":
                assert log.tile_or_bundle(rel, 600).body == data, rel
        del files["checkpoint"]
        assert files.items() <= tree_files(out).items()  # no tile written was changed
        assert (out / "checkpoint").read_bytes() == store.published()[-1]
        assert not [p for p in out.rglob(f"{TEMP_PREFIX}*")]
    finally:
        store.close()


def test_a_crash_leaves_the_previous_checkpoint_and_the_next_run_completes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from store import tilefiles

    store = open_in_memory(origin="example.com/journal")
    out = tmp_path / "out"
    try:
        seal_runs(store, 0, 10)
        old = store.sign_checkpoint()
        publish_tiles(StoreLog(store), out)
        seal_runs(store, 10, 520)
        store.sign_checkpoint()
        real = tilefiles._write_atomic
        calls = []

        def dying(path: Path, data: bytes) -> None:
            calls.append(path)
            if len(calls) == 3:
                raise OSError(28, "No space left on device")
            real(path, data)

        monkeypatch.setattr(tilefiles, "_write_atomic", dying)
        with pytest.raises(OSError, match="No space"):
            publish_tiles(StoreLog(store), out)
        assert (out / "checkpoint").read_bytes() == old  # the checkpoint is written last
        monkeypatch.setattr(tilefiles, "_write_atomic", real)
        done = publish_tiles(StoreLog(store), out)
        assert (done.old_size, done.size) == (10, 530)
        log = TiledLog(StoreLog(store))
        for rel, data in tree_files(out).items():
            if rel != "checkpoint":
                assert log.tile_or_bundle(rel, 530).body == data, rel
    finally:
        store.close()


def test_a_file_with_other_bytes_is_never_overwritten(tmp_path: Path) -> None:
    store = open_in_memory(origin="example.com/journal")
    try:
        seal_runs(store, 0, 3)
        store.sign_checkpoint()
        bad = tmp_path / "tile" / "0" / "000.p" / "3"
        bad.parent.mkdir(parents=True)
        bad.write_bytes(b"\x00" * 96)
        with pytest.raises(VerificationError, match="other bytes"):
            publish_tiles(StoreLog(store), tmp_path)
        assert bad.read_bytes() == b"\x00" * 96
        assert not (tmp_path / "checkpoint").exists()
    finally:
        store.close()


def test_a_directory_of_another_log_or_a_larger_tree_is_refused(tmp_path: Path) -> None:
    one = open_in_memory(origin="example.com/journal")
    two = open_in_memory(origin="example.com/journal")
    other = open_in_memory(origin="example.com/other")
    try:
        seal_runs(one, 0, 5)
        one.sign_checkpoint()
        seal_runs(two, 100, 5)  # other runs: another tree of the same size
        two.sign_checkpoint()
        seal_runs(other, 0, 1)
        other.sign_checkpoint()
        publish_tiles(StoreLog(one), tmp_path)
        held = (tmp_path / "checkpoint").read_bytes()
        with pytest.raises(VerificationError, match="holds the log"):
            publish_tiles(StoreLog(other), tmp_path)
        with pytest.raises(VerificationError, match="another root for size 5"):
            publish_tiles(StoreLog(two), tmp_path)  # same origin and size, other runs: a fork
        seal_runs(one, 5, 1)
        one.sign_checkpoint()
        publish_tiles(StoreLog(one), tmp_path / "b")
        (tmp_path / "b" / "checkpoint").write_bytes(held.replace(b"\n5\n", b"\n9\n"))
        with pytest.raises(VerificationError, match="larger than the log's latest"):
            publish_tiles(StoreLog(one), tmp_path / "b")
        assert (tmp_path / "checkpoint").read_bytes() == held
    finally:
        for s in (one, two, other):
            s.close()


def test_entry_log_checks_its_notes() -> None:
    note = (TESSERA / "log" / "checkpoint.15").read_bytes()
    with pytest.raises(UsageError, match="beyond the entries"):
        EntryLog([b"one"], [note])
    log = EntryLog([b"one"])
    assert log.latest_note() is None and log.kept_sizes() == []
    assert hashlib.sha256(b"\x00one").digest() == log.tile_hashes(0, 0, 1)
    assert (
        Tile(0, 0, 1).path() == "tile/0/000.p/1" and Bundle(0, 1).path() == "tile/entries/000.p/1"
    )
