"""Pulling a log list: following the logs of a transparency-dev/witness-network ``logs/v0`` list.

A pull (:func:`pull_logs`) applies a parsed list (:func:`witness.loglist.parse_log_list`) to a
witness state: it adds the logs the witness does not follow, adds a listed key that an
existing log lacks, and sets a log's qpd to the listed one. It never removes a log or a key
and never enables a disabled log (its keys and qpd are still updated). Each change is written
on its own and re-running converges, so an interrupted pull is safe to repeat; ``dry_run``
writes nothing. A listed log whose key type the witness cannot follow is skipped.

:func:`read_log_list` reads the list from a file, ``-`` (standard input) or an ``http(s)://``
URL (:func:`fetch_log_list`: one GET with ``requests``, imported only then; status 200; at most
:data:`MAX_LIST_SIZE` bytes; :class:`~witness.errors.FetchError` when it cannot be fetched).

Each change is reported as one line (``added "ORIGIN": qpd N, key VKEY``, ``new key for
"ORIGIN": VKEY``, ``qpd of "ORIGIN": OLD -> NEW``, ``skipped "ORIGIN" (line N): WHY``; a
disabled log's lines end in `` (disabled, stays disabled)``), the lines ``tlog-witness
pull-logs`` prints; origins are JSON-quoted (:func:`quote`), since they may hold spaces.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from tlog.cli.files import input_name, read_input
from tlog.errors import MalformedError, UsageError
from witness.errors import FetchError
from witness.loglist import ListedLog, parse_log_list
from witness.state import WitnessState

__all__ = [
    "DEFAULT_FETCH_TIMEOUT",
    "MAX_LIST_SIZE",
    "PullSummary",
    "fetch_log_list",
    "pull_log",
    "pull_logs",
    "quote",
    "read_log_list",
]

MAX_LIST_SIZE = 256 << 20
"""Largest logs/v0 list read (a million-log list is about 150 MB)."""

DEFAULT_FETCH_TIMEOUT = 30.0
"""Seconds ``pull-logs`` waits for the list's server (to connect, and between bytes)."""


def quote(origin: str) -> str:
    """An origin in human output: JSON-quoted, since origins may hold spaces."""
    return json.dumps(origin, ensure_ascii=False)


def fetch_log_list(url: str, timeout: float) -> bytes:
    """GET a log list: status 200, at most MAX_LIST_SIZE bytes (FetchError otherwise)."""
    import requests  # noqa: PLC0415 - only a pull from a URL needs it

    try:
        with requests.get(url, timeout=timeout, stream=True) as r:
            if r.status_code != 200:
                raise FetchError(f"{url}: HTTP status {r.status_code}")
            chunks: list[bytes] = []
            total = 0
            for chunk in r.iter_content(1 << 16):
                total += len(chunk)
                if total > MAX_LIST_SIZE:
                    raise MalformedError(f"{url} is larger than {MAX_LIST_SIZE} bytes")
                chunks.append(chunk)
    except requests.RequestException as e:
        text = str(e).strip()
        # requests wraps urllib3's wrapping of the socket's error in one long repr: the
        # operator needs the socket's own words ("Connection refused").
        errno = re.search(r"\[Errno -?\d+\] ([^\"')]+)", text)
        detail = errno.group(1) if errno else (text.splitlines()[0][:200] if text else "")
        raise FetchError(f"{url}: {type(e).__name__}: {detail or type(e).__name__}") from None
    return b"".join(chunks)


def read_log_list(source: str, timeout: float = DEFAULT_FETCH_TIMEOUT) -> list[ListedLog]:
    """The parsed list at ``source``: an ``http(s)://`` URL, a file, or ``-`` for stdin."""
    if source.startswith(("http://", "https://")):
        data = fetch_log_list(source, timeout)
    else:
        data = read_input(source, MAX_LIST_SIZE)
    return parse_log_list(data, input_name(source))


@dataclass
class PullSummary:
    """What a pull changed: logs added, keys added, quotas changed, logs unchanged, skipped."""

    added: int = 0
    keys: int = 0
    qpds: int = 0
    unchanged: int = 0
    skipped: int = 0

    def text(self, dry_run: bool) -> str:
        """The summary line ``pull-logs`` prints last."""
        return (
            f"{self.added} added, {self.keys} keys added, {self.qpds} quotas changed,"
            f" {self.unchanged} unchanged, {self.skipped} skipped"
            f"{' (dry run: nothing written)' if dry_run else ''}\n"
        )


def pull_log(
    state: WitnessState, e: ListedLog, summary: PullSummary, *, dry_run: bool = False
) -> list[str]:
    """Apply one listed log to ``state``; count it in ``summary``; return the change lines."""
    if e.unsupported is not None:
        summary.skipped += 1
        return [f"skipped {quote(e.origin)} (line {e.line}): {e.unsupported}\n"]
    config = state.log(e.origin)
    if config is None:
        if not dry_run:
            try:
                state.add_log(e.origin, (e.vkey,), e.qpd)
            except UsageError:
                # Another process added it since we looked: treat it as an existing log.
                config = state.log(e.origin)
                if config is None:
                    raise
        if config is None:
            summary.added += 1
            return [f"added {quote(e.origin)}: qpd {e.qpd}, key {e.vkey}\n"]
    note = " (disabled, stays disabled)" if config.disabled else ""
    out = []
    if e.vkey not in config.keys:
        if not dry_run:
            state.add_key(e.origin, e.vkey)
        summary.keys += 1
        out.append(f"new key for {quote(e.origin)}: {e.vkey}{note}\n")
    if config.qpd != e.qpd:
        if not dry_run:
            state.set_qpd(e.origin, e.qpd)
        summary.qpds += 1
        old = "-" if config.qpd is None else str(config.qpd)
        out.append(f"qpd of {quote(e.origin)}: {old} -> {e.qpd}{note}\n")
    if not out:
        summary.unchanged += 1
    return out


def pull_logs(
    state: WitnessState,
    entries: Iterable[ListedLog],
    *,
    dry_run: bool = False,
    report: Callable[[str], None] | None = None,
) -> PullSummary:
    """Apply the listed logs to ``state`` in order (see the module docstring).

    ``report``, when given, receives each log's change lines as they are made (one string,
    nothing for an unchanged log), so that a pull cut short has said what it did.
    """
    summary = PullSummary()
    for e in entries:
        lines = pull_log(state, e, summary, dry_run=dry_run)
        if lines and report is not None:
            report("".join(lines))
    return summary
