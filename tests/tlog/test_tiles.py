"""Tests for tlog.tiles: C2SP tlog-tiles (https://c2sp.org/tlog-tiles) paths, tile contents,
tile math and entry bundles.

Hashes here are computed with hashlib directly (not with tlog code), so that the tests are an
independent oracle for the module's RFC 6962 hashing.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Callable, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.vectors import TESTDATA
from tlog import merkle
from tlog.encoding import parse_hash
from tlog.errors import MalformedError, UsageError
from tlog.tiles import (
    FULL_TILE_SIZE,
    MAX_ENTRY_SIZE,
    MAX_LEVEL,
    MAX_TILE_INDEX,
    STATIC_CT_MAX_LEVEL,
    TILE_WIDTH,
    Bundle,
    Tile,
    TileHashReader,
    _new_tile_coords,  # private on purpose: general in the height, to run Go's height-10 vectors
    bundles_for_size,
    consistency_proof_from_tiles,
    consistency_tiles,
    format_bundle,
    format_tile_index,
    hash_from_tile,
    locate_node,
    new_bundles,
    new_level_tiles,
    new_tiles,
    parse_bundle,
    parse_tile_index,
    parse_tile_path,
    tile_root,
    tiles_for_size,
    tiles_from_leaf_hashes,
)

TESSERA = TESTDATA / "tessera"

EMPTY_ROOT = hashlib.sha256(b"").digest()


# --- independent RFC 6962 reference ---------------------------------------------------------


def leaf_hash(entry: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + entry).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def reference_root(hashes: Sequence[bytes]) -> bytes:
    """RFC 6962 §2.1 MTH over leaf hashes, straight from the definition (split at 2^k < n)."""
    n = len(hashes)
    if n == 0:
        return EMPTY_ROOT
    if n == 1:
        return hashes[0]
    k = 1 << ((n - 1).bit_length() - 1)
    return node_hash(reference_root(hashes[:k]), reference_root(hashes[k:]))


@functools.cache
def leaves(count: int) -> tuple[bytes, ...]:
    """Leaf hashes of entries 0..count-1, each entry its index as 8 big-endian bytes."""
    return tuple(leaf_hash(i.to_bytes(8, "big")) for i in range(count))


def reader(tiles: dict[Tile, bytes], reads: list[Tile] | None = None) -> Callable[[Tile], bytes]:
    """A read_tile callback over a dict; a missing tile fails the test with KeyError."""

    def read(tile: Tile) -> bytes:
        if reads is not None:
            reads.append(tile)
        return tiles[tile]

    return read


def paths(tiles: Sequence[Tile | Bundle]) -> list[str]:
    return [t.path() for t in tiles]


# --- tlog-tiles, path encoding --------------------------------------------------------------


@pytest.mark.parametrize(
    ("index", "encoded"),
    [
        (0, "000"),
        (42, "042"),
        (999, "999"),
        (1000, "x001/000"),
        (1234, "x001/234"),
        (1234067, "x001/x234/067"),
        (10**9, "x001/x000/x000/000"),
        (MAX_TILE_INDEX, "x018/x446/x744/x073/x709/x551/615"),
    ],
)
def test_spec_6_2_index_encoding_examples(index: int, encoded: str) -> None:
    assert format_tile_index(index) == encoded
    assert parse_tile_index(encoded) == index
    assert Tile(0, index).path() == f"tile/0/{encoded}"
    assert parse_tile_path(f"tile/0/{encoded}") == Tile(0, index)


def test_spec_6_2_level_width_and_entries_segment() -> None:
    assert Tile(0, 0).path() == "tile/0/000"
    assert Tile(63, 0).path() == "tile/63/000"
    assert Tile(2, 5, 1).path() == "tile/2/005.p/1"
    assert Tile(2, 5, 255).path() == "tile/2/005.p/255"
    # A full tile never carries .p/256.
    assert Tile(2, 5, 256).path() == "tile/2/005"
    assert Bundle(1234067).path() == "tile/entries/x001/x234/067"
    assert Bundle(0, 7).path() == "tile/entries/000.p/7"
    assert parse_tile_path("tile/entries/000.p/7") == Bundle(0, 7)
    assert parse_tile_path("tile/entries/x001/000") == Bundle(1000)


def test_spec_6_2_static_ct_levels() -> None:
    assert parse_tile_path("tile/5/000", max_level=STATIC_CT_MAX_LEVEL) == Tile(5, 0)
    with pytest.raises(MalformedError, match="level 6 is larger than 5"):
        parse_tile_path("tile/6/000", max_level=STATIC_CT_MAX_LEVEL)
    assert parse_tile_path("tile/entries/000", max_level=STATIC_CT_MAX_LEVEL) == Bundle(0)
    with pytest.raises(UsageError):
        parse_tile_path("tile/0/000", max_level=64)


# --- tlog-tiles, tile contents --------------------------------------------------------------


def test_spec_6_3_full_tile_is_256_hashes_8192_bytes() -> None:
    assert TILE_WIDTH == 256
    assert FULL_TILE_SIZE == 8192
    tiles = tiles_from_leaf_hashes(leaves(256))
    assert tiles[Tile(0, 0)] == b"".join(leaves(256))
    assert len(tiles[Tile(0, 0)]) == 8192
    assert Tile(0, 0).data_size == 8192
    assert Tile(0, 0, 3).data_size == 96


def test_spec_6_3_size_70000() -> None:
    tiles = tiles_for_size(70_000)
    level0 = [t for t in tiles if t.level == 0]
    assert level0[:273] == [Tile(0, n) for n in range(273)]
    assert paths(level0[273:]) == ["tile/0/273.p/112"]
    assert paths([t for t in tiles if t.level > 0]) == [
        "tile/1/000",
        "tile/1/001.p/17",
        "tile/2/000.p/1",
    ]
    assert len(tiles) == 273 + 1 + 2 + 1


def test_spec_6_3_size_256() -> None:
    assert paths(tiles_for_size(256)) == ["tile/0/000", "tile/1/000.p/1"]


def test_spec_6_3_size_65536() -> None:
    tiles = tiles_for_size(65_536)
    assert tiles[:256] == [Tile(0, n) for n in range(256)]
    assert paths(tiles[256:]) == ["tile/1/000", "tile/2/000.p/1"]


def test_spec_6_3_size_0_has_no_tiles() -> None:
    assert tiles_for_size(0) == []
    assert bundles_for_size(0) == []
    assert tiles_from_leaf_hashes([]) == {}


@given(st.integers(min_value=0, max_value=300_000))
def test_spec_6_3_partial_width_formula(size: int) -> None:
    # The level-l partial tile has width floor(s / 256^l) mod 256 and exists iff that is non-zero.
    tiles = tiles_for_size(size)
    level = 0
    while size >> (8 * level):
        hashes = size >> (8 * level)
        at_level = [t for t in tiles if t.level == level]
        assert [t for t in at_level if t.is_full] == [Tile(level, n) for n in range(hashes // 256)]
        partial = [t for t in at_level if not t.is_full]
        width = hashes % 256
        assert partial == ([Tile(level, hashes // 256, width)] if width else [])
        level += 1
    assert all(t.level < level for t in tiles)


@given(st.integers(min_value=1, max_value=(1 << 63) - 1), st.data())
def test_spec_6_3_partial_width_formula_large(size: int, data: st.DataObject) -> None:
    # Too many tiles to list: check through the tile holding the last hash of a level.
    level = data.draw(st.integers(min_value=0, max_value=(size.bit_length() - 1) // 8))
    hashes = size >> (8 * level)
    tile, _, end = locate_node(8 * level, hashes - 1, size)
    width = hashes % 256
    assert tile == (Tile(level, hashes // 256, width) if width else Tile(level, hashes // 256 - 1))
    assert end == (width or 256)


def test_spec_6_3_higher_level_entry_is_root_of_full_tile_below() -> None:
    # MTH(D[(n·256+i)·256^l : (n·256+i+1)·256^l]) for level 1.
    size = 256 * 3 + 5
    tiles = tiles_from_leaf_hashes(leaves(size))
    level1 = tiles[Tile(1, 0, 3)]
    for i in range(3):
        want = reference_root(leaves(size)[i * 256 : (i + 1) * 256])
        assert level1[i * 32 : (i + 1) * 32] == want
    # Tile spans: start and end index of the full tile.
    assert (Tile(1, 2).start_index, Tile(1, 2).end_index) == (2 * 65536, 3 * 65536)
    assert (Tile(0, 5, 1).start_index, Tile(0, 5, 1).end_index) == (5 * 256, 6 * 256)


# --- tlog-tiles, node locations -------------------------------------------------------------


@pytest.mark.parametrize(
    ("height", "index", "tile", "start", "end"),
    [
        (0, 0, Tile(0, 0, 1), 0, 1),
        (0, 300, Tile(0, 1, 45), 44, 45),
        (3, 5, Tile(0, 0, 48), 40, 48),
        (7, 1, Tile(0, 0, 256), 128, 256),
        (8, 3, Tile(1, 0, 4), 3, 4),
        (10, 70, Tile(1, 1, 28), 24, 28),
        (16, 0, Tile(2, 0, 1), 0, 1),
    ],
)
def test_spec_6_5_locate_node(height: int, index: int, tile: Tile, start: int, end: int) -> None:
    assert locate_node(height, index) == (tile, start, end)


def test_spec_6_5_locate_node_in_a_tree() -> None:
    # In a tree of size 70,000, leaf 69,999 is in the partial level-0 tile.
    assert locate_node(0, 69_999, 70_000) == (Tile(0, 273, 112), 111, 112)
    # Height-8 node 260 (leaves 66,560..66,815) is in tile/1/001.p/17.
    assert locate_node(8, 260, 70_000) == (Tile(1, 1, 17), 4, 5)
    # A node that is not complete in the tree is not there.
    with pytest.raises(UsageError, match="not in a tree of size"):
        locate_node(0, 70_000, 70_000)
    with pytest.raises(UsageError, match="not in a tree of size"):
        locate_node(8, 273, 70_000)
    with pytest.raises(UsageError):
        locate_node(-1, 0)
    with pytest.raises(UsageError):
        locate_node(0, -1)
    with pytest.raises(UsageError):
        locate_node(8 * 64, 0)


@settings(max_examples=60, deadline=None)
@given(st.integers(min_value=1, max_value=5000), st.data())
def test_spec_6_5_hash_from_tile_matches_reference(size: int, data: st.DataObject) -> None:
    height = data.draw(st.integers(min_value=0, max_value=size.bit_length() - 1))
    index = data.draw(st.integers(min_value=0, max_value=(size >> height) - 1))
    tiles = tiles_from_leaf_hashes(leaves(size))
    tile, _, _ = locate_node(height, index, size)
    got = hash_from_tile(tile, tiles[tile], height, index)
    assert got == reference_root(leaves(size)[index << height : (index + 1) << height])


def test_hash_from_tile_misuse() -> None:
    tiles = tiles_from_leaf_hashes(leaves(300))
    full, partial = tiles[Tile(0, 0)], tiles[Tile(0, 1, 44)]
    assert hash_from_tile(Tile(0, 1, 44), partial, 0, 299) == leaves(300)[299]
    with pytest.raises(UsageError, match="does not hold node"):
        hash_from_tile(Tile(0, 0), full, 0, 299)  # wrong tile
    with pytest.raises(UsageError, match="does not hold node"):
        hash_from_tile(Tile(0, 1, 40), partial[: 40 * 32], 0, 299)  # too narrow
    with pytest.raises(UsageError, match="does not hold node"):
        hash_from_tile(Tile(1, 0, 1), tiles[Tile(1, 0, 1)], 0, 0)  # wrong level
    with pytest.raises(MalformedError, match="is 1376 bytes, want 1408"):
        hash_from_tile(Tile(0, 1, 44), partial[:-32], 0, 299)


# --- testdata/tessera/README.md: transparency-dev/tessera api/layout/paths_test.go ------------


@pytest.mark.parametrize(
    ("tile", "path"),
    [
        (Bundle(0, 255), "tile/entries/000.p/255"),
        (Bundle(123456789), "tile/entries/x123/x456/789"),
        (Tile(15, 455667), "tile/15/x455/667"),
        (Tile(15, 123456789, 41), "tile/15/x123/x456/789.p/41"),
    ],
)
def test_tessera_paths_encoding(tile: Tile | Bundle, path: str) -> None:
    assert tile.path() == path
    assert parse_tile_path(path) == tile


def test_tessera_paths_parse_accept_level_63() -> None:
    path = "tile/63/x999/x999/x999/x999/x999/999.p/255"
    assert parse_tile_path(path) == Tile(63, 999_999_999_999_999_999, 255)


@pytest.mark.parametrize(
    ("path", "why"),
    [
        ("tile/0/x001/x234/067.p/", "no width"),
        ("tile/0/x001/x234/067.p", "partial suffix"),
        ("tile/0/x001/x234/", "empty element"),
        ("tile/0/x001/x234", "must not start with 'x'"),
        ("tile/0/x001", "must not start with 'x'"),
        ("tile/64/000", "level 64 is larger than 63"),
        ("tile/-1/000", "level '-1'"),
        ("tile/abc/000", "level 'abc'"),
        ("tile/0/001/002", "lacks the 'x'"),
        ("tile/0/x001/0002", "'0002' is not 3 decimal digits"),
        ("tile/0/x001/-002", "'-002' is not 3 decimal digits"),
        ("tile/0/000.p/256", "larger than 255"),
        ("tile/0/x999/x999/x999/x999/x999/x999/999", "larger than 2"),
    ],
)
def test_tessera_paths_parse_reject(path: str, why: str) -> None:
    with pytest.raises(MalformedError, match=why):
        parse_tile_path(path)


def test_tessera_leniencies_are_rejected_here() -> None:
    # Tessera's ParseTileIndexPartial accepts these; Go's tlog.ParseTilePath (and we) do not.
    with pytest.raises(MalformedError, match="zero group 'x000'"):
        parse_tile_path("tile/0/x000/001")
    with pytest.raises(MalformedError, match="leading zero"):
        parse_tile_path("tile/0/000.p/007")


# --- edge cases 22-26 (tests/tlog/__init__.py) ---------------------------------------------------


@pytest.mark.parametrize(
    ("path", "why"),
    [
        ("tile/0/x000/001", "zero group"),
        ("tile/0/0001", "not 3 decimal digits"),
        ("tile/0/1", "not 3 decimal digits"),
        ("tile/0/x001", "must not start with 'x'"),
        ("tile/0/000.p/0", "width 0"),
        ("tile/0/000.p/256", "larger than 255"),
        ("tile/0/000.p/007", "leading zero"),
        ("tile/0/000.p/", "no width"),
        ("tile/64/000", "larger than 63"),
        ("tile/-1/000", "not a canonical decimal"),
        ("tile/abc/000", "not a canonical decimal"),
        ("tile/01/000", "leading zero"),
        ("tile/0/001/002", "lacks the 'x'"),
        ("tile/0/x001/0002", "not 3 decimal digits"),
        ("tile/0/x001/-002", "not 3 decimal digits"),
        ("tile/0/x018/x446/x744/x073/x709/x551/616", "larger than 2\\^64-1"),
        ("tile/0/x001/x000/x000/x000/x000/x000/x000/000", "larger than 2\\^64-1"),
        ("tile/0/000/", "empty element"),
        ("tile/0/000.p/5/", "not a canonical decimal"),
        ("tile/entries/000/", "empty element"),
        ("tile/0//000", "empty element"),
        ("/tile/0/000", "does not start with 'tile/'"),
        ("tiles/0/000", "does not start with 'tile/'"),
        ("tile/0", "no tile index"),
        ("tile/0/", "empty element"),
        ("tile/0/000.q/5", "partial suffix"),
        ("tile/0/X001/000", "not 'x' \\+ 3 decimal digits"),
        ("tile/0/x1/000", "not 'x' \\+ 3 decimal digits"),
        ("tile/0/\u0661\u0662\u0663", "not 3 decimal digits"),  # Arabic-Indic digits
        ("tile/\u0661/000", "not a canonical decimal"),
        ("tile/0/000.p/+5", "not a canonical decimal"),
        ("tile/ 0/000", "not a canonical decimal"),
    ],
)
def test_edge_22_tile_index_encoding_is_canonical(path: str, why: str) -> None:
    with pytest.raises(MalformedError, match=why):
        parse_tile_path(path)


def test_edge_22_canonical_examples_and_static_ct() -> None:
    assert format_tile_index(999) == "999"
    assert format_tile_index(1000) == "x001/000"
    assert format_tile_index(1234067) == "x001/x234/067"
    assert parse_tile_path("tile/0/x018/x446/x744/x073/x709/x551/615") == Tile(0, MAX_TILE_INDEX)
    for level in range(6, 64):
        with pytest.raises(MalformedError, match="larger than 5"):
            parse_tile_path(f"tile/{level}/000", max_level=STATIC_CT_MAX_LEVEL)


def test_edge_23_partial_tile_widths() -> None:
    assert {"tile/0/273.p/112", "tile/1/001.p/17", "tile/2/000.p/1"} <= set(
        paths(tiles_for_size(70_000))
    )
    assert paths(tiles_for_size(256)) == ["tile/0/000", "tile/1/000.p/1"]
    assert tiles_for_size(0) == []
    # Never .p/0: a width-0 tile cannot even be constructed, and exact multiples have no partial.
    with pytest.raises(UsageError):
        Tile(0, 0, 0)
    assert all(t.is_full for t in tiles_for_size(512) if t.level == 0)


def test_edge_23_partial_tile_never_hashed_into_higher_level() -> None:
    # Size 300: level 0 has one full tile and tile/0/001.p/44. Level 1 holds only the root of the
    # full tile (width 1), never a hash of the partial one (which would make width 2).
    tiles = tiles_from_leaf_hashes(leaves(300))
    assert list(tiles) == [Tile(0, 0), Tile(0, 1, 44), Tile(1, 0, 1)]
    assert tiles[Tile(1, 0, 1)] == reference_root(leaves(300)[:256])
    # Size 70,000: tile/1/001.p/17 holds the roots of full level-0 tiles 256..272, not 273.
    tiles = tiles_from_leaf_hashes(leaves(70_000))
    level1 = tiles[Tile(1, 1, 17)]
    assert len(level1) == 17 * 32
    for i in range(17):
        n = 256 + i
        assert level1[i * 32 : (i + 1) * 32] == reference_root(
            leaves(70_000)[n * 256 : (n + 1) * 256]
        )
    # The root from tiles reads only tiles that exist, at their exact widths.
    reads: list[Tile] = []
    assert tile_root(70_000, reader(tiles, reads)) == reference_root(leaves(70_000))
    assert set(reads) <= set(tiles_for_size(70_000))
    assert len(reads) == len(set(reads))


@pytest.mark.parametrize(
    "path",
    [
        # Go checksum-database scheme, with the height segment (tile/H/L/N, tile/H/data/N).
        "tile/8/0/000",
        "tile/8/0/x001/x234/067",
        "tile/8/data/000",
        "tile/8/1/000.p/5",
        # static-ct-api data tiles.
        "tile/data/000",
        "tile/data/x001/000.p/3",
        # golang/mod tile-path fuzz seeds (height-first paths).
        "tile/4/0/001",
        "tile/4/0/001.p/5",
        "tile/3/5/x123/x456/078",
        "tile/3/5/x123/x456/078.p/2",
        "tile/1/0/x003/x057/500",
        "tile/3/5/123/456/078",
        "tile/3/-1/123/456/078",
        "tile/1/data/x003/x057/500",
    ],
)
def test_edge_24_path_schemes(path: str) -> None:
    with pytest.raises(MalformedError):
        parse_tile_path(path)


def test_edge_24_c2sp_paths_have_no_height() -> None:
    assert Tile(0, 1234067).path() == "tile/0/x001/x234/067"
    assert Bundle(1234067).path() == "tile/entries/x001/x234/067"


def test_edge_25_everything_a_checkpoint_needs_is_listed() -> None:
    # Publish order is the store's job; what it relies on here is that new_tiles/new_bundles
    # name every resource the new checkpoint implies that the old one did not.
    old, new = 70_000, 70_300
    written = set(new_tiles(old, new)) | set(tiles_for_size(old))
    assert set(tiles_for_size(new)) <= written
    assert set(bundles_for_size(new)) <= set(new_bundles(old, new)) | set(bundles_for_size(old))


def test_edge_26_entry_bundles() -> None:
    # uint16 big-endian lengths: 65,535 bytes is the largest entry, 65,536 cannot be logged.
    biggest = b"\xab" * MAX_ENTRY_SIZE
    assert format_bundle([biggest])[:2] == b"\xff\xff"
    assert parse_bundle(format_bundle([biggest]), 1) == [biggest]
    with pytest.raises(UsageError, match="65536 bytes"):
        format_bundle([b"ok", b"\x00" * 65_536])
    assert format_bundle([b"one", b""]) == b"\x00\x03one\x00\x00"
    # A partial bundle .p/W holds exactly W entries.
    entries = [str(i).encode() * i for i in range(10)]
    data = format_bundle(entries)
    assert parse_bundle(data, 10) == entries
    assert parse_bundle(data) == entries
    with pytest.raises(MalformedError, match="has 10 entries, its width is 11"):
        parse_bundle(data, 11)
    with pytest.raises(MalformedError, match="trailing bytes after its 9 entries"):
        parse_bundle(data, 9)
    # Each entry's SHA-256(0x00||entry) equals the level-0 tile hash at its position.
    tile = tiles_from_leaf_hashes(leaf_hash(e) for e in entries)[Bundle(0, 10).tile]
    for i, entry in enumerate(parse_bundle(data, 10)):
        assert leaf_hash(entry) == tile[i * 32 : (i + 1) * 32]


@pytest.mark.parametrize(
    ("data", "width", "why"),
    [
        (b"", None, "empty"),
        (b"", 1, "empty"),
        (b"\x00", None, "truncated length prefix at byte 0"),
        (b"\x00\x01a\x00", None, "truncated length prefix at byte 3"),
        (b"\x00\x05abc", None, "declares 5 bytes, only 3 remain"),
        (b"\x00\x01a\x00\x01b", 1, "3 trailing bytes after its 1 entries"),
        (b"\x00\x00" * 257, None, "more than 256 entries"),
        (b"\x00\x00" * 257, 256, "trailing bytes after its 256 entries"),
        (b"\x00\x00" * 255, 256, "has 255 entries, its width is 256"),
    ],
)
def test_parse_bundle_strict(data: bytes, width: int | None, why: str) -> None:
    with pytest.raises(MalformedError, match=why):
        parse_bundle(data, width)


def test_bundle_usage_errors() -> None:
    with pytest.raises(UsageError):
        parse_bundle(b"\x00\x00", 0)
    with pytest.raises(UsageError):
        parse_bundle(b"\x00\x00", 257)
    with pytest.raises(UsageError, match="not 0"):
        format_bundle([])
    with pytest.raises(UsageError, match="not 257"):
        format_bundle([b""] * 257)
    assert parse_bundle(format_bundle([b""] * 256), 256) == [b""] * 256


@given(st.lists(st.binary(max_size=300), min_size=1, max_size=256))
def test_bundle_round_trip(entries: list[bytes]) -> None:
    data = format_bundle(entries)
    assert parse_bundle(data) == entries
    assert parse_bundle(data, len(entries)) == entries
    if len(data) > 0:
        with pytest.raises(MalformedError):
            parse_bundle(data[:-1], len(entries))


def test_edge_22_tile_index_encoding() -> None:
    # (C2SP tlog-tiles "<N>" examples).
    for index, text in ((0, "000"), (999, "999"), (1000, "x001/000"), (1234067, "x001/x234/067")):
        assert format_tile_index(index) == text
        assert parse_tile_index(text) == index
    for bad in ("x000/001", "0001", "1", "x001", "01", "x001/", "/001", "x1/000", "001/000"):
        with pytest.raises(MalformedError):
            parse_tile_index(bad)
    assert parse_tile_path("tile/0/x001/x234/067.p/7") == Tile(0, 1234067, 7)
    for bad in (
        "tile/0/000.p/0",
        "tile/0/000.p/256",
        "tile/0/000.p/007",
        "tile/0/x000/001",
        "tile/0/0001",
        "tile/0/1",
        "tile/0/x001",
        "tile/64/000",
        "tile/00/000",
        "tile/entries/000.p/0",
    ):
        with pytest.raises(MalformedError):
            parse_tile_path(bad)
    assert parse_tile_path("tile/63/000") == Tile(63, 0)
    with pytest.raises(UsageError):
        Tile(64, 0)
    # static-ct-api: levels 0..5 only.
    assert parse_tile_path("tile/5/000", max_level=STATIC_CT_MAX_LEVEL) == Tile(5, 0)
    with pytest.raises(MalformedError):
        parse_tile_path("tile/6/000", max_level=STATIC_CT_MAX_LEVEL)


def test_edge_23_partial_tile_widths_and_level_contents() -> None:
    # (C2SP tlog-tiles examples, re-computed).
    paths = [t.path() for t in tiles_for_size(70000)]
    assert paths.count("tile/0/273.p/112") == 1
    assert [p for p in paths if not p.startswith("tile/0/")] == [
        "tile/1/000",
        "tile/1/001.p/17",
        "tile/2/000.p/1",
    ]
    assert sum(1 for t in tiles_for_size(70000) if t.level == 0 and t.is_full) == 273
    assert [t.path() for t in tiles_for_size(256)] == ["tile/0/000", "tile/1/000.p/1"]
    assert tiles_for_size(0) == []
    # Never a width-0 tile, at any size.
    for size in (1, 255, 256, 257, 65535, 65536, 65537, 70000, 16777216):
        assert all(1 <= t.width <= TILE_WIDTH for t in tiles_for_size(size))
    with pytest.raises(UsageError):
        Tile(0, 0, 0)
    # Never hash a partial tile into a higher level: the level-1 tiles of size 70000 hold the
    # roots of the 273 full level-0 tiles only, not of 273.p/112.
    leaves = [merkle.leaf_hash(i.to_bytes(4, "big")) for i in range(70000)]
    tiles = tiles_from_leaf_hashes(leaves)
    assert set(tiles) == set(tiles_for_size(70000))
    full_roots = [merkle.root(leaves[i * 256 : (i + 1) * 256]) for i in range(273)]
    assert tiles[Tile(1, 0)] == b"".join(full_roots[:256])
    assert tiles[Tile(1, 1, 17)] == b"".join(full_roots[256:])
    assert merkle.root(leaves[273 * 256 :]) not in tiles[Tile(1, 1, 17)]
    assert tiles[Tile(2, 0, 1)] == merkle.root(leaves[:65536])
    assert tile_root(70000, tiles.__getitem__) == merkle.root(leaves)


def test_edge_24_path_schemes_foreign_spellings() -> None:
    assert Tile(0, 5).path() == "tile/0/005"
    assert Bundle(5).path() == "tile/entries/005"
    assert Bundle(5, 3).path() == "tile/entries/005.p/3"
    assert parse_tile_path("tile/entries/x001/000.p/5") == Bundle(1000, 5)
    # Go sumdb's tile/8/<L>/<N> and tile/8/data/<N>, static-ct's tile/data/<N>: not C2SP paths.
    for foreign in ("tile/8/0/000", "tile/8/1/x001/000", "tile/8/data/000", "tile/data/000"):
        with pytest.raises(MalformedError):
            parse_tile_path(foreign)
    # The one spelling that is valid in both means something else in each: C2SP level 8.
    assert parse_tile_path("tile/8/000") == Tile(8, 0)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 300_000), min_size=1, max_size=8))
def test_edge_25_publish_order_tiles_cover_each_checkpoint(growth: list[int]) -> None:
    sizes = sorted(growth)
    written: set[Tile] = set()
    bundles: set[Bundle] = set()
    previous = 0
    published: list[int] = []
    for size in sizes:
        new = new_tiles(previous, size)
        had = set(tiles_for_size(previous))
        assert new == [t for t in tiles_for_size(size) if t not in had]
        written.update(new)
        bundles.update(new_bundles(previous, size))
        published.append(size)
        # Every tile and bundle each published checkpoint implies is there.
        for s in published:
            assert set(tiles_for_size(s)) <= written
            assert set(bundles_for_size(s)) <= bundles
        previous = size


def test_edge_25_publish_order_tile_contents() -> None:
    # Write only new_tiles(old, new) at each growth; every published size's root is then
    # computable from what was written, and tile_root reads only tiles the size implies.
    leaves = [merkle.leaf_hash(b"e%d" % i) for i in range(66000)]
    store: dict[Tile, bytes] = {}
    published: list[int] = []
    previous = 0
    for size in (1, 255, 256, 257, 300, 511, 512, 65535, 65536, 65537, 66000):
        built = tiles_from_leaf_hashes(leaves[:size])
        for tile in new_tiles(previous, size):
            store[tile] = built[tile]
        published.append(size)
        for s in published:
            implied = set(tiles_for_size(s))

            def read(tile: Tile, implied: set[Tile] = implied) -> bytes:
                assert tile in implied
                return store[tile]

            assert tile_root(s, read) == merkle.root(leaves[:s])
        previous = size


def test_edge_26_entry_bundles_match_level_0_tiles() -> None:
    with pytest.raises(UsageError):
        format_bundle([b"x" * 65536])
    big = b"y" * 65535
    assert parse_bundle(format_bundle([big]), 1) == [big]
    assert format_bundle([big])[:2] == b"\xff\xff"
    entries = [b"entry %d " % i * (i % 5) for i in range(300)]
    assert bundles_for_size(300) == [Bundle(0), Bundle(1, 44)]
    tiles = tiles_from_leaf_hashes(merkle.leaf_hash(e) for e in entries)
    for bundle in bundles_for_size(300):
        first = bundle.index * TILE_WIDTH
        data = format_bundle(entries[first : first + bundle.width])
        got = parse_bundle(data, bundle.width)
        assert len(got) == bundle.width
        # Each entry's SHA-256(0x00 || entry) is the level-0 tile hash at its position.
        assert b"".join(merkle.leaf_hash(e) for e in got) == tiles[bundle.tile]
        if not bundle.is_full:
            with pytest.raises(MalformedError):
                parse_bundle(data, bundle.width + 1)
            with pytest.raises(MalformedError):
                parse_bundle(data, bundle.width - 1)
            with pytest.raises(MalformedError):
                parse_bundle(data, TILE_WIDTH)


# --- dataclass invariants ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("level", "index", "width"),
    [(64, 0, 1), (-1, 0, 1), (0, -1, 1), (0, 1 << 64, 1), (0, 0, 0), (0, 0, 257)],
)
def test_tile_out_of_range_is_usage_error(level: int, index: int, width: int) -> None:
    with pytest.raises(UsageError):
        Tile(level, index, width)


@pytest.mark.parametrize(
    "make",
    [
        lambda: Tile(0, True),
        lambda: Tile(True, 0),
        lambda: Tile(0, 0, True),
        lambda: Tile(0, 1.0),  # type: ignore[arg-type]
        lambda: Bundle(False, 1),
        lambda: format_tile_index(True),
    ],
)
def test_bools_and_floats_are_not_tile_numbers(make: Callable[[], object]) -> None:
    # True is an int to Python: it would have been spelled tile/0/x00T/rue.
    with pytest.raises(UsageError):
        make()


@pytest.mark.parametrize(
    "path",
    ["tile/0/000.p/" + "9" * 100_000, "tile/" + "9" * 100_000 + "/000", "tile/0/" + "1" * 100_000],
)
def test_a_hostile_megabyte_path_is_not_echoed_whole(path: str) -> None:
    with pytest.raises(MalformedError) as e:
        parse_tile_path(path)
    assert len(str(e.value)) < 400


def test_bundle_out_of_range_and_tile() -> None:
    with pytest.raises(UsageError):
        Bundle(-1)
    with pytest.raises(UsageError):
        Bundle(0, 0)
    assert Bundle(3, 7).tile == Tile(0, 3, 7)
    assert Bundle(3).is_full
    assert not Bundle(3, 7).is_full
    with pytest.raises(UsageError):
        format_tile_index(-1)


# --- Hypothesis: path round trips and canonicality ------------------------------------------

levels = st.integers(min_value=0, max_value=MAX_LEVEL)
indexes = st.integers(min_value=0, max_value=MAX_TILE_INDEX)
widths = st.integers(min_value=1, max_value=TILE_WIDTH)


@given(levels, indexes, widths)
def test_tile_path_round_trip(level: int, index: int, width: int) -> None:
    tile = Tile(level, index, width)
    assert parse_tile_path(tile.path()) == tile
    assert (".p/" in tile.path()) == (width < TILE_WIDTH)


@given(indexes, widths)
def test_bundle_path_round_trip(index: int, width: int) -> None:
    bundle = Bundle(index, width)
    assert parse_tile_path(bundle.path()) == bundle
    assert parse_tile_index(format_tile_index(index)) == index


def _mutations(tile: Tile) -> list[str]:
    """Non-canonical spellings of ``tile``'s path (or of a neighbour), each of which must fail."""
    index = format_tile_index(tile.index)
    suffix = "" if tile.is_full else f".p/{tile.width}"
    head = f"tile/{tile.level}/"
    out = [
        f"{head}x000/{index}{suffix}",  # leading zero group
        f"tile/0{tile.level}/{index}{suffix}",  # leading zero in the level
        f"{head}{index}{suffix}/",  # trailing slash
        f"/{head}{index}{suffix}",  # leading slash
        f"{head}0{index}{suffix}",  # 4-digit first group
        f"{head}{index}.p/0{tile.width}" if not tile.is_full else f"{head}{index}.p/256",
        f"{head}{index}.p/0",
        f"{head}{index}/{suffix}",
        f"{head}{index[:-3]}x{index[-3:]}{suffix}",  # 'x' on the last group
        f"tile/+{tile.level}/{index}{suffix}",
        f"{head}{index.upper()}{suffix}" if "x" in index else f"{head}{index}.P/5",
    ]
    if "/" in index:
        out.append(f"{head}{index[1:]}{suffix}")  # first group without its 'x'
    return out


