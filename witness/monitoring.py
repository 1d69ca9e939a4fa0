"""The witness server's read-only endpoints: monitoring, the status page and ``/metrics``.

``GET <mon>/<lowercase hex SHA-256(origin)>/checkpoint`` serves a log's stored note (the log's
signatures and this witness's cosignatures) as ``text/plain; charset=utf-8``; an origin never
cosigned or an unknown hash is 404. The hash to origin map is filled by the configurations the
server reads and reloaded on a miss at most every ``config_ttl`` seconds (concurrent misses
wait for one reload). ``GET /`` is a small HTML page (the witness's keys and its logs), ``GET
/metrics`` the Prometheus text of :mod:`witness.metrics`.
"""

from __future__ import annotations

import asyncio
import html
import math
import time
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from tlog.keys import format_vkey
from tlog.note import Verifier
from tlog.witnessproto import (
    origin_hash,
)
from witness.errors import (
    TEXT_CONTENT_TYPE,
)
from witness.plumbing import INFO_KEY, RequestPlumbing
from witness.state import WitnessState

__all__ = ["MonitoringEndpoints"]


class MonitoringEndpoints(RequestPlumbing):
    """The read-only endpoints: a log's latest cosigned note by origin hash, the status page
    and the metrics. ``own_verifiers`` are the witness's own keys, which the status page
    lists; ``config_ttl`` bounds how often an unknown origin hash reloads the log list."""

    def __init__(
        self,
        state: WitnessState,
        *,
        name: str,
        own_verifiers: tuple[Verifier, ...],
        config_ttl: float,
        **plumbing: Any,
    ) -> None:
        super().__init__(state, **plumbing)
        self.name = name
        self.own_verifiers = own_verifiers
        self.config_ttl = config_ttl
        self.origins: dict[str, str] = {}  # origin hash -> origin (monitoring)
        self.origins_loaded = -math.inf
        self.origins_reload: asyncio.Future[None] | None = None  # a reload in flight

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
        request[INFO_KEY]["origin"] = origin
        stored = await self.call(self.state.latest, origin)
        if stored is None:
            raise web.HTTPNotFound(text="this witness never cosigned that log\n")
        request[INFO_KEY]["size"] = stored.size
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
