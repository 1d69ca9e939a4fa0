"""verifier.parallel: the chunked, multi-process export verifier gives the one-pass verdict.

The rules checked are docs/export-format.md's; docs/auditor-guide.md §11 describes the tool.

The reference is :func:`tlog.export.verify_export` on the same bytes. Exports are built with
:class:`tlog.export.ExportWriter` and :func:`tlog.journal.make_record` (no store).

1. Valid exports of several shapes (no run, one run, unsealed runs only, size-0 and
   cosigned checkpoints, a log larger than its last checkpoint, signed and unsigned records):
   the summary equals ``verify_export``'s, with ``jobs`` 1, 2 and 3 and chunk sizes from one
   byte (a chunk per run) to the whole file; and with the trusted-key options.
2. Invalid exports: a few hundred deterministic single-byte changes (xor 0x01, xor 0x20,
   deletion, an inserted LF, a byte replaced by a space) spread over the whole file, every
   line deleted, duplicated or swapped with the next, every truncation at a line boundary and
   inside a line, forged runs with recomputed hashes (root mismatches, run order, a run twice),
   an over-long line, data after the end line: each raises, in both verifiers, the same
   class with the same message and attributes. Most run in this process (``jobs=1``, same
   chunked code, many chunks); a deterministic subset through real worker pools (2 and 3).
3. The record fast paths never accept what the one-pass code refuses (Hypothesis), and do
   accept ordinary records (otherwise they would be no faster).
4. Streaming: memory does not grow with the records; progress is monotone and ends at the
   file size.
"""

from __future__ import annotations

import hashlib
import io
import os
import threading
import time
import tracemalloc
from collections.abc import Sequence
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.exportfile import join, lines_of, redigest, seed, vkey
from tlog import accel
from tlog.checkpoint import Checkpoint
from tlog.cosignature import CosignatureV1Signer
from tlog.encoding import b64encode, parse_hash
from tlog.errors import MalformedError, TlogError, UsageError
from tlog.export import (
    MAX_LINE,
    ExportChainError,
    ExportFormatError,
    ExportHeader,
    ExportSignatureError,
    ExportSummary,
    ExportVerificationError,
    ExportWriter,
    RunSeal,
    scan,
    verify_export,
)
from tlog.export.check import check_body, hash_of
from tlog.journal import (
    GENESIS,
    KIND_RUN_SEALED,
    Body,
    Record,
    body_names,
    chain_hash,
    make_record,
    seal_body,
)
from tlog.merkle import MemoryHashStore, leaf_hash
from tlog.note import Ed25519Signer, Signer, sign_note
from verifier import parallel
from verifier.parallel import verify_export_parallel

T = 1_760_000_000


ORIGIN = "example.com/parallel"
LOG = Ed25519Signer(ORIGIN, seed("parallel log"))
RECORDS = Ed25519Signer("records.example.com", seed("parallel records"))
OTHER_RECORDS = Ed25519Signer("records2.example.com", seed("parallel records 2"))
W1 = CosignatureV1Signer("witness1.example", seed("parallel witness"), clock=lambda: T)


