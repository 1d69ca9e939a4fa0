"""What a witness answers, as its client sees it: the HTTP exchange, the errors, the checks.

:func:`http_request` makes one request (no redirects, the body read up to a limit) and returns
an :class:`HttpAnswer`; :class:`WitnessClientError` and its subclasses are what an answer
means when it is not a cosignature (the table of :mod:`witness.client`; :func:`status_error`
for the statuses no endpoint gives a meaning of its own); :func:`verify_cosignature_response`
checks a 200's cosignature lines and :func:`merge_cosignatures` adds them to a note. All but
:func:`http_request` are pure. :class:`~witness.client.WitnessClient` and
:func:`~witness.gathering.gather` are built on them.
"""

from __future__ import annotations

import email.utils
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC

import requests

from tlog.checkpoint import Checkpoint
from tlog.cosignature import timestamp_of
from tlog.encoding import parse_decimal
from tlog.errors import (
    InvalidSignatureError,
    MalformedError,
    TlogError,
    UnverifiedNoteError,
    UsageError,
    VerificationError,
)
from tlog.note import MAX_NOTE_SIZE, Signature, Verifier, format_note, open_note, parse_note
from tlog.policy import DEFAULT_MAX_SKEW
from tlog.witnessproto import (
    parse_cosignature_response,
)

__all__ = [
    "DEFAULT_MAX_RETRIES",
    "DEFAULT_TIMEOUT",
    "MAX_RESPONSE_SIZE",
    "HttpAnswer",
    "Prover",
    "SizeSource",
    "WitnessAlarm",
    "WitnessBadResponse",
    "WitnessBusy",
    "WitnessClientError",
    "WitnessConflict",
    "WitnessRejected",
    "WitnessUnavailable",
    "http_request",
    "merge_cosignatures",
    "note_checkpoint",
    "quote_body",
    "retry_after",
    "status_error",
    "verify_cosignature_response",
]

DEFAULT_TIMEOUT = 10.0
"""Seconds a request may take: to connect, and between bytes of the answer."""

DEFAULT_MAX_RETRIES = 3
"""409 retries :meth:`WitnessClient.submit` makes before giving up."""

MAX_RESPONSE_SIZE = MAX_NOTE_SIZE
"""Largest response body read (1 MiB: a 200 carries a few signature lines)."""

MAX_QUOTED = 200  # characters of a witness's body quoted in an error message

Prover = Callable[[int], Sequence[bytes]]
"""``prover(old)``: the RFC 6962 consistency proof from size ``old`` to the note's size."""

SizeSource = int | Callable[[], int]
"""The log's latest size, or a function reading it (for logs that grow while publishing)."""


# --- errors ----------------------------------------------------------------------------------


class WitnessClientError(TlogError):
    """Root of the errors a witness exchange raises; ``url`` is the witness's prefix (the
    message starts with it when it is known)."""

    kind = "error"
    """The status of a :class:`~witness.gathering.WitnessOutcome` that ends in this error."""

    def __init__(self, message: str, *, url: str = "") -> None:
        super().__init__(f"{url}: {message}" if url else message)
        self.url = url
        self.reason = message


class WitnessConflict(WitnessClientError):
    """409: the witness's latest cosigned size for the origin is :attr:`size`, not ``old``."""

    kind = "conflict"

    def __init__(self, size: int, *, url: str = "", message: str | None = None) -> None:
        super().__init__(message or f"witness holds size {size} (409)", url=url)
        self.size = size


class WitnessRejected(WitnessClientError):
    """400, 403, 404 or another 4xx: a configuration or client bug, not worth retrying."""

    kind = "rejected"

    def __init__(self, status: int, body: bytes, *, url: str = "") -> None:
        super().__init__(f"rejected with {status}: {quote_body(body)}", url=url)
        self.status = status
        self.body = body


