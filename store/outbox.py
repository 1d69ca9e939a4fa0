"""The journal as an outbox: subscriptions, delivery cursors, and the claims of the workers
that push records to receivers (:mod:`store.deliver` pushes them; ``tlog-store deliver``).

A *subscription* (table ``subscription``) names a receiver — an ``http``/``https`` URL and an
optional bearer token — and a scope: one run, or (``run`` NULL) every run of the tenant. Its
*deliveries* (table ``delivery``) are one row per (subscription, run) the scope covers and that
has records: the *cursor* ``next_seq`` is the first record of the run the receiver has not
acknowledged. The cursor advances only after the receiver answered 2xx for every record before
it, so a worker that dies between the receiver's answer and the cursor's update makes the
receiver see those records again — a duplicate, never a lost record. Records of one run reach a
receiver in seq order: one worker at a time holds a run's delivery, and it sends from the cursor.

Due deliveries are found through the index ``delivery_due`` (tenant, next_attempt_at), partial
on ``next_attempt_at IS NOT NULL``: a delivery that has caught up with its run has no next
attempt (NULL) and is not in the index at all. The rows move as follows, each step in one
transaction:

* an ``append`` or a ``seal`` of a run, in its own transaction (:func:`mark_due`), makes every
  delivery of a subscription covering the run due now — creating it (cursor 1) when missing —
  unless it is due already, waiting for a retry (its backoff stands) or claimed;
* ``subscribe`` creates the deliveries of the runs that have records already (cursor 1: a new
  receiver gets every record of its scope, from the first);
* a worker *claims* due deliveries (:meth:`JournalOutbox.claim_deliveries`): ``claim`` gets a
  fresh random token and ``next_attempt_at`` the end of the claim (now + its TTL), so that no
  other worker finds the row due while the claim lasts — several workers (PostgreSQL) pass
  over the rows another one is claiming (``FOR UPDATE SKIP LOCKED``) and never hold one run's
  delivery at once. A worker that dies leaves the claim to expire: the row is due again at its
  end, and the next worker sends from the cursor;
* the worker acknowledges (:meth:`JournalOutbox.acknowledge`) — only while its token is the
  row's: the cursor moves past what the receiver took, ``attempts`` and ``last_error`` are
  cleared, and the row is due now if the run has more records, idle (NULL) otherwise, or
  deleted when the run is sealed and the receiver has its seal record (nothing can follow);
* or records a failure (:meth:`JournalOutbox.delivery_failed`): ``attempts`` + 1, the error's
  first line (at most :data:`MAX_ERROR` characters), and the next attempt after an exponential
  backoff: ``min(cap, base * 2^(attempts before))`` seconds.

Times are the store clock's (the injected clock, PostgreSQL's server clock, or the process
clock on SQLite), whole seconds. Appends and subscription changes meet at a per-tenant gate
(:meth:`store.db.engine.Dialect.xact_lock`; PostgreSQL advisory locks): every append holds it
shared from :func:`mark_due` to its commit, ``subscribe`` and ``unsubscribe`` exclusively, so
that an append either sees a new subscription or is seen by its ``subscribe`` — a run written
while a receiver subscribes is never left without a delivery — and ``unsubscribe`` leaves no
delivery behind. Subscriptions are operational state, not the journal's: an export carries none.

A subscription's ID is a per-tenant ordinal (the ``counter`` named ``subscription``), never
reused. Its URL is at most 2048 characters, ``http`` or ``https`` with a host, no user
information (it would be printed by ``tlog-store subscriptions``) and no fragment; the token is
an RFC 6750 bearer token (``[A-Za-z0-9._~+/-]+=*``, at most 4096 characters), stored as given
and sent as ``Authorization: Bearer TOKEN``; listings say whether there is one, never what it is.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from store.db import Tx, check_int
from store.schema import next_counter, stored_int, stored_run, stored_text
from store.sqlcore import SQLCore
from tlog.errors import UsageError
from tlog.journal import check_run_id

SUBSCRIPTION_COUNTER = "subscription"
"""Name of the per-tenant counter that numbers subscriptions."""

MAX_URL = 2048
MAX_TOKEN = 4096
MAX_ERROR = 500
"""Characters of a failure kept in ``last_error`` (its first line)."""

_TOKEN = re.compile(r"[A-Za-z0-9._~+/-]+=*")
_GATE = "outbox"


@dataclass(frozen=True)
class Subscription:
    """A receiver of a tenant's records: ``run`` None is the whole tenant. ``token`` (the bearer
    token, or None) is left out of the repr."""

    id: int
    url: str
    run: str | None
    created_at: int
    token: str | None = field(default=None, repr=False)


@dataclass(frozen=True)
class Delivery:
    """A delivery cursor: the first record of ``run`` that subscription ``subscription`` has not
    acknowledged, the failed attempts since the last success, when the next attempt is due
    (None: caught up) and the last failure."""

    subscription: int
    run: str
    next_seq: int
    attempts: int
    next_attempt_at: int | None
    last_error: str | None
    claimed: bool


@dataclass(frozen=True)
class Claim:
    """A delivery a worker holds until ``expires_at`` (store clock): send ``run``'s records from
    ``next_seq`` to ``url``, then :meth:`JournalOutbox.acknowledge` or
    :meth:`JournalOutbox.delivery_failed` with this claim."""

    subscription: int
    url: str
    token: str | None = field(repr=False)
    run: str
    next_seq: int
    attempts: int
    expires_at: int
    claim: str = field(repr=False)


def check_url(url: object) -> str:
    """A receiver URL as the module docstring requires (UsageError otherwise)."""
    if not isinstance(url, str) or not url or len(url) > MAX_URL:
        raise UsageError(f"a receiver URL is a string of 1-{MAX_URL} characters")
    if not url.isascii() or any(c <= " " or c == "\x7f" for c in url):
        raise UsageError("a receiver URL holds no spaces, control or non-ASCII characters")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a bad port
    except ValueError as e:
        raise UsageError(f"receiver URL {url!r} does not parse: {e}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"receiver URL {url!r} is not http:// or https:// with a host")
    if parts.username is not None or parts.password is not None:
        raise UsageError("a receiver URL carries no user or password: use a token")
    if parts.fragment or url.endswith("#"):
        raise UsageError(f"receiver URL {url!r} has a fragment")
    return url


def check_token(token: object) -> str:
    """A bearer token (RFC 6750 ``b64token``), at most :data:`MAX_TOKEN` characters."""
    if not isinstance(token, str) or len(token) > MAX_TOKEN or not _TOKEN.fullmatch(token):
        raise UsageError(
            f"a bearer token is 1-{MAX_TOKEN} of [A-Za-z0-9._~+/-], then any '=' padding"
        )
    return token


def mark_due(tx: Tx, tenant: str, run: str, now: int) -> None:
    """Inside an append's or a seal's transaction: every delivery of a subscription covering
    ``run`` is due at ``now`` unless it has a next attempt already (created at cursor 1 when
    missing). Holds the tenant's outbox gate shared until the commit (module docstring)."""
    tx.dialect.xact_lock(tx, f"{_GATE} {tenant}", shared=True)
    tx.execute(
        "INSERT INTO delivery (tenant, subscription, run, next_seq, attempts, next_attempt_at)"
        " SELECT tenant, id, ?, 1, 0, ? FROM subscription"
        " WHERE tenant = ? AND (run IS NULL OR run = ?)"
        " ON CONFLICT (tenant, subscription, run) DO UPDATE"
        " SET next_attempt_at = COALESCE(delivery.next_attempt_at, excluded.next_attempt_at)",
        (run, now, tenant, run),
    )


