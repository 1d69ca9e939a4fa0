"""Feeding the witness from tiled logs: ``tlog-witness feed``, the pull side of the witness.

A log that publishes itself as C2SP tlog-tiles (``tlog-store serve``, ``tlog-store tiles``,
any tlog-tiles log) need not submit its checkpoints: the witness can follow it by URL, as
omniwitness's feeders do. A log's **tiles URL** is part of its configuration in the state
(``tlog-witness add-log ORIGIN --key VKEY --tiles URL``, or ``set-tiles``); ``tlog-witness
feed`` follows every enabled log that has one. One round for one log (:func:`feed_log`):

1. GET ``<URL>checkpoint`` (at most a note's size). Its origin must be the log's, and it must
   open with the log's trusted keys (:meth:`~witness.cosigning.Cosigning.open_checkpoint`, the
   server's own check): otherwise it is *refused*, and nothing more is fetched.
2. Against the stored checkpoint (the witness's latest cosigned one, size ``old``, 0 when
   none): a smaller size is the log (or a cache in front of it) going back: *behind*, nothing
   submitted, the stored checkpoint stays (a witness never moves backwards). The stored
   checkpoint itself again (same size and root): *unchanged*, nothing submitted.
3. A larger size: GET the tiles of the new tree that the proof needs, only those
   (:func:`tlog.tiles.consistency_tiles`: the tiles that give the new root and those that hold
   the consistency proof's hashes, fetched concurrently over the session's keep-alive
   connections), and **build the consistency proof from ``old`` ourselves**
   (:func:`tlog.tiles.consistency_proof_from_tiles`). Tiles that do not hash to the
   checkpoint's root were rewritten or cut: *unusable*, nothing submitted (they prove nothing
   about the log, whose signature is on the root, not on the tiles). So is a proof that does
   not even fold to the new root (every proof hash goes into it): a tile that only the proof
   reads was rewritten. When ``old`` is a power of two the proof carries no root of its own
   for it, so the tile holding the node over the first ``old`` leaves is fetched too, and the
   proof must fold from that node (:func:`tlog.tiles.proven_prefix_from_tiles`).
4. Submit ``old <old>``, the proof and the note through
   :meth:`~witness.cosigning.Cosigning.cosign`: **the one path of POST /add-checkpoint**
   after the body is read — parse, known and enabled origin, the log's signature, the quota,
   the origin's lock, consistency against the stored state, the durable compare-and-swap,
   then the signatures. So the feeder cannot cosign anything the push path would refuse. A
   checkpoint of the stored size with another root is submitted too (``old`` = size, no
   proof): the push path refuses it and keeps it as evidence, and so does the feed. A
   served tree that is not consistent with the stored one gives a proof (from its own, valid
   tiles) that folds to the new root from another root at the stored size: refused, and
   kept as evidence (:meth:`~witness.cosigning.Cosigning.keep_if_proven`), exactly as a push
   of that proof would be.

Outcomes (:class:`FeedResult`): ``cosigned``, ``unchanged``, ``behind`` (nothing done),
``refused`` (the witness's checks said no: a fork, a bad signature, another origin, a
disabled log, the quota; the status it would have answered is in the result), ``lost`` (another
submitter moved the log between our read and our write: 409; the next round catches up) and
``unusable`` (a fetch failed, a tile is the wrong length or the tiles do not give the root: the
round could not judge the log; the next round tries again).

A fetch is bounded: a timeout per request, a status other than 200 is a failure, a body over
its limit (a note: 1 MiB; a tile: 8,192 bytes) too. A round's logs are fed concurrently (at most
:data:`MAX_CONCURRENT_LOGS` at once), each log's own steps in order.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import aiohttp

from tlog.checkpoint import Checkpoint, origin_of
from tlog.errors import MalformedError, TlogError
from tlog.note import MAX_NOTE_SIZE
from tlog.tiles import (
    FULL_TILE_SIZE,
    Tile,
    TileHashReader,
    consistency_proof_from_tiles,
    consistency_tiles,
    prefix_tiles,
    proven_prefix_from_tiles,
)
from tlog.witnessproto import MAX_PROOF_LINES, AddCheckpointRequest, ConflictError
from witness.config import DEFAULT_FEED_INTERVAL, DEFAULT_FEED_TIMEOUT
from witness.cosigning import Cosigning
from witness.errors import http_status
from witness.state import LogConfig

__all__ = [
    "DEFAULT_FEED_INTERVAL",
    "DEFAULT_FEED_TIMEOUT",
    "MAX_CONCURRENT_LOGS",
    "FeedResult",
    "TilesClient",
    "feed_log",
    "feed_round",
    "round_status",
    "run_feed",
]

MAX_CONCURRENT_LOGS = 16
"""Logs fed at once in a round."""

_MAX_CONCURRENT_TILES = 8  # tile requests of one log in flight at once


class FetchFailed(Exception):
    """A GET of a log's resource failed: the round of that log is unusable."""


