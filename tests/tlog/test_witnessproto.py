"""Tests for tlog.witnessproto: the add-checkpoint request and its decision rules, the 409 size
body, the monitoring path (C2SP tlog-witness, https://c2sp.org/tlog-witness).

tlog is pure (no I/O, no server), so the rules about a running witness are tested as the
decisions and guarantees tlog provides; the rest belongs to the witness server's own tests
(tests/witness/):

* the HTTP statuses are the server's mapping of the exceptions tested here (MalformedError →
  400, UnverifiedNoteError/InvalidSignatureError → 403, unknown origin → 404, ConflictError →
  409, ProofError → 422);
* only the sequential model of the compare-and-swap is tested here; the concurrent version (two
  racing requests, the stalled-request rollback race) belongs to the witness server tests;
* durability after a kill is covered by the witness server tests; here only what tlog
  guarantees: the decision is a pure function of its inputs, and a cosignature depends only on
  the request's note text;
* the 404 for non-canonical monitoring paths is the server's; here the path itself.

The request's integers and hashes are strict (no spelling Python's ``int()`` accepts but the
spec does not; exactly 32-byte hashes, RFC 6962 https://www.rfc-editor.org/rfc/rfc6962), and a
request holds at most 63 proof lines. Test names keep the case numbers of
tests/tlog/__init__.py.
"""

from __future__ import annotations

import base64
import copy
import functools
import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.tlog.helpers import (
    EMPTY_LEAF_B64,
    EMPTY_ROOT_B64,
    SUMDB_NOTE,
    SUMDB_VKEY,
    T0,
    TinyLog,
    as_int,
    as_str,
    assert_request_refused,
    b64d,
    decide,
    fixed_clock,
    merkle_vector,
    seed_of,
    tiny_log,
    verify_consistency_vector,
    verify_inclusion_vector,
)
from tlog.checkpoint import Checkpoint, open_checkpoint, origin_of
from tlog.cosignature import CosignatureV1Signer, split_timestamped
from tlog.encoding import MAX_INT63, b64encode
from tlog.errors import InvalidSignatureError, MalformedError, ProofError, UnverifiedNoteError
from tlog.keys import parse_vkey
from tlog.merkle import (
    EMPTY_ROOT,
    consistency_proof_size,
    leaf_hash,
    node_hash,
    verify_consistency,
    verify_inclusion,
)
from tlog.note import (
    Ed25519Signer,
    Signature,
    add_signatures,
    format_note,
    open_note,
    parse_note,
    sign_note,
)
from tlog.witnessproto import (
    MAX_PROOF_LINES,
    SIZE_CONTENT_TYPE,
    AddCheckpointRequest,
    ConflictError,
    check_request,
    check_update,
    format_size_body,
    monitoring_path,
    origin_hash,
    parse_size_body,
)


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
    # (C2SP tlog-witness "409 Conflict" example body).
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
    # A size-0 checkpoint must carry 47DEQpj8…uFU= (tlog-checkpoint, https://c2sp.org/tlog-checkpoint).
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
        verify_consistency_vector(vector)


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


# Edge case 17: every spelling Python's int() accepts but the specs do not.
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
    # Checkpoint sizes (tlog-checkpoint: no leading zeros; here also at most 2^63-1).
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
        "AA==",  # edge case 18
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
            verify_inclusion_vector(vector)
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
    # A valid 64-hash consistency proof (tlog-witness's 63-line limit is one short of it): 3 →
    # 2^63-1 in a tree of identical leaves.
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


def test_edge_30_monitoring_path() -> None:
    # tlog-witness monitoring, testdata/derived/README.md: lowercase hex SHA-256 of the origin
    # bytes.
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
