"""Interop vectors for cosignatures and signature lines (tlog.cosignature, tlog.note, tlog.keys;
C2SP tlog-cosignature, https://c2sp.org/tlog-cosignature).

Sources (testdata/README.md; provenance and verdicts in each folder's README.md):

* sigsum-go/checkpoint_vectors.json — a Sigsum checkpoint and a cosignature/v1 line that are
  reproduced byte for byte, tamper variants, signature-line parse cases, vkeys;
* derived/sigsum_extra_signature_lines.json — sigsum-go vs Go x/mod on short signature lines;
* transparency-dev-formats/cosignature_v1_vectors.json — vkeys and timestamp extraction;
* c2sp/spec_examples.json — the tlog-cosignature and tlog-witness examples.
"""

from __future__ import annotations

import hashlib
import struct
from typing import Any

import pytest

from tests.vectors import b64, load
from tlog.checkpoint import Checkpoint, open_checkpoint
from tlog.cosignature import (
    CosignatureV1Signer,
    CosignatureV1Verifier,
    cosignature_v1_message,
    split_timestamped,
    timestamp_of,
)
from tlog.encoding import MAX_INT63, b64encode, parse_hash
from tlog.errors import (
    InvalidSignatureError,
    MalformedError,
    UnverifiedNoteError,
    VerificationError,
)
from tlog.keys import UnsupportedKeyError, cosigner_from_vkey, format_vkey, parse_vkey
from tlog.note import (
    Ed25519Signer,
    Ed25519Verifier,
    Signature,
    key_id,
    open_note,
    parse_note,
    parse_signature_line,
    sign_note,
)

# --- sigsum-go/checkpoint_vectors.json -------------------------------------------------------

SIGSUM = load("sigsum-go/checkpoint_vectors.json")
SEED = bytes.fromhex(SIGSUM["ed25519_seed_hex"])


def sigsum_log() -> Ed25519Signer:
    """The seed-0x11 log key, named after its origin as Sigsum logs are."""
    pub = bytes(Ed25519Signer("x", SEED).public_key)
    return Ed25519Signer(f"sigsum.org/v1/tree/{hashlib.sha256(pub).hexdigest()}", SEED)


def test_sigsum_valid_checkpoint_verifies_and_is_reproduced() -> None:
    log = sigsum_log()
    data = SIGSUM["valid_checkpoint"]["note"].encode()
    cp = open_checkpoint(data, [log.verifier()])
    assert cp.checkpoint.origin == log.name
    assert cp.checkpoint.size == 10
    # Ed25519 is deterministic: signing the text again gives the same note.
    assert sign_note(cp.note.text, [log]) == data


def tamper(data: bytes, how: str) -> bytes:
    text, (sig,) = parse_note(data)
    cp = Checkpoint.parse(text)
    if how == "origin + 'x'":
        text = Checkpoint(cp.origin + "x", cp.size, cp.root).format()
    elif how == "size + 1":
        text = Checkpoint(cp.origin, cp.size + 1, cp.root).format()
    elif how == "root hash byte 3 xor 1":
        root = bytearray(cp.root)
        root[3] ^= 1
        text = Checkpoint(cp.origin, cp.size, bytes(root)).format()
    elif how == "key ID byte 2 xor 1":
        sig = Signature(sig.name, sig.key_id ^ (1 << 8), sig.sig)
    elif how == "signature byte 4 xor 1":
        raw = bytearray(sig.sig)
        raw[4] ^= 1
        sig = Signature(sig.name, sig.key_id, bytes(raw))
    else:  # pragma: no cover - a new tamper case in the vectors
        raise AssertionError(how)
    return text + b"\n" + sig.line()


@pytest.mark.parametrize("how", SIGSUM["valid_checkpoint"]["tamper_cases_must_fail"])
def test_sigsum_tampered_checkpoint_fails(how: str) -> None:
    data = tamper(SIGSUM["valid_checkpoint"]["note"].encode(), how)
    # A changed text or signature fails the known key; a changed key ID makes it unknown.
    want = UnverifiedNoteError if how.startswith("key ID") else InvalidSignatureError
    with pytest.raises(want):
        open_checkpoint(data, [sigsum_log().verifier()])


