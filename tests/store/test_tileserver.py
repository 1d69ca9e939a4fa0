"""``tlog-store serve`` and ``tlog-store tiles``: the log in public, on a real loopback server.

C2SP tlog-tiles (docs/specs.md §6; TT-n its checklist) and docs/tiles.md: every tenant at
``/<tenant>/``, the checkpoint as ``text/plain; charset=utf-8`` cached a few seconds, tiles as
``application/octet-stream``, full ones immutable; 404 beyond the latest checkpoint, 400 for a
path that is not canonical. The served bytes and the files ``tiles`` writes are the same, for a
store of several tenants and for Tessera's log (testdata/tessera).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from store import open_store
from store.cli import main
from store.tiles import IMMUTABLE_CACHE, StoreLog
from store.tileserver import TileServer, make_app
from tests.clirunner import call_main, expect_ok, one_error_line, read_until_listening
from tests.conftest import Backend
from tests.servers import ServerThread, get
from tests.store.helpers import FakeClock, StoreFactory
from tests.store.test_tiles import TESSERA, seal_runs, tessera_log, tree_files
from tlog.cli.files import read_key_file
from tlog.tiles import format_bundle


@pytest.fixture
def servers() -> Iterator[ServerThread]:
    with ServerThread() as s:
        yield s


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite store: tenant a with 600 sealed runs and checkpoints at 100, 300 and 600 (and 5
    more runs no checkpoint names), b with 3, c with runs but no checkpoint."""
    tmp_path = tmp_path_factory.mktemp("template")
    path = str(tmp_path / "journal.db")
    factory = StoreFactory(Backend("sqlite", db=path), FakeClock())
    (tmp_path / "journal.db.key").write_text(factory.key.format() + "\n", encoding="utf-8")
    try:
        a, b, c = factory.open("a"), factory.open("b"), factory.open("c")
        for first, count in ((0, 100), (100, 200), (300, 300)):
            seal_runs(a, first, count)
            a.sign_checkpoint()
        seal_runs(a, 600, 5)
        seal_runs(b, 0, 3)
        b.sign_checkpoint()
        seal_runs(c, 0, 2)
    finally:
        factory.close()
    return tmp_path


@pytest.fixture
def db(template: Path, tmp_path: Path) -> str:
    """A copy of the template store (and its key file) for one test."""
    for name in ("journal.db", "journal.db.key"):
        shutil.copyfile(template / name, tmp_path / name)
    return str(tmp_path / "journal.db")


def store_server(db: str, ttl: float = 1.0) -> TileServer:
    def tenants() -> list[str]:
        with open_store(db=db) as s:
            return StoreLog(s).store.tenants()

    def log_tenants() -> list[str]:
        with open_store(db=db) as s:
            return StoreLog(s).store.log_tenants()

    return TileServer(
        tenants,
        lambda t: StoreLog(open_store(db=db, tenant=t)),
        ttl=ttl,
        log_tenants=log_tenants,
    )


# What `tlog-store tiles` says on stderr of the template's tenant c, which it does not publish.
SKIPPED_C = "tlog-store: tiles: skipped tenant c: no kept checkpoint\n"


def test_served_and_static_bytes_are_identical(
    db: str, tmp_path: Path, servers: ServerThread
) -> None:
    out = tmp_path / "www"
    code, printed, err = call_main(main, ["tiles", "--db", db, "--out", str(out)])
    assert (code, err) == (0, SKIPPED_C)
    # The file counts are of tiles and bundles: the checkpoint file is not counted.
    assert printed == b"a 0 -> 600: 12 files\nb 0 -> 3: 2 files\n"
    assert sorted(p.name for p in out.iterdir()) == ["a", "b"]  # c keeps no checkpoint
    url = servers.serve(make_app(store_server(db)))
    files = tree_files(out)
    assert "a/tile/0/000.p/100" in files and "a/tile/1/000.p/2" in files
    for rel, data in files.items():
        status, headers, body = get(f"{url}/{rel}")
        assert (status, body) == (200, data), rel
        assert headers["Access-Control-Allow-Origin"] == "*"  # a browser's monitor reads it
        if rel.endswith("/checkpoint"):
            assert headers["Content-Type"] == "text/plain; charset=utf-8"  # TT-1
            assert headers["Cache-Control"] == "public, max-age=5"
        else:
            assert headers["Content-Type"] == "application/octet-stream"  # TT-3, TT-13
            full = ".p/" not in rel
            assert headers["Cache-Control"] == (  # TT-7
                "public, max-age=31536000, immutable" if full else "public, max-age=5"
            )