# --- building exports -----------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    """A run; a sealed one (``position`` not None) gets its seal record appended, naming
    ``outcome`` and signed by the signer of its last record (if that one is signed)."""

    id: str
    records: tuple[Record, ...]
    position: int | None = None  # sealed at this position when not None
    outcome: str = "ok"

    def __post_init__(self) -> None:
        last = self.records[-1]
        if self.position is None or last.body().kind == KIND_RUN_SEALED:
            return
        signer = None
        if last.signature is not None:
            signer = next(k for k in (RECORDS, OTHER_RECORDS) if k.name == last.signature.name)
        seal = make_record(seal_body(self.id, last.seq + 1, 1, self.outcome), last.hash, signer)
        object.__setattr__(self, "records", (*self.records, seal))


def make_run(
    run: str, n: int, signed: Sequence[int] = (), signer: Ed25519Signer = RECORDS, **fields: Any
) -> tuple[Record, ...]:
    """``n`` chained records; those whose seq is in ``signed`` are signed."""
    out: list[Record] = []
    prev = GENESIS
    for seq in range(1, n + 1):
        kind = "RunConcluded" if seq == n else "Step"
        data: Any = {"outcome": "ok"} if seq == n else {"i": seq, "s": f"{run} é {seq}"}
        body = Body(run, seq, 1, kind, data=data, has_data=True, **fields)
        r = make_record(body, prev, signer if seq in signed else None)
        out.append(r)
        prev = r.hash
    return tuple(out)


def note(runs: Sequence[Run], size: int, signers: Sequence[Signer] = (LOG,)) -> bytes:
    tree = MemoryHashStore()
    for r in sorted((r for r in runs if r.position is not None), key=lambda r: r.position or 0):
        tree.append(leaf_hash(r.records[-1].hash))
    return sign_note(Checkpoint(ORIGIN, size, tree.root(size)).format(), signers)


def write(
    runs: Sequence[Run],
    sizes: Sequence[int] = (),
    cosigned: Sequence[int] = (),
    record_keys: Sequence[Any] = (RECORDS,),
    witnesses: Sequence[Any] = (W1,),
) -> bytes:
    """An export of ``runs`` (sealed by position first, then unsealed by ID)."""
    out = io.BytesIO()
    w = ExportWriter(out)
    w.header(
        ExportHeader(
            ORIGIN,
            vkey(LOG),
            tuple(vkey(k) for k in record_keys),
            tuple(vkey(k) for k in witnesses),
        )
    )
    for size in sizes:
        w.checkpoint(note(runs, size, (LOG, W1) if size in cosigned else (LOG,)))
    sealed = sorted((r for r in runs if r.position is not None), key=lambda r: r.position or 0)
    unsealed = sorted((r for r in runs if r.position is None), key=lambda r: r.id)
    for r in [*sealed, *unsealed]:
        seal = None if r.position is None else RunSeal(r.position, r.outcome)
        w.run(r.id, len(r.records), seal)
        for rec in r.records:
            w.record(rec)
    w.end()
    return out.getvalue()


def medium_runs() -> list[Run]:
    """Eight sealed runs and four unsealed ones, 1..5 records, some signed, varied bodies."""
    runs = [
        Run(f"run-{p:02d}", make_run(f"run-{p:02d}", 1 + p % 5, signed=(1, 3) if p % 3 else ()), p)
        for p in range(8)
    ]
    runs[2] = Run("job:2", make_run("job:2", 3, signed=(2,), case="case-7"), 2, "failed")
    runs += [
        Run("u-a", make_run("u-a", 2, signed=(1, 2))),
        Run("u-b", make_run("u-b", 1, effect_key="pay 1")),
        Run("u-c", make_run("u-c", 4, signed=(4,))),
        Run("u-d", make_run("u-d", 1)),
    ]
    return runs


@cache
def medium_export() -> bytes:
    """Log size 8; checkpoints at 0, 3 (cosigned) and 5: the last is smaller than the log."""
    return write(medium_runs(), sizes=(0, 3, 5), cosigned=(3,))


@cache
def shapes() -> dict[str, bytes]:
    one = [Run("only", make_run("only", 3, signed=(1, 2, 3)), 0)]
    unsealed = [Run(f"u{i}", make_run(f"u{i}", i + 1)) for i in range(4)]
    many = [Run(f"r{p:03d}", make_run(f"r{p:03d}", 1 + p % 3), p) for p in range(40)]
    return {
        "no runs": write([]),
        "no runs, size-0 checkpoint": write([], sizes=(0,)),
        "one run": write(one, sizes=(1,), cosigned=(1,)),
        "unsealed only": write(unsealed, sizes=(0,), record_keys=()),
        "medium": medium_export(),
        "forty sealed, checkpoints at 1, 2, 17, 40": write(many, sizes=(1, 2, 17, 40)),
        "no checkpoint, two record keys": write(
            [Run("a", make_run("a", 2, signed=(2,), signer=OTHER_RECORDS), 0), *unsealed],
            record_keys=(RECORDS, OTHER_RECORDS),
            witnesses=(),
        ),
    }


# --- comparing verdicts ---------------------------------------------------------------------


def serial(data: bytes, **kw: Any) -> ExportSummary | TlogError:
    try:
        return verify_export(io.BytesIO(data), **kw)
    except TlogError as e:
        return e


def par(path: Path, data: bytes, **kw: Any) -> ExportSummary | TlogError:
    path.write_bytes(data)
    kw.setdefault("jobs", 1)
    try:
        return verify_export_parallel(path, **kw)
    except TlogError as e:
        return e


def verdict(x: ExportSummary | TlogError) -> Any:
    """What must be equal: the summary, or the error's class, message and attributes."""
    if isinstance(x, ExportSummary):
        return x
    return type(x), str(x), x.args, sorted(vars(x).items())


def same(path: Path, data: bytes, **kw: Any) -> ExportSummary | TlogError:
    """Check both verifiers agree on ``data``; return the one-pass verdict."""
    options = {k: v for k, v in kw.items() if k not in ("jobs", "chunk_bytes", "start_method")}
    want = serial(data, **options)
    got = par(path, data, **kw)
    assert verdict(got) == verdict(want), (kw, verdict(want))
    return want


def recount(data: bytes) -> bytes:
    """Rewrite the end line's counts and digest from the runs the file holds."""
    lines = lines_of(data)
    runs = records = sealed = 0
    for line in lines:
        if line.startswith(b"run "):
            runs += 1
            sealed += b" sealed " in line
        elif len(line) > 45 and line[44:45] == b" ":
            records += 1
    cps = sum(1 for line in lines if line.startswith(b"checkpoint "))
    lines[-1] = b"end %d %d %d %d AAAA" % (cps, runs, records, sealed)
    return redigest(join(lines))


# --- 1. valid exports -----------------------------------------------------------------------


