"""C2SP tlog-tiles: tile and entry-bundle paths, tile contents, and the tile math.

This module is pure: it formats and parses paths, builds and reads tile bytes, and computes
hashes. Fetching and storing tiles is the caller's business (``read_tile`` callbacks).

Paths (relative to the log's URL prefix; no leading slash)
-----------------------------------------------------------

* Merkle tree hash tiles: ``tile/<L>/<N>`` and ``tile/<L>/<N>.p/<W>``.
* Entry bundles: ``tile/entries/<N>`` and ``tile/entries/<N>.p/<W>``.

``<L>`` is the tile level, a decimal integer in 0..63 with no leading zero (static-ct-api allows
only 0..5: see ``max_level``).

``<N>`` is the tile index, a non-negative integer written as zero-padded 3-digit decimal groups,
most significant first, joined by ``/``; every group except the last starts with ``x``, and the
number of groups is minimal (no leading ``x000``). 0 → ``000``, 999 → ``999``, 1000 → ``x001/000``,
1234067 → ``x001/x234/067``. The ``x`` keeps a directory name (``x001``) from ever equalling a file
name (``001``), so a tile tree can be served straight from a filesystem. Indexes are bounded by
2^64−1 (Tessera's uint64), i.e. at most 7 groups.

``.p/<W>`` is present only on partial tiles: ``<W>`` is the width, decimal 1..255, no leading zero.
A full tile never carries ``.p/256``, and an empty tile (``.p/0``) does not exist.

Every value has exactly one spelling, and :func:`parse_tile_path` accepts only that spelling (as
Go's ``tlog.ParseTilePath`` does, and unlike Tessera's parser, which accepts ``x000/001`` and
``.p/007``): two spellings of one tile would be two cache keys and two files for one resource.

This is the C2SP scheme. Go's checksum database puts the tile height in the path
(``tile/8/<L>/<N>``, ``tile/8/data/<N>``) and static-ct-api names its data tiles
``tile/data/<N>``; neither parses here.

Tile contents
-------------

The tile height is fixed at 8, so a full tile holds 256 hashes: the raw 32-byte SHA-256 values
concatenated, exactly 8,192 bytes. Hashing is RFC 6962: leaf = SHA-256(0x00 ‖ entry),
interior node = SHA-256(0x01 ‖ left ‖ right), and the root of the empty tree is SHA-256("").

* Level 0 tile ``n`` holds the leaf hashes of entries ``n·256 … n·256+255``.
* At level ``l ≥ 1``, position ``i`` of tile ``n`` is the root of the *full* level ``l−1`` tile
  ``n·256+i``: the Merkle tree hash of entries ``[(n·256+i)·256^l, (n·256+i+1)·256^l)``.
* A tile is the bottom row of a height-8 subtree; the 7 rows above it are recomputed by hashing.
* Partial tiles (the rightmost tile of a level) hold 1..255 hashes. For a tree of size ``s`` the
  level-``l`` partial tile has width ``floor(s / 256^l) mod 256`` and exists only when that is
  non-zero; a tree of size 0 has no tiles. A partial tile is **never** hashed into the level above:
  its hash does not appear in any tile, because a higher tile stores only complete subtrees.

Entry bundles
-------------

Bundle ``n`` holds entries ``n·256 …`` (256 when full, ``W`` for ``.p/<W>``), each encoded as
``uint16_be(len(entry)) ‖ entry``, concatenated with nothing before, between or after. An entry is
therefore at most 65,535 bytes. Entry ``i`` of bundle ``n`` hashes to position ``i`` of level-0
tile ``n``.

Node locations
--------------

A node at Merkle height ``h`` (0 = leaves) with index ``k`` (the perfect subtree
``[k·2^h, (k+1)·2^h)``) lives in the tile at level ``h // 8`` with index ``(k·2^j) // 256``, where
``j = h % 8``: it is the root of the perfect tree over the ``2^j`` hashes at positions
``(k·2^j) % 256`` onwards.
"""

from __future__ import annotations

import hashlib
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

from tlog import accel as _accel
from tlog.encoding import HASH_SIZE, MAX_INT63, parse_decimal, shown
from tlog.errors import MalformedError, UsageError
from tlog.merkle import EMPTY_ROOT as _EMPTY_ROOT
from tlog.merkle import consistency_proof as _consistency_proof
from tlog.merkle import consistency_proof_indexes as _consistency_proof_indexes
from tlog.merkle import node_hash as _node_hash
from tlog.merkle import proven_prefix_root as _proven_prefix_root
from tlog.merkle import split_stored_hash_index as _split_stored_hash_index

