"""Connection limits of the witness server: deadlines, caps and a memory budget for bodies.

aiohttp keeps a connection that sends nothing open for about an hour and sets no deadline on a
request's headers, so a few thousand idle or slowloris clients hold every file descriptor of
a witness. :class:`ConnectionGuard` sits between the listening socket and aiohttp's protocol
(:meth:`ConnectionGuard.wrap` wraps the protocol factory; :class:`GuardedSite` listens with
it) and gives every connection one deadline at a time, by phase:

=========  =====================================================  =============================
phase      when                                                   at the deadline
=========  =====================================================  =============================
idle       no request in progress and no byte of the next one     closed (``idle_timeout``)
           (a new connection starts here)
headers    bytes of a request arrived (blank lines before a       408, then closed
           request line do not count: HTTP skips them), its       (``header_timeout``,
           header block is not complete yet; a block of more      counted from the first byte)
           than ``max_header_bytes``: 431 at once
waiting    the header block is complete, the application has not  closed (the same deadline as
           taken the request yet (aiohttp answers some requests   the headers phase)
           itself: a 400, a 417)
request    the application took the request, until it handed      closed, the handler cancelled
           the response to aiohttp                                (``request_timeout``)
linger     the response is handed over, the request's body was    closed (``idle_timeout``)
           not read whole (a 413, a body sent to a GET): its
           bytes still arrive and are not a new request
=========  =====================================================  =============================

Deadlines are checked by one sweep of the process's connections every tick (a quarter of the
shorter of ``idle_timeout`` and ``header_timeout``, at most 0.5 s), so each is kept to within
a tick, and a request costs no timer operation.

Only a connection in the request phase is busy: every other one may be evicted (below), so a
client can hold a connection only by sending requests the application handles, each within
``request_timeout``.

Caps, checked when a connection is accepted, before aiohttp sees it:

* ``max_connections`` per process: at the cap, the connection idle or in the headers phase
  the longest is closed to make room (an idle or slow client never keeps a new one out);
  only when every connection has a request in progress is the new one refused with 503.
* ``max_connections_per_address`` per client address (an IPv6 client's /64): over it, 429.

Refusals are written straight to the socket (``Connection: close``) and the socket is
closed: no aiohttp protocol, no parser, no task. A 408 or 431 is written only when no
response has been sent on the connection yet; later in a keep-alive connection it is closed
without one (a response written then could interleave with the one before).

:class:`BodyBudget` bounds the bytes of request bodies that handlers read at once in the
process (``max_body_memory``): a request waits for room before it reads its body.

Every refusal and every close is reported through ``on_close(reason, status, client,
seconds)``: the server logs a JSON line for each one that answered with a status, and counts
them all. Reasons: ``idle``, ``evicted``, ``header_timeout``, ``header_too_large``,
``request_deadline``, ``per_address``, ``full``.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import ipaddress
import math
from collections.abc import Callable
from typing import Any, cast

from aiohttp import web

from witness.config import Limits

__all__ = [
    "BodyBudget",
    "ConnectionGuard",
    "GuardedSite",
    "Limits",
]


_MAX_TICK = 0.5  # seconds between two sweeps of the deadlines, at most

OnClose = Callable[[str, int | None, str, float], None]
"""``on_close(reason, status or None, client address, seconds the connection lived)``."""

_IDLE, _HEADERS, _WAITING, _REQUEST, _LINGER = range(5)
_REASONS = {
    408: b"Request Timeout",
    429: b"Too Many Requests",
    431: b"Request Header Fields Too Large",
    503: b"Service Unavailable",
}


def _raw_response(status: int, text: str, retry_after: int | None = None) -> bytes:
    body = (text + "\n").encode("utf-8")
    head = (
        b"HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\n"
        % (status, _REASONS[status], len(body))
    )
    if retry_after is not None:
        head += b"Retry-After: %d\r\n" % retry_after
    return head + b"Connection: close\r\n\r\n" + body


def client_key(peer: Any) -> str:
    """The address a per-address cap counts: the IPv4 address, an IPv6 address's /64 (one
    host there usually holds a whole /64), or the peer as text when it is neither."""
    if isinstance(peer, tuple) and peer and isinstance(peer[0], str):
        try:
            ip = ipaddress.ip_address(peer[0])
        except ValueError:
            return peer[0]
        if isinstance(ip, ipaddress.IPv6Address):
            if ip.ipv4_mapped is not None:
                return str(ip.ipv4_mapped)
            return str(ipaddress.IPv6Network((int(ip) >> 64 << 64, 64)))
        return str(ip)
    return str(peer)


class _Conn(asyncio.Protocol):
    """One accepted connection: the guard's bookkeeping around aiohttp's protocol."""

    def __init__(self, guard: ConnectionGuard, factory: Callable[[], asyncio.Protocol]) -> None:
        self.guard = guard
        self.factory = factory
        self.inner: Any = None  # aiohttp's RequestHandler, made once admitted
        self.transport: asyncio.Transport | None = None
        self.client = ""
        self.phase = _IDLE
        self.opened = 0.0
        self.header_bytes = 0
        self.started = False  # a byte other than CR and LF arrived in the headers phase
        self.tail = b""  # the last bytes seen in the headers phase (a terminator may straddle)
        self.responses = 0  # requests handed to the application (a response may be on the wire)
        self.deadline = math.inf  # loop time at which the phase ends (checked by the sweep)
        self.closing_reason: str | None = None
        self.admitted = False

    # --- asyncio.Protocol ----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self.transport = cast(asyncio.Transport, transport)
        transport = self.transport
        guard = self.guard
        self.client = client_key(transport.get_extra_info("peername"))
        self.opened = guard.loop.time()
        refusal = guard.admit(self)
        if refusal is not None:
            reason, status, text = refusal
            self.closing_reason = reason
            transport.write(_raw_response(status, text, retry_after=1))
            transport.close()
            guard.report(reason, status, self.client, 0.0)
            return
        self.admitted = True
        self.inner = self.factory()
        self.to_phase(_IDLE)
        self.inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if not self.admitted or self.closing_reason is not None:
            return
        if self.phase == _IDLE:
            self.to_phase(_HEADERS)
            self.header_bytes = 0
            self.started = False
            self.tail = b""
        if self.phase == _HEADERS and not self.headers(data):
            return
        self.inner.data_received(data)

    def headers(self, data: bytes) -> bool:
        """Account for ``data`` received in the headers phase; False when the connection was
        refused for it (431)."""
        start = 0
        if not self.started:
            # HTTP/1.1 servers skip empty lines before a request line (RFC 9112 §2.2), and so
            # does aiohttp: they are not the end of a header block.
            start = len(data) - len(data.lstrip(b"\r\n"))
            self.started = start < len(data)
        window = self.tail + data[start:]
        end = _header_end(window) if self.started else -1
        used = len(data) if end < 0 else start + end - len(self.tail)
        self.header_bytes += used
        limit = self.guard.limits.max_header_bytes
        if self.header_bytes > limit:
            self.refuse("header_too_large", 431, f"request headers larger than {limit} bytes")
            return False
        if end < 0:
            self.tail = window[-2:]
        else:
            self.to_phase(_WAITING)
        return True

    def eof_received(self) -> bool | None:
        if not self.admitted:
            return None
        result: bool | None = self.inner.eof_received()
        return result

    def connection_lost(self, exc: Exception | None) -> None:
        self.deadline = math.inf
        if not self.admitted:
            return
        self.guard.release(self)
        self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        if self.inner is not None:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if self.inner is not None:
            self.inner.resume_writing()

    # --- phases --------------------------------------------------------------------------

    def to_phase(self, phase: int) -> None:
        guard = self.guard
        now = guard.loop.time()
        self.phase = phase
        limits = guard.limits
        if phase == _WAITING:
            return  # the headers phase's deadline and place among the evictable stay
        if phase == _REQUEST:
            deadline = limits.request_timeout
            guard.evictable.pop(self, None)
        else:
            deadline = limits.header_timeout if phase == _HEADERS else limits.idle_timeout
            guard.evictable[self] = None
            guard.evictable.move_to_end(self)
        self.deadline = now + deadline

    def expire(self) -> None:
        """The phase's deadline passed (called by the guard's sweep)."""
        self.deadline = math.inf
        if self.phase in (_IDLE, _LINGER):
            self.close("idle")
        elif self.phase == _WAITING:
            self.close("header_timeout")  # aiohttp may have answered it itself: no 408
        elif self.phase == _HEADERS:
            seconds = self.guard.limits.header_timeout
            self.refuse(
                "header_timeout", 408, f"request headers not received within {seconds:g} seconds"
            )
        else:
            self.close("request_deadline")

    def request_started(self) -> None:
        """The application took a request (the header block was complete)."""
        self.responses += 1
        if self.phase != _REQUEST:
            self.to_phase(_REQUEST)

    def request_done(self, body_read: bool) -> None:
        """The application answered; the next request may come (keep-alive). ``body_read``:
        the request's body was read to its end (else its bytes may still arrive)."""
        if self.closing_reason is None and self.phase == _REQUEST:
            self.to_phase(_IDLE if body_read else _LINGER)

    def refuse(self, reason: str, status: int, text: str) -> None:
        """Answer ``status`` (when nothing was sent on the connection yet) and close."""
        if self.transport is not None and self.responses == 0 and not self.transport.is_closing():
            self.transport.write(_raw_response(status, text))
            self.close(reason, status, graceful=True)
        else:
            self.close(reason)

    def close(self, reason: str, status: int | None = None, *, graceful: bool = False) -> None:
        if self.closing_reason is not None or self.transport is None:
            return
        self.closing_reason = reason
        self.guard.evictable.pop(self, None)
        seconds = self.guard.loop.time() - self.opened
        self.guard.report(reason, status, self.client, seconds)
        if graceful:
            self.transport.close()  # writes what is buffered first
        else:
            self.transport.abort()