@pytest.mark.parametrize("name", list(shapes()))
def test_summary_equals_one_pass_in_process(tmp_path: Path, name: str) -> None:
    data = shapes()[name]
    want = serial(data)
    assert isinstance(want, ExportSummary)
    for chunk in (1, 97, 600, 1 << 20):
        assert par(tmp_path / "x", data, jobs=1, chunk_bytes=chunk) == want


@pytest.mark.parametrize("jobs", [2, 3])
def test_summary_equals_one_pass_with_workers(tmp_path: Path, jobs: int) -> None:
    for name, data in shapes().items():
        want = serial(data)
        assert isinstance(want, ExportSummary), name
        for chunk in (1, 500):
            got = par(tmp_path / "x", data, jobs=jobs, chunk_bytes=chunk)
            assert got == want, (name, chunk)
    # The default chunk size (one chunk for a small file) too.
    assert par(tmp_path / "x", medium_export(), jobs=jobs) == serial(medium_export())


def test_summary_fields_of_the_medium_export(tmp_path: Path) -> None:
    s = par(tmp_path / "x", medium_export(), jobs=2, chunk_bytes=1)
    assert isinstance(s, ExportSummary)
    assert (s.checkpoints, s.checkpoint_sizes, s.runs, s.sealed_runs, s.log_size) == (
        3,
        (0, 3, 5),
        12,
        8,
        8,
    )
    assert s.consistency_proofs == 1  # 3 -> 5; a pair from size 0 needs none
    assert s.cosignatures == {vkey(W1): 1}
    assert s.signed_records == serial(medium_export()).signed_records > 0  # type: ignore[union-attr]
    assert s.digest == parse_hash(medium_export().rsplit(b" ", 1)[1].strip(), "digest")


def test_trusted_key_options_agree(tmp_path: Path) -> None:
    data = medium_export()
    p = tmp_path / "x"
    kw: dict[str, Any]
    for kw in (
        {"log_key": vkey(LOG)},
        {"log_key": vkey(RECORDS)},
        {"record_keys": [vkey(RECORDS)]},
        {"record_keys": []},
        {"require_record_signatures": True},
    ):
        same(p, data, jobs=1, chunk_bytes=50, **kw)
        same(p, data, jobs=2, chunk_bytes=50, **kw)
    # A one-shot iterator of trusted keys is read once.
    assert par(p, data, jobs=2, record_keys=iter([vkey(RECORDS)])) == serial(data)
    signed = write([Run("s", make_run("s", 4, signed=(1, 2, 3, 4)), 0)], sizes=(1,))
    s = same(p, signed, jobs=2, chunk_bytes=1, require_record_signatures=True)
    assert isinstance(s, ExportSummary) and s.signed_records == 5  # the seal record's too
    with pytest.raises(UsageError):
        verify_export_parallel(p, log_key="not a vkey", jobs=2)


def test_bad_arguments(tmp_path: Path) -> None:
    p = tmp_path / "x"
    p.write_bytes(medium_export())
    for jobs in (0, -1, True, 1.5):
        with pytest.raises(UsageError, match="jobs"):
            verify_export_parallel(p, jobs=jobs)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="chunk_bytes"):
        verify_export_parallel(p, jobs=2, chunk_bytes=0)
    with pytest.raises(OSError):
        verify_export_parallel(tmp_path / "missing", jobs=2)


# --- 2. invalid exports ---------------------------------------------------------------------