@given(levels, indexes, widths, st.data())
def test_mutated_paths_are_rejected(
    level: int, index: int, width: int, data: st.DataObject
) -> None:
    tile = Tile(level, index, width)
    mutated = data.draw(st.sampled_from(_mutations(tile)))
    with pytest.raises(MalformedError):
        parse_tile_path(mutated)


@given(st.text(alphabet="0123456789x/.pentris-+ ", max_size=40))
def test_parse_accepts_only_what_it_would_format(suffix: str) -> None:
    path = "tile/" + suffix
    try:
        parsed = parse_tile_path(path)
    except MalformedError:
        return
    assert parsed.path() == path


# --- which tiles exist, and which to write -------------------------------------------------


@pytest.mark.parametrize(
    ("old", "new", "count"),
    # golang/mod@fe2ec04f sumdb/tlog/tile_test.go, via interop golang-mod/tlog_vectors.json
    # new_tiles_count: len(tlog.NewTiles(10, old, new)) in x/mod >= v0.17.0.
    [
        (1, 1, 0),
        (100, 101, 1),
        (1023, 1025, 3),
        (1024, 1030, 1),
        (1030, 2000, 1),
        (1030, 10000, 10),
        (49516517, 49516586, 3),
    ],
)
def test_new_tiles_matches_go_height_10(old: int, new: int, count: int) -> None:
    assert len(_new_tile_coords(10, old, new)) == count


