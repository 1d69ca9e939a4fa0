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
checkpoint: the body says which, when ``log_tenants`` is given), a resource beyond the latest
checkpoint, or any other path; 500 when the store fails or holds what it must not (logged,
with a generic body). Error bodies are one line of ``text/plain``. Every answer, an error
too, carries ``Access-Control-Allow-Origin: *``: the log is public and read-only, and a
monitor running in a browser must be able to read it (and to read why a request failed).

Where reads run. By default every read runs in a thread (``asyncio.to_thread``), never on the
event loop. Each tenant has a pool of at most ``readers`` store handles (default
:data:`DEFAULT_READERS`), the first opened on its first request and the others only when that
many reads run at once: a handle's session serialises its reads, so the pool is what lets a
tenant's reads run in parallel (PostgreSQL reads wait on the network, so they overlap). With
``reads_in_loop`` (what ``tlog-store serve`` does for a SQLite store) they run on the event loop
itself, on one handle per tenant: a SQLite read of a tile is CPU work of a fraction of a
millisecond and O(1) (at most 512 rows) that the GIL would serialise anyway, and handing it to
a thread and back costs about as much again (measured in bench/tiles_bench.py: the server's
CPU per request nearly halves); only the handle's first opening goes to a thread.

The list of tenants is read again at most every ``ttl`` seconds when a request names an
unknown one, so that a request for a made-up tenant costs no handle and at most one query per
``ttl``; the latest checkpoint of a tenant is read at most every ``ttl`` seconds (default 1),
so a new checkpoint is served within that time. ``tlog-store serve --cache-mb`` and
``--readers`` set the cache and the pool.

Full tiles and full bundles never change once they exist, so up to ``cache_bytes`` of their
bodies are kept (least recently used dropped first; ``tlog-store serve`` keeps
:data:`DEFAULT_CACHE_BYTES`, a :class:`TileServer` none unless told): a kept one is answered
without a store read, after the same checks as any other (the tenant, and that the latest
checkpoint covers it). Partial tiles, partial bundles and the checkpoint are never kept (the
checkpoint is only reused for ``ttl`` seconds, as above). A full bundle and the full level-0
tile of the same positions come from one store read (the bundle's leaf hashes are that tile:
:meth:`~store.tiles.TiledLog.leaf_pair`), and both are kept; a request for either while that
read runs waits for it, so a follower asking for both at once costs one read.

Each request is logged as one JSON line (``method``, ``path``, ``status``, ``duration_ms``) at
INFO on :data:`LOGGER_NAME`, formatted only when that level is enabled.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
import sys
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import NoReturn, TypeVar

from aiohttp import web

from store.errors import BackendError, CorruptError
from store.tiles import (
    IMMUTABLE_CACHE,
    NotFoundError,
    Resource,
    TiledLog,
    TileSource,
    extent,
)
from tlog.errors import MalformedError, TlogError, UsageError
from tlog.journal import check_tenant
from tlog.tiles import TILE_WIDTH, Bundle, Tile, parse_tile_path

__all__ = [
    "DEFAULT_CACHE_BYTES",
    "DEFAULT_READERS",
    "DEFAULT_TTL",
    "LOGGER_NAME",
    "ResourceCache",
    "TileServer",
    "make_app",
    "request_logger",
    "serve",
    "serve_workers",
]

LOGGER_NAME = "store.tileserver"
DEFAULT_TTL = 1.0
"""Seconds a tenant's latest checkpoint (and the list of tenants) is reused before a re-read."""
DEFAULT_READERS = 4
"""Store handles per tenant, at most: how many of its reads may run at once."""
DEFAULT_CACHE_BYTES = 64 << 20
"""Bytes of full tiles and bundles ``tlog-store serve`` keeps (about 7,700 of them)."""

T = TypeVar("T")


