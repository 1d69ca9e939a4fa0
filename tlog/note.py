"""C2SP signed-note: text signed by one or more keys.

Format (c2sp.org/signed-note)::

    note      = text LF sigblock
    text      = one or more lines, each ending in LF (empty lines allowed)
    sigblock  = one or more lines "— " name " " base64(key_id[4] || signature) LF

* The whole note is UTF-8 and holds no code point below U+0020 other than LF (no TAB, no CR).
* The signed bytes are the text, up to and including its last LF; the blank separator line is
  not signed. The separator is the **last** empty line of the note, so the text may contain
  empty lines of its own.
* A signature line starts with the bytes E2 80 94 20 (em dash, space). The key name runs to the
  first following space; it is non-empty and holds no ``+`` and no Unicode white space. The
  base64 (standard alphabet, padded, canonical) decodes to at least 5 bytes: a big-endian
  uint32 key ID, then the signature.
* A key is identified by the pair (name, key ID). The ID of every key type this package
  supports is ``SHA-256(name || 0x0A || type || public key)[:4]`` (:func:`key_id`).

Opening a note (:func:`open_note`) against a set of trusted verifiers:

* lines whose (name, key ID) match no verifier are unknown and ignored (kept as unverified);
* every line that matches a verifier is verified, and one failure rejects the whole note;
* a note with no verified line is rejected;
* byte-identical repeated lines count once (as in Go); two *different* lines for one trusted
  key reject the note, so that one key can never be counted twice (this anticipates C2SP
  PR #327, which makes a repeated (name, key ID) invalid);
* limits: at most :data:`MAX_SIGNATURES` signature lines (Go's cap; the spec requires at least
  16) and :data:`MAX_NOTE_SIZE` bytes, enough for 100 ML-DSA-44 lines of about 3.3 KB.

This module defines Ed25519 note keys (type 0x01); :mod:`tlog.cosignature` defines the
cosignature types and :mod:`tlog.keys` parses every type from text.
"""

from __future__ import annotations

import hashlib
import re
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import nacl.exceptions
import nacl.signing
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from tlog.encoding import b64decode, b64encode, shown
from tlog.errors import (
    InvalidSignatureError,
    MalformedError,
    UnverifiedNoteError,
    UsageError,
)

__all__ = [
    "MAX_NOTE_SIZE",
    "MAX_SIGNATURES",
    "SIG_PREFIX",
    "TYPE_ED25519",
    "Ed25519Signer",
    "Ed25519Verifier",
    "Note",
    "Signature",
    "Signer",
    "Verifier",
    "add_signatures",
    "check_key_name",
    "check_text",
    "ed25519_verify",
    "format_note",
    "key_id",
    "open_note",
    "parse_note",
    "parse_signature_line",
    "sign_note",
]


SIG_PREFIX = "— "
"""Start of every signature line: U+2014 EM DASH (E2 80 94), then a space."""

MAX_SIGNATURES = 100
"""Most signature lines a note may carry, known and unknown together (as Go's note.Open)."""

MAX_NOTE_SIZE = 1 << 20
"""Largest note accepted, in bytes (C2SP leaves this open; torchwood and azul use 1 MB)."""

TYPE_ED25519 = 0x01
"""Signature type byte of plain Ed25519 note signatures (logs)."""