class WitnessAlarm(WitnessClientError, VerificationError):
    """A possible split view: a 422 (a proof bug or a real inconsistency), or a witness that
    holds a larger tree than this log (a split view or a local rollback).

    ``status`` is 422 for the first kind, None for the second; ``size`` is the witness's size
    for the second kind, None otherwise.
    """

    kind = "alarm"

    def __init__(
        self,
        message: str,
        *,
        url: str = "",
        status: int | None = None,
        body: bytes = b"",
        size: int | None = None,
    ) -> None:
        super().__init__(message, url=url)
        self.status = status
        self.body = body
        self.size = size


class WitnessBusy(WitnessClientError):
    """429: the witness refuses for now; ``retry_after`` is in seconds, None when not given."""

    kind = "busy"

    def __init__(self, retry_after: int | None, body: bytes = b"", *, url: str = "") -> None:
        after = "" if retry_after is None else f", retry after {retry_after} s"
        super().__init__(f"busy (429{after}): {quote_body(body)}", url=url)
        self.retry_after = retry_after
        self.body = body


class WitnessUnavailable(WitnessClientError):
    """No usable answer in time: a timeout, a connection error, 408 or a 5xx (``status``)."""

    kind = "unavailable"

    def __init__(self, message: str, *, url: str = "", status: int | None = None) -> None:
        super().__init__(message, url=url)
        self.status = status


class WitnessBadResponse(WitnessClientError):
    """An answer that breaks the protocol: a malformed 200 or 409, a cosignature that does not
    verify or carries a zero or future timestamp, an unexpected status (``status``)."""

    kind = "bad-response"

    def __init__(self, message: str, *, url: str = "", status: int | None = None) -> None:
        super().__init__(message, url=url)
        self.status = status


def quote_body(body: bytes) -> str:
    """A witness's body in an error message: its start, decoded, escaped and quoted."""
    text = body[:MAX_QUOTED].decode("utf-8", "replace").strip()
    text = text.replace("\r", "\\r").replace("\n", "\\n")
    return repr(text) if text else "(empty body)"


def status_error(status: int, body: bytes, url: str) -> WitnessClientError:
    """The error of an answer that no endpoint gives a meaning of its own: 408 and 5xx are
    :class:`WitnessUnavailable`, another 4xx :class:`WitnessRejected`, anything else (1xx,
    2xx but 200, 3xx) :class:`WitnessBadResponse`."""
    if status == 408 or 500 <= status <= 599:
        return WitnessUnavailable(f"answered {status}: {quote_body(body)}", url=url, status=status)
    if 400 <= status <= 499:
        return WitnessRejected(status, body, url=url)
    return WitnessBadResponse(
        f"unexpected status {status}: {quote_body(body)}", url=url, status=status
    )


# --- response checks (pure) --------------------------------------------------------------------


