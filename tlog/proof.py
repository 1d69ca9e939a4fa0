"""C2SP tlog-proof@v1: an offline-verifiable proof that an entry is in a log.

A proof file (extension ``.tlog-proof``) is LF-separated lines::

    c2sp.org/tlog-proof@v1          line 1, exactly these bytes
    extra <base64>                  OPTIONAL: opaque, unauthenticated data; no line when absent
    index <decimal>                 the entry's 0-based leaf index
    <base64 hash>                   0..63 lines: the RFC 6962 inclusion proof PATH(index, tree),
                                    the leaf's sibling first, the root's child last
                                    (the empty line)
    <checkpoint>                    the signed checkpoint note, verbatim, to the end of the file

The spec leaves some points open (digest §15 item 18); this module decides them as follows, so
that one proof has exactly one spelling:

* Base64 is canonical, padded, standard-alphabet (:func:`tlog.encoding.b64decode`): no spaces,
  no missing padding, no non-zero trailing bits.
* The ``extra`` line is ``extra``, one space, then base64; it can only be line 2. It is
  omitted when there is no extra data, and ``extra`` with empty base64 is refused (absent means
  absent). The data is at most :data:`MAX_EXTRA_SIZE` bytes, well under what the Go reference
  (transparency-dev/formats, whose line reader stops at 64 KiB) can read back.
* ``index`` is a canonical decimal ("0" or no leading zero, ASCII digits only, one space after
  ``index``), at most 2^63-1 like every size and index in this package.
* Each proof line is one hash: 44 base64 characters decoding to exactly 32 bytes. At most
  :data:`MAX_PROOF_HASHES` (63) lines: an inclusion proof in a tree of fewer than 2^63 leaves
  never has more. (tlog-witness sets 63 too, by rule: a *consistency* proof to a size past
  2^62 can need 64, and such a step cannot be witnessed.)
* The proof/checkpoint split is at the **first** empty line (the checkpoint note contains its
  own empty line before its signatures).
* No CR anywhere: CRLF files are malformed, not normalised (the Go reference's line scanner
  silently drops CR before LF; that makes two files one proof and changes the checkpoint's
  signed bytes).
* The checkpoint part must be a structurally valid signed note (:func:`tlog.note.parse_note`)
  whose text is a valid checkpoint (:meth:`tlog.checkpoint.Checkpoint.parse`); so trailing
  data after the checkpoint, or a second empty line, is refused. Nothing is verified at parse
  time. The checkpoint is kept byte for byte, so :meth:`TlogProof.format` gives back the parsed
  file exactly.
* Signature lines from keys the verifier does not know are allowed and ignored (signed-note).

Verification (:func:`verify_proof`) follows the spec's steps in order:

1. the leaf hash is application-specific: the caller computes it (RFC 6962 leaves:
   :func:`tlog.merkle.leaf_hash` of the entry);
2. the checkpoint's origin must be the expected one, and the note must carry a valid signature
   from one of the given *log* keys (:func:`tlog.checkpoint.open_checkpoint`);
3. cosignatures from the given cosigner keys are verified in the same note opening (a bad one
   from a known cosigner rejects the proof); policy (k-of-n, tlog-policy) is the caller's,
   through the optional ``policy`` hook, which runs here, before the inclusion proof;
4. the inclusion proof of the leaf hash at ``index`` must lead to the checkpoint's root at its
   size (:func:`tlog.merkle.verify_inclusion`).

The ``extra`` data is not authenticated by any of this: applications must not trust it
implicitly (TP-2).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tlog.checkpoint import Checkpoint, SignedCheckpoint, open_checkpoint, origin_of
from tlog.encoding import (
    HASH_SIZE,
    MAX_INT63,
    b64decode,
    b64encode,
    parse_decimal,
    parse_hash,
    shown,
)
from tlog.errors import MalformedError, UnverifiedNoteError, UsageError, VerificationError
from tlog.merkle import HashReader, inclusion_proof, stored_hash_index, verify_inclusion
from tlog.note import MAX_NOTE_SIZE, Signature, Verifier, parse_note

__all__ = [
    "FILE_EXTENSION",
    "HEADER",
    "MAX_EXTRA_SIZE",
    "MAX_PROOF_HASHES",
    "MAX_PROOF_SIZE",
    "Policy",
    "TlogProof",
    "VerifiedProof",
    "build_proof",
    "verify_proof",
]


HEADER = b"c2sp.org/tlog-proof@v1"
"""Line 1 of every proof file (without its LF)."""

FILE_EXTENSION = ".tlog-proof"
"""The file extension proofs SHOULD be stored with (TP-6)."""

MAX_PROOF_HASHES = 63
"""Most inclusion-proof lines accepted: ceil(log2(size)) <= 63 for every size < 2^63."""

MAX_EXTRA_SIZE = 32 * 1024
"""Most bytes of ``extra`` data accepted (the spec sets no bound; see the module docstring)."""

_EXTRA = b"extra "
_INDEX = b"index "
_MAX_EXTRA_B64 = 4 * ((MAX_EXTRA_SIZE + 2) // 3)
_MAX_HEADER_SIZE = (
    len(HEADER) + 1
    + len(_EXTRA) + _MAX_EXTRA_B64 + 1
    + len(_INDEX) + len(str(MAX_INT63)) + 1
    + MAX_PROOF_HASHES * 45
    + 1
)  # fmt: skip

MAX_PROOF_SIZE = _MAX_HEADER_SIZE + MAX_NOTE_SIZE
"""Largest proof file accepted, in bytes: the largest header part plus the largest note."""


@dataclass(frozen=True)
class TlogProof:
    """One tlog-proof@v1 file: index, inclusion-proof hashes, checkpoint note, optional extra.

    Construct with :meth:`parse`, or directly (then :meth:`format`). The constructor checks
    every field against the format's rules (raising :class:`MalformedError`), so every
    ``TlogProof`` formats to a file that :meth:`parse` reads back equal. ``hashes`` may be given
    as any sequence of bytes-like values; it is stored as a tuple of ``bytes``.

    ``checkpoint`` is the signed note, verbatim and *unverified*. ``extra`` is None when the
    file has no ``extra`` line; it is never authenticated.
    """

    index: int
    hashes: tuple[bytes, ...]
    checkpoint: bytes
    extra: bytes | None = None

    def __post_init__(self) -> None:
        if isinstance(self.index, bool) or not isinstance(self.index, int):
            raise MalformedError(f"tlog-proof index {shown(self.index)} is not an integer")
        if not 0 <= self.index <= MAX_INT63:
            raise MalformedError(f"tlog-proof index {self.index} is out of range [0, 2^63-1]")
        hashes = tuple(bytes(h) for h in self.hashes)
        object.__setattr__(self, "hashes", hashes)
        if len(hashes) > MAX_PROOF_HASHES:
            raise MalformedError(
                f"tlog-proof has {len(hashes)} proof hashes, at most {MAX_PROOF_HASHES}"
            )
        for i, h in enumerate(hashes):
            if len(h) != HASH_SIZE:
                raise MalformedError(f"tlog-proof hash {i} is {len(h)} bytes, not 32")
        if self.extra is not None:
            extra = bytes(self.extra)
            object.__setattr__(self, "extra", extra)
            if not extra:
                raise MalformedError("tlog-proof extra data is empty (use None for no extra)")
            if len(extra) > MAX_EXTRA_SIZE:
                raise MalformedError(
                    f"tlog-proof extra data is {len(extra)} bytes, at most {MAX_EXTRA_SIZE}"
                )
        checkpoint = bytes(self.checkpoint)
        object.__setattr__(self, "checkpoint", checkpoint)
        # Structure only: a note whose text is a checkpoint. Signatures are verify_proof's job.
        text, _ = parse_note(checkpoint)
        Checkpoint.parse(text)

    @classmethod
    def parse(cls, data: bytes) -> TlogProof:
        """Parse a proof file strictly (see the module docstring); nothing is verified.

        Raises :class:`MalformedError` naming the line at fault.
        """
        data = bytes(data)
        if len(data) > MAX_PROOF_SIZE:
            raise MalformedError(
                f"tlog-proof is {len(data)} bytes, more than the {MAX_PROOF_SIZE} allowed"
            )
        cr = data.find(b"\r")
        if cr >= 0:
            cr_line = data.count(b"\n", 0, cr) + 1
            raise MalformedError(
                f"tlog-proof line {cr_line} contains a carriage return (lines end in LF alone)"
            )
        lines = _Lines(data)

        n, line = lines.next()
        if line != HEADER:
            raise MalformedError(
                f"tlog-proof line 1 is {line[:40]!r}, not {HEADER.decode('ascii')!r}"
            )

        n, line = lines.next()
        extra: bytes | None = None
        if line.startswith(b"extra"):
            if not line.startswith(_EXTRA):
                raise MalformedError(f"tlog-proof line {n}: 'extra' is not followed by a space")
            b64 = line[len(_EXTRA) :]
            if not b64:
                raise MalformedError(
                    f"tlog-proof line {n}: the extra line is empty "
                    "(the line is omitted when there is no extra data)"
                )
            if len(b64) > _MAX_EXTRA_B64:
                raise MalformedError(
                    f"tlog-proof line {n}: extra data is larger than {MAX_EXTRA_SIZE} bytes"
                )
            extra = b64decode(b64, f"tlog-proof line {n}: extra data")
            if len(extra) > MAX_EXTRA_SIZE:  # the length pre-check above rounds up
                raise MalformedError(
                    f"tlog-proof line {n}: extra data is larger than {MAX_EXTRA_SIZE} bytes"
                )
            n, line = lines.next()

        if not line.startswith(_INDEX):
            what = "an empty line" if not line else repr(line[:40])
            raise MalformedError(f"tlog-proof line {n} is {what}, not 'index <decimal>'")
        try:
            index_text = line[len(_INDEX) :].decode("ascii")
        except UnicodeDecodeError:
            raise MalformedError(f"tlog-proof line {n}: the index is not ASCII digits") from None
        index = parse_decimal(index_text, f"tlog-proof line {n}: index")

        hashes: list[bytes] = []
        while True:
            n, line = lines.next()
            if not line:
                break
            if len(hashes) == MAX_PROOF_HASHES:
                raise MalformedError(
                    f"tlog-proof line {n}: more than {MAX_PROOF_HASHES} proof hashes "
                    "(or no empty line before the checkpoint)"
                )
            hashes.append(parse_hash(line, f"tlog-proof line {n}: proof hash"))

        try:
            return cls(index, tuple(hashes), data[lines.pos :], extra)
        except MalformedError as e:
            # Every other field was checked above with the same rules: this is the checkpoint.
            raise MalformedError(f"tlog-proof checkpoint (from line {n + 1}): {e}") from e

    def format(self) -> bytes:
        """The proof file, exactly as :meth:`parse` reads it."""
        out = [HEADER, b"\n"]
        if self.extra is not None:
            out += [_EXTRA, b64encode(self.extra).encode("ascii"), b"\n"]
        out.append(b"index %d\n" % self.index)
        for h in self.hashes:
            out += [b64encode(h).encode("ascii"), b"\n"]
        out += [b"\n", self.checkpoint]
        return b"".join(out)


class _Lines:
    """Reads LF-terminated lines of the header part, counting them from 1."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0
        self.lineno = 0

    def next(self) -> tuple[int, bytes]:
        self.lineno += 1
        end = self.data.find(b"\n", self.pos)
        if end < 0:
            if self.pos == len(self.data):
                raise MalformedError(
                    f"tlog-proof ends at line {self.lineno}, before the empty line and "
                    "the checkpoint"
                )
            raise MalformedError(f"tlog-proof line {self.lineno} does not end in a newline")
        line = self.data[self.pos : end]
        self.pos = end + 1
        return self.lineno, line


