"""A tenant's log as C2SP tlog-tiles resources: the checkpoint, hash tiles, entry bundles.

``tlog-store serve`` (:mod:`store.tileserver`) answers with these resources and ``tlog-store
tiles`` (:mod:`store.tilefiles`) writes them as files; both take them from here, so that the
served bytes and the files are the same bytes. docs/tiles.md is the user's definition; in
short, for a log whose latest kept checkpoint has size ``s``:

* ``checkpoint`` — the latest kept checkpoint note (the log's signature and every cosignature
  kept with it), ``text/plain; charset=utf-8``, ``Cache-Control: public, max-age=5``.
* ``tile/<L>/<N>`` — a full tile (256 hashes) whose hashes are all complete in the tree of size
  ``s``; ``Cache-Control: public, max-age=31536000, immutable``.
* ``tile/<L>/<N>.p/<W>`` — a partial tile of any width ``W`` (1..255) whose ``W`` hashes are
  complete in the tree of size ``s``: every width a kept checkpoint of size ≤ ``s`` implies,
  as tlog-tiles requires (TT-11), and the current one. Its bytes never change either, but it is
  served with ``max-age=5``: a partial tile may be retired once the full one exists.
* ``tile/entries/<N>[.p/<W>]`` — the entry bundle of the same positions, on the same rule as
  level-0 tiles. Our entries are the sealed heads: log position ``i`` holds the head (32 bytes)
  of the run sealed there, its leaf hash is ``SHA-256(0x00 ‖ head)``, and a bundle is each
  entry as ``uint16_be(32) ‖ head`` — 34 bytes an entry, 8,704 for a full bundle.

Tiles are ``application/octet-stream``. Only what the latest kept checkpoint covers is served:
the log may have grown since (seals that no checkpoint names yet), and a client can verify
nothing beyond a checkpoint; a resource beyond it is :class:`NotFoundError` (404). A path that
is not the canonical spelling of a tile (:func:`tlog.tiles.parse_tile_path`: ``x`` groups,
widths 1..255 without leading zeros, levels 0..63) is MalformedError (400).

Where the bytes come from is a :class:`TileSource`: a journal store's tenant
(:class:`StoreLog`, built from the stored hashes, :mod:`store.tilereads`) or a list of entries
and notes held in memory (:class:`EntryLog`, built with :mod:`tlog.tiles`; e.g. another log's
entries, to check that the same leaves give the same tiles).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from store.api import JournalStore
from store.errors import CorruptError
from store.tilereads import TileReads
from tlog import merkle
from tlog.checkpoint import Checkpoint
from tlog.errors import MalformedError, TlogError, UsageError
from tlog.note import parse_note
from tlog.tiles import (
    TILE_HEIGHT,
    TILE_WIDTH,
    Bundle,
    Tile,
    format_bundle,
    parse_tile_path,
    tiles_from_leaf_hashes,
)

__all__ = [
    "CHECKPOINT_CACHE",
    "CHECKPOINT_TYPE",
    "IMMUTABLE_CACHE",
    "PARTIAL_CACHE",
    "TILE_TYPE",
    "EntryLog",
    "NotFoundError",
    "Resource",
    "StoreLog",
    "TileSource",
    "TiledLog",
    "extent",
    "leaf_level_bytes",
    "note_checkpoint",
    "tile_reads",
]

CHECKPOINT_TYPE = "text/plain; charset=utf-8"
TILE_TYPE = "application/octet-stream"
IMMUTABLE_CACHE = "public, max-age=31536000, immutable"
"""Full tiles and full bundles: their bytes never change."""
PARTIAL_CACHE = "public, max-age=5"
"""Partial tiles and bundles: their bytes never change, but they may be retired."""
CHECKPOINT_CACHE = "public, max-age=5"
"""The checkpoint: tlog-tiles asks that it be cached for no more than a few seconds."""


class NotFoundError(TlogError):
    """A resource the log does not have (yet): beyond its latest checkpoint, or no checkpoint."""


@dataclass(frozen=True)
class Resource:
    """One answer: the body, its ``Content-Type`` and ``Cache-Control``."""

    body: bytes
    content_type: str
    cache_control: str


class TileSource(Protocol):
    """Where a tiled log's bytes come from (see the module docstring)."""

    def latest_note(self) -> bytes | None:
        """The latest checkpoint note, or None when there is none yet."""

    def kept_sizes(self, after: int = -1) -> list[int]:
        """The sizes of the checkpoints kept (published) after ``after``, increasing."""

    def tile_hashes(self, level: int, index: int, width: int) -> bytes:
        """The ``width`` hashes of tile (``level``, ``index``), complete in the log."""

    def entries(self, start: int, count: int) -> list[bytes]:
        """The entries at positions ``[start, start+count)``, each checked to be the leaf."""

    def entries_and_leaves(self, start: int, count: int) -> tuple[list[bytes], list[bytes]]:
        """:meth:`entries` and their leaf hashes (the log's stored ones): a full bundle and
        its level-0 tile from one read."""


