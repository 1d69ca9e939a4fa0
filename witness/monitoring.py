"""The witness server's read-only endpoints: monitoring, the status page, the evidence and
``/metrics``.

``GET <mon>/<lowercase hex SHA-256(origin)>/checkpoint`` serves a log's stored note (the log's
signatures and this witness's cosignatures) as ``text/plain; charset=utf-8``; an origin never
cosigned or an unknown hash is 404. The hash to origin map is filled by the configurations the
server reads and reloaded on a miss at most every ``config_ttl`` seconds (concurrent misses
wait for one reload).

``GET /`` is the operator's status page, ``GET /evidence`` (``?before=ID`` pages on) the list
of kept split-view evidence and ``GET /evidence/<id>`` one row with its two notes; their
formats are :mod:`witness.statuspage`'s. A ``before`` or an ID that is not a canonical decimal
is 400; an ID not kept, 404. The status page reads the state once
(:meth:`~witness.state.WitnessState.status`); when that read fails the page still answers,
with the database shown unhealthy and status 503. Each log's last refused add-checkpoint or
sign-subtree (status, reason, time) is kept in this process's memory, only for configured
logs (the origins this process resolved), so at most one entry per log. ``GET /metrics`` is
the Prometheus text of :mod:`witness.metrics`.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import time
from typing import Any

from aiohttp import web

from tlog.cosignature import TYPE_SUBTREE_V1
from tlog.encoding import parse_decimal
from tlog.keys import format_vkey
from tlog.note import Verifier
from tlog.witnessproto import (
    origin_hash,
)
from witness.errors import (
    TEXT_CONTENT_TYPE,
)
from witness.plumbing import INFO_KEY, Clock, Handler, RequestPlumbing
from witness.state import LogStatus, WitnessState
from witness.statuspage import (
    EVIDENCE_PAGE,
    STATUS_CSP,
    Health,
    Refusal,
    StatusPage,
    format_evidence,
    format_evidence_list,
    render_status,
    toolkit_version,
)

__all__ = ["PROCESS_STARTED", "MonitoringEndpoints"]

PROCESS_STARTED = (time.time(), time.monotonic())
"""When this module was imported: the process's start, for the status page's uptime. Workers
are forked from the supervisor after it imported the server, so they show the supervisor's."""

_DAY = 86400
_HTML = "text/html; charset=utf-8"
_REFUSAL_ENDPOINTS = ("add-checkpoint", "sign-subtree")  # whose refusals the page shows
_CLIENT_GONE = 499  # the plumbing's status of a request whose client went away (no answer)


class MonitoringEndpoints(RequestPlumbing):
    """The read-only endpoints: a log's latest cosigned note by origin hash, the status page,
    the evidence and the metrics; and each log's last refusal, which the page shows.
    ``own_verifiers`` are the witness's own keys, which the status page lists; ``config_ttl``
    bounds how often an unknown origin hash reloads the log list."""

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
        self.refusals: dict[str, Refusal] = {}  # configured origin -> its last refusal here
        self.clock: Clock = time.time  # the server's clock (Cosigning sets the one it is given)
        self.version = toolkit_version()

    def endpoint_of(self, path: str) -> str:
        endpoint = super().endpoint_of(path)
        if endpoint == "other" and (path == "/evidence" or path.startswith("/evidence/")):
            return "evidence"
        return endpoint

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """The plumbing's middleware, then: a refusal of a configured log is remembered for the
        status page (its log line, already filled in, says what it was)."""
        try:
            return await super().middleware(request, handler)
        finally:
            info = request.get(INFO_KEY)
            if info is not None:
                self.note_refusal(info)

    def note_refusal(self, info: dict[str, Any]) -> None:
        """Remember ``info`` (a request's log line) as its log's last refusal when it is one:
        a status >= 400 of add-checkpoint or sign-subtree naming an origin this process knows
        is configured (so the map holds one entry per log, whatever clients send). A client
        that went away (499) was not refused: it is not kept."""
        status = info.get("status")
        origin = info.get("origin")
        if (
            not isinstance(status, int)
            or status < 400
            or status == _CLIENT_GONE
            or info.get("endpoint") not in _REFUSAL_ENDPOINTS
            or not isinstance(origin, str)
            or self.origins.get(origin_hash(origin)) != origin
        ):
            return
        error = info.get("error")
        self.refusals[origin] = Refusal(status, str(error) if error else "", self.clock())

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
        now = self.clock()
        started = time.perf_counter()
        logs: list[LogStatus] | None
        try:
            logs = await self.call(self.state.status, int(now // _DAY))
            error = None
        except Exception as e:  # the page shows it; the log has the detail
            logs, error = None, type(e).__name__
            self.logger.error(
                json.dumps({"event": "status-read-failed", "error": f"{error}: {e}"[:500]})
            )
        health = Health(self.state.backend, time.perf_counter() - started, error)
        paths = {}
        for log in logs or ():
            digest = origin_hash(log.config.origin)
            self.origins[digest] = log.config.origin
            paths[log.config.origin] = f"{self.mon}/{digest}/checkpoint"
        wall, mono = PROCESS_STARTED
        page = StatusPage(
            name=self.name,
            vkeys=[(v.key_type, format_vkey(v)) for v in self.own_verifiers],
            version=self.version,
            started=wall,
            uptime=time.monotonic() - mono,
            worker=self.metrics.worker,
            pid=os.getpid(),
            submission_prefix=self.sub,
            monitoring_prefix=self.mon,
            sign_subtree=any(v.key_type == TYPE_SUBTREE_V1 for v in self.own_verifiers),
            now=now,
            health=health,
            logs=logs,
            refusals=dict(self.refusals),
            monitoring_paths=paths,
        )
        return web.Response(
            status=200 if health.ok else 503,
            body=render_status(page).encode("utf-8"),
            headers={
                "Content-Type": _HTML,
                "Content-Security-Policy": STATUS_CSP,
                "X-Content-Type-Options": "nosniff",
                "Cache-Control": "no-store",
            },
        )

    async def evidence_list(self, request: web.Request) -> web.Response:
        raw = request.query.get("before")
        before = None if raw is None else parse_decimal(raw, "before")
        if before == 0:
            items = []
        else:
            items = await self.call(self.state.evidence_summaries, before, EVIDENCE_PAGE + 1)
        more = items[EVIDENCE_PAGE - 1].id if len(items) > EVIDENCE_PAGE else None
        return _text(format_evidence_list(items[:EVIDENCE_PAGE], more))

    async def evidence_entry(self, request: web.Request) -> web.Response:
        evidence_id = parse_decimal(request.match_info["id"], "the evidence ID")
        found = (
            None if evidence_id == 0 else await self.call(self.state.evidence_entry, evidence_id)
        )
        if found is None:
            raise web.HTTPNotFound(text=f"no evidence {evidence_id}\n")
        request[INFO_KEY]["origin"] = found.origin
        return _text(format_evidence(found))

    async def metrics_page(self, request: web.Request) -> web.Response:
        logs = await self.call(self.state.logs)
        cosigned = len(await self.call(self.state.all_latest))
        text = self.metrics.render(logs, cosigned, len(self.guard.conns), self.bodies.used)
        return web.Response(
            body=text.encode("utf-8"),
            headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"},
        )


def _text(body: bytes) -> web.Response:
    return web.Response(
        body=body,
        headers={"Content-Type": TEXT_CONTENT_TYPE, "X-Content-Type-Options": "nosniff"},
    )
