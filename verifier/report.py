"""The verification report of ``tlog-verify``: its model, its human text and its JSON form.

Every verb builds one :class:`Report`: what was checked (with counts), the verdict, the first
failure with its location, the facts established (origin, sizes, roots, …) and the notes that
say what this "valid" does not cover. :meth:`Report.render_text` is the human form (standard
output, for people) and :meth:`Report.render_json` the machine form (``--json``), whose schema
is fixed here and in ``docs/auditor-guide.md``.

JSON schema ``tlog-verify/report/v1`` — one JSON object, UTF-8, ending in LF::

    {
      "schema":  "tlog-verify/report/v1",          constant; a new major version gets a new name
      "verb":    "export" | "proof" | "checkpoint" | "consistency",
      "inputs":  {ROLE: PATH, ...},                 the files read, by role ("export",
                                                    "policy", "proof", "records", "since",
                                                    "old", "new", "consistency-proof",
                                                    "checkpoint"); "-" is standard input
      "status":  0 | 1 | 2,                         the process exit status
      "verdict": "valid" | "invalid" | "unusable",  the status in words
      "valid":   true | false,                      status == 0
      "failure": null | {                           null exactly when status == 0
          "kind":    KIND,                          see below
          "message": STRING,                        one line; standard error shows it after
                                                    the location
          "input":   ROLE | null,                   which input the failure is in
          "line":    INT | null,                    1-based line of that input
          "run":     STRING | null,                 run ID, for a record or run failure
          "seq":     INT | null,                    record seq within the run
          "checkpoint_size": INT | null             size of the checkpoint at fault
      },
      "checks":  [ {"id": ID, "description": STRING, "count": INT, "unit": PLURAL-NOUN}, ...],
                                                    every check that PASSED, in the order done;
                                                    on failure, those completed before it
      "facts":   {...},                             what was established; verb-specific keys,
                                                    see below; absent values are omitted
      "notes":   [STRING, ...]                      what this verdict does not cover
    }

Failure kinds. Status 1 (the input does not verify): ``malformed`` (the audited input is not
in its format), ``chain`` (a record's hash, link, run or seq), ``signature`` (a signature line
of a trusted or declared key does not verify), ``unverified`` (no signature of a trusted log
key), ``untrusted-key`` (a key the input declares is not one the auditor trusts), ``proof``
(an inclusion proof or a checkpoint root), ``consistency`` (two checkpoints, or the log and a
kept checkpoint, do not describe one append-only log), ``policy`` (the witness quorum is not
met, time rules included), ``verification`` (any other check: the export digest, a missing
record signature, …). Status 2 (nothing could be judged): ``usage`` (command line), ``input``
(an auditor-supplied input — policy, key, kept checkpoint — is malformed or unreadable, or an
input changed while it was read), ``internal`` (a bug in the verifier; the input was not
judged).

Check IDs (stable): ``export-format``, ``log-key``, ``checkpoint-signatures``,
``witness-quorum``, ``time-rules``, ``record-chain``, ``record-signatures``, ``sealed-heads``,
``checkpoint-roots``, ``checkpoint-consistency``, ``since`` (export); ``proof-format``,
``records-chain``, ``records-signatures``, ``head``, ``log-signature``, ``witness-quorum``,
``time-rules``, ``inclusion`` (proof); ``checkpoint-format``, ``log-signature``,
``witness-quorum``, ``time-rules`` (checkpoint); those four prefixed ``old-`` and ``new-``, then
``consistency`` (consistency).

Facts, by verb (hashes are padded base64; sizes and counts are integers):

* export: ``origin``, ``log_key``, ``log_size``, ``log_root``, ``runs``, ``sealed_runs``,
  ``unsealed_runs``, ``uncovered_sealed_runs``, ``records``, ``signed_records``,
  ``unsigned_records``, ``record_keys_trusted`` (bool), ``digest``, ``lines``,
  ``checkpoints`` (a list of ``{"line", "size", "root", "witnesses": [names counted],
  "ignored": [{"witness", "timestamp", "reason"}]}``), ``consistency_proofs``, ``since``
  (``{"size", "root", "proof": [hashes]}``, the consistency proof from the kept checkpoint to
  the export's log).
* proof: ``origin``, ``index``, ``size``, ``root``, ``leaf``, ``head``, ``run``, ``records``,
  ``signed_records``, ``outcome`` (with ``--records`` ending in the run's seal record: the
  outcome it names, which the inclusion proof covers), ``witnesses``, ``ignored``,
  ``log_keys``.
* checkpoint: ``origin``, ``size``, ``root``, ``log_keys``, ``witnesses``, ``ignored``,
  ``unknown_signatures`` (lines from keys the policy does not list, ignored).
* consistency: ``origin``, ``old`` and ``new`` (each ``{"size", "root", "witnesses",
  "ignored"}``), ``proof_hashes``.

On a failure, the facts hold only what was established before it (an export's ``origin`` and
``log_key`` once its header was read).

Errors. The verbs raise the :mod:`tlog.errors` classes; :func:`failure_from` turns any of them
into a :class:`Failure` (kind from the class, location from the error's ``line``, ``run`` and
``seq`` attributes or, for tlog.export messages, from their ``run R record S`` and
``checkpoint of size N`` phrases). The verifier's own conditions have their own classes here:
:class:`LocatedError` (a VerificationError with a kind and a location), :class:`InputError` (a
UsageError: an auditor-supplied input is unusable).

Human text: a first line ``tlog-verify VERB: VALID|INVALID|UNUSABLE``; for a failure, a line
``first failure: <location>: <message>``; then ``checked`` with one line per passed check and
its count; ``facts``; ``notes``. It is for people: scripts use ``--json``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from tlog import errors
from tlog.journal import ChainError

__all__ = [
    "EXIT_INVALID",
    "EXIT_UNUSABLE",
    "EXIT_VALID",
    "INVALID_KINDS",
    "JSON",
    "SCHEMA",
    "UNUSABLE_KINDS",
    "VERDICTS",
    "Check",
    "Failure",
    "InputError",
    "LocatedError",
    "Report",
    "failure_from",
    "kind_of",
]

SCHEMA = "tlog-verify/report/v1"
"""The value of the report's ``schema`` member."""

