"""The export file format (tlog.export, docs/export-format.md).

Exports are built synthetically with :func:`tlog.journal.make_record` (no store): a few runs,
some sealed at log positions, records with and without record signatures, checkpoints signed by
an Ed25519 log key and cosigned by an Ed25519 cosignature/v1 witness and an ML-DSA-44
subtree/v1 witness. Then:

1. write → read → verify, with the summary checked field by field;
2. ``write(read(x)) == x`` byte for byte (and by Hypothesis over random journals);
3. every single-byte change (xor 0x01, xor 0x20, deletion) at every position of a small export,
   every line deleted, duplicated or swapped with its neighbour, every truncation, a run
   removed, a checkpoint of another log: each makes :func:`verify_export` raise a
   :class:`TlogError` whose message starts with ``"line "`` — never pass; the ML-DSA export gets
   the same treatment through Hypothesis-drawn positions and replacements;
4. the writer refuses misuse; the reader streams;
5. the worked example of docs/export-format.md is real: regenerated here byte for byte, and it
   verifies.
"""

from __future__ import annotations

import hashlib
import io
import re
import tracemalloc
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.exportfile import join, lines_of, redigest, seed, vkey
from tlog.checkpoint import Checkpoint
from tlog.cosignature import CosignatureV1Signer, SubtreeV1Signer
from tlog.encoding import b64encode
from tlog.errors import (
    InvalidSignatureError,
    MalformedError,
    ProofError,
    TlogError,
    UsageError,
    VerificationError,
)
from tlog.export import (
    MAGIC,
    CheckpointItem,
    EndItem,
    ExportChainError,
    ExportFormatError,
    ExportHeader,
    ExportProofError,
    ExportSignatureError,
    ExportVerificationError,
    ExportVerifier,
    ExportWriter,
    HeaderItem,
    RecordItem,
    RunItem,
    RunSeal,
    read_export,
    verify_export,
    write_export,
)
from tlog.journal import (
    GENESIS,
    MAX_RECORD_SIZE,
    Body,
    ChainError,
    Record,
    RecordSignature,
    chain_hash,
    check_outcome,
    make_record,
    record_signature_message,
    seal_body,
)
from tlog.merkle import EMPTY_ROOT, MemoryHashStore, leaf_hash, node_hash
from tlog.note import Ed25519Signer, Signer, sign_note

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "export-format.md"
T = 1_760_000_000  # a fixed cosignature time, so that Ed25519 cosignatures are reproducible


ORIGIN = "example.com/journal/acme"
LOG = Ed25519Signer(ORIGIN, seed("log"))
RECORDS = Ed25519Signer("records.example.com", seed("records"))
W1 = CosignatureV1Signer("witness1.example", seed("witness1"), clock=lambda: T)
OTHER_LOG = Ed25519Signer("example.com/journal/other", seed("other log"))


@cache
def w2() -> SubtreeV1Signer:
    return SubtreeV1Signer("witness2.example", seed("witness2"), clock=lambda: T)


# --- building exports -----------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    """One run to export: its records and (for a sealed run) its seal."""

    id: str
    records: tuple[Record, ...]
    seal: RunSeal | None = None


def make_run(
    run: str,
    bodies: Sequence[dict[str, Any]],
    signed: Sequence[bool] = (),
    epoch: int = 1,
    outcome: str | None = None,
) -> tuple[Record, ...]:
    """Chain records with the given body fields (kind, data, case, effect_key); with
    ``outcome``, then the run's seal record naming it (signed when ``signed`` has an entry
    for it, after those of ``bodies``)."""
    out: list[Record] = []
    prev = GENESIS
    if outcome is not None:
        seal = seal_body(run, len(bodies) + 1, epoch, outcome)
        bodies = [*bodies, {"kind": seal.kind, "data": seal.data}]
    for i, fields in enumerate(bodies):
        data = fields.get("data")
        body = Body(
            run=run,
            seq=i + 1,
            epoch=epoch,
            kind=fields.get("kind", "Step"),
            case=fields.get("case"),
            effect_key=fields.get("effect_key"),
            data=data,
            has_data="data" in fields,
        )
        sign = i < len(signed) and signed[i]
        r = make_record(body, prev, RECORDS if sign else None)
        out.append(r)
        prev = r.hash
    return tuple(out)


def sealed_run(
    run: str,
    bodies: Sequence[dict[str, Any]],
    position: int,
    outcome: str,
    signed: Sequence[bool] = (),
    epoch: int = 1,
) -> Run:
    """A run sealed at ``position``: its records, then its seal record naming ``outcome``."""
    return Run(run, make_run(run, bodies, signed, epoch, outcome), RunSeal(position, outcome))


def checkpoint_note(
    runs: Sequence[Run], size: int, signers: Sequence[Signer], origin: str = ORIGIN
) -> bytes:
    """A checkpoint of the log of ``runs`` (sealed ones, by position) at ``size``."""
    tree = MemoryHashStore()
    sealed = sorted((r for r in runs if r.seal is not None), key=lambda r: r.seal.position)  # type: ignore[union-attr]
    for r in sealed[:size]:
        tree.append(leaf_hash(r.records[-1].hash))
    text = Checkpoint(origin, size, tree.root(size)).format()
    return sign_note(text, signers)


def write(header: ExportHeader, notes: Sequence[bytes], runs: Sequence[Run]) -> bytes:
    """Write an export; runs are put in export order (sealed by position, then by ID)."""
    sealed = sorted((r for r in runs if r.seal is not None), key=lambda r: r.seal.position)  # type: ignore[union-attr]
    unsealed = sorted((r for r in runs if r.seal is None), key=lambda r: r.id)
    out = io.BytesIO()
    w = ExportWriter(out)
    w.header(header)
    for note in notes:
        w.checkpoint(note)
    for r in [*sealed, *unsealed]:
        w.run(r.id, len(r.records), r.seal, head=r.records[-1].hash if r.seal else None)
        for rec in r.records:
            w.record(rec)
    w.end()
    return out.getvalue()


