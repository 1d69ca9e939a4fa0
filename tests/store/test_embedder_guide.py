"""Every Python recipe of docs/embedder-guide.md runs as written.

The guide's ``python`` blocks are run in order, in one namespace (a later block uses what an
earlier one made, as a reader following the guide would), in a fresh directory. The block that
publishes to witnesses names ``WITNESS_URL`` and ``WITNESS_VKEY``: before it runs, a real
witness server (witness/server.py over SQLite, as in tests/store/test_publish.py) is started on
127.0.0.1, following the guide's log, and those two names are set. A recipe that stops working
fails here. Also: ``import store``, the guide's one import, loads no database driver and no HTTP
library (store/__init__.py's docstring).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import store
from tests.witness.test_client import ServerThread, start_witness

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "embedder-guide.md"

_BLOCK = re.compile(r"^```python\n(.*?)^```$", re.S | re.M)


def python_blocks(text: str) -> list[tuple[int, str]]:
    """(line number of the first code line, code) of every ``python`` block, in order."""
    return [(text.count("\n", 0, m.start(1)) + 1, m.group(1)) for m in _BLOCK.finditer(text)]


def test_the_guide_has_a_recipe_for_every_verb() -> None:
    code = "".join(block for _, block in python_blocks(GUIDE.read_text(encoding="utf-8")))
    # One call per tlog-store verb (init, vkey, acquire, renew, release, append and a batch,
    # seal, head, admitted, forget-admissions, waiting, read, verify, checkpoint, publish
    # --witness, publish FILE, published, prove, export, restore).
    for call in (
        "init_store(",
        ".log_vkey",
        ".acquire(",
        ".renew(",
        ".release(",
        ".append(",
        "parse_batch(",
        ".seal(",
        ".head(",
        ".admitted_as(",
        ".forget_admissions(",
        ".waiting_runs(",
        "read_pages(",
        "verify_runs(",
        ".sign_checkpoint(",
        ".checkpoint(",
        "publish_to_witnesses(",
        ".add_cosignatures(",
        "published_checkpoints(",
        "prove_run(",
        "export_store(",
        "restore_store(",
    ):
        assert call in code, call


def test_every_python_recipe_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = python_blocks(GUIDE.read_text(encoding="utf-8"))
    assert len(blocks) >= 10
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "embedder_guide"}
    servers = ServerThread()
    try:
        for line, code in blocks:
            if "WITNESS_URL" in code and "WITNESS_URL" not in namespace:
                journal = namespace["store"]  # the guide's handle, opened in section 1
                assert isinstance(journal, store.JournalStore)
                log = (journal.origin, journal.log_vkey)
                witness = start_witness(servers, tmp_path, "witness.example", [log])
                namespace.update(WITNESS_URL=witness.url, WITNESS_VKEY=witness.vkey)
            # Padded to its place in the guide: a traceback names the guide's own line.
            exec(compile("\n" * (line - 1) + code, str(GUIDE), "exec"), namespace)
        journal = namespace["store"]
        assert isinstance(journal, store.JournalStore)
        journal.close()
    finally:
        servers.close()


def test_import_store_loads_no_driver_and_no_http_library() -> None:
    code = "import sys, store; print(' '.join(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, check=True, text=True, timeout=120
    )
    loaded = {m.split(".")[0] for m in out.stdout.split()}
    assert not loaded & {"sqlite3", "_sqlite3", "psycopg", "psycopg_pool", "requests", "witness"}
    # The API's names are all there, and none is private.
    assert all(hasattr(store, name) and not name.startswith("_") for name in store.__all__)