def test_sigsum_cosignature_reproduced_byte_for_byte() -> None:
    c = SIGSUM["cosignature"]
    witness = CosignatureV1Signer(c["witness_name"], SEED)
    body = c["checkpoint_body"].encode()
    sig = Signature(witness.name, witness.key_id, witness.sign_at(body, c["timestamp"]))
    assert sig.line() == (c["want_signature_line"] + "\n").encode()
    assert timestamp_of(sig) == 1234


def test_sigsum_of_the_four_published_lines_only_line_2_verifies() -> None:
    c = SIGSUM["cosignature"]
    v = CosignatureV1Signer(c["witness_name"], SEED).verifier()
    body = c["checkpoint_body"].encode()
    verdicts = []
    for line in c["lines_as_published"].split("\n")[:-1]:
        s = parse_signature_line(line)
        verdicts.append((s.name, s.key_id) == (v.name, v.key_id) and v.verify(body, s.sig))
    # 1: other key ID; 3: other key name; 4: a 74-byte signature (wrong size).
    assert verdicts == [False, True, False, False]
    # In a note, lines 1 and 3 are unknown keys, while line 4 claims the witness's key: it
    # fails, and so does the note.
    lines = c["lines_as_published"].split("\n")[:-1]
    log_line = SIGSUM["unsigned_test_checkpoint"]["note"].split("\n\n")[1]
    note = body + b"\n" + (log_line + "\n".join(lines[:3]) + "\n").encode()
    n = open_note(note, [v])
    assert [s.name for s in n.sigs] == [c["witness_name"]]
    assert len(n.unverified) == 3
    with pytest.raises(InvalidSignatureError):
        open_note(note + (lines[3] + "\n").encode(), [v])


def test_sigsum_cosignature_time_is_signed() -> None:
    c = SIGSUM["cosignature"]
    v = CosignatureV1Signer(c["witness_name"], SEED).verifier()
    body = c["checkpoint_body"].encode()
    sig = parse_signature_line(c["want_signature_line"]).sig
    assert v.verify(body, sig)
    assert not v.verify(body, struct.pack(">Q", 1235) + sig[8:])
    assert not v.verify(body + b"ext\n", sig)


def test_sigsum_cosigned_data() -> None:
    d = SIGSUM["cosigned_data"]
    assert hashlib.sha256(bytes(32)).hexdigest() in d["origin"]
    cp = Checkpoint(d["origin"], d["size"], bytes.fromhex(d["root_hash_hex"]))
    assert cp.format() == d["want_checkpoint_body"].encode()
    message = cosignature_v1_message(cp.format(), d["timestamp"])
    assert message == d["want_signed_message"].encode()


EXTRA = SIGSUM["extra_signature_lines"]
EXTRA_LINES = {
    "valid": SIGSUM["valid_checkpoint"]["note"].split("\n\n")[1].removesuffix("\n"),
    "example": EXTRA["example_sig"],
    "alien": EXTRA["alien_sig"],
    "bad": EXTRA["bad_sig"],
}
GO_EXTRA = load("derived/sigsum_extra_signature_lines.json")["data"]


@pytest.mark.parametrize("case", GO_EXTRA, ids=lambda c: "+".join(c["lines"]))
def test_sigsum_extra_signature_lines_follow_go_x_mod(case: dict[str, Any]) -> None:
    # sigsum-go ignores the 3-byte "— example.org/log DEAD" line; Go x/mod rejects the whole
    # note as malformed (a signature must decode to at least 5 bytes). We follow Go x/mod.
    text = SIGSUM["valid_checkpoint"]["note"].split("\n\n")[0] + "\n\n"
    data = (text + "".join(EXTRA_LINES[k] + "\n" for k in case["lines"])).encode()
    matching = [
        e
        for e in EXTRA["sigsum_expectations"]
        if e["lines"] == case["lines"] and e["want_ok"] == case["sigsum_go_ok"]
    ]
    assert len(matching) == 1
    if case["go_x_mod_ok"]:
        open_checkpoint(data, [sigsum_log().verifier()])
    else:
        assert case["go_error"] == "malformed note"
        with pytest.raises(MalformedError):
            open_checkpoint(data, [sigsum_log().verifier()])


