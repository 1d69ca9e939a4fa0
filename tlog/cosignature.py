"""C2SP tlog-cosignature: a cosigner's statement that it saw a consistent checkpoint.

A cosignature is a signed-note signature line on a checkpoint (:mod:`tlog.note`). After the
4-byte key ID, its signature bytes are a *timestamped signature*::

    timestamped_signature = uint64_be(timestamp) || signature

The timestamp is POSIX seconds, at most 2^63-1. Two types exist:

**Ed25519 cosignature/v1**, type byte 0x04, key ID SHA-256(name || 0x0A || 0x04 || pk)[:4].
The signature is 64 bytes and signs exactly::

    "cosignature/v1" LF
    "time " <timestamp, canonical decimal> LF
    <the whole checkpoint note text, extension lines included>

The message does not name the cosigner, so one Ed25519 key must serve one cosigner only.

**ML-DSA-44 subtree/v1**, type byte 0x06, key ID SHA-256(name || 0x0A || 0x06 || pk)[:4],
where pk is the 1312-byte public key. The signature is FIPS 204 pure ML-DSA-44 with the empty
context (2420 bytes) over the binary struct::

    "subtree/v1" LF 0x00                 12 bytes
    uint8 len, cosigner name             1..255 bytes
    uint64 timestamp                     equal to the timestamp in the signature line
    uint8 len, log origin                1..255 bytes, no LF
    uint64 start, uint64 end             the subtree [start, end); a checkpoint is [0, size),
                                         so an empty tree is [0, 0)
    hash[32]                             the subtree hash; a checkpoint's root

It does not cover extension lines. A timestamp of 0 makes no claim that the tree is the
largest seen; a subtree with start != 0 must carry timestamp 0.

C2SP PR #346 (open) may drop the timestamp from *subtree* (start != 0) signatures; the
checkpoint form keeps it. The framing of the subtree signature is therefore kept in one place,
:func:`split_timestamped`.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable
from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric import mldsa

from tlog.checkpoint import Checkpoint
from tlog.encoding import MAX_INT63
from tlog.errors import MalformedError, UsageError
from tlog.note import (
    Ed25519Signer,
    Ed25519Verifier,
    Signature,
    check_key_name,
    ed25519_verify,
    key_id,
)

__all__ = [
    "ED25519_SIG_SIZE",
    "MLDSA44_PUBLIC_KEY_SIZE",
    "MLDSA44_SIG_SIZE",
    "SUBTREE_LABEL",
    "TYPE_COSIGNATURE_V1",
    "TYPE_SUBTREE_V1",
    "Clock",
    "CosignatureV1Signer",
    "CosignatureV1Verifier",
    "Subtree",
    "SubtreeV1Signer",
    "SubtreeV1Verifier",
    "cosignature_v1_message",
    "split_timestamped",
    "subtree_v1_message",
    "timestamp_of",
]


TYPE_COSIGNATURE_V1 = 0x04
TYPE_SUBTREE_V1 = 0x06

ED25519_SIG_SIZE = 64
MLDSA44_PUBLIC_KEY_SIZE = 1312
MLDSA44_SIG_SIZE = 2420
SUBTREE_LABEL = b"subtree/v1\n\x00"

Clock = Callable[[], float]


def split_timestamped(sig: bytes) -> tuple[int, bytes]:
    """Split a timestamped signature into (timestamp, signature).

    Raises :class:`MalformedError` when it is shorter than 8 bytes or the timestamp exceeds
    2^63-1.
    """
    if len(sig) < 8:
        raise MalformedError(f"cosignature is {len(sig)} bytes, too short for a timestamp")
    (ts,) = struct.unpack(">Q", sig[:8])
    if ts > MAX_INT63:
        raise MalformedError(f"cosignature timestamp {ts} is larger than 2^63-1")
    return ts, sig[8:]


def timestamp_of(sig: Signature) -> int:
    """The timestamp of a cosignature line (see :func:`split_timestamped`)."""
    return split_timestamped(sig.sig)[0]


def cosignature_v1_message(text: bytes, timestamp: int) -> bytes:
    """The bytes an Ed25519 cosignature/v1 signs for checkpoint note ``text``."""
    if not 0 <= timestamp <= MAX_INT63:
        raise UsageError(f"timestamp {timestamp} is out of range [0, 2^63-1]")
    return b"cosignature/v1\ntime %d\n" % timestamp + text


def subtree_v1_message(
    cosigner: str, timestamp: int, origin: str, start: int, end: int, root_hash: bytes
) -> bytes:
    """The bytes an ML-DSA-44 subtree/v1 cosignature signs.

    Requires: names of 1..255 UTF-8 bytes, 0 <= start < end < 2^64, a 32-byte hash, and
    timestamp 0 when start != 0.
    """
    name_b = cosigner.encode("utf-8")
    origin_b = origin.encode("utf-8")
    if not 1 <= len(name_b) <= 255:
        raise UsageError(f"cosigner name is {len(name_b)} bytes, must be 1..255")
    if not 1 <= len(origin_b) <= 255:
        raise UsageError(f"log origin is {len(origin_b)} bytes, must be 1..255")
    # [0, 0) is the whole of an empty tree: a checkpoint of size 0 can be cosigned.
    if not (0 <= start < end < 1 << 64 or start == end == 0):
        raise UsageError(f"[{start}, {end}) is not a non-empty subtree")
    if len(root_hash) != 32:
        raise UsageError("subtree hash must be 32 bytes")
    if not 0 <= timestamp <= MAX_INT63:
        raise UsageError(f"timestamp {timestamp} is out of range [0, 2^63-1]")
    if start != 0 and timestamp != 0:
        raise UsageError("a subtree with start != 0 must carry timestamp 0")
    return (
        SUBTREE_LABEL
        + bytes([len(name_b)])
        + name_b
        + struct.pack(">Q", timestamp)
        + bytes([len(origin_b)])
        + origin_b
        + struct.pack(">QQ", start, end)
        + root_hash
    )


def _now(clock: Clock) -> int:
    ts = int(clock())
    if ts <= 0:
        raise UsageError("the clock reads a time at or before 1970: refusing to cosign")
    return ts


class CosignatureV1Verifier(Ed25519Verifier):
    """Verifies Ed25519 cosignature/v1 lines (type 0x04)."""

    key_type = TYPE_COSIGNATURE_V1

    def verify(self, text: bytes, sig: bytes) -> bool:
        if len(sig) != 8 + ED25519_SIG_SIZE:
            return False
        try:
            ts, raw = split_timestamped(sig)
        except MalformedError:
            return False
        return ed25519_verify(self._key, cosignature_v1_message(text, ts), raw)


class CosignatureV1Signer(Ed25519Signer):
    """Signs Ed25519 cosignature/v1 lines (type 0x04) at the clock's current second."""

    key_type = TYPE_COSIGNATURE_V1

    def __init__(self, name: str, seed: bytes, clock: Clock = time.time) -> None:
        super().__init__(name, seed)
        self.clock = clock

    def sign(self, text: bytes) -> bytes:
        return self.sign_at(text, _now(self.clock))

    def sign_at(self, text: bytes, timestamp: int) -> bytes:
        """The timestamped signature over checkpoint ``text`` at ``timestamp``."""
        msg = cosignature_v1_message(text, timestamp)
        return struct.pack(">Q", timestamp) + bytes(self._key.sign(msg).signature)

    def verifier(self) -> CosignatureV1Verifier:
        return CosignatureV1Verifier(self.name, self.public_key)


