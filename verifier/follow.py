"""Following a tiled log: ``tlog-verify follow URL --policy FILE --state FILE``.

A monitor fetches a log's C2SP tlog-tiles resources (docs/tiles.md) over HTTP(S)
(:class:`verifier.fetch.Fetcher`, the standard library's), and accepts a new checkpoint only
when it is what the policy trusts and what the last accepted checkpoint allows. One round
(:func:`follow_once`):

1. Fetch ``<URL>checkpoint`` and judge it under the policy and the time rules
   (:func:`verifier.proofs.judge_note`: a listed log's signature, the witness quorum; the
   origin must be the state's).
2. Against the **state** (the last accepted checkpoint note, a file of its own):

   * a smaller size: the log went back — a rollback (or a split view);
   * the same size with another root: two roots for one size — a fork, proven by the two notes;
   * a larger size: fetch the tiles of the new tree that the proof needs, only those (the
     level-0 tile and the partial ones implied by the verified size, TT-12), check that they
     hash to the new checkpoint's root (:func:`tlog.tiles.tile_root`; else a tile was
     rewritten or cut), then compute the RFC 6962 consistency proof from the state's size with
     them and verify it (:func:`tlog.merkle.verify_consistency`). A proof that folds to the new
     root but from another old root proves a fork.

3. With ``--verify-entries``, fetch the entry bundles of the new positions and check that they
   extend the accepted tree to the new root: the accepted tree's perfect subtrees (read from
   the tiles, folded to the state's root) and the new entries' leaf hashes, appended in order,
   must fold to the new checkpoint's root. A bundle that is cut, reordered or rewritten fails:
   a full bundle's leaf hashes are its level-0 tile, which is not fetched, so its root is
   compared with the one the level-1 tile holds; a partial bundle's leaf hashes with the
   partial level-0 tile the root check read. With ``--check-tiles`` every new level-0 tile is
   fetched and compared with its bundle too (the tiles clients' inclusion proofs read). Without
   a state every entry from 0 is checked (a progress bar on a terminal).
4. Only then the new note becomes the state, written atomically (a temporary file, fsynced,
   renamed). The state never moves backwards: a smaller or different checkpoint is never
   written over it.

On a detection (status 1) nothing is written over the state; instead the **evidence** goes to
a new directory under ``--evidence DIR`` (default ``<state>.evidence``): ``checkpoint.old``
(the state, when there is one), ``checkpoint.new`` (what the log served), ``reason`` (one
line), only for a checkpoint inconsistent with the state ``consistency-proof`` (the proof
computed, one base64 hash per line), and for a tile or bundle that does not hash as the
checkpoint says, what was served: ``served/<path>`` (e.g. ``served/tile/entries/000``; every
tile the round read when the fault is not one file's; a full bundle is fetched again, since
the check streams them) and ``served/urls`` (the URL of each, one per line), for the log's
operator. A third party checks the two signed notes, trusting nothing of ours, with
``tlog-verify consistency checkpoint.old checkpoint.new --policy FILE``, adding ``--proof
consistency-proof`` when that file exists (two roots for one size need no proof; a log that
went back is reported as a rollback), or ``tlog-verify checkpoint`` for each note.

A fetch that fails (network, a status other than 200, a body over its limit) makes the round
unusable (status 2): nothing was judged. A tile is the exception to the limit: one of the wrong
length, short or long, is a tile fault (status 1) wherever it is read, and its evidence keeps
what was served, cut after a full tile's 8,192 bytes and one more. ``Content-Encoding: gzip``
is decoded; the limits are the decoded sizes' (a full tile of hashes is larger gzipped), and
decoding stops one byte past them (a gzip bomb stops there).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tlog import merkle
from tlog.checkpoint import Checkpoint
from tlog.cli.files import output_file
from tlog.encoding import HASH_SIZE, b64encode
from tlog.errors import MalformedError, ProofError, UsageError, VerificationError
from tlog.note import MAX_NOTE_SIZE, parse_note
from tlog.policy import Policy, TimePolicy
from tlog.tiles import (
    FULL_TILE_SIZE,
    MAX_ENTRY_SIZE,
    TILE_HEIGHT,
    TILE_WIDTH,
    Bundle,
    Tile,
    TileHashReader,
    leaf_hashes,
    new_level_tiles,
    parse_bundle,
    perfect_root,
    proven_prefix_from_tiles,
    split_hashes,
    tile_root,
)
from verifier.fetch import DEFAULT_TIMEOUT, Fetcher
from verifier.proofs import judge_note
from verifier.report import InputError, LocatedError, Report, failure_from

__all__ = ["follow", "follow_once"]

_MAX_BUNDLE = TILE_WIDTH * (2 + MAX_ENTRY_SIZE)


class TileReader(TileHashReader):
    """The tree of ``size`` leaves as served: :class:`tlog.tiles.TileHashReader` over the
    fetcher (each tile fetched once, only tiles the verified size implies); a tile of the
    wrong length is a detection located in the proof."""

    def __init__(self, fetcher: Fetcher, size: int) -> None:
        # Cut, not refused, when too long: a tile of the wrong length, short or long, is one
        # kind of fault, judged (and kept as evidence) by add().
        super().__init__(size, lambda tile: fetcher.get(tile.path(), FULL_TILE_SIZE, cut=True))
        self.fetcher = fetcher

    def add(self, tile: Tile, data: bytes) -> None:
        """Keep ``tile``'s bytes, :meth:`checked`."""
        super().add(tile, self.checked(tile, data))

    def checked(self, tile: Tile, data: bytes) -> bytes:
        """``data``, when it is ``tile``'s length; else :class:`_TileFault`, with the bytes as
        served (cut after a full tile's length and one byte)."""
        if len(data) != tile.data_size:
            err = LocatedError(
                "proof",
                f"tile {tile.path()} is {len(data)} bytes, not {tile.data_size}:"
                " a truncated or padded tile",
                checkpoint_size=self.size,
            )
            raise _TileFault(err, {tile.path(): data})
        return data

    def peek(self, tile: Tile) -> bytes:
        """``tile``'s bytes, held or fetched (:meth:`checked`), without keeping them: the
        streamed checks read every tile once."""
        data = self.tiles.get(tile)
        return data if data is not None else self.checked(tile, self._read_tile(tile))


