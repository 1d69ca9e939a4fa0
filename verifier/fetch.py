"""Fetching a tiled log's resources over HTTP(S) (:class:`Fetcher`), for ``tlog-verify
follow`` (:mod:`verifier.follow`).

The standard library only (``http.client`` keep-alive connections, ``urllib`` for a redirect):
the verifier's base install has no HTTP library. A fetch that fails — the network, a status
other than 200, a body over its limit — is an :class:`~verifier.report.InputError` (the round
is unusable); a caller that judges a body's length itself asks for it ``cut`` instead.
``Content-Encoding: gzip`` is decoded; the limits are the decoded sizes' (a full tile of hashes
is larger gzipped), and decoding stops one byte past them (a gzip bomb stops there).
"""

from __future__ import annotations

import gzip
import http.client
import io
import itertools
import threading
import urllib.error
import urllib.parse
import urllib.request
import zlib
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor

from tlog.errors import UsageError
from verifier.report import InputError

__all__ = ["DEFAULT_CONNECTIONS", "DEFAULT_TIMEOUT", "FETCH_BATCH", "Fetcher"]

DEFAULT_TIMEOUT = 30.0
"""Seconds for each HTTP request."""

DEFAULT_CONNECTIONS = 4
"""Keep-alive connections that fetch bundles and tiles ahead of the checks."""

FETCH_BATCH = 16
"""Paths a worker thread fetches in a row (see :meth:`Fetcher.get_many`)."""