def test_sigsum_extra_example_line_alone_is_an_unknown_key() -> None:
    # Without the 3-byte line, the well-formed foreign line is merely unverified.
    text = SIGSUM["valid_checkpoint"]["note"].split("\n\n")[0] + "\n\n"
    data = (text + EXTRA_LINES["example"] + "\n" + EXTRA_LINES["valid"] + "\n").encode()
    cp = open_checkpoint(data, [sigsum_log().verifier()])
    assert [s.name for s in cp.note.unverified] == ["example.org/log2"]
    with pytest.raises(MalformedError):
        parse_signature_line(EXTRA_LINES["alien"])
    with pytest.raises(MalformedError):
        parse_signature_line(EXTRA_LINES["bad"])


def test_sigsum_unsigned_test_checkpoint_parses() -> None:
    u = SIGSUM["unsigned_test_checkpoint"]
    text, (sig,) = parse_note(u["note"].encode())
    assert Checkpoint.parse(text) == Checkpoint(u["origin"], u["size"], b64(u["root_hash_b64"]))
    assert (sig.name, f"{sig.key_id:08x}") == (u["origin"], u["key_id_hex"])
    with pytest.raises(UnverifiedNoteError):
        open_note(u["note"].encode(), [sigsum_log().verifier()])


def _split_request(body: str, old_size: int) -> tuple[str, list[str], str]:
    """An add-checkpoint body's head (the old line and the proof lines), proof lines and note:
    it splits at its FIRST blank line (the note inside at its last); the old line is checked."""
    head, _, note = body.partition("\n\n")
    old_line, *proof = head.split("\n")
    assert old_line == f"old {old_size}"
    return head, proof, note


def test_sigsum_add_checkpoint_request_parses() -> None:
    # Parse-only (fake signature): the request splits at its first blank line.
    req = SIGSUM["add_checkpoint_request"]
    want = req["want"]
    head, proof, note = _split_request(req["body"], want["old_size"])
    assert [parse_hash(p, "proof line") for p in proof] == [b64(p) for p in want["proof_b64"]]
    text, (sig,) = parse_note(note.encode())
    cp = Checkpoint.parse(text)
    assert (cp.origin, cp.size) == (want["origin"], want["size"])
    assert (sig.name, f"{sig.key_id:08x}") == (want["origin"], want["key_id_hex"])
    assert head + "\n\n" + cp.format().decode() + "\n" + sig.line().decode() == req["body"]


def test_sigsum_vkeys() -> None:
    good, wrong_id = SIGSUM["vkey_vectors"]
    v = parse_vkey(good["vkey"])
    assert isinstance(v, CosignatureV1Verifier)
    assert v.public_key.hex() == good["public_key_hex"]
    assert format_vkey(v) == good["vkey"]
    assert f"{v.key_id:08x}" == "57bfe580"
    # sigsum-go does not check the declared key ID; we do.
    with pytest.raises(MalformedError, match="declares key ID 01020304"):
        parse_vkey(wrong_id["vkey"])


LINE_VERDICTS = {
    "ok": "ok",
    "unwanted (other key name)": "other name",
    "error: illegal base64 (missing padding)": "malformed",
    "unwanted (not a 68-byte Ed25519 signature)": "wrong size",
    # sigsum-go skips it; like Go x/mod we refuse a signature shorter than 5 bytes.
    "unwanted (too short)": "malformed",
    "error: invalid signature line (two spaces after the em dash)": "malformed",
}


@pytest.mark.parametrize("case", SIGSUM["line_parse_vectors"], ids=lambda c: c["want"])
def test_sigsum_signature_line_parse(case: dict[str, str]) -> None:
    verdict = LINE_VERDICTS[case["want"]]
    if verdict == "malformed":
        with pytest.raises(MalformedError):
            parse_signature_line(case["line"])
        return
    s = parse_signature_line(case["line"])
    assert (s.name == case["key_name"]) == (verdict != "other name")
    assert (len(s.sig) == 64) == (verdict != "wrong size")
    if "key_id_hex" in case:
        assert f"{s.key_id:08x}" == case["key_id_hex"]


