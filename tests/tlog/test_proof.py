"""Tests for tlog.proof: C2SP tlog-proof@v1 (https://c2sp.org/tlog-proof) files, their strict
parsing and their verification.

Sources of vectors:

* transparency-dev/formats ``proof/tlog_proof_test.go``
  (testdata/transparency-dev-formats/README.md; read at commit
  1a07eea5c85e02a7b2b69b7c1638f6c139184645): the ``TestMarshal`` outputs, the ``TestRoundTrip``
  values and the ``TestUnmarshalErrors`` negatives. Those tests use dummy checkpoints
  ("checkpoint\\n"), which this parser refuses on purpose (the checkpoint part must be a signed
  checkpoint note), so each vector is checked twice: verbatim (must be refused) and with a real
  signed checkpoint in place of the dummy (the exact bytes, or the named defect).
* C2SP/C2SP ``tlog-proof.md`` (the spec's example, whose signatures are elided with ``[...]``).
* testdata/tessera: a real log written by transparency-dev/tessera (see its README), whose
  Go-signed checkpoints must carry proofs built here.

Merkle paths and roots are recomputed here with hashlib (RFC 6962 §2.1 ``PATH``), so that the
tests do not only check tlog.merkle against itself.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.vectors import TESTDATA
from tlog.checkpoint import Checkpoint, SignedCheckpoint
from tlog.cosignature import CosignatureV1Signer
from tlog.encoding import MAX_INT63
from tlog.errors import (
    InvalidSignatureError,
    MalformedError,
    PolicyError,
    ProofError,
    UnverifiedNoteError,
    UsageError,
    VerificationError,
)
from tlog.keys import parse_vkey
from tlog.merkle import MemoryHashStore
from tlog.note import (
    MAX_NOTE_SIZE,
    Ed25519Signer,
    Ed25519Verifier,
    Signature,
    Verifier,
    format_note,
    sign_note,
)
from tlog.proof import (
    FILE_EXTENSION,
    HEADER,
    MAX_EXTRA_SIZE,
    MAX_PROOF_HASHES,
    MAX_PROOF_SIZE,
    TlogProof,
    VerifiedProof,
    build_proof,
    verify_proof,
)

TESSERA = TESTDATA / "tessera"

# --- independent RFC 6962 reference ---------------------------------------------------------


def ref_leaf(entry: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + entry).digest()


def ref_root(leaves: Sequence[bytes]) -> bytes:
    """MTH over leaf hashes (RFC 6962 §2.1)."""
    n = len(leaves)
    if n == 0:
        return hashlib.sha256(b"").digest()
    if n == 1:
        return leaves[0]
    k = 1 << ((n - 1).bit_length() - 1)
    return hashlib.sha256(b"\x01" + ref_root(leaves[:k]) + ref_root(leaves[k:])).digest()


def ref_path(m: int, leaves: Sequence[bytes]) -> list[bytes]:
    """PATH(m, D[n]) over leaf hashes (RFC 6962 §2.1.1): sibling first, root's child last."""
    n = len(leaves)
    if n == 1:
        return []
    k = 1 << ((n - 1).bit_length() - 1)
    if m < k:
        return [*ref_path(m, leaves[:k]), ref_root(leaves[k:])]
    return [*ref_path(m - k, leaves[k:]), ref_root(leaves[:k])]


# --- keys, tree and checkpoints -------------------------------------------------------------

ORIGIN = "example.com/tlog-proof-test"
LOG = Ed25519Signer(ORIGIN, bytes(range(32)))
OTHER_LOG = Ed25519Signer(ORIGIN, bytes(range(1, 33)))  # same name, other key: other key ID
WITNESS = CosignatureV1Signer("witness.example/w1", bytes(range(32, 64)), clock=lambda: 1.7e9)
WITNESS2 = CosignatureV1Signer("witness.example/w2", bytes(range(64, 96)), clock=lambda: 1.7e9)

N = 13
ENTRIES = [b"entry %d" % i for i in range(N)]
LEAVES = [ref_leaf(e) for e in ENTRIES]
STORE = MemoryHashStore()
STORE.extend(LEAVES)


def checkpoint_text(size: int, origin: str = ORIGIN, extensions: tuple[str, ...] = ()) -> bytes:
    return Checkpoint(origin, size, ref_root(LEAVES[:size]), extensions).format()


def signed(size: int, *signers: Ed25519Signer | CosignatureV1Signer, origin: str = ORIGIN) -> bytes:
    return sign_note(checkpoint_text(size, origin), list(signers or (LOG, WITNESS)))


CP8 = signed(8)  # a real signed checkpoint: log signature and one cosignature
CP13 = signed(13)


def verify(
    proof: TlogProof,
    leaf: bytes,
    *,
    origin: str | None = ORIGIN,
    logs: Sequence[Verifier] = (LOG.verifier(),),
    cosigners: Sequence[Verifier] = (WITNESS.verifier(),),
) -> VerifiedProof:
    return verify_proof(proof, leaf, logs, origin=origin, cosigners=cosigners)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def test_reference_agrees_with_store() -> None:
    for size in range(1, N + 1):
        assert STORE.root(size) == ref_root(LEAVES[:size])


# --- transparency-dev/formats vectors (TestMarshal, TestRoundTrip) ------------------------

H1 = hashlib.sha256(b"hash1").digest()
H2 = hashlib.sha256(b"hash2").digest()
H1_B64 = "rzFuy5Go7nrpkhBwKy1HWPMM3eO/YePY54fXRoH5Cm4="
H2_B64 = "5784L25ZFbP4hhm4ZiI+vx1RxMUyHMzeLp/3AKMlkIY="
EXTRA = b"extra information"
EXTRA_B64 = "ZXh0cmEgaW5mb3JtYXRpb24="


