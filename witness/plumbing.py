"""The witness server's request plumbing, shared by every endpoint (:mod:`witness.server`).

:class:`RequestPlumbing` holds the middleware, the one place where an exception becomes a
response (through :func:`witness.errors.reply_for`) and where each request is logged as one
JSON line on :data:`LOGGER_NAME` and counted in the metrics; the connection guard's callbacks;
the ``Expect: 100-continue`` handler; reading a body within its size cap, read deadline and the
process's body budget; and running a state method in a thread (:meth:`RequestPlumbing.call`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import traceback
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import aiohttp
from aiohttp import web

from tlog.errors import (
    MalformedError,
    VerificationError,
)
from witness.commit import state_failure
from witness.config import Limits
from witness.connections import BodyBudget, ConnectionGuard
from witness.errors import (
    RequestTimeoutError,
    RequestTooLargeError,
    reply_for,
)
from witness.metrics import Metrics
from witness.sqlstate import MAX_ORIGIN_BYTES
from witness.state import WitnessState

__all__ = ["INFO_KEY", "LOGGER_NAME", "LOG_FIELD", "Clock", "RequestPlumbing"]

LOGGER_NAME = "witness.server"
"""The logger of the request lines (and of the server's own events)."""

Clock = Callable[[], float]
_T = TypeVar("_T")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

INFO_KEY = web.RequestKey("witness_info", dict)
"""A request's log line, as the handlers fill it in (origin, old, size, ...)."""

LOG_FIELD = MAX_ORIGIN_BYTES  # characters of a client's value (an origin) in a log line


class RequestPlumbing:
    """What every endpoint of the server shares: the middleware that logs, counts and answers
    errors, the connection guard, body reading within its caps, and state calls in a thread.

    ``limits`` are the connection limits; ``worker`` labels the metrics (see
    :func:`witness.server.make_app`).
    """

    def __init__(
        self,
        state: WitnessState,
        *,
        submission_prefix: str,
        monitoring_prefix: str,
        max_body: int,
        read_timeout: float,
        logger: logging.Logger,
        limits: Limits,
        worker: int | None = None,
    ) -> None:
        self.state = state
        self.sub = submission_prefix
        self.mon = monitoring_prefix
        self.max_body = max_body
        self.read_timeout = read_timeout
        self.logger = logger
        self.metrics = Metrics(worker)
        self.guard = ConnectionGuard(limits, self.connection_closed)
        self.bodies = BodyBudget(limits.max_body_memory)
        self.stopping = False  # set when the application shuts down (make_app's on_shutdown)

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
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        started = time.perf_counter()
        endpoint = self.endpoint_of(request.path)
        info: dict[str, Any] = {"endpoint": endpoint, "method": request.method}
        request[INFO_KEY] = info
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
            raise state_failure(e) from e