def test_new_tiles_lists_only_the_final_partial_width() -> None:
    assert new_tiles(0, 10) == [Tile(0, 0, 10)]
    assert new_tiles(3, 10) == [Tile(0, 0, 10)]
    assert new_tiles(5, 300) == [Tile(0, 0), Tile(0, 1, 44), Tile(1, 0, 1)]
    assert new_tiles(300, 300) == []
    assert new_tiles(256, 257) == [Tile(0, 1, 1)]
    assert new_tiles(255, 256) == [Tile(0, 0), Tile(1, 0, 1)]
    assert new_bundles(5, 300) == [Bundle(0), Bundle(1, 44)]
    assert bundles_for_size(300) == [Bundle(0), Bundle(1, 44)]


@pytest.mark.parametrize(("old", "new"), [(-1, 5), (6, 5), (0, 1 << 63)])
def test_new_tiles_usage_errors(old: int, new: int) -> None:
    with pytest.raises(UsageError):
        new_tiles(old, new)


@given(st.integers(min_value=0, max_value=200_000), st.integers(min_value=0, max_value=200_000))
def test_new_tiles_is_the_difference(a: int, b: int) -> None:
    old, new = min(a, b), max(a, b)
    before = set(tiles_for_size(old))
    want = [t for t in tiles_for_size(new) if t not in before]
    assert new_tiles(old, new) == want
    assert new_bundles(old, new) == [Bundle(t.index, t.width) for t in want if t.level == 0]