def small_runs() -> list[Run]:
    """Three sealed runs and two unsealed ones; some records signed (two seal records), varied
    bodies."""
    return [
        sealed_run(
            "order-17",
            [
                {"kind": "RunStarted", "case": "case-9", "data": {"item": "Zürich ✓"}},
                {"kind": "EffectStarted", "effect_key": "pay 42", "data": {"n": 42}},
                {"kind": "RunConcluded", "data": {"outcome": "ok", "note": 'a"b\\c\nd'}},
            ],
            1,
            "ok",
            signed=[True, False, True, True],
        ),
        sealed_run("order-18", [{"kind": "Step"}, {"data": [1, None, True]}], 0, "failed"),
        sealed_run("batch:7", [{"kind": "Step", "data": -7}], 2, "ok", signed=[True, True]),
        Run(
            "order-20",
            make_run("order-20", [{"kind": "Step"}, {"kind": "Step"}], signed=[False, True]),
        ),
        Run("order-19", make_run("order-19", [{"kind": "Step", "data": {}}])),
    ]


def small_header(witnesses: Sequence[Any] = (W1,)) -> ExportHeader:
    return ExportHeader(ORIGIN, vkey(LOG), (vkey(RECORDS),), tuple(vkey(w) for w in witnesses))


@cache
def small_export() -> bytes:
    """Log size 3; checkpoints at 1 (log + cosignature/v1) and 2 (log only)."""
    runs = small_runs()
    notes = [checkpoint_note(runs, 1, [LOG, W1]), checkpoint_note(runs, 2, [LOG])]
    return write(small_header(), notes, runs)


@cache
def mldsa_export() -> bytes:
    """As the small export, but checkpoints at 0, 2 and 3, cosigned by both witnesses."""
    runs = small_runs()
    notes = [
        checkpoint_note(runs, 0, [LOG]),
        checkpoint_note(runs, 2, [LOG, W1]),
        checkpoint_note(runs, 3, [LOG, w2(), W1]),
    ]
    return write(small_header([W1, w2()]), notes, runs)


def verify(data: bytes, **kw: Any) -> Any:
    return verify_export(io.BytesIO(data), **kw)


def refused(data: bytes, **kw: Any) -> TlogError:
    """The error verify_export raises for ``data``; fails the test if it passes."""
    try:
        verify(data, **kw)
    except TlogError as e:
        assert str(e).startswith("line "), str(e)
        assert re.match(r"line [1-9][0-9]*: ", str(e)), str(e)
        return e
    pytest.fail("verify_export accepted a changed export")


def run_sections(data: bytes) -> list[tuple[int, int]]:
    """(first, stop) line indexes of each run's section (run line to before the next)."""
    lines = lines_of(data)
    starts = [i for i, line in enumerate(lines) if line.startswith(b"run ")]
    return [
        (s, starts[k + 1] if k + 1 < len(starts) else len(lines) - 1) for k, s in enumerate(starts)
    ]


def remove_run(data: bytes, run_id: str) -> bytes:
    """Remove a run's section and make the end line agree (counts and digest)."""
    lines = lines_of(data)
    for start, stop in run_sections(data):
        if lines[start].split(b" ")[1] == run_id.encode():
            section = lines[start:stop]
            break
    else:
        raise AssertionError(run_id)
    cut = lines[:start] + lines[start + len(section) :]
    tokens = cut[-1].split(b" ")
    tokens[2] = b"%d" % (int(tokens[2]) - 1)
    tokens[3] = b"%d" % (int(tokens[3]) - sum(1 for x in section[1:] if not x.startswith(b"sig ")))
    tokens[4] = b"%d" % (int(tokens[4]) - (b" sealed " in section[0]))
    return redigest(join([*cut[:-1], b" ".join(tokens)]))


# --- round trips ----------------------------------------------------------------------------


def test_write_read_verify_summary() -> None:
    data = small_export()
    s = verify(data)
    assert s.header == small_header()
    assert (s.checkpoints, s.checkpoint_sizes) == (2, (1, 2))
    assert (s.runs, s.sealed_runs, s.log_size) == (5, 3, 3)
    assert s.records == 4 + 3 + 2 + 2 + 1  # each sealed run's seal record counted
    assert s.signed_records == 6
    assert s.consistency_proofs == 1
    assert s.cosignatures == {vkey(W1): 1}
    assert s.last_checkpoint == checkpoint_note(small_runs(), 2, [LOG])
    assert s.digest == hashlib.sha256(data[: data.rindex(b"end ")]).digest()
    # The log root rebuilt independently: the heads by position 0, 1, 2.
    runs = {r.id: r for r in small_runs()}
    leaves = [leaf_hash(runs[i].records[-1].hash) for i in ("order-18", "order-17", "batch:7")]
    assert s.log_root == node_hash(node_hash(leaves[0], leaves[1]), leaves[2])


def test_mldsa_export_verifies() -> None:
    s = verify(mldsa_export())
    assert s.checkpoint_sizes == (0, 2, 3)
    assert s.cosignatures == {vkey(W1): 2, vkey(w2()): 1}
    assert s.consistency_proofs == 1  # 0 -> 2 needs none, 2 -> 3 is proved


