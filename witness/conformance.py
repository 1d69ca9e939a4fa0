"""A black-box conformance suite for C2SP tlog-witness servers: ours, or anyone's.

The suite plays a test log against a witness over HTTP and checks each answer against the
current C2SP main text (https://c2sp.org/tlog-witness). Set-up on the witness under test:
configure a log whose origin is ``origin`` (never cosigned before: the suite needs a *fresh*
origin), trusting the public key of ``log_signer``; give the suite the witness's cosignature
vkey(s). Each run needs a new origin, since the first checks only hold before the witness ever
cosigned it.

The test log is a Merkle tree of 64 leaves ``SHA-256(0x00 || "tlog-witness conformance
entry " || i)``, with a fork (other leaves, same origin and key) for the split-view checks.
Checkpoints have sizes N1 = 6, N2 = 13 and N3 = 21, and no extension lines.

The checks, in the order sent (each request is one :class:`CheckResult`; rules are the
requirements of https://c2sp.org/tlog-witness, and the edge cases listed in
tests/tlog/__init__.py):

===  ========================================================  =========================
 #   request                                                    expected
===  ========================================================  =========================
 1   GET monitoring endpoint of the fresh origin                404 (TW-31)
 2   checkpoint of an unconfigured origin                       404 (TW-10)
 3   checkpoint signed by an unknown key only                   403 (TW-11, §14.7)
 4   checkpoint whose log signature line is corrupted           403 (TW-11, §14.7)
 5   old 7 > size 6                                             400 (TW-12)
 6   malformed bodies: ``old 05``, ``old +5``, ``old  5``,      400 each (TW-5..7, §14.17-19)
     Arabic-Indic digits, CRLF, 64 proof lines, a proof line
     that is not base64, a 31-byte proof hash, no empty line
 7   ``old 5``, size 6, on the fresh origin                     409, body ``0`` LF,
                                                                ``text/x.tlog.size`` (TW-13,
                                                                §14.12)
 8   size 0 with a root other than SHA-256("")                  422 (TW-15, §14.13)
 9   ``old 0`` with one proof line                              422 (TW-16, §14.13)
10   ``old 0``, size 6, no proof                                200 (TW-19, §14.13), then:
     a line per witness key, each verifying (TW-19, TW-21);
     non-zero timestamps (TW-20, §14.10); none in the future
     (CS-7, ``max_skew``)
11   GET monitoring endpoint                                    200: the checkpoint text with
                                                                the log signature and each
                                                                witness key's cosignature
                                                                (TW-29, TW-30); uppercase hex
                                                                path 404 (§14.30)
12   ``old 0`` again                                            409, body ``6`` LF (TW-13)
13   ``old 6``, the same checkpoint, no proof                   200, fresh cosignatures whose
                                                                timestamps did not go
                                                                backwards (§14.14, §5.5)
14   the same with an extra line from an unknown key            200 (TW-9)
15   ``old 6``, size 6, same root, one proof line               422 (§14.14)
16   ``old 6``, size 6, the fork's root                         422 (TW-17, §14.11)
17   ``old 6`` -> 13 with a corrupted consistency proof         422 (TW-16, §14.11)
18   ``old 6`` -> 13 with the right proof                       200, lines verify (TW-16, TW-19)
19   ``old 6`` -> 21 (stale old)                                409, body ``13`` LF (TW-13)
20   GET on add-checkpoint                                      405 (TW-4; practice)
21   POST on the monitoring endpoint                            405 (TW-29; practice)
===  ========================================================  =========================

``monitoring=False`` skips checks 1, 11 and 21, for witnesses without the (SHOULD) monitoring
endpoint or whose monitoring answers are delayed by a cache (tlog-witness allows up to an
hour). A 409 body's media type is compared without parameters, as clients do.

Command line (the ``tlog-witness conformance`` verb calls :func:`conformance_main`)::

    tlog-witness conformance URL --log-key FILE --witness-vkey VKEY [--witness-vkey VKEY]...
        [--origin ORIGIN] [--monitoring-url URL] [--no-monitoring] [--unknown-origin ORIGIN]
        [--timeout SECONDS] [--json]

Prints one line per check (``PASS`` or ``FAIL``, name, rule, and for a failure what was
expected and what came) and a summary line; ``--json`` prints the results as one JSON object.
Exit status: 0 every check passed, 1 some failed, 2 unusable arguments or key file.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import secrets
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import NoReturn

import requests

from tlog.checkpoint import Checkpoint
from tlog.cosignature import timestamp_of
from tlog.encoding import b64encode
from tlog.errors import MalformedError, TlogError, UsageError, VerificationError
from tlog.keys import cosigner_from_vkey, format_vkey, parse_signer_key
from tlog.merkle import EMPTY_ROOT, MemoryHashStore, consistency_proof, leaf_hash
from tlog.note import (
    Ed25519Signer,
    Signature,
    Signer,
    Verifier,
    format_note,
    open_note,
    parse_note,
    sign_note,
)
from tlog.policy import DEFAULT_MAX_SKEW
from tlog.witnessproto import (
    SIZE_CONTENT_TYPE,
    AddCheckpointRequest,
    monitoring_path,
    origin_hash,
    parse_cosignature_response,
)
from witness.client import http_request

__all__ = ["CheckResult", "conformance_main", "run_conformance"]

N1, N2, N3 = 6, 13, 21
"""The test log's checkpoint sizes."""

