"""The ``tlog-verify`` command: the offline auditor's verdict on exports, proofs, checkpoints.

Verbs (``docs/auditor-guide.md`` explains each check and what a verdict means)::

    tlog-verify export FILE        TRUST [--since CHECKPOINT] [--record-key VKEY]...
                                   [--require-record-signatures] [--quorum-scope all|last]
                                   [--jobs N] [--no-progress] TIME [--json]
    tlog-verify proof FILE         TRUST [--records FILE] [--head HASH] [--record-key VKEY]...
                                   [--require-record-signatures] [--origin O] TIME [--json]
    tlog-verify checkpoint NOTE    TRUST [--origin O] TIME [--json]
    tlog-verify consistency OLD NEW [--proof FILE] TRUST [--origin O] TIME [--json]
    tlog-verify follow URL         TRUST --state FILE [--evidence DIR] [--once] [--interval S]
                                   [--verify-entries [--check-tiles]] [--timeout S] [--no-progress]
                                   TIME [--json]

    TRUST: --policy FILE [--log-vkey VKEY]
           | --log-vkey VKEY [--witness VKEY --witness VKEY ... --quorum K]
    TIME:  [--max-age SECONDS] [--max-skew SECONDS] [--now POSIX-SECONDS]

Trust. ``--policy`` is a C2SP tlog-policy file (:mod:`tlog.policy`). A policy that lists no log
takes the log from ``--log-vkey``; with a policy that lists logs, ``--log-vkey`` picks one of
them. Without a policy, ``--log-vkey`` is the log, each ``--witness`` a witness vkey (0x04,
0x06, or an Ed25519 0x01 vkey read as its cosignature/v1 key) and ``--quorum K`` the number of
them that must cosign (``--quorum`` is required with ``--witness``; with no witness the quorum
is ``none``: the log's signature alone).

Time. Cosignature timestamps more than ``--max-skew`` seconds (default 60) after ``--now``
(default: the clock) do not count; with ``--max-age``, nor do those older than ``now -
max-age`` — on an export's last checkpoint, on a proof's or a checkpoint's checkpoint, and on
the new checkpoint of ``consistency``. Uncounted cosignatures are reported and may leave the
quorum short.

Inputs: ``-`` is standard input (at most one input per command). ``--since`` is a checkpoint
note the auditor kept; ``--records`` is ``tlog-store read RUN --json`` output; ``--proof`` is one
base64 hash per line (``tlog prove --old`` output). Numbers are canonical decimals; ``--head`` is
base64 of 32 bytes.

Output: the report (:mod:`verifier.report`) on standard output — text, or with ``--json`` the
``tlog-verify/report/v1`` object. ``export`` draws a progress bar on standard error when that is
a terminal (never with ``--no-progress``). ``--jobs N`` (default: the number of CPUs) verifies
a large export on N processes when :mod:`verifier.parallel` is installed; the report is the
same for every N.

Exit status: 0 valid; 1 invalid (the input was judged and does not verify — malformed audited
data included); 2 unusable input or usage (bad arguments, an unreadable file, a malformed
policy, key or kept checkpoint; nothing was judged). Every status other than 0 also prints one
line on standard error, ``tlog-verify: <verb>: <message>``, and never a traceback: :func:`main`
is the one place that maps exceptions to statuses, and an unexpected exception is reported as
an internal error with status 2 (the input was not judged).

Each verb is declared once (:func:`command`) and is a call of a library function: the trust
options become a policy in :mod:`verifier.trust`, the progress bar is
:class:`verifier.progress.ProgressBar`, and the verdicts are
:func:`verifier.export.verify_export_file` and the functions of :mod:`verifier.proofs`. This
module parses, calls and prints.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence

from tlog.cli.run import Command, Exit, Verb, write_error
from tlog.encoding import parse_hash
from tlog.errors import MalformedError, UsageError
from tlog.policy import DEFAULT_MAX_SKEW, Policy, TimePolicy
from verifier.export import verify_export_file
from verifier.fetch import DEFAULT_TIMEOUT as DEFAULT_FOLLOW_TIMEOUT
from verifier.follow import follow, follow_once
from verifier.progress import ProgressBar, progress_wanted
from verifier.proofs import verify_checkpoint_file, verify_consistency_files, verify_proof_file
from verifier.report import EXIT_UNUSABLE, Failure, Report, failure_from
from verifier.trust import (
    build_policy,
    build_time_policy,
    option_number,
    option_text,
    read_kept_checkpoint,
)

__all__ = ["ProgressBar", "build_parser", "command", "main"]

PROG = "tlog-verify"


# --- arguments -------------------------------------------------------------------------------


def _one_stdin(*paths: str | None) -> None:
    if sum(p == "-" for p in paths) > 1:
        raise UsageError("only one input can be standard input ('-')")


def _optional(text: str | None, what: str) -> str | None:
    return None if text is None else option_text(text, what)


def _policy(args: argparse.Namespace) -> Policy:
    return build_policy(
        policy=args.policy, log_vkey=args.log_vkey, witnesses=args.witness, quorum=args.quorum
    )


def _time_policy(args: argparse.Namespace) -> TimePolicy:
    return build_time_policy(now=args.now, max_age=args.max_age, max_skew=args.max_skew)


def _record_keys(args: argparse.Namespace) -> list[str] | None:
    if not args.record_key:
        return None
    return [option_text(k, "--record-key") for k in args.record_key]


# --- verbs -------------------------------------------------------------------------------------


def _cmd_export(args: argparse.Namespace) -> Report:
    path = option_text(args.file, "FILE")
    _one_stdin(path, args.policy, args.since)
    jobs = option_number(args.jobs, "--jobs") if args.jobs is not None else (os.cpu_count() or 1)
    if not jobs:
        raise UsageError("--jobs must be at least 1")
    policy = _policy(args)
    since = None if args.since is None else read_kept_checkpoint(args.since)
    wanted = progress_wanted(sys.stderr, disabled=args.no_progress)
    bar = ProgressBar(sys.stderr, "tlog-verify: export") if wanted else None
    try:
        report = verify_export_file(
            path,
            policy=policy,
            since=since,
            time_policy=_time_policy(args),
            jobs=jobs,
            progress=bar,
            record_keys=_record_keys(args),
            require_record_signatures=args.require_record_signatures,
            quorum_scope=args.quorum_scope,
        )
    finally:
        if bar is not None:
            bar.close()
    return _with_inputs(report, args)


def _cmd_proof(args: argparse.Namespace) -> Report:
    path = option_text(args.file, "FILE")
    records = _optional(args.records, "--records")
    event = _optional(args.event, "--event")
    _one_stdin(path, records, args.policy, event)
    head = None
    if args.head is not None:
        try:
            head = parse_hash(option_text(args.head, "--head"), "--head")
        except MalformedError as e:
            raise UsageError(str(e)) from None
    report = verify_proof_file(
        path,
        policy=_policy(args),
        time_policy=_time_policy(args),
        records=records,
        record_keys=_record_keys(args),
        require_record_signatures=args.require_record_signatures,
        origin=_optional(args.origin, "--origin"),
        head=head,
        event=event,
    )
    return _with_inputs(report, args)


def _cmd_checkpoint(args: argparse.Namespace) -> Report:
    path = option_text(args.file, "NOTE")
    _one_stdin(path, args.policy)
    report = verify_checkpoint_file(
        path,
        policy=_policy(args),
        time_policy=_time_policy(args),
        origin=_optional(args.origin, "--origin"),
    )
    return _with_inputs(report, args)


def _cmd_consistency(args: argparse.Namespace) -> Report:
    old, new = option_text(args.old, "OLD"), option_text(args.new, "NEW")
    proof = _optional(args.proof, "--proof")
    _one_stdin(old, new, proof, args.policy)
    report = verify_consistency_files(
        old,
        new,
        policy=_policy(args),
        proof=proof,
        time_policy=_time_policy(args),
        origin=_optional(args.origin, "--origin"),
    )
    return _with_inputs(report, args)


def _cmd_follow(args: argparse.Namespace) -> Report:
    url = option_text(args.url, "URL")
    state = option_text(args.state, "--state")
    evidence = _optional(args.evidence, "--evidence")
    interval = option_number(args.interval, "--interval")
    timeout = option_number(args.timeout, "--timeout")
    if interval == 0 or timeout == 0:
        raise UsageError("--interval and --timeout must be at least 1 second")
    policy = _policy(args)
    wanted = progress_wanted(sys.stderr, disabled=args.no_progress)

    def one_round() -> Report:
        bar = ProgressBar(sys.stderr, "tlog-verify: follow") if wanted else None
        try:
            report = follow_once(
                url,
                policy=policy,
                state=state,
                time_policy=_time_policy(args),  # the clock of this round
                evidence=evidence,
                verify_entries=args.verify_entries or args.check_tiles,
                check_tiles=args.check_tiles,
                progress=bar,
                timeout=float(timeout or DEFAULT_FOLLOW_TIMEOUT),
            )
        finally:
            if bar is not None:
                bar.close()
        return _with_inputs(report, args)

    if args.once:
        return one_round()

    def on_round(report: Report) -> None:
        if report.status == EXIT_UNUSABLE and report.failure is not None:
            write_error(PROG, "follow", f"round skipped: {report.failure.message}")
        elif report.valid:
            facts = report.facts
            if args.json:
                _write(json.dumps(report.to_json(), ensure_ascii=False) + "\n")
            else:
                _write(f"{facts.get('origin')} size {facts.get('size')} {facts.get('root')}\n")

    return follow(one_round, interval=float(interval or 60), on_round=on_round)


def _with_inputs(report: Report, args: argparse.Namespace) -> Report:
    """``report`` with the auditor's own inputs (policy, kept checkpoint) among its inputs."""
    if args.policy is not None:
        report.inputs["policy"] = args.policy
    since = getattr(args, "since", None)
    if since is not None:
        report.inputs["since"] = since
    return report