class ResourceCache:
    """Full tiles and bundles by (tenant, path), at most ``max_bytes`` of bodies, the least
    recently used dropped first. Each is kept with its :func:`~store.tiles.extent`, the tree
    size a checkpoint must have for it to be served. Used on the event loop only."""

    def __init__(self, max_bytes: int) -> None:
        if max_bytes < 0:
            raise UsageError("the cache size must not be negative")
        self.max_bytes = max_bytes
        self.bytes = 0
        self._items: OrderedDict[tuple[str, str], tuple[Resource, int]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: tuple[str, str], size: int) -> Resource | None:
        """The kept resource at ``key`` if a tree of ``size`` covers it, else None."""
        held = self._items.get(key)
        if held is None or held[1] > size:
            return None
        self._items.move_to_end(key)
        return held[0]

    def put(self, key: tuple[str, str], resource: Resource, needs: int) -> None:
        """Keep a full tile or bundle (``resource``, covered by a tree of ``needs`` leaves)."""
        cost = len(resource.body)
        if cost > self.max_bytes or key in self._items:
            return
        self._items[key] = (resource, needs)
        self.bytes += cost
        while self.bytes > self.max_bytes:
            _, (dropped, _) = self._items.popitem(last=False)
            self.bytes -= len(dropped.body)


class _Readers:
    """A tenant's pool of :class:`TiledLog` handles (see the module docstring)."""

    def __init__(
        self, first: TiledLog, limit: int, open_log: Callable[[], TiledLog], in_loop: bool
    ) -> None:
        self._idle = [first]
        self._first = first
        self._open_log = open_log
        self._slots = asyncio.Semaphore(limit)
        self._in_loop = in_loop

    async def run(self, fn: Callable[[TiledLog], T]) -> T:
        """``fn(log)`` in a thread, on a handle no other read of the pool is using; or, with
        reads in the loop, on the first handle, right here."""
        if self._in_loop:
            return fn(self._first)
        async with self._slots:
            log = self._idle.pop() if self._idle else await asyncio.to_thread(self._open_log)
            try:
                return await asyncio.to_thread(fn, log)
            finally:
                self._idle.append(log)