def test_items_in_file_order_with_lines() -> None:
    data = small_export()
    items = list(read_export(io.BytesIO(data)))
    lines = lines_of(data)
    assert isinstance(items[0], HeaderItem) and items[0].line == 2
    assert isinstance(items[-1], EndItem) and items[-1].line == len(lines)
    for item in items:
        if isinstance(item, CheckpointItem):
            assert lines[item.line - 1] == b"checkpoint %d" % len(item.note)
            for j, sig in enumerate(item.signatures):
                assert lines[item.signature_line(j) - 1].decode() == sig.line()[:-1].decode()
        elif isinstance(item, RunItem):
            assert lines[item.line - 1].startswith(b"run " + item.run.encode() + b" ")
        elif isinstance(item, RecordItem):
            r = item.record
            assert lines[item.line - 1] == b64encode(r.hash).encode() + b" " + r.raw
            if r.signature is not None:
                assert lines[item.line].startswith(b"sig records.example.com ")
    records = [i.record for i in items if isinstance(i, RecordItem)]
    originals = [rec for r in small_runs() for rec in r.records]
    assert sorted(records, key=lambda r: (r.run, r.seq)) == sorted(
        originals, key=lambda r: (r.run, r.seq)
    )


def test_write_read_is_byte_identical() -> None:
    for data in (small_export(), mldsa_export()):
        out = io.BytesIO()
        digest = write_export(out, read_export(io.BytesIO(data)))
        assert out.getvalue() == data
        assert digest == verify(data).digest


def test_verified_items_can_be_rewritten_identically() -> None:
    # What restore does: replay while verifying, then export again.
    v = ExportVerifier(log_key=vkey(LOG))
    out = io.BytesIO()
    w = ExportWriter(out)
    for item in v.items(io.BytesIO(small_export())):
        w.item(item)
    assert v.summary is not None and out.getvalue() == small_export()


def test_empty_journal_and_no_checkpoints() -> None:
    out = io.BytesIO()
    w = ExportWriter(out)
    w.header(ExportHeader(ORIGIN, vkey(LOG)))
    w.end()
    data = out.getvalue()
    empty = b64encode(hashlib.sha256(data[: data.index(b"end ")]).digest()).encode()
    assert data == join(
        [
            MAGIC,
            b"origin " + ORIGIN.encode(),
            b"log-key " + vkey(LOG).encode(),
            b"end 0 0 0 0 " + empty,
        ]
    )
    s = verify(data)
    assert (s.runs, s.records, s.log_size, s.log_root) == (0, 0, 0, EMPTY_ROOT)


def test_size_zero_checkpoint_of_an_empty_log() -> None:
    note = sign_note(Checkpoint(ORIGIN, 0, EMPTY_ROOT).format(), [LOG])
    data = write(small_header(), [note], [])
    assert verify(data).checkpoint_sizes == (0,)


def test_last_checkpoint_may_be_smaller_than_the_log_never_larger() -> None:
    runs = small_runs()
    assert verify(write(small_header(), [checkpoint_note(runs, 3, [LOG])], runs)).log_size == 3
    # A checkpoint of size 4 cannot be written for a log of 3 ...
    big = sealed_run("order-21", [{}], 3, "ok")
    note4 = checkpoint_note([*runs, big], 4, [LOG])
    with pytest.raises(ExportProofError, match=r"^line 6: checkpoint of size 4 is larger"):
        write(small_header(), [note4], runs)
    # ... and an export that claims one is refused, naming the checkpoint's line.
    cut = remove_run(write(small_header(), [note4], [*runs, big]), "order-21")
    e = refused(cut)
    assert isinstance(e, ProofError) and str(e).startswith("line 6: checkpoint of size 4")


# --- tampering ------------------------------------------------------------------------------


def test_every_single_byte_change_is_refused() -> None:
    data = small_export()
    for i in range(len(data)):
        for mutated in (
            data[:i] + bytes([data[i] ^ 0x01]) + data[i + 1 :],
            data[:i] + bytes([data[i] ^ 0x20]) + data[i + 1 :],
            data[:i] + data[i + 1 :],
        ):
            refused(mutated)


def test_every_byte_of_the_mldsa_export_flipped_is_refused() -> None:
    # The ML-DSA witness key (1312 bytes) and its 2428-byte cosignature lines included.
    data = mldsa_export()
    for i in range(len(data)):
        refused(data[:i] + bytes([data[i] ^ 0x01]) + data[i + 1 :])


def test_lone_surrogate_body_is_refused() -> None:
    # A body with an escaped lone surrogate is not canonical; it must be a format error (line
    # named), not a stray UnicodeEncodeError from re-encoding it.
    data = small_export()
    lines = lines_of(data)
    i = next(i for i, line in enumerate(lines) if b'"run":"order-19"' in line)
    raw = b'{"data":"\\ud800","epoch":1,"kind":"Step","run":"order-19","seq":1,"v":1}'
    lines[i] = b64encode(chain_hash(GENESIS, raw)).encode() + b" " + raw
    e = refused(redigest(join(lines)))
    assert isinstance(e, ExportFormatError) and e.line == i + 1, str(e)


def test_every_truncation_is_refused() -> None:
    data = small_export()
    for i in range(len(data)):
        refused(data[:i])
    refused(data + b"\n")
    refused(data + b"end 0 0 0 0 x\n")


def test_every_line_deleted_duplicated_or_swapped_is_refused() -> None:
    for data in (small_export(), mldsa_export()):
        lines = lines_of(data)
        for i in range(len(lines)):
            refused(join(lines[:i] + lines[i + 1 :]))
            refused(join(lines[: i + 1] + lines[i:]))
            if i + 1 < len(lines) and lines[i] != lines[i + 1]:
                refused(join([*lines[:i], lines[i + 1], lines[i], *lines[i + 2 :]]))


def test_changes_that_keep_the_digest_are_located() -> None:
    # A forger recomputes the digest: every change must still be caught at its own line.
    data = small_export()
    lines = lines_of(data)
    rec = next(i for i, line in enumerate(lines) if b'"Z\xc3\xbcrich' in line)
    forged = redigest(data.replace("Zürich".encode(), b"Zurich"))
    e = refused(forged)
    assert isinstance(e, ExportChainError) and e.line == rec + 1 and e.seq == 1
    # The outcome is in the run's seal record: a changed run line is caught at that record,
    # the digest recomputed or not.
    seal = next(i for i, line in enumerate(lines) if b'"outcome":"failed"' in line)
    flipped = data.replace(b"sealed 0 failed", b"sealed 0 passed")
    for forged in (flipped, redigest(flipped)):
        e = refused(forged)
        assert isinstance(e, ExportChainError) and e.line == seal + 1, str(e)
        assert "names the outcome failed" in str(e)


