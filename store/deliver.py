"""Pushing a tenant's records to its subscribed receivers (``tlog-store deliver``).

The outbox's rows and rules are :mod:`store.outbox`'s; this module is the worker: it claims one
due delivery at a time, reads the run's records from the delivery's cursor (at most ``batch``),
POSTs them to the receiver, and acknowledges them on a 2xx answer or records the failure (the
status, or the error, and a retry after the backoff). Redirects are not followed (a 3xx is a
failure). Several workers may run against one PostgreSQL store; on SQLite, whose writes are
serialised, one is enough (more are safe, and add nothing). A worker killed at any point loses
nothing: its claim expires (:func:`claim_ttl`) and the next worker sends again from the cursor —
the receiver may then see
records it had already taken (at least once; a receiver deduplicates by ``(run, seq)``, or by
``hash``).

The request: ``POST URL`` with ``Content-Type: application/json``, ``User-Agent:
tlog-store-deliver``, ``Authorization: Bearer TOKEN`` when the subscription has a token, and
the body (UTF-8 JSON)::

    {
      "subscription": 3,                 the subscription's ID
      "tenant": "default",
      "run": "order-1842",
      "records": [                       1 to batch records of the run, consecutive, by seq
        {
          "seq": 1,
          "hash": "<base64>",            the record's chain hash (tlog.journal)
          "prev_hash": "<base64>",       the previous record's hash (32 zero bytes for seq 1)
          "raw": "<the body>",           the record's canonical JSON body, as a string: exactly
                                         the bytes hashed (verify with tlog.journal.chain_hash)
          "signature": {                 only when the record is signed
            "name": "<key name>", "key_id": "<8 hex digits>", "sig": "<base64>"
          },
          "kind": "RunStarted"           the body's kind, for routing without parsing raw
        }
      ]
    }

Each record's object is what ``tlog-store read --json`` prints for it (:func:`record_object`),
plus ``kind``. The records of one run arrive in seq order: a request starts at the first record
the receiver has not acknowledged, so after a failure or a crash the same records come again,
never a later one first. A run's last delivered record may be its seal record (kind
``RunSealed``): nothing follows it.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from store.api import JournalStore
from store.db import check_int
from store.outbox import Claim, JournalOutbox
from tlog.encoding import b64encode
from tlog.errors import UsageError
from tlog.journal import Record

DEFAULT_BATCH = 100
"""Records per request."""

DEFAULT_TIMEOUT = 10
"""Seconds a request may take to connect, and then between the receiver's bytes."""

BACKOFF_BASE = 1
BACKOFF_CAP = 300
"""The retry delay after the n-th failure in a row: min(cap, base * 2^(n-1)) seconds."""

USER_AGENT = "tlog-store-deliver"


def claim_ttl(timeout: int) -> int:
    """How long a worker holds a claim: the request's connect and read timeouts, and a margin
    for the read and the acknowledgement. A receiver that takes longer than that to answer
    (trickling bytes within the read timeout) may see a second worker's request for the same
    records meanwhile."""
    return 2 * timeout + 10


def outbox_of(store: JournalStore) -> JournalOutbox:
    """The store's outbox (every SQL store has one); UsageError for a store without."""
    if not isinstance(store, JournalOutbox):
        raise UsageError(f"a {type(store).__name__} keeps no outbox")
    return store


def record_object(r: Record) -> dict[str, Any]:
    """A record as JSON: seq, hash, prev_hash, raw (the body as a string) and signature when
    the record is signed (name, key_id as 8 hex digits, sig), bytes in base64."""
    obj: dict[str, Any] = {
        "seq": r.seq,
        "hash": b64encode(r.hash),
        "prev_hash": b64encode(r.prev_hash),
        "raw": r.raw.decode("utf-8"),
    }
    if r.signature is not None:
        obj["signature"] = {
            "name": r.signature.name,
            "key_id": f"{r.signature.key_id:08x}",
            "sig": b64encode(r.signature.sig),
        }
    return obj


def push_body(tenant: str, subscription: int, run: str, records: list[Record]) -> bytes:
    """The request body of the module docstring."""
    body = {
        "subscription": subscription,
        "tenant": tenant,
        "run": run,
        "records": [{**record_object(r), "kind": r.body().kind} for r in records],
    }
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def _reason(e: Exception) -> str:
    # requests wraps urllib3's error, which wraps the socket's: the innermost reason is the
    # one that says what happened ("[Errno 111] Connection refused"), without the pool's repr.
    inner: BaseException = e
    while True:
        nxt = getattr(inner.args[0], "reason", None) if inner.args else None
        if nxt is None and inner.args and isinstance(inner.args[0], BaseException):
            nxt = inner.args[0]
        if not isinstance(nxt, BaseException) or nxt is inner:
            break
        inner = nxt
    text = str(inner)
    head, sep, tail = text.partition("): ")  # "HTTPConnection(host=…, port=…): Failed to …"
    return tail if sep and "(host=" in head else text


