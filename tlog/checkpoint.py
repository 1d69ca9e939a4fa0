"""C2SP tlog-checkpoint: the signed tree head of a log.

A checkpoint is a signed note (:mod:`tlog.note`) whose text is::

    <origin>                LF   non-empty; the log's identity, compared as exact bytes
    <tree size>             LF   canonical decimal: "0" or no leading zero; at most 2^63-1
    <base64 root hash>      LF   the RFC 6962 root at that size: 32 bytes, 44 characters,
                                 canonical padded standard base64
    [<extension line>       LF]* optional, opaque, each non-empty (NOT RECOMMENDED)

Further rules enforced here:

* A checkpoint of size 0 carries the empty-tree root, SHA-256("") =
  ``47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=`` (tlog-witness; "size-0 coherence"). Any
  other root is refused with :class:`~tlog.errors.ProofError`, since the text is well formed
  but describes no tree.
* The origin is opaque: it SHOULD be a schema-less URL, but clients must not assume it is, so
  any UTF-8 line without control characters is accepted. Its key name MAY differ from it
  (``go.sum database tree`` is signed by ``sum.golang.org``).

Signatures are the note's business; :func:`open_checkpoint` opens the note and then parses its
text.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from tlog.encoding import b64encode, parse_decimal, parse_hash
from tlog.errors import MalformedError, ProofError
from tlog.merkle import EMPTY_ROOT
from tlog.note import Note, Verifier, check_text, open_note

__all__ = [
    "Checkpoint",
    "SignedCheckpoint",
    "open_checkpoint",
    "origin_of",
]


@dataclass(frozen=True)
class Checkpoint:
    """A parsed checkpoint text. Construct with :meth:`parse` or directly, then :meth:`format`."""

    origin: str
    size: int
    root: bytes
    extensions: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.origin:
            raise MalformedError("checkpoint origin is empty")
        if "\n" in self.origin or any(c < " " for c in self.origin):
            raise MalformedError("checkpoint origin contains a control character")
        if not 0 <= self.size <= (1 << 63) - 1:
            raise MalformedError(f"checkpoint size {self.size} is out of range")
        if len(self.root) != 32:
            raise MalformedError(f"checkpoint root is {len(self.root)} bytes, not 32")
        if self.size == 0 and self.root != EMPTY_ROOT:
            # Well formed, but no tree of size 0 has this root: a proof failure (a witness
            # answers 422), not a syntax error.
            raise ProofError('a checkpoint of size 0 must carry the empty-tree root SHA-256("")')
        for ext in self.extensions:
            if not ext or "\n" in ext or any(c < " " for c in ext):
                raise MalformedError("checkpoint extension line is empty or has a control char")

    @classmethod
    def parse(cls, text: bytes) -> Checkpoint:
        """Parse a checkpoint note text (the signed bytes, ending in LF)."""
        s = check_text(text, "checkpoint")
        lines = s[:-1].split("\n")
        if len(lines) < 3:
            raise MalformedError(f"checkpoint has {len(lines)} lines, at least 3 needed")
        origin, size_text, root_text, *extensions = lines
        if not origin:
            raise MalformedError("checkpoint origin is empty")
        size = parse_decimal(size_text, "checkpoint size")
        root = parse_hash(root_text, "checkpoint root hash")
        for i, ext in enumerate(extensions):
            if not ext:
                raise MalformedError(f"checkpoint extension line {i + 4} is empty")
        return cls(origin, size, root, tuple(extensions))

    def format(self) -> bytes:
        """The note text: origin, size, root and extension lines, each ending in LF."""
        lines = [self.origin, str(self.size), b64encode(self.root), *self.extensions]
        return ("\n".join(lines) + "\n").encode("utf-8")


@dataclass(frozen=True)
class SignedCheckpoint:
    """A checkpoint whose note was opened: the parsed text plus the verified signatures."""

    checkpoint: Checkpoint
    note: Note


def open_checkpoint(data: bytes, verifiers: Iterable[Verifier]) -> SignedCheckpoint:
    """Open a signed checkpoint note with trusted ``verifiers`` and parse its text.

    Raises what :func:`tlog.note.open_note` raises, :class:`MalformedError` when the text is
    not a checkpoint, and :class:`ProofError` for a size-0 checkpoint without the empty root.
    """
    note = open_note(data, verifiers)
    return SignedCheckpoint(Checkpoint.parse(note.text), note)


def origin_of(data: bytes) -> str:
    """The first line of a note, unverified: which log a checkpoint claims to come from.

    Used to select the trusted keys before :func:`open_checkpoint`. Never act on it otherwise.
    """
    first, sep, _ = data.partition(b"\n")
    if not sep:
        raise MalformedError("checkpoint has no origin line")
    try:
        origin = first.decode("utf-8")
    except UnicodeDecodeError:
        raise MalformedError("checkpoint origin is not valid UTF-8") from None
    if not origin:
        raise MalformedError("checkpoint origin is empty")
    return origin