@given(st.integers(min_value=0, max_value=3000), st.integers(min_value=0, max_value=3000))
def test_tiles_are_stable_as_the_tree_grows(a: int, b: int) -> None:
    old, new = min(a, b), max(a, b)
    small = tiles_from_leaf_hashes(leaves(old))
    large = tiles_from_leaf_hashes(leaves(new))
    assert list(small) == tiles_for_size(old)
    assert list(large) == tiles_for_size(new)
    for tile, data in small.items():
        if tile.is_full:
            assert large[tile] == data  # full tiles are immutable
        else:
            # The same position in the bigger tree holds a tile this one is a prefix of.
            grown = next(t for t in large if (t.level, t.index) == (tile.level, tile.index))
            assert large[grown].startswith(data)


# --- root from tiles -----------------------------------------------------------------------


@settings(max_examples=80, deadline=None)
@given(st.integers(min_value=0, max_value=5000))
def test_tile_root_matches_recursive_reference(size: int) -> None:
    tiles = tiles_from_leaf_hashes(leaves(size))
    reads: list[Tile] = []
    assert tile_root(size, reader(tiles, reads)) == reference_root(leaves(size))
    assert set(reads) <= set(tiles)
    assert len(reads) == len(set(reads))


@pytest.mark.parametrize("size", [1, 2, 255, 256, 257, 511, 512, 65_535, 65_536, 65_537, 70_000])
def test_tile_root_boundaries(size: int) -> None:
    tiles = tiles_from_leaf_hashes(leaves(size))
    assert tile_root(size, reader(tiles)) == reference_root(leaves(size))


