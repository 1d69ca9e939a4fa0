"""The quorum of a signed checkpoint under a C2SP tlog-policy: which signatures count, and when.

:mod:`tlog.policy` defines the policy file (its logs, witnesses, groups and quorum); this module
defines what a policy says of one signed checkpoint note: which listed log signed it, which
witnesses' cosignatures count under the time rules (:class:`TimePolicy`), whether the quorum is
met and, when it is not, which groups fall short (:class:`Shortfall`). The results are
:class:`PolicyResult` and, from :meth:`tlog.policy.Policy.verify`, :class:`QuorumError`.
``tlog.policy`` exports every name of this module; :class:`~tlog.policy.Policy`'s methods
``evaluate``, ``verify``, ``shortfalls`` and ``quorum_met`` call the functions here.

Evaluation of a signed checkpoint (:func:`evaluate`, :meth:`Policy.evaluate`,
:meth:`Policy.verify`):

1. The note is opened with :func:`tlog.note.open_note` against the log *and* witness keys:
   lines from unknown keys (including a known name with another key ID) are ignored; a line
   whose (name, key ID) is a policy key but does not verify rejects the whole note with
   :class:`~tlog.errors.InvalidSignatureError` — a witness's bad cosignature included. That
   is signed-note's SHOULD, and it keeps a verifier from silently accepting a note that
   carries forged lines. Byte-identical repeated lines count once; two different lines from
   one key reject the note (see :mod:`tlog.note`), so no cosignature can count twice.
2. At least one listed log's key must have verified, else
   :class:`~tlog.errors.UnverifiedNoteError`. The spec's "a log vkey's key name MUST
   correspond to the log's origin" is applied by the policy author's choice of vkey: by
   default a log entry matches when its key verified the note, whatever the key name, since
   real logs are signed by a name other than their origin (``go.sum database tree`` by
   ``sum.golang.org``). With ``require_origin_match=True`` only a log key whose name equals
   the checkpoint's origin counts.
3. Each witness whose cosignature verified is *satisfied*, once, unless a
   :class:`TimePolicy` says its timestamp is too old (below ``now - max_age``) or too far in
   the future (above ``now + max_skew``); such cosignatures are reported as ignored. Without a
   time policy every verified timestamp counts, and no clock is read.
4. The quorum is evaluated: ``none`` is always met, a witness is met when satisfied, a group
   when at least k of its members are met. A witness may be a member of several groups and
   then counts in each (the spec only forbids listing a name twice in one group).

:meth:`Policy.evaluate` returns a :class:`PolicyResult` whether or not the quorum is met;
:meth:`Policy.verify` raises :class:`QuorumError` (a :class:`~tlog.errors.PolicyError`) when it
is not, naming every short group ("quorum X-and-Y not met: group X-and-Y has 1 of 2; group
X-witnesses has 1 of 2").
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from tlog.checkpoint import Checkpoint
from tlog.cosignature import timestamp_of
from tlog.encoding import show_octets, shown
from tlog.errors import PolicyError, UnverifiedNoteError, UsageError
from tlog.note import Note, open_note, parse_note

if TYPE_CHECKING:  # tlog.policy imports this module: its types are for annotations only.
    from tlog.policy import Group, Log, Policy, Witness

__all__ = [
    "DEFAULT_MAX_SKEW",
    "NONE",
    "Cosigned",
    "IgnoredCosignature",
    "PolicyResult",
    "QuorumError",
    "Shortfall",
    "TimePolicy",
    "evaluate",
    "shortfalls",
]

NONE = "none"
"""The predefined name of the empty quorum (no cosignature required)."""

DEFAULT_MAX_SKEW = 60
"""Seconds a cosignature timestamp may lie in the future before it stops counting."""


@dataclass(frozen=True)
class TimePolicy:
    """Which cosignature timestamps count, judged at ``now`` (POSIX seconds).

    A timestamp ``t`` counts when ``now - max_age <= t`` (if ``max_age`` is set) and
    ``t <= now + max_skew`` (if ``max_skew`` is set; default 60 s). Requires: non-negative
    ints. Pure: :meth:`current` is the only place a clock is read.
    """

    now: int
    max_age: int | None = None
    max_skew: int | None = DEFAULT_MAX_SKEW

    def __post_init__(self) -> None:
        for what, value in (
            ("now", self.now),
            ("max_age", self.max_age),
            ("max_skew", self.max_skew),
        ):
            if value is None and what != "now":
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise UsageError(f"time policy {what} must be a non-negative int, not {value!r}")

    @classmethod
    def current(
        cls,
        max_age: int | None = None,
        max_skew: int | None = DEFAULT_MAX_SKEW,
        clock: Callable[[], float] = time.time,
    ) -> TimePolicy:
        """A time policy judged at the clock's current second."""
        return cls(int(clock()), max_age, max_skew)

    def reject_reason(self, timestamp: int) -> str | None:
        """Why a cosignature at ``timestamp`` does not count, or None when it counts."""
        if self.max_age is not None and timestamp < self.now - self.max_age:
            return (
                f"timestamp {timestamp} is older than max_age {self.max_age}s "
                f"before now ({self.now})"
            )
        if self.max_skew is not None and timestamp > self.now + self.max_skew:
            return (
                f"timestamp {timestamp} is more than max_skew {self.max_skew}s "
                f"in the future of now ({self.now})"
            )
        return None


