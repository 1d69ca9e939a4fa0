"""Shared vectors and helpers of tlog's tests: published keys and notes, a tiny log, the
witness's add-checkpoint decision in tlog terms, and the transparency-dev/merkle vectors.

Each vector carries its provenance (repository, commit, path); the copies in testdata/ are
described by testdata/README.md and the README of each testdata folder.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
from collections.abc import Callable, Iterable, Sequence

import pytest

from tests.vectors import TESTDATA
from tlog.checkpoint import Checkpoint, open_checkpoint, origin_of
from tlog.errors import MalformedError
from tlog.merkle import (
    MemoryHashStore,
    consistency_proof,
    leaf_hash,
    verify_consistency,
    verify_inclusion,
)
from tlog.note import Ed25519Signer, Ed25519Verifier, Verifier, sign_note
from tlog.witnessproto import AddCheckpointRequest, check_update

MERKLE = TESTDATA / "transparency-dev-merkle" / "testdata"

EMPTY_ROOT_B64 = "47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU="  # RFC 6962: SHA-256("")
EMPTY_LEAF_B64 = "bjQLnP+zepicpUTmu3gKLHiQHT+zNzh2hRGjBhevoB0="  # RFC 6962 §2.1: SHA-256(0x00)


# --- shared vectors --------------------------------------------------------------------------

# testdata/golang-mod/README.md: golang/mod@fe2ec04f7c3c3aa6fad97631aafcff6e49e2d1db
# sumdb/note/note_test.go
PETER_SKEY = "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz"
PETER_VKEY = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
ENOCH_VKEY = "EnochRoot+af0cfe78+ATtqJ7zOtqQtYqOo0CpvDXNlMhV3HeJDpjrASKGLWdop"
PETER_TEXT = (
    b"If you think cryptography is the answer to your problem,\n"
    b"then you don't know what your problem is.\n"
)
PETER_LINE = (
    "— PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb"
    "6KE6RyyBwJnAM=\n"
).encode()
ENOCH_LINE = (
    "— EnochRoot rwz+eBzmZa0SO3NbfRGzPCpDckykFXSdeX+MNtCOXm2/5n2tiOHp+vAF1aGrQ5ovTG01oOTGwnWLox33WW"
    "d1RvMc+QQ=\n"
).encode()
PETER_NOTE = PETER_TEXT + b"\n" + PETER_LINE

# signed-note vkeys; golang/go@c674ce87c2e47699bb51e02885fb80519ecbfb27
# src/cmd/go/internal/modfetch/key.go (knownGOSUMDB)
SUMDB_VKEY = "sum.golang.org+033de0ae+Ac4zctda0e5eza+HJyk9SxEdh+s3Ux18htTTAD8OuAn8"
# testdata/torchwood/README.md: FiloSottile/torchwood@341dc2f0f552a29816955d4834718cd741f1ca64
# cmd/litewitness/testdata/sumdb.txt (interop copy: sum.golang.org/checkpoint-35225469.txt)
SUMDB_NOTE = (
    "go.sum database tree\n"
    "35225469\n"
    "vt5T6GaLCXvyHFl9VUvvItR43XZxfLgftEcTyO3eJCQ=\n"
    "\n"
    "— sum.golang.org Az3grpukl5AXaVfYkLiDGORx/DN2nlcS5kZHR5uYOBV2KA2HgXpD+gu9HHONebHLAyaKbbTM75Q"
    "TtPydhKCExixSfwQ=\n"
).encode()

# testdata/transparency-dev-formats/README.md:
# transparency-dev/formats@0b850f1a7b4a5b70deeacac6535e4b8023809d21
# note/note_cosigv1_test.go
TEST_VKEY = "TEST+7997405c+AQcC+FTVKf0jlTdHDY3rbevmnKxxPjigCXlVtGe6RIr6"
REMORA_VKEY = "remora.n621.de+da77ade7+BOvN63jn/bLvkieywe8R6UYAtVtNbZpXh34x7onlmtw2"
# Edge case 6: the ML-DSA-44 vkey formats lists as working; its declared key ID is wrong.
# testdata/transparency-dev-formats/cosignature_v1_vectors.json (vkeys_disputed), extracted
# from transparency-dev/formats@0b850f1a7b4a5b70deeacac6535e4b8023809d21 note/note_cosigv1_test.go.
FORMATS_MLDSA_VKEY: str = json.loads(
    (TESTDATA / "transparency-dev-formats" / "cosignature_v1_vectors.json").read_text()
)["vkeys_disputed"][0]["vkey"]

T0 = 1_700_000_000  # a fixed, non-zero cosignature clock


def seed_of(label: str) -> bytes:
    """A deterministic 32-byte key seed per label."""
    return hashlib.sha256(b"tlog edge-case seed " + label.encode()).digest()


def fixed_clock(t: float) -> Callable[[], float]:
    return lambda: t


def b64d(text: str) -> bytes:
    return base64.b64decode(text, validate=True)


class TinyLog:
    """An in-memory RFC 6962 log with an Ed25519 key: checkpoints, notes, proofs, requests."""

    def __init__(self, origin: str, size: int) -> None:
        self.origin = origin
        self.signer = Ed25519Signer(origin, seed_of(origin))
        self.store = MemoryHashStore()
        self.store.extend(leaf_hash(b"entry %d" % i) for i in range(size))

    @property
    def verifier(self) -> Ed25519Verifier:
        return self.signer.verifier()

    def checkpoint(self, size: int, extensions: Sequence[str] = ()) -> Checkpoint:
        return Checkpoint(self.origin, size, self.store.root(size), tuple(extensions))

    def note(self, size: int, extensions: Sequence[str] = ()) -> bytes:
        return sign_note(self.checkpoint(size, extensions).format(), [self.signer])

    def proof(self, old: int, size: int) -> tuple[bytes, ...]:
        return tuple(consistency_proof(old, size, self.store)) if old else ()

    def request(
        self, old: int, size: int, proof: Sequence[bytes] | None = None
    ) -> AddCheckpointRequest:
        p = self.proof(old, size) if proof is None else tuple(proof)
        return AddCheckpointRequest(old, p, self.note(size))


@functools.cache
def tiny_log() -> TinyLog:
    return TinyLog("example.com/edge-log", 40)


def decide(
    stored_size: int, stored_root: bytes | None, body: bytes, verifiers: Iterable[Verifier]
) -> Checkpoint:
    """The witness's add-checkpoint decision in tlog terms (tlog-witness's check order), minus
    origin lookup and I/O."""
    request = AddCheckpointRequest.parse(body)
    signed = open_checkpoint(request.checkpoint, verifiers)
    check_update(stored_size, stored_root, request, signed.checkpoint)
    return signed.checkpoint


def assert_request_refused(body: bytes, verifiers: Sequence[Verifier]) -> None:
    """The body is refused as malformed (400) in the witness's order (tlog-witness): request
    framing, then the origin line used for key lookup, then the note and the checkpoint text."""
    with pytest.raises(MalformedError):
        request = AddCheckpointRequest.parse(body)
        origin_of(request.checkpoint)
        open_checkpoint(request.checkpoint, verifiers)


# transparency-dev/merkle@417fb0c314750d94e53942e9f92e79b6d35915db testdata/, copied byte for byte
# into testdata/transparency-dev-merkle/testdata (README.md there gives the provenance).
def merkle_vector(relpath: str) -> dict[str, object]:
    data: dict[str, object] = json.loads((MERKLE / relpath).read_text())
    return data


def hashes_of(value: object) -> list[bytes]:
    """A vector's proof field (JSON null means empty) as raw hashes."""
    if value is None:
        return []
    assert isinstance(value, list)
    return [b64d(str(h)) for h in value]


def as_int(value: object) -> int:
    assert isinstance(value, int)
    return value


def as_str(value: object) -> str:
    assert isinstance(value, str)
    return value


def verify_inclusion_vector(vector: dict[str, object]) -> None:
    """tlog.merkle.verify_inclusion on a transparency-dev/merkle inclusion vector's fields."""
    verify_inclusion(
        as_int(vector["leafIdx"]),
        as_int(vector["treeSize"]),
        b64d(as_str(vector["leafHash"])),
        hashes_of(vector["proof"]),
        b64d(as_str(vector["root"])),
    )


def verify_consistency_vector(vector: dict[str, object]) -> None:
    """tlog.merkle.verify_consistency on a transparency-dev/merkle consistency vector's
    fields."""
    verify_consistency(
        as_int(vector["size1"]),
        as_int(vector["size2"]),
        b64d(as_str(vector["root1"])),
        b64d(as_str(vector["root2"])),
        hashes_of(vector["proof"]),
    )
