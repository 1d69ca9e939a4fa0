"""``tlog-verify follow`` while another process seals runs and publishes checkpoints (issue 15,
acceptance 4): against the same SQLite store served on loopback, every round is valid (with
``--verify-entries``), and once the sealer stops, follow ends at the latest checkpoint."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from store import Append, StoreLog, init_store, open_store
from store.tileserver import TileServer, make_app
from tests.servers import ServerThread
from tlog.checkpoint import Checkpoint
from tlog.keys import generate_key
from tlog.note import parse_note
from verifier.follow import follow_once
from verifier.trust import build_policy

ORIGIN = "example.com/journal"
SEAL_SECONDS = 6.0

_SEALER = """
import sys, time
from store import Append, open_store
from tlog.cli.files import read_key_file
db, key_file, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
with open_store(db=db, key=read_key_file(key_file)) as store:
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end:
        for _ in range(7):  # sizes that cross tile edges at odd places
            store.append(1, [Append(f"grow-{n}", "Note", data=n)])
            store.seal(f"grow-{n}", 1, "ok")
            n += 1
        store.sign_checkpoint()
print(n, flush=True)
"""


def test_follow_never_fails_while_another_process_seals_and_ends_at_the_latest(
    tmp_path: Path,
) -> None:
    db = str(tmp_path / "log.db")
    key = generate_key(ORIGIN)
    key_file = tmp_path / "log.key"
    key_file.write_text(key.format() + "\n")
    init_store(db=db, origin=ORIGIN, key=key)
    with open_store(db=db, key=key) as store:
        for i in range(300):
            store.append(1, [Append(f"r{i}", "Note", data=i)])
            store.seal(f"r{i}", 1, "ok")
        store.sign_checkpoint()
        vkey = store.log_vkey
    handles = []

    def source(tenant: str) -> StoreLog:
        handle = open_store(db=db, tenant=tenant)
        handles.append(handle)
        return StoreLog(handle)

    policy = build_policy(log_vkey=vkey)
    state = tmp_path / "state"
    with ServerThread() as servers:
        url = servers.serve(make_app(TileServer(lambda: ["default"], source, ttl=0))) + "/default/"
        first = follow_once(url, policy=policy, state=state, verify_entries=True)
        assert first.valid, first.render_text()
        sealer = subprocess.Popen(
            [sys.executable, "-c", _SEALER, db, str(key_file), str(SEAL_SECONDS)],
            stdout=subprocess.PIPE,
            text=True,
        )
        sizes = []
        try:
            while sealer.poll() is None:
                report = follow_once(url, policy=policy, state=state, verify_entries=True)
                assert report.valid, report.render_text()
                sizes.append(report.facts["size"])
                time.sleep(0.05)
        finally:
            out, _ = sealer.communicate(timeout=60)
        assert sealer.returncode == 0
        sealed = int(out)
        last = follow_once(url, policy=policy, state=state, verify_entries=True)
        assert last.valid, last.render_text()
    for h in handles:
        h.close()
    with open_store(db=db) as store:
        latest = store.published()[-1]
    assert state.read_bytes() == latest
    assert Checkpoint.parse(parse_note(latest)[0]).size == 300 + sealed
    assert sorted(sizes) == sizes  # never backwards
    assert len(set(sizes)) > 3, sizes  # it followed the growth, not just its end
