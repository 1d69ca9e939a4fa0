"""Running the witness application: one process, or a supervisor and N worker processes.

``tlog-witness serve`` hands :func:`serve` a factory that opens the state and builds the
:func:`witness.server.make_app` application. The event loop is uvloop's where it is installed
(the project depends on it on Linux and macOS), asyncio's otherwise.

**One process** (``workers = 1``, the default): the application listens on ``host:port``
(every address the host resolves to), prints ``vkey <vkey>`` per witness key and ``listening
on <url>`` per address on stdout once it accepts connections, and stops gracefully on SIGTERM
or SIGINT (requests in flight get ``shutdown_timeout`` seconds).

**N workers** (``workers > 1``): one Python process runs on one core at a time, so a witness
that is to use several cores runs several processes on one state. The supervisor (the process
started) binds ``host:port`` itself, with ``SO_REUSEPORT`` and without listening, only to learn
the port (``:0`` picks one) and hold it; then it forks the workers. Each worker opens its own
connection to the state, builds its own application and listens on its own socket bound to
the same addresses with ``SO_REUSEPORT``: the kernel spreads new connections over the workers.
The supervisor prints the same lines as one process once every worker accepts connections.

What keeps N processes correct is the state, not the supervisor: each worker serialises the
requests of one log among its own connections, and every change of a log's stored checkpoint
is a compare-and-swap in the database (SQLite or PostgreSQL), so two workers racing on one log
never both cosign — the loser answers 409 with the stored size and the client resynchronises,
as with any other race. See :mod:`witness.server` and :mod:`witness.state`.

Signals and failures: SIGTERM or SIGINT to the supervisor is passed on to every worker, which
stops gracefully; the supervisor exits 0 when all have. A worker that dies on its own (a crash,
the OOM killer) makes the supervisor stop the others and exit 1, naming it, so that a service
manager restarts the whole witness. A worker whose supervisor dies gets SIGTERM (Linux
``PR_SET_PDEATHSIG``; elsewhere it notices within a second) and stops.

Per-process things: ``/metrics`` counts the requests of the worker that answers the scrape,
every sample labelled ``worker="N"`` (so that a scraper sees one series per worker, not one
counter that keeps going back); every worker writes its own JSON request lines to the
inherited stderr (each line one ``write``).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import logging
import os
import signal
import socket
import sys
from collections.abc import Callable, Coroutine, Iterator, Sequence
from typing import Any

from aiohttp import web

from tlog.errors import UsageError
from tlog.keys import SignerKey
from witness.config import format_listen
from witness.connections import GuardedSite
from witness.open import open_state
from witness.server import GUARD_KEY, LOGGER_NAME, RUNNER_OPTIONS_KEY, make_app
from witness.settings import ServeSettings, cosigner

__all__ = ["AppFactory", "app_factory", "request_logger", "serve"]

AppFactory = Callable[[int | None], tuple[web.Application, Callable[[], None]]]
"""Opens the state and builds the application for worker N (None: the one process); returns
it with the function that closes the state. Called once per process that serves (after the
fork, in a worker)."""

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
_PARENT_POLL = 1.0  # seconds between checks that the supervisor is alive, without prctl
_READY = b"r"


def _run(main: Coroutine[Any, Any, None]) -> None:
    """Run ``main`` on uvloop's event loop when installed (faster request handling), else
    asyncio's."""
    try:
        import uvloop  # noqa: PLC0415 - optional at run time
    except ImportError:  # pragma: no cover - a dependency on the platforms tested
        asyncio.run(main)
        return
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(main)


def _announce(
    addresses: list[Any], vkeys: list[str], logger: logging.Logger, **extra: object
) -> None:
    """The lines that say the witness serves: ``vkey`` and ``listening on`` on stdout (what
    scripts and tests wait for), and the ``start`` event in the log."""
    urls = [_url(a[0], a[1]) for a in addresses]
    lines = [f"vkey {v}\n" for v in vkeys] + [f"listening on {u}\n" for u in urls]
    out = sys.stdout.buffer
    out.write("".join(lines).encode("utf-8"))
    out.flush()
    logger.info(json.dumps({"event": "start", "listen": urls, "vkeys": vkeys, **extra}))


