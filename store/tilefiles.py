"""Publishing a log's tiles as files, for a static web server (``tlog-store tiles --out DIR``).

The files are the resources of :mod:`store.tiles`, at the same paths as ``tlog-store serve``
answers them: ``<dir>/checkpoint``, ``<dir>/tile/<L>/<N>[.p/<W>]`` and
``<dir>/tile/entries/<N>[.p/<W>]`` (``tlog-store tiles`` gives each tenant the directory
``DIR/<tenant>``), byte for byte what the server sends.

:func:`publish_tiles` brings a directory from the checkpoint it holds (none: size 0) to the
source's latest:

1. For each kept checkpoint size after the directory's, in increasing order, it writes the
   tiles and bundles that growing to that size adds (:func:`tlog.tiles.new_tiles`): the full
   ones completed, and that size's partial ones — so the partial tiles of every kept size are
   there (tlog-tiles TT-11), and a full tile is written once.
2. Every file is written to a temporary file in its directory (``.tlog-tiles-*``), flushed and
   fsynced, then renamed over its name: a reader (and a crash) sees the old file or the whole
   new one, never a part. A file that exists already is read instead: the same bytes are left
   alone (so a run that crashed is finished by the next), other bytes stop the run
   (:class:`~tlog.errors.VerificationError`): the directory holds another log, or was changed,
   and a tile is never overwritten with other bytes.
3. Every directory that got a file is fsynced, and only then the checkpoint is written (the
   same way) and its directory fsynced: a checkpoint is never visible before every tile it
   needs is durable.

A directory whose checkpoint is of another origin, larger than the source's, or of the same
size with another tree is refused (VerificationError) without writing: a log that went back
or forked is not silently republished. Running again with nothing new writes nothing but a
checkpoint that gained cosignatures.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from store.tiles import TileSource, leaf_level_bytes, note_checkpoint, tile_bytes
from tlog.errors import VerificationError
from tlog.tiles import MAX_LEVEL, Bundle, new_level_tiles

__all__ = ["TEMP_PREFIX", "Published", "publish_tiles"]

TEMP_PREFIX = ".tlog-tiles-"
"""Temporary files are named with this prefix; one left by a crash may be deleted."""


@dataclass(frozen=True)
class Published:
    """What :func:`publish_tiles` did: the sizes before and after, and the files written."""

    old_size: int
    size: int
    written: int
    checkpoint_written: bool


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f"{TEMP_PREFIX}{secrets.token_hex(8)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class _Writer:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.dirs: set[Path] = set()
        self.written = 0

    def put(self, rel: str, data: bytes) -> None:
        path = self.root / rel
        try:
            held = path.read_bytes()
        except FileNotFoundError:
            self._mkdirs(path.parent)
            _write_atomic(path, data)
            self.dirs.add(path.parent)
            self.written += 1
            return
        if held != data:
            raise VerificationError(
                f"{path} exists with other bytes than this log's: refusing to overwrite it"
            )

    def _mkdirs(self, d: Path) -> None:
        # A new directory's entry in its parent must be durable too: remember every
        # directory made here and the existing one they were made in.
        p = d
        while not p.is_dir():
            self.dirs.add(p)
            p = p.parent
        self.dirs.add(p)
        d.mkdir(parents=True, exist_ok=True)

    def sync(self) -> None:
        """fsync every directory that got a new entry, deepest first."""
        for d in sorted(self.dirs, key=lambda p: len(p.parts), reverse=True):
            _fsync_dir(d)
        self.dirs.clear()


def _held_checkpoint(root: Path) -> bytes | None:
    try:
        return (root / "checkpoint").read_bytes()
    except FileNotFoundError:
        return None


def publish_tiles(source: TileSource, directory: str | os.PathLike[str]) -> Published:
    """Bring ``directory`` up to ``source``'s latest checkpoint (see the module docstring).

    A source without a checkpoint writes nothing (size 0). The directory is created when
    missing. Raises VerificationError when the directory's checkpoint or files are not a
    prefix of this log's, MalformedError when its checkpoint does not parse, OSError for the
    file system's errors.
    """
    root = Path(directory)
    note = source.latest_note()
    if note is None:
        return Published(0, 0, 0, False)
    cp = note_checkpoint(note, "the latest checkpoint")
    held = _held_checkpoint(root)
    old_size = 0
    if held is not None:
        old = note_checkpoint(held, f"{root / 'checkpoint'}")
        if old.origin != cp.origin:
            raise VerificationError(
                f"{root} holds the log {old.origin!r}, not {cp.origin!r}: refusing to publish"
            )
        if old.size > cp.size:
            raise VerificationError(
                f"{root} holds a checkpoint of size {old.size}, larger than the log's latest "
                f"{cp.size}: refusing to go back"
            )
        if old.size == cp.size and old.root != cp.root:
            raise VerificationError(
                f"{root} holds another root for size {cp.size}: the log forked; refusing"
            )
        if held == note:
            return Published(old.size, cp.size, 0, False)
        old_size = old.size
    root.mkdir(parents=True, exist_ok=True)
    writer = _Writer(root)
    sizes = [s for s in source.kept_sizes(old_size) if s <= cp.size]
    if not sizes or sizes[-1] != cp.size:
        sizes.append(cp.size)
    prev = old_size
    for size in sizes:
        # One tile at a time (new_level_tiles), never the list of a growth: publishing a log
        # of 2^31 entries from nothing walks 2^23 bundles.
        for level in range(1, MAX_LEVEL + 1):  # level 0: with its bundles, below
            for tile in new_level_tiles(level, prev, size):
                writer.put(tile.path(), tile_bytes(source, tile))
        for tile in new_level_tiles(0, prev, size):  # the new level-0 tiles are their bundles'
            bundle = Bundle(tile.index, tile.width)
            entries, leaves = leaf_level_bytes(source, bundle)
            writer.put(tile.path(), leaves)
            writer.put(bundle.path(), entries)
        prev = size
    writer.sync()
    _write_atomic(root / "checkpoint", note)
    _fsync_dir(root)
    return Published(old_size, cp.size, writer.written, True)
