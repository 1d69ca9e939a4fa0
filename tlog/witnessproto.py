"""C2SP tlog-witness wire formats and the witness's pure decision rules.

``POST <submission prefix>/add-checkpoint`` request body; every line ends in LF::

    "old " <old size, canonical decimal>           the size the client believes is cosigned
    <base64 hash>                                  0..63 consistency-proof lines, 32 bytes each
    <empty line>
    <checkpoint: a complete signed note>

The proof and the checkpoint are split at the **first** empty line (proof lines are never
empty; the note has a later empty line before its signatures).

Responses: 200 carries one or more note signature lines (the witness's cosignatures over the
submitted note text); 409 carries the witness's latest cosigned size as ``<decimal> LF`` with
``Content-Type: text/x.tlog.size``.

Monitoring endpoint: ``GET <monitoring prefix>/<lowercase hex SHA-256(origin)>/checkpoint``.

``POST <submission prefix>/sign-subtree`` request body (optional endpoint); every line ends in
LF::

    "subtree " <start> " " <end>                   a valid draft-03 subtree [start, end)
    <base64 subtree hash>                          MTH(D[start:end])
    <base64 hash>                                  0..63 subtree-consistency-proof lines
    <empty line>
    <reference checkpoint: a signed note carrying this witness's cosignature>

Decision rules (current C2SP main), in the order this module applies them:

1. body framing, the note's structure, the checkpoint text, ``old`` > size: malformed (400);
2. unknown origin (404) and the log's signature (403) are the server's checks on the note;
3. a size-0 checkpoint whose root is not SHA-256(""), or ``old 0`` with proof lines: 422;
4. under the per-origin lock: ``old`` != stored size: :class:`ConflictError` (409, body =
   stored size), then ``old`` = size requires an empty proof and the stored root, and otherwise
   an RFC 6962 consistency proof from the stored tree: :class:`~tlog.errors.ProofError` (422).

Nothing here touches storage; the witness server wraps step 4 in its compare-and-swap.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from tlog.checkpoint import Checkpoint
from tlog.encoding import MAX_INT63, b64encode, parse_decimal, parse_hash, shown
from tlog.errors import MalformedError, ProofError, TlogError, UsageError
from tlog.merkle import is_valid_subtree, verify_witness_consistency
from tlog.note import MAX_NOTE_SIZE, Signature, parse_signature_line

__all__ = [
    "MAX_PROOF_LINES",
    "MAX_REQUEST_SIZE",
    "SIZE_CONTENT_TYPE",
    "AddCheckpointRequest",
    "ConflictError",
    "SignSubtreeRequest",
    "check_request",
    "check_update",
    "format_cosignature_response",
    "format_size_body",
    "monitoring_path",
    "origin_hash",
    "parse_cosignature_response",
    "parse_size_body",
]


MAX_PROOF_LINES = 63
"""Most consistency-proof lines a request may carry (tlog-witness)."""

MAX_REQUEST_SIZE = MAX_NOTE_SIZE + 64 + MAX_PROOF_LINES * 45
"""Largest add-checkpoint body: a maximal note, the old line and 63 proof lines."""

SIZE_CONTENT_TYPE = "text/x.tlog.size"
"""The media type of a 409 body."""


class ConflictError(TlogError):
    """The client's old size is not the witness's latest cosigned size (HTTP 409).

    Attributes:
        known_size: the witness's latest cosigned size for the origin (0 if none).
    """

    def __init__(self, known_size: int) -> None:
        super().__init__(f"the witness's latest cosigned size is {known_size}")
        self.known_size = known_size


def _split_request(body: bytes) -> tuple[list[bytes], bytes]:
    """A request body's lines before the first empty line, and the note after it."""
    if len(body) > MAX_REQUEST_SIZE:
        raise MalformedError(f"request body is larger than {MAX_REQUEST_SIZE} bytes")
    head, sep, note = body.partition(b"\n\n")
    if not sep:
        raise MalformedError("request has no empty line before the checkpoint")
    return head.split(b"\n"), note