def _url(host: str, port: int) -> str:
    return f"http://{format_listen(host, port)}"


def serve(
    factory: AppFactory,
    *,
    host: str,
    port: int,
    workers: int,
    shutdown_timeout: float,
    vkeys: list[str],
    logger: logging.Logger,
) -> int:
    """Serve until SIGTERM or SIGINT; the exit status (0, or 1 when a worker failed).

    Requires: ``workers`` >= 1; no thread started in this process yet when ``workers`` > 1
    (it forks).
    """
    if workers < 1:
        raise UsageError("workers must be at least 1")
    try:
        if workers == 1:
            _run(_serve_one(factory, host, port, shutdown_timeout, vkeys, logger))
            return 0
        return _supervise(factory, host, port, workers, shutdown_timeout, vkeys, logger)
    finally:
        # Stopped: a further SIGTERM (a service manager signalling every process, a second
        # Ctrl-C) must not kill the interpreter on its way out, with status 143 for 0.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)


async def _serve_sites(
    factory: AppFactory,
    worker: int | None,
    shutdown_timeout: float,
    make_sites: Callable[[web.AppRunner], list[web.BaseSite]],
    started: Callable[[web.AppRunner], None],
    logger: logging.Logger,
    stop_event: dict[str, object],
    extra_stop: Callable[[asyncio.Event], Coroutine[Any, Any, None]] | None = None,
) -> None:
    app, close = factory(worker)
    try:
        _raise_nofile(app[GUARD_KEY].limits.max_connections, logger)
        # access_log=None: the application logs its own JSON line per request.
        runner = web.AppRunner(
            app,
            access_log=None,
            shutdown_timeout=shutdown_timeout,
            **app.get(RUNNER_OPTIONS_KEY, {}),
        )
        await runner.setup()
        try:
            for site in make_sites(runner):
                try:
                    await site.start()
                except OSError as e:
                    raise _cannot_listen(site.name.removeprefix("http://"), e) from None
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, stop.set)
            watcher = None if extra_stop is None else asyncio.create_task(extra_stop(stop))
            started(runner)
            await stop.wait()
            if watcher is not None:
                watcher.cancel()
            logger.info(json.dumps(stop_event))
        finally:
            await runner.cleanup()
    finally:
        close()


async def _serve_one(
    factory: AppFactory,
    host: str,
    port: int,
    shutdown_timeout: float,
    vkeys: list[str],
    logger: logging.Logger,
) -> None:
    def started(runner: web.AppRunner) -> None:
        _announce(runner.addresses, vkeys, logger)

    await _serve_sites(
        factory,
        None,
        shutdown_timeout,
        lambda runner: [
            GuardedSite(runner, sock, runner.app[GUARD_KEY]) for sock in _listen_all(host, port)
        ],
        started,
        logger,
        {"event": "stop"},
    )


# --- several workers -----------------------------------------------------------------------------


def _addresses(host: str, port: int) -> list[tuple[int, Any]]:
    """(family, sockaddr) of every address ``host`` resolves to, without repeats."""
    try:
        infos = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP, flags=socket.AI_PASSIVE
        )
    except OSError as e:
        raise UsageError(f"cannot resolve the listen host {host!r}: {e}") from None
    out: list[tuple[int, Any]] = []
    for family, _, _, _, sockaddr in infos:
        if (family, sockaddr) not in out:
            out.append((family, sockaddr))
    return out


def _cannot_listen(where: str, e: OSError) -> UsageError:
    # asyncio's own message repeats the address; the errno's text is the reason.
    reason = os.strerror(e.errno) if e.errno else str(e)
    return UsageError(f"cannot listen on {where}: {reason}")


def _bound(family: int, sockaddr: Any, *, listen: bool, reuse_port: bool = True) -> socket.socket:
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind(sockaddr)
        if listen:
            sock.listen(1024)
            sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


def _listen_all(host: str, port: int) -> list[socket.socket]:
    """Listening sockets on every address of ``host`` (one process); with port 0, one port
    for all."""
    return _bind_all(
        host, port, lambda family, sockaddr: _bound(family, sockaddr, listen=True, reuse_port=False)
    )