# --- argument parsing ----------------------------------------------------------------------------


_EPILOG_MAIN = """\
Run 'tlog-verify VERB --help' for what each verb checks. docs/auditor-guide.md explains the
checks, what "valid" means and does not mean, policies, time rules, --since and the JSON
report.

trust (every verb):
  --policy FILE         a C2SP tlog-policy file: logs, witnesses, groups, quorum
  --log-vkey VKEY       the log's key (with a policy that lists no log, or to pick one)
  --witness VKEY        a witness key (repeat), without --policy
  --quorum K            how many of the --witness keys must cosign

exit status:
  0  valid: every check passed
  1  invalid: the input was judged and does not verify (the report names the first failure
     and where: line, run, record, checkpoint)
  2  unusable input or usage: bad arguments, unreadable file, malformed policy, key or kept
     checkpoint; nothing was judged
Every status other than 0 also prints one line on standard error.

examples:
  tlog-verify export journal.export --policy auditor.policy
  tlog-verify export journal.export --log-vkey "$(cat log.vkey)" \\
      --witness "$(cat w1.vkey)" --witness "$(cat w2.vkey)" --quorum 2 --since kept.checkpoint
  tlog-verify proof run-1.tlog-proof --policy auditor.policy --records run-1.jsonl
  tlog-verify checkpoint checkpoint --policy auditor.policy --max-age 3600
  tlog-verify consistency old.checkpoint new.checkpoint --proof proof --policy auditor.policy
"""