class TileServer:
    """The handlers' state: tenants, their handles, the cached latest checkpoints and tiles.

    ``tenants()`` lists the tenants to serve; ``log_tenants()``, when given, every tenant
    whose log exists, published or not, so that a request for one without a kept checkpoint
    is told so rather than "no log" (read along with ``tenants()``, as rarely).
    ``open_source(tenant)`` gives one's :class:`~store.tiles.TileSource` (called in a thread,
    once per handle of the tenant's pool: at most ``readers`` times). ``cache_bytes`` bounds
    the full tiles and bundles kept (0: none). ``reads_in_loop``: read on the event loop, one
    handle per tenant (see the module docstring: for SQLite). ``clock`` is monotonic seconds.
    """

    def __init__(
        self,
        tenants: Callable[[], list[str]],
        open_source: Callable[[str], TileSource],
        *,
        ttl: float = DEFAULT_TTL,
        readers: int = DEFAULT_READERS,
        cache_bytes: int = 0,
        reads_in_loop: bool = False,
        log_tenants: Callable[[], list[str]] | None = None,
        clock: Callable[[], float] = time.monotonic,
        logger: logging.Logger | None = None,
    ) -> None:
        if ttl < 0:
            raise UsageError("ttl must not be negative")
        if readers < 1:
            raise UsageError("a tenant needs at least one reader")
        self._list_tenants = tenants
        self._list_logs = log_tenants
        self._open_source = open_source
        self._ttl = ttl
        self._readers = readers
        self._in_loop = reads_in_loop
        self.cache = ResourceCache(cache_bytes)
        self._clock = clock
        self.logger = logger or logging.getLogger(LOGGER_NAME)
        self._known: set[str] = set()
        self._unpublished: set[str] = set()  # logs without a kept checkpoint
        self._listed_at: float | None = None
        self._pools: dict[str, _Readers] = {}
        self._latest: dict[str, tuple[float, Resource, int]] = {}
        self._pairs: dict[tuple[str, int], asyncio.Future[tuple[Resource, Resource]]] = {}
        self._lock = asyncio.Lock()

    async def _pool(self, tenant: str) -> _Readers:
        pool = self._pools.get(tenant)
        if pool is not None:
            return pool
        try:
            check_tenant(tenant)
        except MalformedError:
            raise NotFoundError("no such log") from None
        async with self._lock:
            pool = self._pools.get(tenant)
            if pool is not None:
                return pool
            now = self._clock()
            if tenant not in self._known and (
                self._listed_at is None or now - self._listed_at >= self._ttl
            ):
                self._known, self._unpublished = await asyncio.to_thread(self._listing)
                self._listed_at = now
            if tenant in self._unpublished:
                raise NotFoundError(f"the tenant {tenant!r} has no kept checkpoint yet")
            if tenant not in self._known:
                raise NotFoundError(f"no log for the tenant {tenant!r}")

            def open_log() -> TiledLog:
                return TiledLog(self._open_source(tenant))

            pool = _Readers(
                await asyncio.to_thread(open_log), self._readers, open_log, self._in_loop
            )
            self._pools[tenant] = pool
            return pool

    def _listing(self) -> tuple[set[str], set[str]]:
        """The tenants served, and those whose log exists without a kept checkpoint."""
        known = set(self._list_tenants())
        logs = set() if self._list_logs is None else set(self._list_logs())
        return known, logs - known

    async def _checkpoint(self, tenant: str, pool: _Readers) -> tuple[Resource, int]:
        now = self._clock()
        held = self._latest.get(tenant)
        if held is not None and now - held[0] < self._ttl:
            return held[1], held[2]
        resource, size = await pool.run(TiledLog.checkpoint)
        self._latest[tenant] = (now, resource, size)
        return resource, size

    async def _leaf_pair(
        self, tenant: str, pool: _Readers, index: int, size: int, item: Tile | Bundle
    ) -> Resource:
        """Full bundle ``index`` or full level-0 tile ``index`` (``item``): both come from one
        read (:meth:`TiledLog.leaf_pair`), both are kept, and a request for either while that
        read runs waits for it rather than reading again (a follower asks for both at once)."""
        key = (tenant, index)
        task = self._pairs.get(key)
        if task is None:
            task = asyncio.ensure_future(self._read_pair(tenant, pool, index, size))
            self._pairs[key] = task
            task.add_done_callback(lambda done: self._pair_done(key, done))
        # Shielded: a client that goes away does not cancel the read the other one waits for.
        bundle, tile = await asyncio.shield(task)
        return bundle if isinstance(item, Bundle) else tile

    async def _read_pair(
        self, tenant: str, pool: _Readers, index: int, size: int
    ) -> tuple[Resource, Resource]:
        pair = await pool.run(lambda log: log.leaf_pair(index, size))
        if self.cache.max_bytes:
            # Kept before the read counts as done: no request between finds neither.
            needs = (index + 1) * TILE_WIDTH
            self.cache.put((tenant, Bundle(index).path()), pair[0], needs)
            self.cache.put((tenant, Tile(0, index).path()), pair[1], needs)
        return pair

    def _pair_done(
        self, key: tuple[str, int], task: asyncio.Future[tuple[Resource, Resource]]
    ) -> None:
        if self._pairs.get(key) is task:
            del self._pairs[key]
        if not task.cancelled():
            task.exception()  # retrieved here: every waiter may have gone away

    async def handle(self, request: web.Request) -> web.StreamResponse:
        """``GET`` (and ``HEAD``) of any path: see the module docstring."""
        started = time.perf_counter()
        raw = request.rel_url.raw_path
        try:
            response = await self._answer(raw)
        except MalformedError as e:
            response = _error(400, str(e))
        except NotFoundError as e:
            response = _error(404, str(e))
        except (CorruptError, BackendError, TlogError) as e:
            self.logger.error(json.dumps({"event": "store-error", "error": str(e)[:500]}))
            response = _error(500, "the store failed; see the server's log")
        if self.logger.isEnabledFor(logging.INFO):
            self.logger.info(
                _request_line(request.method, raw, response.status, time.perf_counter() - started)
            )
        return response

    async def refuse(self, request: web.Request) -> web.StreamResponse:
        """Any method but GET and HEAD: 405 with ``Allow``, as every answer is (the CORS
        header, no-store, one log line). OPTIONS too: the log is read by simple GETs, which
        need no preflight."""
        response = _error(405, f"{request.method} is not allowed: the log is read-only")
        response.headers["Allow"] = "GET, HEAD"
        if self.logger.isEnabledFor(logging.INFO):
            raw = request.rel_url.raw_path
            self.logger.info(_request_line(request.method, raw, 405, 0.0))
        return response

    async def _answer(self, raw: str) -> web.Response:
        tenant, sep, rest = raw.removeprefix("/").partition("/")
        if not raw.startswith("/") or not sep:
            raise NotFoundError("no such resource")
        if rest == "checkpoint":
            pool = await self._pool(tenant)
            resource, _ = await self._checkpoint(tenant, pool)
        elif rest.startswith("tile/"):
            pool = await self._pool(tenant)
            _, size = await self._checkpoint(tenant, pool)
            key = (tenant, rest)
            kept = self.cache.get(key, size) if self.cache.max_bytes else None
            if kept is not None:
                resource = kept
            else:
                item = parse_tile_path(rest)
                if item.is_full and extent(item) <= size and _is_leaf_level(item):
                    resource = await self._leaf_pair(tenant, pool, item.index, size, item)
                else:
                    resource = await pool.run(lambda log: log.tile_or_bundle(rest, size))
                    if self.cache.max_bytes and resource.cache_control == IMMUTABLE_CACHE:
                        self.cache.put(key, resource, extent(item))
        else:
            raise NotFoundError("no such resource")
        return web.Response(
            body=resource.body,
            headers={
                "Content-Type": resource.content_type,
                "Cache-Control": resource.cache_control,
                "Access-Control-Allow-Origin": "*",
            },
        )