@dataclass
class Evidence:
    """What a detection leaves for a third party (module docstring)."""

    reason: str
    old: bytes | None
    new: bytes
    proof: list[bytes] = field(default_factory=list)
    served: dict[str, bytes] = field(default_factory=dict)
    """Tile and bundle paths (``tile/…``) -> the bytes served, for a tile fault."""
    url: str = ""
    """The log's base URL (ends with ``/``), for ``served/urls``."""

    def write(self, directory: Path) -> Path:
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        target = directory / stamp
        n = 1
        while target.exists():
            n += 1
            target = directory / f"{stamp}-{n}"
        target.mkdir(parents=True)
        files = {"checkpoint.new": self.new, "reason": (self.reason + "\n").encode("utf-8")}
        if self.old is not None:
            files["checkpoint.old"] = self.old
        if self.proof:
            files["consistency-proof"] = "".join(b64encode(h) + "\n" for h in self.proof).encode()
        if self.served:
            for path, data in self.served.items():
                files[f"served/{path}"] = data  # paths of tlog-tiles' grammar: no "..", no "/"
            files["served/urls"] = "".join(f"{self.url}{p}\n" for p in self.served).encode()
        for name, data in files.items():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            with output_file(str(target / name), ".tlog-verify-") as f:
                f.write(data)
        return target


class _Detected(Exception):
    def __init__(self, error: LocatedError, evidence: Evidence) -> None:
        super().__init__(str(error))
        self.error = error
        self.evidence = evidence


class _TileFault(Exception):
    """Internal: a bundle or tile that does not hash as it must, with the bytes served."""

    def __init__(self, error: LocatedError, served: dict[str, bytes]) -> None:
        super().__init__(str(error))
        self.error = error
        self.served = served


def _with_bundle(served: dict[str, bytes], reader: TileReader, bundle: Bundle) -> dict[str, bytes]:
    """``served`` and ``bundle`` fetched again: the bundles hashed are not kept (the check
    streams), so the evidence has the bundle as served now; a fetch that fails leaves it out."""
    with contextlib.suppress(InputError):
        served[bundle.path()] = reader.fetcher.get(bundle.path(), _MAX_BUNDLE)
    return served