_EPILOG_EXPORT = """\
Checks, in file order (docs/export-format.md section 6, and the auditor's own):
  * the format: grammar, canonical spelling, order, counts, and the digest on the end line;
  * the log-key line is a log of the policy; each record-key line is a --record-key (if given);
  * every checkpoint: its signature lines verify (log key and declared witnesses), the
    policy's witness quorum is met by the last checkpoint (with --quorum-scope all: by every
    one; an earlier one may predate publishing, and consistency ties it to the last),
    cosignatures from the future (--max-skew) do not count, and on the last checkpoint
    neither do those older than --max-age;
  * every record: hash, chain link, run and seq; every record signature (with
    --require-record-signatures every record must be signed);
  * every sealed run's head is its log leaf, every checkpoint's root is the root of the log
    rebuilt from them, and successive checkpoints are consistent;
  * with --since CHECKPOINT (a checkpoint of this log you kept before): the export's log
    extends it -- the same root at its size, and a consistency proof that verifies; a kept
    size larger than the export's log is a rollback.
An export with no checkpoint is invalid: nothing in it is signed by the log.

FILE may be - (standard input; then verification runs on one core). --jobs N (default: all
CPUs) uses N processes for large exports when verifier.parallel is installed; the report is
the same for every N.

examples:
  tlog-verify export journal.export --policy auditor.policy
  tlog-store export | tlog-verify export - --policy auditor.policy --json
  tlog-verify export journal.export --policy auditor.policy --since kept.checkpoint \\
      --record-key "$(cat records.vkey)" --require-record-signatures --max-age 86400
"""

