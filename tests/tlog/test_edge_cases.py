"""The edge cases of docs/specs.md §14: one test (or a small group) per item, at tlog's level.

Each test is named ``test_edge_NN_<short_name>`` after §14 item NN. Spec literals are inlined with
a comment citing the spec section; vectors published by other projects carry their provenance
(repository, commit, path).

tlog is pure (no I/O, no server), so the items about a running witness are tested as the
decisions and guarantees tlog provides; the rest belongs to the witness server's own tests:

* item 11/12/13/14: the HTTP statuses are the server's mapping of the exceptions tested here
  (MalformedError → 400, UnverifiedNoteError/InvalidSignatureError → 403, unknown origin → 404,
  ConflictError → 409, ProofError → 422);
* item 15: only the sequential model of the compare-and-swap is tested here; the concurrent
  version (two racing requests, the stalled-request rollback race) belongs to the witness server
  tests;
* item 16 (durability after a kill) is covered fully by the witness server tests of a later
  issue; here only what tlog guarantees: the decision is a pure function of its inputs, and a
  cosignature depends only on the request's note text;
* item 25: the server's publish order is tested by the log/store tests; here the tile-level
  guarantee that the tiles written on each growth cover every tile a checkpoint implies;
* item 30: the 404 for non-canonical monitoring paths is the server's; here the path itself.
"""

from __future__ import annotations

import base64
import copy
import functools
import hashlib
import json
import struct
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric import mldsa
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import given, settings
from hypothesis import strategies as st

from tlog.checkpoint import Checkpoint, open_checkpoint, origin_of
from tlog.cosignature import (
    CosignatureV1Signer,
    Subtree,
    SubtreeV1Signer,
    cosignature_v1_message,
    split_timestamped,
    subtree_v1_message,
    timestamp_of,
)
from tlog.encoding import MAX_INT63, b64encode
from tlog.errors import (
    InvalidSignatureError,
    MalformedError,
    ProofError,
    UnverifiedNoteError,
    UsageError,
)
from tlog.keys import cosigner_from_vkey, format_vkey, parse_signer_key, parse_vkey
from tlog.merkle import (
    EMPTY_ROOT,
    MemoryHashStore,
    consistency_proof,
    consistency_proof_size,
    inclusion_proof,
    leaf_hash,
    node_hash,
    root,
    root_of_entries,
    verify_consistency,
    verify_inclusion,
)
from tlog.note import (
    MAX_SIGNATURES,
    Ed25519Signer,
    Ed25519Verifier,
    Signature,
    Verifier,
    add_signatures,
    format_note,
    key_id,
    open_note,
    parse_note,
    sign_note,
)
from tlog.policy import Policy
from tlog.tiles import (
    STATIC_CT_MAX_LEVEL,
    TILE_WIDTH,
    Bundle,
    Tile,
    bundles_for_size,
    format_bundle,
    format_tile_index,
    new_bundles,
    new_tiles,
    parse_bundle,
    parse_tile_index,
    parse_tile_path,
    tile_root,
    tiles_for_size,
    tiles_from_leaf_hashes,
)
from tlog.witnessproto import (
    MAX_PROOF_LINES,
    MAX_REQUEST_SIZE,
    SIZE_CONTENT_TYPE,
    AddCheckpointRequest,
    ConflictError,
    check_request,
    check_update,
    format_size_body,
    monitoring_path,
    origin_hash,
    parse_cosignature_response,
    parse_size_body,
)

TESTDATA = Path(__file__).resolve().parents[2] / "testdata"
MERKLE = TESTDATA / "transparency-dev-merkle" / "testdata"

EMPTY_ROOT_B64 = "47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU="  # §3.1, §14.27: SHA-256("")
EMPTY_LEAF_B64 = "bjQLnP+zepicpUTmu3gKLHiQHT+zNzh2hRGjBhevoB0="  # §12.4, §14.27: SHA-256(0x00)


# --- shared vectors --------------------------------------------------------------------------

# §12.2: golang/mod@fe2ec04f7c3c3aa6fad97631aafcff6e49e2d1db sumdb/note/note_test.go
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

# §2.5, §12.5: golang/go@c674ce87c2e47699bb51e02885fb80519ecbfb27
# src/cmd/go/internal/modfetch/key.go (knownGOSUMDB)
SUMDB_VKEY = "sum.golang.org+033de0ae+Ac4zctda0e5eza+HJyk9SxEdh+s3Ux18htTTAD8OuAn8"
# §12.5: FiloSottile/torchwood@341dc2f0f552a29816955d4834718cd741f1ca64
# cmd/litewitness/testdata/sumdb.txt (interop copy: sum.golang.org/checkpoint-35225469.txt)
SUMDB_NOTE = (
    "go.sum database tree\n"
    "35225469\n"
    "vt5T6GaLCXvyHFl9VUvvItR43XZxfLgftEcTyO3eJCQ=\n"
    "\n"
    "— sum.golang.org Az3grpukl5AXaVfYkLiDGORx/DN2nlcS5kZHR5uYOBV2KA2HgXpD+gu9HHONebHLAyaKbbTM75Q"
    "TtPydhKCExixSfwQ=\n"
).encode()

# §12.3: transparency-dev/formats@0b850f1a7b4a5b70deeacac6535e4b8023809d21
# note/note_cosigv1_test.go
TEST_VKEY = "TEST+7997405c+AQcC+FTVKf0jlTdHDY3rbevmnKxxPjigCXlVtGe6RIr6"
REMORA_VKEY = "remora.n621.de+da77ade7+BOvN63jn/bLvkieywe8R6UYAtVtNbZpXh34x7onlmtw2"
# §12.3 and §14.6: the ML-DSA-44 vkey formats lists as working; its declared key ID is wrong.
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
    """The witness's add-checkpoint decision in tlog terms (§5.4), minus origin lookup and I/O."""
    request = AddCheckpointRequest.parse(body)
    signed = open_checkpoint(request.checkpoint, verifiers)
    check_update(stored_size, stored_root, request, signed.checkpoint)
    return signed.checkpoint


def assert_request_refused(body: bytes, verifiers: Sequence[Verifier]) -> None:
    """The body is refused as malformed (400) in the witness's order (§5.4): request framing,
    then the origin line used for key lookup, then the note and the checkpoint text."""
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


# --- 1..10: signed notes, keys, cosignatures ---------------------------------------------------


def test_edge_01_em_dash_prefix() -> None:
    # The reference note opens, so every failure below is the prefix alone.
    assert open_note(PETER_NOTE, [parse_vkey(PETER_VKEY)]).text == PETER_TEXT
    assert PETER_LINE.startswith(b"\xe2\x80\x94 ")
    tail = PETER_LINE[len("— ".encode()) :]
    for prefix in (b"- ", b"-- ", b"\xe2\x80\x93 ", b"\xe2\x80\x94", b"\xe2\x80\x94\xc2\xa0", b" "):
        note = PETER_TEXT + b"\n" + prefix + tail
        with pytest.raises(MalformedError):
            parse_note(note)
        # Rejected as malformed, not skipped as an unknown line.
        with pytest.raises(MalformedError):
            open_note(note, [parse_vkey(PETER_VKEY)])
        # Not even a good line before it rescues the note.
        with pytest.raises(MalformedError):
            open_note(PETER_NOTE + prefix + tail, [parse_vkey(PETER_VKEY)])


def test_edge_02_last_vs_first_blank_line() -> None:
    # A note: split at the LAST blank line. The signed-note intro example (§12.1, C2SP/C2SP@
    # 5ba5ee830903e91240fc6f9f3a7a9293d49e69c9 signed-note.md) has a blank line in its text.
    quasimodo = (
        "Ognuno sta solo sul cuor della terra\n"
        "trafitto da un raggio di sole:\n"
        "\n"
        "ed è subito sera.\n"
        "\n"
        "— quasimodo.example/salvatore NnugSzTjtVAewIS+Z/iJhUPeFDkO/5QQ2i5ddnGITLlC+EhfLW9oJKONrMou"
        "FSQU0xMcXxj99ihAQwaqP3ZekRwNtIc=\n"
    ).encode()
    text, sigs = parse_note(quasimodo)
    assert (
        text
        == (
            "Ognuno sta solo sul cuor della terra\ntrafitto da un raggio di sole:\n\n"
            "ed è subito sera.\n"
        ).encode()
    )
    assert [(s.name, s.key_id) for s in sigs] == [("quasimodo.example/salvatore", 0x367BA04B)]
    with pytest.raises(UnverifiedNoteError):  # no published key: never trusted
        open_note(quasimodo, [])

    # With a key of our own, a text holding blank lines signs and opens to the whole text.
    signer = Ed25519Signer("example.com/poet", seed_of("poet"))
    poem = b"first\n\nsecond\n\n\nthird\n"
    assert open_note(sign_note(poem, [signer]), [signer.verifier()]).text == poem

    # A request: split at the FIRST blank line; "old 0" with no proof lines (§14.2).
    log = tiny_log()
    note = log.note(5)
    request = AddCheckpointRequest.parse(b"old 0\n\n" + note)
    assert (request.old, request.proof, request.checkpoint) == (0, (), note)
    assert request.format() == b"old 0\n\n" + note
    # With proof lines the checkpoint still starts after the first blank line.
    proof = log.proof(3, 5)
    body = b"old 3\n" + b"".join(b64encode(h).encode() + b"\n" for h in proof) + b"\n" + note
    request = AddCheckpointRequest.parse(body)
    assert (request.old, request.proof, request.checkpoint) == (3, proof, note)
    assert request.format() == body
    assert open_checkpoint(request.checkpoint, [log.verifier]).checkpoint.size == 5