def test_a_consistently_rewritten_sealed_run_breaks_the_checkpoint_root() -> None:
    runs = small_runs()
    notes = [checkpoint_note(runs, 1, [LOG, W1]), checkpoint_note(runs, 2, [LOG])]
    # Rewrite order-18 (position 0) with a different last record, consistently chained.
    forged = [
        sealed_run("order-18", [{"kind": "Step"}, {"data": [1, None, False]}], 0, "failed")
        if r.id == "order-18"
        else r
        for r in runs
    ]
    data = write(small_header(), notes, forged)
    e = refused(data)
    assert isinstance(e, ExportProofError) and e.line == 6  # the checkpoint of size 1
    assert "size 1 reached at line" in str(e)


def test_a_removed_run_is_refused() -> None:
    data = small_export()
    lines = lines_of(data)
    for start, stop in run_sections(data):
        refused(join(lines[:start] + lines[stop:]))
        run_id = lines[start].split(b" ")[1].decode()
        # With the end line made to agree (counts and digest), removing a sealed run that a
        # checkpoint covers still breaks the dense positions. A run no checkpoint covers (an
        # unsealed run, or a sealed one past the last checkpoint's size) is covered by nothing
        # the log signed: its consistent removal gives another valid export. What guards it
        # is the digest against accidents, and a later checkpoint (or the records' own
        # signatures, held elsewhere) against intent.
        forged = remove_run(data, run_id)
        tokens = lines[start].split(b" ")
        if b" sealed " in lines[start] and int(tokens[4]) < 2:  # the last checkpoint: size 2
            e = refused(forged)
            assert isinstance(e, ExportFormatError) and "position" in str(e), str(e)
        else:
            assert verify(forged).runs == 4


def test_checkpoint_of_another_log_is_refused() -> None:
    runs = small_runs()
    good = [checkpoint_note(runs, 1, [LOG, W1]), checkpoint_note(runs, 2, [LOG])]
    data = small_export()
    # Another log's checkpoint of the same tree, swapped in with a length and digest that fit.
    other = checkpoint_note(runs, 2, [OTHER_LOG], origin=OTHER_LOG.name)
    swapped = data.replace(
        b"checkpoint %d\n" % len(good[1]) + good[1], b"checkpoint %d\n" % len(other) + other
    )
    e = refused(redigest(swapped))
    assert isinstance(e, ExportFormatError) and "origin" in str(e)
    # Same origin text, signed by another key that claims the name: an undeclared key.
    impostor = Ed25519Signer(ORIGIN, seed("impostor"))
    forged = checkpoint_note(runs, 2, [impostor])
    swapped = data.replace(good[1], forged).replace(
        b"checkpoint %d\n" % len(good[1]), b"checkpoint %d\n" % len(forged)
    )
    e = refused(redigest(swapped))
    assert isinstance(e, ExportVerificationError) and "from no key of the header" in str(e)
    # The same log, but a checkpoint of a forked tree: the rebuilt root disagrees.
    fork = [sealed_run("fork", [{}], 0, "ok"), *runs[1:]]
    forked = checkpoint_note(fork, 1, [LOG])
    swapped = data.replace(good[0], forked).replace(
        b"checkpoint %d\n" % len(good[0]), b"checkpoint %d\n" % len(forked)
    )
    e = refused(redigest(swapped))
    assert isinstance(e, ProofError) and str(e).startswith("line 6: checkpoint of size 1")


def test_bad_signatures_are_named_by_line() -> None:
    data = small_export()
    lines = lines_of(data)
    # A record signature whose bytes are another record's signature.
    sig_lines = [i for i, line in enumerate(lines) if line.startswith(b"sig ")]
    a, b = sig_lines[0], sig_lines[1]
    swapped = list(lines)
    swapped[a], swapped[b] = lines[b], lines[a]
    e = refused(join(swapped))
    assert isinstance(e, ExportSignatureError) and isinstance(e, InvalidSignatureError)
    assert e.line == a + 1 and e.name == RECORDS.name
    # A cosignature made over another checkpoint.
    runs = small_runs()
    note1 = checkpoint_note(runs, 1, [LOG, W1])
    other = checkpoint_note(runs, 2, [LOG, W1])
    bad = (
        note1[: note1.rindex("— witness1".encode())] + other[other.rindex("— witness1".encode()) :]
    )
    assert len(bad) == len(note1)
    e = refused(redigest(data.replace(note1, bad)))
    assert isinstance(e, ExportSignatureError) and e.name == W1.name
    assert lines[e.line - 1].startswith("— witness1.example ".encode())


def test_edge_07_unknown_key_lines_are_refused_in_exports() -> None:
    runs = small_runs()
    # A checkpoint cosigned by a witness the header does not declare.
    data = write(small_header([]), [checkpoint_note(runs, 1, [LOG])], runs)
    note = checkpoint_note(runs, 1, [LOG, W1])
    forged = data.replace(checkpoint_note(runs, 1, [LOG]), note).replace(
        b"checkpoint %d\n" % len(checkpoint_note(runs, 1, [LOG])), b"checkpoint %d\n" % len(note)
    )
    e = refused(redigest(forged))
    assert isinstance(e, ExportVerificationError)
    assert lines_of(forged)[e.line - 1].startswith("— witness1.example ".encode())
    # A record signed by an undeclared key.
    header = ExportHeader(ORIGIN, vkey(LOG), (), (vkey(W1),))
    with pytest.raises(ExportVerificationError, match="which is no record-key"):
        write(header, [], small_runs())


