"""The C2SP tlog-witness HTTP server (aiohttp): add-checkpoint, sign-subtree, monitoring.

Endpoints (``<sub>`` and ``<mon>`` are the submission and monitoring prefixes, ``""`` or a path
such as ``/witness`` without a trailing slash):

==================================================  ======  =====================================
path                                                 method  what
==================================================  ======  =====================================
``<sub>/add-checkpoint``                             POST    cosign a checkpoint (tlog-witness)
``<sub>/sign-subtree``                               POST    ML-DSA-44 subtree/v1 signature over a
                                                             subtree; only when an ML-DSA signer
                                                             is configured (404 otherwise)
``<mon>/<lowercase hex SHA-256(origin)>/checkpoint``  GET     the latest cosigned note of a log
``/``                                                GET     a small HTML status page
``/metrics``                                         GET     Prometheus text format
==================================================  ======  =====================================

Other methods on these paths get 405 with ``Allow``; other paths 404. Error statuses come from
the one mapping in :mod:`witness.errors`.

**add-checkpoint**, in this order (tlog-witness; the order of specs.md §5.4):

1. POST; the body is read with a cap (``max_body``, 413) and a deadline (``read_timeout``,
   408). The default cap, :data:`tlog.witnessproto.MAX_REQUEST_SIZE`, fits a maximal note
   (1 MiB: 100 ML-DSA-44 signature lines) plus 63 proof lines.
2. :meth:`AddCheckpointRequest.parse <tlog.witnessproto.AddCheckpointRequest.parse>` (400).
3. The origin, the note's first line, selects the log's configuration: not configured, or
   disabled, 404 (the body tells the two apart).
4. The note is opened with the log's trusted keys: no trusted signature, or a trusted (name,
   key ID) line that fails, 403; a malformed note or checkpoint text, 400. A signature line
   whose base64 does not even parse (non-canonical trailing bits, say) makes the *note*
   malformed: 400, before any key is tried. A size-0 checkpoint without the empty-tree root:
   422.
5. ``old`` > size, 400; ``old 0`` with proof lines, 422.
6. The log's requests-per-day quota (``qpd``), counted per UTC day among authenticated
   requests only: over it, 429 with ``Retry-After`` = seconds to the next UTC midnight.
7. Under the origin's :class:`asyncio.Lock` (one per origin, in this process): the stored
   checkpoint is read (in a thread: storage may fsync, never on the event loop); ``old`` not
   the stored size (0 when none): 409, body ``N`` LF, ``Content-Type: text/x.tlog.size``
   exactly; then ``old`` = size needs an empty proof and the stored root, any other update an
   RFC 6962 consistency proof: 422.
8. The new stored note is the checkpoint text, the log's **verified** signature lines only
   (unknown lines are dropped, so a forged line can never reach the monitoring endpoint) and
   this witness's fresh cosignatures, one per signer, all with one timestamp: ``max(now,
   latest timestamp of this witness's cosignatures on the stored note)`` — never zero, and
   never going backwards for an origin even if the clock does.
9. :meth:`WitnessState.compare_and_swap <witness.state.WitnessState.compare_and_swap>` from
   the checkpoint read in step 7 (in a thread). If it returns False, another process moved
   the log first: the cosignatures are discarded, the state re-read and the answer is 409
   with the stored size. Only after True does the witness answer 200 with its cosignature
   lines; nothing is ever returned that was not committed.

Re-submitting the stored checkpoint (``old`` = size = stored size, same root, no proof) gets a
fresh 200 and the stored note is replaced, through the same compare-and-swap, with one
carrying the new cosignatures (and the resubmitted text's extension lines, if they differ).

**Evidence.** A validly signed checkpoint that contradicts the stored one — same size and a
different root, or a consistency proof from the stored tree that fails — is kept with
:meth:`WitnessState.add_evidence` (in a thread) and answered 422; it is never cosigned. A 409
is the normal resynchronisation path and is not evidence, except when the checkpoint has the
stored size and another root, which alone proves a fork. Failing to store evidence is logged;
the client still gets its 422.

**sign-subtree** (tlog-witness, optional). Body, every line ending in LF::

    "subtree " <start> " " <end>          canonical decimals
    <base64 subtree hash>
    <base64 hash>                         0..63 subtree-consistency-proof lines
    <empty line>
    <reference checkpoint: a signed note carrying this witness's cosignature>

``[start, end)`` must be a valid subtree of draft-ietf-plants-merkle-tree-certs-03 §4.1
(``0 <= start < end`` and ``start`` a multiple of the smallest power of two >= ``end - start``;
the empty subtree is refused, unlike transparency-dev/merkle) with ``end`` <= the checkpoint
size, else 400; unknown or disabled origin, 404; no valid cosignature from one of this
witness's own keys, 403 (stateless: the witness trusts its own signature); the subtree
consistency proof (draft-03 §4.4.3, :func:`verify_subtree_consistency`) fails, 422. Success:
200 with one ML-DSA-44 subtree/v1 line per ML-DSA signer, timestamp 0. The request's origin
must fit the subtree/v1 struct (at most 255 bytes), else 400.

**Monitoring.** ``GET <mon>/<hash>/checkpoint`` serves the stored note (log signatures and this
witness's cosignatures) as ``text/plain; charset=utf-8``; an origin never cosigned, an unknown
hash, uppercase hex or a percent-encoded origin (the pre-2026-07-01 draft) is 404. The hash to
origin map is cached and refreshed on a miss at most every ``config_ttl`` seconds.

**Logs and metrics.** Each request logs one JSON object on the ``witness.server`` logger
(endpoint, method, status, duration in ms, and when known origin, old, size, start, end,
error); unexpected exceptions log their traceback and answer 500 with a generic body. A client
that disconnects before the answer is logged and counted with status 499.

**Origins and ML-DSA.** The subtree/v1 struct names origins of at most 255 bytes. A configured
log with a longer origin gets only the witness's Ed25519 cosignature; a witness with only an
ML-DSA key cannot cosign it at all and answers 500 (a configuration error, logged).
``/metrics`` counts requests by endpoint and status, with a latency histogram per endpoint, the
number of configured and cosigned logs, cosignatures issued and evidence kept.
"""

