"""The read-only tlog-tiles HTTP server of ``tlog-store serve`` (aiohttp): every tenant's log.

Layout: each tenant's log is at the prefix ``/<tenant>/``, so that a store with the base origin
``example.com/journal`` served at ``https://example.com/journal/`` has each tenant log's URL
prefix equal to its origin ``example.com/journal/<tenant>`` with a scheme, as tlog-tiles
recommends:

=========================================  ==============================================
``GET /<tenant>/checkpoint``                the latest kept checkpoint, with its cosignatures
``GET /<tenant>/tile/<L>/<N>[.p/<W>]``      a hash tile
``GET /<tenant>/tile/entries/<N>[.p/<W>]``  an entry bundle (the sealed heads)
=========================================  ==============================================

What each answers, its ``Content-Type`` and ``Cache-Control`` are :mod:`store.tiles`'s (and
docs/tiles.md's). ``HEAD`` is answered as ``GET`` without the body; other methods 405. Statuses:
200; 400 for a tile path that is not the canonical spelling (read from the raw path: a
percent-encoded path is not canonical); 404 for an unknown tenant (or one without a kept
checkpoint), a resource beyond the latest checkpoint, or any other path; 500 when the store
fails or holds what it must not (logged, with a generic body). Error bodies are one line of
``text/plain``.

Every read runs in a thread (``asyncio.to_thread``), never on the event loop; each tenant has
one store handle, opened on its first request, whose session serialises its reads. The list
of tenants is read again at most every ``ttl`` seconds when a request names an unknown one, so
that a request for a made-up tenant costs no handle and at most one query per ``ttl``; the
latest checkpoint of a tenant is read at most every ``ttl`` seconds (default 1), so a new
checkpoint is served within that time.
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web

from store.errors import BackendError, CorruptError
from store.tiles import NotFoundError, Resource, TiledLog, TileSource
from tlog.errors import MalformedError, TlogError, UsageError
from tlog.journal import check_tenant

__all__ = ["DEFAULT_TTL", "LOGGER_NAME", "TileServer", "make_app", "request_logger", "serve"]

LOGGER_NAME = "store.tileserver"
DEFAULT_TTL = 1.0
"""Seconds a tenant's latest checkpoint (and the list of tenants) is reused before a re-read."""


class TileServer:
    """The handlers' state: tenants, their sources, the cached latest checkpoints.

    ``tenants()`` lists the tenants to serve; ``open_source(tenant)`` gives one's
    :class:`~store.tiles.TileSource` (called once per tenant, in a thread). ``clock`` is
    monotonic seconds.
    """

    def __init__(
        self,
        tenants: Callable[[], list[str]],
        open_source: Callable[[str], TileSource],
        *,
        ttl: float = DEFAULT_TTL,
        clock: Callable[[], float] = time.monotonic,
        logger: logging.Logger | None = None,
    ) -> None:
        if ttl < 0:
            raise UsageError("ttl must not be negative")
        self._list_tenants = tenants
        self._open_source = open_source
        self._ttl = ttl
        self._clock = clock
        self.logger = logger or logging.getLogger(LOGGER_NAME)
        self._known: set[str] = set()
        self._listed_at: float | None = None
        self._logs: dict[str, TiledLog] = {}
        self._latest: dict[str, tuple[float, Resource, int]] = {}
        self._lock = asyncio.Lock()

    async def _log(self, tenant: str) -> TiledLog:
        try:
            check_tenant(tenant)
        except MalformedError:
            raise NotFoundError("no such log") from None
        log = self._logs.get(tenant)
        if log is not None:
            return log
        async with self._lock:
            log = self._logs.get(tenant)
            if log is not None:
                return log
            now = self._clock()
            if tenant not in self._known and (
                self._listed_at is None or now - self._listed_at >= self._ttl
            ):
                self._known = set(await asyncio.to_thread(self._list_tenants))
                self._listed_at = now
            if tenant not in self._known:
                raise NotFoundError(f"no log for the tenant {tenant!r}")
            log = TiledLog(await asyncio.to_thread(self._open_source, tenant))
            self._logs[tenant] = log
            return log

    async def _checkpoint(self, tenant: str, log: TiledLog) -> tuple[Resource, int]:
        now = self._clock()
        held = self._latest.get(tenant)
        if held is not None and now - held[0] < self._ttl:
            return held[1], held[2]
        resource, size = await asyncio.to_thread(log.checkpoint)
        self._latest[tenant] = (now, resource, size)
        return resource, size

    async def handle(self, request: web.Request) -> web.StreamResponse:
        """``GET`` (and ``HEAD``) of any path: see the module docstring."""
        started = time.perf_counter()
        raw = request.rel_url.raw_path
        info: dict[str, Any] = {"method": request.method, "path": raw[:200]}
        try:
            response = await self._answer(raw)
        except MalformedError as e:
            response = _error(400, str(e))
        except NotFoundError as e:
            response = _error(404, str(e))
        except (CorruptError, BackendError, TlogError) as e:
            self.logger.error(json.dumps({"event": "store-error", "error": str(e)[:500]}))
            response = _error(500, "the store failed; see the server's log")
        info["status"] = response.status
        info["duration_ms"] = round((time.perf_counter() - started) * 1000, 3)
        self.logger.info(json.dumps(info))
        return response

    async def _answer(self, raw: str) -> web.Response:
        tenant, sep, rest = raw.removeprefix("/").partition("/")
        if not raw.startswith("/") or not sep:
            raise NotFoundError("no such resource")
        if rest == "checkpoint":
            log = await self._log(tenant)
            resource, _ = await self._checkpoint(tenant, log)
        elif rest.startswith("tile/"):
            log = await self._log(tenant)
            _, size = await self._checkpoint(tenant, log)
            resource = await asyncio.to_thread(log.tile_or_bundle, rest, size)
        else:
            raise NotFoundError("no such resource")
        return web.Response(
            body=resource.body,
            headers={
                "Content-Type": resource.content_type,
                "Cache-Control": resource.cache_control,
            },
        )


def _error(status: int, message: str) -> web.Response:
    line = message.splitlines()[0] if message else "error"
    return web.Response(
        status=status,
        body=(line + "\n").encode("utf-8"),
        headers={"Content-Type": "text/plain; charset=utf-8", "Cache-Control": "no-store"},
    )


def request_logger() -> logging.Logger:
    """The logger of the request lines, writing each as one line to standard error."""
    logger = logging.getLogger(LOGGER_NAME)
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False
    return logger


def make_app(server: TileServer) -> web.Application:
    """The aiohttp application answering every path with ``server`` (GET and HEAD)."""
    app = web.Application()
    app.router.add_get("/{tail:.*}", server.handle)
    return app


async def _serve(
    app: web.Application,
    host: str,
    port: int,
    announce: Callable[[list[str]], None],
    shutdown_timeout: float,
) -> None:
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=shutdown_timeout)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        try:
            await site.start()
        except OSError as e:
            raise UsageError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        urls = []
        for address in runner.addresses:
            h, p = address[0], address[1]
            urls.append(f"http://[{h}]:{p}" if ":" in h else f"http://{h}:{p}")
        announce(urls)
        await stop.wait()
    finally:
        await runner.cleanup()


def serve(
    app: web.Application,
    *,
    host: str,
    port: int,
    announce: Callable[[list[str]], None],
    shutdown_timeout: float = 5.0,
) -> None:
    """Serve ``app`` on ``host:port`` until SIGTERM or SIGINT; ``announce(urls)`` is called
    once it accepts connections. UsageError when it cannot listen."""
    asyncio.run(_serve(app, host, port, announce, shutdown_timeout))