def test_tile_root_empty_tree() -> None:
    def never(tile: Tile) -> bytes:
        raise AssertionError(f"read {tile}")

    assert tile_root(0, never) == EMPTY_ROOT
    assert parse_hash("47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=", "root") == EMPTY_ROOT


def test_tile_root_validates_tile_length() -> None:
    tiles = tiles_from_leaf_hashes(leaves(300))
    short = dict(tiles)
    short[Tile(0, 1, 44)] = tiles[Tile(0, 1, 44)][:-1]
    with pytest.raises(MalformedError, match=r"tile/0/001\.p/44 is 1407 bytes, want 1408"):
        tile_root(300, reader(short))
    # A full tile returned where the partial was asked for is not accepted either.
    full = tiles_from_leaf_hashes(leaves(512))
    wide = dict(tiles)
    wide[Tile(0, 1, 44)] = full[Tile(0, 1)]
    with pytest.raises(MalformedError, match="want 1408"):
        tile_root(300, reader(wide))
    with pytest.raises(UsageError):
        tile_root(-1, reader(tiles))


def test_tiles_from_leaf_hashes_rejects_bad_hashes() -> None:
    with pytest.raises(UsageError, match="leaf hash 1 is 31 bytes"):
        tiles_from_leaf_hashes([b"\x00" * 32, b"\x00" * 31])


