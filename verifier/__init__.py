"""The offline auditor: exports, tlog-proof files, checkpoints and policies (``tlog-verify``).

An auditor receives an export, a proof or a checkpoint from someone they do not trust and
checks, offline, that it is exactly what the log key signed and the witnesses saw. The package
imports :mod:`tlog` only — never ``store``, ``witness``, a database driver or a network
library — so it stands on the published formats alone.

The public API (``from verifier import …``); each verify function returns a :class:`Report`
(status 0 valid, 1 invalid) and raises :class:`~tlog.errors.UsageError` or :class:`OSError`
for an input of the auditor's that cannot be used (status 2)::

    # what to trust
    policy = build_policy(policy="auditor.policy")      # or log_vkey=, witnesses=, quorum=
    now = build_time_policy(max_age="3600")             # or TimePolicy(now, max_age, max_skew)
    # the verdicts
    report = verify_export_file("journal.export", policy=policy, time_policy=now,
                                since=read_kept_checkpoint("kept.checkpoint"))
    report = verify_proof_file("run-1.tlog-proof", policy=policy, records="run-1.jsonl")
    report = verify_checkpoint_file("checkpoint", policy=policy, time_policy=now)
    report = verify_consistency_files("old", "new", policy=policy, proof="proof")
    print(report.verdict, report.failure, report.render_json())

* verifying — :func:`verify_export_file` (an export under a policy, with time rules, trusted
  record keys, ``since`` and several processes), :func:`verify_proof_file` (a tlog-proof of
  one run, with its records), :func:`verify_checkpoint_file` (a signed checkpoint),
  :func:`verify_consistency_files` (two checkpoints and the proof between them),
  :func:`verify_records` (a run's records file, from genesis) and :func:`judge_note` (one
  checkpoint note under a policy);
* the report — :class:`Report` (checks, verdict, facts, notes; its text and its
  ``tlog-verify/report/v1`` JSON), :class:`Failure` (the first failure and where it is),
  :class:`Check`, :func:`failure_from`; the errors :class:`LocatedError` (a check failed,
  with its location) and :class:`InputError` (an auditor-supplied input is unusable);
* trust — :func:`build_policy` and :func:`build_time_policy` (the policy and the time rules
  from ``tlog-verify``'s trust options), :func:`read_kept_checkpoint` (``--since``), and the
  :mod:`tlog.policy` types :class:`~tlog.policy.Policy` and :class:`~tlog.policy.TimePolicy`;
* :class:`ProgressBar` — the bar ``tlog-verify export`` draws on a terminal (a ``progress``
  callback of :func:`verify_export_file`).

Modules:

* :mod:`verifier.export` — :func:`~verifier.export.verify_export_file`;
* :mod:`verifier.proofs` — tlog-proof files, checkpoints, and consistency between two
  checkpoints; :mod:`verifier.records` — a run's records file;
* :mod:`verifier.report` — the report model, its human text and its JSON schema;
* :mod:`verifier.trust` — policies and time rules from options; :mod:`verifier.progress` —
  the progress bar;
* :mod:`verifier.parallel` — an export verified on several processes;
* :mod:`verifier.cli` — the ``tlog-verify`` command (verbs ``export``, ``proof``,
  ``checkpoint``, ``consistency``; exit 0 valid, 1 invalid, 2 unusable input or usage): each
  verb parses its arguments, calls one of the functions above and prints the report.

``docs/auditor-guide.md`` explains each verb, what "valid" means and does not mean, and gives
worked examples.
"""

from tlog.policy import Policy, TimePolicy
from verifier.export import verify_export_file
from verifier.progress import ProgressBar
from verifier.proofs import (
    judge_note,
    verify_checkpoint_file,
    verify_consistency_files,
    verify_proof_file,
)
from verifier.records import RecordsResult, verify_records
from verifier.report import (
    SCHEMA,
    Check,
    Failure,
    InputError,
    LocatedError,
    Report,
    failure_from,
)
from verifier.trust import build_policy, build_time_policy, read_kept_checkpoint

__all__ = [
    "SCHEMA",
    "Check",
    "Failure",
    "InputError",
    "LocatedError",
    "Policy",
    "ProgressBar",
    "RecordsResult",
    "Report",
    "TimePolicy",
    "build_policy",
    "build_time_policy",
    "failure_from",
    "judge_note",
    "read_kept_checkpoint",
    "verify_checkpoint_file",
    "verify_consistency_files",
    "verify_export_file",
    "verify_proof_file",
    "verify_records",
]
