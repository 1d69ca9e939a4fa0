"""``tlog-store subscribe``, ``subscriptions``, ``unsubscribe`` and ``deliver``: the journal as
an outbox, its records pushed to subscribed receivers (:mod:`store.deliver`). Exit statuses are
``tlog-store``'s.
"""

from __future__ import annotations

import argparse
from typing import Any

from store import cliparser as ui
from store.cliparser import PLAIN, verb
from store.deliver import DEFAULT_BATCH, DEFAULT_TIMEOUT, Deliverer, outbox_of
from tlog.cli.run import Verb, decimal_arg, utf8_arg, write_stdout
from tlog.errors import UsageError

__all__ = ["outbox_verbs"]


def subscribe_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("url", metavar="URL", help="the receiver: an http:// or https:// URL")
    p.add_argument("--run", metavar="RUN", help="one run's records (default: every run's)")
    p.add_argument("--token-file", metavar="F", help="a file holding the receiver's bearer token")


def unsubscribe_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("id", metavar="ID", help="the subscription's ID")


def deliver_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--once", action="store_true", help="stop when nothing is due")
    p.add_argument("--batch", metavar="N", help="records per request (default 100)")
    p.add_argument("--timeout", metavar="S", help="seconds to connect, and to wait (default 10)")
    p.add_argument("--poll", metavar="S", help="seconds between looks when idle (default 1)")


SUBSCRIBE = """\
Subscribes the receiver at URL to the tenant's records -- of one run with --run RUN, else of
every run -- and prints the subscription's ID. 'tlog-store deliver' then POSTs every record of
that scope to URL as JSON, those written before too, in seq order per run, at least once: a
record is sent again until the receiver answers 2xx, and after a worker's crash a receiver may
see records again that it had taken (deduplicate by run and seq). --token-file F holds a bearer
token (RFC 6750 characters) sent as 'Authorization: Bearer TOKEN'; it is kept in the store and
never printed. URL is http:// or https:// with a host, without user, password or fragment.
--json prints id, url, run and token (true or false).

examples:
  tlog-store subscribe https://hooks.example/journal --token-file hook.token
  tlog-store subscribe http://127.0.0.1:8080/ --run order-1842
"""

SUBSCRIPTIONS = """\
Lists the tenant's subscriptions by ID, one per line: 'ID SCOPE URL', SCOPE being 'tenant' or
'run RUN', then 'token' when it has one, then for each delivery that is failing, indented:
'RUN next SEQ attempts N: LAST ERROR'. --json prints one object with the subscriptions (id,
url, run, token, created_at, deliveries: run, next_seq, attempts, next_attempt_at,
last_error).

examples:
  tlog-store subscriptions
"""

UNSUBSCRIBE = """\
Deletes subscription ID and its delivery cursors; a delivery in flight is not acknowledged.
Exit 2 when there is no such subscription.

examples:
  tlog-store unsubscribe 3
"""

DELIVER = """\
Pushes the subscribed records to their receivers, as JSON (the body is documented in
store/deliver.py: subscription, tenant, run and records, each with seq, hash, prev_hash, raw,
kind and signature when signed), one request per run and at most --batch N records (default
100). A 2xx answer moves the subscription's cursor past them; anything else -- another status,
a refused connection, no answer within --timeout S (default 10) -- is retried later, after
1, 2, 4 ... seconds (at most 300) of backoff. Prints a line per request: 'delivered ID RUN
FIRST-LAST' or 'failed ID RUN FIRST-LAST: ERROR (attempt N)'. Runs until interrupted, looking
for due deliveries every --poll S seconds (default 1) when idle; --once stops when nothing is
due. Several workers may run on one PostgreSQL store: no two send one run's records to one
receiver at once. On SQLite one is enough (its writes are serialised).

examples:
  tlog-store deliver --once
  tlog-store deliver --postgres postgresql://app@db/journal --key log.key --batch 20
"""


# --- the outbox --------------------------------------------------------------------------------


def _cmd_subscribe(args: argparse.Namespace) -> int:
    url = utf8_arg(args.url, "URL")
    run = None if args.run is None else ui.parse_run(args.run)
    token = None if args.token_file is None else ui.parse_token_file(args.token_file)
    with ui.open_store_of(args) as store:
        sub = outbox_of(store).subscribe(url, run=run, token=token)
    as_json = {"id": sub, "url": url, "run": run, "token": token is not None}
    return ui.output(args, as_json, f"{sub}\n")


def _cmd_subscriptions(args: argparse.Namespace) -> int:
    with ui.open_store_of(args) as store:
        outbox = outbox_of(store)
        subs = outbox.subscriptions()
        failing = [d for d in outbox.deliveries() if d.attempts > 0]
    listed: list[dict[str, Any]] = []
    lines = []
    for sub in subs:
        mine = [d for d in failing if d.subscription == sub.id]
        scope = "tenant" if sub.run is None else f"run {sub.run}"
        lines.append(f"{sub.id} {scope} {sub.url}" + (" token" if sub.token else "") + "\n")
        lines += [
            f"  {d.run} next {d.next_seq} attempts {d.attempts}: {d.last_error}\n" for d in mine
        ]
        listed.append(
            {
                "id": sub.id,
                "url": sub.url,
                "run": sub.run,
                "token": sub.token is not None,
                "created_at": sub.created_at,
                "deliveries": [
                    {
                        "run": d.run,
                        "next_seq": d.next_seq,
                        "attempts": d.attempts,
                        "next_attempt_at": d.next_attempt_at,
                        "last_error": d.last_error,
                    }
                    for d in mine
                ],
            }
        )
    return ui.output(args, {"subscriptions": listed}, "".join(lines))


def _cmd_unsubscribe(args: argparse.Namespace) -> int:
    sub = decimal_arg(args.id, "ID", 1)
    with ui.open_store_of(args) as store:
        if not outbox_of(store).unsubscribe(sub):
            raise UsageError(f"no subscription {sub}")
    return 0


def _cmd_deliver(args: argparse.Namespace) -> int:
    batch = DEFAULT_BATCH if args.batch is None else decimal_arg(args.batch, "--batch", 1)
    timeout = DEFAULT_TIMEOUT if args.timeout is None else decimal_arg(args.timeout, "--timeout", 1)
    poll = 1 if args.poll is None else decimal_arg(args.poll, "--poll", 1)
    with ui.open_store_of(args) as store, Deliverer(store, batch=batch, timeout=timeout) as worker:
        worker.run(once=args.once, poll=poll, report=lambda a: write_stdout(a.summary() + "\n"))
    return 0


def outbox_verbs() -> tuple[Verb, ...]:
    """The outbox's verbs of ``tlog-store``."""
    return (
        verb(
            "subscribe",
            "subscribe a receiver to records",
            SUBSCRIBE,
            _cmd_subscribe,
            subscribe_args,
        ),
        verb("subscriptions", "list subscriptions", SUBSCRIPTIONS, _cmd_subscriptions),
        verb(
            "unsubscribe",
            "delete a subscription",
            UNSUBSCRIBE,
            _cmd_unsubscribe,
            unsubscribe_args,
            PLAIN,
        ),
        verb(
            "deliver",
            "push subscribed records to receivers",
            DELIVER,
            _cmd_deliver,
            deliver_args,
            PLAIN,
        ),
    )