def test_the_tessera_log_served_is_tesseras_tree(servers: ServerThread) -> None:
    url = servers.serve(make_app(TileServer(lambda: ["log"], lambda t: tessera_log())))
    for rel, data in tree_files(TESSERA / "log").items():
        if rel.startswith("checkpoint."):
            continue
        status, _, body = get(f"{url}/log/{rel}")
        assert (status, body) == (200, data), rel


@pytest.mark.parametrize(
    ("path", "status"),
    [
        ("/a/tile/0/002.p/88", 200),
        ("/a/tile/0/002.p/89", 404),  # sealed, but beyond the latest kept checkpoint
        ("/a/tile/entries/002.p/89", 404),
        ("/a/tile/0/003.p/1", 404),
        ("/a/tile/2/000.p/1", 404),
        ("/a/tile/0/x000/002", 400),
        ("/a/tile/0/2", 400),
        ("/a/tile/0/002.p/0", 400),
        ("/a/tile/0/000.p/256", 400),
        ("/a/tile/0/%30%30%30", 400),  # percent-encoded: not the canonical spelling
        ("/a/tile/8/0/000", 400),
        ("/c/checkpoint", 404),  # runs, no kept checkpoint
        ("/nobody/checkpoint", 404),
        ("/A/checkpoint", 404),
        ("/a/", 404),
        ("/a/checkpoint/", 404),
        ("/a", 404),
        ("/", 404),
        ("/a/tiles/0/000", 404),
    ],
)
def test_statuses(db: str, servers: ServerThread, path: str, status: int) -> None:
    url = servers.serve(make_app(store_server(db)))
    got, headers, body = get(url + path)
    assert got == status, body
    assert headers["Access-Control-Allow-Origin"] == "*"  # errors too: a browser reads why
    if status != 200:
        assert headers["Content-Type"] == "text/plain; charset=utf-8"
        assert body.endswith(b"\n") and body.count(b"\n") == 1


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "OPTIONS", "PATCH"])
def test_other_methods_are_refused_like_every_answer(
    db: str, servers: ServerThread, method: str
) -> None:
    # aiohttp's own 405 carried neither the CORS header nor no-store, and was never logged.
    url = servers.serve(make_app(store_server(db)))
    status, headers, body = get(url + "/a/checkpoint", method)
    assert status == 405, body
    assert headers["Allow"] == "GET, HEAD"
    assert headers["Access-Control-Allow-Origin"] == "*"
    assert headers["Cache-Control"] == "no-store"
    assert body == f"{method} is not allowed: the log is read-only\n".encode()
    assert get(url + "/a/checkpoint")[0] == 200  # GET is still served


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("/c/checkpoint", b"the tenant 'c' has no kept checkpoint yet\n"),
        ("/c/tile/0/000.p/1", b"the tenant 'c' has no kept checkpoint yet\n"),
        ("/nobody/checkpoint", b"no log for the tenant 'nobody'\n"),
    ],
)
def test_a_tenant_without_a_kept_checkpoint_is_told_apart_from_none(
    db: str, servers: ServerThread, path: str, message: bytes
) -> None:
    url = servers.serve(make_app(store_server(db)))
    assert get(url + path)[::2] == (404, message)


def test_without_log_tenants_a_tenant_without_a_checkpoint_has_no_log(
    db: str, servers: ServerThread
) -> None:
    server = TileServer(lambda: ["a", "b"], lambda t: StoreLog(open_store(db=db, tenant=t)))
    url = servers.serve(make_app(server))
    assert get(f"{url}/c/checkpoint")[::2] == (404, b"no log for the tenant 'c'\n")


