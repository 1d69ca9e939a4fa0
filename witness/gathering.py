"""Gathering cosignatures: one checkpoint submitted to several witnesses in parallel.

:func:`gather` submits one note to several :class:`~witness.client.WitnessClient` in parallel
threads, every request bounded by the overall deadline, and merges the verified lines into the
note as they arrive (:func:`~witness.responses.merge_cosignatures`). With a policy it evaluates
the quorum over the merged note after each answer and, unless told otherwise, returns as soon
as it is met; requests still running then finish in the background (their result still
updates the client's known sizes). Without a policy, every witness must cosign. Each witness
gets a :class:`WitnessOutcome`; the whole a :class:`GatherResult`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tlog.cosignature import timestamp_of
from tlog.errors import (
    TlogError,
    UnverifiedNoteError,
    UsageError,
)
from tlog.note import Signature, Verifier, open_note
from tlog.policy import Policy
from witness.responses import (
    DEFAULT_MAX_RETRIES,
    Prover,
    SizeSource,
    WitnessClientError,
    WitnessUnavailable,
    merge_cosignatures,
    note_checkpoint,
)

if TYPE_CHECKING:
    from witness.client import WitnessClient

__all__ = ["GatherResult", "WitnessOutcome", "gather"]


@dataclass(frozen=True)
class WitnessOutcome:
    """What one witness gave in a :func:`gather`.

    ``status`` is one of ``cosigned``, ``alarm``, ``conflict``, ``rejected``, ``busy``,
    ``unavailable``, ``bad-response``, ``error`` (another toolkit error, e.g. from the
    prover), ``timeout`` (no answer before the deadline) and ``pending`` (still running when
    the quorum was met). ``signatures`` are the verified lines (only for ``cosigned``);
    ``error`` is the exception behind any other status but ``pending``; ``known_size`` the
    size the client last saw the witness hold for the origin; ``seconds`` how long it took
    (until the gather returned, for ``timeout`` and ``pending``).
    """

    witness: WitnessClient
    status: str
    signatures: tuple[Signature, ...] = ()
    error: TlogError | None = None
    known_size: int | None = None
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        """True when the witness cosigned."""
        return self.status == "cosigned"

    def summary(self) -> str:
        """One line: ``<url> <status>: <details>``."""
        if self.ok:
            lines = ", ".join(
                f"{s.name}+{s.key_id:08x} at {timestamp_of(s)}" for s in self.signatures
            )
            detail = f"{lines} ({self.seconds:.2f} s)"
        elif self.status == "pending":
            detail = f"no answer yet when the quorum was met ({self.seconds:.2f} s)"
        elif isinstance(self.error, WitnessClientError):
            detail = self.error.reason
        elif self.error is not None:
            detail = str(self.error)
        else:  # pragma: no cover - every other status carries its error
            detail = ""
        size = "" if self.known_size is None else f" [witness size {self.known_size}]"
        return f"{self.witness.url} {self.status}: {detail}{size}".replace("\n", " ")


@dataclass(frozen=True)
class GatherResult:
    """What :func:`gather` returns.

    ``note`` is the input note with every verified cosignature merged in; ``outcomes`` has one
    entry per witness, in input order; ``quorum_met`` says whether the policy (or, without one,
    every witness) is satisfied by the merged note, ``shortfall`` why not (empty when met);
    ``known_sizes`` maps each witness URL to the size it was last seen to hold for the origin.
    """

    note: bytes
    outcomes: tuple[WitnessOutcome, ...]
    quorum_met: bool
    shortfall: str
    known_sizes: dict[str, int] = field(default_factory=dict)

    @property
    def alarms(self) -> tuple[WitnessOutcome, ...]:
        """The outcomes that raised an alarm (possible split views)."""
        return tuple(o for o in self.outcomes if o.status == "alarm")

    @property
    def cosigned(self) -> tuple[WitnessOutcome, ...]:
        """The outcomes of the witnesses that cosigned."""
        return tuple(o for o in self.outcomes if o.ok)


class _CachedProver:
    """A prover shared by the gather threads: each proof is computed once."""

    def __init__(self, prover: Prover) -> None:
        self._prover = prover
        self._lock = threading.Lock()
        self._proofs: dict[int, list[bytes]] = {}

    def __call__(self, old: int) -> list[bytes]:
        with self._lock:
            if old not in self._proofs:
                self._proofs[old] = list(self._prover(old))
            return self._proofs[old]


def _attempt(
    witness: WitnessClient,
    note: bytes,
    origin: str,
    prover: Prover,
    my_size: SizeSource,
    deadline: float,
    max_retries: int,
) -> WitnessOutcome:
    started = time.monotonic()
    try:
        sigs = witness.submit(
            note, prover, my_size=my_size, max_retries=max_retries, deadline=deadline
        )
    except TlogError as e:
        status = e.kind if isinstance(e, WitnessClientError) else "error"
        return WitnessOutcome(
            witness, status, (), e, witness.known_size(origin), time.monotonic() - started
        )
    seconds = time.monotonic() - started
    return WitnessOutcome(
        witness, "cosigned", tuple(sigs), None, witness.known_size(origin), seconds
    )


def _quorum(
    note: bytes, witnesses: Sequence[WitnessClient], policy: Policy | None
) -> tuple[bool, str]:
    """(met, shortfall) of the merged note: the policy's quorum, or every witness."""
    keys: list[Verifier] = list(policy.witness_verifiers) if policy is not None else []
    if policy is None:
        for w in witnesses:
            keys.extend(w.verifiers)
    # Several clients may share a key (a caller's mistake, refused by gather): keep it once.
    unique = list({(v.name, v.key_id): v for v in keys}.values())
    try:
        verified = {(s.name, s.key_id) for s in open_note(note, unique).sigs}
    except UnverifiedNoteError:
        verified = set()
    if policy is not None:
        satisfied = {
            w.name for w in policy.witnesses if (w.verifier.name, w.verifier.key_id) in verified
        }
        shortfalls = policy.shortfalls(satisfied)
        if not shortfalls:
            return True, ""
        return False, f"quorum {policy.quorum} not met: " + "; ".join(map(str, shortfalls))
    done = [w for w in witnesses if any((v.name, v.key_id) in verified for v in w.verifiers)]
    if len(done) == len(witnesses):
        return True, ""
    return False, (
        f"{len(done)} of {len(witnesses)} witnesses cosigned; without a policy every witness "
        "is required"
    )