from __future__ import annotations

import asyncio
import functools
import html
import json
import logging
import math
import time
import traceback
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol, TypeVar

import aiohttp
from aiohttp import web

from tlog.checkpoint import open_checkpoint, origin_of
from tlog.cosignature import (
    TYPE_COSIGNATURE_V1,
    TYPE_SUBTREE_V1,
    Subtree,
    SubtreeV1Signer,
    timestamp_of,
)
from tlog.errors import MalformedError, ProofError, UsageError, VerificationError
from tlog.keys import format_vkey, parse_vkey, verifier_for
from tlog.merkle import verify_subtree_consistency
from tlog.note import Signature, Verifier, check_key_name, format_note, parse_note
from tlog.witnessproto import (
    MAX_REQUEST_SIZE,
    AddCheckpointRequest,
    ConflictError,
    SignSubtreeRequest,
    check_request,
    check_update,
    format_cosignature_response,
    origin_hash,
)
from witness.errors import (
    TEXT_CONTENT_TYPE,
    QuotaExceededError,
    RequestTimeoutError,
    RequestTooLargeError,
    StateFailureError,
    UnknownLogError,
    reply_for,
)
from witness.state import Cosigned, LogConfig, WitnessState

__all__ = [
    "Cosigner",
    "make_app",
]

LOGGER_NAME = "witness.server"
DEFAULT_READ_TIMEOUT = 10.0
"""Seconds a client has to deliver the whole request body."""

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
"""Upper bounds (seconds) of the request latency histogram."""

_DAY = 86400
_MAX_SUBTREE_ORIGIN = 255  # bytes: the subtree/v1 struct's length prefix is one byte


# --- the server ------------------------------------------------------------------------------


class Cosigner(Protocol):
    """A witness cosignature key: :class:`~tlog.cosignature.CosignatureV1Signer` (0x04) or
    :class:`~tlog.cosignature.SubtreeV1Signer` (0x06)."""

    @property
    def name(self) -> str: ...

    @property
    def key_id(self) -> int: ...

    @property
    def key_type(self) -> int: ...

    @property
    def public_key(self) -> bytes: ...

    def sign_at(self, text: bytes, timestamp: int) -> bytes: ...


Clock = Callable[[], float]
_T = TypeVar("_T")
_Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