LEAVES = 64
DEFAULT_TIMEOUT = 10.0
MAX_KEY_FILE_SIZE = 1 << 16
_SHOWN = 120  # characters of an answer shown in a result

_SOME_HASH = hashlib.sha256(b"some hash").digest()  # a proof line of the right length


@dataclass(frozen=True)
class CheckResult:
    """One check: its name, the spec rule(s), what was expected, what came, and the verdict."""

    name: str
    rule: str
    expected: str
    got: str
    passed: bool

    def line(self) -> str:
        """``PASS name [rule]`` or ``FAIL name [rule]: expected ...; got ...``."""
        if self.passed:
            return f"PASS {self.name} [{self.rule}]"
        return f"FAIL {self.name} [{self.rule}]: expected {self.expected}; got {self.got}"


@dataclass(frozen=True)
class _Answer:
    status: int
    content_type: str | None
    body: bytes

    def show(self) -> str:
        text = self.body[:_SHOWN].decode("utf-8", "replace").replace("\n", "\\n")
        more = "..." if len(self.body) > _SHOWN else ""
        return f"{self.status} ({self.content_type or 'no Content-Type'}) {text!r}{more}"

    @property
    def media_type(self) -> str:
        return (self.content_type or "").split(";", 1)[0].strip().lower()


class _Unreachable(Exception):
    """The witness gave no HTTP answer (connection error, timeout)."""


class _TestLog:
    """The suite's log: deterministic leaves (or a fork of them) under one origin and key."""

    def __init__(self, origin: str, signer: Signer, fork: bool = False) -> None:
        self.origin = origin
        self.signer = signer
        tag = b"tlog-witness conformance fork " if fork else b"tlog-witness conformance entry "
        self.tree = MemoryHashStore()
        self.tree.extend(leaf_hash(tag + b"%d" % i) for i in range(LEAVES))

    def text(self, size: int) -> bytes:
        return Checkpoint(self.origin, size, self.tree.root(size)).format()

    def note(self, size: int) -> bytes:
        return sign_note(self.text(size), [self.signer])

    def proof(self, old: int, size: int) -> list[bytes]:
        return consistency_proof(old, size, self.tree)


def _body(old: int | str | bytes, proof: Sequence[bytes], note: bytes) -> bytes:
    """A request body; ``old`` as bytes or str is sent verbatim (for malformed requests)."""
    if isinstance(old, int):
        return AddCheckpointRequest(old, tuple(proof), note).format()
    first = old if isinstance(old, bytes) else old.encode("utf-8")
    lines = [first] + [b64encode(h).encode() for h in proof]
    return b"\n".join(lines) + b"\n\n" + note