def _check_witnesses(witnesses: Sequence[WitnessClient], deadline: float) -> None:
    """gather's preconditions on its witnesses and deadline (UsageError)."""
    if not witnesses:
        raise UsageError("gather needs at least one witness")
    urls = [w.url for w in witnesses]
    if len(set(urls)) != len(urls):
        raise UsageError("a witness is listed twice")
    if isinstance(deadline, bool) or not deadline > 0:
        raise UsageError(f"deadline must be positive seconds, not {deadline!r}")


def _unanswered(
    merged: bytes,
    witnesses: Sequence[WitnessClient],
    futures: dict[Future[WitnessOutcome], int],
    outcomes: list[WitnessOutcome | None],
    met: bool,
    origin: str,
    deadline: float,
    elapsed: float,
) -> bytes:
    """Fill in the outcomes of the witnesses not heard from when the gather stopped: an answer
    that came in since (merged into the returned note), else ``pending`` when the quorum was
    met, else ``timeout``."""
    for f, i in futures.items():
        if outcomes[i] is not None:
            continue
        if f.done() and not f.cancelled():
            # It answered between the last wait and now: use it.
            late = f.result()
            outcomes[i] = late
            merged = merge_cosignatures(merged, late.signatures)
            continue
        w = witnesses[i]
        if met:
            outcomes[i] = WitnessOutcome(
                w, "pending", known_size=w.known_size(origin), seconds=elapsed
            )
        else:
            err = WitnessUnavailable(f"no answer within the deadline ({deadline:.3g} s)", url=w.url)
            outcomes[i] = WitnessOutcome(w, "timeout", (), err, w.known_size(origin), elapsed)
    return merged


