"""Interop vectors for checkpoints (tlog.checkpoint over tlog.note; C2SP tlog-checkpoint,
https://c2sp.org/tlog-checkpoint).

Sources (testdata/README.md; provenance and verdicts in each folder's README.md):

* sum.golang.org — three real Go checksum database checkpoints and the log's key;
* transparency-dev-formats/checkpoint_parse_vectors.json and checkpoint_signature_policy.json;
* c2sp/spec_examples.json — the tlog-checkpoint example;
* sigstore — Rekor v2 (Ed25519 checkpoints, tlog-tiles) and Rekor v1 (ECDSA) bundles with
  their inclusion proofs, and the rekor-tiles test log.
"""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any
from urllib.parse import urlparse

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.vectors import TESTDATA, b64, load
from tlog.checkpoint import Checkpoint, SignedCheckpoint, open_checkpoint, origin_of
from tlog.errors import (
    InvalidSignatureError,
    MalformedError,
    TlogError,
    UnverifiedNoteError,
    UsageError,
)
from tlog.keys import UnsupportedKeyError, parse_signer_key, parse_vkey
from tlog.merkle import leaf_hash, verify_inclusion
from tlog.note import Ed25519Signer, Ed25519Verifier, Verifier, open_note, parse_note, sign_note

# --- sum.golang.org --------------------------------------------------------------------------

SUMDB = TESTDATA / "sum.golang.org"
SUMDB_VKEY = (SUMDB / "vkey.txt").read_text(encoding="utf-8").removesuffix("\n")
SUMDB_CHECKPOINTS = sorted(p.name for p in SUMDB.glob("checkpoint-*.txt"))
GO_SUM_ORIGIN = "go.sum database tree"


def test_sumdb_has_three_checkpoints() -> None:
    assert SUMDB_CHECKPOINTS == [
        "checkpoint-30055305.txt",
        "checkpoint-35225469.txt",
        "checkpoint-6476701.txt",
    ]
    v = parse_vkey(SUMDB_VKEY)
    assert (v.name, f"{v.key_id:08x}") == ("sum.golang.org", "033de0ae")


@pytest.mark.parametrize("name", SUMDB_CHECKPOINTS)
def test_sumdb_checkpoint_verifies(name: str) -> None:
    data = (SUMDB / name).read_bytes()
    # The origin (which selects the key) is not the key name: that must work.
    assert origin_of(data) == GO_SUM_ORIGIN
    cp = open_checkpoint(data, [parse_vkey(SUMDB_VKEY)])
    assert cp.checkpoint.origin == GO_SUM_ORIGIN
    assert cp.checkpoint.size == int(name.removeprefix("checkpoint-").removesuffix(".txt"))
    assert cp.checkpoint.extensions == ()
    assert [s.name for s in cp.note.sigs] == ["sum.golang.org"]
    assert cp.checkpoint.format() == cp.note.text


@pytest.mark.parametrize("name", SUMDB_CHECKPOINTS)
def test_sumdb_checkpoint_every_single_byte_change_of_the_body_rejected(name: str) -> None:
    data = (SUMDB / name).read_bytes()
    verifiers = [parse_vkey(SUMDB_VKEY)]
    text, _ = parse_note(data)
    for i, b in enumerate(text):
        changed = b ^ 1
        mutated = data[:i] + bytes([changed]) + data[i + 1 :]
        if b != 0x0A and 0x20 <= changed < 0x7F:
            # Still a well-formed note: the known key's signature fails.
            with pytest.raises(InvalidSignatureError):
                open_checkpoint(mutated, verifiers)
        else:
            with pytest.raises(MalformedError):
                open_checkpoint(mutated, verifiers)
    # The example the interop README gives: size + 1.
    cp = Checkpoint.parse(text)
    bumped = Checkpoint(cp.origin, cp.size + 1, cp.root).format() + data[len(text) :]
    with pytest.raises(InvalidSignatureError):
        open_checkpoint(bumped, verifiers)


@settings(max_examples=150, deadline=None)
@given(
    name=st.sampled_from(SUMDB_CHECKPOINTS),
    where=st.integers(0, 10_000),
    byte=st.integers(0, 255),
)
def test_sumdb_checkpoint_any_byte_replacement_in_the_body_rejected(
    name: str, where: int, byte: int
) -> None:
    data = (SUMDB / name).read_bytes()
    text, _ = parse_note(data)
    i = where % len(text)
    if data[i] == byte:
        byte ^= 0x80
    mutated = data[:i] + bytes([byte]) + data[i + 1 :]
    with pytest.raises(TlogError):
        open_checkpoint(mutated, [parse_vkey(SUMDB_VKEY)])