__all__ = [
    "ENTRIES_SEGMENT",
    "FULL_TILE_SIZE",
    "MAX_ENTRY_SIZE",
    "MAX_LEVEL",
    "MAX_TILE_INDEX",
    "STATIC_CT_MAX_LEVEL",
    "TILE_HEIGHT",
    "TILE_WIDTH",
    "Bundle",
    "Tile",
    "TileHashReader",
    "bundles_for_size",
    "consistency_proof_from_tiles",
    "consistency_tiles",
    "format_bundle",
    "format_tile_index",
    "hash_from_tile",
    "leaf_hashes",
    "locate_node",
    "new_bundles",
    "new_level_tiles",
    "new_tiles",
    "parse_bundle",
    "parse_tile_index",
    "parse_tile_path",
    "perfect_root",
    "prefix_tiles",
    "proven_prefix_from_tiles",
    "root_tiles",
    "split_hashes",
    "tile_root",
    "tiles_for_size",
    "tiles_from_leaf_hashes",
]


TILE_HEIGHT = 8
"""Height of the subtree a tile is the bottom row of; fixed by C2SP (no height path segment)."""

TILE_WIDTH = 1 << TILE_HEIGHT
"""Hashes in a full tile, and entries in a full bundle: 256."""

FULL_TILE_SIZE = TILE_WIDTH * HASH_SIZE
"""Bytes in a full tile: 8,192."""

MAX_LEVEL = 63
"""Highest tile level tlog-tiles allows."""

STATIC_CT_MAX_LEVEL = 5
"""Highest tile level static-ct-api allows (pass as ``max_level``)."""

MAX_TILE_INDEX = (1 << 64) - 1
"""Largest tile index accepted: Tessera stores indexes as uint64."""

MAX_ENTRY_SIZE = 0xFFFF
"""Largest entry a bundle can hold: its length prefix is a uint16."""

ENTRIES_SEGMENT = "entries"
"""The path segment that takes the place of ``<L>`` for entry bundles."""

_GROUP = re.compile(r"[0-9]{3}")  # [0-9], not \d: \d also matches non-ASCII digits
_X_GROUP = re.compile(r"x[0-9]{3}")
# 2^64-1 has 20 digits, so 7 groups; an index with more groups overflows whatever its digits.
_MAX_GROUPS = (len(str(MAX_TILE_INDEX)) + 2) // 3


def perfect_root(hashes: list[bytes]) -> bytes:
    """Root of a perfect tree whose bottom row is ``hashes`` (a power-of-two count of 32-byte
    hashes, as a full tile's): the C fold when built (:mod:`tlog.accel`, about 6x), else
    Python. Requires: a non-empty power-of-two count."""
    fold = _accel.fold_leaves
    if fold is not None and len(hashes) > 1:
        try:
            return fold([], hashes, 0)[-1]
        except ValueError:  # a hash that is not 32 bytes: the loop below hashes it as it is
            pass
    row = hashes
    while len(row) > 1:
        row = [_node_hash(row[i], row[i + 1]) for i in range(0, len(row), 2)]
    return row[0]


def leaf_hashes(buf: bytes, offset: int, stride: int, length: int, count: int) -> bytes:
    """The RFC 6962 leaf hashes ``SHA-256(0x00 ‖ entry)`` of ``count`` entries of ``length``
    bytes at ``offset``, ``offset + stride``, … of ``buf``, joined: the bytes of the level-0
    tile of those entries (a bundle of 32-byte entries has them at offset 2, stride 34). The C
    accelerator when built (the GIL released), else hashlib. Requires: the entries are all in
    ``buf`` (ValueError otherwise)."""
    # The C function's verdicts, so that a build without it answers alike: a negative
    # argument is refused even when there is nothing to hash, and so is one that no index
    # can be (the C function could not even take it: OverflowError). The buffer's size is
    # counted in bytes, as C reads it (a memoryview of wider items has fewer items).
    view = memoryview(buf)
    if view.ndim != 1 or view.itemsize != 1:
        view = view.cast("B")
    if (
        min(offset, stride, length, count) < 0
        or max(offset, stride, length) > sys.maxsize
        or count > sys.maxsize // HASH_SIZE
        or (count and offset + (count - 1) * stride + length > view.nbytes)
    ):
        raise ValueError("leaf_hashes: the entries are not all in the buffer")
    fast = _accel.leaf_hashes
    if fast is not None:
        return fast(buf, offset, stride, length, count)
    sha = hashlib.sha256
    return b"".join(
        sha(b"\x00" + view[offset + i * stride : offset + i * stride + length]).digest()
        for i in range(count)
    )


