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
   disabled, 404 (the body tells the two apart). The configuration is cached per origin for
   ``config_ttl`` seconds (0: read on every request), so ``add-key``, ``disable-log`` and the
   like take effect on a running server within that time.
4. The note is opened with the log's trusted keys: no trusted signature, or a trusted (name,
   key ID) line that fails, 403; a malformed note or checkpoint text, 400. A signature line
   whose base64 does not even parse (non-canonical trailing bits, say) makes the *note*
   malformed: 400, before any key is tried. A size-0 checkpoint without the empty-tree root:
   422. The verdict is a pure function of the note's bytes and the keys, so a note that opened
   is remembered (a bounded cache, notes up to 16 KiB): a client re-submitting its checkpoint
   does not cost a signature verification each time.
5. ``old`` > size, 400; ``old 0`` with proof lines, 422.
6. (Decided under the lock of step 7, once the request is known to move the log on.) The
   log's requests-per-day quota (``qpd``), counted per UTC day among requests that would
   advance the log (a larger size, or its first checkpoint): over it, 429 with
   ``Retry-After`` = seconds to the next UTC midnight. Resends of the stored checkpoint, 409s
   and refusals do not count: anyone can replay the public checkpoint, and must not spend the
   log's quota that way.
7. Under the origin's :class:`asyncio.Lock` (one per origin, in this process), against the
   stored checkpoint: ``old`` not the stored size (0 when none): 409, body ``N`` LF,
   ``Content-Type: text/x.tlog.size`` exactly; then ``old`` = size needs an empty proof and
   the stored root, any other update an RFC 6962 consistency proof: 422. The stored checkpoint
   is read from the state (in a thread: storage may fsync, never on the event loop) once and
   then kept in memory, updated by this process's own writes. It can be behind the database
   only when another process wrote (``--workers``, two servers on one PostgreSQL, an import),
   so a refusal decided on the kept value is decided again on a fresh read before it is
   answered, and an acceptance is checked by the compare-and-swap of step 9.
8. The new stored note is the checkpoint text, the log's **verified** signature lines only
   (unknown lines are dropped, so a forged line can never reach the monitoring endpoint) and
   this witness's fresh cosignatures, one per signer, all with one timestamp: ``max(now,
   latest timestamp of this witness's cosignatures on the stored note)`` — never zero, and
   never going backwards for an origin even if the clock does.
9. :meth:`WitnessState.compare_and_swap <witness.state.WitnessState.compare_and_swap>` from
   the checkpoint of step 7. The swaps of concurrent requests (for different logs: one log's
   requests wait for each other at its lock) are *group-committed*: while one batch commits
   in its thread, the next ones gather, and each batch is one
   :meth:`~witness.state.WitnessState.compare_and_swap_many` — one transaction, one fsync. If
   a swap returns False, another process moved the log first: the cosignatures are discarded,
   the state re-read and the answer is 409 with the stored size. Only after True does the
   witness answer 200 with its cosignature lines; nothing is ever returned that was not
   committed.

Re-submitting the stored checkpoint (``old`` = size = stored size, same root, no proof) gets a
fresh 200. Within the second of this witness's cosignatures on the stored note, the answer is
those cosignatures (for Ed25519, the bytes a new signature would have: the timestamp is the
second, and Ed25519 is deterministic), durable already: no signing, no write. Later, the
stored note is replaced, through the same compare-and-swap, with one carrying new
cosignatures (and the resubmitted text's extension lines, if they differ).

**Evidence.** Only what proves a split view by itself is kept (:meth:`_Witness.keep_if_proven`,
:meth:`WitnessState.add_evidence` in a thread): a checkpoint validly signed by the log that has
the stored size and another root (on the 422 path, or a 409 that carries one), or whose
consistency proof from the stored size folds exactly to its own root from another root at the
stored size (:func:`tlog.merkle.proven_prefix_root`; the reason names that root, so a third
party can check the proof with ``tlog check consistency``). A proof that fails otherwise is the
submitter's error: 422, nothing kept. Each row names what it proves, so a fork resent any number
of times is kept once, and each log's evidence is bounded (count and bytes, see
:mod:`witness.sqlstate`). Failing to store evidence is logged; the client still gets its 422.

**Connections.** Served through :mod:`witness.serving`, every connection passes a
:class:`~witness.connections.ConnectionGuard` (idle, header and request deadlines; caps per
process and per client address); the middleware tells it when a request starts and ends.
Request bodies are read within a byte budget (``max_body_memory``). Origins no log can have
(longer than 512 bytes, control characters) are answered 404 before any lookup or cache, and
every cache is bounded in bytes.

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
error; a client's value such as the origin cut to 512 characters); unexpected exceptions log
their traceback and answer 500 with a generic body. A request aiohttp cannot parse is one line
(endpoint ``http``, status, client) through :class:`_ProtocolLog`, never a traceback; a
connection refused or cut by the guard with an answer is one line (endpoint ``connection``).
A client that disconnects before the answer is logged and counted with status 499 (error ``client
disconnected``); so is a request that the server cuts off when it stops (still running after
``shutdown_timeout``; error ``server stopping``). Neither gets a response.

