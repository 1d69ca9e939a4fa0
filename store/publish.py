"""Kept checkpoints: listing them, and getting the current one cosigned by witnesses.

A store keeps every checkpoint note it signs (:meth:`~store.api.JournalStore.sign_checkpoint`)
and merges into it the cosignatures it is given
(:meth:`~store.api.JournalStore.add_cosignatures`); :meth:`~store.api.JournalStore.published`
returns them by increasing size. :func:`describe_note` reads one such note as a
:class:`KeptCheckpoint` (size, root, signers), :func:`published_checkpoints` lists them all.

:func:`publish_to_witnesses` signs the current checkpoint with the log key and submits it to
every witness in parallel over C2SP tlog-witness (:func:`witness.client.gather`): each witness
gets ``old 0`` first and, on 409, the consistency proof from the size it holds. Every verified
cosignature that comes within the deadline is merged into the kept checkpoint, and the result,
a :class:`Publication`, says whether the quorum is met — a C2SP tlog-policy's, or without one
every witness's — judged on the kept note, which also holds the cosignatures of earlier
publishes of the same checkpoint, and whether a witness raised an alarm (it holds a larger tree
than this log: a split view or a local rollback; or it answered 422: a proof bug or a fork).

This is the one module of :mod:`store` that uses the witness package, and only its client
(:mod:`witness.client`, which imports :mod:`tlog` alone), imported when witnesses are first
contacted: ``import store`` loads no HTTP library, and ``witness`` itself imports nothing of
``store`` but the storage engine.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from tlog.checkpoint import Checkpoint
from tlog.errors import MalformedError, UsageError, VerificationError
from tlog.keys import format_vkey
from tlog.note import parse_note

if TYPE_CHECKING:
    from tlog.policy import Policy
    from witness.client import WitnessClient, WitnessOutcome

__all__ = [
    "DEFAULT_TIMEOUT",
    "KeptCheckpoint",
    "Publication",
    "PublishedLog",
    "describe_note",
    "publish_to_witnesses",
    "published_checkpoints",
    "witness_clients",
]

DEFAULT_TIMEOUT = 10
"""Seconds :func:`publish_to_witnesses` waits for the witnesses, all requests included."""


@dataclass(frozen=True)
class KeptCheckpoint:
    """A kept checkpoint note: its tree size and root, and who signed it, as (key name, key
    ID) pairs in the note's order (the log key first, then the cosigners)."""

    size: int
    root: bytes
    signers: tuple[tuple[str, int], ...]
    note: bytes


def describe_note(note: bytes) -> KeptCheckpoint:
    """Read a signed checkpoint note (its signatures are not verified here)."""
    text, sigs = parse_note(note)
    cp = Checkpoint.parse(text)
    return KeptCheckpoint(cp.size, cp.root, tuple((s.name, s.key_id) for s in sigs), note)


def published_checkpoints(store: PublishedLog) -> list[KeptCheckpoint]:
    """Every checkpoint ``store`` keeps, by increasing size."""
    return [describe_note(n) for n in store.published()]


@dataclass(frozen=True)
class Publication:
    """What :func:`publish_to_witnesses` did.

    ``signed`` is the checkpoint note signed for this publish; ``note`` the note as kept after
    it (``signed`` with every cosignature kept, earlier ones included); ``outcomes`` one
    :class:`witness.client.WitnessOutcome` per witness, in order (``summary()`` is one line);
    ``quorum_met`` and ``shortfall`` (why not, empty when met) judge ``note``.
    """

    signed: bytes
    note: bytes
    outcomes: tuple[WitnessOutcome, ...]
    quorum_met: bool
    shortfall: str

    @property
    def alarms(self) -> tuple[WitnessOutcome, ...]:
        """The outcomes that raised an alarm (possible split views)."""
        return tuple(o for o in self.outcomes if o.status == "alarm")

    def check(self) -> None:
        """Raise VerificationError when an alarm was raised or the quorum is not met.

        The message lists the alarms, then the shortfall, and says how many other signatures
        the kept checkpoint holds (it is kept either way).
        """
        problems = [f"ALARM from {o.summary()}" for o in self.alarms]
        if not self.quorum_met:
            problems.append(self.shortfall)
        if problems:
            count = len(parse_note(self.note)[1]) - 1
            raise VerificationError(
                "; ".join(problems) + f" (the signed checkpoint is kept with {count} other "
                f"signature{'s' if count != 1 else ''})"
            )