EXIT_VALID = 0
EXIT_INVALID = 1
EXIT_UNUSABLE = 2

VERDICTS = {EXIT_VALID: "valid", EXIT_INVALID: "invalid", EXIT_UNUSABLE: "unusable"}

INVALID_KINDS = frozenset(
    {
        "malformed",
        "chain",
        "signature",
        "unverified",
        "untrusted-key",
        "proof",
        "consistency",
        "policy",
        "verification",
    }
)
"""Failure kinds of status 1: the input was judged and does not verify."""

UNUSABLE_KINDS = frozenset({"usage", "input", "internal"})
"""Failure kinds of status 2: nothing was judged."""

JSON = Any
"""A JSON-serialisable value (dict, list, str, int, bool, None)."""


@dataclass(frozen=True)
class Check:
    """One check that passed: ``count`` items of ``unit`` (a plural noun) were checked.

    ``id`` is stable (module docstring); ``description`` is for people and may change.
    """

    id: str
    description: str
    count: int
    unit: str

    def to_json(self) -> dict[str, JSON]:
        """The check as a JSON object."""
        return {
            "id": self.id,
            "description": self.description,
            "count": self.count,
            "unit": self.unit,
        }


@dataclass(frozen=True)
class Failure:
    """The first failure: its kind (module docstring), message and location.

    Requires: ``kind`` is one of :data:`INVALID_KINDS` or :data:`UNUSABLE_KINDS`.
    """

    kind: str
    message: str
    input: str | None = None
    line: int | None = None
    run: str | None = None
    seq: int | None = None
    checkpoint_size: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in INVALID_KINDS | UNUSABLE_KINDS:
            raise ValueError(f"unknown failure kind {self.kind!r}")
        # The message goes on one line of standard error: no line breaks.
        object.__setattr__(self, "message", self.message.replace("\r", "\\r").replace("\n", "\\n"))

    @property
    def status(self) -> int:
        """The exit status this failure gives."""
        return EXIT_UNUSABLE if self.kind in UNUSABLE_KINDS else EXIT_INVALID

    def location(self) -> str:
        """Where the failure is, in words: ``export line 57 (run r-1, record 2)``."""
        parts: list[str] = []
        if self.input is not None:
            parts.append(self.input)
        if self.line is not None:
            parts.append(f"line {self.line}")
        where = " ".join(parts)
        inner: list[str] = []
        if self.run is not None:
            inner.append(f"run {self.run}")
        if self.seq is not None:
            inner.append(f"record {self.seq}")
        if self.checkpoint_size is not None:
            inner.append(f"checkpoint of size {self.checkpoint_size}")
        if inner:
            where = f"{where} ({', '.join(inner)})" if where else ", ".join(inner)
        return where

    def to_json(self) -> dict[str, JSON]:
        """The failure as a JSON object (every member present, null when unknown)."""
        return {
            "kind": self.kind,
            "message": self.message,
            "input": self.input,
            "line": self.line,
            "run": self.run,
            "seq": self.seq,
            "checkpoint_size": self.checkpoint_size,
        }