def test_checkpoint_without_the_log_signature_is_refused() -> None:
    runs = small_runs()
    with pytest.raises(ExportVerificationError, match="no signature of the log key"):
        write(small_header(), [checkpoint_note(runs, 1, [W1])], runs)


def test_edge_33_duplicate_signature_lines_in_an_export_checkpoint() -> None:
    # Edge case 33 (signed-note): one key never counts twice; the export carries each line once.
    runs = small_runs()
    note = checkpoint_note(runs, 1, [LOG, W1])
    last = note[note.rindex("— witness1".encode()) :]
    with pytest.raises(ExportFormatError, match="signs twice"):
        write(small_header(), [note + last], runs)
    # Two different lines of one key (a second cosignature, one second later).
    later = CosignatureV1Signer(W1.name, W1.seed, clock=lambda: T + 1)
    text = note[: note.index(b"\n\n") + 1]
    second = sign_note(text, [later])
    again = note + second[second.rindex("— witness1".encode()) :]
    with pytest.raises(ExportFormatError, match="signs twice") as e:
        write(small_header(), [again], runs)
    assert e.value.line == 6 + 3 + 2 + 2  # checkpoint, text, separator, two lines before it


def test_edge_32_control_characters_crlf_export_is_refused() -> None:
    # Edge case 32 (signed-note): CR is never normalised away.
    data = small_export()
    crlf = data.replace(b"\n", b"\r\n")
    assert isinstance(refused(crlf), MalformedError)
    for m in re.finditer(b"\n", data):
        refused(data[: m.start()] + b"\r" + data[m.start() :])


def test_trusted_keys_and_required_signatures() -> None:
    data = small_export()
    assert verify(data, log_key=vkey(LOG), record_keys=[vkey(RECORDS)]).records == 12
    e = refused(data, log_key=vkey(OTHER_LOG))
    assert isinstance(e, ExportVerificationError) and e.line == 3
    e = refused(data, record_keys=[vkey(LOG)])
    assert isinstance(e, ExportVerificationError) and e.line == 4
    e = refused(data, require_record_signatures=True)
    assert isinstance(e, ExportVerificationError) and "is not signed" in str(e)
    with pytest.raises(UsageError):
        verify(data, log_key="not a key")


# --- the header and the grammar -------------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "message"),
    [
        (ExportHeader("other.example", vkey(LOG)), "^line 3: log-key is named"),
        (ExportHeader("has space", vkey(LOG)), "^line 2: origin must be a valid key name"),
        (ExportHeader(ORIGIN, vkey(W1)), "^line 3: log-key has type 0x04"),
        (ExportHeader(ORIGIN, vkey(LOG), (vkey(W1),)), "^line 4: record-key has type 0x04"),
        (
            ExportHeader(ORIGIN, vkey(LOG), (), (vkey(RECORDS),)),
            "^line 4: witness-key has type 0x01",
        ),
        (
            ExportHeader(ORIGIN, vkey(LOG), (), (vkey(W1), vkey(W1))),
            "^line 5: witness-key lines are not in",
        ),
        (ExportHeader(ORIGIN, vkey(LOG)[:-2] + "A="), "^line 3: log-key: "),
    ],
)
def test_header_rules(header: ExportHeader, message: str) -> None:
    with pytest.raises(MalformedError, match=message):
        ExportWriter(io.BytesIO()).header(header)


def test_header_keys_are_sorted_by_the_writer_and_must_be_sorted_in_the_file() -> None:
    other = Ed25519Signer("a-records.example", seed("a"))
    h = ExportHeader(ORIGIN, vkey(LOG), (vkey(RECORDS), vkey(other)))
    out = io.BytesIO()
    w = ExportWriter(out)
    w.header(h)
    w.end()
    data = out.getvalue()
    assert lines_of(data)[3:5] == [
        b"record-key " + vkey(other).encode(),
        b"record-key " + vkey(RECORDS).encode(),
    ]
    verify(data)
    lines = lines_of(data)
    e = refused(redigest(join([*lines[:3], lines[4], lines[3], *lines[5:]])))
    assert isinstance(e, ExportFormatError) and e.line == 5


@pytest.mark.parametrize(
    ("old", "new", "offset", "what"),
    [
        # offset: the line named, relative to the line that holds the change.
        (b"tlog-toolkit export v2\n", b"tlog-toolkit export v3\n", 0, "expected 'tlog-toolkit"),
        (b"tlog-toolkit export v2\n", b"tlog-toolkit export v1\n", 0, "version 1 export"),
        (b"end 2 5 12 3 ", b"end 2 5 012 3 ", 0, "leading zero"),
        (b"end 2 5 12 3 ", b"end 2 5 11 3 ", 0, "counts 11 records"),
        (b"end 2 5 12 3 ", b"end 2 5 12 3  ", 0, "expected 'end"),
        (b"run order-19 1\n", b"run order-19 1 \n", 0, "expected 'run"),
        (b"run order-19 1\n", b"run order-19 01\n", 0, "leading zero"),
        (b"run order-19 1\n", b"run order-19 0\n", 0, "less than 1"),
        (b"run order-19 1\n", b"run order-19 2\n", 2, "announced 2 records, the export holds 1"),
        (b"sealed 0 failed", b"sealed 0 fail ed", 0, "expected 'run"),
        (b"sealed 0 failed", b"sealed 0 7failed", 0, "outcome"),
        (b"sealed 0 failed", b"sealed 1 failed", 0, "next position is 0"),
        (b"run order-19 1\n", b"run order-21 1\n", 1, "body names run order-19 record 1"),
        (b"checkpoint ", b"checkpoint 0", 0, "checkpoint length"),
        (b"origin ", b"origin  ", 0, "origin must be a valid key name"),
        (b"record-key ", b"recordkey ", 0, "expected a key, checkpoint, run or end line"),
        (b"\nsig ", b"\nsig  ", 1, "expected 'sig"),
        (b"\nsig records.example.com ", b"\nsig records.example.com 0", 1, "8 lowercase hex"),
    ],
)
def test_grammar_violations(old: bytes, new: bytes, offset: int, what: str) -> None:
    data = small_export()
    assert old in data
    at = data.index(old)
    changed = data.replace(old, new, 1)
    e = refused(changed)
    line = data[:at].count(b"\n") + 1 + offset
    assert str(e).startswith(f"line {line}: "), str(e)
    assert what in str(e), str(e)