# --- transparency-dev-formats/checkpoint_parse_vectors.json ----------------------------------

PARSE = load("transparency-dev-formats/checkpoint_parse_vectors.json")


@pytest.mark.parametrize("case", PARSE["valid"], ids=lambda c: repr(c["body"][:24]))
def test_formats_valid_checkpoint_bodies(case: dict[str, Any]) -> None:
    body = case["body"].encode()
    if case.get("lenient_only"):
        # formats accepts root hashes of any length (and empty "extension lines"); an RFC 6962
        # SHA-256 checkpoint needs exactly 32 bytes: our strict parser rejects these.
        with pytest.raises(MalformedError):
            Checkpoint.parse(body)
        return
    cp = Checkpoint.parse(body)  # pragma: no cover - every published valid case is lenient
    assert cp.origin == case["origin"]
    assert cp.size == case["size"]


def test_formats_valid_checkpoint_bodies_are_all_lenient_only() -> None:
    assert len(PARSE["valid"]) == 6
    assert all(c["lenient_only"] for c in PARSE["valid"])
    # What makes them lenient: none has a 32-byte root.
    for c in PARSE["valid"]:
        assert len(b64(c["body"].split("\n")[2])) != 32


@pytest.mark.parametrize("case", PARSE["invalid"], ids=lambda c: c["why"])
def test_formats_invalid_checkpoint_bodies(case: dict[str, str]) -> None:
    with pytest.raises(MalformedError):
        Checkpoint.parse(case["body"].encode())


def test_edge_28_formats_lenient_bodies_with_a_32_byte_root_are_still_checked() -> None:
    # The same shapes with a real 32-byte root: extension lines parse, empty ones do not.
    root = "47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU="
    cp = Checkpoint.parse(f"Moon Log\n4027504\n{root}\n6086d1a9\nWaxing gibbous\n".encode())
    assert cp.extensions == ("6086d1a9", "Waxing gibbous")
    with pytest.raises(MalformedError, match="extension line 4 is empty"):
        Checkpoint.parse(f"Log\n9944\n{root}\n\n\n\n".encode())


# --- transparency-dev-formats/checkpoint_signature_policy.json -------------------------------

POLICY = load("transparency-dev-formats/checkpoint_signature_policy.json")
POLICY_KEY_FIELDS = {
    "Log": "log",
    "Known": "known1",
    "KnownAgain": "known2",
    "Unknown": "unknown",
}


def policy_signer(name: str) -> Ed25519Signer:
    signer = parse_signer_key(POLICY["keys"][POLICY_KEY_FIELDS[name] + "SK"]).signer()
    assert isinstance(signer, Ed25519Signer)
    assert signer.name == name
    return signer


def policy_verifier(name: str) -> Verifier:
    return parse_vkey(POLICY["keys"][POLICY_KEY_FIELDS[name] + "VK"])


def formats_parse_checkpoint(note: bytes, origin: str) -> SignedCheckpoint:
    """formats' ParseCheckpoint(note, origin, logVerifier, Known, KnownAgain) in our terms:
    every known signature verifies, the text is a checkpoint of ``origin``, and the log's own
    key is among the verified ones."""
    log = policy_verifier("Log")
    cp = open_checkpoint(note, [log, policy_verifier("Known"), policy_verifier("KnownAgain")])
    if cp.checkpoint.origin != origin:
        raise MalformedError(f"checkpoint origin {cp.checkpoint.origin!r} is not {origin!r}")
    if (log.name, log.key_id) not in {(s.name, s.key_id) for s in cp.note.sigs}:
        raise UnverifiedNoteError("the log's signature is missing")
    return cp


def test_formats_policy_keys() -> None:
    for name in POLICY_KEY_FIELDS:
        vkey = POLICY["keys"][POLICY_KEY_FIELDS[name] + "VK"]
        assert parse_signer_key(POLICY["keys"][POLICY_KEY_FIELDS[name] + "SK"]).vkey() == vkey
    assert len(POLICY["cases"]) == 11


# The published body has a 6-byte root ("abcdef"), which formats accepts; for the signature
# policy the same cases are run on that body with a 32-byte root.
STRICT_BODY = POLICY["body"].replace("YWJjZGVm", base64.b64encode(bytes(range(32))).decode())