def _tile_evidence(
    err: LocatedError, held: bytes | None, note: bytes, reader: TileReader, served: dict[str, bytes]
) -> Evidence:
    return Evidence(str(err), held, note, served=served, url=reader.fetcher.url)


def _held_tiles(reader: TileReader) -> dict[str, bytes]:
    """path -> bytes of every tile ``reader`` fetched (those a fault may be in)."""
    return {tile.path(): data for tile, data in sorted(reader.tiles.items())}


def _frontier(reader: TileReader, size: int) -> list[tuple[int, bytes]]:
    """(height, hash) of the perfect subtrees of the tree of ``size``, largest first."""
    out: list[tuple[int, bytes]] = []
    start = 0
    for height in reversed(range(size.bit_length())):
        if (size >> height) & 1:
            out.append((height, reader.node(height, start >> height)))
            start += 1 << height
    return out


def _fold(frontier: list[tuple[int, bytes]]) -> bytes:
    if not frontier:
        return merkle.EMPTY_ROOT
    root = frontier[-1][1]
    for _, h in reversed(frontier[:-1]):
        root = merkle.node_hash(h, root)
    return root


_ENTRY = 2 + HASH_SIZE  # a bundle's 32-byte entry with its length prefix


def _leaf_tile(bundle: Bundle, data: bytes) -> bytes:
    """The leaf hashes of a bundle's entries, joined as its level-0 tile's bytes would be
    (LocatedError for a malformed bundle). Bundles of 32-byte entries (``00 20`` then the
    entry, 34 bytes each), as a store serves, are hashed in place, in C when built."""
    width = bundle.width
    if (
        len(data) == _ENTRY * width
        and data[0::_ENTRY] == bytes(width)
        and data[1::_ENTRY] == bytes([HASH_SIZE]) * width
    ):
        return leaf_hashes(data, 2, _ENTRY, HASH_SIZE, width)
    try:
        entries = parse_bundle(data, width)
    except MalformedError as e:
        raise LocatedError(
            "proof", f"{bundle.path()}: {e} (a truncated or padded bundle)"
        ) from None
    return b"".join(merkle.leaf_hash(e) for e in entries)


class _Levels:
    """The check above level 0, streamed: each new tile above level 0 holds the roots of the
    full tiles below it. The roots of the new full tiles of a level arrive in index order
    (:meth:`full`); once a parent tile's children have all arrived, the parent is read and
    compared, and its own root, when it is full, goes up. Memory: one parent's children per
    level, whatever the log's size."""

    def __init__(self, reader: TileReader, size: int) -> None:
        self.reader = reader
        self.size = size
        # level -> (parent index, {position: (root, computed from a bundle alone)})
        self.pending: dict[int, tuple[int, dict[int, tuple[bytes, bool]]]] = {}

    def full(self, level: int, index: int, root: bytes, from_bundle: bool = False) -> None:
        """The new full tile (``level``, ``index``) has ``root``; ``from_bundle``: a level-0
        root computed from its bundle, the tile not fetched."""
        parent = index >> TILE_HEIGHT
        waiting = self.pending.get(level)
        if waiting is not None and waiting[0] != parent:
            self._flush(level)
            waiting = None
        if waiting is None:
            waiting = self.pending[level] = (parent, {})
        waiting[1][index - (parent << TILE_HEIGHT)] = (root, from_bundle)

    def finish(self) -> None:
        """Every root has arrived: check the parents still waiting, bottom up."""
        level = 0
        while self.pending:
            if level in self.pending:
                self._flush(level)
            level += 1

    def _flush(self, level: int) -> None:
        parent, children = self.pending.pop(level)
        above = level + 1
        width = min(TILE_WIDTH, (self.size >> (TILE_HEIGHT * above)) - (parent << TILE_HEIGHT))
        tile = Tile(above, parent, width)
        data = self.reader.peek(tile)
        hashes = split_hashes(data)
        for i, (root, from_bundle) in sorted(children.items()):
            if hashes[i] != root:
                raise _TileFault(*self._mismatch(tile, data, i, from_bundle))
        if tile.is_full:
            self.full(above, parent, perfect_root(hashes))

    def _mismatch(
        self, tile: Tile, data: bytes, i: int, from_bundle: bool
    ) -> tuple[LocatedError, dict[str, bytes]]:
        below = Tile(tile.level - 1, tile.index * TILE_WIDTH + i)
        if from_bundle:
            bundle = Bundle(below.index, TILE_WIDTH)
            err = LocatedError(
                "proof",
                f"{bundle.path()} does not hash to the root tile {tile.path()} holds"
                f" at position {i} (the bundle's entries or the tile were"
                " rewritten, reordered or cut)",
                checkpoint_size=self.size,
            )
            return err, _with_bundle({tile.path(): data}, self.reader, bundle)
        err = LocatedError(
            "proof",
            f"tile {tile.path()} does not hold the root of tile {below.path()} at"
            f" position {i} (a tile was rewritten)",
            checkpoint_size=self.size,
        )
        served = {tile.path(): data}
        held = self.reader.tiles.get(below)
        if held is None:  # not kept (the check streams): as served now, if it still is
            with contextlib.suppress(InputError):
                held = self.reader.fetcher.get(below.path(), FULL_TILE_SIZE, cut=True)
        if held is not None:
            served[below.path()] = held
        return err, served