def _is_leaf_level(item: Tile | Bundle) -> bool:
    return isinstance(item, Bundle) or item.level == 0


def _request_line(method: str, raw: str, status: int, seconds: float) -> str:
    """The request's log line: ``json.dumps`` of {method, path (200 characters at most),
    status, duration_ms}, built by hand when the path needs no escaping (the common case)."""
    path = raw[:200]
    ms = round(seconds * 1000, 3)
    if path.isascii() and path.isprintable() and '"' not in path and "\\" not in path:
        quoted = f'"{path}"'
    else:
        quoted = json.dumps(path)
    verb = f'"{method}"' if method.isascii() and method.isalpha() else json.dumps(method)
    return f'{{"method": {verb}, "path": {quoted}, "status": {status}, "duration_ms": {ms}}}'


def _error(status: int, message: str) -> web.Response:
    line = message.splitlines()[0] if message else "error"
    return web.Response(
        status=status,
        body=(line + "\n").encode("utf-8"),
        headers={
            "Content-Type": "text/plain; charset=utf-8",
            "Cache-Control": "no-store",
            "Access-Control-Allow-Origin": "*",  # a browser's monitor may read why, too
        },
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
    app.router.add_route("*", "/{tail:.*}", server.refuse)  # aiohttp's own 405 had neither
    return app


def _urls(addresses: list[tuple[str, int]]) -> list[str]:
    return [f"http://[{h}]:{p}" if ":" in h else f"http://{h}:{p}" for h, p in addresses]


async def _serve(
    app: web.Application,
    where: tuple[str, int] | socket.socket,
    announce: Callable[[list[str]], None] | None,
    shutdown_timeout: float,
    parent_gone: int | None = None,
    asked: Callable[[], bool] | None = None,
) -> None:
    """Serve until SIGTERM or SIGINT, or until ``parent_gone`` (the read end of a pipe whose
    write end only the parent holds) reads end-of-file: the parent died, even by SIGKILL.
    ``asked()``: whether a stop was asked before the loop's own signal handlers were in
    place (a worker's start-up)."""
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=shutdown_timeout)
    await runner.setup()
    try:
        site: web.BaseSite
        if isinstance(where, socket.socket):
            site = web.SockSite(runner, where)
        else:
            site = web.TCPSite(runner, *where)
        try:
            await site.start()
        except OSError as e:
            host, port = where if isinstance(where, tuple) else where.getsockname()[:2]
            raise UsageError(
                f"cannot listen on {_hostport(host, port)}: {e.strerror or e}"
            ) from None
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        if asked is not None and asked():
            stop.set()
        if parent_gone is not None:
            loop.add_reader(parent_gone, stop.set)
        if announce is not None:
            announce(_urls([(a[0], a[1]) for a in runner.addresses]))
        await stop.wait()
        if asked is not None:
            # A worker stops once: a second signal (a terminal's Ctrl-C reaches the whole
            # group) is ignored from here, rather than land on the loop's wakeup fd while it
            # closes ("Exception ignored ... BrokenPipeError", seen once in 14 stops). The
            # parent's deadline still kills a worker that does not stop.
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)
                signal.signal(sig, signal.SIG_IGN)
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
    asyncio.run(_serve(app, (host, port), announce, shutdown_timeout))


