"""The C2SP tlog-witness client: how a log gets its checkpoints cosigned (on ``requests``).

This is what embedders call. One :class:`WitnessClient` talks to one witness; :func:`gather`
asks several in parallel and merges what they return under a tlog-policy quorum.

Request (``POST <submission prefix>/add-checkpoint``), built by
:class:`tlog.witnessproto.AddCheckpointRequest`; every line ends in LF::

    "old " <size the client believes the witness last cosigned, canonical decimal>
    <base64 hash>          0..63 lines: RFC 6962 consistency proof from old to the note's size
    <empty line>
    <the signed checkpoint note>

No Content-Type is sent (tlog-witness names none). Redirects are not followed: a witness URL
that redirects is a configuration error. HTTP keep-alive comes from the client's
:class:`requests.Session` (tlog-witness: clients SHOULD use keep-alive).

Responses, and what :meth:`WitnessClient.add_checkpoint` makes of them (specs.md §5.3,
"client handling"):

=====================  ===========================================================================
status                 result
=====================  ===========================================================================
200                    the body is parsed into signature lines
                       (:func:`tlog.witnessproto.parse_cosignature_response`); lines whose
                       (key name, key ID) is not one of the configured witness keys are ignored;
                       the others are appended to the note's *text* and the result opened with
                       the witness keys alone (:func:`tlog.note.open_note`), so every configured
                       line must verify; each must carry a non-zero timestamp (tlog-witness) no
                       later than ``now + max_skew``. Returns the verified lines. A body that
                       does not parse, holds no line from a configured key, or breaks any of
                       these rules: :class:`WitnessBadResponse` (the whole response is refused,
                       as one bad trusted line refuses a note)
409                    the body must be exactly ``<decimal> LF`` with media type
                       ``text/x.tlog.size`` (parameters ignored;
                       :func:`tlog.witnessproto.parse_size_body`): :class:`WitnessConflict`
                       with that size; anything else: :class:`WitnessBadResponse`
422                    :class:`WitnessAlarm`: a proof bug, or a real inconsistency (a fork)
429                    :class:`WitnessBusy`, with ``Retry-After`` in seconds when given (delta
                       seconds or an HTTP date)
400, 403, 404, other   :class:`WitnessRejected`: a configuration or client bug (unknown origin,
4xx but 408            wrong log key, malformed request, wrong URL or method, body too large)
408, 5xx, timeout,     :class:`WitnessUnavailable`: try again later
connection error
anything else (1xx,    :class:`WitnessBadResponse`
2xx but 200, 3xx)
=====================  ===========================================================================

Response bodies are read up to :data:`MAX_RESPONSE_SIZE` bytes (more is a bad response).

The 409 recovery loop (:meth:`WitnessClient.submit`): start from the caller's ``known_old``,
else the size this client last saw the witness hold for the origin, else 0 (a client that knows
nothing MAY send ``old 0`` to learn the witness's size through the 409); a starting size
beyond the note's is replaced by 0. On 409 with size S:

* S larger than the log's own latest size: :class:`WitnessAlarm` ("witness holds a larger tree
  than this log: split view or local rollback");
* S larger than the note's size (but not the log's): the witness already cosigned a newer
  checkpoint of this log than the note; the :class:`WitnessConflict` is raised;
* otherwise retry with ``old S`` and the proof from S (empty for S = 0 or S = the note's size),
  at most ``max_retries`` times, then the last :class:`WitnessConflict` is raised.

The client remembers, per origin, the last size it saw the witness hold (a 200 for a note of
size N: N; a 409: its size): :meth:`WitnessClient.known_size`. A log may persist these and hand
them back (:meth:`WitnessClient.set_known_size`, or ``known_old``) to save the discovery round.

:func:`gather` submits one note to several witnesses in parallel threads, every request bounded
by the overall deadline, and merges the verified lines into the note as they arrive
(:func:`merge_cosignatures`: a key that already has a line keeps it, as the journal store does).
With a policy it evaluates the quorum over the merged note after each answer and, unless told
otherwise, returns as soon as it is met; requests still running then finish in the background
(their result still updates the client's known sizes). Without a policy, every witness must
cosign. Each witness gets a :class:`WitnessOutcome`.

A :class:`WitnessClient` may be shared between threads: its HTTP exchanges are serialised by a
lock (so a request left running by an early-stopping :func:`gather` delays the next one on the
same client, within that one's deadline).
"""