def split_hashes(data: bytes) -> list[bytes]:
    """A tile's bytes as its list of 32-byte hashes. Requires: a multiple of 32 bytes."""
    return [data[i : i + HASH_SIZE] for i in range(0, len(data), HASH_SIZE)]


# type(x) is int, not isinstance: True is an int to Python, and would be spelled "True" in a
# path (tile/0/x00T/rue); a float would be spelled "1.0".


def _check_width(width: int) -> None:
    if type(width) is not int or not 1 <= width <= TILE_WIDTH:
        raise UsageError(f"tile width {width!r} is not in 1..{TILE_WIDTH}")


def _check_index(index: int) -> None:
    if type(index) is not int or not 0 <= index <= MAX_TILE_INDEX:
        raise UsageError(f"tile index {index!r} is not in 0..2^64-1")


def _check_size(size: int, what: str = "tree size") -> None:
    if type(size) is not int or not 0 <= size <= MAX_INT63:
        raise UsageError(f"{what} {size!r} is not in 0..2^63-1")


def _suffix(width: int) -> str:
    return "" if width == TILE_WIDTH else f".p/{width}"


class _Span:
    """What a tile and an entry bundle share: a width of 1..256 items, 256 being full."""

    __slots__ = ()
    width: int

    @property
    def is_full(self) -> bool:
        """Whether this is a full tile or bundle (width 256)."""
        return self.width == TILE_WIDTH


@dataclass(frozen=True, order=True, slots=True)
class Tile(_Span):
    """A Merkle tree hash tile: ``level`` 0..63, ``index`` 0..2^64−1, ``width`` 1..256 hashes.

    ``width == 256`` is a full tile; anything less is a partial tile. Constructing an out-of-range
    tile raises :class:`UsageError`.
    """

    level: int
    index: int
    width: int = TILE_WIDTH

    def __post_init__(self) -> None:
        if type(self.level) is not int or not 0 <= self.level <= MAX_LEVEL:
            raise UsageError(f"tile level {self.level!r} is not in 0..{MAX_LEVEL}")
        _check_index(self.index)
        _check_width(self.width)

    @property
    def data_size(self) -> int:
        """The exact length of this tile's bytes: ``width`` × 32."""
        return self.width * HASH_SIZE

    @property
    def start_index(self) -> int:
        """First entry the (full) tile spans: ``index · 256^(level+1)``."""
        return self.index << (TILE_HEIGHT * (self.level + 1))

    @property
    def end_index(self) -> int:
        """One past the last entry the *full* tile spans (the spec's end index, used by pruning)."""
        return (self.index + 1) << (TILE_HEIGHT * (self.level + 1))

    def path(self) -> str:
        """The canonical path, ``tile/<L>/<N>[.p/<W>]``."""
        return f"tile/{self.level}/{format_tile_index(self.index)}{_suffix(self.width)}"


@dataclass(frozen=True, order=True, slots=True)
class Bundle(_Span):
    """An entry bundle: ``index`` 0..2^64−1, ``width`` 1..256 entries (256 = full)."""

    index: int
    width: int = TILE_WIDTH

    def __post_init__(self) -> None:
        _check_index(self.index)
        _check_width(self.width)

    @property
    def tile(self) -> Tile:
        """The level-0 tile holding the leaf hashes of this bundle's entries."""
        return Tile(0, self.index, self.width)

    def path(self) -> str:
        """The canonical path, ``tile/entries/<N>[.p/<W>]``."""
        return f"tile/{ENTRIES_SEGMENT}/{format_tile_index(self.index)}{_suffix(self.width)}"


# --- paths -----------------------------------------------------------------------------------


