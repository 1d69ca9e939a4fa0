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
``/``                                                GET     the operator's HTML status page
``/evidence``, ``/evidence/<id>``                    GET     kept split-view evidence (text)
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

**Evidence.** Only what proves a split view by itself is kept
(:meth:`~witness.cosigning.Cosigning.keep_if_proven`,
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

**Modules.** This module wires the application (:func:`make_app`: the checks of its
arguments, the routes, aiohttp's limits, the protocol-error log). The handlers are one object
in three layers, one concept each: :mod:`witness.plumbing` (the middleware, body reading, the
connection guard's callbacks, state calls in a thread), :mod:`witness.monitoring` (the
monitoring endpoint, ``/`` and ``/metrics``, counted by :mod:`witness.metrics`) and
:mod:`witness.cosigning` (add-checkpoint and sign-subtree and their checks, which commit
through :mod:`witness.commit`).
"""

from __future__ import annotations

import json
import logging
import time
import traceback
from collections.abc import Sequence
from typing import Any

import aiohttp
from aiohttp import web

from tlog.cosignature import (
    TYPE_COSIGNATURE_V1,
    TYPE_SUBTREE_V1,
)
from tlog.errors import (
    UsageError,
)
from tlog.note import check_key_name
from tlog.witnessproto import (
    MAX_REQUEST_SIZE,
)
from witness.config import Limits
from witness.connections import ConnectionGuard
from witness.cosigning import Cosigner, Cosigning
from witness.plumbing import LOGGER_NAME, Clock
from witness.state import WitnessState

__all__ = [
    "COSIGNING_KEY",
    "DEFAULT_READ_TIMEOUT",
    "GUARD_KEY",
    "LOGGER_NAME",
    "RUNNER_OPTIONS_KEY",
    "Cosigner",
    "make_app",
]

DEFAULT_READ_TIMEOUT = 10.0
"""Seconds a client has to deliver the whole request body."""

_MAX_HEADER_LINE = 8190  # bytes of a request line or header field (aiohttp's default)
_MAX_HEADERS = 64  # header fields of a request
_READ_BUFSIZE = 16384  # body bytes aiohttp buffers per connection before it pauses the socket

GUARD_KEY = web.AppKey("witness_guard", ConnectionGuard)
"""The application's :class:`~witness.connections.ConnectionGuard`: a site that serves the
application listens through it (:class:`~witness.connections.GuardedSite`)."""

COSIGNING_KEY = web.AppKey("witness_cosigning", Cosigning)
"""The application's :class:`~witness.cosigning.Cosigning`: its checks and commits, which
``tlog-witness feed`` (:mod:`witness.feed`) submits through without HTTP."""

RUNNER_OPTIONS_KEY = web.AppKey("witness_runner_options", dict)
"""Keyword arguments for the ``web.AppRunner`` that serves the application: aiohttp's own
limits (keep-alive, header sizes, read buffer) and the logger of its protocol errors."""


class _ProtocolLog:
    """The logger aiohttp's protocol writes to (the ``logger`` of its ``RequestHandler``).

    aiohttp answers a request it cannot parse (malformed HTTP: a bad request line, a header
    too long, a broken chunked framing) itself, without the application's middleware, and logs
    the exception with its traceback. Here such an error is the client's: one JSON line and
    one metric, like every request. Anything else aiohttp reports is the server's problem and
    keeps its traceback.
    """

    def __init__(self, witness: Cosigning) -> None:
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


def _check_signers(name: str, signers: Sequence[Cosigner]) -> None:
    """make_app's preconditions on the signers (UsageError when one fails)."""
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


def _runner_options(witness: Cosigning) -> dict[str, Any]:
    """The keyword arguments of the ``web.AppRunner`` that serves ``witness``."""
    return {
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


def _add_routes(app: web.Application, witness: Cosigning, *, status_endpoints: bool) -> None:
    """The application's routes (see the module docstring)."""
    app.router.add_post(
        f"{witness.sub}/add-checkpoint",
        witness.add_checkpoint,
        name="add-checkpoint",
        expect_handler=witness.expect,
    )
    if witness.subtree_signers:
        app.router.add_post(
            f"{witness.sub}/sign-subtree",
            witness.sign_subtree,
            name="sign-subtree",
            expect_handler=witness.expect,
        )
    app.router.add_get(
        witness.mon + "/{hash:[0-9a-f]{64}}/checkpoint", witness.monitoring, name="monitoring"
    )
    if status_endpoints:
        app.router.add_get("/", witness.status_page, name="status")
        app.router.add_get("/metrics", witness.metrics_page, name="metrics")
        app.router.add_get("/evidence", witness.evidence_list, name="evidence")
        app.router.add_get("/evidence/{id}", witness.evidence_entry, name="evidence-entry")


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
    ``/``, ``/evidence`` and ``/metrics``; ``logger`` receives the JSON request lines (default: the
    ``witness.server`` logger); ``worker`` labels every ``/metrics`` sample ``worker="N"``
    (one of several server processes: :mod:`witness.serving`); ``limits`` are the connection
    limits (:class:`~witness.connections.Limits`), enforced by the sites of
    :mod:`witness.serving` through ``app[GUARD_KEY]`` (a test client that bypasses them still
    gets the body budget). The caller owns ``state`` (and closes it).

    Requires: at least one signer, every signer named ``name`` with a distinct key, of type
    0x04 or 0x06; prefixes ``""`` or ``/path`` without a trailing slash; ``max_body`` > 0 and
    ``read_timeout`` > 0. Raises :class:`~tlog.errors.UsageError` otherwise.
    """
    _check_signers(name, signers)
    if max_body <= 0 or read_timeout <= 0:
        raise UsageError("max_body and read_timeout must be positive")
    if limits is not None and limits.max_body_memory < max_body:
        raise UsageError(
            f"max_body_memory ({limits.max_body_memory}) must be at least max_body ({max_body}):"
            " one request's body must fit"
        )
    sub = _check_prefix(submission_prefix, "submission prefix")
    mon = _check_prefix(monitoring_prefix, "monitoring prefix")
    witness = Cosigning(
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
    app[COSIGNING_KEY] = witness
    app[RUNNER_OPTIONS_KEY] = _runner_options(witness)

    async def on_shutdown(_app: web.Application) -> None:
        # AppRunner.cleanup sends on_shutdown after closing the listening sockets and idle
        # connections and before it waits shutdown_timeout for the handlers in flight and
        # cancels the rest: every such cancel from now on is the server's doing.
        witness.stopping = True

    app.on_shutdown.append(on_shutdown)
    _add_routes(app, witness, status_endpoints=status_endpoints)
    return app