def serve_workers(
    make_server: Callable[[], TileServer],
    *,
    host: str,
    port: int,
    workers: int,
    announce: Callable[[list[str]], None],
    shutdown_timeout: float = 5.0,
) -> int:
    """Serve with ``workers`` processes (pre-fork) sharing one listening socket: each worker
    makes its own server with ``make_server`` (its own store handles, cache and loop), so
    that the server uses as many cores. Until SIGTERM or SIGINT, forwarded to the workers;
    when a worker exits, the others are stopped too, and a line on stderr says which and how.
    This process owns its workers' lifetime: a worker stops when this process dies, however
    it dies (a parent-death pipe: no orphan keeps the port), and one that has not stopped
    ``shutdown_timeout`` + 2 s after SIGTERM is killed. A stop asked during a worker's
    start-up is made once it serves. The exit status: 0 when every worker stopped gracefully
    (asked here, or by a SIGTERM of its own: systemd's default KillMode signals every process
    of the unit, and ``tlog-witness serve`` takes it alike); 1 when a worker died or failed,
    or was killed here. UsageError when it cannot listen.

    Requires: no thread and no open store handle in this process (a fork copies neither
    safely): ``make_server`` opens what a worker needs, in the worker."""
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.create_server((host, port), family=family, backlog=1024)
    except OSError as e:
        raise UsageError(f"cannot listen on {_hostport(host, port)}: {e.strerror or e}") from None
    sock.setblocking(False)
    bound = sock.getsockname()
    sys.stdout.flush()
    sys.stderr.flush()
    # Only this process holds the write end: when it dies, every worker reads end-of-file.
    parent_gone, alive = os.pipe()
    # SIGTERM and SIGINT wait (blocked) until each process has its handlers: a worker takes
    # one during its start-up as a stop to make once it serves, never as a crash.
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, _STOPS)
    pids: list[int] = []
    try:
        for _ in range(workers):
            pid = os.fork()
            if pid == 0:  # the worker: serve on the shared socket, never return to the caller
                _worker(make_server, sock, shutdown_timeout, parent_gone, alive, blocked)
            pids.append(pid)
    except BaseException:  # a fork failed: the workers already started stop with this process
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        os.close(alive)
        raise
    finally:
        sock.close()
        os.close(parent_gone)
    children = _Workers(pids, shutdown_timeout + 2.0)
    previous = {sig: signal.signal(sig, children.stop) for sig in _STOPS}
    signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
    try:
        announce(_urls([(str(bound[0]), int(bound[1]))]))
        return children.wait()
    finally:
        os.close(alive)
        for sig, handler in previous.items():
            # Once stopping, a second stop signal (Ctrl-C twice; systemd and a terminal both
            # signalling) has nothing left to stop: it must not kill the command on its way
            # out, with 130 instead of its status. Otherwise the caller's handlers come back.
            # SIG_IGN, not a Python no-op: the interpreter resets its own handlers to the
            # default while it exits, and a signal then killed the command (status -2).
            signal.signal(sig, signal.SIG_IGN if children.stopping else handler)