def _check_entries(
    reader: TileReader,
    old: Checkpoint | None,
    new: Checkpoint,
    progress: Callable[[int, int], None] | None,
    check_tiles: bool = False,
) -> tuple[int, int]:
    """Check the entries of positions [old size, new size) against the new root; their count
    and the number of level-0 tiles compared with their bundles.

    A new bundle's leaf hashes *are* its level-0 tile, so a full one is not fetched: its
    bundle's root must be at its place in the level-1 tile, like every full tile completed
    since the old size in the tile above it, level by level. A partial bundle is compared
    with the partial level-0 tile the root check read. The tiles were checked to give the
    new root (and, with a state, the consistency proof from the old one), and the root reads
    the top of each chain: so the entries are the leaves of the signed tree. Bundles (and a
    level-0 tile the reader holds no copy of, for a partial bundle) are fetched ahead over
    the fetcher's connections while earlier ones are hashed. With ``check_tiles`` every new
    level-0 tile is fetched too and must be its bundle's leaf hashes: the tiles a client's
    inclusion proof reads are checked, at twice the requests."""
    start = 0 if old is None else old.size
    if old is not None and _fold(_frontier(reader, start)) != old.root:
        raise LocatedError(
            "proof",
            f"the tiles do not give the accepted root of size {start}",
            checkpoint_size=new.size,
        )
    total = new.size - start
    held = reader.tiles  # what the root check and the proof read: compared, not fetched

    def fetch_tile(bundle: Bundle) -> bool:
        # A bundle's level-0 tile is fetched with it when it is compared and not held yet.
        return (check_tiles or not bundle.is_full) and bundle.tile not in held

    def bundles() -> Iterator[Bundle]:
        return (Bundle(t.index, t.width) for t in new_level_tiles(0, start, new.size))

    def paths() -> Iterator[tuple[str, int, bool]]:
        for bundle in bundles():
            yield bundle.path(), _MAX_BUNDLE, False
            if fetch_tile(bundle):
                yield bundle.tile.path(), FULL_TILE_SIZE, True  # cut, as TileReader's

    fetched = reader.fetcher.get_many(paths())
    levels = _Levels(reader, new.size)
    compared = 0  # level-0 tiles compared with their bundles
    for bundle in bundles():
        data = next(fetched)
        tile = bundle.tile
        served = held.get(tile)
        if fetch_tile(bundle):
            served = reader.checked(tile, next(fetched))  # compared, then let go
        leaves = _leaf_tile(bundle, data)
        if served is not None:
            compared += 1
            if leaves != served:
                err = LocatedError(
                    "proof",
                    f"{bundle.path()} does not hash to its level-0 tile {tile.path()} "
                    # Either may be the one altered: a full level-0 tile off the tree's right
                    # edge is only checked here, against the bundle.
                    "(the bundle's entries or the tile were rewritten, reordered or cut)",
                    checkpoint_size=new.size,
                )
                raise _TileFault(err, {bundle.path(): data, tile.path(): served})
        if bundle.is_full:
            levels.full(0, bundle.index, perfect_root(split_hashes(leaves)), served is None)
        if progress is not None:
            progress(bundle.index * TILE_WIDTH + bundle.width - start, total)
    levels.finish()
    return total, compared


