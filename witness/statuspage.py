"""What the witness server's ``GET /`` and ``GET /evidence`` answer: pure functions of a
snapshot, written here; :mod:`witness.monitoring` gathers the snapshot and serves them.

**The status page** (:func:`render_status`, ``text/html; charset=utf-8``) is one HTML document
without JavaScript (its ``Content-Security-Policy``, :data:`STATUS_CSP`, allows none) and with a
little inline CSS: a table that stacks into one card per log on a narrow screen (a phone). It
shows:

* the witness: its name, its keys (vkeys), the tlog-toolkit version, how long it has been up
  (since the process started — with workers, since the supervisor did: the workers inherit its
  start time), which process answered (``worker N`` or the one process, and its pid), and the
  endpoints with the prefixes as configured (an empty prefix is said to be none);
* the state database: healthy (the read of the page succeeded; its engine and how long the read
  took) or unhealthy (the error's class; the detail goes to the server log, not to the page);
  an unhealthy page is still a page, answered 503;
* per log, from that one read: origin (linked to its monitoring checkpoint once cosigned),
  enabled or disabled, size and last update, requests today against the quota (the state's
  ``quota`` count of the current UTC day, so right across worker processes; a log without a
  quota is not counted), the evidence kept for it, and its last refused request (status,
  reason, time) — the one item kept in the answering process's memory since it started, which
  the page says;
* the evidence count, with a link to ``/evidence``.

Every dynamic text is HTML-escaped. The page costs one state read of O(logs + evidence rows)
(:meth:`witness.state.WitnessState.status`), never the notes or the history.

**The evidence list** (:func:`format_evidence_list`, ``text/plain; charset=utf-8``), newest
first, one line per kept split view, as ``tlog-witness evidence`` prints them::

    <id> <received, YYYY-MM-DDTHH:MM:SSZ> <origin, JSON-quoted> <reason> LF

at most :data:`EVIDENCE_PAGE` lines; when older rows exist, one last line
``more /evidence?before=<id>`` names the next page.

**One evidence row** (:func:`format_evidence`, ``GET /evidence/<id>``), strict and
length-prefixed, so the two notes come out byte for byte::

    "evidence " <id> LF
    "origin " <origin, JSON-quoted> LF
    "received " <YYYY-MM-DDTHH:MM:SSZ> LF
    "reason " <reason> LF
    "request " <n> LF <n bytes: the add-checkpoint body as received, whose note is the log's
                       signed checkpoint that conflicts>
    "stored-note " <n> LF <n bytes: the note the witness held then>   (or "stored-note none" LF)

Two signed notes of one log that cannot both be honest: anyone holding the log's key checks
them (docs/operator-guide.md, "Evidence of split views").
"""

from __future__ import annotations

import html
import importlib.metadata
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from tlog.keys import TYPE_NAMES
from witness.pull import quote
from witness.state import Evidence, EvidenceSummary, LogStatus

__all__ = [
    "EVIDENCE_PAGE",
    "STATUS_CSP",
    "Health",
    "Refusal",
    "StatusPage",
    "evidence_line",
    "format_evidence",
    "format_evidence_list",
    "format_time",
    "render_status",
    "toolkit_version",
]

EVIDENCE_PAGE = 100
"""Evidence rows per ``/evidence`` page (the list has no notes: a page is a few KiB)."""

STATUS_CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src 'none'; base-uri 'none'"
"""The status page's Content-Security-Policy: no script, no fetch, only its inline CSS."""

_LONG_VKEY = 200  # characters: a longer vkey (ML-DSA-44, ~1.8 KB) folds into <details>


@dataclass(frozen=True)
class Refusal:
    """A log's last refused request, as one process saw it."""

    status: int
    error: str
    at: float


