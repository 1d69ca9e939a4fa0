"""Real HTTP servers on loopback for tests: aiohttp applications, and a directory of files.

* :class:`ServerThread` runs aiohttp applications in an event loop on a daemon thread, each on
  a free ``127.0.0.1`` port (``serve(app)`` returns its base URL).
* :func:`static_app` is a tiny static file server (an aiohttp application serving a
  directory), for the tile trees that tests write or tamper with.
* :func:`get` fetches a URL with the standard library: (status, headers, body).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import urllib.error
import urllib.request
from email.message import Message
from pathlib import Path

from aiohttp import web


class ServerThread:
    """An asyncio loop in a daemon thread that serves aiohttp apps on 127.0.0.1 ports."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.runners: list[web.AppRunner] = []

    def __enter__(self) -> ServerThread:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def serve(self, app: web.Application) -> str:
        """Start ``app`` on a free port; return its base URL ``http://127.0.0.1:PORT``."""

        async def start() -> str:
            runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
            await runner.setup()
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            site = web.SockSite(runner, sock)
            await site.start()
            self.runners.append(runner)
            return f"http://127.0.0.1:{sock.getsockname()[1]}"

        return asyncio.run_coroutine_threadsafe(start(), self.loop).result(10)

    def close(self) -> None:
        async def stop() -> None:
            for r in self.runners:
                await r.cleanup()

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


def static_app(root: Path) -> web.Application:
    """Serve the files under ``root`` at their relative paths (404 for anything else).

    The files are read on every request, so a test may change them while it serves."""

    async def handle(request: web.Request) -> web.Response:
        rel = request.match_info["tail"]
        path = (root / rel).resolve()
        if not path.is_relative_to(root.resolve()) or not path.is_file():
            return web.Response(status=404, text="not found\n")
        return web.Response(body=path.read_bytes(), content_type="application/octet-stream")

    app = web.Application()
    app.router.add_get("/{tail:.*}", handle)
    return app


def get(url: str, method: str = "GET") -> tuple[int, Message, bytes]:
    """(status, headers, body) of one request; an error status is returned, not raised."""
    request = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.headers, response.read()
    except urllib.error.HTTPError as e:
        with e:
            return e.code, e.headers, e.read()