def gather(
    note: bytes,
    witnesses: Sequence[WitnessClient],
    prover: Prover,
    policy: Policy | None,
    *,
    my_size: SizeSource,
    deadline: float,
    stop_early: bool = True,
    max_retries: int = DEFAULT_MAX_RETRIES,
) -> GatherResult:
    """Submit ``note`` to every witness in parallel and merge their cosignatures.

    ``note`` is the log's signed checkpoint of size N. Two arguments connect the gather to
    the log, and are what :meth:`WitnessClient.submit` takes too:

    * ``prover(old)`` returns the RFC 6962 consistency proof from tree size ``old`` to N — the
      hashes that show the witness's last cosigned tree is a prefix of the note's (for a
      journal store: ``lambda old: store.consistency_proof(old, N)``, N fixed: the log may grow
      meanwhile). A witness's ``old`` is what its client knows it holds, else 0; a 409 tells
      the size it holds, and the request is sent again from there. The prover is called only
      for 0 < old < N (old 0 and old N need no proof), from the gather's threads, and at most
      once per ``old`` (the proofs are shared). A :class:`~tlog.errors.TlogError` it raises
      becomes that witness's ``error`` outcome; any other exception propagates.
    * ``my_size`` is the log's own latest size, >= N (UsageError otherwise): an int, or a
      function that reads it, called each time a witness answers 409 with the size S it holds.
      S beyond ``my_size`` means the witness holds a larger tree than the log has ever had — a
      split view or a local rollback: an ``alarm`` outcome. S above N but within it means the
      witness already cosigned a newer checkpoint of this log (another publisher, or an earlier
      run): a ``conflict``, no alarm. S up to N: the request is sent again from S. So read it
      fresh (``lambda: store.checkpoint().size``) when the log may grow while publishing;
      passing N itself would turn another publisher's newer checkpoint into an alarm.

    ``deadline`` is the number of seconds the whole gather may take, every request included.
    With ``policy``, the quorum is evaluated over the merged note (pre-existing lines of the
    note count too) after each answer, and with ``stop_early`` the gather returns as soon as it
    is met. Without a policy every witness must cosign. ``max_retries`` bounds the 409 rounds
    per witness. See :class:`GatherResult` and :class:`WitnessOutcome`;
    :func:`store.publish.publish_to_witnesses` is this call for a journal store (and keeps the
    cosignatures), docs/embedder-guide.md §3 shows it by hand.

    Requires: at least one witness, no witness URL twice, ``deadline`` > 0, a well-formed
    checkpoint note. A note carrying a line from a policy key that does not verify raises
    :class:`~tlog.errors.InvalidSignatureError`.
    """
    _check_witnesses(witnesses, deadline)
    origin, _ = note_checkpoint(note)
    end = time.monotonic() + deadline
    shared = _CachedProver(prover)
    merged = note
    n = len(witnesses)
    outcomes: list[WitnessOutcome | None] = [None] * n
    started = time.monotonic()
    pool = ThreadPoolExecutor(max_workers=n, thread_name_prefix="witness-gather")
    futures: dict[Future[WitnessOutcome], int] = {}
    met = False
    try:
        for i, w in enumerate(witnesses):
            f = pool.submit(_attempt, w, note, origin, shared, my_size, end, max_retries)
            futures[f] = i
        pending = set(futures)
        while pending:
            left = end - time.monotonic()
            if left <= 0:
                break
            done, pending = wait(pending, timeout=left, return_when=FIRST_COMPLETED)
            for f in done:
                outcome = f.result()  # _attempt returns every toolkit error as an outcome
                outcomes[futures[f]] = outcome
                merged = merge_cosignatures(merged, outcome.signatures)
            if policy is not None and stop_early and pending:
                met, _ = _quorum(merged, witnesses, policy)
                if met:
                    break
    finally:
        # Never wait here for requests still running: they end by themselves (each bounded by
        # the deadline) and still update their client's known sizes.
        pool.shutdown(wait=False, cancel_futures=True)
    elapsed = time.monotonic() - started
    merged = _unanswered(merged, witnesses, futures, outcomes, met, origin, deadline, elapsed)
    met, shortfall = _quorum(merged, witnesses, policy)
    final = tuple(o for o in outcomes if o is not None)
    sizes = {w.url: s for w in witnesses if (s := w.known_size(origin)) is not None}
    return GatherResult(merged, final, met, shortfall, sizes)