_EPILOG_PROOF = """\
FILE is a C2SP tlog-proof@v1 file as 'tlog-store prove' writes it: its extra line is the run's
head, and the log leaf is SHA-256(0x00 || head). Checks: the file's format; with --records
(the output of 'tlog-store read RUN --json'), that the run's records chain from genesis to
that head; with --head, that it is the proof's head; that a log of the policy signed the
checkpoint, every signature line of a policy key verifies and the quorum is met under the time
rules; that the inclusion proof leads from the leaf to the checkpoint's root.

Without --records the proof shows that the head is in the log, not which records lead to it.
Record signatures in the records file are checked against --record-key keys.

FILE may also be an inbox receipt, as 'tlog-store event receipt' writes it: its extra line is
the event's inbox entry (source, id, kind, keys, payload hash, time received; docs/formats.md),
and the leaf is SHA-256(0x00 || entry). With --event (the event's JSON: source, id, kind, keys,
payload), it checks the receipt is for that event. The policy's log is the inbox log: its
origin ends in /inbox ('tlog-store event vkey' prints its vkey).

examples:
  tlog-store prove run-1 --out run-1.tlog-proof
  tlog-store read run-1 --json > run-1.jsonl
  tlog-verify proof run-1.tlog-proof --policy auditor.policy --records run-1.jsonl
  tlog-verify proof payment-42.receipt --log-vkey "$(cat inbox.vkey)" --event payment-42.json
"""

_EPILOG_CHECKPOINT = """\
NOTE is a signed checkpoint (C2SP tlog-checkpoint). Checks: a log of the policy signed it,
every signature line of a policy key verifies (a bad one is a failure), the quorum is met
under the time rules. Lines of other keys are ignored and listed in the report.

examples:
  tlog-verify checkpoint checkpoint --policy auditor.policy --max-age 3600
  curl -s https://log.example/checkpoint | tlog-verify checkpoint - --policy auditor.policy
"""

_EPILOG_CONSISTENCY = """\
OLD and NEW are signed checkpoints of one log, each checked as by 'tlog-verify checkpoint'
(--max-age applies to NEW only). --proof FILE is the RFC 6962 consistency proof from OLD's
size to NEW's, one base64 hash per line ('tlog prove --old' output). Without it only size 0
or equal sizes (which need equal roots) can be judged; two other sizes are unusable (status 2:
nothing says they disagree). An OLD larger than NEW is a rollback.

examples:
  tlog-verify consistency kept.checkpoint checkpoint --proof proof --policy auditor.policy
"""


_EPILOG_FOLLOW = """\
Follows the C2SP tlog-tiles log at URL (docs/tiles.md; 'tlog-store serve' or the files of
'tlog-store tiles'): fetches URL/checkpoint, judges it under TRUST and TIME as 'tlog-verify
checkpoint' does, and accepts it only when it is consistent with the last accepted checkpoint,
the --state FILE (none yet: the first checkpoint that verifies is accepted). Consistency is
proved from the tiles: only those the proof needs are fetched, and they must hash to the new
checkpoint's root. --verify-entries also fetches the entry bundles of the new positions and
checks that they extend the accepted tree to the new root (a progress bar on a terminal when
catching up); a full bundle's level-0 tile is its leaf hashes and is not fetched, unless
--check-tiles asks that every new level-0 tile be fetched and checked against its bundle
too (the tiles clients' inclusion proofs read; twice the requests). The accepted checkpoint
is written to --state atomically; it never moves back.

Detections (status 1, the state is left as it was): the log goes back to a smaller size; two
roots for one size; a checkpoint inconsistent with the state; a tile or bundle that does not
hash to the checkpoint (rewritten, cut, reordered); a checkpoint without a trusted log
signature, with a bad signature of a trusted key, or short of the quorum. Each writes evidence
into a new directory under --evidence DIR (default <state>.evidence): checkpoint.old (the
state, if any), checkpoint.new and reason, plus consistency-proof for an inconsistent
checkpoint only, for a third party to check with 'tlog-verify consistency checkpoint.old
checkpoint.new' (adding '--proof consistency-proof' when that file exists; two roots for one
size need no proof), or 'tlog-verify checkpoint checkpoint.new'.

Without --once it runs a round every --interval S seconds (default 60), printing
'ORIGIN size N ROOT' (--json: the round's report on one line) for each accepted round, until
a detection (status 1) or an interrupt; a round whose fetch fails is reported on standard error
and the next one tried. With --once a fetch that fails is status 2.

examples:
  tlog-verify follow https://example.com/journal/acme/ --policy auditor.policy \\
      --state acme.checkpoint --once --verify-entries
"""


