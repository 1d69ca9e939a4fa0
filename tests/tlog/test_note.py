"""Tests for tlog.note and tlog.keys: signed notes, key names, key IDs and vkeys
(C2SP signed-note, https://c2sp.org/signed-note).

The edge cases an implementation most often gets wrong, one test (or a small group) per case:
the em dash prefix, the split at the last blank line, the signed bytes, the key ID preimage,
vkey splitting and ID verification, unknown vs known keys, the signature count limit, control
characters and duplicate signature lines. ``test_edge_NN_*`` keeps the case's number
(tests/tlog/__init__.py lists the cases and their specs). Spec literals are inlined
with a comment citing the spec; vectors published by other projects carry their provenance
(repository, commit, path; testdata/README.md).
"""

from __future__ import annotations

import functools
import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.tlog.helpers import (
    ENOCH_LINE,
    FORMATS_MLDSA_VKEY,
    PETER_LINE,
    PETER_NOTE,
    PETER_SKEY,
    PETER_TEXT,
    PETER_VKEY,
    REMORA_VKEY,
    SUMDB_VKEY,
    T0,
    TEST_VKEY,
    fixed_clock,
    seed_of,
    tiny_log,
)
from tlog.checkpoint import Checkpoint, open_checkpoint
from tlog.cosignature import CosignatureV1Signer, SubtreeV1Signer
from tlog.encoding import b64encode
from tlog.errors import InvalidSignatureError, MalformedError, UnverifiedNoteError
from tlog.keys import format_vkey, parse_signer_key, parse_vkey
from tlog.note import (
    MAX_SIGNATURES,
    Ed25519Signer,
    Signature,
    Verifier,
    add_signatures,
    format_note,
    key_id,
    open_note,
    parse_note,
    sign_note,
)
from tlog.witnessproto import MAX_REQUEST_SIZE, AddCheckpointRequest


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
    # A note: split at the LAST blank line. The signed-note intro example (testdata/c2sp/README.md,
    # C2SP/C2SP@ 5ba5ee830903e91240fc6f9f3a7a9293d49e69c9 signed-note.md) has a blank line in its
    # text.
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

    # A request: split at the FIRST blank line; "old 0" with no proof lines (tlog-witness, https://c2sp.org/tlog-witness).
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
    assert 50_000 <= len(note) <= 56_000  # 16 ML-DSA-44 lines: "about 53 KB"
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