class _Suite:
    def __init__(
        self,
        url: str,
        monitoring_url: str,
        log: _TestLog,
        fork: _TestLog,
        witnesses: tuple[Verifier, ...],
        *,
        session: requests.Session,
        timeout: float,
        clock: Callable[[], float],
        max_skew: int,
    ) -> None:
        self.url = url
        self.mon = monitoring_url
        self.log = log
        self.fork = fork
        self.witnesses = witnesses
        self.session = session
        self.timeout = timeout
        self.clock = clock
        self.max_skew = max_skew
        self.results: list[CheckResult] = []

    # --- HTTP ----------------------------------------------------------------------------------

    def request(self, method: str, url: str, body: bytes | None = None) -> _Answer:
        try:
            a = http_request(self.session, method, url, body, timeout=self.timeout)
        except requests.RequestException as e:
            raise _Unreachable(f"no answer: {type(e).__name__}") from None
        return _Answer(a.status, a.content_type, a.body)

    def post(self, body: bytes) -> _Answer:
        return self.request("POST", self.url + "/add-checkpoint", body)

    def poster(self, body: bytes) -> Callable[[], _Answer]:
        """A sender of ``body`` to add-checkpoint, for :meth:`expect`."""
        return lambda: self.post(body)

    def monitoring_url(self, upper: bool = False) -> str:
        if upper:
            return f"{self.mon}/{origin_hash(self.log.origin).upper()}/checkpoint"
        return monitoring_path(self.mon, self.log.origin)

    # --- recording -----------------------------------------------------------------------------

    def record(self, name: str, rule: str, expected: str, got: str, passed: bool) -> None:
        self.results.append(CheckResult(name, rule, expected, got, passed))

    def expect(
        self,
        name: str,
        rule: str,
        status: int,
        send: Callable[[], _Answer],
        *,
        size_body: int | None = None,
    ) -> _Answer | None:
        """Send, and check the status (and for a 409 the exact size body and media type)."""
        expected = f"{status}"
        if size_body is not None:
            expected += f", body {size_body}\\n, Content-Type {SIZE_CONTENT_TYPE}"
        try:
            answer = send()
        except _Unreachable as e:
            self.record(name, rule, expected, str(e), False)
            return None
        passed = answer.status == status
        if size_body is not None:
            passed = (
                passed
                and answer.body == b"%d\n" % size_body
                and answer.media_type == SIZE_CONTENT_TYPE
            )
        self.record(name, rule, expected, answer.show(), passed)
        return answer

    def cosignatures(self, name: str, rule: str, text: bytes, answer: _Answer | None) -> list[int]:
        """Check a 200's lines: one per witness key, each verifying; return their timestamps."""
        expected = "one verifying line per witness key: " + ", ".join(
            f"{v.name}+{v.key_id:08x}" for v in self.witnesses
        )
        if answer is None or answer.status != 200:
            got = "no 200 answer" if answer is None else f"no 200 answer ({answer.status})"
            self.record(name, rule, expected, got, False)
            return []
        try:
            lines = parse_cosignature_response(answer.body)
        except MalformedError as e:
            self.record(name, rule, expected, f"malformed response: {e}", False)
            return []
        stamps: list[int] = []
        problems: list[str] = []
        for v in self.witnesses:
            mine = [s for s in lines if (s.name, s.key_id) == (v.name, v.key_id)]
            who = f"{v.name}+{v.key_id:08x}"
            if len(mine) != 1:
                problems.append(f"{len(mine)} lines from {who}")
                continue
            if not v.verify(text, mine[0].sig):
                problems.append(f"the line from {who} does not verify")
                continue
            try:
                stamps.append(timestamp_of(mine[0]))
            except MalformedError as e:  # pragma: no cover - a verified line has a timestamp
                problems.append(f"{who}: {e}")
        got = "; ".join(problems) if problems else f"{len(lines)} line(s), all verify"
        self.record(name, rule, expected, got, not problems)
        return stamps

    def timestamps(self, stamps: list[int], which: str, floor: int = 0) -> None:
        """Check the timestamps of ``which`` cosignatures (``first``, ``fresh``)."""
        if not stamps:
            self.record(
                f"{which} cosignature timestamps are non-zero", "TW-20, §14.10", "non-zero",
                "no verified cosignature", False,
            )  # fmt: skip
            return
        self.record(
            f"{which} cosignature timestamps are non-zero", "TW-20, §14.10",
            "non-zero timestamps", " ".join(map(str, stamps)), all(t > 0 for t in stamps),
        )  # fmt: skip
        now = int(self.clock())
        self.record(
            f"{which} cosignature timestamps are not in the future",
            "CS-7",
            f"<= now + {self.max_skew} s ({now + self.max_skew})",
            " ".join(map(str, stamps)),
            all(t <= now + self.max_skew for t in stamps),
        )
        if floor:
            self.record(
                f"{which} cosignature timestamps do not go backwards",
                "§5.5",
                f">= the previous cosignature's timestamp ({floor})",
                " ".join(map(str, stamps)),
                all(t >= floor for t in stamps),
            )

    # --- the checks ----------------------------------------------------------------------------

    def run(self, monitoring: bool, unknown_origin: str) -> list[CheckResult]:
        """Every check, in order, against a fresh origin; the results."""
        note1 = self.log.note(N1)
        self.refusals(note1, monitoring, unknown_origin)
        self.first_cosignature(note1, monitoring)
        self.updates(note1, monitoring)
        return self.results

    def refusals(self, note1: bytes, monitoring: bool, unknown_origin: str) -> None:
        """What the witness must refuse while the origin is fresh: nothing gets cosigned."""
        log = self.log
        if monitoring:
            self.expect(
                "monitoring: a never-cosigned origin is 404", "TW-31", 404,
                lambda: self.request("GET", self.monitoring_url()),
            )  # fmt: skip
        stranger_log = _TestLog(unknown_origin, log.signer)
        self.expect(
            "unknown origin is 404", "TW-10, §14.11", 404,
            lambda: self.post(_body(0, [], stranger_log.note(N1))),
        )  # fmt: skip
        stranger = Ed25519Signer(log.origin + "-stranger", hashlib.sha256(b"stranger").digest())
        self.expect(
            "no signature from a trusted key is 403", "TW-11, §14.7", 403,
            lambda: self.post(_body(0, [], sign_note(log.text(N1), [stranger]))),
        )  # fmt: skip
        self.expect(
            "a trusted key's bad signature is 403", "TW-11, §14.7", 403,
            lambda: self.post(_body(0, [], _corrupt_signature(note1))),
        )  # fmt: skip
        self.expect(
            "old larger than the size is 400", "TW-12, §14.11", 400,
            lambda: self.post(_body(N1 + 1, [], note1)),
        )  # fmt: skip
        # Malformed bodies. Each would read as "old 5" to a lenient parser, which must then
        # answer 409 on the fresh origin rather than cosign: the origin stays fresh.
        h = _SOME_HASH
        malformed: list[tuple[str, str, bytes]] = [
            ("old with a leading zero", "TW-6, §14.17", _body("old 05", [], note1)),
            ("old with a plus sign", "TW-6, §14.17", _body("old +5", [], note1)),
            ("old after two spaces", "TW-6, §14.17", _body("old  5", [], note1)),
            ("old in Arabic-Indic digits", "TW-6, §14.17", _body("old \u0665", [], note1)),
            ("CRLF line endings", "TW-5, §14.18", b"old 5\r\n\r\n" + note1),
            ("64 proof lines", "TW-7, §14.19", _body("old 5", [h] * 64, note1)),
            (
                "a proof line that is not base64",
                "TW-7, §14.18",
                b"old 5\n" + b"!" * 44 + b"\n\n" + note1,
            ),
            ("a 31-byte proof hash", "TW-7, §14.18", _body("old 5", [h[:31]], note1)),
            ("no empty line before the checkpoint", "TW-5", b"old 5\n" + note1),
        ]
        for what, rule, body in malformed:
            self.expect(f"malformed body ({what}) is 400", rule, 400, self.poster(body))
        self.expect(
            "first request with old 5 on a fresh origin is 409 0", "TW-13, §14.12", 409,
            lambda: self.post(_body(5, [], note1)), size_body=0,
        )  # fmt: skip
        bad_zero = sign_note(
            f"{log.origin}\n0\n{b64encode(hashlib.sha256(b'not empty').digest())}\n".encode(),
            [log.signer],
        )
        self.expect(
            "size 0 with a non-empty-tree root is 422", "TW-15, §14.13", 422,
            lambda: self.post(_body(0, [], bad_zero)),
        )  # fmt: skip
        self.expect(
            "old 0 with proof lines is 422", "TW-16, §14.13", 422,
            lambda: self.post(_body(0, [h], note1)),
        )  # fmt: skip

    def first_cosignature(self, note1: bytes, monitoring: bool) -> None:
        """The first cosignature of the origin, what monitoring serves then, and resends."""
        log = self.log
        first = self.expect(
            "old 0, size 6, empty proof is 200", "TW-19, §14.13", 200,
            lambda: self.post(_body(0, [], note1)),
        )  # fmt: skip
        stamps = self.cosignatures(
            "the 200's cosignatures verify", "TW-19, TW-21", log.text(N1), first
        )
        self.timestamps(stamps, "first")
        if monitoring:
            self.monitoring_checks(log.text(N1))
        self.expect(
            "the same request again is 409 6", "TW-13", 409,
            lambda: self.post(_body(0, [], note1)), size_body=N1,
        )  # fmt: skip
        again = self.expect(
            "old = size = stored, same root, empty proof is 200", "§14.14", 200,
            lambda: self.post(_body(N1, [], note1)),
        )  # fmt: skip
        stamps2 = self.cosignatures(
            "the resubmission's cosignatures verify", "TW-19", log.text(N1), again
        )
        self.timestamps(stamps2, "fresh", floor=max(stamps) if stamps else 0)
        extra = Ed25519Signer("unknown.example/key", hashlib.sha256(b"unknown key").digest())
        _, sigs = parse_note(note1)
        with_unknown = sign_note(log.text(N1), [extra], sigs)
        self.expect(
            "lines from unknown keys are ignored", "TW-9", 200,
            lambda: self.post(_body(N1, [], with_unknown)),
        )  # fmt: skip

    def updates(self, note1: bytes, monitoring: bool) -> None:
        """Updates after the first cosignature: refused ones, a good one, a stale one."""
        log, fork, h = self.log, self.fork, _SOME_HASH
        self.expect(
            "old = size with a non-empty proof is 422", "§14.14", 422,
            lambda: self.post(_body(N1, [h], note1)),
        )  # fmt: skip
        self.expect(
            "same size, different root is 422", "TW-17, §14.11", 422,
            lambda: self.post(_body(N1, [], fork.note(N1))),
        )  # fmt: skip
        proof = log.proof(N1, N2)
        bad = [bytes(x ^ 1 for x in proof[0]), *proof[1:]]
        note2 = log.note(N2)
        self.expect(
            "a consistency proof that fails is 422", "TW-16, §14.11", 422,
            lambda: self.post(_body(N1, bad, note2)),
        )  # fmt: skip
        good = self.expect(
            "a good consistency proof is 200", "TW-16, TW-19", 200,
            lambda: self.post(_body(N1, proof, note2)),
        )  # fmt: skip
        self.cosignatures("the update's cosignatures verify", "TW-19", log.text(N2), good)
        self.expect(
            "a stale old size is 409 with the stored size", "TW-13", 409,
            lambda: self.post(_body(N1, log.proof(N1, N3), log.note(N3))), size_body=N2,
        )  # fmt: skip
        self.expect(
            "GET on add-checkpoint is 405", "TW-4", 405,
            lambda: self.request("GET", self.url + "/add-checkpoint"),
        )  # fmt: skip
        if monitoring:
            self.expect(
                "POST on the monitoring endpoint is 405", "TW-29", 405,
                lambda: self.request("POST", self.monitoring_url(), b""),
            )  # fmt: skip

    def monitoring_checks(self, text: bytes) -> None:
        name, rule = "monitoring serves the cosigned checkpoint", "TW-29, TW-30"
        expected = "200: the checkpoint with the log signature and every witness cosignature"
        try:
            answer = self.request("GET", self.monitoring_url())
        except _Unreachable as e:
            self.record(name, rule, expected, str(e), False)
        else:
            self.record(name, rule, expected, *self.judge_served(answer, text))
        self.expect(
            "monitoring path with uppercase hex is 404", "§14.30", 404,
            lambda: self.request("GET", self.monitoring_url(upper=True)),
        )  # fmt: skip

    def judge_served(self, answer: _Answer, text: bytes) -> tuple[str, bool]:
        if answer.status != 200:
            return answer.show(), False
        try:
            served_text, _ = parse_note(answer.body)
            if served_text != text:
                return f"another checkpoint text: {answer.show()}", False
            open_note(answer.body, [_verifier_of(self.log.signer)])
            for v in self.witnesses:
                open_note(answer.body, [v])
        except (MalformedError, VerificationError, UsageError) as e:
            return f"{type(e).__name__}: {e}", False
        return "200, log signature and cosignatures verify", True


