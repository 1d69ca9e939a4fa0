"""Interop vectors for RFC 6962 Merkle trees and proofs (tlog.merkle;
https://www.rfc-editor.org/rfc/rfc6962).

Sources (testdata/README.md; provenance and verdicts in each folder's README.md):

* transparency-dev-merkle/testdata/{inclusion,consistency} — the 98 + 98 proof files of
  transparency-dev/merkle, each with ``wantErr``;
* derived/merkle_go_tlog_verdicts.json — Go sumdb/tlog's verdict on each of those files;
* transparency-dev-merkle/testonly_reference.json — the reference 8-leaf tree: roots, node
  hashes, proofs and hasher vectors, reproduced by generation *and* verification;
* cloudflare-azul/argon2020 — recorded get-proof-by-hash and get-sth-consistency answers of a
  real CT log (961,984,011 entries).

The subtree directories of transparency-dev/merkle (MTC subtree proofs) are not applicable to
RFC 6962 logs and are not copied.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests import vectors
from tests.vectors import TESTDATA, b64
from tlog.errors import MalformedError, ProofError
from tlog.merkle import (
    EMPTY_ROOT,
    MemoryHashStore,
    consistency_proof,
    inclusion_proof,
    leaf_hash,
    node_hash,
    root,
    root_of_entries,
    stored_hash_index,
    tree_hash,
    verify_consistency,
    verify_inclusion,
    verify_witness_consistency,
)

MERKLE = TESTDATA / "transparency-dev-merkle"


def load(path: Path) -> Any:
    return vectors.load(path.relative_to(TESTDATA).as_posix())


def proof_of(v: dict[str, Any]) -> list[bytes]:
    return [b64(h) for h in v["proof"] or []]


def rel(path: Path) -> str:
    return path.relative_to(MERKLE).as_posix()


INCLUSION = sorted(MERKLE.glob("testdata/inclusion/**/*.json"))
CONSISTENCY = sorted(MERKLE.glob("testdata/consistency/**/*.json"))
GO = load(TESTDATA / "derived" / "merkle_go_tlog_verdicts.json")["data"]
GO_VERDICTS = {v["file"]: v for v in GO["verdicts"]}
DISAGREEMENTS = {d["file"]: d for d in GO["disagreements"]}


def expected_ok(path: Path, v: dict[str, Any]) -> bool:
    """The source's verdict, except where Go's sumdb/tlog disagrees: then Go's."""
    name = rel(path)
    if name in DISAGREEMENTS:
        return bool(GO_VERDICTS[name]["go_tlog_ok"])
    return not v["wantErr"]


def test_merkle_vector_counts() -> None:
    assert len(INCLUSION) == 98
    assert len(CONSISTENCY) == 98
    # Go's verdict exists for every file, and agrees with wantErr on all but one.
    assert sorted(GO_VERDICTS) == sorted(rel(p) for p in INCLUSION + CONSISTENCY)
    assert list(DISAGREEMENTS) == [
        "testdata/consistency/additional/sizes-are-equal-one-and-proof-is-empty.json"
    ]
    for path in INCLUSION + CONSISTENCY:
        v = load(path)
        go = GO_VERDICTS[rel(path)]
        assert go["want_ok"] == (not v["wantErr"])
        assert (go["go_tlog_ok"] == go["want_ok"]) == (rel(path) not in DISAGREEMENTS)


@pytest.mark.parametrize("path", INCLUSION, ids=rel)
def test_merkle_inclusion(path: Path) -> None:
    v = load(path)
    args = (v["leafIdx"], v["treeSize"], b64(v["leafHash"]), proof_of(v), b64(v["root"]))
    if expected_ok(path, v):
        verify_inclusion(*args)
    else:
        with pytest.raises((ProofError, MalformedError)):
            verify_inclusion(*args)


@pytest.mark.parametrize("path", CONSISTENCY, ids=rel)
def test_merkle_consistency(path: Path) -> None:
    v = load(path)
    args = (v["size1"], v["size2"], b64(v["root1"]), b64(v["root2"]), proof_of(v))
    if expected_ok(path, v):
        verify_consistency(*args)
    else:
        with pytest.raises((ProofError, MalformedError)):
            verify_consistency(*args)