@dataclass(frozen=True)
class Cosigned:
    """A witness satisfied by a verified cosignature, with the cosignature's timestamp."""

    witness: Witness
    timestamp: int


@dataclass(frozen=True)
class IgnoredCosignature:
    """A verified cosignature that does not count under the time policy, and why."""

    witness: Witness
    timestamp: int
    reason: str


@dataclass(frozen=True)
class Shortfall:
    """A group (or the quorum witness) not met: it has ``have`` of the ``need`` required."""

    kind: Literal["group", "witness"]
    name: str
    have: int
    need: int

    def __str__(self) -> str:
        if self.kind == "witness":
            return f"witness {show_octets(self.name)} has no counted cosignature"
        return f"group {show_octets(self.name)} has {self.have} of {self.need}"


@dataclass(frozen=True)
class PolicyResult:
    """The outcome of evaluating a signed checkpoint against a policy.

    ``logs`` are the listed logs whose signature verified (at least one), ``cosignatures``
    the satisfied witnesses in note order, ``ignored`` the verified cosignatures the time
    policy discarded, ``shortfalls`` the unmet groups reachable from the quorum (empty when
    ``quorum_met``).
    """

    checkpoint: Checkpoint
    note: Note
    logs: tuple[Log, ...]
    cosignatures: tuple[Cosigned, ...]
    ignored: tuple[IgnoredCosignature, ...]
    quorum: str
    quorum_met: bool
    shortfalls: tuple[Shortfall, ...]

    @property
    def log(self) -> Log:
        """The first listed log whose signature verified."""
        return self.logs[0]

    @property
    def satisfied(self) -> frozenset[str]:
        """Names of the satisfied witnesses."""
        return frozenset(c.witness.name for c in self.cosignatures)

    def describe_failure(self) -> str:
        """The message :class:`QuorumError` carries."""
        msg = f"quorum {show_octets(self.quorum)} not met: " + "; ".join(map(str, self.shortfalls))
        if self.ignored:
            msg += "; not counted: " + "; ".join(
                f"witness {show_octets(i.witness.name)} {i.reason}" for i in self.ignored
            )
        return msg


class QuorumError(PolicyError):
    """The checkpoint's signatures verify but the quorum is not met; ``result`` says how."""

    def __init__(self, result: PolicyResult) -> None:
        super().__init__(result.describe_failure())
        self.result = result


# --- evaluation -----------------------------------------------------------------------------------


