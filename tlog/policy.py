"""C2SP tlog-policy: which logs and witnesses a verifier trusts, and which quorum it needs.

File format (c2sp.org/tlog-policy, untagged draft of 2026-06)::

    log <vkey> [<url>]
    witness <name> <vkey> [<url>]
    group <name> all <member>...
    group <name> any <member>...
    group <name> <k> <member>...
    quorum <name>

* The file is a sequence of octets in lines, each ending in LF (a last line without its LF is
  refused). The only octets allowed are 0x09 (TAB), 0x0A (LF), 0x20-0x7E and 0x80-0xFF; CR and
  the other controls are refused, in comments too.
* Items on a line are separated by runs of SPACE and TAB only; leading and trailing SPACE/TAB
  is allowed. Lines that are empty after that, and lines whose first item starts with ``#``,
  are ignored. There are no trailing comments: a ``#`` after the first item is an ordinary
  octet of an item (transparency-dev/formats strips ``#...`` anywhere; a line like
  ``witness w1 <vkey> <url> #note`` therefore has one item too many here).
* Octets with the high bit set are opaque: names and URLs are octet strings compared
  bytewise, never Unicode-normalised (the name ``K`` differs from the Kelvin sign U+212A).
  In Python they are ``str`` decoded as UTF-8 with the ``surrogateescape`` error handler,
  which maps every octet string to exactly one ``str`` and back (:meth:`Policy.format` gives
  back the very octets). A vkey must be valid UTF-8 (its key name is a signed-note name).
* Keywords are lowercase and exact.

Rules, each enforced with a :class:`~tlog.errors.MalformedError` whose message starts with
``line N:``:

* ``log``: 2 or 3 items. The vkey (:func:`tlog.keys.parse_vkey`, key ID checked) must be a log
  signature key: Ed25519, 0x01, or ML-DSA-44, 0x06 (tlog-checkpoint on C2SP main says logs
  SHOULD sign with an ML-DSA-44 subtree/v1 signature over [0, size)). The Ed25519
  cosignature/v1 type 0x04 is refused on a log line. No two log lines may wrap the same public
  key, whatever their key names or IDs.
* ``witness``: 3 or 4 items. The vkey must be a cosignature key, 0x04 (Ed25519
  cosignature/v1) or 0x06 (ML-DSA-44 subtree/v1). A 0x01 vkey is refused, and the message
  gives the 0x04 vkey of the same key to write instead. (Programs that hold a witness's 0x01
  vkey, as the Armored Witness devices publish them, use :meth:`Witness.from_vkey`, which reads
  it through :func:`tlog.keys.cosigner_from_vkey`.) No two witness lines may wrap the same
  public key, whatever their key names, IDs or type bytes: a 0x01 and a 0x04 vkey of one
  Ed25519 key are duplicates. One key may be listed once as a log and once as a witness (the
  spec does not forbid it, and the type bytes give it two distinct key IDs).
* No two keys of the policy (logs and witnesses together) may share a (key name, key ID)
  pair, so a signature line always names at most one policy key.
* Witness and group names share one namespace and are defined at most once. ``none`` is
  predefined: it may be the quorum, but it is neither definable nor a valid member. Any other
  item is a valid name, keywords included (``witness all <vkey>`` is legal: fields are
  positional; transparency-dev/formats refuses keyword names).
* ``group``: at least 4 items, so at least one member (n >= 1). The threshold is ``all``
  (k = n), ``any`` (k = 1) or a canonical decimal k with 1 <= k <= n. Members must be names
  defined on *earlier* lines (which rules out cycles), each at most once per group.
* ``quorum``: exactly 2 items; exactly one quorum line per file; it names ``none`` or a
  witness or group defined on an earlier line. Definitions may follow the quorum line.
* A policy may list no logs ("logs known from other context", says the spec); add those with
  :meth:`Policy.with_logs` before evaluating. There is no limit on the number of logs,
  witnesses, groups or members; the spec asks for at least 32 of each.

Canonical text (:meth:`Policy.format`): log lines, then witness lines, then group lines, then
the quorum line, each kind in definition order, items separated by one space, no comments.
Because members always precede their groups, the reordering keeps every reference backwards.
Thresholds keep their spelling (``all``, ``any`` or the number).

Evaluation of a signed checkpoint under a policy (:meth:`Policy.evaluate`,
:meth:`Policy.verify`: the log's signature, the cosignatures that count under the time rules,
the quorum) is defined in :mod:`tlog.quorum`, whose names this module also exports.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from tlog.cosignature import TYPE_COSIGNATURE_V1, TYPE_SUBTREE_V1, CosignatureV1Verifier
from tlog.encoding import MAX_INT63, decode_octets, encode_octets, parse_decimal, show_octets, shown
from tlog.errors import MalformedError, UsageError
from tlog.keys import cosigner_from_vkey, format_vkey, parse_vkey
from tlog.note import TYPE_ED25519, Verifier
from tlog.quorum import (
    DEFAULT_MAX_SKEW,
    NONE,
    Cosigned,
    IgnoredCosignature,
    PolicyResult,
    QuorumError,
    Shortfall,
    TimePolicy,
    evaluate,
    shortfalls,
)

__all__ = [
    "DEFAULT_MAX_SKEW",
    "MIN_SUPPORTED",
    "NONE",
    "Cosigned",
    "Group",
    "IgnoredCosignature",
    "Log",
    "Policy",
    "PolicyResult",
    "QuorumError",
    "Shortfall",
    "Threshold",
    "TimePolicy",
    "Witness",
]

MIN_SUPPORTED = 32
"""The spec asks implementations to support at least this many logs, witnesses and groups."""

_SEPARATORS = re.compile(rb"[ \t]+")
_BAD_LINE_OCTET = re.compile(rb"[^\t\x20-\x7e\x80-\xff]")
_BAD_ITEM_OCTET = re.compile(rb"[^\x21-\x7e\x80-\xff]")

Threshold = int | Literal["all", "any"]


def _check_item(item: str, what: str) -> None:
    """Refuse an item that could not be written as one item of a policy line."""
    try:
        raw = encode_octets(item)
    except UnicodeEncodeError:
        raise MalformedError(f"{what} {shown(item)} is not an octet string") from None
    if decode_octets(raw) != item:
        # Surrogate escapes that spell valid UTF-8: two strs would name the same octets.
        raise MalformedError(f"{what} {shown(item)} is not in its canonical (decoded) form")
    if not raw:
        raise MalformedError(f"{what} is empty")
    bad = _BAD_ITEM_OCTET.search(raw)
    if bad:
        raise MalformedError(
            f"{what} {show_octets(item)!r} contains octet 0x{bad.group()[0]:02x} "
            "(space, tab or a control character)"
        )


def _check_name(name: str, what: str) -> None:
    _check_item(name, what)
    if name == NONE:
        raise MalformedError(f"{what} 'none' is predefined and cannot be defined")


def _cosignature_form(v: Verifier) -> str:
    return format_vkey(CosignatureV1Verifier(v.name, v.public_key))


@dataclass(frozen=True)
class Log:
    """A trusted log: its key (an Ed25519 0x01 note verifier) and an optional URL.

    Equality compares the vkey text and the URL.
    """

    verifier: Verifier = field(repr=False, compare=False)
    url: str | None = None
    vkey: str = field(init=False)

    def __post_init__(self) -> None:
        t = self.verifier.key_type
        if t == TYPE_COSIGNATURE_V1:
            raise MalformedError(
                f"log key {self.verifier.name}+{self.verifier.key_id:08x} is a cosignature/v1 "
                f"key (type 0x04); a log line needs a log signature key (type 0x01 or 0x06)"
            )
        if t not in (TYPE_ED25519, TYPE_SUBTREE_V1):
            raise MalformedError(f"log key type 0x{t:02x} is not supported (0x01 or 0x06)")
        if self.url is not None:
            _check_item(self.url, "log URL")
        object.__setattr__(self, "vkey", format_vkey(self.verifier))

    @classmethod
    def from_vkey(cls, vkey: str, url: str | None = None) -> Log:
        """A log from its vkey text (type 0x01 or 0x06)."""
        return cls(parse_vkey(vkey), url)

    def format(self) -> str:
        """The policy line, without its LF."""
        return " ".join(["log", self.vkey] + ([self.url] if self.url is not None else []))


@dataclass(frozen=True)
class Witness:
    """A named witness: its cosignature verifier (type 0x04 or 0x06) and an optional URL.

    Equality compares the name, the vkey text and the URL.
    """

    name: str
    verifier: Verifier = field(repr=False, compare=False)
    url: str | None = None
    vkey: str = field(init=False)

    def __post_init__(self) -> None:
        _check_name(self.name, "witness name")
        v = self.verifier
        if v.key_type == TYPE_ED25519:
            raise MalformedError(
                f"witness {show_octets(self.name)} key {v.name}+{v.key_id:08x} is a type 0x01 "
                "(Ed25519 note) key; a witness line needs a cosignature key (type 0x04 or "
                "0x06). If the witness cosigns with this Ed25519 key, write its cosignature/v1 "
                f"vkey: {_cosignature_form(v)}"
            )
        if v.key_type not in (TYPE_COSIGNATURE_V1, TYPE_SUBTREE_V1):
            raise MalformedError(
                f"witness {show_octets(self.name)} key type 0x{v.key_type:02x} is not a "
                "cosignature type (0x04 or 0x06)"
            )
        if self.url is not None:
            _check_item(self.url, "witness URL")
        object.__setattr__(self, "vkey", format_vkey(v))

    @classmethod
    def from_vkey(cls, name: str, vkey: str, url: str | None = None) -> Witness:
        """A witness from a vkey of type 0x04, 0x06 or 0x01 (read as its 0x04 key).

        This is the programmatic path (command-line ``--witness`` flags); policy files must
        spell witness keys as 0x04 or 0x06.
        """
        return cls(name, cosigner_from_vkey(vkey), url)

    def format(self) -> str:
        """The policy line, without its LF."""
        items = ["witness", self.name, self.vkey] + ([self.url] if self.url is not None else [])
        return " ".join(items)


@dataclass(frozen=True)
class Group:
    """A named group: met when at least :attr:`k` of its members are met.

    ``threshold`` is ``"all"`` (k = n), ``"any"`` (k = 1) or an int k with 1 <= k <= n, kept
    as spelled. Requires: at least one member, each once, none of them ``none``.
    """

    name: str
    threshold: Threshold
    members: tuple[str, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "members", tuple(self.members))
        _check_name(self.name, "group name")
        n = len(self.members)
        if n == 0:
            raise MalformedError(f"group {show_octets(self.name)} has no members")
        if isinstance(self.threshold, str):
            if self.threshold not in ("all", "any"):
                raise MalformedError(f"group threshold {shown(self.threshold)} is not all/any/k")
        elif isinstance(self.threshold, bool) or not isinstance(self.threshold, int):
            raise MalformedError(f"group threshold {shown(self.threshold)} is not all/any/k")
        elif not 1 <= self.threshold <= n:
            raise MalformedError(
                f"group {show_octets(self.name)} threshold {self.threshold} is out of range: "
                f"it must be 1..{n} for {n} member{'s' if n != 1 else ''}"
            )
        seen: set[str] = set()
        for m in self.members:
            _check_item(m, "group member")
            if m == NONE:
                raise MalformedError(
                    f"group {show_octets(self.name)}: 'none' is not a valid member"
                )
            if m in seen:
                raise MalformedError(
                    f"group {show_octets(self.name)} lists member {show_octets(m)} twice"
                )
            seen.add(m)

    @property
    def k(self) -> int:
        """How many members must be met."""
        if self.threshold == "all":
            return len(self.members)
        if self.threshold == "any":
            return 1
        return self.threshold

    def format(self) -> str:
        """The policy line, without its LF."""
        return " ".join(["group", self.name, str(self.threshold), *self.members])


class _Checker:
    """The cross-line rules, applied definition by definition (in file or canonical order).

    Messages carry no line prefix; ``line`` only lets them point at the earlier definition.
    """

    def __init__(self) -> None:
        self.log_keys: dict[bytes, str] = {}
        self.witness_keys: dict[bytes, str] = {}
        self.key_ids: dict[tuple[str, int], str] = {}
        self.names: dict[str, str] = {}
        self.quorum: str | None = None  # where the quorum was set

    @staticmethod
    def _where(what: str, line: int | None) -> str:
        return what if line is None else f"{what} (line {line})"

    def _key_id(self, v: Verifier, desc: str) -> None:
        k = (v.name, v.key_id)
        if k in self.key_ids:
            raise MalformedError(
                f"key {v.name}+{v.key_id:08x} has the same key name and key ID as "
                f"{self.key_ids[k]}; signature lines could not tell them apart"
            )
        self.key_ids[k] = desc

    def _key(self, keys: dict[bytes, str], v: Verifier, desc: str, duplicate: str) -> None:
        """Add ``v`` to ``keys`` (the logs' or the witnesses'), refusing a public key twice
        (``duplicate`` names the clash) and a (key name, key ID) pair twice."""
        if v.public_key in keys:
            raise MalformedError(f"{duplicate} wraps the same public key as {keys[v.public_key]}")
        self._key_id(v, desc)
        keys[v.public_key] = desc

    def log(self, log: Log, line: int | None) -> None:
        v = log.verifier
        desc = self._where(f"log {v.name}+{v.key_id:08x}", line)
        self._key(self.log_keys, v, desc, f"duplicate log: {v.name}+{v.key_id:08x}")

    def _define(self, name: str, desc: str) -> None:
        if name in self.names:
            raise MalformedError(
                f"name {show_octets(name)} is already defined by {self.names[name]}"
            )
        self.names[name] = desc

    def witness(self, w: Witness, line: int | None) -> None:
        desc = self._where(f"witness {show_octets(w.name)}", line)
        if w.name in self.names:  # a name clash is reported before a key clash
            self._define(w.name, desc)
        duplicate = f"duplicate witness: {show_octets(w.name)}"
        self._key(self.witness_keys, w.verifier, desc, duplicate)
        self._define(w.name, desc)

    def group(self, g: Group, line: int | None) -> None:
        desc = self._where(f"group {show_octets(g.name)}", line)
        for m in g.members:
            if m not in self.names:
                raise MalformedError(
                    f"group {show_octets(g.name)}: member {show_octets(m)} is not defined on an "
                    "earlier line"
                )
        self._define(g.name, desc)

    def set_quorum(self, name: str, line: int | None) -> None:
        if self.quorum is not None:
            raise MalformedError(f"a second quorum line (the first is {self.quorum})")
        _check_item(name, "quorum name")
        if name != NONE and name not in self.names:
            raise MalformedError(f"quorum {show_octets(name)} is not defined on an earlier line")
        self.quorum = f"quorum {show_octets(name)}" if line is None else f"on line {line}"


@dataclass(frozen=True, kw_only=True)
class Policy:
    """A tlog-policy, in canonical order: logs, witnesses, groups, quorum.

    Constructing one checks every rule of the module docstring (``MalformedError``); members
    may refer to any witness and to earlier groups.
    """

    logs: tuple[Log, ...] = ()
    witnesses: tuple[Witness, ...] = ()
    groups: tuple[Group, ...] = ()
    quorum: str

    def __post_init__(self) -> None:
        for attr in ("logs", "witnesses", "groups"):
            object.__setattr__(self, attr, tuple(getattr(self, attr)))
        c = _Checker()
        for log in self.logs:
            c.log(log, None)
        for w in self.witnesses:
            c.witness(w, None)
        for g in self.groups:
            c.group(g, None)
        c.set_quorum(self.quorum, None)

    # --- text -------------------------------------------------------------------------------

    @classmethod
    def parse(cls, data: bytes) -> Policy:
        """Parse a policy file (module docstring); errors start with ``line N:``."""
        lines = data.split(b"\n")
        last = lines.pop()  # after the final LF: must be empty
        if last:
            raise MalformedError(f"line {len(lines) + 1}: the last line does not end in LF")
        logs: list[Log] = []
        witnesses: list[Witness] = []
        groups: list[Group] = []
        checker = _Checker()
        quorum: str | None = None
        for number, line in enumerate(lines, 1):
            try:
                q = _parse_line(line, checker, number, logs, witnesses, groups)
            except MalformedError as e:
                raise type(e)(f"line {number}: {e}") from None
            if q is not None:
                quorum = q
        if quorum is None:
            raise MalformedError(f"line {max(len(lines), 1)}: the policy ends with no quorum line")
        return cls(
            logs=tuple(logs), witnesses=tuple(witnesses), groups=tuple(groups), quorum=quorum
        )

    def format(self) -> bytes:
        """The canonical policy text (module docstring); :meth:`parse` gives back ``self``."""
        lines = [x.format() for x in self.logs]
        lines += [x.format() for x in self.witnesses]
        lines += [x.format() for x in self.groups]
        lines.append(f"quorum {self.quorum}")
        return b"".join(encode_octets(line) + b"\n" for line in lines)

    # --- programmatic construction ----------------------------------------------------------

    @classmethod
    def k_of_n(
        cls,
        k: int,
        witnesses: Sequence[str | Verifier],
        logs: Sequence[str | Verifier] = (),
    ) -> Policy:
        """The policy "any k of these witnesses", for ``--witness VKEY --quorum K`` flags.

        Witness keys are vkeys or verifiers of type 0x04, 0x06 or 0x01 (read as its 0x04 key,
        :func:`tlog.keys.cosigner_from_vkey`); log keys are 0x01. Witnesses are named after
        their key names (``name+keyid`` when a name is taken or is ``none``); the group is
        ``witnesses`` and the quorum is it, or ``none`` when k = 0.
        Requires: 0 <= k <= len(witnesses). Duplicate keys raise :class:`MalformedError`.
        """
        if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k <= len(witnesses):
            raise UsageError(f"quorum {k!r} is out of range 0..{len(witnesses)}")
        ws: list[Witness] = []
        taken: set[str] = {NONE}
        for item in witnesses:
            text = item if isinstance(item, str) else format_vkey(item)
            v = cosigner_from_vkey(text)
            name = v.name if v.name not in taken else f"{v.name}+{v.key_id:08x}"
            taken.add(name)
            ws.append(Witness(name, v))
        lg = [Log(parse_vkey(x) if isinstance(x, str) else x) for x in logs]
        if k == 0:
            return cls(logs=tuple(lg), witnesses=tuple(ws), quorum=NONE)
        group = "witnesses"
        n = 1
        while group in taken:
            n += 1
            group = f"witnesses-{n}"
        g = Group(group, k, tuple(w.name for w in ws))
        return cls(logs=tuple(lg), witnesses=tuple(ws), groups=(g,), quorum=group)

    def with_logs(self, logs: Iterable[Log]) -> Policy:
        """This policy with more trusted logs (those "known from other context")."""
        return Policy(
            logs=self.logs + tuple(logs),
            witnesses=self.witnesses,
            groups=self.groups,
            quorum=self.quorum,
        )

    # --- keys -------------------------------------------------------------------------------

    @property
    def log_verifiers(self) -> tuple[Verifier, ...]:
        """The verifiers of the listed logs."""
        return tuple(log.verifier for log in self.logs)

    @property
    def witness_verifiers(self) -> tuple[Verifier, ...]:
        """The cosignature verifiers of the listed witnesses."""
        return tuple(w.verifier for w in self.witnesses)

    @property
    def verifiers(self) -> tuple[Verifier, ...]:
        """Every key of the policy: logs, then witnesses (no two share a name and key ID)."""
        return self.log_verifiers + self.witness_verifiers

    def witness(self, name: str) -> Witness:
        """The witness called ``name``; :class:`KeyError` if there is none."""
        for w in self.witnesses:
            if w.name == name:
                return w
        raise KeyError(name)

    # --- the quorum -------------------------------------------------------------------------

    def shortfalls(self, satisfied: Iterable[str]) -> tuple[Shortfall, ...]:
        """The unmet groups reachable from the quorum, quorum first, when the witnesses named
        ``satisfied`` are satisfied; empty when the quorum is met (:func:`tlog.quorum.shortfalls`).

        Requires: every name in ``satisfied`` is a witness of this policy.
        """
        return shortfalls(self, satisfied)

    def quorum_met(self, satisfied: Iterable[str]) -> bool:
        """Whether the quorum is met when the witnesses named ``satisfied`` are satisfied."""
        return not self.shortfalls(satisfied)

    # --- checkpoints ------------------------------------------------------------------------

    def evaluate(
        self,
        note: bytes,
        time_policy: TimePolicy | None = None,
        *,
        require_origin_match: bool = False,
    ) -> PolicyResult:
        """Open a signed checkpoint note with this policy's keys and evaluate the quorum.

        Returns the result even when the quorum is not met (:func:`tlog.quorum.evaluate`, which
        says what it raises). Requires: the policy lists at least one log (:meth:`with_logs`).
        """
        return evaluate(self, note, time_policy, require_origin_match=require_origin_match)

    def verify(
        self,
        note: bytes,
        time_policy: TimePolicy | None = None,
        *,
        require_origin_match: bool = False,
    ) -> PolicyResult:
        """:meth:`evaluate`, raising :class:`QuorumError` when the quorum is not met."""
        result = self.evaluate(note, time_policy, require_origin_match=require_origin_match)
        if not result.quorum_met:
            raise QuorumError(result)
        return result


def _parse_line(
    line: bytes,
    checker: _Checker,
    number: int,
    logs: list[Log],
    witnesses: list[Witness],
    groups: list[Group],
) -> str | None:
    """Parse one line into the lists; return the quorum name on a quorum line."""
    bad = _BAD_LINE_OCTET.search(line)
    if bad:
        raise MalformedError(
            f"octet 0x{bad.group()[0]:02x} at column {bad.start() + 1} is not allowed "
            "(only TAB, LF, 0x20-0x7E and 0x80-0xFF)"
        )
    stripped = line.strip(b" \t")
    if not stripped or stripped.startswith(b"#"):
        return None
    raw = _SEPARATORS.split(stripped)
    keyword, args = raw[0], [decode_octets(x) for x in raw[1:]]
    if keyword == b"log":
        if len(args) not in (1, 2):
            raise MalformedError(f"a log line has 2 or 3 items, not {len(raw)}")
        log = Log(_parse_vkey_item(raw[1]), args[1] if len(args) == 2 else None)
        checker.log(log, number)
        logs.append(log)
        return None
    if keyword == b"witness":
        if len(args) not in (2, 3):
            raise MalformedError(f"a witness line has 3 or 4 items, not {len(raw)}")
        w = Witness(args[0], _parse_vkey_item(raw[2]), args[2] if len(args) == 3 else None)
        checker.witness(w, number)
        witnesses.append(w)
        return None
    if keyword == b"group":
        if len(args) < 3:
            raise MalformedError(f"a group line has at least 4 items, not {len(raw)}")
        name, threshold_text, *members = args
        threshold: Threshold
        if threshold_text in ("all", "any"):
            threshold = "all" if threshold_text == "all" else "any"
        else:
            threshold = parse_decimal(threshold_text, "group threshold", MAX_INT63)
        g = Group(name, threshold, tuple(members))
        checker.group(g, number)
        groups.append(g)
        return None
    if keyword == b"quorum":
        if len(args) != 1:
            raise MalformedError(f"a quorum line has 2 items, not {len(raw)}")
        checker.set_quorum(args[0], number)
        return args[0]
    raise MalformedError(f"unknown keyword {show_octets(decode_octets(keyword))!r}")


def _parse_vkey_item(item: bytes) -> Verifier:
    try:
        text = item.decode("utf-8")
    except UnicodeDecodeError:
        raise MalformedError("vkey is not valid UTF-8") from None
    return parse_vkey(text)