def _trust_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("trust")
    g.add_argument("--policy", metavar="FILE", help="tlog-policy file (logs, witnesses, quorum)")
    g.add_argument("--log-vkey", metavar="VKEY", help="the log's key (vkey)")
    g.add_argument(
        "--witness", action="append", default=[], metavar="VKEY", help="a witness key (repeat)"
    )
    g.add_argument("--quorum", metavar="K", help="how many --witness keys must cosign")
    t = p.add_argument_group("time rules")
    t.add_argument("--max-age", metavar="SECONDS", help="cosignatures older than this do not count")
    t.add_argument(
        "--max-skew",
        metavar="SECONDS",
        default=str(DEFAULT_MAX_SKEW),
        help=f"cosignatures this far in the future do not count (default {DEFAULT_MAX_SKEW})",
    )
    t.add_argument("--now", metavar="T", help="judge times at T, POSIX seconds (default: now)")
    p.add_argument("--json", action="store_true", help="print the JSON report")


def _record_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--record-key", action="append", default=[], metavar="VKEY", help="a trusted record key"
    )
    p.add_argument(
        "--require-record-signatures",
        action="store_true",
        help="every record must carry a verified signature",
    )


def _export_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", metavar="FILE", help="the export (- for standard input)")
    _trust_args(p)
    _record_args(p)
    p.add_argument("--since", metavar="CHECKPOINT", help="a checkpoint of this log kept before")
    p.add_argument(
        "--quorum-scope",
        choices=("all", "last"),
        default="last",
        help="which checkpoints must meet the quorum: the last (default; every earlier one "
        "must be signed by the log and consistent with it) or all",
    )
    p.add_argument("--jobs", metavar="N", help="processes to use (default: the CPUs)")
    p.add_argument("--no-progress", action="store_true", help="never draw a progress bar")


def _proof_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", metavar="FILE", help="the tlog-proof file (- for standard input)")
    _trust_args(p)
    _record_args(p)
    p.add_argument("--records", metavar="FILE", help="the run's records (tlog-store read --json)")
    p.add_argument("--head", metavar="HASH", help="the run head you expect (base64)")
    p.add_argument("--event", metavar="FILE", help="for an inbox receipt: the event (JSON)")
    p.add_argument("--origin", metavar="ORIGIN", help="the checkpoint must be of this origin")


def _checkpoint_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", metavar="NOTE", help="the checkpoint note (- for standard input)")
    _trust_args(p)
    p.add_argument("--origin", metavar="ORIGIN", help="the checkpoint must be of this origin")


def _follow_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("url", metavar="URL", help="the log's tlog-tiles URL prefix (http(s)://...)")
    _trust_args(p)
    p.add_argument("--state", required=True, metavar="FILE", help="the last accepted checkpoint")
    p.add_argument(
        "--evidence", metavar="DIR", help="where detections go (default <state>.evidence)"
    )
    p.add_argument("--once", action="store_true", help="one round, then exit")
    p.add_argument("--interval", metavar="S", help="seconds between rounds (default 60)")
    p.add_argument(
        "--verify-entries", action="store_true", help="check the entry bundles of new positions"
    )
    p.add_argument(
        "--check-tiles",
        action="store_true",
        help="also fetch every new level-0 tile and check it against its bundle "
        "(implies --verify-entries; twice the requests)",
    )
    p.add_argument(
        "--timeout", metavar="S", help=f"seconds per request (default {DEFAULT_FOLLOW_TIMEOUT:g})"
    )
    p.add_argument("--no-progress", action="store_true", help="never draw a progress bar")


