"""Hypothesis properties of tlog's formats, signatures and proofs.

1. Round trips, for every text and wire format tlog defines outside tiles, tlog-proof and
   policies (those have their own test files): signed notes, signature lines, checkpoints,
   vkeys, signer key files, add-checkpoint requests, 409 size bodies, cosignature response
   bodies and cosignature timestamps. Each is checked in both directions where the format has
   one spelling per value: ``parse(format(x)) == x`` and ``format(parse(t)) == t``.

2. Signature mutations. A checkpoint signed by a log (Ed25519), cosigned with Ed25519
   cosignature/v1 and with ML-DSA-44 subtree/v1, is opened by a verifier that trusts all three
   keys. Every byte position of the note is changed (xor 0x01, xor 0x80, a Hypothesis-drawn
   replacement) and deleted. "Verification fails" means, precisely, one of:

   * :func:`~tlog.checkpoint.open_checkpoint` raises :class:`MalformedError` or
     :class:`InvalidSignatureError` (nothing else is acceptable: not another exception, not
     :class:`UnverifiedNoteError`, since at least two trusted lines are intact);
   * or the change is inside the key name or the key-ID part (the first six base64
     characters) of signature line *j*, that line became an unknown key's line, and the note
     verifies with exactly the other trusted keys: the verified set lost line *j*'s key.

   Changes to the note text, the separator, a line's prefix, a signature byte or a line's LF
   must therefore raise. Separately, every change to one cosignature line on an otherwise valid
   checkpoint leaves that cosigner unverified.

3. Proof mutations. For random trees of 1..2000 leaves, every bit flip of every proof hash,
   changed indexes and sizes, truncated, extended and reordered proofs, and changed leaves and
   roots are fed to :func:`verify_inclusion` / :func:`verify_consistency`. Whether a mutant is
   still a valid statement is decided by a reference verifier written here, which follows the
   RFC 6962 PATH / SUBPROOF recursion (https://www.rfc-editor.org/rfc/rfc6962 §2.1.1-2) rather than
   the RFC 9162 bit loop: the implementation must accept exactly the mutants the reference accepts
   (some do survive: a proof for index 0 in a tree of 3 is also a valid proof for a tree of 4 whose
   right subtree hash is the third leaf), and must reject every bit-flipped hash.
"""

from __future__ import annotations

import functools
import hashlib
import random
import struct
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tlog.checkpoint import Checkpoint, open_checkpoint
from tlog.cosignature import (
    TYPE_COSIGNATURE_V1,
    TYPE_SUBTREE_V1,
    CosignatureV1Signer,
    SubtreeV1Signer,
    split_timestamped,
    timestamp_of,
)
from tlog.encoding import MAX_INT63, b64encode
from tlog.errors import InvalidSignatureError, MalformedError, ProofError, UsageError
from tlog.keys import (
    SignerKey,
    format_vkey,
    generate_key,
    parse_signer_key,
    parse_vkey,
    verifier_for,
)
from tlog.merkle import (
    EMPTY_ROOT,
    MemoryHashStore,
    consistency_proof,
    inclusion_proof,
    proves_inconsistency,
    verify_consistency,
    verify_inclusion,
)
from tlog.note import (
    TYPE_ED25519,
    Ed25519Signer,
    Signature,
    Signer,
    Verifier,
    check_key_name,
    format_note,
    open_note,
    parse_note,
    parse_signature_line,
    sign_note,
)
from tlog.witnessproto import (
    MAX_PROOF_LINES,
    SIZE_CONTENT_TYPE,
    AddCheckpointRequest,
    format_cosignature_response,
    format_size_body,
    parse_cosignature_response,
    parse_size_body,
)


