"""The offline auditor: exports, tlog-proof files, checkpoints and policies (``tlog-verify``).

An auditor receives an export, a proof or a checkpoint from someone they do not trust and
checks, offline, that it is exactly what the log key signed and the witnesses saw. The package
imports :mod:`tlog` only — never ``store``, ``witness`` or a database driver — so it stands on
the published formats alone.

Modules:

* :mod:`verifier.cli` — the ``tlog-verify`` command (verbs ``export``, ``proof``,
  ``checkpoint``, ``consistency``; exit 0 valid, 1 invalid, 2 unusable input or usage);
* :mod:`verifier.export` — :func:`~verifier.export.verify_export_file`: an export under a
  policy, with time rules, trusted record keys and ``--since``;
* :mod:`verifier.proofs` — tlog-proof files (with the run's records), checkpoints, and
  consistency between two checkpoints;
* :mod:`verifier.report` — the report: what was checked with counts, the verdict, the first
  failure and its location, the human text and the ``tlog-verify/report/v1`` JSON schema;
* :mod:`verifier.parallel` (when present) — an export verified on several processes.

``docs/auditor-guide.md`` explains each verb, what "valid" means and does not mean, and gives
worked examples.
"""