def test_head_and_other_methods(db: str, servers: ServerThread) -> None:
    url = servers.serve(make_app(store_server(db)))
    status, headers, body = get(f"{url}/a/tile/0/000", "HEAD")
    assert (status, body, headers["Content-Length"]) == (200, b"", "8192")
    assert get(f"{url}/a/checkpoint", "POST")[0] == 405


def test_a_new_checkpoint_and_a_new_tenant_are_served(
    db: str, tmp_path: Path, servers: ServerThread
) -> None:
    url = servers.serve(make_app(store_server(db, ttl=0)))
    assert get(f"{url}/c/checkpoint")[0] == 404
    key = tmp_path / "journal.db.key"
    expect_ok(call_main(main, ["checkpoint", "--db", db, "--tenant", "c", "--key", str(key)]))
    status, _, body = get(f"{url}/c/checkpoint")
    assert (status, body.split(b"\n")[1]) == (200, b"2")
    assert get(f"{url}/a/tile/0/002.p/89")[0] == 404
    expect_ok(call_main(main, ["checkpoint", "--db", db, "--tenant", "a", "--key", str(key)]))
    assert get(f"{url}/a/checkpoint")[2].split(b"\n")[1] == b"605"
    assert get(f"{url}/a/tile/0/002.p/93")[0] == 200
    # Any width below the checkpoint's size is served, not only the widths of checkpoints
    # (docs/tiles.md): its bytes are the first hashes of the full tile.
    status, _, body = get(f"{url}/a/tile/0/002.p/7")
    assert (status, body) == (200, get(f"{url}/a/tile/0/002.p/93")[2][: 7 * 32])
    assert get(f"{url}/a/tile/0/002.p/94")[0] == 404


def test_tiles_json_and_a_second_run(db: str, tmp_path: Path) -> None:
    out = str(tmp_path / "www")
    assert call_main(main, ["tiles", "--db", db, "--out", out]).err == SKIPPED_C
    code, printed, err = call_main(main, ["tiles", "--db", db, "--out", out, "--json"])
    assert (code, err) == (0, SKIPPED_C)  # stdout stays the JSON document alone
    assert json.loads(printed) == {
        "tenants": [
            {"tenant": "a", "old_size": 600, "size": 600, "written": 0},
            {"tenant": "b", "old_size": 3, "size": 3, "written": 0},
        ]
    }


def test_tiles_of_one_tenant(db: str, tmp_path: Path) -> None:
    out = tmp_path / "www"
    code, printed, err = call_main(main, ["tiles", "--db", db, "--out", str(out), "--tenant", "b"])
    assert (code, printed, err) == (0, b"b 0 -> 3: 2 files\n", "")  # nothing said of 'c'
    assert sorted(p.name for p in out.iterdir()) == ["b"]
    # Placed before the verb, as every store option may be.
    result = call_main(main, ["--tenant", "a", "tiles", "--db", db, "--out", str(out)])
    assert result.out == b"a 0 -> 600: 12 files\n"
    result = call_main(main, ["tiles", "--db", db, "--out", str(out), "--tenant", "c"])
    one_error_line(result, 2, "tlog-store: tiles: the tenant 'c' has no kept checkpoint yet")
    result = call_main(main, ["tiles", "--db", db, "--out", str(out), "--tenant", "nobody"])
    one_error_line(result, 2, "tlog-store: tiles: the tenant 'nobody' has no log")
    result = call_main(main, ["tiles", "--db", db, "--out", str(out), "--tenant", "a/b"])
    one_error_line(result, 2, "tlog-store: tiles: ")
    assert "a/b" in result.err
    assert sorted(p.name for p in out.iterdir()) == ["a", "b"]


def test_serve_refuses_a_tenant(db: str) -> None:
    result = call_main(main, ["serve", "--db", db, "--tenant", "a"])
    one_error_line(result, 2, "tlog-store: serve: serve serves every tenant's log")