def test_formats_vector_constants() -> None:
    # The Go test computes these with sha256.Sum256 and base64.StdEncoding; pin them as text.
    assert b64(H1) == H1_B64
    assert b64(H2) == H2_B64
    assert b64(EXTRA) == EXTRA_B64


# (name, proof, the formats expected output with its dummy checkpoint removed)
FORMATS_MARSHAL = [
    (
        "proof without extra data",
        TlogProof(5, (H1, H2), CP8),
        f"c2sp.org/tlog-proof@v1\nindex 5\n{H1_B64}\n{H2_B64}\n\n",
    ),
    (
        "proof with extra data",
        TlogProof(10, (H1,), CP8, EXTRA),
        f"c2sp.org/tlog-proof@v1\nextra {EXTRA_B64}\nindex 10\n{H1_B64}\n\n",
    ),
    ("proof with empty hashes", TlogProof(0, (), CP8), "c2sp.org/tlog-proof@v1\nindex 0\n\n"),
]


@pytest.mark.parametrize(
    ("name", "proof", "head"), FORMATS_MARSHAL, ids=[c[0] for c in FORMATS_MARSHAL]
)
def test_formats_marshal_vectors(name: str, proof: TlogProof, head: str) -> None:
    # The formats vectors end in a dummy checkpoint ("test checkpoint\n", "checkpoint data\n",
    # "checkpoint\n"). Ours must be a signed checkpoint note, so a real one (CP8) stands in; the
    # bytes before it are the formats expected output, verbatim.
    data = proof.format()
    assert data == head.encode("ascii") + CP8
    assert TlogProof.parse(data) == proof
    assert TlogProof.parse(data).format() == data


@pytest.mark.parametrize(
    ("dummy", "index", "hashes", "extra"),
    [
        (b"test checkpoint\n", 5, (H1, H2), None),
        (b"checkpoint data\n", 10, (H1,), EXTRA),
        (b"checkpoint\n", 0, (), None),
        (b"some checkpoint\n", 123, tuple(hashlib.sha256(c).digest() for c in (b"a", b"b")), None),
        (b"another checkpoint\n", 456, (hashlib.sha256(b"c").digest(),), b"some extra data"),
    ],
)
def test_formats_dummy_checkpoints_are_refused(
    dummy: bytes, index: int, hashes: tuple[bytes, ...], extra: bytes | None
) -> None:
    # The formats library treats the checkpoint as opaque bytes; this parser requires a
    # structurally valid signed note whose text is a checkpoint, so the dummies are malformed
    # both when parsed and when a TlogProof is built around them.
    head = b"c2sp.org/tlog-proof@v1\n"
    if extra is not None:
        head += b"extra " + b64(extra).encode() + b"\n"
    head += b"index %d\n" % index + b"".join(b64(h).encode() + b"\n" for h in hashes) + b"\n"
    with pytest.raises(MalformedError, match="checkpoint"):
        TlogProof.parse(head + dummy)
    with pytest.raises(MalformedError):
        TlogProof(index, hashes, dummy, extra)
    # With a real checkpoint in its place, the same file parses to the same values.
    p = TlogProof.parse(head + CP13)
    assert (p.index, p.hashes, p.extra, p.checkpoint) == (index, hashes, extra, CP13)


@pytest.mark.parametrize(
    ("index", "hashes", "extra"),
    [
        (123, (hashlib.sha256(b"a").digest(), hashlib.sha256(b"b").digest()), None),
        (456, (hashlib.sha256(b"c").digest(),), b"some extra data"),
        (789, (), None),
    ],
)
def test_formats_round_trip_vectors(
    index: int, hashes: tuple[bytes, ...], extra: bytes | None
) -> None:
    p = TlogProof(index, hashes, CP13, extra)
    q = TlogProof.parse(p.format())
    assert q == p
    assert q.checkpoint == CP13  # byte for byte


# --- negatives (formats TestUnmarshalErrors and the edge cases of tests/tlog/__init__.py) ------

GO_NEGATIVES = [
    ("missing header", b"wrong-header\nindex 0\n\n", "line 1"),
    (
        "invalid extra data encoding",
        b"c2sp.org/tlog-proof@v1\nextra !!notbase64!!\nindex 0\n\n",
        "line 2: extra data",
    ),
    ("missing index", b"c2sp.org/tlog-proof@v1\n\n\n", "line 2 is an empty line"),
    ("index not a number", b"c2sp.org/tlog-proof@v1\nindex notanumber\n\n", "line 2: index"),
    ("index negative", b"c2sp.org/tlog-proof@v1\nindex -5\n\n", "line 2: index"),
    (
        "invalid hash base64",
        b"c2sp.org/tlog-proof@v1\nindex 0\n!!notbase64!!\n\n",
        "line 3: proof hash",
    ),
    (
        "incorrect hash length",
        b"c2sp.org/tlog-proof@v1\nindex 0\n" + b64(bytes(64)).encode() + b"\n\n",
        "line 3: proof hash is 64 bytes",
    ),
    (
        "scanner error - buffer too large",
        b"c2sp.org/tlog-proof@v1\nindex 0\n" + b"a" * (65 * 1024) + b"\n\n",
        "line 3: proof hash",
    ),
]


@pytest.mark.parametrize(("name", "head", "why"), GO_NEGATIVES, ids=[c[0] for c in GO_NEGATIVES])
def test_formats_unmarshal_negatives(name: str, head: bytes, why: str) -> None:
    # Verbatim (with the formats dummy checkpoint): refused.
    with pytest.raises(MalformedError):
        TlogProof.parse(head + b"checkpoint\n")
    # With a real checkpoint, so that the named defect is what is refused.
    with pytest.raises(MalformedError, match=why):
        TlogProof.parse(head + CP8)


GOOD_HEAD = f"c2sp.org/tlog-proof@v1\nindex 0\n{H1_B64}\n\n".encode()