# --- transparency-dev-formats/cosignature_v1_vectors.json ------------------------------------

FORMATS = load("transparency-dev-formats/cosignature_v1_vectors.json")


def test_formats_valid_vkeys() -> None:
    test_key, remora = (c["vkey"] for c in FORMATS["vkeys_valid"])
    # A 0x01 key (whose base64 holds a '+') read as a cosigner: the 0x04 key ID is recomputed.
    v = parse_vkey(test_key)
    assert (v.key_type, f"{v.key_id:08x}") == (0x01, "7997405c")
    cosigner = cosigner_from_vkey(test_key)
    assert (cosigner.key_type, f"{cosigner.key_id:08x}") == (0x04, "fdd2dbc7")
    # A real witness's native cosignature/v1 vkey.
    w = parse_vkey(remora)
    assert isinstance(w, CosignatureV1Verifier)
    assert f"{w.key_id:08x}" == "da77ade7"
    assert cosigner_from_vkey(remora).key_id == w.key_id


@pytest.mark.parametrize("case", FORMATS["vkeys_invalid"], ids=lambda c: c["why"])
def test_formats_invalid_vkeys(case: dict[str, str]) -> None:
    if case["why"] != "key ID does not match the key":
        with pytest.raises(MalformedError):
            parse_vkey(case["vkey"])
        return
    # An ECDSA (0x02) key: refused as unsupported before its ID is looked at. The ID is wrong
    # as well: an ECDSA key ID is SHA-256(SPKI)[:4] = c0d23d6a for this key, not 00000000.
    _, id_text, key = case["vkey"].split("+", 2)
    assert hashlib.sha256(b64(key)[1:]).hexdigest()[:8] == "c0d23d6a" != id_text
    with pytest.raises(UnsupportedKeyError):
        parse_vkey(case["vkey"])


def test_edge_06_formats_disputed_mldsa_vkey_rejected_for_its_key_id() -> None:
    (case,) = FORMATS["vkeys_disputed"]
    name, id_text, key = case["vkey"].split("+", 2)
    raw = b64(key)
    assert (raw[0], len(raw) - 1) == (0x06, 1312)
    assert f"{key_id(name, 0x06, raw[1:]):08x}" == "31236897" != id_text
    with pytest.raises(MalformedError, match="declares key ID 5893dc2c, its key gives 31236897"):
        parse_vkey(case["vkey"])
    # With the key ID the C2SP derivation gives, the same key parses.
    assert parse_vkey(f"{name}+31236897+{key}").key_type == 0x06


def test_edge_10_formats_timestamp_extraction() -> None:
    good, plain, garbage = FORMATS["timestamp_extraction"]
    raw = b64(good["sig"])
    assert len(raw) == 4 + 8 + 64
    ts, sig = split_timestamped(raw[4:])
    assert ts == good["want_timestamp"] == 1727964367
    assert len(sig) == 64
    assert timestamp_of(parse_signature_line(f"— w {good['sig']}")) == 1727964367
    # A 68-byte plain Ed25519 note signature is no cosignature/v1: a verifier refuses it.
    raw = b64(plain["sig"])
    assert len(raw) == 68
    w = CosignatureV1Verifier("w", bytes(32))
    assert not w.verify(b"any\n", raw[4:])
    assert plain["want_error"] and garbage["want_error"]
    with pytest.raises(MalformedError):
        parse_signature_line(f"— w {garbage['sig']}")


def test_edge_09_formats_cosignature_covers_extension_lines() -> None:
    # TestSigCoversExtensionLines, with keys of our own (the test generates its keys too).
    cosigner = CosignatureV1Signer("witness.example/w1", bytes(range(32)))
    body = b"example.com/log\n5\n" + b64encode(bytes(32)).encode() + b"\next\n"
    sig = cosigner.sign_at(body, 1700000000)
    assert cosigner.verifier().verify(body, sig)
    assert not cosigner.verifier().verify(body.replace(b"ext", b"exT"), sig)


# --- c2sp/spec_examples.json: tlog-cosignature and tlog-witness ------------------------------