def note_checkpoint(note: bytes, what: str = "the checkpoint") -> Checkpoint:
    """The checkpoint a note carries (its signatures are not verified here)."""
    try:
        return Checkpoint.parse(parse_note(note)[0])
    except MalformedError as e:
        raise MalformedError(f"{what}: {e}") from None


class TiledLog:
    """The tlog-tiles resources of one log, from ``source`` (see the module docstring)."""

    def __init__(self, source: TileSource) -> None:
        self.source = source

    def checkpoint(self) -> tuple[Resource, int]:
        """The checkpoint resource and the tree size it names (NotFoundError when none)."""
        note = self.source.latest_note()
        if note is None:
            raise NotFoundError("no checkpoint is kept yet")
        size = note_checkpoint(note, "the kept checkpoint").size
        return Resource(note, CHECKPOINT_TYPE, CHECKPOINT_CACHE), size

    def tile_or_bundle(self, path: str, size: int) -> Resource:
        """The resource at ``path`` (``tile/...``) in the tree of ``size`` leaves.

        MalformedError for a path that is not a canonical tile or bundle path; NotFoundError
        for one whose items are not all complete in that tree.
        """
        item = parse_tile_path(path)
        cache = IMMUTABLE_CACHE if item.is_full else PARTIAL_CACHE
        if extent(item) > size:
            raise NotFoundError(f"{path} is beyond the checkpoint's tree of size {size}")
        if isinstance(item, Bundle):
            return Resource(bundle_bytes(self.source, item), TILE_TYPE, cache)
        return Resource(tile_bytes(self.source, item), TILE_TYPE, cache)

    def leaf_pair(self, index: int, size: int) -> tuple[Resource, Resource]:
        """The full bundle ``index`` and the full level-0 tile ``index`` (the same 256
        positions), from one read of the source: the bytes :meth:`tile_or_bundle` gives for
        each. NotFoundError when the tree of ``size`` does not cover them."""
        start = index * TILE_WIDTH
        if start + TILE_WIDTH > size:
            raise NotFoundError(
                f"{Bundle(index).path()} is beyond the checkpoint's tree of size {size}"
            )
        bundle, tile = leaf_level_bytes(self.source, Bundle(index))
        return (
            Resource(bundle, TILE_TYPE, IMMUTABLE_CACHE),
            Resource(tile, TILE_TYPE, IMMUTABLE_CACHE),
        )


def extent(item: Tile | Bundle) -> int:
    """The least tree size in which every item of ``item`` is complete (its hashes, or its
    entries): a checkpoint of this size or more covers it."""
    if isinstance(item, Bundle):
        return item.index * TILE_WIDTH + item.width
    return (item.index * TILE_WIDTH + item.width) << (TILE_HEIGHT * item.level)


def leaf_level_bytes(source: TileSource, bundle: Bundle) -> tuple[bytes, bytes]:
    """The bytes of ``bundle`` and of the level-0 tile of the same positions, from one read:
    the entries and their leaf hashes, which the source checked against the log's stored
    hashes (so that a tile and its bundle never disagree, even where a stored leaf hash is
    corrupt: that read fails instead)."""
    entries, leaves = source.entries_and_leaves(bundle.index * TILE_WIDTH, bundle.width)
    if len(entries) != bundle.width or len(leaves) != bundle.width:
        raise CorruptError(f"bundle {bundle.path()} came out with a wrong count")
    return format_bundle(entries), b"".join(leaves)