def test_good_head_parses() -> None:
    # The negatives below are small changes of this file.
    assert TlogProof.parse(GOOD_HEAD + CP8) == TlogProof(0, (H1,), CP8)


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"", "ends at line 1"),
        (b"c2sp.org/tlog-proof@v1", "line 1 does not end in a newline"),
        (b"c2sp.org/tlog-proof@v1\n", "ends at line 2"),
        (b"c2sp.org/tlog-proof@v1\nindex 0", "line 2 does not end in a newline"),
        (b"c2sp.org/tlog-proof@v1\nindex 0\n", "ends at line 3"),
        (b"c2sp.org/tlog-proof@v1\nindex 0\n\n", "checkpoint .from line 4.: note does not end"),
        (b"c2sp.org/tlog-proof@v2\nindex 0\n\n" + CP8, "line 1"),
        (b"c2sp.org/tlog-proof@v1 \nindex 0\n\n" + CP8, "line 1"),
        (b"C2SP.org/tlog-proof@v1\nindex 0\n\n" + CP8, "line 1"),
        (b"\xef\xbb\xbfc2sp.org/tlog-proof@v1\nindex 0\n\n" + CP8, "line 1"),
        (b"\nc2sp.org/tlog-proof@v1\nindex 0\n\n" + CP8, "line 1"),
    ],
)
def test_tp1_header_and_truncation(data: bytes, why: str) -> None:
    with pytest.raises(MalformedError, match=why):
        TlogProof.parse(data)