# --- the tessera tiny log (testdata/tessera) -----------------------------------------------


@functools.cache
def tessera_entries() -> list[bytes]:
    keys = json.loads((TESSERA / "log_keys.json").read_text(encoding="utf-8"))
    entries: list[str] = keys["entries_in_order"]
    return [e.encode("utf-8") for e in entries]


def tessera_checkpoint_root(size: int) -> bytes:
    lines = (TESSERA / "log" / f"checkpoint.{size}").read_bytes().split(b"\n")
    assert lines[0] == b"example.com/log/testdata"
    assert lines[1] == str(size).encode()
    return parse_hash(lines[2], f"checkpoint.{size} root")


def test_tessera_has_15_entries() -> None:
    assert len(tessera_entries()) == 15
    assert tessera_entries()[:3] == [b"one", b"two", b"three"]
    assert (TESSERA / "log" / "checkpoint").read_bytes() == (
        TESSERA / "log" / "checkpoint.15"
    ).read_bytes()


@pytest.mark.parametrize("size", range(1, 16))
def test_tessera_tiles_bundles_and_roots(size: int) -> None:
    entries = tessera_entries()[:size]
    tile = Tile(0, 0, size)
    bundle = Bundle(0, size)
    tile_data = (TESSERA / "log" / tile.path()).read_bytes()
    bundle_data = (TESSERA / "log" / bundle.path()).read_bytes()
    assert tile_data == b"".join(leaf_hash(e) for e in entries)
    assert parse_bundle(bundle_data, size) == entries
    assert format_bundle(entries) == bundle_data
    assert tiles_for_size(size) == [tile]
    assert tiles_from_leaf_hashes(leaf_hash(e) for e in entries) == {tile: tile_data}
    root = tessera_checkpoint_root(size)
    assert tile_root(size, reader({tile: tile_data})) == root
    assert reference_root([leaf_hash(e) for e in entries]) == root