def _verifier_of(signer: Signer) -> Verifier:
    v = getattr(signer, "verifier", None)
    if not callable(v):
        raise UsageError("the log signer has no verifier() method")
    out = v()
    if not isinstance(out, Verifier):
        raise UsageError("the log signer's verifier() is not a note verifier")
    return out


def _corrupt_signature(note: bytes) -> bytes:
    """``note`` with the last byte of its first signature flipped (same name and key ID)."""
    text, sigs = parse_note(note)
    s = sigs[0]
    bad = Signature(s.name, s.key_id, s.sig[:-1] + bytes([s.sig[-1] ^ 1]))
    return format_note(text, [bad, *sigs[1:]])


def run_conformance(
    url: str,
    log_signer: Signer,
    witness_vkeys: Sequence[str | Verifier],
    origin: str,
    *,
    monitoring_url: str | None = None,
    monitoring: bool = True,
    unknown_origin: str | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    session: requests.Session | None = None,
    clock: Callable[[], float] = time.time,
    max_skew: int = DEFAULT_MAX_SKEW,
) -> list[CheckResult]:
    """Run the suite (module docstring) against the witness whose submission prefix is ``url``.

    ``log_signer`` signs the test log's checkpoints (it needs a ``verifier()`` method, as the
    toolkit's signers have); ``witness_vkeys`` are the witness's cosignature keys (0x04, 0x06,
    or a 0x01 vkey read as 0x04); ``origin`` is the fresh origin configured on the witness
    with the log signer's key; ``monitoring_url`` the monitoring prefix (default ``url``);
    ``unknown_origin`` an origin the witness does not follow (default: ``origin`` with a
    random suffix). Returns one result per check, in order; never raises for what the witness
    answers (an unreachable witness fails every check).

    Requires: at least one witness key; a valid origin (UsageError / MalformedError).
    """
    if not witness_vkeys:
        raise UsageError("give at least one witness vkey")
    witnesses = tuple(
        cosigner_from_vkey(k if isinstance(k, str) else format_vkey(k)) for k in witness_vkeys
    )
    Checkpoint(origin, 0, EMPTY_ROOT)  # a valid origin
    _verifier_of(log_signer)
    url = url.rstrip("/")
    mon = (monitoring_url or url).rstrip("/")
    if unknown_origin is None:
        unknown_origin = f"{origin}/not-configured-{secrets.token_hex(8)}"
    own = session is None
    s = requests.Session() if session is None else session
    try:
        suite = _Suite(
            url,
            mon,
            _TestLog(origin, log_signer),
            _TestLog(origin, log_signer, fork=True),
            witnesses,
            session=s,
            timeout=timeout,
            clock=clock,
            max_skew=max_skew,
        )
        return suite.run(monitoring, unknown_origin)
    finally:
        if own:
            s.close()


