"""Three places where the export spec, its writer and its verifiers disagreed (issue 10), each
settled in docs/export-format.md and tested here against all of them: the store (the writer's
source), :class:`tlog.export.ExportWriter`, :func:`tlog.export.verify_export`, the parallel
verifier (:mod:`verifier.parallel`, C scans included) and ``tlog-verify export``
(:func:`verifier.export.verify_export_file`).

1. **An export without a checkpoint** (docs/export-format.md §7) is valid: the store writes it,
   every verifier accepts it, a restore reproduces it, and ``tlog-verify`` says plainly that
   nothing in it is signed by the log key — unless the auditor asks for a fresh checkpoint
   (``--max-age``).
2. **``"data": null``** (docs/export-format.md §4.5: optional fields are absent, never null) is
   refused everywhere: by the store at ``append``, by the writer, by every verifier; ``null``
   inside data is fine.
3. **Depth** (docs/export-format.md §4.5: a scalar has depth 0, an array or object 1 + its
   members'): ``data`` of depth 64 is accepted everywhere, of depth 65 refused everywhere — with
   empty innermost containers too.
"""

from __future__ import annotations

import base64
import hashlib
import io
from pathlib import Path
from typing import Any

import pytest

from store.api import Append, JournalStore
from store.export import export_store, restore_store
from store.open import init_store, open_store
from tlog.errors import MalformedError, TlogError
from tlog.export import ExportFormatError, ExportHeader, ExportSummary, ExportWriter, verify_export
from tlog.journal import GENESIS, Body, Record, chain_hash
from tlog.keys import format_vkey, generate_key
from tlog.note import Ed25519Signer
from tlog.policy import Policy, TimePolicy
from verifier.export import verify_export_file
from verifier.parallel import verify_export_parallel

ORIGIN = "example.com/decisions"
LOG_KEY = generate_key(ORIGIN, seed=hashlib.sha256(b"decisions: log key").digest())
LOG_VKEY = format_vkey(Ed25519Signer(f"{ORIGIN}/default", LOG_KEY.secret).verifier())
POLICY = Policy.parse(f"log {LOG_VKEY}\nquorum none\n".encode())
NOW = 1_700_000_000


def new_store(tmp_path: Path, name: str) -> JournalStore:
    db = str(tmp_path / f"{name}.db")
    init_store(db=db, origin=ORIGIN, key=LOG_KEY)
    return open_store(db=db, key=LOG_KEY)


def export_of(store: JournalStore) -> bytes:
    out = io.BytesIO()
    export_store(store, out)
    return out.getvalue()


def every_verdict(data: bytes, tmp_path: Path) -> tuple[ExportSummary | str, Any]:
    """verify_export's verdict (the error's text when it refuses), checked equal to the
    parallel verifier's (1 and 2 jobs), and tlog-verify's report on both of its paths."""
    path = tmp_path / "x.export"
    path.write_bytes(data)

    def verdict(call: Any) -> ExportSummary | str:
        try:
            result: ExportSummary = call()
        except TlogError as e:
            return f"{type(e).__name__}: {e}"
        return result

    plain = verdict(lambda: verify_export(io.BytesIO(data)))
    for jobs in (1, 2):
        assert verdict(lambda: verify_export_parallel(path, jobs=jobs, chunk_bytes=64)) == plain  # noqa: B023
    reports = [
        verify_export_file(str(path), policy=POLICY, jobs=jobs, parallel_min_bytes=floor)
        for jobs, floor in ((1, 1 << 30), (1, 0), (2, 0))
    ]
    assert reports[0].to_json() == reports[1].to_json() == reports[2].to_json()
    return plain, reports[0]


def forge_record(data: bytes, old: bytes, new_body: bytes) -> bytes:
    """Replace the record line whose body is ``old`` by one with ``new_body`` (its hash
    recomputed from the previous line's), and recompute the end line's digest."""
    lines = data.split(b"\n")[:-1]
    i = next(k for k, line in enumerate(lines) if line.endswith(b" " + old))
    prev = GENESIS if lines[i - 1].startswith(b"run ") else base64.b64decode(lines[i - 1][:44])
    lines[i] = base64.b64encode(chain_hash(prev, new_body)) + b" " + new_body
    body = b"".join(line + b"\n" for line in lines[:-1])
    end = lines[-1].split(b" ")
    end[5] = base64.b64encode(hashlib.sha256(body).digest())
    return body + b" ".join(end) + b"\n"