def _read_state(path: Path) -> bytes | None:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    if len(data) > MAX_NOTE_SIZE:
        raise InputError(f"state {path} is larger than a note")
    try:
        Checkpoint.parse(parse_note(data)[0])
    except MalformedError as e:
        raise InputError(f"state {path} is not a checkpoint note: {e}") from None
    return data


def _checkpoint_of(note: bytes) -> Checkpoint:
    return Checkpoint.parse(parse_note(note)[0])


def _judge_tiles(
    reader: TileReader,
    old: Checkpoint | None,
    new: Checkpoint,
    held: bytes | None,
    note: bytes,
    report: Report,
) -> None:
    """The new tree's tiles: they hash to the new checkpoint's root, and (with a state) give a
    consistency proof from it. Requires: the new size is larger than the state's."""
    try:
        _judge_tree(reader, old, new, held, note, report)
    except _TileFault as e:
        # A tile rewritten or of the wrong length, read for the root or for the proof: which
        # one cannot be told, so every tile the round read, as served.
        served = {**_held_tiles(reader), **e.served}
        raise _Detected(e.error, _tile_evidence(e.error, held, note, reader, served)) from None


def _judge_tree(
    reader: TileReader,
    old: Checkpoint | None,
    new: Checkpoint,
    held: bytes | None,
    note: bytes,
    report: Report,
) -> None:
    """:func:`_judge_tiles`; a tile fault is raised as :class:`_TileFault`, whose evidence is
    every tile read, added by the caller."""
    root = tile_root(new.size, reader.read_tile)
    if root != new.root:
        err = LocatedError(
            "proof",
            f"the tiles do not hash to the root of the checkpoint of size {new.size} "
            "(a tile was rewritten)",
            checkpoint_size=new.size,
        )
        raise _TileFault(err, {})  # every tile read is evidence (_judge_tiles adds them)
    report.check("tiles", "tiles hash to the checkpoint's root", len(reader.tiles), "tiles")
    if old is not None and old.size > 0:
        proof = merkle.consistency_proof(old.size, new.size, reader)
        try:
            merkle.verify_consistency(old.size, new.size, old.root, new.root, proof)
        except ProofError as pe:
            other = proven_prefix_from_tiles(old.size, new.root, proof, reader)
            if other is None:
                # Every proof hash goes into the new root: a proof that does not even fold
                # to it holds a rewritten tile's hash (one the root check does not read; a
                # cache, a proxy). A tile fault, not evidence against the log (as the
                # witness's feed takes it).
                err = LocatedError(
                    "proof",
                    f"the tiles give no consistency proof from size {old.size} to the root"
                    f" of size {new.size} (a tile was rewritten: not evidence of a fork)",
                    checkpoint_size=new.size,
                )
                raise _TileFault(err, {}) from None
            why = f"the checkpoint of size {new.size} is not consistent with size {old.size}"
            if other != old.root:
                why += f": its tree has the root {b64encode(other)} at size {old.size}"
            else:
                why += f" ({pe})"
            err = LocatedError("consistency", why, checkpoint_size=new.size)
            raise _Detected(err, Evidence(why, held, note, proof)) from None
        report.check(
            "consistency",
            f"consistent with the accepted checkpoint of size {old.size}",
            len(proof),
            "proof hashes",
        )