_INFO = web.RequestKey("witness_info", dict)


class _Metrics:
    """Prometheus counters and histograms, kept in memory, written by hand (text format 0.0.4)."""

    def __init__(self) -> None:
        self.requests: dict[tuple[str, int], int] = {}
        self.buckets: dict[str, list[int]] = {}
        self.sums: dict[str, float] = {}
        self.counts: dict[str, int] = {}
        self.cosignatures = 0
        self.evidence = 0

    def observe(self, endpoint: str, status: int, seconds: float) -> None:
        key = (endpoint, status)
        self.requests[key] = self.requests.get(key, 0) + 1
        buckets = self.buckets.setdefault(endpoint, [0] * len(LATENCY_BUCKETS))
        for i, bound in enumerate(LATENCY_BUCKETS):
            if seconds <= bound:
                buckets[i] += 1
        self.sums[endpoint] = self.sums.get(endpoint, 0.0) + seconds
        self.counts[endpoint] = self.counts.get(endpoint, 0) + 1

    def render(self, logs: list[LogConfig], cosigned: int) -> str:
        out = [
            "# HELP witness_http_requests_total HTTP requests by endpoint and status code.",
            "# TYPE witness_http_requests_total counter",
        ]
        for (endpoint, status), n in sorted(self.requests.items()):
            out.append(f'witness_http_requests_total{{endpoint="{endpoint}",code="{status}"}} {n}')
        out += [
            "# HELP witness_http_request_duration_seconds Request latency by endpoint.",
            "# TYPE witness_http_request_duration_seconds histogram",
        ]
        for endpoint in sorted(self.counts):
            for bound, n in zip(LATENCY_BUCKETS, self.buckets[endpoint], strict=True):
                out.append(
                    f'witness_http_request_duration_seconds_bucket{{endpoint="{endpoint}",'
                    f'le="{bound:g}"}} {n}'
                )
            total = self.counts[endpoint]
            out.append(
                f'witness_http_request_duration_seconds_bucket{{endpoint="{endpoint}",'
                f'le="+Inf"}} {total}'
            )
            out.append(
                f'witness_http_request_duration_seconds_sum{{endpoint="{endpoint}"}} '
                f"{self.sums[endpoint]:.6f}"
            )
            out.append(
                f'witness_http_request_duration_seconds_count{{endpoint="{endpoint}"}} {total}'
            )
        disabled = sum(1 for c in logs if c.disabled)
        out += [
            "# HELP witness_logs Configured logs.",
            "# TYPE witness_logs gauge",
            f'witness_logs{{state="enabled"}} {len(logs) - disabled}',
            f'witness_logs{{state="disabled"}} {disabled}',
            "# HELP witness_logs_cosigned Logs with a cosigned checkpoint.",
            "# TYPE witness_logs_cosigned gauge",
            f"witness_logs_cosigned {cosigned}",
            "# HELP witness_cosignatures_total Cosignature lines issued by add-checkpoint.",
            "# TYPE witness_cosignatures_total counter",
            f"witness_cosignatures_total {self.cosignatures}",
            "# HELP witness_evidence_total Conflicting, validly signed checkpoints kept.",
            "# TYPE witness_evidence_total counter",
            f"witness_evidence_total {self.evidence}",
        ]
        return "\n".join(out) + "\n"


@functools.lru_cache(maxsize=4096)
def _log_verifiers(keys: tuple[str, ...]) -> tuple[Verifier, ...]:
    """Parse a log's configured vkeys once; a key that does not parse is logged and skipped
    (it is the operator's mistake, not the client's: requests then get 403, not 400)."""
    out: dict[tuple[str, int, bytes], Verifier] = {}
    for vkey in keys:
        try:
            v = parse_vkey(vkey)
        except MalformedError as e:
            logging.getLogger(LOGGER_NAME).error(
                json.dumps({"event": "bad-configured-key", "vkey": vkey[:120], "error": str(e)})
            )
            continue
        # One key configured twice must not make open_note see an ambiguous (name, ID).
        out.setdefault((v.name, v.key_id, v.public_key), v)
    return tuple(out.values())