def test_tiles_refuses_to_overwrite_other_bytes(db: str, tmp_path: Path) -> None:
    out = tmp_path / "www"
    tile = out / "b" / "tile" / "0" / "000.p" / "3"
    tile.parent.mkdir(parents=True)
    tile.write_bytes(b"x" * 96)
    result = call_main(main, ["tiles", "--db", db, "--out", str(out)])
    # The skipped tenant is said first (before any tenant is written), then the error alone.
    assert result.err.startswith(SKIPPED_C)
    result = result._replace(err=result.err.removeprefix(SKIPPED_C))
    one_error_line(result, 1, "tlog-store: tiles: ")
    assert "other bytes" in result.err
    assert not (out / "b" / "checkpoint").exists()


def test_serve_bad_listen_and_missing_store(tmp_path: Path, db: str) -> None:
    result = call_main(main, ["serve", "--db", db, "--listen", "nowhere"])
    one_error_line(result, 2, "tlog-store: serve: --listen 'nowhere' is not HOST:PORT")
    result = call_main(main, ["serve", "--db", str(tmp_path / "none.db")])
    one_error_line(result, 2, "tlog-store: serve: no store at")
    for flag, value, message in (
        ("--cache-mb", "-1", "--cache-mb"),
        ("--cache-mb", "1048577", "--cache-mb must be at most 1048576"),
        ("--readers", "0", "--readers must be at least 1"),
        ("--readers", "65", "--readers must be at most 64"),
        ("--readers", "04", "--readers"),
    ):
        result = call_main(main, ["serve", "--db", db, flag, value])
        one_error_line(result, 2, f"tlog-store: serve: {message}")


def test_serve_as_a_process(db: str, tmp_path: Path) -> None:
    # The command itself: it prints where it listens, answers, and stops on SIGTERM with 0.
    stderr = tmp_path / "stderr"
    with stderr.open("wb") as err:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "store.cli",
                "serve",
                "--db",
                db,
                "--listen",
                "127.0.0.1:0",
                "--cache-mb",
                "8",
                "--readers",
                "2",
            ],
            stdout=subprocess.PIPE,
            stderr=err,
        )
    try:
        printed, _ = read_until_listening(proc, stderr, 30)
        url = printed[-1].removeprefix("listening on ")
        status, _, body = get(f"{url}/b/checkpoint")
        assert status == 200 and body.startswith(b"example.com/journal/b\n3\n")
        assert get(f"{url}/b/tile/entries/000.p/3")[2][:2] == b"\x00\x20"
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        assert proc.stdout is not None
        proc.stdout.close()
    lines = [json.loads(x) for x in stderr.read_text().splitlines()]
    assert [(x["path"], x["status"]) for x in lines] == [
        ("/b/checkpoint", 200),
        ("/b/tile/entries/000.p/3", 200),
    ]


class CountingLog(StoreLog):
    """A tenant's StoreLog that counts its tile and bundle reads (a cached one makes none)."""

    def __init__(self, db: str, tenant: str, reads: list[tuple[int, int]]) -> None:
        super().__init__(open_store(db=db, tenant=tenant))
        self.reads = reads

    def tile_hashes(self, level: int, index: int, width: int) -> bytes:
        self.reads.append((level, index))
        return super().tile_hashes(level, index, width)

    def entries(self, start: int, count: int) -> list[bytes]:
        self.reads.append((-1, start))
        return super().entries(start, count)

    def entries_and_leaves(self, start: int, count: int) -> tuple[list[bytes], list[bytes]]:
        self.reads.append((-2, start))
        return super().entries_and_leaves(start, count)