def test_edge_03_signed_bytes() -> None:
    peter = parse_signer_key(PETER_SKEY).signer()
    # Signing reproduces the published note byte for byte (Ed25519 is deterministic).
    assert sign_note(PETER_TEXT, [peter]) == PETER_NOTE
    note = open_note(PETER_NOTE, [parse_vkey(PETER_VKEY)])
    assert note.text == PETER_TEXT  # the final LF included, the blank separator excluded
    (sig,) = note.sigs
    verifier = parse_vkey(PETER_VKEY)
    assert verifier.verify(PETER_TEXT, sig.sig)
    assert not verifier.verify(PETER_TEXT[:-1], sig.sig)  # without the final LF
    assert not verifier.verify(PETER_TEXT + b"\n", sig.sig)  # with the separator
    # A signature over the text without its final LF is a bad signature from a trusted key.
    assert isinstance(peter, Ed25519Signer)
    wrong = Signature(peter.name, peter.key_id, peter.sign(PETER_TEXT[:-1]))
    with pytest.raises(InvalidSignatureError):
        open_note(PETER_TEXT + b"\n" + wrong.line(), [verifier])


def test_edge_04_key_id_input() -> None:
    def sha4(data: bytes) -> int:
        return int.from_bytes(hashlib.sha256(data).digest()[:4], "big")

    for vkey, want in (
        (PETER_VKEY, 0xC74F20A3),
        (REMORA_VKEY, 0xDA77ADE7),
        (SUMDB_VKEY, 0x033DE0AE),
    ):
        v = parse_vkey(vkey)
        assert v.key_id == want
        assert key_id(v.name, v.key_type, v.public_key) == want
        name = v.name.encode()
        t = bytes([v.key_type])
        assert sha4(name + b"\n" + t + v.public_key) == want
        # The wrong preimages give other IDs, so a vkey built with them would be refused.
        for wrong in (name + v.public_key, t + v.public_key, name + t + v.public_key):
            assert sha4(wrong) != want
    assert parse_vkey(REMORA_VKEY).key_type == 0x04


def test_edge_05_vkey_splitting() -> None:
    for vkey, name, key_type in ((SUMDB_VKEY, "sum.golang.org", 0x01), (TEST_VKEY, "TEST", 0x01)):
        v = parse_vkey(vkey)
        assert (v.name, v.key_type, len(v.public_key)) == (name, key_type, 32)
        assert "+" in vkey.split("+", 2)[2]  # the base64 part does contain '+'
        assert format_vkey(v) == vkey


def test_edge_06_vkey_id_verification() -> None:
    assert FORMATS_MLDSA_VKEY.startswith("test+5893dc2c+Bt")
    assert len(FORMATS_MLDSA_VKEY) == 1766
    with pytest.raises(MalformedError, match="31236897"):
        parse_vkey(FORMATS_MLDSA_VKEY)
    # The key itself is fine: with the computed ID the same vkey parses.
    fixed = FORMATS_MLDSA_VKEY.replace("+5893dc2c+", "+31236897+", 1)
    v = parse_vkey(fixed)
    assert (v.key_type, v.key_id, len(v.public_key)) == (0x06, 0x31236897, 1312)
    # The same for an Ed25519 vkey with one ID digit changed.
    with pytest.raises(MalformedError):
        parse_vkey(PETER_VKEY.replace("c74f20a3", "c74f20a4"))


def test_edge_07_unknown_vs_known_keys() -> None:
    peter = parse_vkey(PETER_VKEY)
    good = open_note(PETER_NOTE, [peter]).sigs[0]
    other_id = Signature(good.name, good.key_id ^ 1, good.sig)  # trusted name, other ID
    other_name = Signature("PeterNeumann2", good.key_id, good.sig)  # trusted ID, other name
    # Lines matching the name only or the ID only are unknown: ignored, never verified.
    note = open_note(PETER_TEXT + b"\n" + other_id.line() + other_name.line() + PETER_LINE, [peter])
    assert note.sigs == (good,)
    assert set(note.unverified) == {other_id, other_name}
    # Matching (name, ID) with a bad signature rejects the whole note, good line or not.
    bad = Signature(good.name, good.key_id, bytes([good.sig[0] ^ 1]) + good.sig[1:])
    for lines in (bad.line(), PETER_LINE + bad.line(), bad.line() + PETER_LINE):
        with pytest.raises(InvalidSignatureError) as excinfo:
            open_note(PETER_TEXT + b"\n" + lines, [peter])
        assert (excinfo.value.name, excinfo.value.key_id) == ("PeterNeumann", 0xC74F20A3)
    # Only unknown lines: rejected.
    with pytest.raises(UnverifiedNoteError):
        open_note(PETER_TEXT + b"\n" + other_id.line() + other_name.line(), [peter])
    with pytest.raises(UnverifiedNoteError):
        open_note(PETER_TEXT + b"\n" + PETER_LINE + ENOCH_LINE, [])


def test_edge_08_type_confusion() -> None:
    # The TEST key of §12.3: one Ed25519 key, two types, two IDs.
    assert parse_vkey(TEST_VKEY).key_id == 0x7997405C
    cosigner = cosigner_from_vkey(TEST_VKEY)
    assert (cosigner.key_type, cosigner.key_id) == (0x04, 0xFDD2DBC7)

    # With a key we hold: the same seed as a log key (0x01) and as a cosigner key (0x04).
    s = seed_of("type-confusion")
    log_signer = Ed25519Signer("example.com/dual", s)
    cos_signer = CosignatureV1Signer("example.com/dual", s, clock=fixed_clock(T0))
    assert log_signer.public_key == cos_signer.public_key
    assert log_signer.key_id != cos_signer.key_id
    text = tiny_log().checkpoint(7).format()
    assert cosignature_v1_message(text, T0) != text  # different signed messages
    log_sig = log_signer.sign(text)
    cos_sig = cos_signer.sign(text)
    log_v, cos_v = log_signer.verifier(), cos_signer.verifier()
    assert log_v.verify(text, log_sig)
    assert cos_v.verify(text, cos_sig)
    assert not log_v.verify(text, cos_sig)
    assert not log_v.verify(text, cos_sig[8:])  # not even with the timestamp stripped
    assert not cos_v.verify(text, log_sig)
    assert not cos_v.verify(text, struct.pack(">Q", T0) + log_sig)

    # In a note: a cosignature line is unknown to the 0x01 verifier (its ID differs) ...
    cos_line = Signature(cos_signer.name, cos_signer.key_id, cos_sig)
    with pytest.raises(UnverifiedNoteError):
        open_note(format_note(text, [cos_line]), [log_v])
    # ... and relabelled with the other type's ID it is a bad signature, both ways.
    with pytest.raises(InvalidSignatureError):
        open_note(format_note(text, [Signature(log_signer.name, log_v.key_id, cos_sig)]), [log_v])
    relabelled = Signature(cos_signer.name, cos_v.key_id, log_sig)
    with pytest.raises(InvalidSignatureError):
        open_note(format_note(text, [relabelled]), [cos_v])


def test_edge_09_extension_lines_ed25519_vs_mldsa() -> None:
    log = tiny_log()
    text = log.checkpoint(9, ["ext"]).format()
    mutated = log.checkpoint(9, ["exu"]).format()
    assert text.endswith(b"\next\n")
    ed = CosignatureV1Signer("witness.example/ed", seed_of("ed"), clock=fixed_clock(T0))
    ml = SubtreeV1Signer("witness.example/ml", seed_of("ml"), clock=fixed_clock(T0))
    log_sig, ed_sig, ml_sig = log.signer.sign(text), ed.sign(text), ml.sign(text)
    assert log.verifier.verify(text, log_sig)
    assert ed.verifier().verify(text, ed_sig)
    assert ml.verifier().verify(text, ml_sig)
    assert not log.verifier.verify(mutated, log_sig)
    assert not ed.verifier().verify(mutated, ed_sig)
    assert ml.verifier().verify(mutated, ml_sig)  # subtree/v1 does not cover extension lines

    lines = [
        Signature(log.signer.name, log.signer.key_id, log_sig),
        Signature(ed.name, ed.key_id, ed_sig),
        Signature(ml.name, ml.key_id, ml_sig),
    ]
    all_verifiers: list[Verifier] = [log.verifier, ed.verifier(), ml.verifier()]
    assert len(open_note(format_note(text, lines), all_verifiers).sigs) == 3
    bad = format_note(mutated, lines)
    for failing in (log.verifier, ed.verifier()):
        with pytest.raises(InvalidSignatureError):
            open_note(bad, [failing, ml.verifier()])
    opened = open_note(bad, [ml.verifier()])
    assert [s.name for s in opened.sigs] == [ml.name]


