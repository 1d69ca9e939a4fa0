"""Checking a tenant's runs from the store's own reads: linked reading, and verifying runs.

Every read of a store recomputes each record's hash (:meth:`~store.api.JournalStore.read_page`);
what one page cannot see — the links between records on different pages, a gap, the seal —
is checked here, page by page, so that memory stays flat however long a run is:

* :func:`read_pages` yields a run's records as pages in which each record links to the one
  before it, across pages too (``tlog-store read``);
* :func:`verify_run` checks one run: contiguous seqs, links and hashes of its whole chain; that
  the stored head is the chain's last hash; and for a sealed run, that the seal holds that
  head, that the last record is the seal record naming the seal's outcome, and that the head
  is the leaf at the seal's position in the log (an RFC 6962 inclusion proof checked against a
  checkpoint's root). :func:`verify_runs` does so for named runs or every run
  (``tlog-store verify``).

A fault raises :class:`~store.errors.CorruptError` naming the run (and the record when one is
at fault). Both are safe while writers work: a run's seal is read before its head (a sealed run
no longer changes), its chain is checked up to the head that was read, and a run sealed after
the checkpoint in hand is proven against a fresh one (the log only grows).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from store.api import JournalStore, Seal
from store.errors import CorruptError, NotSealedError
from tlog.checkpoint import Checkpoint
from tlog.errors import UsageError
from tlog.journal import GENESIS, ChainError, Record, seal_outcome, verify_chain
from tlog.merkle import leaf_hash, verify_inclusion

__all__ = ["PAGE", "RunCheck", "all_runs", "read_pages", "verify_run", "verify_runs"]

PAGE = 1000
"""Records (or run IDs) fetched per query by default: output streams, memory stays flat."""


@dataclass(frozen=True)
class RunCheck:
    """A run that verified: its record count, its head (the chain's last hash), its seal
    (None when unsealed) and the checkpoint whose tree holds the sealed head (for an unsealed
    run, the checkpoint in hand)."""

    run: str
    records: int
    head: bytes
    seal: Seal | None
    checkpoint: Checkpoint


def read_pages(
    store: JournalStore, run: str, from_seq: int = 1, page: int = PAGE
) -> Iterator[list[Record]]:
    """``run``'s records from ``from_seq`` on, ``page`` at a time, each page checked whole.

    Every record must have the next seq and link to the previous record's hash (across pages
    too; from a ``from_seq`` beyond 1 the first link is taken on trust), else CorruptError
    before the page that holds it is yielded. A run with no records yields one empty page.
    Requires: ``from_seq`` >= 1, ``page`` >= 1.
    """
    seq = from_seq
    prev: bytes | None = GENESIS if seq == 1 else None
    while True:
        records = store.read_page(run, seq, page)
        for r in records:
            if r.seq != seq:
                raise CorruptError(f"sequence gap: expected record {seq}", run, r.seq)
            if prev is not None and r.prev_hash != prev:
                raise CorruptError("does not link to the previous record's hash", run, r.seq)
            prev, seq = r.hash, seq + 1
        yield records
        if len(records) < page:
            return


def all_runs(store: JournalStore, page: int = PAGE) -> Iterator[str]:
    """Every run of the tenant that has records, by run ID, ``page`` IDs per query."""
    after: str | None = None
    while True:
        runs = store.runs(after, page)
        yield from runs
        if len(runs) < page:
            return
        after = runs[-1]


def _chain_to(store: JournalStore, run: str, last: int, page: int) -> Iterator[Record]:
    """Records 1..``last`` of ``run``, page by page (records appended meanwhile are not read)."""
    seq = 1
    while seq <= last:
        records = store.read_page(run, seq, min(page, last - seq + 1))
        yield from records
        if not records:
            return
        seq = records[-1].seq + 1


def _check_chain(store: JournalStore, run: str, seq: int, page: int) -> tuple[bytes, Record]:
    """The last hash and record of ``run``'s chain, checked from 1 to ``seq`` (the head)."""
    count = 0
    final: Record | None = None

    def counted() -> Iterator[Record]:
        nonlocal count, final
        for r in _chain_to(store, run, seq, page):
            count += 1
            final = r
            yield r

    try:
        last = verify_chain(counted(), run)
    except ChainError as e:
        raise CorruptError(str(e).removeprefix(f"run {run} record {e.seq}: "), run, e.seq) from None
    if count != seq:
        raise CorruptError(f"the head is record {seq} but the chain ends at {count}", run)
    assert final is not None
    return last, final


def verify_run(store: JournalStore, run: str, checkpoint: Checkpoint, page: int = PAGE) -> RunCheck:
    """Check one run (see the module docstring) against ``checkpoint`` or a newer one.

    A run with no records is a UsageError (there is nothing to verify); a fault, CorruptError;
    an inclusion proof that does not verify, :class:`tlog.errors.ProofError`.
    """
    seal = store.sealed(run)
    head = store.head(run)
    if head.seq == 0:
        raise UsageError(f"run {run} has no records")
    last, final = _check_chain(store, run, head.seq, page)
    if last != head.hash:
        raise CorruptError("the stored head is not the chain's last hash", run)
    if seal is None:
        return RunCheck(run, head.seq, last, None, checkpoint)
    if seal.head != last:
        raise CorruptError("the seal's head is not the chain's last hash", run)
    if seal_outcome(final.body()) != seal.outcome:
        raise CorruptError(f"the last record is not the seal record naming {seal.outcome}", run)
    cp = checkpoint if seal.position < checkpoint.size else store.checkpoint()
    try:
        inc = store.inclusion_proof(run, cp.size)
    except NotSealedError:
        inc = None  # the seal read above, below cp.size, is not there: a fault (below)
    if inc is None or inc.index != seal.position or inc.head != seal.head:
        raise CorruptError(f"the seal at log position {seal.position} is not in the log", run)
    verify_inclusion(inc.index, cp.size, leaf_hash(seal.head), inc.proof, cp.root)
    return RunCheck(run, head.seq, last, seal, cp)


def verify_runs(
    store: JournalStore,
    runs: Iterable[str] = (),
    checkpoint: Checkpoint | None = None,
    page: int = PAGE,
) -> Iterator[RunCheck]:
    """Check each of ``runs`` (none given: every run, by :func:`all_runs`), in order, as
    :func:`verify_run` does; stop at the first that does not verify.

    ``checkpoint`` is the tree to prove seals in (default: the store's current one); each
    result carries the checkpoint it was proven in, which the next run starts from.
    """
    cp = store.checkpoint() if checkpoint is None else checkpoint
    names = list(runs)
    for run in names or all_runs(store, page):
        check = verify_run(store, run, cp, page)
        cp = check.checkpoint
        yield check