def test_full_tiles_are_cached_and_never_change_partials_and_checkpoints_are_not(
    db: str, tmp_path: Path, servers: ServerThread
) -> None:
    reads: list[tuple[int, int]] = []
    now = [0.0]
    server = TileServer(
        lambda: ["a", "b"],
        lambda t: CountingLog(db, t, reads),
        ttl=1.0,
        cache_bytes=3 * 8704,  # three bodies at most: the least recently used is dropped
        clock=lambda: now[0],
    )
    url = servers.serve(make_app(server))
    full, bundle = get(f"{url}/a/tile/0/000")[2], get(f"{url}/a/tile/entries/000")[2]
    partial = get(f"{url}/a/tile/0/002.p/88")
    assert (len(full), len(bundle), partial[0]) == (8192, 8704, 200)
    # The full tile and the full bundle of positions 0..255 came from one read of both; a
    # level-0 tile, partial too, is its bundle's checked leaf hashes (one read of both).
    assert reads == [(-2, 0), (-2, 512)]
    # Served again: the same bytes and headers, without a store read.
    status, headers, again = get(f"{url}/a/tile/0/000")
    assert (status, again, headers["Cache-Control"]) == (200, full, IMMUTABLE_CACHE)
    assert get(f"{url}/a/tile/entries/000")[2] == bundle
    assert get(f"{url}/a/tile/0/000", "HEAD")[:2][0] == 200
    assert len(reads) == 2
    # A partial is read every time (never kept), with its short max-age.
    status, headers, body = get(f"{url}/a/tile/0/002.p/88")
    assert (status, body, headers["Cache-Control"]) == (200, partial[2], "public, max-age=5")
    assert reads[-1] == (-2, 512) and len(reads) == 3
    assert len(server.cache) == 2 and ("a", "tile/0/002.p/88") not in server.cache._items
    # A cached tile is only served within the latest checkpoint: tenant b (3 runs) has none.
    assert get(f"{url}/b/tile/0/000")[0] == 404

    # The log grows and a new checkpoint is kept: the full tiles do not change, the new full
    # tile and bundle appear, the checkpoint only after the ttl.
    with open_store(db=db, tenant="a", key=read_key_file(str(tmp_path / "journal.db.key"))) as a:
        seal_runs(a, 605, 200)
        a.sign_checkpoint()
        new_note = a.published()[-1]
        stored = StoreLog(a).tile_hashes(0, 0, 256)
    assert get(f"{url}/a/tile/0/002")[0] == 404  # the old checkpoint (600) is still served
    assert get(f"{url}/a/checkpoint")[2] != new_note
    now[0] += 1.0
    assert get(f"{url}/a/checkpoint")[2] == new_note
    assert get(f"{url}/a/tile/0/000")[2] == full == stored
    assert get(f"{url}/a/tile/entries/000")[2] == bundle
    status, _, tile2 = get(f"{url}/a/tile/0/002")
    assert (status, tile2[: len(partial[2])]) == (200, partial[2])
    assert get(f"{url}/a/tile/0/002.p/88")[2] == partial[2]
    # Bounded: a fourth full body drops the least recently used one (tile/0/000), which is
    # then read from the store again.
    assert get(f"{url}/a/tile/entries/002")[0] == 200
    assert server.cache.bytes <= 3 * 8704
    assert ("a", "tile/0/000") not in server.cache._items
    before = len(reads)
    assert get(f"{url}/a/tile/0/000")[2] == full
    assert len(reads) == before + 1


def test_a_bundle_and_its_level_0_tile_asked_at_once_cost_one_read(
    db: str, servers: ServerThread
) -> None:
    reads: list[tuple[int, int]] = []

    class SlowPairs(CountingLog):
        def entries_and_leaves(self, start: int, count: int) -> tuple[list[bytes], list[bytes]]:
            time.sleep(0.3)  # both requests arrive while the one read runs
            return super().entries_and_leaves(start, count)

    server = TileServer(lambda: ["a"], lambda t: SlowPairs(db, t, reads), cache_bytes=0)
    url = servers.serve(make_app(server))
    assert get(f"{url}/a/checkpoint")[0] == 200
    paths = ["tile/0/001", "tile/entries/001", "tile/0/001", "tile/entries/001"]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda p: get(f"{url}/a/{p}"), paths))
    assert [g[0] for g in got] == [200] * 4
    assert reads == [(-2, 256)]
    with open_store(db=db, tenant="a") as a:
        assert got[0][2] == got[2][2] == StoreLog(a).tile_hashes(0, 1, 256)
        assert got[1][2] == got[3][2] == format_bundle(StoreLog(a).entries(256, 256))
    # Without a cache, the next request reads again (nothing is left behind in flight).
    assert get(f"{url}/a/tile/0/001")[0] == 200 and len(reads) == 2