def test_merkle_the_one_disagreement_follows_go() -> None:
    # transparency-dev/merkle only compares bytes, so two equal 12-byte "roots" pass for equal
    # sizes; Go's sumdb/tlog (and we) need 32-byte hashes and reject it.
    path = MERKLE / "testdata/consistency/additional/sizes-are-equal-one-and-proof-is-empty.json"
    v = load(path)
    assert not v["wantErr"]
    assert len(b64(v["root1"])) == 12
    assert GO_VERDICTS[rel(path)]["go_tlog_ok"] is False
    with pytest.raises(ProofError, match="32 bytes"):
        verify_consistency(v["size1"], v["size2"], b64(v["root1"]), b64(v["root2"]), [])


def test_edge_13_merkle_consistency_from_size_zero_is_an_error() -> None:
    # Every consistency check from size1 = 0 is wantErr: the RFC verifier refuses it, even with
    # an empty proof and "matching" roots. (The witness's own rule is separate.)
    zero = [p for p in CONSISTENCY if load(p)["size1"] == 0]
    assert len(zero) == 9
    for path in zero:
        v = load(path)
        assert v["wantErr"]
        with pytest.raises(ProofError, match="no consistency proof"):
            verify_consistency(0, v["size2"], b64(v["root1"]), b64(v["root2"]), proof_of(v))


def test_edge_13_witness_rule_for_old_size_zero_differs() -> None:
    # tlog-witness: old 0 is trust on first use with an empty proof; a proof is refused.
    v = load(MERKLE / "testdata/consistency/1/happy-path.json")
    size, new_root = v["size2"], b64(v["root2"])
    with pytest.raises(ProofError):
        verify_consistency(0, size, EMPTY_ROOT, new_root, [])
    verify_witness_consistency(0, None, size, new_root, [])
    with pytest.raises(ProofError):
        verify_witness_consistency(0, None, size, new_root, proof_of(v))


def test_edge_18_single_entry_empty_root_and_leaf() -> None:
    # Root = leaf = empty string with size 1: an RFC 9162 loop without length checks accepts it.
    v = load(MERKLE / "testdata/inclusion/single-entry/empty-root-and-leaf.json")
    assert v["wantErr"]
    assert v["root"] == v["leafHash"] == ""
    with pytest.raises(ProofError):
        verify_inclusion(v["leafIdx"], v["treeSize"], b"", [], b"")


# --- testonly_reference.json -----------------------------------------------------------------

REF = load(MERKLE / "testonly_reference.json")
LEAVES = [bytes.fromhex(h) for h in REF["leaf_inputs_hex"]]


def reference_store() -> MemoryHashStore:
    store = MemoryHashStore()
    store.extend(leaf_hash(e) for e in LEAVES)
    return store


def test_merkle_reference_roots_for_every_size() -> None:
    store = reference_store()
    roots = [bytes.fromhex(h) for h in REF["root_hashes_hex_by_size"]]
    assert len(roots) == 9
    assert roots[0] == EMPTY_ROOT
    for size, want in enumerate(roots):
        assert root_of_entries(LEAVES[:size]) == want
        assert root([leaf_hash(e) for e in LEAVES[:size]]) == want
        assert tree_hash(size, store) == want
        assert store.root(size) == want


def test_merkle_reference_node_hashes() -> None:
    store = reference_store()
    levels = [[bytes.fromhex(h) for h in level] for level in REF["node_hashes_hex_by_level"]]
    assert [len(level) for level in levels] == [8, 4, 2, 1]
    assert levels[0] == [leaf_hash(e) for e in LEAVES]
    for height, level in enumerate(levels):
        for n, want in enumerate(level):
            assert store.read_hashes([stored_hash_index(height, n)]) == [want]
            if height:
                below = levels[height - 1]
                assert node_hash(below[2 * n], below[2 * n + 1]) == want