def test_edge_10_timestamp_encoding_and_range() -> None:
    # 8 bytes big-endian, then the decimal `time` line: the spec's cosigned message (§4.3,
    # C2SP tlog-cosignature@v1.0.1 "Signed message").
    body = b"example.com/behind-the-sofa\n20852163\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n"
    assert cosignature_v1_message(body, 1679315147) == b"cosignature/v1\ntime 1679315147\n" + body
    assert cosignature_v1_message(body, 0).startswith(b"cosignature/v1\ntime 0\n")
    assert split_timestamped(bytes.fromhex("00000000641850cb") + b"sig") == (1679315147, b"sig")
    # §4.2: the spec example cosignature decodes to key ID 8d66cf3f and time 1679315147.
    raw = b64d(
        "jWbPPwAAAABkGFDLEZMHwSRaJNiIDoe9DYn/zXcrtPHeolMI5OWXEhZCB9dlrDJsX3b2oyin1nPZqhf5nNo0xUe+mbIU"
        "BkBIfZ+qnA=="
    )
    assert (raw[:4].hex(), split_timestamped(raw[4:])[0]) == ("8d66cf3f", 1679315147)

    # §5.3 (C2SP tlog-witness add-checkpoint response example): two of the three dummy lines
    # decode to timestamps above 2^63-1, the third to 2970657736413210787.
    response = (
        "— witness.example/w1 CMp+6LWBU0anHGH5aNDTJkH/gj79sG+T6+iP2ThYN5krrDJbR1HDnucjL39QsZTSvVjy"
        "QLrdk3DXDqI5G2HgLatVs0pWh6Up69HVOw==\n"
        "— witness.example/w1 I7rEps0pvK2UqkS2gSpVUDhrhVtQV9lgF6pRrWAvjJHjyWpW7VcE3SiOlVlbQNt64vWh"
        "O+DlkL0+UfzuOBMh9ChdMkP1vi/lCAsmlw==\n"
        "— witness.example/w2 AWui8Sk55XjYLOijihBjhqEH6nS1ndDymE0a+6idX7pLcnoB+dhnz0854aLZgrrKbYKA"
        "7nC3HNJhm/kWl7oJlqU3rXXvpysAdyP3wQ==\n"
    ).encode()
    w1a, w1b, w2 = parse_cosignature_response(response)
    for line in (w1a, w1b):
        assert int.from_bytes(line.sig[:8], "big") > MAX_INT63
        with pytest.raises(MalformedError):
            timestamp_of(line)
        with pytest.raises(MalformedError):
            split_timestamped(line.sig)
    assert timestamp_of(w2) == 2970657736413210787
    # A verifier never accepts a timestamp above 2^63-1, even under a signature that is valid
    # for it (built by hand: tlog refuses to build that message).
    seed = seed_of("w1")
    witness = CosignatureV1Signer("witness.example/w1", seed, clock=fixed_clock(T0))
    for ts in (MAX_INT63, MAX_INT63 + 1, (1 << 64) - 1):
        msg = b"cosignature/v1\ntime %d\n" % ts + body
        sig = struct.pack(">Q", ts) + Ed25519PrivateKey.from_private_bytes(seed).sign(msg)
        assert witness.verifier().verify(body, sig) is (ts <= MAX_INT63)

    # §12.3: transparency-dev/formats@0b850f1a7b4a5b70deeacac6535e4b8023809d21
    # note/note_cosigv1_test.go (CoSigV1Timestamp).
    raw = b64d(
        "ZGhGuQAAAABm/qTPeyKXD+R2rzyQsxPiP8mXum7qq/iF0u4vanlqJyocWODBt97w9uL+8qT7S5gxEHWWOworDcFiEBYJ"
        "XORmnFBOBA=="
    )
    assert len(raw) == 76
    assert raw[:4].hex() == "646846b9"
    assert timestamp_of(Signature("w", int.from_bytes(raw[:4], "big"), raw[4:])) == 1727964367

    # Out of range on the signing side: a message past 2^63-1 cannot be built.
    with pytest.raises(UsageError):
        cosignature_v1_message(body, MAX_INT63 + 1)


def test_edge_10_add_checkpoint_timestamp_non_zero() -> None:
    # add-checkpoint responses must carry a non-zero time: a witness clock at 0 never cosigns.
    text = tiny_log().checkpoint(3).format()
    for signer in (
        CosignatureV1Signer("w.example/ed", seed_of("ed"), clock=fixed_clock(0.0)),
        SubtreeV1Signer("w.example/ml", seed_of("ml"), clock=fixed_clock(0.0)),
    ):
        with pytest.raises(UsageError):
            signer.sign(text)


def test_edge_10_subtree_timestamp_zero() -> None:
    # sign-subtree (start != 0) requires timestamp 0; a checkpoint ([0, size)) may carry one.
    seed = seed_of("subtree")
    ml = SubtreeV1Signer("w.example/ml", seed, clock=fixed_clock(T0))
    verifier = ml.verifier()
    log = tiny_log()
    sub = Subtree(log.origin, 8, 16, root(_leaves(8, 16)))
    with pytest.raises(UsageError):
        ml.sign_subtree(sub, timestamp=T0)
    with pytest.raises(UsageError):
        subtree_v1_message(ml.name, T0, sub.origin, sub.start, sub.end, sub.hash)
    zero = ml.sign_subtree(sub, timestamp=0)
    assert split_timestamped(zero)[0] == 0
    assert verifier.verify_subtree(sub, zero)
    # A signature whose struct does carry a non-zero time for start != 0 (built by hand, since
    # tlog refuses to build it) is refused by the verifier.
    name, origin = ml.name.encode(), sub.origin.encode()
    forged_msg = (
        b"subtree/v1\n\x00"
        + bytes([len(name)])
        + name
        + struct.pack(">Q", T0)
        + bytes([len(origin)])
        + origin
        + struct.pack(">QQ", sub.start, sub.end)
        + sub.hash
    )
    forged = struct.pack(">Q", T0) + mldsa.MLDSA44PrivateKey.from_seed_bytes(seed).sign(forged_msg)
    assert not verifier.verify_subtree(sub, forged)
    checkpoint_sig = ml.sign(log.checkpoint(16).format())
    assert split_timestamped(checkpoint_sig)[0] == T0
    assert verifier.verify(log.checkpoint(16).format(), checkpoint_sig)


def _leaves(start: int, end: int) -> list[bytes]:
    """The leaf hashes of [start, end) of a TinyLog (its entries are b"entry <i>")."""
    return [leaf_hash(b"entry %d" % i) for i in range(start, end)]


# --- 11..16: the witness decision rules --------------------------------------------------------


def test_edge_11_unknown_origin_lookup() -> None:
    # 404 is the server's: it looks the origin up before opening the note. tlog gives it the
    # origin, unverified, exactly as written on the note's first line.
    log = tiny_log()
    trusted = {log.origin: [log.verifier]}
    request = AddCheckpointRequest.parse(log.request(0, 5).format())
    assert origin_of(request.checkpoint) == log.origin
    signed = open_checkpoint(request.checkpoint, trusted[origin_of(request.checkpoint)])
    assert signed.checkpoint.origin == log.origin
    stranger = TinyLog(log.origin + "2", 5)
    request = AddCheckpointRequest.parse(stranger.request(0, 5).format())
    assert origin_of(request.checkpoint) == "example.com/edge-log2"
    assert origin_of(request.checkpoint) not in trusted
    # Exact bytes: no case folding or trimming in the lookup key.
    upper = Checkpoint(log.origin.upper(), 5, log.store.root(5)).format()
    assert origin_of(sign_note(upper, [log.signer])) not in trusted


def test_edge_11_bad_or_absent_trusted_signature() -> None:
    log = tiny_log()
    note = log.note(5)
    text, (sig,) = parse_note(note)
    bad = Signature(sig.name, sig.key_id, sig.sig[:-1] + bytes([sig.sig[-1] ^ 1]))
    with pytest.raises(InvalidSignatureError):
        decide(0, None, b"old 0\n\n" + format_note(text, [bad]), [log.verifier])
    other = Ed25519Signer("example.com/not-the-log", seed_of("other"))
    with pytest.raises(UnverifiedNoteError):
        decide(0, None, b"old 0\n\n" + sign_note(text, [other]), [log.verifier])


