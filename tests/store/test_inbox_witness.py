"""The inbox log is cosigned by the same witnesses as the journal's (C2SP tlog-witness,
https://c2sp.org/tlog-witness): ``tlog-store event publish --witness`` gets its checkpoint
cosigned by a real witness server on loopback, growth is proven with a consistency proof, and a
receipt then carries the cosignature, so ``tlog-verify proof`` meets a witness quorum with it
(tlog-policy, https://c2sp.org/tlog-policy). A witness following only the journal's log refuses
the inbox log's checkpoint: the two are different logs (embedder guide §10).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

import store.cli
import verifier.cli
from store.open import init_store, open_store
from tests import clirunner
from tests.servers import ServerThread
from tests.witness.test_client import start_witness
from tlog.checkpoint import Checkpoint
from tlog.inbox import make_event
from tlog.keys import generate_key
from tlog.note import parse_note

_clean_env = clirunner.clean_env_fixture(("TLOG_STORE_DB", "TLOG_STORE_POSTGRES", "TLOG_STORE_KEY"))
ORIGIN = "example.com/log"


@pytest.fixture
def servers() -> Iterator[ServerThread]:
    with ServerThread() as s:
        yield s


def test_inbox_checkpoints_are_cosigned_and_receipts_meet_a_quorum(
    servers: ServerThread, tmp_path: Path
) -> None:
    db = str(tmp_path / "j.db")
    key = generate_key(ORIGIN)
    (tmp_path / "j.db.key").write_text(key.format())
    init_store(db=db, origin=ORIGIN, key=key)
    with open_store(db=db, key=key) as s:
        inbox_origin, inbox_vkey = s.inbox.origin, s.inbox.log.log_vkey
        journal = (s.origin, s.log_vkey)
        s.inbox.buffer(make_event("shop", "1", "Paid", [["order", "A"]], 1))
    w = start_witness(servers, tmp_path, "w1.example", [(inbox_origin, inbox_vkey)])
    only_journal = start_witness(servers, tmp_path, "w2.example", [journal])
    spec = f"{w.url}={w.vkeys[0]}"

    def publish(*extra: str) -> clirunner.Result:
        return clirunner.call_main(store.cli.main, ["event", "publish", "--db", db, *extra])

    out = clirunner.expect_ok(publish("--witness", spec))
    assert out.startswith(b"witness ") and inbox_origin.encode() in out
    with open_store(db=db) as s:
        s.inbox.buffer(make_event("shop", "2", "Paid", [["order", "B"]], 2))
    clirunner.expect_ok(publish("--witness", spec))  # the witness holds size 1: a proof to 2
    with open_store(db=db) as s:
        kept = s.inbox.log.published()
        assert [Checkpoint.parse(parse_note(n)[0]).size for n in kept] == [1, 2]
        assert all(b"w1.example" in n for n in kept)
        assert s.published() == []  # the journal's log kept nothing
        receipt = s.inbox.receipt("shop", "1")
    assert b"w1.example" in receipt.checkpoint
    path = tmp_path / "r"
    path.write_bytes(receipt.format())
    policy = tmp_path / "policy"
    policy.write_text(f"log {inbox_vkey}\nwitness w1 {w.vkeys[0]}\nquorum w1\n")
    event = tmp_path / "e.json"
    event.write_text(
        json.dumps(
            {"source": "shop", "id": "1", "kind": "Paid", "keys": [["order", "A"]], "payload": 1}
        )
    )
    res = clirunner.call_main(
        verifier.cli.main, ["proof", str(path), "--policy", str(policy), "--event", str(event)]
    )
    assert res.code == 0, res
    # A witness that follows only the journal's log does not know the inbox origin.
    bad = publish("--witness", f"{only_journal.url}={only_journal.vkeys[0]}")
    assert bad.code == 1 and bad.err.count("\n") == 1, bad