def _header_end(window: bytes) -> int:
    """Where the header block ends in ``window`` (just past its empty line: LF CR LF or LF
    LF), or -1. Requires: ``window`` starts inside a request (no leading empty lines)."""
    a = window.find(b"\n\r\n")
    b = window.find(b"\n\n")
    if a < 0:
        return -1 if b < 0 else b + 2
    if b < 0 or a < b:
        return a + 3
    return b + 2


class ConnectionGuard:
    """The connections of one server process and their limits (see the module docstring)."""

    def __init__(self, limits: Limits, on_close: OnClose | None = None) -> None:
        self.limits = limits.check()
        self.on_close = on_close
        self.conns: dict[asyncio.BaseTransport, _Conn] = {}
        self.per_client: collections.Counter[str] = collections.Counter()
        # Idle and headers-phase connections, the longest in their phase first.
        self.evictable: collections.OrderedDict[_Conn, None] = collections.OrderedDict()
        self._loop: asyncio.AbstractEventLoop | None = None
        # Deadlines are checked by one sweep over the connections every `tick` seconds, not by
        # a timer per connection: a request then moves its connection through its phases with
        # no timer to cancel and re-arm, and a deadline is kept to within a tick.
        self.tick = min(_MAX_TICK, min(limits.idle_timeout, limits.header_timeout) / 4)
        self._sweeping = False

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        return self._loop

    def sweep(self) -> None:
        """Expire the connections whose phase's deadline passed; run again in a tick while
        any connection is open (a handle, not a task: nothing is left pending when the loop
        closes)."""
        now = self.loop.time()
        for conn in [c for c in self.conns.values() if c.deadline <= now]:
            conn.expire()
        if self.conns:
            self.loop.call_later(self.tick, self.sweep)
        else:
            self._sweeping = False

    def wrap(self, factory: Callable[[], Any]) -> Callable[[], asyncio.Protocol]:
        """A protocol factory for ``loop.create_server``: ``factory``'s protocol, guarded."""
        return lambda: _Conn(self, factory)

    def admit(self, conn: _Conn) -> tuple[str, int, str] | None:
        """Count ``conn`` in, or say why not: (reason, status, message)."""
        limits = self.limits
        if self.per_client[conn.client] >= limits.max_connections_per_address:
            return (
                "per_address",
                429,
                f"too many connections from {conn.client} "
                f"(at most {limits.max_connections_per_address})",
            )
        while len(self.conns) >= limits.max_connections:
            if not self.evictable:
                return ("full", 503, "the witness is at its connection limit; retry")
            oldest = next(iter(self.evictable))
            oldest.close("evicted")
            self.forget(oldest)
        assert conn.transport is not None
        self.conns[conn.transport] = conn
        self.per_client[conn.client] += 1
        if not self._sweeping:
            self._sweeping = True
            self.loop.call_later(self.tick, self.sweep)
        return None

    def forget(self, conn: _Conn) -> None:
        """Stop counting ``conn`` (it is closing); idempotent."""
        if conn.transport is not None and self.conns.pop(conn.transport, None) is not None:
            left = self.per_client[conn.client] - 1
            if left > 0:
                self.per_client[conn.client] = left
            else:
                del self.per_client[conn.client]
        self.evictable.pop(conn, None)

    def release(self, conn: _Conn) -> None:
        if conn.closing_reason is None:
            conn.closing_reason = "client"
        self.forget(conn)

    def report(self, reason: str, status: int | None, client: str, seconds: float) -> None:
        if self.on_close is not None:
            self.on_close(reason, status, client, seconds)

    def connection_of(self, request: web.BaseRequest) -> _Conn | None:
        """The guarded connection a request came on (None when served without the guard)."""
        transport = request.transport
        return None if transport is None else self.conns.get(transport)