def witness_clients(
    witnesses: Sequence[tuple[str, str]],
    *,
    timeout: float = DEFAULT_TIMEOUT,
    what: str = "witness",
) -> list[WitnessClient]:
    """A :class:`witness.client.WitnessClient` per (submission URL, cosignature vkey) pair.

    The vkey is of type 0x04 or 0x06 (0x01 is read as 0x04); ``timeout`` bounds each request.
    A URL or vkey the client refuses raises its error again with the prefix ``WHAT URL: ``,
    after closing the clients already made. The caller closes the clients.
    """
    from witness.client import WitnessClient  # noqa: PLC0415 - see the module docstring

    clients: list[WitnessClient] = []
    try:
        for url, vkey in witnesses:
            try:
                clients.append(WitnessClient(url, [vkey], timeout=timeout))
            except (MalformedError, UsageError) as e:
                raise type(e)(f"{what} {url}: {e}") from None
    except BaseException:
        for c in clients:
            c.close()
        raise
    return clients


class PublishedLog(Protocol):
    """What publishing needs of a log: a :class:`~store.api.JournalStore` (the tenant's
    log), or :attr:`store.inbox.Inbox.log` (its inbox log)."""

    @property
    def log_vkey(self) -> str: ...

    def checkpoint(self) -> Checkpoint: ...

    def sign_checkpoint(self) -> bytes: ...

    def consistency_proof(self, old: int, new: int | None = None) -> list[bytes]: ...

    def add_cosignatures(self, note: bytes, *, witness_keys: Sequence[str]) -> bytes: ...

    def published(self) -> list[bytes]: ...


def _check_policy_logs(store: PublishedLog, policy: Policy | None) -> None:
    if policy is not None and policy.logs:
        log = store.log_vkey
        if all(x.vkey != log for x in policy.logs):
            raise UsageError(f"the policy lists logs, but not this log's key {log}")


def publish_to_witnesses(
    store: PublishedLog,
    witnesses: Sequence[WitnessClient],
    *,
    policy: Policy | None = None,
    timeout: float = DEFAULT_TIMEOUT,
) -> Publication:
    """Sign the current checkpoint, gather cosignatures, keep them (see the module docstring).

    ``store`` must hold the log key; ``witnesses`` are clients of distinct witnesses (see
    :func:`witness_clients`), at least one; ``timeout`` bounds the whole exchange, in seconds.
    A ``policy`` that lists logs must list this log's vkey (UsageError). Call
    :meth:`Publication.check` to turn a missed quorum or an alarm into an error.
    """
    _check_policy_logs(store, policy)
    from witness.client import gather  # noqa: PLC0415 - see the module docstring

    note = store.sign_checkpoint()
    size = Checkpoint.parse(parse_note(note)[0]).size
    result = gather(
        note,
        witnesses,
        lambda old: store.consistency_proof(old, size),
        policy,
        # Read when a witness answers 409: another publisher may have grown the log.
        my_size=lambda: store.checkpoint().size,
        deadline=timeout,
        # Every cosignature that comes within the deadline is kept, not only a quorum.
        stop_early=False,
    )
    keys = [format_vkey(v) for w in witnesses for v in w.verifiers]
    kept = store.add_cosignatures(result.note, witness_keys=keys) if result.note != note else note
    return Publication(note, kept, result.outcomes, result.quorum_met, result.shortfall)