@dataclass
class Report:
    """The outcome of one verb. Build it, add checks as they pass, then :meth:`fail` or not.

    ``status`` is 0 until :meth:`fail` sets the failure's status; a report with a failure is
    never valid.
    """

    verb: str
    inputs: dict[str, str] = field(default_factory=dict)
    checks: list[Check] = field(default_factory=list)
    failure: Failure | None = None
    facts: dict[str, JSON] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def status(self) -> int:
        """0 valid, 1 invalid, 2 unusable."""
        return EXIT_VALID if self.failure is None else self.failure.status

    @property
    def valid(self) -> bool:
        """True exactly when no failure was recorded."""
        return self.failure is None

    @property
    def verdict(self) -> str:
        """``valid``, ``invalid`` or ``unusable``."""
        return VERDICTS[self.status]

    def check(self, id: str, description: str, count: int, unit: str) -> None:
        """Record a check that passed."""
        self.checks.append(Check(id, description, count, unit))

    def fail(self, failure: Failure) -> Report:
        """Record the first failure (a later one is ignored); return the report."""
        if self.failure is None:
            self.failure = failure
        return self

    def note(self, text: str) -> None:
        """Add a note on what the verdict does not cover."""
        if text not in self.notes:
            self.notes.append(text)

    # --- rendering ------------------------------------------------------------------------

    def to_json(self) -> dict[str, JSON]:
        """The report as a JSON object (schema in the module docstring)."""
        return {
            "schema": SCHEMA,
            "verb": self.verb,
            "inputs": dict(self.inputs),
            "status": self.status,
            "verdict": self.verdict,
            "valid": self.valid,
            "failure": None if self.failure is None else self.failure.to_json(),
            "checks": [c.to_json() for c in self.checks],
            "facts": self.facts,
            "notes": list(self.notes),
        }

    def render_json(self) -> str:
        """The JSON text, indented, ending in LF."""
        return json.dumps(self.to_json(), indent=2, ensure_ascii=False) + "\n"

    def render_text(self) -> str:
        """The human report, ending in LF."""
        out = [f"tlog-verify {self.verb}: {self.verdict.upper()}"]
        for role, path in self.inputs.items():
            out.append(f"  {role + ':':<18} {path}")
        if self.failure is not None:
            where = self.failure.location()
            prefix = f"{where}: " if where else ""
            out.append(f"first failure ({self.failure.kind}): {prefix}{self.failure.message}")
        if self.checks:
            out.append("checked" if self.failure is None else "checked before the failure")
            width = max(len(c.description) for c in self.checks)
            for c in self.checks:
                out.append(f"  ok  {c.description:<{width}}  {c.count} {_unit(c.count, c.unit)}")
        elif self.failure is not None:
            out.append("checked before the failure: nothing")
        facts = _flat_facts(self.facts)
        if facts:
            out.append("facts")
            width = max(len(k) for k, _ in facts)
            out += [f"  {k:<{width}}  {v}" for k, v in facts]
        if self.notes:
            out.append("notes")
            out += [f"  - {n}" for n in self.notes]
        return "\n".join(out) + "\n"


_SINGULAR = {"leaves": "leaf", "hashes": "hash"}


def _unit(count: int, unit: str) -> str:
    """``unit`` (a plural noun, maybe with a qualifier) for ``count``: singular for 1."""
    if count != 1:
        return unit
    words = unit.split(" ")
    for i, w in enumerate(words):
        if w in _SINGULAR:
            words[i] = _SINGULAR[w]
            break
        if w.endswith("s"):
            words[i] = w[:-1]
            break
    return " ".join(words)


def _flat_facts(facts: dict[str, JSON]) -> list[tuple[str, str]]:
    """The facts as (name, text) lines; lists of objects are summarised, not dumped."""
    out: list[tuple[str, str]] = []
    for key, value in facts.items():
        if value is None:
            continue
        if key == "checkpoints" and isinstance(value, list):
            shown = value if len(value) <= 12 else value[:5] + value[-5:]
            for i, cp in enumerate(shown):
                if len(shown) < len(value) and i == 5:
                    out.append(("...", f"{len(value) - 10} more checkpoints (see --json)"))
                names = ", ".join(cp.get("witnesses", [])) or "none"
                out.append(
                    (
                        f"checkpoint {cp['size']}",
                        f"line {cp['line']}, root {cp['root']}, witnesses counted: {names}",
                    )
                )
            continue
        if isinstance(value, dict):
            inner = ", ".join(f"{k} {_short(v)}" for k, v in value.items() if v is not None)
            out.append((key.replace("_", " "), inner))
            continue
        out.append((key.replace("_", " "), _short(value)))
    return out


