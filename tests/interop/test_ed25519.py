"""Interop vectors for Ed25519 verification edge cases (tlog.note.ed25519_verify).

Source: cctv/ed25519vectors.json (C2SP/CCTV, 914 vectors: low-order and non-canonical points), with
derived/cctv_ed25519_go_verdicts.json (testdata/cctv/README.md, testdata/derived/README.md), Go
crypto/ed25519's verdict on each. A witness and a verifier must agree on which notes verify, so our
verdict must be exactly Go's.
"""

from __future__ import annotations

import nacl.signing
import pytest

from tests.vectors import load
from tlog.note import Ed25519Verifier, ed25519_verify

VECTORS = load("cctv/ed25519vectors.json")
GO = load("derived/cctv_ed25519_go_verdicts.json")["data"]
ACCEPTED = set(GO["accepted_numbers"])


def test_cctv_vector_and_verdict_counts() -> None:
    assert len(VECTORS) == 914
    assert [v["number"] for v in VECTORS] == list(range(914))
    assert len(ACCEPTED) == 208
    assert sorted(ACCEPTED | set(GO["rejected_numbers"])) == list(range(914))
    assert not ACCEPTED & set(GO["rejected_numbers"])


def test_cctv_go_rule_matches_the_flags() -> None:
    # The rule the Go verdicts follow, stated by the derived file, checked against the flags.
    for v in VECTORS:
        flags = set(v["flags"] or ())
        go_rejects = bool(flags & {"low_order_residue", "non_canonical_R"})
        assert (v["number"] not in ACCEPTED) == go_rejects


@pytest.mark.parametrize("start", range(0, 914, 100), ids=lambda s: f"vectors{s}-{s + 99}")
def test_cctv_ed25519_verify_matches_go(start: int) -> None:
    disagree = []
    for v in VECTORS[start : start + 100]:
        key = nacl.signing.VerifyKey(bytes.fromhex(v["key"]))
        ok = ed25519_verify(key, v["msg"].encode(), bytes.fromhex(v["sig"]))
        if ok != (v["number"] in ACCEPTED):
            disagree.append(v["number"])
    assert disagree == []


def test_cctv_note_verifier_follows_the_same_verdicts() -> None:
    # The type-0x01 note verifier (what open_note calls) gives the same verdicts. The messages
    # lack a final newline, so they cannot be note texts themselves: call verify directly.
    disagree = []
    for v in VECTORS:
        verifier = Ed25519Verifier("cctv", bytes.fromhex(v["key"]))
        ok = verifier.verify(v["msg"].encode(), bytes.fromhex(v["sig"]))
        if ok != (v["number"] in ACCEPTED):
            disagree.append(v["number"])
    assert disagree == []