def _request_proof(lines: list[bytes], first_line: int | None) -> tuple[bytes, ...]:
    """A request's proof lines as hashes; ``first_line``, when given, is the body line of the
    first one, which the messages then name too."""
    if len(lines) > MAX_PROOF_LINES:
        raise MalformedError(f"request has {len(lines)} proof lines, at most {MAX_PROOF_LINES}")
    hashes = []
    for i, line in enumerate(lines):
        what = f"proof line {i + 1}"
        if first_line is not None:
            what += f" (line {first_line + i})"
        hashes.append(parse_hash(line, what))
    return tuple(hashes)


def _request_note(note: bytes) -> bytes:
    """The checkpoint note after a request's empty line: present, and after one empty line."""
    if not note:
        raise MalformedError("request has no checkpoint")
    if note.startswith(b"\n"):
        raise MalformedError("request has more than one empty line before the checkpoint")
    return note


@dataclass(frozen=True)
class AddCheckpointRequest:
    """An add-checkpoint request body: old size, consistency proof, signed checkpoint note."""

    old: int
    proof: tuple[bytes, ...]
    checkpoint: bytes

    @classmethod
    def parse(cls, body: bytes) -> AddCheckpointRequest:
        """Parse a request body strictly; the checkpoint note is kept as bytes, unverified."""
        lines, note = _split_request(body)
        first = lines[0]
        if not first.startswith(b"old "):
            raise MalformedError("request does not start with 'old <size>'")
        try:
            old_text = first[4:].decode("ascii")
        except UnicodeDecodeError:
            raise MalformedError("old size is not ASCII") from None
        old = parse_decimal(old_text, "old size")
        proof = _request_proof(lines[1:], None)
        return cls(old, proof, _request_note(note))

    def format(self) -> bytes:
        """The request body. Requires: at most 63 proof lines and a checkpoint that does not
        start with LF (the body would not parse back)."""
        if len(self.proof) > MAX_PROOF_LINES:
            raise MalformedError(f"a request carries at most {MAX_PROOF_LINES} proof lines")
        if not self.checkpoint or self.checkpoint.startswith(b"\n"):
            raise UsageError("the checkpoint is empty or starts with an empty line")
        lines = [b"old %d" % self.old] + [b64encode(h).encode() for h in self.proof]
        return b"\n".join(lines) + b"\n\n" + self.checkpoint


@dataclass(frozen=True)
class SignSubtreeRequest:
    """A sign-subtree request body (tlog-witness; see the module docstring for the format).

    ``hash`` is the claimed MTH(D[start:end]); ``proof`` the subtree consistency proof to the
    reference checkpoint's tree; ``checkpoint`` the signed note, kept as bytes, unverified.
    """

    start: int
    end: int
    hash: bytes
    proof: tuple[bytes, ...]
    checkpoint: bytes

    @classmethod
    def parse(cls, body: bytes) -> SignSubtreeRequest:
        """Parse a request body strictly; ``[start, end)`` must be a valid draft-03 subtree.

        Raises :class:`~tlog.errors.MalformedError` naming the defect.
        """
        lines, note = _split_request(body)
        first = lines[0]
        if not first.startswith(b"subtree "):
            raise MalformedError("request does not start with 'subtree <start> <end>'")
        try:
            fields = first[len(b"subtree ") :].decode("ascii").split(" ")
        except UnicodeDecodeError:
            raise MalformedError("subtree line is not ASCII") from None
        if len(fields) != 2:
            raise MalformedError("subtree line is not 'subtree <start> <end>'")
        start = parse_decimal(fields[0], "subtree start")
        end = parse_decimal(fields[1], "subtree end")
        if not is_valid_subtree(start, end):
            raise MalformedError(f"[{start}, {end}) is not a valid subtree")
        if len(lines) < 2:
            raise MalformedError("request has no subtree hash line")
        subtree_hash = parse_hash(lines[1], "subtree hash (line 2)")
        proof = _request_proof(lines[2:], 3)
        return cls(start, end, subtree_hash, proof, _request_note(note))

    def format(self) -> bytes:
        """The request body. Requires: a valid subtree, a 32-byte hash, at most 63 proof lines."""
        if not is_valid_subtree(self.start, self.end) or self.end > MAX_INT63:
            raise UsageError(f"[{self.start}, {self.end}) is not a valid subtree")
        if len(self.proof) > MAX_PROOF_LINES:
            raise UsageError(f"a request carries at most {MAX_PROOF_LINES} proof lines")
        lines = [b"subtree %d %d" % (self.start, self.end), b64encode(self.hash).encode()]
        lines += [b64encode(h).encode() for h in self.proof]
        return b"\n".join(lines) + b"\n\n" + self.checkpoint