def _bind_all(
    host: str, port: int, bind: Callable[[int, Any], socket.socket]
) -> list[socket.socket]:
    """``bind(family, sockaddr)`` for every address of ``host``; with port 0, the port the
    first one took for all. All or none: a failure closes what was bound (UsageError)."""
    socks: list[socket.socket] = []
    try:
        for family, resolved in _addresses(host, port):
            sockaddr = resolved
            if port == 0 and socks:
                sockaddr = (resolved[0], socks[0].getsockname()[1], *resolved[2:])
            try:
                socks.append(bind(family, sockaddr))
            except OSError as e:
                raise _cannot_listen(format_listen(host, port), e) from None
    except BaseException:
        for s in socks:
            s.close()
        raise
    return socks


_NOFILE_MARGIN = 256  # descriptors beyond the connections: listening sockets, state, logs


def _raise_nofile(max_connections: int, logger: logging.Logger) -> None:
    """Raise this process's soft RLIMIT_NOFILE towards ``max_connections`` + a margin (up to
    the hard limit); log a warning when even the hard limit is lower: the connection cap would
    then never be reached, and clients past the descriptor limit would be reset instead."""
    try:
        import resource  # noqa: PLC0415 - POSIX only
    except ImportError:  # pragma: no cover
        return
    need = max_connections + _NOFILE_MARGIN
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < need:
        target = need if hard == resource.RLIM_INFINITY else min(need, hard)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft != resource.RLIM_INFINITY and soft < need:
        logger.warning(
            json.dumps(
                {
                    "event": "nofile-limit",
                    "limit": soft,
                    "max_connections": max_connections,
                    "advice": f"raise LimitNOFILE to at least {need}",
                }
            )
        )


def _reserve(host: str, port: int) -> list[socket.socket]:
    """Bind (not listen) every address of ``host``; with port 0, one port for all.

    Each address is first bound by a probe socket *without* ``SO_REUSEPORT``, which fails if
    anything listens there — in particular another witness's workers, whose own
    ``SO_REUSEPORT`` sockets would otherwise let a second witness join their port and answer
    half of its connections with another key and another state."""

    def reserve(family: int, sockaddr: Any) -> socket.socket:
        with _bound(family, sockaddr, listen=False, reuse_port=False) as probe:
            sockaddr = (sockaddr[0], probe.getsockname()[1], *sockaddr[2:])
        return _bound(family, sockaddr, listen=False)

    return _bind_all(host, port, reserve)


def _die_with_parent(parent: int) -> None:
    """Ask the kernel for SIGTERM when the supervisor dies (Linux); then check it did not
    die already."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:
        os._exit(1)


async def _parent_gone(parent: int, stop: asyncio.Event) -> None:
    while os.getppid() == parent:
        await asyncio.sleep(_PARENT_POLL)
    stop.set()


def _worker(
    factory: AppFactory,
    held: list[socket.socket],
    shutdown_timeout: float,
    ready_fd: int,
    index: int,
    parent: int,
    logger: logging.Logger,
) -> int:
    """The body of a forked worker; its exit status."""
    _die_with_parent(parent)
    addresses = [(s.family, s.getsockname()) for s in held]
    for s in held:
        s.close()

    def sites(runner: web.AppRunner) -> list[web.BaseSite]:
        guard = runner.app[GUARD_KEY]
        return [GuardedSite(runner, _bound(f, a, listen=True), guard) for f, a in addresses]

    def started(runner: web.AppRunner) -> None:
        logger.info(json.dumps({"event": "worker-start", "worker": index, "pid": os.getpid()}))
        os.write(ready_fd, _READY)
        os.close(ready_fd)

    try:
        _run(
            _serve_sites(
                factory,
                index,
                shutdown_timeout,
                sites,
                started,
                logger,
                {"event": "worker-stop", "worker": index, "pid": os.getpid()},
                lambda stop: _parent_gone(parent, stop),
            )
        )
    except Exception as e:
        print(f"tlog-witness: worker {index}: {e}", file=sys.stderr, flush=True)
        return 1
    return 0


@contextlib.contextmanager
def _signals_blocked() -> Iterator[None]:
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


class _Children:
    """The supervisor's workers (pid -> worker index), and whether it is stopping."""

    def __init__(self) -> None:
        self.pids: dict[int, int] = {}
        self.stopping = False

    def stop(self, signum: int = signal.SIGTERM, frame: object = None) -> None:
        """Stop every worker (also the SIGTERM and SIGINT handler)."""
        self.stopping = True
        for pid in self.pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)


