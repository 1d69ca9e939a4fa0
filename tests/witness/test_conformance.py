"""The black-box tlog-witness conformance suite (witness/conformance.py).

It must pass 100% against our server (witness/server.py over SQLite, on 127.0.0.1), with one
key or two, with distinct submission and monitoring prefixes; and it must *fail* — on exactly
the checks concerned — against witnesses that break a rule the way real implementations did
(https://c2sp.org/tlog-witness, current main): 403 for an unknown origin (torchwood 2025-06), 409
for same size with another root (tlog-witness v1.0.0), a 409 without its media type, a key other
than the one given, an origin that is not fresh, a witness that does not answer.
``conformance_main`` is checked for its output and exit statuses.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from tests import clirunner
from tests.servers import ServerThread
from tests.witness.test_client import FakeLog, refused_url, start_witness
from tlog.cosignature import CosignatureV1Signer
from tlog.errors import UsageError
from tlog.keys import format_vkey, generate_key
from witness.conformance import CheckResult, conformance_main, run_conformance

ORIGIN = "example.com/conformance-log"
CHECKS = 38
"""How many checks a full run makes (with the monitoring endpoint)."""

MONITORING_CHECKS = 4


@pytest.fixture
def servers() -> Iterator[ServerThread]:
    with ServerThread() as s:
        yield s


def failures(results: Sequence[CheckResult]) -> list[str]:
    return [r.line() for r in results if not r.passed]


def failed_names(results: Sequence[CheckResult]) -> set[str]:
    return {r.name for r in results if not r.passed}


def test_suite_passes_against_our_server(servers: ServerThread, tmp_path: Path) -> None:
    log = FakeLog(ORIGIN)
    w = start_witness(servers, tmp_path, "witness.example/w1", [log])
    results = run_conformance(w.url, log.signer, w.vkeys, ORIGIN)
    assert failures(results) == []
    assert len(results) == CHECKS
    assert len({r.name for r in results}) == CHECKS
    assert all(r.rule for r in results)
    # The witness ended at size 13, as the suite left it.
    latest = w.state.latest(ORIGIN)
    assert latest is not None and latest.size == 13


def test_suite_passes_with_two_keys_and_prefixes(servers: ServerThread, tmp_path: Path) -> None:
    log = FakeLog(ORIGIN)
    w = start_witness(
        servers,
        tmp_path,
        "witness.example/w2",
        [log],
        mldsa=True,
        submission_prefix="/sub",
        monitoring_prefix="/mon",
    )
    base = w.url.removesuffix("/sub")
    results = run_conformance(w.url, log.signer, w.vkeys, ORIGIN, monitoring_url=base + "/mon")
    assert failures(results) == []
    # Without the monitoring checks.
    log2 = FakeLog("example.com/second-log")
    w.state.add_log(log2.origin, (log2.vkey,))
    results = run_conformance(w.url + "/", log2.signer, w.vkeys, log2.origin, monitoring=False)
    assert failures(results) == []
    assert len(results) == CHECKS - MONITORING_CHECKS


def _status_map(mapping: dict[int, int], path_suffix: str = "/add-checkpoint") -> Middleware:
    async def mw(request: web.Request, handler: Handler) -> web.StreamResponse:
        resp = await handler(request)
        if request.path.endswith(path_suffix) and resp.status in mapping:
            assert isinstance(resp, web.Response)
            return web.Response(
                status=mapping[resp.status], body=resp.body, content_type="text/plain"
            )
        return resp

    return mw


def test_suite_catches_403_for_unknown_origin(servers: ServerThread, tmp_path: Path) -> None:
    log = FakeLog(ORIGIN)
    w = start_witness(servers, tmp_path, "w.example", [log], outer=[_status_map({404: 403})])
    results = run_conformance(w.url, log.signer, w.vkeys, ORIGIN)
    assert failed_names(results) == {"unknown origin is 404"}
    bad = next(r for r in results if not r.passed)
    assert bad.expected == "404" and bad.got.startswith("403 ")
    assert bad.line().startswith("FAIL unknown origin is 404 [TW-10, §14.11]: expected 404; got")


@pytest.mark.parametrize(
    ("mapping", "failed"),
    [
        pytest.param(
            # tlog-witness v1.0.0 answered 409 here; current main says 422 — as for every 422.
            {422: 409},
            {
                "size 0 with a non-empty-tree root is 422",
                "old 0 with proof lines is 422",
                "old = size with a non-empty proof is 422",
                "same size, different root is 422",
                "a consistency proof that fails is 422",
            },
            id="409_for_same_size_other_root",
        ),
        pytest.param(
            {409: 409},
            {
                "first request with old 5 on a fresh origin is 409 0",
                "the same request again is 409 6",
                "a stale old size is 409 with the stored size",
            },
            id="a_409_without_its_media_type",
        ),
    ],
)
def test_suite_catches(
    servers: ServerThread, tmp_path: Path, mapping: dict[int, int], failed: set[str]
) -> None:
    log = FakeLog(ORIGIN)
    w = start_witness(servers, tmp_path, "w.example", [log], outer=[_status_map(mapping)])
    results = run_conformance(w.url, log.signer, w.vkeys, ORIGIN)
    assert failed_names(results) == failed


def test_suite_catches_a_wrong_witness_key(servers: ServerThread, tmp_path: Path) -> None:
    log = FakeLog(ORIGIN)
    w = start_witness(servers, tmp_path, "w.example", [log])
    other = format_vkey(CosignatureV1Signer("w.example", b"\x05" * 32).verifier())
    results = run_conformance(w.url, log.signer, [other], ORIGIN)
    assert failed_names(results) == {
        "the 200's cosignatures verify",
        "the resubmission's cosignatures verify",
        "the update's cosignatures verify",
        "first cosignature timestamps are non-zero",
        "fresh cosignature timestamps are non-zero",
        "monitoring serves the cosigned checkpoint",
    }


def test_suite_needs_a_fresh_origin(servers: ServerThread, tmp_path: Path) -> None:
    log = FakeLog(ORIGIN)
    w = start_witness(servers, tmp_path, "w.example", [log])
    assert failures(run_conformance(w.url, log.signer, w.vkeys, ORIGIN)) == []
    second = failed_names(run_conformance(w.url, log.signer, w.vkeys, ORIGIN))
    assert "monitoring: a never-cosigned origin is 404" in second
    assert "first request with old 5 on a fresh origin is 409 0" in second
    assert "old 0, size 6, empty proof is 200" in second


def test_suite_against_nothing(tmp_path: Path) -> None:
    log = FakeLog(ORIGIN)
    key = format_vkey(CosignatureV1Signer("w.example", b"\x05" * 32).verifier())
    results = run_conformance(refused_url(), log.signer, [key], ORIGIN, timeout=2)
    assert results and not any(r.passed for r in results)
    assert all(r.got.startswith("no ") for r in results)


def test_run_conformance_preconditions() -> None:
    log = FakeLog(ORIGIN)
    with pytest.raises(UsageError):
        run_conformance("http://127.0.0.1:9", log.signer, [], ORIGIN)


# --- the command-line entry point ------------------------------------------------------------


def run_main(argv: Sequence[str]) -> tuple[int, str, str]:
    code, out, err = clirunner.call_main(conformance_main, argv)
    return code, out.decode("utf-8"), err


def key_file(tmp_path: Path, origin: str) -> tuple[Path, FakeLog]:
    """A log key file named after ``origin``, and a FakeLog signing with the same key."""
    seed = hashlib.sha256(origin.encode()).digest()
    key = generate_key(origin, seed=seed)
    path = tmp_path / "log.key"
    path.write_text(key.format() + "\n")
    return path, FakeLog(origin, seed=seed)


def test_conformance_main_passes_and_prints(servers: ServerThread, tmp_path: Path) -> None:
    path, log = key_file(tmp_path, ORIGIN)
    w = start_witness(servers, tmp_path, "w.example", [log])
    code, out, err = run_main([w.url, "--log-key", str(path), "--witness-vkey", w.vkey])
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert len(lines) == CHECKS + 1
    assert all(line.startswith("PASS ") for line in lines[:-1])
    assert lines[-1] == f"{CHECKS} of {CHECKS} checks passed"


def test_conformance_main_json_and_failure(servers: ServerThread, tmp_path: Path) -> None:
    path, log = key_file(tmp_path, ORIGIN)
    w = start_witness(servers, tmp_path, "w.example", [log], outer=[_status_map({404: 403})])
    code, out, err = run_main(
        [w.url, "--log-key", str(path), "--witness-vkey", w.vkey, "--origin", ORIGIN, "--json"]
    )
    assert (code, err) == (1, "")
    got = json.loads(out)
    assert (got["url"], got["origin"], got["total"], got["passed"]) == (
        w.url, ORIGIN, CHECKS, CHECKS - 1,
    )  # fmt: skip
    failed = [c for c in got["checks"] if not c["passed"]]
    assert [c["name"] for c in failed] == ["unknown origin is 404"]
    assert set(failed[0]) == {"name", "rule", "expected", "got", "passed"}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["http://127.0.0.1:9", "--witness-vkey", "x"], "--log-key"),
        (["http://127.0.0.1:9", "--log-key", "/nonexistent/key", "--witness-vkey", "x"], "No such"),
        (["http://127.0.0.1:9", "--log-key", "KEY", "--witness-vkey", "not a vkey"], "vkey"),
        (
            ["http://127.0.0.1:9", "--log-key", "KEY", "--witness-vkey", "V", "--timeout", "0"],
            "timeout",
        ),
        (
            ["http://127.0.0.1:9", "--log-key", "KEY", "--witness-vkey", "V", "--timeout", "x"],
            "number",
        ),
        (["http://127.0.0.1:9", "--log-key", "BADKEY", "--witness-vkey", "V"], "key"),
    ],
)
def test_conformance_main_usage_errors(tmp_path: Path, argv: list[str], message: str) -> None:
    path, _ = key_file(tmp_path, ORIGIN)
    bad = tmp_path / "bad.key"
    bad.write_text("PRIVATE+KEY+nonsense\n")
    vkey = format_vkey(CosignatureV1Signer("w.example", b"\x05" * 32).verifier())
    argv = [{"KEY": str(path), "BADKEY": str(bad), "V": vkey}.get(a, a) for a in argv]
    code, out, err = run_main(argv)
    assert code == 2 and out == ""
    assert err.startswith("tlog-witness: conformance: ") and err.count("\n") == 1, err
    assert message.lower() in err.lower(), err


def test_conformance_main_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        conformance_main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: tlog-witness conformance ")
    assert "never cosigned before" in out
