"""``tlog-verify proof``, ``checkpoint`` and ``consistency``: one run, one checkpoint, two.

Each function reads its files, checks them against the auditor's :class:`tlog.policy.Policy`
and returns a :class:`~verifier.report.Report` (status 0 valid, 1 invalid). An input the
auditor supplies that cannot be used raises :class:`~tlog.errors.UsageError` (status 2), an
unreadable file :class:`OSError` (status 2). The audited inputs (proof, records, checkpoints,
consistency proof) are judged: malformed is invalid (status 1), as for an export.

**proof** (:func:`verify_proof_file`): a C2SP tlog-proof@v1 file as ``tlog-store prove``
writes it — its ``extra`` data is the run's head (32 bytes), and the leaf is
``SHA-256(0x00 || head)`` (RFC 6962). In the spec's order: the file parses strictly
(:meth:`tlog.proof.TlogProof.parse`); the head is known (from ``extra``, ``head=`` or the
records — when several are given they must agree); with the run's records, their chain is
verified from genesis to that head; the checkpoint's origin is the expected one (``origin=``,
optional); a listed log signed it; every signature line of a policy key verifies (a bad one
rejects the proof); the quorum is met under the time rules; the inclusion proof of the leaf at
``index`` leads to the checkpoint's root. ``extra`` is not authenticated by itself: what makes
the head trustworthy is the inclusion proof under a cosigned checkpoint.

The records file's format is defined in :mod:`verifier.records`.

**checkpoint** (:func:`verify_checkpoint_file`): a signed checkpoint note under the policy
(:meth:`tlog.policy.Policy.evaluate`): a listed log signed it, every line of a policy key
verifies, the quorum is met under the time rules. Lines of other keys are ignored and listed.

**consistency** (:func:`verify_consistency_files`): two checkpoints, each as above (the
``max_age`` rule applies to the new one only: the old one is old by nature), of one origin,
and the RFC 6962 consistency proof from the old size to the new one (a file of base64 hashes,
one per line, each ending in LF, as ``tlog prove --old`` prints and tlog-witness requests
carry; absent or empty means the empty proof). From size 0 no proof exists and none may be
given; equal sizes need equal roots and the empty proof; an old size larger than the new one
is a rollback.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any

from tlog.checkpoint import Checkpoint
from tlog.encoding import b64decode, b64encode, parse_hash
from tlog.errors import (
    InvalidSignatureError,
    MalformedError,
    ProofError,
    UnverifiedNoteError,
    UsageError,
    VerificationError,
)
from tlog.inbox import MAX_ENTRY_SIZE, MAX_PAYLOAD, Entry, event_from_json, receipt_entry
from tlog.journal import parse_json
from tlog.merkle import leaf_hash, verify_consistency, verify_inclusion
from tlog.note import MAX_NOTE_SIZE, Verifier, parse_note
from tlog.policy import Policy, PolicyResult, TimePolicy
from tlog.proof import MAX_PROOF_SIZE, TlogProof
from verifier.records import RecordsResult, read_records, trusted_record_keys
from verifier.report import Failure, InputError, LocatedError, Report, failure_from

__all__ = [
    "MAX_CONSISTENCY_PROOF_SIZE",
    "judge_note",
    "read_input",
    "verify_checkpoint_file",
    "verify_consistency_files",
    "verify_proof_file",
]

MAX_CONSISTENCY_PROOF_SIZE = 64 * 45
"""Largest consistency proof file: at most 64 base64 hashes of 44 characters and an LF."""


# --- input ---------------------------------------------------------------------------------


def read_input(path: str, limit: int, what: str) -> bytes:
    """Read a whole file (``-``: standard input); more than ``limit`` bytes is malformed.

    Raises :class:`OSError` when it cannot be read, :class:`MalformedError` when too large.
    """
    if path == "-":
        data = sys.stdin.buffer.read(limit + 1)
    else:
        with open(path, "rb") as f:
            data = f.read(limit + 1)
    if len(data) > limit:
        raise MalformedError(f"{what} is larger than {limit} bytes")
    return data


def _note_line(note: bytes, first_line: int, name: str, key_id: int) -> int | None:
    """The file line of the signature line of (name, key ID) in a note starting at
    ``first_line``, or None."""
    split = note.rfind(b"\n\n")
    if split < 0:
        return None
    start = first_line + note[: split + 1].count(b"\n") + 1
    prefix = f"— {name} ".encode()
    for j, raw in enumerate(note[split + 2 :].split(b"\n")):
        if raw.startswith(prefix):
            try:
                sig = b64decode(raw[len(prefix) :], "signature")
            except MalformedError:
                continue
            if len(sig) >= 4 and int.from_bytes(sig[:4], "big") == key_id:
                return start + j
    return None


# --- a checkpoint under a policy -----------------------------------------------------------


def judge_note(
    note: bytes,
    policy: Policy,
    time_policy: TimePolicy | None,
    *,
    first_line: int = 1,
    origin: str | None = None,
) -> PolicyResult:
    """Evaluate a checkpoint note under ``policy``; raise unless the quorum is met.

    ``first_line`` is the file line of the note's first line (for locations). Raises
    :class:`~verifier.report.LocatedError` (kinds ``malformed``, ``unverified``,
    ``signature``, ``policy``).
    """
    if not policy.logs:
        raise UsageError("the policy lists no logs: give --log-vkey")
    try:
        text, _ = parse_note(note)
        cp = Checkpoint.parse(text)
    except MalformedError as e:
        raise LocatedError("malformed", f"checkpoint: {e}", line=first_line) from None
    except ProofError as e:
        raise LocatedError("proof", f"checkpoint: {e}", line=first_line + 2) from None
    if origin is not None and cp.origin != origin:
        raise LocatedError(
            "unverified",
            f"the checkpoint is for origin {cp.origin!r}, not the expected {origin!r}",
            line=first_line,
            checkpoint_size=cp.size,
        )
    try:
        result = policy.evaluate(note, time_policy)
    except InvalidSignatureError as e:
        raise LocatedError(
            "signature",
            f"the signature line of {e.name}+{e.key_id:08x}, a key of the policy, does not verify",
            line=_note_line(note, first_line, e.name, e.key_id),
            checkpoint_size=cp.size,
        ) from None
    except UnverifiedNoteError as e:
        raise LocatedError("unverified", str(e), line=first_line, checkpoint_size=cp.size) from None
    if not result.quorum_met:
        raise LocatedError(
            "policy", result.describe_failure(), line=first_line, checkpoint_size=cp.size
        )
    return result


def _result_facts(result: PolicyResult) -> dict[str, Any]:
    cp = result.checkpoint
    return {
        "origin": cp.origin,
        "size": cp.size,
        "root": b64encode(cp.root),
        "log_keys": [log.vkey for log in result.logs],
        "witnesses": [c.witness.name for c in result.cosignatures],
        "ignored": [
            {"witness": i.witness.name, "timestamp": i.timestamp, "reason": i.reason}
            for i in result.ignored
        ],
        "unknown_signatures": [f"{s.name}+{s.key_id:08x}" for s in result.note.unverified],
    }


def _policy_checks(
    report: Report,
    result: PolicyResult,
    policy: Policy,
    time_policy: TimePolicy | None,
    prefix: str = "",
    what: str = "",
) -> None:
    of = f" of the {what} checkpoint" if what else ""
    report.check(
        f"{prefix}log-signature",
        f"log signature{of} by a log of the policy",
        len(result.logs),
        "signature lines",
    )
    report.check(
        f"{prefix}witness-quorum",
        f"witness quorum '{policy.quorum}'{of} met",
        len(result.cosignatures),
        "cosignatures counted",
    )
    if time_policy is not None:
        rules = [f"now {time_policy.now}"]
        if time_policy.max_skew is not None:
            rules.append(f"max-skew {time_policy.max_skew}s")
        if time_policy.max_age is not None:
            rules.append(f"max-age {time_policy.max_age}s")
        report.check(
            f"{prefix}time-rules",
            f"cosignature time rules{of} ({', '.join(rules)})",
            len(result.cosignatures) + len(result.ignored),
            "cosignatures judged",
        )


# --- checkpoint ----------------------------------------------------------------------------


def verify_checkpoint_file(
    path: str,
    *,
    policy: Policy,
    time_policy: TimePolicy | None = None,
    origin: str | None = None,
) -> Report:
    """Verify one signed checkpoint note under ``policy`` (module docstring)."""
    report = Report("checkpoint", {"checkpoint": path})
    try:
        note = read_input(path, MAX_NOTE_SIZE, "the checkpoint")
        result = judge_note(note, policy, time_policy, origin=origin)
    except (VerificationError, MalformedError) as e:
        return report.fail(failure_from(e, "checkpoint"))
    report.check("checkpoint-format", "signed checkpoint note format", 1, "notes")
    _policy_checks(report, result, policy, time_policy)
    report.facts.update(_result_facts(result))
    _note_unknown_signatures(report, result)
    return report


def _note_unknown_signatures(report: Report, result: PolicyResult) -> None:
    """Note the signature lines of keys the policy does not list (ignored), if any."""
    if result.note.unverified:
        unknown = [f"{s.name}+{s.key_id:08x}" for s in result.note.unverified]
        report.note(
            "signature lines from keys the policy does not list were ignored: " + ", ".join(unknown)
        )


# --- consistency ---------------------------------------------------------------------------


def _proof_hashes(data: bytes) -> list[bytes]:
    """A consistency proof file: base64 hashes, one per line, each ending in LF."""
    if not data:
        return []
    if not data.endswith(b"\n"):
        lines = data.count(b"\n") + 1
        raise MalformedError(f"line {lines}: the proof does not end in a newline")
    hashes = []
    for i, line in enumerate(data[:-1].split(b"\n"), 1):
        try:
            hashes.append(parse_hash(line, "proof hash"))
        except MalformedError as e:
            raise MalformedError(f"line {i}: {e}") from None
    return hashes


def verify_consistency_files(
    old: str,
    new: str,
    *,
    policy: Policy,
    proof: str | None = None,
    time_policy: TimePolicy | None = None,
    origin: str | None = None,
) -> Report:
    """Verify two checkpoints and the consistency proof between them (module docstring)."""
    inputs = {"old": old, "new": new}
    if proof is not None:
        inputs["consistency-proof"] = proof
    report = Report("consistency", inputs)
    history = (
        None if time_policy is None else TimePolicy(time_policy.now, None, time_policy.max_skew)
    )
    results: dict[str, PolicyResult] = {}
    for role, path, tp in (("old", old, history), ("new", new, time_policy)):
        try:
            note = read_input(path, MAX_NOTE_SIZE, f"the {role} checkpoint")
            results[role] = judge_note(note, policy, tp, origin=origin)
        except (VerificationError, MalformedError) as e:
            return report.fail(failure_from(e, role))
        report.check(f"{role}-checkpoint-format", f"{role} checkpoint note format", 1, "notes")
        _policy_checks(report, results[role], policy, tp, f"{role}-", role)
    a, b = results["old"].checkpoint, results["new"].checkpoint
    report.facts["origin"] = b.origin
    for role in ("old", "new"):
        f = _result_facts(results[role])
        report.facts[role] = {k: f[k] for k in ("size", "root", "witnesses", "ignored")}
    try:
        hashes = _proof_hashes(
            b""
            if proof is None
            else read_input(proof, MAX_CONSISTENCY_PROOF_SIZE, "the consistency proof")
        )
    except MalformedError as e:
        return report.fail(failure_from(e, "consistency-proof"))
    report.facts["proof_hashes"] = len(hashes)
    if proof is None and a.origin == b.origin and 0 < a.size < b.size:
        # Two checkpoints of different sizes say nothing of each other without a proof: not
        # a verdict against the log (an empty proof given as a file is judged below).
        return report.fail(
            failure_from(
                InputError(
                    f"checkpoints of sizes {a.size} and {b.size} need a consistency proof"
                    " (--proof FILE) to be judged"
                ),
                "consistency-proof",
            )
        )
    try:
        _check_consistency(a, b, hashes)
    except LocatedError as e:
        return report.fail(failure_from(e, "consistency-proof" if hashes else None))
    report.check(
        "consistency",
        f"consistency from size {a.size} to size {b.size} (RFC 9162 §2.1.4.2)",
        len(hashes),
        "proof hashes",
    )
    return report


def _check_consistency(a: Checkpoint, b: Checkpoint, hashes: list[bytes]) -> None:
    if a.origin != b.origin:
        raise LocatedError(
            "consistency", f"the checkpoints are of two logs: {a.origin!r} and {b.origin!r}"
        )
    if a.size > b.size:
        raise LocatedError(
            "consistency",
            f"rollback: the old checkpoint has size {a.size}, the new one {b.size}",
        )
    if a.size == 0:
        if hashes:
            raise LocatedError(
                "proof", "no consistency proof exists from size 0: the proof must be empty"
            )
        return
    try:
        verify_consistency(a.size, b.size, a.root, b.root, hashes)
    except ProofError as e:
        raise LocatedError(
            "consistency",
            f"{e}: the two checkpoints do not describe one append-only log (or the proof "
            "is not theirs)",
        ) from None


# --- proof ---------------------------------------------------------------------------------


class _Rejected(Exception):
    """A step of :func:`verify_proof_file` found the failure its report ends with."""

    def __init__(self, failure: Failure) -> None:
        super().__init__(failure.message)
        self.failure = failure


def verify_proof_file(
    path: str,
    *,
    policy: Policy,
    time_policy: TimePolicy | None = None,
    records: str | None = None,
    record_keys: Iterable[str] | None = None,
    require_record_signatures: bool = False,
    origin: str | None = None,
    head: bytes | None = None,
    event: str | None = None,
) -> Report:
    """Verify a tlog-proof file as ``tlog-store prove`` writes it (module docstring), or an
    inbox receipt as ``tlog-store event receipt`` writes it (its extra data is an inbox entry,
    :mod:`tlog.inbox`; the leaf is the entry's leaf hash).

    ``records``: the path of the run's records (``tlog-store read RUN --json``); ``head``:
    the run head the auditor expects (32 bytes); ``event``: for a receipt, the path of the
    event (its JSON form) the receipt must be for. Requires: ``policy`` lists a log.
    """
    if not policy.logs:
        raise UsageError("the policy lists no logs: give --log-vkey")
    if head is not None and len(head) != 32:
        raise UsageError("a run head is 32 bytes")
    trusted = trusted_record_keys(record_keys)
    if require_record_signatures and not trusted:
        raise UsageError("--require-record-signatures needs the trusted keys: --record-key")
    inputs = {"proof": path}
    if records is not None:
        inputs["records"] = records
    if event is not None:
        inputs["event"] = event
    report = Report("proof", inputs)
    try:
        data, proof = _read_proof(report, path)
        if proof.extra is not None and proof.extra[:1] == b"{":
            if records is not None or head is not None:
                raise UsageError("a receipt is of an event: --records and --head are for runs")
            _verify_receipt(report, data, proof, policy, time_policy, origin, event)
            return report
        if event is not None:
            raise UsageError("--event is for an inbox receipt; this proof is of a run")
        run_head = _proof_head(proof, head)
        if records is not None:
            got = _check_records(report, records, trusted, require_record_signatures, run_head)
            run_head = got.head
        if run_head is None:
            raise InputError(
                "the proof carries no head (no extra line): give the run's records (--records) "
                "or its head (--head)"
            )
        if records is not None or head is not None:
            report.check("head", "the proof's head is the run's", 1, "heads")
        note_line = data[: len(data) - len(proof.checkpoint)].count(b"\n") + 1
        result = _check_inclusion(report, proof, note_line, run_head, policy, time_policy, origin)
    except _Rejected as e:
        return report.fail(e.failure)
    if records is None:
        report.note(
            "without --records, the proof shows that the head is in the log, not which "
            "records lead to it"
        )
    _note_unknown_signatures(report, result)
    return report


def _verify_receipt(
    report: Report,
    data: bytes,
    proof: TlogProof,
    policy: Policy,
    time_policy: TimePolicy | None,
    origin: str | None,
    event: str | None,
) -> None:
    """An inbox receipt: its entry parses, matches ``event`` when given, and is in the log."""
    assert proof.extra is not None
    try:
        entry = receipt_entry(proof.extra)
    except MalformedError as e:
        raise _Rejected(Failure("malformed", f"the receipt's entry: {e}", "proof", 2)) from None
    report.check("entry-format", "the receipt's inbox entry is canonical", 1, "receipts")
    if event is not None:
        _check_event(report, event, entry)
    note_line = data[: len(data) - len(proof.checkpoint)].count(b"\n") + 1
    result = _check_inclusion(
        report, proof, note_line, proof.extra, policy, time_policy, origin, what="the event's"
    )
    report.facts.update(
        {
            "source": entry.source,
            "id": entry.id,
            "kind": entry.kind,
            "keys": [list(k) for k in entry.keys],
            "payload_sha256": b64encode(entry.payload_sha256),
            "received_at": entry.received_at,
        }
    )
    if not result.checkpoint.origin.endswith("/inbox"):
        report.note("the checkpoint's origin does not end in /inbox: check it is the inbox log")
    if event is None:
        report.note(
            "without --event, the receipt shows that this entry was accepted; give the "
            "event to check it is yours"
        )
    _note_unknown_signatures(report, result)


def _check_event(report: Report, path: str, entry: Entry) -> None:
    """The event file (JSON form) is the one the entry commits to."""
    raw = read_input(path, 2 * MAX_PAYLOAD + MAX_ENTRY_SIZE, "the event")
    # The event file is the auditor's, as a key or a policy is: one that does not parse
    # leaves nothing to check the receipt against (UNUSABLE), it does not make it INVALID.
    try:
        ev = event_from_json(parse_json(raw.decode("utf-8")))
    except UnicodeDecodeError:
        raise InputError("--event: the event is not UTF-8") from None
    except MalformedError as e:
        raise InputError(f"--event: the event: {e}") from None
    if not entry.matches(ev):
        differs = next(
            name
            for name, a, b in (
                ("source", entry.source, ev.source),
                ("id", entry.id, ev.id),
                ("kind", entry.kind, ev.kind),
                ("keys", entry.keys, ev.keys),
                ("payload", entry.payload_sha256, ev.payload_sha256),
            )
            if a != b
        )
        message = f"the receipt is not for this event: its {differs} differs"
        raise _Rejected(Failure("proof", message, "event", 1))
    report.check("event", "the receipt's entry is the event's (payload by its hash)", 1, "events")


def _read_proof(report: Report, path: str) -> tuple[bytes, TlogProof]:
    """The proof file's bytes and its parse (the check ``proof-format``)."""
    try:
        data = read_input(path, MAX_PROOF_SIZE, "the proof")
        proof = TlogProof.parse(data)
    except MalformedError as e:
        raise _Rejected(failure_from(e, "proof")) from None
    report.check("proof-format", "tlog-proof@v1 format", 1, "files")
    return data, proof


def _proof_head(proof: TlogProof, head: bytes | None) -> bytes | None:
    """The run head the proof and ``--head`` give (they must agree), None if neither does."""
    extra = proof.extra
    if extra is None:
        return head
    if len(extra) != 32:
        message = (
            f"the extra data is {len(extra)} bytes, not a 32-byte run head (the form "
            "tlog-store prove writes)"
        )
        raise _Rejected(Failure("malformed", message, "proof", 2))
    if head is not None and extra != head:
        message = (
            f"the proof is for head {b64encode(extra)}, not the expected head "
            f"{b64encode(head)} (--head)"
        )
        raise _Rejected(Failure("proof", message, "proof", 2))
    return extra


def _check_records(
    report: Report,
    records: str,
    trusted: list[Verifier] | None,
    require_signatures: bool,
    run_head: bytes | None,
) -> RecordsResult:
    """Verify the run's records file and that it ends at ``run_head`` (if known)."""
    try:
        got = read_records(records, trusted, require_signatures)
    except (MalformedError, VerificationError) as e:
        raise _Rejected(failure_from(e, "records")) from None
    report.check(
        "records-chain",
        f"the records of run {got.run} chain from genesis (hashes, links, run, seq)",
        got.records,
        "records",
    )
    if trusted is not None:
        report.check(
            "records-signatures",
            "record signatures of trusted keys verify",
            got.verified,
            "signed records",
        )
    if run_head is not None and got.head != run_head:
        message = (
            f"the records end at record {got.records} with hash {b64encode(got.head)},"
            f" which is not the proof's head {b64encode(run_head)}"
        )
        n = got.records
        raise _Rejected(Failure("chain", message, "records", n, got.run, n))
    report.facts.update({"run": got.run, "records": got.records, "signed_records": got.signed})
    if got.outcome is not None:
        report.facts["outcome"] = got.outcome
    if got.signed > got.verified:
        report.note(
            f"{got.signed - got.verified} record signature(s) are from keys not given "
            "with --record-key and were not checked"
        )
    return got


def _check_inclusion(
    report: Report,
    proof: TlogProof,
    note_line: int,
    run_head: bytes,
    policy: Policy,
    time_policy: TimePolicy | None,
    origin: str | None,
    *,
    what: str = "the run's",
) -> PolicyResult:
    """The spec's steps 2-4: the origin, the log's signature and the cosignatures under the
    policy (a bad line of a policy key rejects), then the inclusion of the leaf of
    ``run_head`` (a run's head, or a receipt's entry: ``what`` names whose)."""
    leaf = leaf_hash(run_head)
    try:
        result = judge_note(
            proof.checkpoint, policy, time_policy, first_line=note_line, origin=origin
        )
        cp = result.checkpoint
        verify_inclusion(proof.index, cp.size, leaf, proof.hashes, cp.root)
    except ProofError as e:
        index_line = 2 if proof.extra is None else 3
        raise _Rejected(Failure("proof", f"inclusion proof: {e}", "proof", index_line)) from None
    except VerificationError as e:
        raise _Rejected(failure_from(e, "proof")) from None
    _policy_checks(report, result, policy, time_policy)
    if len(run_head) == 32:
        report.facts["head"] = b64encode(run_head)
    report.check(
        "inclusion",
        f"inclusion of {what} leaf at index {proof.index} in the tree of size {cp.size}",
        len(proof.hashes),
        "proof hashes",
    )
    facts = _result_facts(result)
    report.facts.update(
        {
            "origin": cp.origin,
            "index": proof.index,
            "size": cp.size,
            "root": b64encode(cp.root),
            "leaf": b64encode(leaf),
            "witnesses": facts["witnesses"],
            "ignored": facts["ignored"],
            "log_keys": facts["log_keys"],
        }
    )
    return result
