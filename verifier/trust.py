"""What the auditor trusts: the policy, the time rules and a kept checkpoint, from their options.

``tlog-verify`` takes trust on its command line (``docs/auditor-guide.md``); this module turns
those options into the objects the verify functions take, so that a Python auditor gets the
very same policy from the very same spellings:

* :func:`build_policy` — a :class:`tlog.policy.Policy` from a tlog-policy file (``--policy``),
  a log key (``--log-vkey``), or witness keys and a quorum (``--witness``, ``--quorum``). A
  policy that lists no log takes the log from the log key; with a policy that lists logs, the
  log key picks one of them. Without a policy the log key is the log, each witness key a
  witness (0x04, 0x06, or an Ed25519 0x01 vkey read as its cosignature/v1 key) and the quorum
  the number of them that must cosign (required with witnesses; with none the quorum is
  ``none``: the log's signature alone).
* :func:`build_time_policy` — a :class:`tlog.policy.TimePolicy` from ``--now`` (default: the
  clock), ``--max-age`` and ``--max-skew`` (default 60 s).
* :func:`read_kept_checkpoint` — the checkpoint note an auditor kept (``--since``).

Arguments are the strings a command line gives (numbers as canonical decimals; text checked
to be valid UTF-8, as Python decodes argv with surrogateescape), and messages name them by
their options. Inputs the auditor supplies that cannot be used raise
:class:`~verifier.report.InputError`, contradictory or missing options
:class:`~tlog.errors.UsageError` (both: status 2, nothing judged); an unreadable file
:class:`OSError`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from tlog.cli.run import utf8_arg
from tlog.encoding import parse_decimal
from tlog.errors import MalformedError, UsageError
from tlog.note import MAX_NOTE_SIZE
from tlog.policy import DEFAULT_MAX_SKEW, Log, Policy, TimePolicy
from verifier.proofs import read_input
from verifier.report import InputError

__all__ = [
    "MAX_POLICY_SIZE",
    "MAX_SINCE_SIZE",
    "build_policy",
    "build_time_policy",
    "option_number",
    "option_text",
    "read_kept_checkpoint",
]

MAX_POLICY_SIZE = 1 << 20
"""Largest policy file read."""

MAX_SINCE_SIZE = MAX_NOTE_SIZE
"""Largest kept checkpoint read (a note is at most 1 MiB)."""


def option_text(text: str, what: str) -> str:
    """``text``, an option's value, which must be valid UTF-8, else a UsageError naming ``what``.

    A UsageError, not a MalformedError: its report's failure kind is ``usage``.
    """
    return utf8_arg(text, what, UsageError)


def option_number(text: str | None, what: str) -> int | None:
    """``text`` as a canonical decimal (None stays None), else a UsageError naming ``what``."""
    if text is None:
        return None
    try:
        return parse_decimal(option_text(text, what), what)
    except MalformedError as e:
        raise UsageError(str(e)) from None


def _log(log_vkey: str | None) -> Log | None:
    if log_vkey is None:
        return None
    try:
        return Log.from_vkey(option_text(log_vkey, "--log-vkey"))
    except MalformedError as e:
        raise InputError(f"--log-vkey: {e}") from None


def build_policy(
    *,
    policy: str | None = None,
    log_vkey: str | None = None,
    witnesses: Sequence[str] = (),
    quorum: str | None = None,
) -> Policy:
    """The policy these trust options give (module docstring).

    ``policy`` is the path of a tlog-policy file (``-``: standard input); ``witnesses`` and
    ``quorum`` replace a policy file and may not come with one. Requires: a policy file or a
    log key. The result lists at least one log.
    """
    log = _log(log_vkey)
    if policy is not None:
        if witnesses or quorum is not None:
            raise UsageError("--witness and --quorum replace a policy: not with --policy")
        return _from_file(policy, log)
    if log is None:
        raise UsageError(
            "no trust given: use --policy FILE, or --log-vkey VKEY (with --witness VKEY... "
            "and --quorum K)"
        )
    keys = [option_text(w, "--witness") for w in witnesses]
    if keys and quorum is None:
        raise UsageError("--witness needs --quorum K (how many of the witnesses must cosign)")
    k = option_number(quorum, "--quorum") or 0
    if k > len(keys):
        raise UsageError(f"--quorum {k} is more than the {len(keys)} witnesses given")
    try:
        return Policy.k_of_n(k, keys, logs=[log.verifier])
    except MalformedError as e:
        raise InputError(f"--witness: {e}") from None


def _from_file(path: str, log: Log | None) -> Policy:
    """The policy file at ``path``, with ``log`` added (it lists none) or picked (it lists some)."""
    try:
        policy = Policy.parse(read_input(path, MAX_POLICY_SIZE, f"policy {path}"))
    except MalformedError as e:
        raise InputError(f"policy {path}: {e}") from None
    if log is None:
        if not policy.logs:
            raise UsageError("the policy lists no logs: give the log's key with --log-vkey VKEY")
        return policy
    if not policy.logs:
        try:
            return policy.with_logs([log])
        except MalformedError as e:
            raise InputError(f"--log-vkey: {e}") from None
    chosen = [x for x in policy.logs if x.vkey == log.vkey]
    if not chosen:
        raise InputError(f"--log-vkey {log.vkey} is not one of the policy's logs")
    return Policy(
        logs=tuple(chosen),
        witnesses=policy.witnesses,
        groups=policy.groups,
        quorum=policy.quorum,
    )


def build_time_policy(
    *,
    now: str | None = None,
    max_age: str | None = None,
    max_skew: str | None = str(DEFAULT_MAX_SKEW),
    clock: Callable[[], float] = time.time,
) -> TimePolicy:
    """The time rules of ``--now`` (None: the clock's current second), ``--max-age`` (None:
    no limit) and ``--max-skew`` (None: no limit)."""
    t = option_number(now, "--now")
    return TimePolicy(
        int(clock()) if t is None else t,
        option_number(max_age, "--max-age"),
        option_number(max_skew, "--max-skew"),
    )


def read_kept_checkpoint(path: str) -> bytes:
    """The checkpoint note kept at ``path`` (``-``: standard input), for ``--since``.

    Its size over :data:`MAX_SINCE_SIZE` is an :class:`~verifier.report.InputError`; the note
    itself is parsed and judged by the export's verification.
    """
    try:
        return read_input(path, MAX_SINCE_SIZE, f"kept checkpoint {path}")
    except MalformedError as e:
        raise InputError(str(e)) from None
