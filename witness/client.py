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

Responses, and what :meth:`WitnessClient.add_checkpoint` makes of them (https://c2sp.org/tlog-witness,
its client handling):

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

:func:`gather` (:mod:`witness.gathering`) submits one note to several witnesses in parallel and
merges the verified lines into the note as they arrive (:func:`merge_cosignatures`: a key that
already has a line keeps it, as the journal store does), under a policy's quorum.

Modules: this one holds :class:`WitnessClient` (one witness); :mod:`witness.responses` the HTTP
exchange, the errors and the checks of an answer; :mod:`witness.gathering` several witnesses. The
names of both are re-exported here.

A :class:`WitnessClient` may be shared between threads: its HTTP exchanges are serialised by a
lock (so a request left running by an early-stopping :func:`gather` delays the next one on the
same client, within that one's deadline).
"""

from __future__ import annotations

import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable, Sequence

import requests

from tlog.encoding import HASH_SIZE
from tlog.errors import (
    MalformedError,
    UsageError,
)
from tlog.keys import cosigner_from_vkey, format_vkey
from tlog.note import Signature, Verifier
from tlog.policy import DEFAULT_MAX_SKEW
from tlog.witnessproto import (
    MAX_PROOF_LINES,
    AddCheckpointRequest,
    monitoring_path,
    parse_size_body,
)
from witness.gathering import GatherResult, WitnessOutcome, gather
from witness.responses import (
    DEFAULT_MAX_RETRIES,
    DEFAULT_TIMEOUT,
    MAX_QUOTED,
    MAX_RESPONSE_SIZE,
    HttpAnswer,
    Prover,
    SizeSource,
    WitnessAlarm,
    WitnessBadResponse,
    WitnessBusy,
    WitnessClientError,
    WitnessConflict,
    WitnessRejected,
    WitnessUnavailable,
    http_request,
    merge_cosignatures,
    note_checkpoint,
    quote_body,
    retry_after,
    status_error,
    verify_cosignature_response,
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
        origin, size = note_checkpoint(note)
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
                f"{quote_body(data)}",
                url=self.url,
                status=422,
                body=data,
            )
        if status == 429:
            raise WitnessBusy(retry_after(answer.retry_after, self.clock()), data, url=self.url)
        raise status_error(status, data, self.url)

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
        origin, size = note_checkpoint(note)
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
        raise status_error(status, data, self.url)


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
    return f"{type(inner).__name__}: {text[:MAX_QUOTED]}"