class GuardedSite(web.BaseSite):
    """An aiohttp site listening on a bound socket through a :class:`ConnectionGuard`."""

    __slots__ = ("_guard", "_name", "_sock")

    def __init__(
        self,
        runner: web.BaseRunner,
        sock: Any,
        guard: ConnectionGuard,
        *,
        shutdown_timeout: float = 60.0,
        backlog: int = 1024,
    ) -> None:
        super().__init__(runner, shutdown_timeout=shutdown_timeout, backlog=backlog)
        self._sock = sock
        self._guard = guard
        host, port = sock.getsockname()[:2]
        self._name = f"http://{f'[{host}]' if ':' in host else host}:{port}"

    @property
    def name(self) -> str:
        return self._name

    async def start(self) -> None:
        await super().start()
        server = self._runner.server
        assert server is not None
        self._server = await asyncio.get_running_loop().create_server(
            self._guard.wrap(server), sock=self._sock, backlog=self._backlog
        )


class BodyBudget:
    """At most ``limit`` bytes of request bodies held at once in this process.

    A reader reserves the bytes it has received before it keeps them (:meth:`reserve` waits
    until they fit), so a client holds budget only for bytes it actually sent. Not FIFO: a
    small reservation passes a large one that waits.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self.waiters: list[tuple[int, asyncio.Future[None]]] = []

    async def reserve(self, n: int) -> int:
        """Wait until ``n`` bytes (at most the limit) fit; the amount reserved, to
        :meth:`release` later. A cancelled wait reserves nothing."""
        n = min(n, self.limit)
        while self.used + n > self.limit:
            waiter = (n, asyncio.get_running_loop().create_future())
            self.waiters.append(waiter)
            try:
                await waiter[1]
            finally:
                with contextlib.suppress(ValueError):
                    self.waiters.remove(waiter)
        self.used += n
        return n

    def release(self, n: int) -> None:
        """Give back what :meth:`reserve` returned; wake the waiters that now fit."""
        self.used -= n
        for want, future in self.waiters:
            if not future.done() and self.used + want <= self.limit:
                future.set_result(None)