@dataclass(frozen=True)
class FeedResult:
    """What one round did for one log (module docstring: the outcomes)."""

    origin: str
    url: str
    outcome: str
    message: str
    old: int | None = None
    size: int | None = None
    status: int | None = None  # the add-checkpoint status of a submission (200, 409, 422, ...)
    tiles: int = 0  # tiles fetched
    proof: int = 0  # proof hashes submitted

    def line(self) -> str:
        """The human line ``tlog-witness feed`` prints."""
        return f"{self.outcome} {json.dumps(self.origin, ensure_ascii=False)}: {self.message}\n"

    def json_line(self) -> str:
        """The JSON line ``tlog-witness feed --json`` prints."""
        return json.dumps(asdict(self), ensure_ascii=False, sort_keys=True) + "\n"


class TilesClient:
    """GETs of the C2SP tlog-tiles resources under ``url`` (ending in ``/``) over an aiohttp
    session (its keep-alive connections), each within ``timeout`` seconds and a byte limit."""

    def __init__(self, session: aiohttp.ClientSession, url: str, timeout: float) -> None:
        self.session = session
        self.url = url
        self.timeout = aiohttp.ClientTimeout(total=timeout)
        self.requests = 0
        self.bytes = 0

    async def get(self, path: str, limit: int) -> bytes:
        """The body of ``<url><path>``: status 200, at most ``limit`` bytes (FetchFailed)."""
        url = self.url + path
        self.requests += 1
        try:
            async with self.session.get(url, timeout=self.timeout) as response:
                if response.status != 200:
                    raise FetchFailed(f"GET {url}: HTTP status {response.status}")
                # read(n) answers with what is buffered (the first TCP segment, say): a
                # body comes whole only by reading to its end, or to one byte past the limit.
                # (gzip is decoded by aiohttp as it streams: the limit is the decoded size's.)
                got = bytearray()
                async for chunk in response.content.iter_chunked(65_536):
                    got += chunk
                    if len(got) > limit:
                        break
                body = bytes(got)
        except (aiohttp.ClientError, OSError) as e:
            raise FetchFailed(f"GET {url}: {type(e).__name__}: {e}") from None
        except TimeoutError:
            raise FetchFailed(f"GET {url}: no answer within {self.timeout.total:g} s") from None
        if len(body) > limit:
            raise FetchFailed(f"GET {url}: the body is larger than {limit} bytes")
        self.bytes += len(body)
        return body

    async def tiles(self, wanted: Sequence[Tile]) -> dict[Tile, bytes]:
        """Every tile of ``wanted``, fetched concurrently (a few at a time)."""
        gate = asyncio.Semaphore(_MAX_CONCURRENT_TILES)

        async def one(tile: Tile) -> bytes:
            async with gate:
                return await self.get(tile.path(), FULL_TILE_SIZE)

        bodies = await asyncio.gather(*(one(t) for t in wanted))
        return dict(zip(wanted, bodies, strict=True))


class _Unusable(Exception):
    """Internal: the served tiles give no usable proof (the message says why)."""