def test_tessera_size_0() -> None:
    assert tessera_checkpoint_root(0) == EMPTY_ROOT
    assert tile_root(0, reader({})) == EMPTY_ROOT


def test_tessera_bundles_are_prefixes() -> None:
    previous = b""
    for size in range(1, 16):
        data = (TESSERA / "log" / Bundle(0, size).path()).read_bytes()
        assert data.startswith(previous)
        previous = data


# --- proofs from tiles alone (the shared core of tlog-verify follow and the witness feeder) --


def _leaves(n: int) -> list[bytes]:
    return [hashlib.sha256(b"leaf %d" % i).digest() for i in range(n)]


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_consistency_proof_from_tiles_is_the_logs_proof_and_reads_only_the_listed_tiles(
    data: st.DataObject,
) -> None:
    new = data.draw(st.integers(1, 70_000), label="new")
    old = data.draw(st.integers(0, new), label="old")
    leaves = _leaves(new)
    tiles = tiles_from_leaf_hashes(leaves)
    tree = merkle.MemoryHashStore()
    tree.extend(leaves)
    asked: list[Tile] = []

    def read(tile: Tile) -> bytes:
        asked.append(tile)
        return tiles[tile]

    root, proof = consistency_proof_from_tiles(old, new, read)
    assert root == tree.root(new)
    want = merkle.consistency_proof(old, new, tree) if 0 < old < new else []
    assert proof == want
    listed = consistency_tiles(old, new)
    assert len(set(listed)) == len(listed)
    assert sorted(asked) == sorted(listed)  # each once, and nothing unlisted
    if want:
        merkle.verify_consistency(old, new, tree.root(old), root, proof)