def tile_bytes(source: TileSource, tile: Tile) -> bytes:
    """A tile's bytes from ``source``, checked to be exactly ``width × 32`` bytes. A level-0
    tile is its bundle's leaf hashes (:func:`leaf_level_bytes`)."""
    if tile.level == 0:
        return leaf_level_bytes(source, Bundle(tile.index, tile.width))[1]
    data = source.tile_hashes(tile.level, tile.index, tile.width)
    if len(data) != tile.data_size:
        raise CorruptError(f"tile {tile.path()} came out {len(data)} bytes, not {tile.data_size}")
    return data


def bundle_bytes(source: TileSource, bundle: Bundle) -> bytes:
    """A bundle's bytes: its entries from ``source``, each as uint16_be(len) ‖ entry."""
    entries = source.entries(bundle.index * TILE_WIDTH, bundle.width)
    if len(entries) != bundle.width:
        raise CorruptError(f"bundle {bundle.path()} has {len(entries)} entries, not {bundle.width}")
    return format_bundle(entries)


class StoreLog:
    """A journal store tenant's log as a :class:`TileSource`: the stored hashes, the sealed
    heads and the kept checkpoints (:mod:`store.tilereads`). ``store`` is not closed here."""

    def __init__(self, store: JournalStore) -> None:
        self.store = tile_reads(store)

    def latest_note(self) -> bytes | None:
        return self.store.latest_note()

    def kept_sizes(self, after: int = -1) -> list[int]:
        return self.store.kept_sizes(after)

    def tile_hashes(self, level: int, index: int, width: int) -> bytes:
        return self.store.tile_hashes(level, index, width)

    def entries(self, start: int, count: int) -> list[bytes]:
        return self.store.sealed_heads(start, count)

    def entries_and_leaves(self, start: int, count: int) -> tuple[list[bytes], list[bytes]]:
        return self.store.sealed_heads_and_leaves(start, count)


def tile_reads(store: JournalStore) -> TileReads:
    """The store's tile reads (every SQL store has them); UsageError for a store without."""
    if not isinstance(store, TileReads):
        raise UsageError(f"a {type(store).__name__} has no tile reads")
    return store


class EntryLog:
    """A log held in memory as a :class:`TileSource`: its entries and its checkpoint notes.

    ``notes`` are signed checkpoint notes of this log (any sizes up to ``len(entries)``); the
    latest is the largest. Tiles are built once with :func:`tlog.tiles.tiles_from_leaf_hashes`
    over every entry; a narrower partial tile is a prefix of the wider one.
    """

    def __init__(self, entries: Sequence[bytes], notes: Sequence[bytes] = ()) -> None:
        self._entries = list(entries)
        self._notes = {note_checkpoint(n).size: n for n in notes}
        if self._notes and max(self._notes) > len(self._entries):
            raise UsageError(f"a note of size {max(self._notes)} is beyond the entries")
        tiles = tiles_from_leaf_hashes(merkle.leaf_hash(e) for e in self._entries)
        self._tiles = {(t.level, t.index): data for t, data in tiles.items()}

    def latest_note(self) -> bytes | None:
        return self._notes[max(self._notes)] if self._notes else None

    def kept_sizes(self, after: int = -1) -> list[int]:
        return sorted(s for s in self._notes if s > after)

    def tile_hashes(self, level: int, index: int, width: int) -> bytes:
        data = self._tiles.get((level, index), b"")
        if len(data) < width * 32:
            raise UsageError(f"tile {level}/{index} of width {width} is not complete")
        return data[: width * 32]

    def entries(self, start: int, count: int) -> list[bytes]:
        if start + count > len(self._entries):
            raise UsageError(f"positions {start}..{start + count - 1} are beyond the entries")
        return self._entries[start : start + count]

    def entries_and_leaves(self, start: int, count: int) -> tuple[list[bytes], list[bytes]]:
        entries = self.entries(start, count)
        return entries, [merkle.leaf_hash(e) for e in entries]
