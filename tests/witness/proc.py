"""A witness server process for the witness's fault, race and hostile-input tests.

tests/witness/test_faults.py runs this file as a separate OS process, so that races are between
real processes (each with its own state handle and database connection) and so that a server
can be killed with SIGKILL::

    sys.executable tests/witness/proc.py (--db PATH | --postgres CONNINFO) [options]

It builds the application with :func:`witness.server.make_app` and serves it with aiohttp's
``AppRunner``/``TCPSite``; it does not use ``witness/cli.py``. The state must exist (created and
configured by the test); it is opened with ``create=False``.

Options:

``--db PATH`` / ``--postgres CONNINFO``
    The witness state (exactly one): a SQLite file or a PostgreSQL connection string.
``--host H`` (default ``127.0.0.1``), ``--port N`` (default 0: an ephemeral port)
    Where to listen.
``--name NAME``
    The witness's key name (default :data:`DEFAULT_NAME`).
``--ed-seed HEX``
    The 32-byte seed of the witness's Ed25519 cosignature/v1 key (0x04). Required.
``--ml-seed HEX``
    The 32-byte seed of an ML-DSA-44 subtree/v1 key (0x06); enables sign-subtree.
``--read-timeout S``
    Seconds a client has to deliver a body (default: the server's).
``--log PATH``
    Append the server's JSON request lines (logger ``witness.server``, level INFO) to PATH,
    one per line; an internal error adds its traceback on the following lines.
``--max-seconds S``
    Exit after S seconds whatever happens (default 600): a guard against stray processes. The
    process also exits when its parent process goes away.

Output: when the socket is listening, exactly one line on stdout, written in one system call::

    {"address": "http://127.0.0.1:PORT", "pid": PID}

Nothing else is ever written to stdout. Errors go to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys

from aiohttp import web

from tlog.cosignature import CosignatureV1Signer, SubtreeV1Signer
from witness.open import open_state
from witness.server import DEFAULT_READ_TIMEOUT, make_app

DEFAULT_NAME = "witness.example/faults"
"""The witness key name when ``--name`` is not given."""

_WATCH_INTERVAL = 0.5  # seconds between checks that the parent process is still there


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--db")
    where.add_argument("--postgres")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--name", default=DEFAULT_NAME)
    p.add_argument("--ed-seed", required=True)
    p.add_argument("--ml-seed")
    p.add_argument("--read-timeout", type=float)
    p.add_argument("--log")
    p.add_argument("--max-seconds", type=float, default=600.0)
    return p.parse_args(argv)


async def serve(args: argparse.Namespace) -> None:
    """Open the state, listen, announce the address, then run until the guard ends it."""
    signers: list[CosignatureV1Signer | SubtreeV1Signer] = [
        CosignatureV1Signer(args.name, bytes.fromhex(args.ed_seed))
    ]
    if args.ml_seed:
        signers.append(SubtreeV1Signer(args.name, bytes.fromhex(args.ml_seed)))
    if args.log:
        handler = logging.FileHandler(args.log, encoding="utf-8")
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger = logging.getLogger("witness.server")
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False
    state = open_state(db=args.db, postgres=args.postgres, create=False)
    read_timeout = DEFAULT_READ_TIMEOUT if args.read_timeout is None else args.read_timeout
    app = make_app(state, signers, name=args.name, read_timeout=read_timeout)
    # No access log: the JSON request lines say everything, and a fault test sends thousands.
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, args.host, args.port)
        await site.start()
        host, port = runner.addresses[0][:2]
        line = json.dumps({"address": f"http://{host}:{port}", "pid": os.getpid()}) + "\n"
        os.write(1, line.encode())
        parent = os.getppid()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + args.max_seconds
        while loop.time() < deadline and os.getppid() == parent:
            await asyncio.sleep(_WATCH_INTERVAL)
    finally:
        await runner.cleanup()
        state.close()


def main(argv: list[str] | None = None) -> int:
    asyncio.run(serve(parse_args(argv)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