def _one_line(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else "failed"
    line = "".join(c if " " <= c != "\x7f" else "?" for c in line)
    return line[:MAX_ERROR]


class JournalOutbox(SQLCore):
    """The outbox of :class:`store.sql.SQLStore` (see the module docstring)."""

    # --- subscriptions -------------------------------------------------------------------------

    def subscribe(self, url: str, *, run: str | None = None, token: str | None = None) -> int:
        """Subscribe the receiver at ``url`` (with bearer ``token``) to ``run``'s records, or to
        every run's (``run`` None); return the new subscription's ID. Every record of the scope
        is delivered, those written before too."""
        check_url(url)
        if run is not None:
            check_run_id(run)
        if token is not None:
            check_token(token)
        tenant = self._tenant

        def work(tx: Tx) -> int:
            tx.dialect.xact_lock(tx, f"{_GATE} {tenant}", shared=False)
            now = self._now(tx)
            sub = next_counter(tx, tenant, SUBSCRIPTION_COUNTER, "subscription counter")
            tx.execute(
                "INSERT INTO subscription (tenant, id, url, token, run, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (tenant, sub, url, token, run, now),
            )
            # The runs that have records: after the gate, this statement sees every append
            # that did not see the subscription.
            scope, params = ("", ()) if run is None else (" AND run = ?", (run,))
            tx.execute(
                "INSERT INTO delivery (tenant, subscription, run, next_seq, attempts,"  # noqa: S608 - fixed SQL fragments
                " next_attempt_at) SELECT tenant, ?, run, 1, 0, ? FROM run_activity"
                " WHERE tenant = ?" + scope,
                (sub, now, tenant, *params),
            )
            return sub

        return self._write(work)

    def subscriptions(self) -> list[Subscription]:
        """The tenant's subscriptions, by ID."""
        rows = self._read(
            lambda tx: tx.all(
                "SELECT id, url, token, run, created_at FROM subscription WHERE tenant = ?"
                " ORDER BY id",
                (self._tenant,),
            )
        )
        return [
            Subscription(
                stored_int(i, "subscription ID", lo=1),
                stored_text(url, "receiver URL"),
                None if r is None else stored_run(r),
                stored_int(created, "subscription time"),
                None if token is None else stored_text(token, "token"),
            )
            for i, url, token, r, created in rows
        ]

    def unsubscribe(self, subscription: int) -> bool:
        """Delete a subscription and its deliveries; True if it existed. A worker delivering
        for it meanwhile finds its claim gone: it acknowledges nothing."""
        check_int(subscription, "subscription ID", 1)
        tenant = self._tenant

        def work(tx: Tx) -> bool:
            tx.dialect.xact_lock(tx, f"{_GATE} {tenant}", shared=False)
            tx.execute(
                "DELETE FROM delivery WHERE tenant = ? AND subscription = ?", (tenant, subscription)
            )
            return (
                tx.execute(
                    "DELETE FROM subscription WHERE tenant = ? AND id = ?", (tenant, subscription)
                )
                == 1
            )

        return self._write(work)

    def deliveries(self, subscription: int | None = None, limit: int = 1000) -> list[Delivery]:
        """Delivery cursors (of one subscription, or all), by subscription and run."""
        check_int(limit, "limit", 1)
        if subscription is not None:
            check_int(subscription, "subscription ID", 1)
        scope, params = (
            ("", ()) if subscription is None else (" AND subscription = ?", (subscription,))
        )
        rows = self._read(
            lambda tx: tx.all(
                "SELECT subscription, run, next_seq, attempts, next_attempt_at, last_error, claim"  # noqa: S608 - fixed SQL fragments
                " FROM delivery WHERE tenant = ?" + scope + " ORDER BY subscription, run LIMIT ?",
                (self._tenant, *params, limit),
            )
        )
        return [self._delivery(r) for r in rows]

    @staticmethod
    def _delivery(row: tuple[Any, ...]) -> Delivery:
        sub, run, next_seq, attempts, due, error, claim = row
        r = stored_run(run)
        return Delivery(
            stored_int(sub, "subscription ID", r, 1),
            r,
            stored_int(next_seq, "delivery cursor", r, 1),
            stored_int(attempts, "delivery attempts", r),
            None if due is None else stored_int(due, "next attempt", r),
            None if error is None else stored_text(error, "delivery error", r),
            claim is not None,
        )

    # --- the workers' side ---------------------------------------------------------------------

    def claim_deliveries(self, limit: int, ttl: int) -> list[Claim]:
        """Claim at most ``limit`` due deliveries (soonest due first) for ``ttl`` whole seconds;
        rows another worker is claiming at this moment are passed over."""
        check_int(limit, "limit", 1)
        check_int(ttl, "claim TTL (whole seconds)", 1)
        tenant = self._tenant

        def work(tx: Tx) -> list[Claim]:
            now = self._now(tx)
            rows = tx.all(
                "SELECT subscription, run, next_seq, attempts FROM delivery"  # noqa: S608 - fixed SQL fragments
                " WHERE tenant = ? AND next_attempt_at IS NOT NULL AND next_attempt_at <= ?"
                " ORDER BY next_attempt_at LIMIT ?" + tx.dialect.skip_locked,
                (tenant, now, limit),
            )
            if not rows:
                return []
            subs = {
                stored_int(i, "subscription ID", lo=1): (stored_text(u, "receiver URL"), t)
                for i, u, t in tx.all(
                    "SELECT id, url, token FROM subscription WHERE tenant = ?", (tenant,)
                )
            }
            out = []
            for sub_v, run_v, seq_v, attempts_v in rows:
                run = stored_run(run_v)
                sub = stored_int(sub_v, "subscription ID", run, 1)
                if sub not in subs:  # not left by unsubscribe (the gate); never claimable
                    tx.execute(
                        "DELETE FROM delivery WHERE tenant = ? AND subscription = ?", (tenant, sub)
                    )
                    continue
                url, token = subs[sub]
                claim = secrets.token_hex(16)
                tx.execute(
                    "UPDATE delivery SET next_attempt_at = ?, claim = ?"
                    " WHERE tenant = ? AND subscription = ? AND run = ?",
                    (now + ttl, claim, tenant, sub, run),
                )
                out.append(
                    Claim(
                        sub,
                        url,
                        None if token is None else stored_text(token, "token"),
                        run,
                        stored_int(seq_v, "delivery cursor", run, 1),
                        stored_int(attempts_v, "delivery attempts", run),
                        now + ttl,
                        claim,
                    )
                )
            return out

        return self._write(work)

    def _held(self, tx: Tx, claim: Claim) -> bool:
        row = tx.one(
            "SELECT claim FROM delivery WHERE tenant = ? AND subscription = ? AND run = ?"  # noqa: S608 - fixed SQL fragments
            + tx.dialect.lock_suffix,
            (self._tenant, claim.subscription, claim.run),
        )
        return row is not None and row[0] == claim.claim

    def acknowledge(self, claim: Claim, next_seq: int) -> bool:
        """The receiver took ``claim.run``'s records before ``next_seq``: move the cursor there
        and end the claim (module docstring). False, changing nothing, when the claim is no
        longer held (it expired and another worker took the row, or the subscription went)."""
        check_int(next_seq, "next seq", claim.next_seq)
        tenant, run = self._tenant, claim.run

        def work(tx: Tx) -> bool:
            if not self._held(tx, claim):
                return False
            now = self._now(tx)
            head = tx.one(
                "SELECT seq FROM journal WHERE tenant = ? AND run = ? ORDER BY seq DESC LIMIT 1",
                (tenant, run),
            )
            last = 0 if head is None else stored_int(head[0], "record seq", run, 1)
            key = (tenant, claim.subscription, run)
            if next_seq > last and tx.one(
                "SELECT 1 FROM run_seal WHERE tenant = ? AND run = ?", (tenant, run)
            ):
                # Sealed and delivered through the seal record: nothing can follow.
                tx.execute(
                    "DELETE FROM delivery WHERE tenant = ? AND subscription = ? AND run = ?", key
                )
                return True
            tx.execute(
                "UPDATE delivery SET next_seq = ?, attempts = 0, last_error = NULL, claim = NULL,"
                " next_attempt_at = ? WHERE tenant = ? AND subscription = ? AND run = ?",
                (next_seq, now if last >= next_seq else None, *key),
            )
            return True

        return self._write(work)

    def delivery_failed(self, claim: Claim, error: str, *, base: int = 1, cap: int = 300) -> bool:
        """The receiver did not take the records: count the attempt, keep ``error``'s first
        line, end the claim and make the delivery due again after ``min(cap, base *
        2^claim.attempts)`` seconds. False, changing nothing, when the claim is not held."""
        check_int(base, "backoff base (whole seconds)", 1)
        check_int(cap, "backoff cap (whole seconds)", base)
        delay = min(cap, base << min(claim.attempts, 62))

        def work(tx: Tx) -> bool:
            if not self._held(tx, claim):
                return False
            now = self._now(tx)
            tx.execute(
                "UPDATE delivery SET attempts = attempts + 1, last_error = ?, claim = NULL,"
                " next_attempt_at = ? WHERE tenant = ? AND subscription = ? AND run = ?",
                (_one_line(error), now + delay, self._tenant, claim.subscription, claim.run),
            )
            return True

        return self._write(work)


__all__ = [
    "MAX_ERROR",
    "SUBSCRIPTION_COUNTER",
    "Claim",
    "Delivery",
    "JournalOutbox",
    "Subscription",
    "check_token",
    "check_url",
    "mark_due",
]
