"""The journal's reads for tlog-tiles: a tile's hashes, a bundle's sealed heads, the tenants.

What :mod:`store.tiles` serves and publishes is read here, each in one read transaction, at a
cost that does not grow with the log:

* :meth:`TileReads.tile_hashes` — tile ``(level, index)`` of width ``W`` is the ``W`` stored
  hashes of Merkle height ``8·level`` and indexes ``index·256 … index·256+W−1``, at the
  positions :func:`tlog.merkle.stored_hash_index` gives (table ``tree_hash``): **one** SELECT
  with the dialect's ``any_of``, never a walk of the log. A level ≥ 1 hash is the root of a
  complete subtree of 256^level leaves, which the store keeps once it is complete, so a tile
  whose hashes are complete in the log is always there in full.
* :meth:`TileReads.sealed_heads` — the entries of a bundle are the sealed heads at log
  positions ``[start, start+count)``: one range query on ``run_seal`` (UNIQUE (tenant,
  position)), and, in the same snapshot, a check that every head is the leaf the log holds
  (``SHA-256(0x00 ‖ head)``) before it is handed out: for a full bundle, its leaf hashes must
  fold to the one stored root of their subtree; for a partial one, they must be its stored
  leaf hashes. A position without a sealed run (a deleted run) or whose head is not its leaf
  is :class:`~store.errors.CorruptError`: a bundle is never built with a hole or a wrong
  entry. :meth:`TileReads.sealed_heads_and_leaves` also gives those leaf hashes, which are the
  bundle's level-0 tile: one read serves both.
* :meth:`TileReads.latest_note` — the latest kept checkpoint note, by size (one row), and
  :meth:`TileReads.kept_sizes`, the sizes of the kept checkpoints after a size.
* :meth:`TileReads.tenants` — every tenant of the database that keeps a checkpoint, and
  :meth:`TileReads.log_tenants`, every one whose log exists (kept checkpoint or not): the
  difference is the tenants that have nothing published yet.
"""

from __future__ import annotations

from typing import cast

from store.db import Tx, check_int
from store.errors import CorruptError
from store.schema import stored_hash, stored_int, stored_note, stored_text
from store.sqlcore import SQLCore
from tlog import merkle
from tlog.encoding import HASH_SIZE
from tlog.errors import UsageError
from tlog.tiles import TILE_HEIGHT, TILE_WIDTH, leaf_hashes, perfect_root, split_hashes

__all__ = ["TileReads"]