@dataclass(frozen=True)
class VerifiedProof:
    """The result of :func:`verify_proof`: what was proven, and the opened checkpoint.

    ``signed`` is the opened checkpoint; its ``note.sigs`` are every verified signature (log
    and cosigner keys, in note order) and ``note.unverified`` the lines from unknown keys.
    ``log_signatures`` and ``cosignatures`` split the verified ones by the role the caller
    gave their key. ``extra`` is copied from the proof and is **not authenticated**.
    """

    index: int
    leaf: bytes
    signed: SignedCheckpoint
    log_signatures: tuple[Signature, ...]
    cosignatures: tuple[Signature, ...]
    extra: bytes | None

    @property
    def checkpoint(self) -> Checkpoint:
        """The verified checkpoint (origin, size, root, extensions)."""
        return self.signed.checkpoint


Policy = Callable[[SignedCheckpoint], object]
"""A hook that judges an opened checkpoint and raises (e.g. PolicyError) to reject it."""


def verify_proof(
    proof: TlogProof,
    leaf: bytes,
    log_verifiers: Sequence[Verifier],
    *,
    origin: str | None = None,
    cosigners: Sequence[Verifier] = (),
    policy: Policy | None = None,
) -> VerifiedProof:
    """Verify that ``leaf`` is at ``proof.index`` in the log whose checkpoint the proof carries.

    ``leaf`` is the 32-byte Merkle leaf hash (for RFC 6962 entries, SHA-256(0x00 || entry)).
    ``log_verifiers`` are the keys trusted to sign checkpoints for the expected log; when
    ``origin`` is given, the checkpoint's origin line must equal it exactly. ``cosigners`` are
    witness keys: their lines are verified along with the log's (a failing one rejects the
    proof) and returned in ``cosignatures``; lines from other keys are ignored. ``policy``, if
    given, is called with the opened checkpoint after the signatures and before the inclusion
    proof are checked (the spec's step 3); it rejects by raising.

    Requires: ``len(leaf) == 32``; at least one log verifier; no (name, key ID) both a log key
    and a cosigner key (else :class:`UsageError`).

    Raises :class:`VerificationError` for an unexpected origin; the errors of
    :func:`tlog.note.open_note` (:class:`UnverifiedNoteError` also when only cosigners signed,
    :class:`InvalidSignatureError`); whatever ``policy`` raises; :class:`ProofError` when the
    index is not below the checkpoint's size or the inclusion proof does not verify.
    """
    if len(leaf) != HASH_SIZE:
        raise UsageError(f"leaf hash is {len(leaf)} bytes, not 32")
    logs = list(log_verifiers)
    if not logs:
        raise UsageError("verify_proof needs at least one log verifier")
    log_keys = {(v.name, v.key_id) for v in logs}
    witnesses = list(cosigners)
    both = log_keys & {(v.name, v.key_id) for v in witnesses}
    if both:
        name, kid = sorted(both)[0]
        raise UsageError(f"key {name}+{kid:08x} is given both as a log key and as a cosigner")

    # Step 2. The origin is compared before any signature is checked, so that a proof for
    # another log fails as such, not as "no trusted signature".
    if origin is not None:
        claimed = origin_of(proof.checkpoint)
        if claimed != origin:
            raise VerificationError(
                f"checkpoint is for origin {shown(claimed)}, not the expected {shown(origin)}"
            )
    signed = open_checkpoint(proof.checkpoint, [*logs, *witnesses])
    log_sigs = tuple(s for s in signed.note.sigs if (s.name, s.key_id) in log_keys)
    if not log_sigs:
        # open_note accepts any trusted line; a note signed by cosigners only is no checkpoint
        # from the log.
        raise UnverifiedNoteError("checkpoint carries no signature from a trusted log key")
    cosigs = tuple(s for s in signed.note.sigs if (s.name, s.key_id) not in log_keys)

    # Step 3: the caller's policy over the verified cosignatures.
    if policy is not None:
        policy(signed)

    # Step 4. verify_inclusion raises ProofError for index >= size too.
    cp = signed.checkpoint
    verify_inclusion(proof.index, cp.size, leaf, proof.hashes, cp.root)
    return VerifiedProof(proof.index, bytes(leaf), signed, log_sigs, cosigs, proof.extra)


def build_proof(
    index: int, checkpoint: bytes, reader: HashReader, extra: bytes | None = None
) -> TlogProof:
    """Build the proof of leaf ``index`` against a log's own signed ``checkpoint``.

    ``reader`` holds the log's stored hashes (:mod:`tlog.merkle`) for at least the checkpoint's
    size. The proof is checked against the checkpoint's root before it is returned, so a store
    never hands out a proof that does not verify. The checkpoint's signatures are not checked.

    Requires: 0 <= index < the checkpoint's size (else :class:`UsageError`).

    Raises :class:`MalformedError` if ``checkpoint`` is not a checkpoint note or ``extra`` is
    empty or too large, and :class:`ProofError` if the reader's tree does not match the
    checkpoint's root.
    """
    text, _ = parse_note(checkpoint)
    cp = Checkpoint.parse(text)
    if not 0 <= index < cp.size:
        raise UsageError(f"index {index} is not in the checkpoint's tree of size {cp.size}")
    hashes = inclusion_proof(index, cp.size, reader)
    (leaf,) = reader.read_hashes([stored_hash_index(0, index)])
    verify_inclusion(index, cp.size, leaf, hashes, cp.root)
    return TlogProof(index, tuple(hashes), checkpoint, extra)