C2SP = load("c2sp/spec_examples.json")
C2SP_COSIG = {c["id"]: c for c in C2SP["cosignature"]}
C2SP_WITNESS = {c["id"]: c for c in C2SP["witness"]}


def test_c2sp_cosignature_example_line() -> None:
    case = C2SP_COSIG["tlog-cosignature-example-v1.0.1"]
    want = case["want_cosignature"]
    _, sigs = parse_note(case["note"].encode())
    (cosig,) = [s for s in sigs if s.name == want["name"]]
    assert f"{cosig.key_id:08x}" == want["key_id"] == "8d66cf3f"
    assert timestamp_of(cosig) == want["timestamp"] == 1679315147
    assert 4 + len(cosig.sig) == want["sig_bytes"] == 76
    # No witness key is published: with no trusted key the note is unverified.
    with pytest.raises(UnverifiedNoteError):
        open_note(case["note"].encode(), [])


def test_c2sp_cosignature_v1_0_0_typo_line_is_malformed() -> None:
    case = C2SP_COSIG["tlog-cosignature-example-v1.0.0-typo"]
    line = case["signature_line_as_published"]
    assert "\\n" in line
    with pytest.raises(MalformedError):
        parse_signature_line(line)
    # Read as a real line break, the second half is not a signature line: the note is malformed.
    good = C2SP_COSIG["tlog-cosignature-example-v1.0.1"]["note"]
    broken = good.split("— witness")[0] + line.replace("\\n", "\n") + "\n"
    with pytest.raises(MalformedError):
        parse_note(broken.encode())


def test_c2sp_cosigned_message_example() -> None:
    case = C2SP_COSIG["cosigned-message-example"]
    message = cosignature_v1_message(case["checkpoint_body"].encode(), case["timestamp"])
    assert message == case["want_signed_message"].encode()


def test_c2sp_witness_request_example_parses() -> None:
    case = C2SP_WITNESS["add-checkpoint-request-example"]
    want = case["want_parse"]
    # The request splits at its FIRST blank line; the note inside at its last.
    _, proof, note = _split_request(case["request_body"], want["old_size"])
    assert len(proof) == want["proof_lines"] == 4
    assert all(len(parse_hash(p, "proof line")) == 32 for p in proof)
    text, sigs = parse_note(note.encode())
    cp = Checkpoint.parse(text)
    assert (cp.origin, cp.size) == (want["checkpoint_origin"], want["checkpoint_size"])
    assert len(sigs) == want["signature_lines"] == 2


def test_edge_10_c2sp_witness_response_timestamps_above_2_63() -> None:
    case = C2SP_WITNESS["add-checkpoint-response-example"]
    lines = case["response_body"].split("\n")[:-1]
    assert len(lines) == 3
    verdicts = []
    for line in lines:
        s = parse_signature_line(line)
        assert 4 + len(s.sig) == 76
        try:
            verdicts.append(split_timestamped(s.sig)[0] <= MAX_INT63)
        except MalformedError:
            verdicts.append(False)
    # Two of the three illustrative lines decode to timestamps above 2^63-1.
    assert verdicts == [False, False, True]
    with pytest.raises(MalformedError, match="larger than 2\\^63-1"):
        split_timestamped(parse_signature_line(lines[0]).sig)


def test_c2sp_cosignature_is_not_a_log_signature() -> None:
    # Type confusion: the same Ed25519 key as log key (0x01) and cosigner (0x04) has different
    # key IDs, and neither signature verifies as the other.
    seed = bytes(range(32))
    log, cosigner = Ed25519Signer("k", seed), CosignatureV1Signer("k", seed)
    assert log.key_id != cosigner.key_id
    body = C2SP_COSIG["cosigned-message-example"]["checkpoint_body"].encode()
    cosig = cosigner.sign_at(body, 1679315147)
    assert not Ed25519Verifier("k", log.public_key).verify(body, cosig[8:])
    assert not cosigner.verifier().verify(body, struct.pack(">Q", 0) + log.sign(body))
    with pytest.raises(VerificationError):
        open_note(body + b"\n" + Signature("k", log.key_id, cosig).line(), [log.verifier()])