def mutations(data: bytes, count: int) -> list[tuple[str, bytes]]:
    """``count`` deterministic single-byte changes spread over the whole file."""
    out = []
    kinds = ("xor01", "xor20", "delete", "lf", "space")
    step = max(1, len(data) // count)
    for k, i in enumerate(range(0, len(data), step)):
        kind = kinds[k % len(kinds)]
        b = data[i]
        if kind == "xor01":
            m = data[:i] + bytes([b ^ 0x01]) + data[i + 1 :]
        elif kind == "xor20":
            m = data[:i] + bytes([b ^ 0x20]) + data[i + 1 :]
        elif kind == "delete":
            m = data[:i] + data[i + 1 :]
        elif kind == "lf":
            m = data[:i] + b"\n" + data[i:]
        else:
            m = data[:i] + b" " + data[i + 1 :]
        out.append((f"{kind}@{i}", m))
    return out


def test_single_byte_changes_in_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = medium_export()
    p = tmp_path / "x"
    classes = set()
    # Small blocks: lines are read from many blocks, and the longer ones alone.
    for chunk, block in ((1, 1 << 20), (150, 100)):
        monkeypatch.setattr(scan, "BLOCK", block)
        for label, m in mutations(data, 300):
            if m == data:  # pragma: no cover - every mutation changes a byte
                continue
            got = same(p, m, jobs=1, chunk_bytes=chunk)
            assert isinstance(got, TlogError), label
            classes.add(type(got))
    # The sample reaches every kind of failure a single byte can cause (a root mismatch needs a
    # consistent forgery: test_forged_and_structural_changes).
    assert classes == {
        ExportFormatError,
        ExportVerificationError,
        ExportChainError,
        ExportSignatureError,
    }, classes


@cache
def unsigned_export() -> bytes:
    """Runs of plain, unsigned records: the files the C scans of tlog/_speedups.c take whole
    (sealed runs of 1..6 records, two unsealed, checkpoints at 3 and 9)."""
    runs = [Run(f"s{p}", make_run(f"s{p}", 1 + p % 6, case=f"c{p}"), p) for p in range(9)]
    runs += [Run("u1", make_run("u1", 3)), Run("u2", make_run("u2", 2, effect_key="k"))]
    return write(runs, sizes=(3, 9), cosigned=(9,), record_keys=())


def test_single_byte_changes_of_unsigned_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The C scans decide every record here; their verdicts must be the one-pass verifier's.
    data = unsigned_export()
    p = tmp_path / "x"
    changed = 0
    for n, (label, m) in enumerate(mutations(data, 400)):
        if m == data:  # a space written over a space
            continue
        monkeypatch.setattr(scan, "BLOCK", (1 << 20, 300)[n % 2])
        # Every fourth with a worker thread beside this one (no record key: threads).
        got = same(p, m, jobs=2 if n % 4 == 0 else 1, chunk_bytes=(1, 700, 1 << 20)[n % 3])
        assert isinstance(got, TlogError), label
        changed += 1
    assert changed >= 380


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_bad_line_after_a_run_comes_before_the_runs_leaf(tmp_path: Path, jobs: int) -> None:
    # The one-pass reader reads the line after a run's last record whole (LF, length) before it
    # hands on the record and so before the run's leaf meets the checkpoint. A C scan that took
    # the run on the line's first four bytes alone reported the checkpoint's root instead
    # (found by review). Here the checkpoint's root is wrong too: the line must fail first.
    out = io.BytesIO()
    w = ExportWriter(out)
    w.header(ExportHeader(ORIGIN, vkey(LOG), (), ()))
    w.checkpoint(sign_note(Checkpoint(ORIGIN, 1, bytes(32)).format(), [LOG]))
    recs = Run("only", make_run("only", 3), 0).records
    w.run("only", len(recs), RunSeal(0, "ok"))
    for rec in recs:
        w.record(rec)
    w.end()
    data = out.getvalue()
    cut = data.rindex(b"\nend ") + 1
    variants = {
        "end line without LF": data[:-1],
        "an over-long line": data[:cut] + b"run " + b"x" * MAX_LINE + b"\n" + data[cut:],
        "an over-long last line without LF": data[:cut] + b"run " + b"x" * MAX_LINE,
    }
    for label, m in variants.items():
        got = same(tmp_path / "x", m, jobs=jobs)
        assert isinstance(got, ExportFormatError), (label, got)


def test_the_record_scan_resumes_after_a_record_of_the_python_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A signed record in a long run goes through the Python loop; the C scan then takes the
    # rest of the run again (found by review: it stopped for the rest of the run).
    runs = [Run("long", make_run("long", 300, signed=(2,)), 0)]
    p = tmp_path / "x"
    data = write(runs, sizes=(1,))
    taken: list[int] = []
    real = accel.scan_records
    assert real is not None

    def counting(*args: Any) -> Any:
        out = real(*args)
        taken.append(out[1])
        return out

    monkeypatch.setattr(accel, "scan_records", counting)
    assert same(p, data, jobs=1) == serial(data)
    assert sum(taken) >= 297, taken


def test_single_byte_changes_with_workers(tmp_path: Path) -> None:
    data = medium_export()
    p = tmp_path / "x"
    for n, (label, m) in enumerate(mutations(data, 40)):
        got = same(p, m, jobs=2 + n % 2, chunk_bytes=(1, 200)[n % 2])
        assert isinstance(got, TlogError), label


def test_line_deletions_duplications_swaps(tmp_path: Path) -> None:
    data = medium_export()
    p = tmp_path / "x"
    lines = lines_of(data)
    for i in range(len(lines)):
        variants = [lines[:i] + lines[i + 1 :], lines[: i + 1] + lines[i:]]
        if i + 1 < len(lines):
            variants.append([*lines[:i], lines[i + 1], lines[i], *lines[i + 2 :]])
        for v in variants:
            m = join(v)
            for candidate in (m, recount(m)):
                got = same(p, candidate, jobs=1, chunk_bytes=1 + i % 3 * 100)
                assert isinstance(got, TlogError) or candidate != m


def test_truncations(tmp_path: Path) -> None:
    data = medium_export()
    p = tmp_path / "x"
    cuts = {0, 1, len(data) - 1}
    at = 0
    for line in lines_of(data):
        at += len(line) + 1
        cuts.update({at, at - 1, at - len(line) // 2})
    for cut in sorted(c for c in cuts if 0 <= c < len(data)):
        got = same(p, data[:cut], jobs=1, chunk_bytes=64)
        assert isinstance(got, TlogError)


def forged_variants() -> list[tuple[str, bytes]]:
    """Changes a forger could make consistently (hashes, counts and digest recomputed)."""
    base = medium_runs()
    out: list[tuple[str, bytes]] = []

    def rewrite(runs: list[Run]) -> bytes:
        return write(runs, sizes=(0, 3, 5), cosigned=(3,))

    # A sealed run covered by a checkpoint rewritten (valid chain): the root no longer matches.
    runs = list(base)
    runs[1] = Run(runs[1].id, make_run(runs[1].id, 3), 1)
    changed = rewrite(runs)
    notes = medium_export().split(b"\nrun ", 1)[0]
    out.append(("rewritten covered run", notes + b"\nrun " + changed.split(b"\nrun ", 1)[1]))
    # A sealed run past the last checkpoint rewritten: still valid.
    runs = list(base)
    runs[6] = Run(runs[6].id, make_run(runs[6].id, 2, case="c"), 6)
    out.append(("rewritten uncovered run", rewrite(runs)))
    lines = lines_of(medium_export())
    run_lines = [i for i, line in enumerate(lines) if line.startswith(b"run ")]
    # Run lines edited in place (their records then name another run, or positions clash).
    for i in run_lines:
        tokens = lines[i].split(b" ")
        for new in (
            [*tokens[:3], b"sealed", b"0", b"ok"] if len(tokens) == 3 else [*tokens[:4], b"0"],
            tokens[:3] if len(tokens) > 3 else [*tokens, b"sealed", b"8", b"ok"],
            [tokens[0], b"run-00", *tokens[2:]],
            [tokens[0], b"u-b", *tokens[2:]],
            [tokens[0], b"zzz", *tokens[2:]],
            [tokens[0], tokens[1], b"99", *tokens[3:]],
            [tokens[0], tokens[1], b"1", *tokens[3:]],
        ):
            m = list(lines)
            m[i] = b" ".join(new)
            out.append((f"run line {i + 1} -> {m[i]!r}", recount(join(m))))
    # Whole runs moved: two sealed runs swapped, an unsealed run before a sealed one, a run
    # twice, a run removed.
    blocks = []
    for k, i in enumerate(run_lines):
        j = run_lines[k + 1] if k + 1 < len(run_lines) else len(lines) - 1
        blocks.append(lines[i:j])
    head, tail = lines[: run_lines[0]], lines[-1:]
    for name, order in (
        ("swap sealed 3 and 4", [0, 1, 2, 4, 3, 5, 6, 7, 8, 9, 10, 11]),
        ("unsealed first", [8, 0, 1, 2, 3, 4, 5, 6, 7, 9, 10, 11]),
        ("unsealed reversed", [0, 1, 2, 3, 4, 5, 6, 7, 11, 10, 9, 8]),
        ("run twice", [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 10, 11]),
        ("sealed run twice", [0, 1, 2, 3, 4, 5, 6, 7, 0, 8, 9, 10, 11]),
        ("last sealed removed", [0, 1, 2, 3, 4, 5, 6, 8, 9, 10, 11]),
        ("covered sealed removed", [0, 1, 2, 3, 5, 6, 7, 8, 9, 10, 11]),
        ("unsealed removed", [0, 1, 2, 3, 4, 5, 6, 7, 8, 10, 11]),
        ("log smaller than a checkpoint", [0, 1, 2, 3, 8, 9, 10, 11]),
    ):
        body = [line for b in order for line in blocks[b]]
        out.append((name, recount(join(head + body + tail))))
    # The end line: counts, digest, data after it, and a second end line.
    out += [
        ("end counts", medium_export().replace(b"\nend 3 12 ", b"\nend 3 13 ")),
        ("data after end", medium_export() + b"x"),
        ("line after end", medium_export() + b"end 0 0 0 0 x\n"),
        ("end twice", join(lines + lines[-1:])),
        ("outcome", redigest(medium_export().replace(b" sealed 2 failed", b" sealed 2 faile"))),
        ("outcome not redigested", medium_export().replace(b" sealed 2 failed", b" sealed 2 f")),
        ("no end", join(lines[:-1])),
        ("end in the middle", join(lines[: run_lines[5]] + lines[-1:] + lines[run_lines[5] :])),
    ]
    # Lines too long for the format, in a run and at its end.
    long_line = b"A" * (MAX_LINE + 1)
    out.append(("over-long record", join([*lines[: run_lines[3] + 1], long_line, *lines[-1:]])))
    out.append(("over-long, no LF", join(lines[: run_lines[3] + 1]) + long_line))
    out.append(("over-long run line", join([*lines[: run_lines[3]], b"run " + long_line])))
    longest = b"A" * MAX_LINE  # the longest line allowed: read, then refused as a record
    out.append(("longest line, no LF", join(lines[: run_lines[3] + 1]) + longest))
    out.append(("longest line", join([*lines[: run_lines[3] + 1], longest, *lines[-1:]])))
    out.append(("longest + 1, no LF", join(lines[: run_lines[3] + 1]) + longest + b"A"))
    return [(label, m) for label, m in out if m != medium_export()]


@pytest.mark.parametrize("jobs", [1, 2])
def test_forged_and_structural_changes(tmp_path: Path, jobs: int) -> None:
    p = tmp_path / "x"
    kinds = set()
    valid = []
    for n, (label, m) in enumerate(forged_variants()):
        chunk = (1, 120, 1 << 20)[n % 3]
        got = same(p, m, jobs=jobs, chunk_bytes=chunk)
        if isinstance(got, ExportSummary):
            valid.append(label)
        else:
            kinds.add(str(got).split(": ", 1)[1][:25])
    # What no checkpoint covers can be forged consistently (docs/export-format.md, section 7):
    # a run past the last checkpoint rewritten whole, the last sealed run or an unsealed one
    # removed. Not a run line alone: a sealed run turned unsealed keeps its seal record, an
    # unsealed run sealed has none, and an outcome is its seal record's.
    assert valid == [
        "rewritten uncovered run",
        "last sealed removed",
        "unsealed removed",
    ], valid
    assert len(kinds) > 15, kinds  # many different failures, not one failure many times


def test_non_canonical_base64_in_runs(tmp_path: Path) -> None:
    # Trailing bits set in a record hash or a record signature: the same bytes decode, but the
    # spelling is not canonical (a format error, before any hash or signature check).
    data = medium_export()
    lines = lines_of(data)
    alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    changed = 0
    for i, line in enumerate(lines):
        if line.startswith(b"sig "):
            at = len(line) - 3  # the last character before "=="
        elif len(line) > 45 and line[44:45] == b" ":
            at = 42  # the last character before "="
        else:
            continue
        c = alphabet.index(line[at])
        for bits in (1, 2, 3, 15):
            m = list(lines)
            m[i] = line[:at] + alphabet[c ^ bits : (c ^ bits) + 1] + line[at + 1 :]
            got = same(tmp_path / "x", join(m), jobs=1, chunk_bytes=100)
            assert isinstance(got, TlogError)
            changed += 1
    assert changed > 100


def test_first_failure_wins_across_chunks(tmp_path: Path) -> None:
    # Two failures far apart: the earlier is reported even when its chunk is the slower one.
    many = [Run(f"r{p:03d}", make_run(f"r{p:03d}", 2, signed=(1, 2)), p) for p in range(30)]
    data = write(many, sizes=(30,))
    lines = lines_of(data)
    first = next(i for i, line in enumerate(lines) if line.startswith(b"run r005"))
    second = next(i for i, line in enumerate(lines) if line.startswith(b"run r025"))
    lines[first + 1] = lines[first + 1].replace(b'"i":1', b'"i":2')  # chain error
    lines[second] = lines[second].replace(b" 2 sealed", b" 02 sealed")  # format error
    m = join(lines)
    for jobs in (1, 2, 3):
        got = same(p := tmp_path / "x", m, jobs=jobs, chunk_bytes=1)
        assert isinstance(got, ExportChainError) and got.line == first + 2
    got = same(p, join([*lines[:second], b"garbage", *lines[second + 1 :]]), jobs=2, chunk_bytes=1)
    assert isinstance(got, ExportChainError)


# --- 3. the fast paths ----------------------------------------------------------------------


def check_body_verdict(raw: bytes, run: str, seq: int) -> bool:
    try:
        check_body(raw, run, seq, 1, 1)
    except TlogError:
        return False
    return True


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**54), 2**54)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=8,
)


