"""Shared helpers of the witness's fault, race and hostile-input tests.

* :class:`ForkLog` — a test log: an Ed25519 log key (type 0x01) and a Merkle tree kept as
  stored hashes (:class:`tlog.merkle.MemoryHashStore`), so any root, consistency proof or
  subtree proof is at hand. :meth:`ForkLog.forks` makes two logs that share a key, an origin
  and their first leaves and then diverge: a log that signs checkpoints along two conflicting
  forks (a split view, as a witness must never cosign both of).
* Request builders: add-checkpoint bodies (:meth:`ForkLog.request`) and sign-subtree bodies
  (:meth:`ForkLog.subtree_request`, with the draft-03 subtree consistency proof from
  :func:`subtree_proof`).
* The witness's keys (:func:`witness_signers`, fixed seeds, so the test process can verify what
  a server process returns) and :func:`check_cosignatures` for a 200 body.
* :class:`WitnessProcess` — one ``tests/witness/proc.py`` server process: started, waited for
  until it listens, killed with SIGKILL.
* :func:`configure_state` — create a witness state and configure logs in it.

Leaves are synthetic leaf hashes, ``SHA-256("<tag>/<index>")``: a fork's tag makes its leaves
differ from the other fork's.
"""

from __future__ import annotations

import hashlib
import json
import os
import select
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import IO

from tlog.checkpoint import Checkpoint
from tlog.cosignature import (
    CosignatureV1Signer,
    CosignatureV1Verifier,
    SubtreeV1Signer,
    SubtreeV1Verifier,
    timestamp_of,
)
from tlog.keys import format_vkey
from tlog.merkle import MemoryHashStore, consistency_proof, root
from tlog.note import Ed25519Signer, Ed25519Verifier, Signature, sign_note
from tlog.witnessproto import AddCheckpointRequest, SignSubtreeRequest, parse_cosignature_response
from witness.open import open_state

ROOT = Path(__file__).resolve().parents[2]
PROC_SCRIPT = Path(__file__).resolve().parent / "proc.py"

WITNESS = "witness.example/faults"
"""The witness's key name (the default of tests/witness/proc.py)."""

ED_SEED = hashlib.sha256(b"fault-test witness ed25519").digest()
ML_SEED = hashlib.sha256(b"fault-test witness ml-dsa-44").digest()
LOG_SEED = b"fault-test log key"


def leaf(tag: str, i: int) -> bytes:
    """The synthetic leaf hash number ``i`` of the leaves tagged ``tag``."""
    return hashlib.sha256(f"{tag}/{i}".encode()).digest()


# --- logs ----------------------------------------------------------------------------------


class ForkLog:
    """A test log: an Ed25519 log key named ``key_name`` (default: the origin) derived from
    ``seed``, and a Merkle tree of leaf hashes kept as stored hashes."""

    def __init__(
        self,
        origin: str,
        *,
        seed: bytes = LOG_SEED,
        key_name: str | None = None,
        leaves: Sequence[bytes] = (),
    ) -> None:
        self.origin = origin
        self.signer = Ed25519Signer(key_name or origin, hashlib.sha256(seed).digest())
        self.verifier: Ed25519Verifier = self.signer.verifier()
        self.vkey = format_vkey(self.verifier)
        self.leaves: list[bytes] = []
        self.tree = MemoryHashStore()
        self.extend(leaves)

    @classmethod
    def forks(
        cls, origin: str, base: int, extra: int, *, seed: bytes = LOG_SEED
    ) -> tuple[ForkLog, ForkLog]:
        """Two logs with one key and origin, the same first ``base`` leaves, then ``extra``
        leaves each that differ: every checkpoint of size > ``base`` on one fork conflicts
        with every checkpoint of size > ``base`` on the other."""
        shared = [leaf(f"{origin}/shared", i) for i in range(base)]
        a = cls(origin, seed=seed, leaves=shared).grow(extra, "fork-a")
        b = cls(origin, seed=seed, leaves=shared).grow(extra, "fork-b")
        return a, b

    @property
    def size(self) -> int:
        return self.tree.size

    def extend(self, leaves: Sequence[bytes]) -> ForkLog:
        self.leaves += leaves
        self.tree.extend(leaves)
        return self

    def grow(self, n: int, tag: str = "main") -> ForkLog:
        """Append ``n`` leaves tagged ``tag`` (their indexes continue the log's)."""
        return self.extend([leaf(f"{self.origin}/{tag}", self.size + i) for i in range(n)])

    def root(self, size: int | None = None) -> bytes:
        return self.tree.root(size)

    def text(self, size: int, extensions: tuple[str, ...] = ()) -> bytes:
        """The checkpoint text of the tree of ``size``. Requires: 0 <= size <= self.size."""
        return Checkpoint(self.origin, size, self.tree.root(size), extensions).format()

    def note(
        self, size: int, extensions: tuple[str, ...] = (), extra: Sequence[Signature] = ()
    ) -> bytes:
        """The checkpoint of ``size`` signed by the log key, plus the ``extra`` lines."""
        return sign_note(self.text(size, extensions), [self.signer], extra)

    def proof(self, old: int, size: int) -> list[bytes]:
        """The consistency proof a client sends from ``old`` (none from 0)."""
        return [] if old == 0 else consistency_proof(old, size, self.tree)

    def request(
        self, old: int, size: int, proof: Sequence[bytes] | None = None, note: bytes | None = None
    ) -> bytes:
        """An add-checkpoint body from ``old`` to the checkpoint of ``size`` (a correct proof
        and a fresh note unless given)."""
        return AddCheckpointRequest(
            old,
            tuple(self.proof(old, size) if proof is None else proof),
            self.note(size) if note is None else note,
        ).format()

    def subtree_request(self, start: int, end: int, size: int, reference: bytes) -> bytes:
        """A correct sign-subtree body for ``[start, end)`` against ``reference``, a note of
        this log's checkpoint of ``size`` (it must carry the witness's cosignature).
        Requires: a valid subtree with end <= size <= self.size."""
        hashes = self.leaves[:size]
        return SignSubtreeRequest(
            start, end, root(hashes[start:end]), tuple(subtree_proof(start, end, hashes)), reference
        ).format()