# Unicode White_Space, the set Go's unicode.IsSpace tests. str.isspace() differs (it also
# counts U+001C..U+001F), so the set is spelled out.
_WHITE_SPACE = frozenset(
    "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008"
    "\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)


_CONTROL = re.compile("[\x00-\x09\x0b-\x1f]")

# Anything check_key_name refuses in a non-empty name: '+', white space, control characters
# and lone surrogates (not encodable as UTF-8). A fast path; the slow one names the reason.
_BAD_NAME_CHAR = re.compile(
    "[+\x00-\x20\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ud800-\udfff]"
)


def check_key_name(name: str) -> None:
    """Raise :class:`MalformedError` unless ``name`` is a valid signed-note key name."""
    if name and _BAD_NAME_CHAR.search(name) is None:
        return
    if not name:
        raise MalformedError("key name is empty")
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        raise MalformedError(f"key name {shown(name)} is not valid Unicode text") from None
    if "+" in name:
        raise MalformedError(f"key name {shown(name)} contains '+'")
    if any(c in _WHITE_SPACE for c in name):
        raise MalformedError(f"key name {shown(name)} contains white space")
    if any(c < " " for c in name):
        raise MalformedError(f"key name {shown(name)} contains a control character")


def key_id(name: str, key_type: int, public_key: bytes) -> int:
    """The C2SP key ID: the first 4 bytes of SHA-256(name || 0x0A || type || public key)."""
    digest = hashlib.sha256(name.encode("utf-8") + b"\n" + bytes([key_type]) + public_key).digest()
    return int.from_bytes(digest[:4], "big")


@runtime_checkable
class Verifier(Protocol):
    """A trusted public key that can check note signatures.

    ``verify`` receives the note text (the signed bytes of the note) and the signature bytes
    after the key ID; it returns False for any signature that does not verify, never raises
    for bad signature bytes. Cosignature verifiers build their own message from the text.
    """

    @property
    def name(self) -> str: ...

    @property
    def key_id(self) -> int: ...

    @property
    def key_type(self) -> int: ...

    @property
    def public_key(self) -> bytes: ...

    def verify(self, text: bytes, sig: bytes) -> bool: ...


class Signer(Protocol):
    """A private key that signs note texts (see :class:`Verifier`)."""

    @property
    def name(self) -> str: ...

    @property
    def key_id(self) -> int: ...

    def sign(self, text: bytes) -> bytes: ...


def ed25519_verify(public_key: nacl.signing.VerifyKey, msg: bytes, sig: bytes) -> bool:
    """Verify an Ed25519 signature with exactly the verdicts of Go's crypto/ed25519.

    libsodium is the fast path, but it is stricter than Go: it refuses small-order public keys
    that Go (and OpenSSL) accept, which would make this toolkit disagree with Go witnesses
    about which notes verify (C2SP CCTV vectors). So a libsodium rejection is re-checked with
    OpenSSL, whose verdicts equal Go's on all 914 CCTV vectors. Only bad signatures pay twice.
    """
    if len(sig) != 64:
        return False
    try:
        public_key.verify(msg, sig)
        return True
    except nacl.exceptions.BadSignatureError:
        pass
    try:
        Ed25519PublicKey.from_public_bytes(bytes(public_key)).verify(sig, msg)
    except (InvalidSignature, ValueError):
        return False
    return True


class Ed25519Verifier:
    """A type-0x01 Ed25519 note verifier (a log key).

    Subclasses change ``key_type`` (which enters the key ID) and what ``verify`` signs over.
    """

    key_type = TYPE_ED25519

    def __init__(self, name: str, public_key: bytes) -> None:
        check_key_name(name)
        if len(public_key) != 32:
            raise MalformedError(f"Ed25519 public key is {len(public_key)} bytes, not 32")
        self.name = name
        self.public_key = public_key
        self.key_id = key_id(name, self.key_type, public_key)
        self._key = nacl.signing.VerifyKey(public_key)

    def verify(self, text: bytes, sig: bytes) -> bool:
        return ed25519_verify(self._key, text, sig)


class Ed25519Signer:
    """A type-0x01 Ed25519 note signer, from a 32-byte seed (see :class:`Ed25519Verifier`)."""

    key_type = TYPE_ED25519

    def __init__(self, name: str, seed: bytes) -> None:
        check_key_name(name)
        if len(seed) != 32:
            raise MalformedError(f"Ed25519 seed is {len(seed)} bytes, not 32")
        self.name = name
        self.seed = seed
        self._key = nacl.signing.SigningKey(seed)
        self.public_key = bytes(self._key.verify_key)
        self.key_id = key_id(name, self.key_type, self.public_key)

    def sign(self, text: bytes) -> bytes:
        return bytes(self._key.sign(text).signature)

    def verifier(self) -> Ed25519Verifier:
        return Ed25519Verifier(self.name, self.public_key)


@dataclass(frozen=True)
class Signature:
    """One signature line: key name, key ID and the signature bytes after the key ID."""

    name: str
    key_id: int
    sig: bytes

    def __post_init__(self) -> None:
        # Refuse at construction what a parser would refuse, so that no note this module
        # writes can fail to parse (Go's note.Sign checks existing signatures the same way).
        check_key_name(self.name)
        if not 0 <= self.key_id < 1 << 32:
            raise MalformedError(f"key ID {self.key_id} is not a 32-bit value")
        if not self.sig:
            raise MalformedError(f"signature of {self.name} is empty")

    def line(self) -> bytes:
        """The line as it appears in a note, with its final LF."""
        b64 = b64encode(struct.pack(">I", self.key_id) + self.sig)
        return f"{SIG_PREFIX}{self.name} {b64}\n".encode()


@dataclass(frozen=True)
class Note:
    """An opened note: its text, the verified signatures and the unknown ones, in note order."""

    text: bytes
    sigs: tuple[Signature, ...]
    unverified: tuple[Signature, ...]


def check_text(text: bytes, what: str = "note text") -> str:
    """Check note text rules (UTF-8, no control characters but LF, ends in LF); return it."""
    try:
        s = text.decode("utf-8")
    except UnicodeDecodeError as e:
        raise MalformedError(f"{what} is not valid UTF-8 (byte {e.start})") from None
    bad = _CONTROL.search(s)
    if bad:
        raise MalformedError(
            f"{what} contains control character U+{ord(bad.group()):04X} at {bad.start()}"
        )
    if not s.endswith("\n"):
        raise MalformedError(f"{what} does not end in a newline")
    return s


def parse_signature_line(line: str) -> Signature:
    """Parse one signature line, without its final LF."""
    if not line.startswith(SIG_PREFIX):
        raise MalformedError(f"signature line {line[:40]!r} does not start with '— '")
    name, sep, b64 = line[len(SIG_PREFIX) :].partition(" ")
    if not sep:
        raise MalformedError(f"signature line {line[:40]!r} has no space after the key name")
    check_key_name(name)
    if " " in b64:
        raise MalformedError(
            f"signature line of {shown(name)} has more than two fields"
            " (is there a space in a key name?)"
        )
    raw = b64decode(b64, f"signature of {name}")
    if len(raw) < 5:
        raise MalformedError(f"signature of {name} is {len(raw)} bytes, at least 5 needed")
    return Signature(name, int.from_bytes(raw[:4], "big"), raw[4:])


def parse_note(data: bytes) -> tuple[bytes, list[Signature]]:
    """Split a note into its text and its signature lines, checking only the structure.

    Nothing is verified: the result must not be acted on. Byte-identical repeated lines are
    returned once.
    """
    if len(data) > MAX_NOTE_SIZE:
        raise MalformedError(f"note is {len(data)} bytes, more than the {MAX_NOTE_SIZE} allowed")
    whole = check_text(data, "note")
    split = whole.rfind("\n\n")
    if split < 0:
        raise MalformedError("note has no blank line before its signatures")
    text, block = whole[: split + 1], whole[split + 2 :]
    if not block:
        raise MalformedError("note has no signature lines")
    lines = block[:-1].split("\n")
    if len(lines) > MAX_SIGNATURES:
        raise MalformedError(f"note has {len(lines)} signature lines, at most {MAX_SIGNATURES}")
    sigs: list[Signature] = []
    seen: set[str] = set()
    for line in lines:
        sig = parse_signature_line(line)
        if line in seen:
            continue
        seen.add(line)
        sigs.append(sig)
    return text.encode("utf-8"), sigs


def open_note(data: bytes, verifiers: Iterable[Verifier]) -> Note:
    """Parse a note and verify its signatures against trusted ``verifiers``.

    Raises :class:`MalformedError` for a malformed note, :class:`InvalidSignatureError` when a
    line from a trusted key fails (or one trusted key signed twice, differently), and
    :class:`UnverifiedNoteError` when no trusted key signed. A verifier list holding one
    (name, key ID) twice is ambiguous: a :class:`UsageError` when that key signed the note.
    """
    text, sigs = parse_note(data)
    known: dict[tuple[str, int], Verifier | None] = {}
    for v in verifiers:
        k = (v.name, v.key_id)
        known[k] = None if k in known else v
    verified: list[Signature] = []
    unverified: list[Signature] = []
    done: set[tuple[str, int]] = set()
    for sig in sigs:
        k = (sig.name, sig.key_id)
        if k not in known:
            unverified.append(sig)
            continue
        verifier = known[k]
        if verifier is None:
            raise UsageError(f"ambiguous key {sig.name}+{sig.key_id:08x}")
        if k in done:
            raise InvalidSignatureError(sig.name, sig.key_id)
        if not verifier.verify(text, sig.sig):
            raise InvalidSignatureError(sig.name, sig.key_id)
        done.add(k)
        verified.append(sig)
    if not verified:
        raise UnverifiedNoteError("note has no verifiable signatures")
    return Note(text, tuple(verified), tuple(unverified))


def format_note(text: bytes, sigs: Sequence[Signature]) -> bytes:
    """Assemble a note from its text and signature lines (no checks beyond the text rules)."""
    if not sigs:
        raise UsageError("a note needs at least one signature")
    check_text(text)
    return text + b"\n" + b"".join(s.line() for s in sigs)


def sign_note(text: bytes, signers: Sequence[Signer], existing: Sequence[Signature] = ()) -> bytes:
    """Sign ``text`` with ``signers``; ``existing`` signatures come first, new ones last.

    An existing line from the same (name, key ID) as a signer is replaced, as in Go's
    note.Sign.
    """
    check_text(text)
    new = []
    for s in signers:
        check_key_name(s.name)
        new.append(Signature(s.name, s.key_id, s.sign(text)))
    replaced = {(s.name, s.key_id) for s in new}
    kept = [s for s in existing if (s.name, s.key_id) not in replaced]
    return format_note(text, kept + new)


def add_signatures(note: bytes, sigs: Sequence[Signature]) -> bytes:
    """Append signature lines to an existing note, dropping lines it already has."""
    text, have = parse_note(note)
    have_lines = {s.line() for s in have}
    extra = [s for s in sigs if s.line() not in have_lines]
    return format_note(text, have + extra)