def _judge_round(
    fetcher: Fetcher,
    policy: Policy,
    time_policy: TimePolicy | None,
    held: bytes | None,
    verify_entries: bool,
    progress: Callable[[int, int], None] | None,
    report: Report,
    check_tiles: bool = False,
) -> bytes:
    old = None if held is None else _checkpoint_of(held)
    note = fetcher.get("checkpoint", MAX_NOTE_SIZE)
    try:
        result = judge_note(note, policy, time_policy, origin=None if old is None else old.origin)
    except LocatedError as e:
        raise _Detected(e, Evidence(f"the served checkpoint: {e}", held, note)) from None
    new = result.checkpoint
    report.check("checkpoint", "served checkpoint signed by the log, quorum met", 1, "notes")
    report.facts.update(origin=new.origin, size=new.size, root=b64encode(new.root))
    if old is not None:
        report.facts["old_size"] = old.size
        if new.size < old.size:
            err = LocatedError(
                "consistency",
                f"the log went back: it serves size {new.size}, after size {old.size} was accepted",
                checkpoint_size=new.size,
            )
            raise _Detected(err, Evidence(str(err), held, note))
        if new.size == old.size and new.root != old.root:
            err = LocatedError(
                "consistency",
                f"two roots for size {new.size}: the log forked",
                checkpoint_size=new.size,
            )
            raise _Detected(err, Evidence(str(err), held, note))
    reader = TileReader(fetcher, new.size)
    if new.size > (0 if old is None else old.size):
        _judge_tiles(reader, old, new, held, note, report)
    if verify_entries and new.size > (0 if old is None else old.size):
        try:
            count, compared = _check_entries(reader, old, new, progress, check_tiles)
        except _TileFault as e:
            raise _Detected(
                e.error, _tile_evidence(e.error, held, note, reader, e.served)
            ) from None
        except LocatedError as e:
            raise _Detected(e, Evidence(str(e), held, note)) from None
        report.check("entries", "entry bundles extend the tree to the new root", count, "entries")
        if check_tiles:  # every new bundle's level-0 tile was compared
            report.check(
                "level-0-tiles",
                "new level-0 tiles are their bundles' leaf hashes",
                compared,
                "tiles",
            )
        report.facts["entries"] = count
    report.facts["requests"] = fetcher.requests
    report.facts["bytes"] = fetcher.bytes
    return note


def _write_state(path: Path, note: bytes) -> None:
    with output_file(str(path), ".tlog-verify-") as f:
        f.write(note)


def follow_once(
    url: str,
    *,
    policy: Policy,
    state: str | os.PathLike[str],
    time_policy: TimePolicy | None = None,
    evidence: str | os.PathLike[str] | None = None,
    verify_entries: bool = False,
    check_tiles: bool = False,
    progress: Callable[[int, int], None] | None = None,
    timeout: float = DEFAULT_TIMEOUT,
) -> Report:
    """One round of following the log at ``url`` (module docstring); its report.
    ``check_tiles`` (with ``verify_entries``): every new level-0 tile is fetched and compared
    with its bundle's leaf hashes too.

    Valid: the served checkpoint was accepted (or is the state again) and is the state now.
    Invalid (status 1): a detection, whose evidence directory is the fact ``evidence``.
    Unusable (status 2): a fetch failed or the state does not parse; nothing was judged.
    """
    state_path = Path(state)
    evidence_dir = Path(evidence) if evidence is not None else Path(f"{state_path}.evidence")
    report = Report("follow", {"log": url, "state": str(state_path)})
    fetcher: Fetcher | None = None
    try:
        fetcher = Fetcher(url, timeout=timeout)
        held = _read_state(state_path)
        note = _judge_round(
            fetcher, policy, time_policy, held, verify_entries, progress, report, check_tiles
        )
    except _Detected as d:
        where = d.evidence.write(evidence_dir)
        report.facts["evidence"] = str(where)
        return report.fail(failure_from(d.error, "log"))
    except (VerificationError, MalformedError, UsageError, OSError) as e:
        return report.fail(failure_from(e, "log"))
    finally:
        if fetcher is not None:
            fetcher.close()
    if note != held:
        _write_state(state_path, note)
    return report


def follow(
    one_round: Callable[[], Report],
    *,
    interval: float,
    on_round: Callable[[Report], None],
    sleep: Callable[[float], None] = time.sleep,
) -> Report:
    """Follow until a detection: ``one_round()`` (a :func:`follow_once`) every ``interval``
    seconds, each report to ``on_round``; returns the first invalid report. An unusable round
    (a fetch failed) is reported and the next one tried."""
    while True:
        report = one_round()
        on_round(report)
        if report.status == 1:
            return report
        sleep(interval)