def format_tile_index(index: int) -> str:
    """Encode a tile index as ``<N>``: 3-digit groups, ``x`` on all but the last, minimal."""
    _check_index(index)
    digits = str(index)
    digits = digits.zfill(-(-len(digits) // 3) * 3)  # pad to whole groups, at least one
    groups = [digits[i : i + 3] for i in range(0, len(digits), 3)]
    return "/".join([f"x{g}" for g in groups[:-1]] + groups[-1:])


def parse_tile_index(text: str, what: str = "tile index") -> int:
    """Parse a canonical ``<N>`` (see :func:`format_tile_index`); anything else is malformed."""
    groups = text.split("/")
    if "" in groups:
        raise MalformedError(f"{what} {shown(text)} has an empty element (a stray or trailing '/')")
    value = 0
    for i, group in enumerate(groups):
        last = i == len(groups) - 1
        if last and not _GROUP.fullmatch(group):
            if _X_GROUP.fullmatch(group):
                raise MalformedError(
                    f"{what} {shown(text)}: last group {shown(group, 8)} must not start with 'x'"
                )
            raise MalformedError(
                f"{what} {shown(text)}: group {shown(group, 8)} is not 3 decimal digits"
            )
        if not last and not _X_GROUP.fullmatch(group):
            if _GROUP.fullmatch(group):
                raise MalformedError(
                    f"{what} {shown(text)}: group {shown(group, 8)} lacks the 'x' that every group"
                    " but the last carries"
                )
            raise MalformedError(
                f"{what} {shown(text)}: group {shown(group, 8)} is not 'x' + 3 decimal digits"
            )
        if i == 0 and not last and group == "x000":
            raise MalformedError(
                f"{what} {shown(text)} starts with a zero group 'x000' (groups must be minimal)"
            )
        # Only accumulate while the value can still fit: a huge path must not cost bignum work.
        if len(groups) <= _MAX_GROUPS:
            value = value * 1000 + int(group[-3:])
    if len(groups) > _MAX_GROUPS or value > MAX_TILE_INDEX:
        raise MalformedError(f"{what} {shown(text)} is larger than 2^64-1")
    return value


def parse_tile_path(path: str, *, max_level: int = MAX_LEVEL) -> Tile | Bundle:
    """Parse a canonical ``tile/<L>/<N>[.p/<W>]`` or ``tile/entries/<N>[.p/<W>]`` path.

    Only the exact form :meth:`Tile.path` / :meth:`Bundle.path` produce is accepted: no leading
    zeros, no leading ``x000`` group, no ``.p/256`` or ``.p/0``, no leading or trailing slash, no
    prefix. ``max_level`` lowers the highest accepted level (``STATIC_CT_MAX_LEVEL`` for
    static-ct-api). Raises :class:`MalformedError` naming what is wrong.
    """
    if not 0 <= max_level <= MAX_LEVEL:
        raise UsageError(f"max_level {max_level} is not in 0..{MAX_LEVEL}")
    where = f"tile path {shown(path)}"
    if not path.startswith("tile/"):
        raise MalformedError(f"{where} does not start with 'tile/'")
    level_text, slash, rest = path[len("tile/") :].partition("/")
    if not slash:
        raise MalformedError(f"{where} has no tile index")
    level = -1  # the entries segment has no level
    if level_text != ENTRIES_SEGMENT:
        level = parse_decimal(level_text, f"{where}: level", maximum=max_level)
    index_text, dot, suffix = rest.partition(".")
    index = parse_tile_index(index_text, f"{where}: index")
    width = TILE_WIDTH
    if dot:
        if not suffix.startswith("p/"):
            raise MalformedError(f"{where}: a partial suffix must be '.p/<W>'")
        width_text = suffix[len("p/") :]
        if not width_text:
            raise MalformedError(f"{where} has no width after '.p/'")
        # Bounding at 255 also rejects '.p/256': a full tile has no suffix.
        width = parse_decimal(width_text, f"{where}: partial width", maximum=TILE_WIDTH - 1)
        if width == 0:
            raise MalformedError(f"{where}: partial width 0 (empty tiles do not exist)")
    result = Bundle(index, width) if level < 0 else Tile(level, index, width)
    # Go's approach as a second line of defence: the canonical form must round-trip exactly.
    if result.path() != path:  # pragma: no cover - the checks above already ensure it
        raise MalformedError(f"{where} is not canonical (expected {result.path()!r})")
    return result


# --- which tiles exist -----------------------------------------------------------------------


def _new_tile_coords(height: int, old_size: int, new_size: int) -> list[tuple[int, int, int]]:
    """(level, index, width) of the tiles of height ``height`` that growing old → new writes.

    This is golang.org/x/mod/sumdb/tlog.NewTiles (x/mod ≥ v0.17.0), kept general in the height
    so it can be checked against Go's published height-10 vectors. For each level that changes it
    lists the full tiles completed since ``old_size`` and the one final partial tile: a partial
    tile of some intermediate width is never needed, because no checkpoint names that size.
    """
    coords: list[tuple[int, int, int]] = []
    level = 0
    while new_size >> (height * level) > 0:
        old_n = old_size >> (height * level)  # number of complete hashes at this level
        new_n = new_size >> (height * level)
        if old_n != new_n:
            coords.extend((level, n, 1 << height) for n in range(old_n >> height, new_n >> height))
            n = new_n >> height
            width = new_n - (n << height)
            if width:
                coords.append((level, n, width))
        level += 1
    return coords


def new_tiles(old_size: int, new_size: int) -> list[Tile]:
    """The tiles that must be written when a tree grows from ``old_size`` to ``new_size``.

    Exactly ``tiles_for_size(new_size)`` minus ``tiles_for_size(old_size)``, in the same order
    (level ascending, then index ascending): the full tiles completed by the growth and, per
    level, the final partial tile of the new size. Requires 0 ≤ old_size ≤ new_size ≤ 2^63−1.
    """
    _check_size(old_size, "old tree size")
    _check_size(new_size, "new tree size")
    if old_size > new_size:
        raise UsageError(f"old tree size {old_size} is larger than new tree size {new_size}")
    return [Tile(*c) for c in _new_tile_coords(TILE_HEIGHT, old_size, new_size)]


def tiles_for_size(size: int) -> list[Tile]:
    """Every tile (full and partial) a tree of ``size`` leaves has.

    Ordered by level ascending, then index ascending, so each level's partial tile (if any)
    comes last in its level and a writer following the list writes a tile's inputs before it.
    Size 0 has no tiles.
    """
    return new_tiles(0, size)


def bundles_for_size(size: int) -> list[Bundle]:
    """Every entry bundle (full and partial) a tree of ``size`` leaves has, by index."""
    return [Bundle(t.index, t.width) for t in tiles_for_size(size) if t.level == 0]


def new_level_tiles(level: int, old_size: int, new_size: int) -> Iterator[Tile]:
    """The tiles of ``level`` among :func:`new_tiles`, by index, one at a time: for a walk over
    a large growth without its list (a log of 2^31 entries has 2^23 level-0 tiles).
    Requires 0 ≤ old_size ≤ new_size ≤ 2^63−1 and 0 ≤ level ≤ 63."""
    _check_size(old_size, "old tree size")
    _check_size(new_size, "new tree size")
    if old_size > new_size:
        raise UsageError(f"old tree size {old_size} is larger than new tree size {new_size}")
    if type(level) is not int or not 0 <= level <= MAX_LEVEL:
        raise UsageError(f"tile level {level!r} is not in 0..{MAX_LEVEL}")
    return _level_tiles(level, old_size >> (TILE_HEIGHT * level), new_size >> (TILE_HEIGHT * level))


def _level_tiles(level: int, old_n: int, new_n: int) -> Iterator[Tile]:
    # old_n, new_n: the complete hashes at this level before and after.
    if old_n == new_n:
        return
    for index in range(old_n >> TILE_HEIGHT, new_n >> TILE_HEIGHT):
        yield Tile(level, index)
    index = new_n >> TILE_HEIGHT
    if width := new_n - (index << TILE_HEIGHT):
        yield Tile(level, index, width)


def new_bundles(old_size: int, new_size: int) -> list[Bundle]:
    """The entry bundles that must be written when a tree grows from old_size to new_size."""
    return [Bundle(t.index, t.width) for t in new_level_tiles(0, old_size, new_size)]


# --- tile contents and node hashes -----------------------------------------------------------


def locate_node(height: int, index: int, size: int | None = None) -> tuple[Tile, int, int]:
    """Where the node at Merkle ``height`` with ``index`` lives: ``(tile, start, end)``.

    The node is the root of the perfect tree over the hashes at positions ``[start, end)`` of
    ``tile`` (``end − start = 2^(height % 8)``). Without ``size`` the tile's width is the
    smallest that holds those positions (``end``); with ``size`` it is the width that tile has in
    a tree of ``size`` leaves (full, or that size's partial width), and the node must be complete
    in that tree (``(index+1)·2^height ≤ size``), else :class:`UsageError`.
    """
    if height < 0 or index < 0:
        raise UsageError(f"node height {height} and index {index} must be non-negative")
    level, j = divmod(height, TILE_HEIGHT)
    if level > MAX_LEVEL:
        raise UsageError(f"node height {height} is above the highest tile level")
    # The node covers the tile-level hashes [index·2^j, (index+1)·2^j), all in one tile because
    # 2^j divides 256.
    tile_index, start = divmod(index << j, TILE_WIDTH)
    end = start + (1 << j)
    if size is None:
        width = end
    else:
        _check_size(size)
        if (index + 1) << height > size:
            raise UsageError(
                f"node (height {height}, index {index}) is not in a tree of size {size}"
            )
        width = min(TILE_WIDTH, (size >> (TILE_HEIGHT * level)) - tile_index * TILE_WIDTH)
    return Tile(level, tile_index, width), start, end


def _check_tile_data(tile: Tile, data: bytes) -> None:
    if len(data) != tile.data_size:
        raise MalformedError(
            f"tile {tile.path()} is {len(data)} bytes, want {tile.data_size} "
            f"({tile.width} hashes of {HASH_SIZE} bytes)"
        )


def hash_from_tile(tile: Tile, data: bytes, height: int, index: int) -> bytes:
    """Recompute the node at (``height``, ``index``) from ``tile``'s bytes ``data``.

    ``tile`` must be the tile holding that node, with a width covering it (:class:`UsageError`
    otherwise); ``data`` must be exactly ``tile.width × 32`` bytes (:class:`MalformedError`).
    """
    want, start, end = locate_node(height, index)
    if (tile.level, tile.index) != (want.level, want.index) or tile.width < end:
        raise UsageError(
            f"tile {tile.path()} does not hold node (height {height}, index {index}); "
            f"it is in {want.path()} or any wider tile"
        )
    _check_tile_data(tile, data)
    hashes = [data[i * HASH_SIZE : (i + 1) * HASH_SIZE] for i in range(start, end)]
    return perfect_root(hashes)


def tile_root(size: int, read_tile: Callable[[Tile], bytes]) -> bytes:
    """The RFC 6962 root hash of the tree of ``size`` leaves, computed from its tiles.

    ``read_tile`` is called at most once per tile, and only for tiles of
    ``tiles_for_size(size)``; it must return exactly ``width × 32`` bytes, else
    :class:`MalformedError`. The result is only as trustworthy as the tiles: compare it with a
    verified checkpoint before relying on any hash read this way.

    RFC 6962 splits a tree at the largest power of two below its size, so its root is the
    right-to-left fold of the perfect subtrees given by the binary digits of ``size``, largest
    first. Each is a complete node, so it is read from a tile level that only ever stores complete
    subtrees: a partial tile is never hashed into a higher level.
    """
    _check_size(size)
    if size == 0:
        return _EMPTY_ROOT
    cache: dict[Tile, bytes] = {}
    nodes: list[bytes] = []
    start = 0
    for height in reversed(range(size.bit_length())):
        if not (size >> height) & 1:
            continue
        index = start >> height
        tile, _, _ = locate_node(height, index, size)
        data = cache.get(tile)
        if data is None:
            data = cache[tile] = read_tile(tile)
        nodes.append(hash_from_tile(tile, data, height, index))
        start += 1 << height
    root = nodes[-1]
    for node in reversed(nodes[:-1]):
        root = _node_hash(node, root)
    return root


def root_tiles(size: int) -> list[Tile]:
    """The tiles :func:`tile_root` reads for a tree of ``size`` leaves (one per level that has
    a perfect subtree of the size's binary digits), in the order it reads them."""
    _check_size(size)
    out: list[Tile] = []
    start = 0
    for height in reversed(range(size.bit_length())):
        if (size >> height) & 1:
            tile, _, _ = locate_node(height, start >> height, size)
            if tile not in out:
                out.append(tile)
            start += 1 << height
    return out


def consistency_tiles(old_size: int, new_size: int) -> list[Tile]:
    """The tiles of the tree of ``new_size`` that a client needs to check a checkpoint of
    ``new_size`` against one of ``old_size`` with nothing but tiles: those that give the new
    root (:func:`root_tiles`) and those that hold the hashes of the consistency proof from
    ``old_size`` (:func:`consistency_proof_from_tiles`), each once, in that order.

    ``old_size`` 0 (nothing held) or equal to ``new_size`` needs no proof: only the root's
    tiles. Requires 0 <= old_size <= new_size. This is the least a client can fetch: every
    tile listed holds a hash that nothing else it fetched gives.
    """
    _check_size(old_size, "old tree size")
    _check_size(new_size, "new tree size")
    if old_size > new_size:
        raise UsageError(f"old tree size {old_size} is larger than new tree size {new_size}")
    out = root_tiles(new_size)
    if 0 < old_size < new_size:
        seen = set(out)
        for i in _consistency_proof_indexes(old_size, new_size):
            height, index = _split_stored_hash_index(i)
            tile, _, _ = locate_node(height, index, new_size)
            if tile not in seen:
                seen.add(tile)
                out.append(tile)
    return out


class TileHashReader:
    """The stored hashes of the tree of ``size`` leaves, read from its tiles: a
    :class:`tlog.merkle.HashReader`, so the tree's proofs can be computed from tiles alone.

    ``read_tile`` is called at most once per tile (the bytes are kept in :attr:`tiles`), only
    for tiles the size implies (full, or that size's partial width); bytes of another length
    than the tile's raise :class:`MalformedError`. The hashes are only as good as the tiles:
    check :func:`tile_root` against a verified checkpoint before relying on them.
    """

    def __init__(self, size: int, read_tile: Callable[[Tile], bytes]) -> None:
        _check_size(size)
        self.size = size
        self._read_tile = read_tile
        self.tiles: dict[Tile, bytes] = {}

    def read_tile(self, tile: Tile) -> bytes:
        """The bytes of ``tile`` (read once)."""
        data = self.tiles.get(tile)
        if data is None:
            data = self._read_tile(tile)
            self.add(tile, data)
        return data

    def add(self, tile: Tile, data: bytes) -> None:
        """Keep ``tile``'s bytes read elsewhere (fetched ahead, say), checked as
        :meth:`read_tile` checks them (MalformedError)."""
        if len(data) != tile.data_size:
            raise MalformedError(
                f"tile {tile.path()} is {len(data)} bytes, not {tile.data_size}: "
                "a truncated or padded tile"
            )
        self.tiles[tile] = data

    def node(self, height: int, index: int) -> bytes:
        """The hash of the complete node at (``height``, ``index``) of the tree."""
        tile, _, _ = locate_node(height, index, self.size)
        return hash_from_tile(tile, self.read_tile(tile), height, index)

    def read_hashes(self, indexes: Sequence[int]) -> list[bytes]:
        """:meth:`tlog.merkle.HashReader.read_hashes`, from the tiles."""
        return [self.node(*_split_stored_hash_index(i)) for i in indexes]

    def root(self) -> bytes:
        """:func:`tile_root` of the tree, from these tiles."""
        return tile_root(self.size, self.read_tile)


def consistency_proof_from_tiles(
    old_size: int, new_size: int, read_tile: Callable[[Tile], bytes]
) -> tuple[bytes, list[bytes]]:
    """``(root, proof)`` of the tree of ``new_size``, computed from its tiles alone: the root
    (:func:`tile_root`) and the RFC 6962 consistency proof from ``old_size`` (empty when
    ``old_size`` is 0 or ``new_size``). ``read_tile`` is asked only for
    :func:`consistency_tiles` (``old_size``, ``new_size``), each once.

    The caller compares the root with the new checkpoint's before it trusts the proof: tiles
    that do not give that root were rewritten, and a proof from them proves nothing. The proof
    may read tiles the root does not (full tiles off the tree's right edge), so a proof that
    does not verify must also fold to the new root (:func:`proven_prefix_from_tiles` not None)
    before it counts: one that does not holds a rewritten tile's hash. Only a proof that folds
    to the new root from another old root shows that the log forked.
    """
    if not 0 <= old_size <= new_size:
        raise UsageError(f"no consistency proof from size {old_size} to size {new_size}")
    reader = TileHashReader(new_size, read_tile)
    root = reader.root()
    if not 0 < old_size < new_size:
        return root, []
    return root, _consistency_proof(old_size, new_size, reader)


def prefix_tiles(old_size: int, new_size: int) -> list[Tile]:
    """The tiles :func:`proven_prefix_from_tiles` reads beyond :func:`consistency_tiles`: when
    ``old_size`` is a power of two (and 0 < ``old_size`` < ``new_size``), the one holding the
    node over the first ``old_size`` leaves; else none."""
    if not 0 < old_size < new_size or old_size & (old_size - 1):
        return []
    tile, _, _ = locate_node(old_size.bit_length() - 1, 0, new_size)
    return [tile]


def proven_prefix_from_tiles(
    old_size: int, new_root: bytes, proof: Sequence[bytes], reader: TileHashReader
) -> bytes | None:
    """The root at ``old_size`` that ``proof``, computed from ``reader``'s tiles, proves the
    tree (``reader.size``, ``new_root``) to have (:func:`tlog.merkle.proven_prefix_root`);
    None when it proves none: the proof holds a rewritten tile's hash (one the root does not
    read), and is no evidence of anything. When ``old_size`` is a power of two the proof
    carries no root for it: the node over the first ``old_size`` leaves is read from
    ``reader`` (:func:`prefix_tiles`), and is the root when the proof folds from it.

    Requires: the tiles give ``new_root`` (:func:`tile_root`), checked by the caller.
    Followers of a log judge a failed consistency proof by this: another root proven at
    ``old_size`` is a fork; None is a tile fault.
    """
    node = None
    if 0 < old_size < reader.size and old_size & (old_size - 1) == 0:
        node = reader.node(old_size.bit_length() - 1, 0)
    return _proven_prefix_root(old_size, reader.size, new_root, proof, node=node)


def tiles_from_leaf_hashes(leaf_hashes: Iterable[bytes]) -> dict[Tile, bytes]:
    """Build every tile of the tree with these leaf hashes, in ``tiles_for_size`` order.

    Each value is the tile's bytes. Only full tiles feed the level above, so a tile's bytes
    never depend on the partial tiles below it. Each leaf hash must be 32 bytes
    (:class:`UsageError`).
    """
    row = list(leaf_hashes)
    for i, leaf in enumerate(row):
        if len(leaf) != HASH_SIZE:
            raise UsageError(f"leaf hash {i} is {len(leaf)} bytes, not {HASH_SIZE}")
    _check_size(len(row))
    tiles: dict[Tile, bytes] = {}
    level = 0
    while row:
        above: list[bytes] = []
        for first in range(0, len(row), TILE_WIDTH):
            chunk = row[first : first + TILE_WIDTH]
            tiles[Tile(level, first // TILE_WIDTH, len(chunk))] = b"".join(chunk)
            if len(chunk) == TILE_WIDTH:
                above.append(perfect_root(chunk))
        row = above
        level += 1
    return tiles


# --- entry bundles ---------------------------------------------------------------------------


def parse_bundle(data: bytes, width: int | None = None) -> list[bytes]:
    """Split an entry bundle into its entries.

    Strict: a truncated length prefix, an entry running past the end, an empty bundle, more
    than 256 entries, or — when ``width`` (the ``W`` of the path, 256 for a full bundle) is
    given — any count other than ``width`` or bytes after the ``width``-th entry all raise
    :class:`MalformedError`.
    """
    if width is not None:
        _check_width(width)
    limit = TILE_WIDTH if width is None else width
    entries: list[bytes] = []
    pos = 0
    while pos < len(data):
        if len(entries) == limit:
            if width is None:
                raise MalformedError(f"entry bundle has more than {TILE_WIDTH} entries")
            raise MalformedError(
                f"entry bundle has {len(data) - pos} trailing bytes after its {width} entries"
            )
        if len(data) - pos < 2:
            raise MalformedError(f"entry bundle: truncated length prefix at byte {pos}")
        length = int.from_bytes(data[pos : pos + 2], "big")
        pos += 2
        if len(data) - pos < length:
            raise MalformedError(
                f"entry bundle: entry {len(entries)} declares {length} bytes, "
                f"only {len(data) - pos} remain"
            )
        entries.append(bytes(data[pos : pos + length]))
        pos += length
    if not entries:
        raise MalformedError("entry bundle is empty (a bundle holds 1..256 entries)")
    if width is not None and len(entries) != width:
        raise MalformedError(f"entry bundle has {len(entries)} entries, its width is {width}")
    return entries


def format_bundle(entries: Iterable[bytes]) -> bytes:
    """Encode 1..256 entries as a bundle. An entry over 65,535 bytes raises UsageError."""
    entries = list(entries)
    sizes = set(map(len, entries))
    if len(sizes) == 1 and 1 <= len(entries) <= TILE_WIDTH:
        # Entries of one size (ours: 32-byte heads) share one length prefix: one join.
        (size,) = sizes
        if size <= MAX_ENTRY_SIZE:
            prefix = size.to_bytes(2, "big")
            return prefix + prefix.join(entries)
    parts: list[bytes] = []
    count = 0
    for count, entry in enumerate(entries, start=1):
        if len(entry) > MAX_ENTRY_SIZE:
            raise UsageError(
                f"entry {count - 1} is {len(entry)} bytes; a bundle entry is at most "
                f"{MAX_ENTRY_SIZE} (its length prefix is a uint16)"
            )
        parts.append(len(entry).to_bytes(2, "big"))
        parts.append(entry)
    if not 1 <= count <= TILE_WIDTH:
        raise UsageError(f"a bundle holds 1..{TILE_WIDTH} entries, not {count}")
    return b"".join(parts)