def subtree_proof(start: int, end: int, leaves: Sequence[bytes]) -> list[bytes]:
    """The subtree consistency proof of ``[start, end)`` in the tree of ``leaves``:
    SUBTREE_PROOF of draft-ietf-plants-merkle-tree-certs-03 §4.4.1, from its definition."""
    return _subtree_subproof(start, end, leaves, True)


def _subtree_subproof(start: int, end: int, leaves: Sequence[bytes], known: bool) -> list[bytes]:
    n = len(leaves)
    if start == 0 and end == n:
        return [] if known else [root(leaves)]
    k = 1 << ((n - 1).bit_length() - 1)  # the largest power of two smaller than n
    if end <= k:
        return [*_subtree_subproof(start, end, leaves[:k], known), root(leaves[k:])]
    if k <= start:
        return [*_subtree_subproof(start - k, end - k, leaves[k:], known), root(leaves[:k])]
    return [*_subtree_subproof(0, end - k, leaves[k:], False), root(leaves[:k])]


# --- the witness's keys --------------------------------------------------------------------


def witness_signers(mldsa: bool = False) -> list[CosignatureV1Signer | SubtreeV1Signer]:
    """The witness's cosignature keys as tests/witness/proc.py builds them from the seeds."""
    ed = CosignatureV1Signer(WITNESS, ED_SEED)
    return [ed, SubtreeV1Signer(WITNESS, ML_SEED)] if mldsa else [ed]


def witness_verifiers(mldsa: bool = False) -> list[CosignatureV1Verifier | SubtreeV1Verifier]:
    out: list[CosignatureV1Verifier | SubtreeV1Verifier] = []
    for s in witness_signers(mldsa):
        if isinstance(s, CosignatureV1Signer):
            out.append(CosignatureV1Verifier(WITNESS, s.public_key))
        else:
            out.append(SubtreeV1Verifier(WITNESS, s.public_key))
    return out


def check_cosignatures(body: bytes, text: bytes, mldsa: bool = False) -> list[Signature]:
    """A 200 body of add-checkpoint: exactly one line per witness key, each a valid
    cosignature of ``text`` with a non-zero timestamp. Raises AssertionError otherwise."""
    sigs = parse_cosignature_response(body)
    verifiers = {(v.name, v.key_id): v for v in witness_verifiers(mldsa)}
    assert sorted((s.name, s.key_id) for s in sigs) == sorted(verifiers), body
    for sig in sigs:
        assert verifiers[(sig.name, sig.key_id)].verify(text, sig.sig), (text, sig)
        assert timestamp_of(sig) > 0, sig
    return sigs


# --- the witness state and server processes ------------------------------------------------


def configure_state(
    *, db: str | None = None, postgres: str | None = None, logs: Sequence[ForkLog] = ()
) -> None:
    """Create the witness state (SQLite file ``db`` or PostgreSQL ``postgres``) if needed and
    configure each log with its key. Requires: no log's origin is configured yet."""
    state = open_state(db=db, postgres=postgres)
    try:
        for log in logs:
            state.add_log(log.origin, (log.vkey,))
    finally:
        state.close()


class WitnessProcess:
    """One ``tests/witness/proc.py`` server process on an existing state.

    The constructor starts it and returns once it listens (:attr:`address`, e.g.
    ``http://127.0.0.1:40123``); its stderr goes to ``stderr_path``. Use as a context manager,
    or call :meth:`kill`.
    """

    def __init__(
        self,
        *,
        db: str | None = None,
        postgres: str | None = None,
        stderr_path: Path,
        log_path: Path | None = None,
        mldsa: bool = False,
        read_timeout: float | None = None,
        ready_timeout: float = 30.0,
    ) -> None:
        args = [sys.executable, str(PROC_SCRIPT), "--ed-seed", ED_SEED.hex(), "--name", WITNESS]
        args += ["--db", db] if db is not None else ["--postgres", str(postgres)]
        if mldsa:
            args += ["--ml-seed", ML_SEED.hex()]
        if log_path is not None:
            args += ["--log", str(log_path)]
        if read_timeout is not None:
            args += ["--read-timeout", str(read_timeout)]
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
        self.stderr_path = stderr_path
        with open(stderr_path, "ab") as err:
            self.proc = subprocess.Popen(
                args,
                stdout=subprocess.PIPE,
                stderr=err,
                stdin=subprocess.DEVNULL,
                cwd=ROOT,
                env=env,
            )
        try:
            self.address = self._ready(ready_timeout)
        except BaseException:
            self.kill()
            raise

    def _ready(self, timeout: float) -> str:
        out: IO[bytes] | None = self.proc.stdout
        assert out is not None
        readable, _, _ = select.select([out], [], [], timeout)
        line = out.readline() if readable else b""
        if not line.endswith(b"\n"):
            self.kill()
            raise AssertionError(
                f"witness process did not start (status {self.proc.returncode}):\n{self.stderr()}"
            )
        address = json.loads(line)["address"]
        assert isinstance(address, str)
        return address

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stderr(self) -> str:
        return self.stderr_path.read_text(encoding="utf-8", errors="replace")[-3000:]

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> int:
        """SIGKILL the process (if it still runs), wait for it; return its exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        status = self.proc.wait(30)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        return status

    def __enter__(self) -> WitnessProcess:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.kill()