def test_runs_must_be_in_order() -> None:
    data = small_export()
    lines = lines_of(data)
    starts = [i for i, line in enumerate(lines) if line.startswith(b"run ")]
    sections = [
        lines[s : (starts[k + 1] if k + 1 < len(starts) else len(lines) - 1)]
        for k, s in enumerate(starts)
    ]
    head, end = lines[: starts[0]], lines[-1:]
    # Unsealed runs swapped (by ID), an unsealed run before a sealed one, sealed runs swapped.
    for order, message in (
        ([0, 1, 2, 4, 3], "does not follow"),
        ([0, 1, 3, 2, 4], "follows an unsealed run"),
        ([1, 0, 2, 3, 4], "the next position is 0"),
    ):
        e = refused(redigest(join([*head, *(x for k in order for x in sections[k]), *end])))
        assert isinstance(e, ExportFormatError) and message in str(e), str(e)


def test_duplicate_run_ids_are_refused() -> None:
    runs = small_runs()
    twice = [*runs, Run("order-17", runs[0].records[:-1])]
    notes = [checkpoint_note(runs, 1, [LOG, W1])]
    # The writer keeps constant memory and does not see this; the reader does.
    data = write(small_header(), notes, twice)
    e = refused(data)
    assert isinstance(e, ExportFormatError) and "appears twice" in str(e)
    again = [*runs, Run("order-17", runs[0].records, RunSeal(3, "ok"))]
    e = refused(write(small_header(), notes, again))
    assert isinstance(e, ExportFormatError) and "appears twice" in str(e)


def test_record_line_limits() -> None:
    big = "x" * (MAX_RECORD_SIZE - 100)
    records = make_run("big", [{"data": big}])
    assert len(records[0].raw) <= MAX_RECORD_SIZE
    data = write(ExportHeader(ORIGIN, vkey(LOG)), [], [Run("big", records)])
    assert verify(data).records == 1
    # A line longer than any record line is refused before it is held in memory whole.
    long = data.replace(big.encode(), big.encode() + b"y" * 200)
    e = refused(long)
    assert isinstance(e, ExportFormatError) and "longer than" in str(e)


def test_outcome_spelling() -> None:
    for good in ("ok", "failed", "Timed_out.v2-b", "a" * 64):
        check_outcome(good)
    for bad in ("", "7up", "a b", "é", "a" * 65, "ok\n", "-x"):
        with pytest.raises(MalformedError):
            check_outcome(bad)


# --- the writer -----------------------------------------------------------------------------


def test_writer_refuses_misuse() -> None:
    runs = small_runs()
    r17, r18 = runs[0], runs[1]
    note = checkpoint_note(runs, 1, [LOG])

    def started() -> ExportWriter:
        w = ExportWriter(io.BytesIO())
        w.header(small_header())
        return w

    def call(name: str, *args: Any, **kw: Any) -> tuple[str, tuple[Any, ...], dict[str, Any]]:
        return name, args, kw

    rec17, rec18 = (
        [call("record", r) for r in r17.records],
        [call("record", r) for r in r18.records],
    )
    cases: list[tuple[list[tuple[str, tuple[Any, ...], dict[str, Any]]], type[Exception], str]] = [
        ([call("header", small_header())], UsageError, "once"),
        ([call("run", "a", 1), call("checkpoint", note)], UsageError, "precede every run"),
        ([call("run", "order-18", 2, (1, "ok"))], UsageError, "the next is 0"),
        ([call("run", "b", 1), call("run", "a", 1)], UsageError, "announced 1 records"),
        ([call("run", "order-18", 0)], UsageError, "record count"),
        ([call("run", "bad id", 1)], MalformedError, "run ID"),
        ([call("run", "order-18", 2, (0, "no way"))], MalformedError, "outcome"),
        ([call("run", "order-18", 2), rec17[0]], UsageError, "expected record 1 of run order-18"),
        ([call("run", "order-18", 2), rec18[1]], UsageError, "expected record 1"),
        ([call("run", "order-18", 1), *rec18], UsageError, "records still to come"),
        ([call("run", "order-18", 2), call("end")], UsageError, "announced 2 records, 0"),
        (
            [call("run", "order-18", 2), *rec18[:2], call("run", "order-17", 4, (0, "ok"))],
            UsageError,
            "after the unsealed",
        ),
        (
            [call("run", "order-18", 3, (0, "failed"), head=r17.records[-1].hash), *rec18],
            UsageError,
            "sealed head",
        ),
        ([call("run", "order-18", 1, (0, "failed"))], UsageError, "its seal record"),
        (
            [call("run", "order-18", 2, (0, "failed")), *rec18[:2]],
            ExportChainError,
            "is not its seal record",
        ),
        ([call("run", "order-18", 3, (0, "ok")), *rec18], ExportChainError, "names the outcome"),
        ([call("run", "order-18", 3), *rec18], ExportChainError, "not the last record of a"),
        ([call("run", "order-18", 2, None, head=bytes(32))], UsageError, "no sealed head"),
        (
            [call("checkpoint", checkpoint_note(runs, 1, [LOG], origin="x"))],
            ExportFormatError,
            "origin",
        ),
        ([call("checkpoint", note), call("checkpoint", note)], ExportFormatError, "sizes increase"),
        ([call("end"), call("end")], UsageError, "once"),
        ([rec18[0]], UsageError, "started run"),
        ([call("checkpoint", note), call("end")], ExportProofError, "larger than the log"),
    ]
    for steps, exc, message in cases:
        w = started()
        with pytest.raises(exc, match=message):
            for name, args, kw in steps:
                getattr(w, name)(*args, **kw)
    # Records that are not what they claim.
    bad_link = Record("order-18", 2, r18.records[1].raw, bytes(32), r18.records[1].hash)
    w = started()
    w.run("order-18", 2)
    w.record(r18.records[0])
    with pytest.raises(UsageError, match="does not link"):
        w.record(bad_link)
    lying = Record("order-18", 2, r18.records[1].raw, r18.records[0].hash, bytes(32))
    with pytest.raises(ChainError, match="hash does not cover"):
        w.record(lying)
    control = Record(
        "order-18",
        2,
        b'{"x":"\t"}',
        r18.records[0].hash,
        chain_hash(r18.records[0].hash, b'{"x":"\t"}'),
    )
    with pytest.raises(ExportFormatError, match="below 0x20"):
        w.record(control)
    short_sig = Record(*r17.records[0].__dict__.values())  # copy, then a truncated signature
    short_sig = Record(
        short_sig.run,
        1,
        short_sig.raw,
        GENESIS,
        short_sig.hash,
        RecordSignature(RECORDS.name, RECORDS.key_id, b"x" * 63),
    )
    w = started()
    w.run("order-17", 3)
    with pytest.raises(ExportFormatError, match="not 64"):
        w.record(short_sig)


