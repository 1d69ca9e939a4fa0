"""Interop vectors from witnesses, at the note and proof level (tlog.note, tlog.merkle; C2SP
tlog-witness, https://c2sp.org/tlog-witness).

Sources (testdata/README.md; provenance and verdicts in each folder's README.md):

* torchwood/litewitness_conversation.json — nine add-checkpoint requests to litewitness, with
  the HTTP status it answers;
* torchwood/litewitness_sumdb.json — a real sum.golang.org checkpoint submitted to a witness;
* transparency-dev-witness/witness_vectors.json — transparency-dev/witness update scenarios;
* transparency-dev-witness/omniwitness_logs.yaml — the keys of 14 real logs.

HTTP statuses belong to the witness server; these tests assert what decides them at the
library level: whether the checkpoint's note verifies, and whether the consistency proof does
(tlog-witness: 403 = no valid trusted signature, 422 = proof does not verify, 409 = the stored
size differs, a state decision that no proof changes).
"""

from __future__ import annotations

import base64
import hashlib

import pytest

from tests.vectors import TESTDATA, load
from tlog.checkpoint import SignedCheckpoint, open_checkpoint, origin_of
from tlog.cosignature import CosignatureV1Signer
from tlog.encoding import parse_decimal, parse_hash
from tlog.errors import (
    InvalidSignatureError,
    MalformedError,
    ProofError,
    UnverifiedNoteError,
    UsageError,
)
from tlog.keys import UnsupportedKeyError, cosigner_from_vkey, parse_signer_key, parse_vkey
from tlog.merkle import root, verify_witness_consistency
from tlog.note import Ed25519Verifier, Signature, open_note


def split_request(body: str) -> tuple[int, list[bytes], bytes]:
    """An add-checkpoint body: "old N", proof lines, a blank line, then the checkpoint note.

    The request splits at its first blank line (the note's own split is at its last)."""
    head, sep, note = body.partition("\n\n")
    assert sep
    old_line, *proof = head.split("\n")
    assert old_line.startswith("old ")
    old = parse_decimal(old_line.removeprefix("old "), "old size")
    return old, [parse_hash(p, "proof line") for p in proof], note.encode()


# --- torchwood/litewitness_conversation.json -------------------------------------------------

CONV = load("torchwood/litewitness_conversation.json")
LOG_KEY = bytes.fromhex(CONV["log_public_key_hex"])
LEAVES = [bytes.fromhex(h) for h in CONV["leaf_hashes_hex"]]


def conversation_log() -> Ed25519Verifier:
    return Ed25519Verifier(CONV["origin"], LOG_KEY)


def test_litewitness_log_key() -> None:
    v = conversation_log()
    assert CONV["origin"] == "sigsum.org/v1/tree/" + hashlib.sha256(LOG_KEY).hexdigest()
    assert f"{v.key_id:08x}" == "5202289b"
    theirs = [200, 403, 403, 422, 422, 200, 409, 200, 409]  # litewitness's statuses
    assert [s["want_status"] for s in CONV["steps"]] == theirs


def open_step(note: bytes) -> SignedCheckpoint:
    cp = open_checkpoint(note, [conversation_log()])
    # Leaves are raw hashes used as RFC 6962 leaf hashes: every root is recomputable.
    assert cp.checkpoint.root == root(LEAVES[: cp.checkpoint.size])
    return cp


@pytest.mark.parametrize("step", [1, 6, 8], ids=lambda s: f"step{s}-200")
def test_litewitness_200_note_verifies_and_proof_is_consistent(step: int) -> None:
    old, proof, note = split_request(CONV["steps"][step - 1]["request_body"])
    cp = open_step(note).checkpoint
    old_root = root(LEAVES[:old]) if old else None
    verify_witness_consistency(old, old_root, cp.size, cp.root, proof)