@settings(max_examples=300, deadline=None)
@given(
    data=json_values,
    kind=st.sampled_from(["Step", "RunConcluded", "1bad", ""]),
    seq=st.sampled_from([1, 2, 2**53, 2**63 - 1]),
    extra=st.dictionaries(
        st.sampled_from(["case", "effect_key", "x", "v", "epoch", "seq", "run"]),
        st.one_of(st.none(), st.booleans(), st.integers(0, 3), st.text(max_size=5)),
        max_size=2,
    ),
    spelling=st.sampled_from(["canonical", "spaced", "unsorted", "ascii", "dup", "float"]),
)
def test_body_fast_path_never_accepts_more(
    data: Any, kind: str, seq: int, extra: dict[str, Any], spelling: str
) -> None:
    import json

    obj: dict[str, Any] = {"v": 1, "run": "r-1", "seq": seq, "epoch": 1, "kind": kind, "data": data}
    obj.update(extra)
    try:
        if spelling == "canonical":
            text = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        elif spelling == "spaced":
            text = json.dumps(obj, sort_keys=True, ensure_ascii=False)
        elif spelling == "unsorted":
            text = json.dumps(obj, separators=(",", ":"), ensure_ascii=False)
        elif spelling == "ascii":
            text = json.dumps(obj, sort_keys=True, separators=(",", ":"))
        elif spelling == "dup":
            inner = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
            text = '{"data":1,' + inner[1:]
        else:
            text = json.dumps(obj, sort_keys=True, separators=(",", ":")).replace(
                '"epoch":1', '"epoch":1.0'
            )
        raw = text.encode("utf-8")
    except (UnicodeEncodeError, ValueError):
        return
    for run, s in (("r-1", seq), ("r-1", 1), ("r-2", seq)):
        fast = body_names(raw, run, s)
        if fast:
            assert check_body_verdict(raw, run, s), raw