def _supervise(
    factory: AppFactory,
    host: str,
    port: int,
    workers: int,
    shutdown_timeout: float,
    vkeys: list[str],
    logger: logging.Logger,
) -> int:
    held = _reserve(host, port)
    parent = os.getpid()
    ready_r, ready_w = os.pipe()
    children = _Children()
    try:
        # Signals wait until every child exists and the handler knows it.
        with _signals_blocked():
            for index in range(workers):
                pid = os.fork()
                if pid == 0:  # the worker
                    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGINT})
                    os.close(ready_r)
                    status = 1
                    try:
                        status = _worker(
                            factory, held, shutdown_timeout, ready_w, index, parent, logger
                        )
                    finally:
                        os._exit(status)
                children.pids[pid] = index
            os.close(ready_w)
            signal.signal(signal.SIGTERM, children.stop)
            signal.signal(signal.SIGINT, children.stop)
        status = _watch(children, ready_r, workers, held, vkeys, logger)
        logger.info(json.dumps({"event": "stop"}))
        return status
    finally:
        os.close(ready_r)
        for s in held:
            s.close()


def _watch(
    children: _Children,
    ready_r: int,
    workers: int,
    held: list[socket.socket],
    vkeys: list[str],
    logger: logging.Logger,
) -> int:
    """Announce once every worker is ready, then wait for them all; the exit status."""
    status = 0
    ready = 0
    announced = False
    while children.pids:
        if not announced and not children.stopping:
            # Until every worker is ready: its byte, or end of file when one died first.
            got = os.read(ready_r, 64)
            ready += len(got)
            if got and ready < workers:
                continue
            announced = True
            if ready >= workers:
                _announce([s.getsockname() for s in held], vkeys, logger, workers=workers)
            continue
        try:
            pid, wait_status = os.wait()
        except ChildProcessError:
            break
        if pid not in children.pids:
            continue
        index = children.pids.pop(pid)
        code = os.waitstatus_to_exitcode(wait_status)
        if not children.stopping and code == 0:
            # It stopped gracefully: it was sent SIGTERM itself (systemd's default
            # KillMode signals every process of the unit at once). Stop the others.
            children.stop()
        elif not children.stopping:
            how = f"signal {-code}" if code < 0 else f"status {code}"
            print(
                f"tlog-witness: worker {index} (pid {pid}) exited with {how}; stopping",
                file=sys.stderr,
                flush=True,
            )
            status = 1
            children.stop()
        elif code != 0:
            status = 1
    return status


# --- serving from settings -------------------------------------------------------------------


def request_logger() -> logging.Logger:
    """The server's logger (:data:`witness.server.LOGGER_NAME`), set to write each record's
    message (one JSON line) to standard error, as ``tlog-witness serve`` does."""
    # The logging HOWTO's "Optimization": the records carry no caller, thread or process,
    # which the JSON lines do not show; it saves a frame walk and three calls per request.
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    logger = logging.getLogger(LOGGER_NAME)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger.handlers[:] = [handler]
    logger.setLevel(logging.INFO)
    logger.propagate = False
    return logger


def app_factory(
    s: ServeSettings, name: str, keys: Sequence[SignerKey], logger: logging.Logger
) -> AppFactory:
    """The :data:`AppFactory` of settings ``s``: each call opens the state (which must exist)
    and builds the application of witness ``name`` with its ``keys``
    (:func:`witness.settings.read_witness_keys`)."""
    signers = [cosigner(k) for k in keys]

    def factory(worker: int | None) -> tuple[web.Application, Callable[[], None]]:
        state = open_state(db=s.db, postgres=s.postgres, create=False)
        try:
            app = make_app(
                state, signers, name=name, logger=logger, worker=worker, **s.app_options()
            )
        except BaseException:
            state.close()
            raise
        return app, state.close

    return factory