def check_request(request: AddCheckpointRequest, checkpoint: Checkpoint) -> None:
    """The stateless checks on a request whose note was opened and parsed as ``checkpoint``.

    Raises :class:`MalformedError` (400) for old > size and :class:`ProofError` (422) for
    ``old 0`` with proof lines. (A size-0 checkpoint with another root than SHA-256("") never
    gets here: :class:`~tlog.checkpoint.Checkpoint` refuses it with ProofError, 422.)
    """
    if request.old > checkpoint.size:
        raise MalformedError(
            f"old size {request.old} is larger than the checkpoint size {checkpoint.size}"
        )
    if request.old == 0 and request.proof:
        raise ProofError(f"an update from size 0 takes no proof, got {len(request.proof)} hashes")


def check_update(
    stored_size: int,
    stored_root: bytes | None,
    request: AddCheckpointRequest,
    checkpoint: Checkpoint,
) -> None:
    """The stateful checks, to be run under the origin's lock against its stored state.

    ``stored_size`` is the latest cosigned size (0 and ``stored_root`` None when the witness
    never cosigned the origin). Raises :class:`ConflictError` (409) when the client's old size
    differs, :class:`ProofError` (422) when the update is not provably consistent; returns
    None when the witness may cosign.
    """
    check_request(request, checkpoint)
    if request.old != stored_size:
        raise ConflictError(stored_size)
    verify_witness_consistency(
        request.old, stored_root, checkpoint.size, checkpoint.root, request.proof
    )


def format_size_body(size: int) -> bytes:
    """The body of a 409 response."""
    return b"%d\n" % size


def parse_size_body(body: bytes, content_type: str | None) -> int:
    """Parse a 409 response: media type ``text/x.tlog.size`` (parameters ignored), ``N`` LF."""
    media = (content_type or "").split(";", 1)[0].strip().lower()
    if media != SIZE_CONTENT_TYPE:
        raise MalformedError(
            f"409 response has Content-Type {shown(content_type)}, not {SIZE_CONTENT_TYPE}"
        )
    if not body.endswith(b"\n"):
        raise MalformedError("409 response body does not end in a newline")
    try:
        text = body[:-1].decode("ascii")
    except UnicodeDecodeError:
        raise MalformedError("409 response body is not ASCII") from None
    return parse_decimal(text, "409 response size")


def format_cosignature_response(sigs: Sequence[Signature]) -> bytes:
    """The body of a 200 response: one signature line per cosignature."""
    if not sigs:
        raise MalformedError("a 200 response carries at least one cosignature")
    return b"".join(s.line() for s in sigs)


def parse_cosignature_response(body: bytes) -> list[Signature]:
    """Parse a 200 response body into signature lines (not yet verified)."""
    if not body.endswith(b"\n"):
        raise MalformedError("response body does not end in a newline")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise MalformedError("response body is not UTF-8") from None
    lines = text[:-1].split("\n")
    return [parse_signature_line(line) for line in lines]


def origin_hash(origin: str) -> str:
    """Lowercase hex SHA-256 of the origin: its path segment on the monitoring endpoint."""
    return hashlib.sha256(origin.encode("utf-8")).hexdigest()


def monitoring_path(prefix: str, origin: str) -> str:
    """``<prefix>/<hex sha256(origin)>/checkpoint``; ``prefix`` has no trailing slash."""
    return f"{prefix.rstrip('/')}/{origin_hash(origin)}/checkpoint"