@dataclass(frozen=True)
class Health:
    """How the state database answered the page's read."""

    backend: str
    seconds: float
    error: str | None = None  # the exception's class when the read failed

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True)
class StatusPage:
    """Everything the status page shows (see the module docstring).

    ``logs`` is None when the state could not be read; ``vkeys`` are (key type, vkey);
    ``worker`` is the worker's index, None for the one process; times are seconds since the
    epoch, ``now`` by the server's clock."""

    name: str
    vkeys: Sequence[tuple[int, str]]
    version: str
    started: float
    uptime: float
    worker: int | None
    pid: int
    submission_prefix: str
    monitoring_prefix: str
    sign_subtree: bool
    now: float
    health: Health
    logs: Sequence[LogStatus] | None
    refusals: dict[str, Refusal]
    monitoring_paths: dict[str, str]  # origin -> its monitoring path


def toolkit_version() -> str:
    """The installed tlog-toolkit's version, or ``unknown`` (run from a source tree)."""
    try:
        return importlib.metadata.version("tlog-toolkit")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def format_time(seconds: float | None) -> str:
    """``YYYY-MM-DDTHH:MM:SSZ`` (UTC); ``-`` for None; the number itself if out of range."""
    if seconds is None:
        return "-"
    try:
        return datetime.fromtimestamp(int(seconds), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (OverflowError, ValueError, OSError):
        return str(int(seconds))


def _duration(seconds: float) -> str:
    """A duration for people: ``3 d 4 h``, ``2 h 5 min``, ``4 min 10 s``, ``12 s``."""
    s = max(0, int(seconds))
    d, s = divmod(s, 86400)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    if d:
        return f"{d} d {h} h"
    if h:
        return f"{h} h {m} min"
    if m:
        return f"{m} min {s} s"
    return f"{s} s"


def _stamp(seconds: float) -> str:
    """A time as HTML: a ``<time>`` element, in UTC."""
    stamp = format_time(seconds)
    return f'<time datetime="{stamp}">{stamp.replace("T", " ").replace("Z", " UTC")}</time>'


def _when(seconds: float | None, now: float) -> str:
    """A time as HTML, with how long before ``now`` it was; ``never`` for None."""
    if seconds is None:
        return "never"
    ago = now - seconds
    rel = f"{_duration(ago)} ago" if ago >= 0 else f"{_duration(-ago)} ahead of this clock"
    return f"{_stamp(seconds)} ({rel})"


_CSS = """
body{font:16px/1.45 system-ui,sans-serif;margin:0 auto;max-width:72em;padding:.5em 1em;
color:#1b1b1b;background:#fff}
h1{font-size:1.4em;margin:.4em 0;overflow-wrap:anywhere}h2{font-size:1.15em;margin:1.2em 0 .4em}
code{font:.85em ui-monospace,monospace;overflow-wrap:break-word}.vkey{word-break:break-all}
dl{display:grid;grid-template-columns:max-content 1fr;gap:.3em .8em;margin:0}
dt{font-weight:600}dd{margin:0;overflow-wrap:anywhere}
ul{padding-left:1.2em}li{margin:.2em 0}
.ok{color:#05620d}.bad{color:#a40e0e;font-weight:600}.muted{color:#666}
.health{padding:.5em .8em;border-radius:.3em;background:#eef7ee}
.health.bad{background:#fbeaea}
table{border-collapse:collapse;width:100%}
th,td{text-align:left;vertical-align:top;padding:.35em .5em;border-bottom:1px solid #ddd;
overflow-wrap:break-word}.scroll{overflow-x:auto}td.size{white-space:nowrap}
th{background:#f3f3f3}
@media (max-width:40em){
table,tbody,tr,td{display:block;width:auto}thead{display:none}
tr{border:1px solid #ccc;border-radius:.3em;margin:.6em 0;padding:.2em .4em}
td{border:0;padding:.15em 0}
td::before{content:attr(data-label) ": ";font-weight:600}
td.origin::before{content:none}td.origin{font-weight:600}
}
"""


def _vkey_item(key_type: int, vkey: str) -> str:
    esc = html.escape
    kind = esc(TYPE_NAMES.get(key_type, f"type 0x{key_type:02x}"))
    code = f'<code class="vkey">{esc(vkey)}</code>'
    if len(vkey) > _LONG_VKEY:
        # An ML-DSA-44 vkey is ~1.8 KB: folded, so the page stays readable (no script needed).
        name = esc(vkey.split("+", 1)[0])
        return f"<li>{kind}: <details><summary>{name} (show)</summary>{code}</details></li>"
    return f"<li>{kind}: {code}</li>"


_COLUMNS = (
    ("origin", "Log"),
    ("state", "State"),
    ("size", "Size"),
    ("updated", "Last update"),
    ("quota", "Requests today / quota"),
    ("evidence", "Evidence"),
    ("refusal", "Last refusal (this process)"),
)
"""The log table's columns: (class, heading); a narrow screen shows the heading in each cell."""


def _log_row(log: LogStatus, page: StatusPage) -> str:
    esc = html.escape
    c = log.config
    path = page.monitoring_paths.get(c.origin)
    origin = esc(c.origin)
    if log.size is not None and path is not None:
        origin = f'<a href="{esc(path)}">{origin}</a>'
    state = '<span class="bad">disabled</span>' if c.disabled else "enabled"
    size = "—" if log.size is None else f"{log.size:,}".replace(",", "\u202f")
    if c.qpd is None:
        quota = '<span class="muted">not counted (no quota)</span>'
    else:
        used = "?" if log.requests_today is None else str(log.requests_today)
        over = log.requests_today is not None and log.requests_today >= c.qpd
        quota = f"{used} / {c.qpd}" + (' <span class="bad">(used up)</span>' if over else "")
    if log.evidence:
        evidence = (
            f'<span class="bad">{log.evidence}</span>, the last '
            f"{_when(log.last_evidence_at, page.now)}"
        )
    else:
        evidence = "0"
    refusal = page.refusals.get(c.origin)
    if refusal is None:
        last = '<span class="muted">none</span>'
    else:
        last = (
            f"<strong>{refusal.status}</strong> {_when(refusal.at, page.now)}: {esc(refusal.error)}"
        )
    values = (origin, state, size, _when(log.updated_at, page.now), quota, evidence, last)
    tds = "".join(
        f'<td class="{cls}" data-label="{label}">{v}</td>'
        for (cls, label), v in zip(_COLUMNS, values, strict=True)
    )
    return f'<tr class="log">{tds}</tr>'


def _prefix(prefix: str) -> str:
    return f"<code>{html.escape(prefix)}</code>" if prefix else '<span class="muted">none</span>'


def _health(h: Health) -> str:
    esc = html.escape
    took = f"{h.seconds * 1000:.1f} ms"
    if h.ok:
        return (
            '<p class="health ok" id="health">State database: <strong>healthy</strong> '
            f"({esc(h.backend)}, this page's read took {took})</p>\n"
        )
    return (
        '<p class="health bad" id="health">State database: <strong>unhealthy</strong> '
        f"({esc(h.backend)}: {esc(h.error or '')} after {took}; the server log has the detail)"
        "</p>\n"
    )


def _logs(page: StatusPage) -> str:
    """The logs' table and the evidence count."""
    if page.logs is None:
        return (
            '<h2>Logs</h2>\n<p class="bad" id="logs">The state database could not be read:'
            " no log to show.</p>\n"
        )
    enabled = sum(1 for log in page.logs if not log.config.disabled)
    kept = sum(log.evidence for log in page.logs)
    heads = "".join(f"<th>{label}</th>" for _, label in _COLUMNS)
    rows = "\n".join(_log_row(log, page) for log in page.logs)
    return (
        f"<h2>Logs ({len(page.logs)}, {enabled} enabled)</h2>\n"
        f'<div class="scroll"><table id="logs"><thead><tr>{heads}</tr></thead><tbody>\n{rows}\n'
        "</tbody></table></div>\n"
        '<p class="muted">Requests today count the checkpoints that would move a log on, per'
        " UTC day, across every process (the quota's count). The last refusal is kept in the"
        " memory of the process that answered this page, since it started: another worker may"
        " have refused since.</p>\n"
        "<h2>Evidence</h2>\n"
        f'<p id="evidence"><span id="evidence-count" class="{"bad" if kept else "ok"}">'
        f"{kept}</span> split view{'' if kept == 1 else 's'} kept "
        "(two checkpoints a log signed that cannot both be honest): "
        '<a id="evidence-link" href="/evidence">the evidence</a>.</p>\n'
    )


def _witness(page: StatusPage) -> str:
    """The witness: identity, version, uptime, endpoints and keys."""
    esc = html.escape
    sub, mon = esc(page.submission_prefix), esc(page.monitoring_prefix)
    process = (
        f"one process (pid {page.pid})"
        if page.worker is None
        else f"worker {page.worker} (pid {page.pid})"
    )
    endpoints = [
        f"<li><code>POST {sub}/add-checkpoint</code></li>",
        *(
            [f"<li><code>POST {sub}/sign-subtree</code> (ML-DSA-44)</li>"]
            if page.sign_subtree
            else []
        ),
        f"<li><code>GET {mon}/&lt;hex SHA-256 of the origin&gt;/checkpoint</code></li>",
        "<li><code>GET /evidence</code>, <code>GET /metrics</code></li>",
    ]
    items = (
        ("Name", "witness-name", esc(page.name)),
        ("Version", "version", f"tlog-toolkit {esc(page.version)}"),
        ("Up", "uptime", f"{_duration(page.uptime)}, since {_stamp(page.started)}"),
        ("This page", "process", f"{process}, at {_stamp(page.now)}"),
        ("Submission prefix", "submission-prefix", _prefix(page.submission_prefix)),
        ("Monitoring prefix", "monitoring-prefix", _prefix(page.monitoring_prefix)),
        ("Endpoints", "endpoints", f"<ul>{''.join(endpoints)}</ul>"),
    )
    rows = "".join(f'<dt>{term}</dt><dd id="{key}">{value}</dd>' for term, key, value in items)
    keys = "".join(_vkey_item(t, v) for t, v in page.vkeys)
    return (
        f'<h2>Witness</h2>\n<dl id="witness">{rows}</dl>\n'
        f'<h2>Keys</h2>\n<ul id="keys">{keys}</ul>\n'
    )


def render_status(page: StatusPage) -> str:
    """The status page of ``page`` (see the module docstring): what needs the operator first
    (the database, the logs, the evidence), then the witness itself."""
    esc = html.escape
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{esc(page.name)} · tlog-witness</title>\n<style>{_CSS}</style></head><body>\n"
        f'<h1>tlog-witness <span id="name">{esc(page.name)}</span></h1>\n'
        + _health(page.health)
        + _logs(page)
        + _witness(page)
        + "</body></html>\n"
    )


def evidence_line(e: EvidenceSummary) -> str:
    """One line of the evidence list (see the module docstring)."""
    return f"{e.id} {format_time(e.received_at)} {quote(e.origin)} {e.reason}\n"


def format_evidence_list(items: Sequence[EvidenceSummary], more: int | None) -> bytes:
    """The ``/evidence`` page of ``items``; ``more``: the ID below which older rows remain."""
    text = "".join(evidence_line(e) for e in items)
    if more is not None:
        text += f"more /evidence?before={more}\n"
    return text.encode("utf-8")


def format_evidence(e: Evidence) -> bytes:
    """``GET /evidence/<id>`` of row ``e`` (see the module docstring)."""
    head = (
        f"evidence {e.id}\norigin {quote(e.origin)}\nreceived {format_time(e.received_at)}\n"
        f"reason {e.reason}\nrequest {len(e.request)}\n"
    ).encode()
    stored = (
        b"stored-note none\n"
        if e.stored_note is None
        else b"stored-note %d\n" % len(e.stored_note) + e.stored_note
    )
    return head + e.request + stored