@pytest.mark.parametrize(
    "raw",
    [
        b'{"data":{"a":1.5},"epoch":1,"kind":"K","run":"r","seq":1,"v":1}',
        b'{"data":NaN,"epoch":1,"kind":"K","run":"r","seq":1,"v":1}',
        b'{"data":9007199254740992,"epoch":1,"kind":"K","run":"r","seq":1,"v":1}',
        b'{"data":' + b"[" * 66 + b"]" * 66 + b',"epoch":1,"kind":"K","run":"r","seq":1,"v":1}',
        b'{"data":"\\ud800","epoch":1,"kind":"K","run":"r","seq":1,"v":1}',
        b'{"data":{"a":1,"a":1},"epoch":1,"kind":"K","run":"r","seq":1,"v":1}',
        b'{"case":null,"epoch":1,"kind":"K","run":"r","seq":1,"v":1}',
        b'{"epoch":1,"kind":"K","run":"r","seq":true,"v":1}',
        b'{"epoch":1,"kind":"K","run":"r","seq":1,"v":1.0}',
        b'{"epoch":1,"kind":"K","run":"r","seq":1,"v":true}',
        b'{"epoch":true,"kind":"K","run":"r","seq":1,"v":1}',
        b'{"epoch":1,"kind":"K","run":"r","seq":1}',
        b'{"epoch":1,"kind":"K","run":"r","seq":1,"v":1,"x":1}',
        b'{"epoch":1,"kind":"1K","run":"r","seq":1,"v":1}',
        b'{"case":"","epoch":1,"kind":"K","run":"r","seq":1,"v":1}',
        b"[1]",
        b'{"epoch":0,"kind":"K","run":"r","seq":1,"v":1}',
        b'{"effect_key":"a\\u0001","epoch":1,"kind":"K","run":"r","seq":1,"v":1}',
        b'{"epoch":1,"kind":"K","run":"r","seq":1,"v":1} ',
    ],
)
def test_body_fast_path_refuses_what_decode_body_refuses(raw: bytes) -> None:
    assert not body_names(raw, "r", 1)
    assert not check_body_verdict(raw, "r", 1)


