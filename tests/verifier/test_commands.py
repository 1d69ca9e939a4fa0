"""The offline verifier (package verifier, command ``tlog-verify``).

As docs/auditor-guide.md documents it, on the formats of docs/export-format.md,
https://c2sp.org/tlog-proof, https://c2sp.org/tlog-checkpoint and https://c2sp.org/tlog-policy.

The issue's acceptance, tested here on exports and proofs written by the real journal store
(``store.open``, ``store.export.export_store``, ``tlog-store prove`` and ``read --json``):

1. **Exports verify, and every tampering fails with exit 1 and the place named**: a journal
   with sealed, unsealed, signed and unsigned runs and three checkpoints cosigned by two or three
   witnesses verifies (exit 0, counts in the report); then every single-byte change at more
   than 2,000 positions spread over every section (header, checkpoints, run, record and sig
   lines, end line), every line deleted, duplicated and moved, a run removed (plainly, and as a
   forgery with counts and digest recomputed), a checkpoint swapped for one of another log —
   each gives exit 1 with a location, never 0, never an exception.
2. **tlog-proof files from tlog-store prove verify; mutated ones fail** (every byte), with and
   without the run's records (also mutated byte by byte and line by line).
3. **Policies**: quorum met, missed by one, unknown witnesses ignored, a witness's bad
   cosignature, cosignatures too old or from the future — on exports and on checkpoints.

Also: --since (same size, smaller, rollback, fork, another log), record keys, the consistency
verb, usage errors (exit 2), the JSON schema, the progress bar, the same report for every
``--jobs``, the :class:`verifier.export.Frontier` against a full tree, that the verifier never
imports store, witness or a database driver, and that the real command never prints a
traceback.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import random
import re
import subprocess
import sys
import tracemalloc
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import store.cli as store_cli
import verifier
import verifier.export as verifier_export
from store.api import Append, JournalStore
from store.export import export_store
from store.open import init_store, open_store
from tests import clirunner
from tests.store.helpers import T0, FakeClock
from tlog.checkpoint import Checkpoint
from tlog.cosignature import CosignatureV1Signer
from tlog.encoding import b64encode
from tlog.export import ExportHeader, ExportSummary, ExportWriter
from tlog.export import verify_export as tlog_verify_export
from tlog.journal import GENESIS, Body, make_record, seal_body
from tlog.keys import SignerKey, format_vkey, generate_key
from tlog.merkle import EMPTY_ROOT, MemoryHashStore, consistency_proof, leaf_hash
from tlog.note import Ed25519Signer, Signature, add_signatures, parse_note, sign_note
from tlog.policy import Policy, TimePolicy
from verifier import cli
from verifier.export import _scan_sealed_heads as scan_sealed_heads
from verifier.export import verify_export_file
from verifier.report import SCHEMA, Failure, InputError, Report
from verifier.since import Frontier

ORIGIN = "example.com/journal"
LOG_ORIGIN = f"{ORIGIN}/default"
REPO = Path(__file__).resolve().parents[2]
TLOG_VERIFY = Path(sys.executable).parent / "tlog-verify"


def sha(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


LOG_KEY = generate_key(ORIGIN, seed=sha(b"verifier test: log key"))
OTHER_KEY = generate_key(ORIGIN, seed=sha(b"verifier test: another log"))
LOG_SIGNER = Ed25519Signer(LOG_ORIGIN, LOG_KEY.secret)
LOG_VKEY = format_vkey(LOG_SIGNER.verifier())
RECORD_SIGNER = Ed25519Signer("example.com/records", sha(b"verifier test: record key"))
RECORD_VKEY = format_vkey(RECORD_SIGNER.verifier())
OTHER_RECORD_VKEY = format_vkey(Ed25519Signer("example.com/records", sha(b"other")).verifier())

TS = T0 + 1000
"""The cosignature timestamps are TS + 10 (size 1), TS + 20 (size 3), TS + 30 (size 4)."""
NOW = TS + 100
"""The verifier's clock in these tests (``--now``): every cosignature is 70-90 s old."""


def witness(name: str) -> CosignatureV1Signer:
    return CosignatureV1Signer(name, sha(name.encode()))


W1, W2, W3, W4 = (witness(f"witness.example/{n}") for n in ("one", "two", "three", "four"))
V1, V2, V3, V4 = (format_vkey(w.verifier()) for w in (W1, W2, W3, W4))


def policy_text(*witnesses: tuple[str, str], quorum: str = "", log: bool = True) -> str:
    """A tlog-policy: the log, the named witnesses, and a group 'q' of ``quorum`` (k)."""
    lines = [f"log {LOG_VKEY}"] if log else []
    lines += [f"witness {name} {vkey}" for name, vkey in witnesses]
    if quorum:
        lines.append(f"group q {quorum} {' '.join(name for name, _ in witnesses)}")
        lines.append("quorum q")
    else:
        lines.append("quorum none")
    return "".join(line + "\n" for line in lines)


# --- the journal -----------------------------------------------------------------------------


@dataclass
class Journal:
    """A store, its export, proofs and records, written once per test module."""

    dir: Path
    db: str
    export: bytes
    export_path: Path
    policy_path: Path  # log + W1 + W2, quorum 2 of 2
    notes: list[bytes]  # the kept checkpoints, by size
    proof_a: bytes  # tlog-store prove run-a
    proof_c: bytes
    records_a: bytes  # tlog-store read run-a --json
    records_c: bytes
    store_root: dict[int, bytes]
    store_proofs: dict[tuple[int, int], list[bytes]]

    def write(self, name: str, data: bytes | str) -> str:
        path = self.dir / name
        path.write_bytes(data.encode() if isinstance(data, str) else data)
        return str(path)


def cosign(store: JournalStore, note: bytes, ts: int, *witnesses: CosignatureV1Signer) -> bytes:
    text, _ = parse_note(note)
    sigs = [Signature(w.name, w.key_id, w.sign_at(text, ts)) for w in witnesses]
    keys = [format_vkey(w.verifier()) for w in witnesses]
    return store.add_cosignatures(add_signatures(note, sigs), witness_keys=keys)


def store_cli_output(argv: list[str]) -> bytes:
    """Run ``tlog-store`` in-process and return what it wrote on standard output."""
    status, out, _ = clirunner.call_main(store_cli.main, argv)
    assert status == 0
    return out


def build(dir: Path) -> Journal:
    db = str(dir / "journal.db")
    init_store(db=db, origin=ORIGIN, key=LOG_KEY)
    Path(db + ".key").write_text(LOG_KEY.format() + "\n")
    clock = FakeClock()
    signed = open_store(db=db, key=LOG_KEY, record_signer=RECORD_SIGNER, clock=clock)
    plain = open_store(db=db, key=LOG_KEY, clock=clock)
    try:
        e = signed.acquire("run-a", "w", 60).epoch
        signed.append(
            e,
            [
                Append("run-a", "Started", {"input": [1, "ü → ✓", None]}, case="c-1"),
                Append("run-a", "EffectStarted", {"tool": "mail"}, effect_key="mail:1"),
                Append("run-a", "RunConcluded", {"outcome": "succeeded"}),
            ],
        )
        signed.seal("run-a", e, "succeeded")
        cosign(plain, plain.sign_checkpoint(), TS + 10, W1, W2, W3)  # size 1
        e = plain.acquire("run-b", "w", 60).epoch
        plain.append(e, [Append("run-b", "Note", 'a "quote" \\ and a tab\t')])
        plain.append(e, [Append("run-b", "RunConcluded", {"outcome": "failed"})])
        plain.seal("run-b", e, "failed")
        e = signed.acquire("run-c", "w", 60).epoch
        signed.append(e, [Append("run-c", "Note", {"n": -(2**53 - 1)})])
        signed.seal("run-c", e, "cancelled")
        cosign(plain, plain.sign_checkpoint(), TS + 20, W1, W2)  # size 3
        e = plain.acquire("run-d", "w", 60).epoch
        plain.append(e, [Append("run-d", "Note", [])])
        plain.seal("run-d", e, "succeeded")
        cosign(plain, plain.sign_checkpoint(), TS + 30, W1, W2, W3)  # size 4
        e = plain.acquire("run-e", "w", 60).epoch  # sealed after the last checkpoint
        plain.append(e, [Append("run-e", "Note", {"late": True})])
        plain.seal("run-e", e, "succeeded")
        e = signed.acquire("run-f", "w", 60).epoch  # unsealed, signed
        signed.append(e, [Append("run-f", "Step", {"i": i}) for i in range(2)])
        e = plain.acquire("A-early", "w", 60).epoch  # unsealed, sorts first
        plain.append(e, [Append("A-early", "Note")])

        out = io.BytesIO()
        export_store(plain, out, witness_keys=[V1, V2, V3], record_keys=[RECORD_VKEY])
        notes = plain.published()
        roots = {n: plain.tree_root(n) for n in range(6)}
        proofs = {(m, n): plain.consistency_proof(m, n) for m in range(1, 6) for n in range(m, 6)}
    finally:
        signed.close()
        plain.close()
    export = out.getvalue()
    export_path = dir / "journal.export"
    export_path.write_bytes(export)
    policy_path = dir / "two.policy"
    policy_path.write_text(policy_text(("w1", V1), ("w2", V2), quorum="2"))
    for run in ("run-a", "run-c"):
        status = store_cli.main(["prove", run, "--db", db, "--out", str(dir / f"{run}.proof")])
        assert status == 0
    return Journal(
        dir=dir,
        db=db,
        export=export,
        export_path=export_path,
        policy_path=policy_path,
        notes=notes,
        proof_a=(dir / "run-a.proof").read_bytes(),
        proof_c=(dir / "run-c.proof").read_bytes(),
        records_a=store_cli_output(["read", "run-a", "--json", "--db", db]),
        records_c=store_cli_output(["read", "run-c", "--json", "--db", db]),
        store_root=roots,
        store_proofs=proofs,
    )