def shortfalls(policy: Policy, satisfied: Iterable[str]) -> tuple[Shortfall, ...]:
    """The unmet groups reachable from the quorum, quorum first, when the witnesses named
    ``satisfied`` are satisfied; empty when the quorum is met.

    Requires: every name in ``satisfied`` is a witness of this policy.
    """
    sat = set(satisfied)
    names = {w.name for w in policy.witnesses}
    unknown = sat - names
    if unknown:
        raise UsageError(f"not witnesses of this policy: {sorted(map(show_octets, unknown))}")
    met: dict[str, bool] = {n: n in sat for n in names}
    counts: dict[str, int] = {}
    by_name: dict[str, Group] = {}
    for g in policy.groups:  # canonical order: members before groups
        counts[g.name] = sum(met[m] for m in g.members)
        met[g.name] = counts[g.name] >= g.k
        by_name[g.name] = g
    if policy.quorum == NONE or met[policy.quorum]:
        return ()
    if policy.quorum not in by_name:
        return (Shortfall("witness", policy.quorum, 0, 1),)
    out: list[Shortfall] = []
    seen: set[str] = set()

    def walk(name: str) -> None:
        if name in seen or name not in by_name or met[name]:
            return
        seen.add(name)
        g = by_name[name]
        out.append(Shortfall("group", name, counts[name], g.k))
        for m in g.members:
            walk(m)

    walk(policy.quorum)
    return tuple(out)


def evaluate(
    policy: Policy,
    note: bytes,
    time_policy: TimePolicy | None = None,
    *,
    require_origin_match: bool = False,
) -> PolicyResult:
    """Open a signed checkpoint note with this policy's keys and evaluate the quorum.

    Returns the result even when the quorum is not met. Raises
    :class:`~tlog.errors.MalformedError` (not a note, or not a checkpoint),
    :class:`~tlog.errors.InvalidSignatureError` (a line from a policy key, log or witness,
    fails), :class:`~tlog.errors.UnverifiedNoteError` (no listed log signed; with
    ``require_origin_match``, none whose key name is the origin). Requires: the policy
    lists at least one log (:meth:`with_logs`).
    """
    if not policy.logs:
        raise UsageError("the policy lists no logs: add the logs known from context")
    text, _ = parse_note(note)
    checkpoint = Checkpoint.parse(text)
    opened = open_note(note, policy.verifiers)
    logs = {(x.verifier.name, x.verifier.key_id): x for x in policy.logs}
    witnesses = {(w.verifier.name, w.verifier.key_id): w for w in policy.witnesses}
    verified_logs = [logs[(s.name, s.key_id)] for s in opened.sigs if (s.name, s.key_id) in logs]
    if require_origin_match:
        verified_logs = [x for x in verified_logs if x.verifier.name == checkpoint.origin]
    if not verified_logs:
        how = " whose key name is the origin" if require_origin_match else ""
        raise UnverifiedNoteError(
            f"checkpoint {shown(checkpoint.origin)} carries no verified signature"
            f" from a listed log{how}"
        )
    cosigned: dict[str, Cosigned] = {}
    ignored: list[IgnoredCosignature] = []
    for sig in opened.sigs:
        w = witnesses.get((sig.name, sig.key_id))
        # open_note already refuses two different lines from one key; the second test
        # keeps a witness from ever counting twice should that rule change.
        if w is None or w.name in cosigned:
            continue
        ts = timestamp_of(sig)
        reason = time_policy.reject_reason(ts) if time_policy is not None else None
        if reason is not None:
            ignored.append(IgnoredCosignature(w, ts, reason))
        else:
            cosigned[w.name] = Cosigned(w, ts)
    short = shortfalls(policy, cosigned)
    return PolicyResult(
        checkpoint=checkpoint,
        note=opened,
        logs=tuple(verified_logs),
        cosignatures=tuple(cosigned.values()),
        ignored=tuple(ignored),
        quorum=policy.quorum,
        quorum_met=not short,
        shortfalls=short,
    )