def verify_cosignature_response(
    note: bytes,
    body: bytes,
    verifiers: Sequence[Verifier],
    *,
    now: int,
    max_skew: int = DEFAULT_MAX_SKEW,
    url: str = "",
) -> list[Signature]:
    """The verified cosignatures of a 200 add-checkpoint ``body`` for ``note``.

    Lines from keys not in ``verifiers`` are ignored. The others, appended to the note's text,
    must open as a note with ``verifiers`` alone (each verifies; two different lines from one
    key refuse the response) and carry a timestamp in ``1 .. now + max_skew``. Returns them in
    response order; raises :class:`WitnessBadResponse` (naming ``url``) otherwise, or when no
    line is from a configured key. Requires: ``note`` is a well-formed note.
    """
    text, _ = parse_note(note)
    try:
        lines = parse_cosignature_response(body)
    except MalformedError as e:
        raise WitnessBadResponse(f"malformed 200 response: {e}", url=url, status=200) from None
    known = {(v.name, v.key_id) for v in verifiers}
    mine = [s for s in lines if (s.name, s.key_id) in known]
    if not mine:
        raise WitnessBadResponse(
            f"the 200 response has no line from the configured key(s) "
            f"({', '.join(f'{n}+{k:08x}' for n, k in sorted(known))})",
            url=url,
            status=200,
        )
    try:
        opened = open_note(format_note(text, mine), verifiers)
    except InvalidSignatureError as e:
        raise WitnessBadResponse(f"cosignature does not verify: {e}", url=url, status=200) from None
    except (MalformedError, UnverifiedNoteError) as e:  # pragma: no cover - lines were parsed
        raise WitnessBadResponse(f"cosignature lines refused: {e}", url=url, status=200) from None
    for sig in opened.sigs:
        who = f"{sig.name}+{sig.key_id:08x}"
        try:
            ts = timestamp_of(sig)
        except MalformedError as e:  # pragma: no cover - a verified cosignature has one
            raise WitnessBadResponse(f"cosignature of {who}: {e}", url=url, status=200) from None
        if ts == 0:
            raise WitnessBadResponse(
                f"cosignature of {who} carries a zero timestamp (tlog-witness requires a "
                "non-zero one)",
                url=url,
                status=200,
            )
        if ts > now + max_skew:
            raise WitnessBadResponse(
                f"cosignature of {who} is dated {ts}, more than {max_skew} s after now ({now})",
                url=url,
                status=200,
            )
    return list(opened.sigs)


def merge_cosignatures(note: bytes, sigs: Iterable[Signature]) -> bytes:
    """``note`` with the lines of ``sigs`` whose key has no line in it yet, appended in order.

    A key that already has a line keeps it (as :meth:`store.api.JournalStore.add_cosignatures`
    does), so the merged note never carries two lines from one key. Returns ``note`` itself
    when nothing is added.
    """
    text, have = parse_note(note)
    keys = {(s.name, s.key_id) for s in have}
    extra: list[Signature] = []
    for s in sigs:
        if (s.name, s.key_id) not in keys:
            keys.add((s.name, s.key_id))
            extra.append(s)
    return format_note(text, have + extra) if extra else note


def retry_after(value: str | None, now: float) -> int | None:
    """``Retry-After`` in whole seconds (>= 0): delta seconds or an HTTP date; None otherwise."""
    if value is None:
        return None
    value = value.strip()
    try:
        return parse_decimal(value, "Retry-After")
    except MalformedError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0, int(when.timestamp() - now + 0.999))


@dataclass(frozen=True)
class HttpAnswer:
    """An HTTP answer: status, the Content-Type and Retry-After headers, and the body, cut
    after ``limit`` bytes (``truncated`` then True)."""

    status: int
    content_type: str | None
    retry_after: str | None
    body: bytes
    truncated: bool = False


def http_request(
    session: requests.Session,
    method: str,
    url: str,
    body: bytes | None,
    *,
    timeout: float,
    limit: int = MAX_RESPONSE_SIZE,
) -> HttpAnswer:
    """One request without redirects: ``timeout`` bounds connecting and each wait for bytes,
    at most ``limit`` + 1 bytes of the body are read. Raises what requests raises
    (:class:`requests.RequestException`) when no answer comes."""
    with session.request(
        method, url, data=body, timeout=(timeout, timeout), stream=True, allow_redirects=False
    ) as resp:
        data = bytearray()
        for chunk in resp.iter_content(chunk_size=1 << 16):
            data += chunk
            if len(data) > limit:
                break
        return HttpAnswer(
            resp.status_code,
            resp.headers.get("Content-Type"),
            resp.headers.get("Retry-After"),
            bytes(data[:limit]),
            len(data) > limit,
        )


def note_checkpoint(note: bytes) -> tuple[str, int]:
    """(origin, size) of a checkpoint note, unverified (the caller's own note)."""
    if not isinstance(note, bytes):
        raise UsageError("a note is bytes")
    text, _ = parse_note(note)
    cp = Checkpoint.parse(text)
    return cp.origin, cp.size
