"""Helpers for the journal-store conformance battery (tests/store/test_conformance.py).

* :class:`FakeClock`: a controllable store clock (whole seconds), so that lease expiry is
  reached by ``advance`` instead of by sleeping.
* :class:`StoreFactory`: initialises one database (SQLite file or PostgreSQL schema) with the
  base origin :data:`ORIGIN` and a fresh log key, then opens handles on it, one per tenant,
  all reading the same fake clock; it closes every handle it opened.
* Record builders (:func:`note`, :func:`started`, :func:`concluded`) and the two private test
  hooks every backend exposes (``_tamper_for_test``, ``_delete_run_for_test``), reached through
  a typed protocol rather than through the public contract, which does not name them.
"""

from __future__ import annotations

from typing import Any, Protocol, cast

from store.api import Append, JournalStore
from store.open import init_store, open_store
from tlog.keys import SignerKey, generate_key
from tlog.note import Ed25519Signer, Ed25519Verifier

ORIGIN = "example.com/journal"
"""The base origin every test store is initialised with; a tenant's log is ``ORIGIN/<tenant>``."""

T0 = 1_700_000_000
"""The fake clock's first reading (a realistic Unix time, far from any overflow)."""

RECORD_KEY_SEED = bytes(range(32))
"""Seed of the record-signing key used by the signature tests."""


class FakeClock:
    """A store clock that moves only when told: ``now`` whole seconds; call it to read it."""

    def __init__(self, now: int = T0) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now

    def advance(self, seconds: int) -> None:
        """Move the clock forward by ``seconds`` (>= 0)."""
        assert seconds >= 0
        self.now += seconds


class BackendLike(Protocol):
    """What the ``backend`` fixture of conftest.py gives: a SQLite path or a PostgreSQL URL."""

    @property
    def name(self) -> str: ...

    @property
    def db(self) -> str | None: ...

    @property
    def postgres(self) -> str | None: ...


class StoreFactory:
    """One initialised database and the handles opened on it (see the module docstring)."""

    def __init__(self, backend: BackendLike, clock: FakeClock) -> None:
        self.backend = backend
        self.clock = clock
        self.key: SignerKey = generate_key(ORIGIN)
        init_store(db=backend.db, postgres=backend.postgres, origin=ORIGIN, key=self.key)
        self._handles: list[JournalStore] = []

    def open(
        self,
        tenant: str = "default",
        *,
        record_signer: Ed25519Signer | None = None,
        fake_clock: bool = True,
    ) -> JournalStore:
        """A handle for ``tenant`` on this database (with the fake clock unless told not to)."""
        s = open_store(
            db=self.backend.db,
            postgres=self.backend.postgres,
            tenant=tenant,
            key=self.key,
            record_signer=record_signer,
            clock=self.clock if fake_clock else None,
        )
        self._handles.append(s)
        return s

    def log_signer(self, tenant: str = "default") -> Ed25519Signer:
        """The log key under the tenant's key name ``ORIGIN/<tenant>`` (type 0x01)."""
        return Ed25519Signer(f"{ORIGIN}/{tenant}", self.key.secret)

    def log_verifier(self, tenant: str = "default") -> Ed25519Verifier:
        """The tenant's checkpoint verifier: key name ``ORIGIN/<tenant>``, the log key, 0x01."""
        return self.log_signer(tenant).verifier()

    def close(self) -> None:
        for s in self._handles:
            s.close()
        self._handles.clear()


def record_signer() -> Ed25519Signer:
    """The Ed25519 key that signs records in the signature tests."""
    return Ed25519Signer("example.com/records", RECORD_KEY_SEED)


# --- records ---------------------------------------------------------------------------------


def note(run: str, data: Any = "hello", *, case: str | None = None) -> Append:
    """An ordinary record with data."""
    return Append(run, "Note", data=data, case=case)


def started(run: str, effect_key: str, *, case: str | None = None) -> Append:
    """An ``EffectStarted`` record: exactly once per (run, effect key)."""
    return Append(run, "EffectStarted", data={"tool": "send"}, case=case, effect_key=effect_key)


def concluded(run: str, outcome: str) -> Append:
    """A ``RunConcluded`` record: it moves the run in the outcome index."""
    return Append(run, "RunConcluded", data={"outcome": outcome})


# --- the private test hooks ------------------------------------------------------------------


class _TestHooks(Protocol):
    def _tamper_for_test(self, run: str, seq: int, raw: bytes) -> None: ...

    def _delete_run_for_test(self, run: str) -> None: ...


def tamper(store: JournalStore, run: str, seq: int, raw: bytes) -> None:
    """Overwrite the stored body of record ``seq`` with ``raw``, leaving its hash alone."""
    cast(_TestHooks, store)._tamper_for_test(run, seq, raw)


def delete_run(store: JournalStore, run: str) -> None:
    """Remove a run's records and seal row; its log position and leaf stay (never reused)."""
    cast(_TestHooks, store)._delete_run_for_test(run)