def test_litewitness_step2_403_tampered_log_signature() -> None:
    old, proof, note = split_request(CONV["steps"][1]["request_body"])
    # The last base64 characters were changed to "6gx=": that leaves non-zero trailing bits,
    # which our canonical base64 refuses, so the note is malformed before any key is tried
    # (litewitness decodes leniently and answers 403; our witness would answer 400).
    with pytest.raises(MalformedError, match="non-canonical base64"):
        open_checkpoint(note, [conversation_log()])
    # Decoded leniently as Go does, the bytes are not a valid signature by the log key either.
    split = note.rindex(b"\n\n")
    text, line = note[: split + 1], note[split + 2 :].decode().removesuffix("\n")
    assert line.endswith("6gx=")
    # Python's validating decoder, like Go's StdEncoding, ignores the trailing bits.
    lenient = base64.b64decode(line.rsplit(" ", 1)[1], validate=True)
    assert lenient[:4] == conversation_log().key_id.to_bytes(4, "big")
    assert not conversation_log().verify(text, lenient[4:])
    signed = text + b"\n" + Signature(CONV["origin"], conversation_log().key_id, lenient[4:]).line()
    with pytest.raises(InvalidSignatureError):
        open_checkpoint(signed, [conversation_log()])
    # The proof itself was fine: only the signature decides this step.
    verify_witness_consistency(old, root(LEAVES[:old]), 3, root(LEAVES[:3]), proof)


def test_litewitness_step3_403_unknown_origin() -> None:
    # tlog-witness answers 404 for an unknown origin; litewitness 403. At the note level: the
    # origin is not the log's, and the log's key does not know the line.
    _, _, note = split_request(CONV["steps"][2]["request_body"])
    assert origin_of(note) != CONV["origin"]
    assert origin_of(note)[:-1] == CONV["origin"][:-1]
    with pytest.raises(UnverifiedNoteError):
        open_checkpoint(note, [conversation_log()])


@pytest.mark.parametrize("step", [4, 5], ids=lambda s: f"step{s}-422")
def test_litewitness_422_proof_does_not_verify(step: int) -> None:
    old, proof, note = split_request(CONV["steps"][step - 1]["request_body"])
    cp = open_step(note).checkpoint
    with pytest.raises(ProofError):
        verify_witness_consistency(old, root(LEAVES[:old]), cp.size, cp.root, proof)


@pytest.mark.parametrize(("step", "stored"), [(7, 3), (9, 5)], ids=["step7-409", "step9-409"])
def test_litewitness_409_is_decided_by_state_not_by_the_proof(step: int, stored: int) -> None:
    # The note verifies and the proof (if any) is consistent: 409 only because the witness
    # already stores a different size ("3\n", then "5\n").
    assert CONV["steps"][step - 1]["asserts"] == f'body == "{stored}\\n"'
    old, proof, note = split_request(CONV["steps"][step - 1]["request_body"])
    assert old != stored
    cp = open_step(note).checkpoint
    old_root = root(LEAVES[:old]) if old else None
    verify_witness_consistency(old, old_root, cp.size, cp.root, proof)


def test_litewitness_sumdb_checkpoint() -> None:
    case = load("torchwood/litewitness_sumdb.json")
    old, proof, note = split_request(case["request_body"])
    assert origin_of(note) == case["log_origin"] == "go.sum database tree"
    cp = open_checkpoint(note, [parse_vkey(case["log_vkey"])]).checkpoint
    assert cp.size == 35225469
    assert (TESTDATA / "sum.golang.org" / "checkpoint-35225469.txt").read_bytes() == note
    verify_witness_consistency(old, None, cp.size, cp.root, proof)


# --- transparency-dev-witness/witness_vectors.json -------------------------------------------

TDW = load("transparency-dev-witness/witness_vectors.json")
ROOT5 = bytes.fromhex(TDW["root_size5_hex"])
PROOF_5_8 = [bytes.fromhex(h) for h in TDW["consistency_proof_5_to_8_hex"]]


def monkeys(name: str) -> SignedCheckpoint:
    return open_checkpoint(
        TDW["checkpoints"][name].encode(), [parse_vkey(TDW["keys"]["monkeys_vkey"])]
    )


def test_witness_keys() -> None:
    for k in ("monkeys", "bananas", "witness"):
        assert parse_signer_key(TDW["keys"][f"{k}_skey"]).vkey() == TDW["keys"][f"{k}_vkey"]


def test_witness_checkpoints_and_proof() -> None:
    init, nxt = monkeys("mInit").checkpoint, monkeys("mNext").checkpoint
    assert (init.size, init.root) == (5, ROOT5)
    assert nxt.size == 8
    verify_witness_consistency(5, ROOT5, 8, nxt.root, PROOF_5_8)
    with pytest.raises(UnverifiedNoteError):
        open_checkpoint(
            TDW["checkpoints"]["mNext"].encode(), [parse_vkey(TDW["keys"]["bananas_vkey"])]
        )