def test_edge_11_old_greater_than_size() -> None:
    log = tiny_log()
    request = log.request(0, 5)
    body = AddCheckpointRequest(6, (), request.checkpoint).format()
    with pytest.raises(MalformedError, match="larger than the checkpoint size"):
        decide(6, log.store.root(6), body, [log.verifier])
    with pytest.raises(MalformedError):
        check_request(AddCheckpointRequest.parse(body), log.checkpoint(5))


def test_edge_11_old_not_stored_size() -> None:
    log = tiny_log()
    with pytest.raises(ConflictError) as excinfo:
        decide(7, log.store.root(7), log.request(5, 10).format(), [log.verifier])
    assert excinfo.value.known_size == 7
    assert format_size_body(excinfo.value.known_size) == b"7\n"


def test_edge_11_size_zero_non_empty_root() -> None:
    log = tiny_log()
    bad_text = f"{log.origin}\n0\n{EMPTY_LEAF_B64}\n".encode()
    with pytest.raises(ProofError):
        decide(0, None, b"old 0\n\n" + sign_note(bad_text, [log.signer]), [log.verifier])
    with pytest.raises(ProofError):
        Checkpoint.parse(bad_text)
    good_text = f"{log.origin}\n0\n{EMPTY_ROOT_B64}\n".encode()
    cp = decide(0, None, b"old 0\n\n" + sign_note(good_text, [log.signer]), [log.verifier])
    assert (cp.size, cp.root) == (0, EMPTY_ROOT)


def test_edge_11_old_zero_with_proof() -> None:
    log = tiny_log()
    body = log.request(0, 5, [log.store.root(1)]).format()
    with pytest.raises(ProofError):
        decide(0, None, body, [log.verifier])
    # Stateless: refused before the stored state is consulted.
    with pytest.raises(ProofError):
        check_request(AddCheckpointRequest.parse(body), log.checkpoint(5))


def test_edge_11_same_size_different_root() -> None:
    log = tiny_log()
    other_root = hashlib.sha256(b"not the root").digest()
    with pytest.raises(ProofError):  # 422 on current main, not 409
        decide(5, other_root, log.request(5, 5).format(), [log.verifier])


def test_edge_11_bad_proof() -> None:
    log = tiny_log()
    proof = list(log.proof(5, 9))
    proof[1] = hashlib.sha256(proof[1]).digest()
    with pytest.raises(ProofError):
        decide(5, log.store.root(5), log.request(5, 9, proof).format(), [log.verifier])
    with pytest.raises(ProofError):  # the stored root is not the tree's
        decide(5, log.store.root(4), log.request(5, 9).format(), [log.verifier])
    assert decide(5, log.store.root(5), log.request(5, 9).format(), [log.verifier]).size == 9


def test_edge_12_conflict_body_and_content_type() -> None:
    assert SIZE_CONTENT_TYPE == "text/x.tlog.size"
    # §5.3 (C2SP tlog-witness "409 Conflict" example body).
    assert format_size_body(20852014) == b"20852014\n"
    assert format_size_body(0) == b"0\n"
    for content_type in (
        "text/x.tlog.size",
        "text/x.tlog.size; charset=utf-8",
        "text/x.tlog.size;charset=utf-8",
        "Text/X.TLOG.Size",  # media types are case-insensitive (RFC 9110 §8.3.1)
    ):
        assert parse_size_body(b"20852014\n", content_type) == 20852014
    for wrong_type in (
        None,
        "",
        "text/plain",
        "text/plain; charset=utf-8",
        "application/x.tlog.size",
        "text/x.tlog.sizes",
        "text/x.tlog",
    ):
        with pytest.raises(MalformedError):
            parse_size_body(b"5\n", wrong_type)
    for body in (b"5", b"05\n", b"+5\n", b" 5\n", b"5 \n", b"5\r\n", b"5\n\n", b"\n", b"-1\n"):
        with pytest.raises(MalformedError):
            parse_size_body(body, SIZE_CONTENT_TYPE)

    # `old 5` for an origin never cosigned: 409 with the stored size 0, no trust on first use.
    log = tiny_log()
    with pytest.raises(ConflictError) as excinfo:
        decide(0, None, log.request(5, 8).format(), [log.verifier])
    assert excinfo.value.known_size == 0
    assert format_size_body(excinfo.value.known_size) == b"0\n"
    assert parse_size_body(format_size_body(0), SIZE_CONTENT_TYPE) == 0


def test_edge_13_size_zero_library_vs_witness() -> None:
    log = tiny_log()
    # Library semantics: no consistency proof from size 0, whatever the proof.
    for proof in ([], [EMPTY_ROOT]):
        with pytest.raises(ProofError):
            verify_consistency(0, 5, EMPTY_ROOT, log.store.root(5), proof)
    # Witness semantics, for an origin never seen: old 0 → size 5 needs an empty proof.
    assert decide(0, None, log.request(0, 5).format(), [log.verifier]).size == 5
    with pytest.raises(ProofError):
        decide(0, None, log.request(0, 5, [log.store.root(1)]).format(), [log.verifier])
    # A size-0 checkpoint must carry 47DEQpj8…uFU= (§3.1).
    zero = f"{log.origin}\n0\n{EMPTY_ROOT_B64}\n".encode()
    assert decide(0, None, b"old 0\n\n" + sign_note(zero, [log.signer]), [log.verifier]).size == 0
    for root_b64 in (EMPTY_LEAF_B64, b64encode(bytes(32)), b64encode(log.store.root(5))):
        text = f"{log.origin}\n0\n{root_b64}\n".encode()
        with pytest.raises(ProofError):
            decide(0, None, b"old 0\n\n" + sign_note(text, [log.signer]), [log.verifier])


def test_edge_14_equal_sizes() -> None:
    log = tiny_log()
    stored_root = log.store.root(6)
    request = log.request(6, 6)
    assert request.proof == ()
    assert decide(6, stored_root, request.format(), [log.verifier]).root == stored_root
    # Re-submitting yields a fresh cosignature with a new timestamp each time.
    text = open_checkpoint(request.checkpoint, [log.verifier]).note.text
    w1 = CosignatureV1Signer("w.example/w", seed_of("w"), clock=fixed_clock(T0))
    w2 = CosignatureV1Signer("w.example/w", seed_of("w"), clock=fixed_clock(T0 + 60))
    first, second = w1.sign(text), w2.sign(text)
    assert first != second
    assert (split_timestamped(first)[0], split_timestamped(second)[0]) == (T0, T0 + 60)
    assert w1.verifier().verify(text, first)
    assert w1.verifier().verify(text, second)
    # Equal sizes with a non-empty proof → 422.
    with pytest.raises(ProofError):
        decide(6, stored_root, log.request(6, 6, [stored_root]).format(), [log.verifier])
    # transparency-dev/merkle sizes-match-but-proof-is-not-empty-and-sizes-are-one.json.
    vector = merkle_vector(
        "consistency/additional/sizes-match-but-proof-is-not-empty-and-sizes-are-one.json"
    )
    assert vector["wantErr"] is True
    with pytest.raises(ProofError):
        verify_consistency(
            as_int(vector["size1"]),
            as_int(vector["size2"]),
            b64d(as_str(vector["root1"])),
            b64d(as_str(vector["root2"])),
            hashes_of(vector["proof"]),
        )


def test_edge_15_compare_and_swap_sequential_model() -> None:
    # The sequential model of the compare-and-swap: both requests are decided against the same
    # stored N, then committed one after the other with "UPDATE … WHERE size = N" semantics.
    # The concurrent version (real races, a stalled request) belongs to the witness server tests.
    log = tiny_log()
    n = 10
    for first, second in ((n + 5, n + 9), (n + 9, n + 5)):
        state = {"size": n, "root": log.store.root(n)}

        def commit(expected: int, cp: Checkpoint, state: dict[str, object] = state) -> None:
            if state["size"] != expected:
                raise ConflictError(as_int(state["size"]))
            assert cp.size >= expected  # never a decrease
            state["size"], state["root"] = cp.size, cp.root

        def current(state: dict[str, object] = state) -> tuple[int, bytes]:
            r = state["root"]
            assert isinstance(r, bytes)
            return as_int(state["size"]), r

        a_body, b_body = log.request(n, first).format(), log.request(n, second).format()
        cp_a = decide(*current(), a_body, [log.verifier])
        cp_b = decide(*current(), b_body, [log.verifier])  # both pass against N
        commit(n, cp_a)
        assert current() == (first, log.store.root(first))
        # The loser re-decided against the new state gets 409 with the winner's size ...
        with pytest.raises(ConflictError) as excinfo:
            decide(*current(), b_body, [log.verifier])
        assert excinfo.value.known_size == first
        # ... and its stale decision cannot be committed either (the rollback race).
        with pytest.raises(ConflictError) as excinfo:
            commit(n, cp_b)
        assert excinfo.value.known_size == first
        assert current() == (first, log.store.root(first))