**Origins and ML-DSA.** The subtree/v1 struct names origins of at most 255 bytes. A configured
log with a longer origin gets only the witness's Ed25519 cosignature; a witness with only an
ML-DSA key cannot cosign it at all and answers 500 (a configuration error, logged).
``/metrics`` counts requests by endpoint and status, with a latency histogram per endpoint, the
number of configured and cosigned logs, cosignatures issued and evidence kept.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
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

from tlog.checkpoint import Checkpoint, SignedCheckpoint, open_checkpoint, origin_of
from tlog.cosignature import (
    TYPE_COSIGNATURE_V1,
    TYPE_SUBTREE_V1,
    Subtree,
    SubtreeV1Signer,
    timestamp_of,
)
from tlog.encoding import b64encode
from tlog.errors import (
    MalformedError,
    ProofError,
    TlogError,
    UnverifiedNoteError,
    UsageError,
    VerificationError,
)
from tlog.keys import format_vkey, parse_vkey, verifier_for
from tlog.merkle import proven_prefix_root, verify_subtree_consistency
from tlog.note import Signature, Verifier, check_key_name, format_note, open_note
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
from witness.config import Limits
from witness.connections import BodyBudget, ConnectionGuard
from witness.errors import (
    TEXT_CONTENT_TYPE,
    QuotaExceededError,
    RequestTimeoutError,
    RequestTooLargeError,
    StateFailureError,
    UnknownLogError,
    reply_for,
)
from witness.sqlstate import MAX_ORIGIN_BYTES, could_be_configured
from witness.state import Cosigned, LogConfig, WitnessState