def _consistency_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("old", metavar="OLD", help="the older checkpoint note")
    p.add_argument("new", metavar="NEW", help="the newer checkpoint note")
    p.add_argument("--proof", metavar="FILE", help="the consistency proof (base64 lines)")
    _trust_args(p)
    p.add_argument("--origin", metavar="ORIGIN", help="the checkpoints must be of this origin")


# --- main ----------------------------------------------------------------------------------------


def _write(text: str) -> None:
    sys.stdout.buffer.write(text.encode("utf-8", "backslashreplace"))
    sys.stdout.flush()


def _unusable(e: BaseException) -> Failure:
    """The failure of an exception that escaped a verb: nothing was judged (status 2)."""
    f = failure_from(e, None)
    line = f.line
    if line is not None and f"line {line}" in f.message:
        # The message names the file and its line ("policy P: line 3: ..."): a location of
        # "line 3" in no input would only say it twice.
        line = None
    kind = f.kind if f.status == EXIT_UNUSABLE else "input"
    # A tlog error about an input the verb did not judge (a policy, a key): unusable.
    return Failure(kind, f.message, f.input, line, f.run, f.seq, f.checkpoint_size)


def _judge(args: argparse.Namespace) -> int:
    """Run the verb, print its report and return its status (0, 1 or 2).

    An exception escaping the verb is reported as the unusable input it makes (status 2), but
    for a closed standard output and KeyboardInterrupt, which :func:`main`'s table maps.
    """
    verb: str = args.verb
    want_json: bool = args.json
    try:
        report: Report = args.func(args)
    except Exception as e:
        if isinstance(e, BrokenPipeError):
            raise
        report = Report(verb)
        report.fail(_unusable(e))
    if report.failure is not None:
        where = report.failure.location()
        state = report.verdict.upper()
        write_error(PROG, verb, f"{state}: {where + ': ' if where else ''}{report.failure.message}")
    if want_json:
        _write(report.render_json())
    elif report.status != EXIT_UNUSABLE:
        _write(report.render_text())
    return report.status


_STATUSES = (Exit(KeyboardInterrupt, 130, lambda e: "interrupted"),)  # the shell's 128 + SIGINT
"""How ``tlog-verify`` maps the exceptions :func:`_judge` lets through, before the common
rules of :mod:`tlog.cli.run` (argparse errors, a closed standard output: 2)."""


def command() -> Command:
    """The ``tlog-verify`` command, each verb declared once; :func:`_judge` runs and prints."""
    return Command(
        prog=PROG,
        description="Verify, offline, exports, tlog-proofs and checkpoints against a policy.",
        epilog=_EPILOG_MAIN,
        verbs=(
            Verb("export", "verify a journal export", _EPILOG_EXPORT, _cmd_export, _export_args),
            Verb("proof", "verify a tlog-proof of one run", _EPILOG_PROOF, _cmd_proof, _proof_args),
            Verb(
                "checkpoint",
                "verify a signed checkpoint",
                _EPILOG_CHECKPOINT,
                _cmd_checkpoint,
                _checkpoint_args,
            ),
            Verb(
                "consistency",
                "verify two checkpoints and the proof between them",
                _EPILOG_CONSISTENCY,
                _cmd_consistency,
                _consistency_args,
            ),
            Verb(
                "follow",
                "follow a tiled log: accept only consistent checkpoints",
                _EPILOG_FOLLOW,
                _cmd_follow,
                _follow_args,
            ),
        ),
        statuses=_STATUSES,
        call=_judge,
    )


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``tlog-verify``."""
    return command().parser()


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``tlog-verify`` with ``argv`` (default: ``sys.argv[1:]``); return the exit status.

    The one place where exceptions become statuses (:func:`_judge`, :data:`_STATUSES`, then the
    common rules of :func:`tlog.cli.run.run`): a verb returns its report (0 or 1); UsageError,
    OSError and any other escaping exception give 2 with one line on standard error (and,
    with ``--json``, a report whose failure says why); KeyboardInterrupt gives 130. ``--help``
    exits 0 through SystemExit, as argparse does.
    """
    return command().main(argv)


if __name__ == "__main__":
    sys.exit(main())
