"""``tlog-store serve`` and ``tlog-store tiles``: a store's logs in public as C2SP tlog-tiles
(docs/tiles.md), served over HTTP (:mod:`store.tileserver`) or written as files
(:mod:`store.tilefiles`). Exit statuses are ``tlog-store``'s.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import TYPE_CHECKING

from store import cliparser as ui
from store.api import JournalStore
from store.cliparser import PLAIN, verb
from store.open import open_store
from store.tilefiles import publish_tiles
from store.tilereads import TileReads
from store.tiles import StoreLog, tile_reads
from tlog.cli.run import Verb, decimal_arg, utf8_arg, write_error, write_stdout
from tlog.errors import UsageError

if TYPE_CHECKING:
    from store.tileserver import TileServer  # aiohttp: imported only when serve runs

__all__ = ["tiles_verbs"]

EXIT_OK = 0


DEFAULT_LISTEN = "127.0.0.1:8080"


def serve_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--listen",
        default=DEFAULT_LISTEN,
        metavar="HOST:PORT",
        help=f"address to serve on (default {DEFAULT_LISTEN}; port 0 picks one)",
    )
    p.add_argument(
        "--cache-mb",
        metavar="N",
        help="megabytes of full tiles and bundles kept in memory (default 64; 0: none)",
    )
    p.add_argument(
        "--workers",
        metavar="N",
        help="server processes sharing the address, each with its own connections and cache "
        "(default 1; one per core uses them all)",
    )
    p.add_argument(
        "--readers",
        metavar="N",
        help="PostgreSQL: store connections per tenant, how many of its reads run at once "
        "(default 4); SQLite reads run on the server's event loop, one connection per tenant",
    )


def tiles_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", required=True, metavar="DIR", help="directory of the tile tree")


def _cmd_serve(args: argparse.Namespace) -> int:
    from store.tileserver import (  # noqa: PLC0415 - aiohttp
        DEFAULT_CACHE_BYTES,
        DEFAULT_READERS,
        TileServer,
        make_app,
        request_logger,
        serve,
        serve_workers,
    )

    if ui.chosen_tenant(args) is not None:
        raise UsageError(
            "serve serves every tenant's log, each under /<tenant>/: --tenant does not apply"
        )
    host, port = ui.parse_listen(args.listen)
    db, pg = ui.store_location(args)
    cache = (
        DEFAULT_CACHE_BYTES
        if args.cache_mb is None
        else decimal_arg(args.cache_mb, "--cache-mb", 0, 1 << 20) << 20
    )
    readers = (
        DEFAULT_READERS if args.readers is None else decimal_arg(args.readers, "--readers", 1, 64)
    )
    workers = 1 if args.workers is None else decimal_arg(args.workers, "--workers", 1, 64)
    handles: list[JournalStore] = []

    def open_handle(tenant: str) -> JournalStore:
        handle = open_store(db=db, postgres=pg, tenant=tenant)
        handles.append(handle)
        return handle

    def reads() -> TileReads:
        # Any handle lists every tenant: the first one opened, or one for the listing.
        return tile_reads(handles[0] if handles else open_handle("default"))

    def tile_server() -> TileServer:
        return TileServer(
            lambda: reads().tenants(),
            lambda tenant: StoreLog(open_handle(tenant)),
            cache_bytes=cache,
            readers=readers,
            reads_in_loop=pg is None,
            log_tenants=lambda: reads().log_tenants(),
            logger=request_logger(),
        )

    def announce(urls: list[str]) -> None:
        write_stdout("".join(f"listening on {u}\n" for u in urls))

    with ui.open_store_of(args):
        pass  # the store is there, and is ours: checked before listening
    if workers > 1:  # each worker opens its own handles (none is open here: a fork copies none)
        return serve_workers(tile_server, host=host, port=port, workers=workers, announce=announce)
    try:
        serve(make_app(tile_server()), host=host, port=port, announce=announce)
    finally:
        for h in handles:
            h.close()
    return EXIT_OK


def _cmd_tiles(args: argparse.Namespace) -> int:
    out = utf8_arg(args.out, "--out")
    db, pg = ui.store_location(args)
    only = ui.chosen_tenant(args)
    results = []
    with ui.open_store_of(args) as store:
        tenants = tile_reads(store).tenants()
        logs = tile_reads(store).log_tenants()
    if only is not None:
        if only not in tenants:
            why = "no kept checkpoint yet" if only in logs else "no log"
            raise UsageError(
                f"the tenant {only!r} has {why}: nothing to write (keep a checkpoint with"
                " 'tlog-store checkpoint' or 'publish')"
            )
        tenants, logs = [only], [only]
    # A tenant whose log has nothing published yet is not an error, but a silent skip looks
    # like a tenant lost: say so, on stderr, so that stdout (and --json) stays the results.
    for tenant in sorted(set(logs) - set(tenants)):
        write_error("tlog-store", "tiles", f"skipped tenant {tenant}: no kept checkpoint")
    for tenant in tenants:
        with open_store(db=db, postgres=pg, tenant=tenant) as handle:
            done = publish_tiles(StoreLog(handle), os.path.join(out, tenant))
        results.append((tenant, done))
        if not args.json:
            write_stdout(f"{tenant} {done.old_size} -> {done.size}: {done.written} files\n")
    if args.json:
        write_stdout(
            json.dumps(
                {
                    "tenants": [
                        {
                            "tenant": t,
                            "old_size": d.old_size,
                            "size": d.size,
                            "written": d.written,
                        }
                        for t, d in results
                    ]
                },
                indent=2,
                ensure_ascii=False,
            )
            + "\n"
        )
    return EXIT_OK


def tiles_verbs() -> tuple[Verb, Verb]:
    """The ``serve`` and ``tiles`` verbs of ``tlog-store``."""
    return (
        verb(
            "serve",
            "serve every tenant's log as tlog-tiles (HTTP)",
            SERVE,
            _cmd_serve,
            serve_args,
            PLAIN,
        ),
        verb(
            "tiles",
            "write every tenant's log (or --tenant T's) as tlog-tiles files",
            TILES,
            _cmd_tiles,
            tiles_args,
        ),
    )


SERVE = """\
Serves every tenant's log read-only over HTTP as C2SP tlog-tiles (docs/tiles.md), until
SIGTERM or SIGINT:
  GET /<tenant>/checkpoint                 the latest kept checkpoint and its cosignatures
  GET /<tenant>/tile/<L>/<N>[.p/<W>]       a hash tile (256 hashes when full)
  GET /<tenant>/tile/entries/<N>[.p/<W>]   an entry bundle: the sealed heads, uint16_be(32) ||
                                           head each