def test_a_tenants_reads_run_in_parallel_on_at_most_readers_handles(
    db: str, servers: ServerThread
) -> None:
    lock = threading.Lock()
    opened: list[str] = []
    running = [0, 0]  # now, most at once

    class SlowLog(StoreLog):
        def entries_and_leaves(self, start: int, count: int) -> tuple[list[bytes], list[bytes]]:
            with lock:
                running[0] += 1
                running[1] = max(running)
            time.sleep(0.2)
            with lock:
                running[0] -= 1
            return super().entries_and_leaves(start, count)

    def open_source(tenant: str) -> StoreLog:
        opened.append(tenant)
        return SlowLog(open_store(db=db, tenant=tenant))

    server = TileServer(lambda: ["a"], open_source, readers=2)
    url = servers.serve(make_app(server))
    assert get(f"{url}/a/checkpoint")[0] == 200
    with ThreadPoolExecutor(6) as pool:
        got = list(pool.map(lambda i: get(f"{url}/a/tile/0/000.p/{i + 1}")[0], range(6)))
    assert got == [200] * 6
    assert (opened, running[1]) == (["a", "a"], 2)


def _children(pid: int) -> set[int]:
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == pid:  # the parent pid, after the state
            found.add(int(stat.parent.name))
    return found


def _serve_workers(db: str, stderr: Path, workers: int) -> tuple[subprocess.Popen[bytes], str]:
    with stderr.open("wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "store.cli", "serve", "--db", db, "--listen", "127.0.0.1:0",
             "--workers", str(workers)],
            stdout=subprocess.PIPE,
            stderr=err,
        )  # fmt: skip
    printed, _ = read_until_listening(proc, stderr, 30)
    return proc, printed[-1].removeprefix("listening on ")


def _reap(proc: subprocess.Popen[bytes]) -> None:
    """The command stopped (killed if it still runs), its stdout closed."""
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    assert proc.stdout is not None
    proc.stdout.close()


def test_serve_with_workers_shares_one_address_and_stops_as_one(db: str, tmp_path: Path) -> None:
    # Three processes accept on one address: every connection is answered, by one of them;
    # SIGTERM to the command stops them all, with 0.
    proc, url = _serve_workers(db, tmp_path / "stderr", 3)
    try:
        workers = _children(proc.pid)
        assert len(workers) == 3
        with ThreadPoolExecutor(6) as pool:
            got = list(pool.map(lambda _: get(f"{url}/a/tile/0/000"), range(30)))
        assert {g[0] for g in got} == {200} and len({g[2] for g in got}) == 1
        assert get(f"{url}/b/checkpoint")[2].startswith(b"example.com/journal/b\n3\n")
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        assert proc.stdout is not None
        proc.stdout.close()
    assert not any(Path(f"/proc/{w}").exists() for w in workers)  # reaped by the command
    lines = [json.loads(x) for x in (tmp_path / "stderr").read_text().splitlines()]
    assert len(lines) == 31 and {x["status"] for x in lines} == {200}


def test_a_worker_killed_stops_the_server_with_1(db: str, tmp_path: Path) -> None:
    proc, url = _serve_workers(db, tmp_path / "stderr", 2)
    try:
        workers = sorted(_children(proc.pid))
        assert len(workers) == 2 and get(f"{url}/a/checkpoint")[0] == 200
        os.kill(workers[0], signal.SIGKILL)
        assert proc.wait(30) == 1  # the other worker was stopped: nothing is left serving
        assert not any(Path(f"/proc/{w}").exists() for w in workers)
        said = (tmp_path / "stderr").read_text().splitlines()
        assert f"tlog-store: serve: a worker (pid {workers[0]}) was killed by SIGKILL; " \
            "stopping the others" in said  # fmt: skip
    finally:
        _reap(proc)