def test_witness_update_cases() -> None:
    cases = {c["desc"]: c for c in TDW["update_cases"]}
    assert len(cases) == 9
    root8 = monkeys("mNext").checkpoint.root
    # 200: the happy path, and resubmitting the stored checkpoint.
    verify_witness_consistency(5, ROOT5, 8, root8, PROOF_5_8)
    verify_witness_consistency(5, ROOT5, 5, ROOT5, [])
    # 422: from size 0 a proof must be empty (4 real hashes, or one 1-byte "hash").
    with pytest.raises(ProofError):
        verify_witness_consistency(0, None, 5, ROOT5, PROOF_5_8)
    with pytest.raises(ProofError):
        verify_witness_consistency(0, None, 5, ROOT5, [b"\x02"])
    # 422 on main (409 in tlog-witness v1.0.0): same size, other root.
    changed = bytes.fromhex("ff" * 7 + "fe" + TDW["root_size5_hex"][16:])
    assert "fffffffffffffffef412d2a5" in cases["resubmit same size with changed root"]["new"]
    with pytest.raises(ProofError):
        verify_witness_consistency(5, ROOT5, 5, changed, [])
    # 422: an empty proof cannot take size 4 to 5, whatever the stored root.
    for root4 in (bytes(32), ROOT5):
        with pytest.raises(ProofError):
            verify_witness_consistency(4, root4, 5, ROOT5, [])
    # 400: old size larger than the checkpoint's (the caller's precondition).
    with pytest.raises(UsageError):
        verify_witness_consistency(8, root8, 5, ROOT5, [])
    # 422 (or 400 when the body parser refuses them): 2-byte "hashes".
    garbage = [bytes.fromhex(h) for h in ("aaaa", "bbbb", "cccc", "dddd")]
    with pytest.raises(ProofError):
        verify_witness_consistency(5, ROOT5, 8, root8, garbage)
    with pytest.raises(MalformedError):
        parse_hash(base64.b64encode(garbage[0]).decode(), "proof line")
    # 409 ("oldSize doesn't match current state") is a state decision: nothing to verify.
    assert cases["oldSize doesn't match current state"]["want"].startswith("ErrCheckpointStale")


def test_witness_cosigns_with_its_0x01_key_as_cosignature_v1() -> None:
    witness = parse_signer_key(TDW["keys"]["witness_skey"])
    cosigner = CosignatureV1Signer(witness.name, witness.secret)
    mnext = monkeys("mNext")
    line = Signature(cosigner.name, cosigner.key_id, cosigner.sign_at(mnext.note.text, 1234))
    data = TDW["checkpoints"]["mNext"].encode() + line.line()
    cosigned = open_note(data, [cosigner_from_vkey(TDW["keys"]["witness_vkey"])])
    assert [s.name for s in cosigned.sigs] == ["witness"]
    # The published 0x01 vkey itself does not know the line (its key ID is the 0x01 one).
    with pytest.raises(UnverifiedNoteError):
        open_note(data, [parse_vkey(TDW["keys"]["witness_vkey"])])


# --- transparency-dev-witness/omniwitness_logs.yaml ------------------------------------------


def omniwitness_logs() -> list[dict[str, str]]:
    """The "Logs:" list of the YAML file, read line by line (flat "- Key: value" items)."""
    text = (TESTDATA / "transparency-dev-witness" / "omniwitness_logs.yaml").read_text("utf-8")
    logs: list[dict[str, str]] = []
    for line in text.split("\n")[1:]:
        if not line.strip():
            continue
        item = line.strip()
        if item.startswith("- "):
            logs.append({})
            item = item[2:]
        key, _, value = item.partition(": ")
        logs[-1][key] = value
    return logs


def test_omniwitness_log_keys() -> None:
    logs = omniwitness_logs()
    assert len(logs) == 14
    sumdb = (TESTDATA / "sum.golang.org" / "vkey.txt").read_text("utf-8").removesuffix("\n")
    supported = 0
    for log in logs:
        if log.get("PublicKeyType") == "ecdsa":
            with pytest.raises(UnsupportedKeyError):
                parse_vkey(log["PublicKey"])
            continue
        v = parse_vkey(log["PublicKey"])
        assert v.key_type == 0x01
        supported += 1
        if log["Origin"] == "go.sum database tree":
            assert log["PublicKey"] == sumdb
        if log["Origin"].startswith("sigsum.org/v1/tree/"):
            assert log["Origin"].endswith(hashlib.sha256(v.public_key).hexdigest())
            assert v.name == log["Origin"]
    assert supported == 9