@pytest.fixture(scope="module")
def journal(tmp_path_factory: pytest.TempPathFactory) -> Journal:
    return build(tmp_path_factory.mktemp("verifier"))


# --- running the command ---------------------------------------------------------------------


@dataclass
class Run:
    status: int
    out: bytes
    err: bytes

    @property
    def report(self) -> dict[str, Any]:
        obj = json.loads(self.out)
        assert isinstance(obj, dict)
        return obj

    @property
    def failure(self) -> dict[str, Any]:
        f = self.report["failure"]
        assert isinstance(f, dict)
        return f


def run_main(capsysbinary: pytest.CaptureFixture[bytes], *argv: str) -> Run:
    """``tlog-verify`` in-process; any exception escaping main fails the test."""
    status = cli.main(list(argv))
    captured = capsysbinary.readouterr()
    return Run(status, captured.out, captured.err)


def verify_export(
    capsysbinary: pytest.CaptureFixture[bytes], path: str, policy: str, *extra: str
) -> Run:
    return run_main(
        capsysbinary,
        "export",
        path,
        "--policy",
        policy,
        "--now",
        str(NOW),
        "--no-progress",
        "--jobs",
        "1",
        "--json",
        *extra,
    )


# --- export structure helpers ----------------------------------------------------------------


def export_lines(data: bytes) -> list[bytes]:
    """The export's lines, each with its LF."""
    return data.splitlines(keepends=True)


def end_line(body: bytes) -> bytes:
    """Recompute the end line for ``body`` (everything before it): counts and digest."""
    lines = export_lines(body)
    checkpoints = sum(1 for x in lines if x.startswith(b"checkpoint "))
    run_lines = [x for x in lines if x.startswith(b"run ")]
    records = sum(1 for x in lines if len(x) > 45 and x[44:45] == b" " and x[:4] != b"sig ")
    # Record lines inside checkpoint notes do not exist: notes hold no 44-character token
    # followed by a space at column 45 (origin, size, root lines and signature lines).
    sealed = sum(1 for x in run_lines if b" sealed " in x)
    digest = b64encode(sha(body)).encode()
    return b"end %d %d %d %d %s\n" % (checkpoints, len(run_lines), records, sealed, digest)


def with_end(data: bytes) -> bytes:
    """``data`` (an export, possibly edited) with its end line recomputed."""
    body = data[: data.rindex(b"end ")]
    return body + end_line(body)


@dataclass
class Block:
    """A run block: its run line and record (and sig) lines."""

    start: int  # byte offset of the run line
    stop: int
    run: str
    sealed: bool


def run_blocks(data: bytes) -> list[Block]:
    blocks: list[Block] = []
    pos = 0
    for line in export_lines(data):
        if line.startswith((b"run ", b"end ")):
            if blocks:
                blocks[-1].stop = pos
            if line.startswith(b"run "):
                tokens = line.split()
                blocks.append(Block(pos, -1, tokens[1].decode(), b"sealed" in tokens))
        pos += len(line)
    return blocks


def checkpoint_spans(data: bytes) -> list[tuple[int, int, bytes]]:
    """(start, stop, note) of each ``checkpoint <L>`` item."""
    spans = []
    for m in re.finditer(rb"^checkpoint (\d+)\n", data, re.M):
        n = int(m.group(1))
        spans.append((m.start(), m.end() + n, data[m.end() : m.end() + n]))
    return spans


def line_of(data: bytes, offset: int) -> int:
    return data.count(b"\n", 0, offset) + 1


# --- 1. exports: valid -----------------------------------------------------------------------