def _wire_limit(limit: int, encoding: str) -> int:
    """The most bytes a body of at most ``limit`` bytes takes on the wire: ``limit`` itself,
    or gzip's worst case (deflate stores an incompressible body in blocks of at most 65,535
    bytes, 5 bytes of header each, and gzip adds at most a few hundred bytes of header and
    trailer) — a full tile of random hashes is *larger* gzipped. The decoded size is checked
    against ``limit`` itself, while decoding (a gzip bomb stops there)."""
    if encoding != "gzip":
        return limit
    return limit + 5 * (limit // 65_535 + 1) + 1024


def _gunzip_prefix(body: bytes, limit: int) -> bytes:
    """The first ``limit`` bytes (at most) that a gzip body cut short decodes to."""
    z = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        return z.decompress(body, limit)
    except zlib.error:
        return b""


class Fetcher:
    """GETs of a tiled log's resources under ``url`` (``http``/``https``, ending in ``/``).

    Requests go over keep-alive connections (``http.client``), one per thread: the calling
    thread's for :meth:`get`, and up to ``connections`` worker threads' for :meth:`get_many`,
    which fetches ahead while the caller checks what arrived. A connection the server closed
    while idle is reopened once. A redirect (301, 302, 303, 307, 308) is followed by
    ``urllib`` for that one request, as before."""

    def __init__(
        self, url: str, *, timeout: float = DEFAULT_TIMEOUT, connections: int = DEFAULT_CONNECTIONS
    ) -> None:
        if not url.startswith(("http://", "https://")):
            raise UsageError(f"the log URL {url!r} is not http:// or https://")
        self.url = url if url.endswith("/") else url + "/"
        parts = urllib.parse.urlsplit(self.url)
        if not parts.hostname:
            raise UsageError(f"the log URL {url!r} has no host")
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port
        self._base = parts.path
        self.timeout = timeout
        self.connections = max(1, connections)
        self.requests = 0
        self.bytes = 0
        self._lock = threading.Lock()
        self._local = threading.local()
        self._opened: list[http.client.HTTPConnection] = []
        self._pool: ThreadPoolExecutor | None = None

    def _connection(self, fresh: bool = False) -> http.client.HTTPConnection:
        conn: http.client.HTTPConnection | None = getattr(self._local, "conn", None)
        if conn is not None and not fresh:
            return conn
        if conn is not None:
            conn.close()
        if self._https:
            conn = http.client.HTTPSConnection(self._host, self._port, timeout=self.timeout)
        else:
            conn = http.client.HTTPConnection(self._host, self._port, timeout=self.timeout)
        self._local.conn = conn
        with self._lock:
            self._opened.append(conn)
        return conn

    def _exchange(self, path: str, limit: int) -> tuple[int, str, bytes]:
        """(status, Content-Encoding, at most limit + 1 body bytes) over this thread's
        connection; a reused connection found closed is reopened once."""
        headers = {"Accept-Encoding": "gzip, identity", "User-Agent": "tlog-verify"}
        for attempt in (0, 1):
            conn = self._connection(fresh=attempt == 1)
            reused = conn.sock is not None
            try:
                conn.request("GET", self._base + path, headers=headers)
                response = conn.getresponse()
                encoding = response.headers.get("Content-Encoding", "identity")
                body = response.read(_wire_limit(limit, encoding) + 1)
                if not response.isclosed():
                    conn.close()  # the body is longer than the limit: not reusable
                return response.status, encoding, body
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                conn.close()
                if attempt or not reused:
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    def get(self, path: str, limit: int, *, cut: bool = False) -> bytes:
        """The body of ``<url><path>``: status 200 and at most ``limit`` bytes, else
        InputError (the round is unusable). With ``cut``, a longer body is not refused: its
        first ``limit + 1`` bytes are returned (for a caller that judges the length itself,
        and keeps what was served)."""
        url = self.url + path
        with self._lock:
            self.requests += 1
        try:
            status, encoding, body = self._exchange(path, limit)
            if status in (301, 302, 303, 307, 308):
                status, encoding, body = self._redirected(url, limit)
        except urllib.error.HTTPError as e:
            e.close()
            raise InputError(f"GET {url}: HTTP status {e.code}") from None
        except (urllib.error.URLError, OSError, http.client.HTTPException) as e:
            reason = getattr(e, "reason", None) or e or type(e).__name__
            raise InputError(f"GET {url}: {reason}") from None
        if status != 200:
            raise InputError(f"GET {url}: HTTP status {status}")
        if encoding == "gzip" and len(body) > _wire_limit(limit, encoding) and not cut:
            raise InputError(f"GET {url}: the gzip body is larger than {limit} bytes could be")
        if encoding == "gzip":
            try:
                with gzip.GzipFile(fileobj=io.BytesIO(body)) as z:
                    body = z.read(limit + 1)
            except (OSError, EOFError):
                if not cut:
                    raise InputError(f"GET {url}: the gzip body does not decode") from None
                # Cut on the wire: what decodes of it, up to limit + 1 bytes.
                body = _gunzip_prefix(body, limit + 1)
        elif encoding != "identity":
            raise InputError(f"GET {url}: unknown Content-Encoding {encoding!r}")
        if len(body) > limit:
            if not cut:
                raise InputError(f"GET {url}: the body is larger than {limit} bytes")
            body = body[: limit + 1]
        with self._lock:
            self.bytes += len(body)
        return body

    def _redirected(self, url: str, limit: int) -> tuple[int, str, bytes]:
        request = urllib.request.Request(  # noqa: S310 - http(s) only, checked above
            url, headers={"Accept-Encoding": "gzip, identity", "User-Agent": "tlog-verify"}
        )
        with urllib.request.urlopen(request, timeout=self.timeout) as response:  # noqa: S310
            encoding = response.headers.get("Content-Encoding", "identity")
            body: bytes = response.read(_wire_limit(limit, encoding) + 1)
            return response.status, encoding, body

    def get_many(self, paths: Iterable[tuple[str, int, bool]]) -> Iterator[bytes]:
        """The bodies of ``(path, limit, cut)`` GETs (:meth:`get`) in order, fetched ahead by
        the worker threads (at most twice ``connections`` batches in flight); the first failure
        is raised in order. Each worker task fetches a batch of :data:`FETCH_BATCH` paths in
        a row on its connection: handing a task to a thread and its result back costs about as
        much CPU as a request, so it is paid once per batch."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.connections, thread_name_prefix="tlog-follow")
        window: deque[Future[list[bytes]]] = deque()
        items = iter(paths)
        try:
            while True:
                batch = list(itertools.islice(items, FETCH_BATCH))
                if not batch:
                    break
                window.append(self._pool.submit(self._get_batch, batch))
                if len(window) >= 2 * self.connections:
                    yield from window.popleft().result()
            while window:
                yield from window.popleft().result()
        finally:
            for f in window:
                f.cancel()

    def _get_batch(self, batch: list[tuple[str, int, bool]]) -> list[bytes]:
        return [self.get(path, limit, cut=cut) for path, limit, cut in batch]

    def close(self) -> None:
        """Close every connection and stop the worker threads."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        with self._lock:
            opened, self._opened = self._opened, []
        for conn in opened:
            conn.close()