def test_write_export_needs_an_end() -> None:
    items = list(read_export(io.BytesIO(small_export())))[:-1]
    with pytest.raises(UsageError, match="without an end"):
        write_export(io.BytesIO(), items)


# --- streaming ------------------------------------------------------------------------------


def test_reader_streams() -> None:
    data = small_export()
    stream = io.BytesIO(data)
    for item in read_export(stream):
        if isinstance(item, RecordItem):
            # The first record is yielded with at most its signature line read after it.
            assert stream.tell() <= data.index(b"run order-17") < len(data)
            break


def _many_records_export(path: Path, records: int) -> None:
    with path.open("wb") as f:
        w = ExportWriter(f)
        w.header(ExportHeader(ORIGIN, vkey(LOG)))
        w.run("long", records, (0, "ok"))
        prev = GENESIS
        for seq in range(1, records + 1):
            body = Body("long", seq, 1, "Step", data={"i": seq, "pad": "p" * 100}, has_data=True)
            r = make_record(body if seq < records else seal_body("long", seq, 1, "ok"), prev)
            w.record(r)
            prev = r.hash
        w.end()


def test_memory_does_not_grow_with_records(tmp_path: Path) -> None:
    small, large = tmp_path / "small.export", tmp_path / "large.export"
    _many_records_export(small, 200)
    _many_records_export(large, 5_000)
    peaks = []
    for path in (small, large):
        with path.open("rb") as f:
            tracemalloc.start()
            s = verify_export(f)
            peaks.append(tracemalloc.get_traced_memory()[1])
            tracemalloc.stop()
        assert s.log_size == 1
    assert large.stat().st_size > 1_000_000
    assert peaks[1] < peaks[0] + 100_000, peaks


# --- Hypothesis: random journals round-trip and verify ---------------------------------------


@st.composite
def journals(draw: st.DrawFn) -> tuple[ExportHeader, list[bytes], list[Run]]:
    n = draw(st.integers(0, 6))
    ids = draw(
        st.lists(
            st.from_regex(r"[a-z0-9][a-z0-9._:@-]{0,8}", fullmatch=True),
            min_size=n,
            max_size=n,
            unique=True,
        )
    )
    runs: list[Run] = []
    sealed_ids = draw(st.permutations(ids)).copy()
    k = draw(st.integers(0, n))
    positions = {rid: p for p, rid in enumerate(sealed_ids[:k])}
    for rid in ids:
        count = draw(st.integers(1, 4))
        bodies = [
            {
                "kind": draw(st.sampled_from(["Step", "RunConcluded", "x.y-z_1"])),
                "data": draw(
                    st.recursive(
                        st.none()
                        | st.booleans()
                        | st.integers(-(2**53) + 1, 2**53 - 1)
                        | st.text(max_size=8),
                        lambda c: (
                            st.lists(c, max_size=3)
                            | st.dictionaries(st.text(max_size=4), c, max_size=3)
                        ),
                        max_leaves=6,
                    ).filter(lambda v: v is not None)  # "data": null is refused: data left out
                ),
            }
            for _ in range(count)
        ]
        signed = draw(st.lists(st.booleans(), min_size=count + 1, max_size=count + 1))
        seal = (
            RunSeal(positions[rid], draw(st.sampled_from(["ok", "failed", "Quarantined"])))
            if rid in positions
            else None
        )
        epoch = draw(st.integers(1, 3))
        outcome = None if seal is None else seal.outcome
        runs.append(Run(rid, make_run(rid, bodies, signed, epoch, outcome), seal))
    sizes = sorted(draw(st.sets(st.integers(0, k), max_size=3)))
    notes = [checkpoint_note(runs, s, [LOG, W1] if draw(st.booleans()) else [LOG]) for s in sizes]
    declare_w1 = draw(st.booleans())
    used_w1 = any(b"witness1" in n for n in notes)
    witnesses = (vkey(W1),) if declare_w1 or used_w1 else ()
    return ExportHeader(ORIGIN, vkey(LOG), (vkey(RECORDS),), witnesses), notes, runs