@pytest.mark.parametrize("case", POLICY["cases"], ids=lambda c: "+".join(c["signers"]) or "none")
def test_formats_signature_policy(case: dict[str, Any]) -> None:
    origin = case.get("expected_origin", POLICY["origin"])
    signers = [policy_signer(n) for n in case["signers"]]
    for body in (POLICY["body"], STRICT_BODY):
        text = case.get("body_override", body).encode()
        if not signers:
            with pytest.raises(UsageError):
                sign_note(text, signers)
            # Without any signature there is no note: the bare text is malformed.
            with pytest.raises(MalformedError):
                formats_parse_checkpoint(text, origin)
            continue
        note = sign_note(text, signers)
        if "want_verified" in case:
            known = [policy_verifier(n) for n in ("Log", "Known", "KnownAgain")]
            assert len(open_note(note, known).sigs) == case["want_verified"]
        if body == POLICY["body"] and "body_override" not in case:
            # Our strict checkpoint parser refuses the published 6-byte root: every case is
            # rejected there, whatever its signatures.
            with pytest.raises(MalformedError, match="root hash is 6 bytes"):
                formats_parse_checkpoint(note, origin)
            continue
        if case["want_ok"]:
            cp = formats_parse_checkpoint(note, origin)
            assert cp.checkpoint.size == 42
            assert len(cp.note.sigs) == case["want_verified"]
        else:
            with pytest.raises((MalformedError, UnverifiedNoteError)):
                formats_parse_checkpoint(note, origin)


def test_formats_extra_signature_lines_on_the_sumdb_checkpoint() -> None:
    extra = POLICY["extra_signature_lines_for_sumdb_checkpoint"]
    data = (SUMDB / "checkpoint-6476701.txt").read_bytes()
    data += "".join(line + "\n" for line in extra["lines"]).encode()
    verifiers = [parse_vkey(SUMDB_VKEY), *(parse_vkey(v) for v in extra["vkeys"])]
    cp = open_checkpoint(data, verifiers)
    assert [s.name for s in cp.note.sigs] == ["sum.golang.org", "monkeys", "bananas", "witness"]
    # random1/random2 carry the witness's signature bytes under other names: unknown keys.
    assert [s.name for s in cp.note.unverified] == ["random1", "random2"]


# --- c2sp/spec_examples.json: tlog-checkpoint ------------------------------------------------


def test_c2sp_checkpoint_example_parses_but_does_not_verify_under_sumdb_key() -> None:
    (case,) = load("c2sp/spec_examples.json")["checkpoint"]
    data = case["note"].encode()
    text, sigs = parse_note(data)
    cp = Checkpoint.parse(text)
    assert (cp.origin, cp.size, cp.root) == (
        case["want_origin"],
        case["want_size"],
        b64(case["want_root_hash_b64"]),
    )
    sumdb = parse_vkey(SUMDB_VKEY)
    # The line carries sum.golang.org's key ID under another name: an unknown key.
    assert [(s.name, s.key_id) for s in sigs] == [(case["want_origin"], sumdb.key_id)]
    with pytest.raises(UnverifiedNoteError):
        open_checkpoint(data, [sumdb])
    # And the bytes are no signature by that key over this text either (copied, illustrative).
    assert not sumdb.verify(text, sigs[0].sig)
    renamed = Ed25519Verifier(case["want_origin"], sumdb.public_key)
    assert renamed.key_id != sumdb.key_id


# --- sigstore/rekor_tiles_vectors.json -------------------------------------------------------

REKOR_TILES = load("sigstore/rekor_tiles_vectors.json")


def pem_body(pem: str) -> bytes:
    lines = [line for line in pem.strip().split("\n") if not line.startswith("-----")]
    return b64("".join(lines))


def test_rekor_tiles_keys() -> None:
    v = parse_vkey(REKOR_TILES["log_vkey"])
    spki = pem_body(REKOR_TILES["log_public_key_spki_pem"])
    assert v.public_key == spki[-32:]
    # Rekor v2's log ID is the full SHA-256 of the C2SP key-ID preimage.
    log_id = hashlib.sha256(v.name.encode() + b"\n\x01" + v.public_key).digest()
    assert log_id == b64(REKOR_TILES["log_id_b64"])
    assert log_id[:4] == v.key_id.to_bytes(4, "big")
    witness = REKOR_TILES["witness_test_config"]
    assert parse_signer_key(witness["witness_skey"]).vkey() == witness["witness_vkey"]


@pytest.mark.parametrize("case", REKOR_TILES["checkpoints"], ids=lambda c: c["id"])
def test_rekor_tiles_checkpoints(case: dict[str, Any]) -> None:
    v = parse_vkey(REKOR_TILES["log_vkey"])
    data = case["note"].encode()
    if not case["want_ok"]:
        with pytest.raises(UnverifiedNoteError):
            open_checkpoint(data, [v])
        return
    cp = open_checkpoint(data, [v])
    assert cp.checkpoint.origin == "rekor-local"
    # The PKCS#8 test key's seed (its last 32 bytes) signs the same bytes again.
    signer = Ed25519Signer("rekor-local", pem_body(REKOR_TILES["log_private_key_pkcs8_pem"])[-32:])
    assert sign_note(cp.note.text, [signer]) == data