def test_consistency_tiles_small_cases() -> None:
    assert consistency_tiles(0, 0) == []
    # a node of height 8 is a hash of a level-1 tile
    assert consistency_tiles(0, 256) == [Tile(1, 0, 1)]
    assert consistency_tiles(256, 256) == [Tile(1, 0, 1)]
    # 1000 = 512 + 256 (level-1 tile 0, width 3) + 232 (level-0 tile 3, partial)
    assert consistency_tiles(0, 1000) == [Tile(1, 0, 3), Tile(0, 3, 232)]
    # from 300: the proof also needs the hashes of [256, 300) and beside them in tile 0/1
    assert consistency_tiles(300, 1000) == [Tile(1, 0, 3), Tile(0, 3, 232), Tile(0, 1)]
    with pytest.raises(UsageError):
        consistency_tiles(5, 4)
    with pytest.raises(UsageError):
        consistency_proof_from_tiles(5, 4, lambda t: b"")


def test_tile_hash_reader_refuses_a_tile_of_the_wrong_length() -> None:
    tiles = tiles_from_leaf_hashes(_leaves(300))
    reader = TileHashReader(300, lambda t: tiles[t][:-1])
    with pytest.raises(MalformedError, match="truncated or padded tile"):
        reader.root()


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 2**63 - 1), st.integers(0, 2**63 - 1))
def test_new_level_tiles_are_new_tiles_level_by_level(a: int, b: int) -> None:
    old, new = min(a, b), max(a, b)
    if new - old > 1 << 20:  # the list side must stay small: keep the top of the tree
        old = new - (old % (1 << 20))
    streamed = [t for level in range(MAX_LEVEL + 1) for t in new_level_tiles(level, old, new)]
    assert streamed == new_tiles(old, new)  # level by level, by index, as new_tiles orders
