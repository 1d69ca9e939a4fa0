"""The witness server's own errors, and the ONE mapping from exceptions to HTTP statuses.

Handlers raise; the server's middleware turns the exception into a response with
:func:`reply_for`. Nothing else in the witness chooses an error status.

==========================================  ======  =============================================
exception                                    status  when
==========================================  ======  =============================================
:class:`~tlog.errors.MalformedError`         400     the body, the note or the checkpoint does not
                                                     parse; ``old`` > size; an invalid subtree
:class:`~tlog.errors.UnverifiedNoteError`    403     no signature from a trusted key
:class:`~tlog.errors.InvalidSignatureError`  403     a trusted (name, key ID) line fails to verify
:class:`~tlog.errors.PolicyError`            403     (not raised by the witness today)
:class:`UnknownLogError`                     404     origin not configured, or the log is disabled
:class:`RequestTimeoutError`                 408     the body did not arrive before the deadline
:class:`~tlog.witnessproto.ConflictError`    409     ``old`` is not the stored size; body ``N`` LF,
                                                     ``Content-Type: text/x.tlog.size`` exactly
:class:`RequestTooLargeError`                413     the body is larger than the server's cap
:class:`~tlog.errors.ProofError`             422     a proof fails; a size-0 checkpoint without the
                                                     empty-tree root; ``old 0`` with proof lines;
                                                     same size, different root
:class:`QuotaExceededError`                  429     the log's requests-per-day quota is used up;
                                                     ``Retry-After`` = seconds to the next UTC day
:class:`StateFailureError`                   500     the state raised MalformedError or the like:
                                                     never the client's fault
anything else                                500     a bug or a storage failure: generic body, the
                                                     traceback goes to the log
==========================================  ======  =============================================

:class:`~tlog.errors.UsageError` is deliberately a 500: it means the *server* broke a
precondition (a caller bug), never that the client sent bad data.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tlog.errors import (
    InvalidSignatureError,
    MalformedError,
    PolicyError,
    ProofError,
    TlogError,
    UnverifiedNoteError,
)
from tlog.witnessproto import SIZE_CONTENT_TYPE, ConflictError, format_size_body

TEXT_CONTENT_TYPE = "text/plain; charset=utf-8"
"""Content-Type of every error body but the 409's."""

GENERIC_500_BODY = b"internal server error\n"
"""The body of every 500: the cause is logged, never sent."""

_MAX_MESSAGE = 500  # characters of an error message echoed in a body


class WitnessError(TlogError):
    """An error of the witness server that maps to a fixed HTTP status (``status``)."""

    status = 500


class UnknownLogError(WitnessError):
    """The checkpoint's origin is not a log this witness follows, or the log is disabled (404).

    A disabled log answers 404 too: the witness refuses its checkpoints exactly as if it were
    not configured, and the body says which case it is so that the log's operator can tell.

    Attributes:
        origin: the origin the request named.
        disabled: True when the log is configured but disabled.
    """

    status = 404

    def __init__(self, origin: str, *, disabled: bool = False) -> None:
        if disabled:
            msg = f"log {origin[:200]!r} is disabled on this witness"
        else:
            msg = f"unknown log {origin[:200]!r}"
        super().__init__(msg)
        self.origin = origin
        self.disabled = disabled


class RequestTooLargeError(WitnessError):
    """The request body exceeds the server's cap (413)."""

    status = 413

    def __init__(self, limit: int) -> None:
        super().__init__(f"request body is larger than {limit} bytes")
        self.limit = limit


class RequestTimeoutError(WitnessError):
    """The request body did not arrive within the read deadline (408)."""

    status = 408

    def __init__(self, seconds: float) -> None:
        super().__init__(f"request body not received within {seconds:g} seconds")
        self.seconds = seconds


class QuotaExceededError(WitnessError):
    """The log sent more requests today than its requests-per-day quota allows (429).

    Attributes:
        retry_after: whole seconds until the quota resets (the next UTC midnight), >= 1.
    """

    status = 429

    def __init__(self, origin: str, qpd: int, retry_after: int) -> None:
        super().__init__(f"log {origin[:200]!r} exceeded its quota of {qpd} requests per day")
        self.origin = origin
        self.qpd = qpd
        self.retry_after = max(1, retry_after)


class StateFailureError(WitnessError):
    """The state raised an error that would otherwise read as the client's fault (500)."""

    status = 500


class FetchError(TlogError):
    """A log list could not be fetched from its URL: the network, a timeout, an HTTP status
    other than 200 (``tlog-witness`` exit 4; not an HTTP error of the server)."""


@dataclass(frozen=True)
class Reply:
    """An error response: status, headers and body (bytes), free of any web framework."""

    status: int
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)


def http_status(exc: BaseException) -> int:
    """The HTTP status an exception maps to (500 for anything unexpected)."""
    if isinstance(exc, ConflictError):
        return 409
    if isinstance(exc, WitnessError):
        return exc.status
    if isinstance(exc, MalformedError):
        return 400
    if isinstance(exc, UnverifiedNoteError | InvalidSignatureError | PolicyError):
        return 403
    if isinstance(exc, ProofError):
        return 422
    return 500


def reply_for(exc: BaseException) -> Reply:
    """The complete response for an exception raised while handling a request.

    A 409 carries exactly ``<size> LF`` with ``Content-Type: text/x.tlog.size``; a 500 carries
    a generic body (the caller logs the traceback); every other error carries its message.
    """
    status = http_status(exc)
    if isinstance(exc, ConflictError):
        return Reply(409, format_size_body(exc.known_size), {"Content-Type": SIZE_CONTENT_TYPE})
    if status == 500:
        return Reply(500, GENERIC_500_BODY, {"Content-Type": TEXT_CONTENT_TYPE})
    headers = {"Content-Type": TEXT_CONTENT_TYPE}
    if isinstance(exc, QuotaExceededError):
        headers["Retry-After"] = str(exc.retry_after)
    message = str(exc)[:_MAX_MESSAGE] or type(exc).__name__
    return Reply(status, (message + "\n").encode("utf-8", "replace"), headers)