async def _tile_proof(client: TilesClient, old: int, cp: Checkpoint) -> list[bytes]:
    """The consistency proof from ``old`` (0: none) to ``cp``, built from the served tiles;
    :class:`_Unusable` when they cannot be fetched, do not hash to ``cp``'s root, or give a
    proof that does not fold to it (module docstring, step 3)."""
    try:
        wanted = consistency_tiles(old, cp.size)
        # A proof that fails is judged, which from a power of two needs one tile more.
        wanted += [t for t in prefix_tiles(old, cp.size) if t not in wanted]
        tiles = await client.tiles(wanted)
        root, proof = consistency_proof_from_tiles(old, cp.size, tiles.__getitem__)
    except (FetchFailed, MalformedError) as e:
        raise _Unusable(f"size {cp.size}: {e}") from None
    if root != cp.root:
        raise _Unusable(
            f"the served tiles do not hash to the root of the checkpoint of size {cp.size}"
            " (a tile was rewritten or cut): nothing submitted"
        )
    reader = TileHashReader(cp.size, tiles.__getitem__)
    if proof and proven_prefix_from_tiles(old, cp.root, proof, reader) is None:
        # Every proof hash goes into the new root: a proof that does not even fold to it
        # holds a rewritten tile's hash (one the root does not read), and proves nothing.
        raise _Unusable(
            f"the served tiles give no consistency proof from size {old} to the root of"
            f" size {cp.size} (a tile was rewritten): nothing submitted"
        )
    return proof


async def _served_checkpoint(
    cosigning: Cosigning,
    client: TilesClient,
    config: LogConfig,
    result: Callable[..., FeedResult],
) -> tuple[bytes, Checkpoint] | FeedResult:
    """The checkpoint the log of ``config`` serves, as a note and checked by ``cosigning``'s
    rules for that log; or the round's result when it cannot be fetched or is refused."""
    origin = config.origin
    try:
        note = await client.get("checkpoint", MAX_NOTE_SIZE)
    except FetchFailed as e:
        return result("unusable", str(e))
    try:
        served_origin = origin_of(note)
    except MalformedError as e:
        return result("refused", f"the served checkpoint does not parse: {e}", status=400)
    if served_origin != origin:
        return result(
            "refused",
            f"the URL serves the checkpoint of another log ({served_origin[:120]!r})",
            status=404,
        )
    try:
        cp = cosigning.open_checkpoint(note, config).checkpoint
    except TlogError as e:
        return result("refused", f"the served checkpoint: {e}", status=http_status(e))
    return note, cp