@pytest.mark.parametrize(
    "case", REF["inclusion_proofs"], ids=lambda c: f"index{c['index']}-size{c['size']}"
)
def test_merkle_reference_inclusion_proof(case: dict[str, Any]) -> None:
    store = reference_store()
    index, size = case["index"], case["size"]
    want = [bytes.fromhex(h) for h in case["proof_hex"]]
    assert inclusion_proof(index, size, store) == want
    verify_inclusion(index, size, leaf_hash(LEAVES[index]), want, tree_hash(size, store))


@pytest.mark.parametrize(
    "case", REF["consistency_proofs"], ids=lambda c: f"{c['old_size']}to{c['size']}"
)
def test_merkle_reference_consistency_proof(case: dict[str, Any]) -> None:
    store = reference_store()
    old, size = case["old_size"], case["size"]
    want = [bytes.fromhex(h) for h in case["proof_hex"]]
    assert consistency_proof(old, size, store) == want
    verify_consistency(old, size, tree_hash(old, store), tree_hash(size, store), want)


def test_merkle_reference_hasher() -> None:
    cases = {c["desc"]: c for c in REF["hasher"]}
    assert len(cases) == 4
    assert EMPTY_ROOT.hex() == cases["empty tree root"]["want_hex"]
    empty_leaf = cases["leaf hash of empty leaf"]
    assert leaf_hash(bytes.fromhex(empty_leaf["leaf_hex"])).hex() == empty_leaf["want_hex"]
    l123456 = cases["leaf hash of 'L123456'"]
    assert leaf_hash(l123456["leaf_text"].encode()).hex() == l123456["want_hex"]
    (node,) = [c for d, c in cases.items() if d.startswith("node hash")]
    got = node_hash(node["left_text"].encode(), node["right_text"].encode())
    assert got.hex() == node["want_hex"]


# --- cloudflare-azul/argon2020 ---------------------------------------------------------------

ARGON = TESTDATA / "cloudflare-azul" / "argon2020"
ARGON_META = load(TESTDATA / "cloudflare-azul" / "static_ct_checkpoints.json")["argon2020"]
PROOF_BY_HASH = (
    "get-proof-by-hash-tree-size-961984011-hash-nCs3mfIydh9x4CKyQ-2Bu2xtmpxmFggA5MLymHwNQSlLg-3D"
)


def argon_sth() -> tuple[int, bytes]:
    sth = load(ARGON / "get-sth")
    return sth["tree_size"], b64(sth["sha256_root_hash"])


def test_argon2020_inclusion_of_entry_10000() -> None:
    size, sth_root = argon_sth()
    assert size == 961984011
    (entry,) = load(ARGON / "get-entries-start-10000-end-10000")["entries"]
    leaf = leaf_hash(b64(entry["leaf_input"]))
    # The hash in the request path (URL-escaped base64, '%' written '-') is this leaf hash.
    escaped = PROOF_BY_HASH.rsplit("-hash-", 1)[1].replace("-2B", "+").replace("-3D", "=")
    assert b64(escaped.replace("-2F", "/")) == leaf
    answer = load(ARGON / PROOF_BY_HASH)
    assert answer["leaf_index"] == ARGON_META["leaf_index"] == 10000
    path = [b64(h) for h in answer["audit_path"]]
    verify_inclusion(10000, size, leaf, path, sth_root)
    with pytest.raises(ProofError):
        verify_inclusion(10001, size, leaf, path, sth_root)


def test_argon2020_consistency() -> None:
    size, sth_root = argon_sth()
    old, old_root = ARGON_META["old_size"], b64(ARGON_META["old_root_b64"])
    answer = load(ARGON / f"get-sth-consistency-first-{old}-second-{size}")
    proof = [b64(h) for h in answer["consistency"]]
    verify_consistency(old, size, old_root, sth_root, proof)
    verify_witness_consistency(old, old_root, size, sth_root, proof)
    with pytest.raises(ProofError):
        verify_consistency(old, size, old_root, sth_root, proof[:-1])