def test_export_written_by_the_store_verifies_with_counts(
    journal: Journal, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    r = verify_export(capsysbinary, str(journal.export_path), str(journal.policy_path))
    assert r.status == 0, r.err
    rep = r.report
    assert rep["schema"] == SCHEMA and rep["valid"] is True and rep["failure"] is None
    checks = {c["id"]: c["count"] for c in rep["checks"]}
    assert checks == {
        "export-format": len(export_lines(journal.export)),
        "log-key": 1,
        "checkpoint-signatures": 4 + 3 + 4,  # log + W1 W2 W3, log + W1 W2, log + W1 W2 W3
        "witness-quorum": 1,  # the last checkpoint (the default --quorum-scope last)
        "time-rules": 6,  # the cosignatures of the policy's witnesses: W1 and W2, 3 times
        "record-chain": 16,  # 11 appended, and the 5 sealed runs' seal records
        "record-signatures": 8,  # run-a (3 + its seal record), run-c (1 + seal), run-f (2)
        "sealed-heads": 5,
        "checkpoint-roots": 3,
        "checkpoint-consistency": 2,
    }
    facts = rep["facts"]
    assert facts["origin"] == LOG_ORIGIN and facts["log_key"] == LOG_VKEY
    assert (facts["log_size"], facts["runs"], facts["sealed_runs"]) == (5, 7, 5)
    assert (facts["unsealed_runs"], facts["uncovered_sealed_runs"]) == (2, 1)
    assert facts["log_root"] == b64encode(journal.store_root[5])
    assert [c["size"] for c in facts["checkpoints"]] == [1, 3, 4]
    assert [c["witnesses"] for c in facts["checkpoints"]] == [["w1", "w2"]] * 3
    assert r.err == b""
    # The human report says the same.
    status = cli.main(
        [
            "export",
            str(journal.export_path),
            "--policy",
            str(journal.policy_path),
            "--now",
            str(NOW),
            "--no-progress",
        ]
    )
    text = capsysbinary.readouterr().out.decode()
    assert status == 0
    assert text.startswith("tlog-verify export: VALID\n")
    assert re.search(r"record hashes and chain links\s+16 records\n", text)
    assert re.search(r"the export.s log key is a log of the policy\s+1 key\n", text)
    assert "2 unsealed runs are in no log" in text
    assert "1 sealed run is beyond the last checkpoint (size 4)" in text


def test_export_verifies_with_flags_instead_of_a_policy_file(
    journal: Journal, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    r = run_main(
        capsysbinary,
        "export",
        str(journal.export_path),
        "--log-vkey",
        LOG_VKEY,
        "--witness",
        V1,
        "--witness",
        V2,
        "--quorum",
        "2",
        "--now",
        str(NOW),
        "--json",
    )
    assert r.status == 0, r.err
    assert r.report["facts"]["checkpoints"][0]["witnesses"] == [
        "witness.example/one",
        "witness.example/two",
    ]
    # A policy with no log line takes the log from --log-vkey.
    nolog = journal.write("nolog.policy", policy_text(("w1", V1), quorum="1", log=False))
    r = verify_export(capsysbinary, str(journal.export_path), nolog, "--log-vkey", LOG_VKEY)
    assert r.status == 0, r.err
    r = verify_export(capsysbinary, str(journal.export_path), nolog)
    assert r.status == 2 and b"lists no logs" in r.err


# --- 1. exports: every single-byte change ----------------------------------------------------


def item_start_lines(data: bytes) -> list[int]:
    """For each byte, the first line of the item holding it: a checkpoint's ``checkpoint``
    line for bytes of its note, the record line for bytes of a sig line, else its own line."""
    starts = [0] * len(data)
    spans = checkpoint_spans(data)
    pos = 0
    prev_line = 0
    for number, line in enumerate(export_lines(data), 1):
        first = prev_line if line.startswith(b"sig ") else number
        for i in range(pos, pos + len(line)):
            starts[i] = first
        prev_line = number
        pos += len(line)
    for start, stop, _ in spans:
        first = line_of(data, start)
        for i in range(start, stop):
            starts[i] = first
    return starts


def section_of(data: bytes, pos: int) -> str:
    """Which section of the export holds byte ``pos``."""
    for start, stop, _ in checkpoint_spans(data):
        if start <= pos < stop:
            return "checkpoint"
    line_start = data.rfind(b"\n", 0, pos) + 1
    line = data[line_start : data.index(b"\n", pos) + 1]
    if line.startswith((b"tlog-toolkit", b"origin ", b"log-key ", b"record-key ", b"witness-")):
        return "header"
    for prefix, name in ((b"run ", "run"), (b"sig ", "sig"), (b"end ", "end")):
        if line.startswith(prefix):
            return name
    return "record"


BYTE_CHUNKS = 6
BYTE_SAMPLE = 2200


def byte_positions(data: bytes) -> list[int]:
    """A seeded sample of BYTE_SAMPLE distinct positions (of ~4,500), in order."""
    return sorted(random.Random("byte positions").sample(range(len(data)), BYTE_SAMPLE))


def test_single_byte_positions_cover_every_section(journal: Journal) -> None:
    data = journal.export
    positions = byte_positions(data)
    assert len(set(positions)) == BYTE_SAMPLE >= 2000
    counts: dict[str, int] = {}
    for p in positions:
        counts[section_of(data, p)] = counts.get(section_of(data, p), 0) + 1
    assert set(counts) == {"header", "checkpoint", "run", "record", "sig", "end"}
    assert min(counts.values()) >= 20, counts


@pytest.mark.parametrize("chunk", range(BYTE_CHUNKS))
def test_every_single_byte_change_fails_naming_its_line(
    journal: Journal, capsysbinary: pytest.CaptureFixture[bytes], chunk: int
) -> None:
    """2,200 positions sampled over every section (over the chunks), each byte changed once
    (xor a seeded non-zero value): exit 1, a location no earlier than the changed item."""
    data = journal.export
    starts = item_start_lines(data)
    path = journal.dir / f"byte-{chunk}.export"
    policy = str(journal.policy_path)
    seen: dict[str, int] = {}
    for pos in byte_positions(data)[chunk::BYTE_CHUNKS]:
        mask = random.Random(pos).randrange(1, 256)
        mutated = bytearray(data)
        mutated[pos] ^= mask
        path.write_bytes(bytes(mutated))
        r = verify_export(capsysbinary, str(path), policy)
        where = f"byte {pos} ({section_of(data, pos)}) ^ {mask:#04x}: {r.err!r}"
        assert r.status == 1, where
        f = r.failure
        assert f["input"] == "export" and isinstance(f["line"], int), where
        assert f["line"] >= starts[pos], where
        assert f"export line {f['line']}".encode() in r.err, where
        seen[f["kind"]] = seen.get(f["kind"], 0) + 1
    # The changes are caught by many different checks, not all by the digest.
    assert {"malformed", "chain", "signature", "verification"} <= set(seen)


def test_every_line_deleted_duplicated_or_moved_fails(
    journal: Journal, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    lines = export_lines(journal.export)
    path = journal.dir / "lines.export"
    policy = str(journal.policy_path)
    rng = random.Random(7)
    tried = 0
    for i in range(len(lines)):
        deleted = lines[:i] + lines[i + 1 :]
        duplicated = lines[: i + 1] + lines[i:]
        j = rng.choice([k for k in range(len(lines)) if k != i])
        moved = lines[:i] + lines[i + 1 :]
        moved.insert(j, lines[i])
        swapped = list(lines)
        if i + 1 < len(lines):
            swapped[i], swapped[i + 1] = swapped[i + 1], swapped[i]
        for what, variant in (
            ("deleted", deleted),
            ("duplicated", duplicated),
            ("moved", moved),
            ("swapped", swapped),
        ):
            data = b"".join(variant)
            if data == journal.export:
                continue  # moving a line next to an identical one changes nothing
            path.write_bytes(data)
            r = verify_export(capsysbinary, str(path), policy)
            assert r.status == 1, f"line {i + 1} {what}: {r.err!r}"
            assert isinstance(r.failure["line"], int), f"line {i + 1} {what}"
            tried += 1
    assert tried > 3 * len(lines)


@st.composite
def edits(draw: st.DrawFn, size: int) -> tuple[int, int, bytes]:
    """A slice [start, stop) of a file of ``size`` bytes and the bytes that replace it."""
    start = draw(st.integers(0, size))
    stop = draw(st.integers(start, min(size, start + 64)))
    return start, stop, draw(st.binary(max_size=64))


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_arbitrary_edits_of_an_export_or_a_proof_never_verify(
    journal: Journal, capsysbinary: pytest.CaptureFixture[bytes], data: st.DataObject
) -> None:
    """Hypothesis: a slice replaced by other bytes (insertions and deletions included)."""
    which = data.draw(st.sampled_from(["export", "proof"]))
    original = journal.export if which == "export" else journal.proof_a
    start, stop, repl = data.draw(edits(len(original)))
    edited = original[:start] + repl + original[stop:]
    if edited == original:
        return
    path = journal.write(f"edited.{which}", edited)
    if which == "export":
        r = verify_export(capsysbinary, path, str(journal.policy_path))
    else:
        r = verify_proof(capsysbinary, path, journal.write("edit-all.policy", ALL_POLICY))
    assert r.status == 1, (start, stop, repl, r.err)
    assert r.failure["kind"] != "internal"


def test_truncated_exports_fail(
    journal: Journal, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    path = journal.dir / "truncated.export"
    data = journal.export
    for cut in sorted({0, 1, 22, 23, len(data) // 2, len(data) - 60, len(data) - 1}):
        path.write_bytes(data[:cut])
        r = verify_export(capsysbinary, str(path), str(journal.policy_path))
        assert r.status == 1, (cut, r.err)
        assert r.failure["kind"] == "malformed"


# --- 1. exports: runs removed, checkpoints swapped -------------------------------------------


def test_a_removed_run_fails(journal: Journal, capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    data = journal.export
    path = journal.dir / "removed.export"
    for block in run_blocks(data):
        path.write_bytes(data[: block.start] + data[block.stop :])
        r = verify_export(capsysbinary, str(path), str(journal.policy_path))
        assert r.status == 1, block.run
        assert isinstance(r.failure["line"], int)


def remove_sealed_run(data: bytes, run: str) -> bytes:
    """The forgery: remove a sealed run, renumber the later positions, recompute the end."""
    blocks = run_blocks(data)
    block = next(b for b in blocks if b.run == run)
    assert block.sealed
    out = data[: block.start]
    rest = data[block.stop : data.rindex(b"end ")]

    def renumber(m: re.Match[bytes]) -> bytes:
        return m.group(1) + b"%d" % (int(m.group(2)) - 1) + m.group(3)

    rest = re.sub(rb"^(run \S+ \d+ sealed )(\d+)( )", renumber, rest, flags=re.M)
    return with_end(out + rest + b"end \n")


def test_forged_removal_of_a_covered_sealed_run_fails_at_the_checkpoint(
    journal: Journal, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    data = journal.export
    spans = checkpoint_spans(data)
    path = journal.dir / "forged.export"
    for run, size_index in (("run-a", 0), ("run-b", 1), ("run-d", 2)):
        forged = remove_sealed_run(data, run)
        path.write_bytes(forged)
        r = verify_export(capsysbinary, str(path), str(journal.policy_path))
        assert r.status == 1, run
        f = r.failure
        assert f["kind"] == "proof", (run, f)
        assert "not the root of the log rebuilt from the sealed runs" in f["message"]
        assert f["line"] == line_of(data, spans[size_index][0])
        assert f["checkpoint_size"] == [1, 3, 4][size_index]


def test_forged_removal_of_an_unsealed_run_is_not_detectable_by_design(
    journal: Journal, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    """docs/export-format.md §7: runs no checkpoint covers are protected by their chains
    only; the report says so."""
    data = journal.export
    block = next(b for b in run_blocks(data) if b.run == "A-early")
    path = journal.dir / "no-a-early.export"
    path.write_bytes(with_end(data[: block.start] + data[block.stop :]))
    r = verify_export(capsysbinary, str(path), str(journal.policy_path))
    assert r.status == 0
    assert any("1 unsealed run is in no log" in n for n in r.report["notes"])


@contextlib.contextmanager
def one_sealed_run(db: str, origin: str, key: SignerKey) -> Iterator[JournalStore]:
    """A new SQLite store at ``db`` holding one sealed run, ``run-a``, of one record."""
    init_store(db=db, origin=origin, key=key)
    s = open_store(db=db, key=key)
    try:
        e = s.acquire("run-a", "w", 60).epoch
        s.append(e, [Append("run-a", "Note")])
        s.seal("run-a", e, "ok")
        yield s
    finally:
        s.close()


def other_log_note(dir: Path, key: SignerKey, origin: str) -> bytes:
    """A checkpoint of size 1 of another log (another key, maybe another origin)."""
    with one_sealed_run(str(dir / f"other-{uuid.uuid4().hex}.db"), origin, key) as s:
        return s.sign_checkpoint()


def swap_checkpoint(data: bytes, index: int, note: bytes) -> bytes:
    start, stop, _ = checkpoint_spans(data)[index]
    return data[:start] + b"checkpoint %d\n" % len(note) + note + data[stop:]


def test_a_checkpoint_swapped_for_one_of_another_log_fails(
    journal: Journal, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    path = journal.dir / "swapped.export"
    for key, origin in ((OTHER_KEY, ORIGIN), (OTHER_KEY, "example.org/other"), (LOG_KEY, "x.y")):
        note = other_log_note(journal.dir, key, origin)
        for index in range(3):
            for fix_end in (False, True):
                data = swap_checkpoint(journal.export, index, note)
                if fix_end:
                    data = with_end(data)
                path.write_bytes(data)
                r = verify_export(capsysbinary, str(path), str(journal.policy_path))
                assert r.status == 1, (origin, index, fix_end, r.err)
                assert r.failure["line"] is not None
                start = checkpoint_spans(data)[index][0]
                assert r.failure["line"] >= line_of(data, start)


def test_an_export_of_another_log_fails_at_its_log_key(
    journal: Journal, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    with one_sealed_run(str(journal.dir / "another.db"), ORIGIN, OTHER_KEY) as s:
        s.sign_checkpoint()
        out = io.BytesIO()
        export_store(s, out)
    path = journal.write("another.export", out.getvalue())
    r = verify_export(capsysbinary, path, str(journal.policy_path))
    assert r.status == 1
    assert (r.failure["kind"], r.failure["line"]) == ("untrusted-key", 3)
    assert b"is not a log of the policy" in r.err


def test_an_export_without_checkpoints_says_nothing_is_signed_by_the_log(
    journal: Journal, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    # docs/export-format.md §7: the format allows it, and the report says plainly that the
    # log signed nothing in it; only --max-age (a fresh checkpoint required) refuses it.
    data = journal.export
    spans = checkpoint_spans(data)
    stripped = with_end(data[: spans[0][0]] + data[spans[-1][1] :])
    path = journal.write("bare.export", stripped)
    r = verify_export(capsysbinary, path, str(journal.policy_path))
    assert r.status == 0, r.err
    facts = r.report["facts"]
    assert facts["checkpoints"] == [] and facts["uncovered_sealed_runs"] == facts["sealed_runs"]
    assert r.report["notes"][0].startswith(
        "the export carries no checkpoint: nothing in it is signed by the log key"
    )
    checks = {c["id"]: c["count"] for c in r.report["checks"]}
    assert checks["checkpoint-signatures"] == 0 and "witness-quorum" not in checks
    r = verify_export(capsysbinary, path, str(journal.policy_path), "--max-age", "3600")
    assert r.status == 1
    assert r.failure["kind"] == "policy" and "no checkpoint" in r.failure["message"]


# --- 3. policies on exports ------------------------------------------------------------------


def test_export_policy_quorum_met_missed_by_one_and_unknown_witnesses(
    journal: Journal, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    export = str(journal.export_path)
    first_cp = line_of(journal.export, checkpoint_spans(journal.export)[0][0])
    last_cp = line_of(journal.export, checkpoint_spans(journal.export)[-1][0])
    # Met: 2 of W1, W2 (W3's lines, declared by the export, are not the policy's: ignored).
    assert verify_export(capsysbinary, export, str(journal.policy_path)).status == 0
    one = journal.write("one.policy", policy_text(("w1", V1), quorum="1"))
    r = verify_export(capsysbinary, export, one)
    assert r.status == 0
    assert [c["witnesses"] for c in r.report["facts"]["checkpoints"]] == [["w1"]] * 3
    # Missed by one: 3 of W1, W2, W4 (W4 never cosigned).
    three = journal.write(
        "three.policy", policy_text(("w1", V1), ("w2", V2), ("w4", V4), quorum="3")
    )
    # No checkpoint meets it: the default refuses the last one, --quorum-scope all the first.
    r = verify_export(capsysbinary, export, three, "--quorum-scope", "all")
    assert r.status == 1
    f = r.failure
    assert (f["kind"], f["line"], f["checkpoint_size"]) == ("policy", first_cp, 1)
    assert "group q has 2 of 3" in f["message"]
    r = verify_export(capsysbinary, export, three)
    assert r.status == 1
    f = r.failure
    assert (f["kind"], f["line"], f["checkpoint_size"]) == ("policy", last_cp, 4)
    assert "group q has 2 of 3" in f["message"]
    # A witness the policy lists but nobody declared or used: still 2 of 3 short by one.
    none = journal.write("nobody.policy", policy_text(("w4", V4), quorum="1"))
    assert verify_export(capsysbinary, export, none).status == 1


SHORT_NOTE = (
    "1 earlier checkpoint (size 3) does not meet the witness quorum: the quorum was required "
    "of the last checkpoint only, which covers the earlier ones by consistency; "
    "--quorum-scope all refuses such an export"
)


def _quorum_check(r: Run) -> tuple[int, str]:
    c = next(c for c in r.report["checks"] if c["id"] == "witness-quorum")
    return c["count"], c["description"]


def test_export_quorum_scope_last_is_the_default_and_all_is_strict(
    journal: Journal, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    """W3 cosigned the checkpoints of sizes 1 and 4, not 3 (one signed before publishing)."""
    export = str(journal.export_path)
    w13 = journal.write("w13.policy", policy_text(("w1", V1), ("w3", V3), quorum="all"))
    r = verify_export(capsysbinary, export, w13, "--quorum-scope", "all")
    assert r.status == 1
    assert r.failure["checkpoint_size"] == 3
    assert r.failure["line"] == line_of(journal.export, checkpoint_spans(journal.export)[1][0])
    for extra in ((), ("--quorum-scope", "last")):
        r = verify_export(capsysbinary, export, w13, *extra)
        assert r.status == 0, r.err
        assert SHORT_NOTE in r.report["notes"]
        assert _quorum_check(r) == (
            1,
            "witness quorum 'q' of the policy met by the last checkpoint",
        )
    # Every checkpoint meets the two-of-two policy: no such note; "all" counts all three.
    r = verify_export(capsysbinary, export, str(journal.policy_path))
    assert r.status == 0 and not [n for n in r.report["notes"] if "earlier checkpoint" in n]
    r = verify_export(capsysbinary, export, str(journal.policy_path), "--quorum-scope", "all")
    assert _quorum_check(r) == (3, "witness quorum 'q' of the policy met")


def test_export_whose_last_checkpoint_lacks_the_quorum_is_invalid_by_default(
    journal: Journal, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    """W3's line deleted from the last checkpoint (size 4): the size-1 checkpoint still meets
    the W1+W3 quorum, but an earlier cosigned checkpoint does not stand in for the last."""
    data = journal.export
    start, stop, note = checkpoint_spans(data)[-1]
    i = note.index(f"— {W3.name} ".encode())
    cut = note[:i] + note[note.index(b"\n", i) + 1 :]
    head = data[:start] + f"checkpoint {len(cut)}\n".encode()
    path = journal.write("last-uncosigned.export", with_end(head + cut + data[stop:]))
    w13 = journal.write("w13.policy", policy_text(("w1", V1), ("w3", V3), quorum="all"))
    for extra, size in (((), 4), (("--quorum-scope", "last"), 4), (("--quorum-scope", "all"), 3)):
        r = verify_export(capsysbinary, path, w13, *extra)
        assert r.status == 1, extra
        assert (r.failure["kind"], r.failure["checkpoint_size"]) == ("policy", size), extra
    # The cut itself is sound: the two-of-two policy (W1, W2 still there) accepts it.
    assert verify_export(capsysbinary, path, str(journal.policy_path)).status == 0


def corrupt_signature_line(note: bytes, name: str) -> bytes:
    """Change one base64 character in the middle of ``name``'s signature (still canonical)."""
    prefix = f"— {name} ".encode()
    start = note.index(prefix) + len(prefix)
    pos = start + 30
    repl = b"B" if note[pos : pos + 1] != b"B" else b"C"
    return note[:pos] + repl + note[pos + 1 :]


def test_export_with_a_bad_cosignature_fails_at_its_line(
    journal: Journal, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    data = journal.export
    start, stop, note = checkpoint_spans(data)[2]
    bad = corrupt_signature_line(note, W2.name)
    forged = with_end(data[: stop - len(note)] + bad + data[stop:])
    path = journal.write("badcosig.export", forged)
    r = verify_export(capsysbinary, path, str(journal.policy_path))
    assert r.status == 1
    assert r.failure["kind"] == "signature"
    assert r.failure["line"] == line_of(forged, forged.index(f"— {W2.name} ".encode(), start))


def test_export_time_rules(journal: Journal, capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    export, policy = str(journal.export_path), str(journal.policy_path)
    spans = checkpoint_spans(journal.export)

    def run(now: int, *extra: str) -> Run:
        return run_main(
            capsysbinary, "export", export, "--policy", policy, "--now", str(now), "--json", *extra
        )

    # Too old: --max-age judges the last checkpoint only (cosigned at TS + 30, 70 s ago).
    assert run(NOW, "--max-age", "80").status == 0
    r = run(NOW, "--max-age", "60")
    assert r.status == 1
    f = r.failure
    assert (f["kind"], f["checkpoint_size"]) == ("policy", 4)
    assert f["line"] == line_of(journal.export, spans[2][0])
    assert "older than max_age 60s" in f["message"]
    # From the future: at TS - 45 the size-1 cosignatures (TS + 10) are 55 s ahead, within
    # the default 60 s of skew; those of size 3 (TS + 20) are 65 s ahead and do not count —
    # which --quorum-scope all refuses there; the default judges the quorum of the last
    # (size 4, TS + 30: 75 s ahead).
    r = run(TS - 45, "--quorum-scope", "all")
    assert r.status == 1
    assert (r.failure["kind"], r.failure["checkpoint_size"]) == ("policy", 3)
    assert "in the future" in r.failure["message"]
    r = run(TS - 45)
    assert r.status == 1
    assert (r.failure["kind"], r.failure["checkpoint_size"]) == ("policy", 4)
    assert "in the future" in r.failure["message"]
    assert run(TS - 45, "--max-skew", "80").status == 0
    assert run(TS - 45, "--max-skew", "80", "--quorum-scope", "all").status == 0
    checks = {c["id"] for c in run(NOW).report["checks"]}
    assert "time-rules" in checks


# --- record keys -----------------------------------------------------------------------------


def test_export_record_keys(journal: Journal, capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    export, policy = str(journal.export_path), str(journal.policy_path)
    r = verify_export(capsysbinary, export, policy, "--record-key", RECORD_VKEY)
    assert r.status == 0 and r.report["facts"]["record_keys_trusted"] is True
    r = verify_export(capsysbinary, export, policy, "--record-key", OTHER_RECORD_VKEY)
    assert r.status == 1
    assert (r.failure["kind"], r.failure["line"]) == ("untrusted-key", 4)
    r = verify_export(capsysbinary, export, policy, "--require-record-signatures")
    assert r.status == 1
    f = r.failure
    assert (f["kind"], f["run"], f["seq"]) == ("verification", "run-b", 1)
    assert f["line"] == line_of(journal.export, journal.export.index(b'"run":"run-b","seq":1'))
    r = verify_export(capsysbinary, export, policy, "--record-key", "not a vkey")
    assert r.status == 2 and r.failure["kind"] == "input"


# --- --since ---------------------------------------------------------------------------------


def log_note(size: int, root: bytes) -> bytes:
    return sign_note(Checkpoint(LOG_ORIGIN, size, root).format(), [LOG_SIGNER])


def test_since_kept_checkpoints(
    journal: Journal, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    export, policy = str(journal.export_path), str(journal.policy_path)
    cases = [
        (journal.notes[1], 3),  # a cosigned checkpoint of the export itself
        (log_note(2, journal.store_root[2]), 2),  # one the export does not carry
        (log_note(5, journal.store_root[5]), 5),  # the whole log: same size, same root
        (log_note(0, EMPTY_ROOT), 0),
    ]
    for note, size in cases:
        kept = journal.write(f"kept-{size}", note)
        r = verify_export(capsysbinary, export, policy, "--since", kept)
        assert r.status == 0, (size, r.err)
        since = r.report["facts"]["since"]
        assert since["size"] == size
        expected = journal.store_proofs[(size, 5)] if 0 < size < 5 else []
        assert since["proof"] == [b64encode(h) for h in expected]
        assert r.report["checks"][-1]["id"] == "since"


def test_since_catches_rollback_and_fork(
    journal: Journal, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    policy = str(journal.policy_path)
    # Rollback: the last sealed run (no checkpoint covers it) removed and the end recomputed
    # gives an export that verifies alone, but the auditor kept a checkpoint of size 5.
    block = next(b for b in run_blocks(journal.export) if b.run == "run-e")
    rolled = with_end(journal.export[: block.start] + journal.export[block.stop :])
    path = journal.write("rolled.export", rolled)
    assert verify_export(capsysbinary, path, policy).status == 0
    kept5 = journal.write("kept-5", log_note(5, journal.store_root[5]))
    r = verify_export(capsysbinary, path, policy, "--since", kept5)
    assert r.status == 1
    f = r.failure
    assert f["kind"] == "consistency" and f["message"].startswith("rollback")
    assert f["line"] == len(export_lines(rolled))  # the end line: the log's size
    # Fork: the log signed another root for size 2 than the one the export rebuilds.
    kept = journal.write("fork-2", log_note(2, sha(b"another tree")))
    r = verify_export(capsysbinary, str(journal.export_path), policy, "--since", kept)
    assert r.status == 1
    f = r.failure
    assert f["kind"] == "consistency" and f["message"].startswith("fork")
    # Named at the record that makes the log reach size 2: run-b's last record (its seal record).
    assert f["line"] == line_of(journal.export, journal.export.index(b'"run":"run-b","seq":3'))
    assert f["checkpoint_size"] == 2


def test_since_unusable(journal: Journal, capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    export, policy = str(journal.export_path), str(journal.policy_path)
    other = other_log_note(journal.dir, OTHER_KEY, ORIGIN)
    for name, data in (
        ("other-log", other),
        ("malformed", b"not a checkpoint\n"),
        ("unsigned", Checkpoint(LOG_ORIGIN, 1, journal.store_root[1]).format()),
    ):
        kept = journal.write(f"since-{name}", data)
        r = verify_export(capsysbinary, export, policy, "--since", kept)
        assert r.status == 2, name
        assert r.failure["kind"] == "input"
        assert b"--since" in r.err
    r = verify_export(capsysbinary, export, policy, "--since", str(journal.dir / "missing"))
    assert r.status == 2


# --- 2. proofs -------------------------------------------------------------------------------


ALL_POLICY = policy_text(("w1", V1), ("w2", V2), ("w3", V3), quorum="all")
"""The log and every witness of the kept checkpoint of size 4: no signature line is spare."""


def verify_proof(
    capsysbinary: pytest.CaptureFixture[bytes], path: str, policy: str, *extra: str
) -> Run:
    return run_main(
        capsysbinary, "proof", path, "--policy", policy, "--now", str(NOW), "--json", *extra
    )


def test_proofs_from_tlog_store_prove_verify(
    journal: Journal, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    policy = str(journal.policy_path)
    proof_a = journal.write("a.tlog-proof", journal.proof_a)
    records_a = journal.write("a.jsonl", journal.records_a)
    r = verify_proof(capsysbinary, proof_a, policy)
    assert r.status == 0, r.err
    facts = r.report["facts"]
    assert (facts["index"], facts["size"], facts["origin"]) == (0, 4, LOG_ORIGIN)
    assert facts["root"] == b64encode(journal.store_root[4])
    assert facts["witnesses"] == ["w1", "w2"]
    r = verify_proof(
        capsysbinary,
        proof_a,
        policy,
        "--records",
        records_a,
        "--record-key",
        RECORD_VKEY,
        "--require-record-signatures",
        "--origin",
        LOG_ORIGIN,
    )
    assert r.status == 0, r.err
    assert (r.report["facts"]["run"], r.report["facts"]["records"]) == ("run-a", 4)
    # The records end in the seal record: the outcome it names is what the proof covers.
    assert r.report["facts"]["outcome"] == "succeeded"
    ids = [c["id"] for c in r.report["checks"]]
    assert ids == [
        "proof-format",
        "records-chain",
        "records-signatures",
        "head",
        "log-signature",
        "witness-quorum",
        "time-rules",
        "inclusion",
    ]
    proof_c = journal.write("c.tlog-proof", journal.proof_c)
    records_c = journal.write("c.jsonl", journal.records_c)
    assert verify_proof(capsysbinary, proof_c, policy, "--records", records_c).status == 0
    # The records of another run do not lead to this proof's head.
    r = verify_proof(capsysbinary, proof_a, policy, "--records", records_c)
    assert r.status == 1
    assert (r.failure["kind"], r.failure["input"]) == ("chain", "records")
    # Another origin expected.
    r = verify_proof(capsysbinary, proof_a, policy, "--origin", "example.org/x")
    assert r.status == 1 and r.failure["kind"] == "unverified"


def test_every_byte_of_a_proof_changed_fails(
    journal: Journal, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    """Under a policy that needs every signer of the checkpoint, no byte is spare."""
    policy = journal.write("all.policy", ALL_POLICY)
    data = journal.proof_a
    path = journal.dir / "mutated.tlog-proof"
    assert verify_proof(capsysbinary, journal.write("a2.tlog-proof", data), policy).status == 0
    for pos in range(len(data)):
        mutated = bytearray(data)
        mutated[pos] ^= random.Random(pos).randrange(1, 256)
        path.write_bytes(bytes(mutated))
        r = verify_proof(capsysbinary, str(path), policy)
        assert r.status == 1, (pos, r.err)
        assert r.failure["input"] == "proof"


def test_proof_lines_of_keys_outside_the_policy_are_ignored(
    journal: Journal, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    """signed-note: a line from a key the policy does not list is not checked (W3 here)."""
    changed = corrupt_signature_line(journal.proof_a, W3.name)
    path = journal.write("w3-changed.tlog-proof", changed)
    r = verify_proof(capsysbinary, path, str(journal.policy_path))
    assert r.status == 0
    assert any(W3.name in n for n in r.report["notes"])
    r = verify_proof(capsysbinary, path, journal.write("all2.policy", ALL_POLICY))
    assert r.status == 1 and r.failure["kind"] == "signature"
    assert r.failure["line"] == changed.count(b"\n", 0, changed.index(W3.name.encode())) + 1


def test_records_end_with_the_seal_record_and_nothing_after_it(
    journal: Journal, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    """A records file names the run's outcome through its seal record (the proof's head); a
    record after a seal record, or a seal record that is not well formed, fails the chain."""
    policy = str(journal.policy_path)
    proof = journal.write("s.tlog-proof", journal.proof_a)

    def records_file(bodies: list[Body]) -> str:
        prev, out = GENESIS, []
        for b in bodies:
            r = make_record(b, prev)
            obj = {"seq": r.seq, "hash": b64encode(r.hash), "prev_hash": b64encode(prev)}
            out.append(json.dumps({**obj, "raw": r.raw.decode()}, ensure_ascii=False) + "\n")
            prev = r.hash
        return journal.write("s.jsonl", "".join(out))

    started = Body("run-s", 1, 1, "Started")
    after = records_file([started, seal_body("run-s", 2, 1, "ok"), Body("run-s", 3, 1, "Step")])
    r = verify_proof(capsysbinary, proof, policy, "--records", after)
    assert r.status == 1 and r.failure["kind"] == "chain" and r.failure["line"] == 3
    assert "after the seal record" in r.failure["message"]
    odd = Body("run-s", 2, 1, "RunSealed", data={"outcome": "ok", "x": 1}, has_data=True)
    r = verify_proof(capsysbinary, proof, policy, "--records", records_file([started, odd]))
    assert r.status == 1 and r.failure["kind"] == "chain" and r.failure["line"] == 2
    assert "exactly the data" in r.failure["message"]


def test_every_byte_and_line_of_the_records_changed_fails(
    journal: Journal, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    """run-a's records are all signed: with the record key required, no byte is spare."""
    policy = str(journal.policy_path)
    proof = journal.write("r.tlog-proof", journal.proof_a)
    data = journal.records_a
    path = journal.dir / "mutated.jsonl"
    keys = ("--record-key", RECORD_VKEY, "--require-record-signatures")
    r = verify_proof(capsysbinary, proof, policy, "--records", journal.write("ok.jsonl", data))
    assert r.status == 0
    assert "4 record signature(s) are from keys not given with --record-key" in "".join(
        r.report["notes"]
    )
    for pos in range(len(data)):
        mutated = bytearray(data)
        mutated[pos] ^= random.Random(pos).randrange(1, 256)
        path.write_bytes(bytes(mutated))
        r = verify_proof(capsysbinary, proof, policy, "--records", str(path), *keys)
        assert r.status == 1, (pos, r.err)
        assert r.failure["input"] == "records" and isinstance(r.failure["line"], int)
    lines = data.splitlines(keepends=True)
    variants = [b""]
    for i in range(len(lines)):
        variants.append(b"".join(lines[:i] + lines[i + 1 :]))
        variants.append(b"".join(lines[: i + 1] + lines[i:]))
        variants.append(b"".join(lines[i + 1 :] + lines[: i + 1]))
    for variant in variants:
        if variant == data:
            continue
        path.write_bytes(variant)
        r = verify_proof(capsysbinary, proof, policy, "--records", str(path), *keys)
        assert r.status == 1, variant[:80]


def test_proof_heads(journal: Journal, capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    from tlog.proof import TlogProof

    policy = str(journal.policy_path)
    parsed = TlogProof.parse(journal.proof_a)
    assert parsed.extra is not None
    bare = TlogProof(parsed.index, parsed.hashes, parsed.checkpoint).format()
    path = journal.write("bare.tlog-proof", bare)
    r = verify_proof(capsysbinary, path, policy)
    assert r.status == 2 and r.failure["kind"] == "input"
    assert verify_proof(capsysbinary, path, policy, "--head", b64encode(parsed.extra)).status == 0
    records = journal.write("ra.jsonl", journal.records_a)
    assert verify_proof(capsysbinary, path, policy, "--records", records).status == 0
    r = verify_proof(capsysbinary, path, policy, "--head", b64encode(sha(b"x")))
    assert r.status == 1 and r.failure["kind"] == "proof"
    full = journal.write("full.tlog-proof", journal.proof_a)
    r = verify_proof(capsysbinary, full, policy, "--head", b64encode(sha(b"x")))
    assert r.status == 1 and r.failure["line"] == 2


# --- 3. policies on checkpoints --------------------------------------------------------------


def verify_checkpoint(
    capsysbinary: pytest.CaptureFixture[bytes], path: str, policy: str, *extra: str
) -> Run:
    return run_main(capsysbinary, "checkpoint", path, "--policy", policy, "--json", *extra)


def test_checkpoint_policies(journal: Journal, capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    note = journal.write("cp4", journal.notes[2])  # cosigned by W1, W2, W3 at TS + 30
    two = str(journal.policy_path)
    now = ("--now", str(NOW))
    # Met; W3 is not in the policy: its line is ignored and listed.
    r = verify_checkpoint(capsysbinary, note, two, *now)
    assert r.status == 0
    facts = r.report["facts"]
    assert facts["witnesses"] == ["w1", "w2"] and facts["size"] == 4
    assert facts["unknown_signatures"] == [f"{W3.name}+{W3.key_id:08x}"]
    # Missed by one.
    three = journal.write("p3", policy_text(("w1", V1), ("w2", V2), ("w4", V4), quorum="3"))
    r = verify_checkpoint(capsysbinary, note, three, *now)
    assert r.status == 1 and r.failure["kind"] == "policy"
    assert "has 2 of 3" in r.failure["message"]
    # A witness's bad cosignature rejects the checkpoint, naming its line.
    bad = journal.write("cp4-bad", corrupt_signature_line(journal.notes[2], W2.name))
    r = verify_checkpoint(capsysbinary, bad, two, *now)
    assert r.status == 1
    assert (r.failure["kind"], r.failure["line"]) == ("signature", 7)
    # Too old, and from the future.
    assert verify_checkpoint(capsysbinary, note, two, *now, "--max-age", "80").status == 0
    r = verify_checkpoint(capsysbinary, note, two, *now, "--max-age", "60")
    assert r.status == 1 and "older than max_age" in r.failure["message"]
    ignored = r.report["failure"]["message"]
    assert "witness w1" in ignored and "witness w2" in ignored
    r = verify_checkpoint(capsysbinary, note, two, "--now", str(TS - 100))
    assert r.status == 1 and "in the future" in r.failure["message"]
    assert (
        verify_checkpoint(
            capsysbinary, note, two, "--now", str(TS - 100), "--max-skew", "200"
        ).status
        == 0
    )
    # A checkpoint of another log: no listed log signed it.
    other = journal.write("other-cp", other_log_note(journal.dir, OTHER_KEY, ORIGIN + "/default"))
    r = verify_checkpoint(capsysbinary, other, two, *now)
    assert r.status == 1 and r.failure["kind"] == "unverified"
    # Malformed audited input is invalid, not unusable.
    r = verify_checkpoint(capsysbinary, journal.write("junk", b"junk"), two, *now)
    assert r.status == 1 and r.failure["kind"] == "malformed"


def test_edge_07_unknown_vs_known_keys_in_tlog_verify(
    journal: Journal, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    """A line with a policy key's name but another key ID is an unknown key's line: ignored;
    a line whose (name, key ID) is a policy key's must verify."""
    text, sigs = parse_note(journal.notes[2])
    log_sig = next(x for x in sigs if x.name == LOG_ORIGIN)
    w1 = next(x for x in sigs if x.name == W1.name)
    imposter = Signature(W1.name, W1.key_id ^ 1, w1.sig)  # the name of W1, another key ID
    note = add_signatures(sign_note(text, [LOG_SIGNER]), [imposter])
    one = journal.write("p-w1", policy_text(("w1", V1), quorum="1"))
    r = verify_checkpoint(capsysbinary, journal.write("e07a", note), one, "--now", str(NOW))
    assert r.status == 1 and r.failure["kind"] == "policy"  # ignored: W1 did not cosign
    assert r.report["facts"] == {}
    note = add_signatures(sign_note(text, [LOG_SIGNER]), [w1])
    assert log_sig in parse_note(note)[1]
    r = verify_checkpoint(capsysbinary, journal.write("e07b", note), one, "--now", str(NOW))
    assert r.status == 0 and r.report["facts"]["unknown_signatures"] == []


def test_edge_33_duplicate_cosignature_lines_never_count_twice(
    journal: Journal, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    text, sigs = parse_note(journal.notes[2])
    log_sig = next(x for x in sigs if x.name == LOG_ORIGIN)
    w1 = next(x for x in sigs if x.name == W1.name)
    two = str(journal.policy_path)
    # The same line twice counts once: 1 of 2.
    doubled = text + b"\n" + log_sig.line() + w1.line() + w1.line()
    r = verify_checkpoint(capsysbinary, journal.write("e33a", doubled), two, "--now", str(NOW))
    assert r.status == 1 and "has 1 of 2" in r.failure["message"]
    # Two different lines from one witness key reject the checkpoint.
    again = Signature(W1.name, W1.key_id, W1.sign_at(text, TS + 31))
    forked = text + b"\n" + log_sig.line() + w1.line() + again.line()
    r = verify_checkpoint(capsysbinary, journal.write("e33b", forked), two, "--now", str(NOW))
    assert r.status == 1 and r.failure["kind"] == "signature"


# --- consistency -----------------------------------------------------------------------------


def test_consistency_verb(journal: Journal, capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    policy = str(journal.policy_path)
    old = journal.write("old", journal.notes[0])  # size 1
    new = journal.write("new", journal.notes[2])  # size 4
    hashes = journal.store_proofs[(1, 4)]
    proof_data = b"".join(b64encode(h).encode() + b"\n" for h in hashes)
    proof = journal.write("c.proof", proof_data)

    def run(a: str, b: str, *extra: str) -> Run:
        return run_main(
            capsysbinary, "consistency", a, b, "--policy", policy, "--now", str(NOW), "--json",
            *extra,
        )  # fmt: skip

    r = run(old, new, "--proof", proof)
    assert r.status == 0, r.err
    assert r.report["checks"][-1]["id"] == "consistency"
    assert r.report["facts"]["old"]["size"] == 1 and r.report["facts"]["new"]["size"] == 4
    assert run(new, new).status == 0
    r = run(new, old, "--proof", proof)
    assert r.status == 1 and "rollback" in r.failure["message"]
    # No proof for two sizes: nothing to judge (2), never a verdict against the log (1).
    r = run(old, new)
    assert r.status == 2 and "need a consistency proof (--proof FILE)" in r.failure["message"]
    empty = journal.write("empty.proof", b"")
    r = run(old, new, "--proof", empty)  # an empty proof given: judged, and wrong
    assert r.status == 1 and r.failure["kind"] == "consistency"
    path = journal.dir / "mutated.proof"
    for pos in range(len(proof_data)):
        mutated = bytearray(proof_data)
        mutated[pos] ^= random.Random(pos).randrange(1, 256)
        path.write_bytes(bytes(mutated))
        r = run(old, new, "--proof", str(path))
        assert r.status == 1, pos
        assert r.failure["input"] == "consistency-proof"
    # From size 0 no proof exists: an empty one only.
    text = Checkpoint(LOG_ORIGIN, 0, EMPTY_ROOT).format()
    zero = sign_note(text, [LOG_SIGNER])
    zero = add_signatures(
        zero, [Signature(w.name, w.key_id, w.sign_at(text, TS + 5)) for w in (W1, W2)]
    )
    z = journal.write("zero", zero)
    assert run(z, new).status == 0
    r = run(z, new, "--proof", proof)
    assert r.status == 1 and r.failure["kind"] == "proof"


# --- usage and unusable input (exit 2) -------------------------------------------------------


def test_unusable_input_and_usage_exit_2(
    journal: Journal, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    export, policy = str(journal.export_path), str(journal.policy_path)
    bad_policy = journal.write("bad.policy", f"log {LOG_VKEY}\nquorum nobody\n")
    cases: list[tuple[list[str], bytes]] = [
        (["export", export], b"no trust given"),
        (["export", export, "--log-vkey", LOG_VKEY, "--witness", V1], b"--quorum"),
        (["export", export, "--log-vkey", LOG_VKEY, "--witness", V1, "--quorum", "2"], b"more"),
        (["export", export, "--policy", bad_policy], b"line 2"),
        (["export", export, "--policy", str(journal.dir / "none")], b"No such file"),
        (["export", str(journal.dir / "none"), "--policy", policy], b"No such file"),
        (["export", export, "--policy", policy, "--bogus"], b"unrecognized"),
        (["export", "-", "--policy", "-"], b"standard input"),
        (["export", export, "--policy", policy, "--log-vkey", format_vkey(
            Ed25519Signer(LOG_ORIGIN, OTHER_KEY.secret).verifier())], b"not one of"),
        (["export", export, "--policy", policy, "--jobs", "0"], b"--jobs"),
        (["export", export, "--policy", policy, "--now", "1e9"], b"--now"),
        (["export", export, "--policy", policy, "--witness", V1], b"not with --policy"),
        (["checkpoint", export, "--log-vkey", "nonsense"], b"--log-vkey"),
        (["proof", export, "--policy", policy, "--head", "AA=="], b"--head"),
        (["nonsense"], b"invalid choice"),
        ([], b"required"),
    ]  # fmt: skip
    for argv, message in cases:
        r = run_main(capsysbinary, *argv)
        assert r.status == 2, argv
        assert message in r.err, (argv, r.err)
        assert r.err.count(b"\n") == 1 and r.err.startswith(b"tlog-verify: ")
        assert r.out == b""
    # The bad policy's line is named once, with its file, not again as a location of its own.
    r = run_main(capsysbinary, "export", export, "--policy", bad_policy)
    assert (
        r.err
        == (
            f"tlog-verify: export: UNUSABLE: policy {bad_policy}: line 2: quorum nobody is not"
            " defined on an earlier line\n"
        ).encode()
    )
    # With --json, the report says why.
    r = run_main(capsysbinary, "export", export, "--policy", bad_policy, "--json")
    assert r.status == 2 and r.report["verdict"] == "unusable"
    assert r.failure["kind"] == "input"


# --- the report ------------------------------------------------------------------------------


def check_schema(obj: dict[str, Any]) -> None:
    assert list(obj) == [
        "schema", "verb", "inputs", "status", "verdict", "valid", "failure", "checks", "facts",
        "notes",
    ]  # fmt: skip
    assert obj["schema"] == "tlog-verify/report/v1"
    assert obj["verb"] in ("export", "proof", "checkpoint", "consistency")
    assert obj["status"] in (0, 1, 2)
    assert obj["verdict"] == {0: "valid", 1: "invalid", 2: "unusable"}[obj["status"]]
    assert obj["valid"] is (obj["status"] == 0)
    assert (obj["failure"] is None) is (obj["status"] == 0)
    if obj["failure"] is not None:
        f = obj["failure"]
        assert list(f) == ["kind", "message", "input", "line", "run", "seq", "checkpoint_size"]
        assert isinstance(f["message"], str) and "\n" not in f["message"]
    for c in obj["checks"]:
        assert list(c) == ["id", "description", "count", "unit"]
        assert isinstance(c["count"], int) and c["count"] >= 0
    assert all(isinstance(v, str) for v in obj["inputs"].values())
    assert isinstance(obj["facts"], dict) and all(isinstance(n, str) for n in obj["notes"])


def test_json_reports_follow_the_schema(
    journal: Journal, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    export, policy = str(journal.export_path), str(journal.policy_path)
    mutated = journal.write("schema.export", journal.export.replace(b"run-c", b"run-C", 1))
    runs = [
        verify_export(capsysbinary, export, policy),
        verify_export(capsysbinary, mutated, policy),
        verify_export(capsysbinary, export, str(journal.dir / "missing")),
        verify_proof(capsysbinary, journal.write("s.tlog-proof", journal.proof_a), policy),
        verify_checkpoint(capsysbinary, journal.write("s.cp", journal.notes[0]), policy),
    ]
    assert [r.status for r in runs] == [0, 1, 2, 0, 0]
    for r in runs:
        check_schema(r.report)
    # The human text names the first failure and what passed before it.
    status = cli.main(["export", mutated, "--policy", policy, "--now", str(NOW)])
    out = capsysbinary.readouterr()
    assert status == 1
    text = out.out.decode()
    assert text.startswith("tlog-verify export: INVALID\n")
    assert re.search(r"first failure \(\w+\): export line \d+ \(run run-", text)
    assert "checked before the failure" in text
    assert out.err.startswith(b"tlog-verify: export: INVALID: export line ")


def test_report_model() -> None:
    r = Report("checkpoint", {"checkpoint": "-"})
    assert r.status == 0 and r.valid and r.verdict == "valid"
    r.check("x", "a check", 2, "things")
    r.fail(Failure("policy", "short\nof quorum", "checkpoint", 3, checkpoint_size=5))
    r.fail(Failure("malformed", "ignored: the first failure stays"))
    assert r.status == 1 and r.failure is not None and r.failure.kind == "policy"
    assert r.failure.message == "short\\nof quorum"
    assert r.failure.location() == "checkpoint line 3 (checkpoint of size 5)"
    assert "first failure (policy): checkpoint line 3" in r.render_text()
    check_schema(json.loads(r.render_json()))
    assert Report("x").fail(Failure("internal", "bug")).status == 2
    with pytest.raises(ValueError, match="unknown failure kind"):
        Failure("nonsense", "x")


# --- streaming, parallelism, progress --------------------------------------------------------


def test_frontier_proves_like_a_full_tree() -> None:
    leaves = [sha(b"leaf %d" % i) for i in range(40)]
    full = MemoryHashStore()
    full.extend(leaves)
    for n in range(41):
        for m in range(n + 1):
            f = Frontier(m)
            for leaf in leaves[:n]:
                f.append(leaf)
            assert f.root() == full.root(n)
            if m == 0:
                continue
            assert f.old_root == full.root(m)
            assert consistency_proof(m, n, f) == consistency_proof(m, n, full), (m, n)


def test_same_report_for_every_jobs(journal: Journal) -> None:
    policy = Policy.parse(journal.policy_path.read_bytes())
    tp = TimePolicy(NOW)
    kept = journal.notes[1]
    variants = {
        "valid": journal.export,
        "record": journal.export.replace(b'"i":1', b'"i":2'),
        "outcome": journal.export.replace(b"sealed 2 cancelled", b"sealed 2 cancellex"),
        "forged": remove_sealed_run(journal.export, "run-b"),
    }
    for name, data in variants.items():
        path = journal.write(f"jobs-{name}.export", data)
        # Item by item in this process (the file under the size floor), then the chunked
        # code of verifier.parallel in this process (jobs 1) and on 2 and 4 processes.
        reports = [
            verify_export_file(
                path,
                policy=policy,
                time_policy=tp,
                jobs=jobs,
                since=kept,
                parallel_min_bytes=floor,
            ).to_json()
            for jobs, floor in ((1, 1 << 62), (1, 0), (2, 0), (4, 0))
        ]
        assert reports[0] == reports[1] == reports[2] == reports[3], name
        assert reports[0]["status"] == (0 if name == "valid" else 1)


def stand_in_parallel(
    path: str, *, jobs: int, require_record_signatures: bool = False, progress: Any = None
) -> ExportSummary:
    """What verifier.parallel.verify_export_parallel promises: verify_export's result."""
    assert jobs >= 1
    with open(path, "rb") as f:
        return tlog_verify_export(f, require_record_signatures=require_record_signatures)


def test_the_parallel_path_gives_the_same_report(
    journal: Journal, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The header-and-checkpoints pass, the parallel pass and the light --since pass of
    verify_export_file, run with a stand-in for verifier.parallel."""
    policy = Policy.parse(journal.policy_path.read_bytes())
    tp = TimePolicy(NOW)
    variants = {
        "valid": journal.export,
        "record": journal.export.replace(b'"i":1', b'"i":2'),
        "policy": journal.export,  # with a policy the checkpoints miss
        "forged": remove_sealed_run(journal.export, "run-b"),
        "rolled": with_end(
            journal.export[: run_blocks(journal.export)[4].start]
            + journal.export[run_blocks(journal.export)[4].stop :]
        ),
    }
    strict = Policy.parse(policy_text(("w1", V1), ("w4", V4), quorum="2").encode())
    for name, data in variants.items():
        path = journal.write(f"par-{name}.export", data)
        for since in (None, journal.notes[1], log_note(5, journal.store_root[5])):
            reports = []
            for patched in (False, True):
                if patched:
                    monkeypatch.setattr(
                        verifier_export, "verify_export_parallel", stand_in_parallel
                    )
                reports.append(
                    verify_export_file(
                        path,
                        policy=strict if name == "policy" else policy,
                        time_policy=tp,
                        jobs=3,
                        since=since,
                        require_record_signatures=name == "record",
                        parallel_min_bytes=0,
                    ).to_json()
                )
                monkeypatch.undo()
            assert reports[0] == reports[1], (name, since)
    # The light pass refuses a file that is not the one verified.
    summary = stand_in_parallel(str(journal.export_path), jobs=2)
    other = journal.write("par-other.export", variants["forged"])
    with pytest.raises(InputError, match="changed while it was being verified"):
        scan_sealed_heads(other, Frontier(1), summary)
    tree = Frontier(3)
    scan_sealed_heads(str(journal.export_path), tree, summary)
    assert (tree.size, tree.root()) == (5, journal.store_root[5])


def one_run_export(records: int) -> bytes:
    """An export of one sealed run of ``records`` records and a checkpoint of size 1."""
    run = "run-long"
    prev = GENESIS
    recs = []
    for seq in range(1, records + 1):
        body = Body(run, seq, 1, "Step", data={"i": seq, "pad": "x" * 64}, has_data=True)
        r = make_record(body if seq < records else seal_body(run, seq, 1, "ok"), prev)
        recs.append(r)
        prev = r.hash
    note = log_note(1, leaf_hash(prev))
    out = io.BytesIO()
    w = ExportWriter(out)
    w.header(ExportHeader(LOG_ORIGIN, LOG_VKEY))
    w.checkpoint(note)
    w.run(run, records, (0, "ok"))
    for r in recs:
        w.record(r)
    w.end()
    return out.getvalue()


def test_memory_grows_with_leaves_not_records(tmp_path: Path) -> None:
    """One sealed run of 200 records, then of 5,000 (0.6 MB): the same peak memory."""
    policy = Policy.parse(f"log {LOG_VKEY}\nquorum none\n".encode())
    peaks = []
    for records in (200, 5_000):
        path = tmp_path / f"long-{records}.export"
        path.write_bytes(one_run_export(records))
        tracemalloc.start()
        try:
            r = verify_export_file(str(path), policy=policy, time_policy=TimePolicy(NOW))
            peaks.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
        assert r.status == 0 and r.facts["records"] == records
    assert peaks[1] < peaks[0] + 128 * 1024, peaks


def test_progress_is_reported_and_drawn(journal: Journal) -> None:
    policy = Policy.parse(journal.policy_path.read_bytes())
    calls: list[tuple[int, int]] = []
    r = verify_export_file(
        str(journal.export_path),
        policy=policy,
        time_policy=TimePolicy(NOW),
        progress=lambda done, total: calls.append((done, total)),
    )
    assert r.status == 0
    assert calls[-1] == (len(journal.export), len(journal.export))

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    tty = Tty()
    ticks = iter(range(100))
    bar = cli.ProgressBar(tty, "verify", width=10, clock=lambda: float(next(ticks)))
    bar(1 << 20, 4 << 20)
    bar(4 << 20, 4 << 20)
    assert "[##########] 100%  4.0/4.0 MiB" in tty.getvalue()
    assert "[##........]  25%" in tty.getvalue()
    bar.close()
    assert tty.getvalue().endswith("\r")
    assert cli.ProgressBar.text("x", 3 << 20, 0) == "x  3.0 MiB read"


# --- the real command: no traceback, no store ------------------------------------------------


def test_the_command_never_prints_a_traceback(journal: Journal) -> None:
    export, policy = str(journal.export_path), str(journal.policy_path)
    mutated = journal.write("tb.export", journal.export[:100] + b"\xff" + journal.export[101:])
    proof = journal.write("tb.tlog-proof", journal.proof_a)
    bad_proof = journal.write("tb-bad.tlog-proof", journal.proof_a.replace(b"index 0", b"index 1"))
    now = ["--now", str(NOW)]
    cases = [
        (["export", export, "--policy", policy, *now], 0),
        (["export", export, "--policy", policy, *now, "--jobs", "2", "--json"], 0),
        (["export", mutated, "--policy", policy, *now], 1),
        (["export", export, "--policy", str(journal.dir / "missing")], 2),
        (["export", export, "--policy", export], 2),
        (["proof", proof, "--policy", policy, *now], 0),
        (["proof", bad_proof, "--policy", policy, *now], 1),
        (["checkpoint", export, "--policy", policy], 1),
        (["consistency", proof, proof, "--policy", policy], 1),
        (["export", "--help"], 0),
        (["export"], 2),
    ]
    for argv, status in cases:
        p = subprocess.run([str(TLOG_VERIFY), *argv], capture_output=True, timeout=60, check=False)
        assert p.returncode == status, (argv, p.stderr)
        assert b"Traceback" not in p.stderr and b"Traceback" not in p.stdout, argv
        if status:
            assert p.stderr.count(b"\n") == 1, (argv, p.stderr)
    # Standard input works too.
    p = subprocess.run(
        [str(TLOG_VERIFY), "export", "-", "--policy", policy, *now],
        input=journal.export,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert p.returncode == 0, p.stderr


def test_the_python_api_gives_the_commands_report(
    journal: Journal, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    # docs/auditor-guide.md section 12.7: the library calls a Python auditor makes give the
    # report the command prints, from the same trust options.
    kept = journal.write("kept.checkpoint", journal.notes[0])
    policy = verifier.build_policy(policy=str(journal.policy_path))
    report = verifier.verify_export_file(
        str(journal.export_path),
        policy=policy,
        time_policy=verifier.build_time_policy(now=str(NOW)),
        since=verifier.read_kept_checkpoint(kept),
    )
    r = verify_export(
        capsysbinary, str(journal.export_path), str(journal.policy_path), "--since", kept
    )
    assert report.valid and r.status == 0, r.err
    want = r.report
    del want["inputs"]["policy"], want["inputs"]["since"]
    assert json.loads(report.render_json()) == want
    assert "since" in want["facts"]
    flags = verifier.build_policy(log_vkey=LOG_VKEY, witnesses=[V1, V2], quorum="2")
    assert [w.vkey for w in flags.witnesses] == [w.vkey for w in policy.witnesses]


def test_the_verifier_imports_no_store_witness_or_database_driver() -> None:
    code = (
        "import sys\n"
        "import verifier, verifier.cli, verifier.export, verifier.proofs, verifier.report\n"
        "try:\n    import verifier.parallel\nexcept ModuleNotFoundError:\n    pass\n"
        "bad = sorted(m for m in sys.modules"
        " if m.split('.')[0] in ('store', 'witness', 'psycopg', 'sqlite3', '_sqlite3'))\n"
        "print(','.join(bad))\n"
    )
    p = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, timeout=60, check=True, cwd=REPO
    )
    assert p.stdout.strip() == b"", p.stdout