@pytest.mark.parametrize(
    ("extra_line", "why"),
    [
        (b"extra ", "extra line is empty"),  # tlog-proof: absent means absent
        (b"extra", "not followed by a space"),
        (b"extraAAAA", "not followed by a space"),
        (b"extra  AAAA", "extra data is not canonical"),
        (b"extra AAAA ", "extra data is not canonical"),
        (b"extra AAA", "extra data is not canonical"),  # missing padding
        (b"extra AB==", "non-canonical"),  # trailing bits
        (b"extra -_-_", "extra data is not canonical"),  # URL-safe alphabet
        # One byte too many: 43692 characters, caught after decoding ...
        (b"extra " + b"A" * (4 * ((MAX_EXTRA_SIZE + 3) // 3)), "line 2: extra data is larger"),
        # ... and longer lines, caught before decoding.
        (b"extra " + b"A" * (4 * ((MAX_EXTRA_SIZE + 5) // 3)), "line 2: extra data is larger"),
        (b"extra " + b"A" * (1 << 20), "line 2: extra data is larger"),
    ],
)
def test_tp2_extra_line_is_strict(extra_line: bytes, why: str) -> None:
    data = b"c2sp.org/tlog-proof@v1\n" + extra_line + b"\nindex 0\n\n" + CP8
    with pytest.raises(MalformedError, match=why):
        TlogProof.parse(data)


def test_tp2_extra_line_position_and_count() -> None:
    # extra may only be line 2, once.
    two = b"c2sp.org/tlog-proof@v1\nextra AAAA\nextra AAAA\nindex 0\n\n" + CP8
    with pytest.raises(MalformedError, match="line 3 is b'extra AAAA', not 'index"):
        TlogProof.parse(two)
    after = b"c2sp.org/tlog-proof@v1\nindex 0\nextra AAAA\n\n" + CP8
    with pytest.raises(MalformedError, match="line 3: proof hash"):
        TlogProof.parse(after)


def test_tp2_extra_size_bound() -> None:
    big = bytes(range(256)) * (MAX_EXTRA_SIZE // 256)
    assert len(big) == MAX_EXTRA_SIZE
    p = TlogProof(0, (), CP8, big)
    assert TlogProof.parse(p.format()) == p
    with pytest.raises(MalformedError, match="extra data is"):
        TlogProof(0, (), CP8, big + b"x")
    over = b"c2sp.org/tlog-proof@v1\nextra " + b64(big + b"xyz").encode() + b"\nindex 0\n\n" + CP8
    with pytest.raises(MalformedError, match="larger than"):
        TlogProof.parse(over)


@pytest.mark.parametrize(
    "index_line",
    [
        b"index 05",  # leading zero (formats accepts it)
        b"index 00",
        b"index +5",
        b"index -0",
        b"index 1_0",
        b"index  5",
        b"index 5 ",
        b"index\t5",
        b"index",
        b"index ",
        b"Index 5",
        b"index 0x5",
        "index \u0665".encode(),  # ARABIC-INDIC DIGIT FIVE: int() would accept it
        "index \uff15".encode(),  # FULLWIDTH DIGIT FIVE
        b"index 9223372036854775808",  # 2^63
        b"index 18446744073709551615",  # 2^64-1: formats' uint64 maximum
        b"index " + b"9" * 5000,
    ],
)
def test_edge_17_strict_integers_index(index_line: bytes) -> None:
    # TP-3: "index N" with no leading zeros; this module also bounds N by 2^63-1.
    data = b"c2sp.org/tlog-proof@v1\n" + index_line + b"\n\n" + CP8
    with pytest.raises(MalformedError, match="line 2"):
        TlogProof.parse(data)


def test_index_bounds_accepted() -> None:
    for index in (0, 1, 9, 10, MAX_INT63):
        data = b"c2sp.org/tlog-proof@v1\nindex %d\n\n" % index + CP8
        assert TlogProof.parse(data).index == index
    assert TlogProof.parse(b"c2sp.org/tlog-proof@v1\nindex 10\n\n" + CP8).index == 10


@pytest.mark.parametrize(
    ("hash_line", "why"),
    [
        (b"AA==", "is 1 bytes"),
        (b64(bytes(31)).encode(), "is 31 bytes"),
        (b64(bytes(33)).encode(), "is 33 bytes"),
        (b64(bytes(64)).encode(), "is 64 bytes"),
        (H1_B64[:20].encode() + b" " + H1_B64[20:].encode(), "not canonical"),
        (b" " + H1_B64.encode(), "not canonical"),
        (H1_B64.encode() + b" ", "not canonical"),
        (H1_B64[:-1].encode(), "not canonical"),  # padding missing
        (H1_B64[:-2].encode() + b"5=", "non-canonical"),  # '4' -> '5': a trailing bit set
        (H1_B64.replace("+", "-").replace("/", "_").encode(), "not canonical"),
        ("\u00e9".encode() * 22, "not base64"),
    ],
)
def test_edge_18_strict_hashes(hash_line: bytes, why: str) -> None:
    data = b"c2sp.org/tlog-proof@v1\nindex 0\n" + hash_line + b"\n\n" + CP8
    with pytest.raises(MalformedError, match=f"line 3: proof hash .*{why}"):
        TlogProof.parse(data)


def test_edge_19_proof_line_limit() -> None:
    def data(count: int) -> bytes:
        return (
            b"c2sp.org/tlog-proof@v1\nindex 0\n" + (H1_B64.encode() + b"\n") * count + b"\n" + CP8
        )

    assert len(TlogProof.parse(data(MAX_PROOF_HASHES)).hashes) == 63
    for count in (64, 65, 1000):  # 65: the digest's negative; 64 can never verify either
        with pytest.raises(MalformedError, match=f"line {3 + 63}: more than 63 proof hashes"):
            TlogProof.parse(data(count))
    with pytest.raises(MalformedError, match="64 proof hashes, at most 63"):
        TlogProof(0, (H1,) * 64, CP8)


def test_edge_32_control_characters_no_crlf_normalisation() -> None:
    good = GOOD_HEAD + CP8
    crlf = good.replace(b"\n", b"\r\n")
    with pytest.raises(MalformedError, match="line 1 contains a carriage return"):
        TlogProof.parse(crlf)
    # CRLF only in the proof part, or only in the checkpoint, or one stray CR.
    head_crlf = GOOD_HEAD.replace(b"\n", b"\r\n") + CP8
    with pytest.raises(MalformedError, match="line 1 contains a carriage return"):
        TlogProof.parse(head_crlf)
    cp_crlf = GOOD_HEAD + CP8.replace(b"\n", b"\r\n")
    with pytest.raises(MalformedError, match="line 5 contains a carriage return"):
        TlogProof.parse(cp_crlf)
    last = good[:-1] + b"\r\n"
    with pytest.raises(MalformedError, match="carriage return"):
        TlogProof.parse(last)
    # A TAB in the checkpoint is refused by the note rules.
    tab = GOOD_HEAD + CP8.replace(b"test", b"te\tst", 1)
    with pytest.raises(MalformedError, match="control character"):
        TlogProof.parse(tab)


def test_edge_02_first_blank_line_splits_proof_from_checkpoint() -> None:
    # The note has its own blank line; the proof part ends at the first one. No proof lines:
    p = TlogProof.parse(b"c2sp.org/tlog-proof@v1\nindex 0\n\n" + CP8)
    assert p.hashes == ()
    assert p.checkpoint == CP8


def test_missing_blank_line_before_checkpoint() -> None:
    # The checkpoint's origin line is then read as a proof hash.
    data = b"c2sp.org/tlog-proof@v1\nindex 0\n" + H1_B64.encode() + b"\n" + CP8
    with pytest.raises(MalformedError, match="line 4: proof hash"):
        TlogProof.parse(data)
    data = b"c2sp.org/tlog-proof@v1\nindex 0\n" + CP8
    with pytest.raises(MalformedError, match="line 3: proof hash"):
        TlogProof.parse(data)


@pytest.mark.parametrize(
    ("checkpoint", "why"),
    [
        (CP8 + b"trailing data\n", "does not start with"),  # tlog-proof: no trailing data
        (CP8 + b"\n", "no signature lines"),
        (CP8[:-1], "does not end in a newline"),
        (b"\n" + CP8, "origin is empty"),  # two blank lines between proof and checkpoint
        (b"", "does not end in a newline"),
        (sign_note(b"hello\n", [LOG]), "at least 3 needed"),  # a note, but not a checkpoint
        (sign_note(checkpoint_text(8) + b"\n", [LOG]), "extension line 4 is empty"),
        (checkpoint_text(8) + b"\n", "no signature lines"),
        (CP8.replace("—".encode(), b"--"), "does not start with"),
        (CP8.replace(b"\n\n", b"\n"), "no blank line"),
        (CP8 + b"\xff\n", "not valid UTF-8"),
    ],
)
def test_tp5_checkpoint_part_must_be_a_checkpoint_note(checkpoint: bytes, why: str) -> None:
    with pytest.raises(MalformedError, match=f"checkpoint .from line 4.: .*{why}"):
        TlogProof.parse(b"c2sp.org/tlog-proof@v1\nindex 0\n\n" + checkpoint)
    with pytest.raises(MalformedError, match=why):
        TlogProof(0, (), checkpoint)


def test_size_limits() -> None:
    with pytest.raises(MalformedError, match="more than the"):
        TlogProof.parse(b"x" * (MAX_PROOF_SIZE + 1))
    # The largest possible header part plus a checkpoint is within the bound.
    big = TlogProof(MAX_INT63, (H1,) * 63, CP8, bytes(MAX_EXTRA_SIZE))
    assert len(big.format()) <= MAX_PROOF_SIZE - MAX_NOTE_SIZE + len(CP8)
    assert TlogProof.parse(big.format()) == big


def test_non_ascii_and_non_utf8_in_the_proof_part() -> None:
    for data in (
        b"c2sp.org/tlog-proof@v1\nindex 0\n\xff\n\n" + CP8,
        b"c2sp.org/tlog-proof@v1\nextra \xff\nindex 0\n\n" + CP8,
        b"c2sp.org/tlog-proof@v1\nindex \xff\n\n" + CP8,
        b"c2sp.org/tlog-proof@v1\xff\nindex 0\n\n" + CP8,
    ):
        with pytest.raises(MalformedError):
            TlogProof.parse(data)


def test_spec_example() -> None:
    # C2SP tlog-proof.md's example: its signatures are elided ("hI2DJw[...]1roloI="), so the
    # file as printed is malformed; its proof part, with a real checkpoint, parses.
    head = (
        "c2sp.org/tlog-proof@v1\n"
        "extra YWdlLXYxLjIuMS1kYXJ3aW4tYXJtNjQudGFyLmd6kYXJ3aW4tYXJ\n"
        "index 73894\n"
        "gSKyXoYZUgZ6jduWYrkDOARinOMGJveXjgMkBTcdPlQ=\n"
        "B95lDa8R83lS8n0eG+o0buTxRKQTYFi//1U8anccXmA=\n"
        "EKNzoDWG8LGC0Yp9o+sv3qllpMP9uHQ9B20KNL+Q1zs=\n"
        "RoopEkOdqkYqMB4MJXrbt/hMjOxsVn0IrWjpz1ZMMes=\n"
        "AHCioX9nLjsrse6YhjRRmk1WUEirVOLLRoOQ6vfO5vk=\n"
        "\n"
    )
    checkpoint = (
        "example.com/fancylog\n"
        "109482\n"
        "sFodV/vSp5O8n9a8QpW6PRY97tfOSW5bsc2Xl/EQi08=\n"
        "\n"
        "— example.com/fancylog hI2DJw[...]1roloI=\n"
        "— witness1.example mJirIklj[...]qY9v2B/5bg==\n"
        "— witness2.example TnKKVHLX[...]xwYwrSjgow==\n"
        "— witness3.example S4X82uH5[...]3oEcROGLFQ==\n"
    )
    with pytest.raises(MalformedError, match=r"signature of example\.com/fancylog"):
        TlogProof.parse((head + checkpoint).encode())
    p = TlogProof.parse(head.encode() + CP8)
    assert p.index == 73894
    assert len(p.hashes) == 5
    assert p.extra is not None
    assert p.extra.startswith(b"age-v1.2.1-darwin-arm64.tar.gz")
    # The example is illustrative: a real proof of index 73894 in size 109482 has 17 hashes.
    assert len(ref_path_size(73894, 109482)) == 17


def ref_path_size(m: int, n: int) -> list[int]:
    """The subtree sizes of PATH(m, D[n]), without hashing: one per proof hash."""
    if n == 1:
        return []
    k = 1 << ((n - 1).bit_length() - 1)
    if m < k:
        return [*ref_path_size(m, k), n - k]
    return [*ref_path_size(m - k, n - k), k]


def test_tp6_file_extension() -> None:
    assert FILE_EXTENSION == ".tlog-proof"
    assert HEADER == b"c2sp.org/tlog-proof@v1"


# --- constructor ----------------------------------------------------------------------------


def test_constructor_checks_and_normalises() -> None:
    p = TlogProof(3, [bytearray(H1), H2], bytearray(CP8), bytearray(b"x"))  # type: ignore[arg-type]
    assert p == TlogProof(3, (H1, H2), CP8, b"x")
    assert type(p.hashes) is tuple
    assert all(type(h) is bytes for h in p.hashes)
    assert type(p.checkpoint) is bytes
    assert type(p.extra) is bytes
    for bad in (-1, MAX_INT63 + 1, True, 1.0, "1"):
        with pytest.raises(MalformedError, match="index"):
            TlogProof(bad, (), CP8)  # type: ignore[arg-type]
    with pytest.raises(MalformedError, match="hash 1 is 31 bytes"):
        TlogProof(0, (H1, H1[:31]), CP8)
    with pytest.raises(MalformedError, match="extra data is empty"):
        TlogProof(0, (), CP8, b"")


# --- Hypothesis: round trips ----------------------------------------------------------------

CHECKPOINTS = [
    CP8,
    CP13,
    signed(1, LOG),
    signed(0, LOG),
    sign_note(checkpoint_text(5, extensions=("ext one", "ext 2")), [LOG, WITNESS, WITNESS2]),
    sign_note(checkpoint_text(3, origin="origin with spaces ü"), [LOG]),
]


@settings(max_examples=300, deadline=None)
@given(
    index=st.integers(0, MAX_INT63),
    hashes=st.lists(st.binary(min_size=32, max_size=32), max_size=MAX_PROOF_HASHES),
    extra=st.none() | st.binary(min_size=1, max_size=300),
    checkpoint=st.sampled_from(CHECKPOINTS),
)
def test_round_trip(
    index: int, hashes: list[bytes], extra: bytes | None, checkpoint: bytes
) -> None:
    p = TlogProof(index, tuple(hashes), checkpoint, extra)
    data = p.format()
    q = TlogProof.parse(data)
    assert q == p
    assert q.format() == data
    assert data.endswith(b"\n\n" + checkpoint)
    assert data.count(b"\n") == (
        1 + (extra is not None) + 1 + len(hashes) + 1 + checkpoint.count(b"\n")
    )


# --- end to end -----------------------------------------------------------------------------


def test_end_to_end_every_index_every_size() -> None:
    for size in range(1, N + 1):
        cp = signed(size)
        for i in range(size):
            proof = build_proof(i, cp, STORE)
            assert list(proof.hashes) == ref_path(i, LEAVES[:size])
            data = proof.format()
            parsed = TlogProof.parse(data)
            assert parsed == proof
            assert parsed.format() == data
            v = verify(parsed, LEAVES[i])
            assert (v.index, v.leaf, v.extra) == (i, LEAVES[i], None)
            assert (v.checkpoint.origin, v.checkpoint.size) == (ORIGIN, size)
            assert v.checkpoint.root == ref_root(LEAVES[:size])
            assert [(s.name, s.key_id) for s in v.log_signatures] == [(ORIGIN, LOG.key_id)]
            assert [(s.name, s.key_id) for s in v.cosignatures] == [(WITNESS.name, WITNESS.key_id)]
            assert v.signed.note.sigs == v.log_signatures + v.cosignatures
            assert v.signed.note.unverified == ()


def test_end_to_end_with_extra_and_without_cosigners() -> None:
    proof = build_proof(6, CP13, STORE, extra=b"vrf proof bytes")
    parsed = TlogProof.parse(proof.format())
    assert parsed.extra == b"vrf proof bytes"
    v = verify(parsed, LEAVES[6], cosigners=())
    assert v.extra == b"vrf proof bytes"
    assert v.cosignatures == ()
    # The witness line is kept, unverified (its key was not given).
    assert [s.name for s in v.signed.note.unverified] == [WITNESS.name]
    # origin=None: the log keys alone decide.
    assert verify(parsed, LEAVES[6], origin=None).checkpoint.origin == ORIGIN


@pytest.mark.parametrize("size", [8, 13])
def test_end_to_end_failures(size: int) -> None:
    cp = signed(size)
    i = 5
    good = TlogProof.parse(build_proof(i, cp, STORE).format())
    verify(good, LEAVES[i])

    # Wrong leaf.
    for other in (LEAVES[i - 1], LEAVES[i + 1], ref_leaf(b"not logged"), bytes(32)):
        with pytest.raises(ProofError):
            verify(good, other)
    # Wrong index, same hashes (and an index past the tree: ProofError too).
    for j in (i - 1, i + 1, i ^ 1, size, size + 1, MAX_INT63):
        with pytest.raises(ProofError):
            verify(TlogProof(j, good.hashes, cp), LEAVES[i])
    # Truncated, extended, reordered, bit-flipped proofs.
    hs = list(good.hashes)
    for bad in (
        hs[:-1],
        [*hs, hs[0]],
        hs[::-1],
        [hs[0][:-1] + bytes([hs[0][-1] ^ 1]), *hs[1:]],
    ):
        with pytest.raises(ProofError):
            verify(TlogProof(i, tuple(bad), cp), LEAVES[i])
    # Wrong origin: a VerificationError proper, not a note or proof error.
    with pytest.raises(VerificationError, match="not the expected") as exc:
        verify(good, LEAVES[i], origin="example.com/another-log")
    assert type(exc.value) is VerificationError
    with pytest.raises(VerificationError) as exc:
        verify(good, LEAVES[i], origin=ORIGIN + " ")
    assert type(exc.value) is VerificationError
    # Unknown log key (same name, other key, so another key ID): the log line is unknown.
    with pytest.raises(UnverifiedNoteError):
        verify(good, LEAVES[i], logs=[OTHER_LOG.verifier()])
    # A checkpoint signed by another key of the same name, verified with the right key.
    forged = TlogProof(i, good.hashes, signed(size, OTHER_LOG, WITNESS))
    with pytest.raises(UnverifiedNoteError):
        verify(forged, LEAVES[i])


def test_wrong_origin_is_checked_before_signatures() -> None:
    # A proof for another log, signed by a key we do not have: the origin is what is reported.
    other = TlogProof(
        0, (), signed(1, Ed25519Signer("other.example/log", bytes(32)), origin="other.example/log")
    )
    with pytest.raises(VerificationError, match="not the expected") as exc:
        verify(other, LEAVES[0])
    assert type(exc.value) is VerificationError


def test_edge_07_unknown_vs_known_keys() -> None:
    text = checkpoint_text(8)
    log_sig = Signature(LOG.name, LOG.key_id, LOG.sign(text))
    wit_sig = Signature(WITNESS.name, WITNESS.key_id, WITNESS.sign(text))
    path = tuple(ref_path(2, LEAVES[:8]))

    def proof(*sigs: Signature) -> TlogProof:
        return TlogProof(2, path, format_note(text, list(sigs)))

    # Unknown cosigner lines (the witness's, with no cosigner given) are ignored.
    v = verify(proof(log_sig, wit_sig), LEAVES[2], cosigners=())
    assert v.cosignatures == ()
    # A bad line from a trusted log key rejects the proof.
    bad_log = Signature(LOG.name, LOG.key_id, bytes(64))
    with pytest.raises(InvalidSignatureError):
        verify(proof(bad_log, wit_sig), LEAVES[2])
    # A bad line from a given cosigner rejects the proof, though the log's line is good.
    bad_wit = Signature(WITNESS.name, WITNESS.key_id, wit_sig.sig[:8] + bytes(64))
    with pytest.raises(InvalidSignatureError):
        verify(proof(log_sig, bad_wit), LEAVES[2])
    # ... and is ignored when that cosigner is not given.
    assert verify(proof(log_sig, bad_wit), LEAVES[2], cosigners=()).cosignatures == ()
    # Only unknown lines: rejected.
    with pytest.raises(UnverifiedNoteError):
        verify(proof(wit_sig), LEAVES[2], cosigners=())
    # Only a cosigner signed: the cosigner verifies, but no log key did: rejected.
    with pytest.raises(UnverifiedNoteError, match="log key"):
        verify(proof(wit_sig), LEAVES[2])


def test_edge_08_witness_key_cannot_stand_in_for_the_log() -> None:
    # The witness's Ed25519 key as a type-0x01 log key has another key ID than its 0x04 lines.
    as_log = Ed25519Verifier(WITNESS.name, WITNESS.public_key)
    assert as_log.key_id != WITNESS.key_id
    p = TlogProof(0, tuple(ref_path(0, LEAVES[:8])), CP8)
    with pytest.raises(UnverifiedNoteError):
        verify(p, LEAVES[0], logs=[as_log], cosigners=())


def test_edge_31_key_name_differs_from_origin() -> None:
    origin = "go.sum database tree"
    log = Ed25519Signer("sum.example.org", bytes(range(100, 132)))
    cp = sign_note(checkpoint_text(4, origin=origin), [log])
    p = TlogProof.parse(TlogProof(3, tuple(ref_path(3, LEAVES[:4])), cp).format())
    v = verify(p, LEAVES[3], origin=origin, logs=[log.verifier()], cosigners=())
    assert v.checkpoint.origin == origin
    assert v.log_signatures[0].name == "sum.example.org"
    with pytest.raises(VerificationError):
        verify(p, LEAVES[3], origin="sum.example.org", logs=[log.verifier()], cosigners=())


def test_edge_33_duplicate_cosignature_lines() -> None:
    text = checkpoint_text(8)
    log_sig = Signature(LOG.name, LOG.key_id, LOG.sign(text))
    wit_a = Signature(WITNESS.name, WITNESS.key_id, WITNESS.sign_at(text, 1_700_000_000))
    wit_b = Signature(WITNESS.name, WITNESS.key_id, WITNESS.sign_at(text, 1_700_000_001))
    path = tuple(ref_path(1, LEAVES[:8]))
    # A byte-identical repeated line counts once.
    same = TlogProof(1, path, text + b"\n" + log_sig.line() + wit_a.line() + wit_a.line())
    v = verify(TlogProof.parse(same.format()), LEAVES[1])
    assert v.cosignatures == (wit_a,)
    # Two different valid lines from one cosigner reject the note (tlog.note's decision).
    twice = TlogProof(1, path, format_note(text, [log_sig, wit_a, wit_b]))
    with pytest.raises(InvalidSignatureError):
        verify(twice, LEAVES[1])


def test_unknown_signature_lines_are_allowed() -> None:
    # signed-note: a checkpoint may carry signatures the verifier does not know.
    stranger = Ed25519Signer("stranger.example", bytes(range(7, 39)))
    cp = sign_note(checkpoint_text(8), [stranger, LOG, WITNESS2, WITNESS])
    p = TlogProof.parse(TlogProof(7, tuple(ref_path(7, LEAVES[:8])), cp).format())
    v = verify(p, LEAVES[7])
    assert [s.name for s in v.signed.note.unverified] == [stranger.name, WITNESS2.name]
    v2 = verify(p, LEAVES[7], cosigners=[WITNESS.verifier(), WITNESS2.verifier()])
    assert [s.name for s in v2.cosignatures] == [WITNESS2.name, WITNESS.name]


def test_empty_tree_checkpoint_proves_nothing() -> None:
    p = TlogProof.parse(b"c2sp.org/tlog-proof@v1\nindex 0\n\n" + signed(0, LOG))
    with pytest.raises(ProofError):
        verify(p, LEAVES[0], cosigners=())


def test_usage_errors() -> None:
    p = build_proof(0, CP8, STORE)
    with pytest.raises(UsageError, match="leaf hash is 31 bytes"):
        verify(p, LEAVES[0][:31])
    with pytest.raises(UsageError, match="leaf hash"):
        verify(p, ENTRIES[0])  # the entry, not its hash
    with pytest.raises(UsageError, match="at least one log verifier"):
        verify(p, LEAVES[0], logs=())
    with pytest.raises(UsageError, match="both as a log key and as a cosigner"):
        verify(p, LEAVES[0], cosigners=[LOG.verifier()])


def test_policy_hook_runs_between_signatures_and_inclusion() -> None:
    seen: list[SignedCheckpoint] = []

    def accept(sc: SignedCheckpoint) -> None:
        seen.append(sc)

    def reject(sc: SignedCheckpoint) -> None:
        seen.append(sc)
        raise PolicyError("quorum not met")

    good = build_proof(4, CP8, STORE)
    v = verify_proof(
        good, LEAVES[4], [LOG.verifier()], cosigners=[WITNESS.verifier()], policy=accept
    )
    assert seen == [v.signed]
    assert [s.name for s in seen[0].note.sigs] == [LOG.name, WITNESS.name]
    seen.clear()
    # Policy (step 3) is judged before the inclusion proof (step 4): a bad proof under a
    # rejecting policy reports the policy.
    bad = TlogProof(4, good.hashes[::-1], CP8)
    with pytest.raises(PolicyError):
        verify_proof(bad, LEAVES[4], [LOG.verifier()], policy=reject)
    with pytest.raises(ProofError):
        verify_proof(bad, LEAVES[4], [LOG.verifier()], policy=accept)
    # The policy never sees a checkpoint whose signatures failed.
    seen.clear()
    with pytest.raises(UnverifiedNoteError):
        verify_proof(good, LEAVES[4], [OTHER_LOG.verifier()], policy=accept)
    with pytest.raises(VerificationError):
        verify_proof(good, LEAVES[4], [LOG.verifier()], origin="x", policy=accept)
    assert seen == []


def test_policy_hook_with_tlog_policy() -> None:
    # How a verifier composes verify_proof with a tlog-policy file (tlog.policy): the policy's
    # keys go in as log and cosigner keys, its quorum is judged in the hook.
    from tlog.keys import format_vkey
    from tlog.policy import Policy

    text = (
        f"log {format_vkey(LOG.verifier())}\n"
        f"witness w1 {format_vkey(WITNESS.verifier())}\n"
        f"witness w2 {format_vkey(WITNESS2.verifier())}\n"
        "group both 2 w1 w2\n"
        "quorum both\n"
    )
    policy = Policy.parse(text.encode())

    def run(proof: TlogProof) -> VerifiedProof:
        return verify_proof(
            proof,
            LEAVES[2],
            policy.log_verifiers,
            origin=ORIGIN,
            cosigners=policy.witness_verifiers,
            policy=lambda _: policy.verify(proof.checkpoint),
        )

    hashes = tuple(ref_path(2, LEAVES[:8]))
    one = TlogProof(2, hashes, CP8)  # cosigned by w1 only
    with pytest.raises(PolicyError):
        run(one)
    both = TlogProof(2, hashes, signed(8, LOG, WITNESS, WITNESS2))
    v = run(both)
    assert {s.name for s in v.cosignatures} == {WITNESS.name, WITNESS2.name}


def test_build_proof_errors() -> None:
    with pytest.raises(UsageError):
        build_proof(8, CP8, STORE)
    with pytest.raises(UsageError):
        build_proof(-1, CP8, STORE)
    with pytest.raises(MalformedError):
        build_proof(0, b"checkpoint\n", STORE)
    with pytest.raises(MalformedError, match="extra data is empty"):
        build_proof(0, CP8, STORE, extra=b"")
    # A store holding another tree than the checkpoint's: refused, not a bad proof.
    other = MemoryHashStore()
    other.extend(ref_leaf(b"other %d" % i) for i in range(N))
    with pytest.raises(ProofError):
        build_proof(3, CP8, other)


# --- interop: checkpoints signed by transparency-dev/tessera --------------------------------


def test_tessera_log_checkpoints_carry_proofs() -> None:
    keys = json.loads((TESSERA / "log_keys.json").read_text("utf-8"))
    log_key = parse_vkey(keys["log_vkey"])
    entries = [e.encode("utf-8") for e in keys["entries_in_order"]]
    count = 0
    for size in range(1, 16):
        cp = (TESSERA / "log" / f"checkpoint.{size}").read_bytes()
        tile = (TESSERA / "log" / "tile" / "0" / f"000.p/{size}").read_bytes()
        leaves = [tile[32 * k : 32 * k + 32] for k in range(size)]
        assert leaves == [ref_leaf(e) for e in entries[:size]]
        store = MemoryHashStore()
        store.extend(leaves)
        for i in range(size):
            proof = TlogProof(i, tuple(ref_path(i, leaves)), cp)
            assert build_proof(i, cp, store) == proof
            parsed = TlogProof.parse(proof.format())
            v = verify_proof(
                parsed, ref_leaf(entries[i]), [log_key], origin="example.com/log/testdata"
            )
            assert v.checkpoint.size == size
            count += 1
            if i:
                with pytest.raises(ProofError):
                    verify_proof(
                        parsed, leaves[i - 1], [log_key], origin="example.com/log/testdata"
                    )
    assert count == 15 * 16 // 2


# --- mutations ------------------------------------------------------------------------------


def _outcome(data: bytes, leaf: bytes) -> VerifiedProof | None:
    """Parse and verify; None when refused. Anything but the documented errors fails."""
    try:
        p = TlogProof.parse(data)
    except MalformedError:
        return None
    # One spelling: whatever parses formats back to the very same bytes.
    assert p.format() == data
    try:
        return verify_proof(p, leaf, [LOG.verifier()], origin=None, cosigners=[WITNESS.verifier()])
    except VerificationError:
        return None


def _single_byte_changes(data: bytes) -> list[bytes]:
    """Every byte position, replaced by a few values, and deleted."""
    out = []
    for pos, b in enumerate(data):
        for r in sorted({b ^ 0x01, b ^ 0x20, b ^ 0x80, 0x0A} - {b}):
            out.append(data[:pos] + bytes([r]) + data[pos + 1 :])
        out.append(data[:pos] + data[pos + 1 :])
    return out


MUTATION_INDEX = 5
LOG_ONLY = TlogProof(
    MUTATION_INDEX, tuple(ref_path(MUTATION_INDEX, LEAVES)), signed(N, LOG)
).format()


def test_every_single_byte_change_fails_log_only_proof() -> None:
    assert _outcome(LOG_ONLY, LEAVES[MUTATION_INDEX]) is not None
    mutants = _single_byte_changes(LOG_ONLY)
    assert len(mutants) >= 4 * len(LOG_ONLY)
    for m in mutants:
        assert _outcome(m, LEAVES[MUTATION_INDEX]) is None, m


def test_every_single_byte_change_of_a_cosigned_proof_with_extra() -> None:
    # Two things are not protected by the log's signature, by design: the extra data (TP-2)
    # and whether a cosignature line stays *known* (a changed name or key ID makes it an
    # unknown line, which signed-note ignores). A mutant may verify only by changing exactly
    # one of those, never the leaf, index, checkpoint text or log signature.
    data = TlogProof(
        MUTATION_INDEX, tuple(ref_path(MUTATION_INDEX, LEAVES)), CP13, b"application data"
    ).format()
    base = _outcome(data, LEAVES[MUTATION_INDEX])
    assert base is not None
    assert len(base.cosignatures) == 1
    extra_changed = cosig_dropped = 0
    for m in _single_byte_changes(data):
        v = _outcome(m, LEAVES[MUTATION_INDEX])
        if v is None:
            continue
        assert (v.index, v.leaf, v.checkpoint) == (base.index, base.leaf, base.checkpoint)
        assert v.log_signatures == base.log_signatures
        if v.extra != base.extra:
            assert v.cosignatures == base.cosignatures
            extra_changed += 1
        else:
            assert v.cosignatures == ()
            assert len(v.signed.note.unverified) == 1
            cosig_dropped += 1
    assert extra_changed > 0
    assert cosig_dropped > 0


@settings(max_examples=300, deadline=None)
@given(pos=st.integers(0, len(LOG_ONLY) - 1), value=st.integers(0, 255))
def test_random_single_byte_change_never_verifies(pos: int, value: int) -> None:
    if LOG_ONLY[pos] == value:
        return
    mutant = LOG_ONLY[:pos] + bytes([value]) + LOG_ONLY[pos + 1 :]
    assert _outcome(mutant, LEAVES[MUTATION_INDEX]) is None