def _sha256(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


# --- strategies -----------------------------------------------------------------------------

# Unicode White_Space as signed-note's key names exclude (https://c2sp.org/signed-note; Go's
# unicode.IsSpace), independently of tlog.note's own set.
SPEC_WHITE_SPACE = frozenset(
    "\t\n\v\f\r \x85\xa0\u1680\u2028\u2029\u202f\u205f\u3000"
    + "".join(chr(c) for c in range(0x2000, 0x200B))
)

ANY_CHAR = st.characters(codec="utf-8")
"""Every code point that UTF-8 can encode."""

LINE_CHAR = st.characters(min_codepoint=0x20, codec="utf-8")
"""What a note line may hold: no code point below U+0020. DEL and C1 controls are allowed by
signed-note (https://c2sp.org/signed-note), and U+2028/U+0085 must not split lines, so they are
drawn too."""


def _is_key_name(name: str) -> bool:
    try:
        check_key_name(name)
    except MalformedError:
        return False
    return True


key_names = st.one_of(
    st.from_regex(r"[a-z0-9.-]{1,20}(/[a-zA-Z0-9._-]{1,12})?", fullmatch=True),
    st.text(ANY_CHAR, min_size=1, max_size=16),
).filter(_is_key_name)
"""Valid key names: drawn broadly, filtered by tlog.note.check_key_name."""

seeds = st.binary(min_size=32, max_size=32)
hashes = st.binary(min_size=32, max_size=32)
lines = st.text(LINE_CHAR, max_size=24)
nonempty_lines = st.text(LINE_CHAR, min_size=1, max_size=24)

note_texts = st.lists(lines, min_size=1, max_size=6).map(
    lambda ls: "".join(line + "\n" for line in ls).encode("utf-8")
)
"""Note texts: one or more lines, possibly empty ones, each ending in LF."""

signatures = st.builds(
    Signature, name=key_names, key_id=st.integers(0, 2**32 - 1), sig=st.binary(min_size=1)
)


@st.composite
def checkpoints(draw: st.DrawFn) -> Checkpoint:
    size = draw(st.one_of(st.integers(0, MAX_INT63), st.integers(0, 1000)))
    root = EMPTY_ROOT if size == 0 else draw(hashes)
    return Checkpoint(
        origin=draw(nonempty_lines),
        size=size,
        root=root,
        extensions=tuple(draw(st.lists(nonempty_lines, max_size=4))),
    )


# --- round trips ----------------------------------------------------------------------------


def _spec_key_name_ok(name: str) -> bool:
    return (
        name != "" and "+" not in name and not any(c in SPEC_WHITE_SPACE or c < " " for c in name)
    )


def test_check_key_name_is_the_spec_rule_for_every_bmp_character() -> None:
    for cp in range(0x10000):
        if 0xD800 <= cp < 0xE000:
            continue
        c = chr(cp)
        assert _is_key_name(c) == _spec_key_name_ok(c), hex(cp)
        assert _is_key_name(f"a{c}b") == _spec_key_name_ok(f"a{c}b"), hex(cp)


@settings(max_examples=300)
@given(name=st.text(st.one_of(st.sampled_from([*sorted(SPEC_WHITE_SPACE), "+"]), ANY_CHAR)))
def test_check_key_name_is_the_spec_rule(name: str) -> None:
    assert _is_key_name(name) == _spec_key_name_ok(name)


@dataclass(frozen=True)
class _SignerSpec:
    name: str
    seed: bytes
    cosigner: bool  # an Ed25519 cosignature/v1 signer (it signs any text) instead of 0x01

    def build(self) -> Ed25519Signer | CosignatureV1Signer:
        if self.cosigner:
            return CosignatureV1Signer(self.name, self.seed, clock=lambda: 1_700_000_000)
        return Ed25519Signer(self.name, self.seed)


signer_specs = st.lists(
    st.builds(_SignerSpec, name=key_names, seed=seeds, cosigner=st.booleans()),
    min_size=1,
    max_size=3,
    unique_by=lambda s: s.name,
)


@settings(max_examples=150, deadline=None)
@given(text=note_texts, specs=signer_specs, unknown=st.lists(signatures, max_size=3))
def test_note_sign_parse_open_round_trip(
    text: bytes, specs: list[_SignerSpec], unknown: list[Signature]
) -> None:
    signers = [s.build() for s in specs]
    keys = {(s.name, s.key_id) for s in signers}
    unknown = list({s.line(): s for s in unknown if (s.name, s.key_id) not in keys}.values())
    signer_list: list[Signer] = list(signers)
    note = sign_note(text, signer_list, unknown)

    got_text, got_sigs = parse_note(note)
    assert got_text == text
    assert got_sigs[: len(unknown)] == unknown
    new = got_sigs[len(unknown) :]
    assert new == [Signature(s.name, s.key_id, s.sign(text)) for s in signers]
    assert format_note(got_text, got_sigs) == note

    verifiers: list[Verifier] = [s.verifier() for s in signers]
    opened = open_note(note, verifiers)
    assert opened.text == text
    assert list(opened.sigs) == new
    assert list(opened.unverified) == unknown


@settings(max_examples=300)
@given(text=note_texts, sigs=st.lists(signatures, min_size=1, max_size=5, unique_by=Signature.line))
def test_format_note_then_parse_note_is_identity(text: bytes, sigs: list[Signature]) -> None:
    note = format_note(text, sigs)
    # The text and each line, independently of format_note.
    assert note == text + b"\n" + b"".join(
        f"— {s.name} {b64encode(struct.pack('>I', s.key_id) + s.sig)}\n".encode() for s in sigs
    )
    got_text, got_sigs = parse_note(note)
    assert (got_text, got_sigs) == (text, sigs)
    assert format_note(got_text, got_sigs) == note


@settings(max_examples=300)
@given(sig=signatures)
def test_signature_line_round_trip(sig: Signature) -> None:
    line = sig.line()
    assert line.endswith(b"\n")
    parsed = parse_signature_line(line[:-1].decode("utf-8"))
    assert parsed == sig
    assert parsed.line() == line


@settings(max_examples=300)
@given(cp=checkpoints())
def test_checkpoint_round_trip(cp: Checkpoint) -> None:
    text = cp.format()
    # The text, independently of Checkpoint.format.
    assert text == (
        "".join(
            line + "\n" for line in [cp.origin, str(cp.size), b64encode(cp.root), *cp.extensions]
        )
    ).encode("utf-8")
    parsed = Checkpoint.parse(text)
    assert parsed == cp
    assert parsed.format() == text


@settings(max_examples=200, deadline=None)
@given(
    name=key_names,
    key_type=st.sampled_from([TYPE_ED25519, TYPE_COSIGNATURE_V1, TYPE_SUBTREE_V1]),
    seed=seeds,
)
def test_vkey_round_trip(name: str, key_type: int, seed: bytes) -> None:
    signer = generate_key(name, key_type, seed).signer()
    v = verifier_for(name, key_type, signer.public_key)
    vkey = format_vkey(v)
    # The vkey, independently of format_vkey: name, SHA-256(name LF type key)[:4], base64.
    kid = _sha256(name.encode() + b"\n" + bytes([key_type]) + signer.public_key)[:4].hex()
    assert vkey == f"{name}+{kid}+{b64encode(bytes([key_type]) + signer.public_key)}"
    parsed = parse_vkey(vkey)
    assert type(parsed) is type(v)
    assert (parsed.name, parsed.key_id, parsed.key_type, parsed.public_key) == (
        name,
        int(kid, 16),
        key_type,
        signer.public_key,
    )
    assert format_vkey(parsed) == vkey


@settings(max_examples=200, deadline=None)
@given(
    name=key_names,
    key_type=st.sampled_from([TYPE_ED25519, TYPE_COSIGNATURE_V1, TYPE_SUBTREE_V1]),
    seed=seeds,
)
def test_signer_key_round_trip(name: str, key_type: int, seed: bytes) -> None:
    key = generate_key(name, key_type, seed)
    assert key == SignerKey(name, key_type, seed)
    text = key.format()
    kid = f"{key.signer().key_id:08x}"
    assert text == f"PRIVATE+KEY+{name}+{kid}+{b64encode(bytes([key_type]) + seed)}"
    assert parse_signer_key(text) == key
    assert parse_signer_key(text + "\n") == key
    assert parse_signer_key(text).format() == text
    assert parse_vkey(key.vkey()).key_id == int(kid, 16)


@settings(max_examples=200)
@given(
    old=st.one_of(st.integers(0, MAX_INT63), st.integers(0, 100)),
    proof=st.lists(hashes, max_size=MAX_PROOF_LINES),
    checkpoint=st.one_of(
        st.binary(min_size=1, max_size=300),
        st.builds(lambda cp, sig: format_note(cp.format(), [sig]), checkpoints(), signatures),
    ),
)
def test_add_checkpoint_request_round_trip(old: int, proof: list[bytes], checkpoint: bytes) -> None:
    req = AddCheckpointRequest(old, tuple(proof), checkpoint)
    if checkpoint.startswith(b"\n"):
        # Such a body would not parse back (an empty line more), so format refuses it.
        with pytest.raises(UsageError):
            req.format()
        return
    body = req.format()
    # The body, independently of AddCheckpointRequest.format.
    assert (
        body
        == b"".join(line.encode() + b"\n" for line in [f"old {old}", *map(b64encode, proof)])
        + b"\n"
        + checkpoint
    )
    parsed = AddCheckpointRequest.parse(body)
    assert parsed == req
    assert parsed.format() == body


@settings(max_examples=300)
@given(
    size=st.one_of(st.integers(0, MAX_INT63), st.integers(0, 1000)),
    content_type=st.sampled_from(
        [SIZE_CONTENT_TYPE, "text/x.tlog.size; charset=utf-8", "Text/X.TLOG.Size"]
    ),
)
@example(size=0, content_type=SIZE_CONTENT_TYPE)
@example(size=MAX_INT63, content_type=SIZE_CONTENT_TYPE)
def test_size_body_round_trip(size: int, content_type: str) -> None:
    body = format_size_body(size)
    assert body == f"{size}\n".encode()
    assert parse_size_body(body, content_type) == size
    assert format_size_body(parse_size_body(body, content_type)) == body


@settings(max_examples=300)
@given(sigs=st.lists(signatures, min_size=1, max_size=6))
def test_cosignature_response_round_trip(sigs: list[Signature]) -> None:
    body = format_cosignature_response(sigs)
    assert body == b"".join(s.line() for s in sigs)
    parsed = parse_cosignature_response(body)
    assert parsed == sigs
    assert format_cosignature_response(parsed) == body


_TS_CHECKPOINT = Checkpoint("example.com/log", 10, _sha256(b"root"), ("ext",)).format()


@settings(max_examples=300, deadline=None)
@given(ts=st.integers(0, MAX_INT63))
@example(ts=0)
@example(ts=1)
@example(ts=2**32)
@example(ts=MAX_INT63)
def test_cosignature_v1_timestamp_round_trip(ts: int) -> None:
    signer = CosignatureV1Signer("witness.example/w", bytes(32))
    sig = signer.sign_at(_TS_CHECKPOINT, ts)
    got_ts, raw = split_timestamped(sig)
    assert (got_ts, len(raw)) == (ts, 64)
    assert sig[:8] == ts.to_bytes(8, "big")
    assert timestamp_of(Signature(signer.name, signer.key_id, sig)) == ts
    assert signer.verifier().verify(_TS_CHECKPOINT, sig)


@settings(max_examples=60, deadline=None)
@given(ts=st.integers(0, MAX_INT63))
@example(ts=0)
@example(ts=MAX_INT63)
def test_subtree_v1_timestamp_round_trip(ts: int) -> None:
    signer = _mldsa_signer("witness.example/w")
    sig = signer.sign_at(_TS_CHECKPOINT, ts)
    got_ts, raw = split_timestamped(sig)
    assert (got_ts, len(raw)) == (ts, 2420)
    assert timestamp_of(Signature(signer.name, signer.key_id, sig)) == ts
    assert signer.verifier().verify(_TS_CHECKPOINT, sig)


@settings(max_examples=100)
@given(ts=st.integers(MAX_INT63 + 1, 2**64 - 1), rest=st.binary(max_size=72))
def test_timestamps_above_2_63_are_refused(ts: int, rest: bytes) -> None:
    with pytest.raises(MalformedError):
        split_timestamped(ts.to_bytes(8, "big") + rest)
    with pytest.raises(UsageError):
        CosignatureV1Signer("witness.example/w", bytes(32)).sign_at(_TS_CHECKPOINT, ts)


# --- signature mutations --------------------------------------------------------------------


@functools.cache
def _mldsa_signer(name: str) -> SubtreeV1Signer:
    return SubtreeV1Signer(name, bytes(range(100, 132)))


LOG = Ed25519Signer("example.com/log", bytes(range(32)))
COSIGNER = CosignatureV1Signer("witness.example/w1", bytes(range(1, 33)))
CHECKPOINT = Checkpoint("example.com/log", 20852163, _sha256(b"tree"), ("ext line",)).format()
TIMESTAMP = 1_679_315_147

Key = tuple[str, int]


@dataclass(frozen=True)
class _Line:
    key: Key
    start: int  # the em dash
    name_start: int
    id_end: int  # end of the base64 characters that carry key-ID bits (the first six)
    lf: int  # the line's final LF


@dataclass(frozen=True)
class _Signed:
    note: bytes
    text_end: int  # position of the separator LF; everything up to it is text or separator
    lines: tuple[_Line, ...]
    verifiers: tuple[Verifier, ...]

    @property
    def keys(self) -> frozenset[Key]:
        return frozenset(line.key for line in self.lines)


def _signed(sigs: Sequence[Signature], verifiers: Sequence[Verifier]) -> _Signed:
    note = format_note(CHECKPOINT, sigs)
    pos = len(CHECKPOINT) + 1
    lines = []
    for s in sigs:
        name_start = pos + len("— ".encode())
        b64_start = name_start + len(s.name.encode()) + 1
        lines.append(
            _Line((s.name, s.key_id), pos, name_start, b64_start + 6, pos + len(s.line()) - 1)
        )
        pos += len(s.line())
    assert pos == len(note)
    return _Signed(note, len(CHECKPOINT), tuple(lines), tuple(verifiers))


def _log_sig() -> Signature:
    return Signature(LOG.name, LOG.key_id, LOG.sign(CHECKPOINT))


def _cosig() -> Signature:
    return Signature(COSIGNER.name, COSIGNER.key_id, COSIGNER.sign_at(CHECKPOINT, TIMESTAMP))


def _mldsa_sig() -> Signature:
    # Same witness name as the Ed25519 cosigner: one witness, two key types, two key IDs.
    signer = _mldsa_signer(COSIGNER.name)
    return Signature(signer.name, signer.key_id, signer.sign_at(CHECKPOINT, TIMESTAMP))


@functools.cache
def _three_signatures() -> _Signed:
    """The checkpoint with a log line, a cosignature/v1 line and a subtree/v1 line."""
    return _signed(
        [_log_sig(), _cosig(), _mldsa_sig()],
        [LOG.verifier(), COSIGNER.verifier(), _mldsa_signer(COSIGNER.name).verifier()],
    )


@functools.cache
def _one_cosignature(kind: str) -> _Signed:
    """The checkpoint with a log line and one cosignature line of ``kind``."""
    if kind == "ed25519":
        return _signed([_log_sig(), _cosig()], [LOG.verifier(), COSIGNER.verifier()])
    signer = _mldsa_signer(COSIGNER.name)
    return _signed([_log_sig(), _mldsa_sig()], [LOG.verifier(), signer.verifier()])


def _check_mutant(signed: _Signed, mutant: bytes, pos: int) -> str:
    """Assert that the note changed at ``pos`` fails verification (module docstring, part 2).

    Returns how it failed: "malformed", "invalid" or "unknown key".
    """
    try:
        opened = open_checkpoint(mutant, signed.verifiers).note
    except MalformedError:
        return "malformed"
    except InvalidSignatureError:
        return "invalid"
    verified = {(s.name, s.key_id) for s in opened.sigs}
    assert pos > signed.text_end, f"a change at byte {pos} (text or separator) left it verifying"
    (line,) = [line for line in signed.lines if line.start <= pos <= line.lf]
    assert line.name_start <= pos < line.id_end, (
        f"a change at byte {pos} of {line.key}'s line (outside its name and key ID) verified"
    )
    assert verified == signed.keys - {line.key}, (pos, verified)
    (unknown,) = opened.unverified
    assert (unknown.name, unknown.key_id) not in signed.keys
    return "unknown key"


def _mutants(note: bytes, positions: range) -> list[tuple[int, bytes]]:
    """xor 0x01, xor 0x80 and deletion at every position."""
    out = []
    for pos in positions:
        for flip in (0x01, 0x80):
            mutant = bytearray(note)
            mutant[pos] ^= flip
            out.append((pos, bytes(mutant)))
        out.append((pos, note[:pos] + note[pos + 1 :]))
    return out


def test_signed_checkpoint_every_byte_mutation_fails() -> None:
    signed = _three_signatures()
    opened = open_checkpoint(signed.note, signed.verifiers)
    assert {(s.name, s.key_id) for s in opened.note.sigs} == signed.keys
    assert len(signed.keys) == 3
    outcomes: dict[str, int] = {}
    for pos, mutant in _mutants(signed.note, range(len(signed.note))):
        verdict = _check_mutant(signed, mutant, pos)
        outcomes[verdict] = outcomes.get(verdict, 0) + 1
    # Each kind of failure happens: the test exercises all three branches.
    assert set(outcomes) == {"malformed", "invalid", "unknown key"}, outcomes
    assert sum(outcomes.values()) == 3 * len(signed.note)


_B64_ALPHABET = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/="


def _replace_each(signed: _Signed, positions: range, rng: random.Random) -> int:
    """Replace the byte at each position by a drawn different value; return how many."""
    note = signed.note
    done = 0
    for pos in positions:
        # Half the time a base64 character: the note then often stays well formed, so the
        # change reaches the key lookup and the signature check instead of the parser.
        value = rng.choice(_B64_ALPHABET) if rng.random() < 0.5 else rng.randrange(256)
        if value != note[pos]:
            _check_mutant(signed, note[:pos] + bytes([value]) + note[pos + 1 :], pos)
            done += 1
    return done


@settings(max_examples=5, deadline=None)
@given(rng=st.randoms(use_true_random=True))
def test_signed_checkpoint_every_byte_replaced_by_drawn_value_fails(rng: random.Random) -> None:
    signed = _three_signatures()
    assert _replace_each(signed, range(len(signed.note)), rng) > len(signed.note) // 2


@pytest.mark.parametrize("kind", ["ed25519", "mldsa44"])
def test_every_byte_mutation_of_one_cosignature_line_unverifies_it(kind: str) -> None:
    signed = _one_cosignature(kind)
    cosig = signed.lines[1]
    assert open_note(signed.note, signed.verifiers).sigs[1].name == COSIGNER.name
    outcomes: set[str] = set()
    for pos, mutant in _mutants(signed.note, range(cosig.start, cosig.lf + 1)):
        # The log line is untouched: the note either is rejected, or opens with the log's
        # signature only and the mutated line as an unknown key's.
        outcomes.add(_check_mutant(signed, mutant, pos))
    assert outcomes == {"malformed", "invalid", "unknown key"}


@pytest.mark.parametrize("kind", ["ed25519", "mldsa44"])
@settings(max_examples=4, deadline=None)
@given(rng=st.randoms(use_true_random=True))
def test_one_cosignature_line_with_drawn_replacements_unverifies_it(
    kind: str, rng: random.Random
) -> None:
    signed = _one_cosignature(kind)
    cosig = signed.lines[1]
    _replace_each(signed, range(cosig.start, cosig.lf + 1), rng)


# --- proof mutations ------------------------------------------------------------------------


def _k(n: int) -> int:
    """The largest power of two strictly less than n, for n > 1."""
    k = 1
    while 2 * k < n:
        k *= 2
    return k


def _h(left: bytes, right: bytes) -> bytes:
    return _sha256(b"\x01" + left + right)


def ref_inclusion_ok(
    index: int, size: int, leaf: bytes, proof: Sequence[bytes], root: bytes
) -> bool:
    """Is ``proof`` a valid RFC 6962 PATH(index, D[0:size]) from ``leaf`` to ``root``?

    Follows PATH's recursion: the last proof element is the hash of the root's child that does
    not hold the leaf, and so on down. Hash values are opaque: the statement is valid when some
    tree of ``size`` leaves has exactly these hashes there.
    """
    if not 0 <= index < size or any(len(h) != 32 for h in (leaf, root, *proof)):
        return False

    def walk(m: int, n: int, path: Sequence[bytes]) -> bytes | None:
        if n == 1:
            return None if path else leaf
        if not path:
            return None
        k = _k(n)
        if m < k:
            sub = walk(m, k, path[:-1])
            return None if sub is None else _h(sub, path[-1])
        sub = walk(m - k, n - k, path[:-1])
        return None if sub is None else _h(path[-1], sub)

    return walk(index, size, proof) == root


def ref_consistency_ok(
    old: int, size: int, old_root: bytes, new_root: bytes, proof: Sequence[bytes]
) -> bool:
    """Is ``proof`` a valid RFC 6962 PROOF(old, D[0:size]) between the two roots?

    Follows SUBPROOF's recursion, computing for each node the hash of its old part (the first
    ``m`` leaves under it) and its new hash.
    """
    if not 0 < old <= size or any(len(h) != 32 for h in (old_root, new_root, *proof)):
        return False

    def walk(m: int, n: int, b: bool, path: Sequence[bytes]) -> tuple[bytes, bytes] | None:
        if m == n:
            if b:  # the whole old tree: its root is given, not proved
                return None if path else (old_root, old_root)
            return (path[0], path[0]) if len(path) == 1 else None
        if not path:
            return None
        k = _k(n)
        if m <= k:
            sub = walk(m, k, b, path[:-1])
            return None if sub is None else (sub[0], _h(sub[1], path[-1]))
        sub = walk(m - k, n - k, False, path[:-1])
        return None if sub is None else (_h(path[-1], sub[0]), _h(path[-1], sub[1]))

    return walk(old, size, True, proof) == (old_root, new_root)


class _Tree:
    """A random tree: leaf hashes from a seed, a store, and memoised RFC 6962 roots."""

    def __init__(self, seed: int, size: int) -> None:
        self.leaves = [_sha256(b"%d/%d" % (seed, i)) for i in range(size)]
        self.store = MemoryHashStore()
        self.store.extend(self.leaves)
        self._memo: dict[tuple[int, int], bytes] = {}

    def mth(self, lo: int, hi: int) -> bytes:
        h = self._memo.get((lo, hi))
        if h is None:
            if hi - lo == 0:
                h = _sha256(b"")
            elif hi - lo == 1:
                h = self.leaves[lo]
            else:
                k = _k(hi - lo)
                h = _h(self.mth(lo, lo + k), self.mth(lo + k, hi))
            self._memo[(lo, hi)] = h
        return h


def _passes(check: Callable[[], None]) -> bool:
    try:
        check()
    except ProofError:
        return False
    return True


def _flip(h: bytes, bit: int) -> bytes:
    b = bytearray(h)
    b[bit // 8] ^= 1 << (bit % 8)
    return bytes(b)


def _hash_bit_flips(proof: Sequence[bytes]) -> Iterator[tuple[str, list[bytes]]]:
    """Every proof with one bit of one hash flipped, and which bit: never a valid statement
    (short of a SHA-256 collision)."""
    for j, h in enumerate(proof):
        for bit in range(256):
            yield f"bit {bit} of hash {j}", [*proof[:j], _flip(h, bit), *proof[j + 1 :]]


def _proof_mutants(proof: list[bytes], extra: bytes) -> list[tuple[str, list[bytes]]]:
    """Truncated, extended, reordered and resized-hash variants of ``proof``."""
    out: list[tuple[str, list[bytes]]] = []
    if proof:
        out += [("drop last", proof[:-1]), ("drop first", proof[1:])]
        out += [("repeat last", [*proof, proof[-1]]), ("repeat first", [proof[0], *proof])]
        for j in range(len(proof)):
            out.append((f"31-byte hash {j}", [*proof[:j], proof[j][:31], *proof[j + 1 :]]))
            out.append((f"33-byte hash {j}", [*proof[:j], proof[j] + b"\0", *proof[j + 1 :]]))
            out.append((f"drop {j}", proof[:j] + proof[j + 1 :]))
        for j in range(len(proof) - 1):
            swapped = list(proof)
            swapped[j], swapped[j + 1] = swapped[j + 1], swapped[j]
            out.append((f"swap {j},{j + 1}", swapped))
        out.append(("reversed", proof[::-1]))
    out += [("append", [*proof, extra]), ("prepend", [extra, *proof])]
    return out


tree_sizes = st.one_of(
    st.integers(1, 2000),
    st.sampled_from([s for k in range(11) for s in ((1 << k) - 1, 1 << k, (1 << k) + 1) if s]),
)


@settings(max_examples=150, deadline=None)
@given(size=tree_sizes, seed=st.integers(0, 2**32), data=st.data())
def test_inclusion_proof_mutations_fail_unless_still_valid(
    size: int, seed: int, data: st.DataObject
) -> None:
    tree = _Tree(seed, size + 1)
    index = data.draw(st.one_of(st.integers(0, size - 1), st.sampled_from([0, size - 1])))
    leaf, root = tree.leaves[index], tree.mth(0, size)
    proof = inclusion_proof(index, size, tree.store)
    assert ref_inclusion_ok(index, size, leaf, proof, root)
    verify_inclusion(index, size, leaf, proof, root)

    def agree(what: str, i: int, n: int, lf: bytes, p: Sequence[bytes], r: bytes) -> bool:
        want = ref_inclusion_ok(i, n, lf, p, r)
        got = _passes(lambda: verify_inclusion(i, n, lf, p, r))
        assert got == want, f"{what}: index {i}, size {n}: verify {got}, reference {want}"
        return got

    # Every bit of every proof hash: never a valid statement (short of a SHA-256 collision).
    for what, mutated in _hash_bit_flips(proof):
        assert not agree(what, index, size, leaf, mutated, root)
    bit = data.draw(st.integers(0, 62), label="index bit")
    for i in {index + 1, index - 1, index ^ 1, index ^ (1 << bit), -1, size, size - 1 - index}:
        if i != index:
            agree("index", i, size, leaf, proof, root)
    for n in {size + 1, size - 1, 2 * size, size // 2, size ^ 1, 0}:
        if n != size:
            agree("size", index, n, leaf, proof, root)
    extra = data.draw(hashes, label="extra hash")
    for what, mutated in _proof_mutants(proof, extra):
        agree(what, index, size, leaf, mutated, root)
    leaf_bit = data.draw(st.integers(0, 255), label="leaf bit")
    for lf in (tree.leaves[index ^ 1], _flip(leaf, leaf_bit)):  # the tree has size + 1 leaves
        assert not agree("leaf", index, size, lf, proof, root)
    for r in {_flip(root, leaf_bit), tree.mth(0, size + 1), tree.mth(0, size - 1), leaf}:
        if r != root:
            agree("root", index, size, leaf, proof, r)


@settings(max_examples=150, deadline=None)
@given(size=tree_sizes, seed=st.integers(0, 2**32), data=st.data())
def test_consistency_proof_mutations_fail_unless_still_valid(
    size: int, seed: int, data: st.DataObject
) -> None:
    tree = _Tree(seed, size + 1)
    old = data.draw(st.one_of(st.integers(1, size), st.sampled_from([1, size])))
    old_root, new_root = tree.mth(0, old), tree.mth(0, size)
    proof = consistency_proof(old, size, tree.store)
    assert ref_consistency_ok(old, size, old_root, new_root, proof)
    verify_consistency(old, size, old_root, new_root, proof)

    def agree(what: str, m: int, n: int, r1: bytes, r2: bytes, p: Sequence[bytes]) -> bool:
        want = ref_consistency_ok(m, n, r1, r2, p)
        got = _passes(lambda: verify_consistency(m, n, r1, r2, p))
        assert got == want, f"{what}: {m} -> {n}: verify {got}, reference {want}"
        return got

    for what, mutated in _hash_bit_flips(proof):
        assert not agree(what, old, size, old_root, new_root, mutated)
    bit = data.draw(st.integers(0, 62), label="old bit")
    for m in {old + 1, old - 1, old ^ 1, old ^ (1 << bit), 0, size + 1}:
        if m != old:
            agree("old size", m, size, old_root, new_root, proof)
    for n in {size + 1, size - 1, 2 * size, size // 2, size ^ 1, old - 1}:
        if n != size:
            agree("new size", old, n, old_root, new_root, proof)
    extra = data.draw(hashes, label="extra hash")
    for what, mutated in _proof_mutants(proof, extra):
        agree(what, old, size, old_root, new_root, mutated)
    root_bit = data.draw(st.integers(0, 255), label="root bit")
    for r1 in {_flip(old_root, root_bit), tree.mth(0, old + 1), tree.mth(0, old - 1), new_root}:
        if r1 != old_root:
            agree("old root", old, size, r1, new_root, proof)
    for r2 in {_flip(new_root, root_bit), tree.mth(0, size + 1), tree.mth(0, size - 1), old_root}:
        if r2 != new_root:
            agree("new root", old, size, old_root, r2, proof)


@settings(max_examples=150, deadline=None)
@given(size=tree_sizes, seed=st.integers(0, 2**32), data=st.data())
def test_proves_inconsistency_exactly_when_a_fork_is_shown(
    size: int, seed: int, data: st.DataObject
) -> None:
    """:func:`proves_inconsistency` is True only for a proof that folds to the new root from
    another old root: a real fork (two trees that share fewer leaves than the old size). A
    consistent pair, a junk proof, a flipped bit or a power-of-two old size: False."""
    if size < 3:
        return
    old = data.draw(st.integers(1, size - 1), label="old")
    shared = data.draw(st.integers(0, old - 1), label="shared leaves")
    tree = _Tree(seed, size)
    fork = _Tree(seed ^ 0x5A5A, size)
    fork.leaves[:shared] = tree.leaves[:shared]
    fork.store = MemoryHashStore()
    fork.store.extend(fork.leaves)
    fork._memo.clear()
    proof = consistency_proof(old, size, fork.store)
    stored_root, fork_root = tree.mth(0, old), fork.mth(0, size)
    # The stored tree against its own growth: consistent, never a proven fork.
    assert not proves_inconsistency(
        old, size, stored_root, tree.mth(0, size), consistency_proof(old, size, tree.store)
    )
    # The fork's own proof: a proven inconsistency unless old is a power of two.
    assert proves_inconsistency(old, size, stored_root, fork_root, proof) == (old & (old - 1) != 0)
    # Any flipped bit, a shorter or longer proof, another root: nothing proved.
    bit = data.draw(st.integers(0, 255), label="bit")
    for j in range(len(proof)):
        mutated = [*proof[:j], _flip(proof[j], bit), *proof[j + 1 :]]
        assert not proves_inconsistency(old, size, stored_root, fork_root, mutated)
    assert not proves_inconsistency(old, size, stored_root, fork_root, proof[:-1])
    assert not proves_inconsistency(old, size, stored_root, fork_root, [*proof, fork_root])
    assert not proves_inconsistency(old, size, stored_root, _flip(fork_root, bit), proof)
    assert not proves_inconsistency(old, old, stored_root, fork_root, proof)
    # (Another size is not tried: for some pairs of sizes the fold has the same shape, and
    # the server only ever passes the size and root of one signed checkpoint.)