@dataclass(frozen=True)
class Subtree:
    """A subtree [start, end) of a log, with its hash."""

    origin: str
    start: int
    end: int
    hash: bytes


class SubtreeV1Verifier:
    """Verifies ML-DSA-44 subtree/v1 cosignature lines (type 0x06)."""

    key_type = TYPE_SUBTREE_V1

    def __init__(self, name: str, public_key: bytes) -> None:
        check_key_name(name)
        if not 1 <= len(name.encode("utf-8")) <= 255:
            raise MalformedError("ML-DSA-44 cosigner name must be 1..255 bytes")
        if len(public_key) != MLDSA44_PUBLIC_KEY_SIZE:
            raise MalformedError(f"ML-DSA-44 public key is {len(public_key)} bytes, not 1312")
        try:
            self._key = mldsa.MLDSA44PublicKey.from_public_bytes(public_key)
        except ValueError:
            raise MalformedError("not a valid ML-DSA-44 public key") from None
        self.name = name
        self.public_key = public_key
        self.key_id = key_id(name, TYPE_SUBTREE_V1, public_key)

    def verify(self, text: bytes, sig: bytes) -> bool:
        """Verify a cosignature over a checkpoint note text ([0, size), its root)."""
        try:
            cp = Checkpoint.parse(text)
        except MalformedError:
            return False
        return self.verify_subtree(Subtree(cp.origin, 0, cp.size, cp.root), sig)

    def verify_subtree(self, subtree: Subtree, sig: bytes) -> bool:
        """Verify a cosignature over ``subtree``; start != 0 requires timestamp 0."""
        try:
            ts, raw = split_timestamped(sig)
            msg = subtree_v1_message(
                self.name, ts, subtree.origin, subtree.start, subtree.end, subtree.hash
            )
        except (MalformedError, UsageError):
            return False
        if len(raw) != MLDSA44_SIG_SIZE:
            return False
        try:
            self._key.verify(raw, msg)
        except InvalidSignature:
            return False
        return True


class SubtreeV1Signer:
    """Signs ML-DSA-44 subtree/v1 cosignatures (type 0x06), from a 32-byte seed.

    ML-DSA signing is hedged (randomised): signatures differ from run to run, all verify.
    """

    key_type = TYPE_SUBTREE_V1

    def __init__(self, name: str, seed: bytes, clock: Clock = time.time) -> None:
        check_key_name(name)
        if not 1 <= len(name.encode("utf-8")) <= 255:
            raise MalformedError("ML-DSA-44 cosigner name must be 1..255 bytes")
        if len(seed) != 32:
            raise MalformedError(f"ML-DSA-44 seed is {len(seed)} bytes, not 32")
        self.name = name
        self.seed = seed
        self.clock = clock
        self._key = mldsa.MLDSA44PrivateKey.from_seed_bytes(seed)
        self.public_key = self._key.public_key().public_bytes_raw()
        self.key_id = key_id(name, TYPE_SUBTREE_V1, self.public_key)

    def sign(self, text: bytes) -> bytes:
        """Cosign a checkpoint note text at the clock's current second."""
        return self.sign_at(text, _now(self.clock))

    def sign_at(self, text: bytes, timestamp: int) -> bytes:
        cp = Checkpoint.parse(text)
        return self.sign_subtree(Subtree(cp.origin, 0, cp.size, cp.root), timestamp)

    def sign_subtree(self, subtree: Subtree, timestamp: int = 0) -> bytes:
        msg = subtree_v1_message(
            self.name, timestamp, subtree.origin, subtree.start, subtree.end, subtree.hash
        )
        return struct.pack(">Q", timestamp) + self._key.sign(msg)

    def verifier(self) -> SubtreeV1Verifier:
        return SubtreeV1Verifier(self.name, self.public_key)