from __future__ import annotations

import email.utils
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from datetime import UTC

import requests

from tlog.checkpoint import Checkpoint
from tlog.cosignature import timestamp_of
from tlog.encoding import HASH_SIZE, parse_decimal
from tlog.errors import (
    InvalidSignatureError,
    MalformedError,
    TlogError,
    UnverifiedNoteError,
    UsageError,
    VerificationError,
)
from tlog.keys import cosigner_from_vkey, format_vkey
from tlog.note import MAX_NOTE_SIZE, Signature, Verifier, format_note, open_note, parse_note
from tlog.policy import DEFAULT_MAX_SKEW, Policy
from tlog.witnessproto import (
    MAX_PROOF_LINES,
    AddCheckpointRequest,
    monitoring_path,
    parse_cosignature_response,
    parse_size_body,
)

__all__ = [
    "DEFAULT_MAX_RETRIES",
    "DEFAULT_TIMEOUT",
    "MAX_RESPONSE_SIZE",
    "GatherResult",
    "HttpAnswer",
    "Prover",
    "WitnessAlarm",
    "WitnessBadResponse",
    "WitnessBusy",
    "WitnessClient",
    "WitnessClientError",
    "WitnessConflict",
    "WitnessOutcome",
    "WitnessRejected",
    "WitnessUnavailable",
    "gather",
    "http_request",
    "merge_cosignatures",
    "verify_cosignature_response",
]

DEFAULT_TIMEOUT = 10.0
"""Seconds a request may take: to connect, and between bytes of the answer."""

DEFAULT_MAX_RETRIES = 3
"""409 retries :meth:`WitnessClient.submit` makes before giving up."""

MAX_RESPONSE_SIZE = MAX_NOTE_SIZE
"""Largest response body read (1 MiB: a 200 carries a few signature lines)."""

_MAX_QUOTED = 200  # characters of a witness's body quoted in an error message

Prover = Callable[[int], Sequence[bytes]]
"""``prover(old)``: the RFC 6962 consistency proof from size ``old`` to the note's size."""

SizeSource = int | Callable[[], int]
"""The log's latest size, or a function reading it (for logs that grow while publishing)."""


# --- errors ----------------------------------------------------------------------------------


class WitnessClientError(TlogError):
    """Root of the errors a witness exchange raises; ``url`` is the witness's prefix (the
    message starts with it when it is known)."""

    def __init__(self, message: str, *, url: str = "") -> None:
        super().__init__(f"{url}: {message}" if url else message)
        self.url = url
        self.reason = message


class WitnessConflict(WitnessClientError):
    """409: the witness's latest cosigned size for the origin is :attr:`size`, not ``old``."""

    def __init__(self, size: int, *, url: str = "", message: str | None = None) -> None:
        super().__init__(message or f"witness holds size {size} (409)", url=url)
        self.size = size


class WitnessRejected(WitnessClientError):
    """400, 403, 404 or another 4xx: a configuration or client bug, not worth retrying."""

    def __init__(self, status: int, body: bytes, *, url: str = "") -> None:
        super().__init__(f"rejected with {status}: {_quote(body)}", url=url)
        self.status = status
        self.body = body


class WitnessAlarm(WitnessClientError, VerificationError):
    """A possible split view: a 422 (a proof bug or a real inconsistency), or a witness that
    holds a larger tree than this log (a split view or a local rollback).

    ``status`` is 422 for the first kind, None for the second; ``size`` is the witness's size
    for the second kind, None otherwise.
    """

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

    def __init__(self, retry_after: int | None, body: bytes = b"", *, url: str = "") -> None:
        after = "" if retry_after is None else f", retry after {retry_after} s"
        super().__init__(f"busy (429{after}): {_quote(body)}", url=url)
        self.retry_after = retry_after
        self.body = body