@dataclass(frozen=True)
class Attempt:
    """One request: its delivery, the records it carried (``first``..``last``; none when the
    cursor had caught up), and how it went (``error`` None: the receiver took them)."""

    subscription: int
    run: str
    first: int
    last: int
    error: str | None = None
    attempts: int = 0
    """Failed attempts in a row, this one included (0 after a success)."""
    acknowledged: bool = True
    """False when the claim had expired before the answer was recorded: nothing was."""

    def summary(self) -> str:
        span = f"{self.subscription} {self.run} {self.first}-{self.last}"
        if self.last < self.first:
            return f"caught up {self.subscription} {self.run} at {self.first}"
        if self.error is None:
            return f"delivered {span}" + ("" if self.acknowledged else " (claim lost)")
        return f"failed {span}: {self.error} (attempt {self.attempts})"


class Deliverer:
    """A delivery worker for one store handle (a tenant): :meth:`step` delivers one claim,
    :meth:`run` loops. Needs the ``store`` extra (requests)."""

    def __init__(
        self,
        store: JournalStore,
        *,
        batch: int = DEFAULT_BATCH,
        timeout: int = DEFAULT_TIMEOUT,
        backoff: tuple[int, int] = (BACKOFF_BASE, BACKOFF_CAP),
    ) -> None:
        check_int(batch, "batch (records per request)", 1)
        check_int(timeout, "timeout (whole seconds)", 1)
        base, cap = backoff
        check_int(base, "backoff base (whole seconds)", 1)
        check_int(cap, "backoff cap (whole seconds)", base)
        import requests  # noqa: PLC0415 - the store extra, loaded when delivering

        self._outbox = outbox_of(store)
        self._tenant = store.tenant
        self._batch = batch
        self._timeout = timeout
        self._backoff = backoff
        self._requests = requests
        self._http = requests.Session()
        self._http.trust_env = False  # no proxy from the environment for a receiver URL

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Deliverer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def step(self) -> Attempt | None:
        """Claim one due delivery and deliver it; None when nothing is due."""
        claims = self._outbox.claim_deliveries(1, claim_ttl(self._timeout))
        if not claims:
            return None
        return self._deliver(claims[0])

    def _deliver(self, claim: Claim) -> Attempt:
        records = self._outbox.read_page(claim.run, claim.next_seq, self._batch)
        first = claim.next_seq
        if not records:  # caught up (a stale due mark): just end the claim
            ok = self._outbox.acknowledge(claim, first)
            return Attempt(claim.subscription, claim.run, first, first - 1, acknowledged=ok)
        last = records[-1].seq
        error = self._post(claim, push_body(self._tenant, claim.subscription, claim.run, records))
        if error is None:
            ok = self._outbox.acknowledge(claim, last + 1)
            return Attempt(claim.subscription, claim.run, first, last, acknowledged=ok)
        base, cap = self._backoff
        ok = self._outbox.delivery_failed(claim, error, base=base, cap=cap)
        return Attempt(
            claim.subscription, claim.run, first, last, error, claim.attempts + 1, acknowledged=ok
        )

    def _post(self, claim: Claim, body: bytes) -> str | None:
        """POST ``body``; None on a 2xx answer, else what went wrong (one line)."""
        headers = {"Content-Type": "application/json", "User-Agent": USER_AGENT}
        if claim.token is not None:
            headers["Authorization"] = f"Bearer {claim.token}"
        try:
            resp = self._http.post(
                claim.url,
                data=body,
                headers=headers,
                timeout=(self._timeout, self._timeout),
                allow_redirects=False,
            )
            resp.close()
        except self._requests.RequestException as e:
            return f"{type(e).__name__}: {_reason(e)}"
        if 200 <= resp.status_code < 300:
            return None
        return f"HTTP {resp.status_code} {resp.reason or ''}".rstrip()

    def run(
        self,
        *,
        once: bool = False,
        poll: float = 1.0,
        stop: threading.Event | None = None,
        report: Callable[[Attempt], None] | None = None,
    ) -> int:
        """Deliver until nothing is due (``once``) or until ``stop`` is set, waiting ``poll``
        seconds when nothing is due; ``report`` is called after each attempt. Returns the
        number of attempts."""
        stop = stop or threading.Event()
        count = 0
        while not stop.is_set():
            attempt = self.step()
            if attempt is None:
                if once:
                    break
                stop.wait(poll)
                continue
            count += 1
            if report is not None:
                report(attempt)
        return count


__all__ = [
    "BACKOFF_BASE",
    "BACKOFF_CAP",
    "DEFAULT_BATCH",
    "DEFAULT_TIMEOUT",
    "Attempt",
    "Deliverer",
    "claim_ttl",
    "outbox_of",
    "push_body",
    "record_object",
]