# --- sigstore/sigstore-python: Rekor bundles --------------------------------------------------

SIGSTORE = TESTDATA / "sigstore" / "sigstore-python"
BUNDLES = [
    "staging-rekor-v2.txt.sigstore.json",
    "a.dsse.staging-rekor-v2.txt.sigstore.json",
    "bundle.txt.sigstore",
    "bundle_v3.txt.sigstore",
    "bundle_v3_github.whl.sigstore",
    "bundle_v3_no_signed_time.txt.sigstore.json",
]


def trusted_logs() -> dict[str, dict[str, Any]]:
    logs = {}
    for name in ("trusted_root.production.json", "trusted_root.staging.json"):
        for log in json.loads((SIGSTORE / name).read_text(encoding="utf-8"))["tlogs"]:
            logs[log["logId"]["keyId"]] = log
    return logs


@pytest.mark.parametrize("bundle", BUNDLES)
def test_sigstore_bundle_inclusion_proof_and_checkpoint(bundle: str) -> None:
    logs = trusted_logs()
    (entry,) = json.loads((SIGSTORE / bundle).read_text(encoding="utf-8"))["verificationMaterial"][
        "tlogEntries"
    ]
    proof = entry["inclusionProof"]
    size, root = int(proof["treeSize"]), b64(proof["rootHash"])
    # The proof is at the shard's index (inclusionProof.logIndex), not the global logIndex.
    verify_inclusion(
        int(proof["logIndex"]),
        size,
        leaf_hash(b64(entry["canonicalizedBody"])),
        [b64(h) for h in proof["hashes"]],
        root,
    )
    data = proof["checkpoint"]["envelope"].encode()
    text, sigs = parse_note(data)
    cp = Checkpoint.parse(text)
    assert (cp.size, cp.root) == (size, root)
    log = logs[entry["logId"]["keyId"]]
    spki = b64(log["publicKey"]["rawBytes"])
    host = urlparse(log["baseUrl"]).hostname
    assert host is not None
    if log["publicKey"]["keyDetails"] == "PKIX_ED25519":
        # Rekor v2: an Ed25519 note named after the host; log ID = SHA-256 of the key-ID input.
        v = Ed25519Verifier(host, spki[-32:])
        signed = open_checkpoint(data, [v])
        assert signed.checkpoint.origin == host
        assert hashlib.sha256(host.encode() + b"\n\x01" + v.public_key).digest() == b64(
            entry["logId"]["keyId"]
        )
        # Witness cosignatures from witnesses we were not given are unknown, not errors.
        assert len(signed.note.unverified) == len(sigs) - 1
        return
    # Rekor v1: ECDSA, unsupported here. The line's key ID is SHA-256(SPKI)[:4] (= the log ID's
    # first bytes); with no supported key the checkpoint is unverified.
    assert log["publicKey"]["keyDetails"] == "PKIX_ECDSA_P256_SHA_256"
    assert cp.origin.startswith(f"{host} - ")
    assert [s.name for s in sigs] == [host]
    assert sigs[0].key_id.to_bytes(4, "big") == hashlib.sha256(spki).digest()[:4]
    assert hashlib.sha256(spki).digest() == b64(entry["logId"]["keyId"])
    with pytest.raises(UnverifiedNoteError):
        open_checkpoint(data, [])


def test_sigstore_rekor_v1_checkpoint_with_an_extension_line() -> None:
    (entry,) = json.loads((SIGSTORE / "bundle.txt.sigstore").read_text(encoding="utf-8"))[
        "verificationMaterial"
    ]["tlogEntries"]
    text, _ = parse_note(entry["inclusionProof"]["checkpoint"]["envelope"].encode())
    assert Checkpoint.parse(text).extensions == ("Timestamp: 1682468469199678948",)


def test_sigstore_trusted_root_ecdsa_keys_are_unsupported_as_vkeys() -> None:
    # The same ECDSA keys written as signed-note vkeys (type 0x02, ID = SHA-256(SPKI)[:4]).
    for log in trusted_logs().values():
        if log["publicKey"]["keyDetails"] != "PKIX_ECDSA_P256_SHA_256":
            continue
        spki = b64(log["publicKey"]["rawBytes"])
        host = urlparse(log["baseUrl"]).hostname
        kid = hashlib.sha256(spki).hexdigest()[:8]
        key = base64.b64encode(bytes([0x02]) + spki).decode()
        vkey = f"{host}+{kid}+{key}"
        with pytest.raises(UnsupportedKeyError):
            parse_vkey(vkey)