def _gone(pid: int) -> bool:
    """Whether ``pid`` has exited (a zombie left to a parent that does not reap counts)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def _refused(url: str) -> bool:
    try:
        get(f"{url}/a/checkpoint")
    except OSError:
        return True
    return False


def test_workers_stop_when_the_command_is_killed(db: str, tmp_path: Path) -> None:
    # SIGKILL to the command, as a supervisor or the OOM killer would: its workers must not
    # keep the port (a restart would find it taken), so each stops on the parent-death pipe.
    proc, url = _serve_workers(db, tmp_path / "stderr", 2)
    workers = sorted(_children(proc.pid))
    try:
        assert len(workers) == 2 and get(f"{url}/a/checkpoint")[0] == 200
        proc.kill()
        proc.wait(30)
        deadline = time.monotonic() + 30
        while not all(_gone(w) for w in workers) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert all(_gone(w) for w in workers)
        assert _refused(url)
    finally:
        for w in workers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(w, signal.SIGKILL)
        assert proc.stdout is not None
        proc.stdout.close()


def test_a_worker_that_does_not_stop_is_killed(db: str, tmp_path: Path) -> None:
    # A stopped worker (SIGSTOP: SIGTERM stays pending) cannot exit; the command must not
    # wait for it forever: after the shutdown timeout (5 s) and a margin it kills it, exit 1.
    proc, url = _serve_workers(db, tmp_path / "stderr", 2)
    workers = sorted(_children(proc.pid))
    try:
        assert len(workers) == 2 and get(f"{url}/a/checkpoint")[0] == 200
        os.kill(workers[0], signal.SIGSTOP)
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 1
        assert time.monotonic() - started >= 5
        assert all(_gone(w) for w in workers)
        said = (tmp_path / "stderr").read_text().splitlines()
        assert f"tlog-store: serve: a worker (pid {workers[0]}) did not stop in time; killed" \
            in said  # fmt: skip
        assert _refused(url)
    finally:
        for w in workers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(w, signal.SIGKILL)
        _reap(proc)


def test_sigterm_to_a_worker_stops_the_server_with_0(db: str, tmp_path: Path) -> None:
    # systemd's default KillMode signals every process of the unit at once: a worker that
    # stops gracefully on its own SIGTERM is a stop, not a crash (as tlog-witness takes it).
    proc, url = _serve_workers(db, tmp_path / "stderr", 2)
    try:
        workers = sorted(_children(proc.pid))
        os.kill(workers[1], signal.SIGTERM)
        assert proc.wait(30) == 0
        assert not any(_running(w) for w in workers)
        said = (tmp_path / "stderr").read_text().splitlines()
        assert not [line for line in said if line.startswith("tlog-store:")]
        assert _refused(url)
    finally:
        _reap(proc)


def _running(pid: int) -> bool:
    return not _gone(pid)


_SLOW_START = """
import sys, time
from store.tileserver import TileServer, serve_workers

def make():
    time.sleep(1.5)  # a worker's start-up: opening stores, warming a cache
    return TileServer(lambda: [], lambda t: None)

def announce(urls):
    print("listening", flush=True)

sys.exit(serve_workers(make, host="127.0.0.1", port=0, workers=2, announce=announce))
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_during_the_workers_start_up_is_a_clean_stop(sig: signal.Signals) -> None:
    # The signal reaches the command and (SIGINT from a terminal reaches the whole group) the
    # workers while each is still in make_server: they stop once serving, exit 0, no line.
    proc = subprocess.Popen(
        [sys.executable, "-c", _SLOW_START],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"listening\n"
        time.sleep(0.3)
        assert len(_children(proc.pid)) == 2
        os.killpg(proc.pid, sig)  # the command and its workers, as a terminal's Ctrl-C does
        _, err = proc.communicate(timeout=30)
        assert (proc.returncode, err) == (0, b"")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_ctrl_c_twice_stops_with_0_and_no_traceback(db: str) -> None:
    # A terminal's Ctrl-C reaches the command and its workers; a second one while they stop
    # (or while the command exits) killed the command with SIGINT (status -2), in about half
    # of these rounds, or printed "Exception ignored ... BrokenPipeError" from a worker.
    for round_ in range(10):
        proc = subprocess.Popen(
            [sys.executable, "-m", "store.cli", "serve", "--db", db, "--listen", "127.0.0.1:0",
             "--workers", "2"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )  # fmt: skip
        try:
            assert proc.stdout is not None and proc.stdout.readline().startswith(b"listening")
            time.sleep(0.3)
            os.killpg(proc.pid, signal.SIGINT)
            time.sleep(0.002 * round_)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGINT)
            _, err = proc.communicate(timeout=30)
            assert (round_, proc.returncode, err) == (round_, 0, b"")
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