class _Witness:
    """The request handlers and the per-process state around a :class:`WitnessState`."""

    def __init__(
        self,
        state: WitnessState,
        signers: Sequence[Cosigner],
        *,
        name: str,
        submission_prefix: str,
        monitoring_prefix: str,
        max_body: int,
        read_timeout: float,
        clock: Clock,
        config_ttl: float,
        logger: logging.Logger,
    ) -> None:
        self.state = state
        self.signers = tuple(signers)
        self.name = name
        self.sub = submission_prefix
        self.mon = monitoring_prefix
        self.max_body = max_body
        self.read_timeout = read_timeout
        self.clock = clock
        self.config_ttl = config_ttl
        self.logger = logger
        self.own_keys = {(s.name, s.key_id) for s in self.signers}
        self.own_verifiers = tuple(
            verifier_for(s.name, s.key_type, s.public_key) for s in self.signers
        )
        self.subtree_signers = tuple(s for s in self.signers if isinstance(s, SubtreeV1Signer))
        self.locks: dict[str, asyncio.Lock] = {}
        self.origins: dict[str, str] = {}  # origin hash -> origin (monitoring)
        self.origins_loaded = -math.inf
        self.metrics = _Metrics()

    # --- plumbing ------------------------------------------------------------------------

    def endpoint_of(self, path: str) -> str:
        if path == self.sub + "/add-checkpoint":
            return "add-checkpoint"
        if path == self.sub + "/sign-subtree":
            return "sign-subtree"
        if path == "/":
            return "status"
        if path == "/metrics":
            return "metrics"
        if path.startswith(self.mon + "/") and path.endswith("/checkpoint"):
            return "monitoring"
        return "other"

    @web.middleware
    async def middleware(self, request: web.Request, handler: _Handler) -> web.StreamResponse:
        started = time.perf_counter()
        endpoint = self.endpoint_of(request.path)
        info: dict[str, Any] = {"endpoint": endpoint, "method": request.method}
        request[_INFO] = info
        status = 500
        try:
            response = await handler(request)
            status = response.status
            return response
        except web.HTTPException as e:
            # The router's own 404 and 405 (with Allow).
            status = e.status
            raise
        except asyncio.CancelledError:
            # aiohttp cancels the handler when the client goes away. A compare-and-swap already
            # running in its thread still completes (or not) atomically; no response is sent.
            status = 499  # nginx's "client closed request", for the log and the metrics
            info["error"] = "client disconnected"
            raise
        except Exception as e:  # the one place every error becomes a response
            reply = reply_for(e)
            status = reply.status
            if status == 500:
                info["error"] = type(e).__name__
                self.logger.error(
                    json.dumps({"event": "internal-error", "endpoint": endpoint})
                    + "\n"
                    + traceback.format_exc()
                )
            else:
                info["error"] = str(e)[:200]
            return web.Response(status=reply.status, body=reply.body, headers=reply.headers)
        finally:
            seconds = time.perf_counter() - started
            self.metrics.observe(endpoint, status, seconds)
            info["status"] = status
            info["duration_ms"] = round(seconds * 1000, 3)
            self.logger.info(json.dumps(info, sort_keys=True))

    async def read_body(self, request: web.Request) -> bytes:
        """The request body, within the size cap (413) and the read deadline (408)."""
        declared = request.content_length
        if declared is not None and declared > self.max_body:
            raise RequestTooLargeError(self.max_body)
        chunks: list[bytes] = []
        total = 0
        try:
            async with asyncio.timeout(self.read_timeout):
                while chunk := await request.content.readany():
                    total += len(chunk)
                    if total > self.max_body:
                        raise RequestTooLargeError(self.max_body)
                    chunks.append(chunk)
        except TimeoutError:
            raise RequestTimeoutError(self.read_timeout) from None
        except (web.RequestPayloadError, aiohttp.http_exceptions.PayloadEncodingError):
            # aiohttp decodes a Content-Encoding itself; a body that does not decode (or a
            # broken chunked framing) is the client's mistake, not an internal error.
            raise MalformedError("the request body does not decode (Content-Encoding)") from None
        except ConnectionResetError:
            # The client went away mid-body: nothing to answer; logged as 499 like a cancel.
            raise asyncio.CancelledError from None
        return b"".join(chunks)

    async def call(self, fn: Callable[..., _T], *args: Any) -> _T:
        """Run a state method in a thread: storage may block and fsync, never on the loop.

        Whatever the state raises is the server's problem (500), even a MalformedError: the
        state never judges the client's data, the server checked it before.
        """
        try:
            return await asyncio.to_thread(fn, *args)
        except (MalformedError, VerificationError) as e:
            raise StateFailureError(f"{type(e).__name__} from the state: {e}") from e

    async def log_config(self, origin: str) -> LogConfig:
        """The configuration of an enabled log (404 otherwise)."""
        config = await self.call(self.state.log, origin)
        if config is None:
            raise UnknownLogError(origin)
        self.origins[origin_hash(origin)] = origin
        if config.disabled:
            raise UnknownLogError(origin, disabled=True)
        return config

    async def check_quota(self, config: LogConfig) -> None:
        if config.qpd is None:
            return
        now = self.clock()
        day = int(now // _DAY)
        count = await self.call(self.state.count_request, config.origin, day)
        if count > config.qpd:
            retry_after = math.ceil((day + 1) * _DAY - now)
            raise QuotaExceededError(config.origin, config.qpd, retry_after)

    def cosign_timestamp(self, stored: Cosigned | None) -> int:
        """``max(now, the latest timestamp of our cosignatures on the stored note)``, > 0."""
        floor = 0
        if stored is not None:
            try:
                _, sigs = parse_note(stored.note)
            except MalformedError:
                # The stored note is ours and always parses; if it ever does not, the clock
                # alone decides, and the operator hears about it.
                self.logger.error(json.dumps({"event": "stored-note-unparsable"}))
                sigs = []
            for sig in sigs:
                if (sig.name, sig.key_id) in self.own_keys:
                    try:
                        floor = max(floor, timestamp_of(sig))
                    except MalformedError:
                        continue
        ts = max(int(self.clock()), floor)
        if ts <= 0:
            raise UsageError("the clock reads a time at or before 1970: refusing to cosign")
        return ts

    async def record_evidence(
        self, origin: str, reason: str, body: bytes, stored: Cosigned | None
    ) -> None:
        at = int(self.clock())
        stored_note = None if stored is None else stored.note
        try:
            evidence_id = await asyncio.to_thread(
                self.state.add_evidence, origin, reason, body, stored_note, at
            )
        except Exception:
            self.logger.exception(json.dumps({"event": "evidence-not-stored", "origin": origin}))
            return
        self.metrics.evidence += 1
        self.logger.warning(
            json.dumps(
                {"event": "inconsistent-checkpoint", "origin": origin, "evidence": evidence_id}
            )
        )

    # --- handlers ------------------------------------------------------------------------

    async def add_checkpoint(self, request: web.Request) -> web.Response:
        info = request[_INFO]
        body = await self.read_body(request)
        req = AddCheckpointRequest.parse(body)
        info["old"] = req.old
        origin = origin_of(req.checkpoint)
        info["origin"] = origin
        config = await self.log_config(origin)
        signed = open_checkpoint(req.checkpoint, _log_verifiers(config.keys))
        cp = signed.checkpoint
        info["size"] = cp.size
        check_request(req, cp)
        signers = [
            s
            for s in self.signers
            if s.key_type != TYPE_SUBTREE_V1 or len(origin.encode("utf-8")) <= _MAX_SUBTREE_ORIGIN
        ]
        if not signers:
            raise UsageError(
                f"no signer of this witness can cosign origin {origin[:80]!r} "
                "(ML-DSA-44 subtree/v1 names origins of at most 255 bytes)"
            )
        await self.check_quota(config)

        lock = self.locks.setdefault(origin, asyncio.Lock())
        async with lock:
            stored = await self.call(self.state.latest, origin)
            stored_size, stored_root = (0, None) if stored is None else (stored.size, stored.root)
            try:
                check_update(stored_size, stored_root, req, cp)
            except ConflictError:
                if stored is not None and cp.size == stored.size and cp.root != stored.root:
                    await self.record_evidence(origin, "same size, different root", body, stored)
                raise
            except ProofError as e:
                await self.record_evidence(origin, f"not consistent: {e}", body, stored)
                raise
            ts = self.cosign_timestamp(stored)
            text = signed.note.text
            cosigs = [Signature(s.name, s.key_id, s.sign_at(text, ts)) for s in signers]
            note = format_note(text, [*signed.note.sigs, *cosigs])
            new = Cosigned(origin, cp.size, cp.root, note, ts)
            swapped = await self.call(self.state.compare_and_swap, stored, new)
            if not swapped:
                # Another process moved this log between our read and our write.
                now_stored = await self.call(self.state.latest, origin)
                info["lost_race"] = True
                raise ConflictError(0 if now_stored is None else now_stored.size)
        self.metrics.cosignatures += len(cosigs)
        return web.Response(
            body=format_cosignature_response(cosigs),
            headers={"Content-Type": TEXT_CONTENT_TYPE},
        )

    async def sign_subtree(self, request: web.Request) -> web.Response:
        info = request[_INFO]
        body = await self.read_body(request)
        req = SignSubtreeRequest.parse(body)
        info["start"], info["end"] = req.start, req.end
        origin = origin_of(req.checkpoint)
        info["origin"] = origin
        await self.log_config(origin)
        if len(origin.encode("utf-8")) > _MAX_SUBTREE_ORIGIN:
            raise MalformedError("a subtree/v1 cosignature names origins of at most 255 bytes")
        # Stateless: the reference checkpoint is trusted through this witness's own signature.
        signed = open_checkpoint(req.checkpoint, self.own_verifiers)
        cp = signed.checkpoint
        info["size"] = cp.size
        if req.end > cp.size:
            raise MalformedError(f"subtree end {req.end} is beyond the checkpoint's size {cp.size}")
        verify_subtree_consistency(req.start, req.end, cp.size, req.proof, req.hash, cp.root)
        subtree = Subtree(origin, req.start, req.end, req.hash)
        sigs = [
            Signature(s.name, s.key_id, s.sign_subtree(subtree, 0)) for s in self.subtree_signers
        ]
        return web.Response(
            body=format_cosignature_response(sigs),
            headers={"Content-Type": TEXT_CONTENT_TYPE},
        )

    async def monitoring(self, request: web.Request) -> web.Response:
        digest = request.match_info["hash"]
        origin = self.origins.get(digest)
        if origin is None and time.monotonic() - self.origins_loaded >= self.config_ttl:
            self.origins_loaded = time.monotonic()
            logs = await self.call(self.state.logs)
            self.origins.update({origin_hash(c.origin): c.origin for c in logs})
            origin = self.origins.get(digest)
        if origin is None:
            raise web.HTTPNotFound(text="unknown log\n")
        request[_INFO]["origin"] = origin
        stored = await self.call(self.state.latest, origin)
        if stored is None:
            raise web.HTTPNotFound(text="this witness never cosigned that log\n")
        request[_INFO]["size"] = stored.size
        return web.Response(body=stored.note, headers={"Content-Type": TEXT_CONTENT_TYPE})

    async def status_page(self, request: web.Request) -> web.Response:
        logs = await self.call(self.state.logs)
        latest = {c.origin: c for c in await self.call(self.state.all_latest)}
        esc = html.escape
        rows = []
        for config in logs:
            c = latest.get(config.origin)
            size = "—" if c is None else str(c.size)
            when = (
                "never"
                if c is None
                else datetime.fromtimestamp(c.updated_at, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
            )
            link = esc(f"{self.mon}/{origin_hash(config.origin)}/checkpoint")
            origin_cell = (
                f'<a href="{link}">{esc(config.origin)}</a>'
                if c is not None
                else esc(config.origin)
            )
            state = "disabled" if config.disabled else "enabled"
            rows.append(
                f"<tr><td>{origin_cell}</td><td>{size}</td><td>{when}</td><td>{state}</td></tr>"
            )
        keys = "".join(f"<li><code>{esc(format_vkey(v))}</code></li>" for v in self.own_verifiers)
        page = (
            '<!DOCTYPE html>\n<html><head><meta charset="utf-8">'
            f"<title>{esc(self.name)}</title></head><body>\n"
            f"<h1>tlog-witness {esc(self.name)}</h1>\n"
            f"<p>Submission prefix <code>{esc(self.sub or '/')}</code>, monitoring prefix "
            f"<code>{esc(self.mon or '/')}</code>.</p>\n"
            f"<h2>Keys</h2><ul>{keys}</ul>\n"
            f"<h2>Logs ({len(logs)})</h2>\n"
            "<table><tr><th>origin</th><th>size</th><th>last update</th><th>state</th></tr>\n"
            + "\n".join(rows)
            + "\n</table></body></html>\n"
        )
        return web.Response(
            body=page.encode("utf-8"), headers={"Content-Type": "text/html; charset=utf-8"}
        )

    async def metrics_page(self, request: web.Request) -> web.Response:
        logs = await self.call(self.state.logs)
        cosigned = len(await self.call(self.state.all_latest))
        text = self.metrics.render(logs, cosigned)
        return web.Response(
            body=text.encode("utf-8"),
            headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"},
        )


def _check_prefix(prefix: str, what: str) -> str:
    if prefix and (not prefix.startswith("/") or prefix.endswith("/") or "//" in prefix):
        raise UsageError(f"{what} {prefix!r} must be empty or '/path' without a trailing slash")
    return prefix


def make_app(
    state: WitnessState,
    signers: Sequence[Cosigner],
    *,
    name: str,
    submission_prefix: str = "",
    monitoring_prefix: str = "",
    max_body: int = MAX_REQUEST_SIZE,
    read_timeout: float = DEFAULT_READ_TIMEOUT,
    clock: Clock = time.time,
    config_ttl: float = 5.0,
    status_endpoints: bool = True,
    logger: logging.Logger | None = None,
) -> web.Application:
    """The witness's aiohttp application (see the module docstring for what it serves).

    ``signers`` are the witness's cosignature keys: a CosignatureV1Signer (0x04) and/or a
    SubtreeV1Signer (0x06, which also enables sign-subtree), all named ``name``. ``clock``
    gives cosignature timestamps, quota days and evidence times; ``config_ttl`` bounds how
    often an unknown monitoring hash reloads the log list; ``status_endpoints=False`` hides
    ``/`` and ``/metrics``; ``logger`` receives the JSON request lines (default: the
    ``witness.server`` logger). The caller owns ``state`` (and closes it).

    Requires: at least one signer, every signer named ``name`` with a distinct key, of type
    0x04 or 0x06; prefixes ``""`` or ``/path`` without a trailing slash; ``max_body`` > 0 and
    ``read_timeout`` > 0. Raises :class:`~tlog.errors.UsageError` otherwise.
    """
    check_key_name(name)
    if not signers:
        raise UsageError("a witness needs at least one cosignature signer")
    seen: set[tuple[str, int]] = set()
    for s in signers:
        if s.name != name:
            raise UsageError(f"signer {s.name!r} is not named after the witness {name!r}")
        if s.key_type not in (TYPE_COSIGNATURE_V1, TYPE_SUBTREE_V1):
            raise UsageError(
                f"signer key type 0x{s.key_type:02x} is not a cosignature type (0x04 or 0x06)"
            )
        if (s.name, s.key_id) in seen:
            raise UsageError(f"two signers share the key {s.name}+{s.key_id:08x}")
        seen.add((s.name, s.key_id))
    if max_body <= 0 or read_timeout <= 0:
        raise UsageError("max_body and read_timeout must be positive")
    sub = _check_prefix(submission_prefix, "submission prefix")
    mon = _check_prefix(monitoring_prefix, "monitoring prefix")
    witness = _Witness(
        state,
        signers,
        name=name,
        submission_prefix=sub,
        monitoring_prefix=mon,
        max_body=max_body,
        read_timeout=read_timeout,
        clock=clock,
        config_ttl=config_ttl,
        logger=logger or logging.getLogger(LOGGER_NAME),
    )
    app = web.Application(middlewares=[witness.middleware], client_max_size=max_body)
    app.router.add_post(f"{sub}/add-checkpoint", witness.add_checkpoint, name="add-checkpoint")
    if witness.subtree_signers:
        app.router.add_post(f"{sub}/sign-subtree", witness.sign_subtree, name="sign-subtree")
    app.router.add_get(
        mon + "/{hash:[0-9a-f]{64}}/checkpoint", witness.monitoring, name="monitoring"
    )
    if status_endpoints:
        app.router.add_get("/", witness.status_page, name="status")
        app.router.add_get("/metrics", witness.metrics_page, name="metrics")
    return app