@settings(max_examples=150, deadline=None)
@given(
    stored=st.integers(0, 40), old=st.integers(0, 40), size=st.integers(0, 40), extra=st.booleans()
)
def test_edge_15_stored_size_never_decreases(stored: int, old: int, size: int, extra: bool) -> None:
    # Whatever a request says, an accepted update never goes below the stored size.
    log = tiny_log()
    proof = log.proof(old, size) if 0 < old <= size else ()
    if extra:
        proof += (EMPTY_ROOT,)
    request = AddCheckpointRequest(old, proof, log.note(size))
    try:
        check_update(
            stored, log.store.root(stored) if stored else None, request, log.checkpoint(size)
        )
    except (ConflictError, MalformedError, ProofError):
        return
    assert size >= stored
    assert old == stored


def test_edge_16_durability_pure_decision_and_text_bound_cosignature() -> None:
    # Durability after a kill is the witness server's (see the module docstring). tlog's part:
    # the decision is a pure function that never mutates its inputs ...
    log = tiny_log()
    cases = [
        (5, log.store.root(5), log.request(5, 9)),  # accepted
        (7, log.store.root(7), log.request(5, 9)),  # 409
        (5, log.store.root(4), log.request(5, 9)),  # 422
    ]
    for stored_size, stored_root, request in cases:
        checkpoint = open_checkpoint(request.checkpoint, [log.verifier]).checkpoint
        before = copy.deepcopy((stored_size, stored_root, request, checkpoint))
        outcomes = []
        for _ in range(2):
            try:
                check_update(stored_size, stored_root, request, checkpoint)
                outcomes.append("ok")
            except ConflictError as e:
                outcomes.append(f"409 {e.known_size}")
            except ProofError:
                outcomes.append("422")
        assert outcomes[0] == outcomes[1]
        assert (stored_size, stored_root, request, checkpoint) == before
    # ... and a cosignature is a function of the request's note text alone: re-parsing and
    # re-formatting the checkpoint gives the same bytes, hence the same cosignature.
    witness = CosignatureV1Signer("w.example/w", seed_of("w"), clock=fixed_clock(T0))
    for extensions in ((), ("ext one", "ext two")):
        note = log.note(12, extensions)
        signed = open_checkpoint(note, [log.verifier])
        assert signed.checkpoint.format() == signed.note.text
        line = witness.sign_at(signed.note.text, T0)
        assert witness.sign_at(signed.checkpoint.format(), T0) == line
        cosigned = add_signatures(note, [Signature(witness.name, witness.key_id, line)])
        opened = open_note(cosigned, [log.verifier, witness.verifier()])
        assert len(opened.sigs) == 2


# --- 17..21: strict integers and hashes, proofs -----------------------------------------------


# §13 and §14.17: every spelling Python's int() accepts but the specs do not.
BAD_DECIMALS = [
    "05",
    "007",
    "+5",
    "1_0",
    " 5",
    "5 ",
    "\u0665",  # ARABIC-INDIC DIGIT FIVE
    "\u0661\u0662\u0663",  # ١٢٣
    "\uff15",  # FULLWIDTH DIGIT FIVE
    "5\n",
    "00",
    "-0",
]
BAD_NON_INT = ["-5", "0x5", "5.0", "1e3", "", "five"]


def test_edge_17_strict_integers() -> None:
    for spelling in BAD_DECIMALS:
        int(spelling)  # the trap: Python accepts every one of these
    log = tiny_log()
    note = log.note(5)
    assert AddCheckpointRequest.parse(b"old 5\n\n" + note).old == 5
    for spelling in [*BAD_DECIMALS, *BAD_NON_INT]:
        body = b"old " + spelling.encode() + b"\n\n" + note
        if "\n" in spelling:
            # "old 5\n\n\n<note>": the first empty line ends the head, so the request parses
            # and its checkpoint starts with an empty origin line, refused when it is opened.
            assert_request_refused(body, [log.verifier])
            continue
        with pytest.raises(MalformedError):
            AddCheckpointRequest.parse(body)
    for head in (
        b"old  5",
        b"old\t5",
        b"Old 5",
        b"old5",
        b"old 5\r",
        b" old 5",
        b"old 9223372036854775808",
    ):
        with pytest.raises(MalformedError):
            AddCheckpointRequest.parse(head + b"\n\n" + note)
    # Checkpoint sizes (§3.1: no leading zeros; here also at most 2^63-1).
    root_b64 = b64encode(log.store.root(5))
    assert Checkpoint.parse(f"o\n5\n{root_b64}\n".encode()).size == 5
    for spelling in [*BAD_DECIMALS, *BAD_NON_INT, str(MAX_INT63 + 1)]:
        if "\n" in spelling:
            continue  # a newline makes it another line: covered by the line tests
        with pytest.raises(MalformedError):
            Checkpoint.parse(f"o\n{spelling}\n{root_b64}\n".encode())
    assert Checkpoint.parse(f"o\n{MAX_INT63}\n{root_b64}\n".encode()).size == MAX_INT63


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\n"), max_size=6))
def test_edge_17_strict_integers_only_canonical_spellings(spelling: str) -> None:
    canonical = spelling.isascii() and spelling.isdigit() and str(int(spelling)) == spelling
    note = tiny_log().note(5)
    try:
        old = AddCheckpointRequest.parse(b"old " + spelling.encode() + b"\n\n" + note).old
    except MalformedError:
        assert not canonical
    else:
        assert canonical
        assert str(old) == spelling


def test_edge_18_strict_hashes() -> None:
    log = tiny_log()
    note = log.note(9)
    good = b64encode(log.proof(5, 9)[0])
    assert AddCheckpointRequest.parse(b"old 5\n" + good.encode() + b"\n\n" + note).proof
    bad_hashes = [
        "AA==",  # §14.18
        b64encode(bytes(33)),  # 33 bytes: 44 characters, no padding
        b64encode(bytes(31)),  # 31 bytes: 44 characters
        good[:20] + " " + good[20:],  # embedded space
        " " + good,
        good + " ",
        good[:-1],  # padding missing
        good.replace("=", ""),
        b64encode(bytes(64)),  # a 64-byte hash
        base64.urlsafe_b64encode(bytes.fromhex("fb" * 32)).decode(),  # URL-safe alphabet
        EMPTY_ROOT_B64[:-2] + "V=",  # non-canonical trailing bits
        "",
    ]
    for bad in bad_hashes:
        body = b"old 5\n" + bad.encode() + b"\n\n" + note
        if not bad:
            # An empty proof line is the separator: the checkpoint then starts with "\n".
            assert_request_refused(body, [log.verifier])
        else:
            with pytest.raises(MalformedError):
                AddCheckpointRequest.parse(body)
        with pytest.raises(MalformedError):
            Checkpoint.parse(f"o\n9\n{bad}\n".encode())
    # CRLF line endings: the whole body, a proof line, a root line.
    crlf = (b"old 5\n" + good.encode() + b"\n\n").replace(b"\n", b"\r\n") + note
    for body in (crlf, b"old 5\n" + good.encode() + b"\r\n\n" + note, b"old 5\r\n\n" + note):
        with pytest.raises(MalformedError):
            AddCheckpointRequest.parse(body)
    with pytest.raises(MalformedError):
        Checkpoint.parse(f"o\r\n9\r\n{good}\r\n".encode())

    # transparency-dev/merkle inclusion/single-entry: only 32-byte hashes are hashes.
    for name in ("empty-root-and-leaf", "empty-root", "empty-leaf"):
        vector = merkle_vector(f"inclusion/single-entry/{name}.json")
        assert vector["wantErr"] is True
        with pytest.raises(ProofError):
            verify_inclusion(
                as_int(vector["leafIdx"]),
                as_int(vector["treeSize"]),
                b64d(as_str(vector["leafHash"])),
                hashes_of(vector["proof"]),
                b64d(as_str(vector["root"])),
            )
    vector = merkle_vector("inclusion/single-entry/matching-root-and-leaf.json")
    assert vector["wantErr"] is False
    verify_inclusion(0, 1, b64d(as_str(vector["leafHash"])), [], b64d(as_str(vector["root"])))
    # A proof hash of the wrong length is refused too, and so are 12-byte "roots": this is the
    # one deliberate disagreement with the vectors (consistency/additional/
    # sizes-are-equal-one-and-proof-is-empty.json expects success; see the interop README).
    leaf = leaf_hash(b"x")
    with pytest.raises(ProofError):
        verify_inclusion(0, 2, leaf, [b"\x00" * 31], node_hash(leaf, bytes(31)))
    with pytest.raises(ProofError):
        verify_consistency(1, 1, b"don't care 2", b"don't care 2", [])