def test_body_fast_path_accepts_ordinary_records() -> None:
    accepted = 0
    for r in medium_runs():
        for rec in r.records:
            assert body_names(rec.raw, rec.run, rec.seq)
            assert not body_names(rec.raw, rec.run, rec.seq + 1)
            assert not body_names(rec.raw, rec.run + "x", rec.seq)
            accepted += 1
    assert accepted > 20


@settings(max_examples=300, deadline=None)
@given(st.binary(min_size=44, max_size=44) | st.from_regex(rb"[A-Za-z0-9+/=]{44}", fullmatch=True))
def test_hash_fast_path_is_parse_hash(text: bytes) -> None:
    fast = hash_of(text)
    try:
        slow: bytes | None = parse_hash(text, "h")
    except MalformedError:
        slow = None
    assert fast == slow or (fast is None and slow is not None)
    assert fast is None or fast == slow


def test_hash_fast_path_accepts_hashes() -> None:
    for i in range(50):
        h = hashlib.sha256(bytes([i])).digest()
        assert hash_of(b64encode(h).encode()) == h


# --- 4. streaming ---------------------------------------------------------------------------


def long_export(records: int, runs: int = 4) -> bytes:
    per = records // runs
    many = []
    for p in range(runs):
        rid = f"long-{p}"
        out, prev = [], GENESIS
        for seq in range(1, per + 1):
            raw = Body(rid, seq, 1, "Step", data={"pad": "x" * 60}, has_data=True).encode()
            h = chain_hash(prev, raw)
            out.append(Record(rid, seq, raw, prev, h))
            prev = h
        many.append(Run(rid, tuple(out), p))
    return write(many, sizes=(runs,))