class TileReads(SQLCore):
    """The tlog-tiles reads of :class:`store.sql.SQLStore` (see the module docstring)."""

    def tile_hashes(self, level: int, index: int, width: int) -> bytes:
        """The bytes of tile (``level``, ``index``) of ``width`` hashes: 32·width bytes.

        The ``width`` hashes must be complete in the log (``(index·256 + width)·256^level``
        leaves at most the log's size): UsageError otherwise. One SELECT of the hashes (and one
        of the log's size).
        """
        check_int(level, "tile level", 0, 63)
        check_int(index, "tile index", 0)
        check_int(width, "tile width", 1, TILE_WIDTH)
        height = TILE_HEIGHT * level
        first = index * TILE_WIDTH
        wanted = _stored_indexes(height, first, width)

        def work(tx: Tx) -> bytes:
            size = self._log_size(tx)
            if (first + width) << height > size:
                raise UsageError(
                    f"tile {level}/{index} of width {width} is not complete in the log's "
                    f"size {size}"
                )
            return b"".join(self._ordered_hashes(tx, wanted))

        return self._read(work)

    def sealed_heads(self, start: int, count: int) -> list[bytes]:
        """The sealed heads at log positions ``[start, start+count)``, each checked to be the
        log's leaf there (see the module docstring). ``count`` is 1..256; the positions must be
        in the log (UsageError otherwise)."""
        return self.sealed_heads_and_leaves(start, count)[0]

    def sealed_heads_and_leaves(self, start: int, count: int) -> tuple[list[bytes], list[bytes]]:
        """:meth:`sealed_heads` and their leaf hashes (``SHA-256(0x00 ‖ head)``), which are the
        log's stored leaf hashes there: the level-0 tile of a full bundle, for free.

        How the heads are checked: a full, aligned range (a full bundle: ``start`` a multiple of
        256, ``count`` 256) by **one** stored hash, the root of its subtree (height 8), which
        its leaf hashes must fold to; any other range, or one that does not fold to it, against
        its stored leaf hashes one by one, which names the position that differs."""
        check_int(start, "first position", 0)
        check_int(count, "count", 1, TILE_WIDTH)
        end = start + count
        aligned = count == TILE_WIDTH and start % TILE_WIDTH == 0

        def work(tx: Tx) -> tuple[list[bytes], list[bytes]]:
            size = self._log_size(tx)
            if end > size:
                raise UsageError(f"positions {start}..{end - 1} are not all in the log's {size}")
            rows = tx.all(
                "SELECT position, head FROM run_seal WHERE tenant = ? AND position >= ?"
                " AND position < ? ORDER BY position",
                (self._tenant, start, end),
            )
            positions = [r[0] for r in rows]
            if positions != list(range(start, end)):
                # Which position is missing (or stored wrong): the slow path names it.
                for i, position in enumerate(positions):
                    if stored_int(position, "log position") != start + i:
                        positions = positions[:i]
                        break
                raise CorruptError(
                    f"log position {start + len(positions)} has no sealed run (deleted?): "
                    "its entry bundle cannot be built"
                )
            heads = _checked_hashes([r[1] for r in rows], "sealed head at position", start)
            leaves = split_hashes(leaf_hashes(b"".join(heads), 0, HASH_SIZE, HASH_SIZE, count))
            if aligned:
                subtree = merkle.stored_hash_index(TILE_HEIGHT, start // TILE_WIDTH)
                if perfect_root(leaves) == self._ordered_hashes(tx, [subtree])[0]:
                    return heads, leaves
            stored = self._ordered_hashes(tx, _stored_indexes(0, start, count))
            for i, (leaf, want) in enumerate(zip(leaves, stored, strict=True)):
                if leaf != want:
                    raise CorruptError(
                        f"the sealed head at log position {start + i} is not the log's leaf there"
                    )
            if aligned:
                raise CorruptError(
                    f"the stored root of positions {start}..{end - 1} is not the root of their "
                    "stored leaf hashes"
                )
            return heads, leaves

        return self._read(work)

    def _ordered_hashes(self, tx: Tx, wanted: list[int]) -> list[bytes]:
        """The stored hashes at ``wanted`` (increasing, distinct), in that order: one SELECT;
        CorruptError when one is missing or not 32 bytes."""
        cond, params = self._d.any_of("idx", wanted)
        rows = tx.all(
            f"SELECT idx, hash FROM tree_hash WHERE tenant = ? AND {cond} ORDER BY idx",  # noqa: S608
            (self._tenant, *params),
        )
        if len(rows) != len(wanted):
            got = {r[0] for r in rows}
            missing = next(i for i in wanted if i not in got)
            raise CorruptError(f"stored tree hash {missing} is missing or not 32 bytes")
        return _checked_hashes([r[1] for r in rows], "tree hash at index", wanted)

    def latest_note(self) -> bytes | None:
        """The kept checkpoint note of the largest size, or None when none is kept."""
        row = self._read(
            lambda tx: tx.one(
                "SELECT size, note FROM checkpoint WHERE tenant = ? ORDER BY size DESC LIMIT 1",
                (self._tenant,),
            )
        )
        if row is None:
            return None
        return stored_note(row[1], f"checkpoint {row[0]}")[0]

    def kept_sizes(self, after: int = -1) -> list[int]:
        """The sizes of the kept checkpoints larger than ``after``, increasing (one query)."""
        check_int(after, "size", -1)
        rows = self._read(
            lambda tx: tx.all(
                "SELECT size FROM checkpoint WHERE tenant = ? AND size > ? ORDER BY size",
                (self._tenant, after),
            )
        )
        return [stored_int(r[0], "checkpoint size") for r in rows]

    def tenants(self) -> list[str]:
        """Every tenant of this database that keeps at least one checkpoint of its journal's
        log, bytewise order. An inbox log's checkpoints (kept under ``<tenant>/inbox``, a name
        no tenant can have) are not a tenant's: they are left out."""
        rows = self._read(
            lambda tx: tx.all("SELECT DISTINCT tenant FROM checkpoint ORDER BY tenant")
        )
        return _tenants_of(rows)

    def log_tenants(self) -> list[str]:
        """Every tenant of this database whose log exists -- it sealed a run or kept a
        checkpoint -- bytewise order: one short query (``log_state`` has a row per log). The
        inbox logs (``<tenant>/inbox``) are not tenants and are left out."""
        rows = self._read(
            lambda tx: tx.all(
                "SELECT tenant FROM log_state UNION SELECT DISTINCT tenant FROM checkpoint"
                " ORDER BY tenant"
            )
        )
        return _tenants_of(rows)


def _tenants_of(rows: list[tuple[object, ...]]) -> list[str]:
    """The tenants among the log names of ``rows``: an inbox log (``<tenant>/inbox``, a name
    no tenant can have) is not one."""
    names = (stored_text(r[0], "tenant") for r in rows)
    return [n for n in names if "/" not in n]


def _stored_indexes(height: int, first: int, count: int) -> list[int]:
    """:func:`tlog.merkle.stored_hash_index` of (``height``, ``first`` … ``first+count−1``),
    increasing; inlined (``m`` is the leaf completing each subtree)."""
    step = 1 << height
    return [
        2 * m - m.bit_count() + height
        for m in range(((first + 1) << height) - 1, (first + count) << height, step)
    ]


def _checked_hashes(values: list[object], what: str, where: int | list[int]) -> list[bytes]:
    """``values`` as 32-byte hashes: checked in bulk, one at a time (to name the bad one, or to
    take a driver's memoryview) only when the bulk check fails. ``where`` is the first
    position, or every value's index."""
    if set(map(type, values)) <= {bytes} and set(map(len, cast("list[bytes]", values))) <= {32}:
        return cast("list[bytes]", values)
    return [
        stored_hash(v, f"{what} {where + i if isinstance(where, int) else where[i]}")
        for i, v in enumerate(values)
    ]