@functools.cache
def _uniform_leaf() -> bytes:
    return leaf_hash(b"same")


@functools.cache
def _uniform_mth(n: int) -> bytes:
    """MTH of n identical leaves: depends on n only, so trees of 2^63-1 leaves are cheap."""
    if n == 1:
        return _uniform_leaf()
    k = 1 << ((n - 1).bit_length() - 1)
    return node_hash(_uniform_mth(k), _uniform_mth(n - k))


def _uniform_subproof(m: int, n: int, complete: bool) -> list[bytes]:
    """RFC 6962 §2.1.2 SUBPROOF(m, D[n], b) over identical leaves."""
    if m == n:
        return [] if complete else [_uniform_mth(n)]
    k = 1 << ((n - 1).bit_length() - 1)
    if m <= k:
        return [*_uniform_subproof(m, k, complete), _uniform_mth(n - k)]
    return [*_uniform_subproof(m - k, n - k, False), _uniform_mth(k)]


def test_edge_19_proof_line_limit() -> None:
    # A valid 64-hash consistency proof (§15.11): 3 → 2^63-1 in a tree of identical leaves.
    old, size = 3, MAX_INT63
    proof = _uniform_subproof(old, size, True)
    assert len(proof) == consistency_proof_size(old, size) == 64
    old_root, new_root = _uniform_mth(old), _uniform_mth(size)
    verify_consistency(old, size, old_root, new_root, proof)  # it does verify
    signer = Ed25519Signer("example.com/huge", seed_of("huge"))
    note = sign_note(Checkpoint("example.com/huge", size, new_root).format(), [signer])
    head = b"old 3\n" + b"".join(b64encode(h).encode() + b"\n" for h in proof)
    with pytest.raises(MalformedError, match="64 proof lines"):
        AddCheckpointRequest.parse(head + b"\n" + note)
    with pytest.raises(MalformedError):
        AddCheckpointRequest(old, tuple(proof), note).format()
    # 63 lines is the limit, not an error (the proof is then one short and fails to verify).
    assert MAX_PROOF_LINES == 63
    request = AddCheckpointRequest.parse(
        b"old 3\n" + b"".join(b64encode(h).encode() + b"\n" for h in proof[:63]) + b"\n" + note
    )
    assert len(request.proof) == 63
    with pytest.raises(ProofError):
        check_update(old, old_root, request, open_checkpoint(note, [signer.verifier()]).checkpoint)


def _check_consistency_vector(relpath: str) -> tuple[int, int]:
    vector = merkle_vector(relpath)
    assert vector["wantErr"] is False
    size1, size2 = as_int(vector["size1"]), as_int(vector["size2"])
    verify_consistency(
        size1,
        size2,
        b64d(as_str(vector["root1"])),
        b64d(as_str(vector["root2"])),
        hashes_of(vector["proof"]),
    )
    return size1, size2


def test_edge_20_power_of_two_prepend() -> None:
    # transparency-dev/merkle testdata/consistency/{1,3,2}/happy-path.json (§12.4, §14.20).
    assert _check_consistency_vector("consistency/1/happy-path.json") == (1, 8)
    assert _check_consistency_vector("consistency/3/happy-path.json") == (2, 5)
    assert _check_consistency_vector("consistency/2/happy-path.json") == (6, 8)
    # Every power-of-two old size (where the old root is prepended) in small trees.
    store = MemoryHashStore()
    store.extend(leaf_hash(bytes([i])) for i in range(33))
    for size in range(1, 34):
        for old in (1, 2, 4, 8, 16, 32):
            if old <= size:
                proof = consistency_proof(old, size, store)
                verify_consistency(old, size, store.root(old), store.root(size), proof)
                with pytest.raises(ProofError):
                    verify_consistency(
                        old, size, store.root(old), store.root(size), [*proof, EMPTY_ROOT]
                    )


def test_edge_21_inner_shift_loop() -> None:
    # transparency-dev/merkle testdata/inclusion/{0..4}/happy-path.json (§12.4); inclusion/3
    # (leaf 2 of 3) takes the shift loop: fn = sn = 2 is even after a left-side hash.
    for d in range(5):
        vector = merkle_vector(f"inclusion/{d}/happy-path.json")
        assert vector["wantErr"] is False
        verify_inclusion(
            as_int(vector["leafIdx"]),
            as_int(vector["treeSize"]),
            b64d(as_str(vector["leafHash"])),
            hashes_of(vector["proof"]),
            b64d(as_str(vector["root"])),
        )
    assert _check_consistency_vector("consistency/4/happy-path.json") == (6, 7)
    assert _check_consistency_vector("consistency/0/happy-path.json") == (1, 1)
    # Exhaustively in small trees (every shape of the loops, e.g. consistency 5 → 6 shifts
    # after a left-side hash): every proof verifies, and fails at every other index.
    store = MemoryHashStore()
    store.extend(leaf_hash(bytes([i])) for i in range(24))
    for size in range(1, 25):
        r = store.root(size)
        for index in range(size):
            proof = inclusion_proof(index, size, store)
            verify_inclusion(index, size, leaf_hash(bytes([index])), proof, r)
            for other in range(size):
                if other != index and len(inclusion_proof(other, size, store)) == len(proof):
                    with pytest.raises(ProofError):
                        verify_inclusion(other, size, leaf_hash(bytes([index])), proof, r)
        for old in range(1, size + 1):
            proof = consistency_proof(old, size, store)
            verify_consistency(old, size, store.root(old), r, proof)


# --- 22..27: tiles ---------------------------------------------------------------------------


def test_edge_22_tile_index_encoding() -> None:
    # §6.2 (C2SP tlog-tiles "<N>" examples).
    for index, text in ((0, "000"), (999, "999"), (1000, "x001/000"), (1234067, "x001/x234/067")):
        assert format_tile_index(index) == text
        assert parse_tile_index(text) == index
    for bad in ("x000/001", "0001", "1", "x001", "01", "x001/", "/001", "x1/000", "001/000"):
        with pytest.raises(MalformedError):
            parse_tile_index(bad)
    assert parse_tile_path("tile/0/x001/x234/067.p/7") == Tile(0, 1234067, 7)
    for bad in (
        "tile/0/000.p/0",
        "tile/0/000.p/256",
        "tile/0/000.p/007",
        "tile/0/x000/001",
        "tile/0/0001",
        "tile/0/1",
        "tile/0/x001",
        "tile/64/000",
        "tile/00/000",
        "tile/entries/000.p/0",
    ):
        with pytest.raises(MalformedError):
            parse_tile_path(bad)
    assert parse_tile_path("tile/63/000") == Tile(63, 0)
    with pytest.raises(UsageError):
        Tile(64, 0)
    # static-ct-api: levels 0..5 only.
    assert parse_tile_path("tile/5/000", max_level=STATIC_CT_MAX_LEVEL) == Tile(5, 0)
    with pytest.raises(MalformedError):
        parse_tile_path("tile/6/000", max_level=STATIC_CT_MAX_LEVEL)


def test_edge_23_partial_tile_widths() -> None:
    # §6.3 (C2SP tlog-tiles examples, re-computed).
    paths = [t.path() for t in tiles_for_size(70000)]
    assert paths.count("tile/0/273.p/112") == 1
    assert [p for p in paths if not p.startswith("tile/0/")] == [
        "tile/1/000",
        "tile/1/001.p/17",
        "tile/2/000.p/1",
    ]
    assert sum(1 for t in tiles_for_size(70000) if t.level == 0 and t.is_full) == 273
    assert [t.path() for t in tiles_for_size(256)] == ["tile/0/000", "tile/1/000.p/1"]
    assert tiles_for_size(0) == []
    # Never a width-0 tile, at any size.
    for size in (1, 255, 256, 257, 65535, 65536, 65537, 70000, 16777216):
        assert all(1 <= t.width <= TILE_WIDTH for t in tiles_for_size(size))
    with pytest.raises(UsageError):
        Tile(0, 0, 0)
    # Never hash a partial tile into a higher level: the level-1 tiles of size 70000 hold the
    # roots of the 273 full level-0 tiles only, not of 273.p/112.
    leaves = [leaf_hash(i.to_bytes(4, "big")) for i in range(70000)]
    tiles = tiles_from_leaf_hashes(leaves)
    assert set(tiles) == set(tiles_for_size(70000))
    full_roots = [root(leaves[i * 256 : (i + 1) * 256]) for i in range(273)]
    assert tiles[Tile(1, 0)] == b"".join(full_roots[:256])
    assert tiles[Tile(1, 1, 17)] == b"".join(full_roots[256:])
    assert root(leaves[273 * 256 :]) not in tiles[Tile(1, 1, 17)]
    assert tiles[Tile(2, 0, 1)] == root(leaves[:65536])
    assert tile_root(70000, tiles.__getitem__) == root(leaves)