class WitnessUnavailable(WitnessClientError):
    """No usable answer in time: a timeout, a connection error, 408 or a 5xx (``status``)."""

    def __init__(self, message: str, *, url: str = "", status: int | None = None) -> None:
        super().__init__(message, url=url)
        self.status = status


class WitnessBadResponse(WitnessClientError):
    """An answer that breaks the protocol: a malformed 200 or 409, a cosignature that does not
    verify or carries a zero or future timestamp, an unexpected status (``status``)."""

    def __init__(self, message: str, *, url: str = "", status: int | None = None) -> None:
        super().__init__(message, url=url)
        self.status = status


def _quote(body: bytes) -> str:
    text = body[:_MAX_QUOTED].decode("utf-8", "replace").strip()
    text = text.replace("\r", "\\r").replace("\n", "\\n")
    return repr(text) if text else "(empty body)"


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


def _retry_after(value: str | None, now: float) -> int | None:
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


def _check_prefix(url: str, what: str) -> str:
    """An ``http(s)://host[:port][/path]`` prefix without query, fragment or trailing slash."""
    if not isinstance(url, str):
        raise UsageError(f"{what} is not a string")
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise UsageError(f"{what} {url!r} is not an http:// or https:// URL")
    if parts.query or parts.fragment or url.endswith(("?", "#")):
        raise UsageError(f"{what} {url!r} has a query or a fragment")
    if any(c <= " " or c == "\x7f" for c in url):
        raise UsageError(f"{what} {url!r} contains white space or a control character")
    return url.rstrip("/")


def _cosigners(keys: Iterable[str | Verifier]) -> tuple[Verifier, ...]:
    out: list[Verifier] = []
    seen: set[tuple[str, int]] = set()
    for k in keys:
        # A 0x01 vkey (or verifier) of a witness is read as its cosignature/v1 key.
        v = cosigner_from_vkey(k if isinstance(k, str) else format_vkey(k))
        if (v.name, v.key_id) in seen:
            raise UsageError(f"witness key {v.name}+{v.key_id:08x} is given twice")
        seen.add((v.name, v.key_id))
        out.append(v)
    if not out:
        raise UsageError("a witness client needs at least one witness key")
    return tuple(out)


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


# --- one witness -------------------------------------------------------------------------------


