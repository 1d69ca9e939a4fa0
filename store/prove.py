"""Proving a sealed run: the C2SP tlog-proof@v1 file an auditor checks offline.

The proof (:class:`tlog.proof.TlogProof`) holds:

* ``index`` — the run's position in the tenant's log;
* ``extra`` — the run's head, 32 bytes: the hash of its last record, its seal record;
* ``hashes`` — the RFC 6962 inclusion proof of that position in the checkpoint's tree;
* ``checkpoint`` — the newest kept checkpoint that covers the position (with every cosignature
  it has gathered), or, when none does, a checkpoint signed now.

It is self-contained: the leaf is SHA-256(0x00 || head), with head taken from the extra line,
and the inclusion proof authenticates that head under the log's signed checkpoint. An auditor
verifies it with the tenant log's vkey (:func:`tlog.proof.verify_proof` with the leaf
:func:`tlog.merkle.leaf_hash` of ``extra``); whoever holds the run's records recomputes their
chain hash and compares it with ``extra``.
"""

from __future__ import annotations

from collections.abc import Callable

from store.api import JournalStore
from store.errors import CorruptError, NotSealedError
from tlog.checkpoint import Checkpoint
from tlog.merkle import leaf_hash, verify_inclusion
from tlog.note import parse_note
from tlog.proof import TlogProof

__all__ = ["NotSealedError", "prove_run"]


def _proof_checkpoint(store: JournalStore, position: int, sign: Callable[[], bytes]) -> bytes:
    """The newest kept checkpoint covering ``position``, else a newly signed one."""
    kept = store.published()
    if kept:
        text, _ = parse_note(kept[-1])
        if Checkpoint.parse(text).size > position:
            return kept[-1]
    return sign()


def prove_run(
    store: JournalStore, run: str, *, sign: Callable[[], bytes] | None = None
) -> TlogProof:
    """The tlog-proof of sealed ``run`` (see the module docstring), checked before it is given.

    ``sign`` signs and keeps the current checkpoint when no kept one covers the run (default:
    ``store.sign_checkpoint``, which needs the log key on the handle); it is called only then.
    Raises :class:`~store.errors.NotSealedError` (re-exported here) when ``run`` is not sealed
    (its ``reason``: ``"unknown"`` for a run without records, ``"unsealed"``), CorruptError when
    its records no longer give the sealed head or its seal is not in the log.
    """
    seal = store.sealed(run)
    if seal is None:
        raise NotSealedError(run, "unsealed" if store.head(run).seq else "unknown")
    # The proof vouches for the head: check first that the run's records still give it.
    if store.verify(run) != seal.head:
        raise CorruptError("the seal's head is not the chain's last hash", run)
    note = _proof_checkpoint(store, seal.position, store.sign_checkpoint if sign is None else sign)
    cp = Checkpoint.parse(parse_note(note)[0])
    try:
        inc = store.inclusion_proof(run, cp.size)
    except NotSealedError:
        inc = None  # the seal read above, below cp.size, is not there: a fault (below)
    if inc is None or inc.index != seal.position or inc.head != seal.head:
        raise CorruptError(f"the seal at log position {seal.position} is not in the log", run)
    # Never hand out a proof that does not verify against its own checkpoint.
    verify_inclusion(inc.index, cp.size, leaf_hash(seal.head), inc.proof, cp.root)
    return TlogProof(inc.index, inc.proof, note, seal.head)