def test_edge_24_path_schemes() -> None:
    assert Tile(0, 5).path() == "tile/0/005"
    assert Bundle(5).path() == "tile/entries/005"
    assert Bundle(5, 3).path() == "tile/entries/005.p/3"
    assert parse_tile_path("tile/entries/x001/000.p/5") == Bundle(1000, 5)
    # Go sumdb's tile/8/<L>/<N> and tile/8/data/<N>, static-ct's tile/data/<N>: not C2SP paths.
    for foreign in ("tile/8/0/000", "tile/8/1/x001/000", "tile/8/data/000", "tile/data/000"):
        with pytest.raises(MalformedError):
            parse_tile_path(foreign)
    # The one spelling that is valid in both means something else in each: C2SP level 8.
    assert parse_tile_path("tile/8/000") == Tile(8, 0)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 300_000), min_size=1, max_size=8))
def test_edge_25_publish_order_tiles_cover_each_checkpoint(growth: list[int]) -> None:
    sizes = sorted(growth)
    written: set[Tile] = set()
    bundles: set[Bundle] = set()
    previous = 0
    published: list[int] = []
    for size in sizes:
        new = new_tiles(previous, size)
        had = set(tiles_for_size(previous))
        assert new == [t for t in tiles_for_size(size) if t not in had]
        written.update(new)
        bundles.update(new_bundles(previous, size))
        published.append(size)
        # Every tile and bundle each published checkpoint implies is there.
        for s in published:
            assert set(tiles_for_size(s)) <= written
            assert set(bundles_for_size(s)) <= bundles
        previous = size


def test_edge_25_publish_order_tile_contents() -> None:
    # Write only new_tiles(old, new) at each growth; every published size's root is then
    # computable from what was written, and tile_root reads only tiles the size implies.
    leaves = [leaf_hash(b"e%d" % i) for i in range(66000)]
    store: dict[Tile, bytes] = {}
    published: list[int] = []
    previous = 0
    for size in (1, 255, 256, 257, 300, 511, 512, 65535, 65536, 65537, 66000):
        built = tiles_from_leaf_hashes(leaves[:size])
        for tile in new_tiles(previous, size):
            store[tile] = built[tile]
        published.append(size)
        for s in published:
            implied = set(tiles_for_size(s))

            def read(tile: Tile, implied: set[Tile] = implied) -> bytes:
                assert tile in implied
                return store[tile]

            assert tile_root(s, read) == root(leaves[:s])
        previous = size


def test_edge_26_entry_bundles() -> None:
    with pytest.raises(UsageError):
        format_bundle([b"x" * 65536])
    big = b"y" * 65535
    assert parse_bundle(format_bundle([big]), 1) == [big]
    assert format_bundle([big])[:2] == b"\xff\xff"
    entries = [b"entry %d " % i * (i % 5) for i in range(300)]
    assert bundles_for_size(300) == [Bundle(0), Bundle(1, 44)]
    tiles = tiles_from_leaf_hashes(leaf_hash(e) for e in entries)
    for bundle in bundles_for_size(300):
        first = bundle.index * TILE_WIDTH
        data = format_bundle(entries[first : first + bundle.width])
        got = parse_bundle(data, bundle.width)
        assert len(got) == bundle.width
        # Each entry's SHA-256(0x00 || entry) is the level-0 tile hash at its position.
        assert b"".join(leaf_hash(e) for e in got) == tiles[bundle.tile]
        if not bundle.is_full:
            with pytest.raises(MalformedError):
                parse_bundle(data, bundle.width + 1)
            with pytest.raises(MalformedError):
                parse_bundle(data, bundle.width - 1)
            with pytest.raises(MalformedError):
                parse_bundle(data, TILE_WIDTH)


def test_edge_27_empty_tree_vs_empty_leaf() -> None:
    assert b64encode(EMPTY_ROOT) == EMPTY_ROOT_B64
    assert b64encode(leaf_hash(b"")) == EMPTY_LEAF_B64
    assert leaf_hash(b"") != EMPTY_ROOT
    assert root([]) == EMPTY_ROOT == tile_root(0, lambda t: b"")
    assert root_of_entries([]) == EMPTY_ROOT
    assert root_of_entries([b""]) == leaf_hash(b"")
    assert Checkpoint.parse(f"o\n0\n{EMPTY_ROOT_B64}\n".encode()).root == EMPTY_ROOT
    with pytest.raises(ProofError):
        Checkpoint.parse(f"o\n0\n{EMPTY_LEAF_B64}\n".encode())
    assert Checkpoint.parse(f"o\n1\n{EMPTY_LEAF_B64}\n".encode()).size == 1


# --- 28..34: checkpoints, limits, paths, lookup, control characters, duplicates ----------------


def test_edge_28_checkpoint_strictness() -> None:
    root_b64 = b64encode(tiny_log().store.root(5))
    assert Checkpoint.parse(f"Log\n5\n{root_b64}\next\n".encode()).extensions == ("ext",)
    bad_texts = [
        f"\n5\n{root_b64}\n",  # empty origin
        "Log\n123\nYmFuYW5hcw==\n",  # 7-byte root, accepted by formats (§12.3)
        f"Log\n5\n{root_b64}\n\n",  # empty extension line
        f"Log\n5\n{root_b64}\n\n\n\n",  # formats' "\n\n\n"
        f"Log\n5\n{root_b64}\next\n\n",
        f"Log\n5\n{root_b64}",  # missing final LF
        "Log\n123\nYmFuYW5hcw==",
        f"Log\n05\n{root_b64}\n",  # leading zero
        f"Log\n-34\n{root_b64}\n",
        f"Log\n{MAX_INT63 + 1}\n{root_b64}\n",  # out of range
        f"Log\n3438945738945739845734895735\n{root_b64}\n",
        "Log\n123\nThisIsn'tBase64\n",
        "Head\n9944\n",
        "",
    ]
    for text in bad_texts:
        with pytest.raises(MalformedError):
            Checkpoint.parse(text.encode())
    with pytest.raises(MalformedError):
        Checkpoint("", 5, b"\x00" * 32)
    with pytest.raises(MalformedError):
        Checkpoint("Log", 5, b"bananas")
    with pytest.raises(MalformedError):
        Checkpoint("Log", 5, b"\x00" * 32, ("",))
    # Inside a signed note an empty extension line is in the signed text, and is refused there.
    log = tiny_log()
    note = sign_note(f"{log.origin}\n5\n{root_b64}\n\n".encode(), [log.signer])
    assert open_note(note, [log.verifier]).text.endswith(b"\n\n")
    with pytest.raises(MalformedError):
        open_checkpoint(note, [log.verifier])


@functools.cache
def _mldsa_cosigners() -> tuple[SubtreeV1Signer, ...]:
    return tuple(
        SubtreeV1Signer(f"witness{i}.example/pq", seed_of(f"pq{i}"), clock=fixed_clock(T0))
        for i in range(16)
    )


def test_edge_29_signature_count_and_size_limits() -> None:
    log = tiny_log()
    text = log.checkpoint(20).format()
    cosigners = _mldsa_cosigners()
    assert len({c.public_key for c in cosigners}) == 16
    lines = [Signature(c.name, c.key_id, c.sign(text)) for c in cosigners]
    note = format_note(text, lines)
    assert 50_000 <= len(note) <= 56_000  # "about 53 KB" (§14.29)
    assert len(note) > 16 << 10  # transparency-dev/witness's 16 KiB body limit does not fit it
    opened = open_note(note, [c.verifier() for c in cosigners])
    assert len(opened.sigs) == 16
    # With a log signature too, as a witness receives it, inside an add-checkpoint request.
    full = add_signatures(
        note, [Signature(log.signer.name, log.signer.key_id, log.signer.sign(text))]
    )
    body = AddCheckpointRequest(0, (), full).format()
    assert len(body) <= MAX_REQUEST_SIZE
    request = AddCheckpointRequest.parse(body)
    signed = open_checkpoint(request.checkpoint, [log.verifier])
    assert (len(signed.note.sigs), len(signed.note.unverified)) == (1, 16)

    # Absurd counts: 100 lines open, 101 are refused (Go's cap), duplicates included.
    assert MAX_SIGNATURES == 100
    log_line = Signature(log.signer.name, log.signer.key_id, log.signer.sign(text))
    junk = [Signature(f"junk{i}.example", i, bytes(64)) for i in range(100)]
    assert (
        len(open_note(format_note(text, [log_line, *junk[:99]]), [log.verifier]).unverified) == 99
    )
    with pytest.raises(MalformedError):
        open_note(format_note(text, [log_line, *junk]), [log.verifier])
    with pytest.raises(MalformedError):
        parse_note(text + b"\n" + log_line.line() * 101)
    assert len(parse_note(text + b"\n" + log_line.line() * 100)[1]) == 1