# --- command line ------------------------------------------------------------------------------


class _ArgumentError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise _ArgumentError(message)


def _parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="tlog-witness conformance",
        description="Run the tlog-witness conformance suite against a witness.",
        epilog=(
            "The witness must follow a log whose origin is ORIGIN (never cosigned before: use "
            "a new origin for each run), trusting the public key of --log-key. Exit status: 0 "
            "every check passed, 1 some failed, 2 unusable arguments."
        ),
        allow_abbrev=False,
    )
    p.add_argument("url", metavar="URL", help="the witness's submission prefix")
    p.add_argument(
        "--log-key", required=True, metavar="FILE", help="the test log's signer key file"
    )
    p.add_argument(
        "--witness-vkey",
        action="append",
        required=True,
        metavar="VKEY",
        help="a cosignature key of the witness (repeat for each)",
    )
    p.add_argument("--origin", metavar="ORIGIN", help="the test log's origin (default: key name)")
    p.add_argument("--monitoring-url", metavar="URL", help="monitoring prefix (default: URL)")
    p.add_argument(
        "--no-monitoring", action="store_true", help="skip the monitoring endpoint checks"
    )
    p.add_argument("--unknown-origin", metavar="ORIGIN", help="an origin the witness ignores")
    p.add_argument("--timeout", metavar="SECONDS", default="10", help="per request (default 10)")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    return p