def test_an_export_without_a_checkpoint_is_valid_and_says_so(tmp_path: Path) -> None:
    store = new_store(tmp_path, "source")
    store.append(1, [Append("run-a", "Started")])
    store.seal("run-a", 1, "ok")  # sealed, never published
    store.append(1, [Append("run-b", "Started")])
    data = export_of(store)
    assert b"\ncheckpoint " not in data
    summary, report = every_verdict(data, tmp_path)
    assert isinstance(summary, ExportSummary)
    assert (summary.checkpoints, summary.sealed_runs, summary.records) == (0, 1, 3)
    assert report.status == 0
    assert report.facts["checkpoints"] == [] and report.facts["uncovered_sealed_runs"] == 1
    assert report.notes[0].startswith(
        "the export carries no checkpoint: nothing in it is signed by the log key"
    )
    assert "witness-quorum" not in [c.id for c in report.checks]
    # An auditor who requires a fresh checkpoint refuses it.
    strict = verify_export_file(
        str(tmp_path / "x.export"), policy=POLICY, time_policy=TimePolicy(NOW, 3600, 60)
    )
    assert strict.status == 1 and strict.failure is not None
    assert strict.failure.kind == "policy" and "no checkpoint" in strict.failure.message
    # A restore reproduces it.
    target = new_store(tmp_path, "target")
    path = tmp_path / "restore.export"
    path.write_bytes(data)
    restore_store(target, path)
    assert export_of(target) == data


def _record(body: bytes, prev: bytes = GENESIS, run: str = "run-a", seq: int = 1) -> Record:
    return Record(run, seq, body, prev, chain_hash(prev, body))


def _writer_refuses(body: bytes, match: str) -> None:
    w = ExportWriter(io.BytesIO())
    w.header(ExportHeader(f"{ORIGIN}/default", LOG_VKEY))
    w.run("run-a", 1)
    with pytest.raises(ExportFormatError, match=match):
        w.record(_record(body))


def test_data_null_is_refused_by_the_store_the_writer_and_every_verifier(tmp_path: Path) -> None:
    store = new_store(tmp_path, "source")
    with pytest.raises(MalformedError, match="record data is null"):
        store.append(1, [Append("run-a", "Step", None)])
    with pytest.raises(MalformedError, match="record data is null"):
        Body("run-a", 1, 1, "Step", data=None, has_data=True).encode()
    assert store.head("run-a").seq == 0
    # null inside data is a value, and a record without data leaves "data" out.
    store.append(1, [Append("run-a", "Step", [None]), Append("run-a", "Step")])
    data = export_of(store)
    good, report = every_verdict(data, tmp_path)
    assert isinstance(good, ExportSummary) and report.status == 0
    null = b'{"data":null,"epoch":1,"kind":"Step","run":"run-a","seq":1,"v":1}'
    _writer_refuses(null, "record data is null")
    forged = forge_record(
        data, b'{"data":[null],"epoch":1,"kind":"Step","run":"run-a","seq":1,"v":1}', null
    )
    refused, report = every_verdict(forged, tmp_path)
    assert isinstance(refused, str) and "record data is null" in refused, refused
    assert refused.startswith("ExportFormatError: line 5: run run-a record 1: ")
    assert report.status == 1 and report.failure is not None
    assert (report.failure.kind, report.failure.line) == ("malformed", 5)


@pytest.mark.parametrize("inner", [b"", b"1", b"{}"])
def test_depth_65_is_refused_64_accepted_everywhere(tmp_path: Path, inner: bytes) -> None:
    def nested(depth: int) -> Any:
        value: Any = 1 if inner == b"1" else ({} if inner == b"{}" else [])
        for _ in range(depth - (0 if inner == b"1" else 1)):
            value = [value]
        return value

    store = new_store(tmp_path, "source")
    with pytest.raises(MalformedError, match="nests deeper than 64 levels"):
        store.append(1, [Append("run-a", "Step", nested(65))])
    store.append(1, [Append("run-a", "Step", nested(64))])
    data = export_of(store)
    good, report = every_verdict(data, tmp_path)
    assert isinstance(good, ExportSummary) and report.status == 0
    deep64 = b"[" * 64 + inner + b"]" * 64 if inner != b"{}" else b"[" * 63 + b"{}" + b"]" * 63
    body64 = b'{"data":' + deep64 + b',"epoch":1,"kind":"Step","run":"run-a","seq":1,"v":1}'
    assert body64 in data
    deep65 = b"[" + deep64 + b"]"
    body65 = body64.replace(deep64, deep65)
    _writer_refuses(body65, "nests deeper than 64 levels")
    refused, report = every_verdict(forge_record(data, body64, body65), tmp_path)
    assert isinstance(refused, str) and "nests deeper than 64 levels" in refused, refused
    assert report.status == 1 and report.failure is not None
    assert report.failure.kind == "malformed"
