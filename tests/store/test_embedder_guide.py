"""Every Python recipe of docs/embedder-guide.md runs as written.

The guide's ``python`` blocks are run in order, in one namespace (a later block uses what an
earlier one made, as a reader following the guide would), in a fresh directory. The block that
publishes to witnesses names ``WITNESS_URL`` and ``WITNESS_VKEY``: before it runs, a real
witness server (witness/server.py over SQLite, as in tests/store/test_publish.py) is started on
127.0.0.1, following the guide's log, and those two names are set. The outbox's block names
``RECEIVER_URL``: a loopback receiver (tests/store/test_outbox.py's), which must have been sent
the guide's records by the end. The block that joins the embedder's transaction names
``POSTGRES_URL``: a fresh PostgreSQL schema (tests/conftest.py), or when no server answers that
block alone is left out (a failure under ``TLOG_REQUIRE_POSTGRES=1``). A recipe that stops
working fails here. Also: ``import store``, the guide's one import, loads no database driver and
no HTTP library (store/__init__.py's docstring).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import store
from tests.conftest import REQUIRE_POSTGRES, postgres_reason
from tests.servers import ServerThread
from tests.store.test_outbox import Receiver
from tests.witness.test_client import start_witness

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
        ".subscribe(",
        ".subscriptions(",
        ".unsubscribe(",
        "Deliverer(",
        "require_atomic(",
        ".join(",
        ".buffer(",
        ".wait(",
        ".journal_delivery(",
        ".receipt(",
        ".sweep(",
        ".dead_letters(",
        ".waiting(",
    ):
        assert call in code, call


def test_every_python_recipe_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    blocks = python_blocks(GUIDE.read_text(encoding="utf-8"))
    assert len(blocks) >= 10
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "embedder_guide"}
    servers = ServerThread()
    receiver = Receiver()
    namespace["RECEIVER_URL"] = receiver.url
    try:
        for line, code in blocks:
            if "POSTGRES_URL" in code and "POSTGRES_URL" not in namespace:
                if postgres_reason() is not None and not REQUIRE_POSTGRES:
                    continue  # that block alone (see the module docstring)
                namespace["POSTGRES_URL"] = request.getfixturevalue("pg_schema").conninfo
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
        # The outbox's block delivered every record of the guide's runs to the receiver.
        taken = receiver.taken()
        assert taken and all(
            seqs == list(range(1, journal.head(run).seq + 1)) for (_, run), seqs in taken.items()
        )
        journal.close()
    finally:
        servers.close()
        receiver.close()
    assert receiver.problems == []


def test_import_store_loads_no_driver_and_no_http_library() -> None:
    code = "import sys, store; print(' '.join(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, check=True, text=True, timeout=120
    )
    loaded = {m.split(".")[0] for m in out.stdout.split()}
    assert not loaded & {"sqlite3", "_sqlite3", "psycopg", "psycopg_pool", "requests", "witness"}
    # The API's names are all there, and none is private.
    assert all(hasattr(store, name) and not name.startswith("_") for name in store.__all__)