class _Workers:
    """The supervisor's live workers, and when the last of them must have stopped."""

    def __init__(self, pids: list[int], grace: float) -> None:
        self.live = set(pids)
        self.grace = grace  # seconds from the first stop to the kill
        self.deadline: float | None = None

    @property
    def stopping(self) -> bool:
        return self.deadline is not None

    def stop(self, _signum: int = signal.SIGTERM, _frame: object = None) -> None:
        """SIGTERM to every live worker (also the SIGTERM and SIGINT handler)."""
        if self.deadline is None:
            self.deadline = time.monotonic() + self.grace
        for pid in sorted(self.live):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)

    def wait(self) -> int:
        """Reap the workers until none is left; the exit status (:func:`serve_workers`)."""
        failed = False
        while self.live:
            # Polled, not a blocking wait: a wait is resumed after a signal (PEP 475), and
            # the deadline must be kept even when no worker ever exits.
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                if self.deadline is not None and time.monotonic() > self.deadline:
                    for late in sorted(self.live):
                        _say(f"a worker (pid {late}) did not stop in time; killed")
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(late, signal.SIGKILL)
                        os.waitpid(late, 0)
                    return 1
                time.sleep(0.05)
                continue
            self.live.discard(pid)
            code = os.waitstatus_to_exitcode(status)
            if not self.stopping and code == 0:
                # It stopped gracefully on a SIGTERM of its own: systemd's default KillMode
                # signals every process of the unit at once. A stop, as tlog-witness takes it.
                self.stop()
            elif not self.stopping:  # it died: the server stops as a whole, and fails
                _say(f"a worker (pid {pid}) {_how(code)}; stopping the others")
                failed = True
                self.stop()
            elif code not in (0, -signal.SIGTERM):  # SIGTERM: asked, and it stopped
                failed = True
        return 1 if failed else 0


_STOPS = {signal.SIGTERM, signal.SIGINT}


def _worker(
    make_server: Callable[[], TileServer],
    sock: socket.socket,
    shutdown_timeout: float,
    parent_gone: int,
    alive: int,
    blocked: set[int | signal.Signals],
) -> NoReturn:
    """A worker's life, in the forked child: serve until asked to stop, then exit (0, or 1
    with a line on stderr when it failed). Called with SIGTERM and SIGINT blocked."""
    asked = [False]

    def ask(_signum: int, _frame: object) -> None:
        asked[0] = True

    status = 0
    try:
        for sig in _STOPS:
            signal.signal(sig, ask)  # until the loop's own handlers replace these
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        os.close(alive)  # (a parent dead before the loop starts: the pipe is at EOF)
        asyncio.run(
            _serve(
                make_app(make_server()), sock, None, shutdown_timeout, parent_gone,
                lambda: asked[0],
            )
        )  # fmt: skip
    except BaseException as e:  # a worker reports and exits, whatever it was
        _say(f"a worker failed: {(str(e).strip().splitlines() or [type(e).__name__])[0]}")
        status = 1
    finally:
        os._exit(status)


def _how(code: int) -> str:
    """An exit code of os.waitstatus_to_exitcode, in words."""
    if code < 0:
        return f"was killed by {signal.Signals(-code).name}"
    return f"exited with status {code}"


def _say(line: str) -> None:
    print(f"tlog-store: serve: {line}", file=sys.stderr, flush=True)


def _hostport(host: str, port: int) -> str:
    """``host:port``, an IPv6 address in brackets (``[::1]:8080``)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