def _fail(message: str) -> int:
    sys.stderr.write(f"tlog-witness: conformance: {message}\n".replace("\r", "\\r"))
    sys.stderr.flush()
    return 2


def conformance_main(argv: Sequence[str] | None = None) -> int:
    """``tlog-witness conformance`` with ``argv`` (the arguments after the verb).

    Returns the exit status: 0 all checks passed, 1 some failed, 2 unusable arguments (one
    line on standard error). ``--help`` exits 0 through SystemExit, as argparse does.
    """
    args_list = list(sys.argv[1:] if argv is None else argv)
    try:
        args = _parser().parse_args(args_list)
        try:
            timeout = float(args.timeout)
        except ValueError:
            raise UsageError(f"--timeout {args.timeout!r} is not a number") from None
        if not 0 < timeout < float("inf"):
            raise UsageError("--timeout must be a positive number of seconds")
        with open(args.log_key, "rb") as f:
            data = f.read(MAX_KEY_FILE_SIZE + 1)
        if len(data) > MAX_KEY_FILE_SIZE:
            raise MalformedError(f"key file {args.log_key} is too large")
        key = parse_signer_key(data.decode("utf-8"))
        signer = key.signer()
        origin = args.origin if args.origin is not None else key.name
        results = run_conformance(
            args.url,
            signer,
            args.witness_vkey,
            origin,
            monitoring_url=args.monitoring_url,
            monitoring=not args.no_monitoring,
            unknown_origin=args.unknown_origin,
            timeout=timeout,
        )
    except _ArgumentError as e:
        return _fail(f"{e} (see 'tlog-witness conformance --help')")
    except (TlogError, OSError, UnicodeDecodeError) as e:
        return _fail(str(e))
    passed = sum(r.passed for r in results)
    if args.json:
        out = {
            "url": args.url.rstrip("/"),
            "origin": origin,
            "passed": passed,
            "total": len(results),
            "checks": [asdict(r) for r in results],
        }
        sys.stdout.write(json.dumps(out, indent=2, ensure_ascii=False) + "\n")
    else:
        lines = [r.line() for r in results]
        lines.append(f"{passed} of {len(results)} checks passed")
        sys.stdout.write("\n".join(lines) + "\n")
    sys.stdout.flush()
    return 0 if passed == len(results) else 1