__all__ = [
    "GUARD_KEY",
    "RUNNER_OPTIONS_KEY",
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
_MAX_BATCH = 256  # compare-and-swaps per group commit
_MAX_SWAPS = 3  # compare-and-swaps one request tries, each lost to another process, before 409
_MAX_CACHED_CONFIGS = 4096  # log configurations remembered (see _Witness.log_config); each
# key is an origin of at most MAX_ORIGIN_BYTES (longer ones are refused before the cache), so
# the cache holds at most about 4096 * (512 + a configuration) bytes
_MAX_OPENED_BYTES = 8 << 20  # verified notes remembered (see _Witness.open_checkpoint)
_MAX_CACHED_NOTE = 16384  # bytes: larger notes are verified every time
_MAX_HEADER_LINE = 8190  # bytes of a request line or header field (aiohttp's default)
_MAX_HEADERS = 64  # header fields of a request
_READ_BUFSIZE = 16384  # body bytes aiohttp buffers per connection before it pauses the socket


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

GUARD_KEY = web.AppKey("witness_guard", ConnectionGuard)
"""The application's :class:`~witness.connections.ConnectionGuard`: a site that serves the
application listens through it (:class:`~witness.connections.GuardedSite`)."""

RUNNER_OPTIONS_KEY = web.AppKey("witness_runner_options", dict)
"""Keyword arguments for the ``web.AppRunner`` that serves the application: aiohttp's own
limits (keep-alive, header sizes, read buffer) and the logger of its protocol errors."""

_LOG_FIELD = MAX_ORIGIN_BYTES  # characters of a client's value (an origin) in a log line


class _Metrics:
    """Prometheus counters and histograms, kept in memory, written by hand (text format 0.0.4)."""

    def __init__(self, worker: int | None = None) -> None:
        self.worker = worker
        self.requests: dict[tuple[str, int], int] = {}
        self.buckets: dict[str, list[int]] = {}
        self.sums: dict[str, float] = {}
        self.counts: dict[str, int] = {}
        self.cosignatures = 0
        self.evidence = 0
        self.evidence_skipped = 0
        self.connections_closed: dict[str, int] = {}

    def observe(self, endpoint: str, status: int, seconds: float) -> None:
        key = (endpoint, status)
        self.requests[key] = self.requests.get(key, 0) + 1
        buckets = self.buckets.setdefault(endpoint, [0] * len(LATENCY_BUCKETS))
        for i, bound in enumerate(LATENCY_BUCKETS):
            if seconds <= bound:
                buckets[i] += 1
        self.sums[endpoint] = self.sums.get(endpoint, 0.0) + seconds
        self.counts[endpoint] = self.counts.get(endpoint, 0) + 1

    def render(
        self, logs: list[LogConfig], cosigned: int, open_connections: int, body_bytes: int
    ) -> str:
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
            "# HELP witness_evidence_total Proven split views kept as evidence.",
            "# TYPE witness_evidence_total counter",
            f"witness_evidence_total {self.evidence}",
            "# HELP witness_evidence_not_kept_total Proven split views not kept: already kept,"
            " or the log's evidence is at its bound.",
            "# TYPE witness_evidence_not_kept_total counter",
            f"witness_evidence_not_kept_total {self.evidence_skipped}",
            "# HELP witness_connections Open client connections.",
            "# TYPE witness_connections gauge",
            f"witness_connections {open_connections}",
            "# HELP witness_connections_closed_total Connections the server closed or refused,"
            " by reason.",
            "# TYPE witness_connections_closed_total counter",
            *(
                f'witness_connections_closed_total{{reason="{reason}"}} {n}'
                for reason, n in sorted(self.connections_closed.items())
            ),
            "# HELP witness_body_bytes_reserved Request body bytes being read now.",
            "# TYPE witness_body_bytes_reserved gauge",
            f"witness_body_bytes_reserved {body_bytes}",
        ]
        if self.worker is not None:
            label = f'worker="{self.worker}"'
            out = [
                line
                if line.startswith("#")
                else line.replace("{", "{" + label + ",", 1)
                if "{" in line
                else line.replace(" ", "{" + label + "} ", 1)
                for line in out
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


class _Latest:
    """A log's stored checkpoint as this process knows it, with this witness's cosignature
    lines on it and their timestamp ``cosig_ts`` (0 when none). ``floor`` is the least
    timestamp a new cosignature may carry: the later of ``cosig_ts`` and the stored state's
    time."""

    __slots__ = ("cosig_ts", "cosigs", "floor", "stored")

    def __init__(
        self, stored: Cosigned | None, cosigs: tuple[Signature, ...], cosig_ts: int
    ) -> None:
        self.stored = stored
        self.cosigs = cosigs
        self.cosig_ts = cosig_ts
        self.floor = max(cosig_ts, 0 if stored is None else stored.updated_at)

    def check(self, req: AddCheckpointRequest, cp: Checkpoint) -> None:
        """:func:`~tlog.witnessproto.check_update` against this state."""
        stored = self.stored
        if stored is None:
            check_update(0, None, req, cp)
        else:
            check_update(stored.size, stored.root, req, cp)


def _from_state(e: Exception) -> Exception:
    """What the server raises for an error of the state: the state never judges the client's
    data (the server checked it before), so even its MalformedError is the server's problem
    (500)."""
    if isinstance(e, MalformedError | VerificationError):
        return StateFailureError(f"{type(e).__name__} from the state: {e}")
    return e


_Swap = tuple[Cosigned | None, Cosigned, "asyncio.Future[bool]"]


class _GroupCommit:
    """Compare-and-swaps of concurrent requests (for different logs: each log's requests are
    serialised by its lock) made durable together: one thread hop and one commit per batch.

    While a batch commits in its thread, newly arriving swaps wait for the next batch, so the
    batch grows with the load and the number of fsyncs per second stays bounded.
    """

    def __init__(self, state: WitnessState) -> None:
        self.state = state
        self.pending: list[_Swap] = []
        self.task: asyncio.Task[None] | None = None

    async def swap(self, expected: Cosigned | None, new: Cosigned) -> bool:
        """:meth:`WitnessState.compare_and_swap`, batched. If the caller is cancelled the swap
        still runs (or not) atomically, like any other."""
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self.pending.append((expected, new, future))
        if self.task is None:
            self.task = asyncio.get_running_loop().create_task(self.flush())
        return await future

    async def flush(self) -> None:
        batch: list[_Swap] = []
        try:
            while self.pending:
                batch, self.pending = self.pending[:_MAX_BATCH], self.pending[_MAX_BATCH:]
                results: list[bool | Exception]
                try:
                    results = await asyncio.to_thread(self.run, [(e, n) for e, n, _ in batch])
                except Exception as e:  # the whole batch failed: every request hears it
                    results = [e] * len(batch)
                for (_, _, future), result in zip(batch, results, strict=True):
                    if future.done():
                        continue  # its request was cancelled
                    if isinstance(result, Exception):
                        future.set_exception(_from_state(result))
                    else:
                        future.set_result(result)
                batch = []
        finally:
            self.task = None
            # Cancelled (the server is stopping) or failed here: no request waits forever.
            for _, _, future in [*batch, *self.pending]:
                if not future.done():
                    future.set_exception(StateFailureError("the group commit stopped"))
            self.pending = []

    def run(self, swaps: list[tuple[Cosigned | None, Cosigned]]) -> list[bool | Exception]:
        """In a thread: the batch in one transaction, in origin order. A batch refused for one
        bad swap (a UsageError: a precondition) is retried swap by swap, so only that one
        fails.

        Origin order (stable: two swaps of one origin keep theirs) because every process takes
        its rows' locks in it: two batches of two processes on one PostgreSQL that touch the
        same logs then queue instead of deadlocking (which PostgreSQL breaks only after
        ``deadlock_timeout``, a second)."""
        order = sorted(range(len(swaps)), key=lambda i: swaps[i][1].origin)
        try:
            verdicts = list(self.state.compare_and_swap_many([swaps[i] for i in order]))
            if len(verdicts) != len(swaps):
                raise StateFailureError(
                    f"the state gave {len(verdicts)} verdicts for {len(swaps)} swaps"
                )
            out_of_order: list[bool | Exception] = [False] * len(swaps)
            for position, i in enumerate(order):
                out_of_order[i] = verdicts[position]
            return out_of_order
        except UsageError:
            if len(swaps) == 1:
                raise
        out: list[bool | Exception] = []
        for expected, new in swaps:
            try:
                out.append(self.state.compare_and_swap(expected, new))
            except Exception as e:
                out.append(e)
        return out


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
        limits: Limits,
        worker: int | None = None,
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
        self.own_verifiers = tuple(
            verifier_for(s.name, s.key_type, s.public_key) for s in self.signers
        )
        self.subtree_signers = tuple(s for s in self.signers if isinstance(s, SubtreeV1Signer))
        self.locks: dict[str, asyncio.Lock] = {}
        self.configs: dict[str, tuple[LogConfig | None, float]] = {}  # origin -> (config, read at)
        self.latest: dict[str, _Latest] = {}  # origin -> what this process last saw stored
        self.opened: dict[tuple[bytes, tuple[str, ...]], SignedCheckpoint] = {}
        self.opened_bytes = 0  # note bytes held by self.opened (bounded: _MAX_OPENED_BYTES)
        self.commits = _GroupCommit(state)
        self.origins: dict[str, str] = {}  # origin hash -> origin (monitoring)
        self.origins_loaded = -math.inf
        self.origins_reload: asyncio.Future[None] | None = None  # a reload in flight
        self.metrics = _Metrics(worker)
        self.guard = ConnectionGuard(limits, self.connection_closed)
        self.bodies = BodyBudget(limits.max_body_memory)
        self.stopping = False  # set when the application shuts down (make_app's on_shutdown)

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
        conn = self.guard.connection_of(request)
        if conn is not None:
            conn.request_started()
        try:
            response = await handler(request)
            status = response.status
            return response
        except web.HTTPException as e:
            # The router's own 404 and 405 (with Allow).
            status = e.status
            raise
        except asyncio.CancelledError:
            # aiohttp cancels the handler when the client goes away, and when the server stops
            # with the handler still running after shutdown_timeout: then the client is not to
            # blame. A compare-and-swap already running in its thread still completes (or not)
            # atomically; no response is sent.
            status = 499  # nginx's "client closed request", for the log and the metrics
            if conn is not None and conn.closing_reason == "request_deadline":
                info["error"] = (
                    f"request not done within {self.guard.limits.request_timeout:g} seconds"
                )
            else:
                info["error"] = "server stopping" if self.stopping else "client disconnected"
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
            if conn is not None:
                conn.request_done(request.content.is_eof())
            seconds = time.perf_counter() - started
            self.metrics.observe(endpoint, status, seconds)
            info["status"] = status
            info["duration_ms"] = round(seconds * 1000, 3)
            self.logger.info(json.dumps(info))

    def connection_closed(
        self, reason: str, status: int | None, client: str, seconds: float
    ) -> None:
        """The guard closed or refused a connection: counted; logged when it answered."""
        self.metrics.connections_closed[reason] = self.metrics.connections_closed.get(reason, 0) + 1
        if status is None:
            return
        self.metrics.observe("connection", status, 0.0)
        self.logger.info(
            json.dumps(
                {
                    "endpoint": "connection",
                    "status": status,
                    "error": reason.replace("_", " "),
                    "client": client,
                    "duration_ms": round(seconds * 1000, 3),
                }
            )
        )

    def protocol_error(self, status: int, error: str, client: str) -> None:
        """aiohttp refused a request it could not parse (malformed HTTP): one line, one count."""
        self.metrics.observe("http", status, 0.0)
        self.logger.info(
            json.dumps({"endpoint": "http", "status": status, "error": error, "client": client})
        )

    async def expect(self, request: web.Request) -> None:
        """The ``Expect`` header, before the handler (aiohttp calls it outside the middleware).

        ``100-continue`` gets its interim 100 only when the declared body is one the witness
        will read: a larger one gets its 413 at once instead (RFC 9110 §10.1.1 lets a server
        answer with the final status), without the client sending it. Any other expectation is
        ignored, as RFC 9110 allows, rather than answered 417 outside the request log: the
        handler then answers the request as it is."""
        declared = request.content_length
        if declared is not None and declared > self.max_body:
            return
        expect = request.headers.get("Expect", "")
        if request.version == aiohttp.HttpVersion11 and expect.lower() == "100-continue":
            await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            request.writer.output_size = 0  # the interim response is not the answer

    async def read_body(self, request: web.Request) -> bytes:
        """The request body, within the size cap (413) and the read deadline (408)."""
        declared = request.content_length
        if declared is not None and declared > self.max_body:
            raise RequestTooLargeError(self.max_body)
        content = request.content
        chunks: list[bytes] = []
        total = 0
        reserved = 0
        try:
            if content.is_eof():
                # The whole body came with the headers (the usual case): no deadline to keep,
                # and it is in memory already.
                body = content.read_nowait()
                if len(body) > self.max_body:
                    raise RequestTooLargeError(self.max_body)
                return body
            async with asyncio.timeout(self.read_timeout):
                # Each chunk is reserved before it is kept: the bodies held at once stay
                # within max_body_memory, and a client holds budget only for bytes it sent.
                # Waiting counts in the deadline.
                while chunk := await content.readany():
                    total += len(chunk)
                    if total > self.max_body:
                        raise RequestTooLargeError(self.max_body)
                    reserved += await self.bodies.reserve(len(chunk))
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
        finally:
            if reserved:
                self.bodies.release(reserved)
        return b"".join(chunks)

    async def call(self, fn: Callable[..., _T], *args: Any) -> _T:
        """Run a state method in a thread: storage may block and fsync, never on the loop.

        Whatever the state raises is the server's problem (500), even a MalformedError: the
        state never judges the client's data, the server checked it before.
        """
        try:
            return await asyncio.to_thread(fn, *args)
        except (MalformedError, VerificationError) as e:
            raise _from_state(e) from e

    async def log_config(self, origin: str) -> LogConfig:
        """The configuration of an enabled log (404 otherwise), read at most every
        ``config_ttl`` seconds per origin: ``add-key``, ``disable-log`` and the like, run by
        the operator while the server runs, take effect within that time."""
        if not could_be_configured(origin):
            # Longer than any configurable origin, or with a control character: no log can
            # have it, so no lookup and no cache entry (a 1 MB origin must cost nothing kept).
            raise UnknownLogError(origin)
        now = time.monotonic()
        cached = self.configs.get(origin)
        if cached is not None and now - cached[1] < self.config_ttl:
            config = cached[0]
        else:
            config = await self.call(self.state.log, origin)
            if len(self.configs) >= _MAX_CACHED_CONFIGS:
                self.configs.clear()  # unknown origins from a hostile client: start over
            self.configs[origin] = (config, now)
            if config is not None:
                self.origins[origin_hash(origin)] = origin
        if config is None:
            raise UnknownLogError(origin)
        if config.disabled:
            raise UnknownLogError(origin, disabled=True)
        return config

    def open_checkpoint(self, note: bytes, config: LogConfig) -> SignedCheckpoint:
        """:func:`~tlog.checkpoint.open_checkpoint` with the log's keys, remembered for the
        exact note bytes and key set: the verdict is a pure function of the two, and a client
        re-submitting its checkpoint should not cost a signature verification each time."""
        key = (note, config.keys)
        signed = self.opened.get(key)
        if signed is None:
            signed = open_checkpoint(note, _log_verifiers(config.keys))
            if len(note) <= _MAX_CACHED_NOTE:
                if self.opened_bytes + len(note) > _MAX_OPENED_BYTES:
                    self.opened.clear()
                    self.opened_bytes = 0
                self.opened[key] = signed
                # The note is held twice (the key and the parsed checkpoint's note).
                self.opened_bytes += 2 * len(note)
        return signed

    async def stored(self, origin: str, *, fresh: bool = False) -> tuple[_Latest, bool]:
        """The stored checkpoint of a log as this process last saw it, and whether that was
        read just now; ``fresh`` re-reads it.

        Caller holds the origin's lock. The kept value may be behind the database only when
        another process wrote it (workers, two servers on one state, an import): every decision
        taken from it that writes is checked again by the compare-and-swap, and every refusal
        is taken again on a fresh read (:meth:`accepting`).
        """
        entry = None if fresh else self.latest.get(origin)
        if entry is not None:
            return entry, False
        return self.remember(origin, await self.call(self.state.latest, origin)), True

    def remember(self, origin: str, stored: Cosigned | None) -> _Latest:
        """Keep ``stored`` (None: nothing stored) as ``origin``'s state, with this witness's
        own cosignature lines on it — verified: an imported note may carry lines in this
        witness's name that it never signed — and their latest timestamp."""
        cosigs: tuple[Signature, ...] = ()
        cosig_ts = 0
        if stored is not None:
            try:
                cosigs = open_note(stored.note, self.own_verifiers).sigs
            except UnverifiedNoteError:
                pass  # no line of ours (an imported checkpoint): the clock decides
            except TlogError as e:
                # A line in our name that does not verify, or a note that does not parse: none
                # of it is ours to repeat or to take a time from. The operator hears about it.
                self.logger.error(
                    json.dumps({"event": "stored-note-not-ours", "origin": origin, "error": str(e)})
                )
            for sig in cosigs:
                with contextlib.suppress(MalformedError):
                    cosig_ts = max(cosig_ts, timestamp_of(sig))
        entry = _Latest(stored, cosigs, cosig_ts)
        self.latest[origin] = entry
        return entry

    async def accepting(
        self, kept: tuple[_Latest, bool], req: AddCheckpointRequest, cp: Checkpoint, body: bytes
    ) -> _Latest:
        """The log's state (``kept``: as known, and whether just read), or a fresh read of it,
        if the request may update it; else the 409 or 422 (with evidence when the checkpoint
        contradicts the stored one), always decided on a fresh read. Caller holds the
        origin's lock."""
        entry, fresh = kept
        if not fresh:
            try:
                entry.check(req, cp)
                return entry
            except (ConflictError, ProofError):
                entry, _ = await self.stored(cp.origin, fresh=True)
        try:
            entry.check(req, cp)
        except (ConflictError, ProofError):
            if entry.stored is not None:
                await self.keep_if_proven(entry.stored, req, cp, body)
            raise
        return entry

    async def keep_if_proven(
        self, stored: Cosigned, req: AddCheckpointRequest, cp: Checkpoint, body: bytes
    ) -> None:
        """Keep the request as evidence when, with the stored note, it proves a split view by
        itself; anything else refused (a junk or wrong-length proof, a stale client) is the
        submitter's error and leaves no trace but its log line.

        Both notes carry valid signatures of the log's trusted keys (the request's was just
        opened with them; the stored one was, when it was accepted). Then either they name
        one size with two roots, or the request's consistency proof folds exactly to its own
        root from another root at the stored size (:func:`tlog.merkle.proven_prefix_root`).
        ``proves`` names that fork, so resending it (in either order, to any worker) adds
        nothing."""
        if cp.size == stored.size and cp.root != stored.root:
            low, high = sorted((cp.root, stored.root))
            reason = f"two different roots for size {cp.size}"
            proves = hashlib.sha256(b"same size\n%d\n" % cp.size + low + high).digest()
        elif (
            req.old == stored.size < cp.size
            and (prefix := proven_prefix_root(stored.size, cp.size, cp.root, req.proof)) is not None
            and prefix != stored.root
        ):
            # The root the proof gives is in the reason: with it, anyone can check the proof
            # (tlog check consistency --old-root <it>) and see it is not the stored root.
            reason = (
                f"the consistency proof from size {stored.size} to {cp.size} leads to the"
                f" request's root from root {b64encode(prefix)} at size {stored.size}"
            )
            proves = hashlib.sha256(
                b"inconsistent\n%d\n%d\n" % (stored.size, cp.size) + stored.root + cp.root
            ).digest()
        else:
            return
        await self.record_evidence(cp.origin, reason, body, stored, proves)

    async def check_quota(self, config: LogConfig) -> None:
        if config.qpd is None:
            return
        now = self.clock()
        day = int(now // _DAY)
        count = await self.call(self.state.count_request, config.origin, day)
        if count > config.qpd:
            retry_after = math.ceil((day + 1) * _DAY - now)
            raise QuotaExceededError(config.origin, config.qpd, retry_after)

    async def record_evidence(
        self, origin: str, reason: str, body: bytes, stored: Cosigned, proves: bytes
    ) -> None:
        at = int(self.clock())
        try:
            evidence_id = await asyncio.to_thread(
                functools.partial(
                    self.state.add_evidence, origin, reason, body, stored.note, at, proves=proves
                )
            )
        except Exception:
            self.logger.exception(json.dumps({"event": "evidence-not-stored", "origin": origin}))
            return
        if evidence_id is None:
            self.metrics.evidence_skipped += 1
        else:
            self.metrics.evidence += 1
        self.logger.warning(
            json.dumps(
                {
                    "event": "split-view",
                    "origin": origin,
                    "reason": reason,
                    # None: the same fork is kept already, or the log's evidence is full.
                    "evidence": evidence_id,
                }
            )
        )

    # --- handlers ------------------------------------------------------------------------

    async def add_checkpoint(self, request: web.Request) -> web.Response:
        info = request[_INFO]
        body = await self.read_body(request)
        req = AddCheckpointRequest.parse(body)
        info["old"] = req.old
        origin = origin_of(req.checkpoint)
        info["origin"] = origin[:_LOG_FIELD]
        config = await self.log_config(origin)
        signed = self.open_checkpoint(req.checkpoint, config)
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
        lock = self.locks.setdefault(origin, asyncio.Lock())
        counted = False
        async with lock:
            kept = await self.stored(origin)
            for _ in range(_MAX_SWAPS):
                entry = await self.accepting(kept, req, cp, body)
                if not counted and (entry.stored is None or cp.size > entry.stored.size):
                    # Only a checkpoint that moves the log on uses its quota: a resend of the
                    # stored one, a 409 or a 422 costs little, and anyone can replay the public
                    # checkpoint, which must not spend the log's quota for it.
                    counted = True
                    await self.check_quota(config)
                ts = max(int(self.clock()), entry.floor)
                if ts <= 0:
                    raise UsageError("the clock reads a time at or before 1970: refusing to cosign")
                text = signed.note.text
                stored = entry.stored
                if (
                    stored is not None
                    and ts == entry.cosig_ts
                    and cp.size == stored.size
                    and [(c.name, c.key_id) for c in entry.cosigs]
                    == [(s.name, s.key_id) for s in signers]
                    and stored.note.startswith(text)
                    and stored.note[len(text) : len(text) + 1] == b"\n"
                ):
                    # The stored checkpoint re-submitted in the second of our cosignatures on
                    # it: they are the answer (Ed25519 would sign the same bytes again),
                    # already durable; no signing, no write. (If another process has moved the
                    # log on since this one cached it, the answer is still a cosignature this
                    # witness gave, byte for byte: what a client that kept it has anyway.)
                    info["replay"] = True
                    cosigs = list(entry.cosigs)
                    break
                cosigs = [Signature(s.name, s.key_id, s.sign_at(text, ts)) for s in signers]
                note = format_note(text, [*signed.note.sigs, *cosigs])
                new = Cosigned(origin, cp.size, cp.root, note, ts)
                try:
                    swapped = await self.commits.swap(stored, new)
                except BaseException:
                    self.latest.pop(origin, None)  # whether it landed is unknown: re-read
                    raise
                if swapped:
                    self.latest[origin] = _Latest(new, tuple(cosigs), ts)
                    break
                # Another process moved this log (or its time) between our read and our write:
                # decide again on what is stored now.
                info["lost_race"] = info.get("lost_race", 0) + 1
                kept = await self.stored(origin, fresh=True)
            else:
                latest = kept[0].stored
                raise ConflictError(0 if latest is None else latest.size)
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
        info["origin"] = origin[:_LOG_FIELD]
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
        if origin is None:
            reload = self.origins_reload
            if reload is None and time.monotonic() - self.origins_loaded >= self.config_ttl:
                self.origins_loaded = time.monotonic()
                reload = self.origins_reload = asyncio.ensure_future(self.load_origins())
            if reload is not None:
                # A miss while the list is being reloaded waits for that reload (shielded:
                # a client that goes away must not cancel it for the others).
                await asyncio.shield(reload)
            origin = self.origins.get(digest)
        if origin is None:
            raise web.HTTPNotFound(text="unknown log\n")
        request[_INFO]["origin"] = origin
        stored = await self.call(self.state.latest, origin)
        if stored is None:
            raise web.HTTPNotFound(text="this witness never cosigned that log\n")
        request[_INFO]["size"] = stored.size
        return web.Response(body=stored.note, headers={"Content-Type": TEXT_CONTENT_TYPE})

    async def load_origins(self) -> None:
        try:
            logs = await self.call(self.state.logs)
            self.origins.update({origin_hash(c.origin): c.origin for c in logs})
        finally:
            self.origins_reload = None

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
        text = self.metrics.render(logs, cosigned, len(self.guard.conns), self.bodies.used)
        return web.Response(
            body=text.encode("utf-8"),
            headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"},
        )


class _ProtocolLog:
    """The logger aiohttp's protocol writes to (the ``logger`` of its ``RequestHandler``).

    aiohttp answers a request it cannot parse (malformed HTTP: a bad request line, a header
    too long, a broken chunked framing) itself, without the application's middleware, and logs
    the exception with its traceback. Here such an error is the client's: one JSON line and
    one metric, like every request. Anything else aiohttp reports is the server's problem and
    keeps its traceback.
    """

    def __init__(self, witness: _Witness) -> None:
        self.witness = witness

    def _report(self, msg: str, args: tuple[Any, ...], exc: object) -> bool:
        if isinstance(exc, web.RequestPayloadError):
            # aiohttp reads the rest of an unread body after the response (to keep the
            # connection), and the body did not decode: the client's bytes, answered already.
            cause = exc.__cause__ or exc.__context__ or exc
            self.witness.logger.info(
                json.dumps({"event": "bad-body-after-response", "error": str(cause)[:200]})
            )
            return True
        if isinstance(exc, aiohttp.http_exceptions.HttpProcessingError):
            client = str(args[0]) if args else ""
            error = (exc.message or type(exc).__name__).splitlines()[0][:200]
            self.witness.protocol_error(exc.code or 400, error, client)
            return True
        return False

    def debug(self, msg: str, *args: Any, exc_info: object = None, **kw: Any) -> None:
        # aiohttp logs a non-HTTP first request (TLS to this port, a scanner) at debug level.
        self._report(msg, args, exc_info)

    def exception(self, msg: str, *args: Any, exc_info: object = None, **kw: Any) -> None:
        if not self._report(msg, args, exc_info):
            self.witness.logger.error(
                json.dumps({"event": "http-internal-error", "error": msg % args if args else msg})
                + "\n"
                + "".join(
                    traceback.format_exception(exc_info)
                    if isinstance(exc_info, BaseException)
                    else traceback.format_exc()
                )
            )

    def warning(self, msg: str, *args: Any, **kw: Any) -> None:
        self.witness.logger.warning(json.dumps({"event": "http", "warning": msg % args}))

    error = warning
    info = warning


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
    worker: int | None = None,
    limits: Limits | None = None,
) -> web.Application:
    """The witness's aiohttp application (see the module docstring for what it serves).

    ``signers`` are the witness's cosignature keys: a CosignatureV1Signer (0x04) and/or a
    SubtreeV1Signer (0x06, which also enables sign-subtree), all named ``name``. ``clock``
    gives cosignature timestamps, quota days and evidence times; ``config_ttl`` bounds how
    often an unknown monitoring hash reloads the log list; ``status_endpoints=False`` hides
    ``/`` and ``/metrics``; ``logger`` receives the JSON request lines (default: the
    ``witness.server`` logger); ``worker`` labels every ``/metrics`` sample ``worker="N"``
    (one of several server processes: :mod:`witness.serving`); ``limits`` are the connection
    limits (:class:`~witness.connections.Limits`), enforced by the sites of
    :mod:`witness.serving` through ``app[GUARD_KEY]`` (a test client that bypasses them still
    gets the body budget). The caller owns ``state`` (and closes it).

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
    if limits is not None and limits.max_body_memory < max_body:
        raise UsageError(
            f"max_body_memory ({limits.max_body_memory}) must be at least max_body ({max_body}):"
            " one request's body must fit"
        )
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
        limits=(limits or Limits()).check(),
        worker=worker,
    )
    app = web.Application(middlewares=[witness.middleware], client_max_size=max_body)
    app[GUARD_KEY] = witness.guard
    app[RUNNER_OPTIONS_KEY] = {
        # aiohttp's own keep-alive close (armed at connect and after each response, it
        # closes a connection still waiting for a whole request) only backs up the guard's
        # idle and header deadlines: it must never fire before them.
        "keepalive_timeout": witness.guard.limits.idle_timeout
        + witness.guard.limits.header_timeout
        + 1.0,
        # A witness request has a handful of short headers; these bound the parser's memory.
        "max_line_size": _MAX_HEADER_LINE,
        "max_field_size": _MAX_HEADER_LINE,
        "max_headers": _MAX_HEADERS,
        # Unread body bytes buffered per connection before aiohttp stops reading the socket.
        "read_bufsize": _READ_BUFSIZE,
        "logger": _ProtocolLog(witness),
    }

    async def on_shutdown(_app: web.Application) -> None:
        # AppRunner.cleanup sends on_shutdown after closing the listening sockets and idle
        # connections and before it waits shutdown_timeout for the handlers in flight and
        # cancels the rest: every such cancel from now on is the server's doing.
        witness.stopping = True

    app.on_shutdown.append(on_shutdown)
    app.router.add_post(
        f"{sub}/add-checkpoint",
        witness.add_checkpoint,
        name="add-checkpoint",
        expect_handler=witness.expect,
    )
    if witness.subtree_signers:
        app.router.add_post(
            f"{sub}/sign-subtree",
            witness.sign_subtree,
            name="sign-subtree",
            expect_handler=witness.expect,
        )
    app.router.add_get(
        mon + "/{hash:[0-9a-f]{64}}/checkpoint", witness.monitoring, name="monitoring"
    )
    if status_endpoints:
        app.router.add_get("/", witness.status_page, name="status")
        app.router.add_get("/metrics", witness.metrics_page, name="metrics")
    return app