Only what the latest kept checkpoint covers is served (404 beyond it; 400 for a tile path
that is not canonical); keep checkpoints with 'tlog-store checkpoint' or 'publish'. Full tiles
are sent with Cache-Control: public, max-age=31536000, immutable; the checkpoint and partial
tiles with max-age=5; every answer with Access-Control-Allow-Origin: * (a monitor in a
browser may read the log). A new checkpoint is served within a second. The full tiles and
bundles served last are kept in memory (--cache-mb). Prints 'listening on URL' once it
accepts connections, and one JSON line per request on standard error. Every tenant of the
store that keeps a checkpoint is served (--tenant is refused: it would not narrow that).
Needs the 'store' extra (aiohttp).

examples:
  tlog-store serve --db journal.db --listen 127.0.0.1:8080
  curl http://127.0.0.1:8080/default/checkpoint
"""

TILES = """\
Writes every tenant's log as tlog-tiles files under DIR/<tenant>/ -- the same paths and bytes
'tlog-store serve' answers -- for a static web server (docs/embedder-guide.md section 11 has
an nginx configuration with the headers tlog-tiles asks for). Later runs extend the tree from
the checkpoint DIR holds: the tiles and bundles of every checkpoint kept since, then the
latest checkpoint. Each file is written to a temporary file, fsynced and renamed, and the
checkpoint last, once every tile it needs is durable: a crash leaves the previous tree, which
the next run completes. A file already there with other bytes, or a DIR checkpoint of another
origin, a larger size or another root for its size, stops the run with status 1 and writes
nothing over it. Prints 'TENANT OLD_SIZE -> SIZE: N files' per tenant, N the tiles and
bundles written (the checkpoint file is not counted); --json prints {"tenants": [{tenant,
old_size, size, written}]}. Every tenant of the store that keeps a checkpoint is published;
one that keeps none yet is skipped, with 'tlog-store: tiles: skipped tenant T: no kept
checkpoint' on standard error. With --tenant T only T is (status 2 when it keeps none).

examples:
  tlog-store tiles --db journal.db --out /srv/www/journal
"""
