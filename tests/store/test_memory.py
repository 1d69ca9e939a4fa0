"""The ephemeral store (:func:`store.open.open_in_memory`): the whole contract, in memory only.

It is :class:`store.sqlite.MemoryStore`, the SQL store's code on a SQLite memory database: the
checks here are what the file store cannot show — that it writes nothing anywhere (not in the
working directory, not in the temporary directory, also when the process is killed), that two
are independent, that closing it ends it — and that it is the contract (a sample of the battery,
an export that a file store restores byte for byte).
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from store import DuplicateAdmissionError, WaitingRun, open_in_memory
from store.api import Append
from store.export import export_store, restore_store
from store.open import init_store, open_store
from tlog.checkpoint import open_checkpoint
from tlog.errors import UsageError
from tlog.keys import generate_key, parse_vkey

T0 = 1_700_000_000


def test_it_is_the_contract() -> None:
    with open_in_memory(clock=lambda: T0) as s:
        assert not s.is_shared()
        e = s.acquire("run-a", "worker", 60).epoch
        s.append(e, [Append("run-a", "RunAdmitted", {"source": "sim", "id": "1"})])
        s.append(e, [Append("run-a", "RunSuspended", {"until": T0 + 5})])
        assert s.waiting_runs(10) == [WaitingRun("run-a", T0 + 5, None, 2)]
        with pytest.raises(DuplicateAdmissionError):
            s.append(1, [Append("run-b", "RunAdmitted", {"source": "sim", "id": "1"})])
        seal = s.seal("run-a", e, "succeeded")
        assert s.waiting_runs(10) == []
        assert s.verify("run-a") == seal.head
        # A fresh log key is made when none is given, so its checkpoints are signed.
        cp = open_checkpoint(s.sign_checkpoint(), [parse_vkey(s.log_vkey)]).checkpoint
        assert (cp.origin, cp.size) == ("localhost/ephemeral/default", 1)


def test_two_are_independent_and_closing_ends_one() -> None:
    a, b = open_in_memory(), open_in_memory(tenant="other")
    try:
        a.append(1, [Append("run-a", "Note")])
        assert b.runs(None, 10) == []
        assert b.origin == "localhost/ephemeral/other"
    finally:
        a.close()
    with pytest.raises(UsageError, match="closed"):
        a.head("run-a")
    b.append(1, [Append("run-a", "Note")])  # the other one lives on
    assert b.head("run-a").seq == 1
    b.close()


def test_it_exports_what_a_file_store_restores(tmp_path: Path) -> None:
    key = generate_key("example.com/sim")
    with open_in_memory(origin="example.com/sim", key=key, clock=lambda: T0) as s:
        s.append(1, [Append("run-a", "RunAdmitted", {"source": "sim", "id": "7"})])
        s.seal("run-a", 1, "succeeded")
        s.sign_checkpoint()
        out = io.BytesIO()
        export_store(s, out)
    data = out.getvalue()
    path = tmp_path / "sim.export"
    path.write_bytes(data)
    db = str(tmp_path / "kept.db")
    init_store(db=db, origin="example.com/sim", key=key)
    with open_store(db=db) as kept:
        restore_store(kept, path)
        again = io.BytesIO()
        export_store(kept, again)
        assert again.getvalue() == data
        assert kept.admitted_as("sim/7") == "run-a"


CRASH = """
import os, signal, sys
from store import Append, open_in_memory
s = open_in_memory()
s.append(1, [Append("run-a", "Note", {"n": 1})])
s.seal("run-a", 1, "succeeded")
print(s.checkpoint().size, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_it_leaves_nothing_behind_even_when_killed(tmp_path: Path) -> None:
    work, tmp = tmp_path / "work", tmp_path / "tmp"
    work.mkdir()
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp), "PYTHONPATH": str(Path(__file__).parents[2])}
    proc = subprocess.run(
        [sys.executable, "-c", CRASH],
        cwd=work,
        env=env,
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == -9, proc.stderr
    assert proc.stdout == b"1\n"  # it worked, then it was killed
    assert list(work.iterdir()) == []
    assert list(tmp.iterdir()) == []


def test_it_writes_no_file_in_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    before = set(os.listdir(tempfile.gettempdir()))
    with open_in_memory() as s:
        s.append(1, [Append("run-a", "Note")])
        assert not any("tlog-store-memory" in n for n in os.listdir(tempfile.gettempdir()))
    assert list(tmp_path.iterdir()) == []
    assert not {n for n in set(os.listdir(tempfile.gettempdir())) - before if "tlog" in n}