@settings(max_examples=40, deadline=None)
@given(journals())
def test_random_journals_round_trip_and_verify(
    j: tuple[ExportHeader, list[bytes], list[Run]],
) -> None:
    header, notes, runs = j
    data = write(header, notes, runs)
    s = verify(data, log_key=vkey(LOG), record_keys=[vkey(RECORDS)])
    assert s.runs == len(runs) and s.records == sum(len(r.records) for r in runs)
    assert s.log_size == sum(r.seal is not None for r in runs)
    assert s.signed_records == sum(r.signature is not None for run in runs for r in run.records)
    assert s.checkpoints == len(notes)
    out = io.BytesIO()
    write_export(out, read_export(io.BytesIO(data)))
    assert out.getvalue() == data


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_mldsa_export_mutations_are_refused(data: st.DataObject) -> None:
    x = mldsa_export()
    i = data.draw(st.integers(0, len(x) - 1), label="position")
    op = data.draw(st.sampled_from(["xor", "replace", "delete", "insert"]), label="op")
    if op == "xor":
        y = x[:i] + bytes([x[i] ^ data.draw(st.integers(1, 255))]) + x[i + 1 :]
    elif op == "replace":
        b = data.draw(st.integers(0, 255).filter(lambda b: b != x[i]))
        y = x[:i] + bytes([b]) + x[i + 1 :]
    elif op == "delete":
        y = x[:i] + x[i + 1 :]
    else:
        y = x[:i] + bytes([data.draw(st.integers(0, 255))]) + x[i:]
    refused(y)


# --- the worked example of docs/export-format.md --------------------------------------------


def example_export() -> bytes:
    """The export of docs/export-format.md §Worked example, regenerated deterministically."""
    origin = "example.com/log"
    log = Ed25519Signer(origin, seed("example log key"))
    rec = Ed25519Signer("example.com/records", seed("example record key"))
    wit = CosignatureV1Signer("witness.example", seed("example witness key"), clock=lambda: T)
    a1 = make_record(Body("run-a", 1, 1, "Started", data={"x": 1}, has_data=True), GENESIS, rec)
    a2 = make_record(seal_body("run-a", 2, 1, "ok"), a1.hash, rec)
    b1 = make_record(Body("run-b", 1, 1, "Started"), GENESIS)
    b2 = make_record(seal_body("run-b", 2, 1, "failed"), b1.hash)
    c1 = make_record(Body("run-c", 1, 2, "Started", case="case-1"), GENESIS)
    runs = [
        Run("run-a", (a1, a2), RunSeal(0, "ok")),
        Run("run-b", (b1, b2), RunSeal(1, "failed")),
        Run("run-c", (c1,)),
    ]
    tree = MemoryHashStore()
    tree.append(leaf_hash(a2.hash))
    n1 = sign_note(Checkpoint(origin, 1, tree.root()).format(), [log, wit])
    tree.append(leaf_hash(b2.hash))
    n2 = sign_note(Checkpoint(origin, 2, tree.root()).format(), [log])
    header = ExportHeader(origin, vkey(log), (vkey(rec),), (vkey(wit),))
    return write(header, [n1, n2], runs)


def doc_example() -> bytes:
    text = DOC.read_text(encoding="utf-8")
    m = re.search(r"<!-- example-export -->\n```text\n(.*?)```\n", text, re.S)
    assert m, "docs/export-format.md has no example-export block"
    return m.group(1).encode("utf-8")


def test_doc_example_is_real() -> None:
    data = example_export()
    assert doc_example() == data
    s = verify(data)
    assert (s.runs, s.records, s.log_size, s.checkpoint_sizes) == (3, 5, 2, (1, 2))
    # Each value the document derives by hand, recomputed here.
    text = DOC.read_text(encoding="utf-8")
    items = list(read_export(io.BytesIO(data)))
    recs = [i.record for i in items if isinstance(i, RecordItem)]
    for r in recs:
        assert r.hash.hex() in text
        assert chain_hash(r.prev_hash, r.raw) == r.hash
    rec_sig = recs[0].signature
    assert rec_sig is not None
    assert record_signature_message(recs[0].hash).hex() in text.replace(" ", "").replace("\n", "")
    assert leaf_hash(recs[1].hash).hex() in text
    assert s.log_root.hex() in text
    assert s.digest.hex() in text


@pytest.mark.parametrize(
    ("line", "old", "new", "named", "cls"),
    [
        # The table "Some single-byte changes" of docs/export-format.md §9.
        (19, b"ok", b"ol", 22, ExportChainError),
        (20, b'"x":1', b'"x":2', 20, ExportChainError),
        (24, b"sealed 1", b"sealed 0", 24, ExportFormatError),
        (26, b'"epoch":1', b'"epoch":2', 26, ExportChainError),
        (27, b"run-c", b"run-d", 28, ExportChainError),
        (11, b"hdVAE=", b"hdVAI=", 11, ExportSignatureError),
        (11, b"hdVAE=", b"hdVAF=", 11, ExportFormatError),
        (12, b"witness.example", b"witness.exampld", 12, ExportVerificationError),
        (6, b"checkpoint 302", b"checkpoint 303", 6, ExportFormatError),
        (29, b"end 2 3 5 2", b"end 2 3 5 1", 29, ExportFormatError),
        (29, b"kezi", b"kezj", 29, ExportVerificationError),
    ],
)
def test_doc_example_changes(line: int, old: bytes, new: bytes, named: int, cls: type) -> None:
    lines = lines_of(example_export())
    assert old in lines[line - 1]
    lines[line - 1] = lines[line - 1].replace(old, new, 1)
    e = refused(join(lines))
    assert type(e) is cls and str(e).startswith(f"line {named}: "), str(e)
    assert f"`{old.decode()}` → `{new.decode()}`" in DOC.read_text(encoding="utf-8")
    if line != len(lines):  # the doc: the same line, the end line's counts and digest recomputed
        e = refused(redigest(join(lines)))
        assert type(e) is cls and str(e).startswith(f"line {named}: "), str(e)


def test_verification_error_classes() -> None:
    # The error hierarchy callers branch on.
    assert issubclass(ExportFormatError, MalformedError)
    for cls in (ExportVerificationError, ExportChainError, ExportSignatureError, ExportProofError):
        assert issubclass(cls, VerificationError)
    assert issubclass(ExportChainError, ChainError)
    assert issubclass(ExportProofError, ProofError)