def test_edge_30_monitoring_path() -> None:
    # §5.7 and §12.8: lowercase hex SHA-256 of the origin bytes.
    sofa = "5fd2dc0beb4ce54da5050cf6d5c75248b023abad441c3cecde3976fbe9da4fe4"
    gosum = "46613be2987d5d316f5ad065e4aa2eee26ccdd3de17a3735cd0da18156a22bdd"
    assert origin_hash("example.com/behind-the-sofa") == sofa
    assert origin_hash("go.sum database tree") == gosum
    path = monitoring_path("https://witness.example/mon", "example.com/behind-the-sofa")
    assert path == f"https://witness.example/mon/{sofa}/checkpoint"
    assert monitoring_path("https://witness.example/mon/", "go.sum database tree") == (
        f"https://witness.example/mon/{gosum}/checkpoint"
    )
    # Uppercase hex and percent-encoded origins (pre-2026-07-01 draft) are other paths.
    for other in (
        f"https://witness.example/mon/{sofa.upper()}/checkpoint",
        "https://witness.example/mon/example.com%2Fbehind-the-sofa/checkpoint",
        "https://witness.example/mon/example.com/behind-the-sofa/checkpoint",
    ):
        assert other != path
    assert origin_hash("Example.com/behind-the-sofa") != sofa  # exact bytes


def test_edge_31_key_lookup_by_origin() -> None:
    # The witness selects keys by the checkpoint's first line, not by the key name.
    trusted = {"go.sum database tree": [parse_vkey(SUMDB_VKEY)]}
    origin = origin_of(SUMDB_NOTE)
    assert origin == "go.sum database tree"
    keys = trusted[origin]
    assert keys[0].name == "sum.golang.org" != origin
    signed = open_checkpoint(SUMDB_NOTE, keys)
    assert (signed.checkpoint.origin, signed.checkpoint.size) == (origin, 35225469)
    assert b64encode(signed.checkpoint.root) == "vt5T6GaLCXvyHFl9VUvvItR43XZxfLgftEcTyO3eJCQ="
    # The whole request of torchwood's litewitness sumdb.txt is accepted from a fresh state.
    assert decide(0, None, b"old 0\n\n" + SUMDB_NOTE, keys).size == 35225469
    # Changing one byte of the body (size + 1) is a bad signature from the trusted key.
    with pytest.raises(InvalidSignatureError):
        open_checkpoint(SUMDB_NOTE.replace(b"35225469", b"35225470"), keys)


@settings(max_examples=150, deadline=None)
@given(position=st.integers(0, len(PETER_NOTE)), char=st.sampled_from([b"\r", b"\t"]))
def test_edge_32_control_characters(position: int, char: bytes) -> None:
    # Keep UTF-8 intact: never insert inside the em dash.
    while position < len(PETER_NOTE) and PETER_NOTE[position] & 0xC0 == 0x80:
        position += 1
    note = PETER_NOTE[:position] + char + PETER_NOTE[position:]
    with pytest.raises(MalformedError):
        open_note(note, [parse_vkey(PETER_VKEY)])


def test_edge_32_no_crlf_normalisation() -> None:
    crlf = PETER_NOTE.replace(b"\n", b"\r\n")
    with pytest.raises(MalformedError):
        open_note(crlf, [parse_vkey(PETER_VKEY)])
    with pytest.raises(MalformedError):
        parse_note(PETER_TEXT + b"\n" + PETER_LINE.replace(b"\n", b"\r\n"))
    root_b64 = b64encode(tiny_log().store.root(5))
    for text in (f"o\r\n5\n{root_b64}\n", f"o\t\n5\n{root_b64}\n", f"o\n5\n{root_b64}\next\t\n"):
        with pytest.raises(MalformedError):
            Checkpoint.parse(text.encode())
    with pytest.raises(MalformedError):
        sign_note(b"line\r\n", [tiny_log().signer])


def test_edge_33_duplicate_signature_lines() -> None:
    peter = parse_vkey(PETER_VKEY)
    # Byte-identical repeated lines collapse: one verified signature.
    note = open_note(PETER_TEXT + b"\n" + PETER_LINE * 3 + ENOCH_LINE * 2, [peter])
    assert len(note.sigs) == 1
    assert len(note.unverified) == 1
    # Two different lines for one trusted key reject the note, even when both verify: a
    # witness cosigning twice (two timestamps) must not count twice (cf. C2SP PR #327). Go
    # would instead verify only the first line of that key and skip the second.
    log = tiny_log()
    text = log.checkpoint(11).format()
    w_old = CosignatureV1Signer("w.example/w", seed_of("w"), clock=fixed_clock(T0))
    w_new = CosignatureV1Signer("w.example/w", seed_of("w"), clock=fixed_clock(T0 + 1))
    log_line = Signature(log.signer.name, log.signer.key_id, log.signer.sign(text))
    first = Signature(w_old.name, w_old.key_id, w_old.sign(text))
    second = Signature(w_new.name, w_new.key_id, w_new.sign(text))
    assert first != second
    verifiers: list[Verifier] = [log.verifier, w_old.verifier()]
    for lines in ([log_line, first, second], [log_line, second, first]):
        with pytest.raises(InvalidSignatureError) as excinfo:
            open_note(format_note(text, lines), verifiers)
        assert (excinfo.value.name, excinfo.value.key_id) == (w_old.name, w_old.key_id)
    # A good line followed by a corrupted one for the same key is rejected too.
    corrupt = Signature(first.name, first.key_id, first.sig[:-1] + bytes([first.sig[-1] ^ 1]))
    with pytest.raises(InvalidSignatureError):
        open_note(format_note(text, [log_line, first, corrupt]), verifiers)
    # For a key we do not trust, both different lines are kept, unverified.
    opened = open_note(format_note(text, [log_line, first, second]), [log.verifier])
    assert opened.unverified == (first, second)
    # Whatever the lines, opening yields at most one verified signature per key.
    for lines in (
        [log_line, first, first],
        [first, log_line, first, log_line],
        [log_line, log_line, first],
    ):
        opened = open_note(format_note(text, lines), verifiers)
        keys = [(s.name, s.key_id) for s in opened.sigs]
        assert len(keys) == len(set(keys)) == 2


def test_edge_34_policy_duplicates() -> None:
    s = seed_of("policy-key")
    log_vkey = format_vkey(Ed25519Signer("example.com/log", s).verifier())
    witness_01 = format_vkey(Ed25519Signer("w1.example", s).verifier())  # 0x01 of the key
    witness_04 = format_vkey(CosignatureV1Signer("w2.example", s).verifier())  # 0x04 of it
    witness_04b = format_vkey(CosignatureV1Signer("w3.example", s).verifier())  # other name
    other = format_vkey(CosignatureV1Signer("w4.example", seed_of("other")).verifier())
    other_log = format_vkey(Ed25519Signer("example.com/log2", seed_of("log2")).verifier())
    assert len({v.split("+")[1] for v in (witness_01, witness_04, witness_04b)}) == 3

    def policy(*lines: str) -> bytes:
        return "".join(line + "\n" for line in lines).encode()

    # One key once as a log and once as a witness: allowed (§9.1, "test both cases").
    p = Policy.parse(policy(f"log {log_vkey}", f"witness W1 {witness_04}", "quorum W1"))
    assert (len(p.logs), len(p.witnesses)) == (1, 1)
    # Two witness lines wrapping one public key under other names and key IDs.
    with pytest.raises(MalformedError, match="duplicate witness"):
        Policy.parse(
            policy(
                f"log {log_vkey}",
                f"witness W1 {witness_04}",
                f"witness W2 {witness_04b}",
                "quorum W1",
            )
        )
    with pytest.raises(MalformedError, match="duplicate witness"):
        Policy.parse(policy(f"witness W1 {other}", f"witness W2 {other}", "quorum W1"))
    # A 0x01 and a 0x04 vkey of one Ed25519 key: refused in a file (0x01 is no witness type
    # there, so either rule refuses it) and as duplicates when given as key flags.
    with pytest.raises(MalformedError):
        Policy.parse(policy(f"witness W1 {witness_01}", f"witness W2 {witness_04}", "quorum W1"))
    with pytest.raises(MalformedError, match="duplicate witness"):
        Policy.k_of_n(1, [witness_01, witness_04])
    assert len(Policy.k_of_n(1, [witness_01, other]).witnesses) == 2
    # Two log lines wrapping one key, under other names and hence key IDs.
    renamed = format_vkey(Ed25519Signer("example.com/log-renamed", s).verifier())
    assert renamed.split("+")[1] != log_vkey.split("+")[1]
    with pytest.raises(MalformedError, match="duplicate log"):
        Policy.parse(policy(f"log {log_vkey}", f"log {renamed}", "quorum none"))
    # Two different log keys are fine.
    assert len(Policy.parse(policy(f"log {log_vkey}", f"log {other_log}", "quorum none")).logs) == 2