class WitnessClient:
    """A client of one witness (see the module docstring for the protocol handling).

    ``url_prefix`` is the witness's submission prefix (``https://host/path``; a trailing slash
    is dropped); ``verifiers`` its cosignature keys, as vkeys or verifiers of type 0x04 or 0x06
    (a 0x01 key is read as its 0x04 key). ``timeout`` bounds connecting and each wait for
    bytes; ``session`` is used instead of a new :class:`requests.Session` (the caller then
    closes it); ``monitoring_prefix`` defaults to the submission prefix; ``clock`` (POSIX
    seconds) judges cosignature timestamps, which may be at most ``max_skew`` seconds ahead.

    Requires: at least one key, no key twice; ``timeout`` > 0; ``max_skew`` >= 0.
    """

    def __init__(
        self,
        url_prefix: str,
        verifiers: Iterable[str | Verifier],
        *,
        timeout: float = DEFAULT_TIMEOUT,
        session: requests.Session | None = None,
        monitoring_prefix: str | None = None,
        max_skew: int = DEFAULT_MAX_SKEW,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.url = _check_prefix(url_prefix, "witness URL")
        self.monitoring_prefix = (
            self.url
            if monitoring_prefix is None
            else _check_prefix(monitoring_prefix, "monitoring prefix")
        )
        self.verifiers = _cosigners(verifiers)
        if isinstance(timeout, bool) or not timeout > 0:
            raise UsageError(f"timeout must be positive, not {timeout!r}")
        if isinstance(max_skew, bool) or not isinstance(max_skew, int) or max_skew < 0:
            raise UsageError(f"max_skew must be a non-negative int, not {max_skew!r}")
        self.timeout = float(timeout)
        self.max_skew = max_skew
        self.clock = clock
        self._own_session = session is None
        self._session = requests.Session() if session is None else session
        self._http_lock = threading.Lock()
        self._sizes_lock = threading.Lock()
        self._sizes: dict[str, int] = {}

    @property
    def name(self) -> str:
        """The witness's name: the key name of its first key."""
        return self.verifiers[0].name

    @property
    def keys(self) -> str:
        """The witness's keys as ``name+keyid`` items, space-separated (for messages)."""
        return " ".join(f"{v.name}+{v.key_id:08x}" for v in self.verifiers)

    def __repr__(self) -> str:
        return f"WitnessClient({self.url!r}, {self.keys})"

    def close(self) -> None:
        """Close the HTTP session, unless the caller gave it."""
        if self._own_session:
            self._session.close()

    def __enter__(self) -> WitnessClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- known sizes -------------------------------------------------------------------------

    def known_size(self, origin: str) -> int | None:
        """The size this client last saw the witness hold for ``origin``, or None."""
        with self._sizes_lock:
            return self._sizes.get(origin)

    def known_sizes(self) -> dict[str, int]:
        """Every origin's last seen size (a copy)."""
        with self._sizes_lock:
            return dict(self._sizes)

    def set_known_size(self, origin: str, size: int) -> None:
        """Remember that the witness holds ``size`` for ``origin`` (a persisted size, say)."""
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise UsageError(f"size must be a non-negative int, not {size!r}")
        with self._sizes_lock:
            self._sizes[origin] = size

    # --- HTTP --------------------------------------------------------------------------------

    def _request_timeout(self, deadline: float | None) -> float:
        """This client's timeout, cut to what is left before ``deadline`` (monotonic)."""
        if deadline is None:
            return self.timeout
        left = deadline - time.monotonic()
        if left <= 0:
            raise WitnessUnavailable("the deadline passed before the request", url=self.url)
        return min(self.timeout, left)

    def _exchange(self, method: str, url: str, body: bytes | None, timeout: float) -> HttpAnswer:
        """One request under the client's lock; WitnessUnavailable when there is no answer."""
        started = time.monotonic()
        if not self._http_lock.acquire(timeout=timeout):
            raise WitnessUnavailable("still busy with an earlier request", url=self.url)
        try:
            left = max(0.001, timeout - (time.monotonic() - started))
            answer = http_request(self._session, method, url, body, timeout=left)
        except requests.Timeout:
            raise WitnessUnavailable(f"no answer within {timeout:.3g} s", url=self.url) from None
        except requests.RequestException as e:
            raise WitnessUnavailable(f"request failed: {_short(e)}", url=self.url) from None
        finally:
            self._http_lock.release()
        if answer.truncated:
            raise WitnessBadResponse(
                f"response body is larger than {MAX_RESPONSE_SIZE} bytes",
                url=self.url,
                status=answer.status,
            )
        return answer

    # --- add-checkpoint ------------------------------------------------------------------------

    def add_checkpoint(
        self,
        note: bytes,
        old: int,
        proof: Sequence[bytes],
        *,
        timeout: float | None = None,
    ) -> list[Signature]:
        """POST one add-checkpoint request; return this witness's verified cosignatures.

        ``note`` is the signed checkpoint, ``old`` the size the witness is believed to hold,
        ``proof`` the consistency proof from ``old`` to the note's size. ``timeout`` (seconds)
        overrides the client's. Raises the error the module docstring's table gives for each
        answer. Requires: a well-formed checkpoint note, ``old`` >= 0, at most 63 proof hashes
        of 32 bytes each (UsageError otherwise; MalformedError for a malformed note).
        """
        origin, size = _note_checkpoint(note)
        if isinstance(old, bool) or not isinstance(old, int) or old < 0:
            raise UsageError(f"old size must be a non-negative int, not {old!r}")
        proof = tuple(proof)
        if len(proof) > MAX_PROOF_LINES:
            raise UsageError(f"a proof has at most {MAX_PROOF_LINES} hashes, not {len(proof)}")
        for i, h in enumerate(proof):
            if not isinstance(h, bytes) or len(h) != HASH_SIZE:
                raise UsageError(f"proof hash {i} is not {HASH_SIZE} bytes")
        body = AddCheckpointRequest(old, proof, note).format()
        answer = self._exchange(
            "POST", self.url + "/add-checkpoint", body, self.timeout if timeout is None else timeout
        )
        status, data = answer.status, answer.body
        if status == 200:
            sigs = verify_cosignature_response(
                note,
                data,
                self.verifiers,
                now=int(self.clock()),
                max_skew=self.max_skew,
                url=self.url,
            )
            self.set_known_size(origin, size)
            return sigs
        if status == 409:
            try:
                known = parse_size_body(data, answer.content_type)
            except MalformedError as e:
                raise WitnessBadResponse(f"malformed 409: {e}", url=self.url, status=409) from None
            self.set_known_size(origin, known)
            raise WitnessConflict(known, url=self.url)
        if status == 422:
            raise WitnessAlarm(
                f"422: the witness found the checkpoint inconsistent (a proof bug or a fork): "
                f"{_quote(data)}",
                url=self.url,
                status=422,
                body=data,
            )
        if status == 429:
            raise WitnessBusy(_retry_after(answer.retry_after, self.clock()), data, url=self.url)
        if status == 408 or 500 <= status <= 599:
            raise WitnessUnavailable(
                f"answered {status}: {_quote(data)}", url=self.url, status=status
            )
        if 400 <= status <= 499:
            raise WitnessRejected(status, data, url=self.url)
        raise WitnessBadResponse(
            f"unexpected status {status}: {_quote(data)}", url=self.url, status=status
        )

    def submit(
        self,
        note: bytes,
        prover: Prover,
        *,
        known_old: int | None = None,
        my_size: SizeSource,
        max_retries: int = DEFAULT_MAX_RETRIES,
        deadline: float | None = None,
    ) -> list[Signature]:
        """Get ``note`` cosigned, recovering from 409s (see the module docstring).

        ``prover(old)`` gives the consistency proof from ``old`` to the note's size (called
        only for 0 < old < size); ``my_size`` is the log's own latest size (or a function
        reading it when a 409 needs it); ``deadline`` is a :func:`time.monotonic` instant that
        bounds every request. Raises what :meth:`add_checkpoint` raises, and
        :class:`WitnessAlarm` for a witness that holds a larger tree than the log.
        Requires: ``max_retries`` >= 0; a log size >= the note's size.
        """
        origin, size = _note_checkpoint(note)
        if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
            raise UsageError(f"max_retries must be a non-negative int, not {max_retries!r}")
        if known_old is not None and (
            isinstance(known_old, bool) or not isinstance(known_old, int) or known_old < 0
        ):
            raise UsageError(f"known_old must be a non-negative int, not {known_old!r}")
        if not callable(my_size) and my_size < size:
            raise UsageError(f"the log's latest size {my_size} is smaller than the note's {size}")
        old = known_old if known_old is not None else self.known_size(origin)
        if old is None or old > size:
            # Nothing known (or a size this note cannot prove from): learn it through the 409.
            old = 0
        retries = 0
        while True:
            proof = [] if old in (0, size) else list(prover(old))
            try:
                return self.add_checkpoint(
                    note, old, proof, timeout=self._request_timeout(deadline)
                )
            except WitnessConflict as e:
                latest = my_size() if callable(my_size) else my_size
                if latest < size:
                    raise UsageError(
                        f"the log's latest size {latest} is smaller than the note's {size}"
                    ) from None
                if e.size > latest:
                    raise WitnessAlarm(
                        f"witness holds a larger tree than this log (size {e.size} > {latest}):"
                        " split view or local rollback",
                        url=self.url,
                        size=e.size,
                    ) from None
                if e.size > size:
                    raise WitnessConflict(
                        e.size,
                        url=self.url,
                        message=f"witness already cosigned size {e.size}, newer than this "
                        f"checkpoint's {size}",
                    ) from None
                if retries >= max_retries:
                    raise WitnessConflict(
                        e.size,
                        url=self.url,
                        message=f"still 409 (size {e.size}) after {retries} retries",
                    ) from None
                retries += 1
                old = e.size

    # --- monitoring ----------------------------------------------------------------------------

    def get_checkpoint(self, origin: str, *, timeout: float | None = None) -> bytes | None:
        """The witness's latest cosigned note for ``origin`` from its monitoring endpoint,
        unverified; None when it answers 404. Other answers raise as for add-checkpoint
        (WitnessUnavailable, WitnessRejected, WitnessBadResponse)."""
        url = monitoring_path(self.monitoring_prefix, origin)
        answer = self._exchange("GET", url, None, self.timeout if timeout is None else timeout)
        status, data = answer.status, answer.body
        if status == 200:
            return data
        if status == 404:
            return None
        if status == 408 or 500 <= status <= 599:
            raise WitnessUnavailable(
                f"answered {status}: {_quote(data)}", url=self.url, status=status
            )
        if 400 <= status <= 499:
            raise WitnessRejected(status, data, url=self.url)
        raise WitnessBadResponse(
            f"unexpected status {status}: {_quote(data)}", url=self.url, status=status
        )


def _note_checkpoint(note: bytes) -> tuple[str, int]:
    """(origin, size) of a checkpoint note, unverified (the caller's own note)."""
    if not isinstance(note, bytes):
        raise UsageError("a note is bytes")
    text, _ = parse_note(note)
    cp = Checkpoint.parse(text)
    return cp.origin, cp.size


def _short(e: BaseException) -> str:
    """A one-line reason for a requests exception (the innermost cause, trimmed)."""
    inner: BaseException = e
    seen = 0
    while seen < 5:
        nxt = getattr(inner, "reason", None)
        if not isinstance(nxt, BaseException):
            args = getattr(inner, "args", ())
            nxt = args[0] if args and isinstance(args[0], BaseException) else None
        if nxt is None:
            break
        inner, seen = nxt, seen + 1
    text = str(inner) or type(inner).__name__
    text = text.replace("\n", " ")
    return f"{type(inner).__name__}: {text[:_MAX_QUOTED]}"


# --- several witnesses -----------------------------------------------------------------------


@dataclass(frozen=True)
class WitnessOutcome:
    """What one witness gave in a :func:`gather`.

    ``status`` is one of ``cosigned``, ``alarm``, ``conflict``, ``rejected``, ``busy``,
    ``unavailable``, ``bad-response``, ``error`` (another toolkit error, e.g. from the
    prover), ``timeout`` (no answer before the deadline) and ``pending`` (still running when
    the quorum was met). ``signatures`` are the verified lines (only for ``cosigned``);
    ``error`` is the exception behind any other status but ``pending``; ``known_size`` the
    size the client last saw the witness hold for the origin; ``seconds`` how long it took
    (until the gather returned, for ``timeout`` and ``pending``).
    """

    witness: WitnessClient
    status: str
    signatures: tuple[Signature, ...] = ()
    error: TlogError | None = None
    known_size: int | None = None
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        """True when the witness cosigned."""
        return self.status == "cosigned"

    def summary(self) -> str:
        """One line: ``<url> <status>: <details>``."""
        if self.ok:
            lines = ", ".join(
                f"{s.name}+{s.key_id:08x} at {timestamp_of(s)}" for s in self.signatures
            )
            detail = f"{lines} ({self.seconds:.2f} s)"
        elif self.status == "pending":
            detail = f"no answer yet when the quorum was met ({self.seconds:.2f} s)"
        elif isinstance(self.error, WitnessClientError):
            detail = self.error.reason
        elif self.error is not None:
            detail = str(self.error)
        else:  # pragma: no cover - every other status carries its error
            detail = ""
        size = "" if self.known_size is None else f" [witness size {self.known_size}]"
        return f"{self.witness.url} {self.status}: {detail}{size}".replace("\n", " ")


@dataclass(frozen=True)
class GatherResult:
    """What :func:`gather` returns.

    ``note`` is the input note with every verified cosignature merged in; ``outcomes`` has one
    entry per witness, in input order; ``quorum_met`` says whether the policy (or, without one,
    every witness) is satisfied by the merged note, ``shortfall`` why not (empty when met);
    ``known_sizes`` maps each witness URL to the size it was last seen to hold for the origin.
    """

    note: bytes
    outcomes: tuple[WitnessOutcome, ...]
    quorum_met: bool
    shortfall: str
    known_sizes: dict[str, int] = field(default_factory=dict)

    @property
    def alarms(self) -> tuple[WitnessOutcome, ...]:
        """The outcomes that raised an alarm (possible split views)."""
        return tuple(o for o in self.outcomes if o.status == "alarm")

    @property
    def cosigned(self) -> tuple[WitnessOutcome, ...]:
        """The outcomes of the witnesses that cosigned."""
        return tuple(o for o in self.outcomes if o.ok)


_STATUS: tuple[tuple[type[TlogError], str], ...] = (
    (WitnessAlarm, "alarm"),
    (WitnessConflict, "conflict"),
    (WitnessRejected, "rejected"),
    (WitnessBusy, "busy"),
    (WitnessUnavailable, "unavailable"),
    (WitnessBadResponse, "bad-response"),
)


class _CachedProver:
    """A prover shared by the gather threads: each proof is computed once."""

    def __init__(self, prover: Prover) -> None:
        self._prover = prover
        self._lock = threading.Lock()
        self._proofs: dict[int, list[bytes]] = {}

    def __call__(self, old: int) -> list[bytes]:
        with self._lock:
            if old not in self._proofs:
                self._proofs[old] = list(self._prover(old))
            return self._proofs[old]


def _attempt(
    witness: WitnessClient,
    note: bytes,
    origin: str,
    prover: Prover,
    my_size: SizeSource,
    deadline: float,
    max_retries: int,
) -> WitnessOutcome:
    started = time.monotonic()
    try:
        sigs = witness.submit(
            note, prover, my_size=my_size, max_retries=max_retries, deadline=deadline
        )
    except TlogError as e:
        status = next((s for cls, s in _STATUS if isinstance(e, cls)), "error")
        return WitnessOutcome(
            witness, status, (), e, witness.known_size(origin), time.monotonic() - started
        )
    seconds = time.monotonic() - started
    return WitnessOutcome(
        witness, "cosigned", tuple(sigs), None, witness.known_size(origin), seconds
    )


def _quorum(
    note: bytes, witnesses: Sequence[WitnessClient], policy: Policy | None
) -> tuple[bool, str]:
    """(met, shortfall) of the merged note: the policy's quorum, or every witness."""
    keys: list[Verifier] = list(policy.witness_verifiers) if policy is not None else []
    if policy is None:
        for w in witnesses:
            keys.extend(w.verifiers)
    # Several clients may share a key (a caller's mistake, refused by gather): keep it once.
    unique = list({(v.name, v.key_id): v for v in keys}.values())
    try:
        verified = {(s.name, s.key_id) for s in open_note(note, unique).sigs}
    except UnverifiedNoteError:
        verified = set()
    if policy is not None:
        satisfied = {
            w.name for w in policy.witnesses if (w.verifier.name, w.verifier.key_id) in verified
        }
        shortfalls = policy.shortfalls(satisfied)
        if not shortfalls:
            return True, ""
        return False, f"quorum {policy.quorum} not met: " + "; ".join(map(str, shortfalls))
    done = [w for w in witnesses if any((v.name, v.key_id) in verified for v in w.verifiers)]
    if len(done) == len(witnesses):
        return True, ""
    return False, (
        f"{len(done)} of {len(witnesses)} witnesses cosigned; without a policy every witness "
        "is required"
    )


def gather(
    note: bytes,
    witnesses: Sequence[WitnessClient],
    prover: Prover,
    policy: Policy | None,
    *,
    my_size: SizeSource,
    deadline: float,
    stop_early: bool = True,
    max_retries: int = DEFAULT_MAX_RETRIES,
) -> GatherResult:
    """Submit ``note`` to every witness in parallel and merge their cosignatures.

    ``prover`` and ``my_size`` are as for :meth:`WitnessClient.submit` (the prover is called
    from several threads, at most once per old size); ``deadline`` is the number of seconds
    the whole gather may take, every request included. With ``policy``, the quorum is
    evaluated over the merged note (pre-existing lines of the note count too) after each
    answer, and with ``stop_early`` the gather returns as soon as it is met. Without a policy
    every witness must cosign. See :class:`GatherResult` and :class:`WitnessOutcome`.

    Requires: at least one witness, no witness URL twice, ``deadline`` > 0, a well-formed
    checkpoint note. A note carrying a line from a policy key that does not verify raises
    :class:`~tlog.errors.InvalidSignatureError`.
    """
    if not witnesses:
        raise UsageError("gather needs at least one witness")
    urls = [w.url for w in witnesses]
    if len(set(urls)) != len(urls):
        raise UsageError("a witness is listed twice")
    if isinstance(deadline, bool) or not deadline > 0:
        raise UsageError(f"deadline must be positive seconds, not {deadline!r}")
    origin, _ = _note_checkpoint(note)
    end = time.monotonic() + deadline
    shared = _CachedProver(prover)
    merged = note
    n = len(witnesses)
    outcomes: list[WitnessOutcome | None] = [None] * n
    started = time.monotonic()
    pool = ThreadPoolExecutor(max_workers=n, thread_name_prefix="witness-gather")
    futures: dict[Future[WitnessOutcome], int] = {}
    met = False
    try:
        for i, w in enumerate(witnesses):
            f = pool.submit(_attempt, w, note, origin, shared, my_size, end, max_retries)
            futures[f] = i
        pending = set(futures)
        while pending:
            left = end - time.monotonic()
            if left <= 0:
                break
            done, pending = wait(pending, timeout=left, return_when=FIRST_COMPLETED)
            for f in done:
                outcome = f.result()  # _attempt returns every toolkit error as an outcome
                outcomes[futures[f]] = outcome
                merged = merge_cosignatures(merged, outcome.signatures)
            if policy is not None and stop_early and pending:
                met, _ = _quorum(merged, witnesses, policy)
                if met:
                    break
    finally:
        # Never wait here for requests still running: they end by themselves (each bounded by
        # the deadline) and still update their client's known sizes.
        pool.shutdown(wait=False, cancel_futures=True)
    elapsed = time.monotonic() - started
    for f, i in futures.items():
        if outcomes[i] is not None:
            continue
        if f.done() and not f.cancelled():
            # It answered between the last wait and now: use it.
            late = f.result()
            outcomes[i] = late
            merged = merge_cosignatures(merged, late.signatures)
            continue
        w = witnesses[i]
        if met:
            outcomes[i] = WitnessOutcome(
                w, "pending", known_size=w.known_size(origin), seconds=elapsed
            )
        else:
            err = WitnessUnavailable(f"no answer within the deadline ({deadline:.3g} s)", url=w.url)
            outcomes[i] = WitnessOutcome(w, "timeout", (), err, w.known_size(origin), elapsed)
    met, shortfall = _quorum(merged, witnesses, policy)
    final = tuple(o for o in outcomes if o is not None)
    sizes = {w.url: s for w in witnesses if (s := w.known_size(origin)) is not None}
    return GatherResult(merged, final, met, shortfall, sizes)