def _short(value: JSON) -> str:
    if (
        isinstance(value, list)
        and value
        and all(isinstance(v, dict) and "witness" in v and "reason" in v for v in value)
    ):
        return "; ".join(f"witness {v['witness']}: {v['reason']}" for v in value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list):
        if not value:
            return "none"
        if all(isinstance(v, str | int) for v in value):
            return ", ".join(str(v) for v in value)
        return f"{len(value)} item{'' if len(value) == 1 else 's'} (see --json)"
    if isinstance(value, dict):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


# --- errors ---------------------------------------------------------------------------------


class LocatedError(errors.VerificationError):
    """A check of the verifier failed: ``kind`` (an invalid kind) and where.

    The message carries no location prefix; :meth:`Failure.location` gives it.
    """

    def __init__(
        self,
        kind: str,
        message: str,
        *,
        line: int | None = None,
        run: str | None = None,
        seq: int | None = None,
        checkpoint_size: int | None = None,
    ) -> None:
        if kind not in INVALID_KINDS:
            raise ValueError(f"{kind!r} is not a failure kind of an invalid input")
        super().__init__(message)
        self.kind = kind
        self.line = line
        self.run = run
        self.seq = seq
        self.checkpoint_size = checkpoint_size


class InputError(errors.UsageError):
    """An input the auditor supplies (policy, key, kept checkpoint) cannot be used."""


_LINE_PREFIX = re.compile(r"line (\d+): ")
_ANY_LINE = re.compile(r"\bline (\d+)\b")
_RUN_RECORD = re.compile(r"\brun (\S+) record (\d+)\b")
_CHECKPOINT_SIZE = re.compile(r"\bcheckpoint of size (\d+)\b")


_KINDS: tuple[tuple[type[BaseException] | tuple[type[BaseException], ...], str], ...] = (
    (InputError, "input"),
    (errors.UsageError, "usage"),
    (ChainError, "chain"),
    (errors.InvalidSignatureError, "signature"),
    (errors.UnverifiedNoteError, "unverified"),
    (errors.ProofError, "proof"),
    (errors.PolicyError, "policy"),
    (errors.MalformedError, "malformed"),
    (errors.VerificationError, "verification"),
    (UnicodeError, "malformed"),
    ((OSError, errors.TlogError), "input"),
)
"""The failure kind of each exception class, the first match counting (subclasses first)."""


def kind_of(e: BaseException) -> str:
    """The failure kind of an exception (module docstring); ``internal`` for any other."""
    if isinstance(e, LocatedError):
        return e.kind
    return next((kind for cls, kind in _KINDS if isinstance(e, cls)), "internal")


def failure_from(e: BaseException, input: str | None) -> Failure:
    """The :class:`Failure` an exception stands for, located in ``input`` where it has a line.

    The ``"line N: "`` prefix of tlog.export and tlog.proof messages becomes the location.
    """
    message = str(e) or type(e).__name__
    if isinstance(e, OSError) and e.filename is not None and e.strerror:
        message = f"{e.filename}: {e.strerror}"
    line = getattr(e, "line", None)
    m = _LINE_PREFIX.match(message)
    if m is not None:
        message = message[m.end() :]
        if line is None:
            line = int(m.group(1))
    elif line is None:
        m = _ANY_LINE.search(message)
        if m is not None:
            line = int(m.group(1))
    run = getattr(e, "run", None)
    seq = getattr(e, "seq", None)
    size = getattr(e, "checkpoint_size", None)
    if run is None and seq is None:
        m = _RUN_RECORD.search(message)
        if m is not None:
            run, seq = m.group(1), int(m.group(2))
    if size is None:
        m = _CHECKPOINT_SIZE.search(message)
        if m is not None:
            size = int(m.group(1))
    kind = kind_of(e)
    if kind == "internal":
        message = (
            f"internal error ({type(e).__name__}: {message}); this is a bug in tlog-verify, "
            "and the input was not judged"
        )
    return Failure(
        kind,
        message,
        input,
        line if isinstance(line, int) else None,
        run if isinstance(run, str) else None,
        seq if isinstance(seq, int) else None,
        size if isinstance(size, int) else None,
    )