def peak(path: Path, data: bytes, monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setattr(scan, "BLOCK", 8 << 10)
    path.write_bytes(data)
    tracemalloc.start()
    try:
        verify_export_parallel(path, jobs=1, chunk_bytes=16 << 10)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_memory_does_not_grow_with_records(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Four runs either way: one chunk is one whole run, read a block (8 KiB here) at a time.
    small, large = long_export(400), long_export(4000)
    assert len(large) > 9 * len(small)
    p_small = peak(tmp_path / "s", small, monkeypatch)
    p_large = peak(tmp_path / "l", large, monkeypatch)
    assert p_large < 1.5 * p_small, (p_small, p_large)
    assert p_large < len(large) // 10, (p_large, len(large))


def test_progress_is_monotone_and_ends_at_the_size(tmp_path: Path) -> None:
    p = tmp_path / "x"
    data = long_export(400, runs=8)
    p.write_bytes(data)
    seen: list[tuple[int, int]] = []
    for jobs in (1, 2):
        seen.clear()
        verify_export_parallel(
            p, jobs=jobs, chunk_bytes=2000, progress=lambda d, t: seen.append((d, t))
        )
        done = [d for d, _ in seen]
        assert done == sorted(done) and len(seen) > 3
        assert seen[-1] == (len(data), len(data))
        assert all(t == len(data) for _, t in seen)
    seen.clear()
    p.write_bytes(shapes()["no runs"])
    verify_export_parallel(p, jobs=2, progress=lambda d, t: seen.append((d, t)))
    assert seen == [(len(shapes()["no runs"]),) * 2]


def _die(task: Any) -> Any:
    os._exit(3)


# These tests fork on purpose (a monkeypatch reaches the workers only by inheritance), in a
# test process that has threads; Python 3.12+ warns of that, and the warning is the point of
# the default start method (forkserver), not of these tests.
FORKS_ON_PURPOSE = pytest.mark.filterwarnings(
    "ignore:This process .* is multi-threaded, use of fork:DeprecationWarning"
)


@FORKS_ON_PURPOSE
def test_a_dead_worker_is_an_error_not_a_hang(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = tmp_path / "x"
    p.write_bytes(medium_export())
    monkeypatch.setattr(parallel, "_work", _die)  # forked workers inherit the patch
    with pytest.raises(BrokenProcessPool):
        verify_export_parallel(p, jobs=2, chunk_bytes=1, start_method="fork")


@FORKS_ON_PURPOSE
@pytest.mark.parametrize("workers", ["threads", "processes"])
def test_the_calling_process_is_one_of_the_jobs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workers: str
) -> None:
    # With jobs=2 one worker and the calling thread verify the chunks: both take some, and the
    # verdict is the one-pass verifier's whoever verified what. The worker is a thread when
    # the C scan does the records (no record key declared), else a process.
    p = tmp_path / "x"
    data = unsigned_export() if workers == "threads" else medium_export()
    p.write_bytes(data)
    here: list[int] = []
    real = parallel.verify_chunk

    def counting(ctx: Any, start: int, end: int, line: int, last: bool) -> Any:
        # A forked worker appends to its own copy; a worker thread is not the main thread.
        if os.getpid() == parent and threading.get_ident() == main:
            here.append(start)
        # Each chunk takes a moment, so that on a loaded machine neither side can take every
        # chunk before the other is scheduled (which made this test fail there).
        time.sleep(0.003)
        return real(ctx, start, end, line, last)

    parent, main = os.getpid(), threading.get_ident()
    monkeypatch.setattr(parallel, "verify_chunk", counting)
    spawned: list[str] = []

    def recording(name: str) -> Any:
        pool = getattr(parallel, name)

        def make(*args: Any, **kwargs: Any) -> Any:
            spawned.append(name)
            return pool(*args, **kwargs)

        return make

    for name in ("ThreadPoolExecutor", "ProcessPoolExecutor"):
        monkeypatch.setattr(parallel, name, recording(name))
    summary = verify_export_parallel(p, jobs=2, chunk_bytes=200, start_method="fork")
    assert summary == serial(data)
    assert spawned == ["ThreadPoolExecutor" if workers == "threads" else "ProcessPoolExecutor"]
    start = data.index(b"\nrun ") + 1
    chunks = len(list(parallel._chunks(data, len(data), start, 1, 200)))  # type: ignore[arg-type]
    assert 0 < len(here) < chunks, (len(here), chunks)
    bad = data.replace(b'"i":2', b'"i":3', 1)
    assert bad != data
    same(p, bad, jobs=2, chunk_bytes=200, start_method="fork")


def test_forkserver_start_method(tmp_path: Path) -> None:
    data = medium_export()
    got = par(tmp_path / "x", data, jobs=2, chunk_bytes=300, start_method="forkserver")
    assert got == serial(data)
    bad = data.replace(b'"i":1', b'"i":3', 1)
    same(tmp_path / "x", bad, jobs=2, chunk_bytes=300, start_method="forkserver")


def test_failures_cross_processes_intact(tmp_path: Path) -> None:
    # A chain error carries run and seq, a signature error name and key ID: rebuilt alike.
    data = medium_export()
    lines = lines_of(data)
    i = next(k for k, line in enumerate(lines) if line.startswith(b"sig "))
    sig = lines[i]
    lines[i] = sig[:-6] + (b"AAAAA=" if not sig.endswith(b"AAAAA=") else b"BAAAA=")
    e = same(tmp_path / "x", join(lines), jobs=2, chunk_bytes=1)
    assert isinstance(e, (ExportSignatureError, ExportFormatError))
    assert e.line == i + 1