async def feed_log(
    cosigning: Cosigning, session: aiohttp.ClientSession, config: LogConfig, *, timeout: float
) -> FeedResult:
    """One round of feeding the log of ``config`` (which has a tiles URL) to the witness
    whose checks and commits are ``cosigning`` (module docstring)."""
    origin = config.origin
    url = config.tiles
    if url is None:
        raise ValueError(f"log {origin} has no tiles URL")
    client = TilesClient(session, url, timeout)

    def result(outcome: str, message: str, **kw: Any) -> FeedResult:
        return FeedResult(origin, url, outcome, message, tiles=max(0, client.requests - 1), **kw)

    served = await _served_checkpoint(cosigning, client, config, result)
    if isinstance(served, FeedResult):
        return served
    note, cp = served
    stored = await asyncio.to_thread(cosigning.state.latest, origin)
    old = 0 if stored is None else stored.size
    facts: dict[str, Any] = {"old": old, "size": cp.size}
    if stored is not None and cp.size < stored.size:
        return result(
            "behind",
            f"the log serves size {cp.size}, behind the cosigned size {stored.size} (a stale"
            " cache, or the log went back): nothing submitted",
            **facts,
        )
    if stored is not None and cp.size == stored.size and cp.root == stored.root:
        return result("unchanged", f"size {cp.size}, cosigned already", **facts)
    proof: list[bytes] = []
    if stored is None or cp.size > stored.size:
        try:
            proof = await _tile_proof(client, old, cp)
        except _Unusable as e:
            return result("unusable", str(e), **facts)
    if len(proof) > MAX_PROOF_LINES:
        # Sizes past 2^62 can need 64 hashes; tlog-witness carries 63 (TW-7): the push path
        # refuses such a request as malformed, and so does the feed, for this log alone.
        return result(
            "refused",
            f"size {cp.size} from {old}: the consistency proof has {len(proof)} hashes, and"
            f" tlog-witness carries at most {MAX_PROOF_LINES}: this step cannot be witnessed",
            status=400,
            proof=len(proof),
            **facts,
        )
    body = AddCheckpointRequest(old, tuple(proof), note).format()
    info: dict[str, Any] = {"endpoint": "feed"}
    try:
        await cosigning.cosign(body, info)
    except ConflictError as e:
        return result(
            "lost",
            f"another submitter moved the log to size {e.known_size} first: next round",
            status=409,
            **facts,
        )
    except TlogError as e:
        return result(
            "refused",
            f"size {cp.size} from {old}: {e}",
            status=http_status(e),
            proof=len(proof),
            **facts,
        )
    how = (
        f"from {old} with {len(proof)} proof hashes"
        if stored is not None
        else "its first checkpoint"
    )
    return result("cosigned", f"size {cp.size} ({how})", status=200, proof=len(proof), **facts)


async def feed_round(
    cosigning: Cosigning,
    session: aiohttp.ClientSession,
    *,
    origins: Sequence[str] = (),
    timeout: float = DEFAULT_FEED_TIMEOUT,
    report: Callable[[FeedResult], None] | None = None,
) -> list[FeedResult]:
    """Feed every enabled log with a tiles URL (only ``origins``, when given) once; the
    results in origin order, each also handed to ``report`` as it is known."""
    configs = await asyncio.to_thread(cosigning.state.logs)
    fed = [
        c
        for c in configs
        if c.tiles is not None and not c.disabled and (not origins or c.origin in origins)
    ]
    gate = asyncio.Semaphore(MAX_CONCURRENT_LOGS)

    async def one(config: LogConfig) -> FeedResult:
        async with gate:
            r = await feed_log(cosigning, session, config, timeout=timeout)
        if report is not None:
            report(r)
        return r

    return list(await asyncio.gather(*(one(c) for c in fed)))


_EXIT_FOR = {"refused": 1, "unusable": 4}


def round_status(results: Sequence[FeedResult]) -> int:
    """``feed --once``'s exit status: 1 if a log was refused (a fork, a bad signature: a
    verification failure), else 4 if a round was unusable (a fetch failed), else 0."""
    codes = {_EXIT_FOR.get(r.outcome, 0) for r in results}
    return 1 if 1 in codes else max(codes, default=0)


async def run_feed(
    cosigning: Cosigning,
    *,
    once: bool,
    interval: float = DEFAULT_FEED_INTERVAL,
    timeout: float = DEFAULT_FEED_TIMEOUT,
    origins: Sequence[str] = (),
    report: Callable[[FeedResult], None] | None = None,
    stop: asyncio.Event | None = None,
) -> int:
    """Feed rounds every ``interval`` seconds until ``stop`` is set (or one round, ``once``);
    the :func:`round_status` of the last round. One aiohttp session (keep-alive connections
    to each log's server) serves every round."""
    stop = stop or asyncio.Event()
    connector = aiohttp.TCPConnector(limit=64, limit_per_host=_MAX_CONCURRENT_TILES)
    headers = {"User-Agent": "tlog-witness feed"}
    async with aiohttp.ClientSession(connector=connector, headers=headers) as session:
        while True:
            results = await feed_round(
                cosigning, session, origins=origins, timeout=timeout, report=report
            )
            if once or stop.is_set():
                return round_status(results)
            try:
                await asyncio.wait_for(stop.wait(), interval)
            except TimeoutError:
                continue
            return round_status(results)
